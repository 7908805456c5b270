/* safetensors reader/writer: round trip, and rejection of truncated,
 * corrupted and malformed files (never a crash, always CODA_ERR_IO). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "io/io.h"

#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* Builds a file from a header text and a data region. */
static size_t make(unsigned char *out, const char *hdr, const unsigned char *data, size_t dn) {
  size_t hl = strlen(hdr);
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(out + 8, hdr, hl);
  memcpy(out + 8 + hl, data, dn);
  return 8 + hl + dn;
}

static void test_round_trip(coda_context ctx) {
  uint64_t r = 2024;
  float a[6 * 5];
  double b[7];
  int32_t c[3 * 2 * 2];
  uint16_t d[9];
  for (int i = 0; i < 30; i++) a[i] = (float)(coda_rng_uniform(&r) * 2 - 1);
  for (int i = 0; i < 7; i++) b[i] = coda_rng_uniform(&r) * 1e10;
  for (int i = 0; i < 12; i++) c[i] = (int32_t)coda_rng_next(&r);
  for (int i = 0; i < 9; i++) d[i] = (uint16_t)coda_rng_next(&r);
  coda_st_entry e[5] = {
      {"layer.a", "F32", 2, {6, 5}, a},
      {"b \"quoted\"\\name", "F64", 1, {7}, b},
      {"c", "I32", 3, {3, 2, 2}, c},
      {"d", "BF16", 2, {3, 3}, d},
      {"empty", "F32", 2, {0, 4}, a},
  };
  const char *meta[] = {"step", "12", "note", "line\nbreak \"q\" \\ tab\t"};
  char p[512];
  snprintf(p, sizeof p, "%s/rt.safetensors", dir);
  CHECK(coda_st_save(ctx, p, e, 5, meta, 2) == CODA_OK);
  coda_st_file f;
  CHECK(coda_st_load(ctx, p, 1, &f) == CODA_OK);
  CHECK_EQ_INT(f.n, 5);
  CHECK(f.data_start % 8 == 0);
  const char *v = coda_st_meta(&f, "note");
  CHECK(v && !strcmp(v, meta[3]));
  CHECK(coda_st_meta(&f, "step") && !strcmp(coda_st_meta(&f, "step"), "12"));
  for (int i = 0; i < 5; i++) {
    const coda_st_tensor *t = coda_st_find(&f, e[i].name);
    CHECK(t != NULL);
    if (!t) continue;
    CHECK(!strcmp(t->dtype, e[i].dtype));
    CHECK_EQ_INT(t->ndim, e[i].ndim);
    size_t el = 1;
    for (int k = 0; k < t->ndim; k++) {
      CHECK_EQ_INT(t->shape[k], e[i].shape[k]);
      el *= (size_t)e[i].shape[k];
    }
    CHECK(t->end - t->begin == el * coda_st_dtype_size(e[i].dtype));
    CHECK(!memcmp(t->data, e[i].data, el * coda_st_dtype_size(e[i].dtype)));
  }
  CHECK(coda_st_find(&f, "nope") == NULL);

  /* Every truncation and every single-byte corruption of the data region
   * is rejected; header corruptions are rejected or parse to something
   * consistent, never crash. */
  size_t n;
  unsigned char *orig = slurp(p, &n);
  size_t data_start = f.data_start;
  coda_st_free(&f);
  for (size_t cut = 0; cut < n; cut += (cut < 64 ? 1 : 7)) {
    coda_st_file g;
    CHECK(coda_st_parse(ctx, orig, cut, 0, "cut", &g) == CODA_ERR_IO);
  }
  unsigned char *bad = malloc(n);
  for (size_t i = data_start; i < n; i += 3) {
    memcpy(bad, orig, n);
    bad[i] ^= 0x40;
    coda_st_file g;
    CHECK(coda_st_parse(ctx, bad, n, 0, "flip", &g) == CODA_ERR_IO);
  }
  CHECK(strstr(coda_last_error(ctx), "checksum") != NULL);
  for (size_t i = 0; i < data_start; i++) {
    memcpy(bad, orig, n);
    bad[i] ^= 0x04;
    coda_st_file g;
    coda_status s = coda_st_parse(ctx, bad, n, 1, "hdrflip", &g);
    if (s == CODA_OK) coda_st_free(&g); /* e.g. a changed name: still consistent */
    else CHECK(s == CODA_ERR_IO);
  }
  free(bad);
  free(orig);
}

/* coda_st_save_from: the tensors' bytes through a reader give the same
 * file as from memory; a reader that fails leaves no file and its error. */
typedef struct {
  const coda_st_entry *e;
  int calls, fail_at;
} mem_reader;

static coda_status read_mem(void *user, int i, uint64_t off, void *dst, size_t n) {
  mem_reader *r = user;
  if (++r->calls == r->fail_at) return CODA_ERR_IO;
  memcpy(dst, (const unsigned char *)r->e[i].data + off, n);
  return CODA_OK;
}

static void test_save_from(coda_context ctx) {
  uint64_t r = 77;
  float a[40 * 3];
  uint16_t b[17];
  for (int i = 0; i < 120; i++) a[i] = (float)coda_rng_uniform(&r);
  for (int i = 0; i < 17; i++) b[i] = (uint16_t)coda_rng_next(&r);
  coda_st_entry e[3] = {{"a", "F32", 2, {40, 3}, a}, {"b", "BF16", 1, {17}, b},
                        {"z", "F32", 1, {0}, a}};
  coda_st_entry none[3];
  memcpy(none, e, sizeof e);
  for (int i = 0; i < 3; i++) none[i].data = NULL; /* the reader's only */
  const char *meta[] = {"k", "v"};
  char p[512], q[512];
  snprintf(p, sizeof p, "%s/mem.safetensors", dir);
  snprintf(q, sizeof q, "%s/read.safetensors", dir);
  CHECK(coda_st_save(ctx, p, e, 3, meta, 1) == CODA_OK);
  mem_reader rd = {e, 0, 0};
  CHECK(coda_st_save_from(ctx, q, none, 3, meta, 1, read_mem, &rd) == CODA_OK);
  CHECK(rd.calls == 2); /* the empty tensor is not read */
  unsigned char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  CHECK(coda_read_file(ctx, p, &x, &nx) == CODA_OK);
  CHECK(coda_read_file(ctx, q, &y, &ny) == CODA_OK);
  CHECK(nx == ny && x && y && memcmp(x, y, nx) == 0);
  free(x);
  free(y);
  coda_st_file f;
  CHECK(coda_st_load(ctx, q, 1, &f) == CODA_OK); /* both CRCs check */
  coda_st_free(&f);
  /* a failing reader: an error, the old file kept, no temporary left */
  mem_reader bad = {e, 0, 2};
  CHECK(coda_st_save_from(ctx, q, none, 3, meta, 1, read_mem, &bad) == CODA_ERR_IO);
  CHECK(coda_read_file(ctx, q, &y, &ny) == CODA_OK);
  CHECK(ny == nx);
  free(y);
  int temps = 0;
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d));) temps += strstr(de->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  CHECK(temps == 0);
}

static void test_malformed(coda_context ctx) {
  unsigned char data[64];
  uint64_t r = 77;
  for (int i = 0; i < 64; i++) data[i] = (unsigned char)coda_rng_next(&r);
  unsigned char buf[1024];
  const char *bad[] = {
      "",                                                            /* too short */
      "[]",                                                          /* not an object */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", /* unterminated */
      "{\"a\":{\"dtype\":\"F99\",\"shape\":[4],\"data_offsets\":[0,16]}}", /* unknown dtype */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,16]}}", /* shape vs size */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[32],\"data_offsets\":[0,128]}}", /* past the end */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", /* reversed */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", /* overlap */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", /* duplicate */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", /* negative */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}",                      /* missing offsets */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"x\":1}}", /* extra */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
      "\"data_offsets\":[0,16]}}",                                   /* overflow */
      "{\"__metadata__\":{\"k\":5}}",                                /* non-string meta */
      "{\"__metadata__\":{\"crc32\":\"zz\"}}",                       /* bad crc text */
      "{\"__metadata__\":{\"crc32\":\"00000000\"}}",                 /* wrong crc */
      "{} x",                                                        /* trailing bytes */
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},}", /* trailing comma */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t n = make(buf, bad[i], data, 64);
    coda_st_file f;
    coda_status s = coda_st_parse(ctx, buf, n, 0, "bad", &f);
    CHECK_MSG(s == CODA_ERR_IO, "case %zu", i);
    if (s == CODA_OK) coda_st_free(&f);
  }
  /* header length larger than the file */
  size_t n = make(buf, "{}", data, 0);
  buf[0] = 200;
  coda_st_file f;
  CHECK(coda_st_parse(ctx, buf, n, 0, "len", &f) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "header length") != NULL);
  memset(buf, 0xff, 8);
  CHECK(coda_st_parse(ctx, buf, n, 0, "len", &f) == CODA_ERR_IO);
  /* a valid hand-written file with no crc loads, but not when required */
  n = make(buf, "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,3],\"data_offsets\":[1,7]}}", data, 8);
  CHECK(coda_st_parse(ctx, buf, n, 0, "ok", &f) == CODA_OK);
  if (f.n == 1) CHECK(!memcmp(f.t[0].data, data + 1, 6));
  coda_st_free(&f);
  CHECK(coda_st_parse(ctx, buf, n, 1, "ok", &f) == CODA_ERR_IO);
}

int main(void) {
  snprintf(dir, sizeof dir, "test_train_st.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_round_trip(ctx);
  test_save_from(ctx);
  test_malformed(ctx);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
