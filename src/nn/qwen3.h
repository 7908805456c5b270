/* The Qwen3 block: the Llama-3 block plan of llama3.c with the QK-norm
 * (CODA_LLAMA_QK_NORM) in place of its fused QKV + RoPE epilogue and its
 * RoPE backward; docs/plans.md, "Qwen3 block plan". */
#ifndef CODA_NN_QWEN3_H
#define CODA_NN_QWEN3_H

#include "nn/plan.h"

/* The block's QK-norm shapes (M = batch*seq rows). */
typedef struct qwen3_shape {
  int64_t M, seq, hd, hq, hkv; /* heads: hq query, hkv key (as many value) */
  coda_dtype act, st;          /* activations, statistics */
  double theta;                /* RoPE base */
  const coda_rope_scaling *rope; /* its frequency scaling */
} qwen3_shape;

/* CODA_LLAMA_QK_NORM's limits: not with FOLD, ROPE_MAP or INFER, and head
 * segments that fit the tiling (head_dim a multiple of tile_n or the
 * reverse). */
coda_status qwen3_check(coda_context ctx, unsigned flags, int64_t head_dim, coda_tiling tl);
/* Its buffers: the q/k norm weights and gradients, the pre-norm qkv, the
 * per-head statistics, the one-head-per-row views and the constants. */
void qwen3_buffers(coda_plan p, const qwen3_shape *q, coda_tiling tl);
/* Forward: qkv_pre, rq = the GEMM (h1 Wqkv^T, row scale rstd1) and its
 * per-head statistics; then qkv = RoPE(QK-norm(qkv_pre)) by a map. */
void qwen3_qkv_forward(coda_plan p, const qwen3_shape *q, coda_tiling tl);
/* Backward from do: the attention backward (its RoPE backward fused), the
 * QK-norm backward into dqkvp (the gradient of qkv_pre) with dwqn, dwkn,
 * and zdz1 = sum over the row of qkv_pre * dqkvp for the RMSNorm backward
 * of the qkv dgrad (which then reads dqkvp as llama's reads dzqkv). */
void qwen3_qkv_backward(coda_plan p, const qwen3_shape *q, coda_tiling tl,
                        const plan_attention *g);

#endif
