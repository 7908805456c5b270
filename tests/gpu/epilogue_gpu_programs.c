/* The programs of the epilogue GPU test (tests/gpu/test_epilogue_gpu.c): the
 * primitive programs beside the built-in ones, loading either by index,
 * and --precompile, which compiles every kernel the test and the
 * benchmark need into the cache without a GPU. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "epilogue_gpu_util.h"
#include "backends/cuda/epi_codegen.h"
#include "epi_test_programs.h"

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

int num_programs(void) {
  int n = 0;
  while (coda_builtin_program_name(n)) n++;
  return n + NPRIMS;
}
const char *program_name(int i) {
  int nb = 0;
  while (coda_builtin_program_name(nb)) nb++;
  return i < nb ? coda_builtin_program_name(i) : kPrims[i - nb][0];
}
coda_program load_program(coda_context ctx, int i) {
  int nb = 0;
  while (coda_builtin_program_name(nb)) nb++;
  coda_program p = NULL;
  coda_status s = i < nb ? coda_program_builtin(ctx, coda_builtin_program_name(i), &p)
                         : coda_program_parse(ctx, kPrims[i - nb][1], &p);
  if (s != CODA_OK) fprintf(stderr, "%s: %s\n", program_name(i), coda_last_error(ctx));
  return p;
}

/* With CODA_ARCH=sm80: the sm80 kernels of --layouts (all four layouts)
 * for the H100 the sm80 stage runs on (compute capability 9.0). */
int precompile(void) {
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
