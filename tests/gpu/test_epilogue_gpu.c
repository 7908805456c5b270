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
 * Ends with a "coverage:" line: the programs that ran of all there are.
 *
 * The harness is split by concern: this file (one run against the CPU
 * backend and fp64, the command line), tests/gpu/epilogue_gpu_util.h (what
 * the files share), tests/gpu/epilogue_gpu_programs.c (the programs,
 * --precompile), tests/gpu/epilogue_gpu_sm80.c (the sm80 stage) and
 * tests/gpu/epilogue_gpu_bench.c (--bench). */
#include "epilogue_gpu_util.h"
#include "backends/cuda/backend.h"
#include "lang/ir.h"
#include "name_list.h"

uint64_t rng_state = 0x9E3779B97F4A7C15ull;
int failures = 0, checks = 0;
int host_mode = 0;

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
