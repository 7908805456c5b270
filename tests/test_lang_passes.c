/* Whole operators in one file (issue 39, item 2): a program that reads a
 * finished statistic after its finisher, or has a total over the domain,
 * runs as its pass list through coda_gemm_epilogue / coda_finish, on the
 * CPU in fp64 (exact) and fp32, against references computed here in
 * double from the same operands (nothing hard-coded):
 *  - z-loss (programs/examples/zloss.coda): the logits gradient with the
 *    row's log-sum-exp and the total loss, ignored rows (tgt < 0) included;
 *  - applied QK-norm (qknorm_applied.coda): y = x rstd(x) gamma per row;
 *  - DyT backward (dyt_bwd_total.coda): dalpha as a total, dx, dw, db;
 *  - several tiles in both directions (the totals sum row tiles, lse
 *    combines column tiles);
 *  - the pass lists: their number and kinds, the finishers run between
 *    passes, canonical text that reparses to the same text;
 *  - rowmax and rowlse partials read by the next program as inputs, as
 *    the max and lse finishers combine them (bit for bit in fp64);
 *  - what is refused, with messages saying what is allowed: a segmented
 *    statistic read, a total finished by other than sum, a `__` name, a
 *    finisher read before its finish statement, dropping a finisher the
 *    program reads;
 *  - the signature of such programs: a total's partials (one per row
 *    tile) and its scalar result, rowmax / rowlse inputs (M x any), and a
 *    run's message naming a rowmax input by its kind. */
#include "check.h"
#include "coda.h"
#include "file_util.h"
#include "lang_test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { M = 40, N = 40, K = 12 };
static const coda_tiling TL = {32, 16};

static coda_program load(coda_context ctx, const char *file) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", CODA_PROGRAMS_DIR, file);
  size_t n;
  char *src = (char *)slurp(path, &n);
  CHECK_MSG(src != NULL, "cannot read %s", path);
  if (!src) return NULL;
  src[n] = '\0';
  coda_program p = NULL, e = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s: %s", file, coda_last_error(ctx));
  free(src);
  if (p && coda_program_exact(ctx, p, &e) != CODA_OK) e = NULL;
  coda_program_destroy(p);
  CHECK_MSG(e != NULL, "%s: exact form: %s", file, coda_last_error(ctx));
  return e;
}

static uint64_t rs = 12345;
static double rnd(void) { /* uniform in [-1, 1) */
  rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rs >> 11) / 4503599627370496.0 - 1.0;
}

/* acc = A B^T in double, with A, B random. */
static void operands(double *A, double *B, double *acc) {
  for (int i = 0; i < M * K; i++) A[i] = rnd();
  for (int i = 0; i < N * K; i++) B[i] = rnd();
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += A[m * K + k] * B[n * K + k];
      acc[m * N + n] = s;
    }
}

static void set(coda_args a, const char *name, void *p, coda_dtype t, int64_t r, int64_t c) {
  coda_tensor x = coda_tensor_2d(p, t, r, c);
  CHECK(coda_args_set(a, name, &x) == CODA_OK);
}

/* |got - want| <= tol max(1, |want|) everywhere; the worst index named. */
static void near(const char *what, const double *got, const double *want, int n, double tol) {
  int bad = -1;
  for (int i = 0; i < n && bad < 0; i++)
    if (!(fabs(got[i] - want[i]) <= tol * fmax(1.0, fabs(want[i])))) bad = i;
  CHECK_MSG(bad < 0, "%s[%d]: %.17g, want %.17g", what, bad, bad >= 0 ? got[bad] : 0, bad >= 0 ? want[bad] : 0);
}

static coda_status run(coda_context ctx, coda_program p, double *A, double *B, coda_args a, const char *const *fin,
                       int nfin) {
  coda_tensor tA = coda_tensor_2d(A, CODA_F64, M, K), tB = coda_tensor_2d(B, CODA_F64, N, K);
  coda_status s = coda_gemm_epilogue(ctx, p, CODA_N, &tA, CODA_T, &tB, a, TL);
  for (int i = 0; s == CODA_OK && i < nfin; i++) s = coda_finish(ctx, p, fin[i], a, M, N, TL);
  CHECK_MSG(s == CODA_OK, "run: %s", coda_last_error(ctx));
  return s;
}

static void test_zloss(coda_context ctx) {
  coda_program p = load(ctx, "zloss.coda");
  if (!p) return;
  CHECK(coda_program_num_passes(p) == 3);
  coda_pass_info pi;
  CHECK(coda_program_pass(ctx, p, 0, &pi) == CODA_OK && pi.kind == CODA_PASS_EPILOGUE && pi.nfinish == 1 &&
        !strcmp(pi.finish[0], "lse"));
  CHECK(coda_program_pass(ctx, p, 1, &pi) == CODA_OK && pi.kind == CODA_PASS_MAP && pi.nfinish == 0);
  CHECK(coda_program_pass(ctx, p, 2, &pi) == CODA_OK && pi.kind == CODA_PASS_ROWS);
  CHECK(coda_program_pass(ctx, p, 3, &pi) == CODA_ERR_INVALID_ARGUMENT);
  static double A[M * K], B[N * K], acc[M * N], dl[M * N], lp[M * 3], lse[M], lossp[2], loss[1];
  static double dl_ref[M * N], lse_ref[M];
  static int32_t tgt[M];
  double scale = 0.37, zc = 1e-4;
  operands(A, B, acc);
  for (int m = 0; m < M; m++) tgt[m] = m % 7 == 3 ? -1 : (m * 13) % N; /* some rows ignored */
  double loss_ref = 0;
  for (int m = 0; m < M; m++) {
    double mx = -INFINITY, s = 0;
    for (int n = 0; n < N; n++) mx = fmax(mx, acc[m * N + n]);
    for (int n = 0; n < N; n++) s += exp(acc[m * N + n] - mx);
    const double L = mx + log(s);
    lse_ref[m] = L;
    for (int n = 0; n < N; n++) {
      const double pr = exp(acc[m * N + n] - L), hit = n == tgt[m];
      dl_ref[m * N + n] = ((tgt[m] >= 0) * pr * (1 + 2 * zc * L) - hit) * scale;
    }
    if (tgt[m] >= 0) loss_ref += (L - acc[m * N + tgt[m]] + zc * L * L) * scale;
  }
  coda_args a;
  coda_args_create(ctx, &a);
  set(a, "tgt", tgt, CODA_I32, M, 1);
  set(a, "scale", &scale, CODA_F64, 1, 1);
  set(a, "dl", dl, CODA_F64, M, N);
  set(a, "lp", lp, CODA_F64, M, 3);
  set(a, "lse", lse, CODA_F64, M, 1);
  set(a, "lossp", lossp, CODA_F64, 2, 1);
  set(a, "loss", loss, CODA_F64, 1, 1);
  const char *fin[] = {"lse", "loss"};
  if (run(ctx, p, A, B, a, fin, 2) == CODA_OK) {
    near("zloss dl", dl, dl_ref, M * N, 1e-12);
    near("zloss lse", lse, lse_ref, M, 1e-12);
    near("zloss loss", loss, &loss_ref, 1, 1e-12);
    double two = lossp[0] + lossp[1]; /* the total's partials: one per row tile */
    near("zloss lossp", &two, &loss_ref, 1, 1e-12);
  }
  /* a statistic the program reads must be bound: the pass names it */
  coda_args b;
  coda_args_create(ctx, &b);
  set(b, "tgt", tgt, CODA_I32, M, 1);
  set(b, "scale", &scale, CODA_F64, 1, 1);
  set(b, "dl", dl, CODA_F64, M, N);
  set(b, "lp", lp, CODA_F64, M, 3);
  set(b, "lossp", lossp, CODA_F64, 2, 1);
  coda_tensor tA = coda_tensor_2d(A, CODA_F64, M, K), tB = coda_tensor_2d(B, CODA_F64, N, K);
  CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &tA, CODA_T, &tB, b, TL) != CODA_OK);
  CHECK_MSG(strstr(coda_last_error(ctx), "pass 1 of 3") && strstr(coda_last_error(ctx), "'lse' is not bound"),
            "message: %s", coda_last_error(ctx));
  set(b, "nosuch", lse, CODA_F64, M, 1);
  CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &tA, CODA_T, &tB, b, TL) != CODA_OK);
  CHECK_MSG(strstr(coda_last_error(ctx), "'nosuch' is not an argument"), "message: %s", coda_last_error(ctx));
  coda_args_destroy(b);
  coda_args_destroy(a);
  coda_program_destroy(p);
}

static void test_qknorm(coda_context ctx) {
  coda_program p = load(ctx, "qknorm_applied.coda");
  if (!p) return;
  CHECK(coda_program_num_passes(p) == 2);
  static double A[M * K], B[N * K], acc[M * N], gamma[N], y[M * N], ss[M * 3], r[M], y_ref[M * N], r_ref[M];
  operands(A, B, acc);
  for (int n = 0; n < N; n++) gamma[n] = 0.5 + 0.01 * n;
  for (int m = 0; m < M; m++) {
    double s = 0;
    for (int n = 0; n < N; n++) s += acc[m * N + n] * acc[m * N + n];
    r_ref[m] = 1 / sqrt(s / N + 1e-6);
    for (int n = 0; n < N; n++) y_ref[m * N + n] = acc[m * N + n] * r_ref[m] * gamma[n];
  }
  coda_args a;
  coda_args_create(ctx, &a);
  set(a, "gamma", gamma, CODA_F64, 1, N);
  set(a, "y", y, CODA_F64, M, N);
  set(a, "ss", ss, CODA_F64, M, 3);
  set(a, "r", r, CODA_F64, M, 1);
  const char *fin[] = {"r"};
  if (run(ctx, p, A, B, a, fin, 1) == CODA_OK) {
    near("qknorm y", y, y_ref, M * N, 1e-12);
    near("qknorm r", r, r_ref, M, 1e-12);
  }
  coda_args_destroy(a);
  coda_program_destroy(p);
}

static void test_dyt(coda_context ctx) {
  coda_program p = load(ctx, "dyt_bwd_total.coda");
  if (!p) return;
  CHECK(coda_program_num_passes(p) == 2);
  static double A[M * K], B[N * K], dy[M * N], x[M * N], w[N], dx[M * N], dap[2], dal[1], dwp[2 * N], dw[N],
      dbp[2 * N], db[N], dx_ref[M * N], dw_ref[N], db_ref[N];
  double alpha = 0.8, dal_ref = 0;
  operands(A, B, dy);
  for (int i = 0; i < M * N; i++) x[i] = 2 * rnd();
  for (int n = 0; n < N; n++) w[n] = rnd(), dw_ref[n] = db_ref[n] = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const int i = m * N + n;
      const double t = tanh(alpha * x[i]), dt = dy[i] * w[n] * (1 - t * t);
      dx_ref[i] = dt * alpha;
      dal_ref += dt * x[i];
      dw_ref[n] += dy[i] * t;
      db_ref[n] += dy[i];
    }
  coda_args a;
  coda_args_create(ctx, &a);
  set(a, "x", x, CODA_F64, M, N);
  set(a, "alpha", &alpha, CODA_F64, 1, 1);
  set(a, "w", w, CODA_F64, 1, N);
  set(a, "dx", dx, CODA_F64, M, N);
  set(a, "dap", dap, CODA_F64, 2, 1);
  set(a, "dalpha", dal, CODA_F64, 1, 1);
  set(a, "dwp", dwp, CODA_F64, 2, N);
  set(a, "dw", dw, CODA_F64, 1, N);
  set(a, "dbp", dbp, CODA_F64, 2, N);
  set(a, "db", db, CODA_F64, 1, N);
  const char *fin[] = {"dalpha", "dw", "db"};
  if (run(ctx, p, A, B, a, fin, 3) == CODA_OK) {
    near("dyt dx", dx, dx_ref, M * N, 1e-12);
    near("dyt dalpha", dal, &dal_ref, 1, 1e-12);
    near("dyt dw", dw, dw_ref, N, 1e-12);
    near("dyt db", db, db_ref, N, 1e-12);
  }
  coda_args_destroy(a);
  coda_program_destroy(p);
}

/* fp32: the same pass list with f32 temporaries, against the fp64 reference. */
static void test_f32(coda_context c32) {
  coda_program p = NULL;
  CHECK(coda_program_parse(c32,
                           "input x : tile f32\n"
                           "output y : f32\n"
                           "reduce mx = rowmax(x)\n"
                           "finish m = max(mx)\n"
                           "e = exp(x - m)\n"
                           "reduce se = rowsum(e)\n"
                           "finish s = sum(se)\n"
                           "store y = e / s\n"
                           "reduce t = total(e / s)\n"
                           "finish rows = sum(t)\n", &p) == CODA_OK);
  if (!p) return;
  /* softmax with the max and the sum: three levels, one total */
  CHECK_MSG(coda_program_num_passes(p) == 4, "%d passes\n%s", coda_program_num_passes(p),
            coda_program_passes_text(p));
  static float x[M * N], y[M * N], mx[M * 3], m[M], se[M * 3], s[M], t[2], rows[1];
  static double y_ref[M * N], got[M * N];
  for (int i = 0; i < M * N; i++) x[i] = (float)(4 * rnd());
  for (int r = 0; r < M; r++) {
    double mm = -INFINITY, ss = 0;
    for (int n = 0; n < N; n++) mm = fmax(mm, x[r * N + n]);
    for (int n = 0; n < N; n++) ss += exp(x[r * N + n] - mm);
    for (int n = 0; n < N; n++) y_ref[r * N + n] = exp(x[r * N + n] - mm) / ss;
  }
  coda_args a;
  coda_args_create(c32, &a);
  set(a, "x", x, CODA_F32, M, N);
  set(a, "y", y, CODA_F32, M, N);
  set(a, "mx", mx, CODA_F32, M, 3);
  set(a, "m", m, CODA_F32, M, 1);
  set(a, "se", se, CODA_F32, M, 3);
  set(a, "s", s, CODA_F32, M, 1);
  set(a, "t", t, CODA_F32, 2, 1);
  set(a, "rows", rows, CODA_F32, 1, 1);
  coda_status st = coda_map(c32, p, M, N, a, TL);
  if (st == CODA_OK) st = coda_finish(c32, p, "rows", a, M, N, TL);
  CHECK_MSG(st == CODA_OK, "%s", coda_last_error(c32));
  for (int i = 0; i < M * N; i++) got[i] = y[i];
  near("softmax y (f32)", got, y_ref, M * N, 1e-6);
  double total = rows[0], want = M; /* every row of a softmax sums to 1 */
  near("softmax rows (f32)", &total, &want, 1, 1e-5);
  coda_args_destroy(a);
  /* its canonical text reparses to the same text */
  coda_program q = NULL;
  CHECK(coda_program_parse(c32, coda_program_text(p), &q) == CODA_OK);
  CHECK_MSG(q && !strcmp(coda_program_text(q), coda_program_text(p)), "text:\n%s", coda_program_text(p));
  coda_program_destroy(q);
  coda_program_destroy(p);
}

/* rowmax / rowlse partials as inputs of the next program (a log-softmax). */
static void test_partial_inputs(coda_context ctx, int f64) {
  const char *t = f64 ? "f64" : "f32";
  char prod[512], cons[512];
  snprintf(prod, sizeof prod,
           "input x : tile %s\nreduce pm = rowmax(x)\nreduce pl = rowlse(x)\nfinish fm = max(pm)\n"
           "finish fl = lse(pl)\n", t);
  snprintf(cons, sizeof cons,
           "input x : tile %s\ninput pm : rowmax %s\ninput pl : rowlse %s\noutput y : %s\noutput z : %s\n"
           "store y = x - pl\nstore z = x - pm\n", t, t, t, t, t);
  coda_program p = NULL, q = NULL;
  CHECK_MSG(coda_program_parse(ctx, prod, &p) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_MSG(coda_program_parse(ctx, cons, &q) == CODA_OK, "%s", coda_last_error(ctx));
  if (!p || !q) {
    coda_program_destroy(p);
    coda_program_destroy(q);
    return;
  }
  static double xd[M * N], pmd[M * 3], pld[M * 3], fmd[M], fld[M], yd[M * N], zd[M * N];
  static float xf[M * N], pmf[M * 3], plf[M * 3], fmf[M], flf[M], yf[M * N], zf[M * N];
  static double y_ref[M * N], z_ref[M * N], y_got[M * N], z_got[M * N];
  const coda_dtype dt = f64 ? CODA_F64 : CODA_F32;
  for (int i = 0; i < M * N; i++) xd[i] = 6 * rnd(), xf[i] = (float)xd[i], xd[i] = f64 ? xd[i] : xf[i];
  xd[3 * N + 5] = f64 ? -INFINITY : xd[3 * N + 5]; /* a -inf logit (a masked one) changes nothing */
  xf[3 * N + 5] = f64 ? xf[3 * N + 5] : -INFINITY;
  for (int m = 0; m < M; m++) {
    double mx = -INFINITY, s = 0;
    for (int n = 0; n < N; n++) mx = fmax(mx, f64 ? xd[m * N + n] : xf[m * N + n]);
    for (int n = 0; n < N; n++) s += exp((f64 ? xd[m * N + n] : xf[m * N + n]) - mx);
    for (int n = 0; n < N; n++) {
      const double v = f64 ? xd[m * N + n] : xf[m * N + n];
      y_ref[m * N + n] = v - (mx + log(s));
      z_ref[m * N + n] = v - mx;
    }
  }
  coda_args a;
  coda_args_create(ctx, &a);
  set(a, "x", f64 ? (void *)xd : (void *)xf, dt, M, N);
  set(a, "pm", f64 ? (void *)pmd : (void *)pmf, dt, M, 3);
  set(a, "pl", f64 ? (void *)pld : (void *)plf, dt, M, 3);
  set(a, "fm", f64 ? (void *)fmd : (void *)fmf, dt, M, 1);
  set(a, "fl", f64 ? (void *)fld : (void *)flf, dt, M, 1);
  coda_status s = coda_map(ctx, p, M, N, a, TL);
  if (!s) s = coda_finish(ctx, p, "fm", a, M, N, TL);
  if (!s) s = coda_finish(ctx, p, "fl", a, M, N, TL);
  CHECK_MSG(s == CODA_OK, "%s", coda_last_error(ctx));
  coda_args b;
  coda_args_create(ctx, &b);
  set(b, "x", f64 ? (void *)xd : (void *)xf, dt, M, N);
  set(b, "pm", f64 ? (void *)pmd : (void *)pmf, dt, M, 3);
  set(b, "pl", f64 ? (void *)pld : (void *)plf, dt, M, 3);
  set(b, "y", f64 ? (void *)yd : (void *)yf, dt, M, N);
  set(b, "z", f64 ? (void *)zd : (void *)zf, dt, M, N);
  s = coda_map(ctx, q, M, N, b, TL);
  CHECK_MSG(s == CODA_OK, "%s", coda_last_error(ctx));
  for (int i = 0; i < M * N; i++) {
    y_got[i] = f64 ? yd[i] : yf[i];
    z_got[i] = f64 ? zd[i] : zf[i];
    if (isinf(y_ref[i])) y_ref[i] = y_got[i] == y_ref[i] ? 0 : 1, y_got[i] = 0; /* -inf both */
    if (isinf(z_ref[i])) z_ref[i] = z_got[i] == z_ref[i] ? 0 : 1, z_got[i] = 0;
  }
  near(f64 ? "rowlse input (f64)" : "rowlse input (f32)", y_got, y_ref, M * N, f64 ? 1e-13 : 1e-5);
  near(f64 ? "rowmax input (f64)" : "rowmax input (f32)", z_got, z_ref, M * N, f64 ? 1e-13 : 1e-6);
  if (f64) /* the same combination as the finishers' */
    for (int m = 0; m < M; m++) {
      CHECK(yd[m * N + 1] == xd[m * N + 1] - fld[m]);
      CHECK(zd[m * N + 1] == xd[m * N + 1] - fmd[m]);
    }
  coda_args_destroy(a);
  coda_args_destroy(b);
  coda_program_destroy(p);
  coda_program_destroy(q);
}

static void test_refused(coda_context ctx) {
  expect_parse_error(ctx, "input p : rowlse bf16\noutput y : f32\nstore y = acc - p\n",
                     "a rowlse input holds fp32 partials");
  expect_parse_error(ctx,
                     "output y : f32\nreduce ss = rowsum(acc * acc) per 8\nfinish r = rstd(ss, 1e-6)\n"
                     "store y = acc * r\n",
                     "view the tensor as one segment per row");
  expect_parse_error(ctx, "output y : f32\nstore y = acc\nreduce t = total(acc)\nfinish r = mean(t)\n",
                     "a total is finished by sum");
  expect_parse_error(ctx, "output __y : f32\nstore __y = acc\n", "names beginning with '__' are reserved");
  expect_parse_error(ctx, "output y : f32\nreduce ss = rowsum(acc)\nstore y = acc * r\nfinish r = sum(ss)\n",
                     "'r' is used before it is defined");
  /* a finisher the program reads cannot be dropped */
  coda_program p = NULL, q = NULL;
  CHECK(coda_program_parse(ctx, "output y : f32\nreduce ss = rowsum(acc)\nfinish r = sum(ss)\nstore y = acc * r\n",
                           &p) == CODA_OK);
  coda_variant_options vo = coda_variant_default_options();
  const char *drop[] = {"r"};
  vo.drop = drop;
  vo.ndrop = 1;
  CHECK(p && coda_program_variant(ctx, p, &vo, &q) != CODA_OK);
  CHECK_MSG(strstr(coda_last_error(ctx), "a finisher it reads cannot be dropped"), "%s", coda_last_error(ctx));
  coda_program_destroy(q);
  /* one kernel cannot run it; the CUDA source says so on a CUDA build */
  char *src = NULL;
  CHECK(p && coda_program_cuda_source(ctx, p, &src) != CODA_OK);
  free(src);
  coda_program_destroy(p);
}

/* The signature: a total's partials and result, rowmax / rowlse inputs. */
static void test_signature(coda_context ctx) {
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, "input x : tile f32\nreduce t = total(x)\nfinish s = sum(t)\n"
                               "output y : f32\nstore y = x\n", &p) == CODA_OK,
            "%s", coda_last_error(ctx));
  int64_t r = -1, c = -1;
  CHECK(p && coda_program_arg_shape(p, "t", 70, 50, 32, 16, &r, &c) == CODA_OK && r == 3 && c == 1);
  CHECK(p && coda_program_arg_shape(p, "s", 70, 50, 32, 16, &r, &c) == CODA_OK && r == 1 && c == 1);
  coda_arg_info ai;
  CHECK(p && coda_program_arg(p, 3, &ai) == CODA_OK && !strcmp(ai.name, "s") && ai.kind == CODA_ARG_SCALAR);
  coda_program_destroy(p);
  p = NULL;
  CHECK_MSG(coda_program_parse(ctx, "input pm : rowmax f32\ninput pl : rowlse f32\noutput y : f32\n"
                               "store y = acc - pm - pl\n", &p) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(p && coda_program_arg(p, 0, &ai) == CODA_OK && ai.kind == CODA_ARG_ROWMAX);
  CHECK(p && coda_program_arg(p, 1, &ai) == CODA_OK && ai.kind == CODA_ARG_ROWLSE);
  CHECK(p && coda_program_arg_shape(p, "pm", 7, 9, 32, 16, &r, &c) == CODA_OK && r == 7 && c == 0);
  CHECK(p && coda_program_arg_shape(p, "pl", 7, 9, 32, 16, &r, &c) == CODA_OK && r == 7 && c == 0);
  /* a run: pm with a wrong number of rows, named as a rowmax input */
  float A[7 * 3] = {0}, B[9 * 3] = {0}, pm[6 * 2] = {0}, pl[7 * 2] = {0}, y[7 * 9];
  coda_tensor ta = coda_tensor_2d(A, CODA_F32, 7, 3), tb = coda_tensor_2d(B, CODA_F32, 9, 3);
  coda_args a = NULL;
  CHECK(coda_args_create(ctx, &a) == CODA_OK);
  set(a, "pm", pm, CODA_F32, 6, 2);
  set(a, "pl", pl, CODA_F32, 7, 2);
  set(a, "y", y, CODA_F32, 7, 9);
  CHECK(p && coda_gemm_epilogue(ctx, p, CODA_N, &ta, CODA_T, &tb, a, TL) == CODA_ERR_SHAPE);
  CHECK_MSG(strstr(coda_last_error(ctx), "rowmax input 'pm'") != NULL, "%s", coda_last_error(ctx));
  set(a, "pm", pm, CODA_F32, 7, 1);
  CHECK_MSG(p && coda_gemm_epilogue(ctx, p, CODA_N, &ta, CODA_T, &tb, a, TL) == CODA_OK, "%s",
            coda_last_error(ctx));
  coda_args_destroy(a);
  coda_program_destroy(p);
}

int main(void) {
  coda_context_options o = coda_context_default_options();
  coda_context c32 = NULL, c64 = NULL;
  CHECK(coda_context_create(&o, &c32) == CODA_OK);
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &c64) == CODA_OK);
  test_zloss(c64);
  test_qknorm(c64);
  test_dyt(c64);
  test_f32(c32);
  test_partial_inputs(c64, 1);
  test_partial_inputs(c32, 0);
  test_refused(c32);
  test_signature(c32);
  coda_context_destroy(c32);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
