/* coda check: parse and validate an epilogue program, print its IR listing
 * (or its canonical text), or report "FILE:LINE:COL: message". */
#include "coda.h"
#include "tool_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void check_usage(FILE *f) {
  fprintf(f,
          "usage: coda check [--exact] [--text] FILE      (FILE '-' reads standard input)\n"
          "       coda check [--exact] [--text] --builtin NAME\n"
          "       coda check --list\n"
          "Parses and validates an epilogue program; prints its IR listing (or with\n"
          "--text its canonical text) and exits 0, or prints FILE:LINE:COL: message\n"
          "and exits 1. --exact validates for an fp64 (exact mode) context.\n"
          "A program that reads a finished statistic (a finisher's result) or has a\n"
          "total runs as several passes: the listing ends with them, each an ordinary\n"
          "program (what coda run, gradcheck, plans and Python run for the file).\n");
}


/* Turns "line L, column C: msg" into "FILE:L:C: msg". */
static void report(const char *file, const char *err) {
  int line, col, n = 0;
  if (sscanf(err, "line %d, column %d: %n", &line, &col, &n) == 2 && n > 0)
    fprintf(stderr, "%s:%d:%d: %s\n", file, line, col, err + n);
  else
    fprintf(stderr, "%s: %s\n", file, err);
}

int coda_cmd_check(int argc, char **argv) {
  int exact = 0, text = 0;
  const char *builtin = NULL, *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--exact")) exact = 1;
    else if (!strcmp(argv[i], "--text")) text = 1;
    else if (!strcmp(argv[i], "--list")) {
      for (int k = 0; coda_builtin_program_name(k); k++) printf("%s\n", coda_builtin_program_name(k));
      return 0;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      check_usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--builtin") && i + 1 < argc && !builtin && !file) builtin = argv[++i];
    else if ((argv[i][0] != '-' || !strcmp(argv[i], "-")) && !file && !builtin) file = argv[i];
    else {
      check_usage(stderr);
      return 2;
    }
  }
  if (!file && !builtin) {
    check_usage(stderr);
    return 2;
  }
  coda_context_options o = coda_context_default_options();
  o.precision = exact ? CODA_PRECISION_F64 : CODA_PRECISION_F32;
  coda_context ctx;
  if (coda_tool_context(&o, &ctx, "check", "CPU") != CODA_OK) return 1;
  coda_program p = NULL;
  coda_status s;
  const char *label = builtin ? builtin : strcmp(file, "-") ? file : "<stdin>";
  if (builtin) {
    s = coda_program_builtin(ctx, builtin, &p);
  } else {
    const char *why = "";
    char *src = coda_tool_read_text(file, &why);
    if (!src) {
      fprintf(stderr, "%s: %s\n", label, why);
      coda_context_destroy(ctx);
      return 1;
    }
    s = coda_program_parse(ctx, src, &p);
    free(src);
  }
  if (s != CODA_OK) {
    const char *err = coda_last_error(ctx);
    if (builtin) { /* drop the "built-in program 'NAME': " prefix */
      const char *c = strstr(err, "': ");
      if (!strncmp(err, "built-in program '", 18) && c) err = c + 3;
    }
    report(label, err);
    coda_context_destroy(ctx);
    return 1;
  }
  fputs(text ? coda_program_text(p) : coda_program_ir(p), stdout);
  /* a program that reads a finished statistic or has a total: its passes */
  if (coda_program_num_passes(p) > 1) {
    if (text) printf("# ");
    fputs(text ? "passes: see coda check without --text\n" : coda_program_passes_text(p), stdout);
  }
  /* valid, but not with every tiling: say where it will fail (the GPU's
   * tile_n is 128) */
  /* the probe's N: 1024, or the next multiple of a half-split segment */
  const int split = coda_program_pair_split(p);
  const int64_t probe_n = split > 0 ? (1024 + split - 1) / split * split : 1024;
  for (int i = 0; i < coda_program_num_args(p); i++) {
    coda_arg_info a;
    int64_t r, c;
    if (coda_program_arg(p, i, &a) == CODA_OK &&
        coda_program_arg_shape_ctx(ctx, p, a.name, 64, probe_n, 64, 128, &r, &c) == CODA_ERR_SHAPE)
      fprintf(stderr, "%s: note: valid, but it cannot run with the GPU's tiling: %s\n", label,
              coda_last_error(ctx));
  }
  coda_program_destroy(p);
  coda_context_destroy(ctx);
  return 0;
}
