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
  double t0 = now();
  for (int k = 0; k < 1000; k++) { coda_epi_config c = coda_epi_default_config(); (void)c; }
  printf("coda_epi_default_config: %.2f us\n", (now() - t0) * 1e3);
  for (int i = 0; i < 5; i++) {
    coda_program p; coda_program_builtin(ctx, names[i], &p);
    t0 = now();
    for (int k = 0; k < 1000; k++) coda_epi_supported(ctx, p);
    double a = (now() - t0) * 1e3; t0 = now();
    for (int k = 0; k < 1000; k++) { coda_epi_config c = coda_epi_default_config(); coda_epi_config_for(p, &c); }
    double b = (now() - t0) * 1e3; t0 = now();
    int slots[64]; for (int k = 0; k < 1000; k++) coda_epi_input_tma_slots(p, slots);
    double c = (now() - t0) * 1e3; t0 = now();
    for (int k = 0; k < 1000; k++) { const char *t = coda_program_text(p); const char *r = coda_program_ir(p); volatile uint64_t h = coda_fnv1a64(t, strlen(t), coda_fnv1a64(r, strlen(r), 0)); (void)h; }
    double d = (now() - t0) * 1e3;
    printf("%-20s supported %.2f us, config_for %.2f us, tma_slots %.2f us, text+ir hash %.2f us (text %zu, ir %zu bytes)\n", names[i], a, b, c, d, strlen(coda_program_text(p)), strlen(coda_program_ir(p)));
    coda_program_destroy(p);
  }
  coda_context_destroy(ctx);
  return 0;
}
