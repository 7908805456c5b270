/* The plan engine's state (model_plans.c: the plans, the host path and the
 * device training step) and, on a CUDA context, its device state
 * (model_device.c: the master weights, gradient and AdamW moments in device
 * memory, from upload to download). Private to these two files of src/model. */
#ifndef CODA_MODEL_DEVICE_H
#define CODA_MODEL_DEVICE_H

#include "model/model.h"

#include <stdint.h>

/* Device copies of a CUDA context (kept when the plans are rebuilt for
 * another batch shape). */
typedef struct {
  coda_context ctx;     /* the context that allocated the buffers below */
  float *w, *g, *m, *v; /* fp32 master weights, gradient, AdamW moments */
  double *part;         /* gradient-norm partial sums */
  size_t n, npart;
  int32_t *tok, *tg, *rows, *seg, *pos; /* per micro-batch uploads */
  int64_t cap;                          /* tokens they hold */
  /* Data parallel (ZeRO-1, zero.c): w, m, v hold this rank's shard, g the
   * whole gradient in the padded layout, wb the bf16 weights (padded
   * layout) that every rank all-gathers after its update and that feed the
   * plans and the embedding lookup. */
  const coda_zero *z;
  uint16_t *wb;
  int reduce; /* the next backward reduce-scatters its buckets */
  /* One process: wb is the flat bf16 copy the plans' weights are bound to
   * (`bind`), oseg the optimizer's segment table (2 x nseg: end, decays),
   * gs the scratch gradient of accumulated micro-batches, zero_pending the
   * deferred zeroing of g. */
  int bind;
  int64_t *oseg;
  int nseg;
  float *gs;
  int zero_pending;
  /* One process, bound, with CODA_OPTIM_OVERLAP=1: AdamW runs group by
   * group (the embedding, each layer, the final norm and output) on the
   * side queue `side`, group k ending at element gend[k]; the next forward
   * waits for a group's marker just before it reads the group (opt_next:
   * the first group not yet waited for, -1: none pending), so the update of
   * layer i+1 runs beside the forward of layer i. */
  void *side;
  size_t *gend;
  int ngroups;
  int opt_next;
  /* bf16 optimizer state (CODA_OPTIM_STATE_BF16; one process, bound): no
   * master (w is NULL), wb the weights themselves, mb and vb the moments
   * in bf16 (m, v NULL), every update rounded stochastically with the
   * bits of sr_seed (base/bf16_round.h). */
  int bf16;
  uint64_t sr_seed;
  uint16_t *mb, *vb;
  /* The position table's gradient (GPT-2's learned positions): block 0's
   * dx rows grouped by position (prow, pseg, ppos: embed_grad's rows, seg
   * and pos), uploaded once per batch shape pB x pT. */
  int32_t *prow, *pseg, *ppos;
  int pB, pT;
} dev_state;

/* A parameter of a plan: coda's name (a layer parameter's after
 * "layers.%d."; "output.weight" is the token embedding in a tied model),
 * the plan's weight buffer and its gradient buffer; one_plus: the plan's
 * buffer holds 1 + w (Gemma 3's norm weights, stored as w). */
typedef struct {
  const char *param, *w, *g;
  int one_plus;
} coda_plan_param;

/* A family's parameters in its plans, the one list that the upload, the
 * accumulation, the device's rounding and the bindings of weights and
 * gradients read: each block plan's (an entry the model lacks is skipped:
 * Llama's list holds Qwen3's q/k norms) and the head plan's. One list per
 * block: Llama's (model_plans.c), GPT-2's (model_plans_gpt2.c). Every
 * other parameter of the family table is an embedding table (token or
 * position), whose gradient is block 0's dx scatter-added. */
typedef struct {
  const coda_plan_param *layer;
  int nlayer;
  const coda_plan_param *head;
  int nhead;
} coda_plan_params;

extern const coda_plan_params coda_plans_gpt2_params;
/* Llama's (Qwen3's too: its q_norm and k_norm) and Gemma 3's
 * (model_plans_llama.c) */
extern const coda_plan_params coda_plans_llama_params, coda_plans_gemma3_params;

/* A model parameter bound to plan `plan` (0 .. L-1: block i, L: the head)
 * through the plan buffers w (weight) and g (its gradient). */
typedef struct {
  int plan;
  const coda_param *p;
  const char *w, *g;
  float shift; /* the plan's weight is w + shift (1: Gemma 3's norms; else 0) */
} plan_slot;

/* Where the plans' weight-gradient buffers point. */
enum { GRADS_OWN = 0, GRADS_IN_G, GRADS_IN_SCRATCH };

typedef struct {
  int B, T;
  int keep;           /* the head built with CODA_LLAMA_KEEP_LOGITS (Llama's) */
  int L;
  coda_plan *blk;
  coda_plan head;
  dev_state *dev;
  const coda_zero *z; /* data parallel layout, NULL: one process */
  int wbound;         /* the plans' weights are bound to dev->wb */
  int grads;          /* GRADS_*: the plans' weight-gradient buffers */
  int bf16;           /* the device state keeps bf16 state (dev_state) */
  uint64_t sr_seed;
  /* The family's plan parameters resolved for this model: plan k's slots
   * are slot[sfirst[k] .. sfirst[k+1]); emb the token and position tables
   * (NULL: none), emb_own[i] when no plan writes emb[i]'s gradient (an
   * untied token table, the positions): only the scatter-add does. */
  plan_slot *slot;
  int *sfirst;
  const coda_param *emb[2];
  int emb_own[2];
} plans_state;

/* Plan buffer `name` of p (a clear error naming it when absent). */
coda_status coda_plans_tensor(coda_context ctx, coda_plan p, const char *name, coda_tensor *t);
/* Plan k's parameters (its slots) on the host: the master rounded into
 * their weight buffers, or the gradient += scale · their gradient buffers. */
coda_status coda_plans_upload_slots(coda_context ctx, coda_model *m, plans_state *s, int k);
coda_status coda_plans_accumulate_slots(coda_context ctx, coda_model *m, plans_state *s, int k,
                                        float scale);
/* The loss and backward on the host path (model_plans.c, for every
 * family), after the blocks' forward: targets tg (negative: ignored) into
 * the head plan's "targets", its forward, then "loss" and the count of
 * valid targets into *loss and *n_valid (either may be NULL; the loss is 0
 * when none is valid). With backward and a valid target, the head's
 * backward, then each block's from the last, every plan's gradient
 * buffers added into the model's gradient at gscale (its slots), and
 * *ran_backward is set (the caller's embedding backward follows, reading
 * block 0's "dx"). Profile: the head's forward and backward with their
 * additions, CODA_PH_HEAD; each block's backward, CODA_PH_BLOCK_BWD. */
coda_status coda_plans_loss_backward(coda_context ctx, coda_model *m, plans_state *s,
                                     const int32_t *tg, int backward, float gscale, double *loss,
                                     int64_t *n_valid, int *ran_backward);
/* GPT-2 (model_plans_gpt2.c): its block plans (s->blk, s->L) and head plan
 * for s->B x s->T tokens, and a forward (+ backward) on the CPU backend,
 * the arguments of coda_plans_forward; the device step is model_plans.c's. */
coda_status coda_plans_gpt2_build(coda_context ctx, coda_model *m, plans_state *s);
coda_status coda_plans_gpt2_forward(coda_context ctx, coda_model *m, plans_state *s,
                                    const int32_t *in, const int32_t *tg, int T, int backward,
                                    float gscale, double *loss, int64_t *n_valid,
                                    float *last_logits);
/* The Llama block's families (Llama, Qwen3, Gemma 3) on the CPU backend
 * (model_plans_llama.c), the arguments of coda_plans_forward. */
coda_status coda_plans_llama_forward(coda_context ctx, coda_model *m, plans_state *s,
                                     const int32_t *in, const int32_t *tg, int T, int backward,
                                     float gscale, double *loss, int64_t *n_valid,
                                     float *last_logits);
/* Sampling's head on the host: the final LayerNorm of the last block's row
 * x (dim values, overwritten) and its products with the rows of the tied
 * token embedding (the host weights) into last_logits. */
void coda_plans_gpt2_head_row(coda_model *m, double *x, float *last_logits);

/* Step profile markers (profile.c; no-ops when pf is NULL). */
#define PB() coda_prof_begin(ctx, pf)
#define PE(ph, b) coda_prof_end(ctx, pf, ph, b)

static inline int on_gpu(coda_context ctx) { return coda_context_backend(ctx) == CODA_BACKEND_CUDA; }

static inline coda_status dev_alloc(coda_context ctx, size_t bytes, void *out) {
  return coda_malloc(ctx, bytes, (void **)out);
}

/* The device state of s, created on first use from the host weights
 * (moments zero; one process: the flat bf16 copy rounded from them). */
coda_status coda_dev_state_ensure(coda_context ctx, coda_model *m, plans_state *s, dev_state **out);
/* Frees every device buffer of d and d itself (NULL: nothing). */
void coda_dev_state_free(dev_state *d);
/* The per micro-batch upload buffers (tokens, targets, the embedding
 * gradient's token groups), grown to hold M tokens. */
coda_status coda_dev_state_ensure_uploads(coda_context ctx, dev_state *d, int64_t M);
/* The deferred zeroing of the gradient, before anything reads it (after
 * the optimizer's side queue is done with it). */
coda_status coda_dev_state_settle_zero(coda_context ctx, dev_state *d);
/* The context's stream waits for the optimizer's update of group k (and
 * every group before it); no-op when nothing is pending. Groups: 0 the
 * embedding, 1 + i layer i, layers + 1 the final norm and output. */
coda_status coda_dev_state_wait_group(coda_context ctx, dev_state *d, int k);
/* ... of every group: before anything but the forward reads or writes the
 * weights, moments or gradient. */
coda_status coda_dev_state_settle_optim(coda_context ctx, dev_state *d);


#endif
