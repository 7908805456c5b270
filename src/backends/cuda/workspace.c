/* The context's reusable device scratch (see workspace.h). */
#include "backends/cuda/workspace.h"
#include "backends/cuda/backend.h" /* coda_cuda_ctx */
#include "backends/cuda/stream.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

typedef struct coda_cuda_ws {
  void *p[CODA_CUDA_WS_COUNT];
  size_t bytes[CODA_CUDA_WS_COUNT];
} coda_cuda_ws;

size_t coda_cuda_workspace_held(coda_context ctx, coda_cuda_ws_slot slot) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  const coda_cuda_ws *w = b ? b->ws : NULL;
  return w && (unsigned)slot < CODA_CUDA_WS_COUNT && w->p[slot] ? w->bytes[slot] : 0;
}

coda_status coda_cuda_workspace(coda_context ctx, coda_cuda_ws_slot slot, size_t bytes,
                                void **out) {
  *out = NULL;
  if ((unsigned)slot >= CODA_CUDA_WS_COUNT)
    return coda_fail(ctx, CODA_ERR_INTERNAL, "CUDA workspace: slot %d", (int)slot);
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA workspace: not a CUDA context");
  coda_cuda_ws *w = b->ws;
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "CUDA workspace: out of host memory");
    b->ws = w;
  }
  if (w->bytes[slot] >= bytes && w->p[slot]) {
    *out = w->p[slot];
    return CODA_OK;
  }
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(coda_cuda_stream(ctx), &cap) == cudaSuccess &&
      cap != cudaStreamCaptureStatusNone)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA workspace: %zu bytes needed while the stream is captured (the "
                     "workspace has %zu); run the work once before capturing it",
                     bytes, w->bytes[slot]);
  if (w->p[slot]) {
    cudaFree(w->p[slot]); /* waits for the kernels that may still read it */
    coda_mem_sub(ctx, w->bytes[slot]);
    w->p[slot] = NULL;
    w->bytes[slot] = 0;
  }
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "CUDA workspace: cudaMalloc of %zu bytes: %s",
                     bytes, cudaGetErrorString(e));
  }
  w->p[slot] = p;
  w->bytes[slot] = bytes;
  coda_mem_add(ctx, bytes);
  *out = p;
  return CODA_OK;
}

void coda_cuda_workspace_release(coda_context ctx) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  coda_cuda_ws *w = b ? b->ws : NULL;
  if (!w) return;
  for (int i = 0; i < CODA_CUDA_WS_COUNT; i++)
    if (w->p[i]) {
      cudaFree(w->p[i]);
      coda_mem_sub(ctx, w->bytes[i]);
    }
  free(w);
  b->ws = NULL;
}
