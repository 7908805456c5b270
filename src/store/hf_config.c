/* config.json of the Hugging Face layout: the model it describes, through
 * the family table (family.c: which "architectures" and "model_type" name a
 * family; GPT-2's keys are its own, hf_gpt2, and Gemma 3's, hf_gemma3), or
 * the reason coda cannot
 * run it. Top-level keys only; what
 * coda does not run (biases, another activation, sliding windows, MoE, a
 * RoPE type other than default, linear and llama3, ...) is refused by
 * name, with the value and what is allowed, never dropped. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

char *coda_hf_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

static coda_status read_text(coda_context ctx, const char *path, char **out, size_t *len) {
  unsigned char *b;
  size_t n;
  /* a regular file of at most 16 MiB (a FIFO or device is refused; an
   * index of a large sharded checkpoint holds some 100 KiB) */
  coda_status s = coda_read_file_max(ctx, path, (16u << 20) - 1, &b, &n);
  if (s) return s;
  unsigned char *nb = realloc(b, n + 1);
  if (!nb) { free(b); return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); }
  nb[n] = '\0';
  *out = (char *)nb;
  *len = n;
  return CODA_OK;
}

/* Parses a JSON file whose root must be an object with unique keys. */
coda_status coda_hf_read_json(coda_context ctx, const char *path, coda_json_doc **out) {
  char *js = NULL;
  size_t n = 0;
  *out = NULL;
  coda_status s = read_text(ctx, path, &js, &n);
  if (s) return s;
  char err[256];
  coda_json_doc *d = coda_json_parse(js, n, err, sizeof err);
  free(js);
  if (!d) return coda_fail(ctx, CODA_ERR_IO, "%s: invalid JSON: %s", path, err);
  const coda_json *r = coda_json_root(d);
  if (r->kind != CODA_JSON_OBJECT) {
    const coda_json_kind k = r->kind;
    coda_json_free(d);
    return coda_fail(ctx, CODA_ERR_IO, "%s: the top level is %s, not an object", path,
                     coda_json_kind_name(k));
  }
  for (size_t i = 0; i < r->n; i++)
    for (size_t j = 0; j < i; j++)
      if (r->u.members[i].key_len == r->u.members[j].key_len &&
          !memcmp(r->u.members[i].key, r->u.members[j].key, r->u.members[i].key_len)) {
        char k[96];
        snprintf(k, sizeof k, "%s", r->u.members[i].key);
        coda_json_free(d);
        return coda_fail(ctx, CODA_ERR_IO, "%s: key \"%s\" appears twice", path, k);
      }
  *out = d;
  return CODA_OK;
}

/* A member that is absent or null. */
static int is_unset(const coda_json *v) { return !v || v->kind == CODA_JSON_NULL; }

/* Number member `key` of obj (`where` names obj in messages); absent or
 * null: dflt, or an error when required. */
static coda_status cfg_num(coda_context ctx, const char *path, const char *where,
                           const coda_json *obj, const char *key, int required, double dflt,
                           double *out) {
  const coda_json *v = coda_json_get(obj, key);
  if (is_unset(v)) {
    if (required) return coda_fail(ctx, CODA_ERR_IO, "%s: %s\"%s\" is missing", path, where, key);
    *out = dflt;
    return CODA_OK;
  }
  if (v->kind != CODA_JSON_NUMBER || !isfinite(v->u.num))
    return coda_fail(ctx, CODA_ERR_IO, "%s: %s\"%s\" is %s, not a finite number", path, where,
                     key, coda_json_kind_name(v->kind));
  *out = v->u.num;
  return CODA_OK;
}

static coda_status cfg_int(coda_context ctx, const char *path, const coda_json *obj,
                           const char *key, int required, int dflt, int *out) {
  double x = 0.0;
  coda_status s = cfg_num(ctx, path, "", obj, key, required, dflt, &x);
  if (s) return s;
  if (x < 1 || x > (1 << 30) || x != floor(x))
    return coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" = %g is not a positive integer", path, key, x);
  *out = (int)x;
  return CODA_OK;
}

/* Boolean member; absent or null: dflt. */
static coda_status cfg_bool(coda_context ctx, const char *path, const coda_json *obj,
                            const char *key, int dflt, int *out) {
  const coda_json *v = coda_json_get(obj, key);
  if (is_unset(v)) { *out = dflt; return CODA_OK; }
  if (v->kind != CODA_JSON_TRUE && v->kind != CODA_JSON_FALSE)
    return coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" is %s, not true or false", path, key,
                     coda_json_kind_name(v->kind));
  *out = v->kind == CODA_JSON_TRUE;
  return CODA_OK;
}

/* RoPE scaling from `rope_scaling` (transformers 4) or `rope_parameters`
 * (transformers 5: also carries rope_theta); the type under "rope_type"
 * or the older "type". */
static coda_status cfg_rope(coda_context ctx, const char *path, const coda_json *root,
                            coda_model_config *c) {
  const coda_json *rs = coda_json_get(root, "rope_scaling");
  const coda_json *rp = coda_json_get(root, "rope_parameters");
  const char *name = "rope_scaling";
  if (!is_unset(rs) && !is_unset(rp))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: both \"rope_scaling\" and \"rope_parameters\" are set (one spelling only)",
                     path);
  if (is_unset(rs)) { rs = rp; name = "rope_parameters"; }
  memset(&c->rope, 0, sizeof c->rope);
  if (is_unset(rs)) return CODA_OK;
  if (rs->kind != CODA_JSON_OBJECT)
    return coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" is %s, not an object", path, name,
                     coda_json_kind_name(rs->kind));
  char where[64];
  snprintf(where, sizeof where, "%s.", name);
  double theta = 0.0;
  coda_status s = cfg_num(ctx, path, where, rs, "rope_theta", 0, c->rope_theta, &theta);
  if (s) return s;
  if (theta != c->rope_theta && !is_unset(coda_json_get(root, "rope_theta")))
    return coda_fail(ctx, CODA_ERR_IO, "%s: rope_theta %g and %s.rope_theta %g differ", path,
                     c->rope_theta, name, theta);
  c->rope_theta = theta;
  const coda_json *t = coda_json_get(rs, "rope_type");
  if (is_unset(t)) t = coda_json_get(rs, "type");
  if (is_unset(t)) return coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" has no \"rope_type\"", path, name);
  if (t->kind != CODA_JSON_STRING)
    return coda_fail(ctx, CODA_ERR_IO, "%s: %s.rope_type is %s, not a string", path, name,
                     coda_json_kind_name(t->kind));
  double prf = 1.0;
  s = cfg_num(ctx, path, where, rs, "partial_rotary_factor", 0, 1.0, &prf);
  if (s) return s;
  if (prf != 1.0)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: %s.partial_rotary_factor %g: coda rotates the whole head", path, name, prf);
  if (coda_json_is_str(t, "default")) return CODA_OK;
  if (coda_json_is_str(t, "linear")) {
    c->rope.type = CODA_ROPE_LINEAR;
    s = cfg_num(ctx, path, where, rs, "factor", 1, 0, &c->rope.factor);
  } else if (coda_json_is_str(t, "llama3")) {
    c->rope.type = CODA_ROPE_LLAMA3;
    s = cfg_num(ctx, path, where, rs, "factor", 1, 0, &c->rope.factor);
    if (!s) s = cfg_num(ctx, path, where, rs, "low_freq_factor", 1, 0, &c->rope.low_freq_factor);
    if (!s) s = cfg_num(ctx, path, where, rs, "high_freq_factor", 1, 0, &c->rope.high_freq_factor);
    if (!s) s = cfg_num(ctx, path, where, rs, "original_max_position_embeddings", 1, 0,
                        &c->rope.original_max_position);
  } else {
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: %s.rope_type \"%.64s\" is not supported (default, linear and llama3 are)",
                     path, name, t->u.str);
  }
  if (!s) {
    /* an attention scale other than 1 is not what these types compute */
    double af;
    s = cfg_num(ctx, path, where, rs, "attention_factor", 0, 1.0, &af);
    if (!s && af != 1.0)
      s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s.attention_factor %g is not supported",
                    path, name, af);
  }
  if (!s && coda_rope_scaling_check(ctx, &c->rope))
    s = coda_fail(ctx, CODA_ERR_IO, "%s: %s: %s", path, name, coda_last_error(ctx));
  return s;
}

/* The family that "model_type" and "architectures" name (both optional;
 * neither: llama); they must agree. */
static coda_status hf_family(coda_context ctx, const char *path, const coda_json *r,
                             coda_model_family *out) {
  const coda_json *mt = coda_json_get(r, "model_type"), *ar = coda_json_get(r, "architectures");
  const coda_family *by_type = NULL, *by_arch = NULL;
  if (!is_unset(mt)) {
    if (mt->kind != CODA_JSON_STRING)
      return coda_fail(ctx, CODA_ERR_IO, "%s: \"model_type\" is not a string", path);
    if (coda_json_is_str(mt, "qwen2"))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s: model_type qwen2 has q/k/v projection biases, which coda does not "
                       "implement (llama, mistral, qwen3, gpt2, gemma3_text are supported)", path);
    if (coda_json_is_str(mt, "gemma3"))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s: model_type gemma3 is the multimodal Gemma3ForConditionalGeneration "
                       "(text_config, vision_config): coda imports its text model, model_type "
                       "gemma3_text (Gemma3ForCausalLM)", path);
    if (coda_json_is_str(mt, "qwen3_moe"))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s: model_type qwen3_moe is a mixture of experts, which coda does not "
                       "implement (the dense qwen3 is supported)", path);
    for (int f = 0; !by_type && coda_family_of((coda_model_family)f); f++)
      for (int k = 0; k < 2; k++) {
        const char *t = coda_family_of((coda_model_family)f)->hf_type[k];
        if (t && coda_json_is_str(mt, t)) by_type = coda_family_of((coda_model_family)f);
      }
    if (!by_type)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: model_type \"%.64s\" is not supported "
                       "(llama, mistral, qwen3, gpt2, gemma3_text)", path, mt->u.str);
  }
  if (!is_unset(ar)) {
    int ok = ar->kind == CODA_JSON_ARRAY && ar->n >= 1;
    for (size_t i = 0; ok && i < ar->n; i++) {
      const coda_family *hit = NULL;
      for (int f = 0; !hit && coda_family_of((coda_model_family)f); f++)
        for (int k = 0; k < 2; k++) {
          const char *a = coda_family_of((coda_model_family)f)->hf_arch[k];
          if (a && coda_json_is_str(&ar->u.items[i], a)) hit = coda_family_of((coda_model_family)f);
        }
      ok = hit && (!by_arch || hit == by_arch);
      by_arch = hit;
    }
    if (!ok)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s: \"architectures\" must list one of LlamaForCausalLM, "
                       "MistralForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, "
                       "Gemma3ForCausalLM", path);
  }
  if (by_type && by_arch && by_type != by_arch)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: model_type \"%s\" and architectures "
                     "\"%s\" name different families (%s, %s)", path, mt->u.str,
                     ar->u.items[0].u.str, by_type->name, by_arch->name);
  *out = by_type ? by_type->id : by_arch ? by_arch->id : CODA_FAMILY_LLAMA;
  return CODA_OK;
}

/* The head width: Llama takes hidden_size / heads (head_dim may say so);
 * Qwen3 any even head_dim, transformers' default 128 when absent. */
static coda_status hf_head_dim(coda_context ctx, const char *path, const coda_json *r,
                               coda_model_config *c) {
  int hd = 0;
  if (c->family == CODA_FAMILY_QWEN3) {
    coda_status s = cfg_int(ctx, path, r, "head_dim", 0, 128, &hd);
    c->head_dim = hd;
    return s;
  }
  /* before head_dim, whose default is hidden_size / heads: a reason that
   * names the keys the file has */
  if (c->dim % c->heads)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: hidden_size %d is not a multiple of num_attention_heads %d", path,
                     c->dim, c->heads);
  coda_status s = cfg_int(ctx, path, r, "head_dim", 0, c->dim / c->heads, &hd);
  if (!s && (int64_t)hd * c->heads != c->dim)
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                  "%s: head_dim %d x num_attention_heads %d != hidden_size %d (model_type llama "
                  "takes head_dim = hidden_size / heads; qwen3 allows others)", path, hd,
                  c->heads, c->dim);
  return s;
}

/* Whether a llama-family config is Mistral's: model_type mistral, or no
 * model_type and MistralForCausalLM among the architectures (transformers'
 * AutoModel goes by model_type). */
static int hf_is_mistral(const coda_json *r) {
  const coda_json *mt = coda_json_get(r, "model_type"), *ar = coda_json_get(r, "architectures");
  if (!is_unset(mt)) return coda_json_is_str(mt, "mistral");
  if (is_unset(ar) || ar->kind != CODA_JSON_ARRAY) return 0;
  for (size_t i = 0; i < ar->n; i++)
    if (coda_json_is_str(&ar->u.items[i], "MistralForCausalLM")) return 1;
  return 0;
}

/* Sliding windows. Mistral (MistralForCausalLM): every layer's query t
 * sees the keys j with t - sliding_window < j <= t (transformers'
 * sliding_window_overlay on the causal mask), the window imported as it
 * is (one of seq or more masks nothing: kept all the same, so an export
 * writes it back); MistralConfig's default 4096 where the key is absent,
 * none where it is null. Mistral's attention does not read
 * use_sliding_window, so false beside a window is refused as a
 * contradiction. Llama (LlamaForCausalLM) has no window: transformers
 * ignores a sliding_window there, so one shorter than the sequence is
 * refused (which of the two was meant is not known), a longer one has
 * no effect. Qwen3: use_sliding_window must be false, layer_types all
 * full_attention. */
static coda_status hf_llama_window(coda_context ctx, const char *path, const coda_json *r,
                                   int use_sw, coda_model_config *c) {
  const int mistral = hf_is_mistral(r);
  const coda_json *swv = coda_json_get(r, "sliding_window");
  double sw = 0;
  coda_status s = cfg_num(ctx, path, "", r, "sliding_window", 0, mistral && !swv ? 4096 : 0, &sw);
  if (s) return s;
  const int has_window = mistral ? !(swv && swv->kind == CODA_JSON_NULL) : !is_unset(swv);
  if (has_window && !(sw >= 1 && sw <= (1 << 30) && sw == floor(sw)))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: sliding_window %g is not a window: a "
                     "positive integer (up to 2^30) or null (none) is supported", path, sw);
  if (mistral && has_window && !use_sw)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: use_sliding_window is false but "
                     "sliding_window is %g: transformers' MistralForCausalLM does not read "
                     "use_sliding_window and attends over the window; set sliding_window null "
                     "for full causal attention, or drop use_sliding_window", path, sw);
  if (mistral && has_window) c->sliding_window = (int)sw;
  if (!mistral && has_window && use_sw && sw < c->seq)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: sliding_window %g is shorter than the sequence (%d) under model_type "
                     "llama, whose attention transformers does not window "
                     "(LlamaForCausalLM ignores the key): for a window on every layer set "
                     "model_type mistral (MistralForCausalLM), for full causal attention "
                     "sliding_window null", path, sw, c->seq);
  return CODA_OK;
}

static coda_status hf_window(coda_context ctx, const char *path, const coda_json *r,
                             coda_model_config *c) {
  const int qwen3 = c->family == CODA_FAMILY_QWEN3;
  int use_sw = 1;
  coda_status s = cfg_bool(ctx, path, r, "use_sliding_window", !qwen3, &use_sw);
  if (!s && qwen3 && use_sw)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: use_sliding_window is true: coda's "
                     "qwen3 attention is full causal (false is supported)", path);
  if (!s && !qwen3) s = hf_llama_window(ctx, path, r, use_sw, c);
  const coda_json *lt = coda_json_get(r, "layer_types");
  if (s || is_unset(lt)) return s;
  if (lt->kind != CODA_JSON_ARRAY || lt->n != (size_t)c->layers)
    return coda_fail(ctx, CODA_ERR_IO, "%s: \"layer_types\" is not an array of %d strings",
                     path, c->layers);
  for (size_t i = 0; i < lt->n; i++)
    if (!coda_json_is_str(&lt->u.items[i], "full_attention"))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s: layer_types[%zu] is %s%.64s%s: coda runs \"full_attention\" layers "
                       "only", path, i, lt->u.items[i].kind == CODA_JSON_STRING ? "\"" : "(",
                       lt->u.items[i].kind == CODA_JSON_STRING ? lt->u.items[i].u.str
                       : coda_json_kind_name(lt->u.items[i].kind),
                       lt->u.items[i].kind == CODA_JSON_STRING ? "\"" : ")");
  return CODA_OK;
}

/* Biases, the activation (silu: Llama's and Qwen3's hidden_act), mixtures
 * of experts and quantization. */
static coda_status hf_refusals(coda_context ctx, const char *path, const coda_json *r, int silu) {
  int ab = 0, mb = 0;
  coda_status s = cfg_bool(ctx, path, r, "attention_bias", 0, &ab);
  if (!s) s = cfg_bool(ctx, path, r, "mlp_bias", 0, &mb);
  if (!s && (ab || mb))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s is true: coda's models have no "
                     "biases (false is supported)", path, ab ? "attention_bias" : "mlp_bias");
  const coda_json *act = coda_json_get(r, "hidden_act");
  if (!s && silu && !is_unset(act) && !coda_json_is_str(act, "silu") &&
      !coda_json_is_str(act, "swish"))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: hidden_act %s%.64s%s is not supported (silu only)", path,
                     act->kind == CODA_JSON_STRING ? "\"" : "(",
                     act->kind == CODA_JSON_STRING ? act->u.str : coda_json_kind_name(act->kind),
                     act->kind == CODA_JSON_STRING ? "\"" : ")");
  static const char *moe[] = {"num_experts", "num_experts_per_tok", "num_local_experts",
                              "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
                              "shared_expert_intermediate_size"};
  for (size_t i = 0; !s && i < sizeof moe / sizeof moe[0]; i++)
    if (!is_unset(coda_json_get(r, moe[i])))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: \"%s\" is set: mixtures of experts "
                       "are not supported (dense models only)", path, moe[i]);
  if (!s && !is_unset(coda_json_get(r, "quantization_config")))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s: quantized checkpoints (quantization_config) are not supported", path);
  return s;
}

/* A string member that must be one of `ok` (absent: the first). */
static coda_status cfg_one_of(coda_context ctx, const char *path, const coda_json *r,
                              const char *key, const char *const *ok, int nok,
                              const char *allowed) {
  const coda_json *v = coda_json_get(r, key);
  if (is_unset(v)) return CODA_OK;
  for (int i = 0; i < nok; i++)
    if (coda_json_is_str(v, ok[i])) return CODA_OK;
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s %s%.64s%s is not supported (%s)", path,
                   key, v->kind == CODA_JSON_STRING ? "\"" : "(",
                   v->kind == CODA_JSON_STRING ? v->u.str : coda_json_kind_name(v->kind),
                   v->kind == CODA_JSON_STRING ? "\"" : ")", allowed);
}

/* GPT2Config's keys (transformers): n_embd, n_layer, n_head, n_inner
 * (null: 4 n_embd), n_positions, layer_norm_epsilon, the tanh GELU, a
 * tied head. What GPT-2 variants change and coda does not run (another
 * activation, attention scaled otherwise, cross-attention, RoPE) is
 * refused by name. Dropout rates are accepted: coda trains without
 * dropout, and inference never applies it. */
static coda_status hf_gpt2(coda_context ctx, const char *path, const coda_json *r,
                           coda_model_config *c) {
  coda_status s = cfg_int(ctx, path, r, "n_embd", 1, 0, &c->dim);
  if (!s) s = cfg_int(ctx, path, r, "n_layer", 1, 0, &c->layers);
  if (!s) s = cfg_int(ctx, path, r, "n_head", 1, 0, &c->heads);
  if (!s) s = cfg_int(ctx, path, r, "vocab_size", 1, 0, &c->vocab);
  if (!s) s = cfg_int(ctx, path, r, "n_positions", 0, 1024, &c->seq);
  if (!s && c->dim <= (1 << 28)) s = cfg_int(ctx, path, r, "n_inner", 0, 4 * c->dim, &c->ffn);
  if (!s) s = cfg_num(ctx, path, "", r, "layer_norm_epsilon", 0, 1e-5, &c->norm_eps);
  if (!s) s = cfg_bool(ctx, path, r, "tie_word_embeddings", 1, &c->tied);
  if (s) return s;
  c->kv_heads = c->heads;
  c->rope_theta = 10000.0; /* no RoPE: unused */
  int ctx_len = c->seq;
  s = cfg_int(ctx, path, r, "n_ctx", 0, c->seq, &ctx_len);
  if (!s && ctx_len != c->seq)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: n_ctx %d differs from n_positions %d (one "
                     "context length only)", path, ctx_len, c->seq);
  static const char *const tanh_gelu[] = {"gelu_new", "gelu_pytorch_tanh"};
  if (!s) s = cfg_one_of(ctx, path, r, "activation_function", tanh_gelu, 2,
                         "the tanh GELU: gelu_new, gelu_pytorch_tanh");
  int scale = 1, by_layer = 0, cross = 0;
  if (!s) s = cfg_bool(ctx, path, r, "scale_attn_weights", 1, &scale);
  if (!s) s = cfg_bool(ctx, path, r, "scale_attn_by_inverse_layer_idx", 0, &by_layer);
  if (!s) s = cfg_bool(ctx, path, r, "add_cross_attention", 0, &cross);
  if (!s && (!scale || by_layer || cross))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s is %s: coda's attention is causal "
                     "self-attention scaled by 1/sqrt(head_dim) (%s)", path,
                     !scale ? "scale_attn_weights" : by_layer ? "scale_attn_by_inverse_layer_idx"
                     : "add_cross_attention", !scale ? "false" : "true",
                     !scale ? "true is supported" : "false is supported");
  static const char *const rope_keys[] = {"rope_scaling", "rope_parameters", "rope_theta"};
  for (int i = 0; !s && i < 3; i++)
    if (!is_unset(coda_json_get(r, rope_keys[i])))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: \"%s\" is set: model_type gpt2 has no "
                       "RoPE (learned positions)", path, rope_keys[i]);
  return s;
}

/* Gemma 3's layer pattern from layer_types (a list of "sliding_attention"
 * and "full_attention") and sliding_window_pattern (layer i global when
 * (i + 1) % pattern == 0; transformers' default 6), which must agree when
 * both are there. coda takes the periodic lists transformers derives from
 * a pattern; another list is refused by its first layer that differs. All
 * global: no window (0, 0). */
static coda_status hf_gemma3_layers(coda_context ctx, const char *path, const coda_json *r,
                                    coda_model_config *c) {
  const coda_json *lt = coda_json_get(r, "layer_types");
  const int has_pat = !is_unset(coda_json_get(r, "sliding_window_pattern"));
  int pat = 6;
  coda_status s = cfg_int(ctx, path, r, "sliding_window_pattern", 0, 6, &pat);
  if (s) return s;
  if (!is_unset(lt)) {
    if (lt->kind != CODA_JSON_ARRAY || lt->n != (size_t)c->layers)
      return coda_fail(ctx, CODA_ERR_IO, "%s: \"layer_types\" is not an array of %d strings",
                       path, c->layers);
    int first_full = c->layers;
    for (size_t i = 0; i < lt->n; i++) {
      const coda_json *t = &lt->u.items[i];
      if (!coda_json_is_str(t, "full_attention") && !coda_json_is_str(t, "sliding_attention"))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: layer_types[%zu] is %s%.64s%s "
                         "(\"sliding_attention\" and \"full_attention\" are supported)", path, i,
                         t->kind == CODA_JSON_STRING ? "\"" : "(",
                         t->kind == CODA_JSON_STRING ? t->u.str : coda_json_kind_name(t->kind),
                         t->kind == CODA_JSON_STRING ? "\"" : ")");
      if (coda_json_is_str(t, "full_attention") && first_full == c->layers) first_full = (int)i;
    }
    const int from_list = first_full + 1; /* none global: longer than the model */
    if (has_pat && pat != from_list && !(from_list > c->layers && pat > c->layers))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: layer_types (its first global layer "
                       "%d) and sliding_window_pattern %d disagree", path, first_full, pat);
    pat = from_list;
    for (size_t i = 0; i < lt->n; i++)
      if (coda_json_is_str(&lt->u.items[i], "full_attention") != ((int)(i + 1) % pat == 0))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: layer_types[%zu] is \"%s\": coda "
                         "runs every n-th layer global (layer i global when (i + 1) %% n == 0, "
                         "n = %d here), the others sliding", path, i, lt->u.items[i].u.str, pat);
  }
  c->sliding_pattern = pat;
  if (pat == 1) c->sliding_window = c->sliding_pattern = 0; /* every layer global */
  return CODA_OK;
}

/* transformers 5's rope_parameters of Gemma 3: {"full_attention": {...},
 * "sliding_attention": {...}}, each of rope_type default with its
 * rope_theta (the global and the local base; where rope_theta or
 * rope_local_base_freq is also given, the same). Another type, a scaling
 * or another key is refused by name. */
static coda_status hf_gemma3_rope(coda_context ctx, const char *path, const coda_json *r,
                                  coda_model_config *c) {
  const coda_json *rp = coda_json_get(r, "rope_parameters");
  if (is_unset(rp)) return CODA_OK;
  if (rp->kind != CODA_JSON_OBJECT)
    return coda_fail(ctx, CODA_ERR_IO, "%s: \"rope_parameters\" is %s, not an object", path,
                     coda_json_kind_name(rp->kind));
  static const char *const kinds[] = {"full_attention", "sliding_attention"};
  static const char *const flat[] = {"rope_theta", "rope_local_base_freq"};
  double *theta[] = {&c->rope_theta, &c->rope_local_theta};
  for (size_t i = 0; i < rp->n; i++) {
    const char *k = rp->u.members[i].key;
    if (strcmp(k, kinds[0]) && strcmp(k, kinds[1]))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: rope_parameters.%.64s: coda's gemma3 "
                       "takes full_attention and sliding_attention only", path, k);
  }
  for (int i = 0; i < 2; i++) {
    const coda_json *o = coda_json_get(rp, kinds[i]);
    if (is_unset(o)) continue;
    char where[64];
    snprintf(where, sizeof where, "rope_parameters.%s.", kinds[i]);
    if (o->kind != CODA_JSON_OBJECT)
      return coda_fail(ctx, CODA_ERR_IO, "%s: rope_parameters.%s is not an object", path, kinds[i]);
    for (size_t j = 0; j < o->n; j++)
      if (strcmp(o->u.members[j].key, "rope_type") && strcmp(o->u.members[j].key, "rope_theta"))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s%.64s is set: coda's gemma3 rotates "
                         "without scaling (rope_type default and rope_theta only)", path, where,
                         o->u.members[j].key);
    const coda_json *t = coda_json_get(o, "rope_type");
    if (!is_unset(t) && !coda_json_is_str(t, "default"))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %srope_type is not \"default\": coda's "
                       "gemma3 rotates without scaling", path, where);
    double th = *theta[i];
    coda_status s = cfg_num(ctx, path, where, o, "rope_theta", 0, *theta[i], &th);
    if (s) return s;
    if (th != *theta[i] && !is_unset(coda_json_get(r, flat[i])))
      return coda_fail(ctx, CODA_ERR_IO, "%s: %s %g and %srope_theta %g differ", path, flat[i],
                       *theta[i], where, th);
    *theta[i] = th;
  }
  return CODA_OK;
}

/* Gemma3TextConfig's keys (transformers' defaults where absent, but the
 * sizes): head_dim (256), rms_norm_eps (1e-6), rope_theta (1e6) and
 * rope_local_base_freq (1e4), query_pre_attn_scalar (256), sliding_window
 * (4096) and the layer pattern, final_logit_softcapping (null), the tanh
 * GELU, the head tied; the RoPE bases also from rope_parameters
 * (hf_gemma3_rope). What Gemma 3 variants set and coda does not run (RoPE
 * scaling, attention-score soft-capping, bidirectional attention, biases,
 * another activation) is refused by name. */
static coda_status hf_gemma3(coda_context ctx, const char *path, const coda_json *r,
                             coda_model_config *c) {
  coda_status s = cfg_int(ctx, path, r, "hidden_size", 1, 0, &c->dim);
  if (!s) s = cfg_int(ctx, path, r, "intermediate_size", 1, 0, &c->ffn);
  if (!s) s = cfg_int(ctx, path, r, "num_hidden_layers", 1, 0, &c->layers);
  if (!s) s = cfg_int(ctx, path, r, "num_attention_heads", 1, 0, &c->heads);
  if (!s) s = cfg_int(ctx, path, r, "num_key_value_heads", 0, 4, &c->kv_heads);
  if (!s) s = cfg_int(ctx, path, r, "vocab_size", 1, 0, &c->vocab);
  if (!s) s = cfg_int(ctx, path, r, "head_dim", 0, 256, &c->head_dim);
  if (!s) s = cfg_int(ctx, path, r, "max_position_embeddings", 0, 131072, &c->seq);
  if (!s) s = cfg_num(ctx, path, "", r, "rms_norm_eps", 0, 1e-6, &c->norm_eps);
  if (!s) s = cfg_num(ctx, path, "", r, "rope_theta", 0, 1e6, &c->rope_theta);
  if (!s) s = cfg_num(ctx, path, "", r, "rope_local_base_freq", 0, 1e4, &c->rope_local_theta);
  if (!s) s = cfg_num(ctx, path, "", r, "query_pre_attn_scalar", 0, 256, &c->attn_scalar);
  if (!s) s = cfg_int(ctx, path, r, "sliding_window", 0, 4096, &c->sliding_window);
  if (!s) s = cfg_num(ctx, path, "", r, "final_logit_softcapping", 0, 0, &c->logit_softcap);
  if (!s) s = cfg_bool(ctx, path, r, "tie_word_embeddings", 1, &c->tied);
  if (!s) s = hf_gemma3_layers(ctx, path, r, c);
  if (!s) s = hf_gemma3_rope(ctx, path, r, c);
  if (s) return s;
  static const char *const unset[] = {"rope_scaling", "attn_logit_softcapping"};
  static const char *const why[] = {
      "coda's gemma3 rotates both layer kinds without scaling (null is supported)",
      "coda does not cap attention scores (null is supported)"};
  for (int i = 0; i < 2; i++)
    if (!is_unset(coda_json_get(r, unset[i])))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: \"%s\" is set: %s", path, unset[i],
                       why[i]);
  int bidir = 0;
  s = cfg_bool(ctx, path, r, "use_bidirectional_attention", 0, &bidir);
  if (!s && bidir)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: use_bidirectional_attention is true: "
                     "coda's attention is causal (false is supported)", path);
  static const char *const tanh_gelu[] = {"gelu_pytorch_tanh"};
  if (!s) s = cfg_one_of(ctx, path, r, "hidden_activation", tanh_gelu, 1,
                         "the tanh GELU: gelu_pytorch_tanh");
  if (!s) s = cfg_one_of(ctx, path, r, "hidden_act", tanh_gelu, 1,
                         "the tanh GELU: gelu_pytorch_tanh");
  return s;
}

coda_status coda_hf_read_config(coda_context ctx, const char *path, coda_model_config *c) {
  coda_json_doc *d;
  coda_status s = coda_hf_read_json(ctx, path, &d);
  if (s) return s;
  const coda_json *r = coda_json_root(d);
  memset(c, 0, sizeof *c);
  s = hf_family(ctx, path, r, &c->family);
  if (!s && c->family == CODA_FAMILY_GPT2) {
    s = hf_gpt2(ctx, path, r, c);
    if (!s) s = hf_refusals(ctx, path, r, 1);
    goto checked;
  }
  if (!s && c->family == CODA_FAMILY_GEMMA3) {
    s = hf_gemma3(ctx, path, r, c);
    if (!s) s = hf_refusals(ctx, path, r, 0);
    goto checked;
  }
  if (!s) s = cfg_int(ctx, path, r, "hidden_size", 1, 0, &c->dim);
  if (!s) s = cfg_int(ctx, path, r, "intermediate_size", 1, 0, &c->ffn);
  if (!s) s = cfg_int(ctx, path, r, "num_hidden_layers", 1, 0, &c->layers);
  if (!s) s = cfg_int(ctx, path, r, "num_attention_heads", 1, 0, &c->heads);
  /* transformers: no num_key_value_heads means one per attention head */
  if (!s) s = cfg_int(ctx, path, r, "num_key_value_heads", 0, c->heads, &c->kv_heads);
  if (!s) s = cfg_int(ctx, path, r, "vocab_size", 1, 0, &c->vocab);
  if (!s) s = cfg_int(ctx, path, r, "max_position_embeddings", 0, 2048, &c->seq);
  /* transformers' LlamaConfig and Qwen3Config defaults: eps 1e-6, theta
   * 10000, untied */
  if (!s) s = cfg_num(ctx, path, "", r, "rms_norm_eps", 0, 1e-6, &c->norm_eps);
  if (!s) s = cfg_num(ctx, path, "", r, "rope_theta", 0, 10000.0, &c->rope_theta);
  if (!s) s = cfg_bool(ctx, path, r, "tie_word_embeddings", 0, &c->tied);
  if (!s) s = cfg_rope(ctx, path, r, c);
  if (!s) s = hf_head_dim(ctx, path, r, c);
  if (!s) s = hf_refusals(ctx, path, r, 1);
  if (!s) s = hf_window(ctx, path, r, c);
checked:
  coda_json_free(d);
  if (!s && coda_model_config_check(ctx, c))
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s", path, coda_last_error(ctx));
  return s;
}

coda_status coda_hf_config(coda_context ctx, const char *hf_dir, coda_model_config *cfg) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!hf_dir || !cfg) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL argument");
  char *cp = coda_hf_join(hf_dir, "config.json");
  if (!cp) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_status s = coda_hf_read_config(ctx, cp, cfg);
  free(cp);
  return s;
}
