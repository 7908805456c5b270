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
#endif
#ifdef __cplusplus
}
#endif
#endif
