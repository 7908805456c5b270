/* Hostile files for the readers, beyond tests/test_train_safetensors.c:
 *  - a safetensors header of 200,000 entries (the name-uniqueness check
 *    was quadratic: 54 s for half as many entries; 1.7 M entries fit the
 *    100 MB header limit): it must be parsed in under 60 s (0.3 s here), and a
 *    duplicate among them found and named;
 *  - shape products past 2^53, duplicate names, overlapping and empty
 *    tensors, metadata that is not a string;
 *  - token shards whose checksum is right but whose contents are not
 *    (token past the vocab, width 3, count that overflows the size). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "io/io.h"
#include "data/data.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static coda_context ctx;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 8-byte length + header + data, into a malloc'ed buffer. */
static unsigned char *st_file(const char *header, const void *data, size_t nd, size_t *n) {
  size_t hl = strlen(header);
  unsigned char *b = malloc(8 + hl + nd + 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, header, hl);
  if (nd) memcpy(b + 8 + hl, data, nd);
  *n = 8 + hl + nd;
  return b;
}

static void expect_st(const char *header, size_t nd, const char *want) {
  unsigned char data[64];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)rand();
  size_t n;
  unsigned char *b = st_file(header, data, nd, &n);
  coda_st_file f;
  coda_status s = coda_st_parse(ctx, b, n, 0, "case", &f);
  if (want) {
    CHECK_MSG(s == CODA_ERR_IO && strstr(coda_last_error(ctx), want), "%s -> %s '%s', want '%s'",
              header, coda_status_string(s), coda_last_error(ctx), want);
  } else {
    CHECK_MSG(s == CODA_OK, "%s -> %s", header, coda_last_error(ctx));
  }
  if (s == CODA_OK) coda_st_free(&f);
  free(b);
}

static void many_entries(void) {
  const int n = 200000;
  size_t cap = (size_t)n * 64 + 16, len = 0;
  char *h = malloc(cap);
  h[len++] = '{';
  /* names in an order that is not sorted; a duplicate near the end */
  for (int i = 0; i < n; i++) {
    int id = (int)(((int64_t)i * 7919) % n);
    len += (size_t)snprintf(h + len, cap - len, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[0],"
                            "\"data_offsets\":[0,0]}", i ? "," : "", id);
  }
  h[len++] = '}';
  h[len] = '\0';
  size_t nb;
  unsigned char *b = st_file(h, NULL, 0, &nb);
  coda_st_file f;
  double t0 = now_s();
  coda_status s = coda_st_parse(ctx, b, nb, 0, "many", &f);
  double dt = now_s() - t0;
  CHECK_MSG(s == CODA_OK, "200k distinct entries: %s", coda_last_error(ctx));
  if (s == CODA_OK) {
    CHECK_EQ_INT(f.n, n);
    CHECK(coda_st_find(&f, "t199999") != NULL);
    coda_st_free(&f);
  }
  free(b);
  /* again with entry n-2 repeating the name of entry 1 (t7919) */
  len = 0;
  h[len++] = '{';
  for (int i = 0; i < n; i++) {
    int id = i == n - 2 ? 7919 : (int)(((int64_t)i * 7919) % n);
    len += (size_t)snprintf(h + len, cap - len, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[0],"
                            "\"data_offsets\":[0,0]}", i ? "," : "", id);
  }
  h[len++] = '}';
  h[len] = '\0';
  b = st_file(h, NULL, 0, &nb);
  double t1 = now_s();
  s = coda_st_parse(ctx, b, nb, 0, "many", &f);
  dt += now_s() - t1;
  CHECK_MSG(s == CODA_ERR_IO && strstr(coda_last_error(ctx), "'t7919' appears twice"),
            "duplicate among 200k: %s", coda_last_error(ctx));
  printf("200k-entry headers parsed in %.2f s\n", dt);
  CHECK_MSG(dt < 60.0, "200k-entry headers took %.1f s", dt);
  free(b);
  free(h);
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A shard file with the given header fields and body; the CRC is right. */
static void expect_shard(uint32_t version, uint32_t width, uint64_t count, uint32_t vocab,
                         const unsigned char *body, size_t nbody, const char *want) {
  unsigned char *b = malloc(32 + nbody);
  memcpy(b, "CODATOKS", 8);
  put32(b + 8, version);
  put32(b + 12, width);
  put32(b + 16, (uint32_t)count);
  put32(b + 20, (uint32_t)(count >> 32));
  put32(b + 24, vocab);
  memcpy(b + 32, body, nbody);
  put32(b + 28, coda_crc32(0, body, nbody));
  char path[128];
  snprintf(path, sizeof path, "test_fault_readers.%d.tok", (int)getpid());
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(b, 1, 32 + nbody, f) == 32 + nbody);
  if (f) fclose(f);
  uint32_t *tok = NULL;
  uint64_t cnt = 0;
  uint32_t voc = 0;
  coda_status s = coda_shard_read(ctx, path, &tok, &cnt, &voc);
  if (want) {
    CHECK_MSG(s == CODA_ERR_IO && strstr(coda_last_error(ctx), want) && !tok,
              "shard (w %u, count %llu, vocab %u) -> %s '%s', want '%s'", width,
              (unsigned long long)count, vocab, coda_status_string(s), coda_last_error(ctx), want);
  } else {
    CHECK_MSG(s == CODA_OK && cnt == count && voc == vocab, "shard -> %s", coda_last_error(ctx));
  }
  free(tok);
  remove(path);
  free(b);
}

int main(void) {
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  srand((unsigned)time(NULL));
  many_entries();

  expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,4096],\"data_offsets\":[0,4]}}", 4,
            "shape overflows");
  expect_st("{\"a\":{\"dtype\":\"F64\",\"shape\":[9007199254740992],\"data_offsets\":[0,8]}}", 8,
            "do not match");
  expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
            "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, "appears twice");
  expect_st("{\"a\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 5, "overlap");
  expect_st("{\"e\":{\"dtype\":\"F64\",\"shape\":[0,7],\"data_offsets\":[0,0]},\"__metadata__\":{}}",
            0, NULL);
  expect_st("{\"__metadata__\":{\"k\":5}}", 0, "expected a string");
  expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
            "non-negative integer");
  expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[18446744073709551615,0]}}",
            0, "integer too large");
  expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
            "too many dimensions");

  unsigned char body[16];
  for (int i = 0; i < 16; i++) body[i] = i % 2 ? 0 : (unsigned char)(rand() % 200);
  expect_shard(1, 2, 8, 256, body, 16, NULL);
  expect_shard(1, 2, 8, 201, body, 16, NULL);
  body[5] = 1; /* token 2 = body[4] | body[5] << 8 >= 256 */
  expect_shard(1, 2, 8, 256, body, 16, "outside vocab");
  expect_shard(1, 3, 5, 256, body, 15, "bad token dtype");
  expect_shard(2, 2, 8, 256, body, 16, "unsupported shard version");
  expect_shard(1, 2, 8, 0, body, 16, "bad vocab");
  expect_shard(1, 2, 8, 70000, body, 16, "bad vocab");
  /* count · width wraps to the body size modulo 2^64 */
  expect_shard(1, 4, (UINT64_C(1) << 62) + 4, 1u << 31, body, 16, "size mismatch");
  expect_shard(1, 2, (UINT64_C(1) << 63) + 8, 256, body, 16, "size mismatch");
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
