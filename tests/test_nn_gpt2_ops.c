/* The GPT-2 reparameterizations one program at a time, in exact mode, each
 * against the unfused operator written in double (nn/ref_gpt2.c for
 * LayerNorm, its backward and GELU; plain loops for the rest):
 *   gpt2_residual_ln + finishes       x, h, mu, rs        vs x = acc+b+res, LN stats
 *   gpt2_ln_stats (map)               h, mu, rs
 *   gpt2_fold_bias, gpt2_ln_linear(_gelu)  LN(x) W^T + b, gelu
 *   gpt2_bias_residual
 *   gpt2_gelu_bwd                     du, the two LayerNorm row sums, dbfc
 *   gpt2_ln_bwd                       dx (LayerNorm backward + residual), LN(x),
 *                                     dgamma, dbeta, colsum(dx)
 *   gpt2_qkv_dots, gpt2_colsum (map)
 *   gpt2_lm_head                      row LSE and target logit of LN(x) W^T
 *   gpt2_ce_bwd                       dl (softmax - onehot, mean), and the
 *                                     LayerNorm backward's row sums of dl W
 *                                     (taken in the j space here)
 * Every comparison: max|got - ref| <= 1e-10 max|ref|. */
#include "check.h"
#include "base/internal.h"
#include "nn/plan.h"
#include "nn/ref_gpt2.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x6a09e667f3bcc909ull;
static double urand(void) { return xorshift64star_unit(&rng_state); }

enum { M = 32, D = 64, F = 96 };
static const double EPS = 1e-5;

static double *vec(long n, double scale, double offset) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (long i = 0; i < n; i++) v[i] = offset + scale * urand();
  return v;
}
static double *zeros(long n) { return calloc((size_t)n, sizeof(double)); }

#define EXPECT(got, ref, n, what)                                                 \
  do {                                                                            \
    double md_ = 0, mr_ = 0;                                                      \
    for (long i_ = 0; i_ < (long)(n); i_++) {                                     \
      double e_ = fabs((got)[i_] - (ref)[i_]);                                    \
      if (!(e_ <= md_)) md_ = e_;                                                 \
      mr_ = fmax(mr_, fabs((ref)[i_]));                                           \
    }                                                                             \
    CHECK_MSG(md_ <= 1e-10 * mr_ && mr_ > 0, "%s: max err %.3g, max|ref| %.3g", what, \
              md_, mr_);                                                          \
  } while (0)

/* The built-in program, retyped to f64 in exact mode (as plans load them). */
static coda_program load64(coda_context ctx, const char *name) {
  coda_program p = NULL;
  if (plan_builtin(ctx, name, &p) != CODA_OK) fprintf(stderr, "%s: %s\n", name, coda_last_error(ctx));
  return p;
}

/* "tgt" (the targets) points at int32 values, every other at doubles */
typedef struct { const char *name; double *data; int64_t rows, cols; } bind;

/* Binds every argument of a step; partials are allocated here with the
 * shape the program reports. Returns the partial buffers to free. */
static coda_args make_args(coda_context ctx, coda_program prog, const bind *b, int nb,
                           int64_t MM, int64_t NN, coda_tiling tl, double **parts) {
  coda_args a;
  if (coda_args_create(ctx, &a) != CODA_OK) return NULL;
  for (int i = 0; i < nb; i++) {
    coda_tensor t = coda_tensor_2d(b[i].data, strcmp(b[i].name, "tgt") ? CODA_F64 : CODA_I32, b[i].rows, b[i].cols);
    coda_args_set(a, b[i].name, &t);
  }
  int np = 0;
  for (int i = 0; i < coda_program_num_args(prog); i++) {
    coda_arg_info info;
    coda_program_arg(prog, i, &info);
    if (info.kind != CODA_ARG_PARTIAL) continue;
    int64_t r, c;
    coda_program_arg_shape(prog, info.name, MM, NN, tl.tile_m, tl.tile_n, &r, &c);
    parts[np] = zeros(r * c);
    coda_tensor t = coda_tensor_2d(parts[np++], CODA_F64, r, c);
    coda_args_set(a, info.name, &t);
  }
  parts[np] = NULL;
  return a;
}
static void free_parts(double **parts) {
  for (int i = 0; parts[i]; i++) free(parts[i]);
}

static int run_gemm(coda_context ctx, const char *prog_name, coda_transpose tb,
                    double *A, int64_t ar, int64_t ac, double *B, int64_t br, int64_t bc,
                    const bind *b, int nb, coda_tiling tl, const char *const *finishes) {
  coda_program prog = load64(ctx, prog_name);
  if (!prog) return -1;
  coda_tensor tA = coda_tensor_2d(A, CODA_F64, ar, ac), tB = coda_tensor_2d(B, CODA_F64, br, bc);
  int64_t MM = ar, NN = tb == CODA_T ? br : bc;
  double *parts[17];
  coda_args a = make_args(ctx, prog, b, nb, MM, NN, tl, parts);
  coda_status st = coda_gemm_epilogue(ctx, prog, CODA_N, &tA, tb, &tB, a, tl);
  for (int i = 0; st == CODA_OK && finishes && finishes[i]; i++)
    st = coda_finish(ctx, prog, finishes[i], a, MM, NN, tl);
  CHECK_MSG(st == CODA_OK, "%s: %s", prog_name, coda_last_error(ctx));
  free_parts(parts);
  coda_args_destroy(a);
  coda_program_destroy(prog);
  return st == CODA_OK ? 0 : -1;
}

static int run_map(coda_context ctx, const char *prog_name, int64_t MM, int64_t NN,
                   const bind *b, int nb, coda_tiling tl, const char *const *finishes) {
  coda_program prog = load64(ctx, prog_name);
  if (!prog) return -1;
  double *parts[17];
  coda_args a = make_args(ctx, prog, b, nb, MM, NN, tl, parts);
  coda_status st = coda_map(ctx, prog, MM, NN, a, tl);
  for (int i = 0; st == CODA_OK && finishes && finishes[i]; i++)
    st = coda_finish(ctx, prog, finishes[i], a, MM, NN, tl);
  CHECK_MSG(st == CODA_OK, "%s: %s", prog_name, coda_last_error(ctx));
  free_parts(parts);
  coda_args_destroy(a);
  coda_program_destroy(prog);
  return st == CODA_OK ? 0 : -1;
}

/* The LM head programs with W (F x D) as a vocabulary of F: the logits
 * LN(x) W^T (no bias), their row LSE and target logit, then the
 * cross-entropy backward's dl and the two LayerNorm row sums. h, mu, rs
 * are the producer's (h = x gamma); rln = LN(x), rx = x. */
static void head(coda_context ctx, coda_tiling tl, double *W, double *gam, double *bet,
                 double *h, double *mu, double *rs, const double *rln, const double *rx,
                 const double *rmu, const double *rrs) {
  int32_t tgt[M];
  double *c = zeros(F), *dv = zeros(F), *lse = zeros(M), *pick = zeros(M), *valid = zeros(M);
  double *dl = zeros(M * F), *s1 = zeros(M), *s2 = zeros(M);
  double *rl = zeros(M * F), *rlse = zeros(M), *rpick = zeros(M), *rdl = zeros(M * F);
  double *rs1 = zeros(M), *rs2 = zeros(M), cnt = 0;
  for (int m = 0; m < M; m++) {
    tgt[m] = m % 5 == 3 ? -100 : (int32_t)(urand() * F) % F;
    valid[m] = tgt[m] >= 0;
    cnt += valid[m];
  }
  for (int n = 0; n < F; n++)
    for (int k = 0; k < D; k++) {
      c[n] += W[n * D + k] * gam[k];
      dv[n] += W[n * D + k] * bet[k];
    }
  for (int m = 0; m < M; m++) {
    double mx = -1e300, se = 0;
    for (int n = 0; n < F; n++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += rln[m * D + k] * W[n * D + k];
      rl[m * F + n] = s;
      mx = fmax(mx, s);
    }
    for (int n = 0; n < F; n++) se += exp(rl[m * F + n] - mx);
    rlse[m] = mx + log(se);
    rpick[m] = tgt[m] >= 0 ? rl[m * F + tgt[m]] : 0.0;
    for (int n = 0; n < F; n++)
      rdl[m * F + n] = (exp(rl[m * F + n] - rlse[m]) - (n == tgt[m])) * valid[m] / cnt;
    for (int k = 0; k < D; k++) { /* g = (dl W) gamma: s1 = sum g, s2 = sum g xhat */
      double a = 0, xh = (rx[m * D + k] - rmu[m]) * rrs[m];
      for (int n = 0; n < F; n++) a += rdl[m * F + n] * W[n * D + k];
      rs1[m] += a * gam[k];
      rs2[m] += a * gam[k] * xh;
    }
  }
  const char *fin_lse[] = {"lse", NULL};
  bind bh[] = {{"mu", mu, M, 1}, {"rs", rs, M, 1},         {"c", c, 1, F},
               {"dv", dv, 1, F}, {"tgt", (double *)tgt, M, 1}, {"lse", lse, M, 1}};
  if (run_gemm(ctx, "gpt2_lm_head", CODA_T, h, M, D, W, F, D, bh, 6, tl, fin_lse)) goto done;
  EXPECT(lse, rlse, M, "lm_head lse");
  {
    /* pick is a partial: read it back through a 1-column finish-free run */
    coda_program prog = load64(ctx, "gpt2_lm_head");
    double *parts[17];
    coda_args a = make_args(ctx, prog, bh, 5, M, F, tl, parts);
    coda_tensor tA = coda_tensor_2d(h, CODA_F64, M, D), tB = coda_tensor_2d(W, CODA_F64, F, D);
    coda_tensor tp = coda_tensor_2d(pick, CODA_F64, M, 1);
    coda_args_set(a, "pick", &tp);
    CHECK(coda_gemm_epilogue(ctx, prog, CODA_N, &tA, CODA_T, &tB, a, tl) == CODA_OK);
    free_parts(parts);
    coda_args_destroy(a);
    coda_program_destroy(prog);
    EXPECT(pick, rpick, M, "lm_head pick");
  }
  const char *fin_s[] = {"s1", "s2", NULL};
  bind bb[] = {{"mu", mu, M, 1},       {"rs", rs, M, 1},     {"c", c, 1, F},
               {"dv", dv, 1, F},       {"tgt", (double *)tgt, M, 1}, {"lse", lse, M, 1},
               {"valid", valid, M, 1}, {"cnt", &cnt, 1, 1},  {"dl", dl, M, F},
               {"s1", s1, M, 1},       {"s2", s2, M, 1}};
  if (run_gemm(ctx, "gpt2_ce_bwd", CODA_T, h, M, D, W, F, D, bb, 11, tl, fin_s)) goto done;
  EXPECT(dl, rdl, M * F, "ce_bwd dl");
  EXPECT(s1, rs1, M, "ce_bwd s1 = sum (dl W) gamma");
  EXPECT(s2, rs2, M, "ce_bwd s2 = sum (dl W) gamma xhat");
done:;
  double *all[] = {c, dv, lse, pick, valid, dl, s1, s2, rl, rlse, rpick, rdl, rs1, rs2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void run(coda_context ctx, coda_tiling tl) {
  /* data */
  double *o = vec(M * D, 1, 0), *Wo = vec(D * D, 0.2, 0), *bo = vec(D, 0.3, 0);
  double *res = vec(M * D, 1, 0.4), *gam = vec(D, 0.3, 1), *bet = vec(D, 0.3, 0);
  double *W = vec(F * D, 0.2, 0), *b = vec(F, 0.3, 0), *Wp = vec(D * F, 0.2, 0);
  double *bp = vec(D, 0.3, 0), *dy = vec(M * D, 1, 0), *dres = vec(M * D, 1, 0);
  /* outputs */
  double *x = zeros(M * D), *h = zeros(M * D), *mu = zeros(M), *rs = zeros(M);
  double *c = zeros(F), *dv = zeros(F), *u = zeros(M * F), *g = zeros(M * F);
  double *y = zeros(M * D), *du = zeros(M * F), *s1 = zeros(M), *s2 = zeros(M);
  double *db = zeros(F), *dx = zeros(M * D), *post = zeros(M * D);
  double *dgam = zeros(D), *dbet = zeros(D), *dbias = zeros(D);
  /* references */
  double *rx = zeros(M * D), *rh = zeros(M * D), *rln = zeros(M * D), *rmu = zeros(M);
  double *rrs = zeros(M), *ru = zeros(M * F), *rg = zeros(M * F), *ry = zeros(M * D);
  double *rdu = zeros(M * F), *rdln = zeros(M * D), *rdx = zeros(M * D);
  double *rdgam = zeros(D), *rdbet = zeros(D), *rdb = zeros(F), *rs1 = zeros(M);
  double *rs2 = zeros(M), *rdbias = zeros(D), *rc = zeros(F);

  for (int m = 0; m < M; m++)
    for (int n = 0; n < D; n++) {
      double s = bo[n] + res[m * D + n];
      for (int k = 0; k < D; k++) s += o[m * D + k] * Wo[n * D + k];
      rx[m * D + n] = s;
      rh[m * D + n] = s * gam[n];
    }
  gpt2_ref_layernorm(M, D, rx, gam, bet, EPS, rln, rmu, rrs);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < F; n++) {
      double s = b[n];
      for (int k = 0; k < D; k++) s += rln[m * D + k] * W[n * D + k];
      ru[m * F + n] = s;
      rg[m * F + n] = gpt2_ref_gelu(s);
    }
  for (int n = 0; n < F; n++)
    for (int k = 0; k < D; k++) rc[n] += W[n * D + k] * gam[k];

  /* forward: producer, finishes */
  const char *fin_stats[] = {"mu", "rs", NULL};
  bind b1[] = {{"bias", bo, 1, D}, {"res", res, M, D}, {"gamma", gam, 1, D},
               {"x", x, M, D},     {"h", h, M, D},     {"mu", mu, M, 1}, {"rs", rs, M, 1}};
  if (run_gemm(ctx, "gpt2_residual_ln", CODA_T, o, M, D, Wo, D, D, b1, 7, tl, fin_stats)) goto done;
  EXPECT(x, rx, M * D, "residual_ln x");
  EXPECT(h, rh, M * D, "residual_ln h");
  EXPECT(mu, rmu, M, "residual_ln mu");
  EXPECT(rs, rrs, M, "residual_ln rs");
  /* the same statistics from a map pass */
  {
    double *h2 = zeros(M * D), *mu2 = zeros(M), *rs2b = zeros(M);
    bind bs[] = {{"x", rx, M, D}, {"gamma", gam, 1, D}, {"h", h2, M, D},
                 {"mu", mu2, M, 1}, {"rs", rs2b, M, 1}};
    if (!run_map(ctx, "gpt2_ln_stats", M, D, bs, 5, tl, fin_stats)) {
      EXPECT(h2, rh, M * D, "ln_stats h");
      EXPECT(mu2, rmu, M, "ln_stats mu");
      EXPECT(rs2b, rrs, M, "ln_stats rs");
    }
    free(h2);
    free(mu2);
    free(rs2b);
  }
  /* fold: c = W gamma (plain GEMM), dv = W beta + b */
  {
    coda_tensor tW = coda_tensor_2d(W, CODA_F64, F, D), tg = coda_tensor_2d(gam, CODA_F64, 1, D);
    coda_tensor tc = coda_tensor_2d(c, CODA_F64, 1, F);
    coda_status st = coda_gemm(ctx, CODA_N, &tg, CODA_T, &tW, &tc, 1.0f, 0);
    CHECK_MSG(st == CODA_OK, "fold c: %s", coda_last_error(ctx));
    EXPECT(c, rc, F, "fold c");
    coda_tiling one = {8, 32};
    bind bf[] = {{"b", b, 1, F}, {"dv", dv, 1, F}};
    if (run_gemm(ctx, "gpt2_fold_bias", CODA_T, bet, 1, D, W, F, D, bf, 2, one, NULL)) goto done;
    double *rdv = zeros(F);
    for (int n = 0; n < F; n++) {
      rdv[n] = b[n];
      for (int k = 0; k < D; k++) rdv[n] += W[n * D + k] * bet[k];
    }
    EXPECT(dv, rdv, F, "fold dv");
    free(rdv);
  }
  /* consumer */
  bind b2[] = {{"mu", mu, M, 1}, {"rs", rs, M, 1}, {"c", c, 1, F}, {"dv", dv, 1, F},
               {"u", u, M, F},   {"g", g, M, F}};
  if (run_gemm(ctx, "gpt2_ln_linear_gelu", CODA_T, h, M, D, W, F, D, b2, 6, tl, NULL)) goto done;
  EXPECT(u, ru, M * F, "ln_linear_gelu u");
  EXPECT(g, rg, M * F, "ln_linear_gelu g");
  {
    double *z = zeros(M * F);
    bind bz[] = {{"mu", mu, M, 1}, {"rs", rs, M, 1}, {"c", c, 1, F}, {"dv", dv, 1, F},
                 {"z", z, M, F}};
    if (!run_gemm(ctx, "gpt2_ln_linear", CODA_T, h, M, D, W, F, D, bz, 5, tl, NULL))
      EXPECT(z, ru, M * F, "ln_linear z");
    free(z);
  }
  /* down projection */
  for (int m = 0; m < M; m++)
    for (int n = 0; n < D; n++) {
      double s = bp[n] + rx[m * D + n];
      for (int k = 0; k < F; k++) s += rg[m * F + k] * Wp[n * F + k];
      ry[m * D + n] = s;
    }
  bind b3[] = {{"bias", bp, 1, D}, {"res", x, M, D}, {"y", y, M, D}};
  if (run_gemm(ctx, "gpt2_bias_residual", CODA_T, g, M, F, Wp, D, F, b3, 3, tl, NULL)) goto done;
  EXPECT(y, ry, M * D, "bias_residual y");

  /* backward references: du = (dy Wp) gelu'(u); dLN = du W; LN backward */
  for (int m = 0; m < M; m++)
    for (int n = 0; n < F; n++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += dy[m * D + k] * Wp[k * F + n];
      rdu[m * F + n] = s * gpt2_ref_dgelu(ru[m * F + n]);
      rdb[n] += rdu[m * F + n];
    }
  for (int m = 0; m < M; m++)
    for (int k = 0; k < D; k++) {
      double s = 0;
      for (int n = 0; n < F; n++) s += rdu[m * F + n] * W[n * D + k];
      rdln[m * D + k] = s;
    }
  gpt2_ref_layernorm_bwd(M, D, rx, gam, rmu, rrs, rdln, rdx, rdgam, rdbet);
  for (int i = 0; i < M * D; i++) rdx[i] += dres[i];
  for (int m = 0; m < M; m++)
    for (int k = 0; k < D; k++) {
      double xh = (rx[m * D + k] - rmu[m]) * rrs[m];
      rs1[m] += rdln[m * D + k] * gam[k];           /* sum_k g_k */
      rs2[m] += rdln[m * D + k] * gam[k] * xh;      /* sum_k g_k xhat_k */
      rdbias[k] += rdx[m * D + k];
    }

  const char *fin_gelu[] = {"s1", "s2", "db", NULL};
  bind b4[] = {{"u", u, M, F},   {"c", c, 1, F},   {"dv", dv, 1, F}, {"du", du, M, F},
               {"s1", s1, M, 1}, {"s2", s2, M, 1}, {"db", db, 1, F}};
  if (run_gemm(ctx, "gpt2_gelu_bwd", CODA_N, dy, M, D, Wp, D, F, b4, 7, tl, fin_gelu)) goto done;
  EXPECT(du, rdu, M * F, "gelu_bwd du");
  EXPECT(s1, rs1, M, "gelu_bwd s1 = sum dLN gamma");
  EXPECT(s2, rs2, M, "gelu_bwd s2 = sum dLN gamma xhat");
  EXPECT(db, rdb, F, "gelu_bwd db");

  double invd = 1.0 / D;
  const char *fin_ln[] = {"dgamma", "dbeta", "dbias", NULL};
  bind b5[] = {{"x", x, M, D},        {"dres", dres, M, D}, {"gamma", gam, 1, D},
               {"beta", bet, 1, D},   {"mu", mu, M, 1},     {"rs", rs, M, 1},
               {"s1", s1, M, 1},      {"s2", s2, M, 1},     {"invd", &invd, 1, 1},
               {"dx", dx, M, D},      {"post", post, M, D}, {"dgamma", dgam, 1, D},
               {"dbeta", dbet, 1, D}, {"dbias", dbias, 1, D}};
  if (run_gemm(ctx, "gpt2_ln_bwd", CODA_N, du, M, F, W, F, D, b5, 14, tl, fin_ln)) goto done;
  EXPECT(dx, rdx, M * D, "ln_bwd dx");
  EXPECT(post, rln, M * D, "ln_bwd post = LN(x)");
  EXPECT(dgam, rdgam, D, "ln_bwd dgamma");
  EXPECT(dbet, rdbet, D, "ln_bwd dbeta");
  EXPECT(dbias, rdbias, D, "ln_bwd colsum(dx)");

  /* the same row sums from a map pass over (dz, z) = (du, u) */
  {
    double *q1 = zeros(M), *q2 = zeros(M), *qb = zeros(F);
    bind bq[] = {{"dz", du, M, F}, {"z", u, M, F},   {"c", c, 1, F},  {"dv", dv, 1, F},
                 {"s1", q1, M, 1}, {"s2", q2, M, 1}, {"db", qb, 1, F}};
    if (!run_map(ctx, "gpt2_qkv_dots", M, F, bq, 7, tl, fin_gelu)) {
      EXPECT(q1, rs1, M, "qkv_dots s1");
      EXPECT(q2, rs2, M, "qkv_dots s2");
      EXPECT(qb, rdb, F, "qkv_dots db");
    }
    free(q1);
    free(q2);
    free(qb);
    double *cs = zeros(D), *rcs = zeros(D);
    for (int m = 0; m < M; m++)
      for (int k = 0; k < D; k++) rcs[k] += dy[m * D + k];
    const char *fin_s[] = {"s", NULL};
    bind bc[] = {{"t", dy, M, D}, {"s", cs, 1, D}};
    if (!run_map(ctx, "gpt2_colsum", M, D, bc, 2, tl, fin_s)) EXPECT(cs, rcs, D, "colsum");
    free(cs);
    free(rcs);
  }
  head(ctx, tl, W, gam, bet, h, mu, rs, rln, rx, rmu, rrs);
done:;
  double *all[] = {o, Wo, bo, res, gam, bet, W, b, Wp, bp, dy, dres, x, h, mu, rs, c, dv, u, g,
                   y, du, s1, s2, db, dx, post, dgam, dbet, dbias, rx, rh, rln, rmu, rrs, ru,
                   rg, ry, rdu, rdln, rdx, rdgam, rdbet, rdb, rs1, rs2, rdbias, rc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

int main(void) {
  coda_context ctx = test_context(CODA_PRECISION_F64, 0);
  CHECK(ctx != NULL);
  coda_tiling t1 = {16, 48}; /* ragged column tiles */
  coda_tiling t2 = {8, 16};
  run(ctx, t1);
  run(ctx, t2);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
