/* The library's tunables: every environment variable coda reads, read in
 * one place (coda_knobs_from_env) when a context is created and kept in the
 * context. Code below the api layer takes them from there, never from the
 * environment. */
#ifndef CODA_BASE_KNOBS_H
#define CODA_BASE_KNOBS_H

#include "coda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_KNOB_PATH_LEN 1024

typedef struct coda_knobs {
  int debug_sync;                /* CODA_DEBUG_SYNC=1 */
  int autotune;                  /* CODA_AUTOTUNE=1 */
  int retune;                    /* CODA_RETUNE=1 */
  coda_epi_schedule epi_schedule; /* CODA_EPI_SCHEDULE=pingpong|cooperative */
  int epi_tma_loads;             /* CODA_EPI_TMA_LOADS=0 gives -1 (off), else 0 (default: on) */
  coda_attn_impl attn_impl;      /* CODA_ATTN_IMPL=v1 */
  /* CODA_CACHE_DIR, else $HOME/.cache/coda; "" when neither is set */
  char cache_dir[CODA_KNOB_PATH_LEN];
  char nccl_lib[CODA_KNOB_PATH_LEN]; /* CODA_NCCL_LIB, else "" (libnccl.so.2) */
  /* CODA_COMM_TIMEOUT=SECONDS: how long a CPU collective waits for a peer
   * rank before it fails naming the missing ranks; 0 when unset (the
   * communicator's default) */
  double comm_timeout_s;
} coda_knobs;

/* Reads the environment into k. The only getenv of the library. */
void coda_knobs_from_env(coda_knobs *k);

/* Resolves options over the environment: a nonzero option field wins, a
 * zero one takes the environment's value (the knobs of the context). */
void coda_knobs_resolve(const coda_context_options *o, coda_knobs *k);

/* "<cache_dir>/<file>" into buf; 0 when there is no cache directory or the
 * path does not fit. */
int coda_knobs_cache_path(const coda_knobs *k, const char *file, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
