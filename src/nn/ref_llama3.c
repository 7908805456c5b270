/* Unfused reference of the Llama-3 block and head (see ref_llama3.h). */
#include "coda_nn.h"
#include "nn/ref_llama3.h"

#include "base/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI_D 3.14159265358979323846

typedef struct rnd { int low; } rnd;

/* activation boundary */
static void ract(rnd r, double *a, int64_t n) {
  if (r.low)
    for (int64_t i = 0; i < n; i++) a[i] = coda_round_to(CODA_BF16, a[i]);
}
/* statistics and weight gradients */
static void rstat(rnd r, double *a, int64_t n) {
  if (r.low)
    for (int64_t i = 0; i < n; i++) a[i] = coda_round_to(CODA_F32, a[i]);
}

/* out (M x N) = a (M x K) . w^T, w (N x K) */
static void linear(double *out, const double *a, const double *w, int64_t M, int64_t N,
                   int64_t K) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += a[m * K + k] * w[n * K + k];
      out[m * N + n] = s;
    }
}
/* out (M x K) = g (M x N) . w, w (N x K) */
static void linear_dx(double *out, const double *g, const double *w, int64_t M, int64_t N,
                      int64_t K) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < K; k++) {
      double s = 0;
      for (int64_t n = 0; n < N; n++) s += g[m * N + n] * w[n * K + k];
      out[m * K + k] = s;
    }
}
/* dw (N x K) = g^T (N x M) . a (M x K) */
static void linear_dw(double *dw, const double *g, const double *a, int64_t M, int64_t N,
                      int64_t K) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      double s = 0;
      for (int64_t m = 0; m < M; m++) s += g[m * N + n] * a[m * K + k];
      dw[n * K + k] = s;
    }
}

/* y = x / sqrt(mean(x^2) + eps) * w; r = 1 / sqrt(mean(x^2) + eps) */
static void rmsnorm(rnd rd, double eps, double *y, double *r, const double *x, const double *w,
                    int64_t M, int64_t D) {
  for (int64_t m = 0; m < M; m++) {
    double ss = 0;
    for (int64_t k = 0; k < D; k++) ss += x[m * D + k] * x[m * D + k];
    r[m] = 1.0 / sqrt(ss / (double)D + eps);
  }
  rstat(rd, r, M);
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) y[m * D + k] = x[m * D + k] * r[m] * w[k];
  ract(rd, y, M * D);
}

/* Backward of y = x r w: dx_j = r w_j dy_j - r^3 x_j / D * sum_k dy_k w_k x_k;
 * dw_j += sum_m dy_j x_j r. dx is written (not added). */
static void rmsnorm_bwd(double *dx, double *dw, const double *dy, const double *x,
                        const double *r, const double *w, int64_t M, int64_t D) {
  for (int64_t k = 0; k < D; k++) dw[k] = 0;
  for (int64_t m = 0; m < M; m++) {
    double s = 0;
    for (int64_t k = 0; k < D; k++) s += dy[m * D + k] * w[k] * x[m * D + k];
    double r3 = r[m] * r[m] * r[m];
    for (int64_t k = 0; k < D; k++) {
      dx[m * D + k] = r[m] * w[k] * dy[m * D + k] - r3 * x[m * D + k] * s / (double)D;
      dw[k] += dy[m * D + k] * x[m * D + k] * r[m];
    }
  }
}

static double ref_eps(const coda_llama_config *c) { return c->norm_eps == 0.0 ? 1e-5 : c->norm_eps; }

/* Inverse frequency of pair j, written as transformers writes it for
 * rope_type default, linear and llama3 (a wavelength test per band). */
static double ref_inv_freq(const coda_llama_config *c, int64_t j) {
  double inv = 1.0 / pow(c->rope_theta, (double)(2 * j) / (double)c->head_dim);
  const coda_rope_scaling *s = &c->rope;
  if (s->type == CODA_ROPE_LINEAR) return inv / s->factor;
  if (s->type != CODA_ROPE_LLAMA3) return inv;
  double wavelen = 2.0 * PI_D / inv;
  double low_wavelen = s->original_max_position / s->low_freq_factor;
  double high_wavelen = s->original_max_position / s->high_freq_factor;
  double scaled = wavelen > low_wavelen ? inv / s->factor : inv;
  if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
    double smooth = (s->original_max_position / wavelen - s->low_freq_factor) /
                    (s->high_freq_factor - s->low_freq_factor);
    scaled = (1.0 - smooth) * scaled / s->factor + smooth * scaled;
  }
  return scaled;
}

/* Half-split RoPE on the Q and K heads of packed rows (M x NQKV), rotation
 * by +theta (sign = +1) or its inverse (sign = -1): the pair is
 * (x_j, x_{j + hd/2}), theta = t * inv_freq_j (base^(-2j/hd), scaled). */
static void rope_half(const coda_llama_config *c, double *q, int64_t M, int sign) {
  int64_t hd = c->head_dim, half = hd / 2, nqkv = (c->n_heads + 2 * c->n_kv_heads) * hd;
  int64_t nheads = c->n_heads + c->n_kv_heads;
  for (int64_t m = 0; m < M; m++) {
    double t = (double)(m % c->seq);
    for (int64_t h = 0; h < nheads; h++)
      for (int64_t j = 0; j < half; j++) {
        double th = sign * t * ref_inv_freq(c, j);
        double cs = cos(th), sn = sin(th);
        double *a = &q[m * nqkv + h * hd + j], *b = &q[m * nqkv + h * hd + j + half];
        double x0 = *a, x1 = *b;
        *a = x0 * cs - x1 * sn;
        *b = x0 * sn + x1 * cs;
      }
  }
}

/* Causal GQA attention forward; p (B, HQ heads, T, T) probabilities kept. */
static void attention(const coda_llama_config *c, const double *qkv, double *o, double *p) {
  int64_t B = c->batch, T = c->seq, hd = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
  int64_t nqkv = (Hq + 2 * Hkv) * hd, grp = Hq / Hkv;
  double sc = 1.0 / sqrt((double)hd);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t kh = Hq + h / grp, vh = Hq + Hkv + h / grp;
      for (int64_t i = 0; i < T; i++) {
        const double *qi = &qkv[(b * T + i) * nqkv + h * hd];
        double *pi = &p[((b * Hq + h) * T + i) * T];
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; j++) {
          if (j > i) { pi[j] = 0; continue; }
          const double *kj = &qkv[(b * T + j) * nqkv + kh * hd];
          double s = 0;
          for (int64_t d = 0; d < hd; d++) s += qi[d] * kj[d];
          pi[j] = s * sc;
          if (pi[j] > mx) mx = pi[j];
        }
        double den = 0;
        for (int64_t j = 0; j <= i; j++) den += (pi[j] = exp(pi[j] - mx));
        for (int64_t j = 0; j <= i; j++) pi[j] /= den;
        double *oi = &o[(b * T + i) * Hq * hd + h * hd];
        for (int64_t d = 0; d < hd; d++) {
          double s = 0;
          for (int64_t j = 0; j <= i; j++) s += pi[j] * qkv[(b * T + j) * nqkv + vh * hd + d];
          oi[d] = s;
        }
      }
    }
}

static void attention_bwd(const coda_llama_config *c, const double *qkv, const double *p,
                          const double *dout, double *dqkv, double *dp) {
  int64_t B = c->batch, T = c->seq, hd = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
  int64_t nqkv = (Hq + 2 * Hkv) * hd, grp = Hq / Hkv;
  double sc = 1.0 / sqrt((double)hd);
  memset(dqkv, 0, sizeof(double) * (size_t)(B * T * nqkv));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t kh = Hq + h / grp, vh = Hq + Hkv + h / grp;
      for (int64_t i = 0; i < T; i++) {
        const double *pi = &p[((b * Hq + h) * T + i) * T];
        const double *doi = &dout[(b * T + i) * Hq * hd + h * hd];
        double dot = 0;
        for (int64_t j = 0; j <= i; j++) {
          double s = 0;
          for (int64_t d = 0; d < hd; d++) s += doi[d] * qkv[(b * T + j) * nqkv + vh * hd + d];
          dp[j] = s;
          dot += pi[j] * s;
        }
        for (int64_t j = 0; j <= i; j++) {
          double ds = pi[j] * (dp[j] - dot) * sc;
          for (int64_t d = 0; d < hd; d++) {
            dqkv[(b * T + i) * nqkv + h * hd + d] += ds * qkv[(b * T + j) * nqkv + kh * hd + d];
            dqkv[(b * T + j) * nqkv + kh * hd + d] += ds * qkv[(b * T + i) * nqkv + h * hd + d];
            dqkv[(b * T + j) * nqkv + vh * hd + d] += pi[j] * doi[d];
          }
        }
      }
    }
}

static double silu(double g) { return g / (1.0 + exp(-g)); }
static double dsilu(double g) {
  double s = 1.0 / (1.0 + exp(-g));
  return s * (1.0 + g * (1.0 - s));
}

int ref_llama_block(const coda_llama_config *c, coda_dtype act, const ref_llama_weights *w,
                    const double *x, double *x_out, const double *dx_out, double *dx,
                    ref_llama_weights *grad) {
  rnd rd = {act != CODA_F64};
  const int64_t M = c->batch * c->seq, D = c->dim, F = c->ffn_dim, hd = c->head_dim;
  const int64_t HQ = c->n_heads * hd, NQKV = (c->n_heads + 2 * c->n_kv_heads) * hd;
  const int64_t T = c->seq;
  int ok = 1;
#define ALLOC(name, n) double *name = calloc((size_t)(n), sizeof(double)); if (!name) ok = 0
  ALLOC(r1, M); ALLOC(n1, M * D); ALLOC(qkv, M * NQKV); ALLOC(o, M * HQ);
  ALLOC(P, c->batch * c->n_heads * T * T); ALLOC(ao, M * D); ALLOC(x1, M * D);
  ALLOC(r2, M); ALLOC(n2, M * D); ALLOC(g, M * F); ALLOC(u, M * F); ALLOC(a, M * F);
  ALLOC(mo, M * D);
  ALLOC(da, M * F); ALLOC(dg, M * F); ALLOC(du, M * F); ALLOC(dn, M * D); ALLOC(tmp, M * D);
  ALLOC(dx1, M * D); ALLOC(dO, M * HQ); ALLOC(dqkv, M * NQKV); ALLOC(dp, T);
#undef ALLOC
  if (ok) {
    /* forward */
    rmsnorm(rd, ref_eps(c), n1, r1, x, w->wn1, M, D);
    linear(qkv, n1, w->wqkv, M, NQKV, D);
    ract(rd, qkv, M * NQKV);
    rope_half(c, qkv, M, +1);
    ract(rd, qkv, M * NQKV);
    attention(c, qkv, o, P);
    ract(rd, o, M * HQ);
    linear(ao, o, w->wo, M, D, HQ);
    ract(rd, ao, M * D);
    for (int64_t i = 0; i < M * D; i++) x1[i] = x[i] + ao[i];
    ract(rd, x1, M * D);
    rmsnorm(rd, ref_eps(c), n2, r2, x1, w->wn2, M, D);
    linear(g, n2, w->wgate, M, F, D);
    linear(u, n2, w->wup, M, F, D);
    ract(rd, g, M * F);
    ract(rd, u, M * F);
    for (int64_t i = 0; i < M * F; i++) a[i] = silu(g[i]) * u[i];
    ract(rd, a, M * F);
    linear(mo, a, w->wd, M, D, F);
    ract(rd, mo, M * D);
    for (int64_t i = 0; i < M * D; i++) x_out[i] = x1[i] + mo[i];
    ract(rd, x_out, M * D);
  }
  if (ok && dx_out) {
    /* MLP */
    linear_dx(da, dx_out, w->wd, M, D, F);
    ract(rd, da, M * F);
    linear_dw(grad->wd, dx_out, a, M, D, F);
    rstat(rd, grad->wd, D * F);
    for (int64_t i = 0; i < M * F; i++) {
      dg[i] = da[i] * u[i] * dsilu(g[i]);
      du[i] = da[i] * silu(g[i]);
    }
    ract(rd, dg, M * F);
    ract(rd, du, M * F);
    linear_dx(dn, dg, w->wgate, M, F, D);
    linear_dx(tmp, du, w->wup, M, F, D);
    for (int64_t i = 0; i < M * D; i++) dn[i] += tmp[i];
    ract(rd, dn, M * D);
    linear_dw(grad->wgate, dg, n2, M, F, D);
    linear_dw(grad->wup, du, n2, M, F, D);
    rstat(rd, grad->wgate, F * D);
    rstat(rd, grad->wup, F * D);
    rmsnorm_bwd(tmp, grad->wn2, dn, x1, r2, w->wn2, M, D);
    rstat(rd, grad->wn2, D);
    ract(rd, tmp, M * D);
    for (int64_t i = 0; i < M * D; i++) dx1[i] = dx_out[i] + tmp[i];
    ract(rd, dx1, M * D);
    /* attention */
    linear_dx(dO, dx1, w->wo, M, D, HQ);
    ract(rd, dO, M * HQ);
    linear_dw(grad->wo, dx1, o, M, D, HQ);
    rstat(rd, grad->wo, D * HQ);
    attention_bwd(c, qkv, P, dO, dqkv, dp);
    ract(rd, dqkv, M * NQKV);
    rope_half(c, dqkv, M, -1);
    ract(rd, dqkv, M * NQKV);
    linear_dx(dn, dqkv, w->wqkv, M, NQKV, D);
    ract(rd, dn, M * D);
    linear_dw(grad->wqkv, dqkv, n1, M, NQKV, D);
    rstat(rd, grad->wqkv, NQKV * D);
    rmsnorm_bwd(tmp, grad->wn1, dn, x, r1, w->wn1, M, D);
    rstat(rd, grad->wn1, D);
    ract(rd, tmp, M * D);
    for (int64_t i = 0; i < M * D; i++) dx[i] = dx1[i] + tmp[i];
    ract(rd, dx, M * D);
  }
  free(r1); free(n1); free(qkv); free(o); free(P); free(ao); free(x1); free(r2); free(n2);
  free(g); free(u); free(a); free(mo); free(da); free(dg); free(du); free(dn); free(tmp);
  free(dx1); free(dO); free(dqkv); free(dp);
  return ok ? 0 : -1;
}

int ref_llama_head(const coda_llama_config *c, coda_dtype act, const double *wnf,
                   const double *wout, const double *x, const int32_t *targets, double *loss,
                   double *row_loss, double *dx, double *dwnf, double *dwout) {
  rnd rd = {act != CODA_F64};
  const int64_t M = c->batch * c->seq, D = c->dim, V = c->vocab;
  int ok = 1;
  double *r = calloc((size_t)M, sizeof(double)), *n = calloc((size_t)(M * D), sizeof(double));
  double *l = calloc((size_t)(M * V), sizeof(double)), *lse = calloc((size_t)M, sizeof(double));
  double *dn = calloc((size_t)(M * D), sizeof(double));
  if (!r || !n || !l || !lse || !dn) ok = 0;
  if (ok) {
    rmsnorm(rd, ref_eps(c), n, r, x, wnf, M, D);
    linear(l, n, wout, M, V, D);
    ract(rd, l, M * V);
    double sum = 0, cnt = 0;
    for (int64_t m = 0; m < M; m++) {
      double mx = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; v++) mx = fmax(mx, l[m * V + v]);
      for (int64_t v = 0; v < V; v++) s += exp(l[m * V + v] - mx);
      lse[m] = mx + log(s);
      rstat(rd, &lse[m], 1);
      double t = 0;
      if (targets[m] >= 0 && targets[m] < V) {
        t = lse[m] - l[m * V + targets[m]];
        cnt += 1;
      }
      sum += t;
      if (row_loss) row_loss[m] = t;
    }
    *loss = sum / (cnt > 0 ? cnt : 1);
    rstat(rd, loss, 1);
    if (dx) {
      double inv = 1.0 / (cnt > 0 ? cnt : 1);
      for (int64_t m = 0; m < M; m++) {
        int valid = targets[m] >= 0 && targets[m] < V;
        for (int64_t v = 0; v < V; v++)
          l[m * V + v] = valid ? (exp(l[m * V + v] - lse[m]) - (v == targets[m])) * inv : 0.0;
      }
      ract(rd, l, M * V); /* l now holds dlogits */
      linear_dx(dn, l, wout, M, V, D);
      ract(rd, dn, M * D);
      linear_dw(dwout, l, n, M, V, D);
      rstat(rd, dwout, V * D);
      rmsnorm_bwd(dx, dwnf, dn, x, r, wnf, M, D);
      rstat(rd, dwnf, D);
      ract(rd, dx, M * D);
    }
  }
  free(r); free(n); free(l); free(lse); free(dn);
  return ok ? 0 : -1;
}

/* The public forms (include/coda_nn.h). */
coda_status coda_llama_reference_block(const coda_llama_config *cfg, coda_dtype act,
                                       const coda_llama_ref_weights *w, const double *x,
                                       double *x_out, const double *dx_out, double *dx,
                                       coda_llama_ref_weights *grad) {
  if (!cfg || !w || !x || !x_out || (dx_out && (!dx || !grad))) return CODA_ERR_INVALID_ARGUMENT;
  return ref_llama_block(cfg, act, w, x, x_out, dx_out, dx, grad) ? CODA_ERR_OUT_OF_MEMORY
                                                                    : CODA_OK;
}

coda_status coda_llama_reference_head(const coda_llama_config *cfg, coda_dtype act,
                                      const double *wnf, const double *wout, const double *x,
                                      const int32_t *targets, double *loss, double *row_loss,
                                      double *dx, double *dwnf, double *dwout) {
  if (!cfg || !wnf || !wout || !x || !targets || !loss || (dx && (!dwnf || !dwout)))
    return CODA_ERR_INVALID_ARGUMENT;
  return ref_llama_head(cfg, act, wnf, wout, x, targets, loss, row_loss, dx, dwnf, dwout)
             ? CODA_ERR_OUT_OF_MEMORY
             : CODA_OK;
}
