/* CRC-32, bounded whole-file reads and atomic file writes. */
#define _POSIX_C_SOURCE 200809L
#include "io/io.h"
#include "base/rng.h" /* the temporary names */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

uint32_t coda_crc32(uint32_t crc, const void *p, size_t n) {
  /* zlib's CRC-32 (the same polynomial and conventions as before: files
   * written by either read with the other) */
  return (uint32_t)crc32_z((uLong)crc, (const Bytef *)p, n);
}

/* The temporary name of a save to path: path + ".tmp." + 6 characters of
 * [A-Za-z0-9]. */
#define TMP_SUFFIX ".tmp."
#define TMP_RAND 6
static const char tmp_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* 1 when name is base + TMP_SUFFIX + TMP_RAND alphabet characters: a
 * temporary file of a save to base that a kill left behind. */
static int is_own_temp(const char *name, const char *base) {
  size_t bl = strlen(base), sl = sizeof TMP_SUFFIX - 1;
  if (strlen(name) != bl + sl + TMP_RAND || memcmp(name, base, bl) ||
      memcmp(name + bl, TMP_SUFFIX, sl))
    return 0;
  for (const char *c = name + bl + sl; *c; c++)
    if (!strchr(tmp_alphabet, *c)) return 0;
  return 1;
}

/* Removes the regular files of the temporary-name pattern of path in its
 * directory (left by a save that was killed); nothing else. */
static void remove_stale_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t dl = slash ? (size_t)(slash - path) : 0;
  char *dir = malloc(dl + 2);
  if (!dir) return;
  if (slash) { memcpy(dir, path, dl ? dl : 1); dir[dl ? dl : 1] = '\0'; }
  else strcpy(dir, ".");
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!is_own_temp(e->d_name, base)) continue;
      size_t L = strlen(dir) + strlen(e->d_name) + 2;
      char *p = malloc(L);
      if (!p) break;
      snprintf(p, L, "%s/%s", dir, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) unlink(p);
      free(p);
    }
    closedir(d);
  }
  free(dir);
}

/* Creates a new temporary file next to path, mode 0666 less the umask
 * (mkstemp would make it 0600). */
static int create_temp(const char *path, char *tmp) {
  size_t len = strlen(path);
  static unsigned long counter = 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                  ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)tmp;
  for (int attempt = 0; attempt < 100; attempt++) {
    seed += ++counter;
    uint64_t r = coda_rng_next(&seed);
    memcpy(tmp, path, len);
    memcpy(tmp + len, TMP_SUFFIX, sizeof TMP_SUFFIX - 1);
    char *q = tmp + len + sizeof TMP_SUFFIX - 1;
    for (int k = 0; k < TMP_RAND; k++, r /= 62) q[k] = tmp_alphabet[r % 62];
    q[TMP_RAND] = '\0';
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

coda_status coda_atomic_open(coda_context ctx, const char *path, coda_atomic_file *f) {
  f->fd = -1;
  f->tmp = NULL;
  f->path = path;
  if (!path || !*path) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "empty output path");
  size_t len = strlen(path);
  f->tmp = malloc(len + sizeof TMP_SUFFIX + TMP_RAND + 1);
  if (!f->tmp) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  remove_stale_temps(path);
  f->fd = create_temp(path, f->tmp);
  if (f->fd < 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot create a temporary file: %s", path,
                              strerror(errno));
    free(f->tmp);
    f->tmp = NULL;
    return s;
  }
  return CODA_OK;
}

void coda_atomic_abort(coda_atomic_file *f) {
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) unlink(f->tmp);
  free(f->tmp);
  f->fd = -1;
  f->tmp = NULL;
}

coda_status coda_atomic_write_at(coda_context ctx, coda_atomic_file *f, uint64_t off,
                                 const void *buf, size_t n) {
  const unsigned char *b = buf;
  while (n > 0) {
    ssize_t w = pwrite(f->fd, b, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: write failed: %s", f->tmp,
                                w == 0 ? "no space written" : strerror(errno));
      coda_atomic_abort(f);
      return s;
    }
    b += w;
    off += (uint64_t)w;
    n -= (size_t)w;
  }
  return CODA_OK;
}

coda_status coda_atomic_commit(coda_context ctx, coda_atomic_file *f) {
  if (fsync(f->fd) != 0 || close(f->fd) != 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: fsync/close failed: %s", f->tmp,
                              strerror(errno));
    f->fd = -1;
    coda_atomic_abort(f);
    return s;
  }
  f->fd = -1;
  if (rename(f->tmp, f->path) != 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "cannot rename %s to %s: %s", f->tmp, f->path,
                              strerror(errno));
    coda_atomic_abort(f);
    return s;
  }
  free(f->tmp);
  f->tmp = NULL;
  /* Make the rename itself durable. */
  char *dir = strdup(f->path);
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

coda_status coda_write_atomic(coda_context ctx, const char *path,
                              const void *const *parts, const size_t *sizes,
                              int nparts) {
  coda_atomic_file f;
  coda_status s = coda_atomic_open(ctx, path, &f);
  uint64_t off = 0;
  for (int i = 0; i < nparts && !s; i++) {
    s = coda_atomic_write_at(ctx, &f, off, parts[i], sizes[i]);
    off += sizes[i];
  }
  return s ? s : coda_atomic_commit(ctx, &f);
}

const char *coda_file_kind(unsigned mode) {
  const mode_t m = (mode_t)mode;
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISSOCK(m) ? "a socket"
         : S_ISREG(m) ? "a regular file" : "not a file";
}

coda_status coda_open_regular(coda_context ctx, const char *path, uint64_t max, int *fd_out,
                              uint64_t *size) {
  *fd_out = -1;
  if (!path || !*path) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "empty input path");
  /* O_NONBLOCK: a FIFO or device must not block the open; it is refused
   * below. */
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return coda_fail(ctx, CODA_ERR_IO, "%s: is %s, not a regular file", path,
                     coda_file_kind((unsigned)st.st_mode));
  }
  if ((uint64_t)st.st_size > max || (uint64_t)st.st_size > SIZE_MAX / 2) {
    close(fd);
    return coda_fail(ctx, CODA_ERR_IO, "%s: %llu bytes is larger than the limit of %llu for this "
                     "kind of file", path, (unsigned long long)st.st_size,
                     (unsigned long long)max);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *fd_out = fd;
  *size = (uint64_t)st.st_size;
  return CODA_OK;
}

coda_status coda_read_fd(coda_context ctx, int fd, const char *path, uint64_t off, void *dst,
                         size_t n) {
  unsigned char *b = dst;
  while (n > 0) {
    ssize_t r = pread(fd, b, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return coda_fail(ctx, CODA_ERR_IO, "%s: read error: %s", path, strerror(errno));
    if (r == 0)
      return coda_fail(ctx, CODA_ERR_IO, "%s: truncated while reading (the file shrank)", path);
    b += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return CODA_OK;
}

/* Reads a whole regular file of at most max bytes; never trusts anything
 * but what was read. */
coda_status coda_read_file_max(coda_context ctx, const char *path, uint64_t max,
                               unsigned char **buf, size_t *n) {
  *buf = NULL;
  *n = 0;
  int fd;
  uint64_t size;
  coda_status s = coda_open_regular(ctx, path, max, &fd, &size);
  if (s) return s;
  unsigned char *b = malloc(size ? (size_t)size : 1);
  if (!b) {
    close(fd);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory (%llu bytes)", path,
                     (unsigned long long)size);
  }
  s = coda_read_fd(ctx, fd, path, 0, b, (size_t)size);
  close(fd);
  if (s) {
    free(b);
    return s;
  }
  *buf = b;
  *n = (size_t)size;
  return CODA_OK;
}

coda_status coda_read_file(coda_context ctx, const char *path, unsigned char **buf, size_t *n) {
  return coda_read_file_max(ctx, path, UINT64_MAX, buf, n);
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of dir whose names end in suffix (hidden names left out), in
 * name order; each a regular file once links are followed. With `strict`
 * the first entry that is not one (a dangling or looping link, a
 * subdirectory, a FIFO, ...) is refused by name: skipping it would
 * prepare part of the corpus without a word. Without, such entries are
 * left out. Names are sorted before they are looked at, so the entry
 * named does not depend on readdir's order. */
coda_status coda_list_dir(coda_context ctx, const char *dir, const char *suffix, int strict,
                          char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
  char **names = NULL;
  size_t nn = 0, cap = 0;
  struct dirent *e;
  coda_status s = CODA_OK;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !ends_with(e->d_name, suffix)) continue;
    size_t L = strlen(dir) + strlen(e->d_name) + 2;
    char *p = malloc(L);
    if (!p) { s = CODA_ERR_OUT_OF_MEMORY; break; }
    snprintf(p, L, "%s/%s", dir, e->d_name);
    if (nn == cap) {
      cap = cap ? 2 * cap : 16;
      char **nb = realloc(names, cap * sizeof *nb);
      if (!nb) { free(p); s = CODA_ERR_OUT_OF_MEMORY; break; }
      names = nb;
    }
    names[nn++] = p;
  }
  closedir(d);
  if (s) s = coda_fail(ctx, s, "out of memory listing %s", dir);
  if (!s && nn > 1) qsort(names, nn, sizeof *names, cmp_name); /* readdir order varies */
  size_t kept = 0;
  for (size_t i = 0; i < nn; i++) {
    struct stat st, lst;
    const int found = stat(names[i], &st) == 0, err = errno;
    if (!s && found && S_ISREG(st.st_mode)) {
      names[kept++] = names[i];
      continue;
    }
    if (!s && strict) {
      if (found)
        s = coda_fail(ctx, CODA_ERR_IO, "%s: is %s, not a regular file", names[i],
                      coda_file_kind((unsigned)st.st_mode));
      else if (err == ENOENT && lstat(names[i], &lst) == 0 && S_ISLNK(lst.st_mode))
        s = coda_fail(ctx, CODA_ERR_IO, "%s: a dangling symbolic link (its target does not "
                      "exist), not a regular file", names[i]);
      else
        s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot stat: %s", names[i], strerror(err));
    }
    free(names[i]);
  }
  if (s) {
    for (size_t i = 0; i < kept; i++) free(names[i]);
    free(names);
    return s;
  }
  *out = names;
  *n = kept;
  return CODA_OK;
}
