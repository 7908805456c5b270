/* The plan engine's device state on a CUDA context: the fp32 master
 * weights, the fp32 gradient and the AdamW moments live in device memory
 * (dev_state, model_device.h) from the first upload (or initialization on
 * the device) to the last download; the training step between (the plans,
 * the embedding kernels, the gradient's bindings) is model_plans.c's.
 *
 * Its lifetime: upload of the host weights and moments, initialization
 * drawn on the device, download, and reads of a stretch of one buffer (the
 * streamed checkpoint writer, coda_checkpoint_save_device); the gradient's
 * zeroing (deferred where the plans write it in place) and norm; AdamW,
 * one launch over all parameters where the plans' weights are bound to the
 * flat bf16 copy of the master, which it writes as it updates the master.
 *
 * Data parallel (ZeRO-1, zero.c): the master and the moments hold this
 * rank's shard, the gradient and the bf16 weights the padded layout;
 * after its AdamW each rank all-gathers the bf16 weights, and the download
 * all-gathers the shards. */
#include "model/model_device.h"
#include "model/family.h"
#include "dist/comm.h"
#include "api/api.h" /* the backend's copies and training kernels */
#include "base/internal.h" /* the context's knobs */
#include "base/bf16_round.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements per gradient-norm partial sum (one thread block each). */
#define NORM_CHUNK 65536

static void free_scratch(dev_state *d) {
  coda_free(d->ctx, d->tok); coda_free(d->ctx, d->tg); coda_free(d->ctx, d->rows);
  coda_free(d->ctx, d->seg); coda_free(d->ctx, d->pos);
  d->tok = d->tg = d->rows = d->seg = d->pos = NULL;
  d->cap = 0;
}
void coda_dev_state_free(dev_state *d) {
  if (!d) return;
  /* the buffers are freed in the context's stream order: after the side
   * queue's last update (a failure here has no one to report to) */
  (void)coda_dev_state_settle_optim(d->ctx, d);
  coda_train_side_destroy(d->ctx, d->side);
  free(d->gend);
  free_scratch(d);
  coda_free(d->ctx, d->w); coda_free(d->ctx, d->g); coda_free(d->ctx, d->m); coda_free(d->ctx, d->v);
  coda_free(d->ctx, d->part);
  coda_free(d->ctx, d->wb);
  coda_free(d->ctx, d->oseg);
  coda_free(d->ctx, d->gs);
  coda_free(d->ctx, d->mb); coda_free(d->ctx, d->vb);
  coda_free(d->ctx, d->prow); coda_free(d->ctx, d->pseg); coda_free(d->ctx, d->ppos);
  free(d);
}

/* wb = the master rounded to bf16 (one process, bound plans; with bf16
 * state wb is the weights themselves). */
static coda_status round_all(coda_context ctx, dev_state *d) {
  if (!d->bind || d->bf16) return CODA_OK;
  coda_tensor t = coda_tensor_2d(d->wb, CODA_BF16, 1, (int64_t)d->n);
  return coda_train_round(ctx, &t, d->w, 0.0f);
}

static coda_status setup_bind(coda_context ctx, coda_model *m, dev_state *d);

/* The optimizer's groups in the flat layout (the embeddings: what comes
 * before layer 0, layers 0 .. L-1, the rest), each the stretch the forward reads at one point; none (AdamW
 * in one launch) when the layout is not in that order or the knob is off.
 * Every parameter starts at a multiple of 8 elements (setup_bind), as the
 * update's float4 stretches need. Off unless CODA_OPTIM_OVERLAP=1: the
 * update's blocks slow the GEMMs they share the SMs with by more than the
 * time they hide (docs/decisions.md). */
static coda_status setup_groups(coda_context ctx, coda_model *m, dev_state *d) {
  const coda_model_config *c = coda_model_cfg(m);
  if (!ctx->knobs.optim_overlap_on || !coda_train_has_side_queues(ctx))
    return CODA_OK;
  const int ng = c->layers + 2, np = coda_model_num_params(m);
  size_t *end = calloc((size_t)ng, sizeof *end);
  if (!end) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  int ok = 1, last = 0;
  for (int i = 0; i < np && ok; i++) {
    const coda_param *p = coda_model_param(m, i);
    int layer, k;
    if (sscanf(p->name, "layers.%d.", &layer) == 1 && layer >= 0 && layer < c->layers)
      k = 1 + layer;
    else k = last ? ng - 1 : 0; /* before the layers (token and position tables) or after */
    ok = k >= last; /* groups in layout order */
    last = k;
    if (ok) end[k] = p->offset + p->size;
  }
  for (int k = 1; k < ng && ok; k++) ok = end[k] >= end[k - 1];
  if (!ok || end[ng - 1] != d->n) {
    free(end);
    return CODA_OK;
  }
  d->gend = end;
  d->ngroups = ng;
  return CODA_OK;
}

coda_status coda_dev_state_wait_group(coda_context ctx, dev_state *d, int k) {
  if (!d->side || d->opt_next < 0 || k < d->opt_next) return CODA_OK;
  if (k >= d->ngroups) k = d->ngroups - 1;
  coda_status st = coda_train_side_wait(ctx, d->side, k);
  if (st) return st;
  d->opt_next = k + 1 < d->ngroups ? k + 1 : -1;
  return CODA_OK;
}

coda_status coda_dev_state_settle_optim(coda_context ctx, dev_state *d) {
  return coda_dev_state_wait_group(ctx, d, d->ngroups - 1);
}

/* The side queue, created on first use: a marker per group. */
static coda_status ensure_side(coda_context ctx, dev_state *d) {
  if (d->side || !d->gend) return CODA_OK;
  return coda_train_side_create(ctx, d->ngroups, &d->side);
}

/* n values between fp32 on the host and bf16 on the device, through a
 * bounded staging buffer: up 1 rounds host -> device (to nearest even),
 * up 0 widens device -> host (exactly). */
static coda_status copy_bf16(coda_context ctx, int up, uint16_t *dev, float *host, size_t n) {
  enum { CHUNK = 1 << 22 };
  uint16_t *h = malloc((n < CHUNK ? (n ? n : 1) : CHUNK) * sizeof *h);
  if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_status st = CODA_OK;
  for (size_t lo = 0; lo < n && !st; lo += CHUNK) {
    const size_t k = n - lo < CHUNK ? n - lo : CHUNK;
    if (up) {
      for (size_t i = 0; i < k; i++) h[i] = coda_bf16_rne(host[lo + i]);
      st = coda_memcpy_h2d(ctx, dev + lo, h, k * sizeof *h);
    } else {
      st = coda_memcpy_d2h(ctx, h, dev + lo, k * sizeof *h);
      for (size_t i = 0; i < k && !st; i++) host[lo + i] = coda_bf16_widen(h[i]);
    }
  }
  free(h);
  return st;
}

static coda_status h2d_bf16(coda_context ctx, uint16_t *dst, const float *src, size_t n) {
  return copy_bf16(ctx, 1, dst, (float *)src, n); /* read only when up */
}

static coda_status d2h_bf16(coda_context ctx, float *dst, const uint16_t *src, size_t n) {
  return copy_bf16(ctx, 0, (uint16_t *)src, dst, n); /* read only when down */
}

/* The device state, created on first use; from_host 1: the master from the
 * host weights, 0: left for the caller to write (then round_all). */
static coda_status ensure_dev_from(coda_context ctx, coda_model *m, plans_state *s,
                                   dev_state **out, int from_host) {
  if (s->dev) { *out = s->dev; return CODA_OK; }
  dev_state *d = calloc(1, sizeof *d);
  if (!d) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  d->ctx = ctx;
  d->opt_next = -1;
  d->n = coda_model_size(m);
  d->npart = (d->n + NORM_CHUNK - 1) / NORM_CHUNK;
  d->z = s->z;
  const size_t fb = d->n * sizeof(float);
  coda_status st;
  if (d->z) { /* shard state; the gradient and bf16 weights padded */
    const coda_zero *z = d->z;
    const size_t sb = (z->nshard ? z->nshard : 1) * sizeof(float);
    d->npart = 0;
    for (int k = 0; k < z->nb; k++) d->npart += (z->b[k].piece + NORM_CHUNK - 1) / NORM_CHUNK;
    st = dev_alloc(ctx, sb, &d->w);
    if (!st) st = dev_alloc(ctx, z->npad * sizeof(float), &d->g);
    if (!st) st = dev_alloc(ctx, sb, &d->m);
    if (!st) st = dev_alloc(ctx, sb, &d->v);
    if (!st) st = dev_alloc(ctx, z->npad * sizeof(uint16_t), &d->wb);
    if (!st) st = dev_alloc(ctx, (d->npart ? d->npart : 1) * sizeof(double), &d->part);
    if (st) {
      coda_dev_state_free(d);
      return st;
    }
    s->dev = d;
    *out = d;
    return CODA_OK; /* filled by coda_plans_device_upload */
  }
  d->bf16 = s->bf16;
  d->sr_seed = s->sr_seed;
  if (d->bf16) { /* no master: the bf16 weights (setup_bind) and moments */
    st = dev_alloc(ctx, fb, &d->g);
    if (!st) st = dev_alloc(ctx, d->n * sizeof(uint16_t), &d->mb);
    if (!st) st = dev_alloc(ctx, d->n * sizeof(uint16_t), &d->vb);
  } else {
    st = dev_alloc(ctx, fb, &d->w);
    if (!st) st = dev_alloc(ctx, fb, &d->g);
    if (!st) st = dev_alloc(ctx, fb, &d->m);
    if (!st) st = dev_alloc(ctx, fb, &d->v);
  }
  if (!st) st = dev_alloc(ctx, (d->npart ? d->npart : 1) * sizeof(double), &d->part);
  if (!st && from_host && !d->bf16) st = coda_memcpy_h2d(ctx, d->w, coda_model_weights(m), fb);
  if (!st) st = setup_bind(ctx, m, d);
  if (!st && d->bf16 && !d->bind)
    st = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "bf16 optimizer state: the plans' weights must "
                   "bind to one flat buffer (parameters back to back on 8-element boundaries), "
                   "and this model's layout does not; use the fp32 state");
  if (!st && from_host && d->bf16) st = h2d_bf16(ctx, d->wb, coda_model_weights(m), d->n);
  if (st) {
    coda_dev_state_free(d);
    return st;
  }
  s->dev = d;
  *out = d;
  return CODA_OK;
}

coda_status coda_dev_state_ensure(coda_context ctx, coda_model *m, plans_state *s,
                                  dev_state **out) {
  return ensure_dev_from(ctx, m, s, out, 1);
}

/* One process: the flat bf16 weights and the optimizer's segment table,
 * when every parameter starts on a 16-byte boundary of both copies (what
 * the GEMMs' TMA descriptors need of a bound buffer), the parameters lie
 * back to back and each is one plan buffer or an embedding table
 * (coda_plans_slots_cover); otherwise the plans keep their own buffers
 * (rounded before each forward, accumulated after each backward). */
static coda_status setup_bind(coda_context ctx, coda_model *m, dev_state *d) {
  const int np = coda_model_num_params(m);
  int ok = np > 0;
  size_t end = 0;
  for (int i = 0; i < np && ok; i++) {
    const coda_param *p = coda_model_param(m, i);
    ok = p->offset == end && p->offset % 8 == 0;
    end = p->offset + p->size;
  }
  /* every family: the plans write every parameter's gradient but the
   * embedding tables', which the backward zeroes and scatter-adds */
  if (!ok || end != d->n || !coda_plans_slots_cover(m)) return CODA_OK;
  int64_t *seg = malloc((size_t)np * 2 * sizeof *seg);
  if (!seg) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  int ns = 0; /* neighbours with the same decay share a segment */
  for (int i = 0; i < np; i++) {
    const coda_param *p = coda_model_param(m, i);
    if (ns && seg[2 * ns - 1] == (p->decay != 0)) seg[2 * ns - 2] = (int64_t)(p->offset + p->size);
    else {
      seg[2 * ns] = (int64_t)(p->offset + p->size);
      seg[2 * ns + 1] = p->decay != 0;
      ns++;
    }
  }
  coda_status st = dev_alloc(ctx, (size_t)ns * 2 * sizeof *seg, &d->oseg);
  if (!st) st = coda_memcpy_h2d(ctx, d->oseg, seg, (size_t)ns * 2 * sizeof *seg);
  free(seg);
  if (!st) st = setup_groups(ctx, m, d);
  if (!st) st = dev_alloc(ctx, d->n * sizeof(uint16_t), &d->wb);
  if (!st) {
    d->nseg = ns;
    d->bind = 1;
    st = round_all(ctx, d);
  }
  return st;
}

coda_status coda_dev_state_ensure_uploads(coda_context ctx, dev_state *d, int64_t M) {
  if (d->cap >= M) return CODA_OK;
  free_scratch(d);
  const size_t b = (size_t)M * sizeof(int32_t);
  coda_status st = dev_alloc(ctx, b, &d->tok);
  if (!st) st = dev_alloc(ctx, b, &d->tg);
  if (!st) st = dev_alloc(ctx, b, &d->rows);
  if (!st) st = dev_alloc(ctx, b + sizeof(int32_t), &d->seg);
  if (!st) st = dev_alloc(ctx, b, &d->pos);
  if (st) {
    free_scratch(d);
    return st;
  }
  d->cap = M;
  return CODA_OK;
}

coda_status coda_dev_state_settle_zero(coda_context ctx, dev_state *d) {
  if (!d->zero_pending) return CODA_OK;
  coda_status st = coda_dev_state_settle_optim(ctx, d);
  if (st) return st;
  d->zero_pending = 0;
  return coda_train_zero(ctx, d->g, d->n * sizeof(float));
}

static coda_status no_device(coda_context ctx) {
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the trainer's device state needs the plan engine "
                   "on a CUDA context");
}

static dev_state *dev_of(coda_context ctx, coda_model *m) {
  plans_state *s = *coda_model_plans_slot(m);
  return on_gpu(ctx) && coda_model_engine(m) == CODA_ENGINE_PLANS && s ? s->dev : NULL;
}

int coda_plans_on_device(coda_context ctx, coda_model *m) {
  return on_gpu(ctx) && coda_model_engine(m) == CODA_ENGINE_PLANS;
}

/* The model's plan-engine state, created (without plans) where a device
 * call comes before the first forward. */
static coda_status plans_of(coda_context ctx, coda_model *m, plans_state **out) {
  plans_state *s = *coda_model_plans_slot(m);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    *coda_model_plans_slot(m) = s;
  }
  *out = s;
  return CODA_OK;
}

/* Data parallel upload: the shard of the master and moments (host arrays
 * are full size), and the bf16 weights rounded from the whole host master
 * (staged through the gradient buffer, which is zeroed afterwards). */
static coda_status upload_zero(coda_context ctx, coda_model *m, dev_state *d, const float *mom,
                               const float *vel) {
  const coda_zero *z = d->z;
  const float *W = coda_model_weights(m);
  coda_status st = coda_train_zero(ctx, d->g, z->npad * sizeof(float));
  const size_t sb = z->nshard * sizeof(float);
  if (!st) st = coda_train_zero(ctx, d->w, sb);
  if (!st) st = coda_train_zero(ctx, d->m, sb);
  if (!st) st = coda_train_zero(ctx, d->v, sb);
  for (int k = 0; k < z->nb && !st; k++) {
    const coda_zero_bucket *b = &z->b[k];
    const size_t lo = b->off + (size_t)z->r * b->piece, nb = b->mine * sizeof(float);
    st = coda_memcpy_h2d(ctx, d->g + b->poff, W + b->off, b->len * sizeof(float));
    if (!st && nb) st = coda_memcpy_h2d(ctx, d->w + b->soff, W + lo, nb);
    if (!st && nb && mom) st = coda_memcpy_h2d(ctx, d->m + b->soff, mom + lo, nb);
    if (!st && nb && vel) st = coda_memcpy_h2d(ctx, d->v + b->soff, vel + lo, nb);
  }
  coda_tensor src = coda_tensor_2d(d->g, CODA_F32, 1, (int64_t)z->npad);
  coda_tensor dst = coda_tensor_2d(d->wb, CODA_BF16, 1, (int64_t)z->npad);
  if (!st) st = coda_tensor_copy(ctx, &dst, &src);
  if (!st) st = coda_train_zero(ctx, d->g, z->npad * sizeof(float));
  return st;
}

/* Data parallel download (every rank takes part): each of w, m, v is
 * all-gathered from the shards into the gradient buffer (free between
 * steps; zeroed at the next step) and copied down in the flat layout. */
static coda_status download_zero(coda_context ctx, coda_model *m, dev_state *d, float *mom,
                                 float *vel) {
  const coda_zero *z = d->z;
  float *const src[3] = {d->w, d->m, d->v};
  float *const dst[3] = {coda_model_weights(m), mom, vel};
  coda_status st = CODA_OK;
  for (int q = 0; q < 3 && !st; q++) {
    if (!dst[q]) continue;
    for (int k = 0; k < z->nb && !st; k++) {
      const coda_zero_bucket *b = &z->b[k];
      float *mine = d->g + b->poff + (size_t)z->r * b->piece;
      st = coda_train_zero(ctx, mine, b->piece * sizeof(float));
      if (!st && b->mine) {
        coda_tensor to = coda_tensor_2d(mine, CODA_F32, 1, (int64_t)b->mine);
        coda_tensor from = coda_tensor_2d(src[q] + b->soff, CODA_F32, 1, (int64_t)b->mine);
        st = coda_tensor_copy(ctx, &to, &from);
      }
    }
    if (!st) st = coda_comm_wait_compute(ctx, z->comm);
    if (!st) st = coda_comm_group_start(ctx, z->comm);
    for (int k = 0; k < z->nb && !st; k++) {
      const coda_zero_bucket *b = &z->b[k];
      st = coda_comm_all_gather(ctx, z->comm, d->g + b->poff + (size_t)z->r * b->piece,
                                d->g + b->poff, b->piece, CODA_F32);
    }
    if (!st) st = coda_comm_group_end(ctx, z->comm);
    if (!st) st = coda_comm_join(ctx, z->comm);
    for (int k = 0; k < z->nb && !st; k++)
      st = coda_memcpy_d2h(ctx, dst[q] + z->b[k].off, d->g + z->b[k].poff,
                            z->b[k].len * sizeof(float));
  }
  return st;
}

coda_status coda_plans_device_set_zero(coda_context ctx, coda_model *m, const coda_zero *z) {
  if (!coda_plans_on_device(ctx, m)) return no_device(ctx);
  plans_state *s = NULL;
  coda_status st = plans_of(ctx, m, &s);
  if (st) return st;
  if (s->dev)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "data parallel layout set after the device "
                     "state was created");
  if (coda_model_find(m, "pos_embeddings.weight")) /* the lookup reads the fp32 master's sum */
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "data parallel training on the GPU runs the "
                     "llama and qwen3 families; a model with learned positions (gpt2) trains on "
                     "one GPU");
  if (coda_model_cfg(m)->family == CODA_FAMILY_GEMMA3) /* (1 + w) norms: rounded from the master */
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "data parallel training on the GPU runs the "
                     "llama and qwen3 families; gemma3 trains on one GPU");
  s->z = z;
  return CODA_OK;
}

coda_status coda_plans_device_set_bf16_state(coda_context ctx, coda_model *m, uint64_t seed) {
  if (!coda_plans_on_device(ctx, m)) return no_device(ctx);
  plans_state *s = NULL;
  coda_status st = plans_of(ctx, m, &s);
  if (st) return st;
  if (s->dev || s->z)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "bf16 optimizer state: %s",
                     s->z ? "one process only (data parallel shards fp32 state)"
                          : "set after the device state was created");
  s->bf16 = 1;
  s->sr_seed = seed;
  return CODA_OK;
}

coda_status coda_plans_device_arm_reduce(coda_context ctx, coda_model *m) {
  dev_state *d = dev_of(ctx, m);
  if (!d || !d->z) return no_device(ctx);
  d->reduce = 1;
  return CODA_OK;
}

coda_status coda_plans_device_shard_sumsq(coda_context ctx, coda_model *m, double *ss) {
  dev_state *d = dev_of(ctx, m);
  if (!d || !d->z) return no_device(ctx);
  const coda_zero *z = d->z;
  double *part = malloc((d->npart ? d->npart : 1) * sizeof *part);
  if (!part) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_prof *pf = coda_model_prof(m);
  PB();
  coda_status st = coda_comm_join(ctx, z->comm); /* the reduce-scatters are done */
  PE(CODA_PH_REDUCE, -1);
  size_t np = 0;
  PB();
  for (int k = 0; k < z->nb && !st; k++) {
    const coda_zero_bucket *b = &z->b[k];
    st = coda_train_sumsq(ctx, d->g + b->poff + (size_t)z->r * b->piece, b->piece,
                               NORM_CHUNK, d->part + np);
    np += (b->piece + NORM_CHUNK - 1) / NORM_CHUNK;
  }
  PE(CODA_PH_NORM, -1);
  PB();
  if (!st && np) st = coda_memcpy_d2h(ctx, part, d->part, np * sizeof *part);
  PE(CODA_PH_READ, -1);
  double total = 0.0; /* in chunk order; NaN / inf propagate */
  for (size_t i = 0; i < np && !st; i++) total += part[i];
  free(part);
  if (!st) *ss = total;
  return st;
}

coda_status coda_plans_device_upload(coda_context ctx, coda_model *m, const float *mom,
                                     const float *vel) {
  if (!coda_plans_on_device(ctx, m)) return no_device(ctx);
  plans_state *s = NULL;
  coda_status st = plans_of(ctx, m, &s);
  if (st) return st;
  dev_state *d = NULL;
  st = coda_dev_state_ensure(ctx, m, s, &d);
  if (!st && d->z) return upload_zero(ctx, m, d, mom, vel);
  const size_t fb = d ? d->n * sizeof(float) : 0;
  if (!st) st = coda_dev_state_settle_optim(ctx, d);
  if (!st && d->bf16) { /* rounded to the nearest bf16: exact for a bf16 run's checkpoint */
    const size_t hb = d->n * sizeof(uint16_t);
    st = h2d_bf16(ctx, d->wb, coda_model_weights(m), d->n);
    if (!st) st = mom ? h2d_bf16(ctx, d->mb, mom, d->n) : coda_train_zero(ctx, d->mb, hb);
    if (!st) st = vel ? h2d_bf16(ctx, d->vb, vel, d->n) : coda_train_zero(ctx, d->vb, hb);
    if (!st) st = coda_train_zero(ctx, d->g, fb);
    if (!st) d->zero_pending = 0;
    return st;
  }
  if (!st) st = coda_memcpy_h2d(ctx, d->w, coda_model_weights(m), fb);
  if (!st) st = mom ? coda_memcpy_h2d(ctx, d->m, mom, fb) : coda_train_zero(ctx, d->m, fb);
  if (!st) st = vel ? coda_memcpy_h2d(ctx, d->v, vel, fb) : coda_train_zero(ctx, d->v, fb);
  if (!st) st = coda_train_zero(ctx, d->g, fb);
  if (!st) d->zero_pending = 0;
  if (!st) st = round_all(ctx, d);
  return st;
}

coda_status coda_plans_device_init(coda_context ctx, coda_model *m, uint64_t seed) {
  if (!coda_plans_on_device(ctx, m)) return no_device(ctx);
  plans_state *s = NULL;
  coda_status st = plans_of(ctx, m, &s);
  if (st) return st;
  if (s->z || s->dev)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "device initialization: the device state "
                     "exists already, or the model is data parallel (initialize on the host)");
  dev_state *d = NULL;
  st = ensure_dev_from(ctx, m, s, &d, 0);
  /* bf16 state: drawn into the gradient buffer, then rounded into wb */
  float *w0 = st ? NULL : d->bf16 ? d->g : d->w;
  const uint64_t s0 = coda_model_init_stream(seed);
  uint64_t draw = 0;
  for (int i = 0; i < coda_model_num_params(m) && !st; i++) {
    const coda_param *p = coda_model_param(m, i);
    const double sd = coda_model_init_std(m, p);
    if (p->init == CODA_INIT_ONES || p->init == CODA_INIT_ZEROS) { /* as coda_model_init */
      st = coda_train_fill(ctx, w0 + p->offset, p->size, p->init == CODA_INIT_ONES ? 1.0f : 0.0f);
      continue;
    }
    st = coda_train_init_normal(ctx, w0 + p->offset, p->size, s0, draw, sd);
    draw += 2 * (uint64_t)p->size;
  }
  const size_t fb = d ? d->n * sizeof(float) : 0;
  if (!st && d->bf16) {
    coda_tensor t = coda_tensor_2d(d->wb, CODA_BF16, 1, (int64_t)d->n);
    st = coda_train_round(ctx, &t, d->g, 0.0f);
    if (!st) st = coda_train_zero(ctx, d->mb, d->n * sizeof(uint16_t));
    if (!st) st = coda_train_zero(ctx, d->vb, d->n * sizeof(uint16_t));
  } else {
    if (!st) st = coda_train_zero(ctx, d->m, fb);
    if (!st) st = coda_train_zero(ctx, d->v, fb);
  }
  if (!st) st = coda_train_zero(ctx, d->g, fb);
  if (!st) d->zero_pending = 0;
  if (!st) st = round_all(ctx, d);
  return st;
}

coda_status coda_plans_device_read(coda_context ctx, coda_model *m, int which, uint64_t off,
                                   void *dst, size_t n) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  if (d->z || which < 0 || which > 2 || off > d->n * sizeof(float) ||
      n > d->n * sizeof(float) - off)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "device read: %zu bytes at %llu of buffer "
                     "%d (%zu bytes)%s", n, (unsigned long long)off, which, d->n * sizeof(float),
                     d->z ? "; the data parallel layout is gathered by the download" : "");
  coda_status st = coda_dev_state_settle_optim(ctx, d);
  if (!st && d->bf16) { /* widened to fp32, whole values only */
    const uint16_t *b = which == 0 ? d->wb : which == 1 ? d->mb : d->vb;
    if (off % sizeof(float) || n % sizeof(float))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "device read of bf16 state: %zu bytes at "
                       "%llu must be whole fp32 values", n, (unsigned long long)off);
    return d2h_bf16(ctx, dst, b + off / sizeof(float), n / sizeof(float));
  }
  const float *src = which == 0 ? d->w : which == 1 ? d->m : d->v;
  return st ? st : coda_memcpy_d2h(ctx, dst, (const char *)src + off, n);
}

coda_status coda_plans_device_download(coda_context ctx, coda_model *m, float *mom, float *vel) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  if (d->z) return download_zero(ctx, m, d, mom, vel);
  const size_t fb = d->n * sizeof(float);
  coda_status st = coda_dev_state_settle_optim(ctx, d);
  if (!st && d->bf16) {
    st = d2h_bf16(ctx, coda_model_weights(m), d->wb, d->n);
    if (!st && mom) st = d2h_bf16(ctx, mom, d->mb, d->n);
    if (!st && vel) st = d2h_bf16(ctx, vel, d->vb, d->n);
    return st;
  }
  if (!st) st = coda_memcpy_d2h(ctx, coda_model_weights(m), d->w, fb);
  if (!st && mom) st = coda_memcpy_d2h(ctx, mom, d->m, fb);
  if (!st && vel) st = coda_memcpy_d2h(ctx, vel, d->v, fb);
  return st;
}

coda_status coda_plans_device_zero_grad(coda_context ctx, coda_model *m) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  coda_prof *pf = coda_model_prof(m);
  if (d->bind) { /* deferred: the next backward overwrites the gradient */
    d->zero_pending = 1;
    return CODA_OK;
  }
  PB();
  coda_status st = coda_train_zero(ctx, d->g, (d->z ? d->z->npad : d->n) * sizeof(float));
  PE(CODA_PH_OPTIM, -1);
  return st;
}

coda_status coda_plans_device_grad_norm(coda_context ctx, coda_model *m, double *norm) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  if (d->z) return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "data parallel: the norm is summed "
                             "over the shards (coda_plans_device_shard_sumsq)");
  double *part = malloc((d->npart ? d->npart : 1) * sizeof *part);
  if (!part) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_prof *pf = coda_model_prof(m);
  PB();
  coda_status st = coda_dev_state_settle_optim(ctx, d);
  if (!st) st = coda_dev_state_settle_zero(ctx, d);
  if (!st) st = coda_train_sumsq(ctx, d->g, d->n, NORM_CHUNK, d->part);
  PE(CODA_PH_NORM, -1);
  PB();
  if (!st) st = coda_memcpy_d2h(ctx, part, d->part, d->npart * sizeof *part);
  PE(CODA_PH_READ, -1);
  double total = 0.0; /* finished on the host in chunk order; NaN / inf propagate */
  for (size_t i = 0; i < d->npart && !st; i++) total += part[i];
  free(part);
  if (!st) *norm = sqrt(total);
  return st;
}

/* Data parallel: AdamW of this rank's stretches, the updated master
 * rounded into its pieces of the bf16 weights, then every bucket's
 * all-gather (one NCCL group), which the next forward waits for. */
static coda_status adamw_zero(coda_context ctx, dev_state *d, coda_prof *pf, const coda_adamw *o,
                              int64_t t, double lr, double gscale) {
  const coda_zero *z = d->z;
  coda_status st = CODA_OK;
  PB();
  for (int i = 0; i < z->nseg && !st; i++) {
    const coda_zero_seg *g = &z->seg[i];
    const double coef[7] = {o->beta1, o->beta2, 1.0 - pow(o->beta1, (double)t),
                            1.0 - pow(o->beta2, (double)t), lr, o->eps,
                            g->decay ? 1.0 - lr * o->weight_decay : 1.0};
    st = coda_train_adamw(ctx, d->w + g->soff, d->g + g->poff, d->m + g->soff,
                               d->v + g->soff, g->len, coef, gscale);
  }
  for (int k = 0; k < z->nb && !st; k++) {
    const coda_zero_bucket *b = &z->b[k];
    if (!b->mine) continue;
    coda_tensor src = coda_tensor_2d(d->w + b->soff, CODA_F32, 1, (int64_t)b->mine);
    coda_tensor dst = coda_tensor_2d(d->wb + b->poff + (size_t)z->r * b->piece, CODA_BF16, 1,
                                     (int64_t)b->mine);
    st = coda_tensor_copy(ctx, &dst, &src);
  }
  PE(CODA_PH_OPTIM, -1);
  PB();
  if (!st) st = coda_comm_wait_compute(ctx, z->comm);
  if (!st) st = coda_comm_group_start(ctx, z->comm);
  for (int k = 0; k < z->nb && !st; k++) {
    const coda_zero_bucket *b = &z->b[k];
    st = coda_comm_all_gather(ctx, z->comm, d->wb + b->poff + (size_t)z->r * b->piece,
                              d->wb + b->poff, b->piece, CODA_BF16);
  }
  if (!st) st = coda_comm_group_end(ctx, z->comm);
  if (!st) st = coda_comm_join(ctx, z->comm);
  PE(CODA_PH_REDUCE, -1);
  return st;
}

/* AdamW over the elements [lo, hi) of the bound layout, on the fp32 or
 * the bf16 state. */
static coda_status adamw_range(coda_context ctx, dev_state *d, size_t lo, size_t hi,
                               const double *coef, double gscale, int64_t t, void *side) {
  if (d->bf16)
    return coda_train_adamw_bf16(ctx, d->wb, d->g, d->mb, d->vb, lo, hi, d->oseg, d->nseg, coef,
                                 gscale, d->sr_seed, t, side);
  return coda_train_adamw_multi(ctx, d->w, d->g, d->m, d->v, d->wb, lo, hi, d->oseg, d->nseg,
                                coef, gscale, side);
}

coda_status coda_plans_device_adamw(coda_context ctx, coda_model *m, const coda_adamw *o,
                                    int64_t t, double lr, double gscale) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  coda_prof *pf = coda_model_prof(m);
  if (d->z) return adamw_zero(ctx, d, pf, o, t, lr, gscale);
  coda_status st = coda_dev_state_settle_optim(ctx, d);
  if (!st) st = coda_dev_state_settle_zero(ctx, d);
  if (!st && d->bind) { /* the plans' bf16 weights written in the same pass */
    const double coef[7] = {o->beta1, o->beta2, 1.0 - pow(o->beta1, (double)t),
                            1.0 - pow(o->beta2, (double)t), lr, o->eps, 1.0 - lr * o->weight_decay};
    PB();
    st = ensure_side(ctx, d);
    if (!st && d->side) { /* group by group beside the next forward (dev_state) */
      st = coda_train_side_fork(ctx, d->side);
      for (int k = 0; k < d->ngroups && !st; k++) {
        st = adamw_range(ctx, d, k ? d->gend[k - 1] : 0, d->gend[k], coef, gscale, t, d->side);
        if (!st) st = coda_train_side_mark(ctx, d->side, k);
      }
      if (!st) d->opt_next = 0;
    } else if (!st) { /* one launch */
      st = adamw_range(ctx, d, 0, d->n, coef, gscale, t, NULL);
    }
    PE(CODA_PH_OPTIM, -1);
    return st;
  }
  PB();
  for (int i = 0; i < coda_model_num_params(m) && !st; i++) {
    const coda_param *p = coda_model_param(m, i);
    /* the host's coefficients (coda_adamw_update) */
    const double coef[7] = {o->beta1, o->beta2, 1.0 - pow(o->beta1, (double)t),
                            1.0 - pow(o->beta2, (double)t), lr, o->eps,
                            p->decay ? 1.0 - lr * o->weight_decay : 1.0};
    st = coda_train_adamw(ctx, d->w + p->offset, d->g + p->offset, d->m + p->offset,
                               d->v + p->offset, p->size, coef, gscale);
  }
  PE(CODA_PH_OPTIM, -1);
  return st;
}

int coda_plans_device_bound(coda_context ctx, coda_model *m) {
  const dev_state *d = dev_of(ctx, m);
  return d && d->bind;
}

coda_status coda_plans_device_memory(coda_context ctx, size_t *used, size_t *total) {
  if (!on_gpu(ctx)) return no_device(ctx);
  return coda_train_device_memory(ctx, used, total);
}
