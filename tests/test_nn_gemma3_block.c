/* The Gemma 3 block plan (coda_llama_block_plan with CODA_LLAMA_GEMMA3,
 * src/nn/gemma3.c) and the soft-capped head plan, in exact mode (fp64):
 *  - every gradient of the block (dx and each weight's: the q/k norms and
 *    the two post-norms included) against central finite differences of
 *    L = sum x_out * dx_out computed by the plan's own forward, with GQA,
 *    head_dim above dim / heads, a score scale other than 1/sqrt(head_dim)
 *    and a window of 3 over 8 positions (and without the window);
 *  - the window in the forward: a change of x at the position just before
 *    a row's window leaves that row of x_out exactly unchanged (and changes
 *    it without the window), one at the window's first position changes it;
 *  - the attention's mask checks: a negative window or scale is refused;
 *  - the head with the soft cap: its loss against a loss written out here
 *    in double (RMSNorm, logits, cap * tanh(l / cap), mean cross-entropy
 *    over the counted targets), and its gradients (dx, dwnf, dwout)
 *    against central differences of that loss;
 *  - the refusals by name: NORM_IN, NORM_OUT, FOLD, ROPE_MAP, INFER on the
 *    block (each naming the Gemma 3 block); the
 *    soft cap with FOLD or KEEP_LOGITS on the head; a window on a
 *    negative value. */
#include "check.h"
#include "test_nn_llama_util.h"
#include "api/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 11 };
static const char *pnames[NP] = {"x",   "wqkv", "wo",  "wgu", "wd", "wn1",
                                 "wn2", "wqn",  "wkn", "wpa", "wpf"};
static const char *gnames[NP] = {"dx",   "dwqkv", "dwo",  "dwgu", "dwd", "dwn1",
                                 "dwn2", "dwqn",  "dwkn", "dwpa", "dwpf"};

static coda_llama_config gcfg(int window) {
  coda_llama_config c = coda_llama_default_config();
  c.dim = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8; /* q width 32 over dim 16 */
  c.ffn_dim = 24;
  c.batch = 2;
  c.seq = 8;
  c.dtype = CODA_F64;
  c.norm_eps = 1e-6;
  c.attn_scale = 1.0 / sqrt(12.0); /* attn_scalar 12, not head_dim */
  c.window = window;
  c.flags = CODA_LLAMA_GEMMA3 | CODA_LLAMA_INPLACE;
  return c;
}

/* L = sum x_out * dx_out after a forward with the values in v (x_out
 * copied to xo when given). */
static double loss(coda_context ctx, coda_plan p, double *const v[NP], const double *dxo,
                   int64_t n, double *xo_keep) {
  return lt_block_loss(ctx, p, NP, pnames, v, dxo, n, xo_keep);
}

/* A norm's buffer holds 1 + w: values around 1. */
static int is_norm(const char *name) {
  return !strncmp(name, "wn", 2) || !strcmp(name, "wqn") || !strcmp(name, "wkn") ||
         !strcmp(name, "wpa") || !strcmp(name, "wpf");
}

/* How far row t of batch 0's x_out moves when x at position j changes. */
static double row_moves(coda_context ctx, coda_plan p, double *const v[NP], const double *dxo,
                        int64_t t, int64_t j) {
  const int64_t D = 16, nout = lt_plan_count(p, "x_out");
  double *a = lt_zeros(nout), *b = lt_zeros(nout);
  loss(ctx, p, v, dxo, nout, a);
  for (int64_t k = 0; k < D; k++) v[0][j * D + k] += 0.3;
  loss(ctx, p, v, dxo, nout, b);
  for (int64_t k = 0; k < D; k++) v[0][j * D + k] -= 0.3;
  const double d = lt_maxabs_diff(a + t * D, b + t * D, D);
  free(a);
  free(b);
  return d;
}

/* Row t = 7 sees x at t - window + 1 (the window's first key) and not at
 * t - window; without the window it sees both. */
static void window_rows(coda_context ctx, coda_plan p, double *const v[NP], const double *dxo,
                        int window) {
  const int64_t t = 7, w = window ? window : 3;
  const double in = row_moves(ctx, p, v, dxo, t, t - w + 1), out = row_moves(ctx, p, v, dxo, t, t - w);
  CHECK_MSG(in > 1e-3, "window %d: row %lld moved by only %.3g", window, (long long)t, in);
  if (window) CHECK_MSG(out == 0.0, "window %d: row %lld moved by %.3g", window, (long long)t, out);
  else CHECK_MSG(out > 1e-3, "no window: row %lld moved by only %.3g", (long long)t, out);
}

static void fd_block(coda_context ctx, int window) {
  coda_llama_config c = gcfg(window);
  coda_plan p = NULL;
  coda_status s = coda_llama_block_plan(ctx, &c, &p);
  CHECK_MSG(s == CODA_OK, "gemma3 block window %d: %s", window, coda_last_error(ctx));
  if (s != CODA_OK) return;
  double *v[NP], *g[NP];
  int64_t n[NP];
  for (int i = 0; i < NP; i++) {
    n[i] = lt_plan_count(p, pnames[i]);
    CHECK(n[i] > 0 && n[i] == lt_plan_count(p, gnames[i]));
    v[i] = lt_vec(n[i], is_norm(pnames[i]) ? 0.2 : 0.5);
    if (is_norm(pnames[i]))
      for (int64_t k = 0; k < n[i]; k++) v[i][k] += 1.0;
    g[i] = lt_zeros(n[i]);
  }
  const int64_t nout = lt_plan_count(p, "x_out");
  double *dxo = lt_vec(nout, 1.0);
  char label[32];
  snprintf(label, sizeof label, "window %d", window);
  lt_block_fd(ctx, p, NP, pnames, gnames, v, g, n, dxo, nout, label);
  window_rows(ctx, p, v, dxo, window);
  /* the printed plan: the post-norm steps and the window */
  const char *txt = coda_plan_text(p);
  CHECK(txt && strstr(txt, "post_attn_residual_norm") && strstr(txt, "post_ffn_bwd") &&
        strstr(txt, "qk_norm_rope"));
  if (window) CHECK(txt && strstr(txt, "window 3"));
  for (int i = 0; i < NP; i++) {
    free(v[i]);
    free(g[i]);
  }
  free(dxo);
  coda_plan_destroy(p);
}

/* The head's loss written out in double: h = x r(x) wnf, l = h wout^T,
 * capped, mean cross-entropy over the targets >= 0. */
static double head_loss_ref(const double *x, const double *wnf, const double *wout,
                            const int32_t *tg, int64_t M, int64_t D, int64_t V, double cap,
                            double eps) {
  double sum = 0;
  int cnt = 0;
  double *h = lt_zeros(D), *l = lt_zeros(V);
  for (int64_t m = 0; m < M; m++) {
    double ss = 0;
    for (int64_t k = 0; k < D; k++) ss += x[m * D + k] * x[m * D + k];
    const double r = 1.0 / sqrt(ss / (double)D + eps);
    for (int64_t k = 0; k < D; k++) h[k] = x[m * D + k] * r * wnf[k];
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
      double a = 0;
      for (int64_t k = 0; k < D; k++) a += h[k] * wout[v * D + k];
      l[v] = cap * tanh(a / cap);
      mx = fmax(mx, l[v]);
    }
    double se = 0;
    for (int64_t v = 0; v < V; v++) se += exp(l[v] - mx);
    if (tg[m] < 0) continue;
    sum += mx + log(se) - l[tg[m]];
    cnt++;
  }
  free(h);
  free(l);
  return cnt ? sum / cnt : 0.0;
}

static double head_run(coda_context ctx, coda_plan p, const double *x, const double *wnf,
                       const double *wout) {
  lt_plan_put(p, "x", x);
  lt_plan_put(p, "wnf", wnf);
  lt_plan_put(p, "wout", wout);
  if (coda_plan_run(ctx, p, CODA_PHASE_FORWARD) != CODA_OK) return NAN;
  double L;
  lt_plan_get(p, "loss", &L);
  return L;
}

static void head_softcap(coda_context ctx) {
  coda_llama_config c = gcfg(0);
  c.vocab = 40;
  c.logit_softcap = 1.5; /* logits of order 3 here: the cap bites */
  coda_plan p = NULL;
  coda_status s = coda_llama_head_plan(ctx, &c, &p);
  CHECK_MSG(s == CODA_OK, "gemma3 head: %s", coda_last_error(ctx));
  if (s != CODA_OK) return;
  const int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  double *x = lt_vec(M * D, 1.0), *wnf = lt_vec(D, 0.2), *wout = lt_vec(V * D, 1.0);
  for (int64_t k = 0; k < D; k++) wnf[k] += 1.0;
  int32_t tg[16];
  double tgd[16];
  for (int64_t m = 0; m < M; m++) {
    tg[m] = m % 5 == 3 ? -100 : (int32_t)((m * 7) % V);
    tgd[m] = tg[m];
  }
  coda_tensor t;
  CHECK(coda_plan_tensor(p, "targets", &t) == CODA_OK);
  lt_write(&t, tgd);
  const double L = head_run(ctx, p, x, wnf, wout);
  const double Lr = head_loss_ref(x, wnf, wout, tg, M, D, V, c.logit_softcap, c.norm_eps);
  CHECK_MSG(fabs(L - Lr) <= 1e-12 * fabs(Lr), "capped loss %.15g vs %.15g", L, Lr);
  /* without the cap the loss is another */
  const double Lu = head_loss_ref(x, wnf, wout, tg, M, D, V, 1e9, c.norm_eps);
  CHECK_MSG(fabs(Lu - Lr) > 1e-2, "the cap changes nothing: %.6g vs %.6g", Lu, Lr);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
  double *dx = lt_zeros(M * D), *dwnf = lt_zeros(D), *dwout = lt_zeros(V * D);
  lt_plan_get(p, "dx", dx);
  lt_plan_get(p, "dwnf", dwnf);
  lt_plan_get(p, "dwout", dwout);
  double *const vals[3] = {x, wnf, wout}, *const grads[3] = {dx, dwnf, dwout};
  const int64_t ns[3] = {M * D, D, V * D};
  const char *gn[3] = {"dx", "dwnf", "dwout"};
  const double h = 1e-6;
  for (int i = 0; i < 3; i++) {
    const double gmax = lt_maxabs(grads[i], ns[i]);
    CHECK(gmax > 0);
    for (int r = 0; r < 5; r++) {
      const int64_t k = (int64_t)((lt_rand() + 1.0) * 0.5 * (double)ns[i]) % ns[i];
      const double t0 = vals[i][k];
      vals[i][k] = t0 + h;
      const double lp = head_loss_ref(x, wnf, wout, tg, M, D, V, c.logit_softcap, c.norm_eps);
      vals[i][k] = t0 - h;
      const double lm = head_loss_ref(x, wnf, wout, tg, M, D, V, c.logit_softcap, c.norm_eps);
      vals[i][k] = t0;
      const double fd = (lp - lm) / (2 * h), e = fabs(fd - grads[i][k]) / gmax;
      CHECK_MSG(e <= 1e-6, "head %s[%lld]: finite difference %.10g vs %.10g (rel %.3g)", gn[i],
                (long long)k, fd, grads[i][k], e);
    }
  }
  free(x);
  free(wnf);
  free(wout);
  free(dx);
  free(dwnf);
  free(dwout);
  coda_plan_destroy(p);
}

static void refusals(coda_context ctx) {
  coda_plan p = NULL;
  /* the attention's mask: a negative window or scale, named */
  {
    double q[2 * 12] = {0}, o[2 * 4] = {0}, l[2] = {0};
    const coda_tensor tq = coda_tensor_2d(q, CODA_F64, 2, 12), to = coda_tensor_2d(o, CODA_F64, 2, 4),
                      tl = coda_tensor_2d(l, CODA_F64, 2, 1);
    const coda_attn_mask bad[2] = {{sizeof bad[0], 0.0, -2}, {sizeof bad[0], -1.0, 0}};
    for (int i = 0; i < 2; i++) {
      CHECK(coda_attention_forward_mask(ctx, &tq, 1, 2, 1, 1, 4, &to, &tl, &bad[i]) ==
            CODA_ERR_INVALID_ARGUMENT);
      CHECK(strstr(coda_last_error(ctx), "window") && strstr(coda_last_error(ctx), ">= 0"));
    }
  }
  coda_llama_config c = gcfg(3);
  const unsigned no[5] = {CODA_LLAMA_NORM_IN, CODA_LLAMA_NORM_OUT, CODA_LLAMA_FOLD,
                          CODA_LLAMA_ROPE_MAP, CODA_LLAMA_INFER};
  const char *name[5] = {"CODA_LLAMA_NORM_IN", "CODA_LLAMA_NORM_OUT", "CODA_LLAMA_FOLD",
                         "CODA_LLAMA_ROPE_MAP", "CODA_LLAMA_INFER"};
  for (int i = 0; i < 5; i++) {
    c.flags = CODA_LLAMA_GEMMA3 | no[i];
    CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_ERR_NOT_SUPPORTED && !p);
    CHECK_MSG(strstr(coda_last_error(ctx), name[i]) && strstr(coda_last_error(ctx), "Gemma 3"),
              "%s", coda_last_error(ctx));
  }
  c = gcfg(-1);
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(strstr(coda_last_error(ctx), "window -1") != NULL);
  c = gcfg(0);
  c.logit_softcap = 2.0;
  const unsigned hno[2] = {CODA_LLAMA_FOLD, CODA_LLAMA_KEEP_LOGITS};
  for (int i = 0; i < 2; i++) {
    c.flags = hno[i];
    CHECK(coda_llama_head_plan(ctx, &c, &p) == CODA_ERR_NOT_SUPPORTED && !p);
    CHECK_MSG(strstr(coda_last_error(ctx), "soft cap") != NULL, "%s", coda_last_error(ctx));
  }
}

int main(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  lt_seed(39);
  fd_block(ctx, 3); /* a local layer: a window of 3 over 8 positions */
  fd_block(ctx, 0); /* a global one */
  head_softcap(ctx);
  refusals(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
