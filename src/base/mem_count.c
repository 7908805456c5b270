/* The context's memory counters (coda_memory_stats): what coda_malloc
 * (api/memory.c) and the backends' own workspaces hold. Here, below both,
 * so a backend counts its workspaces without calling up into the api. */
#include "base/internal.h"

void coda_mem_add(coda_context ctx, size_t bytes) {
  if (!ctx) return;
  ctx->mem_current += bytes;
  if (ctx->mem_current > ctx->mem_peak) ctx->mem_peak = ctx->mem_current;
}

void coda_mem_sub(coda_context ctx, size_t bytes) {
  if (!ctx) return;
  ctx->mem_current = bytes > ctx->mem_current ? 0 : ctx->mem_current - bytes;
}
