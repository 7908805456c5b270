/* Instantiations of the cluster-of-2 mainloops (128x256 cooperative, 128x128
 * pingpong) for trans_a = N, trans_b = N. */
#include "gemm_configs.h"

namespace coda_sm90 {
template cudaError_t launch_gemm<256, 4, false, false, false, false, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<256, 4, false, false, false, true, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, false, false, false, 2>(const GemmLaunch &);
template cudaError_t launch_gemm<128, 6, true, false, false, true, 2>(const GemmLaunch &);
}  // namespace coda_sm90
