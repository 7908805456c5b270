/* Internal entry points of the CUDA backend for plans on the GPU: coda_map
 * (src/backends/cuda/epi_map.c), the finishers and the small device ops
 * (src/backends/cuda/finish.cu), and the generic loaded-kernel cache of a context
 * (src/backends/cuda/epi_launch.c). Only compiled into CUDA builds. */
#ifndef CODA_CUDA_GPLAN_H
#define CODA_CUDA_GPLAN_H
#include "coda.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* coda_map on the GPU: the program's generated functor called on zero
 * accumulator fragments laid out exactly as the GEMM consumer's (64-row
 * warpgroups, BN-column tiles), so partials have the GEMM's shapes. The
 * views are the checked device views in program order. */
coda_status coda_cuda_map(coda_context ctx, coda_program program, int64_t M, int64_t N,
                          const coda_tensor *const *inputs, const coda_tensor *const *outputs,
                          const coda_tensor *const *partials, coda_tiling tiling);
/* Compiles (or finds in the disk cache) the map kernel of a program without
 * a GPU; for precompiling. *from_cache (optional) says whether it was cached. */
coda_status coda_cuda_map_precompile(coda_context ctx, coda_program program, int *from_cache);

/* One finisher on device views: kind (coda_finish_kind), layout 0 = row
 * partials M x T, 1 = column partials S x N, 2 = segmented M x I with
 * segment seg; Q (centered rstd) may be NULL. Deterministic: one thread per
 * output, partials summed in double in index order (the CPU finisher's
 * arithmetic), rounded once to f32. */
coda_status coda_cuda_finish(coda_context ctx, int kind, int layout, const coda_tensor *P,
                             const coda_tensor *Q, const coda_tensor *out, int64_t M, int64_t N,
                             int tile_n, int seg, double eps);

/* Device memory and the plans' small device ops. */
coda_status coda_cuda_malloc(coda_context ctx, size_t bytes, void **out);
void coda_cuda_free(void *p);
coda_status coda_cuda_memcpy(coda_context ctx, void *dst, const void *src, size_t bytes,
                             int to_device);
/* Host to device, queued on the stream without waiting (src may be reused
 * on return: a pageable source is staged by the copy call). */
coda_status coda_cuda_memcpy_queued(coda_context ctx, void *dst, const void *src, size_t bytes);
/* dst = src elementwise with dtype conversion (round to nearest even);
 * zero: dst = 0 (src NULL). Device views of equal shape. */
coda_status coda_cuda_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src);
/* Waits for the device (the plans' timing and downloads). */
coda_status coda_cuda_sync(coda_context ctx);

/* ---- generic loaded kernels of a context (src/backends/cuda/epi_launch.c) ---- */
/* The loaded function for `key`, or NULL. */
void *coda_cuda_kernel_find(coda_context ctx, uint64_t key);
/* Loads a cubin, looks up `lowered` and keeps it under `key`. */
coda_status coda_cuda_kernel_add(coda_context ctx, uint64_t key, const void *cubin,
                                 const char *lowered, void **fn);
coda_status coda_cuda_kernel_launch(coda_context ctx, void *fn, unsigned grid, unsigned block,
                                    unsigned smem, void **args);

#ifdef __cplusplus
}
#endif
#endif
