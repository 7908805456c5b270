/* Environment variables, read once per context (see knobs.h). */
#include "base/knobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Records the first knob set to a value it does not take: "NAME='value':
 * allowed are a, b, c (or unset)". */
static void invalid(coda_knobs *k, const char *name, const char *v, const char *allowed) {
  if (k->invalid[0]) return;
  size_t n = (size_t)snprintf(k->invalid, sizeof k->invalid, "%s='%.64s%s': allowed are ", name, v,
                              strlen(v) > 64 ? "..." : "");
  if (n >= sizeof k->invalid) n = sizeof k->invalid - 1;
  for (const char *c = allowed; *c && n + 3 < sizeof k->invalid; c++) {
    if (*c == '|') k->invalid[n++] = ',', k->invalid[n++] = ' ';
    else k->invalid[n++] = *c;
  }
  k->invalid[n] = '\0';
  snprintf(k->invalid + n, sizeof k->invalid - n, " (or unset)");
}

/* The value of a knob that takes one of a few words: the index of v in
 * the '|'-separated list `allowed`, or `dflt` when the variable is unset or
 * empty. Any other value is recorded in k->invalid (the first such knob),
 * which context creation reports naming the variable and the allowed
 * values, instead of running with a default the caller did not ask for. */
static int choice(coda_knobs *k, const char *name, const char *allowed, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  int i = 0;
  for (const char *w = allowed;; i++) {
    const char *bar = strchr(w, '|');
    size_t n = bar ? (size_t)(bar - w) : strlen(w);
    if (strlen(v) == n && !strncmp(v, w, n)) return i;
    if (!bar) break;
    w = bar + 1;
  }
  invalid(k, name, v, allowed);
  return dflt;
}

static int flag(coda_knobs *k, const char *name) { return choice(k, name, "0|1", 0); }

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
  k->debug_sync = flag(k, "CODA_DEBUG_SYNC");
  k->autotune = flag(k, "CODA_AUTOTUNE");
  k->retune = flag(k, "CODA_RETUNE");
  static const coda_epi_schedule sched[] = {CODA_EPI_SCHEDULE_AUTO, CODA_EPI_SCHEDULE_PINGPONG,
                                            CODA_EPI_SCHEDULE_COOPERATIVE};
  k->epi_schedule = sched[choice(k, "CODA_EPI_SCHEDULE", "auto|pingpong|cooperative", 0)];
  k->epi_tma_loads = choice(k, "CODA_EPI_TMA_LOADS", "0|1", 1) == 0 ? -1 : 0;
  k->attn_impl = choice(k, "CODA_ATTN_IMPL", "default|v1", 0) ? CODA_ATTN_IMPL_V1
                                                               : CODA_ATTN_IMPL_DEFAULT;
  k->decode_pdl_off = choice(k, "CODA_DECODE_PDL", "0|1", 1) == 0;
  k->decode_norm_separate = choice(k, "CODA_DECODE_NORM", "fused|separate", 0);
  k->decode_merge_last = choice(k, "CODA_DECODE_MERGE", "kernel|last", 0);
  static const int split[] = {-1, 0, 1, 2, 4, 8}; /* -1: by shape */
  k->decode_row_split = split[choice(k, "CODA_DECODE_ROW_SPLIT", "auto|0|1|2|4|8", 0)];
  k->decode_row_step_on = flag(k, "CODA_DECODE_ROW_STEP");
  k->optim_overlap_on = flag(k, "CODA_OPTIM_OVERLAP");
  const char *v;
  v = getenv("CODA_CACHE_DIR");
  const char *home = getenv("HOME");
  if (v && *v) copy_str(k->cache_dir, sizeof k->cache_dir, v);
  else if (home && *home && strlen(home) + 13 < sizeof k->cache_dir)
    snprintf(k->cache_dir, sizeof k->cache_dir, "%s/.cache/coda", home);
  copy_str(k->nccl_lib, sizeof k->nccl_lib, getenv("CODA_NCCL_LIB"));
  copy_str(k->cudnn_lib, sizeof k->cudnn_lib, getenv("CODA_CUDNN_LIB"));
  /* the words in coda_attention_choice's order; an invalid value also
   * makes the attention calls fail naming it */
  const int att = choice(k, "CODA_ATTENTION", "auto|own|cudnn|cudnn-nondet", -1);
  v = getenv("CODA_ATTENTION");
  k->attention = att >= 0 ? (coda_attention_choice)att
                          : v && *v ? CODA_ATTENTION_INVALID : CODA_ATTENTION_AUTO;
  /* CODA_ARCH: the words in coda_arch_choice's order (base/arch.h) */
  const int arch = choice(k, "CODA_ARCH", "auto|sm90|sm80", -1);
  v = getenv("CODA_ARCH");
  k->arch = arch >= 0 ? (coda_arch_choice)arch : v && *v ? CODA_ARCH_INVALID : CODA_ARCH_AUTO;
  v = getenv("CODA_COMM_TIMEOUT");
  if (v && *v) {
    char *end;
    double t = strtod(v, &end);
    if (!*end && t > 0 && t < 1e9) k->comm_timeout_s = t;
    else invalid(k, "CODA_COMM_TIMEOUT", v, "a number of seconds above 0 and below 1e9");
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
  if (o->arch != CODA_ARCH_AUTO) k->arch = o->arch;
  k->compile_cc = o->compile_cc;
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
