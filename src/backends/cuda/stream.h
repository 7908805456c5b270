/* The context's stream: every launch, copy and stream-ordered allocation of
 * the CUDA backend goes to it (coda_context_options.stream; NULL is the
 * legacy default stream). */
#ifndef CODA_CUDA_STREAM_H
#define CODA_CUDA_STREAM_H

#include "base/internal.h"

#include <cuda_runtime_api.h>

static inline cudaStream_t coda_cuda_stream(coda_context ctx) {
  return ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0;
}

#endif
