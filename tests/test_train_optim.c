/* AdamW against a straightforward double implementation, the learning
 * rate schedule against its definition, gradient norm and clipping. */
#include "check.h"
#include "base/rng.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>

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

int main(void) {
  test_adamw();
  test_schedule();
  test_clip();
  return CHECK_DONE();
}
