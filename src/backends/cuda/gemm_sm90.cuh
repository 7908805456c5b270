/* The Hopper (sm_90a) GEMM mainloop: D = epilogue(op(A) * op(B)).
 *
 * One CTA = 3 warpgroups, one CTA per SM (persistent). Warpgroup 0 is the
 * producer: one thread issues TMA loads of A and B k-blocks (64 deep) into a
 * ring of STAGES shared-memory buffers, 128-byte swizzled, each guarded by a
 * "full" mbarrier (TMA transaction bytes) and an "empty" mbarrier (released
 * by the consumer warpgroup(s) that read it). Warpgroups 1 and 2 consume
 * with wgmma m64nBNk16, fp32 accumulators in registers, in one of two
 * schedules:
 *  - cooperative: both consumers share each 128 x BN tile, 64 rows each;
 *  - pingpong: each consumer owns whole 128 x BN tiles (two m64 blocks) and
 *    the two alternate, ordered by named barriers, so one's epilogue runs
 *    while the other's MMAs do.
 * Work units (tile, k-split) are visited in grouped order (GROUP_M row tiles
 * sweep all column tiles before moving on) so that concurrently running CTAs
 * share A and B in L2.
 * Clusters (CM = 2): the two CTAs of a cluster take row tiles 2i and 2i+1 of
 * one column tile, so they need the same B k-block: each loads half of it
 * and multicasts that half into both CTAs' rings (A stays per CTA). Each
 * "full" barrier then counts the whole A and B bytes; each "empty" barrier
 * counts the consumers of both CTAs (a stage is refilled in both at once),
 * which arrive on it remotely. See gemm_kernel.
 *
 * Shared-memory layouts (bf16/f16, 64 elements = 128 bytes = one swizzle row):
 *  - K-major operand (A with trans_a = N, B with trans_b = T): rows of 64 k,
 *    row r at r*128 bytes; one TMA box {64 k, rows}. wgmma descriptor:
 *    SBO = 1024 (8-row swizzle atom), k16 step = +32 bytes in the atom.
 *  - MN-major operand (A with trans_a = T, B with trans_b = N): chunks of 64
 *    m (or n) x 64 k, each chunk = 64 rows (one per k) of 128 bytes; one TMA
 *    box {64 mn, 64 k} per chunk. Descriptor: LBO = 8192 (next 64-wide chunk
 *    along m/n), SBO = 1024 (next 8 k-rows), k16 step = +2048 bytes; wgmma
 *    transpose immediate = 1.
 * Out-of-range rows/columns/k are zero-filled by TMA, so ragged M, N, K need
 * no special mainloop code; the epilogue clips its stores.
 *
 * The epilogue is a seam: the kernel hands each consumer thread's
 * accumulator fragment (AccFragment, with the global (row, col) of every
 * value) to the Epi functor, with a shared-memory scratch and a named
 * barrier of its own; the functor decides what to compute and store. */
#pragma once

#include <cuda.h> /* CUtensorMap (types only; libcuda is never linked) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ptx_sm90.cuh"
#include "wgmma.cuh"

namespace coda_sm90 {

constexpr int kBM = 128;         /* rows per CTA tile (2 consumers x 64) */
constexpr int kBK = 64;          /* k per stage: 64 x 2 bytes = one 128B swizzle row */
constexpr int kThreads = 384;    /* producer + 2 consumer warpgroups */
constexpr int kChunkBytes = 64 * 64 * 2; /* one 64 x 64 16-bit chunk */

/* ------------------------------------------------------------ the seam */

/* One consumer thread's share of a 64 x BN accumulator (wgmma m64nBN layout):
 * value i sits at row row0 + 8*((i>>1)&1), column col0 + 8*(i>>2) + (i&1).
 * Values come in pairs (i even, i+1) on adjacent columns of one row. */
template <int BN>
struct AccFragment {
  static constexpr int kValues = BN / 2;
  float v[BN / 2];
  int row0; /* global row of values with (i>>1)&1 == 0 */
  int col0; /* global column of value 0 (always even) */
  int split; /* k-split of this fragment (0 unless split-K: then the sum over
              * splits is the product) */
  __device__ __forceinline__ int row(int i) const { return row0 + ((i >> 1) & 1) * 8; }
  __device__ __forceinline__ int col(int i) const { return col0 + (i >> 2) * 8 + (i & 1); }
};

/* Shared-memory scratch lent to the epilogue of one consumer warpgroup:
 * kEpiScratchBytes (1024-byte aligned), and a named barrier id for its 128
 * threads. The epilogue may use it freely; the mainloop never touches it. */
#ifndef CODA_EPI_SCRATCH_BYTES /* a generated epilogue may ask for more */
#define CODA_EPI_SCRATCH_BYTES 16384
#endif
constexpr int kEpiScratchBytes = CODA_EPI_SCRATCH_BYTES;
constexpr int kEpiRows = 64, kEpiCols = 32, kEpiPitch = 40; /* fp32 staging: conflict-free float2/float4 */
constexpr int kEpiBoxBytes = 8192; /* one TMA-store box: 64 rows x 128 bytes, 128B-swizzled */
struct EpiScratch {
  float *buf;
  int bar; /* named barrier id, 128 threads */
  int pre; /* 1: the functor's prefetch() ran for this fragment during its
            * mainloop (omitted in an initializer: 0) */
  uint64_t *ld_bar; /* two mbarriers (arrival count 1) for the epilogue's own
                     * TMA loads into buf, phase 0 at the first use; NULL
                     * where the caller provides none */
};
__device__ __forceinline__ void wg_sync(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}
/* Bulk (TMA) stores from shared memory; c0 is the contiguous coordinate.
 * Rows/columns outside the tensor are clipped by the hardware. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, const void *src, int c0,
                                             int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   (uint64_t)map),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
/* Bulk (TMA) reduce-add from shared memory: every element of the box inside
 * the tensor becomes D + smem, one fp32 addition rounded to nearest even
 * (for an fp32 map), performed by the memory system; out-of-range rows and
 * columns are clipped as for tma_store_2d. Completion as for the stores
 * (bulk_commit / bulk_wait_*). */
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap *map, const void *src, int c0,
                                                  int c1) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
          (uint64_t)map),
      "r"(smem_addr(src)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ uint32_t pack2(int out_type, float a, float b) {
  if (out_type == 0) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
  }
  __half2 h = __floats2half2_rn(a, b);
  return *(uint32_t *)&h;
}
/* Four 8x8 16-bit matrices to shared memory, one warp: register k of lane l
 * holds row l/4, columns 2*(l%4)..+1 of matrix k (the wgmma accumulator
 * layout of an 8x8 block); lane 8k+j gives the 16-byte aligned address of
 * row j of matrix k. */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

/* Output element types of the plain epilogue. */
enum OutType { kOutBF16 = 0, kOutF16 = 1, kOutF32 = 2 };

/* The plain epilogue: D[r, c] = alpha * acc (+ D[r, c] if accumulate), the
 * sum in fp32, rounded once (to nearest even) to D's type; alpha * acc is an
 * fp32 product of its own (never fused into the addition), so every store
 * path below gives the same bits. Values outside M x N are dropped. */
struct StoreEpilogue {
  CUtensorMap tmap_d; /* D as a TMA store target (valid when use_tma) */
  int use_tma;   /* D base, pitch, row 16-byte multiples, no split-K partials;
                  * not accumulating, or accumulating into fp32 D (reduce-add) */
  void *d;
  long long ldd; /* elements */
  int M, N;
  int out_type;  /* OutType */
  int accumulate;
  float alpha;
  int pair_ok;   /* ldd even and d aligned to two elements: paired stores */
  int vec_ok;    /* ldd % 4 == 0 and d aligned to four elements: 4-wide stores */
  long long split_stride; /* split-K: split s writes its partial at d + s * split_stride */
  int discard;   /* measurement only: 1 = store nothing, 2 = stage in shared memory only */

  /* Called by every consumer thread a few k-blocks before the end of a
   * tile's mainloop, for the fragment of rows wr0.. (the first 64-row block
   * of the consumer's tile), columns tc0..: an epilogue may start loading
   * its inputs into the scratch here. This one has none. */
  __device__ __forceinline__ void prefetch(int, int, const EpiScratch &) const {}

  /* Called once by every consumer thread after its last tile. */
  __device__ __forceinline__ void finish() const {
    if (use_tma && threadIdx.x % 128 == 0) bulk_wait_all();
  }

  template <int BN>
  __device__ __forceinline__ void operator()(const AccFragment<BN> &f, const EpiScratch &sc) const {
    if (discard == 1) return;
    if (use_tma) tma_path(f, sc);
    else staged_path(f, sc);
  }

  /* Bulk-store path: alpha * acc is rounded to D's type in registers and
   * written into a 64-row x 128-byte box in shared memory, 128B-swizzled
   * (16-byte unit u of row r sits at u ^ (r % 8): conflict-free), then one
   * thread stores the box with TMA; two boxes alternate so the store of one
   * overlaps the filling of the next. 16-bit D is written into the box
   * with stmatrix (8x8 blocks of the fragment, one 16-byte unit per row),
   * fp32 D with 64-bit stores.
   * Accumulating into fp32 D, the box holds alpha * acc in fp32 and the
   * thread issues a TMA reduce-add instead: D = D + alpha * acc, one fp32
   * addition rounded to nearest even, as the register path computes it, and
   * each element is reduced exactly once per GEMM (one owner, no split-K), so
   * the result is deterministic and equal to the register path's bits.
   * 16-bit D stays on the register path: a bf16/f16 reduce-add would round
   * alpha * acc to D's type before the addition (two roundings, not the
   * documented one). */
  template <int BN>
  __device__ __forceinline__ void tma_path(const AccFragment<BN> &f, const EpiScratch &sc) const {
    const int t = threadIdx.x % 128, lane = t % 32, warp = t / 32;
    const int lr = warp * 16 + lane / 4, lc = (lane % 4) * 2;
    const int row0 = f.row0 - lr, col0 = f.col0 - lc;
    const int r8 = lr & 7; /* same for rows lr and lr + 8 */
    uint8_t *stage = (uint8_t *)sc.buf;
    if (out_type == kOutF32) {
#pragma unroll
      for (int ch = 0; ch < BN / 32; ++ch) { /* 32 fp32 columns = 128 bytes */
        uint8_t *box = stage + (ch & 1) * kEpiBoxBytes;
        if (ch >= 2) {
          if (t == 0) bulk_wait_read<1>(); /* the store of chunk ch-2 has read its box */
          wg_sync(sc.bar);
        }
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int i = (ch * 4 + jj) * 4;
          const int byte = (lc + 8 * jj) * 4;
          const int off = (((byte >> 4) ^ r8) << 4) | (byte & 15);
          *(float2 *)(box + lr * 128 + off) = make_float2(alpha * f.v[i], alpha * f.v[i + 1]);
          *(float2 *)(box + (lr + 8) * 128 + off) =
              make_float2(alpha * f.v[i + 2], alpha * f.v[i + 3]);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        wg_sync(sc.bar);
        if (t == 0 && discard == 0) {
          if (accumulate) tma_reduce_add_2d(&tmap_d, box, col0 + ch * 32, row0);
          else tma_store_2d(&tmap_d, box, col0 + ch * 32, row0);
          bulk_commit();
        }
      }
    } else {
#pragma unroll
      for (int ch = 0; ch < BN / 64; ++ch) { /* 64 16-bit columns = 128 bytes */
        uint8_t *box = stage + (ch & 1) * kEpiBoxBytes;
        if (ch >= 2) {
          if (t == 0) bulk_wait_read<1>();
          wg_sync(sc.bar);
        }
        /* One stmatrix.x4 per 16 rows x 16 columns of the warp: matrices
         * (rows +0..7 | +8..15) x (columns 8jj.. | 8jj+8..), i.e. fragment
         * pairs i, i+2, i+4, i+6. Lane 8k+j addresses row j of matrix k:
         * a whole 16-byte swizzle unit, (jj + k/2) ^ j. */
        const uint32_t sbox = smem_addr(box) + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * 128;
#pragma unroll
        for (int jj = 0; jj < 8; jj += 2) {
          const int i = (ch * 8 + jj) * 4;
          stmatrix_x4(sbox + (((jj + (lane >> 4)) ^ (lane & 7)) << 4),
                      pack2(out_type, alpha * f.v[i], alpha * f.v[i + 1]),
                      pack2(out_type, alpha * f.v[i + 2], alpha * f.v[i + 3]),
                      pack2(out_type, alpha * f.v[i + 4], alpha * f.v[i + 5]),
                      pack2(out_type, alpha * f.v[i + 6], alpha * f.v[i + 7]));
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        wg_sync(sc.bar);
        if (t == 0 && discard == 0) {
          tma_store_2d(&tmap_d, box, col0 + ch * 64, row0);
          bulk_commit();
        }
      }
    }
    /* The scratch is free again once the stores have read it. */
    if (t == 0) bulk_wait_read<0>();
    wg_sync(sc.bar);
  }

  /* Register path (16-bit accumulate, split-K partials, unaligned D): the fragment
   * is written in 64 x 32 chunks through shared memory so that global
   * accesses are row-contiguous (a warp covers 4 rows x 32 columns) instead
   * of 8 rows x 8 bytes per instruction. */
  template <int BN>
  __device__ __forceinline__ void staged_path(const AccFragment<BN> &f, const EpiScratch &sc) const {
    const int t = threadIdx.x % 128, lane = t % 32, warp = t / 32;
    const int lr = warp * 16 + lane / 4, lc = (lane % 4) * 2; /* fragment-local (row, col) */
    const int row0 = f.row0 - lr, col0 = f.col0 - lc;        /* fragment origin */
    const long long base = (long long)f.split * split_stride;
#pragma unroll
    for (int ch = 0; ch < BN / kEpiCols; ++ch) {
#pragma unroll
      for (int jj = 0; jj < kEpiCols / 8; ++jj) {
        const int i = (ch * (kEpiCols / 8) + jj) * 4;
        float *p = sc.buf + lr * kEpiPitch + jj * 8 + lc;
        *(float2 *)p = make_float2(f.v[i], f.v[i + 1]);
        *(float2 *)(p + 8 * kEpiPitch) = make_float2(f.v[i + 2], f.v[i + 3]);
      }
      wg_sync(sc.bar);
#pragma unroll
      for (int q = 0; q < kEpiRows / 16; ++q) {
        const int r = t / 8 + 16 * q, c = (t % 8) * 4;
        const float4 v = *(const float4 *)(sc.buf + r * kEpiPitch + c);
        const int gr = row0 + r, gc = col0 + ch * kEpiCols + c;
        if (gr < M && discard == 0) store4(base, gr, gc, v);
      }
      wg_sync(sc.bar);
    }
  }

  __device__ __forceinline__ void store4(long long base, int r, int c, float4 v) const {
    if (c >= N) return;
    if (vec_ok && c + 3 < N) {
      const long long off = base + (long long)r * ldd + c;
      v.x = __fmul_rn(v.x, alpha); v.y = __fmul_rn(v.y, alpha);
      v.z = __fmul_rn(v.z, alpha); v.w = __fmul_rn(v.w, alpha);
      if (out_type == kOutF32) {
        float4 *p = (float4 *)((float *)d + off);
        if (accumulate) {
          const float4 o = *p;
          v.x += o.x; v.y += o.y; v.z += o.z; v.w += o.w;
        }
        *p = v;
      } else if (out_type == kOutBF16) {
        uint2 *p = (uint2 *)((__nv_bfloat16 *)d + off);
        if (accumulate) {
          uint2 o = *p;
          const float2 a = __bfloat1622float2(*(__nv_bfloat162 *)&o.x);
          const float2 b = __bfloat1622float2(*(__nv_bfloat162 *)&o.y);
          v.x += a.x; v.y += a.y; v.z += b.x; v.w += b.y;
        }
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 o;
        o.x = *(uint32_t *)&lo;
        o.y = *(uint32_t *)&hi;
        *p = o;
      } else {
        uint2 *p = (uint2 *)((__half *)d + off);
        if (accumulate) {
          uint2 o = *p;
          const float2 a = __half22float2(*(__half2 *)&o.x);
          const float2 b = __half22float2(*(__half2 *)&o.y);
          v.x += a.x; v.y += a.y; v.z += b.x; v.w += b.y;
        }
        __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        uint2 o;
        o.x = *(uint32_t *)&lo;
        o.y = *(uint32_t *)&hi;
        *p = o;
      }
    } else {
      store_pair(base, r, c, v.x, v.y);
      if (c + 2 < N) store_pair(base, r, c + 2, v.z, v.w);
    }
  }

  /* One value: D[r, c] = alpha * v (+ D[r, c]). */
  __device__ __forceinline__ void store1(int r, int c, float v) const {
    const long long off = (long long)r * ldd + c;
    v = __fmul_rn(v, alpha); /* rounded before the addition (no contraction) */
    if (out_type == kOutF32) {
      float *p = (float *)d + off;
      *p = accumulate ? *p + v : v;
    } else if (out_type == kOutBF16) {
      __nv_bfloat16 *p = (__nv_bfloat16 *)d + off;
      *p = __float2bfloat16_rn(accumulate ? __bfloat162float(*p) + v : v);
    } else {
      __half *p = (__half *)d + off;
      *p = __float2half_rn(accumulate ? __half2float(*p) + v : v);
    }
  }

  __device__ __forceinline__ void store_pair(long long base, int r, int c, float v0, float v1) const {
    const bool two = c + 1 < N;
    const long long off = base + (long long)r * ldd + c;
    v0 = __fmul_rn(v0, alpha);
    v1 = __fmul_rn(v1, alpha);
    if (out_type == kOutF32) {
      float *p = (float *)d + off;
      if (two && pair_ok) {
        float2 o = accumulate ? *(float2 *)p : make_float2(0.f, 0.f);
        *(float2 *)p = make_float2(o.x + v0, o.y + v1);
      } else {
        p[0] = accumulate ? p[0] + v0 : v0;
        if (two) p[1] = accumulate ? p[1] + v1 : v1;
      }
    } else if (out_type == kOutBF16) {
      __nv_bfloat16 *p = (__nv_bfloat16 *)d + off;
      if (two && pair_ok) {
        if (accumulate) {
          float2 o = __bfloat1622float2(*(__nv_bfloat162 *)p);
          v0 += o.x;
          v1 += o.y;
        }
        *(__nv_bfloat162 *)p = __floats2bfloat162_rn(v0, v1);
      } else {
        p[0] = __float2bfloat16_rn(accumulate ? __bfloat162float(p[0]) + v0 : v0);
        if (two) p[1] = __float2bfloat16_rn(accumulate ? __bfloat162float(p[1]) + v1 : v1);
      }
    } else {
      __half *p = (__half *)d + off;
      if (two && pair_ok) {
        if (accumulate) {
          float2 o = __half22float2(*(__half2 *)p);
          v0 += o.x;
          v1 += o.y;
        }
        *(__half2 *)p = __floats2half2_rn(v0, v1);
      } else {
        p[0] = __float2half_rn(accumulate ? __half2float(p[0]) + v0 : v0);
        if (two) p[1] = __float2half_rn(accumulate ? __half2float(p[1]) + v1 : v1);
      }
    }
  }
};

/* ------------------------------------------------------ PTX helpers
 * (mbarriers, TMA, clusters, wgmma fence/commit/wait, descriptors): ptx_sm90.cuh */

template <int BN, bool F16, int TA, int TB>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t da, uint64_t db) {
  if constexpr (BN == 256) {
    if constexpr (F16) wgmma_m64n256k16_f16<TA, TB>(d, da, db);
    else wgmma_m64n256k16_bf16<TA, TB>(d, da, db);
  } else {
    static_assert(BN == 128, "BN must be 128 or 256");
    if constexpr (F16) wgmma_m64n128k16_f16<TA, TB>(d, da, db);
    else wgmma_m64n128k16_bf16<TA, TB>(d, da, db);
  }
}

/* Grouped rasterization: tile t -> (row tile, column tile). Groups of
 * group_m row tiles; inside a group, row tiles vary fastest. */
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int group_m, int &tm,
                                            int &tn) {
  const int per_group = group_m * tiles_n;
  const int g = t / per_group;
  const int first = g * group_m;
  const int gm = min(tiles_m - first, group_m);
  const int r = t - g * per_group;
  tm = first + r % gm;
  tn = r / gm;
}

template <int BN, int STAGES>
constexpr size_t smem_bytes() {
  return (size_t)STAGES * (kBM + BN) * kBK * 2 + 2 * kEpiScratchBytes +
         (2 * STAGES + 4) * sizeof(uint64_t) + 1024;
}

/* ------------------------------------------------------------ the kernel */

/* Named barriers (id 0 is __syncthreads) ordering the two pingpong
 * consumers: consumer c waits on kOrderBar + c before its mainloop. */
constexpr int kOrderBar = 1;
constexpr int kEpiBar = 3; /* consumer c's epilogue uses kEpiBar + c */
/* (named_sync, named_arrive: ptx_sm90.cuh) */

/* PING: pingpong schedule (each consumer owns whole 128 x BN tiles, the two
 * alternate; one's epilogue overlaps the other's MMA), else cooperative
 * (both consumers share each tile, 64 rows each).
 * TA: A stored K x M (trans_a = T). TB: B stored N x K (trans_b = T).
 * F16: operands are fp16 (else bf16).
 * CM: CTAs per cluster along M (1 or 2). With 2, the two CTAs of a cluster
 * take the row tiles 2i and 2i+1 of one column tile: each loads its own A
 * and half of the shared B box, multicast into both CTAs (the B map's
 * K-major box is then BN/2 rows). Launch with a cluster dimension of CM. */
template <int BN, int STAGES, bool PING, bool TA, bool TB, bool F16, class Epi, int CM = 1>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                int M, int N, int K, int group_m, int splits, int kbs,
                const __grid_constant__ Epi epi) {
  static_assert(CM == 1 || CM == 2, "cluster size along M must be 1 or 2");
  constexpr uint32_t A_BYTES = kBM * kBK * 2, B_BYTES = BN * kBK * 2;
  constexpr int A_MN = TA ? 1 : 0;  /* wgmma transpose immediates */
  constexpr int B_MN = TB ? 0 : 1;
  /* MN-major: LBO = next 64-wide chunk along m/n, SBO = next 8 k-rows. */
  constexpr uint32_t MN_LBO = kChunkBytes, MN_SBO = 1024;
  extern __shared__ uint8_t smem_raw[];
  /* 128B-swizzled buffers must sit on 1024-byte boundaries. */
  uint8_t *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t *sA = smem;
  uint8_t *sB = smem + STAGES * A_BYTES;
  float *epi_scratch = (float *)(sB + STAGES * B_BYTES); /* 2 x kEpiScratchBytes */
  uint64_t *full = (uint64_t *)((uint8_t *)epi_scratch + 2 * kEpiScratchBytes);
  uint64_t *empty = full + STAGES;
  uint64_t *epi_bar = empty + STAGES; /* two per consumer warpgroup */

  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + BN - 1) / BN;
  /* A cluster's work is a group of CM row tiles (one per CTA) of one column
   * tile. With an odd number of row tiles the last group's second tile is
   * past M: that CTA still loads its half of B (its partner waits for it),
   * loads its partner's A tile in place of its own, computes, and stores
   * nothing. */
  const int groups_m = (tiles_m + CM - 1) / CM;
  const int num_tiles = groups_m * tiles_n;
  /* the rasterization group, counted in cluster row groups */
  const int group_g = CM > 1 ? (group_m + 1) / CM : group_m;
  /* Work unit u = (tile group u % num_tiles, k-split u / num_tiles); every
   * unit runs kbs k-blocks (the last split's tail past K is zero-filled).
   * Both CTAs of a cluster walk the same units (cluster c: c, c + clusters,
   * ...), so their rings advance in step. */
  const int num_units = num_tiles * splits;
  const int first_unit = blockIdx.x / CM, unit_step = gridDim.x / CM;
  const int crank = CM > 1 ? (int)cluster_ctarank() : 0;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    /* A cluster kernel launched without its cluster would multicast into
     * CTAs that do not exist. */
    if (CM > 1 && cluster_nctarank() != (uint32_t)CM) __trap();
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      /* one arrival per consuming warpgroup of each CTA of the cluster: the
       * stage is refilled in all of them by one multicast */
      mbar_init(&empty[s], (PING ? 1 : 2) * CM);
    }
    for (int i = 0; i < 4; ++i) mbar_init(&epi_bar[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  /* The partner's barriers must be initialised before anything arrives on
   * them or multicasts into them. */
  if constexpr (CM > 1) cluster_sync();
  else __syncthreads();

  if (wg == 0) {
    /* Producer: few registers, one issuing thread. */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&tmA) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&tmB) : "memory");
      int stage = 0;
      uint32_t phase = 0;
      for (int u = first_unit; u < num_units; u += unit_step) {
        int gm, tn;
        tile_coords(u % num_tiles, groups_m, tiles_n, group_g, gm, tn);
        /* past M: the partner's A (in range, never stored) */
        const int tm = min(gm * CM + crank, tiles_m - 1);
        const int m0 = tm * kBM, n0 = tn * BN, kb0 = (u / num_tiles) * kbs;
        for (int kb = 0; kb < kbs; ++kb) {
          /* A fresh barrier counts as having completed the phase before
           * phase 0, so the first pass over the ring does not block. */
          if constexpr (CM > 1) mbar_wait_cluster(&empty[stage], phase ^ 1);
          else mbar_wait(&empty[stage], phase ^ 1);
          /* all of B arrives here: this CTA's half and the partner's */
          mbar_expect_tx(&full[stage], A_BYTES + B_BYTES);
          const int k0 = (kb0 + kb) * kBK;
          uint8_t *a = sA + stage * A_BYTES, *b = sB + stage * B_BYTES;
          if constexpr (!TA) {
            tma_load_2d(a, &tmA, &full[stage], k0, m0);
          } else {
#pragma unroll
            for (int c = 0; c < kBM / 64; ++c)
              tma_load_2d(a + c * kChunkBytes, &tmA, &full[stage], m0 + 64 * c, k0);
          }
          if constexpr (CM == 1) {
            if constexpr (TB) {
              tma_load_2d(b, &tmB, &full[stage], k0, n0);
            } else {
#pragma unroll
              for (int c = 0; c < BN / 64; ++c)
                tma_load_2d(b + c * kChunkBytes, &tmB, &full[stage], n0 + 64 * c, k0);
            }
          } else {
            /* This CTA's 1/CM of B, to every CTA of the cluster. K-major:
             * rows crank*BN/CM.. (one box of the BN/CM-row map); MN-major:
             * 64-wide chunks crank*BN/64/CM.. */
            constexpr uint16_t kAll = (uint16_t)((1u << CM) - 1);
            if constexpr (TB) {
              constexpr int R = BN / CM;
              tma_load_2d_mc(b + crank * R * 128, &tmB, &full[stage], k0, n0 + crank * R, kAll);
            } else {
              constexpr int C = BN / 64 / CM;
#pragma unroll
              for (int i = 0; i < C; ++i) {
                const int c = crank * C + i;
                tma_load_2d_mc(b + c * kChunkBytes, &tmB, &full[stage], n0 + 64 * c, k0, kAll);
              }
            }
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    /* Consumers: the accumulators need the registers. */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1;
    const int t128 = threadIdx.x % 128, warp = t128 / 32, lane = t128 % 32;
    /* m64 blocks per consumer: pingpong covers all 128 rows, cooperative
     * its 64-row half (rows cw*64 ..). */
    constexpr int MI = PING ? 2 : 1;
    const int row_off = PING ? 0 : cw * 64;
    AccFragment<BN> frag[MI];
    const EpiScratch scratch = {epi_scratch + cw * (kEpiScratchBytes / 4), kEpiBar + cw, 0, epi_bar + 2 * cw};
    /* A stage goes back to the producers of every CTA of the cluster (each
     * refills part of it here). */
    auto release = [&](int s) {
      if constexpr (CM > 1) {
#pragma unroll
        for (int r = 0; r < CM; ++r) mbar_arrive_cluster(&empty[s], (uint32_t)r);
      } else {
        mbar_arrive(&empty[s]);
      }
    };
    /* j counts this CTA's units (unit first_unit + j*unit_step). Every unit
     * takes kbs ring slots, so slot = j*kbs + kb fixes stage and phase for
     * either schedule (pingpong consumers skip the other's units). */
    for (int j = PING ? cw : 0;; j += PING ? 2 : 1) {
      const int u = first_unit + j * unit_step;
      if (u >= num_units) break;
      int gm, tn;
      tile_coords(u % num_tiles, groups_m, tiles_n, group_g, gm, tn);
      const int tm = gm * CM + crank;
      const bool store = CM == 1 || tm < tiles_m; /* uniform per CTA */
      /* Pingpong: start this tile's mainloop only after the other consumer
       * has issued all of the previous tile's MMAs. This orders the two
       * consumers' waits on the ring (parity waits are ambiguous across
       * two phases) and keeps their MMAs from interleaving. */
      if (PING && j > 0) named_sync(kOrderBar + cw);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) frag[mi].v[i] = 0.f;
      int prev = -1;
      /* the epilogue's early loads start this many k-blocks before the end */
      const int kb_pre = kbs > 4 ? kbs - 4 : 0;
      for (int kb = 0; kb < kbs; ++kb) {
        const uint32_t slot = (uint32_t)j * (uint32_t)kbs + (uint32_t)kb;
        const int stage = (int)(slot % STAGES);
        mbar_wait(&full[stage], (slot / STAGES) & 1);
        const uint32_t a = smem_addr(sA + stage * A_BYTES + row_off * 128);
        const uint32_t b = smem_addr(sB + stage * B_BYTES);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) fence_regs(frag[mi].v);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          const uint64_t db = TB ? smem_desc(b + kk * 32, 16, 1024)
                                 : smem_desc(b + kk * 2048, MN_LBO, MN_SBO);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            /* m64 block mi starts 64 rows (K-major) or one 64-wide chunk
             * (MN-major) further: 8192 bytes either way. */
            const uint32_t am = a + mi * kChunkBytes;
            const uint64_t da = TA ? smem_desc(am + kk * 2048, MN_LBO, MN_SBO)
                                   : smem_desc(am + kk * 32, 16, 1024);
            wgmma_tile<BN, F16, A_MN, B_MN>(frag[mi].v, da, db);
          }
        }
        wgmma_commit();
        /* Keep one k-block in flight; the one before it is done, so its
         * buffer goes back to the producer. */
        wgmma_wait<1>();
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) fence_regs(frag[mi].v);
        if (prev >= 0 && t128 == 0) release(prev);
        prev = stage;
        if (kb == kb_pre && store) epi.prefetch(tm * kBM + row_off, tn * BN, scratch);
      }
      /* Pingpong: all MMAs of this tile are issued; the other consumer may
       * start (only if it has a next tile, so no arrival is left pending). */
      if (PING && first_unit + (j + 1) * unit_step < num_units) named_arrive(kOrderBar + (1 - cw));
      wgmma_wait<0>();
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) fence_regs(frag[mi].v);
      if (prev >= 0 && t128 == 0) release(prev);
      if (!store) continue;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        frag[mi].row0 = tm * kBM + row_off + mi * 64 + warp * 16 + lane / 4;
        frag[mi].col0 = tn * BN + (lane % 4) * 2;
        frag[mi].split = u / num_tiles;
        EpiScratch sc = scratch;
        sc.pre = mi == 0; /* prefetch() covered the first fragment */
        epi(frag[mi], sc);
      }
    }
    epi.finish();
  }
  /* No CTA may exit while its partner can still arrive on its barriers (or,
   * with a slower consumer, still be owed multicast bytes). */
  if constexpr (CM > 1) cluster_sync();
}

/* Launch arguments shared by every instantiation. */
struct GemmLaunch {
  CUtensorMap a, b;
  int M, N, K;
  int group_m;
  int splits, kbs; /* k-splits and k-blocks per work unit */
  int grid;
  cudaStream_t stream;
  StoreEpilogue epi;
};

template <int BN, int STAGES, bool PING, bool TA, bool TB, bool F16, int CM = 1>
cudaError_t launch_gemm(const GemmLaunch &p) {
  auto kern = gemm_kernel<BN, STAGES, PING, TA, TB, F16, StoreEpilogue, CM>;
  constexpr size_t smem = smem_bytes<BN, STAGES>();
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  if constexpr (CM == 1) {
    kern<<<p.grid, kThreads, smem, p.stream>>>(p.a, p.b, p.M, p.N, p.K, p.group_m, p.splits, p.kbs,
                                                   p.epi);
    return cudaGetLastError();
  } else {
    /* p.grid is a multiple of CM. Clusters must fit in one GPC, so fewer of
     * them than SMs / CM may be resident at once: a persistent grid larger
     * than that would run a second, mostly idle wave. */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CM;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)p.grid, 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = p.stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int max_clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&max_clusters, kern, &cfg) != cudaSuccess)
      (void)cudaGetLastError(); /* no clamp; the launch reports real problems */
    else if (max_clusters > 0 && max_clusters * CM < p.grid)
      cfg.gridDim.x = (unsigned)(max_clusters * CM);
    e = cudaLaunchKernelEx(&cfg, kern, p.a, p.b, p.M, p.N, p.K, p.group_m, p.splits, p.kbs, p.epi);
    return e != cudaSuccess ? e : cudaGetLastError();
  }
}

}  // namespace coda_sm90
