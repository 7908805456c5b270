/* Causal grouped-query attention on Hopper (sm_90a), bf16 in and out, fp32
 * accumulation: a FlashAttention-2 style forward and a deterministic
 * backward, all on mma.sync m16n8k16 with ldmatrix and cp.async.
 *
 * Shared conventions of every kernel:
 *  - packed qkv rows are tokens b*T + t; query head h reads kv head
 *    g = h / (Hq/Hkv); per token the columns are [q heads | k heads | v heads];
 *  - a CTA has 4 warps and owns 64*MT rows (queries in the forward and dQ
 *    kernels, keys in the dK/dV kernel); each warp owns 16*MT of them, so
 *    nothing is reduced across warps and every sum has a fixed order
 *    (runs are bit-identical);
 *  - shared-memory tiles are rows of head_dim bf16 with the 16-byte chunks
 *    of row r XOR-swizzled by r & 7, so ldmatrix reads no bank twice;
 *  - softmax runs in base 2: with c = scale*log2(e), exp(scale*s - lse) =
 *    exp2(c*s - lse*log2(e)); the saved lse is in natural log;
 *  - rows past the sequence end are loaded as zeros and never stored, and
 *    the causal mask (key > query) hides the zero keys from real queries.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/attention.cuh"
#include "cuda/backend.h"
#include "cuda/debug.h"

extern "C" {
#include "core/internal.h"
}

namespace coda_attn {

typedef __nv_bfloat16 bf16;

constexpr int kTile = 64; /* rows of each streamed K/V (dQ) or Q/dO (dK/dV) tile */
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  const bf16 *qkv;
  long long ld_qkv;
  bf16 *out; /* forward: written; backward: read (O) */
  long long ld_out;
  float *lse;
  long long ld_lse;
  const bf16 *dout;
  long long ld_dout;
  bf16 *dqkv;
  long long ld_dqkv;
  float *ws_d; /* backward: D = rowsum(dO*O), [b][h][t] */
  float *ws_l; /* backward: lse*log2(e), [b][h][t] */
  int B, T, Hq, Hkv;
  float scale;  /* 1/sqrt(head_dim) */
  float scale2; /* scale*log2(e) */
};

/* ---------------------------------------------------------- primitives */

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte async copy; when !valid the destination is zero-filled. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* c += a * b on a 16x8x16 tile (bf16 in, fp32 accumulate). */
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats as bf16x2 (the first in the low half, i.e. the lower column). */
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile. */
template <int HD>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * HD + ((chunk ^ (row & 7)) << 3);
}

/* Loads rows [row0, row0 + R) of a (T x HD) head slice g (row pitch ld)
 * into a swizzled tile; rows >= T become zeros. */
template <int R, int HD>
__device__ __forceinline__ void load_tile(bf16 *tile, const bf16 *g, long long ld, int row0,
                                          int T) {
  constexpr int kChunks = HD / 8;
#pragma unroll
  for (int i = threadIdx.x; i < R * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < T;
    const bf16 *src = valid ? g + (long long)(row0 + r) * ld + c * 8 : g;
    cp_async16(smem_addr(tile + swz<HD>(r, c)), src, valid);
  }
}

/* Fragment addresses (lane-dependent) of a 16x16 block of a swizzled tile
 * starting at (row0, column 16*kk):
 *  a_addr: the A operand (rows = M, columns = K) for ldsm4;
 *  b_addr: B operands of two n8 blocks when the tile rows are N and its
 *          columns K (ldsm4 -> {b0,b1} of rows row0..+7, {b0,b1} of +8..15);
 *  bt_addr: B operands of two n8 blocks when the tile rows are K and its
 *          columns N (ldsm4t -> {b0,b1} of columns 16kk..+7, then +8..15). */
template <int HD>
__device__ __forceinline__ uint32_t a_addr(const bf16 *tile, int row0, int kk, int lane) {
  const int r = row0 + (lane & 15);
  return smem_addr(tile + swz<HD>(r, 2 * kk + (lane >> 4)));
}
template <int HD>
__device__ __forceinline__ uint32_t b_addr(const bf16 *tile, int row0, int kk, int lane) {
  const int r = row0 + (lane & 7) + ((lane >> 4) << 3);
  return smem_addr(tile + swz<HD>(r, 2 * kk + ((lane >> 3) & 1)));
}
template <int HD>
__device__ __forceinline__ uint32_t bt_addr(const bf16 *tile, int row0, int kk, int lane) {
  const int r = row0 + (lane & 7) + (((lane >> 3) & 1) << 3);
  return smem_addr(tile + swz<HD>(r, 2 * kk + (lane >> 4)));
}

/* ------------------------------------------------------------- forward */

/* One CTA: 64*MT queries of one (batch, head), each warp 16*MT of them
 * (MT m16 tiles share every K/V fragment read from shared memory); K/V
 * tiles of KT keys stream through a two-stage cp.async pipeline, only up
 * to the diagonal. Online softmax per row: m = running max of raw scores,
 * l = running sum of exp2(c*(s - m)), O rescaled by exp2(c*(m_old - m))
 * when m grows. */
template <int HD, int MT, int KT>
__global__ void __launch_bounds__(kThreads) fwd_kernel(Params p) {
  constexpr int BM = 64 * MT;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sK = sQ + BM * HD; /* 2 stages */
  bf16 *sV = sK + 2 * KT * HD;

  const int nqb = (p.T + BM - 1) / BM;
  const int qb = nqb - 1 - (int)blockIdx.x; /* longest rows first */
  const int h = blockIdx.y, b = blockIdx.z;
  const int g = h / (p.Hq / p.Hkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long base = (long long)b * p.T * p.ld_qkv;
  const bf16 *gq = p.qkv + base + (long long)h * HD;
  const bf16 *gk = p.qkv + base + (long long)(p.Hq + g) * HD;
  const bf16 *gv = p.qkv + base + (long long)(p.Hq + p.Hkv + g) * HD;
  const int q0 = qb * BM;
  const int nkb = min((q0 + BM - 1) / KT + 1, (p.T + KT - 1) / KT);
  const int w0 = q0 + warp * 16 * MT, w1 = w0 + 16 * MT - 1; /* this warp's rows */

  load_tile<BM, HD>(sQ, gq, p.ld_qkv, q0, p.T);
  load_tile<KT, HD>(sK, gk, p.ld_qkv, 0, p.T);
  load_tile<KT, HD>(sV, gv, p.ld_qkv, 0, p.T);
  cp_commit();

  /* Q fragments stay in registers unless that would crowd out the O
   * accumulators (head_dim 128 with two m tiles): then re-read per tile. */
  constexpr bool kQRegs = HD * MT <= 128;
  uint32_t qf[MT][kQRegs ? HD / 16 : 1][4];
  float o[MT][HD / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  for (int j = 0; j < nkb; ++j) {
    if (j + 1 < nkb) {
      const int st = (j + 1) & 1;
      load_tile<KT, HD>(sK + st * KT * HD, gk, p.ld_qkv, (j + 1) * KT, p.T);
      load_tile<KT, HD>(sV + st * KT * HD, gv, p.ld_qkv, (j + 1) * KT, p.T);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (kQRegs && j == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < (kQRegs ? HD / 16 : 1); ++kk)
          ldsm4(qf[mt][kk], a_addr<HD>(sQ, warp * 16 * MT + mt * 16, kk, lane));
    }
    /* tiles wholly after this warp's rows add nothing (key 0 is in tile 0,
     * so every row has a finite max once tile 0 is done) */
    if (j * KT <= w1) {
      const bf16 *tk = sK + (j & 1) * KT * HD, *tv = sV + (j & 1) * KT * HD;
      float s[MT][KT / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < KT / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        if (!kQRegs) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            ldsm4(qf[mt][0], a_addr<HD>(sQ, warp * 16 * MT + mt * 16, kk, lane));
        }
        const int fi = kQRegs ? kk : 0;
#pragma unroll
        for (int nb = 0; nb < KT / 16; ++nb) {
          uint32_t bb[4];
          ldsm4(bb, b_addr<HD>(tk, nb * 16, kk, lane));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma(s[mt][2 * nb], qf[mt][fi], bb[0], bb[1]);
            mma(s[mt][2 * nb + 1], qf[mt][fi], bb[2], bb[3]);
          }
        }
      }
      if (j * KT + KT - 1 > w0) { /* some key > some row: mask key > query */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = j * KT + nb * 8 + (lane & 3) * 2 + (e & 1);
              const int row = w0 + mt * 16 + (lane >> 2) + (e >> 1) * 8;
              if (key > row) s[mt][nb][e] = -INFINITY;
            }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = m[mt][r];
#pragma unroll
          for (int nb = 0; nb < KT / 8; ++nb)
            mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float alpha = m[mt][r] == -INFINITY ? 0.f : ex2((m[mt][r] - mx) * p.scale2);
          m[mt][r] = mx;
          const float mc = mx * p.scale2;
          l[mt][r] *= alpha;
#pragma unroll
          for (int i = 0; i < HD / 8; ++i) {
            o[mt][i][2 * r] *= alpha;
            o[mt][i][2 * r + 1] *= alpha;
          }
          float sum = 0.f;
#pragma unroll
          for (int nb = 0; nb < KT / 8; ++nb) {
            s[mt][nb][2 * r] = ex2(fmaf(s[mt][nb][2 * r], p.scale2, -mc));
            s[mt][nb][2 * r + 1] = ex2(fmaf(s[mt][nb][2 * r + 1], p.scale2, -mc));
            sum += s[mt][nb][2 * r] + s[mt][nb][2 * r + 1];
          }
          l[mt][r] += sum; /* this thread's columns; the quad is summed at the end */
        }
      /* O += P V with P (16 x KT per m tile) re-used from the accumulators as A. */
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pa[mt][0] = pack2(s[mt][2 * ks][0], s[mt][2 * ks][1]);
          pa[mt][1] = pack2(s[mt][2 * ks][2], s[mt][2 * ks][3]);
          pa[mt][2] = pack2(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
          pa[mt][3] = pack2(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
        }
#pragma unroll
        for (int db = 0; db < HD / 16; ++db) {
          uint32_t bb[4];
          ldsm4t(bb, bt_addr<HD>(tv, ks * 16, db, lane));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma(o[mt][2 * db], pa[mt], bb[0], bb[1]);
            mma(o[mt][2 * db + 1], pa[mt], bb[2], bb[3]);
          }
        }
      }
    }
    __syncthreads(); /* this stage is refilled next iteration */
  }

  const long long orow = (long long)b * p.T;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      const int row = w0 + mt * 16 + (lane >> 2) + 8 * r;
      if (row >= p.T) continue;
      const float inv = 1.f / lr;
      bf16 *dst = p.out + (orow + row) * p.ld_out + (long long)h * HD + (lane & 3) * 2;
#pragma unroll
      for (int i = 0; i < HD / 8; ++i)
        *reinterpret_cast<uint32_t *>(dst + i * 8) =
            pack2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
      if ((lane & 3) == 0) p.lse[(orow + row) * p.ld_lse + h] = m[mt][r] * p.scale + logf(lr);
    }
}

/* ------------------------------------------------------------ backward */

/* D[b][h][t] = sum_d dO*O and L[b][h][t] = lse*log2(e): one warp per
 * (token, head), a fixed shuffle order. */
template <int HD>
__global__ void __launch_bounds__(256) bwd_prep_kernel(Params p) {
  const long long w = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const long long rows = (long long)p.B * p.T;
  if (w >= rows * p.Hq) return;
  const long long bt = w / p.Hq;
  const int h = (int)(w % p.Hq);
  const bf16 *o = p.out + bt * p.ld_out + (long long)h * HD;
  const bf16 *d = p.dout + bt * p.ld_dout + (long long)h * HD;
  float acc = 0.f;
#pragma unroll
  for (int i = lane * 2; i < HD; i += 64) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(o + i));
    const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(d + i));
    acc = fmaf(a.x, c.x, acc);
    acc = fmaf(a.y, c.y, acc);
  }
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) {
    const int b = (int)(bt / p.T), t = (int)(bt % p.T);
    const long long idx = ((long long)b * p.Hq + h) * p.T + t;
    p.ws_d[idx] = acc;
    p.ws_l[idx] = p.lse[bt * p.ld_lse + h] * kLog2e;
  }
}

/* dQ for 64*MT queries of one (batch, head), streaming K/V tiles of 64
 * keys up to the diagonal, 16 keys at a time per warp:
 *   P = exp2(c*QK^T - L), dP = dO V^T, dS = P*(dP - D), dQ += dS K;
 * finally dQ *= scale. */
template <int HD, int MT>
__global__ void __launch_bounds__(kThreads) bwd_dq_kernel(Params p) {
  constexpr int BM = 64 * MT;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sO = sQ + BM * HD; /* dO */
  bf16 *sK = sO + BM * HD; /* 2 stages */
  bf16 *sV = sK + 2 * kTile * HD;

  const int nqb = (p.T + BM - 1) / BM;
  const int qb = nqb - 1 - (int)blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int g = h / (p.Hq / p.Hkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long base = (long long)b * p.T * p.ld_qkv;
  const bf16 *gq = p.qkv + base + (long long)h * HD;
  const bf16 *gk = p.qkv + base + (long long)(p.Hq + g) * HD;
  const bf16 *gv = p.qkv + base + (long long)(p.Hq + p.Hkv + g) * HD;
  const bf16 *gdo = p.dout + (long long)b * p.T * p.ld_dout + (long long)h * HD;
  const int q0 = qb * BM;
  const int nkb = min((q0 + BM - 1) / kTile + 1, (p.T + kTile - 1) / kTile);
  const int w0 = q0 + warp * 16 * MT, w1 = w0 + 16 * MT - 1;

  load_tile<BM, HD>(sQ, gq, p.ld_qkv, q0, p.T);
  load_tile<BM, HD>(sO, gdo, p.ld_dout, q0, p.T);
  load_tile<kTile, HD>(sK, gk, p.ld_qkv, 0, p.T);
  load_tile<kTile, HD>(sV, gv, p.ld_qkv, 0, p.T);
  cp_commit();

  float Lr[MT][2], Dr[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = w0 + mt * 16 + (lane >> 2) + 8 * r;
      const long long idx = ((long long)b * p.Hq + h) * p.T + row;
      Lr[mt][r] = row < p.T ? p.ws_l[idx] : 0.f;
      Dr[mt][r] = row < p.T ? p.ws_d[idx] : 0.f;
    }
  uint32_t qf[MT][HD / 16][4], of[MT][HD / 16][4];
  float dq[MT][HD / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) dq[mt][i][0] = dq[mt][i][1] = dq[mt][i][2] = dq[mt][i][3] = 0.f;

  for (int j = 0; j < nkb; ++j) {
    if (j + 1 < nkb) {
      const int st = (j + 1) & 1;
      load_tile<kTile, HD>(sK + st * kTile * HD, gk, p.ld_qkv, (j + 1) * kTile, p.T);
      load_tile<kTile, HD>(sV + st * kTile * HD, gv, p.ld_qkv, (j + 1) * kTile, p.T);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
          ldsm4(qf[mt][kk], a_addr<HD>(sQ, warp * 16 * MT + mt * 16, kk, lane));
          ldsm4(of[mt][kk], a_addr<HD>(sO, warp * 16 * MT + mt * 16, kk, lane));
        }
    }
    const bf16 *tk = sK + (j & 1) * kTile * HD, *tv = sV + (j & 1) * kTile * HD;
#pragma unroll
    for (int kc = 0; kc < kTile / 16; ++kc) {
      const int key0 = j * kTile + kc * 16;
      if (key0 > w1) continue; /* all 16 keys after this warp's rows */
      float s[MT][2][4], dp[MT][2][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][0][e] = s[mt][1][e] = dp[mt][0][e] = dp[mt][1][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t bb[4];
        ldsm4(bb, b_addr<HD>(tk, kc * 16, kk, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma(s[mt][0], qf[mt][kk], bb[0], bb[1]);
          mma(s[mt][1], qf[mt][kk], bb[2], bb[3]);
        }
        ldsm4(bb, b_addr<HD>(tv, kc * 16, kk, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma(dp[mt][0], of[mt][kk], bb[0], bb[1]);
          mma(dp[mt][1], of[mt][kk], bb[2], bb[3]);
        }
      }
      uint32_t da[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float ds[2][4];
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            const int row = w0 + mt * 16 + (lane >> 2) + (e >> 1) * 8;
            float pr = ex2(fmaf(s[mt][nb][e], p.scale2, -Lr[mt][e >> 1]));
            if (key > row) pr = 0.f;
            ds[nb][e] = pr * (dp[mt][nb][e] - Dr[mt][e >> 1]);
          }
        da[mt][0] = pack2(ds[0][0], ds[0][1]);
        da[mt][1] = pack2(ds[0][2], ds[0][3]);
        da[mt][2] = pack2(ds[1][0], ds[1][1]);
        da[mt][3] = pack2(ds[1][2], ds[1][3]);
      }
#pragma unroll
      for (int db = 0; db < HD / 16; ++db) {
        uint32_t bb[4];
        ldsm4t(bb, bt_addr<HD>(tk, kc * 16, db, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma(dq[mt][2 * db], da[mt], bb[0], bb[1]);
          mma(dq[mt][2 * db + 1], da[mt], bb[2], bb[3]);
        }
      }
    }
    __syncthreads();
  }

  const long long orow = (long long)b * p.T;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = w0 + mt * 16 + (lane >> 2) + 8 * r;
      if (row >= p.T) continue;
      bf16 *dst = p.dqkv + (orow + row) * p.ld_dqkv + (long long)h * HD + (lane & 3) * 2;
#pragma unroll
      for (int i = 0; i < HD / 8; ++i)
        *reinterpret_cast<uint32_t *>(dst + i * 8) =
            pack2(dq[mt][i][2 * r] * p.scale, dq[mt][i][2 * r + 1] * p.scale);
    }
}

/* dK, dV for 64*MT keys of one (batch, kv head): streams the Q/dO tiles
 * of every query head of the group from the diagonal on, so the GQA sum
 * over the group happens in registers in a fixed order. Per warp (16*MT
 * keys) and 16 queries at a time, in transposed form (rows = keys):
 *   P^T = exp2(c*K Q^T - L), dP^T = V dO^T, dS^T = P^T*(dP^T - D),
 *   dV += P^T dO, dK += dS^T Q;  finally dK *= scale. */
template <int HD, int MT>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_kernel(Params p) {
  constexpr int BN = 64 * MT;
  /* K/V fragments stay in registers when they fit beside the 2 x MT x
   * 16 x HD accumulators; otherwise they are re-read from shared memory. */
  constexpr bool kKVRegs = HD * MT <= 64;
  constexpr int kKVFrags = kKVRegs ? HD / 16 : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sK = reinterpret_cast<bf16 *>(smem);
  bf16 *sV = sK + BN * HD;
  bf16 *sQ = sV + BN * HD;         /* 2 stages */
  bf16 *sO = sQ + 2 * kTile * HD;  /* dO, 2 stages */
  float *sL = reinterpret_cast<float *>(sO + 2 * kTile * HD); /* 2 stages */
  float *sD = sL + 2 * kTile;

  const int kb = blockIdx.x; /* low key blocks have the most work: first */
  const int g = blockIdx.y, b = blockIdx.z;
  const int group = p.Hq / p.Hkv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long base = (long long)b * p.T * p.ld_qkv;
  const bf16 *gk = p.qkv + base + (long long)(p.Hq + g) * HD;
  const bf16 *gv = p.qkv + base + (long long)(p.Hq + p.Hkv + g) * HD;
  const int k0 = kb * BN;
  const int kw0 = k0 + warp * 16 * MT; /* this warp's first key */
  const int nqb = (p.T + kTile - 1) / kTile;
  const int qb0 = k0 / kTile; /* first query tile that sees these keys */
  const int per_head = nqb - qb0;
  const int ntiles = group * per_head;

  /* Issues the loads of flattened tile i (query head, query tile). */
  auto issue = [&](int i, int st) {
    const int hq = g * group + i / per_head;
    const int qt = (qb0 + i % per_head) * kTile;
    load_tile<kTile, HD>(sQ + st * kTile * HD, p.qkv + base + (long long)hq * HD, p.ld_qkv, qt,
                         p.T);
    load_tile<kTile, HD>(sO + st * kTile * HD,
                         p.dout + (long long)b * p.T * p.ld_dout + (long long)hq * HD, p.ld_dout,
                         qt, p.T);
    for (int t = threadIdx.x; t < kTile; t += kThreads) {
      const long long idx = ((long long)b * p.Hq + hq) * p.T + qt + t;
      const bool ok = qt + t < p.T;
      sL[st * kTile + t] = ok ? p.ws_l[idx] : 0.f;
      sD[st * kTile + t] = ok ? p.ws_d[idx] : 0.f;
    }
  };

  load_tile<BN, HD>(sK, gk, p.ld_qkv, k0, p.T);
  load_tile<BN, HD>(sV, gv, p.ld_qkv, k0, p.T);
  issue(0, 0);
  cp_commit();

  uint32_t kf[MT][kKVFrags][4], vf[MT][kKVFrags][4];
  float dk[MT][HD / 8][4], dv[MT][HD / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < HD / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mt][i][e] = dv[mt][i][e] = 0.f;

  for (int i = 0; i < ntiles; ++i) {
    if (i + 1 < ntiles) issue(i + 1, (i + 1) & 1);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (kKVRegs && i == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < kKVFrags; ++kk) {
          ldsm4(kf[mt][kk], a_addr<HD>(sK, warp * 16 * MT + mt * 16, kk, lane));
          ldsm4(vf[mt][kk], a_addr<HD>(sV, warp * 16 * MT + mt * 16, kk, lane));
        }
    }
    const int st = i & 1;
    const bf16 *tq = sQ + st * kTile * HD, *to = sO + st * kTile * HD;
    const float *tl = sL + st * kTile, *td = sD + st * kTile;
    const int qt = (qb0 + i % per_head) * kTile;
#pragma unroll
    for (int qc = 0; qc < kTile / 16; ++qc) {
      const int qbase = qt + qc * 16;
      if (qbase + 15 < kw0) continue; /* every query before this warp's keys */
      float s[MT][2][4], dp[MT][2][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][0][e] = s[mt][1][e] = dp[mt][0][e] = dp[mt][1][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t bq[4], bo[4];
        ldsm4(bq, b_addr<HD>(tq, qc * 16, kk, lane));
        ldsm4(bo, b_addr<HD>(to, qc * 16, kk, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (!kKVRegs) {
            ldsm4(kf[mt][0], a_addr<HD>(sK, warp * 16 * MT + mt * 16, kk, lane));
            ldsm4(vf[mt][0], a_addr<HD>(sV, warp * 16 * MT + mt * 16, kk, lane));
          }
          const int fi = kKVRegs ? kk : 0;
          mma(s[mt][0], kf[mt][fi], bq[0], bq[1]);
          mma(s[mt][1], kf[mt][fi], bq[2], bq[3]);
          mma(dp[mt][0], vf[mt][fi], bo[0], bo[1]);
          mma(dp[mt][1], vf[mt][fi], bo[2], bo[3]);
        }
      }
      uint32_t pa[MT][4], da[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float pt[2][4], ds[2][4];
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qi = qc * 16 + nb * 8 + (lane & 3) * 2 + (e & 1);
            const int q = qt + qi;
            const int key = kw0 + mt * 16 + (lane >> 2) + (e >> 1) * 8;
            float pr = ex2(fmaf(s[mt][nb][e], p.scale2, -tl[qi]));
            if (q < key || q >= p.T) pr = 0.f;
            pt[nb][e] = pr;
            ds[nb][e] = pr * (dp[mt][nb][e] - td[qi]);
          }
        pa[mt][0] = pack2(pt[0][0], pt[0][1]);
        pa[mt][1] = pack2(pt[0][2], pt[0][3]);
        pa[mt][2] = pack2(pt[1][0], pt[1][1]);
        pa[mt][3] = pack2(pt[1][2], pt[1][3]);
        da[mt][0] = pack2(ds[0][0], ds[0][1]);
        da[mt][1] = pack2(ds[0][2], ds[0][3]);
        da[mt][2] = pack2(ds[1][0], ds[1][1]);
        da[mt][3] = pack2(ds[1][2], ds[1][3]);
      }
#pragma unroll
      for (int db = 0; db < HD / 16; ++db) {
        uint32_t bb[4];
        ldsm4t(bb, bt_addr<HD>(to, qc * 16, db, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma(dv[mt][2 * db], pa[mt], bb[0], bb[1]);
          mma(dv[mt][2 * db + 1], pa[mt], bb[2], bb[3]);
        }
        ldsm4t(bb, bt_addr<HD>(tq, qc * 16, db, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma(dk[mt][2 * db], da[mt], bb[0], bb[1]);
          mma(dk[mt][2 * db + 1], da[mt], bb[2], bb[3]);
        }
      }
    }
    __syncthreads();
  }

  const long long orow = (long long)b * p.T;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = kw0 + mt * 16 + (lane >> 2) + 8 * r;
      if (key >= p.T) continue;
      bf16 *dK = p.dqkv + (orow + key) * p.ld_dqkv + (long long)(p.Hq + g) * HD + (lane & 3) * 2;
      bf16 *dV = p.dqkv + (orow + key) * p.ld_dqkv + (long long)(p.Hq + p.Hkv + g) * HD +
                 (lane & 3) * 2;
#pragma unroll
      for (int i = 0; i < HD / 8; ++i) {
        *reinterpret_cast<uint32_t *>(dK + i * 8) =
            pack2(dk[mt][i][2 * r] * p.scale, dk[mt][i][2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t *>(dV + i * 8) = pack2(dv[mt][i][2 * r], dv[mt][i][2 * r + 1]);
      }
    }
}

/* The launchers report a failed attribute call as a cudaError_t (*e) and
 * a failed launch through coda_cuda_check_launch, naming the pass. */
template <int HD, int MT, int KT>
coda_status launch_forward(coda_context ctx, const Params &p, cudaStream_t stream, cudaError_t *e) {
  const size_t sm = (size_t)(64 * MT + 4 * KT) * HD * sizeof(bf16);
  *e = cudaFuncSetAttribute(fwd_kernel<HD, MT, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  dim3 grid((p.T + 64 * MT - 1) / (64 * MT), p.Hq, p.B);
  fwd_kernel<HD, MT, KT><<<grid, kThreads, sm, stream>>>(p);
  return coda_cuda_check_launch(ctx, "attention forward");
}

template <int HD, int MQ, int MK>
coda_status launch_backward(coda_context ctx, const Params &p, cudaStream_t stream, cudaError_t *e) {
  const long long warps = (long long)p.B * p.T * p.Hq;
  bwd_prep_kernel<HD><<<(unsigned)((warps + 7) / 8), 256, 0, stream>>>(p);
  coda_status s = coda_cuda_check_launch(ctx, "attention backward (prep pass)");
  if (s != CODA_OK) return s;
  const size_t smq = (size_t)(2 * 64 * MQ + 4 * kTile) * HD * sizeof(bf16);
  const size_t smk = (size_t)(2 * 64 * MK + 4 * kTile) * HD * sizeof(bf16) + 4 * kTile * sizeof(float);
  *e = cudaFuncSetAttribute(bwd_dq_kernel<HD, MQ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smq);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  *e = cudaFuncSetAttribute(bwd_dkdv_kernel<HD, MK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smk);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  bwd_dq_kernel<HD, MQ><<<dim3((p.T + 64 * MQ - 1) / (64 * MQ), p.Hq, p.B), kThreads, smq, stream>>>(p);
  if ((s = coda_cuda_check_launch(ctx, "attention backward (dq pass)")) != CODA_OK) return s;
  bwd_dkdv_kernel<HD, MK><<<dim3((p.T + 64 * MK - 1) / (64 * MK), p.Hkv, p.B), kThreads, smk, stream>>>(p);
  return coda_cuda_check_launch(ctx, "attention backward (dk/dv pass)");
}

} /* namespace coda_attn */

using namespace coda_attn;

static coda_status attn_cuda_fail(coda_context ctx, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA attention: %s failed: %s", what,
                   cudaGetErrorString(e));
}

/* Checks what the kernels rely on beyond the caller's shape checks. */
static coda_status check_bf16(coda_context ctx, const char *what, const coda_tensor *t,
                              int64_t rows, int64_t cols) {
  if (!t || !t->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: %s is NULL", what);
  if (t->dtype != CODA_BF16)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: %s is %s; the GPU kernels take bf16 only", what,
                     coda_dtype_name(t->dtype));
  if (t->rows != rows || t->cols != cols || t->ld < t->cols)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                     "CUDA attention: %s is %lld x %lld (ld %lld), expected %lld x %lld", what,
                     (long long)t->rows, (long long)t->cols, (long long)t->ld, (long long)rows,
                     (long long)cols);
  /* 16-byte cp.async of 8 bf16 per row chunk. */
  if (((uintptr_t)t->data & 15) != 0 || (t->ld & 7) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT,
                     "CUDA attention: %s needs a 16-byte aligned base and a leading dimension "
                     "that is a multiple of 8 (ld %lld)",
                     what, (long long)t->ld);
  return CODA_OK;
}

static coda_status check_lse(coda_context ctx, const coda_tensor *t, int64_t rows, int64_t cols) {
  if (!t || !t->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: lse is NULL");
  if (t->dtype != CODA_F32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "CUDA attention: lse is %s; it must be f32",
                     coda_dtype_name(t->dtype));
  if (t->rows != rows || t->cols != cols || t->ld < t->cols)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                     "CUDA attention: lse is %lld x %lld (ld %lld), expected %lld x %lld",
                     (long long)t->rows, (long long)t->cols, (long long)t->ld, (long long)rows,
                     (long long)cols);
  if (((uintptr_t)t->data & 3) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT, "CUDA attention: lse is not 4-byte aligned");
  return CODA_OK;
}

static coda_status setup(coda_context ctx, const coda_tensor *qkv, int B, int T, int Hq, int Hkv,
                         int hd, Params *p) {
  if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "CUDA attention: batch %d, seq %d, heads %d/%d are not valid", B, T, Hq, Hkv);
  if (hd != 64 && hd != 128)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: head_dim %d (the GPU kernels support 64 and 128)", hd);
  if (B > 65535 || Hq > 65535 || (long long)B * T >= (1LL << 31) ||
      (long long)B * T * Hq >= (1LL << 33))
    return coda_fail(ctx, CODA_ERR_OVERFLOW,
                     "CUDA attention: batch %d x seq %d x heads %d exceeds the launch grid", B, T,
                     Hq);
  const int64_t cols = (int64_t)(Hq + 2 * Hkv) * hd;
  coda_status s = check_bf16(ctx, "qkv", qkv, (int64_t)B * T, cols);
  if (s) return s;
  const cudaError_t e = cudaSetDevice(ctx ? ctx->opts.device : 0);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "cudaSetDevice");
  *p = Params{};
  p->qkv = static_cast<const bf16 *>(qkv->data);
  p->ld_qkv = qkv->ld;
  p->B = B;
  p->T = T;
  p->Hq = Hq;
  p->Hkv = Hkv;
  p->scale = 1.f / sqrtf((float)hd);
  p->scale2 = p->scale * kLog2e;
  return CODA_OK;
}

/* Default kernel variants (see attention.cuh), from the timings in
 * bench/results/attention-*.md. */
static int default_fwd_config(int hd) { (void)hd; return 1; }
static int default_bwd_config(int hd) { return hd == 64 ? 3 : 0; }

extern "C" int coda_cuda_attention_num_configs(int backward, int hd) {
  if (hd != 64 && hd != 128) return 0;
  return backward ? (hd == 64 ? 4 : 1) : 2;
}

extern "C" coda_status coda_cuda_attention_forward(coda_context ctx, const coda_tensor *qkv,
                                                   int B, int T, int Hq, int Hkv, int hd,
                                                   const coda_tensor *out,
                                                   const coda_tensor *lse) {
  return coda_cuda_attention_forward_config(ctx, qkv, B, T, Hq, Hkv, hd, out, lse, -1);
}

extern "C" coda_status coda_cuda_attention_backward(coda_context ctx, const coda_tensor *qkv,
                                                    const coda_tensor *out,
                                                    const coda_tensor *lse,
                                                    const coda_tensor *dout, int B, int T, int Hq,
                                                    int Hkv, int hd, const coda_tensor *dqkv) {
  return coda_cuda_attention_backward_config(ctx, qkv, out, lse, dout, B, T, Hq, Hkv, hd, dqkv,
                                             -1);
}

extern "C" coda_status coda_cuda_attention_forward_config(coda_context ctx,
                                                          const coda_tensor *qkv, int B, int T,
                                                          int Hq, int Hkv, int hd,
                                                          const coda_tensor *out,
                                                          const coda_tensor *lse, int config) {
  Params p;
  coda_status s = setup(ctx, qkv, B, T, Hq, Hkv, hd, &p);
  if (s) return s;
  const int64_t BT = (int64_t)B * T;
  if ((s = check_bf16(ctx, "out", out, BT, (int64_t)Hq * hd))) return s;
  if ((s = check_lse(ctx, lse, BT, Hq))) return s;
  p.out = static_cast<bf16 *>(out->data);
  p.ld_out = out->ld;
  p.lse = static_cast<float *>(lse->data);
  p.ld_lse = lse->ld;
  if (config < 0) config = default_fwd_config(hd);
  if (config >= coda_cuda_attention_num_configs(0, hd))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: no forward variant %d",
                     config);
  /* variant 1: two m16 tiles per warp (K/V fragments feed twice the MMAs) */
  cudaError_t e = cudaSuccess;
  if (hd == 64)
    s = config == 0 ? launch_forward<64, 1, 64>(ctx, p, 0, &e) : launch_forward<64, 2, 64>(ctx, p, 0, &e);
  else
    s = config == 0 ? launch_forward<128, 1, 64>(ctx, p, 0, &e)
                    : launch_forward<128, 2, 32>(ctx, p, 0, &e);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "forward kernel setup");
  return s;
}

extern "C" coda_status coda_cuda_attention_backward_config(
    coda_context ctx, const coda_tensor *qkv, const coda_tensor *out, const coda_tensor *lse,
    const coda_tensor *dout, int B, int T, int Hq, int Hkv, int hd, const coda_tensor *dqkv,
    int config) {
  Params p;
  coda_status s = setup(ctx, qkv, B, T, Hq, Hkv, hd, &p);
  if (s) return s;
  const int64_t BT = (int64_t)B * T;
  if ((s = check_bf16(ctx, "out", out, BT, (int64_t)Hq * hd))) return s;
  if ((s = check_lse(ctx, lse, BT, Hq))) return s;
  if ((s = check_bf16(ctx, "dout", dout, BT, (int64_t)Hq * hd))) return s;
  if ((s = check_bf16(ctx, "dqkv", dqkv, BT, (int64_t)(Hq + 2 * Hkv) * hd))) return s;
  p.out = static_cast<bf16 *>(out->data);
  p.ld_out = out->ld;
  p.lse = static_cast<float *>(lse->data);
  p.ld_lse = lse->ld;
  p.dout = static_cast<const bf16 *>(dout->data);
  p.ld_dout = dout->ld;
  p.dqkv = static_cast<bf16 *>(dqkv->data);
  p.ld_dqkv = dqkv->ld;
  if (config < 0) config = default_bwd_config(hd);
  if (config >= coda_cuda_attention_num_configs(1, hd))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: no backward variant %d",
                     config);
  /* Workspace for D and L (2 x B*Hq*T floats), stream-ordered. */
  void *ws = NULL;
  const size_t n = (size_t)BT * Hq;
  cudaError_t e = cudaMallocAsync(&ws, 2 * n * sizeof(float), 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY,
                     "CUDA attention: no device memory for a %zu-byte workspace",
                     2 * n * sizeof(float));
  }
  p.ws_d = static_cast<float *>(ws);
  p.ws_l = p.ws_d + n;
  /* head_dim 64 variants: bit 0 = two m16 tiles per warp in the dQ
   * kernel, bit 1 = the same in the dK/dV kernel */
  if (hd == 128) s = launch_backward<128, 1, 1>(ctx, p, 0, &e);
  else if (config == 0) s = launch_backward<64, 1, 1>(ctx, p, 0, &e);
  else if (config == 1) s = launch_backward<64, 2, 1>(ctx, p, 0, &e);
  else if (config == 2) s = launch_backward<64, 1, 2>(ctx, p, 0, &e);
  else s = launch_backward<64, 2, 2>(ctx, p, 0, &e);
  const cudaError_t ef = cudaFreeAsync(ws, 0);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "backward kernel setup");
  if (s != CODA_OK) return s;
  if (ef != cudaSuccess) return attn_cuda_fail(ctx, ef, "cudaFreeAsync");
  return CODA_OK;
}
