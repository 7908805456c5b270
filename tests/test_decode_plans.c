/* The decoder's prefill through the forward-only block plans
 * (coda_decoder_options.prefill = CODA_PREFILL_PLANS, src/infer/
 * decode_plans.c) on the CPU backend, against the direct host path of a
 * second decoder on the same weights (which test_decode checks against the
 * full recompute).
 *
 * The weights are rounded to bf16 first, so both decoders hold the same
 * weights and the difference is the plans' arithmetic alone: bf16
 * activations (the block input, h, qkv, o, the residual stream x1 and
 * x_out, h2 and y are each stored in bf16 once a layer: relative error up
 * to 2^-9 per rounding) with fp32 accumulation, against the host path's
 * fp32 activations. From the embedding to a logit of these two-layer
 * models a value passes through 15 such roundings (7 a layer and the block
 * output); added up in the worst case they come to 15 * 2^-9 = 2.9 %, so
 * the bound is max |diff| <= 3 % of max |value| (+ 0.02 for the logits),
 * and greedy argmax equal in at least 90 % of the (sequence, step) pairs
 * (an argmax flips where two logits are closer than that). The measured
 * worst case is printed (about 1 % of max).
 *
 * Checks, for a GQA model (hd 64, 4 query heads over 2) with prompts of
 * 37, 5, 100 and 37 tokens (two prompts of one length: one plan of batch
 * 2), and an MHA model with a tied head (hd 16):
 *   - the logits after prefill, and after each of 12 steps fed with the
 *     direct decoder's greedy tokens (steps run on the host path against
 *     the cache the plans wrote);
 *   - every layer's cached keys and values of every prompt position;
 *   - a second prefill of the same lengths builds no plan; a prompt that
 *     fits a host chunk (256 rows) starts a new chunk rather than being
 *     cut, and one longer than a chunk is cut: its first rows go through
 *     the plans, the rest continues the cache on the direct path;
 *   - bad input (a prompt longer than the window, an empty prompt, a token
 *     outside the vocab) gets the same status and message on both paths;
 *   - CODA_PREFILL_AUTO on the CPU builds no plan (the host reference path
 *     stays the default), and CODA_PREFILL_PLANS on an fp64 context is
 *     CODA_ERR_NOT_SUPPORTED with a message. */
#define _POSIX_C_SOURCE 200809L
#include "coda_decode.h"
#include "check.h"
#include "decode_test_util.h"
#include "infer/infer.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 0.03

/* max |a - b| against max |a| over n values; *worst = the larger ratio. */
static int close_to(const float *a, const float *b, int64_t n, double slack, double *worst) {
  double scale = 0.0, err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    scale = fabs(a[i]) > scale ? fabs(a[i]) : scale;
    err = fabs((double)a[i] - b[i]) > err ? fabs((double)a[i] - b[i]) : err;
  }
  if (err / (scale + 1e-30) > *worst) *worst = err / (scale + 1e-30);
  return err <= TOL * scale + slack;
}

static coda_decoder make_decoder(coda_context ctx, coda_model *m, int B, coda_prefill_path path) {
  coda_decoder_options o = {.struct_size = sizeof o, .batch = B, .prefill = path};
  coda_decoder d = NULL;
  CHECK_STATUS(ctx, coda_decoder_create(ctx, m, &o, &d), CODA_OK);
  return d;
}

/* Every layer's K and V of sequence b's positions 0 .. n-1, both decoders. */
static void compare_cache(coda_decoder dd, coda_decoder dp, int b, int n, const char *what) {
  double worst = 0.0;
  const size_t row = (size_t)dd->kvd;
  for (int li = 0; li < dd->c.layers; li++) {
    const size_t off = (((size_t)li * dd->B + (size_t)b) * dd->max_len) * row;
    CHECK_MSG(close_to(dd->kc + off, dp->kc + off, (int64_t)(n * row), 0.0, &worst),
              "%s: layer %d sequence %d: cached keys differ (%g of max)", what, li, b, worst);
    CHECK_MSG(close_to(dd->vc + off, dp->vc + off, (int64_t)(n * row), 0.0, &worst),
              "%s: layer %d sequence %d: cached values differ (%g of max)", what, li, b, worst);
  }
  printf("  %s: sequence %d cache worst %.4f of max\n", what, b, worst);
}

static void against_direct(coda_context ctx, const coda_model_config *c, const int *plen, int B,
                           int steps, int want_builds, int again_builds, const char *what) {
  printf("%s: batch %d, %d steps\n", what, B, steps);
  coda_model *m = make_model(ctx, c, 7);
  if (!m) return;
  coda_decoder dd = make_decoder(ctx, m, B, CODA_PREFILL_DIRECT);
  coda_decoder dp = make_decoder(ctx, m, B, CODA_PREFILL_PLANS);
  if (!dd || !dp) {
    coda_decoder_destroy(dd);
    coda_decoder_destroy(dp);
    coda_model_destroy(m);
    return;
  }
  const int64_t V = c->vocab;
  int32_t **seq = random_prompts(B, plen, V, 17);
  CHECK(seq != NULL);
  const int32_t *const *pr = (const int32_t *const *)seq;
  CHECK_STATUS(ctx, coda_decoder_prefill(dd, pr, plen), CODA_OK);
  CHECK_STATUS(ctx, coda_decoder_prefill(dp, pr, plen), CODA_OK);
  CHECK_EQ_INT(decode_plan_builds(dd), 0);
  CHECK_EQ_INT(decode_plan_builds(dp), want_builds);
  for (int b = 0; b < B; b++) {
    CHECK_EQ_INT(coda_decoder_length(dp, b), plen[b]);
    compare_cache(dd, dp, b, plen[b], what);
  }
  /* the same prompts again: every shape's plan is kept */
  CHECK_STATUS(ctx, coda_decoder_prefill(dp, pr, plen), CODA_OK);
  CHECK_EQ_INT(decode_plan_builds(dp), want_builds);

  float *ld = malloc((size_t)B * V * 4), *lp = malloc((size_t)B * V * 4);
  int32_t *tok = malloc((size_t)B * 4);
  double worst = 0.0;
  int agree = 0, total = 0;
  for (int st = 0; st <= steps; st++) {
    CHECK(coda_decoder_logits(dd, ld) == CODA_OK);
    CHECK(coda_decoder_logits(dp, lp) == CODA_OK);
    for (int b = 0; b < B; b++) {
      CHECK_MSG(close_to(ld + b * V, lp + b * V, V, 0.02, &worst),
                "%s: step %d sequence %d: plan-prefilled logits differ (%g of max)", what, st, b,
                worst);
      agree += argmax(ld + b * V, V) == argmax(lp + b * V, V);
      total++;
    }
    if (st == steps) break;
    /* both fed the direct decoder's greedy tokens */
    for (int b = 0; b < B; b++) tok[b] = argmax(ld + b * V, V);
    CHECK_STATUS(ctx, coda_decoder_step(dd, tok), CODA_OK);
    CHECK_STATUS(ctx, coda_decoder_step(dp, tok), CODA_OK);
  }
  printf("  %s: logits worst %.4f of max, argmax agrees in %d of %d\n", what, worst, agree, total);
  CHECK_MSG(agree * 10 >= total * 9, "%s: argmax agrees in only %d of %d", what, agree, total);
  /* the last sequence prefilled again alone: a plan of batch 1 and its
   * length (again_builds: 1 if no plan of that shape ran before) */
  const int32_t **again = calloc((size_t)B, sizeof *again);
  int *alen = calloc((size_t)B, sizeof *alen);
  again[B - 1] = seq[B - 1];
  alen[B - 1] = plen[B - 1];
  CHECK_STATUS(ctx, coda_decoder_prefill(dd, again, alen), CODA_OK);
  CHECK_STATUS(ctx, coda_decoder_prefill(dp, again, alen), CODA_OK);
  CHECK_EQ_INT(decode_plan_builds(dp), want_builds + again_builds);
  CHECK(coda_decoder_logits(dd, ld) == CODA_OK);
  CHECK(coda_decoder_logits(dp, lp) == CODA_OK);
  CHECK_MSG(close_to(ld + (B - 1) * V, lp + (B - 1) * V, V, 0.02, &worst),
            "%s: a single sequence's new prefill differs (%g of max)", what, worst);
  compare_cache(dd, dp, B - 1, alen[B - 1], what);
  free(again); free(alen);
  free_prompts(seq, B);
  free(ld); free(lp); free(tok);
  coda_decoder_destroy(dd);
  coda_decoder_destroy(dp);
  coda_model_destroy(m);
}

/* The same call on both decoders: the same status and message. */
static void same_error(coda_context ctx, coda_decoder dd, coda_decoder dp,
                       const int32_t *const *pr, const int *len, coda_status want,
                       const char *needle) {
  char a[CODA_ERRMSG_LEN];
  coda_clear_error(ctx);
  CHECK_EQ_INT(coda_decoder_prefill(dd, pr, len), want);
  snprintf(a, sizeof a, "%s", coda_last_error(ctx));
  coda_clear_error(ctx);
  CHECK_EQ_INT(coda_decoder_prefill(dp, pr, len), want);
  CHECK_MSG(!strcmp(a, coda_last_error(ctx)), "direct: '%s', plans: '%s'", a, coda_last_error(ctx));
  CHECK_MSG(strstr(a, needle) != NULL, "'%s' does not say '%s'", a, needle);
}

static void bad_input(coda_context ctx) {
  coda_model_config c = {260, 64, 1, 4, 2, 96, 16, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *m = make_model(ctx, &c, 3);
  if (!m) return;
  coda_decoder dd = make_decoder(ctx, m, 2, CODA_PREFILL_DIRECT);
  coda_decoder dp = make_decoder(ctx, m, 2, CODA_PREFILL_PLANS);
  if (dd && dp) {
    int32_t toks[20] = {0};
    const int32_t *pr[2] = {toks, toks};
    int len[2] = {3, 17}; /* longer than the window of 16 */
    same_error(ctx, dd, dp, pr, len, CODA_ERR_INVALID_ARGUMENT, "prompt 1 has 17 tokens");
    len[1] = 0; /* empty */
    same_error(ctx, dd, dp, pr, len, CODA_ERR_INVALID_ARGUMENT, "prompt 1 has 0 tokens");
    len[1] = 4;
    toks[2] = 260; /* outside the vocab */
    same_error(ctx, dd, dp, pr, len, CODA_ERR_INVALID_ARGUMENT, "outside the vocab");
    CHECK_EQ_INT(decode_plan_builds(dp), 0); /* refused before anything ran */
    CHECK_EQ_INT(coda_decoder_length(dp, 0), 0);
  }
  coda_decoder_destroy(dd);
  coda_decoder_destroy(dp);
  /* the CPU default is the host path */
  coda_decoder da = make_decoder(ctx, m, 1, CODA_PREFILL_AUTO);
  if (da) {
    const int32_t p[3] = {1, 2, 3};
    const int32_t *pr[1] = {p};
    const int len[1] = {3};
    CHECK_STATUS(ctx, coda_decoder_prefill(da, pr, len), CODA_OK);
    CHECK_EQ_INT(decode_plan_builds(da), 0);
  }
  coda_decoder_destroy(da);
  /* an fp64 context has no bf16 plans */
  coda_context_options co = coda_context_default_options();
  co.precision = CODA_PRECISION_F64;
  coda_context c64 = NULL;
  CHECK(coda_context_create(&co, &c64) == CODA_OK);
  if (c64) {
    coda_decoder_options o = {.struct_size = sizeof o, .batch = 1, .prefill = CODA_PREFILL_PLANS};
    coda_decoder d = NULL;
    CHECK_EQ_INT(coda_decoder_create(c64, m, &o, &d), CODA_ERR_NOT_SUPPORTED);
    CHECK(d == NULL);
    CHECK_MSG(strstr(coda_last_error(c64), "fp32 precision") != NULL, "%s", coda_last_error(c64));
    coda_context_destroy(c64);
  }
  coda_model_destroy(m);
}

int main(void) {
  coda_context ctx;
  coda_context_options co = coda_context_default_options();
  CHECK(coda_context_create(&co, &ctx) == CODA_OK);
  /* GQA, hd 64 (4 query heads over 2), untied head; lengths 37 twice:
   * plans (2, 37), (1, 5), (1, 100) */
  coda_model_config gqa = {300, 256, 2, 4, 2, 320, 128, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p4[4] = {37, 5, 100, 37};
  against_direct(ctx, &gqa, p4, 4, 12, 3, 1, "gqa hd 64"); /* then (1, 37) */
  /* MHA with a tied head, hd 16, llama3-scaled RoPE */
  coda_model_config mha = {260, 64, 2, 4, 4, 96, 128, 1, 500000.0, 1e-6, {CODA_ROPE_LLAMA3, 4.0, 1.0, 4.0, 16.0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p3[3] = {37, 5, 100};
  against_direct(ctx, &mha, p3, 3, 12, 3, 0, "mha hd 16"); /* (1, 100) again */
  /* more rows than a host chunk (256): sequence 0 (200 rows) alone in the
   * first chunk, since sequence 1 (100) fits a chunk and starts the next;
   * sequence 2 (300, more than a chunk) fills the second chunk's last 156
   * rows, and its last 144 continue the cache the plans wrote on the direct
   * path */
  coda_model_config lng = {260, 64, 1, 4, 2, 96, 320, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p2[3] = {200, 100, 300};
  /* (1, 200), (1, 100), (1, 156); then (1, 300): 256 rows of a plan (1, 256) */
  against_direct(ctx, &lng, p2, 3, 4, 3, 1, "chunks");
  /* Mistral's window on every layer (24 keys): the plans mask it as the
   * direct path does, within a prompt and, past the first chunk, on the
   * cache */
  coda_model_config mis = lng;
  mis.sliding_window = 24;
  against_direct(ctx, &mis, p2, 3, 4, 3, 1, "mistral window chunks");
  bad_input(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
