/* The decoder's device side (infer.h): its buffers and bf16
 * weights, the device forward through the backend's decode kernels, the
 * decode steps recorded as graphs and replayed, and step profiles. */
#include "infer/infer.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------- device forward */

/* The families' blocks on the device: Llama's (Qwen3 adds its QK-norm)
 * through the fused stores; GPT-2's LayerNorms, biases, GELU and learned
 * positions and Gemma 3's post-norms, GeGLU, windows, score scale,
 * embedding scale and logit cap through the linear job's unfused steps
 * (backends/decode_ops.h). Gemma 3's (1 + w) norms are uploaded as 1 + w. */
static int is_gpt2(const coda_decoder d) {
  return coda_family_of(d->c.family)->block == CODA_BLOCK_GPT2;
}

/* Layer li's rows: its window, and the model's score scale where it is
 * not 1/sqrt(hd) (Gemma 3's attn_scalar; 0 leaves the kernels' own). */
static coda_decode_rows layer_rows(const coda_decoder d, const coda_decode_rows *rs, int li) {
  coda_decode_rows r = *rs;
  r.window = coda_model_layer_window(&d->c, li);
  r.scale = d->c.attn_scalar > 0.0 ? coda_model_attn_scale(&d->c) : 0.0;
  return r;
}

enum { PH_EMBED, PH_QKV, PH_ATTN, PH_OUT, PH_GATE_UP, PH_DOWN, PH_HEAD };
static const char *const kPhaseNames[CODA_DECODE_PHASES] = {
    "embedding", "norm + qkv + rope", "attention", "out proj", "norm + gate/up + swiglu", "down",
    "head"};

const char *coda_decoder_phase_name(int phase) {
  return phase >= 0 && phase < CODA_DECODE_PHASES ? kPhaseNames[phase] : NULL;
}

/* The bytes of each phase of a step, in the dtypes the decoder keeps:
 * bf16 matrices, embedding and cache with fp32 norms (Qwen3's q/k norms
 * among them) on a device; fp32 throughout on the host. A tied head reads
 * the embedding in full. GPT-2's biases and positions are left out (a
 * few rows of D). */
coda_status coda_decoder_step_bytes(const coda_decoder d, const int32_t *tokens, double *bytes) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  if (!tokens || !bytes)
    return coda_fail(d->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_step_bytes: %s is NULL",
                     tokens ? "bytes" : "tokens");
  const double w = d->gpu ? 2.0 : 4.0, nrm = 4.0, kv = d->gpu ? 2.0 : 4.0;
  const double D = (double)d->D, F = (double)d->F, V = (double)d->V, L = d->c.layers;
  /* stepped sequences; the cached positions their rows read over the
   * layers (a window bounds a layer's) */
  double rows = 0.0, cached = 0.0;
  for (int b = 0; b < d->B; b++)
    if (tokens[b] >= 0) {
      rows += 1.0;
      for (int li = 0; li < d->c.layers; li++) {
        const int win = coda_model_layer_window(&d->c, li), n = d->len[b] + 1;
        cached += win > 0 && win < n ? win : n;
      }
    }
  for (int p = 0; p < CODA_DECODE_PHASES; p++) bytes[p] = 0.0;
  bytes[PH_EMBED] = rows * D * w;
  /* Qwen3's q and k norms: hd weights each a layer */
  const double qkn = coda_family_of(d->c.family)->qk_norm ? 2.0 * (double)d->hd * nrm : 0.0;
  bytes[PH_QKV] = L * (D * nrm + qkn + (double)d->nq * D * w);
  bytes[PH_ATTN] = cached * 2.0 * (double)d->kvd * kv;
  bytes[PH_OUT] = L * (double)d->qd * D * w;
  const double up = coda_family_of(d->c.family)->block == CODA_BLOCK_GPT2 ? 1.0 : 2.0; /* gated */
  bytes[PH_GATE_UP] = L * (D * nrm + up * F * D * w);
  bytes[PH_DOWN] = L * F * D * w;
  bytes[PH_HEAD] = D * nrm + V * D * w;
  return CODA_OK;
}

/* A timing marker closing phase ph (profiled steps only). */
static coda_status mark(coda_decoder d, coda_status s, int ph) {
  if (s || !d->tl || d->tl_n >= d->tl_cap) return s;
  d->tl_phase[d->tl_n] = (signed char)ph;
  return coda_timeline_record(d->ctx, d->tl, d->tl_n++);
}

/* Causal attention of one fresh prompt's rows [r0, r0 + n) of the chunk,
 * all its keys in the chunk, by the training forward's kernels on the
 * packed rotated rows (the cache holds the same bf16 keys and values),
 * with the layer's window and score scale (rl). */
static coda_status prefill_attention(coda_decoder d, const coda_decode_rows *rl, int64_t r0,
                                     int64_t n) {
  const coda_model_config *c = &d->c;
  coda_tensor qkv = coda_tensor_2d(d->d_pk + r0 * d->nq, CODA_BF16, n, d->nq);
  coda_tensor out = coda_tensor_2d(d->d_o + r0 * d->qd, CODA_BF16, n, d->qd);
  coda_tensor lse = coda_tensor_2d(d->d_lse + r0 * c->heads, CODA_F32, n, c->heads);
  coda_attn_mask mask = coda_attn_default_mask();
  mask.scale = rl->scale;
  mask.window = rl->window; /* one of n or more keys: the plain causal mask */
  return coda_attention_forward_mask(d->ctx, &qkv, 1, (int)n, c->heads, c->kv_heads, (int)d->hd,
                                     &out, &lse, mask.scale > 0.0 || mask.window ? &mask : NULL);
}

/* The one-kernel step of one row (rs: its rows, M = 1). */
static coda_decode_row_step_job row_step_job(coda_decoder d, const coda_decode_rows *rs) {
  coda_decode_row_step_job j = {.layer = d->d_ltab, .layers = d->c.layers, .D = d->D, .F = d->F,
                                .V = d->V, .rows = rs, .inv_freq = d->d_inv_freq,
                                .eps = d->c.norm_eps, .x = d->d_x, .q = d->d_q, .o = d->d_o,
                                .y = d->d_y, .work = d->d_work, .norm = d->d_norm,
                                .wout = d->d_wout, .logits = d->d_head, .sync = d->d_sync};
  j.max_splits = d->work_rows < MAX_SPLITS ? (int)d->work_rows : MAX_SPLITS;
  return j;
}

/* The launches of a forward, after its metadata is on the device. */
static coda_status dev_kernels(coda_decoder d, int64_t M, int64_t nhead, int splits) {
  coda_context ctx = d->ctx;
  const coda_model_config *c = &d->c;
  const int64_t D = d->D, F = d->F, nq = d->nq, qd = d->qd;
  const int32_t *d_tok = d->d_meta, *d_seq = d->d_meta + M, *d_pos = d->d_meta + 2 * M;
  const int32_t *d_rows = d->d_meta + 3 * M, *d_hseq = d->d_meta + 3 * M + nhead;
  const coda_decode_rows rs = {M, d_seq, d_pos, c->heads, c->kv_heads, (int)d->hd,
                                 d->max_len, 0.0, 0};
  const int gpt2 = is_gpt2(d);
  const int gemma3 = d->gemma3;
  coda_status s = mark(d, CODA_OK, -1);
  if (!s)
    s = mark(d, coda_decode_embed(ctx, d->d_x, d->d_emb, d_tok, M, D, coda_model_embed_scale(c),
                                  d->d_pos_emb, d_pos),
             PH_EMBED);
  if (M == 1 && nhead == 1 && d->row_step && !d->nseg) {
    /* one row: the layers and the head in one kernel (a profiled step
     * reads its phases from the kernel's barrier times) */
    coda_decode_row_step_job j = row_step_job(d, &rs);
    j.trace = d->tl ? d->d_trace : NULL;
    d->traced = d->tl != NULL;
    if (!s) s = coda_decode_row_step(ctx, &j);
    if (!s) s = coda_decode_gather_rows(ctx, d->d_logits, d->d_head, d_hseq, nhead, d->V, 0.0f);
    return mark(d, s, PH_HEAD);
  }
  const size_t lstride = (size_t)d->B * d->max_len * d->kvd;
  for (int li = 0; li < c->layers && !s; li++) {
    const layer_w *w = &d->l[li];
    uint16_t *kc = d->d_kc + lstride * li, *vc = d->d_vc + lstride * li;
    const coda_decode_rows rl = layer_rows(d, &rs, li);
    /* the norm, qkv, RoPE (the layer's base; none in GPT-2) and the cache
     * append */
    const double *freq = gpt2 ? NULL
                         : coda_model_layer_is_local(c, li) && d->d_inv_freq_local
                             ? d->d_inv_freq_local : d->d_inv_freq;
    coda_decode_linear_job q = {.M = M, .N = nq, .K = D, .w = w->d_wqkv, .xf = d->d_x,
                                .norm_w = w->d_wn_attn, .eps = c->norm_eps, .h = d->d_h,
                                .out = CODA_DECODE_OUT_ROPE, .y = d->d_qkv, .rows = &rs,
                                .q = d->d_q, .kc = kc, .vc = vc,
                                .packed = d->nseg ? d->d_pk : NULL, .inv_freq = freq,
                                .q_norm = w->d_wq_norm, .k_norm = w->d_wk_norm,
                                .norm_b = w->d_bn_attn, .bias = w->d_bqkv};
    s = mark(d, coda_decode_linear(ctx, &q), PH_QKV);
    if (!s && !d->nseg)
      s = mark(d, coda_decode_attention(ctx, &rl, d->d_o, d->d_q, kc, vc, d->d_work, d->d_ticket,
                                     splits),
               PH_ATTN);
    for (int g = 0; g < d->nseg && !s; g++) /* fresh prompts: the training attention */
      s = prefill_attention(d, &rl, d->seg_start[g], d->seg_len[g]);
    if (d->nseg) s = mark(d, s, PH_ATTN);
    /* the out projection into the residual (Gemma 3: its output
     * normalized first, through d_z) */
    coda_decode_linear_job o = {.M = M, .N = D, .K = qd, .w = w->d_wo, .x = d->d_o,
                                .out = CODA_DECODE_OUT_F32, .y = gemma3 ? d->d_z : d->d_x,
                                .accumulate = !gemma3, .bias = w->d_bo,
                                .post_norm = w->d_wpost_attn, .res = d->d_x, .eps = c->norm_eps};
    if (!s) s = mark(d, coda_decode_linear(ctx, &o), PH_OUT);
    /* the norm, gate/up (GPT-2: up) and the activation */
    const coda_decode_out act = gpt2     ? CODA_DECODE_OUT_GELU
                                : gemma3 ? CODA_DECODE_OUT_GEGLU
                                         : CODA_DECODE_OUT_SWIGLU;
    coda_decode_linear_job gu = {.M = M, .N = gpt2 ? F : 2 * F, .K = D, .w = w->d_w13,
                                 .xf = d->d_x, .norm_w = w->d_wn_ffn, .eps = c->norm_eps,
                                 .h = d->d_h, .out = act, .y = d->d_z, .yb = d->d_y,
                                 .norm_b = w->d_bn_ffn, .bias = w->d_bfc};
    if (!s) s = mark(d, coda_decode_linear(ctx, &gu), PH_GATE_UP);
    coda_decode_linear_job dn = {.M = M, .N = D, .K = F, .w = w->d_w2, .x = d->d_y,
                                 .out = CODA_DECODE_OUT_F32, .y = gemma3 ? d->d_z : d->d_x,
                                 .accumulate = !gemma3, .bias = w->d_bproj,
                                 .post_norm = w->d_wpost_ffn, .res = d->d_x, .eps = c->norm_eps};
    if (!s) s = mark(d, coda_decode_linear(ctx, &dn), PH_DOWN);
  }
  coda_decode_linear_job hj = {.M = nhead, .N = d->V, .K = D, .w = d->d_wout, .xf = d->d_x,
                               .norm_w = d->d_norm, .norm_b = d->d_norm_b, .norm_rows = d_rows,
                               .eps = c->norm_eps, .h = d->d_h, .out = CODA_DECODE_OUT_F32,
                               .y = d->d_head};
  if (!s) s = coda_decode_linear(ctx, &hj);
  if (!s)
    s = coda_decode_gather_rows(ctx, d->d_logits, d->d_head, d_hseq, nhead, d->V,
                                (float)c->logit_softcap);
  return mark(d, s, PH_HEAD);
}

/* A decode step through its recorded graph: the first step of a shape runs
 * directly (kernels load, workspaces grow), the second records and replays. */
static coda_status dev_step_graph(coda_decoder d, int64_t M, int splits) {
  step_graph *e = NULL;
  for (int i = 0; i < d->ngraphs && !e; i++)
    if (d->graphs[i].M == M && d->graphs[i].splits == splits) e = &d->graphs[i];
  if (!e) {
    if (d->ngraphs == MAX_GRAPHS) return dev_kernels(d, M, M, splits);
    e = &d->graphs[d->ngraphs++];
    e->M = M;
    e->splits = splits;
  }
  if (!e->g) {
    if (!e->seen) {
      e->seen = 1;
      return dev_kernels(d, M, M, splits);
    }
    if (coda_graph_begin(d->ctx) != CODA_OK) { /* e.g. the legacy default stream */
      d->graphs_off = 1;
      return dev_kernels(d, M, M, splits);
    }
    coda_status s = dev_kernels(d, M, M, splits);
    coda_graph g = NULL;
    const coda_status se = coda_graph_end(d->ctx, &g);
    if (s || se) {
      coda_graph_destroy(g);
      return s ? s : se;
    }
    e->g = g;
  }
  return coda_graph_launch(d->ctx, e->g);
}

coda_status decode_dev_forward(coda_decoder d, const int32_t *tok, const int32_t *seq,
                               const int32_t *pos, int64_t M, const int32_t *head_rows,
                               const int32_t *head_seq, int64_t nhead) {
  coda_context ctx = d->ctx;
  const coda_model_config *c = &d->c;
  /* the rows' metadata in one upload: tokens, sequences, positions, head
   * rows, head sequences */
  int32_t *meta = d->h_meta;
  memcpy(meta, tok, (size_t)M * 4);
  memcpy(meta + M, seq, (size_t)M * 4);
  memcpy(meta + 2 * M, pos, (size_t)M * 4);
  memcpy(meta + 3 * M, head_rows, (size_t)nhead * 4);
  memcpy(meta + 3 * M + nhead, head_seq, (size_t)nhead * 4);
  coda_status s = coda_memcpy_h2d_queued(ctx, d->d_meta, meta, (size_t)(3 * M + 2 * nhead) * 4);
  int maxpos = 0;
  for (int64_t i = 0; i < M; i++) maxpos = pos[i] > maxpos ? pos[i] : maxpos;
  /* the most keys a row sees: a window bounds them where every layer has
   * one (Mistral-style); Gemma 3's global layers see them all */
  int wmax = 0;
  for (int li = 0; li < c->layers && wmax >= 0; li++) {
    const int w = coda_model_layer_window(c, li);
    wmax = w == 0 ? -1 : w > wmax ? w : wmax;
  }
  const int seen = wmax > 0 && wmax < maxpos + 1 ? wmax : maxpos + 1;
  /* Split the cache so that small batches keep every SM busy (the shorter
   * the split, the shorter each warp's chain of dependent steps); prefill
   * rows give parallelism enough without. */
  int splits = 1;
  if (M * c->kv_heads < 512) {
    const int span = M * c->kv_heads <= 64 ? 16 : 64; /* 32 measured slower at batch 16 */
    splits = (seen + span - 1) / span;
    if (splits > MAX_SPLITS) splits = MAX_SPLITS;
    if (splits > d->work_rows / M) splits = (int)(d->work_rows / M);
    if (splits < 1) splits = 1;
  }
  if (s) return s;
  /* Whole fresh prompts (each sequence's rows from position 0, in order)
   * take the training attention; rows continuing a cache, the decode
   * kernel. */
  d->nseg = 0;
  int fresh = !d->in_step && d->d_pk && M > 1;
  for (int64_t i = 0; i < M && fresh; i++) {
    if (pos[i] == 0) {
      d->seg_start[d->nseg] = (int32_t)i;
      d->seg_len[d->nseg++] = 1;
    } else if (i > 0 && seq[i] == seq[i - 1] && pos[i] == pos[i - 1] + 1) {
      d->seg_len[d->nseg - 1]++;
    } else {
      fresh = 0;
    }
  }
  if (!fresh) d->nseg = 0;
  if (!d->in_step || d->graphs_off || d->tl) return dev_kernels(d, M, nhead, splits);
  return dev_step_graph(d, M, splits);
}

static void *dalloc(coda_decoder d, size_t bytes, coda_status *s) {
  void *p = NULL;
  if (*s) return NULL;
  *s = coda_malloc(d->ctx, bytes ? bytes : 16, &p);
  return p;
}

/* bf16 copy of n fp32 values on the device. */
static uint16_t *upload16(coda_decoder d, const float *src, size_t n, uint16_t *tmp,
                          coda_status *s) {
  uint16_t *p = dalloc(d, n * 2, s);
  if (*s) return NULL;
  const int64_t nn = (int64_t)n;
#pragma omp parallel for schedule(static) num_threads(d->nt)
  for (int64_t i = 0; i < nn; i++) tmp[i] = decode_to_bf16(src[i]);
  *s = coda_memcpy_h2d(d->ctx, p, tmp, n * 2);
  return p;
}
static float *upload32(coda_decoder d, const float *src, size_t n, coda_status *s) {
  float *p = dalloc(d, n * 4, s);
  if (!*s) *s = coda_memcpy_h2d(d->ctx, p, src, n * 4);
  return p;
}

/* A norm's fp32 weights: Gemma 3's as 1 + w (tmp: n floats of scratch). */
static float *upload_norm(coda_decoder d, const float *src, size_t n, float *tmp, coda_status *s) {
  if (!d->gemma3) return upload32(d, src, n, s);
  for (size_t i = 0; i < n; i++) tmp[i] = 1.0f + src[i];
  return upload32(d, tmp, n, s);
}

coda_status decode_setup_device(coda_decoder d, const float *W, coda_model *m) {
  coda_status s = CODA_OK;
  const coda_model_config *c = &d->c;
  const int64_t D = d->D, F = d->F, V = d->V;
  size_t biggest = (size_t)V * D > (size_t)2 * F * D ? (size_t)V * D : (size_t)2 * F * D;
  if ((size_t)d->nq * D > biggest) biggest = (size_t)d->nq * D;
  if ((size_t)d->c.seq * D > biggest) biggest = (size_t)d->c.seq * D; /* GPT-2's positions */
  const int gpt2 = is_gpt2(d);
  uint16_t *tmp = malloc(biggest * 2);
  float *ftmp = malloc((size_t)(D > d->hd ? D : d->hd) * sizeof *ftmp);
  if (!tmp || !ftmp) {
    free(tmp);
    free(ftmp);
    return coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  char nm[96];
#define PW(name) (W + coda_model_find(m, name)->offset)
#define LW(name) (snprintf(nm, sizeof nm, "layers.%d." name, i), PW(nm))
  d->d_emb = upload16(d, PW("tok_embeddings.weight"), (size_t)V * D, tmp, &s);
  d->d_wout = c->tied ? NULL : upload16(d, PW("output.weight"), (size_t)V * D, tmp, &s);
  d->d_norm = upload_norm(d, PW("norm.weight"), (size_t)D, ftmp, &s);
  if (gpt2) {
    d->d_pos_emb = upload16(d, PW("pos_embeddings.weight"), (size_t)c->seq * D, tmp, &s);
    d->d_norm_b = upload32(d, PW("norm.bias"), (size_t)D, &s);
  }
  for (int i = 0; i < c->layers && !s; i++) {
    layer_w *w = &d->l[i];
    w->d_wn_attn = upload_norm(d, LW("attention_norm.weight"), (size_t)D, ftmp, &s);
    w->d_wn_ffn = upload_norm(d, LW("ffn_norm.weight"), (size_t)D, ftmp, &s);
    w->d_wqkv = upload16(d, LW("attention.wqkv.weight"), (size_t)d->nq * D, tmp, &s);
    w->d_wo = upload16(d, LW("attention.wo.weight"), (size_t)D * d->qd, tmp, &s);
    if (gpt2) { /* its MLP: wfc (F x D) and wproj (D x F) in the w13 and w2 slots */
      w->d_w13 = upload16(d, LW("feed_forward.wfc.weight"), (size_t)F * D, tmp, &s);
      w->d_w2 = upload16(d, LW("feed_forward.wproj.weight"), (size_t)D * F, tmp, &s);
      w->d_bn_attn = upload32(d, LW("attention_norm.bias"), (size_t)D, &s);
      w->d_bqkv = upload32(d, LW("attention.wqkv.bias"), (size_t)d->nq, &s);
      w->d_bo = upload32(d, LW("attention.wo.bias"), (size_t)D, &s);
      w->d_bn_ffn = upload32(d, LW("ffn_norm.bias"), (size_t)D, &s);
      w->d_bfc = upload32(d, LW("feed_forward.wfc.bias"), (size_t)F, &s);
      w->d_bproj = upload32(d, LW("feed_forward.wproj.bias"), (size_t)D, &s);
    } else {
      w->d_w13 = upload16(d, LW("feed_forward.w13.weight"), (size_t)2 * F * D, tmp, &s);
      w->d_w2 = upload16(d, LW("feed_forward.w2.weight"), (size_t)D * F, tmp, &s);
    }
    if (coda_family_of(c->family)->qk_norm) { /* Qwen3, Gemma 3: fp32, as the other norms */
      w->d_wq_norm = upload_norm(d, LW("attention.q_norm.weight"), (size_t)d->hd, ftmp, &s);
      w->d_wk_norm = upload_norm(d, LW("attention.k_norm.weight"), (size_t)d->hd, ftmp, &s);
    }
    if (d->gemma3) {
      w->d_wpost_attn = upload_norm(d, LW("attention.post_norm.weight"), (size_t)D, ftmp, &s);
      w->d_wpost_ffn = upload_norm(d, LW("feed_forward.post_norm.weight"), (size_t)D, ftmp, &s);
    }
  }
#undef LW
#undef PW
  free(tmp);
  free(ftmp);
  if (c->tied) d->d_wout = d->d_emb;
  const size_t C = (size_t)d->chunk, cache = (size_t)c->layers * d->B * d->max_len * d->kvd;
  d->d_kc = dalloc(d, cache * 2, &s);
  d->d_vc = dalloc(d, cache * 2, &s);
  d->d_x = dalloc(d, C * D * 4, &s);
  d->d_h = dalloc(d, C * D * 2, &s);
  d->d_qkv = dalloc(d, C * d->nq * 4, &s);
  d->d_q = dalloc(d, C * d->qd * 2, &s);
  d->d_o = dalloc(d, C * d->qd * 2, &s);
  /* the gate/up results, and Gemma 3's projections before their post-norm */
  d->d_z = dalloc(d, C * (2 * F > D ? 2 * F : D) * 4, &s);
  d->d_y = dalloc(d, C * F * 2, &s);
  d->d_head = dalloc(d, (size_t)d->B * V * 4, &s); /* a forward's head rows: one a sequence */
  d->d_logits = dalloc(d, (size_t)d->B * V * 4, &s);
  /* decode attention partials: (running max, sum, hd values) per row, q
   * head and split */
  size_t wrows = C > (size_t)d->B * MAX_SPLITS ? C : (size_t)d->B * MAX_SPLITS;
  d->d_work = dalloc(d, wrows * c->heads * (d->hd + 2) * 4, &s);
  d->d_inv_freq = dalloc(d, (size_t)d->hd / 2 * 8, &s);
  if (!s) s = coda_memcpy_h2d(d->ctx, d->d_inv_freq, d->inv_freq, (size_t)d->hd / 2 * 8);
  if (d->inv_freq_local) {
    d->d_inv_freq_local = dalloc(d, (size_t)d->hd / 2 * 8, &s);
    if (!s)
      s = coda_memcpy_h2d(d->ctx, d->d_inv_freq_local, d->inv_freq_local, (size_t)d->hd / 2 * 8);
  }
  d->work_rows = (int64_t)wrows;
  /* the attention's split counters start at zero and its kernels leave
   * them there */
  d->d_ticket = dalloc(d, C * c->heads * sizeof(unsigned), &s);
  unsigned *zero = s ? NULL : calloc(C * c->heads, sizeof *zero);
  if (!s && !zero) s = coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!s) s = coda_memcpy_h2d(d->ctx, d->d_ticket, zero, C * c->heads * sizeof *zero);
  free(zero);
  d->d_meta = dalloc(d, C * 5 * 4, &s);
  d->d_sample = dalloc(d, (size_t)d->B * 4, &s);
  d->d_spos = dalloc(d, (size_t)d->B * 4, &s);
  /* the one-kernel step, where the backend takes the shapes: Llama's
   * block without windows (it has no QK-norm, biases, post-norms or
   * window: the other one-row steps take the separate kernels) */
  int one_kernel_block = c->family == CODA_FAMILY_LLAMA;
  for (int li = 0; li < c->layers; li++)
    if (coda_model_layer_window(c, li)) one_kernel_block = 0;
  const coda_decode_rows rs1 = {1, NULL, NULL, c->heads, c->kv_heads, (int)d->hd, d->max_len,
                                0.0, 0};
  coda_decode_row_step_job j1 = {.layers = c->layers, .D = D, .F = F, .V = V, .rows = &rs1,
                                 .max_splits = 1};
  if (!s && one_kernel_block && coda_decode_row_step_ok(d->ctx, &j1, NULL, 0)) {
    const size_t lstride = (size_t)d->B * d->max_len * d->kvd; /* a layer's cache, as dev_kernels */
    coda_decode_layer_weights *t = calloc((size_t)c->layers, sizeof *t);
    if (!t) s = coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < c->layers && !s; i++) {
      const layer_w *w = &d->l[i];
      t[i] = (coda_decode_layer_weights){w->d_wqkv, w->d_wo, w->d_w13, w->d_w2, w->d_wn_attn,
                                         w->d_wn_ffn, d->d_kc + lstride * i, d->d_vc + lstride * i};
    }
    d->d_ltab = dalloc(d, (size_t)c->layers * sizeof *t, &s);
    if (!s) s = coda_memcpy_h2d(d->ctx, d->d_ltab, t, (size_t)c->layers * sizeof *t);
    free(t);
    d->d_sync = dalloc(d, sizeof(unsigned), &s);
    d->row_step = !s;
  }
  if (d->hd == 32 || d->hd == 64 || d->hd == 128) { /* the training attention's head dims */
    d->d_pk = dalloc(d, C * d->nq * 2, &s);
    d->d_lse = dalloc(d, C * c->heads * 4, &s);
  }
  return s;
}

coda_status coda_decoder_step_profile(coda_decoder d, const int32_t *tokens, double *ms) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  if (!ms) return coda_fail(d->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_step_profile: ms is NULL");
  if (!d->gpu)
    return coda_fail(d->ctx, CODA_ERR_NOT_SUPPORTED, "coda_decoder_step_profile: the decoder runs "
                     "on the CPU (device timing markers only)");
  const int cap = 3 + 9 * d->c.layers, L = d->c.layers;
  d->tl_phase = malloc((size_t)cap);
  uint64_t *tr = malloc((size_t)(6 * L + 2) * sizeof *tr);
  if (!d->tl_phase || !tr) {
    free(d->tl_phase);
    d->tl_phase = NULL;
    free(tr);
    return coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  coda_status s = coda_timeline_create(d->ctx, cap, &d->tl);
  d->tl_n = 0;
  d->tl_cap = cap;
  d->traced = 0;
  if (!s && d->row_step)
    s = coda_malloc(d->ctx, (size_t)(6 * L + 2) * sizeof *tr, (void **)&d->d_trace);
  if (!s) s = coda_decoder_step(d, tokens);
  for (int i = 0; i < CODA_DECODE_PHASES; i++) ms[i] = 0.0;
  for (int i = 1; i < d->tl_n && !s; i++) {
    double t = 0.0;
    s = coda_timeline_elapsed(d->ctx, d->tl, i - 1, i, &t);
    if (d->tl_phase[i] >= 0) ms[d->tl_phase[i]] += t;
  }
  if (!s && d->traced) {
    /* the one kernel: its phases between block 0's barrier exits (tr[6l]
     * opens layer l's qkv; the head is tr[6L] to tr[6L + 1]); the head
     * phase keeps the row gather after the kernel besides */
    s = coda_memcpy_d2h(d->ctx, tr, d->d_trace, (size_t)(6 * L + 2) * sizeof *tr);
    const double head_rest = ms[PH_HEAD];
    for (int i = PH_QKV; i <= PH_HEAD; i++) ms[i] = 0.0;
    static const int of[6] = {PH_QKV, PH_ATTN, PH_ATTN, PH_OUT, PH_GATE_UP, PH_DOWN};
    for (int k = 0; k < 6 * L + 1 && !s; k++)
      ms[k < 6 * L ? of[k % 6] : PH_HEAD] += (double)(tr[k + 1] - tr[k]) * 1e-6;
    if (!s) ms[PH_HEAD] += head_rest - (double)(tr[6 * L + 1] - tr[0]) * 1e-6;
  }
  coda_free(d->ctx, d->d_trace);
  d->d_trace = NULL;
  d->traced = 0;
  free(tr);
  coda_timeline_destroy(d->ctx, d->tl);
  d->tl = NULL;
  free(d->tl_phase);
  d->tl_phase = NULL;
  return s;
}
