/* The generated source and a compilation of a program's fused kernel, for
 * tools that show or precompile kernels (coda_program_cuda_source and
 * coda_program_cuda_compile, api/kernels.c, through the CUDA table). */
#include "backends/backend.h"
#include "backends/cuda/backend.h"
#include "backends/cuda/epi_codegen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coda_status kernel_config(coda_context ctx, coda_dtype operand_dtype,
                                 coda_transpose trans_a, coda_transpose trans_b,
                                 coda_epi_config *cfg) {
  if (operand_dtype != CODA_BF16 && operand_dtype != CODA_F16)
    return coda_fail(ctx, CODA_ERR_DTYPE, "CUDA kernel: operands are bf16 or f16, not %s",
                     coda_dtype_name(operand_dtype));
  if ((trans_a != CODA_N && trans_a != CODA_T) || (trans_b != CODA_N && trans_b != CODA_T))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA kernel: transpose is CODA_N or CODA_T");
  *cfg = coda_epi_default_config();
  coda_cuda_epi_arch(ctx, cfg); /* CODA_ARCH (or the context's device) */
  cfg->f16 = operand_dtype == CODA_F16;
  cfg->trans_a = trans_a == CODA_T;
  cfg->trans_b = trans_b == CODA_T;
  return CODA_OK;
}

coda_status coda_cuda_program_source(coda_context ctx, coda_program p, char **source) {
  coda_epi_config cfg = coda_epi_default_config();
  coda_cuda_epi_arch(ctx, &cfg); /* the functor of the path CODA_ARCH picks */
  char *src = coda_epi_functor_source_for(ctx, p, cfg.arch);
  if (!src) {
    const char *why = coda_last_error(ctx);
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", why && *why ? why : "no source generated");
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the GPU cannot run this program: %s", msg);
  }
  *source = src;
  return CODA_OK;
}

coda_status coda_cuda_program_compile(coda_context ctx, coda_program p,
                                      coda_dtype operand_dtype, coda_transpose trans_a,
                                      coda_transpose trans_b, int no_cache,
                                      coda_cuda_kernel_info *info, char **unit, char **log) {
  coda_epi_config cfg;
  coda_status s = kernel_config(ctx, operand_dtype, trans_a, trans_b, &cfg);
  if (s) return s;
  coda_epi_binary bin;
  memset(&bin, 0, sizeof bin);
  s = coda_epi_build(ctx, p, &cfg, no_cache, &bin); /* cfg: the schedule chosen */
  if (s) {
    coda_epi_binary_free(&bin);
    return s;
  }
  info->from_cache = bin.from_cache;
  info->pingpong = cfg.ping;
  info->cubin_bytes = bin.size;
  info->spill_stores = bin.spill;
  if (bin.lowered) snprintf(info->kernel, sizeof info->kernel, "%s", bin.lowered);
  coda_epi_binary_free(&bin);
  if (unit || log) {
    char *expr = NULL;
    char *src = coda_epi_full_source(ctx, p, &cfg, &expr);
    if (src && log) { /* once more, uncached, for the ptxas log */
      char *low = NULL;
      void *cubin = NULL;
      size_t n = 0;
      char target[16];
      if (coda_epi_compile_for(ctx, coda_epi_target(&cfg, target, sizeof target), src, expr,
                               coda_program_math(p), 1, &cubin, &n, &low, log, NULL, NULL) != CODA_OK) {
        free(*log);
        *log = NULL;
      }
      free(low);
      free(cubin);
    }
    if (unit) *unit = src;
    else free(src);
    free(expr);
  }
  return CODA_OK; /* the kernel was built; the unit and log are best effort */
}
