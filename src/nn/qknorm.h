/* QK-norm: per-head RMSNorm of q and k (y = x r gamma per head, r =
 * 1/sqrt(mean over the head of x^2 + eps)), as a GEMM epilogue that emits
 * per-head partials plus map passes (programs/qknorm_*.coda). */
#ifndef CODA_NN_QKNORM_H
#define CODA_NN_QKNORM_H

#include "coda.h"

/* The projection's epilogue: stores x = acc and the per-head partials
 *   reduce ss = rowsum(acc * acc) per head_dim
 *   finish r  = rstd(ss, eps)        (M x N/head_dim: one r per row and head)
 * Built with the builder because the segment width (head_dim) and eps are
 * numbers in the program. Argument names: x (output, dtype), ss, r. */
coda_status qknorm_stats_program(coda_context ctx, int head_dim, double eps,
                                 coda_dtype dtype, coda_program *out);

#endif
