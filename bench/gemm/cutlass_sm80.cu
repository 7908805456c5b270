/* CUTLASS's sm_80 GEMM (mma.sync m16n8k16, cp.async multistage: the
 * CUTLASS 2.x device API) as a reference column of bench_gemm (--cutlass):
 * the "cuBLAS-class mma.sync kernel" the sm80 path is held to. Built only
 * when CMake gets CODA_CUTLASS_INCLUDE (bench/gemm/fetch_cutlass.sh): the
 * headers are a benchmark dependency, never part of the library.
 *
 * Row-major D (M x N, bf16) = op(A) op(B), fp32 accumulate, alpha 1, beta
 * 0, in bench_gemm's storage: A is M x K (N) or K x M (T), B is K x N (N)
 * or N x K (T), all row-major. In CUTLASS's terms a stored K x M row-major
 * A is the M x K column-major one with the same leading dimension, so the
 * transposes become layouts. The tile configurations are ones CUTLASS's
 * profiler ranks among the fastest for bf16 on an A100, each fitting its
 * 164 KiB of shared memory; bench_gemm times each and reports the best. */
#include "cutlass_sm80.h"

#include <cutlass/gemm/device/gemm.h>

namespace {

using bf16 = cutlass::bfloat16_t;
using Row = cutlass::layout::RowMajor;
using Col = cutlass::layout::ColumnMajor;

template <class LayoutA, class LayoutB, int TM, int TN, int TK, int WM, int WN, int Stages>
using Gemm = cutlass::gemm::device::Gemm<
    bf16, LayoutA, bf16, LayoutB, bf16, Row, float, cutlass::arch::OpClassTensorOp,
    cutlass::arch::Sm80, cutlass::gemm::GemmShape<TM, TN, TK>, cutlass::gemm::GemmShape<WM, WN, TK>,
    cutlass::gemm::GemmShape<16, 8, 16>,
    cutlass::epilogue::thread::LinearCombination<bf16, 8, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages, 8, 8>;

template <class G>
int run(int M, int N, int K, const void *a, int64_t lda, const void *b, int64_t ldb, void *d,
        int64_t ldd, cudaStream_t stream) {
  typename G::Arguments args({M, N, K}, {(const bf16 *)a, lda}, {(const bf16 *)b, ldb},
                             {(bf16 *)d, ldd}, {(bf16 *)d, ldd}, {1.0f, 0.0f});
  G gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st == cutlass::Status::kSuccess) st = gemm.initialize(args, nullptr, stream);
  if (st == cutlass::Status::kSuccess) st = gemm(stream);
  return st == cutlass::Status::kSuccess ? 0 : 1 + (int)st;
}

/* One tile configuration over bench_gemm's three layouts (NT: forward, NN:
 * dgrad, TN: wgrad); TT is not one of its shapes. */
template <int TM, int TN, int TK, int WM, int WN, int Stages>
int run_layouts(int M, int N, int K, coda_transpose ta, coda_transpose tb, const void *a,
                int64_t lda, const void *b, int64_t ldb, void *d, int64_t ldd,
                cudaStream_t stream) {
  if (ta == CODA_N && tb == CODA_T)
    return run<Gemm<Row, Col, TM, TN, TK, WM, WN, Stages>>(M, N, K, a, lda, b, ldb, d, ldd, stream);
  if (ta == CODA_N && tb == CODA_N)
    return run<Gemm<Row, Row, TM, TN, TK, WM, WN, Stages>>(M, N, K, a, lda, b, ldb, d, ldd, stream);
  if (ta == CODA_T && tb == CODA_N)
    return run<Gemm<Col, Row, TM, TN, TK, WM, WN, Stages>>(M, N, K, a, lda, b, ldb, d, ldd, stream);
  return -1;
}

const char *const kNames[] = {"128x256x64 s3", "256x128x64 s3", "128x128x64 s4"};

}  // namespace

int bench_cutlass_sm80_configs(void) { return (int)(sizeof kNames / sizeof kNames[0]); }

const char *bench_cutlass_sm80_name(int config) {
  return config >= 0 && config < bench_cutlass_sm80_configs() ? kNames[config] : "?";
}

int bench_cutlass_sm80_gemm(int config, int M, int N, int K, coda_transpose ta, coda_transpose tb,
                            const void *a, int64_t lda, const void *b, int64_t ldb, void *d,
                            int64_t ldd, cudaStream_t stream) {
  switch (config) {
  case 0: return run_layouts<128, 256, 64, 64, 64, 3>(M, N, K, ta, tb, a, lda, b, ldb, d, ldd, stream);
  case 1: return run_layouts<256, 128, 64, 64, 64, 3>(M, N, K, ta, tb, a, lda, b, ldb, d, ldd, stream);
  case 2: return run_layouts<128, 128, 64, 64, 64, 4>(M, N, K, ta, tb, a, lda, b, ldb, d, ldd, stream);
  default: return -2;
  }
}
