/* What the plan files (plan_build.c, plan_layout.c, plan_run.c,
 * plan_tune.c, plan_print.c and the step kinds' step_*.c) share beyond
 * plan.h: small views of buffers, the table of step kinds and the few
 * entry points one concern calls in another. Not for use outside
 * src/nn/plan_*.c and src/nn/step_*.c. */
#ifndef CODA_NN_PLAN_INTERNAL_H
#define CODA_NN_PLAN_INTERNAL_H

#include "nn/plan.h"
#include "base/strbuf.h"

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

/* The buffers one step references, each once, with how (REF_*; an
 * accumulating write is both). */
enum { REF_READ = 1, REF_WRITE = 2 };
#define PLAN_MAX_REFS (PLAN_MAX_BINDS + 6)
typedef struct plan_refs {
  int n;
  int buf[PLAN_MAX_REFS], use[PLAN_MAX_REFS];
} plan_refs;
/* plan_layout.c: records buffer b (none when < 0) used as `use`. */
void plan_ref(plan_refs *r, int b, int use);

/* What a kind of step does: one entry of nn/step_kinds.def; the file that
 * defines it holds the kind's builder too. run: the step, through the
 * public API and api/api.h; refs: the buffers it references (liveness,
 * the arena); print: its line after the label; precompile (NULL: the
 * kind has no kernel of its own): as plan_precompile_step. */
typedef struct plan_step_ops {
  coda_status (*run)(coda_context ctx, coda_plan p, const plan_step *s);
  void (*refs)(coda_plan p, const plan_step *s, plan_refs *r);
  void (*print)(coda_plan p, coda_strbuf *b, const plan_step *s);
  coda_status (*precompile)(coda_plan p, const plan_step *s, int unfused, int *cached, int *skipped);
} plan_step_ops;
/* plan_run.c: the entry of kind k. */
const plan_step_ops *plan_step_ops_of(plan_step_kind k);

/* plan_build.c, for the step kinds' builders: a new zeroed step of the
 * plan (NULL after a failure; appended for good by p->nstep++ once
 * complete), and the index of buffer `name` (-1, and the plan failed,
 * when there is none). */
plan_step *plan_new_step(coda_plan p, plan_step_kind kind, coda_phase phase, const char *label);
int plan_need_buf(coda_plan p, const char *label, const char *name);
int plan_name_ok(const char *s);

/* plan_print.c: a size or offset, short: bytes below 10 KiB, KiB below
 * 10 MiB, then MiB. */
const char *plan_fmt_bytes(char buf[32], size_t v);

/* plan_layout.c: after the fusion choices changed, an arena whose
 * accumulator slots no longer match the unfused steps is given back, to be
 * laid out again. */
void plan_arena_refresh(coda_plan p);

/* plan_run.c: runs one step (by its kind's entry). */
coda_status plan_exec_step(coda_context ctx, coda_plan p, const plan_step *s);
/* plan_run.c: the checks every entry that runs steps makes (both
 * arguments, a plan that built, the context's backend), then the buffers
 * allocated; `what` names the entry in messages. */
coda_status plan_enter(coda_context ctx, coda_plan p, const char *what);

#endif
