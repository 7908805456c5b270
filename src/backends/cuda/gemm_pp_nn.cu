/* Instantiations of the 128x128 pingpong mainloop for trans_a = N, trans_b = N
 * (one file per layout and schedule keeps each nvcc run short). */
#include "gemm_configs.h"

namespace coda_sm90 {
template cudaError_t launch_gemm<128, 6, true, false, false, false>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, false, false, true>(const GemmLaunch &);
}  // namespace coda_sm90
