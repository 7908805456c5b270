/* Finishers (partials -> vectors) and the plans' small device ops on the GPU.
 *
 * Finishers match src/backends/cpu/finish.c: row partials P (M x T) give one value
 * per row, column partials (S x N) one per column, segmented partials
 * (M x I) one per row and segment; sum, mean = sum / count, max,
 * lse = m + log sum exp(P - m) (m = max, -inf-safe), rstd = rsqrt(sum/count
 * + eps), centered rstd = rsqrt(sum/count - (sumQ/count)^2 + eps), count =
 * N (row), M (column) or the segment. One thread per output sums its
 * partials in double in index order and rounds once to f32, so the result
 * is deterministic and equals the CPU finisher's up to exp/log rounding. */
#include "backends/cuda/gplan.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/stream.h"

extern "C" {
#include "base/internal.h"
}

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>

namespace {

struct FinishParams {
  const float *P, *Q;
  long long ldp, ldq;
  float *out;
  long long ldo;
  long long M, N, nout; /* nout: rows of output work (M, or N for columns) */
  int kind, layout;
  long long T;          /* partial entries per output (columns of P, or S rows) */
  long long per, nseg;  /* segmented: intervals per segment, segments per row */
  double count, eps;
};

__device__ double reduce_range(const FinishParams &d, const float *P, long long ld, long long r,
                               long long t0, long long t1, bool by_col) {
  const int k = d.kind;
  if (k == CODA_FINISH_MAX || k == CODA_FINISH_LSE) {
    double m = -INFINITY;
    for (long long t = t0; t < t1; t++) {
      double v = by_col ? P[t * ld + r] : P[r * ld + t];
      if (v > m) m = v;
    }
    if (k == CODA_FINISH_MAX || m == -INFINITY || m == INFINITY) return m;
    double s = 0;
    for (long long t = t0; t < t1; t++) s += exp((by_col ? (double)P[t * ld + r] : (double)P[r * ld + t]) - m);
    return m + log(s);
  }
  double s = 0;
  for (long long t = t0; t < t1; t++) s += by_col ? P[t * ld + r] : P[r * ld + t];
  return s;
}

__global__ void finish_kernel(FinishParams d) {
  const long long total = d.layout == 2 ? d.M * d.nseg : d.nout;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i, t0 = 0, t1 = d.T, o;
    const bool by_col = d.layout == 1;
    if (d.layout == 2) {
      r = i / d.nseg;
      const long long s = i % d.nseg;
      t0 = s * d.per;
      t1 = t0 + d.per < d.T ? t0 + d.per : d.T;
      o = r * d.ldo + s;
    } else {
      o = by_col ? r : r * d.ldo;
    }
    double v = reduce_range(d, d.P, d.ldp, r, t0, t1, by_col);
    if (d.kind == CODA_FINISH_MEAN) {
      v /= d.count;
    } else if (d.kind == CODA_FINISH_RSTD) {
      double var = v / d.count;
      if (d.Q) {
        const double mu = reduce_range(d, d.Q, d.ldq, r, t0, t1, by_col) / d.count;
        var -= mu * mu;
      }
      v = 1.0 / sqrt(var + d.eps);
    }
    d.out[o] = (float)v;
  }
}

/* dst = src with dtype conversion; src == NULL writes zeros. */
template <typename T>
__device__ __forceinline__ double load_as(const void *p, long long o) {
  return (double)((const T *)p)[o];
}
__device__ double load_any(const void *p, int dt, long long o) {
  switch (dt) {
  case CODA_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[o]);
  case CODA_F16: return (double)__half2float(((const __half *)p)[o]);
  case CODA_F32: return load_as<float>(p, o);
  case CODA_F64: return load_as<double>(p, o);
  default: return (double)((const int *)p)[o];
  }
}
__device__ void store_any(void *p, int dt, long long o, double v) {
  switch (dt) {
  case CODA_BF16: ((__nv_bfloat16 *)p)[o] = __float2bfloat16_rn((float)v); break;
  case CODA_F16: ((__half *)p)[o] = __float2half_rn((float)v); break;
  case CODA_F32: ((float *)p)[o] = (float)v; break;
  case CODA_F64: ((double *)p)[o] = v; break;
  default: ((int *)p)[o] = (int)v; break;
  }
}
__global__ void copy_kernel(void *dst, int ddt, long long ldd, const void *src, int sdt,
                            long long lds, long long rows, long long cols) {
  const long long total = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / cols, c = i % cols;
    store_any(dst, ddt, r * ldd + c, src ? load_any(src, sdt, r * lds + c) : 0.0);
  }
}

unsigned grid_for(long long n) {
  long long g = (n + 255) / 256;
  return (unsigned)(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

}  // namespace

extern "C" coda_status coda_cuda_finish(coda_context ctx, int kind, int layout, const coda_tensor *P,
                                        const coda_tensor *Q, const coda_tensor *out, int64_t M,
                                        int64_t N, int tile_n, int seg, double eps) {
  if (P->dtype != CODA_F32 || (Q && Q->dtype != CODA_F32) || out->dtype != CODA_F32)
    return coda_fail(ctx, CODA_ERR_DTYPE, "CUDA finish: partials and results must be f32 on the GPU");
  FinishParams d;
  d.P = (const float *)P->data;
  d.ldp = P->ld;
  d.Q = Q ? (const float *)Q->data : nullptr;
  d.ldq = Q ? Q->ld : 0;
  d.out = (float *)out->data;
  d.ldo = out->ld;
  d.M = M;
  d.N = N;
  d.kind = kind;
  d.layout = layout;
  d.eps = eps;
  d.per = 1;
  d.nseg = 1;
  if (layout == 1) { /* S x N -> (1, N) */
    d.nout = N;
    d.T = P->rows;
    d.count = (double)M;
  } else if (layout == 2) {
    const long long g = seg < tile_n ? seg : tile_n; /* interval width */
    d.per = seg / g;
    d.T = P->cols;
    d.nseg = out->cols;
    d.nout = M;
    d.count = (double)seg;
  } else {
    d.nout = M;
    d.T = P->cols;
    d.count = (double)N;
  }
  const long long work = layout == 2 ? M * d.nseg : d.nout;
  if (work == 0) return CODA_OK;
  finish_kernel<<<grid_for(work), 256, 0, coda_cuda_stream(ctx)>>>(d);
  return coda_cuda_check_launch(ctx, "CUDA finish (reduction of partials)");
}

extern "C" coda_status coda_cuda_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src) {
  const long long n = dst->rows * dst->cols;
  if (n == 0) return CODA_OK;
  if (!src) {
    const size_t es = coda_dtype_size(dst->dtype);
    cudaError_t e = cudaMemset2DAsync(dst->data, (size_t)dst->ld * es, 0, (size_t)dst->cols * es,
                                      (size_t)dst->rows, coda_cuda_stream(ctx));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA zero: %s", cudaGetErrorString(e));
    }
    return CODA_OK;
  }
  copy_kernel<<<grid_for(n), 256, 0, coda_cuda_stream(ctx)>>>(dst->data, (int)dst->dtype, dst->ld, src->data, (int)src->dtype,
                                    src->ld, dst->rows, dst->cols);
  return coda_cuda_check_launch(ctx, "CUDA copy");
}

extern "C" coda_status coda_cuda_malloc(coda_context ctx, size_t bytes, void **out) {
  *out = nullptr;
  cudaError_t e = cudaSetDevice(ctx->opts.device);
  if (e == cudaSuccess) e = cudaMalloc(out, bytes ? bytes : 1);
  /* zeroed in the context's stream order, ahead of the work that uses it */
  if (e == cudaSuccess) e = cudaMemsetAsync(*out, 0, bytes ? bytes : 1, coda_cuda_stream(ctx));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (*out) cudaFree(*out);
    *out = nullptr;
    return coda_fail(ctx, e == cudaErrorMemoryAllocation ? CODA_ERR_OUT_OF_MEMORY : CODA_ERR_BACKEND,
                     "CUDA: cannot allocate %zu bytes of device memory: %s", bytes, cudaGetErrorString(e));
  }
  return CODA_OK;
}

extern "C" void coda_cuda_free(void *p) {
  if (p) cudaFree(p);
}

extern "C" coda_status coda_cuda_memcpy(coda_context ctx, void *dst, const void *src, size_t bytes,
                                        int to_device) {
  if (bytes == 0) return CODA_OK;
  /* On the context's stream, after the work queued there; the API promises
   * a synchronous copy (the host buffer may be reused or read on return),
   * so the stream is waited for. Not for use while the stream is captured. */
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes,
                                  to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                  coda_cuda_stream(ctx));
  /* (the stream alone: on the legacy stream this waits as cudaMemcpy did) */
  if (e == cudaSuccess) e = cudaStreamSynchronize(coda_cuda_stream(ctx));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA memcpy (%s, %zu bytes): %s",
                     to_device ? "host to device" : "device to host", bytes, cudaGetErrorString(e));
  }
  return CODA_OK;
}

extern "C" coda_status coda_cuda_memcpy_queued(coda_context ctx, void *dst, const void *src,
                                               size_t bytes) {
  if (bytes == 0) return CODA_OK;
  /* pageable memory: staged before the call returns, so the caller's
   * buffer is free again (CUDA's documented behaviour for async H2D) */
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, coda_cuda_stream(ctx));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA memcpy (host to device, queued, %zu bytes): %s",
                     bytes, cudaGetErrorString(e));
  }
  return CODA_OK;
}

extern "C" coda_status coda_cuda_sync(coda_context ctx) {
  cudaError_t e = (cudaError_t)coda_cuda_stream_wait(ctx); /* the context's stream */
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA: %s", cudaGetErrorString(e));
  }
  return CODA_OK;
}
