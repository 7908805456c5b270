/* Instantiations of the cluster-of-2 mainloops (128x256 cooperative, 128x128
 * pingpong) for trans_a = T, trans_b = N. */
#include "gemm_configs.h"

namespace coda_sm90 {
template cudaError_t launch_gemm<256, 4, false, true, false, false, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<256, 4, false, true, false, true, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, true, false, false, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, true, false, true, 2>(const GemmLaunch &);
}  // namespace coda_sm90
