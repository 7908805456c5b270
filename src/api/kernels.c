/* The CUDA kernel of a program, for tools that show or precompile kernels:
 * the CUDA backend's compiler needs no GPU, so any context may ask. */
#include "backends/backend.h"

#include <string.h>

static const coda_backend_ops *cuda_compiler(coda_context ctx, const char *what) {
  const coda_backend_ops *b = coda_backend_ops_for(CODA_BACKEND_CUDA);
  if (!b || !b->program_source) {
    coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: this build of coda has no CUDA backend", what);
    return NULL;
  }
  return b;
}

coda_status coda_program_cuda_source(coda_context ctx, coda_program p, char **source) {
  if (!p || !source) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA source: NULL argument");
  *source = NULL;
  const coda_backend_ops *b = cuda_compiler(ctx, "CUDA source");
  return b ? b->program_source(ctx, p, source) : CODA_ERR_NOT_SUPPORTED;
}

coda_status coda_program_cuda_compile(coda_context ctx, coda_program p,
                                      coda_dtype operand_dtype, coda_transpose trans_a,
                                      coda_transpose trans_b, int no_cache,
                                      coda_cuda_kernel_info *info, char **unit, char **log) {
  if (unit) *unit = NULL;
  if (log) *log = NULL;
  if (!p || !info) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA compile: NULL argument");
  memset(info, 0, sizeof *info);
  const coda_backend_ops *b = cuda_compiler(ctx, "CUDA compile");
  return b ? b->program_compile(ctx, p, operand_dtype, trans_a, trans_b, no_cache, info, unit, log)
           : CODA_ERR_NOT_SUPPORTED;
}
