/* Llama-3 block plan on the GPU: forward, backward and forward + backward
 * times, against the floor (the block's twelve GEMMs through cuBLAS plus
 * our attention, each alone), and the peak device memory.
 *
 *   bench_block [config ...]     configs: d512 d2048 d4096 (default: all)
 *
 * Timing: CUDA events around each call, 3 warm-up runs, median of 10.
 * Inputs uniform random (bf16). Prints a markdown table. */
#include "coda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cfg {
  const char *name;
  int64_t d, ffn, hq, hkv, hd, batch, seq;
} cfg;

static const cfg kConfigs[] = {
    {"d512", 512, 2048, 8, 8, 64, 16, 1024},
    {"d2048", 2048, 8192, 32, 8, 64, 4, 2048},
    {"d4096", 4096, 14336, 32, 8, 128, 2, 4096},
};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float urand(void) {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 4503599627370496.0 - 1.0);
}
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

#define CK(x)                                                                                    \
  do {                                                                                           \
    coda_status s_ = (x);                                                                        \
    if (s_ != CODA_OK) {                                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, coda_last_error(ctx));          \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

/* Fills a bf16 buffer of the plan with scale * U(-1, 1) (f32 buffers are
 * filled with ones for the norm weights). */
static void fill(coda_context ctx, coda_plan p, const char *name, float scale, float offset) {
  coda_tensor t;
  CK(coda_plan_tensor(p, name, &t));
  size_t n = (size_t)(t.rows * t.cols);
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = to_bf16(offset + scale * urand());
  CK(coda_memcpy_h2d(ctx, t.data, h, n * 2));
  free(h);
}

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

typedef struct timer {
  cudaEvent_t a, b;
} timer;

/* Median ms of fn(arg) over 10 runs after 3 warm-ups. */
static float time_it(void (*fn)(void *), void *arg) {
  timer t;
  cudaEventCreate(&t.a);
  cudaEventCreate(&t.b);
  float ms[10];
  for (int i = 0; i < 3; i++) fn(arg);
  for (int i = 0; i < 10; i++) {
    cudaEventRecord(t.a, 0);
    fn(arg);
    cudaEventRecord(t.b, 0);
    cudaEventSynchronize(t.b);
    cudaEventElapsedTime(&ms[i], t.a, t.b);
  }
  cudaEventDestroy(t.a);
  cudaEventDestroy(t.b);
  qsort(ms, 10, sizeof *ms, cmpf);
  return 0.5f * (ms[4] + ms[5]);
}

typedef struct run_arg {
  coda_context ctx;
  coda_plan p;
  int fw, bw;
} run_arg;

static void run_plan(void *v) {
  run_arg *r = v;
  coda_context ctx = r->ctx;
  if (r->fw) CK(coda_plan_run(ctx, r->p, CODA_PHASE_FORWARD));
  if (r->bw) CK(coda_plan_run(ctx, r->p, CODA_PHASE_BACKWARD));
}

/* The floor: the block's GEMMs (cuBLAS, bf16 in/out, fp32 accumulate) and
 * our attention. */
typedef struct floor_arg {
  coda_context ctx;
  cublasHandle_t h;
  const cfg *c;
  void *A, *B, *C;          /* scratch operands, large enough for every GEMM */
  void *qkv, *o, *lse, *dout, *dqkv;
  int fw, bw;
} floor_arg;

/* Row-major C (M x N) = op(A) op(B), op(A) M x K, op(B) K x N. */
static void rm_gemm(cublasHandle_t h, int64_t M, int64_t N, int64_t K, int ta, int tb,
                    const void *A, const void *B, void *C) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
               (int)K, &one, B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &zero, C,
               CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static void run_floor(void *v) {
  floor_arg *f = v;
  const cfg *c = f->c;
  coda_context ctx = f->ctx;
  const int64_t M = c->batch * c->seq, D = c->d, F = c->ffn, HQ = c->hq * c->hd,
                NQ = (c->hq + 2 * c->hkv) * c->hd;
  coda_tensor qkv = coda_tensor_2d(f->qkv, CODA_BF16, M, NQ), o = coda_tensor_2d(f->o, CODA_BF16, M, HQ),
              lse = coda_tensor_2d(f->lse, CODA_F32, M, c->hq),
              dout = coda_tensor_2d(f->dout, CODA_BF16, M, HQ),
              dqkv = coda_tensor_2d(f->dqkv, CODA_BF16, M, NQ);
  if (f->fw) {
    rm_gemm(f->h, M, NQ, D, 0, 1, f->A, f->B, f->C);
    CK(coda_attention_forward(ctx, &qkv, (int)c->batch, (int)c->seq, (int)c->hq, (int)c->hkv,
                              (int)c->hd, &o, &lse));
    rm_gemm(f->h, M, D, HQ, 0, 1, f->A, f->B, f->C);
    rm_gemm(f->h, M, 2 * F, D, 0, 1, f->A, f->B, f->C);
    rm_gemm(f->h, M, D, F, 0, 1, f->A, f->B, f->C);
  }
  if (f->bw) {
    rm_gemm(f->h, M, F, D, 0, 0, f->A, f->B, f->C);      /* dy = dx_out Wd */
    rm_gemm(f->h, D, F, M, 1, 0, f->A, f->B, f->C);      /* dWd */
    rm_gemm(f->h, M, D, 2 * F, 0, 0, f->A, f->B, f->C);  /* dh2 = dz Wgu */
    rm_gemm(f->h, 2 * F, D, M, 1, 0, f->A, f->B, f->C);  /* dWgu */
    rm_gemm(f->h, M, HQ, D, 0, 0, f->A, f->B, f->C);     /* do = dx1 Wo */
    rm_gemm(f->h, D, HQ, M, 1, 0, f->A, f->B, f->C);     /* dWo */
    CK(coda_attention_backward(ctx, &qkv, &o, &lse, &dout, (int)c->batch, (int)c->seq, (int)c->hq,
                               (int)c->hkv, (int)c->hd, &dqkv));
    rm_gemm(f->h, M, D, NQ, 0, 0, f->A, f->B, f->C);     /* dh1 = dqkv Wqkv */
    rm_gemm(f->h, NQ, D, M, 1, 0, f->A, f->B, f->C);     /* dWqkv */
  }
}

static void bench_config(coda_context ctx, cublasHandle_t h, const cfg *c) {
  const int64_t M = c->batch * c->seq, D = c->d, F = c->ffn, HQ = c->hq * c->hd,
                NQ = (c->hq + 2 * c->hkv) * c->hd;
  size_t free0, total;
  cudaDeviceSynchronize();
  cudaMemGetInfo(&free0, &total);
  coda_llama_config lc = coda_llama_default_config();
  lc.dim = D;
  lc.n_heads = c->hq;
  lc.n_kv_heads = c->hkv;
  lc.head_dim = c->hd;
  lc.ffn_dim = F;
  lc.batch = c->batch;
  lc.seq = c->seq;
  lc.rope_theta = 500000.0;
  coda_plan p;
  CK(coda_llama_block_plan(ctx, &lc, &p));
  fill(ctx, p, "x", 1.0f, 0.0f);
  fill(ctx, p, "dx_out", 0.5f, 0.0f);
  fill(ctx, p, "wqkv", 1.0f / sqrtf((float)D), 0.0f);
  fill(ctx, p, "wo", 1.0f / sqrtf((float)HQ), 0.0f);
  fill(ctx, p, "wgu", 1.0f / sqrtf((float)D), 0.0f);
  fill(ctx, p, "wd", 1.0f / sqrtf((float)F), 0.0f);
  fill(ctx, p, "wn1", 0.1f, 1.0f);
  fill(ctx, p, "wn2", 0.1f, 1.0f);
  run_arg ra = {ctx, p, 1, 1};
  run_plan(&ra); /* loads the kernels, allocates every buffer */
  cudaDeviceSynchronize();
  ra.bw = 0;
  const float t_fw = time_it(run_plan, &ra);
  ra.fw = 0;
  ra.bw = 1;
  const float t_bw = time_it(run_plan, &ra);
  ra.fw = 1;
  const float t_fb = time_it(run_plan, &ra);
  size_t free1;
  cudaDeviceSynchronize();
  cudaMemGetInfo(&free1, &total);
  const double plan_gib = (double)(free0 - free1) / (1 << 30);
  coda_plan_destroy(p);

  /* floor */
  floor_arg fa;
  memset(&fa, 0, sizeof fa);
  fa.ctx = ctx;
  fa.h = h;
  fa.c = c;
  int64_t big = M * (2 * F > NQ ? 2 * F : NQ);
  if (2 * F * D > big) big = 2 * F * D;
  CK(coda_malloc(ctx, (size_t)big * 2, &fa.A));
  CK(coda_malloc(ctx, (size_t)big * 2, &fa.B));
  CK(coda_malloc(ctx, (size_t)big * 2, &fa.C));
  CK(coda_malloc(ctx, (size_t)(M * NQ) * 2, &fa.qkv));
  CK(coda_malloc(ctx, (size_t)(M * HQ) * 2, &fa.o));
  CK(coda_malloc(ctx, (size_t)(M * c->hq) * 4, &fa.lse));
  CK(coda_malloc(ctx, (size_t)(M * HQ) * 2, &fa.dout));
  CK(coda_malloc(ctx, (size_t)(M * NQ) * 2, &fa.dqkv));
  {
    size_t n = (size_t)(M * NQ);
    uint16_t *hq = malloc(n * 2);
    for (size_t i = 0; i < n; i++) hq[i] = to_bf16(urand());
    CK(coda_memcpy_h2d(ctx, fa.qkv, hq, n * 2));
    CK(coda_memcpy_h2d(ctx, fa.dout, hq, (size_t)(M * HQ) * 2));
    free(hq);
  }
  fa.fw = 1;
  run_floor(&fa);
  fa.bw = 0;
  const float f_fw = time_it(run_floor, &fa);
  fa.fw = 0;
  fa.bw = 1;
  const float f_bw = time_it(run_floor, &fa);
  fa.fw = 1;
  const float f_fb = time_it(run_floor, &fa);
  void *bufs[] = {fa.A, fa.B, fa.C, fa.qkv, fa.o, fa.lse, fa.dout, fa.dqkv};
  for (int i = 0; i < 8; i++) coda_free(ctx, bufs[i]);

  printf("| %s (M %lld) | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", c->name,
         (long long)M, t_fw, t_bw, t_fb, f_fw, f_bw, f_fb, t_fb / f_fb, plan_gib);
  fflush(stdout);
}

int main(int argc, char **argv) {
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  coda_context ctx;
  if (coda_context_create(&o, &ctx) != CODA_OK) {
    fprintf(stderr, "no CUDA context: %s\n", coda_last_error(NULL));
    return 2;
  }
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 2;
  printf("| config | fwd ms | bwd ms | fwd+bwd ms | floor fwd | floor bwd | floor fwd+bwd | "
         "fwd+bwd / floor | plan memory GiB |\n|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof kConfigs / sizeof *kConfigs; i++) {
    int want = argc < 2;
    for (int a = 1; a < argc; a++) want |= !strcmp(argv[a], kConfigs[i].name);
    if (want) bench_config(ctx, h, &kConfigs[i]);
  }
  cublasDestroy(h);
  coda_context_destroy(ctx);
  return 0;
}
