/* Hugging Face Llama layout: config.json + model.safetensors with the
 * transformers names. Two layout differences are converted:
 *  - RoPE: HF rotates the half-split pairs (j, j + hd/2) of every Q and K
 *    head; coda rotates adjacent pairs (2j, 2j+1). Our row 2j of a head is
 *    HF row j and our row 2j+1 is HF row j + hd/2 (both rotate by +θ_j
 *    with θ_j = pos · theta^(−2j/hd), so the model computes the same
 *    function). V rows are not permuted.
 *  - MLP: HF keeps gate_proj and up_proj separate; our w13 interleaves
 *    them (row 2f = gate row f, row 2f+1 = up row f).
 * Export writes F32. Import accepts F32, BF16 and F16 tensors, one
 * model.safetensors or the shards of model.safetensors.index.json, and
 * reads config.json with the JSON parser (top-level keys): what coda does
 * not run (biases, another activation, a sliding window shorter than the
 * sequence, a RoPE type other than default, linear and llama3, ...) is
 * refused by name, never dropped. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* coda row of wqkv for HF row `hf` of the concatenated [q; k; v]. */
static int64_t our_row(int64_t hf, int64_t hd, int64_t nqk_rows) {
  if (hf >= nqk_rows) return hf;
  int64_t head = hf / hd, i = hf % hd, half = hd / 2;
  return head * hd + (i < half ? 2 * i : 2 * (i - half) + 1);
}

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

coda_status coda_hf_export(coda_context ctx, coda_model *m, const char *dir) {
  const coda_model_config *c = coda_model_cfg(m);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
  const int64_t D = c->dim, F = c->ffn, hd = c->dim / c->heads, L = c->layers;
  const int64_t nq = (int64_t)c->heads * hd, nk = (int64_t)c->kv_heads * hd;
  const float *W = coda_model_weights(m);
  int ntens = 3 + 9 * (int)L;
  coda_st_entry *e = calloc((size_t)ntens, sizeof *e);
  char (*names)[128] = calloc((size_t)ntens, sizeof *names);
  float **bufs = calloc((size_t)ntens, sizeof *bufs);
  coda_status s = CODA_OK;
  if (!e || !names || !bufs) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
  int k = 0;
#define ADD(nm, ptr, r, cc, nd) do { snprintf(names[k], 128, "%s", nm); e[k].name = names[k]; \
    e[k].dtype = "F32"; e[k].ndim = nd; e[k].shape[0] = r; e[k].shape[1] = cc; e[k].data = ptr; k++; } while (0)
  ADD("model.embed_tokens.weight", W + coda_model_find(m, "tok_embeddings.weight")->offset,
      c->vocab, D, 2);
  char nm[128], ours[128];
  for (int64_t i = 0; i < L; i++) {
    snprintf(ours, sizeof ours, "layers.%lld.attention_norm.weight", (long long)i);
    snprintf(nm, sizeof nm, "model.layers.%lld.input_layernorm.weight", (long long)i);
    ADD(nm, W + coda_model_find(m, ours)->offset, D, 1, 1);
    snprintf(ours, sizeof ours, "layers.%lld.attention.wqkv.weight", (long long)i);
    const float *qkv = W + coda_model_find(m, ours)->offset;
    const char *part[3] = {"q_proj", "k_proj", "v_proj"};
    int64_t start[3] = {0, nq, nq + nk}, rows[3] = {nq, nk, nk};
    for (int p = 0; p < 3; p++) {
      float *b = malloc((size_t)(rows[p] * D) * sizeof *b);
      if (!b) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
      bufs[k] = b;
      for (int64_t r = 0; r < rows[p]; r++)
        memcpy(b + r * D, qkv + our_row(start[p] + r, hd, nq + nk) * D, (size_t)D * sizeof *b);
      snprintf(nm, sizeof nm, "model.layers.%lld.self_attn.%s.weight", (long long)i, part[p]);
      ADD(nm, b, rows[p], D, 2);
    }
    snprintf(ours, sizeof ours, "layers.%lld.attention.wo.weight", (long long)i);
    snprintf(nm, sizeof nm, "model.layers.%lld.self_attn.o_proj.weight", (long long)i);
    ADD(nm, W + coda_model_find(m, ours)->offset, D, nq, 2);
    snprintf(ours, sizeof ours, "layers.%lld.ffn_norm.weight", (long long)i);
    snprintf(nm, sizeof nm, "model.layers.%lld.post_attention_layernorm.weight", (long long)i);
    ADD(nm, W + coda_model_find(m, ours)->offset, D, 1, 1);
    snprintf(ours, sizeof ours, "layers.%lld.feed_forward.w13.weight", (long long)i);
    const float *w13 = W + coda_model_find(m, ours)->offset;
    for (int p = 0; p < 2; p++) {
      float *b = malloc((size_t)(F * D) * sizeof *b);
      if (!b) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
      bufs[k] = b;
      for (int64_t r = 0; r < F; r++) memcpy(b + r * D, w13 + (2 * r + p) * D, (size_t)D * sizeof *b);
      snprintf(nm, sizeof nm, "model.layers.%lld.mlp.%s.weight", (long long)i, p ? "up_proj" : "gate_proj");
      ADD(nm, b, F, D, 2);
    }
    snprintf(ours, sizeof ours, "layers.%lld.feed_forward.w2.weight", (long long)i);
    snprintf(nm, sizeof nm, "model.layers.%lld.mlp.down_proj.weight", (long long)i);
    ADD(nm, W + coda_model_find(m, ours)->offset, D, F, 2);
  }
  ADD("model.norm.weight", W + coda_model_find(m, "norm.weight")->offset, D, 1, 1);
  if (!c->tied) ADD("lm_head.weight", W + coda_model_find(m, "output.weight")->offset, c->vocab, D, 2);
#undef ADD
  {
    const char *meta[] = {"format", "pt"};
    char *p = join(dir, "model.safetensors");
    if (!p) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
    s = coda_st_save(ctx, p, e, k, meta, 1);
    free(p);
    if (s) goto out;
    char rope[512] = "null";
    if (c->rope.type == CODA_ROPE_LINEAR)
      snprintf(rope, sizeof rope, "{\"rope_type\": \"linear\", \"factor\": %.17g}", c->rope.factor);
    else if (c->rope.type == CODA_ROPE_LLAMA3)
      snprintf(rope, sizeof rope,
               "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, "
               "\"high_freq_factor\": %.17g, \"original_max_position_embeddings\": %.17g}",
               c->rope.factor, c->rope.low_freq_factor, c->rope.high_freq_factor,
               c->rope.original_max_position);
    char js[2560];
    int n = snprintf(js, sizeof js,
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %lld,\n"
        "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.17g,\n"
        "  \"rope_theta\": %.17g,\n  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
        "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
        "  \"torch_dtype\": \"float32\"\n}\n",
        c->dim, c->ffn, c->layers, c->heads, c->kv_heads, (long long)hd, c->vocab, c->seq,
        c->norm_eps, c->rope_theta, rope, c->tied ? "true" : "false");
    p = join(dir, "config.json");
    if (!p) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
    const void *parts[1] = {js};
    size_t sizes[1] = {(size_t)n};
    s = coda_write_atomic(ctx, p, parts, sizes, 1);
    free(p);
  }
out:
  if (bufs) for (int i = 0; i < ntens; i++) free(bufs[i]);
  free(bufs);
  free(e);
  free(names);
  return s;
}

/* ------------------------------------------------------------ config.json */

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
static coda_status read_json_object(coda_context ctx, const char *path, coda_json_doc **out) {
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

/* The model of config.json (top-level keys only), or the reason coda cannot
 * run it. */
static coda_status hf_config(coda_context ctx, const char *path, coda_model_config *c) {
  coda_json_doc *d;
  coda_status s = read_json_object(ctx, path, &d);
  if (s) return s;
  const coda_json *r = coda_json_root(d);
  memset(c, 0, sizeof *c);
  const coda_json *mt = coda_json_get(r, "model_type");
  if (!is_unset(mt)) {
    if (mt->kind != CODA_JSON_STRING)
      s = coda_fail(ctx, CODA_ERR_IO, "%s: \"model_type\" is not a string", path);
    else if (coda_json_is_str(mt, "qwen2"))
      s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                    "%s: model_type qwen2 has q/k/v projection biases, which coda does not "
                    "implement", path);
    else if (!coda_json_is_str(mt, "llama") && !coda_json_is_str(mt, "mistral"))
      s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                    "%s: model_type \"%.64s\" is not supported (llama, mistral)", path, mt->u.str);
  }
  const coda_json *ar = coda_json_get(r, "architectures");
  if (!s && !is_unset(ar)) {
    int ok = ar->kind == CODA_JSON_ARRAY && ar->n >= 1;
    for (size_t i = 0; ok && i < ar->n; i++)
      ok = coda_json_is_str(&ar->u.items[i], "LlamaForCausalLM") ||
           coda_json_is_str(&ar->u.items[i], "MistralForCausalLM");
    if (!ok)
      s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                    "%s: \"architectures\" must list LlamaForCausalLM or MistralForCausalLM only",
                    path);
  }
  if (!s) s = cfg_int(ctx, path, r, "hidden_size", 1, 0, &c->dim);
  if (!s) s = cfg_int(ctx, path, r, "intermediate_size", 1, 0, &c->ffn);
  if (!s) s = cfg_int(ctx, path, r, "num_hidden_layers", 1, 0, &c->layers);
  if (!s) s = cfg_int(ctx, path, r, "num_attention_heads", 1, 0, &c->heads);
  /* transformers: no num_key_value_heads means one per attention head */
  if (!s) s = cfg_int(ctx, path, r, "num_key_value_heads", 0, c->heads, &c->kv_heads);
  if (!s) s = cfg_int(ctx, path, r, "vocab_size", 1, 0, &c->vocab);
  if (!s) s = cfg_int(ctx, path, r, "max_position_embeddings", 0, 2048, &c->seq);
  /* transformers' LlamaConfig defaults: eps 1e-6, theta 10000, untied */
  if (!s) s = cfg_num(ctx, path, "", r, "rms_norm_eps", 0, 1e-6, &c->norm_eps);
  if (!s) s = cfg_num(ctx, path, "", r, "rope_theta", 0, 10000.0, &c->rope_theta);
  if (!s) s = cfg_bool(ctx, path, r, "tie_word_embeddings", 0, &c->tied);
  if (!s) s = cfg_rope(ctx, path, r, c);
  /* before head_dim, whose default is hidden_size / heads: a reason that
   * names the keys the file has */
  if (!s && c->dim % c->heads)
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                  "%s: hidden_size %d is not a multiple of num_attention_heads %d", path, c->dim,
                  c->heads);
  if (!s) {
    int hd;
    s = cfg_int(ctx, path, r, "head_dim", 0, c->dim / c->heads, &hd);
    if (!s && (int64_t)hd * c->heads != c->dim)
      s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                    "%s: head_dim %d x num_attention_heads %d != hidden_size %d (coda takes "
                    "head_dim = hidden_size / heads)", path, hd, c->heads, c->dim);
  }
  int ab = 0, mb = 0;
  if (!s) s = cfg_bool(ctx, path, r, "attention_bias", 0, &ab);
  if (!s) s = cfg_bool(ctx, path, r, "mlp_bias", 0, &mb);
  if (!s && (ab || mb))
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s is true: coda's Llama has no biases", path,
                  ab ? "attention_bias" : "mlp_bias");
  const coda_json *act = coda_json_get(r, "hidden_act");
  if (!s && !is_unset(act) && !coda_json_is_str(act, "silu") && !coda_json_is_str(act, "swish"))
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                  "%s: hidden_act %s%.64s%s is not supported (silu only)", path,
                  act->kind == CODA_JSON_STRING ? "\"" : "(",
                  act->kind == CODA_JSON_STRING ? act->u.str : coda_json_kind_name(act->kind),
                  act->kind == CODA_JSON_STRING ? "\"" : ")");
  if (!s) {
    int use_sw = 1;
    double sw = 0;
    s = cfg_bool(ctx, path, r, "use_sliding_window", 1, &use_sw);
    if (!s) s = cfg_num(ctx, path, "", r, "sliding_window", 0, 0, &sw);
    if (!s && use_sw && !is_unset(coda_json_get(r, "sliding_window")) && sw < c->seq)
      s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                    "%s: sliding_window %g is shorter than the sequence (%d): coda's attention "
                    "is full causal", path, sw, c->seq);
  }
  if (!s && !is_unset(coda_json_get(r, "quantization_config")))
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                  "%s: quantized checkpoints (quantization_config) are not supported", path);
  coda_json_free(d);
  if (!s && coda_model_config_check(ctx, c))
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: %s", path, coda_last_error(ctx));
  return s;
}

coda_status coda_hf_config(coda_context ctx, const char *hf_dir, coda_model_config *cfg) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!hf_dir || !cfg) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL argument");
  char *cp = join(hf_dir, "config.json");
  if (!cp) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_status s = hf_config(ctx, cp, cfg);
  free(cp);
  return s;
}

/* ------------------------------------------------------------ the weights */

/* The safetensors files of a checkpoint: model.safetensors, or the shards
 * that model.safetensors.index.json names. */
typedef struct hf_weights {
  int n;
  coda_st_file *f;
  char **path;
  unsigned char **used; /* per file, per tensor: consumed by the import */
} hf_weights;

static void hf_weights_free(hf_weights *w) {
  for (int i = 0; i < w->n; i++) {
    coda_st_free(&w->f[i]);
    free(w->path[i]);
    free(w->used[i]);
  }
  free(w->f);
  free(w->path);
  free(w->used);
  memset(w, 0, sizeof *w);
}

static coda_status hf_add_file(coda_context ctx, hf_weights *w, char *path, uint64_t max) {
  coda_st_file *f = realloc(w->f, (size_t)(w->n + 1) * sizeof *f);
  if (f) w->f = f;
  char **p = realloc(w->path, (size_t)(w->n + 1) * sizeof *p);
  if (p) w->path = p;
  unsigned char **u = realloc(w->used, (size_t)(w->n + 1) * sizeof *u);
  if (u) w->used = u;
  if (!f || !p || !u) {
    free(path);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  memset(&w->f[w->n], 0, sizeof w->f[w->n]);
  coda_status s = coda_st_load_ex(ctx, path, 0, max, 0, &w->f[w->n]);
  if (s) { free(path); return s; }
  w->used[w->n] = calloc((size_t)w->f[w->n].n + 1, 1);
  w->path[w->n] = path;
  w->n++;
  if (!w->used[w->n - 1]) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  return CODA_OK;
}

/* A shard name of the index: a plain file name inside the directory. */
static int plain_name(const char *s, size_t n) {
  if (n == 0 || n > 255 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '/' || s[i] == '\\' || s[i] == '\0') return 0;
  return 1;
}

static coda_status hf_open_weights(coda_context ctx, const char *dir, uint64_t max,
                                   hf_weights *w) {
  memset(w, 0, sizeof *w);
  char *single = join(dir, "model.safetensors"), *ix = join(dir, "model.safetensors.index.json");
  if (!single || !ix) {
    free(single);
    free(ix);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  struct stat sb;
  const int have_single = stat(single, &sb) == 0, have_index = stat(ix, &sb) == 0;
  if (have_single || !have_index) {
    free(ix);
    return hf_add_file(ctx, w, single, max); /* its error names the missing file */
  }
  free(single);
  coda_json_doc *d;
  coda_status s = read_json_object(ctx, ix, &d);
  if (s) { free(ix); return s; }
  const coda_json *wm = coda_json_get(coda_json_root(d), "weight_map");
  if (!wm || wm->kind != CODA_JSON_OBJECT || wm->n == 0)
    s = coda_fail(ctx, CODA_ERR_IO, "%s: \"weight_map\" is missing or not a non-empty object", ix);
  /* every distinct shard once, in the order the map first names it */
  for (size_t i = 0; !s && i < wm->n; i++) {
    const coda_json *v = &wm->u.members[i].value;
    if (v->kind != CODA_JSON_STRING || !plain_name(v->u.str, v->n)) {
      s = coda_fail(ctx, CODA_ERR_IO, "%s: weight_map[\"%.96s\"] is not a file name in the "
                    "directory", ix, wm->u.members[i].key);
      break;
    }
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++) seen = coda_json_is_str(&wm->u.members[j].value, v->u.str);
    if (seen) continue;
    char *sp = join(dir, v->u.str);
    if (!sp) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    else s = hf_add_file(ctx, w, sp, max);
  }
  /* the map and the shards agree: each tensor in the shard it names, none twice */
  for (size_t i = 0; !s && i < wm->n; i++) {
    const char *name = wm->u.members[i].key;
    int k = 0;
    while (k < w->n && !coda_json_is_str(&wm->u.members[i].value,
                                         strrchr(w->path[k], '/') + 1)) k++;
    if (k == w->n || !coda_st_find(&w->f[k], name))
      s = coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%.96s' is not in %s, where weight_map puts it",
                    ix, name, k < w->n ? w->path[k] : "its shard");
  }
  int total = 0;
  for (int k = 0; k < w->n; k++) total += w->f[k].n;
  if (!s && (size_t)total != wm->n)
    s = coda_fail(ctx, CODA_ERR_IO, "%s: the shards hold %d tensors, weight_map names %zu", ix,
                  total, wm->n);
  coda_json_free(d);
  free(ix);
  if (s) hf_weights_free(w);
  return s;
}

/* Tensor `name` and the file it is in; marks it used. */
static const coda_st_tensor *hf_find(hf_weights *w, const char *name, const char **path) {
  for (int k = 0; k < w->n; k++) {
    const coda_st_tensor *t = coda_st_find(&w->f[k], name);
    if (t) {
      w->used[k][t - w->f[k].t] = 1;
      *path = w->path[k];
      return t;
    }
  }
  *path = w->n ? w->path[0] : "";
  return NULL;
}

/* Element i of an F32 / BF16 / F16 tensor (dt 0 / 1 / 2) as a float. */
static float hf_value(const coda_st_tensor *t, int dt, size_t i) {
  float v;
  if (dt == 0) {
    memcpy(&v, t->data + 4 * i, 4);
    return v;
  }
  uint16_t h = (uint16_t)(t->data[2 * i] | t->data[2 * i + 1] << 8);
  return dt == 1 ? coda_bf16_to_f32(h) : coda_f16_to_f32(h);
}

static int hf_dtype(const coda_st_tensor *t) {
  return !strcmp(t->dtype, "F32") ? 0 : !strcmp(t->dtype, "BF16") ? 1 : !strcmp(t->dtype, "F16") ? 2 : -1;
}

/* Copies an HF tensor (F32/BF16/F16) of exactly rows x cols into dst rows
 * given by map(r) (or r when map is NULL), `stride` floats apart; with dst
 * NULL only checks that the tensor is there with that shape and dtype. */
static coda_status get(coda_context ctx, hf_weights *w, const char *name,
                       int64_t rows, int64_t cols, int ndim, float *dst, int64_t row_mul,
                       int64_t row_add, int64_t hd, int64_t nqk, int64_t qkv_base) {
  const char *path;
  const coda_st_tensor *t = hf_find(w, name, &path);
  if (!t) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' is missing", path, name);
  int ok = t->ndim == ndim && t->shape[0] == rows && (ndim == 1 || t->shape[1] == cols);
  if (!ok) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has the wrong shape", path, name);
  const int dt = hf_dtype(t);
  if (dt < 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has dtype %s (F32, BF16, F16 only)", path,
                     name, t->dtype);
  if (!dst) return CODA_OK;
  for (int64_t r = 0; r < rows; r++) {
    int64_t dr = qkv_base >= 0 ? our_row(qkv_base + r, hd, nqk) : r * row_mul + row_add;
    for (int64_t c = 0; c < cols; c++) {
      dst[dr * cols + c] = hf_value(t, dt, (size_t)(r * cols + c));
    }
  }
  return CODA_OK;
}

/* A config that ties the head (tie_word_embeddings true) while the files
 * hold an lm_head.weight of their own: a copy of the embedding (the same
 * values) is the tied head and is not read; a different one is imported
 * as an untied head, with a warning on the context, as transformers keeps
 * both tensors when both are in the checkpoint (tying them would silently
 * drop the trained head). */
static void hf_resolve_tie(coda_context ctx, hf_weights *w, coda_model_config *c) {
  if (!c->tied) return;
  const char *hp = "";
  const coda_st_tensor *h = NULL, *e = NULL;
  for (int k = 0; k < w->n && !h; k++) {
    h = coda_st_find(&w->f[k], "lm_head.weight");
    if (h) hp = w->path[k];
  }
  if (!h) return;
  for (int k = 0; k < w->n && !e; k++) e = coda_st_find(&w->f[k], "model.embed_tokens.weight");
  const int hd = hf_dtype(h), ed = e ? hf_dtype(e) : -1;
  int same = e && hd >= 0 && ed >= 0 && h->ndim == 2 && e->ndim == 2 &&
             h->shape[0] == e->shape[0] && h->shape[1] == e->shape[1];
  const size_t n = same ? (size_t)(h->shape[0] * h->shape[1]) : 0;
  for (size_t i = 0; same && i < n; i++) {
    const float a = hf_value(h, hd, i), b = hf_value(e, ed, i);
    same = a == b || (a != a && b != b);
  }
  if (same) return;
  c->tied = 0;
  coda_warn(ctx, "%s: config.json says tie_word_embeddings true, but tensor 'lm_head.weight' "
            "differs from 'model.embed_tokens.weight': imported untied, with lm_head.weight as "
            "the output head (as transformers does; set tie_word_embeddings false to say so)", hp);
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

/* Before any weight is copied: bias tensors are refused by name, and an
 * untied config needs its lm_head. */
static coda_status hf_check_tensors(coda_context ctx, hf_weights *w, const coda_model_config *c) {
  for (int k = 0; k < w->n; k++)
    for (int i = 0; i < w->f[k].n; i++)
      if (ends_with(w->f[k].t[i].name, ".bias"))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                         "%s: bias tensor '%s': coda's Llama has no biases", w->path[k],
                         w->f[k].t[i].name);
  const char *path;
  if (!c->tied && !hf_find(w, "lm_head.weight", &path))
    return coda_fail(ctx, CODA_ERR_IO,
                     "%s: tie_word_embeddings is false but tensor 'lm_head.weight' is missing",
                     path);
  return CODA_OK;
}

/* After the copy: a tensor the model did not take is an error (the rotary
 * inverse-frequency buffers of older checkpoints are computed, not read;
 * a tied model's copy of the embedding as lm_head is not read). */
static coda_status hf_check_unused(coda_context ctx, hf_weights *w) {
  for (int k = 0; k < w->n; k++)
    for (int i = 0; i < w->f[k].n; i++) {
      const char *nm = w->f[k].t[i].name;
      if (!w->used[k][i] && !ends_with(nm, "rotary_emb.inv_freq") && strcmp(nm, "lm_head.weight"))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                         "%s: tensor '%s' is not part of the model the config describes",
                         w->path[k], nm);
    }
  return CODA_OK;
}

/* Every tensor of the model config c describes, copied into m's weights;
 * with m NULL only checked (name, shape, dtype), so that a config is
 * backed by the files before its model is allocated. */
static coda_status hf_walk(coda_context ctx, hf_weights *wf, const coda_model_config *c,
                           coda_model *m) {
  float *W = m ? coda_model_weights(m) : NULL;
  const int64_t D = c->dim, F = c->ffn, hd = c->dim / c->heads;
  const int64_t nq = (int64_t)c->heads * hd, nk = (int64_t)c->kv_heads * hd;
  char nm[128], ours[128];
#define DST(n) (W ? W + coda_model_find(m, n)->offset : NULL)
  coda_status s = get(ctx, wf, "model.embed_tokens.weight", c->vocab, D, 2,
                      DST("tok_embeddings.weight"), 1, 0, 0, 0, -1);
  for (int i = 0; i < c->layers && !s; i++) {
    snprintf(ours, sizeof ours, "layers.%d.attention_norm.weight", i);
    snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", i);
    s = get(ctx, wf, nm, D, 1, 1, DST(ours), 1, 0, 0, 0, -1);
    snprintf(ours, sizeof ours, "layers.%d.attention.wqkv.weight", i);
    const char *part[3] = {"q_proj", "k_proj", "v_proj"};
    int64_t start[3] = {0, nq, nq + nk}, rows[3] = {nq, nk, nk};
    for (int p = 0; p < 3 && !s; p++) {
      snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s.weight", i, part[p]);
      s = get(ctx, wf, nm, rows[p], D, 2, DST(ours), 1, 0, hd, nq + nk, start[p]);
    }
    snprintf(ours, sizeof ours, "layers.%d.attention.wo.weight", i);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", i);
    if (!s) s = get(ctx, wf, nm, D, nq, 2, DST(ours), 1, 0, 0, 0, -1);
    snprintf(ours, sizeof ours, "layers.%d.ffn_norm.weight", i);
    snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", i);
    if (!s) s = get(ctx, wf, nm, D, 1, 1, DST(ours), 1, 0, 0, 0, -1);
    snprintf(ours, sizeof ours, "layers.%d.feed_forward.w13.weight", i);
    for (int p = 0; p < 2 && !s; p++) {
      snprintf(nm, sizeof nm, "model.layers.%d.mlp.%s.weight", i, p ? "up_proj" : "gate_proj");
      s = get(ctx, wf, nm, F, D, 2, DST(ours), 2, p, 0, 0, -1);
    }
    snprintf(ours, sizeof ours, "layers.%d.feed_forward.w2.weight", i);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", i);
    if (!s) s = get(ctx, wf, nm, D, F, 2, DST(ours), 1, 0, 0, 0, -1);
  }
  if (!s) s = get(ctx, wf, "model.norm.weight", D, 1, 1, DST("norm.weight"), 1, 0, 0, 0, -1);
  if (!s && !c->tied)
    s = get(ctx, wf, "lm_head.weight", c->vocab, D, 2, DST("output.weight"), 1, 0, 0, 0, -1);
#undef DST
  return s;
}

coda_status coda_hf_import(coda_context ctx, const char *dir, coda_engine engine, coda_model **out) {
  *out = NULL;
  char *cp = join(dir, "config.json");
  hf_weights wf;
  memset(&wf, 0, sizeof wf);
  coda_model *m = NULL;
  coda_model_config c;
  memset(&c, 0, sizeof c);
  coda_status s = !cp ? coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory") : CODA_OK;
  if (!s) s = hf_config(ctx, cp, &c);
  if (!s) {
    /* at most the header and every weight in F32 (lm_head included):
     * a larger file is refused before it is read */
    coda_model_config u = c;
    u.tied = 0;
    const uint64_t max = 8 + (uint64_t)CODA_ST_MAX_HEADER + 4 * (uint64_t)coda_model_config_params(&u);
    s = hf_open_weights(ctx, dir, max, &wf);
  }
  if (!s) hf_resolve_tie(ctx, &wf, &c);
  if (!s) s = hf_check_tensors(ctx, &wf, &c);
  /* the model is allocated only once the files hold all of it: a small
   * folder whose config.json claims a large model is refused by the
   * tensor it lacks, not by the allocation */
  if (!s) s = hf_walk(ctx, &wf, &c, NULL);
  if (!s) s = coda_model_create(ctx, &c, engine, &m);
  if (!s) s = hf_walk(ctx, &wf, &c, m);
  if (!s) s = hf_check_unused(ctx, &wf);
  hf_weights_free(&wf);
  free(cp);
  if (s) {
    coda_model_destroy(m);
    return s;
  }
  *out = m;
  return CODA_OK;
}

coda_status coda_hf_export_checkpoint(coda_context ctx, const char *checkpoint,
                                      const char *hf_dir) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!checkpoint || !hf_dir) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL path");
  coda_model_config c;
  coda_status s = coda_checkpoint_config(ctx, checkpoint, &c);
  if (s) return s;
  coda_model *m;
  s = coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m);
  if (s) return s;
  s = coda_checkpoint_load(ctx, checkpoint, m, NULL, NULL, NULL);
  if (!s) s = coda_hf_export(ctx, m, hf_dir);
  /* the checkpoint's tokenizer goes into the folder as tokenizer.json */
  char *tp = NULL;
  if (!s) s = coda_checkpoint_tokenizer(ctx, checkpoint, &tp, NULL);
  if (!s && tp) {
    char *beside_weights = join(hf_dir, "model.safetensors");
    coda_train_state unused;
    memset(&unused, 0, sizeof unused);
    s = beside_weights ? coda_checkpoint_carry_tokenizer(ctx, tp, beside_weights, c.vocab, &unused)
                       : coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    free(beside_weights);
  }
  free(tp);
  coda_model_destroy(m);
  return s;
}

coda_status coda_hf_import_checkpoint(coda_context ctx, const char *hf_dir,
                                      const char *checkpoint) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!checkpoint || !hf_dir) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL path");
  coda_model *m;
  coda_status s = coda_hf_import(ctx, hf_dir, CODA_ENGINE_REFERENCE, &m);
  if (s) return s;
  coda_train_state st = {0, 0, 0, NAN, "", 0, 0};
  /* the folder's tokenizer goes with the checkpoint */
  char *tp = join(hf_dir, "tokenizer.json");
  struct stat sb;
  if (!tp) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  else if (stat(tp, &sb) == 0)
    s = coda_checkpoint_carry_tokenizer(ctx, tp, checkpoint, coda_model_cfg(m)->vocab, &st);
  free(tp);
  if (!s) s = coda_checkpoint_save(ctx, checkpoint, m, NULL, NULL, &st);
  coda_model_destroy(m);
  return s;
}
