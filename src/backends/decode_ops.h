/* The decoding feature table of a backend (coda_backend_ops.decode): the
 * decoder's device kernels and the jobs they take, with the weights of the
 * decoder's model by name. The api layer calls them (api/decode.h,
 * coda_decode_*) after its checks. */
#ifndef CODA_BACKENDS_DECODE_OPS_H
#define CODA_BACKENDS_DECODE_OPS_H

#include "base/internal.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rows of one decoder forward (src/infer/decode.c): row r is token
 * position pos[r] of sequence seq[r] (device int32 arrays of M entries).
 * A layer's key and value caches are bf16 [batch][max_len][Hk][hd].
 * scale: the scores' (0: 1/sqrt(hd)); window: the keys a row sees, its own
 * among them (0: every earlier one; Gemma 3's local layers). */
typedef struct coda_decode_rows {
  int64_t M;
  const int32_t *seq, *pos;
  int Hq, Hk, hd, max_len;
  double scale;
  int window;
} coda_decode_rows;

/* One draw per sequence from logits (B x V f32): tokens[b] = the token
 * (-1 where pos[b] < 0, -2 where the row holds a non-finite logit); pos[b]
 * is the position the token will take (the random number's counter). */
typedef struct coda_decode_sample_job {
  int32_t *tokens;
  const float *logits;
  const int32_t *pos;
  int64_t B, V;
  double temperature, top_p;
  int top_k;
  uint64_t seed;
} coda_decode_sample_job;

/* A decoder linear layer with its neighbours fused (the CUDA backend's
 * decode_kernels.cu), y = in · wᵀ (+ bias) over M rows, w bf16 [N x K]:
 *   in:  x (bf16 M x K); or, with norm_w set, h = bf16(RMSNorm(xf row
 *        norm_rows[i] (NULL: i)) ⊙ norm_w), h (M x K) its scratch; with
 *        norm_b set too, LayerNorm: h = bf16((xf − mean) · r ⊙ norm_w +
 *        norm_b) (GPT-2);
 *   bias (fp32 [N], NULL: none): added to every row of the result;
 *   out: F32:    y (M x N f32) = result, or += with accumulate; with
 *                post_norm set (Gemma 3's post-norms), y is the result's
 *                scratch and res (M x N f32) += RMSNorm(y row) ⊙ post_norm;
 *        SWIGLU: yb (M x N/2 bf16) = bf16(silu(z[2i]) · z[2i+1]) of the
 *                result z (gate and up interleaved), y its f32 scratch;
 *        GEGLU:  the same with gelu_tanh(z[2i]) (Gemma 3);
 *        GELU:   yb (M x N bf16) = bf16(gelu_tanh(z)) (GPT-2), y scratch;
 *        ROPE:   the result rows as qkv ([Q heads][K heads][V heads], RoPE
 *                pairs adjacent) rotated at rows->pos into q and the K
 *                cache, V into the V cache, at (rows->seq, rows->pos),
 *                packed (optional) the same bf16 row; y its f32 scratch;
 *                inv_freq NULL: no rotation (GPT-2's learned positions).
 *                With q_norm and k_norm set (Qwen3's QK-norm, fp32 [hd]
 *                each), every Q and K head is first RMS-normalized over
 *                its hd values with eps and scaled by its weights; then y
 *                always holds the unrotated f32 rows.
 * The scratch is written only where the backend does not fuse the step. */
typedef enum {
  CODA_DECODE_OUT_F32,
  CODA_DECODE_OUT_SWIGLU,
  CODA_DECODE_OUT_ROPE,
  CODA_DECODE_OUT_GEGLU,
  CODA_DECODE_OUT_GELU
} coda_decode_out;
typedef struct coda_decode_linear_job {
  int64_t M, N, K;
  const uint16_t *w;
  const uint16_t *x;
  const float *xf, *norm_w;
  const int32_t *norm_rows;
  double eps;
  uint16_t *h;
  coda_decode_out out;
  float *y;
  int accumulate;
  uint16_t *yb;
  const coda_decode_rows *rows;
  uint16_t *q, *kc, *vc, *packed;
  const double *inv_freq;
  const float *q_norm, *k_norm; /* ROPE: the QK-norm weights, or NULL (Llama) */
  const float *norm_b, *bias;   /* GPT-2's LayerNorm bias and linear bias, or NULL */
  const float *post_norm;       /* F32: Gemma 3's output norm, or NULL */
  float *res;                   /* F32 with post_norm: the residual rows */
} coda_decode_linear_job;

/* A whole decode step of one row (M = 1): every layer and the head in one
 * persistent kernel (the CUDA backend's decode_row_step.cu), from the
 * embedded row to the logits, with the math of the linear, attention and
 * merge ops above in sequence. layer is a device array of `layers`
 * entries. x holds the embedded row on entry and the last layer's residual
 * row on return;
 * q, o and y are the step's bf16 scratch rows (Hq·hd, Hq·hd, F), work the
 * attention partials of up to max_splits splits, sync a word of device
 * memory the kernel's grid barrier counts on (zeroed by every call). */
typedef struct coda_decode_layer_weights {
  const uint16_t *wqkv, *wo, *w13, *w2; /* bf16 [N x K] */
  const float *norm_attn, *norm_ffn;    /* fp32 [D] */
  uint16_t *kc, *vc;                    /* the layer's caches */
} coda_decode_layer_weights;
typedef struct coda_decode_row_step_job {
  const coda_decode_layer_weights *layer;
  int layers;
  int64_t D, F, V;
  const coda_decode_rows *rows; /* M = 1 */
  const double *inv_freq;
  double eps;
  float *x;
  uint16_t *q, *o, *y;
  float *work;
  int max_splits;
  const float *norm;   /* final RMSNorm weights */
  const uint16_t *wout; /* the head, bf16 [V x D] */
  float *logits;        /* V f32 */
  unsigned *sync;
  /* NULL, or 6·layers + 2 words: block 0's %globaltimer (ns) when the
   * step starts and as it leaves each grid barrier, the last after the
   * head (each layer's six barriers precede its attention, merge, out
   * projection, gate/up, down and the next layer or the head) */
  uint64_t *trace;
} coda_decode_row_step_job;

/* The decoder's device kernels (device pointers; bf16 as uint16_t bits);
 * see the CUDA backend's decode_kernels.cu for their meaning. */
typedef struct coda_decode_ops {
  /* x row r = table row tok[r] · scale (+ pos_table row pos[r] where
   * pos_table is set: GPT-2's learned positions) */
  coda_status (*embed)(coda_context, float *x, const uint16_t *table, const int32_t *tok,
                       int64_t M, int64_t D, float scale, const uint16_t *pos_table,
                       const int32_t *pos);
  coda_status (*linear)(coda_context, const coda_decode_linear_job *j);
  /* ticket: M·Hq words of device memory, zero on entry and left zero on
   * return, with which the blocks of a head group count their splits (the
   * last one merges them); NULL: the merge runs as a kernel of its own */
  coda_status (*attention)(coda_context, const coda_decode_rows *r, uint16_t *o,
                           const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                           float *work, unsigned *ticket, int splits);
  /* dst row dst_rows[i] = src row i, softcap · tanh(v / softcap) where
   * softcap > 0 (Gemma 3's final logit cap) */
  coda_status (*gather_rows)(coda_context, float *dst, const float *src, const int32_t *dst_rows,
                             int64_t n, int64_t cols, float softcap);
  coda_status (*sample)(coda_context, const coda_decode_sample_job *j);
  /* NULL where the backend has no one-kernel step; row_step_ok: whether
   * it takes the job's shapes (0 with the reason in msg) */
  coda_status (*row_step)(coda_context, const coda_decode_row_step_job *j);
  int (*row_step_ok)(coda_context, const coda_decode_row_step_job *j, char *msg, size_t cap);
} coda_decode_ops;

#ifdef __cplusplus
}
#endif
#endif
