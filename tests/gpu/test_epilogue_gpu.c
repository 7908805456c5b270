/* GPU test of the epilogue compiler (needs an sm_90 GPU).
 *
 * For every built-in program and a set of primitive programs, in bf16 and
 * fp16 operands and two ragged shapes: fresh random inputs (never zero),
 * outputs poisoned first (accumulated outputs start from random values),
 * then every output and partial of the CUDA run is compared with the CPU
 * backend run on the same inputs and tiling:
 *     max|gpu - ref| <= 2 max|cpu - ref| + 1e-6
 * (+ 2^-10 max|ref| for a `math fast` program)
 * where ref is the CPU backend in exact mode (fp64) on the same inputs,
 * with every output retyped to f64 (an x2 output becomes two f64 outputs)
 * and f64 partials, so ref is unrounded. A second GPU run must give
 * identical bits. Prints one line per program and tensor and a summary.
 *
 *   test_epilogue_gpu                 the test
 *   test_epilogue_gpu --precompile    compile every kernel the test and the
 *                                     benchmark need into the cache (no GPU)
 *   test_epilogue_gpu --bench         fused GEMM + program (both schedules)
 *                                     vs plain GEMM on the Llama-like shapes
 *                                     (Llama-1B-like), median of 20
 *   test_epilogue_gpu --host-selftest the harness with the CPU backend in
 *                                     place of the GPU (no GPU needed)
 *   test_epilogue_gpu --only a,b,...  the test on the named programs only
 *   test_epilogue_gpu --layouts       the test in all four operand layouts
 *                                     (A and B each stored either way, row
 *                                     pitches padded to 8 values with NaN)
 *                                     and on a shape with K odd; with
 *                                     CODA_ARCH=sm80, the sm80 mainloop's
 *                                     test (tests/gpu/run_all.sh, stage sm80),
 *                                     with a map, a copy and the attention
 *                                     forward on that path
 *   test_epilogue_gpu --part K/N      the test on programs K, K + N, K + 2N,
 *                                     ... only (0 <= K < N): the N parts
 *                                     together are every program, for the
 *                                     slow compute-sanitizer tools
 * Ends with a "coverage:" line: the programs that ran of all there are. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "coda.h"
#include "api/api.h" /* coda_tensor_copy */
#include "backends/cuda/backend.h"
#include "backends/cuda/epi_codegen.h"
#include "lang/ir.h"
#include "epi_test_programs.h"
#include "name_list.h"
#include "gpu/cuda_check.h"
#include "test_util.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kPrims[][2] = {
    /* the plain GEMM as a program: the floor of a fused kernel */
    {"prim_store", "output y : bf16\nstore y = acc\n"},
    /* 20 dependent FMAs per element on top of prim_store: the in-register
     * work the pingpong schedule should hide under the other warpgroup's MMA */
    {"prim_fma20",
     "output y : bf16\n"
     "a0 = acc * 1.0\n"
     "a1 = fma(a0, 0.999, 0.001)\n"
     "a2 = fma(a1, 0.999, 0.001)\n"
     "a3 = fma(a2, 0.999, 0.001)\n"
     "a4 = fma(a3, 0.999, 0.001)\n"
     "a5 = fma(a4, 0.999, 0.001)\n"
     "a6 = fma(a5, 0.999, 0.001)\n"
     "a7 = fma(a6, 0.999, 0.001)\n"
     "a8 = fma(a7, 0.999, 0.001)\n"
     "a9 = fma(a8, 0.999, 0.001)\n"
     "a10 = fma(a9, 0.999, 0.001)\n"
     "a11 = fma(a10, 0.999, 0.001)\n"
     "a12 = fma(a11, 0.999, 0.001)\n"
     "a13 = fma(a12, 0.999, 0.001)\n"
     "a14 = fma(a13, 0.999, 0.001)\n"
     "a15 = fma(a14, 0.999, 0.001)\n"
     "a16 = fma(a15, 0.999, 0.001)\n"
     "a17 = fma(a16, 0.999, 0.001)\n"
     "a18 = fma(a17, 0.999, 0.001)\n"
     "a19 = fma(a18, 0.999, 0.001)\n"
     "a20 = fma(a19, 0.999, 0.001)\n"
     "store y = a20\n"},
    {"prim_elem_ops",
     "input t : tile f16\n"
     "input r : row f32\n"
     "input c : col bf16\n"
     "input s : scalar f32\n"
     "input ci : col i32\n"
     "output o1 : f32\n"
     "output o2 : f16 accumulate\n"
     "output o3 : bf16\n"
     "a = acc * s + t / (abs(c) + 1)\n"
     "b = fma(a, r, -a) - exp(-abs(a)) + log(abs(a) + 1) + sqrt(abs(a)) + rsqrt(abs(a) + 1)\n"
     "d = sigmoid(b) + silu(a) + gelu(b) + dgelu(a) + dsilu(b) + tanh(a)\n"
     "e = min(a, b) + max(a, d) + select(t < c, a, b) + (t <= c) + (t > r) + (c >= s) + (t == c) + (c != t)\n"
     "f = swiglu(a, b) + geglu(b, a) + ci * 0.001 + row * 0.001 + col * 0.001\n"
     "store o1 = e + f\n"
     "store o2 = d\n"
     "store o3 = -f\n"},
    {"prim_pair_ops", EPI_TEST_PAIR_OPS},
    {"prim_elem_reduce_x2", EPI_TEST_ELEM_REDUCE_X2},
    /* accumulating f32 outputs are staged and leave by TMA reduce-add (by
     * read-add-write vectors where the view is not TMA-aligned: the second
     * shape's odd N); with every tile access staged the pingpong schedule
     * runs (checked below) */
    {"prim_acc_f32", EPI_TEST_ACC_F32},
    /* next to a 16-bit accumulated output (direct: cooperative schedule) */
    {"prim_acc_f32_pair", EPI_TEST_ACC_F32_PAIR},
    /* rowsum inputs (partials summed per row) and hoisted row math */
    {"prim_rowsum_hoist", EPI_TEST_ROWSUM_HOIST},
    {"prim_rowsum_pair", EPI_TEST_ROWSUM_PAIR},
    /* rowmax and rowlse inputs (partials combined per row) */
    {"prim_row_maxlse", EPI_TEST_ROW_MAXLSE},
    /* erf, relu, pow, round_bf16, round_f16 */
    {"prim_round2_ops", EPI_TEST_ROUND2_OPS},
    /* half-split pairs (N of the shapes rounded down to a multiple of S),
     * colmax and rowmax per segment */
    {"prim_split64", EPI_TEST_SPLIT64},
    {"prim_split16", EPI_TEST_SPLIT16},
    {"prim_maxima", EPI_TEST_MAXIMA},
    {"prim_pair_segmax", EPI_TEST_PAIR_SEGMAX},
    /* math fast: the bound below widens by 2^-10 max|ref| */
    {"prim_fast_ops", EPI_TEST_FAST_OPS},
    {"prim_fast_pair", EPI_TEST_FAST_PAIR},
    /* index built-ins: seg, segpos, idiv, imod */
    {"prim_index_elem", EPI_TEST_INDEX_ELEM},
    {"prim_index_split", EPI_TEST_INDEX_SPLIT},
};
#define NPRIMS ((int)(sizeof kPrims / sizeof kPrims[0]))

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) { return xorshift64_unit01(&rng_state); } /* [0, 1) */
/* never zero: magnitude in [0.1, 1), random sign unless positive */
static double nonzero(int positive) {
  double m = 0.1 + 0.9 * urand();
  return positive || urand() < 0.5 ? m : -m;
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float f) { /* round to nearest even, finite inputs of modest size */
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}
static float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
  if (e == 0) {
    float f = (float)m * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  if (e == 31) u = sign | 0x7f800000u | (m << 13);
  else u = sign | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double get(coda_dtype t, const void *p, size_t i) {
  switch (t) {
  case CODA_BF16: return bf2f(((const uint16_t *)p)[i]);
  case CODA_F16: return h2f(((const uint16_t *)p)[i]);
  case CODA_F32: return ((const float *)p)[i];
  case CODA_F64: return ((const double *)p)[i];
  default: return ((const int32_t *)p)[i];
  }
}
static void set(coda_dtype t, void *p, size_t i, double v) {
  switch (t) {
  case CODA_BF16: ((uint16_t *)p)[i] = f2bf((float)v); break;
  case CODA_F16: ((uint16_t *)p)[i] = f2h((float)v); break;
  case CODA_F32: ((float *)p)[i] = (float)v; break;
  case CODA_F64: ((double *)p)[i] = v; break;
  default: ((int32_t *)p)[i] = (int32_t)v; break;
  }
}

static int failures = 0, checks = 0;

/* Device memory, or host memory in --host-selftest mode (the harness run
 * with the CPU backend in place of the GPU: checks the harness itself). */
static int host_mode = 0;
static void dev_alloc(void **p, size_t n) {
  if (host_mode) {
    *p = malloc(n);
    if (!*p) exit(2);
  } else {
    CUDA_CHECK(cudaMalloc(p, n));
  }
}
static void dev_free(void *p) {
  if (host_mode) free(p);
  else cudaFree(p);
}
static void dev_copy(void *dst, const void *src, size_t n, int to_dev) {
  if (host_mode) memcpy(dst, src, n);
  else CUDA_CHECK(cudaMemcpy(dst, src, n, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
}

/* ------------------------------------------------------------ one run */

typedef struct targ {
  char name[CODA_NAME_MAX];
  coda_arg_kind kind; /* input kinds, OUTPUT, PARTIAL */
  coda_dtype dtype;   /* host/device dtype */
  int x2, accumulate;
  int64_t rows, cols;
  size_t n, es;
  void *init;          /* inputs and accumulated outputs: initial values */
  void *cpu, *gpu, *gpu2;
  double *ref;         /* exact run (x2: even lane) */
  double *ref_odd;     /* exact run, odd lane of an x2 output */
  void *dev;
} targ;

/* Builds the exact-mode variant: outputs f64 (x2 split in two), partials
 * f64. Returns NULL if parsing fails. */
static coda_program exact_variant(coda_context c64, coda_program p, int *odd_index) {
  coda_program q = NULL;
  if (coda_program_parse(c64, coda_program_text(p), &q) != CODA_OK) {
    fprintf(stderr, "exact variant: %s\n", coda_last_error(c64));
    return NULL;
  }
  struct coda_program_s *x = q;
  int n0 = x->noutputs;
  for (int o = 0; o < n0; o++) {
    odd_index[o] = -1;
    if (x->outputs[o].width == CODA_WIDTH_X2) {
      ir_output *no = &x->outputs[x->noutputs];
      *no = x->outputs[o];
      snprintf(no->name, sizeof no->name, "%.20s_odd_", x->outputs[o].name);
      no->width = CODA_WIDTH_FULL;
      no->reg_even = x->outputs[o].reg_odd;
      no->reg_odd = -1;
      no->dtype = CODA_F64;
      odd_index[o] = x->noutputs++;
      x->outputs[o].width = CODA_WIDTH_FULL;
      x->outputs[o].reg_odd = -1;
    }
    x->outputs[o].dtype = CODA_F64;
  }
  ir_signature_build(x); /* the arguments changed after validation */
  return q;
}

static void fill_input(targ *a, int64_t N, const char *prog) {
  (void)prog;
  for (size_t i = 0; i < a->n; i++) {
    double v;
    if (a->dtype == CODA_I32) /* indices / positions: mostly in [0, N), some out of range */
      v = urand() < 0.1 ? -100 : floor(urand() * (double)(N + N / 16));
    else
      v = nonzero(a->kind == CODA_ARG_ROW || a->kind == CODA_ARG_SCALAR || a->kind == CODA_ARG_ROWSUM);
    /* LayerNorm partials (the *_folded programs compute var = sum(psq) invd
     * - (sum(psum) invd)^2 with invd < 1): keep var > 0 as real partials
     * do, |sum psum| <= 1 and sum psq >= 1.1 T */
    if (a->kind == CODA_ARG_ROWSUM && !strcmp(a->name, "psum")) v /= (double)a->cols;
    if (a->kind == CODA_ARG_ROWSUM && !strcmp(a->name, "psq")) v += 1.0;
    set(a->dtype, a->init, i, v);
  }
}

static void fill_poison(targ *a, void *buf) {
  for (size_t i = 0; i < a->n; i++) {
    if (a->es == 2) ((uint16_t *)buf)[i] = 0x7fff; /* NaN in bf16 and f16 */
    else if (a->es == 4) ((uint32_t *)buf)[i] = 0x7fffffffu;
  }
}

/* The operand layout of run_case: A stored M x K (ta = N) or K x M, B
 * stored N x K (tb = T) or K x N. */
static coda_transpose g_ta = CODA_N, g_tb = CODA_T;

/* A random stored operand of rows x cols, its row pitch rounded up to 8
 * values (the GPU's 16-byte rows), the padding NaN: a kernel that reads
 * past a row's end poisons its result. */
static uint16_t *operand(coda_dtype ab, int64_t rows, int64_t cols, double sc, int64_t *ld) {
  *ld = (cols + 7) / 8 * 8;
  const size_t n = (size_t)(rows * *ld);
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    const float v = (float)(sc * nonzero(0));
    if ((int64_t)(i % (size_t)*ld) >= cols) h[i] = ab == CODA_BF16 ? 0x7fc0 : 0x7e00; /* NaN */
    else h[i] = ab == CODA_BF16 ? f2bf(v) : f2h(v);
  }
  return h;
}

/* Runs one program on one shape and operand type; returns 0 if all passed. */
static int run_case(coda_context cpu, coda_context c64, coda_context gpu, const char *pname,
                    coda_program p, coda_dtype ab, int64_t M, int64_t N, int64_t K) {
  const struct coda_program_s *ip = p;
  fprintf(stderr, "running %s %s %lldx%lldx%lld %c%c\n", pname, ab == CODA_BF16 ? "bf16" : "f16",
          (long long)M, (long long)N, (long long)K, g_ta == CODA_N ? 'N' : 'T', g_tb == CODA_N ? 'N' : 'T');
  coda_tiling tl;
  if (coda_preferred_tiling(gpu, p, M, N, K, &tl) != CODA_OK) return 1;
  int odd_index[CODA_MAX_OUTPUTS];
  coda_program px = exact_variant(c64, p, odd_index);
  if (!px) {
    failures++;
    return 1;
  }
  const int na = ip->ninputs + ip->noutputs + ip->nreduces;
  targ *args = calloc((size_t)na, sizeof *args);
  /* A and B in the layout g_ta, g_tb, scaled so acc = O(1) */
  const int64_t ar = g_ta == CODA_N ? M : K, ac = g_ta == CODA_N ? K : M;
  const int64_t br = g_tb == CODA_T ? N : K, bc = g_tb == CODA_T ? K : N;
  int64_t lda, ldb;
  uint16_t *hA = operand(ab, ar, ac, 2.0 / sqrt((double)K), &lda), *hB = operand(ab, br, bc, 1.0, &ldb);
  const size_t nA = (size_t)(ar * lda), nB = (size_t)(br * ldb);
  void *dA, *dB;
  dev_alloc(&dA, nA * 2);
  dev_alloc(&dB, nB * 2);
  dev_copy(dA, hA, nA * 2, 1);
  dev_copy(dB, hB, nB * 2, 1);
  coda_tensor A = {hA, ab, ar, ac, lda}, B = {hB, ab, br, bc, ldb};
  coda_tensor gA = {dA, ab, ar, ac, lda}, gB = {dB, ab, br, bc, ldb};

  for (int i = 0; i < na; i++) {
    targ *a = &args[i];
    coda_arg_info info;
    coda_program_arg(p, i, &info);
    snprintf(a->name, sizeof a->name, "%s", info.name);
    a->kind = info.kind;
    a->dtype = info.kind == CODA_ARG_PARTIAL ? CODA_F32 : info.dtype;
    a->x2 = info.kind == CODA_ARG_OUTPUT && info.width == CODA_WIDTH_X2;
    a->accumulate = info.accumulate;
    coda_program_arg_shape(p, a->name, M, N, tl.tile_m, tl.tile_n, &a->rows, &a->cols);
    if (a->kind == CODA_ARG_ROWSUM || a->kind == CODA_ARG_ROWMAX || a->kind == CODA_ARG_ROWLSE)
      a->cols = (N + tl.tile_n - 1) / tl.tile_n; /* a row reduction's partials */
    a->n = (size_t)(a->rows * a->cols);
    a->es = coda_dtype_size(a->dtype);
    size_t bytes = a->n * a->es + 16;
    a->init = malloc(bytes);
    a->cpu = malloc(bytes);
    a->gpu = malloc(bytes);
    a->gpu2 = malloc(bytes);
    a->ref = malloc(a->n * sizeof(double) + 16);
    a->ref_odd = a->x2 ? malloc(a->n * sizeof(double) + 16) : NULL;
    dev_alloc(&a->dev, bytes);
    if (a->kind != CODA_ARG_OUTPUT && a->kind != CODA_ARG_PARTIAL) fill_input(a, N, pname);
    else if (a->accumulate) {
      for (size_t e = 0; e < a->n; e++) set(a->dtype, a->init, e, nonzero(0));
    }
  }
  coda_args acpu, a64, agpu;
  coda_args_create(cpu, &acpu);
  coda_args_create(c64, &a64);
  coda_args_create(gpu, &agpu);
  /* exact-run tensors: inputs as they are; outputs f64 (x2 split) */
  double **refbuf = calloc((size_t)na, sizeof *refbuf);
  for (int i = 0; i < na; i++) {
    targ *a = &args[i];
    coda_tensor t = {a->init, a->dtype, a->rows, a->cols, a->cols};
    if (a->kind == CODA_ARG_OUTPUT || a->kind == CODA_ARG_PARTIAL) {
      if (a->accumulate) memcpy(a->cpu, a->init, a->n * a->es);
      else fill_poison(a, a->cpu);
      t.data = a->cpu;
    }
    coda_args_set(acpu, a->name, &t);
    coda_tensor td = t;
    td.data = a->dev;
    coda_args_set(agpu, a->name, &td);
    if (a->kind == CODA_ARG_OUTPUT || a->kind == CODA_ARG_PARTIAL) {
      int64_t cols = a->x2 ? a->cols / 2 : a->cols;
      for (size_t e = 0; e < a->n; e++) a->ref[e] = a->accumulate && !a->x2 ? get(a->dtype, a->init, e) : NAN;
      coda_tensor tr = {a->ref, CODA_F64, a->rows, cols, cols};
      coda_args_set(a64, a->name, &tr);
      if (a->x2) {
        /* accumulate on x2: even/odd lanes start from the interleaved values */
        for (int64_t r = 0; r < a->rows; r++)
          for (int64_t c = 0; c < cols; c++) {
            a->ref[r * cols + c] = a->accumulate ? get(a->dtype, a->init, (size_t)(r * a->cols + 2 * c)) : NAN;
            a->ref_odd[r * cols + c] = a->accumulate ? get(a->dtype, a->init, (size_t)(r * a->cols + 2 * c + 1)) : NAN;
          }
        char on[CODA_NAME_MAX];
        snprintf(on, sizeof on, "%.20s_odd_", a->name);
        coda_tensor to = {a->ref_odd, CODA_F64, a->rows, cols, cols};
        coda_args_set(a64, on, &to);
      }
    } else {
      coda_args_set(a64, a->name, &t);
    }
  }
  int bad = 0;
  coda_status s1 = coda_gemm_epilogue(cpu, p, g_ta, &A, g_tb, &B, acpu, tl);
  coda_status s2 = coda_gemm_epilogue(c64, px, g_ta, &A, g_tb, &B, a64, tl);
  if (s1 || s2) {
    fprintf(stderr, "%s: CPU run failed: %s%s\n", pname, coda_last_error(s1 ? cpu : c64), "");
    failures++;
    bad = 1;
    goto out;
  }
  /* two GPU runs */
  for (int run = 0; run < 2; run++) {
    for (int i = 0; i < na; i++) {
      targ *a = &args[i];
      void *src = a->init;
      if ((a->kind == CODA_ARG_OUTPUT || a->kind == CODA_ARG_PARTIAL) && !a->accumulate) {
        src = run ? a->gpu2 : a->gpu; /* poison, overwritten by the result below */
        fill_poison(a, src);
      }
      dev_copy(a->dev, src, a->n * a->es, 1);
    }
    coda_status sg = coda_gemm_epilogue(gpu, p, g_ta, &gA, g_tb, &gB, agpu, tl);
    if (sg) {
      fprintf(stderr, "%s: GPU run failed: %s\n", pname, coda_last_error(gpu));
      failures++;
      bad = 1;
      goto out;
    }
    if (!host_mode) CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < na; i++) {
      targ *a = &args[i];
      if (a->kind != CODA_ARG_OUTPUT && a->kind != CODA_ARG_PARTIAL) continue;
      dev_copy(run ? a->gpu2 : a->gpu, a->dev, a->n * a->es, 0);
    }
  }
  /* compare */
  for (int i = 0; i < na; i++) {
    targ *a = &args[i];
    if (a->kind != CODA_ARG_OUTPUT && a->kind != CODA_ARG_PARTIAL) continue;
    double eg = 0, ec = 0, maxref = 0;
    int nan_bad = 0;
    for (int64_t r = 0; r < a->rows; r++)
      for (int64_t c = 0; c < a->cols; c++) {
        size_t e = (size_t)(r * a->cols + c);
        double ref = a->x2 ? ((c & 1) ? a->ref_odd : a->ref)[r * (a->cols / 2) + c / 2] : a->ref[e];
        double g = get(a->dtype, a->gpu, e), cv = get(a->dtype, a->cpu, e);
        if (isnan(ref)) { /* both must agree on NaN (not expected with these inputs) */
          if (!isnan(g)) nan_bad++;
          continue;
        }
        if (isinf(ref) && g == ref && cv == ref) continue;
        if (isnan(g) || isinf(g)) nan_bad++;
        double dg = fabs(g - ref), dc = fabs(cv - ref);
        if (dg > eg) eg = dg;
        if (dc > ec) ec = dc;
        if (fabs(ref) > maxref) maxref = fabs(ref);
      }
    int same = memcmp(a->gpu, a->gpu2, a->n * a->es) == 0;
    /* math fast: the approximations' error on top (docs/language.md, Math:
     * tanh's 2^-10.9 relative, twice). An fp32 result also keeps the
     * accumulator's own error, which the CPU's does not bound: the tensor
     * cores align each MMA's products to the largest and truncate, so a
     * K-term fp32 sum may reach the worst case K u max|ref| (u = 2^-24)
     * where the CPU's round-to-nearest sum stays near sqrt(K) u. */
    double acc_err = a->dtype == CODA_F32 ? (double)K * 0x1p-24 * maxref : 0;
    double bound = 2 * ec + 1e-6 + acc_err +
                   (coda_program_math(p) == CODA_MATH_FAST ? 0x1p-10 * maxref : 0);
    int ok = !nan_bad && eg <= bound && same;
    checks++;
    if (!ok) {
      failures++;
      bad = 1;
    }
    printf("  %-22s %-4s %c%c %5lldx%-5lld %-8s %-10s %-4s max|ref| %9.3g  gpu err %9.3g  cpu err %9.3g  %s%s%s\n",
           pname, ab == CODA_BF16 ? "bf16" : "f16", g_ta == CODA_N ? 'N' : 'T', g_tb == CODA_N ? 'N' : 'T',
           (long long)M, (long long)N, a->name,
           a->kind == CODA_ARG_PARTIAL ? "partial" : "output", coda_dtype_name(a->dtype), maxref,
           eg, ec, ok ? "ok" : "FAIL", same ? "" : " (runs differ)",
           nan_bad ? " (unwritten or non-finite)" : "");
  }
out:
  coda_args_destroy(acpu);
  coda_args_destroy(a64);
  coda_args_destroy(agpu);
  for (int i = 0; i < na; i++) {
    targ *a = &args[i];
    free(a->init);
    free(a->cpu);
    free(a->gpu);
    free(a->gpu2);
    free(a->ref);
    free(a->ref_odd);
    dev_free(a->dev);
  }
  free(refbuf);
  free(args);
  free(hA);
  free(hB);
  dev_free(dA);
  dev_free(dB);
  coda_program_destroy(px);
  return bad;
}

/* ------------------------------------------------------------ sm80 path */

/* The plain GEMM on the sm80 path (a store program in the fused kernel):
 * D = 0.75 A B^T + D in bf16 at a ragged shape with K odd, against the
 * CPU backend and fp64 as run_case compares; returns 1 on a failure. */
static int sm80_plain_gemm(coda_context cpu, coda_context gpu) {
  const int64_t M = 97, N = 150, K = 77, ld = 80;
  uint16_t *hA = malloc((size_t)(M * ld) * 2), *hB = malloc((size_t)(N * ld) * 2);
  uint16_t *d0 = malloc((size_t)(M * N) * 2), *dc = malloc((size_t)(M * N) * 2), *dg = malloc((size_t)(M * N) * 2);
  for (int64_t i = 0; i < M * ld; i++) hA[i] = f2bf((float)(nonzero(0) / sqrt((double)K)));
  for (int64_t i = 0; i < N * ld; i++) hB[i] = f2bf((float)nonzero(0));
  for (int64_t i = 0; i < M * N; i++) d0[i] = dc[i] = f2bf((float)nonzero(0));
  void *gA, *gB, *gD;
  dev_alloc(&gA, (size_t)(M * ld) * 2);
  dev_alloc(&gB, (size_t)(N * ld) * 2);
  dev_alloc(&gD, (size_t)(M * N) * 2);
  dev_copy(gA, hA, (size_t)(M * ld) * 2, 1);
  dev_copy(gB, hB, (size_t)(N * ld) * 2, 1);
  dev_copy(gD, d0, (size_t)(M * N) * 2, 1);
  coda_tensor A = {hA, CODA_BF16, M, K, ld}, B = {hB, CODA_BF16, N, K, ld}, D = {dc, CODA_BF16, M, N, N};
  coda_tensor tA = {gA, CODA_BF16, M, K, ld}, tB = {gB, CODA_BF16, N, K, ld}, tD = {gD, CODA_BF16, M, N, N};
  const coda_status sc = coda_gemm(cpu, CODA_N, &A, CODA_T, &B, &D, 0.75f, 1);
  const coda_status sg = coda_gemm(gpu, CODA_N, &tA, CODA_T, &tB, &tD, 0.75f, 1);
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(dg, gD, (size_t)(M * N) * 2, 0);
  double eg = 0, ec = 0;
  for (int64_t r = 0; r < M; r++)
    for (int64_t c = 0; c < N; c++) {
      double ref = bf2f(d0[r * N + c]), acc = 0;
      for (int64_t k = 0; k < K; k++) acc += (double)bf2f(hA[r * ld + k]) * bf2f(hB[c * ld + k]);
      ref += 0.75 * acc;
      const double g = bf2f(dg[r * N + c]), cv = bf2f(dc[r * N + c]);
      const double dgi = isnan(g) ? INFINITY : fabs(g - ref), dci = fabs(cv - ref);
      if (dgi > eg) eg = dgi;
      if (dci > ec) ec = dci;
    }
  const int ok = sc == CODA_OK && sg == CODA_OK && eg <= 2 * ec + 1e-6;
  checks++;
  failures += !ok;
  printf("  sm80 path, plain GEMM 97x150x77 bf16 accumulate: gpu err %9.3g  cpu err %9.3g  %s%s%s\n", eg, ec,
         ok ? "ok" : "FAIL", sg ? ": " : "", sg ? coda_last_error(gpu) : "");
  dev_free(gA);
  dev_free(gB);
  dev_free(gD);
  free(hA);
  free(hB);
  free(d0);
  free(dc);
  free(dg);
  return !ok;
}

/* What the sm80 path runs besides the GEMMs, against the CPU backend: a
 * map (coda_map, its kernel over the sm80 fragment), a converting tensor
 * copy (finish.cu) and the attention forward (the mma.sync family; the
 * thorough comparison is test_attention_gpu's); returns 1 on a failure. */
static int sm80_rest(coda_context cpu, coda_context gpu) {
  int bad = 0;
  /* the map: y = x * x + 1 (f32) and the row sums of x, 70 x 200 */
  const int64_t M = 70, N = 200;
  uint16_t *hx = malloc((size_t)(M * N) * 2);
  float *yc = calloc((size_t)(M * N), 4), *yg = calloc((size_t)(M * N), 4);
  for (int64_t i = 0; i < M * N; i++) hx[i] = f2bf((float)nonzero(0));
  void *gx, *gy;
  dev_alloc(&gx, (size_t)(M * N) * 2);
  dev_alloc(&gy, (size_t)(M * N) * 4);
  dev_copy(gx, hx, (size_t)(M * N) * 2, 1);
  coda_program pc = NULL, pg = NULL;
  const char *text = "input x : tile bf16\noutput y : f32\nstore y = x * x + 1.0\n";
  coda_status sc = coda_program_parse(cpu, text, &pc), sg = coda_program_parse(gpu, text, &pg);
  coda_args ac = NULL, ag = NULL;
  coda_args_create(cpu, &ac);
  coda_args_create(gpu, &ag);
  coda_tensor x = {hx, CODA_BF16, M, N, N}, y = {yc, CODA_F32, M, N, N};
  coda_tensor tx = {gx, CODA_BF16, M, N, N}, ty = {gy, CODA_F32, M, N, N};
  coda_args_set(ac, "x", &x);
  coda_args_set(ac, "y", &y);
  coda_args_set(ag, "x", &tx);
  coda_args_set(ag, "y", &ty);
  if (sc == CODA_OK) sc = coda_map(cpu, pc, M, N, ac, (coda_tiling){64, 128});
  if (sg == CODA_OK) sg = coda_map(gpu, pg, M, N, ag, (coda_tiling){64, 128});
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(yg, gy, (size_t)(M * N) * 4, 0);
  double em = 0;
  for (int64_t i = 0; i < M * N; i++) {
    const double d = fabs((double)yg[i] - yc[i]);
    if (!(d <= em)) em = isnan(d) ? INFINITY : d;
  }
  int ok = sc == CODA_OK && sg == CODA_OK && em <= 1e-5;
  checks++;
  failures += !ok;
  bad |= !ok;
  printf("  sm80 path, map 70x200 (y = x*x + 1): max |gpu - cpu| %9.3g  %s%s%s\n", em,
         ok ? "ok" : "FAIL", sg ? ": " : "", sg ? coda_last_error(gpu) : "");
  /* the copy: the bf16 x converted to f32 on the device */
  sg = coda_tensor_copy(gpu, &ty, &tx);
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(yg, gy, (size_t)(M * N) * 4, 0);
  ok = sg == CODA_OK;
  for (int64_t i = 0; ok && i < M * N; i++) ok = yg[i] == bf2f(hx[i]);
  checks++;
  failures += !ok;
  bad |= !ok;
  printf("  sm80 path, tensor copy bf16 -> f32: %s%s%s\n", ok ? "ok" : "FAIL", sg ? ": " : "",
         sg ? coda_last_error(gpu) : "");
  coda_args_destroy(ac);
  coda_args_destroy(ag);
  coda_program_destroy(pc);
  coda_program_destroy(pg);
  dev_free(gx);
  dev_free(gy);
  free(hx);
  free(yc);
  free(yg);
  /* the attention forward: batch 2 of 50 tokens, 4 query heads over 2 KV
   * heads of 64 */
  const int B = 2, T = 50, Hq = 4, Hkv = 2, hd = 64;
  const int64_t BT = (int64_t)B * T, cq = (int64_t)(Hq + 2 * Hkv) * hd, co = (int64_t)Hq * hd;
  uint16_t *hq = malloc((size_t)(BT * cq) * 2), *oc = malloc((size_t)(BT * co) * 2),
           *og = malloc((size_t)(BT * co) * 2);
  float *lc = malloc((size_t)(BT * Hq) * 4), *lg = malloc((size_t)(BT * Hq) * 4);
  for (int64_t i = 0; i < BT * cq; i++) hq[i] = f2bf((float)nonzero(0));
  void *gq, *go, *gl;
  dev_alloc(&gq, (size_t)(BT * cq) * 2);
  dev_alloc(&go, (size_t)(BT * co) * 2);
  dev_alloc(&gl, (size_t)(BT * Hq) * 4);
  dev_copy(gq, hq, (size_t)(BT * cq) * 2, 1);
  coda_tensor q = {hq, CODA_BF16, BT, cq, cq}, o = {oc, CODA_BF16, BT, co, co},
              l = {lc, CODA_F32, BT, Hq, Hq};
  coda_tensor tq = {gq, CODA_BF16, BT, cq, cq}, to = {go, CODA_BF16, BT, co, co},
              tl = {gl, CODA_F32, BT, Hq, Hq};
  sc = coda_attention_forward(cpu, &q, B, T, Hq, Hkv, hd, &o, &l);
  sg = coda_attention_forward(gpu, &tq, B, T, Hq, Hkv, hd, &to, &tl);
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(og, go, (size_t)(BT * co) * 2, 0);
  dev_copy(lg, gl, (size_t)(BT * Hq) * 4, 0);
  double eo = 0, el = 0;
  for (int64_t i = 0; i < BT * co; i++) {
    const double d = fabs((double)bf2f(og[i]) - bf2f(oc[i]));
    if (!(d <= eo)) eo = isnan(d) ? INFINITY : d;
  }
  for (int64_t i = 0; i < BT * Hq; i++) {
    const double d = fabs((double)lg[i] - lc[i]);
    if (!(d <= el)) el = isnan(d) ? INFINITY : d;
  }
  /* bf16 outputs of averages of values in (-1, 1): a few units of 2^-8 */
  ok = sc == CODA_OK && sg == CODA_OK && eo <= 2e-2 && el <= 1e-3;
  checks++;
  failures += !ok;
  bad |= !ok;
  printf("  sm80 path, attention forward 2x50, 4/2 heads of 64: max |gpu - cpu| out %9.3g  "
         "lse %9.3g  %s%s%s\n", eo, el, ok ? "ok" : "FAIL", sg ? ": " : "",
         sg ? coda_last_error(gpu) : "");
  dev_free(gq);
  dev_free(go);
  dev_free(gl);
  free(hq);
  free(oc);
  free(og);
  free(lc);
  free(lg);
  return bad;
}

/* ------------------------------------------------------------ programs */

static int num_programs(void) {
  int n = 0;
  while (coda_builtin_program_name(n)) n++;
  return n + NPRIMS;
}
static const char *program_name(int i) {
  int nb = 0;
  while (coda_builtin_program_name(nb)) nb++;
  return i < nb ? coda_builtin_program_name(i) : kPrims[i - nb][0];
}
static coda_program load_program(coda_context ctx, int i) {
  int nb = 0;
  while (coda_builtin_program_name(nb)) nb++;
  coda_program p = NULL;
  coda_status s = i < nb ? coda_program_builtin(ctx, coda_builtin_program_name(i), &p)
                         : coda_program_parse(ctx, kPrims[i - nb][1], &p);
  if (s != CODA_OK) fprintf(stderr, "%s: %s\n", program_name(i), coda_last_error(ctx));
  return p;
}

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
static int is_bench_program(const char *name) {
  for (size_t i = 0; i < sizeof kBench / sizeof kBench[0]; i++)
    if (!strcmp(kBench[i].prog, name)) return 1;
  return 0;
}

/* With CODA_ARCH=sm80: the sm80 kernels of --layouts (all four layouts)
 * for the H100 the sm80 stage runs on (compute capability 9.0). */
static int precompile(void) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  const char *arch = getenv("CODA_ARCH");
  const int sm80 = arch && !strcmp(arch, "sm80");
  int n = 0, bad = 0;
  for (int i = 0; i < num_programs(); i++) {
    coda_program p = load_program(ctx, i);
    if (!p) {
      bad++;
      continue;
    }
    for (int f16 = 0; f16 < (sm80 ? 8 : 2); f16++) {
      coda_epi_config cfg = coda_epi_default_config();
      cfg.f16 = f16 & 1;
      if (sm80) {
        cfg.arch = 80;
        cfg.cc = 90;
        cfg.trans_a = (f16 >> 2) & 1;
        cfg.trans_b = !((f16 >> 1) & 1);
      }
      coda_epi_binary bin;
      if (coda_epi_build(ctx, p, &cfg, 0, &bin) != CODA_OK) {
        fprintf(stderr, "%s: %s\n", program_name(i), coda_last_error(ctx));
        bad++;
      } else {
        n++;
        printf("%s %s: %s, %s, spill %d\n", program_name(i), f16 & 1 ? "f16" : "bf16",
               bin.from_cache ? "cached" : "compiled", cfg.ping ? "pingpong" : "cooperative", bin.spill);
      }
      coda_epi_binary_free(&bin);
      /* the benchmark runs both schedules */
      if (!f16 && !sm80 && is_bench_program(program_name(i))) {
        const char *prev = getenv("CODA_EPI_SCHEDULE");
        char keep[32] = "";
        if (prev) snprintf(keep, sizeof keep, "%s", prev);
        setenv("CODA_EPI_SCHEDULE", cfg.ping ? "cooperative" : "pingpong", 1);
        cfg = coda_epi_default_config();
        if (coda_epi_build(ctx, p, &cfg, 0, &bin) == CODA_OK) n++;
        else bad++;
        coda_epi_binary_free(&bin);
        if (prev) setenv("CODA_EPI_SCHEDULE", keep, 1);
        else unsetenv("CODA_EPI_SCHEDULE");
      }
    }
    coda_program_destroy(p);
  }
  printf("precompiled %d kernels, %d failures\n", n, bad);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Fused GEMM + program vs the plain GEMM storing bf16 D, same shape. */
static int bench(coda_context gpu) {
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

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps the lines printed before it */
  if (argc > 1 && !strcmp(argv[1], "--precompile")) return precompile();
  /* --layouts [--host-selftest | --only LIST | --part K/N]: every operand
   * layout, and a shape with K odd */
  const int layouts = argc > 1 && !strcmp(argv[1], "--layouts");
  if (layouts) {
    argc--;
    argv++;
  }
  host_mode = argc > 1 && !strcmp(argv[1], "--host-selftest");
  if (!host_mode && !coda_cuda_available()) {
    printf("test_epilogue_gpu: no usable sm_90 GPU\n");
    return 77;
  }
  coda_context_options o = coda_context_default_options();
  coda_context cpu, c64, gpu;
  coda_context_create(&o, &cpu);
  o.precision = CODA_PRECISION_F64;
  coda_context_create(&o, &c64);
  o = coda_context_default_options();
  if (!host_mode) o.backend = CODA_BACKEND_CUDA;
  if (coda_context_create(&o, &gpu) != CODA_OK) {
    printf("cannot create a CUDA context\n");
    return 2;
  }
  if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(gpu);
  const char *sm80_env = getenv("CODA_ARCH");
  const int sm80 = sm80_env && !strcmp(sm80_env, "sm80");
  const char *only = argc > 2 && !strcmp(argv[1], "--only") ? argv[2] : NULL;
  if (argc > 1 && !strcmp(argv[1], "--only") && !only) {
    printf("--only needs a comma-separated list of program names\n");
    return 2;
  }
  int nlisted = 0, part = 0, nparts = 1;
  if (argc > 1 && !strcmp(argv[1], "--part")) {
    char tail = 0;
    if (argc < 3 || sscanf(argv[2], "%d/%d%c", &part, &nparts, &tail) != 2 || nparts < 1 ||
        part < 0 || part >= nparts) {
      printf("--part needs K/N with 0 <= K < N (e.g. --part 0/3)\n");
      return 2;
    }
  }

  /* ragged shapes: M not a multiple of 64/128, N not of 128 */
  static const int64_t shapes[2][3] = {{333, 264, 200}, {130, 390, 72}};
  int nprog = 0, nbad = 0;
  for (int i = 0; i < num_programs(); i++) {
    if (only && !name_in_list(only, program_name(i))) continue;
    if (i % nparts != part) continue;
    nlisted++;
    coda_program p = load_program(cpu, i);
    if (!p) {
      failures++;
      continue;
    }
    nprog++;
    int bad = 0;
    /* the second shape has an odd N in elem mode (unaligned rows) */
    const int pair = ((const struct coda_program_s *)p)->pair_mode;
    const int split = coda_program_pair_split(p); /* N a multiple of the segment */
    for (int lay = 0; lay < (layouts ? 4 : 1); lay++) {
      /* (N, T) first: the layout of the plain test */
      g_ta = lay & 2 ? CODA_T : CODA_N;
      g_tb = lay & 1 ? CODA_N : CODA_T;
      for (int ab = 0; ab < 2; ab++) {
        int64_t n = shapes[ab][1] - (ab == 1 && !pair);
        if (split > 0) n -= n % split;
        bad |= run_case(cpu, c64, gpu, program_name(i), p, ab ? CODA_F16 : CODA_BF16, shapes[ab][0], n,
                        shapes[ab][2]);
      }
      if (layouts) { /* K odd: partial 16-byte vectors at every row's end */
        int64_t n = 150 - (split > 0 ? 150 % split : 0);
        bad |= run_case(cpu, c64, gpu, program_name(i), p, lay & 1 ? CODA_F16 : CODA_BF16, 97, n, 77);
      }
    }
    g_ta = CODA_N;
    g_tb = CODA_T;
    /* A program that reads a tile input, on more tiles than the GPU has
     * SMs: every CTA then runs two or more tiles, so the staging's load
     * barriers go through several phases and the mainloop's prefetch runs
     * for tiles after the first (the ragged shapes give each CTA one tile).
     * Left out of the sanitizer parts, whose tools are slow on it. */
    int reads_tile = 0;
    for (int k = 0; k < ((const struct coda_program_s *)p)->ninputs; k++)
      reads_tile |= ((const struct coda_program_s *)p)->inputs[k].kind == CODA_ARG_TILE;
    if (reads_tile && nparts == 1) {
      int64_t n = 2176 - (split > 0 ? 2176 % split : 0);
      bad |= run_case(cpu, c64, gpu, program_name(i), p, CODA_BF16, 2200, n, 64);
    }
    /* the schedule the fused kernel ran (A N, B T, bf16); a program whose
     * only accumulated output is f32 must be all staged: pingpong (unless
     * the environment forces a schedule) */
    if (!host_mode) {
      int ping = -1;
      const int lb = coda_cuda_epilogue_local_bytes(gpu, p, 0, 1, 0, &ping);
      printf("  %-22s schedule %s, local memory %d bytes\n", program_name(i),
             ping == 1 ? "pingpong" : ping == 0 ? "cooperative" : "?", lb);
      /* (the sm80 path has one schedule) */
      if (!strcmp(program_name(i), "prim_acc_f32") && !getenv("CODA_EPI_SCHEDULE") && !sm80) {
        checks++;
        if (ping != 1 || lb != 0) {
          failures++;
          bad = 1;
          printf("  prim_acc_f32: want the pingpong schedule without local memory: FAIL\n");
        }
      }
    }
    nbad += bad;
    coda_program_destroy(p);
  }
  if (only) { /* every listed name must be a program: a typo tests nothing */
    int nnames = 1;
    for (const char *q = only; *q; q++) nnames += *q == ',';
    checks++;
    if (nlisted != nnames) {
      failures++;
      printf("  --only %s: %d of the %d names are programs\n", only, nlisted, nnames);
    }
  }
  /* the GPU rejects a tiling it does not compute partials for, naming it */
  if (!host_mode) {
    coda_program p = NULL;
    coda_program_builtin(gpu, "llama_residual", &p);
    void *d[4];
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaMalloc(&d[i], 64 * 64 * 2));
    coda_tensor A = coda_tensor_2d(d[0], CODA_BF16, 64, 64), B = coda_tensor_2d(d[1], CODA_BF16, 64, 64);
    coda_tensor R = coda_tensor_2d(d[2], CODA_BF16, 64, 64), X = coda_tensor_2d(d[3], CODA_BF16, 64, 64);
    coda_args a;
    coda_args_create(gpu, &a);
    coda_args_set(a, "res", &R);
    coda_args_set(a, "x", &X);
    coda_status s = coda_gemm_epilogue(gpu, p, CODA_N, &A, CODA_T, &B, a, (coda_tiling){96, 128});
    checks++;
    if (s != CODA_ERR_NOT_SUPPORTED || !strstr(coda_last_error(gpu), "tiling")) {
      failures++;
      printf("  tiling 96 x 128 was not rejected: %s\n", coda_last_error(gpu));
    } else {
      printf("  tiling 96 x 128 rejected: %s\n", coda_last_error(gpu));
    }
    s = coda_gemm_epilogue(gpu, p, CODA_N, &A, CODA_T, &B, a, (coda_tiling){64, 128});
    checks++;
    if (s != CODA_OK) failures++;
    CUDA_CHECK(cudaDeviceSynchronize());
    if (sm80) {
      sm80_plain_gemm(cpu, gpu);
      sm80_rest(cpu, gpu);
    }
    for (int i = 0; i < 4; i++) cudaFree(d[i]);
    coda_args_destroy(a);
    coda_program_destroy(p);
  }
  printf("coverage: %d/%d programs (part %d/%d) x {bf16, f16}\n", nprog, num_programs(), part,
         nparts);
  printf("epilogue GPU: %d programs x {bf16, f16}, %d tensor checks, %d failed, %d programs with failures\n",
         nprog, checks, failures, nbad);
  coda_context_destroy(cpu);
  coda_context_destroy(c64);
  coda_cuda_context_release(gpu);
  coda_context_destroy(gpu);
  return failures ? 1 : 0;
}
