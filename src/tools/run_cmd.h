/* What the two halves of `coda run` share: cmd_run.c (the command line,
 * the contexts and programs, the argument shapes, the runs and their
 * report) and run_operands.c (the operands and arguments: random, ranged
 * or read from .npy files, and written back). */
#ifndef CODA_TOOLS_RUN_CMD_H
#define CODA_TOOLS_RUN_CMD_H

#include "coda.h"
#include "tool_util.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
  coda_arg_info info;
  int is_finish;
  int64_t rows, cols;
  size_t bytes;
  void *host;     /* initial contents (inputs, accumulated outputs) */
  void *dev[3];   /* per run: 0 CPU, 1 CUDA, 2 CPU fp64 */
  double *result[3]; /* downloaded, as double */
  const char *file;  /* --input */
  double lo, hi;     /* --range (lo < hi when given) */
  int ranged;
} run_arg;

/* --input NAME=FILE and --range NAME=LO:HI */
typedef struct { const char *name; const char *file; double lo, hi; } run_opt;
#define MAX_RUN_OPTS 64

/* One `coda run`: the command line, then what each phase makes (freed
 * by free_run on every path). Runs: 0 the CPU, 1 CUDA (--gpu), 2 the CPU
 * in fp64, the reference. */
typedef struct run_cmd {
  const char *file, *builtin, *out_dir;
  int64_t M, N, K, reps, seed;
  int gpu, m_set, n_set, k_set, strict;
  double max_gib;
  run_opt inputs[MAX_RUN_OPTS], ranges[MAX_RUN_OPTS];
  int ninputs, nranges;
  coda_tool_params params; /* --param */
  const char *file_acc, *file_A, *file_B; /* --input acc / A / B fix the GEMM shape */
  coda_context ctx[3];
  coda_program prog[3];
  coda_args args[3];
  run_arg *ra;
  int nargs;
  void *dA[3], *dB[3];
  uint16_t *hA, *hB;
  double *hA64, *hB64;
  char *text;
  double opnd; /* values in A and B */
  coda_tiling tiling;
  uint64_t st; /* the random inputs' stream */
  double med[3]; /* median seconds per run */
} run_cmd;

/* A phase's result when the command goes on (else the exit status). */
#define GO_ON (-1)

/* An input of row partials (rowsum, rowmax, rowlse: M x T, any T). */
static inline int run_kind_is_partials(coda_arg_kind k) {
  return k == CODA_ARG_ROWSUM || k == CODA_ARG_ROWMAX || k == CODA_ARG_ROWLSE;
}

/* One value of a host array as a double. */
double run_get(const void *p, coda_dtype t, size_t i);
/* DIR/NAMESUFFIX.npy; 0, or -1 after saying why. */
int run_write_npy(coda_context ctx, const char *dir, const char *name, const char *suffix, coda_tensor t);
/* 1 (after saying why) when the bytes exceed --max-memory. */
int run_too_large(double host_bytes, double gpu_bytes, double max_gib, const char *what);

/* The operand phases, in order around the shapes (GO_ON or an exit status). */
int run_read_operands(run_cmd *cr);
int run_check_operands(run_cmd *cr);
int run_fill_operands(run_cmd *cr);
int run_fill_args(run_cmd *cr);
int run_write_operands(run_cmd *cr);

#endif
