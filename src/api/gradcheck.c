/* Checking programs in fp64: coda_program_exact (a program retyped for
 * exact mode) and coda_program_gradcheck (a backward program against
 * central finite differences of its forward). Both run on the CPU backend
 * through the public calls; see include/coda.h and docs/language.md. */
#include "api/api.h"
#include "base/options.h"

#include "lang/ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_float(coda_dtype t) { return t == CODA_BF16 || t == CODA_F16 || t == CODA_F32; }

static coda_status need_exact_cpu(coda_context ctx, const char *what) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (coda_context_backend(ctx) != CODA_BACKEND_CPU ||
      coda_context_precision(ctx) != CODA_PRECISION_F64)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "%s needs a CPU context of precision CODA_PRECISION_F64", what);
  return CODA_OK;
}

coda_status coda_program_exact(coda_context ctx, coda_program p, coda_program *out) {
  coda_status s = need_exact_cpu(ctx, "coda_program_exact");
  if (s) return s;
  if (!p || !out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_exact: NULL argument");
  *out = NULL;
  coda_program q;
  if ((s = coda_program_parse(ctx, coda_program_text(p), &q))) return s;
  for (int i = 0; i < q->ninputs; i++)
    if (is_float(q->inputs[i].dtype) && !ir_kind_is_partials(q->inputs[i].kind) &&
        q->inputs[i].width != CODA_WIDTH_X2)
      q->inputs[i].dtype = CODA_F64;
    else if (ir_kind_is_partials(q->inputs[i].kind))
      q->inputs[i].dtype = CODA_F64;
  for (int i = 0; i < q->noutputs; i++)
    if (is_float(q->outputs[i].dtype) && q->outputs[i].width != CODA_WIDTH_X2)
      q->outputs[i].dtype = CODA_F64;
  if ((s = ir_validate(ctx, q)) || (s = ir_finalize(ctx, q))) {
    coda_program_destroy(q);
    return s;
  }
  *out = q;
  return CODA_OK;
}

coda_gradcheck_options coda_gradcheck_default_options(void) {
  coda_gradcheck_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.M = 3;
  o.N = 8;
  o.seed = 1;
  o.step = 1e-6;
  o.tol = 1e-6;
  o.points = 0;
  return o;
}

/* The first layout of coda_gradcheck_options (before `points`). */
typedef struct gradcheck_options_v1 {
  size_t struct_size;
  int64_t M, N;
  uint64_t seed;
  double step, tol;
} gradcheck_options_v1;

/* ------------------------------------------------------------ gradcheck */

static int reads_acc(const struct coda_program_s *p) {
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].code == IR_ACC) return 1;
  return 0;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }
/* ±[0.1, 1): away from 0 (kinks of relu, abs, comparisons with 0) */
static double rng_signed(uint64_t *s) {
  double m = 0.1 + 0.9 * rng_unit(s);
  return (rng_next(s) & 1) ? m : -m;
}

/* Thresholds: the literal operands of min, max and the comparisons of a
 * program (0 for a select whose condition is not a comparison), each once. */
#define GC_MAX_KINKS 64
typedef struct gc_kinks {
  int n;
  double c[GC_MAX_KINKS];
} gc_kinks;

static void kink_add(gc_kinks *k, double c) {
  for (int i = 0; i < k->n; i++)
    if (k->c[i] == c) return;
  if (k->n < GC_MAX_KINKS && isfinite(c)) k->c[k->n++] = c;
}

static int is_compare(coda_op op) {
  return op == CODA_OP_LT || op == CODA_OP_LE || op == CODA_OP_GT || op == CODA_OP_GE ||
         op == CODA_OP_EQ || op == CODA_OP_NE;
}

static void gc_find_kinks(const struct coda_program_s *p, gc_kinks *k) {
  memset(k, 0, sizeof *k);
  /* the instruction that writes each register */
  int def[CODA_MAX_INSTRS * 2];
  for (int r = 0; r < CODA_MAX_INSTRS * 2; r++) def[r] = -1;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    if (in->dst >= 0 && in->dst < CODA_MAX_INSTRS * 2) def[in->dst] = i;
    if (in->dst2 >= 0 && in->dst2 < CODA_MAX_INSTRS * 2) def[in->dst2] = i;
  }
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    if (in->code != IR_MATH) continue;
    if (in->op == CODA_OP_MIN || in->op == CODA_OP_MAX || is_compare(in->op)) {
      for (int a = 0; a < in->nargs; a++) {
        int d = in->args[a] >= 0 && in->args[a] < CODA_MAX_INSTRS * 2 ? def[in->args[a]] : -1;
        if (d >= 0 && p->instrs[d].code == IR_CONST) kink_add(k, p->instrs[d].imm);
      }
    } else if (in->op == CODA_OP_SELECT) {
      int d = in->args[0] >= 0 && in->args[0] < CODA_MAX_INSTRS * 2 ? def[in->args[0]] : -1;
      if (d >= 0 && !(p->instrs[d].code == IR_MATH && is_compare(p->instrs[d].op)))
        kink_add(k, 0);
    }
  }
}

/* The distance from a threshold c a drawn value keeps: 1e3 finite-difference
 * steps (relative to max(1, |c|)). */
static double kink_margin(double c, double step) { return 1e3 * step * (fabs(c) > 1 ? fabs(c) : 1); }

static int near_kink(const gc_kinks *k, double v, double step) {
  for (int i = 0; i < k->n; i++)
    if (fabs(v - k->c[i]) < kink_margin(k->c[i], step)) return 1;
  return 0;
}

/* One random value of a floating forward input: `draw` gives the plain
 * value (range, or the default); redrawn while it lies within the margin of
 * a threshold; in points mode, half of the values lie beside a threshold
 * instead (inside [lo, hi] when a range is given). */
typedef struct gc_draw {
  const gc_kinks *k;
  double step;
  int points;
  int ranged;
  double lo, hi;   /* ranged: [lo, hi] */
  double mag;      /* default: ±[0.1, mag) */
  int positive;    /* default: positive only */
} gc_draw;

static double gc_draw_value(const gc_draw *d, uint64_t *rs) {
  if (d->points && d->k->n) {
    double c[GC_MAX_KINKS];
    int n = 0;
    for (int i = 0; i < d->k->n; i++)
      if (!d->ranged || (d->k->c[i] >= d->lo && d->k->c[i] <= d->hi)) c[n++] = d->k->c[i];
    if (n && (rng_next(rs) & 1)) {
      for (int tries = 0; tries < 64; tries++) {
        double t = c[rng_next(rs) % (uint64_t)n], m = kink_margin(t, d->step);
        double off = m * (2 + 48 * rng_unit(rs));
        double v = (rng_next(rs) & 1) ? t + off : t - off;
        if ((!d->ranged || (v >= d->lo && v <= d->hi)) && !near_kink(d->k, v, d->step)) return v;
      }
    }
  }
  double v = 0;
  for (int tries = 0; tries < 64; tries++) {
    if (d->ranged) v = d->lo + (d->hi - d->lo) * rng_unit(rs);
    else {
      double m = 0.1 + (d->mag - 0.1) * rng_unit(rs);
      v = d->positive || (rng_next(rs) & 1) ? m : -m;
    }
    if (!near_kink(d->k, v, d->step)) break;
  }
  return v;
}

/* One program's tensors: every argument, as host memory of the CPU context. */
typedef struct gc_arg {
  coda_arg_info info;
  int64_t rows, cols;
  double *v;          /* f64 (i32 inputs: int32_t storage) */
  int is_finish;
} gc_arg;

typedef struct gc_prog {
  coda_program p;
  int64_t M, N;
  int nargs;
  gc_arg *a;
  double *accA, *eye; /* acc = accA * eye^T when the program reads acc */
  int uses_acc;
  coda_args args;
} gc_prog;

static int gc_find(const gc_prog *g, const char *name) {
  for (int i = 0; name && i < g->nargs; i++)
    if (!strcmp(g->a[i].info.name, name)) return i;
  return -1;
}
static int is_input_kind(coda_arg_kind k) {
  return k == CODA_ARG_ROW || k == CODA_ARG_COL || k == CODA_ARG_SCALAR || k == CODA_ARG_TILE ||
         ir_kind_is_partials(k);
}
static size_t gc_count(const gc_arg *a) { return (size_t)(a->rows * a->cols); }

static void gc_free(gc_prog *g) {
  for (int i = 0; g->a && i < g->nargs; i++) free(g->a[i].v);
  free(g->a);
  free(g->accA);
  free(g->eye);
  coda_args_destroy(g->args);
  coda_program_destroy(g->p);
  memset(g, 0, sizeof *g);
}

/* Shapes of every argument for domain M x N; a rowsum input gets one
 * partial column. Returns CODA_ERR_SHAPE when N does not fit. */
static coda_status gc_shapes(gc_prog *g, int64_t M, int64_t N, coda_tiling tl) {
  for (int i = 0; i < g->nargs; i++) {
    gc_arg *a = &g->a[i];
    coda_status s = coda_program_arg_shape(g->p, a->info.name, M, N, tl.tile_m, tl.tile_n,
                                           &a->rows, &a->cols);
    if (s) return s;
    if (ir_kind_is_partials(a->info.kind)) a->cols = 1;
  }
  return CODA_OK;
}

static coda_status gc_setup(coda_context ctx, coda_program src, const char *which, gc_prog *g) {
  memset(g, 0, sizeof *g);
  coda_status s = coda_program_exact(ctx, src, &g->p);
  if (s) return s;
  for (int i = 0; i < g->p->ninputs; i++)
    if (g->p->inputs[i].width == CODA_WIDTH_X2)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s program: input '%s' is x2 (16-bit packing, no exact mode): check "
                       "the pair-mode form of the program", which, g->p->inputs[i].name);
  for (int i = 0; i < g->p->noutputs; i++)
    if (g->p->outputs[i].width == CODA_WIDTH_X2)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "%s program: output '%s' is x2 (16-bit packing, no exact mode): check "
                       "the pair-mode form of the program", which, g->p->outputs[i].name);
  g->nargs = coda_program_num_args(g->p);
  g->a = calloc((size_t)(g->nargs ? g->nargs : 1), sizeof *g->a);
  if (!g->a) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
  int seen_reduce = 0;
  for (int i = 0; i < g->nargs; i++) {
    coda_program_arg(g->p, i, &g->a[i].info);
    if (g->a[i].info.kind == CODA_ARG_PARTIAL) seen_reduce = 1;
    else if (seen_reduce) g->a[i].is_finish = 1;
  }
  g->uses_acc = reads_acc(g->p);
  return coda_args_create(ctx, &g->args);
}

static coda_status gc_alloc(coda_context ctx, gc_prog *g, int64_t M, int64_t N) {
  g->M = M;
  g->N = N;
  for (int i = 0; i < g->nargs; i++) {
    gc_arg *a = &g->a[i];
    size_t n = gc_count(a);
    a->v = calloc(n ? n : 1, sizeof(double));
    if (!a->v) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    coda_dtype t = a->info.dtype == CODA_I32 ? CODA_I32 : CODA_F64;
    coda_tensor v = coda_tensor_2d(a->v, t, a->rows, a->cols);
    coda_status s = coda_args_set(g->args, a->info.name, &v);
    if (s) return s;
  }
  if (g->uses_acc) {
    g->accA = calloc((size_t)(M * N > 0 ? M * N : 1), sizeof(double));
    g->eye = calloc((size_t)(N * N > 0 ? N * N : 1), sizeof(double));
    if (!g->accA || !g->eye) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    for (int64_t i = 0; i < N; i++) g->eye[i * N + i] = 1;
  }
  return CODA_OK;
}

/* Runs the program and its finishers on the bound values. Accumulating
 * outputs start from zero. */
static coda_status gc_run(coda_context ctx, gc_prog *g, coda_tiling tl) {
  for (int i = 0; i < g->nargs; i++)
    if (!is_input_kind(g->a[i].info.kind) || g->a[i].is_finish)
      memset(g->a[i].v, 0, gc_count(&g->a[i]) * sizeof(double));
  coda_status s;
  if (g->uses_acc) {
    coda_tensor A = coda_tensor_2d(g->accA, CODA_F64, g->M, g->N);
    coda_tensor B = coda_tensor_2d(g->eye, CODA_F64, g->N, g->N);
    s = coda_gemm_epilogue(ctx, g->p, CODA_N, &A, CODA_T, &B, g->args, tl);
  } else {
    s = coda_map(ctx, g->p, g->M, g->N, g->args, tl);
  }
  for (int i = 0; !s && i < g->nargs; i++)
    if (g->a[i].is_finish) s = coda_finish(ctx, g->p, g->a[i].info.name, g->args, g->M, g->N, tl);
  return s;
}

/* The values of forward tensor `name` ("acc": the accumulator) and their shape. */
static double *gc_values(gc_prog *g, const char *name, int64_t *rows, int64_t *cols) {
  if (!strcmp(name, "acc")) {
    if (!g->uses_acc) return NULL;
    *rows = g->M;
    *cols = g->N;
    return g->accA;
  }
  int k = gc_find(g, name);
  if (k < 0) return NULL;
  *rows = g->a[k].rows;
  *cols = g->a[k].cols;
  return g->a[k].v;
}

typedef struct seed {
  int fwd;      /* forward argument */
  double *dy;   /* its gradient, same shape */
} seed;

static double gc_loss(const gc_prog *f, const seed *sd, int nseed) {
  double L = 0;
  for (int i = 0; i < nseed; i++) {
    const gc_arg *a = &f->a[sd[i].fwd];
    size_t n = gc_count(a);
    for (size_t j = 0; j < n; j++) L += sd[i].dy[j] * a->v[j];
  }
  return L;
}

static const char *role_word(coda_grad_role r) {
  switch (r) {
  case CODA_GRAD_WRT: return "wrt";
  case CODA_GRAD_SEED: return "grad";
  case CODA_GRAD_SAVE: return "save";
  case CODA_GRAD_DOT: return "dot";
  case CODA_GRAD_VALUE: return "value";
  case CODA_GRAD_RANGE: return "range";
  }
  return "?";
}

/* Every link names what its role needs in the two programs; *nwrt the
 * wrt links. */
static coda_status check_links(coda_context ctx, const gc_prog *f, const gc_prog *b,
                               const coda_grad_link *links, int nlinks, int *nwrt) {
  *nwrt = 0;
  for (int i = 0; i < nlinks; i++) {
    const coda_grad_link *l = &links[i];
    int fk = l->fwd ? gc_find(f, l->fwd) : -1, bk = l->bwd ? gc_find(b, l->bwd) : -1;
    int facc = l->fwd && !strcmp(l->fwd, "acc"), bacc = l->bwd && !strcmp(l->bwd, "acc");
    const char *bad = NULL;
    switch (l->role) {
    case CODA_GRAD_WRT:
      if (!(facc ? f->uses_acc : fk >= 0 && is_input_kind(f->a[fk].info.kind) && !f->a[fk].is_finish &&
                                    f->a[fk].info.dtype != CODA_I32))
        bad = "the forward has no floating input of that name";
      else if (bk < 0 || (is_input_kind(b->a[bk].info.kind) && !b->a[bk].is_finish))
        bad = "the backward has no output or finisher of that name";
      else if ((*nwrt)++ >= CODA_GRADCHECK_MAX) bad = "too many wrt links";
      break;
    case CODA_GRAD_SEED:
      if (fk < 0 || (is_input_kind(f->a[fk].info.kind) && !f->a[fk].is_finish))
        bad = "the forward has no output or finisher of that name";
      else if (!(bacc ? b->uses_acc : bk >= 0 && is_input_kind(b->a[bk].info.kind) && !b->a[bk].is_finish))
        bad = "the backward has no input of that name (or `acc` it reads)";
      break;
    case CODA_GRAD_SAVE:
      if (fk < 0 && !(facc && f->uses_acc)) bad = "the forward has no argument of that name";
      else if (bk < 0 || !is_input_kind(b->a[bk].info.kind) || b->a[bk].is_finish)
        bad = "the backward has no input of that name";
      break;
    case CODA_GRAD_DOT:
      if (fk < 0) bad = "the forward has no output of that name";
      else if (bk < 0 || (b->a[bk].info.kind != CODA_ARG_ROW && b->a[bk].info.kind != CODA_ARG_ROWSUM) ||
               b->a[bk].is_finish)
        bad = "the backward has no row or rowsum input of that name";
      else {
        int seeded = 0;
        for (int j = 0; j < nlinks; j++)
          seeded |= links[j].role == CODA_GRAD_SEED && links[j].fwd && !strcmp(links[j].fwd, l->fwd);
        if (!seeded) bad = "the forward output has no gradient (grad link)";
      }
      break;
    case CODA_GRAD_VALUE:
      if (!l->fwd && !l->bwd) bad = "names neither program";
      else if (l->fwd && facc && !f->uses_acc) bad = "the forward does not read acc";
      else if (l->fwd && !facc && (fk < 0 || !is_input_kind(f->a[fk].info.kind) || f->a[fk].is_finish))
        bad = "the forward has no input of that name";
      else if (l->bwd && (bk < 0 || !is_input_kind(b->a[bk].info.kind) || b->a[bk].is_finish))
        bad = "the backward has no input of that name";
      break;
    case CODA_GRAD_RANGE:
      if (facc && !f->uses_acc) bad = "the forward does not read acc";
      else if (!facc && (fk < 0 || !is_input_kind(f->a[fk].info.kind) || f->a[fk].is_finish))
        bad = "the forward has no input of that name (or acc)";
      else if (!(l->lo <= l->hi) || !isfinite(l->lo) || !isfinite(l->hi))
        bad = "needs finite lo <= hi";
      break;
    default: bad = "unknown role";
    }
    if (bad) {
      if (l->role == CODA_GRAD_RANGE)
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gradcheck: range link %s=%.17g:%.17g: %s",
                      l->fwd ? l->fwd : "", l->lo, l->hi, bad);
      else if (l->role == CODA_GRAD_VALUE)
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gradcheck: value link %s=%.17g: %s",
                      l->fwd ? l->fwd : l->bwd ? l->bwd : "", l->lo, bad);
      else
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gradcheck: %s link %s=%s: %s",
                      role_word(l->role), l->fwd ? l->fwd : "", l->bwd ? l->bwd : "", bad);
    }
  }
  return CODA_OK;
}

/* The forward's inputs drawn (values and ranges of the links, away from
 * the program's kinks) and the seeds dy of its linked outputs. */
static coda_status fill_forward(coda_context ctx, gc_prog *f, const coda_grad_link *links, int nlinks,
                                const coda_gradcheck_options *o, uint64_t *rs, seed *sd, int *nseed) {
  gc_kinks kinks;
  gc_find_kinks(f->p, &kinks);
  for (int i = 0; i < f->nargs; i++) {
    gc_arg *a = &f->a[i];
    if (!is_input_kind(a->info.kind) || a->is_finish) continue;
    size_t n = gc_count(a);
    const coda_grad_link *val = NULL, *rng = NULL;
    for (int j = 0; j < nlinks; j++) {
      if (!links[j].fwd || strcmp(links[j].fwd, a->info.name)) continue;
      if (links[j].role == CODA_GRAD_VALUE) val = &links[j];
      if (links[j].role == CODA_GRAD_RANGE) rng = &links[j];
    }
    gc_draw dr = {&kinks, o->step, o->points, rng != NULL, rng ? rng->lo : 0, rng ? rng->hi : 0, 1.0,
                  ir_kind_is_partials(a->info.kind) || a->info.kind == CODA_ARG_SCALAR};
    for (size_t e = 0; e < n; e++) {
      double v;
      if (val) v = val->lo;
      else if (a->info.dtype == CODA_I32 && !rng)
        v = (double)(int64_t)(rng_next(rs) % (uint64_t)(o->N + 1)) - 1;
      else if (a->info.dtype == CODA_I32) v = floor(rng->lo + (rng->hi - rng->lo) * rng_unit(rs));
      else v = gc_draw_value(&dr, rs);
      if (a->info.dtype == CODA_I32) ((int32_t *)a->v)[e] = (int32_t)v;
      else a->v[e] = v;
    }
  }
  if (f->uses_acc) {
    const coda_grad_link *val = NULL, *rng = NULL;
    for (int j = 0; j < nlinks; j++)
      if (links[j].fwd && !strcmp(links[j].fwd, "acc") &&
          (links[j].role == CODA_GRAD_VALUE || links[j].role == CODA_GRAD_RANGE)) {
        if (links[j].role == CODA_GRAD_VALUE) val = &links[j];
        else rng = &links[j];
      }
    /* acc: ±[0.1, 4) by default, wide enough to cross the usual thresholds */
    gc_draw dr = {&kinks, o->step, o->points, rng != NULL, rng ? rng->lo : 0, rng ? rng->hi : 0, 4.0, 0};
    for (int64_t e = 0; e < o->M * o->N; e++) f->accA[e] = val ? val->lo : gc_draw_value(&dr, rs);
  }
  for (int i = 0; i < nlinks; i++) {
    if (links[i].role != CODA_GRAD_SEED) continue;
    int k = gc_find(f, links[i].fwd), dup = 0;
    for (int j = 0; j < *nseed; j++) dup |= sd[j].fwd == k;
    if (dup) continue;
    size_t n = gc_count(&f->a[k]);
    sd[*nseed].fwd = k;
    sd[*nseed].dy = malloc((n ? n : 1) * sizeof(double));
    if (!sd[*nseed].dy) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    for (size_t e = 0; e < n; e++) sd[*nseed].dy[e] = rng_signed(rs);
    (*nseed)++;
  }
  return CODA_OK;
}

/* The backward's N: the first of N, N/2, 2N where every linked backward
 * argument has the shape of its forward tensor. */
static coda_status backward_n(coda_context ctx, gc_prog *f, gc_prog *b, const coda_grad_link *links,
                              int nlinks, const coda_gradcheck_options *o, coda_tiling tl, int64_t *out) {
  int64_t cand[3] = {o->N, o->N / 2, 2 * o->N}, Nb = -1;
  char why[256] = "";
  for (int c = 0; c < 3 && Nb < 0; c++) {
    if (cand[c] < 1 || gc_shapes(b, o->M, cand[c], tl)) continue;
    int ok = 1;
    for (int i = 0; i < nlinks && ok; i++) {
      const coda_grad_link *l = &links[i];
      if (l->role == CODA_GRAD_VALUE || l->role == CODA_GRAD_RANGE) continue;
      int64_t fr, fc, br, bc;
      if (!gc_values(f, l->fwd, &fr, &fc)) { ok = 0; break; }
      if (l->role == CODA_GRAD_DOT) { fc = 1; }
      if (!strcmp(l->bwd, "acc")) { br = o->M; bc = cand[c]; }
      else { int k = gc_find(b, l->bwd); br = b->a[k].rows; bc = b->a[k].cols; }
      if (l->role == CODA_GRAD_WRT) /* a vector or scalar: summed over what it broadcasts to */
        ok = (fr == br || fr == 1) && (fc == bc || fc == 1);
      else ok = fr == br && fc == bc;
      if (!ok && !why[0])
        snprintf(why, sizeof why, ": at N = %lld, %s %s=%s has forward %lld x %lld, backward %lld x %lld%s",
                 (long long)cand[c], role_word(l->role), l->fwd, l->bwd, (long long)fr, (long long)fc,
                 (long long)br, (long long)bc,
                 l->role == CODA_GRAD_WRT ? " (a wrt gradient has the forward's shape or sums to it "
                                            "over rows or columns where the forward has 1)" : "");
    }
    if (ok) Nb = cand[c];
  }
  if (Nb < 0)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                  "gradcheck: no backward N (of %lld, %lld, %lld) gives every linked backward "
                  "argument the shape of its forward tensor%s",
                  (long long)cand[0], (long long)cand[1], (long long)cand[2], why);
  *out = Nb;
  return CODA_OK;
}

/* The backward's inputs: each from its link (a seed, a saved forward
 * tensor, a dot of y and dy, a value) or the forward tensor of its name. */
static coda_status fill_backward(coda_context ctx, gc_prog *f, gc_prog *b, const coda_grad_link *links,
                                 int nlinks, const seed *sd, int nseed, int64_t M, int64_t Nb) {
  for (int i = -1; i < b->nargs; i++) {
    const char *name = i < 0 ? "acc" : b->a[i].info.name;
    if (i < 0 && !b->uses_acc) continue;
    if (i >= 0 && (!is_input_kind(b->a[i].info.kind) || b->a[i].is_finish)) continue;
    double *dst = i < 0 ? b->accA : b->a[i].v;
    size_t n = i < 0 ? (size_t)(M * Nb) : gc_count(&b->a[i]);
    const coda_grad_link *l = NULL;
    for (int j = 0; j < nlinks && !l; j++)
      if (links[j].bwd && !strcmp(links[j].bwd, name) && links[j].role != CODA_GRAD_WRT &&
          links[j].role != CODA_GRAD_RANGE)
        l = &links[j];
    int64_t fr, fc;
    if (!l) {
      const double *src = gc_values(f, name, &fr, &fc);
      if (!src || fr * fc != (int64_t)n)
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                      "gradcheck: backward input '%s' is not linked to the forward (give it a "
                      "grad, save, dot or value link)%s", name,
                      src ? ": the forward tensor of that name has another shape" : "");
      memcpy(dst, src, n * sizeof(double));
      continue;
    }
    if (l->role == CODA_GRAD_VALUE) {
      for (size_t e = 0; e < n; e++) {
        if (i >= 0 && b->a[i].info.dtype == CODA_I32) ((int32_t *)dst)[e] = (int32_t)l->lo;
        else dst[e] = l->lo;
      }
    } else if (l->role == CODA_GRAD_SAVE) {
      memcpy(dst, gc_values(f, l->fwd, &fr, &fc), n * sizeof(double));
    } else {
      int k = gc_find(f, l->fwd);
      const double *dy = NULL;
      for (int j = 0; j < nseed; j++)
        if (sd[j].fwd == k) dy = sd[j].dy;
      if (l->role == CODA_GRAD_SEED) {
        memcpy(dst, dy, n * sizeof(double));
      } else { /* DOT: row sums of y * dy */
        const gc_arg *a = &f->a[k];
        for (int64_t m = 0; m < a->rows; m++) {
          double acc = 0;
          for (int64_t c = 0; c < a->cols; c++) acc += a->v[m * a->cols + c] * dy[m * a->cols + c];
          dst[m] = acc;
        }
      }
    }
  }
  return CODA_OK;
}

/* Each wrt link: the backward's gradient (summed where the forward
 * broadcasts) against central differences of the seeded loss. */
static coda_status finite_differences(coda_context ctx, gc_prog *f, gc_prog *b, const coda_grad_link *links,
                                      int nlinks, const seed *sd, int nseed,
                                      const coda_gradcheck_options *o, coda_tiling tl,
                                      coda_gradcheck_report *out) {
  coda_status s = CODA_OK;
  double *gsum = NULL;
  out->pass = 1;
  for (int i = 0; i < nlinks; i++) {
    const coda_grad_link *l = &links[i];
    if (l->role != CODA_GRAD_WRT) continue;
    coda_gradcheck_entry *e = &out->entry[out->nentries++];
    e->fwd = l->fwd;
    e->bwd = l->bwd;
    int64_t fr = 0, fc = 0;
    double *x = gc_values(f, l->fwd, &fr, &fc);
    const double *gb = b->a[gc_find(b, l->bwd)].v;
    int64_t br = b->a[gc_find(b, l->bwd)].rows, bc = b->a[gc_find(b, l->bwd)].cols;
    if (!((fr == br || fr == 1) && (fc == bc || fc == 1))) {
      s = coda_fail(ctx, CODA_ERR_SHAPE,
                    "gradcheck: wrt %s=%s: backward %lld x %lld, forward %lld x %lld", l->fwd,
                    l->bwd, (long long)br, (long long)bc, (long long)fr, (long long)fc);
      goto fail;
    }
    /* the reference of a broadcast input: the backward summed over the
     * rows (columns) where the forward tensor has one */
    free(gsum);
    gsum = calloc((size_t)(fr * fc > 0 ? fr * fc : 1), sizeof(double));
    if (!gsum) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "gradcheck: out of memory"); goto fail; }
    for (int64_t r = 0; r < br; r++)
      for (int64_t c = 0; c < bc; c++)
        gsum[(fr == 1 ? 0 : r) * fc + (fc == 1 ? 0 : c)] += gb[r * bc + c];
    const double *g = gsum;
    double maxerr = 0, maxfd = 0;
    for (int64_t j = 0; j < fr * fc; j++) {
      double x0 = x[j], h = o->step * (fabs(x0) > 1 ? fabs(x0) : 1);
      x[j] = x0 + h;
      if ((s = gc_run(ctx, f, tl))) goto fail;
      double lp = gc_loss(f, sd, nseed);
      x[j] = x0 - h;
      if ((s = gc_run(ctx, f, tl))) goto fail;
      double lm = gc_loss(f, sd, nseed);
      x[j] = x0;
      out->evaluations += 2;
      double fd = (lp - lm) / (2 * h), d = fabs(g[j] - fd);
      if (!(d <= maxerr)) { /* NaN sticks */
        maxerr = d;
        e->worst_row = j / fc;
        e->worst_col = j % fc;
      }
      if (fabs(fd) > maxfd) maxfd = fabs(fd);
    }
    e->max_abs_err = maxerr;
    e->max_abs_fd = maxfd;
    e->rel_err = maxfd > 0 ? maxerr / maxfd : maxerr == 0 ? 0 : isnan(maxerr) ? NAN : INFINITY;
    e->pass = e->rel_err <= o->tol;
    out->pass &= e->pass;
  }
fail:
  free(gsum);
  return s;
}

coda_status coda_program_gradcheck(coda_context ctx, coda_program fwd, coda_program bwd,
                                   const coda_grad_link *links, int nlinks,
                                   const coda_gradcheck_options *opt,
                                   coda_gradcheck_report *out) {
  coda_status s = need_exact_cpu(ctx, "coda_program_gradcheck");
  if (s) return s;
  if (!fwd || !bwd || !out || (nlinks > 0 && !links) || nlinks < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_gradcheck: NULL argument");
  memset(out, 0, sizeof *out);
  coda_gradcheck_options o = coda_gradcheck_default_options();
  static const coda_options_layout layouts[] = {
      CODA_OPTIONS_LAYOUT_OLD(gradcheck_options_v1, tol),
      CODA_OPTIONS_LAYOUT(coda_gradcheck_options)};
  if (opt && (s = coda_options_take(ctx, "coda_gradcheck_options", opt, &o, layouts, 2)))
    return s;
  if (o.M < 1 || o.N < 1 || o.M * o.N > (1 << 16) || !(o.step > 0) || !(o.tol > 0))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gradcheck: M, N >= 1 with M N <= 65536, step and tol > 0");
  gc_prog f, b;
  seed sd[CODA_MAX_OUTPUTS + CODA_MAX_FINISHES];
  int nseed = 0;
  memset(sd, 0, sizeof sd);
  memset(&b, 0, sizeof b);
  coda_tiling tl = {64, 128};
  uint64_t rs = 0x9e3779b97f4a7c15ull ^ o.seed;
  if (!rs) rs = 1;
  if ((s = gc_setup(ctx, fwd, "forward", &f))) goto done;
  if ((s = gc_setup(ctx, bwd, "backward", &b))) goto done;

  /* links name existing things */
  int nwrt = 0;
  if ((s = check_links(ctx, &f, &b, links, nlinks, &nwrt))) goto done;
  if (!nwrt) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gradcheck: no wrt link: nothing to check");
    goto done;
  }

  /* forward: shapes, values */
  if ((s = gc_shapes(&f, o.M, o.N, tl))) {
    s = coda_fail(ctx, s, "gradcheck: the forward has no valid shapes for %lld x %lld",
                  (long long)o.M, (long long)o.N);
    goto done;
  }
  if ((s = gc_alloc(ctx, &f, o.M, o.N))) goto done;
  if ((s = fill_forward(ctx, &f, links, nlinks, &o, &rs, sd, &nseed))) goto done;
  if ((s = gc_run(ctx, &f, tl))) goto done;
  out->evaluations = 1;

  /* backward N: the candidate where every linked shape agrees */
  int64_t Nb = -1;
  if ((s = backward_n(ctx, &f, &b, links, nlinks, &o, tl, &Nb))) goto done;
  gc_shapes(&b, o.M, Nb, tl);
  if ((s = gc_alloc(ctx, &b, o.M, Nb))) goto done;
  out->bwd_N = Nb;
  /* backward inputs: each from a link, or the forward tensor of its name */
  if ((s = fill_backward(ctx, &f, &b, links, nlinks, sd, nseed, o.M, Nb))) goto done;
  if ((s = gc_run(ctx, &b, tl))) goto done;

  /* finite differences */
  if ((s = finite_differences(ctx, &f, &b, links, nlinks, sd, nseed, &o, tl, out))) goto done;
  if ((s = gc_run(ctx, &f, tl))) goto done; /* leave the forward at X */

done:
  for (int i = 0; i < nseed; i++) free(sd[i].dy);
  gc_free(&f);
  gc_free(&b);
  return s;
}
