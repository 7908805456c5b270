/* Kernels of the cuDNN attention path (attention_cudnn.c): the RoPE
 * backward as a pass after cuDNN's backward (the own kernels fuse it into
 * their stores), and the copy of lse to and from cuDNN's [B][Hq][T]
 * stats when the engine does not take the strided view. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/attention_common.cuh" /* rope_bwd_pair */
#include "backends/cuda/attention_cudnn.h"
#include "backends/cuda/stream.h"

namespace {

/* One warp per (token, head slot): the lanes take the head's column pairs
 * in turn, sum qkv * g in a fixed order (each lane's pairs, then a
 * butterfly), so zp is deterministic; pairs with frequency (0, 0), V's,
 * keep their values. The gradient read is cuDNN's bf16 result. */
__global__ void rope_bwd_kernel(__nv_bfloat16 *g, long long ldg, const __nv_bfloat16 *y,
                                long long ldy, long long BT, int slots, int hd, const int *pos,
                                long long ldp, const float *freq, float *zp, long long ldz) {
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= BT * slots) return; /* whole warps leave together */
  const long long m = w / slots;
  const int slot = (int)(w - m * slots);
  const float p = (float)pos[m * ldp];
  __nv_bfloat16 *gr = g + m * ldg + (long long)slot * hd;
  const __nv_bfloat16 *yr = y + m * ldy + (long long)slot * hd;
  float z = 0.f;
  for (int c = 2 * lane; c < hd; c += 64) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(gr + c));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(yr + c));
    z = __fadd_rn(z, __fadd_rn(__fmul_rn(b.x, a.x), __fmul_rn(b.y, a.y)));
    const float2 f = *reinterpret_cast<const float2 *>(freq + (long long)slot * hd + c);
    if (f.x != 0.f || f.y != 0.f) {
      float x2, y2;
      coda_attn::rope_bwd_pair(a.x, a.y, p, f.x, f.y, x2, y2);
      *reinterpret_cast<__nv_bfloat162 *>(gr + c) = __floats2bfloat162_rn(x2, y2);
    }
  }
#pragma unroll
  for (int sh = 16; sh > 0; sh >>= 1) z += __shfl_xor_sync(0xffffffffu, z, sh);
  if (lane == 0) zp[m * ldz + slot] = z;
}

__global__ void lse_copy_kernel(float *lse, long long ld, float *stats, int B, int T, int Hq,
                                int to_stats) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long n = (long long)B * T * Hq;
  if (i >= n) return;
  const int h = (int)(i % Hq);
  const long long bt = i / Hq;
  const long long b = bt / T, t = bt - b * T;
  float *a = lse + bt * ld + h, *s = stats + (b * Hq + h) * T + t;
  if (to_stats) *s = *a;
  else *a = *s;
}

coda_status check(coda_context ctx, const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return CODA_OK;
  return coda_fail(ctx, CODA_ERR_BACKEND, "cuDNN attention: %s launch failed: %s", what,
                   cudaGetErrorString(e));
}

}  // namespace

extern "C" coda_status coda_cudnn_rope_bwd(coda_context ctx, void *dqkv, long long ld_dqkv,
                                           const void *qkv, long long ld_qkv, long long BT,
                                           int slots, int hd, const int *pos, long long ld_pos,
                                           const float *freq, float *zp, long long ld_zp) {
  const long long warps = BT * slots;
  if (warps <= 0) return CODA_OK;
  const unsigned blocks = (unsigned)((warps + 7) / 8);
  rope_bwd_kernel<<<blocks, 256, 0, coda_cuda_stream(ctx)>>>(
      static_cast<__nv_bfloat16 *>(dqkv), ld_dqkv, static_cast<const __nv_bfloat16 *>(qkv),
      ld_qkv, BT, slots, hd, pos, ld_pos, freq, zp, ld_zp);
  return check(ctx, "RoPE backward");
}

extern "C" coda_status coda_cudnn_lse_copy(coda_context ctx, float *lse, long long ld,
                                           float *stats, int B, int T, int Hq, int to_stats) {
  const long long n = (long long)B * T * Hq;
  if (n <= 0) return CODA_OK;
  lse_copy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, coda_cuda_stream(ctx)>>>(
      lse, ld, stats, B, T, Hq, to_stats);
  return check(ctx, "lse copy");
}
