/* bench_gemm's CUTLASS sm_80 column (cutlass_sm80.cu; built with
 * CODA_CUTLASS_INCLUDE only, which defines CODA_BENCH_CUTLASS). */
#ifndef CODA_BENCH_CUTLASS_SM80_H
#define CODA_BENCH_CUTLASS_SM80_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "coda.h" /* coda_transpose */

/* How many tile configurations there are, and the name of one. */
int bench_cutlass_sm80_configs(void);
const char *bench_cutlass_sm80_name(int config);

/* Row-major D (M x N, bf16) = op(A) op(B) with tile configuration config
 * (0 .. configs - 1), operands stored as bench_gemm stores them; enqueued on
 * stream. Returns 0, or nonzero: -1 a layout pair it has no kernel for
 * (TT), -2 no such configuration, 1 + cutlass::Status otherwise (the shape
 * or alignment refused, or the launch failed). */
int bench_cutlass_sm80_gemm(int config, int M, int N, int K, coda_transpose ta, coda_transpose tb,
                            const void *a, int64_t lda, const void *b, int64_t ldb, void *d,
                            int64_t ldd, cudaStream_t stream);

#endif
