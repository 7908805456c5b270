/* The second round of the language:
 *  - round_bf16 / round_f16 round to nearest even at ties, like the stores
 *    (fp32 and fp64 interpreters); round_f16 overflows to inf and keeps
 *    subnormals; relu keeps NaN; pow's domain (negative base with integer
 *    and non-integer exponents, zero base); erf at a known value;
 *  - an unknown function is reported as such, with a suggestion;
 *  - rstd's eps must be a literal, and the message says so;
 *  - the canonical text writes numbers in their shortest form ("30", not
 *    "3e+01") and reads back to the same doubles. */
#include "coda.h"
#include "check.h"
#include "lang_test_util.h"

#include <math.h>
#include <string.h>

enum { NV = 12 };

/* y = f(x[, x1]) over 1 x NV in the context's precision */
static void run1(coda_context ctx, const char *expr, const double *x, const double *x1, double *y) {
  int f64 = coda_context_precision(ctx) == CODA_PRECISION_F64;
  const char *dt = f64 ? "f64" : "f32";
  char src[512];
  snprintf(src, sizeof src, "input x : tile %s\ninput x1 : tile %s\noutput y : %s\nstore y = %s\n", dt, dt,
           dt, expr);
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s: %s", expr, coda_last_error(ctx));
  if (!p) return;
  float xf[NV], x1f[NV], yf[NV];
  double x1d[NV];
  for (int i = 0; i < NV; i++) xf[i] = (float)x[i], x1d[i] = x1 ? x1[i] : 0, x1f[i] = (float)x1d[i];
  coda_args a;
  coda_args_create(ctx, &a);
  coda_tensor tx = coda_tensor_2d(f64 ? (void *)x : (void *)xf, f64 ? CODA_F64 : CODA_F32, 1, NV);
  coda_tensor t1 = coda_tensor_2d(f64 ? (void *)x1d : (void *)x1f, f64 ? CODA_F64 : CODA_F32, 1, NV);
  coda_tensor ty = coda_tensor_2d(f64 ? (void *)y : (void *)yf, f64 ? CODA_F64 : CODA_F32, 1, NV);
  coda_args_set(a, "x", &tx);
  coda_args_set(a, "x1", &t1);
  coda_args_set(a, "y", &ty);
  coda_tiling tl = {64, 128};
  CHECK_MSG(coda_map(ctx, p, 1, NV, a, tl) == CODA_OK, "%s: %s", expr, coda_last_error(ctx));
  if (!f64)
    for (int i = 0; i < NV; i++) y[i] = yf[i];
  coda_args_destroy(a);
  coda_program_destroy(p);
}

static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void test_values(coda_context ctx) {
  const char *mode = coda_context_precision(ctx) == CODA_PRECISION_F64 ? "fp64" : "fp32";
  double y[NV];
  const double bx[NV] = {1 + 0x1p-8, 1 + 3 * 0x1p-8, -(1 + 0x1p-8), 3, 1 + 0x1p-9, 1 + 0x1p-8 + 0x1p-20,
                         0x1p-130, -0.0, 65504, 1e38, 1 + 5 * 0x1p-8, 2.5};
  const double bw[NV] = {1, 1 + 0x1p-6, -1, 3, 1, 1 + 0x1p-7, 0x1p-130, -0.0, 65536, 0x1.2ap126, 1 + 0x1p-6 + 0x1p-7 - 0x1p-7 + 0x1p-8 * 0, 2.5};
  run1(ctx, "round_bf16(x)", bx, NULL, y);
  for (int i = 0; i < NV; i++) {
    double want = coda_dtype_round(CODA_BF16, bx[i]);
    if (i < 6 || i == 7) CHECK_MSG(want == bw[i], "test table %d: %.17g vs %.17g", i, want, bw[i]);
    CHECK_MSG(same(y[i], want), "%s round_bf16(%.17g) = %.17g, stores give %.17g", mode, bx[i], y[i], want);
  }
  const double hx[NV] = {1 + 0x1p-11, 1 + 3 * 0x1p-11, 70000, 1e-6, -1e-6, 65504, 65520, 0.1, -3.3, 0x1p-25, 0x1p-24 * 1.5, 2049};
  const double hw[NV] = {1, 1 + 0x1p-9, INFINITY, 17 * 0x1p-24, -17 * 0x1p-24, 65504, INFINITY, 0, 0, 0, 2 * 0x1p-24, 2048};
  run1(ctx, "round_f16(x)", hx, NULL, y);
  for (int i = 0; i < NV; i++) {
    double want = coda_dtype_round(CODA_F16, hx[i]);
    if (hw[i] != 0) CHECK_MSG(want == hw[i], "test table %d: %.17g vs %.17g", i, want, hw[i]);
    CHECK_MSG(same(y[i], want), "%s round_f16(%.17g) = %.17g, stores give %.17g", mode, hx[i], y[i], want);
  }
  const double rx[NV] = {-0.5, 2, NAN, 0, -1e30, 0x1p-100, INFINITY, -INFINITY, 3, -3, 0.25, -0.25};
  run1(ctx, "relu(x)", rx, NULL, y);
  for (int i = 0; i < NV; i++) {
    double want = isnan(rx[i]) ? NAN : rx[i] > 0 ? rx[i] : 0;
    CHECK_MSG(same(y[i], want), "%s relu(%g) = %g", mode, rx[i], y[i]);
  }
  const double px[NV] = {-2, -2, 0, 4, 2, 0, 1, 9, -8, 2, 0.5, 10};
  const double py[NV] = {3, 0.5, 2, 0.5, -1, -1, 1e9, 0.5, 1.0 / 3, 10, -2, -3};
  const double pw[NV] = {-8, NAN, 0, 2, 0.5, INFINITY, 1, 3, NAN, 1024, 4, 1e-3};
  run1(ctx, "pow(x, x1)", px, py, y);
  for (int i = 0; i < NV; i++) {
    int ok = isnan(pw[i]) ? isnan(y[i]) : fabs(y[i] - pw[i]) <= 1e-6 * fabs(pw[i]) || y[i] == pw[i];
    CHECK_MSG(ok, "%s pow(%g, %g) = %.17g, want %.17g", mode, px[i], py[i], y[i], pw[i]);
  }
  const double ex[NV] = {0.5, -0.5, 0, 3, -3, 1, 0.1, 2, 10, -10, 1e-3, 0.25};
  run1(ctx, "erf(x)", ex, NULL, y);
  CHECK_NEAR(y[0], 0.52049987781304654, 1e-7);
  CHECK_NEAR(y[1], -0.52049987781304654, 1e-7);
  CHECK_NEAR(y[2], 0, 0);
  CHECK_NEAR(y[3], 0.99997790950300136, 1e-7);
  CHECK_NEAR(y[8], 1, 0);
  CHECK_NEAR(y[9], -1, 0);
}

static void test_errors(coda_context ctx) {
  expect_parse_error(ctx, "output y : f32\nstore y = frob(acc)\n", "line 2, column 11: unknown function 'frob'");
  expect_parse_error(ctx, "output y : f32\nstore y = frob(acc)\n", "relu");
  expect_parse_error(ctx, "output y : f32\nstore y = rleu(acc)\n", "did you mean 'relu'?");
  expect_parse_error(ctx, "output y : f32\nstore y = sigmod(acc)\n", "did you mean 'sigmoid'?");
  expect_parse_error(ctx, "output y : f32\nstore y = q\n", "'q' is used before it is defined");
  const char *head = "input e : scalar f32\noutput y : f32\nstore y = acc\nreduce p = rowsum(acc)\n";
  char src[512];
  snprintf(src, sizeof src, "%sfinish r = rstd(p, e)\n", head);
  expect_parse_error(ctx, src, "eps must be a literal");
  snprintf(src, sizeof src, "%sfinish r = rstd(p, 1e-5 * 2)\n", head);
  expect_parse_error(ctx, src, "eps must be a literal");
  snprintf(src, sizeof src, "%sfinish r = rstd(p, 1e-5)\n", head);
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s", coda_last_error(ctx));
  coda_program_destroy(p);
}

static void test_numbers(coda_context ctx) {
  coda_program p = NULL;
  const char *src = "output y : f32\n"
                    "store y = acc * 30 + 100 - 1e-05 * acc + 1000000 + 0.1 + 0.3333333333333333 + 1e-300 + "
                    "123456789012345678 + 2.5e-7 + 1.7976931348623157e308 + 4.9406564584124654e-324\n";
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s", coda_last_error(ctx));
  if (!p) return;
  const char *t = coda_program_text(p);
  CHECK_MSG(strstr(t, "acc * 30 + 100 - 1e-5 * acc + 1e6 + 0.1 + 0.3333333333333333 + 1e-300 + "
                      "123456789012345680 + 2.5e-7 + 1.7976931348623157e308 + 5e-324"),
            "canonical text:\n%s", t);
  CHECK(strstr(t, "e+") == NULL && strstr(t, "e-0") == NULL);
  coda_program q = NULL;
  CHECK_MSG(coda_program_parse(ctx, t, &q) == CODA_OK, "%s", coda_last_error(ctx));
  if (q) CHECK(!strcmp(coda_program_text(q), t));
  coda_program_destroy(q);
  coda_program_destroy(p);
}

int main(void) {
  coda_context c32, c64;
  coda_context_options o = coda_context_default_options();
  CHECK(coda_context_create(&o, &c32) == CODA_OK);
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &c64) == CODA_OK);
  test_values(c32);
  test_values(c64);
  test_errors(c32);
  test_numbers(c32);
  coda_context_destroy(c32);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
