/* The model-family table (family.h). Llama's parameter list is the one
 * model.c always had; Qwen3's adds the per-head q and k norm weights right
 * after each layer's wqkv. GPT-2's has a bias after every weight (its
 * LayerNorms' and linears'), learned positions after the embedding, and a
 * head that is always the embedding (tied); its linears' HF tensors are
 * Conv1D's [in, out], transposed to coda's [out, in]. Gemma 3's is
 * Qwen3's with a norm after attention and after the MLP, its norms zero at
 * initialization (they scale by 1 + w). */
#include "base/internal.h"
#include "model/family.h"

#include <string.h>

#define LAYER(n, nd, r, c, dec, ini, conv, h0, h1, h2) \
  {n, CODA_P_LAYER, nd, r, c, dec, ini, 0, conv, {h0, h1, h2}}
#define MP "model.layers.%d."

#define EMBED                                                                              \
  {"tok_embeddings.weight", CODA_P_BEFORE, 2, CODA_PD_VOCAB, CODA_PD_DIM, 0,               \
   CODA_INIT_NORMAL, 0, CODA_HF_COPY, {"model.embed_tokens.weight", NULL, NULL}}
#define ATTN_NORM                                                                          \
  LAYER("layers.%d.attention_norm.weight", 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ONES, \
        CODA_HF_COPY, MP "input_layernorm.weight", NULL, NULL)
#define WQKV                                                                               \
  LAYER("layers.%d.attention.wqkv.weight", 2, CODA_PD_QKV, CODA_PD_DIM, 1, CODA_INIT_NORMAL, \
        CODA_HF_QKV, MP "self_attn.q_proj.weight", MP "self_attn.k_proj.weight",             \
        MP "self_attn.v_proj.weight")
#define WO                                                                                 \
  LAYER("layers.%d.attention.wo.weight", 2, CODA_PD_DIM, CODA_PD_QDIM, 1,                  \
        CODA_INIT_NORMAL_OUT, CODA_HF_COPY, MP "self_attn.o_proj.weight", NULL, NULL)
#define FFN_NORM                                                                           \
  LAYER("layers.%d.ffn_norm.weight", 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ONES,       \
        CODA_HF_COPY, MP "post_attention_layernorm.weight", NULL, NULL)
#define W13                                                                                \
  LAYER("layers.%d.feed_forward.w13.weight", 2, CODA_PD_FFN2, CODA_PD_DIM, 1,              \
        CODA_INIT_NORMAL, CODA_HF_GATE_UP, MP "mlp.gate_proj.weight", MP "mlp.up_proj.weight", \
        NULL)
#define W2                                                                                 \
  LAYER("layers.%d.feed_forward.w2.weight", 2, CODA_PD_DIM, CODA_PD_FFN, 1,                \
        CODA_INIT_NORMAL_OUT, CODA_HF_COPY, MP "mlp.down_proj.weight", NULL, NULL)
#define FINAL_NORM                                                                         \
  {"norm.weight", CODA_P_AFTER, 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ONES, 0,          \
   CODA_HF_COPY, {"model.norm.weight", NULL, NULL}}
#define OUTPUT                                                                             \
  {"output.weight", CODA_P_AFTER, 2, CODA_PD_VOCAB, CODA_PD_DIM, 1, CODA_INIT_NORMAL, 1,    \
   CODA_HF_COPY, {"lm_head.weight", NULL, NULL}}

static const coda_family_param llama_params[] = {EMBED, ATTN_NORM, WQKV, WO, FFN_NORM,
                                                 W13,   W2,        FINAL_NORM, OUTPUT};

static const coda_family_param qwen3_params[] = {
    EMBED, ATTN_NORM, WQKV,
    LAYER("layers.%d.attention.q_norm.weight", 1, CODA_PD_HEAD, CODA_PD_ONE, 0, CODA_INIT_ONES,
          CODA_HF_HEAD_PERM, MP "self_attn.q_norm.weight", NULL, NULL),
    LAYER("layers.%d.attention.k_norm.weight", 1, CODA_PD_HEAD, CODA_PD_ONE, 0, CODA_INIT_ONES,
          CODA_HF_HEAD_PERM, MP "self_attn.k_norm.weight", NULL, NULL),
    WO, FFN_NORM, W13, W2, FINAL_NORM, OUTPUT};

/* GPT-2: coda names (the Llama names where a tensor plays the same part)
 * and GPT2LMHeadModel's */
#define GP "transformer.h.%d."
#define GLAYER(n, nd, r, c, dec, ini, conv, h) LAYER(n, nd, r, c, dec, ini, conv, GP h, NULL, NULL)
#define GBIAS(n, r, h) GLAYER(n, 1, r, CODA_PD_ONE, 0, CODA_INIT_ZEROS, CODA_HF_COPY, h)
static const coda_family_param gpt2_params[] = {
    {"tok_embeddings.weight", CODA_P_BEFORE, 2, CODA_PD_VOCAB, CODA_PD_DIM, 0, CODA_INIT_NORMAL, 0,
     CODA_HF_COPY, {"transformer.wte.weight", NULL, NULL}},
    {"pos_embeddings.weight", CODA_P_BEFORE, 2, CODA_PD_SEQ, CODA_PD_DIM, 0, CODA_INIT_NORMAL, 0,
     CODA_HF_COPY, {"transformer.wpe.weight", NULL, NULL}},
    GLAYER("layers.%d.attention_norm.weight", 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ONES,
           CODA_HF_COPY, "ln_1.weight"),
    GBIAS("layers.%d.attention_norm.bias", CODA_PD_DIM, "ln_1.bias"),
    GLAYER("layers.%d.attention.wqkv.weight", 2, CODA_PD_QKV, CODA_PD_DIM, 1, CODA_INIT_NORMAL,
           CODA_HF_TRANSPOSE, "attn.c_attn.weight"),
    GBIAS("layers.%d.attention.wqkv.bias", CODA_PD_QKV, "attn.c_attn.bias"),
    GLAYER("layers.%d.attention.wo.weight", 2, CODA_PD_DIM, CODA_PD_QDIM, 1, CODA_INIT_NORMAL_OUT,
           CODA_HF_TRANSPOSE, "attn.c_proj.weight"),
    GBIAS("layers.%d.attention.wo.bias", CODA_PD_DIM, "attn.c_proj.bias"),
    GLAYER("layers.%d.ffn_norm.weight", 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ONES,
           CODA_HF_COPY, "ln_2.weight"),
    GBIAS("layers.%d.ffn_norm.bias", CODA_PD_DIM, "ln_2.bias"),
    GLAYER("layers.%d.feed_forward.wfc.weight", 2, CODA_PD_FFN, CODA_PD_DIM, 1, CODA_INIT_NORMAL,
           CODA_HF_TRANSPOSE, "mlp.c_fc.weight"),
    GBIAS("layers.%d.feed_forward.wfc.bias", CODA_PD_FFN, "mlp.c_fc.bias"),
    GLAYER("layers.%d.feed_forward.wproj.weight", 2, CODA_PD_DIM, CODA_PD_FFN, 1,
           CODA_INIT_NORMAL_OUT, CODA_HF_TRANSPOSE, "mlp.c_proj.weight"),
    GBIAS("layers.%d.feed_forward.wproj.bias", CODA_PD_DIM, "mlp.c_proj.bias"),
    {"norm.weight", CODA_P_AFTER, 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ONES, 0, CODA_HF_COPY,
     {"transformer.ln_f.weight", NULL, NULL}},
    {"norm.bias", CODA_P_AFTER, 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ZEROS, 0, CODA_HF_COPY,
     {"transformer.ln_f.bias", NULL, NULL}}};

/* Gemma 3 (Gemma3ForCausalLM): Llama's names where a tensor plays the same
 * part, Qwen3's q/k norms, and a norm after attention and after the MLP.
 * Its norms scale by (1 + w), so they start at zero; ffn_norm is HF's
 * pre_feedforward_layernorm (post_attention_layernorm is the norm of the
 * attention's output, attention.post_norm here). */
#define ZNORM(n, r, conv, h) LAYER(n, 1, r, CODA_PD_ONE, 0, CODA_INIT_ZEROS, conv, MP h, NULL, NULL)
static const coda_family_param gemma3_params[] = {
    EMBED,
    ZNORM("layers.%d.attention_norm.weight", CODA_PD_DIM, CODA_HF_COPY, "input_layernorm.weight"),
    WQKV,
    ZNORM("layers.%d.attention.q_norm.weight", CODA_PD_HEAD, CODA_HF_HEAD_PERM,
          "self_attn.q_norm.weight"),
    ZNORM("layers.%d.attention.k_norm.weight", CODA_PD_HEAD, CODA_HF_HEAD_PERM,
          "self_attn.k_norm.weight"),
    WO,
    ZNORM("layers.%d.attention.post_norm.weight", CODA_PD_DIM, CODA_HF_COPY,
          "post_attention_layernorm.weight"),
    ZNORM("layers.%d.ffn_norm.weight", CODA_PD_DIM, CODA_HF_COPY,
          "pre_feedforward_layernorm.weight"),
    W13, W2,
    ZNORM("layers.%d.feed_forward.post_norm.weight", CODA_PD_DIM, CODA_HF_COPY,
          "post_feedforward_layernorm.weight"),
    {"norm.weight", CODA_P_AFTER, 1, CODA_PD_DIM, CODA_PD_ONE, 0, CODA_INIT_ZEROS, 0,
     CODA_HF_COPY, {"model.norm.weight", NULL, NULL}},
    OUTPUT};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const coda_family families[] = {
    {CODA_FAMILY_LLAMA, "llama", {"LlamaForCausalLM", "MistralForCausalLM"},
     {"llama", "mistral"}, 0, CODA_BLOCK_LLAMA, COUNT(llama_params), llama_params},
    {CODA_FAMILY_QWEN3, "qwen3", {"Qwen3ForCausalLM", NULL}, {"qwen3", NULL}, 1,
     CODA_BLOCK_LLAMA, COUNT(qwen3_params), qwen3_params},
    {CODA_FAMILY_GPT2, "gpt2", {"GPT2LMHeadModel", NULL}, {"gpt2", NULL}, 0, CODA_BLOCK_GPT2,
     COUNT(gpt2_params), gpt2_params},
    {CODA_FAMILY_GEMMA3, "gemma3", {"Gemma3ForCausalLM", NULL}, {"gemma3_text", NULL}, 1,
     CODA_BLOCK_GEMMA3, COUNT(gemma3_params), gemma3_params},
};

const coda_family *coda_family_of(coda_model_family f) {
  for (int i = 0; i < COUNT(families); i++)
    if (families[i].id == f) return &families[i];
  return NULL;
}

const char *coda_model_family_name(coda_model_family f) {
  const coda_family *t = coda_family_of(f);
  return t ? t->name : NULL;
}

coda_status coda_model_family_from_name(coda_context ctx, const char *name,
                                        coda_model_family *out) {
  if (!name || !out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL argument");
  for (int i = 0; i < COUNT(families); i++)
    if (!strcmp(families[i].name, name)) {
      *out = families[i].id;
      return CODA_OK;
    }
  return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                   "model family \"%.64s\" is unknown (llama, qwen3, gpt2, gemma3)", name);
}

int coda_model_head_dim(const coda_model_config *c) {
  return c->head_dim ? c->head_dim : c->heads ? c->dim / c->heads : 0;
}

int64_t coda_family_dim(const coda_model_config *c, coda_pdim d) {
  const int64_t hd = coda_model_head_dim(c);
  switch (d) {
  case CODA_PD_ONE: return 1;
  case CODA_PD_VOCAB: return c->vocab;
  case CODA_PD_DIM: return c->dim;
  case CODA_PD_FFN: return c->ffn;
  case CODA_PD_FFN2: return 2 * (int64_t)c->ffn;
  case CODA_PD_QKV: return ((int64_t)c->heads + 2 * (int64_t)c->kv_heads) * hd;
  case CODA_PD_QDIM: return (int64_t)c->heads * hd;
  case CODA_PD_HEAD: return hd;
  case CODA_PD_SEQ: return c->seq;
  }
  return 0;
}

int coda_family_layer_params(const coda_family *f) {
  int n = 0;
  for (int i = 0; i < f->nparams; i++) n += f->params[i].where == CODA_P_LAYER;
  return n;
}

int coda_family_count_params(const coda_family *f, const coda_model_config *c) {
  int n = 0;
  for (int i = 0; i < f->nparams; i++) {
    const coda_family_param *p = &f->params[i];
    if (p->untied_only && c->tied) continue;
    n += p->where == CODA_P_LAYER ? c->layers : 1;
  }
  return n;
}
