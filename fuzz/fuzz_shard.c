/* libFuzzer harness for the token-shard reader (coda_shard_read in
 * src/data/shards.c). The reader only takes a path, so each input is
 * written to a private temporary file and read back twice: as is, and with
 * the CRC field (bytes 28..31) recomputed over the payload, so mutations
 * also reach the checks behind the checksum (token range, vocab). A
 * rejected input must give a status with a message and no tokens; an
 * accepted one must match an independent decoding of the bytes: magic,
 * version 1, width 2 or 4, 32 + count·width = file size, every token below
 * vocab. Any violation aborts.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] */
#define _POSIX_C_SOURCE 200809L
#include "io/io.h"
#include "data/data.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static coda_context ctx;
static char path[4096];

static void fail(const char *what) {
  fprintf(stderr, "fuzz_shard: %s\n", what);
  abort();
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_file(const uint8_t *d, size_t n) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_CREAT, 0600);
  if (fd < 0) fail("cannot write the temporary file");
  size_t at = 0;
  while (at < n) {
    ssize_t w = write(fd, d + at, n - at);
    if (w <= 0) fail("short write");
    at += (size_t)w;
  }
  close(fd);
}

static void one(const uint8_t *d, size_t n) {
  put_file(d, n);
  uint32_t *tok = (uint32_t *)(uintptr_t)1; /* the reader must reset it */
  uint64_t count = 0;
  uint32_t vocab = 0;
  coda_status s = coda_shard_read(ctx, path, &tok, &count, &vocab);
  if (s != CODA_OK) {
    if (tok) fail("failed read returned tokens");
    if (s != CODA_ERR_IO && s != CODA_ERR_OUT_OF_MEMORY) fail("unexpected status");
    if (!coda_last_error(ctx)[0]) fail("failure without a message");
    return;
  }
  /* Independent decoding of what was accepted. */
  if (n < 32 || memcmp(d, "CODATOKS", 8) || le32(d + 8) != 1) fail("bad header accepted");
  uint32_t w = le32(d + 12);
  uint64_t cnt = (uint64_t)le32(d + 16) | (uint64_t)le32(d + 20) << 32;
  if (w != 2 && w != 4) fail("bad width accepted");
  if (cnt != count || le32(d + 24) != vocab || vocab == 0) fail("header fields differ");
  if ((n - 32) % w || (n - 32) / w != cnt) fail("size mismatch accepted");
  if (coda_crc32(0, d + 32, n - 32) != le32(d + 28)) fail("checksum mismatch accepted");
  for (uint64_t i = 0; i < cnt; i++) {
    uint32_t v = w == 2 ? (uint32_t)d[32 + 2 * i] | (uint32_t)d[33 + 2 * i] << 8
                        : le32(d + 32 + 4 * i);
    if (v != tok[i]) fail("token differs");
    if (v >= vocab) fail("token outside vocab accepted");
  }
  free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) {
    if (coda_context_create(NULL, &ctx) != CODA_OK) abort();
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/fuzz_shard.%ld.tok", dir && *dir ? dir : "/tmp", (long)getpid());
  }
  one(data, size);
  if (size >= 32) { /* again with a correct checksum */
    uint8_t *c = malloc(size);
    if (!c) abort();
    memcpy(c, data, size);
    uint32_t crc = coda_crc32(0, c + 32, size - 32);
    for (int i = 0; i < 4; i++) c[28 + i] = (uint8_t)(crc >> (8 * i));
    one(c, size);
    free(c);
  }
  unlink(path);
  return 0;
}
