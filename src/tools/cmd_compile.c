/* coda compile: print the CUDA source the epilogue compiler generates for a
 * program and compile it with NVRTC for sm_90a, or with --arch sm80 for the
 * mma.sync mainloop and sm_80 (--cc: another compute capability; no GPU
 * needed), through the
 * public coda_program_cuda_* and coda_plan_precompile_step; in a library
 * built without CUDA they return CODA_ERR_NOT_SUPPORTED and the command
 * says so. */
#include "coda_nn.h"
#include "tool_util.h"
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const no_cuda = "coda compile: this build of coda has no CUDA backend\n";

static void compile_usage(FILE *f) {
  fprintf(f,
          "usage: coda compile [OPTIONS] FILE          (FILE '-' reads standard input)\n"
          "       coda compile [OPTIONS] --builtin NAME\n"
          "       coda compile --all [--unfused] [--quiet] [--arch sm80|sm90] [--cc N]\n"
          "Prints the CUDA source of the program's GEMM epilogue and compiles it with\n"
          "NVRTC for sm_90a (the kernel is cached in $CODA_CACHE_DIR or ~/.cache/coda).\n"
          "Options:\n"
          "  --arch A     the mainloop: sm90 (default: wgmma + TMA, for sm_90a) or sm80\n"
          "               (mma.sync + cp.async, for sm_80; what CODA_ARCH=sm80 runs)\n"
          "  --cc N       with --arch sm80: compile for compute capability N (80-129)\n"
          "               instead of 8.0, e.g. 90 for an H100/H200 forced to sm80\n"
          "  --full       print the whole translation unit (mainloop included)\n"
          "  --quiet      print no source, only the compilation result\n"
          "  --log        print the compiler log (ptxas register/spill statistics)\n"
          "  --f16        fp16 operands (default bf16)\n"
          "  --ta, --tn   A stored K x M (trans_a = T); B stored K x N (trans_b = N)\n"
          "  --no-cache   compile even if the kernel is cached\n"
          "  --all        compile every kernel of the built-in block plans (Llama-3 block\n"
          "               with and without the chaining and fold flags, also forward only;\n"
          "               its LM head; the GPT-2 block with and without its fold flag;\n"
          "               the Gemma 3 block and its head with and without the soft cap)\n"
          "               into the cache, so that training, the decoder's prefill and\n"
          "               benchmarks never wait on a compile; --unfused adds the kernels\n"
          "               of the plans with fusion off\n");
}

/* Builds plan `kind` (0 Llama-3 block, 1 its LM head, 2 GPT-2 block, 3
 * Gemma 3 block, 4 its head, soft-capped when flags is 1) with the GPU's
 * partial tiling on a CPU context: the same programs and operand layouts
 * as on the GPU, for any shape (kernels do not depend on it; nor on the
 * window or the Gemma 3 score scale, which the attention takes as values). */
static coda_status build_plan(coda_context ctx, int kind, unsigned flags, coda_plan *p) {
  /* the CUDA backend's partial tiling (coda_preferred_tiling) */
  const coda_tiling gpu = {64, 128};
  if (kind == 2) {
    coda_gpt2_config c = coda_gpt2_default_config();
    c.tiling = gpu;
    c.flags = flags;
    return coda_gpt2_block_plan(ctx, &c, p);
  }
  coda_llama_config c = coda_llama_default_config();
  c.tiling = gpu;
  c.flags = flags;
  if (kind >= 3) { /* the trainer's Gemma 3 plans (model_plans_llama.c) */
    c.flags = CODA_LLAMA_GEMMA3 | CODA_LLAMA_INPLACE;
    c.logit_softcap = flags ? 30.0 : 0.0;
    return kind == 4 ? coda_llama_head_plan(ctx, &c, p) : coda_llama_block_plan(ctx, &c, p);
  }
  return kind ? coda_llama_head_plan(ctx, &c, p) : coda_llama_block_plan(ctx, &c, p);
}

/* coda compile --all: every kernel of the built-in plans into the cache. */
static int compile_all(const coda_context_options *o, int unfused, int quiet) {
  coda_context ctx;
  if (coda_tool_context(o, &ctx, "compile", "default") != CODA_OK) return 1;
  char *probe = NULL;
  coda_program none = NULL;
  if (coda_program_builtin(ctx, coda_builtin_program_name(0), &none) == CODA_OK &&
      coda_program_cuda_source(ctx, none, &probe) == CODA_ERR_NOT_SUPPORTED && !probe &&
      strstr(coda_last_error(ctx), "no CUDA backend")) {
    fputs(no_cuda, stderr);
    coda_program_destroy(none);
    coda_context_destroy(ctx);
    return 1;
  }
  free(probe);
  coda_program_destroy(none);
  static const char *const kinds[] = {"llama block", "llama head", "gpt2 block", "gemma3 block",
                                      "gemma3 head"};
  int built = 0, fresh = 0, bad = 0;
  /* the bar counts plans (flag combinations): 16 + 16 + 2 + 1 + 2 */
  coda_tool_bar bar;
  coda_tool_bar_start(&bar, "compiling");
  const double nplans = 37;
  int plan_i = 0;
  for (int kind = 0; kind < 5; kind++) {
    /* chaining and fold flags change the programs: every combination the
     * plan takes (Llama: NORM_IN, NORM_OUT, FOLD, and the block's forward-
     * only form INFER, the decoder's prefill, or the head's KEEP_LOGITS;
     * GPT-2: FOLD; Gemma 3 takes none of them: its head with and without
     * the soft cap) */
    const unsigned nflags = kind == 2 || kind == 4 ? 2u : kind == 3 ? 1u : 16u;
    const unsigned bit8 = kind == 1 ? CODA_LLAMA_KEEP_LOGITS : CODA_LLAMA_INFER;
    for (unsigned f = 0; f < nflags; f++, plan_i++) {
      const unsigned flags = (f & 7u) | (f & 8u ? bit8 : 0u);
      coda_plan p;
      if (build_plan(ctx, kind, flags, &p) != CODA_OK) {
        if (flags == 0) { /* combinations a plan refuses are not kernels it runs */
          coda_tool_bar_end(&bar);
          fprintf(stderr, "coda compile: %s plan: %s\n", kinds[kind], coda_last_error(ctx));
          bad++;
        }
        continue;
      }
      const int nsteps = coda_plan_num_steps(p);
      for (int k = 0; k < nsteps; k++)
        for (int variant = 0; variant <= unfused; variant++) {
          char detail[96];
          snprintf(detail, sizeof detail, "%s, flags %u, %d kernels", kinds[kind], flags, built);
          coda_tool_bar_update(&bar, plan_i + (double)k / nsteps, nplans, detail);
          int cached = 0, skipped = 0;
          coda_status s = coda_plan_precompile_step(p, k, variant, &cached, &skipped);
          if (skipped) continue;
          if (s != CODA_OK) {
            coda_tool_bar_end(&bar);
            fprintf(stderr, "coda compile: %s (flags %u) step %s%s: %s\n", kinds[kind], flags,
                    coda_plan_step_label(p, k), variant ? " (unfused)" : "", coda_last_error(ctx));
            bad++;
            continue;
          }
          built++;
          fresh += !cached;
          if (!quiet) {
            coda_tool_bar_end(&bar); /* the line, then the bar again below it */
            printf("%-11s flags %u  %-36s %-8s %s\n", kinds[kind], flags, coda_plan_step_label(p, k),
                   variant ? "unfused" : "fused", cached ? "cached" : "compiled");
            fflush(stdout);
          }
        }
      coda_plan_destroy(p);
    }
  }
  coda_tool_bar_end(&bar);
  printf("%d kernels ready (%d compiled now, the rest from the cache), %d failures\n", built, fresh,
         bad);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}

/* --arch and --cc: the context's mainloop and the sm80 kernels' target. */
static int set_arch(const char *a, coda_context_options *o) {
  if (strcmp(a, "sm80") != 0 && strcmp(a, "sm90") != 0) {
    fprintf(stderr, "coda compile: --arch is sm80 or sm90, not '%s'\n", a);
    return 2;
  }
  o->arch = strcmp(a, "sm80") ? CODA_ARCH_SM90 : CODA_ARCH_SM80;
  return 0;
}

int coda_cmd_compile(int argc, char **argv) {
  const char *arch = "sm90";
  coda_context_options opts = coda_context_default_options();
  int full = 0, quiet = 0, show_log = 0, f16 = 0, ta = 0, tb = 1, no_cache = 0, all = 0, unfused = 0;
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
    else if (!strcmp(a, "--all")) all = 1;
    else if (!strcmp(a, "--unfused")) unfused = 1;
    else if (!strcmp(a, "--builtin") && i + 1 < argc) builtin = argv[++i];
    else if (!strcmp(a, "--arch") && i + 1 < argc) {
      arch = argv[++i];
      if (set_arch(arch, &opts)) return 2;
    } else if (!strcmp(a, "--cc") && i + 1 < argc) {
      char *end;
      const long cc = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || cc < 1 || cc > 999) {
        fprintf(stderr, "coda compile: --cc is a compute capability as a number (80, 86, 89, "
                "90, 120), not '%s'\n", argv[i]);
        return 2;
      }
      opts.compile_cc = (int)cc;
    }
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
  if (all) {
    if (file || builtin || full || show_log || f16 || ta || !tb || no_cache) {
      fprintf(stderr, "coda compile: --all takes only --unfused, --quiet, --arch and --cc\n");
      return 2;
    }
    return compile_all(&opts, unfused, quiet);
  }
  if (unfused) {
    fprintf(stderr, "coda compile: --unfused goes with --all\n");
    return 2;
  }
  if (!file == !builtin) {
    compile_usage(stderr);
    return 2;
  }
  coda_context ctx;
  if (coda_tool_context(&opts, &ctx, "compile", "default") != CODA_OK) return 1;
  coda_tiling tl;
  coda_preferred_tiling(ctx, NULL, 1, 1, 1, &tl);
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
  int rc = 1;
  char *unit = NULL, *log = NULL;
  coda_cuda_kernel_info info;
  if (!quiet && !full) {
    char *shown = NULL;
    s = coda_program_cuda_source(ctx, p, &shown);
    if (s != CODA_OK) {
      if (strstr(coda_last_error(ctx), "no CUDA backend")) fputs(no_cuda, stderr);
      else fprintf(stderr, "%s: %s\n", label, coda_last_error(ctx));
      goto out;
    }
    fputs(shown, stdout);
    free(shown);
  }
  s = coda_program_cuda_compile(ctx, p, f16 ? CODA_F16 : CODA_BF16, ta ? CODA_T : CODA_N,
                                tb ? CODA_T : CODA_N, no_cache, &info, full ? &unit : NULL,
                                show_log ? &log : NULL);
  if (s != CODA_OK) {
    if (s == CODA_ERR_NOT_SUPPORTED && strstr(coda_last_error(ctx), "no CUDA backend"))
      fputs(no_cuda, stderr);
    else fprintf(stderr, "%s: %s\n", label, coda_last_error(ctx));
    goto out;
  }
  if (full && unit) fputs(unit, stdout);
  if (show_log && log) fputs(log, stdout);
  const int sm80 = !strcmp(arch, "sm80");
  char target[40] = "sm_90a";
  if (sm80)
    snprintf(target, sizeof target, "sm_%d (sm80 mainloop)", opts.compile_cc ? opts.compile_cc : 80);
  printf("// %s: %s for %s, %s schedule, cubin %zu bytes, spill stores %d, kernel %s, "
         "tiling %d x %d\n",
         label, info.from_cache ? "cached" : "compiled", target,
         sm80 ? "one" : info.pingpong ? "pingpong" : "cooperative",
         info.cubin_bytes, info.spill_stores, info.kernel, tl.tile_m, tl.tile_n);
  rc = 0;
out:
  free(unit);
  free(log);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
  return rc;
}
