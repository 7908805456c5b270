/* Plan execution: the table of step kinds (nn/step_kinds.def), the steps
 * run by their kinds' entries in phase order, the fusion switch, single
 * steps for benchmarks and kernel precompilation for the cache-filling
 * tools. */
#include "nn/plan_internal.h"

#include "base/internal.h"

#include <stdio.h>

/* ------------------------------------------------------ the step kinds */

/* The entries of nn/step_kinds.def, each defined in its kind's file. */
#define PLAN_STEP_KIND(id, public, ops) extern const plan_step_ops ops;
#include "nn/step_kinds.def"
#undef PLAN_STEP_KIND

static const plan_step_ops *const step_ops[PLAN_STEP_KINDS] = {
#define PLAN_STEP_KIND(id, public, ops) &ops,
#include "nn/step_kinds.def"
#undef PLAN_STEP_KIND
};

const plan_step_ops *plan_step_ops_of(plan_step_kind k) { return step_ops[k]; }

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

coda_status plan_exec_step(coda_context ctx, coda_plan p, const plan_step *s) {
  if ((unsigned)s->kind >= PLAN_STEP_KINDS)
    return coda_fail(ctx, CODA_ERR_INTERNAL, "unknown step kind %d", (int)s->kind);
  return step_ops[s->kind]->run(ctx, p, s);
}

coda_status plan_run_step(coda_context ctx, coda_plan p, int k) {
  if (!ctx || !p || k < 0 || k >= p->nstep) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan_run_step: bad argument");
  return plan_exec_step(ctx, p, &p->steps[k]);
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
  for (int i = 0; i < p->nstep && st == CODA_OK; i++) {
    const plan_step *s = &p->steps[i];
    if (s->phase != phase) continue;
    st = plan_exec_step(ctx, p, s);
    if (st != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(ctx));
      coda_fail(ctx, st, "plan '%s', step %d (%s): %s", p->name, i, s->label, inner);
    }
  }
  return st;
}

coda_status plan_precompile_step(coda_plan p, int k, int unfused, int *cached, int *skipped) {
  *cached = 0;
  *skipped = 0;
  const plan_step *s = &p->steps[k];
  if (!step_ops[s->kind]->precompile) { /* no kernel of its own */
    *skipped = 1;
    return CODA_OK;
  }
  return step_ops[s->kind]->precompile(p, s, unfused, cached, skipped);
}
