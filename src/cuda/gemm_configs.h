/* Tile configurations of the Hopper mainloop, in one table. Each entry is
 * instantiated for the four layouts x two operand types in gemm_<ta><tb>.cu
 * (cooperative) and gemm_pp_<ta><tb>.cu (pingpong). */
#pragma once
#include "gemm_sm90.cuh"

namespace coda_sm90 {

typedef cudaError_t (*LaunchFn)(const GemmLaunch &);

struct TileConfig {
  const char *name;
  int bm, bn, bk, stages, consumers;
  LaunchFn fn[2][2][2]; /* [trans_a][trans_b][f16] */
};

#define CODA_SM90_CONFIG_EXTERN(BN, ST, PP)                                      \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, false, false>(const GemmLaunch &); \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, false, true>(const GemmLaunch &);  \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, true, false>(const GemmLaunch &);  \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, true, true>(const GemmLaunch &);   \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, false, false>(const GemmLaunch &);  \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, false, true>(const GemmLaunch &);   \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, true, false>(const GemmLaunch &);   \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, true, true>(const GemmLaunch &);

#define CODA_SM90_CONFIG_FNS(BN, ST, PP)                                                        \
  {{{launch_gemm<BN, ST, PP, false, false, false>, launch_gemm<BN, ST, PP, false, false, true>},    \
    {launch_gemm<BN, ST, PP, false, true, false>, launch_gemm<BN, ST, PP, false, true, true>}},     \
   {{launch_gemm<BN, ST, PP, true, false, false>, launch_gemm<BN, ST, PP, true, false, true>},      \
    {launch_gemm<BN, ST, PP, true, true, false>, launch_gemm<BN, ST, PP, true, true, true>}}}

}  // namespace coda_sm90
