/* coda_program_gradcheck and coda_program_exact through the public API:
 *  - a forward y = x s (s a row input) with the backward dx = dy s and
 *    ds = sum_n x dy taken from a dot link (sum_n y dy / s): passes;
 *  - the same backward with ds off by a factor: fails, entry names it;
 *  - a seeded finisher (rstd) checked by a hand-written backward;
 *  - setup errors: fp32 context, no wrt link, unknown names;
 *  - coda_program_exact retypes f32/bf16 to f64 and keeps i32. */
#include "coda.h"
#include "check.h"

#include <math.h>
#include <string.h>

static coda_program parse(coda_context ctx, const char *t) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, t, &p);
  CHECK_MSG(s == CODA_OK, "parse: %s", coda_last_error(ctx));
  return p;
}

static const char *fwd_text = "input x : tile bf16\ninput s : row f32\noutput y : bf16\nstore y = x * s\n";
static const char *bwd_fmt =
    "input dy : tile bf16\ninput zdz : row f32\ninput s : row f32\noutput dx : bf16\n"
    "store dx = dy * s\nreduce p = rowsum(select(col == 0, zdz / s * %s, 0))\nfinish ds = sum(p)\n";

static void test_dot(coda_context ctx) {
  char text[512];
  coda_program f = parse(ctx, fwd_text);
  coda_grad_link l[] = {
      {CODA_GRAD_WRT, "x", "dx", 0, 0},  {CODA_GRAD_WRT, "s", "ds", 0, 0},
      {CODA_GRAD_SEED, "y", "dy", 0, 0}, {CODA_GRAD_DOT, "y", "zdz", 0, 0},
  };
  for (int broken = 0; broken < 2; broken++) {
    snprintf(text, sizeof text, bwd_fmt, broken ? "1.001" : "1");
    coda_program b = parse(ctx, text);
    coda_gradcheck_report r;
    coda_gradcheck_options o = coda_gradcheck_default_options();
    o.M = 4;
    o.N = 6;
    coda_status s = coda_program_gradcheck(ctx, f, b, l, 4, &o, &r);
    CHECK_MSG(s == CODA_OK, "gradcheck: %s", coda_last_error(ctx));
    CHECK_EQ_INT(r.nentries, 2);
    CHECK_EQ_INT(r.bwd_N, 6);
    CHECK_EQ_INT(r.pass, !broken);
    CHECK(r.entry[0].pass);
    CHECK_EQ_INT(r.entry[1].pass, !broken);
    CHECK(!strcmp(r.entry[1].bwd, "ds"));
    CHECK_MSG(r.entry[0].rel_err < 1e-8, "dx rel %g", r.entry[0].rel_err);
    if (broken) CHECK_MSG(r.entry[1].rel_err > 1e-4, "ds rel %g", r.entry[1].rel_err);
    CHECK_EQ_INT(r.evaluations, 1 + 2 * (4 * 6 + 4));
    coda_program_destroy(b);
  }
  coda_program_destroy(f);
}

/* rstd finisher seeded: r = (sum x^2 / N + eps)^-1/2, dL/dx = -dr r^3 x / N */
static void test_finisher(coda_context ctx) {
  coda_program f = parse(ctx, "input x : tile f32\noutput h : f32\nstore h = x\n"
                              "reduce ss = rowsum(x * x)\nfinish r = rstd(ss, 1e-5)\n");
  coda_program b = parse(ctx, "input x : tile f32\ninput r : row f32\ninput dr : row f32\n"
                              "input inv_n : scalar f32\ninput dh : tile f32\noutput dx : f32\n"
                              "store dx = dh - dr * r * r * r * x * inv_n\n");
  coda_grad_link l[] = {{CODA_GRAD_WRT, "x", "dx", 0, 0},  {CODA_GRAD_SEED, "r", "dr", 0, 0},
                        {CODA_GRAD_SEED, "h", "dh", 0, 0}, {CODA_GRAD_VALUE, NULL, "inv_n", 0.125, 0}};
  coda_gradcheck_report r;
  coda_status s = coda_program_gradcheck(ctx, f, b, l, 4, NULL, &r); /* default 3 x 8 */
  CHECK_MSG(s == CODA_OK, "gradcheck: %s", coda_last_error(ctx));
  CHECK_MSG(r.pass, "rstd backward rel %g", r.entry[0].rel_err);
  l[3].lo = 0.12; /* wrong 1/N */
  s = coda_program_gradcheck(ctx, f, b, l, 4, NULL, &r);
  CHECK(s == CODA_OK && !r.pass);
  /* errors */
  s = coda_program_gradcheck(ctx, f, b, l + 1, 3, NULL, &r);
  CHECK(s == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), "no wrt link"));
  coda_grad_link bad[] = {{CODA_GRAD_WRT, "x", "nosuch", 0, 0}};
  s = coda_program_gradcheck(ctx, f, b, bad, 1, NULL, &r);
  CHECK(s == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), "nosuch"));
  coda_grad_link unl[] = {{CODA_GRAD_WRT, "x", "dx", 0, 0}, {CODA_GRAD_SEED, "h", "dh", 0, 0}};
  s = coda_program_gradcheck(ctx, f, b, unl, 2, NULL, &r);
  CHECK(s == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), "'dr' is not linked"));
  coda_program_destroy(f);
  coda_program_destroy(b);
}

static void test_exact(coda_context ctx, coda_context c32) {
  coda_program p = parse(c32, "input x : tile bf16\ninput t : row i32\noutput y : f16\n"
                              "store y = x + t\n");
  coda_program q = NULL;
  CHECK(coda_program_exact(c32, p, &q) == CODA_ERR_NOT_SUPPORTED && !q);
  CHECK(coda_program_exact(ctx, p, &q) == CODA_OK && q);
  coda_arg_info a;
  coda_program_arg(q, 0, &a);
  CHECK(a.dtype == CODA_F64);
  coda_program_arg(q, 1, &a);
  CHECK(a.dtype == CODA_I32);
  coda_program_arg(q, 2, &a);
  CHECK(a.dtype == CODA_F64);
  coda_gradcheck_report r;
  coda_grad_link l[] = {{CODA_GRAD_WRT, "x", "y", 0, 0}};
  CHECK(coda_program_gradcheck(c32, p, p, l, 1, NULL, &r) == CODA_ERR_NOT_SUPPORTED);
  coda_program_destroy(p);
  coda_program_destroy(q);
}

int main(void) {
  coda_context ctx, c32;
  coda_context_options o = coda_context_default_options();
  CHECK(coda_context_create(&o, &c32) == CODA_OK);
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  test_dot(ctx);
  test_finisher(ctx);
  test_exact(ctx, c32);
  coda_context_destroy(ctx);
  coda_context_destroy(c32);
  return CHECK_DONE();
}
