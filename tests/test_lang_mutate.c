/* The epilogue language against malformed and random input: mutated
 * programs fail with a located message or round-trip, random builder
 * programs validate and round-trip, and the fuzzers' finds stay fixed. */
#include "check.h"
#include "lang_test_util.h"
#include "coda.h"
#include "lang/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coda_context ctx;

/* Small deterministic generator (xorshift32). */
static unsigned xr(unsigned *s) {
  unsigned x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* Bytes that make mutations likely to hit the grammar. */
static const char alphabet[] = "abcxyz_019.,:()=+-*/<>!#\n \teEacc pack rowsum";

static char *mutate(const char *base, unsigned *seed) {
  size_t n = strlen(base);
  char *s = malloc(2 * n + 64);
  memcpy(s, base, n + 1);
  int muts = 1 + (int)(xr(seed) % 4);
  for (int m = 0; m < muts; m++) {
    n = strlen(s);
    size_t i = n ? (size_t)xr(seed) % n : 0;
    switch (xr(seed) % 6) {
    case 0: /* replace a byte (any value but NUL) */
      if (n) s[i] = (char)(1 + xr(seed) % 255);
      break;
    case 1: /* replace with a grammar byte */
      if (n) s[i] = alphabet[xr(seed) % (sizeof alphabet - 1)];
      break;
    case 2: { /* delete a range */
      size_t len = (size_t)xr(seed) % 12;
      if (i + len > n) len = n - i;
      memmove(s + i, s + i + len, n - i - len + 1);
      break;
    }
    case 3: { /* copy a short range elsewhere (bounded growth) */
      size_t len = (size_t)xr(seed) % 16, j = n ? (size_t)xr(seed) % n : 0;
      if (j + len > n) len = n - j;
      if (n + len + 1 > 2 * strlen(base) + 63) break;
      char tmp[16];
      memcpy(tmp, s + j, len);
      memmove(s + i + len, s + i, n - i + 1);
      memcpy(s + i, tmp, len);
      break;
    }
    case 4: /* truncate */
      s[i] = '\0';
      break;
    default: /* swap two bytes */
      if (n) {
        size_t j = (size_t)xr(seed) % n;
        char t = s[i];
        s[i] = s[j];
        s[j] = t;
      }
    }
  }
  return s;
}

static void test_robustness(void) {
  const char *bases[] = {lang_prog_elem, lang_prog_pair, lang_prog_funcs};
  unsigned seed = 12345;
  int ok = 0, bad = 0, badmsg = 0;
  for (int b = 0; b < 3; b++)
    for (int it = 0; it < 4000; it++) {
      char *s = mutate(bases[b], &seed);
      coda_program p = NULL;
      coda_status st = coda_program_parse(ctx, s, &p);
      if (st == CODA_OK) {
        ok++;
        lang_check_round_trip(ctx, p, 1);
        coda_program_destroy(p);
      } else {
        bad++;
        if (!(st == CODA_ERR_PARSE || st == CODA_ERR_TYPE) || strncmp(coda_last_error(ctx), "line ", 5)) {
          badmsg++;
          if (badmsg < 5) fprintf(stderr, "odd failure %d '%s' for:\n%s\n", st, coda_last_error(ctx), s);
        }
      }
      free(s);
    }
  CHECK_EQ_INT(badmsg, 0);
  CHECK(ok > 50 && bad > 1000); /* both outcomes are exercised */
  printf("mutations: %d valid, %d rejected\n", ok, bad);
  /* random bytes */
  for (int it = 0; it < 3000; it++) {
    char buf[300];
    int n = 1 + (int)(xr(&seed) % 299);
    for (int i = 0; i < n - 1; i++) buf[i] = (char)(1 + xr(&seed) % 255);
    buf[n - 1] = '\0';
    coda_program p = NULL;
    if (coda_program_parse(ctx, buf, &p) == CODA_OK) coda_program_destroy(p);
  }
  /* every prefix of a valid program */
  size_t len = strlen(lang_prog_elem);
  char *tr = malloc(len + 1);
  for (size_t n = 0; n <= len; n++) {
    memcpy(tr, lang_prog_elem, n);
    tr[n] = '\0';
    coda_program p = NULL;
    coda_status st = coda_program_parse(ctx, tr, &p);
    CHECK(st == CODA_OK || st == CODA_ERR_PARSE || st == CODA_ERR_TYPE);
    coda_program_destroy(p);
  }
  free(tr);
  /* a very long line and a text over the size limit */
  size_t big = (1u << 20) + 10;
  char *s = malloc(big + 1);
  memset(s, ' ', big);
  memcpy(s, "x = acc", 7);
  s[big] = '\0';
  coda_program p = NULL;
  CHECK(coda_program_parse(ctx, s, &p) == CODA_ERR_PARSE);
  s[1 << 19] = '\0';
  s[(1 << 19) - 1] = '1';
  s[(1 << 19) - 2] = '+';
  CHECK(coda_program_parse(ctx, s, &p) == CODA_OK);
  coda_program_destroy(p);
  memset(s, '9', 5000);
  s[5000] = '\0';
  CHECK(coda_program_parse(ctx, s, &p) == CODA_ERR_PARSE);
  free(s);
}

/* Random DAG programs from the builder (shared and out-of-order operands,
 * unnamed values, deep chains, reductions in any order): finish must
 * accept them and their canonical text must parse back to the same
 * instructions. */
static void test_random_builder(void) {
  unsigned seed = 777;
  int built = 0;
  for (int it = 0; it < 400; it++) {
    int pair = (int)(xr(&seed) % 2);
    coda_builder b;
    if (coda_builder_create(ctx, pair, &b) != CODA_OK) {
      CHECK(0);
      continue;
    }
    coda_value in_row = coda_b_input(b, "r", CODA_ARG_ROW, CODA_F32, CODA_WIDTH_FULL);
    coda_value in_col = coda_b_input(b, "c", CODA_ARG_COL, CODA_BF16, CODA_WIDTH_FULL);
    coda_value in_sc = coda_b_input(b, "s", CODA_ARG_SCALAR, CODA_F32, CODA_WIDTH_FULL);
    coda_value in_t = coda_b_input(b, "t", CODA_ARG_TILE, CODA_BF16, CODA_WIDTH_FULL);
    coda_value in_w = coda_b_input(b, "w", CODA_ARG_TILE, CODA_F16, pair ? CODA_WIDTH_HALF : CODA_WIDTH_X2);
    coda_value in_ix = coda_b_input(b, "ix", CODA_ARG_ROW, CODA_I32, CODA_WIDTH_FULL);
    coda_lane two = pair ? CODA_LANE_EVEN : CODA_LANE_NONE; /* lane of acc, c, t */
    coda_value vals[600];
    int nv = 0, steps = 3 + (int)(xr(&seed) % 120);
    for (int k = 0; k < steps; k++) {
      unsigned what = xr(&seed) % 10;
      coda_value v;
      coda_lane ln = (coda_lane)(two == CODA_LANE_NONE ? CODA_LANE_NONE : 1 + xr(&seed) % 2);
      if (nv == 0 || what == 0) v = coda_b_acc(b, ln);
      else if (what == 1) {
        coda_value ins[] = {in_row, in_col, in_sc, in_t, in_w, in_ix};
        int i = (int)(xr(&seed) % 6);
        coda_lane l2 = CODA_LANE_NONE;
        if ((i == 1 || i == 3) && pair) l2 = ln;
        if (i == 4 && !pair) l2 = (coda_lane)(1 + xr(&seed) % 2);
        v = coda_b_read(b, ins[i], l2);
      } else if (what == 2) v = coda_b_const(b, ((double)(int)(xr(&seed) % 2001) - 1000) / 64);
      else if (what == 3) v = xr(&seed) % 2 ? coda_b_row_index(b) : coda_b_col_index(b);
      else {
        coda_op op = (coda_op)(xr(&seed) % (unsigned)ir_op_count()); /* every op of ops.def */
        coda_value args[CODA_MAX_ARGS];
        for (int a = 0; a < ir_op_arity(op); a++) /* mostly recent values, sometimes any */
          args[a] = vals[xr(&seed) % 3 ? nv - 1 - (int)(xr(&seed) % (nv < 4 ? nv : 4)) : (int)(xr(&seed) % nv)];
        if (op == CODA_OP_IDIV || op == CODA_OP_IMOD) { /* integer operands only */
          args[0] = coda_b_col_index(b);
          args[1] = coda_b_row_index(b);
        }
        coda_value second = -1;
        v = coda_b_op(b, op, ir_op_arity(op), args, &second);
        if (second >= 0) vals[nv++] = second;
      }
      CHECK(v >= 0);
      if (v < 0) break;
      vals[nv++] = v;
      if (xr(&seed) % 5 == 0) {
        char nm[16];
        snprintf(nm, sizeof nm, "v%d", k);
        CHECK(coda_b_name(b, v, nm) == CODA_OK);
      }
    }
    if (nv == 0) {
      coda_builder_destroy(b);
      continue;
    }
#define PICK() vals[xr(&seed) % (unsigned)nv]
    coda_value o1 = coda_b_output(b, "o1", CODA_F32, pair ? CODA_WIDTH_HALF : CODA_WIDTH_FULL, 0);
    coda_value o2 = coda_b_output(b, "o2", CODA_BF16, pair ? CODA_WIDTH_FULL : CODA_WIDTH_X2, 1);
    int nred = (int)(xr(&seed) % 5);
    const char *names[] = {"p0", "p1", "p2", "p3", "p4"};
    coda_reduce_kind kinds[5];
    for (int q = 0; q < nred; q++) {
      coda_reduce_kind k = (coda_reduce_kind)(xr(&seed) % 6);
      if (pair && (k == CODA_REDUCE_COLSUM || k == CODA_REDUCE_ROWPICK)) k = CODA_REDUCE_ROWSUM;
      kinds[q] = k;
      CHECK(coda_b_reduce(b, names[q], k, PICK(), in_ix, 64) == CODA_OK);
    }
    CHECK(coda_b_store_pair(b, o2, PICK(), PICK()) == CODA_OK);
    CHECK(coda_b_store(b, o1, PICK()) == CODA_OK);
    for (int q = 0; q < nred; q++) {
      char fn[8];
      snprintf(fn, sizeof fn, "f%d", q);
      coda_finish_kind fk = kinds[q] == CODA_REDUCE_ROWMAX   ? CODA_FINISH_MAX
                            : kinds[q] == CODA_REDUCE_ROWLSE ? CODA_FINISH_LSE
                            : kinds[q] == CODA_REDUCE_ROWPICK ? (coda_finish_kind)-1
                                                               : (coda_finish_kind)(xr(&seed) % 2 ? CODA_FINISH_RSTD : CODA_FINISH_MEAN);
      if ((int)fk >= 0) CHECK(coda_b_finish(b, fn, fk, names[q], NULL, 1e-6) == CODA_OK);
    }
#undef PICK
    coda_program p = NULL;
    coda_status st = coda_builder_finish(b, &p);
    CHECK_MSG(st == CODA_OK, "random builder program %d: %s", it, coda_last_error(ctx));
    coda_builder_destroy(b);
    if (st) continue;
    built++;
    lang_check_round_trip(ctx, p, 0);
    coda_program_destroy(p);
  }
  CHECK(built > 300);
}

/* Regression inputs found by fuzzing (fuzz/fuzz_program.c): each once
 * crashed, failed the round trip, or was misreported. */
static void test_fuzz_regressions(void) {
  static const char *cases[] = {
    "x = -0\n",
    "x = - -1\ny = -(-1)\nz = --(1)\n",
    "x = 1e-400\n",
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0] + 1; i++) {
    char deep[128];
    const char *text = i < sizeof cases / sizeof cases[0] ? cases[i] : deep;
    /* 64 negations of the literal -3: the printer must write "--3", not
     * "-(-3)", or the text nests one level too deep to read back */
    snprintf(deep, sizeof deep, "o = %.65s3\n",
             "-----------------------------------------------------------------");
    coda_program p = NULL;
    coda_status st = coda_program_parse(ctx, text, &p);
    CHECK(st == CODA_OK);
    if (st == CODA_OK) lang_check_round_trip(ctx, p, 1);
    coda_program_destroy(p);
  }
}

int main(void) {
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_robustness();
  test_random_builder();
  test_fuzz_regressions();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
