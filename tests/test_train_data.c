/* Tokenizer, token shards (round trip and rejection of damaged files),
 * corpus preparation and the batch sampler. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "test_util.h"
#include "base/rng.h"
#include "io/io.h"
#include "data/data.h"
#include "model/model.h"

#include <stdlib.h>
#include <omp.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void path(char *out, const char *name) { snprintf(out, 512, "%s/%s", dir, name); }


static void test_crc(void) {
  CHECK(coda_crc32(0, "123456789", 9) == 0xcbf43926u); /* the standard check value */
  unsigned char b[1000];
  uint64_t r = 42;
  for (int i = 0; i < 1000; i++) b[i] = (unsigned char)coda_rng_next(&r);
  CHECK(coda_crc32(0, b, 1000) == crc32_ref(b, 1000));
  CHECK(coda_crc32(coda_crc32(0, b, 300), b + 300, 700) == crc32_ref(b, 1000));
}

/* coda_rng_skip(s, k) is the state after k draws, and the model's weights
 * (drawn in parallel pieces through it) do not depend on the threads. */
static void test_rng_skip(void) {
  uint64_t r = 0x243f6a8885a308d3ull;
  for (int trial = 0; trial < 20; trial++) {
    const uint64_t s0 = coda_rng_next(&r);
    uint64_t s = s0;
    int same = 1;
    for (uint64_t k = 0; k < 2000; k++) {
      uint64_t t = coda_rng_skip(s0, k);
      same &= coda_rng_next(&t) == coda_rng_next(&s);
    }
    CHECK(same);
  }
  const coda_model_config c = {64, 32, 2, 4, 2, 96, 16, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  coda_model *a = NULL, *b = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &a) == CODA_OK);
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &b) == CODA_OK);
  if (a && b) {
    omp_set_num_threads(1);
    coda_model_init(a, 5);
    omp_set_num_threads(3);
    coda_model_init(b, 5);
    const size_t n = coda_model_size(a);
    CHECK(memcmp(coda_model_weights(a), coda_model_weights(b), n * sizeof(float)) == 0);
    /* the first matrix's first value is the first normal of the seed's stream */
    const coda_param *p = NULL;
    for (int i = 0; i < coda_model_num_params(a) && !p; i++)
      if (coda_model_param(a, i)->ndim == 2) p = coda_model_param(a, i);
    uint64_t s = 5 ^ 0x5eedf00dull;
    double u1 = coda_rng_uniform(&s), u2 = coda_rng_uniform(&s);
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    CHECK(p && coda_model_weights(a)[p->offset] == (float)(0.02 * z));
  }
  coda_model_destroy(a);
  coda_model_destroy(b);
  coda_context_destroy(ctx);
}

static void test_tokenizer(void) {
  char text[300];
  uint64_t r = 7;
  for (int i = 0; i < 300; i++) text[i] = (char)(coda_rng_next(&r) & 255);
  uint32_t tok[300];
  char back[300];
  CHECK(coda_tok_encode(text, 300, tok) == 300);
  for (int i = 0; i < 300; i++) CHECK(tok[i] == (unsigned char)text[i]);
  CHECK(coda_tok_decode(tok, 300, back) == 300);
  CHECK(!memcmp(text, back, 300));
}

static void test_shards(coda_context ctx) {
  char p[512], q[512];
  for (int width = 2; width <= 4; width += 2) {
    uint32_t vocab = width == 2 ? 50000 : 100000;
    uint64_t n = 1000 + (uint64_t)width * 37, r = 99 + width;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (uint64_t i = 0; i < n; i++) tok[i] = (uint32_t)coda_rng_below(&r, vocab);
    path(p, "a.tok");
    CHECK(coda_shard_write(ctx, p, tok, n, vocab, width) == CODA_OK);
    uint32_t *back;
    uint64_t cnt;
    uint32_t voc;
    CHECK(coda_shard_read(ctx, p, &back, &cnt, &voc) == CODA_OK);
    CHECK(cnt == n && voc == vocab);
    CHECK(!memcmp(back, tok, n * sizeof *tok));
    free(back);

    size_t fn = 0;
    unsigned char *orig = slurp(p, &fn);
    CHECK(fn == CODA_SHARD_HEADER + n * (size_t)width);
    path(q, "bad.tok");
    unsigned char *b = malloc(fn);
    /* truncated at several places */
    size_t cuts[] = {0, 5, CODA_SHARD_HEADER - 1, CODA_SHARD_HEADER, fn - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
      spit(q, orig, cuts[i]);
      back = NULL;
      CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
      CHECK(back == NULL);
    }
    CHECK(strstr(coda_last_error(ctx), "bad.tok") != NULL);
    /* bad magic */
    memcpy(b, orig, fn);
    b[3] ^= 0x20;
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), "magic") != NULL);
    /* wrong dtype (width 3), and the other valid width (size mismatch) */
    memcpy(b, orig, fn);
    b[12] = 3;
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), "dtype") != NULL);
    memcpy(b, orig, fn);
    b[12] = (unsigned char)(6 - width);
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    /* bad version */
    memcpy(b, orig, fn);
    b[8] = 2;
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    /* count larger than the payload (a huge count must not overflow) */
    memcpy(b, orig, fn);
    memset(b + 16, 0xff, 8);
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    /* flipped payload bit: checksum */
    memcpy(b, orig, fn);
    b[CODA_SHARD_HEADER + 17] ^= 1;
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), "checksum") != NULL);
    /* a token at or above the vocab (with a consistent checksum) */
    memcpy(b, orig, fn);
    for (int k = 0; k < width; k++) b[CODA_SHARD_HEADER + k] = 0xff;
    uint32_t c = coda_crc32(0, b + CODA_SHARD_HEADER, fn - CODA_SHARD_HEADER);
    for (int k = 0; k < 4; k++) b[28 + k] = (unsigned char)(c >> (8 * k));
    spit(q, b, fn);
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), "vocab") != NULL);
    /* missing file */
    path(q, "missing.tok");
    CHECK(coda_shard_read(ctx, q, &back, &cnt, NULL) == CODA_ERR_IO);
    free(b);
    free(orig);
    free(tok);
  }
  /* writer refuses tokens outside the vocab and bad widths */
  uint32_t t2[3] = {1, 2, 300};
  CHECK(coda_shard_write(ctx, p, t2, 3, 256, 2) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_shard_write(ctx, p, t2, 3, 1000, 3) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_shard_write(ctx, p, t2, 3, 70000, 2) == CODA_ERR_INVALID_ARGUMENT);
}

static void test_corpus(coda_context ctx) {
  /* 50 documents of random lowercase text separated by "%" lines. */
  char *text = malloc(50 * 64);
  size_t n = 0;
  uint64_t r = 5;
  size_t doc_len[50];
  for (int d = 0; d < 50; d++) {
    size_t st = n;
    int len = 5 + (int)coda_rng_below(&r, 40);
    for (int i = 0; i < len; i++) text[n++] = (char)('a' + coda_rng_below(&r, 26));
    text[n++] = '\n';
    text[n++] = '%';
    text[n++] = '\n';
    doc_len[d] = n - st;
  }
  char out[512];
  path(out, "corpus");
  uint64_t ntr, nva;
  CHECK(coda_prepare_corpus_text(ctx, text, n, out, 10, &ntr, &nva) == CODA_OK);
  size_t want_va = 0;
  for (int d = 0; d < 50; d++)
    if (d % 10 == 9) want_va += doc_len[d];
  CHECK_EQ_INT(nva, want_va);
  CHECK_EQ_INT(ntr + nva, n);
  char p[600];
  snprintf(p, sizeof p, "%s/val.tok", out);
  uint32_t *tok;
  uint64_t cnt;
  CHECK(coda_shard_read(ctx, p, &tok, &cnt, NULL) == CODA_OK);
  /* validation = documents 9, 19, ... in order */
  size_t off = 0, vo = 0;
  int ok = 1;
  for (int d = 0; d < 50; d++) {
    if (d % 10 == 9)
      for (size_t i = 0; i < doc_len[d]; i++) ok &= tok[vo++] == (unsigned char)text[off + i];
    off += doc_len[d];
  }
  CHECK(ok);
  free(tok);
  free(text);
  /* an empty directory is rejected */
  char empty[512];
  path(empty, "emptydir");
  CHECK(mkdir(empty, 0777) == 0);
  CHECK(coda_prepare_corpus_dir(ctx, empty, out, 10, NULL, NULL) == CODA_ERR_IO);
}

static void test_sampler(coda_context ctx) {
  uint32_t tok[500];
  uint64_t r = 11;
  for (int i = 0; i < 500; i++) tok[i] = (uint32_t)coda_rng_below(&r, 256);
  coda_sampler s = {tok, 500, 1234, 0};
  int32_t in[4 * 16], tg[4 * 16], in2[4 * 16], tg2[4 * 16];
  CHECK(coda_sampler_batch(ctx, &s, 4, 16, in, tg) == CODA_OK);
  CHECK(s.drawn == 4);
  /* targets are the inputs shifted by one within the stream */
  for (int b = 0; b < 4; b++)
    for (int t = 0; t + 1 < 16; t++) CHECK(tg[b * 16 + t] == in[b * 16 + t + 1]);
  /* a copy of the state continues identically (what a checkpoint stores) */
  coda_sampler copy = s;
  CHECK(coda_sampler_batch(ctx, &s, 4, 16, in, tg) == CODA_OK);
  CHECK(coda_sampler_batch(ctx, &copy, 4, 16, in2, tg2) == CODA_OK);
  CHECK(!memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg));
  coda_sampler tiny = {tok, 10, 1, 0};
  CHECK(coda_sampler_batch(ctx, &tiny, 1, 16, in, tg) == CODA_ERR_INVALID_ARGUMENT);
  /* rng_below stays in range and covers it */
  int seen[7] = {0};
  uint64_t st = 3;
  for (int i = 0; i < 700; i++) {
    uint64_t v = coda_rng_below(&st, 7);
    CHECK(v < 7);
    if (v < 7) seen[v]++;
  }
  for (int i = 0; i < 7; i++) CHECK(seen[i] > 50);
}

int main(void) {
  snprintf(dir, sizeof dir, "test_train_data.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_crc();
  test_rng_skip();
  test_tokenizer();
  test_shards(ctx);
  test_corpus(ctx);
  test_sampler(ctx);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
