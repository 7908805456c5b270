/* bf16 rounding shared by the host (optim.c) and the CUDA kernels
 * (train_kernels.cu), so that both give the same bits for the same input.
 *
 * Stochastic rounding of a finite float x to bf16: add 16 random bits r to
 * the low half of its bit pattern and truncate,
 *     bf16(x) = hi16(bits(x) + r),  r uniform in [0, 2^16),
 * which rounds up with probability (x - lo) / (hi - lo) between the two
 * neighbouring bf16 values lo <= x < hi, so E[bf16(x)] = x: small updates
 * that round-to-nearest would drop every step survive on average. NaN and
 * infinities keep their class (round to nearest). The bits come from a hash
 * of (seed, step, flat index, stream), so a run is deterministic and
 * independent of the launch shape and the thread count. */
#ifndef CODA_BASE_BF16_ROUND_H
#define CODA_BASE_BF16_ROUND_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CODA_HD __host__ __device__ __forceinline__
#else
#define CODA_HD static inline
#endif

CODA_HD uint32_t coda_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

CODA_HD float coda_f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Round to nearest, ties to even; NaN stays a (quiet) NaN. */
CODA_HD uint16_t coda_bf16_rne(float x) {
  uint32_t u = coda_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

CODA_HD float coda_bf16_widen(uint16_t h) { return coda_f32_from_bits((uint32_t)h << 16); }

/* The random bits of element i at step t: splitmix64's finalizer over
 * the mixed key; one draw gives the 16 bits of each stream k (0 weights,
 * 1 first moment, 2 second moment), so an element costs one hash. */
CODA_HD uint64_t coda_bf16_sr_hash(uint64_t seed, int64_t t, uint64_t i) {
  uint64_t z = seed ^ ((uint64_t)t * 0x9e3779b97f4a7c15ull) ^ (i * 0xd1b54a32d192ed03ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The 16 random bits of stream k (0, 1, 2) of element i at step t. */
CODA_HD uint32_t coda_bf16_sr_bits(uint64_t seed, int64_t t, uint64_t i, uint32_t k) {
  return (uint32_t)(coda_bf16_sr_hash(seed, t, i) >> (16 * k)) & 0xffffu;
}

/* Stochastic rounding with the random bits r (low 16 used). */
CODA_HD uint16_t coda_bf16_sr(float x, uint32_t r) {
  uint32_t u = coda_f32_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return coda_bf16_rne(x); /* inf, NaN */
  return (uint16_t)((u + (r & 0xffffu)) >> 16);
}

/* The fp32 constants of the bf16-state AdamW from its double
 * coefficients (c1, c2: the bias corrections 1 − β^t): k = {b1, 1 − b1,
 * b2, 1 − b2, lr/c1, 1/c2, shrink, eps}, each rounded once from double. */
CODA_HD void coda_bf16_adamw_consts(double b1, double b2, double c1, double c2, double lr,
                                    double eps, double shrink, float k[8]) {
  k[0] = (float)b1;
  k[1] = (float)(1.0 - b1);
  k[2] = (float)b2;
  k[3] = (float)(1.0 - b2);
  k[4] = (float)(lr / c1);
  k[5] = (float)(1.0 / c2);
  k[6] = (float)shrink;
  k[7] = (float)eps;
}

#undef CODA_HD
#endif /* CODA_BASE_BF16_ROUND_H */
