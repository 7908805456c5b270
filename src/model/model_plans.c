/* Plan engine: the model runs through the Llama-3 block and head plans of
 * src/nn (GEMM + epilogue programs on the context's backend), run on the
 * CPU backend by model_plans_llama.c; GPT-2 through its own block and head
 * plans, built and linked here and run by model_plans_gpt2.c on the CPU
 * backend; both by the device step below on a CUDA context; a family
 * with the table's qk_norm (Qwen3) through the same block with its
 * QK-norm (CODA_LLAMA_QK_NORM), whose two norm weights per layer are bound
 * as the others are.
 *
 * Which parameter goes to which plan buffer is one list per block kind
 * (coda_plan_params: Llama's, Qwen3's and Gemma 3's in model_plans_llama.c,
 * GPT-2's in model_plans_gpt2.c),
 * resolved once per plan build into the slots of plans_state (parameter,
 * weight buffer, gradient buffer, plan); every path reads the slots: the
 * host upload and accumulation, the device's rounding, the bindings of the
 * plans' weights to the flat bf16 copy and of their gradients to the fp32
 * gradient, and the device accumulation. The parameters no plan holds are
 * the embedding tables (the token table, GPT-2's position table), whose
 * gradients are block 0's dx scatter-added (plus the tied head's dwout). One block
 * plan per layer and one head plan, chained without copies: block i's
 * x_out buffer is bound as block i+1's x (and as the head's x), and in the
 * backward each dx is bound as the previous block's dx_out.
 *
 * The plans store weights and activations in bf16 (fp32 compute and fp32
 * weight gradients): before every forward the fp32 master weights are
 * rounded (to nearest even) into the plans' bf16 weight buffers, which is
 * the bf16-weights + fp32-master scheme of the GPU. The token embedding
 * lookup and its gradient (a scatter-add over tokens, in token order) are
 * host operations on the CPU backend. The model's RMSNorm epsilon and RoPE scaling go
 * into the plans (their program text and frequency table).
 *
 * Sampling needs logits, which the head plan never materializes: for the
 * last position the final RMSNorm and the LM-head row products are done
 * on the host from the last block's output (GPT-2's final LayerNorm with
 * its bias: coda_plans_gpt2_head_row). The sampler runs the blocks at
 * the full sequence length with the context left-aligned; causal attention
 * makes the padding after it irrelevant.
 *
 * On a CUDA context the same steps run on the device (src/backends/cuda/
 * train_kernels.cu): the fp32 master weights, the fp32 gradient and the
 * AdamW moments live in device memory (dev_state; its lifetime, from
 * upload to download, and the optimizer are model_device.c's), the
 * rounding into the plans' bf16 buffers, the embedding lookup (with
 * GPT-2's position table: bf16(wte[tok] + wpe[t]), an fp32 sum, t the row
 * modulo T), the gradient accumulation and the embedding scatter-adds (the
 * position table's by position, grouped once per batch shape) are
 * kernels, and only the tokens go up and the loss comes down per micro-batch. The embedding scatter-add stays
 * deterministic without atomics: the host groups the positions by token
 * (a stable counting sort) and one thread block per distinct token adds its
 * rows in token order, the host loop's order. The host weight buffer is
 * brought up to date only by coda_plans_device_download.
 *
 * One process (no ZeRO layout), every family: the plans hold no weights or
 * weight gradients of their own (but Gemma 3's 1 + w norm weights: their
 * own rounded copies, shift_weights). Their weight buffers are bound to
 * slices of one flat bf16 copy of the master (wb, the same layout), which the AdamW pass
 * writes as it updates the master, so no rounding pass runs before a
 * forward; and on the first micro-batch of a step with scale 1 their
 * weight-gradient buffers are bound to slices of the fp32 gradient itself,
 * so the GEMMs write the step's gradient where the optimizer reads it (no
 * accumulation pass, and zeroing the gradient is deferred until something
 * would read it unwritten). Other micro-batches bind them to a scratch copy
 * and add it in. The optimizer (model_device.c) is one launch over all
 * parameters. */
#include "model/model_device.h"
#include "model/family.h"
#include "dist/comm.h"
#include "api/api.h" /* the backend's copies and training kernels */

#include <math.h>
#include <stdlib.h>
#include <string.h>

int coda_plans_available(void) { return 1; }

static void free_plans(plans_state *s) {
  for (int i = 0; i < s->L; i++) coda_plan_destroy(s->blk[i]);
  coda_plan_destroy(s->head);
  free(s->blk);
  free(s->slot);
  free(s->sfirst);
  s->blk = NULL;
  s->head = NULL;
  s->slot = NULL;
  s->sfirst = NULL;
  s->wbound = 0;
  s->grads = GRADS_OWN;
  s->L = 0;
  s->B = s->T = 0;
}

void coda_plans_free(coda_model *m) {
  plans_state *s = *coda_model_plans_slot(m);
  if (!s) return;
  free_plans(s);
  coda_dev_state_free(s->dev);
  free(s);
  *coda_model_plans_slot(m) = NULL;
}

static coda_status tensor(coda_context ctx, coda_plan p, const char *name, coda_tensor *t) {
  coda_status s = coda_plan_tensor(p, name, t);
  if (s) return coda_fail(ctx, s, "plan buffer '%s': %s", name, coda_last_error(ctx));
  return CODA_OK;
}

/* The model parameter of plan k's entry e (NULL: the model has none). */
static const coda_param *slot_param(coda_model *m, int k, int L, const coda_plan_param *e) {
  char nm[96];
  if (k < L) snprintf(nm, sizeof nm, "layers.%d.%s", k, e->param);
  else snprintf(nm, sizeof nm, "%s", e->param);
  const coda_param *p = coda_model_find(m, nm);
  if (!p && k == L && !strcmp(nm, "output.weight") && coda_model_cfg(m)->tied)
    p = coda_model_find(m, "tok_embeddings.weight");
  return p;
}

/* The family's table of plan parameters (model_device.h). */
static const coda_plan_params *plan_params(coda_model *m) {
  const coda_block blk = coda_family_of(coda_model_cfg(m)->family)->block;
  return blk == CODA_BLOCK_GPT2     ? &coda_plans_gpt2_params
         : blk == CODA_BLOCK_GEMMA3 ? &coda_plans_gemma3_params
                                    : &coda_plans_llama_params;
}

/* The table's entries matched to the model's parameters for plans 0 .. L
 * (L: the head): seen[i] counts the plan buffers of parameter i, slot and
 * sfirst (plans_state's) are filled, each where not NULL. Returns the
 * number of slots. */
static int match_params(coda_model *m, int L, unsigned char *seen, plan_slot *slot,
                        int *sfirst) {
  const coda_plan_params *t = plan_params(m);
  const coda_param *p0 = coda_model_param(m, 0);
  int n = 0;
  for (int k = 0; k <= L; k++) {
    if (sfirst) sfirst[k] = n;
    const coda_plan_param *e = k < L ? t->layer : t->head;
    for (int j = 0; j < (k < L ? t->nlayer : t->nhead); j++) {
      const coda_param *p = slot_param(m, k, L, &e[j]);
      if (!p) continue;
      if (seen && seen[p - p0] < 255) seen[p - p0]++;
      if (slot) slot[n] = (plan_slot){k, p, e[j].w, e[j].g, e[j].one_plus ? 1.0f : 0.0f};
      n++;
    }
  }
  if (sfirst) sfirst[L + 1] = n;
  return n;
}

int coda_plans_slots_cover(coda_model *m) {
  const int np = coda_model_num_params(m);
  const coda_param *tok = coda_model_find(m, "tok_embeddings.weight");
  const coda_param *pos = coda_model_find(m, "pos_embeddings.weight");
  unsigned char *seen = calloc((size_t)(np ? np : 1), 1);
  if (!seen) return 0;
  match_params(m, coda_model_cfg(m)->layers, seen, NULL, NULL);
  const coda_param *p0 = coda_model_param(m, 0);
  int ok = np > 0;
  for (int i = 0; i < np && ok; i++) /* once, or an embedding table no plan holds */
    ok = seen[i] == 1 || (!seen[i] && (p0 + i == tok || p0 + i == pos));
  free(seen);
  return ok;
}

/* The family's plan parameters resolved into s's slots (plans_state):
 * every model parameter is a plan's, once, or an embedding table. */
static coda_status resolve_params(coda_context ctx, coda_model *m, plans_state *s) {
  const int np = coda_model_num_params(m);
  const coda_param *p0 = coda_model_param(m, 0);
  unsigned char *seen = calloc((size_t)np, 1);
  const int ns = seen ? match_params(m, s->L, seen, NULL, NULL) : 0; /* counted, then filled */
  s->slot = calloc((size_t)(ns ? ns : 1), sizeof *s->slot);
  s->sfirst = calloc((size_t)s->L + 2, sizeof *s->sfirst);
  coda_status st = CODA_OK;
  if (!s->slot || !s->sfirst || !seen) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!st) match_params(m, s->L, NULL, s->slot, s->sfirst);
  for (int i = 0; i < np && !st; i++)
    if (seen[i] > 1)
      st = coda_fail(ctx, CODA_ERR_INTERNAL, "parameter %s is bound to two plan buffers",
                     p0[i].name);
  s->emb[0] = coda_model_find(m, "tok_embeddings.weight");
  s->emb[1] = coda_model_find(m, "pos_embeddings.weight");
  for (int i = 0; i < 2 && !st; i++) s->emb_own[i] = s->emb[i] && !seen[s->emb[i] - p0];
  for (int i = 0; i < np && !st; i++)
    if (!seen[i] && p0 + i != s->emb[0] && p0 + i != s->emb[1])
      st = coda_fail(ctx, CODA_ERR_INTERNAL, "parameter %s has no plan buffer", p0[i].name);
  if (!st && !s->emb[0])
    st = coda_fail(ctx, CODA_ERR_INTERNAL, "the model has no token embedding");
  free(seen);
  return st;
}

/* The plan of slot plan index k. */
static coda_plan plan_at(const plans_state *s, int k) { return k < s->L ? s->blk[k] : s->head; }

static coda_status ensure(coda_context ctx, coda_model *m, int B, int T, plans_state **out) {
  plans_state *s = *coda_model_plans_slot(m);
  const int keep = coda_model_keep_logits(m);
  if (s && s->blk && s->B == B && s->T == T && s->keep == keep) { *out = s; return CODA_OK; }
  if (s) free_plans(s);
  const coda_model_config *c = coda_model_cfg(m);
  if (coda_context_backend(ctx) != CODA_BACKEND_CPU && !on_gpu(ctx))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the plan engine runs on the CPU backend and the CUDA backend");
  if (!on_gpu(ctx) && coda_context_precision(ctx) != CODA_PRECISION_F32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the plan engine trains in fp32 precision");
  const int gpt2 = coda_family_of(c->family)->block == CODA_BLOCK_GPT2;
  const int gemma = coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3;
  if (gemma && keep && c->logit_softcap > 0.0)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the gemma3 head plan with a logit soft cap "
                     "recomputes its logits in the backward; it does not keep them "
                     "(keep-logits 0 or auto)");
  if (gpt2 && keep)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the gpt2 head plan recomputes its logits in "
                     "the backward; it does not keep them (keep-logits 0 or auto)");
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    *coda_model_plans_slot(m) = s;
  }
  s->blk = calloc((size_t)c->layers, sizeof *s->blk);
  if (!s->blk) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  s->B = B;
  s->T = T;
  s->keep = keep;
  /* a training step runs one backward per forward: the SwiGLU-backward
   * dgrad may write dz over the saved z (less memory, the same bits) */
  coda_llama_config lc = coda_model_block_config(c, B, T, CODA_LLAMA_INPLACE);
  coda_status st = gpt2 ? coda_plans_gpt2_build(ctx, m, s) : CODA_OK;
  for (int i = 0; i < c->layers && !st && !gpt2; i++) {
    const coda_llama_config li = coda_model_layer_config(c, &lc, i); /* Gemma 3's local layers */
    st = coda_llama_block_plan(ctx, &li, &s->blk[i]);
    if (!st) s->L = i + 1;
  }
  if (!st && !gpt2) {
    coda_llama_config hc = lc;
    if (keep) hc.flags |= CODA_LLAMA_KEEP_LOGITS;
    st = coda_llama_head_plan(ctx, &hc, &s->head);
  }
  if (!st) st = resolve_params(ctx, m, s);
  /* before the plans are linked (tuning lays out their temporaries again);
   * the blocks share their shapes, so block 0 times and the others read
   * its choices from the tuning cache */
  for (int i = 0; i < s->L + 1 && !st && on_gpu(ctx) && coda_model_plan_tuning(m); i++) {
    coda_plan p = i < s->L ? s->blk[i] : s->head;
    st = coda_plan_tune_fusion(ctx, p, 3, NULL);
    if (st) st = coda_fail(ctx, st, "tuning the %s plan: %s", i < s->L ? "block" : "head",
                           coda_last_error(ctx));
  }
  coda_tensor t;
  for (int i = 0; i < s->L && !st; i++) {
    st = tensor(ctx, s->blk[i], "x_out", &t);
    if (!st) st = coda_plan_bind(i + 1 < s->L ? s->blk[i + 1] : s->head, "x", &t);
    if (!st) st = tensor(ctx, i + 1 < s->L ? s->blk[i + 1] : s->head, "dx", &t);
    if (!st) st = coda_plan_bind(s->blk[i], "dx_out", &t);
  }
  if (st) {
    free_plans(s);
    return st;
  }
  *out = s;
  return CODA_OK;
}

coda_status coda_plans_tensor(coda_context ctx, coda_plan p, const char *name, coda_tensor *t) {
  return tensor(ctx, p, name, t);
}

/* fp32 master + shift -> plan buffer (bf16 rounds to nearest even; the
 * shift is 1 for Gemma 3's norm weights: the plan scales by 1 + w). */
static coda_status upload(coda_context ctx, coda_plan p, const char *name, const float *src,
                          float shift) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      float v = src[r * t.cols + c] + shift;
      if (t.dtype == CODA_BF16) ((uint16_t *)t.data)[r * t.ld + c] = coda_f32_to_bf16(v);
      else coda_store(&t, r, c, v);
    }
  return CODA_OK;
}

/* dst += scale · plan buffer. */
static coda_status accumulate(coda_context ctx, coda_plan p, const char *name, float *dst,
                              float scale) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      float v = t.dtype == CODA_F32 ? ((const float *)t.data)[r * t.ld + c]
                                    : (float)coda_load(&t, r, c);
      dst[r * t.cols + c] += scale * v;
    }
  return CODA_OK;
}

coda_status coda_plans_upload_slots(coda_context ctx, coda_model *m, plans_state *s, int k) {
  coda_status st = CODA_OK;
  for (int j = s->sfirst[k]; j < s->sfirst[k + 1] && !st; j++)
    st = upload(ctx, plan_at(s, k), s->slot[j].w, coda_model_weights(m) + s->slot[j].p->offset,
                s->slot[j].shift);
  return st;
}

coda_status coda_plans_accumulate_slots(coda_context ctx, coda_model *m, plans_state *s, int k,
                                        float scale) {
  coda_status st = CODA_OK;
  for (int j = s->sfirst[k]; j < s->sfirst[k + 1] && !st; j++)
    st = accumulate(ctx, plan_at(s, k), s->slot[j].g, coda_model_grads(m) + s->slot[j].p->offset,
                    scale);
  return st;
}

/* The host path's loss and backward, one sequence for every family
 * (model_device.h): the families' heads and blocks differ only in their
 * plans and slots. */
coda_status coda_plans_loss_backward(coda_context ctx, coda_model *m, plans_state *s,
                                     const int32_t *tg, int backward, float gscale, double *loss,
                                     int64_t *n_valid, int *ran_backward) {
  const int64_t M = (int64_t)s->B * s->T;
  coda_prof *pf = coda_model_prof(m);
  *ran_backward = 0;
  coda_tensor t;
  coda_status st = tensor(ctx, s->head, "targets", &t);
  if (st) return st;
  int64_t nv = 0;
  PB();
  for (int64_t r = 0; r < M; r++) {
    ((int32_t *)t.data)[r * t.ld] = tg[r] < 0 ? -100 : tg[r];
    nv += tg[r] >= 0;
  }
  st = coda_plan_run(ctx, s->head, CODA_PHASE_FORWARD);
  PE(CODA_PH_HEAD, -1);
  if (!st) st = tensor(ctx, s->head, "loss", &t);
  if (st) return st;
  if (loss) *loss = nv ? coda_load(&t, 0, 0) : 0.0;
  if (n_valid) *n_valid = nv;
  if (!backward || nv == 0) return CODA_OK;
  *ran_backward = 1;
  PB();
  st = coda_plan_run(ctx, s->head, CODA_PHASE_BACKWARD);
  /* d(gscale · loss): every gradient from the plans is of the mean loss */
  if (!st) st = coda_plans_accumulate_slots(ctx, m, s, s->L, gscale);
  PE(CODA_PH_HEAD, -1);
  for (int i = s->L - 1; i >= 0 && !st; i--) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_BACKWARD);
    if (!st) st = coda_plans_accumulate_slots(ctx, m, s, i, gscale);
    PE(CODA_PH_BLOCK_BWD, i);
  }
  return st;
}

/* The offset of a parameter in the device gradient (and bf16 weights). */
static size_t goff(const dev_state *d, coda_model *m, const coda_param *p) {
  return d->z ? d->z->ppoff[p - coda_model_param(m, 0)] : p->offset;
}

/* Plan weight buffer <- the master + shift (rounded; shift 1 for Gemma 3's
 * norm weights), or with data parallelism the all-gathered bf16 weights
 * (the same bits: they are the rounded master; no shifted slots there). */
static coda_status dev_round(coda_context ctx, coda_plan p, const char *name, const dev_state *d,
                             coda_model *m, const coda_param *prm, float shift) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  if ((size_t)(t.rows * t.cols) != prm->size)
    return coda_fail(ctx, CODA_ERR_SHAPE, "plan buffer '%s' holds %lld values, the weight %zu",
                     name, (long long)(t.rows * t.cols), prm->size);
  if (!d->z) return coda_train_round(ctx, &t, d->w + prm->offset, shift);
  if (shift != 0.0f)
    return coda_fail(ctx, CODA_ERR_INTERNAL, "plan buffer '%s': a shifted weight under data "
                     "parallelism", name);
  coda_tensor src = coda_tensor_2d(d->wb + goff(d, m, prm), CODA_BF16, t.rows, t.cols);
  return coda_tensor_copy(ctx, &t, &src);
}

/* Data parallel: bucket k's reduce-scatter (in place, summed), on the
 * communication stream once the compute stream has written it. */
static coda_status reduce_bucket(coda_context ctx, dev_state *d, int k) {
  const coda_zero *z = d->z;
  const coda_zero_bucket *b = &z->b[k];
  float *g = d->g + b->poff;
  coda_status st = coda_comm_wait_compute(ctx, z->comm);
  if (!st)
    st = coda_comm_reduce_scatter(ctx, z->comm, g, g + (size_t)z->r * b->piece, b->piece, CODA_F32);
  return st;
}

/* Plan buffer `name` bound to count values of base (dtype dt) from off. */
static coda_status bind_slice(coda_context ctx, coda_plan p, const char *name, void *base,
                              coda_dtype dt, size_t off, size_t count) {
  coda_tensor t;
  coda_status st = tensor(ctx, p, name, &t);
  if (st) return st;
  if ((size_t)(t.rows * t.cols) != count)
    return coda_fail(ctx, CODA_ERR_SHAPE, "plan buffer '%s' holds %lld values, the parameter %zu",
                     name, (long long)(t.rows * t.cols), count);
  coda_tensor v = coda_tensor_2d((char *)base + off * coda_dtype_size(dt), dt, t.rows, t.cols);
  st = coda_plan_bind(p, name, &v);
  if (st) return coda_fail(ctx, st, "binding plan buffer '%s': %s", name, coda_last_error(ctx));
  return CODA_OK;
}

/* The weight (grads 0) or gradient (grads 1) buffers of every plan's
 * parameters (the slots) as views of base (dtype dt) in the master's
 * layout. */
static coda_status bind_all(coda_context ctx, plans_state *s, int grads, void *base,
                            coda_dtype dt) {
  coda_status st = CODA_OK;
  for (int k = 0; k <= s->L; k++)
    for (int j = s->sfirst[k]; j < s->sfirst[k + 1] && !st; j++) {
      const plan_slot *q = &s->slot[j];
      if (!grads && q->shift != 0.0f) continue; /* w + shift: its own buffer (shift_weights) */
      st = bind_slice(ctx, plan_at(s, k), grads ? q->g : q->w, base, dt, q->p->offset,
                      q->p->size);
    }
  return st;
}

/* Plan k's shifted weights (Gemma 3's norms: the plans scale by 1 + w, the
 * master holds w) rounded from the master into their own buffers, after
 * the plan's group of the previous update has landed (dev_state's wait):
 * the gradient is the same for w and 1 + w, so only the copy differs. */
static coda_status shift_weights(coda_context ctx, coda_model *m, plans_state *s, dev_state *d,
                                 int k) {
  coda_status st = CODA_OK;
  for (int j = s->sfirst[k]; j < s->sfirst[k + 1] && !st; j++)
    if (s->slot[j].shift != 0.0f)
      st = dev_round(ctx, plan_at(s, k), s->slot[j].w, d, m, s->slot[j].p, s->slot[j].shift);
  return st;
}

/* The plans' weights as views of the flat bf16 copy (once per plan build). */
static coda_status bind_weights(coda_context ctx, plans_state *s, dev_state *d) {
  if (s->wbound) return CODA_OK;
  coda_status st = bind_all(ctx, s, 0, d->wb, CODA_BF16);
  if (!st) s->wbound = 1;
  return st;
}

/* The plans' weight gradients as views of the gradient (GRADS_IN_G) or of
 * the scratch copy (GRADS_IN_SCRATCH; plans that never wrote into the
 * gradient keep their own buffers for this). */
static coda_status bind_grads(coda_context ctx, plans_state *s, dev_state *d, int want) {
  if (s->grads == want || (want == GRADS_IN_SCRATCH && s->grads == GRADS_OWN)) return CODA_OK;
  if (want == GRADS_IN_SCRATCH && !d->gs) {
    coda_status st = dev_alloc(ctx, d->n * sizeof(float), &d->gs);
    if (st) return st;
  }
  coda_status st = bind_all(ctx, s, 1, want == GRADS_IN_G ? d->g : d->gs, CODA_F32);
  if (!st) s->grads = want;
  return st;
}

/* The gradient of plan k's parameters (its slots) += scale · its gradient
 * buffers, on the device. */
static coda_status dev_accum(coda_context ctx, coda_model *m, plans_state *s, dev_state *d,
                             int k, float scale) {
  coda_status st = CODA_OK;
  for (int j = s->sfirst[k]; j < s->sfirst[k + 1] && !st; j++) {
    const plan_slot *q = &s->slot[j];
    coda_tensor t;
    st = tensor(ctx, plan_at(s, k), q->g, &t);
    if (!st && (size_t)(t.rows * t.cols) != q->p->size)
      st = coda_fail(ctx, CODA_ERR_SHAPE, "plan buffer '%s' holds %lld values, the weight %zu",
                     q->g, (long long)(t.rows * t.cols), q->p->size);
    if (!st) st = coda_train_accum(ctx, d->g + goff(d, m, q->p), &t, scale);
  }
  return st;
}

/* Positions grouped by token, in token order within a group (a stable
 * counting sort): rows[j] = j-th distinct token, its positions pos[seg[j]
 * .. seg[j+1]). Returns the number of distinct tokens or -1 (no memory). */
static int group_tokens(const int32_t *in, int64_t M, int V, int32_t *rows, int32_t *seg,
                        int32_t *pos) {
  int32_t *start = calloc((size_t)V + 1, sizeof *start);
  if (!start) return -1;
  for (int64_t r = 0; r < M; r++) start[in[r] + 1]++;
  int nr = 0;
  for (int v = 0; v < V; v++) {
    if (start[v + 1]) {
      rows[nr] = v;
      seg[nr++] = start[v];
    }
    start[v + 1] += start[v];
  }
  seg[nr] = (int32_t)M;
  for (int64_t r = 0; r < M; r++) pos[start[in[r]]++] = (int32_t)r;
  free(start);
  return nr;
}


/* Sampling (no targets): the last position's hidden state comes down;
 * the final norm and the LM head run on the host into last_logits (GPT-2's
 * LayerNorm as its CPU path runs it, model_plans_gpt2.c). */
static coda_status host_head(coda_context ctx, coda_model *m, plans_state *s, int T,
                             float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int64_t D = c->dim;
  coda_tensor t;
  coda_status st = tensor(ctx, s->blk[s->L - 1], "x_out", &t);
  double *x = malloc((size_t)D * sizeof *x);
  uint16_t *row = malloc((size_t)D * sizeof *row);
  if (!st && (!x || !row)) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!st && t.dtype != CODA_BF16)
    st = coda_fail(ctx, CODA_ERR_DTYPE, "the block output is not bf16");
  if (!st)
    st = coda_memcpy_d2h(ctx, row, (const uint16_t *)t.data + (int64_t)(T - 1) * t.ld,
                          (size_t)D * sizeof *row);
  for (int64_t k = 0; k < D && !st; k++) x[k] = coda_bf16_to_f32(row[k]);
  if (!st && coda_family_of(c->family)->block == CODA_BLOCK_GPT2) {
    coda_plans_gpt2_head_row(m, x, last_logits);
  } else if (!st) {
    const float *W = coda_model_weights(m);
    const coda_param *pn = coda_model_find(m, "norm.weight");
    const coda_param *po = c->tied ? s->emb[0] : coda_model_find(m, "output.weight");
    double ss = 0.0;
    for (int64_t k = 0; k < D; k++) ss += x[k] * x[k];
    double r = 1.0 / sqrt(ss / (double)D + c->norm_eps);
    /* Gemma 3's final norm scales by 1 + w and caps the logits (as the CPU's) */
    const int gemma = coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3;
    const float *wn = W + pn->offset;
    for (int64_t k = 0; k < D; k++) x[k] = (float)(x[k] * r * (gemma ? 1.0f + wn[k] : wn[k]));
    for (int64_t v = 0; v < c->vocab; v++) {
      double a = 0.0;
      for (int64_t k = 0; k < D; k++) a += x[k] * W[po->offset + v * D + k];
      last_logits[v] = coda_ref_softcap((float)a, c->logit_softcap);
    }
  }
  free(x);
  free(row);
  return st;
}

/* The position table's gradient groups (dev_state: position t's rows
 * t, T + t, ... ascending, the host loop's order), uploaded once per
 * batch shape. */
static coda_status ensure_positions(coda_context ctx, dev_state *d, int B, int T) {
  if (d->ppos && d->pB == B && d->pT == T) return CODA_OK;
  coda_free(ctx, d->prow);
  coda_free(ctx, d->pseg);
  coda_free(ctx, d->ppos);
  d->prow = d->pseg = d->ppos = NULL;
  d->pB = d->pT = 0;
  const int64_t M = (int64_t)B * T;
  int32_t *h = malloc((size_t)(2 * T + 1 + M) * sizeof *h);
  if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  int32_t *rows = h, *seg = h + T, *pos = h + 2 * T + 1;
  for (int t = 0; t < T; t++) {
    rows[t] = t;
    seg[t] = t * B;
    for (int b = 0; b < B; b++) pos[t * B + b] = b * T + t;
  }
  seg[T] = (int32_t)M;
  coda_status st = dev_alloc(ctx, (size_t)T * sizeof *h, &d->prow);
  if (!st) st = dev_alloc(ctx, (size_t)(T + 1) * sizeof *h, &d->pseg);
  if (!st) st = dev_alloc(ctx, (size_t)M * sizeof *h, &d->ppos);
  if (!st) st = coda_memcpy_h2d(ctx, d->prow, rows, (size_t)T * sizeof *h);
  if (!st) st = coda_memcpy_h2d(ctx, d->pseg, seg, (size_t)(T + 1) * sizeof *h);
  if (!st) st = coda_memcpy_h2d(ctx, d->ppos, pos, (size_t)M * sizeof *h);
  free(h);
  if (!st) {
    d->pB = B;
    d->pT = T;
  }
  return st;
}

/* The embeddings' gradients: the first block's dx scatter-added into the
 * rows of the tokens h (grouped by token on the host, so the device adds
 * each row's contributions in order) and, with a position table, into
 * its rows by position (GPT-2's learned positions). */
static coda_status embed_backward(coda_context ctx, coda_model *m, plans_state *s, dev_state *d,
                                  const int32_t *h, int64_t M, float gscale) {
  const coda_model_config *c = coda_model_cfg(m);
  const coda_param *pe = s->emb[0], *pp = s->emb[1];
  coda_prof *pf = coda_model_prof(m);
  coda_tensor t;
  coda_status st = tensor(ctx, s->blk[0], "dx", &t);
  if (st) return st;
  int32_t *rows = malloc((size_t)(3 * M + 1) * sizeof *rows);
  if (!rows) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  int nr = st ? 0 : group_tokens(h, M, c->vocab, rows, rows + M, rows + 2 * M + 1);
  if (!st && nr < 0) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  PB();
  if (!st) st = coda_memcpy_h2d(ctx, d->rows, rows, (size_t)nr * sizeof *rows);
  if (!st) st = coda_memcpy_h2d(ctx, d->seg, rows + M, (size_t)(nr + 1) * sizeof *rows);
  if (!st) st = coda_memcpy_h2d(ctx, d->pos, rows + 2 * M + 1, (size_t)M * sizeof *rows);
  if (!st && pp) st = ensure_positions(ctx, d, s->B, s->T);
  PE(CODA_PH_UPLOAD, -1);
  PB();
  /* d(e * esc)/de = esc (Gemma 3's embedding scale; 1 elsewhere) */
  if (!st) st = coda_train_embed_grad(ctx, d->g + goff(d, m, pe), &t, d->rows, d->seg,
                                           d->pos, nr, gscale * coda_model_embed_scale(c));
  if (!st && pp) st = coda_train_embed_grad(ctx, d->g + goff(d, m, pp), &t, d->prow, d->pseg,
                                            d->ppos, s->T, gscale);
  PE(CODA_PH_EMBED, -1);
  free(rows);
  return st;
}

/* The plans' bf16 weights from the fp32 master: bound (the AdamW kernels
 * wrote them) or rounded, the head's only when it runs (not sampling). */
static coda_status cast_weights(coda_context ctx, coda_model *m, plans_state *s, dev_state *d,
                                int sample) {
  coda_prof *pf = coda_model_prof(m);
  coda_status st = CODA_OK;
  PB();
  if (d->bind) {
    st = bind_weights(ctx, s, d); /* wb is current: AdamW wrote it */
  } else {
    for (int k = 0; k < s->L + !sample; k++)
      for (int j = s->sfirst[k]; j < s->sfirst[k + 1] && !st; j++)
        if (s->slot[j].shift == 0.0f) /* shifted ones: shift_weights */
          st = dev_round(ctx, plan_at(s, k), s->slot[j].w, d, m, s->slot[j].p, 0.0f);
  }
  PE(CODA_PH_CAST, -1);
  return st;
}

/* Block 0's input: the token embedding's rows (+ the position table's,
 * fp32 sums rounded once) from the fp32 master, or from the bf16 weights
 * where they are the exact source: data parallel (the all-gathered copy;
 * no position table there, ensure), bf16 state (the weights themselves),
 * bound plans with neither a position table nor an embedding scale (the
 * rounded master: the same bits; round(w) + p or round(w) · sqrt(dim)
 * would round twice). */
static coda_status embed_forward(coda_context ctx, coda_model *m, plans_state *s, dev_state *d,
                                 coda_tensor *x0) {
  const coda_param *pe = s->emb[0], *pp = s->emb[1];
  const float esc = coda_model_embed_scale(coda_model_cfg(m)); /* Gemma 3: sqrt(dim) */
  if (d->z || d->bf16 || (d->bind && !pp && esc == 1.0f))
    return coda_train_embed16(ctx, x0, d->wb + goff(d, m, pe), d->tok,
                              pp ? d->wb + goff(d, m, pp) : NULL, s->T, esc);
  return coda_train_embed(ctx, x0, d->w + pe->offset, d->tok, pp ? d->w + pp->offset : NULL,
                          s->T, esc);
}

static coda_status forward_gpu(coda_context ctx, coda_model *m, plans_state *s,
                               const int32_t *in, const int32_t *tg, int T, int backward,
                               float gscale, double *loss, int64_t *n_valid, float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int sample = tg == NULL;
  const int64_t M = (int64_t)s->B * s->T;
  dev_state *d = NULL;
  coda_status st = coda_dev_state_ensure(ctx, m, s, &d);
  if (!st) st = coda_dev_state_ensure_uploads(ctx, d, M);
  if (!st && d->z && s->emb[1])
    st = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "data parallel training on the GPU runs the "
                   "llama and qwen3 families; a model with learned positions (gpt2) trains on "
                   "one GPU");
  if (!st && d->bf16 && coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3)
    st = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the bf16 optimizer state keeps no fp32 master, "
                   "from which Gemma 3's (1 + w) norm weights are rounded on the GPU: train gemma3 "
                   "with the fp32 state (--optimizer-state fp32)");
  if (st) return st;
  coda_prof *pf = coda_model_prof(m);
  st = cast_weights(ctx, m, s, d, sample);
  if (st) return st;
  /* host-side token arrays: checked, then uploaded (small) */
  int32_t *h = malloc((size_t)M * sizeof *h);
  if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  int64_t nv = 0;
  for (int64_t r = 0; r < M && !st; r++) {
    h[r] = sample ? (r < T ? in[r] : 0) : in[r];
    if (h[r] < 0 || h[r] >= c->vocab)
      st = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "token %d at position %lld is outside the "
                     "vocabulary of %d", h[r], (long long)r, c->vocab);
    if (!sample) nv += tg[r] >= 0;
  }
  coda_tensor x0, t;
  PB();
  if (!st) st = coda_memcpy_h2d(ctx, d->tok, h, (size_t)M * sizeof *h);
  PE(CODA_PH_UPLOAD, -1);
  if (!st) st = tensor(ctx, s->blk[0], "x", &x0);
  /* each read of the weights waits for its group's update alone (the
   * previous step's AdamW runs beside this forward: dev_state) */
  if (!st) st = coda_dev_state_wait_group(ctx, d, 0);
  PB();
  if (!st) st = embed_forward(ctx, m, s, d, &x0);
  PE(CODA_PH_EMBED, -1);
  for (int i = 0; i < s->L && !st; i++) {
    st = coda_dev_state_wait_group(ctx, d, 1 + i);
    PB();
    if (!st) st = shift_weights(ctx, m, s, d, i);
    if (!st) st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_FORWARD);
    PE(CODA_PH_BLOCK_FWD, i);
  }
  if (!st && sample) {
    st = host_head(ctx, m, s, T, last_logits);
    free(h);
    return st;
  }
  PB();
  if (!st) st = coda_memcpy_h2d(ctx, d->tg, tg, (size_t)M * sizeof *tg);
  PE(CODA_PH_UPLOAD, -1);
  if (!st) st = tensor(ctx, s->head, "targets", &t);
  if (!st) st = coda_dev_state_settle_optim(ctx, d); /* the final norm and output */
  if (!st) st = shift_weights(ctx, m, s, d, s->L);
  PB();
  if (!st) st = coda_train_targets(ctx, &t, d->tg);
  if (!st) st = coda_plan_run(ctx, s->head, CODA_PHASE_FORWARD);
  PE(CODA_PH_HEAD, -1);
  if (!st) st = tensor(ctx, s->head, "loss", &t);
  float lv = 0.0f;
  if (!st && t.dtype != CODA_F32) st = coda_fail(ctx, CODA_ERR_DTYPE, "the loss is not f32");
  PB();
  if (!st) st = coda_memcpy_d2h(ctx, &lv, t.data, sizeof lv);
  PE(CODA_PH_READ, -1);
  if (st) { free(h); return st; }
  if (loss) *loss = nv ? (double)lv : 0.0;
  if (n_valid) *n_valid = nv;
  /* Data parallel, last micro-batch of a step: each bucket's reduce-scatter
   * starts as soon as its gradient is final, so the communication runs under
   * the rest of the backward: the head (norm, untied output), layers L-1 ..
   * 0, then the embedding (which holds the tied output's gradient). */
  const int reduce = backward && d->z && d->reduce;
  if (reduce) d->reduce = 0;
  if (!backward || nv == 0) { /* nothing added: the buckets are final as they are */
    for (int k = d->z ? d->z->nb - 1 : 0; reduce && k >= 0 && !st; k--) st = reduce_bucket(ctx, d, k);
    free(h);
    return st;
  }
  /* bound plans: the step's first micro-batch at scale 1 writes the
   * gradient in place; the embedding tables no plan writes (an untied
   * token table, the positions) are zeroed for the scatter-add, everything
   * else is overwritten by its GEMM or column sum */
  const int direct = d->bind && d->zero_pending && gscale == 1.0f;
  if (d->bind) {
    if (!direct) st = coda_dev_state_settle_zero(ctx, d);
    if (!st) st = bind_grads(ctx, s, d, direct ? GRADS_IN_G : GRADS_IN_SCRATCH);
    if (!st && direct) d->zero_pending = 0;
    for (int i = 0; i < 2 && !st && direct; i++)
      if (s->emb_own[i])
        st = coda_train_zero(ctx, d->g + s->emb[i]->offset, s->emb[i]->size * sizeof(float));
  }
  PB();
  if (!st) st = coda_plan_run(ctx, s->head, CODA_PHASE_BACKWARD);
  if (!st && !direct) st = dev_accum(ctx, m, s, d, s->L, gscale);
  PE(CODA_PH_HEAD, -1);
  if (!st && reduce) st = reduce_bucket(ctx, d, d->z->nb - 1);
  for (int i = s->L - 1; i >= 0 && !st; i--) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_BACKWARD);
    if (!st && !direct) st = dev_accum(ctx, m, s, d, i, gscale);
    PE(CODA_PH_BLOCK_BWD, i);
    if (!st && reduce) st = reduce_bucket(ctx, d, 1 + i);
  }
  if (!st) st = embed_backward(ctx, m, s, d, h, M, gscale);
  if (!st && reduce) st = reduce_bucket(ctx, d, 0);
  free(h);
  return st;
}

coda_status coda_plans_forward(coda_context ctx, coda_model *m, const int32_t *in,
                               const int32_t *tg, int B, int T, int backward, float gscale,
                               double *loss, int64_t *n_valid, float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int sample = tg == NULL;
  const int RB = sample ? 1 : B, RT = sample ? c->seq : T;
  plans_state *s = NULL;
  coda_status st = ensure(ctx, m, RB, RT, &s);
  if (st) return st;
  if (on_gpu(ctx)) /* every family the plan engine runs */
    return forward_gpu(ctx, m, s, in, tg, T, backward, gscale, loss, n_valid, last_logits);
  if (coda_family_of(c->family)->block == CODA_BLOCK_GPT2) /* the CPU backend */
    return coda_plans_gpt2_forward(ctx, m, s, in, tg, T, backward, gscale, loss, n_valid,
                                   last_logits);
  return coda_plans_llama_forward(ctx, m, s, in, tg, T, backward, gscale, loss, n_valid,
                                  last_logits);
}
