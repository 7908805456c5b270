/* libFuzzer harness for the Hugging Face config.json reader
 * (src/store/hf_config.c, through coda_hf_config and coda_hf_import, the
 * paths of `coda import-hf`, `coda eval` and `coda generate` on an HF
 * folder).
 * Each input becomes the config.json of a private directory, read three
 * ways: coda_hf_config alone; coda_hf_import beside a model.safetensors of
 * a tiny Llama (vocab 32, dim 8, 1 layer, heads 2/1, ffn 16, written by
 * coda_hf_export at start-up, the config of fuzz/corpus/hf_config/
 * 01_tiny_llama.json; a Qwen3 config over it fails on the tensors); and
 * coda_hf_import with no weights at all.
 *
 * An accepted config must hold the invariants of fuzz_config_util.h and
 * carry the numbers of the file's own keys (hidden_size, ...: checked
 * against the JSON parsed here); an import that succeeds gives a model of
 * exactly that config, but untied, with a warning naming lm_head.weight,
 * where the config ties the head and the template's lm_head.weight
 * differs from its embedding (as transformers keeps both); an import
 * without weights must fail naming
 * model.safetensors; a config refused alone is refused by both imports.
 * Every refusal has a message naming the file's directory; no descriptor
 * stays open. Any violation aborts (leaks: LeakSanitizer).
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=hf_config) */
#include "fuzz_config_util.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <sys/stat.h>

static coda_context ctx;
static char tmpl_dir[4096], tmpl[4200]; /* model.safetensors of the tiny Llama */
static int head_differs; /* its lm_head.weight is not a copy of its embedding */

static void remove_template(void) {
  char p[4200];
  snprintf(p, sizeof p, "%s/config.json", tmpl_dir);
  unlink(p);
  unlink(tmpl);
  rmdir(tmpl_dir);
}

static void init(void) {
  fuzz_name = "fuzz_hf_config";
  if (coda_context_create(NULL, &ctx) != CODA_OK) fail("no context");
  const char *t = getenv("TMPDIR");
  char *dir = tmpl_dir;
  snprintf(dir, sizeof tmpl_dir, "%s/fuzz-hf-tmpl-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(dir)) fail("mkdtemp");
  atexit(remove_template);
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = 32; c.dim = 8; c.layers = 1; c.heads = 2; c.kv_heads = 1; c.ffn = 16; c.seq = 16;
  c.rope_theta = 10000.0; c.norm_eps = 1e-5;
  coda_model *m;
  if (coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) != CODA_OK) fail("tiny model");
  float *w = coda_model_weights(m);
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] = (float)(i % 7) * 0.125f - 0.375f;
  if (coda_hf_export(ctx, m, dir) != CODA_OK) fail(coda_last_error(ctx));
  coda_model_destroy(m);
  snprintf(tmpl, sizeof tmpl, "%s/model.safetensors", dir);
  coda_st_file f;
  if (coda_st_load(ctx, tmpl, 0, &f) != CODA_OK) fail(coda_last_error(ctx));
  const coda_st_tensor *e = coda_st_find(&f, "model.embed_tokens.weight"),
                       *h = coda_st_find(&f, "lm_head.weight");
  if (!e || !h || strcmp(e->dtype, h->dtype)) fail("the template's tensors");
  const size_t width = !strcmp(e->dtype, "F32") ? 4 : 2;
  head_differs = memcmp(e->data, h->data, width * (size_t)(c.vocab * c.dim)) != 0;
  coda_st_free(&f);
}

/* The number under `key` at the top level of the JSON, or `dflt`. */
static double top_num(const coda_json *r, const char *key, double dflt) {
  const coda_json *v = coda_json_get(r, key);
  return v && v->kind == CODA_JSON_NUMBER ? v->u.num : dflt;
}

/* The accepted config carries the file's numbers (independent of the
 * reader: the JSON parsed again here). */
static void check_keys(const uint8_t *data, size_t size, const coda_model_config *c) {
  char err[128];
  coda_json_doc *d = coda_json_parse((const char *)data, size, err, sizeof err);
  if (!d) fail("accepted a config.json that is not JSON");
  const coda_json *r = coda_json_root(d);
  if (c->family == CODA_FAMILY_GPT2) { /* GPT2Config's own keys and defaults */
    const double dim = top_num(r, "n_embd", -1);
    const coda_json *tie = coda_json_get(r, "tie_word_embeddings");
    if (dim != c->dim || top_num(r, "n_inner", 4 * dim) != c->ffn ||
        top_num(r, "n_layer", -1) != c->layers || top_num(r, "n_head", -1) != c->heads ||
        top_num(r, "vocab_size", -1) != c->vocab || top_num(r, "n_positions", 1024) != c->seq ||
        c->kv_heads != c->heads || c->head_dim || (tie && tie->kind == CODA_JSON_FALSE))
      fail("accepted gpt2 config differs from the file's keys");
    coda_json_free(d);
    return;
  }
  if (c->family == CODA_FAMILY_GEMMA3) { /* Gemma3TextConfig's defaults */
    const coda_json *tie = coda_json_get(r, "tie_word_embeddings");
    if (top_num(r, "hidden_size", -1) != c->dim || top_num(r, "intermediate_size", -1) != c->ffn ||
        top_num(r, "num_hidden_layers", -1) != c->layers ||
        top_num(r, "num_attention_heads", -1) != c->heads ||
        top_num(r, "vocab_size", -1) != c->vocab || top_num(r, "num_key_value_heads", 4) != c->kv_heads ||
        top_num(r, "head_dim", 256) != c->head_dim ||
        top_num(r, "max_position_embeddings", 131072) != c->seq ||
        top_num(r, "query_pre_attn_scalar", 256) != c->attn_scalar ||
        top_num(r, "final_logit_softcapping", 0) != c->logit_softcap ||
        (c->sliding_window && top_num(r, "sliding_window", 4096) != c->sliding_window) ||
        (tie && tie->kind == CODA_JSON_FALSE) != !c->tied)
      fail("accepted gemma3 config differs from the file's keys");
    coda_json_free(d);
    return;
  }
  if (top_num(r, "hidden_size", -1) != c->dim || top_num(r, "intermediate_size", -1) != c->ffn ||
      top_num(r, "num_hidden_layers", -1) != c->layers ||
      top_num(r, "num_attention_heads", -1) != c->heads || top_num(r, "vocab_size", -1) != c->vocab ||
      top_num(r, "num_key_value_heads", c->heads) != c->kv_heads ||
      top_num(r, "max_position_embeddings", 2048) != c->seq)
    fail("accepted config differs from the file's keys");
  const coda_json *tie = coda_json_get(r, "tie_word_embeddings");
  if ((tie && tie->kind == CODA_JSON_TRUE) != (c->tied == 1)) fail("tie_word_embeddings not taken");
  /* the family: qwen3 where model_type or architectures say so; its head
   * width the file's (transformers' default 128), Llama's dim / heads */
  const coda_json *mt = coda_json_get(r, "model_type"), *ar = coda_json_get(r, "architectures");
  const int qwen3 = coda_json_is_str(mt, "qwen3") ||
                    (ar && ar->kind == CODA_JSON_ARRAY && ar->n >= 1 &&
                     coda_json_is_str(&ar->u.items[0], "Qwen3ForCausalLM"));
  if (qwen3 != (c->family == CODA_FAMILY_QWEN3)) fail("the family is not the file's");
  if (c->head_dim != (qwen3 ? top_num(r, "head_dim", 128) : 0)) fail("head_dim not taken");
  /* the window: Mistral's (model_type mistral, or none and an
   * architecture MistralForCausalLM) as written, MistralConfig's 4096
   * where absent, none where null; Llama and Qwen3 have none */
  const coda_json *sw = coda_json_get(r, "sliding_window");
  int mistral = mt && mt->kind != CODA_JSON_NULL ? coda_json_is_str(mt, "mistral") : 0;
  for (size_t i = 0; !(mt && mt->kind != CODA_JSON_NULL) && ar && ar->kind == CODA_JSON_ARRAY &&
                     i < ar->n; i++)
    mistral |= coda_json_is_str(&ar->u.items[i], "MistralForCausalLM");
  const double want_sw = !mistral || (sw && sw->kind == CODA_JSON_NULL) ? 0
                         : top_num(r, "sliding_window", 4096);
  if (c->sliding_window != want_sw) fail("sliding_window not the file's");
  coda_json_free(d);
}

static int same_config(const coda_model_config *a, const coda_model_config *b) {
  return a->vocab == b->vocab && a->dim == b->dim && a->layers == b->layers &&
         a->heads == b->heads && a->kv_heads == b->kv_heads && a->ffn == b->ffn &&
         a->seq == b->seq && a->tied == b->tied && a->rope_theta == b->rope_theta &&
         a->norm_eps == b->norm_eps && a->rope.type == b->rope.type && a->family == b->family &&
         a->head_dim == b->head_dim && a->sliding_window == b->sliding_window &&
         a->sliding_pattern == b->sliding_pattern && a->rope_local_theta == b->rope_local_theta &&
         a->attn_scalar == b->attn_scalar && a->logit_softcap == b->logit_softcap;
}

/* coda_hf_import of dir; returns its status, checks what it left. */
static coda_status import(const char *dir, int have_cfg, const coda_model_config *c,
                          const char *must_name) {
  coda_model *m = (coda_model *)(uintptr_t)1; /* the importer must reset it */
  coda_warnings_clear(ctx);
  coda_status s = coda_hf_import(ctx, dir, CODA_ENGINE_REFERENCE, &m);
  if (s != CODA_OK) {
    if (m) fail("failed import returned a model");
    check_refused(ctx, s, must_name);
    return s;
  }
  if (!have_cfg) fail("import accepted a config that coda_hf_config refuses");
  coda_model_config want = *c;
  if (c->tied && head_differs) { /* the file's own head: untied, with a word */
    want.tied = 0;
    if (!strstr(coda_warnings(ctx), "'lm_head.weight'")) fail("untied import without a warning");
  } else if (coda_warnings(ctx)[0]) {
    fail("a warning on an import that keeps the config");
  }
  coda_warnings_clear(ctx);
  if (!m || !same_config(coda_model_cfg(m), &want)) fail("imported model differs from the config");
  coda_model_destroy(m);
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) init();
  const int fds = open_fds();
  const char *t = getenv("TMPDIR");
  char dir[4096], cfg[4200], wts[4200];
  snprintf(dir, sizeof dir, "%s/fuzz-hf-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(dir)) fail("mkdtemp");
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  snprintf(wts, sizeof wts, "%s/model.safetensors", dir);
  put_file(cfg, data, size);

  coda_model_config c;
  coda_status s = coda_hf_config(ctx, dir, &c);
  const int have_cfg = s == CODA_OK;
  if (have_cfg) {
    check_accepted(ctx, &c);
    check_keys(data, size, &c);
  } else {
    check_refused(ctx, s, cfg);
  }

  if (link(tmpl, wts) != 0) fail("cannot link the tiny weights");
  coda_status si = import(dir, have_cfg, &c, dir);
  if (!have_cfg && si == CODA_OK) fail("import with weights accepted a refused config");
  unlink(wts);

  si = import(dir, have_cfg, &c, have_cfg ? wts : cfg);
  if (si == CODA_OK) fail("import without weights succeeded");

  unlink(cfg);
  if (rmdir(dir) != 0) fail("the reader left a file in the directory");
  if (open_fds() != fds) fail("a file descriptor stayed open");
  return 0;
}
