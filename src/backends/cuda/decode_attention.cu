/* Decode attention (the decoder's `attention` entry of coda_decode_ops):
 * flash-decoding partials over splits of the cache length, then their
 * merge into each query head's bf16 output. Causal GQA over the bf16 K/V
 * cache [batch][max_len][Hk][hd], each row at its own sequence and
 * position. */
#include "backends/cuda/decode_attention.cuh"

namespace {

/* ------------------------------------------------------ decode attention */

constexpr int kAttnWarps = 4;
constexpr int kAttnGroup = 8; /* query heads of one KV head per block */

/* A warp's share of a split: every WARPS-th run of 32 cache positions of
 * [lo, hi). The scores take a lane per position: the lane reads its key
 * row in 16-byte pieces and dots it with the G query rows, which every
 * lane reads from shared memory (sq, scaled), so a score costs no
 * shuffles and each exponential is taken once, by the position's lane.
 * The run's online-softmax step is then one max over the lanes per head;
 * the weighted values take a lane per HDL head-dimension values, each
 * position's weight broadcast from its lane. (Scanning a position at a
 * time with the lanes splitting the head dimension, as attn_scan does,
 * spent a five-shuffle sum per position and head and an exponential on
 * every lane: compute-bound at long caches.) kr: the key row of position
 * 0; vl: the lane's first value at position 0; stride: between positions.
 * acc and mx come in as zeros and -inf; l goes out summed over the lanes. */
template <int HDL, int WARPS>
__device__ __forceinline__ void attn_scan_lanes(const float (*sq)[HDL * 32], float (&acc)[8][HDL],
                                                float (&mx)[8], float (&l)[8], const bf16 *kr,
                                                const bf16 *vl, long long stride, int lo, int hi,
                                                int G, int warp, int lane) {
  constexpr int hd = HDL * 32, pieces = hd / 8, VB = HDL >= 8 ? 4 : 8; /* value rows a batch */
  float ls[8];
#pragma unroll
  for (int g = 0; g < 8; g++) ls[g] = 0.0f;
  for (int t0 = lo + warp * 32; t0 < hi; t0 += WARPS * 32) {
    const int n = hi - t0 < 32 ? hi - t0 : 32, t = t0 + (lane < n ? lane : 0);
    float w[8]; /* the scores, then the weights, of the lane's position */
#pragma unroll
    for (int g = 0; g < 8; g++) w[g] = 0.0f;
    const uint4 *kp = reinterpret_cast<const uint4 *>(kr + (long long)t * stride);
#pragma unroll
    for (int c = 0; c < pieces; c++) {
      const uint4 v = kp[c];
      const bf16 *kb = reinterpret_cast<const bf16 *>(&v);
      float kf[8];
#pragma unroll
      for (int e = 0; e < 8; e++) kf[e] = __bfloat162float(kb[e]);
#pragma unroll
      for (int g = 0; g < 8; g++) {
        if (g >= G) break;
        const float4 q0 = *reinterpret_cast<const float4 *>(&sq[g][c * 8]);
        const float4 q1 = *reinterpret_cast<const float4 *>(&sq[g][c * 8 + 4]);
        float d = w[g];
        d = fmaf(q0.x, kf[0], d); d = fmaf(q0.y, kf[1], d);
        d = fmaf(q0.z, kf[2], d); d = fmaf(q0.w, kf[3], d);
        d = fmaf(q1.x, kf[4], d); d = fmaf(q1.y, kf[5], d);
        d = fmaf(q1.z, kf[6], d); d = fmaf(q1.w, kf[7], d);
        w[g] = d;
      }
    }
#pragma unroll
    for (int g = 0; g < 8; g++) {
      if (g >= G) break;
      const float s = lane < n ? w[g] : -INFINITY;
      float m = s;
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const float m2 = fmaxf(mx[g], m), corr = __expf(mx[g] - m2); /* first run: 0 */
      w[g] = lane < n ? __expf(s - m2) : 0.0f;
      ls[g] = ls[g] * corr + w[g];
#pragma unroll
      for (int i = 0; i < HDL; i++) acc[g][i] *= corr;
      mx[g] = m2;
    }
    for (int u0 = 0; u0 < n; u0 += VB) {
      float vf[VB][HDL];
#pragma unroll
      for (int j = 0; j < VB; j++) /* past the run: a repeat, not used */
        load_bf16<HDL, false>(vl + (long long)(t0 + (u0 + j < n ? u0 + j : u0)) * stride, vf[j]);
#pragma unroll
      for (int j = 0; j < VB; j++) {
        if (u0 + j >= n) break;
#pragma unroll
        for (int g = 0; g < 8; g++) {
          if (g >= G) break;
          const float p = __shfl_sync(0xffffffffu, w[g], u0 + j);
#pragma unroll
          for (int i = 0; i < HDL; i++) acc[g][i] = fmaf(p, vf[j][i], acc[g][i]);
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < 8; g++) l[g] = warp_sum(ls[g]);
}

/* Splits of at least this many positions take attn_scan_lanes; shorter
 * ones (a batch-1 step over a short cache: 16 positions a split) would
 * leave most of its lanes idle and take attn_scan, measured faster there
 * (bench/results/gpu-2026-12-06b.md, calls 6 and 7). */
constexpr int kLaneScanMin = 64;

/* The merge of one query head's split partials (base: its first split's
 * (max, sum, values), stride hd + 2 floats apart), in split order. The
 * splits are read kCombineBatch at a time, every load of a batch issued
 * before any of its values is used: a split-by-split loop waited for two
 * dependent L2 round trips per split (its max, then its sum and value
 * behind a branch), 32 splits of a batch-1 step one after the other. The
 * sums run over the splits in order, a skipped (empty) split adding
 * nothing. Loads go through L2 only: other blocks of the same kernel may
 * have written the partials. */
constexpr int kCombineBatch = 8;

__device__ __forceinline__ float merge_max(const float *base, long long stride, int splits) {
  float M = -INFINITY;
  for (int s0 = 0; s0 < splits; s0 += kCombineBatch) {
    float m[kCombineBatch];
#pragma unroll
    for (int i = 0; i < kCombineBatch; i++) m[i] = s0 + i < splits ? __ldcg(base + (s0 + i) * stride) : -INFINITY;
#pragma unroll
    for (int i = 0; i < kCombineBatch; i++) M = fmaxf(M, m[i]);
  }
  return M;
}

/* Value e of the head's output, M its merge_max. */
__device__ __forceinline__ bf16 merge_value(const float *base, long long stride, int splits,
                                            float M, int e) {
  float L = 0.0f, A = 0.0f;
  for (int s0 = 0; s0 < splits; s0 += kCombineBatch) {
    float m[kCombineBatch], l[kCombineBatch], a[kCombineBatch];
#pragma unroll
    for (int i = 0; i < kCombineBatch; i++) {
      const bool in = s0 + i < splits;
      const float *p = base + (in ? s0 + i : s0) * stride;
      m[i] = in ? __ldcg(p) : -INFINITY;
      l[i] = __ldcg(p + 1);
      a[i] = __ldcg(p + 2 + e);
    }
#pragma unroll
    for (int i = 0; i < kCombineBatch; i++) {
      if (m[i] == -INFINITY) continue; /* an empty split, or past the last */
      const float c = __expf(m[i] - M);
      L += l[i] * c;
      A += a[i] * c;
    }
  }
  return __float2bfloat16_rn(L > 0.0f ? A / L : 0.0f);
}

/* o (bf16) = the splits' partials merged and normalized, as a kernel of its
 * own (the default; CODA_DECODE_MERGE=last merges in the partial kernel):
 * block per (row, query head), a thread per head dimension element. */
__global__ void attn_combine_kernel(bf16 *o, const float *work, int Hq, int hd, int splits) {
  pdl_wait();
  const long long rh = blockIdx.x; /* r·Hq + h */
  const long long stride = hd + 2;
  const float *base = work + rh * splits * stride;
  const float M = merge_max(base, stride, splits);
  for (int e = threadIdx.x; e < hd; e += blockDim.x) o[rh * hd + e] = merge_value(base, stride, splits, M, e);
}

/* Block (row r, kv head kh and a group of its query heads, split s):
 * flash-decoding partials over cache positions [lo, hi) of the split, the
 * splits dividing the positions the row sees: [0, pos] or, with a window,
 * its last `window` (coda_ref_window_start). The queries are scaled by
 * `scale` (0: 1/sqrt(hd)).
 * Each warp keeps an online softmax per query head (attn_scan_lanes or,
 * for short splits, attn_scan).
 * work[(r·Hq + h)·splits + s] = (max, sum, hd unnormalized values).
 * With a ticket (CODA_DECODE_MERGE=last) the group's blocks then count
 * themselves in (one word per
 * row and group, the classic last-block reduction): the block that
 * arrives last merges the group's partials into o, in split order, so the
 * result does not depend on which block that is, and sets the word back
 * to zero for the next call. This saves the separate merge kernel: at
 * batch 1 one launch and one dependency wait a layer. */
template <int HDL>
__global__ void attn_partial_kernel(float *work, bf16 *o, unsigned *ticket, const bf16 *q,
                                    const bf16 *kc, const bf16 *vc, const int32_t *seq,
                                    const int32_t *pos, int Hq, int Hk, int max_len, int splits,
                                    float scale, int window) {
  pdl_wait();
  constexpr int hd = HDL * 32;
  if (scale <= 0.0f) scale = rsqrtf((float)hd);
  const int grp = Hq / Hk, nblk = (grp + kAttnGroup - 1) / kAttnGroup;
  const long long r = blockIdx.x;
  const int kh = blockIdx.y / nblk, g0 = (blockIdx.y % nblk) * kAttnGroup;
  const int G = grp - g0 < kAttnGroup ? grp - g0 : kAttnGroup;
  const int s = blockIdx.z, n = pos[r] + 1, s0 = window > 0 && n > window ? n - window : 0;
  const int cs = (n - s0 + splits - 1) / splits, lo = s0 + s * cs, hi = lo + cs < n ? lo + cs : n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __shared__ __align__(16) float sq[kAttnGroup][hd]; /* the G query rows, scaled */
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x)
    sq[i / hd][i % hd] = scale * __bfloat162float(q[(r * Hq + kh * grp + g0) * hd + i]);
  __syncthreads();
  float acc[kAttnGroup][HDL], mx[kAttnGroup], l[kAttnGroup];
#pragma unroll
  for (int g = 0; g < kAttnGroup; g++) {
    mx[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < HDL; i++) acc[g][i] = 0.0f;
  }
  const long long stride = (long long)Hk * hd;
  const bf16 *kr = kc + (long long)seq[r] * max_len * stride + (long long)kh * hd;
  const bf16 *vl = vc + (long long)seq[r] * max_len * stride + (long long)kh * hd + lane * HDL;
  if (cs >= kLaneScanMin) {
    attn_scan_lanes<HDL, kAttnWarps>(sq, acc, mx, l, kr, vl, stride, lo, hi, G, warp, lane);
  } else { /* short splits: a position at a time, the lanes splitting the head dimension */
    float qv[kAttnGroup][HDL];
#pragma unroll
    for (int g = 0; g < kAttnGroup; g++)
#pragma unroll
      for (int i = 0; i < HDL; i++) qv[g][i] = g < G ? sq[g][lane * HDL + i] : 0.0f;
    attn_scan<HDL, kAttnWarps, false>(qv, acc, mx, l, kr + lane * HDL, vl, stride, lo, hi, G, warp);
  }
  __shared__ float sm[kAttnWarps][kAttnGroup], sl[kAttnWarps][kAttnGroup];
  __shared__ float sacc[kAttnWarps][kAttnGroup][hd];
#pragma unroll
  for (int g = 0; g < kAttnGroup; g++) {
    if (lane == 0) {
      sm[warp][g] = mx[g];
      sl[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < HDL; i++) sacc[warp][g][lane * HDL + i] = acc[g][i];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
    const int g = i / hd, e = i % hd;
    float M = -INFINITY;
    for (int w = 0; w < kAttnWarps; w++) M = fmaxf(M, sm[w][g]);
    float L = 0.0f, A = 0.0f;
    if (M != -INFINITY)
      for (int w = 0; w < kAttnWarps; w++) {
        const float c = __expf(sm[w][g] - M);
        L += sl[w][g] * c;
        A += sacc[w][g][e] * c;
      }
    float *out = work + ((r * Hq + kh * grp + g0 + g) * splits + s) * (long long)(hd + 2);
    if (e == 0) {
      out[0] = M;
      out[1] = L;
    }
    out[2 + e] = A;
  }
  if (!ticket) return;
  __shared__ int last;
  __threadfence(); /* this block's partials, visible before its ticket */
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned *t = ticket + r * gridDim.y + blockIdx.y;
    last = atomicAdd(t, 1u) == (unsigned)splits - 1;
    if (last) *t = 0u; /* every split of the group has arrived */
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const long long ps = hd + 2; /* between a head's splits */
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
    const int g = i / hd, e = i % hd;
    const long long rh = r * Hq + kh * grp + g0 + g;
    const float *base = work + rh * splits * ps;
    o[rh * hd + e] = merge_value(base, ps, splits, merge_max(base, ps, splits), e);
  }
}

} // namespace

extern "C" coda_status coda_cuda_decode_attention(coda_context ctx, const coda_decode_rows *r,
                                                  uint16_t *o, const uint16_t *q,
                                                  const uint16_t *kc, const uint16_t *vc,
                                                  float *work, unsigned *ticket, int splits) {
  if (r->M == 0) return CODA_OK;
  if (r->hd % 32 || r->hd > 256 || (r->hd / 32) & (r->hd / 32 - 1))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decode attention: head dim %d (32, 64, 128 or "
                     "256 on the GPU)", r->hd);
  if (r->M > 2147483647LL || splits < 1 || splits > 65535)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decode attention: %lld rows, %d splits",
                     (long long)r->M, splits);
  const int grp = r->Hq / r->Hk, nblk = (grp + kAttnGroup - 1) / kAttnGroup;
  const dim3 grid((unsigned)r->M, (unsigned)(r->Hk * nblk), (unsigned)splits);
  const dim3 block(32 * kAttnWarps);
  const bf16 *qb = (const bf16 *)q, *kb = (const bf16 *)kc, *vb = (const bf16 *)vc;
  bf16 *ob = (bf16 *)o;
  unsigned *tk = ctx->knobs.decode_merge_last ? ticket : NULL;
  const float scale = (float)r->scale; /* 0: the kernel's rsqrtf(hd) */
  const char *what = "decode attention";
  coda_status s;
  switch (r->hd / 32) {
  case 1: s = launch(ctx, what, attn_partial_kernel<1>, grid, block, 0, work, ob, tk, qb, kb, vb, r->seq, r->pos, r->Hq, r->Hk, r->max_len, splits, scale, r->window); break;
  case 2: s = launch(ctx, what, attn_partial_kernel<2>, grid, block, 0, work, ob, tk, qb, kb, vb, r->seq, r->pos, r->Hq, r->Hk, r->max_len, splits, scale, r->window); break;
  case 4: s = launch(ctx, what, attn_partial_kernel<4>, grid, block, 0, work, ob, tk, qb, kb, vb, r->seq, r->pos, r->Hq, r->Hk, r->max_len, splits, scale, r->window); break;
  default: s = launch(ctx, what, attn_partial_kernel<8>, grid, block, 0, work, ob, tk, qb, kb, vb, r->seq, r->pos, r->Hq, r->Hk, r->max_len, splits, scale, r->window); break;
  }
  if (s || tk) return s;
  return launch(ctx, "decode attention merge", attn_combine_kernel, dim3((unsigned)(r->M * r->Hq)),
                dim3(r->hd < 128 ? r->hd : 128), 0, (bf16 *)o, (const float *)work, r->Hq, r->hd,
                splits);
}
