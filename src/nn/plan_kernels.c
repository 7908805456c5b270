/* Public access to a plan's steps and kernel precompilation
 * (coda_plan_num_steps, coda_plan_step_label, coda_plan_precompile*), over
 * plan_precompile_step of the plan executor. */
#include "coda_nn.h"
#include "base/internal.h"
#include "nn/plan.h"

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
