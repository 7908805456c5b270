/* GPU tests and benchmarks: a failed CUDA runtime call ends the program,
 * naming the call and where it was made. */
#ifndef CODA_TEST_CUDA_CHECK_H
#define CODA_TEST_CUDA_CHECK_H
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK_EXIT(x, code)                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(code);                                                                         \
    }                                                                                     \
  } while (0)
#define CUDA_CHECK(x) CUDA_CHECK_EXIT(x, 2)
#endif
