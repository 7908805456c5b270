#include "base/internal.h"
#include "base/tune_cache.h"
#include "base/knobs.h"
#include "base/options.h"
#include "backends/backend.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

coda_context_options coda_context_default_options(void) {
  coda_context_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.backend = CODA_BACKEND_CPU;
  o.precision = CODA_PRECISION_F32;
  return o;
}

/* The first versioned layout, frozen: the current one less own_stream. */
typedef struct context_options_layout1 {
  size_t struct_size;
  coda_backend backend;
  coda_precision precision;
  int num_threads, device, autotune, debug_sync;
  void *stream;
  int retune;
  coda_epi_schedule epi_schedule;
  int epi_tma_loads;
  coda_attn_impl attn_impl;
  const char *cache_dir;
} context_options_layout1;
_Static_assert(offsetof(context_options_layout1, cache_dir) ==
                   offsetof(coda_context_options, cache_dir),
               "layout 1 of coda_context_options is a prefix of the current one");
/* The second, frozen: the current one less arch and compile_cc. */
typedef struct context_options_layout2 {
  context_options_layout1 first;
  int own_stream;
} context_options_layout2;
_Static_assert(offsetof(context_options_layout2, own_stream) ==
                   offsetof(coda_context_options, own_stream),
               "layout 2 of coda_context_options is a prefix of the current one");
_Static_assert(sizeof(context_options_layout1) < sizeof(context_options_layout2) &&
                   sizeof(context_options_layout2) < sizeof(coda_context_options),
               "each layout of coda_context_options is larger than the one before");

static const coda_options_layout context_layouts[] = {
    CODA_OPTIONS_LAYOUT_OLD(context_options_layout1, cache_dir),
    CODA_OPTIONS_LAYOUT_OLD(context_options_layout2, own_stream),
    CODA_OPTIONS_LAYOUT(coda_context_options)};

/* opts (NULL: the defaults) taken into *o and checked; the reason of a
 * refusal in msg. */
static coda_status take_options(const coda_context_options *opts, coda_context_options *o,
                                char *msg, size_t cap) {
  if (cap) msg[0] = '\0';
  *o = coda_context_default_options();
  if (opts) {
    coda_status s = coda_options_take_msg("coda_context_options", opts, o, context_layouts,
                                          3, msg, cap);
    if (s) return s;
  }
  if (o->backend != CODA_BACKEND_CPU && o->backend != CODA_BACKEND_CUDA) {
    snprintf(msg, cap, "coda_context_options.backend is %d, not CPU (0) or CUDA (1)",
             (int)o->backend);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  if (o->precision != CODA_PRECISION_F32 && o->precision != CODA_PRECISION_F64) {
    snprintf(msg, cap, "coda_context_options.precision is %d, not F32 (0) or F64 (1)",
             (int)o->precision);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  if (o->num_threads < 0) {
    snprintf(msg, cap, "coda_context_options.num_threads is %d, negative", o->num_threads);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  const coda_backend_ops *ops = coda_backend_ops_for(o->backend);
  if (!ops || (o->backend == CODA_BACKEND_CUDA && !coda_cuda_available())) {
    snprintf(msg, cap, "coda_context_options.backend is CUDA, and %s",
             ops ? "no usable GPU (compute capability 8.0 or newer) is present"
                 : "the library was built without CUDA");
    return CODA_ERR_NOT_SUPPORTED;
  }
  if ((unsigned)o->epi_schedule > CODA_EPI_SCHEDULE_COOPERATIVE || o->epi_tma_loads < -1 ||
      o->epi_tma_loads > 1 || (unsigned)o->attn_impl > CODA_ATTN_IMPL_V1) {
    snprintf(msg, cap,
             "coda_context_options: epi_schedule %d, epi_tma_loads %d or attn_impl %d out of "
             "range", (int)o->epi_schedule, o->epi_tma_loads, (int)o->attn_impl);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  if ((unsigned)o->arch > CODA_ARCH_SM80) {
    snprintf(msg, cap, "coda_context_options.arch is %d, not AUTO (0), SM90 (1) or SM80 (2)",
             (int)o->arch);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  if (o->compile_cc && (o->arch != CODA_ARCH_SM80 || o->compile_cc < 80 || o->compile_cc > 129)) {
    snprintf(msg, cap,
             "coda_context_options.compile_cc is %d: it takes 0, or a compute capability from "
             "80 to 129 with arch SM80 (arch is %d)", o->compile_cc, (int)o->arch);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  coda_knobs k;
  coda_knobs_from_env(&k);
  if (k.invalid[0]) {
    snprintf(msg, cap, "environment variable %s", k.invalid);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  return CODA_OK;
}

coda_status coda_context_options_check(const coda_context_options *opts, char *msg, size_t cap) {
  char scratch[1];
  coda_context_options o;
  return take_options(opts, &o, msg && cap ? msg : scratch, msg && cap ? cap : sizeof scratch);
}

coda_status coda_context_create(const coda_context_options *opts,
                                coda_context *out) {
  if (!out) return CODA_ERR_INVALID_ARGUMENT;
  *out = NULL;
  coda_context_options o;
  char msg[CODA_ERRMSG_LEN];
  coda_status st = take_options(opts, &o, msg, sizeof msg);
  if (st) return st;
  const coda_backend_ops *ops = coda_backend_ops_for(o.backend);
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
  o.arch = c->knobs.arch;
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

int coda_cuda_available(void) {
  const coda_backend_ops *b = coda_backend_ops_for(CODA_BACKEND_CUDA);
  return b && (!b->available || b->available());
}
coda_backend coda_context_backend(coda_context ctx) { return ctx->opts.backend; }
coda_precision coda_context_precision(coda_context ctx) {
  return ctx->opts.precision;
}


