/* coda_map on the GPU: a generated epilogue functor run without a GEMM.
 *
 * The kernel is the epilogue half of the Hopper GEMM consumer: each CTA is
 * one 128-thread warpgroup that owns a 64 x BN block of the domain (the
 * rows a consumer warpgroup owns in the cooperative GEMM, the columns of a
 * CTA tile), builds every thread's AccFragment<BN> with the mainloop's
 * layout (row0 = 64·tm + 16·warp + lane/4, col0 = BN·tn + 2·(lane%4)),
 * values 0 (the program never reads acc), and calls the same functor with
 * the same EpiScratch size and named barrier. Row, column and segmented
 * partials therefore have the GEMM's shapes and summation order (tile_m =
 * 64, tile_n = BN). The translation unit is the fused GEMM's (the mainloop
 * template is left uninstantiated) plus the wrapper below, compiled and
 * cached on disk by the same NVRTC path. On the sm80 path it is the sm80
 * GEMM's (gemm_sm80.cuh: the same fragment layout, no TMA), compiled for
 * the device's own architecture as the sm80 GEMMs are (coda_epi_target). */
#include "backends/cuda/gplan.h"
#include "backends/cuda/backend.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/epi_codegen.h"

#include "base/arch.h"
#include "base/internal.h"
#include "lang/ir.h"

#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CODA_MAP_NS is the mainloop's namespace (coda_sm90 or coda_sm80: the
 * seam types AccFragment, EpiScratch and wg_sync of either) and
 * CODA_MAP_BAR the epilogue's named barrier, defined before this text. */
static const char kMapKernel[] =
    "namespace coda_map {\n"
    "/* One warpgroup per CTA; a grid-stride loop over the 64 x BN blocks. */\n"
    "template <int BN>\n"
    "__global__ void __launch_bounds__(128) map_kernel(int tiles_m, int tiles_n,\n"
    "                                                  const __grid_constant__ CodaEpi epi) {\n"
    "  __shared__ __align__(1024) float scratch[CODA_MAP_NS::kEpiScratchBytes / 4];\n"
    "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "  const CODA_MAP_NS::EpiScratch sc = {scratch, CODA_MAP_BAR};\n"
    "  CODA_MAP_NS::AccFragment<BN> f;\n"
    "  const long long units = (long long)tiles_m * tiles_n;\n"
    "  for (long long u = blockIdx.x; u < units; u += gridDim.x) {\n"
    "    /* the previous block's scratch readers are done before it is reused */\n"
    "    if (u != blockIdx.x) CODA_MAP_NS::wg_sync(CODA_MAP_BAR);\n"
    "    const int tm = (int)(u / tiles_n), tn = (int)(u % tiles_n);\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < BN / 2; ++i) f.v[i] = 0.f;\n"
    "    f.row0 = tm * 64 + warp * 16 + lane / 4;\n"
    "    f.col0 = tn * BN + (lane % 4) * 2;\n"
    "    f.split = 0;\n"
    "    epi(f, sc);\n"
    "  }\n"
    "  epi.finish();\n"
    "}\n"
    "}  // namespace coda_map\n";
static const char kMapSm90[] = "#define CODA_MAP_NS coda_sm90\n#define CODA_MAP_BAR coda_sm90::kEpiBar\n";
/* (barrier 0 is __syncthreads'; the sm80 GEMM's groups take 1 and 2) */
static const char kMapSm80[] = "#define CODA_MAP_NS coda_sm80\n#define CODA_MAP_BAR 1\n";

/* Cache key of a program's map kernel inside a context. */
static uint64_t map_key(coda_program p) {
  const uint64_t key = coda_epi_program_key(p, 0x6d6170u /* "map" */);
  return coda_fnv1a64(kMapKernel, sizeof kMapKernel - 1, key);
}
/* (a context's kernels are of its one path: the path needs no place in
 * the key; the compiled files' key holds the target and the source) */

/* Source and kernel name expression of a program's map kernel. */
static coda_status map_binary(coda_context ctx, coda_program p, coda_epi_binary *out) {
  memset(out, 0, sizeof *out);
  coda_epi_config cfg = coda_epi_default_config();
  coda_cuda_epi_arch(ctx, &cfg); /* the sm80 path: its fragment, for the device's own sm_8x/9x */
  coda_epi_config_for(p, &cfg);
  char *src = coda_epi_full_source(ctx, p, &cfg, NULL);
  if (!src) return CODA_ERR_NOT_SUPPORTED;
  const char *ns = cfg.arch == CODA_PATH_SM80 ? kMapSm80 : kMapSm90;
  const size_t n = strlen(src), nn = strlen(ns);
  char *full = malloc(n + nn + sizeof kMapKernel + 1);
  if (!full) {
    free(src);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for the map kernel source");
  }
  memcpy(full, src, n);
  memcpy(full + n, ns, nn);
  memcpy(full + n + nn, kMapKernel, sizeof kMapKernel);
  free(src);
  char expr[64], target[16];
  snprintf(expr, sizeof expr, "coda_map::map_kernel<%d>", CODA_EPI_BN);
  coda_status s = coda_epi_compile_for(ctx, coda_epi_target(&cfg, target, sizeof target), full, expr,
                                       coda_program_math(p), 0, &out->cubin, &out->size,
                                       &out->lowered, NULL, &out->from_cache, &out->spill);
  free(full);
  return s;
}

coda_status coda_cuda_map_precompile(coda_context ctx, coda_program p, int *from_cache) {
  coda_status s = coda_epi_supported(ctx, p);
  if (s != CODA_OK) return s;
  coda_epi_binary b;
  s = map_binary(ctx, p, &b);
  if (s == CODA_OK && from_cache) *from_cache = b.from_cache;
  coda_epi_binary_free(&b);
  return s;
}

coda_status coda_cuda_map(coda_context ctx, coda_program program, int64_t M, int64_t N,
                          const coda_tensor *const *inputs, const coda_tensor *const *outputs,
                          const coda_tensor *const *partials, coda_tiling tiling) {
  coda_status st = coda_epi_supported(ctx, program);
  if (st != CODA_OK) return st;
  if (tiling.tile_m != CODA_EPI_TILE_M || tiling.tile_n != CODA_EPI_BN)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA map: tiling %d x %d; the GPU computes partials for tile_m = %d and "
                     "tile_n = %d (see coda_preferred_tiling)",
                     tiling.tile_m, tiling.tile_n, CODA_EPI_TILE_M, CODA_EPI_BN);
  const int64_t lim = ((int64_t)1 << 31) - 256;
  if (M >= lim || N >= lim) return coda_fail(ctx, CODA_ERR_OVERFLOW, "CUDA map: a dimension exceeds 2^31");
  if (M == 0 || N == 0) return CODA_OK;
  cudaError_t e = cudaSetDevice(ctx->opts.device);
  /* cudaFree(NULL) makes the primary context current (not while the
   * stream is captured: it has a current context, and a capture does not
   * allow the call) */
  if (e == cudaSuccess && !coda_cuda_capturing(ctx)) e = cudaFree(NULL);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA map: device setup failed: %s", cudaGetErrorString(e));
  }
  const uint64_t key = map_key(program);
  void *fn = coda_cuda_kernel_find(ctx, key);
  if (!fn) {
    coda_epi_binary b;
    if ((st = map_binary(ctx, program, &b)) != CODA_OK) return st;
    st = coda_cuda_kernel_add(ctx, key, b.cubin, b.lowered, &fn);
    coda_epi_binary_free(&b);
    if (st != CODA_OK) return st;
  }
  coda_epi_params pp; /* the same block as the fused GEMM's, without TMA store maps */
  coda_epi_fill_params(&pp, program, inputs, outputs, partials, M, N);
  int tiles_m = (int)((M + CODA_EPI_TILE_M - 1) / CODA_EPI_TILE_M);
  int tiles_n = (int)((N + CODA_EPI_BN - 1) / CODA_EPI_BN);
  int64_t units = (int64_t)tiles_m * tiles_n;
  /* enough CTAs of 128 threads to fill the GPU several times over */
  unsigned grid = (unsigned)(units < 65536 ? units : 65536);
  void *args[] = {&tiles_m, &tiles_n, &pp};
  return coda_cuda_kernel_launch(ctx, fn, grid, 128, 0, args);
}
