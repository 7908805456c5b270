/* Strict Hugging Face import: config.json through the JSON parser (top
 * level only, truncated or invalid JSON refused with the reason), every
 * feature coda does not run refused by name, transformers' defaults,
 * sharded checkpoints through model.safetensors.index.json, and RoPE
 * scaling (llama3, linear; transformers 4 and 5 spellings) against an fp64
 * computation of transformers' formulas, in the plans' frequency table and
 * in the model's loss. Every directory is written here: config.json as
 * text, the tensors with the project's safetensors writer. */
#define _POSIX_C_SOURCE 200809L
#include "family_test_util.h"

static const double PI = 3.14159265358979323846;

static void remove_file(const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", test_dir, name);
  remove(p);
}

/* The test model: vocab 64, dim 32, 1 layer, 4/2 heads (hd 8), ffn 48. */
#define BASE                                                                           \
  "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "             \
  "\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 1, "        \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 64, "       \
  "\"max_position_embeddings\": 16, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false"

static coda_model_config model_cfg(void) {
  coda_model_config c = {64, 32, 1, 4, 2, 48, 16, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  return c;
}

/* Exports a random untied model into test_dir (config.json and model.safetensors). */
static void export_model(coda_context ctx, coda_model **out) {
  coda_model_config c = model_cfg();
  coda_model *m;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  coda_model_init(m, 7);
  float *w = coda_model_weights(m);
  uint64_t r = 3;
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(0.2 * (coda_rng_uniform(&r) - 0.5));
  CHECK(coda_hf_export(ctx, m, test_dir) == CODA_OK);
  *out = m;
}

static int same_rope(const coda_rope_scaling *a, const coda_rope_scaling *b) {
  return a->type == b->type && a->factor == b->factor && a->low_freq_factor == b->low_freq_factor &&
         a->high_freq_factor == b->high_freq_factor &&
         a->original_max_position == b->original_max_position;
}

static void refusals(coda_context ctx) {
  const char *full = "{" BASE ", \"rms_norm_eps\": 1e-05}";
  config_case(ctx, full, CODA_OK, "");
  /* truncated and invalid JSON: the parser's reason */
  char cut[128];
  snprintf(cut, sizeof cut, "%.100s", full);
  config_case(ctx, cut, CODA_ERR_IO, "invalid JSON: line 1");
  config_case(ctx, "{" BASE "} trailing", CODA_ERR_IO, "invalid JSON");
  config_case(ctx, "{" BASE ",}", CODA_ERR_IO, "invalid JSON");
  config_case(ctx, "[1, 2]", CODA_ERR_IO, "not an object");
  /* a key only inside a nested object is not a top-level key */
  config_case(ctx,
              "{\"text_config\": {\"hidden_size\": 32}, \"intermediate_size\": 48, "
              "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 64}",
              CODA_ERR_IO, "\"hidden_size\" is missing");
  config_case(ctx, "{" BASE ", \"hidden_size\": 32}", CODA_ERR_IO, "\"hidden_size\" appears twice");
  config_case(ctx, "{" BASE ", \"rms_norm_eps\": \"1e-5\"}", CODA_ERR_IO, "not a finite number");
  /* what coda does not implement, by name */
  config_case(ctx, "{" BASE ", \"attention_bias\": true}", CODA_ERR_NOT_SUPPORTED, "attention_bias");
  config_case(ctx, "{" BASE ", \"mlp_bias\": true}", CODA_ERR_NOT_SUPPORTED, "mlp_bias");
  config_case(ctx, "{" BASE ", \"attention_bias\": false, \"mlp_bias\": false}", CODA_OK, "");
  config_case(ctx, "{" BASE ", \"hidden_act\": \"gelu\"}", CODA_ERR_NOT_SUPPORTED,
              "hidden_act \"gelu\"");
  config_case(ctx, "{" BASE ", \"hidden_act\": \"silu\"}", CODA_OK, "");
  config_case(ctx, "{" BASE ", \"sliding_window\": 8}", CODA_ERR_NOT_SUPPORTED, "sliding_window 8");
  config_case(ctx, "{" BASE ", \"sliding_window\": 4096}", CODA_OK, ""); /* longer than seq 16 */
  config_case(ctx, "{" BASE ", \"sliding_window\": null}", CODA_OK, "");
  char qwen[1024];
  snprintf(qwen, sizeof qwen, "%s", "{" BASE "}");
  char *mt = strstr(qwen, "\"llama\"");
  memcpy(mt, "\"qwen2\"", 7);
  config_case(ctx, qwen, CODA_ERR_NOT_SUPPORTED, "qwen2 has q/k/v projection biases");
  config_case(ctx, "{" BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
              CODA_ERR_NOT_SUPPORTED, "rope_scaling.rope_type \"yarn\" is not supported");
  config_case(ctx, "{" BASE ", \"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}",
              CODA_ERR_NOT_SUPPORTED, "rope_parameters.rope_type \"dynamic\"");
  config_case(ctx, "{" BASE ", \"rope_scaling\": {\"factor\": 8.0}}", CODA_ERR_IO, "no \"rope_type\"");
  config_case(ctx,
              "{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
              "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
              CODA_ERR_IO, "rope_scaling.\"low_freq_factor\" is missing");
  config_case(ctx, "{" BASE ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": -2}}",
              CODA_ERR_IO, "factor -2");
  config_case(ctx, "{" BASE ", \"head_dim\": 16}", CODA_ERR_NOT_SUPPORTED, "head_dim 16");
  config_case(ctx, "{" BASE ", \"head_dim\": 8}", CODA_OK, "");
  /* hidden_size not a multiple of the heads, head_dim absent: the reason
   * names the two keys (it was "head_dim = 0 is not a positive integer") */
  char uneven[1024];
  snprintf(uneven, sizeof uneven, "%s", "{" BASE "}");
  memcpy(strstr(uneven, "\"hidden_size\": 32"), "\"hidden_size\":  2", 17);
  config_case(ctx, uneven, CODA_ERR_NOT_SUPPORTED,
              "hidden_size 2 is not a multiple of num_attention_heads 4");
  config_case(ctx, "{" BASE ", \"quantization_config\": {\"bits\": 4}}", CODA_ERR_NOT_SUPPORTED,
              "quantization_config");
  /* a config.json claiming a model far larger than the folder's weights
   * (vocab 2^24, dim 2^16, 1024 layers: some 10^13 parameters) is refused
   * by the first tensor the weights lack, before a model of that size is
   * allocated (which failed as "out of memory", or aborted under ASan) */
  config_case(ctx,
              "{\"model_type\": \"llama\", \"hidden_size\": 65536, \"intermediate_size\": 262144, "
              "\"num_hidden_layers\": 1024, \"num_attention_heads\": 256, \"vocab_size\": 16777216, "
              "\"max_position_embeddings\": 1024, \"tie_word_embeddings\": true}",
              CODA_ERR_IO, "tensor 'model.embed_tokens.weight' has the wrong shape");
  /* transformers' defaults: eps 1e-6, one KV head per head */
  write_text("config.json", "{" BASE "}");
  coda_model *m = NULL;
  CHECK(coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (m) CHECK(coda_model_cfg(m)->norm_eps == 1e-6 && coda_model_cfg(m)->rope.type == CODA_ROPE_DEFAULT);
  coda_model_destroy(m);
}

/* Writes the tensors of the exported model.safetensors (plus `extra`, minus
 * `drop`) as `files` shards: model.safetensors when files == 0, else
 * model-0000k-of-0000n.safetensors and the index (with `index_extra` spliced
 * into weight_map). */
static void rewrite_tensors(coda_context ctx, const coda_st_file *src, int files, const char *drop,
                            const char *extra, const char *bad_map) {
  int n = src->n;
  coda_st_entry *e = calloc((size_t)n + 1, sizeof *e);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (drop && !strcmp(src->t[i].name, drop)) continue;
    e[k].name = src->t[i].name;
    e[k].dtype = src->t[i].dtype;
    e[k].ndim = src->t[i].ndim;
    memcpy(e[k].shape, src->t[i].shape, sizeof e[k].shape);
    e[k].data = src->t[i].data;
    k++;
  }
  static float bias[16];
  if (extra) {
    e[k].name = extra;
    e[k].dtype = "F32";
    e[k].ndim = 1;
    e[k].shape[0] = 16;
    e[k].data = bias;
    k++;
  }
  const char *meta[] = {"format", "pt"};
  char p[512];
  if (files == 0) {
    snprintf(p, sizeof p, "%s/model.safetensors", test_dir);
    CHECK(coda_st_save(ctx, p, e, k, meta, 1) == CODA_OK);
  } else {
    char idx[16384];
    size_t o = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    int per = (k + files - 1) / files;
    for (int f = 0; f < files; f++) {
      int a = f * per, b = a + per < k ? a + per : k;
      char nm[64];
      snprintf(nm, sizeof nm, "model-%05d-of-%05d.safetensors", f + 1, files);
      snprintf(p, sizeof p, "%s/%s", test_dir, nm);
      CHECK(coda_st_save(ctx, p, e + a, b - a, meta, 1) == CODA_OK);
      for (int i = a; i < b; i++) {
        /* bad_map: the first tensor is listed in the wrong shard */
        const char *where = nm;
        char other[64];
        if (bad_map && i == 0) {
          snprintf(other, sizeof other, "model-%05d-of-%05d.safetensors", files, files);
          where = !strcmp(bad_map, "wrong") ? other : bad_map;
        }
        o += (size_t)snprintf(idx + o, sizeof idx - o, "%s\"%s\": \"%s\"", i ? ", " : "",
                              e[i].name, where);
      }
    }
    snprintf(idx + o, sizeof idx - o, "}}");
    write_text("model.safetensors.index.json", idx);
  }
  free(e);
}

static void tensors_and_shards(coda_context ctx, coda_model *orig) {
  write_text("config.json", "{" BASE ", \"rms_norm_eps\": 1e-05}");
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors", test_dir);
  coda_st_file f;
  CHECK(coda_st_load(ctx, p, 0, &f) == CODA_OK);
  /* untied config without lm_head.weight */
  rewrite_tensors(ctx, &f, 0, "lm_head.weight", NULL, NULL);
  hf_expect(ctx, "no lm_head", CODA_ERR_IO, "'lm_head.weight' is missing");
  /* bias tensors present, refused by name even where the config says nothing */
  rewrite_tensors(ctx, &f, 0, NULL, "model.layers.0.self_attn.q_proj.bias", NULL);
  hf_expect(ctx, "bias tensor", CODA_ERR_NOT_SUPPORTED,
         "bias tensor 'model.layers.0.self_attn.q_proj.bias'");
  rewrite_tensors(ctx, &f, 0, NULL, "model.layers.0.extra.weight", NULL);
  hf_expect(ctx, "extra tensor", CODA_ERR_NOT_SUPPORTED,
            "'model.layers.0.extra.weight' is not part");
  rewrite_tensors(ctx, &f, 0, NULL, "model.layers.0.self_attn.rotary_emb.inv_freq", NULL);
  hf_expect(ctx, "inv_freq buffer", CODA_OK, "");
  /* sharded: three shards and the index, no model.safetensors */
  remove_file("model.safetensors");
  hf_expect(ctx, "no weights", CODA_ERR_IO, "model.safetensors");
  rewrite_tensors(ctx, &f, 3, NULL, NULL, NULL);
  coda_model *m = NULL;
  coda_status s = coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &m);
  CHECK_MSG(s == CODA_OK, "sharded: %s", coda_last_error(ctx));
  if (m) {
    CHECK(coda_model_size(m) == coda_model_size(orig));
    CHECK(!memcmp(coda_model_weights(m), coda_model_weights(orig), coda_model_size(m) * sizeof(float)));
  }
  coda_model_destroy(m);
  rewrite_tensors(ctx, &f, 3, NULL, NULL, "wrong");
  hf_expect(ctx, "index names the wrong shard", CODA_ERR_IO, "where weight_map puts it");
  rewrite_tensors(ctx, &f, 3, NULL, NULL, "../model-00001-of-00003.safetensors");
  hf_expect(ctx, "index path outside", CODA_ERR_IO, "is not a file name in the directory");
  write_text("model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": ");
  hf_expect(ctx, "truncated index", CODA_ERR_IO, "invalid JSON");
  coda_st_free(&f);
  remove_file("model.safetensors.index.json");
  for (int i = 1; i <= 3; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "model-%05d-of-00003.safetensors", i);
    remove_file(nm);
  }
  CHECK(coda_hf_export(ctx, orig, test_dir) == CODA_OK); /* back to one file */
}

/* transformers' inverse frequencies, in fp64, written the way
 * _compute_default_rope_parameters and _compute_llama3_parameters write
 * them: inv_freq = 1 / base^(arange(0, dim, 2) / dim), then per band. */
static void hf_inv_freq(double base, int dim, int type, double factor, double low, double high,
                        double old_ctx, double *out) {
  for (int i = 0; i < dim / 2; i++) {
    double inv = 1.0 / pow(base, (double)(2 * i) / dim);
    if (type == CODA_ROPE_LINEAR) inv = inv / factor;
    if (type == CODA_ROPE_LLAMA3) {
      double low_wl = old_ctx / low, high_wl = old_ctx / high, wl = 2 * PI / inv;
      double llama = wl > low_wl ? inv / factor : inv;
      double smooth = (old_ctx / wl - low) / (high - low);
      double smoothed = (1 - smooth) * llama / factor + smooth * llama;
      int medium = !(wl < high_wl) && !(wl > low_wl);
      inv = medium ? smoothed : llama;
    }
    out[i] = inv;
  }
}

static void inv_freq_formula(coda_context ctx) {
  const int dims[3] = {8, 64, 128};
  double want[64];
  for (int d = 0; d < 3; d++)
    for (int t = 0; t < 3; t++) {
      /* Llama 3.1's parameters; linear with factor 4 */
      coda_rope_scaling s = {(coda_rope_type)t, t == 1 ? 4.0 : 8.0, 1.0, 4.0, 8192.0};
      hf_inv_freq(500000.0, dims[d], t, s.factor, 1.0, 4.0, 8192.0, want);
      double worst = 0;
      int scaled = 0, kept = 0, medium = 0;
      for (int j = 0; j < dims[d] / 2; j++) {
        double got = coda_rope_inv_freq(500000.0, dims[d], &s, j);
        worst = fmax(worst, fabs(got - want[j]) / want[j]);
        double plain = pow(500000.0, -2.0 * j / dims[d]);
        if (fabs(want[j] - plain / s.factor) < 1e-12 * plain) scaled++;
        else if (fabs(want[j] - plain) < 1e-12 * plain) kept++;
        else medium++;
      }
      CHECK_MSG(worst < 1e-14, "head_dim %d type %d: inv_freq relative error %.3g", dims[d], t, worst);
      /* at head_dim 128 llama3 has all three bands */
      if (dims[d] == 128 && t == CODA_ROPE_LLAMA3) CHECK(scaled > 0 && kept > 0 && medium > 0);
      if (t == CODA_ROPE_LINEAR) CHECK(scaled == dims[d] / 2);
    }
  /* the block plan's frequency table holds f_j / (2 pi) per Q/K column pair */
  coda_llama_config lc = coda_llama_default_config();
  lc.head_dim = 128; lc.dim = 256; lc.n_heads = 2; lc.n_kv_heads = 1; lc.ffn_dim = 64;
  lc.rope_theta = 500000.0;
  lc.rope = (coda_rope_scaling){CODA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192.0};
  hf_inv_freq(500000.0, 128, CODA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192.0, want);
  coda_plan p = NULL;
  CHECK(coda_llama_block_plan(ctx, &lc, &p) == CODA_OK);
  coda_tensor t;
  CHECK(p && coda_plan_tensor(p, "freq", &t) == CODA_OK);
  if (p && t.data) {
    const float *fr = (const float *)t.data;
    double worst = 0;
    for (int n = 0; n < 4 * 128; n += 2) { /* 2 Q heads, 1 K head, then V (no rotation) */
      double got = (double)fr[n] + (double)fr[n + 1];
      double w = n < 3 * 128 ? want[(n % 128) / 2] / (2 * PI) : 0.0;
      worst = fmax(worst, w ? fabs(got - w) / w : fabs(got));
    }
    CHECK_MSG(worst < 1e-12, "plan frequency table: relative error %.3g", worst);
  }
  coda_plan_destroy(p);
}

static double loss_of(coda_context ctx, coda_model *m, const int32_t *in, const int32_t *tg) {
  double l = NAN;
  int64_t nv;
  coda_status s = coda_model_loss(ctx, m, in, tg, 2, 16, &l, &nv);
  CHECK_MSG(s == CODA_OK, "loss: %s", coda_last_error(ctx));
  return l;
}

/* Imports the exported weights under config `json` on both engines: the
 * plans' loss against the reference's; returns the reference's. */
static double scaled_loss(coda_context ctx, const char *json, const coda_rope_scaling *want,
                          double want_theta) {
  write_text("config.json", json);
  coda_model *ref = NULL, *pl = NULL;
  CHECK(coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &ref) == CODA_OK);
  CHECK(coda_hf_import(ctx, test_dir, CODA_ENGINE_PLANS, &pl) == CODA_OK);
  if (!ref || !pl) {
    coda_model_destroy(ref);
    coda_model_destroy(pl);
    return NAN;
  }
  const coda_model_config *c = coda_model_cfg(ref);
  CHECK(same_rope(&c->rope, want) && c->rope_theta == want_theta);
  int32_t in[32], tg[32];
  uint64_t r = 11;
  for (int i = 0; i < 32; i++) {
    in[i] = (int32_t)coda_rng_below(&r, 64);
    tg[i] = (int32_t)coda_rng_below(&r, 64);
  }
  double a = loss_of(ctx, ref, in, tg), b = loss_of(ctx, pl, in, tg);
  CHECK_MSG(fabs(a - b) < 0.01 * a, "%s: reference loss %.6g, plans %.6g", json, a, b);
  /* the scaling survives a checkpoint and an export */
  char ck[512];
  snprintf(ck, sizeof ck, "%s/ck.safetensors", test_dir);
  coda_train_state st = {0, 0, 0, NAN, "", 0, 0};
  CHECK(coda_checkpoint_save(ctx, ck, ref, NULL, NULL, &st) == CODA_OK);
  coda_model_config back;
  CHECK(coda_checkpoint_config(ctx, ck, &back) == CODA_OK);
  CHECK(same_rope(&back.rope, &c->rope));
  remove(ck);
  coda_model_destroy(ref);
  coda_model_destroy(pl);
  return a;
}

static void rope_models(coda_context ctx, coda_model *orig) {
  const coda_rope_scaling none = {CODA_ROPE_DEFAULT, 0, 0, 0, 0};
  const coda_rope_scaling lin = {CODA_ROPE_LINEAR, 4.0, 0, 0, 0};
  /* bands inside 16 positions: wavelengths 6.3 (kept), 63 (medium), 628, 6283 (scaled) */
  const coda_rope_scaling l3 = {CODA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 128.0};
  double l_none = scaled_loss(ctx, "{" BASE ", \"rms_norm_eps\": 1e-05}", &none, 10000.0);
  double l_def = scaled_loss(ctx, "{" BASE ", \"rope_scaling\": {\"rope_type\": \"default\"}, "
                             "\"rms_norm_eps\": 1e-05}", &none, 10000.0);
  CHECK(l_def == l_none);
  double l_lin4 = scaled_loss(ctx, "{" BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}, "
                              "\"rms_norm_eps\": 1e-05}", &lin, 10000.0);
  /* transformers 5: rope_parameters carries the type and the base */
  double l_lin5 = scaled_loss(ctx,
                              "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 1, "
                              "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 64, "
                              "\"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-05, "
                              "\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 4.0, "
                              "\"rope_theta\": 10000.0}}", &lin, 10000.0);
  CHECK(l_lin4 == l_lin5);
  double l_l3 = scaled_loss(ctx, "{" BASE ", \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"rope_type\": "
                            "\"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": "
                            "4.0, \"original_max_position_embeddings\": 128}}", &l3, 10000.0);
  /* the scaling changes the model: the same weights give another loss */
  CHECK_MSG(fabs(l_lin4 - l_none) > 1e-4 * l_none && fabs(l_l3 - l_none) > 1e-4 * l_none,
            "losses none %.9g linear %.9g llama3 %.9g", l_none, l_lin4, l_l3);
  /* the scaling survives an export and an import */
  coda_model_config c = model_cfg();
  c.rope = l3;
  coda_model *m;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  memcpy(coda_model_weights(m), coda_model_weights(orig), coda_model_size(m) * sizeof(float));
  CHECK(coda_hf_export(ctx, m, test_dir) == CODA_OK);
  coda_model *back = NULL;
  CHECK(coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &back) == CODA_OK);
  if (back) CHECK(same_rope(&coda_model_cfg(back)->rope, &l3));
  coda_model_destroy(back);
  coda_model_destroy(m);
  /* an eps other than 1e-5 runs on the plans */
  double l_eps = scaled_loss(ctx, "{" BASE ", \"rms_norm_eps\": 0.25}", &none, 10000.0);
  CHECK(fabs(l_eps - l_none) > 1e-4 * l_none);
}

/* config.json ties the head (tie_word_embeddings true) while the weights
 * hold their own lm_head.weight. A different head is imported untied, as
 * transformers keeps both tensors, with a warning on the context: the
 * model equals the exported untied one weight for weight (its loss too);
 * a head that is a copy of the embedding is the tied head, silently. */
static void tied_config_own_head(coda_context ctx, coda_model *orig) {
  write_text("config.json", "{" BASE ", \"rms_norm_eps\": 1e-05}");
  CHECK(coda_hf_export(ctx, orig, test_dir) == CODA_OK);
  char tied[2048];
  snprintf(tied, sizeof tied, "{%s, \"rms_norm_eps\": 1e-05}", BASE);
  char *at = strstr(tied, "\"tie_word_embeddings\": false");
  CHECK(at != NULL);
  if (!at) return;
  memcpy(at, "\"tie_word_embeddings\": true ", strlen("\"tie_word_embeddings\": true "));
  write_text("config.json", tied);
  coda_warnings_clear(ctx);
  CHECK(coda_warnings(ctx)[0] == '\0');
  coda_model *m = NULL;
  coda_status s = coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &m);
  CHECK_MSG(s == CODA_OK, "tied config, own head: %s", coda_last_error(ctx));
  const char *w = coda_warnings(ctx);
  CHECK_MSG(strstr(w, "tie_word_embeddings true") && strstr(w, "'lm_head.weight'") &&
                strstr(w, "imported untied"),
            "warning: '%s'", w);
  if (m) {
    CHECK(coda_model_cfg(m)->tied == 0);
    CHECK(coda_model_size(m) == coda_model_size(orig));
    CHECK(!memcmp(coda_model_weights(m), coda_model_weights(orig), coda_model_size(m) * sizeof(float)));
    int32_t in[32], tg[32];
    uint64_t r = 5;
    for (int i = 0; i < 32; i++) {
      in[i] = (int32_t)coda_rng_below(&r, 64);
      tg[i] = (int32_t)coda_rng_below(&r, 64);
    }
    CHECK(loss_of(ctx, m, in, tg) == loss_of(ctx, orig, in, tg));
  }
  coda_model_destroy(m);
  /* the head a copy of the embedding (as BF16, the embedding F32: the
   * values compared, not the bytes): the tied model, no warning */
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors", test_dir);
  coda_st_file f;
  CHECK(coda_st_load(ctx, p, 0, &f) == CODA_OK);
  const coda_st_tensor *emb = coda_st_find(&f, "model.embed_tokens.weight");
  CHECK(emb != NULL && !strcmp(emb->dtype, "F32"));
  if (emb && !strcmp(emb->dtype, "F32")) {
    const size_t n = (size_t)(emb->shape[0] * emb->shape[1]);
    float *e32 = malloc(n * sizeof *e32);
    uint16_t *h16 = malloc(n * sizeof *h16);
    coda_st_entry *e = calloc((size_t)f.n, sizeof *e);
    CHECK(e32 && h16 && e);
    if (e32 && h16 && e) {
      memcpy(e32, emb->data, n * sizeof *e32);
      for (size_t i = 0; i < n; i++) { /* rounded to bf16, both tensors */
        uint32_t u;
        memcpy(&u, &e32[i], 4);
        h16[i] = (uint16_t)(u >> 16);
        u &= 0xFFFF0000u;
        memcpy(&e32[i], &u, 4);
      }
      for (int i = 0; i < f.n; i++) {
        e[i].name = f.t[i].name;
        e[i].dtype = f.t[i].dtype;
        e[i].ndim = f.t[i].ndim;
        memcpy(e[i].shape, f.t[i].shape, sizeof e[i].shape);
        e[i].data = f.t[i].data;
        if (!strcmp(e[i].name, "model.embed_tokens.weight")) e[i].data = e32;
        if (!strcmp(e[i].name, "lm_head.weight")) {
          e[i].dtype = "BF16";
          e[i].data = h16;
        }
      }
      const char *meta[] = {"format", "pt"};
      char q[512];
      snprintf(q, sizeof q, "%s/copy.safetensors", test_dir);
      CHECK(coda_st_save(ctx, q, e, f.n, meta, 1) == CODA_OK);
      coda_st_free(&f);
      CHECK(rename(q, p) == 0);
      coda_warnings_clear(ctx);
      m = NULL;
      s = coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &m);
      CHECK_MSG(s == CODA_OK, "tied config, copied head: %s", coda_last_error(ctx));
      CHECK_MSG(coda_warnings(ctx)[0] == '\0', "copied head warned: '%s'", coda_warnings(ctx));
      if (m) {
        coda_model_config c = model_cfg();
        c.tied = 1;
        CHECK(coda_model_cfg(m)->tied == 1);
        CHECK((int64_t)coda_model_size(m) == coda_model_config_params(&c));
        const coda_param *t = coda_model_find(m, "tok_embeddings.weight");
        CHECK(t && !memcmp(coda_model_weights(m) + t->offset, e32, n * sizeof *e32));
      }
      coda_model_destroy(m);
    } else {
      coda_st_free(&f);
    }
    free(e32);
    free(h16);
    free(e);
  } else {
    coda_st_free(&f);
  }
  write_text("config.json", "{" BASE ", \"rms_norm_eps\": 1e-05}");
  CHECK(coda_hf_export(ctx, orig, test_dir) == CODA_OK);
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_hf_strict");
  coda_model *orig = NULL;
  export_model(ctx, &orig);
  if (orig) {
    refusals(ctx);
    tensors_and_shards(ctx, orig);
    inv_freq_formula(ctx);
    rope_models(ctx, orig);
    tied_config_own_head(ctx, orig);
  }
  coda_model_destroy(orig);
  return family_test_end(ctx);
}
