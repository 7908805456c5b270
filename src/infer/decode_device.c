/* The decoder's device side (infer.h): its buffers and bf16
 * weights, the device forward through the backend's decode kernels, the
 * decode steps recorded as graphs and replayed, and step profiles. */
#include "infer/infer.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------- device forward */

const char *decode_gpu_lacks(coda_model_family f) {
  switch (f) {
  case CODA_FAMILY_LLAMA:
  case CODA_FAMILY_QWEN3: return NULL;
  case CODA_FAMILY_GPT2:
    return "LayerNorm with a bias, learned positions, GELU and a bias on every linear";
  case CODA_FAMILY_GEMMA3:
    return "(1 + w) norms, post-norms, GeGLU, sliding-window attention, the embedding scale "
           "and the logit soft cap";
  }
  return "a block the device kernels do not know";
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
 * the embedding in full. */
coda_status coda_decoder_step_bytes(const coda_decoder d, const int32_t *tokens, double *bytes) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  if (!tokens || !bytes)
    return coda_fail(d->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_step_bytes: %s is NULL",
                     tokens ? "bytes" : "tokens");
  const double w = d->gpu ? 2.0 : 4.0, nrm = 4.0, kv = d->gpu ? 2.0 : 4.0;
  const double D = (double)d->D, F = (double)d->F, V = (double)d->V, L = d->c.layers;
  double rows = 0.0, cached = 0.0; /* stepped sequences; their positions after the step */
  for (int b = 0; b < d->B; b++)
    if (tokens[b] >= 0) {
      rows += 1.0;
      cached += (double)d->len[b] + 1.0;
    }
  for (int p = 0; p < CODA_DECODE_PHASES; p++) bytes[p] = 0.0;
  bytes[PH_EMBED] = rows * D * w;
  /* Qwen3's q and k norms: hd weights each a layer */
  const double qkn = coda_family_of(d->c.family)->qk_norm ? 2.0 * (double)d->hd * nrm : 0.0;
  bytes[PH_QKV] = L * (D * nrm + qkn + (double)d->nq * D * w);
  bytes[PH_ATTN] = L * cached * 2.0 * (double)d->kvd * kv;
  bytes[PH_OUT] = L * (double)d->qd * D * w;
  bytes[PH_GATE_UP] = L * (D * nrm + 2.0 * F * D * w);
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
 * packed rotated rows (the cache holds the same bf16 keys and values). */
static coda_status prefill_attention(coda_decoder d, int64_t r0, int64_t n) {
  const coda_model_config *c = &d->c;
  coda_tensor qkv = coda_tensor_2d(d->d_pk + r0 * d->nq, CODA_BF16, n, d->nq);
  coda_tensor out = coda_tensor_2d(d->d_o + r0 * d->qd, CODA_BF16, n, d->qd);
  coda_tensor lse = coda_tensor_2d(d->d_lse + r0 * c->heads, CODA_F32, n, c->heads);
  return coda_attention_forward(d->ctx, &qkv, 1, (int)n, c->heads, c->kv_heads, (int)d->hd, &out,
                                &lse);
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
                                 d->max_len};
  coda_status s = mark(d, CODA_OK, -1);
  if (!s) s = mark(d, coda_decode_embed(ctx, d->d_x, d->d_emb, d_tok, M, D), PH_EMBED);
  if (M == 1 && nhead == 1 && d->row_step && !d->nseg) {
    /* one row: the layers and the head in one kernel (a profiled step
     * reads its phases from the kernel's barrier times) */
    coda_decode_row_step_job j = row_step_job(d, &rs);
    j.trace = d->tl ? d->d_trace : NULL;
    d->traced = d->tl != NULL;
    if (!s) s = coda_decode_row_step(ctx, &j);
    if (!s) s = coda_decode_gather_rows(ctx, d->d_logits, d->d_head, d_hseq, nhead, d->V);
    return mark(d, s, PH_HEAD);
  }
  const size_t lstride = (size_t)d->B * d->max_len * d->kvd;
  for (int li = 0; li < c->layers && !s; li++) {
    const layer_w *w = &d->l[li];
    uint16_t *kc = d->d_kc + lstride * li, *vc = d->d_vc + lstride * li;
    /* RMSNorm, qkv, RoPE and the cache append */
    coda_decode_linear_job q = {.M = M, .N = nq, .K = D, .w = w->d_wqkv, .xf = d->d_x,
                                .norm_w = w->d_wn_attn, .eps = c->norm_eps, .h = d->d_h,
                                .out = CODA_DECODE_OUT_ROPE, .y = d->d_qkv, .rows = &rs,
                                .q = d->d_q, .kc = kc, .vc = vc,
                                .packed = d->nseg ? d->d_pk : NULL, .inv_freq = d->d_inv_freq,
                                .q_norm = w->d_wq_norm, .k_norm = w->d_wk_norm};
    s = mark(d, coda_decode_linear(ctx, &q), PH_QKV);
    if (!s && !d->nseg)
      s = mark(d, coda_decode_attention(ctx, &rs, d->d_o, d->d_q, kc, vc, d->d_work, d->d_ticket,
                                     splits),
               PH_ATTN);
    for (int g = 0; g < d->nseg && !s; g++) /* fresh prompts: the training attention */
      s = prefill_attention(d, d->seg_start[g], d->seg_len[g]);
    if (d->nseg) s = mark(d, s, PH_ATTN);
    coda_decode_linear_job o = {.M = M, .N = D, .K = qd, .w = w->d_wo, .x = d->d_o,
                                .out = CODA_DECODE_OUT_F32, .y = d->d_x, .accumulate = 1};
    if (!s) s = mark(d, coda_decode_linear(ctx, &o), PH_OUT);
    /* RMSNorm, gate/up and SwiGLU */
    coda_decode_linear_job gu = {.M = M, .N = 2 * F, .K = D, .w = w->d_w13, .xf = d->d_x,
                                 .norm_w = w->d_wn_ffn, .eps = c->norm_eps, .h = d->d_h,
                                 .out = CODA_DECODE_OUT_SWIGLU, .y = d->d_z, .yb = d->d_y};
    if (!s) s = mark(d, coda_decode_linear(ctx, &gu), PH_GATE_UP);
    coda_decode_linear_job dn = {.M = M, .N = D, .K = F, .w = w->d_w2, .x = d->d_y,
                                 .out = CODA_DECODE_OUT_F32, .y = d->d_x, .accumulate = 1};
    if (!s) s = mark(d, coda_decode_linear(ctx, &dn), PH_DOWN);
  }
  coda_decode_linear_job hj = {.M = nhead, .N = d->V, .K = D, .w = d->d_wout, .xf = d->d_x,
                               .norm_w = d->d_norm, .norm_rows = d_rows, .eps = c->norm_eps,
                               .h = d->d_h, .out = CODA_DECODE_OUT_F32, .y = d->d_head};
  if (!s) s = coda_decode_linear(ctx, &hj);
  if (!s) s = coda_decode_gather_rows(ctx, d->d_logits, d->d_head, d_hseq, nhead, d->V);
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
  /* Split the cache so that small batches keep every SM busy (the shorter
   * the split, the shorter each warp's chain of dependent steps); prefill
   * rows give parallelism enough without. */
  int splits = 1;
  if (M * c->kv_heads < 512) {
    const int span = M * c->kv_heads <= 64 ? 16 : 64; /* 32 measured slower at batch 16 */
    splits = (maxpos + 1 + span - 1) / span;
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

coda_status decode_setup_device(coda_decoder d, const float *W, coda_model *m) {
  coda_status s = CODA_OK;
  const coda_model_config *c = &d->c;
  const int64_t D = d->D, F = d->F, V = d->V;
  size_t biggest = (size_t)V * D > (size_t)2 * F * D ? (size_t)V * D : (size_t)2 * F * D;
  if ((size_t)d->nq * D > biggest) biggest = (size_t)d->nq * D;
  uint16_t *tmp = malloc(biggest * 2);
  if (!tmp) return coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  char nm[96];
#define PW(name) (W + coda_model_find(m, name)->offset)
  d->d_emb = upload16(d, PW("tok_embeddings.weight"), (size_t)V * D, tmp, &s);
  d->d_wout = c->tied ? NULL : upload16(d, PW("output.weight"), (size_t)V * D, tmp, &s);
  d->d_norm = upload32(d, PW("norm.weight"), (size_t)D, &s);
  for (int i = 0; i < c->layers && !s; i++) {
    layer_w *w = &d->l[i];
    snprintf(nm, sizeof nm, "layers.%d.attention_norm.weight", i);
    w->d_wn_attn = upload32(d, PW(nm), (size_t)D, &s);
    snprintf(nm, sizeof nm, "layers.%d.ffn_norm.weight", i);
    w->d_wn_ffn = upload32(d, PW(nm), (size_t)D, &s);
    snprintf(nm, sizeof nm, "layers.%d.attention.wqkv.weight", i);
    w->d_wqkv = upload16(d, PW(nm), (size_t)d->nq * D, tmp, &s);
    snprintf(nm, sizeof nm, "layers.%d.attention.wo.weight", i);
    w->d_wo = upload16(d, PW(nm), (size_t)D * d->qd, tmp, &s);
    snprintf(nm, sizeof nm, "layers.%d.feed_forward.w13.weight", i);
    w->d_w13 = upload16(d, PW(nm), (size_t)2 * F * D, tmp, &s);
    snprintf(nm, sizeof nm, "layers.%d.feed_forward.w2.weight", i);
    w->d_w2 = upload16(d, PW(nm), (size_t)D * F, tmp, &s);
    if (coda_family_of(c->family)->qk_norm) { /* Qwen3: fp32, as the other norms */
      snprintf(nm, sizeof nm, "layers.%d.attention.q_norm.weight", i);
      w->d_wq_norm = upload32(d, PW(nm), (size_t)d->hd, &s);
      snprintf(nm, sizeof nm, "layers.%d.attention.k_norm.weight", i);
      w->d_wk_norm = upload32(d, PW(nm), (size_t)d->hd, &s);
    }
  }
#undef PW
  free(tmp);
  if (c->tied) d->d_wout = d->d_emb;
  const size_t C = (size_t)d->chunk, cache = (size_t)c->layers * d->B * d->max_len * d->kvd;
  d->d_kc = dalloc(d, cache * 2, &s);
  d->d_vc = dalloc(d, cache * 2, &s);
  d->d_x = dalloc(d, C * D * 4, &s);
  d->d_h = dalloc(d, C * D * 2, &s);
  d->d_qkv = dalloc(d, C * d->nq * 4, &s);
  d->d_q = dalloc(d, C * d->qd * 2, &s);
  d->d_o = dalloc(d, C * d->qd * 2, &s);
  d->d_z = dalloc(d, C * 2 * F * 4, &s);
  d->d_y = dalloc(d, C * F * 2, &s);
  d->d_head = dalloc(d, (size_t)d->B * V * 4, &s); /* a forward's head rows: one a sequence */
  d->d_logits = dalloc(d, (size_t)d->B * V * 4, &s);
  /* decode attention partials: (running max, sum, hd values) per row, q
   * head and split */
  size_t wrows = C > (size_t)d->B * MAX_SPLITS ? C : (size_t)d->B * MAX_SPLITS;
  d->d_work = dalloc(d, wrows * c->heads * (d->hd + 2) * 4, &s);
  d->d_inv_freq = dalloc(d, (size_t)d->hd / 2 * 8, &s);
  if (!s) s = coda_memcpy_h2d(d->ctx, d->d_inv_freq, d->inv_freq, (size_t)d->hd / 2 * 8);
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
  /* the one-kernel step, where the backend takes the shapes (it has no
   * QK-norm: Qwen3's one-row steps take the separate kernels) */
  const int qk_norm = coda_family_of(c->family)->qk_norm;
  const coda_decode_rows rs1 = {1, NULL, NULL, c->heads, c->kv_heads, (int)d->hd, d->max_len};
  coda_decode_row_step_job j1 = {.layers = c->layers, .D = D, .F = F, .V = V, .rows = &rs1,
                                 .max_splits = 1};
  if (!s && !qk_norm && coda_decode_row_step_ok(d->ctx, &j1, NULL, 0)) {
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
