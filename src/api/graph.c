/* Graphs of a context's launches (include/coda.h): a handle over the
 * backend's instantiated graph. */
#include "backends/backend.h"
#include "base/internal.h"

#include <stdlib.h>

struct coda_graph_s {
  const coda_backend_ops *ops;
  void *exec;
};

coda_status coda_graph_begin(coda_context ctx) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!ctx->ops->graph_begin)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "coda_graph_begin: the %s backend has no graphs",
                     ctx->ops->name);
  return ctx->ops->graph_begin(ctx);
}

coda_status coda_graph_end(coda_context ctx, coda_graph *out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_graph_end: out is NULL");
  *out = NULL;
  if (!ctx->ops->graph_end)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "coda_graph_end: the %s backend has no graphs",
                     ctx->ops->name);
  struct coda_graph_s *g = calloc(1, sizeof *g);
  void *exec = NULL;
  coda_status s = ctx->ops->graph_end(ctx, &exec); /* ends the recording either way */
  if (s != CODA_OK) {
    free(g);
    return s;
  }
  if (!g) {
    ctx->ops->graph_destroy(exec);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "coda_graph_end: out of memory");
  }
  g->ops = ctx->ops;
  g->exec = exec;
  *out = g;
  return CODA_OK;
}

coda_status coda_graph_launch(coda_context ctx, coda_graph g) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!g) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_graph_launch: graph is NULL");
  if (g->ops != ctx->ops)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_graph_launch: the graph was recorded "
                     "on a %s context, not %s", g->ops->name, ctx->ops->name);
  return ctx->ops->graph_launch(ctx, g->exec);
}

void coda_graph_destroy(coda_graph g) {
  if (!g) return;
  g->ops->graph_destroy(g->exec);
  free(g);
}
