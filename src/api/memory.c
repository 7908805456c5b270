/* Backend memory: device memory on a CUDA context, host memory on the CPU
 * backend (see coda.h). */
#include "base/internal.h"
#include "backends/backend.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- accounting: live coda_malloc blocks, pointer -> bytes ----
 * Open addressing with linear probing and backward-shift deletion, so
 * coda_free learns the size of the block it releases. */
struct coda_mem_slot {
  void *p; /* NULL: empty */
  size_t bytes;
};

static size_t slot_of(const void *p, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)p;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (size_t)(h & (cap - 1));
}

void coda_mem_release(coda_context ctx) {
  if (!ctx) return;
  free(ctx->mem_slots);
  ctx->mem_slots = NULL;
  ctx->mem_cap = ctx->mem_count = 0;
}

/* Records a live block; 0 if the table cannot grow (the block is then
 * released by the caller: an allocation the context cannot account for
 * is reported as out of memory). */
static int track(coda_context ctx, void *p, size_t bytes) {
  if (2 * (ctx->mem_count + 1) > ctx->mem_cap) {
    size_t cap = ctx->mem_cap ? 2 * ctx->mem_cap : 64;
    struct coda_mem_slot *t = calloc(cap, sizeof *t);
    if (!t) return 0;
    for (size_t i = 0; i < ctx->mem_cap; i++) {
      if (!ctx->mem_slots[i].p) continue;
      size_t j = slot_of(ctx->mem_slots[i].p, cap);
      while (t[j].p) j = (j + 1) & (cap - 1);
      t[j] = ctx->mem_slots[i];
    }
    free(ctx->mem_slots);
    ctx->mem_slots = t;
    ctx->mem_cap = cap;
  }
  size_t j = slot_of(p, ctx->mem_cap);
  while (ctx->mem_slots[j].p) j = (j + 1) & (ctx->mem_cap - 1);
  ctx->mem_slots[j].p = p;
  ctx->mem_slots[j].bytes = bytes;
  ctx->mem_count++;
  coda_mem_add(ctx, bytes);
  return 1;
}

/* Forgets a block (nothing if the context did not allocate it). */
static void untrack(coda_context ctx, void *p) {
  if (!ctx->mem_cap) return;
  const size_t mask = ctx->mem_cap - 1;
  size_t j = slot_of(p, ctx->mem_cap);
  while (ctx->mem_slots[j].p && ctx->mem_slots[j].p != p) j = (j + 1) & mask;
  if (!ctx->mem_slots[j].p) return;
  coda_mem_sub(ctx, ctx->mem_slots[j].bytes);
  ctx->mem_count--;
  /* backward shift: move later entries of the probe run into the hole */
  size_t hole = j, k = (j + 1) & mask;
  while (ctx->mem_slots[k].p) {
    size_t home = slot_of(ctx->mem_slots[k].p, ctx->mem_cap);
    /* k's entry may fill the hole if its home is not in (hole, k] */
    if (((k - home) & mask) >= ((k - hole) & mask)) {
      ctx->mem_slots[hole] = ctx->mem_slots[k];
      hole = k;
    }
    k = (k + 1) & mask;
  }
  ctx->mem_slots[hole].p = NULL;
  ctx->mem_slots[hole].bytes = 0;
}

coda_status coda_memory_stats(coda_context ctx, coda_memory_info *out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_memory_stats: out is NULL");
  out->current_bytes = ctx->mem_current;
  out->peak_bytes = ctx->mem_peak;
  out->live_blocks = ctx->mem_count;
  return CODA_OK;
}

coda_status coda_memory_reset_peak(coda_context ctx) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  ctx->mem_peak = ctx->mem_current;
  return CODA_OK;
}

coda_status coda_malloc(coda_context ctx, size_t bytes, void **out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_malloc: out is NULL");
  *out = NULL;
  coda_status s = ctx->ops->alloc(ctx, bytes, out);
  if (s != CODA_OK) return s;
  if (!track(ctx, *out, bytes)) {
    ctx->ops->free(ctx, *out);
    *out = NULL;
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "coda_malloc: out of host memory for the accounting table");
  }
  return CODA_OK;
}

void coda_free(coda_context ctx, void *p) {
  if (!ctx || !p) return;
  untrack(ctx, p);
  ctx->ops->free(ctx, p);
}

static coda_status copy(coda_context ctx, void *dst, const void *src, size_t bytes,
                        coda_copy_kind kind, const char *what) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (bytes && (!dst || !src))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, !dst ? "dst" : "src");
  return ctx->ops->copy_bytes(ctx, dst, src, bytes, kind);
}

coda_status coda_memcpy_h2d(coda_context ctx, void *dst, const void *src, size_t bytes) {
  return copy(ctx, dst, src, bytes, CODA_COPY_H2D, "coda_memcpy_h2d");
}
coda_status coda_memcpy_h2d_queued(coda_context ctx, void *dst, const void *src, size_t bytes) {
  return copy(ctx, dst, src, bytes, CODA_COPY_H2D_QUEUED, "coda_memcpy_h2d_queued");
}

coda_status coda_memcpy_d2h(coda_context ctx, void *dst, const void *src, size_t bytes) {
  return copy(ctx, dst, src, bytes, CODA_COPY_D2H, "coda_memcpy_d2h");
}

coda_status coda_synchronize(coda_context ctx) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  return ctx->ops->synchronize(ctx);
}
