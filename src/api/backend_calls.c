/* The api.h and api/decode.h entry points: backend work the layers above
 * ask for without naming a backend, through the context's table
 * (backends/backend.h) and its feature tables (train_ops.h, decode_ops.h). */
#include "api/api.h"
#include "api/decode.h"
#include "backends/backend.h"
#include "backends/decode_ops.h"
#include "backends/train_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

coda_status coda_tensor_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src) {
  return ctx->ops->copy(ctx, dst, src);
}

coda_status coda_backend_tags(coda_context ctx, char *device, size_t ndevice, char *lib,
                              size_t nlib) {
  char code[64];
  coda_status st = ctx->ops->tags(ctx, device, ndevice, code, sizeof code);
  if (st != CODA_OK) return st;
  snprintf(lib, nlib, "%d.%d.%d%s", CODA_VERSION_MAJOR, CODA_VERSION_MINOR, CODA_VERSION_PATCH,
           code);
  return CODA_OK;
}

/* The kernels are the CUDA backend's whatever the context's backend. */
static const coda_backend_ops *compiler(coda_context ctx, int *from_cache) {
  *from_cache = 0;
  const coda_backend_ops *b = coda_backend_ops_for(CODA_BACKEND_CUDA);
  if (!b || !b->precompile_map) {
    coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "kernel precompilation: built without CUDA");
    return NULL;
  }
  return b;
}

coda_status coda_precompile_gemm_epilogue(coda_context ctx, coda_program prog, int trans_a,
                                          int trans_b, int f16, int *from_cache) {
  const coda_backend_ops *b = compiler(ctx, from_cache);
  if (!b) return CODA_ERR_NOT_SUPPORTED;
  return b->precompile_gemm_epilogue(ctx, prog, trans_a, trans_b, f16, from_cache);
}

coda_status coda_precompile_map(coda_context ctx, coda_program prog, int *from_cache) {
  const coda_backend_ops *b = compiler(ctx, from_cache);
  if (!b) return CODA_ERR_NOT_SUPPORTED;
  return b->precompile_map(ctx, prog, from_cache);
}

int coda_backend_built(coda_backend b) { return coda_backend_ops_for(b) != NULL; }

/* ---- the trainer's device-resident kernels ---- */

static const coda_train_ops *train_ops(coda_context ctx, const char *what) {
  const coda_train_ops *t = ctx->ops->train;
  if (!t)
    coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: the %s backend keeps no device training state",
              what, ctx->ops->name);
  else if (ctx->ops->path_check && ctx->ops->path_check(ctx, what) != CODA_OK)
    return NULL; /* (its message is on ctx) */
  return t;
}
#define TRAIN_CALL(fn, ...)                                  \
  const coda_train_ops *t = train_ops(ctx, "coda_train_" #fn); \
  return t ? t->fn(ctx, __VA_ARGS__) : CODA_ERR_NOT_SUPPORTED

coda_status coda_train_round(coda_context ctx, const coda_tensor *dst, const float *src,
                             float shift) {
  TRAIN_CALL(round, dst, src, shift);
}
coda_status coda_train_accum(coda_context ctx, float *dst, const coda_tensor *src, float scale) {
  TRAIN_CALL(accum, dst, src, scale);
}
static coda_status check_period(coda_context ctx, const void *pos, int64_t period) {
  if (pos && period <= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "embedding lookup: a position table needs "
                     "a positive period, not %lld", (long long)period);
  return CODA_OK;
}
coda_status coda_train_embed(coda_context ctx, const coda_tensor *x, const float *table,
                             const int32_t *tok, const float *pos, int64_t period, float scale) {
  coda_status s = check_period(ctx, pos, period);
  if (s) return s;
  TRAIN_CALL(embed, x, table, tok, pos, period, scale);
}
coda_status coda_train_embed16(coda_context ctx, const coda_tensor *x, const uint16_t *table,
                               const int32_t *tok, const uint16_t *pos, int64_t period,
                               float scale) {
  coda_status s = check_period(ctx, pos, period);
  if (s) return s;
  TRAIN_CALL(embed16, x, table, tok, pos, period, scale);
}
coda_status coda_train_embed_grad(coda_context ctx, float *g, const coda_tensor *dx,
                                  const int32_t *rows, const int32_t *seg, const int32_t *pos,
                                  int nrows, float scale) {
  TRAIN_CALL(embed_grad, g, dx, rows, seg, pos, nrows, scale);
}
coda_status coda_train_targets(coda_context ctx, const coda_tensor *tgt, const int32_t *tg) {
  TRAIN_CALL(targets, tgt, tg);
}
coda_status coda_train_sumsq(coda_context ctx, const float *g, size_t n, size_t chunk,
                             double *part) {
  TRAIN_CALL(sumsq, g, n, chunk, part);
}
coda_status coda_train_adamw(coda_context ctx, float *w, const float *g, float *m, float *v,
                             size_t n, const double *coef, double gscale) {
  TRAIN_CALL(adamw, w, g, m, v, n, coef, gscale);
}
coda_status coda_train_adamw_multi(coda_context ctx, float *w, const float *g, float *m, float *v,
                                   uint16_t *wb, size_t lo, size_t hi, const int64_t *seg,
                                   int nseg, const double *coef, double gscale, void *side) {
  TRAIN_CALL(adamw_multi, w, g, m, v, wb, lo, hi, seg, nseg, coef, gscale, side);
}
coda_status coda_train_adamw_bf16(coda_context ctx, uint16_t *w, const float *g, uint16_t *m,
                                  uint16_t *v, size_t lo, size_t hi, const int64_t *seg, int nseg,
                                  const double *coef, double gscale, uint64_t seed, int64_t step,
                                  void *side) {
  TRAIN_CALL(adamw_bf16, w, g, m, v, lo, hi, seg, nseg, coef, gscale, seed, step, side);
}
coda_status coda_train_init_normal(coda_context ctx, float *w, size_t n, uint64_t s0,
                                   uint64_t draw0, double sd) {
  TRAIN_CALL(init_normal, w, n, s0, draw0, sd);
}
coda_status coda_train_fill(coda_context ctx, float *w, size_t n, float value) {
  TRAIN_CALL(fill, w, n, value);
}
coda_status coda_train_zero(coda_context ctx, void *p, size_t bytes) {
  TRAIN_CALL(zero, p, bytes);
}
coda_status coda_train_device_memory(coda_context ctx, size_t *used, size_t *total) {
  TRAIN_CALL(memory, used, total);
}
int coda_train_has_side_queues(coda_context ctx) {
  return ctx->ops->train && ctx->ops->train->side_create;
}

coda_status coda_train_side_create(coda_context ctx, int nmarks, void **side) {
  if (nmarks < 1 || !side)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_train_side_create: %d markers (>= 1), "
                     "side %s", nmarks, side ? "set" : "NULL");
  TRAIN_CALL(side_create, nmarks, side);
}
coda_status coda_train_side_fork(coda_context ctx, void *side) { TRAIN_CALL(side_fork, side); }
coda_status coda_train_side_mark(coda_context ctx, void *side, int i) {
  TRAIN_CALL(side_mark, side, i);
}
coda_status coda_train_side_wait(coda_context ctx, void *side, int i) {
  TRAIN_CALL(side_wait, side, i);
}
void coda_train_side_destroy(coda_context ctx, void *side) {
  if (side && ctx->ops->train) ctx->ops->train->side_destroy(ctx, side);
}

/* ---- the decoder's device kernels ---- */

static const coda_decode_ops *decode_ops(coda_context ctx, const char *what) {
  const coda_decode_ops *t = ctx->ops->decode;
  if (!t)
    coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: the %s backend has no decode kernels", what,
              ctx->ops->name);
  else if (ctx->ops->path_check && ctx->ops->path_check(ctx, what) != CODA_OK)
    return NULL; /* (its message is on ctx) */
  return t;
}
#define DECODE_CALL(fn, ...)                                    \
  const coda_decode_ops *t = decode_ops(ctx, "coda_decode_" #fn); \
  return t ? t->fn(ctx, __VA_ARGS__) : CODA_ERR_NOT_SUPPORTED

int coda_decode_on_device(coda_context ctx) { return ctx && ctx->ops->decode != NULL; }
coda_status coda_decode_embed(coda_context ctx, float *x, const uint16_t *table,
                              const int32_t *tok, int64_t M, int64_t D, float scale,
                              const uint16_t *pos_table, const int32_t *pos) {
  DECODE_CALL(embed, x, table, tok, M, D, scale, pos_table, pos);
}
coda_status coda_decode_linear(coda_context ctx, const coda_decode_linear_job *j) {
  DECODE_CALL(linear, j);
}
coda_status coda_decode_attention(coda_context ctx, const coda_decode_rows *r, uint16_t *o,
                                  const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                                  float *work, unsigned *ticket, int splits) {
  DECODE_CALL(attention, r, o, q, kc, vc, work, ticket, splits);
}
coda_status coda_decode_gather_rows(coda_context ctx, float *dst, const float *src,
                                    const int32_t *dst_rows, int64_t n, int64_t cols,
                                    float softcap) {
  DECODE_CALL(gather_rows, dst, src, dst_rows, n, cols, softcap);
}
coda_status coda_decode_sample(coda_context ctx, int32_t *tokens, const float *logits,
                               const int32_t *pos, int64_t B, int64_t V, double temperature,
                               int top_k, double top_p, uint64_t seed) {
  const coda_decode_sample_job j = {tokens, logits, pos, B, V, temperature, top_p, top_k, seed};
  DECODE_CALL(sample, &j);
}
int coda_decode_row_step_ok(coda_context ctx, const coda_decode_row_step_job *j, char *msg,
                            size_t cap) {
  if (!ctx || !ctx->ops->decode || !ctx->ops->decode->row_step) {
    if (msg && cap) snprintf(msg, cap, "the backend has no one-kernel decode step");
    return 0;
  }
  return ctx->ops->decode->row_step_ok(ctx, j, msg, cap);
}
coda_status coda_decode_row_step(coda_context ctx, const coda_decode_row_step_job *j) {
  const coda_decode_ops *t = decode_ops(ctx, "coda_decode_row_step");
  if (!t) return CODA_ERR_NOT_SUPPORTED;
  if (!t->row_step)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "coda_decode_row_step: the %s backend has no "
                     "one-kernel decode step", ctx->ops->name);
  return t->row_step(ctx, j);
}

/* ---- timing markers ---- */

struct coda_timeline_s {
  void *set;
  int n;
};

coda_status coda_timeline_create(coda_context ctx, int n, coda_timeline *out) {
  if (!out || n < 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_timeline_create: %d markers", n);
  *out = NULL;
  if (!ctx->ops->timer_create)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the %s backend has no timing markers",
                     ctx->ops->name);
  coda_timeline t = calloc(1, sizeof *t);
  if (!t) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_status st = ctx->ops->timer_create(ctx, n, &t->set);
  if (st) {
    free(t);
    return st;
  }
  t->n = n;
  *out = t;
  return CODA_OK;
}

coda_status coda_timeline_record(coda_context ctx, coda_timeline t, int i) {
  if (!t || i < 0 || i >= t->n)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_timeline_record: marker %d of %d", i,
                     t ? t->n : 0);
  return ctx->ops->timer_record(ctx, t->set, i);
}

coda_status coda_timeline_elapsed(coda_context ctx, coda_timeline t, int a, int b, double *ms) {
  if (!t || !ms || a < 0 || b < 0 || a >= t->n || b >= t->n)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_timeline_elapsed: markers %d, %d of %d",
                     a, b, t ? t->n : 0);
  return ctx->ops->timer_elapsed(ctx, t->set, a, b, ms);
}

void coda_timeline_destroy(coda_context ctx, coda_timeline t) {
  if (!t) return;
  ctx->ops->timer_destroy(ctx, t->set);
  free(t);
}
