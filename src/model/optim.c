/* AdamW with decoupled weight decay, the learning-rate schedule and global
 * gradient-norm clipping. Everything is fp32 storage with the update
 * arithmetic in double per element, so the result does not depend on the
 * thread count (elements are independent). */
#include "model/model.h"
#include "base/bf16_round.h"

#include <math.h>
#include <omp.h>

void coda_adamw_update(const coda_adamw *o, int64_t t, double lr, int decay, float *w,
                       const float *g, float *m, float *v, size_t n) {
  const double b1 = o->beta1, b2 = o->beta2;
  const double c1 = 1.0 - pow(b1, (double)t), c2 = 1.0 - pow(b2, (double)t);
  const double shrink = decay ? 1.0 - lr * o->weight_decay : 1.0;
  const int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < (int64_t)n; i++) {
    double gi = g[i];
    double mi = b1 * m[i] + (1.0 - b1) * gi;
    double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
    m[i] = (float)mi;
    v[i] = (float)vi;
    double wi = (double)w[i] * shrink;
    wi -= lr * (mi / c1) / (sqrt(vi / c2) + o->eps);
    w[i] = (float)wi;
  }
}

/* AdamW on bf16 state. The state holds 8 significant bits, so the update
 * runs in fp32 (with the bias corrections folded into two constants):
 *   m' = b1·m + (1−b1)·g;  v' = b2·v + (1−b2)·g·g
 *   w' = w·shrink − (lr/c1)·m' / (√(v'·(1/c2)) + eps)
 * each operation rounded once, in this order, as the CUDA kernel does
 * (coda_bf16_adamw_consts), so both give the same bits; each result is
 * then rounded stochastically to bf16 (base/bf16_round.h) with the bits of
 * its flat index base + i. */
void coda_adamw_update_bf16(const coda_adamw *o, int64_t t, double lr, int decay, uint64_t seed,
                            size_t base, float *w, const float *g, float *m, float *v, size_t n) {
  const double c1 = 1.0 - pow(o->beta1, (double)t), c2 = 1.0 - pow(o->beta2, (double)t);
  float k[8];
  coda_bf16_adamw_consts(o->beta1, o->beta2, c1, c2, lr, o->eps,
                         decay ? 1.0 - lr * o->weight_decay : 1.0, k);
  const int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < (int64_t)n; i++) {
    const uint64_t r = coda_bf16_sr_hash(seed, t, (uint64_t)base + (uint64_t)i);
    const float gi = g[i];
    const float mi = k[0] * m[i] + k[1] * gi;
    const float vi = k[2] * v[i] + (k[3] * gi) * gi;
    const float wi = w[i] * k[6] - (k[4] * mi) / (sqrtf(vi * k[5]) + k[7]);
    w[i] = coda_bf16_widen(coda_bf16_sr(wi, (uint32_t)r));
    m[i] = coda_bf16_widen(coda_bf16_sr(mi, (uint32_t)(r >> 16)));
    v[i] = coda_bf16_widen(coda_bf16_sr(vi, (uint32_t)(r >> 32)));
  }
}

void coda_round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = coda_bf16_widen(coda_bf16_rne(x[i]));
}

double coda_lr_schedule(int64_t s, int64_t warmup, int64_t total, double lr, double min_ratio) {
  if (s < 0) s = 0;
  if (warmup > 0 && s < warmup) return lr * (double)(s + 1) / (double)warmup;
  const double lo = lr * min_ratio;
  int64_t span = total - 1 - warmup; /* steps warmup .. total-1 decay */
  if (span <= 0) return lr;
  double p = (double)(s - warmup) / (double)span;
  if (p >= 1.0) return lo;
  return lo + 0.5 * (lr - lo) * (1.0 + cos(3.14159265358979323846 * p));
}

double coda_grad_norm(const float *g, size_t n) {
  /* Fixed-order blocks summed in a fixed order: same result for any
   * number of threads. */
  enum { BLK = 4096 };
  int64_t nb = (int64_t)((n + BLK - 1) / BLK);
  double total = 0.0;
  double part[64];
  for (int64_t b0 = 0; b0 < nb; b0 += 64) {
    int64_t cnt = nb - b0 < 64 ? nb - b0 : 64;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < cnt; b++) {
      size_t lo = (size_t)(b0 + b) * BLK, hi = lo + BLK < n ? lo + BLK : n;
      double s = 0.0;
      for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
      part[b] = s;
    }
    for (int64_t b = 0; b < cnt; b++) total += part[b];
  }
  return sqrt(total);
}

double coda_clip_grad(float *g, size_t n, double norm, double max_norm) {
  if (!(max_norm > 0.0) || !(norm > max_norm)) return 1.0;
  double f = max_norm / (norm + 1e-6);
  for (size_t i = 0; i < n; i++) g[i] = (float)(g[i] * f);
  return f;
}
