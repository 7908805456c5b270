/* Scratch memory the context owns and reuses: one growing device buffer per
 * slot, so a call needs no allocation of its own once the slot is large
 * enough (and a plan run can be captured into a CUDA graph). Counted by
 * coda_memory_stats. */
#ifndef CODA_CUDA_WORKSPACE_H
#define CODA_CUDA_WORKSPACE_H

#include "base/internal.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Users of a slot run one after another on the context's stream, so one
 * buffer per slot serves every call. */
typedef enum coda_cuda_ws_slot {
  CODA_CUDA_WS_SPLITK = 0,     /* split-K partial sums of the GEMM */
  CODA_CUDA_WS_ATTENTION = 1,  /* attention backward's per-row scratch */
  CODA_CUDA_WS_TUNE = 2,       /* the GEMM autotuner's output scratch */
  CODA_CUDA_WS_CUDNN = 3,      /* cuDNN attention: its plan's workspace and buffers */
  CODA_CUDA_WS_COUNT
} coda_cuda_ws_slot;

/* A device buffer of at least `bytes` for the slot. Growing it waits for
 * the device (the old buffer may be in use) and is refused while the
 * context's stream is being captured: run the work once before capturing. */
coda_status coda_cuda_workspace(coda_context ctx, coda_cuda_ws_slot slot, size_t bytes,
                                void **out);
/* The bytes the slot holds now (0: none yet). */
size_t coda_cuda_workspace_held(coda_context ctx, coda_cuda_ws_slot slot);
/* Frees every slot (context destruction). */
void coda_cuda_workspace_release(coda_context ctx);

#ifdef __cplusplus
}
#endif
#endif
