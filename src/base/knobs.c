/* Environment variables, read once per context (see knobs.h). */
#include "base/knobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int flag(const char *name) {
  const char *v = getenv(name);
  return v && atoi(v) != 0;
}

static void copy_str(char *dst, size_t n, const char *src) {
  if (!src || strlen(src) >= n) {
    dst[0] = '\0';
    return;
  }
  memcpy(dst, src, strlen(src) + 1);
}

void coda_knobs_from_env(coda_knobs *k) {
  memset(k, 0, sizeof *k);
  const char *v = getenv("CODA_DEBUG_SYNC");
  k->debug_sync = v && strcmp(v, "1") == 0;
  k->autotune = flag("CODA_AUTOTUNE");
  k->retune = flag("CODA_RETUNE");
  v = getenv("CODA_EPI_SCHEDULE");
  if (v && !strcmp(v, "pingpong")) k->epi_schedule = CODA_EPI_SCHEDULE_PINGPONG;
  else if (v && !strcmp(v, "cooperative")) k->epi_schedule = CODA_EPI_SCHEDULE_COOPERATIVE;
  v = getenv("CODA_EPI_TMA_LOADS");
  k->epi_tma_loads = v && !strcmp(v, "0") ? -1 : 0;
  v = getenv("CODA_ATTN_IMPL");
  k->attn_impl = v && !strcmp(v, "v1") ? CODA_ATTN_IMPL_V1 : CODA_ATTN_IMPL_DEFAULT;
  v = getenv("CODA_CACHE_DIR");
  const char *home = getenv("HOME");
  if (v && *v) copy_str(k->cache_dir, sizeof k->cache_dir, v);
  else if (home && *home && strlen(home) + 13 < sizeof k->cache_dir)
    snprintf(k->cache_dir, sizeof k->cache_dir, "%s/.cache/coda", home);
  copy_str(k->nccl_lib, sizeof k->nccl_lib, getenv("CODA_NCCL_LIB"));
  v = getenv("CODA_COMM_TIMEOUT");
  if (v && *v) {
    char *end;
    double t = strtod(v, &end);
    if (!*end && t > 0 && t < 1e9) k->comm_timeout_s = t;
  }
}

void coda_knobs_resolve(const coda_context_options *o, coda_knobs *k) {
  coda_knobs_from_env(k);
  if (o->debug_sync) k->debug_sync = 1;
  if (o->autotune) k->autotune = 1;
  if (o->retune) k->retune = 1;
  if (o->epi_schedule != CODA_EPI_SCHEDULE_AUTO) k->epi_schedule = o->epi_schedule;
  if (o->epi_tma_loads) k->epi_tma_loads = o->epi_tma_loads;
  if (o->attn_impl != CODA_ATTN_IMPL_DEFAULT) k->attn_impl = o->attn_impl;
  if (o->cache_dir && *o->cache_dir) copy_str(k->cache_dir, sizeof k->cache_dir, o->cache_dir);
}

int coda_knobs_cache_path(const coda_knobs *k, const char *file, char *buf, size_t n) {
  if (!k->cache_dir[0]) return 0;
  int len = snprintf(buf, n, "%s/%s", k->cache_dir, file);
  if (len < 0 || (size_t)len >= n) {
    if (n) buf[0] = '\0';
    return 0;
  }
  return 1;
}
