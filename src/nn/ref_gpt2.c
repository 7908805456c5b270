/* Unfused double reference of the GPT-2 block; see ref_gpt2.h. */
#include "nn/ref_gpt2.h"
#include "base/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double rnd(const gpt2_ref_dims *dm, double v) {
  return dm->round == CODA_F64 ? v : coda_round_to(dm->round, v);
}
static void rnd_all(const gpt2_ref_dims *dm, double *v, long n) {
  if (dm->round == CODA_F64) return;
  for (long i = 0; i < n; i++) v[i] = coda_round_to(dm->round, v[i]);
}

double gpt2_ref_gelu(double x) {
  const double k = 0.79788456080286535588 /* sqrt(2/pi) */;
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

double gpt2_ref_dgelu(double x) {
  const double k = 0.79788456080286535588 /* sqrt(2/pi) */;
  double t = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

void gpt2_ref_layernorm(int M, int D, const double *x, const double *g,
                        const double *b, double eps, double *y, double *mu,
                        double *rstd) {
  for (int m = 0; m < M; m++) {
    const double *xr = x + (long)m * D;
    double s = 0;
    for (int k = 0; k < D; k++) s += xr[k];
    double mean = s / D, v = 0;
    for (int k = 0; k < D; k++) v += (xr[k] - mean) * (xr[k] - mean);
    double r = 1.0 / sqrt(v / D + eps);
    for (int k = 0; k < D; k++) y[(long)m * D + k] = (xr[k] - mean) * r * g[k] + b[k];
    mu[m] = mean;
    rstd[m] = r;
  }
}

/* Direct chain rule through xhat = (x - mu) r, r = (var + eps)^-1/2. */
void gpt2_ref_layernorm_bwd(int M, int D, const double *x, const double *g,
                            const double *mu, const double *rstd,
                            const double *dy, double *dx, double *dg,
                            double *db) {
  for (int m = 0; m < M; m++) {
    const double *xr = x + (long)m * D, *dyr = dy + (long)m * D;
    double r = rstd[m];
    double dvar = 0, dmu = 0;
    for (int k = 0; k < D; k++) {
      double xh = (xr[k] - mu[m]) * r;
      dg[k] += dyr[k] * xh;
      db[k] += dyr[k];
      double dxh = dyr[k] * g[k];
      dvar += dxh * (xr[k] - mu[m]) * (-0.5) * r * r * r;
      dmu += -dxh * r;
    }
    for (int k = 0; k < D; k++)
      dx[(long)m * D + k] =
          dyr[k] * g[k] * r + dvar * 2.0 * (xr[k] - mu[m]) / D + dmu / D;
  }
}

/* y (M x N) = x (M x K) W^T (W: N x K) + bias */
static void linear(int M, int N, int K, const double *x, const double *W,
                   const double *bias, double *y) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = bias ? bias[n] : 0.0;
      for (int k = 0; k < K; k++) s += x[(long)m * K + k] * W[(long)n * K + k];
      y[(long)m * N + n] = s;
    }
}

/* Backward of linear: dx = dy W (overwritten, if dx), dW += dy^T x, db += colsum dy. */
static void linear_bwd(int M, int N, int K, const double *x, const double *W,
                       const double *dy, double *dx, double *dW, double *db) {
  if (dx)
    for (int m = 0; m < M; m++)
      for (int k = 0; k < K; k++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += dy[(long)m * N + n] * W[(long)n * K + k];
        dx[(long)m * K + k] = s;
      }
  for (int n = 0; n < N; n++) {
    for (int k = 0; k < K; k++) {
      double s = 0;
      for (int m = 0; m < M; m++) s += dy[(long)m * N + n] * x[(long)m * K + k];
      dW[(long)n * K + k] += s;
    }
    double s = 0;
    for (int m = 0; m < M; m++) s += dy[(long)m * N + n];
    db[n] += s;
  }
}

/* Causal multi-head attention on packed qkv (M x 3d): o (M x d). */
static void attention(const gpt2_ref_dims *dm, const double *qkv, double *o) {
  int d = dm->d, H = dm->H, hd = d / H, T = dm->T, ld = 3 * d;
  double scale = 1.0 / sqrt((double)hd);
  double *p = malloc(sizeof(double) * T);
  for (int bt = 0; bt < dm->B; bt++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + (long)(bt * T + t) * ld + h * hd;
        double mx = -INFINITY;
        for (int j = 0; j <= t; j++) {
          const double *k = qkv + (long)(bt * T + j) * ld + d + h * hd;
          double s = 0;
          for (int c = 0; c < hd; c++) s += q[c] * k[c];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        double z = 0;
        for (int j = 0; j <= t; j++) z += (p[j] = exp(p[j] - mx));
        double *or = o + (long)(bt * T + t) * d + h * hd;
        for (int c = 0; c < hd; c++) {
          double s = 0;
          for (int j = 0; j <= t; j++)
            s += p[j] / z * qkv[(long)(bt * T + j) * ld + 2 * d + h * hd + c];
          or[c] = s;
        }
      }
  free(p);
}

/* dqkv (overwritten) from do. */
static void attention_bwd(const gpt2_ref_dims *dm, const double *qkv,
                          const double *dout, double *dqkv) {
  int d = dm->d, H = dm->H, hd = d / H, T = dm->T, ld = 3 * d;
  double scale = 1.0 / sqrt((double)hd);
  memset(dqkv, 0, sizeof(double) * (size_t)dm->B * T * ld);
  double *p = malloc(sizeof(double) * T), *dp = malloc(sizeof(double) * T);
  for (int bt = 0; bt < dm->B; bt++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        long rq = (long)(bt * T + t) * ld;
        const double *q = qkv + rq + h * hd;
        const double *dor = dout + (long)(bt * T + t) * d + h * hd;
        double mx = -INFINITY;
        for (int j = 0; j <= t; j++) {
          const double *k = qkv + (long)(bt * T + j) * ld + d + h * hd;
          double s = 0;
          for (int c = 0; c < hd; c++) s += q[c] * k[c];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        double z = 0;
        for (int j = 0; j <= t; j++) z += (p[j] = exp(p[j] - mx));
        double pdp = 0;
        for (int j = 0; j <= t; j++) {
          p[j] /= z;
          long rj = (long)(bt * T + j) * ld;
          double s = 0;
          for (int c = 0; c < hd; c++) {
            s += dor[c] * qkv[rj + 2 * d + h * hd + c];
            dqkv[rj + 2 * d + h * hd + c] += p[j] * dor[c]; /* dV */
          }
          dp[j] = s;
          pdp += p[j] * s;
        }
        for (int j = 0; j <= t; j++) {
          double ds = p[j] * (dp[j] - pdp) * scale;
          long rj = (long)(bt * T + j) * ld;
          for (int c = 0; c < hd; c++) {
            dqkv[rq + h * hd + c] += ds * qkv[rj + d + h * hd + c];  /* dQ */
            dqkv[rj + d + h * hd + c] += ds * q[c];                 /* dK */
          }
        }
      }
  free(p);
  free(dp);
}

static long rows_of(const gpt2_ref_dims *dm) { return (long)dm->B * dm->T; }

int gpt2_ref_acts_alloc(const gpt2_ref_dims *dm, gpt2_ref_acts *a) {
  long M = rows_of(dm), d = dm->d, f = dm->ffn;
  memset(a, 0, sizeof *a);
  a->x0 = calloc(M * d, sizeof(double));
  a->mu1 = calloc(M, sizeof(double));
  a->r1 = calloc(M, sizeof(double));
  a->a = calloc(M * d, sizeof(double));
  a->qkv = calloc(M * 3 * d, sizeof(double));
  a->o = calloc(M * d, sizeof(double));
  a->x1 = calloc(M * d, sizeof(double));
  a->mu2 = calloc(M, sizeof(double));
  a->r2 = calloc(M, sizeof(double));
  a->b = calloc(M * d, sizeof(double));
  a->u = calloc(M * f, sizeof(double));
  a->g = calloc(M * f, sizeof(double));
  a->y = calloc(M * d, sizeof(double));
  double **all[] = {&a->x0, &a->mu1, &a->r1, &a->a, &a->qkv, &a->o, &a->x1,
                    &a->mu2, &a->r2, &a->b, &a->u, &a->g, &a->y};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!*all[i]) {
      gpt2_ref_acts_free(a);
      return -1;
    }
  return 0;
}

void gpt2_ref_acts_free(gpt2_ref_acts *a) {
  double *all[] = {a->x0, a->mu1, a->r1, a->a, a->qkv, a->o, a->x1,
                   a->mu2, a->r2, a->b, a->u, a->g, a->y};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  memset(a, 0, sizeof *a);
}

double *gpt2_ref_param(const gpt2_ref_params *p, const gpt2_ref_dims *dm, int i,
                       long *len, const char **name) {
  long d = dm->d, f = dm->ffn;
  struct { double *v; long n; const char *name; } t[GPT2_REF_NPARAMS] = {
      {p->g1, d, "ln1.gamma"},   {p->b1, d, "ln1.beta"},
      {p->Wqkv, 3 * d * d, "Wqkv"}, {p->bqkv, 3 * d, "bqkv"},
      {p->Wo, d * d, "Wo"},      {p->bo, d, "bo"},
      {p->g2, d, "ln2.gamma"},   {p->b2, d, "ln2.beta"},
      {p->Wfc, f * d, "Wfc"},    {p->bfc, f, "bfc"},
      {p->Wproj, d * f, "Wproj"}, {p->bproj, d, "bproj"}};
  if (i < 0 || i >= GPT2_REF_NPARAMS) return NULL;
  if (len) *len = t[i].n;
  if (name) *name = t[i].name;
  return t[i].v;
}

int gpt2_ref_params_alloc(const gpt2_ref_dims *dm, gpt2_ref_params *p) {
  memset(p, 0, sizeof *p);
  double **slots[GPT2_REF_NPARAMS] = {&p->g1, &p->b1, &p->Wqkv, &p->bqkv,
                                      &p->Wo, &p->bo, &p->g2, &p->b2,
                                      &p->Wfc, &p->bfc, &p->Wproj, &p->bproj};
  gpt2_ref_params sizes_only = *p;
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    long n;
    gpt2_ref_param(&sizes_only, dm, i, &n, NULL);
    *slots[i] = calloc((size_t)n, sizeof(double));
    if (!*slots[i]) {
      gpt2_ref_params_free(p);
      return -1;
    }
  }
  return 0;
}

void gpt2_ref_params_free(gpt2_ref_params *p) {
  double *all[GPT2_REF_NPARAMS] = {p->g1, p->b1, p->Wqkv, p->bqkv, p->Wo, p->bo,
                                   p->g2, p->b2, p->Wfc, p->bfc, p->Wproj, p->bproj};
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) free(all[i]);
  memset(p, 0, sizeof *p);
}

void gpt2_ref_forward(const gpt2_ref_dims *dm, const gpt2_ref_params *w,
                      const double *x0, gpt2_ref_acts *a) {
  int M = (int)rows_of(dm), d = dm->d, f = dm->ffn;
  memcpy(a->x0, x0, sizeof(double) * M * d);
  gpt2_ref_layernorm(M, d, x0, w->g1, w->b1, dm->eps, a->a, a->mu1, a->r1);
  rnd_all(dm, a->a, (long)M * d);
  linear(M, 3 * d, d, a->a, w->Wqkv, w->bqkv, a->qkv);
  rnd_all(dm, a->qkv, (long)M * 3 * d);
  attention(dm, a->qkv, a->o);
  rnd_all(dm, a->o, (long)M * d);
  linear(M, d, d, a->o, w->Wo, w->bo, a->x1);
  for (long i = 0; i < (long)M * d; i++) a->x1[i] = rnd(dm, a->x1[i] + x0[i]);
  gpt2_ref_layernorm(M, d, a->x1, w->g2, w->b2, dm->eps, a->b, a->mu2, a->r2);
  rnd_all(dm, a->b, (long)M * d);
  linear(M, f, d, a->b, w->Wfc, w->bfc, a->u);
  for (long i = 0; i < (long)M * f; i++) {
    a->g[i] = rnd(dm, gpt2_ref_gelu(a->u[i]));
    a->u[i] = rnd(dm, a->u[i]);
  }
  linear(M, d, f, a->g, w->Wproj, w->bproj, a->y);
  for (long i = 0; i < (long)M * d; i++) a->y[i] = rnd(dm, a->y[i] + a->x1[i]);
}

void gpt2_ref_backward(const gpt2_ref_dims *dm, const gpt2_ref_params *w,
                       const gpt2_ref_acts *a, const double *dy, double *dx0,
                       gpt2_ref_params *grad) {
  long M = rows_of(dm), d = dm->d, f = dm->ffn;
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    long n;
    double *v = gpt2_ref_param(grad, dm, i, &n, NULL);
    memset(v, 0, sizeof(double) * (size_t)n);
  }
  double *du = malloc(sizeof(double) * M * f);
  double *dln = malloc(sizeof(double) * M * d);
  double *dx1 = malloc(sizeof(double) * M * d);
  double *dout = malloc(sizeof(double) * M * d);
  double *dqkv = malloc(sizeof(double) * M * 3 * d);
  /* y = x1 + gelu(u) Wproj^T + bproj */
  linear_bwd((int)M, (int)d, (int)f, a->g, w->Wproj, dy, du, grad->Wproj, grad->bproj);
  for (long i = 0; i < M * f; i++) du[i] = rnd(dm, du[i] * gpt2_ref_dgelu(a->u[i]));
  /* u = b Wfc^T + bfc, b = LN2(x1) */
  linear_bwd((int)M, (int)f, (int)d, a->b, w->Wfc, du, dln, grad->Wfc, grad->bfc);
  gpt2_ref_layernorm_bwd((int)M, (int)d, a->x1, w->g2, a->mu2, a->r2, dln, dx1,
                         grad->g2, grad->b2);
  for (long i = 0; i < M * d; i++) dx1[i] = rnd(dm, dx1[i] + dy[i]);
  /* x1 = x0 + o Wo^T + bo */
  linear_bwd((int)M, (int)d, (int)d, a->o, w->Wo, dx1, dout, grad->Wo, grad->bo);
  rnd_all(dm, dout, M * d);
  attention_bwd(dm, a->qkv, dout, dqkv);
  rnd_all(dm, dqkv, M * 3 * d);
  /* qkv = a Wqkv^T + bqkv, a = LN1(x0) */
  linear_bwd((int)M, (int)(3 * d), (int)d, a->a, w->Wqkv, dqkv, dln, grad->Wqkv,
             grad->bqkv);
  gpt2_ref_layernorm_bwd((int)M, (int)d, a->x0, w->g1, a->mu1, a->r1, dln, dx0,
                         grad->g1, grad->b1);
  for (long i = 0; i < M * d; i++) dx0[i] = rnd(dm, dx0[i] + dx1[i]);
  free(du);
  free(dln);
  free(dx1);
  free(dout);
  free(dqkv);
}
