/* The wgmma attention kernels fed by cp.async (head_dim 64, 128): the
 * forward (fwd_wg_kernel), the dQ pass (bwd_dq_wg_kernel) and the dK/dV
 * pass (bwd_dkdv_wg_kernel), NWG warpgroups of 64 rows per CTA, several
 * CTAs per SM; their launchers and their named variants. The tile math is
 * shared with the warp-specialized kernels (attention_wg.cuh). */
#include "backends/cuda/attention_wg.cuh"

namespace coda_attn {

/* ------------------------------------------------- forward, wgmma (sm_90a) */

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
  const int j0 = first_kv_block(p, q0, KT); /* blocks before it: outside every window */
  const int qw = q0 + 64 * wg;                  /* this warpgroup's first row */
  const int r0 = qw + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
  const bf16 *sQw = sQ + 64 * wg * 64;         /* its 64-row slice of every panel */

  load_tile_wg<BM, HD, NT>(sQ, gq, p.ld_qkv, q0, p.T);
  /* block j lives in stage j & 1: the first one too, whatever its parity */
  load_tile_wg<KT, HD, NT>(sK + (j0 & 1) * KT * HD, gk, p.ld_qkv, j0 * KT, p.T);
  load_tile_wg<KT, HD, NT>(sV + (j0 & 1) * KT * HD, gv, p.ld_qkv, j0 * KT, p.T);
  cp_commit();

  float o[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int j = j0; j < nkb; ++j) {
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
    /* tiles wholly after this warpgroup's rows, or wholly below their
     * windows, add nothing (a row with every key so far masked keeps max
     * -inf: online_softmax treats it as empty) */
    if (j * KT <= qw + 63 && !below_window(p, j * KT, KT, qw)) {
    float s[KT / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
      wg_ss<KT>(s, kmajor_desc<BM>(sQw, kk), kmajor_desc<KT>(tk, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);

    /* some key > some row, or below some row's window */
    if (j * KT + KT - 1 > qw || crosses_window(p, j * KT, qw + 63))
      mask_causal<KT>(s, j * KT, r0, lane, p.win);
    float alpha[2];
    online_softmax<KT>(s, m, l, alpha, j == j0, p.scale2);
    rescale_rows<HD>(o, alpha);
    uint32_t pa[KT / 16][4];
    pack_a<KT>(s, pa);
    fence_regs(o);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < KT / 16; ++ks)
      wg_rs_t<HD>(o, pa[ks], smem_desc(smem_addr(tv) + ks * 2048, KT * 128, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    }
    __syncthreads(); /* this stage is refilled next iteration */
  }
  store_out_rows<HD>(p, o, m, l, r0, b, h, lane);
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
  const int j0 = first_kv_block(p, q0, KT);
  const int qw = q0 + 64 * wg;
  const int r0 = qw + warp * 16 + (lane >> 2);
  const bf16 *sQw = sQ + 64 * wg * 64, *sOw = sO + 64 * wg * 64;

  load_tile_wg<BM, HD, NT>(sQ, gq, p.ld_qkv, q0, p.T);
  load_tile_wg<BM, HD, NT>(sO, gdo, p.ld_dout, q0, p.T);
  /* block j lives in stage j & 1: the first one too, whatever its parity */
  load_tile_wg<KT, HD, NT>(sK + (j0 & 1) * KT * HD, gk, p.ld_qkv, j0 * KT, p.T);
  load_tile_wg<KT, HD, NT>(sV + (j0 & 1) * KT * HD, gv, p.ld_qkv, j0 * KT, p.T);
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

  for (int j = j0; j < nkb; ++j) {
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
    if (j * KT <= qw + 63 && !below_window(p, j * KT, KT, qw)) {
      float s[KT / 2], dp[KT / 2];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(s, kmajor_desc<BM>(sQw, kk), kmajor_desc<KT>(tk, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<KT>(dp, kmajor_desc<BM>(sOw, kk), kmajor_desc<KT>(tv, kk), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);
      fence_regs(dp);
      uint32_t da[KT / 16][4];
      dq_ds<KT>(s, dp, Lr, Dr, j * KT, r0, lane, p.scale2, p.win, da);
      fence_regs(dq);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < KT / 16; ++ks)
        wg_rs_t<HD>(dq, da[ks], smem_desc(smem_addr(tk) + ks * 2048, KT * 128, 1024));
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dq);
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
  const int nqb = q_tile_end(p, k0 + BN - 1, BQ); /* later queries: outside the window */
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
    /* else every query precedes this warpgroup's keys or is past their windows */
    if (qt + BQ - 1 >= kw && !below_window(p, kw + 63, 1, qt)) {
      float s[BQ / 2], dp[BQ / 2];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<BQ>(s, kmajor_desc<BN>(sKw, kk), kmajor_desc<BQ>(tq, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        wg_ss<BQ>(dp, kmajor_desc<BN>(sVw, kk), kmajor_desc<BQ>(to, kk), kk > 0);
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
    __syncthreads();
  }

  store_dkdv_rows<ROPE, BN, HD>(p, dk, dv, key0, k0, b, g, lane, sK, sV);
}

/* ------------------------------------------------------------ launchers */

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


/* ------------------------------------------------------------- variants */

/* forward: launch_forward_wg<head_dim, keys per K/V tile, warpgroups per
 * CTA>; names wg_k<keys>_w<warpgroups> */
static const Variant kFwd64[] = {{"wg_k64_w1", launch_forward_wg<64, 64, 1>},
                                 {"wg_k64_w2", launch_forward_wg<64, 64, 2>},
                                 {"wg_k128_w2", launch_forward_wg<64, 128, 2>},
                                 {"wg_k64_w3", launch_forward_wg<64, 64, 3>}};
static const Variant kFwd128[] = {{"wg_k64_w1", launch_forward_wg<128, 64, 1>},
                                  {"wg_k64_w2", launch_forward_wg<128, 64, 2>},
                                  {"wg_k128_w2", launch_forward_wg<128, 128, 2>},
                                  {"wg_k64_w3", launch_forward_wg<128, 64, 3>}};

/* backward: warpgroups per CTA in dQ and in dK/dV, CTAs per SM the
 * registers must allow in dK/dV and in dQ; names
 * wg_q<dQ warpgroups>_k<dK/dV warpgroups>[_kmin<n>][_qmin<n>] */
template <int HD, int NQ, int NK, int MINK = 1, int MINQ = 1>
constexpr pass_fn bwd_wg =
    launch_grad_passes<launch_dq_wg<HD, NQ, MINQ>, launch_dkdv_wg<HD, NK, MINK>>;
static const Variant kBwd64[] = {{"wg_q1_k1", bwd_wg<64, 1, 1>},
                                 {"wg_q2_k2", bwd_wg<64, 2, 2>},
                                 {"wg_q2_k1", bwd_wg<64, 2, 1>},
                                 {"wg_q1_k1_kmin3", bwd_wg<64, 1, 1, 3>},
                                 {"wg_q1_k1_kmin3_qmin4", bwd_wg<64, 1, 1, 3, 4>}};
static const Variant kBwd128[] = {{"wg_q1_k1", bwd_wg<128, 1, 1>},
                                  {"wg_q2_k2", bwd_wg<128, 2, 2>},
                                  {"wg_q2_k1", bwd_wg<128, 2, 1>}};

VariantList wg_variants(int backward, int hd) {
  switch (hd) {
    case 64: return backward ? CODA_ATTN_LIST(kBwd64) : CODA_ATTN_LIST(kFwd64);
    case 128: return backward ? CODA_ATTN_LIST(kBwd128) : CODA_ATTN_LIST(kFwd128);
    default: return VariantList{NULL, 0};
  }
}

}  // namespace coda_attn
