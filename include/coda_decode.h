/* coda: text generation with a KV cache (src/infer/decode.c).
 *
 * A decoder holds a copy of a model's weights and a key/value cache for a
 * batch of sequences. Prefill runs a batch of prompts of different lengths
 * through the model once, writing every layer's keys and values into the
 * cache; each step then runs one new token per sequence against its cache,
 * so generating n tokens costs n single-token forwards (linear in n), not n
 * forwards of the whole window.
 *
 * On a CPU context the weights stay fp32 and the arithmetic is the host
 * reference engine's (src/model/model_ref.c), so the logits equal those of
 * the full recompute up to fp32 rounding. On a CUDA context the weights are
 * rounded to bf16 and live on the device with a bf16 cache; the forward
 * runs through the backend's GEMM (prefill) and decode kernels (small-batch
 * GEMV, RMSNorm, RoPE at each sequence's own positions, cache append, decode
 * attention split over the cache length, SwiGLU), and sampling runs on the
 * device. docs/generation.md describes both.
 *
 * Like the context, a decoder is not for concurrent use from several
 * threads. */
#ifndef CODA_DECODE_H
#define CODA_DECODE_H

#include "coda_tokenizer.h"
#include "coda_train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct coda_decoder_s *coda_decoder;

/* How coda_decoder_prefill runs a chunk of fresh prompts (every sequence
 * of the chunk starts at position 0; docs/generation.md, "Prefill through
 * the block plans"). Rows that continue a cache always take the direct
 * path. */
typedef enum coda_prefill_path {
  CODA_PREFILL_AUTO = 0,   /* CUDA: the plans where they run (the training
                            * attention has kernels for the head dim: 32, 64,
                            * 128; fp32 precision), else direct; CPU: direct */
  CODA_PREFILL_DIRECT = 1, /* the decoder's own forward (host reference
                            * arithmetic on the CPU, decode_linear jobs on CUDA) */
  CODA_PREFILL_PLANS = 2   /* the forward-only Llama-3 block plans of src/nn
                            * (bf16 weights and activations, fp32 compute), on
                            * any backend; CODA_ERR_NOT_SUPPORTED where they
                            * cannot run (fp64 context, CUDA head dim not 32,
                            * 64 or 128) */
} coda_prefill_path;

typedef struct coda_decoder_options {
  size_t struct_size; /* sizeof(coda_decoder_options) (coda.h, "Versioned
                       * option structs") */
  int batch;   /* sequences decoded together, 1 .. 4096 */
  int max_len; /* cache positions per sequence (prompt + new tokens); 0 or
                * more than the model's window (config seq): the window */
  int no_graphs; /* GPU: 1 = launch every decode step's kernels one by one;
                  * 0 = replay each step shape's recorded graph (coda_graph_begin)
                  * where the context's stream allows it */
  const char *tokenizer; /* coda_decoder_load: this tokenizer.json instead of
                          * the checkpoint's (NULL: coda_checkpoint_tokenizer) */
  coda_prefill_path prefill; /* appended in the second layout (the first ends
                              * at tokenizer); default CODA_PREFILL_AUTO */
  int64_t chunk_rows; /* appended in the third layout (64 bits: an int would
                       * fit the second layout's padding, and layouts are told
                       * apart by size): prompt rows per prefill
                   * forward, at least batch; 0 = by device: on the GPU
                   * enough for a whole prompt of max_len (2048 at least,
                   * 16384 at most: a longer prompt's later chunks attend to
                   * the cache through the decode kernel, far slower), on
                   * the CPU 256 */
} coda_decoder_options;
/* struct_size set, batch 1, every other member 0. */
coda_decoder_options coda_decoder_default_options(void);

/* A decoder for the weights of m, a model of the library's trainer
 * (src/model/model.h; copied: m may be destroyed afterwards) on ctx's
 * backend. Non-finite weights are refused (CODA_ERR_INVALID_ARGUMENT naming
 * the tensor). No tokenizer: tokens are bytes unless one is set. */
struct coda_model;
coda_status coda_decoder_create(coda_context ctx, struct coda_model *m,
                                const coda_decoder_options *o, coda_decoder *out);
/* A decoder for a model of configuration cfg with the trainer's random
 * initialization from seed (benchmarks). */
coda_status coda_decoder_create_random(coda_context ctx, const coda_model_config *cfg,
                                       uint64_t seed, const coda_decoder_options *o,
                                       coda_decoder *out);
/* Loads path, a coda checkpoint (.safetensors, weights only are read) or a
 * Hugging Face model folder (config.json + model.safetensors), and its
 * tokenizer: o->tokenizer when set, else the one coda_checkpoint_tokenizer
 * finds (the one the checkpoint names, verified; or a tokenizer.json in the
 * folder or beside a checkpoint that names none), else byte tokens (the
 * model's vocab must hold the 256 bytes). A tokenizer larger than the
 * model's vocab is refused. */
coda_status coda_decoder_load(coda_context ctx, const char *path, const coda_decoder_options *o,
                              coda_decoder *out);
void coda_decoder_destroy(coda_decoder d);
/* The decode-step graphs recorded so far (0: every step launched directly,
 * e.g. on the CPU or on a context on the legacy default stream). */
int coda_decoder_graphs(const coda_decoder d);

const coda_model_config *coda_decoder_config(const coda_decoder d);
int coda_decoder_batch(const coda_decoder d);
int coda_decoder_max_len(const coda_decoder d);
/* Tokens in sequence b's cache (0 before its prefill). */
int coda_decoder_length(const coda_decoder d, int b);
/* The tokenizer loaded with the decoder (NULL: byte tokens). The decoder
 * owns it. */
coda_tokenizer coda_decoder_tokenizer(const coda_decoder d);
/* Uses tok (owned by the caller, NULL: bytes) from now on. */
void coda_decoder_set_tokenizer(coda_decoder d, coda_tokenizer tok);

/* Restarts sequence b's cache with prompts[b] (lens[b] tokens, 1 ..
 * max_len, each < vocab) for every b with prompts[b] != NULL; the others
 * keep their cache. Afterwards the current logits of a prefilled sequence
 * are those after its last prompt token. */
coda_status coda_decoder_prefill(coda_decoder d, const int32_t *const *prompts, const int *lens);
/* Appends tokens[b] to every sequence b with tokens[b] >= 0 and computes
 * its next logits; tokens[b] < 0 leaves sequence b as it is. A sequence
 * whose cache is full (max_len tokens) is CODA_ERR_OVERFLOW; one never
 * prefilled, CODA_ERR_INVALID_ARGUMENT. */
coda_status coda_decoder_step(coda_decoder d, const int32_t *tokens);
/* The device time of one decode step by phase, in ms (ms holds
 * CODA_DECODE_PHASES values, named by coda_decoder_phase_name): the step
 * as coda_decoder_step makes it (the caches advance), its kernels launched
 * one by one with a timing marker after each, so each phase also carries
 * its launch gaps. A one-row step that runs as one kernel is timed inside
 * it instead: each phase from the kernel's grid barrier before it to the
 * one after, as the first block sees them (attention with its merge), the
 * head with the launch and the row gather. CODA_ERR_NOT_SUPPORTED on the
 * CPU backend. */
#define CODA_DECODE_PHASES 7
const char *coda_decoder_phase_name(int phase);
coda_status coda_decoder_step_profile(coda_decoder d, const int32_t *tokens, double *ms);
/* The bytes each phase of the next step with these tokens (as
 * coda_decoder_step takes them) must read, the floor its time is held
 * against (bytes holds CODA_DECODE_PHASES values, in the profile's
 * order): each phase's weights with its norm weights, the embedding's
 * rows of the stepped sequences, and the keys and values of each stepped
 * sequence's cache, the new token's included; in the dtypes the decoder
 * keeps (a device: bf16 with fp32 norms; the CPU: fp32). Any backend;
 * the caches do not move. */
coda_status coda_decoder_step_bytes(const coda_decoder d, const int32_t *tokens, double *bytes);
/* The current logits, batch x vocab fp32 (host memory); rows of sequences
 * never prefilled are zeros. */
coda_status coda_decoder_logits(coda_decoder d, float *out);

/* How the next token is drawn from the logits l (docs/generation.md):
 * temperature 0 is greedy (the largest logit, the lowest id on ties);
 * otherwise the candidates are the top_k largest logits (0: all; ties at
 * the k-th value by lower id), then, if top_p < 1, only the candidates
 * whose logit is at least the largest cut whose candidates hold top_p of
 * the candidates' probability; the token is drawn from softmax(l / T) over
 * what is left, by one uniform number u per (seed, sequence, position):
 * the same seed gives the same tokens. */
typedef struct coda_sampling {
  double temperature; /* >= 0 */
  int top_k;          /* >= 0 */
  double top_p;       /* (0, 1]; 0 is taken as 1 */
  uint64_t seed;
} coda_sampling;

/* One token for every sequence b with active[b] != 0 (active NULL: all
 * prefilled sequences) from its current logits, into tokens[b] (-1 for the
 * others). Non-finite logits are CODA_ERR_INVALID_ARGUMENT (the weights are
 * damaged or diverged). */
coda_status coda_decoder_sample(coda_decoder d, const coda_sampling *s, const int *active,
                                int32_t *tokens);

/* Called for every generated token of sequence b with the bytes it stands
 * for: the tokenizer's decoding of that token (U+FFFD for an id the
 * tokenizer does not have: a model's padded vocabulary), or the byte itself
 * ('?' for ids of 256 and above without a tokenizer); returning nonzero
 * ends sequence b. */
typedef int (*coda_token_fn)(void *user, int b, int32_t token, const char *bytes, size_t n);

/* Why a sequence ended (coda_generate_result.stop). */
typedef enum coda_stop_reason {
  CODA_STOP_MAX_TOKENS = 0, /* max_new_tokens generated */
  CODA_STOP_TOKEN = 1,      /* a stop token was sampled (not emitted) */
  CODA_STOP_WINDOW = 2,     /* the cache is full (max_len tokens) */
  CODA_STOP_CALLBACK = 3    /* on_token returned nonzero */
} coda_stop_reason;

typedef struct coda_generate_params {
  size_t struct_size; /* sizeof(coda_generate_params) (coda.h, "Versioned
                       * option structs") */
  coda_sampling sampling;
  int max_new_tokens;    /* per sequence, >= 0 */
  const int32_t *stop;   /* stop tokens (nstop of them; the tokenizer's EOS
                          * is added when stop_at_eos) */
  int nstop;
  int stop_at_eos;
  coda_token_fn on_token; /* NULL: none */
  void *user;
} coda_generate_params;
/* struct_size set, greedy sampling (temperature 0, top-p 1), every other
 * member 0. */
coda_generate_params coda_generate_default_params(void);

typedef struct coda_generate_result {
  int32_t *tokens;      /* the generated tokens (malloc'ed; free with
                         * coda_generate_result_free) */
  int n;                /* their count */
  coda_stop_reason stop;
} coda_generate_result;

/* Prefills sequences 0 .. n-1 (n <= batch) with the prompts and generates
 * until every one has stopped; out[b] (n entries) gets each sequence's
 * tokens and why it ended. Timings (seconds of prefill and of the decode
 * steps, NULL: not wanted) are wall clock around synchronized work. */
coda_status coda_decoder_generate(coda_decoder d, const int32_t *const *prompts, const int *lens,
                                  int n, const coda_generate_params *p,
                                  coda_generate_result *out, double *prefill_s, double *decode_s);
void coda_generate_result_free(coda_generate_result *r, int n);

/* Tokens of text: the decoder's tokenizer (with its special tokens, as
 * add_special_tokens=True), or one byte per token. *ids is malloc'ed. */
coda_status coda_decoder_encode(coda_decoder d, const char *text, size_t len, int32_t **ids,
                                size_t *n);

#ifdef __cplusplus
}
#endif
#endif
