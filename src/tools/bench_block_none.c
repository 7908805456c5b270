/* coda bench block in a build without CUDA: the options are checked, then
 * it says what it needs (CMakeLists.txt builds bench_block_gpu.c instead
 * when CUDA is there). */
#include "bench_block.h"
#include "bench_block_common.h"

#include <stdio.h>

int coda_bench_block_main(int argc, char **argv) {
  bench_opts o;
  int r = bench_parse_args(argc, argv, &o);
  if (r <= 0) return r == 0 ? 0 : 2;
  fprintf(stderr,
          "%s: needs a CUDA GPU (sm_90a); this coda was built without the CUDA backend "
          "(configure with a CUDA toolkit and -DCODA_WITH_CUDA=ON)\n",
          argv[0]);
  return 2;
}

