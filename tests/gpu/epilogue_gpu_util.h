/* What the files of the epilogue GPU test share (tests/gpu/test_epilogue_gpu.c,
 * tests/gpu/epilogue_gpu_programs.c, tests/gpu/epilogue_gpu_sm80.c,
 * tests/gpu/epilogue_gpu_bench.c): the random inputs, bf16/fp16
 * conversions, typed element access, the check counters, device memory
 * (host memory in --host-selftest mode) and the entry points of each file. */
#ifndef CODA_TEST_EPILOGUE_GPU_UTIL_H
#define CODA_TEST_EPILOGUE_GPU_UTIL_H

#include "coda.h"
#include "gpu/cuda_check.h"
#include "test_util.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One random stream for the whole run (defined in test_epilogue_gpu.c). */
extern uint64_t rng_state;
/* Checks made and failed, over every stage of the run. */
extern int failures, checks;
/* --host-selftest: the CPU backend in place of the GPU. */
extern int host_mode;

static inline double urand(void) { return xorshift64_unit01(&rng_state); } /* [0, 1) */
/* never zero: magnitude in [0.1, 1), random sign unless positive */
static inline double nonzero(int positive) {
  double m = 0.1 + 0.9 * urand();
  return positive || urand() < 0.5 ? m : -m;
}

static inline uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t f2h(float f) { /* round to nearest even, finite inputs of modest size */
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}
static inline float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
  if (e == 0) {
    float f = (float)m * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  if (e == 31) u = sign | 0x7f800000u | (m << 13);
  else u = sign | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline double get(coda_dtype t, const void *p, size_t i) {
  switch (t) {
  case CODA_BF16: return bf2f(((const uint16_t *)p)[i]);
  case CODA_F16: return h2f(((const uint16_t *)p)[i]);
  case CODA_F32: return ((const float *)p)[i];
  case CODA_F64: return ((const double *)p)[i];
  default: return ((const int32_t *)p)[i];
  }
}
static inline void set(coda_dtype t, void *p, size_t i, double v) {
  switch (t) {
  case CODA_BF16: ((uint16_t *)p)[i] = f2bf((float)v); break;
  case CODA_F16: ((uint16_t *)p)[i] = f2h((float)v); break;
  case CODA_F32: ((float *)p)[i] = (float)v; break;
  case CODA_F64: ((double *)p)[i] = v; break;
  default: ((int32_t *)p)[i] = (int32_t)v; break;
  }
}

/* Device memory, or host memory in --host-selftest mode (the harness run
 * with the CPU backend in place of the GPU: checks the harness itself). */
static inline void dev_alloc(void **p, size_t n) {
  if (host_mode) {
    *p = malloc(n);
    if (!*p) exit(2);
  } else {
    CUDA_CHECK(cudaMalloc(p, n));
  }
}
static inline void dev_free(void *p) {
  if (host_mode) free(p);
  else cudaFree(p);
}
static inline void dev_copy(void *dst, const void *src, size_t n, int to_dev) {
  if (host_mode) memcpy(dst, src, n);
  else CUDA_CHECK(cudaMemcpy(dst, src, n, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
}

/* ---- the programs (tests/gpu/epilogue_gpu_programs.c) ---- */

/* The built-in programs, then the primitive ones. */
int num_programs(void);
const char *program_name(int i);
coda_program load_program(coda_context ctx, int i);
/* --precompile: every kernel the test and the benchmark need, no GPU. */
int precompile(void);

/* ---- the sm80 stage (tests/gpu/epilogue_gpu_sm80.c) ---- */

int sm80_plain_gemm(coda_context cpu, coda_context gpu);
int sm80_rest(coda_context cpu, coda_context gpu);

/* ---- the benchmark (tests/gpu/epilogue_gpu_bench.c) ---- */

/* name is a program the benchmark runs (both schedules). */
int is_bench_program(const char *name);
/* --bench */
int bench(coda_context gpu);

#endif
