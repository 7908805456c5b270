/* Data-parallel training with a sharded optimizer (ZeRO-1): the layout of
 * the shards and the host side of the CPU engine.
 *
 * The flat parameter buffer is cut into buckets that become final one after
 * another in the backward pass: the head (norm, and output unless tied),
 * layer L-1, ..., layer 0, the token embedding (which also receives the
 * tied head's gradient). In the communication layout every bucket is padded
 * to a multiple of the rank count N and split into N equal pieces; rank r
 * owns piece r of every bucket. A bucket's reduce-scatter (NCCL's in-place
 * form) leaves the summed gradient of piece r at the piece's own place, and
 * the all-gather of the updated weights fills the other pieces back in.
 * (With small buckets and many ranks the last pieces may be padding only.)
 * Rank r keeps the fp32 master weights and both AdamW moments only for its
 * pieces (the shard, the pieces one after another in bucket order).
 *
 * The CPU engine computes on fp32 weights, so there the gathered weights
 * are fp32 and the master shard is the rank's part of the model buffer; the
 * GPU gathers bf16 weights (model_device.c). */
#include "coda_train.h"
#include "model/model.h"
#include "dist/comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pieces are a multiple of 64 elements, so every piece starts 256-byte
 * aligned (fp32) in the padded buffers: NCCL and the kernels get aligned
 * rows, at the price of < 64 · N padding values per bucket. */
#define PIECE_ALIGN 64

static coda_status oom(coda_context ctx) {
  return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
}

void coda_zero_destroy(coda_zero *z) {
  if (!z) return;
  free(z->b);
  free(z->seg);
  free(z->ppoff);
  free(z->pad);
  free(z->gs);
  free(z->ms);
  free(z->vs);
  free(z->acc);
  free(z);
}

coda_status coda_zero_create(coda_context ctx, coda_model *m, coda_comm comm, int host_state,
                             coda_zero **out) {
  *out = NULL;
  const coda_model_config *c = coda_model_cfg(m);
  coda_zero *z = calloc(1, sizeof *z);
  if (!z) return oom(ctx);
  z->comm = comm;
  z->N = coda_comm_size(comm);
  z->r = coda_comm_rank(comm);
  z->n = coda_model_size(m);
  const int np = coda_model_num_params(m);
  z->nb = c->layers + 2;
  z->b = calloc((size_t)z->nb, sizeof *z->b);
  z->ppoff = calloc((size_t)np, sizeof *z->ppoff);
  z->seg = calloc((size_t)(np + z->nb), sizeof *z->seg);
  if (!z->b || !z->ppoff || !z->seg) { coda_zero_destroy(z); return oom(ctx); }
  /* bucket starts in the flat order: embedding, layers, head */
  char nm[96];
  z->b[0].off = 0;
  for (int i = 0; i < c->layers; i++) {
    snprintf(nm, sizeof nm, "layers.%d.attention_norm.weight", i);
    z->b[1 + i].off = coda_model_find(m, nm)->offset;
  }
  z->b[z->nb - 1].off = coda_model_find(m, "norm.weight")->offset;
  size_t poff = 0, soff = 0;
  for (int k = 0; k < z->nb; k++) {
    coda_zero_bucket *b = &z->b[k];
    b->len = (k + 1 < z->nb ? z->b[k + 1].off : z->n) - b->off;
    b->piece = (b->len + (size_t)z->N - 1) / (size_t)z->N;
    b->piece = (b->piece + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
    b->poff = poff;
    b->soff = soff;
    /* the valid part of this rank's piece in the flat layout */
    size_t lo = (size_t)z->r * b->piece;
    b->mine = lo < b->len ? (b->len - lo < b->piece ? b->len - lo : b->piece) : 0;
    poff += (size_t)z->N * b->piece;
    soff += b->piece;
  }
  z->npad = poff;
  z->nshard = soff;
  /* per parameter: its offset in the padded layout; per piece: the
   * stretches of one parameter (AdamW's decay differs between them) */
  for (int i = 0; i < np; i++) {
    const coda_param *p = coda_model_param(m, i);
    int k = z->nb - 1;
    while (k > 0 && z->b[k].off > p->offset) k--;
    z->ppoff[i] = z->b[k].poff + (p->offset - z->b[k].off);
    const size_t lo = z->b[k].off + (size_t)z->r * z->b[k].piece, hi = lo + z->b[k].mine;
    const size_t a = p->offset > lo ? p->offset : lo;
    const size_t e = p->offset + p->size < hi ? p->offset + p->size : hi;
    if (a < e) {
      coda_zero_seg *s = &z->seg[z->nseg++];
      s->goff = a;
      s->poff = z->b[k].poff + (a - z->b[k].off);
      s->soff = z->b[k].soff + (a - lo);
      s->len = e - a;
      s->decay = p->decay;
    }
  }
  if (host_state) {
    z->pad = calloc(z->npad ? z->npad : 1, sizeof *z->pad);
    z->gs = calloc(z->nshard ? z->nshard : 1, sizeof *z->gs);
    z->ms = calloc(z->nshard ? z->nshard : 1, sizeof *z->ms);
    z->vs = calloc(z->nshard ? z->nshard : 1, sizeof *z->vs);
    if (!z->pad || !z->gs || !z->ms || !z->vs) { coda_zero_destroy(z); return oom(ctx); }
  }
  *out = z;
  return CODA_OK;
}

/* ---- the CPU engine ---- */

/* Bucket k of G reduce-scattered: this rank's piece of the sum -> out. */
static coda_status reduce_bucket(coda_context ctx, coda_zero *z, int k, const float *G,
                                 float *out) {
  const coda_zero_bucket *b = &z->b[k];
  float *p = z->pad + b->poff;
  memcpy(p, G + b->off, b->len * sizeof *p);
  memset(p + b->len, 0, ((size_t)z->N * b->piece - b->len) * sizeof *p);
  return coda_comm_reduce_scatter(ctx, z->comm, p, out, b->piece, CODA_F32);
}

coda_status coda_zero_cpu_reduce(coda_context ctx, coda_zero *z, const float *G) {
  /* bucket by bucket (the backward's order does not matter here: the CPU
   * communicator is synchronous) */
  for (int k = 0; k < z->nb; k++) {
    coda_status s = reduce_bucket(ctx, z, k, G, z->gs + z->b[k].soff);
    if (s) return s;
  }
  return CODA_OK;
}

coda_status coda_zero_cpu_reduce_bucket(coda_context ctx, coda_zero *z, int k, float *G,
                                        int accumulate) {
  const coda_zero_bucket *b = &z->b[k];
  coda_status s;
  if (!accumulate) {
    s = reduce_bucket(ctx, z, k, G, z->gs + b->soff);
  } else {
    if (!z->acc) {
      size_t most = 1;
      for (int i = 0; i < z->nb; i++) most = z->b[i].piece > most ? z->b[i].piece : most;
      z->acc = malloc(most * sizeof *z->acc);
      if (!z->acc) return oom(ctx);
    }
    s = reduce_bucket(ctx, z, k, G, z->acc);
    for (size_t i = 0; !s && i < b->piece; i++) z->gs[b->soff + i] += z->acc[i];
  }
  /* the next micro-batch's gradient starts from zero in this bucket */
  memset(G + b->off, 0, b->len * sizeof *G);
  return s;
}

coda_status coda_zero_cpu_gather_bucket(coda_context ctx, coda_zero *z, int k, float *W) {
  const coda_zero_bucket *b = &z->b[k];
  float *p = z->pad + b->poff;
  float *mine = p + (size_t)z->r * b->piece;
  memcpy(mine, W + b->off + (size_t)z->r * b->piece, b->mine * sizeof *mine);
  memset(mine + b->mine, 0, (b->piece - b->mine) * sizeof *mine);
  coda_status s = coda_comm_all_gather(ctx, z->comm, mine, p, b->piece, CODA_F32);
  if (!s) memcpy(W + b->off, p, b->len * sizeof *p);
  return s;
}

void coda_zero_cpu_release_bucket(coda_zero *z, int k, float *W) {
  const coda_zero_bucket *b = &z->b[k];
  const size_t lo = (size_t)z->r * b->piece, hi = lo + b->mine; /* this rank's piece */
  for (size_t i = 0; i < b->len; i++)
    if (i < lo || i >= hi) W[b->off + i] = NAN;
}

double coda_zero_cpu_sumsq(const coda_zero *z) {
  double s = 0.0; /* one fixed order: the shard from start to end */
  for (size_t i = 0; i < z->nshard; i++) s += (double)z->gs[i] * z->gs[i];
  return s;
}

void coda_zero_cpu_update(coda_zero *z, const coda_adamw *adam, int64_t t, double lr, double norm,
                          double clip, float *W) {
  coda_clip_grad(z->gs, z->nshard, norm, clip);
  for (int i = 0; i < z->nseg; i++) {
    const coda_zero_seg *s = &z->seg[i];
    coda_adamw_update(adam, t, lr, s->decay, W + s->goff, z->gs + s->soff, z->ms + s->soff,
                      z->vs + s->soff, s->len);
  }
}

/* full (flat layout, every rank) <- the ranks' pieces of shard (the CPU:
 * shard == NULL takes the pieces from full itself) */
coda_status coda_zero_cpu_gather(coda_context ctx, coda_zero *z, const float *shard, float *full) {
  for (int k = 0; k < z->nb; k++) {
    const coda_zero_bucket *b = &z->b[k];
    float *p = z->pad + b->poff;
    float *mine = p + (size_t)z->r * b->piece;
    const float *src = shard ? shard + b->soff : full + b->off + (size_t)z->r * b->piece;
    memcpy(mine, src, b->mine * sizeof *mine);
    memset(mine + b->mine, 0, (b->piece - b->mine) * sizeof *mine);
    coda_status s = coda_comm_all_gather(ctx, z->comm, mine, p, b->piece, CODA_F32);
    if (s) return s;
    memcpy(full + b->off, p, b->len * sizeof *p);
  }
  return CODA_OK;
}

void coda_zero_cpu_take(coda_zero *z, const float *mom, const float *vel) {
  for (int k = 0; k < z->nb; k++) {
    const coda_zero_bucket *b = &z->b[k];
    const size_t lo = b->off + (size_t)z->r * b->piece;
    memset(z->ms + b->soff, 0, b->piece * sizeof *z->ms);
    memset(z->vs + b->soff, 0, b->piece * sizeof *z->vs);
    if (mom) memcpy(z->ms + b->soff, mom + lo, b->mine * sizeof *mom);
    if (vel) memcpy(z->vs + b->soff, vel + lo, b->mine * sizeof *vel);
  }
}
