/* Checksums, the sampler RNG, whole-file reads and atomic file writes. */
#define _POSIX_C_SOURCE 200809L
#include "train/train.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t coda_crc32(uint32_t crc, const void *p, size_t n) {
  /* Four bits at a time through a 16-entry table (constant, no state). */
  static const uint32_t tab[16] = {
      0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
      0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
      0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu};
  const unsigned char *b = p;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= b[i];
    crc = (crc >> 4) ^ tab[crc & 15];
    crc = (crc >> 4) ^ tab[crc & 15];
  }
  return ~crc;
}

uint64_t coda_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t coda_rng_below(uint64_t *s, uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
  for (;;) {
    uint64_t r = coda_rng_next(s);
    if (r < limit) return r % n;
  }
}

double coda_rng_uniform(uint64_t *s) {
  return (double)(coda_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

coda_status coda_write_atomic(coda_context ctx, const char *path,
                              const void *const *parts, const size_t *sizes,
                              int nparts) {
  if (!path || !*path) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "empty output path");
  size_t len = strlen(path);
  char *tmp = malloc(len + 16);
  if (!tmp) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".tmp.XXXXXX", 12);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot create a temporary file: %s", path,
                              strerror(errno));
    free(tmp);
    return s;
  }
  for (int i = 0; i < nparts; i++) {
    const unsigned char *b = parts[i];
    size_t left = sizes[i];
    while (left > 0) {
      ssize_t w = write(fd, b, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return s;
      }
      b += w;
      left -= (size_t)w;
    }
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: fsync/close failed: %s", tmp, strerror(errno));
    unlink(tmp);
    free(tmp);
    return s;
  }
  if (rename(tmp, path) != 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "cannot rename %s to %s: %s", tmp, path,
                              strerror(errno));
    unlink(tmp);
    free(tmp);
    return s;
  }
  free(tmp);
  /* Make the rename itself durable. */
  char *dir = strdup(path);
  if (dir) {
    char *slash = strrchr(dir, '/');
    if (slash) {
      if (slash == dir) slash[1] = '\0'; else *slash = '\0';
    } else {
      strcpy(dir, ".");
    }
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
    free(dir);
  }
  return CODA_OK;
}

/* Reads a whole file; never trusts anything but what was read. */
coda_status coda_read_file(coda_context ctx, const char *path, unsigned char **buf, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  unsigned char *b = malloc(cap);
  while (b) {
    if (len == cap) {
      unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
      if (!nb) { free(b); b = NULL; break; }
      b = nb;
      cap *= 2;
    }
    size_t r = fread(b + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (!b) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  if (err) {
    free(b);
    return coda_fail(ctx, CODA_ERR_IO, "%s: read error", path);
  }
  *buf = b;
  *n = len;
  return CODA_OK;
}
