/* Entry points of the CUDA backend behind its table (cuda_backend.c). Declared
 * only when the library is built with CUDA. */
#ifndef CODA_CUDA_BACKEND_H
#define CODA_CUDA_BACKEND_H
#include "backends/backend.h" /* coda_attn_rope */
#include "backends/decode_ops.h" /* the decoding table's jobs */
#include "backends/train_ops.h"
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/* The RoPE backward fused into the attention backward's stores
 * (coda_attention_backward_rope): its views, or a NULL pointer for none.
 * Both backends take it. */

#ifdef CODA_HAVE_CUDA
/* 1 when a GPU of compute capability 8.0 or newer is present (gemm.cu;
 * the table's available, the public coda_cuda_available): sm_90 runs the
 * sm90 path, the others the sm80 path (base/arch.h). */
int coda_cuda_device_usable(void);

/* Plain GEMM on the Hopper mainloop: D = alpha*op(A)*op(B) (+ D). Tensors are
 * device views. Arguments are already checked by the caller. Refused on the
 * sm80 path (its kernels are sm_90a; coda_cuda_gemm_path takes either). */
coda_status coda_cuda_gemm(coda_context ctx, coda_transpose trans_a,
                           const coda_tensor *A, coda_transpose trans_b,
                           const coda_tensor *B, const coda_tensor *D,
                           float alpha, int accumulate);

/* Causal GQA attention (FlashAttention-2 style) for bf16 qkv/out/dout/dqkv
 * and f32 lse, head_dim 32, 64 or 128, on device views; same semantics as
 * coda_attention_forward_mask / coda_attention_backward_mask (mask NULL:
 * the default; its fields checked by the caller). Other dtypes or head
 * sizes return CODA_ERR_NOT_SUPPORTED; rows must be 16-byte aligned
 * (base and ld multiple of 8 elements). The backward is deterministic. */
coda_status coda_cuda_attention_forward(coda_context ctx, const coda_tensor *qkv, int batch,
                                        int seq, int heads_q, int heads_kv, int head_dim,
                                        const coda_tensor *out, const coda_tensor *lse,
                                        const coda_attn_mask *mask);
coda_status coda_cuda_attention_backward(coda_context ctx, const coda_tensor *qkv,
                                         const coda_tensor *out, const coda_tensor *lse,
                                         const coda_tensor *dout, int batch, int seq,
                                         int heads_q, int heads_kv, int head_dim,
                                         const coda_tensor *dqkv, const coda_attn_rope *rope,
                                         const coda_attn_mask *mask);

/* ---- epilogue compiler (src/backends/cuda/epi_*.c) ---- */
/* GEMM + compiled epilogue program: acc = op(A)*op(B) (bf16 or f16), then
 * the program, one kernel launch. inputs/outputs/partials are the checked
 * device views in program order. The tiling must be the one
 * coda_cuda_preferred_tiling returns (partials are computed for it). */
coda_status coda_cuda_gemm_epilogue(coda_context ctx, coda_program program,
                                    coda_transpose trans_a, const coda_tensor *A,
                                    coda_transpose trans_b, const coda_tensor *B,
                                    const coda_tensor *const *inputs,
                                    const coda_tensor *const *outputs,
                                    const coda_tensor *const *partials, coda_tiling tiling,
                                    int schedule /* CODA_SCHED_* */);
/* The tiling the CUDA epilogue kernel uses: {64, 128}. */
coda_status coda_cuda_preferred_tiling(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                       int64_t K, coda_tiling *out);
/* The CUDA backend's state on a context (ctx->backend): made by the
 * table's create, freed by its destroy; each part is made the first time
 * it is needed and released by the file that made it. */
typedef struct coda_cuda_ctx {
  void *kernels;   /* loaded fused kernels and driver entry points (epi_launch.c) */
  void *ws;        /* the reusable workspaces (workspace.c) */
  void *cudnn;     /* the cuDNN attention's plans and handle (attention_cudnn.c) */
  void *gemm_tune; /* the GEMM autotuner's choices (gemm_tune.cu) */
  int path;        /* the mainloop path chosen at creation: CODA_PATH_SM90 or
                    * CODA_PATH_SM80 (base/arch.h, CODA_ARCH) */
  int cc;          /* the device's compute capability, 10 * major + minor */
  /* the sm80 path's plain GEMMs: their store programs, parsed once per
   * (D type, accumulate, alpha) and kept for the context's life */
  struct {
    coda_program prog;
    int dtype, accumulate;
    float alpha;
  } sm80_store[8];
  unsigned sm80_store_next; /* the slot a full table gives up next */
} coda_cuda_ctx;
/* The CUDA state of ctx; NULL when ctx is not a CUDA context (a context
 * of another backend may still ask the kernel compiler for source). */
coda_cuda_ctx *coda_cuda_ctx_of(coda_context ctx);
struct coda_epi_config;
/* 1 when ctx is a CUDA context on the sm80 path (base/arch.h): an sm_8x
 * GPU, or any GPU with CODA_ARCH=sm80. That path runs the NVRTC-built GEMM
 * and epilogue kernels for the device's own architecture and the prebuilt
 * kernels that need nothing of sm_90 (docs/backends.md, "The sm80 path");
 * the Hopper-only ones refuse through coda_cuda_hopper_only. */
int coda_cuda_sm80(coda_context ctx);
/* CODA_OK on the sm90 path; on the sm80 path CODA_ERR_NOT_SUPPORTED naming
 * `what`, why it needs Hopper (`why`, e.g. "wgmma and TMA"), the device
 * and CODA_ARCH (cuda_backend.c). */
coda_status coda_cuda_hopper_only(coda_context ctx, const char *what, const char *why);
/* The plain GEMM of the context's path, D = alpha*op(A)*op(B) (+ D): the
 * prebuilt sm_90a kernels (coda_cuda_gemm) on the sm90 path, the fused
 * kernel with a store program on the sm80 path (cuda_backend.c). For the
 * backend's own kernels that need a GEMM (the decoder's linear layers). */
coda_status coda_cuda_gemm_path(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                                coda_transpose trans_b, const coda_tensor *B,
                                const coda_tensor *D, float alpha, int accumulate);
/* Sets cfg->arch and cfg->cc for the context: its path and device on a
 * CUDA context, else (compiling without a GPU) CODA_ARCH's path, sm80
 * compiled for sm_80 (epi_launch.c). */
void coda_cuda_epi_arch(coda_context ctx, struct coda_epi_config *cfg);
/* Frees the loaded epilogue kernels and the tuner's table of a context
 * (the table's destroy). */
void coda_cuda_context_release(coda_context ctx);
/* The context's own stream (own_stream) and graphs of its stream (graph.c). */
coda_status coda_cuda_stream_open(coda_context ctx);
void coda_cuda_stream_close(coda_context ctx);
coda_status coda_cuda_graph_begin(coda_context ctx);
coda_status coda_cuda_graph_end(coda_context ctx, void **exec);
coda_status coda_cuda_graph_launch(coda_context ctx, void *exec);
void coda_cuda_graph_destroy(void *exec);
/* The device tag of the autotuners' cache files: GPU name and SM count,
 * e.g. "NVIDIA H200/132sm" (gemm_tune.cu). */
coda_status coda_cuda_device_tag(coda_context ctx, char *buf, size_t n);
/* Local-memory bytes per thread of the compiled kernel for a program
 * (0 = no spills), -1 on error; *ping (optional) = 1 if it runs the
 * pingpong schedule; for tests and benchmarks. */
int coda_cuda_epilogue_local_bytes(coda_context ctx, coda_program program, int trans_a,
                                   int trans_b, int f16, int *ping);

/* ---- the trainer's device ops (src/backends/cuda/train_kernels.cu) ----
 * Device pointers; dense f32 buffers unless a view is given. Deterministic
 * (no atomics). */
/* dst (bf16 or f32 view) = src (dense f32, dst's shape) + shift, rounding to nearest even. */
coda_status coda_cuda_train_round(coda_context ctx, const coda_tensor *dst, const float *src,
                                  float shift);
/* dst (dense f32, src's shape) += scale * src (bf16 or f32 view). */
coda_status coda_cuda_train_accum(coda_context ctx, float *dst, const coda_tensor *src,
                                  float scale);
/* x (bf16, M x D) row r = table row tok[r] (tokens already checked), plus
 * row r % period of pos when pos is not NULL (an fp32 sum), times scale
 * when it is not 1 (an fp32 product; Gemma 3), one rounding. */
coda_status coda_cuda_train_embed(coda_context ctx, const coda_tensor *x, const float *table,
                                  const int32_t *tok, const float *pos, int64_t period,
                                  float scale);
/* The same from bf16 tables (without pos and scale: bits copied). */
coda_status coda_cuda_train_embed16(coda_context ctx, const coda_tensor *x, const uint16_t *table,
                                    const int32_t *tok, const uint16_t *pos, int64_t period,
                                    float scale);
/* For j < nrows: g row rows[j] += scale * dx row pos[t] for t = seg[j] ..
 * seg[j+1]-1 in that order (one thread block per row, no atomics). */
coda_status coda_cuda_train_embed_grad(coda_context ctx, float *g, const coda_tensor *dx,
                                       const int32_t *rows, const int32_t *seg,
                                       const int32_t *pos, int nrows, float scale);
/* t (int32, M x 1 view) = tg, negative targets as -100 (ignored). */
coda_status coda_cuda_train_targets(coda_context ctx, const coda_tensor *t, const int32_t *tg);
/* part[b] = sum of g[i]^2 (double) over chunk b of n; fixed reduction order. */
coda_status coda_cuda_train_sumsq(coda_context ctx, const float *g, size_t n, size_t chunk,
                                  double *part);
/* AdamW (the host's coda_adamw_update arithmetic) on n elements; coef =
 * {beta1, beta2, 1-beta1^t, 1-beta2^t, lr, eps, 1-lr*wd or 1}; the gradient
 * is first scaled by gscale (clipping) and rounded to f32. */
coda_status coda_cuda_train_adamw(coda_context ctx, float *w, const float *g, float *m, float *v,
                                  size_t n, const double *coef, double gscale);
/* AdamW over the elements [lo, hi) of parameters laid out back to back,
 * in one launch (on the side queue's stream when side is set): seg
 * (device, 2 x nseg int64) holds each segment's absolute end and whether
 * it decays (coef[6] is the decaying shrink, 1 for the others); wb
 * (optional, bf16) receives the updated weights rounded to nearest even.
 * Buffers 16-byte aligned (wb 8), lo a multiple of 4. */
coda_status coda_cuda_train_adamw_multi(coda_context ctx, float *w, const float *g, float *m,
                                        float *v, uint16_t *wb, size_t lo, size_t hi,
                                        const int64_t *seg, int nseg, const double *coef,
                                        double gscale, void *side);
/* coda_train_adamw_bf16: the adamw_multi pass over bf16 weights and
 * moments with stochastic rounding (base/bf16_round.h). */
coda_status coda_cuda_train_adamw_bf16(coda_context ctx, uint16_t *w, const float *g, uint16_t *m,
                                       uint16_t *v, size_t lo, size_t hi, const int64_t *seg,
                                       int nseg, const double *coef, double gscale, uint64_t seed,
                                       int64_t t, void *side);
/* Side queues (side_queue.c): a non-blocking stream with markers;
 * coda_cuda_side_stream gives its cudaStream_t (NULL side: NULL). */
coda_status coda_cuda_side_create(coda_context ctx, int nmarks, void **side);
coda_status coda_cuda_side_fork(coda_context ctx, void *side);
coda_status coda_cuda_side_mark(coda_context ctx, void *side, int i);
coda_status coda_cuda_side_wait(coda_context ctx, void *side, int i);
void coda_cuda_side_destroy(coda_context ctx, void *side);
void *coda_cuda_side_stream(void *side);
/* w[k] = sd · the host's normal number k of the stream s0 from draw draw0
 * (coda_model_init's draws, two per value), k < n. */
coda_status coda_cuda_train_init_normal(coda_context ctx, float *w, size_t n, uint64_t s0,
                                        uint64_t draw0, double sd);
/* w[k] = value, k < n. */
coda_status coda_cuda_train_fill(coda_context ctx, float *w, size_t n, float value);
coda_status coda_cuda_train_zero(coda_context ctx, void *p, size_t bytes);
/* Device memory in use (all processes) and total. */
coda_status coda_cuda_train_memory(coda_context ctx, size_t *used, size_t *total);

/* ---- the decoder's device ops (decode_kernels.cu) ----
 * The entries of coda_decode_ops (backends/backend.h), same arguments. */
coda_status coda_cuda_decode_embed(coda_context ctx, float *x, const uint16_t *table,
                                   const int32_t *tok, int64_t M, int64_t D, float scale,
                                   const uint16_t *pos_table, const int32_t *pos);
coda_status coda_cuda_decode_linear(coda_context ctx, const coda_decode_linear_job *j);
coda_status coda_cuda_decode_attention(coda_context ctx, const coda_decode_rows *r, uint16_t *o,
                                       const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                                       float *work, unsigned *ticket, int splits);
coda_status coda_cuda_decode_gather_rows(coda_context ctx, float *dst, const float *src,
                                         const int32_t *dst_rows, int64_t n, int64_t cols,
                                         float softcap);
coda_status coda_cuda_decode_sample(coda_context ctx, const coda_decode_sample_job *j);
/* decode_row_step.cu */
coda_status coda_cuda_decode_row_step(coda_context ctx, const coda_decode_row_step_job *j);
int coda_cuda_decode_row_step_ok(coda_context ctx, const coda_decode_row_step_job *j, char *msg,
                                  size_t cap);
#endif
#ifdef __cplusplus
}
#endif
#endif
