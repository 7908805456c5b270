/* What the two wgmma kernel families share (attention_wg.cu, fed by
 * cp.async, and attention_ws.cu, warp-specialized and fed by TMA): the
 * wgmma tile layout (wswz) and its loads and descriptors, the wgmma calls
 * at the attention tile shapes (attn_wgmma.cuh), and the tile math both
 * families run on their accumulators (causal/window mask, online softmax, P and
 * dS packing, the O/lse, dQ and dK/dV stores), so that their results and
 * summation orders agree. */
#pragma once

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/attn_wgmma.cuh"

namespace coda_attn {

/* --------------------------------------------------- wgmma tiles (sm_90a) */

/* (wgmma fence/commit/wait, the register fence, the async-proxy fence and
 * the matrix descriptor: ptx_sm90.cuh) */

/* wgmma tiles of R rows x HD columns: HD/64 column panels of R rows x 128
 * bytes, each the 128-byte swizzle layout (16-byte chunk c of row r at
 * chunk c ^ (r & 7)); panels start on 1024-byte boundaries. As a K-major
 * operand (Q, K): k16 step kk at panel kk/4, +32 bytes per kk%4, SBO 1024.
 * As an MN-major operand (V, columns = N): k16 step = 16 rows = 2048 bytes,
 * LBO = one panel (next 64 columns), SBO 1024. For HD = 64 this is the
 * swz<64> layout. */
template <int R, int HD>
__device__ __forceinline__ int wswz(int row, int chunk) {
  return (chunk >> 3) * R * 64 + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}
template <int R, int HD, int NT>
__device__ __forceinline__ void load_tile_wg(bf16 *tile, const bf16 *g, long long ld, int row0,
                                             int T) {
  constexpr int kChunks = HD / 8;
#pragma unroll
  for (int i = threadIdx.x; i < R * kChunks; i += NT) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < T;
    const bf16 *src = valid ? g + (long long)(row0 + r) * ld + c * 8 : g;
    cp_async16(smem_addr(tile + wswz<R, HD>(r, c)), src, valid);
  }
}
/* K-major descriptor of k16 step kk of a wgmma tile of R rows. */
template <int R>
__device__ __forceinline__ uint64_t kmajor_desc(const bf16 *tile, int kk) {
  return smem_desc(smem_addr(tile) + (kk >> 2) * R * 128 + (kk & 3) * 32, 16, 1024);
}

template <int N>
__device__ __forceinline__ void wg_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
  if constexpr (N == 64) wgmma_ss_m64n64k16<0>(d, da, db, acc);
  else wgmma_ss_m64n128k16<0>(d, da, db, acc);
}
template <int N>
__device__ __forceinline__ void wg_rs_t(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (N == 64) wgmma_rs_m64n64k16<1>(d, a, db, 1);
  else wgmma_rs_m64n128k16<1>(d, a, db, 1);
}

/* ---------------------- tile math of the wgmma kernels (both families)
 *
 * One thread holds two rows of a 64-row accumulator: rows r0 and r0 + 8,
 * value i at row 8((i>>1)&1) and column 8(i>>2) + 2(lane&3) + (i&1). */

/* Causal and window mask of an N-column score block whose first key is
 * key0 (sees_key). */
template <int N>
__device__ __forceinline__ void mask_causal(float (&s)[N / 2], int key0, int r0, int lane,
                                            int win) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int key = key0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
    if (!sees_key(r0 + 8 * ((i >> 1) & 1), key, win)) s[i] = -INFINITY;
  }
}
/* Online softmax of scores s against the running max m and sum l (first:
 * no history). Leaves exp2(c*s - c*m) in s, rescales l and returns the
 * factor for O in alpha (l holds this thread's columns; the quad is summed
 * at the end). A row whose keys so far were all masked (a window's edge)
 * keeps m = -inf and gets P = 0 and alpha = 0, never NaN. */
template <int N>
__device__ __forceinline__ void online_softmax(float (&s)[N / 2], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], bool first, float scale2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = first ? -INFINITY : m[r];
#pragma unroll
    for (int nb = 0; nb < N / 8; ++nb)
      mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * r], s[4 * nb + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    /* every key so far masked (mx = -inf, so m = -inf too): 0 in place of
     * mx gives alpha = exp2(-inf) = 0 and P = 0 where -inf - -inf is NaN */
    const float mxs = mx == -INFINITY ? 0.f : mx;
    alpha[r] = first ? 0.f : ex2((m[r] - mxs) * scale2);
    m[r] = mx;
    const float mc = mxs * scale2;
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < N / 8; ++nb) {
      s[4 * nb + 2 * r] = ex2(fmaf(s[4 * nb + 2 * r], scale2, -mc));
      s[4 * nb + 2 * r + 1] = ex2(fmaf(s[4 * nb + 2 * r + 1], scale2, -mc));
      sum += s[4 * nb + 2 * r] + s[4 * nb + 2 * r + 1];
    }
    l[r] = first ? sum : l[r] * alpha[r] + sum;
  }
}
template <int HD>
__device__ __forceinline__ void rescale_rows(float (&o)[HD / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int nb = 0; nb < HD / 8; ++nb) {
    o[4 * nb] *= alpha[0];
    o[4 * nb + 1] *= alpha[0];
    o[4 * nb + 2] *= alpha[1];
    o[4 * nb + 3] *= alpha[1];
  }
}
/* An N-column block as bf16 A fragments of an RS wgmma (per warp the
 * m16n8k16 A layout, which the accumulator's already is). */
template <int N>
__device__ __forceinline__ void pack_a(const float (&v)[N / 2], uint32_t (&a)[N / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < N / 16; ++ks) {
    a[ks][0] = pack2(v[8 * ks], v[8 * ks + 1]);
    a[ks][1] = pack2(v[8 * ks + 2], v[8 * ks + 3]);
    a[ks][2] = pack2(v[8 * ks + 4], v[8 * ks + 5]);
    a[ks][3] = pack2(v[8 * ks + 6], v[8 * ks + 7]);
  }
}
/* The forward's stores of rows r0, r0 + 8 of head h: O / l as bf16 and
 * lse = scale*m + ln l. */
template <int HD>
__device__ __forceinline__ void store_out_rows(const Params &p, const float (&o)[HD / 2],
                                               const float (&m)[2], const float (&l)[2], int r0,
                                               int b, int h, int lane) {
  const long long orow = (long long)b * p.T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int row = r0 + 8 * r;
    if (row >= p.T) continue;
    const float inv = 1.f / lr;
    bf16 *dst = p.out + (orow + row) * p.ld_out + (long long)h * HD + (lane & 3) * 2;
#pragma unroll
    for (int nb = 0; nb < HD / 8; ++nb)
      *reinterpret_cast<uint32_t *>(dst + nb * 8) =
          pack2(o[4 * nb + 2 * r] * inv, o[4 * nb + 2 * r + 1] * inv);
    if ((lane & 3) == 0) p.lse[(orow + row) * p.ld_lse + h] = m[r] * p.scale + logf(lr);
  }
}
/* dQ pass, K/V tile of N keys from key0: dS = P*(dP - D) with
 * P = exp2(c*S - L) (0 where the query does not see the key), packed as A
 * fragments. */
template <int N>
__device__ __forceinline__ void dq_ds(const float (&s)[N / 2], const float (&dp)[N / 2],
                                      const float (&Lr)[2], const float (&Dr)[2], int key0, int r0,
                                      int lane, float scale2, int win, uint32_t (&da)[N / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < N / 16; ++ks) {
    float ds[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int i = 8 * ks + e, r = (i >> 1) & 1;
      const int key = key0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      float pr = ex2(fmaf(s[i], scale2, -Lr[r]));
      if (!sees_key(r0 + 8 * r, key, win)) pr = 0.f;
      ds[e] = pr * (dp[i] - Dr[r]);
    }
    da[ks][0] = pack2(ds[0], ds[1]);
    da[ks][1] = pack2(ds[2], ds[3]);
    da[ks][2] = pack2(ds[4], ds[5]);
    da[ks][3] = pack2(ds[6], ds[7]);
  }
}
/* dK/dV pass, Q/dO tile of N queries from qt (L, D in tl, td): P^T =
 * exp2(c*S^T - L) (0 where the query does not see the key or is past the
 * sequence) and dS^T =
 * P^T*(dP^T - D), packed as A fragments. Rows are keys key0, key0 + 8. */
template <int N>
__device__ __forceinline__ void dkdv_pds(const float (&s)[N / 2], const float (&dp)[N / 2],
                                         const float *tl, const float *td, int qt, int key0,
                                         int T, int lane, float scale2, int win,
                                         uint32_t (&pa)[N / 16][4], uint32_t (&da)[N / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < N / 16; ++ks) {
    float pt[8], ds[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = 8 * ks + e, r = (c >> 1) & 1;
      const int qi = 8 * (c >> 2) + 2 * (lane & 3) + (c & 1);
      const int q = qt + qi;
      float pr = ex2(fmaf(s[c], scale2, -tl[qi]));
      if (!sees_key(q, key0 + 8 * r, win) || q >= T) pr = 0.f;
      pt[e] = pr;
      ds[e] = pr * (dp[c] - td[qi]);
    }
    pa[ks][0] = pack2(pt[0], pt[1]);
    pa[ks][1] = pack2(pt[2], pt[3]);
    pa[ks][2] = pack2(pt[4], pt[5]);
    pa[ks][3] = pack2(pt[6], pt[7]);
    da[ks][0] = pack2(ds[0], ds[1]);
    da[ks][1] = pack2(ds[2], ds[3]);
    da[ks][2] = pack2(ds[4], ds[5]);
    da[ks][3] = pack2(ds[6], ds[7]);
  }
}
/* dQ stores of rows r0, r0 + 8 of query head h (dq *= scale); qkv values
 * for the RoPE stores from the BM-row Q tile sQ whose first row is q0. */
template <bool ROPE, int BM, int HD>
__device__ __forceinline__ void store_dq_rows(const Params &p, const float (&dq)[HD / 2], int r0,
                                              int q0, int b, int h, int lane, const bf16 *sQ) {
  const long long orow = (long long)b * p.T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + 8 * r;
    float a[HD / 8], c[HD / 8];
#pragma unroll
    for (int nb = 0; nb < HD / 8; ++nb) {
      a[nb] = dq[4 * nb + 2 * r] * p.scale;
      c[nb] = dq[4 * nb + 2 * r + 1] * p.scale;
    }
    store_grad_row<ROPE, HD / 8>(p, orow + row, row < p.T, h * HD + (lane & 3) * 2, h, a, c,
                                 YTile<BM, HD>{sQ, row - q0, lane & 3});
  }
}
/* dK (*= scale) and dV stores of keys key0, key0 + 8 of kv head g; K and
 * V values for the RoPE stores from the BN-row tiles sK, sV whose first
 * row is k0. */
template <bool ROPE, int BN, int HD>
__device__ __forceinline__ void store_dkdv_rows(const Params &p, const float (&dk)[HD / 2],
                                                const float (&dv)[HD / 2], int key0, int k0, int b,
                                                int g, int lane, const bf16 *sK, const bf16 *sV) {
  const long long orow = (long long)b * p.T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    float a[HD / 8], c[HD / 8];
#pragma unroll
    for (int nb = 0; nb < HD / 8; ++nb) {
      a[nb] = dk[4 * nb + 2 * r] * p.scale;
      c[nb] = dk[4 * nb + 2 * r + 1] * p.scale;
    }
    const int ck = (p.Hq + g) * HD + (lane & 3) * 2, cv = ck + p.Hkv * HD;
    store_grad_row<ROPE, HD / 8>(p, orow + key, key < p.T, ck, p.Hq + g, a, c,
                                 YTile<BN, HD>{sK, key - k0, lane & 3});
#pragma unroll
    for (int nb = 0; nb < HD / 8; ++nb) {
      a[nb] = dv[4 * nb + 2 * r];
      c[nb] = dv[4 * nb + 2 * r + 1];
    }
    store_grad_row<ROPE, HD / 8>(p, orow + key, key < p.T, cv, p.Hq + p.Hkv + g, a, c,
                                 YTile<BN, HD>{sV, key - k0, lane & 3});
  }
}

}  // namespace coda_attn
