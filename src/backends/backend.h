/* The table of backend operations. A context picks one table when it is
 * created (coda_backend_ops_for) and the api layer calls through it after
 * checking every argument: a backend trusts what it is given. Adding a
 * backend is writing one table (backends/<name>/<name>_backend.c) and
 * registering it in backends/registry.c, the only place that knows which
 * backends this build has. */
#ifndef CODA_BACKENDS_BACKEND_H
#define CODA_BACKENDS_BACKEND_H

#include "base/internal.h"
#include "lang/ir.h" /* the program limits */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A checked GEMM + epilogue, plain GEMM or map run. */
typedef struct coda_epi_job {
  coda_program prog; /* NULL: plain D = alpha * acc (+ D) */
  int has_gemm;      /* 0: a map pass over M x N (no A, B) */
  coda_transpose ta, tb;
  const coda_tensor *A, *B;
  int64_t M, N, K;
  coda_tiling tiling;
  int schedule; /* CODA_SCHED_* (CUDA fused kernels; the bits do not depend on it) */
  const coda_tensor *inputs[CODA_MAX_INPUTS];
  const coda_tensor *outputs[CODA_MAX_OUTPUTS];
  const coda_tensor *partials[CODA_MAX_REDUCES];
  const coda_tensor *D; /* plain store */
  double alpha;
  int accumulate;
} coda_epi_job;

/* A checked row finisher: partials P (and Q) -> out. layout 0 rowsum
 * partials, 1 colsum, 2 segsum. */
typedef struct coda_finish_job {
  int kind, layout;
  const coda_tensor *P, *Q, *out;
  int64_t M, N;
  coda_tiling tiling;
  int seg;
  double eps;
} coda_finish_job;

/* The fused RoPE backward's extra views (coda_attention_backward_rope). */
typedef struct coda_attn_rope {
  const coda_tensor *pos, *freq, *zp;
} coda_attn_rope;

/* A checked attention call (causal GQA on packed qkv). */
typedef struct coda_attn_job {
  const coda_tensor *qkv, *out, *lse, *dout, *dqkv;
  int B, T, Hq, Hkv, hd;
  const coda_attn_rope *rope; /* backward only; NULL: no fused RoPE backward */
} coda_attn_job;

/* Copy directions of copy_bytes. */
/* H2D_QUEUED: queued after the stream's work without waiting for it; the
 * source may be reused on return (the backend stages it). */
typedef enum { CODA_COPY_H2D = 0, CODA_COPY_D2H = 1, CODA_COPY_H2D_QUEUED = 2 } coda_copy_kind;

/* The trainer's device-resident kernels (fp32 master weights, AdamW,
 * embedding); see the CUDA backend's train_kernels.cu for their meaning. */
typedef struct coda_train_ops {
  coda_status (*round)(coda_context, const coda_tensor *dst, const float *src);
  coda_status (*accum)(coda_context, float *dst, const coda_tensor *src, float scale);
  coda_status (*embed)(coda_context, const coda_tensor *x, const float *table, const int32_t *tok);
  coda_status (*embed16)(coda_context, const coda_tensor *x, const uint16_t *table,
                         const int32_t *tok);
  coda_status (*embed_grad)(coda_context, float *g, const coda_tensor *dx, const int32_t *rows,
                            const int32_t *seg, const int32_t *pos, int nrows, float scale);
  coda_status (*targets)(coda_context, const coda_tensor *t, const int32_t *tg);
  coda_status (*sumsq)(coda_context, const float *g, size_t n, size_t chunk, double *part);
  coda_status (*adamw)(coda_context, float *w, const float *g, float *m, float *v, size_t n,
                       const double *coef, double gscale);
  /* elements [lo, hi) of the n laid out back to back; side NULL: the
   * context's stream, else that side queue's */
  coda_status (*adamw_multi)(coda_context, float *w, const float *g, float *m, float *v,
                             uint16_t *wb, size_t lo, size_t hi, const int64_t *seg, int nseg,
                             const double *coef, double gscale, void *side);
  coda_status (*init_normal)(coda_context, float *w, size_t n, uint64_t s0, uint64_t draw0,
                             double sd);
  coda_status (*fill)(coda_context, float *w, size_t n, float value);
  coda_status (*zero)(coda_context, void *p, size_t bytes);
  coda_status (*memory)(coda_context, size_t *used, size_t *total);
  /* A side queue: work that runs beside the context's stream (CUDA: a
   * second stream) with nmarks markers. fork: the queue's next work waits
   * for the context's work issued so far; mark: marker i after the queue's
   * work issued so far; wait: the context's next work waits for marker i. */
  coda_status (*side_create)(coda_context, int nmarks, void **side);
  coda_status (*side_fork)(coda_context, void *side);
  coda_status (*side_mark)(coda_context, void *side, int i);
  coda_status (*side_wait)(coda_context, void *side, int i);
  void (*side_destroy)(coda_context, void *side);
} coda_train_ops;

/* The rows of one decoder forward (src/infer/decode.c): row r is token
 * position pos[r] of sequence seq[r] (device int32 arrays of M entries).
 * A layer's key and value caches are bf16 [batch][max_len][Hk][hd]. */
typedef struct coda_decode_rows {
  int64_t M;
  const int32_t *seq, *pos;
  int Hq, Hk, hd, max_len;
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
 * decode_kernels.cu), y = in · wᵀ over M rows, w bf16 [N x K]:
 *   in:  x (bf16 M x K); or, with norm_w set, h = bf16(RMSNorm(xf row
 *        norm_rows[i] (NULL: i)) ⊙ norm_w), h (M x K) its scratch;
 *   out: F32:    y (M x N f32) = result, or += with accumulate;
 *        SWIGLU: yb (M x N/2 bf16) = bf16(silu(z[2i]) · z[2i+1]) of the
 *                result z (gate and up interleaved), y its f32 scratch;
 *        ROPE:   the result rows as qkv ([Q heads][K heads][V heads], RoPE
 *                pairs adjacent) rotated at rows->pos into q and the K
 *                cache, V into the V cache, at (rows->seq, rows->pos),
 *                packed (optional) the same bf16 row; y its f32 scratch.
 * The scratch is written only where the backend does not fuse the step. */
typedef enum { CODA_DECODE_OUT_F32, CODA_DECODE_OUT_SWIGLU, CODA_DECODE_OUT_ROPE } coda_decode_out;
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
  coda_status (*embed)(coda_context, float *x, const uint16_t *table, const int32_t *tok,
                       int64_t M, int64_t D);
  coda_status (*linear)(coda_context, const coda_decode_linear_job *j);
  coda_status (*attention)(coda_context, const coda_decode_rows *r, uint16_t *o,
                           const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                           float *work, int splits);
  coda_status (*gather_rows)(coda_context, float *dst, const float *src, const int32_t *dst_rows,
                             int64_t n, int64_t cols);
  coda_status (*sample)(coda_context, const coda_decode_sample_job *j);
  /* NULL where the backend has no one-kernel step; row_step_ok: whether
   * it takes the job's shapes (0 with the reason in msg) */
  coda_status (*row_step)(coda_context, const coda_decode_row_step_job *j);
  int (*row_step_ok)(coda_context, const coda_decode_row_step_job *j, char *msg, size_t cap);
} coda_decode_ops;

typedef struct coda_backend_ops {
  const char *name;
  coda_backend kind;
  /* Context life: state the backend hangs on the context. */
  coda_status (*create)(coda_context ctx);
  void (*destroy)(coda_context ctx);
  /* Memory of the backend (accounted by the api layer). */
  coda_status (*alloc)(coda_context ctx, size_t bytes, void **out);
  void (*free)(coda_context ctx, void *p);
  coda_status (*copy_bytes)(coda_context ctx, void *dst, const void *src, size_t bytes,
                            coda_copy_kind kind);
  /* dst = src for two views of one shape (converted when the dtypes differ); src NULL: zeros. */
  coda_status (*copy)(coda_context ctx, const coda_tensor *dst, const coda_tensor *src);
  coda_status (*synchronize)(coda_context ctx);
  /* The device tag of tuning caches, and the kernel-code suffix of the
   * library tag ("" when the backend has no generated kernels). */
  coda_status (*tags)(coda_context ctx, char *device, size_t ndevice, char *code, size_t ncode);
  /* Compute. */
  coda_status (*gemm)(coda_context ctx, const coda_epi_job *job);
  coda_status (*gemm_epilogue)(coda_context ctx, const coda_epi_job *job);
  coda_status (*map)(coda_context ctx, const coda_epi_job *job);
  coda_status (*finish)(coda_context ctx, const coda_finish_job *job);
  coda_status (*preferred_tiling)(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                  int64_t K, coda_tiling *out);
  coda_status (*attention_forward)(coda_context ctx, const coda_attn_job *job);
  coda_status (*attention_backward)(coda_context ctx, const coda_attn_job *job);
  const coda_train_ops *train; /* NULL: the trainer's device state is not on this backend */
  const coda_decode_ops *decode; /* NULL: the decoder runs on the host (CPU backend) */
  /* Timing markers (the profile of a training step): a set of n markers;
   * record puts marker i after the work issued so far (CUDA: an event on
   * the context's stream; a synchronous backend: the host clock); elapsed
   * gives the milliseconds from marker a to marker b, waiting for b. NULL:
   * the backend has no markers. */
  coda_status (*timer_create)(coda_context ctx, int n, void **set);
  coda_status (*timer_record)(coda_context ctx, void *set, int i);
  coda_status (*timer_elapsed)(coda_context ctx, void *set, int a, int b, double *ms);
  void (*timer_destroy)(coda_context ctx, void *set);
  /* Graphs (coda_graph_begin ..): record the context's launches, end into
   * an instantiated graph, replay it, free it. NULL: no graphs. */
  coda_status (*graph_begin)(coda_context ctx);
  coda_status (*graph_end)(coda_context ctx, void **exec);
  coda_status (*graph_launch)(coda_context ctx, void *exec);
  void (*graph_destroy)(void *exec);
  /* Ahead-of-time compilation of the generated kernels a fused GEMM (both
   * schedules) or a map launches, into the disk cache; needs no device, so
   * any context may ask (NULL: the backend generates no kernels). */
  coda_status (*precompile_gemm_epilogue)(coda_context ctx, coda_program prog, int trans_a,
                                          int trans_b, int f16, int *from_cache);
  coda_status (*precompile_map)(coda_context ctx, coda_program prog, int *from_cache);
  /* The generated source of a program's fused kernel, and one compilation
   * of it (coda_program_cuda_source / _compile; checked arguments). */
  coda_status (*program_source)(coda_context ctx, coda_program p, char **source);
  coda_status (*program_compile)(coda_context ctx, coda_program p, coda_dtype operand_dtype,
                                 coda_transpose trans_a, coda_transpose trans_b, int no_cache,
                                 coda_cuda_kernel_info *info, char **unit, char **log);
} coda_backend_ops;

/* The table of a backend, or NULL when this build does not have it. */
const coda_backend_ops *coda_backend_ops_for(coda_backend b);

extern const coda_backend_ops coda_cpu_backend_ops;

#ifdef __cplusplus
}
#endif
#endif
