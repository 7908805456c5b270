/* The epilogue code generator's instructions: epi_emit_instr prints one IR
 * instruction as a line of fp32 CUDA (the accumulator, the builtins, an
 * input read through its argument's emitter, and the primitive ops from
 * the CUDA column of lang/ops.def), and the row-invariant hoisting decides which instructions run
 * once per fragment row before the loops (epi_plan_hoist) and prints them
 * there (epi_emit_hoist_prelude) and the rest per point
 * (epi_emit_point_instrs). */
#include "backends/cuda/epi_emit.h"

#include <math.h>
#include <string.h>

/* An fp32 literal that is exactly (float)v (what the CPU uses). */
static void emit_const(coda_strbuf *b, double v) {
  float f = (float)v;
  if (isnan(f)) coda_sb_printf(b, "__int_as_float(0x7fc00000)");
  else if (isinf(f)) coda_sb_printf(b, "%s__int_as_float(0x7f800000)", f < 0 ? "-" : "");
  else coda_sb_printf(b, "%af", (double)f);
}


void epi_emit_instr(gen *g, const ir_instr *in) {
  coda_strbuf *b = g->b;
  const int *a = in->args;
  switch (in->code) {
  case IR_CONST:
    coda_sb_printf(b, "      const float r%d = ", in->dst);
    emit_const(b, in->imm);
    coda_sb_printf(b, ";\n");
    return;
  case IR_ACC:
    if (g->split) /* the second column is S/2 = 8 (S/16) columns on: 4 (S/16) values */
      coda_sb_printf(b, "      const float r%d = f.v[i0 + e + %d];\n", in->dst,
                     in->lane == CODA_LANE_ODD ? 4 * (g->split / 16) : 0);
    else if (g->pair) coda_sb_printf(b, "      const float r%d = f.v[i0 + %d];\n", in->dst, in->lane == CODA_LANE_ODD);
    else coda_sb_printf(b, "      const float r%d = f.v[i0 + e];\n", in->dst);
    return;
  case IR_ROW: coda_sb_printf(b, "      const float r%d = (float)r;\n", in->dst); return;
  case IR_COL:
    coda_sb_printf(b, "      const float r%d = (float)(%s);\n", in->dst, g->pair && !g->split ? "c" : "c + e");
    return;
  case IR_READ:
    coda_sb_printf(b, "      const float r%d = ", in->dst);
    emit_read(g, in->input, in->lane);
    coda_sb_printf(b, ";\n");
    return;
  case IR_STAT: /* a pass list runs such a program (lang/pass_split.c), never one kernel */
    coda_sb_printf(b, "#error a finished statistic is read by a later pass\n");
    return;
  case IR_MATH: break;
  }
  /* The CUDA column of lang/ops.def: $0..$4 are the operand registers, $d
   * and $e the results; one result is an expression, two are lines. */
  static const char *const cuda_text[] = {
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) cuda,
#include "lang/ops.def"
  };
  if ((int)in->op < 0 || (int)in->op >= (int)(sizeof cuda_text / sizeof cuda_text[0])) {
    coda_sb_printf(b, "#error unknown op %d\n", (int)in->op);
    return;
  }
  if (ir_op_results(in->op) == 2) coda_sb_printf(b, "      ");
  else coda_sb_printf(b, "      const float r%d = ", in->dst);
  for (const char *t = cuda_text[in->op]; *t; t++) {
    if (*t == '\n') coda_sb_printf(b, "\n      ");
    else if (*t == '$' && t[1] >= '0' && t[1] < '0' + CODA_MAX_ARGS) coda_sb_printf(b, "r%d", a[*++t - '0']);
    else if (*t == '$' && (t[1] == 'd' || t[1] == 'e')) coda_sb_printf(b, "r%d", *++t == 'd' ? in->dst : in->dst2);
    else coda_sb_put(b, t, 1);
  }
  coda_sb_printf(b, ir_op_results(in->op) == 2 ? "\n" : ";\n");
}

/* Row-invariant values: an instruction whose operands are constants,
 * scalar, row or rowsum inputs, the builtin `row` or other such values has
 * one value per fragment row. Math of that kind is computed once for each
 * of the thread's two rows (h = 0, 1) before the fragment loops and read
 * per point from hv%d[h]: the same fp32 operations, so the same bits, e.g.
 * one rsqrt(ss * inv_n + eps) per row instead of one per value. */
void epi_plan_hoist(gen *g) {
  const struct coda_program_s *p = g->p;
  unsigned char inv[2 * CODA_MAX_INSTRS];
  memset(inv, 0, sizeof inv);
  memset(g->hoist, 0, sizeof g->hoist);
  memset(g->pre, 0, sizeof g->pre);
  memset(g->pp, 0, sizeof g->pp);
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    int v = 0;
    switch (in->code) {
    case IR_CONST:
    case IR_ROW: v = 1; break;
    case IR_READ: {
      const coda_arg_kind k = p->inputs[in->input].kind;
      v = k == CODA_ARG_ROW || k == CODA_ARG_SCALAR || ir_kind_is_partials(k);
    } break;
    case IR_MATH:
      v = 1;
      for (int a = 0; a < in->nargs; a++) v &= inv[in->args[a]];
      break;
    default: break;
    }
    inv[in->dst] = (unsigned char)v;
    if (in->dst2 >= 0) inv[in->dst2] = (unsigned char)v;
    if (v && in->code == IR_MATH) {
      g->hoist[in->dst] = g->pre[in->dst] = 1;
      if (in->dst2 >= 0) g->hoist[in->dst2] = g->pre[in->dst2] = 1;
    }
  }
  for (int i = p->ninstrs - 1; i >= 0; i--) { /* what the hoisted math reads */
    const ir_instr *in = &p->instrs[i];
    if (in->code != IR_MATH) continue;
    const int h = g->hoist[in->dst];
    for (int a = 0; a < in->nargs; a++) {
      if (h) g->pre[in->args[a]] = 1;
      else g->pp[in->args[a]] = 1;
    }
  }
  for (int o = 0; o < p->noutputs; o++) {
    g->pp[p->outputs[o].reg_even] = 1;
    if (p->outputs[o].reg_odd >= 0) g->pp[p->outputs[o].reg_odd] = 1;
  }
  for (int q = 0; q < p->nreduces; q++) g->pp[p->reduces[q].reg] = 1;
}

/* The hoisted row values: hv%d[2] for those read per point. */
void epi_emit_hoist_prelude(gen *g) {
  const struct coda_program_s *p = g->p;
  int any = 0;
  for (int r = 0; r < p->nregs; r++) any |= g->hoist[r] && g->pp[r];
  if (!any) return;
  coda_strbuf *b = g->b;
  coda_sb_printf(b, "    /* row-invariant math, once per fragment row */\n");
  for (int r = 0; r < p->nregs; r++)
    if (g->hoist[r] && g->pp[r]) coda_sb_printf(b, "    float hv%d[2];\n", r);
  coda_sb_printf(b, "#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n      const int r = f.row0 + 8 * h;\n      (void)r;\n");
  for (int i = 0; i < p->ninstrs; i++)
    if (g->pre[p->instrs[i].dst]) epi_emit_instr(g, &p->instrs[i]);
  for (int r = 0; r < p->nregs; r++)
    if (g->hoist[r] && g->pp[r]) coda_sb_printf(b, "      hv%d[h] = r%d;\n", r, r);
  coda_sb_printf(b, "    }\n");
}

/* The program's instructions at one point: hoisted values are read from
 * hv%d[h]; constants and row values only the hoisted math used are left
 * out. */
void epi_emit_point_instrs(gen *g) {
  const struct coda_program_s *p = g->p;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    if (g->hoist[in->dst]) {
      if (g->pp[in->dst]) coda_sb_printf(g->b, "      const float r%d = hv%d[h];\n", in->dst, in->dst);
      if (in->dst2 >= 0 && g->pp[in->dst2])
        coda_sb_printf(g->b, "      const float r%d = hv%d[h];\n", in->dst2, in->dst2);
      continue;
    }
    if (g->pre[in->dst] && !g->pp[in->dst]) continue;
    epi_emit_instr(g, in);
  }
}

