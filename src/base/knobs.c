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

/* A launcher variable into dst (a value too long for dst reads as "", which
 * src/dist reports as not a number or address). */
static void launch_var(coda_launch_vars *l, int bit, const char *name, char *dst, size_t n) {
  const char *v = getenv(name);
  if (!v) return;
  l->set |= bit;
  copy_str(dst, n, v);
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
  v = getenv("CODA_DECODE_PDL");
  k->decode_pdl_off = v && !strcmp(v, "0");
  v = getenv("CODA_DECODE_NORM");
  k->decode_norm_separate = v && !strcmp(v, "separate");
  v = getenv("CODA_DECODE_MERGE");
  k->decode_merge_last = v && !strcmp(v, "last");
  v = getenv("CODA_DECODE_ROW_SPLIT");
  if (v && (!strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "2") || !strcmp(v, "4") ||
            !strcmp(v, "8")))
    k->decode_row_split = atoi(v);
  else
    k->decode_row_split = -1; /* unset, auto or another value: by shape */
  v = getenv("CODA_DECODE_ROW_STEP");
  k->decode_row_step_on = v && !strcmp(v, "1");
  v = getenv("CODA_OPTIM_OVERLAP");
  k->optim_overlap_on = v && !strcmp(v, "1");
  v = getenv("CODA_CACHE_DIR");
  const char *home = getenv("HOME");
  if (v && *v) copy_str(k->cache_dir, sizeof k->cache_dir, v);
  else if (home && *home && strlen(home) + 13 < sizeof k->cache_dir)
    snprintf(k->cache_dir, sizeof k->cache_dir, "%s/.cache/coda", home);
  copy_str(k->nccl_lib, sizeof k->nccl_lib, getenv("CODA_NCCL_LIB"));
  copy_str(k->cudnn_lib, sizeof k->cudnn_lib, getenv("CODA_CUDNN_LIB"));
  v = getenv("CODA_ATTENTION");
  if (!v || !*v || !strcmp(v, "auto")) k->attention = CODA_ATTENTION_AUTO;
  else if (!strcmp(v, "own")) k->attention = CODA_ATTENTION_OWN;
  else if (!strcmp(v, "cudnn")) k->attention = CODA_ATTENTION_CUDNN;
  else if (!strcmp(v, "cudnn-nondet")) k->attention = CODA_ATTENTION_CUDNN_NONDET;
  else k->attention = CODA_ATTENTION_INVALID;
  v = getenv("CODA_ARCH");
  copy_str(k->arch_raw, sizeof k->arch_raw, v ? v : "");
  if (!v || !*v || !strcmp(v, "auto")) k->arch = CODA_ARCH_AUTO;
  else if (!strcmp(v, "sm90")) k->arch = CODA_ARCH_SM90;
  else if (!strcmp(v, "sm80")) k->arch = CODA_ARCH_SM80;
  else k->arch = CODA_ARCH_INVALID;
  v = getenv("CODA_COMM_TIMEOUT");
  if (v && *v) {
    char *end;
    double t = strtod(v, &end);
    if (!*end && t > 0 && t < 1e9) k->comm_timeout_s = t;
  }
  coda_launch_vars *l = &k->launch;
#define LAUNCH(bit, name, field) launch_var(l, bit, name, l->field, sizeof l->field)
  LAUNCH(CODA_LAUNCH_RANK, "RANK", rank);
  LAUNCH(CODA_LAUNCH_WORLD_SIZE, "WORLD_SIZE", world_size);
  LAUNCH(CODA_LAUNCH_LOCAL_RANK, "LOCAL_RANK", local_rank);
  LAUNCH(CODA_LAUNCH_LOCAL_WORLD_SIZE, "LOCAL_WORLD_SIZE", local_world_size);
  LAUNCH(CODA_LAUNCH_MASTER_ADDR, "MASTER_ADDR", master_addr);
  LAUNCH(CODA_LAUNCH_MASTER_PORT, "MASTER_PORT", master_port);
  LAUNCH(CODA_LAUNCH_SLURM_PROCID, "SLURM_PROCID", slurm_procid);
  LAUNCH(CODA_LAUNCH_SLURM_NTASKS, "SLURM_NTASKS", slurm_ntasks);
  LAUNCH(CODA_LAUNCH_SLURM_LOCALID, "SLURM_LOCALID", slurm_localid);
#undef LAUNCH
  v = getenv("TORCHELASTIC_USE_AGENT_STORE");
  l->agent_store = v && !strcmp(v, "True");
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

coda_status coda_knobs_check(const coda_knobs *k, char *msg, size_t cap) {
  if (k->arch != CODA_ARCH_INVALID) return CODA_OK;
  snprintf(msg, cap, "CODA_ARCH is '%s'%s; it takes %s", k->arch_raw,
           k->arch_raw[0] ? "" : " (too long)", CODA_ARCH_VALUES);
  return CODA_ERR_INVALID_ARGUMENT;
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
