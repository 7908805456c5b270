/* What every CUDA attention kernel family shares (attention_mma.cu,
 * attention_wg.cu, attention_ws.cu) and the host dispatcher
 * (attention.cu) builds on: the kernel parameters, the mma.sync/ldmatrix
 * primitives, block order and tile loads, the gradient stores (with the
 * fused RoPE backward), the launch helpers and the named variant lists each
 * family exports. Causal grouped-query attention on Hopper (sm_90a), bf16
 * in and out, fp32 accumulation; docs/backends.md, "Attention on the GPU",
 * has the design.
 *
 * Shared conventions of every kernel:
 *  - query t sees keys j with t - win < j <= t (win: the sliding window, or
 *    T without one, where the lower edge is never reached); one unsigned
 *    compare, (unsigned)(t - j) >= win, masks both edges (sees_key). Key
 *    blocks wholly below every row's window are never loaded (first_kv_block,
 *    q_tile_end), and the element masks run only on blocks that cross an
 *    edge;
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
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backends/cuda/backend.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/ptx_sm90.cuh"

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
  int win;      /* query t sees keys t - win < j <= t; T without a window */
  float scale;  /* the scores' scale (default 1/sqrt(head_dim)) */
  float scale2; /* scale*log2(e) */
  int flat;     /* 1: 1-D grid, longest causal blocks first (see block_coords) */
};

/* ------------------------------------------------------- causal window */

/* Whether query row sees key: key <= row and row - key < win, in one
 * unsigned compare (key > row wraps to a huge difference). */
__device__ __forceinline__ bool sees_key(int row, int key, int win) {
  return (unsigned)(row - key) < (unsigned)win;
}
/* The first block of KT keys that query q0 (the lowest row of a query
 * block) sees: 0 without a window. */
__device__ __forceinline__ int first_kv_block(const Params &p, int q0, int KT) {
  return max(0, q0 - p.win + 1) / KT;
}
/* One past the last block of BQ queries that sees key k1 (the highest key
 * of a key block): every block to the sequence end without a window. */
__device__ __forceinline__ int q_tile_end(const Params &p, int k1, int BQ) {
  const int end = (long long)k1 + p.win >= p.T ? p.T : k1 + p.win;
  return (end + BQ - 1) / BQ;
}
/* Whether keys [key0, key0 + n) lie wholly below the window of every row
 * from r0 on (a block to skip). */
__device__ __forceinline__ bool below_window(const Params &p, int key0, int n, int r0) {
  return (long long)key0 + n - 1 + p.win <= r0;
}
/* Whether the window's lower edge crosses keys from key0 for some real row
 * up to r1 (the block needs the element mask on that side). Never without
 * a window (win = T). */
__device__ __forceinline__ bool crosses_window(const Params &p, int key0, int r1) {
  return (long long)key0 + p.win <= min(r1, p.T - 1);
}

/* ---------------------------------------------------------- primitives */

/* From ptx_sm90.cuh (shared with the GEMM). */
using coda_sm90::cp_async16;
using coda_sm90::cp_commit;
using coda_sm90::cp_wait;
using coda_sm90::fence_async_smem;
using coda_sm90::fence_regs;
using coda_sm90::smem_addr;
using coda_sm90::smem_desc;
using coda_sm90::wgmma_commit;
using coda_sm90::wgmma_fence;
using coda_sm90::wgmma_wait;

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
static inline dim3 grid_of(const Params &p, int nblk, int heads) {
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
 * 2*pi*frac(p*(fhi + flo)): the angle as rope() in the epilogue helpers
 * (epi_helpers.cuh) and the CPU (cpu/rope.h) reduce it (p*fhi = hi + err
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

/* ------------------------------------------------------------ launching */

/* The launchers report a failed attribute call as a cudaError_t (*e) and
 * a failed launch through coda_cuda_check_launch, naming the pass. */
static inline bool flat_ok(const Params &p, int nblk, int heads) {
  return (long long)nblk * heads * p.B < (1LL << 31);
}

typedef coda_status (*pass_fn)(coda_context, Params, cudaStream_t, cudaError_t *);

/* Sets a backward kernel's shared-memory limit and launches it: the
 * instantiation with the fused RoPE backward when p.rope_pos is set, so
 * the plain backward carries none of its code. */
typedef void (*kernel_fn)(Params);
static inline coda_status launch_pass(coda_context ctx, kernel_fn plain, kernel_fn rope, const Params &p,
                                      dim3 grid, int threads, size_t sm, cudaStream_t stream,
                                      cudaError_t *e, const char *what) {
  const kernel_fn k = p.rope_pos ? rope : plain;
  *e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  if (*e != cudaSuccess) return CODA_ERR_BACKEND;
  k<<<grid, threads, sm, stream>>>(p);
  return coda_cuda_check_launch(ctx, what);
}

/* The backward after its prep pass (D, L; attention.cu): the dQ pass, then
 * the dK/dV pass. */
template <pass_fn DQ, pass_fn DKDV>
coda_status launch_grad_passes(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  coda_status s = DQ(ctx, p, stream, e);
  if (s == CODA_OK) s = DKDV(ctx, p, stream, e);
  return s;
}

/* ------------------------------------------------------------- variants */

/* A kernel variant: its name (printed by the benchmark and the GPU test,
 * unique per pass and head_dim) and its launcher, the forward or the
 * backward after its prep pass. The launchers report a failed attribute
 * call as a cudaError_t (*e) and a failed launch through
 * coda_cuda_check_launch, naming the pass. */
struct Variant {
  const char *name;
  pass_fn fn;
};
struct VariantList {
  const Variant *v;
  int n; /* 0 where the family has no kernel at this head_dim */
};
/* Each family's variants of the forward (backward = 0) or backward pass at
 * head_dim hd, in the order they were added (attention.cu lists mma.sync,
 * then wgmma, then warp-specialized). */
VariantList mma_variants(int backward, int hd); /* attention_mma.cu */
VariantList wg_variants(int backward, int hd);  /* attention_wg.cu */
VariantList ws_variants(int backward, int hd);  /* attention_ws.cu */

#define CODA_ATTN_LIST(a) (VariantList{a, (int)(sizeof(a) / sizeof((a)[0]))})

}  // namespace coda_attn
