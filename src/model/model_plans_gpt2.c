/* Plan engine, GPT-2 family: one GPT-2 block plan per layer
 * (src/nn/gpt2.c) and the GPT-2 head plan (src/nn/gpt2_head.c: final
 * LayerNorm with bias, tied LM head, cross-entropy), chained without
 * copies as model_plans.c chains Llama's (it builds and links them). This
 * file holds the family's plan parameters (coda_plans_gpt2_params: the 12
 * layer parameters of the family table, model/family.c, and the head's
 * norm.weight, norm.bias and tied token embedding, each with its weight
 * and gradient buffer), which model_plans.c resolves into the slots that
 * every path binds, uploads and accumulates; and the step on the CPU
 * backend. On a CUDA context model_plans.c's device step runs the same
 * plans (forward_gpu: the embedding with the position table is a kernel,
 * the position table's gradient the token scatter-add's kernel over
 * positions).
 *
 * Host operations on the CPU: the input x = wte[token] + wpe[t] (fp32 sum,
 * one bf16 rounding), and in the backward the scatter-adds of block 0's dx
 * into the rows of wte (by token) and wpe (by position), in token order as
 * the reference engine adds them; wte's gradient also gets the head's
 * dwout (the tied LM head). Sampling runs the final LayerNorm and the
 * head's row products on the host for the last position, as model_plans.c
 * does for RMSNorm (on either backend: coda_plans_gpt2_head_row). */
#include "model/model_device.h"
#include "model/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layer parameters of the family table (their names after
 * "layers.%d.") with the block plan's weight and gradient buffers, and the
 * head's (the LM head is the tied token embedding). Biases and LayerNorm
 * weights are parameters like any other: bf16 copies in the plans, fp32
 * master and gradient, AdamW without weight decay (the table's decay 0). */
static const coda_plan_param kLayer[] = {
    {"attention_norm.weight", "ln1_g", "dln1_g", 0}, {"attention_norm.bias", "ln1_b", "dln1_b", 0},
    {"attention.wqkv.weight", "wqkv", "dwqkv", 0},   {"attention.wqkv.bias", "bqkv", "dbqkv", 0},
    {"attention.wo.weight", "wo", "dwo", 0},         {"attention.wo.bias", "bo", "dbo", 0},
    {"ffn_norm.weight", "ln2_g", "dln2_g", 0},       {"ffn_norm.bias", "ln2_b", "dln2_b", 0},
    {"feed_forward.wfc.weight", "wfc", "dwfc", 0},   {"feed_forward.wfc.bias", "bfc", "dbfc", 0},
    {"feed_forward.wproj.weight", "wproj", "dwproj", 0},
    {"feed_forward.wproj.bias", "bproj", "dbproj", 0}};
static const coda_plan_param kHead[] = {{"norm.weight", "lnf_g", "dlnf_g", 0},
                                        {"norm.bias", "lnf_b", "dlnf_b", 0},
                                        {"output.weight", "wout", "dwout", 0}};
const coda_plan_params coda_plans_gpt2_params = {
    kLayer, (int)(sizeof kLayer / sizeof kLayer[0]), kHead, (int)(sizeof kHead / sizeof kHead[0])};

static coda_gpt2_config block_config(const coda_model_config *c, int B, int T) {
  coda_gpt2_config g = coda_gpt2_default_config();
  g.dim = c->dim;
  g.n_heads = c->heads;
  g.ffn_dim = c->ffn;
  g.vocab = c->vocab;
  g.batch = B;
  g.seq = T;
  g.norm_eps = c->norm_eps;
  g.dtype = CODA_BF16;
  return g;
}

coda_status coda_plans_gpt2_build(coda_context ctx, coda_model *m, plans_state *s) {
  const coda_model_config *c = coda_model_cfg(m);
  const coda_gpt2_config g = block_config(c, s->B, s->T);
  coda_status st = CODA_OK;
  for (int i = 0; i < c->layers && !st; i++) {
    st = coda_gpt2_block_plan(ctx, &g, &s->blk[i]);
    if (!st) s->L = i + 1;
  }
  if (!st) st = coda_gpt2_head_plan(ctx, &g, &s->head);
  return st;
}

void coda_plans_gpt2_head_row(coda_model *m, double *h, float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int64_t D = c->dim;
  const float *W = coda_model_weights(m);
  const float *g = W + coda_model_find(m, "norm.weight")->offset;
  const float *b = W + coda_model_find(m, "norm.bias")->offset;
  const float *e = W + coda_model_find(m, "tok_embeddings.weight")->offset;
  double mu = 0.0, var = 0.0;
  for (int64_t k = 0; k < D; k++) mu += h[k];
  mu /= (double)D;
  for (int64_t k = 0; k < D; k++) var += (h[k] - mu) * (h[k] - mu);
  const double r = 1.0 / sqrt(var / (double)D + c->norm_eps);
  for (int64_t k = 0; k < D; k++) h[k] = (float)((h[k] - mu) * r * g[k] + b[k]);
  for (int64_t v = 0; v < c->vocab; v++) {
    double a = 0.0;
    for (int64_t k = 0; k < D; k++) a += h[k] * e[v * D + k];
    last_logits[v] = (float)a;
  }
}

/* Sampling: LN(x_out[T-1]) and its products with the rows of wte. */
static coda_status host_head(coda_context ctx, coda_model *m, plans_state *s, int T,
                             float *last_logits) {
  const int64_t D = coda_model_cfg(m)->dim;
  coda_tensor t;
  coda_status st = coda_plans_tensor(ctx, s->blk[s->L - 1], "x_out", &t);
  if (st) return st;
  double *h = malloc((size_t)D * sizeof *h);
  if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (int64_t k = 0; k < D; k++) h[k] = coda_load(&t, T - 1, k);
  coda_plans_gpt2_head_row(m, h, last_logits);
  free(h);
  return CODA_OK;
}

/* x = wte[token] + wpe[t] into block 0's x (bf16), t the position in its
 * sequence; sampling pads the context with token 0. */
static coda_status embed(coda_context ctx, coda_model *m, plans_state *s, const int32_t *in,
                         int T, int sample) {
  const coda_model_config *c = coda_model_cfg(m);
  const int64_t D = c->dim, M = (int64_t)s->B * s->T;
  const float *W = coda_model_weights(m);
  const float *wte = W + coda_model_find(m, "tok_embeddings.weight")->offset;
  const float *wpe = W + coda_model_find(m, "pos_embeddings.weight")->offset;
  coda_tensor x0;
  coda_status st = coda_plans_tensor(ctx, s->blk[0], "x", &x0);
  for (int64_t r = 0; r < M && !st; r++) {
    const int32_t tok = sample ? (r < T ? in[r] : 0) : in[r];
    if (tok < 0 || tok >= c->vocab)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "token %d at position %lld is outside "
                       "the vocabulary of %d", tok, (long long)r, c->vocab);
    const float *e = wte + (int64_t)tok * D, *p = wpe + (r % s->T) * D;
    for (int64_t k = 0; k < D; k++)
      ((uint16_t *)x0.data)[r * x0.ld + k] = coda_f32_to_bf16(e[k] + p[k]);
  }
  return st;
}

/* The embeddings' gradients: block 0's dx scatter-added into wte's rows
 * (by token) and wpe's (by position), in token order. */
static coda_status embed_backward(coda_context ctx, coda_model *m, plans_state *s,
                                  const int32_t *in, float gscale) {
  const int64_t D = coda_model_cfg(m)->dim, M = (int64_t)s->B * s->T;
  float *G = coda_model_grads(m);
  float *gte = G + coda_model_find(m, "tok_embeddings.weight")->offset;
  float *gpe = G + coda_model_find(m, "pos_embeddings.weight")->offset;
  coda_tensor t;
  coda_status st = coda_plans_tensor(ctx, s->blk[0], "dx", &t);
  if (st) return st;
  for (int64_t r = 0; r < M; r++) {
    float *a = gte + (int64_t)in[r] * D, *b = gpe + (r % s->T) * D;
    for (int64_t k = 0; k < D; k++) {
      const float v = gscale * coda_bf16_to_f32(((const uint16_t *)t.data)[r * t.ld + k]);
      a[k] += v;
      b[k] += v;
    }
  }
  return CODA_OK;
}

coda_status coda_plans_gpt2_forward(coda_context ctx, coda_model *m, plans_state *s,
                                    const int32_t *in, const int32_t *tg, int T, int backward,
                                    float gscale, double *loss, int64_t *n_valid,
                                    float *last_logits) {
  const int sample = tg == NULL;
  coda_prof *pf = coda_model_prof(m);
  coda_status st = CODA_OK;
  PB();
  for (int k = 0; k < s->L + !sample && !st; k++) st = coda_plans_upload_slots(ctx, m, s, k);
  PE(CODA_PH_CAST, -1);
  PB();
  if (!st) st = embed(ctx, m, s, in, T, sample);
  PE(CODA_PH_EMBED, -1);
  for (int i = 0; i < s->L && !st; i++) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_FORWARD);
    PE(CODA_PH_BLOCK_FWD, i);
  }
  if (st) return st;
  if (sample) return host_head(ctx, m, s, T, last_logits);
  int bwd = 0;
  st = coda_plans_loss_backward(ctx, m, s, tg, backward, gscale, loss, n_valid, &bwd);
  if (st || !bwd) return st;
  PB();
  st = embed_backward(ctx, m, s, in, gscale);
  PE(CODA_PH_EMBED, -1);
  return st;
}
