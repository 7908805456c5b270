/* --bench of the epilogue GPU test: the fused GEMM + program (both
 * schedules) against the plain GEMM on the Llama-like shapes, median of 20
 * (CUDA events). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "epilogue_gpu_util.h"
#include "backends/cuda/backend.h"
#include "lang/ir.h"

/* Benchmark cases: program on M x N x K (A row-major, B (N, K)); the first
 * block is the square-ish 2048 case, then Llama-1B-like layers. */
static const struct {
  const char *prog;
  int64_t M, N, K;
} kBench[] = {
    {"prim_store", 16384, 2048, 2048},
    {"prim_fma20", 16384, 2048, 2048},
    {"llama_residual", 16384, 2048, 2048},      {"llama_residual_norm", 16384, 2048, 2048},
    {"llama_swiglu", 16384, 2048, 2048},        {"llama_swiglu_bwd", 16384, 2048, 2048},
    {"llama_swiglu", 16384, 8192, 2048},        {"llama_residual_norm", 16384, 2048, 8192},
    {"llama_swiglu_bwd", 16384, 8192, 2048},
};
int is_bench_program(const char *name) {
  for (size_t i = 0; i < sizeof kBench / sizeof kBench[0]; i++)
    if (!strcmp(kBench[i].prog, name)) return 1;
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Fused GEMM + program vs the plain GEMM storing bf16 D, same shape. */
int bench(coda_context gpu) {
  int64_t M = 0, N = 0, K = 0;
  for (size_t b = 0; b < sizeof kBench / sizeof kBench[0]; b++) {
    if (kBench[b].M > M) M = kBench[b].M;
    if (kBench[b].N > N) N = kBench[b].N;
    if (kBench[b].K > K) K = kBench[b].K;
  }
  const int64_t Mmax = M, Nmax = N, Kmax = K;
  const size_t nA = (size_t)M * K, nB = (size_t)N * K;
  uint16_t *h = malloc(nA * 2);
  for (size_t i = 0; i < nA; i++) h[i] = f2bf((float)(0.05 * nonzero(0)));
  void *dA, *dB, *dD;
  CUDA_CHECK(cudaMalloc(&dA, nA * 2));
  CUDA_CHECK(cudaMalloc(&dB, nB * 2));
  CUDA_CHECK(cudaMalloc(&dD, (size_t)M * N * 2));
  CUDA_CHECK(cudaMemcpy(dA, h, nA * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dB, h, nB * 2, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float t[20];
  printf("bench bf16 operands, A row-major, B (N, K); median of 20 (CUDA events)\n");
  coda_tiling tl = {64, 128};
  for (size_t b = 0; b < sizeof kBench / sizeof kBench[0]; b++) {
    M = kBench[b].M;
    N = kBench[b].N;
    K = kBench[b].K;
    if (M > Mmax || N > Nmax || K > Kmax) continue;
    coda_tensor A = coda_tensor_2d(dA, CODA_BF16, M, K), B = coda_tensor_2d(dB, CODA_BF16, N, K);
    coda_tensor D = coda_tensor_2d(dD, CODA_BF16, M, N);
    const double flop = 2.0 * M * N * K;
    /* plain */
    for (int w = 0; w < 3; w++) coda_gemm(gpu, CODA_N, &A, CODA_T, &B, &D, 1.0f, 0);
    for (int it = 0; it < 20; it++) {
      cudaEventRecord(e0, 0);
      coda_gemm(gpu, CODA_N, &A, CODA_T, &B, &D, 1.0f, 0);
      cudaEventRecord(e1, 0);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&t[it], e0, e1);
    }
    qsort(t, 20, sizeof t[0], cmp_float);
    const float plain = t[10];
    printf("%s M=%lld N=%lld K=%lld\n", kBench[b].prog, (long long)M, (long long)N, (long long)K);
    printf("  %-22s %-11s %8.3f ms  %6.1f TFLOP/s\n", "plain coda_gemm", "", plain, flop / plain * 1e-9);
    coda_program p = NULL;
    for (int i = 0; i < num_programs(); i++)
      if (!strcmp(program_name(i), kBench[b].prog)) p = load_program(gpu, i);
    if (!p) continue;
    coda_args args;
    coda_args_create(gpu, &args);
    void *bufs[16] = {0};
    int nb = 0;
    for (int i = 0; i < coda_program_num_args(p) && nb < 16; i++) {
      coda_arg_info info;
      coda_program_arg(p, i, &info);
      int64_t r, c;
      if (coda_program_arg_shape(p, info.name, M, N, tl.tile_m, tl.tile_n, &r, &c) != CODA_OK) continue;
      if (info.kind == CODA_ARG_ROWSUM || info.kind == CODA_ARG_ROWMAX || info.kind == CODA_ARG_ROWLSE)
        c = (N + tl.tile_n - 1) / tl.tile_n;
      if (i >= ((const struct coda_program_s *)p)->ninputs + ((const struct coda_program_s *)p)->noutputs +
                   ((const struct coda_program_s *)p)->nreduces)
        break; /* finisher results are not GEMM arguments */
      coda_dtype dt = info.kind == CODA_ARG_PARTIAL ? CODA_F32 : info.dtype;
      size_t bytes = (size_t)(r * c) * coda_dtype_size(dt);
      CUDA_CHECK(cudaMalloc(&bufs[nb], bytes));
      CUDA_CHECK(cudaMemset(bufs[nb], 0x3c, bytes)); /* finite, nonzero values */
      coda_tensor tt = {bufs[nb], dt, r, c, c};
      coda_args_set(args, info.name, &tt);
      nb++;
    }
    for (int sched = 0; sched < 2; sched++) {
      setenv("CODA_EPI_SCHEDULE", sched ? "pingpong" : "cooperative", 1);
      coda_status s = coda_gemm_epilogue(gpu, p, CODA_N, &A, CODA_T, &B, args, tl); /* compile/load */
      if (s != CODA_OK) {
        printf("  %-22s failed: %s\n", kBench[b].prog, coda_last_error(gpu));
        continue;
      }
      for (int w = 0; w < 2; w++) coda_gemm_epilogue(gpu, p, CODA_N, &A, CODA_T, &B, args, tl);
      for (int it = 0; it < 20; it++) {
        cudaEventRecord(e0, 0);
        coda_gemm_epilogue(gpu, p, CODA_N, &A, CODA_T, &B, args, tl);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[it], e0, e1);
      }
      qsort(t, 20, sizeof t[0], cmp_float);
      int ping = 0;
      int lb = coda_cuda_epilogue_local_bytes(gpu, p, 0, 1, 0, &ping);
      printf("  %-22s %-11s %8.3f ms  %6.1f TFLOP/s  (x%.2f of plain, local memory %d bytes)\n",
             kBench[b].prog, ping ? "pingpong" : "cooperative", t[10], flop / t[10] * 1e-9, t[10] / plain, lb);
    }
    unsetenv("CODA_EPI_SCHEDULE");
    for (int i = 0; i < nb; i++) cudaFree(bufs[i]);
    coda_args_destroy(args);
    coda_program_destroy(p);
  }
  CUDA_CHECK(cudaGetLastError());
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dD);
  free(h);
  return 0;
}
