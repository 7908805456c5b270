/* Helpers of the language tests. */
#ifndef CODA_TEST_LANG_UTIL_H
#define CODA_TEST_LANG_UTIL_H

#include "check.h"
#include "coda.h"
#include "lang/ir.h"

#include <string.h>

/* src must not parse, and the message must contain want. */
static inline void expect_parse_error(coda_context ctx, const char *src, const char *want) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, src, &p);
  CHECK_MSG(s != CODA_OK && !p, "accepted:\n%s", src);
  CHECK_MSG(strstr(coda_last_error(ctx), want), "message '%s' lacks '%s'", coda_last_error(ctx), want);
  coda_program_destroy(p);
}

/* print -> parse gives the same IR (with names: parsed programs print without
 * generated names) and printing again gives the same text. */
static inline void lang_check_round_trip(coda_context ctx, coda_program p, int compare_names) {
  if (!p) return;
  const char *t1 = coda_program_text(p);
  coda_program q = NULL;
  coda_status s = coda_program_parse(ctx, t1, &q);
  CHECK_MSG(s == CODA_OK, "canonical text does not parse: %s\n%s", coda_last_error(ctx), t1);
  if (s) return;
  char why[200];
  int eq = ir_equal(p, q, compare_names, why, sizeof why);
  CHECK_MSG(eq, "round trip changed the IR: %s\n%s", why, t1);
  CHECK_MSG(!strcmp(t1, coda_program_text(q)), "canonical text is not a fixed point:\n%s---\n%s", t1,
            coda_program_text(q));
  coda_program_destroy(q);
}

/* Sample programs: every statement form and function of the language,
 * parsed, mutated and introspected by the language tests. */

/* Every statement form, elem mode. */
static const char *const lang_prog_elem =
    "# every statement of elem mode\n"
    "mode elem\n"
    "input x : tile bf16   # residual\n"
    "input w : col f32\n"
    "input ix : row i32\n"
    "input s0 : scalar f32\n"
    "input xp : tile f16 x2\n"
    "output y : bf16 accumulate\n"
    "output yp : bf16 x2\n"
    "h = acc + x\n"
    "g = h * w - s0 / 2.5e-1\n"
    "store y = g\n"
    "store yp = pack(xp.even * h, xp.odd)\n"
    "reduce ss = rowsum(h * h)\n"
    "reduce s1 = rowsum(h)\n"
    "reduce mx = rowmax(h)\n"
    "reduce ls = rowlse(h)\n"
    "reduce cs = colsum(g)\n"
    "reduce sg = rowsum(h) per 64\n"
    "reduce pk = rowpick(h, ix)\n"
    "finish rs = rstd(ss, 1e-05)\n"
    "finish rc = rstd(ss, 1e-05, s1)\n"
    "finish mn = mean(cs)\n"
    "finish sm = sum(sg)\n"
    "finish mxx = max(mx)\n"
    "finish l = lse(ls)\n";

/* Pair mode: lanes, half, two-result functions. */
static const char *const lang_prog_pair =
    "mode pair\n"
    "input r : row f32\n"
    "input pos : row i32\n"
    "input freq : col f32\n"
    "input hh : tile bf16 half\n"
    "input t : tile bf16\n"
    "output q : bf16\n"
    "output gate : f32 half\n"
    "z0 = acc.even * r\n"
    "z1 = acc.odd * r\n"
    "q0, q1 = rope(z0, z1, pos, freq.even, freq.odd)\n"
    "b0, b1 = rope_bwd(q0, q1, pos, freq.even, freq.odd)\n"
    "dg, du = dswiglu(t.even, t.odd, hh)\n"
    "eg, eu = dgeglu(t.even, t.odd, hh)\n"
    "store q = pack(q0 + b0, q1 + b1)\n"
    "store gate = swiglu(dg, du) + geglu(eg, eu)\n"
    "reduce d = rowsum(q0 * z0 + q1 * z1) per 64\n"
    "finish dn = mean(d)\n";

/* Every one-result function, the comparisons, unary minus, row/col. */
static const char *const lang_prog_funcs =
    "output y : f32\n"
    "a = fma(acc, 2, 3)\n"
    "b = exp(a) + log(a) + sqrt(a) + rsqrt(a) + tanh(a) + abs(a)\n"
    "c = sigmoid(b) + silu(b) + gelu(b) + dgelu(b) + dsilu(b)\n"
    "d = min(a, b) + max(b, c) + select(a < b, c, -c)\n"
    "e = (a <= b) + (a > b) + (a >= b) + (a == b) + (a != b)\n"
    "f = swiglu(d, e) * geglu(d, e) - -1.5 * -(2) - --a\n"
    "g = row * 1000 + col / 2\n"
    "store y = f + g\n";

#endif
