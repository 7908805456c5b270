/* Plan execution: the steps run through the public API in phase order,
 * the host ops (copy, zero), GEMM steps with fusion off (plain GEMM plus
 * the program as a map pass), single steps for benchmarks and kernel
 * precompilation for the cache-filling tools. */
#include "nn/plan_internal.h"

#include "base/internal.h"
#include "api/api.h" /* copies, the unfused program, kernel precompilation */

#include <stdio.h>
#include <string.h>

/* Host ops (on the device for a device plan). */
static coda_status host_op(coda_plan p, const plan_step *s) {
  coda_tensor d = view_of(&p->bufs[s->d]);
  coda_tensor a = s->kind == PLAN_COPY ? view_of(&p->bufs[s->a]) : d;
  return coda_tensor_copy(p->ctx, &d, s->kind == PLAN_COPY ? &a : NULL);
}

/* ---------------------------------------------------- fusion turned off */

coda_status plan_unfused_program(coda_plan p, int prog, coda_program *out) {
  if (!p || !out || prog < 0 || prog >= p->nprog) return CODA_ERR_INVALID_ARGUMENT;
  plan_program *pp = &p->progs[prog];
  if (pp->unfused) {
    *out = pp->unfused;
    return CODA_OK;
  }
  /* the IR pass: acc read from the tile input PLAN_ACC_INPUT */
  coda_status st = coda_program_unfused(p->ctx, pp->prog, PLAN_ACC_INPUT, acc_dtype(p), &pp->unfused);
  if (st != CODA_OK) {
    char inner[CODA_ERRMSG_LEN];
    snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
    return coda_fail(p->ctx, st, "plan '%s': program %s without fusion: %s", p->name, pp->name,
                     inner);
  }
  *out = pp->unfused;
  return CODA_OK;
}

coda_status coda_plan_set_fused(coda_plan p, int fused) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  for (int i = 0; i < p->nstep; i++)
    if (p->steps[i].kind == PLAN_GEMM) {
      p->steps[i].unfused = !fused;
      p->steps[i].sched = CODA_SCHED_AUTO;
    }
  plan_arena_refresh(p);
  return CODA_OK;
}

/* A GEMM + epilogue step with fusion off: acc_tmp = op(A)·op(B) (plain
 * GEMM), then the unfused program (plan_unfused_program) as a map pass
 * reading acc_tmp. */
static coda_status run_unfused(coda_context ctx, coda_plan p, const plan_step *s, coda_args args) {
  coda_program prog;
  coda_status st = plan_unfused_program(p, s->prog, &prog);
  if (st != CODA_OK) {
    if (ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
    return st;
  }
  const coda_dtype dt = acc_dtype(p);
  const size_t bytes = (size_t)s->M * (size_t)s->N * coda_dtype_size(dt);
  void *acc = p->acc_tmp;
  if (s->acc_off >= 0 && p->arena) {
    acc = (char *)p->arena + s->acc_off; /* laid out with the temporaries */
  } else if (bytes > p->acc_tmp_bytes) {
    if (p->acc_tmp) coda_free(p->ctx, p->acc_tmp);
    p->acc_tmp = NULL;
    p->acc_tmp_bytes = 0;
    st = coda_malloc(p->ctx, bytes, &p->acc_tmp);
    if (st != CODA_OK) {
      if (ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
      return st;
    }
    p->acc_tmp_bytes = bytes;
    acc = p->acc_tmp;
  }
  coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]);
  coda_tensor T = coda_tensor_2d(acc, dt, s->M, s->N);
  st = coda_gemm(ctx, s->ta, &A, s->tb, &B, &T, 1.0f, 0);
  if (st != CODA_OK) return st;
  st = coda_args_set(args, PLAN_ACC_INPUT, &T);
  if (st != CODA_OK) return st;
  return coda_map(ctx, prog, s->M, s->N, args, s->tiling);
}

coda_status plan_exec_step(coda_context ctx, coda_plan p, const plan_step *s, coda_args args) {
  coda_program prog = s->prog >= 0 ? p->progs[s->prog].prog : NULL;
  coda_status st;
  if (s->kind == PLAN_GEMM || s->kind == PLAN_MAP || s->kind == PLAN_FINISH) {
    coda_args_clear(args);
    for (int i = 0; i < s->nbind; i++) {
      coda_tensor t = view_of(&p->bufs[s->bind[i].buf]);
      st = coda_args_set(args, s->bind[i].arg, &t);
      if (st != CODA_OK) return st;
    }
  }
  switch (s->kind) {
  case PLAN_GEMM: {
    if (s->unfused) return run_unfused(ctx, p, s, args);
    coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]);
    return coda_gemm_epilogue_sched(ctx, prog, s->ta, &A, s->tb, &B, args, s->tiling, s->sched);
  }
  case PLAN_MAP: return coda_map(ctx, prog, s->M, s->N, args, s->tiling);
  case PLAN_FINISH: return coda_finish(ctx, prog, s->finish, args, s->M, s->N, s->tiling);
  case PLAN_MATMUL: {
    coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]),
                D = view_of(&p->bufs[s->d]);
    return coda_gemm(ctx, s->ta, &A, s->tb, &B, &D, s->alpha, s->accumulate);
  }
  case PLAN_ATTN_FWD:
  case PLAN_ATTN_BWD: {
    const plan_attention *g = &s->attn;
    coda_tensor qkv = view_of(&p->bufs[g->qkv]), o = view_of(&p->bufs[g->o]),
                lse = view_of(&p->bufs[g->lse]);
    if (s->kind == PLAN_ATTN_FWD)
      return coda_attention_forward(ctx, &qkv, (int)g->batch, (int)g->seq, g->n_heads,
                                    g->n_kv_heads, g->head_dim, &o, &lse);
    coda_tensor dout = view_of(&p->bufs[g->dout]), dqkv = view_of(&p->bufs[g->dqkv]);
    if (g->zp >= 0) {
      coda_tensor pos = view_of(&p->bufs[g->pos]), freq = view_of(&p->bufs[g->freq]),
                  zp = view_of(&p->bufs[g->zp]);
      return coda_attention_backward_rope(ctx, &qkv, &o, &lse, &dout, (int)g->batch,
                                          (int)g->seq, g->n_heads, g->n_kv_heads, g->head_dim,
                                          &pos, &freq, &dqkv, &zp);
    }
    return coda_attention_backward(ctx, &qkv, &o, &lse, &dout, (int)g->batch, (int)g->seq,
                                   g->n_heads, g->n_kv_heads, g->head_dim, &dqkv);
  }
  case PLAN_ZERO:
  case PLAN_COPY: return host_op(p, s);
  }
  return coda_fail(ctx, CODA_ERR_INTERNAL, "unknown step kind %d", (int)s->kind);
}

coda_status plan_run_step(coda_context ctx, coda_plan p, int k) {
  if (!ctx || !p || k < 0 || k >= p->nstep) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan_run_step: bad argument");
  coda_args args = NULL;
  coda_status st = coda_args_create(ctx, &args);
  if (st == CODA_OK) st = plan_exec_step(ctx, p, &p->steps[k], args);
  coda_args_destroy(args);
  return st;
}

/* The checks every entry that runs steps makes, then the buffers
 * allocated: both arguments, a plan that built, the context's backend. */
coda_status plan_enter(coda_context ctx, coda_plan p, const char *what) {
  if (!ctx || !p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: null argument", what);
  if (p->status != CODA_OK)
    return coda_fail(ctx, p->status, "plan '%s' was not built successfully", p->name);
  if (coda_context_backend(ctx) != coda_context_backend(p->ctx))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan '%s' was built for another backend",
                     p->name);
  coda_status st = plan_alloc(p);
  if (st != CODA_OK && ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
  return st;
}

/* ------------------------------------------ choosing fusion per GEMM step */
coda_status coda_plan_run(coda_context ctx, coda_plan p, coda_phase phase) {
  if (ctx && p && phase != CODA_PHASE_FORWARD && phase != CODA_PHASE_BACKWARD)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_plan_run: bad phase %d", (int)phase);
  coda_status st = plan_enter(ctx, p, "coda_plan_run");
  if (st != CODA_OK) return st;
  coda_args args = NULL;
  st = coda_args_create(ctx, &args);
  if (st != CODA_OK) return st;
  for (int i = 0; i < p->nstep && st == CODA_OK; i++) {
    const plan_step *s = &p->steps[i];
    if (s->phase != phase) continue;
    st = plan_exec_step(ctx, p, s, args);
    if (st != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(ctx));
      coda_fail(ctx, st, "plan '%s', step %d (%s): %s", p->name, i, s->label, inner);
    }
  }
  coda_args_destroy(args);
  return st;
}

coda_status plan_precompile_step(coda_plan p, int k, int unfused, int *cached, int *skipped) {
  *cached = 0;
  *skipped = 0;
  const plan_step *st = &p->steps[k];
  coda_program prog = st->prog >= 0 ? p->progs[st->prog].prog : NULL;
  if (st->kind == PLAN_GEMM && !unfused) /* both schedules, for coda_plan_tune_fusion */
    return coda_precompile_gemm_epilogue(p->ctx, prog, st->ta == CODA_T, st->tb == CODA_T,
                                         p->bufs[st->a].dtype == CODA_F16, cached);
  if (st->kind == PLAN_GEMM) {
    coda_program up;
    coda_status s = plan_unfused_program(p, st->prog, &up);
    return s == CODA_OK ? coda_precompile_map(p->ctx, up, cached) : s;
  }
  if (st->kind == PLAN_MAP && !unfused) return coda_precompile_map(p->ctx, prog, cached);
  *skipped = 1;
  return CODA_OK;
}
