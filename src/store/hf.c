/* The Hugging Face layout of the families of the family table (family.c):
 * model.safetensors with the transformers names (config.json: hf_config.c
 * reads it, coda_hf_export writes it). Two layout differences are
 * converted:
 *  - RoPE: HF rotates the half-split pairs (j, j + hd/2) of every Q and K
 *    head; coda rotates adjacent pairs (2j, 2j+1). Our row 2j of a head is
 *    HF row j and our row 2j+1 is HF row j + hd/2 (both rotate by +θ_j
 *    with θ_j = pos · theta^(−2j/hd), so the model computes the same
 *    function). V rows are not permuted; Qwen3's q/k norm weights (one
 *    head wide) are permuted like the rows of a head.
 *  - MLP: HF keeps gate_proj and up_proj separate; our w13 interleaves
 *    them (row 2f = gate row f, row 2f+1 = up row f).
 *  - GPT-2's linears are Conv1D modules whose weights are [in, out]; ours
 *    are [out, in] (transposed both ways). Its c_attn columns are
 *    [q | k | v], heads in order, as our wqkv rows; no RoPE, no permutation.
 * Export writes F32. Import accepts F32, BF16 and F16 tensors, one
 * model.safetensors or the shards of model.safetensors.index.json; a
 * tensor the model does not take, a bias among them, is refused by name,
 * never dropped. */
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

/* The HF tensors a parameter of conversion kind conv is stored as. */
static int hf_parts(coda_hf_conv conv) {
  return conv == CODA_HF_QKV ? 3 : conv == CODA_HF_GATE_UP ? 2 : 1;
}

/* GPT2Config's keys: no dropout (coda trains without it), the tanh GELU,
 * attention scaled by 1/sqrt(head_dim), the head tied. bos_token_id and
 * eos_token_id are written out: GPT2Config's default for both, 50256
 * (GPT-2's <|endoftext|>), where the vocabulary has that id, else null
 * (left out, transformers would take 50256 outside the vocabulary and
 * warn on loading). */
static int hf_gpt2_text(const coda_model_config *c, char *js, size_t n) {
  const char *eot = c->vocab > 50256 ? "50256" : "null";
  return snprintf(js, n,
      "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
      "  \"n_embd\": %d,\n  \"n_inner\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n"
      "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"layer_norm_epsilon\": %.17g,\n"
      "  \"activation_function\": \"gelu_new\",\n  \"scale_attn_weights\": true,\n"
      "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
      "  \"attn_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"resid_pdrop\": 0.0,\n"
      "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n"
      "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
      c->dim, c->ffn, c->layers, c->heads, c->vocab, c->seq, c->norm_eps, eot, eot);
}

/* v as a JSON number that reads back as a float: %.17g, with ".0" added
 * where that prints an integer (5 -> 5.0). transformers 5 checks its
 * configs' field types strictly and refuses an int for a float field
 * (Gemma 3's final_logit_softcapping). */
static void json_float(char *buf, size_t n, double v) {
  int k = snprintf(buf, n, "%.17g", v);
  if (k > 0 && (size_t)k + 3 <= n && !strpbrk(buf, ".eEn")) memcpy(buf + k, ".0", 3);
}

/* Gemma3TextConfig's keys: the layer pattern as layer_types (transformers
 * 4.53 and later) and as sliding_window_pattern (earlier ones), the two
 * RoPE bases, the score scalar, the soft cap (null when 0, else a float),
 * no attention soft cap, no RoPE scaling. */
static int hf_gemma3_text(const coda_model_config *c, char *js, size_t n) {
  char cap[64] = "null";
  if (c->logit_softcap > 0.0) json_float(cap, sizeof cap, c->logit_softcap);
  const int win = c->sliding_window > 0 ? c->sliding_window : c->seq;
  const int pat = c->sliding_window > 0 ? c->sliding_pattern : 1;
  int k = snprintf(js, n,
      "{\n  \"architectures\": [\"Gemma3ForCausalLM\"],\n  \"model_type\": \"gemma3_text\",\n"
      "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
      "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
      "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.17g,\n"
      "  \"rope_theta\": %.17g,\n  \"rope_local_base_freq\": %.17g,\n  \"rope_scaling\": null,\n"
      "  \"query_pre_attn_scalar\": %.17g,\n  \"sliding_window\": %d,\n"
      "  \"sliding_window_pattern\": %d,\n  \"final_logit_softcapping\": %s,\n"
      "  \"attn_logit_softcapping\": null,\n  \"tie_word_embeddings\": %s,\n"
      "  \"hidden_activation\": \"gelu_pytorch_tanh\",\n  \"attention_bias\": false,\n"
      "  \"attention_dropout\": 0.0,\n  \"torch_dtype\": \"float32\",\n  \"layer_types\": [",
      c->dim, c->ffn, c->layers, c->heads, c->kv_heads, coda_model_head_dim(c), c->vocab, c->seq,
      c->norm_eps, c->rope_theta, c->rope_local_theta > 0.0 ? c->rope_local_theta : c->rope_theta,
      c->attn_scalar > 0.0 ? c->attn_scalar : (double)coda_model_head_dim(c), win, pat, cap,
      c->tied ? "true" : "false");
  for (int li = 0; li < c->layers && k >= 0 && (size_t)k < n; li++)
    k += snprintf(js + k, n - (size_t)k, "%s\"%s\"", li ? ", " : "",
                  coda_model_layer_is_local(c, li) ? "sliding_attention" : "full_attention");
  if (k >= 0 && (size_t)k < n) k += snprintf(js + k, n - (size_t)k, "]\n}\n");
  return k;
}

/* The family's config.json for c into js (size n); its length. */
static int hf_config_text(const coda_model_config *c, char *js, size_t n) {
  const coda_family *fam = coda_family_of(c->family);
  if (fam->block == CODA_BLOCK_GPT2) return hf_gpt2_text(c, js, n);
  if (fam->block == CODA_BLOCK_GEMMA3) return hf_gemma3_text(c, js, n);
  char rope[512] = "null";
  if (c->rope.type == CODA_ROPE_LINEAR)
    snprintf(rope, sizeof rope, "{\"rope_type\": \"linear\", \"factor\": %.17g}", c->rope.factor);
  else if (c->rope.type == CODA_ROPE_LLAMA3)
    snprintf(rope, sizeof rope,
             "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, "
             "\"high_freq_factor\": %.17g, \"original_max_position_embeddings\": %.17g}",
             c->rope.factor, c->rope.low_freq_factor, c->rope.high_freq_factor,
             c->rope.original_max_position);
  /* Llama writes mlp_bias; Qwen3 has no such key but says its attention is
   * never windowed; a llama-family model with a window is Mistral's
   * (MistralForCausalLM windows every layer; LlamaForCausalLM has no
   * window), whose config has neither bias key */
  const int mistral = c->family == CODA_FAMILY_LLAMA && c->sliding_window > 0;
  char tail[256];
  if (c->family == CODA_FAMILY_QWEN3)
    snprintf(tail, sizeof tail, "  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n"
             "  \"sliding_window\": null,\n  \"max_window_layers\": %d,\n", c->layers);
  else if (mistral)
    snprintf(tail, sizeof tail, "  \"sliding_window\": %d,\n", c->sliding_window);
  else
    snprintf(tail, sizeof tail, "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n");
  return snprintf(js, n,
      "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
      "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
      "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
      "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.17g,\n"
      "  \"rope_theta\": %.17g,\n  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
      "  \"hidden_act\": \"silu\",\n%s"
      "  \"torch_dtype\": \"float32\"\n}\n",
      fam->hf_arch[mistral], fam->hf_type[mistral], c->dim, c->ffn, c->layers, c->heads,
      c->kv_heads, coda_model_head_dim(c), c->vocab, c->seq, c->norm_eps, c->rope_theta, rope,
      c->tied ? "true" : "false", tail);
}

coda_status coda_hf_export(coda_context ctx, coda_model *m, const char *dir) {
  const coda_model_config *c = coda_model_cfg(m);
  const coda_family *fam = coda_family_of(c->family);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
  const int64_t D = c->dim, hd = coda_model_head_dim(c);
  const int64_t nq = (int64_t)c->heads * hd, nk = (int64_t)c->kv_heads * hd;
  const float *W = coda_model_weights(m);
  const int ntens = 3 * coda_model_num_params(m);
  coda_st_entry *e = calloc((size_t)ntens, sizeof *e);
  char (*names)[128] = calloc((size_t)ntens, sizeof *names);
  float **bufs = calloc((size_t)ntens, sizeof *bufs);
  coda_status s = CODA_OK;
  if (!e || !names || !bufs) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
  int k = 0;
#define ADD(ptr, r, cc, nd) do { e[k].name = names[k]; e[k].dtype = "F32"; e[k].ndim = nd; \
    e[k].shape[0] = r; e[k].shape[1] = cc; e[k].data = ptr; k++; } while (0)
  /* the family's order: before the layers, each layer, after */
  char ours[128];
  for (int w = CODA_P_BEFORE; w <= CODA_P_AFTER; w++)
    for (int li = 0; li < (w == CODA_P_LAYER ? c->layers : 1); li++)
      for (int pi = 0; pi < fam->nparams; pi++) {
        const coda_family_param *fp = &fam->params[pi];
        if ((int)fp->where != w || (fp->untied_only && c->tied)) continue;
        snprintf(ours, sizeof ours, fp->name, li);
        const coda_param *p = coda_model_find(m, ours);
        const float *src = W + p->offset;
        const int np = hf_parts(fp->hf_conv);
        for (int part = 0; part < np; part++) snprintf(names[k + part], 128, fp->hf[part], li);
        if (fp->hf_conv == CODA_HF_COPY) {
          ADD(src, p->shape[0], p->shape[1], p->ndim);
          continue;
        }
        if (fp->hf_conv == CODA_HF_TRANSPOSE) { /* Conv1D's [in, out] */
          const int64_t R = p->shape[0], C = p->shape[1];
          float *b = malloc((size_t)(R * C) * sizeof *b);
          if (!b) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
          bufs[k] = b;
          for (int64_t r = 0; r < R; r++)
            for (int64_t cc = 0; cc < C; cc++) b[cc * R + r] = src[r * C + cc];
          ADD(b, C, R, 2);
          continue;
        }
        /* QKV: q, k, v rows; GATE_UP: gate, up; HEAD_PERM: one head */
        const int64_t start[3] = {0, nq, nq + nk};
        const int64_t rows[3] = {fp->hf_conv == CODA_HF_QKV ? nq : fp->hf_conv == CODA_HF_GATE_UP
                                 ? c->ffn : hd, fp->hf_conv == CODA_HF_QKV ? nk : c->ffn, nk};
        const int64_t cols = fp->hf_conv == CODA_HF_HEAD_PERM ? 1 : D;
        for (int part = 0; part < np; part++) {
          float *b = malloc((size_t)(rows[part] * cols) * sizeof *b);
          if (!b) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
          bufs[k] = b;
          for (int64_t r = 0; r < rows[part]; r++) {
            const int64_t from = fp->hf_conv == CODA_HF_QKV ? our_row(start[part] + r, hd, nq + nk)
                                 : fp->hf_conv == CODA_HF_GATE_UP ? 2 * r + part
                                 : our_row(r, hd, hd);
            memcpy(b + r * cols, src + from * cols, (size_t)cols * sizeof *b);
          }
          ADD(b, rows[part], cols, fp->hf_conv == CODA_HF_HEAD_PERM ? 1 : 2);
        }
      }
#undef ADD
  {
    const char *meta[] = {"format", "pt"};
    char *p = coda_hf_join(dir, "model.safetensors");
    if (!p) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto out; }
    s = coda_st_save(ctx, p, e, k, meta, 1);
    free(p);
    if (s) goto out;
    char js[32768]; /* Gemma 3's layer_types: some 21 bytes a layer, 1024 layers at most */
    const int n = hf_config_text(c, js, sizeof js);
    if (n < 0 || (size_t)n >= sizeof js) {
      s = coda_fail(ctx, CODA_ERR_INTERNAL, "config.json of %d layers does not fit", c->layers);
      goto out;
    }
    p = coda_hf_join(dir, "config.json");
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
  char *single = coda_hf_join(dir, "model.safetensors"), *ix = coda_hf_join(dir, "model.safetensors.index.json");
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
  coda_status s = coda_hf_read_json(ctx, ix, &d);
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
    char *sp = coda_hf_join(dir, v->u.str);
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

/* Tensor `name` and the file it is in; marks it used. GPT-2's tensors
 * may be named without "transformer." (the released checkpoints are its
 * base model's; transformers reads both). */
static const coda_st_tensor *hf_find(hf_weights *w, const char *name, const char **path) {
  static const char pre[] = "transformer.";
  for (int pass = 0; pass < 2; pass++) {
    if (pass && strncmp(name, pre, sizeof pre - 1)) break;
    const char *nm = pass ? name + sizeof pre - 1 : name;
    for (int k = 0; k < w->n; k++) {
      const coda_st_tensor *t = coda_st_find(&w->f[k], nm);
      if (t) {
        w->used[k][t - w->f[k].t] = 1;
        *path = w->path[k];
        return t;
      }
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

/* Tensor `name`, checked to be there with shape s0 (x s1 when ndim is 2)
 * and a dtype hf_value reads (its code in *dt). */
static coda_status find_checked(coda_context ctx, hf_weights *w, const char *name, int ndim,
                                int64_t s0, int64_t s1, const coda_st_tensor **out, int *dt) {
  const char *path;
  const coda_st_tensor *t = hf_find(w, name, &path);
  if (!t) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' is missing", path, name);
  int ok = t->ndim == ndim && t->shape[0] == s0 && (ndim == 1 || t->shape[1] == s1);
  if (!ok) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has the wrong shape", path, name);
  *dt = hf_dtype(t);
  if (*dt < 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has dtype %s (F32, BF16, F16 only)", path,
                     name, t->dtype);
  *out = t;
  return CODA_OK;
}

/* Copies an HF tensor (F32/BF16/F16) of exactly rows x cols into dst rows
 * given by map(r) (or r when map is NULL), `stride` floats apart; with dst
 * NULL only checks that the tensor is there with that shape and dtype. */
static coda_status get(coda_context ctx, hf_weights *w, const char *name,
                       int64_t rows, int64_t cols, int ndim, float *dst, int64_t row_mul,
                       int64_t row_add, int64_t hd, int64_t nqk, int64_t qkv_base) {
  const coda_st_tensor *t;
  int dt;
  coda_status s = find_checked(ctx, w, name, ndim, rows, cols, &t, &dt);
  if (s || !dst) return s;
  for (int64_t r = 0; r < rows; r++) {
    int64_t dr = qkv_base >= 0 ? our_row(qkv_base + r, hd, nqk) : r * row_mul + row_add;
    for (int64_t c = 0; c < cols; c++) {
      dst[dr * cols + c] = hf_value(t, dt, (size_t)(r * cols + c));
    }
  }
  return CODA_OK;
}

/* A Conv1D weight (GPT-2): the HF tensor is [in, out] = [cols, rows] of
 * ours, dst[r][c] = hf[c][r]. */
static coda_status get_transposed(coda_context ctx, hf_weights *w, const char *name,
                                  int64_t rows, int64_t cols, float *dst) {
  const coda_st_tensor *t;
  int dt;
  coda_status s = find_checked(ctx, w, name, 2, cols, rows, &t, &dt);
  if (s || !dst) return s;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = hf_value(t, dt, (size_t)(c * rows + r));
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
  const char *emb = coda_family_of(c->family)->params[0].hf[0]; /* the table's first */
  const char *hp = "";
  const coda_st_tensor *h = NULL, *e = NULL;
  for (int k = 0; k < w->n && !h; k++) {
    h = coda_st_find(&w->f[k], "lm_head.weight");
    if (h) hp = w->path[k];
  }
  if (!h) return;
  const char *unused;
  e = hf_find(w, emb, &unused);
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
            "differs from '%s': imported untied, with lm_head.weight as the output head (as "
            "transformers does; set tie_word_embeddings false to say so)", hp, emb);
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

/* Before any weight is copied: bias tensors are refused by name (but by
 * GPT-2, whose table has them), and an untied config needs its lm_head. */
static coda_status hf_check_tensors(coda_context ctx, hf_weights *w, const coda_model_config *c) {
  const int biases = coda_family_of(c->family)->block == CODA_BLOCK_GPT2;
  for (int k = 0; k < w->n && !biases; k++)
    for (int i = 0; i < w->f[k].n; i++)
      if (ends_with(w->f[k].t[i].name, ".bias"))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                         "%s: bias tensor '%s': coda's models have no biases", w->path[k],
                         w->f[k].t[i].name);
  const char *path;
  if (!c->tied && !hf_find(w, "lm_head.weight", &path))
    return coda_fail(ctx, CODA_ERR_IO,
                     "%s: tie_word_embeddings is false but tensor 'lm_head.weight' is missing",
                     path);
  return CODA_OK;
}

/* After the copy: a tensor the model did not take is an error (the rotary
 * inverse-frequency buffers of older checkpoints, and GPT-2's causal-mask
 * buffers attn.bias and attn.masked_bias, are computed, not read; a tied
 * model's copy of the embedding as lm_head is not read). */
static coda_status hf_check_unused(coda_context ctx, hf_weights *w, const coda_model_config *c) {
  const int gpt2 = coda_family_of(c->family)->block == CODA_BLOCK_GPT2;
  for (int k = 0; k < w->n; k++)
    for (int i = 0; i < w->f[k].n; i++) {
      const char *nm = w->f[k].t[i].name;
      const int mask = gpt2 && (ends_with(nm, ".attn.bias") || ends_with(nm, ".attn.masked_bias"));
      if (!w->used[k][i] && !mask && !ends_with(nm, "rotary_emb.inv_freq") &&
          strcmp(nm, "lm_head.weight"))
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                         "%s: tensor '%s' is not part of the model the config describes",
                         w->path[k], nm);
    }
  return CODA_OK;
}

/* Every tensor of the model config c describes, copied into m's weights;
 * with m NULL only checked (name, shape, dtype), so that a config is
 * backed by the files before its model is allocated. The family table
 * gives the tensors and their conversions. */
static coda_status hf_walk(coda_context ctx, hf_weights *wf, const coda_model_config *c,
                           coda_model *m) {
  const coda_family *fam = coda_family_of(c->family);
  float *W = m ? coda_model_weights(m) : NULL;
  const int64_t D = c->dim, hd = coda_model_head_dim(c);
  const int64_t nq = (int64_t)c->heads * hd, nk = (int64_t)c->kv_heads * hd;
  char nm[128], ours[128];
  coda_status s = CODA_OK;
  for (int w = CODA_P_BEFORE; w <= CODA_P_AFTER && !s; w++)
    for (int li = 0; li < (w == CODA_P_LAYER ? c->layers : 1) && !s; li++)
      for (int pi = 0; pi < fam->nparams && !s; pi++) {
        const coda_family_param *fp = &fam->params[pi];
        if ((int)fp->where != w || (fp->untied_only && c->tied)) continue;
        snprintf(ours, sizeof ours, fp->name, li);
        float *dst = W ? W + coda_model_find(m, ours)->offset : NULL;
        const int64_t rows = coda_family_dim(c, fp->rows), cols = coda_family_dim(c, fp->cols);
        const int64_t start[3] = {0, nq, nq + nk}, qkv_rows[3] = {nq, nk, nk};
        for (int part = 0; part < hf_parts(fp->hf_conv) && !s; part++) {
          snprintf(nm, sizeof nm, fp->hf[part], li);
          switch (fp->hf_conv) {
          case CODA_HF_COPY:
            s = get(ctx, wf, nm, rows, cols, fp->ndim, dst, 1, 0, 0, 0, -1);
            break;
          case CODA_HF_QKV:
            s = get(ctx, wf, nm, qkv_rows[part], D, 2, dst, 1, 0, hd, nq + nk, start[part]);
            break;
          case CODA_HF_GATE_UP:
            s = get(ctx, wf, nm, c->ffn, D, 2, dst, 2, part, 0, 0, -1);
            break;
          case CODA_HF_HEAD_PERM:
            s = get(ctx, wf, nm, hd, 1, 1, dst, 1, 0, hd, hd, 0);
            break;
          case CODA_HF_TRANSPOSE:
            s = get_transposed(ctx, wf, nm, rows, cols, dst);
            break;
          }
        }
      }
  return s;
}

coda_status coda_hf_import(coda_context ctx, const char *dir, coda_engine engine, coda_model **out) {
  *out = NULL;
  char *cp = coda_hf_join(dir, "config.json");
  hf_weights wf;
  memset(&wf, 0, sizeof wf);
  coda_model *m = NULL;
  coda_model_config c;
  memset(&c, 0, sizeof c);
  coda_status s = !cp ? coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory") : CODA_OK;
  if (!s) s = coda_hf_read_config(ctx, cp, &c);
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
  if (!s) s = hf_check_unused(ctx, &wf, &c);
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
    char *beside_weights = coda_hf_join(hf_dir, "model.safetensors");
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
  char *tp = coda_hf_join(hf_dir, "tokenizer.json");
  struct stat sb;
  if (!tp) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  else if (stat(tp, &sb) == 0)
    s = coda_checkpoint_carry_tokenizer(ctx, tp, checkpoint, coda_model_cfg(m)->vocab, &st);
  free(tp);
  if (!s) s = coda_checkpoint_save(ctx, checkpoint, m, NULL, NULL, &st);
  coda_model_destroy(m);
  return s;
}
