/* The model: configuration, parameter list, initialization, and the
 * dispatch of forward/backward to an engine.
 *
 * The parameters are the family's (family.c), in one flat fp32 buffer
 * (gradients and the two AdamW moments use the same layout). Llama's:
 *   tok_embeddings.weight              V x D
 *   layers.{i}.attention_norm.weight   D
 *   layers.{i}.attention.wqkv.weight   (Hq + 2 Hkv)·hd x D, rows [Q heads][K heads][V heads];
 *                                      RoPE pairs are adjacent rows (2j, 2j+1) of each Q/K head
 *   layers.{i}.attention.wo.weight     D x Hq·hd
 *   layers.{i}.ffn_norm.weight         D
 *   layers.{i}.feed_forward.w13.weight 2F x D, rows interleaved [g0, u0, g1, u1, ...]
 *   layers.{i}.feed_forward.w2.weight  D x F
 *   norm.weight                        D
 *   output.weight                      V x D (absent when tied to the embedding)
 * Qwen3 adds layers.{i}.attention.q_norm.weight and k_norm.weight (hd
 * each, in the RoPE row order of wqkv) after wqkv; Gemma 3 has those and
 * layers.{i}.attention.post_norm.weight after wo and
 * layers.{i}.feed_forward.post_norm.weight after w2 (D each). Weight decay applies to
 * the matrices of linear layers only (wqkv, wo, w13, w2, output); norm
 * weights and the embedding (also when it is the tied output head) are not
 * decayed. */
#include "coda_nn.h"
#include "base/rng.h"
#include "model/family.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct coda_model {
  coda_model_config cfg;
  coda_engine engine;
  int np;
  coda_param *p;
  size_t n;
  float *w, *g;
  /* engine state */
  void *ref; /* reference activations (model_ref.c) */
  void *plans;
  coda_prof *prof; /* step profile, NULL: off (not owned) */
  const coda_ref_hooks *hooks; /* weight sharding (not owned), NULL: off */
  int tune;        /* coda_model_set_plan_tuning */
  int keep_logits; /* coda_model_set_keep_logits */
};

coda_status coda_model_config_named(const char *name, coda_model_config *c) {
  if (!name || !c) return CODA_ERR_INVALID_ARGUMENT;
  memset(c, 0, sizeof *c);
  c->rope_theta = 10000.0;
  c->norm_eps = 1e-5;
  if (!strcmp(name, "tiny")) {
    c->vocab = 256; c->dim = 128; c->layers = 2; c->heads = 4; c->kv_heads = 2;
    c->ffn = 384; c->seq = 128; c->tied = 0;
  } else if (!strcmp(name, "d512")) {
    c->vocab = 256; c->dim = 512; c->layers = 8; c->heads = 8; c->kv_heads = 4;
    c->ffn = 1536; c->seq = 512; c->tied = 0;
  } else if (!strcmp(name, "1b")) { /* Llama-3.2-1B shapes */
    c->vocab = 128256; c->dim = 2048; c->layers = 16; c->heads = 32; c->kv_heads = 8;
    c->ffn = 8192; c->seq = 2048; c->tied = 1; c->rope_theta = 500000.0;
  } else if (!strcmp(name, "8b")) { /* Llama-3-8B shapes */
    c->vocab = 128256; c->dim = 4096; c->layers = 32; c->heads = 32; c->kv_heads = 8;
    c->ffn = 14336; c->seq = 8192; c->tied = 0; c->rope_theta = 500000.0;
  } else {
    return CODA_ERR_INVALID_ARGUMENT;
  }
  return CODA_OK;
}

/* What GPT-2's block has no field for: one kv head per head (no GQA), no
 * RoPE (positions are learned), the head tied to the embedding. */
static coda_status gpt2_check(coda_context ctx, const coda_model_config *c) {
  if (c->kv_heads != c->heads)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: kv-heads %d != heads %d: the "
                     "gpt2 family has one key/value head per attention head (set kv-heads = "
                     "heads; llama and qwen3 allow grouped-query attention)", c->kv_heads,
                     c->heads);
  if (c->rope.type != CODA_ROPE_DEFAULT)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: RoPE scaling %s: the gpt2 "
                     "family has no RoPE (learned positions); leave the scaling unset",
                     c->rope.type == CODA_ROPE_LINEAR ? "linear" : "llama3");
  if (!c->tied)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: an untied head: the gpt2 "
                     "family's head is its token embedding (tied; llama and qwen3 allow untied)");
  return CODA_OK;
}

/* The window fields and Gemma 3's others. Llama takes sliding_window
 * alone (Mistral's: every layer attends to the last sliding_window keys,
 * so there is no layer pattern); Gemma 3 takes all of them, a window
 * needing its layer pattern; the bases, the score scalar and the cap are
 * positive or 0 (the default); RoPE scaling is not taken by Gemma 3 (it
 * scales the global layers' RoPE only, which coda does not model). Qwen3
 * and GPT-2 have none of these fields. */
static coda_status window_fields_check(coda_context ctx, const coda_model_config *c,
                                       const char *fam) {
  const int gemma = c->family == CODA_FAMILY_GEMMA3, llama = c->family == CODA_FAMILY_LLAMA;
  if (c->sliding_window < 0 || c->sliding_pattern < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: sliding_window %d, "
                     "sliding_pattern %d must be >= 0", c->sliding_window, c->sliding_pattern);
  if (!gemma && !llama && (c->sliding_window || c->sliding_pattern || c->rope_local_theta ||
                           c->attn_scalar || c->logit_softcap))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: sliding_window %d, "
                     "sliding_pattern %d, rope_local_theta %g, attn_scalar %g, logit_softcap "
                     "%g: the %s family has none of these (leave them 0; gemma3 takes them, "
                     "llama takes sliding_window)", c->sliding_window,
                     c->sliding_pattern, c->rope_local_theta, c->attn_scalar, c->logit_softcap,
                     fam);
  if (llama && (c->rope_local_theta || c->attn_scalar || c->logit_softcap))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: rope_local_theta %g, "
                     "attn_scalar %g, logit_softcap %g: the llama family has none of these "
                     "(leave them 0; gemma3 takes them)", c->rope_local_theta, c->attn_scalar,
                     c->logit_softcap);
  if (llama && c->sliding_pattern)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: sliding_pattern %d: the "
                     "llama family windows every layer alike (Mistral's sliding_window), so it "
                     "takes no layer pattern; leave it 0 (gemma3 takes a pattern of local and "
                     "global layers)", c->sliding_pattern);
  if (!gemma) return CODA_OK;
  if (c->sliding_window > 0 && c->sliding_pattern < 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: sliding_window %d without "
                     "a sliding_pattern: set it >= 1 (layer i is global when (i + 1) %% "
                     "pattern == 0; Gemma 3 uses 6)", c->sliding_window);
  if (!(c->rope_local_theta == 0.0 || (c->rope_local_theta > 1.0 && isfinite(c->rope_local_theta))) ||
      !(c->attn_scalar == 0.0 || (c->attn_scalar > 0.0 && isfinite(c->attn_scalar))) ||
      !(c->logit_softcap == 0.0 || (c->logit_softcap > 0.0 && isfinite(c->logit_softcap))))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: rope_local_theta %g (0 or "
                     "> 1), attn_scalar %g (0 or > 0), logit_softcap %g (0 or > 0) out of range",
                     c->rope_local_theta, c->attn_scalar, c->logit_softcap);
  if (c->rope.type != CODA_ROPE_DEFAULT)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config: RoPE scaling %s: the gemma3 "
                     "family takes none (rope_scaling null; llama and qwen3 take linear and "
                     "llama3)", c->rope.type == CODA_ROPE_LINEAR ? "linear" : "llama3");
  return CODA_OK;
}

int coda_model_layer_is_local(const coda_model_config *c, int li) {
  if (c->sliding_window <= 0) return 0;
  if (c->family == CODA_FAMILY_LLAMA) return 1; /* Mistral's: every layer */
  return c->family == CODA_FAMILY_GEMMA3 && c->sliding_pattern > 0 &&
         (li + 1) % c->sliding_pattern != 0;
}

int coda_model_layer_window(const coda_model_config *c, int li) {
  return coda_model_layer_is_local(c, li) ? c->sliding_window : 0;
}

double coda_model_layer_rope_theta(const coda_model_config *c, int li) {
  /* Gemma 3's local base; rope_local_theta is 0 in the other families */
  return coda_model_layer_is_local(c, li) && c->rope_local_theta > 0.0 ? c->rope_local_theta
                                                                       : c->rope_theta;
}

double coda_model_attn_scale(const coda_model_config *c) {
  const double s = c->family == CODA_FAMILY_GEMMA3 && c->attn_scalar > 0.0
                       ? c->attn_scalar : (double)coda_model_head_dim(c);
  return 1.0 / sqrt(s);
}

float coda_model_embed_scale(const coda_model_config *c) {
  return c->family == CODA_FAMILY_GEMMA3 ? (float)sqrt((double)c->dim) : 1.0f;
}

coda_status coda_model_config_check(coda_context ctx, const coda_model_config *c) {
  if (!c) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config is NULL");
  const coda_family *fam = coda_family_of(c->family);
  if (!fam)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "model config: family %d is not a model family (llama %d, qwen3 %d, gpt2 %d, "
                     "gemma3 %d)", (int)c->family, (int)CODA_FAMILY_LLAMA, (int)CODA_FAMILY_QWEN3,
                     (int)CODA_FAMILY_GPT2, (int)CODA_FAMILY_GEMMA3);
  if (c->vocab < 2 || c->dim < 2 || c->layers < 1 || c->heads < 1 || c->kv_heads < 1 ||
      c->ffn < 1 || c->seq < 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "model config: vocab %d, dim %d, layers %d, heads %d, kv-heads %d, ffn %d, "
                     "seq %d must all be positive (vocab, dim >= 2)",
                     c->vocab, c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->seq);
  if (c->head_dim < 0 || c->head_dim > 1024)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "model config: head_dim %d must be 0 (dim / heads) or in 1..1024",
                     c->head_dim);
  if (c->head_dim && !fam->qk_norm && c->head_dim * c->heads != c->dim)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "model config: head_dim %d x heads %d != dim %d: the %s family takes "
                     "head_dim = dim / heads (qwen3 and gemma3 allow any even head_dim)",
                     c->head_dim, c->heads, c->dim, fam->name);
  if (fam->block == CODA_BLOCK_GPT2) {
    coda_status g = gpt2_check(ctx, c);
    if (g) return g;
  }
  coda_status gs = window_fields_check(ctx, c, fam->name);
  if (gs) return gs;
  if (!c->head_dim && c->dim % c->heads)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "dim %d is not a multiple of heads %d "
                     "(or set head_dim)", c->dim, c->heads);
  const int hd = coda_model_head_dim(c);
  if (hd % 2 && fam->block != CODA_BLOCK_GPT2)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "head dim %d must be even (RoPE rotates pairs)", hd);
  if (c->heads % c->kv_heads)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "heads %d is not a multiple of kv-heads %d",
                     c->heads, c->kv_heads);
  if (!(c->rope_theta > 1.0 && isfinite(c->rope_theta)) ||
      !(c->norm_eps > 0.0 && isfinite(c->norm_eps)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "rope theta %g must be finite and > 1, norm "
                     "eps %g finite and > 0", c->rope_theta, c->norm_eps);
  coda_status rs = coda_rope_scaling_check(ctx, &c->rope);
  if (rs != CODA_OK) return rs;
  if (c->dim > (1 << 16) || c->ffn > (1 << 18) || c->vocab > (1 << 24) || c->layers > 1024 ||
      c->seq > (1 << 20) || (int64_t)c->heads * hd > (1 << 16))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "model config too large");
  return CODA_OK;
}

int64_t coda_model_config_params(const coda_model_config *c) {
  const coda_family *f = coda_family_of(c->family);
  if (!f) return 0;
  int64_t n = 0;
  for (int i = 0; i < f->nparams; i++) {
    const coda_family_param *p = &f->params[i];
    if (p->untied_only && c->tied) continue;
    const int64_t sz = coda_family_dim(c, p->rows) * coda_family_dim(c, p->cols);
    n += p->where == CODA_P_LAYER ? c->layers * sz : sz;
  }
  return n;
}

/* Parameter fp of the family table, of layer li (-1: not a layer's). */
static void add_param(coda_model *m, const coda_family_param *fp, int li) {
  const coda_model_config *c = &m->cfg;
  coda_param *p = &m->p[m->np++];
  if (li >= 0) snprintf(p->name, sizeof p->name, fp->name, li);
  else snprintf(p->name, sizeof p->name, "%s", fp->name);
  p->ndim = fp->ndim;
  p->shape[0] = coda_family_dim(c, fp->rows);
  p->shape[1] = fp->ndim == 2 ? coda_family_dim(c, fp->cols) : 1;
  p->size = (size_t)(p->shape[0] * p->shape[1]);
  p->offset = m->n;
  p->decay = fp->decay;
  p->init = (int)fp->init;
  m->n += p->size;
}

void coda_ref_free(coda_model *m);
void coda_plans_free(coda_model *m);

coda_status coda_model_create(coda_context ctx, const coda_model_config *cfg, coda_engine engine,
                              coda_model **out) {
  *out = NULL;
  coda_status s = coda_model_config_check(ctx, cfg);
  if (s) return s;
  if (engine == CODA_ENGINE_PLANS && !coda_plans_available())
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the block-plan engine is not available");
  if (engine != CODA_ENGINE_REFERENCE && engine != CODA_ENGINE_PLANS)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "unknown engine %d", (int)engine);
  int64_t total = coda_model_config_params(cfg);
  if ((uint64_t)total > SIZE_MAX / 4 / sizeof(float))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "model of %lld parameters is too large",
                     (long long)total);
  coda_model *m = calloc(1, sizeof *m);
  if (!m) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  m->cfg = *cfg;
  m->engine = engine;
  const coda_family *fam = coda_family_of(cfg->family);
  m->p = calloc((size_t)coda_family_count_params(fam, cfg), sizeof *m->p);
  if (!m->p) { free(m); return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); }
  /* the family's order: what comes before the layers, each layer, the rest */
  for (int w = CODA_P_BEFORE; w <= CODA_P_AFTER; w++)
    for (int li = 0; li < (w == CODA_P_LAYER ? cfg->layers : 1); li++)
      for (int i = 0; i < fam->nparams; i++) {
        const coda_family_param *fp = &fam->params[i];
        if ((int)fp->where != w || (fp->untied_only && cfg->tied)) continue;
        add_param(m, fp, w == CODA_P_LAYER ? li : -1);
      }
  m->w = calloc(m->n, sizeof *m->w);
  m->g = calloc(m->n, sizeof *m->g);
  if (!m->w || !m->g) {
    size_t want = m->n;
    coda_model_destroy(m);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "cannot allocate %zu parameters", want);
  }
  *out = m;
  return CODA_OK;
}

void coda_model_destroy(coda_model *m) {
  if (!m) return;
  coda_ref_free(m);
  coda_plans_free(m);
  free(m->p);
  free(m->w);
  free(m->g);
  free(m);
}

const coda_model_config *coda_model_cfg(const coda_model *m) { return &m->cfg; }
int coda_model_num_params(const coda_model *m) { return m->np; }
const coda_param *coda_model_param(const coda_model *m, int i) { return &m->p[i]; }
const coda_param *coda_model_find(const coda_model *m, const char *name) {
  for (int i = 0; i < m->np; i++)
    if (!strcmp(m->p[i].name, name)) return &m->p[i];
  return NULL;
}
float *coda_model_weights(coda_model *m) { return m->w; }
float *coda_model_grads(coda_model *m) { return m->g; }
size_t coda_model_size(const coda_model *m) { return m->n; }
coda_engine coda_model_engine(const coda_model *m) { return m->engine; }
void **coda_model_ref_slot(coda_model *m) { return &m->ref; }
void **coda_model_plans_slot(coda_model *m) { return &m->plans; }
void coda_model_set_prof(coda_model *m, coda_prof *p) { m->prof = p; }
void coda_model_set_plan_tuning(coda_model *m, int on) { m->tune = on != 0; }
int coda_model_plan_tuning(const coda_model *m) { return m->tune; }
void coda_model_set_keep_logits(coda_model *m, int on) { m->keep_logits = on != 0; }
int coda_model_keep_logits(const coda_model *m) { return m->keep_logits; }
coda_prof *coda_model_prof(coda_model *m) { return m->prof; }
void coda_model_set_ref_hooks(coda_model *m, const coda_ref_hooks *h) { m->hooks = h; }
const coda_ref_hooks *coda_model_ref_hooks(const coda_model *m) { return m->hooks; }

static double normal(uint64_t *s) {
  double u1 = coda_rng_uniform(s), u2 = coda_rng_uniform(s);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* One stream of normals over the matrices in parameter order, two draws
 * each; element k of a matrix whose stream starts at draw d takes draws
 * d + 2k and d + 2k + 1, so the threads each skip to their elements and
 * the weights are the same for any number of threads. */
uint64_t coda_model_init_stream(uint64_t seed) { return seed ^ 0x5eedf00dull; }

double coda_model_init_std(const coda_model *m, const coda_param *p) {
  if (p->init == CODA_INIT_ONES || p->init == CODA_INIT_ZEROS) return 0.0;
  if (p->init == CODA_INIT_NORMAL_OUT) return 0.02 / sqrt(2.0 * m->cfg.layers);
  return 0.02;
}

void coda_model_init(coda_model *m, uint64_t seed) {
  const uint64_t s0 = coda_model_init_stream(seed);
  uint64_t draw = 0;
  for (int i = 0; i < m->np; i++) {
    coda_param *p = &m->p[i];
    float *w = m->w + p->offset;
    if (p->init == CODA_INIT_ONES || p->init == CODA_INIT_ZEROS) {
      for (size_t k = 0; k < p->size; k++) w[k] = p->init == CODA_INIT_ONES ? 1.0f : 0.0f;
      continue;
    }
    const double sd = coda_model_init_std(m, p);
    const int64_t n = (int64_t)p->size;
    const uint64_t d = draw;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; k++) {
      uint64_t s = coda_rng_skip(s0, d + 2 * (uint64_t)k);
      w[k] = (float)(sd * normal(&s));
    }
    draw += 2 * (uint64_t)n;
  }
}

void coda_model_zero_grad(coda_model *m) { memset(m->g, 0, m->n * sizeof *m->g); }

static coda_status check_tokens(coda_context ctx, const coda_model *m, const int32_t *in,
                                const int32_t *tg, int B, int T) {
  if (B <= 0 || T <= 0 || T > m->cfg.seq)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "batch %d x %d: need B > 0 and 0 < T <= seq %d",
                     B, T, m->cfg.seq);
  for (int64_t i = 0; i < (int64_t)B * T; i++) {
    if (in[i] < 0 || in[i] >= m->cfg.vocab)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "input token %lld is %d, outside vocab %d",
                       (long long)i, in[i], m->cfg.vocab);
    if (tg && tg[i] >= m->cfg.vocab)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "target %lld is %d, outside vocab %d",
                       (long long)i, tg[i], m->cfg.vocab);
  }
  return CODA_OK;
}

static coda_status run(coda_context ctx, coda_model *m, const int32_t *in, const int32_t *tg,
                       int B, int T, int backward, float gs, double *loss, int64_t *nv,
                       float *last) {
  coda_status s = check_tokens(ctx, m, in, tg, B, T);
  if (s) return s;
  if (m->engine == CODA_ENGINE_PLANS)
    return coda_plans_forward(ctx, m, in, tg, B, T, backward, gs, loss, nv, last);
  return coda_ref_forward(ctx, m, in, tg, B, T, backward, gs, loss, nv, last);
}

coda_status coda_model_step(coda_context ctx, coda_model *m, const int32_t *in, const int32_t *tg,
                            int B, int T, float gs, double *loss, int64_t *nv) {
  return run(ctx, m, in, tg, B, T, 1, gs, loss, nv, NULL);
}

coda_status coda_model_loss(coda_context ctx, coda_model *m, const int32_t *in, const int32_t *tg,
                            int B, int T, double *loss, int64_t *nv) {
  return run(ctx, m, in, tg, B, T, 0, 0.0f, loss, nv, NULL);
}

coda_status coda_model_last_logits(coda_context ctx, coda_model *m, const int32_t *in, int T,
                                   float *logits) {
  return run(ctx, m, in, NULL, 1, T, 0, 0.0f, NULL, NULL, logits);
}

coda_engine coda_engine_from_option(coda_train_engine e) {
  if (e == CODA_TRAIN_ENGINE_REFERENCE) return CODA_ENGINE_REFERENCE;
  if (e == CODA_TRAIN_ENGINE_PLANS) return CODA_ENGINE_PLANS;
  return coda_plans_available() ? CODA_ENGINE_PLANS : CODA_ENGINE_REFERENCE;
}

coda_engine coda_engine_for_model(coda_train_engine e, const coda_model_config *c) {
  const coda_family *f = coda_family_of(c->family);
  if (e == CODA_TRAIN_ENGINE_AUTO && f && f->block != CODA_BLOCK_LLAMA) return CODA_ENGINE_REFERENCE;
  return coda_engine_from_option(e);
}
