/* Entry points of the api layer for the layers above it (nn, train, dist,
 * tools) beyond the public headers: what a plan or the trainer needs from
 * the backend, without naming a backend. Nothing here is CUDA-specific. */
#ifndef CODA_API_API_H
#define CODA_API_API_H

#include "base/internal.h"

#include <stddef.h>

/* Copies src into dst (both in the context's backend memory, same shape
 * and dtype); src NULL writes zeros into dst. Stream-ordered on CUDA. */
coda_status coda_tensor_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src);

/* The tags that key the on-disk tuning caches: device names the device
 * (the GPU's name and properties, or "cpu/<threads>t"), lib the library
 * version and, on CUDA, a hash of the kernel code the choices were timed
 * with. */
coda_status coda_backend_tags(coda_context ctx, char *device, size_t ndevice, char *lib,
                              size_t nlib);

/* Compiles ahead of time the kernels the CUDA backend launches for a fused
 * GEMM step (both schedules) or a map step, into the disk cache; *from_cache
 * is 1 when every kernel came from it. Needs no GPU (any context backend);
 * CODA_ERR_NOT_SUPPORTED in a library built without CUDA. */
coda_status coda_precompile_gemm_epilogue(coda_context ctx, coda_program prog, int trans_a,
                                          int trans_b, int f16, int *from_cache);
coda_status coda_precompile_map(coda_context ctx, coda_program prog, int *from_cache);

/* The unfused form of a GEMM-epilogue program (the pass ir_unfuse in
 * src/lang/pass_unfuse.c): the same program as a map reading the
 * accumulator from the tile input `input` (dtype `dtype`, declared first)
 * instead of `acc`, for a plain GEMM followed by a map pass. */
coda_status coda_program_unfused(coda_context ctx, coda_program prog, const char *input,
                                 coda_dtype dtype, coda_program *out);

#endif
