/* The api layer's entries to the decoder's device kernels, for the decoder
 * (coda_decode.h's implementation): checked calls through the backend's
 * decoding table. Its jobs are that table's (backends/decode_ops.h), the one
 * backend header a layer above the api sees, and only through this file. */
#ifndef CODA_API_DECODE_H
#define CODA_API_DECODE_H

#include "backends/decode_ops.h" /* the decoder's job structs */
#include "base/internal.h"

#include <stddef.h>
#include <stdint.h>

/* The decoder's device kernels (backends/decode_ops.h, coda_decode_ops):
 * 1 when the context's backend has them; the calls are stream-ordered and
 * return CODA_ERR_NOT_SUPPORTED on a backend without them. */
int coda_decode_on_device(coda_context ctx);
coda_status coda_decode_embed(coda_context ctx, float *x, const uint16_t *table,
                              const int32_t *tok, int64_t M, int64_t D, float scale,
                              const uint16_t *pos_table, const int32_t *pos);
/* A linear layer with its norm before and its activation, RoPE and cache
 * append or post-norm after (backends/decode_ops.h, coda_decode_linear_job). */
coda_status coda_decode_linear(coda_context ctx, const coda_decode_linear_job *j);
coda_status coda_decode_attention(coda_context ctx, const coda_decode_rows *r, uint16_t *o,
                                  const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                                  float *work, unsigned *ticket, int splits);
coda_status coda_decode_gather_rows(coda_context ctx, float *dst, const float *src,
                                    const int32_t *dst_rows, int64_t n, int64_t cols,
                                    float softcap);
coda_status coda_decode_sample(coda_context ctx, int32_t *tokens, const float *logits,
                               const int32_t *pos, int64_t B, int64_t V, double temperature,
                               int top_k, double top_p, uint64_t seed);
/* A one-row step in one kernel (backends/decode_ops.h, coda_decode_row_step_job);
 * coda_decode_row_step_ok says whether the backend takes the job's shapes
 * (0 with the reason in msg: it has no such kernel, or a dimension). */
int coda_decode_row_step_ok(coda_context ctx, const coda_decode_row_step_job *j, char *msg,
                            size_t cap);
coda_status coda_decode_row_step(coda_context ctx, const coda_decode_row_step_job *j);

#endif
