/* The unfused GPT-2 reference: its hand-written backward against central
 * finite differences of its forward, for the input and every parameter
 * (sampled entries), and its LayerNorm against the definition. */
#include "check.h"
#include "nn/ref_gpt2.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { return xorshift64star_unit(&rng_state); }

static double loss(const gpt2_ref_dims *dm, const gpt2_ref_params *w,
                   const double *x, const double *R, gpt2_ref_acts *a) {
  gpt2_ref_forward(dm, w, x, a);
  long n = (long)dm->B * dm->T * dm->d;
  double s = 0;
  for (long i = 0; i < n; i++) s += a->y[i] * R[i];
  return s;
}

int main(void) {
  gpt2_ref_dims dm = {2, 8, 32, 4, 64, 1e-5, CODA_F64};
  long M = (long)dm.B * dm.T, d = dm.d;
  gpt2_ref_params w, gr;
  gpt2_ref_acts a;
  CHECK(gpt2_ref_params_alloc(&dm, &w) == 0);
  CHECK(gpt2_ref_params_alloc(&dm, &gr) == 0);
  CHECK(gpt2_ref_acts_alloc(&dm, &a) == 0);
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    long n;
    const char *name;
    double *v = gpt2_ref_param(&w, &dm, i, &n, &name);
    int is_gamma = strstr(name, "gamma") != NULL;
    int is_matrix = name[0] == 'W';
    for (long j = 0; j < n; j++)
      v[j] = is_gamma ? 1.0 + 0.3 * urand() : is_matrix ? urand() * 0.35 : 0.2 * urand();
  }
  double *x = malloc(sizeof(double) * M * d), *R = malloc(sizeof(double) * M * d);
  double *dx = malloc(sizeof(double) * M * d);
  for (long i = 0; i < M * d; i++) {
    x[i] = 1.5 * urand() + 0.3;
    R[i] = urand();
  }
  loss(&dm, &w, x, R, &a);
  gpt2_ref_backward(&dm, &w, &a, R, dx, &gr);

  /* LayerNorm forward against its definition, spelled differently. */
  {
    double maxerr = 0;
    for (long m = 0; m < M; m++) {
      double s = 0, s2 = 0;
      for (long k = 0; k < d; k++) s += x[m * d + k];
      for (long k = 0; k < d; k++) s2 += (x[m * d + k] - s / d) * (x[m * d + k] - s / d);
      for (long k = 0; k < d; k++) {
        double v = (x[m * d + k] - s / d) / sqrt(s2 / d + dm.eps) * w.g1[k] + w.b1[k];
        double e = fabs(v - a.a[m * d + k]);
        if (e > maxerr) maxerr = e;
      }
    }
    CHECK_MSG(maxerr < 1e-12, "layernorm err %g", maxerr);
  }

  const double h = 1e-5;
  int nsamples = 12;
  /* input */
  {
    double maxrel = 0;
    for (int s = 0; s < nsamples; s++) {
      long j = (long)((urand() * 0.5 + 0.5) * (M * d - 1));
      double old = x[j];
      x[j] = old + h;
      double lp = loss(&dm, &w, x, R, &a);
      x[j] = old - h;
      double lm = loss(&dm, &w, x, R, &a);
      x[j] = old;
      double fd = (lp - lm) / (2 * h);
      double rel = fabs(fd - dx[j]) / (fabs(fd) + 1e-3);
      if (rel > maxrel) maxrel = rel;
    }
    CHECK_MSG(maxrel < 1e-6, "dx: finite differences rel err %g", maxrel);
  }
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    long n;
    const char *name;
    double *v = gpt2_ref_param(&w, &dm, i, &n, &name);
    double *g = gpt2_ref_param(&gr, &dm, i, NULL, NULL);
    double maxrel = 0, gnorm = 0;
    for (long j = 0; j < n; j++) gnorm = fmax(gnorm, fabs(g[j]));
    for (int s = 0; s < nsamples; s++) {
      long j = (long)((urand() * 0.5 + 0.5) * (n - 1));
      double old = v[j];
      v[j] = old + h;
      double lp = loss(&dm, &w, x, R, &a);
      v[j] = old - h;
      double lm = loss(&dm, &w, x, R, &a);
      v[j] = old;
      double fd = (lp - lm) / (2 * h);
      double rel = fabs(fd - g[j]) / (fabs(fd) + 1e-3 * gnorm);
      if (rel > maxrel) maxrel = rel;
    }
    CHECK_MSG(maxrel < 1e-6, "%s: finite differences rel err %g", name, maxrel);
    CHECK_MSG(gnorm > 1e-3, "%s: gradient is (near) zero", name);
  }
  free(x);
  free(R);
  free(dx);
  gpt2_ref_params_free(&w);
  gpt2_ref_params_free(&gr);
  gpt2_ref_acts_free(&a);
  return CHECK_DONE();
}
