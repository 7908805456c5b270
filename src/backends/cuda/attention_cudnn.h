/* Causal GQA attention through cuDNN's fused attention (attention_cudnn.c):
 * cuDNN is loaded at run time, the forward and backward graphs are built
 * with its backend API and their execution plans cached per shape on the
 * context. The CUDA backend's table picks it or the own kernels
 * (attention.cu) by the knob CODA_ATTENTION (cuda_backend.c). */
#ifndef CODA_CUDA_ATTENTION_CUDNN_H
#define CODA_CUDA_ATTENTION_CUDNN_H

#include "backends/backend.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Readies the plan of the job's pass (backward != 0: the backward) on the
 * context: loads cuDNN, builds and caches the plan. CODA_OK when cuDNN
 * runs this job; otherwise the status and the context's message say why
 * (cuDNN missing, too old, the shape or layout rejected). */
coda_status coda_cudnn_attention_prepare(coda_context ctx, const coda_attn_job *job, int backward);
/* The passes; the plan is readied first if it is not cached. The
 * backward's RoPE backward (job->rope) runs as a pass after cuDNN's. */
coda_status coda_cudnn_attention_forward(coda_context ctx, const coda_attn_job *job);
coda_status coda_cudnn_attention_backward(coda_context ctx, const coda_attn_job *job);
/* Which implementation the context's last attention call ran and, when
 * CODA_ATTENTION=auto fell back to the own kernels, why (a line of text;
 * "" before any call). */
const char *coda_cudnn_attention_choice(coda_context ctx);
void coda_cudnn_attention_note(coda_context ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The loaded cuDNN's version (cudnnGetVersion, e.g. 91900), 0 when it is not
 * loaded; loads it. */
size_t coda_cudnn_version(coda_context ctx);
/* Frees the plans and the handle (context destruction). */
void coda_cudnn_release(coda_context ctx);

/* Kernels of attention_cudnn_kernels.cu, on the context's stream. */
/* The RoPE backward of coda_attention_backward_rope applied in place to a
 * finished bf16 dqkv (rows BT, head slots of hd columns). */
coda_status coda_cudnn_rope_bwd(coda_context ctx, void *dqkv, long long ld_dqkv, const void *qkv,
                                long long ld_qkv, long long BT, int slots, int hd,
                                const int *pos, long long ld_pos, const float *freq, float *zp,
                                long long ld_zp);
/* lse [B*T][Hq] (leading dimension ld) to and from cuDNN's stats
 * [B][Hq][T]: to_stats 1 copies lse into stats, 0 stats into lse. */
coda_status coda_cudnn_lse_copy(coda_context ctx, float *lse, long long ld, float *stats, int B,
                                int T, int Hq, int to_stats);

#ifdef __cplusplus
}
#endif
#endif
