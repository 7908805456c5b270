/* Backend dispatch and argument checking for GEMM + epilogue runs.
 *
 * Everything a backend relies on is checked here, before any memory is
 * touched: bindings (all present, none unknown), shapes (as
 * coda_program_arg_shape says), dtypes (as declared; partials and
 * finisher results fp32, or fp64 in exact mode), tiling, strides, sizes,
 * and that no output overlaps another output or any input. */
#include "base/internal.h"
#include "api/api.h"
#include "backends/backend.h"
#include "lang/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- args */

typedef struct arg_entry {
  char name[CODA_NAME_MAX];
  coda_tensor t;
} arg_entry;

struct coda_args_s {
  coda_context ctx;
  int n, cap;
  arg_entry *e;
};

coda_status coda_args_create(coda_context ctx, coda_args *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_args_create: out is NULL");
  *out = calloc(1, sizeof **out);
  if (!*out) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for argument bindings");
  (*out)->ctx = ctx;
  return CODA_OK;
}

void coda_args_destroy(coda_args a) {
  if (!a) return;
  free(a->e);
  free(a);
}

void coda_args_clear(coda_args a) {
  if (a) a->n = 0;
}

coda_status coda_args_set(coda_args a, const char *name, const coda_tensor *t) {
  if (!a) return CODA_ERR_INVALID_ARGUMENT;
  if (!name || !t)
    return coda_fail(a->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_args_set: %s is NULL",
                     !name ? "name" : "tensor");
  size_t len = strlen(name);
  if (len == 0 || len >= CODA_NAME_MAX)
    return coda_fail(a->ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_args_set: name must have 1 to %d characters", CODA_NAME_MAX - 1);
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->e[i].name, name) == 0) {
      a->e[i].t = *t;
      return CODA_OK;
    }
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 16;
    arg_entry *e = realloc(a->e, (size_t)cap * sizeof *e);
    if (!e) return coda_fail(a->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for argument bindings");
    a->e = e;
    a->cap = cap;
  }
  memcpy(a->e[a->n].name, name, len + 1);
  a->e[a->n].t = *t;
  a->n++;
  return CODA_OK;
}

static const coda_tensor *args_get(coda_args a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->e[i].name, name) == 0) return &a->e[i].t;
  return NULL;
}

/* ------------------------------------------------------------- helpers */

static int is_f64(coda_context ctx) { return ctx->opts.precision == CODA_PRECISION_F64; }

static coda_status check_tiling(coda_context ctx, coda_tiling t) {
  if (t.tile_m <= 0 || t.tile_m % 8 || t.tile_m > 256 || t.tile_n <= 0 || t.tile_n % 8 ||
      t.tile_n > 256)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "tiling %d x %d: tile_m and tile_n must be positive multiples of 8, at most 256",
                     t.tile_m, t.tile_n);
  return CODA_OK;
}

static coda_status check_domain(coda_context ctx, int64_t M, int64_t N) {
  int64_t mn;
  if (M < 0 || N < 0)
    return coda_fail(ctx, CODA_ERR_SHAPE, "negative domain %lld x %lld", (long long)M, (long long)N);
  if (!coda_mul_i64(M, N, &mn) || M > INT64_MAX / 4 || N > INT64_MAX / 4)
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "domain %lld x %lld overflows", (long long)M,
                     (long long)N);
  return CODA_OK;
}

/* f64 tensors only in exact mode. */
static coda_status check_precision_dtype(coda_context ctx, const char *what, coda_dtype t) {
  if (t == CODA_F64 && !is_f64(ctx))
    return coda_fail(ctx, CODA_ERR_DTYPE,
                     "%s: f64 tensors need an exact-mode (CODA_PRECISION_F64) context", what);
  return CODA_OK;
}

static coda_status check_matrix_operand(coda_context ctx, const char *what, const coda_tensor *t) {
  coda_status s = coda_check_tensor(ctx, what, t);
  if (s) return s;
  if (t->dtype != CODA_BF16 && t->dtype != CODA_F16 && t->dtype != CODA_F32 && t->dtype != CODA_F64)
    return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s not allowed (bf16, f16, f32%s)", what,
                     coda_dtype_name(t->dtype), is_f64(ctx) ? ", f64" : "");
  return check_precision_dtype(ctx, what, t->dtype);
}

static coda_status check_shape(coda_context ctx, const char *what, const coda_tensor *t,
                               int64_t rows, int64_t cols) {
  if (t->rows != rows || t->cols != cols)
    return coda_fail(ctx, CODA_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld x %lld", what,
                     (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
  return CODA_OK;
}

/* op(X) as a strided view: (i, j) of the op at data[i*rs + j*cs]. */
typedef struct gemm_shape {
  int64_t M, N, K;
} gemm_shape;

static coda_status check_gemm_operands(coda_context ctx, coda_transpose ta, const coda_tensor *A,
                                       coda_transpose tb, const coda_tensor *B, gemm_shape *g) {
  if (ta != CODA_N && ta != CODA_T)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "trans_a: bad value %d", (int)ta);
  if (tb != CODA_N && tb != CODA_T)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "trans_b: bad value %d", (int)tb);
  coda_status s;
  if ((s = check_matrix_operand(ctx, "A", A))) return s;
  if ((s = check_matrix_operand(ctx, "B", B))) return s;
  int64_t ka = ta == CODA_N ? A->cols : A->rows, kb = tb == CODA_N ? B->rows : B->cols;
  g->M = ta == CODA_N ? A->rows : A->cols;
  g->N = tb == CODA_N ? B->cols : B->rows;
  g->K = ka;
  if (ka != kb)
    return coda_fail(ctx, CODA_ERR_SHAPE, "K mismatch: op(A) is %lld x %lld, op(B) is %lld x %lld",
                     (long long)g->M, (long long)ka, (long long)kb, (long long)g->N);
  return check_domain(ctx, g->M, g->N);
}

/* ------------------------------------------------------------- binding */

/* The tensors of one run by argument index (NULL: unbound), and the first
 * named binding that is no argument of the program. */
typedef struct bound {
  const coda_tensor *t[CODA_MAX_SIG];
  const char *unknown;
} bound;

/* A plan step's tensors as they are; named bindings matched to the
 * signature, one lookup each. */
static void bind_all(const struct coda_program_s *p, const coda_run *r, coda_args named, bound *b) {
  memset(b, 0, sizeof *b);
  if (!named) {
    memcpy(b->t, r->args, (size_t)p->sig.nargs * sizeof *b->t);
    return;
  }
  for (int i = 0; i < named->n; i++) {
    const int k = ir_arg_find(p, named->e[i].name);
    if (k >= 0) b->t[k] = &named->e[i].t;
    else if (!b->unknown) b->unknown = named->e[i].name;
  }
}

/* A GEMM without a program takes only 'D'. */
static coda_status reject_unknown(coda_context ctx, coda_args a) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->e[i].name, "D") != 0)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "binding '%s' is not an argument of the program (a run without a program "
                       "takes only 'D')", a->e[i].name);
  return CODA_OK;
}

/* Checks argument i's tensor against its entry in the signature. */
static coda_status check_arg(coda_context ctx, const struct coda_program_s *p, const bound *b, int i,
                             int64_t M, int64_t N, coda_tiling tl, const coda_tensor **out) {
  const ir_arg *a = &p->sig.args[i];
  const coda_tensor *t = b->t[i];
  if (!t) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s '%s' is not bound", a->noun, a->name);
  char what[64];
  snprintf(what, sizeof what, "%s '%s'", a->noun, a->name);
  coda_status s = coda_check_tensor(ctx, what, t);
  if (s) return s;
  if (a->role == IR_ROLE_PARTIAL || a->role == IR_ROLE_RESULT) { /* fp32, f64 in exact mode */
    if (t->dtype != CODA_F32 && !(is_f64(ctx) && t->dtype == CODA_F64))
      return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s, expected f32%s", what,
                       coda_dtype_name(t->dtype), is_f64(ctx) ? " or f64" : "");
  } else {
    if (t->dtype != a->dtype)
      return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s, declared %s", what,
                       coda_dtype_name(t->dtype), coda_dtype_name(a->dtype));
    if ((s = check_precision_dtype(ctx, what, t->dtype))) return s;
  }
  int64_t rows, cols;
  s = ir_arg_shape(p, i, M, N, tl.tile_m, tl.tile_n, &rows, &cols);
  if (s)
    return coda_fail(ctx, s, "%s: no valid shape for %lld x %lld with tile_n %d (odd N in pair "
                     "mode, or segment and tile_n not dividing one another)",
                     what, (long long)M, (long long)N, tl.tile_n);
  if (a->cols == IR_DIM_ANY) { /* M x T partials, T taken from the tensor */
    if (t->rows != rows || t->cols < 1)
      return coda_fail(ctx, CODA_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld rows (one per row "
                       "of the GEMM) and at least one column of partials", what,
                       (long long)t->rows, (long long)t->cols, (long long)rows);
  } else if ((s = check_shape(ctx, what, t, rows, cols))) {
    return s;
  }
  *out = t;
  return CODA_OK;
}

/* One tensor a run reads or writes, for the overlap check. `inplace`:
 * a tile input (read) or a non-accumulating output (written), the two
 * kinds that may be the very same view. */
typedef struct io_ref {
  const coda_tensor *t;
  const char *name;
  int inplace;
  coda_width width;
} io_ref;

static int same_view(const coda_tensor *a, const coda_tensor *b) {
  return a->data == b->data && a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols &&
         a->ld == b->ld;
}

/* No written tensor may overlap another written tensor or a read one,
 * except in place: an output (not accumulate) that is the very same view
 * as a tile input of the same width. Every iteration point reads all its
 * inputs before its outputs are stored, and an output of a point touches
 * only that point's position, which is exactly where the identical input
 * is read; no other point reads it (both backends, docs/language.md). */
static coda_status check_alias(coda_context ctx, const io_ref *w, int nw, const io_ref *r, int nr) {
  for (int i = 0; i < nw; i++) {
    for (int j = i + 1; j < nw; j++)
      if (coda_tensors_overlap(w[i].t, w[j].t))
        return coda_fail(ctx, CODA_ERR_ALIAS, "'%s' and '%s' overlap (both are written)",
                         w[i].name, w[j].name);
    for (int j = 0; j < nr; j++) {
      if (!coda_tensors_overlap(w[i].t, r[j].t)) continue;
      if (w[i].inplace && r[j].inplace && w[i].width == r[j].width && same_view(w[i].t, r[j].t))
        continue; /* in place */
      return coda_fail(ctx, CODA_ERR_ALIAS,
                       "'%s' (written) overlaps '%s' (read); only in place is allowed: an output "
                       "without accumulate that is the very same view (data, ld, rows, cols, "
                       "dtype) as a tile input of the same width",
                       w[i].name, r[j].name);
    }
  }
  return CODA_OK;
}

#define MAX_TENSORS (CODA_MAX_SIG + 2)

/* What every run of a program checks before its arguments: the program
 * (valid here, parameters set), tiling and domain, then the bindings. */
static coda_status check_run(coda_context ctx, coda_program p, const coda_run *r, coda_args named,
                             const char *what, bound *b) {
  coda_status s;
  if ((s = ir_run_ready(ctx, p, what))) return s;
  if ((s = check_tiling(ctx, r->tiling))) return s;
  if ((s = check_domain(ctx, r->M, r->N))) return s;
  if ((s = ir_check_domain(ctx, p, r->N, r->tiling.tile_n))) return s;
  bind_all(p, r, named, b);
  return CODA_OK;
}

/* Binds a program for a run over M x N (with A and B when given): every
 * input, output and partial, then no overlap but in place. */
static coda_status prepare_program(coda_context ctx, coda_program p, const coda_run *r,
                                   coda_args named, coda_epi_job *job) {
  bound b;
  coda_status s = check_run(ctx, p, r, named, "run", &b);
  if (s) return s;
  if (b.unknown)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "binding '%s' is not an argument of the program",
                     b.unknown);
  io_ref rd[MAX_TENSORS], wr[MAX_TENSORS];
  int nr = 0, nw = 0;
  if (r->A) rd[nr++] = (io_ref){r->A, "A", 0, CODA_WIDTH_FULL};
  if (r->B) rd[nr++] = (io_ref){r->B, "B", 0, CODA_WIDTH_FULL};
  const int nio = p->ninputs + p->noutputs;
  for (int i = 0; i < nio + p->nreduces; i++) {
    const ir_arg *a = &p->sig.args[i];
    const coda_tensor **t = i < p->ninputs ? &job->inputs[i]
                            : i < nio      ? &job->outputs[i - p->ninputs]
                                           : &job->partials[i - nio];
    if ((s = check_arg(ctx, p, &b, i, r->M, r->N, r->tiling, t))) return s;
    if (a->role == IR_ROLE_INPUT)
      rd[nr++] = (io_ref){*t, a->name, a->kind == CODA_ARG_TILE, a->width};
    else
      wr[nw++] = (io_ref){*t, a->name, a->role == IR_ROLE_OUTPUT && !a->accumulate, a->width};
  }
  if ((s = check_alias(ctx, wr, nw, rd, nr))) return s;
  job->prog = p;
  job->M = r->M;
  job->N = r->N;
  job->tiling = r->tiling;
  return CODA_OK;
}

/* ------------------------------------------------------------- entries */

/* Whatever binds the arguments (names, or indices: named NULL), a program
 * runs through one of these three. */
static coda_status run_gemm_epilogue(coda_context ctx, const coda_run *r, coda_args named) {
  if (r->schedule < CODA_SCHED_AUTO || r->schedule > CODA_SCHED_COOPERATIVE)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: bad schedule %d",
                     r->schedule);
  coda_clear_error(ctx);
  if (!r->A || !r->B || (!named && !r->args))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: %s is NULL",
                     !r->A ? "A" : !r->B ? "B" : "args");
  coda_status s;
  gemm_shape g;
  if ((s = check_gemm_operands(ctx, r->ta, r->A, r->tb, r->B, &g))) return s;
  coda_run run = *r;
  run.M = g.M;
  run.N = g.N;
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  if (r->prog) {
    if ((s = prepare_program(ctx, r->prog, &run, named, &job))) return s;
  } else { /* acc stored into "D" */
    if ((s = check_tiling(ctx, r->tiling))) return s;
    if ((s = reject_unknown(ctx, named))) return s;
    const coda_tensor *D = args_get(named, "D");
    if (!D) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "output 'D' is not bound");
    if ((s = check_matrix_operand(ctx, "D", D))) return s;
    if ((s = check_shape(ctx, "D", D, g.M, g.N))) return s;
    if (coda_tensors_overlap(D, r->A) || coda_tensors_overlap(D, r->B))
      return coda_fail(ctx, CODA_ERR_ALIAS, "'D' (written) overlaps '%s' (read)",
                       coda_tensors_overlap(D, r->A) ? "A" : "B");
    job.M = g.M;
    job.N = g.N;
    job.tiling = r->tiling;
    job.D = D;
    job.alpha = 1.0;
  }
  job.has_gemm = 1;
  job.ta = r->ta;
  job.tb = r->tb;
  job.A = r->A;
  job.B = r->B;
  job.K = g.K;
  job.schedule = r->schedule;
  return ctx->ops->gemm_epilogue(ctx, &job);
}

static coda_status run_map(coda_context ctx, const coda_run *r, coda_args named) {
  coda_status s;
  if ((s = ir_run_ready(ctx, r->prog, NULL))) return s;
  if (r->prog->sig.reads_acc)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_map: the program reads acc, which needs a GEMM (use coda_gemm_epilogue)");
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  if ((s = prepare_program(ctx, r->prog, r, named, &job))) return s;
  return ctx->ops->map(ctx, &job);
}

/* The finisher by name (finish_name) or by its result's index (r->finish);
 * its partials and result are checked, no other binding. */
static coda_status run_finish(coda_context ctx, const coda_run *r, coda_args named,
                              const char *finish_name) {
  coda_program p = r->prog;
  bound b;
  coda_status s = check_run(ctx, p, r, named, "coda_finish", &b);
  if (s) return s;
  const int k = finish_name ? ir_arg_find(p, finish_name) : r->finish;
  if (k < 0 || k >= p->sig.nargs || p->sig.args[k].role != IR_ROLE_RESULT)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "the program has no finish statement '%s'",
                     finish_name ? finish_name : "?");
  if (b.unknown)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "binding '%s' is not an argument of the program",
                     b.unknown);
  const int part0 = p->ninputs + p->noutputs; /* the first partial's index */
  const ir_finish *f = &p->finishes[k - part0 - p->nreduces];
  const ir_reduce *rd = &p->reduces[f->reduce];
  coda_finish_job d;
  memset(&d, 0, sizeof d);
  const coda_tensor *out;
  if ((s = check_arg(ctx, p, &b, part0 + f->reduce, r->M, r->N, r->tiling, &d.P))) return s;
  if (f->reduce2 >= 0 &&
      (s = check_arg(ctx, p, &b, part0 + f->reduce2, r->M, r->N, r->tiling, &d.Q)))
    return s;
  if ((s = check_arg(ctx, p, &b, k, r->M, r->N, r->tiling, &out))) return s;
  if (coda_tensors_overlap(out, d.P) || (d.Q && coda_tensors_overlap(out, d.Q)))
    return coda_fail(ctx, CODA_ERR_ALIAS, "finisher result '%s' overlaps its partial", f->name);
  d.kind = (int)f->kind;
  d.layout = ir_reduce_is_col(rd->kind) ? 1 : ir_reduce_is_segmented(rd->kind) ? 2 : 0;
  d.out = out;
  d.M = r->M;
  d.N = r->N;
  d.tiling = r->tiling;
  d.seg = rd->segment;
  d.eps = f->eps;
  return ctx->ops->finish(ctx, &d);
}

coda_status coda_run_program(coda_context ctx, const coda_run *r) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!r || !r->prog || !r->args) {
    coda_clear_error(ctx);
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_run_program: %s is NULL",
                     !r ? "run" : !r->prog ? "program" : "args");
  }
  switch (r->kind) {
  case CODA_RUN_GEMM_EPILOGUE: return run_gemm_epilogue(ctx, r, NULL);
  case CODA_RUN_MAP: coda_clear_error(ctx); return run_map(ctx, r, NULL);
  case CODA_RUN_FINISH: coda_clear_error(ctx); return run_finish(ctx, r, NULL, NULL);
  }
  return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_run_program: bad kind %d", (int)r->kind);
}

coda_status coda_gemm_epilogue(coda_context ctx, coda_program program, coda_transpose trans_a,
                               const coda_tensor *A, coda_transpose trans_b,
                               const coda_tensor *B, coda_args args, coda_tiling tiling) {
  return coda_gemm_epilogue_sched(ctx, program, trans_a, A, trans_b, B, args, tiling,
                                  CODA_SCHED_AUTO);
}

coda_status coda_gemm_epilogue_sched(coda_context ctx, coda_program program,
                                     coda_transpose trans_a, const coda_tensor *A,
                                     coda_transpose trans_b, const coda_tensor *B, coda_args args,
                                     coda_tiling tiling, int schedule) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  const coda_run r = {CODA_RUN_GEMM_EPILOGUE, program, trans_a, trans_b, A, B, schedule,
                      0, 0, tiling, -1, NULL};
  return run_gemm_epilogue(ctx, &r, args);
}

coda_status coda_map(coda_context ctx, coda_program program, int64_t M, int64_t N,
                     coda_args args, coda_tiling tiling) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!program || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_map: %s is NULL",
                     !program ? "program" : "args");
  const coda_run r = {CODA_RUN_MAP, program, CODA_N, CODA_N, NULL, NULL, 0, M, N, tiling, -1, NULL};
  return run_map(ctx, &r, args);
}

coda_status coda_finish(coda_context ctx, coda_program program, const char *name, coda_args args,
                        int64_t M, int64_t N, coda_tiling tiling) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!program || !name || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_finish: %s is NULL",
                     !program ? "program" : !name ? "name" : "args");
  const coda_run r = {CODA_RUN_FINISH, program, CODA_N, CODA_N, NULL, NULL, 0, M, N, tiling, -1, NULL};
  return run_finish(ctx, &r, args, name);
}

coda_status coda_gemm(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                      coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                      float alpha, int accumulate) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!A || !B || !D)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm: %s is NULL",
                     !A ? "A" : !B ? "B" : "D");
  coda_status s;
  gemm_shape g;
  if ((s = check_gemm_operands(ctx, trans_a, A, trans_b, B, &g))) return s;
  if ((s = check_matrix_operand(ctx, "D", D))) return s;
  if ((s = check_shape(ctx, "D", D, g.M, g.N))) return s;
  if (coda_tensors_overlap(D, A) || coda_tensors_overlap(D, B))
    return coda_fail(ctx, CODA_ERR_ALIAS, "'D' (written) overlaps '%s' (read)",
                     coda_tensors_overlap(D, A) ? "A" : "B");
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  job.has_gemm = 1;
  job.ta = trans_a;
  job.tb = trans_b;
  job.A = A;
  job.B = B;
  job.M = g.M;
  job.N = g.N;
  job.K = g.K;
  job.D = D;
  job.alpha = alpha;
  job.accumulate = accumulate != 0;
  return ctx->ops->gemm(ctx, &job);
}

/* ---- epilogue compiler: the tiling a backend runs programs with ---- */
coda_status coda_preferred_tiling(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                  int64_t K, coda_tiling *out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_preferred_tiling: out is NULL");
  if (M < 0 || N < 0 || K < 0)
    return coda_fail(ctx, CODA_ERR_SHAPE, "coda_preferred_tiling: negative size");
  return ctx->ops->preferred_tiling(ctx, p, M, N, K, out);
}
/* ---- end epilogue compiler ---- */
