/* The unfused passes of bench_fused: what a framework runs after a plain
 * GEMM, one kernel per operator (each reads and writes device memory),
 * written as ordinary vectorized CUDA (16-byte loads and stores, fp32 math,
 * bf16 storage), plus random fills and the comparison reduction. */
#include "unfused.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;
constexpr int kMaxVec = 4; /* row passes: up to 4 x 8 columns per thread (N <= 8192) */

__device__ __forceinline__ void unpack8(const uint4 &v, float f[8]) {
  const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  uint4 v;
  __nv_bfloat162 *p = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
  for (int i = 0; i < 4; i++) p[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}
__device__ __forceinline__ void unpack4(const uint2 &v, float f[4]) {
  const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
  for (int i = 0; i < 2; i++) {
    float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ uint2 pack4(const float f[4]) {
  uint2 v;
  __nv_bfloat162 *p = reinterpret_cast<__nv_bfloat162 *>(&v);
  p[0] = __floats2bfloat162_rn(f[0], f[1]);
  p[1] = __floats2bfloat162_rn(f[2], f[3]);
  return v;
}
__device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
/* Sum over the block (kThreads threads); sh holds 9 floats. */
__device__ float block_sum(float v, float *sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  v = warp_sum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < kThreads / 32 ? sh[lane] : 0.f;
    t = warp_sum(t);
    if (lane == 0) sh[8] = t;
  }
  __syncthreads();
  return sh[8];
}

__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void k_fill(void *p, int dtype, size_t n, uint64_t seed, float scale, int positive) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint64_t h = mix(seed * 0x2545f4914f6cdd1dull + i);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    float v = scale * (0.1f + 0.9f * u);
    if (!positive && (h & 1)) v = -v;
    if (dtype == 2) ((float *)p)[i] = v;
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
  }
}

__global__ void k_targets(int32_t *p, size_t n, uint64_t seed, int V) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint64_t h = mix(seed * 0x2545f4914f6cdd1dull + i);
    p[i] = (h & 31) == 0 ? -100 : (int32_t)((h >> 20) % (uint64_t)V);
  }
}

__global__ void k_rowscale(uint4 *dst, const uint4 *src, const float *r, int64_t nv, int64_t kv) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
       i += (int64_t)gridDim.x * blockDim.x) {
    float f[8];
    unpack8(src[i], f);
    const float s = r[i / kv];
#pragma unroll
    for (int k = 0; k < 8; k++) f[k] *= s;
    dst[i] = pack8(f);
  }
}

__global__ void k_add(uint4 *out, const uint4 *a, const uint4 *b, int64_t nv) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
       i += (int64_t)gridDim.x * blockDim.x) {
    float x[8], y[8];
    unpack8(a[i], x);
    unpack8(b[i], y);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] += y[k];
    out[i] = pack8(x);
  }
}

__global__ void __launch_bounds__(kThreads) k_rmsnorm(uint4 *h, float *rstd, const uint4 *x,
                                                      const uint4 *w, int64_t N, float eps) {
  __shared__ float sh[9];
  const int64_t m = blockIdx.x, nv = N / 8;
  float v[kMaxVec][8];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxVec; i++) {
    const int64_t c = threadIdx.x + (int64_t)i * kThreads;
    if (c < nv) {
      unpack8(x[m * nv + c], v[i]);
#pragma unroll
      for (int k = 0; k < 8; k++) ss += v[i][k] * v[i][k];
    }
  }
  const float r = rsqrtf(block_sum(ss, sh) / (float)N + eps);
#pragma unroll
  for (int i = 0; i < kMaxVec; i++) {
    const int64_t c = threadIdx.x + (int64_t)i * kThreads;
    if (c < nv) {
      float wf[8];
      unpack8(w[c], wf);
#pragma unroll
      for (int k = 0; k < 8; k++) v[i][k] *= r * wf[k];
      h[m * nv + c] = pack8(v[i]);
    }
  }
  if (threadIdx.x == 0) rstd[m] = r;
}

__device__ __forceinline__ float sigm(float g) { return 1.f / (1.f + expf(-g)); }

/* 4 (g, u) pairs per thread: 8 inputs, 4 outputs. */
__global__ void k_swiglu(uint2 *y, const uint4 *t, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
       i += (int64_t)gridDim.x * blockDim.x) {
    float z[8], o[4];
    unpack8(t[i], z);
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = z[2 * k] * sigm(z[2 * k]) * z[2 * k + 1];
    y[i] = pack4(o);
  }
}

__global__ void k_swiglu_bwd(uint4 *dz, const uint4 *z, const uint2 *dy, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
       i += (int64_t)gridDim.x * blockDim.x) {
    float zz[8], d[4], o[8];
    unpack8(z[i], zz);
    unpack4(dy[i], d);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float g = zz[2 * k], u = zz[2 * k + 1], s = sigm(g);
      o[2 * k] = d[k] * u * (s * (1.f + g * (1.f - s)));
      o[2 * k + 1] = d[k] * g * s;
    }
    dz[i] = pack8(o);
  }
}

__global__ void k_rope(uint16_t *out, const uint16_t *t, const float *cs, const float *sn,
                       int64_t M, int64_t ld, int64_t nqk, int hd, int seq) {
  const int64_t per_row = nqk / 8, nv = M * per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t m = i / per_row, c0 = (i % per_row) * 8;
    const int pos = (int)(m % seq);
    float v[8];
    unpack8(*reinterpret_cast<const uint4 *>(t + m * ld + c0), v);
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int j = (int)(((c0 + 2 * q) % hd) / 2);
      const float c = cs[(int64_t)pos * (hd / 2) + j], s = sn[(int64_t)pos * (hd / 2) + j];
      const float x = v[2 * q], y = v[2 * q + 1];
      v[2 * q] = x * c - y * s;
      v[2 * q + 1] = x * s + y * c;
    }
    *reinterpret_cast<uint4 *>(out + m * ld + c0) = pack8(v);
  }
}

__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

__global__ void __launch_bounds__(kThreads) k_ce(float *lse, float *pick, const uint4 *logits,
                                                 const int32_t *tgt, int64_t V) {
  __shared__ float shm[kThreads / 32], shs[kThreads / 32];
  const int64_t m = blockIdx.x, nv = V / 8;
  float mx = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < nv; c += kThreads) {
    float f[8];
    unpack8(logits[m * nv + c], f);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (f[k] > mx) {
        s = s * expf(mx - f[k]) + 1.f;
        mx = f[k];
      } else {
        s += expf(f[k] - mx);
      }
    }
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mx, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge(mx, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    shm[warp] = mx;
    shs[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; w++) lse_merge(mx, s, shm[w], shs[w]);
    lse[m] = mx + logf(s);
    const int32_t t = tgt[m];
    pick[m] = t >= 0 && t < V ? bf(reinterpret_cast<const uint16_t *>(logits)[m * V + t]) : 0.f;
  }
}

constexpr int kBwdRows = UF_BWD_ROWS;

/* VPT: 8-column vectors per thread (N <= 8 * VPT * kThreads), so that the
 * row's values stay in registers without costing occupancy. */
template <int VPT>
__global__ void __launch_bounds__(kThreads)
    k_rmsnorm_bwd(uint4 *dxn, float *part, float *dot, const uint4 *dh, const uint4 *x,
                  const uint4 *w, const float *r, int64_t M, int64_t N) {
  __shared__ float sh[9];
  const int64_t nv = N / 8, m0 = (int64_t)blockIdx.x * kBwdRows;
  const float invN = 1.f / (float)N;
  float wf[VPT][8], dw[VPT][8];
#pragma unroll
  for (int i = 0; i < VPT; i++) {
    const int64_t c = threadIdx.x + (int64_t)i * kThreads;
#pragma unroll
    for (int k = 0; k < 8; k++) dw[i][k] = 0.f, wf[i][k] = 0.f;
    if (c < nv) unpack8(w[c], wf[i]);
  }
  for (int64_t m = m0; m < m0 + kBwdRows && m < M; m++) {
    const float rm = r[m];
    float g[VPT][8], xh[VPT][8], d = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; i++) {
      const int64_t c = threadIdx.x + (int64_t)i * kThreads;
      if (c < nv) {
        float a[8];
        unpack8(dh[m * nv + c], a);
        unpack8(x[m * nv + c], xh[i]);
#pragma unroll
        for (int k = 0; k < 8; k++) {
          xh[i][k] *= rm;
          g[i][k] = a[k] * wf[i][k];
          d += g[i][k] * xh[i][k];
          dw[i][k] += a[k] * xh[i][k];
        }
      }
    }
    d = block_sum(d, sh);
#pragma unroll
    for (int i = 0; i < VPT; i++) {
      const int64_t c = threadIdx.x + (int64_t)i * kThreads;
      if (c < nv) {
        float o[8];
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = rm * (g[i][k] - xh[i][k] * d * invN);
        dxn[m * nv + c] = pack8(o);
      }
    }
    if (threadIdx.x == 0) dot[m] = d;
  }
#pragma unroll
  for (int i = 0; i < VPT; i++) {
    const int64_t c = threadIdx.x + (int64_t)i * kThreads;
    if (c < nv) {
      float4 *p = reinterpret_cast<float4 *>(part + (int64_t)blockIdx.x * N + c * 8);
      p[0] = make_float4(dw[i][0], dw[i][1], dw[i][2], dw[i][3]);
      p[1] = make_float4(dw[i][4], dw[i][5], dw[i][6], dw[i][7]);
    }
  }
}

/* 32 columns per block, 8 warps over the partial rows, combined in a
 * fixed order (deterministic). */
__global__ void __launch_bounds__(kThreads) k_colsum(float *dw, const float *part, int64_t nb,
                                                     int64_t N) {
  __shared__ float sh[8][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n = (int64_t)blockIdx.x * 32 + lane;
  float s = 0.f;
  if (n < N) {
#pragma unroll 4
    for (int64_t b = warp; b < nb; b += 8) s += part[b * N + n];
  }
  sh[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && n < N) {
    float t = 0.f;
    for (int k = 0; k < 8; k++) t += sh[k][lane];
    dw[n] = t;
  }
}

__device__ __forceinline__ float load(const void *p, int dt, int64_t i) {
  return dt == 2 ? ((const float *)p)[i] : bf(((const uint16_t *)p)[i]);
}

/* res: max |a·ra − b| and max |b| as float bits (non-negative floats order
 * as unsigned integers), and the count of non-finite differences. */
__global__ void k_compare(unsigned *res, const void *a, int adt, int64_t lda, const float *ra,
                          const void *b, int bdt, int64_t ldb, int64_t rows, int64_t cols) {
  float md = 0.f, mb = 0.f;
  unsigned bad = 0;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float av = load(a, adt, r * lda + c), bv = load(b, bdt, r * ldb + c);
    if (ra) av *= ra[r];
    const float d = fabsf(av - bv);
    if (!isfinite(d)) bad++;
    else md = fmaxf(md, d);
    if (isfinite(bv)) mb = fmaxf(mb, fabsf(bv));
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    md = fmaxf(md, __shfl_xor_sync(0xffffffffu, md, o));
    mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, o));
    bad += __shfl_xor_sync(0xffffffffu, bad, o);
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&res[0], __float_as_uint(md));
    atomicMax(&res[1], __float_as_uint(mb));
    atomicAdd(&res[2], bad);
  }
}

unsigned grid_for(int64_t n) {
  int64_t g = (n + kThreads - 1) / kThreads;
  if (g > 132 * 32) g = 132 * 32; /* grid-stride beyond a few waves */
  return (unsigned)(g < 1 ? 1 : g);
}

int last() { return (int)cudaGetLastError(); }

}  // namespace

extern "C" {

int uf_fill(void *p, int dtype, size_t n, uint64_t seed, float scale, int positive) {
  k_fill<<<grid_for((int64_t)n), kThreads>>>(p, dtype, n, seed, scale, positive);
  return last();
}
int uf_fill_targets(int32_t *p, size_t n, uint64_t seed, int V) {
  k_targets<<<grid_for((int64_t)n), kThreads>>>(p, n, seed, V);
  return last();
}
int uf_rowscale(uint16_t *dst, const uint16_t *src, const float *r, int64_t M, int64_t K) {
  const int64_t nv = M * K / 8;
  k_rowscale<<<grid_for(nv), kThreads>>>((uint4 *)dst, (const uint4 *)src, r, nv, K / 8);
  return last();
}
int uf_add(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
  const int64_t nv = (int64_t)n / 8;
  k_add<<<grid_for(nv), kThreads>>>((uint4 *)out, (const uint4 *)a, (const uint4 *)b, nv);
  return last();
}
int uf_rmsnorm(uint16_t *h, float *rstd, const uint16_t *x, const uint16_t *w, int64_t M,
               int64_t N, float eps) {
  if (N % 8 || N > 8 * kMaxVec * kThreads) return (int)cudaErrorInvalidValue;
  k_rmsnorm<<<(unsigned)M, kThreads>>>((uint4 *)h, rstd, (const uint4 *)x, (const uint4 *)w, N,
                                       eps);
  return last();
}
int uf_swiglu(uint16_t *y, const uint16_t *t, int64_t M, int64_t F) {
  const int64_t n4 = M * F / 4;
  k_swiglu<<<grid_for(n4), kThreads>>>((uint2 *)y, (const uint4 *)t, n4);
  return last();
}
int uf_swiglu_bwd(uint16_t *dz, const uint16_t *z, const uint16_t *dy, int64_t M, int64_t F) {
  const int64_t n4 = M * F / 4;
  k_swiglu_bwd<<<grid_for(n4), kThreads>>>((uint4 *)dz, (const uint4 *)z, (const uint2 *)dy, n4);
  return last();
}
int uf_rope(uint16_t *out, const uint16_t *t, const float *cs, const float *sn, int64_t M,
            int64_t ld, int64_t nqk, int hd, int seq) {
  if (nqk % 8 || ld % 8 || hd % 8) return (int)cudaErrorInvalidValue;
  k_rope<<<grid_for(M * (nqk / 8)), kThreads>>>(out, t, cs, sn, M, ld, nqk, hd, seq);
  return last();
}
int uf_ce(float *lse, float *pick, const uint16_t *logits, const int32_t *tgt, int64_t M,
          int64_t V) {
  if (V % 8) return (int)cudaErrorInvalidValue;
  k_ce<<<(unsigned)M, kThreads>>>(lse, pick, (const uint4 *)logits, tgt, V);
  return last();
}
int uf_rmsnorm_bwd(uint16_t *dxn, float *part, float *dot, const uint16_t *dh,
                   const uint16_t *x, const uint16_t *w, const float *r, int64_t M, int64_t N) {
  if (N % 8 || N > 8 * kMaxVec * kThreads) return (int)cudaErrorInvalidValue;
  const unsigned nb = (unsigned)((M + kBwdRows - 1) / kBwdRows);
  const int vpt = (int)((N / 8 + kThreads - 1) / kThreads);
  uint4 *o = (uint4 *)dxn;
  const uint4 *a = (const uint4 *)dh, *b = (const uint4 *)x, *c = (const uint4 *)w;
  if (vpt <= 1) k_rmsnorm_bwd<1><<<nb, kThreads>>>(o, part, dot, a, b, c, r, M, N);
  else if (vpt == 2) k_rmsnorm_bwd<2><<<nb, kThreads>>>(o, part, dot, a, b, c, r, M, N);
  else k_rmsnorm_bwd<4><<<nb, kThreads>>>(o, part, dot, a, b, c, r, M, N);
  return last();
}
int uf_colsum(float *dw, const float *part, int64_t nb, int64_t N) {
  k_colsum<<<(unsigned)((N + 31) / 32), kThreads>>>(dw, part, nb, N);
  return last();
}

int uf_compare(double res[3], const void *a, int adt, int64_t lda, const float *ra,
               const void *b, int bdt, int64_t ldb, int64_t rows, int64_t cols) {
  unsigned *d = NULL, h[3] = {0, 0, 0};
  cudaError_t e = cudaMalloc(&d, sizeof h);
  if (e == cudaSuccess) e = cudaMemset(d, 0, sizeof h);
  if (e == cudaSuccess) {
    k_compare<<<grid_for(rows * cols), kThreads>>>(d, a, adt, lda, ra, b, bdt, ldb, rows, cols);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  float f0, f1;
  memcpy(&f0, &h[0], 4);
  memcpy(&f1, &h[1], 4);
  res[0] = f0;
  res[1] = f1;
  res[2] = h[2];
  return (int)e;
}

const char *uf_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

}  // extern "C"
