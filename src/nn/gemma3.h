/* The Gemma 3 block: the Llama-3 block plan of llama3.c with Qwen3's
 * QK-norm (qwen3.c), a post-norm on the attention's and the MLP's output
 * before each residual add, and GeGLU (CODA_LLAMA_GEMMA3); docs/plans.md,
 * "Gemma 3 block plan". */
#ifndef CODA_NN_GEMMA3_H
#define CODA_NN_GEMMA3_H

#include "nn/plan.h"
#include "nn/qwen3.h"

/* The block's shapes and dtypes (M = batch*seq rows, HQ = heads·hd). */
typedef struct gemma3_shape {
  int exact; /* f64: the GeGLU backward as a plain GEMM and a map */
  int64_t M, D, F, HQ;
  coda_dtype act, st, gw; /* activations, statistics, weight gradients */
} gemma3_shape;

/* CODA_LLAMA_GEMMA3's limits (before the QK-norm's, qwen3_check): not with
 * NORM_IN, NORM_OUT, FOLD, ROPE_MAP or INFER. */
coda_status gemma3_check(coda_context ctx, unsigned flags);
/* Its buffers beyond llama3.c's and qwen3.c's: the post-norm weights and
 * gradients, the sublayer outputs before their norms and their statistics. */
void gemma3_buffers(coda_plan p, const gemma3_shape *g);
/* The forward and the backward (qwen3.c's QK-norm steps inside). */
void gemma3_forward(coda_plan p, const gemma3_shape *g, const qwen3_shape *q, coda_tiling tl,
                    const plan_attention *att);
void gemma3_backward(coda_plan p, const gemma3_shape *g, const qwen3_shape *q, coda_tiling tl,
                     const plan_attention *att);

#endif
