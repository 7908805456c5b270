/* Hugging Face Llama layout: export then import gives the same weights
 * bit for bit; the exported q/k rows follow the half-split RoPE order and
 * gate/up are separated; bad configs are refused. */
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

static void round_trip(coda_context ctx, const char *dir, int tied) {
  coda_model_config c = {300, 48, 2, 6, 2, 40, 32, tied, 500000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *m, *back = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  coda_model_init(m, 42 + tied);
  float *w = coda_model_weights(m);
  uint64_t r = 9;
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(coda_rng_uniform(&r) - 0.5);
  CHECK(coda_hf_export(ctx, m, dir) == CODA_OK);
  CHECK(coda_hf_import(ctx, dir, CODA_ENGINE_REFERENCE, &back) == CODA_OK);
  if (!back) return;
  const coda_model_config *b = coda_model_cfg(back);
  CHECK(b->dim == 48 && b->layers == 2 && b->heads == 6 && b->kv_heads == 2 && b->ffn == 40 &&
        b->vocab == 300 && b->seq == 32 && b->tied == tied && b->rope_theta == 500000.0 &&
        b->norm_eps == 1e-6);
  CHECK(coda_model_size(back) == coda_model_size(m));
  CHECK(!memcmp(coda_model_weights(back), w, coda_model_size(m) * sizeof(float)));
  /* the file itself, checked row by row */
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  coda_st_file f;
  CHECK(coda_st_load(ctx, p, 0, &f) == CODA_OK);
  const int hd = 8, half = 4;
  const float *qkv = w + coda_model_find(m, "layers.1.attention.wqkv.weight")->offset;
  const float *w13 = w + coda_model_find(m, "layers.1.feed_forward.w13.weight")->offset;
  const coda_st_tensor *q = coda_st_find(&f, "model.layers.1.self_attn.q_proj.weight");
  const coda_st_tensor *k = coda_st_find(&f, "model.layers.1.self_attn.k_proj.weight");
  const coda_st_tensor *v = coda_st_find(&f, "model.layers.1.self_attn.v_proj.weight");
  const coda_st_tensor *g = coda_st_find(&f, "model.layers.1.mlp.gate_proj.weight");
  const coda_st_tensor *u = coda_st_find(&f, "model.layers.1.mlp.up_proj.weight");
  CHECK(q && k && v && g && u);
  CHECK((coda_st_find(&f, "lm_head.weight") == NULL) == tied);
  if (q && k && v && g && u) {
    CHECK(q->shape[0] == 48 && k->shape[0] == 16 && v->shape[0] == 16 && g->shape[0] == 40);
    int ok = 1;
    const float *Q = (const float *)q->data, *K = (const float *)k->data, *V = (const float *)v->data;
    for (int h = 0; h < 6; h++)
      for (int j = 0; j < half; j++) {
        ok &= !memcmp(Q + (h * hd + j) * 48, qkv + (h * hd + 2 * j) * 48, 48 * 4);
        ok &= !memcmp(Q + (h * hd + half + j) * 48, qkv + (h * hd + 2 * j + 1) * 48, 48 * 4);
      }
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < half; j++) {
        ok &= !memcmp(K + (h * hd + j) * 48, qkv + (48 + h * hd + 2 * j) * 48, 48 * 4);
        ok &= !memcmp(K + (h * hd + half + j) * 48, qkv + (48 + h * hd + 2 * j + 1) * 48, 48 * 4);
      }
    ok &= !memcmp(V, qkv + 64 * 48, 16 * 48 * 4); /* V rows unchanged */
    /* the same permutation as the block plans' documented map */
    coda_llama_config lc = coda_llama_default_config();
    lc.dim = 48; lc.n_heads = 6; lc.n_kv_heads = 2; lc.head_dim = 8;
    for (int64_t hr = 0; hr < 80; hr++) {
      const float *src = hr < 48 ? Q + hr * 48 : hr < 64 ? K + (hr - 48) * 48 : V + (hr - 64) * 48;
      int64_t dst = coda_llama_qkv_row(&lc, hr);
      ok &= dst >= 0 && dst < 80 && !memcmp(src, qkv + dst * 48, 48 * 4);
    }
    for (int fr = 0; fr < 40; fr++) {
      ok &= !memcmp((const float *)g->data + fr * 48, w13 + (2 * fr) * 48, 48 * 4);
      ok &= !memcmp((const float *)u->data + fr * 48, w13 + (2 * fr + 1) * 48, 48 * 4);
    }
    CHECK(ok);
  }
  coda_st_free(&f);
  coda_model_destroy(back);
  coda_model_destroy(m);
}

static void bad_configs(coda_context ctx, const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/config.json", dir);
  const char *bad[] = {
      "{\"intermediate_size\": 40, \"num_hidden_layers\": 2}",
      "{\"hidden_size\": 48.5, \"intermediate_size\": 40, \"num_hidden_layers\": 2, "
      "\"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"vocab_size\": 300}",
      "{\"hidden_size\": 48, \"intermediate_size\": 40, \"num_hidden_layers\": 2, "
      "\"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"vocab_size\": 300, "
      "\"rope_scaling\": {\"factor\": 8.0}}",
      "{\"hidden_size\": 48, \"intermediate_size\": 40, \"num_hidden_layers\": 3, "
      "\"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"vocab_size\": 300}",
  };
  coda_status want[] = {CODA_ERR_IO, CODA_ERR_IO, CODA_ERR_IO, CODA_ERR_IO}; /* no rope_type */
  for (int i = 0; i < 4; i++) {
    FILE *f = fopen(p, "w");
    fputs(bad[i], f);
    fclose(f);
    coda_model *m = NULL;
    coda_status s = coda_hf_import(ctx, dir, CODA_ENGINE_REFERENCE, &m);
    CHECK_MSG(s == want[i], "case %d: %d (%s)", i, (int)s, coda_last_error(ctx));
    CHECK(m == NULL);
    coda_model_destroy(m);
  }
}

int main(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "test_train_hf.tmp.%d", (int)getpid());
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  round_trip(ctx, dir, 0);
  round_trip(ctx, dir, 1);
  bad_configs(ctx, dir); /* the last file left (2 layers of model.safetensors, 3 asked) */
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
