/* Instantiations of the 128x256 cooperative mainloop for trans_a = N, trans_b = T
 * (one file per layout and schedule keeps each nvcc run short). */
#include "gemm_configs.h"

namespace coda_sm90 {
template cudaError_t launch_gemm<256, 4, false, false, true, false>(const GemmLaunch &);
template cudaError_t launch_gemm<256, 4, false, false, true, true>(const GemmLaunch &);
}  // namespace coda_sm90
