/* The Hugging Face Gemma 3 text layout (Gemma3ForCausalLM, model_type
 * gemma3_text): export then import gives the same weights and config bit
 * for bit and the same files again; the file holds the four norms of each
 * layer under their HF names and no lm_head (tied); q/k norm weights and
 * q/k rows in HF's half-split RoPE order; the layer pattern is written as
 * layer_types and sliding_window_pattern and read from either; what coda
 * does not run of Gemma3TextConfig is refused by name (RoPE scaling,
 * attention soft-capping, another activation, a non-periodic layer list,
 * the multimodal gemma3 model type), as is a tensor the model does not
 * take; and the released Gemma 3 1B config reads as its known parameter
 * count. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

enum { V = 50, D = 16, L = 3, H = 4, HK = 2, HD = 6, F = 20, S = 32 };

static void write_text(const char *name, const char *text) { CHECK(write_text_in(dir, name, text) == 0); }

static char *read_text(const char *name) { return read_text_in(dir, name); }

static coda_model_config gemma_config(void) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = V; c.dim = D; c.layers = L; c.heads = H; c.kv_heads = HK; c.ffn = F; c.seq = S;
  c.tied = 1; c.rope_theta = 1e6; c.norm_eps = 1e-6; c.family = CODA_FAMILY_GEMMA3;
  c.head_dim = HD; c.sliding_window = 5; c.sliding_pattern = 3; c.rope_local_theta = 1e4;
  c.attn_scalar = 12.0; c.logit_softcap = 30.0;
  return c;
}

static coda_model *random_model(coda_context ctx, const coda_model_config *c, uint64_t seed) {
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (!m) return NULL;
  coda_model_init(m, seed);
  float *w = coda_model_weights(m);
  uint64_t r = seed + 1;
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(coda_rng_uniform(&r) - 0.5);
  return m;
}

static int same_weights(coda_model *a, coda_model *b) {
  return coda_model_size(a) == coda_model_size(b) &&
         !memcmp(coda_model_weights(a), coda_model_weights(b), coda_model_size(a) * sizeof(float));
}

static void round_trip(coda_context ctx, int tied) {
  coda_model_config c = gemma_config();
  c.tied = tied;
  coda_model *m = random_model(ctx, &c, 40), *back = NULL;
  if (!m) return;
  CHECK(coda_hf_export(ctx, m, dir) == CODA_OK);
  CHECK_STATUS(ctx, coda_hf_import(ctx, dir, CODA_ENGINE_REFERENCE, &back), CODA_OK);
  if (!back) { coda_model_destroy(m); return; }
  const coda_model_config *b = coda_model_cfg(back);
  CHECK(b->family == CODA_FAMILY_GEMMA3 && b->tied == tied && b->heads == H && b->kv_heads == HK &&
        b->head_dim == HD && b->ffn == F && b->seq == S && b->norm_eps == 1e-6 && b->vocab == V &&
        b->layers == L && b->rope_theta == 1e6 && b->rope_local_theta == 1e4 &&
        b->attn_scalar == 12.0 && b->logit_softcap == 30.0 && b->sliding_window == 5 &&
        b->sliding_pattern == 3);
  CHECK(same_weights(m, back));
  /* export of the import: the same bytes again */
  char *cfg1 = read_text("config.json");
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  unsigned char *f1 = NULL, *f2 = NULL;
  size_t n1 = 0, n2 = 0;
  CHECK(coda_read_file_max(ctx, p, 1u << 26, &f1, &n1) == CODA_OK);
  CHECK(coda_hf_export(ctx, back, dir) == CODA_OK);
  CHECK(coda_read_file_max(ctx, p, 1u << 26, &f2, &n2) == CODA_OK);
  char *cfg2 = read_text("config.json");
  CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
  CHECK(cfg1 && cfg2 && !strcmp(cfg1, cfg2));
  CHECK(cfg1 && strstr(cfg1, "\"Gemma3ForCausalLM\"") &&
        strstr(cfg1, "\"model_type\": \"gemma3_text\"") &&
        strstr(cfg1, "\"hidden_activation\": \"gelu_pytorch_tanh\"") &&
        strstr(cfg1, "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
                     "\"full_attention\"]") &&
        strstr(cfg1, "\"sliding_window_pattern\": 3") && strstr(cfg1, "\"sliding_window\": 5") &&
        strstr(cfg1, "\"final_logit_softcapping\": 30"));
  free(cfg1); free(cfg2); free(f1); free(f2);
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
  CHECK(coda_hf_import(ctx, dir, CODA_ENGINE_REFERENCE, &bare) == CODA_ERR_NOT_SUPPORTED && !bare);
  CHECK(strstr(coda_last_error(ctx), "'model.layers.0.self_attn.sinks' is not part of the model"));
  free(e);
  coda_st_free(&f);
  coda_model_destroy(back);
  coda_model_destroy(m);
}

static void config_case(coda_context ctx, const char *json, coda_status want, const char *msg) {
  write_text("config.json", json);
  coda_model *m = NULL;
  coda_status s = coda_hf_import(ctx, dir, CODA_ENGINE_REFERENCE, &m);
  CHECK_MSG(s == want && (want == CODA_OK || strstr(coda_last_error(ctx), msg)),
            "%s: status %s, message '%s' (wanted %s with '%s')", json, coda_status_string(s),
            s ? coda_last_error(ctx) : "", coda_status_string(want), msg);
  CHECK(want == CODA_OK ? m != NULL : m == NULL);
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
  CHECK_STATUS(ctx, coda_hf_config(ctx, dir, &c), CODA_OK);
  CHECK_MSG(c.sliding_window == window && c.sliding_pattern == pat,
            "%s: window %d pattern %d (wanted %d %d)", json, c.sliding_window, c.sliding_pattern,
            window, pat);
}

static void refusals(coda_context ctx) {
  coda_model_config c = gemma_config();
  coda_model *m = random_model(ctx, &c, 9);
  CHECK(coda_hf_export(ctx, m, dir) == CODA_OK);
  coda_model_destroy(m);
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
  CHECK_STATUS(ctx, coda_hf_config(ctx, dir, &rc), CODA_OK);
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
  CHECK_STATUS(ctx, coda_hf_config(ctx, dir, &c), CODA_OK);
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
  snprintf(dir, sizeof dir, "test_train_hf_gemma3.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  round_trip(ctx, 1);
  round_trip(ctx, 0);
  refusals(ctx);
  released_config(ctx);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
