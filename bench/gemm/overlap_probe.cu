/* Does the pingpong schedule hide the epilogue under the other warpgroup's
 * MMA? A probe of the mainloop alone (no libcoda): the plain store epilogue
 * of gemm_sm90.cuh wrapped in a functor that first runs NF dependent FMAs
 * on every accumulator value, and records per tile (SM clock) when the
 * mainloop was 4 k-blocks from its end, when the epilogue started and when
 * it ended, for the consumers of the first CTAs.
 *
 *   overlap_probe [M N K]        (default 16384 2048 2048)
 *
 * Prints per variant (NF = 0, 20, 80; TMA store or staged thread stores):
 * the median time of 20 runs (CUDA events), and from the trace of CTA 0 the
 * median epilogue length and the median interval between the ends of
 * consecutive tiles (the two consumers alternate: with a hidden epilogue
 * that interval is the MMA time of one tile and does not grow with NF).
 *
 * A second table adds a tile input, in the shape of the generated
 * llama_residual epilogue (D = acc + R): R arrives in 64 x 32-column chunks
 * through the scratch by cp.async, the sum is rounded into a swizzled
 * chunk and stored by TMA; once with chunk j+1 requested while chunk j is
 * computed (the code generator's scheme), once with all four chunks
 * requested together and the sum written in place. */
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "backends/cuda/gemm_sm90.cuh"
#include "gpu/cuda_check.h"

using namespace coda_sm90;


constexpr int kTraceCtas = 4, kTraceTiles = 64, kFields = 3;

template <int NF>
struct ProbeEpi {
  StoreEpilogue st;
  unsigned long long *trace; /* [cta][consumer][tile][field] */
  unsigned int *count;       /* [cta][consumer] */

  __device__ __forceinline__ unsigned long long *slot(int field) const {
    const int cw = threadIdx.x / 128 - 1;
    const unsigned int n = count[blockIdx.x * 2 + cw];
    if (blockIdx.x >= kTraceCtas || n >= kTraceTiles) return nullptr;
    return trace + (((size_t)blockIdx.x * 2 + cw) * kTraceTiles + n) * kFields + field;
  }
  __device__ __forceinline__ void prefetch(int, int, const EpiScratch &) const {
    if (threadIdx.x % 128 == 0)
      if (unsigned long long *p = slot(0)) *p = clock64();
  }
  __device__ __forceinline__ void finish() const { st.finish(); }
  template <int BN>
  __device__ __forceinline__ void operator()(const AccFragment<BN> &f, const EpiScratch &sc) const {
    const bool first = sc.pre != 0, lead = threadIdx.x % 128 == 0;
    if (first && lead)
      if (unsigned long long *p = slot(1)) *p = clock64();
    AccFragment<BN> g = f;
#pragma unroll
    for (int k = 0; k < NF; ++k)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) g.v[i] = fmaf(g.v[i], 0.999f, 0.001f);
    st(g, sc);
    if (!first) {
      wg_sync(sc.bar);
      if (lead) {
        if (unsigned long long *p = slot(2)) *p = clock64();
        count[blockIdx.x * 2 + threadIdx.x / 128 - 1]++;
      }
    }
  }
};

__device__ __forceinline__ void cp16(void *s, const void *g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void probe_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void probe_cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* byte offset of (row, byte) in a 64-byte-row chunk, 64-byte swizzle */
__device__ __forceinline__ int swz64(int row, int b) {
  return row * 64 + ((((b >> 4) ^ ((row / 2) % 4)) << 4) | (b & 15));
}

/* D = acc + R, bf16. MODE 1: chunk j+1 of R requested while chunk j is
 * computed, outputs in two separate buffers; MODE 2: all four chunks of R
 * requested at once (16 KB), the sum written over the chunk it read. */
template <int MODE>
struct ResidualEpi {
  ProbeEpi<0> tr; /* tracing (its store part is unused) */
  CUtensorMap tmap_d; /* D, box 32 x 64, 64-byte swizzle */
  const __nv_bfloat16 *r;
  long long ldr;
  int M;

  __device__ __forceinline__ void load_chunk(uint8_t *buf, int wr0, int c0) const {
    const int t = threadIdx.x % 128;
#pragma unroll
    for (int i = 0; i < 2; ++i) { /* 64 rows x 4 units of 16 bytes */
      const int v = t + 128 * i, row = v / 4, u = v % 4;
      if (wr0 + row < M) cp16(buf + swz64(row, 16 * u), r + (long long)(wr0 + row) * ldr + c0 + 8 * u);
    }
  }
  __device__ __forceinline__ void request(uint8_t *sb, int wr0, int tc0) const {
    /* the previous fragment's TMA stores may still read the buffers */
    if (MODE == 2) { /* in place: the previous fragment's TMA stores may still read */
      if (threadIdx.x % 128 == 0) bulk_wait_read<0>();
      wg_sync(kEpiBar + threadIdx.x / 128 - 1);
    }
    if (MODE == 1) load_chunk(sb, wr0, tc0);
    else
#pragma unroll
      for (int c = 0; c < 4; ++c) load_chunk(sb + 4096 * c, wr0, tc0 + 32 * c);
    probe_cp_commit();
  }
  __device__ __forceinline__ void prefetch(int wr0, int tc0, const EpiScratch &sc) const {
    tr.prefetch(wr0, tc0, sc);
    request((uint8_t *)sc.buf, wr0, tc0);
  }
  __device__ __forceinline__ void finish() const {
    if (threadIdx.x % 128 == 0) bulk_wait_all();
  }
  template <int BN>
  __device__ __forceinline__ void operator()(const AccFragment<BN> &f, const EpiScratch &sc) const {
    static_assert(BN == 128, "four chunks of 32 columns");
    const bool first = sc.pre != 0, lead = threadIdx.x % 128 == 0;
    if (first && lead)
      if (unsigned long long *p = tr.slot(1)) *p = clock64();
    const int t = threadIdx.x % 128, lane = t % 32, qd = lane % 4;
    const int lrow = (t / 32) * 16 + lane / 4, wr0 = f.row0 - lrow, tc0 = f.col0 - 2 * qd;
    uint8_t *sb = (uint8_t *)sc.buf;
    if (!sc.pre) request(sb, wr0, tc0);
#pragma unroll
    for (int jc = 0; jc < 4; ++jc) {
      uint8_t *in = MODE == 1 ? sb + 4096 * (jc & 1) : sb + 4096 * jc;
      uint8_t *out = MODE == 1 ? sb + 8192 + 4096 * (jc & 1) : in;
      if (MODE == 1) {
        if (jc < 3) {
          load_chunk(sb + 4096 * ((jc + 1) & 1), wr0, tc0 + 32 * (jc + 1));
          probe_cp_commit();
          probe_cp_wait<1>();
        } else {
          probe_cp_wait<0>();
        }
        if (lead) bulk_wait_read<1>(); /* the store of chunk jc - 2 has read its buffer */
      } else if (jc == 0) {
        probe_cp_wait<0>();
      }
      wg_sync(sc.bar);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i0 = 4 * (4 * jc + jj) + 2 * h, off = swz64(lrow + 8 * h, 2 * (8 * jj + 2 * qd));
          const float2 x = __bfloat1622float2(*(const __nv_bfloat162 *)(in + off));
          *(uint32_t *)(out + off) = pack2(kOutBF16, f.v[i0] + x.x, f.v[i0 + 1] + x.y);
        }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      wg_sync(sc.bar);
      if (lead) {
        tma_store_2d(&tmap_d, out, tc0 + 32 * jc, wr0);
        bulk_commit();
      }
    }
    if (!first) {
      wg_sync(sc.bar);
      if (lead) {
        if (unsigned long long *p = tr.slot(2)) *p = clock64();
        tr.count[blockIdx.x * 2 + threadIdx.x / 128 - 1]++;
      }
    }
  }
};

static PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  return (PFN_cuTensorMapEncodeTiled_v12000)fn;
}
static void map2d(CUtensorMap *m, const void *p, long long rows, long long cols, unsigned box_c,
                  unsigned box_r, bool store,
                  CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_128B) {
  cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
  cuuint32_t box[2] = {box_c, box_r}, estr[2] = {1, 1};
  CUresult r = encoder()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box, estr,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
                         store ? CU_TENSOR_MAP_L2_PROMOTION_NONE : CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "tensor map: error %d\n", (int)r);
    exit(1);
  }
}

__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float u = (h & 0xffff) / 65536.0f; /* [0, 1) */
    p[i] = __float2bfloat16((u < 0.5f ? -1.f : 1.f) * (0.02f + 0.05f * u));
  }
}

/* Times kernel `kern` with epilogue e (median of 20 after 5 warm-ups) and
 * reports it with the trace of its last run (CTA 0). */
template <class Epi>
static void time_and_report(const char *name, const char *tag, const Epi &e, int M, int N, int K,
                            __nv_bfloat16 *A, __nv_bfloat16 *B, unsigned long long *trace,
                            unsigned int *count, int sms) {
  auto kern = gemm_kernel<128, 6, true, false, true, false, Epi>;
  constexpr size_t smem = smem_bytes<128, 6>();
  CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  CUtensorMap ta, tb;
  map2d(&ta, A, M, K, 64, 128, false);
  map2d(&tb, B, N, K, 64, 128, false);
  const int tiles = ((M + 127) / 128) * ((N + 127) / 128);
  const int grid = tiles < sms ? tiles : sms, kbs = (K + 63) / 64;
  std::vector<float> t;
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int it = 0; it < 25; ++it) {
    CUDA_CHECK(cudaMemset(count, 0, kTraceCtas * 2 * sizeof(unsigned)));
    CUDA_CHECK(cudaEventRecord(e0));
    kern<<<grid, kThreads, smem>>>(ta, tb, M, N, K, 8, 1, kbs, e);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= 5) t.push_back(ms);
  }
  CUDA_CHECK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  /* the trace of the last run, CTA 0: tile ends of both consumers merged */
  std::vector<unsigned long long> h(2 * kTraceTiles * kFields);
  unsigned cnt[2];
  CUDA_CHECK(cudaMemcpy(h.data(), trace, h.size() * 8, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(cnt, count, 8, cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> ends;
  std::vector<double> epi, tail;
  for (int c = 0; c < 2; ++c)
    for (unsigned j = 0; j < cnt[c] && j < (unsigned)kTraceTiles; ++j) {
      const unsigned long long *r = &h[((size_t)c * kTraceTiles + j) * kFields];
      ends.push_back(r[2]);
      epi.push_back((double)(r[2] - r[1]));
      tail.push_back((double)(r[1] - r[0]));
    }
  std::sort(ends.begin(), ends.end());
  std::vector<double> gap;
  for (size_t i = 1; i < ends.size(); ++i) gap.push_back((double)(ends[i] - ends[i - 1]));
  auto med = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double flop = 2.0 * M * N * K, ms = t[t.size() / 2];
  printf("%-22s %s  %8.4f ms  %6.1f TFLOP/s  tiles(cta0) %u+%u  epilogue %7.0f clk  "
         "last-4-kb+wait %6.0f clk  tile interval %7.0f clk\n",
         name, tag, ms, flop / ms * 1e-9, cnt[0], cnt[1], med(epi), med(tail), med(gap));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
}

template <int NF>
static void run(const char *name, int M, int N, int K, int use_tma, __nv_bfloat16 *A,
                __nv_bfloat16 *B, __nv_bfloat16 *D, unsigned long long *trace, unsigned int *count,
                int sms) {
  ProbeEpi<NF> e;
  memset(&e, 0, sizeof e);
  e.st.d = D;
  e.st.ldd = N;
  e.st.M = M;
  e.st.N = N;
  e.st.out_type = kOutBF16;
  e.st.alpha = 1.f;
  e.st.pair_ok = e.st.vec_ok = 1;
  e.st.use_tma = use_tma;
  if (use_tma) map2d(&e.st.tmap_d, D, M, N, 64, 64, true);
  e.trace = trace;
  e.count = count;
  time_and_report(name, use_tma ? "tma   " : "staged", e, M, N, K, A, B, trace, count, sms);
}

/* D = acc + R through the scratch (see ResidualEpi). */
template <int MODE>
static void run_residual(const char *name, int M, int N, int K, __nv_bfloat16 *A, __nv_bfloat16 *B,
                         __nv_bfloat16 *D, const __nv_bfloat16 *R, unsigned long long *trace,
                         unsigned int *count, int sms) {
  ResidualEpi<MODE> e;
  memset(&e, 0, sizeof e);
  e.tr.trace = trace;
  e.tr.count = count;
  map2d(&e.tmap_d, D, M, N, 32, 64, true, CU_TENSOR_MAP_SWIZZLE_64B);
  e.r = R;
  e.ldr = N;
  e.M = M;
  time_and_report(name, "tma   ", e, M, N, K, A, B, trace, count, sms);
  /* spot check of D = A B^T + R at 64 points against a double sum */
  std::vector<__nv_bfloat16> a(K), b(K);
  double worst = 0, scale = 0;
  unsigned h = 12345;
  for (int i = 0; i < 64; ++i) {
    h = h * 1103515245u + 12345u;
    const int m = (int)(h % (unsigned)M);
    h = h * 1103515245u + 12345u;
    const int n = (int)(h % (unsigned)N);
    __nv_bfloat16 d, rv;
    CUDA_CHECK(cudaMemcpy(a.data(), A + (size_t)m * K, K * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), B + (size_t)n * K, K * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&d, D + (size_t)m * N + n, 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&rv, R + (size_t)m * N + n, 2, cudaMemcpyDeviceToHost));
    double ref = __bfloat162float(rv);
    for (int k = 0; k < K; ++k) ref += (double)__bfloat162float(a[k]) * __bfloat162float(b[k]);
    worst = std::max(worst, std::fabs((double)__bfloat162float(d) - ref));
    scale = std::max(scale, std::fabs(ref));
  }
  /* one bf16 rounding of the result: half an ulp of the largest value */
  printf("  check: max|D - ref| = %.3g at max|ref| = %.3g (%s)\n", worst, scale,
         worst <= scale * 0.0079 + 1e-3 ? "ok" : "MISMATCH");
}

int main(int argc, char **argv) {
  int M = 16384, N = 2048, K = 2048;
  if (argc == 4) {
    M = atoi(argv[1]);
    N = atoi(argv[2]);
    K = atoi(argv[3]);
  }
  if (M < 128 || N < 128 || K < 256 || N % 8 || K % 8) {
    fprintf(stderr, "usage: overlap_probe [M N K] (M, N >= 128, K >= 256, N and K multiples of 8)\n");
    return 2;
  }
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  __nv_bfloat16 *A, *B, *D;
  unsigned long long *trace;
  unsigned int *count;
  CUDA_CHECK(cudaMalloc(&A, (size_t)M * K * 2));
  CUDA_CHECK(cudaMalloc(&B, (size_t)N * K * 2));
  CUDA_CHECK(cudaMalloc(&D, (size_t)M * N * 2));
  CUDA_CHECK(cudaMalloc(&trace, (size_t)kTraceCtas * 2 * kTraceTiles * kFields * 8));
  CUDA_CHECK(cudaMalloc(&count, kTraceCtas * 2 * sizeof(unsigned)));
  fill<<<1024, 256>>>(A, (size_t)M * K, 1);
  fill<<<1024, 256>>>(B, (size_t)N * K, 2);
  CUDA_CHECK(cudaDeviceSynchronize());
  printf("pingpong 128x128x64, 6 stages, M=%d N=%d K=%d, %d SMs; clk = SM clock cycles (CTA 0)\n", M,
         N, K, sms);
  for (int tma = 1; tma >= 0; --tma) {
    run<0>("store", M, N, K, tma, A, B, D, trace, count, sms);
    run<20>("store + 20 fma/elem", M, N, K, tma, A, B, D, trace, count, sms);
    run<80>("store + 80 fma/elem", M, N, K, tma, A, B, D, trace, count, sms);
  }
  if (N % 128 == 0) { /* whole 32-column chunks of R inside every row */
    __nv_bfloat16 *R;
    CUDA_CHECK(cudaMalloc(&R, (size_t)M * N * 2));
    fill<<<1024, 256>>>(R, (size_t)M * N, 3);
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("with a tile input R (D = acc + R, bf16):\n");
    run_residual<1>("+R, chunk by chunk", M, N, K, A, B, D, R, trace, count, sms);
    run_residual<2>("+R, 4 chunks at once", M, N, K, A, B, D, R, trace, count, sms);
    CUDA_CHECK(cudaFree(R));
  }
  return 0;
}
