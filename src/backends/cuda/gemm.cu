/* Host side of the Hopper GEMM: availability probe, argument checks, TMA
 * tensor maps, tile-configuration choice and launch.
 *
 * The driver API is never linked: cuTensorMapEncodeTiled is looked up at run
 * time through the runtime's driver entry-point query, and the runtime is
 * linked statically, so a binary built with CUDA starts (and reports no GPU)
 * on a machine without a driver. */
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */

#include "backends/cuda/backend.h"
#include "backends/cuda/gemm_configs.h"
#include "backends/cuda/gemm_internal.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/workspace.h"

extern "C" {
#include "base/internal.h"
}

using namespace coda_sm90;

namespace coda_sm90 {
CODA_SM90_CONFIG_EXTERN(256, 4, false, 1)
CODA_SM90_CONFIG_EXTERN(128, 6, true, 1)
CODA_SM90_CONFIG_EXTERN(256, 4, false, 2)
CODA_SM90_CONFIG_EXTERN(128, 6, true, 2)
}

/* The tile table (bm x bn x bk, pipeline stages, schedule, cluster). New
 * entries go at the end: tuned choices and benchmark tables name entries by
 * index. The cluster entries (two CTAs along M share B by multicast) are
 * tuner candidates for large shapes only; the fixed default never picks
 * them. */
static const TileConfig kConfigs[] = {
    {"128x256x64 s4 cooperative", 128, 256, 64, 4, 2, 1, CODA_SM90_CONFIG_FNS(256, 4, false, 1)},
    {"128x128x64 s6 pingpong", 128, 128, 64, 6, 2, 1, CODA_SM90_CONFIG_FNS(128, 6, true, 1)},
    {"128x256x64 s4 cooperative c2", 128, 256, 64, 4, 2, 2, CODA_SM90_CONFIG_FNS(256, 4, false, 2)},
    {"128x128x64 s6 pingpong c2", 128, 128, 64, 6, 2, 2, CODA_SM90_CONFIG_FNS(128, 6, true, 2)},
};
static const int kNumConfigs = (int)(sizeof kConfigs / sizeof kConfigs[0]);

extern "C" int coda_cuda_gemm_num_configs(void) { return kNumConfigs; }
extern "C" const char *coda_cuda_gemm_config_name(int i) {
  return i >= 0 && i < kNumConfigs ? kConfigs[i].name : "?";
}

/* Split-K when the tiles fill less than half of the machine and K is long:
 * enough splits to fill it, each at least 16 k-blocks deep. */
static int default_splits(int64_t tiles, int64_t num_kb, int num_sms) {
  if (tiles * 2 > num_sms || num_kb < 32) return 1;
  int64_t s = num_sms / tiles;
  if (s > num_kb / 16) s = num_kb / 16;
  if (s > 16) s = 16;
  return s < 1 ? 1 : (int)s;
}

/* Default choice per shape, from the measurements in bench/results/gemm-*.md:
 * the cooperative 128x256 tile (less L2 traffic per flop) wins for long K
 * when its tiles fill the waves well, for split-K, and when it fits the
 * machine in one wave that pingpong would need two for; otherwise pingpong
 * (smaller tiles: better wave fill; its epilogue overlaps the other
 * consumer's MMAs). */
static double wave_fill(int64_t tiles, int num_sms) {
  const int64_t waves = (tiles + num_sms - 1) / num_sms;
  return (double)tiles / (double)(waves * num_sms);
}
extern "C" int coda_cuda_gemm_default_config(int64_t M, int64_t N, int64_t K, int num_sms) {
  const int64_t tiles_coop = ((M + 127) / 128) * ((N + 255) / 256);
  const int64_t tiles_ping = ((M + 127) / 128) * ((N + 127) / 128);
  if (default_splits(tiles_ping, (K + 63) / 64, num_sms) > 1) return 0;
  if (K >= 8192 && wave_fill(tiles_coop, num_sms) >= 0.85) return 0;
  if (tiles_coop <= num_sms && tiles_ping > num_sms && tiles_coop * 4 >= num_sms * 3) return 0;
  return 1;
}

/* Split-K finish: D = alpha * sum_s W[s] (+ D), the splits summed in order
 * in fp32, rounded once to D's type. */
__global__ void splitk_reduce(const float *__restrict__ w, int splits, long long stride, int M,
                              int N, StoreEpilogue e) {
  const long long total = (long long)M * N;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < splits; ++k) s += w[k * stride + i];
    const int r = (int)(i / N), c = (int)(i % N);
    e.store1(r, c, s);
  }
}

extern "C" int coda_cuda_device_usable(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();
    return 0;
  }
  for (int d = 0; d < n; ++d) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    /* sm_90 runs every kernel; 8.0 and newer the sm80 path (base/arch.h:
     * the fused GEMMs, compiled at run time for the device) */
    if (major >= 8) return 1;
  }
  return 0;
}

static coda_status cuda_fail(coda_context ctx, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA GEMM: %s failed: %s", what, cudaGetErrorString(e));
}

/* TMA reads rows of a 16-bit matrix: the base address and the row pitch
 * (ld * 2 bytes) must be multiples of 16 bytes. */
static coda_status check_tma_operand(coda_context ctx, const char *name, const coda_tensor *t) {
  if (((uintptr_t)t->data & 15) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT,
                     "CUDA GEMM: %s data pointer is not 16-byte aligned (TMA requires it)", name);
  if ((t->ld * 2) % 16 != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT,
                     "CUDA GEMM: %s leading dimension %lld is not a multiple of 8 elements "
                     "(TMA requires 16-byte row pitch)",
                     name, (long long)t->ld);
  if (t->ld >= ((int64_t)1 << 39))
    return coda_fail(ctx, CODA_ERR_LAYOUT, "CUDA GEMM: %s leading dimension %lld is too large",
                     name, (long long)t->ld);
  return CODA_OK;
}

CUresult coda_cuda_operand_map(void *encode, CUtensorMap *map, const coda_tensor *t,
                               uint32_t box_cols, uint32_t box_rows) {
  cuuint64_t dims[2] = {(cuuint64_t)t->cols, (cuuint64_t)t->rows};
  cuuint64_t strides[1] = {(cuuint64_t)t->ld * 2};
  cuuint32_t box[2] = {box_cols, box_rows};
  cuuint32_t estr[2] = {1, 1};
  CUtensorMapDataType dt =
      t->dtype == CODA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return ((PFN_cuTensorMapEncodeTiled_v12000)encode)(map, dt, 2, t->data, dims, strides, box, estr,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* How the epilogue writes D (see StoreEpilogue): TMA bulk stores need D's
 * base, pitch and row length in 16-byte multiples (a row whose length is
 * not a multiple of 16 bytes was seen to get the rest of its last 16-byte
 * chunk written: the padding check of the GPU test caught it) and no split-K
 * partials. Accumulating, only fp32 D takes the TMA reduce-add: a 16-bit
 * reduce-add would round alpha * acc to D's type before the addition. */
extern "C" int coda_cuda_gemm_store_path(const coda_tensor *D, int accumulate, int splits) {
  const size_t es = coda_dtype_size(D->dtype);
  if (splits != 1 || ((uintptr_t)D->data & 15) != 0 || ((size_t)D->ld * es) % 16 != 0 ||
      ((size_t)D->cols * es) % 16 != 0)
    return CODA_GEMM_STORE_REGISTERS;
  if (!accumulate) return CODA_GEMM_STORE_TMA;
  return D->dtype == CODA_F32 ? CODA_GEMM_STORE_TMA_REDUCE : CODA_GEMM_STORE_REGISTERS;
}

/* The k-split count a request turns into: at most one split per k-block,
 * every split kbs k-blocks deep, splits that would start past K dropped. */
static int64_t effective_splits(int64_t req, int64_t num_kb, int64_t *kbs_out) {
  int64_t splits = req < 1 ? 1 : req;
  if (splits > num_kb) splits = num_kb;
  const int64_t kbs = (num_kb + splits - 1) / splits;
  if (kbs_out) *kbs_out = kbs;
  return (num_kb + kbs - 1) / kbs;
}

extern "C" int coda_cuda_gemm_candidates(int64_t M, int64_t N, int64_t K, int num_sms,
                                         int (*out)[2], int max) {
  static const int kTrySplits[] = {2, 3, 4, 6, 8, 12, 16};
  const int64_t num_kb = (K + 63) / 64;
  int n = 0;
  for (int c = 0; c < kNumConfigs; ++c) {
    const int64_t tiles = ((M + kConfigs[c].bm - 1) / kConfigs[c].bm) *
                          ((N + kConfigs[c].bn - 1) / kConfigs[c].bn);
    /* Clusters save L2-to-SM traffic, which limits only shapes that fill the
     * machine; there they run unsplit (the rules below give 1 split). */
    if (kConfigs[c].cluster > 1 && tiles < num_sms) continue;
    int64_t want[2 + sizeof kTrySplits / sizeof kTrySplits[0]];
    int nw = 0;
    want[nw++] = 1;
    want[nw++] = default_splits(tiles, num_kb, num_sms);
    /* More splits only while the tiles leave SMs idle, each split at least
     * 8 k-blocks deep and at most two waves of work units. */
    for (int s : kTrySplits)
      if (tiles < num_sms && s <= num_kb / 8 && tiles * s <= 2 * (int64_t)num_sms) want[nw++] = s;
    for (int i = 0; i < nw; ++i) {
      const int s = (int)effective_splits(want[i], num_kb, NULL);
      bool dup = false;
      for (int j = 0; j < n; ++j) dup |= out[j][0] == c && out[j][1] == s;
      if (!dup && n < max) {
        out[n][0] = c;
        out[n][1] = s;
        ++n;
      }
    }
  }
  return n;
}

extern "C" coda_status coda_cuda_gemm(coda_context ctx, coda_transpose trans_a,
                                      const coda_tensor *A, coda_transpose trans_b,
                                      const coda_tensor *B, const coda_tensor *D, float alpha,
                                      int accumulate) {
  return coda_cuda_gemm_config(ctx, trans_a, A, trans_b, B, D, alpha, accumulate, -1, 0, 0);
}

static coda_status gemm_run(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                            coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                            float alpha, int accumulate, int config, int splits_req, int discard);

extern "C" coda_status coda_cuda_gemm_config(coda_context ctx, coda_transpose trans_a,
                                             const coda_tensor *A, coda_transpose trans_b,
                                             const coda_tensor *B, const coda_tensor *D,
                                             float alpha, int accumulate, int config,
                                             int splits_req, int discard) {
  /* The automatic choice goes through the autotuner when the context has
   * tuning on (gemm_tune.cu); it calls back here with a forced choice. */
  if (config < 0 && splits_req <= 0 && !discard && coda_cuda_gemm_autotune_enabled(ctx))
    return coda_cuda_gemm_tuned(ctx, trans_a, A, trans_b, B, D, alpha, accumulate);
  return gemm_run(ctx, trans_a, A, trans_b, B, D, alpha, accumulate, config, splits_req, discard);
}

/* The operands' presence, shapes, dtypes and layouts; op(A) is M x K,
 * op(B) K x N. */
static coda_status check_gemm_args(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                                   coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                                   int64_t *m, int64_t *n, int64_t *k) {
  if (!A || !B || !D || !A->data || !B->data || !D->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA GEMM: null tensor");
  if ((trans_a != CODA_N && trans_a != CODA_T) || (trans_b != CODA_N && trans_b != CODA_T))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA GEMM: bad transpose flag");
  const int64_t M = trans_a == CODA_N ? A->rows : A->cols;
  const int64_t K = trans_a == CODA_N ? A->cols : A->rows;
  const int64_t KB = trans_b == CODA_N ? B->rows : B->cols;
  const int64_t N = trans_b == CODA_N ? B->cols : B->rows;
  if (K != KB || D->rows != M || D->cols != N)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                     "CUDA GEMM: op(A) is %lld x %lld, op(B) is %lld x %lld, D is %lld x %lld",
                     (long long)M, (long long)K, (long long)KB, (long long)N,
                     (long long)D->rows, (long long)D->cols);
  if (A->dtype != B->dtype || (A->dtype != CODA_BF16 && A->dtype != CODA_F16))
    return coda_fail(ctx, CODA_ERR_DTYPE,
                     "CUDA GEMM: A and B must both be bf16 or both f16 (got %s and %s)",
                     coda_dtype_name(A->dtype), coda_dtype_name(B->dtype));
  if (D->dtype != CODA_BF16 && D->dtype != CODA_F16 && D->dtype != CODA_F32)
    return coda_fail(ctx, CODA_ERR_DTYPE, "CUDA GEMM: D must be bf16, f16 or f32 (got %s)",
                     coda_dtype_name(D->dtype));
  if (A->ld < A->cols || B->ld < B->cols || D->ld < D->cols)
    return coda_fail(ctx, CODA_ERR_LAYOUT, "CUDA GEMM: leading dimension smaller than columns");
  const int64_t lim = ((int64_t)1 << 31) - 256;
  if (M >= lim || N >= lim || K >= lim)
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "CUDA GEMM: a dimension exceeds 2^31");
  *m = M;
  *n = N;
  *k = K;
  return CODA_OK;
}

/* The epilogue that stores alpha * acc (+ D) into D: through registers,
 * or bulk (TMA) stores and fp32 reduce-adds where the view allows them. */
static coda_status store_epilogue(coda_context ctx, const coda_tensor *D, int64_t M, int64_t N,
                                  float alpha, int accumulate, int discard, int64_t splits,
                                  PFN_cuTensorMapEncodeTiled_v12000 encode, StoreEpilogue *out) {
  const size_t es = coda_dtype_size(D->dtype);
  out->d = D->data;
  out->ldd = (long long)D->ld;
  out->M = (int)M;
  out->N = (int)N;
  out->out_type = D->dtype == CODA_F32 ? kOutF32 : D->dtype == CODA_F16 ? kOutF16 : kOutBF16;
  out->accumulate = accumulate ? 1 : 0;
  out->pair_ok = (D->ld % 2 == 0) && ((uintptr_t)D->data % (2 * es) == 0);
  out->vec_ok = (D->ld % 4 == 0) && ((uintptr_t)D->data % (4 * es) == 0);
  out->split_stride = 0;
  out->discard = discard;
  out->use_tma = 0;
  /* Bulk (TMA) stores, or reduce-adds into fp32 D when accumulating; the
   * map is the same (coda_cuda_gemm_store_path says which views qualify). */
  if (coda_cuda_gemm_store_path(D, accumulate, (int)splits) != CODA_GEMM_STORE_REGISTERS) {
    const uint32_t box_cols = D->dtype == CODA_F32 ? 32 : 64; /* 128 bytes, the swizzle span */
    cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    cuuint64_t strides[1] = {(cuuint64_t)D->ld * es};
    cuuint32_t box[2] = {box_cols, 64};
    cuuint32_t estr[2] = {1, 1};
    CUtensorMapDataType dt = D->dtype == CODA_F32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                             : D->dtype == CODA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                    : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUresult r = encode(&out->tmap_d, dt, 2, D->data, dims, strides, box, estr,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      return coda_fail(ctx, CODA_ERR_BACKEND,
                       "CUDA GEMM: cuTensorMapEncodeTiled (D) failed (error %d)", (int)r);
    out->use_tma = 1;
  }
  out->alpha = alpha;
  return CODA_OK;
}

static coda_status gemm_run(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                            coda_transpose trans_b, const coda_tensor *B, const coda_tensor *D,
                            float alpha, int accumulate, int config, int splits_req, int discard) {
  if (config >= kNumConfigs)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA GEMM: no tile configuration %d", config);
  /* the prebuilt kernels are sm_90a: the sm80 path runs its GEMMs fused
   * (coda_cuda_gemm_path) */
  coda_status hs = coda_cuda_hopper_only(ctx, "CUDA GEMM (the prebuilt kernels of gemm_*.cu)",
                                         "wgmma, TMA and clusters");
  if (hs != CODA_OK) return hs;
  int64_t M, N, K;
  coda_status st = check_gemm_args(ctx, trans_a, A, trans_b, B, D, &M, &N, &K);
  if (st != CODA_OK) return st;
  if (M == 0 || N == 0) return CODA_OK;

  const int dev = ctx ? ctx->opts.device : 0;
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) return cuda_fail(ctx, e, "cudaSetDevice");
  int major = 0, minor = 0, num_sms = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  e = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return cuda_fail(ctx, e, "cudaDeviceGetAttribute");
  if (major != 9 || minor != 0)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA GEMM: device %d has compute capability %d.%d; the kernels are built "
                     "for sm_90a (Hopper)",
                     dev, major, minor);

  if (K == 0) { /* D = alpha * 0 (+ D): only the non-accumulating case writes. */
    if (accumulate) return CODA_OK;
    const size_t es = coda_dtype_size(D->dtype);
    e = cudaMemset2DAsync(D->data, (size_t)D->ld * es, 0, (size_t)N * es, (size_t)M,
                          coda_cuda_stream(ctx));
    return e == cudaSuccess ? CODA_OK : cuda_fail(ctx, e, "cudaMemset2DAsync");
  }

  st = check_tma_operand(ctx, "A", A);
  if (st != CODA_OK) return st;
  st = check_tma_operand(ctx, "B", B);
  if (st != CODA_OK) return st;

  /* Looked up once per process (the driver's entry points do not change):
   * a call then does no driver query, also while its stream is captured. */
  static void *encode_fn = NULL;
  void *fn = encode_fn;
  if (!fn) {
    cudaDriverEntryPointQueryResult q;
    e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
      (void)cudaGetLastError();
      return coda_fail(ctx, CODA_ERR_BACKEND,
                       "CUDA GEMM: the driver does not provide cuTensorMapEncodeTiled");
    }
    encode_fn = fn;
  }
  PFN_cuTensorMapEncodeTiled_v12000 encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;

  const TileConfig *cfg = &kConfigs[config >= 0 ? config : coda_cuda_gemm_default_config(M, N, K, num_sms)];
  GemmLaunch p;
  /* K-major operands load one box {64 k, tile rows}; MN-major operands load
   * 64 x 64 chunks (the 128-byte swizzle spans at most 64 16-bit values). */
  CUresult r = coda_cuda_operand_map((void *)encode, &p.a, A, 64, trans_a == CODA_N ? (uint32_t)cfg->bm : 64u);
  if (r == CUDA_SUCCESS)
    /* Clusters: each CTA loads (and multicasts) 1/cluster of the B box. */
    r = coda_cuda_operand_map((void *)encode, &p.b, B, 64,
                              trans_b == CODA_T ? (uint32_t)(cfg->bn / cfg->cluster) : 64u);
  if (r != CUDA_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA GEMM: cuTensorMapEncodeTiled failed (error %d)",
                     (int)r);
  p.M = (int)M;
  p.N = (int)N;
  p.K = (int)K;
  p.group_m = 16;
  const int64_t tiles = ((M + cfg->bm - 1) / cfg->bm) * ((N + cfg->bn - 1) / cfg->bn);
  const int64_t num_kb = (K + 63) / 64;
  int64_t kbs;
  const int64_t splits = effective_splits(
      splits_req > 0 ? splits_req : default_splits(tiles, num_kb, num_sms), num_kb, &kbs);
  if (tiles * splits >= ((int64_t)1 << 31))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "CUDA GEMM: too many tiles");
  p.splits = (int)splits;
  p.kbs = (int)kbs;
  /* Persistent grid: one CTA per SM at most, none idle from the start. A
   * cluster of `cl` CTAs takes `cl` row tiles of one column tile per unit. */
  const int cl = cfg->cluster;
  const int64_t units = (((M + cfg->bm - 1) / cfg->bm + cl - 1) / cl) *
                        ((N + cfg->bn - 1) / cfg->bn) * splits;
  const int64_t max_units = num_sms / cl;
  p.grid = (int)((units < max_units ? units : max_units) * cl);
  p.stream = coda_cuda_stream(ctx);
  StoreEpilogue out;
  st = store_epilogue(ctx, D, M, N, alpha, accumulate, discard, splits, encode, &out);
  if (st != CODA_OK) return st;

  /* Split-K: the kernel writes each split's fp32 partial to a workspace
   * (splits x M x N, the context's split-K slot: calls run one after
   * another on the context's stream, so one buffer serves all of them and
   * a call allocates nothing once it is large enough, which lets a plan run
   * be captured into a graph), then splitk_reduce sums them in a fixed
   * order and applies alpha / accumulate. */
  float *ws = NULL;
  if (splits > 1) {
    void *w = NULL;
    if (!ctx) return CODA_ERR_INVALID_ARGUMENT; /* the workspace lives on the context */
    st = coda_cuda_workspace(ctx, CODA_CUDA_WS_SPLITK, (size_t)splits * M * N * sizeof(float), &w);
    if (st != CODA_OK) return st;
    ws = (float *)w;
    p.epi = out;
    p.epi.d = ws;
    p.epi.ldd = N;
    p.epi.out_type = kOutF32;
    p.epi.accumulate = 0;
    p.epi.alpha = 1.0f;
    p.epi.pair_ok = N % 2 == 0;
    p.epi.vec_ok = N % 4 == 0;
    p.epi.split_stride = (long long)M * N;
    p.epi.use_tma = 0;
  } else {
    p.epi = out;
  }

  LaunchFn launch = cfg->fn[trans_a == CODA_T][trans_b == CODA_T][A->dtype == CODA_F16];
  e = launch(p);
  coda_status st_launch = CODA_OK;
  if (e == cudaSuccess) st_launch = coda_cuda_check_launch(ctx, "GEMM mainloop");
  if (e == cudaSuccess && st_launch == CODA_OK && ws) {
    splitk_reduce<<<2 * num_sms, 256, 0, p.stream>>>(ws, (int)splits, (long long)M * N, (int)M,
                                                     (int)N, out);
    st_launch = coda_cuda_check_launch(ctx, "GEMM split-K reduction");
  }
  if (st_launch != CODA_OK) return st_launch;
  if (e != cudaSuccess) return cuda_fail(ctx, e, "kernel launch");
  return CODA_OK;
}
