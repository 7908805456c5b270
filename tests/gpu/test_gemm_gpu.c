/* GPU test of the Hopper GEMM (coda_cuda_gemm): every layout (trans_a,
 * trans_b), operand type (bf16, f16) and output type (bf16, f16, f32), with
 * alpha and accumulate, on ragged, tiny and medium shapes against a CPU
 * reference in double, and on large shapes against cuBLAS. Outputs are
 * poisoned (NaN bytes) before each run and the padding between rows is
 * checked to be untouched. The automatic choice is also run through the
 * autotuner (tuned calls must give the same GEMM; a fresh context must read
 * the tuned choice back from the cache file, $CODA_CACHE_DIR or
 * ~/.cache/coda). Accumulating fp32 GEMMs run twice more on the same
 * D0: with a 16-byte pitch (TMA reduce-add) and an odd pitch (register
 * path); the two must agree bit for bit and with the reference, and the
 * row padding must keep its values. Argument "--small" runs only the small shapes
 * (for compute-sanitizer); "--tiny" only two ragged shapes and no tuning;
 * "--sanitize" (for the slow racecheck) every tile configuration, layout and
 * operand type on one ragged shape past full tiles (129x257x65), the
 * one-tile shape 7x13x5 once per configuration, split-K on two layouts,
 * and one accumulate-f32 case by each path. Every mode ends with a
 * "coverage:" line (configurations, layouts, operand types, split-K and
 * accumulate paths that ran). Every entry of the tile table runs, or only
 * those whose name contains $CODA_TEST_GEMM_CONFIG (e.g. "c2": the cluster
 * entries). Exits non-zero on any failure. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/internal.h"
#include "backends/cuda/backend.h"
#include "backends/cuda/gemm_internal.h"
#include "gpu/cuda_check.h"
#include "test_util.h"

static int g_fail = 0, g_pass = 0;
static int g_config = -1; /* tile configuration under test (-1: default) */
static int g_splits = 0;  /* forced k-splits (0: default) */

/* Tile configurations under test: all, or those whose name contains
 * $CODA_TEST_GEMM_CONFIG. */
static int config_selected(int c) {
  const char *f = getenv("CODA_TEST_GEMM_CONFIG");
  return !f || !*f || strstr(coda_cuda_gemm_config_name(c), f) != NULL;
}


static uint64_t g_rng;
static double urand(void) { return xorshift64_unit(&g_rng); } /* uniform in [-1, 1) */
static int irand(int n) { return (int)((urand() + 1.0) * 0.5 * n) % n; }

static uint16_t to16(coda_dtype t, double v) {
  return t == CODA_BF16 ? coda_f32_to_bf16((float)v) : coda_f32_to_f16((float)v);
}
static double from16(coda_dtype t, uint16_t h) {
  return t == CODA_BF16 ? coda_bf16_to_f32(h) : coda_f16_to_f32(h);
}

/* A host matrix of 16-bit values (rows x cols, pitch ld) and its device copy. */
typedef struct {
  int64_t rows, cols, ld;
  coda_dtype t;
  uint16_t *h;
  void *d;
} mat16;

static mat16 mat16_random(coda_dtype t, int64_t rows, int64_t cols, int pad) {
  mat16 m;
  m.rows = rows;
  m.cols = cols;
  m.ld = ((cols + 7) / 8) * 8 + 8 * pad; /* TMA: 16-byte row pitch */
  m.t = t;
  size_t n = (size_t)rows * m.ld;
  m.h = malloc(n * 2);
  for (size_t i = 0; i < n; ++i) m.h[i] = to16(t, urand()); /* padding random too */
  CUDA_CHECK(cudaMalloc(&m.d, n * 2 + 16));
  CUDA_CHECK(cudaMemcpy(m.d, m.h, n * 2, cudaMemcpyHostToDevice));
  return m;
}
static void mat16_free(mat16 *m) {
  free(m->h);
  cudaFree(m->d);
}
static coda_tensor mat16_view(const mat16 *m) {
  coda_tensor v = {m->d, m->t, m->rows, m->cols, m->ld};
  return v;
}

static const char *tn(coda_transpose t) { return t == CODA_N ? "N" : "T"; }

/* Runs one GEMM into a poisoned (or randomly initialised, when
 * accumulating) D of pitch ldd and checks it against exp[m*N+n] with
 * per-element tolerance tol_rel*|exp| + tol_abs[m*N+n]. */
typedef struct {
  coda_context ctx;
  int64_t M, N, K;
  coda_transpose ta, tb;
  const mat16 *A, *B;
} gemm_case;

static size_t dsize(coda_dtype t) { return coda_dtype_size(t); }

static double load_any(coda_dtype t, const void *p, size_t i) {
  if (t == CODA_F32) return ((const float *)p)[i];
  return from16(t, ((const uint16_t *)p)[i]);
}
static void store_any(coda_dtype t, void *p, size_t i, double v) {
  if (t == CODA_F32) ((float *)p)[i] = (float)v;
  else ((uint16_t *)p)[i] = to16(t, v);
}

/* ref: alpha-free product (M x N), absref: sum |a||b|. exp_out computed here. */
static void run_and_check(const gemm_case *c, coda_dtype out, float alpha, int accumulate,
                          const double *ref, const double *absref, const char *label) {
  const int64_t M = c->M, N = c->N;
  /* Pitches N, N+1, N+2 in turn: odd and unaligned pitches take the register
   * path, 16-byte aligned ones (with N a multiple of 16 bytes) the TMA path. */
  static int pad = 0;
  pad = (pad + 1) % 3;
  const int64_t ldd = N + pad;
  const size_t es = dsize(out);
  const size_t tot = (size_t)M * ldd + 64; /* 64 guard elements after the last row */
  unsigned char *h = malloc(tot * es), *h0 = malloc(tot * es);
  memset(h0, 0xFF, tot * es); /* NaN in every float type */
  if (accumulate)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) store_any(out, h0, (size_t)m * ldd + n, urand() * 2.0);
  void *d;
  CUDA_CHECK(cudaMalloc(&d, tot * es));
  CUDA_CHECK(cudaMemcpy(d, h0, tot * es, cudaMemcpyHostToDevice));
  coda_tensor A = mat16_view(c->A), B = mat16_view(c->B);
  coda_tensor D = {d, out, M, N, ldd};
  coda_status st =
      coda_cuda_gemm_config(c->ctx, c->ta, &A, c->tb, &B, &D, alpha, accumulate, g_config,
                            g_splits, 0);
  if (st != CODA_OK) {
    printf("FAIL %s: status %d: %s\n", label, (int)st, coda_last_error(c->ctx));
    g_fail++;
    goto done;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(h, d, tot * es, cudaMemcpyDeviceToHost));
  {
    const double u = out == CODA_BF16 ? 1.0 / 128 : out == CODA_F16 ? 1.0 / 1024 : 1.0 / (1 << 23);
    const double atol = out == CODA_F16 ? 1e-7 : 1e-30;
    int64_t bad = 0, first_m = -1, first_n = -1;
    double worst = 0, num = 0, den = 0, got_bad = 0, exp_bad = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = (size_t)m * ldd + n;
        const double d0 = accumulate ? load_any(out, h0, i) : 0.0;
        const double e = (double)alpha * ref[m * N + n] + d0;
        const double g = load_any(out, h, i);
        const double tol = u * fabs(e) + 2e-5 * (fabs(alpha) * absref[m * N + n] + fabs(d0)) + atol;
        const double err = fabs(g - e);
        num += (g - e) * (g - e);
        den += e * e;
        if (!(err <= tol)) {
          if (!bad) { first_m = m; first_n = n; got_bad = g; exp_bad = e; }
          bad++;
        }
        if (err / (tol > 0 ? tol : 1) > worst) worst = err / tol;
      }
    /* The padding between rows and the guard after the last row are untouched. */
    int64_t clobbered = 0;
    for (size_t i = 0; i < tot; ++i) {
      const int64_t m = (int64_t)(i / ldd), n = (int64_t)(i % ldd);
      if (m < M && n < N) continue;
      if (memcmp(h + i * es, h0 + i * es, es) != 0) clobbered++;
    }
    if (bad || clobbered) {
      printf("FAIL %s: %lld bad elements (first at %lld,%lld: got %.8g want %.8g), %lld "
             "padding elements written, rel err %.3g\n",
             label, (long long)bad, (long long)first_m, (long long)first_n, got_bad, exp_bad,
             (long long)clobbered, sqrt(num / (den > 0 ? den : 1)));
      g_fail++;
    } else {
      g_pass++;
    }
  }
done:
  cudaFree(d);
  free(h);
  free(h0);
}

static double opa(const gemm_case *c, int64_t m, int64_t k) {
  const mat16 *A = c->A;
  return from16(A->t, c->ta == CODA_N ? A->h[m * A->ld + k] : A->h[k * A->ld + m]);
}
static double opb(const gemm_case *c, int64_t k, int64_t n) {
  const mat16 *B = c->B;
  return from16(B->t, c->tb == CODA_N ? B->h[k * B->ld + n] : B->h[n * B->ld + k]);
}

static void small_case(coda_context ctx, int64_t M, int64_t N, int64_t K, coda_transpose ta,
                       coda_transpose tb, coda_dtype in) {
  mat16 A = ta == CODA_N ? mat16_random(in, M, K, irand(2)) : mat16_random(in, K, M, irand(2));
  mat16 B = tb == CODA_N ? mat16_random(in, K, N, irand(2)) : mat16_random(in, N, K, irand(2));
  gemm_case c = {ctx, M, N, K, ta, tb, &A, &B};
  /* Reference in double: op(A) as M x K, op(B)^T as N x K. */
  double *a = malloc(sizeof(double) * (size_t)(M * K + 1));
  double *bt = malloc(sizeof(double) * (size_t)(N * K + 1));
  double *ref = malloc(sizeof(double) * (size_t)(M * N));
  double *absref = malloc(sizeof(double) * (size_t)(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = opa(&c, m, k);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) bt[n * K + k] = opb(&c, k, n);
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, sa = 0;
      const double *x = a + m * K, *y = bt + n * K;
      for (int64_t k = 0; k < K; ++k) {
        s += x[k] * y[k];
        sa += fabs(x[k] * y[k]);
      }
      ref[m * N + n] = s;
      absref[m * N + n] = sa;
    }
  static const coda_dtype outs[3] = {CODA_BF16, CODA_F16, CODA_F32};
  char label[160];
  for (int o = 0; o < 3; ++o) {
    snprintf(label, sizeof label, "[%d/%d] %lldx%lldx%lld %s%s %s->%s", g_config, g_splits,
             (long long)M,
             (long long)N, (long long)K, tn(ta), tn(tb), coda_dtype_name(in),
             coda_dtype_name(outs[o]));
    run_and_check(&c, outs[o], 1.0f, 0, ref, absref, label);
  }
  snprintf(label, sizeof label, "[%d/%d] %lldx%lldx%lld %s%s %s->f32 alpha=0.5 accumulate",
           g_config, g_splits, (long long)M, (long long)N, (long long)K, tn(ta), tn(tb), coda_dtype_name(in));
  run_and_check(&c, CODA_F32, 0.5f, 1, ref, absref, label);
  snprintf(label, sizeof label, "[%d/%d] %lldx%lldx%lld %s%s %s->bf16 alpha=-1.25 accumulate",
           g_config, g_splits, (long long)M, (long long)N, (long long)K, tn(ta), tn(tb), coda_dtype_name(in));
  run_and_check(&c, CODA_BF16, -1.25f, 1, ref, absref, label);
  free(a);
  free(bt);
  free(ref);
  free(absref);
  mat16_free(&A);
  mat16_free(&B);
}

/* Accumulating fp32 D: D = D0 + alpha * op(A) op(B), once with a 16-byte
 * pitch (N % 4 == 0: the TMA reduce-add path) and once with a pitch of
 * 4k + 1 elements (the register path), for every tile configuration, one
 * k-split, the same D0 (random, non-zero). Both must match the fp64
 * reference, agree bit for bit, and leave the padding between rows (finite
 * values) unchanged. */
static int g_acc_tma = 0, g_acc_reg = 0, g_acc_same = 0, g_acc_fail = 0;

/* One GEMM into D0 copied at pitch ld; checks it, returns the M x N result
 * (NULL on failure to run) and sets *bad. */
static float *accumulate_f32_run(const gemm_case *c, const float *d0, int64_t ld, float alpha,
                                 int config, const double *ref, const double *absref,
                                 const char *label, int *path, int *bad) {
  const int64_t M = c->M, N = c->N;
  const size_t tot = (size_t)(M * ld);
  float *h = malloc(tot * sizeof(float)), *out = NULL;
  for (size_t i = 0; i < tot; ++i) h[i] = 12345.0f; /* padding: finite, so an add would show */
  for (int64_t m = 0; m < M; ++m) memcpy(h + m * ld, d0 + m * N, sizeof(float) * (size_t)N);
  void *d;
  CUDA_CHECK(cudaMalloc(&d, tot * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d, h, tot * sizeof(float), cudaMemcpyHostToDevice));
  coda_tensor Av = mat16_view(c->A), Bv = mat16_view(c->B), D = {d, CODA_F32, M, N, ld};
  *path = coda_cuda_gemm_store_path(&D, 1, 1);
  coda_status st = coda_cuda_gemm_config(c->ctx, c->ta, &Av, c->tb, &Bv, &D, alpha, 1, config, 1, 0);
  if (st != CODA_OK) {
    printf("FAIL %s ld=%lld: status %d: %s\n", label, (long long)ld, (int)st, coda_last_error(c->ctx));
    *bad = 1;
    goto done;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(h, d, tot * sizeof(float), cudaMemcpyDeviceToHost));
  {
    int64_t nbad = 0, clobbered = 0, fm = -1, fc = -1;
    double gb = 0, eb = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < ld; ++n) {
        const float g = h[m * ld + n];
        if (n >= N) {
          clobbered += g != 12345.0f;
          continue;
        }
        const double d0v = d0[m * N + n], e = d0v + (double)alpha * ref[m * N + n];
        const double tol =
            fabs(e) / (1 << 23) + 2e-5 * (fabs(alpha) * absref[m * N + n] + fabs(d0v)) + 1e-30;
        if (!(fabs(g - e) <= tol)) {
          if (!nbad) { fm = m; fc = n; gb = g; eb = e; }
          nbad++;
        }
      }
    if (nbad || clobbered) {
      printf("FAIL %s ld=%lld (%s): %lld bad elements (first at %lld,%lld: got %.8g want %.8g), "
             "%lld padding elements changed\n",
             label, (long long)ld, *path == CODA_GEMM_STORE_TMA_REDUCE ? "TMA reduce-add" : "register path",
             (long long)nbad, (long long)fm, (long long)fc, gb, eb, (long long)clobbered);
      *bad = 1;
    }
  }
  out = malloc(sizeof(float) * (size_t)(M * N));
  for (int64_t m = 0; m < M; ++m) memcpy(out + m * N, h + m * ld, sizeof(float) * (size_t)N);
done:
  cudaFree(d);
  free(h);
  return out;
}

static void accumulate_f32_case(coda_context ctx, int64_t M, int64_t N, int64_t K, coda_transpose ta,
                                coda_transpose tb, coda_dtype in, float alpha) {
  mat16 A = ta == CODA_N ? mat16_random(in, M, K, 0) : mat16_random(in, K, M, 0);
  mat16 B = tb == CODA_N ? mat16_random(in, K, N, 0) : mat16_random(in, N, K, 0);
  gemm_case c = {ctx, M, N, K, ta, tb, &A, &B};
  double *a = malloc(sizeof(double) * (size_t)(M * K + 1)), *bt = malloc(sizeof(double) * (size_t)(N * K + 1));
  double *ref = malloc(sizeof(double) * (size_t)(M * N)), *absref = malloc(sizeof(double) * (size_t)(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = opa(&c, m, k);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) bt[n * K + k] = opb(&c, k, n);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0, sa = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = a[m * K + k] * bt[n * K + k];
        sum += p;
        sa += fabs(p);
      }
      ref[m * N + n] = sum;
      absref[m * N + n] = sa;
    }
  float *d0 = malloc(sizeof(float) * (size_t)(M * N));
  for (int64_t i = 0; i < M * N; ++i) {
    const double v = 0.1 + 1.9 * (urand() + 1.0) * 0.5; /* |D0| in [0.1, 2) */
    d0[i] = (float)(urand() < 0 ? -v : v);
  }
  /* a 16-byte pitch, and one of 4k + 1 elements; both leave row padding */
  const int64_t lds[2] = {(N + 3) / 4 * 4 + 4, (N + 3) / 4 * 4 + 1};
  for (int config = 0; config < coda_cuda_gemm_num_configs(); ++config) {
    char label[200];
    snprintf(label, sizeof label, "[%d] %lldx%lldx%lld %s%s %s->f32 alpha=%g accumulate", config,
             (long long)M, (long long)N, (long long)K, tn(ta), tn(tb), coda_dtype_name(in), (double)alpha);
    int bad = 0, paths[2] = {-1, -1};
    float *got[2];
    for (int v = 0; v < 2; ++v)
      got[v] = accumulate_f32_run(&c, d0, lds[v], alpha, config, ref, absref, label, &paths[v], &bad);
    /* the path each pitch takes: 16-byte rows of fp32 reduce-add, others do not */
    if (paths[0] != (N % 4 == 0 ? CODA_GEMM_STORE_TMA_REDUCE : CODA_GEMM_STORE_REGISTERS) ||
        paths[1] != CODA_GEMM_STORE_REGISTERS) {
      printf("FAIL %s: store paths %d / %d\n", label, paths[0], paths[1]);
      bad = 1;
    }
    if (got[0] && got[1]) {
      if (memcmp(got[0], got[1], sizeof(float) * (size_t)(M * N)) != 0) {
        int64_t i = 0;
        while (memcmp(got[0] + i, got[1] + i, sizeof(float)) == 0) ++i;
        printf("FAIL %s: the two pitches differ (first at %lld,%lld: %.9g vs %.9g)\n", label,
               (long long)(i / N), (long long)(i % N), got[0][i], got[1][i]);
        bad = 1;
      } else if (paths[0] == CODA_GEMM_STORE_TMA_REDUCE) {
        g_acc_same++;
      }
    }
    if (paths[0] == CODA_GEMM_STORE_TMA_REDUCE) g_acc_tma++;
    g_acc_reg += 1 + (paths[0] == CODA_GEMM_STORE_REGISTERS);
    if (bad) {
      g_fail++;
      g_acc_fail++;
    } else {
      g_pass++;
    }
    free(got[0]);
    free(got[1]);
  }
  free(d0);
  free(a);
  free(bt);
  free(ref);
  free(absref);
  mat16_free(&A);
  mat16_free(&B);
}

/* level 0: every shape and layout; 1 (--small): two shapes; 2 (--tiny):
 * one ragged shape, one layout */
static void accumulate_f32_cases(coda_context ctx, int level) {
  /* aligned tiles, ragged M and N (N % 4 == 0: still TMA), N % 4 != 0
   * (register path at both pitches), one row, K past a k-block */
  static const int64_t sh[][3] = {{200, 332, 130}, {256, 512, 256}, {129, 260, 65},
                                  {77, 130, 64},   {1, 8, 16},      {1000, 64, 300}};
  const int nsh = level == 2 ? 1 : level == 1 ? 2 : (int)(sizeof sh / sizeof sh[0]);
  static const float alphas[2] = {1.0f, -0.3f}; /* -0.3: alpha * acc is rounded before the add */
  g_acc_tma = g_acc_reg = g_acc_same = g_acc_fail = 0;
  for (int s = 0; s < nsh; ++s)
    for (int l = level == 2 ? 1 : 0; l < (level == 2 ? 2 : 4); ++l)
      accumulate_f32_case(ctx, sh[s][0], sh[s][1], sh[s][2], (coda_transpose)(l >> 1),
                          (coda_transpose)(l & 1), (l & 1) ? CODA_F16 : CODA_BF16, alphas[(s + l) & 1]);
  printf("accumulate-f32: %d runs by TMA reduce-add, %d by the register path, %d reduce-add runs "
         "bit-identical to the register path, %d cases failed\n",
         g_acc_tma, g_acc_reg, g_acc_same, g_acc_fail);
}

static int cmp_float(const void *x, const void *y) {
  const float a = *(const float *)x, b = *(const float *)y;
  return a < b ? -1 : a > b;
}
/* Time (median of 15, CUDA events) of an fp32 D += A B^T at 4096 x 4096 x
 * 1024 (bf16, default tile, one split): TMA reduce-add (pitch 4096), the
 * register path (pitch 4097) and, for scale, the plain store (pitch 4096).
 * A measurement only: it passes or fails nothing. */
static void accumulate_f32_timing(coda_context ctx) {
  const int64_t M = 4096, N = 4096, K = 1024;
  mat16 A = mat16_random(CODA_BF16, M, K, 0), B = mat16_random(CODA_BF16, N, K, 0);
  float *d;
  CUDA_CHECK(cudaMalloc((void **)&d, sizeof(float) * (size_t)(M * (N + 1))));
  CUDA_CHECK(cudaMemset(d, 0, sizeof(float) * (size_t)(M * (N + 1))));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  static const char *const names[3] = {"TMA reduce-add", "register path", "plain TMA store"};
  float med[3];
  coda_tensor Av = mat16_view(&A), Bv = mat16_view(&B);
  for (int v = 0; v < 3; ++v) {
    coda_tensor D = {d, CODA_F32, M, N, v == 1 ? N + 1 : N};
    const int acc = v < 2;
    float t[15];
    for (int r = -3; r < 15; ++r) {
      CUDA_CHECK(cudaEventRecord(e0, 0));
      if (coda_cuda_gemm_config(ctx, CODA_N, &Av, CODA_T, &Bv, &D, 1.0f, acc, -1, 1, 0) != CODA_OK) {
        printf("FAIL accumulate-f32 timing: %s\n", coda_last_error(ctx));
        g_fail++;
        goto out;
      }
      CUDA_CHECK(cudaEventRecord(e1, 0));
      CUDA_CHECK(cudaEventSynchronize(e1));
      if (r >= 0) CUDA_CHECK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    qsort(t, 15, sizeof t[0], cmp_float);
    med[v] = t[7];
  }
  printf("accumulate-f32 timing %lldx%lldx%lld bf16 NT: %s %.1f us, %s %.1f us, %s %.1f us\n",
         (long long)M, (long long)N, (long long)K, names[0], med[0] * 1e3, names[1], med[1] * 1e3,
         names[2], med[2] * 1e3);
out:
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(d);
  mat16_free(&A);
  mat16_free(&B);
}

/* Large shapes: ours (f32 and bf16 out) against cuBLAS (f32 out). */
static void large_case(coda_context ctx, cublasHandle_t hb, int64_t M, int64_t N, int64_t K,
                       coda_transpose ta, coda_transpose tb, coda_dtype in) {
  mat16 A = ta == CODA_N ? mat16_random(in, M, K, 0) : mat16_random(in, K, M, 0);
  mat16 B = tb == CODA_N ? mat16_random(in, K, N, 0) : mat16_random(in, N, K, 0);
  float *ref_d, *our_d;
  uint16_t *our16_d;
  CUDA_CHECK(cudaMalloc((void **)&ref_d, sizeof(float) * M * N));
  CUDA_CHECK(cudaMalloc((void **)&our_d, sizeof(float) * M * N));
  CUDA_CHECK(cudaMalloc((void **)&our16_d, 2 * M * N));
  CUDA_CHECK(cudaMemset(our_d, 0xFF, sizeof(float) * M * N));
  CUDA_CHECK(cudaMemset(our16_d, 0xFF, 2 * M * N));
  /* Row-major D (M x N) is column-major D^T (N x M) = op(B)^T op(A)^T. */
  const float one = 1.0f, zero = 0.0f;
  cudaDataType_t ct = in == CODA_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasStatus_t cs = cublasGemmEx(hb, tb == CODA_T ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta == CODA_T ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                   &one, B.d, ct, (int)B.ld, A.d, ct, (int)A.ld, &zero, ref_d,
                                   CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  char label[160];
  snprintf(label, sizeof label, "%lldx%lldx%lld %s%s %s [%s] vs cuBLAS", (long long)M,
           (long long)N, (long long)K, tn(ta), tn(tb), coda_dtype_name(in),
           coda_cuda_gemm_config_name(g_config));
  if (cs != CUBLAS_STATUS_SUCCESS) {
    printf("FAIL %s: cuBLAS status %d\n", label, (int)cs);
    g_fail++;
    goto out;
  }
  coda_tensor Av = mat16_view(&A), Bv = mat16_view(&B);
  coda_tensor D32 = {our_d, CODA_F32, M, N, N}, D16 = {our16_d, CODA_BF16, M, N, N};
  if (coda_cuda_gemm_config(ctx, ta, &Av, tb, &Bv, &D32, 1.0f, 0, g_config, g_splits, 0) != CODA_OK ||
      coda_cuda_gemm_config(ctx, ta, &Av, tb, &Bv, &D16, 1.0f, 0, g_config, g_splits, 0) != CODA_OK) {
    printf("FAIL %s: %s\n", label, coda_last_error(ctx));
    g_fail++;
    goto out;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  {
    size_t n = (size_t)M * N;
    float *r = malloc(n * 4), *o = malloc(n * 4);
    uint16_t *o16 = malloc(n * 2);
    CUDA_CHECK(cudaMemcpy(r, ref_d, n * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(o, our_d, n * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(o16, our16_d, n * 2, cudaMemcpyDeviceToHost));
    double amax = 0, num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) amax = fmax(amax, fabs(r[i]));
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      double e = r[i], g = o[i], g16 = coda_bf16_to_f32(o16[i]);
      num += (g - e) * (g - e);
      den += e * e;
      if (!(fabs(g - e) <= 1e-5 * amax + 1e-5 * fabs(e))) bad++;
      if (!(fabs(g16 - e) <= fabs(e) / 128 + 1e-5 * amax)) bad++;
    }
    double rel = sqrt(num / den);
    if (bad || !(rel < 1e-5)) {
      printf("FAIL %s: %zu bad elements, rel err %.3g\n", label, bad, rel);
      g_fail++;
    } else {
      g_pass++;
      printf("ok   %s: rel err vs cuBLAS %.2e\n", label, rel);
    }
    free(r);
    free(o);
    free(o16);
  }
out:
  cudaFree(ref_d);
  cudaFree(our_d);
  cudaFree(our16_d);
  mat16_free(&A);
  mat16_free(&B);
}

static void expect_status(coda_context ctx, coda_status want, coda_status got, const char *what) {
  if (got != want || !coda_last_error(ctx)[0]) {
    printf("FAIL error case %s: status %d (want %d), message '%s'\n", what, (int)got, (int)want,
           coda_last_error(ctx));
    g_fail++;
  } else {
    g_pass++;
    printf("ok   error case %s: %s\n", what, coda_last_error(ctx));
  }
}

static void error_cases(coda_context ctx) {
  mat16 A = mat16_random(CODA_BF16, 64, 40, 0), B = mat16_random(CODA_BF16, 64, 40, 0);
  mat16 Bh = mat16_random(CODA_F16, 64, 40, 0);
  void *d;
  CUDA_CHECK(cudaMalloc(&d, 64 * 64 * 4));
  coda_tensor D = {d, CODA_F32, 64, 64, 64};
  coda_tensor a = mat16_view(&A), b = mat16_view(&B), bh = mat16_view(&Bh);
  /* A viewed with a pitch of 41 elements: rows are not 16-byte aligned. */
  coda_tensor a_odd = a;
  a_odd.rows = 60;
  a_odd.ld = 41;
  D.rows = 60;
  expect_status(ctx, CODA_ERR_LAYOUT, coda_cuda_gemm(ctx, CODA_N, &a_odd, CODA_T, &b, &D, 1.0f, 0),
                "A pitch of 41 elements");
  D.rows = 64;
  coda_tensor a_off = a; /* base pointer off by one element */
  a_off.data = (char *)a.data + 2;
  a_off.cols = 32;
  coda_tensor b32 = b; b32.cols = 32;
  expect_status(ctx, CODA_ERR_LAYOUT, coda_cuda_gemm(ctx, CODA_N, &a_off, CODA_T, &b32, &D, 1.0f, 0),
                "A pointer not 16-byte aligned");
  expect_status(ctx, CODA_ERR_DTYPE, coda_cuda_gemm(ctx, CODA_N, &a, CODA_T, &bh, &D, 1.0f, 0),
                "bf16 x f16");
  coda_tensor Dbad = D; Dbad.cols = 63;
  expect_status(ctx, CODA_ERR_SHAPE, coda_cuda_gemm(ctx, CODA_N, &a, CODA_T, &b, &Dbad, 1.0f, 0),
                "D shape");
  cudaFree(d);
  mat16_free(&A);
  mat16_free(&B);
  mat16_free(&Bh);
}

/* After tuning, the context holds a choice for the key; a fresh context
 * with tuning on finds the same choice in the cache file (same measured
 * time: read, not timed again). */
static void tune_cache_check(coda_context ctx) {
  const int64_t M = 256, N = 512, K = 2048;
  mat16 A = mat16_random(CODA_BF16, M, K, 0), B = mat16_random(CODA_BF16, N, K, 0);
  void *d;
  CUDA_CHECK(cudaMalloc(&d, (size_t)M * N * 2));
  coda_tensor Av = mat16_view(&A), Bv = mat16_view(&B), D = {d, CODA_BF16, M, N, N};
  int c1 = -1, s1 = 0, c2 = -1, s2 = 0;
  double us1 = 0, us2 = 0;
  coda_context ctx2 = NULL;
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  if (coda_cuda_gemm(ctx, CODA_N, &Av, CODA_T, &Bv, &D, 1.0f, 0) != CODA_OK ||
      !coda_cuda_gemm_tuned_choice(ctx, CODA_N, &Av, CODA_T, &Bv, &D, 0, &c1, &s1, &us1) ||
      c1 < 0 || c1 >= coda_cuda_gemm_num_configs() || s1 < 1 || !(us1 > 0)) {
    printf("FAIL tuner: no choice held for %lldx%lldx%lld NT (%s)\n", (long long)M, (long long)N,
           (long long)K, coda_last_error(ctx));
    g_fail++;
    goto out;
  }
  printf("ok   tuner: %lldx%lldx%lld NT bf16 -> [%d] %s, %d split(s), %.2f us; cache '%s'\n",
         (long long)M, (long long)N, (long long)K, c1, coda_cuda_gemm_config_name(c1), s1, us1,
         coda_cuda_gemm_tune_path(ctx));
  g_pass++;
  if (!coda_cuda_gemm_tune_path(ctx)[0]) goto out; /* no cache directory: memory only */
  if (coda_context_create(&o, &ctx2) != CODA_OK || coda_cuda_gemm_set_autotune(ctx2, 1) != CODA_OK ||
      coda_cuda_gemm(ctx2, CODA_N, &Av, CODA_T, &Bv, &D, 1.0f, 0) != CODA_OK ||
      !coda_cuda_gemm_tuned_choice(ctx2, CODA_N, &Av, CODA_T, &Bv, &D, 0, &c2, &s2, &us2) ||
      c2 != c1 || s2 != s1 || fabs(us2 - us1) > 0.0051) {
    printf("FAIL tuner: a fresh context got [%d] %d split(s) %.3f us from the cache, want [%d] %d "
           "%.3f\n", c2, s2, us2, c1, s1, us1);
    g_fail++;
  } else {
    printf("ok   tuner: a fresh context read the same choice from the cache file\n");
    g_pass++;
  }
out:
  if (ctx2) coda_context_destroy(ctx2);
  cudaFree(d);
  mat16_free(&A);
  mat16_free(&B);
}

int main(int argc, char **argv) {
  /* line-buffered: a run stopped by a time budget still shows how far it got */
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int sanitize = argc > 1 && strcmp(argv[1], "--sanitize") == 0;
  const int tiny = sanitize || (argc > 1 && strcmp(argv[1], "--tiny") == 0);
  int small_only = tiny || (argc > 1 && strcmp(argv[1], "--small") == 0);
  if (!coda_cuda_available()) {
    printf("test_gemm_gpu: no sm_90 GPU, nothing run\n");
    return 0;
  }
  g_rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull | 1;
  if (getenv("CODA_TEST_SEED")) g_rng = strtoull(getenv("CODA_TEST_SEED"), NULL, 10) | 1;
  printf("seed %llu\n", (unsigned long long)g_rng);
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  coda_context ctx;
  if (coda_context_create(&o, &ctx) != CODA_OK) {
    printf("FAIL: cannot create a CUDA context\n");
    return 1;
  }
  static const int64_t shapes[][3] = {
      {1, 1, 1},     {1, 8, 16},     {7, 13, 5},    {64, 64, 64},   {128, 256, 64},
      {127, 255, 63}, {129, 257, 65}, {200, 300, 1000}, {333, 520, 77}, {64, 1000, 200},
      {1000, 64, 130}, {256, 512, 2048}, {300, 700, 0}};
  const int nshapes = small_only ? 5 : (int)(sizeof shapes / sizeof shapes[0]);
  /* --tiny: 7x13x5 (inside one tile) and 129x257x65 (one row, column and
   * k past full tiles) */
  static const int tiny_shapes[] = {2, 6};
  const int nrun = tiny ? 2 : nshapes;
#define SHAPE(s) shapes[tiny ? tiny_shapes[s] : (s)]
  static const coda_dtype ins[2] = {CODA_BF16, CODA_F16};
  const int ncfg = coda_cuda_gemm_num_configs();
  for (int c = 0; c < ncfg; ++c)
    printf("tile configuration [%d] %s%s\n", c, coda_cuda_gemm_config_name(c),
           config_selected(c) ? "" : " (skipped: $CODA_TEST_GEMM_CONFIG)");
  int cfg_ran = 0, cfg_split_ran = 0;
  for (g_config = 0; g_config < ncfg; ++g_config) {
    if (!config_selected(g_config)) continue;
    cfg_ran++;
    if (sanitize) { /* 129x257x65 in every layout and type, 7x13x5 once */
      for (int l = 0; l < 4; ++l)
        for (int d = 0; d < 2; ++d)
          small_case(ctx, shapes[6][0], shapes[6][1], shapes[6][2], (coda_transpose)(l >> 1),
                     (coda_transpose)(l & 1), ins[d]);
      small_case(ctx, shapes[2][0], shapes[2][1], shapes[2][2], CODA_N, CODA_N, CODA_BF16);
      continue;
    }
    for (int s = 0; s < nrun; ++s)
      for (int l = 0; l < 4; ++l)
        for (int d = 0; d < 2; ++d)
          small_case(ctx, SHAPE(s)[0], SHAPE(s)[1], SHAPE(s)[2], (coda_transpose)(l >> 1),
                     (coda_transpose)(l & 1), ins[d]);
  }
  /* Forced split-K (3 splits: the last one ragged or short) on both tilings. */
  for (g_config = 0; g_config < ncfg; ++g_config) {
    if (!config_selected(g_config)) continue;
    cfg_split_ran++;
    g_splits = 3;
    if (sanitize) { /* NN and TT on 129x257x65 */
      for (int l = 0; l < 4; l += 3)
        small_case(ctx, shapes[6][0], shapes[6][1], shapes[6][2], (coda_transpose)(l >> 1),
                   (coda_transpose)(l & 1), CODA_BF16);
    } else {
      for (int s = 0; s < nrun; ++s)
        for (int l = 0; l < 4; ++l)
          small_case(ctx, SHAPE(s)[0], SHAPE(s)[1], SHAPE(s)[2], (coda_transpose)(l >> 1),
                     (coda_transpose)(l & 1), CODA_BF16);
    }
    g_splits = 0;
  }
#undef SHAPE
  accumulate_f32_cases(ctx, tiny ? 2 : small_only ? 1 : 0);
  if (!small_only) accumulate_f32_timing(ctx);
  printf("coverage: %d/%d tile configurations x 4 layouts x {bf16, f16} x {bf16, f16, f32, "
         "accumulate} outputs, split-K on %d/%d, accumulate-f32 %d TMA reduce-add and %d "
         "register-path runs\n", cfg_ran, ncfg, cfg_split_ran, ncfg, g_acc_tma, g_acc_reg);
  if (tiny) {
    coda_context_destroy(ctx);
    printf("test_gemm_gpu %s: %d passed, %d failed\n", sanitize ? "--sanitize" : "--tiny", g_pass,
           g_fail);
    return g_fail ? 1 : 0;
  }
  /* The automatic choice through the autotuner: every candidate is timed
   * (accumulating calls on a scratch copy of D) and the result must be the
   * same GEMM. The error cases below then run with tuning on as well. */
  g_config = -1;
  if (coda_cuda_gemm_set_autotune(ctx, 1) != CODA_OK) {
    printf("FAIL: cannot turn tuning on\n");
    g_fail++;
  }
  static const int64_t tshapes[][3] = {{129, 257, 65}, {200, 300, 1000}, {256, 512, 2048}};
  for (int s = 0; s < (small_only ? 1 : 3); ++s)
    for (int l = 0; l < 4; ++l)
      small_case(ctx, tshapes[s][0], tshapes[s][1], tshapes[s][2], (coda_transpose)(l >> 1),
                 (coda_transpose)(l & 1), CODA_BF16);
  tune_cache_check(ctx);
  printf("small shapes vs double reference: %d passed, %d failed\n", g_pass, g_fail);
  error_cases(ctx);
  if (!small_only) {
    cublasHandle_t hb;
    if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS) {
      printf("FAIL: cublasCreate\n");
      return 1;
    }
    /* The fifth shape has few tiles and a long K: split-K by default. The
     * last has an odd number of row tiles (17) and column tiles (9 or 5),
     * and more of them than SMs for 128-wide tiles: cluster pairs with an
     * idle second tile, persistent CTAs taking several units. */
    static const int64_t big[][3] = {{1024, 1024, 1024}, {2048, 3072, 1000}, {4096, 4096, 4096},
                                     {3000, 2000, 515},   {512, 1000, 16000}, {2100, 1100, 300}};
    for (g_config = 0; g_config < ncfg; ++g_config)
      for (int s = 0; s < 6 && config_selected(g_config); ++s)
        for (int l = 0; l < 4; ++l)
          large_case(ctx, hb, big[s][0], big[s][1], big[s][2], (coda_transpose)(l >> 1),
                     (coda_transpose)(l & 1), s == 1 ? CODA_F16 : CODA_BF16);
    /* Tuned (split-K candidates included on 512x1000x16000; cluster
     * candidates on 2048x3072x1000). */
    g_config = -1;
    for (int s = 1; s < 5; s += 3)
      for (int l = 0; l < 4; ++l)
        large_case(ctx, hb, big[s][0], big[s][1], big[s][2], (coda_transpose)(l >> 1),
                   (coda_transpose)(l & 1), s == 1 ? CODA_F16 : CODA_BF16);
    cublasDestroy(hb);
  }
  coda_context_destroy(ctx);
  printf("test_gemm_gpu: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
