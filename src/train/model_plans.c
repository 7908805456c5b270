/* Plan engine: the model runs through the Llama-3 block and head plans of
 * src/nn (GEMM + epilogue programs on the context's backend). One block
 * plan per layer and one head plan, chained without copies: block i's
 * x_out buffer is bound as block i+1's x (and as the head's x), and in the
 * backward each dx is bound as the previous block's dx_out.
 *
 * The plans store weights and activations in bf16 (fp32 compute and fp32
 * weight gradients): before every forward the fp32 master weights are
 * rounded (to nearest even) into the plans' bf16 weight buffers, which is
 * the bf16-weights + fp32-master scheme of the GPU. The token embedding
 * lookup and its gradient (a scatter-add over tokens, in token order) are
 * host operations here. The block plans fix the RMSNorm epsilon at 1e-5.
 *
 * Sampling needs logits, which the head plan never materializes: for the
 * last position the final RMSNorm and the LM-head row products are done
 * on the host from the last block's output. The sampler runs the blocks at
 * the full sequence length with the context left-aligned; causal attention
 * makes the padding after it irrelevant. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int B, T;
  int L;
  coda_plan *blk;
  coda_plan head;
} plans_state;

int coda_plans_available(void) { return 1; }

void coda_plans_free(coda_model *m) {
  plans_state *s = *coda_model_plans_slot(m);
  if (!s) return;
  for (int i = 0; i < s->L; i++) coda_plan_destroy(s->blk[i]);
  coda_plan_destroy(s->head);
  free(s->blk);
  free(s);
  *coda_model_plans_slot(m) = NULL;
}

static coda_status tensor(coda_context ctx, coda_plan p, const char *name, coda_tensor *t) {
  coda_status s = coda_plan_tensor(p, name, t);
  if (s) return coda_fail(ctx, s, "plan buffer '%s': %s", name, coda_last_error(ctx));
  return CODA_OK;
}

static coda_status ensure(coda_context ctx, coda_model *m, int B, int T, plans_state **out) {
  plans_state *s = *coda_model_plans_slot(m);
  if (s && s->B == B && s->T == T) { *out = s; return CODA_OK; }
  coda_plans_free(m);
  const coda_model_config *c = coda_model_cfg(m);
  if (fabs(c->norm_eps - 1e-5) > 1e-12)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the block plans use RMSNorm eps 1e-5, the model asks for %g", c->norm_eps);
  if (coda_context_backend(ctx) != CODA_BACKEND_CPU) /* host ops below write plan buffers */
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the plan engine's host steps (weight rounding, embedding) run on the CPU "
                     "backend only so far");
  if (coda_context_precision(ctx) != CODA_PRECISION_F32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the plan engine trains in fp32 precision");
  s = calloc(1, sizeof *s);
  if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  s->blk = calloc((size_t)c->layers, sizeof *s->blk);
  if (!s->blk) { free(s); return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); }
  s->B = B;
  s->T = T;
  *coda_model_plans_slot(m) = s;
  coda_llama_config lc;
  memset(&lc, 0, sizeof lc);
  lc.dim = c->dim;
  lc.n_heads = c->heads;
  lc.n_kv_heads = c->kv_heads;
  lc.head_dim = c->dim / c->heads;
  lc.ffn_dim = c->ffn;
  lc.vocab = c->vocab;
  lc.batch = B;
  lc.seq = T;
  lc.rope_theta = c->rope_theta;
  lc.dtype = CODA_BF16;
  coda_status st = CODA_OK;
  for (int i = 0; i < c->layers && !st; i++) {
    st = coda_llama_block_plan(ctx, &lc, &s->blk[i]);
    if (!st) s->L = i + 1;
  }
  if (!st) st = coda_llama_head_plan(ctx, &lc, &s->head);
  coda_tensor t;
  for (int i = 0; i < s->L && !st; i++) {
    st = tensor(ctx, s->blk[i], "x_out", &t);
    if (!st) st = coda_plan_bind(i + 1 < s->L ? s->blk[i + 1] : s->head, "x", &t);
    if (!st) st = tensor(ctx, i + 1 < s->L ? s->blk[i + 1] : s->head, "dx", &t);
    if (!st) st = coda_plan_bind(s->blk[i], "dx_out", &t);
  }
  if (st) {
    coda_plans_free(m);
    return st;
  }
  *out = s;
  return CODA_OK;
}

/* fp32 master -> plan buffer (bf16 rounds to nearest even). */
static coda_status upload(coda_context ctx, coda_plan p, const char *name, const float *src) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      float v = src[r * t.cols + c];
      if (t.dtype == CODA_BF16) ((uint16_t *)t.data)[r * t.ld + c] = coda_f32_to_bf16(v);
      else coda_store(&t, r, c, v);
    }
  return CODA_OK;
}

/* dst += scale · plan buffer. */
static coda_status accumulate(coda_context ctx, coda_plan p, const char *name, float *dst,
                              float scale) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      float v = t.dtype == CODA_F32 ? ((const float *)t.data)[r * t.ld + c]
                                    : (float)coda_load(&t, r, c);
      dst[r * t.cols + c] += scale * v;
    }
  return CODA_OK;
}

coda_status coda_plans_forward(coda_context ctx, coda_model *m, const int32_t *in,
                               const int32_t *tg, int B, int T, int backward, float gscale,
                               double *loss, int64_t *n_valid, float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int sample = tg == NULL;
  const int RB = sample ? 1 : B, RT = sample ? c->seq : T;
  plans_state *s = NULL;
  coda_status st = ensure(ctx, m, RB, RT, &s);
  if (st) return st;
  const float *W = coda_model_weights(m);
  float *G = coda_model_grads(m);
  const int64_t D = c->dim, M = (int64_t)RB * RT;
  char nm[96];
#define OFF(name) (coda_model_find(m, name)->offset)
  static const char *const plan_w[6] = {"wn1", "wqkv", "wo", "wn2", "wgu", "wd"};
  static const char *const plan_g[6] = {"dwn1", "dwqkv", "dwo", "dwn2", "dwgu", "dwd"};
  static const char *const ours[6] = {"attention_norm", "attention.wqkv", "attention.wo",
                                      "ffn_norm", "feed_forward.w13", "feed_forward.w2"};
  for (int i = 0; i < s->L && !st; i++)
    for (int k = 0; k < 6 && !st; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
      st = upload(ctx, s->blk[i], plan_w[k], W + OFF(nm));
    }
  const size_t emb = OFF("tok_embeddings.weight");
  const size_t out = c->tied ? emb : OFF("output.weight");
  if (!st && !sample) st = upload(ctx, s->head, "wnf", W + OFF("norm.weight"));
  if (!st && !sample) st = upload(ctx, s->head, "wout", W + out);
  /* embedding lookup into block 0's x */
  coda_tensor x0, t;
  if (!st) st = tensor(ctx, s->blk[0], "x", &x0);
  if (st) return st;
  for (int64_t r = 0; r < M; r++) {
    int32_t tok = sample ? (r < T ? in[r] : 0) : in[r];
    const float *e = W + emb + (int64_t)tok * D;
    for (int64_t k = 0; k < D; k++) ((uint16_t *)x0.data)[r * x0.ld + k] = coda_f32_to_bf16(e[k]);
  }
  for (int i = 0; i < s->L && !st; i++) st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_FORWARD);
  if (st) return st;
  if (sample) {
    /* host: final RMSNorm and LM head for row T-1 */
    st = tensor(ctx, s->blk[s->L - 1], "x_out", &t);
    if (st) return st;
    double ss = 0.0;
    float *h = malloc((size_t)D * sizeof *h);
    if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t k = 0; k < D; k++) {
      h[k] = (float)coda_load(&t, T - 1, k);
      ss += (double)h[k] * h[k];
    }
    double r = 1.0 / sqrt(ss / (double)D + c->norm_eps);
    const float *wn = W + OFF("norm.weight");
    for (int64_t k = 0; k < D; k++) h[k] = (float)(h[k] * r * wn[k]);
    for (int64_t v = 0; v < c->vocab; v++) {
      double a = 0.0;
      for (int64_t k = 0; k < D; k++) a += (double)h[k] * W[out + v * D + k];
      last_logits[v] = (float)a;
    }
    free(h);
    return CODA_OK;
  }
  st = tensor(ctx, s->head, "targets", &t);
  if (st) return st;
  int64_t nv = 0;
  for (int64_t r = 0; r < M; r++) {
    ((int32_t *)t.data)[r * t.ld] = tg[r] < 0 ? -100 : tg[r];
    nv += tg[r] >= 0;
  }
  st = coda_plan_run(ctx, s->head, CODA_PHASE_FORWARD);
  if (!st) st = tensor(ctx, s->head, "loss", &t);
  if (st) return st;
  if (loss) *loss = nv ? coda_load(&t, 0, 0) : 0.0;
  if (n_valid) *n_valid = nv;
  if (!backward || nv == 0) return CODA_OK;
  st = coda_plan_run(ctx, s->head, CODA_PHASE_BACKWARD);
  for (int i = s->L - 1; i >= 0 && !st; i--) st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_BACKWARD);
  /* d(gscale · loss): every gradient from the plans is of the mean loss */
  for (int i = 0; i < s->L && !st; i++)
    for (int k = 0; k < 6 && !st; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
      st = accumulate(ctx, s->blk[i], plan_g[k], G + OFF(nm), gscale);
    }
  if (!st) st = accumulate(ctx, s->head, "dwnf", G + OFF("norm.weight"), gscale);
  if (!st) st = accumulate(ctx, s->head, "dwout", G + out, gscale);
  if (!st) st = tensor(ctx, s->blk[0], "dx", &t);
  if (st) return st;
  for (int64_t r = 0; r < M; r++) { /* embedding gradient: scatter-add in token order */
    float *g = G + emb + (int64_t)in[r] * D;
    for (int64_t k = 0; k < D; k++)
      g[k] += gscale * coda_bf16_to_f32(((const uint16_t *)t.data)[r * t.ld + k]);
  }
#undef OFF
  return CODA_OK;
}
