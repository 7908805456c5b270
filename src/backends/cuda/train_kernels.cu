/* The trainer's small device ops (src/model/model_plans.c, model_device.c on a
 * CUDA context): fp32 master -> plan weight rounding, gradient
 * accumulation, embedding lookup and its gradient, targets, gradient-norm
 * partial sums and AdamW. Compiled ahead of time by nvcc (no NVRTC).
 *
 * Determinism: no float atomics anywhere. Every output element is written
 * by one thread whose arithmetic order is fixed, and reductions use fixed
 * trees, so two runs of the same inputs give identical bits. */
#include "backends/cuda/backend.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/stream.h"

extern "C" {
#include "base/internal.h"
#include "base/bf16_round.h"
}

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdio.h>

namespace {

unsigned grid_of(long long n) {
  long long g = (n + 255) / 256;
  return (unsigned)(g < 8192 ? (g > 0 ? g : 1) : 8192);
}

coda_status check_launch(coda_context ctx, const char *what) {
  char msg[96];
  snprintf(msg, sizeof msg, "CUDA trainer kernel (%s)", what);
  return coda_cuda_check_launch(ctx, msg);
}

__device__ float load_f(const void *p, int bf16, long long i) {
  return bf16 ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}

/* dst (bf16 or f32 view) = src (dense f32 rows x cols) + shift, round to
 * nearest even (shift 0 adds nothing: -0 stays -0) */
__global__ void round_kernel(void *dst, int bf16, long long ld, const float *src, long long rows,
                             long long cols, float shift) {
  const long long n = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / cols, c = i % cols;
    const float v = shift != 0.0f ? src[i] + shift : src[i];
    if (bf16) ((__nv_bfloat16 *)dst)[r * ld + c] = __float2bfloat16_rn(v);
    else ((float *)dst)[r * ld + c] = v;
  }
}

/* dst (dense f32) += scale * src (view); separate multiply and add (no FMA
 * contraction) as on the host. */
__global__ void accum_kernel(float *dst, const void *src, int bf16, long long ld, long long rows,
                             long long cols, float scale) {
  const long long n = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / cols, c = i % cols;
    dst[i] = __fadd_rn(dst[i], __fmul_rn(scale, load_f(src, bf16, r * ld + c)));
  }
}

/* x[r] = table[tok[r]] (+ pos[r % period], GPT-2's learned positions: the
 * sum in fp32, __fadd_rn as the host adds) rounded to bf16 once, from the
 * fp32 master tables or the bf16 weights (data parallel: the all-gathered
 * copy); a bf16 -> bf16 conversion is exact. */
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void embed_kernel(__nv_bfloat16 *x, long long ld, const T *table, const int32_t *tok,
                             const T *pos, long long period, long long M, long long D,
                             float scale) {
  const long long n = M * D;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / D, k = i % D;
    float v = to_f32(table[(long long)tok[r] * D + k]);
    if (pos) v = __fadd_rn(v, to_f32(pos[(r % period) * D + k]));
    if (scale != 1.0f) v = __fmul_rn(v, scale); /* Gemma 3: as the host's e * sqrt(dim) */
    x[r * ld + k] = __float2bfloat16_rn(v);
  }
}

/* Block (j, y) adds distinct token row j's gradients for the columns
 * y*256 .. y*256+255, one column per thread, in token order (pos[seg[j]] ..
 * pos[seg[j+1]-1] ascending: the host's scatter-add order, so the same
 * bits). Frequent tokens (a space, "the") have thousands of positions:
 * the loads are issued EMB_BATCH at a time so the chain of dependent adds
 * does not wait on one load latency per position. */
#define EMB_BATCH 16
__global__ void embed_grad_kernel(float *g, const void *dx, int bf16, long long ld, long long D,
                                  const int32_t *rows, const int32_t *seg, const int32_t *pos,
                                  float scale) {
  const int j = blockIdx.x;
  const long long k = (long long)blockIdx.y * blockDim.x + threadIdx.x;
  if (k >= D) return;
  float *gr = g + (long long)rows[j] * D;
  const int a = seg[j], b = seg[j + 1];
  float acc = gr[k];
  for (int t0 = a; t0 < b; t0 += EMB_BATCH) {
    const int nb = b - t0 < EMB_BATCH ? b - t0 : EMB_BATCH;
    float x[EMB_BATCH];
#pragma unroll
    for (int u = 0; u < EMB_BATCH; u++)
      x[u] = u < nb ? load_f(dx, bf16, (long long)pos[t0 + u] * ld + k) : 0.0f;
#pragma unroll
    for (int u = 0; u < EMB_BATCH; u++)
      if (u < nb) acc = __fadd_rn(acc, __fmul_rn(scale, x[u]));
  }
  gr[k] = acc;
}

__global__ void targets_kernel(int32_t *t, long long ld, const int32_t *tg, long long M) {
  for (long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x; r < M;
       r += (long long)gridDim.x * blockDim.x)
    t[r * ld] = tg[r] < 0 ? -100 : tg[r];
}

/* part[b] = sum of squares of g[b·chunk .. (b+1)·chunk) in double: a fixed
 * per-thread stride, then a fixed shared-memory tree. */
__global__ void sumsq_kernel(const float *g, long long n, long long chunk, double *part) {
  __shared__ double sh[256];
  const long long lo = blockIdx.x * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  double s = 0.0;
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) s += (double)g[i] * (double)g[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* The host's coda_adamw_update, element for element in double, with the
 * clip factor applied to the gradient first (rounded to f32 as on the
 * host). */
__device__ __forceinline__ void adamw_one(float &w, float g, float &m, float &v, double b1,
                                          double b2, double c1, double c2, double lr, double eps,
                                          double shrink, double gscale, int scale_g) {
  double gi = scale_g ? (double)(float)((double)g * gscale) : (double)g;
  double mi = b1 * (double)m + (1.0 - b1) * gi;
  double vi = b2 * (double)v + (1.0 - b2) * gi * gi;
  m = (float)mi;
  v = (float)vi;
  double wi = (double)w * shrink;
  wi -= lr * (mi / c1) / (sqrt(vi / c2) + eps);
  w = (float)wi;
}

__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, long long n, double b1,
                             double b2, double c1, double c2, double lr, double eps, double shrink,
                             double gscale, int scale_g) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    adamw_one(w[i], g[i], m[i], v[i], b1, b2, c1, c2, lr, eps, shrink, gscale, scale_g);
}

/* The first segment (ends at seg[2k]) that ends after element i0. */
__device__ __forceinline__ int first_segment_after(const long long *seg, int nseg, long long i0) {
  int lo = 0, hi = nseg - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (seg[2 * mid] > i0) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* One AdamW pass over the elements [lo, n) of the parameters laid out
 * back to back (segment k ends at seg[2k] and decays when seg[2k+1] != 0;
 * lo a multiple of 4, so the float4 accesses stay aligned), with the arithmetic of
 * adamw_kernel element for element, and the updated weight rounded into
 * wb (the plans' bf16 weights) in the same pass: the separate rounding
 * pass before each forward (read 4 bytes, write 2 per weight) goes away.
 * Four consecutive elements per thread, as float4 where they are whole. */
__global__ void adamw_multi_kernel(float *w, const float *g, float *m, float *v,
                                   __nv_bfloat16 *wb, long long lo_elem, long long n,
                                   const long long *seg, int nseg, double b1, double b2,
                                   double c1, double c2, double lr, double eps, double shrink,
                                   double gscale, int scale_g) {
  const long long stride = 4LL * gridDim.x * blockDim.x;
  for (long long i0 = lo_elem + 4LL * (blockIdx.x * (long long)blockDim.x + threadIdx.x); i0 < n;
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
      adamw_one(wv[e], gv[e], mv[e], vv[e], b1, b2, c1, c2, lr, eps, seg[2 * k + 1] ? shrink : 1.0,
                gscale, scale_g);
    }
    if (whole) {
      *(float4 *)(w + i0) = *(const float4 *)wv;
      *(float4 *)(m + i0) = *(const float4 *)mv;
      *(float4 *)(v + i0) = *(const float4 *)vv;
      if (wb) {
        __nv_bfloat162 lo2 = __floats2bfloat162_rn(wv[0], wv[1]);
        __nv_bfloat162 hi2 = __floats2bfloat162_rn(wv[2], wv[3]);
        uint2 packed;
        packed.x = *(const unsigned *)&lo2;
        packed.y = *(const unsigned *)&hi2;
        *(uint2 *)(wb + i0) = packed;
      }
    } else {
      for (int e = 0; e < 4; e++)
        if (i0 + e < n) {
          w[i0 + e] = wv[e], m[i0 + e] = mv[e], v[i0 + e] = vv[e];
          if (wb) wb[i0 + e] = __float2bfloat16_rn(wv[e]);
        }
    }
  }
}

/* The host's initial weights (coda_model_init): draw k of the splitmix64
 * stream s0 is the next draw of s0 + k·golden, element k of a matrix whose
 * stream starts at draw d takes draws d + 2k and d + 2k + 1 through
 * Box-Muller in double. sqrt is correctly rounded on both sides; log and
 * cos may differ from the host's by an ulp of double, which changes the
 * float only when the value lies within that ulp of a rounding boundary. */
__device__ __forceinline__ double uniform_next(unsigned long long &s) {
  unsigned long long z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return __dmul_rn((double)(z >> 11), 1.0 / 9007199254740992.0);
}

__global__ void init_normal_kernel(float *w, long long n, unsigned long long s0,
                                   unsigned long long d0, double sd) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x) {
    unsigned long long s = s0 + (d0 + 2ull * (unsigned long long)k) * 0x9e3779b97f4a7c15ull;
    double u1 = uniform_next(s), u2 = uniform_next(s);
    if (u1 < 1e-300) u1 = 1e-300;
    const double z = __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(6.283185307179586, u2)));
    w[k] = (float)__dmul_rn(sd, z);
  }
}

__global__ void fill_kernel(float *w, long long n, float value) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x)
    w[k] = value;
}

int is_bf16(const coda_tensor *t) { return t->dtype == CODA_BF16; }

coda_status float_view(coda_context ctx, const coda_tensor *t, const char *what) {
  if (t->dtype != CODA_BF16 && t->dtype != CODA_F32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: the trainer's device ops take bf16 or f32 "
                     "buffers", what);
  return CODA_OK;
}

} // namespace

extern "C" coda_status coda_cuda_train_round(coda_context ctx, const coda_tensor *dst,
                                             const float *src, float shift) {
  coda_status s = float_view(ctx, dst, "weight rounding");
  if (s) return s;
  const long long n = dst->rows * dst->cols;
  if (n == 0) return CODA_OK;
  round_kernel<<<grid_of(n), 256, 0, coda_cuda_stream(ctx)>>>(dst->data, is_bf16(dst), dst->ld, src, dst->rows, dst->cols, shift);
  return check_launch(ctx, "weight rounding");
}

extern "C" coda_status coda_cuda_train_accum(coda_context ctx, float *dst, const coda_tensor *src,
                                             float scale) {
  coda_status s = float_view(ctx, src, "gradient accumulation");
  if (s) return s;
  const long long n = src->rows * src->cols;
  if (n == 0) return CODA_OK;
  accum_kernel<<<grid_of(n), 256, 0, coda_cuda_stream(ctx)>>>(dst, src->data, is_bf16(src), src->ld, src->rows, src->cols,
                                    scale);
  return check_launch(ctx, "gradient accumulation");
}

template <typename T>
static coda_status embed(coda_context ctx, const coda_tensor *x, const T *table, const int32_t *tok,
                         const T *pos, int64_t period, float scale) {
  if (x->dtype != CODA_BF16)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "embedding lookup: the block input must be bf16");
  const long long n = x->rows * x->cols;
  if (n == 0) return CODA_OK;
  embed_kernel<T><<<grid_of(n), 256, 0, coda_cuda_stream(ctx)>>>(
      (__nv_bfloat16 *)x->data, x->ld, table, tok, pos, pos ? (long long)period : 1, x->rows,
      x->cols, scale);
  return check_launch(ctx, "embedding lookup");
}

extern "C" coda_status coda_cuda_train_embed(coda_context ctx, const coda_tensor *x,
                                             const float *table, const int32_t *tok,
                                             const float *pos, int64_t period, float scale) {
  return embed(ctx, x, table, tok, pos, period, scale);
}

extern "C" coda_status coda_cuda_train_embed16(coda_context ctx, const coda_tensor *x,
                                               const uint16_t *table, const int32_t *tok,
                                               const uint16_t *pos, int64_t period,
                                               float scale) {
  return embed(ctx, x, (const __nv_bfloat16 *)table, tok, (const __nv_bfloat16 *)pos, period,
               scale);
}

extern "C" coda_status coda_cuda_train_embed_grad(coda_context ctx, float *g, const coda_tensor *dx,
                                                  const int32_t *rows, const int32_t *seg,
                                                  const int32_t *pos, int nrows, float scale) {
  coda_status s = float_view(ctx, dx, "embedding gradient");
  if (s) return s;
  if (nrows <= 0 || dx->cols == 0) return CODA_OK;
  const dim3 grid((unsigned)nrows, (unsigned)((dx->cols + 255) / 256));
  embed_grad_kernel<<<grid, 256, 0, coda_cuda_stream(ctx)>>>(g, dx->data, is_bf16(dx), dx->ld,
                                                             dx->cols, rows, seg, pos, scale);
  return check_launch(ctx, "embedding gradient");
}

extern "C" coda_status coda_cuda_train_targets(coda_context ctx, const coda_tensor *t,
                                               const int32_t *tg) {
  if (t->dtype != CODA_I32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "targets: the head's buffer must be int32");
  if (t->rows == 0) return CODA_OK;
  targets_kernel<<<grid_of(t->rows), 256, 0, coda_cuda_stream(ctx)>>>((int32_t *)t->data, t->ld, tg, t->rows);
  return check_launch(ctx, "targets");
}

extern "C" coda_status coda_cuda_train_sumsq(coda_context ctx, const float *g, size_t n,
                                             size_t chunk, double *part) {
  if (n == 0) return CODA_OK;
  const size_t nb = (n + chunk - 1) / chunk;
  sumsq_kernel<<<(unsigned)nb, 256, 0, coda_cuda_stream(ctx)>>>(g, (long long)n, (long long)chunk, part);
  return check_launch(ctx, "gradient norm");
}

extern "C" coda_status coda_cuda_train_adamw(coda_context ctx, float *w, const float *g, float *m,
                                             float *v, size_t n, const double *coef, double gscale) {
  if (n == 0) return CODA_OK;
  adamw_kernel<<<grid_of((long long)n), 256, 0, coda_cuda_stream(ctx)>>>(w, g, m, v, (long long)n, coef[0], coef[1], coef[2],
                                               coef[3], coef[4], coef[5], coef[6], gscale,
                                               gscale != 1.0);
  return check_launch(ctx, "AdamW");
}

extern "C" coda_status coda_cuda_train_zero(coda_context ctx, void *p, size_t bytes) {
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, coda_cuda_stream(ctx));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA memset: %s", cudaGetErrorString(e));
  }
  return CODA_OK;
}

extern "C" coda_status coda_cuda_train_memory(coda_context ctx, size_t *used, size_t *total) {
  size_t fr = 0, tot = 0;
  cudaError_t e = cudaMemGetInfo(&fr, &tot);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA memory info: %s", cudaGetErrorString(e));
  }
  *used = tot - fr;
  *total = tot;
  return CODA_OK;
}

extern "C" coda_status coda_cuda_train_adamw_multi(coda_context ctx, float *w, const float *g,
                                                   float *m, float *v, uint16_t *wb, size_t lo,
                                                   size_t hi, const int64_t *seg, int nseg,
                                                   const double *coef, double gscale,
                                                   void *side) {
  if (hi <= lo) return CODA_OK;
  if (nseg <= 0 || lo % 4 || ((uintptr_t)w | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v) % 16 ||
      (uintptr_t)wb % 8)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "AdamW: %d segments, start %zu (a multiple "
                     "of 4), or buffers not 16-byte aligned", nseg, lo);
  const long long groups = ((long long)(hi - lo) + 3) / 4;
  cudaStream_t stream = side ? (cudaStream_t)coda_cuda_side_stream(side) : coda_cuda_stream(ctx);
  adamw_multi_kernel<<<grid_of(groups), 256, 0, stream>>>(
      w, g, m, v, (__nv_bfloat16 *)wb, (long long)lo, (long long)hi, (const long long *)seg, nseg,
      coef[0], coef[1], coef[2], coef[3], coef[4], coef[5], coef[6], gscale, gscale != 1.0);
  return check_launch(ctx, "AdamW (all parameters)");
}

/* AdamW over bf16 state: the host's coda_adamw_update_bf16 element for
 * element, fp32 arithmetic from the constants kc (coda_bf16_adamw_consts),
 * each operation rounded once (no contraction into FMA, so the bits match
 * the host's), then stochastic rounding with one hash of the flat index
 * (base/bf16_round.h). Four elements per thread: 8-byte bf16 loads, a
 * 16-byte gradient load; 14 bytes a parameter in all. */
__global__ void adamw_bf16_kernel(uint16_t *w, const float *g, uint16_t *m, uint16_t *v,
                                  long long lo_elem, long long n, const long long *seg, int nseg,
                                  float k0, float k1, float k2, float k3, float k4, float k5,
                                  float shrink, float eps, double gscale, int scale_g,
                                  unsigned long long seed, long long t) {
  const long long stride = 4LL * gridDim.x * blockDim.x;
  for (long long i0 = lo_elem + 4LL * (blockIdx.x * (long long)blockDim.x + threadIdx.x); i0 < n;
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
      const unsigned long long r = coda_bf16_sr_hash(seed, t, (unsigned long long)(i0 + e));
      const float gi = scale_g ? (float)((double)gv[e] * gscale) : gv[e];
      const float mi = __fadd_rn(__fmul_rn(k0, coda_bf16_widen(mv[e])), __fmul_rn(k1, gi));
      const float vi =
          __fadd_rn(__fmul_rn(k2, coda_bf16_widen(vv[e])), __fmul_rn(__fmul_rn(k3, gi), gi));
      const float wi = __fsub_rn(__fmul_rn(coda_bf16_widen(wv[e]), seg[2 * k + 1] ? shrink : 1.0f),
                                 __fdiv_rn(__fmul_rn(k4, mi),
                                           __fadd_rn(__fsqrt_rn(__fmul_rn(vi, k5)), eps)));
      wv[e] = coda_bf16_sr(wi, (uint32_t)r);
      mv[e] = coda_bf16_sr(mi, (uint32_t)(r >> 16));
      vv[e] = coda_bf16_sr(vi, (uint32_t)(r >> 32));
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

extern "C" coda_status coda_cuda_train_adamw_bf16(coda_context ctx, uint16_t *w, const float *g,
                                                  uint16_t *m, uint16_t *v, size_t lo, size_t hi,
                                                  const int64_t *seg, int nseg,
                                                  const double *coef, double gscale,
                                                  uint64_t seed, int64_t t, void *side) {
  if (hi <= lo) return CODA_OK;
  if (nseg <= 0 || lo % 4 || ((uintptr_t)w | (uintptr_t)m | (uintptr_t)v) % 8 ||
      (uintptr_t)g % 16)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "AdamW (bf16 state): %d segments, start %zu "
                     "(a multiple of 4), or buffers not aligned (8 bytes, the gradient 16)",
                     nseg, lo);
  /* coef = {b1, b2, c1, c2, lr, eps, shrink}: the constants rounded on the
   * host, as coda_adamw_update_bf16 rounds them */
  float kc[8];
  coda_bf16_adamw_consts(coef[0], coef[1], coef[2], coef[3], coef[4], coef[5], coef[6], kc);
  const long long groups = ((long long)(hi - lo) + 3) / 4;
  cudaStream_t stream = side ? (cudaStream_t)coda_cuda_side_stream(side) : coda_cuda_stream(ctx);
  adamw_bf16_kernel<<<grid_of(groups), 256, 0, stream>>>(
      w, g, m, v, (long long)lo, (long long)hi, (const long long *)seg, nseg, kc[0], kc[1], kc[2],
      kc[3], kc[4], kc[5], kc[6], kc[7], gscale, gscale != 1.0,
      (unsigned long long)seed, (long long)t);
  return check_launch(ctx, "AdamW (bf16 state)");
}

extern "C" coda_status coda_cuda_train_init_normal(coda_context ctx, float *w, size_t n,
                                                   uint64_t s0, uint64_t draw0, double sd) {
  if (n == 0) return CODA_OK;
  init_normal_kernel<<<grid_of((long long)n), 256, 0, coda_cuda_stream(ctx)>>>(
      w, (long long)n, (unsigned long long)s0, (unsigned long long)draw0, sd);
  return check_launch(ctx, "initial weights");
}

extern "C" coda_status coda_cuda_train_fill(coda_context ctx, float *w, size_t n, float value) {
  if (n == 0) return CODA_OK;
  fill_kernel<<<grid_of((long long)n), 256, 0, coda_cuda_stream(ctx)>>>(w, (long long)n, value);
  return check_launch(ctx, "fill");
}
