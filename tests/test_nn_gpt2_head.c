/* The GPT-2 head plan (final LayerNorm with bias, tied LM head, mean
 * cross-entropy) in exact mode (fp64 context, f64 buffers) against the
 * head written out in double (nn/ref_gpt2.c's LayerNorm and its backward,
 * plain loops for the logits and the loss): the loss, dx, dlnf_g, dlnf_b
 * and dwout agree to round-off, max|plan - ref| <= 1e-10 max|ref|; the
 * plan's loss against central finite differences of itself for a few
 * entries of x, lnf_g, lnf_b and wout; some ignored targets; two tilings
 * (one with ragged tiles); and the refused configs name what is allowed. */
#include "coda_nn.h"
#include "check.h"
#include "base/internal.h"
#include "nn/ref_gpt2.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 7, M = B * T, D = 24, V = 37 };
static const double EPS = 1e-5;

static uint64_t rng_state = 0x3c6ef372fe94f82bull;
static double urand(void) { return xorshift64star_unit(&rng_state); }

static void put(coda_plan p, const char *name, const double *v) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) coda_store(&t, r, c, v[r * t.cols + c]);
}

static void expect(coda_plan p, const char *name, const double *ref) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  double md = 0, mr = 0;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      double e = fabs(coda_load(&t, r, c) - ref[r * t.cols + c]);
      if (!(e <= md)) md = e;
      mr = fmax(mr, fabs(ref[r * t.cols + c]));
    }
  CHECK_MSG(md <= 1e-10 * mr && mr > 0, "gpt2 head %s: max err %.3g, max|ref| %.3g", name, md, mr);
}

/* The plan's loss (forward only) with the current buffers. */
static double plan_loss(coda_context ctx, coda_plan p) {
  coda_tensor t;
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_tensor(p, "loss", &t) == CODA_OK);
  return coda_load(&t, 0, 0);
}

/* d loss / d v[i] by central differences through the plan. */
static double fd(coda_context ctx, coda_plan p, const char *name, double *v, int i) {
  const double h = 1e-5, v0 = v[i];
  v[i] = v0 + h;
  put(p, name, v);
  double lp = plan_loss(ctx, p);
  v[i] = v0 - h;
  put(p, name, v);
  double lm = plan_loss(ctx, p);
  v[i] = v0;
  put(p, name, v);
  return (lp - lm) / (2 * h);
}

static void run_case(coda_context ctx, coda_tiling tl) {
  coda_gpt2_config cfg = coda_gpt2_default_config();
  cfg.dim = D;
  cfg.n_heads = 4;
  cfg.batch = B;
  cfg.seq = T;
  cfg.vocab = V;
  cfg.dtype = CODA_F64;
  cfg.tiling = tl;
  coda_plan p = NULL;
  coda_status st = coda_gpt2_head_plan(ctx, &cfg, &p);
  CHECK_MSG(st == CODA_OK, "%s", coda_last_error(ctx));
  if (!p) return;
  double x[M * D], g[D], b[D], w[V * D], y[M * D], mu[M], rs[M];
  double l[M * V], dl[M * V], dy[M * D], dx[M * D], dg[D] = {0}, db[D] = {0}, dw[V * D] = {0};
  int32_t tg[M];
  for (int i = 0; i < M * D; i++) x[i] = 2 * urand() - 1 + 0.3;
  for (int i = 0; i < D; i++) g[i] = 1 + 0.4 * (urand() - 0.5), b[i] = 0.3 * (urand() - 0.5);
  for (int i = 0; i < V * D; i++) w[i] = 0.6 * (urand() - 0.5);
  double cnt = 0;
  for (int m = 0; m < M; m++) {
    tg[m] = m % 6 == 4 ? -100 : (int32_t)(urand() * V) % V;
    cnt += tg[m] >= 0;
  }
  /* reference: y = LN(x), l = y W^T, the mean loss and its gradients */
  gpt2_ref_layernorm(M, D, x, g, b, EPS, y, mu, rs);
  double loss = 0;
  for (int m = 0; m < M; m++) {
    double mx = -1e300, se = 0;
    for (int n = 0; n < V; n++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += y[m * D + k] * w[n * D + k];
      l[m * V + n] = s;
      mx = fmax(mx, s);
    }
    for (int n = 0; n < V; n++) se += exp(l[m * V + n] - mx);
    double lse = mx + log(se);
    if (tg[m] >= 0) loss += (lse - l[m * V + tg[m]]) / cnt;
    for (int n = 0; n < V; n++)
      dl[m * V + n] = tg[m] >= 0 ? (exp(l[m * V + n] - lse) - (n == tg[m])) / cnt : 0.0;
  }
  for (int m = 0; m < M; m++)
    for (int k = 0; k < D; k++) {
      double s = 0;
      for (int n = 0; n < V; n++) s += dl[m * V + n] * w[n * D + k];
      dy[m * D + k] = s;
    }
  for (int n = 0; n < V; n++)
    for (int k = 0; k < D; k++)
      for (int m = 0; m < M; m++) dw[n * D + k] += dl[m * V + n] * y[m * D + k];
  gpt2_ref_layernorm_bwd(M, D, x, g, mu, rs, dy, dx, dg, db);

  put(p, "x", x);
  put(p, "lnf_g", g);
  put(p, "lnf_b", b);
  put(p, "wout", w);
  coda_tensor t;
  CHECK(coda_plan_tensor(p, "targets", &t) == CODA_OK);
  for (int m = 0; m < M; m++) ((int32_t *)t.data)[m * t.ld] = tg[m];
  double got = plan_loss(ctx, p);
  CHECK_MSG(fabs(got - loss) <= 1e-10 * fabs(loss), "gpt2 head loss %.15g vs %.15g", got, loss);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
  expect(p, "dx", dx);
  expect(p, "dlnf_g", dg);
  expect(p, "dlnf_b", db);
  expect(p, "dwout", dw);
  /* the plan against itself: finite differences of its loss */
  struct { const char *name; double *v, *grad; int i; } pr[] = {
      {"x", x, dx, 5},        {"x", x, dx, M * D - 3}, {"lnf_g", g, dg, 2},
      {"lnf_b", b, db, D - 1}, {"wout", w, dw, 7},     {"wout", w, dw, V * D - 1}};
  for (size_t k = 0; k < sizeof pr / sizeof pr[0]; k++) {
    double num = fd(ctx, p, pr[k].name, pr[k].v, pr[k].i), an = pr[k].grad[pr[k].i];
    CHECK_MSG(fabs(num - an) <= 1e-6 * fmax(fabs(an), 1e-3), "gpt2 head d loss / d %s[%d]: "
              "finite differences %.9g, analytic %.9g", pr[k].name, pr[k].i, num, an);
  }
  coda_plan_destroy(p);
}

static void bad_configs(coda_context ctx) {
  coda_gpt2_config cfg = coda_gpt2_default_config();
  cfg.dtype = CODA_F64;
  coda_plan p = NULL;
  cfg.vocab = 0;
  CHECK(coda_gpt2_head_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(strstr(coda_last_error(ctx), "vocab") != NULL);
  cfg.vocab = 50;
  cfg.flags = CODA_GPT2_FOLD;
  CHECK(coda_gpt2_head_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(strstr(coda_last_error(ctx), "CODA_GPT2_GRAD_ACT") != NULL);
  cfg.flags = 0;
  cfg.norm_eps = -1.0;
  CHECK(coda_gpt2_head_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(strstr(coda_last_error(ctx), "norm_eps") != NULL);
}

int main(void) {
  coda_context ctx = test_context(CODA_PRECISION_F64, 0);
  CHECK(ctx != NULL);
  coda_tiling t1 = {16, 24}, t2 = {8, 16}; /* t2: ragged row and column tiles */
  run_case(ctx, t1);
  run_case(ctx, t2);
  bad_configs(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
