/* Backend dispatch and argument checking for GEMM + epilogue runs.
 *
 * Everything a backend relies on is checked here, before any memory is
 * touched: bindings (all present, none unknown), shapes (as
 * coda_program_arg_shape says), dtypes (as declared; partials and
 * finisher results fp32, or fp64 in exact mode), tiling, strides, sizes,
 * and that no output overlaps another output or any input. */
#include "base/internal.h"
#include "backends/backend.h"
#include "lang/ir.h"
#include "api/api.h"

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

#define FINISH_RESULT 100 /* kind_word: the vector a finisher writes */

static const char *kind_word(coda_arg_kind k) {
  switch (k) {
  case CODA_ARG_ROW: return "row input";
  case CODA_ARG_COL: return "column input";
  case CODA_ARG_SCALAR: return "scalar input";
  case CODA_ARG_TILE: return "tile input";
  case CODA_ARG_OUTPUT: return "output";
  case CODA_ARG_PARTIAL: return "partial";
  case CODA_ARG_ROWSUM: return "rowsum input";
  case CODA_ARG_ROWMAX: return "rowmax input";
  case CODA_ARG_ROWLSE: return "rowlse input";
  }
  if ((int)k == FINISH_RESULT) return "finisher result";
  return "argument";
}

static int program_has_name(const struct coda_program_s *p, const char *name) {
  return ir_find_input(p, name) >= 0 || ir_find_output(p, name) >= 0 ||
         ir_find_reduce(p, name) >= 0 || ir_find_finish(p, name) >= 0;
}

static coda_status reject_unknown(coda_context ctx, const struct coda_program_s *p, coda_args a) {
  for (int i = 0; i < a->n; i++)
    if (p ? !program_has_name(p, a->e[i].name) : strcmp(a->e[i].name, "D") != 0)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "binding '%s' is not an argument of the program%s", a->e[i].name,
                       p ? "" : " (a run without a program takes only 'D')");
  return CODA_OK;
}

const coda_tensor *coda_args_find(coda_args a, const char *name) { return a ? args_get(a, name) : NULL; }
coda_status coda_args_check_names(coda_context ctx, coda_program p, coda_args a) {
  return reject_unknown(ctx, p, a);
}

/* Looks up and checks one bound argument against the program. */
static coda_status bind_one(coda_context ctx, const struct coda_program_s *p, coda_args a,
                            const char *name, coda_arg_kind kind, coda_dtype dtype,
                            int fp_result, int64_t M, int64_t N, coda_tiling tl,
                            const coda_tensor **out) {
  const coda_tensor *t = args_get(a, name);
  if (!t)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s '%s' is not bound", kind_word(kind), name);
  char what[64];
  snprintf(what, sizeof what, "%s '%s'", kind_word(kind), name);
  coda_status s = coda_check_tensor(ctx, what, t);
  if (s) return s;
  if (fp_result) { /* partials and finisher results */
    if (t->dtype != CODA_F32 && !(is_f64(ctx) && t->dtype == CODA_F64))
      return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s, expected f32%s", what,
                       coda_dtype_name(t->dtype), is_f64(ctx) ? " or f64" : "");
  } else {
    if (t->dtype != dtype)
      return coda_fail(ctx, CODA_ERR_DTYPE, "%s: dtype %s, declared %s", what,
                       coda_dtype_name(t->dtype), coda_dtype_name(dtype));
    if ((s = check_precision_dtype(ctx, what, t->dtype))) return s;
  }
  int64_t rows, cols;
  s = coda_program_arg_shape((coda_program)p, name, M, N, tl.tile_m, tl.tile_n, &rows, &cols);
  if (s == CODA_ERR_SHAPE)
    return coda_fail(ctx, s, "%s: no valid shape for %lld x %lld with tile_n %d (odd N in pair "
                     "mode, or segment and tile_n not dividing one another)",
                     what, (long long)M, (long long)N, tl.tile_n);
  if (s) return coda_fail(ctx, s, "%s: cannot compute its shape", what);
  if (ir_kind_is_partials(kind)) { /* M x T partials, T taken from the tensor */
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

#define MAX_TENSORS (CODA_MAX_INPUTS + CODA_MAX_OUTPUTS + CODA_MAX_REDUCES + 2)

/* Binds a program for a run over M x N (with A and B when given). */
static coda_status prepare_program(coda_context ctx, coda_program p, coda_args a, int64_t M,
                                   int64_t N, coda_tiling tl, const coda_tensor *A,
                                   const coda_tensor *B, coda_epi_job *job) {
  coda_status s;
  if ((s = ir_validate(ctx, p))) return s;
  if ((s = ir_check_params(ctx, p, "run"))) return s;
  if ((s = check_tiling(ctx, tl))) return s;
  if ((s = check_domain(ctx, M, N))) return s;
  if ((s = ir_check_domain(ctx, p, N, tl.tile_n))) return s;
  if ((s = reject_unknown(ctx, p, a))) return s;
  io_ref rd[MAX_TENSORS], wr[MAX_TENSORS];
  int nr = 0, nw = 0;
  if (A) rd[nr++] = (io_ref){A, "A", 0, CODA_WIDTH_FULL};
  if (B) rd[nr++] = (io_ref){B, "B", 0, CODA_WIDTH_FULL};
  for (int i = 0; i < p->ninputs; i++) {
    const ir_input *in = &p->inputs[i];
    if ((s = bind_one(ctx, p, a, in->name, in->kind, in->dtype, 0, M, N, tl, &job->inputs[i]))) return s;
    rd[nr++] = (io_ref){job->inputs[i], in->name, in->kind == CODA_ARG_TILE, in->width};
  }
  for (int i = 0; i < p->noutputs; i++) {
    const ir_output *o = &p->outputs[i];
    if (o->dtype == CODA_I32)
      return coda_fail(ctx, CODA_ERR_DTYPE, "output '%s': i32 outputs are not supported", o->name);
    if ((s = bind_one(ctx, p, a, o->name, CODA_ARG_OUTPUT, o->dtype, 0, M, N, tl, &job->outputs[i]))) return s;
    wr[nw++] = (io_ref){job->outputs[i], o->name, !o->accumulate, o->width};
  }
  for (int i = 0; i < p->nreduces; i++) {
    const ir_reduce *r = &p->reduces[i];
    if ((s = bind_one(ctx, p, a, r->name, CODA_ARG_PARTIAL, CODA_F32, 1, M, N, tl, &job->partials[i])))
      return s;
    wr[nw++] = (io_ref){job->partials[i], r->name, 0, CODA_WIDTH_FULL};
  }
  if ((s = check_alias(ctx, wr, nw, rd, nr))) return s;
  job->prog = p;
  job->M = M;
  job->N = N;
  job->tiling = tl;
  return CODA_OK;
}

static int program_reads_acc(const struct coda_program_s *p) {
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].code == IR_ACC) return 1;
  return 0;
}

/* ------------------------------------------------------------- entries */

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
  if (schedule < CODA_SCHED_AUTO || schedule > CODA_SCHED_COOPERATIVE)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: bad schedule %d",
                     schedule);
  coda_clear_error(ctx);
  if (!A || !B || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: %s is NULL",
                     !A ? "A" : !B ? "B" : "args");
  coda_status s;
  gemm_shape g;
  if ((s = check_gemm_operands(ctx, trans_a, A, trans_b, B, &g))) return s;
  if (program && program->passes[0]) {
    if ((s = ir_validate(ctx, program))) return s;
    coda_passes_gemm pg = {trans_a, trans_b, A, B, schedule};
    return coda_passes_run(ctx, program, &pg, g.M, g.N, args, tiling);
  }
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  if (program) {
    if ((s = prepare_program(ctx, program, args, g.M, g.N, tiling, A, B, &job))) return s;
  } else { /* acc stored into "D" */
    if ((s = check_tiling(ctx, tiling))) return s;
    if ((s = reject_unknown(ctx, NULL, args))) return s;
    const coda_tensor *D = args_get(args, "D");
    if (!D) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "output 'D' is not bound");
    if ((s = check_matrix_operand(ctx, "D", D))) return s;
    if ((s = check_shape(ctx, "D", D, g.M, g.N))) return s;
    if (coda_tensors_overlap(D, A) || coda_tensors_overlap(D, B))
      return coda_fail(ctx, CODA_ERR_ALIAS, "'D' (written) overlaps '%s' (read)",
                       coda_tensors_overlap(D, A) ? "A" : "B");
    job.M = g.M;
    job.N = g.N;
    job.tiling = tiling;
    job.D = D;
    job.alpha = 1.0;
  }
  job.has_gemm = 1;
  job.ta = trans_a;
  job.tb = trans_b;
  job.A = A;
  job.B = B;
  job.K = g.K;
  job.schedule = schedule;
  return ctx->ops->gemm_epilogue(ctx, &job);
}

coda_status coda_map(coda_context ctx, coda_program program, int64_t M, int64_t N,
                     coda_args args, coda_tiling tiling) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!program || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_map: %s is NULL",
                     !program ? "program" : "args");
  coda_status s;
  if ((s = ir_validate(ctx, program))) return s;
  if (program_reads_acc(program))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_map: the program reads acc, which needs a GEMM (use coda_gemm_epilogue)");
  if (program->passes[0]) {
    if ((s = check_tiling(ctx, tiling)) || (s = check_domain(ctx, M, N))) return s;
    return coda_passes_run(ctx, program, NULL, M, N, args, tiling);
  }
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  if ((s = prepare_program(ctx, program, args, M, N, tiling, NULL, NULL, &job))) return s;
  return ctx->ops->map(ctx, &job);
}

coda_status coda_finish(coda_context ctx, coda_program program, const char *name, coda_args args,
                        int64_t M, int64_t N, coda_tiling tiling) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!program || !name || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_finish: %s is NULL",
                     !program ? "program" : !name ? "name" : "args");
  coda_status s;
  if ((s = ir_validate(ctx, program))) return s;
  if ((s = ir_check_params(ctx, program, "coda_finish"))) return s;
  if ((s = check_tiling(ctx, tiling))) return s;
  if ((s = check_domain(ctx, M, N))) return s;
  if ((s = ir_check_domain(ctx, program, N, tiling.tile_n))) return s;
  if (program->passes[0]) return coda_passes_finish(ctx, program, name, args, M, N, tiling);
  int fi = ir_find_finish(program, name);
  if (fi < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "the program has no finish statement '%s'", name);
  if ((s = reject_unknown(ctx, program, args))) return s;
  const ir_finish *f = &program->finishes[fi];
  const ir_reduce *r = &program->reduces[f->reduce];
  coda_finish_job d;
  memset(&d, 0, sizeof d);
  if ((s = bind_one(ctx, program, args, r->name, CODA_ARG_PARTIAL, CODA_F32, 1, M, N, tiling, &d.P)))
    return s;
  if (f->reduce2 >= 0 &&
      (s = bind_one(ctx, program, args, program->reduces[f->reduce2].name, CODA_ARG_PARTIAL,
                    CODA_F32, 1, M, N, tiling, &d.Q)))
    return s;
  const coda_tensor *out;
  if ((s = bind_one(ctx, program, args, f->name, (coda_arg_kind)FINISH_RESULT, CODA_F32, 1, M, N,
                    tiling, &out)))
    return s;
  if (coda_tensors_overlap(out, d.P) || (d.Q && coda_tensors_overlap(out, d.Q)))
    return coda_fail(ctx, CODA_ERR_ALIAS, "finisher result '%s' overlaps its partial", f->name);
  d.kind = (int)f->kind;
  d.layout = ir_reduce_is_col(r->kind) ? 1 : ir_reduce_is_segmented(r->kind) ? 2 : 0;
  d.out = out;
  d.M = M;
  d.N = N;
  d.tiling = tiling;
  d.seg = r->segment;
  d.eps = f->eps;
  return ctx->ops->finish(ctx, &d);
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
