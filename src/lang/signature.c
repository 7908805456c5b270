/* A program's signature: its arguments resolved once, when the program is
 * validated (ir_signature_build), with the rule of each one's shape, so
 * that a run binds tensors by index; the public introspection
 * (coda_program_arg, coda_program_arg_shape) reads the same table. */
#include "lang/ir.h"
#include "base/internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ building */

static ir_arg make_arg(const char *name, ir_role role, coda_arg_kind kind, coda_dtype dtype) {
  ir_arg a;
  memset(&a, 0, sizeof a);
  snprintf(a.name, sizeof a.name, "%s", name);
  a.role = role;
  a.kind = kind;
  a.dtype = dtype;
  a.width = CODA_WIDTH_FULL;
  a.rows = IR_DIM_M;
  a.cols = IR_DIM_N;
  a.noun = role == IR_ROLE_INPUT     ? ir_input_kind_noun(kind)
           : role == IR_ROLE_OUTPUT  ? "output"
           : role == IR_ROLE_PARTIAL ? "partial"
                                     : "finisher result";
  return a;
}

static ir_dim width_cols(coda_width w) {
  return w == CODA_WIDTH_X2 ? IR_DIM_2N : w == CODA_WIDTH_HALF ? IR_DIM_HALF_N : IR_DIM_N;
}

static ir_arg input_arg(const ir_input *in) {
  ir_arg a = make_arg(in->name, IR_ROLE_INPUT, in->kind, in->dtype);
  a.width = in->width;
  a.reads = 1;
  ir_dim cols; /* the kind's rules (lang/kinds.def) */
  ir_input_kind_dims(in->kind, &a.rows, &cols);
  a.cols = cols == IR_DIM_WIDTH ? width_cols(in->width) : cols;
  return a;
}

/* A reduction's partials: the shape its part gives them. */
static ir_arg partial_arg(const ir_reduce *r) {
  ir_arg a = make_arg(r->name, IR_ROLE_PARTIAL, CODA_ARG_PARTIAL, CODA_F32);
  a.writes = 1;
  a.segment = r->segment;
  a.part = ir_reduce_part(r->kind);
  switch (a.part) {
  case IR_PART_COL: a.rows = IR_DIM_ROW_TILES; break;
  case IR_PART_PICK: a.cols = IR_DIM_ONE; break;
  case IR_PART_SEG: a.cols = IR_DIM_SEG_TILES; break;
  case IR_PART_ROW: a.cols = IR_DIM_COL_TILES; break;
  case IR_PART_TOTAL: /* one partial per row tile */
    a.rows = IR_DIM_ROW_TILES;
    a.cols = IR_DIM_ONE;
    break;
  }
  return a;
}

/* Finisher f's result: a vector along the side its partials keep, or
 * one value (a total). */
static ir_arg result_arg(const struct coda_program_s *p, int f) {
  const ir_reduce *r = &p->reduces[p->finishes[f].reduce];
  ir_arg a = make_arg(p->finishes[f].name, IR_ROLE_RESULT, ir_finish_arg_kind(p, f), CODA_F32);
  a.reads = 1;
  a.writes = ir_needs_passes(p); /* a pass list finishes it during the run */
  a.segment = r->segment;
  a.part = ir_reduce_part(r->kind);
  if (a.part == IR_PART_COL) a.rows = IR_DIM_ONE;
  else if (a.part == IR_PART_TOTAL) a.rows = a.cols = IR_DIM_ONE;
  else a.cols = ir_reduce_is_segmented(r->kind) ? IR_DIM_SEGS : IR_DIM_ONE;
  return a;
}

static void build(const struct coda_program_s *p, ir_signature *g) {
  memset(g, 0, sizeof *g);
  for (int i = 0; i < p->ninputs; i++) {
    g->args[g->nargs++] = input_arg(&p->inputs[i]);
    g->needs_exact |= p->inputs[i].dtype == CODA_F64;
  }
  for (int i = 0; i < p->noutputs; i++) {
    const ir_output *o = &p->outputs[i];
    ir_arg a = make_arg(o->name, IR_ROLE_OUTPUT, CODA_ARG_OUTPUT, o->dtype);
    a.width = o->width;
    a.accumulate = o->accumulate;
    a.cols = width_cols(o->width);
    a.writes = 1;
    a.reads = o->accumulate;
    g->args[g->nargs++] = a;
    g->needs_exact |= o->dtype == CODA_F64;
  }
  for (int i = 0; i < p->nreduces; i++) g->args[g->nargs++] = partial_arg(&p->reduces[i]);
  for (int i = 0; i < p->nfinishes; i++) g->args[g->nargs++] = result_arg(p, i);
  for (int i = 0; i < p->nparams; i++) g->unset_params += !p->params[i].has_value;
  for (int i = 0; i < p->ninstrs; i++) g->reads_acc |= p->instrs[i].code == IR_ACC;
  g->ok = 1;
}

void ir_signature_build(struct coda_program_s *p) { build(p, &p->sig); }

/* p's signature: the one built at validation, else built now into tmp (a
 * program assembled by hand and never validated). */
static const ir_signature *sig_of(const struct coda_program_s *p, ir_signature *tmp) {
  if (p->sig.ok) return &p->sig;
  build(p, tmp);
  return tmp;
}

int ir_arg_find(const struct coda_program_s *p, const char *name) {
  for (int i = 0; i < p->sig.nargs; i++)
    if (!strcmp(p->sig.args[i].name, name)) return i;
  return -1;
}

/* ------------------------------------------------------------- shapes */

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* The reason N and tile_n do not suit p's mode, in why; CODA_OK if they do. */
static coda_status domain_error(const struct coda_program_s *p, int64_t N, int tile_n, char *why, size_t n) {
  if (!p->pair_mode) return CODA_OK;
  if (N % 2 != 0) {
    snprintf(why, n, "pair mode needs an even N, found %lld", (long long)N);
    return CODA_ERR_SHAPE;
  }
  const int64_t S = ir_split_width(p, N);
  if (S <= 0 || N == 0) return CODA_OK;
  if (N % S != 0) {
    snprintf(why, n, "mode pair split %lld needs N a multiple of the segment, found N = %lld",
             (long long)S, (long long)N);
    return CODA_ERR_SHAPE;
  }
  if (tile_n > 0 && N > tile_n && tile_n % S != 0 && (S / 2) % tile_n != 0) {
    snprintf(why, n,
             "half-split pairs of segment %lld and tile_n %d: a tile must hold whole segments "
             "(tile_n %% S == 0) or lie in one half of a segment ((S/2) %% tile_n == 0)",
             (long long)S, tile_n);
    return CODA_ERR_SHAPE;
  }
  return CODA_OK;
}

coda_status ir_check_domain(coda_context ctx, const struct coda_program_s *p, int64_t N, int tile_n) {
  char why[256];
  coda_status s = domain_error(p, N, tile_n, why, sizeof why);
  return s ? coda_fail(ctx, s, "%s", why) : CODA_OK;
}

/* Columns of a segmented partial: one per interval between boundaries at
 * multiples of S and of tile_n; with one dividing the other that is
 * ceil(N / min(S, tile_n)). */
static coda_status segment_cols(int64_t N, int S, int tile_n, int64_t *cols) {
  if (S % tile_n != 0 && tile_n % S != 0) return CODA_ERR_SHAPE;
  *cols = ceil_div(N, S < tile_n ? S : tile_n);
  return CODA_OK;
}

/* One extent by its rule; CODA_ERR_SHAPE for a segment that does not suit tile_n. */
static coda_status extent(const ir_arg *a, ir_dim d, int64_t M, int64_t N, int tile_m, int tile_n,
                          int64_t *out) {
  switch (d) {
  case IR_DIM_ONE: *out = 1; break;
  case IR_DIM_M: *out = M; break;
  case IR_DIM_N: *out = N; break;
  case IR_DIM_2N: *out = 2 * N; break;
  case IR_DIM_HALF_N: *out = N / 2; break;
  case IR_DIM_ROW_TILES: *out = ceil_div(M, tile_m); break;
  case IR_DIM_COL_TILES: *out = ceil_div(N, tile_n); break;
  case IR_DIM_SEG_TILES: return segment_cols(N, a->segment, tile_n, out);
  case IR_DIM_SEGS:
    if (segment_cols(N, a->segment, tile_n, out)) return CODA_ERR_SHAPE;
    *out = ceil_div(N, a->segment);
    break;
  case IR_DIM_ANY:
  case IR_DIM_WIDTH: *out = 0; break; /* WIDTH: resolved when the signature is built */
  }
  return CODA_OK;
}

coda_status ir_arg_shape(const struct coda_program_s *p, int i, int64_t M, int64_t N, int tile_m,
                         int tile_n, int64_t *rows, int64_t *cols) {
  const ir_arg *a = &p->sig.args[i];
  coda_status s = extent(a, a->rows, M, N, tile_m, tile_n, rows);
  return s ? s : extent(a, a->cols, M, N, tile_m, tile_n, cols);
}

/* ---------------------------------------------------------------- runs */

/* Argument i of a run as coda_check_args takes it. */
static coda_arg_check bound_arg(const struct coda_program_s *p, int i, const ir_run *q) {
  const ir_arg *a = &p->sig.args[i];
  coda_arg_check c;
  memset(&c, 0, sizeof c);
  c.noun = a->noun;
  c.name = a->name;
  c.t = q->t[i];
  c.dtype = a->dtype;
  c.fp_result = a->role == IR_ROLE_PARTIAL || a->role == IR_ROLE_RESULT;
  c.any_cols = a->cols == IR_DIM_ANY;
  c.shape = ir_arg_shape(p, i, q->M, q->N, q->tiling.tile_m, q->tiling.tile_n, &c.rows, &c.cols);
  c.writes = a->role != IR_ROLE_INPUT;
  c.inplace = a->role == IR_ROLE_INPUT ? a->kind == CODA_ARG_TILE
                                       : a->role == IR_ROLE_OUTPUT && !a->accumulate;
  c.width = a->width;
  return c;
}

/* The arguments run q binds, appended to c: a GEMM's or map's inputs,
 * outputs and partials; a finish's partials and result. */
static void bound_args(const struct coda_program_s *p, const ir_run *q, coda_arg_check *c, int *n) {
  const int part0 = p->ninputs + p->noutputs, res0 = part0 + p->nreduces;
  if (q->finish < 0) {
    for (int i = 0; i < res0; i++) c[(*n)++] = bound_arg(p, i, q);
    return;
  }
  const ir_finish *f = &p->finishes[q->finish - res0];
  c[(*n)++] = bound_arg(p, part0 + f->reduce, q);
  if (f->reduce2 >= 0) c[(*n)++] = bound_arg(p, part0 + f->reduce2, q);
  c[(*n)++] = bound_arg(p, q->finish, q);
}

coda_status ir_run_check(coda_context ctx, struct coda_program_s *p, const ir_run *q,
                         coda_arg_check *c, int *n) {
  const ir_signature *g = &p->sig;
  const int res0 = p->ninputs + p->noutputs + p->nreduces;
  const int finish_ok = q->finish < 0 || (q->finish >= res0 && q->finish < g->nargs);
  const int64_t big = INT64_MAX / 4;
  /* what needs no message first: the arguments' shapes, where the run's
   * sizes allow them (when not, a check below fails) */
  if (g->ok && finish_ok && q->tiling.tile_m > 0 && q->tiling.tile_n > 0 && q->M >= 0 &&
      q->N >= 0 && q->M <= big && q->N <= big)
    bound_args(p, q, c, n);
  char why[256];
  const coda_status dom = domain_error(p, q->N, q->tiling.tile_n, why, sizeof why);
  int unset = -1;
  for (int i = 0; g->unset_params && i < p->nparams && unset < 0; i++)
    if (!p->params[i].has_value) unset = i;
  /* then the checks, in the order every run makes them */
  coda_status s;
  if (!g->ok)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "the program was changed after it was validated (validate it again)");
  const int exact = ctx && ctx->opts.precision == CODA_PRECISION_F64;
  if (g->needs_exact && !exact && (s = ir_check_precision(ctx, p))) return s;
  if (q->map && g->reads_acc)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_map: the program reads acc, which needs a GEMM (use coda_gemm_epilogue)");
  if (unset >= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, IR_PARAM_UNSET, q->what, p->params[unset].name);
  if ((s = coda_check_tiling(ctx, q->tiling)) || (s = coda_check_domain(ctx, q->M, q->N))) return s;
  if (dom) return coda_fail(ctx, dom, "%s", why);
  if (!finish_ok)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "the program has no finish statement '%s'",
                     q->finish_name ? q->finish_name : "?");
  if (q->unknown)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "binding '%s' is not an argument of the program",
                     q->unknown);
  return CODA_OK;
}

/* ------------------------------------------------------- introspection */

/* Argument i's name in its declaration. */
static const char *arg_name(const struct coda_program_s *p, int i) {
  if (i < p->ninputs) return p->inputs[i].name;
  if ((i -= p->ninputs) < p->noutputs) return p->outputs[i].name;
  if ((i -= p->noutputs) < p->nreduces) return p->reduces[i].name;
  return p->finishes[i - p->nreduces].name;
}

int coda_program_num_args(coda_program p) {
  return p ? p->ninputs + p->noutputs + p->nreduces + p->nfinishes : 0;
}

coda_status coda_program_arg(coda_program p, int i, coda_arg_info *info) {
  if (!p || !info || i < 0 || i >= coda_program_num_args(p)) return CODA_ERR_INVALID_ARGUMENT;
  memset(info, 0, sizeof *info);
  ir_signature tmp;
  const ir_arg *a = &sig_of(p, &tmp)->args[i];
  info->name = arg_name(p, i);
  info->kind = a->kind;
  info->dtype = a->dtype;
  info->width = a->width;
  info->accumulate = a->accumulate;
  return CODA_OK;
}

coda_status coda_program_arg_shape(coda_program p, const char *name, int64_t M,
                                   int64_t N, int tile_m, int tile_n,
                                   int64_t *rows, int64_t *cols) {
  if (!p || !name || !rows || !cols) return CODA_ERR_INVALID_ARGUMENT;
  if (M < 0 || N < 0 || tile_m <= 0 || tile_n <= 0) return CODA_ERR_INVALID_ARGUMENT;
  if (N > INT64_MAX / 2) return CODA_ERR_OVERFLOW;
  if (ir_check_domain(NULL, p, N, tile_n)) return CODA_ERR_SHAPE;
  ir_signature tmp;
  const ir_signature *g = sig_of(p, &tmp);
  for (int i = 0; i < g->nargs; i++)
    if (!strcmp(g->args[i].name, name)) {
      int64_t r = 0, c = 0;
      const ir_arg *a = &g->args[i];
      coda_status s = extent(a, a->rows, M, N, tile_m, tile_n, &r);
      if (!s) s = extent(a, a->cols, M, N, tile_m, tile_n, &c);
      if (s) return s;
      *rows = r;
      *cols = c;
      return CODA_OK;
    }
  return CODA_ERR_INVALID_ARGUMENT;
}

coda_status coda_program_arg_ctx(coda_context ctx, coda_program p, int i, coda_arg_info *info) {
  if (!p || !info)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_arg: %s is NULL", p ? "info" : "program");
  coda_status s = coda_program_arg(p, i, info);
  if (s)
    return coda_fail(ctx, s, "coda_program_arg: index %d out of range (the program has %d arguments)",
                     i, coda_program_num_args(p));
  return CODA_OK;
}

coda_status coda_program_arg_shape_ctx(coda_context ctx, coda_program p, const char *name,
                                       int64_t M, int64_t N, int tile_m, int tile_n,
                                       int64_t *rows, int64_t *cols) {
  coda_status s = coda_program_arg_shape(p, name, M, N, tile_m, tile_n, rows, cols);
  if (s == CODA_OK) return s;
  if (!p || !name || !rows || !cols)
    return coda_fail(ctx, s, "coda_program_arg_shape: NULL argument");
  if (M < 0 || N < 0)
    return coda_fail(ctx, s, "argument '%s': negative domain %lld x %lld", name, (long long)M, (long long)N);
  if (tile_m <= 0 || tile_n <= 0)
    return coda_fail(ctx, s, "argument '%s': tiling %d x %d is not positive", name, tile_m, tile_n);
  if (s == CODA_ERR_OVERFLOW) return coda_fail(ctx, s, "argument '%s': N = %lld overflows", name, (long long)N);
  char why[256];
  if (s == CODA_ERR_SHAPE && domain_error(p, N, tile_n, why, sizeof why))
    return coda_fail(ctx, s, "argument '%s': %s", name, why);
  int k = ir_find_reduce(p, name), seg = 0;
  if (k >= 0) seg = p->reduces[k].segment;
  else if ((k = ir_find_finish(p, name)) >= 0) seg = p->reduces[p->finishes[k].reduce].segment;
  if (s == CODA_ERR_SHAPE && seg > 0)
    return coda_fail(ctx, s, "argument '%s': segment %d and tile_n %d do not divide one another "
                     "(rowsum ... per S needs S %% tile_n == 0 or tile_n %% S == 0; the GPU runs "
                     "tile_n 128)", name, seg, tile_n);
  if (s == CODA_ERR_INVALID_ARGUMENT)
    return coda_fail(ctx, s, "the program has no argument named '%.64s'", name);
  return coda_fail(ctx, s, "argument '%s': no valid shape for %lld x %lld", name, (long long)M, (long long)N);
}
