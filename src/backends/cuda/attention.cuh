/* Internal entry points of the CUDA attention kernels: the same calls as
 * coda_cuda_attention_forward / _backward with an explicit kernel variant,
 * named (variant NULL = the default; rope NULL = none; mask NULL = the
 * causal mask with scale 1/sqrt(head_dim)), for the GPU test
 * and the benchmark, and the variant names per pass and head_dim so that
 * they can run every one. Plain C declarations, includable from C and
 * CUDA C. */
#ifndef CODA_CUDA_ATTENTION_CUH
#define CODA_CUDA_ATTENTION_CUH
#include "coda.h"
#include "backends/cuda/backend.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Number of variants for the forward (backward = 0) or backward pass at
 * this head_dim (0 if the head_dim is not supported). */
int coda_cuda_attention_num_variants(int backward, int head_dim);
/* Name of variant `index` (0 .. num_variants - 1; mma.sync ones first,
 * then wgmma, then warp-specialized, prefixed "mma_", "wg_", "ws_"), or
 * NULL. Names are unique per pass and head_dim. */
const char *coda_cuda_attention_variant_name(int backward, int head_dim, int index);
coda_status coda_cuda_attention_forward_variant(coda_context ctx, const coda_tensor *qkv,
                                                int batch, int seq, int heads_q, int heads_kv,
                                                int head_dim, const coda_tensor *out,
                                                const coda_tensor *lse, const coda_attn_mask *mask,
                                                const char *variant);
coda_status coda_cuda_attention_backward_variant(coda_context ctx, const coda_tensor *qkv,
                                                 const coda_tensor *out, const coda_tensor *lse,
                                                 const coda_tensor *dout, int batch, int seq,
                                                 int heads_q, int heads_kv, int head_dim,
                                                 const coda_tensor *dqkv,
                                                 const coda_attn_rope *rope,
                                                 const coda_attn_mask *mask, const char *variant);
#ifdef __cplusplus
}
#endif
#endif
