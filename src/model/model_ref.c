/* Reference engine: the model families of family.c (Llama 3, Qwen3, and
 * GPT-2 whose layer is model_ref_gpt2.c's)
 * written out directly on the host in fp32 (sums of squares, softmax and
 * log-sum-exp in double). It is the
 * unfused definition the plan engine is checked against, and it runs where
 * the plans are not available. Every loop that accumulates runs in a fixed
 * order per output element, so results do not depend on the thread count
 * (resume is bit-exact).
 *
 * Per layer, with r(x) = 1/sqrt(mean(x^2) + eps):
 *   h1 = x · r(x) ⊙ wn_attn;  qkv = h1 Wqkvᵀ;
 *   (Qwen3: each q head q ← q · r(q) ⊙ w_qnorm, each k head likewise with
 *   w_knorm, r over the head's hd entries);  q, k rotated by RoPE
 *   (pairs (2j, 2j+1) of each head, θ = t · f_j, f_j = theta^(−2j/hd) scaled as
 *   coda_rope_inv_freq says, by +θ);
 *   o = causal softmax(q kᵀ / sqrt(hd)) v (GQA: q head h uses kv head
 *   h / (Hq/Hkv); hd need not be D / Hq; a Llama/Mistral sliding_window w:
 *   position t sees keys t − w < s <= t only);  x ← x + o Woᵀ
 *   h2 = x · r(x) ⊙ wn_ffn;  z = h2 W13ᵀ;  y_f = silu(z_2f) · z_2f+1;
 *   x ← x + y W2ᵀ
 * Head: logits = (x · r(x) ⊙ wn) Woutᵀ; loss = mean over valid targets of
 * lse(logits) − logits[target]. GPT-2: x starts as wte[token] + wpe[t],
 * and the head's norm is its LayerNorm (with bias). Gemma 3 (its layer in
 * model_ref_gemma3.c): x starts as wte[token] · sqrt(dim) (fp32), the head's
 * norm scales by (1 + w), and with logit_softcap c the logits are
 * c · tanh(logits / c) before the loss. */
#include "coda_nn.h"
#include "model/model_ref.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void coda_ref_free(coda_model *m) {
  ref_state *r = *coda_model_ref_slot(m);
  if (!r) return;
  free(r->l);
  free(r->block);
  free(r->scratch);
  free(r);
  *coda_model_ref_slot(m) = NULL;
}

static coda_status ensure(coda_context ctx, coda_model *m, int B, int T, ref_state **out) {
  ref_state *r = *coda_model_ref_slot(m);
  if (r && r->B == B && r->T == T) { *out = r; return CODA_OK; }
  coda_ref_free(m);
  const coda_model_config *c = coda_model_cfg(m);
  size_t M = (size_t)B * T, D = c->dim, F = c->ffn, V = c->vocab, H = c->heads;
  size_t hd = (size_t)coda_model_head_dim(c), nq = (H + 2 * (size_t)c->kv_heads) * hd;
  size_t qd = H * hd, nqk = coda_family_of(c->family)->qk_norm ? H + (size_t)c->kv_heads : 0;
  const size_t ng = coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3; /* post-norms */
  size_t per = M * D /*xa*/ + M + M * D + M * nq + (size_t)B * H * T * T + M * qd + M * D + M +
               M * D + M * 2 * F + M * F + M * nqk * hd + M * nqk + 2 * M + ng * (2 * M * D + 2 * M);
  const size_t ncap = c->logit_softcap > 0.0 ? M * V : 0;
  size_t tot = per * (size_t)c->layers + M * D + 2 * M + M * D + M * V + M * D * 2 + M * nq +
               M * qd + M * F + M * 2 * F + ncap;
  r = calloc(1, sizeof *r);
  if (!r) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  r->l = calloc((size_t)c->layers, sizeof *r->l);
  r->block = malloc(tot * sizeof(float));
  if (!r->l || !r->block) {
    free(r->l); free(r->block); free(r);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "cannot allocate %zu MiB of activations",
                     tot * 4 >> 20);
  }
  float *p = r->block;
#define TAKE(dst, n) do { dst = p; p += (n); } while (0)
  for (int i = 0; i < c->layers; i++) {
    layer_acts *a = &r->l[i];
    TAKE(a->xa, M * D); TAKE(a->r1, M); TAKE(a->h1, M * D); TAKE(a->qkv, M * nq);
    TAKE(a->P, (size_t)B * H * T * T); TAKE(a->o, M * qd); TAKE(a->xf, M * D); TAKE(a->r2, M);
    TAKE(a->h2, M * D); TAKE(a->z, M * 2 * F); TAKE(a->y, M * F);
    TAKE(a->qk0, M * nqk * hd); TAKE(a->rqk, M * nqk); TAKE(a->mu1, M); TAKE(a->mu2, M);
    TAKE(a->ao, ng * M * D); TAKE(a->mo, ng * M * D); TAKE(a->rpa, ng * M); TAKE(a->rpf, ng * M);
  }
  TAKE(r->xL, M * D); TAKE(r->rf, M); TAKE(r->muf, M); TAKE(r->hf, M * D); TAKE(r->logits, M * V);
  TAKE(r->dx, M * D); TAKE(r->dh, M * D); TAKE(r->dqkv, M * nq); TAKE(r->dO, M * qd);
  TAKE(r->dy, M * F); TAKE(r->dz, M * 2 * F); TAKE(r->capped, ncap);
#undef TAKE
  r->B = B;
  r->T = T;
  *coda_model_ref_slot(m) = r;
  *out = r;
  return CODA_OK;
}

static float *scratch(ref_state *r, size_t n) {
  if (n > r->scratch_n) {
    free(r->scratch);
    r->scratch = malloc(n * sizeof(float));
    r->scratch_n = r->scratch ? n : 0;
  }
  return r->scratch;
}

void coda_ref_mm_ab(int nt, float *C, const float *A, const float *B, int64_t M, int64_t N,
                    int64_t K, int acc) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    float *c = C + m * N;
    if (!acc) memset(c, 0, (size_t)N * sizeof *c);
    const float *a = A + m * K;
    for (int64_t k = 0; k < K; k++) {
      const float av = a[k];
      const float *b = B + k * N;
      for (int64_t n = 0; n < N; n++) c[n] += av * b[n];
    }
  }
}

int coda_ref_mm_abt(int nt, ref_state *r, float *C, const float *A, const float *B, int64_t M,
                    int64_t N, int64_t K, int acc) {
  float *Bt = scratch(r, (size_t)(N * K));
  if (!Bt) return -1;
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) Bt[k * N + n] = B[n * K + k];
  coda_ref_mm_ab(nt, C, A, Bt, M, N, K, acc);
  return 0;
}

void coda_ref_mm_atb(int nt, float *C, const float *A, const float *B, int64_t M, int64_t N,
                     int64_t K) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    float *c = C + m * N;
    for (int64_t k = 0; k < K; k++) {
      const float av = A[k * M + m];
      if (av == 0.0f) continue;
      const float *b = B + k * N;
      for (int64_t n = 0; n < N; n++) c[n] += av * b[n];
    }
  }
}

void coda_ref_rmsnorm(int nt, const float *x, const float *w, float *h, float *rs, int64_t M,
                      int64_t D, double eps) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D;
    double ss = 0.0;
    for (int64_t k = 0; k < D; k++) ss += (double)xr[k] * xr[k];
    float r = (float)(1.0 / sqrt(ss / (double)D + eps));
    if (rs) rs[m] = r;
    for (int64_t k = 0; k < D; k++) h[m * D + k] = xr[k] * r * w[k];
  }
}

/* dx += d(h)/dx · dh for h = x · r(x) ⊙ w; gw += Σ_m dh ⊙ x · r. */
static void rmsnorm_bwd(int nt, const float *x, const float *w, const float *rs, const float *dh,
                        float *dx, float *gw, int64_t M, int64_t D) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D, *d = dh + m * D;
    double dot = 0.0;
    for (int64_t k = 0; k < D; k++) dot += (double)d[k] * w[k] * xr[k];
    double r = rs[m];
    double c = r * r * r * dot / (double)D;
    for (int64_t k = 0; k < D; k++) dx[m * D + k] += (float)(r * d[k] * w[k] - xr[k] * c);
  }
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) gw[k] += dh[m * D + k] * x[m * D + k] * rs[m];
}

void coda_ref_rope(int nt, float *qkv, int B, int T, int nqk_heads, int hd, int64_t nq, double theta,
                 const coda_rope_scaling *sc, double sign) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < (int64_t)B * T; m++) {
    int t = (int)(m % T);
    float *row = qkv + m * nq;
    for (int j = 0; j < hd / 2; j++) {
      double ang = sign * (double)t * coda_rope_inv_freq(theta, hd, sc, j);
      double c = cos(ang), s = sin(ang);
      for (int h = 0; h < nqk_heads; h++) {
        float *p = row + (int64_t)h * hd + 2 * j;
        double x = p[0], y = p[1];
        p[0] = (float)(x * c - y * s);
        p[1] = (float)(x * s + y * c);
      }
    }
  }
}

/* Qwen3's q/k norm, forward: the first nh heads of each row of qkv (the q
 * heads, then the k heads) are kept in qk0 and normalized in place, head
 * h < nq_heads with wq, the others with wk; r of each (row, head) in rqk. */
static void qknorm_fwd(int nt, float *qkv, float *qk0, float *rqk, const float *wq,
                       const float *wk, int64_t M, int nq_heads, int nh, int hd, int64_t nq,
                       double eps) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++) {
    float *row = qkv + m * nq, *keep = qk0 + m * (int64_t)nh * hd;
    memcpy(keep, row, (size_t)nh * hd * sizeof *row);
    for (int h = 0; h < nh; h++)
      coda_ref_rmsnorm(1, keep + (int64_t)h * hd, h < nq_heads ? wq : wk, row + (int64_t)h * hd,
                       rqk + m * nh + h, 1, hd, eps);
  }
}

/* Its backward, in place on the q/k part of dqkv (the gradient after the
 * norm becomes the one before it). Per head, y = x r (w + shift) with
 * r = (mean(x²) + eps)^(-1/2) over the hd entries (shift 0: Qwen3's norm,
 * 1: Gemma 3's (1 + w)):
 *   dx = r (w' ⊙ dy) − x r³ ⟨w' ⊙ dy, x⟩ / hd,   dw += dy ⊙ x r,   w' = w + shift
 * (the RMSNorm backward of rmsnorm_bwd, per head). dw is summed serially
 * in row order, before dy is overwritten, so it is deterministic. */
void coda_ref_qknorm_bwd(int nt, float *dqkv, const float *qk0, const float *rqk, const float *wq,
                         const float *wk, float *gq, float *gk, int64_t M, int nq_heads, int nh,
                         int hd, int64_t nq, double shift) {
  for (int64_t m = 0; m < M; m++)
    for (int h = 0; h < nh; h++) {
      const float *x = qk0 + (m * nh + h) * hd, *dy = dqkv + m * nq + (int64_t)h * hd;
      float *g = h < nq_heads ? gq : gk;
      const float r = rqk[m * nh + h];
      for (int e = 0; e < hd; e++) g[e] += dy[e] * x[e] * r;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t m = 0; m < M; m++)
    for (int h = 0; h < nh; h++) {
      const float *x = qk0 + (m * nh + h) * hd, *w = h < nq_heads ? wq : wk;
      float *dy = dqkv + m * nq + (int64_t)h * hd;
      double dot = 0.0;
      for (int e = 0; e < hd; e++) dot += (double)dy[e] * (shift + (double)w[e]) * x[e];
      const double r = rqk[m * nh + h], c = r * r * r * dot / (double)hd;
      for (int e = 0; e < hd; e++) dy[e] = (float)(r * dy[e] * (shift + (double)w[e]) - x[e] * c);
    }
}

void coda_ref_attn_fwd(int nt, const float *qkv, float *P, float *o, int B, int T, int H, int Hk,
                       int hd, int64_t nq, double scale, int window) {
  const int grp = H / Hk;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int kh = h / grp;
      float *Pb = P + ((size_t)b * H + h) * T * T;
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((int64_t)b * T + t) * nq + (int64_t)h * hd;
        float *p = Pb + (size_t)t * T;
        const int s0 = coda_ref_window_start(t, window);
        double mx = -INFINITY;
        for (int s = 0; s < s0; s++) p[s] = 0.0f;
        for (int s = s0; s <= t; s++) {
          const float *k = qkv + ((int64_t)b * T + s) * nq + (int64_t)(H + kh) * hd;
          double d = 0.0;
          for (int e = 0; e < hd; e++) d += (double)q[e] * k[e];
          d *= scale;
          p[s] = (float)d;
          if (d > mx) mx = d;
        }
        double sum = 0.0;
        for (int s = s0; s <= t; s++) sum += exp((double)p[s] - mx);
        for (int s = s0; s <= t; s++) p[s] = (float)(exp((double)p[s] - mx) / sum);
        for (int s = t + 1; s < T; s++) p[s] = 0.0f;
        float *orow = o + ((int64_t)b * T + t) * ((int64_t)H * hd) + (int64_t)h * hd;
        for (int e = 0; e < hd; e++) orow[e] = 0.0f;
        for (int s = s0; s <= t; s++) {
          const float *v = qkv + ((int64_t)b * T + s) * nq + (int64_t)(H + Hk + kh) * hd;
          for (int e = 0; e < hd; e++) orow[e] += p[s] * v[e];
        }
      }
    }
}

/* dqkv (overwritten) from dO; one task per (batch, kv head) so the k/v
 * gradient sums of a GQA group stay in one thread, in a fixed order. */
void coda_ref_attn_bwd(int nt, const float *qkv, const float *P, const float *dO, float *dqkv,
                       int B, int T, int H, int Hk, int hd, int64_t nq, double scale,
                       int window) {
  const int grp = H / Hk;
  const int64_t dD = (int64_t)H * hd;
  memset(dqkv, 0, (size_t)B * T * nq * sizeof *dqkv);
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt)
  for (int b = 0; b < B; b++)
    for (int kh = 0; kh < Hk; kh++) {
      double *dp = malloc((size_t)T * sizeof *dp);
      if (!dp) continue; /* cannot happen for sane T; leaves zeros */
      for (int h = kh * grp; h < (kh + 1) * grp; h++) {
        const float *Pb = P + ((size_t)b * H + h) * T * T;
        for (int t = 0; t < T; t++) {
          const float *p = Pb + (size_t)t * T;
          const float *g = dO + ((int64_t)b * T + t) * dD + (int64_t)h * hd;
          const int s0 = coda_ref_window_start(t, window);
          double sum = 0.0;
          for (int s = s0; s <= t; s++) {
            const float *v = qkv + ((int64_t)b * T + s) * nq + (int64_t)(H + Hk + kh) * hd;
            float *dv = dqkv + ((int64_t)b * T + s) * nq + (int64_t)(H + Hk + kh) * hd;
            double d = 0.0;
            for (int e = 0; e < hd; e++) {
              d += (double)g[e] * v[e];
              dv[e] += p[s] * g[e];
            }
            dp[s] = d;
            sum += p[s] * d;
          }
          const float *q = qkv + ((int64_t)b * T + t) * nq + (int64_t)h * hd;
          float *dq = dqkv + ((int64_t)b * T + t) * nq + (int64_t)h * hd;
          for (int s = s0; s <= t; s++) {
            float ds = (float)(p[s] * (dp[s] - sum) * scale);
            const float *k = qkv + ((int64_t)b * T + s) * nq + (int64_t)(H + kh) * hd;
            float *dk = dqkv + ((int64_t)b * T + s) * nq + (int64_t)(H + kh) * hd;
            for (int e = 0; e < hd; e++) {
              dq[e] += ds * k[e];
              dk[e] += ds * q[e];
            }
          }
        }
      }
      free(dp);
    }
}

/* Layer li's forward from r->l[li].xa into the next layer's input (or
 * r->xL), keeping its activations for the backward; 1: out of memory. */
static int layer_forward(const ref_pass *p, int li) {
  ref_state *r = p->r;
  const coda_model_config *c = p->c;
  const int nt = p->nt, B = p->B, T = p->T, H = p->H, Hk = p->Hk, hd = p->hd;
  const int64_t M = p->M, D = p->D, F = p->F, nq = p->nq;
  char nm[96];
  layer_acts *a = &r->l[li];
  snprintf(nm, sizeof nm, "layers.%d.attention_norm.weight", li);
  coda_ref_rmsnorm(nt, a->xa, PW(nm), a->h1, a->r1, M, D, c->norm_eps);
  snprintf(nm, sizeof nm, "layers.%d.attention.wqkv.weight", li);
  if (coda_ref_mm_abt(nt, r, a->qkv, a->h1, PW(nm), M, nq, D, 0)) return 1;
  if (p->qk_norm) {
    char nk[96];
    snprintf(nm, sizeof nm, "layers.%d.attention.q_norm.weight", li);
    snprintf(nk, sizeof nk, "layers.%d.attention.k_norm.weight", li);
    qknorm_fwd(nt, a->qkv, a->qk0, a->rqk, PW(nm), PW(nk), M, H, H + Hk, hd, nq, c->norm_eps);
  }
  coda_ref_rope(nt, a->qkv, B, T, H + Hk, hd, nq, c->rope_theta, &c->rope, 1.0);
  coda_ref_attn_fwd(nt, a->qkv, a->P, a->o, B, T, H, Hk, hd, nq, 1.0 / sqrt((double)hd),
                    coda_model_layer_window(c, li)); /* Mistral's window (0: none) */
  memcpy(a->xf, a->xa, (size_t)(M * D) * 4);
  snprintf(nm, sizeof nm, "layers.%d.attention.wo.weight", li);
  if (coda_ref_mm_abt(nt, r, a->xf, a->o, PW(nm), M, D, (int64_t)H * hd, 1)) return 1;
  snprintf(nm, sizeof nm, "layers.%d.ffn_norm.weight", li);
  coda_ref_rmsnorm(nt, a->xf, PW(nm), a->h2, a->r2, M, D, c->norm_eps);
  snprintf(nm, sizeof nm, "layers.%d.feed_forward.w13.weight", li);
  if (coda_ref_mm_abt(nt, r, a->z, a->h2, PW(nm), M, 2 * F, D, 0)) return 1;
  for (int64_t i = 0; i < M * F; i++) {
    float g = a->z[2 * i], u = a->z[2 * i + 1];
    a->y[i] = (float)((double)g / (1.0 + exp(-(double)g)) * u);
  }
  float *xo = li + 1 < c->layers ? r->l[li + 1].xa : r->xL;
  memcpy(xo, a->xf, (size_t)(M * D) * 4);
  snprintf(nm, sizeof nm, "layers.%d.feed_forward.w2.weight", li);
  if (coda_ref_mm_abt(nt, r, xo, a->y, PW(nm), M, D, F, 1)) return 1;
  return 0;
}

/* Layer li's backward: r->dx (the gradient at its output) becomes the
 * gradient at its input; its weights' gradients are added. */
static void layer_backward(const ref_pass *p, int li) {
  ref_state *r = p->r;
  const coda_model_config *c = p->c;
  const int nt = p->nt, B = p->B, T = p->T, H = p->H, Hk = p->Hk, hd = p->hd;
  const int64_t M = p->M, D = p->D, F = p->F, nq = p->nq;
  char nm[96];
  layer_acts *a = &r->l[li];
  /* MLP: x_out = xf + y W2ᵀ */
  snprintf(nm, sizeof nm, "layers.%d.feed_forward.w2.weight", li);
  coda_ref_mm_atb(nt, PG(nm), r->dx, a->y, D, F, M);
  coda_ref_mm_ab(nt, r->dy, r->dx, PW(nm), M, F, D, 0);
  for (int64_t i = 0; i < M * F; i++) {
    double g = a->z[2 * i], u = a->z[2 * i + 1], d = r->dy[i];
    double sg = 1.0 / (1.0 + exp(-g));
    r->dz[2 * i] = (float)(d * u * sg * (1.0 + g * (1.0 - sg)));
    r->dz[2 * i + 1] = (float)(d * g * sg);
  }
  snprintf(nm, sizeof nm, "layers.%d.feed_forward.w13.weight", li);
  coda_ref_mm_atb(nt, PG(nm), r->dz, a->h2, 2 * F, D, M);
  coda_ref_mm_ab(nt, r->dh, r->dz, PW(nm), M, D, 2 * F, 0);
  snprintf(nm, sizeof nm, "layers.%d.ffn_norm.weight", li);
  rmsnorm_bwd(nt, a->xf, PW(nm), a->r2, r->dh, r->dx, PG(nm), M, D);
  /* attention: xf = xa + o Woᵀ */
  snprintf(nm, sizeof nm, "layers.%d.attention.wo.weight", li);
  coda_ref_mm_atb(nt, PG(nm), r->dx, a->o, D, (int64_t)H * hd, M);
  coda_ref_mm_ab(nt, r->dO, r->dx, PW(nm), M, (int64_t)H * hd, D, 0);
  coda_ref_attn_bwd(nt, a->qkv, a->P, r->dO, r->dqkv, B, T, H, Hk, hd, nq,
                    1.0 / sqrt((double)hd), coda_model_layer_window(c, li));
  coda_ref_rope(nt, r->dqkv, B, T, H + Hk, hd, nq, c->rope_theta, &c->rope, -1.0); /* R(θ)ᵀ = R(−θ) */
  if (p->qk_norm) {
    char nk[96];
    snprintf(nm, sizeof nm, "layers.%d.attention.q_norm.weight", li);
    snprintf(nk, sizeof nk, "layers.%d.attention.k_norm.weight", li);
    coda_ref_qknorm_bwd(nt, r->dqkv, a->qk0, a->rqk, PW(nm), PW(nk), PG(nm), PG(nk), M, H,
                        H + Hk, hd, nq, 0.0);
  }
  snprintf(nm, sizeof nm, "layers.%d.attention.wqkv.weight", li);
  coda_ref_mm_atb(nt, PG(nm), r->dqkv, a->h1, nq, D, M);
  coda_ref_mm_ab(nt, r->dh, r->dqkv, PW(nm), M, D, nq, 0);
  snprintf(nm, sizeof nm, "layers.%d.attention_norm.weight", li);
  rmsnorm_bwd(nt, a->xa, PW(nm), a->r1, r->dh, r->dx, PG(nm), M, D);
}

/* The mean cross-entropy of the logits against tg (targets < 0 ignored);
 * with backward the logits become their gradient (of gscale · the mean
 * loss) in place. */
static void head_loss(const ref_pass *p, const int32_t *tg, int backward, float gscale,
                      double *loss, int64_t *n_valid) {
  const double cap = p->c->logit_softcap;
  ref_state *r = p->r;
  const int64_t M = p->M, V = p->V;
  int64_t nv = 0;
  for (int64_t i = 0; i < M; i++) nv += tg[i] >= 0;
  double total = 0.0;
  const double dscale = nv ? (double)gscale / (double)nv : 0.0;
  for (int64_t i = 0; i < M; i++) { /* in order: the loss sum is deterministic */
    float *l = r->logits + i * V;
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double se = 0.0;
    for (int64_t v = 0; v < V; v++) se += exp((double)l[v] - mx);
    double lse = mx + log(se);
    if (tg[i] >= 0) total += lse - l[tg[i]];
    if (backward) { /* logits become dlogits in place */
      if (tg[i] < 0) {
        memset(l, 0, (size_t)V * 4);
      } else {
        for (int64_t v = 0; v < V; v++) l[v] = (float)(exp((double)l[v] - lse) * dscale);
        l[tg[i]] -= (float)dscale;
        if (cap > 0.0) /* through the cap: d(c tanh(u/c))/du = 1 − (capped/c)² */
          for (int64_t v = 0; v < V; v++) {
            const double q = (double)r->capped[i * V + v] / cap;
            l[v] = (float)((double)l[v] * (1.0 - q * q));
          }
      }
    }
  }
  if (loss) *loss = nv ? total / (double)nv : 0.0;
  if (n_valid) *n_valid = nv;
}

coda_status coda_ref_forward(coda_context ctx, coda_model *m, const int32_t *in,
                             const int32_t *tg, int B, int T, int backward, float gscale,
                             double *loss, int64_t *n_valid, float *last_logits) {
  ref_state *r = NULL;
  coda_status st = ensure(ctx, m, B, T, &r);
  if (st) return st;
  const coda_model_config *c = coda_model_cfg(m);
  const int nt = ctx->opts.num_threads > 0 ? ctx->opts.num_threads : omp_get_max_threads();
  const int64_t M = (int64_t)B * T, D = c->dim, F = c->ffn, V = c->vocab;
  const int H = c->heads, Hk = c->kv_heads, hd = coda_model_head_dim(c);
  const int64_t nq = (int64_t)(H + 2 * Hk) * hd;
  ref_pass pass = {m, c, r, coda_model_weights(m), coda_model_grads(m), nt, B, T, H, Hk, hd,
                   M, D, F, V, nq, coda_family_of(c->family)->qk_norm}, *p = &pass;
  const int gpt2 = coda_family_of(c->family)->block == CODA_BLOCK_GPT2;
  const int gemma = coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3;
  const float esc = coda_model_embed_scale(c); /* Gemma 3: x = wte[token] · sqrt(dim) in fp32 */
  const float *emb = PW("tok_embeddings.weight");
  const float *wout = c->tied ? emb : PW("output.weight");
  /* weight sharding: buckets 0 (embedding), 1 + li, HEAD (coda_ref_hooks) */
  const coda_ref_hooks *hk = coda_model_ref_hooks(m);
  const int HEAD = c->layers + 1;
#define GATHER(k) do { if (hk && (st = hk->gather(hk->user, (k)))) return st; } while (0)
#define RELEASE(k) do { if (hk) hk->release(hk->user, (k)); } while (0)
#define GRAD_DONE(k) do { if (hk && (st = hk->grad_done(hk->user, (k)))) return st; } while (0)

  /* ---- forward ---- */
  float *x = r->l[0].xa;
  GATHER(0);
  for (int64_t i = 0; i < M; i++) memcpy(x + i * D, emb + (int64_t)in[i] * D, (size_t)D * 4);
  if (gemma)
    for (int64_t i = 0; i < M * D; i++) x[i] *= esc;
  if (gpt2) { /* learned positions: x = wte[token] + wpe[t] */
    const float *wpe = PW("pos_embeddings.weight");
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < D; k++) x[i * D + k] += wpe[(i % T) * D + k];
  }
  if (!c->tied) RELEASE(0); /* a tied head reads it again */
  for (int li = 0; li < c->layers; li++) {
    GATHER(1 + li);
    if (gpt2 ? coda_ref_gpt2_layer_forward(p, li)
             : gemma ? coda_ref_gemma3_layer_forward(p, li) : layer_forward(p, li))
      goto oom;
    RELEASE(1 + li);
  }
  GATHER(HEAD);
  if (gpt2)
    coda_ref_layernorm(nt, r->xL, PW("norm.weight"), PW("norm.bias"), r->hf, r->muf, r->rf, M, D,
                       c->norm_eps);
  else if (gemma)
    coda_ref_rmsnorm1p(nt, r->xL, PW("norm.weight"), r->hf, r->rf, M, D, c->norm_eps);
  else
    coda_ref_rmsnorm(nt, r->xL, PW("norm.weight"), r->hf, r->rf, M, D, c->norm_eps);
  if (!tg) { /* last position of sequence 0 only */
    const float *h = r->hf + (int64_t)(T - 1) * D;
    for (int64_t v = 0; v < V; v++) {
      double s = 0.0;
      for (int64_t k = 0; k < D; k++) s += (double)h[k] * wout[v * D + k];
      last_logits[v] = coda_ref_softcap((float)s, c->logit_softcap);
    }
    RELEASE(HEAD);
    if (c->tied) RELEASE(0);
    return CODA_OK;
  }
  if (coda_ref_mm_abt(nt, r, r->logits, r->hf, wout, M, V, D, 0)) goto oom;
  if (c->logit_softcap > 0.0) /* the capped logits, kept for the backward */
    for (int64_t i = 0; i < M * V; i++)
      r->capped[i] = r->logits[i] = coda_ref_softcap(r->logits[i], c->logit_softcap);
  if (!backward) {
    RELEASE(HEAD);
    if (c->tied) RELEASE(0);
  }
  head_loss(p, tg, backward, gscale, loss, n_valid);
  if (!backward) return CODA_OK;

  /* ---- backward ---- */
  float *gout = c->tied ? PG("tok_embeddings.weight") : PG("output.weight");
  coda_ref_mm_atb(nt, gout, r->logits, r->hf, V, D, M);
  coda_ref_mm_ab(nt, r->dh, r->logits, wout, M, D, V, 0);
  memset(r->dx, 0, (size_t)(M * D) * 4);
  if (gpt2)
    coda_ref_layernorm_bwd(nt, r->xL, PW("norm.weight"), r->muf, r->rf, r->dh, r->dx,
                           PG("norm.weight"), PG("norm.bias"), M, D);
  else if (gemma)
    coda_ref_rmsnorm1p_bwd(nt, r->xL, PW("norm.weight"), r->rf, r->dh, r->dx, PG("norm.weight"),
                           M, D);
  else
    rmsnorm_bwd(nt, r->xL, PW("norm.weight"), r->rf, r->dh, r->dx, PG("norm.weight"), M, D);
  RELEASE(HEAD);
  if (c->tied) RELEASE(0); /* its gradient is complete after the embedding's below */
  GRAD_DONE(HEAD);
  for (int li = c->layers - 1; li >= 0; li--) {
    GATHER(1 + li);
    if (gpt2) coda_ref_gpt2_layer_backward(p, li);
    else if (gemma) coda_ref_gemma3_layer_backward(p, li);
    else layer_backward(p, li);
    RELEASE(1 + li);
    GRAD_DONE(1 + li);
  }
  float *gemb = PG("tok_embeddings.weight");
  for (int64_t i = 0; i < M; i++) { /* embedding gradient: a host scatter-add, in order */
    float *gr = gemb + (int64_t)in[i] * D;
    for (int64_t k = 0; k < D; k++) gr[k] += gemma ? r->dx[i * D + k] * esc : r->dx[i * D + k];
  }
  if (gpt2) { /* and the positions', in the same order */
    float *gpe = PG("pos_embeddings.weight");
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < D; k++) gpe[(i % T) * D + k] += r->dx[i * D + k];
  }
  GRAD_DONE(0);
  return CODA_OK;
#undef GATHER
#undef RELEASE
#undef GRAD_DONE
#undef PW
#undef PG
oom:
  return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
}
