/* The coda command-line tool. Subcommands are dispatched from a table. */
#include "coda.h"

#include <stdio.h>
#include <string.h>

static int cmd_version(int argc, char **argv) {
  (void)argc; (void)argv;
  printf("coda %d.%d.%d (CUDA backend: %s)\n", CODA_VERSION_MAJOR, CODA_VERSION_MINOR,
         CODA_VERSION_PATCH, coda_cuda_available() ? "available" : "not available");
  return 0;
}

int cmd_train(int argc, char **argv);    /* cmd_train.c */
int cmd_generate(int argc, char **argv); /* cmd_generate.c */
int cmd_eval(int argc, char **argv);     /* cmd_eval.c */

int coda_cmd_check(int argc, char **argv);
int coda_cmd_run(int argc, char **argv);   /* cmd_run.c */
int coda_cmd_gradcheck(int argc, char **argv); /* cmd_gradcheck.c */
int cmd_demo(int argc, char **argv);       /* cmd_demo.c */
int coda_cmd_compile(int argc, char **argv); /* cmd_compile.c */
int cmd_bench(int argc, char **argv);      /* cmd_bench.c */
int cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } command;
static const command commands[] = {
  {"version", cmd_version, "print the version and whether a GPU is usable"},
  {"check", coda_cmd_check, "parse and validate an epilogue program, print its IR"},
  {"run", coda_cmd_run, "run a program fused into a GEMM on random or .npy data, checked against fp64 (CPU, and GPU with --gpu)"},
  {"gradcheck", coda_cmd_gradcheck, "check a backward program against finite differences of its forward (fp64)"},
  {"compile", coda_cmd_compile, "print a program's generated CUDA epilogue and compile it (NVRTC, sm_90a)"},
  {"train", cmd_train, "train a Llama-style model (CPU; see coda train --help)"},
  {"generate", cmd_generate, "sample text from a checkpoint"},
  {"eval", cmd_eval, "validation loss and perplexity of a checkpoint on a shard or corpus"},
  {"demo", cmd_demo, "forward + backward of a small Llama-style model through the block plans"},
  {"tokenize", cmd_tokenize, "text to BPE token ids and back with a tokenizer.json (see coda tokenize --help)"},
  {"bench", cmd_bench, "benchmarks on the GPU: coda bench block (one Transformer block, fused/unfused/floor, memory)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: coda COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2) { usage(stderr); return 2; }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "coda: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
