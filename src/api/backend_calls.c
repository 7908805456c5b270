/* The api.h entry points: backend work the layers above ask for without
 * naming a backend. */
#include "api/api.h"
#ifdef CODA_HAVE_CUDA
#include "backends/cuda/backend.h"
#include "backends/cuda/epi_codegen.h"
#include "backends/cuda/gplan.h"
#endif

#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <string.h>

static int on_cuda(coda_context ctx) { return ctx->opts.backend == CODA_BACKEND_CUDA; }

coda_status coda_tensor_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src) {
  if (on_cuda(ctx)) {
#ifdef CODA_HAVE_CUDA
    return coda_cuda_copy(ctx, dst, src);
#else
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "tensor copy: CUDA context without CUDA");
#endif
  }
  const size_t es = coda_dtype_size(dst->dtype), row = (size_t)dst->cols * es;
  for (int64_t r = 0; r < dst->rows; r++) {
    char *d = (char *)dst->data + (size_t)(r * dst->ld) * es;
    if (src) memmove(d, (const char *)src->data + (size_t)(r * src->ld) * es, row);
    else memset(d, 0, row);
  }
  return CODA_OK;
}

coda_status coda_backend_tags(coda_context ctx, char *device, size_t ndevice, char *lib,
                              size_t nlib) {
  snprintf(lib, nlib, "%d.%d.%d", CODA_VERSION_MAJOR, CODA_VERSION_MINOR, CODA_VERSION_PATCH);
  if (on_cuda(ctx)) {
#ifdef CODA_HAVE_CUDA
    coda_status st = coda_cuda_device_tag(ctx, device, ndevice);
    if (st != CODA_OK) return st;
    uint64_t h = coda_fnv1a64(coda_epi_hdr_gemm_sm90, strlen(coda_epi_hdr_gemm_sm90), 0);
    h = coda_fnv1a64(coda_epi_hdr_wgmma, strlen(coda_epi_hdr_wgmma), h);
    h = coda_fnv1a64(coda_epi_hdr_ptx_sm90, strlen(coda_epi_hdr_ptx_sm90), h);
    snprintf(lib, nlib, "%d.%d.%d+k%08x", CODA_VERSION_MAJOR, CODA_VERSION_MINOR,
             CODA_VERSION_PATCH, (unsigned)(h >> 32));
    return CODA_OK;
#else
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "CUDA context without CUDA");
#endif
  }
  int threads = ctx->opts.num_threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  snprintf(device, ndevice, "cpu/%dt", threads > 0 ? threads : 1);
  return CODA_OK;
}

coda_status coda_precompile_gemm_epilogue(coda_context ctx, coda_program prog, int trans_a,
                                          int trans_b, int f16, int *from_cache) {
  *from_cache = 0;
#ifdef CODA_HAVE_CUDA
  coda_status s = CODA_OK;
  *from_cache = 1;
  for (int sched = CODA_SCHED_PINGPONG; sched <= CODA_SCHED_COOPERATIVE && s == CODA_OK; sched++) {
    coda_epi_config cfg = coda_epi_default_config();
    cfg.trans_a = trans_a;
    cfg.trans_b = trans_b;
    cfg.f16 = f16;
    cfg.sched = sched;
    coda_epi_binary bin;
    s = coda_epi_build(ctx, prog, &cfg, 0, &bin);
    *from_cache &= bin.from_cache;
    coda_epi_binary_free(&bin);
  }
  return s;
#else
  (void)prog, (void)trans_a, (void)trans_b, (void)f16;
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "kernel precompilation: built without CUDA");
#endif
}

coda_status coda_precompile_map(coda_context ctx, coda_program prog, int *from_cache) {
  *from_cache = 0;
#ifdef CODA_HAVE_CUDA
  return coda_cuda_map_precompile(ctx, prog, from_cache);
#else
  (void)prog;
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "kernel precompilation: built without CUDA");
#endif
}
