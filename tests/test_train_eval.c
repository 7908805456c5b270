/* coda_evaluate: the mean loss over consecutive windows of a shard, against
 * the same windows scored one by one with the host reference engine; the
 * same numbers for any batch; perplexity = exp(loss); a shard shorter than
 * a window or of a larger vocabulary is refused naming it. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  char dir[256], ck[320], sh[320];
  snprintf(dir, sizeof dir, "test_train_eval.tmp.%d", (int)getpid());
  snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
  snprintf(sh, sizeof sh, "%s/val.tok", dir);
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  coda_model_config c = {64, 32, 2, 4, 2, 48, 16, 0, 10000.0, 1e-5, {CODA_ROPE_LLAMA3, 4.0, 1.0, 4.0, 64.0}};
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
  coda_model_destroy(ref);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
