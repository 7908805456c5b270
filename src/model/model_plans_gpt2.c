/* Plan engine, GPT-2 family (CPU backend): one GPT-2 block plan per layer
 * (src/nn/gpt2.c) and the GPT-2 head plan (src/nn/gpt2_head.c: final
 * LayerNorm with bias, tied LM head, cross-entropy), chained without
 * copies as model_plans.c chains Llama's (it builds and links them, this
 * file runs them). The 12 layer parameters of the family table
 * (model/family.c) are bound to the block buffers by name; the head reads
 * norm.weight, norm.bias and the tied token embedding.
 *
 * Host operations: the input x = wte[token] + wpe[t] (fp32 sum, one bf16
 * rounding), and in the backward the scatter-adds of block 0's dx into the
 * rows of wte (by token) and wpe (by position), in token order as the
 * reference engine adds them; wte's gradient also gets the head's dwout
 * (the tied LM head). Sampling runs the final LayerNorm and the head's row
 * products on the host for the last position, as model_plans.c does for
 * RMSNorm. The plans are not yet run on a GPU. */
#include "model/model_device.h"
#include "model/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A layer parameter of the family table (its name after "layers.%d.") and
 * the block plan's weight buffer; the gradient's is "d" + that. */
static const struct { const char *ours, *plan; } kLayer[] = {
    {"attention_norm.weight", "ln1_g"},   {"attention_norm.bias", "ln1_b"},
    {"attention.wqkv.weight", "wqkv"},    {"attention.wqkv.bias", "bqkv"},
    {"attention.wo.weight", "wo"},        {"attention.wo.bias", "bo"},
    {"ffn_norm.weight", "ln2_g"},         {"ffn_norm.bias", "ln2_b"},
    {"feed_forward.wfc.weight", "wfc"},   {"feed_forward.wfc.bias", "bfc"},
    {"feed_forward.wproj.weight", "wproj"}, {"feed_forward.wproj.bias", "bproj"}};
enum { NLAYER = (int)(sizeof kLayer / sizeof kLayer[0]) };

/* The block buffer of family layer parameter `name` ("layers.%d.<ours>"),
 * NULL when the block has none. */
static const char *plan_name(const char *name) {
  const char *dot = strchr(name, '.');
  dot = dot ? strchr(dot + 1, '.') : NULL; /* after "layers.%d." */
  for (int k = 0; dot && k < NLAYER; k++)
    if (!strcmp(dot + 1, kLayer[k].ours)) return kLayer[k].plan;
  return NULL;
}

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
  const coda_family *f = coda_family_of(c->family);
  for (int i = 0; i < f->nparams; i++) /* every layer parameter has its block buffer */
    if (f->params[i].where == CODA_P_LAYER && !plan_name(f->params[i].name))
      return coda_fail(ctx, CODA_ERR_INTERNAL, "gpt2 layer parameter %s has no block buffer",
                       f->params[i].name);
  const coda_gpt2_config g = block_config(c, s->B, s->T);
  coda_status st = CODA_OK;
  for (int i = 0; i < c->layers && !st; i++) {
    st = coda_gpt2_block_plan(ctx, &g, &s->blk[i]);
    if (!st) s->L = i + 1;
  }
  if (!st) st = coda_gpt2_head_plan(ctx, &g, &s->head);
  return st;
}

/* Each layer parameter of layer i: to its block buffer (up) or from its
 * gradient buffer (down, scaled and added). */
static coda_status layer_params(coda_context ctx, coda_model *m, plans_state *s, int i, int up,
                                float gscale) {
  const coda_family *f = coda_family_of(coda_model_cfg(m)->family);
  char nm[96], buf[32];
  coda_status st = CODA_OK;
  for (int k = 0; k < f->nparams && !st; k++) {
    if (f->params[k].where != CODA_P_LAYER) continue;
    snprintf(nm, sizeof nm, f->params[k].name, i);
    const coda_param *p = coda_model_find(m, nm);
    snprintf(buf, sizeof buf, "%s%s", up ? "" : "d", plan_name(f->params[k].name));
    st = up ? coda_plans_upload(ctx, s->blk[i], buf, coda_model_weights(m) + p->offset)
            : coda_plans_accumulate(ctx, s->blk[i], buf, coda_model_grads(m) + p->offset, gscale);
  }
  return st;
}

/* Sampling: LN(x_out[T-1]) and its products with the rows of wte. */
static coda_status host_head(coda_context ctx, coda_model *m, plans_state *s, int T,
                             float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int64_t D = c->dim;
  const float *W = coda_model_weights(m);
  const float *g = W + coda_model_find(m, "norm.weight")->offset;
  const float *b = W + coda_model_find(m, "norm.bias")->offset;
  const float *e = W + coda_model_find(m, "tok_embeddings.weight")->offset;
  coda_tensor t;
  coda_status st = coda_plans_tensor(ctx, s->blk[s->L - 1], "x_out", &t);
  if (st) return st;
  double *h = malloc((size_t)D * sizeof *h);
  if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  double mu = 0.0, var = 0.0;
  for (int64_t k = 0; k < D; k++) mu += (h[k] = coda_load(&t, T - 1, k));
  mu /= (double)D;
  for (int64_t k = 0; k < D; k++) var += (h[k] - mu) * (h[k] - mu);
  const double r = 1.0 / sqrt(var / (double)D + c->norm_eps);
  for (int64_t k = 0; k < D; k++) h[k] = (float)((h[k] - mu) * r * g[k] + b[k]);
  for (int64_t v = 0; v < c->vocab; v++) {
    double a = 0.0;
    for (int64_t k = 0; k < D; k++) a += h[k] * e[v * D + k];
    last_logits[v] = (float)a;
  }
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
  const float *W = coda_model_weights(m);
  float *G = coda_model_grads(m);
  coda_prof *pf = coda_model_prof(m);
#define OFF(name) (coda_model_find(m, name)->offset)
  coda_status st = CODA_OK;
  PB();
  for (int i = 0; i < s->L && !st; i++) st = layer_params(ctx, m, s, i, 1, 0.0f);
  if (!st && !sample) st = coda_plans_upload(ctx, s->head, "lnf_g", W + OFF("norm.weight"));
  if (!st && !sample) st = coda_plans_upload(ctx, s->head, "lnf_b", W + OFF("norm.bias"));
  if (!st && !sample)
    st = coda_plans_upload(ctx, s->head, "wout", W + OFF("tok_embeddings.weight"));
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
  /* the tied LM head: dwout is one of wte's two gradients (embed_backward
   * adds the other) */
  const plans_grad hg[] = {{"dlnf_g", G + OFF("norm.weight")},
                           {"dlnf_b", G + OFF("norm.bias")},
                           {"dwout", G + OFF("tok_embeddings.weight")}};
  int bwd = 0;
  st = coda_plans_head_loss(ctx, m, s, tg, backward, gscale, hg, (int)(sizeof hg / sizeof hg[0]),
                            loss, n_valid, &bwd);
  if (st || !bwd) return st;
  for (int i = s->L - 1; i >= 0 && !st; i--) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_BACKWARD);
    if (!st) st = layer_params(ctx, m, s, i, 0, gscale);
    PE(CODA_PH_BLOCK_BWD, i);
  }
  PB();
  if (!st) st = embed_backward(ctx, m, s, in, gscale);
  PE(CODA_PH_EMBED, -1);
#undef OFF
  return st;
}
