/* The `math` declaration (docs/language.md, "Math"):
 *  - `math fast` / `math exact` parse after `mode` (or first), the canonical
 *    text writes `math fast` once, after the mode line, and parses back to
 *    an equal program; `math exact` is the default and is not written;
 *  - misplaced, repeated or misspelt declarations are refused with the
 *    reason, and `math` cannot name a value;
 *  - the builder sets it (coda_builder_math) and refuses other values;
 *  - the CPU backend computes a fast program exactly as the exact one, bit
 *    for bit, in fp32 and in fp64 (only the GPU approximates). */
#include "coda.h"
#include "check.h"
#include "lang_test_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const char kBody[] =
    "input x : tile f32\n"
    "output y : f32\n"
    "output z : f32\n"
    "t = tanh(x) + exp(0.5 * x) / (1 + sigmoid(x))\n"
    "store y = t * acc + log(1 + x * x)\n"
    "store z = sqrt(1 + x * x) - rsqrt(2 + x * x) + gelu(x) + dgelu(x) + silu(acc)\n";

static coda_program parse(coda_context ctx, const char *src) {
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s\n%s", coda_last_error(ctx), src);
  return p;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *q = s; (q = strstr(q, what)); q += strlen(what)) n++;
  return n;
}

static void test_text(coda_context ctx) {
  char src[1024];
  snprintf(src, sizeof src, "math fast\n%s", kBody);
  coda_program fast = parse(ctx, src);
  coda_program exact = parse(ctx, kBody);
  snprintf(src, sizeof src, "math exact\n%s", kBody);
  coda_program exact2 = parse(ctx, src);
  snprintf(src, sizeof src, "mode pair\nmath fast\noutput h : bf16 half\nstore h = tanh(acc.even) * acc.odd\n");
  coda_program pair = parse(ctx, src);
  if (!fast || !exact || !exact2 || !pair) goto done;
  CHECK_EQ_INT(coda_program_math(fast), CODA_MATH_FAST);
  CHECK_EQ_INT(coda_program_math(exact), CODA_MATH_EXACT);
  CHECK_EQ_INT(coda_program_math(exact2), CODA_MATH_EXACT);
  CHECK_EQ_INT(coda_program_math(pair), CODA_MATH_FAST);
  const char *ft = coda_program_text(fast);
  CHECK_MSG(!strncmp(ft, "math fast\n", 10) && count(ft, "math") == 1, "canonical text:\n%s", ft);
  CHECK_MSG(!strstr(coda_program_text(exact2), "math"), "exact is the default and not written:\n%s",
            coda_program_text(exact2));
  CHECK(!strcmp(coda_program_text(exact), coda_program_text(exact2)));
  /* the canonical text tells the two apart (kernels are found by it) */
  CHECK(strcmp(coda_program_text(exact), ft) != 0);
  const char *pt = coda_program_text(pair);
  CHECK_MSG(!strncmp(pt, "mode pair\nmath fast\n", 20), "canonical text:\n%s", pt);
  CHECK(strstr(coda_program_ir(fast), "math: fast") != NULL);
  CHECK(!strstr(coda_program_ir(exact), "math"));
  /* the text parses back to the same program */
  coda_program back = parse(ctx, ft);
  if (back) {
    CHECK_EQ_INT(coda_program_math(back), CODA_MATH_FAST);
    CHECK(!strcmp(coda_program_text(back), ft));
    CHECK(!strcmp(coda_program_ir(back), coda_program_ir(fast)));
  }
  coda_program_destroy(back);
done:
  coda_program_destroy(fast);
  coda_program_destroy(exact);
  coda_program_destroy(exact2);
  coda_program_destroy(pair);
}

static void test_errors(coda_context ctx) {
  expect_parse_error(ctx, "math fast\nmath fast\noutput y : f32\nstore y = acc\n", "line 2, column 1: math is declared twice");
  expect_parse_error(ctx, "math exact\nmath fast\noutput y : f32\nstore y = acc\n", "math is declared twice");
  expect_parse_error(ctx, "output y : f32\nmath fast\nstore y = acc\n",
               "line 2, column 1: math must come before the inputs, outputs and instructions");
  expect_parse_error(ctx, "math fast\nmode pair\noutput y : f32\nstore y = acc.even\n", "mode must be the first statement");
  expect_parse_error(ctx, "math quick\noutput y : f32\nstore y = acc\n", "expected 'exact' or 'fast' after math");
  expect_parse_error(ctx, "math\noutput y : f32\nstore y = acc\n", "expected 'exact' or 'fast' after math");
  expect_parse_error(ctx, "output y : f32\nmath = acc\nstore y = math\n", "math must come before");
  expect_parse_error(ctx, "output y : f32\nstore y = math + acc\n", "expected an expression");
}

static void test_builder(coda_context ctx) {
  coda_builder b = NULL;
  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  if (!b) return;
  CHECK(coda_builder_math(b, (coda_math)7) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "coda_builder_math: math must be CODA_MATH_EXACT or CODA_MATH_FAST, found 7"));
  coda_builder_destroy(b);
  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  if (!b) return;
  CHECK(coda_builder_math(b, CODA_MATH_FAST) == CODA_OK);
  coda_value y = coda_b_output(b, "y", CODA_F32, CODA_WIDTH_FULL, 0);
  coda_value acc = coda_b_acc(b, CODA_LANE_NONE);
  coda_value t = coda_b_op(b, CODA_OP_TANH, 1, &acc, NULL);
  CHECK(coda_b_store(b, y, t) == CODA_OK);
  coda_program p = NULL;
  CHECK_MSG(coda_builder_finish(b, &p) == CODA_OK, "%s", coda_last_error(ctx));
  coda_builder_destroy(b);
  if (p) {
    CHECK_EQ_INT(coda_program_math(p), CODA_MATH_FAST);
    CHECK(!strncmp(coda_program_text(p), "math fast\n", 10));
  }
  coda_program_destroy(p);
  CHECK_EQ_INT(coda_program_math(NULL), CODA_MATH_EXACT);
}

/* Element i of a buffer of f64 or f32 values. */
static void put(unsigned char *b, int i, int f64, double v) {
  if (f64) {
    memcpy(b + 8 * i, &v, 8);
  } else {
    float f = (float)v;
    memcpy(b + 4 * i, &f, 4);
  }
}

/* The CPU backend has one math: fast and exact programs agree bit for bit. */
static void test_cpu_same(coda_precision prec) {
  coda_context_options o = coda_context_default_options();
  o.precision = prec;
  coda_context ctx = NULL;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  if (!ctx) return;
  const int f64 = prec == CODA_PRECISION_F64;
  char src[1024];
  snprintf(src, sizeof src, "math fast\n%s", kBody);
  if (f64) { /* the same program over f64 views */
    char *q;
    while ((q = strstr(src, "f32"))) memcpy(q, "f64", 3);
  }
  char body[1024];
  snprintf(body, sizeof body, "%s", src + strlen("math fast\n"));
  coda_program prog[2] = {parse(ctx, src), parse(ctx, body)};
  enum { M = 5, N = 7, K = 3 };
  const coda_dtype dt = f64 ? CODA_F64 : CODA_F32;
  const size_t es = f64 ? 8 : 4;
  unsigned char a[M * K * 8], w[N * K * 8], x[M * N * 8], y[2][M * N * 8], z[2][M * N * 8];
  /* fresh values in [-3, 3) for x; A and B small and varied */
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < M * N; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    put(x, i, f64, ((double)(s >> 11) / 9007199254740992.0) * 6 - 3);
  }
  for (int i = 0; i < M * K; i++) put(a, i, f64, 0.25 * ((i * 7) % 11) - 1.2);
  for (int i = 0; i < N * K; i++) put(w, i, f64, 0.2 * ((i * 5) % 9) - 0.8);
  for (int k = 0; k < 2 && prog[0] && prog[1]; k++) {
    coda_args args = NULL;
    CHECK(coda_args_create(ctx, &args) == CODA_OK);
    coda_tensor ta = coda_tensor_2d(a, dt, M, K), tw = coda_tensor_2d(w, dt, N, K);
    coda_tensor tx = coda_tensor_2d(x, dt, M, N), ty = coda_tensor_2d(y[k], dt, M, N);
    coda_tensor tz = coda_tensor_2d(z[k], dt, M, N);
    CHECK(coda_args_set(args, "x", &tx) == CODA_OK);
    CHECK(coda_args_set(args, "y", &ty) == CODA_OK);
    CHECK(coda_args_set(args, "z", &tz) == CODA_OK);
    coda_tiling tl = {64, 128};
    CHECK_MSG(coda_gemm_epilogue(ctx, prog[k], CODA_N, &ta, CODA_T, &tw, args, tl) == CODA_OK, "%s",
              coda_last_error(ctx));
    coda_args_destroy(args);
  }
  CHECK_MSG(!memcmp(y[0], y[1], M * N * es) && !memcmp(z[0], z[1], M * N * es),
            "%s: the CPU computes math fast differently", f64 ? "fp64" : "fp32");
  int finite = 1;
  for (int i = 0; i < M * N; i++) {
    double v = f64 ? ((double *)(void *)y[0])[i] : ((float *)(void *)y[0])[i];
    finite &= isfinite(v);
  }
  CHECK(finite);
  coda_program_destroy(prog[0]);
  coda_program_destroy(prog[1]);
  coda_context_destroy(ctx);
}

int main(void) {
  coda_context ctx = NULL;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 1;
  test_text(ctx);
  test_errors(ctx);
  test_builder(ctx);
  coda_context_destroy(ctx);
  test_cpu_same(CODA_PRECISION_F32);
  test_cpu_same(CODA_PRECISION_F64);
  return CHECK_DONE();
}
