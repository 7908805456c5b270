/* Printers: the canonical text of a program (parses back to the same IR)
 * and a readable IR listing.
 *
 * Canonical text: declarations first, then one statement per "root"
 * instruction in instruction order, then the finishers. An unnamed
 * single-result register used exactly once is printed inline inside its
 * user, as long as the parser's post-order emission of the printed
 * statement reproduces the exact instruction order and the nesting stays
 * within the parser's depth limit; any other unnamed register gets a
 * generated name (_tN). Parsed programs therefore print without generated
 * names, and print(parse(print(p))) == print(p). */
#include "lang/ir.h"
#include "base/internal.h"

#include "base/strbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARSER_MAX_DEPTH 64 /* keep equal to MAX_DEPTH in parse.c */

/* The shortest text that reads back to the same double: the fewest
 * significant digits (%g), the exponent without '+' and leading zeros
 * ("1e-5", not "1e-05"), and an integer written out when that is no longer
 * ("30", not "3e1"; "100", not "1e2"; but "1e6"). */
static void fmt_number(char *buf, size_t n, double v) {
  char g[64], f[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(g, sizeof g, "%.*g", prec, v);
    if (strtod(g, NULL) == v) break;
  }
  char *e = strchr(g, 'e');
  if (e) { /* e+05 -> e5, e-05 -> e-5 */
    char *d = e + 1, *src = e + 1;
    if (*src == '+') src++;
    else if (*src == '-') *d++ = *src++;
    while (*src == '0' && src[1]) src++;
    memmove(d, src, strlen(src) + 1);
  }
  const char *best = g;
  if (e && fabs(v) < 1e21 && v == floor(v)) {
    snprintf(f, sizeof f, "%.0f", v);
    if (strtod(f, NULL) == v && strlen(f) <= strlen(g)) best = f;
  }
  snprintf(buf, n, "%s", best);
}

static const char *kind_word(coda_arg_kind k) { return ir_input_kind_word(k); }

static const char *width_suffix(coda_width w) {
  return w == CODA_WIDTH_X2 ? " x2" : w == CODA_WIDTH_HALF ? " half" : "";
}

static const char *lane_suffix(coda_lane l) {
  return l == CODA_LANE_EVEN ? ".even" : l == CODA_LANE_ODD ? ".odd" : "";
}

/* Binary operators: symbol and precedence (1 comparison, 2 additive,
 * 3 multiplicative); unary minus is 4, primaries 5. */
static int binary_op(coda_op op, const char **sym) {
  int prec = ir_op_prec(op); /* lang/ops.def */
  if (prec < 1 || prec > 3) return 0;
  *sym = ir_op_symbol(op);
  return prec;
}

typedef struct {
  const struct coda_program_s *p;
  int *def;     /* register -> defining instruction */
  int *uses;    /* register -> number of uses */
  char *inl;    /* register -> printed inline in its single user */
  int *depth;   /* instruction -> parser nesting depth of its printed form */
  int *list;    /* scratch: post order of a statement's instructions */
  char **names; /* register -> name to print (user or generated) */
  char *genbuf; /* storage of generated names */
} printer;

static int instr_prec(const printer *pr, int i) {
  const ir_instr *in = &pr->p->instrs[i];
  const char *sym;
  if (in->code == IR_CONST) return !in->param && signbit(in->imm) ? 4 : 5;
  if (in->code != IR_MATH) return 5;
  if (in->op == CODA_OP_NEG) return 4;
  int b = binary_op(in->op, &sym);
  return b ? b : 5;
}

static int reg_prec(const printer *pr, int r) { return pr->inl[r] ? instr_prec(pr, pr->def[r]) : 5; }
static int reg_depth(const printer *pr, int r) { return pr->inl[r] ? pr->depth[pr->def[r]] : 0; }

/* neg(x) prints as "-x" unless x is an inline nonnegative constant ("-2"
 * would read back as the literal -2: print "-(2)"; "--2" is neg(-2)) or a
 * binary operation. */
static int neg_needs_paren(const printer *pr, int a) {
  if (pr->inl[a] && pr->p->instrs[pr->def[a]].code == IR_CONST && !pr->p->instrs[pr->def[a]].param)
    return !signbit(pr->p->instrs[pr->def[a]].imm);
  return reg_prec(pr, a) < 4;
}

/* Nesting depth the parser counts for instruction i printed with its
 * inline operands: calls and parentheses and non-literal unary minus. */
static int compute_depth(const printer *pr, int i) {
  const ir_instr *in = &pr->p->instrs[i];
  if (in->code != IR_MATH) return 0;
  const char *sym;
  int b = binary_op(in->op, &sym);
  if (b) {
    int l = reg_depth(pr, in->args[0]) + (reg_prec(pr, in->args[0]) < b);
    int r = reg_depth(pr, in->args[1]) + (reg_prec(pr, in->args[1]) < b + 1);
    return l > r ? l : r;
  }
  if (in->op == CODA_OP_NEG) {
    int a = in->args[0];
    int paren = neg_needs_paren(pr, a);
    return 1 + paren + reg_depth(pr, a);
  }
  int d = 0;
  for (int k = 0; k < in->nargs; k++)
    if (reg_depth(pr, in->args[k]) > d) d = reg_depth(pr, in->args[k]);
  return 1 + d;
}

/* Appends the post order of the inline tree of register r. */
static void collect(const printer *pr, int r, int *n) {
  if (!pr->inl[r]) return;
  int i = pr->def[r];
  const ir_instr *in = &pr->p->instrs[i];
  if (in->code == IR_MATH)
    for (int k = 0; k < in->nargs; k++) collect(pr, in->args[k], n);
  pr->list[(*n)++] = i;
}

/* 1 if the statement whose inline operands are regs[0..nregs) (followed by
 * instruction `root` if >= 0) is emitted by the parser as one contiguous
 * run of instructions in order; otherwise un-inlines those operands. */
static int check_statement(printer *pr, const int *regs, int nregs, int root, int wrapper) {
  int n = 0, d = 0;
  for (int k = 0; k < nregs; k++) {
    collect(pr, regs[k], &n);
    if (reg_depth(pr, regs[k]) > d) d = reg_depth(pr, regs[k]);
  }
  if (root >= 0) {
    pr->list[n++] = root;
    d = pr->depth[root];
  }
  int ok = d + wrapper <= PARSER_MAX_DEPTH;
  for (int k = 1; k < n && ok; k++) ok = pr->list[k] == pr->list[k - 1] + 1;
  /* a store or reduction printed where its inline operands end must not
   * name a value defined after they start */
  for (int k = 0; k < nregs && ok && root < 0 && n > 0; k++)
    if (!pr->inl[regs[k]]) ok = pr->def[regs[k]] < pr->list[0];
  if (ok) return 1;
  for (int k = 0; k < nregs; k++) pr->inl[regs[k]] = 0;
  return 0;
}

static int plan(printer *pr) {
  const struct coda_program_s *p = pr->p;
  for (;;) {
    int ok = 1;
    for (int i = 0; i < p->ninstrs; i++) pr->depth[i] = compute_depth(pr, i);
    for (int i = 0; i < p->ninstrs && ok; i++) {
      const ir_instr *in = &p->instrs[i];
      if (pr->inl[in->dst]) continue;
      int nargs = in->code == IR_MATH ? in->nargs : 0;
      int wrapper = 0;
      ok = check_statement(pr, in->args, nargs, i, wrapper);
    }
    for (int o = 0; o < p->noutputs && ok; o++) {
      const ir_output *out = &p->outputs[o];
      int regs[2] = {out->reg_even, out->reg_odd};
      ok = check_statement(pr, regs, out->reg_odd >= 0 ? 2 : 1, -1, out->reg_odd >= 0);
    }
    for (int k = 0; k < p->nreduces && ok; k++) ok = check_statement(pr, &p->reduces[k].reg, 1, -1, 1);
    /* reductions are printed in their order: an inline one cannot come
     * before the one preceding it */
    int prev = -1;
    for (int k = 0; k < p->nreduces && ok; k++) {
      int r = p->reduces[k].reg;
      int pos = pr->def[r];
      if (pr->inl[r] && pos < prev) {
        pr->inl[r] = 0;
        ok = 0;
      }
      prev = pos > prev ? pos : prev;
    }
    if (ok) return 0;
  }
}

static int name_taken(const struct coda_program_s *p, char **names, const char *s) {
  if (ir_find_input(p, s) >= 0 || ir_find_output(p, s) >= 0 || ir_find_reduce(p, s) >= 0 ||
      ir_find_finish(p, s) >= 0 || ir_find_param(p, s) >= 0)
    return 1;
  for (int r = 0; r < p->nregs; r++)
    if (names[r] && !strcmp(names[r], s)) return 1;
  return 0;
}

static int assign_names(printer *pr) {
  const struct coda_program_s *p = pr->p;
  for (int r = 0; r < p->nregs; r++) pr->names[r] = p->reg_names ? p->reg_names[r] : NULL;
  size_t nr = p->nregs > 0 ? (size_t)p->nregs : 1;
  pr->genbuf = malloc(nr * CODA_NAME_MAX);
  if (!pr->genbuf) return -1;
  for (int r = 0; r < p->nregs; r++) {
    if (pr->names[r] || pr->inl[r]) continue;
    char *g = pr->genbuf + (size_t)r * CODA_NAME_MAX;
    snprintf(g, CODA_NAME_MAX, "_t%d", r);
    while (name_taken(p, pr->names, g) && strlen(g) + 1 < CODA_NAME_MAX) strcat(g, "_");
    pr->names[r] = g;
  }
  return 0;
}

static void print_reg(coda_strbuf *b, const printer *pr, int r, int minprec);

static void print_instr(coda_strbuf *b, const printer *pr, int i, int minprec) {
  const struct coda_program_s *p = pr->p;
  const ir_instr *in = &p->instrs[i];
  int prec = instr_prec(pr, i);
  if (prec < minprec) coda_sb_printf(b, "(");
  char num[40];
  const char *sym;
  switch (in->code) {
  case IR_CONST:
    if (in->param) {
      coda_sb_printf(b, "%s", p->params[in->param - 1].name);
      break;
    }
    fmt_number(num, sizeof num, in->imm);
    coda_sb_printf(b, "%s", num);
    break;
  case IR_ACC: coda_sb_printf(b, "acc%s", lane_suffix(in->lane)); break;
  case IR_ROW: coda_sb_printf(b, "row"); break;
  case IR_COL: coda_sb_printf(b, "col"); break;
  case IR_READ: coda_sb_printf(b, "%s%s", p->inputs[in->input].name, lane_suffix(in->lane)); break;
  case IR_STAT: coda_sb_printf(b, "%s", p->finishes[in->input].name); break;
  case IR_MATH: {
    int bp = binary_op(in->op, &sym);
    if (bp) {
      print_reg(b, pr, in->args[0], bp);
      coda_sb_printf(b, " %s ", sym);
      print_reg(b, pr, in->args[1], bp + 1);
    } else if (in->op == CODA_OP_NEG) {
      int a = in->args[0];
      coda_sb_printf(b, "-");
      if (neg_needs_paren(pr, a) && reg_prec(pr, a) >= 4) { /* "-(2)", not the literal -2 */
        coda_sb_printf(b, "(");
        print_reg(b, pr, a, 0);
        coda_sb_printf(b, ")");
      } else {
        print_reg(b, pr, a, 4);
      }
    } else {
      coda_sb_printf(b, "%s(", ir_op_name(in->op));
      for (int k = 0; k < in->nargs; k++) {
        if (k) coda_sb_printf(b, ", ");
        print_reg(b, pr, in->args[k], 0);
      }
      coda_sb_printf(b, ")");
    }
    break;
  }
  }
  if (prec < minprec) coda_sb_printf(b, ")");
}

static void print_reg(coda_strbuf *b, const printer *pr, int r, int minprec) {
  if (pr->inl[r]) print_instr(b, pr, pr->def[r], minprec);
  else coda_sb_printf(b, "%s", pr->names[r]);
}

typedef struct { int pos, cls, idx; } stmt;

static int stmt_cmp(const void *x, const void *y) {
  const stmt *a = x, *b = y;
  if (a->pos != b->pos) return a->pos < b->pos ? -1 : 1;
  if (a->cls != b->cls) return a->cls < b->cls ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

static int stmt_pos(const printer *pr, const int *regs, int n) {
  int pos = -1;
  for (int k = 0; k < n; k++)
    if (pr->def[regs[k]] > pos) pos = pr->def[regs[k]];
  return pos;
}

static void print_finish(coda_strbuf *b, const struct coda_program_s *p, int i) {
  const ir_finish *f = &p->finishes[i];
  const char *part = p->reduces[f->reduce].name;
  if (f->kind == CODA_FINISH_RSTD) {
    char num[40];
    fmt_number(num, sizeof num, f->eps);
    coda_sb_printf(b, "finish %s = rstd(%s, %s", f->name, part,
                   f->eps_param ? p->params[f->eps_param - 1].name : num);
    if (f->reduce2 >= 0) coda_sb_printf(b, ", %s", p->reduces[f->reduce2].name);
    coda_sb_printf(b, ")\n");
  } else {
    coda_sb_printf(b, "finish %s = %s(%s)\n", f->name, ir_finish_kind_name(f->kind), part);
  }
}

/* 1 if the program reads a finished statistic: its finishers are then
 * printed after their reductions, before the first read (else at the end). */
static int reads_stat(const struct coda_program_s *p) {
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].code == IR_STAT) return 1;
  return 0;
}

char *ir_print_text(const struct coda_program_s *p) {
  coda_strbuf b = {0};
  printer pr = {0};
  stmt *st = NULL;
  int nr = p->nregs > 0 ? p->nregs : 1, ni = p->ninstrs > 0 ? p->ninstrs : 1;
  pr.p = p;
  pr.def = calloc((size_t)nr, sizeof(int));
  pr.uses = calloc((size_t)nr, sizeof(int));
  pr.inl = calloc((size_t)nr, 1);
  pr.depth = calloc((size_t)ni, sizeof(int));
  pr.list = calloc((size_t)ni, sizeof(int));
  pr.names = calloc((size_t)nr, sizeof(char *));
  st = calloc((size_t)(ni + p->noutputs + p->nreduces + p->nfinishes), sizeof *st);
  if (!pr.def || !pr.uses || !pr.inl || !pr.depth || !pr.list || !pr.names || !st) {
    b.oom = 1;
    goto done;
  }
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    pr.def[in->dst] = i;
    if (in->dst2 >= 0) pr.def[in->dst2] = i;
    if (in->code == IR_MATH)
      for (int k = 0; k < in->nargs; k++) pr.uses[in->args[k]]++;
  }
  for (int o = 0; o < p->noutputs; o++) {
    pr.uses[p->outputs[o].reg_even]++;
    if (p->outputs[o].reg_odd >= 0) pr.uses[p->outputs[o].reg_odd]++;
  }
  for (int k = 0; k < p->nreduces; k++) pr.uses[p->reduces[k].reg]++;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    int named = p->reg_names && p->reg_names[in->dst];
    pr.inl[in->dst] = !named && in->dst2 < 0 && pr.uses[in->dst] == 1;
  }
  plan(&pr);
  if (assign_names(&pr)) {
    b.oom = 1;
    goto done;
  }

  if (p->pair_mode && p->pair_split == CODA_PAIR_SPLIT_ROW) coda_sb_printf(&b, "mode pair split\n");
  else if (p->pair_mode && p->pair_split) coda_sb_printf(&b, "mode pair split %d\n", p->pair_split);
  else if (p->pair_mode) coda_sb_printf(&b, "mode pair\n");
  if (p->math_fast) coda_sb_printf(&b, "math fast\n");
  for (int i = 0; i < p->nparams; i++) {
    const ir_param *pm = &p->params[i];
    char num[40];
    fmt_number(num, sizeof num, pm->value);
    if (pm->has_value) coda_sb_printf(&b, "param %s = %s\n", pm->name, num);
    else coda_sb_printf(&b, "param %s\n", pm->name);
  }
  for (int i = 0; i < p->ninputs; i++) {
    const ir_input *in = &p->inputs[i];
    coda_sb_printf(&b, "input %s : %s %s%s\n", in->name, kind_word(in->kind), coda_dtype_name(in->dtype),
              width_suffix(in->width));
  }
  for (int i = 0; i < p->noutputs; i++) {
    const ir_output *o = &p->outputs[i];
    coda_sb_printf(&b, "output %s : %s%s%s\n", o->name, coda_dtype_name(o->dtype), width_suffix(o->width),
              o->accumulate ? " accumulate" : "");
  }
  int ns = 0;
  for (int i = 0; i < p->ninstrs; i++)
    if (!pr.inl[p->instrs[i].dst]) st[ns++] = (stmt){i, 0, i};
  for (int o = 0; o < p->noutputs; o++) {
    int regs[2] = {p->outputs[o].reg_even, p->outputs[o].reg_odd};
    st[ns++] = (stmt){stmt_pos(&pr, regs, regs[1] >= 0 ? 2 : 1), 1, o};
  }
  int prev = -1, rpos[CODA_MAX_REDUCES];
  for (int k = 0; k < p->nreduces; k++) {
    int pos = stmt_pos(&pr, &p->reduces[k].reg, 1);
    if (pos < prev) pos = prev; /* keep reductions in order */
    st[ns++] = (stmt){pos, 2, k};
    rpos[k] = prev = pos;
  }
  const int inline_fin = reads_stat(p);
  prev = -1;
  for (int f = 0; f < p->nfinishes && inline_fin; f++) {
    const ir_finish *fi = &p->finishes[f];
    int pos = rpos[fi->reduce];
    if (fi->reduce2 >= 0 && rpos[fi->reduce2] > pos) pos = rpos[fi->reduce2];
    if (pos < prev) pos = prev; /* keep finishers in order */
    st[ns++] = (stmt){pos, 3, f};
    prev = pos;
  }
  qsort(st, (size_t)ns, sizeof *st, stmt_cmp);
  for (int s = 0; s < ns; s++) {
    if (st[s].cls == 0) {
      const ir_instr *in = &p->instrs[st[s].idx];
      if (in->dst2 >= 0) coda_sb_printf(&b, "%s, %s = ", pr.names[in->dst], pr.names[in->dst2]);
      else coda_sb_printf(&b, "%s = ", pr.names[in->dst]);
      print_instr(&b, &pr, st[s].idx, 0);
      coda_sb_printf(&b, "\n");
    } else if (st[s].cls == 1) {
      const ir_output *o = &p->outputs[st[s].idx];
      coda_sb_printf(&b, "store %s = ", o->name);
      if (o->reg_odd >= 0) {
        coda_sb_printf(&b, "pack(");
        print_reg(&b, &pr, o->reg_even, 0);
        coda_sb_printf(&b, ", ");
        print_reg(&b, &pr, o->reg_odd, 0);
        coda_sb_printf(&b, ")\n");
      } else {
        print_reg(&b, &pr, o->reg_even, 0);
        coda_sb_printf(&b, "\n");
      }
    } else if (st[s].cls == 3) {
      print_finish(&b, p, st[s].idx);
    } else {
      const ir_reduce *r = &p->reduces[st[s].idx];
      coda_reduce_kind k = r->kind;
      coda_sb_printf(&b, "reduce %s = %s(", r->name, ir_reduce_kind_word(k));
      print_reg(&b, &pr, r->reg, 0);
      if (k == CODA_REDUCE_ROWPICK) coda_sb_printf(&b, ", %s)\n", p->inputs[r->index_input].name);
      else if (ir_reduce_is_segmented(k)) coda_sb_printf(&b, ") per %d\n", r->segment);
      else coda_sb_printf(&b, ")\n");
    }
  }
  for (int i = 0; i < p->nfinishes && !inline_fin; i++) print_finish(&b, p, i);
done:
  free(pr.def);
  free(pr.uses);
  free(pr.inl);
  free(pr.depth);
  free(pr.list);
  free(pr.names);
  free(pr.genbuf);
  free(st);
  return coda_sb_take(&b);
}

/* ------------------------------------------------------------- listing */

static void list_reg(coda_strbuf *b, const struct coda_program_s *p, int r) {
  if (p->reg_names && r >= 0 && r < p->nregs && p->reg_names[r]) coda_sb_printf(b, "r%d(%s)", r, p->reg_names[r]);
  else coda_sb_printf(b, "r%d", r);
}

char *ir_print_listing(const struct coda_program_s *p) {
  coda_strbuf b = {0};
  coda_sb_printf(&b, "mode %s\n", p->pair_mode ? "pair" : "elem");
  if (p->pair_mode && p->pair_split == CODA_PAIR_SPLIT_ROW) coda_sb_printf(&b, "pairs: split, columns k and k + N/2\n");
  else if (p->pair_mode && p->pair_split)
    coda_sb_printf(&b, "pairs: split per %d, columns s*%d + k and s*%d + k + %d\n", p->pair_split, p->pair_split,
                   p->pair_split, p->pair_split / 2);
  if (p->math_fast) coda_sb_printf(&b, "math: fast (the GPU may contract and approximate)\n");
  if (p->nparams) coda_sb_printf(&b, "parameters (%d):\n", p->nparams);
  for (int i = 0; i < p->nparams; i++) {
    const ir_param *pm = &p->params[i];
    char num[40];
    fmt_number(num, sizeof num, pm->value);
    coda_sb_printf(&b, "  par%d %s = %s\n", i, pm->name, pm->has_value ? num : "(no value)");
  }
  coda_sb_printf(&b, "inputs (%d):\n", p->ninputs);
  for (int i = 0; i < p->ninputs; i++) {
    const ir_input *in = &p->inputs[i];
    coda_sb_printf(&b, "  in%d %s : %s %s%s%s\n", i, in->name, kind_word(in->kind), coda_dtype_name(in->dtype),
              width_suffix(in->width), ir_input_is_pair(p, i) ? "  [two values per point]" : "");
  }
  coda_sb_printf(&b, "outputs (%d):\n", p->noutputs);
  for (int i = 0; i < p->noutputs; i++) {
    const ir_output *o = &p->outputs[i];
    coda_sb_printf(&b, "  out%d %s : %s%s%s <- ", i, o->name, coda_dtype_name(o->dtype), width_suffix(o->width),
              o->accumulate ? " accumulate" : "");
    if (o->reg_odd >= 0) {
      coda_sb_printf(&b, "pack(");
      list_reg(&b, p, o->reg_even);
      coda_sb_printf(&b, ", ");
      list_reg(&b, p, o->reg_odd);
      coda_sb_printf(&b, ")\n");
    } else {
      list_reg(&b, p, o->reg_even);
      coda_sb_printf(&b, "\n");
    }
  }
  coda_sb_printf(&b, "registers: %d\ninstructions (%d):\n", p->nregs, p->ninstrs);
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    char num[40];
    coda_sb_printf(&b, "  %3d  ", i);
    list_reg(&b, p, in->dst);
    if (in->dst2 >= 0) {
      coda_sb_printf(&b, ", ");
      list_reg(&b, p, in->dst2);
    }
    coda_sb_printf(&b, " = ");
    switch (in->code) {
    case IR_CONST:
      fmt_number(num, sizeof num, in->imm);
      coda_sb_printf(&b, "const %s", num);
      if (in->param) coda_sb_printf(&b, " (par%d %s)", in->param - 1, p->params[in->param - 1].name);
      break;
    case IR_ACC: coda_sb_printf(&b, "acc%s", lane_suffix(in->lane)); break;
    case IR_ROW: coda_sb_printf(&b, "row"); break;
    case IR_COL: coda_sb_printf(&b, "col"); break;
    case IR_READ: coda_sb_printf(&b, "read in%d(%s)%s", in->input, p->inputs[in->input].name, lane_suffix(in->lane)); break;
    case IR_STAT: coda_sb_printf(&b, "stat fin%d(%s)", in->input, p->finishes[in->input].name); break;
    case IR_MATH:
      coda_sb_printf(&b, "%s", ir_op_name(in->op));
      for (int k = 0; k < in->nargs; k++) {
        coda_sb_printf(&b, k ? ", " : " ");
        list_reg(&b, p, in->args[k]);
      }
      break;
    }
    if (in->line > 0) coda_sb_printf(&b, "    ; line %d", in->line);
    coda_sb_printf(&b, "\n");
  }
  coda_sb_printf(&b, "reductions (%d):\n", p->nreduces);
  for (int i = 0; i < p->nreduces; i++) {
    const ir_reduce *r = &p->reduces[i];
    coda_sb_printf(&b, "  red%d %s = %s ", i, r->name, r->kind == CODA_REDUCE_SEGSUM   ? "segsum"
                                                     : r->kind == CODA_REDUCE_SEGMAX ? "segmax"
                                                                                     : ir_reduce_kind_name(r->kind));
    list_reg(&b, p, r->reg);
    if (ir_reduce_is_segmented(r->kind)) coda_sb_printf(&b, " per %d", r->segment);
    if (r->kind == CODA_REDUCE_ROWPICK) coda_sb_printf(&b, " at in%d(%s)", r->index_input, p->inputs[r->index_input].name);
    coda_sb_printf(&b, "\n");
  }
  coda_sb_printf(&b, "finishes (%d):\n", p->nfinishes);
  for (int i = 0; i < p->nfinishes; i++) {
    const ir_finish *f = &p->finishes[i];
    coda_sb_printf(&b, "  fin%d %s = %s red%d(%s)", i, f->name, ir_finish_kind_name(f->kind), f->reduce,
              p->reduces[f->reduce].name);
    if (f->kind == CODA_FINISH_RSTD) {
      char num[40];
      fmt_number(num, sizeof num, f->eps);
      coda_sb_printf(&b, " eps=%s", num);
      if (f->eps_param) coda_sb_printf(&b, " (par%d %s)", f->eps_param - 1, p->params[f->eps_param - 1].name);
      if (f->reduce2 >= 0) coda_sb_printf(&b, " centered by red%d(%s)", f->reduce2, p->reduces[f->reduce2].name);
    }
    coda_sb_printf(&b, "\n");
  }
  return coda_sb_take(&b);
}
