/* Internal entry points of the Hopper GEMM for tests and benchmarks. */
#ifndef CODA_CUDA_GEMM_INTERNAL_H
#define CODA_CUDA_GEMM_INTERNAL_H
#include "coda.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Number of tile configurations in the table, and the name of entry i. */
int coda_cuda_gemm_num_configs(void);
const char *coda_cuda_gemm_config_name(int i);
/* coda_cuda_gemm with a forced configuration (index into the table) and
 * number of k-splits; config < 0 and splits <= 0 pick the defaults for the
 * shape (as coda_cuda_gemm does). discard (measurement only, D is left
 * unwritten): 0 = normal, 1 = the epilogue stores nothing, 2 = it stages the
 * tile in shared memory but skips the global stores. */
coda_status coda_cuda_gemm_config(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                                  coda_transpose trans_b, const coda_tensor *B,
                                  const coda_tensor *D, float alpha, int accumulate, int config,
                                  int splits, int discard);
/* Index of the configuration coda_cuda_gemm picks for this shape. */
int coda_cuda_gemm_default_config(int64_t M, int64_t N, int64_t K, int num_sms);
#ifdef __cplusplus
}
#endif
#endif
