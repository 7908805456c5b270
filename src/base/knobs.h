/* The library's tunables: every environment variable coda reads, read in
 * one place (coda_knobs_from_env) when a context is created and kept in the
 * context. Code below the api layer takes them from there, never from the
 * environment. */
#ifndef CODA_BASE_KNOBS_H
#define CODA_BASE_KNOBS_H

#include "coda.h"
#include "base/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_KNOB_PATH_LEN 1024

/* The rank environment of a job started by another launcher, as the
 * strings it set (src/dist parses and checks them): torchrun's RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
 * Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID. A bit of `set` per
 * variable tells a variable set to "" from one not set. */
enum {
  CODA_LAUNCH_RANK = 1 << 0, CODA_LAUNCH_WORLD_SIZE = 1 << 1, CODA_LAUNCH_LOCAL_RANK = 1 << 2,
  CODA_LAUNCH_LOCAL_WORLD_SIZE = 1 << 3, CODA_LAUNCH_MASTER_ADDR = 1 << 4,
  CODA_LAUNCH_MASTER_PORT = 1 << 5, CODA_LAUNCH_SLURM_PROCID = 1 << 6,
  CODA_LAUNCH_SLURM_NTASKS = 1 << 7, CODA_LAUNCH_SLURM_LOCALID = 1 << 8
};
typedef struct coda_launch_vars {
  int set;
  char rank[32], world_size[32], local_rank[32], local_world_size[32];
  char master_addr[256], master_port[32];
  char slurm_procid[32], slurm_ntasks[32], slurm_localid[32];
  /* TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves its own
   * store on MASTER_PORT, so coda's rendezvous takes the next port */
  int agent_store;
} coda_launch_vars;

/* CODA_ATTENTION: which causal attention the CUDA backend runs. */
typedef enum coda_attention_choice {
  CODA_ATTENTION_AUTO = 0,   /* auto (default): per pass and shape, as measured (cuda_backend.c) */
  CODA_ATTENTION_OWN = 1,    /* own: coda's kernels (attention.cu) */
  CODA_ATTENTION_CUDNN = 2,  /* cudnn: cuDNN or a failure naming why */
  CODA_ATTENTION_CUDNN_NONDET = 3, /* cudnn-nondet: cuDNN, dQ by atomic accumulation */
  CODA_ATTENTION_INVALID = 4 /* any other value: attention calls fail naming it */
} coda_attention_choice;

typedef struct coda_knobs {
  int debug_sync;                /* CODA_DEBUG_SYNC=1 */
  int autotune;                  /* CODA_AUTOTUNE=1 */
  int retune;                    /* CODA_RETUNE=1 */
  coda_epi_schedule epi_schedule; /* CODA_EPI_SCHEDULE=pingpong|cooperative */
  int epi_tma_loads;             /* CODA_EPI_TMA_LOADS=0 gives -1 (off), else 0 (default: on) */
  coda_attn_impl attn_impl;      /* CODA_ATTN_IMPL=v1 */
  /* CODA_DECODE_PDL=0: the decoder's kernels launch without programmatic
   * dependent launch (each waits for the previous one to end) */
  int decode_pdl_off;
  /* CODA_DECODE_NORM=separate: a one-row decode GEMV reads the bf16 row
   * the RMSNorm kernel wrote instead of applying the norm on load */
  int decode_norm_separate;
  /* CODA_DECODE_MERGE=last: the decode attention merges its splits in the
   * last block of each head group instead of in a kernel of its own (not
   * the default: measured slower, bench/results/gpu-2026-12-07.md) */
  int decode_merge_last;
  /* CODA_DECODE_ROW_SPLIT=0|1|2|4|8|auto: warps per column pair of the
   * one-row decode GEMV, its first weight loads before the wait (-1:
   * unset, auto or another value, by shape; 0: one warp a pair, no loads
   * before the wait) */
  int decode_row_split;
  /* CODA_DECODE_ROW_STEP=1: a one-row decode step runs as one persistent
   * kernel (decode_row_step.cu) instead of its separate kernels */
  int decode_row_step_on;
  /* CODA_OPTIM_OVERLAP=1: the trainer's AdamW and gradient norm run group
   * by group on a side queue beside the forward and backward instead of
   * after the backward on the context's stream */
  int optim_overlap_on;
  /* CODA_CACHE_DIR, else $HOME/.cache/coda; "" when neither is set */
  char cache_dir[CODA_KNOB_PATH_LEN];
  char nccl_lib[CODA_KNOB_PATH_LEN]; /* CODA_NCCL_LIB, else "" (libnccl.so.2) */
  /* CODA_ATTENTION=auto|own|cudnn|cudnn-nondet */
  coda_attention_choice attention;
  char cudnn_lib[CODA_KNOB_PATH_LEN]; /* CODA_CUDNN_LIB, else "" (libcudnn.so.9) */
  /* CODA_COMM_TIMEOUT=SECONDS: how long a CPU collective waits for a peer
   * rank before it fails naming the missing ranks; 0 when unset (the
   * communicator's default) */
  double comm_timeout_s;
  coda_launch_vars launch; /* a launcher's rank environment (above) */
  /* CODA_ARCH=auto|sm90|sm80: the CUDA backend's GEMM mainloop (base/arch.h) */
  coda_arch_choice arch;
  /* coda_context_options.compile_cc: the sm80 kernels' target where no GPU
   * decides it (0: 80) */
  int compile_cc;
  /* the first knob set to a value it does not take, named with the values
   * it takes; "" when none. coda_context_create refuses to start with it. */
  char invalid[256];
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
