/* Causal grouped-query attention on Hopper (sm_90a), bf16 in and out, fp32
 * accumulation: a FlashAttention-2 style forward and a deterministic
 * backward, in three kernel families: mma.sync m16n8k16 with ldmatrix
 * (head_dim 32, 64, 128) and wgmma (head_dim 64, 128), both fed by cp.async
 * tiles, and warp-specialized persistent wgmma kernels fed by TMA (head_dim
 * 64, 128; the defaults there). docs/design.md, "Attention on the GPU",
 * has the design.
 *
 * Shared conventions of every kernel:
 *  - packed qkv rows are tokens b*T + t; query head h reads kv head
 *    g = h / (Hq/Hkv); per token the columns are [q heads | k heads | v heads];
 *  - mma.sync kernels: a CTA has 4 warps and owns 64*MT rows (queries in
 *    the forward and dQ kernels, keys in the dK/dV kernel), each warp 16*MT
 *    of them; wgmma kernels: a CTA has NWG warpgroups of 64 rows each. So
 *    nothing is reduced across warps and every sum has a fixed order (runs
 *    are bit-identical);
 *  - shared-memory tiles are XOR-swizzled in 16-byte chunks so ldmatrix and
 *    wgmma read no bank twice (swz, wswz);
 *  - softmax runs in base 2: with c = scale*log2(e), exp(scale*s - lse) =
 *    exp2(c*s - lse*log2(e)); the saved lse is in natural log;
 *  - rows past the sequence end are loaded as zeros and never stored, and
 *    the causal mask (key > query) hides the zero keys from real queries;
 *  - blocks run longest causal rows first over the whole grid (block_coords).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/attn_wgmma.cuh"
#include "backends/cuda/backend.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/gemm_sm90.cuh" /* mbarrier and named-barrier helpers */

extern "C" {
#include "base/internal.h"
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
  /* backward with the fused RoPE backward (coda_attention_backward_rope),
   * else rope_pos == NULL */
  const int *rope_pos;
  long long ld_pos;
  const float *rope_freq; /* per qkv column: (hi, lo) turns per position per pair */
  float *zp;              /* per token and head slot: sum qkv * gradient */
  long long ld_zp;
  int B, T, Hq, Hkv;
  float scale;  /* 1/sqrt(head_dim) */
  float scale2; /* scale*log2(e) */
  int flat;     /* 1: 1-D grid, longest causal blocks first (see block_coords) */
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

/* Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
 * The 8 rows one ldmatrix reads must land in 8 different 16-byte bank
 * groups: rows of 8+ chunks XOR the chunk with row & 7; head_dim 32 rows
 * (4 chunks, two rows per 128 bytes) XOR it with (row >> 1) & 3. */
template <int HD>
__device__ __forceinline__ int swz(int row, int chunk) {
  if constexpr (HD >= 64) return row * HD + ((chunk ^ (row & 7)) << 3);
  else return row * HD + ((chunk ^ ((row >> 1) & 3)) << 3);
}

/* Block coordinates. With p.flat the grid is 1-D and the block index i
 * (query or key block, in work order) varies slowest, so the longest
 * causal blocks of every (batch, head) start in the first wave and the
 * short ones fill the tail; otherwise the grid is (blocks, heads, batch). */
struct Blk {
  int i, h, b;
};
__device__ __forceinline__ Blk block_coords(const Params &p, int heads) {
  Blk k;
  if (p.flat) {
    const int hb = (int)(blockIdx.x % (unsigned)(heads * p.B));
    k.i = (int)(blockIdx.x / (unsigned)(heads * p.B));
    k.h = hb % heads;
    k.b = hb / heads;
  } else {
    k.i = blockIdx.x;
    k.h = blockIdx.y;
    k.b = blockIdx.z;
  }
  return k;
}
static dim3 grid_of(const Params &p, int nblk, int heads) {
  return p.flat ? dim3((unsigned)(nblk * heads * p.B)) : dim3(nblk, heads, p.B);
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

/* ------------------------------------------------------ gradient stores */

/* The RoPE backward's rotation by -theta of one pair, theta =
 * 2*pi*frac(p*(fhi + flo)): the angle as rope() in the epilogue prelude
 * (epi_codegen.c) and the CPU (cpu/rope.h) reduce it (p*fhi = hi + err
 * exactly, a two-product, so the fraction keeps float accuracy at large
 * p*f), the sine and cosine from the hardware (below). */
__device__ __forceinline__ void rope_bwd_pair(float x, float y, float p, float fhi, float flo,
                                              float &x2, float &y2) {
  const float hi = p * fhi;
  const float err = __fmaf_rn(p, fhi, -hi);
  const float lo = __fmaf_rn(p, flo, err);
  const float f = (hi - rintf(hi)) + lo;
  float sn, cs;
  /* |2 pi f| <= pi, where the hardware sine and cosine are within about
   * 2^-21 absolute: far below the bf16 rounding of the result (2^-9), and
   * it took the fused RoPE backward's cost at the 8B-like shape from 0.23
   * to 0.15 ms (sincospif: about 50 instructions per pair) */
  __sincosf(6.28318530717958648f * f, &sn, &cs);
  x2 = __fadd_rn(__fmul_rn(x, cs), __fmul_rn(y, sn));
  y2 = __fsub_rn(__fmul_rn(y, cs), __fmul_rn(x, sn));
}

/* Stores one thread's values of one row of a gradient head slice as bf16:
 * pairs (a[i], c[i]) at qkv columns col + 8i, col + 8i + 1 of token row m
 * (col = the head's first column + 2*(lane&3): the mma/wgmma accumulator
 * layout, four lanes per row). With the fused RoPE backward the pairs are
 * rotated by -theta first (a pair whose frequency is (0, 0), such as V's,
 * is copied) and the row's sum of qkv * gradient over the head (the
 * pre-rotation values; a fixed order: each lane's pairs in turn, then
 * (l0 + l1) + (l2 + l3) over the quad) goes to zp[m, slot]; yv(i) gives
 * the qkv pair i of the row (from shared memory where the kernel still
 * holds it). Every lane of the warp must call it (quad shuffles); `valid`
 * guards memory. */
template <bool ROPE, int NP, class YV>
__device__ __forceinline__ void store_grad_row(const Params &p, long long m, bool valid, int col,
                                               int slot, const float (&a)[NP],
                                               const float (&c)[NP], YV yv) {
  bf16 *dst = p.dqkv + m * p.ld_dqkv + col;
  if constexpr (!ROPE) {
    if (valid)
#pragma unroll
      for (int i = 0; i < NP; ++i) *reinterpret_cast<uint32_t *>(dst + 8 * i) = pack2(a[i], c[i]);
    return;
  }
  float z = 0.f;
  if (valid) {
    const float pos = (float)p.rope_pos[m * p.ld_pos];
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      const float2 y = yv(i);
      z = __fadd_rn(z, __fadd_rn(__fmul_rn(y.x, a[i]), __fmul_rn(y.y, c[i])));
      const float2 f = *reinterpret_cast<const float2 *>(p.rope_freq + col + 8 * i);
      float x2 = a[i], y2 = c[i];
      if (f.x != 0.f || f.y != 0.f) rope_bwd_pair(a[i], c[i], pos, f.x, f.y, x2, y2);
      *reinterpret_cast<uint32_t *>(dst + 8 * i) = pack2(x2, y2);
    }
  }
  z += __shfl_xor_sync(0xffffffffu, z, 1);
  z += __shfl_xor_sync(0xffffffffu, z, 2);
  if (valid && (threadIdx.x & 3) == 0) p.zp[m * p.ld_zp + slot] = z;
}
/* qkv pair i of a row: from global memory (row m, columns col + 8i), or
 * from a wgmma tile the kernel holds in shared memory (local row r, 16-byte
 * chunk i of its 64-column panels, pair 2*(lane&3) in the chunk). */
__device__ __forceinline__ float2 bf2(const bf16 *x) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(x));
}
struct YGlobal {
  const bf16 *row;
  __device__ float2 operator()(int i) const { return bf2(row + 8 * i); }
};
template <int R, int HD>
__device__ __forceinline__ int wswz(int row, int chunk);
template <int R, int HD>
struct YTile {
  const bf16 *tile;
  int r, q;
  __device__ float2 operator()(int i) const { return bf2(tile + wswz<R, HD>(r, i) + 2 * q); }
};

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
  const Blk blk = block_coords(p, p.Hq);
  const int qb = nqb - 1 - blk.i; /* longest rows first */
  const int h = blk.h, b = blk.b;
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

/* ------------------------------------------------- forward, wgmma (sm_90a) */

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator reads/writes across wgmma. */
template <int R>
__device__ __forceinline__ void wg_regs(float (&v)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(v[i])::"memory");
}
/* cp.async writes (generic proxy) become visible to wgmma (async proxy). */
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Shared-memory matrix descriptor, 128-byte swizzle (as in gemm_sm90.cuh). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

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
  return wg_desc(smem_addr(tile) + (kk >> 2) * R * 128 + (kk & 3) * 32, 16, 1024);
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

/* Causal mask of an N-column score block whose first key is key0. */
template <int N>
__device__ __forceinline__ void mask_causal(float (&s)[N / 2], int key0, int r0, int lane) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int key = key0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
    if (key > r0 + 8 * ((i >> 1) & 1)) s[i] = -INFINITY;
  }
}
/* Online softmax of scores s against the running max m and sum l (first:
 * no history). Leaves exp2(c*s - c*m) in s, rescales l and returns the
 * factor for O in alpha (l holds this thread's columns; the quad is summed
 * at the end). */
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
    alpha[r] = first ? 0.f : ex2((m[r] - mx) * scale2);
    m[r] = mx;
    const float mc = mx * scale2;
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
 * P = exp2(c*S - L) (0 where key > query), packed as A fragments. */
template <int N>
__device__ __forceinline__ void dq_ds(const float (&s)[N / 2], const float (&dp)[N / 2],
                                      const float (&Lr)[2], const float (&Dr)[2], int key0, int r0,
                                      int lane, float scale2, uint32_t (&da)[N / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < N / 16; ++ks) {
    float ds[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int i = 8 * ks + e, r = (i >> 1) & 1;
      const int key = key0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      float pr = ex2(fmaf(s[i], scale2, -Lr[r]));
      if (key > r0 + 8 * r) pr = 0.f;
      ds[e] = pr * (dp[i] - Dr[r]);
    }
    da[ks][0] = pack2(ds[0], ds[1]);
    da[ks][1] = pack2(ds[2], ds[3]);
    da[ks][2] = pack2(ds[4], ds[5]);
    da[ks][3] = pack2(ds[6], ds[7]);
  }
}
/* dK/dV pass, Q/dO tile of N queries from qt (L, D in tl, td): P^T =
 * exp2(c*S^T - L) (0 where query < key or past the sequence) and dS^T =
 * P^T*(dP^T - D), packed as A fragments. Rows are keys key0, key0 + 8. */
template <int N>
__device__ __forceinline__ void dkdv_pds(const float (&s)[N / 2], const float (&dp)[N / 2],
                                         const float *tl, const float *td, int qt, int key0,
                                         int T, int lane, float scale2, uint32_t (&pa)[N / 16][4],
                                         uint32_t (&da)[N / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < N / 16; ++ks) {
    float pt[8], ds[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = 8 * ks + e, r = (c >> 1) & 1;
      const int qi = 8 * (c >> 2) + 2 * (lane & 3) + (c & 1);
      const int q = qt + qi;
      float pr = ex2(fmaf(s[c], scale2, -tl[qi]));
      if (q < key0 + 8 * r || q >= T) pr = 0.f;
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

/* One CTA = NWG warpgroups, 64 queries each, of one (batch, head); warp w
 * of a warpgroup owns its rows 16w..16w+15 (the wgmma m64 accumulator
 * layout: value i of a thread sits at row 16w + lane/4 + 8((i>>1)&1),
 * column 8(i>>2) + 2(lane&3) + (i&1), the mma.sync m16n8 layout per n8
 * block). The warpgroups share every K/V tile (less L2 traffic per row). K/V tiles of KT keys
 * stream through a two-stage cp.async pipeline up to the diagonal;
 * S = Q K^T with both operands in shared memory, the same online softmax
 * as fwd_kernel, and O += P V with P from registers (bf16, the m16n8k16 A
 * layout per warp) and V as an MN-major operand. Small CTAs (2-3 per SM)
 * let one CTA's softmax run under another's MMAs. */
template <int HD, int KT, int NWG>
__global__ void __launch_bounds__(128 * NWG) fwd_wg_kernel(Params p) {
  constexpr int BM = 64 * NWG, NT = 128 * NWG;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sK = sQ + BM * HD; /* 2 stages */
  bf16 *sV = sK + 2 * KT * HD;

  const int nqb = (p.T + BM - 1) / BM;
  const Blk blk = block_coords(p, p.Hq);
  const int qb = nqb - 1 - blk.i; /* longest rows first */
  const int h = blk.h, b = blk.b;
  const int g = h / (p.Hq / p.Hkv);
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const long long base = (long long)b * p.T * p.ld_qkv;
  const bf16 *gq = p.qkv + base + (long long)h * HD;
  const bf16 *gk = p.qkv + base + (long long)(p.Hq + g) * HD;
  const bf16 *gv = p.qkv + base + (long long)(p.Hq + p.Hkv + g) * HD;
  const int q0 = qb * BM;
  const int nkb = min((q0 + BM - 1) / KT + 1, (p.T + KT - 1) / KT);
  const int qw = q0 + 64 * wg;                  /* this warpgroup's first row */
  const int r0 = qw + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
  const bf16 *sQw = sQ + 64 * wg * 64;         /* its 64-row slice of every panel */

  load_tile_wg<BM, HD, NT>(sQ, gq, p.ld_qkv, q0, p.T);
  load_tile_wg<KT, HD, NT>(sK, gk, p.ld_qkv, 0, p.T);
  load_tile_wg<KT, HD, NT>(sV, gv, p.ld_qkv, 0, p.T);
  cp_commit();

  float o[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int j = 0; j < nkb; ++j) {
    if (j + 1 < nkb) {
      const int st = (j + 1) & 1;
      load_tile_wg<KT, HD, NT>(sK + st * KT * HD, gk, p.ld_qkv, (j + 1) * KT, p.T);
      load_tile_wg<KT, HD, NT>(sV + st * KT * HD, gv, p.ld_qkv, (j + 1) * KT, p.T);
    }
    cp_commit();
    cp_wait<1>();
    fence_async_smem();
    __syncthreads();
    const bf16 *tk = sK + (j & 1) * KT * HD, *tv = sV + (j & 1) * KT * HD;
    /* tiles wholly after this warpgroup's rows add nothing (key 0 is in
     * tile 0, so every row has a finite max once tile 0 is done) */
    if (j * KT <= qw + 63) {
    float s[KT / 2];
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
      wg_ss<KT>(s, kmajor_desc<BM>(sQw, kk), kmajor_desc<KT>(tk, kk), kk > 0);
    wg_commit();
    wg_wait<0>();
    wg_regs(s);

    if (j * KT + KT - 1 > qw) mask_causal<KT>(s, j * KT, r0, lane); /* some key > some row */
    float alpha[2];
    online_softmax<KT>(s, m, l, alpha, j == 0, p.scale2);
    rescale_rows<HD>(o, alpha);
    uint32_t pa[KT / 16][4];
    pack_a<KT>(s, pa);
    wg_regs(o);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < KT / 16; ++ks)
      wg_rs_t<HD>(o, pa[ks], wg_desc(smem_addr(tv) + ks * 2048, KT * 128, 1024));
    wg_commit();
    wg_wait<0>();
    wg_regs(o);
    }
    __syncthreads(); /* this stage is refilled next iteration */
  }
  store_out_rows<HD>(p, o, m, l, r0, b, h, lane);
}

/* ------------------------- forward, warp-specialized (sm_90a, TMA + wgmma) */

/* 3-D TMA load (box {64 columns, rows, 1 batch}) completing on `bar`;
 * rows past the sequence end arrive as zeros and still count in bytes. */
__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int col, int row, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
      "l"((uint64_t)map), "r"(smem_addr(bar)), "r"(col), "r"(row), "r"(batch)
      : "memory");
}
/* Loads an R-row tile of one head (columns col0..col0+HD) into the wswz
 * layout: one box per 64-column panel. */
template <int R, int HD>
__device__ __forceinline__ void tma_tile(bf16 *tile, const CUtensorMap *map, uint64_t *bar,
                                         int col0, int row0, int b) {
  coda_sm90::mbar_expect_tx(bar, R * HD * (int)sizeof(bf16));
#pragma unroll
  for (int pn = 0; pn < HD / 64; ++pn) tma_load_3d(tile + pn * R * 64, map, bar, col0 + pn * 64, row0, b);
}
/* The k-th tile of this persistent CTA. Tiles are numbered most work
 * first; rounds of gridDim.x tiles alternate direction (CTA c takes tile c
 * of round 0, the (G-1-c)-th of round 1, ...), so every CTA's sum of work
 * comes out about even, where a plain stride gave the first CTAs the
 * heaviest tile of every round (25 % above the mean at the 8B-like dK/dV
 * pass). */
__device__ __forceinline__ int snake_tile(int k) {
  const int g = (int)gridDim.x, c = (int)blockIdx.x;
  return k * g + ((k & 1) ? g - 1 - c : c);
}
__device__ __forceinline__ void warp_arrive(uint64_t *bar) {
  if ((threadIdx.x & 31) == 0) coda_sm90::mbar_arrive(bar);
}

constexpr int kWsBM = 128; /* queries per tile: two consumer warpgroups of 64 */
constexpr int kWsKT = 128; /* keys per K/V tile */
/* Ordering barriers of the pingpong schedule: consumer c waits on
 * kWsTurnBar + c before issuing its MMAs (ids 1, 2; 0 is __syncthreads). */
constexpr int kWsTurnBar = 1;

template <int HD, int STAGES>
constexpr size_t fwd_ws_smem() {
  return (size_t)(kWsBM + 2 * STAGES * kWsKT) * HD * sizeof(bf16) +
         (2 + 4 * STAGES) * sizeof(uint64_t) + 1024;
}

/* Persistent, warp-specialized forward (the FlashAttention-3 structure):
 * warpgroup 0 is a producer whose one thread loads the Q tile (128 queries
 * of one (batch, head)) and streams that head's K and V tiles (128 keys)
 * by TMA into a ring of STAGES buffers, each guarded by a "full" mbarrier
 * (transaction bytes) and an "empty" one (one arrival per consumer warp).
 * Warpgroups 1 and 2 each own 64 of the queries and run the same online
 * softmax as fwd_wg_kernel, software-pipelined: S(j) = Q K(j)^T is issued
 * with O += P(j-1) V(j-1), and the softmax of S(j) runs while the second
 * product is still on the tensor cores. With PING the two consumers also
 * take turns issuing (named barriers), so one's softmax runs under the
 * other's products. Tiles are numbered longest causal rows first and dealt
 * to the persistent CTAs in snake order (snake_tile); the producer loads the next tile's Q as soon as
 * both consumers have issued their last S. Sums keep a fixed order (runs
 * are bit-identical). */
template <int HD, int STAGES, bool PING>
__global__ void __launch_bounds__(384, 1)
    fwd_ws_kernel(const __grid_constant__ CUtensorMap tm, Params p) {
  constexpr int BM = kWsBM, KT = kWsKT;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sK = sQ + BM * HD;
  bf16 *sV = sK + STAGES * KT * HD;
  uint64_t *bar = reinterpret_cast<uint64_t *>(sV + STAGES * KT * HD);
  uint64_t *q_full = bar, *q_empty = bar + 1;
  uint64_t *k_full = bar + 2, *k_empty = k_full + STAGES;
  uint64_t *v_full = k_empty + STAGES, *v_empty = v_full + STAGES;

  const int wg = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    coda_sm90::mbar_init(q_full, 1);
    coda_sm90::mbar_init(q_empty, 8);
    for (int s = 0; s < STAGES; ++s) {
      coda_sm90::mbar_init(&k_full[s], 1);
      coda_sm90::mbar_init(&k_empty[s], 8);
      coda_sm90::mbar_init(&v_full[s], 1);
      coda_sm90::mbar_init(&v_empty[s], 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int nqb = (p.T + BM - 1) / BM;
  const int hb_n = p.Hq * p.B;
  const int ntiles = nqb * hb_n;
  const int grp = p.Hq / p.Hkv;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&tm) : "memory");
      int n = 0, tc = 0;
      for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
        const int qb = nqb - 1 - t / hb_n, hb = t % hb_n;
        const int h = hb % p.Hq, b = hb / p.Hq, g = h / grp;
        coda_sm90::mbar_wait(q_empty, (tc & 1) ^ 1);
        tma_tile<BM, HD>(sQ, &tm, q_full, h * HD, qb * BM, b);
        for (int j = 0; j <= qb; ++j, ++n) {
          const int st = n % STAGES;
          const uint32_t ph = (uint32_t)(n / STAGES) & 1;
          coda_sm90::mbar_wait(&k_empty[st], ph ^ 1);
          tma_tile<KT, HD>(sK + st * KT * HD, &tm, &k_full[st], (p.Hq + g) * HD, j * KT, b);
          coda_sm90::mbar_wait(&v_empty[st], ph ^ 1);
          tma_tile<KT, HD>(sV + st * KT * HD, &tm, &v_full[st], (p.Hq + p.Hkv + g) * HD,
                           j * KT, b);
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");

  const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const bf16 *sQw = sQ + 64 * cw * 64; /* this warpgroup's 64-row slice of every panel */
  /* Pingpong turns: consumer 1 lets consumer 0 go first; every turn ends
   * by handing over, except consumer 1's very last (nothing waits for it). */
  if (PING && cw == 1) coda_sm90::named_arrive(kWsTurnBar + 0);
  auto turn_begin = [&]() {
    if (PING) coda_sm90::named_sync(kWsTurnBar + cw);
  };
  auto turn_end = [&](bool last) {
    if (PING && !(cw == 1 && last)) coda_sm90::named_arrive(kWsTurnBar + (cw ^ 1));
  };

  int n = 0, tc = 0;
  for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
    const int qb = nqb - 1 - t / hb_n, hb = t % hb_n;
    const int h = hb % p.Hq, b = hb / p.Hq;
    const bool last_tile = snake_tile(k + 1) >= ntiles;
    const int q0 = qb * BM, nkb = qb + 1; /* BM == KT: tile qb holds the diagonal */
    const int r0 = q0 + 64 * cw + warp * 16 + (lane >> 2); /* rows r0, r0 + 8 */

    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
    float m[2], l[2];
    float s[KT / 2];
    uint32_t pa[KT / 16][4];

    auto issue_s = [&](const bf16 *tk) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(s, kmajor_desc<BM>(sQw, kk), kmajor_desc<KT>(tk, kk), kk > 0);
      wg_commit();
    };
    auto issue_pv = [&](const bf16 *tv) {
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks)
        wg_rs_t<HD>(o, pa[ks], wg_desc(smem_addr(tv) + ks * 2048, KT * 128, 1024));
      wg_commit();
    };

    coda_sm90::mbar_wait(q_full, (uint32_t)tc & 1);
    int st = n % STAGES;
    uint32_t ph = (uint32_t)(n / STAGES) & 1;
    coda_sm90::mbar_wait(&k_full[st], ph);
    turn_begin();
    wg_fence();
    issue_s(sK + st * KT * HD);
    turn_end(false);
    wg_wait<0>();
    wg_regs(s);
    warp_arrive(&k_empty[st]);
    if (nkb == 1) warp_arrive(q_empty);
    if (nkb == 1) mask_causal<KT>(s, 0, r0, lane); /* tile qb holds the diagonal */
    float alpha[2];
    online_softmax<KT>(s, m, l, alpha, true, p.scale2);
    pack_a<KT>(s, pa);

    for (int j = 1; j < nkb; ++j) {
      const int pst = st;
      const uint32_t pph = ph;
      ++n;
      st = n % STAGES;
      ph = (uint32_t)(n / STAGES) & 1;
      coda_sm90::mbar_wait(&k_full[st], ph);
      coda_sm90::mbar_wait(&v_full[pst], pph);
      turn_begin();
      wg_regs(o);
      wg_fence();
      issue_s(sK + st * KT * HD);
      issue_pv(sV + pst * KT * HD);
      turn_end(false);
      wg_wait<1>();
      wg_regs(s);
      warp_arrive(&k_empty[st]);
      if (j == nkb - 1) warp_arrive(q_empty);
      if (j == nkb - 1) mask_causal<KT>(s, j * KT, r0, lane);
      online_softmax<KT>(s, m, l, alpha, false, p.scale2);
      wg_wait<0>();
      wg_regs(o);
      warp_arrive(&v_empty[pst]);
      rescale_rows<HD>(o, alpha); /* O = alpha (O + P V) */
      pack_a<KT>(s, pa);
    }
    coda_sm90::mbar_wait(&v_full[st], ph);
    turn_begin();
    wg_regs(o);
    wg_fence();
    issue_pv(sV + st * KT * HD);
    turn_end(last_tile);
    wg_wait<0>();
    wg_regs(o);
    warp_arrive(&v_empty[st]);
    ++n;

    store_out_rows<HD>(p, o, m, l, r0, b, h, lane);
  }
}

/* ------------------------------------------------------------ backward */

/* D[b][h][t] = sum_d dO*O and L[b][h][t] = lse*log2(e): one block per
 * token, HD/8 lanes per head, each with one 16-byte chunk of O and dO;
 * the lanes of a head sum in a fixed shuffle order. */
template <int HD>
__global__ void __launch_bounds__(256) bwd_prep_kernel(Params p) {
  constexpr int L = HD / 8; /* lanes per head: 4, 8 or 16, within one warp */
  const int bt = blockIdx.x; /* token b*T + t */
  const int b = bt / p.T, t = bt - b * p.T;
  const bf16 *o = p.out + (long long)bt * p.ld_out;
  const bf16 *d = p.dout + (long long)bt * p.ld_dout;
  for (int i0 = 0; i0 < p.Hq * L; i0 += 256) { /* uniform trip count: full-warp shuffles */
    const int i = i0 + threadIdx.x, h = i / L, c = i % L;
    const bool valid = i < p.Hq * L;
    float acc = 0.f;
    if (valid) {
      const uint4 a = *reinterpret_cast<const uint4 *>(o + h * HD + c * 8);
      const uint4 e = *reinterpret_cast<const uint4 *>(d + h * HD + c * 8);
      const uint32_t av[4] = {a.x, a.y, a.z, a.w}, ev[4] = {e.x, e.y, e.z, e.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&av[k]));
        const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&ev[k]));
        acc = fmaf(x.x, y.x, acc);
        acc = fmaf(x.y, y.y, acc);
      }
    }
#pragma unroll
    for (int sh = L / 2; sh > 0; sh >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, sh);
    if (valid && c == 0) {
      const long long idx = ((long long)b * p.Hq + h) * p.T + t;
      p.ws_d[idx] = acc;
      p.ws_l[idx] = p.lse[(long long)bt * p.ld_lse + h] * kLog2e;
    }
  }
}

/* L and D of queries [qt, qt + R) of head hq (0 past the sequence end) into
 * shared memory, for the dK/dV kernels. */
template <int R, int NT>
__device__ __forceinline__ void load_rowstats(float *sL, float *sD, const Params &p, int b, int hq,
                                              int qt) {
  for (int t = threadIdx.x; t < R; t += NT) {
    const long long idx = ((long long)b * p.Hq + hq) * p.T + qt + t;
    const bool ok = qt + t < p.T;
    sL[t] = ok ? p.ws_l[idx] : 0.f;
    sD[t] = ok ? p.ws_d[idx] : 0.f;
  }
}

/* dQ for 64*MT queries of one (batch, head), streaming K/V tiles of 64
 * keys up to the diagonal, 16 keys at a time per warp:
 *   P = exp2(c*QK^T - L), dP = dO V^T, dS = P*(dP - D), dQ += dS K;
 * finally dQ *= scale. */
template <int HD, int MT, bool ROPE>
__global__ void __launch_bounds__(kThreads) bwd_dq_kernel(Params p) {
  constexpr int BM = 64 * MT;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sO = sQ + BM * HD; /* dO */
  bf16 *sK = sO + BM * HD; /* 2 stages */
  bf16 *sV = sK + 2 * kTile * HD;

  const int nqb = (p.T + BM - 1) / BM;
  const Blk blk = block_coords(p, p.Hq);
  const int qb = nqb - 1 - blk.i; /* longest rows first */
  const int h = blk.h, b = blk.b;
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
      float a[HD / 8], c[HD / 8];
#pragma unroll
      for (int i = 0; i < HD / 8; ++i) {
        a[i] = dq[mt][i][2 * r] * p.scale;
        c[i] = dq[mt][i][2 * r + 1] * p.scale;
      }
      const long long m = orow + min(row, p.T - 1);
      store_grad_row<ROPE, HD / 8>(p, orow + row, row < p.T, h * HD + (lane & 3) * 2, h, a, c,
                                   YGlobal{p.qkv + m * p.ld_qkv + h * HD + (lane & 3) * 2});
    }
}

/* dK, dV for 64*MT keys of one (batch, kv head): streams the Q/dO tiles
 * of every query head of the group from the diagonal on, so the GQA sum
 * over the group happens in registers in a fixed order. Per warp (16*MT
 * keys) and 16 queries at a time, in transposed form (rows = keys):
 *   P^T = exp2(c*K Q^T - L), dP^T = V dO^T, dS^T = P^T*(dP^T - D),
 *   dV += P^T dO, dK += dS^T Q;  finally dK *= scale. */
template <int HD, int MT, bool KVREGS, bool ROPE>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_kernel(Params p) {
  constexpr int BN = 64 * MT;
  /* K/V fragments stay in registers (KVREGS) beside the 2 x MT x 16 x HD
   * accumulators, or are re-read from shared memory for every 16 queries. */
  constexpr bool kKVRegs = KVREGS;
  constexpr int kKVFrags = kKVRegs ? HD / 16 : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sK = reinterpret_cast<bf16 *>(smem);
  bf16 *sV = sK + BN * HD;
  bf16 *sQ = sV + BN * HD;         /* 2 stages */
  bf16 *sO = sQ + 2 * kTile * HD;  /* dO, 2 stages */
  float *sL = reinterpret_cast<float *>(sO + 2 * kTile * HD); /* 2 stages */
  float *sD = sL + 2 * kTile;

  const Blk blk = block_coords(p, p.Hkv);
  const int kb = blk.i; /* low key blocks have the most work: first */
  const int g = blk.h, b = blk.b;
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
    load_rowstats<kTile, kThreads>(sL + st * kTile, sD + st * kTile, p, b, hq, qt);
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
      float a[HD / 8], c[HD / 8];
#pragma unroll
      for (int i = 0; i < HD / 8; ++i) {
        a[i] = dk[mt][i][2 * r] * p.scale;
        c[i] = dk[mt][i][2 * r + 1] * p.scale;
      }
      const bf16 *yrow = p.qkv + (orow + min(key, p.T - 1)) * p.ld_qkv + (lane & 3) * 2;
      const int ck = (p.Hq + g) * HD + (lane & 3) * 2, cv = ck + p.Hkv * HD;
      store_grad_row<ROPE, HD / 8>(p, orow + key, key < p.T, ck, p.Hq + g, a, c,
                                   YGlobal{yrow + (p.Hq + g) * HD});
#pragma unroll
      for (int i = 0; i < HD / 8; ++i) {
        a[i] = dv[mt][i][2 * r];
        c[i] = dv[mt][i][2 * r + 1];
      }
      store_grad_row<ROPE, HD / 8>(p, orow + key, key < p.T, cv, p.Hq + p.Hkv + g, a, c,
                                   YGlobal{yrow + (p.Hq + p.Hkv + g) * HD});
    }
}

/* ----------------------------------------------- backward, wgmma (sm_90a) */

/* dQ with wgmma: NWG warpgroups of 64 queries of one (batch, head), K/V
 * tiles of KT keys up to the diagonal (layouts as in fwd_wg_kernel):
 *   S = Q K^T, dP = dO V^T (both operands in shared memory),
 *   dS = P*(dP - D) with P = exp2(c*S - L), dQ += dS K (dS from registers,
 *   K as an MN-major operand); finally dQ *= scale. */
template <int HD, int NWG, int MINB, bool ROPE>
__global__ void __launch_bounds__(128 * NWG, MINB) bwd_dq_wg_kernel(Params p) {
  constexpr int BM = 64 * NWG, NT = 128 * NWG, KT = 64;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sO = sQ + BM * HD; /* dO */
  bf16 *sK = sO + BM * HD; /* 2 stages */
  bf16 *sV = sK + 2 * KT * HD;

  const int nqb = (p.T + BM - 1) / BM;
  const Blk blk = block_coords(p, p.Hq);
  const int qb = nqb - 1 - blk.i;
  const int h = blk.h, b = blk.b;
  const int g = h / (p.Hq / p.Hkv);
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const long long base = (long long)b * p.T * p.ld_qkv;
  const bf16 *gq = p.qkv + base + (long long)h * HD;
  const bf16 *gk = p.qkv + base + (long long)(p.Hq + g) * HD;
  const bf16 *gv = p.qkv + base + (long long)(p.Hq + p.Hkv + g) * HD;
  const bf16 *gdo = p.dout + (long long)b * p.T * p.ld_dout + (long long)h * HD;
  const int q0 = qb * BM;
  const int nkb = min((q0 + BM - 1) / KT + 1, (p.T + KT - 1) / KT);
  const int qw = q0 + 64 * wg;
  const int r0 = qw + warp * 16 + (lane >> 2);
  const bf16 *sQw = sQ + 64 * wg * 64, *sOw = sO + 64 * wg * 64;

  load_tile_wg<BM, HD, NT>(sQ, gq, p.ld_qkv, q0, p.T);
  load_tile_wg<BM, HD, NT>(sO, gdo, p.ld_dout, q0, p.T);
  load_tile_wg<KT, HD, NT>(sK, gk, p.ld_qkv, 0, p.T);
  load_tile_wg<KT, HD, NT>(sV, gv, p.ld_qkv, 0, p.T);
  cp_commit();

  float Lr[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + 8 * r;
    const long long idx = ((long long)b * p.Hq + h) * p.T + row;
    Lr[r] = row < p.T ? p.ws_l[idx] : 0.f;
    Dr[r] = row < p.T ? p.ws_d[idx] : 0.f;
  }
  float dq[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) dq[i] = 0.f;

  for (int j = 0; j < nkb; ++j) {
    if (j + 1 < nkb) {
      const int st = (j + 1) & 1;
      load_tile_wg<KT, HD, NT>(sK + st * KT * HD, gk, p.ld_qkv, (j + 1) * KT, p.T);
      load_tile_wg<KT, HD, NT>(sV + st * KT * HD, gv, p.ld_qkv, (j + 1) * KT, p.T);
    }
    cp_commit();
    cp_wait<1>();
    fence_async_smem();
    __syncthreads();
    const bf16 *tk = sK + (j & 1) * KT * HD, *tv = sV + (j & 1) * KT * HD;
    if (j * KT <= qw + 63) {
      float s[KT / 2], dp[KT / 2];
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(s, kmajor_desc<BM>(sQw, kk), kmajor_desc<KT>(tk, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(dp, kmajor_desc<BM>(sOw, kk), kmajor_desc<KT>(tv, kk), kk > 0);
      wg_commit();
      wg_wait<0>();
      wg_regs(s);
      wg_regs(dp);
      uint32_t da[KT / 16][4];
      dq_ds<KT>(s, dp, Lr, Dr, j * KT, r0, lane, p.scale2, da);
      wg_regs(dq);
      wg_fence();
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks)
        wg_rs_t<HD>(dq, da[ks], wg_desc(smem_addr(tk) + ks * 2048, KT * 128, 1024));
      wg_commit();
      wg_wait<0>();
      wg_regs(dq);
    }
    __syncthreads();
  }

  store_dq_rows<ROPE, BM, HD>(p, dq, r0, q0, b, h, lane, sQ);
}

/* dK, dV with wgmma: NWG warpgroups of 64 keys of one (batch, kv head),
 * streaming the Q/dO tiles (64 queries) of every query head of the group
 * from the diagonal on, as bwd_dkdv_kernel, in transposed form:
 *   S^T = K Q^T, dP^T = V dO^T (operands in shared memory),
 *   P^T = exp2(c*S^T - L), dS^T = P^T*(dP^T - D),
 *   dV += P^T dO, dK += dS^T Q (A from registers, dO and Q MN-major);
 * finally dK *= scale. */
template <int HD, int NWG, int MINB, bool ROPE>
__global__ void __launch_bounds__(128 * NWG, MINB) bwd_dkdv_wg_kernel(Params p) {
  constexpr int BN = 64 * NWG, NT = 128 * NWG, BQ = 64;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  bf16 *sK = reinterpret_cast<bf16 *>(smem);
  bf16 *sV = sK + BN * HD;
  bf16 *sQ = sV + BN * HD;        /* 2 stages */
  bf16 *sO = sQ + 2 * BQ * HD;    /* dO, 2 stages */
  float *sL = reinterpret_cast<float *>(sO + 2 * BQ * HD); /* 2 stages */
  float *sD = sL + 2 * BQ;

  const Blk blk = block_coords(p, p.Hkv);
  const int kb = blk.i; /* low key blocks have the most work: first */
  const int g = blk.h, b = blk.b;
  const int group = p.Hq / p.Hkv;
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const long long base = (long long)b * p.T * p.ld_qkv;
  const bf16 *gk = p.qkv + base + (long long)(p.Hq + g) * HD;
  const bf16 *gv = p.qkv + base + (long long)(p.Hq + p.Hkv + g) * HD;
  const int k0 = kb * BN;
  const int kw = k0 + 64 * wg;                   /* this warpgroup's first key */
  const int key0 = kw + warp * 16 + (lane >> 2); /* this thread's keys: key0, key0 + 8 */
  const bf16 *sKw = sK + 64 * wg * 64, *sVw = sV + 64 * wg * 64;
  const int nqb = (p.T + BQ - 1) / BQ;
  const int qb0 = k0 / BQ; /* first query tile that sees these keys */
  const int per_head = nqb - qb0;
  const int ntiles = group * per_head;

  auto issue = [&](int i, int st) {
    const int hq = g * group + i / per_head;
    const int qt = (qb0 + i % per_head) * BQ;
    load_tile_wg<BQ, HD, NT>(sQ + st * BQ * HD, p.qkv + base + (long long)hq * HD, p.ld_qkv, qt,
                             p.T);
    load_tile_wg<BQ, HD, NT>(sO + st * BQ * HD,
                             p.dout + (long long)b * p.T * p.ld_dout + (long long)hq * HD,
                             p.ld_dout, qt, p.T);
    load_rowstats<BQ, NT>(sL + st * BQ, sD + st * BQ, p, b, hq, qt);
  };

  load_tile_wg<BN, HD, NT>(sK, gk, p.ld_qkv, k0, p.T);
  load_tile_wg<BN, HD, NT>(sV, gv, p.ld_qkv, k0, p.T);
  issue(0, 0);
  cp_commit();

  float dk[HD / 2], dv[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) dk[i] = dv[i] = 0.f;

  for (int i = 0; i < ntiles; ++i) {
    if (i + 1 < ntiles) issue(i + 1, (i + 1) & 1);
    cp_commit();
    cp_wait<1>();
    fence_async_smem();
    __syncthreads();
    const int st = i & 1;
    const bf16 *tq = sQ + st * BQ * HD, *to = sO + st * BQ * HD;
    const float *tl = sL + st * BQ, *td = sD + st * BQ;
    const int qt = (qb0 + i % per_head) * BQ;
    if (qt + BQ - 1 >= kw) { /* else every query precedes this warpgroup's keys */
      float s[BQ / 2], dp[BQ / 2];
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<BQ>(s, kmajor_desc<BN>(sKw, kk), kmajor_desc<BQ>(tq, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<BQ>(dp, kmajor_desc<BN>(sVw, kk), kmajor_desc<BQ>(to, kk), kk > 0);
      wg_commit();
      wg_wait<0>();
      wg_regs(s);
      wg_regs(dp);
      uint32_t pa[BQ / 16][4], da[BQ / 16][4];
      dkdv_pds<BQ>(s, dp, tl, td, qt, key0, p.T, lane, p.scale2, pa, da);
      wg_regs(dv);
      wg_regs(dk);
      wg_fence();
#pragma unroll
      for (int ks = 0; ks < BQ / 16; ++ks)
        wg_rs_t<HD>(dv, pa[ks], wg_desc(smem_addr(to) + ks * 2048, BQ * 128, 1024));
#pragma unroll
      for (int ks = 0; ks < BQ / 16; ++ks)
        wg_rs_t<HD>(dk, da[ks], wg_desc(smem_addr(tq) + ks * 2048, BQ * 128, 1024));
      wg_commit();
      wg_wait<0>();
      wg_regs(dv);
      wg_regs(dk);
    }
    __syncthreads();
  }

  store_dkdv_rows<ROPE, BN, HD>(p, dk, dv, key0, k0, b, g, lane, sK, sV);
}

/* ----------------------------- backward, warp-specialized (sm_90a, TMA) */

/* Both passes of the warp-specialized backward follow fwd_ws_kernel:
 * persistent CTAs of a TMA producer warpgroup and two consumer warpgroups,
 * tiles in rings guarded by full/empty mbarriers (one empty arrival per
 * consumer warp), 3-D maps that load rows past the sequence end as zeros.
 * The math per tile is that of bwd_dq_wg_kernel and bwd_dkdv_wg_kernel,
 * so results and their summation order are the same (bit-identical
 * reruns). */
template <int HD, int STAGES>
constexpr size_t dq_ws_smem() {
  return (size_t)(2 * 128 + 2 * STAGES * 64) * HD * sizeof(bf16) +
         (2 + 2 * STAGES) * sizeof(uint64_t) + 1024;
}

/* dQ: a tile is 128 queries of one (batch, head), consumer c owning 64;
 * Q and dO stay for the tile, K/V tiles of 64 keys stream up to the
 * diagonal. Per K/V tile a consumer issues S = Q K^T and dP = dO V^T,
 * forms dS, and issues dQ += dS K together with the next tile's S and dP
 * (one wait per tile). */
template <int HD, int STAGES, bool ROPE>
__global__ void __launch_bounds__(384, 1)
    bwd_dq_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                     const __grid_constant__ CUtensorMap tm_kv, Params p) {
  constexpr int BM = 128, KT = 64;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sO = sQ + BM * HD;
  bf16 *sK = sO + BM * HD;
  bf16 *sV = sK + STAGES * KT * HD;
  uint64_t *bar = reinterpret_cast<uint64_t *>(sV + STAGES * KT * HD);
  uint64_t *qo_full = bar, *qo_empty = bar + 1, *kv_full = bar + 2, *kv_empty = kv_full + STAGES;

  const int wg = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    coda_sm90::mbar_init(qo_full, 2);
    coda_sm90::mbar_init(qo_empty, 8);
    for (int s = 0; s < STAGES; ++s) {
      coda_sm90::mbar_init(&kv_full[s], 2);
      coda_sm90::mbar_init(&kv_empty[s], 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int nqb = (p.T + BM - 1) / BM, nkt = (p.T + KT - 1) / KT;
  const int hb_n = p.Hq * p.B, ntiles = nqb * hb_n, grp = p.Hq / p.Hkv;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int n = 0, tc = 0;
      for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
        const int qb = nqb - 1 - t / hb_n, hb = t % hb_n;
        const int h = hb % p.Hq, b = hb / p.Hq, g = h / grp, q0 = qb * BM;
        const int nkb = min((q0 + BM - 1) / KT + 1, nkt);
        coda_sm90::mbar_wait(qo_empty, (tc & 1) ^ 1);
        tma_tile<BM, HD>(sQ, &tm_q, qo_full, h * HD, q0, b);
        tma_tile<BM, HD>(sO, &tm_do, qo_full, h * HD, q0, b);
        for (int j = 0; j < nkb; ++j, ++n) {
          const int st = n % STAGES;
          coda_sm90::mbar_wait(&kv_empty[st], ((uint32_t)(n / STAGES) & 1) ^ 1);
          tma_tile<KT, HD>(sK + st * KT * HD, &tm_kv, &kv_full[st], (p.Hq + g) * HD, j * KT, b);
          tma_tile<KT, HD>(sV + st * KT * HD, &tm_kv, &kv_full[st], (p.Hq + p.Hkv + g) * HD,
                           j * KT, b);
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");

  const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const bf16 *sQw = sQ + 64 * cw * 64, *sOw = sO + 64 * cw * 64;
  int n = 0, tc = 0;
  for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
    const int qb = nqb - 1 - t / hb_n, hb = t % hb_n;
    const int h = hb % p.Hq, b = hb / p.Hq, q0 = qb * BM;
    const int nkb = min((q0 + BM - 1) / KT + 1, nkt);
    const int qw = q0 + 64 * cw;
    const int r0 = qw + warp * 16 + (lane >> 2);
    float Lr[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + 8 * r;
      const long long idx = ((long long)b * p.Hq + h) * p.T + row;
      Lr[r] = row < p.T ? p.ws_l[idx] : 0.f;
      Dr[r] = row < p.T ? p.ws_d[idx] : 0.f;
    }
    float dq[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) dq[i] = 0.f;
    float s[KT / 2], dp[KT / 2];
    auto issue_sdp = [&](int st) {
      const bf16 *tk = sK + st * KT * HD, *tv = sV + st * KT * HD;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(s, kmajor_desc<BM>(sQw, kk), kmajor_desc<KT>(tk, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(dp, kmajor_desc<BM>(sOw, kk), kmajor_desc<KT>(tv, kk), kk > 0);
    };
    coda_sm90::mbar_wait(qo_full, (uint32_t)tc & 1);
    int pend = -1;        /* stage whose dQ product is in flight */
    bool issued = false;  /* S and dP of tile j already issued */
    for (int j = 0; j < nkb; ++j) {
      const int st = n % STAGES;
      const uint32_t ph = (uint32_t)(n / STAGES) & 1;
      ++n;
      coda_sm90::mbar_wait(&kv_full[st], ph);
      if (j * KT > qw + 63) { /* keys wholly after this warpgroup's rows */
        warp_arrive(&kv_empty[st]);
        continue;
      }
      if (!issued) {
        wg_fence();
        issue_sdp(st);
        wg_commit();
      }
      wg_wait<0>();
      wg_regs(s);
      wg_regs(dp);
      wg_regs(dq);
      if (pend >= 0) warp_arrive(&kv_empty[pend]);
      uint32_t da[KT / 16][4];
      dq_ds<KT>(s, dp, Lr, Dr, j * KT, r0, lane, p.scale2, da);
      wg_fence();
      const bf16 *tk = sK + st * KT * HD;
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks)
        wg_rs_t<HD>(dq, da[ks], wg_desc(smem_addr(tk) + ks * 2048, KT * 128, 1024));
      issued = j + 1 < nkb && (j + 1) * KT <= qw + 63;
      if (issued) {
        const int nst = n % STAGES;
        coda_sm90::mbar_wait(&kv_full[nst], (uint32_t)(n / STAGES) & 1);
        issue_sdp(nst);
      }
      wg_commit();
      pend = st;
    }
    wg_wait<0>();
    wg_regs(dq);
    if (pend >= 0) warp_arrive(&kv_empty[pend]);

    store_dq_rows<ROPE, BM, HD>(p, dq, r0, q0, b, h, lane, sQ);
    warp_arrive(qo_empty); /* after the stores: the RoPE stores read sQ */
  }
}

template <int HD, int STAGES>
constexpr size_t dkdv_ws_smem() {
  return (size_t)(2 * 128 + 2 * STAGES * 64) * HD * sizeof(bf16) +
         2 * STAGES * 64 * sizeof(float) + (2 + 2 * STAGES) * sizeof(uint64_t) + 1024;
}

/* dK, dV: a tile is 128 keys of one (batch, kv head), consumer c owning
 * 64; K and V stay for the tile, and the Q/dO tiles (64 queries) of every
 * query head of the group stream from the diagonal on, with their L and D
 * (written into the ring by producer warp 1, zero past the sequence end). */
template <int HD, int STAGES, bool ROPE>
__global__ void __launch_bounds__(384, 1)
    bwd_dkdv_ws_kernel(const __grid_constant__ CUtensorMap tm_kv, const __grid_constant__ CUtensorMap tm_q,
                       const __grid_constant__ CUtensorMap tm_do, Params p) {
  constexpr int BN = 128, BQ = 64;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  bf16 *sK = reinterpret_cast<bf16 *>(smem);
  bf16 *sV = sK + BN * HD;
  bf16 *sQ = sV + BN * HD;
  bf16 *sO = sQ + STAGES * BQ * HD;
  float *sL = reinterpret_cast<float *>(sO + STAGES * BQ * HD);
  float *sD = sL + STAGES * BQ;
  uint64_t *bar = reinterpret_cast<uint64_t *>(sD + STAGES * BQ);
  uint64_t *kv_full = bar, *kv_empty = bar + 1, *q_full = bar + 2, *q_empty = q_full + STAGES;

  const int wg = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    coda_sm90::mbar_init(kv_full, 2);
    coda_sm90::mbar_init(kv_empty, 8);
    for (int s = 0; s < STAGES; ++s) {
      coda_sm90::mbar_init(&q_full[s], 2 + 32); /* Q, dO by TMA; L, D by 32 lanes */
      coda_sm90::mbar_init(&q_empty[s], 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int nkb = (p.T + BN - 1) / BN, nqb = (p.T + BQ - 1) / BQ;
  const int hb_n = p.Hkv * p.B, ntiles = nkb * hb_n, grp = p.Hq / p.Hkv;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < 2 && (warp == 1 || lane == 0)) {
      int n = 0, tc = 0;
      for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
        const int kb = t / hb_n, hb = t % hb_n; /* low key blocks (the most work) first */
        const int g = hb % p.Hkv, b = hb / p.Hkv, k0 = kb * BN, qb0 = k0 / BQ;
        const int per_head = nqb - qb0;
        if (warp == 0) {
          coda_sm90::mbar_wait(kv_empty, (tc & 1) ^ 1);
          tma_tile<BN, HD>(sK, &tm_kv, kv_full, (p.Hq + g) * HD, k0, b);
          tma_tile<BN, HD>(sV, &tm_kv, kv_full, (p.Hq + p.Hkv + g) * HD, k0, b);
        }
        for (int i = 0; i < grp * per_head; ++i, ++n) {
          const int st = n % STAGES;
          const int hq = g * grp + i / per_head, qt = (qb0 + i % per_head) * BQ;
          coda_sm90::mbar_wait(&q_empty[st], ((uint32_t)(n / STAGES) & 1) ^ 1);
          if (warp == 0) {
            tma_tile<BQ, HD>(sQ + st * BQ * HD, &tm_q, &q_full[st], hq * HD, qt, b);
            tma_tile<BQ, HD>(sO + st * BQ * HD, &tm_do, &q_full[st], hq * HD, qt, b);
          } else {
#pragma unroll
            for (int x = lane; x < BQ; x += 32) {
              const long long idx = ((long long)b * p.Hq + hq) * p.T + qt + x;
              const bool ok = qt + x < p.T;
              sL[st * BQ + x] = ok ? p.ws_l[idx] : 0.f;
              sD[st * BQ + x] = ok ? p.ws_d[idx] : 0.f;
            }
            coda_sm90::mbar_arrive(&q_full[st]); /* releases this lane's stores */
          }
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");

  const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const bf16 *sKw = sK + 64 * cw * 64, *sVw = sV + 64 * cw * 64;
  int n = 0, tc = 0;
  for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
    const int kb = t / hb_n, hb = t % hb_n;
    const int g = hb % p.Hkv, b = hb / p.Hkv, k0 = kb * BN, qb0 = k0 / BQ;
    const int per_head = nqb - qb0;
    const int kw = k0 + 64 * cw;
    const int key0 = kw + warp * 16 + (lane >> 2); /* this thread's keys: key0, key0 + 8 */
    float dk[HD / 2], dv[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) dk[i] = dv[i] = 0.f;
    coda_sm90::mbar_wait(kv_full, (uint32_t)tc & 1);
    float s[BQ / 2], dp[BQ / 2];
    auto issue_sdp = [&](int st) {
      const bf16 *tq = sQ + st * BQ * HD, *to = sO + st * BQ * HD;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<BQ>(s, kmajor_desc<BN>(sKw, kk), kmajor_desc<BQ>(tq, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<BQ>(dp, kmajor_desc<BN>(sVw, kk), kmajor_desc<BQ>(to, kk), kk > 0);
    };
    for (int i = 0; i < grp * per_head; ++i, ++n) {
      const int st = n % STAGES;
      coda_sm90::mbar_wait(&q_full[st], (uint32_t)(n / STAGES) & 1);
      const int qt = (qb0 + i % per_head) * BQ;
      if (qt + BQ - 1 >= kw) { /* else every query precedes this warpgroup's keys */
        const bf16 *tq = sQ + st * BQ * HD, *to = sO + st * BQ * HD;
        const float *tl = sL + st * BQ, *td = sD + st * BQ;
        wg_fence();
        issue_sdp(st);
        wg_commit();
        wg_wait<0>();
        wg_regs(s);
        wg_regs(dp);
        uint32_t pa[BQ / 16][4], da[BQ / 16][4];
        dkdv_pds<BQ>(s, dp, tl, td, qt, key0, p.T, lane, p.scale2, pa, da);
        wg_regs(dv);
        wg_regs(dk);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < BQ / 16; ++ks)
          wg_rs_t<HD>(dv, pa[ks], wg_desc(smem_addr(to) + ks * 2048, BQ * 128, 1024));
#pragma unroll
        for (int ks = 0; ks < BQ / 16; ++ks)
          wg_rs_t<HD>(dk, da[ks], wg_desc(smem_addr(tq) + ks * 2048, BQ * 128, 1024));
        wg_commit();
        wg_wait<0>();
        wg_regs(dv);
        wg_regs(dk);
      }
      warp_arrive(&q_empty[st]);
    }

    store_dkdv_rows<ROPE, BN, HD>(p, dk, dv, key0, k0, b, g, lane, sK, sV);
    warp_arrive(kv_empty); /* after the stores: the RoPE stores read sK, sV */
  }
}

/* The launchers report a failed attribute call as a cudaError_t (*e) and
 * a failed launch through coda_cuda_check_launch, naming the pass. */
static bool flat_ok(const Params &p, int nblk, int heads) {
  return (long long)nblk * heads * p.B < (1LL << 31);
}

template <int HD, int MT, int KT>
coda_status launch_forward(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  const size_t sm = (size_t)(64 * MT + 4 * KT) * HD * sizeof(bf16);
  *e = cudaFuncSetAttribute(fwd_kernel<HD, MT, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  const int nqb = (p.T + 64 * MT - 1) / (64 * MT);
  p.flat = p.flat && flat_ok(p, nqb, p.Hq);
  fwd_kernel<HD, MT, KT><<<grid_of(p, nqb, p.Hq), kThreads, sm, stream>>>(p);
  return coda_cuda_check_launch(ctx, "attention forward");
}

template <int HD, int KT, int NWG>
coda_status launch_forward_wg(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  /* + 1024 bytes to align the swizzled tiles */
  const size_t sm = (size_t)(64 * NWG + 4 * KT) * HD * sizeof(bf16) + 1024;
  *e = cudaFuncSetAttribute(fwd_wg_kernel<HD, KT, NWG>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  const int nqb = (p.T + 64 * NWG - 1) / (64 * NWG);
  p.flat = p.flat && flat_ok(p, nqb, p.Hq);
  fwd_wg_kernel<HD, KT, NWG><<<grid_of(p, nqb, p.Hq), 128 * NWG, sm, stream>>>(p);
  return coda_cuda_check_launch(ctx, "attention forward");
}

/* TMA maps for the warp-specialized kernels: a packed (B*T x cols, pitch
 * ld) bf16 matrix seen as 3-D {cols, T, B}, so that rows past each
 * sequence's end load as zeros; box {64 columns, box_rows, 1}, 128-byte
 * swizzle (the wswz layout). The driver's encoder is reached through the
 * runtime, as the GEMM does. */
struct MapMaker {
  void *encode;
};
static coda_status map_maker(coda_context ctx, MapMaker *mm, cudaError_t *e) {
  cudaDriverEntryPointQueryResult q;
  mm->encode = NULL;
  *e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &mm->encode, 12000,
                                        cudaEnableDefault, &q);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  if (q != cudaDriverEntryPointSuccess || !mm->encode)
    return coda_fail(ctx, CODA_ERR_BACKEND,
                     "CUDA attention: the driver does not provide cuTensorMapEncodeTiled");
  return CODA_OK;
}
static coda_status seq_map(coda_context ctx, const MapMaker &mm, const void *base, long long cols,
                           long long ld, const Params &p, int box_rows, CUtensorMap *tm) {
  const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)p.T, (cuuint64_t)p.B};
  const cuuint64_t strides[2] = {(cuuint64_t)ld * 2, (cuuint64_t)ld * 2 * p.T};
  const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)mm.encode)(
      tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(base), dims, strides, box, estr,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND,
                     "CUDA attention: cuTensorMapEncodeTiled failed (error %d)", (int)r);
  return CODA_OK;
}
static coda_status qkv_map(coda_context ctx, const MapMaker &mm, const Params &p, int hd,
                           int box_rows, CUtensorMap *tm) {
  return seq_map(ctx, mm, p.qkv, (long long)(p.Hq + 2 * p.Hkv) * hd, p.ld_qkv, p, box_rows, tm);
}
static coda_status dout_map(coda_context ctx, const MapMaker &mm, const Params &p, int hd,
                            int box_rows, CUtensorMap *tm) {
  return seq_map(ctx, mm, p.dout, (long long)p.Hq * hd, p.ld_dout, p, box_rows, tm);
}
/* Persistent grid: one CTA per SM, at most one per tile. */
static coda_status persistent_grid(long long tiles, unsigned *grid, cudaError_t *e) {
  int dev = 0, sms = 0;
  if ((*e = cudaGetDevice(&dev)) != cudaSuccess ||
      (*e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
    return CODA_ERR_BACKEND;
  *grid = (unsigned)(tiles < sms ? tiles : sms);
  return CODA_OK;
}

template <int HD, int STAGES, bool PING>
coda_status launch_forward_ws(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  static_assert(kWsBM == kWsKT, "the Q and K/V tiles share one TMA box");
  MapMaker mm;
  CUtensorMap tm;
  coda_status s = map_maker(ctx, &mm, e);
  if (s == CODA_OK) s = qkv_map(ctx, mm, p, HD, kWsKT, &tm);
  if (s != CODA_OK) return s;
  const size_t sm = fwd_ws_smem<HD, STAGES>();
  *e = cudaFuncSetAttribute(fwd_ws_kernel<HD, STAGES, PING>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  unsigned grid;
  if (persistent_grid((long long)((p.T + kWsBM - 1) / kWsBM) * p.Hq * p.B, &grid, e) != CODA_OK)
    return CODA_ERR_BACKEND;
  fwd_ws_kernel<HD, STAGES, PING><<<grid, 384, sm, stream>>>(tm, p);
  return coda_cuda_check_launch(ctx, "attention forward");
}

/* The backward's three passes: prep (D, L), dQ, dK/dV; each pass launcher
 * sets its shared-memory limit and grid. */
template <int HD>
coda_status launch_prep(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  (void)e;
  bwd_prep_kernel<HD><<<(unsigned)(p.B * p.T), 256, 0, stream>>>(p);
  return coda_cuda_check_launch(ctx, "attention backward (prep pass)");
}
/* Sets a backward kernel's shared-memory limit and launches it: the
 * instantiation with the fused RoPE backward when p.rope_pos is set, so
 * the plain backward carries none of its code. */
typedef void (*kernel_fn)(Params);
static coda_status launch_pass(coda_context ctx, kernel_fn plain, kernel_fn rope, const Params &p,
                               dim3 grid, int threads, size_t sm, cudaStream_t stream,
                               cudaError_t *e, const char *what) {
  const kernel_fn k = p.rope_pos ? rope : plain;
  *e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  k<<<grid, threads, sm, stream>>>(p);
  return coda_cuda_check_launch(ctx, what);
}
template <int HD, int MQ>
coda_status launch_dq(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  const size_t sm = (size_t)(2 * 64 * MQ + 4 * kTile) * HD * sizeof(bf16);
  const int nqb = (p.T + 64 * MQ - 1) / (64 * MQ);
  p.flat = p.flat && flat_ok(p, nqb, p.Hq);
  return launch_pass(ctx, bwd_dq_kernel<HD, MQ, false>, bwd_dq_kernel<HD, MQ, true>, p,
                     grid_of(p, nqb, p.Hq), kThreads, sm, stream, e,
                     "attention backward (dq pass)");
}
template <int HD, int MK, bool KVREGS>
coda_status launch_dkdv(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  const size_t sm =
      (size_t)(2 * 64 * MK + 4 * kTile) * HD * sizeof(bf16) + 4 * kTile * sizeof(float);
  const int nkb = (p.T + 64 * MK - 1) / (64 * MK);
  p.flat = p.flat && flat_ok(p, nkb, p.Hkv);
  return launch_pass(ctx, bwd_dkdv_kernel<HD, MK, KVREGS, false>,
                     bwd_dkdv_kernel<HD, MK, KVREGS, true>, p, grid_of(p, nkb, p.Hkv), kThreads,
                     sm, stream, e, "attention backward (dk/dv pass)");
}
template <int HD, int NWG, int MINB>
coda_status launch_dq_wg(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  const size_t sm = (size_t)(2 * 64 * NWG + 4 * 64) * HD * sizeof(bf16) + 1024;
  const int nqb = (p.T + 64 * NWG - 1) / (64 * NWG);
  p.flat = p.flat && flat_ok(p, nqb, p.Hq);
  return launch_pass(ctx, bwd_dq_wg_kernel<HD, NWG, MINB, false>,
                     bwd_dq_wg_kernel<HD, NWG, MINB, true>, p, grid_of(p, nqb, p.Hq), 128 * NWG,
                     sm, stream, e, "attention backward (dq pass)");
}
template <int HD, int NWG, int MINB>
coda_status launch_dkdv_wg(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  const size_t sm =
      (size_t)(2 * 64 * NWG + 4 * 64) * HD * sizeof(bf16) + 4 * 64 * sizeof(float) + 1024;
  const int nkb = (p.T + 64 * NWG - 1) / (64 * NWG);
  p.flat = p.flat && flat_ok(p, nkb, p.Hkv);
  return launch_pass(ctx, bwd_dkdv_wg_kernel<HD, NWG, MINB, false>,
                     bwd_dkdv_wg_kernel<HD, NWG, MINB, true>, p, grid_of(p, nkb, p.Hkv),
                     128 * NWG, sm, stream, e, "attention backward (dk/dv pass)");
}

/* The warp-specialized passes: maps, shared-memory limit, persistent grid;
 * the RoPE instantiation when p.rope_pos is set. */
typedef void (*ws_kernel_fn)(CUtensorMap, CUtensorMap, CUtensorMap, Params);
static coda_status launch_ws_pass(coda_context ctx, ws_kernel_fn plain, ws_kernel_fn rope,
                                  const CUtensorMap &m0, const CUtensorMap &m1,
                                  const CUtensorMap &m2, const Params &p, long long tiles,
                                  size_t sm, cudaStream_t stream, cudaError_t *e,
                                  const char *what) {
  const ws_kernel_fn k = p.rope_pos ? rope : plain;
  *e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  unsigned grid;
  if (persistent_grid(tiles, &grid, e) != CODA_OK) return CODA_ERR_BACKEND;
  k<<<grid, 384, sm, stream>>>(m0, m1, m2, p);
  return coda_cuda_check_launch(ctx, what);
}
template <int HD, int STAGES>
coda_status launch_dq_ws(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  MapMaker mm;
  CUtensorMap mq, mdo, mkv;
  coda_status s = map_maker(ctx, &mm, e);
  if (s == CODA_OK) s = qkv_map(ctx, mm, p, HD, 128, &mq);
  if (s == CODA_OK) s = dout_map(ctx, mm, p, HD, 128, &mdo);
  if (s == CODA_OK) s = qkv_map(ctx, mm, p, HD, 64, &mkv);
  if (s != CODA_OK) return s;
  return launch_ws_pass(ctx, bwd_dq_ws_kernel<HD, STAGES, false>,
                        bwd_dq_ws_kernel<HD, STAGES, true>, mq, mdo, mkv, p,
                        (long long)((p.T + 127) / 128) * p.Hq * p.B, dq_ws_smem<HD, STAGES>(),
                        stream, e, "attention backward (dq pass)");
}
template <int HD, int STAGES>
coda_status launch_dkdv_ws(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  MapMaker mm;
  CUtensorMap mkv, mq, mdo;
  coda_status s = map_maker(ctx, &mm, e);
  if (s == CODA_OK) s = qkv_map(ctx, mm, p, HD, 128, &mkv);
  if (s == CODA_OK) s = qkv_map(ctx, mm, p, HD, 64, &mq);
  if (s == CODA_OK) s = dout_map(ctx, mm, p, HD, 64, &mdo);
  if (s != CODA_OK) return s;
  return launch_ws_pass(ctx, bwd_dkdv_ws_kernel<HD, STAGES, false>,
                        bwd_dkdv_ws_kernel<HD, STAGES, true>, mkv, mq, mdo, p,
                        (long long)((p.T + 127) / 128) * p.Hkv * p.B, dkdv_ws_smem<HD, STAGES>(),
                        stream, e, "attention backward (dk/dv pass)");
}

typedef coda_status (*pass_fn)(coda_context, Params, cudaStream_t, cudaError_t *);
template <pass_fn PREP, pass_fn DQ, pass_fn DKDV>
coda_status launch_backward(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  coda_status s = PREP(ctx, p, stream, e);
  if (s == CODA_OK) s = DQ(ctx, p, stream, e);
  if (s == CODA_OK) s = DKDV(ctx, p, stream, e);
  return s;
}
/* mma.sync backward: <head_dim, m16 tiles per warp in dQ, in dK/dV, K/V in registers> */
template <int HD, int MQ, int MK, bool KVREGS>
constexpr pass_fn bwd_mma = launch_backward<launch_prep<HD>, launch_dq<HD, MQ>,
                                            launch_dkdv<HD, MK, KVREGS>>;
/* wgmma backward: <head_dim, warpgroups per CTA in dQ, in dK/dV, CTAs per
 * SM the registers must allow in dK/dV, in dQ> */
template <int HD, int NQ, int NK, int MINK = 1, int MINQ = 1>
constexpr pass_fn bwd_wg = launch_backward<launch_prep<HD>, launch_dq_wg<HD, NQ, MINQ>,
                                           launch_dkdv_wg<HD, NK, MINK>>;

/* warp-specialized backward: <head_dim, K/V stages in dQ, Q/dO stages in
 * dK/dV> */
template <int HD, int SQ, int SK>
constexpr pass_fn bwd_ws = launch_backward<launch_prep<HD>, launch_dq_ws<HD, SQ>,
                                           launch_dkdv_ws<HD, SK>>;

/* Kernel variant tables per head_dim (the config numbers of attention.cuh,
 * printed by the benchmark). Variants 0.. of head_dim 64 and 128 are the
 * first kernels measured in bench/results/attention-2026-11-30.md; later
 * entries were added after it. */
typedef coda_status (*fwd_fn)(coda_context, Params, cudaStream_t, cudaError_t *);
typedef coda_status (*bwd_fn)(coda_context, Params, cudaStream_t, cudaError_t *);

/* forward: launch_forward<head_dim, m16 tiles per warp, keys per K/V tile>
 * (mma.sync), launch_forward_wg<head_dim, keys per K/V tile, warpgroups per
 * CTA> (wgmma), launch_forward_ws<head_dim, K/V stages, pingpong>
 * (warp-specialized, persistent; the last two entries of their tables,
 * which the GPU test relies on) */
static const fwd_fn kFwd32[] = {launch_forward<32, 1, 64>, launch_forward<32, 2, 64>,
                                launch_forward<32, 1, 128>};
static const fwd_fn kFwd64[] = {launch_forward<64, 1, 64>,       launch_forward<64, 2, 64>,
                                launch_forward<64, 1, 128>,      launch_forward_wg<64, 64, 1>,
                                launch_forward_wg<64, 64, 2>,    launch_forward_wg<64, 128, 2>,
                                launch_forward_wg<64, 64, 3>,    launch_forward_ws<64, 3, false>,
                                launch_forward_ws<64, 3, true>};
static const fwd_fn kFwd128[] = {launch_forward<128, 1, 64>,    launch_forward<128, 2, 32>,
                                 launch_forward_wg<128, 64, 1>, launch_forward_wg<128, 64, 2>,
                                 launch_forward_wg<128, 128, 2>, launch_forward_wg<128, 64, 3>,
                                 launch_forward_ws<128, 2, false>, launch_forward_ws<128, 2, true>};
/* backward: bwd_mma<head_dim, m16 tiles per warp in dQ, in dK/dV, K/V in
 * registers>, bwd_wg<head_dim, warpgroups per CTA in dQ, in dK/dV, CTAs per
 * SM in dK/dV, in dQ>, bwd_ws<...> (warp-specialized; the last two
 * entries at head_dim 64 and 128, which the GPU test relies on) */
static const bwd_fn kBwd32[] = {bwd_mma<32, 1, 1, true>, bwd_mma<32, 2, 1, true>,
                                bwd_mma<32, 1, 2, true>, bwd_mma<32, 2, 2, true>};
static const bwd_fn kBwd64[] = {bwd_mma<64, 1, 1, true>,  bwd_mma<64, 2, 1, true>,
                                bwd_mma<64, 1, 2, false>, bwd_mma<64, 2, 2, false>,
                                bwd_wg<64, 1, 1>,         bwd_wg<64, 2, 2>,
                                bwd_wg<64, 2, 1>,         bwd_wg<64, 1, 1, 3>,
                                bwd_wg<64, 1, 1, 3, 4>,   bwd_ws<64, 2, 2>,
                                bwd_ws<64, 4, 4>};
static const bwd_fn kBwd128[] = {bwd_mma<128, 1, 1, false>, bwd_wg<128, 1, 1>,
                                 bwd_wg<128, 2, 2>, bwd_wg<128, 2, 1>,
                                 bwd_ws<128, 2, 2>, bwd_ws<128, 4, 4>};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int fwd_table(int hd, const fwd_fn **t) {
  switch (hd) {
    case 32: *t = kFwd32; return NELEM(kFwd32);
    case 64: *t = kFwd64; return NELEM(kFwd64);
    case 128: *t = kFwd128; return NELEM(kFwd128);
    default: *t = NULL; return 0;
  }
}
static int bwd_table(int hd, const bwd_fn **t) {
  switch (hd) {
    case 32: *t = kBwd32; return NELEM(kBwd32);
    case 64: *t = kBwd64; return NELEM(kBwd64);
    case 128: *t = kBwd128; return NELEM(kBwd128);
    default: *t = NULL; return 0;
  }
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

/* The fused RoPE backward's views: pos i32 (BT x 1), freq f32 (1 x qkv
 * columns, 8-byte aligned: the kernels read (hi, lo) as one float2), zp
 * f32 (BT x heads, 4-byte aligned). */
static coda_status set_rope(coda_context ctx, const coda_attn_rope *r, int64_t BT, int64_t cols,
                            int heads, Params *p) {
  if (!r->pos || !r->freq || !r->zp || !r->pos->data || !r->freq->data || !r->zp->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: a RoPE view is NULL");
  if (r->pos->dtype != CODA_I32 || r->pos->rows != BT || r->pos->cols != 1 ||
      ((uintptr_t)r->pos->data & 3))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: pos must be i32 %lld x 1, 4-byte aligned", (long long)BT);
  if (r->freq->dtype != CODA_F32 || r->freq->rows != 1 || r->freq->cols != cols ||
      ((uintptr_t)r->freq->data & 7))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: freq must be f32 1 x %lld, 8-byte aligned", (long long)cols);
  if (r->zp->dtype != CODA_F32 || r->zp->rows != BT || r->zp->cols != heads ||
      r->zp->ld < heads || ((uintptr_t)r->zp->data & 3))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: zp must be f32 %lld x %d, 4-byte aligned", (long long)BT,
                     heads);
  p->rope_pos = static_cast<const int *>(r->pos->data);
  p->ld_pos = r->pos->ld;
  p->rope_freq = static_cast<const float *>(r->freq->data);
  p->zp = static_cast<float *>(r->zp->data);
  p->ld_zp = r->zp->ld;
  return CODA_OK;
}

/* attn_impl V1 (CODA_ATTN_IMPL=v1) selects the first measured defaults
 * and block order (bench/results/attention-2026-11-30.md), to compare
 * against or fall back to. */
static bool legacy_impl(coda_context ctx) { return ctx->knobs.attn_impl == CODA_ATTN_IMPL_V1; }

static coda_status setup(coda_context ctx, const coda_tensor *qkv, int B, int T, int Hq, int Hkv,
                         int hd, Params *p) {
  if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "CUDA attention: batch %d, seq %d, heads %d/%d are not valid", B, T, Hq, Hkv);
  if (hd != 32 && hd != 64 && hd != 128)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: head_dim %d (the GPU kernels support 32, 64 and 128)", hd);
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
  p->flat = !legacy_impl(ctx);
  return CODA_OK;
}

/* Default kernel variants (see attention.cuh), the fastest in
 * bench/results/attention-*.md and gpu-*.md: the warp-specialized forward
 * (with pingpong) and backward for head_dim 64 and 128 (gpu-2026-11-30j). */
static int default_fwd_config(coda_context ctx, int hd) {
  if (legacy_impl(ctx)) return 1;
  return hd == 32 ? 1 : hd == 64 ? 8 : 7;
}
static int default_bwd_config(coda_context ctx, int hd) {
  if (legacy_impl(ctx)) return hd == 128 ? 0 : 3;
  return hd == 32 ? 1 : hd == 64 ? 10 : 5;
}

extern "C" int coda_cuda_attention_num_configs(int backward, int hd) {
  const fwd_fn *f;
  const bwd_fn *b;
  return backward ? bwd_table(hd, &b) : fwd_table(hd, &f);
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
                                                    int Hkv, int hd, const coda_tensor *dqkv,
                                                    const coda_attn_rope *rope) {
  return coda_cuda_attention_backward_config(ctx, qkv, out, lse, dout, B, T, Hq, Hkv, hd, dqkv,
                                             rope, -1);
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
  if (config < 0) config = default_fwd_config(ctx, hd);
  if (config >= coda_cuda_attention_num_configs(0, hd))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: no forward variant %d",
                     config);
  const fwd_fn *tab;
  fwd_table(hd, &tab);
  cudaError_t e = cudaSuccess;
  s = tab[config](ctx, p, 0, &e);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "forward kernel setup");
  return s;
}

extern "C" coda_status coda_cuda_attention_backward_config(
    coda_context ctx, const coda_tensor *qkv, const coda_tensor *out, const coda_tensor *lse,
    const coda_tensor *dout, int B, int T, int Hq, int Hkv, int hd, const coda_tensor *dqkv,
    const coda_attn_rope *rope, int config) {
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
  if (rope && (s = set_rope(ctx, rope, BT, (int64_t)(Hq + 2 * Hkv) * hd, Hq + 2 * Hkv, &p)))
    return s;
  if (config < 0) config = default_bwd_config(ctx, hd);
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
  coda_mem_add(ctx, 2 * n * sizeof(float));
  p.ws_d = static_cast<float *>(ws);
  p.ws_l = p.ws_d + n;
  const bwd_fn *tab;
  bwd_table(hd, &tab);
  s = tab[config](ctx, p, 0, &e);
  const cudaError_t ef = cudaFreeAsync(ws, 0);
  coda_mem_sub(ctx, 2 * n * sizeof(float));
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "backward kernel setup");
  if (s != CODA_OK) return s;
  if (ef != cudaSuccess) return attn_cuda_fail(ctx, ef, "cudaFreeAsync");
  return CODA_OK;
}
