/* The decoder's prefill of fresh prompts through the forward-only Llama-3
 * block plans of src/nn (coda_llama_block_plan with CODA_LLAMA_INFER): the
 * fused epilogue programs the trainer runs (RMSNorm producer, qkv + RoPE,
 * attention, out projection + residual + norm, gate/up + SwiGLU, down +
 * residual), without anything kept for a backward.
 *
 * A chunk qualifies when every sequence in it starts at position 0 (the
 * decoder's prefill loop puts prompts in order, so only the chunk's last
 * prompt can be cut by its end; that prompt's later chunks continue a cache
 * and take the direct path). A plan has a fixed batch x seq, so the
 * chunk's prompts are grouped by length: the B prompts of length T run as
 * one B x T plan, which needs neither padding nor a mask (each row attends
 * causally within its own prompt, within the model's sliding window if
 * it has one). One plan serves every layer: before a
 * layer runs its six weights are bound, and the residual stream alternates
 * between two buffers of the plan set. After the layer, the rotated K and
 * V columns of the plan's qkv output are copied into the cache, one copy
 * each per prompt. Plan sets are kept per (B, T), up to MAX_PREFILL_PLANS
 * of them (the least recently used makes room), so a prefill of shapes
 * seen before builds nothing.
 *
 * Weights: the plans want bf16 weights and norms. On a device the decoder's
 * bf16 GEMM weights are bound as they are (the same layout: RoPE-adjacent
 * qkv rows, interleaved gate/up rows, as model.c keeps them); only the
 * fp32 norm weights get bf16 copies (two vectors a layer). On the host the
 * decoder's weights are fp32, so the plan path holds a bf16 copy of the
 * block weights (half the size of the fp32 copy), made when the decoder is.
 *
 * The logits of the prompts that end in the chunk come from the decoder's
 * own head (final RMSNorm + LM head of those rows only): the block output
 * rows are converted to fp32 into the decoder's row buffer, then the host
 * head or the device head job runs on them. */
#include "infer/infer.h"
#include "base/internal.h"

#include <stdlib.h>
#include <string.h>

int decode_plan_builds(const coda_decoder d) { return d ? d->plan_builds : 0; }

static void free_set(coda_context ctx, prefill_plan *p) {
  coda_plan_destroy(p->blk);
  coda_free(ctx, p->xs[0]);
  coda_free(ctx, p->xs[1]);
  memset(p, 0, sizeof *p);
}

void decode_plans_free(coda_decoder d) {
  for (int i = 0; i < d->nplans; i++) free_set(d->ctx, &d->plans[i]);
  d->nplans = 0;
  free(d->Wb);
  d->Wb = NULL;
  coda_free(d->ctx, d->d_pnorm);
  d->d_pnorm = NULL;
}

static void round_into(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = coda_f32_to_bf16(src[i]);
}

coda_status decode_plans_setup(coda_decoder d, coda_prefill_path path, const float *W,
                               coda_model *m) {
  coda_context ctx = d->ctx;
  const coda_model_config *c = &d->c;
  d->use_plans = 0;
  if (path == CODA_PREFILL_DIRECT || (path == CODA_PREFILL_AUTO && !d->gpu)) return CODA_OK;
  /* the forward-only block plans are Llama's (Qwen3's QK-norm block has no
   * such form): AUTO prefills directly; PLANS was refused when the decoder
   * was created */
  if (c->family != CODA_FAMILY_LLAMA) return CODA_OK;
  /* AUTO takes the plans only where they run, else the direct path */
  const int train_attn = d->hd == 32 || d->hd == 64 || d->hd == 128;
  if (d->gpu && !train_attn) {
    if (path == CODA_PREFILL_AUTO) return CODA_OK;
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decoder: the plan prefill on the GPU needs "
                     "head dim 32, 64 or 128 (the training attention's), found %lld",
                     (long long)d->hd);
  }
  if (coda_context_precision(ctx) != CODA_PRECISION_F32) {
    if (path == CODA_PREFILL_AUTO) return CODA_OK;
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decoder: the plan prefill (bf16 plans) needs "
                     "a context of fp32 precision");
  }
  const int64_t D = d->D, F = d->F, L = c->layers;
  char nm[96];
#define PW(name) (W + coda_model_find(m, name)->offset)
  if (d->gpu) {
    coda_status s = coda_malloc(ctx, (size_t)(2 * L * D) * 2, (void **)&d->d_pnorm);
    uint16_t *tmp = s ? NULL : malloc((size_t)(2 * L * D) * 2);
    if (!s && !tmp) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < L && !s; i++) {
      snprintf(nm, sizeof nm, "layers.%d.attention_norm.weight", i);
      round_into(tmp + 2 * i * D, PW(nm), (size_t)D);
      snprintf(nm, sizeof nm, "layers.%d.ffn_norm.weight", i);
      round_into(tmp + (2 * i + 1) * D, PW(nm), (size_t)D);
    }
    if (!s) s = coda_memcpy_h2d(ctx, d->d_pnorm, tmp, (size_t)(2 * L * D) * 2);
    free(tmp);
    if (s) return s;
    for (int i = 0; i < L; i++) {
      layer_w *w = &d->l[i];
      w->p_wn1 = d->d_pnorm + 2 * i * D;
      w->p_wn2 = d->d_pnorm + (2 * i + 1) * D;
      w->p_wqkv = w->d_wqkv;
      w->p_wo = w->d_wo;
      w->p_w13 = w->d_w13;
      w->p_w2 = w->d_w2;
    }
  } else {
    const size_t per = (size_t)(2 * D + d->nq * D + D * d->qd + 2 * F * D + D * F);
    d->Wb = malloc(per * (size_t)L * 2);
    if (!d->Wb)
      return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "decoder: cannot allocate the bf16 block "
                       "weights of the plan prefill (%zu bytes)", per * (size_t)L * 2);
    uint16_t *p = d->Wb;
    for (int i = 0; i < L; i++) {
      layer_w *w = &d->l[i];
      const float *src[6] = {w->wn_attn, w->wn_ffn, w->wqkv, w->wo, w->w13, w->w2};
      const uint16_t **dst[6] = {&w->p_wn1, &w->p_wn2, &w->p_wqkv, &w->p_wo, &w->p_w13, &w->p_w2};
      const int64_t n[6] = {D, D, d->nq * D, D * d->qd, 2 * F * D, D * F};
      for (int k = 0; k < 6; k++) {
        round_into(p, src[k], (size_t)n[k]);
        *dst[k] = p;
        p += n[k];
      }
    }
  }
#undef PW
  d->use_plans = 1;
  return CODA_OK;
}

int decode_plans_take(coda_decoder d, const int32_t *seq, const int32_t *pos, int64_t M) {
  if (!d->use_plans) return 0;
  int n = 0;
  for (int64_t i = 0; i < M; i++) {
    if (pos[i] == 0) {
      d->seg_start[n] = (int32_t)i;
      d->seg_len[n++] = 1;
    } else if (i > 0 && seq[i] == seq[i - 1] && pos[i] == pos[i - 1] + 1) {
      d->seg_len[n - 1]++;
    } else {
      return 0;
    }
  }
  d->nseg = n;
  return n > 0;
}

/* The plan set for B prompts of T tokens: kept, or built in a free slot or
 * in the least recently used one. */
static coda_status plan_set(coda_decoder d, int B, int T, prefill_plan **out) {
  coda_context ctx = d->ctx;
  const coda_model_config *c = &d->c;
  prefill_plan *slot = NULL;
  for (int i = 0; i < d->nplans; i++)
    if (d->plans[i].B == B && d->plans[i].T == T) {
      d->plans[i].used = d->plan_clock;
      *out = &d->plans[i];
      return CODA_OK;
    }
  if (d->nplans < MAX_PREFILL_PLANS) {
    slot = &d->plans[d->nplans++];
  } else {
    slot = &d->plans[0];
    for (int i = 1; i < d->nplans; i++)
      if (d->plans[i].used < slot->used) slot = &d->plans[i];
    free_set(ctx, slot);
  }
  coda_llama_config lc = coda_model_block_config(c, B, T, CODA_LLAMA_INFER);
  /* the plans are the llama family's, whose layers share one window
   * (Mistral's sliding_window, or none): layer 0's serves them all */
  lc = coda_model_layer_config(c, &lc, 0);
  slot->B = B;
  slot->T = T;
  slot->used = d->plan_clock;
  const size_t bytes = (size_t)B * (size_t)T * (size_t)d->D * 2;
  coda_status s = coda_llama_block_plan(ctx, &lc, &slot->blk);
  if (!s) s = coda_malloc(ctx, bytes, &slot->xs[0]);
  if (!s) s = coda_malloc(ctx, bytes, &slot->xs[1]);
  if (s) {
    free_set(ctx, slot);
    /* the slot stays in the table, empty: B = 0 matches no shape */
    return s;
  }
  d->plan_builds++;
  *out = slot;
  return CODA_OK;
}

/* Plan buffer `name` bound to rows x cols bf16 at data. */
static coda_status bind16(coda_context ctx, coda_plan p, const char *name, const void *data,
                          int64_t rows, int64_t cols) {
  coda_tensor t = coda_tensor_2d((void *)data, CODA_BF16, rows, cols);
  coda_status s = coda_plan_bind(p, name, &t);
  if (s) return coda_fail(ctx, s, "plan prefill: binding '%s': %s", name, coda_last_error(ctx));
  return CODA_OK;
}

/* Block input rows of the group's prompts (member k's tokens at rows k·T ..
 * k·T + T - 1): the bf16 embedding rows. */
static coda_status embed(coda_decoder d, prefill_plan *ps, const int32_t *tok, const int *mem) {
  const int64_t D = d->D, T = ps->T, rows = (int64_t)ps->B * T;
  int32_t *t = d->h_meta; /* 5 x chunk entries, B·T <= chunk */
  for (int k = 0; k < ps->B; k++)
    memcpy(t + k * T, tok + d->seg_start[mem[k]], (size_t)T * 4);
  if (d->gpu) {
    coda_status s = coda_memcpy_h2d(d->ctx, d->d_meta, t, (size_t)rows * 4);
    coda_tensor x = coda_tensor_2d(ps->xs[0], CODA_BF16, rows, D);
    if (!s) s = coda_train_embed16(d->ctx, &x, d->d_emb, d->d_meta, NULL, 0, 1.0f);
    return s;
  }
  uint16_t *x = ps->xs[0];
  for (int64_t r = 0; r < rows; r++) round_into(x + r * D, d->emb + (int64_t)t[r] * D, (size_t)D);
  return CODA_OK;
}

/* Layer li's keys and values of every prompt of the group into the cache:
 * the K and V columns of the plan's qkv rows at positions 0 .. T - 1. */
static coda_status to_cache(coda_decoder d, prefill_plan *ps, int li, const int32_t *seq,
                            const int *mem) {
  coda_tensor qkv;
  coda_status s = coda_plan_tensor(ps->blk, "qkv", &qkv);
  const size_t es = coda_dtype_size(qkv.dtype);
  const coda_dtype cdt = d->gpu ? CODA_BF16 : CODA_F32;
  void *kc = d->gpu ? (void *)d->d_kc : (void *)d->kc, *vc = d->gpu ? (void *)d->d_vc : (void *)d->vc;
  const size_t ces = coda_dtype_size(cdt);
  for (int k = 0; k < ps->B && !s; k++) {
    const int b = seq[d->seg_start[mem[k]]];
    const size_t off = (((size_t)li * d->B + (size_t)b) * d->max_len) * (size_t)d->kvd;
    const char *row0 = (const char *)qkv.data + (size_t)k * ps->T * (size_t)qkv.ld * es;
    for (int kv = 0; kv < 2 && !s; kv++) {
      coda_tensor src = coda_tensor_2d((void *)(row0 + (size_t)(d->qd + kv * d->kvd) * es),
                                       qkv.dtype, ps->T, d->kvd);
      src.ld = qkv.ld;
      coda_tensor dst = coda_tensor_2d((char *)(kv ? vc : kc) + off * ces, cdt, ps->T, d->kvd);
      s = coda_tensor_copy(d->ctx, &dst, &src);
    }
  }
  return s;
}

coda_status decode_plans_forward(coda_decoder d, const int32_t *tok, const int32_t *seq,
                                 int64_t M, const int32_t *head_rows, const int32_t *head_seq,
                                 int64_t nhead) {
  coda_context ctx = d->ctx;
  const coda_model_config *c = &d->c;
  const int64_t D = d->D, F = d->F;
  const int nseg = d->nseg;
  /* which head row (if any) each segment's last row is */
  int *mem = malloc((size_t)nseg * sizeof *mem), *done = calloc((size_t)nseg, sizeof *done);
  int *row_head = malloc((size_t)M * sizeof *row_head);
  int32_t *hseq = malloc((size_t)(nhead ? nhead : 1) * sizeof *hseq);
  if (!mem || !done || !row_head || !hseq) {
    free(mem); free(done); free(row_head); free(hseq);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (int64_t i = 0; i < M; i++) row_head[i] = -1;
  for (int64_t r = 0; r < nhead; r++) row_head[head_rows[r]] = (int)r;
  d->plan_clock++;
  coda_status s = CODA_OK;
  int64_t placed = 0; /* head rows converted into the decoder's fp32 rows */
  for (int g0 = 0; g0 < nseg && !s; g0++) {
    if (done[g0]) continue;
    const int T = d->seg_len[g0];
    int B = 0;
    for (int g = g0; g < nseg; g++)
      if (!done[g] && d->seg_len[g] == T) {
        mem[B++] = g;
        done[g] = 1;
      }
    prefill_plan *ps = NULL;
    s = plan_set(d, B, T, &ps);
    if (!s) s = embed(d, ps, tok, mem);
    const int64_t rows = (int64_t)B * T;
    for (int li = 0; li < c->layers && !s; li++) {
      const layer_w *w = &d->l[li];
      coda_plan p = ps->blk;
      s = bind16(ctx, p, "x", ps->xs[li % 2], rows, D);
      if (!s) s = bind16(ctx, p, "x_out", ps->xs[(li + 1) % 2], rows, D);
      if (!s) s = bind16(ctx, p, "wn1", w->p_wn1, 1, D);
      if (!s) s = bind16(ctx, p, "wqkv", w->p_wqkv, d->nq, D);
      if (!s) s = bind16(ctx, p, "wo", w->p_wo, D, d->qd);
      if (!s) s = bind16(ctx, p, "wn2", w->p_wn2, 1, D);
      if (!s) s = bind16(ctx, p, "wgu", w->p_w13, 2 * F, D);
      if (!s) s = bind16(ctx, p, "wd", w->p_w2, D, F);
      if (!s) s = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
      if (!s) s = to_cache(d, ps, li, seq, mem);
    }
    /* the last prompt tokens' rows of the block output, to fp32 rows of
     * the decoder for its head */
    const uint16_t *xl = ps ? (const uint16_t *)ps->xs[c->layers % 2] : NULL;
    float *xf = d->gpu ? d->d_x : d->x;
    for (int k = 0; k < B && !s; k++) {
      const int g = mem[k], r = row_head[d->seg_start[g] + d->seg_len[g] - 1];
      if (r < 0) continue; /* cut by the chunk's end: no logits yet */
      coda_tensor src = coda_tensor_2d((void *)(xl + ((int64_t)k * T + T - 1) * D), CODA_BF16, 1, D);
      coda_tensor dst = coda_tensor_2d(xf + placed * D, CODA_F32, 1, D);
      s = coda_tensor_copy(ctx, &dst, &src);
      hseq[placed++] = head_seq[r];
    }
  }
  if (!s && placed) {
    int32_t *meta = d->h_meta; /* the rows 0 .. placed-1 and their sequences */
    for (int64_t r = 0; r < placed; r++) {
      meta[r] = (int32_t)r;
      meta[placed + r] = hseq[r];
    }
    if (!d->gpu) {
      decode_host_head(d, meta, hseq, placed);
    } else {
      s = coda_memcpy_h2d(ctx, d->d_meta, meta, (size_t)(2 * placed) * 4);
      coda_decode_linear_job hj = {.M = placed, .N = d->V, .K = D, .w = d->d_wout, .xf = d->d_x,
                                   .norm_w = d->d_norm, .norm_rows = d->d_meta,
                                   .eps = c->norm_eps, .h = d->d_h, .out = CODA_DECODE_OUT_F32,
                                   .y = d->d_head};
      if (!s) s = coda_decode_linear(ctx, &hj);
      if (!s) s = coda_decode_gather_rows(ctx, d->d_logits, d->d_head, d->d_meta + placed, placed,
                                          d->V, (float)c->logit_softcap);
    }
  }
  free(mem); free(done); free(row_head); free(hseq);
  return s;
}
