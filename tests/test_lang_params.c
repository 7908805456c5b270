/* Parameters (`param NAME [= NUMBER]`, docs/language.md "Parameters"):
 *  - parsing and printing: defaults, no default, uses in expressions, under
 *    unary minus and as rstd's eps; print(parse(print(p))) == print(p);
 *  - refusals with their messages: a parameter declared twice, read with a
 *    lane, a non-finite default, a default that is not a number;
 *  - coda_program_bind: values replace defaults in the IR and the text;
 *    refusals of an unknown name (the message lists the program's
 *    parameters), a name given twice, a non-finite value, a parameter left
 *    without a value, a bad struct_size, an rstd eps < 0; a program with a
 *    parameter without a value does not run;
 *  - the fp64 interpreter: one program run with two eps values gives
 *    different results, each equal to a reference computed here;
 *  - gradcheck: a soft-capping forward and its backward bound to a
 *    non-default cap pass; a backward bound to another cap fails;
 *  - plans: plan_builtin_eps binds the built-ins' `eps` and leaves programs
 *    without it alone. (The Llama plans with other eps values against the
 *    reference engine: test_nn_llama_block.) */
#include "check.h"
#include "coda.h"
#include "nn/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static coda_program parse(coda_context ctx, const char *t) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, t, &p);
  CHECK_MSG(s == CODA_OK, "parse: %s\n%s", coda_last_error(ctx), t);
  return p;
}

static void expect_parse_error(coda_context ctx, const char *t, const char *what) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, t, &p);
  CHECK_MSG(s != CODA_OK && !p, "parsed, expected an error with '%s':\n%s", what, t);
  CHECK_MSG(strstr(coda_last_error(ctx), what) != NULL, "message '%s' lacks '%s'", coda_last_error(ctx), what);
  coda_program_destroy(p);
}

/* Binds n (name, value) pairs; returns the status, *out the program. */
static coda_status bind(coda_context ctx, coda_program p, int n, const coda_param_value *v, coda_program *out) {
  coda_bind_options o = coda_bind_default_options();
  o.values = v;
  o.nvalues = n;
  return coda_program_bind(ctx, p, &o, out);
}

static void expect_bind_error(coda_context ctx, coda_program p, int n, const coda_param_value *v,
                              coda_status want, const char *what) {
  coda_program q = (coda_program)1;
  coda_status s = bind(ctx, p, n, v, &q);
  CHECK_MSG(s == want, "bind -> %s, expected %s (%s)", coda_status_string(s), coda_status_string(want),
            coda_last_error(ctx));
  CHECK(q == NULL);
  CHECK_MSG(strstr(coda_last_error(ctx), what) != NULL, "message '%s' lacks '%s'", coda_last_error(ctx), what);
}

static const char *prog_text =
    "param eps = 1e-5\n"
    "param scale\n"
    "input x : tile f64\n"
    "output y : f64\n"
    "store y = -scale * x / (x * x + eps)\n"
    "reduce ss = rowsum(x * x)\n"
    "finish r = rstd(ss, eps)\n";

static void test_parse_print(coda_context ctx) {
  coda_program p = parse(ctx, prog_text);
  if (!p) return;
  CHECK_EQ_INT(coda_program_num_params(p), 2);
  coda_param_info i0, i1;
  CHECK(coda_program_param(p, 0, &i0) == CODA_OK && coda_program_param(p, 1, &i1) == CODA_OK);
  CHECK(!strcmp(i0.name, "eps") && i0.has_value && i0.value == 1e-5);
  CHECK(!strcmp(i1.name, "scale") && !i1.has_value);
  CHECK(coda_program_param(p, 2, &i0) == CODA_ERR_INVALID_ARGUMENT);
  const char *t = coda_program_text(p);
  CHECK_MSG(strstr(t, "param eps = 1e-5\nparam scale\n") != NULL, "text:\n%s", t);
  CHECK_MSG(strstr(t, "rstd(ss, eps)") && strstr(t, "-scale * x / (x * x + eps)"), "text:\n%s", t);
  coda_program q = parse(ctx, t);
  if (q) CHECK_MSG(!strcmp(coda_program_text(q), t), "reprinted:\n%s\nvs\n%s", coda_program_text(q), t);
  CHECK(strstr(coda_program_ir(p), "(par0 eps)") != NULL);
  coda_program_destroy(q);
  /* a parameter used twice and named: both print by name */
  coda_program r = parse(ctx, "param c = -2.5\ninput x : tile f32\noutput y : f32\nk = c\nstore y = k * x + c\n");
  if (r) CHECK_MSG(strstr(coda_program_text(r), "param c = -2.5\n") && strstr(coda_program_text(r), "k = c\n"),
                   "text:\n%s", coda_program_text(r));
  coda_program_destroy(r);
  coda_program_destroy(p);
}

static void test_parse_refusals(coda_context ctx) {
  expect_parse_error(ctx, "param eps = 1e-5\nparam eps = 1e-6\ninput x : tile f32\n", "'eps' is already defined");
  expect_parse_error(ctx, "input eps : tile f32\nparam eps\n", "'eps' is already defined");
  expect_parse_error(ctx, "param c = 2\nmode pair\n", "mode must be the first statement");
  expect_parse_error(ctx, "mode pair\nparam c = 2\ninput x : tile f32\noutput y : f32\nstore y = c.even\n",
                     "'c' is a parameter");
  expect_parse_error(ctx, "param c = 1e999\n", "'1e999'");
  expect_parse_error(ctx, "param c = x\n", "a number literal as the parameter's default");
  expect_parse_error(ctx, "param c 2\n", "'=' and a default");
  expect_parse_error(ctx, "input param : tile f32\n", "reserved word");
  expect_parse_error(ctx, "input x : tile f32\nreduce s = rowsum(x)\nfinish r = rstd(s, x)\n",
                     "a number literal or a parameter as rstd's eps");
  expect_parse_error(ctx, "input x : tile f32\noutput y : f32\nstore y = x * c\nparam c = 1\n", "used before");
}

static void test_bind(coda_context ctx) {
  coda_program p = parse(ctx, prog_text);
  if (!p) return;
  coda_param_value v[3] = {{"scale", 2.0}, {"eps", 0.25}, {"epz", 1.0}};
  coda_program q = NULL;
  CHECK_STATUS(ctx, bind(ctx, p, 2, v, &q), CODA_OK);
  if (q) {
    const char *t = coda_program_text(q);
    CHECK_MSG(strstr(t, "param eps = 0.25\nparam scale = 2\n") != NULL, "bound text:\n%s", t);
    coda_param_info in;
    CHECK(coda_program_param(q, 0, &in) == CODA_OK && in.has_value && in.value == 0.25);
    /* binding again: only what is given changes */
    coda_program q2 = NULL;
    CHECK_STATUS(ctx, bind(ctx, q, 1, v, &q2), CODA_OK);
    if (q2) CHECK(!strcmp(coda_program_text(q2), t));
    coda_program_destroy(q2);
    /* the program key changes with the values: the text does */
    CHECK(strcmp(coda_program_text(p), t) != 0);
  }
  coda_program_destroy(q);
  expect_bind_error(ctx, p, 3, v, CODA_ERR_INVALID_ARGUMENT, "unknown parameter 'epz' (it declares eps, scale)");
  coda_param_value twice[2] = {{"scale", 1.0}, {"scale", 2.0}};
  expect_bind_error(ctx, p, 2, twice, CODA_ERR_INVALID_ARGUMENT, "'scale' is given twice");
  coda_param_value inf[2] = {{"scale", 1.0}, {"eps", INFINITY}};
  expect_bind_error(ctx, p, 2, inf, CODA_ERR_INVALID_ARGUMENT, "parameter 'eps': value inf is not finite");
  inf[1].value = NAN;
  expect_bind_error(ctx, p, 2, inf, CODA_ERR_INVALID_ARGUMENT, "is not finite");
  coda_param_value only_eps = {"eps", 0.5};
  expect_bind_error(ctx, p, 1, &only_eps, CODA_ERR_INVALID_ARGUMENT, "parameter 'scale' has no value");
  coda_param_value neg[2] = {{"scale", 1.0}, {"eps", -1.0}};
  expect_bind_error(ctx, p, 2, neg, CODA_ERR_TYPE, "eps must be finite and >= 0, and parameter 'eps' is -1");
  coda_bind_options o = coda_bind_default_options();
  o.struct_size = 3;
  q = NULL;
  CHECK_STATUS(ctx, coda_program_bind(ctx, p, &o, &q), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "coda_bind_options: struct_size 3") != NULL);
  /* a program without parameters: any name is unknown; no values is a copy */
  coda_program plain = parse(ctx, "input x : tile f32\noutput y : f32\nstore y = x\n");
  if (plain) {
    expect_bind_error(ctx, plain, 1, v, CODA_ERR_INVALID_ARGUMENT, "unknown parameter 'scale' (it declares none)");
    CHECK_STATUS(ctx, coda_program_bind(ctx, plain, NULL, &q), CODA_OK);
    if (q) CHECK(!strcmp(coda_program_text(q), coda_program_text(plain)));
    coda_program_destroy(q);
  }
  coda_program_destroy(plain);
  coda_program_destroy(p);
}

/* Runs prog (bound: scale, eps) as a map over x; y and r out. */
static coda_status run(coda_context ctx, coda_program prog, const coda_tensor *x, coda_tensor *y,
                       coda_tensor *r) {
  const int64_t M = x->rows, N = x->cols;
  coda_tiling tl = {8, 8};
  int64_t pr = 0, pc = 0;
  coda_status s = coda_program_arg_shape(prog, "ss", M, N, tl.tile_m, tl.tile_n, &pr, &pc);
  if (s) return s;
  coda_tensor ss = {calloc((size_t)(pr * pc), sizeof(float)), CODA_F32, pr, pc, pc};
  coda_args a;
  if ((s = coda_args_create(ctx, &a))) return s;
  coda_args_set(a, "x", x);
  coda_args_set(a, "y", y);
  coda_args_set(a, "ss", &ss);
  coda_args_set(a, "r", r);
  s = coda_map(ctx, prog, M, N, a, tl);
  if (!s) s = coda_finish(ctx, prog, "r", a, M, N, tl);
  coda_args_destroy(a);
  free(ss.data);
  return s;
}

static void test_interpreter(coda_context ctx) {
  enum { M = 3, N = 20 };
  double xs[M * N], ys[2][M * N], rs[2][M];
  for (int i = 0; i < M * N; i++) xs[i] = 0.03 * (i % 11) - 0.12 + 0.001 * i;
  coda_tensor x = {xs, CODA_F64, M, N, N};
  coda_program p = parse(ctx, prog_text);
  if (!p) return;
  /* a parameter without a value: the program does not run */
  {
    coda_tensor y = {ys[0], CODA_F64, M, N, N}, r = {rs[0], CODA_F32, M, 1, 1};
    float rf[M];
    r.data = rf;
    coda_status s = run(ctx, p, &x, &y, &r);
    CHECK_MSG(s == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), "parameter 'scale' has no value"),
              "unbound run -> %s (%s)", coda_status_string(s), coda_last_error(ctx));
  }
  const double eps[2] = {1e-5, 0.25}, scale = 1.5;
  for (int k = 0; k < 2; k++) {
    coda_param_value v[2] = {{"scale", scale}, {"eps", eps[k]}};
    coda_program q = NULL;
    CHECK_STATUS(ctx, bind(ctx, p, k ? 2 : 1, v, &q), CODA_OK); /* k = 0: eps keeps its default */
    if (!q) continue;
    coda_tensor y = {ys[k], CODA_F64, M, N, N};
    float rf[M];
    coda_tensor r = {rf, CODA_F32, M, 1, 1};
    CHECK_STATUS(ctx, run(ctx, q, &x, &y, &r), CODA_OK);
    int bad = 0;
    for (int m = 0; m < M; m++) {
      double sq = 0;
      for (int n = 0; n < N; n++) {
        double xv = xs[m * N + n], want = -scale * xv / (xv * xv + eps[k]);
        sq += xv * xv;
        if (!(fabs(ys[k][m * N + n] - want) <= 1e-12 * (1 + fabs(want)))) bad++;
      }
      double want_r = 1.0 / sqrt(sq / N + eps[k]);
      rs[k][m] = rf[m];
      if (!(fabs(rf[m] - want_r) <= 1e-5 * want_r)) bad++;
    }
    CHECK_MSG(bad == 0, "eps %g: %d values differ from the reference", eps[k], bad);
    coda_program_destroy(q);
  }
  int differ = 0;
  for (int i = 0; i < M * N; i++) differ += fabs(ys[0][i] - ys[1][i]) > 1e-3 * (1 + fabs(ys[0][i]));
  for (int m = 0; m < M; m++) differ += fabs(rs[0][m] - rs[1][m]) > 1e-3 * rs[0][m];
  CHECK_MSG(differ > M * N / 2, "the two eps values gave nearly the same results (%d differ)", differ);
  coda_program_destroy(p);
}

static void test_gradcheck(coda_context ctx) {
  coda_program f = parse(ctx, "param cap = 30\noutput y : f64\noutput z : f64\n"
                              "store y = cap * tanh(acc / cap)\nstore z = acc\n");
  coda_program b = parse(ctx, "param cap = 30\ninput dy : tile f64\ninput z : tile f64\noutput dz : f64\n"
                              "t = tanh(z / cap)\nstore dz = dy * (1 - t * t)\n");
  if (!f || !b) return;
  coda_grad_link l[] = {{CODA_GRAD_WRT, "acc", "dz", 0, 0}, {CODA_GRAD_SEED, "y", "dy", 0, 0}};
  coda_param_value v = {"cap", 0.5};
  coda_program fb = NULL, bb = NULL;
  CHECK_STATUS(ctx, bind(ctx, f, 1, &v, &fb), CODA_OK);
  CHECK_STATUS(ctx, bind(ctx, b, 1, &v, &bb), CODA_OK);
  if (!fb || !bb) return;
  coda_gradcheck_options o = coda_gradcheck_default_options();
  coda_gradcheck_report r;
  CHECK_STATUS(ctx, coda_program_gradcheck(ctx, fb, bb, l, 2, &o, &r), CODA_OK);
  CHECK_MSG(r.pass, "cap 0.5 on both: rel err %g", r.entry[0].rel_err);
  /* the backward at the default cap (30) against the forward at 0.5: the
   * parameter's value reaches both evaluations, so this fails */
  CHECK_STATUS(ctx, coda_program_gradcheck(ctx, fb, b, l, 2, &o, &r), CODA_OK);
  CHECK_MSG(!r.pass, "cap 0.5 vs 30 passed (rel err %g)", r.entry[0].rel_err);
  /* a forward whose parameter has no value does not run */
  coda_program nf = parse(ctx, "param cap\noutput y : f64\nstore y = cap * tanh(acc / cap)\n");
  if (nf) {
    coda_status s = coda_program_gradcheck(ctx, nf, bb, l, 2, &o, &r);
    CHECK_MSG(s != CODA_OK && strstr(coda_last_error(ctx), "parameter 'cap' has no value"), "%s",
              coda_last_error(ctx));
  }
  coda_program_destroy(nf);
  coda_program_destroy(fb);
  coda_program_destroy(bb);
  coda_program_destroy(f);
  coda_program_destroy(b);
}

static void test_plan_builtin(coda_context ctx) {
  const double eps = 0.05;
  coda_program p = NULL;
  CHECK_STATUS(ctx, plan_builtin_eps(ctx, "llama_rmsnorm", &eps, &p), CODA_OK);
  if (p) {
    coda_param_info in;
    CHECK(coda_program_num_params(p) == 1 && coda_program_param(p, 0, &in) == CODA_OK);
    CHECK(!strcmp(in.name, "eps") && in.value == eps);
    CHECK(strstr(coda_program_text(p), "rstd(ss, eps)") != NULL); /* the text is not patched */
    CHECK(strstr(coda_program_text(p), "input x : tile f64") != NULL); /* retyped for exact mode */
  }
  coda_program_destroy(p);
  p = NULL;
  CHECK_STATUS(ctx, plan_builtin_eps(ctx, "llama_swiglu", &eps, &p), CODA_OK); /* no eps: unchanged */
  if (p) CHECK_EQ_INT(coda_program_num_params(p), 0);
  coda_program_destroy(p);
  p = NULL;
  CHECK_STATUS(ctx, plan_builtin_eps(ctx, "llama_rmsnorm", NULL, &p), CODA_OK);
  if (p) {
    coda_param_info in;
    CHECK(coda_program_param(p, 0, &in) == CODA_OK && in.value == 1e-5);
  }
  coda_program_destroy(p);
  /* every built-in that declares eps defaults it to 1e-5 */
  for (int i = 0; coda_builtin_program_name(i); i++) {
    coda_program q = NULL;
    if (coda_program_builtin(ctx, coda_builtin_program_name(i), &q) != CODA_OK) continue;
    for (int k = 0; k < coda_program_num_params(q); k++) {
      coda_param_info in;
      coda_program_param(q, k, &in);
      CHECK_MSG(!strcmp(in.name, "eps") && in.has_value && in.value == 1e-5, "%s: parameter %s",
                coda_builtin_program_name(i), in.name);
    }
    coda_program_destroy(q);
  }
}

int main(void) {
  coda_context ctx;
  coda_context_options o = coda_context_default_options();
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  test_parse_print(ctx);
  test_parse_refusals(ctx);
  test_bind(ctx);
  test_interpreter(ctx);
  test_gradcheck(ctx);
  test_plan_builtin(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
