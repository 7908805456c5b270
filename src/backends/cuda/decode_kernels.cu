/* The decoder's device kernels (src/infer/decode.c on a CUDA context,
 * through coda_decode_ops of backends/backend.h): RMSNorm (GPT-2's
 * LayerNorm) to bf16, the linear layers (a one-row GEMV, a tensor-core
 * GEMV for up to 64 rows, the backend's GEMM for more) with the SwiGLU or
 * the RoPE and cache append in their stores, and the unfused steps after
 * them (Qwen3's QK-norm, a bias, GeGLU, GELU, Gemma 3's post-norm).
 * The embedding and row gather are in decode_rows.cu, decode attention in
 * decode_attention.cu, sampling in decode_sample.cu,
 * the launch they share in decode_common.cuh. Compiled ahead of time by
 * nvcc (no NVRTC).
 *
 * Layouts: activations row-major, the residual stream and GEMM outputs
 * fp32, GEMM inputs bf16; weights bf16 [N x K] (the model's rows); a
 * layer's K and V caches bf16 [batch][max_len][Hk][hd]. qkv rows are [Q
 * heads][K heads][V heads] with RoPE pairs adjacent (model.c). */
#include "backends/cuda/decode_common.cuh"

namespace {

/* -------------------------------------------------------------- RMSNorm */

/* h = bf16(xr · r ⊙ w), r = 1/sqrt(mean(xr²) + eps), by a block of 256
 * threads, the sum of squares in double in a fixed order. */
constexpr int kNormThreads = 256;

__device__ __forceinline__ void rmsnorm_row(bf16 *h, const float *xr, const float *w, long long D,
                                            double eps, double *part) {
  double ss = 0.0;
  for (long long k = threadIdx.x; k < D; k += kNormThreads) ss += (double)xr[k] * xr[k];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  double tot = 0.0;
  for (int i = 0; i < kNormThreads / 32; i++) tot += part[i];
  const float r = (float)(1.0 / sqrt(tot / (double)D + eps));
  for (long long k = threadIdx.x; k < D; k += kNormThreads) h[k] = __float2bfloat16_rn(xr[k] * r * w[k]);
}

/* The sum over the block of each thread's v, in double, in a fixed order
 * (every thread gets it); part: kNormThreads / 32 doubles of shared memory,
 * free again on return. */
__device__ __forceinline__ double block_sum(double v, double *part) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double tot = 0.0;
  for (int i = 0; i < kNormThreads / 32; i++) tot += part[i];
  __syncthreads();
  return tot;
}

/* GPT-2's LayerNorm as coda_ref_layernorm: h = bf16((xr − mean) · r ⊙ w +
 * b), mean and r = 1/sqrt(mean((xr − mean)²) + eps) in double. */
__device__ __forceinline__ void layernorm_row(bf16 *h, const float *xr, const float *w,
                                              const float *b, long long D, double eps,
                                              double *part) {
  double s = 0.0;
  for (long long k = threadIdx.x; k < D; k += kNormThreads) s += xr[k];
  const double mean = block_sum(s, part) / (double)D;
  double ss = 0.0;
  for (long long k = threadIdx.x; k < D; k += kNormThreads)
    ss += ((double)xr[k] - mean) * ((double)xr[k] - mean);
  const double r = 1.0 / sqrt(block_sum(ss, part) / (double)D + eps);
  for (long long k = threadIdx.x; k < D; k += kNormThreads)
    h[k] = __float2bfloat16_rn((float)(((double)xr[k] - mean) * r * w[k] + b[k]));
}

/* h row i = RMSNorm(x row rows[i]) ⊙ w, or LayerNorm with bias b where b is
 * set: one block per row. */
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(bf16 *h, const float *x, const int32_t *rows, const float *w, const float *b,
                   long long D, double eps) {
  __shared__ double part[kNormThreads / 32];
  pdl_wait();
  const long long src = rows ? rows[blockIdx.x] : blockIdx.x;
  if (b) layernorm_row(h + (long long)blockIdx.x * D, x + src * D, w, b, D, eps, part);
  else rmsnorm_row(h + (long long)blockIdx.x * D, x + src * D, w, D, eps, part);
}

/* Gemma 3's post-norm and residual add: res row i += RMSNorm(y row i) ⊙ w
 * in fp32 (coda_ref_rmsnorm1p with w = 1 + the model's weights, then the
 * add), one block per row. */
__global__ void __launch_bounds__(kNormThreads)
    norm_add_kernel(float *res, const float *y, const float *w, long long D, double eps) {
  __shared__ double part[kNormThreads / 32];
  pdl_wait();
  const float *yr = y + (long long)blockIdx.x * D;
  float *xr = res + (long long)blockIdx.x * D;
  double ss = 0.0;
  for (long long k = threadIdx.x; k < D; k += kNormThreads) ss += (double)yr[k] * yr[k];
  const float r = (float)(1.0 / sqrt(block_sum(ss, part) / (double)D + eps));
  for (long long k = threadIdx.x; k < D; k += kNormThreads) xr[k] += yr[k] * r * w[k];
}

/* y row r (M x N) = b, or += b with accumulate: the bias a linear's sums
 * then start from (GPT-2). */
__global__ void bias_kernel(float *y, const float *b, long long M, long long N, int accumulate) {
  pdl_wait();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < M * N;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = accumulate ? y[i] + b[i % N] : b[i % N];
}

/* --------------------------------------------------------------- linear */

/* What a linear kernel does with its results (coda_decode_linear_job):
 * stores of adjacent column pairs (c, c + 1), c even. */
struct lin_out {
  long long N;
  float *y;       /* F32 */
  int accumulate; /* F32 */
  bf16 *yb;       /* SWIGLU: M x N/2 */
  /* ROPE */
  const int32_t *seq, *pos;
  int Hq, Hk, hd, max_len;
  const double *inv_freq;
  bf16 *q, *kc, *vc, *packed;
};

/* The RoPE rotation of a pair (a, b) at position p, frequency f, in
 * double: the fused stores and rope_append_kernel both call it, so they
 * agree bit for bit. */
__device__ __forceinline__ void rope_pair(float a, float b, double p, double f, float *o0,
                                          float *o1) {
  double sn, cs;
  sincos(p * f, &sn, &cs);
  *o0 = (float)((double)a * cs - (double)b * sn);
  *o1 = (float)((double)a * sn + (double)b * cs);
}

/* SwiGLU of one (gate, up) pair: the fused stores and swiglu_kernel. */
__device__ __forceinline__ bf16 silu_mul(float g, float u) {
  return __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
}

/* GELU with the tanh approximation (coda_ref_gelu's, in float):
 * 0.5 u (1 + tanh(√(2/π) (u + 0.044715 u³))). */
__device__ __forceinline__ float gelu_tanh(float u) {
  return 0.5f * u * (1.0f + tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u)));
}

/* KIND is the job's store kind, fixed at compile time: a kernel that stores fp32 then
 * carries none of the RoPE's registers and stack (with them the
 * tensor-core GEMV of 64 rows needed 76 registers instead of 64, three
 * blocks an SM instead of four). */
template <coda_decode_out KIND>
__device__ __forceinline__ void store_pair(const lin_out &o, long long r, long long c, float v0,
                                           float v1) {
  if (KIND == CODA_DECODE_OUT_F32) {
    float *d = o.y + r * o.N + c;
    d[0] = o.accumulate ? d[0] + v0 : v0;
    if (c + 1 < o.N) d[1] = o.accumulate ? d[1] + v1 : v1;
  } else if (KIND == CODA_DECODE_OUT_SWIGLU) {
    o.yb[r * (o.N / 2) + c / 2] = silu_mul(v0, v1);
  } else { /* ROPE: as rope_append_kernel */
    const int hd = o.hd;
    const long long cbase = ((long long)o.seq[r] * o.max_len + o.pos[r]) * (long long)o.Hk * hd;
    const long long nr = (long long)(o.Hq + o.Hk) * hd;
    bf16 b0, b1;
    if (c < nr) {
      const int h = (int)(c / hd), j = (int)(c % hd) / 2;
      float o0, o1;
      rope_pair(v0, v1, (double)o.pos[r], o.inv_freq[j], &o0, &o1);
      bf16 *dst = h < o.Hq ? o.q + r * (long long)o.Hq * hd + (long long)h * hd
                           : o.kc + cbase + (long long)(h - o.Hq) * hd;
      b0 = dst[2 * j] = __float2bfloat16_rn(o0);
      b1 = dst[2 * j + 1] = __float2bfloat16_rn(o1);
    } else {
      b0 = o.vc[cbase + c - nr] = __float2bfloat16_rn(v0);
      b1 = o.vc[cbase + c - nr + 1] = __float2bfloat16_rn(v1);
    }
    if (o.packed) {
      o.packed[r * o.N + c] = b0;
      o.packed[r * o.N + c + 1] = b1;
    }
  }
}

/* y (M x N) (+)= x (M x K) · w (N x K)ᵀ for M <= MT: one warp per output
 * column n streams its weight row once (16-byte loads when K % 8 == 0) and
 * keeps the M dot products in registers; the x rows come from L1/L2. The
 * F32 store only (the fallback for shapes the other kernels do not take). */
template <int MT>
__global__ void gemv_kernel(float *y, const bf16 *x, const bf16 *w, int M, long long N,
                            long long K, int accumulate) {
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const long long n = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return;
  const bf16 *wr = w + n * K;
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; m++) acc[m] = 0.0f;
  if ((K & 7) == 0) {
#pragma unroll 4 /* several weight loads in flight per lane */
    for (long long k = (long long)lane * 8; k < K; k += 256) {
      const uint4 wv = *reinterpret_cast<const uint4 *>(wr + k);
      const bf16 *wb = reinterpret_cast<const bf16 *>(&wv);
      float wf[8];
#pragma unroll
      for (int i = 0; i < 8; i++) wf[i] = __bfloat162float(wb[i]);
#pragma unroll
      for (int m = 0; m < MT; m++) {
        if (m >= M) break;
        const uint4 xv = *reinterpret_cast<const uint4 *>(x + (long long)m * K + k);
        const bf16 *xb = reinterpret_cast<const bf16 *>(&xv);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) s = fmaf(__bfloat162float(xb[i]), wf[i], s);
        acc[m] += s;
      }
    }
  } else {
    for (long long k = lane; k < K; k += 32) {
      const float wf = __bfloat162float(wr[k]);
#pragma unroll
      for (int m = 0; m < MT; m++) {
        if (m >= M) break;
        acc[m] = fmaf(__bfloat162float(x[(long long)m * K + k]), wf, acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m >= M) break;
    const float s = warp_sum(acc[m]);
    if (lane == 0) y[(long long)m * N + n] = accumulate ? y[(long long)m * N + n] + s : s;
  }
}

/* One row: out(x · wᵀ), K % 8 == 0. S warps of a block own the column
 * pair (c, c + 1), each a contiguous slice of K: a lane loads 8 elements
 * of both weight rows per 256 (one 16-byte load each, several in flight),
 * the S partial sums are added in warp order through shared memory
 * (deterministic) and the pair is stored once; with S = 1 there is no
 * shared memory and no barrier. With AH > 0 a warp loads its first AH
 * chunks of both rows before pdl_wait(): the weights are constant, so they
 * stream while the previous kernel drains.
 * S and AH come from row_split: by shape unless CODA_DECODE_ROW_SPLIT
 * names one (0: S = 1, AH = 0, the kernel before the split variants).
 * bench/generate/gemv_row.cu measures the variants (more warps per pair,
 * an L2 prefetch instead). */
constexpr int kRowWarps = 8;
constexpr int kRowAhead = 2;

/* With norm.w set, the row is normalized on load instead of read from a
 * row the RMSNorm kernel wrote: beside its weights each warp reads the
 * fp32 row xr and the norm weights g (8·K bytes every warp of an SM shares,
 * from L1) and computes
 *     y_c = r · Σ_k (xr_k · g_k) · w_ck,   r = 1 / sqrt(Σ_k xr_k² / K + eps),
 * the sum of squares in double over the lanes' k (then the S slices) in a
 * fixed order, r applied to the fp32 dot product. The normalized row is
 * therefore not rounded to bf16 as the RMSNorm kernel's is: the two paths
 * differ by that rounding (CODA_DECODE_NORM=separate takes the kernel). A
 * block no longer waits for a prologue of its own before its first weight
 * load. */
struct row_norm {
  const float *x, *w; /* the row's fp32 values, the norm weights (NULL: x is the input) */
  const int32_t *rows;
  double eps;
};

/* by value: a reference bound to a dereferenced global pointer lets the
 * compiler split the 16-byte load into eight 2-byte ones */
__device__ __forceinline__ void bf16x8(const uint4 v, float *f) {
  const bf16 *b = reinterpret_cast<const bf16 *>(&v);
#pragma unroll
  for (int i = 0; i < 8; i++) f[i] = __bfloat162float(b[i]);
}

__device__ __forceinline__ void f32x8(const float *p, float *f) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

template <coda_decode_out KIND, int S, int AH, bool NORM>
__global__ void __launch_bounds__(32 * kRowWarps)
    gemv_row_kernel(lin_out o, const bf16 *x, const bf16 *w, long long K, row_norm norm) {
  __shared__ float part[S > 1 ? kRowWarps : 1][2];
  __shared__ double pss[S > 1 && NORM ? kRowWarps : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sl = warp % S;
  const long long c = 2 * ((long long)blockIdx.x * (kRowWarps / S) + warp / S);
  const bool live = c < o.N;
  const long long ks = (K / S + 7) / 8 * 8, k0 = sl * ks, k1 = k0 + ks < K ? k0 + ks : K;
  /* odd N (F32): the last pair's second row a repeat */
  const bf16 *w0 = w + (live ? c : 0) * K, *w1 = live && c + 1 < o.N ? w0 + K : w0;
  uint4 ahead[2 * (AH > 0 ? AH : 1)];
#pragma unroll
  for (int i = 0; i < AH; i++) {
    const long long k = k0 + lane * 8 + 256LL * i;
    const bool in = live && k < k1;
    ahead[2 * i] = in ? *reinterpret_cast<const uint4 *>(w0 + k) : make_uint4(0, 0, 0, 0);
    ahead[2 * i + 1] = in ? *reinterpret_cast<const uint4 *>(w1 + k) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();
  float a0 = 0.0f, a1 = 0.0f, r = 1.0f;
  double ss = 0.0;
  if (live) {
    const float *xr = NORM ? norm.x + (norm.rows ? norm.rows[0] : 0) * K : NULL;
    /* one chunk of both rows at k against the row */
    auto chunk = [&](const uint4 v0, const uint4 v1, long long k) {
      float xf[8], f0[8], f1[8];
      bf16x8(v0, f0);
      bf16x8(v1, f1);
      float s0 = 0.0f, s1 = 0.0f;
      if (NORM) {
        float gf[8];
        f32x8(xr + k, xf);
        f32x8(norm.w + k, gf);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          ss += (double)xf[i] * xf[i];
          const float xg = xf[i] * gf[i];
          s0 = fmaf(xg, f0[i], s0);
          s1 = fmaf(xg, f1[i], s1);
        }
      } else {
        const uint4 xv = *reinterpret_cast<const uint4 *>(x + k);
        bf16x8(xv, xf);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          s0 = fmaf(xf[i], f0[i], s0);
          s1 = fmaf(xf[i], f1[i], s1);
        }
      }
      a0 += s0;
      a1 += s1;
    };
    long long k = k0 + lane * 8;
#pragma unroll
    for (int i = 0; i < AH; i++, k += 256)
      if (k < k1) chunk(ahead[2 * i], ahead[2 * i + 1], k);
#pragma unroll 4 /* several weight loads in flight per lane */
    for (; k < k1; k += 256)
      chunk(*reinterpret_cast<const uint4 *>(w0 + k), *reinterpret_cast<const uint4 *>(w1 + k), k);
    if (NORM)
      for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
  }
  if (S > 1) {
    if (lane == 0) {
      part[warp][0] = a0;
      part[warp][1] = a1;
      if (NORM) pss[warp] = ss;
    }
    __syncthreads();
    if (sl != 0) return;
    for (int i = 1; i < S; i++) {
      a0 += part[warp + i][0];
      a1 += part[warp + i][1];
      if (NORM) ss += pss[warp + i];
    }
  }
  if (!live || lane != 0) return;
  if (NORM) r = (float)(1.0 / sqrt(ss / (double)K + norm.eps));
  store_pair<KIND>(o, 0, c, a0 * r, a1 * r);
}

/* out(x (M x K) · w (N x K)ᵀ) for M <= 16·MT on tensor cores:
 * a block of 8 warps owns 8 output columns, warp i the i-th eighth of K,
 * so every weight row streams once, in 16-byte loads with several in
 * flight per lane, and the x rows come from L1. Each 32-wide k chunk is
 * two m16n8k16 MMAs over a permutation of its k: lane (g, t) loads w[n0 +
 * g][k + 8t .. 8t + 7] whole and takes words {0, 1} as its B fragment of
 * the first MMA, {2, 3} of the second; the A fragments take x's words in
 * the same order, so the dot products are those of the plain order. The
 * eight warps' sums are added in warp order (deterministic). Needs K % 32
 * == 0. */
constexpr int kMmaWarps = 8;

__device__ __forceinline__ void mma_bf16_16816(float *c, const uint32_t *a, uint32_t b0,
                                               uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Weight chunks a lane loads together ahead of its k loop, written before
 * pdl_wait() (the weights are constant), which ptxas nonetheless places
 * first: fewer for more rows, whose registers decide how many blocks fit
 * an SM (64 for four at 64 rows). */
template <int MT> constexpr int mma_ahead_chunks() { return MT == 1 ? 4 : MT == 2 ? 2 : 0; }

template <int A>
__device__ __forceinline__ void mma_ahead(uint4 *wv, const bf16 *wr, long long c0, long long c1,
                                          bool nok) {
#pragma unroll
  for (int i = 0; i < A; i++)
    wv[i] = nok && c0 + i < c1 ? __ldg(reinterpret_cast<const uint4 *>(wr + (c0 + i) * 32))
                               : make_uint4(0, 0, 0, 0);
}

/* One 32-wide k chunk c: lane (g, t)'s weight words wv against the x rows'
 * words in the same order, two MMAs per 16 rows. */
template <int MT>
__device__ __forceinline__ void mma_chunk(float (*acc)[4], const uint4 &wv, const bf16 *x, int M,
                                          long long K, long long c, int g, int t) {
#pragma unroll
  for (int m = 0; m < MT; m++) {
    const int r0 = 16 * m + g, r1 = r0 + 8;
    uint4 x0 = make_uint4(0, 0, 0, 0), x1 = make_uint4(0, 0, 0, 0);
    if (r0 < M) x0 = *reinterpret_cast<const uint4 *>(x + (long long)r0 * K + c * 32 + 8 * t);
    if (r1 < M) x1 = *reinterpret_cast<const uint4 *>(x + (long long)r1 * K + c * 32 + 8 * t);
    const uint32_t a0[4] = {x0.x, x1.x, x0.y, x1.y}, a1[4] = {x0.z, x1.z, x0.w, x1.w};
    mma_bf16_16816(acc[m], a0, wv.x, wv.y);
    mma_bf16_16816(acc[m], a1, wv.z, wv.w);
  }
}

template <int MT, coda_decode_out KIND>
__global__ void __launch_bounds__(32 * kMmaWarps)
    gemv_mma_kernel(lin_out o, const bf16 *x, const bf16 *w, int M, long long K) {
  __shared__ float part[kMmaWarps][MT][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const long long N = o.N, n0 = (long long)blockIdx.x * 8, chunks = K / 32;
  const long long per = (chunks + kMmaWarps - 1) / kMmaWarps;
  const long long c0 = warp * per, c1 = c0 + per < chunks ? c0 + per : chunks;
  const bool nok = n0 + g < N;
  const bf16 *wr = w + (nok ? n0 + g : 0) * K + 8 * t;
  constexpr int A = mma_ahead_chunks<MT>();
  uint4 ahead[A > 0 ? A : 1];
  mma_ahead<A>(ahead, wr, c0, c1, nok);
  pdl_wait();
  float acc[MT][4];
#pragma unroll
  for (int m = 0; m < MT; m++) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < A; i++)
    if (c0 + i < c1) mma_chunk<MT>(acc, ahead[i], x, M, K, c0 + i, g, t);
#pragma unroll 4
  for (long long c = c0 + A; c < c1; c++) {
    uint4 wv = make_uint4(0, 0, 0, 0);
    if (nok) wv = __ldg(reinterpret_cast<const uint4 *>(wr + c * 32));
    mma_chunk<MT>(acc, wv, x, M, K, c, g, t);
  }
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int i = 0; i < 4; i++) part[warp][m][lane][i] = acc[m][i];
  __syncthreads();
  /* one thread per (m, lane, accumulator pair): fragment elements {0, 1}
   * and {2, 3} are column pairs of rows g and g + 8 */
  for (int e = threadIdx.x; e < MT * 32 * 2; e += blockDim.x) {
    const int m = e / 64, l = (e / 2) % 32, i = 2 * (e % 2);
    float s0 = 0.0f, s1 = 0.0f;
    for (int wi = 0; wi < kMmaWarps; wi++) {
      s0 += part[wi][m][l][i];
      s1 += part[wi][m][l][i + 1];
    }
    const int row = 16 * m + (l >> 2) + (i >= 2 ? 8 : 0);
    const long long col = n0 + 2 * (l & 3);
    if (row < M && col < N) store_pair<KIND>(o, row, col, s0, s1);
  }
}

template <coda_decode_out KIND>
coda_status launch_gemv_mma(coda_context ctx, const lin_out &o, const bf16 *x, const bf16 *w,
                            int M, long long K) {
  const dim3 grid((unsigned)((o.N + 7) / 8)), block(32 * kMmaWarps);
  const char *what = "GEMV (tensor cores)";
  if (M <= 16) return launch(ctx, what, gemv_mma_kernel<1, KIND>, grid, block, 0, o, x, w, M, K);
  if (M <= 32) return launch(ctx, what, gemv_mma_kernel<2, KIND>, grid, block, 0, o, x, w, M, K);
  if (M <= 48) return launch(ctx, what, gemv_mma_kernel<3, KIND>, grid, block, 0, o, x, w, M, K);
  return launch(ctx, what, gemv_mma_kernel<4, KIND>, grid, block, 0, o, x, w, M, K);
}

/* Warps per column pair of the one-row GEMV, CODA_DECODE_ROW_SPLIT: 0
 * (one warp, no loads before the wait); 1, 2, 4, 8 (that many, the
 * weights' first chunks loaded before the wait); unset or auto (by shape:
 * two for rows of 4096 or more, where one warp keeps too few of a long
 * row's loads in flight, and more, up to 4, until every SM has 16
 * streaming warps). */
static int row_split(coda_context ctx, long long N, long long K) {
  if (ctx->knobs.decode_row_split >= 0) return ctx->knobs.decode_row_split;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->opts.device) != cudaSuccess)
    sms = 132;
  const long long pairs = (N + 1) / 2;
  int S = K >= 4096 ? 2 : 1;
  while (S < 4 && pairs * S < 16LL * sms) S *= 2;
  return S;
}

template <coda_decode_out KIND, int S, int AH>
coda_status launch_gemv_row_s(coda_context ctx, const lin_out &o, const bf16 *x, const bf16 *w,
                              long long K, const row_norm &norm) {
  const long long warps = (o.N + 1) / 2 * S;
  const dim3 grid((unsigned)((warps + kRowWarps - 1) / kRowWarps)), block(32 * kRowWarps);
  if (norm.w)
    return launch(ctx, "RMSNorm and GEMV (one row)", gemv_row_kernel<KIND, S, AH, true>, grid,
                  block, 0, o, x, w, K, norm);
  return launch(ctx, "GEMV (one row)", gemv_row_kernel<KIND, S, AH, false>, grid, block, 0, o, x,
                w, K, norm);
}

template <coda_decode_out KIND>
coda_status launch_gemv_row(coda_context ctx, const lin_out &o, const bf16 *x, const bf16 *w,
                            long long K, const row_norm &norm) {
  switch (row_split(ctx, o.N, K)) {
  case 0: return launch_gemv_row_s<KIND, 1, 0>(ctx, o, x, w, K, norm);
  case 1: return launch_gemv_row_s<KIND, 1, kRowAhead>(ctx, o, x, w, K, norm);
  case 2: return launch_gemv_row_s<KIND, 2, kRowAhead>(ctx, o, x, w, K, norm);
  case 4: return launch_gemv_row_s<KIND, 4, kRowAhead>(ctx, o, x, w, K, norm);
  default: return launch_gemv_row_s<KIND, 8, kRowAhead>(ctx, o, x, w, K, norm);
  }
}

coda_status launch_gemv(coda_context ctx, float *y, const bf16 *x, const bf16 *w, int M,
                        long long N, long long K, int accumulate) {
  const int warps = 8;
  const dim3 grid((unsigned)((N + warps - 1) / warps)), block(32 * warps);
  const char *what = "GEMV";
  if (M <= 1) return launch(ctx, what, gemv_kernel<1>, grid, block, 0, y, x, w, M, N, K, accumulate);
  if (M <= 2) return launch(ctx, what, gemv_kernel<2>, grid, block, 0, y, x, w, M, N, K, accumulate);
  if (M <= 4) return launch(ctx, what, gemv_kernel<4>, grid, block, 0, y, x, w, M, N, K, accumulate);
  if (M <= 8) return launch(ctx, what, gemv_kernel<8>, grid, block, 0, y, x, w, M, N, K, accumulate);
  return launch(ctx, what, gemv_kernel<16>, grid, block, 0, y, x, w, M, N, K, accumulate);
}

/* ------------------------------------------------- RoPE and cache append */

/* Row r: the Q heads rotated into q (bf16), the K heads rotated and the V
 * heads copied into the caches at (seq[r], pos[r]); angles in double.
 * packed (optional): the same bf16 values as one [q | k | v] row. */
__global__ void rope_append_kernel(const float *qkv, bf16 *q, bf16 *kc, bf16 *vc,
                                   const int32_t *seq, const int32_t *pos, int Hq, int Hk, int hd,
                                   int max_len, const double *inv_freq, bf16 *packed) {
  pdl_wait();
  const long long r = blockIdx.x;
  const int half = hd / 2, npairs = (Hq + Hk) * half, nv = Hk * hd;
  const int i0 = blockIdx.y * blockDim.x, istep = gridDim.y * blockDim.x;
  const long long nq = (long long)(Hq + 2 * Hk) * hd;
  const float *row = qkv + r * nq;
  const long long cbase = ((long long)seq[r] * max_len + pos[r]) * (long long)Hk * hd;
  const double p = (double)pos[r];
  for (int i = i0 + threadIdx.x; i < npairs + nv; i += istep) {
    if (i < npairs) {
      const int h = i / half, j = i % half;
      float o0 = row[(long long)h * hd + 2 * j], o1 = row[(long long)h * hd + 2 * j + 1];
      if (inv_freq) rope_pair(o0, o1, p, inv_freq[j], &o0, &o1); /* NULL: GPT-2, no RoPE */
      bf16 *dst = h < Hq ? q + r * (long long)Hq * hd + (long long)h * hd
                         : kc + cbase + (long long)(h - Hq) * hd;
      dst[2 * j] = __float2bfloat16_rn(o0);
      dst[2 * j + 1] = __float2bfloat16_rn(o1);
      if (packed) {
        bf16 *pk = packed + r * nq + (long long)h * hd;
        pk[2 * j] = dst[2 * j];
        pk[2 * j + 1] = dst[2 * j + 1];
      }
    } else {
      const int e = i - npairs;
      const bf16 v = __float2bfloat16_rn(row[(long long)(Hq + Hk) * hd + e]);
      vc[cbase + e] = v;
      if (packed) packed[r * nq + (long long)(Hq + Hk) * hd + e] = v;
    }
  }
}

/* Qwen3's rows (QK-norm): one warp a head of row r. A Q or K head is
 * RMS-normalized over its hd values as the host's coda_ref_rmsnorm does
 * (sum of squares in double, over the lanes then a butterfly, so every
 * lane holds the same bits; r in float; x · r · w in float), then rotated
 * and stored as rope_append_kernel stores; a V head is copied. The norm
 * needs the whole head, so it cannot ride in a GEMV's pair stores. */
constexpr int kQkWarps = 4;

__global__ void __launch_bounds__(32 * kQkWarps)
    qknorm_rope_append_kernel(const float *qkv, bf16 *q, bf16 *kc, bf16 *vc, const int32_t *seq,
                              const int32_t *pos, int Hq, int Hk, int hd, int max_len,
                              const double *inv_freq, bf16 *packed, const float *qn,
                              const float *kn, double eps) {
  pdl_wait();
  const int lane = threadIdx.x & 31, h = blockIdx.y * kQkWarps + (threadIdx.x >> 5);
  if (h >= Hq + 2 * Hk) return; /* the whole warp */
  const long long r = blockIdx.x, nq = (long long)(Hq + 2 * Hk) * hd;
  const float *src = qkv + r * nq + (long long)h * hd;
  const long long cbase = ((long long)seq[r] * max_len + pos[r]) * (long long)Hk * hd;
  bf16 *pk = packed ? packed + r * nq + (long long)h * hd : NULL;
  if (h >= Hq + Hk) {
    bf16 *dst = vc + cbase + (long long)(h - Hq - Hk) * hd;
    for (int e = lane; e < hd; e += 32) {
      const bf16 v = __float2bfloat16_rn(src[e]);
      dst[e] = v;
      if (pk) pk[e] = v;
    }
    return;
  }
  double ss = 0.0;
  for (int e = lane; e < hd; e += 32) ss += (double)src[e] * src[e];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float rs = (float)(1.0 / sqrt(ss / (double)hd + eps));
  const float *g = h < Hq ? qn : kn;
  bf16 *dst = h < Hq ? q + r * (long long)Hq * hd + (long long)h * hd
                     : kc + cbase + (long long)(h - Hq) * hd;
  const double p = (double)pos[r];
  for (int j = lane; j < hd / 2; j += 32) {
    float o0 = src[2 * j] * rs * g[2 * j], o1 = src[2 * j + 1] * rs * g[2 * j + 1];
    if (inv_freq) rope_pair(o0, o1, p, inv_freq[j], &o0, &o1);
    dst[2 * j] = __float2bfloat16_rn(o0);
    dst[2 * j + 1] = __float2bfloat16_rn(o1);
    if (pk) {
      pk[2 * j] = dst[2 * j];
      pk[2 * j + 1] = dst[2 * j + 1];
    }
  }
}

/* ----------------------------------------------------------- activations */

/* The activations after an unfused linear, from its f32 result z: SwiGLU
 * and GeGLU of (gate, up) pairs into n values, GELU of n values. */
template <coda_decode_out KIND>
__global__ void activation_kernel(bf16 *y, const float *z, long long n) {
  pdl_wait();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    if (KIND == CODA_DECODE_OUT_SWIGLU) y[i] = silu_mul(z[2 * i], z[2 * i + 1]);
    else if (KIND == CODA_DECODE_OUT_GEGLU) y[i] = __float2bfloat16_rn(gelu_tanh(z[2 * i]) * z[2 * i + 1]);
    else y[i] = __float2bfloat16_rn(gelu_tanh(z[i]));
  }
}

} // namespace

/* ---------------------------------------------------------- entry points */

namespace {

coda_status rmsnorm(coda_context ctx, bf16 *h, const float *x, const int32_t *rows,
                    const float *w, const float *b, int64_t M, int64_t D, double eps) {
  return launch(ctx, b ? "LayerNorm" : "RMSNorm", rmsnorm_kernel, dim3((unsigned)M),
                dim3(kNormThreads), 0, h, x, rows, w, b, (long long)D, eps);
}

/* The unfused F32 result y = x · wᵀ (+ y). */
coda_status linear_f32(coda_context ctx, float *y, const bf16 *x, const bf16 *w, int64_t M,
                       int64_t N, int64_t K, int accumulate) {
  if (M > 16 && K % 8 == 0 && N % 4 == 0) {
    /* enough rows for the backend's GEMM, D = x · wᵀ (+ D) */
    coda_tensor A = {(void *)x, CODA_BF16, M, K, K};
    coda_tensor B = {(void *)w, CODA_BF16, N, K, K};
    coda_tensor D = {y, CODA_F32, M, N, N};
    return coda_cuda_gemm_path(ctx, CODA_N, &A, CODA_T, &B, &D, 1.0f, accumulate);
  }
  /* few rows (or shapes the GEMMs do not take): 16 rows per pass */
  for (int64_t m0 = 0; m0 < M; m0 += 16) {
    const int rows = (int)(M - m0 < 16 ? M - m0 : 16);
    coda_status s = launch_gemv(ctx, y + m0 * N, x + m0 * K, w, rows, N, K, accumulate);
    if (s) return s;
  }
  return CODA_OK;
}

} // namespace

extern "C" coda_status coda_cuda_decode_linear(coda_context ctx, const coda_decode_linear_job *j) {
  const int64_t M = j->M, N = j->N, K = j->K;
  if (M == 0 || N == 0) return CODA_OK;
  const coda_decode_out out = j->out;
  if ((out == CODA_DECODE_OUT_SWIGLU || out == CODA_DECODE_OUT_GEGLU ||
       out == CODA_DECODE_OUT_ROPE) && N % 2)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "decode linear: %lld columns (pairs)",
                     (long long)N);
  if (out == CODA_DECODE_OUT_ROPE && !j->q_norm != !j->k_norm)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "decode linear: QK-norm needs both q_norm "
                     "and k_norm (or neither)");
  if (j->post_norm && (out != CODA_DECODE_OUT_F32 || !j->res))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "decode linear: a post-norm takes the F32 "
                     "store and its residual rows (res)");
  if (j->norm_b && !j->norm_w)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "decode linear: a LayerNorm bias without "
                     "its weights");
  const bf16 *w = (const bf16 *)j->w, *x = (const bf16 *)j->x;
  coda_status s = CODA_OK;
  /* one row: the GEMV normalizes it itself (h is left unwritten), unless
   * CODA_DECODE_NORM=separate or the norm is a LayerNorm; else the norm
   * kernel writes h first */
  int row_path = M == 1 && K % 8 == 0 && N < 0x7fffffffLL && (uintptr_t)w % 16 == 0 &&
                 (!j->norm_w || ((uintptr_t)j->xf | (uintptr_t)j->norm_w) % 16 == 0);
  row_norm norm = {};
  if (j->norm_w && !j->norm_b && row_path && !ctx->knobs.decode_norm_separate) {
    norm = {j->xf, j->norm_w, j->norm_rows, j->eps};
    x = NULL;
  } else if (j->norm_w) {
    s = rmsnorm(ctx, (bf16 *)j->h, j->xf, j->norm_rows, j->norm_w, j->norm_b, M, K, j->eps);
    x = (const bf16 *)j->h;
  }
  row_path = row_path && (norm.w || (uintptr_t)x % 16 == 0);
  lin_out o = {};
  o.N = N;
  o.y = j->y;
  o.accumulate = j->accumulate;
  o.yb = (bf16 *)j->yb;
  if (out == CODA_DECODE_OUT_ROPE) {
    const coda_decode_rows *r = j->rows;
    o.seq = r->seq;
    o.pos = r->pos;
    o.Hq = r->Hq;
    o.Hk = r->Hk;
    o.hd = r->hd;
    o.max_len = r->max_len;
    o.inv_freq = j->inv_freq;
    o.q = (bf16 *)j->q;
    o.kc = (bf16 *)j->kc;
    o.vc = (bf16 *)j->vc;
    o.packed = (bf16 *)j->packed;
  }
  if (s) return s;
  const int aligned = ((uintptr_t)x | (uintptr_t)w) % 16 == 0;
  /* The stores the GEMVs fuse are Llama's: SwiGLU, and RoPE with the cache
   * append. Every other step (Qwen3's QK-norm, a bias, GeGLU, GELU, no
   * RoPE, a post-norm) has the product stored as f32 rows into y and a
   * kernel of its own after it; Llama's path is untouched. A bias is
   * written into y first and the product added to it. */
  const int qkn = out == CODA_DECODE_OUT_ROPE && j->q_norm;
  const int unfused = qkn || j->bias || out == CODA_DECODE_OUT_GEGLU ||
                      out == CODA_DECODE_OUT_GELU || j->post_norm ||
                      (out == CODA_DECODE_OUT_ROPE && !j->inv_freq);
  const coda_decode_out kind = unfused ? CODA_DECODE_OUT_F32 : out;
  if (unfused) {
    const int acc = out == CODA_DECODE_OUT_F32 && !j->post_norm && j->accumulate;
    o.accumulate = acc;
    if (j->bias) {
      s = launch(ctx, "bias", bias_kernel, dim3(grid_of(M * N, 256)), dim3(256), 0, j->y, j->bias,
                 (long long)M, (long long)N, acc);
      o.accumulate = 1;
    }
    if (s) return s;
  }
  /* one row: one warp (or a few) per column streams the weights fastest */
  if (row_path) {
    switch (kind) {
    case CODA_DECODE_OUT_SWIGLU: return launch_gemv_row<CODA_DECODE_OUT_SWIGLU>(ctx, o, x, w, K, norm);
    case CODA_DECODE_OUT_ROPE: return launch_gemv_row<CODA_DECODE_OUT_ROPE>(ctx, o, x, w, K, norm);
    default: s = launch_gemv_row<CODA_DECODE_OUT_F32>(ctx, o, x, w, K, norm);
    }
  } else if (M >= 2 && M <= 64 && K % 32 == 0 && N <= 0x7fffffffLL * 8 && aligned) {
    const int m = (int)M;
    switch (kind) {
    case CODA_DECODE_OUT_SWIGLU: return launch_gemv_mma<CODA_DECODE_OUT_SWIGLU>(ctx, o, x, w, m, K);
    case CODA_DECODE_OUT_ROPE: return launch_gemv_mma<CODA_DECODE_OUT_ROPE>(ctx, o, x, w, m, K);
    default: s = launch_gemv_mma<CODA_DECODE_OUT_F32>(ctx, o, x, w, m, K);
    }
  } else {
    /* the GEMM or the plain GEMV into y, then the store's own kernel */
    s = linear_f32(ctx, j->y, x, w, M, N, K, kind == CODA_DECODE_OUT_F32 ? o.accumulate : 0);
  }
  if (s) return s;
  const dim3 grid_pairs(grid_of(M * N / 2, 256)), grid_all(grid_of(M * N, 256));
  switch (out) {
  case CODA_DECODE_OUT_F32:
    if (!j->post_norm) return CODA_OK;
    return launch(ctx, "post-norm and residual add", norm_add_kernel, dim3((unsigned)M),
                  dim3(kNormThreads), 0, j->res, (const float *)j->y, j->post_norm, (long long)N,
                  j->eps);
  case CODA_DECODE_OUT_SWIGLU:
    return launch(ctx, "SwiGLU", activation_kernel<CODA_DECODE_OUT_SWIGLU>, grid_pairs, dim3(256),
                  0, o.yb, (const float *)j->y, (long long)(M * N / 2));
  case CODA_DECODE_OUT_GEGLU:
    return launch(ctx, "GeGLU", activation_kernel<CODA_DECODE_OUT_GEGLU>, grid_pairs, dim3(256),
                  0, o.yb, (const float *)j->y, (long long)(M * N / 2));
  case CODA_DECODE_OUT_GELU:
    return launch(ctx, "GELU", activation_kernel<CODA_DECODE_OUT_GELU>, grid_all, dim3(256), 0,
                  o.yb, (const float *)j->y, (long long)(M * N));
  case CODA_DECODE_OUT_ROPE: break;
  }
  if (qkn) {
    const unsigned gy = (unsigned)((o.Hq + 2 * o.Hk + kQkWarps - 1) / kQkWarps);
    return launch(ctx, "QK-norm, RoPE and cache append", qknorm_rope_append_kernel,
                  dim3((unsigned)M, gy), dim3(32 * kQkWarps), 0, (const float *)j->y, o.q, o.kc,
                  o.vc, o.seq, o.pos, o.Hq, o.Hk, o.hd, o.max_len, o.inv_freq, o.packed,
                  j->q_norm, j->k_norm, j->eps);
  }
  /* a row's pairs and values over several blocks: the double sincos of a
   * one-row step would keep one SM busy for microseconds */
  const int items = (o.Hq + o.Hk) * (o.hd / 2) + o.Hk * o.hd;
  const int per_row = M >= 64 ? 1 : (items + 127) / 128;
  return launch(ctx, "RoPE and cache append", rope_append_kernel,
                dim3((unsigned)M, (unsigned)per_row), dim3(128), 0, (const float *)j->y, o.q, o.kc,
                o.vc, o.seq, o.pos, o.Hq, o.Hk, o.hd, o.max_len, o.inv_freq, o.packed);
}
