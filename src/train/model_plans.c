/* Plan engine: the model runs through the Llama-3 block and head plans of
 * src/nn (GEMM + epilogue programs on the context's backend). One block
 * plan per layer and one head plan, chained without copies: block i's
 * x_out buffer is bound as block i+1's x (and as the head's x), and in the
 * backward each dx is bound as the previous block's dx_out.
 *
 * The plans store weights and activations in bf16 (fp32 compute and fp32
 * weight gradients): before every forward the fp32 master weights are
 * rounded (to nearest even) into the plans' bf16 weight buffers, which is
 * the bf16-weights + fp32-master scheme of the GPU. The token embedding
 * lookup and its gradient (a scatter-add over tokens, in token order) are
 * host operations here. The model's RMSNorm epsilon and RoPE scaling go
 * into the plans (their program text and frequency table).
 *
 * Sampling needs logits, which the head plan never materializes: for the
 * last position the final RMSNorm and the LM-head row products are done
 * on the host from the last block's output. The sampler runs the blocks at
 * the full sequence length with the context left-aligned; causal attention
 * makes the padding after it irrelevant.
 *
 * On a CUDA context the same steps run on the device (src/cuda/
 * train_kernels.cu): the fp32 master weights, the fp32 gradient and the
 * AdamW moments live in device memory (dev_state), the rounding into the
 * plans' bf16 buffers, the embedding lookup, the gradient accumulation and
 * the embedding scatter-add are kernels, and only the tokens go up and the
 * loss comes down per micro-batch. The embedding scatter-add stays
 * deterministic without atomics: the host groups the positions by token
 * (a stable counting sort) and one thread block per distinct token adds its
 * rows in token order, the host loop's order. The host weight buffer is
 * brought up to date only by coda_plans_device_download.
 *
 * One process (no ZeRO layout): the plans hold no weights or weight
 * gradients of their own. Their weight buffers are bound to slices of one
 * flat bf16 copy of the master (wb, the same layout), which the AdamW pass
 * writes as it updates the master, so no rounding pass runs before a
 * forward; and on the first micro-batch of a step with scale 1 their
 * weight-gradient buffers are bound to slices of the fp32 gradient itself,
 * so the GEMMs write the step's gradient where the optimizer reads it (no
 * accumulation pass, and zeroing the gradient is deferred until something
 * would read it unwritten). Other micro-batches bind them to a scratch copy
 * and add it in. The optimizer is one launch over all parameters. */
#include "train/train.h"
#include "dist/comm.h"
#include "api/api.h" /* the backend's copies and training kernels */

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
} dev_state;

/* Where the plans' weight-gradient buffers point. */
enum { GRADS_OWN = 0, GRADS_IN_G, GRADS_IN_SCRATCH };

typedef struct {
  int B, T;
  int L;
  coda_plan *blk;
  coda_plan head;
  dev_state *dev;
  const coda_zero *z; /* data parallel layout, NULL: one process */
  int wbound;         /* the plans' weights are bound to dev->wb */
  int grads;          /* GRADS_*: the plans' weight-gradient buffers */
} plans_state;

/* Step profile markers (profile.c; no-ops when pf is NULL). */
#define PB() coda_prof_begin(ctx, pf)
#define PE(ph, b) coda_prof_end(ctx, pf, ph, b)

/* Elements per gradient-norm partial sum (one thread block each). */
#define NORM_CHUNK 65536

int coda_plans_available(void) { return 1; }

static void free_plans(plans_state *s) {
  for (int i = 0; i < s->L; i++) coda_plan_destroy(s->blk[i]);
  coda_plan_destroy(s->head);
  free(s->blk);
  s->blk = NULL;
  s->head = NULL;
  s->wbound = 0;
  s->grads = GRADS_OWN;
  s->L = 0;
  s->B = s->T = 0;
}

static void free_scratch(dev_state *d) {
  coda_free(d->ctx, d->tok); coda_free(d->ctx, d->tg); coda_free(d->ctx, d->rows);
  coda_free(d->ctx, d->seg); coda_free(d->ctx, d->pos);
  d->tok = d->tg = d->rows = d->seg = d->pos = NULL;
  d->cap = 0;
}
static void free_dev(dev_state *d) {
  if (!d) return;
  free_scratch(d);
  coda_free(d->ctx, d->w); coda_free(d->ctx, d->g); coda_free(d->ctx, d->m); coda_free(d->ctx, d->v);
  coda_free(d->ctx, d->part);
  coda_free(d->ctx, d->wb);
  coda_free(d->ctx, d->oseg);
  coda_free(d->ctx, d->gs);
  free(d);
}

void coda_plans_free(coda_model *m) {
  plans_state *s = *coda_model_plans_slot(m);
  if (!s) return;
  free_plans(s);
  free_dev(s->dev);
  free(s);
  *coda_model_plans_slot(m) = NULL;
}

static coda_status tensor(coda_context ctx, coda_plan p, const char *name, coda_tensor *t) {
  coda_status s = coda_plan_tensor(p, name, t);
  if (s) return coda_fail(ctx, s, "plan buffer '%s': %s", name, coda_last_error(ctx));
  return CODA_OK;
}

static int on_gpu(coda_context ctx) { return coda_context_backend(ctx) == CODA_BACKEND_CUDA; }

static coda_status ensure(coda_context ctx, coda_model *m, int B, int T, plans_state **out) {
  plans_state *s = *coda_model_plans_slot(m);
  if (s && s->blk && s->B == B && s->T == T) { *out = s; return CODA_OK; }
  if (s) free_plans(s);
  const coda_model_config *c = coda_model_cfg(m);
  if (coda_context_backend(ctx) != CODA_BACKEND_CPU && !on_gpu(ctx))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the plan engine runs on the CPU backend and the CUDA backend");
  if (!on_gpu(ctx) && coda_context_precision(ctx) != CODA_PRECISION_F32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the plan engine trains in fp32 precision");
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    *coda_model_plans_slot(m) = s;
  }
  s->blk = calloc((size_t)c->layers, sizeof *s->blk);
  if (!s->blk) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  s->B = B;
  s->T = T;
  coda_llama_config lc;
  memset(&lc, 0, sizeof lc);
  lc.dim = c->dim;
  lc.n_heads = c->heads;
  lc.n_kv_heads = c->kv_heads;
  lc.head_dim = c->dim / c->heads;
  lc.ffn_dim = c->ffn;
  lc.vocab = c->vocab;
  lc.batch = B;
  lc.seq = T;
  lc.rope_theta = c->rope_theta;
  lc.rope = c->rope;
  lc.norm_eps = c->norm_eps;
  lc.dtype = CODA_BF16;
  /* a training step runs one backward per forward: the SwiGLU-backward
   * dgrad may write dz over the saved z (less memory, the same bits) */
  lc.flags = CODA_LLAMA_INPLACE;
  coda_status st = CODA_OK;
  for (int i = 0; i < c->layers && !st; i++) {
    st = coda_llama_block_plan(ctx, &lc, &s->blk[i]);
    if (!st) s->L = i + 1;
  }
  if (!st) st = coda_llama_head_plan(ctx, &lc, &s->head);
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

/* fp32 master -> plan buffer (bf16 rounds to nearest even). */
static coda_status upload(coda_context ctx, coda_plan p, const char *name, const float *src) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      float v = src[r * t.cols + c];
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

static const char *const plan_w[6] = {"wn1", "wqkv", "wo", "wn2", "wgu", "wd"};
static const char *const plan_g[6] = {"dwn1", "dwqkv", "dwo", "dwn2", "dwgu", "dwd"};
static const char *const ours[6] = {"attention_norm", "attention.wqkv", "attention.wo",
                                    "ffn_norm", "feed_forward.w13", "feed_forward.w2"};

/* ------------------------------------------------------------ the GPU */

static coda_status dev_alloc(coda_context ctx, size_t bytes, void *out) {
  return coda_malloc(ctx, bytes, (void **)out);
}

/* wb = the master rounded to bf16 (one process, bound plans). */
static coda_status round_all(coda_context ctx, dev_state *d) {
  if (!d->bind) return CODA_OK;
  coda_tensor t = coda_tensor_2d(d->wb, CODA_BF16, 1, (int64_t)d->n);
  return coda_train_round(ctx, &t, d->w);
}

static coda_status setup_bind(coda_context ctx, coda_model *m, dev_state *d);

/* The device state, created on first use from the host weights (moments
 * zero). */
static coda_status ensure_dev_from(coda_context ctx, coda_model *m, plans_state *s,
                                   dev_state **out, int from_host);
static coda_status ensure_dev(coda_context ctx, coda_model *m, plans_state *s, dev_state **out) {
  return ensure_dev_from(ctx, m, s, out, 1);
}
/* from_host 0: the master is left for the caller to write (then round_all). */
static coda_status ensure_dev_from(coda_context ctx, coda_model *m, plans_state *s,
                                   dev_state **out, int from_host) {
  if (s->dev) { *out = s->dev; return CODA_OK; }
  dev_state *d = calloc(1, sizeof *d);
  if (!d) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  d->ctx = ctx;
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
      free_dev(d);
      return st;
    }
    s->dev = d;
    *out = d;
    return CODA_OK; /* filled by coda_plans_device_upload */
  }
  st = dev_alloc(ctx, fb, &d->w);
  if (!st) st = dev_alloc(ctx, fb, &d->g);
  if (!st) st = dev_alloc(ctx, fb, &d->m);
  if (!st) st = dev_alloc(ctx, fb, &d->v);
  if (!st) st = dev_alloc(ctx, (d->npart ? d->npart : 1) * sizeof(double), &d->part);
  if (!st && from_host) st = coda_memcpy_h2d(ctx, d->w, coda_model_weights(m), fb);
  if (!st) st = setup_bind(ctx, m, d);
  if (st) {
    free_dev(d);
    return st;
  }
  s->dev = d;
  *out = d;
  return CODA_OK;
}

/* One process: the flat bf16 weights and the optimizer's segment table,
 * when every parameter starts on a 16-byte boundary of both copies (what
 * the GEMMs' TMA descriptors need of a bound buffer) and the parameters lie
 * back to back; otherwise the plans keep their own buffers (rounded before
 * each forward, accumulated after each backward). */
static coda_status setup_bind(coda_context ctx, coda_model *m, dev_state *d) {
  const int np = coda_model_num_params(m);
  int ok = np > 0;
  size_t end = 0;
  for (int i = 0; i < np && ok; i++) {
    const coda_param *p = coda_model_param(m, i);
    ok = p->offset == end && p->offset % 8 == 0;
    end = p->offset + p->size;
  }
  const coda_model_config *c = coda_model_cfg(m);
  /* the plans write every parameter's gradient but the embedding's */
  if (!ok || end != d->n || np != 6 * c->layers + 2 + !c->tied) return CODA_OK;
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
  if (!st) st = dev_alloc(ctx, d->n * sizeof(uint16_t), &d->wb);
  if (!st) {
    d->nseg = ns;
    d->bind = 1;
    st = round_all(ctx, d);
  }
  return st;
}

static coda_status ensure_scratch(coda_context ctx, dev_state *d, int64_t M) {
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

/* The offset of a parameter in the device gradient (and bf16 weights). */
static size_t goff(const dev_state *d, coda_model *m, const coda_param *p) {
  return d->z ? d->z->ppoff[p - coda_model_param(m, 0)] : p->offset;
}

/* Plan weight buffer <- the master (rounded), or with data parallelism the
 * all-gathered bf16 weights (the same bits: they are the rounded master). */
static coda_status dev_round(coda_context ctx, coda_plan p, const char *name, const dev_state *d,
                             coda_model *m, const coda_param *prm) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  if ((size_t)(t.rows * t.cols) != prm->size)
    return coda_fail(ctx, CODA_ERR_SHAPE, "plan buffer '%s' holds %lld values, the weight %zu",
                     name, (long long)(t.rows * t.cols), prm->size);
  if (!d->z) return coda_train_round(ctx, &t, d->w + prm->offset);
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

/* The six block buffers `blk` and the head's two `head` (norm, output)
 * of every plan as views of base (dtype dt) in the master's layout. */
static coda_status bind_all(coda_context ctx, coda_model *m, plans_state *s,
                            const char *const blk[6], const char *const head[2], void *base,
                            coda_dtype dt) {
  const coda_model_config *c = coda_model_cfg(m);
  char nm[96];
  coda_status st = CODA_OK;
  for (int i = 0; i < s->L && !st; i++)
    for (int k = 0; k < 6 && !st; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
      const coda_param *p = coda_model_find(m, nm);
      st = bind_slice(ctx, s->blk[i], blk[k], base, dt, p->offset, p->size);
    }
  const coda_param *pn = coda_model_find(m, "norm.weight");
  const coda_param *po = coda_model_find(m, c->tied ? "tok_embeddings.weight" : "output.weight");
  if (!st) st = bind_slice(ctx, s->head, head[0], base, dt, pn->offset, pn->size);
  if (!st) st = bind_slice(ctx, s->head, head[1], base, dt, po->offset, po->size);
  return st;
}

/* The plans' weights as views of the flat bf16 copy (once per plan build). */
static coda_status bind_weights(coda_context ctx, coda_model *m, plans_state *s, dev_state *d) {
  static const char *const head[2] = {"wnf", "wout"};
  if (s->wbound) return CODA_OK;
  coda_status st = bind_all(ctx, m, s, plan_w, head, d->wb, CODA_BF16);
  if (!st) s->wbound = 1;
  return st;
}

/* The plans' weight gradients as views of the gradient (GRADS_IN_G) or of
 * the scratch copy (GRADS_IN_SCRATCH; plans that never wrote into the
 * gradient keep their own buffers for this). */
static coda_status bind_grads(coda_context ctx, coda_model *m, plans_state *s, dev_state *d,
                              int want) {
  static const char *const head[2] = {"dwnf", "dwout"};
  if (s->grads == want || (want == GRADS_IN_SCRATCH && s->grads == GRADS_OWN)) return CODA_OK;
  if (want == GRADS_IN_SCRATCH && !d->gs) {
    coda_status st = dev_alloc(ctx, d->n * sizeof(float), &d->gs);
    if (st) return st;
  }
  coda_status st = bind_all(ctx, m, s, plan_g, head, want == GRADS_IN_G ? d->g : d->gs, CODA_F32);
  if (!st) s->grads = want;
  return st;
}

/* The deferred zeroing of the gradient, before anything reads it. */
static coda_status settle_zero(coda_context ctx, dev_state *d) {
  if (!d->zero_pending) return CODA_OK;
  d->zero_pending = 0;
  return coda_train_zero(ctx, d->g, d->n * sizeof(float));
}

static coda_status dev_accum(coda_context ctx, coda_plan p, const char *name, float *dst,
                             size_t n, float scale) {
  coda_tensor t;
  coda_status s = tensor(ctx, p, name, &t);
  if (s) return s;
  if ((size_t)(t.rows * t.cols) != n)
    return coda_fail(ctx, CODA_ERR_SHAPE, "plan buffer '%s' holds %lld values, the weight %zu",
                     name, (long long)(t.rows * t.cols), n);
  return coda_train_accum(ctx, dst, &t, scale);
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

static coda_status forward_gpu(coda_context ctx, coda_model *m, plans_state *s,
                               const int32_t *in, const int32_t *tg, int T, int backward,
                               float gscale, double *loss, int64_t *n_valid, float *last_logits) {
  const coda_model_config *c = coda_model_cfg(m);
  const int sample = tg == NULL;
  const int64_t D = c->dim, M = (int64_t)s->B * s->T;
  dev_state *d = NULL;
  coda_status st = ensure_dev(ctx, m, s, &d);
  if (!st) st = ensure_scratch(ctx, d, M);
  if (st) return st;
  coda_prof *pf = coda_model_prof(m);
  char nm[96];
#define PRM(name) coda_model_find(m, name)
  const coda_param *pe = PRM("tok_embeddings.weight");
  const coda_param *po = c->tied ? pe : PRM("output.weight");
  const coda_param *pn = PRM("norm.weight");
  PB();
  if (d->bind) {
    st = bind_weights(ctx, m, s, d); /* wb is current: AdamW wrote it */
  } else {
    for (int i = 0; i < s->L && !st; i++)
      for (int k = 0; k < 6 && !st; k++) {
        snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
        st = dev_round(ctx, s->blk[i], plan_w[k], d, m, PRM(nm));
      }
    if (!st && !sample) st = dev_round(ctx, s->head, "wnf", d, m, pn);
    if (!st && !sample) st = dev_round(ctx, s->head, "wout", d, m, po);
  }
  PE(CODA_PH_CAST, -1);
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
  PB();
  if (!st)
    st = d->z || d->bind ? coda_train_embed16(ctx, &x0, d->wb + goff(d, m, pe), d->tok)
              : coda_train_embed(ctx, &x0, d->w + pe->offset, d->tok);
  PE(CODA_PH_EMBED, -1);
  for (int i = 0; i < s->L && !st; i++) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_FORWARD);
    PE(CODA_PH_BLOCK_FWD, i);
  }
  if (!st && sample) {
    /* the last position's hidden state comes down; norm and LM head on the host */
    st = tensor(ctx, s->blk[s->L - 1], "x_out", &t);
    float *x = malloc((size_t)D * sizeof *x);
    uint16_t *row = malloc((size_t)D * sizeof *row);
    if (!st && (!x || !row)) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st && t.dtype != CODA_BF16)
      st = coda_fail(ctx, CODA_ERR_DTYPE, "the block output is not bf16");
    if (!st)
      st = coda_memcpy_d2h(ctx, row, (const uint16_t *)t.data + (int64_t)(T - 1) * t.ld,
                            (size_t)D * sizeof *row);
    if (!st) {
      const float *W = coda_model_weights(m);
      double ss = 0.0;
      for (int64_t k = 0; k < D; k++) {
        x[k] = coda_bf16_to_f32(row[k]);
        ss += (double)x[k] * x[k];
      }
      double r = 1.0 / sqrt(ss / (double)D + c->norm_eps);
      for (int64_t k = 0; k < D; k++) x[k] = (float)(x[k] * r * W[pn->offset + k]);
      for (int64_t v = 0; v < c->vocab; v++) {
        double a = 0.0;
        for (int64_t k = 0; k < D; k++) a += (double)x[k] * W[po->offset + v * D + k];
        last_logits[v] = (float)a;
      }
    }
    free(x);
    free(row);
    free(h);
    return st;
  }
  PB();
  if (!st) st = coda_memcpy_h2d(ctx, d->tg, tg, (size_t)M * sizeof *tg);
  PE(CODA_PH_UPLOAD, -1);
  if (!st) st = tensor(ctx, s->head, "targets", &t);
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
   * gradient in place; the embedding's rows (untied) are zeroed for the
   * scatter-add, everything else is overwritten by its GEMM */
  const int direct = d->bind && d->zero_pending && gscale == 1.0f;
  if (d->bind) {
    if (!direct) st = settle_zero(ctx, d);
    if (!st) st = bind_grads(ctx, m, s, d, direct ? GRADS_IN_G : GRADS_IN_SCRATCH);
    if (!st && direct) {
      d->zero_pending = 0;
      if (!c->tied) st = coda_train_zero(ctx, d->g + pe->offset, pe->size * sizeof(float));
    }
  }
  PB();
  if (!st) st = coda_plan_run(ctx, s->head, CODA_PHASE_BACKWARD);
  if (!st && !direct) st = dev_accum(ctx, s->head, "dwnf", d->g + goff(d, m, pn), pn->size, gscale);
  if (!st && !direct) st = dev_accum(ctx, s->head, "dwout", d->g + goff(d, m, po), po->size, gscale);
  PE(CODA_PH_HEAD, -1);
  if (!st && reduce) st = reduce_bucket(ctx, d, d->z->nb - 1);
  for (int i = s->L - 1; i >= 0 && !st; i--) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_BACKWARD);
    for (int k = 0; k < 6 && !st && !direct; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
      st = dev_accum(ctx, s->blk[i], plan_g[k], d->g + goff(d, m, PRM(nm)), PRM(nm)->size, gscale);
    }
    PE(CODA_PH_BLOCK_BWD, i);
    if (!st && reduce) st = reduce_bucket(ctx, d, 1 + i);
  }
  if (!st) st = tensor(ctx, s->blk[0], "dx", &t);
  if (!st) {
    int32_t *rows = malloc((size_t)(3 * M + 1) * sizeof *rows);
    if (!rows) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    int nr = st ? 0 : group_tokens(h, M, c->vocab, rows, rows + M, rows + 2 * M + 1);
    if (!st && nr < 0) st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    PB();
    if (!st) st = coda_memcpy_h2d(ctx, d->rows, rows, (size_t)nr * sizeof *rows);
    if (!st) st = coda_memcpy_h2d(ctx, d->seg, rows + M, (size_t)(nr + 1) * sizeof *rows);
    if (!st) st = coda_memcpy_h2d(ctx, d->pos, rows + 2 * M + 1, (size_t)M * sizeof *rows);
    PE(CODA_PH_UPLOAD, -1);
    PB();
    if (!st) st = coda_train_embed_grad(ctx, d->g + goff(d, m, pe), &t, d->rows, d->seg,
                                             d->pos, nr, gscale);
    PE(CODA_PH_EMBED, -1);
    free(rows);
  }
  if (!st && reduce) st = reduce_bucket(ctx, d, 0);
#undef PRM
  free(h);
  return st;
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
  plans_state *s = *coda_model_plans_slot(m);
  if (s && s->dev)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "data parallel layout set after the device "
                     "state was created");
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    *coda_model_plans_slot(m) = s;
  }
  s->z = z;
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
  plans_state *s = *coda_model_plans_slot(m);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    *coda_model_plans_slot(m) = s;
  }
  dev_state *d = NULL;
  coda_status st = ensure_dev(ctx, m, s, &d);
  if (!st && d->z) return upload_zero(ctx, m, d, mom, vel);
  const size_t fb = d ? d->n * sizeof(float) : 0;
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
  plans_state *s = *coda_model_plans_slot(m);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    *coda_model_plans_slot(m) = s;
  }
  if (s->z || s->dev)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "device initialization: the device state "
                     "exists already, or the model is data parallel (initialize on the host)");
  dev_state *d = NULL;
  coda_status st = ensure_dev_from(ctx, m, s, &d, 0);
  const uint64_t s0 = coda_model_init_stream(seed);
  uint64_t draw = 0;
  for (int i = 0; i < coda_model_num_params(m) && !st; i++) {
    const coda_param *p = coda_model_param(m, i);
    const double sd = coda_model_init_std(m, p);
    if (p->ndim == 1) {
      st = coda_train_fill(ctx, d->w + p->offset, p->size, 1.0f);
      continue;
    }
    st = coda_train_init_normal(ctx, d->w + p->offset, p->size, s0, draw, sd);
    draw += 2 * (uint64_t)p->size;
  }
  const size_t fb = d ? d->n * sizeof(float) : 0;
  if (!st) st = coda_train_zero(ctx, d->m, fb);
  if (!st) st = coda_train_zero(ctx, d->v, fb);
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
  const float *src = which == 0 ? d->w : which == 1 ? d->m : d->v;
  return coda_memcpy_d2h(ctx, dst, (const char *)src + off, n);
}

coda_status coda_plans_device_download(coda_context ctx, coda_model *m, float *mom, float *vel) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  if (d->z) return download_zero(ctx, m, d, mom, vel);
  const size_t fb = d->n * sizeof(float);
  coda_status st = coda_memcpy_d2h(ctx, coda_model_weights(m), d->w, fb);
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
  coda_status st = settle_zero(ctx, d);
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

coda_status coda_plans_device_adamw(coda_context ctx, coda_model *m, const coda_adamw *o,
                                    int64_t t, double lr, double gscale) {
  dev_state *d = dev_of(ctx, m);
  if (!d) return no_device(ctx);
  coda_prof *pf = coda_model_prof(m);
  if (d->z) return adamw_zero(ctx, d, pf, o, t, lr, gscale);
  coda_status st = settle_zero(ctx, d);
  if (!st && d->bind) { /* one launch; the plans' bf16 weights written in the same pass */
    const double coef[7] = {o->beta1, o->beta2, 1.0 - pow(o->beta1, (double)t),
                            1.0 - pow(o->beta2, (double)t), lr, o->eps, 1.0 - lr * o->weight_decay};
    PB();
    st = coda_train_adamw_multi(ctx, d->w, d->g, d->m, d->v, d->wb, d->n, d->oseg, d->nseg, coef,
                                gscale);
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

coda_status coda_plans_device_memory(coda_context ctx, size_t *used, size_t *total) {
  if (!on_gpu(ctx)) return no_device(ctx);
  return coda_train_device_memory(ctx, used, total);
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
  if (on_gpu(ctx))
    return forward_gpu(ctx, m, s, in, tg, T, backward, gscale, loss, n_valid, last_logits);
  const float *W = coda_model_weights(m);
  float *G = coda_model_grads(m);
  const int64_t D = c->dim, M = (int64_t)RB * RT;
  coda_prof *pf = coda_model_prof(m);
  char nm[96];
#define OFF(name) (coda_model_find(m, name)->offset)
  PB();
  for (int i = 0; i < s->L && !st; i++)
    for (int k = 0; k < 6 && !st; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
      st = upload(ctx, s->blk[i], plan_w[k], W + OFF(nm));
    }
  const size_t emb = OFF("tok_embeddings.weight");
  const size_t out = c->tied ? emb : OFF("output.weight");
  if (!st && !sample) st = upload(ctx, s->head, "wnf", W + OFF("norm.weight"));
  if (!st && !sample) st = upload(ctx, s->head, "wout", W + out);
  PE(CODA_PH_CAST, -1);
  /* embedding lookup into block 0's x */
  coda_tensor x0, t;
  if (!st) st = tensor(ctx, s->blk[0], "x", &x0);
  if (st) return st;
  PB();
  for (int64_t r = 0; r < M; r++) {
    int32_t tok = sample ? (r < T ? in[r] : 0) : in[r];
    const float *e = W + emb + (int64_t)tok * D;
    for (int64_t k = 0; k < D; k++) ((uint16_t *)x0.data)[r * x0.ld + k] = coda_f32_to_bf16(e[k]);
  }
  PE(CODA_PH_EMBED, -1);
  for (int i = 0; i < s->L && !st; i++) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_FORWARD);
    PE(CODA_PH_BLOCK_FWD, i);
  }
  if (st) return st;
  if (sample) {
    /* host: final RMSNorm and LM head for row T-1 */
    st = tensor(ctx, s->blk[s->L - 1], "x_out", &t);
    if (st) return st;
    double ss = 0.0;
    float *h = malloc((size_t)D * sizeof *h);
    if (!h) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t k = 0; k < D; k++) {
      h[k] = (float)coda_load(&t, T - 1, k);
      ss += (double)h[k] * h[k];
    }
    double r = 1.0 / sqrt(ss / (double)D + c->norm_eps);
    const float *wn = W + OFF("norm.weight");
    for (int64_t k = 0; k < D; k++) h[k] = (float)(h[k] * r * wn[k]);
    for (int64_t v = 0; v < c->vocab; v++) {
      double a = 0.0;
      for (int64_t k = 0; k < D; k++) a += (double)h[k] * W[out + v * D + k];
      last_logits[v] = (float)a;
    }
    free(h);
    return CODA_OK;
  }
  st = tensor(ctx, s->head, "targets", &t);
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
  PB();
  st = coda_plan_run(ctx, s->head, CODA_PHASE_BACKWARD);
  /* d(gscale · loss): every gradient from the plans is of the mean loss */
  if (!st) st = accumulate(ctx, s->head, "dwnf", G + OFF("norm.weight"), gscale);
  if (!st) st = accumulate(ctx, s->head, "dwout", G + out, gscale);
  PE(CODA_PH_HEAD, -1);
  for (int i = s->L - 1; i >= 0 && !st; i--) {
    PB();
    st = coda_plan_run(ctx, s->blk[i], CODA_PHASE_BACKWARD);
    for (int k = 0; k < 6 && !st; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, ours[k]);
      st = accumulate(ctx, s->blk[i], plan_g[k], G + OFF(nm), gscale);
    }
    PE(CODA_PH_BLOCK_BWD, i);
  }
  if (!st) st = tensor(ctx, s->blk[0], "dx", &t);
  if (st) return st;
  PB();
  for (int64_t r = 0; r < M; r++) { /* embedding gradient: scatter-add in token order */
    float *g = G + emb + (int64_t)in[r] * D;
    for (int64_t k = 0; k < D; k++)
      g[k] += gscale * coda_bf16_to_f32(((const uint16_t *)t.data)[r * t.ld + k]);
  }
  PE(CODA_PH_EMBED, -1);
#undef OFF
  return CODA_OK;
}
