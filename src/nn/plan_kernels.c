/* Public access to a plan's steps (coda_plan_num_steps,
 * coda_plan_step_label, coda_plan_step, coda_plan_run_step) and kernel
 * precompilation (coda_plan_precompile*), over the plan executor's
 * plan_run_step and plan_precompile_step. */
#include "coda_nn.h"
#include "base/internal.h"
#include "nn/plan.h"

#include <string.h>

int coda_plan_num_steps(coda_plan p) { return p ? p->nstep : 0; }

const char *coda_plan_step_label(coda_plan p, int step) {
  if (!p || step < 0 || step >= p->nstep) return NULL;
  return p->steps[step].label;
}

coda_status coda_plan_precompile_step(coda_plan p, int step, int unfused, int *from_cache,
                                      int *skipped) {
  int cached = 0, skip = 0;
  if (from_cache) *from_cache = 0;
  if (skipped) *skipped = 0;
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (step < 0 || step >= p->nstep || (unfused != 0 && unfused != 1))
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT, "precompile: step %d of %d, unfused %d",
                     step, p->nstep, unfused);
  coda_status s = plan_precompile_step(p, step, unfused, &cached, &skip);
  if (from_cache) *from_cache = cached;
  if (skipped) *skipped = skip;
  return s;
}

coda_status coda_plan_precompile(coda_plan p, int unfused, int *n_kernels, int *n_compiled) {
  int built = 0, fresh = 0;
  coda_status s = CODA_OK;
  if (n_kernels) *n_kernels = 0;
  if (n_compiled) *n_compiled = 0;
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  for (int k = 0; k < p->nstep && s == CODA_OK; k++)
    for (int variant = 0; variant <= (unfused != 0) && s == CODA_OK; variant++) {
      int cached = 0, skipped = 0;
      s = coda_plan_precompile_step(p, k, variant, &cached, &skipped);
      if (s == CODA_OK && !skipped) {
        built++;
        fresh += !cached;
      }
    }
  if (n_kernels) *n_kernels = built;
  if (n_compiled) *n_compiled = fresh;
  return s;
}

coda_status coda_plan_step(coda_plan p, int step, coda_plan_step_info *out) {
  if (!p || !out) return CODA_ERR_INVALID_ARGUMENT;
  if (step < 0 || step >= p->nstep)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT, "plan step %d of %d", step, p->nstep);
  const plan_step *st = &p->steps[step];
  memset(out, 0, sizeof *out);
  static const coda_plan_step_kind public_kind[PLAN_STEP_KINDS] = {
#define PLAN_STEP_KIND(id, public, ops) public,
#include "nn/step_kinds.def"
#undef PLAN_STEP_KIND
  };
  out->kind = public_kind[st->kind];
  out->phase = st->phase;
  out->label = st->label;
  if (st->prog >= 0)
    out->program = p->progs[st->prog].name;
  if (st->kind == PLAN_GEMM) {
    out->unfused = st->unfused;
    out->schedule = st->sched == CODA_SCHED_PINGPONG      ? CODA_EPI_SCHEDULE_PINGPONG
                    : st->sched == CODA_SCHED_COOPERATIVE ? CODA_EPI_SCHEDULE_COOPERATIVE
                                                          : CODA_EPI_SCHEDULE_AUTO;
    for (int i = 0; i < 3; i++) out->tuned_us[i] = st->tuned_us[i];
    out->tuned_cached = st->tuned_cached;
  }
  return CODA_OK;
}

coda_status coda_plan_run_step(coda_context ctx, coda_plan p, int step) {
  if (!p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "run step: NULL plan");
  if (step < 0 || step >= p->nstep)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "run step %d of %d", step, p->nstep);
  return plan_run_step(ctx, p, step);
}
