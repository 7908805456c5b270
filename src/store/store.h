/* Internal interface of src/store: a model on disk. Checkpoints (weights,
 * AdamW moments and the trainer's state in one safetensors file, with the
 * tokenizer carried beside it: checkpoint.c) and the Hugging Face Llama
 * layout (hf.c, hf_config.c). */
#ifndef CODA_STORE_H
#define CODA_STORE_H

#include "io/io.h"
#include "model/model.h"

#include <stdint.h>
#include <stdio.h>

/* --------------------------------------------------------- checkpoints */

typedef struct coda_train_state {
  int64_t step;        /* optimizer steps done */
  uint64_t rng;        /* sampler RNG state */
  uint64_t drawn;      /* sequences drawn */
  double last_loss;
  /* The tokenizer carried beside the checkpoint (coda_checkpoint_carry_
   * tokenizer): its file name in the checkpoint's directory, CRC-32 and
   * size; tokenizer_file "": none recorded. */
  char tokenizer_file[64];
  uint32_t tokenizer_crc32;
  uint64_t tokenizer_bytes;
} coda_train_state;

/* The largest tokenizer.json carried with a checkpoint. */
#define CODA_TOKENIZER_FILE_MAX ((uint64_t)1 << 30)
/* Puts the tokenizer file src beside the checkpoint path ckpt as
 * tokenizer.json, atomically (nothing to do when it is that file already
 * or a byte-identical copy; a different file already there is refused,
 * never replaced), checks that it loads and that its vocabulary fits
 * `vocab` (0: not checked), and records its name, CRC-32 and size in st. */
coda_status coda_checkpoint_carry_tokenizer(coda_context ctx, const char *src, const char *ckpt,
                                            int vocab, coda_train_state *st);

/* Saves weights, m, v (fp32) and the state into one safetensors file. */
coda_status coda_checkpoint_save(coda_context ctx, const char *path,
                                 coda_model *model, const float *m,
                                 const float *v, const coda_train_state *st);
/* The same from the plan engine's device state (one process): each tensor
 * is downloaded a chunk at a time while the file is written, so the host
 * holds no copy of the weights or moments. */
coda_status coda_checkpoint_save_device(coda_context ctx, const char *path, coda_model *model,
                                        const coda_train_state *st);
/* The configuration of a checkpoint about to be loaded on ctx: as
 * coda_checkpoint_config, and refused when the CPU backend would hold
 * more than CODA_CPU_MAX_PARAMS parameters (the configuration comes from
 * the file: bounded before anything is allocated). */
coda_status coda_checkpoint_config_to_load(coda_context ctx, const char *path,
                                           coda_model_config *cfg);
/* Reads the configuration stored in a checkpoint. */
coda_status coda_checkpoint_config(coda_context ctx, const char *path,
                                   coda_model_config *cfg);
/* Loads into an existing model of the same configuration; m / v / st may
 * be NULL (weights only). */
coda_status coda_checkpoint_load(coda_context ctx, const char *path,
                                 coda_model *model, float *m, float *v,
                                 coda_train_state *st);

/* The Hugging Face layout (config.json + model.safetensors) of the
 * families of the family table: hf.c (weights), hf_config.c (config.json). */
coda_status coda_hf_export(coda_context ctx, coda_model *model,
                           const char *dir);
coda_status coda_hf_import(coda_context ctx, const char *dir,
                           coda_engine engine, coda_model **out);
/* "a/b", malloc'ed (NULL: out of memory). */
char *coda_hf_join(const char *a, const char *b);
/* A JSON file whose root must be an object with unique keys. */
coda_status coda_hf_read_json(coda_context ctx, const char *path, coda_json_doc **out);
/* The model config.json at path describes, or the reason coda cannot run it. */
coda_status coda_hf_read_config(coda_context ctx, const char *path, coda_model_config *c);

#endif
