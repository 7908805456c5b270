/* Every primitive op of src/lang/ops.def, walked from the table itself: the
 * parser accepts it with its arity (and rejects a call with another), the
 * builder does the same and builds the same IR, the canonical printer
 * writes it back so that it parses to the same IR, and the CPU interpreter
 * in fp32 and fp64 agrees with a double-precision reference of the op
 * written here, on random inputs in the op's domain (never zero). An op
 * added to the table without a reference here fails. */
#include "check.h"
#include "coda.h"
#include "lang/ir.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  coda_op op;
  const char *id, *name;
  int arity, results;
  const char *sym;
  int prec;
} op_entry;

static const op_entry ops[] = {
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) \
  {CODA_OP_##id, #id, name, arity, results, sym, prec},
#include "lang/ops.def"
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

#define PI 3.14159265358979323846

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* tanh-form gelu, its derivative through sech^2 = 1 / cosh^2 */
static double ref_gelu(double x) {
  const double k = sqrt(2.0 / PI), u = k * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
static double ref_dgelu(double x) {
  const double k = sqrt(2.0 / PI), u = k * (x + 0.044715 * x * x * x);
  const double du = k * (1.0 + 3.0 * 0.044715 * x * x), ch = cosh(u);
  return 0.5 * (1.0 + tanh(u)) + 0.5 * x * du / (ch * ch);
}
static double ref_dsilu(double x) {
  const double s = ref_sigmoid(x);
  return s + x * s * (1.0 - s);
}

/* erf by the series 2/sqrt(pi) e^-x^2 sum_n 2^n x^(2n+1) / (1 3 5 ... (2n+1)),
 * whose terms are all of one sign (no cancellation) */
static double ref_erf(double x) {
  double term = x, sum = x;
  for (int n = 1; n < 200 && fabs(term) > 1e-18 * fabs(sum); n++) {
    term *= 2 * x * x / (2 * n + 1);
    sum += term;
  }
  return 2 / sqrt(PI) * exp(-x * x) * sum;
}
/* x (a float) rounded to `bits` significant bits, ties to even (normal range) */
static double ref_round_bits(double x, int bits) {
  int e;
  double m = frexp((double)(float)x, &e); /* |m| in [0.5, 1) */
  double s = ldexp(m, bits), r = floor(s), f = s - r;
  if (f > 0.5 || (f == 0.5 && fmod(r, 2) != 0)) r += 1;
  return ldexp(r, e - bits);
}

/* The op's value(s) at operands x; 0 if the test has no reference for it. */
static int reference(coda_op op, const double *x, double *y0, double *y1) {
  *y1 = 0;
  switch (op) {
  case CODA_OP_ADD: *y0 = x[0] + x[1]; return 1;
  case CODA_OP_SUB: *y0 = x[0] - x[1]; return 1;
  case CODA_OP_MUL: *y0 = x[0] * x[1]; return 1;
  case CODA_OP_DIV: *y0 = x[0] / x[1]; return 1;
  case CODA_OP_NEG: *y0 = -x[0]; return 1;
  case CODA_OP_FMA: *y0 = x[0] * x[1] + x[2]; return 1;
  case CODA_OP_EXP: *y0 = exp(x[0]); return 1;
  case CODA_OP_LOG: *y0 = log(x[0]); return 1;
  case CODA_OP_SQRT: *y0 = sqrt(x[0]); return 1;
  case CODA_OP_RSQRT: *y0 = pow(x[0], -0.5); return 1;
  case CODA_OP_SIGMOID: *y0 = ref_sigmoid(x[0]); return 1;
  case CODA_OP_SILU: *y0 = x[0] / (1.0 + exp(-x[0])); return 1;
  case CODA_OP_GELU: *y0 = ref_gelu(x[0]); return 1;
  case CODA_OP_DGELU: *y0 = ref_dgelu(x[0]); return 1;
  case CODA_OP_DSILU: *y0 = ref_dsilu(x[0]); return 1;
  case CODA_OP_TANH: *y0 = (exp(2 * x[0]) - 1) / (exp(2 * x[0]) + 1); return 1;
  case CODA_OP_ABS: *y0 = x[0] < 0 ? -x[0] : x[0]; return 1;
  case CODA_OP_MIN: *y0 = x[0] < x[1] ? x[0] : x[1]; return 1;
  case CODA_OP_MAX: *y0 = x[0] > x[1] ? x[0] : x[1]; return 1;
  case CODA_OP_LT: *y0 = x[0] < x[1]; return 1;
  case CODA_OP_LE: *y0 = x[0] <= x[1]; return 1;
  case CODA_OP_GT: *y0 = x[0] > x[1]; return 1;
  case CODA_OP_GE: *y0 = x[0] >= x[1]; return 1;
  case CODA_OP_EQ: *y0 = x[0] == x[1]; return 1;
  case CODA_OP_NE: *y0 = x[0] != x[1]; return 1;
  case CODA_OP_SELECT: *y0 = x[0] != 0 ? x[1] : x[2]; return 1;
  case CODA_OP_SWIGLU: *y0 = x[0] * ref_sigmoid(x[0]) * x[1]; return 1;
  case CODA_OP_GEGLU: *y0 = ref_gelu(x[0]) * x[1]; return 1;
  case CODA_OP_DSWIGLU:
    *y0 = x[2] * x[1] * ref_dsilu(x[0]);
    *y1 = x[2] * x[0] * ref_sigmoid(x[0]);
    return 1;
  case CODA_OP_DGEGLU:
    *y0 = x[2] * x[1] * ref_dgelu(x[0]);
    *y1 = x[2] * ref_gelu(x[0]);
    return 1;
  case CODA_OP_ERF: *y0 = ref_erf(x[0]); return 1;
  case CODA_OP_RELU: *y0 = x[0] > 0 ? x[0] : 0; return 1;
  case CODA_OP_POW: *y0 = exp(x[1] * log(x[0])); return 1;
  case CODA_OP_ROUND_BF16: *y0 = ref_round_bits(x[0], 8); return 1;
  case CODA_OP_ROUND_F16: *y0 = ref_round_bits(x[0], 11); return 1;
  case CODA_OP_IDIV: *y0 = x[1] == 0 ? 0 : floor(x[0] / x[1]); return 1;
  case CODA_OP_IMOD: *y0 = x[1] == 0 ? x[0] : x[0] - x[1] * floor(x[0] / x[1]); return 1;
  case CODA_OP_ROPE:
  case CODA_OP_ROPE_BWD: { /* rotation by +-2 pi p (fhi + flo), no range reduction */
    const double th = (op == CODA_OP_ROPE ? 2 : -2) * PI * x[2] * (x[3] + x[4]);
    *y0 = x[0] * cos(th) - x[1] * sin(th);
    *y1 = x[0] * sin(th) + x[1] * cos(th);
    return 1;
  }
  }
  return 0;
}

/* Operand k of op is drawn from [lo, hi], away from zero. */
static void domain(coda_op op, int k, double *lo, double *hi) {
  *lo = -3, *hi = 3;
  if (op == CODA_OP_LOG || op == CODA_OP_SQRT || op == CODA_OP_RSQRT) *lo = 0.05, *hi = 6;
  if (op == CODA_OP_DIV && k == 1) *lo = 0.25, *hi = 4;
  if (op == CODA_OP_POW && k == 0) *lo = 0.05, *hi = 6; /* pow: x > 0, any real y */
  if (op == CODA_OP_ROUND_BF16 || op == CODA_OP_ROUND_F16) *lo = -300, *hi = 300;
  if (op == CODA_OP_ROPE || op == CODA_OP_ROPE_BWD) {
    if (k == 2) *lo = 1, *hi = 40;                /* position */
    if (k == 3) *lo = 1e-3, *hi = 0.4;            /* frequency, turns per position */
    if (k == 4) *lo = 1e-10, *hi = 1e-8;          /* its low part */
  }
}

/* Ops on integer values only (the validator refuses floating operands):
 * their operands are col i32 inputs. */
static int int_op(coda_op op) { return op == CODA_OP_IDIV || op == CODA_OP_IMOD; }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { return xorshift64_unit01(&rng); }

/* Source of a program in elem mode storing op(x0, ..., x{arity-1}) as y0
 * (and y1), inputs and outputs of type dt; a call is written with n
 * operands (n != arity: the parser must refuse it). */
static void program_text(char *s, size_t cap, const op_entry *e, const char *dt, int n) {
  int len = snprintf(s, cap, "mode elem\n");
  for (int k = 0; k < e->arity; k++)
    len += int_op(e->op) ? snprintf(s + len, cap - len, "input x%d : col i32\n", k)
                         : snprintf(s + len, cap - len, "input x%d : tile %s\n", k, dt);
  for (int r = 0; r < e->results; r++) len += snprintf(s + len, cap - len, "output y%d : %s\n", r, dt);
  char call[128];
  if (e->prec >= 1 && e->prec <= 3) snprintf(call, sizeof call, "x0 %s x1", e->sym);
  else if (e->prec == 4) snprintf(call, sizeof call, "%sx0", e->sym);
  else {
    int c = snprintf(call, sizeof call, "%s(", e->name);
    for (int k = 0; k < n; k++) c += snprintf(call + c, sizeof call - c, "%sx%d", k ? ", " : "", k < e->arity ? k : 0);
    snprintf(call + c, sizeof call - c, ")");
  }
  if (e->results == 2) snprintf(s + len, cap - len, "r0, r1 = %s\nstore y0 = r0\nstore y1 = r1\n", call);
  else snprintf(s + len, cap - len, "store y0 = %s\n", call);
}

/* The same program through the builder (f32). */
static coda_program build_program(coda_context ctx, const op_entry *e, int nargs, int *op_ok) {
  coda_builder b = NULL;
  if (coda_builder_create(ctx, 0, &b) != CODA_OK) return NULL;
  coda_value args[CODA_MAX_ARGS + 1], out[2];
  for (int k = 0; k < e->arity; k++) {
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", k);
    const int io = int_op(e->op);
    args[k] = coda_b_read(b, coda_b_input(b, nm, io ? CODA_ARG_COL : CODA_ARG_TILE, io ? CODA_I32 : CODA_F32,
                                          CODA_WIDTH_FULL),
                          CODA_LANE_NONE);
  }
  for (int k = e->arity; k < nargs; k++) args[k] = args[0];
  for (int r = 0; r < e->results; r++) out[r] = coda_b_output(b, r ? "y1" : "y0", CODA_F32, CODA_WIDTH_FULL, 0);
  coda_value second = -1;
  coda_value v = coda_b_op(b, e->op, nargs, args, &second);
  *op_ok = v >= 0;
  if (v >= 0) coda_b_store(b, out[0], v);
  if (v >= 0 && e->results == 2) coda_b_store(b, out[1], second);
  coda_program p = NULL;
  if (coda_builder_finish(b, &p) != CODA_OK) p = NULL;
  coda_builder_destroy(b);
  return p;
}

static void check_language(coda_context ctx, const op_entry *e) {
  char src[1024], why[256];
  program_text(src, sizeof src, e, "f32", e->arity);
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s: %s\n%s", e->name, coda_last_error(ctx), src);
  if (!p) return;
  CHECK_MSG(ir_op_arity(e->op) == e->arity && ir_op_results(e->op) == e->results &&
                !strcmp(ir_op_name(e->op), e->name),
            "%s: the IR's table differs from ops.def", e->name);

  /* one math instruction, this op */
  const struct coda_program_s *ps = p;
  int found = 0;
  for (int i = 0; i < ps->ninstrs; i++)
    if (ps->instrs[i].code == IR_MATH) found += ps->instrs[i].op == e->op && ps->instrs[i].nargs == e->arity;
  CHECK_MSG(found == 1, "%s: parsed to %d instructions of the op", e->name, found);

  /* the canonical text writes the op back and parses to the same IR */
  const char *text = coda_program_text(p);
  char want[64];
  if (e->prec >= 1 && e->prec <= 3) snprintf(want, sizeof want, "x0 %s x1", e->sym);
  else if (e->prec == 4) snprintf(want, sizeof want, "%sx0", e->sym);
  else snprintf(want, sizeof want, "%s(x0", e->name);
  CHECK_MSG(strstr(text, want) != NULL, "%s: canonical text lacks '%s':\n%s", e->name, want, text);
  CHECK_MSG(strstr(coda_program_ir(p), e->name) != NULL, "%s: IR listing lacks the name", e->name);
  coda_program q = NULL;
  CHECK_MSG(coda_program_parse(ctx, text, &q) == CODA_OK, "%s: canonical text does not parse: %s", e->name,
            coda_last_error(ctx));
  if (q) CHECK_MSG(ir_equal(p, q, 1, why, sizeof why), "%s: round trip: %s", e->name, why);
  coda_program_destroy(q);

  /* the builder takes the arity and builds the same IR */
  int op_ok = 0;
  coda_program bp = build_program(ctx, e, e->arity, &op_ok);
  CHECK_MSG(op_ok && bp, "%s: builder: %s", e->name, coda_last_error(ctx));
  if (bp) CHECK_MSG(ir_equal(p, bp, 0, why, sizeof why), "%s: builder vs parser: %s", e->name, why);
  coda_program_destroy(bp);
  coda_program_destroy(p);

  /* another operand count is refused: by the builder, and by the parser for a call */
  for (int n = e->arity - 1; n <= e->arity + 1; n += 2) {
    if (n < 1 || n > CODA_MAX_ARGS) continue;
    bp = build_program(ctx, e, n, &op_ok);
    CHECK_MSG(!op_ok && !bp, "%s: builder accepted %d operands", e->name, n);
    coda_program_destroy(bp);
  }
  if (e->prec != 0) return;
  for (int n = e->arity - 1; n <= e->arity + 1; n += 2) {
    if (n < 0) continue;
    program_text(src, sizeof src, e, "f32", n);
    p = NULL;
    coda_status st = coda_program_parse(ctx, src, &p);
    CHECK_MSG(st != CODA_OK && !p && strstr(coda_last_error(ctx), "argument"),
              "%s with %d arguments: status %d, '%s'", e->name, n, (int)st, coda_last_error(ctx));
    coda_program_destroy(p);
  }
}

enum { M = 4, N = 64, NP = M * N };

/* Runs the op on the CPU in the context's precision and compares with the
 * reference at every point. */
static void check_values(coda_context ctx, int f64, const op_entry *e) {
  static double x[CODA_MAX_ARGS][NP], ref[2][NP];
  static double xd[CODA_MAX_ARGS][NP], yd[2][NP];
  static float xf[CODA_MAX_ARGS][NP], yf[2][NP];
  for (int k = 0; k < e->arity; k++) {
    double lo, hi;
    domain(e->op, k, &lo, &hi);
    for (int i = 0; i < NP; i++) {
      float v;
      do v = (float)(lo + (hi - lo) * uniform()); /* exactly a float: the same operands in both modes */
      while (fabsf(v) < 1e-3f * (float)(hi - lo) || v < lo || v > hi);
      x[k][i] = v;
    }
  }
  /* equal operands at every fourth point, so equality and ordering ties are seen */
  if (e->arity == 2 && !int_op(e->op))
    for (int i = 0; i < NP; i += 4) x[1][i] = x[0][i];
  /* integer ops: one integer per column (col i32 inputs), dividends in
   * [-50, 50], divisors in [-7, 7] with 0, equal and negated operands seen */
  static int32_t xi32[CODA_MAX_ARGS][N];
  if (int_op(e->op)) {
    for (int n = 0; n < N; n++) {
      xi32[0][n] = (int32_t)(xorshift64_next(&rng) % 101) - 50;
      xi32[1][n] = (int32_t)(xorshift64_next(&rng) % 15) - 7;
      if (n % 8 == 3) xi32[1][n] = xi32[0][n];
      if (n % 8 == 5) xi32[1][n] = -xi32[0][n];
    }
    xi32[1][0] = 0;
    xi32[1][1] = 7, xi32[0][1] = -7;
    xi32[1][2] = -7, xi32[0][2] = 50;
    for (int k = 0; k < e->arity; k++)
      for (int i = 0; i < NP; i++) x[k][i] = xi32[k][i % N];
  }
  for (int i = 0; i < NP; i++) {
    double xi[CODA_MAX_ARGS];
    for (int k = 0; k < e->arity; k++) xi[k] = x[k][i];
    if (!reference(e->op, xi, &ref[0][i], &ref[1][i])) {
      CHECK_MSG(0, "op %s (CODA_OP_%s) has no reference in tests/test_ops.c", e->name, e->id);
      return;
    }
  }

  char src[1024];
  program_text(src, sizeof src, e, f64 ? "f64" : "f32", e->arity);
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s: %s", e->name, coda_last_error(ctx));
  if (!p) return;
  coda_args args = NULL;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  const coda_dtype dt = f64 ? CODA_F64 : CODA_F32;
  for (int k = 0; k < e->arity; k++) {
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", k);
    for (int i = 0; i < NP; i++) xd[k][i] = x[k][i], xf[k][i] = (float)x[k][i];
    coda_tensor t = int_op(e->op) ? coda_tensor_2d(xi32[k], CODA_I32, 1, N)
                                  : coda_tensor_2d(f64 ? (void *)xd[k] : (void *)xf[k], dt, M, N);
    CHECK(coda_args_set(args, nm, &t) == CODA_OK);
  }
  for (int r = 0; r < e->results; r++) {
    coda_tensor t = coda_tensor_2d(f64 ? (void *)yd[r] : (void *)yf[r], dt, M, N);
    CHECK(coda_args_set(args, r ? "y1" : "y0", &t) == CODA_OK);
  }
  coda_tiling tl;
  CHECK(coda_preferred_tiling(ctx, p, M, N, 1, &tl) == CODA_OK);
  CHECK_MSG(coda_map(ctx, p, M, N, args, tl) == CODA_OK, "%s: %s", e->name, coda_last_error(ctx));
  /* fp64: a few ulps of the reference's own rounding; fp32: float rounding
   * of the op's few steps */
  const double tol = f64 ? 1e-12 : 2e-5;
  int bad = 0;
  for (int r = 0; r < e->results; r++)
    for (int i = 0; i < NP; i++) {
      const double y = f64 ? yd[r][i] : (double)yf[r][i];
      if (!(fabs(y - ref[r][i]) <= tol * (1 + fabs(ref[r][i]))) && bad++ < 3)
        CHECK_MSG(0, "%s (%s) result %d at point %d: %.17g, reference %.17g", e->name, f64 ? "fp64" : "fp32",
                  r, i, y, ref[r][i]);
    }
  CHECK_MSG(bad == 0, "%s (%s): %d values off", e->name, f64 ? "fp64" : "fp32", bad);
  coda_args_destroy(args);
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

  CHECK_EQ_INT(NOPS, ir_op_count());
  for (int i = 0; i < NOPS; i++) {
    const op_entry *e = &ops[i];
    CHECK_EQ_INT(e->op, i);
    CHECK_MSG(e->arity >= 1 && e->arity <= CODA_MAX_ARGS && (e->results == 1 || e->results == 2),
              "%s: arity %d, results %d", e->name, e->arity, e->results);
    CHECK_MSG((e->prec == 0) == (e->sym[0] == '\0'), "%s: a call has no symbol, an operator one", e->name);
    CHECK_MSG(e->prec != 4 || e->arity == 1, "%s: a prefix operator takes one operand", e->name);
    CHECK_MSG(e->prec < 1 || e->prec > 3 || (e->arity == 2 && e->results == 1),
              "%s: a binary operator takes two operands and gives one result", e->name);
    CHECK_MSG(ir_is_reserved(e->name) == (e->prec == 0), "%s: reserved exactly when it is a call", e->name);
    check_language(c32, e);
    check_values(c32, 0, e);
    check_values(c64, 1, e);
  }
  coda_context_destroy(c32);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
