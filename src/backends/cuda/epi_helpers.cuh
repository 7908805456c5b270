/* Device helpers of the generated epilogue functors (namespace coda_epi:
 * 16-bit packing, guarded loads and stores, the math the CPU interpreter
 * defines, log-sum-exp folding, staging of chunks in shared memory) and the
 * kernel's parameter block CodaEpiParams, whose layout is the host's
 * coda_epi_params (epi_codegen.h).
 *
 * Not compiled on its own: epi_embed.c embeds this file into the library
 * and coda_epi_full_source splices its text, after this comment and
 * without the #pragma once line, between the mainloop header and the
 * functor. It relies on the generated prelude (the fixed-width integer
 * types, the 16-bit types and conversions, CODA_INF) and on nothing else.
 * Any edit changes the generated source and with it the kernel cache key. */
#pragma once
namespace coda_epi {
/* dtype codes: 0 bf16, 1 f16, 2 f32, 4 i32 */
/* A pair of 16-bit values as one 32-bit word (low half = first value):
 * one cvt packs two (round to nearest even), two integer ops (bf16) or
 * two cvt (f16) unpack. Going through the two-member structs instead
 * makes the compiler split and rebuild the word (2-3 extra instructions
 * per pair). */
template <int DT> __device__ __forceinline__ uint32_t pk2(float a, float b) {
  uint32_t u;
  if constexpr (DT == 0) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(b), "f"(a));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(b), "f"(a));
  return u;
}
template <int DT> __device__ __forceinline__ float2 up2(uint32_t u) {
  if constexpr (DT == 0) return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  else { float a, b;
    asm("{.reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}" : "=f"(a), "=f"(b) : "r"(u));
    return make_float2(a, b); }
}
template <int DT> __device__ __forceinline__ float ld1(const void *b, long long o) {
  if constexpr (DT == 0) return __bfloat162float(((const __nv_bfloat16 *)b)[o]);
  else if constexpr (DT == 1) return __half2float(((const __half *)b)[o]);
  else if constexpr (DT == 2) return ((const float *)b)[o];
  else return (float)((const int *)b)[o];
}
/* Two adjacent values at q (aligned to two values). */
template <int DT> __device__ __forceinline__ float2 ldv2(const uint8_t *q) {
  if constexpr (DT == 0 || DT == 1) return up2<DT>(*(const uint32_t *)q);
  else if constexpr (DT == 2) return *(const float2 *)q;
  else { int2 v = *(const int2 *)q; return make_float2((float)v.x, (float)v.y); }
}
/* (b[o], b[o+step]); one access when step == 1 and aligned. */
template <int DT> __device__ __forceinline__ float2 ld2(const void *b, long long o, long long step,
                                                        bool ok0, bool ok1, bool al) {
  if (ok0 && ok1 && al && step == 1) {
    if constexpr (DT == 0 || DT == 1) return up2<DT>(*(const uint32_t *)((const uint16_t *)b + o));
    else if constexpr (DT == 2) return *(const float2 *)((const float *)b + o);
    else { int2 v = *(const int2 *)((const int *)b + o); return make_float2((float)v.x, (float)v.y); }
  }
  return make_float2(ok0 ? ld1<DT>(b, o) : 0.f, ok1 ? ld1<DT>(b, o + step) : 0.f);
}
/* b[o..o+3] of a 16-bit x2 tile: (even, odd) of point 0, then point 1. */
template <int DT> __device__ __forceinline__ float4 ld4(const void *b, long long o, bool ok0,
                                                        bool ok1, bool al4, bool al2) {
  if (ok0 && ok1 && al4) {
    uint2 u = *(const uint2 *)((const uint16_t *)b + o);
    const float2 x = up2<DT>(u.x), y = up2<DT>(u.y);
    return make_float4(x.x, x.y, y.x, y.y);
  }
  float2 x = ld2<DT>(b, o, 1, ok0, ok0, al2), y = ld2<DT>(b, o + 2, 1, ok1, ok1, al2);
  return make_float4(x.x, x.y, y.x, y.y);
}
/* b[o] = round(v) (or round(b[o] + v), the sum in fp32). */
template <int DT, bool ACC> __device__ __forceinline__ void st1(void *b, long long o, float v) {
  if constexpr (DT == 0) { __nv_bfloat16 *p = (__nv_bfloat16 *)b + o; if (ACC) v += __bfloat162float(*p); *p = __float2bfloat16_rn(v); }
  else if constexpr (DT == 1) { __half *p = (__half *)b + o; if (ACC) v += __half2float(*p); *p = __float2half_rn(v); }
  else { float *p = (float *)b + o; if (ACC) v += *p; *p = v; }
}
template <int DT, bool ACC> __device__ __forceinline__ void st2(void *b, long long o, bool ok0, bool ok1,
                                                                bool al, float v0, float v1) {
  if (ok0 && ok1 && al) {
    if constexpr (DT == 0 || DT == 1) { uint32_t *p = (uint32_t *)((uint16_t *)b + o);
      if (ACC) { float2 q = up2<DT>(*p); v0 += q.x; v1 += q.y; } *p = pk2<DT>(v0, v1); }
    else { float2 *p = (float2 *)((float *)b + o); if (ACC) { float2 q = *p; v0 += q.x; v1 += q.y; } *p = make_float2(v0, v1); }
    return;
  }
  if (ok0) st1<DT, ACC>(b, o, v0);
  if (ok1) st1<DT, ACC>(b, o + 1, v1);
}
template <int DT, bool ACC> __device__ __forceinline__ void st4(void *b, long long o, bool ok0, bool ok1,
                                                                bool al4, bool al2, float4 v) {
  if (ok0 && ok1 && al4 && !ACC) {
    uint2 u;
    u.x = pk2<DT>(v.x, v.y);
    u.y = pk2<DT>(v.z, v.w);
    *(uint2 *)((uint16_t *)b + o) = u;
    return;
  }
  st2<DT, ACC>(b, o, ok0, ok0, al2, v.x, v.y);
  st2<DT, ACC>(b, o + 2, ok1, ok1, al2, v.z, v.w);
}
/* Math, fp32, the same formulas as the CPU interpreter. Exact programs
 * are compiled without contraction (--fmad=false) and call the accurate
 * library functions; a `math fast` program (CODA_EPI_FAST_MATH 1) gets
 * the hardware approximations below and contraction (docs/language.md,
 * "Math", has their error bounds). */
#ifndef CODA_EPI_FAST_MATH
#define CODA_EPI_FAST_MATH 0
#endif
/* tanh.approx: one MUFU.TANH, relative error below 2^-10.9 */
__device__ __forceinline__ float tanh_(float x) {
#if CODA_EPI_FAST_MATH
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}
/* exp(x) = 2^(x log2 e): the product's rounding adds |x| 2^-24 to the
 * relative error of ex2.approx (about 2^-22) */
__device__ __forceinline__ float exp_(float x) {
#if CODA_EPI_FAST_MATH
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return expf(x);
#endif
}
/* log(x) = log2(x) ln 2: absolute error about 2^-22 */
__device__ __forceinline__ float log_(float x) {
#if CODA_EPI_FAST_MATH
  float y;
  asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y * 0.6931471805599453f;
#else
  return logf(x);
#endif
}
__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + exp_(-x)); }
__device__ __forceinline__ float gelu(float x) {
  float t = tanh_(0.7978845608028654f * (x + 0.044715f * x * x * x));
  return 0.5f * x * (1.0f + t);
}
__device__ __forceinline__ float dgelu(float x) {
  float t = tanh_(0.7978845608028654f * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ __forceinline__ float dsilu(float x) { float s = sigm(x); return s * (1.0f + x * (1.0f - s)); }
/* idiv(a, b) = floor(a / b), imod(a, b) = a - b floor(a / b) on integer
 * values (the CPU's src/backends/cpu/interp_impl.h); b = 0: 0 and a */
__device__ __forceinline__ float idiv(float a, float b) {
  const long long x = (long long)a, y = (long long)b;
  if (y == 0) return 0.0f;
  long long q = x / y;
  if (x % y != 0 && ((x < 0) != (y < 0))) q--;
  return (float)q;
}
__device__ __forceinline__ float imod(float a, float b) {
  const long long x = (long long)a, y = (long long)b;
  if (y == 0) return a;
  long long r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return (float)r;
}
/* theta = 2*pi*frac(p*(fhi+flo)): p*fhi = hi + err exactly (two-product),
 * lo = err + p*flo, hi - rint(hi) is exact. */
__device__ __forceinline__ void rope(float x, float y, float p, float fhi, float flo, float sgn,
                                     float &x2, float &y2) {
  float hi = p * fhi;
  float err = fmaf(p, fhi, -hi);
  float lo = fmaf(p, flo, err);
  float f = (hi - rintf(hi)) + lo;
  float sn, cs;
  sincospif(2.0f * f, &sn, &cs); /* sin/cos(2*pi*f), exact argument reduction */
  sn = sgn * sn;
  x2 = x * cs - y * sn;
  y2 = x * sn + y * cs;
}
/* log-sum-exp state (m, s): running max, sum of exp(v - m). */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
  if (m2 == -CODA_INF) return;
  if (m == -CODA_INF) { m = m2; s = s2; return; }
  if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
  else if (m != CODA_INF) s += s2 * expf(m2 - m);
}
/* One chunk's values of one row half (J column pairs x 2) into the state:
 * the chunk's max first, then one exponential per value relative to it
 * (ex2.approx of (v - max) * log2(e): relative error ~2^-22 per term,
 * against expf's dozen instructions and a branch per value), then one
 * merge. Values that are not > -inf (masked, NaN) add nothing, as in
 * the CPU's fold; a +inf value makes the result +inf. */
template <int J> __device__ __forceinline__ void lse_chunk(float &m, float &s, const float (&v)[J][2][2], int h) {
  float cm = -CODA_INF;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) cm = v[j][h][e] > cm ? v[j][h][e] : cm;
  if (!(cm > -CODA_INF)) return;
  float cs = 1.0f;
  if (cm != CODA_INF) {
    cs = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = v[j][h][e];
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((x - cm) * 1.44269504088896341f));
        cs += x > -CODA_INF ? y : 0.0f;
      }
  }
  lse_merge(m, s, cm, cs);
}
__device__ __forceinline__ float shx(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
/* Staging of 64-row x 32-column chunks in the shared scratch: a row of RB
 * bytes, 16-byte unit u of row r at u ^ ((r / (128 / RB)) % (RB / 16)), so
 * the fragment's accesses (8 rows x 4 lanes) and the row vectors are
 * conflict-free without padding. */
template <int RB> __device__ __forceinline__ int swz(int r, int b) {
  /* unsigned: r and b are never negative, and the compiler then turns
   * / and % into shifts and masks (signed ones cost a sign fix-up each) */
  const unsigned ur = (unsigned)r, ub = (unsigned)b;
  return (int)(ur * RB + ((((ub >> 4) ^ ((ur / (128 / RB)) % (RB / 16))) << 4) | (ub & 15)));
}
__device__ __forceinline__ void cp16(void *s, const void *g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
/* Rows wr0.. of a chunk of a tile view (SZ-byte values, RB bytes per
 * chunk row, values v0.. of each row, L values per row) into shared
 * memory: whole 16-byte vectors with cp.async where the view is aligned
 * and the vector lies inside M x L, else value by value (zero outside). */
template <int SZ, int RB> __device__ __forceinline__ void stage_in(uint8_t *s, const void *g, long long ld,
    bool al, int wr0, long long v0, long long L, int M) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < RB / 32; ++i) {
    const int v = t + 128 * i, r = (int)((unsigned)v / (RB / 16)), u = (int)((unsigned)v % (RB / 16));
    const int gr = wr0 + r;
    const long long vo = v0 + u * (16 / SZ);
    uint8_t *d = s + swz<RB>(r, u * 16);
    const uint8_t *src = (const uint8_t *)g + ((long long)gr * ld + vo) * SZ;
    if (al && gr < M && vo + 16 / SZ <= L) { cp16(d, src); continue; }
#pragma unroll
    for (int e = 0; e < 16 / SZ; ++e) {
      const bool in = gr < M && vo + e < L;
      if constexpr (SZ == 2) ((uint16_t *)d)[e] = in ? ((const uint16_t *)src)[e] : (uint16_t)0;
      else ((uint32_t *)d)[e] = in ? ((const uint32_t *)src)[e] : 0u;
    }
  }
}
/* The reverse: staged rows to the view, row-contiguous 16-byte stores
 * where aligned and inside, else value by value inside M x L only. ACC
 * (f32 only): g = g + staged, one fp32 addition per value. */
template <int SZ, int RB, bool ACC = false> __device__ __forceinline__ void stage_out(const uint8_t *s, void *g, long long ld,
    bool al, int wr0, long long v0, long long L, int M) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < RB / 32; ++i) {
    const int v = t + 128 * i, r = (int)((unsigned)v / (RB / 16)), u = (int)((unsigned)v % (RB / 16));
    const int gr = wr0 + r;
    const long long vo = v0 + u * (16 / SZ);
    if (gr >= M) continue;
    const uint8_t *d = s + swz<RB>(r, u * 16);
    uint8_t *dst = (uint8_t *)g + ((long long)gr * ld + vo) * SZ;
    if constexpr (ACC) {
      static_assert(SZ == 4, "accumulating staged outputs are f32");
      if (al && vo + 4 <= L) {
        const float4 a = *(const float4 *)d; float4 o = *(float4 *)dst;
        o.x += a.x; o.y += a.y; o.z += a.z; o.w += a.w;
        *(float4 *)dst = o;
        continue;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (vo + e >= L) break;
        ((float *)dst)[e] += ((const float *)d)[e];
      }
      continue;
    }
    if (al && vo + 16 / SZ <= L) { *(uint4 *)dst = *(const uint4 *)d; continue; }
#pragma unroll
    for (int e = 0; e < 16 / SZ; ++e) {
      if (vo + e >= L) break;
      if constexpr (SZ == 2) ((uint16_t *)dst)[e] = ((const uint16_t *)d)[e];
      else ((uint32_t *)dst)[e] = ((const uint32_t *)d)[e];
    }
  }
}
/* Staged values to float: n = 1, 2 or 4 adjacent values (16-bit or 32-bit). */
template <int DT> __device__ __forceinline__ float sv1(const uint8_t *q) {
  if constexpr (DT == 0) { __nv_bfloat16 h; h.x = *(const uint16_t *)q; return __bfloat162float(h); }
  else if constexpr (DT == 1) { __half h; h.x = *(const uint16_t *)q; return __half2float(h); }
  else if constexpr (DT == 2) return *(const float *)q;
  else return (float)*(const int *)q;
}
template <int DT> __device__ __forceinline__ float2 sv2(const uint8_t *q) {
  if constexpr (DT == 0 || DT == 1) return up2<DT>(*(const uint32_t *)q);
  else if constexpr (DT == 2) return *(const float2 *)q;
  else { int2 v = *(const int2 *)q; return make_float2((float)v.x, (float)v.y); }
}
template <int DT> __device__ __forceinline__ float4 sv4(const uint8_t *q) {
  uint2 u = *(const uint2 *)q;
  const float2 x = up2<DT>(u.x), y = up2<DT>(u.y);
  return make_float4(x.x, x.y, y.x, y.y);
}
/* Rounded values into the staging (the only rounding of the output). */
template <int DT> __device__ __forceinline__ void so1(uint8_t *q, float a) {
  if constexpr (DT == 0) *(uint16_t *)q = __float2bfloat16_rn(a).x;
  else if constexpr (DT == 1) *(uint16_t *)q = __float2half_rn(a).x;
  else *(float *)q = a;
}
template <int DT> __device__ __forceinline__ void so2(uint8_t *q, float a, float b) {
  if constexpr (DT == 0 || DT == 1) *(uint32_t *)q = pk2<DT>(a, b);
  else *(float2 *)q = make_float2(a, b);
}
template <int DT> __device__ __forceinline__ void so4(uint8_t *q, float4 v) {
  uint2 u;
  u.x = pk2<DT>(v.x, v.y);
  u.y = pk2<DT>(v.z, v.w);
  *(uint2 *)q = u;
}
}  // namespace coda_epi
struct CodaEpiParams {
  CUtensorMap tm[12];
  const void *ptr[64];
  long long ld[64];
  int flags[64];
  int cnt[64];
  int M, N;
};
