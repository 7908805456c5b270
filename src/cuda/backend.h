/* Entry points of the CUDA backend, called by the backend-independent
 * dispatch in src/core. Declared only when the library is built with CUDA. */
#ifndef CODA_CUDA_BACKEND_H
#define CODA_CUDA_BACKEND_H
#include "coda.h"
#ifdef __cplusplus
extern "C" {
#endif
#ifdef CODA_HAVE_CUDA
/* Plain GEMM on the Hopper mainloop: D = alpha*op(A)*op(B) (+ D). Tensors are
 * device views. Arguments are already checked by the caller. */
coda_status coda_cuda_gemm(coda_context ctx, coda_transpose trans_a,
                           const coda_tensor *A, coda_transpose trans_b,
                           const coda_tensor *B, const coda_tensor *D,
                           float alpha, int accumulate);

/* Causal GQA attention (FlashAttention-2 style) for bf16 qkv/out/dout/dqkv
 * and f32 lse, head_dim 64 or 128, on device views; same semantics as
 * coda_attention_forward / coda_attention_backward. Other dtypes or head
 * sizes return CODA_ERR_NOT_SUPPORTED; rows must be 16-byte aligned
 * (base and ld multiple of 8 elements). The backward is deterministic. */
coda_status coda_cuda_attention_forward(coda_context ctx, const coda_tensor *qkv, int batch,
                                        int seq, int heads_q, int heads_kv, int head_dim,
                                        const coda_tensor *out, const coda_tensor *lse);
coda_status coda_cuda_attention_backward(coda_context ctx, const coda_tensor *qkv,
                                         const coda_tensor *out, const coda_tensor *lse,
                                         const coda_tensor *dout, int batch, int seq,
                                         int heads_q, int heads_kv, int head_dim,
                                         const coda_tensor *dqkv);

/* ---- epilogue compiler (src/cuda/epi_*.c) ---- */
/* GEMM + compiled epilogue program: acc = op(A)*op(B) (bf16 or f16), then
 * the program, one kernel launch. inputs/outputs/partials are the checked
 * device views in program order. The tiling must be the one
 * coda_cuda_preferred_tiling returns (partials are computed for it). */
coda_status coda_cuda_gemm_epilogue(coda_context ctx, coda_program program,
                                    coda_transpose trans_a, const coda_tensor *A,
                                    coda_transpose trans_b, const coda_tensor *B,
                                    const coda_tensor *const *inputs,
                                    const coda_tensor *const *outputs,
                                    const coda_tensor *const *partials, coda_tiling tiling);
/* The tiling the CUDA epilogue kernel uses: {64, 128}. */
coda_status coda_cuda_preferred_tiling(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                       int64_t K, coda_tiling *out);
/* Frees the CUDA state of a context (loaded epilogue kernels); call from
 * coda_context_destroy. */
void coda_cuda_context_release(coda_context ctx);
/* Local-memory bytes per thread of the compiled kernel for a program
 * (0 = no spills), -1 on error; *ping (optional) = 1 if it runs the
 * pingpong schedule; for tests and benchmarks. */
int coda_cuda_epilogue_local_bytes(coda_context ctx, coda_program program, int trans_a,
                                   int trans_b, int f16, int *ping);
#endif
#ifdef __cplusplus
}
#endif
#endif
