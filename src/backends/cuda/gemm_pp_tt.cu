/* Instantiations of the 128x128 pingpong mainloop for trans_a = T, trans_b = T
 * (one file per layout and schedule keeps each nvcc run short). */
#include "gemm_configs.h"

namespace coda_sm90 {
template cudaError_t launch_gemm<128, 6, true, true, true, false>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, true, true, true>(const GemmLaunch &);
}  // namespace coda_sm90
