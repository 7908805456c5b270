/* Times the Hopper GEMM (coda_cuda_gemm) and cuBLAS (cublasGemmEx, fp32
 * compute, 32 MiB workspace) on the same data in the same run: per variant,
 * 3 interleaved rounds of 5 warm-up calls and 30 back-to-back calls with an
 * event between consecutive calls; the median of the 90 intervals is
 * reported. Inputs are random bf16 (never zeros),
 * output bf16. Usage: bench_gemm [--quick] [--tuned] [--diag] [--config NAME]...
 * [--shape NAME]... [--no-configs] [--sm80] [--json FILE]; bench_gemm
 * --precompile [CC]. Prints a markdown table. --config keeps only the tile
 * configurations whose name contains NAME (e.g. "c2": the cluster entries),
 * --no-configs none of them (the default column, cuBLAS and the others
 * asked for only), --shape only the shapes whose name contains NAME (both
 * repeatable). The columns per tile configuration and "default" run with
 * tuning off; --tuned adds the autotuner's choice (a second context with
 * tuning on; its one-time tuning cost, or 0 when the cache file already
 * held the key, in "tune ms") against cuBLAS.
 *
 * The sm80 path (base/arch.h): --sm80 adds its plain GEMM (the fused kernel
 * with a store program, coda_cuda_gemm_path, on a second context made with
 * CODA_ARCH=sm80) to the same interleaved rounds, and its ratio to the
 * Hopper default per shape, with geometric means over all shapes and over
 * the 1B ones. Run with CODA_ARCH=sm80 in the environment instead, the
 * default column itself is the sm80 path (the tile configurations and
 * --tuned are Hopper-only and refused). The first line names the path of
 * each timed coda column. --json FILE writes the rows as JSON too. --lt
 * adds cuBLASLt (cublasLtMatmul with the heuristic's first algorithm for
 * the shape and the same 32 MiB workspace: what PyTorch's matmul calls)
 * to the rounds, with default/cuBLASLt per shape and its geometric mean.
 * --cutlass (a build with CODA_CUTLASS_INCLUDE: bench/gemm/cutlass_sm80.cu)
 * adds CUTLASS's sm_80 GEMM, each of its tile configurations in the rounds
 * and the best per shape reported, with the sm80 path's time against it
 * (time of CUTLASS / time of the sm80 path: the --sm80 column, or the
 * default one under CODA_ARCH=sm80; else the default column's).
 * --precompile [CC] compiles the sm80 path's kernels this benchmark runs
 * (bf16, alpha 1, its three layouts) for compute capability CC (default
 * 90: an H100/H200 forced to the path) into the kernel cache; no GPU. */
#include <chrono>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

extern "C" {
#include "base/internal.h"
#include "backends/cuda/backend.h"
#include "backends/cuda/gemm_internal.h"
#include "gpu/cuda_check.h"
}
#ifdef CODA_BENCH_CUTLASS
#include "cutlass_sm80.h"
#endif


__global__ void fill_random(__nv_bfloat16 *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352d;
    h ^= h >> 15;
    h *= 0x846ca68b;
    h ^= h >> 16;
    p[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

#ifdef CODA_BENCH_CUTLASS
/* m[0] = max |d - ref|, m[1] = max |ref| (non-negative floats order as
 * their bits): CUTLASS's result against cuBLAS's on the same operands. */
__global__ void max_diff(const __nv_bfloat16 *d, const __nv_bfloat16 *ref, size_t n,
                         unsigned *m) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float r = __bfloat162float(ref[i]);
    atomicMax(&m[0], __float_as_uint(fabsf(__bfloat162float(d[i]) - r)));
    atomicMax(&m[1], __float_as_uint(fabsf(r)));
  }
}
#endif

struct Shape {
  const char *name;
  int M, N, K;
  coda_transpose ta, tb;
};

static const int kWarm = 5, kReps = 30, kRounds = 3;

/* Appends kReps back-to-back timings (ms) of call() to t. */
template <class F>
static void sample_ms(F call, std::vector<float> &t) {
  for (int i = 0; i < kWarm; ++i) call();
  std::vector<cudaEvent_t> ev(kReps + 1);
  for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(ev[0]));
  for (int i = 0; i < kReps; ++i) {
    call();
    CUDA_CHECK(cudaEventRecord(ev[i + 1]));
  }
  CUDA_CHECK(cudaEventSynchronize(ev[kReps]));
  CUDA_CHECK(cudaGetLastError());
  for (int i = 0; i < kReps; ++i) {
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    t.push_back(ms);
  }
  for (auto &e : ev) cudaEventDestroy(e);
}
static float median(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/* --diag: time vs K and output type at M = 16384, N = 2048 (forward
 * layout), to separate per-tile costs (epilogue, pipeline ramp) from
 * per-k-block costs. */
static void diag(coda_context ctx) {
  const int M = 16384, N = 2048, Kmax = 4096;
  __nv_bfloat16 *a, *b;
  void *d;
  CUDA_CHECK(cudaMalloc(&a, (size_t)M * Kmax * 2));
  CUDA_CHECK(cudaMalloc(&b, (size_t)N * Kmax * 2));
  CUDA_CHECK(cudaMalloc(&d, (size_t)M * N * 4));
  fill_random<<<1024, 256>>>(a, (size_t)M * Kmax, 99u);
  fill_random<<<1024, 256>>>(b, (size_t)N * Kmax, 98u);
  printf("| K | out | config | ms | ms, no stores | ms, staging only |\n|---|---|---|---|---|---|\n");
  for (int K = 512; K <= Kmax; K *= 2)
    for (int o = 0; o < 2; ++o)
      for (int c = 0; c < coda_cuda_gemm_num_configs(); ++c) {
        coda_tensor A = {a, CODA_BF16, M, K, K}, B = {b, CODA_BF16, N, K, K};
        coda_tensor D = {d, o ? CODA_F32 : CODA_BF16, M, N, N};
        std::vector<float> t;
        float ms[3];
        for (int x = 0; x < 3; ++x) {
          std::vector<float> t;
          sample_ms([&] { coda_cuda_gemm_config(ctx, CODA_N, &A, CODA_T, &B, &D, 1.f, 0, c, 0, x); },
                    t);
          ms[x] = median(t);
        }
        printf("| %d | %s | %d | %.4f | %.4f | %.4f |\n", K, o ? "f32" : "bf16", c, ms[0], ms[1],
               ms[2]);
      }
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
}

/* --precompile [CC] (sm80_precompile.c: the compiler's header is C only). */
extern "C" int bench_gemm_sm80_precompile(int cc);

/* A context of the sm80 path (the option, whatever CODA_ARCH says). */
static coda_status create_sm80_context(const coda_context_options *o, coda_context *out) {
  coda_context_options s80 = *o;
  s80.arch = CODA_ARCH_SM80;
  return coda_context_create(&s80, out);
}

/* cuBLASLt for one shape: row-major D (M x N) = A op(B) as the column-major
 * D^T = op(B)^T A^T, the operands as cublasGemmEx gets them below; the
 * heuristic's first algorithm within the workspace. */
struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool ok = false;
  LtGemm(cublasLtHandle_t lt, int M, int N, int K, coda_transpose ta, coda_transpose tb,
         int64_t lda, int64_t ldb, size_t ws) {
    const cublasOperation_t oa = tb == CODA_T ? CUBLAS_OP_T : CUBLAS_OP_N,
                            ob = ta == CODA_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, oa == CUBLAS_OP_N ? N : K,
                                    oa == CUBLAS_OP_N ? K : N, ldb) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, ob == CUBLAS_OP_N ? K : M,
                                    ob == CUBLAS_OP_N ? M : K, lda) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, N, M, N) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &n) ==
             CUBLAS_STATUS_SUCCESS &&
         n > 0;
    if (ok) algo = res.algo;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
  cublasStatus_t run(cublasLtHandle_t lt, const void *a, const void *b, void *d, void *ws,
                     size_t wsz) const {
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(lt, op, &one, b, la, a, lb, &zero, d, ld, d, ld, &algo, ws, wsz, 0);
  }
  ~LtGemm() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/* One row of --json. */
struct JsonRow {
  Shape s;
  double ms_default, ms_cublas, ms_sm80, ms_tuned, ms_lt, ms_cutlass;
  int default_cfg, cutlass_cfg;
  double cutlass_err; /* max |CUTLASS - cuBLAS| / max |cuBLAS| over its configurations */
  bool ok;
};

static void write_json(const char *path, const char *gpu, const char *main_path, bool sm80,
                       const std::vector<JsonRow> &rows, double geo_cub, double geo_80,
                       double geo_80_1b, double geo_lt, double geo_cut) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "bench_gemm: cannot write %s\n", path);
    return;
  }
  fprintf(f, "{\n \"benchmark\": \"bench_gemm\",\n \"gpu\": \"%s\",\n", gpu);
  fprintf(f, " \"default_path\": \"%s\",\n \"dtype\": \"bf16\",\n", main_path);
  fprintf(f, " \"timing\": \"median of 3 interleaved rounds x 30 back-to-back calls\",\n");
  fprintf(f, " \"rows\": [\n");
  for (size_t i = 0; i < rows.size(); i++) {
    const JsonRow &r = rows[i];
    const double flop = 2.0 * r.s.M * r.s.N * (double)r.s.K;
    auto tf = [&](double ms) { return ms > 0 ? flop / (ms * 1e-3) / 1e12 : -1.0; };
    fprintf(f,
            "  {\"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"layout\": \"%s%s\", "
            "\"ok\": %s, \"default_ms\": %.5f, \"default_tflops\": %.2f, \"default_config\": %d, "
            "\"cublas_ms\": %.5f, \"cublas_tflops\": %.2f",
            r.s.name, r.s.M, r.s.N, r.s.K, r.s.ta == CODA_T ? "T" : "N", r.s.tb == CODA_T ? "T" : "N",
            r.ok ? "true" : "false", r.ms_default, tf(r.ms_default), r.default_cfg, r.ms_cublas,
            tf(r.ms_cublas));
    if (sm80)
      fprintf(f, ", \"sm80_ms\": %.5f, \"sm80_tflops\": %.2f, \"sm80_over_hopper\": %.4f",
              r.ms_sm80, tf(r.ms_sm80), r.ms_default / r.ms_sm80);
    if (r.ms_tuned > 0) fprintf(f, ", \"tuned_ms\": %.5f", r.ms_tuned);
    if (r.ms_lt > 0)
      fprintf(f, ", \"cublaslt_ms\": %.5f, \"cublaslt_tflops\": %.2f", r.ms_lt, tf(r.ms_lt));
#ifdef CODA_BENCH_CUTLASS
    if (r.ms_cutlass > 0)
      fprintf(f, ", \"cutlass_sm80_ms\": %.5f, \"cutlass_sm80_tflops\": %.2f, \"cutlass_sm80_config\": \"%s\", "
              "\"cutlass_sm80_max_rel_diff_vs_cublas\": %.3g",
              r.ms_cutlass, tf(r.ms_cutlass), bench_cutlass_sm80_name(r.cutlass_cfg), r.cutlass_err);
#endif
    fprintf(f, "}%s\n", i + 1 < rows.size() ? "," : "");
  }
  fprintf(f, " ],\n \"geomean_default_over_cublas\": %.4f", geo_cub);
  if (geo_lt > 0) fprintf(f, ",\n \"geomean_default_over_cublaslt\": %.4f", geo_lt);
  if (geo_cut > 0) fprintf(f, ",\n \"geomean_sm80_over_cutlass_sm80\": %.4f", geo_cut);
  if (sm80)
    fprintf(f, ",\n \"geomean_sm80_over_hopper\": %.4f,\n \"geomean_sm80_over_hopper_1b\": %.4f",
            geo_80, geo_80_1b);
  fprintf(f, "\n}\n");
  fclose(f);
}

int main(int argc, char **argv) {
  bool quick = false, tuned = false, diag_only = false, no_configs = false, sm80 = false,
       use_lt = false, use_cut = false;
  const char *json = NULL;
  std::vector<const char *> cfg_filter, shape_filter;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) quick = true;
    else if (strcmp(argv[i], "--tuned") == 0) tuned = true;
    else if (strcmp(argv[i], "--diag") == 0) diag_only = true;
    else if (strcmp(argv[i], "--no-configs") == 0) no_configs = true;
    else if (strcmp(argv[i], "--sm80") == 0) sm80 = true;
    else if (strcmp(argv[i], "--lt") == 0) use_lt = true;
    else if (strcmp(argv[i], "--cutlass") == 0) {
#ifdef CODA_BENCH_CUTLASS
      use_cut = true;
#else
      fprintf(stderr, "bench_gemm: --cutlass needs a build with CUTLASS's headers "
                      "(cmake -DCODA_CUTLASS_INCLUDE=DIR; bench/gemm/fetch_cutlass.sh)\n");
      return 2;
#endif
    }
    else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    else if (strcmp(argv[i], "--precompile") == 0) {
      const int cc = i + 1 < argc ? atoi(argv[i + 1]) : 90;
      if (cc < 80 || (i + 2 < argc)) {
        fprintf(stderr, "usage: bench_gemm --precompile [CC >= 80]\n");
        return 2;
      }
      return bench_gemm_sm80_precompile(cc);
    } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) cfg_filter.push_back(argv[++i]);
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) shape_filter.push_back(argv[++i]);
    else {
      const bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
      fprintf(help ? stdout : stderr,
              "usage: bench_gemm [--quick] [--tuned] [--diag] [--config NAME]... [--no-configs]\n"
              "                  [--shape NAME]... [--sm80] [--lt] [--cutlass] [--json FILE]\n"
              "       bench_gemm --precompile [CC]   (the sm80 path's kernels for sm_CC, "
              "default 90; no GPU)\n");
      return help ? 0 : 2;
    }
  }
  auto matches = [](const std::vector<const char *> &f, const char *name) {
    if (f.empty()) return true;
    for (const char *x : f)
      if (strstr(name, x)) return true;
    return false;
  };
  if (!coda_cuda_available()) {
    printf("bench_gemm: no usable GPU (compute capability 8.0 or newer)\n");
    return 1;
  }
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  coda_context ctx, ctx_t = NULL, ctx_80 = NULL;
  if (coda_context_create(&o, &ctx) != CODA_OK) {
    char why[512];
    coda_context_options_check(&o, why, sizeof why);
    fprintf(stderr, "bench_gemm: no CUDA context: %s\n", why);
    return 1;
  }
  /* the main context's path: sm90 (Hopper), or sm80 when CODA_ARCH=sm80
   * (or the GPU is not a Hopper) */
  const bool main80 = coda_cuda_sm80(ctx) != 0;
  const char *main_path = main80 ? "sm80" : "sm90";
  if (main80 && (tuned || sm80 || diag_only || !cfg_filter.empty())) {
    fprintf(stderr, "bench_gemm: the context is on the sm80 path (CODA_ARCH=%s): --tuned, --diag, "
                    "--config and --sm80 need the Hopper path (CODA_ARCH unset on an sm_90 GPU)\n",
            getenv("CODA_ARCH") ? getenv("CODA_ARCH") : "");
    return 2;
  }
  /* The fixed default whatever CODA_AUTOTUNE says; the tuner on its own context. */
  if (coda_cuda_gemm_set_autotune(ctx, 0) != CODA_OK) return 1;
  if (tuned && (coda_context_create(&o, &ctx_t) != CODA_OK ||
                coda_cuda_gemm_set_autotune(ctx_t, 1) != CODA_OK))
    return 1;
  if (sm80 && (create_sm80_context(&o, &ctx_80) != CODA_OK || !coda_cuda_sm80(ctx_80))) {
    fprintf(stderr, "bench_gemm: no sm80-path context\n");
    return 1;
  }
  cublasHandle_t hb;
  if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS) return 1;
  void *ws;
  CUDA_CHECK(cudaMalloc(&ws, 32 << 20));
  cublasSetWorkspace(hb, ws, 32 << 20);
  cublasLtHandle_t lt = nullptr;
  if (use_lt && cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "bench_gemm: cublasLtCreate failed\n");
    return 1;
  }

  const coda_transpose N_ = CODA_N, T_ = CODA_T;
  /* fwd: Y = X W^T (W stored out x in); dgrad: dX = dY W; wgrad: dW = dY^T X. */
  std::vector<Shape> shapes = {
      {"square 2048", 2048, 2048, 2048, N_, T_},
      {"square 4096", 4096, 4096, 4096, N_, T_},
      {"square 8192", 8192, 8192, 8192, N_, T_},
      {"1B qkv fwd", 16384, 3072, 2048, N_, T_},
      {"1B qkv dgrad", 16384, 2048, 3072, N_, N_},
      {"1B qkv wgrad", 3072, 2048, 16384, T_, N_},
      {"1B up fwd", 16384, 8192, 2048, N_, T_},
      {"1B up dgrad", 16384, 2048, 8192, N_, N_},
      {"1B up wgrad", 8192, 2048, 16384, T_, N_},
      {"1B down fwd", 16384, 2048, 8192, N_, T_},
      {"1B down dgrad", 16384, 8192, 2048, N_, N_},
      {"1B down wgrad", 2048, 8192, 16384, T_, N_},
      {"8B qkv fwd", 8192, 6144, 4096, N_, T_},
      {"8B qkv dgrad", 8192, 4096, 6144, N_, N_},
      {"8B qkv wgrad", 6144, 4096, 8192, T_, N_},
      {"8B up fwd", 8192, 14336, 4096, N_, T_},
      {"8B up dgrad", 8192, 4096, 14336, N_, N_},
      {"8B up wgrad", 14336, 4096, 8192, T_, N_},
      {"8B down fwd", 8192, 4096, 14336, N_, T_},
      {"8B down dgrad", 8192, 14336, 4096, N_, N_},
      {"8B down wgrad", 4096, 14336, 8192, T_, N_},
      {"d512 up fwd", 16384, 2048, 512, N_, T_},
      {"d512 up dgrad", 16384, 512, 2048, N_, N_},
      {"d512 up wgrad", 2048, 512, 16384, T_, N_},
      {"d512 down fwd", 16384, 512, 2048, N_, T_},
      {"d512 down dgrad", 16384, 2048, 512, N_, N_},
      {"d512 down wgrad", 512, 2048, 16384, T_, N_},
  };
  if (quick) shapes.resize(3);
  {
    std::vector<Shape> keep;
    for (const Shape &s : shapes)
      if (matches(shape_filter, s.name)) keep.push_back(s);
    shapes = keep;
  }
  if (diag_only) {
    diag(ctx);
    return 0;
  }

  /* cfgs[i]: table index of the i-th timed configuration column */
  std::vector<int> cfgs;
  if (!main80 && !no_configs)
    for (int c = 0; c < coda_cuda_gemm_num_configs(); ++c)
      if (matches(cfg_filter, coda_cuda_gemm_config_name(c))) cfgs.push_back(c);
  const int ncfg = (int)cfgs.size();
  /* variant indices: the configurations, the default, cuBLAS, then each
   * column asked for in this order (-1: not asked for) */
  int nvar = ncfg + 2;
  const int V_DEF = ncfg, V_CUB = ncfg + 1;
  const int V_TUNED = tuned ? nvar++ : -1;
  const int V_80 = sm80 ? nvar++ : -1;
  const int V_LT = use_lt ? nvar++ : -1;
#ifdef CODA_BENCH_CUTLASS /* CUTLASS's configurations last */
  const int ncut = use_cut ? bench_cutlass_sm80_configs() : 0;
  const int V_CUT = use_cut ? nvar : -1;
  nvar += ncut;
#endif
  int num_sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("GPU: %s, %d SMs, compute capability %d.%d; default column: the %s path%s%s\n\n",
         prop.name, num_sms, prop.major, prop.minor, main_path,
         main80 ? " (mma.sync kernel with a store program, coda_cuda_gemm_path)"
                : " (prebuilt wgmma/TMA kernels, coda_cuda_gemm)",
         sm80 ? "; sm80 column: the sm80 path (CODA_ARCH=sm80 context, coda_cuda_gemm_path)" : "");
  if (!main80) {
    printf("TFLOP/s per tile configuration:");
    for (int c = 0; c < coda_cuda_gemm_num_configs(); ++c)
      printf(" [%d] %s;", c, coda_cuda_gemm_config_name(c));
    printf(" default = the one coda_cuda_gemm picks\n\n");
  }
  printf("| shape | M | N | K | layout |");
  for (int c : cfgs) printf(" [%d] |", c);
  printf(" default (%s) | default ms | cuBLAS | cuBLAS ms | default/cuBLAS |", main_path);
  if (tuned) printf(" tuned [cfg]xsplits | tuned ms | tuned/cuBLAS | tune ms |");
  if (sm80) printf(" sm80 | sm80 ms | sm80/Hopper | sm80/cuBLAS |");
  if (use_lt) printf(" cuBLASLt | cuBLASLt ms | default/cuBLASLt |");
  if (use_cut) printf(" CUTLASS sm80 (best) | CUTLASS ms | sm80/CUTLASS |");
  printf("\n|---|---|---|---|---|");
  for (int c = 0; c < ncfg; ++c) printf("---|");
  printf("---|---|---|---|---|%s%s%s", tuned ? "---|---|---|---|" : "", sm80 ? "---|---|---|---|" : "",
         use_lt ? "---|---|---|" : "");
  printf("%s\n", use_cut ? "---|---|---|" : "");
  double geo_cut = 0;
  double geo = 0, geo_t = 0, geo_80 = 0, geo_80_1b = 0, geo_lt = 0;
  int nrows = 0, n1b = 0;
  std::vector<JsonRow> jrows;
  for (const Shape &s : shapes) {
    const size_t na = (size_t)s.M * s.K, nb = (size_t)s.K * s.N, nd = (size_t)s.M * s.N;
    __nv_bfloat16 *a, *b, *d;
    CUDA_CHECK(cudaMalloc(&a, na * 2));
    CUDA_CHECK(cudaMalloc(&b, nb * 2));
    CUDA_CHECK(cudaMalloc(&d, nd * 2));
    fill_random<<<1024, 256>>>(a, na, 1234u);
    fill_random<<<1024, 256>>>(b, nb, 777u);
    CUDA_CHECK(cudaGetLastError());
    /* Stored shapes: A is M x K (N) or K x M (T); B is K x N (N) or N x K (T). */
    coda_tensor A = s.ta == CODA_N ? coda_tensor{a, CODA_BF16, s.M, s.K, s.K}
                                   : coda_tensor{a, CODA_BF16, s.K, s.M, s.M};
    coda_tensor B = s.tb == CODA_N ? coda_tensor{b, CODA_BF16, s.K, s.N, s.N}
                                   : coda_tensor{b, CODA_BF16, s.N, s.K, s.K};
    coda_tensor D = {d, CODA_BF16, s.M, s.N, s.N};
    bool ok = true;
    const double flop = 2.0 * s.M * s.N * (double)s.K;
    const LtGemm *ltg = use_lt ? new LtGemm(lt, s.M, s.N, s.K, s.ta, s.tb, A.ld, B.ld,
                                             (size_t)32 << 20)
                               : nullptr;
    if (ltg && !ltg->ok) {
      fprintf(stderr, "%s: cuBLASLt found no algorithm\n", s.name);
      ok = false;
    }
    /* Variants: each configuration, the default choice, cuBLAS (then the
     * tuned choice and the sm80 path when asked for); sampled in kRounds
     * interleaved rounds so clock and power drift hit all alike. */
    const float one = 1.f, zero = 0.f;
    auto check = [&](coda_status st, coda_context c, const char *what) {
      if (st != CODA_OK && ok) {
        fprintf(stderr, "%s%s: %s\n", s.name, what, coda_last_error(c));
        ok = false;
      }
    };
    auto run_variant = [&](int v) {
#ifdef CODA_BENCH_CUTLASS
      if (V_CUT >= 0 && v >= V_CUT) {
        const int st = bench_cutlass_sm80_gemm(v - V_CUT, s.M, s.N, s.K, s.ta, s.tb, a, A.ld, b,
                                               B.ld, d, D.ld, 0);
        if (st != 0 && ok) {
          fprintf(stderr, "%s: CUTLASS sm80 %s: status %d\n", s.name,
                  bench_cutlass_sm80_name(v - V_CUT), st);
          ok = false;
        }
        return;
      }
#endif
      if (v == V_TUNED) {
        check(coda_cuda_gemm(ctx_t, s.ta, &A, s.tb, &B, &D, 1.0f, 0), ctx_t, " (tuned)");
      } else if (v == V_LT) {
        const cublasStatus_t st = ltg->ok ? ltg->run(lt, a, b, d, ws, (size_t)32 << 20)
                                          : CUBLAS_STATUS_NOT_SUPPORTED;
        if (st != CUBLAS_STATUS_SUCCESS && ok) {
          fprintf(stderr, "%s: cuBLASLt status %d\n", s.name, (int)st);
          ok = false;
        }
      } else if (v == V_80) {
        check(coda_cuda_gemm_path(ctx_80, s.ta, &A, s.tb, &B, &D, 1.0f, 0), ctx_80, " (sm80)");
      } else if (v == V_DEF && main80) {
        check(coda_cuda_gemm_path(ctx, s.ta, &A, s.tb, &B, &D, 1.0f, 0), ctx, "");
      } else if (v <= V_DEF) {
        const int c = v < ncfg ? cfgs[v] : -1;
        check(coda_cuda_gemm_config(ctx, s.ta, &A, s.tb, &B, &D, 1.0f, 0, c, 0, 0), ctx, "");
      } else {
        cublasStatus_t st = cublasGemmEx(
            hb, s.tb == CODA_T ? CUBLAS_OP_T : CUBLAS_OP_N,
            s.ta == CODA_T ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, b, CUDA_R_16BF,
            (int)B.ld, a, CUDA_R_16BF, (int)A.ld, &zero, d, CUDA_R_16BF, s.N, CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS && ok) {
          fprintf(stderr, "%s: cuBLAS status %d\n", s.name, (int)st);
          ok = false;
        }
      }
    };
    /* The tuned variant's first call tunes (or reads the cache): timed
     * alone, outside the samples. */
    double tune_ms = 0;
    if (tuned) {
      CUDA_CHECK(cudaDeviceSynchronize());
      auto t0 = std::chrono::steady_clock::now();
      run_variant(V_TUNED);
      CUDA_CHECK(cudaDeviceSynchronize());
      tune_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
#ifdef CODA_BENCH_CUTLASS
    /* Each CUTLASS configuration's result against cuBLAS's, once, before
     * the timing: a layout taken wrongly would be timed as if right. */
    double cut_err = -1;
    if (use_cut && ok) {
      __nv_bfloat16 *ref;
      unsigned *m, hm[2];
      CUDA_CHECK(cudaMalloc(&ref, nd * 2));
      CUDA_CHECK(cudaMalloc(&m, sizeof hm));
      run_variant(V_CUB);
      CUDA_CHECK(cudaMemcpy(ref, d, nd * 2, cudaMemcpyDeviceToDevice));
      for (int c = 0; c < ncut && ok; ++c) {
        CUDA_CHECK(cudaMemset(d, 0xff, nd * 2)); /* NaN: an unwritten value fails */
        run_variant(V_CUT + c);
        CUDA_CHECK(cudaMemset(m, 0, sizeof hm));
        max_diff<<<1024, 256>>>(d, ref, nd, m);
        CUDA_CHECK(cudaMemcpy(hm, m, sizeof hm, cudaMemcpyDeviceToHost));
        float diff, mref;
        memcpy(&diff, &hm[0], 4);
        memcpy(&mref, &hm[1], 4);
        const double e = diff / (mref > 0 ? mref : 1.0f);
        if (!(e <= 2e-2)) { /* bf16 outputs of fp32 sums: a few units of 2^-8 */
          fprintf(stderr, "%s: CUTLASS sm80 %s differs from cuBLAS: max |d - ref| / max |ref| = %g\n",
                  s.name, bench_cutlass_sm80_name(c), e);
          ok = false;
        }
        cut_err = std::max(cut_err, e);
      }
      cudaFree(ref);
      cudaFree(m);
    }
#endif
    std::vector<std::vector<float>> samples(nvar);
    for (int round = 0; round < kRounds; ++round)
      for (int i = 0; i < nvar; ++i) { /* rotate the order between rounds */
        const int v = (i + round) % nvar;
        sample_ms([&] { run_variant(v); }, samples[v]);
      }
    std::vector<double> tf(ncfg);
    for (int c = 0; c < ncfg; ++c) tf[c] = flop / (median(samples[c]) * 1e-3) / 1e12;
    const float t_ours = median(samples[V_DEF]), t_cub = median(samples[V_CUB]);
    const double tf_ours = flop / (t_ours * 1e-3) / 1e12, tf_cub = flop / (t_cub * 1e-3) / 1e12;
    const int def_cfg = main80 ? -1 : coda_cuda_gemm_default_config(s.M, s.N, s.K, num_sms);
    printf("| %s | %d | %d | %d | %s%s |", s.name, s.M, s.N, s.K, s.ta == CODA_T ? "T" : "N",
           s.tb == CODA_T ? "T" : "N");
    for (int c = 0; c < ncfg; ++c) printf(" %.0f |", tf[c]);
    if (main80) printf(" %.0f |", tf_ours);
    else printf(" %.0f [%d] |", tf_ours, def_cfg);
    printf(" %.3f | %.0f | %.3f | %.2f |", t_ours, tf_cub, t_cub, tf_ours / tf_cub);
    JsonRow jr = {s, t_ours, t_cub, -1, -1, -1, -1, def_cfg, -1, -1, ok};
    if (tuned) {
      const float t_t = median(samples[V_TUNED]);
      const double tf_t = flop / (t_t * 1e-3) / 1e12;
      int tc = -1, ts = 0;
      coda_cuda_gemm_tuned_choice(ctx_t, s.ta, &A, s.tb, &B, &D, 0, &tc, &ts, NULL);
      printf(" %.0f [%d]x%d | %.3f | %.2f | %.1f |", tf_t, tc, ts, t_t, tf_t / tf_cub, tune_ms);
      geo_t += log(tf_t / tf_cub);
      jr.ms_tuned = t_t;
    }
    if (sm80) {
      const float t_80 = median(samples[V_80]);
      const double tf_80 = flop / (t_80 * 1e-3) / 1e12;
      printf(" %.0f | %.3f | %.2f | %.2f |", tf_80, t_80, t_ours / t_80, t_cub / t_80);
      geo_80 += log(t_ours / t_80);
      if (!strncmp(s.name, "1B ", 3)) {
        geo_80_1b += log(t_ours / t_80);
        n1b++;
      }
      jr.ms_sm80 = t_80;
    }
    if (use_lt) {
      const float t_lt = median(samples[V_LT]);
      printf(" %.0f | %.3f | %.2f |", flop / (t_lt * 1e-3) / 1e12, t_lt, t_lt / t_ours);
      geo_lt += log(t_lt / t_ours);
      jr.ms_lt = t_lt;
    }
#ifdef CODA_BENCH_CUTLASS
    if (use_cut) { /* the best configuration; against the sm80 path where one was timed */
      int best = 0;
      for (int c = 1; c < ncut; ++c)
        if (median(samples[V_CUT + c]) < median(samples[V_CUT + best])) best = c;
      const float t_cut = median(samples[V_CUT + best]);
      const float t_80 = sm80 ? median(samples[V_80]) : t_ours;
      printf(" %.0f [%s] | %.3f | %.2f |", flop / (t_cut * 1e-3) / 1e12,
             bench_cutlass_sm80_name(best), t_cut, t_cut / t_80);
      geo_cut += log(t_cut / t_80);
      jr.ms_cutlass = t_cut;
      jr.cutlass_cfg = best;
      jr.cutlass_err = cut_err;
    }
#endif
    delete ltg;
    jr.ok = ok;
    jrows.push_back(jr);
    printf("%s\n", ok ? "" : " (error)");
    fflush(stdout);
    geo += log(tf_ours / tf_cub);
    nrows++;
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
  }
  if (nrows == 0) {
    fprintf(stderr, "bench_gemm: no shape matches\n");
    return 2;
  }
  printf("\ngeometric mean coda %s/cuBLAS over %d shapes: %.3f\n", main_path, nrows,
         exp(geo / nrows));
  if (sm80) {
    printf("geometric mean sm80/Hopper (time of the Hopper default / time of the sm80 path) over "
           "%d shapes: %.3f\n", nrows, exp(geo_80 / nrows));
    if (n1b)
      printf("geometric mean sm80/Hopper over the %d 1B shapes: %.3f\n", n1b, exp(geo_80_1b / n1b));
  }
  if (use_lt)
    printf("geometric mean coda %s/cuBLASLt (time of cuBLASLt / time of coda) over %d shapes: "
           "%.3f\n", main_path, nrows, exp(geo_lt / nrows));
  if (use_cut)
    printf("geometric mean sm80/CUTLASS sm80 (time of CUTLASS's best / time of the %s column) "
           "over %d shapes: %.3f\n", sm80 ? "sm80" : "default", nrows, exp(geo_cut / nrows));
  if (json)
    write_json(json, prop.name, main_path, sm80, jrows, exp(geo / nrows),
               sm80 ? exp(geo_80 / nrows) : -1, sm80 && n1b ? exp(geo_80_1b / n1b) : -1,
               use_lt ? exp(geo_lt / nrows) : -1, use_cut ? exp(geo_cut / nrows) : -1);
  if (tuned) {
    printf("geometric mean tuned/cuBLAS over %d shapes: %.3f\n", nrows, exp(geo_t / nrows));
    printf("tuning cache: %s\n", coda_cuda_gemm_tune_path(ctx_t)[0] ? coda_cuda_gemm_tune_path(ctx_t) : "(memory only)");
    coda_context_destroy(ctx_t);
  }
  if (ctx_80) coda_context_destroy(ctx_80);
  cublasDestroy(hb);
  if (lt) cublasLtDestroy(lt);
  cudaFree(ws);
  coda_context_destroy(ctx);
  return 0;
}
