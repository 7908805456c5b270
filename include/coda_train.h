/* coda: the trainer, sampling, checkpoints (Hugging Face import and
 * export) and corpus preparation. Includes coda_nn.h. */
#ifndef CODA_TRAIN_PUBLIC_H
#define CODA_TRAIN_PUBLIC_H

#include "coda_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- trainer */
/* Training and sampling of a Llama-3 style model (src/train). The tokenizer
 * is byte level (vocab 256, token = byte value). */

/* A data-parallel group: the ranks of one training run, each rank a process
 * made by the launcher of `coda train --ranks N` (coda_dist_launch in
 * src/dist/comm.h, which forks the ranks and hands each its handle). */
typedef struct coda_comm_s *coda_comm;

typedef struct coda_train_options {
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
  const char *data_dir;  /* train.tok / val.tok (prepared if missing) */
  const char *corpus_dir;/* text files to prepare from */
  int engine;            /* 0 auto, 1 host reference, 2 block plans */
  int quiet;             /* no per-step lines (the summary still prints) */
  /* Polled once per step; nonzero stops after the step (with a save). */
  int (*should_stop)(void *user);
  void *user;
  /* Data parallel (NULL: one process). Every rank calls coda_train with the
   * same options; batch is per rank, so a step sees ranks x batch x accum
   * sequences, the same ones one process with batch ranks x batch would.
   * Gradients are averaged, the optimizer state is sharded (ZeRO-1); rank
   * 0 alone prints, logs and writes checkpoints (in the one-process format). */
  coda_comm comm;
} coda_train_options;

typedef struct coda_train_summary {
  int64_t steps_done;
  double first_loss, final_loss; /* training loss of the first/last step */
  double first_val, final_val;   /* validation loss (NaN if none) */
  double seconds, tokens_per_s;
  int stopped; /* 0 finished, 1 interrupted, 2 non-finite loss/grad norm */
  int64_t bad_step; /* the step that was not finite (stopped == 2) */
  char checkpoint[1024]; /* last checkpoint written */
} coda_train_summary;

coda_train_options coda_train_default_options(void);
coda_status coda_train(coda_context ctx, const coda_train_options *o,
                       coda_train_summary *summary);

typedef struct coda_generate_options {
  const char *checkpoint;
  const char *prompt;
  int max_tokens;
  double temperature; /* 0: greedy */
  int top_k;          /* 0: all */
  uint64_t seed;
} coda_generate_options;

/* Samples text after the prompt; *text is malloc'ed (caller frees). */
coda_status coda_generate(coda_context ctx, const coda_generate_options *o,
                          char **text);

/* Hugging Face Llama layout (config.json + model.safetensors, HF tensor
 * names, half-split RoPE rows, separate gate/up): export the weights of a
 * checkpoint, or import them into a weights-only checkpoint (usable with
 * coda_train_options.init and coda_generate). */
coda_status coda_hf_export_checkpoint(coda_context ctx, const char *checkpoint,
                                      const char *hf_dir);
coda_status coda_hf_import_checkpoint(coda_context ctx, const char *hf_dir,
                                      const char *checkpoint);

/* Writes train.tok / val.tok into out_dir from the text files of src_dir. */
coda_status coda_prepare_corpus(coda_context ctx, const char *src_dir,
                                const char *out_dir);

#ifdef __cplusplus
}
#endif
#endif /* CODA_TRAIN_PUBLIC_H */
