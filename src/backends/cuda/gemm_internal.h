/* Internal entry points of the Hopper GEMM for tests and benchmarks. */
#ifndef CODA_CUDA_GEMM_INTERNAL_H
#define CODA_CUDA_GEMM_INTERNAL_H
#include "coda.h"

#include <cuda.h> /* CUtensorMap (types only; libcuda is never linked) */
#ifdef __cplusplus
extern "C" {
#endif
/* TMA map of a GEMM operand: a row-major (rows x cols, pitch ld) 16-bit
 * matrix, box = box_cols (contiguous; 64 = 128 bytes) x box_rows, 128-byte
 * swizzle. encode is the driver's cuTensorMapEncodeTiled (reached through
 * the runtime's entry-point query). Shared by the plain and fused GEMMs. */
CUresult coda_cuda_operand_map(void *encode, CUtensorMap *map, const coda_tensor *t,
                               uint32_t box_cols, uint32_t box_rows);
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
/* How the plain GEMM's epilogue writes D for a call with this D, accumulate
 * flag and k-split count (as the kernel runs them): */
enum {
  CODA_GEMM_STORE_REGISTERS = 0,  /* staged chunks, row-contiguous thread stores
                                   * (reading D first when accumulating) */
  CODA_GEMM_STORE_TMA = 1,        /* TMA bulk tensor stores */
  CODA_GEMM_STORE_TMA_REDUCE = 2  /* TMA reduce-add (accumulating into fp32 D) */
};
int coda_cuda_gemm_store_path(const coda_tensor *D, int accumulate, int splits);
/* Index of the configuration coda_cuda_gemm picks for this shape. */
int coda_cuda_gemm_default_config(int64_t M, int64_t N, int64_t K, int num_sms);
/* Candidate (configuration, k-splits) pairs the autotuner times for a
 * shape, at most max of them written to out; returns the count. The default
 * choice is always among them; split counts are as the kernel will run them. */
int coda_cuda_gemm_candidates(int64_t M, int64_t N, int64_t K, int num_sms, int (*out)[2],
                              int max);

/* ---- autotuner (gemm_tune.cu) ----
 * With tuning on, the automatic choice (config < 0, splits <= 0) of a new
 * (M, N, K, layout, dtypes, accumulate) key times every candidate on the
 * caller's operands (accumulating calls on a scratch copy of D), keeps the
 * fastest per context and in the on-disk cache (base/tune_cache.h). */
/* Turns tuning on or off for a context (default: the environment variable
 * CODA_AUTOTUNE, "1" = on, read on the first GEMM of the context). */
coda_status coda_cuda_gemm_set_autotune(coda_context ctx, int on);
int coda_cuda_gemm_autotune_enabled(coda_context ctx);
/* The automatic-choice GEMM through the tuner (tunes on a miss). */
coda_status coda_cuda_gemm_tuned(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                                 coda_transpose trans_b, const coda_tensor *B,
                                 const coda_tensor *D, float alpha, int accumulate);
/* The choice the tuner holds for this call's key: returns 1 and sets
 * *config, *splits (and *us, the measured time, if not NULL); 0 if none. */
int coda_cuda_gemm_tuned_choice(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                                coda_transpose trans_b, const coda_tensor *B,
                                const coda_tensor *D, int accumulate, int *config, int *splits,
                                double *us);
/* Path of the context's cache file ("" = memory only); for tests and tools. */
const char *coda_cuda_gemm_tune_path(coda_context ctx);
/* Frees the tuner's table of a context (from coda_cuda_context_release). */
void coda_cuda_gemm_tune_release(coda_context ctx);
#ifdef __cplusplus
}
#endif
#endif
