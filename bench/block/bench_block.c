/* Standalone entry point of the block benchmark; the same program as
 * `coda bench block` (src/tools/bench_block.c holds the logic).
 *
 *   bench_block [CONFIG ...] [--fused] [--unfused] [--floor] [--iters N] [--csv] [--precompile]
 */
#include "tools/bench_block.h"

int main(int argc, char **argv) { return coda_bench_block_main(argc, argv); }
