/* coda compile: print the CUDA source the epilogue compiler generates for a
 * program and compile it with NVRTC for sm_90a (no GPU needed). The
 * compiler's entry points are referenced weakly: in a library built without
 * CUDA they are absent and the command says so. */
#include "coda.h"
#include "tool_util.h"
#include "cuda/epi_codegen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma weak coda_epi_full_source
#pragma weak coda_epi_functor_source
#pragma weak coda_epi_compile
#pragma weak coda_epi_default_config
#pragma weak coda_epi_build
#pragma weak coda_epi_binary_free

static void compile_usage(FILE *f) {
  fprintf(f,
          "usage: coda compile [OPTIONS] FILE          (FILE '-' reads standard input)\n"
          "       coda compile [OPTIONS] --builtin NAME\n"
          "Prints the CUDA source of the program's GEMM epilogue and compiles it with\n"
          "NVRTC for sm_90a (the kernel is cached in $CODA_CACHE_DIR or ~/.cache/coda).\n"
          "Options:\n"
          "  --full       print the whole translation unit (mainloop included)\n"
          "  --quiet      print no source, only the compilation result\n"
          "  --log        print the compiler log (ptxas register/spill statistics)\n"
          "  --f16        fp16 operands (default bf16)\n"
          "  --ta, --tn   A stored K x M (trans_a = T); B stored K x N (trans_b = N)\n"
          "  --no-cache   compile even if the kernel is cached\n");
}


int coda_cmd_compile(int argc, char **argv) {
  int full = 0, quiet = 0, show_log = 0, f16 = 0, ta = 0, tb = 1, no_cache = 0;
  const char *file = NULL, *builtin = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--full")) full = 1;
    else if (!strcmp(a, "--quiet")) quiet = 1;
    else if (!strcmp(a, "--log")) show_log = 1;
    else if (!strcmp(a, "--f16")) f16 = 1;
    else if (!strcmp(a, "--ta")) ta = 1;
    else if (!strcmp(a, "--tn")) tb = 0;
    else if (!strcmp(a, "--no-cache")) no_cache = 1;
    else if (!strcmp(a, "--builtin") && i + 1 < argc) builtin = argv[++i];
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      compile_usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "coda compile: unknown option '%s'\n", a);
      compile_usage(stderr);
      return 2;
    } else if (!file) file = a;
    else {
      compile_usage(stderr);
      return 2;
    }
  }
  if (!file == !builtin) {
    compile_usage(stderr);
    return 2;
  }
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) {
    fprintf(stderr, "coda compile: cannot create a context\n");
    return 1;
  }
  coda_tiling tl;
  coda_preferred_tiling(ctx, NULL, 1, 1, 1, &tl);
  if (!coda_epi_full_source || !coda_epi_compile || !coda_epi_default_config || !coda_epi_build) {
    fprintf(stderr, "coda compile: this build of coda has no CUDA backend\n");
    coda_context_destroy(ctx);
    return 1;
  }
  coda_program p = NULL;
  coda_status s;
  const char *label = builtin ? builtin : file;
  if (builtin) {
    s = coda_program_builtin(ctx, builtin, &p);
  } else {
    const char *why = NULL;
    char *text = coda_tool_read_text(file, &why);
    if (!text) {
      fprintf(stderr, "%s: %s\n", file, why ? why : "cannot read the file");
      coda_context_destroy(ctx);
      return 1;
    }
    s = coda_program_parse(ctx, text, &p);
    free(text);
  }
  if (s != CODA_OK) {
    fprintf(stderr, "%s: %s\n", label, coda_last_error(ctx));
    coda_context_destroy(ctx);
    return 1;
  }
  coda_epi_config cfg = coda_epi_default_config();
  cfg.f16 = f16;
  cfg.trans_a = ta;
  cfg.trans_b = tb;
  int rc = 1;
  char *expr = NULL, *src = NULL, *log = NULL, *low = NULL;
  void *cubin = NULL;
  size_t n = 0;
  coda_epi_binary bin;
  memset(&bin, 0, sizeof bin);
  if (!quiet && !full) {
    char *shown = coda_epi_functor_source(ctx, p);
    if (!shown) {
      fprintf(stderr, "%s: the GPU cannot run this program: %s\n", label, coda_last_error(ctx));
      goto out;
    }
    fputs(shown, stdout);
    free(shown);
  }
  s = coda_epi_build(ctx, p, &cfg, no_cache, &bin);
  if (s != CODA_OK) {
    fprintf(stderr, "%s: %s\n", label, coda_last_error(ctx));
    goto out;
  }
  if (full || show_log) src = coda_epi_full_source(ctx, p, &cfg, &expr);
  if (full && src) fputs(src, stdout);
  if (show_log && src &&
      coda_epi_compile(ctx, src, expr, 1, &cubin, &n, &low, &log, NULL, NULL) == CODA_OK && log)
    fputs(log, stdout);
  printf("// %s: %s for sm_90a, %s schedule, cubin %zu bytes, spill stores %d, kernel %s, "
         "tiling %d x %d\n",
         label, bin.from_cache ? "cached" : "compiled", cfg.ping ? "pingpong" : "cooperative",
         bin.size, bin.spill, bin.lowered, tl.tile_m, tl.tile_n);
  rc = 0;
out:
  coda_epi_binary_free(&bin);
  free(expr);
  free(src);
  free(low);
  free(log);
  free(cubin);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
  return rc;
}
