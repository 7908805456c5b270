/* Side queues (coda_train_ops.side_*): a second stream beside the
 * context's, with markers, so bandwidth-bound work (the trainer's AdamW)
 * runs under the compute-bound work of the context's stream and each
 * consumer waits only for the stretch it reads. Every cross-stream order is
 * an event: the side stream is non-blocking, so it never waits on the
 * legacy default stream by itself. */
#include "backends/cuda/backend.h"
#include "backends/cuda/stream.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

typedef struct coda_cuda_side {
  cudaStream_t stream;
  cudaEvent_t fork; /* the context's work before the last fork */
  int n;
  cudaEvent_t mark[];
} coda_cuda_side;

static coda_status side_fail(coda_context ctx, const char *what, cudaError_t e) {
  (void)cudaGetLastError();
  return coda_fail(ctx, CODA_ERR_BACKEND, "side queue: %s: %s", what, cudaGetErrorString(e));
}

void coda_cuda_side_destroy(coda_context ctx, void *side) {
  (void)ctx;
  coda_cuda_side *q = side;
  if (!q) return;
  for (int i = 0; i < q->n; i++) cudaEventDestroy(q->mark[i]);
  if (q->fork) cudaEventDestroy(q->fork);
  if (q->stream) cudaStreamDestroy(q->stream);
  free(q);
}

coda_status coda_cuda_side_create(coda_context ctx, int nmarks, void **side) {
  coda_cuda_side *q = calloc(1, sizeof *q + (size_t)nmarks * sizeof(cudaEvent_t));
  if (!q) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  /* the least priority: its blocks fill what the context's stream leaves */
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&q->stream, cudaStreamNonBlocking, least);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&q->fork, cudaEventDisableTiming);
  while (e == cudaSuccess && q->n < nmarks) {
    e = cudaEventCreateWithFlags(&q->mark[q->n], cudaEventDisableTiming);
    if (e == cudaSuccess) q->n++;
  }
  if (e != cudaSuccess) {
    coda_cuda_side_destroy(ctx, q);
    return side_fail(ctx, "cudaStreamCreate / cudaEventCreate", e);
  }
  *side = q;
  return CODA_OK;
}

coda_status coda_cuda_side_fork(coda_context ctx, void *side) {
  coda_cuda_side *q = side;
  cudaError_t e = cudaEventRecord(q->fork, coda_cuda_stream(ctx));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(q->stream, q->fork, 0);
  return e == cudaSuccess ? CODA_OK : side_fail(ctx, "fork", e);
}

static coda_status mark_index(coda_context ctx, const coda_cuda_side *q, int i) {
  if (i >= 0 && i < q->n) return CODA_OK;
  return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "side queue: marker %d of %d", i, q->n);
}

coda_status coda_cuda_side_mark(coda_context ctx, void *side, int i) {
  coda_cuda_side *q = side;
  coda_status st = mark_index(ctx, q, i);
  if (st) return st;
  cudaError_t e = cudaEventRecord(q->mark[i], q->stream);
  return e == cudaSuccess ? CODA_OK : side_fail(ctx, "mark", e);
}

coda_status coda_cuda_side_wait(coda_context ctx, void *side, int i) {
  coda_cuda_side *q = side;
  coda_status st = mark_index(ctx, q, i);
  if (st) return st;
  cudaError_t e = cudaStreamWaitEvent(coda_cuda_stream(ctx), q->mark[i], 0);
  return e == cudaSuccess ? CODA_OK : side_fail(ctx, "wait", e);
}

void *coda_cuda_side_stream(void *side) {
  return side ? (void *)((coda_cuda_side *)side)->stream : NULL;
}
