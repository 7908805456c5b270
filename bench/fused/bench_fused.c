/* Each fused GEMM of the Llama-3 block against the plain GEMM of the same
 * shape and against the unfused sequence a framework runs (needs an sm_90
 * GPU; --precompile needs none).
 *
 * Per kernel and shape, in one process:
 *   plain    coda_gemm, bf16 D = op(A)·op(B), same layout and shape
 *   fused    coda_gemm_epilogue with the built-in program, plus its finish
 *            steps (the whole operation; "kernel" is the GEMM alone)
 *   unfused  cuBLAS GEMM (bf16 in and out, fp32 accumulate) followed by
 *            one CUDA kernel per operator (unfused_kernels.cu), each
 *            reading and writing device memory; "cuBLAS" is its GEMM alone (cublasGemmEx
 *            with a 32 MiB workspace)
 * Inputs random on the device, never zero. Before timing, each variant
 * runs once and the fused outputs are compared with the unfused ones
 * (max |fused − unfused| / max |unfused| per tensor; mismatch > 3e-2).
 * Timing: 3 warm-up calls, then 25 calls enqueued back to back with a CUDA
 * event between consecutive ones; the median interval.
 * Bytes: every tensor each sequence reads or writes in device memory,
 * once per pass (operands of the GEMM once).
 *
 *   bench_fused [--shapes 1B,8B] [--only k1,k2] [--reps N]
 *   bench_fused --precompile   compile the fused kernels into the NVRTC
 *                              cache ($CODA_CACHE_DIR), no GPU needed
 *   bench_fused --list         the kernels and shapes
 *   bench_fused --program FILE|builtin:NAME [--program ...] [--mnk M,N,K]
 *                              a program of one's own (B stored N x K):
 *                              fused (its GEMM and finish steps) against
 *                              the plain GEMM, at M x N x K (default
 *                              8192,4096,4096); with --precompile, compile
 *                              its kernel into the cache instead
 *
 * Exit status: 0, 1 on a failure or mismatch, 77 without a usable GPU. */
#define _POSIX_C_SOURCE 200809L
#include "coda.h"
#include "backends/cuda/epi_codegen.h"
#include "backends/cuda/gplan.h"
#include "unfused.h"
#include "tools/tool_util.h"
#include "name_list.h"
#include "gpu/cuda_check.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ shapes */

typedef struct shape {
  const char *name;
  int64_t M, D, F, hq, hkv, hd, V;
  int seq; /* RoPE position = row % seq */
} shape;

static const shape kShapes[] = {
    {"1B", 16384, 2048, 8192, 32, 8, 64, 32768, 4096},
    {"8B", 8192, 4096, 14336, 32, 8, 128, 32768, 4096},
};
#define NSHAPES ((int)(sizeof kShapes / sizeof kShapes[0]))

typedef enum { T_RESNORM, T_SWIGLU, T_QKV, T_LMHEAD, T_NORMBWD, T_SWIGLUBWD } kind;

typedef struct kernel_def {
  const char *name, *program, *what;
  kind k;
  int tb; /* 1: B stored N x K (a forward Linear), 0: K x N (a dgrad) */
} kernel_def;

static const kernel_def kKernels[] = {
    {"out_proj", "llama_residual_norm", "o·Woᵀ + residual, Σx², ·wn", T_RESNORM, 1},
    {"gate_up", "llama_swiglu", "rstd·(h·Wguᵀ), SwiGLU", T_SWIGLU, 1},
    {"down", "llama_residual_norm", "y·Wdᵀ + residual, Σx², ·wn", T_RESNORM, 1},
    {"qkv", "llama_qkv_rope", "rstd·(h·Wqkvᵀ), RoPE", T_QKV, 1},
    {"lm_head", "llama_lm_head", "rstd·(h·Woutᵀ), LSE, target", T_LMHEAD, 1},
    {"down_dgrad", "llama_swiglu_bwd", "dx·Wd, SwiGLU bwd, Σz·dz", T_SWIGLUBWD, 0},
    {"gate_up_dgrad", "llama_norm_bwd", "dz·Wgu, RMSNorm bwd + dres, dwn", T_NORMBWD, 0},
    {"qkv_dgrad", "llama_norm_bwd", "dz·Wqkv, RMSNorm bwd + dres, dwn", T_NORMBWD, 0},
};
#define NKERNELS ((int)(sizeof kKernels / sizeof kKernels[0]))

/* M x N x K of a kernel at a shape. */
static void kernel_mnk(const kernel_def *kd, const shape *s, int64_t *M, int64_t *N, int64_t *K) {
  const int64_t HQ = s->hq * s->hd, NQKV = (s->hq + 2 * s->hkv) * s->hd;
  *M = s->M;
  if (!strcmp(kd->name, "out_proj")) *N = s->D, *K = HQ;
  else if (!strcmp(kd->name, "gate_up")) *N = 2 * s->F, *K = s->D;
  else if (!strcmp(kd->name, "down")) *N = s->D, *K = s->F;
  else if (!strcmp(kd->name, "qkv")) *N = NQKV, *K = s->D;
  else if (!strcmp(kd->name, "lm_head")) *N = s->V, *K = s->D;
  else if (!strcmp(kd->name, "down_dgrad")) *N = s->F, *K = s->D;
  else if (!strcmp(kd->name, "gate_up_dgrad")) *N = s->D, *K = 2 * s->F;
  else *N = s->D, *K = NQKV; /* qkv_dgrad */
}

/* ------------------------------------------------------------ helpers */

static int g_fail = 0;
static const coda_tiling kTiling = {64, 128};

#define CUDA_CK(x) CUDA_CHECK_EXIT(x, 1) /* exit status 1: a failure (77: no GPU) */
#define UF_CK(x)                                                                          \
  do {                                                                                    \
    int e_ = (x);                                                                         \
    if (e_) {                                                                             \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, uf_error_string(e_));    \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ one case */

#define MAX_BUFS 48
#define MAX_ARGS 24

typedef struct bench_case {
  coda_context ctx;
  cublasHandle_t cb;
  const kernel_def *kd;
  const shape *sh;
  coda_program prog;
  coda_args args;
  int64_t M, N, K;
  void *A, *An, *B, *D; /* An: the unfused GEMM's A (RMSNorm output where the op has one) */
  struct {
    char name[32];
    coda_arg_kind kind;
    coda_dtype dt;
    int64_t rows, cols;
    void *p;
    int finisher;
  } arg[MAX_ARGS];
  int narg;
  /* unfused buffers */
  void *u[8];
  void *bufs[MAX_BUFS];
  int nbufs;
} bench_case;

static void *dalloc(bench_case *c, size_t bytes) {
  void *p = NULL;
  CUDA_CK(cudaMalloc(&p, bytes ? bytes : 16));
  if (c->nbufs == MAX_BUFS) {
    fprintf(stderr, "too many buffers\n");
    exit(1);
  }
  c->bufs[c->nbufs++] = p;
  return p;
}

static void *argp(bench_case *c, const char *name) {
  for (int i = 0; i < c->narg; i++)
    if (!strcmp(c->arg[i].name, name)) return c->arg[i].p;
  fprintf(stderr, "%s: no argument '%s'\n", c->kd->program, name);
  exit(1);
}

/* Row-major C (M x N) = A (M x K) · op(B) with cuBLAS; B is N x K (tb) or K x N. */
static int cublas_gemm(bench_case *c, const void *A, void *C) {
  const float one = 1.0f, zero = 0.0f;
  const int tb = c->kd->tb;
  const int64_t ldb = tb ? c->K : c->N;
  cublasStatus_t s = cublasGemmEx(c->cb, tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)c->N,
                                  (int)c->M, (int)c->K, &one, c->B, CUDA_R_16BF, (int)ldb, A,
                                  CUDA_R_16BF, (int)c->K, &zero, C, CUDA_R_16BF, (int)c->N,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return s == CUBLAS_STATUS_SUCCESS ? 0 : (int)s + 1000;
}

static coda_tensor tA(bench_case *c) { return coda_tensor_2d(c->A, CODA_BF16, c->M, c->K); }
static coda_tensor tB(bench_case *c) {
  return c->kd->tb ? coda_tensor_2d(c->B, CODA_BF16, c->N, c->K)
                   : coda_tensor_2d(c->B, CODA_BF16, c->K, c->N);
}

static int run_plain(bench_case *c) {
  coda_tensor A = tA(c), B = tB(c), D = coda_tensor_2d(c->D, CODA_BF16, c->M, c->N);
  return coda_gemm(c->ctx, CODA_N, &A, c->kd->tb ? CODA_T : CODA_N, &B, &D, 1.0f, 0);
}
static int run_fused_kernel(bench_case *c) {
  coda_tensor A = tA(c), B = tB(c);
  return coda_gemm_epilogue(c->ctx, c->prog, CODA_N, &A, c->kd->tb ? CODA_T : CODA_N, &B, c->args,
                            kTiling);
}
static int run_fused(bench_case *c) {
  int s = run_fused_kernel(c);
  for (int i = 0; i < c->narg && !s; i++)
    if (c->arg[i].finisher)
      s = coda_finish(c->ctx, c->prog, c->arg[i].name, c->args, c->M, c->N, kTiling);
  return s;
}
static int run_cublas(bench_case *c) { return cublas_gemm(c, c->An, c->D); }

/* The unfused sequence: the cuBLAS GEMM into D, then the operator passes. */
static int run_unfused(bench_case *c) {
  int s = cublas_gemm(c, c->An, c->D);
  if (s) return s;
  const int64_t M = c->M, N = c->N;
  uint16_t *T = c->D;
  switch (c->kd->k) {
  case T_RESNORM: /* x1 = res + t; h = RMSNorm(x1)·w, rstd */
    if ((s = uf_add(c->u[0], argp(c, "res"), T, (size_t)(M * N)))) return s;
    return uf_rmsnorm(c->u[1], c->u[2], c->u[0], argp(c, "w"), M, N, 1e-5f);
  case T_SWIGLU: /* y = silu(g)·u on the GEMM's (g, u) pairs */
    return uf_swiglu(c->u[0], T, M, N / 2);
  case T_QKV: { /* RoPE on the Q and K columns */
    const int64_t nqk = (c->sh->hq + c->sh->hkv) * c->sh->hd;
    return uf_rope(c->u[0], T, c->u[1], c->u[2], M, N, nqk, (int)c->sh->hd, c->sh->seq);
  }
  case T_LMHEAD: /* lse and target logit per row */
    return uf_ce(c->u[0], c->u[1], T, argp(c, "tgt"), M, N);
  case T_NORMBWD: /* RMSNorm backward (dx, dw partials), dw reduction, residual add */
    if ((s = uf_rmsnorm_bwd(c->u[0], c->u[1], c->u[2], T, argp(c, "x"), argp(c, "w"),
                            argp(c, "r"), M, N)))
      return s;
    if ((s = uf_colsum(c->u[3], c->u[1], (M + UF_BWD_ROWS - 1) / UF_BWD_ROWS, N))) return s;
    return uf_add(c->u[4], argp(c, "dres"), c->u[0], (size_t)(M * N));
  case T_SWIGLUBWD: /* (dg, du) from the saved (g, u) and dy */
    return uf_swiglu_bwd(c->u[0], argp(c, "z"), T, M, N);
  }
  return 0;
}

/* Median ms per call: 3 warm-up calls, then reps calls enqueued back to
 * back with a CUDA event between consecutive ones (the GPU time of each
 * call; the host's launch work overlaps the previous call, as in a model's
 * step and in the GEMM autotuner). */
static int g_reps = 25;
static float time_ms(int (*fn)(bench_case *), bench_case *c) {
  cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)(g_reps + 1));
  float *t = malloc(sizeof(float) * (size_t)g_reps);
  for (int i = 0; i <= g_reps; i++) CUDA_CK(cudaEventCreate(&ev[i]));
  for (int i = 0; i < 3; i++) fn(c);
  CUDA_CK(cudaDeviceSynchronize());
  cudaEventRecord(ev[0], 0);
  for (int i = 0; i < g_reps; i++) {
    fn(c);
    cudaEventRecord(ev[i + 1], 0);
  }
  CUDA_CK(cudaEventSynchronize(ev[g_reps]));
  for (int i = 0; i < g_reps; i++) cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]);
  qsort(t, (size_t)g_reps, sizeof *t, cmp_float);
  const float med = g_reps % 2 ? t[g_reps / 2] : 0.5f * (t[g_reps / 2 - 1] + t[g_reps / 2]);
  for (int i = 0; i <= g_reps; i++) cudaEventDestroy(ev[i]);
  free(t);
  free(ev);
  CUDA_CK(cudaGetLastError());
  return med;
}

/* The program's arguments, allocated with the shapes the program gives for
 * this M x N and filled (inputs random; positions, targets, RoPE
 * frequencies and 1/N as the block uses them). */
static void alloc_program_args(bench_case *c, uint64_t seed) {
  const int n = coda_program_num_args(c->prog);
  int after_inputs = 0;
  c->narg = 0;
  for (int i = 0; i < n && c->narg < MAX_ARGS; i++) {
    coda_arg_info info;
    if (coda_program_arg(c->prog, i, &info) != CODA_OK) exit(1);
    if (info.kind == CODA_ARG_OUTPUT || info.kind == CODA_ARG_PARTIAL) after_inputs = 1;
    int64_t rows, cols;
    if (coda_program_arg_shape(c->prog, info.name, c->M, c->N, kTiling.tile_m, kTiling.tile_n,
                               &rows, &cols) != CODA_OK) {
      fprintf(stderr, "%s: shape of %s: %s\n", c->kd->program, info.name, coda_last_error(c->ctx));
      exit(1);
    }
    const int fin = after_inputs && info.kind != CODA_ARG_OUTPUT && info.kind != CODA_ARG_PARTIAL;
    const coda_dtype dt = info.kind == CODA_ARG_PARTIAL || fin ? CODA_F32 : info.dtype;
    const size_t count = (size_t)(rows * cols), bytes = count * coda_dtype_size(dt);
    void *p = dalloc(c, bytes);
    if (!after_inputs) { /* an input */
      if (!strcmp(info.name, "pos")) {
        int32_t *h = malloc(bytes);
        for (size_t m = 0; m < count; m++) h[m] = (int32_t)(m % (size_t)c->sh->seq);
        CUDA_CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
        free(h);
      } else if (!strcmp(info.name, "tgt")) {
        UF_CK(uf_fill_targets(p, count, seed + (uint64_t)i, (int)c->N));
      } else if (!strcmp(info.name, "freq")) {
        /* theta^(-2j/hd) / 2pi in turns as a float-float pair on the Q/K
         * column pairs, 0 on V (src/nn/llama3.c) */
        float *h = calloc(count, sizeof *h);
        const int64_t hd = c->sh->hd, nqk = (c->sh->hq + c->sh->hkv) * hd;
        for (int64_t col = 0; col + 1 < nqk && col + 1 < (int64_t)count; col += 2) {
          const double f = pow(500000.0, -2.0 * (double)((col % hd) / 2) / (double)hd) /
                           (2.0 * 3.14159265358979323846);
          h[col] = (float)f;
          h[col + 1] = (float)(f - (double)(float)f);
        }
        CUDA_CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
        free(h);
      } else if (!strcmp(info.name, "inv_n")) {
        const float v = 1.0f / (float)c->N;
        CUDA_CK(cudaMemcpy(p, &v, sizeof v, cudaMemcpyHostToDevice));
      } else if (dt == CODA_BF16 || dt == CODA_F32) {
        /* row statistics (rstd, zdz) positive around 1; norm weights near
         * 1; tiles and the rest ±[0.1, 1) */
        const int positive = info.kind == CODA_ARG_ROW || info.kind == CODA_ARG_COL;
        UF_CK(uf_fill(p, dt == CODA_F32 ? 2 : 0, count, seed + (uint64_t)i,
                      positive ? 1.5f : 1.0f, positive));
      } else {
        fprintf(stderr, "%s: input %s of dtype %s not handled\n", c->kd->program, info.name,
                coda_dtype_name(dt));
        exit(1);
      }
    } else {
      CUDA_CK(cudaMemset(p, 0xff, bytes)); /* NaN: an unwritten output shows in the check */
    }
    snprintf(c->arg[c->narg].name, sizeof c->arg[c->narg].name, "%s", info.name);
    c->arg[c->narg].kind = info.kind;
    c->arg[c->narg].dt = dt;
    c->arg[c->narg].rows = rows;
    c->arg[c->narg].cols = cols;
    c->arg[c->narg].p = p;
    c->arg[c->narg].finisher = fin;
    coda_tensor t = coda_tensor_2d(p, dt, rows, cols);
    if (coda_args_set(c->args, info.name, &t) != CODA_OK) {
      fprintf(stderr, "%s: bind %s: %s\n", c->kd->program, info.name, coda_last_error(c->ctx));
      exit(1);
    }
    c->narg++;
  }
}

typedef struct check {
  const char *label;
  const void *a;
  int adt;
  int64_t lda;
  const float *ra;
  const void *b;
  int bdt;
  int64_t ldb, rows, cols;
} check;

/* Compares and appends "label rel" to text; returns the relative difference
 * (infinite if anything is not finite). */
static double compare(const check *k, char *text, size_t cap) {
  double r[3];
  UF_CK(uf_compare(r, k->a, k->adt, k->lda, k->ra, k->b, k->bdt, k->ldb, k->rows, k->cols));
  const double rel = r[2] > 0 ? INFINITY : r[0] / (r[1] > 0 ? r[1] : 1.0);
  const size_t len = strlen(text);
  snprintf(text + len, cap - len, "%s%s %.1e", len ? ", " : "", k->label, rel);
  return rel;
}

/* One kernel at one shape: one table row. */
static void bench_one(coda_context ctx, cublasHandle_t cb, const kernel_def *kd, const shape *sh) {
  bench_case one;
  bench_case *c = &one;
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->cb = cb;
  c->kd = kd;
  c->sh = sh;
  kernel_mnk(kd, sh, &c->M, &c->N, &c->K);
  const int64_t M = c->M, N = c->N, K = c->K;
  if (coda_program_builtin(ctx, kd->program, &c->prog) != CODA_OK ||
      coda_args_create(ctx, &c->args) != CODA_OK) {
    fprintf(stderr, "%s: %s\n", kd->program, coda_last_error(ctx));
    g_fail = 1;
    return;
  }
  const uint64_t seed = 1000 * (uint64_t)(kd - kKernels) + 17 * (uint64_t)(sh - kShapes) + 1;
  c->A = dalloc(c, (size_t)(M * K) * 2);
  c->B = dalloc(c, (size_t)(N * K) * 2);
  c->D = dalloc(c, (size_t)(M * N) * 2);
  UF_CK(uf_fill(c->A, 0, (size_t)(M * K), seed * 7 + 1, 1.0f, 0));
  UF_CK(uf_fill(c->B, 0, (size_t)(N * K), seed * 7 + 2, (float)(2.0 / sqrt((double)K)), 0));
  alloc_program_args(c, seed * 7 + 3);
  c->An = c->A;

  /* unfused buffers, and the bytes each sequence moves */
  const double a_b = 2.0 * (double)(M * K + N * K), mn2 = 2.0 * (double)(M * N);
  const double ntile = (double)((N + 127) / 128), rtile64 = (double)((M + 63) / 64);
  const double rtile32 = (double)((M + UF_BWD_ROWS - 1) / UF_BWD_ROWS);
  double bu = a_b + mn2, bf = a_b; /* both read A and B; unfused writes the GEMM output */
  check ck[3];
  int nck = 0;
  switch (kd->k) {
  case T_RESNORM:
    c->u[0] = dalloc(c, (size_t)mn2);       /* x1 */
    c->u[1] = dalloc(c, (size_t)mn2);       /* h, normalized */
    c->u[2] = dalloc(c, (size_t)M * 4);     /* rstd */
    bu += 3 * mn2 + (mn2 + 2.0 * N + mn2 + 4.0 * M);
    bf += mn2 + 2.0 * N + 2 * mn2 + 4.0 * M * ntile + (4.0 * M * ntile + 4.0 * M);
    ck[nck++] = (check){"x", argp(c, "x"), 0, N, NULL, c->u[0], 0, N, M, N};
    ck[nck++] = (check){"h·r", argp(c, "h"), 0, N, argp(c, "r"), c->u[1], 0, N, M, N};
    ck[nck++] = (check){"r", argp(c, "r"), 2, 1, NULL, c->u[2], 2, 1, M, 1};
    break;
  case T_SWIGLU:
    c->An = dalloc(c, (size_t)(M * K) * 2);
    UF_CK(uf_rowscale(c->An, c->A, argp(c, "r"), M, K));
    c->u[0] = dalloc(c, (size_t)mn2 / 2); /* y */
    bu += mn2 + mn2 / 2;
    bf += 4.0 * M + mn2 + mn2 / 2;
    ck[nck++] = (check){"z", argp(c, "z"), 0, N, NULL, c->D, 0, N, M, N};
    ck[nck++] = (check){"y", argp(c, "y"), 0, N / 2, NULL, c->u[0], 0, N / 2, M, N / 2};
    break;
  case T_QKV: {
    const int64_t hd = sh->hd, nqk = (sh->hq + sh->hkv) * hd, half = hd / 2;
    c->An = dalloc(c, (size_t)(M * K) * 2);
    UF_CK(uf_rowscale(c->An, c->A, argp(c, "r"), M, K));
    c->u[0] = dalloc(c, (size_t)mn2); /* rotated q, k (columns < nqk) */
    /* the framework's cos/sin tables (seq x hd/2), in double on the host */
    const size_t nt = (size_t)(sh->seq * half);
    float *cs = malloc(nt * 4), *sn = malloc(nt * 4);
    for (int64_t t = 0; t < sh->seq; t++)
      for (int64_t j = 0; j < half; j++) {
        const double th = (double)t * pow(500000.0, -2.0 * (double)j / (double)hd);
        cs[t * half + j] = (float)cos(th);
        sn[t * half + j] = (float)sin(th);
      }
    c->u[1] = dalloc(c, nt * 4);
    c->u[2] = dalloc(c, nt * 4);
    CUDA_CK(cudaMemcpy(c->u[1], cs, nt * 4, cudaMemcpyHostToDevice));
    CUDA_CK(cudaMemcpy(c->u[2], sn, nt * 4, cudaMemcpyHostToDevice));
    free(cs);
    free(sn);
    bu += 2 * 2.0 * (double)(M * nqk) + 2.0 * 4.0 * (double)nt;
    bf += 4.0 * M + 4.0 * M + 4.0 * N + mn2;
    const uint16_t *q = argp(c, "qkv");
    ck[nck++] = (check){"qk", q, 0, N, NULL, c->u[0], 0, N, M, nqk};
    ck[nck++] = (check){"v", q + nqk, 0, N, NULL, (const uint16_t *)c->D + nqk, 0, N, M, N - nqk};
    break;
  }
  case T_LMHEAD:
    c->An = dalloc(c, (size_t)(M * K) * 2);
    UF_CK(uf_rowscale(c->An, c->A, argp(c, "r"), M, K));
    c->u[0] = dalloc(c, (size_t)M * 4); /* lse */
    c->u[1] = dalloc(c, (size_t)M * 4); /* pick */
    bu += mn2 + 4.0 * M + 8.0 * M;
    bf += 8.0 * M + 4.0 * M * ntile + 4.0 * M + (4.0 * M * ntile + 4.0 * M);
    ck[nck++] = (check){"lse", argp(c, "lse"), 2, 1, NULL, c->u[0], 2, 1, M, 1};
    ck[nck++] = (check){"pick", argp(c, "pick"), 2, 1, NULL, c->u[1], 2, 1, M, 1};
    break;
  case T_NORMBWD:
    c->u[0] = dalloc(c, (size_t)mn2);                    /* dx of the norm */
    c->u[1] = dalloc(c, (size_t)(rtile32 * N * 4));     /* dw partials */
    c->u[2] = dalloc(c, (size_t)M * 4);                  /* row dots */
    c->u[3] = dalloc(c, (size_t)N * 4);                  /* dw */
    c->u[4] = dalloc(c, (size_t)mn2);                    /* dx = dres + dx of the norm */
    bu += (mn2 + mn2 + 4.0 * M + 2.0 * N + mn2 + 4.0 * rtile32 * N + 4.0 * M) +
          (4.0 * rtile32 * N + 4.0 * N) + 3 * mn2;
    bf += 2 * mn2 + 2.0 * N + 8.0 * M + 4 + 2 * mn2 + 4.0 * rtile64 * N +
          (4.0 * rtile64 * N + 4.0 * N);
    ck[nck++] = (check){"dx", argp(c, "dx"), 0, N, NULL, c->u[4], 0, N, M, N};
    ck[nck++] = (check){"dw", argp(c, "dw"), 2, N, NULL, c->u[3], 2, N, 1, N};
    break;
  case T_SWIGLUBWD:
    c->u[0] = dalloc(c, (size_t)(2 * mn2)); /* dz (pairs) */
    c->u[1] = dalloc(c, (size_t)mn2);       /* y recomputed by the reference */
    UF_CK(uf_swiglu(c->u[1], argp(c, "z"), M, N));
    bu += 2 * mn2 + mn2 + 2 * mn2;
    bf += 2 * mn2 + 2 * mn2 + mn2 + 4.0 * M * ntile + (4.0 * M * ntile + 4.0 * M);
    ck[nck++] = (check){"dz", argp(c, "dz"), 0, 2 * N, NULL, c->u[0], 0, 2 * N, M, 2 * N};
    ck[nck++] = (check){"y", argp(c, "y"), 0, N, NULL, c->u[1], 0, N, M, N};
    break;
  }

  /* one run of each; the RMSNorm backward takes Σz·dz from the unfused pass
   * (its row dot Σ dh·w·x·r), so both compute the same operation */
  char err[512] = "";
  int s = run_plain(c);
  if (s) snprintf(err, sizeof err, "plain: %s", coda_last_error(ctx));
  if (!s && (s = run_unfused(c))) snprintf(err, sizeof err, "unfused: error %d", s);
  if (!s && kd->k == T_NORMBWD)
    CUDA_CK(cudaMemcpy(argp(c, "zdz"), c->u[2], (size_t)M * 4, cudaMemcpyDeviceToDevice));
  if (!s && (s = run_fused(c))) snprintf(err, sizeof err, "fused: %s", coda_last_error(ctx));
  if (!s) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
      exit(1);
    }
  }
  if (s) {
    printf("| %s | %s | %lld | %lld | %lld | failed: %s |\n", kd->name, sh->name, (long long)M,
           (long long)N, (long long)K, err);
    g_fail = 1;
  } else {
    char text[256] = "";
    double worst = 0;
    for (int i = 0; i < nck; i++) {
      const double r = compare(&ck[i], text, sizeof text);
      if (!(r <= worst)) worst = r;
    }
    const int ok = worst <= 3e-2;
    if (!ok) g_fail = 1;
    const float t_plain = time_ms(run_plain, c), t_kernel = time_ms(run_fused_kernel, c);
    const float t_fused = time_ms(run_fused, c), t_unf = time_ms(run_unfused, c);
    const float t_cublas = time_ms(run_cublas, c);
    const double flop = 2.0 * (double)M * (double)N * (double)K;
    printf("| %s | %s | %lld | %lld | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.0f "
           "| %.0f | %.0f | %s%s |\n",
           kd->name, sh->name, (long long)M, (long long)N, (long long)K, t_plain, t_fused,
           t_kernel, t_unf, t_cublas, t_fused / t_plain, t_unf / t_fused, flop / t_fused * 1e-9,
           bu / 1e6, bf / 1e6, text, ok ? "" : " MISMATCH");
  }
  fflush(stdout);
  for (int i = 0; i < c->nbufs; i++) cudaFree(c->bufs[i]);
  coda_args_destroy(c->args);
  coda_program_destroy(c->prog);
}

/* ------------------------------------------------------------ precompile */

/* Every fused kernel the benchmark launches (program x B layout), compiled
 * into the NVRTC disk cache; NVRTC needs no GPU. */
static int precompile(void) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  int n = 0, bad = 0;
  for (int i = 0; i < NKERNELS; i++) {
    int dup = 0;
    for (int j = 0; j < i; j++)
      dup |= !strcmp(kKernels[j].program, kKernels[i].program) && kKernels[j].tb == kKernels[i].tb;
    if (dup) continue;
    coda_program p = NULL;
    if (coda_program_builtin(ctx, kKernels[i].program, &p) != CODA_OK) {
      fprintf(stderr, "%s: %s\n", kKernels[i].program, coda_last_error(ctx));
      bad++;
      continue;
    }
    coda_epi_config cfg = coda_epi_default_config(); /* as coda_gemm_epilogue sets it up */
    cfg.trans_a = 0;
    cfg.trans_b = kKernels[i].tb;
    cfg.f16 = 0;
    coda_epi_binary bin;
    if (coda_epi_build(ctx, p, &cfg, 0, &bin) != CODA_OK) {
      fprintf(stderr, "%s: %s\n", kKernels[i].program, coda_last_error(ctx));
      bad++;
    } else {
      n++;
      printf("%-20s B %s: %s, %s, spill %d\n", kKernels[i].program, cfg.trans_b ? "N x K" : "K x N",
             bin.from_cache ? "cached" : "compiled", cfg.ping ? "pingpong" : "cooperative",
             bin.spill);
      coda_epi_binary_free(&bin);
    }
    coda_program_destroy(p);
  }
  printf("precompiled %d kernels, %d failures\n", n, bad);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}

/* ------------------------------------------------------------ user programs */

#define MAX_USER 32

/* FILE, or builtin:NAME */
static coda_status load_program(coda_context ctx, const char *spec, coda_program *out) {
  coda_status st;
  if (!strncmp(spec, "builtin:", 8)) {
    st = coda_program_builtin(ctx, spec + 8, out);
  } else {
    const char *why = NULL;
    char *text = coda_tool_read_text(spec, &why);
    if (!text) {
      fprintf(stderr, "--program %s: %s\n", spec, why);
      return CODA_ERR_INVALID_ARGUMENT;
    }
    st = coda_program_parse(ctx, text, out);
    free(text);
  }
  if (st != CODA_OK) fprintf(stderr, "--program %s: %s\n", spec, coda_last_error(ctx));
  return st;
}

/* One program against the plain GEMM of its shape. */
static void bench_program(coda_context ctx, const char *spec, int64_t M, int64_t N, int64_t K) {
  static const kernel_def user = {"program", "program", "a program of one's own", T_RESNORM, 1};
  static const shape ush = {"user", 0, 0, 0, 32, 8, 64, 0, 4096};
  bench_case one;
  bench_case *c = &one;
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->kd = &user;
  c->sh = &ush;
  c->M = M, c->N = N, c->K = K;
  if (load_program(ctx, spec, &c->prog) != CODA_OK) {
    g_fail = 1;
    return;
  }
  if (coda_args_create(ctx, &c->args) != CODA_OK) {
    fprintf(stderr, "%s: %s\n", spec, coda_last_error(ctx));
    coda_program_destroy(c->prog);
    g_fail = 1;
    return;
  }
  c->A = dalloc(c, (size_t)(M * K) * 2);
  c->B = dalloc(c, (size_t)(N * K) * 2);
  c->D = dalloc(c, (size_t)(M * N) * 2);
  UF_CK(uf_fill(c->A, 0, (size_t)(M * K), 71, 1.0f, 0));
  UF_CK(uf_fill(c->B, 0, (size_t)(N * K), 72, (float)(2.0 / sqrt((double)K)), 0));
  alloc_program_args(c, 73);
  int bad = run_fused(c);
  if (bad) {
    fprintf(stderr, "%s: %s\n", spec, coda_last_error(ctx));
    g_fail = 1;
  } else {
    const float plain = time_ms(run_plain, c), fused = time_ms(run_fused, c);
    const float kern = time_ms(run_fused_kernel, c);
    const double fl = 2.0 * (double)M * N * K;
    printf("| %s | %lld | %lld | %lld | %.3f | %.3f | %.3f | %.3f | %.0f |\n", spec, (long long)M,
           (long long)N, (long long)K, plain, fused, kern, fused / plain, fl / (fused * 1e-3) / 1e12);
  }
  for (int i = 0; i < c->nbufs; i++) cudaFree(c->bufs[i]);
  coda_args_destroy(c->args);
  coda_program_destroy(c->prog);
}

static int precompile_programs(const char *const *specs, int n) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    coda_program p = NULL;
    if (load_program(ctx, specs[i], &p) != CODA_OK) {
      bad++;
      continue;
    }
    /* a program of several passes (lang/pass_split.c): each pass's kernel,
     * the first the GEMM's epilogue, the others maps */
    const int np = coda_program_num_passes(p);
    for (int k = 0; k < (np > 0 ? np : 1); k++) {
      coda_pass_info pi;
      if (np > 1 && coda_program_pass(ctx, p, k, &pi) != CODA_OK) {
        fprintf(stderr, "%s, pass %d: %s\n", specs[i], k, coda_last_error(ctx));
        bad++;
        break;
      }
      coda_program q = np > 1 ? pi.program : p;
      char label[96];
      snprintf(label, sizeof label, np > 1 ? "%s, pass %d" : "%s", specs[i], k);
      if (np > 1 && pi.kind != CODA_PASS_EPILOGUE) {
        int cached = 0;
        if (coda_cuda_map_precompile(ctx, q, &cached) != CODA_OK) {
          fprintf(stderr, "%s: %s\n", label, coda_last_error(ctx));
          bad++;
        } else {
          printf("%-40s %s, map\n", label, cached ? "cached" : "compiled");
        }
        continue;
      }
      coda_epi_config cfg = coda_epi_default_config();
      cfg.trans_a = 0;
      cfg.trans_b = 1;
      cfg.f16 = 0;
      coda_epi_binary bin;
      if (coda_epi_build(ctx, q, &cfg, 0, &bin) != CODA_OK) {
        fprintf(stderr, "%s: %s\n", label, coda_last_error(ctx));
        bad++;
      } else {
        printf("%-40s %s, %s, spill %d\n", label, bin.from_cache ? "cached" : "compiled",
               cfg.ping ? "pingpong" : "cooperative", bin.spill);
        coda_epi_binary_free(&bin);
      }
    }
    coda_program_destroy(p);
  }
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *shapes = NULL, *only = NULL, *user[MAX_USER];
  int nuser = 0, pre = 0;
  int64_t um = 8192, un = 4096, uk = 4096;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--precompile")) {
      pre = 1;
      continue;
    }
    if (!strcmp(argv[i], "--program") && i + 1 < argc) {
      if (nuser == MAX_USER) {
        fprintf(stderr, "--program: at most %d\n", MAX_USER);
        return 2;
      }
      user[nuser++] = argv[++i];
      continue;
    }
    if (!strcmp(argv[i], "--mnk") && i + 1 < argc) {
      long long a, b, c;
      char tail;
      if (sscanf(argv[++i], "%lld,%lld,%lld%c", &a, &b, &c, &tail) != 3 || a < 1 || b < 1 ||
          c < 1 || a > 65536 || b > 65536 || c > 65536) {
        fprintf(stderr, "--mnk: M,N,K, each 1..65536\n");
        return 2;
      }
      um = a, un = b, uk = c;
      continue;
    }
    if (!strcmp(argv[i], "--list")) {
      for (int k = 0; k < NKERNELS; k++)
        for (int s = 0; s < NSHAPES; s++) {
          int64_t M, N, K;
          kernel_mnk(&kKernels[k], &kShapes[s], &M, &N, &K);
          printf("%-14s %-3s %-20s M %6lld N %6lld K %6lld  %s\n", kKernels[k].name,
                 kShapes[s].name, kKernels[k].program, (long long)M, (long long)N, (long long)K,
                 kKernels[k].what);
        }
      return 0;
    }
    if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      g_reps = atoi(argv[++i]);
      if (g_reps < 1 || g_reps > 1000) {
        fprintf(stderr, "--reps: 1..1000\n");
        return 2;
      }
    } else {
      fprintf(stderr,
              "usage: bench_fused [--shapes 1B,8B] [--only kernel,...] [--reps N] | --precompile | "
              "--list\n"
              "       bench_fused --program FILE|builtin:NAME ... [--mnk M,N,K] [--reps N] "
              "[--precompile]\n");
      return 2;
    }
  }
  if (pre) return nuser ? precompile_programs(user, nuser) : precompile();
  if (only)
    for (const char *q = only; *q;) { /* a typo must not silently bench nothing */
      const char *e = strchr(q, ',');
      const size_t len = e ? (size_t)(e - q) : strlen(q);
      int found = 0;
      for (int k = 0; k < NKERNELS; k++)
        found |= strlen(kKernels[k].name) == len && !strncmp(kKernels[k].name, q, len);
      if (!found) {
        fprintf(stderr, "--only: unknown kernel '%.*s' (see --list)\n", (int)len, q);
        return 2;
      }
      if (!e) break;
      q = e + 1;
    }
  if (!coda_cuda_available()) {
    printf("bench_fused: no usable sm_90 GPU\n");
    return 77;
  }
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  coda_context ctx;
  if (coda_context_create(&o, &ctx) != CODA_OK) {
    printf("bench_fused: cannot create a CUDA context\n");
    return 2;
  }
  cublasHandle_t cb;
  if (cublasCreate(&cb) != CUBLAS_STATUS_SUCCESS) {
    printf("bench_fused: cublasCreate failed\n");
    return 2;
  }
  /* a 32 MiB workspace, as bench_gemm's and PyTorch's handles have on
   * Hopper (the handle's own default depends on the cuBLAS version), so
   * that cuBLAS picks from the same algorithms here as there */
  void *cws = NULL;
  CUDA_CK(cudaMalloc(&cws, (size_t)32 << 20));
  if (cublasSetWorkspace(cb, cws, (size_t)32 << 20) != CUBLAS_STATUS_SUCCESS) {
    printf("bench_fused: cublasSetWorkspace failed\n");
    return 2;
  }
  struct cudaDeviceProp prop;
  CUDA_CK(cudaGetDeviceProperties(&prop, o.device));
  printf("device: %s, %d SMs; bf16 operands and activations, fp32 accumulate; median of %d "
         "back-to-back calls (CUDA events between them, 3 warm-ups)\n\n",
         prop.name, prop.multiProcessorCount, g_reps);
  if (nuser) {
    printf("| program | M | N | K | plain ms | fused ms | fused kernel ms | fused/plain | fused "
           "TFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nuser; i++) bench_program(ctx, user[i], um, un, uk);
    cublasDestroy(cb);
    cudaFree(cws);
    coda_context_destroy(ctx);
    return g_fail ? 1 : 0;
  }
  printf("| kernel | shape | M | N | K | plain ms | fused ms | fused kernel ms | unfused ms | "
         "cuBLAS ms | fused/plain | unfused/fused | fused TFLOP/s | unfused MB | fused MB | "
         "max|fused−unfused|/max|unfused| |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int s = 0; s < NSHAPES; s++) {
    if (!name_in_list(shapes, kShapes[s].name)) continue;
    for (int k = 0; k < NKERNELS; k++)
      if (name_in_list(only, kKernels[k].name)) bench_one(ctx, cb, &kKernels[k], &kShapes[s]);
  }
  cublasDestroy(cb);
  cudaFree(cws);
  coda_context_destroy(ctx);
  return g_fail ? 1 : 0;
}
