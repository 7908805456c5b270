/* The attention steps (PLAN_ATTN_FWD, PLAN_ATTN_BWD): causal
 * grouped-query attention on packed qkv, forward and backward (with the
 * RoPE backward fused, plan_attention_bwd_rope). */
#include "nn/plan_internal.h"

#include "base/internal.h"
#include "api/api.h"

static void attn_common(coda_plan p, plan_step *s, const plan_attention *g, const char *qkv,
                        const char *o, const char *lse) {
  if (!g) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': no attention geometry", s->label);
    return;
  }
  s->attn = *g;
  s->attn.qkv = plan_need_buf(p, s->label, qkv);
  s->attn.o = plan_need_buf(p, s->label, o);
  s->attn.lse = plan_need_buf(p, s->label, lse);
  s->attn.dout = s->attn.dqkv = -1;
  s->attn.pos = s->attn.freq = s->attn.zp = -1;
  if (p->status != CODA_OK) return;
  int64_t M = g->batch * g->seq;
  int64_t nqkv = (int64_t)(g->n_heads + 2 * g->n_kv_heads) * g->head_dim;
  const plan_buf *bq = &p->bufs[s->attn.qkv], *bo = &p->bufs[s->attn.o],
                    *bl = &p->bufs[s->attn.lse];
  if (bq->rows != M || bq->cols != nqkv || bo->rows != M ||
      bo->cols != (int64_t)g->n_heads * g->head_dim || bl->rows != M || bl->cols != g->n_heads)
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': attention buffers do not match the geometry",
              s->label);
  s->M = M;
  s->N = nqkv;
}

void plan_attention_fwd(coda_plan p, coda_phase phase, const char *label,
                        const plan_attention *geometry, const char *qkv, const char *o,
                        const char *lse) {
  plan_step *s = plan_new_step(p, PLAN_ATTN_FWD, phase, label);
  if (!s) return;
  attn_common(p, s, geometry, qkv, o, lse);
  if (p->status == CODA_OK) p->nstep++;
}

static void attn_bwd(coda_plan p, coda_phase phase, const char *label,
                     const plan_attention *geometry, const char *qkv, const char *o,
                     const char *lse, const char *dout, const char *pos, const char *freq,
                     const char *dqkv, const char *zp) {
  plan_step *s = plan_new_step(p, PLAN_ATTN_BWD, phase, label);
  if (!s) return;
  attn_common(p, s, geometry, qkv, o, lse);
  if (p->status != CODA_OK) return;
  s->attn.dout = plan_need_buf(p, label, dout);
  s->attn.dqkv = plan_need_buf(p, label, dqkv);
  if (zp) {
    s->attn.pos = plan_need_buf(p, label, pos);
    s->attn.freq = plan_need_buf(p, label, freq);
    s->attn.zp = plan_need_buf(p, label, zp);
  }
  if (p->status != CODA_OK) return;
  const plan_buf *bd = &p->bufs[s->attn.dout], *bq = &p->bufs[s->attn.dqkv];
  if (bd->rows != p->bufs[s->attn.o].rows || bd->cols != p->bufs[s->attn.o].cols ||
      bq->rows != p->bufs[s->attn.qkv].rows || bq->cols != p->bufs[s->attn.qkv].cols) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': gradient buffers do not match", label);
    return;
  }
  if (zp) {
    const plan_buf *bz = &p->bufs[s->attn.zp];
    if (bz->rows != s->M || bz->cols != geometry->n_heads + 2 * geometry->n_kv_heads) {
      plan_fail(p, CODA_ERR_SHAPE, "step '%s': '%s' is not M x heads", label, zp);
      return;
    }
  }
  p->nstep++;
}

void plan_attention_bwd(coda_plan p, coda_phase phase, const char *label,
                        const plan_attention *geometry, const char *qkv, const char *o,
                        const char *lse, const char *dout, const char *dqkv) {
  attn_bwd(p, phase, label, geometry, qkv, o, lse, dout, NULL, NULL, dqkv, NULL);
}

void plan_attention_bwd_rope(coda_plan p, coda_phase phase, const char *label,
                             const plan_attention *geometry, const char *qkv, const char *o,
                             const char *lse, const char *dout, const char *pos,
                             const char *freq, const char *dqkv, const char *zp) {
  attn_bwd(p, phase, label, geometry, qkv, o, lse, dout, pos, freq, dqkv, zp);
}

/* The forward: its views, then the call. */
static coda_status run_fwd(coda_context ctx, coda_plan p, const plan_step *s) {
  const plan_attention *g = &s->attn;
  const coda_tensor qkv = view_of(&p->bufs[g->qkv]), o = view_of(&p->bufs[g->o]),
                    lse = view_of(&p->bufs[g->lse]);
  const coda_attn_mask mask = {sizeof mask, g->scale, g->window};
  return coda_attention_forward_mask(ctx, &qkv, (int)g->batch, (int)g->seq, g->n_heads,
                                     g->n_kv_heads, g->head_dim, &o, &lse, &mask);
}

/* The backward: its views first (those of the fused RoPE backward empty
 * without it), then the call. */
static coda_status run_bwd(coda_context ctx, coda_plan p, const plan_step *s) {
  const plan_attention *g = &s->attn;
  const coda_tensor none = {0};
  const coda_tensor qkv = view_of(&p->bufs[g->qkv]), o = view_of(&p->bufs[g->o]),
                    lse = view_of(&p->bufs[g->lse]), dout = view_of(&p->bufs[g->dout]),
                    dqkv = view_of(&p->bufs[g->dqkv]);
  const coda_tensor pos = g->zp >= 0 ? view_of(&p->bufs[g->pos]) : none,
                    freq = g->zp >= 0 ? view_of(&p->bufs[g->freq]) : none,
                    zp = g->zp >= 0 ? view_of(&p->bufs[g->zp]) : none;
  const coda_attn_mask mask = {sizeof mask, g->scale, g->window};
  const int r = g->zp >= 0;
  return coda_attention_backward_mask(ctx, &qkv, &o, &lse, &dout, (int)g->batch, (int)g->seq,
                                      g->n_heads, g->n_kv_heads, g->head_dim, r ? &pos : NULL,
                                      r ? &freq : NULL, &dqkv, r ? &zp : NULL, &mask);
}

static void refs(coda_plan p, const plan_step *s, plan_refs *r) {
  (void)p;
  const int fwd = s->kind == PLAN_ATTN_FWD;
  plan_ref(r, s->attn.qkv, REF_READ);
  plan_ref(r, s->attn.o, fwd ? REF_WRITE : REF_READ);
  plan_ref(r, s->attn.lse, fwd ? REF_WRITE : REF_READ);
  if (fwd) return;
  plan_ref(r, s->attn.dout, REF_READ);
  plan_ref(r, s->attn.dqkv, REF_WRITE);
  if (s->attn.zp >= 0) {
    plan_ref(r, s->attn.pos, REF_READ);
    plan_ref(r, s->attn.freq, REF_READ);
    plan_ref(r, s->attn.zp, REF_WRITE);
  }
}

static void print(coda_plan p, coda_strbuf *b, const plan_step *s) {
  if (s->kind == PLAN_ATTN_FWD) {
    coda_sb_printf(b, "attention forward (causal, %d/%d heads, hd %d): %s -> %s, %s",
                   s->attn.n_heads, s->attn.n_kv_heads, s->attn.head_dim,
                   p->bufs[s->attn.qkv].name, p->bufs[s->attn.o].name, p->bufs[s->attn.lse].name);
    if (s->attn.window > 0) coda_sb_printf(b, ", window %d", s->attn.window);
    if (s->attn.scale > 0.0) coda_sb_printf(b, ", scale %g", s->attn.scale);
    return;
  }
  coda_sb_printf(b, "attention backward: %s (with %s, %s, %s) -> %s", p->bufs[s->attn.dout].name,
                 p->bufs[s->attn.qkv].name, p->bufs[s->attn.o].name, p->bufs[s->attn.lse].name,
                 p->bufs[s->attn.dqkv].name);
  if (s->attn.zp >= 0)
    coda_sb_printf(b, ", then RoPE backward (%s, %s) with partials %s", p->bufs[s->attn.pos].name,
                   p->bufs[s->attn.freq].name, p->bufs[s->attn.zp].name);
}

const plan_step_ops plan_attention_fwd_steps = {run_fwd, refs, print, NULL};
const plan_step_ops plan_attention_bwd_steps = {run_bwd, refs, print, NULL};
