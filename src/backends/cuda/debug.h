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
 * for the context's stream, so a fault inside the kernel (an illegal
 * address, a trap) is reported by the call that launched it instead of by a
 * later, unrelated call; not while the stream is being captured into a
 * graph (nothing runs then, and a synchronization would end the capture).
 * Callers that launch through the driver API check the CUresult first and
 * then call this for the synchronizing part. */
coda_status coda_cuda_check_launch(coda_context ctx, const char *what);
/* 1 if the context's stream is being captured into a CUDA graph (also when
 * the query itself fails: callers then skip what a capture forbids). */
int coda_cuda_capturing(coda_context ctx);
/* Waits for the work queued on the context's stream: cudaStreamSynchronize
 * on a caller's stream; on the legacy default stream (no stream given)
 * cudaDeviceSynchronize, as before streams existed, so that work of other
 * streams (NCCL's) is waited for too. Returns the CUDA error. */
int coda_cuda_stream_wait(coda_context ctx);
#ifdef __cplusplus
}
#endif
#endif
