/* The fold pass: a row input replaced by its formula over row partials.
 *
 * A row input such as RMSNorm's r = rsqrt(mean(x^2) + eps) is computed by
 * a finisher launch from the rowsum partials of the producer. The folded
 * program reads the partials instead and computes the value itself, once
 * per row. The formula comes as a rule: a program (no outputs needed) whose
 * named values define the folded inputs over its own inputs (row, rowsum,
 * scalar) and parameters, e.g.
 *
 *     param eps = 1e-5
 *     input ss : rowsum f32
 *     input inv_n : scalar f32
 *     r = rsqrt(ss * inv_n + eps)
 *
 * Rule: every row input of the program named like a value of the rule is
 * folded. The rule's computations come first, before the program's; every
 * read of a folded input reads the rule's value instead; a value that is
 * only another name of a rule input (`zdz = zp`) is not computed: the
 * program's reads of the folded input read that input. The rule's inputs
 * that the program lacks take the place of its first folded input, in the
 * rule's order (one it has must agree in kind and dtype); the other folded
 * inputs go; the rule's parameters that the program lacks follow its own.
 * Mode, math, outputs, reductions and finishers are unchanged. See ir.h. */
#include "lang/ir.h"
#include "base/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) return coda_fail(ctx, CODA_ERR_TYPE, __VA_ARGS__)

static int value_reg(const struct coda_program_s *p, const char *name) {
  for (int r = 0; p->reg_names && r < p->nregs; r++)
    if (p->reg_names[r] && !strcmp(p->reg_names[r], name)) return r;
  return -1;
}

/* The instruction of p writing register r, or -1. */
static int def_of(const struct coda_program_s *p, int r) {
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].dst == r || p->instrs[i].dst2 == r) return i;
  return -1;
}

static int reg_used(const struct coda_program_s *p, int r) {
  for (int i = 0; i < p->ninstrs; i++)
    for (int a = 0; a < p->instrs[i].nargs; a++)
      if (p->instrs[i].args[a] == r) return 1;
  return 0;
}

/* Checks the rule and p against each other; fills, for each input i of p,
 * fold_reg[i] (the rule's register defining it, -1 when not folded) and
 * alias[i] (the rule input it is another name of, else -1). */
static coda_status check(coda_context ctx, const struct coda_program_s *p, const struct coda_program_s *f,
                         int *fold_reg, int *alias) {
  if (f->pair_mode) FAIL("fold pass: the rule is in pair mode; a rule defines per-row values, in elem mode");
  for (int i = 0; i < f->ninstrs; i++) {
    const ir_instr *in = &f->instrs[i];
    if (in->code == IR_ACC || in->code == IR_COL)
      FAIL("fold pass: the rule reads %s; a rule defines per-row values from row, rowsum and scalar inputs "
           "and parameters only", in->code == IR_ACC ? "acc" : "col");
    if (in->code == IR_READ) {
      coda_arg_kind k = f->inputs[in->input].kind;
      if (k != CODA_ARG_ROW && !ir_kind_is_partials(k) && k != CODA_ARG_SCALAR)
        FAIL("fold pass: the rule reads '%s', a %s input; a rule reads only row, rowsum and scalar inputs",
             f->inputs[in->input].name, k == CODA_ARG_TILE ? "tile" : "column");
    }
  }
  int nfold = 0;
  for (int i = 0; i < p->ninputs; i++) {
    fold_reg[i] = value_reg(f, p->inputs[i].name);
    alias[i] = -1;
    if (fold_reg[i] < 0) continue;
    if (p->inputs[i].kind != CODA_ARG_ROW)
      FAIL("fold pass: the rule defines '%s', which the program declares as a non-row input; only a row "
           "input can be folded", p->inputs[i].name);
    for (int k = 0; k < p->nreduces; k++)
      if (p->reduces[k].kind == CODA_REDUCE_ROWPICK && p->reduces[k].index_input == i)
        FAIL("fold pass: '%s' holds the column indices of rowpick '%s'; an index input cannot be folded",
             p->inputs[i].name, p->reduces[k].name);
    const int d = def_of(f, fold_reg[i]);
    const ir_instr *in = &f->instrs[d];
    if (in->code == IR_READ && in->lane == CODA_LANE_NONE && !reg_used(f, in->dst)) alias[i] = in->input;
    nfold++;
  }
  if (!nfold) FAIL("fold pass: the rule defines none of the program's row inputs (a rule folds the row "
                   "inputs named like its values)");
  for (int r = 0; f->reg_names && r < f->nregs; r++) {
    const char *nm = f->reg_names[r];
    if (nm && ir_find_input(p, nm) < 0 && (value_reg(p, nm) >= 0 || ir_find_output(p, nm) >= 0 ||
                                           ir_find_reduce(p, nm) >= 0 || ir_find_finish(p, nm) >= 0 ||
                                           ir_find_param(p, nm) >= 0))
      FAIL("fold pass: the rule's value '%s' is already a name of the program", nm);
  }
  for (int j = 0; j < f->ninputs; j++) {
    const ir_input *a = &f->inputs[j];
    const int k = ir_find_input(p, a->name);
    if (k >= 0 && fold_reg[k] < 0 && (p->inputs[k].kind != a->kind || p->inputs[k].dtype != a->dtype))
      FAIL("fold pass: the rule's input '%s' differs in kind or dtype from the program's input of that name",
           a->name);
    if (k < 0 && (value_reg(p, a->name) >= 0 || ir_find_output(p, a->name) >= 0 ||
                  ir_find_reduce(p, a->name) >= 0 || ir_find_finish(p, a->name) >= 0 ||
                  ir_find_param(p, a->name) >= 0))
      FAIL("fold pass: the rule's input '%s' is already a name of the program", a->name);
  }
  for (int j = 0; j < f->nparams; j++)
    if (ir_find_param(p, f->params[j].name) < 0 &&
        (ir_find_input(p, f->params[j].name) >= 0 || value_reg(p, f->params[j].name) >= 0))
      FAIL("fold pass: the rule's parameter '%s' is already a name of the program", f->params[j].name);
  return CODA_OK;
}

static coda_status fold(coda_context ctx, const struct coda_program_s *p, const struct coda_program_s *f,
                        struct coda_program_s *q) {
  int fold_reg[CODA_MAX_INPUTS], alias[CODA_MAX_INPUTS];
  coda_status st = check(ctx, p, f, fold_reg, alias);
  if (st) return st;

  /* Inputs: the rule's new ones in the place of the first folded input. */
  int in_map[CODA_MAX_INPUTS], first = 1, n = 0;
  ir_input inputs[2 * CODA_MAX_INPUTS];
  for (int i = 0; i < p->ninputs; i++) {
    in_map[i] = -1;
    if (fold_reg[i] < 0) {
      in_map[i] = n;
      inputs[n++] = p->inputs[i];
      continue;
    }
    if (!first) continue;
    first = 0;
    for (int j = 0; j < f->ninputs; j++) {
      const int k = ir_find_input(p, f->inputs[j].name);
      if (k >= 0 && fold_reg[k] < 0) continue;
      inputs[n] = f->inputs[j];
      inputs[n].line = inputs[n].col = 0;
      n++;
    }
  }
  if (n > CODA_MAX_INPUTS) FAIL("fold pass: the folded program would have %d inputs (at most %d)", n, CODA_MAX_INPUTS);
  int f_in[CODA_MAX_INPUTS];
  for (int j = 0; j < f->ninputs; j++)
    for (int k = 0; k < n; k++)
      if (!strcmp(inputs[k].name, f->inputs[j].name)) f_in[j] = k;

  /* Parameters: the rule's that the program lacks, after its own. */
  int par_map[CODA_MAX_PARAMS];
  for (int j = 0; j < f->nparams; j++) {
    int k = ir_find_param(q, f->params[j].name);
    if (k < 0) {
      if (q->nparams >= CODA_MAX_PARAMS)
        FAIL("fold pass: the folded program would have more than %d parameters", CODA_MAX_PARAMS);
      k = q->nparams++;
      q->params[k] = f->params[j];
      q->params[k].line = q->params[k].col = 0;
    }
    par_map[j] = k;
  }

  /* Instructions: the rule's (registers after the program's), then the
   * program's without the reads of folded inputs. */
  const int base = p->nregs, nregs = p->nregs + f->nregs;
  int subst[4 * CODA_MAX_INSTRS];
  for (int r = 0; r < nregs; r++) subst[r] = r;
  int ni = 0;
  for (int i = 0; i < f->ninstrs; i++) {
    ir_instr in = f->instrs[i];
    if (in.code == IR_READ && in.lane == CODA_LANE_NONE && !reg_used(f, in.dst)) {
      int skip = 0; /* another name of a rule input: read in place */
      for (int k = 0; k < p->ninputs; k++) skip |= fold_reg[k] == in.dst && alias[k] >= 0;
      if (skip) continue;
    }
    if (ni >= CODA_MAX_INSTRS) FAIL("fold pass: program too large: more than %d instructions", CODA_MAX_INSTRS);
    in.dst += base;
    if (in.dst2 >= 0) in.dst2 += base;
    for (int a = 0; a < in.nargs; a++) in.args[a] += base;
    if (in.code == IR_READ) in.input = f_in[in.input];
    if (in.code == IR_CONST && in.param) in.param = par_map[in.param - 1] + 1;
    in.line = in.col = 0;
    q->instrs[ni++] = in;
  }
  for (int i = 0; i < p->ninstrs; i++) {
    ir_instr in = p->instrs[i];
    if (in.code == IR_READ && fold_reg[in.input] >= 0) {
      if (alias[in.input] < 0) {
        subst[in.dst] = fold_reg[in.input] + base;
        continue;
      }
      in.input = f_in[alias[in.input]];
    } else if (in.code == IR_READ) {
      in.input = in_map[in.input];
    }
    if (ni >= CODA_MAX_INSTRS) FAIL("fold pass: program too large: more than %d instructions", CODA_MAX_INSTRS);
    q->instrs[ni++] = in;
  }
  for (int i = 0; i < ni; i++)
    for (int a = 0; a < q->instrs[i].nargs; a++) q->instrs[i].args[a] = subst[q->instrs[i].args[a]];
  for (int k = 0; k < q->noutputs; k++) {
    q->outputs[k].reg_even = subst[q->outputs[k].reg_even];
    if (q->outputs[k].reg_odd >= 0) q->outputs[k].reg_odd = subst[q->outputs[k].reg_odd];
  }
  for (int k = 0; k < q->nreduces; k++) {
    q->reduces[k].reg = subst[q->reduces[k].reg];
    if (q->reduces[k].kind == CODA_REDUCE_ROWPICK) q->reduces[k].index_input = in_map[q->reduces[k].index_input];
  }
  q->ninstrs = ni;
  memcpy(q->inputs, inputs, (size_t)n * sizeof inputs[0]);
  q->ninputs = n;

  /* Register names: the program's, then the rule's. */
  char **names = calloc((size_t)nregs, sizeof *names);
  if (!names) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in the fold pass");
  for (int r = 0; q->reg_names && r < p->nregs; r++) names[r] = q->reg_names[r];
  free(q->reg_names);
  q->reg_names = names;
  for (int r = 0; f->reg_names && r < f->nregs; r++) {
    if (!f->reg_names[r]) continue;
    const size_t len = strlen(f->reg_names[r]) + 1;
    if (!(names[base + r] = malloc(len))) {
      q->nregs = nregs;
      return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in the fold pass");
    }
    memcpy(names[base + r], f->reg_names[r], len);
  }
  q->nregs = nregs;
  if (ir_compact(q, 0)) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in the fold pass");
  return CODA_OK;
}

coda_status ir_fold(coda_context ctx, const struct coda_program_s *p, const struct coda_program_s *rule,
                    struct coda_program_s **out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "fold pass: out is NULL");
  *out = NULL;
  if (!p || !rule) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "fold pass: program or rule is NULL");
  struct coda_program_s *q = ir_clone(p);
  if (!q) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in the fold pass");
  coda_status st = fold(ctx, p, rule, q);
  if (st == CODA_OK) st = ir_validate(ctx, q);
  if (st == CODA_OK) st = ir_finalize(ctx, q);
  if (st != CODA_OK) {
    coda_program_destroy(q);
    return st;
  }
  *out = q;
  return CODA_OK;
}
