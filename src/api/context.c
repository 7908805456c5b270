#include "base/internal.h"
#include "base/tune_cache.h"
#ifdef CODA_HAVE_CUDA
#include "backends/cuda/backend.h"
#include "backends/cuda/gemm_internal.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *coda_status_string(coda_status s) {
  switch (s) {
  case CODA_OK: return "ok";
  case CODA_ERR_INVALID_ARGUMENT: return "invalid argument";
  case CODA_ERR_PARSE: return "parse error";
  case CODA_ERR_TYPE: return "invalid program";
  case CODA_ERR_SHAPE: return "shape mismatch";
  case CODA_ERR_DTYPE: return "dtype not allowed";
  case CODA_ERR_LAYOUT: return "unsupported stride or alignment";
  case CODA_ERR_ALIAS: return "overlapping tensors";
  case CODA_ERR_OUT_OF_MEMORY: return "out of memory";
  case CODA_ERR_NOT_SUPPORTED: return "not supported";
  case CODA_ERR_BACKEND: return "backend failure";
  case CODA_ERR_IO: return "i/o error";
  case CODA_ERR_OVERFLOW: return "size overflow";
  case CODA_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

coda_status coda_fail(coda_context ctx, coda_status s, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
    va_end(ap);
  }
  return s;
}

void coda_clear_error(coda_context ctx) {
  if (ctx) ctx->last_error[0] = '\0';
}

coda_context_options coda_context_default_options(void) {
  coda_context_options o;
  memset(&o, 0, sizeof o);
  o.backend = CODA_BACKEND_CPU;
  o.precision = CODA_PRECISION_F32;
  return o;
}

coda_status coda_context_create(const coda_context_options *opts,
                                coda_context *out) {
  if (!out) return CODA_ERR_INVALID_ARGUMENT;
  *out = NULL;
  coda_context_options o = opts ? *opts : coda_context_default_options();
  if (o.backend != CODA_BACKEND_CPU && o.backend != CODA_BACKEND_CUDA)
    return CODA_ERR_INVALID_ARGUMENT;
  if (o.precision != CODA_PRECISION_F32 && o.precision != CODA_PRECISION_F64)
    return CODA_ERR_INVALID_ARGUMENT;
  if (o.num_threads < 0) return CODA_ERR_INVALID_ARGUMENT;
  if (o.backend == CODA_BACKEND_CUDA && !coda_cuda_available())
    return CODA_ERR_NOT_SUPPORTED;
  /* The environment switch lets a failing run be re-run in debug mode
   * without rebuilding; it is read once, here. */
  if (!o.debug_sync) {
    const char *env = getenv("CODA_DEBUG_SYNC");
    o.debug_sync = env && strcmp(env, "1") == 0;
  }
  coda_context c = calloc(1, sizeof *c);
  if (!c) return CODA_ERR_OUT_OF_MEMORY;
  c->opts = o;
#ifdef CODA_HAVE_CUDA
  if (o.backend == CODA_BACKEND_CUDA && o.autotune) {
    coda_status s = coda_cuda_gemm_set_autotune(c, 1);
    if (s != CODA_OK) {
      free(c);
      return s;
    }
  }
#endif
  *out = c;
  return CODA_OK;
}

void coda_context_destroy(coda_context ctx) {
  if (!ctx) return;
#ifdef CODA_HAVE_CUDA
  coda_cuda_context_release(ctx); /* loaded fused kernels of this context */
#endif
  coda_fused_tune_release(ctx); /* coda_plan_tune_fusion's table */
  coda_mem_release(ctx);
  free(ctx);
}

const char *coda_last_error(coda_context ctx) {
  return ctx ? ctx->last_error : "no context";
}
coda_backend coda_context_backend(coda_context ctx) { return ctx->opts.backend; }
coda_precision coda_context_precision(coda_context ctx) {
  return ctx->opts.precision;
}

#ifndef CODA_HAVE_CUDA
int coda_cuda_available(void) { return 0; }
#endif
