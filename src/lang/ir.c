/* The IR's tables, lookups, lifetime and introspection. */
#include "lang/ir.h"
#include "base/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; int arity, results; const char *sym; int prec; } op_info;

/* Indexed by coda_op: the entries of lang/ops.def. */
static const op_info op_table[] = {
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) {name, arity, results, sym, prec},
#include "lang/ops.def"
};
#define NUM_OPS ((int)(sizeof op_table / sizeof op_table[0]))

/* ops.def and the public enum must agree: entry i is coda_op i ... */
enum {
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) OPS_DEF_##id,
#include "lang/ops.def"
};
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) \
  _Static_assert((int)CODA_OP_##id == (int)OPS_DEF_##id, "lang/ops.def is not in the order of coda_op");
#include "lang/ops.def"

/* ... and every coda_op has an entry (-Wswitch names the one missing). */
static int op_in_table(coda_op op) {
  switch (op) {
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) case CODA_OP_##id:
#include "lang/ops.def"
    return 1;
  }
  return 0;
}

static int op_valid(coda_op op) { return (int)op >= 0 && (int)op < NUM_OPS && op_in_table(op); }
int ir_op_count(void) { return NUM_OPS; }
int ir_op_results(coda_op op) { return op_valid(op) ? op_table[op].results : 0; }
int ir_op_arity(coda_op op) { return op_valid(op) ? op_table[op].arity : 0; }
const char *ir_op_name(coda_op op) { return op_valid(op) ? op_table[op].name : "?"; }
const char *ir_op_symbol(coda_op op) { return op_valid(op) ? op_table[op].sym : ""; }
int ir_op_prec(coda_op op) { return op_valid(op) ? op_table[op].prec : 0; }

int ir_op_find_call(const char *s, size_t len) {
  for (int i = 0; i < NUM_OPS; i++)
    if (op_table[i].prec == 0 && strlen(op_table[i].name) == len && !memcmp(op_table[i].name, s, len)) return i;
  return -1;
}

int ir_op_find_binary(const char *s, size_t len, int prec) {
  for (int i = 0; i < NUM_OPS; i++)
    if (op_table[i].prec == prec && prec >= 1 && prec <= 3 && strlen(op_table[i].sym) == len &&
        !memcmp(op_table[i].sym, s, len))
      return i;
  return -1;
}

/* The kinds of lang/kinds.def, in its order. */
typedef struct { int kind; const char *word, *noun; ir_dim rows, cols; } input_info;
typedef struct { int kind; const char *word, *name; ir_part part; ir_class cls; int seg; } reduce_info;
typedef struct { int kind; const char *word; ir_class cls; const char *needs; } finish_info;
enum { IR_REDUCE_NONE = -1 };
static const input_info input_table[] = {
#define CODA_INPUT_KIND(id, word, noun, rows, cols) {CODA_ARG_##id, word, noun, IR_DIM_##rows, IR_DIM_##cols},
#include "lang/kinds.def"
#undef CODA_INPUT_KIND
};
static const reduce_info reduce_table[] = {
#define CODA_REDUCE_KIND(id, word, name, part, cls, seg) \
  {CODA_REDUCE_##id, word, name, IR_PART_##part, IR_CLASS_##cls, IR_REDUCE_##seg},
#define IR_REDUCE_SEGSUM CODA_REDUCE_SEGSUM
#define IR_REDUCE_SEGMAX CODA_REDUCE_SEGMAX
#include "lang/kinds.def"
#undef IR_REDUCE_SEGSUM
#undef IR_REDUCE_SEGMAX
#undef CODA_REDUCE_KIND
};
static const finish_info finish_table[] = {
#define CODA_FINISH_KIND(id, word, cls, needs) {CODA_FINISH_##id, word, IR_CLASS_##cls, needs},
#include "lang/kinds.def"
#undef CODA_FINISH_KIND
};
#define COUNT(t) ((int)(sizeof t / sizeof t[0]))

/* Every value of the public enums has its entry (-Wswitch names the one
 * missing), and the tables hold no more than the enums. */
static int kinds_complete(coda_arg_kind a, coda_reduce_kind r, coda_finish_kind f) {
  int n = 0;
  switch (a) {
#define CODA_INPUT_KIND(id, word, noun, rows, cols) case CODA_ARG_##id: n++; break;
#include "lang/kinds.def"
#undef CODA_INPUT_KIND
  case CODA_ARG_OUTPUT: case CODA_ARG_PARTIAL: break; /* not declared by a keyword */
  }
  switch (r) {
#define CODA_REDUCE_KIND(id, word, name, part, cls, seg) case CODA_REDUCE_##id: n++; break;
#include "lang/kinds.def"
#undef CODA_REDUCE_KIND
  }
  switch (f) {
#define CODA_FINISH_KIND(id, word, cls, needs) case CODA_FINISH_##id: n++; break;
#include "lang/kinds.def"
#undef CODA_FINISH_KIND
  }
  return n;
}
_Static_assert(COUNT(reduce_table) == CODA_REDUCE_TOTAL + 1, "lang/kinds.def: one entry per reduction kind");
_Static_assert(COUNT(finish_table) == CODA_FINISH_MEAN + 1, "lang/kinds.def: one entry per finisher kind");

static int word_is(const char *w, const char *s, size_t len) {
  return w && strlen(w) == len && !memcmp(w, s, len);
}
static const reduce_info *reduce_of(int k) {
  for (int i = 0; i < COUNT(reduce_table); i++)
    if (reduce_table[i].kind == k) return &reduce_table[i];
  return NULL;
}
static const finish_info *finish_of(int k) {
  for (int i = 0; i < COUNT(finish_table); i++)
    if (finish_table[i].kind == k) return &finish_table[i];
  return NULL;
}

int ir_input_kind_find(const char *s, size_t len) {
  for (int i = 0; i < COUNT(input_table); i++)
    if (word_is(input_table[i].word, s, len)) return input_table[i].kind;
  return -1;
}
int ir_reduce_kind_find(const char *s, size_t len) {
  for (int i = 0; i < COUNT(reduce_table); i++)
    if (reduce_table[i].part != IR_PART_SEG && word_is(reduce_table[i].word, s, len))
      return reduce_table[i].kind;
  return -1;
}
int ir_finish_kind_find(const char *s, size_t len) {
  for (int i = 0; i < COUNT(finish_table); i++)
    if (word_is(finish_table[i].word, s, len)) return finish_table[i].kind;
  return -1;
}
int ir_input_kind_known(int k) {
  for (int i = 0; i < COUNT(input_table); i++)
    if (input_table[i].kind == k) return 1;
  return 0;
}
int ir_reduce_kind_known(int k) { return reduce_of(k) != NULL; }
int ir_finish_kind_known(int k) { return finish_of(k) != NULL; }

const char *ir_input_kind_word(coda_arg_kind k) {
  for (int i = 0; i < COUNT(input_table); i++)
    if (input_table[i].kind == (int)k) return input_table[i].word;
  return "?";
}

const char *ir_input_kind_noun(coda_arg_kind k) {
  for (int i = 0; i < COUNT(input_table); i++)
    if (input_table[i].kind == (int)k) return input_table[i].noun;
  return "argument";
}

void ir_input_kind_dims(coda_arg_kind k, ir_dim *rows, ir_dim *cols) {
  *rows = IR_DIM_M;
  *cols = IR_DIM_N;
  for (int i = 0; i < COUNT(input_table); i++)
    if (input_table[i].kind == (int)k) {
      *rows = input_table[i].rows;
      *cols = input_table[i].cols;
    }
}

const char *ir_kind_words(char which, char *buf, size_t n) {
  const char *w[16];
  int nw = 0;
  (void)kinds_complete; /* its switches are the check */
  if (which == 'i')
    for (int i = 0; i < COUNT(input_table) && nw < 16; i++) w[nw++] = input_table[i].word;
  else if (which == 'r')
    for (int i = 0; i < COUNT(reduce_table) && nw < 16; i++) {
      if (reduce_table[i].part != IR_PART_SEG) w[nw++] = reduce_table[i].word;
    }
  else
    for (int i = 0; i < COUNT(finish_table) && nw < 16; i++) w[nw++] = finish_table[i].word;
  size_t len = 0;
  if (n) buf[0] = '\0';
  for (int i = 0; i < nw && len < n; i++) {
    int m = snprintf(buf + len, n - len, "%s%s", i == 0 ? "" : i == nw - 1 ? " or " : ", ", w[i]);
    if (m < 0) break;
    len += (size_t)m;
  }
  return buf;
}

const char *ir_reduce_kind_name(coda_reduce_kind k) {
  const reduce_info *r = reduce_of(k);
  return r ? r->name : "?";
}
const char *ir_reduce_kind_word(coda_reduce_kind k) {
  const reduce_info *r = reduce_of(k);
  return r ? r->word : "?";
}
ir_part ir_reduce_part(coda_reduce_kind k) {
  const reduce_info *r = reduce_of(k);
  return r ? r->part : IR_PART_ROW;
}
ir_class ir_reduce_class(coda_reduce_kind k) {
  const reduce_info *r = reduce_of(k);
  return r ? r->cls : IR_CLASS_PICK;
}
int ir_reduce_per(coda_reduce_kind k) {
  const reduce_info *r = reduce_of(k);
  return r ? r->seg : -1;
}

const char *ir_finish_kind_name(coda_finish_kind k) {
  const finish_info *f = finish_of(k);
  return f ? f->word : "?";
}
ir_class ir_finish_class(coda_finish_kind k) {
  const finish_info *f = finish_of(k);
  return f ? f->cls : IR_CLASS_PICK;
}
const char *ir_finish_needs(coda_finish_kind k) {
  const finish_info *f = finish_of(k);
  return f ? f->needs : "?";
}

/* Words that start statements or name builtins, and the function names of
 * the call ops of ops.def. The other words of the language (elem, pair,
 * tile, bf16, x2, half, accumulate, per, even, odd, and the reduction and
 * finisher kinds rowsum ... mean) only mean something at their place in a
 * statement and stay usable as names: the design's own example names a rope
 * result `x2`, programs name an lse vector `lse`. */
static const char *const keywords[] = {
  "mode", "math", "input", "output", "store", "reduce", "finish", "acc", "row", "col", "pack",
  "seg", "segpos", "param",
};

int ir_is_reserved(const char *s) {
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
    if (!strcmp(s, keywords[i])) return 1;
  return ir_op_find_call(s, strlen(s)) >= 0;
}

const char *ir_stat_unreadable(const struct coda_program_s *p, int f) {
  if (f < 0 || f >= p->nfinishes) return "no such finisher";
  if (ir_reduce_is_segmented(p->reduces[p->finishes[f].reduce].kind))
    return "a segmented statistic (`per S`) has one value per row and segment, and a point "
           "reads only its row's, column's or the total's; view the tensor as one segment per "
           "row and drop `per` (a row statistic can be read)";
  return NULL;
}

coda_arg_kind ir_finish_arg_kind(const struct coda_program_s *p, int f) {
  const ir_part part = ir_reduce_part(p->reduces[p->finishes[f].reduce].kind);
  return part == IR_PART_COL ? CODA_ARG_COL : part == IR_PART_TOTAL ? CODA_ARG_SCALAR : CODA_ARG_ROW;
}

int ir_needs_passes(const struct coda_program_s *p) {
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].code == IR_STAT) return 1;
  for (int k = 0; k < p->nreduces; k++)
    if (p->reduces[k].kind == CODA_REDUCE_TOTAL) return 1;
  return 0;
}

int ir_find_input(const struct coda_program_s *p, const char *name) {
  for (int i = 0; i < p->ninputs; i++)
    if (!strcmp(p->inputs[i].name, name)) return i;
  return -1;
}
int ir_find_output(const struct coda_program_s *p, const char *name) {
  for (int i = 0; i < p->noutputs; i++)
    if (!strcmp(p->outputs[i].name, name)) return i;
  return -1;
}
int ir_find_reduce(const struct coda_program_s *p, const char *name) {
  for (int i = 0; i < p->nreduces; i++)
    if (!strcmp(p->reduces[i].name, name)) return i;
  return -1;
}
int ir_find_finish(const struct coda_program_s *p, const char *name) {
  for (int i = 0; i < p->nfinishes; i++)
    if (!strcmp(p->finishes[i].name, name)) return i;
  return -1;
}

int ir_find_param(const struct coda_program_s *p, const char *name) {
  for (int i = 0; i < p->nparams; i++)
    if (!strcmp(p->params[i].name, name)) return i;
  return -1;
}

void ir_param_propagate(struct coda_program_s *p, int i) {
  const double v = p->params[i].has_value ? p->params[i].value : 0.0;
  for (int k = 0; k < p->ninstrs; k++)
    if (p->instrs[k].code == IR_CONST && p->instrs[k].param == i + 1) p->instrs[k].imm = v;
  for (int k = 0; k < p->nfinishes; k++)
    if (p->finishes[k].eps_param == i + 1) p->finishes[k].eps = v;
}

coda_status ir_check_params(coda_context ctx, const struct coda_program_s *p, const char *what) {
  for (int i = 0; i < p->nparams; i++)
    if (!p->params[i].has_value)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, IR_PARAM_UNSET, what, p->params[i].name);
  return CODA_OK;
}

int coda_program_pair_split(coda_program p) { return p && p->pair_mode ? p->pair_split : 0; }
coda_math coda_program_math(coda_program p) { return p && p->math_fast ? CODA_MATH_FAST : CODA_MATH_EXACT; }

int ir_input_is_pair(const struct coda_program_s *p, int input) {
  if (input < 0 || input >= p->ninputs) return 0;
  const ir_input *in = &p->inputs[input];
  if (p->pair_mode)
    return (in->kind == CODA_ARG_TILE && in->width == CODA_WIDTH_FULL) ||
           in->kind == CODA_ARG_COL;
  return in->kind == CODA_ARG_TILE && in->width == CODA_WIDTH_X2;
}

int ir_output_is_pair(const struct coda_program_s *p, int output) {
  if (output < 0 || output >= p->noutputs) return 0;
  coda_width w = p->outputs[output].width;
  return p->pair_mode ? w == CODA_WIDTH_FULL : w == CODA_WIDTH_X2;
}

struct coda_program_s *ir_program_alloc(void) {
  return calloc(1, sizeof(struct coda_program_s));
}

struct coda_program_s *ir_clone(const struct coda_program_s *p) {
  struct coda_program_s *q = ir_program_alloc();
  if (!q) return NULL;
  memcpy(q, p, sizeof *q);
  q->reg_names = NULL;
  q->text = NULL;
  q->ir_dump = NULL;
  q->passes[0] = q->passes[1] = NULL;
  if (!p->reg_names || p->nregs <= 0) return q;
  q->reg_names = calloc((size_t)p->nregs, sizeof *q->reg_names);
  if (!q->reg_names) goto oom;
  for (int r = 0; r < p->nregs; r++) {
    if (!p->reg_names[r]) continue;
    const size_t n = strlen(p->reg_names[r]) + 1;
    if (!(q->reg_names[r] = malloc(n))) goto oom;
    memcpy(q->reg_names[r], p->reg_names[r], n);
  }
  return q;
oom:
  coda_program_destroy(q);
  return NULL;
}

coda_status ir_compact(struct coda_program_s *p, int drop_dead) {
  const int n = p->nregs > 0 ? p->nregs : 1;
  int *live = calloc((size_t)n, sizeof *live), *map = malloc((size_t)n * sizeof *map);
  char **names = p->reg_names ? calloc((size_t)n, sizeof *names) : NULL;
  if (!live || !map || (p->reg_names && !names)) {
    free(live); free(map); free(names);
    return CODA_ERR_OUT_OF_MEMORY;
  }
  for (int k = 0; k < p->noutputs; k++) {
    live[p->outputs[k].reg_even] = 1;
    if (p->outputs[k].reg_odd >= 0) live[p->outputs[k].reg_odd] = 1;
  }
  for (int k = 0; k < p->nreduces; k++) live[p->reduces[k].reg] = 1;
  int keep[CODA_MAX_INSTRS];
  for (int i = p->ninstrs - 1; i >= 0; i--) {
    const ir_instr *in = &p->instrs[i];
    keep[i] = !drop_dead || live[in->dst] || (in->dst2 >= 0 && live[in->dst2]);
    if (!keep[i]) continue;
    for (int a = 0; a < in->nargs; a++) live[in->args[a]] = 1;
  }
  for (int r = 0; r < n; r++) map[r] = -1;
  int ni = 0, nr = 0;
  for (int i = 0; i < p->ninstrs; i++) {
    if (!keep[i]) continue;
    ir_instr in = p->instrs[i];
    map[in.dst] = nr++;
    if (in.dst2 >= 0) map[in.dst2] = nr++;
    p->instrs[ni++] = in;
  }
  for (int r = 0; p->reg_names && r < p->nregs; r++) {
    if (map[r] >= 0) names[map[r]] = p->reg_names[r];
    else free(p->reg_names[r]);
  }
  for (int i = 0; i < ni; i++) {
    ir_instr *in = &p->instrs[i];
    in->dst = map[in->dst];
    if (in->dst2 >= 0) in->dst2 = map[in->dst2];
    for (int a = 0; a < in->nargs; a++) in->args[a] = map[in->args[a]];
  }
  for (int k = 0; k < p->noutputs; k++) {
    p->outputs[k].reg_even = map[p->outputs[k].reg_even];
    if (p->outputs[k].reg_odd >= 0) p->outputs[k].reg_odd = map[p->outputs[k].reg_odd];
  }
  for (int k = 0; k < p->nreduces; k++) p->reduces[k].reg = map[p->reduces[k].reg];
  free(p->reg_names);
  p->reg_names = names;
  p->ninstrs = ni;
  p->nregs = nr;
  free(live);
  free(map);
  return CODA_OK;
}

void coda_program_destroy(coda_program p) {
  if (!p) return;
  if (p->reg_names) {
    for (int i = 0; i < p->nregs; i++) free(p->reg_names[i]);
    free(p->reg_names);
  }
  free(p->text);
  free(p->ir_dump);
  ir_passes_free(p->passes[0]);
  ir_passes_free(p->passes[1]);
  free(p);
}

coda_status ir_finalize(coda_context ctx, struct coda_program_s *p) {
  free(p->text);
  free(p->ir_dump);
  ir_passes_free(p->passes[0]);
  ir_passes_free(p->passes[1]);
  p->passes[0] = p->passes[1] = NULL;
  p->text = ir_print_text(p);
  p->ir_dump = ir_print_listing(p);
  if (!p->text || !p->ir_dump)
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory printing a program");
  if (!ir_needs_passes(p)) return CODA_OK;
  coda_status s = ir_passes_build(ctx, p, CODA_F32, &p->passes[0]);
  if (s == CODA_OK) s = ir_passes_build(ctx, p, CODA_F64, &p->passes[1]);
  return s;
}

const char *coda_program_text(coda_program p) { return p && p->text ? p->text : ""; }
const char *coda_program_ir(coda_program p) { return p && p->ir_dump ? p->ir_dump : ""; }

/* ------------------------------------------------------------ equality */

#define DIFF(...) do { if (why && why_len) snprintf(why, why_len, __VA_ARGS__); return 0; } while (0)

int ir_equal(const struct coda_program_s *a, const struct coda_program_s *b,
             int compare_names, char *why, size_t why_len) {
  if (why && why_len) why[0] = '\0';
  if (a->pair_mode != b->pair_mode) DIFF("mode differs");
  if (a->pair_split != b->pair_split) DIFF("pair split differs (%d vs %d)", a->pair_split, b->pair_split);
  if (a->math_fast != b->math_fast) DIFF("math differs (%s vs %s)", a->math_fast ? "fast" : "exact", b->math_fast ? "fast" : "exact");
  if (a->ninstrs != b->ninstrs) DIFF("instruction count %d vs %d", a->ninstrs, b->ninstrs);
  if (a->ninputs != b->ninputs) DIFF("input count %d vs %d", a->ninputs, b->ninputs);
  if (a->noutputs != b->noutputs) DIFF("output count %d vs %d", a->noutputs, b->noutputs);
  if (a->nreduces != b->nreduces) DIFF("reduction count %d vs %d", a->nreduces, b->nreduces);
  if (a->nfinishes != b->nfinishes) DIFF("finisher count %d vs %d", a->nfinishes, b->nfinishes);
  if (a->nregs != b->nregs) DIFF("register count %d vs %d", a->nregs, b->nregs);
  if (a->nparams != b->nparams) DIFF("parameter count %d vs %d", a->nparams, b->nparams);
  for (int i = 0; i < a->nparams; i++) {
    const ir_param *x = &a->params[i], *y = &b->params[i];
    if (strcmp(x->name, y->name) || x->has_value != y->has_value ||
        (x->has_value && memcmp(&x->value, &y->value, sizeof x->value) != 0))
      DIFF("parameter %d ('%s' vs '%s') differs", i, x->name, y->name);
  }
  for (int i = 0; i < a->ninstrs; i++) {
    const ir_instr *x = &a->instrs[i], *y = &b->instrs[i];
    if (x->code != y->code) DIFF("instruction %d: code %d vs %d", i, (int)x->code, (int)y->code);
    if (x->dst != y->dst || x->dst2 != y->dst2) DIFF("instruction %d: destination differs", i);
    switch (x->code) {
    case IR_CONST:
      if (x->param != y->param) DIFF("instruction %d: parameter differs", i);
      if (memcmp(&x->imm, &y->imm, sizeof x->imm) != 0)
        DIFF("instruction %d: constant %.17g vs %.17g", i, x->imm, y->imm);
      break;
    case IR_ACC:
      if (x->lane != y->lane) DIFF("instruction %d: lane differs", i);
      break;
    case IR_READ:
    case IR_STAT:
      if (x->lane != y->lane || x->input != y->input) DIFF("instruction %d: read differs", i);
      break;
    case IR_MATH:
      if (x->op != y->op || x->nargs != y->nargs) DIFF("instruction %d: op differs", i);
      for (int k = 0; k < x->nargs && k < CODA_MAX_ARGS; k++)
        if (x->args[k] != y->args[k]) DIFF("instruction %d: operand %d differs", i, k);
      break;
    default: break;
    }
  }
  for (int i = 0; i < a->ninputs; i++) {
    const ir_input *x = &a->inputs[i], *y = &b->inputs[i];
    if (strcmp(x->name, y->name) || x->kind != y->kind || x->dtype != y->dtype || x->width != y->width)
      DIFF("input %d ('%s' vs '%s') differs", i, x->name, y->name);
  }
  for (int i = 0; i < a->noutputs; i++) {
    const ir_output *x = &a->outputs[i], *y = &b->outputs[i];
    if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->width != y->width ||
        x->accumulate != y->accumulate || x->reg_even != y->reg_even || x->reg_odd != y->reg_odd)
      DIFF("output %d ('%s' vs '%s') differs", i, x->name, y->name);
  }
  for (int i = 0; i < a->nreduces; i++) {
    const ir_reduce *x = &a->reduces[i], *y = &b->reduces[i];
    if (strcmp(x->name, y->name) || x->kind != y->kind || x->reg != y->reg)
      DIFF("reduction %d ('%s' vs '%s') differs", i, x->name, y->name);
    if (x->kind == CODA_REDUCE_ROWPICK && x->index_input != y->index_input)
      DIFF("reduction %d: index input differs", i);
    if (ir_reduce_is_segmented(x->kind) && x->segment != y->segment)
      DIFF("reduction %d: segment differs", i);
  }
  for (int i = 0; i < a->nfinishes; i++) {
    const ir_finish *x = &a->finishes[i], *y = &b->finishes[i];
    if (strcmp(x->name, y->name) || x->kind != y->kind || x->reduce != y->reduce)
      DIFF("finisher %d ('%s' vs '%s') differs", i, x->name, y->name);
    if (x->kind == CODA_FINISH_RSTD &&
        (memcmp(&x->eps, &y->eps, sizeof x->eps) != 0 || x->reduce2 != y->reduce2 ||
         x->eps_param != y->eps_param))
      DIFF("finisher %d: eps or second partial differs", i);
  }
  if (compare_names) {
    for (int r = 0; r < a->nregs; r++) {
      const char *x = a->reg_names ? a->reg_names[r] : NULL;
      const char *y = b->reg_names ? b->reg_names[r] : NULL;
      if ((x == NULL) != (y == NULL) || (x && strcmp(x, y)))
        DIFF("register %d named '%s' vs '%s'", r, x ? x : "", y ? y : "");
    }
  }
  return 1;
}
