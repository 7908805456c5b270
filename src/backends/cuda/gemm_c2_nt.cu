/* Instantiations of the cluster-of-2 mainloops (128x256 cooperative, 128x128
 * pingpong) for trans_a = N, trans_b = T. */
#include "gemm_configs.h"

namespace coda_sm90 {
template cudaError_t launch_gemm<256, 4, false, false, true, false, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<256, 4, false, false, true, true, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, false, true, false, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, false, true, true, 2>(const GemmLaunch &);
}  // namespace coda_sm90
