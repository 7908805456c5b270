/* Internal interface of src/model: a model in memory and what trains it.
 * The parameters and their engines, the reference engine (model_ref.c) and
 * the plan engine over src/nn's block plans (model_plans.c) with its
 * device state (model_device.c, private header model_device.h), AdamW
 * (optim.c), ZeRO (zero.c) and the step profile (profile.c). */
#ifndef CODA_MODEL_H
#define CODA_MODEL_H

#include "coda_train.h"
#include "base/internal.h"
#include "model/family.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The largest model the CPU trains or evaluates: larger ones only make
 * sense on the GPU (weights + grads + m + v = 16 B each). */
#define CODA_CPU_MAX_PARAMS 200000000LL

/* h = x · r ⊙ w per row, r = 1/sqrt(mean(x²) + eps) with the sum of
 * squares in double (rs: the r of each row, or NULL): the reference
 * engine's RMSNorm, which the host decoder shares so that its logits equal
 * the full recompute (model_ref.c). */
void coda_ref_rmsnorm(int nt, const float *x, const float *w, float *h, float *rs, int64_t M,
                      int64_t D, double eps);
/* GPT-2's LayerNorm, h = (x − μ) r ⊙ w + b per row with μ and
 * r = 1/sqrt(mean((x − μ)²) + eps) in double (mu, rs: per row, or NULL),
 * and its GELU in the tanh form, gelu(u) = u/2 (1 + tanh(√(2/π)(u + 0.044715 u³)))
 * in double: shared with the host decoder as coda_ref_rmsnorm is. */
void coda_ref_layernorm(int nt, const float *x, const float *w, const float *b, float *h,
                        float *mu, float *rs, int64_t M, int64_t D, double eps);
float coda_ref_gelu(float u);
/* Gemma 3's RMSNorm, h = (x · r) ⊙ (1 + w) per row (the weight is stored
 * as w; zero is the identity), r as coda_ref_rmsnorm's; shared with the
 * host decoder. */
void coda_ref_rmsnorm1p(int nt, const float *x, const float *w, float *h, float *rs, int64_t M,
                        int64_t D, double eps);
/* The first key position that position t attends to in a window of
 * `window` positions (0: all, causal): t - window + 1, at least 0. HF's
 * sliding mask keeps kv > q - window, kv <= q: the token and the
 * window - 1 before it. */
static inline int coda_ref_window_start(int t, int window) {
  return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}
/* The per-layer attention: whether layer li is a local (sliding-window)
 * layer (Gemma 3's by its pattern; every layer of a llama-family model
 * with a sliding_window, as Mistral's), its window (0: global, full
 * causal), its RoPE base (Gemma 3's local base on its local layers, else
 * rope_theta), and the score scale of the model (attn_scalar^-1/2, or
 * head_dim^-1/2 when it is 0 and in the other families). */
int coda_model_layer_is_local(const coda_model_config *c, int li);
int coda_model_layer_window(const coda_model_config *c, int li);
double coda_model_layer_rope_theta(const coda_model_config *c, int li);
double coda_model_attn_scale(const coda_model_config *c);
/* The final logit soft cap, cap · tanh(l / cap) in double (cap 0: l). */
static inline float coda_ref_softcap(float l, double cap) {
  return cap > 0.0 ? (float)(cap * tanh((double)l / cap)) : l;
}
/* sqrt(dim) in fp32, Gemma 3's embedding multiplier (1 elsewhere). */
float coda_model_embed_scale(const coda_model_config *c);

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

/* AdamW on bf16 state (CODA_OPTIM_STATE_BF16): coda_adamw_update's
 * arithmetic in double from the bf16 values of w, m, v (held in floats),
 * each result rounded stochastically to bf16 with the random bits of
 * (seed, t, base + i) (base/bf16_round.h): the device kernel's bits. */
void coda_adamw_update_bf16(const coda_adamw *opt, int64_t t, double lr, int decay, uint64_t seed,
                            size_t base, float *w, const float *g, float *m, float *v, size_t n);
/* x[i] <- x[i] rounded to the nearest bf16 (ties to even). */
void coda_round_bf16(float *x, size_t n);

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
  int init;  /* coda_pinit (family.h) */
} coda_param;

typedef struct coda_model coda_model;

typedef enum coda_engine {
  CODA_ENGINE_REFERENCE = 0, /* straightforward host code (this folder) */
  CODA_ENGINE_PLANS = 1      /* the Llama-3 block plans of src/nn */
} coda_engine;
/* The engine an option names (model.c); AUTO: the plan engine where it
 * is available. */
coda_engine coda_engine_from_option(coda_train_engine e);
/* The same for a model of c: AUTO takes the reference engine for a family
 * the plans do not run (gpt2). */
coda_engine coda_engine_for_model(coda_train_engine e, const coda_model_config *c);

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
/* Layer li's block configuration from lc (coda_model_block_config's):
 * its window (coda_model_layer_window: Gemma 3's local layers, every layer
 * of a Llama/Mistral model with a sliding_window) and its RoPE base
 * (Gemma 3's local base on local layers). */
coda_llama_config coda_model_layer_config(const coda_model_config *c, const coda_llama_config *lc,
                                          int li);
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
 * of this rank) at peak_flops and the adam_bytes AdamW moves a step
 * at peak_bw (0: none). */
void coda_prof_report(const coda_prof *p, const coda_model_config *c, double tokens,
                      double adam_bytes, double peak_flops, double peak_bw, int64_t warmup,
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
/* 1 when every parameter of m is in one plan buffer of its family's table
 * (model_plans.c), or is an embedding table no plan holds (an untied token
 * table, GPT-2's positions; only the scatter-add writes its gradient): what
 * binding the gradient needs, each backward then writing all of it. */
int coda_plans_slots_cover(coda_model *m);
/* 1 when the device state exists and the plans' weights and gradients are
 * views of its flat buffers (one process, the layout aligned), else 0. */
int coda_plans_device_bound(coda_context ctx, coda_model *m);
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
/* One process: the device state keeps bf16 weights and moments
 * (CODA_OPTIM_STATE_BF16), rounded stochastically with the bits of seed;
 * set before the device state exists (upload or initialization). */
coda_status coda_plans_device_set_bf16_state(coda_context ctx, coda_model *m, uint64_t seed);
/* The next backward reduce-scatters each bucket as soon as it is final
 * (on the communication stream). */
coda_status coda_plans_device_arm_reduce(coda_context ctx, coda_model *m);
/* Sum of squares of this rank's reduced gradient shard. */
coda_status coda_plans_device_shard_sumsq(coda_context ctx, coda_model *m, double *ss);

#endif
