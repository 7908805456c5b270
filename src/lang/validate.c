/* ir_validate: every rule a program must satisfy, whether it came from text
 * or from the builder. The rules are listed in docs/language.md ("Grammar and
 * validation rules"). Messages carry the source position when there is one. */
#include "lang/ir.h"
#include "base/internal.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coda_status fail_at(coda_context ctx, coda_status s, int line, int col,
                           const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static coda_status fail_at(coda_context ctx, coda_status s, int line, int col,
                           const char *fmt, ...) {
  char msg[CODA_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line > 0) return coda_fail(ctx, s, "line %d, column %d: %s", line, col, msg);
  return coda_fail(ctx, s, "%s", msg);
}

#define FAIL(line, col, ...) return fail_at(ctx, CODA_ERR_TYPE, line, col, __VA_ARGS__)

/* A name is [A-Za-z_][A-Za-z0-9_]*, at most CODA_NAME_MAX-1 characters, not
 * reserved. Returns NULL if fine, else what is wrong. */
static const char *name_problem(const char *s, size_t cap) {
  size_t n = 0;
  while (n < cap && s[n]) n++;
  if (n == 0) return "is empty";
  if (n >= cap) return "is longer than 31 characters";
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return "does not start with a letter or '_'";
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return "has a character other than letters, digits and '_'";
  if (ir_is_reserved(s)) return "is a reserved word";
  return NULL;
}

static int is16(coda_dtype t) { return t == CODA_BF16 || t == CODA_F16; }
static int dtype_ok(coda_dtype t) { return (int)t >= CODA_BF16 && (int)t <= CODA_I32; }
static int width_ok(coda_width w) { return (int)w >= CODA_WIDTH_FULL && (int)w <= CODA_WIDTH_HALF; }

typedef struct { const char *name; const char *what; int line, col; } named;

static coda_status check_names(coda_context ctx, const struct coda_program_s *p) {
  int total = p->ninputs + p->noutputs + p->nreduces + p->nfinishes + p->nparams + 2 * p->ninstrs;
  named *all = malloc((size_t)(total > 0 ? total : 1) * sizeof *all);
  if (!all) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory validating a program");
  int n = 0;
  for (int i = 0; i < p->ninputs; i++)
    all[n++] = (named){p->inputs[i].name, "input", p->inputs[i].line, p->inputs[i].col};
  for (int i = 0; i < p->noutputs; i++)
    all[n++] = (named){p->outputs[i].name, "output", p->outputs[i].line, p->outputs[i].col};
  for (int i = 0; i < p->nreduces; i++)
    all[n++] = (named){p->reduces[i].name, "reduction", p->reduces[i].line, p->reduces[i].col};
  for (int i = 0; i < p->nfinishes; i++)
    all[n++] = (named){p->finishes[i].name, "finisher", p->finishes[i].line, p->finishes[i].col};
  for (int i = 0; i < p->nparams; i++)
    all[n++] = (named){p->params[i].name, "parameter", p->params[i].line, p->params[i].col};
  int fixed = n;
  if (p->reg_names) { /* position of a named value: its defining instruction */
    for (int i = 0; i < p->ninstrs; i++) {
      const ir_instr *in = &p->instrs[i];
      int regs[2] = {in->dst, in->dst2};
      for (int k = 0; k < 2; k++)
        if (regs[k] >= 0 && regs[k] < p->nregs && p->reg_names[regs[k]])
          all[n++] = (named){p->reg_names[regs[k]], "value", in->line, in->col};
    }
  }
  coda_status st = CODA_OK;
  for (int i = 0; i < n && !st; i++) {
    size_t cap = i < fixed ? CODA_NAME_MAX : strlen(all[i].name) + 1;
    if (i >= fixed && cap > CODA_NAME_MAX) cap = CODA_NAME_MAX;
    const char *why = name_problem(all[i].name, cap);
    if (why) {
      st = fail_at(ctx, CODA_ERR_TYPE, all[i].line, all[i].col, "%s name '%.40s' %s", all[i].what,
                   all[i].name, why);
      break;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(all[i].name, all[j].name)) {
        st = fail_at(ctx, CODA_ERR_TYPE, all[i].line, all[i].col,
                     "'%s' is defined twice (as %s and as %s)", all[i].name, all[j].what, all[i].what);
        break;
      }
  }
  free(all);
  return st;
}

static const char *lane_hint(int pair_mode) { return pair_mode ? " in pair mode" : " here"; }

/* Inputs, outputs and parameters: kinds, dtypes, widths against the mode
 * and the precision (f64 only in exact mode). */
static coda_status check_declarations(coda_context ctx, const struct coda_program_s *p, int exact) {
  for (int i = 0; i < p->ninputs; i++) {
    const ir_input *in = &p->inputs[i];
    int L = in->line, C = in->col;
    char words[96];
    if (!ir_input_kind_known(in->kind))
      FAIL(L, C, "input '%.31s': kind must be %s", in->name, ir_kind_words('i', words, sizeof words));
    if (!dtype_ok(in->dtype)) FAIL(L, C, "input '%.31s': unknown dtype %d", in->name, (int)in->dtype);
    if (!width_ok(in->width)) FAIL(L, C, "input '%.31s': unknown width %d", in->name, (int)in->width);
    if (in->dtype == CODA_F64 && !exact)
      FAIL(L, C, "input '%.31s': f64 needs exact mode (a context with fp64 precision)", in->name);
    if (in->dtype == CODA_I32 && in->kind == CODA_ARG_TILE)
      FAIL(L, C, "input '%.31s': i32 is only allowed for row, col and scalar inputs", in->name);
    if (in->width != CODA_WIDTH_FULL && in->kind != CODA_ARG_TILE)
      FAIL(L, C, "input '%.31s': x2 and half apply to tile inputs only", in->name);
    /* the partials a reduction writes: fp32 (f64 in exact mode, checked above) */
    if (ir_kind_is_partials(in->kind) && in->dtype != CODA_F32 && in->dtype != CODA_F64)
      FAIL(L, C, "input '%.31s': a %s input holds fp32 partials: declare it f32 (f64 in exact mode), "
           "found %s", in->name, ir_input_kind_word(in->kind), coda_dtype_name(in->dtype));
    if (in->width == CODA_WIDTH_X2 && p->pair_mode)
      FAIL(L, C, "input '%.31s': x2 is only allowed in elem mode", in->name);
    if (in->width == CODA_WIDTH_X2 && !is16(in->dtype))
      FAIL(L, C, "input '%.31s': x2 needs a 16-bit dtype (bf16 or f16), found %s", in->name,
           coda_dtype_name(in->dtype));
    if (in->width == CODA_WIDTH_HALF && !p->pair_mode)
      FAIL(L, C, "input '%.31s': half is only allowed in pair mode", in->name);
  }
  for (int i = 0; i < p->noutputs; i++) {
    const ir_output *o = &p->outputs[i];
    int L = o->line, C = o->col;
    if (!dtype_ok(o->dtype)) FAIL(L, C, "output '%.31s': unknown dtype %d", o->name, (int)o->dtype);
    if (o->dtype == CODA_I32) FAIL(L, C, "output '%.31s': outputs cannot be i32", o->name);
    if (o->dtype == CODA_F64 && !exact)
      FAIL(L, C, "output '%.31s': f64 needs exact mode (a context with fp64 precision)", o->name);
    if (!width_ok(o->width)) FAIL(L, C, "output '%.31s': unknown width %d", o->name, (int)o->width);
    if (o->width == CODA_WIDTH_X2 && p->pair_mode)
      FAIL(L, C, "output '%.31s': x2 is only allowed in elem mode", o->name);
    if (o->width == CODA_WIDTH_X2 && !is16(o->dtype))
      FAIL(L, C, "output '%.31s': x2 needs a 16-bit dtype (bf16 or f16), found %s", o->name,
           coda_dtype_name(o->dtype));
    if (o->width == CODA_WIDTH_HALF && !p->pair_mode)
      FAIL(L, C, "output '%.31s': half is only allowed in pair mode", o->name);
    if (o->accumulate != 0 && o->accumulate != 1)
      FAIL(L, C, "output '%.31s': accumulate must be 0 or 1", o->name);
  }
  if (p->nparams < 0 || p->nparams > CODA_MAX_PARAMS) FAIL(0, 0, "too many parameters (at most %d)", CODA_MAX_PARAMS);
  for (int i = 0; i < p->nparams; i++) {
    const ir_param *pm = &p->params[i];
    if (pm->has_value && !isfinite(pm->value))
      FAIL(pm->line, pm->col, "parameter '%.31s': value %g is not finite", pm->name, pm->value);
  }
  return CODA_OK;
}

/* Instructions: registers are written once, in order, before any use;
 * operands, lanes and arities. */
static coda_status check_instrs(coda_context ctx, const struct coda_program_s *p) {
  int next = 0;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    int L = in->line, C = in->col;
    if (in->dst != next)
      FAIL(L, C, "instruction %d writes register %d, expected %d (each register is written once, in order)",
           i, in->dst, next);
    next++;
    switch (in->code) {
    case IR_CONST:
      if (!isfinite(in->imm)) FAIL(L, C, "constant is not finite");
      if (in->param < 0 || in->param > p->nparams) FAIL(L, C, "constant names an unknown parameter");
      break;
    case IR_ACC:
      if (p->pair_mode && in->lane != CODA_LANE_EVEN && in->lane != CODA_LANE_ODD)
        FAIL(L, C, "acc holds two values per point in pair mode: read it as acc.even or acc.odd");
      if (!p->pair_mode && in->lane != CODA_LANE_NONE)
        FAIL(L, C, "acc holds one value per point in elem mode: read it as acc, without a lane");
      break;
    case IR_ROW:
    case IR_COL:
      if (in->lane != CODA_LANE_NONE) FAIL(L, C, "row and col take no lane");
      break;
    case IR_READ: {
      if (in->input < 0 || in->input >= p->ninputs) FAIL(L, C, "read of unknown input %d", in->input);
      const char *nm = p->inputs[in->input].name;
      if ((int)in->lane < CODA_LANE_NONE || (int)in->lane > CODA_LANE_ODD) FAIL(L, C, "bad lane");
      if (ir_input_is_pair(p, in->input) && in->lane == CODA_LANE_NONE)
        FAIL(L, C, "input '%s' holds two values per point%s: read it as %s.even or %s.odd", nm,
             lane_hint(p->pair_mode), nm, nm);
      if (!ir_input_is_pair(p, in->input) && in->lane != CODA_LANE_NONE)
        FAIL(L, C, "input '%s' holds one value per point%s: read it as %s, without a lane", nm,
             lane_hint(p->pair_mode), nm);
      break;
    }
    case IR_STAT:
      if (in->input < 0 || in->input >= p->nfinishes || p->finishes[in->input].reduce < 0 ||
          p->finishes[in->input].reduce >= p->nreduces)
        FAIL(L, C, "read of unknown finisher %d", in->input);
      if (in->lane != CODA_LANE_NONE) FAIL(L, C, "a finished statistic takes no lane");
      if (ir_stat_unreadable(p, in->input))
        FAIL(L, C, "'%s' cannot be read: %s", p->finishes[in->input].name, ir_stat_unreadable(p, in->input));
      break;
    case IR_MATH: {
      int ar = ir_op_arity(in->op);
      if (ar == 0) FAIL(L, C, "instruction %d: unknown op %d", i, (int)in->op);
      if (in->nargs != ar)
        FAIL(L, C, "%s takes %d operand%s, found %d", ir_op_name(in->op), ar, ar == 1 ? "" : "s", in->nargs);
      for (int k = 0; k < ar; k++)
        if (in->args[k] < 0 || in->args[k] >= in->dst)
          FAIL(L, C, "instruction %d: operand %d reads register %d before it is written", i, k, in->args[k]);
      if (ir_op_results(in->op) == 2) {
        if (in->dst2 != next)
          FAIL(L, C, "instruction %d writes second register %d, expected %d", i, in->dst2, next);
        next++;
      }
      break;
    }
    default:
      FAIL(L, C, "instruction %d: unknown code %d", i, (int)in->code);
    }
    if (!(in->code == IR_MATH && ir_op_results(in->op) == 2) && in->dst2 != -1)
      FAIL(L, C, "instruction %d has a second result but %s gives one", i,
           in->code == IR_MATH ? ir_op_name(in->op) : "it");
  }
  if (next != p->nregs) FAIL(0, 0, "register count %d, but instructions write %d", p->nregs, next);
  return CODA_OK;
}

/* Integer values: row, col, i32 inputs, integer literals (|v| <= 2^24)
 * and what + - * min max abs select idiv imod make of integers; idiv and
 * imod take nothing else (a floating value has no conversion to an
 * integer; an integer is used as a number anywhere) */
static coda_status check_integers(coda_context ctx, const struct coda_program_s *p) {
  unsigned char isint[2 * CODA_MAX_INSTRS];
  memset(isint, 0, sizeof isint);
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    int v = 0;
    switch (in->code) {
    case IR_CONST: v = in->imm == floor(in->imm) && fabs(in->imm) <= 16777216.0; break;
    case IR_ROW:
    case IR_COL: v = 1; break;
    case IR_READ: v = p->inputs[in->input].dtype == CODA_I32; break;
    case IR_MATH: {
      int all = 1;
      for (int k = 0; k < in->nargs; k++) all &= isint[in->args[k]];
      switch (in->op) {
      case CODA_OP_ADD: case CODA_OP_SUB: case CODA_OP_MUL: case CODA_OP_NEG:
      case CODA_OP_MIN: case CODA_OP_MAX: case CODA_OP_ABS: v = all; break;
      case CODA_OP_SELECT: v = isint[in->args[1]] && isint[in->args[2]]; break;
      case CODA_OP_IDIV:
      case CODA_OP_IMOD:
        for (int k = 0; k < 2; k++)
          if (!isint[in->args[k]]) {
            const char *nm = p->reg_names ? p->reg_names[in->args[k]] : NULL;
            FAIL(in->line, in->col,
                 "%s takes integer operands, but its %s operand%s%s%s is not an integer value "
                 "(integers: row, col, seg(S), segpos(S), i32 inputs, integer literals, and "
                 "+ - * min max abs select idiv imod of integers; a floating value has no "
                 "conversion to an integer)",
                 ir_op_name(in->op), k ? "second" : "first", nm ? " '" : "", nm ? nm : "",
                 nm ? "'" : "");
          }
        v = 1;
        break;
      default: break;
      }
    } break;
    default: break;
    }
    isint[in->dst] = (unsigned char)v;
    if (in->dst2 >= 0) isint[in->dst2] = 0;
  }
  return CODA_OK;
}

/* Every output stored once, as one value or a pair as its mode needs. */
static coda_status check_stores(coda_context ctx, const struct coda_program_s *p, const char *mode) {
  for (int i = 0; i < p->noutputs; i++) {
    const ir_output *o = &p->outputs[i];
    int L = o->store_line ? o->store_line : o->line, C = o->store_line ? o->store_col : o->col;
    if (o->reg_even < 0) FAIL(o->line, o->col, "output '%s' is never stored", o->name);
    if (o->reg_even >= p->nregs || o->reg_odd >= p->nregs)
      FAIL(L, C, "output '%s' stores an unknown register", o->name);
    int pair = ir_output_is_pair(p, i);
    if (pair && o->reg_odd < 0)
      FAIL(L, C, "output '%s' holds two values per point in %s mode: store it with pack(even, odd)", o->name, mode);
    if (!pair && o->reg_odd >= 0)
      FAIL(L, C, "output '%s' holds one value per point in %s mode: store it without pack()", o->name, mode);
  }
  return CODA_OK;
}

/* Reductions: kinds against the mode, rowpick's index, segments. */
static coda_status check_reduces(coda_context ctx, const struct coda_program_s *p) {
  for (int i = 0; i < p->nreduces; i++) {
    const ir_reduce *r = &p->reduces[i];
    int L = r->line, C = r->col;
    if (!ir_reduce_kind_known(r->kind)) FAIL(L, C, "reduction '%s': unknown kind %d", r->name, (int)r->kind);
    if (r->reg < 0 || r->reg >= p->nregs) FAIL(L, C, "reduction '%s' reduces an unknown register", r->name);
    if (ir_reduce_is_col(r->kind) && p->pair_mode)
      FAIL(L, C, "reduction '%s': %s is only allowed in elem mode", r->name, ir_reduce_kind_name(r->kind));
    if (r->kind == CODA_REDUCE_ROWPICK) {
      if (p->pair_mode) FAIL(L, C, "reduction '%s': rowpick is only allowed in elem mode", r->name);
      if (r->index_input < 0 || r->index_input >= p->ninputs)
        FAIL(L, C, "reduction '%s': rowpick needs an index input", r->name);
      const ir_input *ix = &p->inputs[r->index_input];
      if (ix->kind != CODA_ARG_ROW || ix->dtype != CODA_I32)
        FAIL(L, C, "reduction '%s': the rowpick index '%s' must be a row i32 input", r->name, ix->name);
    }
    if (ir_reduce_is_segmented(r->kind)) {
      if (r->segment <= 0) FAIL(L, C, "reduction '%s': segment must be > 0, found %d", r->name, r->segment);
      if (p->pair_mode && r->segment % 2)
        FAIL(L, C, "reduction '%s': segment must be even in pair mode, found %d", r->name, r->segment);
    }
  }
  return CODA_OK;
}

/* Finishers: each over a partial of its kind, eps, rstd's second partial. */
static coda_status check_finishes(coda_context ctx, const struct coda_program_s *p) {
  for (int i = 0; i < p->nfinishes; i++) {
    const ir_finish *f = &p->finishes[i];
    int L = f->line, C = f->col;
    const char *fk = ir_finish_kind_name(f->kind);
    if (!ir_finish_kind_known(f->kind)) FAIL(L, C, "finisher '%s': unknown kind %d", f->name, (int)f->kind);
    if (f->reduce < 0 || f->reduce >= p->nreduces) FAIL(L, C, "finisher '%s': unknown partial", f->name);
    const ir_reduce *r = &p->reduces[f->reduce];
    coda_reduce_kind rk = r->kind;
    if (ir_finish_class(f->kind) != ir_reduce_class(rk))
      FAIL(L, C, "finisher '%s': %s needs %s, but '%s' is %s", f->name, fk, ir_finish_needs(f->kind), r->name,
           ir_reduce_kind_name(rk));
    if (rk == CODA_REDUCE_TOTAL && f->kind != CODA_FINISH_SUM)
      FAIL(L, C, "finisher '%s': a total is finished by sum (the one value over the whole domain), not %s",
           f->name, fk);
    if (f->eps_param < 0 || f->eps_param > p->nparams || (f->eps_param && f->kind != CODA_FINISH_RSTD))
      FAIL(L, C, "finisher '%s': eps names an unknown parameter", f->name);
    if (f->kind == CODA_FINISH_RSTD && (!isfinite(f->eps) || f->eps < 0)) {
      if (f->eps_param)
        FAIL(L, C, "finisher '%s': eps must be finite and >= 0, and parameter '%s' is %g", f->name,
             p->params[f->eps_param - 1].name, f->eps);
      FAIL(L, C, "finisher '%s': eps must be finite and >= 0", f->name);
    }
    if (f->reduce2 != -1) {
      if (f->kind != CODA_FINISH_RSTD) FAIL(L, C, "finisher '%s': only rstd takes a second partial", f->name);
      if (f->reduce2 < 0 || f->reduce2 >= p->nreduces)
        FAIL(L, C, "finisher '%s': unknown second partial", f->name);
      const ir_reduce *q = &p->reduces[f->reduce2];
      int same = (rk == CODA_REDUCE_ROWSUM && q->kind == CODA_REDUCE_ROWSUM) ||
                 (rk == CODA_REDUCE_SEGSUM && q->kind == CODA_REDUCE_SEGSUM && q->segment == r->segment);
      if (!same)
        FAIL(L, C, "finisher '%s': centered rstd needs two rowsum partials (or two segmented ones of the same segment), "
             "found %s and %s", f->name, ir_reduce_kind_name(rk), ir_reduce_kind_name(q->kind));
    }
  }
  return CODA_OK;
}

coda_status ir_check_precision(coda_context ctx, const struct coda_program_s *p) {
  return check_declarations(ctx, p, ctx && ctx->opts.precision == CODA_PRECISION_F64);
}

coda_status ir_validate(coda_context ctx, struct coda_program_s *p) {
  return ir_validate_as(ctx, p, ctx && ctx->opts.precision == CODA_PRECISION_F64);
}

coda_status ir_validate_as(coda_context ctx, struct coda_program_s *p, int exact) {
  if (!p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "program is NULL");
  if (p->pair_mode != 0 && p->pair_mode != 1) FAIL(0, 0, "mode must be elem (0) or pair (1)");
  if (!p->pair_mode && p->pair_split) FAIL(0, 0, "half-split pairs need pair mode");
  if (p->pair_split != 0 && p->pair_split != CODA_PAIR_SPLIT_ROW && (p->pair_split < 2 || p->pair_split % 2))
    FAIL(0, 0, "the split segment must be even and at least 2, found %d", p->pair_split);
  if (p->ninstrs < 0 || p->ninstrs > CODA_MAX_INSTRS)
    FAIL(0, 0, "too many instructions (%d, at most %d)", p->ninstrs, CODA_MAX_INSTRS);
  if (p->ninputs < 0 || p->ninputs > CODA_MAX_INPUTS)
    FAIL(0, 0, "too many inputs (%d, at most %d)", p->ninputs, CODA_MAX_INPUTS);
  if (p->noutputs < 0 || p->noutputs > CODA_MAX_OUTPUTS)
    FAIL(0, 0, "too many outputs (%d, at most %d)", p->noutputs, CODA_MAX_OUTPUTS);
  if (p->nreduces < 0 || p->nreduces > CODA_MAX_REDUCES)
    FAIL(0, 0, "too many reductions (%d, at most %d)", p->nreduces, CODA_MAX_REDUCES);
  if (p->nfinishes < 0 || p->nfinishes > CODA_MAX_FINISHES)
    FAIL(0, 0, "too many finishers (%d, at most %d)", p->nfinishes, CODA_MAX_FINISHES);
  if (p->nregs < 0 || p->nregs > 2 * CODA_MAX_INSTRS) FAIL(0, 0, "bad register count %d", p->nregs);
  if (p->nregs > 0 && !p->reg_names) FAIL(0, 0, "register names are missing");
  const char *mode = p->pair_mode ? "pair" : "elem";

  coda_status st;
  if ((st = check_declarations(ctx, p, exact))) return st;
  if ((st = check_names(ctx, p))) return st;
  if ((st = check_instrs(ctx, p))) return st;
  if ((st = check_integers(ctx, p))) return st;
  if ((st = check_stores(ctx, p, mode))) return st;
  if ((st = check_reduces(ctx, p))) return st;
  if ((st = check_finishes(ctx, p))) return st;
  ir_signature_build(p); /* the arguments, resolved once for every run */
  return CODA_OK;
}
