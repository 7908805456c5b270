/* Backend memory: device memory on a CUDA context, host memory on the CPU
 * backend (see coda.h). */
#include "core/internal.h"
#ifdef CODA_HAVE_CUDA
#include "cuda/gplan.h"
#endif

#include <stdlib.h>
#include <string.h>

static int on_cuda(coda_context ctx) { return ctx->opts.backend == CODA_BACKEND_CUDA; }

coda_status coda_malloc(coda_context ctx, size_t bytes, void **out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_malloc: out is NULL");
  *out = NULL;
  if (on_cuda(ctx)) {
#ifdef CODA_HAVE_CUDA
    return coda_cuda_malloc(ctx, bytes, out);
#else
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "coda_malloc: library built without CUDA");
#endif
  }
  *out = calloc(bytes ? bytes : 1, 1);
  if (!*out)
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "coda_malloc: cannot allocate %zu bytes", bytes);
  return CODA_OK;
}

void coda_free(coda_context ctx, void *p) {
  if (!ctx || !p) return;
#ifdef CODA_HAVE_CUDA
  if (on_cuda(ctx)) {
    coda_cuda_free(p);
    return;
  }
#endif
  free(p);
}

static coda_status copy(coda_context ctx, void *dst, const void *src, size_t bytes, int to_device,
                        const char *what) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (bytes && (!dst || !src))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, !dst ? "dst" : "src");
  if (on_cuda(ctx)) {
#ifdef CODA_HAVE_CUDA
    return coda_cuda_memcpy(ctx, dst, src, bytes, to_device);
#else
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: library built without CUDA", what);
#endif
  }
  (void)to_device;
  if (bytes) memmove(dst, src, bytes);
  return CODA_OK;
}

coda_status coda_memcpy_h2d(coda_context ctx, void *dst, const void *src, size_t bytes) {
  return copy(ctx, dst, src, bytes, 1, "coda_memcpy_h2d");
}

coda_status coda_memcpy_d2h(coda_context ctx, void *dst, const void *src, size_t bytes) {
  return copy(ctx, dst, src, bytes, 0, "coda_memcpy_d2h");
}

coda_status coda_synchronize(coda_context ctx) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
#ifdef CODA_HAVE_CUDA
  if (on_cuda(ctx)) return coda_cuda_sync(ctx);
#endif
  return CODA_OK;
}
