/* The sm80 mainloop (gemm_sm80.cuh) compiles with every epilogue program:
 * NVRTC builds the GEMM + epilogue kernel of each built-in program and of
 * each example under programs/examples/ (the epilogue passes of multi-pass
 * ones) for sm_80, as CODA_ARCH=sm80 selects it, with no register spills.
 * Every program is compiled once, in one of the eight operand layouts and
 * types (rotating, so each occurs); two programs, one with staged tile
 * inputs and outputs and one with column reductions, in all eight. The
 * translation units hold no sm_90-only instruction (wgmma, TMA, mbarriers,
 * bulk copies, setmaxnreg, clusters) and none of the sm_90 seam. No GPU
 * is needed; without NVRTC or without the CUDA backend the test is skipped
 * (exit 77). The map kernels (coda_map) of three map programs are built
 * for sm_80 as well, and one kernel for compute capability 9.0
 * (compile_cc 90: a Hopper forced to the path). About 75 seconds on one
 * core (docs/backends.md). */
#include "coda.h"
#include "api/api.h" /* coda_precompile_map */
#include "check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compiled, refused, skip_all, maps_built;

/* One kernel: layout/type combination c (bit 0 f16, bit 1 B stored K x N,
 * bit 2 A stored K x M). NOT_SUPPORTED (a program the GPU refuses on every
 * path) is counted, not failed. */
static void compile_one(coda_context ctx, const char *name, coda_program p, int c) {
  coda_cuda_kernel_info info;
  memset(&info, 0, sizeof info);
  char *unit = NULL;
  const coda_status s = coda_program_cuda_compile(ctx, p, c & 1 ? CODA_F16 : CODA_BF16,
                                                  c & 4 ? CODA_T : CODA_N, c & 2 ? CODA_N : CODA_T,
                                                  1, &info, &unit, NULL);
  /* (instructions and names, not the words, which comments may hold) */
  static const char *const sm90_only[] = {"wgmma.", "cp.async.bulk", "cp.reduce.async.bulk",
                                          "mbarrier.", "setmaxnreg.", "fence.proxy.async",
                                          "barrier.cluster", "coda_sm90::", "prefetch.tensormap"};
  for (size_t i = 0; unit && i < sizeof sm90_only / sizeof sm90_only[0]; i++)
    CHECK_MSG(strstr(unit, sm90_only[i]) == NULL, "%s: the sm80 unit holds '%s'", name, sm90_only[i]);
  free(unit);
  const char *e = coda_last_error(ctx);
  if (s != CODA_OK && (strstr(e, "no CUDA backend") || strstr(e, "cannot load NVRTC"))) {
    skip_all = 1;
    return;
  }
  if (s == CODA_ERR_NOT_SUPPORTED) {
    printf("  %-26s refused on the GPU: %s\n", name, e);
    refused++;
    return;
  }
  CHECK_MSG(s == CODA_OK, "%s: %s", name, e);
  if (s != CODA_OK) return;
  compiled++;
  printf("  %-26s %s %c%c cubin %7zu bytes, spill stores %d\n", name, c & 1 ? "f16 " : "bf16",
         c & 4 ? 'T' : 'N', c & 2 ? 'N' : 'T', info.cubin_bytes, info.spill_stores);
  CHECK_MSG(info.spill_stores == 0, "%s: %d bytes of spill stores", name, info.spill_stores);
  CHECK_MSG(strstr(info.kernel, "coda_sm80") != NULL, "%s: kernel %s is not the sm80 one", name, info.kernel);
}

/* A program, or the epilogue passes of a multi-pass one. */
static void compile_program(coda_context ctx, const char *name, coda_program p, int c) {
  const int np = coda_program_num_passes(p);
  if (np <= 1) {
    compile_one(ctx, name, p, c);
    return;
  }
  for (int i = 0; i < np && !skip_all; i++) {
    coda_pass_info pi;
    CHECK_STATUS(ctx, coda_program_pass(ctx, p, i, &pi), CODA_OK);
    if (pi.kind != CODA_PASS_EPILOGUE) continue;
    char label[96];
    snprintf(label, sizeof label, "%s/pass%d", name, i);
    compile_one(ctx, label, pi.program, c);
  }
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = malloc((size_t)n + 1);
  if (t && fread(t, 1, (size_t)n, f) == (size_t)n) t[n] = '\0';
  else {
    free(t);
    t = NULL;
  }
  fclose(f);
  return t;
}

static int examples(coda_context ctx, int c) {
  DIR *d = opendir(CODA_PROGRAMS_DIR "/examples");
  CHECK(d != NULL);
  if (!d) return c;
  struct dirent *e;
  while ((e = readdir(d)) && !skip_all) {
    const size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".coda") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/%s", CODA_PROGRAMS_DIR, e->d_name);
    char *text = read_file(path);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    coda_program p = NULL;
    if (text) CHECK_STATUS(ctx, coda_program_parse(ctx, text, &p), CODA_OK);
    free(text);
    if (p) compile_program(ctx, e->d_name, p, c++ % 8);
    coda_program_destroy(p);
  }
  closedir(d);
  return c;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  coda_context ctx;
  coda_context_options o = coda_context_default_options();
  o.arch = CODA_ARCH_SM80; /* as CODA_ARCH=sm80 */
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  int c = 0;
  for (int i = 0; coda_builtin_program_name(i) && !skip_all; i++) {
    const char *name = coda_builtin_program_name(i);
    coda_program p = NULL;
    CHECK_STATUS(ctx, coda_program_builtin(ctx, name, &p), CODA_OK);
    /* all eight combinations for a program with staged tile inputs and
     * outputs and one with column reductions; one each for the rest */
    const int all = !strcmp(name, "llama_residual_norm") || !strcmp(name, "gpt2_colsum");
    for (int k = 0; k < (all ? 8 : 1) && p; k++) compile_program(ctx, name, p, all ? k : c++ % 8);
    coda_program_destroy(p);
  }
  if (!skip_all) examples(ctx, c);
  /* the map kernels (coda_map) of the map programs, over the sm80
   * fragment: NVRTC builds them for sm_80, which has no sm_90 instruction */
  static const char *const maps[] = {"llama_rmsnorm", "llama_ce_bwd_map", "gpt2_ln_stats"};
  for (size_t i = 0; i < sizeof maps / sizeof maps[0] && !skip_all; i++) {
    coda_program p = NULL;
    if (coda_program_builtin(ctx, maps[i], &p) != CODA_OK) {
      coda_clear_error(ctx);
      continue; /* (a program renamed or removed) */
    }
    int from_cache = 0;
    const coda_status s = coda_precompile_map(ctx, p, &from_cache);
    CHECK_MSG(s == CODA_OK, "map %s: %s", maps[i], coda_last_error(ctx));
    if (s == CODA_OK) printf("  %-26s map kernel for sm_80 %s\n", maps[i], from_cache ? "(cached)" : "compiled");
    maps_built += s == CODA_OK;
    coda_program_destroy(p);
  }
  coda_context_destroy(ctx);
  /* the same path for compute capability 9.0 (what an H100 forced to it
   * loads), compiled ahead on this machine */
  o.compile_cc = 90;
  if (!skip_all && coda_context_create(&o, &ctx) == CODA_OK) {
    coda_program p = NULL;
    CHECK_STATUS(ctx, coda_program_builtin(ctx, "llama_swiglu", &p), CODA_OK);
    const int before = compiled;
    if (p) compile_one(ctx, "llama_swiglu (sm_90)", p, 0);
    CHECK_MSG(compiled == before + 1, "llama_swiglu for compute capability 9.0: %s",
              coda_last_error(ctx));
    coda_program_destroy(p);
    coda_context_destroy(ctx);
  }
  if (skip_all) {
    printf("test_sm80_compile: skipped (no CUDA backend or no NVRTC)\n");
    return 77;
  }
  printf("sm80 kernels: %d compiled, %d programs the GPU refuses, %d map kernels\n", compiled,
         refused, maps_built);
  CHECK(compiled > 40);
  CHECK(maps_built >= 2);
  return CHECK_DONE();
}
