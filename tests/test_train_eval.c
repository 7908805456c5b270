/* coda_evaluate: the mean loss over consecutive windows of a shard, against
 * the same windows scored one by one with the host reference engine; the
 * same numbers for any batch; perplexity = exp(loss); a shard shorter than
 * a window or of a larger vocabulary is refused naming it; shards whose
 * stamp (source.txt) records another tokenizer than the checkpoint's, byte
 * shards on a model with a tokenizer and tokenizer shards on a model
 * without one (of 256 ids or more) are refused naming both (they scored
 * with exit 0). */
#define _POSIX_C_SOURCE 200809L
#include "coda_tokenizer.h"
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Two tokenizers of the same vocabulary (9 ids, <s> the BOS) that read
 * the same ids as different text: "ab" is one merge or another. */
static const char *tokenizer_json(int other) {
  static char buf[2][2048];
  snprintf(buf[other], sizeof buf[other],
           "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":8,"
           "\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
           "\"normalized\":false,\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":"
           "\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
           "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
           "\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,\"byte_fallback\":false,"
           "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"%s\":4,\"%s\":5,\"\\u0120a\":6,"
           "\"\\u010a\":7},\"merges\":[\"%s\",\"%s\",\"\\u0120 a\"]}}",
           other ? "bc" : "ab", other ? "abc" : "abc", other ? "b c" : "a b",
           other ? "a bc" : "ab c");
  return buf[other];
}

static void put_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* The stamp coda's tools write beside prepared shards (tool_util.c). */
static void stamp(const char *shard_dir, const char *tokenizer) {
  char p[600], t[1200];
  snprintf(p, sizeof p, "%s/source.txt", shard_dir);
  snprintf(t, sizeof t, "coda prepared data 1\npath corpus.txt\nformat 0\ntext-field text\n"
           "tokenizer %s\nsize 100\nmtime 1\nvocab 9\n", tokenizer);
  put_text(p, t);
}

static void expect_eval(coda_context ctx, const char *ck, const char *sh, coda_status want,
                        const char *msg, const char *what) {
  coda_eval_options o = {.struct_size = sizeof o, .checkpoint = ck, .shard = sh, .batch = 4,
                         .max_windows = 1, .engine = CODA_TRAIN_ENGINE_REFERENCE};
  coda_eval_result r;
  const coda_status s = coda_evaluate(ctx, &o, &r);
  CHECK_MSG(s == want && (!msg || strstr(coda_last_error(ctx), msg)), "%s: status %d, '%s'", what,
            (int)s, s ? coda_last_error(ctx) : "");
}

static void tokenizer_record(coda_context ctx, const char *dir, coda_model *m, const char *sh) {
  char tokp[400], otherp[400], copyp[400], ckdir[400], ck[500], sd[400], sp[500];
  snprintf(tokp, sizeof tokp, "%s/tok.json", dir);
  snprintf(otherp, sizeof otherp, "%s/other.json", dir);
  snprintf(copyp, sizeof copyp, "%s/copy.json", dir);
  put_text(tokp, tokenizer_json(0));
  put_text(otherp, tokenizer_json(1));
  put_text(copyp, tokenizer_json(0));
  coda_tokenizer a = NULL, b = NULL;
  CHECK(coda_tokenizer_load(ctx, tokp, &a) == CODA_OK);
  CHECK(coda_tokenizer_load(ctx, otherp, &b) == CODA_OK);
  if (a && b) { /* the same vocabulary size, other text for the same ids */
    CHECK(coda_tokenizer_vocab_size(a) == coda_tokenizer_vocab_size(b));
    char *ta = NULL, *tb = NULL;
    size_t ca = 0, cb = 0, na = 0, nb = 0;
    const int32_t ids[2] = {4, 5};
    CHECK(coda_tokenizer_decode_alloc(a, ids, 2, 0, &ta, &ca, &na) == CODA_OK);
    CHECK(coda_tokenizer_decode_alloc(b, ids, 2, 0, &tb, &cb, &nb) == CODA_OK);
    CHECK(ta && tb && (na != nb || memcmp(ta, tb, na)));
    free(ta);
    free(tb);
  }
  coda_tokenizer_destroy(a);
  coda_tokenizer_destroy(b);
  /* a checkpoint that carries tok.json */
  snprintf(ckdir, sizeof ckdir, "%s/ckt", dir);
  CHECK(mkdir(ckdir, 0777) == 0);
  snprintf(ck, sizeof ck, "%s/ck.safetensors", ckdir);
  coda_train_state st = {0, 0, 0, NAN, "", 0, 0};
  CHECK(coda_checkpoint_carry_tokenizer(ctx, tokp, ck, 64, &st) == CODA_OK);
  CHECK(coda_checkpoint_save(ctx, ck, m, NULL, NULL, &st) == CODA_OK);
  /* shards in a directory of their own, with a stamp */
  snprintf(sd, sizeof sd, "%s/shards", dir);
  CHECK(mkdir(sd, 0777) == 0);
  snprintf(sp, sizeof sp, "%s/val.tok", sd);
  uint32_t *t = NULL;
  uint64_t n = 0;
  CHECK(coda_shard_read(ctx, sh, &t, &n, NULL) == CODA_OK);
  CHECK(t && coda_shard_write(ctx, sp, t, n, 64, 2) == CODA_OK);
  free(t);
  expect_eval(ctx, ck, sp, CODA_OK, NULL, "no stamp");
  stamp(sd, copyp); /* a byte-identical copy of the checkpoint's tokenizer */
  expect_eval(ctx, ck, sp, CODA_OK, NULL, "the same tokenizer");
  stamp(sd, otherp);
  expect_eval(ctx, ck, sp, CODA_ERR_INVALID_ARGUMENT,
              "(its source.txt), which differs from the checkpoint's", "another tokenizer");
  CHECK(strstr(coda_last_error(ctx), "other.json") && strstr(coda_last_error(ctx), "ckt/tokenizer.json"));
  stamp(sd, "(bytes)");
  expect_eval(ctx, ck, sp, CODA_ERR_INVALID_ARGUMENT,
              "byte-token shards (source.txt says (bytes)), but the model's tokenizer is",
              "byte shards, BPE model");
  /* a stamp's tokenizer that is gone: a warning, not checked */
  char gone[420];
  snprintf(gone, sizeof gone, "%s/gone.json", dir);
  stamp(sd, gone);
  coda_warnings_clear(ctx);
  expect_eval(ctx, ck, sp, CODA_OK, NULL, "the stamp's tokenizer gone");
  CHECK_MSG(strstr(coda_warnings(ctx), "cannot be read to compare"), "warning '%s'",
            coda_warnings(ctx));
  coda_warnings_clear(ctx);
  /* a byte model (vocabulary 256, no tokenizer) on tokenizer shards */
  coda_model_config c = *coda_model_cfg(m);
  c.vocab = 256;
  coda_model *bm = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &bm) == CODA_OK);
  if (bm) {
    coda_model_init(bm, 5);
    char bck[420];
    snprintf(bck, sizeof bck, "%s/bytes.safetensors", dir);
    coda_train_state bs = {0, 0, 0, NAN, "", 0, 0};
    CHECK(coda_checkpoint_save(ctx, bck, bm, NULL, NULL, &bs) == CODA_OK);
    stamp(sd, tokp);
    expect_eval(ctx, bck, sp, CODA_ERR_INVALID_ARGUMENT, "is a byte-token model",
                "BPE shards, byte model");
    stamp(sd, "(bytes)");
    expect_eval(ctx, bck, sp, CODA_OK, NULL, "byte shards, byte model");
  }
  coda_model_destroy(bm);
  /* a model without a tokenizer of a vocabulary above the bytes (512):
   * tokenizer shards refused all the same; with the shards' tokenizer
   * beside it as tokenizer.json they are compared and scored, with
   * another refused */
  c.vocab = 512;
  bm = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &bm) == CODA_OK);
  if (bm) {
    coda_model_init(bm, 6);
    char vd[420], vck[460], vtok[460];
    snprintf(vd, sizeof vd, "%s/v512", dir);
    CHECK(mkdir(vd, 0777) == 0);
    snprintf(vck, sizeof vck, "%s/ck.safetensors", vd);
    snprintf(vtok, sizeof vtok, "%s/tokenizer.json", vd);
    coda_train_state vs = {0, 0, 0, NAN, "", 0, 0};
    CHECK(coda_checkpoint_save(ctx, vck, bm, NULL, NULL, &vs) == CODA_OK);
    stamp(sd, tokp);
    expect_eval(ctx, vck, sp, CODA_ERR_INVALID_ARGUMENT, "model of vocabulary 512 without a "
                "tokenizer", "BPE shards, vocabulary-512 model without a tokenizer");
    CHECK(strstr(coda_last_error(ctx), "tok.json") != NULL);
    put_text(vtok, tokenizer_json(0));
    expect_eval(ctx, vck, sp, CODA_OK, NULL, "BPE shards, the same tokenizer.json beside");
    put_text(vtok, tokenizer_json(1));
    expect_eval(ctx, vck, sp, CODA_ERR_INVALID_ARGUMENT, "which differs from the checkpoint's",
                "BPE shards, another tokenizer.json beside");
    stamp(sd, "(bytes)");
    expect_eval(ctx, vck, sp, CODA_ERR_INVALID_ARGUMENT, "byte-token shards",
                "byte shards, a tokenizer.json beside");
  }
  coda_model_destroy(bm);
}

int main(void) {
  char dir[256], ck[320], sh[320];
  snprintf(dir, sizeof dir, "test_train_eval.tmp.%d", (int)getpid());
  snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
  snprintf(sh, sizeof sh, "%s/val.tok", dir);
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  coda_model_config c = {64, 32, 2, 4, 2, 48, 16, 0, 10000.0, 1e-5, {CODA_ROPE_LLAMA3, 4.0, 1.0, 4.0, 64.0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *ref;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &ref) == CODA_OK);
  coda_model_init(ref, 3);
  float *w = coda_model_weights(ref);
  uint64_t r = 17;
  for (size_t i = 0; i < coda_model_size(ref); i++) w[i] += (float)(0.1 * (coda_rng_uniform(&r) - 0.5));
  coda_train_state st = {0, 0, 0, NAN, "", 0, 0};
  CHECK(coda_checkpoint_save(ctx, ck, ref, NULL, NULL, &st) == CODA_OK);
  /* 7 windows of 16 + 1 and a tail of 5 */
  enum { T = 16, NW = 7, N = NW * T + 1 + 5 };
  uint32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = (uint32_t)coda_rng_below(&r, 64);
  CHECK(coda_shard_write(ctx, sh, tok, N, 64, 2) == CODA_OK);
  double sum = 0;
  int64_t cnt = 0;
  for (int wdw = 0; wdw < NW; wdw++) {
    int32_t in[T], tg[T];
    for (int t = 0; t < T; t++) {
      in[t] = (int32_t)tok[wdw * T + t];
      tg[t] = (int32_t)tok[wdw * T + t + 1];
    }
    double l;
    int64_t nv;
    CHECK(coda_model_loss(ctx, ref, in, tg, 1, T, &l, &nv) == CODA_OK);
    sum += l * (double)nv;
    cnt += nv;
  }
  const double want = sum / (double)cnt;
  coda_eval_options o = {.struct_size = sizeof o, .checkpoint = ck, .shard = sh, .batch = 3,
                         .engine = CODA_TRAIN_ENGINE_AUTO};
  coda_eval_result a, b;
  CHECK(coda_evaluate(ctx, &o, &a) == CODA_OK);
  CHECK(a.windows == NW && a.tokens == NW * T);
  CHECK_MSG(fabs(a.loss - want) < 0.01 * want, "loss %.6g, reference %.6g", a.loss, want);
  CHECK_NEAR(a.perplexity, exp(a.loss), 1e-9 * a.perplexity);
  o.batch = 1;
  CHECK(coda_evaluate(ctx, &o, &b) == CODA_OK);
  CHECK_NEAR(b.loss, a.loss, 1e-5 * a.loss);
  o.max_windows = 2;
  CHECK(coda_evaluate(ctx, &o, &b) == CODA_OK);
  CHECK(b.windows == 2 && b.tokens == 2 * T);
  /* shorter windows */
  o.max_windows = 0;
  o.seq = 8;
  CHECK(coda_evaluate(ctx, &o, &b) == CODA_OK);
  CHECK(b.windows == (N - 1) / 8);
  o.seq = 32;
  CHECK(coda_evaluate(ctx, &o, &b) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "longer than the model's 16") != NULL);
  o.seq = 0;
  /* too short, too large a vocabulary */
  CHECK(coda_shard_write(ctx, sh, tok, T, 64, 2) == CODA_OK);
  CHECK(coda_evaluate(ctx, &o, &b) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "val.tok: 16 tokens, shorter than one window") != NULL);
  CHECK(coda_shard_write(ctx, sh, tok, N, 300, 2) == CODA_OK);
  CHECK(coda_evaluate(ctx, &o, &b) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "vocabulary of 300 tokens exceeds") != NULL);
  /* the shards' tokens against the checkpoint's tokenizer */
  CHECK(coda_shard_write(ctx, sh, tok, N, 64, 2) == CODA_OK);
  tokenizer_record(ctx, dir, ref, sh);
  coda_model_destroy(ref);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
