/* Launch checks (see debug.h). */
#include "backends/cuda/debug.h"
#include "base/internal.h"

#include <cuda_runtime_api.h>

coda_status coda_cuda_check_launch(coda_context ctx, const char *what) {
  cudaError_t e = cudaGetLastError();
  /* Debug mode: kernels run asynchronously, so their faults only show at a
   * later synchronizing call; waiting here pins them on this launch. */
  if (e == cudaSuccess && ctx && ctx->opts.debug_sync) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return CODA_OK;
  (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
  return coda_fail(ctx, CODA_ERR_BACKEND, "%s: %s", what ? what : "kernel launch",
                   cudaGetErrorString(e));
}
