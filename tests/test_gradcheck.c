/* coda_program_gradcheck and coda_program_exact through the public API:
 *  - a forward y = x s (s a row input) with the backward dx = dy s and
 *    ds = sum_n x dy taken from a dot link (sum_n y dy / s): passes;
 *  - the same backward with ds off by a factor: fails, entry names it;
 *  - a seeded finisher (rstd) checked by a hand-written backward;
 *  - setup errors: fp32 context, no wrt link, unknown names;
 *  - coda_program_exact retypes f32/bf16 to f64 and keeps i32;
 *  - the whole domain: y = min(acc, 2) with a backward that drops the
 *    mask passes with acc in [-1, 1] but fails with the default range
 *    (+-[0.1, 4)) and with `points` in [-1.5, 1.9] (values beside 2 only
 *    through points); a range link on acc; the right backward passes;
 *  - broadcast inputs: a scalar's and a row vector's gradients given as
 *    tiles and per-row finishers, summed by the check (a wrong one fails). */
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

static coda_gradcheck_report check(coda_context ctx, coda_program f, coda_program b,
                                   const coda_grad_link *l, int n, int points) {
  coda_gradcheck_report r;
  memset(&r, 0, sizeof r);
  coda_gradcheck_options o = coda_gradcheck_default_options();
  o.M = 4;
  o.N = 8;
  o.points = points;
  coda_status s = coda_program_gradcheck(ctx, f, b, l, n, &o, &r);
  CHECK_MSG(s == CODA_OK, "gradcheck: %s", coda_last_error(ctx));
  return r;
}

static void test_domain(coda_context ctx) {
  coda_program f = parse(ctx, "output y : f64\noutput z : f64\nstore y = min(acc, 2)\nstore z = acc\n");
  coda_program good = parse(ctx, "input dy : tile f64\ninput z : tile f64\noutput dz : f64\n"
                                 "store dz = dy * (z < 2)\n");
  coda_program bad = parse(ctx, "input dy : tile f64\ninput z : tile f64\noutput dz : f64\nstore dz = dy + z * 0\n");
  coda_grad_link l[] = {{CODA_GRAD_WRT, "acc", "dz", 0, 0}, {CODA_GRAD_SEED, "y", "dy", 0, 0},
                        {CODA_GRAD_RANGE, "acc", NULL, -1, 1}};
  CHECK(check(ctx, f, good, l, 3, 0).pass);
  CHECK(check(ctx, f, bad, l, 3, 0).pass); /* inside (-1, 1) the mask is never 0 */
  CHECK(check(ctx, f, good, l, 2, 0).pass);
  CHECK(!check(ctx, f, bad, l, 2, 0).pass); /* the default range of acc crosses 2 */
  l[2].lo = -1.5, l[2].hi = 1.9;
  CHECK(check(ctx, f, bad, l, 3, 0).pass);
  l[2].hi = 2.1; /* points beside the threshold 2 inside the range */
  CHECK(!check(ctx, f, bad, l, 3, 1).pass);
  CHECK(check(ctx, f, good, l, 3, 1).pass);
  /* a range link on acc of a forward that does not read it; the message names the range */
  coda_program noacc = parse(ctx, "input x : tile f64\noutput y : f64\nstore y = x\n");
  coda_program nb = parse(ctx, "input dy : tile f64\noutput dx : f64\nstore dx = dy\n");
  coda_grad_link l2[] = {{CODA_GRAD_WRT, "x", "dx", 0, 0}, {CODA_GRAD_SEED, "y", "dy", 0, 0},
                         {CODA_GRAD_RANGE, "acc", NULL, -10, 10}};
  coda_gradcheck_report r;
  CHECK(coda_program_gradcheck(ctx, noacc, nb, l2, 3, NULL, &r) == CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(coda_last_error(ctx), "range link acc=-10:10: the forward does not read acc"), "%s",
            coda_last_error(ctx));
  coda_program_destroy(noacc);
  coda_program_destroy(nb);
  coda_program_destroy(f);
  coda_program_destroy(good);
  coda_program_destroy(bad);
}

/* y = acc * s * r (s scalar, r row): ds = sum dy acc r over everything,
 * dr[m] = sum_n dy acc s */
static void test_broadcast(coda_context ctx) {
  coda_program f = parse(ctx, "input s : scalar f64\ninput r : row f64\noutput y : f64\noutput a : f64\n"
                              "store y = acc * s * r\nstore a = acc\n");
  for (int broken = 0; broken < 2; broken++) {
    char text[512];
    snprintf(text, sizeof text,
             "input dy : tile f64\ninput a : tile f64\ninput s : scalar f64\ninput r : row f64\n"
             "output ds_t : f64\noutput dr_t : f64\noutput dx : f64\n"
             "store ds_t = dy * a * r * %s\nstore dr_t = dy * a * s\nstore dx = dy * s * r\n"
             "reduce p = rowsum(dy * a * r)\nfinish ds_rows = sum(p)\n",
             broken ? "1.001" : "1");
    coda_program b = parse(ctx, text);
    coda_grad_link l[] = {{CODA_GRAD_WRT, "s", "ds_t", 0, 0},    {CODA_GRAD_WRT, "r", "dr_t", 0, 0},
                          {CODA_GRAD_WRT, "s", "ds_rows", 0, 0}, {CODA_GRAD_WRT, "acc", "dx", 0, 0},
                          {CODA_GRAD_SEED, "y", "dy", 0, 0}};
    coda_gradcheck_report r = check(ctx, f, b, l, 5, 0);
    CHECK_EQ_INT(r.nentries, 4);
    CHECK_EQ_INT(r.entry[0].pass, !broken);
    CHECK(r.entry[1].pass && r.entry[2].pass && r.entry[3].pass);
    CHECK_MSG(r.entry[2].rel_err < 1e-8, "ds_rows rel %g", r.entry[2].rel_err);
    coda_program_destroy(b);
  }
  /* a column gradient for a row vector does not sum to it: named in the message */
  coda_program b = parse(ctx, "input dy : tile f64\ninput a : tile f64\ninput s : scalar f64\ninput r : row f64\n"
                              "output dx : f64\nstore dx = dy * s * r\nreduce q = colsum(dy)\nfinish dr = sum(q)\n");
  coda_grad_link l[] = {{CODA_GRAD_WRT, "r", "dr", 0, 0}, {CODA_GRAD_SEED, "y", "dy", 0, 0}};
  coda_gradcheck_report r;
  CHECK(coda_program_gradcheck(ctx, f, b, l, 2, NULL, &r) == CODA_ERR_SHAPE);
  CHECK_MSG(strstr(coda_last_error(ctx), "wrt r=dr has forward 3 x 1, backward 1 x 8"), "%s", coda_last_error(ctx));
  coda_program_destroy(b);
  coda_program_destroy(f);
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
  test_domain(ctx);
  test_broadcast(ctx);
  coda_context_destroy(ctx);
  coda_context_destroy(c32);
  return CHECK_DONE();
}
