/* The Llama-3 block's families on the plan engine (Llama, Qwen3, Gemma 3):
 * their block configuration from the model's, which parameter goes to
 * which plan buffer (coda_plan_params, read by model_plans.c), and their
 * step on the CPU backend. */
#include "model/model_device.h"
#include "model/family.h"
#include "model/model.h"
#include "base/bf16_round.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

coda_llama_config coda_model_block_config(const coda_model_config *c, int64_t batch,
                                          int64_t seq, int flags) {
  coda_llama_config lc;
  memset(&lc, 0, sizeof lc);
  lc.dim = c->dim;
  lc.n_heads = c->heads;
  lc.n_kv_heads = c->kv_heads;
  lc.head_dim = coda_model_head_dim(c);
  lc.ffn_dim = c->ffn;
  lc.vocab = c->vocab;
  lc.batch = batch;
  lc.seq = seq;
  lc.rope_theta = c->rope_theta;
  lc.rope = c->rope;
  lc.norm_eps = c->norm_eps;
  lc.dtype = CODA_BF16;
  /* the family's block: Qwen3's normalizes q and k per head; Gemma 3's
   * block has its own flag, score scale and head soft cap (the window,
   * Gemma 3's and Llama/Mistral's, and the RoPE base are per layer:
   * coda_model_layer_config) */
  const coda_family *f = coda_family_of(c->family);
  lc.flags = flags | (f->qk_norm ? CODA_LLAMA_QK_NORM : 0u);
  if (f->block == CODA_BLOCK_GEMMA3) {
    lc.flags |= CODA_LLAMA_GEMMA3;
    lc.attn_scale = coda_model_attn_scale(c);
    lc.logit_softcap = c->logit_softcap;
  }
  return lc;
}

coda_llama_config coda_model_layer_config(const coda_model_config *c, const coda_llama_config *lc,
                                          int li) {
  coda_llama_config l = *lc;
  l.window = coda_model_layer_window(c, li); /* 0 outside a windowed layer */
  l.rope_theta = coda_model_layer_rope_theta(c, li);
  return l;
}

/* Llama's and Qwen3's plan parameters (coda_plan_params): the block's
 * weight and gradient buffers of each layer parameter of the family table
 * (model/family.c), by the parameter's name; Qwen3's q_norm and k_norm are
 * the QK-norm block's wqn and wkn. The head: the final norm and the output
 * (the token embedding when tied). */
static const coda_plan_param llama_layer[] = {
    {"attention_norm.weight", "wn1", "dwn1", 0},   {"attention.wqkv.weight", "wqkv", "dwqkv", 0},
    {"attention.wo.weight", "wo", "dwo", 0},       {"ffn_norm.weight", "wn2", "dwn2", 0},
    {"feed_forward.w13.weight", "wgu", "dwgu", 0}, {"feed_forward.w2.weight", "wd", "dwd", 0},
    {"attention.q_norm.weight", "wqn", "dwqn", 0}, {"attention.k_norm.weight", "wkn", "dwkn", 0}};
static const coda_plan_param llama_head[] = {{"norm.weight", "wnf", "dwnf", 0},
                                             {"output.weight", "wout", "dwout", 0}};
const coda_plan_params coda_plans_llama_params = {
    llama_layer, (int)(sizeof llama_layer / sizeof llama_layer[0]),
    llama_head, (int)(sizeof llama_head / sizeof llama_head[0])};

/* Gemma 3's: Llama's and Qwen3's buffers with the two post-norms; every
 * norm weight w goes into its plan buffer as 1 + w (the block and head
 * plans scale by the buffer: N(x) = x r (1 + w)), and its gradient comes
 * back unchanged, since d(1 + w)/dw = 1. */
static const coda_plan_param gemma3_layer[] = {
    {"attention_norm.weight", "wn1", "dwn1", 1},   {"attention.wqkv.weight", "wqkv", "dwqkv", 0},
    {"attention.wo.weight", "wo", "dwo", 0},       {"ffn_norm.weight", "wn2", "dwn2", 1},
    {"feed_forward.w13.weight", "wgu", "dwgu", 0}, {"feed_forward.w2.weight", "wd", "dwd", 0},
    {"attention.q_norm.weight", "wqn", "dwqn", 1}, {"attention.k_norm.weight", "wkn", "dwkn", 1},
    {"attention.post_norm.weight", "wpa", "dwpa", 1},
    {"feed_forward.post_norm.weight", "wpf", "dwpf", 1}};
static const coda_plan_param gemma3_head[] = {{"norm.weight", "wnf", "dwnf", 1},
                                              {"output.weight", "wout", "dwout", 0}};
const coda_plan_params coda_plans_gemma3_params = {
    gemma3_layer, (int)(sizeof gemma3_layer / sizeof gemma3_layer[0]),
    gemma3_head, (int)(sizeof gemma3_head / sizeof gemma3_head[0])};

/* The step of the Llama block's families on the CPU backend (the device
 * step is model_plans.c's): the plans' weights uploaded from the fp32
 * master, the embedding (Gemma 3's scaled) looked up on the host, the
 * blocks, then sampling's final norm and head on the host for row T - 1,
 * or the head plan's loss and the backward, block 0's dx scatter-added
 * into the embedding's gradient in token order. */
coda_status coda_plans_llama_forward(coda_context ctx, coda_model *m, plans_state *s,
                                     const int32_t *in, const int32_t *tg, int T, int backward,
                                     float gscale, double *loss, int64_t *n_valid,
                                     float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int sample = tg == NULL;
  coda_status st = CODA_OK;
  const float *W = coda_model_weights(m);
  float *G = coda_model_grads(m);
  const int64_t D = c->dim, M = (int64_t)s->B * s->T;
  coda_prof *pf = coda_model_prof(m);
#define OFF(name) (coda_model_find(m, name)->offset)
  PB();
  for (int k = 0; k < s->L + !sample && !st; k++) st = coda_plans_upload_slots(ctx, m, s, k);
  const size_t emb = s->emb[0]->offset;
  const size_t out = c->tied ? emb : OFF("output.weight");
  PE(CODA_PH_CAST, -1);
  /* embedding lookup into block 0's x */
  coda_tensor x0, t;
  if (!st) st = coda_plans_tensor(ctx, s->blk[0], "x", &x0);
  if (st) return st;
  /* Gemma 3: x = wte[token] · sqrt(dim), an fp32 product rounded once
   * (coda_model_embed_scale; 1 in the other families) */
  const float esc = coda_model_embed_scale(c);
  PB();
  for (int64_t r = 0; r < M; r++) {
    int32_t tok = sample ? (r < T ? in[r] : 0) : in[r];
    const float *e = W + emb + (int64_t)tok * D;
    for (int64_t k = 0; k < D; k++)
      ((uint16_t *)x0.data)[r * x0.ld + k] = coda_f32_to_bf16(esc == 1.0f ? e[k] : e[k] * esc);
  }
  PE(CODA_PH_EMBED, -1);
  for (int i = 0; i < s->L && !st; i++) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_FORWARD);
    PE(CODA_PH_BLOCK_FWD, i);
  }
  if (st) return st;
  if (sample) {
    /* host: final RMSNorm and LM head for row T-1 */
    st = coda_plans_tensor(ctx, s->blk[s->L - 1], "x_out", &t);
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
    /* Gemma 3's final norm scales by 1 + w and caps the logits */
    const int gemma = coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3;
    for (int64_t k = 0; k < D; k++) h[k] = (float)(h[k] * r * (gemma ? 1.0f + wn[k] : wn[k]));
    for (int64_t v = 0; v < c->vocab; v++) {
      double a = 0.0;
      for (int64_t k = 0; k < D; k++) a += (double)h[k] * W[out + v * D + k];
      last_logits[v] = coda_ref_softcap((float)a, c->logit_softcap);
    }
    free(h);
    return CODA_OK;
  }
  int bwd = 0;
  st = coda_plans_loss_backward(ctx, m, s, tg, backward, gscale, loss, n_valid, &bwd);
  if (st || !bwd) return st;
  st = coda_plans_tensor(ctx, s->blk[0], "dx", &t);
  if (st) return st;
  PB();
  for (int64_t r = 0; r < M; r++) { /* embedding gradient: scatter-add in token order */
    float *g = G + emb + (int64_t)in[r] * D; /* d(e · esc)/de = esc */
    for (int64_t k = 0; k < D; k++)
      g[k] += gscale * esc * coda_bf16_to_f32(((const uint16_t *)t.data)[r * t.ld + k]);
  }
  PE(CODA_PH_EMBED, -1);
#undef OFF
  return CODA_OK;
}
