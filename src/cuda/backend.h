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
#endif
#ifdef __cplusplus
}
#endif
#endif
