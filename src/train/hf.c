/* Hugging Face Llama layout: config.json + model.safetensors with the
 * transformers names. Two layout differences are converted:
 *  - RoPE: HF rotates the half-split pairs (j, j + hd/2) of every Q and K
 *    head; coda rotates adjacent pairs (2j, 2j+1). Our row 2j of a head is
 *    HF row j and our row 2j+1 is HF row j + hd/2 (both rotate by +θ_j
 *    with θ_j = pos · theta^(−2j/hd), so the model computes the same
 *    function). V rows are not permuted.
 *  - MLP: HF keeps gate_proj and up_proj separate; our w13 interleaves
 *    them (row 2f = gate row f, row 2f+1 = up row f).
 * Export writes F32. Import accepts F32, BF16 and F16 tensors. RoPE
 * scaling (Llama 3.1 "rope_scaling") is not supported and is refused. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "train/train.h"

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
    char js[2048];
    int n = snprintf(js, sizeof js,
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %lld,\n"
        "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.17g,\n"
        "  \"rope_theta\": %.17g,\n  \"rope_scaling\": null,\n  \"tie_word_embeddings\": %s,\n"
        "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
        "  \"torch_dtype\": \"float32\"\n}\n",
        c->dim, c->ffn, c->layers, c->heads, c->kv_heads, (long long)hd, c->vocab, c->seq,
        c->norm_eps, c->rope_theta, c->tied ? "true" : "false");
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

/* Value text of a top-level "key": in config.json (a minimal scan: the
 * first occurrence of the quoted key followed by ':'). */
static const char *json_value(const char *js, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = strchr(js, '"'); p; p = strchr(p + 1, '"')) {
    if (!strncmp(p + 1, key, kl) && p[1 + kl] == '"') {
      const char *q = p + 2 + kl;
      while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
      if (*q != ':') continue;
      q++;
      while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
      return q;
    }
  }
  return NULL;
}

static coda_status json_num(coda_context ctx, const char *js, const char *path, const char *key,
                            int required, double dflt, double *out) {
  const char *v = json_value(js, key);
  if (!v) {
    if (required) return coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" is missing", path, key);
    *out = dflt;
    return CODA_OK;
  }
  char *end;
  double x = strtod(v, &end);
  if (end == v || !isfinite(x))
    return coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" is not a number", path, key);
  *out = x;
  return CODA_OK;
}

static coda_status read_text(coda_context ctx, const char *path, char **out) {
  unsigned char *b;
  size_t n;
  /* a regular file of at most 1 MiB (a FIFO or device is refused) */
  coda_status s = coda_read_file_max(ctx, path, (1 << 20) - 1, &b, &n);
  if (s) return s;
  unsigned char *nb = realloc(b, n + 1);
  if (!nb) { free(b); return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); }
  b = nb;
  b[n] = '\0';
  if (strlen((char *)b) != n) { free(b); return coda_fail(ctx, CODA_ERR_IO, "%s: NUL byte in JSON", path); }
  *out = (char *)b;
  return CODA_OK;
}

/* Copies an HF tensor (F32/BF16/F16) of exactly rows x cols into dst rows
 * given by map(r) (or r when map is NULL), `stride` floats apart. */
static coda_status get(coda_context ctx, const coda_st_file *f, const char *path, const char *name,
                       int64_t rows, int64_t cols, int ndim, float *dst, int64_t row_mul,
                       int64_t row_add, int64_t hd, int64_t nqk, int64_t qkv_base) {
  const coda_st_tensor *t = coda_st_find(f, name);
  if (!t) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' is missing", path, name);
  int ok = t->ndim == ndim && t->shape[0] == rows && (ndim == 1 || t->shape[1] == cols);
  if (!ok) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has the wrong shape", path, name);
  int dt = !strcmp(t->dtype, "F32") ? 0 : !strcmp(t->dtype, "BF16") ? 1 : !strcmp(t->dtype, "F16") ? 2 : -1;
  if (dt < 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has dtype %s (F32, BF16, F16 only)", path,
                     name, t->dtype);
  for (int64_t r = 0; r < rows; r++) {
    int64_t dr = qkv_base >= 0 ? our_row(qkv_base + r, hd, nqk) : r * row_mul + row_add;
    for (int64_t c = 0; c < cols; c++) {
      size_t i = (size_t)(r * cols + c);
      float v;
      if (dt == 0) memcpy(&v, t->data + 4 * i, 4);
      else {
        uint16_t h = (uint16_t)(t->data[2 * i] | t->data[2 * i + 1] << 8);
        v = dt == 1 ? coda_bf16_to_f32(h) : coda_f16_to_f32(h);
      }
      dst[dr * cols + c] = v;
    }
  }
  return CODA_OK;
}

coda_status coda_hf_import(coda_context ctx, const char *dir, coda_engine engine, coda_model **out) {
  *out = NULL;
  char *cp = join(dir, "config.json"), *mp = join(dir, "model.safetensors"), *js = NULL;
  coda_st_file f;
  memset(&f, 0, sizeof f);
  coda_model *m = NULL;
  coda_status s = (!cp || !mp) ? coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory") : CODA_OK;
  if (!s) s = read_text(ctx, cp, &js);
  coda_model_config c;
  memset(&c, 0, sizeof c);
  if (!s) {
    double v[10];
    const char *keys[10] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "vocab_size",
                            "max_position_embeddings", "rms_norm_eps", "rope_theta", "head_dim"};
    for (int i = 0; i < 10 && !s; i++)
      s = json_num(ctx, js, cp, keys[i], i < 6, i == 6 ? 2048 : i == 7 ? 1e-5 : i == 8 ? 10000 : 0,
                   &v[i]);
    if (!s) {
      for (int i = 0; i < 7; i++)
        if (v[i] < 1 || v[i] > (1 << 30) || v[i] != floor(v[i]))
          s = coda_fail(ctx, CODA_ERR_IO, "%s: \"%s\" is not a positive integer", cp, keys[i]);
    }
    if (!s) {
      c.dim = (int)v[0]; c.ffn = (int)v[1]; c.layers = (int)v[2]; c.heads = (int)v[3];
      c.kv_heads = (int)v[4]; c.vocab = (int)v[5]; c.seq = (int)v[6]; c.norm_eps = v[7];
      c.rope_theta = v[8];
      if (v[9] != 0 && v[9] * c.heads != c.dim)
        s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: head_dim %g · heads != hidden_size", cp, v[9]);
      const char *rs = json_value(js, "rope_scaling");
      if (!s && rs && strncmp(rs, "null", 4))
        s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: rope_scaling is not supported", cp);
      const char *tie = json_value(js, "tie_word_embeddings");
      c.tied = tie && !strncmp(tie, "true", 4);
    }
  }
  if (!s) s = coda_model_config_check(ctx, &c);
  if (!s) {
    /* at most the header and every weight in F32 (lm_head included):
     * a larger file is refused before it is read */
    coda_model_config u = c;
    u.tied = 0;
    const uint64_t max = 8 + (uint64_t)CODA_ST_MAX_HEADER + 4 * (uint64_t)coda_model_config_params(&u);
    s = coda_st_load_ex(ctx, mp, 0, max, 0, &f);
  }
  if (!s) {
    if (!c.tied && !coda_st_find(&f, "lm_head.weight")) c.tied = 1;
    s = coda_model_create(ctx, &c, engine, &m);
  }
  if (!s) {
    float *W = coda_model_weights(m);
    const int64_t D = c.dim, F = c.ffn, hd = c.dim / c.heads;
    const int64_t nq = (int64_t)c.heads * hd, nk = (int64_t)c.kv_heads * hd;
    char nm[128], ours[128];
#define OFF(n) (coda_model_find(m, n)->offset)
    s = get(ctx, &f, mp, "model.embed_tokens.weight", c.vocab, D, 2, W + OFF("tok_embeddings.weight"), 1, 0, 0, 0, -1);
    for (int i = 0; i < c.layers && !s; i++) {
      snprintf(ours, sizeof ours, "layers.%d.attention_norm.weight", i);
      snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", i);
      s = get(ctx, &f, mp, nm, D, 1, 1, W + OFF(ours), 1, 0, 0, 0, -1);
      snprintf(ours, sizeof ours, "layers.%d.attention.wqkv.weight", i);
      const char *part[3] = {"q_proj", "k_proj", "v_proj"};
      int64_t start[3] = {0, nq, nq + nk}, rows[3] = {nq, nk, nk};
      for (int p = 0; p < 3 && !s; p++) {
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s.weight", i, part[p]);
        s = get(ctx, &f, mp, nm, rows[p], D, 2, W + OFF(ours), 1, 0, hd, nq + nk, start[p]);
      }
      snprintf(ours, sizeof ours, "layers.%d.attention.wo.weight", i);
      snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", i);
      if (!s) s = get(ctx, &f, mp, nm, D, nq, 2, W + OFF(ours), 1, 0, 0, 0, -1);
      snprintf(ours, sizeof ours, "layers.%d.ffn_norm.weight", i);
      snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", i);
      if (!s) s = get(ctx, &f, mp, nm, D, 1, 1, W + OFF(ours), 1, 0, 0, 0, -1);
      snprintf(ours, sizeof ours, "layers.%d.feed_forward.w13.weight", i);
      for (int p = 0; p < 2 && !s; p++) {
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.%s.weight", i, p ? "up_proj" : "gate_proj");
        s = get(ctx, &f, mp, nm, F, D, 2, W + OFF(ours), 2, p, 0, 0, -1);
      }
      snprintf(ours, sizeof ours, "layers.%d.feed_forward.w2.weight", i);
      snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", i);
      if (!s) s = get(ctx, &f, mp, nm, D, F, 2, W + OFF(ours), 1, 0, 0, 0, -1);
    }
    if (!s) s = get(ctx, &f, mp, "model.norm.weight", D, 1, 1, W + OFF("norm.weight"), 1, 0, 0, 0, -1);
    if (!s && !c.tied)
      s = get(ctx, &f, mp, "lm_head.weight", c.vocab, D, 2, W + OFF("output.weight"), 1, 0, 0, 0, -1);
#undef OFF
  }
  coda_st_free(&f);
  free(js);
  free(cp);
  free(mp);
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
  coda_train_state st = {0, 0, 0, NAN};
  s = coda_checkpoint_save(ctx, checkpoint, m, NULL, NULL, &st);
  coda_model_destroy(m);
  return s;
}
