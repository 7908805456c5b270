/* The checks of tensor views a run makes before any memory is touched:
 * the tiling and the domain, GEMM operands, and the tensors bound to a
 * program's arguments (each against what its signature asks, then the
 * overlap rule), with the messages that name what was wrong. */
#include "base/internal.h"

#include <stdio.h>

static int is_f64(coda_context ctx) { return ctx && ctx->opts.precision == CODA_PRECISION_F64; }

coda_status coda_check_tiling(coda_context ctx, coda_tiling t) {
  if (t.tile_m <= 0 || t.tile_m % 8 || t.tile_m > 256 || t.tile_n <= 0 || t.tile_n % 8 ||
      t.tile_n > 256)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "tiling %d x %d: tile_m and tile_n must be positive multiples of 8, at most 256",
                     t.tile_m, t.tile_n);
  return CODA_OK;
}

coda_status coda_check_domain(coda_context ctx, int64_t M, int64_t N) {
  int64_t mn;
  if (M < 0 || N < 0)
    return coda_fail(ctx, CODA_ERR_SHAPE, "negative domain %lld x %lld", (long long)M, (long long)N);
  if (!coda_mul_i64(M, N, &mn) || M > INT64_MAX / 4 || N > INT64_MAX / 4)
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "domain %lld x %lld overflows", (long long)M,
                     (long long)N);
  return CODA_OK;
}

/* f64 tensors only in exact mode. */
static coda_status check_precision_dtype(coda_context ctx, const char *what, coda_dtype t) {
  if (t == CODA_F64 && !is_f64(ctx))
    return coda_fail(ctx, CODA_ERR_DTYPE,
                     "%s: f64 tensors need an exact-mode (CODA_PRECISION_F64) context", what);
  return CODA_OK;
}

coda_status coda_check_matrix(coda_context ctx, const char *what, const coda_tensor *t) {
  coda_status s = coda_check_tensor(ctx, what, t);
  if (s) return s;
  if (t->dtype != CODA_BF16 && t->dtype != CODA_F16 && t->dtype != CODA_F32 && t->dtype != CODA_F64)
    return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s not allowed (bf16, f16, f32%s)", what,
                     coda_dtype_name(t->dtype), is_f64(ctx) ? ", f64" : "");
  return check_precision_dtype(ctx, what, t->dtype);
}

coda_status coda_check_float(coda_context ctx, const char *what, const coda_tensor *t,
                             int64_t rows, int64_t cols, int fp32) {
  coda_status s = coda_check_tensor(ctx, what, t);
  if (s) return s;
  int f64 = is_f64(ctx);
  int ok = fp32 ? t->dtype == CODA_F32 || (f64 && t->dtype == CODA_F64)
                : t->dtype == CODA_BF16 || t->dtype == CODA_F16 || t->dtype == CODA_F32 ||
                      (f64 && t->dtype == CODA_F64);
  if (!ok)
    return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s not allowed here (%s%s)", what,
                     coda_dtype_name(t->dtype), fp32 ? "f32" : "bf16, f16, f32",
                     f64 ? ", f64" : "");
  if (t->rows != rows || t->cols != cols)
    return coda_fail(ctx, CODA_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld x %lld", what,
                     (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
  return CODA_OK;
}

coda_status coda_check_shape(coda_context ctx, const char *what, const coda_tensor *t,
                             int64_t rows, int64_t cols) {
  if (t->rows != rows || t->cols != cols)
    return coda_fail(ctx, CODA_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld x %lld", what,
                     (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
  return CODA_OK;
}

coda_status coda_check_gemm(coda_context ctx, coda_transpose ta, const coda_tensor *A,
                            coda_transpose tb, const coda_tensor *B, int64_t *M, int64_t *N,
                            int64_t *K) {
  if (ta != CODA_N && ta != CODA_T)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "trans_a: bad value %d", (int)ta);
  if (tb != CODA_N && tb != CODA_T)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "trans_b: bad value %d", (int)tb);
  coda_status s;
  if ((s = coda_check_matrix(ctx, "A", A))) return s;
  if ((s = coda_check_matrix(ctx, "B", B))) return s;
  int64_t ka = ta == CODA_N ? A->cols : A->rows, kb = tb == CODA_N ? B->rows : B->cols;
  *M = ta == CODA_N ? A->rows : A->cols;
  *N = tb == CODA_N ? B->cols : B->rows;
  *K = ka;
  if (ka != kb)
    return coda_fail(ctx, CODA_ERR_SHAPE, "K mismatch: op(A) is %lld x %lld, op(B) is %lld x %lld",
                     (long long)*M, (long long)ka, (long long)kb, (long long)*N);
  return coda_check_domain(ctx, *M, *N);
}

/* One bound argument against its entry. */
static coda_status check_one(coda_context ctx, const coda_arg_check *a, int64_t M, int64_t N,
                             int tile_n) {
  if (!a->t)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s '%s' is not bound", a->noun, a->name);
  char what[64];
  snprintf(what, sizeof what, "%s '%s'", a->noun, a->name);
  const coda_tensor *t = a->t;
  coda_status s = coda_check_tensor(ctx, what, t);
  if (s) return s;
  if (a->fp_result) { /* partials and finisher results: fp32, f64 in exact mode */
    if (t->dtype != CODA_F32 && !(is_f64(ctx) && t->dtype == CODA_F64))
      return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s, expected f32%s", what,
                       coda_dtype_name(t->dtype), is_f64(ctx) ? " or f64" : "");
  } else {
    if (t->dtype != a->dtype)
      return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s, declared %s", what,
                       coda_dtype_name(t->dtype), coda_dtype_name(a->dtype));
    if ((s = check_precision_dtype(ctx, what, t->dtype))) return s;
  }
  if (a->shape)
    return coda_fail(ctx, a->shape, "%s: no valid shape for %lld x %lld with tile_n %d (odd N in "
                     "pair mode, or segment and tile_n not dividing one another)",
                     what, (long long)M, (long long)N, tile_n);
  if (a->any_cols) { /* M x T partials, T taken from the tensor */
    if (t->rows != a->rows || t->cols < 1)
      return coda_fail(ctx, CODA_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld rows (one per row "
                       "of the GEMM) and at least one column of partials", what,
                       (long long)t->rows, (long long)t->cols, (long long)a->rows);
    return CODA_OK;
  }
  return coda_check_shape(ctx, what, t, a->rows, a->cols);
}

static int same_view(const coda_tensor *a, const coda_tensor *b) {
  return a->data == b->data && a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols &&
         a->ld == b->ld;
}

/* No written tensor may overlap another written tensor or a read one,
 * except in place: an output (not accumulate) that is the very same view
 * as a tile input of the same width. Every iteration point reads all its
 * inputs before its outputs are stored, and an output of a point touches
 * only that point's position, which is exactly where the identical input
 * is read; no other point reads it (both backends, docs/language.md). */
static coda_status check_alias(coda_context ctx, const coda_arg_check *a, int n) {
  for (int i = 0; i < n; i++) {
    if (!a[i].writes) continue;
    for (int j = i + 1; j < n; j++)
      if (a[j].writes && coda_tensors_overlap(a[i].t, a[j].t))
        return coda_fail(ctx, CODA_ERR_ALIAS, "'%s' and '%s' overlap (both are written)",
                         a[i].name, a[j].name);
    for (int j = 0; j < n; j++) {
      if (a[j].writes || !coda_tensors_overlap(a[i].t, a[j].t)) continue;
      if (a[i].inplace && a[j].inplace && a[i].width == a[j].width && same_view(a[i].t, a[j].t))
        continue; /* in place */
      return coda_fail(ctx, CODA_ERR_ALIAS,
                       "'%s' (written) overlaps '%s' (read); only in place is allowed: an output "
                       "without accumulate that is the very same view (data, ld, rows, cols, "
                       "dtype) as a tile input of the same width",
                       a[i].name, a[j].name);
    }
  }
  return CODA_OK;
}

coda_status coda_check_args(coda_context ctx, const coda_arg_check *a, int n, int64_t M, int64_t N,
                            int tile_n, int alias) {
  for (int i = 0; i < n; i++) {
    if (a[i].operand) continue; /* A, B: checked as GEMM operands */
    coda_status s = check_one(ctx, &a[i], M, N, tile_n);
    if (s) return s;
  }
  return alias ? check_alias(ctx, a, n) : CODA_OK;
}
