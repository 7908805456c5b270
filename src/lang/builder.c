/* The C builder API: the same IR as the text language, built call by call.
 * Value handles are register numbers, input/output handles are indices;
 * registers are numbered in call order exactly as the parser numbers them
 * in emission order, so equal programs give equal IR. The first error is
 * kept and reported again by coda_builder_finish. */
#include "lang/ir.h"
#include "base/internal.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct coda_builder_s {
  coda_context ctx;
  struct coda_program_s *p; /* reg_names has room for every register */
  coda_status err;
  char msg[CODA_ERRMSG_LEN];
};

static coda_status bfail(coda_builder b, coda_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static coda_status bfail(coda_builder b, coda_status s, const char *fmt, ...) {
  if (!b->err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    b->err = s;
  }
  return coda_fail(b->ctx, b->err, "%s", b->msg);
}

coda_status coda_builder_create(coda_context ctx, int pair_mode, coda_builder *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_builder_create: out is NULL");
  *out = NULL;
  if (pair_mode != 0 && pair_mode != 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_builder_create: pair_mode must be 0 or 1");
  coda_builder b = calloc(1, sizeof *b);
  struct coda_program_s *p = ir_program_alloc();
  char **names = calloc(2 * CODA_MAX_INSTRS, sizeof *names);
  if (!b || !p || !names) {
    free(b);
    free(p);
    free(names);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory creating a builder");
  }
  p->pair_mode = pair_mode;
  p->reg_names = names;
  b->ctx = ctx;
  b->p = p;
  *out = b;
  return CODA_OK;
}

coda_status coda_builder_pair_split(coda_builder b, int segment) {
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  if (!b->p->pair_mode)
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_builder_pair_split: the builder is in elem mode");
  if (segment != 0 && segment != CODA_PAIR_SPLIT_ROW && (segment < 2 || segment % 2))
    return bfail(b, CODA_ERR_INVALID_ARGUMENT,
                 "coda_builder_pair_split: segment must be even and >= 2 (or CODA_PAIR_SPLIT_ROW), found %d",
                 segment);
  b->p->pair_split = segment;
  return CODA_OK;
}

coda_status coda_builder_math(coda_builder b, coda_math math) {
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  if (math != CODA_MATH_EXACT && math != CODA_MATH_FAST)
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_builder_math: math must be CODA_MATH_EXACT or CODA_MATH_FAST, found %d",
                 (int)math);
  b->p->math_fast = math == CODA_MATH_FAST;
  return CODA_OK;
}

void coda_builder_destroy(coda_builder b) {
  if (!b) return;
  for (int i = 0; i < 2 * CODA_MAX_INSTRS; i++) free(b->p->reg_names[i]);
  free(b->p->reg_names);
  b->p->reg_names = NULL;
  b->p->nregs = 0;
  coda_program_destroy(b->p);
  free(b);
}

/* A new name must be well formed, not reserved and not yet used. */
static int bad_name(coda_builder b, const char *name, const char *what) {
  const struct coda_program_s *p = b->p;
  if (!name) return bfail(b, CODA_ERR_INVALID_ARGUMENT, "%s name is NULL", what), 1;
  size_t n = 0;
  while (n < CODA_NAME_MAX && name[n]) n++;
  if (n == 0 || n >= CODA_NAME_MAX)
    return bfail(b, CODA_ERR_TYPE, "%s name '%.40s' must have 1 to %d characters", what, name, CODA_NAME_MAX - 1), 1;
  int ok = isalpha((unsigned char)name[0]) || name[0] == '_';
  for (size_t i = 1; i < n && ok; i++) ok = isalnum((unsigned char)name[i]) || name[i] == '_';
  if (!ok) return bfail(b, CODA_ERR_TYPE, "%s name '%s' is not [A-Za-z_][A-Za-z0-9_]*", what, name), 1;
  if (ir_is_reserved(name)) return bfail(b, CODA_ERR_TYPE, "'%s' is a reserved word and cannot be a name", name), 1;
  if (name[0] == '_' && name[1] == '_')
    return bfail(b, CODA_ERR_TYPE, "'%s': names beginning with '__' are reserved (the temporaries of a "
                 "program's passes)", name), 1;
  int used = ir_find_input(p, name) >= 0 || ir_find_output(p, name) >= 0 || ir_find_reduce(p, name) >= 0 ||
             ir_find_finish(p, name) >= 0;
  for (int r = 0; r < p->nregs && !used; r++) used = p->reg_names[r] && !strcmp(p->reg_names[r], name);
  if (used) return bfail(b, CODA_ERR_TYPE, "'%s' is already defined", name), 1;
  return 0;
}

static int bad_value(coda_builder b, coda_value v, const char *what) {
  if (v < 0 || v >= b->p->nregs) return bfail(b, CODA_ERR_INVALID_ARGUMENT, "%s: %d is not a value handle", what, v), 1;
  return 0;
}

coda_value coda_b_input(coda_builder b, const char *name, coda_arg_kind kind, coda_dtype dtype, coda_width width) {
  if (!b || b->err) return -1;
  struct coda_program_s *p = b->p;
  if (bad_name(b, name, "input")) return -1;
  if (p->ninputs >= CODA_MAX_INPUTS) return bfail(b, CODA_ERR_TYPE, "too many inputs (at most %d)", CODA_MAX_INPUTS), -1;
  ir_input *in = &p->inputs[p->ninputs];
  memset(in, 0, sizeof *in);
  snprintf(in->name, sizeof in->name, "%s", name);
  in->kind = kind;
  in->dtype = dtype;
  in->width = width;
  return p->ninputs++;
}

coda_value coda_b_output(coda_builder b, const char *name, coda_dtype dtype, coda_width width, int accumulate) {
  if (!b || b->err) return -1;
  struct coda_program_s *p = b->p;
  if (bad_name(b, name, "output")) return -1;
  if (p->noutputs >= CODA_MAX_OUTPUTS) return bfail(b, CODA_ERR_TYPE, "too many outputs (at most %d)", CODA_MAX_OUTPUTS), -1;
  ir_output *o = &p->outputs[p->noutputs];
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", name);
  o->dtype = dtype;
  o->width = width;
  o->accumulate = accumulate;
  o->reg_even = o->reg_odd = -1;
  return p->noutputs++;
}

static ir_instr *emit(coda_builder b, ir_code code) {
  struct coda_program_s *p = b->p;
  if (b->err) return NULL;
  if (p->ninstrs >= CODA_MAX_INSTRS) {
    bfail(b, CODA_ERR_TYPE, "program too large: more than %d instructions", CODA_MAX_INSTRS);
    return NULL;
  }
  ir_instr *in = &p->instrs[p->ninstrs++];
  memset(in, 0, sizeof *in);
  in->code = code;
  in->input = -1;
  for (int k = 0; k < CODA_MAX_ARGS; k++) in->args[k] = -1;
  in->dst = p->nregs++;
  in->dst2 = -1;
  return in;
}

coda_value coda_b_acc(coda_builder b, coda_lane lane) {
  if (!b) return -1;
  ir_instr *in = emit(b, IR_ACC);
  if (!in) return -1;
  in->lane = lane;
  return in->dst;
}

coda_value coda_b_read(coda_builder b, coda_value input, coda_lane lane) {
  if (!b || b->err) return -1;
  if (input < 0 || input >= b->p->ninputs)
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_b_read: %d is not an input handle", input), -1;
  ir_instr *in = emit(b, IR_READ);
  if (!in) return -1;
  in->input = input;
  in->lane = lane;
  return in->dst;
}

coda_value coda_b_row_index(coda_builder b) {
  if (!b) return -1;
  ir_instr *in = emit(b, IR_ROW);
  return in ? in->dst : -1;
}

coda_value coda_b_col_index(coda_builder b) {
  if (!b) return -1;
  ir_instr *in = emit(b, IR_COL);
  return in ? in->dst : -1;
}

coda_value coda_b_const(coda_builder b, double v) {
  if (!b || b->err) return -1;
  if (!isfinite(v)) return bfail(b, CODA_ERR_TYPE, "coda_b_const: constant is not finite"), -1;
  ir_instr *in = emit(b, IR_CONST);
  if (!in) return -1;
  in->imm = v;
  return in->dst;
}

coda_value coda_b_op(coda_builder b, coda_op op, int nargs, const coda_value *args, coda_value *second) {
  if (second) *second = -1;
  if (!b || b->err) return -1;
  int arity = ir_op_arity(op);
  if (arity == 0) return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_b_op: unknown op %d", (int)op), -1;
  if (nargs != arity)
    return bfail(b, CODA_ERR_TYPE, "%s takes %d operand%s, given %d", ir_op_name(op), arity, arity == 1 ? "" : "s",
                 nargs), -1;
  if (!args) return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_b_op: args is NULL"), -1;
  for (int k = 0; k < nargs; k++)
    if (bad_value(b, args[k], ir_op_name(op))) return -1;
  ir_instr *in = emit(b, IR_MATH);
  if (!in) return -1;
  in->op = op;
  in->nargs = nargs;
  for (int k = 0; k < nargs; k++) in->args[k] = args[k];
  if (ir_op_results(op) == 2) {
    in->dst2 = b->p->nregs++;
    if (second) *second = in->dst2;
  }
  return in->dst;
}

coda_status coda_b_name(coda_builder b, coda_value v, const char *name) {
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  if (bad_value(b, v, "coda_b_name") || bad_name(b, name, "value")) return b->err;
  if (b->p->reg_names[v]) return bfail(b, CODA_ERR_TYPE, "value %d is already named '%s'", v, b->p->reg_names[v]);
  size_t n = strlen(name) + 1;
  char *s = malloc(n);
  if (!s) return bfail(b, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(s, name, n);
  b->p->reg_names[v] = s;
  return CODA_OK;
}

static coda_status store(coda_builder b, coda_value output, coda_value even, coda_value odd, int pair) {
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  if (output < 0 || output >= b->p->noutputs)
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "store: %d is not an output handle", output);
  ir_output *o = &b->p->outputs[output];
  if (o->reg_even >= 0) return bfail(b, CODA_ERR_TYPE, "output '%s' is already stored", o->name);
  if (bad_value(b, even, "store") || (pair && bad_value(b, odd, "store"))) return b->err;
  o->reg_even = even;
  o->reg_odd = pair ? odd : -1;
  return CODA_OK;
}

coda_status coda_b_store(coda_builder b, coda_value output, coda_value v) { return store(b, output, v, -1, 0); }

coda_status coda_b_store_pair(coda_builder b, coda_value output, coda_value even, coda_value odd) {
  return store(b, output, even, odd, 1);
}

coda_status coda_b_reduce(coda_builder b, const char *name, coda_reduce_kind kind, coda_value v,
                          coda_value index_input, int segment) {
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  struct coda_program_s *p = b->p;
  if (bad_name(b, name, "reduction") || bad_value(b, v, "coda_b_reduce")) return b->err;
  if (!ir_reduce_kind_known(kind))
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_b_reduce: unknown kind %d", (int)kind);
  if (p->nreduces >= CODA_MAX_REDUCES) return bfail(b, CODA_ERR_TYPE, "too many reductions (at most %d)", CODA_MAX_REDUCES);
  if (kind == CODA_REDUCE_ROWPICK && (index_input < 0 || index_input >= p->ninputs))
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "rowpick '%s': %d is not an input handle", name, index_input);
  ir_reduce *r = &p->reduces[p->nreduces++];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  r->kind = kind;
  r->reg = v;
  r->index_input = kind == CODA_REDUCE_ROWPICK ? index_input : -1;
  r->segment = ir_reduce_is_segmented(kind) ? segment : 0;
  return CODA_OK;
}

coda_status coda_b_finish(coda_builder b, const char *name, coda_finish_kind kind, const char *partial,
                          const char *partial2, double eps) {
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  struct coda_program_s *p = b->p;
  if (bad_name(b, name, "finisher")) return b->err;
  if (!ir_finish_kind_known(kind))
    return bfail(b, CODA_ERR_INVALID_ARGUMENT, "coda_b_finish: unknown kind %d", (int)kind);
  if (p->nfinishes >= CODA_MAX_FINISHES) return bfail(b, CODA_ERR_TYPE, "too many finishers (at most %d)", CODA_MAX_FINISHES);
  int r = partial ? ir_find_reduce(p, partial) : -1;
  if (r < 0) return bfail(b, CODA_ERR_TYPE, "finisher '%s': '%.40s' is not a reduction", name, partial ? partial : "(null)");
  int r2 = -1;
  if (partial2) {
    if (kind != CODA_FINISH_RSTD) return bfail(b, CODA_ERR_TYPE, "finisher '%s': only rstd takes a second partial", name);
    if ((r2 = ir_find_reduce(p, partial2)) < 0)
      return bfail(b, CODA_ERR_TYPE, "finisher '%s': '%.40s' is not a reduction", name, partial2);
  }
  ir_finish *f = &p->finishes[p->nfinishes++];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  f->kind = kind;
  f->reduce = r;
  f->reduce2 = r2;
  f->eps = kind == CODA_FINISH_RSTD && eps != 0 ? eps : 0; /* -0 becomes 0: the text has no -0 eps */
  return CODA_OK;
}

coda_status coda_builder_finish(coda_builder b, coda_program *out) {
  if (!out) return b ? coda_fail(b->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_builder_finish: out is NULL")
                     : CODA_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!b) return CODA_ERR_INVALID_ARGUMENT;
  if (b->err) return coda_fail(b->ctx, b->err, "%s", b->msg);
  struct coda_program_s *p = ir_program_alloc();
  if (!p) return coda_fail(b->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(p, b->p, sizeof *p);
  p->reg_names = NULL;
  p->text = p->ir_dump = NULL;
  coda_status st = CODA_OK;
  if (p->nregs > 0) {
    p->reg_names = calloc((size_t)p->nregs, sizeof *p->reg_names);
    if (!p->reg_names) st = CODA_ERR_OUT_OF_MEMORY;
    for (int r = 0; r < p->nregs && !st; r++) {
      const char *s = b->p->reg_names[r];
      if (!s) continue;
      p->reg_names[r] = malloc(strlen(s) + 1);
      if (!p->reg_names[r]) st = CODA_ERR_OUT_OF_MEMORY;
      else strcpy(p->reg_names[r], s);
    }
    if (st) coda_fail(b->ctx, st, "out of memory");
  }
  if (!st) st = ir_validate(b->ctx, p);
  if (!st) st = ir_finalize(b->ctx, p);
  if (st) {
    coda_program_destroy(p);
    return st;
  }
  coda_clear_error(b->ctx);
  *out = p;
  return CODA_OK;
}
