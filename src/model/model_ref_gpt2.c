/* Reference engine: GPT-2's layer (pre-LayerNorm), forward and backward,
 * on model_ref.c's host GEMMs and attention, in fp32 storage with the
 * LayerNorm statistics, GELU and softmax in double:
 *   h1 = LN(x; g1, b1);  qkv = h1 Wqkvᵀ + bqkv  (rows [Q heads][K heads][V heads])
 *   o = causal softmax(q kᵀ / sqrt(hd)) v;  x ← x + o Woᵀ + bo
 *   h2 = LN(x; g2, b2);  u = h2 Wfcᵀ + bfc;  y = gelu(u);  x ← x + y Wprojᵀ + bproj
 * with LN(x; g, b) = (x − μ) r ⊙ g + b, r = 1/sqrt(mean((x − μ)²) + eps)
 * and gelu in the tanh form (model.h). No RoPE: positions are the learned
 * wpe rows model_ref.c adds to the embedding. The residual GEMMs start
 * from x + bias and add the products in k order (the host decoder repeats
 * this); bias gradients are column sums in row order. */
#include "coda_nn.h"
#include "model/model_ref.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void coda_ref_layernorm(int nt, const float *x, const float *w, const float *b, float *h,
                        float *mu, float *rs, int64_t M, int64_t D, double eps) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D;
    double s = 0.0, ss = 0.0;
    for (int64_t k = 0; k < D; k++) s += xr[k];
    const double mean = s / (double)D;
    for (int64_t k = 0; k < D; k++) ss += ((double)xr[k] - mean) * ((double)xr[k] - mean);
    const double r = 1.0 / sqrt(ss / (double)D + eps);
    if (mu) mu[m] = (float)mean;
    if (rs) rs[m] = (float)r;
    for (int64_t k = 0; k < D; k++)
      h[m * D + k] = (float)(((double)xr[k] - mean) * r * w[k] + b[k]);
  }
}

/* √(2/π) */
#define GELU_C 0.7978845608028654

float coda_ref_gelu(float u) {
  const double x = u;
  return (float)(0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x))));
}

/* d gelu / du = (1 + t)/2 + u/2 (1 − t²) √(2/π) (1 + 3·0.044715 u²),
 * t = tanh(√(2/π)(u + 0.044715 u³)). */
double coda_ref_gelu_grad(double u) {
  const double t = tanh(GELU_C * (u + 0.044715 * u * u * u));
  return 0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * 0.044715 * u * u);
}

/* With x̂ = (x − μ) r and e = dh ⊙ g:
 *   dx = r (e − mean(e) − x̂ mean(e ⊙ x̂)),  dg = Σ_rows dh ⊙ x̂,  db = Σ_rows dh.
 * μ and r are the forward's fp32 values, so x̂ is recomputed from them. */
void coda_ref_layernorm_bwd(int nt, const float *x, const float *w, const float *mu,
                            const float *rs, const float *dh, float *dx, float *gw, float *gb,
                            int64_t M, int64_t D) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D, *d = dh + m * D;
    const double r = rs[m], mean = mu[m];
    double se = 0.0, sex = 0.0;
    for (int64_t k = 0; k < D; k++) {
      const double e = (double)d[k] * w[k], xh = ((double)xr[k] - mean) * r;
      se += e;
      sex += e * xh;
    }
    se /= (double)D;
    sex /= (double)D;
    for (int64_t k = 0; k < D; k++) {
      const double e = (double)d[k] * w[k], xh = ((double)xr[k] - mean) * r;
      dx[m * D + k] += (float)(r * (e - se - xh * sex));
    }
  }
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) {
      gw[k] += (float)((double)dh[m * D + k] * (((double)x[m * D + k] - mu[m]) * rs[m]));
      gb[k] += dh[m * D + k];
    }
}

/* Rows of y (M x N) set to the bias b (N). */
static void fill_bias(float *y, const float *b, int64_t M, int64_t N) {
  for (int64_t m = 0; m < M; m++) memcpy(y + m * N, b, (size_t)N * sizeof *y);
}

/* g (N) += the column sums of dy (M x N), in row order. */
static void bias_grad(float *g, const float *dy, int64_t M, int64_t N) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) g[n] += dy[m * N + n];
}

#define NAME(buf, fmt) snprintf(buf, sizeof buf, "layers.%d." fmt, li)

int coda_ref_gpt2_layer_forward(const ref_pass *p, int li) {
  ref_state *r = p->r;
  const coda_model_config *c = p->c;
  const int nt = p->nt, H = p->H, hd = p->hd;
  const int64_t M = p->M, D = p->D, F = p->F, nq = p->nq;
  char w[96], b[96];
  layer_acts *a = &r->l[li];
  NAME(w, "attention_norm.weight"); NAME(b, "attention_norm.bias");
  coda_ref_layernorm(nt, a->xa, PW(w), PW(b), a->h1, a->mu1, a->r1, M, D, c->norm_eps);
  NAME(w, "attention.wqkv.weight"); NAME(b, "attention.wqkv.bias");
  fill_bias(a->qkv, PW(b), M, nq);
  if (coda_ref_mm_abt(nt, r, a->qkv, a->h1, PW(w), M, nq, D, 1)) return 1;
  coda_ref_attn_fwd(nt, a->qkv, a->P, a->o, p->B, p->T, H, p->Hk, hd, nq,
                    1.0 / sqrt((double)hd), 0);
  NAME(w, "attention.wo.weight"); NAME(b, "attention.wo.bias");
  const float *bo = PW(b);
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) a->xf[m * D + k] = a->xa[m * D + k] + bo[k];
  if (coda_ref_mm_abt(nt, r, a->xf, a->o, PW(w), M, D, (int64_t)H * hd, 1)) return 1;
  NAME(w, "ffn_norm.weight"); NAME(b, "ffn_norm.bias");
  coda_ref_layernorm(nt, a->xf, PW(w), PW(b), a->h2, a->mu2, a->r2, M, D, c->norm_eps);
  NAME(w, "feed_forward.wfc.weight"); NAME(b, "feed_forward.wfc.bias");
  fill_bias(a->z, PW(b), M, F);
  if (coda_ref_mm_abt(nt, r, a->z, a->h2, PW(w), M, F, D, 1)) return 1;
  for (int64_t i = 0; i < M * F; i++) a->y[i] = coda_ref_gelu(a->z[i]);
  float *xo = li + 1 < c->layers ? r->l[li + 1].xa : r->xL;
  NAME(w, "feed_forward.wproj.weight"); NAME(b, "feed_forward.wproj.bias");
  const float *bp = PW(b);
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) xo[m * D + k] = a->xf[m * D + k] + bp[k];
  if (coda_ref_mm_abt(nt, r, xo, a->y, PW(w), M, D, F, 1)) return 1;
  return 0;
}

void coda_ref_gpt2_layer_backward(const ref_pass *p, int li) {
  ref_state *r = p->r;
  const int nt = p->nt, H = p->H, hd = p->hd;
  const int64_t M = p->M, D = p->D, F = p->F, nq = p->nq, qd = (int64_t)H * hd;
  char w[96], b[96];
  layer_acts *a = &r->l[li];
  float *du = r->dz; /* M x F of its M x 2F */
  /* MLP: x_out = xf + gelu(u) Wprojᵀ + bproj */
  NAME(w, "feed_forward.wproj.weight"); NAME(b, "feed_forward.wproj.bias");
  bias_grad(PG(b), r->dx, M, D);
  coda_ref_mm_atb(nt, PG(w), r->dx, a->y, D, F, M);
  coda_ref_mm_ab(nt, r->dy, r->dx, PW(w), M, F, D, 0);
  for (int64_t i = 0; i < M * F; i++) du[i] = (float)((double)r->dy[i] * coda_ref_gelu_grad(a->z[i]));
  NAME(w, "feed_forward.wfc.weight"); NAME(b, "feed_forward.wfc.bias");
  bias_grad(PG(b), du, M, F);
  coda_ref_mm_atb(nt, PG(w), du, a->h2, F, D, M);
  coda_ref_mm_ab(nt, r->dh, du, PW(w), M, D, F, 0);
  NAME(w, "ffn_norm.weight"); NAME(b, "ffn_norm.bias");
  coda_ref_layernorm_bwd(nt, a->xf, PW(w), a->mu2, a->r2, r->dh, r->dx, PG(w), PG(b), M, D);
  /* attention: xf = xa + o Woᵀ + bo */
  NAME(w, "attention.wo.weight"); NAME(b, "attention.wo.bias");
  bias_grad(PG(b), r->dx, M, D);
  coda_ref_mm_atb(nt, PG(w), r->dx, a->o, D, qd, M);
  coda_ref_mm_ab(nt, r->dO, r->dx, PW(w), M, qd, D, 0);
  coda_ref_attn_bwd(nt, a->qkv, a->P, r->dO, r->dqkv, p->B, p->T, H, p->Hk, hd, nq,
                    1.0 / sqrt((double)hd), 0);
  NAME(w, "attention.wqkv.weight"); NAME(b, "attention.wqkv.bias");
  bias_grad(PG(b), r->dqkv, M, nq);
  coda_ref_mm_atb(nt, PG(w), r->dqkv, a->h1, nq, D, M);
  coda_ref_mm_ab(nt, r->dh, r->dqkv, PW(w), M, D, nq, 0);
  NAME(w, "attention_norm.weight"); NAME(b, "attention_norm.bias");
  coda_ref_layernorm_bwd(nt, a->xa, PW(w), a->mu1, a->r1, r->dh, r->dx, PG(w), PG(b), M, D);
}
