/* CUDA graphs of a context's stream (coda_graph_begin ..), and the
 * context's own stream (coda_context_options.own_stream). */
#include "backends/cuda/backend.h"
#include "backends/cuda/stream.h"
#include "base/internal.h"

#include <cuda_runtime_api.h>

static coda_status graph_fail(coda_context ctx, const char *what, cudaError_t e) {
  (void)cudaGetLastError();
  return coda_fail(ctx, CODA_ERR_BACKEND, "%s: %s", what, cudaGetErrorString(e));
}

coda_status coda_cuda_stream_open(coda_context ctx) {
  if (ctx->stream || !ctx->opts.own_stream) return CODA_OK;
  cudaStream_t s = NULL;
  /* at the device's greatest priority: work queued beside it (the
   * trainer's side queue, at the default priority) takes the SMs only as
   * the context's kernels leave them */
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest);
  if (e != cudaSuccess) return graph_fail(ctx, "the context's stream (cudaStreamCreate)", e);
  ctx->stream = s;
  ctx->owns_stream = 1;
  return CODA_OK;
}

void coda_cuda_stream_close(coda_context ctx) {
  if (!ctx->owns_stream) return;
  (void)cudaStreamSynchronize((cudaStream_t)ctx->stream);
  (void)cudaStreamDestroy((cudaStream_t)ctx->stream);
  ctx->stream = NULL;
  ctx->owns_stream = 0;
}

coda_status coda_cuda_graph_begin(coda_context ctx) {
  if (!ctx->stream)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "coda_graph_begin: the context works on the "
                     "legacy default stream, which cannot be recorded; give it a stream "
                     "(coda_context_options.stream or own_stream)");
  /* ThreadLocal: another thread's unrelated CUDA calls do not break the
   * recording, and this thread's calls that would are refused */
  cudaError_t e = cudaStreamBeginCapture(coda_cuda_stream(ctx), cudaStreamCaptureModeThreadLocal);
  return e == cudaSuccess ? CODA_OK : graph_fail(ctx, "coda_graph_begin", e);
}

coda_status coda_cuda_graph_end(coda_context ctx, void **exec) {
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(coda_cuda_stream(ctx), &g);
  if (e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    return graph_fail(ctx, "coda_graph_end (a call between begin and end is not recordable)", e);
  }
  cudaGraphExec_t x = NULL;
  e = cudaGraphInstantiate(&x, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) return graph_fail(ctx, "coda_graph_end (cudaGraphInstantiate)", e);
  *exec = x;
  return CODA_OK;
}

coda_status coda_cuda_graph_launch(coda_context ctx, void *exec) {
  cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, coda_cuda_stream(ctx));
  return e == cudaSuccess ? CODA_OK : graph_fail(ctx, "coda_graph_launch", e);
}

void coda_cuda_graph_destroy(void *exec) {
  if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}
