/* What the plan files (plan_build.c, plan_layout.c, plan_run.c,
 * plan_tune.c, plan_print.c) share beyond plan.h: small views of buffers
 * and the few entry points one concern calls in another. Not for use
 * outside src/nn/plan_*.c. */
#ifndef CODA_NN_PLAN_INTERNAL_H
#define CODA_NN_PLAN_INTERNAL_H

#include "nn/plan.h"

/* The tensor a buffer is now (its memory, or NULL before allocation). */
static inline coda_tensor view_of(const plan_buf *b) {
  coda_tensor t = {b->data, b->dtype, b->rows, b->cols, b->ld};
  return t;
}

/* Shape of op(buffer). */
static inline int64_t op_rows(const plan_buf *b, coda_transpose t) { return t == CODA_T ? b->cols : b->rows; }
static inline int64_t op_cols(const plan_buf *b, coda_transpose t) { return t == CODA_T ? b->rows : b->cols; }

/* dtype of an unfused GEMM step's accumulator temporary (PLAN_ACC_INPUT):
 * the activations' dtype, bf16 (f64 in exact mode). */
static inline coda_dtype acc_dtype(coda_plan p) {
  return coda_context_precision(p->ctx) == CODA_PRECISION_F64 ? CODA_F64 : CODA_BF16;
}

/* plan_layout.c: after the fusion choices changed, an arena whose
 * accumulator slots no longer match the unfused steps is given back, to be
 * laid out again. */
void plan_arena_refresh(coda_plan p);

/* plan_run.c: runs one step with the given argument set (cleared and
 * filled from the step's bindings). */
coda_status plan_exec_step(coda_context ctx, coda_plan p, const plan_step *s, coda_args args);
/* plan_run.c: the checks every entry that runs steps makes (both
 * arguments, a plan that built, the context's backend), then the buffers
 * allocated; `what` names the entry in messages. */
coda_status plan_enter(coda_context ctx, coda_plan p, const char *what);

#endif
