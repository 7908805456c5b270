/* The one header of src/infer: the decoder's state, shared by its host
 * side (decode.c: creation, prefill and steps, the host forward), its
 * sampling and generation (decode_generate.c), its device side
 * (decode_device.c: the device buffers, the device forward, recorded step
 * graphs, step profiles) and its prefill through the block plans
 * (decode_plans.c). generate.c (coda_generate) needs none of it. */
#ifndef CODA_INFER_H
#define CODA_INFER_H

#include "coda_decode.h"
#include "api/api.h"
#include "api/decode.h" /* the backend's decode kernels and their jobs */
#include "model/model.h"

#include <stdint.h>
#include <string.h>

#define HOST_CHUNK 256   /* prefill rows per host forward */
#define DEVICE_CHUNK 2048 /* prefill rows per device forward, at least */
#define DEVICE_CHUNK_MAX 16384 /* and at most, unless the options name more */
#define MAX_SPLITS 32     /* decode attention splits over the cache */
#define MAX_GRAPHS 64     /* recorded decode steps, one per (rows, splits) */
#define MAX_PREFILL_PLANS 8 /* plan sets of distinct (prompts, length) shapes kept */

/* A decode step's launches recorded as a graph: their arguments are fixed
 * by the rows and the attention splits; tokens and positions are read from
 * the metadata buffer at each replay. */
typedef struct {
  int64_t M;
  int splits, seen;
  coda_graph g;
} step_graph;

typedef struct {
  const float *wn_attn, *wqkv, *wo, *wn_ffn, *w13, *w2; /* host (fp32) */
  float *d_wn_attn, *d_wn_ffn;                          /* device fp32 norms */
  uint16_t *d_wqkv, *d_wo, *d_w13, *d_w2;               /* device bf16 */
  /* the block plans' bf16 weights in the backend's memory (decode_plans.c):
   * on a device the GEMM weights are d_wqkv .. d_w2 themselves and only the
   * norms are copies; on the host all six live in the decoder's Wb */
  const uint16_t *p_wn1, *p_wqkv, *p_wo, *p_wn2, *p_w13, *p_w2;
  const float *wq_norm, *wk_norm; /* host: Qwen3's q/k norm weights (NULL: none) */
  float *d_wq_norm, *d_wk_norm;   /* device fp32: the same (NULL: none) */
  /* host, GPT-2: its MLP (wfc F x D, wproj D x F; w13 and w2 unset) and the
   * biases of its LayerNorms and linears */
  const float *wfc, *wproj, *bn_attn, *bqkv, *bo, *bn_ffn, *bfc, *bproj;
  /* host, Gemma 3: the norms of the attention's and the MLP's outputs */
  const float *wpost_attn, *wpost_ffn;
  /* device fp32: Gemma 3's post-norms (every Gemma 3 norm is uploaded as
   * 1 + w, so the kernels' plain RMSNorm computes its (1 + w) norm); GPT-2's
   * biases (its MLP's wfc and wproj are d_w13 and d_w2); else NULL */
  float *d_wpost_attn, *d_wpost_ffn;
  float *d_bn_attn, *d_bqkv, *d_bo, *d_bn_ffn, *d_bfc, *d_bproj;
} layer_w;

/* A forward-only Llama-3 block plan (CODA_LLAMA_INFER) for B fresh prompts
 * of T tokens each, run once per layer with that layer's weights bound. */
typedef struct {
  int B, T;
  coda_plan blk;
  void *xs[2];   /* the residual stream, B·T x D bf16: layer i reads xs[i % 2]
                  * and writes xs[(i + 1) % 2] */
  uint64_t used; /* the plan prefill that last ran it (the least recent goes
                  * when a new shape needs its slot) */
} prefill_plan;

struct coda_decoder_s {
  coda_context ctx;
  coda_model_config c;
  int B, max_len, gpu, chunk, nt;
  int64_t D, F, V, hd, nq, qd, kvd; /* dims; nq = (Hq + 2 Hk)·hd, qd = Hq·hd, kvd = Hk·hd */
  int *len;        /* tokens in each sequence's cache */
  int *has_logits; /* 1 once prefilled */
  coda_tokenizer tok;
  int own_tok;
  double *inv_freq; /* hd/2 RoPE frequencies (coda_rope_inv_freq: scaling included) */
  double *inv_freq_local; /* Gemma 3's local layers' (rope_local_theta; else NULL) */
  int gemma3;             /* Gemma 3's block (host_gemma3_layer) and head */
  layer_w *l;
  /* host */
  float *W;                      /* copy of the model's weights */
  const float *emb, *norm, *wout;
  const float *pos_emb, *norm_b; /* GPT-2: wpe and the final LayerNorm's bias (else NULL) */
  float *kc, *vc;                /* [L][B][max_len][kvd] */
  float *logits;                 /* B x V */
  float *x, *h, *qkv, *o, *z, *y, *P; /* chunk rows */
  /* device */
  uint16_t *d_emb, *d_wout, *d_kc, *d_vc, *d_h, *d_q, *d_o, *d_y;
  float *d_norm, *d_x, *d_qkv, *d_z, *d_head, *d_logits, *d_work;
  double *d_inv_freq, *d_inv_freq_local; /* the latter Gemma 3's (else NULL) */
  uint16_t *d_pos_emb;                   /* GPT-2: wpe in bf16 (else NULL) */
  float *d_norm_b;                       /* GPT-2: the final LayerNorm's bias */
  int32_t *d_meta, *d_sample, *d_spos; /* rows' metadata (5 x chunk), sampled tokens */
  int64_t work_rows;                    /* (row, split) pairs d_work holds */
  unsigned *d_ticket;                   /* the attention's split counts, chunk x heads, zero */
  int32_t *h_tok, *h_seq, *h_pos, *h_rows, *h_hseq; /* rows of a forward, chunk entries */
  int32_t *h_meta;                      /* their upload, 5 x chunk */
  /* Prefill of whole fresh prompts (every row's sequence starts at
   * position 0 in the chunk): the rotated rows packed for the attention
   * of training (coda_attention_forward), one call per sequence. */
  uint16_t *d_pk; /* chunk x (Hq + 2 Hk)·hd bf16 */
  float *d_lse;   /* chunk x Hq */
  int32_t *seg_start, *seg_len; /* the chunk's sequences, chunk entries */
  int nseg;                     /* 0: the decode attention kernel */
  coda_timeline tl;  /* coda_decoder_step_profile: a marker after each launch */
  int tl_n, tl_cap;
  signed char *tl_phase; /* the phase each marker closes */
  int in_step;       /* the forward is a decode step (rows = heads) */
  int graphs_off;    /* steps are not recorded (option, debug mode, no stream) */
  step_graph graphs[MAX_GRAPHS];
  int ngraphs;
  /* prefill of fresh chunks through the block plans (decode_plans.c) */
  int use_plans;
  prefill_plan plans[MAX_PREFILL_PLANS];
  int nplans;
  int plan_builds;     /* plan sets built so far: a prefill of shapes seen
                        * before builds none */
  uint64_t plan_clock; /* plan prefills run */
  uint16_t *Wb;        /* host: the block weights in bf16, or NULL */
  uint16_t *d_pnorm;   /* device: the two norm weights of every layer in bf16 */
  /* one-row steps in one kernel (coda_decode_row_step), where the backend
   * takes the model's shapes: the layers' device pointers, the kernel's
   * barrier words */
  coda_decode_layer_weights *d_ltab;
  unsigned *d_sync;
  int row_step;
  uint64_t *d_trace; /* a profiled one-kernel step's barrier times, else NULL */
  int traced;        /* the profiled step ran as the one kernel */
};

static inline uint16_t decode_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* The device side (decode_device.c): the weights of m (fp32 W) uploaded in
 * bf16 and the buffers of the device forward allocated; a forward of M
 * rows whose logits rows are head_rows (of sequences head_seq). */
coda_status decode_setup_device(coda_decoder d, const float *W, coda_model *m);
coda_status decode_dev_forward(coda_decoder d, const int32_t *tok, const int32_t *seq,
                               const int32_t *pos, int64_t M, const int32_t *head_rows,
                               const int32_t *head_seq, int64_t nhead);


/* The host head (decode.c): final RMSNorm and LM head of rows head_rows
 * of d->x into the logits of sequences head_seq. */
void decode_host_head(coda_decoder d, const int32_t *head_rows, const int32_t *head_seq,
                      int64_t nhead);

/* The plan prefill (decode_plans.c). Setup decides d->use_plans from the
 * option and the backend (an explicit CODA_PREFILL_PLANS that cannot run
 * is CODA_ERR_NOT_SUPPORTED) and puts the plans' bf16 weights in place;
 * after the decoder's weights are. */
coda_status decode_plans_setup(coda_decoder d, coda_prefill_path path, const float *W,
                               coda_model *m);
void decode_plans_free(coda_decoder d);
/* 1 when the rows are whole fresh prompts (each sequence's rows from
 * position 0, in order; the last may be cut by the chunk's end) and the
 * plans are in use: d->seg_start / seg_len / nseg then hold them. */
int decode_plans_take(coda_decoder d, const int32_t *seq, const int32_t *pos, int64_t M);
/* The forward of such rows through the plans: every layer's K and V into
 * the cache, the logits of rows head_rows (of sequences head_seq). */
coda_status decode_plans_forward(coda_decoder d, const int32_t *tok, const int32_t *seq,
                                 int64_t M, const int32_t *head_rows, const int32_t *head_seq,
                                 int64_t nhead);
/* Plan sets built so far (tests: a second prefill of the same shapes
 * builds none). */
int decode_plan_builds(const coda_decoder d);

#endif
