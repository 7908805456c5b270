/* The pass split: one program that reads a finished statistic of its
 * whole row (or column, or the total) after it is complete, or that has a
 * total over the domain, as a list of ordinary programs that run one after
 * the other (docs/language.md, "Whole operators in one file").
 *
 * Levels: acc, `row`, `col`, inputs and constants are of level 0; a read
 * of finisher f is of one level more than the reduction f finishes; math
 * is of the highest level among its operands. A value that needs only
 * inputs, constants and indices is recomputed by every pass that uses it,
 * and so is every value computed from the accumulator and earlier
 * statistics (read again as inputs): only the accumulator itself is stored
 * by the first pass into a temporary tile (`__cR`, R its register in the
 * source; `half` in pair mode) and read back. Level k's pass holds the stores and
 * reductions of level k; a total of level k is a `rowsum` partial (`__tJ`,
 * J its reduction) that a map over M x 1 then sums by `colsum` into the
 * total's own partial, finished by `sum`. See ir.h for the list itself. */
#include "lang/ir.h"
#include "base/internal.h"
#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREG (2 * CODA_MAX_INSTRS)

typedef struct split {
  const struct coda_program_s *p;
  coda_context ctx;
  coda_dtype dt;
  int nlev;
  int def[NREG];                                   /* register -> instruction */
  int lvl[NREG];                                   /* register -> level */
  unsigned char fre[NREG];                         /* recomputed where used */
  unsigned char carry[NREG];                       /* stored for a later level */
  unsigned char need[IR_MAX_PASSES][CODA_MAX_INSTRS]; /* instruction in level k */
  short in_tmp[IR_MAX_PASSES][NREG];               /* 1 + the register whose temporary level k reads */
  int acc_reg[3];                                  /* 1 + the first read of acc per lane */
  unsigned char read[CODA_MAX_FINISHES];           /* finisher read by a later level */
} split;

static int reg_level(const split *s, int r) { return s->fre[r] ? 0 : s->lvl[r]; }

static int finish_level(const split *s, int f) {
  const ir_finish *fi = &s->p->finishes[f];
  int l = reg_level(s, s->p->reduces[fi->reduce].reg);
  if (fi->reduce2 >= 0 && reg_level(s, s->p->reduces[fi->reduce2].reg) > l)
    l = reg_level(s, s->p->reduces[fi->reduce2].reg);
  return l;
}

static int output_level(const split *s, const ir_output *o) {
  int l = reg_level(s, o->reg_even);
  if (o->reg_odd >= 0 && reg_level(s, o->reg_odd) > l) l = reg_level(s, o->reg_odd);
  return l;
}

/* The level of every register; the number of levels. */
static coda_status compute_levels(split *s) {
  const struct coda_program_s *p = s->p;
  coda_context ctx = s->ctx;
  s->nlev = 1;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    int fre = 0, lvl = 0;
    switch (in->code) {
    case IR_CONST: case IR_ROW: case IR_COL: case IR_READ: fre = 1; break;
    case IR_ACC:
      if (!s->acc_reg[in->lane]) s->acc_reg[in->lane] = in->dst + 1;
      break;
    case IR_STAT: lvl = finish_level(s, in->input) + 1; break;
    case IR_MATH:
      fre = 1;
      for (int a = 0; a < in->nargs; a++) {
        fre &= s->fre[in->args[a]];
        if (reg_level(s, in->args[a]) > lvl) lvl = reg_level(s, in->args[a]);
      }
      break;
    }
    if (fre) lvl = 0;
    for (int d = 0; d < 2; d++) {
      int r = d ? in->dst2 : in->dst;
      if (r < 0) continue;
      s->def[r] = i;
      s->lvl[r] = lvl;
      s->fre[r] = (unsigned char)fre;
    }
    if (lvl + 1 > s->nlev) s->nlev = lvl + 1;
  }
  for (int f = 0; f < p->nfinishes; f++) {
    const ir_finish *fi = &p->finishes[f];
    if (fi->reduce2 >= 0 &&
        reg_level(s, p->reduces[fi->reduce].reg) != reg_level(s, p->reduces[fi->reduce2].reg))
      return coda_fail(ctx, CODA_ERR_TYPE,
                       "finisher '%s': its two partials come from different passes (one reduces a value "
                       "that reads a finished statistic): a centered rstd needs both from one pass",
                       fi->name);
  }
  int totals = 0;
  for (int k = 0; k < s->nlev; k++)
    for (int j = 0; j < p->nreduces; j++)
      if (p->reduces[j].kind == CODA_REDUCE_TOTAL && reg_level(s, p->reduces[j].reg) == k) {
        totals++;
        break;
      }
  if (s->nlev + totals > IR_MAX_PASSES)
    return coda_fail(ctx, CODA_ERR_TYPE,
                     "the program needs %d passes (%d levels of statistics read after they are "
                     "complete, %d maps for totals); at most %d are allowed",
                     s->nlev + totals, s->nlev, totals, IR_MAX_PASSES);
  return CODA_OK;
}

/* Register r is used by level k's pass. Everything but the accumulator
 * is recomputed there (the maps are memory-bound: arithmetic costs less
 * than a tile stored and read back, and gives the same bits); an earlier
 * statistic is read again as its finished input. */
static void mark(split *s, int r, int k) {
  const ir_instr *def = &s->p->instrs[s->def[r]];
  if (!s->fre[r] && s->lvl[r] < k && def->code == IR_ACC) { /* one temporary per lane */
    const int c = s->acc_reg[def->lane] - 1;
    s->carry[c] = 1;
    s->in_tmp[k][r] = (short)(c + 1);
    return;
  }
  const int i = s->def[r];
  if (s->need[k][i]) return;
  s->need[k][i] = 1;
  const ir_instr *in = &s->p->instrs[i];
  if (in->code == IR_MATH)
    for (int a = 0; a < in->nargs; a++) mark(s, in->args[a], k);
  if (in->code == IR_STAT) s->read[in->input] = 1;
}

static void mark_all(split *s) {
  const struct coda_program_s *p = s->p;
  for (int k = s->nlev - 1; k >= 0; k--) {
    for (int o = 0; o < p->noutputs; o++)
      if (output_level(s, &p->outputs[o]) == k) {
        mark(s, p->outputs[o].reg_even, k);
        if (p->outputs[o].reg_odd >= 0) mark(s, p->outputs[o].reg_odd, k);
      }
    for (int j = 0; j < p->nreduces; j++)
      if (reg_level(s, p->reduces[j].reg) == k) mark(s, p->reduces[j].reg, k);
    for (int r = 0; r < p->nregs; r++) /* what later levels read from this one */
      if (s->carry[r] && s->lvl[r] == k) mark(s, r, k);
  }
}

static int add_input(struct coda_program_s *q, const char *name, coda_arg_kind kind, coda_dtype dt,
                     coda_width w) {
  int k = ir_find_input(q, name);
  if (k >= 0) return k;
  if (q->ninputs >= CODA_MAX_INPUTS) return -1;
  ir_input *in = &q->inputs[q->ninputs];
  memset(in, 0, sizeof *in);
  snprintf(in->name, sizeof in->name, "%s", name);
  in->kind = kind;
  in->dtype = dt;
  in->width = w;
  return q->ninputs++;
}

static coda_status too_many(const split *s, int k, const char *what, int most) {
  return coda_fail(s->ctx, CODA_ERR_TYPE,
                   "pass %d of the program needs more than %d %s (its own and the values and "
                   "statistics carried from earlier passes)", k + 1, most, what);
}

/* Level k's instructions: those it needs, a read of the finisher for a
 * finished statistic, a read of the temporary for a carried value. */
static coda_status level_instrs(const split *s, int k, struct coda_program_s *q) {
  const struct coda_program_s *p = s->p;
  const coda_width tw = p->pair_mode ? CODA_WIDTH_HALF : CODA_WIDTH_FULL;
  int n = 0;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    if (s->need[k][i]) {
      if (n >= CODA_MAX_INSTRS) return too_many(s, k, "instructions", CODA_MAX_INSTRS);
      ir_instr x = *in;
      if (x.code == IR_STAT) {
        const int f = x.input;
        x.code = IR_READ;
        x.input = add_input(q, p->finishes[f].name, ir_finish_arg_kind(p, f), s->dt, CODA_WIDTH_FULL);
        if (x.input < 0) return too_many(s, k, "inputs", CODA_MAX_INPUTS);
      }
      q->instrs[n++] = x;
      continue;
    }
    for (int d = 0; d < 2; d++) {
      const int r = d ? in->dst2 : in->dst;
      if (r < 0 || !s->in_tmp[k][r]) continue;
      if (n >= CODA_MAX_INSTRS) return too_many(s, k, "instructions", CODA_MAX_INSTRS);
      char nm[CODA_NAME_MAX];
      snprintf(nm, sizeof nm, "__c%d", s->in_tmp[k][r] - 1);
      ir_instr x;
      memset(&x, 0, sizeof x);
      x.code = IR_READ;
      x.dst = r;
      x.dst2 = -1;
      x.lane = CODA_LANE_NONE;
      x.line = in->line;
      x.col = in->col;
      x.input = add_input(q, nm, CODA_ARG_TILE, s->dt, tw);
      if (x.input < 0) return too_many(s, k, "inputs", CODA_MAX_INPUTS);
      q->instrs[n++] = x;
    }
  }
  q->ninstrs = n;
  return CODA_OK;
}

/* Level k's stores (its own and the carried values), reductions (a total
 * as its `rowsum` partial) and finishers. */
static coda_status level_results(const split *s, int k, struct coda_program_s *q, ir_passes *l, ir_pass *ps) {
  const struct coda_program_s *p = s->p;
  q->noutputs = 0;
  for (int o = 0; o < p->noutputs; o++)
    if (output_level(s, &p->outputs[o]) == k) q->outputs[q->noutputs++] = p->outputs[o];
  for (int r = 0; r < p->nregs; r++) {
    if (!s->carry[r] || s->lvl[r] != k) continue;
    if (q->noutputs >= CODA_MAX_OUTPUTS) return too_many(s, k, "outputs", CODA_MAX_OUTPUTS);
    ir_output *o = &q->outputs[q->noutputs++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "__c%d", r);
    o->dtype = s->dt;
    o->width = p->pair_mode ? CODA_WIDTH_HALF : CODA_WIDTH_FULL;
    o->reg_even = r;
    o->reg_odd = -1;
    snprintf(l->temp[l->ntemps], CODA_NAME_MAX, "%s", o->name);
    l->temp_pass[l->ntemps++] = l->npasses;
  }
  int rmap[CODA_MAX_REDUCES];
  q->nreduces = 0;
  for (int j = 0; j < p->nreduces; j++) {
    rmap[j] = -1;
    if (reg_level(s, p->reduces[j].reg) != k) continue;
    ir_reduce x = p->reduces[j];
    if (x.kind == CODA_REDUCE_TOTAL) {
      x.kind = CODA_REDUCE_ROWSUM;
      snprintf(x.name, sizeof x.name, "__t%d", j);
      snprintf(l->temp[l->ntemps], CODA_NAME_MAX, "%s", x.name);
      l->temp_pass[l->ntemps++] = l->npasses;
    }
    rmap[j] = q->nreduces;
    q->reduces[q->nreduces++] = x;
  }
  q->nfinishes = 0;
  ps->nread = 0;
  for (int f = 0; f < p->nfinishes; f++) {
    ir_finish x = p->finishes[f];
    if (rmap[x.reduce] < 0 || p->reduces[x.reduce].kind == CODA_REDUCE_TOTAL) continue;
    x.reduce = rmap[x.reduce];
    if (x.reduce2 >= 0) x.reduce2 = rmap[x.reduce2];
    if (s->read[f]) ps->read[ps->nread++] = q->nfinishes;
    q->finishes[q->nfinishes++] = x;
  }
  return CODA_OK;
}

/* Drops the inputs nothing reads (nor a rowpick names) and renumbers. */
static void prune_inputs(struct coda_program_s *q) {
  int used[CODA_MAX_INPUTS] = {0}, map[CODA_MAX_INPUTS], n = 0;
  for (int i = 0; i < q->ninstrs; i++)
    if (q->instrs[i].code == IR_READ) used[q->instrs[i].input] = 1;
  for (int j = 0; j < q->nreduces; j++)
    if (q->reduces[j].kind == CODA_REDUCE_ROWPICK) used[q->reduces[j].index_input] = 1;
  for (int k = 0; k < q->ninputs; k++) {
    map[k] = used[k] ? n : -1;
    if (used[k]) q->inputs[n++] = q->inputs[k];
  }
  q->ninputs = n;
  for (int i = 0; i < q->ninstrs; i++)
    if (q->instrs[i].code == IR_READ) q->instrs[i].input = map[q->instrs[i].input];
  for (int j = 0; j < q->nreduces; j++)
    if (q->reduces[j].kind == CODA_REDUCE_ROWPICK) q->reduces[j].index_input = map[q->reduces[j].index_input];
}

static int exact_of(coda_context ctx, coda_dtype dt) {
  return dt == CODA_F64 || (ctx && ctx->opts.precision == CODA_PRECISION_F64);
}

static coda_status finish_prog(coda_context ctx, struct coda_program_s *q, int k, coda_dtype dt) {
  coda_status st = ir_compact(q, 1);
  if (st) return coda_fail(ctx, st, "out of memory splitting the program into passes");
  prune_inputs(q);
  if ((st = ir_validate_as(ctx, q, exact_of(ctx, dt))) || (st = ir_finalize(ctx, q))) {
    char why[512];
    snprintf(why, sizeof why, "%s", ctx ? coda_last_error(ctx) : "");
    return coda_fail(ctx, st, "pass %d of the program: %s", k + 1, why);
  }
  return CODA_OK;
}

/* Level k's pass. */
static coda_status build_level(const split *s, int k, ir_passes *l) {
  struct coda_program_s *q = ir_clone(s->p);
  if (!q) return coda_fail(s->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory splitting the program into passes");
  ir_pass *ps = &l->pass[l->npasses];
  coda_status st = level_instrs(s, k, q);
  if (!st) st = level_results(s, k, q, l, ps);
  if (!st && q->noutputs == 0 && q->nreduces == 0) { /* nothing of this level is used */
    coda_program_destroy(q);
    return CODA_OK;
  }
  if (!st) st = finish_prog(s->ctx, q, l->npasses, s->dt);
  if (st) {
    coda_program_destroy(q);
    return st;
  }
  int acc = 0;
  for (int i = 0; i < q->ninstrs; i++) acc |= q->instrs[i].code == IR_ACC;
  ps->kind = acc ? IR_PASS_GEMM : IR_PASS_MAP;
  ps->prog = q;
  l->npasses++;
  return CODA_OK;
}

/* The map over M x 1 that sums level k's totals: `__tJ` (rowsum input) ->
 * colsum into the total's partial -> its `sum` finishers. */
static coda_status build_totals(const split *s, int k, ir_passes *l) {
  const struct coda_program_s *p = s->p;
  struct coda_program_s *q = ir_program_alloc();
  if (!q) return coda_fail(s->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory splitting the program into passes");
  int rmap[CODA_MAX_REDUCES];
  for (int j = 0; j < p->nreduces; j++) {
    rmap[j] = -1;
    if (p->reduces[j].kind != CODA_REDUCE_TOTAL || reg_level(s, p->reduces[j].reg) != k) continue;
    char nm[CODA_NAME_MAX];
    snprintf(nm, sizeof nm, "__t%d", j);
    const int n = q->ninputs;
    add_input(q, nm, CODA_ARG_ROWSUM, s->dt, CODA_WIDTH_FULL);
    ir_instr *in = &q->instrs[q->ninstrs++];
    memset(in, 0, sizeof *in);
    in->code = IR_READ;
    in->input = n;
    in->dst = n;
    in->dst2 = -1;
    ir_reduce *r = &q->reduces[q->nreduces];
    *r = p->reduces[j];
    r->kind = CODA_REDUCE_COLSUM;
    r->reg = n;
    r->index_input = -1;
    rmap[j] = q->nreduces++;
  }
  if (q->nreduces == 0) {
    coda_program_destroy(q);
    return CODA_OK;
  }
  q->nregs = q->ninstrs;
  q->reg_names = calloc((size_t)q->nregs, sizeof *q->reg_names);
  ir_pass *ps = &l->pass[l->npasses];
  ps->nread = 0;
  for (int f = 0; f < p->nfinishes; f++) {
    ir_finish x = p->finishes[f];
    if (rmap[x.reduce] < 0) continue;
    x.reduce = rmap[x.reduce];
    if (s->read[f]) ps->read[ps->nread++] = q->nfinishes;
    q->finishes[q->nfinishes++] = x;
  }
  coda_status st = q->reg_names ? ir_validate_as(s->ctx, q, exact_of(s->ctx, s->dt))
                                : coda_fail(s->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!st) st = ir_finalize(s->ctx, q);
  if (st) {
    coda_program_destroy(q);
    return st;
  }
  ps->kind = IR_PASS_ROWS;
  ps->prog = q;
  l->npasses++;
  return CODA_OK;
}

static const char *pass_word(ir_pass_kind k) {
  return k == IR_PASS_GEMM ? "the GEMM's epilogue, M x N" : k == IR_PASS_MAP ? "a map over M x N" : "a map over M x 1";
}

/* The printable list: each pass, what it reads from earlier ones, what
 * the runner finishes after it, and its program. */
static char *list_text(const ir_passes *l) {
  coda_strbuf b = {0};
  coda_sb_printf(&b, "passes (%d):\n", l->npasses);
  for (int i = 0; i < l->npasses; i++) {
    const ir_pass *ps = &l->pass[i];
    const struct coda_program_s *q = ps->prog;
    coda_sb_printf(&b, "pass %d: %s", i + 1, pass_word(ps->kind));
    int first = 1;
    for (int k = 0; k < q->ninputs; k++) {
      const char *nm = q->inputs[k].name;
      int from = 0;
      for (int t = 0; t < l->ntemps; t++) from |= !strcmp(l->temp[t], nm);
      for (int j = 0; j < i; j++) from |= ir_find_finish(l->pass[j].prog, nm) >= 0;
      if (!from) continue;
      coda_sb_printf(&b, "%s%s", first ? "; reads from earlier passes: " : ", ", nm);
      first = 0;
    }
    for (int k = 0; k < ps->nread; k++)
      coda_sb_printf(&b, "%s%s", k ? ", " : "; then finishes ", q->finishes[ps->read[k]].name);
    coda_sb_printf(&b, "\n");
    for (const char *t = q->text; t && *t;) {
      const char *e = strchr(t, '\n');
      size_t n = e ? (size_t)(e - t) : strlen(t);
      coda_sb_printf(&b, "    %.*s\n", (int)n, t);
      t += n + (e != NULL);
    }
  }
  return coda_sb_take(&b);
}

coda_status ir_passes_build(coda_context ctx, const struct coda_program_s *p, coda_dtype dtype,
                            ir_passes **out) {
  *out = NULL;
  split *s = calloc(1, sizeof *s);
  ir_passes *l = calloc(1, sizeof *l);
  if (!s || !l) {
    free(s);
    free(l);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory splitting the program into passes");
  }
  s->p = p;
  s->ctx = ctx;
  s->dt = l->dtype = dtype;
  coda_status st = compute_levels(s);
  if (!st) mark_all(s);
  for (int k = 0; !st && k < s->nlev; k++) {
    st = build_level(s, k, l);
    if (!st) st = build_totals(s, k, l);
  }
  if (!st && !(l->text = list_text(l))) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  free(s);
  if (st) {
    ir_passes_free(l);
    return st;
  }
  *out = l;
  return CODA_OK;
}

void ir_passes_free(ir_passes *l) {
  if (!l) return;
  for (int i = 0; i < l->npasses; i++) coda_program_destroy(l->pass[i].prog);
  free(l->text);
  free(l);
}

int ir_passes_find_finish(const ir_passes *l, const char *name, int *fi) {
  for (int i = 0; l && i < l->npasses; i++) {
    const int k = ir_find_finish(l->pass[i].prog, name);
    if (k >= 0) {
      if (fi) *fi = k;
      return i;
    }
  }
  return -1;
}

/* ------------------------------------------ the pass list, as the API reads it */

const ir_passes *ir_passes_for(coda_context ctx, const struct coda_program_s *p) {
  return p ? p->passes[ctx && ctx->opts.precision == CODA_PRECISION_F64] : NULL;
}

int coda_program_num_passes(coda_program p) {
  return p && p->passes[0] ? p->passes[0]->npasses : p ? 1 : 0;
}

coda_status coda_program_pass(coda_context ctx, coda_program p, int i, coda_pass_info *info) {
  if (!p || !info)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_pass: %s is NULL", p ? "info" : "program");
  const int n = coda_program_num_passes(p);
  if (i < 0 || i >= n)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_pass: index %d out of range (the program "
                     "has %d pass%s)", i, n, n == 1 ? "" : "es");
  memset(info, 0, sizeof *info);
  const ir_passes *l = ir_passes_for(ctx, p);
  if (!l) {
    info->program = p;
    info->kind = CODA_PASS_EPILOGUE;
    return CODA_OK;
  }
  const ir_pass *ps = &l->pass[i];
  info->program = ps->prog;
  info->kind = ps->kind == IR_PASS_GEMM ? CODA_PASS_EPILOGUE : ps->kind == IR_PASS_MAP ? CODA_PASS_MAP : CODA_PASS_ROWS;
  info->nfinish = ps->nread;
  for (int k = 0; k < ps->nread; k++) info->finish[k] = ps->prog->finishes[ps->read[k]].name;
  return CODA_OK;
}

const char *coda_program_passes_text(coda_program p) {
  return p && p->passes[0] && p->passes[0]->text ? p->passes[0]->text : "";
}
