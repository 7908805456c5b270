/* The mma.sync attention kernels (m16n8k16 with ldmatrix, head_dim 32, 64,
 * 128), fed by a two-stage cp.async pipeline: the forward (fwd_kernel), the
 * dQ pass (bwd_dq_kernel) and the dK/dV pass (bwd_dkdv_kernel), their
 * launchers and their named variants. The only kernels at head_dim 32;
 * the v1 defaults (CODA_ATTN_IMPL=v1) at every head_dim. */
#include "backends/cuda/attention_common.cuh"

namespace coda_attn {

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
  const int j0 = first_kv_block(p, q0, KT); /* blocks before it: outside every window */
  const int w0 = q0 + warp * 16 * MT, w1 = w0 + 16 * MT - 1; /* this warp's rows */

  load_tile<BM, HD>(sQ, gq, p.ld_qkv, q0, p.T);
  /* block j lives in stage j & 1: the first one too, whatever its parity */
  load_tile<KT, HD>(sK + (j0 & 1) * KT * HD, gk, p.ld_qkv, j0 * KT, p.T);
  load_tile<KT, HD>(sV + (j0 & 1) * KT * HD, gv, p.ld_qkv, j0 * KT, p.T);
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

  for (int j = j0; j < nkb; ++j) {
    if (j + 1 < nkb) {
      const int st = (j + 1) & 1;
      load_tile<KT, HD>(sK + st * KT * HD, gk, p.ld_qkv, (j + 1) * KT, p.T);
      load_tile<KT, HD>(sV + st * KT * HD, gv, p.ld_qkv, (j + 1) * KT, p.T);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (kQRegs && j == j0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < (kQRegs ? HD / 16 : 1); ++kk)
          ldsm4(qf[mt][kk], a_addr<HD>(sQ, warp * 16 * MT + mt * 16, kk, lane));
    }
    /* tiles wholly after this warp's rows, or wholly below their windows,
     * add nothing (a row whose keys so far were all masked keeps max -inf:
     * the softmax below treats it as empty) */
    if (j * KT <= w1 && !below_window(p, j * KT, KT, w0)) {
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
      /* some key > some row, or below some row's window: mask both edges */
      if (j * KT + KT - 1 > w0 || crosses_window(p, j * KT, w1)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = j * KT + nb * 8 + (lane & 3) * 2 + (e & 1);
              const int row = w0 + mt * 16 + (lane >> 2) + (e >> 1) * 8;
              if (!sees_key(row, key, p.win)) s[mt][nb][e] = -INFINITY;
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
          /* a row with every key so far masked: P = exp2(-inf) = 0, not NaN */
          const float mc = mx == -INFINITY ? 0.f : mx * p.scale2;
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

/* dQ for 64*MT queries of one (batch, head), streaming K/V tiles of 64
 * keys from the first one in the block's windows up to the diagonal, 16 keys at a time per warp:
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
  const int j0 = first_kv_block(p, q0, kTile);
  const int w0 = q0 + warp * 16 * MT, w1 = w0 + 16 * MT - 1;

  load_tile<BM, HD>(sQ, gq, p.ld_qkv, q0, p.T);
  load_tile<BM, HD>(sO, gdo, p.ld_dout, q0, p.T);
  /* block j lives in stage j & 1: the first one too, whatever its parity */
  load_tile<kTile, HD>(sK + (j0 & 1) * kTile * HD, gk, p.ld_qkv, j0 * kTile, p.T);
  load_tile<kTile, HD>(sV + (j0 & 1) * kTile * HD, gv, p.ld_qkv, j0 * kTile, p.T);
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

  for (int j = j0; j < nkb; ++j) {
    if (j + 1 < nkb) {
      const int st = (j + 1) & 1;
      load_tile<kTile, HD>(sK + st * kTile * HD, gk, p.ld_qkv, (j + 1) * kTile, p.T);
      load_tile<kTile, HD>(sV + st * kTile * HD, gv, p.ld_qkv, (j + 1) * kTile, p.T);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (j == j0) {
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
      /* all 16 keys after this warp's rows, or below their windows */
      if (key0 > w1 || below_window(p, key0, 16, w0)) continue;
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
            if (!sees_key(row, key, p.win)) pr = 0.f;
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
 * of every query head of the group from the diagonal to the last query
 * whose window holds these keys, so the GQA sum
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
  const int nqb = q_tile_end(p, k0 + BN - 1, kTile); /* later queries: outside the window */
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
      /* every query before this warp's keys, or past their windows */
      if (qbase + 15 < kw0 || below_window(p, kw0 + 16 * MT - 1, 1, qbase)) continue;
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
            if (!sees_key(q, key, p.win) || q >= p.T) pr = 0.f;
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

/* ------------------------------------------------------------ launchers */

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

/* ------------------------------------------------------------- variants */

/* forward: launch_forward<head_dim, m16 tiles per warp, keys per K/V tile>;
 * names mma_m<tiles>_k<keys> */
static const Variant kFwd32[] = {{"mma_m1_k64", launch_forward<32, 1, 64>},
                                 {"mma_m2_k64", launch_forward<32, 2, 64>},
                                 {"mma_m1_k128", launch_forward<32, 1, 128>}};
static const Variant kFwd64[] = {{"mma_m1_k64", launch_forward<64, 1, 64>},
                                 {"mma_m2_k64", launch_forward<64, 2, 64>},
                                 {"mma_m1_k128", launch_forward<64, 1, 128>}};
static const Variant kFwd128[] = {{"mma_m1_k64", launch_forward<128, 1, 64>},
                                  {"mma_m2_k32", launch_forward<128, 2, 32>}};

/* backward: m16 tiles per warp in dQ and in dK/dV, K/V in registers in
 * dK/dV; names mma_q<dQ tiles>_k<dK/dV tiles>[_kvreg] */
template <int HD, int MQ, int MK, bool KVREGS>
constexpr pass_fn bwd_mma = launch_grad_passes<launch_dq<HD, MQ>, launch_dkdv<HD, MK, KVREGS>>;
static const Variant kBwd32[] = {{"mma_q1_k1_kvreg", bwd_mma<32, 1, 1, true>},
                                 {"mma_q2_k1_kvreg", bwd_mma<32, 2, 1, true>},
                                 {"mma_q1_k2_kvreg", bwd_mma<32, 1, 2, true>},
                                 {"mma_q2_k2_kvreg", bwd_mma<32, 2, 2, true>}};
static const Variant kBwd64[] = {{"mma_q1_k1_kvreg", bwd_mma<64, 1, 1, true>},
                                 {"mma_q2_k1_kvreg", bwd_mma<64, 2, 1, true>},
                                 {"mma_q1_k2", bwd_mma<64, 1, 2, false>},
                                 {"mma_q2_k2", bwd_mma<64, 2, 2, false>}};
static const Variant kBwd128[] = {{"mma_q1_k1", bwd_mma<128, 1, 1, false>}};

VariantList mma_variants(int backward, int hd) {
  switch (hd) {
    case 32: return backward ? CODA_ATTN_LIST(kBwd32) : CODA_ATTN_LIST(kFwd32);
    case 64: return backward ? CODA_ATTN_LIST(kBwd64) : CODA_ATTN_LIST(kFwd64);
    case 128: return backward ? CODA_ATTN_LIST(kBwd128) : CODA_ATTN_LIST(kFwd128);
    default: return VariantList{NULL, 0};
  }
}

}  // namespace coda_attn
