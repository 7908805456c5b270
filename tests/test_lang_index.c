/* Index built-ins (issue 39): row, col, seg(S), segpos(S), idiv and imod
 * with floor semantics, on the CPU in fp32 and fp64 against a reference
 * computed here in double (floor(a / b), a - b floor(a / b)):
 *  - elem mode: segment and position of a column, idiv/imod of negative
 *    and mixed-sign operands (row, col and an i32 column input), integer
 *    values used as numbers (a per-segment scale);
 *  - pair mode and half-split pairs: col is the pair's first column, so
 *    seg/segpos are those of it;
 *  - a segmented rowsum that keeps the first column of each segment;
 *  - canonical text: seg(S) prints as idiv(col, S) and reparses to the
 *    same IR;
 *  - the validator: floating operands, a non-integer literal, seg of a
 *    non-literal or of 0, seg as a name, with messages that say what is
 *    allowed. */
#include "check.h"
#include "coda.h"
#include "lang/ir.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static double fdiv(double a, double b) { return b == 0 ? 0 : floor(a / b); }
static double fmod_floor(double a, double b) { return b == 0 ? a : a - b * floor(a / b); }

static coda_program parse(coda_context ctx, const char *t) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, t, &p);
  CHECK_MSG(s == CODA_OK, "parse: %s\n%s", coda_last_error(ctx), t);
  return p;
}

enum { M = 5, N = 24 };

/* elem mode over M x N: outputs a, b, c against the reference */
static void test_elem(coda_context ctx, int f64) {
  char src[1024];
  snprintf(src, sizeof src,
      "input t : col i32\n"
      "input x : tile %s\n"
      "output a : %s\n"
      "output b : %s\n"
      "output c : %s\n"
      "store a = seg(8) * 100 + segpos(8)\n"
      "store b = idiv(col - 11, 3) * 1000 + imod(row * 7 - col, -4) * 10 + imod(t, 5)\n"
      "store c = x * (idiv(t, -3) + 0.5) + select(segpos(6) == 0, 1, 0)\n"
      "reduce p = rowsum(select(segpos(4) == 0, x, 0)) per 8\n"
      "finish firsts = sum(p)\n", f64 ? "f64" : "f32", f64 ? "f64" : "f32", f64 ? "f64" : "f32",
      f64 ? "f64" : "f32");
  coda_program p = parse(ctx, src);
  if (!p) return;
  static int32_t t[N];
  static float xf[M * N], af[M * N], bf[M * N], cf[M * N];
  static double xd[M * N], ad[M * N], bd[M * N], cd[M * N];
  static float pf[M * N], ff[M * 3];
  static double pd[M * N], fd[M * 3];
  for (int n = 0; n < N; n++) t[n] = (n * 37) % 29 - 14;
  for (int i = 0; i < M * N; i++) xf[i] = (float)((i * 0.37) - 11.0), xd[i] = xf[i];
  coda_args args = NULL;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  coda_dtype dt = f64 ? CODA_F64 : CODA_F32;
  coda_tensor tt = coda_tensor_2d(t, CODA_I32, 1, N), tx = coda_tensor_2d(f64 ? (void *)xd : (void *)xf, dt, M, N);
  coda_tensor ta = coda_tensor_2d(f64 ? (void *)ad : (void *)af, dt, M, N);
  coda_tensor tb = coda_tensor_2d(f64 ? (void *)bd : (void *)bf, dt, M, N);
  coda_tensor tc = coda_tensor_2d(f64 ? (void *)cd : (void *)cf, dt, M, N);
  coda_tiling tl = {8, 8};
  int64_t pr = 0, pc = 0;
  CHECK(coda_program_arg_shape(p, "p", M, N, tl.tile_m, tl.tile_n, &pr, &pc) == CODA_OK);
  coda_tensor tp = coda_tensor_2d(f64 ? (void *)pd : (void *)pf, f64 ? CODA_F64 : CODA_F32, pr, pc);
  coda_tensor tf = coda_tensor_2d(f64 ? (void *)fd : (void *)ff, f64 ? CODA_F64 : CODA_F32, M, N / 8);
  CHECK(coda_args_set(args, "t", &tt) == CODA_OK && coda_args_set(args, "x", &tx) == CODA_OK);
  CHECK(coda_args_set(args, "a", &ta) == CODA_OK && coda_args_set(args, "b", &tb) == CODA_OK);
  CHECK(coda_args_set(args, "c", &tc) == CODA_OK && coda_args_set(args, "p", &tp) == CODA_OK);
  CHECK(coda_args_set(args, "firsts", &tf) == CODA_OK);
  CHECK_MSG(coda_map(ctx, p, M, N, args, tl) == CODA_OK, "map: %s", coda_last_error(ctx));
  CHECK_MSG(coda_finish(ctx, p, "firsts", args, M, N, tl) == CODA_OK, "finish: %s", coda_last_error(ctx));
  int bad = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const int i = m * N + n;
      const double x = xd[i];
      const double ra = fdiv(n, 8) * 100 + fmod_floor(n, 8);
      const double rb = fdiv(n - 11, 3) * 1000 + fmod_floor(m * 7 - n, -4) * 10 + fmod_floor(t[n], 5);
      const double rc = x * (fdiv(t[n], -3) + 0.5) + (fmod_floor(n, 6) == 0);
      const double ga = f64 ? ad[i] : af[i], gb = f64 ? bd[i] : bf[i], gc = f64 ? cd[i] : cf[i];
      const double tol = f64 ? 1e-12 : 1e-6;
      if (ga != ra || gb != rb || !(fabs(gc - rc) <= tol * (1 + fabs(rc)))) {
        if (bad++ < 4)
          CHECK_MSG(0, "%s (%d, %d): a %g (want %g), b %g (want %g), c %.9g (want %.9g)", f64 ? "fp64" : "fp32",
                    m, n, ga, ra, gb, rb, gc, rc);
      }
    }
  CHECK_EQ_INT(bad, 0);
  /* sum of x at the columns 0 and 4 of each 8-column segment */
  for (int m = 0; m < M; m++)
    for (int s = 0; s < N / 8; s++) {
      const double want = xd[m * N + 8 * s] + xd[m * N + 8 * s + 4];
      const double got = f64 ? fd[m * (N / 8) + s] : ff[m * (N / 8) + s];
      CHECK_NEAR(got, want, 1e-5 * (1 + fabs(want)));
    }
  coda_args_destroy(args);
  coda_program_destroy(p);
}

/* pair mode (adjacent and half-split): col = the pair's first column */
static void test_pairs(coda_context ctx, const char *mode, int split) {
  char src[512];
  snprintf(src, sizeof src,
           "%s\noutput y : f32\noutput h : f32 half\nstore y = pack(seg(4), segpos(4))\n"
           "store h = col * 100 + imod(idiv(col, 2), 3)\n", mode);
  coda_program p = parse(ctx, src);
  if (!p) return;
  static float y[M * N], h[M * N / 2];
  coda_args args = NULL;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  coda_tensor ty = coda_tensor_2d(y, CODA_F32, M, N), th = coda_tensor_2d(h, CODA_F32, M, N / 2);
  CHECK(coda_args_set(args, "y", &ty) == CODA_OK && coda_args_set(args, "h", &th) == CODA_OK);
  coda_tiling tl = {8, 8};
  CHECK_MSG(coda_map(ctx, p, M, N, args, tl) == CODA_OK, "%s: %s", mode, coda_last_error(ctx));
  int bad = 0;
  for (int m = 0; m < M; m++)
    for (int j = 0; j < N / 2; j++) {
      /* the pair's columns */
      int lo = split ? (j / (split / 2)) * split + j % (split / 2) : 2 * j;
      int hi = split ? lo + split / 2 : 2 * j + 1;
      double want = fdiv(lo, 4), wpos = fmod_floor(lo, 4), wh = lo * 100 + fmod_floor(fdiv(lo, 2), 3);
      if (y[m * N + lo] != want || y[m * N + hi] != wpos || h[m * (N / 2) + j] != wh) {
        if (bad++ < 4)
          CHECK_MSG(0, "%s pair %d: %g %g %g, want %g %g %g", mode, j, y[m * N + lo], y[m * N + hi],
                    h[m * (N / 2) + j], want, wpos, wh);
      }
    }
  CHECK_EQ_INT(bad, 0);
  coda_args_destroy(args);
  coda_program_destroy(p);
}

static void test_text(coda_context ctx) {
  coda_program p = parse(ctx, "output y : f32\nk = seg(64)\nstore y = k + segpos(64) * idiv(row, 3)\n");
  if (!p) return;
  const char *t = coda_program_text(p);
  CHECK_MSG(strstr(t, "idiv(col, 64)") && strstr(t, "imod(col, 64)") && strstr(t, "idiv(row, 3)"), "%s", t);
  coda_program q = parse(ctx, t);
  char why[256];
  if (q) CHECK_MSG(ir_equal(p, q, 1, why, sizeof why), "round trip: %s", why);
  coda_program_destroy(q);
  coda_program_destroy(p);
}

static void refused(coda_context ctx, const char *body, const char *want) {
  char src[512];
  snprintf(src, sizeof src, "input x : tile f32\ninput s : scalar f32\ninput n : row i32\noutput y : f32\n%s\n",
           body);
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, src, &p);
  CHECK_MSG(s != CODA_OK && !p && strstr(coda_last_error(ctx), want), "'%s': %s (wanted '%s')", body,
            coda_last_error(ctx), want);
  coda_program_destroy(p);
}

static void test_errors(coda_context ctx) {
  refused(ctx, "store y = idiv(x, 2)", "idiv takes integer operands, but its first operand");
  refused(ctx, "store y = idiv(x, 2)", "integers: row, col, seg(S), segpos(S), i32 inputs");
  refused(ctx, "store y = imod(col, 2.5)", "imod takes integer operands, but its second operand");
  refused(ctx, "store y = imod(col, s)", "second operand");
  refused(ctx, "k = col * 0.5\nstore y = idiv(k, 2)", "first operand 'k' is not an integer value");
  refused(ctx, "store y = idiv(col / 2, 2)", "not an integer value");
  refused(ctx, "store y = seg(0)", "seg(S) takes a segment width S, an integer literal from 1");
  refused(ctx, "store y = segpos(n)", "segpos(S) takes a segment width S");
  refused(ctx, "store y = seg(2.5)", "integer literal");
  refused(ctx, "seg = col\nstore y = seg", "'seg' is a reserved word");
  refused(ctx, "store y = idiv(col)", "argument");
  /* integers: i32 inputs, + - * min max abs select of them */
  coda_program p = parse(ctx, "input n : row i32\noutput y : f32\n"
                              "store y = idiv(abs(min(n, col) - max(row, 2) * 3), select(n > 0, 4, -4)) + imod(-col, 7)\n");
  coda_program_destroy(p);
}

int main(void) {
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CPU;
  coda_context c32 = NULL, c64 = NULL;
  CHECK(coda_context_create(&o, &c32) == CODA_OK);
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &c64) == CODA_OK);
  if (!c32 || !c64) return CHECK_DONE();
  test_elem(c32, 0);
  test_elem(c64, 1);
  test_pairs(c32, "mode pair", 0);
  test_pairs(c32, "mode pair split 8", 8);
  test_text(c32);
  test_errors(c32);
  coda_context_destroy(c32);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
