/* The block benchmark: one Transformer block (Llama-3 or GPT-2 plan) on
 * the GPU, forward, backward and forward + backward, with fusion on and
 * off, against its floor (the block's GEMMs on cuBLAS plus our attention),
 * and the library's peak memory. One implementation behind two entry
 * points: `coda bench block` (src/tools/cmd_bench.c) and the standalone
 * bench/block/bench_block. */
#ifndef CODA_TOOL_BENCH_BLOCK_H
#define CODA_TOOL_BENCH_BLOCK_H

/* argv[0] names the command in messages ("coda bench block"); the other
 * arguments are the options (see the usage text). Returns the exit
 * status: 0 ok, 1 a run failed, 2 bad usage or no CUDA GPU. */
int coda_bench_block_main(int argc, char **argv);

#endif
