/* bench_gemm --precompile [CC]: compiles the sm80 path's kernels that
 * bench_gemm --sm80 runs into the kernel cache (CODA_CACHE_DIR), on a CPU
 * context (NVRTC only, no GPU), for compute capability CC: the plain GEMM
 * of that path is the fused kernel with a store program (cuda_backend.c,
 * sm80_store_program), here bf16 D, alpha 1, no accumulation, bf16
 * operands in the benchmark's three layouts. C, as the compiler's header
 * (epi_codegen.h) is. */
#include "coda.h"
#include "backends/cuda/epi_codegen.h"
#include "base/arch.h"

#include <stdio.h>

/* The text sm80_store_program parses for (bf16, no accumulation, alpha 1;
 * alpha printed with %.9g): the same program, so the same kernel key. */
static const char kStore[] = "output d : bf16\nstore d = acc * 1\n";

int bench_gemm_sm80_precompile(int cc) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  coda_program p = NULL;
  if (coda_program_parse(ctx, kStore, &p) != CODA_OK) {
    fprintf(stderr, "bench_gemm: %s\n", coda_last_error(ctx));
    coda_context_destroy(ctx);
    return 2;
  }
  /* trans_a, trans_b of the forward (NT), dgrad (NN) and wgrad (TN) shapes */
  static const int layouts[3][2] = {{0, 1}, {0, 0}, {1, 0}};
  int n = 0, bad = 0;
  for (int i = 0; i < 3; i++) {
    const char *name = i == 0 ? "NT" : i == 1 ? "NN" : "TN";
    coda_epi_config cfg = coda_epi_default_config();
    cfg.arch = CODA_PATH_SM80;
    cfg.cc = cc;
    cfg.trans_a = layouts[i][0];
    cfg.trans_b = layouts[i][1];
    coda_epi_binary bin;
    if (coda_epi_build(ctx, p, &cfg, 0, &bin) != CODA_OK) {
      fprintf(stderr, "bench_gemm: sm80 store %s: %s\n", name, coda_last_error(ctx));
      bad++;
      continue;
    }
    n++;
    printf("sm80 store %s for sm_%d: %s, spill %d\n", name, cc,
           bin.from_cache ? "cached" : "compiled", bin.spill);
    coda_epi_binary_free(&bin);
  }
  printf("precompiled %d kernels, %d failures\n", n, bad);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}
