/* Launch checks (see debug.h). */
#include "backends/cuda/debug.h"
#include "backends/cuda/stream.h"
#include "base/internal.h"

#include <cuda_runtime_api.h>

int coda_cuda_capturing(coda_context ctx) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(coda_cuda_stream(ctx), &cap) != cudaSuccess) {
    /* e.g. the legacy stream queried while another stream captures */
    (void)cudaGetLastError();
    return 1;
  }
  return cap != cudaStreamCaptureStatusNone;
}

int coda_cuda_stream_wait(coda_context ctx) {
  cudaStream_t s = coda_cuda_stream(ctx);
  return (int)(s ? cudaStreamSynchronize(s) : cudaDeviceSynchronize());
}

coda_status coda_cuda_check_launch(coda_context ctx, const char *what) {
  cudaError_t e = cudaGetLastError();
  /* Debug mode: kernels run asynchronously, so their faults only show at a
   * later synchronizing call; waiting here pins them on this launch. A
   * captured stream runs nothing yet, and waiting on it would end the
   * capture. */
  if (e == cudaSuccess && ctx && ctx->opts.debug_sync && !coda_cuda_capturing(ctx))
    e = (cudaError_t)coda_cuda_stream_wait(ctx);
  if (e == cudaSuccess) return CODA_OK;
  (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
  return coda_fail(ctx, CODA_ERR_BACKEND, "%s: %s", what ? what : "kernel launch",
                   cudaGetErrorString(e));
}
