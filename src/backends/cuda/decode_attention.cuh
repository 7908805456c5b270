/* The decode attention's scan over cache positions, shared by the
 * attention kernel (decode_attention.cu) and the one-kernel step
 * (decode_row_step.cu): a warp's online softmax of up to 8 query heads of
 * one KV head over the positions its block gives it, the lanes splitting
 * the head dimension (HDL values each). Internal to those files. */
#pragma once

#include "backends/cuda/decode_common.cuh"

namespace {

/* cache positions a warp loads at once (fewer for wide heads: registers) */
template <int HDL> constexpr int attn_keys() { return HDL >= 8 ? 2 : HDL >= 4 ? 4 : 8; }

/* n = 1, 2, 4 or 8 consecutive bf16 (aligned to their size) in one load;
 * L2: through L2 only (values written earlier in the same kernel). */
template <int n, bool L2>
__device__ __forceinline__ void load_bf16(const bf16 *p, float *out) {
  if (n == 8) {
    const uint4 v = L2 ? __ldcg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
    const bf16 *b = reinterpret_cast<const bf16 *>(&v);
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = __bfloat162float(b[i]);
  } else if (n == 4) {
    const uint2 v = L2 ? __ldcg(reinterpret_cast<const uint2 *>(p)) : *reinterpret_cast<const uint2 *>(p);
    const bf16 *b = reinterpret_cast<const bf16 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) out[i] = __bfloat162float(b[i]);
  } else if (n == 2) {
    const unsigned v = L2 ? __ldcg(reinterpret_cast<const unsigned *>(p)) : *reinterpret_cast<const unsigned *>(p);
    const bf16 *b = reinterpret_cast<const bf16 *>(&v);
    out[0] = __bfloat162float(b[0]);
    out[1] = __bfloat162float(b[1]);
  } else {
    const unsigned short v = L2 ? __ldcg(reinterpret_cast<const unsigned short *>(p))
                                : *reinterpret_cast<const unsigned short *>(p);
    out[0] = __bfloat162float(*reinterpret_cast<const bf16 *>(&v));
  }
}

/* Warp `warp` of WARPS takes every WARPS-th batch of attn_keys positions
 * of [lo, hi), their K and V loads issued together (one memory latency a
 * batch, not a position), and folds each into the running max mx, sum l
 * and values acc of its G query heads, qv their scaled query values. kb,
 * vb: the lane's first K and V values at position 0; stride: between
 * positions. */
template <int HDL, int WARPS, bool L2>
__device__ __forceinline__ void attn_scan(const float (&qv)[8][HDL], float (&acc)[8][HDL],
                                          float (&mx)[8], float (&l)[8], const bf16 *kb,
                                          const bf16 *vb, long long stride, int lo, int hi, int G,
                                          int warp) {
  constexpr int keys = attn_keys<HDL>();
  for (int t0 = lo + warp * keys; t0 < hi; t0 += WARPS * keys) {
    float kf[keys][HDL], vf[keys][HDL];
#pragma unroll
    for (int u = 0; u < keys; u++) {
      const int t = t0 + u < hi ? t0 + u : t0; /* past the end: a repeat, not used */
      load_bf16<HDL, L2>(kb + t * stride, kf[u]);
      load_bf16<HDL, L2>(vb + t * stride, vf[u]);
    }
#pragma unroll
    for (int u = 0; u < keys; u++) {
      if (t0 + u >= hi) break;
#pragma unroll
      for (int g = 0; g < 8; g++) {
        if (g >= G) break;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < HDL; i++) d = fmaf(qv[g][i], kf[u][i], d);
        d = warp_sum(d);
        const float m2 = fmaxf(mx[g], d), corr = __expf(mx[g] - m2), p = __expf(d - m2);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int i = 0; i < HDL; i++) acc[g][i] = acc[g][i] * corr + p * vf[u][i];
        mx[g] = m2;
      }
    }
  }
}

} // namespace
