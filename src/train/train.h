/* Internal interface of the trainer (src/train): data, safetensors,
 * optimizer, model, checkpoints, plotting. The public entry points are in
 * the trainer section of include/coda.h. */
#ifndef CODA_TRAIN_H
#define CODA_TRAIN_H

#include "coda_train.h"
#include "base/internal.h"

#include <stdint.h>
#include <stdio.h>

/* The largest model the CPU trains or evaluates: larger ones only make
 * sense on the GPU (weights + grads + m + v = 16 B each). */
#define CODA_CPU_MAX_PARAMS 200000000LL

/* ------------------------------------------------------------ checksums */

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): crc = coda_crc32(0, p, n)
 * then chained as coda_crc32(crc, p2, n2). */
uint32_t coda_crc32(uint32_t crc, const void *p, size_t n);

/* ------------------------------------------------------------------ RNG */

/* splitmix64: the whole state is one 64-bit word, so it is stored in a
 * checkpoint as a decimal string and resuming draws the same numbers. */
uint64_t coda_rng_next(uint64_t *state);
/* The state after n draws from state s (the stream is a counter: draw k
 * of s is the next draw of coda_rng_skip(s, k)), so a long stream can be
 * drawn in parallel pieces with the same numbers. */
uint64_t coda_rng_skip(uint64_t s, uint64_t n);
/* Uniform in [0, n) (n > 0) by rejection, so there is no modulo bias. */
uint64_t coda_rng_below(uint64_t *state, uint64_t n);
/* Uniform in [0, 1) with 53 random bits. */
double coda_rng_uniform(uint64_t *state);
/* h = x · r ⊙ w per row, r = 1/sqrt(mean(x²) + eps) with the sum of
 * squares in double (rs: the r of each row, or NULL): the reference
 * engine's RMSNorm, which the host decoder shares so that its logits equal
 * the full recompute (model_ref.c). */
void coda_ref_rmsnorm(int nt, const float *x, const float *w, float *h, float *rs, int64_t M,
                      int64_t D, double eps);

/* ----------------------------------------------------------- tokenizer */

/* Byte-level tokenizer: token id = byte value (0..255). There are no
 * special tokens; documents in the corpus keep their own separators. */
#define CODA_TOK_BYTES 256
size_t coda_tok_encode(const char *text, size_t n, uint32_t *out);
/* Writes the bytes of tokens < 256; other ids are written as '?'. */
size_t coda_tok_decode(const uint32_t *tok, size_t n, char *out);

/* --------------------------------------------------------- token shards */

/* Shard file: a 32-byte little-endian header, then `count` tokens.
 *   0  magic "CODATOKS" (8 bytes)
 *   8  u32 version (1)
 *  12  u32 token width in bytes (2 = uint16, 4 = uint32)
 *  16  u64 count
 *  24  u32 vocab size (every token must be < vocab)
 *  28  u32 CRC-32 of the token bytes
 * The file size must equal 32 + count * width exactly. */
#define CODA_SHARD_HEADER 32
coda_status coda_shard_write(coda_context ctx, const char *path,
                             const uint32_t *tok, uint64_t count,
                             uint32_t vocab, int width);
/* Reads and validates a shard; *tok is malloc'ed (free it). */
coda_status coda_shard_read(coda_context ctx, const char *path, uint32_t **tok,
                            uint64_t *count, uint32_t *vocab);

/* The checks of coda_shard_read on a shard's n bytes in memory (header,
 * size, checksum, every token below the vocabulary). */
coda_status coda_shard_check(coda_context ctx, const char *path, const unsigned char *b,
                             size_t n);
/* A shard's tokens as uint32: a uint32 shard is memory-mapped (read in
 * place, so a shard larger than memory trains; checked once, as
 * coda_shard_read checks), a uint16 shard is read and widened. */
typedef struct coda_shard_view {
  const uint32_t *tok;
  uint64_t count;
  uint32_t vocab;
  void *map;       /* the mapping, or NULL */
  size_t map_len;
  uint32_t *owned; /* the widened copy, or NULL */
} coda_shard_view;
coda_status coda_shard_open(coda_context ctx, const char *path, coda_shard_view *v);
void coda_shard_close(coda_shard_view *v);

/* Builds train.tok / val.tok in out_dir from the text files of src_dir
 * (regular files whose names do not end in .dat or .u8, in name order, as
 * bytes) with coda_prepare_data's split: one block of 8192 tokens in every
 * 20, or a small corpus's last 20th (corpus.c, the one rule of every
 * preparation path). val_every is not used: it stays for the callers
 * written when the default corpus was split by documents. */
coda_status coda_prepare_corpus_dir(coda_context ctx, const char *src_dir,
                                    const char *out_dir, int val_every,
                                    uint64_t *n_train, uint64_t *n_val);
/* A test fixture's in-memory text (documents separated by "\n%\n"), as
 * byte shards: every `val_every`-th document goes to the validation
 * shard (a fixed, small split the tests rely on; no user path prepares
 * through it). */
coda_status coda_prepare_corpus_text(coda_context ctx, const char *text,
                                     size_t n, const char *out_dir,
                                     int val_every, uint64_t *n_train,
                                     uint64_t *n_val);

/* Random contiguous windows of a token stream. Every draw advances the
 * RNG; `drawn` counts sequences drawn (the data position). */
typedef struct coda_sampler {
  const uint32_t *tok;
  uint64_t count;
  uint64_t rng;
  uint64_t drawn;
} coda_sampler;
/* Fills inputs/targets (B x T): targets[t] = tokens[start + t + 1]. */
coda_status coda_sampler_batch(coda_context ctx, coda_sampler *s, int B, int T,
                               int32_t *inputs, int32_t *targets);

/* ---------------------------------------------------------- safetensors */

#define CODA_ST_MAX_DIMS 8
typedef struct coda_st_tensor {
  char *name;
  char dtype[8]; /* "F32", "BF16", "F16", "F64", "I32", "I64", "U16", "U8" */
  int ndim;
  int64_t shape[CODA_ST_MAX_DIMS];
  uint64_t begin, end; /* offsets into the data region */
  const unsigned char *data; /* points into the loaded file */
} coda_st_tensor;

typedef struct coda_st_file {
  unsigned char *buf;
  size_t size;
  size_t data_start;
  int n;
  coda_st_tensor *t;
  int nmeta;
  char **meta_key;
  char **meta_val;
} coda_st_file;

/* Loads and validates: header length within the file, JSON structure,
 * known dtypes, shape · dtype size == end − begin, offsets within the data
 * region and not overlapping, unique names. If the metadata has "crc32"
 * the data region's CRC-32 must match, and likewise "header_crc32" for
 * the header; require_crc makes both mandatory. */
coda_status coda_st_load(coda_context ctx, const char *path, int require_crc,
                         coda_st_file *out);
/* The largest header a reader accepts. */
#define CODA_ST_MAX_HEADER (100u << 20)
/* The same, bounded: a file of more than max bytes is refused before it is
 * read. header_only: reads only the length and the header (offsets are
 * checked against the file size, the header checksum is verified, the data
 * is not read: tensors' data is NULL). */
coda_status coda_st_load_ex(coda_context ctx, const char *path, int require_crc,
                            uint64_t max, int header_only, coda_st_file *out);
/* Same from memory (the buffer is copied). */
coda_status coda_st_parse(coda_context ctx, const void *bytes, size_t n,
                          int require_crc, const char *what, coda_st_file *out);
void coda_st_free(coda_st_file *f);
const coda_st_tensor *coda_st_find(const coda_st_file *f, const char *name);
const char *coda_st_meta(const coda_st_file *f, const char *key);
size_t coda_st_dtype_size(const char *dtype);

typedef struct coda_st_entry {
  const char *name;
  const char *dtype;
  int ndim;
  int64_t shape[CODA_ST_MAX_DIMS];
  const void *data; /* little-endian bytes, product(shape) · dtype size */
} coda_st_entry;

/* Writes atomically (a temporary file in the same directory, fsync,
 * rename). Metadata pairs are strings; "crc32" is added (CRC-32 of the
 * data region, 8 hex digits) and "header_crc32" (CRC-32 of the length
 * bytes and the header, its own 8 digits read as '0'). */
coda_status coda_st_save(coda_context ctx, const char *path,
                         const coda_st_entry *e, int n,
                         const char *const *meta_kv, int nmeta);
/* The same with the tensors' bytes from read (entries' data unused):
 * read(user, i, off, dst, n) fills bytes off .. off+n of entry i, in
 * order, a chunk at a time, so the tensors need not be in host memory
 * (e.g. a download from a device). The file is written in one pass: the
 * data first, then the header with its CRCs at the front. */
typedef coda_status (*coda_st_reader)(void *user, int i, uint64_t off, void *dst, size_t n);
coda_status coda_st_save_from(coda_context ctx, const char *path, const coda_st_entry *e, int n,
                              const char *const *meta_kv, int nmeta, coda_st_reader read,
                              void *user);

/* Reads a whole file into *buf (malloc'ed, *n bytes); IO errors and
 * allocation failures become errors naming the path. Only a regular file
 * is read (a directory, FIFO or device is refused without blocking), and
 * only the size fstat gives: the read is bounded. */
coda_status coda_read_file(coda_context ctx, const char *path, unsigned char **buf, size_t *n);
/* The same, refusing a file of more than max bytes. */
coda_status coda_read_file_max(coda_context ctx, const char *path, uint64_t max,
                               unsigned char **buf, size_t *n);
/* What a file that is not a regular one is, for messages ("a directory",
 * "a FIFO", "a device", "a socket", "not a file"), from st_mode. */
const char *coda_file_kind(unsigned mode);
/* Opens path for reading: a regular file of at most max bytes (else an
 * error naming it); *fd_out and its *size. */
coda_status coda_open_regular(coda_context ctx, const char *path, uint64_t max, int *fd_out,
                              uint64_t *size);
/* Reads exactly n bytes at offset off of fd (path names it in errors). */
coda_status coda_read_fd(coda_context ctx, int fd, const char *path, uint64_t off, void *dst,
                         size_t n);

/* A file written in place of path atomically: a temporary next to it,
 * written anywhere (pwrite), then fsync + rename (commit) or removed
 * (abort; a failed write or commit aborts by itself). */
typedef struct coda_atomic_file {
  int fd;
  char *tmp;
  const char *path;
} coda_atomic_file;
coda_status coda_atomic_open(coda_context ctx, const char *path, coda_atomic_file *f);
coda_status coda_atomic_write_at(coda_context ctx, coda_atomic_file *f, uint64_t off,
                                 const void *buf, size_t n);
coda_status coda_atomic_commit(coda_context ctx, coda_atomic_file *f);
void coda_atomic_abort(coda_atomic_file *f);

/* Writes a whole buffer to path atomically (temp file + fsync + rename). */
coda_status coda_write_atomic(coda_context ctx, const char *path,
                              const void *const *parts, const size_t *sizes,
                              int nparts);

/* --------------------------------------------------------- optimizer */

typedef struct coda_adamw {
  double beta1, beta2, eps, weight_decay;
  int threads; /* 0: OpenMP default */
} coda_adamw;

/* One AdamW step (t is the 1-based step count for bias correction):
 *   w ← w − lr·wd·w            (decoupled decay, only when decay != 0)
 *   m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
 *   w ← w − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)        */
void coda_adamw_update(const coda_adamw *opt, int64_t t, double lr, int decay,
                       float *w, const float *g, float *m, float *v, size_t n);

/* Learning rate of the 0-based step s: linear warm-up over `warmup` steps
 * (lr·(s+1)/warmup), then cosine decay from lr to lr·min_ratio at step
 * total−1 (and min afterwards). */
double coda_lr_schedule(int64_t s, int64_t warmup, int64_t total, double lr,
                        double min_ratio);

/* L2 norm of the concatenated gradients (summed in double). */
double coda_grad_norm(const float *g, size_t n);
/* Scales g so its norm is at most max_norm; returns the factor applied. */
double coda_clip_grad(float *g, size_t n, double norm, double max_norm);

/* ------------------------------------------------------------- model */

typedef struct coda_param {
  char name[96];
  int ndim;
  int64_t shape[2];
  size_t offset; /* into the flat weight / gradient / moment buffers */
  size_t size;
  int decay; /* 1 for the matrices of linear layers */
} coda_param;

typedef struct coda_model coda_model;

typedef enum coda_engine {
  CODA_ENGINE_REFERENCE = 0, /* straightforward host code (this folder) */
  CODA_ENGINE_PLANS = 1      /* the Llama-3 block plans of src/nn */
} coda_engine;
/* The engine an option names (trainer.c); AUTO: the plan engine where it
 * is available. */
coda_engine coda_engine_from_option(coda_train_engine e);

coda_status coda_model_create(coda_context ctx, const coda_model_config *cfg,
                              coda_engine engine, coda_model **out);
void coda_model_destroy(coda_model *m);
const coda_model_config *coda_model_cfg(const coda_model *m);
int coda_model_num_params(const coda_model *m);
const coda_param *coda_model_param(const coda_model *m, int i);
const coda_param *coda_model_find(const coda_model *m, const char *name);
float *coda_model_weights(coda_model *m);
float *coda_model_grads(coda_model *m);
size_t coda_model_size(const coda_model *m);
coda_engine coda_model_engine(const coda_model *m);
/* Scaled-normal initialization from a seed (std 0.02; output projections
 * std 0.02/sqrt(2L); norms 1). */
void coda_model_init(coda_model *m, uint64_t seed);
void coda_model_zero_grad(coda_model *m);
/* Forward + backward of one micro-batch (B x T tokens; targets < 0 are
 * ignored). Gradients of grad_scale · mean-loss are ADDED to the gradient
 * buffer. *loss is the mean loss over valid targets, *n_valid their count. */
coda_status coda_model_step(coda_context ctx, coda_model *m,
                            const int32_t *inputs, const int32_t *targets,
                            int B, int T, float grad_scale, double *loss,
                            int64_t *n_valid);
/* Forward only: mean loss over valid targets. */
coda_status coda_model_loss(coda_context ctx, coda_model *m,
                            const int32_t *inputs, const int32_t *targets,
                            int B, int T, double *loss, int64_t *n_valid);
/* Forward only: logits (vocab) of the last position of one sequence. */
coda_status coda_model_last_logits(coda_context ctx, coda_model *m,
                                   const int32_t *inputs, int T,
                                   float *logits);
/* Parameter count of a configuration (weights only). */
int64_t coda_model_config_params(const coda_model_config *c);
/* The bf16 block plan configuration of model c at batch x seq with flags
 * (CODA_LLAMA_*): what the trainer's plans and the decoder's plan prefill
 * build (model_plans.c). */
coda_llama_config coda_model_block_config(const coda_model_config *c, int64_t batch,
                                          int64_t seq, int flags);
/* Engine state slots owned by the model (freed by the engines). */
void **coda_model_ref_slot(coda_model *m);
void **coda_model_plans_slot(coda_model *m);
void coda_ref_free(coda_model *m);
void coda_plans_free(coda_model *m);

/* ---- step profile (profile.c) ----
 * Markers around the phases of a training step on the context's backend
 * (api.h timelines), summed per phase over the profiled steps. Every call
 * takes a NULL profile (profiling off) and then does nothing; begin/end
 * also do nothing between steps that are not recorded. Phases do not nest:
 * each begin is closed by one end. */
typedef enum coda_step_phase {
  CODA_PH_CAST, CODA_PH_EMBED, CODA_PH_BLOCK_FWD, CODA_PH_HEAD, CODA_PH_BLOCK_BWD,
  CODA_PH_NORM, CODA_PH_OPTIM, CODA_PH_REDUCE, CODA_PH_UPLOAD, CODA_PH_READ, CODA_PH_COUNT
} coda_step_phase;
typedef struct coda_prof coda_prof;
/* Room for the markers of one step of accum micro-batches through layers. */
coda_status coda_prof_create(coda_context ctx, int layers, int accum, coda_prof **out);
void coda_prof_destroy(coda_context ctx, coda_prof *p);
void coda_prof_begin(coda_context ctx, coda_prof *p);
void coda_prof_end(coda_context ctx, coda_prof *p, coda_step_phase ph, int block);
/* A step starts (recorded when on) / ended after wall_s seconds: the
 * markers' times are read (waiting for the last) and added up. */
void coda_prof_step_start(coda_prof *p, int on);
coda_status coda_prof_step_end(coda_context ctx, coda_prof *p, double wall_s);
/* The report: floors from the model's GEMM flops per step (tokens per step
 * of this rank) at peak_flops and AdamW's bytes over adam_params fp32
 * values at peak_bw (0: none). */
void coda_prof_report(const coda_prof *p, const coda_model_config *c, double tokens,
                      double adam_params, double peak_flops, double peak_bw, int64_t warmup,
                      int device_clock, coda_train_profile *out);
/* The profile the plan engine marks (NULL: off). */
void coda_model_set_prof(coda_model *m, coda_prof *p);
/* Weight sharding (ZeRO-3) on the reference engine: the forward and
 * backward call these around each bucket of the ZeRO layout (0 the
 * embedding, 1 + i layer i, layers + 1 the head; coda_zero): gather before
 * the bucket's weights are read, release after their last read of the pass,
 * grad_done when the bucket's gradient of this micro-batch is complete. A
 * failing gather or grad_done stops the pass with its status. NULL: none. */
typedef struct coda_ref_hooks {
  void *user;
  coda_status (*gather)(void *user, int bucket);
  void (*release)(void *user, int bucket);
  coda_status (*grad_done)(void *user, int bucket);
} coda_ref_hooks;
void coda_model_set_ref_hooks(coda_model *m, const coda_ref_hooks *h);
const coda_ref_hooks *coda_model_ref_hooks(const coda_model *m);
/* coda_model_init's rule: the stream of a seed, and a parameter's standard
 * deviation (0: a norm weight, all ones). Each matrix takes 2 draws per
 * value, in parameter order. */
uint64_t coda_model_init_stream(uint64_t seed);
double coda_model_init_std(const coda_model *m, const coda_param *p);
/* The plan engine on a GPU times the schedules of its fused steps when it
 * builds its plans (coda_plan_tune_fusion); off by default. */
void coda_model_set_plan_tuning(coda_model *m, int on);
int coda_model_plan_tuning(const coda_model *m);
/* The plan engine's head keeps its logits for the backward
 * (CODA_LLAMA_KEEP_LOGITS); takes effect when the plans are next built. */
void coda_model_set_keep_logits(coda_model *m, int on);
int coda_model_keep_logits(const coda_model *m);
coda_prof *coda_model_prof(coda_model *m);

/* Engine hooks: the reference implementation (model_ref.c) and the plan
 * adapter (model_plans.c). */
coda_status coda_ref_forward(coda_context ctx, coda_model *m,
                             const int32_t *inputs, const int32_t *targets,
                             int B, int T, int backward, float grad_scale,
                             double *loss, int64_t *n_valid, float *last_logits);
int coda_plans_available(void);
coda_status coda_plans_forward(coda_context ctx, coda_model *m,
                               const int32_t *inputs, const int32_t *targets,
                               int B, int T, int backward, float grad_scale,
                               double *loss, int64_t *n_valid,
                               float *last_logits);

/* Plan engine on a CUDA context: the fp32 master weights, the gradient and
 * the AdamW moments live on the device (model_device.c); the host weight
 * buffer is only a staging copy. Every call fails with
 * CODA_ERR_NOT_SUPPORTED unless coda_plans_on_device. */
int coda_plans_on_device(coda_context ctx, coda_model *m);
/* Host weights (and m, v; NULL: zero) -> device; the gradient is zeroed. */
coda_status coda_plans_device_upload(coda_context ctx, coda_model *m, const float *mom,
                                     const float *vel);
/* coda_model_init(m, seed) drawn on the device (one process, no data
 * parallel layout): the host weight buffer is not written; moments and
 * gradient zero. The same numbers as the host's but where a value lies
 * within an ulp of double of a float rounding boundary (log and cos of
 * the two sides may differ by that ulp). */
coda_status coda_plans_device_init(coda_context ctx, coda_model *m, uint64_t seed);
/* n bytes at byte offset off of the device's weights (which 0), first
 * moment (1) or second moment (2), in the host layout, into dst (one
 * process; the data parallel layout is refused). */
coda_status coda_plans_device_read(coda_context ctx, coda_model *m, int which, uint64_t off,
                                   void *dst, size_t n);
/* Device -> host weights (and m, v where not NULL), e.g. for checkpoints. */
coda_status coda_plans_device_download(coda_context ctx, coda_model *m, float *mom, float *vel);
coda_status coda_plans_device_zero_grad(coda_context ctx, coda_model *m);
/* L2 norm of the device gradient: fixed-order partial sums in double. */
coda_status coda_plans_device_grad_norm(coda_context ctx, coda_model *m, double *norm);
/* AdamW (coda_adamw_update's arithmetic) of every parameter on the device,
 * the gradient first multiplied by gscale (the clip factor, 1: none). */
coda_status coda_plans_device_adamw(coda_context ctx, coda_model *m, const coda_adamw *o,
                                    int64_t t, double lr, double gscale);
/* Device memory in use and in total. */
coda_status coda_plans_device_memory(coda_context ctx, size_t *used, size_t *total);

/* ------------------------------------------- data parallel, ZeRO-1 (zero.c) */

/* One bucket of the flat buffer: [off, off + len) in the model layout,
 * padded to N pieces of `piece` at poff in the communication layout; this
 * rank's piece holds `mine` valid values and sits at soff in the shard. */
typedef struct coda_zero_bucket {
  size_t off, len, piece, poff, soff, mine;
} coda_zero_bucket;
/* A stretch of one parameter inside this rank's piece of a bucket. */
typedef struct coda_zero_seg {
  size_t goff, poff, soff, len; /* model, padded and shard offsets */
  int decay;
} coda_zero_seg;
typedef struct coda_zero {
  coda_comm comm;
  int N, r;
  int nb;               /* buckets in flat order: embedding, layers 0..L-1, head */
  coda_zero_bucket *b;
  size_t n, npad, nshard;
  size_t *ppoff;        /* per parameter: offset in the padded layout */
  int nseg;
  coda_zero_seg *seg;
  float *pad, *gs, *ms, *vs; /* CPU engine: padded scratch, shard gradient, moments */
  float *acc;           /* ZeRO-3 with accumulation: one piece of reduced gradient */
} coda_zero;

coda_status coda_zero_create(coda_context ctx, coda_model *m, coda_comm comm, int host_state,
                             coda_zero **out);
void coda_zero_destroy(coda_zero *z);
/* CPU engine: the summed gradient of this rank's shard -> z->gs. */
coda_status coda_zero_cpu_reduce(coda_context ctx, coda_zero *z, const float *G);
double coda_zero_cpu_sumsq(const coda_zero *z);
/* Clip (global norm) and AdamW of this rank's shard of W. */
void coda_zero_cpu_update(coda_zero *z, const coda_adamw *adam, int64_t t, double lr,
                          double norm, double clip, float *W);
/* full <- every rank's piece (from shard, or from full itself when NULL). */
coda_status coda_zero_cpu_gather(coda_context ctx, coda_zero *z, const float *shard, float *full);
/* ZeRO-3 on the CPU engine, bucket by bucket: W's bucket k all-gathered
 * from the ranks' pieces; its other ranks' pieces poisoned with NaN (so a
 * read of a weight not gathered shows as a non-finite loss); G's bucket k
 * reduce-scattered into the shard gradient (added to it when accumulate)
 * and zeroed for the next micro-batch. */
coda_status coda_zero_cpu_gather_bucket(coda_context ctx, coda_zero *z, int k, float *W);
void coda_zero_cpu_release_bucket(coda_zero *z, int k, float *W);
coda_status coda_zero_cpu_reduce_bucket(coda_context ctx, coda_zero *z, int k, float *G,
                                        int accumulate);
/* The shard's moments from full-size arrays (NULL: zero). */
void coda_zero_cpu_take(coda_zero *z, const float *mom, const float *vel);

/* GPU engine (model_device.c): set before the first device upload; the
 * device then holds the master weights and moments of the shard, the
 * gradient and bf16 weights in the padded layout. */
coda_status coda_plans_device_set_zero(coda_context ctx, coda_model *m, const coda_zero *z);
/* The next backward reduce-scatters each bucket as soon as it is final
 * (on the communication stream). */
coda_status coda_plans_device_arm_reduce(coda_context ctx, coda_model *m);
/* Sum of squares of this rank's reduced gradient shard. */
coda_status coda_plans_device_shard_sumsq(coda_context ctx, coda_model *m, double *ss);

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

/* Hugging Face Llama layout (config.json + model.safetensors). */
coda_status coda_hf_export(coda_context ctx, coda_model *model,
                           const char *dir);
coda_status coda_hf_import(coda_context ctx, const char *dir,
                           coda_engine engine, coda_model **out);

/* -------------------------------------------------------------- plot */

/* Writes the loss chart as an SVG of w x h pixels: the title, the axes
 * (step, loss) with tick values, the training series (x1, y1) and the
 * validation series (x2, y2; n2 may be 0) as lines (a NaN point is
 * skipped and breaks its line), and a legend. */
coda_status coda_plot_loss_svg(coda_context ctx, const char *path, const char *title,
                               int w, int h, const double *x1, const double *y1, int n1,
                               const double *x2, const double *y2, int n2);
/* The same chart (720 x 440) from a loss log: a CSV whose header names
 * step, loss and optionally val_loss (the trainer's loss.csv; "nan" where
 * a step had no validation). */
coda_status coda_plot_loss_csv(coda_context ctx, const char *csv, const char *svg,
                               const char *title);

#endif
