/* Backend dispatch for GEMM + epilogue runs, maps and finishers.
 *
 * Everything a backend relies on is checked before any memory is
 * touched: bindings (all present, none unknown), shapes (by the rules of
 * the program's signature, lang/signature.c), dtypes (as declared;
 * partials and finisher results fp32, or fp64 in exact mode), tiling,
 * strides, sizes, and that no output overlaps another output or any
 * input (base/tensor_check.c). A run binds by name (the public calls,
 * each name looked up once) or by index (coda_run_program, a plan step),
 * and both go through run_program. */
#include "base/internal.h"
#include "api/api.h"
#include "backends/backend.h"
#include "lang/ir.h"

#include <limits.h>
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

/* ------------------------------------------------------ pass lists */

/* The bindings of a program run as its pass list (api/program_passes.c),
 * which binds each pass by name: the tensor bound to name, and that every
 * binding names an argument of p (its signature). */
const coda_tensor *coda_args_find(coda_args a, const char *name) { return a ? args_get(a, name) : NULL; }

coda_status coda_args_check_names(coda_context ctx, coda_program p, coda_args a) {
  for (int i = 0; i < a->n; i++)
    if (ir_arg_find(p, a->e[i].name) < 0)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "binding '%s' is not an argument of the program",
                       a->e[i].name);
  return CODA_OK;
}

/* A program with a pass list, before its passes run: validated (its
 * signature built) and, with f64 declarations, in an exact context. */
static coda_status passes_ready(coda_context ctx, coda_program p) {
  if (!p->sig.ok)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "the program was changed after it was validated (validate it again)");
  return p->sig.needs_exact ? ir_check_precision(ctx, p) : CODA_OK;
}

/* ------------------------------------------------------------- runs */

static coda_status gemm_into(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                             coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                             float alpha, int accumulate);

#define MAX_TENSORS (CODA_MAX_SIG + 2)

/* A program's run with its arguments bound by index: the GEMM's operands,
 * the program's part of the checks (lang: ir_run_check), the tensors
 * (base: coda_check_args), then the backend's entry. Whatever binds the
 * arguments, names or indices, a program runs through here. */
static coda_status run_program(coda_context ctx, const coda_run *r, const char *unknown,
                               const char *finish_name) {
  const coda_program p = r->prog;
  const int gemm = r->kind == CODA_RUN_GEMM_EPILOGUE, fin = r->kind == CODA_RUN_FINISH;
  const int unfused = r->kind == CODA_RUN_GEMM_UNFUSED;
  ir_run q = {fin ? "coda_finish" : "run", r->kind == CODA_RUN_MAP || unfused, r->M, r->N,
              r->tiling, !fin ? -1 : r->finish >= 0 ? r->finish : INT_MAX, finish_name, unknown,
              r->args};
  int64_t K = 0;
  coda_status s;
  if (unfused) { /* fusion off: the plain GEMM into the accumulator, then the program as a map */
    if ((s = gemm_into(ctx, r->ta, r->A, r->tb, r->B, r->args[0], 1.0f, 0))) return s;
    q.M = r->ta == CODA_N ? r->A->rows : r->A->cols;
    q.N = r->tb == CODA_N ? r->B->cols : r->B->rows;
  } else if (gemm && (s = coda_check_gemm(ctx, r->ta, r->A, r->tb, r->B, &q.M, &q.N, &K))) {
    return s;
  }
  coda_arg_check c[MAX_TENSORS];
  int n = 0;
  if (gemm) { /* read, for the overlap rule */
    c[n++] = (coda_arg_check){.name = "A", .t = r->A, .operand = 1};
    c[n++] = (coda_arg_check){.name = "B", .t = r->B, .operand = 1};
  }
  if ((s = ir_run_check(ctx, p, &q, c, &n))) return s;
  if ((s = coda_check_args(ctx, c, n, q.M, q.N, q.tiling.tile_n, !fin))) return s;
  if (fin) { /* c: the partial (and the second), then the result */
    const coda_tensor *P = c[0].t, *Q = n == 3 ? c[1].t : NULL, *out = c[n - 1].t;
    if (coda_tensors_overlap(out, P) || (Q && coda_tensors_overlap(out, Q)))
      return coda_fail(ctx, CODA_ERR_ALIAS, "finisher result '%s' overlaps its partial", c[n - 1].name);
    const ir_arg *res = &p->sig.args[q.finish];
    const ir_finish *f = &p->finishes[q.finish - (p->ninputs + p->noutputs + p->nreduces)];
    const coda_finish_job d = {(int)f->kind, res->part == IR_PART_COL ? 1 : res->part == IR_PART_SEG ? 2 : 0,
                               P, Q, out, q.M, q.N, q.tiling, res->segment, f->eps};
    return ctx->ops->finish(ctx, &d);
  }
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  for (int i = 0; i < p->ninputs; i++) job.inputs[i] = r->args[i];
  for (int i = 0; i < p->noutputs; i++) job.outputs[i] = r->args[p->ninputs + i];
  for (int i = 0; i < p->nreduces; i++) job.partials[i] = r->args[p->ninputs + p->noutputs + i];
  job.prog = p;
  job.M = q.M;
  job.N = q.N;
  job.tiling = q.tiling;
  if (!gemm) return ctx->ops->map(ctx, &job);
  job.has_gemm = 1;
  job.ta = r->ta;
  job.tb = r->tb;
  job.A = r->A;
  job.B = r->B;
  job.K = K;
  job.schedule = r->schedule;
  return ctx->ops->gemm_epilogue(ctx, &job);
}

static int bad_schedule(int schedule) {
  return schedule < CODA_SCHED_AUTO || schedule > CODA_SCHED_COOPERATIVE;
}

coda_status coda_run_program(coda_context ctx, const coda_run *r) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (r && r->kind == CODA_RUN_GEMM_EPILOGUE && bad_schedule(r->schedule))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: bad schedule %d",
                     r->schedule);
  coda_clear_error(ctx);
  const int gemm = r && (r->kind == CODA_RUN_GEMM_EPILOGUE || r->kind == CODA_RUN_GEMM_UNFUSED);
  if (!r || !r->prog || !r->args || (gemm && (!r->A || !r->B)) ||
      (r->kind == CODA_RUN_GEMM_UNFUSED && !r->args[0]))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_run_program: %s is NULL",
                     !r          ? "run"
                     : !r->prog  ? "program"
                     : !r->args  ? "args"
                     : !gemm     ? "args"
                     : !r->A     ? "A"
                     : !r->B     ? "B"
                                 : "the accumulator");
  if (r->kind != CODA_RUN_GEMM_EPILOGUE && r->kind != CODA_RUN_MAP && r->kind != CODA_RUN_FINISH &&
      r->kind != CODA_RUN_GEMM_UNFUSED)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_run_program: bad kind %d", (int)r->kind);
  return run_program(ctx, r, NULL, NULL);
}

/* The public calls bind by name: each binding looked up once in the
 * program's signature (the first that names no argument is reported in
 * its turn), the finisher too. */
static coda_status run_named(coda_context ctx, coda_run *r, coda_args a, const char *finish_name) {
  const coda_tensor *t[CODA_MAX_SIG] = {0};
  const char *unknown = NULL;
  for (int i = 0; i < a->n; i++) {
    const int k = ir_arg_find(r->prog, a->e[i].name);
    if (k >= 0) t[k] = &a->e[i].t;
    else if (!unknown) unknown = a->e[i].name;
  }
  r->args = t;
  r->finish = finish_name ? ir_arg_find(r->prog, finish_name) : -1;
  return run_program(ctx, r, unknown, finish_name);
}

/* A GEMM without a program: acc stored into "D", the only binding. */
static coda_status run_plain(coda_context ctx, const coda_run *r, coda_args a) {
  int64_t M, N, K;
  coda_status s;
  if ((s = coda_check_gemm(ctx, r->ta, r->A, r->tb, r->B, &M, &N, &K))) return s;
  if ((s = coda_check_tiling(ctx, r->tiling))) return s;
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->e[i].name, "D") != 0)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "binding '%s' is not an argument of the program (a run without a program "
                       "takes only 'D')", a->e[i].name);
  const coda_tensor *D = args_get(a, "D");
  if (!D) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "output 'D' is not bound");
  if ((s = coda_check_matrix(ctx, "D", D))) return s;
  if ((s = coda_check_shape(ctx, "D", D, M, N))) return s;
  if (coda_tensors_overlap(D, r->A) || coda_tensors_overlap(D, r->B))
    return coda_fail(ctx, CODA_ERR_ALIAS, "'D' (written) overlaps '%s' (read)",
                     coda_tensors_overlap(D, r->A) ? "A" : "B");
  coda_epi_job job;
  memset(&job, 0, sizeof job);
  job.M = M;
  job.N = N;
  job.tiling = r->tiling;
  job.D = D;
  job.alpha = 1.0;
  job.has_gemm = 1;
  job.ta = r->ta;
  job.tb = r->tb;
  job.A = r->A;
  job.B = r->B;
  job.K = K;
  job.schedule = r->schedule;
  return ctx->ops->gemm_epilogue(ctx, &job);
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
  if (bad_schedule(schedule))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: bad schedule %d",
                     schedule);
  coda_clear_error(ctx);
  if (!A || !B || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm_epilogue: %s is NULL",
                     !A ? "A" : !B ? "B" : "args");
  if (program && program->passes[0]) { /* a pass list: each pass runs as an ordinary program */
    int64_t M, N, K;
    coda_status s;
    if ((s = coda_check_gemm(ctx, trans_a, A, trans_b, B, &M, &N, &K))) return s;
    if ((s = passes_ready(ctx, program))) return s;
    coda_passes_gemm pg = {trans_a, trans_b, A, B, schedule};
    return coda_passes_run(ctx, program, &pg, M, N, args, tiling);
  }
  coda_run r = {CODA_RUN_GEMM_EPILOGUE, program, trans_a, trans_b, A, B, schedule,
                0, 0, tiling, -1, NULL};
  return program ? run_named(ctx, &r, args, NULL) : run_plain(ctx, &r, args);
}

coda_status coda_map(coda_context ctx, coda_program program, int64_t M, int64_t N,
                     coda_args args, coda_tiling tiling) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!program || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_map: %s is NULL",
                     !program ? "program" : "args");
  if (program->passes[0]) {
    coda_status s;
    if ((s = passes_ready(ctx, program))) return s;
    if (program->sig.reads_acc)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "coda_map: the program reads acc, which needs a GEMM (use coda_gemm_epilogue)");
    if ((s = coda_check_tiling(ctx, tiling)) || (s = coda_check_domain(ctx, M, N))) return s;
    return coda_passes_run(ctx, program, NULL, M, N, args, tiling);
  }
  coda_run r = {CODA_RUN_MAP, program, CODA_N, CODA_N, NULL, NULL, 0, M, N, tiling, -1, NULL};
  return run_named(ctx, &r, args, NULL);
}

coda_status coda_finish(coda_context ctx, coda_program program, const char *name, coda_args args,
                        int64_t M, int64_t N, coda_tiling tiling) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!program || !name || !args)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_finish: %s is NULL",
                     !program ? "program" : !name ? "name" : "args");
  if (program->passes[0]) {
    coda_status s;
    if ((s = passes_ready(ctx, program))) return s;
    if ((s = ir_check_params(ctx, program, "coda_finish"))) return s;
    if ((s = coda_check_tiling(ctx, tiling)) || (s = coda_check_domain(ctx, M, N))) return s;
    if ((s = ir_check_domain(ctx, program, N, tiling.tile_n))) return s;
    return coda_passes_finish(ctx, program, name, args, M, N, tiling);
  }
  coda_run r = {CODA_RUN_FINISH, program, CODA_N, CODA_N, NULL, NULL, 0, M, N, tiling, -1, NULL};
  return run_named(ctx, &r, args, name);
}

/* D = alpha·op(A)·op(B) (+ D): coda_gemm after its NULL checks. */
static coda_status gemm_into(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                             coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                             float alpha, int accumulate) {
  coda_status s;
  int64_t M, N, K;
  if ((s = coda_check_gemm(ctx, trans_a, A, trans_b, B, &M, &N, &K))) return s;
  if ((s = coda_check_matrix(ctx, "D", D))) return s;
  if ((s = coda_check_shape(ctx, "D", D, M, N))) return s;
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
  job.M = M;
  job.N = N;
  job.K = K;
  job.D = D;
  job.alpha = alpha;
  job.accumulate = accumulate != 0;
  return ctx->ops->gemm(ctx, &job);
}

coda_status coda_gemm(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                      coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                      float alpha, int accumulate) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!A || !B || !D)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_gemm: %s is NULL",
                     !A ? "A" : !B ? "B" : "D");
  return gemm_into(ctx, trans_a, A, trans_b, B, D, alpha, accumulate);
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
