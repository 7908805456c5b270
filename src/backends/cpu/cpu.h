/* Internal interface of the CPU reference backend (src/backends/cpu). */
#ifndef CODA_CPU_H
#define CODA_CPU_H

#include "base/internal.h"
#include "lang/ir.h"

/* A read-only strided matrix: element (i, j) at data[i*rs + j*cs]. */
typedef struct cpu_view {
  const void *data;
  coda_dtype dtype;
  int64_t rs, cs;
} cpu_view;

/* acc = a · b with a: M x K and b: K x N (transposes already folded into
 * the strides). */
typedef struct cpu_gemm_desc {
  cpu_view a, b;
  int64_t M, N, K;
} cpu_gemm_desc;

/* Runs with less work than this (flop-like operations) use one thread. */
#define CPU_SERIAL_WORK 4.0e6

/* Per-thread GEMM workspace: packed panels and the accumulator tile
 * (compute type float, or double when f64). */
typedef struct cpu_gemm_ws {
  int f64;
  int mr, nr, isa;
  int tile_m, tile_n; /* largest tile this workspace serves */
  int64_t ldacc;      /* leading dimension of acc (padded tile_n) */
  void *acc, *pa, *pb;
} cpu_gemm_ws;

int cpu_gemm_ws_init(cpu_gemm_ws *w, int f64, int tile_m, int tile_n);
void cpu_gemm_ws_free(cpu_gemm_ws *w);
/* Computes the mt x nt tile at (r0, c0) into w->acc. The summation order
 * of every element is k = 0, 1, ..., K-1, whatever the tiling or threads. */
void cpu_gemm_tile(const cpu_gemm_desc *g, cpu_gemm_ws *w, int64_t r0, int mt,
                   int64_t c0, int nt);
/* Name of the micro-kernel in use ("avx512", "avx2", "generic"). */
const char *cpu_gemm_isa_name(void);

/* One run of a program (or a plain store) over an M x N domain. */
typedef struct cpu_job {
  const struct coda_program_s *prog; /* NULL: plain D = alpha*acc (+D) */
  int64_t M, N;
  int tile_m, tile_n;
  int has_gemm;
  cpu_gemm_desc gemm;
  int f64;         /* exact mode */
  int num_threads; /* 0: OpenMP default */
  const coda_tensor *inputs[CODA_MAX_INPUTS];
  const coda_tensor *outputs[CODA_MAX_OUTPUTS];
  const coda_tensor *partials[CODA_MAX_REDUCES];
  /* rowsum inputs: the M per-row sums in the compute type (float, or double
   * in exact mode), filled by cpu_run once per job; NULL for other kinds */
  const void *rowsums[CODA_MAX_INPUTS];
  /* plain store */
  const coda_tensor *D;
  double alpha;
  int accumulate;
} cpu_job;

coda_status cpu_run(coda_context ctx, const cpu_job *job);

/* Inline 16-bit conversions for the hot loops (same results as the
 * coda_*_to_* functions of src/base/tensor.c). */
static inline float cpu_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {(uint32_t)h << 16};
  return v.f;
}
static inline uint16_t cpu_f32_to_bf16(float f) {
  union { float f; uint32_t u; } v = {f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float cpu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  union { uint32_t u; float f; } v;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    v.f = (float)m * 5.9604644775390625e-8f;
    v.u |= sign;
  } else if (e == 31) {
    v.u = sign | 0x7f800000u | (m << 13);
  } else {
    v.u = sign | ((e + 112) << 23) | (m << 13);
  }
  return v.f;
}

/* Element stride of a vector view ((len,1) or (1,len)). */
static inline int64_t cpu_vec_stride(const coda_tensor *t) {
  return (t->cols == 1 && t->rows != 1) ? t->ld : 1;
}

/* Finisher: reduces partial P (and Q for centered rstd) into out.
 * layout: 0 row partials (M x T -> M), 1 column partials (S x N -> N),
 * 2 segmented (M x I -> M x ceil(N/seg)). */
typedef struct cpu_finish_desc {
  coda_finish_kind kind;
  int layout;
  const coda_tensor *P, *Q, *out;
  int64_t M, N;
  int tile_m, tile_n, seg;
  double eps;
  int f64;
} cpu_finish_desc;
void cpu_finish(const cpu_finish_desc *d);

/* Attention on the CPU (attention.c), for checked jobs. */
struct coda_attn_job;
coda_status cpu_attention_forward(coda_context ctx, const struct coda_attn_job *job);
coda_status cpu_attention_backward(coda_context ctx, const struct coda_attn_job *job);

#endif
