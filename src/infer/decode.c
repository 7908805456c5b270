/* The decoder of include/coda_decode.h: prefill and cached decode steps of
 * the model families of model/family.c (the layout of model.c): Llama 3
 * and Qwen3 (its q/k norms), GPT-2 (LayerNorm, biases, GELU, learned
 * positions, no RoPE: host_gpt2_layer) and Gemma 3 ((1 + w) norms,
 * post-norms, GeGLU, sliding-window layers: host_gemma3_layer), on the
 * host or on a backend with decode kernels (api.h coda_decode_*,
 * decode_device.c); the plan prefill refuses every family but Llama.
 *
 * A forward takes a set of rows, each a token at a position of one
 * sequence: prefill rows are the prompts' tokens (chunked), step rows one
 * token per active sequence. Per layer every row's keys and values are
 * rotated and written into the cache first, then each row attends to the
 * cache of its sequence up to its own position: rows of one sequence in
 * one chunk see each other causally, and earlier chunks are in the cache.
 *
 * The host path repeats the arithmetic of the reference engine
 * (model_ref.c) operation for operation: fp32 dot products accumulated in
 * k order (the residual GEMMs start from the residual), sums of squares,
 * scores and softmax in double, the head in double, RoPE angles in double.
 * So its logits match the full recompute to fp32 rounding (in practice
 * bit for bit). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, stat */
#include "coda_decode.h"
#include "api/api.h"
#include "api/decode.h" /* the backend's decode kernels */
#include "infer/infer.h"
#include "base/rng.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"
#include "base/options.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ------------------------------------------------------ host forward */

/* y (M x N) (+)= x (M x K) · w (N x K)ᵀ: each output a float sum in k
 * order starting from 0 or from y (the reference's mm_abt). */
static void host_linear(int nt, float *y, const float *x, const float *w, int64_t M, int64_t N,
                        int64_t K, int acc) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t n = 0; n < N; n++) {
    const float *wr = w + n * K;
    for (int64_t m = 0; m < M; m++) {
      const float *xr = x + m * K;
      float s = acc ? y[m * N + n] : 0.0f;
      for (int64_t k = 0; k < K; k++) s += xr[k] * wr[k];
      y[m * N + n] = s;
    }
  }
}


static size_t cache_off(const coda_decoder d, int layer, int b, int pos) {
  return (((size_t)layer * d->B + (size_t)b) * d->max_len + (size_t)pos) * (size_t)d->kvd;
}

/* Rows' K and V into the cache of layer li (every row's before any
 * attention), then each row's causal attention over its sequence's cache
 * into d->o. */
static void host_attend(coda_decoder d, int li, const int32_t *seq, const int32_t *pos, int64_t M) {
  const coda_model_config *c = &d->c;
  const int nt = d->nt, H = c->heads, Hk = c->kv_heads, hd = (int)d->hd, grp = H / Hk;
  const int64_t nq = d->nq, qd = d->qd;
  /* the score scale (Gemma 3's), and the layer's window (Gemma 3's local
   * layers, every layer of a Llama/Mistral model with a sliding_window:
   * the row at position t sees the cache from t - window + 1 on; the
   * whole cache is kept, so a window is a start and no eviction) */
  const double scale = coda_model_attn_scale(c);
  const int window = coda_model_layer_window(c, li);
  for (int64_t i = 0; i < M; i++) {
    const float *row = d->qkv + i * nq;
    size_t off = cache_off(d, li, seq[i], pos[i]);
    memcpy(d->kc + off, row + qd, (size_t)d->kvd * 4);
    memcpy(d->vc + off, row + qd + d->kvd, (size_t)d->kvd * 4);
  }
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt)
  for (int64_t i = 0; i < M; i++)
    for (int h = 0; h < H; h++) {
      const int kh = h / grp, n = pos[i] + 1, s0 = coda_ref_window_start(pos[i], window);
      float *p = d->P + ((size_t)omp_get_thread_num()) * (size_t)d->max_len;
      const float *q = d->qkv + i * nq + (int64_t)h * hd;
      const float *kb = d->kc + cache_off(d, li, seq[i], 0) + (size_t)kh * hd;
      const float *vb = d->vc + cache_off(d, li, seq[i], 0) + (size_t)kh * hd;
      double mx = -INFINITY;
      for (int s = s0; s < n; s++) {
        const float *k = kb + (size_t)s * d->kvd;
        double dd = 0.0;
        for (int e = 0; e < hd; e++) dd += (double)q[e] * k[e];
        dd *= scale;
        p[s] = (float)dd;
        if (dd > mx) mx = dd;
      }
      double sum = 0.0;
      for (int s = s0; s < n; s++) sum += exp((double)p[s] - mx);
      for (int s = s0; s < n; s++) p[s] = (float)(exp((double)p[s] - mx) / sum);
      float *orow = d->o + i * qd + (int64_t)h * hd;
      for (int e = 0; e < hd; e++) orow[e] = 0.0f;
      for (int s = s0; s < n; s++) {
        const float *v = vb + (size_t)s * d->kvd;
        for (int e = 0; e < hd; e++) orow[e] += p[s] * v[e];
      }
    }
}

/* GPT-2's layer li on the rows, as model_ref_gpt2.c computes it: each
 * linear starts from its bias (the residual ones from x + bias) and adds
 * the products in k order. */
static void host_gpt2_layer(coda_decoder d, int li, const int32_t *seq, const int32_t *pos,
                            int64_t M) {
  const coda_model_config *c = &d->c;
  const layer_w *w = &d->l[li];
  const int nt = d->nt;
  const int64_t D = d->D, F = d->F, nq = d->nq, qd = d->qd;
  coda_ref_layernorm(nt, d->x, w->wn_attn, w->bn_attn, d->h, NULL, NULL, M, D, c->norm_eps);
  for (int64_t i = 0; i < M; i++) memcpy(d->qkv + i * nq, w->bqkv, (size_t)nq * 4);
  host_linear(nt, d->qkv, d->h, w->wqkv, M, nq, D, 1);
  host_attend(d, li, seq, pos, M);
  for (int64_t i = 0; i < M * D; i++) d->x[i] += w->bo[i % D];
  host_linear(nt, d->x, d->o, w->wo, M, D, qd, 1);
  coda_ref_layernorm(nt, d->x, w->wn_ffn, w->bn_ffn, d->h, NULL, NULL, M, D, c->norm_eps);
  for (int64_t i = 0; i < M; i++) memcpy(d->z + i * F, w->bfc, (size_t)F * 4);
  host_linear(nt, d->z, d->h, w->wfc, M, F, D, 1);
  for (int64_t i = 0; i < M * F; i++) d->y[i] = coda_ref_gelu(d->z[i]);
  for (int64_t i = 0; i < M * D; i++) d->x[i] += w->bproj[i % D];
  host_linear(nt, d->x, d->y, w->wproj, M, D, F, 1);
}

/* RoPE on the Q and K heads of each row at its position, frequencies f. */
static void host_rope(coda_decoder d, const double *f, const int32_t *pos, int64_t M) {
  const int nqk = d->c.heads + d->c.kv_heads, hd = (int)d->hd;
  for (int64_t i = 0; i < M; i++) {
    float *row = d->qkv + i * d->nq;
    for (int j = 0; j < hd / 2; j++) {
      double ang = (double)pos[i] * f[j];
      double cs = cos(ang), sn = sin(ang);
      for (int hh = 0; hh < nqk; hh++) {
        float *p = row + (int64_t)hh * hd + 2 * j;
        double a = p[0], b = p[1];
        p[0] = (float)(a * cs - b * sn);
        p[1] = (float)(a * sn + b * cs);
      }
    }
  }
}

/* Gemma 3's layer li on the rows, as model_ref_gemma3.c computes it: the
 * (1 + w) norms, QK-norm, the layer's RoPE base and window, and each
 * sublayer's output normalized (in d->h) before its residual add. */
static void host_gemma3_layer(coda_decoder d, int li, const int32_t *seq, const int32_t *pos,
                              int64_t M) {
  const coda_model_config *c = &d->c;
  const layer_w *w = &d->l[li];
  const int nt = d->nt, H = c->heads, Hk = c->kv_heads, hd = (int)d->hd;
  const int64_t D = d->D, F = d->F, nq = d->nq, qd = d->qd;
  const double eps = c->norm_eps;
  coda_ref_rmsnorm1p(nt, d->x, w->wn_attn, d->h, NULL, M, D, eps);
  host_linear(nt, d->qkv, d->h, w->wqkv, M, nq, D, 0);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < M; i++)
    for (int hh = 0; hh < H + Hk; hh++) {
      float *hp = d->qkv + i * nq + (int64_t)hh * hd;
      coda_ref_rmsnorm1p(1, hp, hh < H ? w->wq_norm : w->wk_norm, hp, NULL, 1, hd, eps);
    }
  host_rope(d, coda_model_layer_is_local(c, li) ? d->inv_freq_local : d->inv_freq, pos, M);
  host_attend(d, li, seq, pos, M);
  host_linear(nt, d->h, d->o, w->wo, M, D, qd, 0);
  coda_ref_rmsnorm1p(nt, d->h, w->wpost_attn, d->h, NULL, M, D, eps);
  for (int64_t i = 0; i < M * D; i++) d->x[i] = d->x[i] + d->h[i];
  coda_ref_rmsnorm1p(nt, d->x, w->wn_ffn, d->h, NULL, M, D, eps);
  host_linear(nt, d->z, d->h, w->w13, M, 2 * F, D, 0);
  for (int64_t i = 0; i < M * F; i++) d->y[i] = coda_ref_gelu(d->z[2 * i]) * d->z[2 * i + 1];
  host_linear(nt, d->h, d->y, w->w2, M, D, F, 0);
  coda_ref_rmsnorm1p(nt, d->h, w->wpost_ffn, d->h, NULL, M, D, eps);
  for (int64_t i = 0; i < M * D; i++) d->x[i] = d->x[i] + d->h[i];
}

static coda_status host_forward(coda_decoder d, const int32_t *tok, const int32_t *seq,
                                const int32_t *pos, int64_t M, const int32_t *head_rows,
                                const int32_t *head_seq, int64_t nhead) {
  const coda_model_config *c = &d->c;
  const int nt = d->nt, H = c->heads, Hk = c->kv_heads, hd = (int)d->hd;
  const int64_t D = d->D, F = d->F, nq = d->nq, qd = d->qd;
  for (int64_t i = 0; i < M; i++) memcpy(d->x + i * D, d->emb + (int64_t)tok[i] * D, (size_t)D * 4);
  if (d->gemma3) { /* the embedding times sqrt(dim) in fp32 */
    const float esc = coda_model_embed_scale(c);
    for (int64_t i = 0; i < M * D; i++) d->x[i] *= esc;
  }
  if (d->pos_emb) /* GPT-2's learned positions */
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < D; k++) d->x[i * D + k] += d->pos_emb[(int64_t)pos[i] * D + k];
  for (int li = 0; li < c->layers; li++) {
    if (d->pos_emb || d->gemma3) {
      if (d->pos_emb) host_gpt2_layer(d, li, seq, pos, M);
      else host_gemma3_layer(d, li, seq, pos, M);
      continue;
    }
    const layer_w *w = &d->l[li];
    coda_ref_rmsnorm(nt, d->x, w->wn_attn, d->h, NULL, M, D, c->norm_eps);
    host_linear(nt, d->qkv, d->h, w->wqkv, M, nq, D, 0);
    if (w->wq_norm) /* Qwen3: each q and k head normalized before RoPE, in place */
#pragma omp parallel for schedule(static) num_threads(nt)
      for (int64_t i = 0; i < M; i++)
        for (int hh = 0; hh < H + Hk; hh++) {
          float *hp = d->qkv + i * nq + (int64_t)hh * hd;
          coda_ref_rmsnorm(1, hp, hh < H ? w->wq_norm : w->wk_norm, hp, NULL, 1, hd, c->norm_eps);
        }
    /* RoPE (then host_attend: K and V into the cache, every row's before
     * any attention) */
    host_rope(d, d->inv_freq, pos, M);
    host_attend(d, li, seq, pos, M);
    host_linear(nt, d->x, d->o, w->wo, M, D, qd, 1);
    coda_ref_rmsnorm(nt, d->x, w->wn_ffn, d->h, NULL, M, D, c->norm_eps);
    host_linear(nt, d->z, d->h, w->w13, M, 2 * F, D, 0);
    for (int64_t i = 0; i < M * F; i++) {
      float g = d->z[2 * i], u = d->z[2 * i + 1];
      d->y[i] = (float)((double)g / (1.0 + exp(-(double)g)) * u);
    }
    host_linear(nt, d->x, d->y, w->w2, M, D, F, 1);
  }
  decode_host_head(d, head_rows, head_seq, nhead);
  return CODA_OK;
}

void decode_host_head(coda_decoder d, const int32_t *head_rows, const int32_t *head_seq,
                      int64_t nhead) {
  const int64_t D = d->D;
  const int nt = d->nt;
  for (int64_t r = 0; r < nhead; r++) {
    if (d->norm_b)
      coda_ref_layernorm(1, d->x + (int64_t)head_rows[r] * D, d->norm, d->norm_b, d->h, NULL,
                         NULL, 1, D, d->c.norm_eps);
    else if (d->gemma3)
      coda_ref_rmsnorm1p(1, d->x + (int64_t)head_rows[r] * D, d->norm, d->h, NULL, 1, D,
                         d->c.norm_eps);
    else
      coda_ref_rmsnorm(1, d->x + (int64_t)head_rows[r] * D, d->norm, d->h, NULL, 1, D,
                       d->c.norm_eps);
    float *out = d->logits + (int64_t)head_seq[r] * d->V;
    const float *hh = d->h;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t v = 0; v < d->V; v++) {
      double s = 0.0;
      for (int64_t k = 0; k < D; k++) s += (double)hh[k] * d->wout[v * D + k];
      out[v] = coda_ref_softcap((float)s, d->c.logit_softcap); /* Gemma 3's cap (0: none) */
    }
  }
}

static coda_status forward(coda_decoder d, const int32_t *tok, const int32_t *seq,
                           const int32_t *pos, int64_t M, const int32_t *head_rows,
                           const int32_t *head_seq, int64_t nhead) {
  if (M == 0) return CODA_OK;
  /* a chunk of fresh prompts through the block plans (decode_plans.c) */
  if (!d->in_step && decode_plans_take(d, seq, pos, M))
    return decode_plans_forward(d, tok, seq, M, head_rows, head_seq, nhead);
  return d->gpu ? decode_dev_forward(d, tok, seq, pos, M, head_rows, head_seq, nhead)
                : host_forward(d, tok, seq, pos, M, head_rows, head_seq, nhead);
}

/* ----------------------------------------------------------- create */

void coda_decoder_destroy(coda_decoder d) {
  if (!d) return;
  coda_context ctx = d->ctx;
  decode_plans_free(d);
  if (d->l)
    for (int i = 0; i < d->c.layers; i++) {
      layer_w *w = &d->l[i];
      coda_free(ctx, w->d_wn_attn); coda_free(ctx, w->d_wn_ffn); coda_free(ctx, w->d_wqkv);
      coda_free(ctx, w->d_wo); coda_free(ctx, w->d_w13); coda_free(ctx, w->d_w2);
      coda_free(ctx, w->d_wq_norm); coda_free(ctx, w->d_wk_norm);
      coda_free(ctx, w->d_wpost_attn); coda_free(ctx, w->d_wpost_ffn);
      coda_free(ctx, w->d_bn_attn); coda_free(ctx, w->d_bqkv); coda_free(ctx, w->d_bo);
      coda_free(ctx, w->d_bn_ffn); coda_free(ctx, w->d_bfc); coda_free(ctx, w->d_bproj);
    }
  if (d->d_wout == d->d_emb) d->d_wout = NULL; /* tied: one buffer */
  void *dev[] = {d->d_emb, d->d_wout, d->d_kc, d->d_vc, d->d_h, d->d_q, d->d_o, d->d_y,
                 d->d_norm, d->d_x, d->d_qkv, d->d_z, d->d_head, d->d_logits, d->d_work,
                 d->d_ticket, d->d_inv_freq, d->d_inv_freq_local, d->d_pos_emb, d->d_norm_b,
                 d->d_meta, d->d_sample, d->d_spos, d->d_pk, d->d_lse,
                 d->d_ltab, d->d_sync};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) coda_free(ctx, dev[i]);
  void *host[] = {d->len, d->has_logits, d->inv_freq, d->inv_freq_local, d->l, d->W, d->kc, d->vc, d->logits,
                  d->x, d->h, d->qkv, d->o, d->z, d->y, d->P, d->h_tok, d->h_seq, d->h_pos,
                  d->h_rows, d->h_hseq, d->h_meta, d->seg_start, d->seg_len};
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
  for (int i = 0; i < d->ngraphs; i++) coda_graph_destroy(d->graphs[i].g);
  if (d->own_tok) coda_tokenizer_destroy(d->tok);
  free(d);
}

static coda_status check_weights(coda_context ctx, coda_model *m) {
  const float *W = coda_model_weights(m);
  for (int i = 0; i < coda_model_num_params(m); i++) {
    const coda_param *p = coda_model_param(m, i);
    for (size_t k = 0; k < p->size; k++)
      if (!isfinite(W[p->offset + k]))
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                         "the model's weights are not finite (%s[%zu] is %g): the checkpoint is "
                         "damaged or diverged", p->name, k, (double)W[p->offset + k]);
  }
  return CODA_OK;
}

coda_decoder_options coda_decoder_default_options(void) {
  coda_decoder_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.batch = 1;
  return o;
}

/* coda_decoder_options as its first layout had it (before prefill) and
 * its second (before chunk_rows). */
typedef struct {
  size_t struct_size;
  int batch, max_len, no_graphs;
  const char *tokenizer;
} decoder_options_layout1;
typedef struct {
  size_t struct_size;
  int batch, max_len, no_graphs;
  const char *tokenizer;
  coda_prefill_path prefill;
} decoder_options_layout2;
_Static_assert(offsetof(decoder_options_layout1, tokenizer) ==
                   offsetof(coda_decoder_options, tokenizer),
               "layout 1 of coda_decoder_options is a prefix of the current one");
_Static_assert(offsetof(decoder_options_layout2, prefill) ==
                   offsetof(coda_decoder_options, prefill),
               "layout 2 of coda_decoder_options is a prefix of the current one");
_Static_assert(sizeof(decoder_options_layout1) < sizeof(decoder_options_layout2) &&
                   sizeof(decoder_options_layout2) < sizeof(coda_decoder_options),
               "each layout of coda_decoder_options is larger than the one before");

/* The caller's options (NULL stays NULL) over the defaults. */
static coda_status take_options(coda_context ctx, const coda_decoder_options *in,
                                coda_decoder_options *out, const coda_decoder_options **use) {
  static const coda_options_layout layouts[] = {
      CODA_OPTIONS_LAYOUT_OLD(decoder_options_layout1, tokenizer),
      CODA_OPTIONS_LAYOUT_OLD(decoder_options_layout2, prefill),
      CODA_OPTIONS_LAYOUT(coda_decoder_options)};
  *out = coda_decoder_default_options();
  *use = in ? out : NULL;
  if (!in) return CODA_OK;
  coda_status s = coda_options_take(ctx, "coda_decoder_options", in, out, layouts, 3);
  if (!s && (out->prefill < CODA_PREFILL_AUTO || out->prefill > CODA_PREFILL_PLANS))
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_options.prefill is %d, not "
                  "CODA_PREFILL_AUTO (0), _DIRECT (1) or _PLANS (2)", (int)out->prefill);
  if (!s && (out->chunk_rows < 0 || out->chunk_rows > (1 << 20)))
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_options.chunk_rows is %lld, not "
                  "0 (by device) or 1 .. 1048576", (long long)out->chunk_rows);
  return s;
}

/* The RoPE frequency tables: the model's (scaled as the training engines
 * scale them) and Gemma 3's local layers' (coda_model_layer_rope_theta);
 * -1: out of memory. */
static int rope_tables(coda_decoder d) {
  const coda_model_config *c = &d->c;
  for (int j = 0; j < d->hd / 2; j++)
    d->inv_freq[j] = coda_rope_inv_freq(c->rope_theta, d->hd, &c->rope, j);
  d->gemma3 = coda_family_of(c->family)->block == CODA_BLOCK_GEMMA3;
  if (!d->gemma3) return 0;
  d->inv_freq_local = malloc((size_t)d->hd / 2 * sizeof *d->inv_freq_local);
  if (!d->inv_freq_local) return -1;
  const double lt = c->rope_local_theta > 0.0 ? c->rope_local_theta : c->rope_theta;
  for (int j = 0; j < d->hd / 2; j++)
    d->inv_freq_local[j] = coda_rope_inv_freq(lt, d->hd, &c->rope, j);
  return 0;
}

coda_status coda_decoder_create(coda_context ctx, coda_model *m, const coda_decoder_options *opts,
                                coda_decoder *out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_decoder_options taken;
  const coda_decoder_options *o;
  if (take_options(ctx, opts, &taken, &o)) return CODA_ERR_INVALID_ARGUMENT;
  if (!m || !o || !out)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_create: a NULL argument");
  *out = NULL;
  const coda_model_config *c = coda_model_cfg(m);
  if (o->batch < 1 || o->batch > 4096 || o->max_len < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "decoder: batch %d (1 .. 4096) or maximum "
                     "length %d (>= 0) out of range", o->batch, o->max_len);
  coda_status s = check_weights(ctx, m);
  if (s) return s;
  coda_decoder d = calloc(1, sizeof *d);
  if (!d) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  d->ctx = ctx;
  d->c = *c;
  d->B = o->batch;
  d->max_len = o->max_len == 0 || o->max_len > c->seq ? c->seq : o->max_len;
  d->graphs_off = o->no_graphs;
  d->gpu = coda_decode_on_device(ctx);
  /* the plan prefill is Llama's: another family is refused by name there
   * (every family prefills directly, on the host and on a device) */
  if (c->family != CODA_FAMILY_LLAMA && o->prefill == CODA_PREFILL_PLANS) {
    free(d);
    const char *fam = coda_model_family_name(c->family);
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decoder: the plan prefill runs the llama "
                     "family only (the forward-only block plans have no form for family %s); it "
                     "prefills directly (CODA_PREFILL_DIRECT or CODA_PREFILL_AUTO)", fam);
  }
  const int hdim = coda_model_head_dim(c);
  if (d->gpu && (hdim % 32 || hdim > 256 || ((hdim / 32) & (hdim / 32 - 1)))) {
    free(d);
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decoder: head dim %d on the GPU must be 32, "
                     "64, 128 or 256", hdim);
  }
  d->nt = ctx->opts.num_threads > 0 ? ctx->opts.num_threads : omp_get_max_threads();
  d->D = c->dim; d->F = c->ffn; d->V = c->vocab; d->hd = hdim;
  d->qd = (int64_t)c->heads * d->hd;
  d->kvd = (int64_t)c->kv_heads * d->hd;
  d->nq = d->qd + 2 * d->kvd;
  /* A fresh prompt within one chunk takes the training attention (or the
   * plans); the chunks after its first attend to the cache through the
   * decode kernel, one row at a time. So the GPU's chunk holds a whole
   * prompt of max_len where that stays within DEVICE_CHUNK_MAX rows (about
   * 130 KB a row at 1.1 B, 240 KB at 8B). */
  int64_t rows = (int64_t)d->B * d->max_len, lim = HOST_CHUNK;
  if (d->gpu) lim = d->max_len < DEVICE_CHUNK ? DEVICE_CHUNK
                    : d->max_len > DEVICE_CHUNK_MAX ? DEVICE_CHUNK_MAX : d->max_len;
  if (o->chunk_rows > 0) lim = o->chunk_rows;
  if (rows < d->B) rows = d->B;
  d->chunk = (int)(rows < lim ? rows : lim);
  if (d->chunk < d->B) d->chunk = d->B; /* one step's rows fit */
  d->len = calloc((size_t)d->B, sizeof *d->len);
  d->has_logits = calloc((size_t)d->B, sizeof *d->has_logits);
  d->inv_freq = malloc((size_t)d->hd / 2 * sizeof *d->inv_freq);
  d->l = calloc((size_t)c->layers, sizeof *d->l);
  const size_t C = (size_t)d->chunk;
  d->h_tok = malloc(C * 4); d->h_seq = malloc(C * 4); d->h_pos = malloc(C * 4);
  d->h_rows = malloc(C * 4); d->h_hseq = malloc(C * 4); d->h_meta = malloc(C * 5 * 4);
  d->seg_start = malloc(C * 4); d->seg_len = malloc(C * 4);
  if (!d->len || !d->has_logits || !d->inv_freq || !d->l || !d->h_tok || !d->h_seq ||
      !d->h_pos || !d->h_rows || !d->h_hseq || !d->h_meta || !d->seg_start || !d->seg_len) {
    coda_decoder_destroy(d);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  /* the scaled frequencies (linear, llama3) the training engines use */
  if (rope_tables(d)) {
    coda_decoder_destroy(d);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const float *W = coda_model_weights(m);
  if (d->gpu) {
    s = decode_setup_device(d, W, m);
  } else {
    const size_t cache = (size_t)c->layers * d->B * d->max_len * d->kvd;
    d->W = malloc(coda_model_size(m) * sizeof(float));
    d->kc = malloc(cache * sizeof(float));
    d->vc = malloc(cache * sizeof(float));
    d->logits = calloc((size_t)d->B * d->V, sizeof(float));
    d->x = malloc(C * d->D * 4); d->h = malloc(C * d->D * 4);
    d->qkv = malloc(C * d->nq * 4); d->o = malloc(C * d->qd * 4);
    d->z = malloc(C * 2 * d->F * 4); d->y = malloc(C * d->F * 4);
    d->P = malloc((size_t)d->nt * d->max_len * 4);
    if (!d->W || !d->kc || !d->vc || !d->logits || !d->x || !d->h || !d->qkv || !d->o || !d->z ||
        !d->y || !d->P) {
      coda_decoder_destroy(d);
      return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "decoder: cannot allocate the weights and a "
                       "cache of %d x %d positions", o->batch, d->max_len);
    }
    memcpy(d->W, W, coda_model_size(m) * sizeof(float));
    char nm[96];
#define PW(name) (d->W + coda_model_find(m, name)->offset)
    d->emb = PW("tok_embeddings.weight");
    d->norm = PW("norm.weight");
    d->wout = c->tied ? d->emb : PW("output.weight");
    const int gpt2 = coda_family_of(c->family)->block == CODA_BLOCK_GPT2;
    if (gpt2) {
      d->pos_emb = PW("pos_embeddings.weight");
      d->norm_b = PW("norm.bias");
    }
    for (int i = 0; i < c->layers && gpt2; i++) {
      layer_w *w = &d->l[i];
#define G(field, name) snprintf(nm, sizeof nm, "layers.%d." name, i); w->field = PW(nm)
      G(wn_attn, "attention_norm.weight"); G(bn_attn, "attention_norm.bias");
      G(wqkv, "attention.wqkv.weight"); G(bqkv, "attention.wqkv.bias");
      G(wo, "attention.wo.weight"); G(bo, "attention.wo.bias");
      G(wn_ffn, "ffn_norm.weight"); G(bn_ffn, "ffn_norm.bias");
      G(wfc, "feed_forward.wfc.weight"); G(bfc, "feed_forward.wfc.bias");
      G(wproj, "feed_forward.wproj.weight"); G(bproj, "feed_forward.wproj.bias");
#undef G
    }
    for (int i = 0; i < c->layers && !gpt2; i++) {
      layer_w *w = &d->l[i];
      snprintf(nm, sizeof nm, "layers.%d.attention_norm.weight", i); w->wn_attn = PW(nm);
      snprintf(nm, sizeof nm, "layers.%d.attention.wqkv.weight", i); w->wqkv = PW(nm);
      snprintf(nm, sizeof nm, "layers.%d.attention.wo.weight", i); w->wo = PW(nm);
      snprintf(nm, sizeof nm, "layers.%d.ffn_norm.weight", i); w->wn_ffn = PW(nm);
      snprintf(nm, sizeof nm, "layers.%d.feed_forward.w13.weight", i); w->w13 = PW(nm);
      snprintf(nm, sizeof nm, "layers.%d.feed_forward.w2.weight", i); w->w2 = PW(nm);
      if (coda_family_of(c->family)->qk_norm) {
        snprintf(nm, sizeof nm, "layers.%d.attention.q_norm.weight", i); w->wq_norm = PW(nm);
        snprintf(nm, sizeof nm, "layers.%d.attention.k_norm.weight", i); w->wk_norm = PW(nm);
      }
      if (d->gemma3) {
        snprintf(nm, sizeof nm, "layers.%d.attention.post_norm.weight", i); w->wpost_attn = PW(nm);
        snprintf(nm, sizeof nm, "layers.%d.feed_forward.post_norm.weight", i);
        w->wpost_ffn = PW(nm);
      }
    }
#undef PW
  }
  if (!s) s = decode_plans_setup(d, o->prefill, W, m);
  if (s) {
    coda_decoder_destroy(d);
    return s;
  }
  *out = d;
  return CODA_OK;
}

/* Random weights for benchmarks: uniform with the initialization's
 * standard deviations (0.02, output projections 0.02/sqrt(2L), norms 1),
 * filled in parallel from per-block seeds (a 1 B model in seconds, where
 * coda_model_init's normal draws take minutes). */
static void fill_random(coda_model *m, uint64_t seed, int nt) {
  float *W = coda_model_weights(m);
  const double out_std = 0.02 / sqrt(2.0 * coda_model_cfg(m)->layers);
  for (int i = 0; i < coda_model_num_params(m); i++) {
    const coda_param *p = coda_model_param(m, i);
    float *w = W + p->offset;
    const double sd = p->init == CODA_INIT_ONES || p->init == CODA_INIT_ZEROS ? 0.0
                      : p->init == CODA_INIT_NORMAL_OUT ? out_std : 0.02;
    const double a = sd * sqrt(3.0);
    const int64_t blocks = (int64_t)((p->size + 65535) / 65536);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t bl = 0; bl < blocks; bl++) {
      uint64_t st = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)) ^ (0xd1b54a32d192ed03ull * (uint64_t)(bl + 1));
      const size_t lo = (size_t)bl * 65536, hi = lo + 65536 < p->size ? lo + 65536 : p->size;
      for (size_t k = lo; k < hi; k++)
        w[k] = p->init == CODA_INIT_ONES ? 1.0f : (float)(a * (2.0 * coda_rng_uniform(&st) - 1.0));
    }
  }
}

coda_status coda_decoder_create_random(coda_context ctx, const coda_model_config *cfg,
                                       uint64_t seed, const coda_decoder_options *opts,
                                       coda_decoder *out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_decoder_options taken;
  const coda_decoder_options *o;
  if (take_options(ctx, opts, &taken, &o)) return CODA_ERR_INVALID_ARGUMENT;
  if (!cfg || !out)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_create_random: a NULL argument");
  coda_model *m = NULL;
  coda_status s = coda_model_create(ctx, cfg, CODA_ENGINE_REFERENCE, &m);
  if (s) return s;
  fill_random(m, seed, ctx->opts.num_threads > 0 ? ctx->opts.num_threads : omp_get_max_threads());
  s = coda_decoder_create(ctx, m, o, out);
  coda_model_destroy(m);
  return s;
}

static char *path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

coda_status coda_decoder_load(coda_context ctx, const char *path, const coda_decoder_options *opts,
                              coda_decoder *out) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_decoder_options taken;
  const coda_decoder_options *o;
  if (take_options(ctx, opts, &taken, &o)) return CODA_ERR_INVALID_ARGUMENT;
  if (!path || !o || !out)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_load: a NULL argument");
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: no such checkpoint file or model folder", path);
  coda_model *m = NULL;
  coda_status s;
  char *tokpath = NULL;
  if (S_ISDIR(st.st_mode)) {
    char *cfg = path_join(path, "config.json");
    const int hf = cfg && is_file(cfg);
    free(cfg);
    if (!hf)
      return coda_fail(ctx, CODA_ERR_IO, "%s: is a directory without config.json (a Hugging Face "
                       "model folder holds config.json and model.safetensors)", path);
    s = coda_hf_import(ctx, path, CODA_ENGINE_REFERENCE, &m);
  } else {
    coda_model_config cfg;
    s = coda_checkpoint_config(ctx, path, &cfg);
    if (!s) s = coda_model_create(ctx, &cfg, CODA_ENGINE_REFERENCE, &m);
    if (!s) s = coda_checkpoint_load(ctx, path, m, NULL, NULL, NULL);
  }
  if (!s && o->tokenizer) {
    tokpath = strdup(o->tokenizer);
    if (!tokpath) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  } else if (!s) {
    s = coda_checkpoint_tokenizer(ctx, path, &tokpath, NULL);
  }
  coda_tokenizer tok = NULL;
  if (!s && tokpath) {
    s = coda_tokenizer_load(ctx, tokpath, &tok);
    if (!s && coda_tokenizer_vocab_size(tok) > (size_t)coda_model_cfg(m)->vocab)
      s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s has %zu tokens, more than the model's "
                    "vocab %d", tokpath, coda_tokenizer_vocab_size(tok), coda_model_cfg(m)->vocab);
  }
  if (!s && !tok && coda_model_cfg(m)->vocab < CODA_TOK_BYTES)
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: model vocab %d cannot hold byte tokens and "
                  "there is no tokenizer.json beside it", path, coda_model_cfg(m)->vocab);
  coda_decoder d = NULL;
  if (!s) s = coda_decoder_create(ctx, m, o, &d);
  coda_model_destroy(m);
  free(tokpath);
  if (s) {
    coda_tokenizer_destroy(tok);
    return s;
  }
  d->tok = tok;
  d->own_tok = tok != NULL;
  *out = d;
  return CODA_OK;
}

const coda_model_config *coda_decoder_config(const coda_decoder d) { return d ? &d->c : NULL; }
int coda_decoder_batch(const coda_decoder d) { return d ? d->B : 0; }
int coda_decoder_graphs(const coda_decoder d) {
  int n = 0;
  for (int i = 0; d && i < d->ngraphs; i++) n += d->graphs[i].g != NULL;
  return n;
}
int coda_decoder_max_len(const coda_decoder d) { return d ? d->max_len : 0; }
int coda_decoder_length(const coda_decoder d, int b) {
  return d && b >= 0 && b < d->B ? d->len[b] : 0;
}
coda_tokenizer coda_decoder_tokenizer(const coda_decoder d) { return d ? d->tok : NULL; }
void coda_decoder_set_tokenizer(coda_decoder d, coda_tokenizer tok) {
  if (!d) return;
  if (d->own_tok) coda_tokenizer_destroy(d->tok);
  d->tok = tok;
  d->own_tok = 0;
}

/* --------------------------------------------------- prefill and step */

coda_status coda_decoder_prefill(coda_decoder d, const int32_t *const *prompts, const int *lens) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  coda_context ctx = d->ctx;
  if (!prompts || !lens)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_prefill: a NULL argument");
  for (int b = 0; b < d->B; b++) {
    if (!prompts[b]) continue;
    if (lens[b] < 1 || lens[b] > d->max_len)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "prompt %d has %d tokens: need 1 .. %d "
                       "(the decoder's maximum length)", b, lens[b], d->max_len);
    for (int i = 0; i < lens[b]; i++)
      if (prompts[b][i] < 0 || prompts[b][i] >= d->c.vocab)
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "prompt %d: token %d is %d, outside the "
                         "vocab of %d", b, i, prompts[b][i], d->c.vocab);
  }
  coda_status s = CODA_OK;
  int64_t M = 0, nh = 0;
  for (int b = 0; b < d->B && !s; b++) {
    if (!prompts[b]) continue;
    d->len[b] = 0;
    d->has_logits[b] = 0;
    /* the plans take whole fresh prompts: one that fits a chunk starts a
     * new chunk rather than being cut (its rest would continue a cache, on
     * the direct path, and take that chunk's other prompts with it) */
    if (d->use_plans && M > 0 && M + lens[b] > d->chunk && lens[b] <= d->chunk) {
      s = forward(d, d->h_tok, d->h_seq, d->h_pos, M, d->h_rows, d->h_hseq, nh);
      M = nh = 0;
    }
    for (int i = 0; i < lens[b] && !s; i++) {
      d->h_tok[M] = prompts[b][i];
      d->h_seq[M] = b;
      d->h_pos[M] = i;
      if (i == lens[b] - 1) {
        d->h_rows[nh] = (int32_t)M;
        d->h_hseq[nh++] = b;
      }
      if (++M == d->chunk) {
        s = forward(d, d->h_tok, d->h_seq, d->h_pos, M, d->h_rows, d->h_hseq, nh);
        M = nh = 0;
      }
    }
  }
  if (!s) s = forward(d, d->h_tok, d->h_seq, d->h_pos, M, d->h_rows, d->h_hseq, nh);
  for (int b = 0; b < d->B; b++) {
    if (!prompts[b]) continue;
    d->len[b] = s ? 0 : lens[b];
    d->has_logits[b] = !s;
  }
  return s;
}

coda_status coda_decoder_step(coda_decoder d, const int32_t *tokens) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  coda_context ctx = d->ctx;
  if (!tokens) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_step: tokens is NULL");
  int64_t M = 0;
  for (int b = 0; b < d->B; b++) {
    if (tokens[b] < 0) continue;
    if (tokens[b] >= d->c.vocab)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "step: token %d of sequence %d is outside "
                       "the vocab of %d", tokens[b], b, d->c.vocab);
    if (!d->has_logits[b])
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "step: sequence %d was not prefilled", b);
    if (d->len[b] >= d->max_len)
      return coda_fail(ctx, CODA_ERR_OVERFLOW, "step: the cache of sequence %d is full (%d "
                       "tokens)", b, d->max_len);
    d->h_tok[M] = tokens[b];
    d->h_seq[M] = b;
    d->h_pos[M] = d->len[b];
    d->h_rows[M] = (int32_t)M;
    d->h_hseq[M] = b;
    M++;
  }
  d->in_step = 1;
  coda_status s = forward(d, d->h_tok, d->h_seq, d->h_pos, M, d->h_rows, d->h_hseq, M);
  d->in_step = 0;
  if (s) return s;
  for (int b = 0; b < d->B; b++)
    if (tokens[b] >= 0) d->len[b]++;
  return CODA_OK;
}

coda_status coda_decoder_logits(coda_decoder d, float *out) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  if (!out) return coda_fail(d->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_logits: out is NULL");
  const size_t n = (size_t)d->B * d->V;
  coda_status s = d->gpu ? coda_memcpy_d2h(d->ctx, out, d->d_logits, n * 4) : CODA_OK;
  if (!d->gpu) memcpy(out, d->logits, n * 4);
  for (int b = 0; !s && b < d->B; b++)
    if (!d->has_logits[b]) memset(out + (size_t)b * d->V, 0, (size_t)d->V * 4);
  return s;
}
