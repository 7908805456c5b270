/* Scaffolding shared by the model-family tests (the engine tests
 * tests/test_train_model_gpt2.c, tests/test_train_model_gemma3.c and
 * tests/test_train_model_mistral.c; the
 * Hugging Face layout tests tests/test_train_hf_qwen3.c,
 * tests/test_train_hf_gpt2.c, tests/test_train_hf_gemma3.c and
 * tests/test_train_hf_strict.c): the scratch folder and context, models
 * with random weights, config refusals, the engine's gradients against
 * finite differences of its own loss, a checkpoint round trip, and the HF export's round trip
 * and config cases. Each family keeps its own checks; what is here is the
 * same for all of them. */
#ifndef CODA_TEST_FAMILY_UTIL_H
#define CODA_TEST_FAMILY_UTIL_H
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The test's scratch folder, NAME.tmp.PID (family_test_begin). */
static char test_dir[256];

/* Makes the scratch folder of test `name` afresh and a CPU context. */
static inline coda_context family_test_begin(const char *name) {
  snprintf(test_dir, sizeof test_dir, "%s.tmp.%d", name, (int)getpid());
  CHECK(mkdir(test_dir, 0777) == 0);
  coda_context ctx = NULL;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  return ctx;
}

/* Frees the context, removes the scratch folder; main's exit status. */
static inline int family_test_end(coda_context ctx) {
  coda_context_destroy(ctx);
  CHECK(remove_tree(test_dir) == 0);
  return CHECK_DONE();
}

/* test_dir/NAME, in a buffer that the next call reuses. */
static inline const char *in_test_dir(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", test_dir, name);
  return p;
}

/* ------------------------------------------------ random models */

/* A standard normal draw (Box-Muller). */
static inline double family_normal(uint64_t *s) {
  double u1 = coda_rng_uniform(s) + 1e-300, u2 = coda_rng_uniform(s);
  return sqrt(-2 * log(u1)) * cos(2 * acos(-1.0) * u2);
}

/* A reference-engine model of c, initialized with seed (NULL: a failed
 * check). */
static inline coda_model *family_model(coda_context ctx, const coda_model_config *c,
                                       uint64_t seed) {
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (m) coda_model_init(m, seed);
  return m;
}

/* The engine tests' model: weights well away from the init (non-trivial
 * norms and biases: scale x a normal draw added to each), and a batch of
 * n tokens `in` and targets `tg` over the vocabulary with every fifth
 * target from the third ignored (-1), all from one seeded stream. */
static inline coda_model *family_step_model(coda_context ctx, const coda_model_config *c,
                                            double scale, int32_t *in, int32_t *tg, int n) {
  coda_model *m = family_model(ctx, c, 5);
  if (!m) return NULL;
  uint64_t r = 23;
  float *w = coda_model_weights(m);
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(scale * family_normal(&r));
  for (int i = 0; i < n; i++) {
    in[i] = (int32_t)coda_rng_below(&r, (uint64_t)c->vocab);
    tg[i] = i % 5 == 2 ? -1 : (int32_t)coda_rng_below(&r, (uint64_t)c->vocab);
  }
  return m;
}

/* The HF tests' model: its init moved by a uniform draw in [-0.5, 0.5)
 * per weight, so that no weight keeps its init's value. */
static inline coda_model *hf_random_model(coda_context ctx, const coda_model_config *c,
                                          uint64_t seed) {
  coda_model *m = family_model(ctx, c, seed);
  if (!m) return NULL;
  float *w = coda_model_weights(m);
  uint64_t r = seed + 1;
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(coda_rng_uniform(&r) - 0.5);
  return m;
}

static inline int same_weights(coda_model *a, coda_model *b) {
  return coda_model_size(a) == coda_model_size(b) &&
         !memcmp(coda_model_weights(a), coda_model_weights(b), coda_model_size(a) * sizeof(float));
}

/* ------------------------------------------------ the engine's checks */

/* coda_model_config_check refuses cfg with a message holding a and b (a
 * macro: a failure names the test's line). */
#define CONFIG_REFUSED(ctx, cfg, a, b)                                                \
  do {                                                                                \
    CHECK(coda_model_config_check(ctx, &(cfg)) == CODA_ERR_INVALID_ARGUMENT);         \
    CHECK_MSG(strstr(coda_last_error(ctx), a) && strstr(coda_last_error(ctx), b),     \
              "message: %s", coda_last_error(ctx));                                   \
  } while (0)

/* ||got − want|| ≤ tol ||want|| + 1e-7 over the gradient of parameter
 * `name` (want: its values, in the parameter's order). */
static inline void family_close_grad(const char *family, const coda_model *m, const char *name,
                                     const double *want, double tol) {
  const coda_param *p = coda_model_find(m, name);
  const float *g = coda_model_grads((coda_model *)m) + p->offset;
  double e = 0, n = 0;
  for (size_t i = 0; i < p->size; i++) {
    e += (g[i] - want[i]) * (g[i] - want[i]);
    n += want[i] * want[i];
  }
  CHECK_MSG(sqrt(e) <= tol * sqrt(n) + 1e-7, "%s %s: gradient error %.3g of norm %.3g", family,
            name, sqrt(e), sqrt(n));
}

/* Every parameter's gradient (gradient scale 0.5) along a random direction
 * against central differences of the engine's own loss with step h: within
 * 2% + 2e-4. */
static inline void family_finite_differences(const char *family, coda_context ctx, coda_model *m,
                                             const int32_t *in, const int32_t *tg, int B, int T,
                                             double h) {
  const size_t n = coda_model_size(m);
  float *w = coda_model_weights(m), *g = malloc(n * 4), *w0 = malloc(n * 4), *d = malloc(n * 4);
  double loss, lp, lm;
  int64_t nv;
  const float gs = 0.5f;
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, gs, &loss, &nv) == CODA_OK);
  memcpy(g, coda_model_grads(m), n * 4);
  memcpy(w0, w, n * 4);
  uint64_t r = 31;
  for (int pi = 0; pi < coda_model_num_params(m); pi++) {
    const coda_param *p = coda_model_param(m, pi);
    double gd = 0;
    memset(d, 0, n * 4);
    for (size_t k = 0; k < p->size; k++) {
      d[p->offset + k] = (float)family_normal(&r);
      gd += (double)g[p->offset + k] * d[p->offset + k];
    }
    for (size_t k = 0; k < n; k++) w[k] = (float)(w0[k] + h * d[k]);
    CHECK(coda_model_loss(ctx, m, in, tg, B, T, &lp, &nv) == CODA_OK);
    for (size_t k = 0; k < n; k++) w[k] = (float)(w0[k] - h * d[k]);
    CHECK(coda_model_loss(ctx, m, in, tg, B, T, &lm, &nv) == CODA_OK);
    memcpy(w, w0, n * 4);
    const double fd = gs * (lp - lm) / (2 * h);
    CHECK_MSG(fabs(fd - gd) <= 0.02 * fabs(fd) + 2e-4, "%s %s: finite difference %.6g, "
              "gradient %.6g", family, p->name, fd, gd);
  }
  free(g); free(w0); free(d);
}

/* A model of c (init seed 7) saved as a checkpoint in the scratch folder,
 * its config read back into *c2, and loaded into a new model of *c2: the
 * same weights bit for bit. The loaded model, for the family's checks
 * (NULL: a failed check). */
static inline coda_model *family_checkpoint_round_trip(coda_context ctx,
                                                       const coda_model_config *c,
                                                       coda_model_config *c2) {
  coda_model *a = NULL, *b = NULL;
  CHECK(coda_model_create(ctx, c, CODA_ENGINE_REFERENCE, &a) == CODA_OK);
  if (!a) return NULL;
  coda_model_init(a, 7);
  coda_train_state st = {3, 1, 2, 1.5, "", 0, 0};
  const char *p = in_test_dir("g.safetensors");
  CHECK(coda_checkpoint_save(ctx, p, a, NULL, NULL, &st) == CODA_OK);
  CHECK(coda_checkpoint_config(ctx, p, c2) == CODA_OK);
  CHECK(coda_model_create(ctx, c2, CODA_ENGINE_REFERENCE, &b) == CODA_OK);
  if (b) {
    CHECK(coda_checkpoint_load(ctx, p, b, NULL, NULL, NULL) == CODA_OK);
    CHECK(!memcmp(coda_model_weights(a), coda_model_weights(b), coda_model_size(a) * 4));
  }
  coda_model_destroy(a);
  return b;
}

/* ------------------------------------------------ the HF layout */

/* Writes text to test_dir/NAME (a failed check when it cannot). */
static inline void write_text(const char *name, const char *text) {
  CHECK(write_text_in(test_dir, name, text) == 0);
}

static inline char *read_text(const char *name) { return read_text_in(test_dir, name); }

/* m exported into the scratch folder and imported back (NULL: a failed
 * check). */
static inline coda_model *hf_export_import(coda_context ctx, coda_model *m) {
  coda_model *back = NULL;
  CHECK(coda_hf_export(ctx, m, test_dir) == CODA_OK);
  CHECK_STATUS(ctx, coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &back), CODA_OK);
  return back;
}

/* The export of the import gives the same bytes again: back, imported
 * from the folder's export, exported over it; the first config.json
 * (malloc'ed, for the family's checks). */
static inline char *hf_export_again(coda_context ctx, coda_model *back) {
  char *cfg1 = read_text("config.json");
  const char *p = in_test_dir("model.safetensors");
  unsigned char *f1 = NULL, *f2 = NULL;
  size_t n1 = 0, n2 = 0;
  CHECK(coda_read_file_max(ctx, p, 1u << 26, &f1, &n1) == CODA_OK);
  CHECK(coda_hf_export(ctx, back, test_dir) == CODA_OK);
  CHECK(coda_read_file_max(ctx, p, 1u << 26, &f2, &n2) == CODA_OK);
  char *cfg2 = read_text("config.json");
  CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
  CHECK(cfg1 && cfg2 && !strcmp(cfg1, cfg2));
  free(cfg2); free(f1); free(f2);
  return cfg1;
}

/* hf_random_model(c, seed) exported into the scratch folder: the weights
 * the config cases are read against. */
static inline void hf_export_random(coda_context ctx, const coda_model_config *c, uint64_t seed) {
  coda_model *m = hf_random_model(ctx, c, seed);
  CHECK(coda_hf_export(ctx, m, test_dir) == CODA_OK);
  coda_model_destroy(m);
}

/* The import of the scratch folder gives want, an error with msg in its
 * message (what names the case in a failure's message). */
static inline void hf_expect(coda_context ctx, const char *what, coda_status want,
                             const char *msg) {
  coda_model *m = NULL;
  coda_status s = coda_hf_import(ctx, test_dir, CODA_ENGINE_REFERENCE, &m);
  CHECK_MSG(s == want && (want == CODA_OK || strstr(coda_last_error(ctx), msg)),
            "%s: status %s, message '%s' (wanted %s with '%s')", what, coda_status_string(s),
            s ? coda_last_error(ctx) : "", coda_status_string(want), msg);
  CHECK(want == CODA_OK ? m != NULL : m == NULL);
  coda_model_destroy(m);
}

/* config.json := json over the folder's weights: hf_expect. */
static inline void config_case(coda_context ctx, const char *json, coda_status want,
                               const char *msg) {
  write_text("config.json", json);
  hf_expect(ctx, json, want, msg);
}

#endif
