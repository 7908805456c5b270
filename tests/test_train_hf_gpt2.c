/* The Hugging Face GPT-2 layout (GPT2LMHeadModel): export then import gives
 * the same weights bit for bit and the same files again; the exported
 * Conv1D weights are the transposes of coda's, biases and the learned
 * positions are there and no lm_head is written (tied); the released
 * checkpoints' names without "transformer." and their causal-mask buffers
 * are read; what coda does not run of GPT2Config is refused by name
 * (another activation, attention scaling, cross-attention, RoPE keys, an
 * untied head, a second context length), as is a tensor the model does not
 * take; and the released GPT-2 (124M) config reads as its known parameter
 * count. */
#define _POSIX_C_SOURCE 200809L
#include "family_test_util.h"

enum { V = 70, D = 24, L = 2, H = 4, F = 56, S = 32 };

static const coda_model_config gpt2_config = {
    V, D, L, H, H, F, S, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0},
    CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};

static void round_trip(coda_context ctx) {
  coda_model *m = hf_random_model(ctx, &gpt2_config, 40);
  if (!m) return;
  coda_model *back = hf_export_import(ctx, m);
  if (!back) { coda_model_destroy(m); return; }
  const coda_model_config *b = coda_model_cfg(back);
  CHECK(b->family == CODA_FAMILY_GPT2 && b->tied && b->heads == H && b->kv_heads == H &&
        b->ffn == F && b->seq == S && b->norm_eps == 1e-5 && b->vocab == V && b->layers == L);
  CHECK(same_weights(m, back));
  /* export of the import: the same bytes again */
  char *cfg1 = hf_export_again(ctx, back);
  CHECK(cfg1 && strstr(cfg1, "\"GPT2LMHeadModel\"") && strstr(cfg1, "\"model_type\": \"gpt2\"") &&
        strstr(cfg1, "\"n_inner\": 56") && strstr(cfg1, "\"activation_function\": \"gelu_new\""));
  free(cfg1);
  /* in the file: Conv1D weights [in, out] (the transpose of ours), biases,
   * positions; no lm_head */
  const char *p = in_test_dir("model.safetensors");
  coda_st_file f;
  CHECK(coda_st_load(ctx, p, 0, &f) == CODA_OK);
  const float *w = coda_model_weights(m);
  const struct { const char *hf, *ours; int64_t rows, cols; } conv[] = {
      {"transformer.h.1.attn.c_attn.weight", "layers.1.attention.wqkv.weight", 3 * D, D},
      {"transformer.h.0.attn.c_proj.weight", "layers.0.attention.wo.weight", D, D},
      {"transformer.h.1.mlp.c_fc.weight", "layers.1.feed_forward.wfc.weight", F, D},
      {"transformer.h.0.mlp.c_proj.weight", "layers.0.feed_forward.wproj.weight", D, F}};
  for (int i = 0; i < 4; i++) {
    const coda_st_tensor *t = coda_st_find(&f, conv[i].hf);
    const coda_param *pp = coda_model_find(m, conv[i].ours);
    CHECK(t && pp && t->ndim == 2 && t->shape[0] == conv[i].cols && t->shape[1] == conv[i].rows);
    if (!t || !pp) continue;
    const float *v = (const float *)t->data, *o = w + pp->offset;
    int ok = 1;
    for (int64_t r = 0; r < conv[i].rows; r++)
      for (int64_t c = 0; c < conv[i].cols; c++)
        ok &= v[c * conv[i].rows + r] == o[r * conv[i].cols + c];
    CHECK_MSG(ok, "%s is not the transpose of %s", conv[i].hf, conv[i].ours);
  }
  const coda_st_tensor *bq = coda_st_find(&f, "transformer.h.0.attn.c_attn.bias");
  const coda_st_tensor *pe = coda_st_find(&f, "transformer.wpe.weight");
  CHECK(bq && bq->ndim == 1 && bq->shape[0] == 3 * D);
  CHECK(pe && pe->shape[0] == S && pe->shape[1] == D);
  CHECK(coda_st_find(&f, "transformer.ln_f.bias") && !coda_st_find(&f, "lm_head.weight"));
  CHECK(f.n == 2 + 12 * L + 2);
  /* the released checkpoints' layout: names without "transformer.", the
   * causal-mask buffer attn.bias of each layer, lm_head as a copy of wte */
  coda_st_entry *e = calloc((size_t)f.n + L + 1, sizeof *e);
  char (*names)[128] = calloc((size_t)f.n + L + 1, sizeof *names);
  float *mask = calloc((size_t)S * S, sizeof *mask);
  int k = 0;
  for (int i = 0; i < f.n; i++, k++) {
    snprintf(names[k], 128, "%s", f.t[i].name + strlen("transformer."));
    e[k].name = names[k];
    e[k].dtype = "F32";
    e[k].ndim = f.t[i].ndim;
    memcpy(e[k].shape, f.t[i].shape, sizeof e[k].shape);
    e[k].data = f.t[i].data;
    if (!strcmp(f.t[i].name, "transformer.wte.weight")) {
      e[f.n + L] = e[k];
      e[f.n + L].name = "lm_head.weight";
    }
  }
  for (int li = 0; li < L; li++, k++) {
    snprintf(names[k], 128, "h.%d.attn.bias", li);
    e[k] = (coda_st_entry){names[k], "F32", 4, {1, 1, S, S}, mask};
  }
  const char *meta[] = {"format", "pt"};
  CHECK(coda_st_save(ctx, p, e, k + 1, meta, 1) == CODA_OK);
  coda_model *bare = NULL;
  CHECK_STATUS(ctx, coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &bare), CODA_OK);
  CHECK(bare && same_weights(m, bare));
  coda_model_destroy(bare);
  /* a tensor the model does not take is refused by name */
  snprintf(names[k], 128, "h.0.mlp.c_gate.weight");
  e[k] = e[0];
  e[k].name = names[k];
  CHECK(coda_st_save(ctx, p, e, k + 1, meta, 1) == CODA_OK);
  bare = NULL;
  CHECK(coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &bare) == CODA_ERR_NOT_SUPPORTED &&
        !bare);
  CHECK(strstr(coda_last_error(ctx), "'h.0.mlp.c_gate.weight' is not part of the model"));
  free(e); free(names); free(mask);
  coda_st_free(&f);
  coda_model_destroy(back);
  coda_model_destroy(m);
}

#define SHAPES                                                                           \
  "\"n_embd\": 24, \"n_inner\": 56, \"n_layer\": 2, \"n_head\": 4, \"vocab_size\": 70, " \
  "\"n_positions\": 32"
#define G(extra) "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", " \
  SHAPES extra "}"

static void refusals(coda_context ctx) {
  hf_export_random(ctx, &gpt2_config, 9);
  config_case(ctx, G(""), CODA_OK, "");
  /* what GPT2Config files carry that coda reads or may ignore */
  config_case(ctx, G(", \"n_ctx\": 32, \"attn_pdrop\": 0.1, \"embd_pdrop\": 0.1, \"resid_pdrop\": "
                     "0.1, \"layer_norm_epsilon\": 1e-05, \"activation_function\": "
                     "\"gelu_pytorch_tanh\", \"reorder_and_upcast_attn\": true, "
                     "\"summary_type\": \"cls_index\", \"tie_word_embeddings\": true"),
              CODA_OK, "");
  config_case(ctx, G(", \"activation_function\": \"gelu\""), CODA_ERR_NOT_SUPPORTED,
              "activation_function \"gelu\" is not supported (the tanh GELU");
  config_case(ctx, G(", \"activation_function\": \"relu\""), CODA_ERR_NOT_SUPPORTED,
              "activation_function \"relu\"");
  config_case(ctx, G(", \"scale_attn_by_inverse_layer_idx\": true"), CODA_ERR_NOT_SUPPORTED,
              "scale_attn_by_inverse_layer_idx is true");
  config_case(ctx, G(", \"scale_attn_weights\": false"), CODA_ERR_NOT_SUPPORTED,
              "scale_attn_weights is false");
  config_case(ctx, G(", \"add_cross_attention\": true"), CODA_ERR_NOT_SUPPORTED,
              "add_cross_attention is true");
  config_case(ctx, G(", \"rope_theta\": 10000"), CODA_ERR_NOT_SUPPORTED,
              "\"rope_theta\" is set: model_type gpt2 has no RoPE");
  config_case(ctx, G(", \"n_ctx\": 64"), CODA_ERR_NOT_SUPPORTED, "n_ctx 64 differs from n_positions 32");
  config_case(ctx, G(", \"tie_word_embeddings\": false"), CODA_ERR_NOT_SUPPORTED, "gpt2");
  config_case(ctx, G(", \"quantization_config\": {}"), CODA_ERR_NOT_SUPPORTED, "quantized");
  config_case(ctx, "{\"model_type\": \"gpt2\", \"n_embd\": 24, \"n_layer\": 2, \"n_head\": 4, "
              "\"vocab_size\": 70, \"n_positions\": 32}", CODA_ERR_IO,
              "tensor 'transformer.h.0.mlp.c_fc.weight' has the wrong shape"); /* n_inner 4 x 24 */
  config_case(ctx, "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"llama\", " SHAPES
              "}", CODA_ERR_NOT_SUPPORTED, "name different families");
  config_case(ctx, "{\"architectures\": [\"GPT2LMHeadModel\"], " SHAPES "}", CODA_OK, "");
  /* Llama's keys over GPT-2's weights: the biases are refused by name */
  config_case(ctx, "{\"model_type\": \"llama\", \"hidden_size\": 24, \"intermediate_size\": 28, "
              "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 70, "
              "\"max_position_embeddings\": 32, \"tie_word_embeddings\": true}",
              CODA_ERR_NOT_SUPPORTED, "bias tensor");
}

/* The released GPT-2 (124M) config.json: its shapes and 124,439,808
 * parameters (the head tied to wte). */
static void released_config(coda_context ctx) {
  write_text("config.json",
             "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], "
             "\"attn_pdrop\": 0.1, \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, "
             "\"eos_token_id\": 50256, \"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, "
             "\"model_type\": \"gpt2\", \"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12, "
             "\"n_layer\": 12, \"n_positions\": 1024, \"resid_pdrop\": 0.1, "
             "\"summary_activation\": null, \"summary_first_dropout\": 0.1, "
             "\"summary_proj_to_labels\": true, \"summary_type\": \"cls_index\", "
             "\"summary_use_proj\": true, \"task_specific_params\": {\"text-generation\": "
             "{\"do_sample\": true, \"max_length\": 50}}, \"vocab_size\": 50257}");
  coda_model_config c;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &c), CODA_OK);
  CHECK(c.family == CODA_FAMILY_GPT2 && c.dim == 768 && c.heads == 12 && c.kv_heads == 12 &&
        c.ffn == 3072 && c.layers == 12 && c.seq == 1024 && c.vocab == 50257 && c.tied &&
        c.norm_eps == 1e-5);
  CHECK_EQ_INT(coda_model_config_params(&c), 124439808LL);
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_hf_gpt2");
  round_trip(ctx);
  refusals(ctx);
  released_config(ctx);
  return family_test_end(ctx);
}
