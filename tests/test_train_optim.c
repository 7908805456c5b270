/* AdamW against a straightforward double implementation, the learning
 * rate schedule against its definition, gradient norm and clipping. */
#include "check.h"
#include "base/bf16_round.h"
#include "base/rng.h"
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_adamw(void) {
  enum { N = 257, STEPS = 7 };
  uint64_t r = 31337;
  for (int decay = 0; decay <= 1; decay++) {
    coda_adamw o = {0.9, 0.95, 1e-8, 0.1, 0};
    float w[N], g[N], m[N] = {0}, v[N] = {0};
    double W[N], M[N] = {0}, V[N] = {0};
    for (int i = 0; i < N; i++) W[i] = w[i] = (float)(coda_rng_uniform(&r) * 2 - 1);
    double maxerr = 0.0;
    for (int t = 1; t <= STEPS; t++) {
      double lr = 1e-2 * t;
      for (int i = 0; i < N; i++) g[i] = (float)((coda_rng_uniform(&r) * 2 - 1) * (i % 5 + 1));
      coda_adamw_update(&o, t, lr, decay, w, g, m, v, N);
      for (int i = 0; i < N; i++) {
        /* PyTorch AdamW order: decay, moments, bias-corrected step. */
        if (decay) W[i] -= lr * o.weight_decay * W[i];
        M[i] = o.beta1 * M[i] + (1 - o.beta1) * g[i];
        V[i] = o.beta2 * V[i] + (1 - o.beta2) * (double)g[i] * g[i];
        double mh = M[i] / (1 - pow(o.beta1, t)), vh = V[i] / (1 - pow(o.beta2, t));
        W[i] -= lr * mh / (sqrt(vh) + o.eps);
        double e = fabs(W[i] - w[i]);
        if (e > maxerr) maxerr = e;
      }
    }
    CHECK_MSG(maxerr < 1e-5, "decay %d: max |w - ref| = %g", decay, maxerr);
    /* the first step moves every weight by about lr against its gradient sign */
  }
  /* decay alone (zero gradients, first step) shrinks w by (1 - lr·wd) */
  coda_adamw o = {0.9, 0.999, 1e-8, 0.5, 1};
  float w[4], g[4] = {0}, m[4] = {0}, v[4] = {0};
  for (int i = 0; i < 4; i++) w[i] = (float)(coda_rng_uniform(&r) + 0.5);
  float w0[4];
  for (int i = 0; i < 4; i++) w0[i] = w[i];
  coda_adamw_update(&o, 1, 0.1, 1, w, g, m, v, 4);
  for (int i = 0; i < 4; i++) CHECK_NEAR(w[i], w0[i] * (1 - 0.1 * 0.5), 1e-6);
}

static void test_schedule(void) {
  const double lr = 3e-3, ratio = 0.1;
  const int64_t warm = 10, total = 100;
  for (int64_t s = 0; s < total + 5; s++) {
    double want;
    if (s < warm) {
      want = lr * (double)(s + 1) / warm;
    } else {
      double p = (double)(s - warm) / (double)(total - 1 - warm);
      if (p > 1) p = 1;
      want = lr * ratio + (lr - lr * ratio) * (cos(acos(-1.0) * p) + 1) / 2;
    }
    CHECK_NEAR(coda_lr_schedule(s, warm, total, lr, ratio), want, 1e-15);
  }
  CHECK_NEAR(coda_lr_schedule(warm - 1, warm, total, lr, ratio), lr, 1e-15);
  CHECK_NEAR(coda_lr_schedule(warm, warm, total, lr, ratio), lr, 1e-15);
  CHECK_NEAR(coda_lr_schedule(total - 1, warm, total, lr, ratio), lr * ratio, 1e-15);
  /* monotone non-increasing after warm-up */
  for (int64_t s = warm; s + 1 < total; s++)
    CHECK(coda_lr_schedule(s + 1, warm, total, lr, ratio) <= coda_lr_schedule(s, warm, total, lr, ratio));
  /* no warm-up */
  CHECK_NEAR(coda_lr_schedule(0, 0, 50, lr, ratio), lr, 1e-15);
}

static void test_clip(void) {
  enum { N = 10000 };
  float *g = malloc(N * sizeof *g);
  uint64_t r = 5;
  double ss = 0;
  for (int i = 0; i < N; i++) {
    g[i] = (float)(coda_rng_uniform(&r) * 2 - 1);
    ss += (double)g[i] * g[i];
  }
  double norm = coda_grad_norm(g, N);
  CHECK_NEAR(norm, sqrt(ss), 1e-9 * sqrt(ss));
  double f = coda_clip_grad(g, N, norm, 1.0);
  CHECK_NEAR(f, 1.0 / (norm + 1e-6), 1e-12);
  CHECK_NEAR(coda_grad_norm(g, N), 1.0, 1e-5);
  CHECK(coda_clip_grad(g, N, 0.5, 1.0) == 1.0); /* below the limit: untouched */
  CHECK(coda_clip_grad(g, N, 5.0, 0.0) == 1.0); /* clipping off */
  free(g);
}


/* The two bf16 values around x, computed in double from x's exponent:
 * lo <= x < hi (x finite, not itself a bf16 value when lo < x). */
static void bf16_neighbours(float x, double *lo, double *hi) {
  const double ax = fabs((double)x);
  int e;
  frexp(ax, &e); /* ax = f * 2^e, f in [0.5, 1) */
  if (e < -125) e = -125;                     /* subnormal bf16 spacing */
  const double ulp = ldexp(1.0, e - 8);       /* 8 significant bits */
  const double a = floor(ax / ulp) * ulp, b = a + ulp;
  if (x >= 0) *lo = a, *hi = b;
  else *lo = -b, *hi = -a;
}

static int is_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0xffffu) == 0;
}

/* Round to nearest even and stochastic rounding against their
 * definitions; the stochastic rounding is unbiased. */
static void test_bf16_rounding(void) {
  uint64_t r = 99;
  int bad_rne = 0, bad_sr = 0;
  for (int k = 0; k < 20000; k++) {
    const float x = (float)((coda_rng_uniform(&r) * 2 - 1) * ldexp(1.0, (int)(k % 40) - 20));
    double lo, hi;
    bf16_neighbours(x, &lo, &hi);
    const double got = coda_bf16_widen(coda_bf16_rne(x));
    double want = fabs(x - lo) < fabs(hi - x) ? lo : fabs(x - lo) > fabs(hi - x) ? hi : NAN;
    if (isnan(want)) { /* a tie: the even one */
      const float flo = (float)lo;
      uint32_t u;
      memcpy(&u, &flo, sizeof u);
      want = ((u >> 16) & 1) ? hi : lo;
    }
    if (lo == x) want = x;
    bad_rne += got != want;
    const double sr = coda_bf16_widen(coda_bf16_sr(x, coda_bf16_sr_bits(7, 3, (uint64_t)k, 0)));
    bad_sr += lo == x ? sr != x : (sr != lo && sr != hi);
  }
  CHECK_MSG(bad_rne == 0, "%d values rounded to nearest wrongly", bad_rne);
  CHECK_MSG(bad_sr == 0, "%d stochastic roundings not to a neighbour", bad_sr);
  /* unbiased: the mean over many draws of one value approaches it, where
   * rounding to nearest is off by (x - lo) */
  const float xs[3] = {1.0f + 0.3f / 128, -3.0f - 0.9f * 2 / 128, 1e-3f * (1 + 0.77f / 128)};
  for (int q = 0; q < 3; q++) {
    enum { K = 1 << 16 };
    double lo, hi, sum = 0;
    bf16_neighbours(xs[q], &lo, &hi);
    for (int k = 0; k < K; k++)
      sum += coda_bf16_widen(coda_bf16_sr(xs[q], coda_bf16_sr_bits(11, 1, (uint64_t)k, 2)));
    const double sd = (hi - lo) / 2 / sqrt((double)K); /* at most */
    CHECK_MSG(fabs(sum / K - xs[q]) < 5 * sd, "mean of %d roundings of %.9g: %.9g", K, xs[q],
              sum / K);
    CHECK(fabs(coda_bf16_widen(coda_bf16_rne(xs[q])) - xs[q]) > 20 * sd);
  }
  /* infinities and NaN keep their class; the largest values may round to inf */
  CHECK(isinf(coda_bf16_widen(coda_bf16_sr(INFINITY, 0xffff))));
  CHECK(isnan(coda_bf16_widen(coda_bf16_sr(NAN, 0x1234))));
  CHECK(isnan(coda_bf16_widen(coda_bf16_rne(NAN))));
  CHECK(coda_bf16_widen(coda_bf16_sr(FLT_MAX, 0)) < INFINITY);
  /* the bits: deterministic, and different for another seed, step, index
   * or stream */
  CHECK(coda_bf16_sr_bits(1, 2, 3, 0) == coda_bf16_sr_bits(1, 2, 3, 0));
  int same = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    const uint32_t b = coda_bf16_sr_bits(1, 2, i, 0);
    same += b == coda_bf16_sr_bits(2, 2, i, 0);
    same += b == coda_bf16_sr_bits(1, 3, i, 0);
    same += b == coda_bf16_sr_bits(1, 2, i + 1, 0);
    same += b == coda_bf16_sr_bits(1, 2, i, 1);
  }
  CHECK_MSG(same < 10, "%d collisions of the rounding bits in 4000", same);
}

/* AdamW on bf16 state: every stored value stays bf16; it follows the
 * double-precision AdamW within bf16's resolution; and an update smaller
 * than half a bf16 step, which rounding to nearest would drop every time,
 * moves the weights by its size on average. */
static void test_adamw_bf16(void) {
  enum { N = 4096, STEPS = 5 };
  uint64_t r = 4242;
  coda_adamw o = {0.9, 0.95, 1e-8, 0.1, 0};
  float *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g), *m = calloc(N, sizeof *m),
        *v = calloc(N, sizeof *v);
  double *W = malloc(N * sizeof *W), *M = calloc(N, sizeof *M), *V = calloc(N, sizeof *V);
  for (int i = 0; i < N; i++) w[i] = (float)(coda_rng_uniform(&r) * 2 - 1);
  coda_round_bf16(w, N);
  for (int i = 0; i < N; i++) W[i] = w[i];
  int not_bf16 = 0;
  double maxerr = 0.0;
  for (int t = 1; t <= STEPS; t++) {
    const double lr = 1e-2;
    for (int i = 0; i < N; i++) g[i] = (float)(coda_rng_uniform(&r) * 2 - 1);
    coda_adamw_update_bf16(&o, t, lr, 1, 5, 1000, w, g, m, v, N);
    for (int i = 0; i < N; i++) {
      not_bf16 += !is_bf16(w[i]) + !is_bf16(m[i]) + !is_bf16(v[i]);
      W[i] -= lr * o.weight_decay * W[i];
      M[i] = o.beta1 * M[i] + (1 - o.beta1) * g[i];
      V[i] = o.beta2 * V[i] + (1 - o.beta2) * (double)g[i] * g[i];
      W[i] -= lr * (M[i] / (1 - pow(o.beta1, t))) / (sqrt(V[i] / (1 - pow(o.beta2, t))) + o.eps);
      const double e = fabs(W[i] - w[i]) / ldexp(1.0, -8); /* bf16 steps of a value below 1 */
      if (e > maxerr) maxerr = e;
    }
  }
  CHECK_MSG(not_bf16 == 0, "%d stored values are not bf16", not_bf16);
  CHECK_MSG(maxerr < STEPS + 0.5, "weights %g bf16 steps from the double AdamW after %d steps", maxerr,
            STEPS);
  /* the same seed gives the same bits; the base index shifts the bits */
  float *w2 = malloc(N * sizeof *w2), *m2 = calloc(N, sizeof *m2), *v2 = calloc(N, sizeof *v2);
  for (int i = 0; i < N; i++) w[i] = w2[i] = 1.0f, g[i] = 1.0f, m[i] = v[i] = 0;
  coda_adamw_update_bf16(&o, 1, 1e-4, 0, 9, 0, w, g, m, v, N);
  coda_adamw_update_bf16(&o, 1, 1e-4, 0, 9, 0, w2, g, m2, v2, N);
  CHECK(!memcmp(w, w2, N * sizeof *w) && !memcmp(m, m2, N * sizeof *m));
  /* a step of 1e-4 at 1.0 (a bf16 step there is 2^-7 below, 2^-8 above
   * 1): the mean moves by 1e-4; rounding to nearest would leave 1.0 */
  double mean = 0;
  for (int i = 0; i < N; i++) mean += w[i];
  mean /= N;
  CHECK_MSG(fabs(mean - (1.0 - 1e-4)) < 4e-5, "mean weight after a 1e-4 step: %.7f", mean);
  for (int i = 0; i < N; i++) w2[i] = 1.0f, m2[i] = v2[i] = 0;
  coda_adamw_update_bf16(&o, 1, 1e-4, 0, 9, 1, w2, g, m2, v2, N);
  CHECK(memcmp(w, w2, N * sizeof *w) != 0);
  free(w); free(g); free(m); free(v); free(W); free(M); free(V); free(w2); free(m2); free(v2);
}

int main(void) {
  test_adamw();
  test_bf16_rounding();
  test_adamw_bf16();
  test_schedule();
  test_clip();
  return CHECK_DONE();
}
