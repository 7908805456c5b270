/* The fp64 reference models of the engine tests with windowed attention
 * (tests/test_train_model_mistral.c, tests/test_train_model_gemma3.c):
 * the pieces each test writes its family's forward from (parameters by
 * name, RMSNorm, linear, RoPE, windowed attention, the head's loss), and
 * the engine's loss, last logits and gradients held against such a
 * forward. Each test keeps its family's layer; what is here is the same
 * for both. */
#ifndef CODA_TEST_REF64_UTIL_H
#define CODA_TEST_REF64_UTIL_H
#include "family_test_util.h"

/* The longest sequence ref64_attention takes (its score row). */
enum { REF64_MAX_T = 64 };

typedef struct {
  const coda_model *m;
  const double *w; /* the flat weights in double, the model's layout */
  const coda_model_config *c;
} ref64;

/* The weights of parameter fmt (with layer li for its %d) in r->w. */
static inline const double *ref64_param(const ref64 *r, const char *fmt, int li) {
  char nm[96];
  snprintf(nm, sizeof nm, fmt, li);
  const coda_param *p = coda_model_find(r->m, nm);
  CHECK_MSG(p != NULL, "no parameter %s", nm);
  return r->w + (p ? p->offset : 0);
}

static inline int ref64_head_dim(const coda_model_config *c) {
  return c->head_dim ? c->head_dim : c->dim / c->heads;
}

/* x (n x dim) = the embedding rows of in · scale. */
static inline void ref64_embed(const ref64 *r, const int32_t *in, int n, double scale, double *x) {
  const int D = r->c->dim;
  const double *emb = ref64_param(r, "tok_embeddings.weight", 0);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < D; k++) x[i * D + k] = emb[in[i] * D + k] * scale;
}

/* Each of the rows of v (rows x n): y = v / sqrt(mean(v²) + eps) · (one +
 * w); one 0 is RMSNorm, 1 Gemma's (1 + w). y may be v. */
static inline void ref64_rmsnorm(const double *v, const double *w, double one, double *y, int rows,
                                 int n, double eps) {
  for (int i = 0; i < rows; i++, v += n, y += n) {
    double ss = 0;
    for (int k = 0; k < n; k++) ss += v[k] * v[k];
    const double r = 1.0 / sqrt(ss / n + eps);
    for (int k = 0; k < n; k++) y[k] = v[k] * r * (one + w[k]);
  }
}

/* out (n x rows) = in (n x cols) · Wᵀ, W rows x cols; added to out when acc */
static inline void ref64_linear(const double *in, const double *Wt, double *out, int n, int rows,
                                int cols, int acc) {
  for (int i = 0; i < n; i++)
    for (int o = 0; o < rows; o++) {
      double s = 0;
      for (int k = 0; k < cols; k++) s += in[i * cols + k] * Wt[o * cols + k];
      out[i * rows + o] = acc ? out[i * rows + o] + s : s;
    }
}

/* One head's q (hd) rotated in place to position pos; pairs (2j, 2j+1):
 * coda's row order. */
static inline void ref64_rope(double *q, int hd, int pos, double base) {
  for (int j = 0; j < hd / 2; j++) {
    const double th = pos * pow(base, -2.0 * j / hd);
    const double a = q[2 * j], b = q[2 * j + 1];
    q[2 * j] = a * cos(th) - b * sin(th);
    q[2 * j + 1] = a * sin(th) + b * cos(th);
  }
}

/* o (B·T x heads·hd) = every head's causal attention over qkv (B·T x
 * (heads + 2 kv_heads)·hd, GQA) with scores q·k / sqrt(scale_sq), within
 * window win (0: none); HF's mask: kv <= q and kv > q − win. */
static inline void ref64_attention(const ref64 *r, const double *qkv, double *o, int B, int T,
                                   int win, double scale_sq) {
  const int H = r->c->heads, HK = r->c->kv_heads, HD = ref64_head_dim(r->c), NQ = (H + 2 * HK) * HD;
  CHECK(T <= REF64_MAX_T);
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < H; hh++) {
      const int kv = hh / (H / HK);
      for (int t = 0; t < T && t < REF64_MAX_T; t++) {
        double sc[REF64_MAX_T], mx = -INFINITY, se = 0;
        const double *q = qkv + (b * T + t) * NQ + hh * HD;
        for (int s = 0; s < T; s++) {
          sc[s] = -INFINITY;
          if (s > t || (win > 0 && s <= t - win)) continue;
          const double *k = qkv + (b * T + s) * NQ + (H + kv) * HD;
          double d = 0;
          for (int e = 0; e < HD; e++) d += q[e] * k[e];
          sc[s] = d / sqrt(scale_sq);
          mx = fmax(mx, sc[s]);
        }
        for (int s = 0; s < T; s++) se += sc[s] == -INFINITY ? 0 : exp(sc[s] - mx);
        double *orow = o + (b * T + t) * H * HD + hh * HD;
        for (int e = 0; e < HD; e++) orow[e] = 0;
        for (int s = 0; s < T; s++) {
          if (sc[s] == -INFINITY) continue;
          const double pr = exp(sc[s] - mx) / se;
          const double *v = qkv + (b * T + s) * NQ + (H + HK + kv) * HD;
          for (int e = 0; e < HD; e++) orow[e] += pr * v[e];
        }
      }
    }
}

/* The mean loss over the targets tg >= 0 of the n rows of x (n x dim)
 * through the final norm "norm.weight" (one as ref64_rmsnorm's) and the
 * head wout (vocab x dim), the logits soft-capped at cap (0: none); last
 * (vocab) gets row T − 1's logits (sequence 0's last) when non-NULL. */
static inline double ref64_loss(const ref64 *r, const double *x, int n, int T, double one,
                                const double *wout, double cap, const int32_t *tg, double *last) {
  const int D = r->c->dim, V = r->c->vocab;
  double *hf = malloc(D * sizeof *hf), *lg = malloc(V * sizeof *lg), loss = 0;
  int valid = 0;
  for (int i = 0; i < n; i++) {
    double mx = -INFINITY, se = 0;
    ref64_rmsnorm(x + i * D, ref64_param(r, "norm.weight", 0), one, hf, 1, D, r->c->norm_eps);
    for (int v = 0; v < V; v++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += hf[k] * wout[v * D + k];
      lg[v] = cap > 0 ? cap * tanh(s / cap) : s;
      mx = fmax(mx, lg[v]);
    }
    if (last && i == T - 1) memcpy(last, lg, V * sizeof *lg);
    if (tg[i] < 0) continue;
    for (int v = 0; v < V; v++) se += exp(lg[v] - mx);
    loss += mx + log(se) - lg[tg[i]];
    valid++;
  }
  free(hf);
  free(lg);
  return loss / valid;
}

/* A family's fp64 forward: the mean loss with window win; last as
 * ref64_loss's. */
typedef double (*ref64_forward)(const ref64 *r, const int32_t *in, const int32_t *tg, int win,
                                double *last);

/* The engine (fp32) model m of config c against the fp64 forward fwd with
 * window win on the batch in, tg (B x T): the loss, sequence 0's last
 * logits, and every parameter's gradient against central differences of
 * fwd's loss (h = 1e-5: their error is far below the tolerance); the
 * window's edge is exercised: each of the nother windows other gives
 * another loss. */
static inline void ref64_against_engine(const char *family, coda_context ctx, coda_model *m,
                                        const coda_model_config *c, const int32_t *in,
                                        const int32_t *tg, int B, int T, ref64_forward fwd,
                                        int win, const int *other, int nother) {
  double loss;
  int64_t nv;
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &loss, &nv) == CODA_OK);
  const size_t n = coda_model_size(m);
  const int V = c->vocab;
  double *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g), *last = malloc(V * sizeof *last);
  float *got = malloc(V * sizeof *got);
  for (size_t i = 0; i < n; i++) w[i] = coda_model_weights(m)[i];
  ref64 r = {m, w, c};
  const double want = fwd(&r, in, tg, win, last);
  CHECK_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "%s loss %.9g, fp64 %.9g", family, loss, want);
  for (int k = 0; k < nother; k++) {
    const double l = fwd(&r, in, tg, other[k], NULL);
    CHECK_MSG(fabs(l - want) > 1e-3 * fabs(want),
              "%s: window %d does not change the loss of window %d (%.9g, %.9g)", family,
              other[k], win, l, want);
  }
  for (size_t i = 0; i < n; i++) {
    const double w0 = w[i], h = 1e-5;
    w[i] = w0 + h;
    const double lp = fwd(&r, in, tg, win, NULL);
    w[i] = w0 - h;
    const double lm = fwd(&r, in, tg, win, NULL);
    w[i] = w0;
    g[i] = (lp - lm) / (2 * h);
  }
  for (int pi = 0; pi < coda_model_num_params(m); pi++) {
    const coda_param *p = coda_model_param(m, pi);
    family_close_grad(family, m, p->name, g + p->offset, 1e-4);
  }
  CHECK(coda_model_last_logits(ctx, m, in, T, got) == CODA_OK);
  for (int v = 0; v < V; v++)
    CHECK_MSG(fabs(got[v] - last[v]) <= 1e-4 * (1 + fabs(last[v])),
              "%s last logit %d: %.7g, fp64 %.7g", family, v, got[v], last[v]);
  free(w);
  free(g);
  free(last);
  free(got);
}

#endif
