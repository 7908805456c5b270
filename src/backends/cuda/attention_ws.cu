/* The warp-specialized attention kernels (head_dim 64, 128; the defaults
 * there): persistent CTAs of one TMA producer warpgroup and two wgmma
 * consumer warpgroups, tiles in mbarrier-guarded rings. The forward
 * (fwd_ws_kernel, optionally pingpong), the dQ pass (bwd_dq_ws_kernel) and
 * the dK/dV pass (bwd_dkdv_ws_kernel), the TMA maps and persistent grids
 * of their launchers, and their named variants. The tile math is that of
 * the cp.async-fed wgmma kernels (attention_wg.cuh). */
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */

#include "backends/cuda/attention_wg.cuh"

namespace coda_attn {

/* ------------------------- forward, warp-specialized (sm_90a, TMA + wgmma) */

/* (tma_load_3d: ptx_sm90.cuh) */
/* Loads an R-row tile of one head (columns col0..col0+HD) into the wswz
 * layout: one box per 64-column panel. */
template <int R, int HD>
__device__ __forceinline__ void tma_tile(bf16 *tile, const CUtensorMap *map, uint64_t *bar,
                                         int col0, int row0, int b) {
  coda_sm90::mbar_expect_tx(bar, R * HD * (int)sizeof(bf16));
#pragma unroll
  for (int pn = 0; pn < HD / 64; ++pn) coda_sm90::tma_load_3d(tile + pn * R * 64, map, bar, col0 + pn * 64, row0, b);
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
/* One arrival per warp (the barriers count warps), for stages that TMA
 * refills. The __syncwarp orders the other lanes' reads of the stage
 * before lane 0's release. Called by whole warps only. */
__device__ __forceinline__ void warp_arrive(uint64_t *bar) {
  __syncwarp();
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
        for (int j = first_kv_block(p, qb * BM, KT); j <= qb; ++j, ++n) {
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
    const int j0 = first_kv_block(p, q0, KT); /* the producer's first K/V tile */
    const int r0 = q0 + 64 * cw + warp * 16 + (lane >> 2); /* rows r0, r0 + 8 */
    /* tile j needs the element mask: the diagonal, or a window edge inside
     * it for this warpgroup's rows. A tile wholly below this warpgroup's
     * windows (but not the other's) runs masked: its rows keep max -inf
     * and P = 0 (online_softmax), so the ring's order stays as it is. */
    const int rmax = q0 + 64 * cw + 63;
    auto needs_mask = [&](int j) { return j == qb || crosses_window(p, j * KT, rmax); };

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
      wgmma_commit();
    };
    auto issue_pv = [&](const bf16 *tv) {
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks)
        wg_rs_t<HD>(o, pa[ks], smem_desc(smem_addr(tv) + ks * 2048, KT * 128, 1024));
      wgmma_commit();
    };

    coda_sm90::mbar_wait(q_full, (uint32_t)tc & 1);
    int st = n % STAGES;
    uint32_t ph = (uint32_t)(n / STAGES) & 1;
    coda_sm90::mbar_wait(&k_full[st], ph);
    turn_begin();
    wgmma_fence();
    issue_s(sK + st * KT * HD);
    turn_end(false);
    wgmma_wait<0>();
    fence_regs(s);
    warp_arrive(&k_empty[st]);
    if (j0 == qb) warp_arrive(q_empty);
    if (needs_mask(j0)) mask_causal<KT>(s, j0 * KT, r0, lane, p.win);
    float alpha[2];
    online_softmax<KT>(s, m, l, alpha, true, p.scale2);
    pack_a<KT>(s, pa);

    for (int j = j0 + 1; j < nkb; ++j) {
      const int pst = st;
      const uint32_t pph = ph;
      ++n;
      st = n % STAGES;
      ph = (uint32_t)(n / STAGES) & 1;
      coda_sm90::mbar_wait(&k_full[st], ph);
      coda_sm90::mbar_wait(&v_full[pst], pph);
      turn_begin();
      fence_regs(o);
      wgmma_fence();
      issue_s(sK + st * KT * HD);
      issue_pv(sV + pst * KT * HD);
      turn_end(false);
      wgmma_wait<1>();
      fence_regs(s);
      warp_arrive(&k_empty[st]);
      if (j == nkb - 1) warp_arrive(q_empty);
      if (needs_mask(j)) mask_causal<KT>(s, j * KT, r0, lane, p.win);
      online_softmax<KT>(s, m, l, alpha, false, p.scale2);
      wgmma_wait<0>();
      fence_regs(o);
      warp_arrive(&v_empty[pst]);
      rescale_rows<HD>(o, alpha); /* O = alpha (O + P V) */
      pack_a<KT>(s, pa);
    }
    coda_sm90::mbar_wait(&v_full[st], ph);
    turn_begin();
    fence_regs(o);
    wgmma_fence();
    issue_pv(sV + st * KT * HD);
    turn_end(last_tile);
    wgmma_wait<0>();
    fence_regs(o);
    warp_arrive(&v_empty[st]);
    ++n;

    store_out_rows<HD>(p, o, m, l, r0, b, h, lane);
  }
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
        for (int j = first_kv_block(p, q0, KT); j < nkb; ++j, ++n) {
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
    /* K/V tiles this warpgroup computes: not wholly after its rows nor
     * wholly below their windows (a contiguous run of the producer's) */
    auto live = [&](int j) { return j * KT <= qw + 63 && !below_window(p, j * KT, KT, qw); };
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
    for (int j = first_kv_block(p, q0, KT); j < nkb; ++j) {
      const int st = n % STAGES;
      const uint32_t ph = (uint32_t)(n / STAGES) & 1;
      ++n;
      coda_sm90::mbar_wait(&kv_full[st], ph);
      if (!live(j)) { /* keys wholly after this warpgroup's rows or below their windows */
        warp_arrive(&kv_empty[st]);
        continue;
      }
      if (!issued) {
        wgmma_fence();
        issue_sdp(st);
        wgmma_commit();
      }
      wgmma_wait<0>();
      fence_regs(s);
      fence_regs(dp);
      fence_regs(dq);
      if (pend >= 0) warp_arrive(&kv_empty[pend]);
      uint32_t da[KT / 16][4];
      dq_ds<KT>(s, dp, Lr, Dr, j * KT, r0, lane, p.scale2, p.win, da);
      wgmma_fence();
      const bf16 *tk = sK + st * KT * HD;
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks)
        wg_rs_t<HD>(dq, da[ks], smem_desc(smem_addr(tk) + ks * 2048, KT * 128, 1024));
      issued = j + 1 < nkb && live(j + 1);
      if (issued) {
        const int nst = n % STAGES;
        coda_sm90::mbar_wait(&kv_full[nst], (uint32_t)(n / STAGES) & 1);
        issue_sdp(nst);
      }
      wgmma_commit();
      pend = st;
    }
    wgmma_wait<0>();
    fence_regs(dq);
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
      coda_sm90::mbar_init(&q_empty[s], 8 * 32); /* every consumer thread */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int nkb = (p.T + BN - 1) / BN;
  const int hb_n = p.Hkv * p.B, ntiles = nkb * hb_n, grp = p.Hq / p.Hkv;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < 2 && (warp == 1 || lane == 0)) {
      int n = 0, tc = 0;
      for (int k = 0, t = snake_tile(0); t < ntiles; t = snake_tile(++k), ++tc) {
        const int kb = t / hb_n, hb = t % hb_n; /* low key blocks (the most work) first */
        const int g = hb % p.Hkv, b = hb / p.Hkv, k0 = kb * BN, qb0 = k0 / BQ;
        const int per_head = q_tile_end(p, k0 + BN - 1, BQ) - qb0; /* as the consumers' */
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
    /* query tiles from the diagonal to the last one whose windows hold
     * these keys */
    const int per_head = q_tile_end(p, k0 + BN - 1, BQ) - qb0;
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
      /* else every query precedes this warpgroup's keys or is past their windows */
      if (qt + BQ - 1 >= kw && !below_window(p, kw + 63, 1, qt)) {
        const bf16 *tq = sQ + st * BQ * HD, *to = sO + st * BQ * HD;
        const float *tl = sL + st * BQ, *td = sD + st * BQ;
        wgmma_fence();
        issue_sdp(st);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        fence_regs(dp);
        uint32_t pa[BQ / 16][4], da[BQ / 16][4];
        dkdv_pds<BQ>(s, dp, tl, td, qt, key0, p.T, lane, p.scale2, p.win, pa, da);
        fence_regs(dv);
        fence_regs(dk);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BQ / 16; ++ks)
          wg_rs_t<HD>(dv, pa[ks], smem_desc(smem_addr(to) + ks * 2048, BQ * 128, 1024));
#pragma unroll
        for (int ks = 0; ks < BQ / 16; ++ks)
          wg_rs_t<HD>(dk, da[ks], smem_desc(smem_addr(tq) + ks * 2048, BQ * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(dv);
        fence_regs(dk);
      }
      /* Every thread releases its own reads of sL/sD, which the producer's
       * plain stores overwrite next. (One lane after a __syncwarp is as
       * ordered in the PTX memory model, but racecheck does not follow
       * that chain through bar.warp.sync and reported the next stores as
       * hazards.) */
      coda_sm90::mbar_arrive(&q_empty[st]);
    }

    store_dkdv_rows<ROPE, BN, HD>(p, dk, dv, key0, k0, b, g, lane, sK, sV);
    warp_arrive(kv_empty); /* after the stores: the RoPE stores read sK, sV */
  }
}

/* ------------------------------------------------------------ launchers */

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


/* ------------------------------------------------------------- variants */

/* forward: launch_forward_ws<head_dim, K/V stages, pingpong>; names
 * ws_s<stages>[_ping] */
static const Variant kFwd64[] = {{"ws_s3", launch_forward_ws<64, 3, false>},
                                 {"ws_s3_ping", launch_forward_ws<64, 3, true>}};
static const Variant kFwd128[] = {{"ws_s2", launch_forward_ws<128, 2, false>},
                                  {"ws_s2_ping", launch_forward_ws<128, 2, true>}};

/* backward: K/V stages in dQ, Q/dO stages in dK/dV (equal in every
 * variant); names ws_s<stages> */
template <int HD, int SQ, int SK>
constexpr pass_fn bwd_ws = launch_grad_passes<launch_dq_ws<HD, SQ>, launch_dkdv_ws<HD, SK>>;
static const Variant kBwd64[] = {{"ws_s2", bwd_ws<64, 2, 2>}, {"ws_s4", bwd_ws<64, 4, 4>}};
static const Variant kBwd128[] = {{"ws_s2", bwd_ws<128, 2, 2>}, {"ws_s4", bwd_ws<128, 4, 4>}};

VariantList ws_variants(int backward, int hd) {
  switch (hd) {
    case 64: return backward ? CODA_ATTN_LIST(kBwd64) : CODA_ATTN_LIST(kFwd64);
    case 128: return backward ? CODA_ATTN_LIST(kBwd128) : CODA_ATTN_LIST(kFwd128);
    default: return VariantList{NULL, 0};
  }
}

}  // namespace coda_attn
