/* The memory-bound passes a framework runs around a plain GEMM (bf16
 * storage, fp32 math), one CUDA kernel per operator, each reading its
 * inputs from and writing its outputs to device memory; plus the setup and
 * comparison kernels of bench_fused. All pointers are device pointers,
 * matrices row-major with leading dimension = columns unless an ld is
 * given; every launch is on the default stream and returns 0 or a CUDA
 * error code. Column counts of the bf16 passes are multiples of 8. */
#ifndef CODA_BENCH_UNFUSED_H
#define CODA_BENCH_UNFUSED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- setup ---- */
/* bf16 (dtype 0) or f32 (dtype 2) values ±scale·[0.1, 1), random sign
 * unless positive; never zero. */
int uf_fill(void *p, int dtype, size_t n, uint64_t seed, float scale, int positive);
/* i32 targets in [0, V), about 1 in 32 set to -100 (ignored). */
int uf_fill_targets(int32_t *p, size_t n, uint64_t seed, int V);
/* dst[m,k] = bf16(src[m,k] · r[m]) (the RMSNorm output a framework feeds its GEMM). */
int uf_rowscale(uint16_t *dst, const uint16_t *src, const float *r, int64_t M, int64_t K);

/* ---- the unfused passes ---- */
/* out = a + b (residual add) over n elements. */
int uf_add(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
/* RMSNorm forward, one row per block: rstd[m] = rsqrt(mean(x²) + eps),
 * h = bf16(x · rstd · w). N ≤ 8192. */
int uf_rmsnorm(uint16_t *h, float *rstd, const uint16_t *x, const uint16_t *w, int64_t M,
               int64_t N, float eps);
/* SwiGLU on interleaved pairs: y[m,j] = silu(t[m,2j]) · t[m,2j+1]; t M × 2F. */
int uf_swiglu(uint16_t *y, const uint16_t *t, int64_t M, int64_t F);
/* RoPE on the Q and K columns [0, nqk) of t (M × ld), adjacent pairs
 * (2j, 2j+1) of each head rotated by +θ, θ from the per-position tables
 * cs, sn (seq × hd/2, position = m % seq); writes out (M × ld, the same
 * columns). */
int uf_rope(uint16_t *out, const uint16_t *t, const float *cs, const float *sn, int64_t M,
            int64_t ld, int64_t nqk, int hd, int seq);
/* Cross-entropy statistics of bf16 logits (M × V), one row per block:
 * lse[m] = log Σ exp(l), pick[m] = l[m, tgt[m]] (0 if tgt outside [0, V)). */
int uf_ce(float *lse, float *pick, const uint16_t *logits, const int32_t *tgt, int64_t M,
          int64_t V);
/* Rows per block of uf_rmsnorm_bwd: its partial has ceil(M / UF_BWD_ROWS) rows. */
#define UF_BWD_ROWS 32
/* RMSNorm backward, UF_BWD_ROWS rows per block: with x̂ = x·r, g = dh·w,
 * dot[m] = Σ g·x̂, dxn = r·(g − x̂·dot/N) (bf16), part[b, n] = Σ over the
 * block's rows of dh·x̂ (f32, ceil(M/UF_BWD_ROWS) × N). N ≤ 8192. */
int uf_rmsnorm_bwd(uint16_t *dxn, float *part, float *dot, const uint16_t *dh,
                   const uint16_t *x, const uint16_t *w, const float *r, int64_t M, int64_t N);
/* dw[n] = Σ_b part[b, n] in order. */
int uf_colsum(float *dw, const float *part, int64_t nb, int64_t N);
/* SwiGLU backward on interleaved pairs: (dg, du) = dswiglu(g, u, dy). */
int uf_swiglu_bwd(uint16_t *dz, const uint16_t *z, const uint16_t *dy, int64_t M, int64_t F);

/* ---- comparison ---- */
/* res[0] = max |a·ra[m] − b|, res[1] = max |b|, res[2] = number of
 * non-finite differences, over rows × cols; a, b bf16 (0) or f32 (2) with
 * their leading dimensions; ra may be NULL (1). res is host memory. */
int uf_compare(double res[3], const void *a, int adt, int64_t lda, const float *ra,
               const void *b, int bdt, int64_t ldb, int64_t rows, int64_t cols);

const char *uf_error_string(int err);

#ifdef __cplusplus
}
#endif
#endif
