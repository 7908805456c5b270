/* Launch checks of the CUDA backend. Every kernel launch site calls
 * coda_cuda_check_launch right after the launch. */
#ifndef CODA_CUDA_DEBUG_H
#define CODA_CUDA_DEBUG_H
#include "coda.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Returns CODA_ERR_BACKEND with "<what>: <CUDA error>" if the launch just
 * made failed (cudaGetLastError, cheap and asynchronous). In debug-sync
 * mode (coda_context_options.debug_sync or CODA_DEBUG_SYNC=1) it also waits
 * for the device, so a fault inside the kernel (an illegal address, a trap)
 * is reported by the call that launched it instead of by a later,
 * unrelated call. Callers that launch through the driver API check the
 * CUresult first and then call this for the synchronizing part. */
coda_status coda_cuda_check_launch(coda_context ctx, const char *what);
#ifdef __cplusplus
}
#endif
#endif
