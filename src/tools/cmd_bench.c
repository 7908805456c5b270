/* coda bench: benchmarks a user can run on their own GPU. `coda bench
 * block` is the block benchmark of bench/block (src/tools/bench_block.c). */
#include "bench_block.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f,
          "usage: coda bench WHAT [OPTIONS]\n\n"
          "  block   one Transformer block on the GPU: fused, unfused and its floor,\n"
          "          with peak memory (coda bench block --help)\n");
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "block")) {
    char name[] = "coda bench block";
    argv[1] = name; /* messages name the whole command */
    return coda_bench_block_main(argc - 1, argv + 1);
  }
  fprintf(stderr, "coda bench: unknown benchmark '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
