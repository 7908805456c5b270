/* Precompiles (no GPU needed) every generated kernel the trainer's plans
 * use for the given shapes into the kernel cache ($CODA_CACHE_DIR), so
 * `coda train --device gpu` compiles nothing on the GPU machine.
 *
 *   train_gpu_precompile [qwen3:HD|gemma3:HD] DIM HEADS KV_HEADS FFN VOCAB BATCH SEQ [...]
 *
 * (groups of seven numbers, each optionally after qwen3:HD: the Qwen3
 * block, CODA_LLAMA_QK_NORM, of head size HD, or gemma3:HD: the Gemma 3
 * block, CODA_LLAMA_GEMMA3, and its head with and without the logit soft
 * cap (the window and score scale are attention values, not kernels); the
 * plans are built on a CPU context with the CUDA backend's tiling, which
 * gives the same programs and operand layouts, as src/model/model_plans.c
 * builds them). */
#include "coda_nn.h"
#include "backends/cuda/epi_codegen.h" /* the CUDA backend's tiling */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int precompile_plan(coda_context ctx, coda_plan p, const char *what, int *n) {
  int bad = 0;
  for (int i = 0; i < coda_plan_num_steps(p); i++) {
    const char *label = coda_plan_step_label(p, i);
    int cached = 0, skipped = 0;
    coda_status s = coda_plan_precompile_step(p, i, 0, &cached, &skipped);
    if (skipped) continue;
    if (s != CODA_OK) {
      printf("%s step %s: %s\n", what, label, coda_last_error(ctx));
      bad++;
    } else {
      (*n)++;
      printf("%s %-28s %s\n", what, label, cached ? "cached" : "compiled");
    }
  }
  return bad;
}

int main(int argc, char **argv) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  int n = 0, bad = 0, groups = 0;
  for (int g = 1; g < argc;) {
    long qhd = 0; /* a Qwen3 or Gemma 3 group: its head size */
    int gemma = 0;
    if (!strncmp(argv[g], "qwen3:", 6)) qhd = strtol(argv[g++] + 6, NULL, 10);
    else if (!strncmp(argv[g], "gemma3:", 7)) gemma = 1, qhd = strtol(argv[g++] + 7, NULL, 10);
    if (g + 6 >= argc) {
      fprintf(stderr, "usage: %s [qwen3:HD|gemma3:HD] DIM HEADS KV_HEADS FFN VOCAB BATCH SEQ [...]\n",
              argv[0]);
      bad++;
      break;
    }
    long v[7];
    for (int k = 0; k < 7; k++) v[k] = strtol(argv[g + k], NULL, 10);
    g += 7;
    groups++;
    if (v[0] <= 0 || v[1] <= 0 || (!qhd && v[0] % v[1] != 0) || qhd < 0) {
      fprintf(stderr, "bad shape group %d\n", groups);
      bad++;
      continue;
    }
    coda_llama_config c = coda_llama_default_config();
    c.dim = v[0];
    c.n_heads = v[1];
    c.n_kv_heads = v[2];
    c.head_dim = qhd ? qhd : v[0] / v[1];
    c.ffn_dim = v[3];
    c.vocab = v[4];
    c.batch = v[5];
    c.seq = v[6];
    c.dtype = CODA_BF16;
    c.flags = gemma ? CODA_LLAMA_GEMMA3 | CODA_LLAMA_INPLACE : qhd ? CODA_LLAMA_QK_NORM : 0u;
    c.tiling.tile_m = CODA_EPI_TILE_M;
    c.tiling.tile_n = CODA_EPI_BN;
    /* Gemma 3: a third plan, the head with the soft cap */
    for (int head = 0; head < 2 + gemma; head++) {
      coda_plan p;
      c.logit_softcap = head == 2 ? 30.0 : 0.0;
      coda_status s = head ? coda_llama_head_plan(ctx, &c, &p) : coda_llama_block_plan(ctx, &c, &p);
      if (s != CODA_OK) {
        printf("%s plan: %s\n", head ? "head" : "block", coda_last_error(ctx));
        bad++;
        continue;
      }
      bad += precompile_plan(ctx, p, head ? "head " : "block", &n);
      coda_plan_destroy(p);
    }
  }
  if (!groups) bad++;
  printf("precompiled %d kernels, %d failures\n", n, bad);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}
