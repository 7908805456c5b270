#include "base/internal.h"
#include "base/tune_cache.h"
#include "base/knobs.h"
#include "backends/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  const coda_backend_ops *ops = coda_backend_ops_for(o.backend);
  if (!ops || (o.backend == CODA_BACKEND_CUDA && !coda_cuda_available()))
    return CODA_ERR_NOT_SUPPORTED;
  if ((unsigned)o.epi_schedule > CODA_EPI_SCHEDULE_COOPERATIVE || o.epi_tma_loads < -1 ||
      o.epi_tma_loads > 1 || (unsigned)o.attn_impl > CODA_ATTN_IMPL_V1)
    return CODA_ERR_INVALID_ARGUMENT;
  coda_context c = calloc(1, sizeof *c);
  if (!c) return CODA_ERR_OUT_OF_MEMORY;
  /* The environment is read once, here: a failing run can be re-run in
   * debug mode (CODA_DEBUG_SYNC=1) without rebuilding, and code below the
   * api layer reads the context's knobs, never the environment. */
  coda_knobs_resolve(&o, &c->knobs);
  o.debug_sync = c->knobs.debug_sync;
  o.autotune = c->knobs.autotune;
  o.retune = c->knobs.retune;
  o.epi_schedule = c->knobs.epi_schedule;
  o.epi_tma_loads = c->knobs.epi_tma_loads ? c->knobs.epi_tma_loads : 1;
  o.attn_impl = c->knobs.attn_impl;
  o.cache_dir = c->knobs.cache_dir;
  c->opts = o;
  c->stream = o.stream;
  c->ops = ops;
  coda_status s = ops->create(c);
  if (s != CODA_OK) {
    ops->destroy(c);
    free(c);
    return s;
  }
  *out = c;
  return CODA_OK;
}

void coda_context_destroy(coda_context ctx) {
  if (!ctx) return;
  ctx->ops->destroy(ctx); /* the backend's state: loaded kernels, workspaces */
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


