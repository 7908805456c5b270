#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coda.h"
#include "base/internal.h"
#include "backends/cuda/epi_codegen.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(void) {
  coda_context ctx; coda_context_create(NULL, &ctx);
  const char *names[] = {"llama_swiglu_bwd", "llama_norm_bwd", "llama_qkv_rope", "llama_residual", "gpt2_ln_bwd"};
  for (int i = 0; i < 5; i++) {
    coda_program p; if (coda_program_builtin(ctx, names[i], &p)) { printf("no %s\n", names[i]); continue; }
    double t0 = now(); size_t len = 0;
    for (int k = 0; k < 1000; k++) { char *s = coda_epi_functor_source(ctx, p); len = strlen(s); uint64_t h = coda_fnv1a64(s, len, 0); (void)h; free(s); }
    printf("%-20s functor %6zu bytes: %.1f us per call\n", names[i], len, (now() - t0) * 1e3);
    coda_program_destroy(p);
  }
  coda_context_destroy(ctx);
  return 0;
}
