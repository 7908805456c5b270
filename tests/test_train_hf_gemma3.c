/* The Hugging Face Gemma 3 text layout (Gemma3ForCausalLM, model_type
 * gemma3_text): export then import gives the same weights and config bit
 * for bit and the same files again; the file holds the four norms of each
 * layer under their HF names and no lm_head (tied); q/k norm weights and
 * q/k rows in HF's half-split RoPE order; the layer pattern is written as
 * layer_types and sliding_window_pattern and read from either; what coda
 * does not run of Gemma3TextConfig is refused by name (RoPE scaling,
 * attention soft-capping, another activation, a non-periodic layer list,
 * the multimodal gemma3 model type), as is a tensor the model does not
 * take; the exported files read as transformers reads them (an fp64
 * forward here on the HF tensors: rotate_half RoPE, HF's sliding mask)
 * give coda's loss; and the released Gemma 3 1B config reads as its known
 * parameter count. */
#define _POSIX_C_SOURCE 200809L
#include "family_test_util.h"

enum { V = 50, D = 16, L = 3, H = 4, HK = 2, HD = 6, F = 20, S = 32 };

static coda_model_config gemma_config(void) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = V; c.dim = D; c.layers = L; c.heads = H; c.kv_heads = HK; c.ffn = F; c.seq = S;
  c.tied = 1; c.rope_theta = 1e6; c.norm_eps = 1e-6; c.family = CODA_FAMILY_GEMMA3;
  c.head_dim = HD; c.sliding_window = 5; c.sliding_pattern = 3; c.rope_local_theta = 1e4;
  c.attn_scalar = 12.0; c.logit_softcap = 30.0;
  return c;
}

static void round_trip(coda_context ctx, int tied) {
  coda_model_config c = gemma_config();
  c.tied = tied;
  coda_model *m = hf_random_model(ctx, &c, 40);
  if (!m) return;
  coda_model *back = hf_export_import(ctx, m);
  if (!back) { coda_model_destroy(m); return; }
  const coda_model_config *b = coda_model_cfg(back);
  CHECK(b->family == CODA_FAMILY_GEMMA3 && b->tied == tied && b->heads == H && b->kv_heads == HK &&
        b->head_dim == HD && b->ffn == F && b->seq == S && b->norm_eps == 1e-6 && b->vocab == V &&
        b->layers == L && b->rope_theta == 1e6 && b->rope_local_theta == 1e4 &&
        b->attn_scalar == 12.0 && b->logit_softcap == 30.0 && b->sliding_window == 5 &&
        b->sliding_pattern == 3);
  CHECK(same_weights(m, back));
  /* export of the import: the same bytes again */
  char *cfg1 = hf_export_again(ctx, back);
  CHECK(cfg1 && strstr(cfg1, "\"Gemma3ForCausalLM\"") &&
        strstr(cfg1, "\"model_type\": \"gemma3_text\"") &&
        strstr(cfg1, "\"hidden_activation\": \"gelu_pytorch_tanh\"") &&
        strstr(cfg1, "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
                     "\"full_attention\"]") &&
        strstr(cfg1, "\"sliding_window_pattern\": 3") && strstr(cfg1, "\"sliding_window\": 5") &&
        strstr(cfg1, "\"final_logit_softcapping\": 30"));
  free(cfg1);
  const char *p = in_test_dir("model.safetensors");
  coda_st_file f;
  CHECK(coda_st_load(ctx, p, 0, &f) == CODA_OK);
  /* the four norms of a layer, q/k norms, lm_head only when untied */
  const char *names[] = {"model.layers.2.input_layernorm.weight",
                         "model.layers.2.post_attention_layernorm.weight",
                         "model.layers.2.pre_feedforward_layernorm.weight",
                         "model.layers.2.post_feedforward_layernorm.weight",
                         "model.layers.0.self_attn.q_norm.weight", "model.norm.weight"};
  for (int i = 0; i < 6; i++) CHECK_MSG(coda_st_find(&f, names[i]) != NULL, "%s", names[i]);
  CHECK((coda_st_find(&f, "lm_head.weight") == NULL) == tied);
  CHECK(f.n == 1 + 13 * L + 1 + !tied);
  /* HF's half-split order: HF row j of a q head is our row 2j, row j + hd/2
   * our row 2j + 1; the q norm weight likewise; the post-attention norm is
   * our attention.post_norm, pre_feedforward our ffn_norm */
  const float *w = coda_model_weights(m);
  const coda_st_tensor *q = coda_st_find(&f, "model.layers.1.self_attn.q_proj.weight");
  const coda_st_tensor *qn = coda_st_find(&f, "model.layers.1.self_attn.q_norm.weight");
  const coda_st_tensor *pa = coda_st_find(&f, "model.layers.1.post_attention_layernorm.weight");
  const coda_st_tensor *pf = coda_st_find(&f, "model.layers.1.pre_feedforward_layernorm.weight");
  const coda_param *wq = coda_model_find(m, "layers.1.attention.wqkv.weight");
  const coda_param *wqn = coda_model_find(m, "layers.1.attention.q_norm.weight");
  const coda_param *wpa = coda_model_find(m, "layers.1.attention.post_norm.weight");
  const coda_param *wpf = coda_model_find(m, "layers.1.ffn_norm.weight");
  CHECK(q && qn && pa && pf && wq && wqn && wpa && wpf);
  if (q && qn && pa && pf && wq && wqn && wpa && wpf) {
    CHECK(q->shape[0] == H * HD && q->shape[1] == D);
    const float *qv = (const float *)q->data, *qnv = (const float *)qn->data;
    int ok = 1;
    for (int h = 0; h < H; h++)
      for (int j = 0; j < HD / 2; j++)
        for (int k = 0; k < D; k++) {
          ok &= qv[(h * HD + j) * D + k] == w[wq->offset + (h * HD + 2 * j) * D + k];
          ok &= qv[(h * HD + j + HD / 2) * D + k] == w[wq->offset + (h * HD + 2 * j + 1) * D + k];
        }
    for (int j = 0; j < HD / 2; j++)
      ok &= qnv[j] == w[wqn->offset + 2 * j] && qnv[j + HD / 2] == w[wqn->offset + 2 * j + 1];
    CHECK_MSG(ok, "q_proj / q_norm rows are not HF's half-split order of ours");
    CHECK(!memcmp(pa->data, w + wpa->offset, D * 4) && !memcmp(pf->data, w + wpf->offset, D * 4));
  }
  /* a tensor the model does not take is refused by name */
  coda_st_entry *e = calloc((size_t)f.n + 1, sizeof *e);
  for (int i = 0; i < f.n; i++)
    e[i] = (coda_st_entry){f.t[i].name, "F32", f.t[i].ndim, {f.t[i].shape[0], f.t[i].shape[1]},
                           f.t[i].data};
  e[f.n] = e[0];
  e[f.n].name = "model.layers.0.self_attn.sinks";
  const char *meta[] = {"format", "pt"};
  CHECK(coda_st_save(ctx, p, e, f.n + 1, meta, 1) == CODA_OK);
  coda_model *bare = NULL;
  CHECK(coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &bare) == CODA_ERR_NOT_SUPPORTED &&
        !bare);
  CHECK(strstr(coda_last_error(ctx), "'model.layers.0.self_attn.sinks' is not part of the model"));
  free(e);
  coda_st_free(&f);
  coda_model_destroy(back);
  coda_model_destroy(m);
}

/* ------------------------------------------- the HF layout in fp64 */

/* Tensor `fmt` (%d: layer li) of the exported file, widened to double. */
static double *hf_tensor(const coda_st_file *f, const char *fmt, int li, int64_t n) {
  char nm[128];
  snprintf(nm, sizeof nm, fmt, li);
  const coda_st_tensor *t = coda_st_find(f, nm);
  CHECK_MSG(t && !strcmp(t->dtype, "F32") && (int64_t)((t->end - t->begin) / 4) == n,
            "%s: missing or not %lld F32 values", nm, (long long)n);
  double *d = calloc((size_t)n, sizeof *d);
  for (int64_t i = 0; t && (int64_t)((t->end - t->begin) / 4) == n && i < n; i++) {
    float v;
    memcpy(&v, t->data + 4 * i, 4);
    d[i] = v;
  }
  return d;
}

/* y = v / sqrt(mean(v²) + eps) · (1 + w), Gemma3RMSNorm */
static void norm1p(const double *v, const double *w, double *y, int n, double eps) {
  double ss = 0;
  for (int k = 0; k < n; k++) ss += v[k] * v[k];
  for (int k = 0; k < n; k++) y[k] = v[k] / sqrt(ss / n + eps) * (1.0 + w[k]);
}

/* out[i][o] = Σ_k in[i][k] W[o][k] (nn.Linear) */
static void lin(const double *in, const double *W, double *out, int n, int rows, int cols) {
  for (int i = 0; i < n; i++)
    for (int o = 0; o < rows; o++) {
      double s = 0;
      for (int k = 0; k < cols; k++) s += in[i * cols + k] * W[o * cols + k];
      out[i * rows + o] = s;
    }
}

/* Gemma3ForCausalLM's forward in fp64 over the exported HF files, as
 * transformers computes it: q_proj / k_proj / v_proj split, rotate_half
 * RoPE on the half-split pairs (j, j + hd/2), layer_types from the
 * pattern (i + 1) % 3, the mask kv > q - sliding_window on sliding layers;
 * the mean next-token loss of tok (T tokens, T - 1 targets). */
static double hf_loss64(const coda_st_file *f, const coda_model_config *c, const int32_t *tok,
                        int T) {
  enum { NQ = H * HD, NK = HK * HD };
  double *x = calloc((size_t)T * D, 8), *h = calloc((size_t)T * D, 8), *a = calloc((size_t)T * D, 8);
  double *q = calloc((size_t)T * NQ, 8), *k = calloc((size_t)T * NK, 8),
         *v = calloc((size_t)T * NK, 8), *o = calloc((size_t)T * NQ, 8),
         *g = calloc((size_t)T * F, 8), *u = calloc((size_t)T * F, 8);
  double *emb = hf_tensor(f, "model.embed_tokens.weight", 0, (int64_t)V * D);
  for (int t = 0; t < T; t++)
    for (int e = 0; e < D; e++) x[t * D + e] = emb[tok[t] * D + e] * sqrt((double)D);
  for (int li = 0; li < L; li++) {
    const int sliding = (li + 1) % 3 != 0;
    const double base = sliding ? 1e4 : 1e6;
#define W(name, n) hf_tensor(f, "model.layers.%d." name, li, n)
    double *wi = W("input_layernorm.weight", D), *wq = W("self_attn.q_proj.weight", NQ * D),
           *wk = W("self_attn.k_proj.weight", NK * D), *wv = W("self_attn.v_proj.weight", NK * D),
           *wqn = W("self_attn.q_norm.weight", HD), *wkn = W("self_attn.k_norm.weight", HD),
           *wo = W("self_attn.o_proj.weight", D * NQ),
           *wpa = W("post_attention_layernorm.weight", D),
           *wpf = W("pre_feedforward_layernorm.weight", D),
           *wg = W("mlp.gate_proj.weight", F * D), *wu = W("mlp.up_proj.weight", F * D),
           *wd = W("mlp.down_proj.weight", D * F), *wpo = W("post_feedforward_layernorm.weight", D);
#undef W
    for (int t = 0; t < T; t++) norm1p(x + t * D, wi, h + t * D, D, c->norm_eps);
    lin(h, wq, q, T, NQ, D);
    lin(h, wk, k, T, NK, D);
    lin(h, wv, v, T, NK, D);
    for (int t = 0; t < T; t++)
      for (int hh = 0; hh < H + HK; hh++) {
        double *r = hh < H ? q + t * NQ + hh * HD : k + t * NK + (hh - H) * HD, y[HD];
        norm1p(r, hh < H ? wqn : wkn, y, HD, c->norm_eps);
        for (int j = 0; j < HD / 2; j++) { /* x·cos + rotate_half(x)·sin */
          const double th = t * pow(base, -2.0 * j / HD);
          r[j] = y[j] * cos(th) - y[j + HD / 2] * sin(th);
          r[j + HD / 2] = y[j + HD / 2] * cos(th) + y[j] * sin(th);
        }
      }
    for (int hh = 0; hh < H; hh++)
      for (int t = 0; t < T; t++) {
        const int kv = hh / (H / HK);
        double sc[64], mx = -INFINITY, se = 0;
        for (int s2 = 0; s2 <= t; s2++) {
          sc[s2] = -INFINITY;
          if (sliding && !(s2 > t - c->sliding_window)) continue;
          double d = 0;
          for (int e = 0; e < HD; e++) d += q[t * NQ + hh * HD + e] * k[s2 * NK + kv * HD + e];
          sc[s2] = d * pow(c->attn_scalar, -0.5);
          mx = fmax(mx, sc[s2]);
        }
        for (int s2 = 0; s2 <= t; s2++) se += exp(sc[s2] - mx);
        for (int e = 0; e < HD; e++) {
          double acc = 0;
          for (int s2 = 0; s2 <= t; s2++) acc += exp(sc[s2] - mx) / se * v[s2 * NK + kv * HD + e];
          o[t * NQ + hh * HD + e] = acc;
        }
      }
    lin(o, wo, a, T, D, NQ);
    for (int t = 0; t < T; t++) {
      norm1p(a + t * D, wpa, h + t * D, D, c->norm_eps);
      for (int e = 0; e < D; e++) x[t * D + e] += h[t * D + e];
      norm1p(x + t * D, wpf, h + t * D, D, c->norm_eps);
    }
    lin(h, wg, g, T, F, D);
    lin(h, wu, u, T, F, D);
    for (int i = 0; i < T * F; i++) {
      const double z = g[i];
      g[i] = 0.5 * z * (1 + tanh(sqrt(2 / acos(-1.0)) * (z + 0.044715 * z * z * z))) * u[i];
    }
    lin(g, wd, a, T, D, F);
    for (int t = 0; t < T; t++) {
      norm1p(a + t * D, wpo, h + t * D, D, c->norm_eps);
      for (int e = 0; e < D; e++) x[t * D + e] += h[t * D + e];
    }
    free(wi); free(wq); free(wk); free(wv); free(wqn); free(wkn); free(wo); free(wpa);
    free(wpf); free(wg); free(wu); free(wd); free(wpo);
  }
  double *wn = hf_tensor(f, "model.norm.weight", 0, D), loss = 0;
  for (int t = 0; t + 1 < T; t++) {
    double hf[D], lg[V], mx = -INFINITY, se = 0;
    norm1p(x + t * D, wn, hf, D, c->norm_eps);
    for (int w = 0; w < V; w++) {
      double sum = 0;
      for (int e = 0; e < D; e++) sum += hf[e] * emb[w * D + e];
      lg[w] = c->logit_softcap * tanh(sum / c->logit_softcap); /* final_logit_softcapping */
      mx = fmax(mx, lg[w]);
    }
    for (int w = 0; w < V; w++) se += exp(lg[w] - mx);
    loss += mx + log(se) - lg[tok[t + 1]];
  }
  free(x); free(h); free(a); free(q); free(k); free(v); free(o); free(g); free(u); free(emb);
  free(wn);
  return loss / (T - 1);
}

/* The exported files read as transformers reads them (fp64, above) give
 * the loss coda's engine computes on its own layout. */
static void hf_semantics(coda_context ctx) {
  coda_model_config c = gemma_config();
  coda_model *m = hf_random_model(ctx, &c, 77);
  if (!m) return;
  CHECK(coda_hf_export(ctx, m, test_dir) == CODA_OK);
  enum { T = 13 }; /* past the window of 5 */
  int32_t tok[T], tg[T];
  uint64_t r = 3;
  for (int t = 0; t < T; t++) tok[t] = (int32_t)coda_rng_below(&r, V);
  for (int t = 0; t < T; t++) tg[t] = t + 1 < T ? tok[t + 1] : -1;
  double got = 0;
  int64_t nv = 0;
  CHECK(coda_model_loss(ctx, m, tok, tg, 1, T, &got, &nv) == CODA_OK && nv == T - 1);
  coda_st_file f;
  CHECK(coda_st_load(ctx, in_test_dir("model.safetensors"), 0, &f) == CODA_OK);
  const double want = hf_loss64(&f, &c, tok, T);
  CHECK_MSG(fabs(got - want) <= 1e-5 * fabs(want), "coda loss %.9g, the HF layout in fp64 %.9g",
            got, want);
  coda_st_free(&f);
  coda_model_destroy(m);
}

#define SHAPES                                                                                 \
  "\"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 3, "                \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 6, \"vocab_size\": 50, " \
  "\"max_position_embeddings\": 32"
#define G(extra) "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\", " \
  SHAPES extra "}"

static void pattern(coda_context ctx, const char *json, int window, int pat) {
  write_text("config.json", json);
  coda_model_config c;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &c), CODA_OK);
  CHECK_MSG(c.sliding_window == window && c.sliding_pattern == pat,
            "%s: window %d pattern %d (wanted %d %d)", json, c.sliding_window, c.sliding_pattern,
            window, pat);
}

static void refusals(coda_context ctx) {
  coda_model_config c = gemma_config();
  hf_export_random(ctx, &c, 9);
  config_case(ctx, G(", \"sliding_window\": 5, \"sliding_window_pattern\": 3"), CODA_OK, "");
  /* transformers' defaults: window 4096, every 6th layer global (none of 3) */
  pattern(ctx, G(""), 4096, 6);
  pattern(ctx, G(", \"layer_types\": [\"sliding_attention\", \"full_attention\", "
                 "\"sliding_attention\"]"), 4096, 2);
  pattern(ctx, G(", \"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\"], "
                 "\"sliding_window\": 7"), 0, 0);
  pattern(ctx, G(", \"sliding_window_pattern\": 1"), 0, 0);
  config_case(ctx, G(", \"layer_types\": [\"full_attention\", \"sliding_attention\", "
                     "\"sliding_attention\"]"), CODA_ERR_NOT_SUPPORTED,
              "layer_types[1] is \"sliding_attention\": coda runs every n-th layer global");
  config_case(ctx, G(", \"layer_types\": [\"sliding_attention\", \"full_attention\", "
                     "\"sliding_attention\"], \"sliding_window_pattern\": 3"),
              CODA_ERR_NOT_SUPPORTED, "layer_types (its first global layer 1) and "
              "sliding_window_pattern 3 disagree");
  config_case(ctx, G(", \"layer_types\": [\"sliding_attention\", \"chunked_attention\", "
                     "\"sliding_attention\"]"), CODA_ERR_NOT_SUPPORTED,
              "layer_types[1] is \"chunked_attention\"");
  config_case(ctx, G(", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}"),
              CODA_ERR_NOT_SUPPORTED, "\"rope_scaling\" is set");
  /* transformers 5's rope_parameters: the two bases, default rotation only */
  write_text("config.json", G(", \"rope_parameters\": {\"full_attention\": {\"rope_type\": "
                              "\"default\", \"rope_theta\": 500000.0}, \"sliding_attention\": "
                              "{\"rope_type\": \"default\", \"rope_theta\": 20000.0}}"));
  coda_model_config rc;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &rc), CODA_OK);
  CHECK(rc.rope_theta == 500000.0 && rc.rope_local_theta == 20000.0);
  config_case(ctx, G(", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", "
                     "\"factor\": 8.0}}"), CODA_ERR_NOT_SUPPORTED,
              "rope_parameters.full_attention.factor is set");
  config_case(ctx, G(", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"yarn\"}}"),
              CODA_ERR_NOT_SUPPORTED, "rope_parameters.full_attention.rope_type is not \"default\"");
  config_case(ctx, G(", \"rope_local_base_freq\": 10000, \"rope_parameters\": "
                     "{\"sliding_attention\": {\"rope_theta\": 20000.0}}"), CODA_ERR_IO,
              "rope_local_base_freq 10000 and rope_parameters.sliding_attention.rope_theta 20000 differ");
  config_case(ctx, G(", \"attn_logit_softcapping\": 50.0"), CODA_ERR_NOT_SUPPORTED,
              "\"attn_logit_softcapping\" is set");
  config_case(ctx, G(", \"hidden_activation\": \"gelu\""), CODA_ERR_NOT_SUPPORTED,
              "hidden_activation \"gelu\" is not supported (the tanh GELU");
  config_case(ctx, G(", \"use_bidirectional_attention\": true"), CODA_ERR_NOT_SUPPORTED,
              "use_bidirectional_attention is true");
  config_case(ctx, G(", \"attention_bias\": true"), CODA_ERR_NOT_SUPPORTED, "attention_bias is true");
  config_case(ctx, G(", \"final_logit_softcapping\": -1"), CODA_ERR_NOT_SUPPORTED,
              "logit_softcap -1");
  config_case(ctx, "{\"model_type\": \"gemma3\", \"text_config\": {}}", CODA_ERR_NOT_SUPPORTED,
              "model_type gemma3 is the multimodal Gemma3ForConditionalGeneration");
  config_case(ctx, "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"qwen3\", "
              SHAPES "}", CODA_ERR_NOT_SUPPORTED, "name different families");
  /* an untied config over the tied files: the missing head by name */
  config_case(ctx, G(", \"sliding_window_pattern\": 3, \"tie_word_embeddings\": false"), CODA_ERR_IO,
              "'lm_head.weight' is missing");
}

/* The released Gemma 3 1B (google/gemma-3-1b-pt) config.json: its layer
 * pattern and 999,885,952 parameters (the head tied). */
static void released_config(coda_context ctx) {
  write_text("config.json",
             "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, "
             "\"attention_dropout\": 0.0, \"attn_logit_softcapping\": null, \"bos_token_id\": 2, "
             "\"cache_implementation\": \"hybrid\", \"eos_token_id\": 1, "
             "\"final_logit_softcapping\": null, \"head_dim\": 256, \"hidden_activation\": "
             "\"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"initializer_range\": 0.02, "
             "\"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": "
             "\"gemma3_text\", \"num_attention_heads\": 4, \"num_hidden_layers\": 26, "
             "\"num_key_value_heads\": 1, \"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, "
             "\"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000, \"rope_scaling\": null, "
             "\"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6, "
             "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\", "
             "\"use_cache\": true, \"vocab_size\": 262144}");
  coda_model_config c;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &c), CODA_OK);
  CHECK(c.family == CODA_FAMILY_GEMMA3 && c.dim == 1152 && c.heads == 4 && c.kv_heads == 1 &&
        c.head_dim == 256 && c.ffn == 6912 && c.layers == 26 && c.seq == 32768 &&
        c.vocab == 262144 && c.tied && c.norm_eps == 1e-6 && c.sliding_window == 512 &&
        c.sliding_pattern == 6 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4 &&
        c.attn_scalar == 256 && c.logit_softcap == 0);
  CHECK(coda_model_layer_window(&c, 4) == 512 && coda_model_layer_window(&c, 5) == 0 &&
        coda_model_layer_window(&c, 25) == 512 && coda_model_layer_window(&c, 23) == 0);
  CHECK_EQ_INT(coda_model_config_params(&c), 999885952LL);
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_hf_gemma3");
  round_trip(ctx, 1);
  round_trip(ctx, 0);
  hf_semantics(ctx);
  refusals(ctx);
  released_config(ctx);
  return family_test_end(ctx);
}
