/* The block benchmark (see bench_block.h and docs/plans.md, "Block
 * benchmark").
 *
 * Per configuration: the block plan on a CUDA context, fused (the plan as
 * built), unfused (coda_plan_set_fused(p, 0): every GEMM + epilogue step
 * as a plain GEMM plus a separate map pass), tuned (coda_plan_tune_fusion:
 * each GEMM step fused or unfused, whichever its timing favoured; the
 * choices and times go to stderr), and the floor (the block's
 * twelve GEMMs through cuBLAS, bf16 in and out with fp32 accumulation,
 * plus our attention forward and backward, each alone). Timing: CUDA
 * events around each call on the default stream, warm-up runs, then the
 * median of the timed runs. Backward times assume the forward's saved
 * buffers (the forward is not re-run). Memory: the library's peak
 * (coda_memory_stats) during one forward + backward after
 * coda_memory_reset_peak, and the growth of the device's used memory
 * (cudaMemGetInfo) over the plan's life, which also holds the stream-
 * ordered pool's reserve and loaded modules. The unfused and tuned plans'
 * x_out and dx are checked against the fused plan's (stderr; a
 * disagreement fails the run). With --fold every plan is built with the
 * fold flag (CODA_LLAMA_FOLD / CODA_GPT2_FOLD: no row finisher launches),
 * so two runs, with and without it, time folded against separate
 * finishers (the CSV's fold column tells the rows apart). With --grad-bf16
 * the four GEMM weights' gradients are bf16 (CODA_LLAMA_GRAD_ACT /
 * CODA_GPT2_GRAD_ACT), as in a bf16 framework block: the peak memory to
 * set next to PyTorch's (CSV column grad_bf16). The Llama plans write dz
 * over the saved z (CODA_LLAMA_INPLACE), as the trainer builds them and as
 * PyTorch's autograd frees what a backward has consumed; --keep-saved
 * builds them without it (the forward's state survives the backward; more
 * peak memory; CSV column inplace 0; GPT-2 plans are the same either way).
 * With --rope-map the Llama plans run the RoPE backward as its own map
 * pass (CODA_LLAMA_ROPE_MAP) instead of fused into the attention
 * backward: the two side by side (CSV column rope_map).
 * The backward-only timing runs an untimed forward before every timed
 * backward, so each backward reads the state of its own forward (in place,
 * an earlier backward has consumed it). */
#include "bench_block.h"
#include "bench_block_common.h"

#include "coda_nn.h"
#include "tool_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* head_dim = d / hq everywhere (Llama-3-8B: 4096 / 32 = 128). */
const bench_cfg kConfigs[] = {
    {"d512", NULL, ARCH_LLAMA, 512, 2048, 8, 8, 16, 1024, "seed-6L-512"},
    {"d768", NULL, ARCH_LLAMA, 768, 3072, 12, 12, 8, 1024, "gpt2s-768"},
    {"d2048", "1b", ARCH_LLAMA, 2048, 8192, 32, 8, 4, 2048, "llama1b-2048"},
    {"d4096", "8b", ARCH_LLAMA, 4096, 14336, 32, 8, 2, 4096, "llama8b-4096"},
    {"gpt2-768", NULL, ARCH_GPT2, 768, 3072, 12, 12, 8, 1024, "gpt2-768"},
    {"gpt2-1600", NULL, ARCH_GPT2, 1600, 6400, 25, 25, 8, 1024, "gpt2-1600"},
};
_Static_assert(sizeof kConfigs / sizeof kConfigs[0] == NCFG, "NCFG counts kConfigs");


/* The numeric options (tool_util.h): ranges and meanings in one table. */
static const coda_tool_num bench_nums[] = {
    {"--iters", 1, 1, 100000, 0, 0, "timed iterations per configuration"},
    {"--warmup", 1, 0, 100000, 0, 0, "untimed iterations before them"},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static void usage(FILE *f, const char *cmd) {
  fprintf(f,
          "usage: %s [CONFIG ...] [--fused] [--unfused] [--tuned] [--floor] [--iters N]\n"
          "       [--warmup N] [--csv | --markdown] [--steps] [--fold] [--grad-bf16]\n"
          "       [--keep-saved] [--rope-map] [--precompile]\n\n"
          "Times one Transformer block on the GPU: forward, backward and forward + backward\n"
          "of the block plan with fusion (--fused), the same plan with fusion off (--unfused:\n"
          "each GEMM + epilogue as a plain GEMM plus a separate pass), the plan with fusion\n"
          "chosen per GEMM step by timing both (--tuned, coda_plan_tune_fusion; choices on\n"
          "stderr; kept in $CODA_CACHE_DIR/fused-tune.txt, CODA_RETUNE=1 times again) and\n"
          "the floor (--floor: the block's GEMMs on cuBLAS plus attention alone); all four\n"
          "by default. Each row also gives the library's peak memory\n"
          "during one forward + backward.\n\n"
          "configurations (default: the Llama ones, d512 d768 d2048 d4096):\n",
          cmd);
  for (int i = 0; i < NCFG; i++) {
    const bench_cfg *c = &kConfigs[i];
    char nm[32];
    snprintf(nm, sizeof nm, "%s%s%s", c->name, c->alias ? ", " : "", c->alias ? c->alias : "");
    fprintf(f, "  %-12s %s block, d %lld, ffn %lld, %lld", nm,
            c->kind == ARCH_LLAMA ? "Llama-3" : "GPT-2", (long long)c->d, (long long)c->ffn,
            (long long)c->hq);
    if (c->hkv != c->hq) fprintf(f, "q/%lldkv", (long long)c->hkv);
    fprintf(f, " heads of %lld, %lldx%lld tokens\n", (long long)(c->d / c->hq),
            (long long)c->batch, (long long)c->seq);
  }
  fprintf(f,
          "  llama, gpt2, all   groups of the above\n\n"
          "  --iters N      timed runs per measurement (median; default 10)\n"
          "  --warmup N     untimed runs before them (default 3)\n"
          "  --csv          comma-separated output instead of a markdown table\n"
          "  --steps        also time every step of each plan variant alone (median over\n"
          "                 --iters runs) and list them on stderr: where the time goes\n"
          "  --fold         build the plans with the fold flag (CODA_LLAMA_FOLD,\n"
          "                 CODA_GPT2_FOLD): the consumer GEMMs compute the row statistics\n"
          "                 from the producers' partials, no row finisher launches; run\n"
          "                 with and without it to compare (CSV column fold)\n"
          "  --grad-bf16    build the plans with the GEMM weights' gradients in bf16\n"
          "                 (CODA_LLAMA_GRAD_ACT, CODA_GPT2_GRAD_ACT) instead of f32, as a\n"
          "                 bf16 framework block keeps them (CSV column grad_bf16)\n"
          "  --keep-saved   build the Llama plans without CODA_LLAMA_INPLACE (by default\n"
          "                 the SwiGLU backward writes dz over the saved z, as the trainer\n"
          "                 runs it: a backward consumes its forward's state); more peak\n"
          "                 memory (CSV column inplace 0; --inplace is the default)\n"
          "  --rope-map     build the Llama plans with CODA_LLAMA_ROPE_MAP: the RoPE backward\n"
          "                 as its own map pass after the attention backward instead of\n"
          "                 fused into its stores, to compare (CSV column rope_map)\n"
          "  --precompile   compile the generated kernels of the selected configurations\n"
          "                 (with and without fusion) into the kernel cache and exit; needs\n"
          "                 no GPU\n\n"
          "Needs a CUDA GPU (sm_90a) except for --precompile.\n");
  coda_tool_num_help(f, bench_nums);
}

/* 1 and *out, or 0 after the refusal (cmd: "coda bench block" or the
 * benchmark's own name, as the other messages say it). */
static int parse_count(const char *cmd, const char *flag, const char *v, int *out) {
  long long x;
  const char *name = !strncmp(cmd, "coda ", 5) ? cmd + 5 : cmd;
  if (coda_tool_num_parse_ll(name, coda_tool_num_find(bench_nums, flag), v, &x)) return 0;
  *out = (int)x;
  return 1;
}

/* 1 ok, 0 run (exit 0 after --help), -1 usage error. */
int bench_parse_args(int argc, char **argv, bench_opts *o) {
  const char *cmd = argv[0];
  memset(o, 0, sizeof *o);
  o->iters = 10;
  o->warmup = 3;
  o->inplace = 1; /* as the trainer builds the Llama plans (--keep-saved: 0) */
  int any_cfg = 0;
  for (int a = 1; a < argc; a++) {
    const char *s = argv[a];
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      usage(stdout, cmd);
      return 0;
    } else if (!strcmp(s, "--fused")) {
      o->fused = 1;
    } else if (!strcmp(s, "--unfused")) {
      o->unfused = 1;
    } else if (!strcmp(s, "--tuned")) {
      o->tuned = 1;
    } else if (!strcmp(s, "--floor")) {
      o->floor = 1;
    } else if (!strcmp(s, "--csv")) {
      o->csv = 1;
    } else if (!strcmp(s, "--markdown")) {
      o->csv = 0;
    } else if (!strcmp(s, "--steps")) {
      o->steps = 1;
    } else if (!strcmp(s, "--precompile")) {
      o->precompile = 1;
    } else if (!strcmp(s, "--fold")) {
      o->fold = 1;
    } else if (!strcmp(s, "--grad-bf16")) {
      o->grad_bf16 = 1;
    } else if (!strcmp(s, "--inplace")) {
      o->inplace = 1;
    } else if (!strcmp(s, "--keep-saved")) {
      o->inplace = 0;
    } else if (!strcmp(s, "--rope-map")) {
      o->rope_map = 1;
    } else if (!strcmp(s, "--iters")) {
      if (!parse_count(cmd, s, a + 1 < argc ? argv[++a] : NULL, &o->iters)) return -1;
    } else if (!strcmp(s, "--warmup")) {
      if (!parse_count(cmd, s, a + 1 < argc ? argv[++a] : NULL, &o->warmup)) return -1;
    } else if (s[0] == '-') {
      fprintf(stderr, "%s: unknown option '%s' (see --help)\n", cmd, s);
      return -1;
    } else {
      int hit = 0;
      for (int i = 0; i < NCFG; i++) {
        const bench_cfg *c = &kConfigs[i];
        if (!strcmp(s, c->name) || (c->alias && !strcmp(s, c->alias)) || !strcmp(s, "all") ||
            (!strcmp(s, "llama") && c->kind == ARCH_LLAMA) ||
            (!strcmp(s, "gpt2") && c->kind == ARCH_GPT2)) {
          o->want[i] = 1;
          hit = 1;
        }
      }
      if (!hit) {
        fprintf(stderr, "%s: unknown configuration '%s' (known:", cmd, s);
        for (int i = 0; i < NCFG; i++) fprintf(stderr, " %s", kConfigs[i].name);
        fprintf(stderr, " 1b 8b llama gpt2 all)\n");
        return -1;
      }
      any_cfg = 1;
    }
  }
  if (!any_cfg)
    for (int i = 0; i < NCFG; i++) o->want[i] = kConfigs[i].kind == ARCH_LLAMA;
  if (!o->fused && !o->unfused && !o->floor && !o->tuned)
    o->fused = o->unfused = o->floor = o->tuned = 1;
  return 1;
}

/* The plan of a configuration on ctx (a CUDA context, or a CPU context
 * with the GPU's tiling for precompiling). */
coda_status bench_make_plan(coda_context ctx, const bench_cfg *c, const bench_opts *o,
                             coda_plan *p) {
  const int fold = o->fold, gact = o->grad_bf16;
  const int64_t M = c->batch * c->seq;
  coda_tiling t;
  coda_status s = coda_preferred_tiling(ctx, NULL, M, c->d, c->d, &t);
  if (s != CODA_OK) return s;
  if (c->kind == ARCH_GPT2) {
    coda_gpt2_config g = coda_gpt2_default_config();
    g.dim = c->d;
    g.n_heads = c->hq;
    g.ffn_dim = c->ffn;
    g.batch = c->batch;
    g.seq = c->seq;
    g.tiling = t;
    g.flags = (fold ? CODA_GPT2_FOLD : 0) | (gact ? CODA_GPT2_GRAD_ACT : 0);
    return coda_gpt2_block_plan(ctx, &g, p);
  }
  coda_llama_config l = coda_llama_default_config();
  l.dim = c->d;
  l.n_heads = c->hq;
  l.n_kv_heads = c->hkv;
  l.head_dim = c->d / c->hq;
  l.ffn_dim = c->ffn;
  l.batch = c->batch;
  l.seq = c->seq;
  l.rope_theta = 500000.0;
  l.tiling = t;
  l.flags = (fold ? CODA_LLAMA_FOLD : 0) | (gact ? CODA_LLAMA_GRAD_ACT : 0) |
            (o->inplace ? CODA_LLAMA_INPLACE : 0) | (o->rope_map ? CODA_LLAMA_ROPE_MAP : 0);
  return coda_llama_block_plan(ctx, &l, p);
}

