/* The epilogue language: parser, validator, printer, builder, introspection,
 * built-in programs, the rowsum input kind (mutated and random programs:
 * test_lang_mutate.c). */
#include "check.h"
#include "test_util.h"
#include "lang_test_util.h"
#include "coda.h"
#include "lang/ir.h"

#include <stdlib.h>
#include <string.h>

static coda_context ctx;

/* lang_check_round_trip on this file's context. */
static void check_round_trip(coda_program p, int compare_names) {
  lang_check_round_trip(ctx, p, compare_names);
}

/* Parses text, expecting success; returns NULL (and fails a check) otherwise. */
static coda_program parse_ok(const char *text) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, text, &p);
  CHECK_MSG(s == CODA_OK && p, "parse failed (%s): %s\n--- program:\n%s", coda_status_string(s),
            coda_last_error(ctx), text);
  return s == CODA_OK ? p : NULL;
}

/* Expects a failure with the given status whose message starts with
 * "line L, column C:" and contains `needle`. */
static void check_error(const char *text, coda_status want, int line, int col, const char *needle) {
  coda_program p = (coda_program)1;
  coda_status s = coda_program_parse(ctx, text, &p);
  const char *msg = coda_last_error(ctx);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "line %d, column %d: ", line, col);
  CHECK_MSG(s == want, "status %s, wanted %s (%s)\n--- program:\n%s", coda_status_string(s),
            coda_status_string(want), msg, text);
  CHECK_MSG(p == NULL, "out not NULL on failure");
  CHECK_MSG(!strncmp(msg, prefix, strlen(prefix)), "message '%s' does not start with '%s'", msg, prefix);
  CHECK_MSG(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
  if (p && p != (coda_program)1) coda_program_destroy(p);
}

/* src, whose first input is f64, parses in an exact-mode context. */
static void check_exact_parse(const char *src) {
  coda_context c64 = test_context(CODA_PRECISION_F64, 0);
  CHECK(c64 != NULL);
  coda_program p = NULL;
  CHECK(coda_program_parse(c64, src, &p) == CODA_OK);
  if (p) CHECK(p->ninputs > 0 && p->inputs[0].dtype == CODA_F64);
  coda_program_destroy(p);
  coda_context_destroy(c64);
}

static const ir_instr *last_instr(coda_program p) { return &p->instrs[p->ninstrs - 1]; }

/* ----------------------------------------------------------------- tests */

static void test_parse_forms(void) {
  coda_program p = parse_ok(lang_prog_elem);
  if (p) {
    CHECK_EQ_INT(p->pair_mode, 0);
    CHECK_EQ_INT(p->ninputs, 5);
    CHECK_EQ_INT(p->noutputs, 2);
    CHECK_EQ_INT(p->nreduces, 7);
    CHECK_EQ_INT(p->nfinishes, 6);
    CHECK(p->inputs[0].kind == CODA_ARG_TILE && p->inputs[0].dtype == CODA_BF16);
    CHECK(p->inputs[1].kind == CODA_ARG_COL && p->inputs[2].dtype == CODA_I32);
    CHECK(p->inputs[3].kind == CODA_ARG_SCALAR && p->inputs[4].width == CODA_WIDTH_X2);
    CHECK(p->outputs[0].accumulate == 1 && p->outputs[0].reg_odd == -1);
    CHECK(p->outputs[1].width == CODA_WIDTH_X2 && p->outputs[1].reg_odd >= 0);
    CHECK(p->reduces[0].kind == CODA_REDUCE_ROWSUM && p->reduces[2].kind == CODA_REDUCE_ROWMAX);
    CHECK(p->reduces[3].kind == CODA_REDUCE_ROWLSE && p->reduces[4].kind == CODA_REDUCE_COLSUM);
    CHECK(p->reduces[5].kind == CODA_REDUCE_SEGSUM && p->reduces[5].segment == 64);
    CHECK(p->reduces[6].kind == CODA_REDUCE_ROWPICK && p->reduces[6].index_input == 2);
    CHECK(p->finishes[0].kind == CODA_FINISH_RSTD && p->finishes[0].eps == 1e-05 && p->finishes[0].reduce2 == -1);
    CHECK(p->finishes[1].reduce == 0 && p->finishes[1].reduce2 == 1);
    CHECK(p->finishes[2].kind == CODA_FINISH_MEAN && p->finishes[2].reduce == 4);
    CHECK(p->finishes[3].kind == CODA_FINISH_SUM && p->finishes[4].kind == CODA_FINISH_MAX);
    CHECK(p->finishes[5].kind == CODA_FINISH_LSE && p->finishes[5].reduce == 3);
    /* h = acc + x: ACC, READ x, ADD named h */
    CHECK(p->instrs[0].code == IR_ACC && p->instrs[1].code == IR_READ && p->instrs[1].input == 0);
    CHECK(p->instrs[2].code == IR_MATH && p->instrs[2].op == CODA_OP_ADD);
    CHECK(p->reg_names[p->instrs[2].dst] && !strcmp(p->reg_names[p->instrs[2].dst], "h"));
    /* g = h * w - s0 / 0.25: precedence gives SUB(MUL(h, w), DIV(s0, 0.25)) */
    const ir_instr *sub = &p->instrs[8];
    CHECK(sub->op == CODA_OP_SUB && !strcmp(p->reg_names[sub->dst], "g"));
    CHECK(p->instrs[4].op == CODA_OP_MUL && sub->args[0] == p->instrs[4].dst);
    CHECK(p->instrs[7].op == CODA_OP_DIV && sub->args[1] == p->instrs[7].dst);
    CHECK(p->instrs[6].code == IR_CONST && p->instrs[6].imm == 0.25);
    /* the x2 input is read through lanes */
    CHECK(p->instrs[9].code == IR_READ && p->instrs[9].lane == CODA_LANE_EVEN);
    CHECK(p->outputs[0].reg_even == sub->dst);
    check_round_trip(p, 1);
    coda_program_destroy(p);
  }

  p = parse_ok(lang_prog_pair);
  if (p) {
    CHECK_EQ_INT(p->pair_mode, 1);
    int rope = -1, nmath2 = 0;
    for (int i = 0; i < p->ninstrs; i++)
      if (p->instrs[i].code == IR_MATH && ir_op_results(p->instrs[i].op) == 2) {
        nmath2++;
        if (p->instrs[i].op == CODA_OP_ROPE) rope = i;
      }
    CHECK_EQ_INT(nmath2, 4);
    CHECK(rope >= 0 && p->instrs[rope].nargs == 5 && p->instrs[rope].dst2 == p->instrs[rope].dst + 1);
    if (rope >= 0) {
      CHECK(!strcmp(p->reg_names[p->instrs[rope].dst], "q0") && !strcmp(p->reg_names[p->instrs[rope].dst2], "q1"));
      /* the fourth and fifth operands are freq.even, freq.odd */
      const ir_instr *a3 = &p->instrs[rope - 2], *a4 = &p->instrs[rope - 1];
      CHECK(a3->code == IR_READ && a3->lane == CODA_LANE_EVEN && a4->lane == CODA_LANE_ODD);
    }
    CHECK(p->outputs[1].width == CODA_WIDTH_HALF && p->outputs[1].reg_odd == -1);
    CHECK(p->reduces[0].kind == CODA_REDUCE_SEGSUM);
    check_round_trip(p, 1);
    coda_program_destroy(p);
  }

  p = parse_ok(lang_prog_funcs);
  if (p) {
    /* every op of the table occurs */
    int seen[64] = {0};
    for (int i = 0; i < p->ninstrs; i++)
      if (p->instrs[i].code == IR_MATH) seen[p->instrs[i].op] = 1;
    for (int op = CODA_OP_ADD; op <= CODA_OP_GEGLU; op++)
      CHECK_MSG(seen[op], "op %s not produced", ir_op_name((coda_op)op));
    int row = 0, col = 0, negc = 0;
    for (int i = 0; i < p->ninstrs; i++) {
      row += p->instrs[i].code == IR_ROW;
      col += p->instrs[i].code == IR_COL;
      negc += p->instrs[i].code == IR_CONST && p->instrs[i].imm == -1.5;
    }
    CHECK(row == 1 && col == 1 && negc == 1);
    check_round_trip(p, 1);
    coda_program_destroy(p);
  }

  /* left associativity and comparison precedence */
  p = parse_ok("output y : f32\nstore y = acc - 1 - 2 < acc * 3 + 4\n");
  if (p) {
    const ir_instr *lt = last_instr(p);
    CHECK(lt->op == CODA_OP_LT);
    const ir_instr *l = &p->instrs[lt->args[0]], *r = &p->instrs[lt->args[1]];
    CHECK(l->op == CODA_OP_SUB && r->op == CODA_OP_ADD);
    const ir_instr *ll = &p->instrs[l->args[0]];
    CHECK(ll->op == CODA_OP_SUB && p->instrs[l->args[1]].imm == 2); /* (acc - 1) - 2 */
    check_round_trip(p, 1);
    coda_program_destroy(p);
  }
  /* parentheses survive the round trip exactly where needed */
  p = parse_ok("output y : f32\nstore y = acc - (acc - (2 * (acc + 1))) / -(3)\n");
  if (p) {
    CHECK(strstr(coda_program_text(p), "acc - (acc - 2 * (acc + 1)) / -(3)") != NULL);
    check_round_trip(p, 1);
    coda_program_destroy(p);
  }
  /* empty program, comments and blank lines only */
  p = parse_ok("# nothing\n\n   \n# more\n");
  if (p) {
    CHECK(p->ninstrs == 0 && coda_program_num_args(p) == 0);
    coda_program_destroy(p);
  }
  /* CRLF line ends and no final newline */
  p = parse_ok("output y : f32\r\nstore y = acc\r\n# end");
  if (p) coda_program_destroy(p);
  /* contextual words stay usable as names */
  p = parse_ok("mode pair\noutput o : bf16\nx2, y2 = rope(acc.even, acc.odd, 1, 0.5, 0)\n"
               "lse = x2 + y2\nstore o = pack(lse, x2)\n");
  if (p) coda_program_destroy(p);
  /* f64 in exact mode */
  check_exact_parse("input t : tile f64\noutput y : f64\nstore y = acc + t\n");
}

static void test_errors(void) {
  check_error("input x : tile bf16\noutput y : bf16\nstore y = x +\n", CODA_ERR_PARSE, 3, 14,
              "expected an expression, found end of line");
  check_error("output y : f32\nstore y = g * 2\ng = acc\n", CODA_ERR_TYPE, 2, 11, "'g' is used before it is defined");
  check_error("output h : f32\nx = acc\n", CODA_ERR_TYPE, 1, 8, "output 'h' is never stored");
  check_error("input z : tile bf16 x2\noutput y : f32\nstore y = z * 2\n", CODA_ERR_TYPE, 3, 11,
              "input 'z' holds two values per point here: read it as z.even or z.odd");
  check_error("input r : row f32\noutput y : f32\nstore y = acc * r.even\n", CODA_ERR_TYPE, 3, 17,
              "holds one value per point");
  check_error("mode pair\ninput c : col f32\noutput y : bf16 half\nstore y = acc.even * c\n", CODA_ERR_TYPE, 4, 22,
              "read it as c.even or c.odd");
  check_error("output y : f32\nstore y = acc.even\n", CODA_ERR_TYPE, 2, 11, "acc holds one value");
  check_error("mode pair\noutput y : bf16 half\nstore y = acc\n", CODA_ERR_TYPE, 3, 11, "read it as acc.even or acc.odd");
  check_error("x = acc\ny = x.odd\n", CODA_ERR_TYPE, 2, 5, "without a lane");
  check_error("input t : tile bf16 half\n", CODA_ERR_TYPE, 1, 7, "half is only allowed in pair mode");
  check_error("output t : bf16 half\n", CODA_ERR_TYPE, 1, 8, "half is only allowed in pair mode");
  check_error("mode pair\ninput t : tile bf16 x2\n", CODA_ERR_TYPE, 2, 7, "x2 is only allowed in elem mode");
  check_error("input t : tile f32 x2\n", CODA_ERR_TYPE, 1, 7, "16-bit");
  check_error("input t : row bf16 x2\n", CODA_ERR_TYPE, 1, 7, "tile inputs only");
  check_error("input t : tile i32\n", CODA_ERR_TYPE, 1, 7, "i32 is only allowed for row, col and scalar");
  check_error("output y : i32\nstore y = acc\n", CODA_ERR_TYPE, 1, 8, "cannot be i32");
  check_error("input t : tile f64\n", CODA_ERR_TYPE, 1, 7, "exact mode");
  check_error("mode pair\noutput y : bf16\nstore y = pack(acc.even, acc.odd)\nreduce s = colsum(acc.even)\n",
              CODA_ERR_TYPE, 4, 12, "colsum is only allowed in elem mode");
  check_error("output y : bf16\nstore y = pack(acc, acc)\n", CODA_ERR_TYPE, 2, 7, "store it without pack()");
  check_error("mode pair\noutput y : bf16\nstore y = acc.even\n", CODA_ERR_TYPE, 3, 7, "store it with pack(even, odd)");
  check_error("output y : bf16 x2\nstore y = acc\n", CODA_ERR_TYPE, 2, 7, "store it with pack(even, odd)");
  check_error("input ix : col i32\nreduce p = rowpick(acc, ix)\n", CODA_ERR_TYPE, 2, 12, "must be a row i32 input");
  check_error("input ix : row f32\nreduce p = rowpick(acc, ix)\n", CODA_ERR_TYPE, 2, 12, "must be a row i32 input");
  check_error("x = acc\nreduce p = rowpick(acc, x)\n", CODA_ERR_TYPE, 2, 25, "is not an input");
  check_error("mode pair\ninput ix : row i32\nreduce p = rowpick(acc.even, ix)\n", CODA_ERR_TYPE, 3, 12,
              "rowpick is only allowed in elem mode");
  check_error("reduce s = rowsum(acc) per 0\n", CODA_ERR_TYPE, 1, 12, "segment must be > 0");
  check_error("mode pair\nreduce s = rowsum(acc.odd) per 63\n", CODA_ERR_TYPE, 2, 12, "even in pair mode");
  check_error("reduce s = rowsum(acc) per 2.5\n", CODA_ERR_PARSE, 1, 28, "segment width");
  check_error("reduce s = rowmax(acc)\nfinish r = rstd(s, 1e-5)\n", CODA_ERR_TYPE, 2, 12, "rstd needs");
  check_error("reduce s = rowsum(acc)\nfinish r = lse(s)\n", CODA_ERR_TYPE, 2, 12, "lse needs a rowlse partial");
  check_error("reduce s = rowlse(acc)\nfinish r = max(s)\n", CODA_ERR_TYPE, 2, 12, "max needs a rowmax, segmented rowmax or colmax partial");
  check_error("reduce s = rowmax(acc)\nfinish r = mean(s)\n", CODA_ERR_TYPE, 2, 12, "mean needs");
  check_error("input ix : row i32\nreduce s = rowpick(acc, ix)\nfinish r = sum(s)\n", CODA_ERR_TYPE, 3, 12, "sum needs");
  check_error("reduce s = rowsum(acc * acc)\nreduce m = rowmax(acc)\nfinish r = rstd(s, 1e-5, m)\n", CODA_ERR_TYPE, 3,
              12, "centered rstd needs two rowsum partials");
  check_error("reduce s = colsum(acc)\nreduce m = colsum(acc)\nfinish r = rstd(s, 1e-5, m)\n", CODA_ERR_TYPE, 3,
              12, "centered rstd");
  check_error("finish r = sum(s)\n", CODA_ERR_TYPE, 1, 16, "'s' is not a reduction");
  check_error("output y : f32\nstore y = exp(acc, acc)\n", CODA_ERR_TYPE, 2, 11, "exp takes 1 argument");
  check_error("output y : f32\nstore y = fma(acc, acc)\n", CODA_ERR_TYPE, 2, 11, "fma takes 3 arguments, found 2");
  check_error("y = rope(acc, acc, acc, acc, acc) + 1\n", CODA_ERR_TYPE, 1, 5, "gives two results");
  check_error("a, b = exp(acc)\n", CODA_ERR_TYPE, 1, 8, "needs a two-result function");
  check_error("a, a = rope(acc, acc, acc, acc, acc)\n", CODA_ERR_TYPE, 1, 4, "named twice");
  check_error("x = acc\nx = acc * 2\n", CODA_ERR_TYPE, 2, 1, "'x' is already defined (line 1)");
  check_error("input x : row f32\noutput x : f32\n", CODA_ERR_TYPE, 2, 8, "already defined");
  check_error("exp = acc\n", CODA_ERR_TYPE, 1, 1, "reserved word");
  check_error("input acc : row f32\n", CODA_ERR_TYPE, 1, 7, "reserved word");
  check_error("abcdefghijabcdefghijabcdefghijab = acc\n", CODA_ERR_TYPE, 1, 1, "longer than 31");
  check_error("x = acc\nmode pair\n", CODA_ERR_PARSE, 2, 1, "mode must be the first statement");
  check_error("mode triple\n", CODA_ERR_PARSE, 1, 6, "expected 'elem' or 'pair'");
  check_error("x = acc @ 2\n", CODA_ERR_PARSE, 1, 9, "expected end of line, found character '@'");
  check_error("x = 1.5.3\n", CODA_ERR_PARSE, 1, 5, "malformed");
  check_error("x = 1e999\n", CODA_ERR_PARSE, 1, 5, "out-of-range");
  check_error("x = 2abc\n", CODA_ERR_PARSE, 1, 5, "malformed");
  check_error("input t : tile f8\n", CODA_ERR_PARSE, 1, 16, "expected a dtype");
  check_error("input t tile f32\n", CODA_ERR_PARSE, 1, 9, "expected ':'");
  check_error("input t : matrix f32\n", CODA_ERR_PARSE, 1, 11,
              "expected an input kind (row, col, scalar, tile, rowsum, rowmax or rowlse)");
  check_error("x = pack(acc, acc)\n", CODA_ERR_TYPE, 1, 5, "only allowed as the whole value of a store");
  check_error("x = rowsum(acc)\n", CODA_ERR_TYPE, 1, 5, "only allowed in a reduce statement");
  check_error("store y = acc\n", CODA_ERR_TYPE, 1, 7, "output 'y' is not declared");
  check_error("output y : f32\nstore y = acc\nstore y = acc * 2\n", CODA_ERR_TYPE, 3, 7, "already stored (line 2)");
  check_error("output y : f32\nstore y = acc\nz = y * 2\n", CODA_ERR_TYPE, 3, 5, "outputs are stored, not read");
  check_error("reduce s = rowsum(acc)\nz = s * 2\n", CODA_ERR_TYPE, 2, 5, "reduction partial");
  check_error("x = acc\ny = x\n", CODA_ERR_TYPE, 2, 5, "only renames a value");
  check_error("x = row.even\n", CODA_ERR_TYPE, 1, 5, "row and col take no lane");
  check_error("x = acc.left\n", CODA_ERR_PARSE, 1, 9, "expected 'even' or 'odd'");
  check_error("x = (acc\n", CODA_ERR_PARSE, 1, 9, "expected ')', found end of line");
  check_error("x = exp(acc\n", CODA_ERR_PARSE, 1, 12, "expected ')'");
  check_error("finish r = rstd(s)\n", CODA_ERR_TYPE, 1, 17, "not a reduction");
  check_error("reduce s = rowsum(acc)\nfinish r = rstd(s)\n", CODA_ERR_PARSE, 2, 18, "expected ','");
  check_error("reduce s = rowsum(acc)\nfinish r = sum(s, 1)\n", CODA_ERR_PARSE, 2, 17, "expected ')'");
  check_error("reduce s = avg(acc)\n", CODA_ERR_PARSE, 1, 12, "expected a reduction");
  check_error("x = foo(acc)\n", CODA_ERR_TYPE, 1, 5, "unknown function 'foo'");
  check_error("x = acc\n= 3\n", CODA_ERR_PARSE, 2, 1, "expected a statement");
  /* nesting deeper than the limit */
  {
    char buf[400];
    int n = 0;
    n += snprintf(buf + n, sizeof buf - n, "x = ");
    for (int i = 0; i < 70; i++) buf[n++] = '(';
    n += snprintf(buf + n, sizeof buf - n, "acc");
    for (int i = 0; i < 70; i++) buf[n++] = ')';
    buf[n] = '\0';
    check_error(buf, CODA_ERR_PARSE, 1, 4 + 65, "nested too deeply");
    /* 64 levels are fine */
    n = snprintf(buf, sizeof buf, "x = ");
    for (int i = 0; i < 64; i++) buf[n++] = '(';
    n += snprintf(buf + n, sizeof buf - n, "acc");
    for (int i = 0; i < 64; i++) buf[n++] = ')';
    buf[n] = '\0';
    coda_program p = parse_ok(buf);
    coda_program_destroy(p);
    n = snprintf(buf, sizeof buf, "x = ");
    for (int i = 0; i < 100; i++) buf[n++] = '-';
    n += snprintf(buf + n, sizeof buf - n, "acc");
    buf[n] = '\0';
    check_error(buf, CODA_ERR_PARSE, 1, 4 + 65, "nested too deeply");
  }
  /* too many instructions */
  {
    size_t cap = 700 * 16, n = 0;
    char *buf = malloc(cap);
    for (int i = 0; i < 700; i++) n += (size_t)snprintf(buf + n, cap - n, "v%d = acc\n", i);
    char at[16];
    int col = snprintf(at, sizeof at, "v%d = ", CODA_MAX_INSTRS) + 1;
    check_error(buf, CODA_ERR_TYPE, CODA_MAX_INSTRS + 1, col, "more than 512 instructions");
    free(buf);
  }
  /* too many inputs */
  {
    char buf[2000];
    int n = 0;
    for (int i = 0; i < 30; i++) n += snprintf(buf + n, sizeof buf - n, "input i%d : row f32\n", i);
    check_error(buf, CODA_ERR_TYPE, CODA_MAX_INPUTS + 1, 7, "too many inputs");
  }
  /* NULL arguments; a NULL context only loses the message */
  coda_program p = NULL;
  CHECK(coda_program_parse(NULL, "x = (acc", &p) == CODA_ERR_PARSE && p == NULL);
  CHECK(coda_program_parse(NULL, "output y : f32\nstore y = acc\n", &p) == CODA_OK && p != NULL);
  coda_program_destroy(p);
  p = NULL;
  CHECK(coda_program_parse(ctx, NULL, &p) == CODA_ERR_INVALID_ARGUMENT && p == NULL);
  CHECK(coda_program_parse(ctx, "x = acc", NULL) == CODA_ERR_INVALID_ARGUMENT);
}

/* The same program through the builder; must equal the parsed IR. */
static void test_builder(void) {
  coda_builder b;
  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  coda_value x = coda_b_input(b, "x", CODA_ARG_TILE, CODA_BF16, CODA_WIDTH_FULL);
  coda_value w = coda_b_input(b, "w", CODA_ARG_COL, CODA_F32, CODA_WIDTH_FULL);
  coda_value ix = coda_b_input(b, "ix", CODA_ARG_ROW, CODA_I32, CODA_WIDTH_FULL);
  coda_value s0 = coda_b_input(b, "s0", CODA_ARG_SCALAR, CODA_F32, CODA_WIDTH_FULL);
  coda_value xp = coda_b_input(b, "xp", CODA_ARG_TILE, CODA_F16, CODA_WIDTH_X2);
  coda_value y = coda_b_output(b, "y", CODA_BF16, CODA_WIDTH_FULL, 1);
  coda_value yp = coda_b_output(b, "yp", CODA_BF16, CODA_WIDTH_X2, 0);
  coda_value a[2];
  a[0] = coda_b_acc(b, CODA_LANE_NONE);
  a[1] = coda_b_read(b, x, CODA_LANE_NONE);
  coda_value h = coda_b_op(b, CODA_OP_ADD, 2, a, NULL);
  CHECK(coda_b_name(b, h, "h") == CODA_OK);
  a[0] = h;
  a[1] = coda_b_read(b, w, CODA_LANE_NONE);
  coda_value hw = coda_b_op(b, CODA_OP_MUL, 2, a, NULL);
  a[0] = coda_b_read(b, s0, CODA_LANE_NONE);
  a[1] = coda_b_const(b, 0.25);
  coda_value q = coda_b_op(b, CODA_OP_DIV, 2, a, NULL);
  a[0] = hw;
  a[1] = q;
  coda_value g = coda_b_op(b, CODA_OP_SUB, 2, a, NULL);
  CHECK(coda_b_name(b, g, "g") == CODA_OK);
  CHECK(coda_b_store(b, y, g) == CODA_OK);
  a[0] = coda_b_read(b, xp, CODA_LANE_EVEN);
  a[1] = h;
  coda_value e = coda_b_op(b, CODA_OP_MUL, 2, a, NULL);
  coda_value o = coda_b_read(b, xp, CODA_LANE_ODD);
  CHECK(coda_b_store_pair(b, yp, e, o) == CODA_OK);
  a[0] = a[1] = h;
  CHECK(coda_b_reduce(b, "ss", CODA_REDUCE_ROWSUM, coda_b_op(b, CODA_OP_MUL, 2, a, NULL), -1, 0) == CODA_OK);
  CHECK(coda_b_reduce(b, "s1", CODA_REDUCE_ROWSUM, h, -1, 0) == CODA_OK);
  CHECK(coda_b_reduce(b, "mx", CODA_REDUCE_ROWMAX, h, -1, 0) == CODA_OK);
  CHECK(coda_b_reduce(b, "ls", CODA_REDUCE_ROWLSE, h, -1, 0) == CODA_OK);
  CHECK(coda_b_reduce(b, "cs", CODA_REDUCE_COLSUM, g, -1, 0) == CODA_OK);
  CHECK(coda_b_reduce(b, "sg", CODA_REDUCE_SEGSUM, h, -1, 64) == CODA_OK);
  CHECK(coda_b_reduce(b, "pk", CODA_REDUCE_ROWPICK, h, ix, 0) == CODA_OK);
  CHECK(coda_b_finish(b, "rs", CODA_FINISH_RSTD, "ss", NULL, 1e-05) == CODA_OK);
  CHECK(coda_b_finish(b, "rc", CODA_FINISH_RSTD, "ss", "s1", 1e-05) == CODA_OK);
  CHECK(coda_b_finish(b, "mn", CODA_FINISH_MEAN, "cs", NULL, 0) == CODA_OK);
  CHECK(coda_b_finish(b, "sm", CODA_FINISH_SUM, "sg", NULL, 0) == CODA_OK);
  CHECK(coda_b_finish(b, "mxx", CODA_FINISH_MAX, "mx", NULL, 0) == CODA_OK);
  CHECK(coda_b_finish(b, "l", CODA_FINISH_LSE, "ls", NULL, 0) == CODA_OK);
  coda_program pb = NULL;
  CHECK_MSG(coda_builder_finish(b, &pb) == CODA_OK, "%s", coda_last_error(ctx));
  coda_builder_destroy(b);
  coda_program pt = parse_ok(lang_prog_elem);
  if (pb && pt) {
    char why[200];
    CHECK_MSG(ir_equal(pb, pt, 1, why, sizeof why), "builder and text differ: %s", why);
    CHECK(!strcmp(coda_program_text(pb), coda_program_text(pt)));
    check_round_trip(pb, 1);
  }
  coda_program_destroy(pb);
  coda_program_destroy(pt);

  /* pair mode with a two-result op */
  CHECK(coda_builder_create(ctx, 1, &b) == CODA_OK);
  coda_value r = coda_b_input(b, "r", CODA_ARG_ROW, CODA_F32, CODA_WIDTH_FULL);
  coda_value pos = coda_b_input(b, "pos", CODA_ARG_ROW, CODA_I32, CODA_WIDTH_FULL);
  coda_value fr = coda_b_input(b, "freq", CODA_ARG_COL, CODA_F32, CODA_WIDTH_FULL);
  coda_value out = coda_b_output(b, "qkv", CODA_BF16, CODA_WIDTH_FULL, 0);
  a[0] = coda_b_acc(b, CODA_LANE_EVEN);
  a[1] = coda_b_read(b, r, CODA_LANE_NONE);
  coda_value z0 = coda_b_op(b, CODA_OP_MUL, 2, a, NULL);
  coda_b_name(b, z0, "z0");
  a[0] = coda_b_acc(b, CODA_LANE_ODD);
  a[1] = coda_b_read(b, r, CODA_LANE_NONE);
  coda_value z1 = coda_b_op(b, CODA_OP_MUL, 2, a, NULL);
  coda_b_name(b, z1, "z1");
  coda_value ra[5] = {z0, z1, coda_b_read(b, pos, CODA_LANE_NONE), coda_b_read(b, fr, CODA_LANE_EVEN),
                      coda_b_read(b, fr, CODA_LANE_ODD)};
  coda_value q1 = -1;
  coda_value q0 = coda_b_op(b, CODA_OP_ROPE, 5, ra, &q1);
  CHECK(q0 >= 0 && q1 == q0 + 1);
  coda_b_name(b, q0, "q0");
  coda_b_name(b, q1, "q1");
  CHECK(coda_b_store_pair(b, out, q0, q1) == CODA_OK);
  CHECK(coda_builder_finish(b, &pb) == CODA_OK);
  coda_builder_destroy(b);
  pt = parse_ok("mode pair\ninput r : row f32\ninput pos : row i32\ninput freq : col f32\noutput qkv : bf16\n"
                "z0 = acc.even * r\nz1 = acc.odd * r\nq0, q1 = rope(z0, z1, pos, freq.even, freq.odd)\n"
                "store qkv = pack(q0, q1)\n");
  if (pb && pt) {
    char why[200];
    CHECK_MSG(ir_equal(pb, pt, 1, why, sizeof why), "builder and text differ: %s", why);
  }
  coda_program_destroy(pb);
  coda_program_destroy(pt);

  /* A DAG of unnamed values, shared operands and out-of-order stores and
   * reductions: the printer names what it cannot inline, and the text still
   * parses back to the same instructions. */
  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  coda_value yo = coda_b_output(b, "y", CODA_F32, CODA_WIDTH_FULL, 0);
  coda_value zo = coda_b_output(b, "z", CODA_F32, CODA_WIDTH_FULL, 0);
  coda_value c1 = coda_b_const(b, -2);
  coda_value ac = coda_b_acc(b, CODA_LANE_NONE);
  coda_value c2 = coda_b_const(b, 3);
  a[0] = ac;
  a[1] = c2;
  coda_value m1 = coda_b_op(b, CODA_OP_MUL, 2, a, NULL); /* operands not in post order with c1 */
  a[0] = c1;
  a[1] = m1;
  coda_value s1 = coda_b_op(b, CODA_OP_ADD, 2, a, NULL);
  a[0] = s1;
  a[1] = s1; /* shared */
  coda_value s2 = coda_b_op(b, CODA_OP_MUL, 2, a, NULL);
  coda_value n1 = coda_b_op(b, CODA_OP_NEG, 1, &c2, NULL); /* c2 used twice */
  coda_value cc = coda_b_const(b, 1.5);
  coda_value n2 = coda_b_op(b, CODA_OP_NEG, 1, &cc, NULL);
  a[0] = n1;
  a[1] = n2;
  coda_value s3 = coda_b_op(b, CODA_OP_SUB, 2, a, NULL);
  CHECK(coda_b_reduce(b, "late", CODA_REDUCE_ROWSUM, s3, -1, 0) == CODA_OK);
  CHECK(coda_b_reduce(b, "early", CODA_REDUCE_ROWMAX, s1, -1, 0) == CODA_OK);
  CHECK(coda_b_store(b, zo, s2) == CODA_OK);
  CHECK(coda_b_store(b, yo, s3) == CODA_OK);
  /* a chain deeper than the parser's nesting limit */
  coda_value v = ac;
  for (int i = 0; i < 100; i++) v = coda_b_op(b, CODA_OP_EXP, 1, &v, NULL);
  CHECK(coda_b_reduce(b, "deep", CODA_REDUCE_ROWSUM, v, -1, 0) == CODA_OK);
  CHECK(coda_b_finish(b, "fz", CODA_FINISH_RSTD, "late", NULL, -0.0) == CODA_OK); /* eps -0 */
  CHECK_MSG(coda_builder_finish(b, &pb) == CODA_OK, "%s", coda_last_error(ctx));
  coda_builder_destroy(b);
  if (pb) {
    CHECK(strstr(coda_program_text(pb), "_t") != NULL); /* generated names */
    check_round_trip(pb, 0);
    coda_program_destroy(pb);
  }

  /* errors: recorded, propagated, reported by finish */
  CHECK(coda_builder_create(ctx, 1, &b) == CODA_OK);
  coda_value yy = coda_b_output(b, "y", CODA_F32, CODA_WIDTH_HALF, 0);
  CHECK(coda_b_store(b, yy, coda_b_acc(b, CODA_LANE_NONE)) == CODA_OK);
  CHECK(coda_builder_finish(b, &pb) == CODA_ERR_TYPE && pb == NULL);
  CHECK(strstr(coda_last_error(ctx), "acc holds two values per point in pair mode") != NULL);
  coda_builder_destroy(b);

  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  coda_value e1 = coda_b_acc(b, CODA_LANE_NONE);
  CHECK(coda_b_op(b, CODA_OP_EXP, 2, (coda_value[]){e1, e1}, NULL) < 0);
  CHECK(coda_b_const(b, 1) < 0); /* after an error every call fails */
  CHECK(coda_builder_finish(b, &pb) == CODA_ERR_TYPE && pb == NULL);
  CHECK(strstr(coda_last_error(ctx), "exp takes 1 operand") != NULL);
  coda_builder_destroy(b);

  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  CHECK(coda_b_input(b, "x", CODA_ARG_ROW, CODA_F32, CODA_WIDTH_FULL) == 0);
  CHECK(coda_b_output(b, "x", CODA_F32, CODA_WIDTH_FULL, 0) < 0);
  CHECK(coda_builder_finish(b, &pb) == CODA_ERR_TYPE && strstr(coda_last_error(ctx), "already defined"));
  coda_builder_destroy(b);

  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  coda_value k = coda_b_const(b, 1);
  CHECK(coda_b_name(b, k, "max") == CODA_ERR_TYPE);
  coda_builder_destroy(b);

  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  CHECK(coda_b_op(b, CODA_OP_ADD, 2, (coda_value[]){0, 1}, NULL) < 0); /* no such values */
  CHECK(coda_builder_finish(b, &pb) == CODA_ERR_INVALID_ARGUMENT);
  coda_builder_destroy(b);

  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  CHECK(coda_b_const(b, 1.0 / 0.0) < 0);
  coda_builder_destroy(b);
  CHECK(coda_builder_create(ctx, 2, &b) == CODA_ERR_INVALID_ARGUMENT);
  coda_builder_destroy(NULL);
}

static void test_introspection(void) {
  coda_program p = parse_ok(lang_prog_elem);
  if (!p) return;
  CHECK_EQ_INT(coda_program_num_args(p), 5 + 2 + 7 + 6);
  const char *order[] = {"x", "w", "ix", "s0", "xp", "y", "yp", "ss", "s1", "mx", "ls", "cs", "sg", "pk",
                         "rs", "rc", "mn", "sm", "mxx", "l"};
  for (int i = 0; i < 20; i++) {
    coda_arg_info info;
    CHECK(coda_program_arg(p, i, &info) == CODA_OK);
    CHECK_MSG(!strcmp(info.name, order[i]), "arg %d is %s, wanted %s", i, info.name, order[i]);
    if (i >= 5 && i < 7) CHECK(info.kind == CODA_ARG_OUTPUT);
    if (i >= 7 && i < 14) CHECK(info.kind == CODA_ARG_PARTIAL && info.dtype == CODA_F32);
    if (i >= 14) CHECK(info.kind == (i == 16 ? CODA_ARG_COL : CODA_ARG_ROW));
  }
  coda_arg_info info;
  CHECK(coda_program_arg(p, 5, &info) == CODA_OK && info.accumulate == 1 && info.dtype == CODA_BF16);
  CHECK(coda_program_arg(p, 4, &info) == CODA_OK && info.width == CODA_WIDTH_X2);
  CHECK(coda_program_arg(p, 20, &info) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_program_arg(p, -1, &info) == CODA_ERR_INVALID_ARGUMENT);

  /* shapes against the formulas of the design, for a few sizes */
  const int64_t Ms[] = {1, 10, 129}, Ns[] = {2, 300, 512};
  for (int a = 0; a < 3; a++)
    for (int c = 0; c < 3; c++) {
      int64_t M = Ms[a], N = Ns[c], r, k;
      int tm = 64, tn = 128;
      int64_t ntile_n = (N + tn - 1) / tn, ntile_m = (M + tm - 1) / tm, nseg = (N + 63) / 64;
      struct { const char *name; int64_t rows, cols; } want[] = {
        {"x", M, N}, {"w", 1, N}, {"ix", M, 1}, {"s0", 1, 1}, {"xp", M, 2 * N}, {"y", M, N}, {"yp", M, 2 * N},
        {"ss", M, ntile_n}, {"mx", M, ntile_n}, {"ls", M, ntile_n}, {"cs", ntile_m, N}, {"sg", M, nseg},
        {"pk", M, 1}, {"rs", M, 1}, {"rc", M, 1}, {"mn", 1, N}, {"sm", M, nseg}, {"l", M, 1},
      };
      for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(coda_program_arg_shape(p, want[i].name, M, N, tm, tn, &r, &k) == CODA_OK);
        CHECK_MSG(r == want[i].rows && k == want[i].cols, "%s: %lld x %lld, wanted %lld x %lld (M=%lld N=%lld)",
                  want[i].name, (long long)r, (long long)k, (long long)want[i].rows, (long long)want[i].cols,
                  (long long)M, (long long)N);
      }
      /* segment 64 with tile_n 32: intervals of 32 */
      CHECK(coda_program_arg_shape(p, "sg", M, N, tm, 32, &r, &k) == CODA_OK && k == (N + 31) / 32);
    }
  int64_t r, k;
  CHECK(coda_program_arg_shape(p, "sg", 8, 8, 64, 96, &r, &k) == CODA_ERR_SHAPE); /* 64 vs 96 */
  CHECK(coda_program_arg_shape(p, "nope", 8, 8, 64, 64, &r, &k) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_program_arg_shape(p, "x", 8, 8, 0, 64, &r, &k) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_program_arg_shape(p, "x", 8, 8, 64, 64, NULL, &k) == CODA_ERR_INVALID_ARGUMENT);
  coda_program_destroy(p);

  p = parse_ok(lang_prog_pair);
  if (p) {
    CHECK(coda_program_arg_shape(p, "q", 4, 7, 64, 128, &r, &k) == CODA_ERR_SHAPE); /* N odd */
    CHECK(coda_program_arg_shape(p, "q", 4, 10, 64, 128, &r, &k) == CODA_OK && r == 4 && k == 10);
    CHECK(coda_program_arg_shape(p, "gate", 4, 10, 64, 128, &r, &k) == CODA_OK && r == 4 && k == 5);
    CHECK(coda_program_arg_shape(p, "hh", 4, 10, 64, 128, &r, &k) == CODA_OK && r == 4 && k == 5);
    CHECK(coda_program_arg_shape(p, "freq", 4, 10, 64, 128, &r, &k) == CODA_OK && r == 1 && k == 10);
    CHECK(coda_program_arg_shape(p, "dn", 4, 256, 64, 128, &r, &k) == CODA_OK && r == 4 && k == 4);
    coda_program_destroy(p);
  }
  CHECK(coda_program_num_args(NULL) == 0);
  coda_program_destroy(NULL);
}

static void test_builtins(void) {
  int n = 0;
  while (coda_builtin_program_name(n)) n++;
  CHECK(coda_builtin_program_name(-1) == NULL);
  for (int i = 0; i < n; i++) {
    coda_program p = NULL;
    coda_status s = coda_program_builtin(ctx, coda_builtin_program_name(i), &p);
    CHECK_MSG(s == CODA_OK, "built-in %s: %s", coda_builtin_program_name(i), coda_last_error(ctx));
    check_round_trip(p, 1);
    coda_program_destroy(p);
  }
  coda_program p = (coda_program)1;
  CHECK(coda_program_builtin(ctx, "no_such_program", &p) == CODA_ERR_INVALID_ARGUMENT && p == NULL);
  CHECK(strstr(coda_last_error(ctx), "no_such_program") != NULL);
  printf("%d built-in programs parsed\n", n);
}

/* The rowsum input kind: an M x T partials tensor read as its row sums.
 * Parsed, printed, built, validated and introspected like the other kinds;
 * `rowsum` stays usable as a name and as the reduction. */
static void test_rowsum_input(void) {
  coda_program p = parse_ok("input ss : rowsum f32\n"
                            "input g : row f32\n"
                            "output y : f32\n"
                            "r = rsqrt(ss * 0.5 + 1e-5)\n"
                            "store y = acc * r * g\n"
                            "reduce q = rowsum(acc * r)\n");
  if (p) {
    CHECK(p->inputs[0].kind == CODA_ARG_ROWSUM && p->inputs[0].dtype == CODA_F32 &&
          p->inputs[0].width == CODA_WIDTH_FULL);
    CHECK(strstr(coda_program_text(p), "input ss : rowsum f32\n") != NULL);
    CHECK(strstr(coda_program_ir(p), "ss : rowsum f32") != NULL);
    check_round_trip(p, 1);
    coda_arg_info info;
    CHECK(coda_program_arg(p, 0, &info) == CODA_OK && info.kind == CODA_ARG_ROWSUM &&
          info.dtype == CODA_F32 && !strcmp(info.name, "ss"));
    int64_t r = -1, c = -1;
    /* any number of columns: reported as 0 */
    CHECK(coda_program_arg_shape(p, "ss", 70, 300, 64, 128, &r, &c) == CODA_OK && r == 70 && c == 0);
    CHECK(coda_program_arg_shape(p, "q", 70, 300, 64, 128, &r, &c) == CODA_OK && r == 70 && c == 3);
    coda_program_destroy(p);
  }
  /* pair mode: still one value per point, no lane */
  p = parse_ok("mode pair\ninput s : rowsum f32\noutput y : bf16\nstore y = pack(acc.even * s, acc.odd)\n");
  check_round_trip(p, 1);
  coda_program_destroy(p);
  /* `rowsum` as a name: an input, a value, beside the reduction */
  p = parse_ok("input rowsum : rowsum f32\n"
               "output y : f32\n"
               "rowmax = acc * rowsum\n"
               "store y = rowmax\n"
               "reduce rowlse = rowsum(rowmax)\n");
  if (p) CHECK(p->inputs[0].kind == CODA_ARG_ROWSUM && !strcmp(p->inputs[0].name, "rowsum"));
  check_round_trip(p, 1);
  coda_program_destroy(p);
  p = parse_ok("input s : row f32\noutput rowsum : f32\nstore rowsum = acc * s\n");
  coda_program_destroy(p);
  /* bad declarations and reads */
  check_error("input s : rowsum bf16\n", CODA_ERR_TYPE, 1, 7, "rowsum input holds fp32 partials");
  check_error("input s : rowsum i32\n", CODA_ERR_TYPE, 1, 7, "found i32");
  check_error("input s : rowsum f16\n", CODA_ERR_TYPE, 1, 7, "declare it f32");
  check_error("input s : rowsum f32 x2\n", CODA_ERR_TYPE, 1, 7, "tile inputs only");
  check_error("mode pair\ninput s : rowsum f32 half\n", CODA_ERR_TYPE, 2, 7, "tile inputs only");
  check_error("input s : rowsum f64\n", CODA_ERR_TYPE, 1, 7, "f64 needs exact mode");
  check_error("input s : rowsum\n", CODA_ERR_PARSE, 1, 17, "expected a dtype");
  check_error("input s : rowsum f32\noutput y : f32\nstore y = s.even\n", CODA_ERR_TYPE, 3, 11,
              "holds one value per point");
  check_error("mode pair\ninput s : rowsum f32\noutput y : f32 half\nstore y = s.odd\n", CODA_ERR_TYPE,
              4, 11, "read it as s, without a lane");
  check_error("input s : rowsum f32\ninput ix : row i32\nreduce q = rowpick(acc, s)\n", CODA_ERR_TYPE,
              3, 12, "must be a row i32 input");
  /* exact mode: f64 partials */
  check_exact_parse("input s : rowsum f64\noutput y : f64\nstore y = acc * s\n");
  /* the builder */
  coda_builder b = NULL;
  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  coda_value s = coda_b_input(b, "s", CODA_ARG_ROWSUM, CODA_F32, CODA_WIDTH_FULL);
  coda_value y = coda_b_output(b, "y", CODA_F32, CODA_WIDTH_FULL, 0);
  coda_value args[2] = {coda_b_acc(b, CODA_LANE_NONE), coda_b_read(b, s, CODA_LANE_NONE)};
  coda_value m = coda_b_op(b, CODA_OP_MUL, 2, args, NULL);
  CHECK(coda_b_store(b, y, m) == CODA_OK);
  p = NULL;
  CHECK(coda_builder_finish(b, &p) == CODA_OK);
  coda_builder_destroy(b);
  if (p) {
    CHECK(strstr(coda_program_text(p), "input s : rowsum f32\n") != NULL);
    coda_program q = parse_ok(coda_program_text(p));
    char why[200];
    CHECK(q && ir_equal(p, q, 0, why, sizeof why));
    coda_program_destroy(q);
    /* a different kind is a different program */
    q = parse_ok("input s : row f32\noutput y : f32\nstore y = acc * s\n");
    CHECK(q && !ir_equal(p, q, 0, why, sizeof why) && strstr(why, "input 0"));
    coda_program_destroy(q);
    coda_program_destroy(p);
  }
  struct { coda_arg_kind kind; coda_dtype dt; coda_width w; const char *needle; } bad[] = {
    {CODA_ARG_ROWSUM, CODA_BF16, CODA_WIDTH_FULL, "fp32 partials"},
    {CODA_ARG_ROWSUM, CODA_F32, CODA_WIDTH_X2, "tile inputs only"},
    {CODA_ARG_OUTPUT, CODA_F32, CODA_WIDTH_FULL, "kind must be row, col, scalar, tile, rowsum, rowmax or rowlse"},
    {CODA_ARG_PARTIAL, CODA_F32, CODA_WIDTH_FULL, "kind must be"},
    {(coda_arg_kind)9, CODA_F32, CODA_WIDTH_FULL, "kind must be"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
    s = coda_b_input(b, "s", bad[i].kind, bad[i].dt, bad[i].w);
    y = coda_b_output(b, "y", CODA_F32, CODA_WIDTH_FULL, 0);
    coda_value a2[2] = {coda_b_acc(b, CODA_LANE_NONE), coda_b_read(b, s, CODA_LANE_NONE)};
    coda_b_store(b, y, coda_b_op(b, CODA_OP_MUL, 2, a2, NULL));
    p = NULL;
    CHECK_MSG(coda_builder_finish(b, &p) == CODA_ERR_TYPE && !p, "bad builder input %zu", i);
    CHECK_MSG(strstr(coda_last_error(ctx), bad[i].needle) != NULL, "case %zu: %s", i, coda_last_error(ctx));
    coda_builder_destroy(b);
  }
}

int main(void) {
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_parse_forms();
  test_errors();
  test_builder();
  test_introspection();
  test_builtins();
  test_rowsum_input();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
