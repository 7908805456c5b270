/* The training feature table of a backend (coda_backend_ops.train): the
 * kernels the trainer runs on a device that holds its state. The api layer
 * calls them (api/api.h, coda_train_*) after its checks. */
#ifndef CODA_BACKENDS_TRAIN_OPS_H
#define CODA_BACKENDS_TRAIN_OPS_H

#include "base/internal.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The trainer's device-resident kernels (fp32 master weights, AdamW,
 * embedding); see the CUDA backend's train_kernels.cu for their meaning. */
typedef struct coda_train_ops {
  /* dst = src + shift, rounded (shift: 1 for Gemma 3's norm weights, whose
   * plans scale by 1 + w; else 0) */
  coda_status (*round)(coda_context, const coda_tensor *dst, const float *src, float shift);
  coda_status (*accum)(coda_context, float *dst, const coda_tensor *src, float scale);
  /* x row r = table row tok[r], plus row r % period of the position table
   * pos when one is given (GPT-2's learned positions; NULL: none), times
   * scale (Gemma 3's sqrt(dim); 1: none) */
  coda_status (*embed)(coda_context, const coda_tensor *x, const float *table, const int32_t *tok,
                       const float *pos, int64_t period, float scale);
  coda_status (*embed16)(coda_context, const coda_tensor *x, const uint16_t *table,
                         const int32_t *tok, const uint16_t *pos, int64_t period, float scale);
  coda_status (*embed_grad)(coda_context, float *g, const coda_tensor *dx, const int32_t *rows,
                            const int32_t *seg, const int32_t *pos, int nrows, float scale);
  coda_status (*targets)(coda_context, const coda_tensor *t, const int32_t *tg);
  coda_status (*sumsq)(coda_context, const float *g, size_t n, size_t chunk, double *part);
  coda_status (*adamw)(coda_context, float *w, const float *g, float *m, float *v, size_t n,
                       const double *coef, double gscale);
  /* elements [lo, hi) of the n laid out back to back; side NULL: the
   * context's stream, else that side queue's */
  coda_status (*adamw_multi)(coda_context, float *w, const float *g, float *m, float *v,
                             uint16_t *wb, size_t lo, size_t hi, const int64_t *seg, int nseg,
                             const double *coef, double gscale, void *side);
  /* the same over bf16 state (CODA_OPTIM_STATE_BF16): w, m, v in bf16,
   * each result rounded stochastically with the bits of (seed, t, element
   * index) (base/bf16_round.h) */
  coda_status (*adamw_bf16)(coda_context, uint16_t *w, const float *g, uint16_t *m, uint16_t *v,
                            size_t lo, size_t hi, const int64_t *seg, int nseg,
                            const double *coef, double gscale, uint64_t seed, int64_t t,
                            void *side);
  coda_status (*init_normal)(coda_context, float *w, size_t n, uint64_t s0, uint64_t draw0,
                             double sd);
  coda_status (*fill)(coda_context, float *w, size_t n, float value);
  coda_status (*zero)(coda_context, void *p, size_t bytes);
  coda_status (*memory)(coda_context, size_t *used, size_t *total);
  /* A side queue: work that runs beside the context's stream (CUDA: a
   * second stream) with nmarks markers. fork: the queue's next work waits
   * for the context's work issued so far; mark: marker i after the queue's
   * work issued so far; wait: the context's next work waits for marker i. */
  coda_status (*side_create)(coda_context, int nmarks, void **side);
  coda_status (*side_fork)(coda_context, void *side);
  coda_status (*side_mark)(coda_context, void *side, int i);
  coda_status (*side_wait)(coda_context, void *side, int i);
  void (*side_destroy)(coda_context, void *side);
} coda_train_ops;

#ifdef __cplusplus
}
#endif
#endif
