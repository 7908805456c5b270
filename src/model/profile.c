/* The step profile (coda_train_options.profile): markers on the context's
 * backend (api.h timelines: CUDA events on the context's stream, the host
 * clock on the CPU backend) around each phase of a training step, in
 * pairs: marker 2k opens interval k and marker 2k+1 closes it. After the
 * step (the trainer has synchronized) every interval's time is added to
 * its phase, and for the block phases to its block. With profiling off the
 * trainer and the plan engine hold a NULL profile and no marker is made. */
#include "model/model.h"
#include "api/api.h" /* the timelines */

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct coda_prof {
  coda_timeline tl;
  int cap;        /* markers */
  int n;          /* recorded this step */
  int open;       /* a begin waits for its end */
  int on;         /* this step is recorded */
  int overflow;   /* markers were dropped */
  coda_status err;/* the first failure of a marker */
  int L;
  unsigned char *ph; /* phase of interval k */
  int *blk;          /* block of interval k (-1: none) */
  double acc[CODA_PH_COUNT];
  double *bf, *bb; /* per block forward / backward, ms */
  double wall_ms;
  int64_t steps;
};

static const char *const phase_name[CODA_PH_COUNT] = {
    "weights to bf16", "embedding",     "blocks forward",     "head + loss",
    "blocks backward", "gradient norm", "optimizer",          "gradient reduction",
    "uploads (H2D)",   "reads (D2H)"};

coda_status coda_prof_create(coda_context ctx, int layers, int accum, coda_prof **out) {
  *out = NULL;
  coda_prof *p = calloc(1, sizeof *p);
  if (!p) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  p->L = layers > 0 ? layers : 1;
  /* per micro-batch: 4 markers a block (forward, backward) and about 16
   * for the rest; per step a few more (norm, optimizer, reduction) */
  p->cap = 2 * ((2 * p->L + 12) * (accum > 0 ? accum : 1) + 16);
  p->ph = calloc((size_t)p->cap / 2, sizeof *p->ph);
  p->blk = calloc((size_t)p->cap / 2, sizeof *p->blk);
  p->bf = calloc((size_t)p->L, sizeof *p->bf);
  p->bb = calloc((size_t)p->L, sizeof *p->bb);
  coda_status st = p->ph && p->blk && p->bf && p->bb
                       ? CODA_OK
                       : coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!st) st = coda_timeline_create(ctx, p->cap, &p->tl);
  if (st) {
    coda_prof_destroy(ctx, p);
    return st;
  }
  *out = p;
  return CODA_OK;
}

void coda_prof_destroy(coda_context ctx, coda_prof *p) {
  if (!p) return;
  coda_timeline_destroy(ctx, p->tl);
  free(p->ph);
  free(p->blk);
  free(p->bf);
  free(p->bb);
  free(p);
}

void coda_prof_begin(coda_context ctx, coda_prof *p) {
  if (!p || !p->on || p->err) return;
  if (p->open || p->n + 2 > p->cap) { /* nested (a bug) or out of markers */
    p->overflow = 1;
    return;
  }
  p->err = coda_timeline_record(ctx, p->tl, p->n);
  if (!p->err) p->open = 1;
}

void coda_prof_end(coda_context ctx, coda_prof *p, coda_step_phase ph, int block) {
  if (!p || !p->on || !p->open || p->err) return;
  p->err = coda_timeline_record(ctx, p->tl, p->n + 1);
  p->open = 0;
  if (p->err) return;
  p->ph[p->n / 2] = (unsigned char)ph;
  p->blk[p->n / 2] = block;
  p->n += 2;
}

void coda_prof_step_start(coda_prof *p, int on) {
  if (!p) return;
  p->on = on;
  p->n = 0;
  p->open = 0;
}

coda_status coda_prof_step_end(coda_context ctx, coda_prof *p, double wall_s) {
  if (!p || !p->on) return CODA_OK;
  p->on = 0;
  if (p->err) return p->err;
  for (int k = 0; k < p->n / 2; k++) {
    double ms = 0.0;
    coda_status st = coda_timeline_elapsed(ctx, p->tl, 2 * k, 2 * k + 1, &ms);
    if (st) return st;
    if (!(ms > 0.0)) ms = 0.0;
    p->acc[p->ph[k]] += ms;
    const int b = p->blk[k];
    if (b >= 0 && b < p->L && p->ph[k] == CODA_PH_BLOCK_FWD) p->bf[b] += ms;
    if (b >= 0 && b < p->L && p->ph[k] == CODA_PH_BLOCK_BWD) p->bb[b] += ms;
  }
  p->wall_ms += 1e3 * wall_s;
  p->steps++;
  return CODA_OK;
}

void coda_prof_report(const coda_prof *p, const coda_model_config *c, double tokens,
                      double adam_bytes, double peak_flops, double peak_bw, int64_t warmup,
                      int device_clock, coda_train_profile *out) {
  memset(out, 0, sizeof *out);
  out->steps = p->steps;
  out->warmup = warmup;
  out->device_clock = device_clock;
  out->layers = p->L;
  out->incomplete = p->overflow;
  const double ns = p->steps > 0 ? (double)p->steps : 1.0;
  out->step_ms = p->wall_ms / ns;
  /* GEMM flops per step: a block's forward 2 · (its matrices) per token
   * plus attention 2 · (heads · head_dim) · seq per token (the trainer's flops/token),
   * its backward twice that; the head's GEMM forward and backward 6 ·
   * vocab · dim per token. AdamW reads w, g, m, v and writes w, m, v
   * (28 bytes a value); zeroing the gradient writes 4 bytes a value. */
  const double D = c->dim, F = c->ffn, hd = coda_model_head_dim(c);
  const double qd = c->heads * hd, kvd = c->kv_heads * hd;
  const double mat = D * (qd + 2.0 * kvd) + qd * D + 3.0 * D * F;
  const double blk_fwd = c->layers * (2.0 * mat + 2.0 * qd * c->seq) * tokens;
  for (int i = 0; i < CODA_PH_COUNT; i++) {
    coda_train_profile_phase *f = &out->phase[i];
    f->name = phase_name[i];
    f->ms = p->acc[i] / ns;
    f->floor_ms = NAN;
    f->block_mean_ms = f->block_max_ms = NAN;
    out->device_ms += f->ms;
    if (i == CODA_PH_BLOCK_FWD || i == CODA_PH_BLOCK_BWD) {
      const double *b = i == CODA_PH_BLOCK_FWD ? p->bf : p->bb;
      double mx = 0.0;
      for (int k = 0; k < p->L; k++) mx = b[k] > mx ? b[k] : mx;
      f->block_mean_ms = f->ms / p->L;
      f->block_max_ms = mx / ns;
    }
    if (peak_flops > 0 && i == CODA_PH_BLOCK_FWD) f->floor_ms = 1e3 * blk_fwd / peak_flops;
    if (peak_flops > 0 && i == CODA_PH_BLOCK_BWD) f->floor_ms = 2e3 * blk_fwd / peak_flops;
    if (peak_flops > 0 && i == CODA_PH_HEAD)
      f->floor_ms = 1e3 * 6.0 * (double)c->vocab * D * tokens / peak_flops;
    if (peak_bw > 0 && i == CODA_PH_OPTIM)
      f->floor_ms = 1e3 * adam_bytes / peak_bw;
  }
  coda_train_profile_phase *h = &out->phase[CODA_PH_COUNT];
  h->name = "host waits and launch gaps";
  h->ms = out->step_ms - out->device_ms;
  if (h->ms < 0.0) h->ms = 0.0; /* clock granularity */
  h->floor_ms = h->block_mean_ms = h->block_max_ms = NAN;
  out->nphase = CODA_PH_COUNT + 1;
  for (int i = 0; i < out->nphase; i++)
    out->phase[i].share = out->step_ms > 0 ? out->phase[i].ms / out->step_ms : 0.0;
}
