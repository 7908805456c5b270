/* Timing of the causal GQA attention kernels at the block shapes of the
 * project: CUDA events, 5 warm-up runs, median of 25. Prints markdown
 * tables (milliseconds and TFLOP/s counting only the causal half:
 * forward 2 matmuls = 2*B*Hq*T^2*hd flops, backward 5 = 2.5x that): one
 * row per kernel variant, then forward+backward with the fastest ones,
 * the defaults against CODA_ATTN_IMPL=v1, the default backward without and
 * with the fused RoPE backward, and one CODA|... line per shape
 * with the default timings that sdpa.py compares against PyTorch.
 *
 *   bench_attention [--defaults] [--json FILE] [SHAPE_INDEX]
 *
 * --defaults times the defaults only (forward, backward, forward+backward;
 * no variant sweep, no v1 or RoPE tables); SHAPE_INDEX runs one shape (for
 * a profiler); --json FILE writes the default timings (and the fastest
 * variants, when swept) as JSON. On the sm80 path (CODA_ARCH=sm80, or a
 * GPU that is not a Hopper) only the mma.sync variants run (the wgmma and
 * warp-specialized ones are Hopper-only); the first line names the path. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/backend.h"
#include "gpu/cuda_check.h"

#define OK(x)                                                                      \
  do {                                                                             \
    coda_status s_ = (x);                                                          \
    if (s_ != CODA_OK) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, coda_last_error(run)); \
      exit(2);                                                                     \
    }                                                                              \
  } while (0)

/* Uniform values in [-amp, amp) from a hash of the index. */
__global__ void fill(__nv_bfloat16 *x, size_t n, float amp, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(amp * ((float)(h >> 8) * (2.f / 16777216.f) - 1.f));
  }
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

struct Shape {
  const char *name;
  int B, T, Hq, Hkv, hd;
};

int main(int argc, char **argv) {
  int only = -1; /* SHAPE_INDEX: only shape i (for a profiler) */
  bool full = true;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--defaults")) full = false;
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (argv[i][0] >= '0' && argv[i][0] <= '9' && only < 0) only = atoi(argv[i]);
    else {
      const bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
      fprintf(help ? stdout : stderr,
              "usage: bench_attention [--defaults] [--json FILE] [SHAPE_INDEX]\n");
      return help ? 0 : 2;
    }
  }
  /* the block shapes of bench/block (d512, d2048 = 1B-like, d4096 = 8B-like),
   * a 12-head hd64 shape and head_dim 32 (the tiny training config, and a
   * larger one) */
  const Shape shapes[] = {
      {"d512 8h hd64 B16 T1024", 16, 1024, 8, 8, 64},
      {"d768 12h hd64 B8 T1024", 8, 1024, 12, 12, 64},
      {"d2048 32q/8kv hd64 B4 T2048", 4, 2048, 32, 8, 64},
      {"d4096 32q/8kv hd128 B2 T4096", 2, 4096, 32, 8, 128},
      {"tiny 4q/2kv hd32 B64 T128", 64, 128, 4, 2, 32},
      {"d512 16q/4kv hd32 B8 T1024", 8, 1024, 16, 4, 32},
  };
  const int ns = (int)(sizeof shapes / sizeof shapes[0]);
  coda_context_options opts = coda_context_default_options();
  opts.backend = CODA_BACKEND_CUDA;
  coda_context ctx = NULL;
  if (coda_context_create(&opts, &ctx) != CODA_OK) {
    fprintf(stderr, "no CUDA context\n");
    return 1;
  }
  /* the first measured defaults and block order (attn_impl V1), for their
   * column: a context of their own (the option is read at creation) */
  coda_context_options ov = opts;
  ov.attn_impl = CODA_ATTN_IMPL_V1;
  coda_context ctx_v1 = NULL;
  if (coda_context_create(&ov, &ctx_v1) != CODA_OK) {
    fprintf(stderr, "no CUDA context with attn_impl V1\n");
    return 1;
  }
  coda_context run = ctx; /* the context the timed calls go to */
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  /* the path the context runs (base/arch.h): the sm80 one runs the
   * mma.sync variants only */
  const bool sm80 = coda_cuda_sm80(ctx) != 0;
  const char *path = sm80 ? "sm80" : "sm90";
  printf("GPU: %s, %d SMs, compute capability %d.%d; path: %s (%s)\n\n", prop.name,
         prop.multiProcessorCount, prop.major, prop.minor, path,
         sm80 ? "the mma.sync variants; CODA_ARCH=sm80 or not a Hopper GPU"
              : "every variant; defaults warp-specialized at head_dim 64 and 128");
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  /* CODA_BENCH_HEAT=N: N plain 4096^3 GEMMs before every timed run (as in
   * a block, where the attention runs between GEMMs: the GPU's clocks
   * under a power limit) */
  const char *heat_env = getenv("CODA_BENCH_HEAT");
  const int heat = heat_env ? atoi(heat_env) : 0;
  __nv_bfloat16 *hA = NULL, *hC = NULL;
  if (heat > 0) {
    CUDA_CHECK(cudaMalloc(&hA, (size_t)4096 * 4096 * 2));
    CUDA_CHECK(cudaMalloc(&hC, (size_t)4096 * 4096 * 2));
    fill<<<1024, 256>>>(hA, (size_t)4096 * 4096, 1.f, 7u);
  }
  coda_tensor tha = coda_tensor_2d(hA, CODA_BF16, 4096, 4096),
              thc = coda_tensor_2d(hC, CODA_BF16, 4096, 4096);
  printf("| shape | pass | variant | ms | TFLOP/s |\n|---|---|---|---|---|\n");
  float sum_ms[8][3] = {}, def_ms[8][3] = {}, v1_ms[8][3] = {}, rope_ms[8][2] = {};
  int best[8][2] = {};
  for (int si = 0; si < ns; si++) {
    if (only >= 0 && si != only) continue;
    const Shape &s = shapes[si];
    const int64_t BT = (int64_t)s.B * s.T, cols = (int64_t)(s.Hq + 2 * s.Hkv) * s.hd,
                  oc = (int64_t)s.Hq * s.hd;
    __nv_bfloat16 *qkv, *out, *dout, *dqkv;
    float *lse;
    CUDA_CHECK(cudaMalloc(&qkv, BT * cols * 2));
    CUDA_CHECK(cudaMalloc(&dqkv, BT * cols * 2));
    CUDA_CHECK(cudaMalloc(&out, BT * oc * 2));
    CUDA_CHECK(cudaMalloc(&dout, BT * oc * 2));
    CUDA_CHECK(cudaMalloc(&lse, BT * s.Hq * 4));
    /* value ranges (CODA_BENCH_QKV_AMP, CODA_BENCH_DOUT_AMP: to see
     * whether the data moves the timings) */
    const char *qa = getenv("CODA_BENCH_QKV_AMP"), *da = getenv("CODA_BENCH_DOUT_AMP");
    fill<<<1024, 256>>>(qkv, (size_t)(BT * cols), qa ? (float)atof(qa) : 1.5f, 1u);
    fill<<<1024, 256>>>(dout, (size_t)(BT * oc), da ? (float)atof(da) : 1.f, 2u);
    CUDA_CHECK(cudaGetLastError());
    coda_tensor tq = coda_tensor_2d(qkv, CODA_BF16, BT, cols),
                to = coda_tensor_2d(out, CODA_BF16, BT, oc),
                tl = coda_tensor_2d(lse, CODA_F32, BT, s.Hq),
                tdo = coda_tensor_2d(dout, CODA_BF16, BT, oc),
                tg = coda_tensor_2d(dqkv, CODA_BF16, BT, cols);
    const double f = 2.0 * s.B * s.Hq * (double)s.T * s.T * s.hd; /* causal forward flops */
    /* the fused RoPE backward's inputs (positions t, Llama frequencies in
     * turns, V columns 0) and partials */
    const int nh = s.Hq + 2 * s.Hkv;
    int32_t *pos;
    float *freq, *zp;
    CUDA_CHECK(cudaMalloc(&pos, BT * 4));
    CUDA_CHECK(cudaMalloc(&freq, cols * 4));
    CUDA_CHECK(cudaMalloc(&zp, BT * nh * 4));
    {
      int32_t *hp = (int32_t *)malloc(BT * 4);
      float *hf = (float *)malloc(cols * 4);
      for (int64_t m = 0; m < BT; m++) hp[m] = (int32_t)(m % s.T);
      for (int64_t c = 0; c < cols; c += 2) {
        const double fr = c < (int64_t)(s.Hq + s.Hkv) * s.hd
                              ? pow(500000.0, -(double)(c % s.hd) / s.hd) / 6.283185307179586
                              : 0.0;
        hf[c] = (float)fr;
        hf[c + 1] = (float)(fr - (double)hf[c]);
      }
      CUDA_CHECK(cudaMemcpy(pos, hp, BT * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(freq, hf, cols * 4, cudaMemcpyHostToDevice));
      free(hp);
      free(hf);
    }
    coda_tensor tp = coda_tensor_2d(pos, CODA_I32, BT, 1),
                tf = coda_tensor_2d(freq, CODA_F32, 1, cols),
                tz = coda_tensor_2d(zp, CODA_F32, BT, nh);
    const coda_attn_rope rope_args = {&tp, &tf, &tz};
    /* variant c of a pass by name (c < 0: NULL, the default) */
    auto vname = [&](int pass, int c) {
      return c < 0 ? (const char *)NULL : coda_cuda_attention_variant_name(pass, s.hd, c);
    };
    /* the forward with variant fc if fwd, then the backward with bc if bwd
     * (with the fused RoPE backward if rope); variants by index, -1 the
     * default */
    auto time = [&](bool fwd, int fc, bool bwd, int bc, bool rope = false) {
      const int warm = 5, reps = 25;
      float ms[reps];
      for (int r = 0; r < warm + reps; r++) {
        for (int k = 0; k < heat; k++) OK(coda_gemm(run, CODA_N, &tha, CODA_T, &tha, &thc, 1.f, 0));
        CUDA_CHECK(cudaEventRecord(e0));
        if (fwd)
          OK(coda_cuda_attention_forward_variant(run, &tq, s.B, s.T, s.Hq, s.Hkv, s.hd, &to, &tl,
                                                 NULL, vname(0, fc)));
        if (bwd)
          OK(coda_cuda_attention_backward_variant(run, &tq, &to, &tl, &tdo, s.B, s.T, s.Hq, s.Hkv,
                                                  s.hd, &tg, rope ? &rope_args : NULL,
                                                  NULL, vname(1, bc)));
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (r >= warm) CUDA_CHECK(cudaEventElapsedTime(&ms[r - warm], e0, e1));
      }
      qsort(ms, reps, sizeof(float), cmp_float);
      return ms[reps / 2];
    };
    for (int pass = 0; pass < 2 && full; pass++) {
      float bms = 1e30f;
      for (int c = 0; c < coda_cuda_attention_num_variants(pass, s.hd); c++) {
        if (sm80 && strncmp(vname(pass, c), "mma_", 4)) continue; /* Hopper-only */
        /* the backward reads the out and lse of a forward run */
        if (pass == 1) time(true, -1, false, 0);
        const float ms = pass ? time(false, 0, true, c) : time(true, c, false, 0);
        printf("| %s | %s | %s | %.3f | %.0f |\n", s.name, pass ? "bwd" : "fwd", vname(pass, c), ms,
               (pass ? 2.5 : 1.0) * f / ms * 1e-9);
        fflush(stdout);
        if (ms < bms) {
          bms = ms;
          best[si][pass] = c;
        }
        sum_ms[si][pass] = bms;
      }
    }
    if (full) sum_ms[si][2] = time(true, best[si][0], true, best[si][1]);
    /* what the library runs: the defaults, then the first defaults and
     * block order (attn_impl V1, its own context) */
    for (int k = 0; k < (full ? 2 : 1); k++) {
      float *d = k ? v1_ms[si] : def_ms[si];
      run = k ? ctx_v1 : ctx;
      d[0] = time(true, -1, false, 0);
      d[1] = time(false, 0, true, -1);
      d[2] = time(true, -1, true, -1);
      run = ctx;
    }
    /* the default backward without and with the fused RoPE backward,
     * alternating three times (median of each) */
    if (full) {
      float a[3], b[3];
      for (int k = 0; k < 3; k++) {
        a[k] = time(false, 0, true, -1);
        b[k] = time(false, 0, true, -1, true);
      }
      qsort(a, 3, sizeof(float), cmp_float);
      qsort(b, 3, sizeof(float), cmp_float);
      rope_ms[si][0] = a[1];
      rope_ms[si][1] = b[1];
    }
    cudaFree(pos);
    cudaFree(freq);
    cudaFree(zp);
    cudaFree(qkv);
    cudaFree(dqkv);
    cudaFree(out);
    cudaFree(dout);
    cudaFree(lse);
  }
  if (full) {
    printf("\nWith the fastest variants:\n\n| shape | variants fwd/bwd | fwd ms | bwd ms | fwd+bwd ms |\n"
           "|---|---|---|---|---|\n");
    for (int si = 0; si < ns; si++)
      if (only < 0 || si == only)
        printf("| %s | %s/%s | %.3f | %.3f | %.3f |\n", shapes[si].name,
               coda_cuda_attention_variant_name(0, shapes[si].hd, best[si][0]),
               coda_cuda_attention_variant_name(1, shapes[si].hd, best[si][1]), sum_ms[si][0],
               sum_ms[si][1], sum_ms[si][2]);
    printf("\nDefaults against the first defaults (CODA_ATTN_IMPL=v1):\n\n"
           "| shape | fwd ms | v1 fwd ms | bwd ms | v1 bwd ms | fwd+bwd ms | v1 fwd+bwd ms |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < ns; si++)
      if (only < 0 || si == only)
        printf("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", shapes[si].name,
               def_ms[si][0], v1_ms[si][0], def_ms[si][1], v1_ms[si][1], def_ms[si][2], v1_ms[si][2]);
    printf("\nDefault backward without and with the fused RoPE backward\n"
           "(coda_attention_backward_rope; alternated three times, medians):\n\n"
           "| shape | bwd ms | bwd + RoPE bwd ms | difference ms |\n|---|---|---|---|\n");
    for (int si = 0; si < ns; si++)
      if (only < 0 || si == only)
        printf("| %s | %.3f | %.3f | %+.3f |\n", shapes[si].name, rope_ms[si][0], rope_ms[si][1],
               rope_ms[si][1] - rope_ms[si][0]);
  }
  /* machine-readable lines for sdpa.py: name|B|T|Hq|Hkv|hd|fwd|bwd|fwd+bwd (defaults) */
  printf("\n");
  for (int si = 0; si < ns; si++)
    if (only < 0 || si == only)
      printf("CODA|%s|%d|%d|%d|%d|%d|%.4f|%.4f|%.4f\n", shapes[si].name, shapes[si].B,
             shapes[si].T, shapes[si].Hq, shapes[si].Hkv, shapes[si].hd, def_ms[si][0],
             def_ms[si][1], def_ms[si][2]);
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) {
      fprintf(stderr, "bench_attention: cannot write %s\n", json);
      return 1;
    }
    fprintf(f, "{\n \"benchmark\": \"bench_attention\",\n \"gpu\": \"%s\",\n \"path\": \"%s\",\n"
               " \"timing\": \"CUDA events, 5 warm-up runs, median of 25\",\n \"rows\": [\n",
            prop.name, path);
    bool first = true;
    for (int si = 0; si < ns; si++) {
      if (only >= 0 && si != only) continue;
      const Shape &s = shapes[si];
      const double fl = 2.0 * s.B * s.Hq * (double)s.T * s.T * s.hd;
      fprintf(f,
              "%s  {\"shape\": \"%s\", \"B\": %d, \"T\": %d, \"Hq\": %d, \"Hkv\": %d, \"hd\": %d, "
              "\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"fwd_tflops\": %.1f, "
              "\"bwd_tflops\": %.1f",
              first ? "" : ",\n", s.name, s.B, s.T, s.Hq, s.Hkv, s.hd, def_ms[si][0], def_ms[si][1],
              def_ms[si][2], fl / def_ms[si][0] * 1e-9, 2.5 * fl / def_ms[si][1] * 1e-9);
      if (full)
        fprintf(f, ", \"best_fwd\": \"%s\", \"best_fwd_ms\": %.4f, \"best_bwd\": \"%s\", "
                   "\"best_bwd_ms\": %.4f",
                coda_cuda_attention_variant_name(0, s.hd, best[si][0]), sum_ms[si][0],
                coda_cuda_attention_variant_name(1, s.hd, best[si][1]), sum_ms[si][1]);
      fprintf(f, "}");
      first = false;
    }
    fprintf(f, "\n ]\n}\n");
    fclose(f);
  }
  if (hA) cudaFree(hA);
  if (hC) cudaFree(hC);
  coda_context_destroy(ctx_v1);
  coda_context_destroy(ctx);
  return 0;
}
