/* Causal grouped-query attention on packed qkv (CPU reference).
 *
 * Straightforward per-head computation in the compute type: each task owns
 * its outputs (forward: one query head; backward: one kv head and all the
 * query heads that read it), so the result does not depend on the number
 * of threads. The public entry points check every argument here and send
 * CUDA contexts to src/backends/cuda. */
#include "backends/cpu/cpu.h"
#include "backends/cpu/rope.h"
#include "backends/backend.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define REAL float
#define SFX f32
#define RF(name) name##f
#include "backends/cpu/attention_impl.h"
#undef REAL
#undef SFX
#undef RF

#define REAL double
#define SFX f64
#define RF(name) name
#include "backends/cpu/attention_impl.h"
#undef REAL
#undef SFX
#undef RF

static int nthreads(coda_context ctx, int64_t tasks, double work) {
  int n = ctx->opts.num_threads > 0 ? ctx->opts.num_threads : omp_get_max_threads();
  if (n < 1) n = 1;
  if ((int64_t)n > tasks) n = (int)tasks;
  return work < CPU_SERIAL_WORK ? 1 : n;
}

coda_status cpu_attention_forward(coda_context ctx, const coda_attn_job *job) {
  const coda_tensor *qkv = job->qkv, *out = job->out, *lse = job->lse;
  const int B = job->B, T = job->T, Hq = job->Hq, Hkv = job->Hkv, hd = job->hd;
  const int f64 = ctx->opts.precision == CODA_PRECISION_F64;
  const size_t es = f64 ? sizeof(double) : sizeof(float);
  const int64_t tasks = (int64_t)B * Hq;
  const int nth = nthreads(ctx, tasks, (double)B * Hq * T * T * hd * 2);
  const size_t per = (size_t)(4 * (int64_t)T * hd + T) * es;
  const double sc = job->scale; /* 0: 1/sqrt(hd), in the compute type */
  char *buf = malloc(per * (size_t)nth);
  if (!buf) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "attention: out of memory");
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) if (nth > 1)
  for (int64_t i = 0; i < tasks; i++) {
    void *w = buf + per * (size_t)omp_get_thread_num();
    if (f64)
      att_fwd_head_f64(qkv, out, lse, i / Hq, (int)(i % Hq), T, Hq, Hkv, hd, sc, job->window, w);
    else
      att_fwd_head_f32(qkv, out, lse, i / Hq, (int)(i % Hq), T, Hq, Hkv, hd, sc,
                       job->window, w);
  }
  free(buf);
  return CODA_OK;
}

coda_status cpu_attention_backward(coda_context ctx, const coda_attn_job *job) {
  const coda_tensor *qkv = job->qkv, *out = job->out, *lse = job->lse, *dout = job->dout,
                    *dqkv = job->dqkv;
  const coda_attn_rope *rope = job->rope;
  const int B = job->B, T = job->T, Hq = job->Hq, Hkv = job->Hkv, hd = job->hd;
  const int f64 = ctx->opts.precision == CODA_PRECISION_F64;
  const size_t es = f64 ? sizeof(double) : sizeof(float);
  const int64_t tasks = (int64_t)B * Hkv;
  const int nth = nthreads(ctx, tasks, (double)B * Hq * T * T * hd * 4);
  const size_t per = (size_t)(8 * (int64_t)T * hd + T) * es;
  const double sc = job->scale; /* 0: 1/sqrt(hd), in the compute type */
  const int win = job->window;
  char *buf = malloc(per * (size_t)nth);
  if (!buf) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "attention: out of memory");
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) if (nth > 1)
  for (int64_t i = 0; i < tasks; i++) {
    void *w = buf + per * (size_t)omp_get_thread_num();
    if (f64)
      att_bwd_group_f64(qkv, out, lse, dout, dqkv, rope, i / Hkv, (int)(i % Hkv), T, Hq, Hkv, hd,
                        sc, win, w);
    else
      att_bwd_group_f32(qkv, out, lse, dout, dqkv, rope, i / Hkv, (int)(i % Hkv), T, Hq, Hkv, hd,
                        sc, win, w);
  }
  free(buf);
  return CODA_OK;
}

