/* The trainer's device state (coda_plans_device_*): on a CPU context every
 * call is refused with a message and leaves the model usable; the clip
 * factor the GPU update uses is the one the host clipping applies. With a
 * usable GPU (CUDA builds on a GPU machine) also: the device step's loss
 * (within 2 %) and gradient norm (within 10 %) match the CPU plan engine
 * (the GPU attention rounds probabilities to bf16), device runs repeat bit
 * for bit, weights and moments survive the upload / download round trip,
 * a first AdamW step moves each weight by at most lr (+ its decay), and
 * the weights initialized on the device are the host's, and the sampler's
 * last-position logits match the CPU's (within 5 %, relative L2). The
 * device checks run twice: the head recomputing its logits in the
 * backward, and keeping them (coda_model_set_keep_logits), so that the
 * sanitizers (tests/gpu/sanitize.sh) see both heads; Qwen3, GPT-2 (its
 * block and head plans, learned positions, biases and LayerNorm weights,
 * whose head cannot keep its logits: refused) and Gemma 3 (a local layer
 * whose sliding window is shorter than the sequence, then a global one, a
 * score scale other than 1/sqrt(head_dim), the embedding scale, the
 * logit soft cap) and a llama model with Mistral's window on every layer
 * run once. Every family's device plans are bound to the flat weights and
 * gradient, and two half-scale micro-batches (the gradient bound to the
 * scratch copy) give one's gradient. The last line names what ran
 * ("coverage: ..."). */
#include "coda_nn.h"
#include "check.h"
#include "base/rng.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double normal(uint64_t *s) {
  double u1 = coda_rng_uniform(s) + 1e-300, u2 = coda_rng_uniform(s);
  return sqrt(-2 * log(u1)) * cos(2 * acos(-1.0) * u2);
}

/* head_dim 64: what the GPU attention takes */
static const coda_model_config cfg = {256, 128, 2, 2, 1, 256, 64, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
enum { B = 2, T = 64 };

static void tokens(uint64_t *r, int32_t *in, int32_t *tg) {
  for (int i = 0; i < B * T; i++) {
    in[i] = (int32_t)coda_rng_below(r, 256);
    tg[i] = i % 9 == 4 ? -1 : (int32_t)coda_rng_below(r, 256);
  }
}

static void refused_on_cpu(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, &cfg, CODA_ENGINE_PLANS, &m) == CODA_OK);
  if (!m) { coda_context_destroy(ctx); return; }
  uint64_t r = 0x1234abcdull;
  coda_model_init(m, 11);
  size_t n = coda_model_size(m);
  float *w = coda_model_weights(m);
  for (size_t i = 0; i < n; i++) w[i] += (float)(0.05 * normal(&r));
  float *keep = malloc(n * sizeof *keep);
  float *mv = malloc(n * sizeof *mv);
  if (!keep || !mv) { CHECK(0); free(keep); free(mv); coda_model_destroy(m); coda_context_destroy(ctx); return; }
  memcpy(keep, w, n * sizeof *w);
  for (size_t i = 0; i < n; i++) mv[i] = (float)normal(&r);
  CHECK(!coda_plans_on_device(ctx, m));
  double norm = -1.0;
  size_t used, total;
  coda_adamw o = {0.9, 0.95, 1e-8, 0.1, 0};
  coda_status s[6] = {coda_plans_device_upload(ctx, m, mv, mv),
                      coda_plans_device_download(ctx, m, mv, mv),
                      coda_plans_device_zero_grad(ctx, m),
                      coda_plans_device_grad_norm(ctx, m, &norm),
                      coda_plans_device_adamw(ctx, m, &o, 1, 1e-3, 1.0),
                      coda_plans_device_memory(ctx, &used, &total)};
  for (int i = 0; i < 6; i++) CHECK_EQ_INT(s[i], CODA_ERR_NOT_SUPPORTED);
  CHECK(strstr(coda_last_error(ctx), "CUDA") != NULL);
  CHECK(norm == -1.0);
  CHECK(memcmp(keep, w, n * sizeof *w) == 0); /* the failed download wrote nothing */
  /* the CPU plan engine still runs and gives a finite loss */
  int32_t in[B * T], tg[B * T];
  tokens(&r, in, tg);
  double loss = NAN;
  int64_t nv = 0;
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &loss, &nv) == CODA_OK);
  CHECK(isfinite(loss) && loss > 0.0);
  free(keep);
  free(mv);
  coda_model_destroy(m);
  coda_context_destroy(ctx);
}

/* coda_clip_grad(NULL, 0, ...) is the factor the in-place clipping applies. */
static void clip_factor(void) {
  uint64_t r = 77;
  enum { N = 257 };
  float g[N], g0[N];
  for (int trial = 0; trial < 20; trial++) {
    double scale = exp(4.0 * normal(&r));
    for (int i = 0; i < N; i++) g0[i] = g[i] = (float)(scale * normal(&r));
    double norm = coda_grad_norm(g, N);
    double max = trial % 4 == 0 ? 0.0 : exp(2.0 * normal(&r));
    double f = coda_clip_grad(NULL, 0, norm, max);
    double f2 = coda_clip_grad(g, N, norm, max);
    CHECK(f == f2);
    int same = 1;
    for (int i = 0; i < N; i++) same &= g[i] == (float)(g0[i] * f);
    CHECK(same);
    if (max > 0.0 && norm > max) CHECK_NEAR(coda_grad_norm(g, N), max * norm / (norm + 1e-6), 1e-5 * max);
    else CHECK(f == 1.0);
  }
}

/* Qwen3: the QK-norm block, a q width (2 x 128) unlike dim */
static const coda_model_config qwen3_cfg = {256, 128, 2, 2, 1, 256, 64, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, 128, 0, 0, 0, 0, 0};
/* GPT-2: one key/value head per head, tied, seq rows of learned positions */
static const coda_model_config gpt2_cfg = {256, 128, 2, 2, 2, 256, 64, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};

/* Gemma 3: layer 0 local (window 24 of the 64 positions: not a multiple of
 * any attention kernel block), layer 1 global (sliding_pattern 2); scores
 * scaled by 48^-1/2 rather than 64^-1/2; local RoPE base 1e4, global 1e6;
 * the logits soft-capped at 30; tied */
static const coda_model_config gemma3_cfg = {256, 128, 2, 2, 1, 256, 64, 1, 1e6, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GEMMA3, 64, 24, 2, 10000.0, 48.0, 30.0};

/* Every family's parameters are each one plan buffer or an embedding
 * table (the condition under which the device binds its plans to the flat
 * weights and gradient): Llama untied and tied, Qwen3, GPT-2, Gemma 3. */
static void slots_cover(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  coda_model_config tied = cfg;
  tied.tied = 1;
  const coda_model_config *all[] = {&cfg, &tied, &qwen3_cfg, &gpt2_cfg, &gemma3_cfg};
  for (int i = 0; i < 5; i++) {
    coda_model *m = NULL;
    CHECK(coda_model_create(ctx, all[i], CODA_ENGINE_PLANS, &m) == CODA_OK);
    if (m) CHECK_MSG(coda_plans_slots_cover(m), "%s (tied %d): a parameter without a plan buffer",
                     coda_model_family_name(all[i]->family), all[i]->tied);
    coda_model_destroy(m);
  }
  coda_context_destroy(ctx);
}

#ifdef CODA_HAVE_CUDA
/* Mistral's window on the llama family: every layer sees the last 40 of
 * the 64 positions (not a multiple of any attention kernel block) */
static const coda_model_config mistral_cfg = {256, 128, 2, 2, 1, 256, 64, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 40, 0, 0, 0, 0};

/* One step (zero grad, forward/backward, norm) on a device model. */
static coda_status device_step(coda_context g, coda_model *m, const int32_t *in,
                               const int32_t *tg, double *loss, double *norm) {
  int64_t nv;
  coda_status s = coda_plans_device_zero_grad(g, m);
  if (!s) s = coda_model_step(g, m, in, tg, B, T, 1.0f, loss, &nv);
  if (!s) s = coda_plans_device_grad_norm(g, m, norm);
  return s;
}

/* The device's initial weights against the host's (coda_model_init), at a
 * shape with several decaying and non-decaying parameters (GPT-2's: biases
 * that start at zero): equal but for values within an ulp of double of a
 * float rounding boundary (at most one float ulp apart, and rare). */
static void device_init(const coda_model_config *mcfg) {
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CUDA;
  coda_context g;
  if (coda_context_create(&co, &g) != CODA_OK) { CHECK(0); return; }
  coda_model *mg = NULL, *mh = NULL;
  CHECK(coda_model_create(g, mcfg, CODA_ENGINE_PLANS, &mg) == CODA_OK);
  CHECK(coda_model_create(g, mcfg, CODA_ENGINE_PLANS, &mh) == CODA_OK);
  if (mg && mh) {
    const size_t n = coda_model_size(mh);
    coda_model_init(mh, 9);
    float *m0 = malloc(n * sizeof *m0), *v0 = malloc(n * sizeof *v0);
    CHECK(coda_plans_device_init(g, mg, 9) == CODA_OK);
    CHECK(coda_plans_device_download(g, mg, m0, v0) == CODA_OK);
    const float *a = coda_model_weights(mg), *b = coda_model_weights(mh);
    size_t differ = 0, far = 0, moments = 0;
    for (size_t i = 0; i < n; i++) {
      differ += a[i] != b[i];
      far += fabsf(a[i] - b[i]) > 1.2e-7f * fabsf(b[i]);
      moments += m0 && v0 && (m0[i] != 0.0f || v0[i] != 0.0f);
    }
    CHECK_MSG(differ * 100000 <= n && far == 0, "%zu of %zu initial weights differ, %zu by more "
              "than an ulp", differ, n, far);
    CHECK(moments == 0);
    /* a checkpoint streamed from the device holds what the download gives */
    char path[64];
    snprintf(path, sizeof path, "test_train_device.%d.safetensors", (int)getpid());
    coda_train_state ts = {3, 5, 7, 2.5, "", 0, 0};
    CHECK(coda_checkpoint_save_device(g, path, mg, &ts) == CODA_OK);
    coda_train_state back;
    float *m1 = calloc(n, sizeof *m1), *v1 = calloc(n, sizeof *v1);
    CHECK(coda_checkpoint_load(g, path, mh, m1, v1, &back) == CODA_OK);
    CHECK(memcmp(coda_model_weights(mh), a, n * sizeof *a) == 0);
    size_t zero_moments = 0;
    for (size_t i = 0; i < n && m1 && v1; i++) zero_moments += m1[i] == 0.0f && v1[i] == 0.0f;
    CHECK(zero_moments == n && back.step == 3 && back.drawn == 7);
    remove(path);
    free(m1);
    free(v1);
    /* a second initialization of the same model is refused */
    CHECK(coda_plans_device_init(g, mg, 9) == CODA_ERR_INVALID_ARGUMENT);
    free(m0);
    free(v0);
  }
  coda_model_destroy(mg);
  coda_model_destroy(mh);
  coda_context_destroy(g);
}

/* |a - b| / |b| over n values (L2). */
static double rel_l2(const float *a, const float *b, int n) {
  double d = 0.0, r = 0.0;
  for (int i = 0; i < n; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return sqrt(d / (r > 0.0 ? r : 1.0));
}

/* GPT-2's head plan cannot keep its logits: the device step says so and
 * names what is allowed. */
static void gpt2_keep_refused(void) {
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CUDA;
  coda_context g;
  if (coda_context_create(&co, &g) != CODA_OK) { CHECK(0); return; }
  coda_model *m = NULL;
  CHECK(coda_model_create(g, &gpt2_cfg, CODA_ENGINE_PLANS, &m) == CODA_OK);
  if (m) {
    coda_model_init(m, 5);
    coda_model_set_keep_logits(m, 1);
    CHECK(coda_plans_device_upload(g, m, NULL, NULL) == CODA_OK);
    uint64_t r = 42;
    int32_t in[B * T], tg[B * T];
    tokens(&r, in, tg);
    double loss;
    int64_t nv;
    CHECK(coda_model_step(g, m, in, tg, B, T, 1.0f, &loss, &nv) == CODA_ERR_NOT_SUPPORTED);
    CHECK(strstr(coda_last_error(g), "keep-logits 0") != NULL);
  }
  coda_model_destroy(m);
  coda_context_destroy(g);
}

/* keep: the device models' head keeps its logits for the backward */
static void on_gpu(const coda_model_config *mcfg, int keep) {
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CUDA;
  coda_context g, c;
  if (coda_context_create(&co, &g) != CODA_OK) { CHECK(0); return; }
  CHECK(coda_context_create(NULL, &c) == CODA_OK);
  coda_model *mg = NULL, *mg2 = NULL, *mc = NULL;
  CHECK(coda_model_create(g, mcfg, CODA_ENGINE_PLANS, &mg) == CODA_OK);
  CHECK(coda_model_create(g, mcfg, CODA_ENGINE_PLANS, &mg2) == CODA_OK);
  CHECK(coda_model_create(c, mcfg, CODA_ENGINE_PLANS, &mc) == CODA_OK);
  if (!mg || !mg2 || !mc) goto out;
  coda_model_set_keep_logits(mg, keep);
  coda_model_set_keep_logits(mg2, keep);
  size_t n = coda_model_size(mc);
  uint64_t r = 0xfeedull;
  coda_model_init(mc, 3);
  float *w = coda_model_weights(mc);
  for (size_t i = 0; i < n; i++) w[i] += (float)(0.05 * normal(&r));
  memcpy(coda_model_weights(mg), w, n * sizeof *w);
  memcpy(coda_model_weights(mg2), w, n * sizeof *w);
  float *m0 = malloc(n * sizeof *m0), *v0 = malloc(n * sizeof *v0);
  float *m1 = malloc(n * sizeof *m1), *v1 = malloc(n * sizeof *v1);
  if (!m0 || !v0 || !m1 || !v1) { CHECK(0); goto free_out; }
  for (size_t i = 0; i < n; i++) {
    m0[i] = (float)(1e-3 * normal(&r));
    v0[i] = (float)(1e-6 * fabs(normal(&r)));
  }
  CHECK(coda_plans_on_device(g, mg));
  CHECK(coda_plans_device_upload(g, mg, m0, v0) == CODA_OK);
  CHECK(coda_plans_device_upload(g, mg2, m0, v0) == CODA_OK);
  /* every family: the plans' weights and gradients are views of the flat
   * buffers (the step below writes the gradient in place) */
  CHECK_MSG(coda_plans_device_bound(g, mg), "%s: the plans are not bound",
            coda_model_family_name(mcfg->family));
  /* round trip */
  CHECK(coda_plans_device_download(g, mg, m1, v1) == CODA_OK);
  CHECK(memcmp(coda_model_weights(mg), w, n * sizeof *w) == 0);
  CHECK(memcmp(m0, m1, n * sizeof *m0) == 0 && memcmp(v0, v1, n * sizeof *v0) == 0);
  /* fresh moments for the update below */
  CHECK(coda_plans_device_upload(g, mg, NULL, NULL) == CODA_OK);
  CHECK(coda_plans_device_upload(g, mg2, NULL, NULL) == CODA_OK);
  int32_t in[B * T], tg[B * T];
  tokens(&r, in, tg);
  {
    /* sampling: the last position's logits of a prompt shorter than seq
     * (the blocks on the device, the final norm and LM head on the host) */
    const int V = mcfg->vocab, P = T / 2 + 3;
    float *lgd = malloc((size_t)V * sizeof *lgd), *lgc = malloc((size_t)V * sizeof *lgc);
    if (lgd && lgc) {
      CHECK(coda_model_last_logits(g, mg, in, P, lgd) == CODA_OK);
      CHECK(coda_model_last_logits(c, mc, in, P, lgc) == CODA_OK);
      const double e = rel_l2(lgd, lgc, V);
      CHECK_MSG(e <= 0.05, "last logits: relative L2 error %g between the GPU and the CPU", e);
    } else CHECK(0);
    free(lgd);
    free(lgc);
  }
  double lg = NAN, ng = NAN, lg2 = NAN, ng2 = NAN, lc = NAN;
  int64_t nv;
  CHECK(device_step(g, mg, in, tg, &lg, &ng) == CODA_OK);
  CHECK(device_step(g, mg2, in, tg, &lg2, &ng2) == CODA_OK);
  coda_model_zero_grad(mc);
  CHECK(coda_model_step(c, mc, in, tg, B, T, 1.0f, &lc, &nv) == CODA_OK);
  double nc = coda_grad_norm(coda_model_grads(mc), n);
  /* bf16 attention probabilities on the GPU, fp32 on the CPU */
  printf("%s (keep %d): loss gpu %.6g cpu %.6g, grad norm gpu %.6g cpu %.6g\n",
         coda_model_family_name(mcfg->family), keep, lg, lc, ng, nc);
  CHECK_MSG(fabs(lg - lc) <= 0.02 * lc, "loss gpu %g cpu %g", lg, lc);
  CHECK_MSG(fabs(ng - nc) <= 0.1 * nc, "grad norm gpu %g cpu %g", ng, nc);
  CHECK(lg == lg2 && ng == ng2);
  /* the update: two device models stay identical, and close to the CPU's */
  coda_adamw o = {0.9, 0.95, 1e-8, 0.1, 0};
  double f = coda_clip_grad(NULL, 0, ng, 0.5 * ng);
  CHECK(coda_plans_device_adamw(g, mg, &o, 1, 1e-3, f) == CODA_OK);
  CHECK(coda_plans_device_adamw(g, mg2, &o, 1, 1e-3, f) == CODA_OK);
  CHECK(coda_plans_device_download(g, mg, m1, v1) == CODA_OK);
  CHECK(coda_plans_device_download(g, mg2, m0, v0) == CODA_OK);
  CHECK(memcmp(coda_model_weights(mg), coda_model_weights(mg2), n * sizeof *w) == 0);
  CHECK(memcmp(m0, m1, n * sizeof *m0) == 0 && memcmp(v0, v1, n * sizeof *v0) == 0);
  {
    /* first step from zero moments: m̂/√v̂ = g/|g| (up to eps), so each
     * weight moves by at most lr plus its decay lr·wd·|w| */
    const float *a = coda_model_weights(mg);
    size_t moved = 0, over = 0;
    for (size_t i = 0; i < n; i++) {
      double dw = fabs((double)a[i] - w[i]);
      moved += dw > 0.0;
      over += dw > 1e-3 * (1.0 + 0.1 * fabs(w[i])) * (1.0 + 1e-5) + 1e-7 * (1.0 + fabs(w[i]));
    }
    CHECK_MSG(moved > n / 2 && over == 0, "%zu of %zu moved, %zu beyond the bound", moved, n, over);
  }
  {
    /* two micro-batches at scale 1/2 (the gradient bound to the scratch
     * copy, then added) give the one micro-batch's gradient: the plans'
     * parts exactly, the embedding's scatter-adds up to rounding */
    double l1, n1 = NAN, n2 = NAN;
    CHECK(device_step(g, mg2, in, tg, &l1, &n1) == CODA_OK);
    coda_status s = coda_plans_device_zero_grad(g, mg2);
    for (int k = 0; k < 2 && !s; k++) s = coda_model_step(g, mg2, in, tg, B, T, 0.5f, &l1, &nv);
    if (!s) s = coda_plans_device_grad_norm(g, mg2, &n2);
    CHECK(s == CODA_OK);
    CHECK_MSG(fabs(n2 - n1) <= 1e-5 * n1, "%s: grad norm of 2 x 1/2 micro-batches %.9g, of one "
              "%.9g", coda_model_family_name(mcfg->family), n2, n1);
  }
free_out:
  free(m0); free(v0); free(m1); free(v1);
out:
  coda_model_destroy(mg);
  coda_model_destroy(mg2);
  coda_model_destroy(mc);
  coda_context_destroy(g);
  coda_context_destroy(c);
}
#endif

int main(void) {
  refused_on_cpu();
  clip_factor();
  slots_cover();
#ifdef CODA_HAVE_CUDA
  if (coda_cuda_available()) {
    device_init(&cfg);
    device_init(&gpt2_cfg);
    device_init(&gemma3_cfg);
    on_gpu(&cfg, 0);
    on_gpu(&cfg, 1);
    on_gpu(&qwen3_cfg, 0);
    on_gpu(&gpt2_cfg, 0);
    on_gpu(&gemma3_cfg, 0);
    on_gpu(&mistral_cfg, 0);
    gpt2_keep_refused();
    printf("coverage: device init (Llama, GPT-2, Gemma 3), upload / download round trips, "
           "device steps and sampling logits against the CPU plan engine with the head "
           "recomputing and keeping its logits, for Llama, Qwen3 (head_dim 128 over dim 128 "
           "and 2 heads), GPT-2 (learned positions, biases, LayerNorms, tied head; keep-logits "
           "refused), Gemma 3 (window 24 < seq 64, attn_scalar 48, soft cap 30) and a llama "
           "model with Mistral's window (40 < seq 64 on every layer), each with the plans bound to "
           "the flat weights and gradient and two half-scale micro-batches against one, AdamW "
           "on the device\n");
  }
  else printf("no usable GPU: device checks skipped\n");
#endif
  return CHECK_DONE();
}
