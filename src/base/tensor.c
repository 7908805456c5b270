#include "base/internal.h"
#include "base/bf16_round.h"

#include <math.h>
#include <string.h>

const char *coda_dtype_name(coda_dtype t) {
  switch (t) {
  case CODA_BF16: return "bf16";
  case CODA_F16: return "f16";
  case CODA_F32: return "f32";
  case CODA_F64: return "f64";
  case CODA_I32: return "i32";
  }
  return "?";
}

size_t coda_dtype_size(coda_dtype t) {
  switch (t) {
  case CODA_BF16: case CODA_F16: return 2;
  case CODA_F32: case CODA_I32: return 4;
  case CODA_F64: return 8;
  }
  return 0;
}

coda_tensor coda_tensor_2d(void *data, coda_dtype dtype, int64_t rows,
                           int64_t cols) {
  coda_tensor t = {data, dtype, rows, cols, cols};
  return t;
}

bool coda_mul_i64(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0) return false;
  if (a != 0 && b > INT64_MAX / a) return false;
  *out = a * b;
  return true;
}

coda_status coda_check_tensor(coda_context ctx, const char *what,
                              const coda_tensor *t) {
  if (!t) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: null tensor", what);
  if (coda_dtype_size(t->dtype) == 0)
    return coda_fail(ctx, CODA_ERR_DTYPE, "%s: unknown dtype %d", what, (int)t->dtype);
  if (t->rows < 0 || t->cols < 0)
    return coda_fail(ctx, CODA_ERR_SHAPE, "%s: negative shape %lld x %lld", what,
                     (long long)t->rows, (long long)t->cols);
  if (t->ld < t->cols) /* ld 0 only for an empty view of 0 columns */
    return coda_fail(ctx, CODA_ERR_LAYOUT, "%s: leading dimension %lld < cols %lld",
                     what, (long long)t->ld, (long long)t->cols);
  int64_t n;
  if (!coda_mul_i64(t->rows, t->ld, &n) ||
      !coda_mul_i64(n, (int64_t)coda_dtype_size(t->dtype), &n))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "%s: %lld x %lld elements overflow", what,
                     (long long)t->rows, (long long)t->ld);
  if (t->rows > 0 && t->cols > 0 && !t->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: null data pointer", what);
  if (((uintptr_t)t->data) % coda_dtype_size(t->dtype) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT, "%s: data not aligned to its %zu-byte dtype",
                     what, coda_dtype_size(t->dtype));
  return CODA_OK;
}

void coda_tensor_extent(const coda_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  size_t es = coda_dtype_size(t->dtype);
  *lo = (uintptr_t)t->data;
  if (t->rows == 0 || t->cols == 0) {
    *hi = *lo;
    return;
  }
  *hi = *lo + (size_t)((t->rows - 1) * t->ld + t->cols) * es;
}

bool coda_tensors_overlap(const coda_tensor *a, const coda_tensor *b) {
  uintptr_t al, ah, bl, bh;
  coda_tensor_extent(a, &al, &ah);
  coda_tensor_extent(b, &bl, &bh);
  if (al == ah || bl == bh) return false;
  return al < bh && bl < ah;
}

/* bf16: the upper half of an f32, rounded to nearest even (one definition
 * with the kernels', base/bf16_round.h). */
uint16_t coda_f32_to_bf16(float f) { return coda_bf16_rne(f); }

float coda_bf16_to_f32(uint16_t h) { return coda_bf16_widen(h); }

/* IEEE half, round to nearest even, with subnormals and overflow to inf. */
uint16_t coda_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520 */
  if (absu < 0x38800000u) {                                   /* subnormal or zero */
    float a;
    memcpy(&a, &absu, 4);
    /* scale so the subnormal unit 2^-24 becomes 1, then round to even */
    float scaled = a * 16777216.0f;
    uint32_t q = (uint32_t)nearbyintf(scaled);
    return (uint16_t)(sign | q);
  }
  uint32_t mant = absu & 0x7fffffu;
  int32_t exp = (int32_t)(absu >> 23) - 127 + 15;
  uint32_t h = ((uint32_t)exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1;
  return (uint16_t)(sign | h);
}

float coda_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)mant, -24);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u;
  if (exp == 31) u = sign | 0x7f800000u | (mant << 13);
  else u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  memcpy(&f, &u, 4);
  return f;
}

double coda_round_to(coda_dtype t, double v) {
  switch (t) {
  case CODA_BF16: return coda_bf16_to_f32(coda_f32_to_bf16((float)v));
  case CODA_F16: return coda_f16_to_f32(coda_f32_to_f16((float)v));
  case CODA_F32: return (float)v;
  case CODA_I32: return (double)(int32_t)v;
  case CODA_F64: return v;
  }
  return v;
}

double coda_load(const coda_tensor *t, int64_t r, int64_t c) {
  int64_t i = r * t->ld + c;
  switch (t->dtype) {
  case CODA_BF16: return coda_bf16_to_f32(((const uint16_t *)t->data)[i]);
  case CODA_F16: return coda_f16_to_f32(((const uint16_t *)t->data)[i]);
  case CODA_F32: return ((const float *)t->data)[i];
  case CODA_F64: return ((const double *)t->data)[i];
  case CODA_I32: return ((const int32_t *)t->data)[i];
  }
  return 0;
}

void coda_store(const coda_tensor *t, int64_t r, int64_t c, double v) {
  int64_t i = r * t->ld + c;
  switch (t->dtype) {
  case CODA_BF16: ((uint16_t *)t->data)[i] = coda_f32_to_bf16((float)v); break;
  case CODA_F16: ((uint16_t *)t->data)[i] = coda_f32_to_f16((float)v); break;
  case CODA_F32: ((float *)t->data)[i] = (float)v; break;
  case CODA_F64: ((double *)t->data)[i] = v; break;
  case CODA_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
  }
}

/* The public forms (include/coda.h). */
double coda_tensor_get(const coda_tensor *t, int64_t row, int64_t col) {
  return coda_load(t, row, col);
}
void coda_tensor_set(const coda_tensor *t, int64_t row, int64_t col, double v) {
  coda_store(t, row, col, v);
}
double coda_dtype_round(coda_dtype t, double v) { return coda_round_to(t, v); }
