/* QK-norm (per-head RMSNorm, optionally followed by RoPE) as a GEMM
 * epilogue with per-head partials plus map passes, forward and backward, in
 * exact mode against an unfused double operator (whose backward is itself
 * checked by finite differences). */
#include "check.h"
#include "base/internal.h"
#include "nn/plan.h"
#include "nn/qknorm.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x853c49e6748fea9bull;
static double urand(void) { return xorshift64star_unit(&rng_state); }

enum { M = 24, K = 40, H = 6, HD = 16, N = H * HD };
static const double EPS = 1e-6;

/* Unfused operator on one head vector: y = x r g. */
static void ref_head(const double *x, const double *g, double *y, double *r) {
  double s = 0;
  for (int k = 0; k < HD; k++) s += x[k] * x[k];
  *r = 1.0 / sqrt(s / HD + EPS);
  for (int k = 0; k < HD; k++) y[k] = x[k] * *r * g[k];
}

/* Backward by the chain rule through r: dr/dx_k = -r^3 x_k / HD. */
static void ref_head_bwd(const double *x, const double *g, const double *dy,
                         double *dx, double *dg) {
  double y[HD], r;
  ref_head(x, g, y, &r);
  double dr = 0;
  for (int k = 0; k < HD; k++) {
    dr += dy[k] * x[k] * g[k];
    dg[k] += dy[k] * x[k] * r;
  }
  for (int k = 0; k < HD; k++) dx[k] = dy[k] * g[k] * r + dr * (-r * r * r * x[k] / HD);
}

/* Rotation of each adjacent pair by +theta, theta = 2 pi pos f_j (turns). */
static void ref_rope(double *v, double pos, const double *f, int sign) {
  for (int j = 0; j < HD / 2; j++) {
    double th = 2 * 3.14159265358979323846 * pos * f[j];
    double c = cos(th), sn = sign * sin(th), a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * c - b * sn;
    v[2 * j + 1] = a * sn + b * c;
  }
}


static void run(coda_context ctx, coda_tiling tl, int rope) {
  static double A[M * K], W[N * K], X[M * N], Y[M * N], R[M * H], G[HD];
  static double dY[M * N], dX[M * N], dG[HD], s_out[M * H];
  static double rX[M * N], rY[M * N], rR[M * H], rdX[M * N], rdG[HD];
  for (int i = 0; i < M * K; i++) A[i] = urand();
  for (int i = 0; i < N * K; i++) W[i] = urand() / sqrt((double)K) * (1 + (i / K) % 3);
  for (int i = 0; i < HD; i++) G[i] = 1 + 0.4 * urand();
  for (int i = 0; i < M * N; i++) dY[i] = urand();
  /* RoPE: positions per row (t of a batch of sequences of 8), repeated per
   * head; per-pair frequencies in turns as a (hi, lo) column table. */
  static double fj[HD / 2], freq[HD], dZ[M * N], rdZ[M * N];
  static int32_t pos[M * H];
  for (int j = 0; j < HD / 2; j++) {
    fj[j] = pow(100.0, -2.0 * j / HD) / (2 * 3.14159265358979323846);
    freq[2 * j] = fj[j];
    freq[2 * j + 1] = 0; /* exact mode: the hi part carries it all */
  }
  for (int m = 0; m < M; m++)
    for (int h = 0; h < H; h++) pos[m * H + h] = m % 8;
  memcpy(rdZ, dY, sizeof rdZ);
  if (rope) /* the gradient of the un-rotated output */
    for (int m = 0; m < M; m++)
      for (int h = 0; h < H; h++) ref_rope(rdZ + m * N + h * HD, m % 8, fj, -1);
  /* unfused reference */
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += A[m * K + k] * W[n * K + k];
      rX[m * N + n] = s;
    }
  memset(rdG, 0, sizeof rdG);
  for (int m = 0; m < M; m++)
    for (int h = 0; h < H; h++) {
      int o = m * N + h * HD;
      ref_head(rX + o, G, rY + o, &rR[m * H + h]);
      if (rope) ref_rope(rY + o, m % 8, fj, 1);
      ref_head_bwd(rX + o, G, rdZ + o, rdX + o, rdG);
    }

  coda_program stats = NULL, apply = NULL, dots = NULL, bwd = NULL;
  coda_status st = qknorm_stats_program(ctx, HD, EPS, CODA_F64, &stats);
  CHECK_MSG(st == CODA_OK, "stats program: %s", coda_last_error(ctx));
  CHECK(plan_builtin(ctx, rope ? "qknorm_apply_rope" : "qknorm_apply", &apply) == CODA_OK);
  CHECK(plan_builtin(ctx, rope ? "qknorm_rope_bwd_dots" : "qknorm_bwd_dots", &dots) == CODA_OK);
  CHECK(plan_builtin(ctx, "qknorm_bwd", &bwd) == CODA_OK);
  if (!stats || !apply || !dots || !bwd) goto done;

  int64_t pr, pc;
  CHECK(coda_program_arg_shape(stats, "ss", M, N, tl.tile_m, tl.tile_n, &pr, &pc) == CODA_OK);
  double *ss = calloc((size_t)(pr * pc), sizeof(double));
  coda_tensor tA = coda_tensor_2d(A, CODA_F64, M, K), tW = coda_tensor_2d(W, CODA_F64, N, K);
  coda_tensor tX = coda_tensor_2d(X, CODA_F64, M, N), tSS = coda_tensor_2d(ss, CODA_F64, pr, pc);
  coda_tensor tR = coda_tensor_2d(R, CODA_F64, M, H);
  coda_args args;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  coda_args_set(args, "x", &tX);
  coda_args_set(args, "ss", &tSS);
  coda_args_set(args, "r", &tR);
  st = coda_gemm_epilogue(ctx, stats, CODA_N, &tA, CODA_T, &tW, args, tl);
  CHECK_MSG(st == CODA_OK, "qkv gemm: %s", coda_last_error(ctx));
  st = coda_finish(ctx, stats, "r", args, M, N, tl);
  CHECK_MSG(st == CODA_OK, "finish r: %s", coda_last_error(ctx));
  CHECK_MSG(rel_err(X, rX, M * N) <= 1e-12, "x rel err %g", rel_err(X, rX, M * N));
  CHECK_MSG(rel_err(R, rR, M * H) <= 1e-10, "r rel err %g", rel_err(R, rR, M * H));

  /* one head per row: (M*H) x HD views of the same memory */
  coda_tiling mt = {tl.tile_m, tl.tile_n < HD ? tl.tile_n : HD};
  coda_tensor vX = coda_tensor_2d(X, CODA_F64, M * H, HD), vY = coda_tensor_2d(Y, CODA_F64, M * H, HD);
  coda_tensor vR = coda_tensor_2d(R, CODA_F64, M * H, 1), vG = coda_tensor_2d(G, CODA_F64, 1, HD);
  coda_args_clear(args);
  coda_args_set(args, "x", &vX);
  coda_args_set(args, "r", &vR);
  coda_args_set(args, "gamma", &vG);
  coda_args_set(args, "y", &vY);
  coda_tensor vP = coda_tensor_2d(pos, CODA_I32, M * H, 1), vF = coda_tensor_2d(freq, CODA_F64, 1, HD);
  if (rope) {
    coda_args_set(args, "pos", &vP);
    coda_args_set(args, "freq", &vF);
  }
  st = coda_map(ctx, apply, M * H, HD, args, mt);
  CHECK_MSG(st == CODA_OK, "apply: %s", coda_last_error(ctx));
  CHECK_MSG(rel_err(Y, rY, M * N) <= 1e-10, "y rel err %g", rel_err(Y, rY, M * N));

  /* backward: pass 1 (s, and with RoPE the un-rotated dz), pass 2 (dx, dgamma) */
  int64_t dr, dc, gr, gc;
  CHECK(coda_program_arg_shape(dots, "pd", M * H, HD, mt.tile_m, mt.tile_n, &dr, &dc) == CODA_OK);
  CHECK(coda_program_arg_shape(bwd, "pg", M * H, HD, mt.tile_m, mt.tile_n, &gr, &gc) == CODA_OK);
  double *pd = calloc((size_t)(dr * dc), sizeof(double)), *pg = calloc((size_t)(gr * gc), sizeof(double));
  coda_tensor vdY = coda_tensor_2d(dY, CODA_F64, M * H, HD), vdX = coda_tensor_2d(dX, CODA_F64, M * H, HD);
  coda_tensor vdZ = coda_tensor_2d(dZ, CODA_F64, M * H, HD);
  coda_tensor tpd = coda_tensor_2d(pd, CODA_F64, dr, dc), tpg = coda_tensor_2d(pg, CODA_F64, gr, gc);
  coda_tensor vS = coda_tensor_2d(s_out, CODA_F64, M * H, 1), vdG = coda_tensor_2d(dG, CODA_F64, 1, HD);
  double invhd = 1.0 / HD;
  coda_tensor tinv = coda_tensor_2d(&invhd, CODA_F64, 1, 1);
  coda_args_clear(args);
  coda_args_set(args, "x", &vX);
  coda_args_set(args, "dy", &vdY);
  coda_args_set(args, "gamma", &vG);
  coda_args_set(args, "pd", &tpd);
  coda_args_set(args, "s", &vS);
  if (rope) {
    coda_args_set(args, "pos", &vP);
    coda_args_set(args, "freq", &vF);
    coda_args_set(args, "dz", &vdZ);
  }
  st = coda_map(ctx, dots, M * H, HD, args, mt);
  CHECK_MSG(st == CODA_OK, "bwd dots: %s", coda_last_error(ctx));
  if (st == CODA_OK) st = coda_finish(ctx, dots, "s", args, M * H, HD, mt);
  CHECK_MSG(st == CODA_OK, "bwd finish: %s", coda_last_error(ctx));
  if (rope) CHECK_MSG(rel_err(dZ, rdZ, M * N) <= 1e-10, "dz rel err %g", rel_err(dZ, rdZ, M * N));
  coda_args_clear(args);
  coda_args_set(args, "x", &vX);
  coda_args_set(args, "dy", rope ? &vdZ : &vdY);
  coda_args_set(args, "r", &vR);
  coda_args_set(args, "gamma", &vG);
  coda_args_set(args, "s", &vS);
  coda_args_set(args, "invhd", &tinv);
  coda_args_set(args, "dx", &vdX);
  coda_args_set(args, "pg", &tpg);
  coda_args_set(args, "dgamma", &vdG);
  st = coda_map(ctx, bwd, M * H, HD, args, mt);
  if (st == CODA_OK) st = coda_finish(ctx, bwd, "dgamma", args, M * H, HD, mt);
  CHECK_MSG(st == CODA_OK, "bwd: %s", coda_last_error(ctx));
  CHECK_MSG(rel_err(dX, rdX, M * N) <= 1e-10, "dx rel err %g", rel_err(dX, rdX, M * N));
  CHECK_MSG(rel_err(dG, rdG, HD) <= 1e-10, "dgamma rel err %g", rel_err(dG, rdG, HD));
  coda_args_destroy(args);
  free(ss);
  free(pd);
  free(pg);
done:
  coda_program_destroy(stats);
  coda_program_destroy(apply);
  coda_program_destroy(dots);
  coda_program_destroy(bwd);
}

/* The reference backward against central differences of the reference. */
static void ref_fd(void) {
  double x[HD], g[HD], dy[HD], dx[HD], dg[HD] = {0}, y[HD], r;
  for (int k = 0; k < HD; k++) {
    x[k] = urand();
    g[k] = 1 + 0.4 * urand();
    dy[k] = urand();
  }
  ref_head_bwd(x, g, dy, dx, dg);
  double maxrel = 0, h = 1e-6;
  for (int j = 0; j < HD; j++) {
    double old = x[j], lp = 0, lm = 0;
    x[j] = old + h;
    ref_head(x, g, y, &r);
    for (int k = 0; k < HD; k++) lp += y[k] * dy[k];
    x[j] = old - h;
    ref_head(x, g, y, &r);
    for (int k = 0; k < HD; k++) lm += y[k] * dy[k];
    x[j] = old;
    maxrel = fmax(maxrel, fabs((lp - lm) / (2 * h) - dx[j]) / (fabs(dx[j]) + 1e-3));
  }
  CHECK_MSG(maxrel < 1e-7, "reference dx vs finite differences: %g", maxrel);
}

int main(void) {
  ref_fd();
  coda_context ctx = test_context(CODA_PRECISION_F64, 0);
  CHECK(ctx != NULL);
  coda_tiling t1 = {8, 32}; /* two heads per column tile */
  coda_tiling t2 = {16, 8}; /* two column tiles per head */
  coda_tiling t3 = {16, 16};
  for (int rope = 0; rope < 2; rope++) {
    run(ctx, t1, rope);
    run(ctx, t2, rope);
    run(ctx, t3, rope);
  }
  /* a bad head_dim is refused with a message */
  coda_program bad = NULL;
  CHECK(qknorm_stats_program(ctx, 0, 1e-6, CODA_F64, &bad) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(bad == NULL);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
