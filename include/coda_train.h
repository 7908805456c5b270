/* coda: the trainer, sampling, checkpoints (Hugging Face import and
 * export) and corpus preparation. Includes coda_nn.h. */
#ifndef CODA_TRAIN_PUBLIC_H
#define CODA_TRAIN_PUBLIC_H

#include "coda_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- trainer */
/* Training and sampling of the model families of coda_model_config.family
 * (Llama 3, Qwen3, GPT-2, Gemma 3: docs/models.md; src/model, src/train).
 * Tokens are bytes (vocab 256, token = byte value) unless a BPE tokenizer
 * (coda_tokenizer.h) is given. */

/* A data-parallel group: the ranks of one training run, each rank a process
 * made by the launcher of `coda train --ranks N` (coda_dist_launch
 * below, which forks the ranks and hands each its handle), or started by
 * another launcher and joined with coda_dist_join. */
typedef struct coda_comm_s *coda_comm;

#define CODA_DIST_MAX_RANKS 64

/* CPU: host collectives, over shared memory between forked ranks or over
 * TCP between joined ones; NCCL: one GPU per rank. */
typedef enum coda_comm_kind { CODA_COMM_CPU = 0, CODA_COMM_NCCL = 1 } coda_comm_kind;

/* This process's rank, the group's size and kind (NULL: rank 0 of 1, CPU). */
int coda_comm_rank(const coda_comm c);
int coda_comm_size(const coda_comm c);
coda_comm_kind coda_comm_get_kind(const coda_comm c);

/* ---- data-parallel launcher (src/dist) ---- */

/* The body of one rank: returns the process exit status (0: success). */
typedef int (*coda_rank_main)(coda_comm comm, void *user);

/* Forks `ranks` processes (1 .. CODA_DIST_MAX_RANKS), each with its
 * communicator of `kind`, runs fn in each and waits for all. Children get
 * NCCL_NVLS_ENABLE=0 unless it is set (NVLink multicast stays off) and die
 * with the parent. If a rank fails (nonzero status or a signal), the others
 * are asked to stop, then terminated, and a message naming the rank goes to
 * err. Returns 0 when every rank returned 0; otherwise the failing rank's
 * status (or the common status when all ranks returned the same nonzero
 * value, e.g. 3 for a non-finite loss), 1 for a signal or launch error. */
int coda_dist_launch(int ranks, coda_comm_kind kind, coda_rank_main fn, void *user, char *err,
                     size_t errlen);

/* ---- jobs started by another launcher (torchrun, Slurm's srun) ---- */

/* The most ranks of a job started by another launcher. */
#define CODA_DIST_MAX_JOINED_RANKS 4096

/* A launcher's rank environment, read by coda_dist_env_read. */
typedef struct coda_dist_env {
  int world_size;       /* ranks of the job; 0: no launcher's environment */
  int rank;             /* this process, 0 .. world_size - 1 */
  int local_rank;       /* this process on its host: the GPU it uses (LOCAL_RANK; else
                         * RANK modulo LOCAL_WORLD_SIZE, or RANK) */
  int local_world_size; /* ranks on this host; 0 when the launcher did not say */
  char source[16];      /* "torchrun" (RANK, WORLD_SIZE) or "slurm" (SLURM_PROCID, ...) */
  char master_addr[256];
  int master_port;      /* MASTER_PORT as set */
  int rendezvous_port;  /* where rank 0 listens: MASTER_PORT, or MASTER_PORT + 1 under
                         * torchrun when its agent serves its store on MASTER_PORT */
} coda_dist_env;

/* Reads the rank environment: RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, or set by hand);
 * else SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID when MASTER_ADDR and
 * MASTER_PORT are set too (srun). None of them: env->world_size = 0.
 * Returns 0, or -1 with the reason in err for an inconsistent environment
 * (RANK without WORLD_SIZE, RANK >= WORLD_SIZE, a value that is not a
 * number, no MASTER_ADDR/MASTER_PORT for a job of several ranks). */
int coda_dist_env_read(coda_dist_env *env, char *err, size_t errlen);

/* Joins the job of env (world_size >= 2) from this process: rank 0 listens
 * on env->rendezvous_port, the others connect to MASTER_ADDR with retries;
 * the rendezvous checks that every rank agrees on the job's size and
 * kind, hands out the NCCL unique id (kind NCCL; the rank's GPU is
 * local_rank) and, for the CPU kind, its connections carry the
 * collectives (a star through rank 0; sums in rank order, so the results
 * equal those of forked ranks bit for bit). Then runs fn with this rank's
 * communicator. The rendezvous and every collective time out after
 * CODA_COMM_TIMEOUT seconds (defaults: 300 s to join, 600 s per
 * collective); a rank that dies, fails or stops answering makes the
 * collectives of the others fail with a message naming it. Returns fn's
 * status, or 1 with err set when the job could not be joined. */
int coda_dist_join(const coda_dist_env *env, coda_comm_kind kind, coda_rank_main fn, void *user,
                   char *err, size_t errlen);

/* The number of usable CUDA devices, counted in a short-lived child process
 * so that the caller stays free of CUDA state and may fork afterwards.
 * 0 in a build without CUDA or without a driver; -1 when the count failed. */
int coda_dist_gpu_count(void);

/* Which model implementation trains: AUTO = the block plans where they
 * are available, else the host reference; the GPU runs the plans only.
 * The plans run the llama and qwen3 families (Llama's block, Qwen3's with
 * its QK-norm) and gpt2 (GPT-2's block and head plans), on the CPU and on
 * one GPU; a shape a family's plans cannot run (a Qwen3 head_dim
 * that does not tile) is refused with the reason, never moved to the
 * reference engine silently. On the CPU AUTO takes the host reference for
 * gpt2 and gemma3, on the GPU the plans; PLANS refuses gemma3 by name, and
 * so does the GPU (and gpt2 data parallel on GPUs). */
typedef enum coda_train_engine {
  CODA_TRAIN_ENGINE_AUTO = 0,
  CODA_TRAIN_ENGINE_REFERENCE = 1, /* host reference (CPU only) */
  CODA_TRAIN_ENGINE_PLANS = 2      /* block plans */
} coda_train_engine;

/* What the optimizer keeps (coda_train_options.optim_state). */
typedef enum coda_optim_state {
  /* fp32 master weights and fp32 AdamW moments; the plans read a bf16
   * copy of the master (30 bytes moved per parameter on the GPU) */
  CODA_OPTIM_STATE_FP32 = 0,
  /* bf16 weights and bf16 moments only, each update rounded
   * stochastically, deterministic from the seed (docs/training.md): 14
   * bytes moved and 8 bytes of memory less per parameter; one process */
  CODA_OPTIM_STATE_BF16 = 1
} coda_optim_state;

/* How a run ended (coda_train_summary.stopped). */
typedef enum coda_train_stop {
  CODA_TRAIN_FINISHED = 0,    /* every step ran */
  CODA_TRAIN_INTERRUPTED = 1, /* should_stop asked; the step was saved (none
                               * when it came before the first step) */
  CODA_TRAIN_NONFINITE = 2    /* loss or gradient norm not finite (bad_step) */
} coda_train_stop;

typedef struct coda_train_summary {
  int64_t steps_done;
  double first_loss, final_loss; /* training loss of the first/last step */
  double first_val, final_val;   /* validation loss (NaN if none) */
  double seconds, tokens_per_s;
  coda_train_stop stopped;
  int64_t bad_step; /* the step that was not finite (CODA_TRAIN_NONFINITE) */
  char checkpoint[1024]; /* last checkpoint written */
  /* From coda_train's start to the end of its first step (model set-up,
   * data, device state, kernels, the first step itself); NaN without a
   * step. */
  double first_step_seconds;
  /* Time spent writing checkpoints (device download and file), all saves. */
  double save_seconds;
  int saves;
} coda_train_summary;

/* What a progress report is about (coda_train_progress.event). */
typedef enum coda_train_event {
  CODA_TRAIN_EVENT_PREPARE = 0,     /* token shards missing: preparing them from
                                     * corpus_dir into data_dir */
  CODA_TRAIN_EVENT_START = 1,       /* model and data ready: model, params,
                                     * engine, train/val tokens, batch, seq,
                                     * accum, tokens_per_step, steps, resumed,
                                     * ranks */
  CODA_TRAIN_EVENT_VALIDATION = 2,  /* the validation before the first step
                                     * (step 0, val_loss) */
  CODA_TRAIN_EVENT_STEP = 3,        /* an optimizer step finished: step, loss, lr,
                                     * grad_norm, tokens_per_s, step_seconds,
                                     * mfu, memory, elapsed; val_loss when this
                                     * step was validated (else NaN) */
  CODA_TRAIN_EVENT_INTERRUPTED = 4, /* should_stop asked: step saved to checkpoint */
  CODA_TRAIN_EVENT_NONFINITE = 5,   /* stopping: step's loss or grad_norm is not
                                     * finite; checkpoint = the last good one
                                     * (NULL if none) */
  CODA_TRAIN_EVENT_WARNING = 6,     /* a non-fatal problem: message */
  CODA_TRAIN_EVENT_DONE = 7,        /* the run's summary (also when quiet):
                                     * summary, loss_curve, and mfu,
                                     * flops_per_token over the whole run */
  CODA_TRAIN_EVENT_PROFILE = 8      /* options.profile: the time per phase of a
                                     * step (profile), just before DONE (also
                                     * when quiet) */
} coda_train_event;

/* One phase of the step profile (coda_train_profile.phase). */
typedef struct coda_train_profile_phase {
  const char *name;
  double ms;       /* per step: mean over the profiled steps */
  double share;    /* ms / the step's wall time */
  double floor_ms; /* a lower bound per step: the phase's GEMM flops at
                    * peak_flops, or its bytes at peak_bandwidth; NaN when
                    * there is none (or the peak is not given) */
  double block_mean_ms, block_max_ms; /* block phases: per block (the mean
                                       * over blocks and the slowest); else
                                       * NaN */
} coda_train_profile_phase;

#define CODA_TRAIN_PROFILE_PHASES 12

/* The profile of a training step (CODA_TRAIN_EVENT_PROFILE). Every phase
 * but the last is the time between markers placed around its work on the
 * backend in its order of work: on CUDA, events on the context's stream
 * (device time, with the launch gaps inside the phase); on the CPU backend,
 * the host clock. The phases are, in order: "weights to bf16" (rounding the
 * fp32 master into the plans' weights), "embedding" (lookup and its
 * gradient), "blocks forward", "head + loss" (forward and backward),
 * "blocks backward" (with the weight-gradient accumulation), "gradient
 * norm", "optimizer" (zeroing the gradient and AdamW), "gradient
 * reduction" (data parallel: what the compute stream waits for of the
 * reduce-scatters and the weights' all-gather; the communication under the
 * backward is not counted), "uploads (H2D)" (tokens and targets), "reads
 * (D2H)" (the loss and the norm's partial sums), and last "host waits and
 * launch gaps": the step's wall time minus the sum of the others. A phase
 * that did not run reads 0. The reference engine has no markers in the
 * model (its forward and backward fall in the last row). Data parallel:
 * rank 0's profile. */
typedef struct coda_train_profile {
  int64_t steps;      /* steps profiled */
  int64_t warmup;     /* steps before them, not profiled */
  double step_ms;     /* wall time per step (mean) */
  double device_ms;   /* sum of the timed phases per step */
  int device_clock;   /* 1: device events (CUDA); 0: the host clock */
  int layers;         /* blocks (for the per-block figures) */
  int incomplete;     /* 1: markers ran out, some phases were not timed
                       * (their time is in the last row) */
  int nphase;
  coda_train_profile_phase phase[CODA_TRAIN_PROFILE_PHASES];
} coda_train_profile;

/* One progress report of coda_train, valid only during the callback. Fields
 * not named by the event are zero (NaN for val_loss and mfu). On a
 * data-parallel run only rank 0 reports; rates count every rank's tokens. */
typedef struct coda_train_progress {
  coda_train_event event;
  int64_t step;          /* optimizer steps done */
  double loss;           /* training loss of the step (mean over micro-batches) */
  double val_loss;       /* validation loss, NaN when not measured */
  double lr, grad_norm;  /* learning rate used, gradient norm before clipping */
  double tokens_per_s;   /* STEP: this step's rate; DONE: the run's */
  double step_seconds;   /* wall time of the step */
  double elapsed_seconds;/* since coda_train started the first step */
  double mfu;            /* model-flops utilization per rank, in [0, 1]: NaN
                          * unless peak_flops is given and the context is
                          * CUDA (flops/token in coda_train's source) */
  double flops_per_token;/* training flops per token of the model */
  double peak_flops;     /* the option peak_flops */
  int device_memory;     /* 1: device_bytes is measured (CUDA context) */
  size_t device_bytes;   /* device memory in use */
  size_t host_bytes;     /* resident host memory of the process */
  size_t library_bytes;  /* what the library holds through the context's
                          * allocations (coda_memory_stats: weights, master
                          * copy, gradients, moments, plan buffers,
                          * workspaces; device memory on a CUDA context) */
  /* START */
  const coda_model_config *model;
  int64_t params;
  coda_train_engine engine; /* the engine chosen (never AUTO) */
  int gpu;               /* 1: the context is CUDA */
  uint64_t train_tokens, val_tokens;
  int batch, seq, accum, ranks;
  int sharded_weights;   /* START: data parallel with the weights sharded (ZeRO-3) */
  int64_t tokens_per_step, steps;
  int resumed;
  /* PREPARE */
  const char *data_dir, *corpus_dir;
  /* INTERRUPTED, NONFINITE, DONE */
  const char *checkpoint;
  /* DONE */
  const coda_train_summary *summary;
  const char *loss_curve; /* loss.svg; NULL when it was not written (see WARNING) */
  /* PROFILE */
  const coda_train_profile *profile;
  /* WARNING */
  const char *message;
} coda_train_progress;

typedef struct coda_train_options {
  size_t struct_size;   /* sizeof(coda_train_options) (coda.h, "Versioned option structs") */
  coda_model_config model;
  int batch;             /* sequences per micro-batch */
  int accum;             /* micro-batches per optimizer step */
  int64_t steps;         /* total optimizer steps (also when resuming) */
  int64_t warmup;        /* linear warm-up steps */
  double lr, min_lr_ratio; /* peak learning rate; cosine floor = lr·ratio */
  double weight_decay, beta1, beta2, eps;
  double clip;           /* global gradient-norm clip (<= 0: off) */
  uint64_t seed;         /* initialization and data order */
  int val_every;         /* validation every N steps (0: only at the end) */
  int val_batches;       /* micro-batches per validation */
  int save_every;        /* checkpoint every N steps (0: only at the end) */
  const char *out_dir;   /* checkpoints, loss curve, log */
  const char *resume;    /* checkpoint to resume from, or NULL */
  const char *init;      /* checkpoint whose weights start a fresh run */
  const char *data_dir;  /* train.tok / val.tok (default out_dir/data), prepared
                          * from corpus_dir when both are missing; one without
                          * the other is refused (a shard is never
                          * overwritten), and so is a data_dir that does not
                          * exist when there is no corpus_dir */
  const char *corpus_dir;/* text files to prepare from when the shards are
                          * missing; no default (NULL and no shards:
                          * CODA_ERR_INVALID_ARGUMENT) */
  const char *tokenizer; /* the tokenizer.json the tokens come from (NULL: byte
                          * tokens, none recorded): copied beside the
                          * checkpoint as out_dir/tokenizer.json (an
                          * existing different file there is refused) and
                          * named with its CRC-32 in every checkpoint
                          * (coda_checkpoint_tokenizer); its vocabulary must
                          * fit the model's */
  coda_train_engine engine;
  int quiet;             /* progress gets only DONE, WARNING, NONFINITE and
                          * INTERRUPTED */
  /* Polled once per step and between validation batches; nonzero stops
   * after the step (with a save; a validation in progress is cut short). */
  int (*should_stop)(void *user);
  void *user;            /* passed to should_stop and progress */
  /* Progress reports (NULL: none; the library itself prints nothing). */
  void (*progress)(const coda_train_progress *p, void *user);
  double peak_flops;     /* peak FLOP/s of one device for the MFU (e.g. 989e12,
                          * H100/H200 dense bf16); 0 = unknown: no MFU */
  double peak_bandwidth; /* peak memory bandwidth of one device in bytes/s for
                          * the profile's floors (e.g. 4.3e12, H200); 0 =
                          * unknown: no bandwidth floors */
  /* Step profile (PROFILE event before DONE): nonzero times the phases of
   * every step after the first `profile_warmup` of this run (the plan
   * engine). Off: no markers, nothing recorded. */
  int profile;
  int profile_warmup;    /* steps not profiled (compilation, tuning, first
                          * allocations); clipped so one step is profiled */
  /* Data parallel (NULL: one process). Every rank calls coda_train with the
   * same options; batch is per rank, so a step sees ranks x batch x accum
   * sequences, the same ones one process with batch ranks x batch would.
   * Gradients are averaged, the optimizer state is sharded (ZeRO-1); rank
   * 0 alone reports progress, logs and writes checkpoints (in the
   * one-process format). */
  coda_comm comm;
  /* Data parallel: 1 shards the weights and gradients too (ZeRO-3): each
   * bucket (embedding, layer, head) is all-gathered before the forward and
   * the backward read it and released after, and its gradient is
   * reduce-scattered as soon as the backward completes it. The CPU
   * reference engine only, for now (its full-size buffers stay allocated:
   * released weights are overwritten with NaN, so the CPU run checks the
   * schedule and the arithmetic, not the memory). 0: ZeRO-1. */
  int shard_weights;
  /* Fields of model the caller set explicitly (CODA_MODEL_SET_* bits):
   * with resume or init the checkpoint's configuration is used, and one
   * that differs in a field set here is refused, not silently taken. */
  unsigned model_set;
  /* GPU plan engine: before the first step, time each fused GEMM step of
   * the block and head plans under its schedules and unfused
   * (coda_plan_tune_fusion; the choices are cached on disk, so later runs
   * of the same shapes only read them). 0: the built-in rule. Default 1. */
  int tune_plans;
  /* Plan engine: 1 = the head keeps its logits for the backward
   * (CODA_LLAMA_KEEP_LOGITS, coda_nn.h): one vocabulary-wide GEMM a step
   * fewer for batch x seq x vocab bf16 activations; 0 = the backward
   * recomputes them; -1 (the default) = automatic: kept on a GPU where
   * they take at most 1/16 of the device's memory, recomputed otherwise
   * and on the CPU (docs/decisions.md). */
  int keep_logits;
  /* Called after every validation micro-batch with the batches done and
   * their number (rank 0, not when quiet; NULL: none), so that a caller can
   * show the progress of a long validation; user is the one above. */
  void (*validation_progress)(int batches_done, int batches, void *user);
  /* The optimizer's state (coda_optim_state): fp32 (the default) or
   * bf16. A checkpoint stores it as fp32 either way; resuming in bf16
   * rounds it to the nearest bf16 (exact for a bf16 run's checkpoint). */
  coda_optim_state optim_state;
} coda_train_options;

enum {
  CODA_MODEL_SET_VOCAB = 1, CODA_MODEL_SET_DIM = 2, CODA_MODEL_SET_LAYERS = 4,
  CODA_MODEL_SET_HEADS = 8, CODA_MODEL_SET_KV_HEADS = 16, CODA_MODEL_SET_FFN = 32,
  CODA_MODEL_SET_SEQ = 64, CODA_MODEL_SET_TIED = 128, CODA_MODEL_SET_FAMILY = 256,
  CODA_MODEL_SET_HEAD_DIM = 512,
  CODA_MODEL_SET_WINDOW = 1024, /* sliding_window (llama, gemma3) and sliding_pattern (gemma3) */
  CODA_MODEL_SET_ALL = 2047
};

/* Defaults (struct_size set): the "tiny" model, no corpus directory, no
 * progress callback, peak_flops 0. */
coda_train_options coda_train_default_options(void);
coda_status coda_train(coda_context ctx, const coda_train_options *o,
                       coda_train_summary *summary);

typedef struct coda_generate_options {
  size_t struct_size;   /* sizeof(coda_generate_options) (coda.h, "Versioned option structs") */
  const char *checkpoint;
  const char *prompt;
  int max_tokens;
  double temperature; /* 0: greedy */
  int top_k;          /* 0: all */
  uint64_t seed;
} coda_generate_options;
/* struct_size set, every other member 0. */
coda_generate_options coda_generate_default_options(void);

/* Samples text after the prompt, by full recompute through the block
 * plans (bf16 weights) for the llama family and through the host
 * reference engine (fp32) for the others (the host decoder's numbers);
 * *text is malloc'ed (caller frees) and
 * NUL-terminated, but the bytes may hold NUL themselves: coda_generate_n
 * also gives their count. Non-finite logits (a checkpoint of NaN or inf
 * weights) are an error, not empty text. */
coda_status coda_generate(coda_context ctx, const coda_generate_options *o,
                          char **text);
coda_status coda_generate_n(coda_context ctx, const coda_generate_options *o,
                            char **text, size_t *len);

/* Hugging Face layout of the model's family (LlamaForCausalLM,
 * Qwen3ForCausalLM, GPT2LMHeadModel, Gemma3ForCausalLM: config.json +
 * model.safetensors, HF
 * tensor names, half-split RoPE rows, separate gate/up, GPT-2's Conv1D
 * weights transposed): export the weights of a
 * checkpoint, or import them into a weights-only checkpoint (usable with
 * coda_train_options.init and coda_generate; the folder's tokenizer.json,
 * if any, is put beside it and named in it, as training does). */
coda_status coda_hf_export_checkpoint(coda_context ctx, const char *checkpoint,
                                      const char *hf_dir);
coda_status coda_hf_import_checkpoint(coda_context ctx, const char *hf_dir,
                                      const char *checkpoint);

/* The model configuration of a Hugging Face directory's config.json (its
 * family from model_type / architectures),
 * checked as the import checks it (what coda does not run is refused by
 * name); no weight is read, so `tied` is the file's tie_word_embeddings:
 * the import unties a tied head where the weights hold an lm_head.weight
 * that differs from the embedding (with a warning, coda_warnings), as
 * transformers keeps both. */
coda_status coda_hf_config(coda_context ctx, const char *hf_dir, coda_model_config *cfg);

/* Writes train.tok / val.tok into out_dir from the text files of src_dir
 * (required: CODA_ERR_INVALID_ARGUMENT if NULL). */
coda_status coda_prepare_corpus(coda_context ctx, const char *src_dir,
                                const char *out_dir);

/* The model configuration of a coda checkpoint (its header alone is read). */
coda_status coda_checkpoint_config(coda_context ctx, const char *path, coda_model_config *cfg);

/* The tokenizer that goes with a checkpoint (docs/training.md,
 * "Checkpoints carry their tokenizer"), *path malloc'ed, NULL: byte tokens.
 *  - a coda checkpoint whose metadata names a tokenizer (tokenizer.file,
 *    written by training with a tokenizer): that file beside the
 *    checkpoint, its size and CRC-32 verified against the metadata; a
 *    missing or changed file is CODA_ERR_IO naming it;
 *  - a coda checkpoint that names none: tokenizer.json beside it when
 *    there is one (checkpoints written before tokenizers were recorded);
 *  - a directory (a Hugging Face model folder): its tokenizer.json when
 *    there is one.
 * *recorded (NULL: not wanted) is 1 in the first case. */
coda_status coda_checkpoint_tokenizer(coda_context ctx, const char *checkpoint, char **path,
                                      int *recorded);

/* ------------------------------------------------------------ evaluation */

typedef struct coda_eval_options {
  size_t struct_size;   /* sizeof(coda_eval_options) (coda.h, "Versioned option structs") */
  const char *checkpoint; /* a coda checkpoint, or a Hugging Face directory (Llama, Qwen3)
                           * (config.json + safetensors), imported in memory */
  const char *shard;      /* a token shard (train.tok, val.tok) */
  int batch;              /* windows per forward (0: 8) */
  int seq;                /* window length (0: the model's; at most the model's) */
  int64_t max_windows;    /* at most this many windows from the start (0: all) */
  coda_train_engine engine; /* AUTO: the plans (bf16 weights and activations, fp32
                             * compute); REFERENCE: the host fp32 engine */
  /* Called after every batch of windows with the windows scored so far
   * and their total (NULL: none; the library itself prints nothing). */
  void (*progress)(int64_t windows_done, int64_t windows, void *user);
  void *user;
} coda_eval_options;
/* struct_size set, every other member 0 (their defaults as noted). */
coda_eval_options coda_eval_default_options(void);

typedef struct coda_eval_result {
  double loss;       /* mean cross-entropy (nats) over the targets */
  double perplexity; /* exp(loss) */
  int64_t tokens;    /* targets scored */
  int64_t windows;
} coda_eval_result;

/* Scores the shard in consecutive windows of seq + 1 tokens (window w:
 * inputs w·seq .. w·seq + seq − 1, each predicting the next token; the
 * tail shorter than a window is left out): the same numbers for any batch.
 * The engine is o->engine (AUTO: the plans where available). A shard
 * shorter than one window is CODA_ERR_INVALID_ARGUMENT naming it. The
 * shard's tokens must be the model's: where the shard's directory holds
 * the stamp of prepared shards (source.txt, "tokenizer PATH"), a tokenizer
 * other than the checkpoint's (coda_checkpoint_tokenizer; compared byte
 * for byte) is CODA_ERR_INVALID_ARGUMENT naming both, and so are byte
 * shards (the stamp's "(bytes)", or vocabulary 256 without a stamp) on a
 * model with a tokenizer and tokenizer shards on a byte model; a stamp's
 * tokenizer that cannot be read is a warning (coda_warnings). */
coda_status coda_evaluate(coda_context ctx, const coda_eval_options *o, coda_eval_result *r);

/* ------------------------------------------------------ corpus preparation */

/* What coda_prepare_data reads (CODA_DATA_AUTO: by the name: .jsonl,
 * .bin, else text; a directory: its .txt files, else .jsonl, else .bin). */
typedef enum coda_data_format {
  CODA_DATA_AUTO = 0,
  CODA_DATA_TEXT = 1,  /* a file: documents separated by blank lines; a
                        * directory of .txt files: one document per file */
  CODA_DATA_JSONL = 2, /* one JSON object per line, the document in text_field */
  CODA_DATA_LLMC = 3   /* llm.c token shards (magic 20240520, version 1,
                        * uint16 tokens), taken as they are; a directory
                        * whose names hold "train" and "val" keeps that split */
} coda_data_format;

typedef struct coda_data_options {
  size_t struct_size;   /* sizeof(coda_data_options) (coda.h, "Versioned option structs") */
  const char *path;       /* a file or a directory */
  coda_data_format format;
  const char *text_field; /* JSONL: the field holding the text (NULL: "text") */
  const char *tokenizer;  /* tokenizer.json (BPE, coda_tokenizer.h); NULL: bytes */
  uint64_t min_tokens;    /* the fewest tokens each of train and validation
                           * may have (the sequence length + 1); 0: 2 */
  /* Called every 64 MiB of input and once at the end (NULL: none). */
  void (*progress)(uint64_t bytes_read, uint64_t tokens, void *user);
  void *user;
} coda_data_options;
/* struct_size set, every other member 0 (their defaults as noted). */
coda_data_options coda_data_default_options(void);

/* Tokenizes a corpus into out_dir/train.tok and out_dir/val.tok (uint32
 * shards; written as *.partial and renamed when complete), streaming in
 * bounded memory. Documents are separated by the tokenizer's EOS (after
 * each; "<|endoftext|>" where the post-processor names none) or else its
 * BOS (before each); with bytes, by nothing but their own text. The
 * validation split is deterministic: one block of 8192 tokens in every 20,
 * or, for a corpus of fewer than 20 blocks, its last 20th (at least
 * min_tokens). A corpus too small for both is CODA_ERR_IO naming the path
 * and the count. *n_train, *n_val, *vocab (optional): the tokens written
 * and the shards' vocabulary (the tokenizer's; 256 for bytes; llm.c: the
 * largest token + 1). */
coda_status coda_prepare_data(coda_context ctx, const coda_data_options *o,
                              const char *out_dir, uint64_t *n_train, uint64_t *n_val,
                              uint32_t *vocab);

#ifdef __cplusplus
}
#endif
#endif /* CODA_TRAIN_PUBLIC_H */
