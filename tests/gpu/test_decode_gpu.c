/* The KV-cache decoder on the GPU (decode_kernels.cu through decode.c)
 * against the decoder on the CPU, which test_decode checks against the
 * full recompute of the reference engine. The weights are rounded to bf16
 * first, so both decoders hold the same weights and the difference is the
 * GPU's bf16 activations (GEMM inputs, the cache) only.
 *
 * Checks, for a GQA model (hd 64, 8 query heads over 2) and an MHA model
 * with a tied head (hd 32):
 *   - batch 3, prompts of 37, 5 and 100 tokens (the prefill's GEMM path and
 *     a 2100-token prompt in one chunk and in chunks of 2048 rows, its
 *     last rows continuing the cache), then 24
 *     steps fed with the CPU's greedy tokens: the logits of every sequence
 *     at every step within bf16 tolerance of the CPU's (max |diff| <= 4 % of
 *     max |logit| + 0.02), and the argmax equal in at least 90 % of them;
 *   - batch 1 (the one-row GEMV with the RoPE and SwiGLU in its stores),
 *     batch 24 (the tensor-core GEMV up to 64 rows, the same stores), batch
 *     70 (decode rows past 64: the GEMM path and the separate RoPE and
 *     SwiGLU kernels) and two short prompts prefilled through the
 *     tensor-core GEMV (its RoPE store also writes the packed rows of the
 *     training attention) the same way;
 *   - the device sampler on the device's own logits: greedy is the argmax
 *     of the downloaded logits (lowest id on ties), top-k 1 is greedy,
 *     top-k 5 stays in the 5 largest, top-p stays in the nucleus, the same
 *     seed gives the same tokens, and the temperature frequencies follow the
 *     softmax (Pearson's chi-square below its 1 - 1e-6 quantile);
 *   - a sequence left out of a step (token -1) keeps its logits;
 *   - decode steps replayed from recorded graphs (a context with a stream of
 *     its own) give logits bit-identical to the same steps launched one by
 *     one, for batch 1, 3 and 24 (the GEMM path), across a change of the
 *     attention splits; on the legacy default stream no graph is recorded
 *     and the results are the same;
 *   - kernels launched without programmatic dependent launch
 *     (CODA_DECODE_PDL=0) give logits bit-identical to those launched with
 *     it; so does the attention's merge in the last block of each head
 *     group (CODA_DECODE_MERGE=last), whose split counters must be back at
 *     zero for every later step, against the merge kernel;
 *   - batch 1 with the RMSNorm kernel (CODA_DECODE_NORM=separate) and with
 *     the one-row GEMV's norm on load, with each of the one-row GEMV's
 *     split variants (CODA_DECODE_ROW_SPLIT=0, 1, 2, 4, 8, auto) for the GQA
 *     model and the MHA model, and batch 1 as one persistent kernel
 *     (CODA_DECODE_ROW_STEP=1, decode_row_step.cu) for the GQA model and
 *     the MHA model with its tied head, each against the CPU as above, the
 *     one kernel's graph replays bit-identical to its direct launches; the
 *     decoder takes the one kernel with the knob and not without (on the
 *     sm80 path, e.g. CODA_ARCH=sm80, never: there the knob's runs are of
 *     the separate kernels, which launch without programmatic dependent
 *     launch);
 *   - the prefill through the forward-only block plans (CODA_PREFILL_PLANS)
 *     against the direct GPU prefill and the CPU decoder, in the bound
 *     above: GQA prompts of 37, 5, 100, 37 and 1 tokens (four plans, one of
 *     batch 2), a 2100-token prompt and one of 37 (in one chunk, the
 *     default: two plans; in chunks of 2048 rows: a plan for the first
 *     chunk, the direct path after it), and the MHA model with prompts of 37, 5 and 100; the
 *     cached keys and values within 4 % of each layer's largest, and a
 *     second prefill of the same lengths builds no plan. The cases above
 *     this one run the direct prefill (CODA_PREFILL_DIRECT);
 *   - Qwen3 (per-head RMSNorm of q and k before RoPE, head_dim above dim /
 *     heads) against the CPU as above: GQA with heads of 128 over dim 256
 *     (batch 3 of 37, 5 and 100 tokens: the prefill's GEMM and the training
 *     attention, steps on the tensor-core GEMV; two short prompts: the
 *     prefill on the tensor-core GEMV; batch 1: the one-row GEMV), and MHA
 *     with heads of 64 over dim 128 and a tied head at batch 24 and 70
 *     (steps past 64 rows: the GEMM); its recorded steps bit-identical to
 *     direct ones; with CODA_DECODE_ROW_STEP=1 its one-row steps keep the
 *     separate kernels (the one kernel has no QK-norm) and stay right;
 *     CODA_PREFILL_AUTO prefills it directly (no plan built), and
 *     CODA_PREFILL_PLANS is refused by name;
 *   - GPT-2 (LayerNorms and biases, GELU, learned positions, no RoPE) and
 *     Gemma 3 ((1 + w) norms, post-norms, QK-norm, GeGLU, sliding windows
 *     with their RoPE base, the score scale, embedding scale and logit
 *     cap; heads of 64 and of 256) against the CPU as above at batch 3,
 *     1, 24 and 70, their recorded steps bit-identical to direct ones, and
 *     neither taken by the one kernel; a llama model with Mistral's window
 *     of 16 on every layer against the CPU, its plan prefill against the
 *     direct one, not taken by the one kernel.
 *
 *   test_decode_gpu [--sanitize]
 *     --sanitize: every case with a few steps only, a short batch-1 prompt
 *     instead of the one over more than one chunk, and two sampler draws
 *     in the first case only (every kernel variant still runs; for the
 *     compute-sanitizer runs of tests/gpu/sanitize.sh)
 *   exit 0: pass, 1: a mismatch, 77: no usable GPU */
#define _POSIX_C_SOURCE 200809L
#include "coda_decode.h"
#include "check.h"
#include "decode_test_util.h"
#include "infer/infer.h" /* decode_plan_builds, the caches */
#include "backends/cuda/backend.h" /* coda_cuda_sm80 */
#include "base/rng.h"
#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* what ran, for the coverage line (tests/gpu/sanitize.sh) */
static int g_small; /* --sanitize */
/* the GPU decoder's prefill rows per forward (coda_decoder_options.chunk_rows;
 * 0: by device, a whole prompt of max_len) */
static int g_chunk;
static int g_cases, g_graph_cases, g_rows_one, g_rows_mma, g_rows_gemm;

static void against_cpu(coda_context cpu, coda_context gpu, const coda_model_config *c,
                        const int *plen, int B, int steps, const char *what) {
  printf("%s: batch %d, %d steps ...\n", what, B, steps);
  g_cases++;
  if (B == 1) g_rows_one++;
  else if (B <= 64) g_rows_mma++;
  else g_rows_gemm++;
  coda_model *m = make_model(cpu, c, 7);
  if (!m) return;
  /* the direct prefill (GEMM, GEMV and decode kernels); the plan prefill
   * is plans_vs_direct's */
  coda_decoder_options o = {.struct_size = sizeof o, .batch = B, .prefill = CODA_PREFILL_DIRECT,
                            .chunk_rows = g_chunk};
  coda_decoder dc = NULL, dg = NULL;
  CHECK_STATUS(cpu, coda_decoder_create(cpu, m, &o, &dc), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_create(gpu, m, &o, &dg), CODA_OK);
  if (!dc || !dg) {
    coda_decoder_destroy(dc);
    coda_decoder_destroy(dg);
    coda_model_destroy(m);
    return;
  }
  const int64_t V = c->vocab;
  int32_t **seq = random_prompts(B, plen, V, 17);
  CHECK(seq != NULL);
  CHECK_STATUS(cpu, coda_decoder_prefill(dc, (const int32_t *const *)seq, plen), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_prefill(dg, (const int32_t *const *)seq, plen), CODA_OK);
  float *lc = malloc((size_t)B * V * 4), *lg = malloc((size_t)B * V * 4);
  float *prev = malloc((size_t)V * 4);
  int32_t *tok = malloc((size_t)B * 4);
  coda_sampling greedy = {0.0, 0, 1.0, 1};
  double worst = 0.0;
  int agree = 0, total = 0;
  for (int st = 0; st <= steps; st++) {
    CHECK(coda_decoder_logits(dc, lc) == CODA_OK);
    CHECK_STATUS(gpu, coda_decoder_logits(dg, lg), CODA_OK);
    for (int b = 0; b < B; b++) {
      const float *x = lc + b * V, *y = lg + b * V;
      double scale = 0.0, err = 0.0;
      for (int64_t v = 0; v < V; v++) {
        scale = fabs(x[v]) > scale ? fabs(x[v]) : scale;
        err = fabs((double)x[v] - y[v]) > err ? fabs((double)x[v] - y[v]) : err;
      }
      CHECK_MSG(err <= 0.04 * scale + 0.02, "%s: step %d sequence %d: GPU logits differ by %g "
                "(max |logit| %g)", what, st, b, err, scale);
      worst = err / (scale + 1e-30) > worst ? err / (scale + 1e-30) : worst;
      agree += argmax(x, V) == argmax(y, V);
      total++;
    }
    if (st == 1) /* sequence 0 sat out step 0 -> 1: its logits are the ones before */
      CHECK_MSG(!memcmp(prev, lg, (size_t)V * 4), "%s: a sequence left out of a step changed", what);
    if (st == steps) break;
    CHECK(coda_decoder_sample(dc, &greedy, NULL, tok) == CODA_OK);
    if (st == 0) {
      memcpy(prev, lg, (size_t)V * 4);
      tok[0] = -1;
    }
    CHECK(coda_decoder_step(dc, tok) == CODA_OK);
    CHECK_STATUS(gpu, coda_decoder_step(dg, tok), CODA_OK);
  }
  CHECK_MSG(agree * 10 >= total * 9, "%s: argmax agrees in %d of %d", what, agree, total);
  printf("%s: batch %d, %d steps: max |GPU - CPU| / max |logit| = %.4f, argmax equal %d/%d\n",
         what, B, steps, worst, agree, total);

  /* the device sampler on the device's logits */
  CHECK(coda_decoder_logits(dg, lg) == CODA_OK);
  float *sorted = malloc((size_t)V * 4);
  int32_t *t1 = malloc((size_t)B * 4), *t2 = malloc((size_t)B * 4);
  CHECK_STATUS(gpu, coda_decoder_sample(dg, &greedy, NULL, t1), CODA_OK);
  for (int b = 0; b < B; b++) CHECK_EQ_INT(t1[b], argmax(lg + b * V, V));
  int *counts = calloc((size_t)V, sizeof *counts);
  /* under --sanitize two draws in the first case only: each sampler launch
   * (1024 threads, block reductions in shared memory) is slow there */
  const int draws = g_small ? (g_cases == 1 ? 2 : 0) : 400;
  printf("%s: sampler checks, %d draws ...\n", what, draws);
  const double temp = 1.3;
  for (uint64_t seed = 1; seed <= (uint64_t)draws; seed++) {
    coda_sampling s = {temp, 0, 1.0, seed}, k1 = {temp, 1, 1.0, seed}, k5 = {temp, 5, 1.0, seed};
    coda_sampling tp = {temp, 0, 0.6, seed};
    CHECK(coda_decoder_sample(dg, &s, NULL, t1) == CODA_OK);
    CHECK(coda_decoder_sample(dg, &s, NULL, t2) == CODA_OK);
    CHECK(!memcmp(t1, t2, (size_t)B * 4));
    counts[t1[0]]++;
    CHECK(coda_decoder_sample(dg, &k1, NULL, t2) == CODA_OK);
    for (int b = 0; b < B; b++) CHECK_EQ_INT(t2[b], argmax(lg + b * V, V));
    CHECK(coda_decoder_sample(dg, &k5, NULL, t2) == CODA_OK);
    for (int b = 0; b < B; b++) {
      memcpy(sorted, lg + b * V, (size_t)V * 4);
      qsort(sorted, (size_t)V, 4, cmp_desc);
      CHECK(lg[b * V + t2[b]] >= sorted[4]);
    }
    CHECK(coda_decoder_sample(dg, &tp, NULL, t2) == CODA_OK);
    memcpy(sorted, lg, (size_t)V * 4);
    qsort(sorted, (size_t)V, 4, cmp_desc);
    double z = 0.0, acc = 0.0;
    for (int64_t v = 0; v < V; v++) z += exp((sorted[v] - sorted[0]) / temp);
    float cut = sorted[0];
    for (int64_t v = 0; v < V && acc < 0.6 * z * (1 - 1e-9); v++) {
      acc += exp((sorted[v] - sorted[0]) / temp);
      cut = sorted[v];
    }
    CHECK_MSG(lg[t2[0]] >= cut, "top-p drew logit %g below the nucleus cut %g", lg[t2[0]], cut);
  }
  double z = 0.0;
  float mx = lg[argmax(lg, V)];
  for (int64_t v = 0; v < V; v++) z += exp((lg[v] - mx) / temp);
  /* Pearson's chi-square over the tokens expected at least 5 times and
   * one bin pooling the rest, against its 1 - 1e-6 quantile
   * (Wilson-Hilferty): a per-token bound would fail somewhere among
   * hundreds of rare tokens by chance alone */
  double x2 = 0.0, rest_mu = 0.0, rest_n = 0.0;
  int bins = 0;
  for (int64_t v = 0; v < V; v++) {
    const double mu = exp((lg[v] - mx) / temp) / z * draws;
    if (mu >= 5.0) {
      x2 += (counts[v] - mu) * (counts[v] - mu) / mu;
      bins++;
    } else {
      rest_mu += mu;
      rest_n += counts[v];
    }
  }
  if (rest_mu >= 5.0) {
    x2 += (rest_n - rest_mu) * (rest_n - rest_mu) / rest_mu;
    bins++;
  } else {
    CHECK_MSG(rest_n <= rest_mu + 5.0 * sqrt(rest_mu) + 5.0,
              "%s: rare tokens drawn %.0f times, expected %.2f", what, rest_n, rest_mu);
  }
  if (bins >= 2) {
    const double df = bins - 1, h = 2.0 / (9.0 * df), zq = 4.753; /* one-sided 1e-6 */
    const double q = df * pow(1.0 - h + zq * sqrt(h), 3.0);
    CHECK_MSG(x2 <= q, "%s: temperature draws: chi-square %.1f over %d bins, 1e-6 quantile %.1f",
              what, x2, bins, q);
  }
  free(counts); free(sorted); free(t1); free(t2);
  free_prompts(seq, B);
  free(lc); free(lg); free(prev); free(tok);
  coda_decoder_destroy(dc);
  coda_decoder_destroy(dg);
  coda_model_destroy(m);
}

/* max |a - b| <= 4 % of max |a| + slack; *worst = the larger ratio. */
static int within(const float *a, const float *b, int64_t n, double slack, double *worst) {
  double scale = 0.0, err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    scale = fabs(a[i]) > scale ? fabs(a[i]) : scale;
    err = fabs((double)a[i] - b[i]) > err ? fabs((double)a[i] - b[i]) : err;
  }
  if (err / (scale + 1e-30) > *worst) *worst = err / (scale + 1e-30);
  return err <= 0.04 * scale + slack;
}

/* The token b picks is a's best or, in a's logits, within the bf16
 * rounding of two paths (1 % of a's largest |logit|) of a's best: a near
 * tie, which either path may break its own way. */
static int same_or_near_tie(const float *a, const float *b, int64_t n) {
  const int ia = argmax(a, n), ib = argmax(b, n);
  if (ia == ib) return 1;
  double scale = 0.0;
  for (int64_t i = 0; i < n; i++) scale = fabs(a[i]) > scale ? fabs(a[i]) : scale;
  return a[ib] >= a[ia] - 0.01 * scale;
}

static void bf16_to_f32(const uint16_t *h, float *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&f[i], &u, 4);
  }
}

/* The plan prefill on the GPU (CODA_PREFILL_PLANS: the forward-only block
 * plans, bf16 residual stream) against the direct GPU prefill (fp32
 * residual stream) and the CPU decoder, on the same bf16 weights: the
 * logits after prefill and after each step fed with the direct decoder's
 * greedy tokens within the bf16 bound of against_cpu (4 % of max |logit|
 * + 0.02), the argmax equal in at least 90 % of them; every layer's cached
 * keys and values of the prompts within 4 % of the layer's largest; a
 * second prefill of the same lengths builds no plan. */
static void plans_vs_direct(coda_context cpu, coda_context gpu, const coda_model_config *c,
                            const int *plen, int B, int steps, int want_builds, const char *what) {
  printf("%s: plan prefill, batch %d, %d steps ...\n", what, B, steps);
  g_cases++;
  coda_model *m = make_model(cpu, c, 9);
  if (!m) return;
  coda_decoder_options od = {.struct_size = sizeof od, .batch = B, .prefill = CODA_PREFILL_DIRECT,
                             .chunk_rows = g_chunk};
  coda_decoder_options op = od;
  op.prefill = CODA_PREFILL_PLANS;
  coda_decoder dc = NULL, dd = NULL, dp = NULL;
  CHECK_STATUS(cpu, coda_decoder_create(cpu, m, &od, &dc), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_create(gpu, m, &od, &dd), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_create(gpu, m, &op, &dp), CODA_OK);
  if (!dc || !dd || !dp) {
    coda_decoder_destroy(dc);
    coda_decoder_destroy(dd);
    coda_decoder_destroy(dp);
    coda_model_destroy(m);
    return;
  }
  const int64_t V = c->vocab;
  int32_t **seq = random_prompts(B, plen, V, 23);
  CHECK(seq != NULL);
  const int32_t *const *pr = (const int32_t *const *)seq;
  CHECK_STATUS(cpu, coda_decoder_prefill(dc, pr, plen), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_prefill(dd, pr, plen), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_prefill(dp, pr, plen), CODA_OK);
  CHECK_EQ_INT(decode_plan_builds(dd), 0);
  CHECK_EQ_INT(decode_plan_builds(dp), want_builds);
  /* the caches: [layer][batch][max_len][kv dim] bf16 */
  const size_t cache = (size_t)c->layers * B * dp->max_len * dp->kvd;
  uint16_t *hk = malloc(cache * 2);
  float *kd = malloc(cache * 4), *kp = malloc(cache * 4);
  double cworst = 0.0;
  for (int kv = 0; kv < 2; kv++) {
    CHECK_STATUS(gpu, coda_memcpy_d2h(gpu, hk, kv ? dd->d_vc : dd->d_kc, cache * 2), CODA_OK);
    bf16_to_f32(hk, kd, cache);
    CHECK_STATUS(gpu, coda_memcpy_d2h(gpu, hk, kv ? dp->d_vc : dp->d_kc, cache * 2), CODA_OK);
    bf16_to_f32(hk, kp, cache);
    for (int li = 0; li < c->layers; li++)
      for (int b = 0; b < B; b++) {
        const size_t off = (((size_t)li * B + b) * dp->max_len) * dp->kvd;
        CHECK_MSG(within(kd + off, kp + off, (int64_t)plen[b] * dp->kvd, 0.0, &cworst),
                  "%s: layer %d sequence %d: cached %s differ (%g of max)", what, li, b,
                  kv ? "values" : "keys", cworst);
      }
  }
  free(hk); free(kd); free(kp);
  float *lc = malloc((size_t)B * V * 4), *ld = malloc((size_t)B * V * 4);
  float *lp = malloc((size_t)B * V * 4), *lp0 = malloc((size_t)B * V * 4);
  int32_t *tok = malloc((size_t)B * 4);
  double worst = 0.0, worst_cpu = 0.0;
  CHECK_STATUS(gpu, coda_decoder_logits(dp, lp0), CODA_OK);
  int agree = 0, ties = 0, total = 0;
  for (int st = 0; st <= steps; st++) {
    CHECK(coda_decoder_logits(dc, lc) == CODA_OK);
    CHECK_STATUS(gpu, coda_decoder_logits(dd, ld), CODA_OK);
    CHECK_STATUS(gpu, coda_decoder_logits(dp, lp), CODA_OK);
    for (int b = 0; b < B; b++) {
      CHECK_MSG(within(ld + b * V, lp + b * V, V, 0.02, &worst),
                "%s: step %d sequence %d: plan-prefilled logits differ from the direct GPU's "
                "(%g of max)", what, st, b, worst);
      CHECK_MSG(within(lc + b * V, lp + b * V, V, 0.02, &worst_cpu),
                "%s: step %d sequence %d: plan-prefilled logits differ from the CPU's (%g of max)",
                what, st, b, worst_cpu);
      agree += same_or_near_tie(ld + b * V, lp + b * V, V);
      ties += argmax(ld + b * V, V) != argmax(lp + b * V, V);
      total++;
    }
    if (st == steps) break;
    for (int b = 0; b < B; b++) tok[b] = argmax(ld + b * V, V);
    CHECK(coda_decoder_step(dc, tok) == CODA_OK);
    CHECK_STATUS(gpu, coda_decoder_step(dd, tok), CODA_OK);
    CHECK_STATUS(gpu, coda_decoder_step(dp, tok), CODA_OK);
  }
  CHECK_MSG(agree * 10 >= total * 9, "%s: the plans' argmax is the direct path's or a near tie "
            "in %d of %d", what, agree, total);
  printf("%s: max |plans - direct| / max |logit| = %.4f (CPU %.4f), caches %.4f, argmax equal "
         "%d/%d (near ties %d)\n", what, worst, worst_cpu, cworst, total - ties, total, ties);
  /* the same lengths again: no plan is built, and the logits still agree */
  CHECK_STATUS(gpu, coda_decoder_prefill(dd, pr, plen), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_prefill(dp, pr, plen), CODA_OK);
  CHECK_EQ_INT(decode_plan_builds(dp), want_builds);
  CHECK_STATUS(gpu, coda_decoder_logits(dd, ld), CODA_OK);
  CHECK_STATUS(gpu, coda_decoder_logits(dp, lp), CODA_OK);
  for (int b = 0; b < B; b++)
    CHECK_MSG(within(ld + b * V, lp + b * V, V, 0.02, &worst),
              "%s: second prefill, sequence %d: logits differ (%g of max)", what, b, worst);
  printf("%s: the second plan prefill's logits are %s the first's\n", what,
         memcmp(lp, lp0, (size_t)B * V * 4) ? "NOT bit-identical to" : "bit-identical to");
  free_prompts(seq, B);
  free(lc); free(ld); free(lp); free(lp0); free(tok);
  coda_decoder_destroy(dc);
  coda_decoder_destroy(dd);
  coda_decoder_destroy(dp);
  coda_model_destroy(m);
}

/* Decode steps through graphs against the same steps launched directly. */
/* A context created with one knob set (knobs are read when a context is
 * created); NULL, with a failed check, if it cannot be. */
static coda_context context_with_knob(const coda_context_options *co, const char *knob,
                                      const char *value) {
  coda_context c = NULL;
  setenv(knob, value, 1);
  CHECK(coda_context_create(co, &c) == CODA_OK);
  unsetenv(knob);
  return c;
}

static void graphs_vs_direct(coda_context cpu, coda_context direct_ctx, coda_context graph_ctx,
                             int expect_graphs, const coda_model_config *c, int B, int plen,
                             int steps, const char *what) {
  coda_model *m = make_model(cpu, c, 11);
  if (!m) return;
  g_graph_cases++;
  /* the direct prefill in both (this case is about the steps) */
  coda_decoder_options od = {.struct_size = sizeof od, .batch = B, .max_len = plen + steps + 1,
                             .no_graphs = 1, .prefill = CODA_PREFILL_DIRECT},
                       og = {.struct_size = sizeof og, .batch = B, .max_len = plen + steps + 1,
                             .prefill = CODA_PREFILL_DIRECT};
  coda_decoder dd = NULL, dg = NULL;
  CHECK_STATUS(direct_ctx, coda_decoder_create(direct_ctx, m, &od, &dd), CODA_OK);
  CHECK_STATUS(graph_ctx, coda_decoder_create(graph_ctx, m, &og, &dg), CODA_OK);
  coda_model_destroy(m);
  if (!dd || !dg) {
    coda_decoder_destroy(dd);
    coda_decoder_destroy(dg);
    return;
  }
  const int64_t V = c->vocab;
  int32_t *prompt = malloc((size_t)B * plen * 4);
  const int32_t **pr = malloc((size_t)B * sizeof *pr);
  int *ln = malloc((size_t)B * sizeof *ln);
  uint64_t r = 23;
  for (int b = 0; b < B; b++) {
    for (int i = 0; i < plen; i++) prompt[b * plen + i] = (int32_t)coda_rng_below(&r, (uint64_t)V);
    pr[b] = prompt + b * plen;
    ln[b] = plen - b % 3; /* different lengths */
  }
  CHECK_STATUS(direct_ctx, coda_decoder_prefill(dd, pr, ln), CODA_OK);
  CHECK_STATUS(graph_ctx, coda_decoder_prefill(dg, pr, ln), CODA_OK);
  float *ld = malloc((size_t)B * V * 4), *lg = malloc((size_t)B * V * 4);
  int32_t *tok = malloc((size_t)B * 4);
  coda_sampling greedy = {0.0, 0, 1.0, 1};
  int same = 1;
  for (int st = 0; st < steps && same; st++) {
    CHECK(coda_decoder_sample(dd, &greedy, NULL, tok) == CODA_OK);
    CHECK(coda_decoder_step(dd, tok) == CODA_OK);
    CHECK_STATUS(graph_ctx, coda_decoder_step(dg, tok), CODA_OK);
    CHECK(coda_decoder_logits(dd, ld) == CODA_OK);
    CHECK(coda_decoder_logits(dg, lg) == CODA_OK);
    same = !memcmp(ld, lg, (size_t)B * V * 4);
    CHECK_MSG(same, "%s: step %d: logits of the recorded step differ from the direct one", what,
              st);
  }
  const int n = coda_decoder_graphs(dg);
  CHECK_MSG(expect_graphs ? n >= 1 : n == 0, "%s: %d step graphs recorded", what, n);
  printf("%s: batch %d, %d steps: graph replay bit-identical to direct launches, %d graphs\n",
         what, B, steps, n);
  free(prompt); free(pr); free(ln); free(ld); free(lg); free(tok);
  coda_decoder_destroy(dd);
  coda_decoder_destroy(dg);
}

/* Whether the decoder of model c on ctx runs its one-row steps as one
 * kernel (coda_decode_row_step), as expected. */
static void row_step_used(coda_context cpu, coda_context ctx, const coda_model_config *c,
                          int expect, const char *what) {
  coda_model *m = make_model(cpu, c, 5);
  if (!m) return;
  coda_decoder_options o = {.struct_size = sizeof o, .batch = 1};
  coda_decoder d = NULL;
  CHECK_STATUS(ctx, coda_decoder_create(ctx, m, &o, &d), CODA_OK);
  if (d) CHECK_MSG(d->row_step == expect, "%s: one-kernel step %s, expected %s", what,
                   d->row_step ? "on" : "off", expect ? "on" : "off");
  coda_decoder_destroy(d);
  coda_model_destroy(m);
}

/* The GPU decoder's families: model c (Qwen3) prefills with CODA_PREFILL_AUTO
 * directly, building no plan, and CODA_PREFILL_PLANS is refused naming the
 * plan prefill. */
static void families_on_gpu(coda_context cpu, coda_context gpu, const coda_model_config *c) {
  coda_model *m = make_model(cpu, c, 13);
  if (m) {
    coda_decoder_options o = {.struct_size = sizeof o, .batch = 2};
    coda_decoder d = NULL;
    CHECK_STATUS(gpu, coda_decoder_create(gpu, m, &o, &d), CODA_OK);
    if (d) {
      const int len[2] = {12, 7};
      int32_t **seq = random_prompts(2, len, c->vocab, 29);
      CHECK_STATUS(gpu, coda_decoder_prefill(d, (const int32_t *const *)seq, len), CODA_OK);
      CHECK_EQ_INT(decode_plan_builds(d), 0);
      free_prompts(seq, 2);
    }
    coda_decoder_destroy(d);
    d = NULL;
    o.prefill = CODA_PREFILL_PLANS;
    CHECK_EQ_INT(coda_decoder_create(gpu, m, &o, &d), CODA_ERR_NOT_SUPPORTED);
    CHECK_MSG(d == NULL && strstr(coda_last_error(gpu), "plan prefill") &&
              strstr(coda_last_error(gpu), "qwen3"), "%s", coda_last_error(gpu));
    coda_model_destroy(m);
  }
}

/* Steps of a case: n, or few under --sanitize (at least `least`). */
static int steps_of(int n, int least) { return g_small ? (least > 3 ? least : 3) : n; }

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines show under a sanitizer's time limit */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sanitize")) {
      g_small = 1;
    } else {
      fprintf(stderr, "usage: test_decode_gpu [--sanitize]\n");
      return 2;
    }
  }
  if (!coda_cuda_available()) {
    printf("test_decode_gpu: SKIP (no usable sm_90 GPU)\n");
    return 77;
  }
  coda_context cpu, gpu;
  coda_context_options co = coda_context_default_options();
  CHECK(coda_context_create(&co, &cpu) == CODA_OK);
  co.backend = CODA_BACKEND_CUDA;
  CHECK(coda_context_create(&co, &gpu) == CODA_OK);
  coda_model_config gqa = {512, 512, 2, 8, 2, 768, 2200, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p3[3] = {37, 5, 100};
  against_cpu(cpu, gpu, &gqa, p3, 3, steps_of(24, 0), "gqa hd64");
  int p1[1] = {2100}; /* more than one device chunk (2048 rows) */
  int p1s[1] = {9};
  if (g_small) against_cpu(cpu, gpu, &gqa, p1s, 1, 3, "gqa hd64 batch 1");
  else {
    against_cpu(cpu, gpu, &gqa, p1, 1, 8, "gqa hd64 long prompt, one chunk");
    g_chunk = 2048; /* its last 52 rows continue the cache */
    against_cpu(cpu, gpu, &gqa, p1, 1, 8, "gqa hd64 long prompt, chunks of 2048");
    g_chunk = 0;
  }
  int p2s[2] = {20, 9}; /* 29 prefill rows: the tensor-core GEMV */
  against_cpu(cpu, gpu, &gqa, p2s, 2, steps_of(6, 0), "gqa hd64 short prompts");
  coda_model_config mha = {384, 128, 2, 4, 4, 256, 64, 1, 500000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p24[24];
  for (int i = 0; i < 24; i++) p24[i] = 1 + (i * 7) % 20;
  against_cpu(cpu, gpu, &mha, p24, 24, steps_of(12, 0), "mha hd32 tied, batch 24");
  int p70[70];
  for (int i = 0; i < 70; i++) p70[i] = 1 + (i * 5) % 17;
  against_cpu(cpu, gpu, &mha, p70, 70, steps_of(4, 0), "mha hd32 tied, batch 70");
  /* the plan prefill: two prompts of 37 (one plan of batch 2), one token
   * alone; a prompt past a device chunk (its first 2048 rows through a
   * plan, the rest and the prompt after it continuing on the direct path) */
  int pp[5] = {37, 5, 100, 37, 1};
  plans_vs_direct(cpu, gpu, &gqa, pp, 5, steps_of(16, 0), 4, "gqa hd64 plans");
  int ppl[2] = {2100, 37};
  if (!g_small) {
    plans_vs_direct(cpu, gpu, &gqa, ppl, 2, 4, 2, "gqa hd64 plans, long prompt, one chunk");
    g_chunk = 2048;
    plans_vs_direct(cpu, gpu, &gqa, ppl, 2, 4, 1, "gqa hd64 plans, long prompt, chunks of 2048");
    g_chunk = 0;
  }
  coda_model_config mha2 = mha;
  mha2.seq = 160;
  plans_vs_direct(cpu, gpu, &mha2, p3, 3, steps_of(12, 0), 3, "mha hd32 tied plans");
  coda_context streamed;
  coda_context_options cs = co;
  cs.own_stream = 1;
  CHECK(coda_context_create(&cs, &streamed) == CODA_OK);
  /* 70 steps from a 60-token prompt cross 64-key split boundaries */
  graphs_vs_direct(cpu, gpu, streamed, 1, &gqa, 1, 60, steps_of(70, 6), "graphs gqa batch 1");
  graphs_vs_direct(cpu, gpu, streamed, 1, &gqa, 3, 40, steps_of(30, 0), "graphs gqa batch 3");
  graphs_vs_direct(cpu, gpu, streamed, 1, &mha, 24, 20, steps_of(10, 0), "graphs mha batch 24");
  graphs_vs_direct(cpu, gpu, gpu, 0, &gqa, 2, 30, steps_of(6, 0), "legacy stream, no graphs");
  coda_context nopdl = context_with_knob(&co, "CODA_DECODE_PDL", "0");
  if (nopdl) {
    graphs_vs_direct(cpu, nopdl, streamed, 1, &gqa, 1, 60, steps_of(20, 0), "PDL off (direct) vs on (graphs)");
    graphs_vs_direct(cpu, nopdl, streamed, 1, &mha, 24, 20, steps_of(6, 0), "PDL off vs on, batch 24");
    coda_context_destroy(nopdl);
  }
  coda_context lastmerge = context_with_knob(&co, "CODA_DECODE_MERGE", "last");
  if (lastmerge) {
    graphs_vs_direct(cpu, lastmerge, streamed, 1, &gqa, 1, 60, steps_of(70, 6), "last-block merge vs merge kernel");
    graphs_vs_direct(cpu, lastmerge, streamed, 1, &mha, 24, 20, steps_of(10, 0), "last-block merge vs merge kernel, batch 24");
    coda_context_destroy(lastmerge);
  }
  /* batch 1 with the RMSNorm kernel before the one-row GEMV, which
   * otherwise normalizes on load (the two differ by the bf16 rounding of
   * the normalized row, so each is held to the CPU) */
  coda_context sepnorm = context_with_knob(&co, "CODA_DECODE_NORM", "separate");
  int p60[1] = {60};
  if (sepnorm) {
    against_cpu(cpu, sepnorm, &gqa, p60, 1, steps_of(20, 0), "gqa hd64 batch 1, the RMSNorm kernel");
    against_cpu(cpu, gpu, &gqa, p60, 1, steps_of(20, 0), "gqa hd64 batch 1, norm on load");
    coda_context_destroy(sepnorm);
  }
  /* the one-row GEMV's split variants (CODA_DECODE_ROW_SPLIT): each K
   * slice count and the shape rule, norm on load and not, against the CPU */
  static const char *const splits[] = {"0", "1", "2", "4", "8", "auto"};
  for (int i = 0; i < (int)(sizeof splits / sizeof *splits); i++) {
    coda_context split = context_with_knob(&co, "CODA_DECODE_ROW_SPLIT", splits[i]);
    if (!split) continue;
    char what[96];
    snprintf(what, sizeof what, "gqa hd64 batch 1, CODA_DECODE_ROW_SPLIT=%s", splits[i]);
    against_cpu(cpu, split, &gqa, p60, 1, steps_of(20, 0), what);
    int p1m[1] = {21};
    snprintf(what, sizeof what, "mha hd32 tied batch 1, CODA_DECODE_ROW_SPLIT=%s", splits[i]);
    against_cpu(cpu, split, &mha, p1m, 1, steps_of(12, 0), what);
    coda_context_destroy(split);
  }
  /* batch 1 in one persistent kernel (CODA_DECODE_ROW_STEP=1): hd 64, and
   * hd 32 with a tied head, across several attention split counts, its
   * graph replays bit-identical to its direct launches */
  /* (the sm80 path has no one-kernel step: it needs Hopper's bulk copies;
   * there CODA_DECODE_ROW_STEP=1 runs the separate kernels) */
  const int row_step = !coda_cuda_sm80(gpu);
  row_step_used(cpu, gpu, &gqa, 0, "the default");
  coda_context rowon = context_with_knob(&co, "CODA_DECODE_ROW_STEP", "1");
  setenv("CODA_DECODE_ROW_STEP", "1", 1);
  coda_context rowon_streamed = NULL;
  CHECK(coda_context_create(&cs, &rowon_streamed) == CODA_OK);
  unsetenv("CODA_DECODE_ROW_STEP");
  if (rowon && rowon_streamed) {
    row_step_used(cpu, rowon, &gqa, row_step, "gqa hd64, CODA_DECODE_ROW_STEP=1");
    row_step_used(cpu, rowon, &mha, row_step, "mha hd32 tied, CODA_DECODE_ROW_STEP=1");
    against_cpu(cpu, rowon, &gqa, p60, 1, steps_of(40, 0), "gqa hd64 batch 1, one kernel");
    int p1m[1] = {21};
    against_cpu(cpu, rowon, &mha, p1m, 1, steps_of(30, 0), "mha hd32 tied, batch 1, one kernel");
    graphs_vs_direct(cpu, rowon, rowon_streamed, 1, &gqa, 1, 60, steps_of(40, 6), "graphs gqa batch 1, one kernel");
  }
  /* Qwen3: heads of 128 over dim 256 (GQA, untied), of 64 over dim 128
   * (MHA, tied) */
  coda_model_config q3 = {512, 256, 2, 4, 2, 512, 256, 0, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, 128, 0, 0, 0, 0, 0};
  coda_model_config q3t = {384, 128, 2, 4, 4, 256, 64, 1, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, 64, 0, 0, 0, 0, 0};
  against_cpu(cpu, gpu, &q3, p3, 3, steps_of(24, 0), "qwen3 gqa hd128");
  against_cpu(cpu, gpu, &q3, p2s, 2, steps_of(6, 0), "qwen3 gqa hd128 short prompts");
  against_cpu(cpu, gpu, &q3, p60, 1, steps_of(20, 0), "qwen3 gqa hd128 batch 1");
  against_cpu(cpu, gpu, &q3t, p24, 24, steps_of(12, 0), "qwen3 mha hd64 tied, batch 24");
  against_cpu(cpu, gpu, &q3t, p70, 70, steps_of(4, 0), "qwen3 mha hd64 tied, batch 70");
  graphs_vs_direct(cpu, gpu, streamed, 1, &q3, 3, 40, steps_of(30, 0), "graphs qwen3 batch 3");
  graphs_vs_direct(cpu, gpu, streamed, 1, &q3, 1, 60, steps_of(20, 6), "graphs qwen3 batch 1");
  if (rowon) {
    row_step_used(cpu, rowon, &q3, 0, "qwen3, CODA_DECODE_ROW_STEP=1");
    against_cpu(cpu, rowon, &q3, p60, 1, steps_of(12, 0), "qwen3 batch 1, CODA_DECODE_ROW_STEP=1");
  }
  families_on_gpu(cpu, gpu, &q3);
  /* GPT-2 (LayerNorms with biases, a bias on every linear, GELU, learned
   * positions, no RoPE; heads of 32: fresh prompts through the training
   * attention) and Gemma 3 ((1 + w) norms, post-norms, QK-norm, GeGLU, the
   * embedding scale, windows of 16 on every other layer with their own
   * RoPE base, a score scale of 48^-1/2, the logits capped at 30; heads of
   * 64, and of 256 as the released 1B's, whose prompts take the decode
   * kernel) against the CPU; their recorded steps bit-identical to direct
   * ones; the one-kernel knob leaves them on the separate kernels */
  coda_model_config g2 = {384, 128, 2, 4, 4, 512, 160, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};
  coda_model_config g3 = {384, 128, 4, 4, 2, 256, 160, 1, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GEMMA3, 64, 16, 2, 10000.0, 48.0, 30.0};
  coda_model_config g3w = {384, 128, 2, 2, 1, 256, 160, 1, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GEMMA3, 256, 16, 2, 10000.0, 0, 0};
  /* batch 3 (ragged prompts up to 100 tokens), 1 (60 tokens, steps past
   * the window), 24 and 70 (the tensor-core GEMV and the GEMM) */
  const int *const prompts[4] = {p3, p60, p24, p70};
  const int batch[4] = {3, 1, 24, 70}, g2steps[4] = {24, 20, 12, 4}, g3steps[4] = {24, 40, 12, 4};
  for (int i = 0; i < 4; i++) {
    char what[64];
    snprintf(what, sizeof what, "gpt2 hd32 batch %d", batch[i]);
    against_cpu(cpu, gpu, &g2, prompts[i], batch[i], steps_of(g2steps[i], 0), what);
    snprintf(what, sizeof what, "gemma3 hd64 window 16 batch %d", batch[i]);
    against_cpu(cpu, gpu, &g3, prompts[i], batch[i], steps_of(g3steps[i], 0), what);
  }
  against_cpu(cpu, gpu, &g3w, p3, 3, steps_of(24, 0), "gemma3 hd256 window 16");
  against_cpu(cpu, gpu, &g3w, p60, 1, steps_of(20, 0), "gemma3 hd256 window 16 batch 1");
  graphs_vs_direct(cpu, gpu, streamed, 1, &g2, 3, 40, steps_of(20, 0), "graphs gpt2 batch 3");
  graphs_vs_direct(cpu, gpu, streamed, 1, &g3, 1, 60, steps_of(30, 6), "graphs gemma3 batch 1");
  /* Mistral's window on every layer of a llama model (heads of 32: fresh
   * prompts through the training attention with the window), the plan
   * prefill with it against the direct one */
  coda_model_config mis = {384, 128, 2, 4, 2, 256, 160, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 16, 0, 0, 0, 0};
  against_cpu(cpu, gpu, &mis, p3, 3, steps_of(24, 0), "mistral window 16 hd32");
  against_cpu(cpu, gpu, &mis, p60, 1, steps_of(30, 0), "mistral window 16 hd32 batch 1");
  plans_vs_direct(cpu, gpu, &mis, p3, 3, steps_of(12, 0), 3, "mistral window 16 plans");
  if (rowon) {
    row_step_used(cpu, rowon, &g2, 0, "gpt2, CODA_DECODE_ROW_STEP=1");
    row_step_used(cpu, rowon, &g3, 0, "gemma3, CODA_DECODE_ROW_STEP=1");
    row_step_used(cpu, rowon, &mis, 0, "mistral window, CODA_DECODE_ROW_STEP=1");
  }
  coda_context_destroy(rowon);
  coda_context_destroy(rowon_streamed);
  coda_context_destroy(streamed);
  /* llama3-scaled RoPE past the pre-training context of 32 positions */
  coda_model_config l3 = {320, 128, 2, 4, 2, 256, 128, 0, 500000.0, 1e-5, {CODA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 32.0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p2[2] = {70, 9};
  against_cpu(cpu, gpu, &l3, p2, 2, steps_of(16, 0), "llama3 rope hd32");
  coda_context_destroy(gpu);
  coda_context_destroy(cpu);
  printf("coverage: %d decoder cases against the CPU (step rows: %d one-row GEMV, %d tensor-core "
         "GEMV, %d GEMM), %d graph-vs-direct cases, the device sampler\n",
         g_cases, g_rows_one, g_rows_mma, g_rows_gemm, g_graph_cases);
  return CHECK_DONE();
}
