/* The host reference model: gradients against central finite differences
 * of its own loss (per parameter tensor, along random directions; Llama and
 * Qwen3, tied and untied, Qwen3 with a head width other than dim / heads),
 * the q/k norm's scale invariance, thread count independence, and
 * checkpoint save / load. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static double normal(uint64_t *s) {
  double u1 = coda_rng_uniform(s) + 1e-300, u2 = coda_rng_uniform(s);
  return sqrt(-2 * log(u1)) * cos(2 * acos(-1.0) * u2);
}

static void grad_check(coda_context ctx, int tied, coda_model_family fam, int head_dim) {
  coda_model_config c = {37, 16, 2, 4, 2, 24, 8, tied, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, fam, head_dim, 0, 0, 0, 0, 0};
  coda_model *m;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (!m) return;
  /* the family's parameters: Qwen3 adds a q and a k norm per layer */
  CHECK_EQ_INT(coda_model_num_params(m), 2 * (fam == CODA_FAMILY_QWEN3 ? 8 : 6) + 2 + !tied);
  CHECK_EQ_INT((int64_t)coda_model_size(m), coda_model_config_params(&c));
  coda_model_init(m, 3 + tied);
  /* larger weights than the init so every path carries signal */
  uint64_t r = 17 + tied;
  float *w = coda_model_weights(m);
  size_t n = coda_model_size(m);
  for (size_t i = 0; i < n; i++) w[i] += (float)(0.2 * normal(&r));
  enum { B = 2, T = 7 };
  int32_t in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) {
    in[i] = (int32_t)coda_rng_below(&r, 37);
    tg[i] = i % 5 == 3 ? -1 : (int32_t)coda_rng_below(&r, 37); /* some ignored */
  }
  coda_model_zero_grad(m);
  double loss;
  int64_t nv;
  const float gs = 0.75f;
  CHECK(coda_model_step(ctx, m, in, tg, B, T, gs, &loss, &nv) == CODA_OK);
  int64_t want_nv = 0;
  for (int i = 0; i < B * T; i++) want_nv += tg[i] >= 0;
  CHECK_EQ_INT(nv, want_nv);
  float *g = malloc(n * sizeof *g), *w0 = malloc(n * sizeof *w0), *d = malloc(n * sizeof *d);
  memcpy(g, coda_model_grads(m), n * sizeof *g);
  memcpy(w0, w, n * sizeof *w0);
  for (int pi = 0; pi < coda_model_num_params(m); pi++) {
    const coda_param *p = coda_model_param(m, pi);
    double gd = 0.0;
    memset(d, 0, n * sizeof *d);
    for (size_t k = 0; k < p->size; k++) {
      d[p->offset + k] = (float)normal(&r);
      gd += (double)g[p->offset + k] * d[p->offset + k];
    }
    const double h = 2e-3;
    double lp, lm;
    for (size_t k = 0; k < n; k++) w[k] = (float)(w0[k] + h * d[k]);
    CHECK(coda_model_loss(ctx, m, in, tg, B, T, &lp, &nv) == CODA_OK);
    for (size_t k = 0; k < n; k++) w[k] = (float)(w0[k] - h * d[k]);
    CHECK(coda_model_loss(ctx, m, in, tg, B, T, &lm, &nv) == CODA_OK);
    memcpy(w, w0, n * sizeof *w);
    double fd = gs * (lp - lm) / (2 * h);
    if (getenv("CODA_TEST_VERBOSE")) printf("%-40s fd %.6g grad %.6g\n", p->name, fd, gd);
    CHECK_MSG(fabs(fd - gd) <= 0.02 * fabs(fd) + 2e-4, "%s, tied %d, head_dim %d, %s: finite "
              "difference %.6g, gradient %.6g", coda_model_family_name(fam), tied, head_dim,
              p->name, fd, gd);
  }
  /* forward-only loss equals the loss of the training step */
  double l2;
  CHECK(coda_model_loss(ctx, m, in, tg, B, T, &l2, &nv) == CODA_OK);
  CHECK(l2 == loss);
  /* last-position logits agree with the loss path: log-softmax at the
   * target of the last row of a single sequence */
  float logits[37];
  int32_t tg1[T];
  for (int t = 0; t < T; t++) tg1[t] = t == T - 1 ? 5 : -1;
  CHECK(coda_model_loss(ctx, m, in, tg1, 1, T, &l2, &nv) == CODA_OK);
  CHECK(coda_model_last_logits(ctx, m, in, T, logits) == CODA_OK);
  double mx = -INFINITY, se = 0;
  for (int v = 0; v < 37; v++) mx = fmax(mx, logits[v]);
  for (int v = 0; v < 37; v++) se += exp(logits[v] - mx);
  CHECK_NEAR(l2, mx + log(se) - logits[5], 1e-4);
  /* bad tokens are rejected */
  in[3] = 37;
  CHECK(coda_model_loss(ctx, m, in, tg, B, T, &l2, &nv) == CODA_ERR_INVALID_ARGUMENT);
  in[3] = 0;
  CHECK(coda_model_loss(ctx, m, in, tg, B, 9, &l2, &nv) == CODA_ERR_INVALID_ARGUMENT);
  free(g); free(w0); free(d);
  coda_model_destroy(m);
}

/* Qwen3 normalizes each q and k head before RoPE: scaling the q and k rows
 * of wqkv leaves the loss unchanged up to the eps (and rounding), where
 * the same scaling changes Llama's. */
static void qk_norm_invariance(coda_context ctx) {
  for (int fam = 0; fam < 2; fam++) {
    coda_model_config c = {41, 24, 2, 4, 2, 32, 8, 0, 10000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0},
                           (coda_model_family)fam, fam ? 10 : 0, 0, 0, 0, 0, 0};
    coda_model *m;
    CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
    if (!m) continue;
    coda_model_init(m, 11);
    float *w = coda_model_weights(m);
    uint64_t r = 5;
    for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(0.3 * normal(&r));
    enum { B = 1, T = 8 };
    int32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
      in[i] = (int32_t)coda_rng_below(&r, 41);
      tg[i] = (int32_t)coda_rng_below(&r, 41);
    }
    double l0, l1;
    int64_t nv;
    CHECK(coda_model_loss(ctx, m, in, tg, B, T, &l0, &nv) == CODA_OK);
    const int hd = coda_model_head_dim(&c);
    for (int li = 0; li < c.layers; li++) {
      char nm[96];
      snprintf(nm, sizeof nm, "layers.%d.attention.wqkv.weight", li);
      const coda_param *p = coda_model_find(m, nm);
      const size_t qk = (size_t)(c.heads + c.kv_heads) * hd * c.dim;
      for (size_t k = 0; k < qk; k++) w[p->offset + k] *= 4.0f;
    }
    CHECK(coda_model_loss(ctx, m, in, tg, B, T, &l1, &nv) == CODA_OK);
    if (fam == CODA_FAMILY_QWEN3)
      CHECK_MSG(fabs(l1 - l0) <= 1e-5 * fabs(l0), "qwen3: loss %.9g after scaling q, k, %.9g before",
                l1, l0);
    else
      CHECK_MSG(fabs(l1 - l0) > 1e-3, "llama: loss %.9g after scaling q, k, %.9g before", l1, l0);
    coda_model_destroy(m);
  }
}

static void thread_independence(coda_context ctx) {
  coda_model_config c;
  CHECK(coda_model_config_named("tiny", &c) == CODA_OK);
  c.seq = 32;
  coda_model *m;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  coda_model_init(m, 9);
  enum { B = 2, T = 32 };
  int32_t in[B * T], tg[B * T];
  uint64_t r = 4;
  for (int i = 0; i < B * T; i++) {
    in[i] = (int32_t)coda_rng_below(&r, 256);
    tg[i] = (int32_t)coda_rng_below(&r, 256);
  }
  size_t n = coda_model_size(m);
  float *g1 = malloc(n * sizeof *g1);
  double l1, l2;
  int64_t nv;
  omp_set_num_threads(1);
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &l1, &nv) == CODA_OK);
  memcpy(g1, coda_model_grads(m), n * sizeof *g1);
  omp_set_num_threads(3);
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &l2, &nv) == CODA_OK);
  CHECK(l1 == l2);
  CHECK(!memcmp(g1, coda_model_grads(m), n * sizeof *g1));
  omp_set_num_threads(2);
  CHECK(fabs(l1 - log(256.0)) < 0.1); /* small init: near-uniform predictions */
  free(g1);
  coda_model_destroy(m);
}

static void checkpoints(coda_context ctx, const char *dir) {
  coda_model_config c = {300, 32, 2, 4, 1, 40, 16, 0, 500000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *a, *b;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &a) == CODA_OK);
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &b) == CODA_OK);
  coda_model_init(a, 1);
  coda_model_init(b, 2);
  size_t n = coda_model_size(a);
  float *m1 = malloc(n * 4), *v1 = malloc(n * 4), *m2 = calloc(n, 4), *v2 = calloc(n, 4);
  uint64_t r = 8;
  for (size_t i = 0; i < n; i++) {
    m1[i] = (float)normal(&r);
    v1[i] = (float)coda_rng_uniform(&r);
  }
  coda_train_state st = {123, 0xfedcba9876543210ull, 4567, 2.5, "", 0, 0}, st2;
  char p[512];
  snprintf(p, sizeof p, "%s/ck.safetensors", dir);
  CHECK(coda_checkpoint_save(ctx, p, a, m1, v1, &st) == CODA_OK);
  coda_model_config c2;
  CHECK(coda_checkpoint_config(ctx, p, &c2) == CODA_OK);
  CHECK(c2.vocab == 300 && c2.dim == 32 && c2.kv_heads == 1 && c2.rope_theta == 500000.0 &&
        c2.norm_eps == 1e-6 && c2.seq == 16 && c2.tied == 0);
  CHECK(coda_checkpoint_load(ctx, p, b, m2, v2, &st2) == CODA_OK);
  CHECK(!memcmp(coda_model_weights(a), coda_model_weights(b), n * 4));
  CHECK(!memcmp(m1, m2, n * 4) && !memcmp(v1, v2, n * 4));
  CHECK(st2.step == 123 && st2.rng == st.rng && st2.drawn == 4567 && st2.last_loss == 2.5);
  /* a Qwen3 model's family and head width come back from its checkpoint */
  {
    coda_model_config q = c;
    q.family = CODA_FAMILY_QWEN3;
    q.head_dim = 12;
    coda_model *qa, *qb;
    CHECK(coda_model_create(ctx, &q, CODA_ENGINE_REFERENCE, &qa) == CODA_OK);
    coda_model_init(qa, 4);
    char qp[512];
    snprintf(qp, sizeof qp, "%s/q.safetensors", dir);
    CHECK(coda_checkpoint_save(ctx, qp, qa, NULL, NULL, &st) == CODA_OK);
    coda_model_config q2;
    CHECK(coda_checkpoint_config(ctx, qp, &q2) == CODA_OK);
    CHECK(q2.family == CODA_FAMILY_QWEN3 && q2.head_dim == 12);
    CHECK(coda_model_create(ctx, &q2, CODA_ENGINE_REFERENCE, &qb) == CODA_OK);
    CHECK(coda_checkpoint_load(ctx, qp, qb, NULL, NULL, NULL) == CODA_OK);
    CHECK(coda_model_size(qa) == coda_model_size(qb) &&
          !memcmp(coda_model_weights(qa), coda_model_weights(qb), coda_model_size(qa) * 4));
    /* a Llama model of the same shapes cannot take it */
    CHECK(coda_checkpoint_load(ctx, qp, b, NULL, NULL, NULL) != CODA_OK);
    coda_model_destroy(qa);
    coda_model_destroy(qb);
  }
  /* a different architecture is refused */
  coda_model_config c3 = c;
  c3.ffn = 48;
  coda_model *d;
  CHECK(coda_model_create(ctx, &c3, CODA_ENGINE_REFERENCE, &d) == CODA_OK);
  CHECK(coda_checkpoint_load(ctx, p, d, NULL, NULL, NULL) == CODA_ERR_SHAPE);
  coda_model_destroy(d);
  /* weights-only checkpoints cannot resume an optimizer */
  char q[512];
  snprintf(q, sizeof q, "%s/w.safetensors", dir);
  CHECK(coda_checkpoint_save(ctx, q, a, NULL, NULL, &st) == CODA_OK);
  CHECK(coda_checkpoint_load(ctx, q, b, NULL, NULL, NULL) == CODA_OK);
  CHECK(coda_checkpoint_load(ctx, q, b, m2, v2, NULL) == CODA_ERR_IO);
  /* a flipped bit anywhere in the data is caught by the checksum */
  FILE *f = fopen(p, "r+b");
  fseek(f, -100, SEEK_END);
  int ch = fgetc(f);
  fseek(f, -100, SEEK_END);
  fputc(ch ^ 8, f);
  fclose(f);
  CHECK(coda_checkpoint_load(ctx, p, b, m2, v2, &st2) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "checksum") != NULL);
  /* a truncated file is refused */
  CHECK(truncate(q, 1000) == 0);
  CHECK(coda_checkpoint_load(ctx, q, b, NULL, NULL, NULL) == CODA_ERR_IO);
  free(m1); free(v1); free(m2); free(v2);
  coda_model_destroy(a);
  coda_model_destroy(b);
}

static void configs(coda_context ctx) {
  const char *names[] = {"tiny", "d512", "1b", "8b"};
  for (int i = 0; i < 4; i++) {
    coda_model_config c;
    CHECK(coda_model_config_named(names[i], &c) == CODA_OK);
    CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  }
  coda_model_config c;
  CHECK(coda_model_config_named("nope", &c) == CODA_ERR_INVALID_ARGUMENT);
  coda_model_config_named("8b", &c);
  /* Llama-3-8B has about 8.03e9 parameters */
  CHECK(llabs(coda_model_config_params(&c) - 8030261248LL) < 1000);
  coda_model_config_named("tiny", &c);
  c.heads = 3;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  c.heads = 4;
  c.kv_heads = 3;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  /* families: an unknown one, and a head width Llama does not take, are
   * refused naming the field, the value and what is allowed */
  coda_model_config_named("tiny", &c);
  c.family = (coda_model_family)7;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "family 7") && strstr(coda_last_error(ctx), "qwen3"));
  c.family = CODA_FAMILY_LLAMA;
  c.head_dim = 48; /* dim 128 / 4 heads is 32 */
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "head_dim 48") && strstr(coda_last_error(ctx), "llama"));
  c.family = CODA_FAMILY_QWEN3;
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c.head_dim = 47;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "47") && strstr(coda_last_error(ctx), "even"));
  c.head_dim = 48;
  /* 128 + 2 (4 + 2 kv heads) 48 ... per layer: the q/k norms are 2 x 48 */
  const int64_t D = 128, F = 384, V = 256, per = D + (4 + 4) * 48 * D + D * 4 * 48 + 2 * 48 + D +
                    2 * F * D + D * F;
  CHECK_EQ_INT(coda_model_config_params(&c), V * D + 2 * per + D + V * D);
  /* the plan engine runs Qwen3 (its QK-norm block; tests/test_train_plans.c
   * holds it to the reference engine) */
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_PLANS, &m) == CODA_OK && m != NULL);
  coda_model_destroy(m);
  m = NULL;
  coda_model_family f;
  CHECK(coda_model_family_from_name(ctx, "qwen3", &f) == CODA_OK && f == CODA_FAMILY_QWEN3);
  CHECK(coda_model_family_from_name(ctx, "gemma", &f) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(!strcmp(coda_model_family_name(CODA_FAMILY_LLAMA), "llama"));
}

int main(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "test_train_model.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  grad_check(ctx, 0, CODA_FAMILY_LLAMA, 0);
  grad_check(ctx, 1, CODA_FAMILY_LLAMA, 0);
  grad_check(ctx, 0, CODA_FAMILY_QWEN3, 0);  /* head_dim = dim / heads */
  grad_check(ctx, 1, CODA_FAMILY_QWEN3, 6);  /* 4 heads x 6 != dim 16 */
  grad_check(ctx, 0, CODA_FAMILY_QWEN3, 10); /* 40 > dim 16 */
  qk_norm_invariance(ctx);
  thread_independence(ctx);
  checkpoints(ctx, dir);
  configs(ctx);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
