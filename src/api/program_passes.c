/* Program rewrites the layers above need (nn plans), as entry points of
 * the api layer: they take and return public coda_program handles, so a
 * caller never sees the IR (see api.h; the passes live in src/lang).
 *
 * And the runner of a program's pass list (lang/pass_split.c): a program
 * that reads a finished statistic or has a total runs, through
 * coda_gemm_epilogue, coda_map and coda_finish, as its passes one after
 * the other, each an ordinary program bound to the caller's tensors and
 * to temporaries allocated here for the run. */
#include "api/api.h"

#include "lang/ir.h"

#include <stdio.h>
#include <string.h>

coda_status coda_program_unfused(coda_context ctx, coda_program prog, const char *input,
                                 coda_dtype dtype, coda_program *out) {
  return ir_unfuse(ctx, prog, input, dtype, out);
}

/* ------------------------------------------------------------ running */

typedef struct runner {
  coda_context ctx;
  const ir_passes *l;
  coda_args user;
  coda_tensor temp[CODA_MAX_INPUTS * IR_MAX_PASSES];
  void *mem[CODA_MAX_INPUTS * IR_MAX_PASSES];
} runner;

static int64_t pass_n(const ir_pass *ps, int64_t N) { return ps->kind == IR_PASS_ROWS ? 1 : N; }

/* The temporaries, each shaped and typed as the pass that writes it declares. */
static coda_status alloc_temps(runner *r, int64_t M, int64_t N, coda_tiling tl) {
  for (int t = 0; t < r->l->ntemps; t++) {
    const ir_pass *ps = &r->l->pass[r->l->temp_pass[t]];
    const char *nm = r->l->temp[t];
    int64_t rows, cols;
    coda_status s = coda_program_arg_shape_ctx(r->ctx, ps->prog, nm, M, pass_n(ps, N), tl.tile_m, tl.tile_n,
                                               &rows, &cols);
    if (s) return s;
    const int k = ir_find_output(ps->prog, nm);
    const coda_dtype dt = k >= 0 ? ps->prog->outputs[k].dtype : r->l->dtype;
    const size_t bytes = (size_t)(rows * cols) * coda_dtype_size(dt);
    if ((s = coda_malloc(r->ctx, bytes ? bytes : 1, &r->mem[t]))) return s;
    r->temp[t] = coda_tensor_2d(r->mem[t], dt, rows, cols);
  }
  return CODA_OK;
}

static void free_temps(runner *r) {
  for (int t = 0; r->l && t < r->l->ntemps; t++)
    if (r->mem[t]) coda_free(r->ctx, r->mem[t]);
}

/* Pass ps's bindings: a temporary by its name, else the caller's tensor
 * of that name (one not bound stays unbound: the pass names it). */
static coda_status bind_pass(runner *r, const ir_pass *ps, coda_args *out) {
  coda_status s = coda_args_create(r->ctx, out);
  const int n = coda_program_num_args(ps->prog);
  for (int i = 0; !s && i < n; i++) {
    coda_arg_info info;
    coda_program_arg(ps->prog, i, &info);
    const coda_tensor *t = NULL;
    for (int k = 0; k < r->l->ntemps && !t; k++)
      if (!strcmp(r->l->temp[k], info.name)) t = &r->temp[k];
    if (!t) t = coda_args_find(r->user, info.name);
    if (t) s = coda_args_set(*out, info.name, t);
  }
  return s;
}

/* A failure of pass i, named. */
static coda_status pass_fail(runner *r, int i, coda_status s) {
  char why[512];
  snprintf(why, sizeof why, "%s", coda_last_error(r->ctx));
  return coda_fail(r->ctx, s, "pass %d of %d (%s): %s", i + 1, r->l->npasses,
                   r->l->pass[i].kind == IR_PASS_GEMM ? "the GEMM's epilogue" : "a map", why);
}

coda_status coda_passes_run(coda_context ctx, coda_program p, const coda_passes_gemm *g, int64_t M, int64_t N,
                            coda_args args, coda_tiling tiling) {
  runner r;
  memset(&r, 0, sizeof r);
  r.ctx = ctx;
  r.l = ir_passes_for(ctx, p);
  r.user = args;
  coda_status s = coda_args_check_names(ctx, p, args);
  if (!s) s = ir_check_params(ctx, p, "run");
  if (!s) s = alloc_temps(&r, M, N, tiling);
  for (int i = 0; !s && i < r.l->npasses; i++) {
    const ir_pass *ps = &r.l->pass[i];
    coda_args pa = NULL;
    s = bind_pass(&r, ps, &pa);
    if (!s && i == 0 && g) /* the first pass is the GEMM's epilogue, read acc or not */
      s = coda_gemm_epilogue_sched(ctx, ps->prog, g->ta, g->A, g->tb, g->B, pa, tiling, g->schedule);
    else if (!s)
      s = coda_map(ctx, ps->prog, M, pass_n(ps, N), pa, tiling);
    for (int k = 0; !s && k < ps->nread; k++)
      s = coda_finish(ctx, ps->prog, ps->prog->finishes[ps->read[k]].name, pa, M, pass_n(ps, N), tiling);
    if (s) s = pass_fail(&r, i, s);
    coda_args_destroy(pa);
  }
  if (!s) s = coda_synchronize(ctx); /* the temporaries are freed next */
  free_temps(&r);
  return s;
}

coda_status coda_passes_finish(coda_context ctx, coda_program p, const char *name, coda_args args, int64_t M,
                               int64_t N, coda_tiling tiling) {
  runner r;
  memset(&r, 0, sizeof r);
  r.ctx = ctx;
  r.l = ir_passes_for(ctx, p);
  r.user = args;
  coda_status s = coda_args_check_names(ctx, p, args);
  if (s) return s;
  const int i = ir_passes_find_finish(r.l, name, NULL);
  if (i < 0) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "the program has no finish statement '%s'", name);
  const ir_pass *ps = &r.l->pass[i];
  coda_args pa = NULL;
  s = bind_pass(&r, ps, &pa);
  if (!s) s = coda_finish(ctx, ps->prog, name, pa, M, pass_n(ps, N), tiling);
  coda_args_destroy(pa);
  return s;
}
