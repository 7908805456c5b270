/* The small steps (PLAN_ZERO, PLAN_COPY): a buffer filled with zeros, or
 * copied with dtype conversion; on the device for a device plan. */
#include "nn/plan_internal.h"

#include "base/internal.h"
#include "api/api.h" /* coda_tensor_copy */

void plan_zero(coda_plan p, coda_phase phase, const char *label, const char *dst) {
  plan_step *s = plan_new_step(p, PLAN_ZERO, phase, label);
  if (!s) return;
  s->d = plan_need_buf(p, label, dst);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_copy(coda_plan p, coda_phase phase, const char *label, const char *src,
               const char *dst) {
  plan_step *s = plan_new_step(p, PLAN_COPY, phase, label);
  if (!s) return;
  s->a = plan_need_buf(p, label, src);
  s->d = plan_need_buf(p, label, dst);
  if (p->status != CODA_OK) return;
  if (p->bufs[s->a].rows != p->bufs[s->d].rows || p->bufs[s->a].cols != p->bufs[s->d].cols) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': copy %s -> %s shapes differ", label, src, dst);
    return;
  }
  p->nstep++;
}

static coda_status run(coda_context ctx, coda_plan p, const plan_step *s) {
  (void)ctx; /* runs on the plan's context, as it allocated the buffers */
  const coda_tensor d = view_of(&p->bufs[s->d]);
  const coda_tensor a = s->kind == PLAN_COPY ? view_of(&p->bufs[s->a]) : d;
  return coda_tensor_copy(p->ctx, &d, s->kind == PLAN_COPY ? &a : NULL);
}

static void refs(coda_plan p, const plan_step *s, plan_refs *r) {
  (void)p;
  if (s->kind == PLAN_COPY) plan_ref(r, s->a, REF_READ);
  plan_ref(r, s->d, REF_WRITE);
}

static void print(coda_plan p, coda_strbuf *b, const plan_step *s) {
  if (s->kind == PLAN_ZERO) coda_sb_printf(b, "host   %s = 0", p->bufs[s->d].name);
  else coda_sb_printf(b, "host   %s = %s", p->bufs[s->d].name, p->bufs[s->a].name);
}

const plan_step_ops plan_host_steps = {run, refs, print, NULL};
