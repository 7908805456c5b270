/* What the decoder's kernel files share (decode_kernels.cu, decode_attention.cu,
 * decode_sample.cu): the bf16 type, the launch with programmatic dependent
 * launch and its check, and the warp sum. Every decode kernel starts with
 * pdl_wait() and is launched by launch(), with programmatic stream
 * serialization (unless CODA_DECODE_PDL=0, or on the sm80 path), so the
 * next kernel of a step is scheduled while the previous one drains; before
 * pdl_wait() a kernel reads
 * only constant weights and writes nothing. Internal to those files (an anonymous namespace each). */
#pragma once

#include "backends/cuda/backend.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/stream.h"

extern "C" {
#include "base/internal.h"
}

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>

namespace {

typedef __nv_bfloat16 bf16;

coda_status check_launch(coda_context ctx, const char *what) {
  char msg[96];
  snprintf(msg, sizeof msg, "CUDA decode kernel (%s)", what);
  return coda_cuda_check_launch(ctx, msg);
}

__device__ __forceinline__ void pdl_wait() {
  /* the previous grid of the stream has ended and its writes are visible;
   * then let the next grid be scheduled. Below sm_90 (the sm_80 build of
   * these files) there is no programmatic launch and nothing to wait for:
   * the kernel starts after the previous one ends. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem>>>(args...) on the context's stream, allowed
 * to start before the previous kernel ends (it waits in pdl_wait()); on
 * the sm80 path without programmatic stream serialization (a feature of
 * sm_90), in stream order. */
template <typename... P, typename... A>
coda_status launch(coda_context ctx, const char *what, void (*kernel)(P...), dim3 grid,
                   dim3 block, size_t smem, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = coda_cuda_stream(ctx);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = ctx->knobs.decode_pdl_off || coda_cuda_sm80(ctx) ? 0 : 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA decode kernel (%s): %s", what,
                     cudaGetErrorString(e));
  }
  return check_launch(ctx, what);
}

unsigned grid_of(long long n, int threads) {
  long long g = (n + threads - 1) / threads;
  return (unsigned)(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

} // namespace
