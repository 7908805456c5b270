/* Reference engine: Gemma 3's layer, forward and backward, on model_ref.c's
 * host GEMMs, RoPE and attention, in fp32 storage with the norms'
 * statistics, GELU and softmax in double. With N(x; w) = (x · r(x)) ⊙ (1 + w),
 * r(x) = 1/sqrt(mean(x²) + eps) (the weight is stored as w: zero is the
 * identity):
 *   h1 = N(x; w_in);  qkv = h1 Wqkvᵀ;  each q head q ← N(q; w_qn), each k
 *   head k ← N(k; w_kn) (r over the head's hd entries);  q, k rotated by
 *   RoPE with the layer's base (rope_local_theta on local layers);
 *   o = causal softmax(q kᵀ · s) v, s = attn_scalar^-1/2, a local layer's
 *   position t seeing only t - window < s <= t;
 *   a = o Woᵀ;  x ← x + N(a; w_pa)
 *   h2 = N(x; w_ffn);  z = h2 W13ᵀ;  y_f = gelu(z_2f) · z_2f+1 (GeGLU, tanh GELU);
 *   m = y W2ᵀ;  x ← x + N(m; w_pf)
 * The embedding (× sqrt(dim)), the final norm and the soft cap are
 * model_ref.c's. */
#include "coda_nn.h"
#include "model/model_ref.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void coda_ref_rmsnorm1p(int nt, const float *x, const float *w, float *h, float *rs, int64_t M,
                        int64_t D, double eps) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D;
    double ss = 0.0;
    for (int64_t k = 0; k < D; k++) ss += (double)xr[k] * xr[k];
    const float r = (float)(1.0 / sqrt(ss / (double)D + eps));
    if (rs) rs[m] = r;
    for (int64_t k = 0; k < D; k++) h[m * D + k] = xr[k] * r * (1.0f + w[k]);
  }
}

/* The backward of h = x r ⊙ g with g = 1 + w (rmsnorm_bwd's with g for w):
 *   dx += r (g ⊙ dh) − x r³ ⟨g ⊙ dh, x⟩ / D,   dw += Σ_rows dh ⊙ x r
 * (dw summed in row order: deterministic). */
void coda_ref_rmsnorm1p_bwd(int nt, const float *x, const float *w, const float *rs,
                            const float *dh, float *dx, float *gw, int64_t M, int64_t D) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D, *d = dh + m * D;
    double dot = 0.0;
    for (int64_t k = 0; k < D; k++) dot += (double)d[k] * (1.0 + (double)w[k]) * xr[k];
    const double r = rs[m], c = r * r * r * dot / (double)D;
    for (int64_t k = 0; k < D; k++)
      dx[m * D + k] += (float)(r * d[k] * (1.0 + (double)w[k]) - xr[k] * c);
  }
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) gw[k] += dh[m * D + k] * x[m * D + k] * rs[m];
}

/* xo = xi + N(a; w) per row, r of each row in rs (the post-norms). */
static void post_norm_add(int nt, const float *xi, const float *a, const float *w, float *rs,
                          float *xo, int64_t M, int64_t D, double eps) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    coda_ref_rmsnorm1p(1, a + m * D, w, xo + m * D, rs + m, 1, D, eps);
    for (int64_t k = 0; k < D; k++) xo[m * D + k] = xi[m * D + k] + xo[m * D + k];
  }
}

/* The q/k norm per head (qk0 keeps the heads before it, rqk their r). */
static void qknorm1p_fwd(int nt, float *qkv, float *qk0, float *rqk, const float *wq,
                         const float *wk, int64_t M, int nq_heads, int nh, int hd, int64_t nq,
                         double eps) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    float *row = qkv + m * nq, *keep = qk0 + m * (int64_t)nh * hd;
    memcpy(keep, row, (size_t)nh * hd * sizeof *row);
    for (int h = 0; h < nh; h++)
      coda_ref_rmsnorm1p(1, keep + (int64_t)h * hd, h < nq_heads ? wq : wk,
                         row + (int64_t)h * hd, rqk + m * nh + h, 1, hd, eps);
  }
}

#define NAME(buf, fmt) (snprintf(buf, sizeof buf, fmt, li), buf)

int coda_ref_gemma3_layer_forward(const ref_pass *p, int li) {
  ref_state *r = p->r;
  const coda_model_config *c = p->c;
  const int nt = p->nt, H = p->H, Hk = p->Hk, hd = p->hd;
  const int64_t M = p->M, D = p->D, F = p->F, nq = p->nq;
  const double eps = c->norm_eps;
  char nm[96], nk[96];
  layer_acts *a = &r->l[li];
  coda_ref_rmsnorm1p(nt, a->xa, PW(NAME(nm, "layers.%d.attention_norm.weight")), a->h1, a->r1, M,
                     D, eps);
  if (coda_ref_mm_abt(nt, r, a->qkv, a->h1, PW(NAME(nm, "layers.%d.attention.wqkv.weight")), M,
                      nq, D, 0))
    return 1;
  qknorm1p_fwd(nt, a->qkv, a->qk0, a->rqk, PW(NAME(nm, "layers.%d.attention.q_norm.weight")),
               PW(NAME(nk, "layers.%d.attention.k_norm.weight")), M, H, H + Hk, hd, nq, eps);
  coda_ref_rope(nt, a->qkv, p->B, p->T, H + Hk, hd, nq, coda_model_layer_rope_theta(c, li),
                &c->rope, 1.0);
  coda_ref_attn_fwd(nt, a->qkv, a->P, a->o, p->B, p->T, H, Hk, hd, nq, coda_model_attn_scale(c),
                    coda_model_layer_window(c, li));
  if (coda_ref_mm_abt(nt, r, a->ao, a->o, PW(NAME(nm, "layers.%d.attention.wo.weight")), M, D,
                      (int64_t)H * hd, 0))
    return 1;
  post_norm_add(nt, a->xa, a->ao, PW(NAME(nm, "layers.%d.attention.post_norm.weight")), a->rpa,
                a->xf, M, D, eps);
  coda_ref_rmsnorm1p(nt, a->xf, PW(NAME(nm, "layers.%d.ffn_norm.weight")), a->h2, a->r2, M, D,
                     eps);
  if (coda_ref_mm_abt(nt, r, a->z, a->h2, PW(NAME(nm, "layers.%d.feed_forward.w13.weight")), M,
                      2 * F, D, 0))
    return 1;
  for (int64_t i = 0; i < M * F; i++) a->y[i] = coda_ref_gelu(a->z[2 * i]) * a->z[2 * i + 1];
  if (coda_ref_mm_abt(nt, r, a->mo, a->y, PW(NAME(nm, "layers.%d.feed_forward.w2.weight")), M, D,
                      F, 0))
    return 1;
  float *xo = li + 1 < c->layers ? r->l[li + 1].xa : r->xL;
  post_norm_add(nt, a->xf, a->mo, PW(NAME(nm, "layers.%d.feed_forward.post_norm.weight")),
                a->rpf, xo, M, D, eps);
  return 0;
}

void coda_ref_gemma3_layer_backward(const ref_pass *p, int li) {
  ref_state *r = p->r;
  const coda_model_config *c = p->c;
  const int nt = p->nt, H = p->H, Hk = p->Hk, hd = p->hd;
  const int64_t M = p->M, D = p->D, F = p->F, nq = p->nq;
  char nm[96], nk[96];
  layer_acts *a = &r->l[li];
  /* MLP: x_out = xf + N(m; w_pf), m = y W2ᵀ; dh is dm, then dh2 */
  memset(r->dh, 0, (size_t)(M * D) * sizeof *r->dh);
  NAME(nm, "layers.%d.feed_forward.post_norm.weight");
  coda_ref_rmsnorm1p_bwd(nt, a->mo, PW(nm), a->rpf, r->dx, r->dh, PG(nm), M, D);
  NAME(nm, "layers.%d.feed_forward.w2.weight");
  coda_ref_mm_atb(nt, PG(nm), r->dh, a->y, D, F, M);
  coda_ref_mm_ab(nt, r->dy, r->dh, PW(nm), M, F, D, 0);
  /* y = gelu(g) u: dg = dy u gelu'(g), du = dy gelu(g) */
  for (int64_t i = 0; i < M * F; i++) {
    const double g = a->z[2 * i], u = a->z[2 * i + 1], d = r->dy[i];
    r->dz[2 * i] = (float)(d * u * coda_ref_gelu_grad(g));
    r->dz[2 * i + 1] = (float)(d * (double)coda_ref_gelu(a->z[2 * i]));
  }
  NAME(nm, "layers.%d.feed_forward.w13.weight");
  coda_ref_mm_atb(nt, PG(nm), r->dz, a->h2, 2 * F, D, M);
  coda_ref_mm_ab(nt, r->dh, r->dz, PW(nm), M, D, 2 * F, 0);
  NAME(nm, "layers.%d.ffn_norm.weight");
  coda_ref_rmsnorm1p_bwd(nt, a->xf, PW(nm), a->r2, r->dh, r->dx, PG(nm), M, D);
  /* attention: xf = xa + N(a; w_pa), a = o Woᵀ */
  memset(r->dh, 0, (size_t)(M * D) * sizeof *r->dh);
  NAME(nm, "layers.%d.attention.post_norm.weight");
  coda_ref_rmsnorm1p_bwd(nt, a->ao, PW(nm), a->rpa, r->dx, r->dh, PG(nm), M, D);
  NAME(nm, "layers.%d.attention.wo.weight");
  coda_ref_mm_atb(nt, PG(nm), r->dh, a->o, D, (int64_t)H * hd, M);
  coda_ref_mm_ab(nt, r->dO, r->dh, PW(nm), M, (int64_t)H * hd, D, 0);
  coda_ref_attn_bwd(nt, a->qkv, a->P, r->dO, r->dqkv, p->B, p->T, H, Hk, hd, nq,
                    coda_model_attn_scale(c), coda_model_layer_window(c, li));
  coda_ref_rope(nt, r->dqkv, p->B, p->T, H + Hk, hd, nq, coda_model_layer_rope_theta(c, li),
                &c->rope, -1.0);
  NAME(nm, "layers.%d.attention.q_norm.weight");
  NAME(nk, "layers.%d.attention.k_norm.weight");
  coda_ref_qknorm_bwd(nt, r->dqkv, a->qk0, a->rqk, PW(nm), PW(nk), PG(nm), PG(nk), M, H,
                      H + Hk, hd, nq, 1.0);
  NAME(nm, "layers.%d.attention.wqkv.weight");
  coda_ref_mm_atb(nt, PG(nm), r->dqkv, a->h1, nq, D, M);
  coda_ref_mm_ab(nt, r->dh, r->dqkv, PW(nm), M, D, nq, 0);
  NAME(nm, "layers.%d.attention_norm.weight");
  coda_ref_rmsnorm1p_bwd(nt, a->xa, PW(nm), a->r1, r->dh, r->dx, PG(nm), M, D);
}
