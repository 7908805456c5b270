/* What the two halves of the block benchmark share: the configurations,
 * the options, their parsing and the plan builder (bench_block.c); the GPU
 * half is bench_block_gpu.c (built with CUDA, it times with CUDA events and
 * cuBLAS), bench_block_none.c stands in without CUDA. */
#ifndef CODA_TOOL_BENCH_BLOCK_COMMON_H
#define CODA_TOOL_BENCH_BLOCK_COMMON_H

#include "coda_nn.h"

#include <stdint.h>

typedef enum { ARCH_LLAMA = 0, ARCH_GPT2 = 1 } arch;

typedef struct bench_cfg {
  const char *name, *alias; /* alias may be NULL */
  arch kind;
  int64_t d, ffn, hq, hkv, batch, seq; /* GPT-2: hkv = hq */
  const char *torch;                   /* the PyTorch script's name of the same block */
} bench_cfg;

extern const bench_cfg kConfigs[];
#define NCFG 6

typedef struct bench_opts {
  int want[NCFG];
  int fused, unfused, floor, tuned;
  int iters, warmup;
  int csv;
  int precompile;
  int steps; /* --steps: per-step times of each plan variant to stderr */
  int fold;  /* --fold: plans built with the fold flag */
  int grad_bf16; /* --grad-bf16: GEMM weight gradients in bf16 */
  int inplace;   /* --inplace: Llama dz written over the saved z */
  int rope_map;  /* --rope-map: Llama RoPE backward as its own map pass */
} bench_opts;

/* Parses the options: 1 run, 0 done (help printed), -1 bad usage. */
int bench_parse_args(int argc, char **argv, bench_opts *o);
coda_status bench_make_plan(coda_context ctx, const bench_cfg *c, const bench_opts *o,
                            coda_plan *p);

#endif
