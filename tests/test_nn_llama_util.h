/* Shared helpers of the Llama-3 tests: random data, error measures, and
 * running one built-in program with named f64/bf16/i32 bindings. */
#ifndef CODA_TEST_NN_LLAMA_UTIL_H
#define CODA_TEST_NN_LLAMA_UTIL_H

#include "coda.h"
#include "base/internal.h"
#include "nn/plan.h"
#include "check.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lt_state = 0x9e3779b97f4a7c15ull;

static inline void lt_seed(uint64_t s) { lt_state = s * 0x9e3779b97f4a7c15ull + 12345; }

/* uniform in [-1, 1) */
static inline double lt_rand(void) { return xorshift64_unit(&lt_state); }

static inline double *lt_vec(int64_t n, double scale) {
  double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = scale * lt_rand();
  return v;
}

static inline double *lt_zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

/* max |a - b| / max |b| (b the reference) */
static inline double lt_relerr(const double *a, const double *b, int64_t n) { return rel_err(a, b, n); }

static inline double lt_maxabs_diff(const double *a, const double *b, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]);
    if (!(d <= e)) e = d;
  }
  return e;
}

static inline double lt_maxabs(const double *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}

static inline coda_context lt_context(coda_precision prec) {
  coda_context c = test_context(prec, 0);
  if (!c) exit(1);
  return c;
}

/* Copies a tensor (any dtype) into doubles, row-major. */
static inline void lt_read(const coda_tensor *t, double *out) {
  for (int64_t r = 0; r < t->rows; r++)
    for (int64_t c = 0; c < t->cols; c++) out[r * t->cols + c] = coda_load(t, r, c);
}
static inline void lt_write(const coda_tensor *t, const double *in) {
  for (int64_t r = 0; r < t->rows; r++)
    for (int64_t c = 0; c < t->cols; c++) coda_store(t, r, c, in[r * t->cols + c]);
}

/* A plan tensor by name: its element count (0 when the plan has none),
 * filled from or read into doubles; a missing name ends the test. */
static inline int64_t lt_plan_count(coda_plan p, const char *name) {
  coda_tensor t;
  return coda_plan_tensor(p, name, &t) == CODA_OK ? t.rows * t.cols : 0;
}
static inline coda_tensor lt_plan_tensor(coda_plan p, const char *name) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) {
    fprintf(stderr, "FAIL: the plan has no tensor '%s'\n", name);
    exit(1);
  }
  return t;
}
static inline void lt_plan_put(coda_plan p, const char *name, const double *v) {
  const coda_tensor t = lt_plan_tensor(p, name);
  lt_write(&t, v);
}
static inline void lt_plan_get(coda_plan p, const char *name, double *v) {
  const coda_tensor t = lt_plan_tensor(p, name);
  lt_read(&t, v);
}

/* A block plan's finite-difference check. lt_block_loss: L = sum x_out *
 * dx_out after a forward with v[i] in the plan's pnames[i] (x_out kept
 * in xo_keep when given). lt_block_fd: with the gradients gnames[i] of
 * one backward read into g[i], each must be nonzero and four random
 * entries of each must match central differences of L within 1e-6 of
 * the gradient's largest value. */
static inline double lt_block_loss(coda_context ctx, coda_plan p, int np,
                                   const char *const *pnames, double *const *v,
                                   const double *dxo, int64_t nout, double *xo_keep) {
  for (int i = 0; i < np; i++) lt_plan_put(p, pnames[i], v[i]);
  if (coda_plan_run(ctx, p, CODA_PHASE_FORWARD) != CODA_OK) return NAN;
  double *xo = lt_zeros(nout), L = 0;
  lt_plan_get(p, "x_out", xo);
  for (int64_t k = 0; k < nout; k++) L += xo[k] * dxo[k];
  if (xo_keep) memcpy(xo_keep, xo, (size_t)nout * sizeof *xo);
  free(xo);
  return L;
}

static inline void lt_block_fd(coda_context ctx, coda_plan p, int np, const char *const *pnames,
                               const char *const *gnames, double *const *v, double *const *g,
                               const int64_t *n, const double *dxo, int64_t nout,
                               const char *label) {
  lt_block_loss(ctx, p, np, pnames, v, dxo, nout, NULL);
  lt_plan_put(p, "dx_out", dxo);
  coda_status s = coda_plan_run(ctx, p, CODA_PHASE_BACKWARD);
  CHECK_MSG(s == CODA_OK, "%s: backward: %s", label, coda_last_error(ctx));
  for (int i = 0; i < np; i++) lt_plan_get(p, gnames[i], g[i]);
  const double h = 1e-6;
  for (int i = 0; i < np; i++) {
    const double gmax = lt_maxabs(g[i], n[i]);
    CHECK_MSG(gmax > 0, "%s: %s is zero", label, gnames[i]);
    for (int r = 0; r < 4; r++) {
      const int64_t k = (int64_t)((lt_rand() + 1.0) * 0.5 * (double)n[i]) % n[i];
      const double t0 = v[i][k];
      v[i][k] = t0 + h;
      const double lp = lt_block_loss(ctx, p, np, pnames, v, dxo, nout, NULL);
      v[i][k] = t0 - h;
      const double lm = lt_block_loss(ctx, p, np, pnames, v, dxo, nout, NULL);
      v[i][k] = t0;
      const double fd = (lp - lm) / (2 * h), e = fabs(fd - g[i][k]) / gmax;
      CHECK_MSG(e <= 1e-6, "%s: %s[%lld]: finite difference %.10g vs %.10g (rel %.3g)", label,
                gnames[i], (long long)k, fd, g[i][k], e);
    }
  }
}

/* One run of a built-in program with its bindings. Every tensor bound
 * through lt_job is owned by the job; values are exchanged as doubles. */
#define LT_MAXB 24
typedef struct lt_job {
  coda_context ctx;
  coda_program prog;
  coda_args args;
  int n;
  char names[LT_MAXB][32];
  coda_tensor t[LT_MAXB];
  int ok;
} lt_job;

static inline void lt_job_init(lt_job *j, coda_context ctx, const char *name) {
  memset(j, 0, sizeof *j);
  j->ctx = ctx;
  j->ok = plan_builtin(ctx, name, &j->prog) == CODA_OK &&
          coda_args_create(ctx, &j->args) == CODA_OK;
  if (!j->ok) fprintf(stderr, "program %s: %s\n", name, coda_last_error(ctx));
}

/* Binds `name` to a new tensor of dtype t filled with `vals` (may be NULL:
 * zeros). Returns the tensor. */
static inline coda_tensor *lt_bind(lt_job *j, const char *name, coda_dtype dt, int64_t rows,
                            int64_t cols, const double *vals) {
  if (j->n >= LT_MAXB) return NULL;
  coda_tensor *t = &j->t[j->n];
  snprintf(j->names[j->n], 32, "%s", name);
  j->n++;
  *t = coda_tensor_2d(calloc((size_t)(rows * cols), coda_dtype_size(dt)), dt, rows, cols);
  if (vals) lt_write(t, vals);
  if (coda_args_set(j->args, name, t) != CODA_OK) j->ok = 0;
  return t;
}

/* A partial of the shape the program gives for M x N and tiling. */
static inline void lt_partial(lt_job *j, const char *name, coda_dtype dt, int64_t M, int64_t N,
                       coda_tiling tl) {
  int64_t r = 0, c = 0;
  if (coda_program_arg_shape(j->prog, name, M, N, tl.tile_m, tl.tile_n, &r, &c) != CODA_OK) {
    fprintf(stderr, "shape of %s: %s\n", name, coda_last_error(j->ctx));
    j->ok = 0;
    return;
  }
  lt_bind(j, name, dt, r, c, NULL);
}

static inline coda_tensor *lt_get(lt_job *j, const char *name) {
  for (int i = 0; i < j->n; i++)
    if (!strcmp(j->names[i], name)) return &j->t[i];
  return NULL;
}

/* Reads a bound tensor into a new double array. */
static inline double *lt_out(lt_job *j, const char *name) {
  coda_tensor *t = lt_get(j, name);
  if (!t) return lt_zeros(1);
  double *v = lt_zeros(t->rows * t->cols);
  lt_read(t, v);
  return v;
}

static inline int lt_check(lt_job *j, coda_status s, const char *what) {
  if (s != CODA_OK) {
    fprintf(stderr, "%s: %s\n", what, coda_last_error(j->ctx));
    j->ok = 0;
  }
  return s == CODA_OK;
}

static inline void lt_job_free(lt_job *j) {
  for (int i = 0; i < j->n; i++) free(j->t[i].data);
  coda_args_destroy(j->args);
  coda_program_destroy(j->prog);
  memset(j, 0, sizeof *j);
}

#endif
