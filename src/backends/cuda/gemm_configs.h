/* Tile configurations of the Hopper mainloop, in one table. Each entry is
 * instantiated for the four layouts x two operand types in gemm_<ta><tb>.cu
 * (cooperative), gemm_pp_<ta><tb>.cu (pingpong) and gemm_c2_<ta><tb>.cu
 * (both schedules, clusters of 2 CTAs along M). */
#pragma once
#include "gemm_sm90.cuh"

namespace coda_sm90 {

typedef cudaError_t (*LaunchFn)(const GemmLaunch &);

struct TileConfig {
  const char *name;
  int bm, bn, bk, stages, consumers;
  int cluster; /* CTAs per cluster along M (B multicast); 1 = none */
  LaunchFn fn[2][2][2]; /* [trans_a][trans_b][f16] */
};

#define CODA_SM90_CONFIG_EXTERN(BN, ST, PP, CM)                                      \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, false, false, CM>(const GemmLaunch &); \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, false, true, CM>(const GemmLaunch &);  \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, true, false, CM>(const GemmLaunch &);  \
  extern template cudaError_t launch_gemm<BN, ST, PP, false, true, true, CM>(const GemmLaunch &);   \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, false, false, CM>(const GemmLaunch &);  \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, false, true, CM>(const GemmLaunch &);   \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, true, false, CM>(const GemmLaunch &);   \
  extern template cudaError_t launch_gemm<BN, ST, PP, true, true, true, CM>(const GemmLaunch &);

#define CODA_SM90_CONFIG_FNS(BN, ST, PP, CM)                                                        \
  {{{launch_gemm<BN, ST, PP, false, false, false, CM>, launch_gemm<BN, ST, PP, false, false, true, CM>},    \
    {launch_gemm<BN, ST, PP, false, true, false, CM>, launch_gemm<BN, ST, PP, false, true, true, CM>}},     \
   {{launch_gemm<BN, ST, PP, true, false, false, CM>, launch_gemm<BN, ST, PP, true, false, true, CM>},      \
    {launch_gemm<BN, ST, PP, true, true, false, CM>, launch_gemm<BN, ST, PP, true, true, true, CM>}}}

}  // namespace coda_sm90
