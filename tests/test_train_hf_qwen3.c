/* The Hugging Face Qwen3 layout (Qwen3ForCausalLM): export then import
 * gives the same weights bit for bit (tied with head_dim != dim / heads,
 * untied); the exported q_norm / k_norm follow the half-split RoPE order
 * of the q/k rows and config.json names the family; what coda does not run
 * of Qwen3's config is refused by name (biases, sliding windows, layer
 * types, experts, a family mismatch), transformers' defaults apply, a
 * Llama model does not take Qwen3 weights nor the other way round, and the
 * released Qwen3-0.6B config reads as its model card counts it. */
#define _POSIX_C_SOURCE 200809L
#include "family_test_util.h"

/* vocab 70, dim 24, 2 layers, 4 / 2 heads of head_dim (0: 6). */
static coda_model_config qwen3_config(int tied, int head_dim) {
  coda_model_config c = {70, 24, 2, 4, 2, 40, 32, tied, 1000000.0, 1e-6,
                         {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, head_dim, 0, 0, 0, 0, 0};
  return c;
}

static void round_trip(coda_context ctx, int tied, int head_dim) {
  const coda_model_config c = qwen3_config(tied, head_dim);
  coda_model *m = hf_random_model(ctx, &c, 40 + (uint64_t)tied);
  if (!m) return;
  const int hd = coda_model_head_dim(coda_model_cfg(m)), half = hd / 2;
  coda_model *back = hf_export_import(ctx, m);
  if (!back) { coda_model_destroy(m); return; }
  const coda_model_config *b = coda_model_cfg(back);
  CHECK(b->family == CODA_FAMILY_QWEN3 && coda_model_head_dim(b) == hd && b->tied == tied &&
        b->rope_theta == 1000000.0 && b->norm_eps == 1e-6 && b->heads == 4 && b->kv_heads == 2);
  CHECK(coda_model_size(back) == coda_model_size(m));
  CHECK(same_weights(back, m));
  /* export of the import: the same bytes again */
  char *cfg1 = hf_export_again(ctx, back);
  /* config.json names the family and the head width */
  char want[64];
  snprintf(want, sizeof want, "\"head_dim\": %d", hd);
  CHECK(cfg1 && strstr(cfg1, "\"Qwen3ForCausalLM\"") && strstr(cfg1, "\"model_type\": \"qwen3\"") &&
        strstr(cfg1, want) && strstr(cfg1, "\"use_sliding_window\": false"));
  free(cfg1);
  /* the norms in the file: HF entry j is ours 2j, j + hd/2 is ours 2j + 1 */
  coda_st_file f;
  CHECK(coda_st_load(ctx, in_test_dir("model.safetensors"), 0, &f) == CODA_OK);
  const float *w = coda_model_weights(m);
  const char *ours[2] = {"layers.1.attention.q_norm.weight", "layers.1.attention.k_norm.weight"};
  const char *hf[2] = {"model.layers.1.self_attn.q_norm.weight",
                       "model.layers.1.self_attn.k_norm.weight"};
  for (int i = 0; i < 2; i++) {
    const coda_st_tensor *t = coda_st_find(&f, hf[i]);
    const coda_param *pp = coda_model_find(m, ours[i]);
    CHECK(t && pp && t->ndim == 1 && t->shape[0] == hd && pp->size == (size_t)hd);
    if (!t || !pp) continue;
    const float *v = (const float *)t->data, *o = w + pp->offset;
    int ok = 1;
    for (int j = 0; j < half; j++) ok &= v[j] == o[2 * j] && v[j + half] == o[2 * j + 1];
    CHECK(ok);
  }
  const coda_st_tensor *q = coda_st_find(&f, "model.layers.0.self_attn.q_proj.weight");
  const coda_st_tensor *o = coda_st_find(&f, "model.layers.0.self_attn.o_proj.weight");
  CHECK(q && o && q->shape[0] == 4 * hd && q->shape[1] == 24 && o->shape[0] == 24 &&
        o->shape[1] == 4 * hd);
  CHECK((coda_st_find(&f, "lm_head.weight") == NULL) == tied);
  coda_st_free(&f);
  coda_model_destroy(back);
  coda_model_destroy(m);
}

/* The export of qwen3_config(tied 0, head_dim 10) without its family keys. */
#define SHAPES                                                                              \
  "\"hidden_size\": 24, \"intermediate_size\": 40, \"num_hidden_layers\": 2, "            \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 70, "          \
  "\"max_position_embeddings\": 32, \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-06, " \
  "\"tie_word_embeddings\": false"
#define QWEN3 "\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", " SHAPES
#define Q(extra) "{" QWEN3 ", \"head_dim\": 10" extra "}"

static void refusals(coda_context ctx) {
  const coda_model_config c10 = qwen3_config(0, 10), c6 = qwen3_config(0, 6);
  hf_export_random(ctx, &c10, 9);
  config_case(ctx, Q(""), CODA_OK, "");
  /* transformers 5's spelling, the released configs' window keys */
  config_case(ctx, "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", "
              "\"hidden_size\": 24, \"intermediate_size\": 40, \"num_hidden_layers\": 2, "
              "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 70, "
              "\"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-06, "
              "\"tie_word_embeddings\": false, \"head_dim\": 10, \"rope_parameters\": "
              "{\"rope_type\": \"default\", \"rope_theta\": 1000000.0}, \"use_sliding_window\": "
              "false, \"sliding_window\": null, \"max_window_layers\": 28, \"layer_types\": "
              "[\"full_attention\", \"full_attention\"], \"attention_bias\": false}",
              CODA_OK, "");
  config_case(ctx, Q(", \"sliding_window\": 4"), CODA_OK, ""); /* not used: the window is off */
  config_case(ctx, Q(", \"attention_bias\": true"), CODA_ERR_NOT_SUPPORTED,
              "attention_bias is true");
  config_case(ctx, Q(", \"use_sliding_window\": true, \"sliding_window\": 4096"),
              CODA_ERR_NOT_SUPPORTED, "use_sliding_window is true");
  config_case(ctx, Q(", \"layer_types\": [\"full_attention\", \"sliding_attention\"]"),
              CODA_ERR_NOT_SUPPORTED, "layer_types[1] is \"sliding_attention\"");
  config_case(ctx, Q(", \"layer_types\": [\"full_attention\"]"), CODA_ERR_IO,
              "not an array of 2 strings");
  config_case(ctx, Q(", \"num_experts\": 8"), CODA_ERR_NOT_SUPPORTED, "\"num_experts\" is set");
  config_case(ctx, Q(", \"hidden_act\": \"gelu\""), CODA_ERR_NOT_SUPPORTED, "hidden_act \"gelu\"");
  config_case(ctx, Q(", \"head_dim\": 7"), CODA_ERR_IO, "appears twice");
  config_case(ctx, "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3_moe\", "
              SHAPES ", \"head_dim\": 10}", CODA_ERR_NOT_SUPPORTED, "qwen3_moe is a mixture");
  config_case(ctx, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"qwen3\", "
              SHAPES ", \"head_dim\": 10}", CODA_ERR_NOT_SUPPORTED, "name different families");
  config_case(ctx, "{\"architectures\": [\"Qwen3ForCausalLM\", \"LlamaForCausalLM\"], " SHAPES
              ", \"head_dim\": 10}", CODA_ERR_NOT_SUPPORTED, "must list one of");
  /* the architecture alone names the family */
  config_case(ctx, "{\"architectures\": [\"Qwen3ForCausalLM\"], " SHAPES ", \"head_dim\": 10}",
              CODA_OK, "");
  /* no head_dim: transformers' Qwen3 default 128, which these weights are not */
  config_case(ctx, "{" QWEN3 "}", CODA_ERR_IO,
              "tensor 'model.layers.0.self_attn.q_proj.weight' has the wrong shape");
  config_case(ctx, "{" QWEN3 ", \"head_dim\": 9}", CODA_ERR_NOT_SUPPORTED, "must be even");
  /* Llama's config over Qwen3's weights: its head_dim rule, then the norms
   * it has no place for */
  config_case(ctx, "{\"model_type\": \"llama\", " SHAPES ", \"head_dim\": 10}",
              CODA_ERR_NOT_SUPPORTED, "head_dim 10 x num_attention_heads 4 != hidden_size 24");
  hf_export_random(ctx, &c6, 3);
  config_case(ctx, "{\"model_type\": \"llama\", " SHAPES "}", CODA_ERR_NOT_SUPPORTED,
              "'model.layers.0.self_attn.q_norm.weight' is not part of the model");
}

/* Llama weights under a Qwen3 config: the q/k norms are missing, by name. */
static void llama_weights(coda_context ctx) {
  coda_model_config c = {70, 24, 2, 4, 2, 40, 32, 0, 1000000.0, 1e-6,
                         {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *m = family_model(ctx, &c, 5);
  if (!m) return;
  CHECK(coda_hf_export(ctx, m, test_dir) == CODA_OK);
  coda_model_destroy(m);
  config_case(ctx, "{" QWEN3 ", \"head_dim\": 6}", CODA_ERR_IO,
              "tensor 'model.layers.0.self_attn.q_norm.weight' is missing");
}

/* The released Qwen3-0.6B config.json (head_dim 128 x 16 heads over
 * hidden 1024, tied): the family, its head width, and the parameter count
 * the model card gives (0.44 B without the embedding, 0.6 B in all). */
static void released_config(coda_context ctx) {
  write_text("config.json",
             "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, "
             "\"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645, "
             "\"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024, "
             "\"initializer_range\": 0.02, \"intermediate_size\": 3072, "
             "\"max_position_embeddings\": 40960, \"max_window_layers\": 28, "
             "\"model_type\": \"qwen3\", \"num_attention_heads\": 16, \"num_hidden_layers\": 28, "
             "\"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, "
             "\"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true, "
             "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", "
             "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}");
  coda_model_config c;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &c), CODA_OK);
  CHECK(c.family == CODA_FAMILY_QWEN3 && c.head_dim == 128 && c.dim == 1024 && c.heads == 16 &&
        c.kv_heads == 8 && c.tied == 1 && c.rope_theta == 1e6 && c.norm_eps == 1e-6 &&
        c.layers == 28 && c.seq == 40960);
  const int64_t all = coda_model_config_params(&c), emb = 151936LL * 1024;
  CHECK_MSG(llabs(all - emb - 440000000LL) < 5000000LL && llabs(all - 600000000LL) < 5000000LL,
            "Qwen3-0.6B: %lld parameters, %lld without the embedding", (long long)all,
            (long long)(all - emb));
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_hf_qwen3");
  round_trip(ctx, 1, 10); /* tied, 4 heads x 10 != dim 24 */
  round_trip(ctx, 0, 0);  /* untied, head_dim = dim / heads */
  round_trip(ctx, 0, 8);
  refusals(ctx);
  llama_weights(ctx);
  released_config(ctx);
  return family_test_end(ctx);
}
