/* Mistral's sliding window on the llama family: every layer's query t sees
 * the keys j with t − sliding_window < j <= t (transformers' MistralModel:
 * the causal mask with sliding_window_overlay, kv > q − window). The
 * reference engine's loss, logits and every gradient against an
 * independent fp64 Llama written out here with that mask (gradients by
 * central differences in double); the window's edge (one wider or
 * narrower is another loss; one covering the sequence is no window, bit
 * for bit); every layer windowed, the RoPE base the global one; config
 * refusals naming what is allowed (a pattern, Gemma 3's other fields, a
 * window in qwen3 and gpt2); a checkpoint round trip; the Hugging Face
 * export (MistralForCausalLM with its sliding_window) read back, and the
 * import of Mistral and Llama configs with and without a window. */
#define _POSIX_C_SOURCE 200809L
#include "ref64_test_util.h"

/* 2 layers, 4 query heads over 2 kv heads of 4 (dim 16); window 3 over T 9 */
enum { V = 23, D = 16, L = 2, H = 4, HK = 2, HD = 4, F = 20, S = 16, B = 2, T = 9, W = 3 };

static coda_model_config mistral_config(void) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = V; c.dim = D; c.layers = L; c.heads = H; c.kv_heads = HK; c.ffn = F; c.seq = S;
  c.tied = 0; c.rope_theta = 1e4; c.norm_eps = 1e-5; c.family = CODA_FAMILY_LLAMA;
  c.sliding_window = W;
  return c;
}

/* ------------------------------------------------ the fp64 model */

/* The mean loss over valid targets with window win on every layer; last
 * (V) gets sequence 0's last position's logits when non-NULL. */
static double forward64(const ref64 *r, const int32_t *in, const int32_t *tg, int win,
                        double *last) {
  const coda_model_config *c = r->c;
  enum { M = B * T, NQ = (H + 2 * HK) * HD };
  static double x[M * D], h[M * D], qkv[M * NQ], o[M * H * HD], z[M * 2 * F], y[M * F];
  ref64_embed(r, in, M, 1.0, x);
  for (int li = 0; li < L; li++) {
    ref64_rmsnorm(x, ref64_param(r, "layers.%d.attention_norm.weight", li), 0, h, M, D,
                  c->norm_eps);
    ref64_linear(h, ref64_param(r, "layers.%d.attention.wqkv.weight", li), qkv, M, NQ, D, 0);
    for (int i = 0; i < M; i++)
      for (int hh = 0; hh < H + HK; hh++) ref64_rope(qkv + i * NQ + hh * HD, HD, i % T, c->rope_theta);
    ref64_attention(r, qkv, o, B, T, win, HD);
    ref64_linear(o, ref64_param(r, "layers.%d.attention.wo.weight", li), x, M, D, H * HD, 1);
    ref64_rmsnorm(x, ref64_param(r, "layers.%d.ffn_norm.weight", li), 0, h, M, D, c->norm_eps);
    ref64_linear(h, ref64_param(r, "layers.%d.feed_forward.w13.weight", li), z, M, 2 * F, D, 0);
    for (int i = 0; i < M * F; i++) y[i] = z[2 * i] / (1.0 + exp(-z[2 * i])) * z[2 * i + 1];
    ref64_linear(y, ref64_param(r, "layers.%d.feed_forward.w2.weight", li), x, M, D, F, 1);
  }
  return ref64_loss(r, x, M, T, 0, ref64_param(r, "output.weight", 0), 0, tg, last);
}

/* The engine (fp32) against the fp64 model (ref64_against_engine), the
 * window's edge (one wider or narrower, or none, is another loss); the
 * engine's gradients against its own loss. */
static void against_fp64(coda_context ctx) {
  coda_model_config c = mistral_config();
  int32_t in[B * T], tg[B * T];
  coda_model *m = family_step_model(ctx, &c, 0.3, in, tg, B * T);
  if (!m) return;
  const int other[] = {W + 1, W - 1, 0};
  ref64_against_engine("mistral", ctx, m, &c, in, tg, B, T, forward64, W, other, 3);
  family_finite_differences("mistral", ctx, m, in, tg, B, T, 5e-4);
  coda_model_destroy(m);
}

/* A window covering the sequence masks nothing: the loss and the gradients
 * of window T and of no window are the same bits. */
static void covering_window(coda_context ctx) {
  coda_model_config c = mistral_config();
  int32_t in[B * T], tg[B * T];
  double l[2];
  float *gr[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    c.sliding_window = k ? 0 : T;
    coda_model *m = family_step_model(ctx, &c, 0.3, in, tg, B * T);
    if (!m) return;
    int64_t nv;
    coda_model_zero_grad(m);
    CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &l[k], &nv) == CODA_OK);
    gr[k] = malloc(coda_model_size(m) * 4);
    memcpy(gr[k], coda_model_grads(m), coda_model_size(m) * 4);
    if (k) CHECK(!memcmp(gr[0], gr[1], coda_model_size(m) * 4));
    coda_model_destroy(m);
  }
  CHECK_MSG(l[0] == l[1], "window %d: loss %.9g, no window %.9g", T, l[0], l[1]);
  free(gr[0]);
  free(gr[1]);
}

static void config(coda_context ctx) {
  coda_model_config c = mistral_config();
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  for (int li = 0; li < L; li++) /* every layer windowed, at the global base */
    CHECK(coda_model_layer_is_local(&c, li) && coda_model_layer_window(&c, li) == W &&
          coda_model_layer_rope_theta(&c, li) == 1e4);
  c.sliding_window = 4096; /* longer than seq: taken (no effect) */
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c.sliding_window = 0;
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK && coda_model_layer_window(&c, 0) == 0 &&
        !coda_model_layer_is_local(&c, 1));
  c = mistral_config();
  c.sliding_pattern = 2;
  CONFIG_REFUSED(ctx, c, "sliding_pattern 2", "llama family windows every layer alike");
  c = mistral_config();
  c.sliding_window = -1;
  CONFIG_REFUSED(ctx, c, "sliding_window -1", ">= 0");
  c = mistral_config();
  c.rope_local_theta = 1e4;
  CONFIG_REFUSED(ctx, c, "rope_local_theta 10000", "llama family has none of these");
  c = mistral_config();
  c.logit_softcap = 30.0;
  CONFIG_REFUSED(ctx, c, "logit_softcap 30", "gemma3 takes them");
  /* qwen3 and gpt2 have no window */
  c = mistral_config();
  c.family = CODA_FAMILY_QWEN3;
  CONFIG_REFUSED(ctx, c, "the qwen3 family has none of these", "llama takes sliding_window");
  c = mistral_config();
  c.family = CODA_FAMILY_GPT2;
  c.kv_heads = c.heads;
  c.tied = 1;
  CONFIG_REFUSED(ctx, c, "the gpt2 family has none of these", "sliding_window 3");
}

static void checkpoint(coda_context ctx) {
  coda_model_config c = mistral_config(), c2;
  coda_model *b = family_checkpoint_round_trip(ctx, &c, &c2);
  if (!b) return;
  CHECK(c2.family == CODA_FAMILY_LLAMA && c2.sliding_window == W && c2.sliding_pattern == 0);
  coda_model_destroy(b);
  /* without a window the checkpoint holds no window key (as before) */
  c.sliding_window = 0;
  b = family_checkpoint_round_trip(ctx, &c, &c2);
  if (!b) return;
  CHECK(c2.sliding_window == 0);
  coda_model_destroy(b);
}

/* The export is Mistral's (LlamaForCausalLM has no window), read back with
 * its window, and stable; a model without a window stays Llama's. */
static void hf_round_trip(coda_context ctx) {
  coda_model_config c = mistral_config();
  coda_model *m = hf_random_model(ctx, &c, 41);
  if (!m) return;
  coda_model *back = hf_export_import(ctx, m);
  if (back) {
    const coda_model_config *b = coda_model_cfg(back);
    CHECK(b->family == CODA_FAMILY_LLAMA && b->sliding_window == W && b->sliding_pattern == 0);
    CHECK(same_weights(m, back));
    char *cfg1 = hf_export_again(ctx, back);
    CHECK(cfg1 && strstr(cfg1, "\"architectures\": [\"MistralForCausalLM\"]") &&
          strstr(cfg1, "\"model_type\": \"mistral\"") && strstr(cfg1, "\"sliding_window\": 3,") &&
          !strstr(cfg1, "mlp_bias"));
    free(cfg1);
    coda_model_destroy(back);
  }
  coda_model_destroy(m);
  c.sliding_window = 0;
  hf_export_random(ctx, &c, 42);
  char *cfg = read_text("config.json");
  CHECK(cfg && strstr(cfg, "\"LlamaForCausalLM\"") && !strstr(cfg, "sliding_window"));
  free(cfg);
}

/* config.json cases over the weights of a model of mistral_config()'s
 * shapes (max_position_embeddings 16). */
#define MBASE                                                                                  \
  "\"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 2, "                \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 23, "               \
  "\"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0"
#define MISTRAL "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", " MBASE
#define LLAMA "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", " MBASE

static void window_of(coda_context ctx, const char *json, int want) {
  write_text("config.json", json);
  coda_model_config c;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &c), CODA_OK);
  CHECK_MSG(c.sliding_window == want && c.sliding_pattern == 0, "%s: window %d (wanted %d)", json,
            c.sliding_window, want);
}

static void hf_import(coda_context ctx) {
  coda_model_config c = mistral_config();
  hf_export_random(ctx, &c, 43);
  window_of(ctx, MISTRAL ", \"sliding_window\": 3}", 3);
  window_of(ctx, MISTRAL ", \"sliding_window\": 4096}", 4096); /* kept: no effect */
  window_of(ctx, MISTRAL ", \"sliding_window\": null}", 0);
  window_of(ctx, MISTRAL "}", 4096);                          /* MistralConfig's default */
  window_of(ctx, MISTRAL ", \"use_sliding_window\": true, \"sliding_window\": 5}", 5);
  /* no model_type: the architecture says Mistral */
  window_of(ctx, "{\"architectures\": [\"MistralForCausalLM\"], " MBASE ", \"sliding_window\": 6}",
            6);
  window_of(ctx, LLAMA ", \"sliding_window\": 4096}", 0); /* Llama ignores it: no effect */
  window_of(ctx, LLAMA ", \"use_sliding_window\": false, \"sliding_window\": 3}", 0);
  config_case(ctx, MISTRAL ", \"sliding_window\": 3}", CODA_OK, "");
  config_case(ctx, LLAMA ", \"sliding_window\": 3}", CODA_ERR_NOT_SUPPORTED,
              "LlamaForCausalLM ignores the key");
  config_case(ctx, MISTRAL ", \"use_sliding_window\": false, \"sliding_window\": 3}",
              CODA_ERR_NOT_SUPPORTED, "does not read use_sliding_window");
  config_case(ctx, MISTRAL ", \"sliding_window\": 0}", CODA_ERR_NOT_SUPPORTED,
              "sliding_window 0 is not a window");
  config_case(ctx, MISTRAL ", \"sliding_window\": 2.5}", CODA_ERR_NOT_SUPPORTED,
              "sliding_window 2.5 is not a window");
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_model_mistral");
  against_fp64(ctx);
  covering_window(ctx);
  config(ctx);
  checkpoint(ctx);
  hf_round_trip(ctx);
  hf_import(ctx);
  return family_test_end(ctx);
}
