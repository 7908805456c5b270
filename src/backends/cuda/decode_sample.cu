/* Sampling on the device (the decoder's `sample` entry of
 * coda_decode_ops): greedy, temperature, top-k and top-p over one block per
 * batch row, the draw the host decoder's (src/infer/decode_generate.c). */
#include "backends/cuda/decode_common.cuh"

namespace {

/* ------------------------------------------------------------- sampling */

constexpr int kSampleThreads = 1024;

__device__ __forceinline__ uint32_t fkey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The host's draw_uniform (src/infer/decode_generate.c): one splitmix64 step. */
__device__ double draw_uniform(uint64_t seed, int b, int pos) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(b + 1)) ^
               (0xd1b54a32d192ed03ull * (uint64_t)(pos + 1));
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T>
__device__ T block_sum(T v, T *sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  T t = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += sh[i];
  return t;
}

/* Exclusive prefix of v over the threads in order. */
template <typename T>
__device__ T block_exclusive(T v, T *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  __syncthreads();
  if (lane == 31) sh[warp] = inc;
  __syncthreads();
  T before = 0;
  for (int i = 0; i < warp; i++) before += sh[i];
  return before + inc - v;
}

/* One block per sequence; thread t owns the contiguous ids [t·c, (t+1)·c)
 * so that sums in thread order are sums in id order. The rule is the
 * host's host_sample (src/infer/decode_generate.c): top-k and top-p cuts
 * by bisection on the float keys, ties at the k-th value kept by lower
 * id. */
__global__ void sample_kernel(int32_t *tokens, const float *logits, const int32_t *pos, long long V,
                              double temperature, int top_k, double top_p, uint64_t seed) {
  __shared__ double shd[32];
  __shared__ long long shl[32];
  __shared__ float shv[32];
  __shared__ int shi[32];
  __shared__ int result;
  pdl_wait();
  const int b = blockIdx.x;
  if (pos[b] < 0) {
    if (threadIdx.x == 0) tokens[b] = -1;
    return;
  }
  const float *l = logits + (long long)b * V;
  const long long chunk = (V + blockDim.x - 1) / blockDim.x;
  const long long lo = threadIdx.x * chunk, hi = lo + chunk < V ? lo + chunk : V;
  /* finite check and argmax (lowest id on ties) */
  int bad = 0;
  float best = -INFINITY;
  int bi = -1;
  for (long long v = lo; v < hi; v++) {
    const float x = l[v];
    if (!isfinite(x)) bad = 1;
    else if (bi < 0 || x > best) {
      best = x;
      bi = (int)v;
    }
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) tokens[b] = -2;
    return;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || ov > best || (ov == best && oi < bi))) {
      best = ov;
      bi = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    shv[threadIdx.x >> 5] = best;
    shi[threadIdx.x >> 5] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bv = -INFINITY;
    int ib = -1;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++)
      if (shi[i] >= 0 && (ib < 0 || shv[i] > bv || (shv[i] == bv && shi[i] < ib))) {
        bv = shv[i];
        ib = shi[i];
      }
    shv[0] = bv;
    shi[0] = ib;
  }
  __syncthreads();
  const float mx = shv[0];
  const int argmax = shi[0];
  if (!(temperature > 0.0)) {
    if (threadIdx.x == 0) tokens[b] = argmax;
    return;
  }
  /* top-k cut: tk the k-th largest key; ties at it by lower id */
  uint32_t tk = 0;
  long long need = 0, tie0 = 0; /* ties kept, and this thread's first tie rank */
  const bool use_k = top_k > 0 && top_k < V;
  if (use_k) {
    for (int bit = 31; bit >= 0; bit--) {
      const uint32_t cand = tk | (1u << bit);
      long long c = 0;
      for (long long v = lo; v < hi; v++) c += fkey(l[v]) >= cand;
      if (block_sum(c, shl) >= top_k) tk = cand;
    }
    long long above = 0, ties = 0;
    for (long long v = lo; v < hi; v++) {
      const uint32_t k = fkey(l[v]);
      above += k > tk;
      ties += k == tk;
    }
    need = top_k - block_sum(above, shl);
    tie0 = block_exclusive(ties, shl);
  }
  const double T = temperature;
  /* kept(v) in id order within the thread: the tie counter advances */
#define KEPT_LOOP(body)                                        \
  {                                                            \
    long long rank = tie0;                                     \
    for (long long v = lo; v < hi; v++) {                      \
      const uint32_t k = fkey(l[v]);                           \
      bool kept = true;                                        \
      if (use_k) {                                             \
        if (k == tk) kept = rank++ < need;                     \
        else kept = k > tk;                                    \
      }                                                        \
      if (kept) { body; }                                      \
    }                                                          \
  }
  uint32_t tp = 0;
  if (top_p > 0.0 && top_p < 1.0) {
    double z = 0.0;
    KEPT_LOOP(z += exp(((double)l[v] - mx) / T));
    z = block_sum(z, shd);
    for (int bit = 31; bit >= 0; bit--) {
      const uint32_t cand = tp | (1u << bit);
      double m = 0.0;
      KEPT_LOOP(if (k >= cand) m += exp(((double)l[v] - mx) / T));
      if (block_sum(m, shd) >= top_p * z) tp = cand;
    }
  }
  double part = 0.0;
  long long last = -1;
  KEPT_LOOP(if (k >= tp) { part += exp(((double)l[v] - mx) / T); last = v; });
  const double z = block_sum(part, shd);
  const double before = block_exclusive(part, shd);
  const double target = draw_uniform(seed, b, pos[b]) * z;
  if (threadIdx.x == 0) result = 0x7fffffff;
  __syncthreads();
  /* the thread whose share holds the target walks it; should rounding of
   * the scan let two threads claim it, the lower id wins (atomicMin), so
   * the draw stays deterministic */
  if (part > 0.0 && target >= before && target < before + part) {
    double acc = before;
    int found = -1;
    KEPT_LOOP(if (k >= tp && found < 0) {
      acc += exp(((double)l[v] - mx) / T);
      if (target < acc) found = (int)v;
    });
    atomicMin(&result, found >= 0 ? found : (int)last);
  }
  __syncthreads();
  /* rounding past the end: the last kept id */
  long long lastall = last;
  for (int o = 16; o > 0; o >>= 1) {
    const long long ol = __shfl_xor_sync(0xffffffffu, lastall, o);
    lastall = ol > lastall ? ol : lastall;
  }
  if ((threadIdx.x & 31) == 0) shl[threadIdx.x >> 5] = lastall;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long la = -1;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) la = shl[i] > la ? shl[i] : la;
    tokens[b] = result != 0x7fffffff ? result : (la >= 0 ? (int)la : argmax);
  }
#undef KEPT_LOOP
}

} // namespace

extern "C" coda_status coda_cuda_decode_sample(coda_context ctx, const coda_decode_sample_job *j) {
  if (j->B == 0) return CODA_OK;
  if (j->V > 2147483647LL)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "sampling: vocab %lld", (long long)j->V);
  return launch(ctx, "sampling", sample_kernel, dim3((unsigned)j->B), dim3(kSampleThreads), 0,
                j->tokens, j->logits, j->pos, (long long)j->V, j->temperature, j->top_k, j->top_p,
                j->seed);
}
