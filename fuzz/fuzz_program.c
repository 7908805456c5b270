/* libFuzzer harness for the epilogue language: arbitrary bytes go to
 * coda_program_parse. A failure must be a parse or type error with a
 * positioned message; a success must print to canonical text that parses
 * back to the same IR (names included) and prints identically, and every
 * introspection call must answer without crashing. Any violation aborts.
 * Inputs starting with the byte 0xFF exercise the builder (see below).
 *
 * Build and run: scripts/fuzz.sh [SECONDS] */
#include "coda.h"
#include "lang/ir.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *text, const char *detail) {
  fprintf(stderr, "fuzz_program: %s: %s\n--- input:\n%s\n", what, detail ? detail : "", text);
  abort();
}

/* Inputs starting with 0xFF drive the builder instead: each following byte
 * (with its operands) adds an instruction, a name, a reduction or a store,
 * so the printer sees DAGs the parser never produces (shared and
 * out-of-order operands, unnamed values, deep chains). Lanes are chosen
 * correctly, so most such programs are valid; a valid one must print to
 * text that parses back to the same instructions. */
static void builder_case(const uint8_t *d, size_t n) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) abort();
  size_t at = 0;
#define BYTE() (at < n ? d[at++] : 0)
  int pair = BYTE() & 1;
  coda_builder b;
  if (coda_builder_create(ctx, pair, &b) != CODA_OK) abort();
  coda_value ins[6] = {
    coda_b_input(b, "r", CODA_ARG_ROW, CODA_F32, CODA_WIDTH_FULL),
    coda_b_input(b, "c", CODA_ARG_COL, CODA_BF16, CODA_WIDTH_FULL),
    coda_b_input(b, "s", CODA_ARG_SCALAR, CODA_F32, CODA_WIDTH_FULL),
    coda_b_input(b, "t", CODA_ARG_TILE, CODA_BF16, CODA_WIDTH_FULL),
    coda_b_input(b, "w", CODA_ARG_TILE, CODA_F16, pair ? CODA_WIDTH_HALF : CODA_WIDTH_X2),
    coda_b_input(b, "ix", CODA_ARG_ROW, CODA_I32, CODA_WIDTH_FULL)};
  coda_value o1 = coda_b_output(b, "o1", CODA_F32, pair ? CODA_WIDTH_HALF : CODA_WIDTH_FULL, 0);
  coda_value o2 = coda_b_output(b, "o2", CODA_BF16, pair ? CODA_WIDTH_FULL : CODA_WIDTH_X2, 0);
  coda_value vals[1100];
  int nv = 0, nred = 0, stored1 = 0, stored2 = 0, nnames = 0;
  char named[1100] = {0}; /* by register: naming twice is an error */
  static const char *const rnames[] = {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"};
  while (at < n && nv < 1000) {
    unsigned cmd = BYTE() % 10, x = BYTE();
    coda_lane ln = pair ? (coda_lane)(1 + (x & 1)) : CODA_LANE_NONE;
    coda_value v = -1, second = -1;
    if (nv == 0 || cmd == 0) v = coda_b_acc(b, ln);
    else if (cmd == 1) {
      int i = (int)(x >> 1) % 6;
      coda_lane l2 = CODA_LANE_NONE;
      if ((i == 1 || i == 3) && pair) l2 = ln;
      if (i == 4 && !pair) l2 = (coda_lane)(1 + (x & 1));
      v = coda_b_read(b, ins[i], l2);
    } else if (cmd == 2) v = coda_b_const(b, ((double)x - 128) / 8);
    else if (cmd == 3) v = x & 1 ? coda_b_row_index(b) : coda_b_col_index(b);
    else if (cmd <= 6) {
      coda_op op = (coda_op)(x % (unsigned)ir_op_count());
      coda_value args[CODA_MAX_ARGS];
      for (int a = 0; a < ir_op_arity(op); a++) args[a] = vals[nv - 1 - (int)(BYTE() % (unsigned)nv)];
      v = coda_b_op(b, op, ir_op_arity(op), args, &second);
    } else if (cmd == 7) {
      char nm[16];
      coda_value t = vals[nv - 1 - (int)(x % (unsigned)nv)];
      snprintf(nm, sizeof nm, "v%d", nnames++);
      if (!named[t]) named[t] = coda_b_name(b, t, nm) == CODA_OK;
    } else if (cmd == 8 && nred < 8) {
      coda_reduce_kind k = (coda_reduce_kind)(x % 6);
      if (pair && (k == CODA_REDUCE_COLSUM || k == CODA_REDUCE_ROWPICK)) k = CODA_REDUCE_ROWSUM;
      coda_b_reduce(b, rnames[nred++], k, vals[nv - 1 - (int)(BYTE() % (unsigned)nv)], ins[5], 64);
    } else if (cmd == 9) {
      coda_value e = vals[nv - 1 - (int)(x % (unsigned)nv)], o = vals[nv - 1 - (int)(BYTE() % (unsigned)nv)];
      if (x & 1 && !stored1) stored1 = coda_b_store(b, o1, e) == CODA_OK;
      else if (!stored2) stored2 = coda_b_store_pair(b, o2, e, o) == CODA_OK;
    }
    if (v >= 0) vals[nv++] = v;
    if (second >= 0) vals[nv++] = second;
  }
#undef BYTE
  if (nv > 0 && !stored1) coda_b_store(b, o1, vals[0]);
  if (nv > 0 && !stored2) coda_b_store_pair(b, o2, vals[nv - 1], vals[0]);
  coda_program p = NULL;
  if (coda_builder_finish(b, &p) == CODA_OK) {
    coda_program q = NULL;
    const char *t1 = coda_program_text(p);
    if (coda_program_parse(ctx, t1, &q) != CODA_OK) fail("builder text does not parse", t1, coda_last_error(ctx));
    char why[256];
    if (!ir_equal(p, q, 0, why, sizeof why)) fail("builder round trip changed the IR", t1, why);
    if (strcmp(t1, coda_program_text(q))) fail("builder text is not a fixed point", t1, coda_program_text(q));
    coda_program_destroy(q);
    coda_program_destroy(p);
  }
  coda_builder_destroy(b);
  coda_context_destroy(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 16)) return 0;
  if (size > 0 && data[0] == 0xFF) {
    builder_case(data + 1, size - 1);
    return 0;
  }
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  /* the last byte's low bit picks the precision, so f64 programs are reached */
  coda_context_options o = coda_context_default_options();
  if (size && (data[size - 1] & 1)) o.precision = CODA_PRECISION_F64;
  coda_context ctx;
  if (coda_context_create(&o, &ctx) != CODA_OK) abort();
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, text, &p);
  if (s != CODA_OK) {
    if (p) fail("out not NULL on failure", text, NULL);
    if (s != CODA_ERR_PARSE && s != CODA_ERR_TYPE) fail("unexpected status", text, coda_status_string(s));
    if (strncmp(coda_last_error(ctx), "line ", 5)) fail("message without a position", text, coda_last_error(ctx));
  } else {
    size_t tl = strlen(coda_program_text(p));
    char *t1 = malloc(tl + 1);
    coda_program q = NULL;
    if (!t1) abort();
    memcpy(t1, coda_program_text(p), tl + 1);
    if (coda_program_parse(ctx, t1, &q) != CODA_OK) fail("canonical text does not parse", t1, coda_last_error(ctx));
    char why[256];
    if (!ir_equal(p, q, 1, why, sizeof why)) fail("round trip changed the IR", t1, why);
    if (strcmp(t1, coda_program_text(q))) fail("canonical text is not a fixed point", t1, coda_program_text(q));
    if (!coda_program_ir(p)[0]) fail("empty IR listing", text, NULL);
    int n = coda_program_num_args(p);
    for (int i = 0; i < n; i++) {
      coda_arg_info info;
      if (coda_program_arg(p, i, &info) != CODA_OK) fail("coda_program_arg failed", text, NULL);
      int64_t r, c;
      static const int64_t sizes[][4] = {{3, 8, 64, 128}, {130, 6, 16, 32}, {1, 1, 1, 1}};
      for (int k = 0; k < 3; k++) {
        coda_status ss = coda_program_arg_shape(p, info.name, sizes[k][0], sizes[k][1], (int)sizes[k][2],
                                                (int)sizes[k][3], &r, &c);
        if (ss != CODA_OK && ss != CODA_ERR_SHAPE) fail("arg_shape status", text, coda_status_string(ss));
        if (ss == CODA_OK && (r < 0 || c < 0)) fail("negative shape", text, info.name);
      }
    }
    coda_program_destroy(q);
    free(t1);
    coda_program_destroy(p);
  }
  coda_context_destroy(ctx);
  free(text);
  return 0;
}
