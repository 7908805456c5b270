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

/* The same arithmetic with every state value held in bf16: w, m and v
 * are read as bf16 values (held in floats here, in uint16 on the device)
 * and each result is rounded stochastically (base/bf16_round.h) with the
 * bits of its flat index base + i, so the stored values stay bf16. */
void coda_adamw_update_bf16(const coda_adamw *o, int64_t t, double lr, int decay, uint64_t seed,
                            size_t base, float *w, const float *g, float *m, float *v, size_t n) {
  const double b1 = o->beta1, b2 = o->beta2;
  const double c1 = 1.0 - pow(b1, (double)t), c2 = 1.0 - pow(b2, (double)t);
  const double shrink = decay ? 1.0 - lr * o->weight_decay : 1.0;
  const int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < (int64_t)n; i++) {
    const uint64_t at = (uint64_t)base + (uint64_t)i;
    double gi = g[i];
    double mi = b1 * m[i] + (1.0 - b1) * gi;
    double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
    double wi = (double)w[i] * shrink;
    wi -= lr * (mi / c1) / (sqrt(vi / c2) + o->eps);
    m[i] = coda_bf16_widen(coda_bf16_sr((float)mi, coda_bf16_sr_bits(seed, t, at, 1)));
    v[i] = coda_bf16_widen(coda_bf16_sr((float)vi, coda_bf16_sr_bits(seed, t, at, 2)));
    w[i] = coda_bf16_widen(coda_bf16_sr((float)wi, coda_bf16_sr_bits(seed, t, at, 0)));
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
