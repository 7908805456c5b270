/* The Llama-3 block's families on the plan engine (Llama, Qwen3, Gemma 3):
 * their block configuration from the model's, and which parameter goes to
 * which plan buffer (coda_plan_params, read by model_plans.c). */
#include "model/model_device.h"
#include "model/family.h"

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
