/* The plain GEMM step (PLAN_MATMUL): D = alpha·op(A)·op(B) (+ D), no
 * epilogue (weight gradients, plain dgrads). */
#include "nn/plan_internal.h"

#include "base/internal.h"

void plan_matmul(coda_plan p, coda_phase phase, const char *label, coda_transpose ta,
                 const char *A, coda_transpose tb, const char *B, const char *D,
                 float alpha, int accumulate) {
  plan_step *s = plan_new_step(p, PLAN_MATMUL, phase, label);
  if (!s) return;
  s->ta = ta;
  s->tb = tb;
  s->a = plan_need_buf(p, label, A);
  s->b = plan_need_buf(p, label, B);
  s->d = plan_need_buf(p, label, D);
  s->alpha = alpha;
  s->accumulate = accumulate;
  if (p->status != CODA_OK) return;
  const plan_buf *a = &p->bufs[s->a], *b = &p->bufs[s->b], *d = &p->bufs[s->d];
  if (op_cols(a, ta) != op_rows(b, tb) || d->rows != op_rows(a, ta) || d->cols != op_cols(b, tb)) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': %s = op(%s) op(%s) shapes do not match", label, D,
              A, B);
    return;
  }
  s->M = d->rows;
  s->N = d->cols;
  p->nstep++;
}

static coda_status run(coda_context ctx, coda_plan p, const plan_step *s) {
  const coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]),
                    D = view_of(&p->bufs[s->d]);
  return coda_gemm(ctx, s->ta, &A, s->tb, &B, &D, s->alpha, s->accumulate);
}

static void refs(coda_plan p, const plan_step *s, plan_refs *r) {
  (void)p;
  plan_ref(r, s->a, REF_READ);
  plan_ref(r, s->b, REF_READ);
  plan_ref(r, s->d, s->accumulate ? REF_READ | REF_WRITE : REF_WRITE);
}

static void print(coda_plan p, coda_strbuf *b, const plan_step *s) {
  const char *tn[2] = {"", "^T"};
  coda_sb_printf(b, "matmul %s %s= %s%s . %s%s", p->bufs[s->d].name, s->accumulate ? "+" : "",
                 p->bufs[s->a].name, tn[s->ta], p->bufs[s->b].name, tn[s->tb]);
  if (s->alpha != 1.0f) coda_sb_printf(b, " * %g", (double)s->alpha);
}

const plan_step_ops plan_matmul_steps = {run, refs, print, NULL};
