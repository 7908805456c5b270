/* The backends this build has: the one place that knows (see backend.h). */
#include "backends/backend.h"

#ifdef CODA_HAVE_CUDA
extern const coda_backend_ops coda_cuda_backend_ops;
#endif

const coda_backend_ops *coda_backend_ops_for(coda_backend b) {
  switch (b) {
  case CODA_BACKEND_CPU: return &coda_cpu_backend_ops;
#ifdef CODA_HAVE_CUDA
  case CODA_BACKEND_CUDA: return &coda_cuda_backend_ops;
#else
  case CODA_BACKEND_CUDA: return NULL;
#endif
  }
  return NULL;
}
