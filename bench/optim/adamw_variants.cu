/* The trainer's AdamW pass over all parameters (adamw_multi_kernel and
 * adamw_bf16_kernel of src/backends/cuda/train_kernels.cu) and its
 * variants, at the parameter layout of a model shape (the segments of
 * coda's flat parameter buffer: each matrix decays, each norm weight does
 * not). The pass is bandwidth-bound: fp32 state moves 30 bytes a parameter
 * (w, m, v read and written, g read, the bf16 copy written), bf16 state 14
 * (w, m, v bf16 read and written, g fp32 read). The table gives the median
 * time against that floor at the device-to-device copy bandwidth measured
 * in the same run. Every variant is checked first: its bits against the
 * library's kernel (v0) and, on a sample, against a CPU reference (the
 * fp32 state's update in double as model/optim.c computes it, within one
 * float ulp: nvcc contracts the double products into FMAs, which moves
 * some roundings; the bf16 state's in fp32 with the shared stochastic
 * rounding, bit for bit, as no operation there is contracted).
 *   v0  the library's kernel: a binary search of the segment table per
 *       four elements, grid capped at 8192 blocks
 *   v1  the segment carried from one iteration to the next (the index only
 *       grows), the gradient read with a streaming load
 *   v2  v1 with G groups of four per thread and iteration, every load
 *       issued before the arithmetic
 *   grid: "cap" (8192 blocks) or "sm" (the resident blocks of one wave)
 *   v2q (fp32 state) v2 G=2 with the two quotients by the bias corrections
 *       as products (lr/c1 and 1/c2 computed once): the bits it changes
 *   f32 (fp32 state only, not bit-compatible): the arithmetic in fp32, to
 *       see what the double-precision update costs
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I../../src adamw_variants.cu -o adamw_variants
 * Run:   ./adamw_variants [1b|d512|8b] */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/bf16_round.h"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

struct Coef {
  double b1, b2, c1, c2, lr, eps, shrink, gscale;
  int scale_g;
};

__host__ __device__ __forceinline__ void adamw_one(float &w, float g, float &m, float &v,
                                                   const Coef &c, double shrink) {
  double gi = c.scale_g ? (double)(float)((double)g * c.gscale) : (double)g;
  double mi = c.b1 * (double)m + (1.0 - c.b1) * gi;
  double vi = c.b2 * (double)v + (1.0 - c.b2) * gi * gi;
  m = (float)mi;
  v = (float)vi;
  double wi = (double)w * shrink;
  wi -= c.lr * (mi / c.c1) / (sqrt(vi / c.c2) + c.eps);
  w = (float)wi;
}

__device__ __forceinline__ int first_segment_after(const long long *seg, int nseg, long long i0) {
  int lo = 0, hi = nseg - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (seg[2 * mid] > i0) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* ---- fp32 state ---- */

__global__ void f32_v0(float *w, const float *g, float *m, float *v, __nv_bfloat16 *wb,
                       long long n, const long long *seg, int nseg, Coef c) {
  const long long stride = 4LL * gridDim.x * blockDim.x;
  for (long long i0 = 4LL * (blockIdx.x * (long long)blockDim.x + threadIdx.x); i0 < n;
       i0 += stride) {
    int k = first_segment_after(seg, nseg, i0);
    float wv[4], gv[4], mv[4], vv[4];
    const int whole = i0 + 4 <= n;
    if (whole) {
      *(float4 *)wv = *(const float4 *)(w + i0);
      *(float4 *)gv = *(const float4 *)(g + i0);
      *(float4 *)mv = *(const float4 *)(m + i0);
      *(float4 *)vv = *(const float4 *)(v + i0);
    } else {
      for (int e = 0; e < 4; e++)
        if (i0 + e < n) wv[e] = w[i0 + e], gv[e] = g[i0 + e], mv[e] = m[i0 + e], vv[e] = v[i0 + e];
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (i0 + e >= n) break;
      while (k + 1 < nseg && i0 + e >= seg[2 * k]) k++;
      adamw_one(wv[e], gv[e], mv[e], vv[e], c, seg[2 * k + 1] ? c.shrink : 1.0);
    }
    if (whole) {
      *(float4 *)(w + i0) = *(const float4 *)wv;
      *(float4 *)(m + i0) = *(const float4 *)mv;
      *(float4 *)(v + i0) = *(const float4 *)vv;
      __nv_bfloat162 lo2 = __floats2bfloat162_rn(wv[0], wv[1]);
      __nv_bfloat162 hi2 = __floats2bfloat162_rn(wv[2], wv[3]);
      uint2 packed;
      packed.x = *(const unsigned *)&lo2;
      packed.y = *(const unsigned *)&hi2;
      *(uint2 *)(wb + i0) = packed;
    } else {
      for (int e = 0; e < 4; e++)
        if (i0 + e < n) {
          w[i0 + e] = wv[e], m[i0 + e] = mv[e], v[i0 + e] = vv[e];
          wb[i0 + e] = __float2bfloat16_rn(wv[e]);
        }
    }
  }
}

/* The decay flag of element i: k is the segment of an earlier element
 * (the indices a thread visits only grow), moved forward as needed. */
__device__ __forceinline__ int decays(const long long *__restrict__ seg, int nseg, int &k,
                                      long long i) {
  while (k + 1 < nseg && i >= __ldg(seg + 2 * k)) k++;
  return (int)__ldg(seg + 2 * k + 1);
}

template <int G, int MODE>
__global__ void __launch_bounds__(256) f32_v2(float *__restrict__ w, const float *__restrict__ g,
                                              float *__restrict__ m, float *__restrict__ v,
                                              __nv_bfloat16 *__restrict__ wb, long long n,
                                              const long long *__restrict__ seg, int nseg,
                                              Coef c) {
  const long long nt = (long long)gridDim.x * blockDim.x;
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  int k[G];
#pragma unroll
  for (int j = 0; j < G; j++) k[j] = 0;
  for (long long base = 4 * t; base < n; base += 4 * G * nt) {
    float4 wv[G], gv[G], mv[G], vv[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
      const long long i0 = base + 4 * j * nt;
      if (i0 + 4 <= n) {
        wv[j] = *(const float4 *)(w + i0);
        gv[j] = __ldcs((const float4 *)(g + i0));
        mv[j] = *(const float4 *)(m + i0);
        vv[j] = *(const float4 *)(v + i0);
      }
    }
#pragma unroll
    for (int j = 0; j < G; j++) {
      const long long i0 = base + 4 * j * nt;
      if (i0 >= n) break;
      float *pw = &wv[j].x, *pg = &gv[j].x, *pm = &mv[j].x, *pv = &vv[j].x;
      if (i0 + 4 > n)
        for (int e = 0; e < 4; e++)
          if (i0 + e < n) pw[e] = w[i0 + e], pg[e] = g[i0 + e], pm[e] = m[i0 + e], pv[e] = v[i0 + e];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        if (i0 + e >= n) break;
        const int d = decays(seg, nseg, k[j], i0 + e);
        if (MODE == 1) {
          const float gi = pg[e];
          const float mi = (float)c.b1 * pm[e] + (float)(1.0 - c.b1) * gi;
          const float vi = (float)c.b2 * pv[e] + (float)(1.0 - c.b2) * gi * gi;
          pm[e] = mi, pv[e] = vi;
          pw[e] = pw[e] * (d ? (float)c.shrink : 1.0f) -
                  (float)(c.lr / c.c1) * mi / (sqrtf(vi * (float)(1.0 / c.c2)) + (float)c.eps);
        } else if (MODE == 2) {
          const double gi = c.scale_g ? (double)(float)((double)pg[e] * c.gscale) : (double)pg[e];
          const double mi = c.b1 * (double)pm[e] + (1.0 - c.b1) * gi;
          const double vi = c.b2 * (double)pv[e] + (1.0 - c.b2) * gi * gi;
          pm[e] = (float)mi, pv[e] = (float)vi;
          pw[e] = (float)((double)pw[e] * (d ? c.shrink : 1.0) -
                          (c.lr / c.c1) * mi / (sqrt(vi * (1.0 / c.c2)) + c.eps));
        } else {
          adamw_one(pw[e], pg[e], pm[e], pv[e], c, d ? c.shrink : 1.0);
        }
      }
      if (i0 + 4 <= n) {
        *(float4 *)(w + i0) = wv[j];
        *(float4 *)(m + i0) = mv[j];
        *(float4 *)(v + i0) = vv[j];
        __nv_bfloat162 lo2 = __floats2bfloat162_rn(wv[j].x, wv[j].y);
        __nv_bfloat162 hi2 = __floats2bfloat162_rn(wv[j].z, wv[j].w);
        uint2 packed;
        packed.x = *(const unsigned *)&lo2;
        packed.y = *(const unsigned *)&hi2;
        *(uint2 *)(wb + i0) = packed;
      } else {
        for (int e = 0; e < 4; e++)
          if (i0 + e < n) {
            w[i0 + e] = pw[e], m[i0 + e] = pm[e], v[i0 + e] = pv[e];
            wb[i0 + e] = __float2bfloat16_rn(pw[e]);
          }
      }
    }
  }
}

/* ---- bf16 state ---- */

struct KC {
  float k[8];
};

__device__ __forceinline__ void bf16_one(uint16_t &w, float g, uint16_t &m, uint16_t &v,
                                         const KC &kc, float shrink, double gscale, int scale_g,
                                         unsigned long long seed, long long t,
                                         unsigned long long idx) {
  const unsigned long long r = coda_bf16_sr_hash(seed, t, idx);
  const float gi = scale_g ? (float)((double)g * gscale) : g;
  const float mi = __fadd_rn(__fmul_rn(kc.k[0], coda_bf16_widen(m)), __fmul_rn(kc.k[1], gi));
  const float vi =
      __fadd_rn(__fmul_rn(kc.k[2], coda_bf16_widen(v)), __fmul_rn(__fmul_rn(kc.k[3], gi), gi));
  const float wi =
      __fsub_rn(__fmul_rn(coda_bf16_widen(w), shrink),
                __fdiv_rn(__fmul_rn(kc.k[4], mi), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, kc.k[5])), kc.k[7])));
  w = coda_bf16_sr(wi, (uint32_t)r);
  m = coda_bf16_sr(mi, (uint32_t)(r >> 16));
  v = coda_bf16_sr(vi, (uint32_t)(r >> 32));
}

__global__ void b16_v0(uint16_t *w, const float *g, uint16_t *m, uint16_t *v, long long n,
                       const long long *seg, int nseg, KC kc, double gscale, int scale_g,
                       unsigned long long seed, long long t) {
  const long long stride = 4LL * gridDim.x * blockDim.x;
  for (long long i0 = 4LL * (blockIdx.x * (long long)blockDim.x + threadIdx.x); i0 < n;
       i0 += stride) {
    int k = first_segment_after(seg, nseg, i0);
    uint16_t wv[4], mv[4], vv[4];
    float gv[4];
    const int whole = i0 + 4 <= n;
    if (whole) {
      *(uint2 *)wv = *(const uint2 *)(w + i0);
      *(uint2 *)mv = *(const uint2 *)(m + i0);
      *(uint2 *)vv = *(const uint2 *)(v + i0);
      *(float4 *)gv = *(const float4 *)(g + i0);
    } else {
      for (int e = 0; e < 4; e++)
        if (i0 + e < n) wv[e] = w[i0 + e], gv[e] = g[i0 + e], mv[e] = m[i0 + e], vv[e] = v[i0 + e];
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (i0 + e >= n) break;
      while (k + 1 < nseg && i0 + e >= seg[2 * k]) k++;
      bf16_one(wv[e], gv[e], mv[e], vv[e], kc, seg[2 * k + 1] ? kc.k[6] : 1.0f, gscale, scale_g,
               seed, t, (unsigned long long)(i0 + e));
    }
    if (whole) {
      *(uint2 *)(w + i0) = *(const uint2 *)wv;
      *(uint2 *)(m + i0) = *(const uint2 *)mv;
      *(uint2 *)(v + i0) = *(const uint2 *)vv;
    } else {
      for (int e = 0; e < 4; e++)
        if (i0 + e < n) w[i0 + e] = wv[e], m[i0 + e] = mv[e], v[i0 + e] = vv[e];
    }
  }
}

template <int G>
__global__ void __launch_bounds__(256) b16_v2(uint16_t *__restrict__ w, const float *__restrict__ g,
                                              uint16_t *__restrict__ m, uint16_t *__restrict__ v,
                                              long long n, const long long *__restrict__ seg,
                                              int nseg, KC kc, double gscale, int scale_g,
                                              unsigned long long seed, long long t) {
  const long long nt = (long long)gridDim.x * blockDim.x;
  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  int k[G];
#pragma unroll
  for (int j = 0; j < G; j++) k[j] = 0;
  for (long long base = 4 * tid; base < n; base += 4 * G * nt) {
    uint2 wv[G], mv[G], vv[G];
    float4 gv[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
      const long long i0 = base + 4 * j * nt;
      if (i0 + 4 <= n) {
        wv[j] = *(const uint2 *)(w + i0);
        mv[j] = *(const uint2 *)(m + i0);
        vv[j] = *(const uint2 *)(v + i0);
        gv[j] = __ldcs((const float4 *)(g + i0));
      }
    }
#pragma unroll
    for (int j = 0; j < G; j++) {
      const long long i0 = base + 4 * j * nt;
      if (i0 >= n) break;
      uint16_t *pw = (uint16_t *)&wv[j], *pm = (uint16_t *)&mv[j], *pv = (uint16_t *)&vv[j];
      float *pg = &gv[j].x;
      if (i0 + 4 > n)
        for (int e = 0; e < 4; e++)
          if (i0 + e < n) pw[e] = w[i0 + e], pg[e] = g[i0 + e], pm[e] = m[i0 + e], pv[e] = v[i0 + e];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        if (i0 + e >= n) break;
        const int d = decays(seg, nseg, k[j], i0 + e);
        bf16_one(pw[e], pg[e], pm[e], pv[e], kc, d ? kc.k[6] : 1.0f, gscale, scale_g, seed, t,
                 (unsigned long long)(i0 + e));
      }
      if (i0 + 4 <= n) {
        *(uint2 *)(w + i0) = wv[j];
        *(uint2 *)(m + i0) = mv[j];
        *(uint2 *)(v + i0) = vv[j];
      } else {
        for (int e = 0; e < 4; e++)
          if (i0 + e < n) w[i0 + e] = pw[e], m[i0 + e] = pm[e], v[i0 + e] = pv[e];
      }
    }
  }
}

/* ---- host ---- */

/* Normal draws by Box-Muller over a splitmix64 stream per element. */
__global__ void normal_fill(float *x, long long n, unsigned long long seed, float sd, int absval) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const unsigned long long r = coda_bf16_sr_hash(seed, 0, (unsigned long long)i);
    const float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = (float)((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    x[i] = absval ? fabsf(sd * z) : sd * z;
  }
}

/* The segment table of coda's flat parameter buffer for a Llama shape:
 * embedding, per layer (attn norm, qkv, out, mlp norm, gate/up, down),
 * final norm, head; {end, decays} pairs. */
static std::vector<long long> layout(const char *shape, long long *n) {
  long long L, d, hq, hkv, hd, f, V;
  if (!strcmp(shape, "d512")) L = 6, d = 512, hq = 8, hkv = 8, hd = 64, f = 2048, V = 32768;
  else if (!strcmp(shape, "8b")) L = 32, d = 4096, hq = 32, hkv = 8, hd = 128, f = 14336, V = 128256;
  else L = 16, d = 2048, hq = 32, hkv = 8, hd = 64, f = 8192, V = 32768;
  std::vector<long long> s;
  long long e = 0;
  auto add = [&](long long sz, int dec) { e += sz; s.push_back(e); s.push_back(dec); };
  add(V * d, 1);
  for (long long l = 0; l < L; l++) {
    add(d, 0), add(d * (hq + 2 * hkv) * hd, 1), add(hq * hd * d, 1), add(d, 0);
    add(2 * d * f, 1), add(f * d, 1);
  }
  add(d, 0), add(V * d, 1);
  *n = e;
  return s;
}

static float bf16_host(uint16_t h) { return coda_bf16_widen(h); }

/* The distance of two floats of one sign in units in the last place. */
static long long ulps(float a, float b) {
  int32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  if ((x < 0) != (y < 0)) return a == b ? 0 : 1LL << 40;
  return llabs((long long)x - (long long)y);
}

int main(int argc, char **argv) {
  const char *shape = argc > 1 ? argv[1] : "1b";
  long long n;
  std::vector<long long> seg = layout(shape, &n);
  const int nseg = (int)seg.size() / 2;
  int dev = 0, sms = 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  sms = prop.multiProcessorCount;
  printf("# %s, shape %s: %lld parameters in %d segments\n", prop.name, shape, n, nseg);

  /* fresh random state, drawn on the device: w ~ N(0, 0.02), g, m ~ N(0, 1e-3), v = |N(0, 1e-6)| */
  float *w, *g, *m, *v, *w0, *m0, *v0;
  __nv_bfloat16 *wb;
  long long *dseg;
  CK(cudaMalloc(&w, n * 4)); CK(cudaMalloc(&g, n * 4)); CK(cudaMalloc(&m, n * 4));
  CK(cudaMalloc(&v, n * 4)); CK(cudaMalloc(&wb, n * 2));
  CK(cudaMalloc(&w0, n * 4)); CK(cudaMalloc(&m0, n * 4)); CK(cudaMalloc(&v0, n * 4));
  CK(cudaMalloc(&dseg, seg.size() * 8));
  CK(cudaMemcpy(dseg, seg.data(), seg.size() * 8, cudaMemcpyHostToDevice));
  const unsigned long long run_seed = std::random_device{}();
  normal_fill<<<4096, 256>>>(w0, n, run_seed + 1, 0.02f, 0);
  normal_fill<<<4096, 256>>>(g, n, run_seed + 2, 1e-3f, 0);
  normal_fill<<<4096, 256>>>(m0, n, run_seed + 3, 1e-3f, 0);
  normal_fill<<<4096, 256>>>(v0, n, run_seed + 4, 1e-6f, 1);
  CK(cudaDeviceSynchronize());
  std::vector<float> hw(n), hg(n), hm(n), hv(n);
  CK(cudaMemcpy(hw.data(), w0, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hg.data(), g, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hm.data(), m0, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hv.data(), v0, n * 4, cudaMemcpyDeviceToHost));

  /* copy bandwidth: read + write of 4n bytes */
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  auto median = [&](auto launch) {
    for (int r = 0; r < 3; r++) launch();
    std::vector<float> ts;
    for (int r = 0; r < 15; r++) {
      CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b)); ts.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  };
  const float tcopy = median([&] { CK(cudaMemcpyAsync(w, w0, n * 4, cudaMemcpyDeviceToDevice)); });
  const double bw = 2.0 * n * 4 / (tcopy * 1e-3);
  printf("# copy bandwidth %.0f GB/s (read + write)\n", bw / 1e9);

  Coef c = {0.9, 0.95, 1.0 - pow(0.9, 7.0), 1.0 - pow(0.95, 7.0), 3e-4, 1e-8, 1.0 - 3e-4 * 0.1, 0.5, 1};
  auto reset = [&] {
    CK(cudaMemcpy(w, w0, n * 4, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(m, m0, n * 4, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(v, v0, n * 4, cudaMemcpyDeviceToDevice));
  };
  auto grid_for = [&](long long per_thread_elems, bool sm, const void *fn) {
    if (sm) {
      int occ = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, 256, 0));
      return (unsigned)(occ * sms);
    }
    long long gsz = (n / per_thread_elems + 255) / 256;
    return (unsigned)std::min<long long>(std::max<long long>(gsz, 1), 8192);
  };

  /* fp32 state: the reference bits from v0 after one update */
  std::vector<float> rw(n), rm(n), rv(n), tw(n), tm(n), tv(n);
  std::vector<uint16_t> rwb(n), twb(n);
  reset();
  f32_v0<<<grid_for(4, false, (const void *)f32_v0), 256>>>(w, g, m, v, wb, n, dseg, nseg, c);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(rw.data(), w, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rm.data(), m, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rv.data(), v, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rwb.data(), wb, n * 2, cudaMemcpyDeviceToHost));
  /* v0 against the CPU's double-precision update on a sample (every
   * segment's first and last elements and a stride through the rest) */
  {
    long long bad = 0, checked = 0;
    auto check = [&](long long i) {
      int k = 0;
      while (i >= seg[2 * k]) k++;
      float ww = hw[i], mm = hm[i], vv = hv[i];
      adamw_one(ww, hg[i], mm, vv, c, seg[2 * k + 1] ? c.shrink : 1.0);
      checked++;
      if (ulps(ww, rw[i]) > 1 || ulps(mm, rm[i]) > 1 || ulps(vv, rv[i]) > 1) bad++;
    };
    for (int k = 0; k < nseg; k++) check(k ? seg[2 * k - 2] : 0), check(seg[2 * k] - 1);
    for (long long i = 0; i < n; i += 9973) check(i);
    printf("# fp32 state v0 against the CPU update in double: %lld of %lld sampled differ by more than one ulp\n", bad,
           checked);
    if (bad) return 1;
  }
  const double bytes32 = 30.0 * n, bytes16 = 14.0 * n;
  printf("| state | variant | grid | ms | GB/s | of floor | bits vs v0 |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  auto row32 = [&](const char *name, const char *gname, unsigned grid, auto launch, bool compare) {
    reset();
    launch(grid);
    CK(cudaDeviceSynchronize());
    long long diff = 0;
    if (compare) {
      CK(cudaMemcpy(tw.data(), w, n * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(tm.data(), m, n * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(tv.data(), v, n * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(twb.data(), wb, n * 2, cudaMemcpyDeviceToHost));
      for (long long i = 0; i < n; i++)
        diff += tw[i] != rw[i] || tm[i] != rm[i] || tv[i] != rv[i] || twb[i] != rwb[i];
    }
    const float ms = median([&] { launch(grid); });
    printf("| fp32 | %s | %s %u | %.3f | %.0f | %.0f %% | %s |\n", name, gname, grid, ms,
           bytes32 / (ms * 1e-3) / 1e9, 100.0 * (bytes32 / bw) / (ms * 1e-3),
           compare ? (diff ? std::to_string(diff).c_str() : "same") : "(fp32 math)");
  };
  for (int sm = 0; sm < 2; sm++) {
    const char *gn = sm ? "sm" : "cap";
    row32("v0", gn, grid_for(4, sm, (const void *)f32_v0),
          [&](unsigned gr) { f32_v0<<<gr, 256>>>(w, g, m, v, wb, n, dseg, nseg, c); }, true);
    row32("v2 G=1", gn, grid_for(4, sm, (const void *)f32_v2<1, 0>),
          [&](unsigned gr) { f32_v2<1, 0><<<gr, 256>>>(w, g, m, v, wb, n, dseg, nseg, c); }, true);
    row32("v2 G=2", gn, grid_for(8, sm, (const void *)f32_v2<2, 0>),
          [&](unsigned gr) { f32_v2<2, 0><<<gr, 256>>>(w, g, m, v, wb, n, dseg, nseg, c); }, true);
    row32("v2 G=4", gn, grid_for(16, sm, (const void *)f32_v2<4, 0>),
          [&](unsigned gr) { f32_v2<4, 0><<<gr, 256>>>(w, g, m, v, wb, n, dseg, nseg, c); }, true);
    row32("v2q G=2", gn, grid_for(8, sm, (const void *)f32_v2<2, 2>),
          [&](unsigned gr) { f32_v2<2, 2><<<gr, 256>>>(w, g, m, v, wb, n, dseg, nseg, c); }, true);
    row32("f32 G=2", gn, grid_for(8, sm, (const void *)f32_v2<2, 1>),
          [&](unsigned gr) { f32_v2<2, 1><<<gr, 256>>>(w, g, m, v, wb, n, dseg, nseg, c); }, false);
  }

  /* bf16 state: w, m, v as bf16 (rounded from the fp32 start) */
  uint16_t *bw16, *bm16, *bv16, *bw0, *bm0, *bv0;
  CK(cudaMalloc(&bw16, n * 2)); CK(cudaMalloc(&bm16, n * 2)); CK(cudaMalloc(&bv16, n * 2));
  CK(cudaMalloc(&bw0, n * 2)); CK(cudaMalloc(&bm0, n * 2)); CK(cudaMalloc(&bv0, n * 2));
  std::vector<uint16_t> hw16(n), hm16(n), hv16(n);
  for (long long i = 0; i < n; i++)
    hw16[i] = coda_bf16_rne(hw[i]), hm16[i] = coda_bf16_rne(hm[i]), hv16[i] = coda_bf16_rne(hv[i]);
  CK(cudaMemcpy(bw0, hw16.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bm0, hm16.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bv0, hv16.data(), n * 2, cudaMemcpyHostToDevice));
  KC kc;
  coda_bf16_adamw_consts(c.b1, c.b2, c.c1, c.c2, c.lr, c.eps, c.shrink, kc.k);
  const unsigned long long seed = 1234;
  const long long step = 7;
  auto reset16 = [&] {
    CK(cudaMemcpy(bw16, bw0, n * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(bm16, bm0, n * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(bv16, bv0, n * 2, cudaMemcpyDeviceToDevice));
  };
  std::vector<uint16_t> r16w(n), r16m(n), r16v(n), t16w(n), t16m(n), t16v(n);
  reset16();
  b16_v0<<<grid_for(4, false, (const void *)b16_v0), 256>>>(bw16, g, bm16, bv16, n, dseg, nseg, kc,
                                                              c.gscale, 1, seed, step);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(r16w.data(), bw16, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r16m.data(), bm16, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r16v.data(), bv16, n * 2, cudaMemcpyDeviceToHost));
  {
    long long bad = 0, checked = 0;
    for (long long i = 0; i < n; i += 9973) {
      int k = 0;
      while (i >= seg[2 * k]) k++;
      uint16_t ww = hw16[i], mm = hm16[i], vv = hv16[i];
      const uint64_t r = coda_bf16_sr_hash(seed, step, (uint64_t)i);
      const float gi = (float)((double)hg[i] * c.gscale);
      const float mi = kc.k[0] * bf16_host(mm) + kc.k[1] * gi;
      const float vi = kc.k[2] * bf16_host(vv) + (kc.k[3] * gi) * gi;
      const float wi = bf16_host(ww) * (seg[2 * k + 1] ? kc.k[6] : 1.0f) -
                       (kc.k[4] * mi) / (sqrtf(vi * kc.k[5]) + kc.k[7]);
      checked++;
      bad += coda_bf16_sr(wi, (uint32_t)r) != r16w[i] || coda_bf16_sr(mi, (uint32_t)(r >> 16)) != r16m[i] ||
             coda_bf16_sr(vi, (uint32_t)(r >> 32)) != r16v[i];
    }
    printf("# bf16 state v0 against the CPU update: %lld of %lld sampled differ\n", bad, checked);
    if (bad) return 1;
  }
  auto row16 = [&](const char *name, const char *gname, unsigned grid, auto launch) {
    reset16();
    launch(grid);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(t16w.data(), bw16, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t16m.data(), bm16, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t16v.data(), bv16, n * 2, cudaMemcpyDeviceToHost));
    long long diff = 0;
    for (long long i = 0; i < n; i++) diff += t16w[i] != r16w[i] || t16m[i] != r16m[i] || t16v[i] != r16v[i];
    const float ms = median([&] { launch(grid); });
    printf("| bf16 | %s | %s %u | %.3f | %.0f | %.0f %% | %s |\n", name, gname, grid, ms,
           bytes16 / (ms * 1e-3) / 1e9, 100.0 * (bytes16 / bw) / (ms * 1e-3),
           diff ? std::to_string(diff).c_str() : "same");
  };
  for (int sm = 0; sm < 2; sm++) {
    const char *gn = sm ? "sm" : "cap";
    row16("v0", gn, grid_for(4, sm, (const void *)b16_v0), [&](unsigned gr) {
      b16_v0<<<gr, 256>>>(bw16, g, bm16, bv16, n, dseg, nseg, kc, c.gscale, 1, seed, step);
    });
    row16("v2 G=1", gn, grid_for(4, sm, (const void *)b16_v2<1>), [&](unsigned gr) {
      b16_v2<1><<<gr, 256>>>(bw16, g, bm16, bv16, n, dseg, nseg, kc, c.gscale, 1, seed, step);
    });
    row16("v2 G=2", gn, grid_for(8, sm, (const void *)b16_v2<2>), [&](unsigned gr) {
      b16_v2<2><<<gr, 256>>>(bw16, g, bm16, bv16, n, dseg, nseg, kc, c.gscale, 1, seed, step);
    });
    row16("v2 G=4", gn, grid_for(16, sm, (const void *)b16_v2<4>), [&](unsigned gr) {
      b16_v2<4><<<gr, 256>>>(bw16, g, bm16, bv16, n, dseg, nseg, kc, c.gscale, 1, seed, step);
    });
  }
  return 0;
}
