/* The sm_80 GEMM mainloop: D = epilogue(op(A) * op(B)) with mma.sync
 * m16n8k16 (bf16/f16 in, fp32 accumulators), ldmatrix and a multi-stage
 * cp.async pipeline; no wgmma, TMA, mbarriers, clusters or setmaxnreg, so it
 * runs on every GPU from sm_80 on (A100, Ada, Hopper with the path forced).
 * Compiled only by NVRTC, for the device's own architecture, with a
 * generated epilogue functor (epi_codegen.c), as gemm_sm90.cuh is.
 *
 * One CTA computes one BM x BN tile (BN = 128, BM = 64 or 128: one or two
 * groups of 4 warps), non-persistent, tiles in grouped order (group_m row
 * tiles sweep the column tiles) for L2 reuse.
 *
 * The fragment seam: warp w of a group owns the 16 x BN strip of rows
 * 16w..16w+15 of the group's 64 rows and accumulates it with BN/8 mma.sync
 * m16n8k16 per k16 step. The m16n8 accumulator of n-tile j gives lane l
 * rows l/4 and l/4 + 8, columns 8j + 2(l%4) + {0, 1}: c0 c1 on the first
 * row, c2 c3 on the second. Stored as v[4j + 0..3], value i then sits at
 * row row0 + 8*((i>>1)&1), column col0 + 8*(i>>2) + (i&1) with
 * row0 = 16w + l/4, col0 = 2(l%4): the wgmma m64nBN layout of
 * gemm_sm90.cuh's AccFragment. So the generated functor, its quad and
 * warp reductions and its staging run unchanged on this fragment.
 *
 * Shared memory per stage: A then B, each padded by 16 bytes per row so
 * that the 8 row addresses of an ldmatrix (and the cp.async writes) fall in
 * different banks:
 *  - K-major operand (A with trans_a = N, B with trans_b = T): one row per
 *    m (n) of BK k, pitch 2*BK + 16 bytes; fragments by ldmatrix;
 *  - MN-major operand (A with trans_a = T, B with trans_b = N): one row per
 *    k of BM (BN) values, pitch 2*BM + 16 bytes; fragments by
 *    ldmatrix.trans (the 8x8 blocks transposed on the way to registers).
 * Rows, columns and k past M, N, K are zero-filled by cp.async (its
 * source size below 16 bytes), so ragged shapes need no other code; the
 * epilogue clips its stores. After the last k-block the pipeline buffers
 * are free and lent to the epilogue as its scratch (one per group).
 * tests/sm80_fragment_model.py restates the index math below and checks it
 * against a matrix product: change both together. */
#pragma once

#include <stdint.h>

namespace coda_sm80 {

constexpr int kBN = 128;      /* columns per CTA tile (the functor's partial tiling) */
constexpr int kBK = 32;       /* k per stage */
constexpr int kGroupThreads = 128;

/* ------------------------------------------------------------ the seam */

/* One thread's share of a 64 x BN accumulator block (layout above, as
 * gemm_sm90.cuh's AccFragment). */
template <int BN>
struct AccFragment {
  static constexpr int kValues = BN / 2;
  float v[BN / 2];
  int row0;  /* global row of values with (i>>1)&1 == 0 */
  int col0;  /* global column of value 0 (always even) */
  int split; /* always 0 (no split-K here) */
  __device__ __forceinline__ int row(int i) const { return row0 + ((i >> 1) & 1) * 8; }
  __device__ __forceinline__ int col(int i) const { return col0 + (i >> 2) * 8 + (i & 1); }
};

#ifndef CODA_EPI_SCRATCH_BYTES /* a generated epilogue may ask for more */
#define CODA_EPI_SCRATCH_BYTES 16384
#endif
constexpr int kEpiScratchBytes = CODA_EPI_SCRATCH_BYTES;
/* The epilogue's shared scratch and named barrier (128 threads) of one
 * group; ld_bar is always NULL (no TMA loads here), pre always 0 (the
 * functor fetches its first chunk itself). */
struct EpiScratch {
  float *buf;
  int bar;
  int pre;
  uint64_t *ld_bar;
};
__device__ __forceinline__ void wg_sync(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

/* ------------------------------------------------------------ PTX */

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
/* 16 bytes to shared memory; the bytes from src_bytes (0..16) on are zero. */
__device__ __forceinline__ void cp16_zfill(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* Four 8x8 16-bit matrices; lane 8i+j gives the address of row j of
 * matrix i, register i of lane l gets row l/4, columns 2(l%4)..+1 of
 * matrix i (TRANS: column l/4, rows 2(l%4)..+1). */
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* d += a * b on one m16n8k16 block. */
template <bool F16>
__device__ __forceinline__ void mma16816(float *d, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (F16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ------------------------------------------------------------ layout */

/* Row pitch and bytes of one operand's stage buffer: `ext` rows (m or n)
 * of BK when K-major, BK rows of `ext` when MN-major. */
template <bool KMAJOR, int EXT>
__host__ __device__ constexpr int pitch() { return KMAJOR ? 2 * kBK + 16 : 2 * EXT + 16; }
template <bool KMAJOR, int EXT>
__host__ __device__ constexpr int operand_bytes() { return (KMAJOR ? EXT : kBK) * pitch<KMAJOR, EXT>(); }
/* The larger of the two layouts, so that the size depends on BM, BN and
 * STAGES only (the host computes it without the layout). */
template <int EXT>
__host__ __device__ constexpr int operand_max() {
  return operand_bytes<true, EXT>() > operand_bytes<false, EXT>() ? operand_bytes<true, EXT>()
                                                                  : operand_bytes<false, EXT>();
}
template <int BM, int BN>
__host__ __device__ constexpr int stage_bytes() { return operand_max<BM>() + operand_max<BN>(); }

template <int BM, int BN, int STAGES>
__host__ __device__ constexpr size_t smem_bytes() {
  /* the pipeline, or the groups' scratches that reuse it, + alignment slack */
  return (size_t)(STAGES * stage_bytes<BM, BN>() > (BM / 64) * kEpiScratchBytes
                      ? STAGES * stage_bytes<BM, BN>()
                      : (BM / 64) * kEpiScratchBytes) + 128;
}

/* Grouped rasterization, as in gemm_sm90.cuh. */
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

/* One operand's k-block [k0, k0 + kBK) of rows r0.. (m or n, R of them)
 * into its stage buffer at s by all NT threads, 16 bytes per cp.async.
 * K-major: global row r holds k contiguous; MN-major: global row k holds
 * m (n) contiguous. ld is a multiple of 8 values and the base is 16-byte
 * aligned (checked by the host), so a vector never straddles a row end
 * unaligned; the part past the row's extent is zero-filled. */
template <bool KMAJOR, int EXT, int NT>
__device__ __forceinline__ void load_operand(uint32_t s, const uint16_t *g, long long ld, int r0,
                                             int k0, int R, int K) {
  constexpr int P = pitch<KMAJOR, EXT>();
  constexpr int VPR = (KMAJOR ? kBK : EXT) / 8; /* vectors per stored row */
  constexpr int NV = (KMAJOR ? EXT : kBK) * VPR;
  static_assert(NV % NT == 0, "every thread copies the same number of vectors");
#pragma unroll
  for (int i = 0; i < NV / NT; ++i) {
    const int v = (int)threadIdx.x + i * NT, row = v / VPR, u = v % VPR;
    /* (outer, inner): the stored row's global index and its first value */
    const int outer = KMAJOR ? r0 + row : k0 + row, inner = KMAJOR ? k0 + 8 * u : r0 + 8 * u;
    const int olim = KMAJOR ? R : K, ilim = KMAJOR ? K : R;
    const int n = outer < olim && inner < ilim ? min(8, ilim - inner) : 0;
    const uint16_t *src = n ? g + (long long)outer * ld + inner : g;
    cp16_zfill(s + row * P + u * 16, src, 2 * n);
  }
}

/* ------------------------------------------------------------ the kernel */

/* BM: rows per CTA tile (64 or 128: BM/64 groups of 4 warps). TA: A stored
 * K x M (trans_a = T). TB: B stored N x K (trans_b = T). F16: fp16 operands
 * (else bf16). The epilogue runs once per group on its 64 x BN fragment;
 * groups of rows past M still call it (it clips), as on sm_90. */
template <int BM, int BN, int STAGES, bool TA, bool TB, bool F16, class Epi>
__global__ void __launch_bounds__(BM * 2, 1)
    gemm_kernel(const void *A, long long lda, const void *B, long long ldb, int M, int N, int K,
                int group_m, const __grid_constant__ Epi epi) {
  static_assert(BM == 64 || BM == 128, "BM is 64 or 128");
  static_assert(BN % 16 == 0 && STAGES >= 2, "BN a multiple of 16, two stages or more");
  constexpr int NT = BM * 2;
  constexpr bool AK = !TA, BK_ = TB; /* K-major operands */
  constexpr int PA = pitch<AK, BM>(), PB = pitch<BK_, BN>();
  constexpr int SA = operand_max<BM>(), SS = stage_bytes<BM, BN>();
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = smem_raw + ((128 - (smem_u32(smem_raw) & 127)) & 127);
  const uint32_t s0 = smem_u32(smem);

  int tm, tn;
  tile_coords(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, group_m, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int gi = threadIdx.x / kGroupThreads, warp = (threadIdx.x % kGroupThreads) / 32;
  const int lane = threadIdx.x % 32;
  const int kbs = (K + kBK - 1) / kBK;
  const uint16_t *gA = (const uint16_t *)A, *gB = (const uint16_t *)B;
  auto load = [&](int kb, int stage) {
    const uint32_t s = s0 + stage * SS;
    load_operand<AK, BM, NT>(s, gA, lda, m0, kb * kBK, M, K);
    load_operand<BK_, BN, NT>(s + SA, gB, ldb, n0, kb * kBK, N, K);
  };

  AccFragment<BN> f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) f.v[i] = 0.f;
  /* ldmatrix lane addressing: lane 8i + j gives row j of matrix i */
  const int mi = lane >> 3, mj = lane & 7;
  const int wm = gi * 64 + warp * 16; /* the warp's first row in the tile */

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < kbs) load(s, s);
    cp_commit(); /* (empty groups keep the count uniform) */
  }
  for (int kb = 0; kb < kbs; ++kb) {
    /* k-block kb has landed for every thread; every warp is done with the
     * stage the next load overwrites (read at kb - 1) */
    cp_wait<STAGES - 2>();
    __syncthreads();
    if (kb + STAGES - 1 < kbs) load(kb + STAGES - 1, (kb + STAGES - 1) % STAGES);
    cp_commit();
    const uint32_t sa = s0 + (kb % STAGES) * SS, sb = sa + SA;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      /* A, matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) in the a0..a3 order */
      uint32_t a[4];
      if constexpr (AK) ldsm_x4<false>(a, sa + (wm + mj + 8 * (mi & 1)) * PA + (kk * 16 + 8 * (mi >> 1)) * 2);
      else ldsm_x4<true>(a, sa + (kk * 16 + mj + 8 * (mi >> 1)) * PA + (wm + 8 * (mi & 1)) * 2);
#pragma unroll
      for (int p = 0; p < BN / 16; ++p) {
        /* B of n-tiles 2p, 2p+1: (b0, b1) of each, i.e. matrices
         * (n 0-7 | 8-15) x (k 0-7 | 8-15) with k varying first */
        uint32_t b[4];
        if constexpr (BK_) ldsm_x4<false>(b, sb + (p * 16 + mj + 8 * (mi >> 1)) * PB + (kk * 16 + 8 * (mi & 1)) * 2);
        else ldsm_x4<true>(b, sb + (kk * 16 + mj + 8 * (mi & 1)) * PB + (p * 16 + 8 * (mi >> 1)) * 2);
        mma16816<F16>(&f.v[8 * p], a, b[0], b[1]);
        mma16816<F16>(&f.v[8 * p + 4], a, b[2], b[3]);
      }
    }
  }
  /* the pipeline is drained and read: its memory becomes the scratch */
  cp_wait<0>();
  __syncthreads();
  f.row0 = m0 + wm + lane / 4;
  f.col0 = n0 + (lane % 4) * 2;
  f.split = 0;
  const EpiScratch sc = {(float *)(smem + gi * kEpiScratchBytes), 1 + gi, 0, nullptr};
  epi(f, sc);
  epi.finish();
}

}  // namespace coda_sm80
