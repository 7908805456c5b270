/* Code generation: epilogue program IR -> CUDA source of an Epi functor for
 * the Hopper mainloop (gemm_sm90.cuh).
 *
 * Each consumer thread holds BN/2 accumulator values of a 64 x BN block:
 * value i at row row0 + 8*((i>>1)&1), column col0 + 8*(i>>2) + (i&1). The
 * functor walks them as (j, h) groups: j = i>>2 picks the column pair
 * (c, c+1) with c = col0 + 8j, h = (i>>1)&1 the row. A group is two
 * iteration points in elem mode and one in pair mode. Loops have constant
 * trip counts and are fully unrolled, so every fragment index is a
 * compile-time constant and the fragment stays in registers.
 *
 * Per group, every input the program reads is loaded once (column vectors
 * once per j, row vectors and scalars once per fragment), pairs of adjacent
 * 16-bit values with one 32-bit access (x2 tiles: four values, 64 bits)
 * when the view is aligned; points outside M x N load nothing and store
 * nothing. The instructions then run as straight-line fp32 code. Tile
 * inputs and outputs that fit the scratch are staged there in 64 x 32
 * chunks instead (see plan_staging): 16-byte cp.async loads, rounded values
 * written to shared memory and stored by TMA (accumulating f32 outputs: TMA
 * reduce-add) or as row-contiguous 16-byte vectors.
 *
 * Reductions (deterministic, no atomics):
 *  - row partials (rowsum/rowmax/rowlse, and segmented rowsum with segment
 *    g >= 8 columns): each thread folds its values of a row, the quad of 4
 *    lanes sharing the row combines with xor-1 and xor-2 shuffles, and lane
 *    0 of the quad writes the partial of (row, column tile or segment);
 *  - segments narrower than 8 columns: g = 1, 2 lie inside one thread's
 *    column pair, g = 4 spans two lanes (one xor-1 shuffle);
 *  - rowpick: the single thread holding column idx[m] writes it;
 *  - colsum over the warpgroup's 64 rows: the two rows of a thread are
 *    added, shuffles xor 4, 8, 16 sum the 8 row groups of a warp, lanes 0-3
 *    put the warp's column sums into the shared scratch, and after a
 *    warpgroup barrier thread t adds the 4 warps' sums of column t in order.
 * This fixes the partial tiling at tile_m = 64, tile_n = BN. */
#include "backends/cuda/epi_codegen.h"

#include "base/internal.h"
#include "base/strbuf.h"
#include "lang/ir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long scratch_bytes(void);
size_t coda_epi_smem_bytes(const coda_epi_config *cfg);

#define CODA_EPI_PINGPONG_MAX_CUBIN (150 * 1024)

/* As many mainloop stages as fit, with the configuration's scratch, in the
 * 227 KiB of shared memory of a block. */
static void fit_stages(coda_epi_config *cfg) {
  cfg->stages = CODA_EPI_STAGES;
  while (cfg->stages > 2 && coda_epi_smem_bytes(cfg) > 232448) cfg->stages--;
}

coda_epi_config coda_epi_default_config(void) {
  coda_epi_config c = {CODA_EPI_BN, CODA_EPI_STAGES, 0, 0, 1, 0, CODA_SCHED_AUTO, 0};
  fit_stages(&c);
  return c;
}

/* The epilogue scratch per consumer warpgroup, as the embedded mainloop
 * header declares it (the generated source static_asserts that this host
 * computation matches the header's smem_bytes). */
static long scratch_bytes(void) {
  const char *k = strstr(coda_epi_hdr_gemm_sm90, "#define CODA_EPI_SCRATCH_BYTES ");
  long v = k ? strtol(k + strlen("#define CODA_EPI_SCRATCH_BYTES "), NULL, 10) : 0;
  return v > 0 ? v : 64 * 40 * 4;
}

size_t coda_epi_smem_bytes(const coda_epi_config *cfg) {
  /* STAGES x (A + B) k-blocks + 2 epilogue scratches + 2 x STAGES mbarriers
   * + 4 epilogue-load mbarriers + 1024 bytes of alignment slack. */
  const size_t scratch = cfg->scratch > 0 ? (size_t)cfg->scratch : (size_t)scratch_bytes();
  return (size_t)cfg->stages * (128 + cfg->bn) * 64 * 2 + 2 * scratch +
         (2 * (size_t)cfg->stages + 4) * 8 + 1024;
}

uint64_t coda_epi_program_key(coda_program p, uint64_t seed) {
  const char *t = coda_program_text(p), *ir = coda_program_ir(p);
  return coda_fnv1a64(ir, strlen(ir), coda_fnv1a64(t, strlen(t), seed));
}

/* ------------------------------------------------------------ buffer */

static char *sb_take(coda_context ctx, coda_strbuf *b) {
  char *s = coda_sb_take(b);
  if (!s) coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory while generating CUDA source");
  return s;
}

/* ------------------------------------------------------------ checks */

static const char *kind_name(coda_arg_kind k) {
  switch (k) {
  case CODA_ARG_ROW: return "row";
  case CODA_ARG_COL: return "col";
  case CODA_ARG_SCALAR: return "scalar";
  case CODA_ARG_ROWSUM: return "rowsum";
  default: return "tile";
  }
}

coda_status coda_epi_supported(coda_context ctx, coda_program pg) {
  const struct coda_program_s *p = pg;
  if (!p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA epilogue: program is NULL");
  for (int i = 0; i < p->ninputs; i++)
    if (p->inputs[i].dtype == CODA_F64)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "input '%s' is f64: exact mode (fp64) programs run only on the CPU backend",
                       p->inputs[i].name);
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].dtype == CODA_F64 || p->outputs[i].dtype == CODA_I32)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "output '%s' is %s: the GPU stores bf16, f16 or f32 outputs",
                       p->outputs[i].name, coda_dtype_name(p->outputs[i].dtype));
  int ncol = 0;
  for (int i = 0; i < p->nreduces; i++) ncol += p->reduces[i].kind == CODA_REDUCE_COLSUM;
  /* 4 warps x BN floats per colsum in the 64 x 40-float scratch. */
  const long cap = scratch_bytes() / (4 * 4 * CODA_EPI_BN);
  if (ncol > cap)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the program has %d colsum reductions; the GPU epilogue stages at most %ld "
                     "at once in shared memory",
                     ncol, cap);
  if (p->ninputs + p->noutputs + p->nreduces > CODA_EPI_MAX_ARGS)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "too many arguments for the GPU epilogue");
  return CODA_OK;
}

/* ------------------------------------------------------------ prelude */

/* Types NVRTC lacks without the toolkit headers, and the device helpers
 * the generated functors call. */
static const char kPrelude[] =
    "/* generated by the coda epilogue compiler */\n"
    "typedef unsigned char uint8_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "typedef int int32_t;\n"
    "typedef long long int64_t;\n"
    "#ifndef CUDA_VERSION\n"
    "typedef struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; } CUtensorMap;\n"
    "#endif\n"
    "/* The 16-bit types and conversions the mainloop header uses (NVRTC has\n"
    " * no toolkit headers at run time); conversions round to nearest even. */\n"
    "struct alignas(2) __nv_bfloat16 { unsigned short x; };\n"
    "struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };\n"
    "struct alignas(2) __half { unsigned short x; };\n"
    "struct alignas(4) __half2 { __half x, y; };\n"
    "__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }\n"
    "__device__ __forceinline__ float2 __bfloat1622float2(__nv_bfloat162 h) {\n"
    "  return make_float2(__bfloat162float(h.x), __bfloat162float(h.y)); }\n"
    "__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {\n"
    "  __nv_bfloat16 r; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r.x) : \"f\"(f)); return r; }\n"
    "__device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {\n"
    "  unsigned u; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
    "  __nv_bfloat162 r; r.x.x = (unsigned short)(u & 0xffffu); r.y.x = (unsigned short)(u >> 16); return r; }\n"
    "__device__ __forceinline__ float __half2float(__half h) {\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h.x)); return f; }\n"
    "__device__ __forceinline__ float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }\n"
    "__device__ __forceinline__ __half __float2half_rn(float f) {\n"
    "  __half r; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(r.x) : \"f\"(f)); return r; }\n"
    "__device__ __forceinline__ __half2 __floats2half2_rn(float a, float b) {\n"
    "  unsigned u; asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
    "  __half2 r; r.x.x = (unsigned short)(u & 0xffffu); r.y.x = (unsigned short)(u >> 16); return r; }\n"
    "#define CODA_INF __int_as_float(0x7f800000)\n";

static const char kHelpers[] =
    "namespace coda_epi {\n"
    "/* dtype codes: 0 bf16, 1 f16, 2 f32, 4 i32 */\n"
    "/* A pair of 16-bit values as one 32-bit word (low half = first value):\n"
    " * one cvt packs two (round to nearest even), two integer ops (bf16) or\n"
    " * two cvt (f16) unpack. Going through the two-member structs instead\n"
    " * makes the compiler split and rebuild the word (2-3 extra instructions\n"
    " * per pair). */\n"
    "template <int DT> __device__ __forceinline__ uint32_t pk2(float a, float b) {\n"
    "  uint32_t u;\n"
    "  if constexpr (DT == 0) asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
    "  else asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
    "  return u;\n"
    "}\n"
    "template <int DT> __device__ __forceinline__ float2 up2(uint32_t u) {\n"
    "  if constexpr (DT == 0) return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));\n"
    "  else { float a, b;\n"
    "    asm(\"{.reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}\" : \"=f\"(a), \"=f\"(b) : \"r\"(u));\n"
    "    return make_float2(a, b); }\n"
    "}\n"
    "template <int DT> __device__ __forceinline__ float ld1(const void *b, long long o) {\n"
    "  if constexpr (DT == 0) return __bfloat162float(((const __nv_bfloat16 *)b)[o]);\n"
    "  else if constexpr (DT == 1) return __half2float(((const __half *)b)[o]);\n"
    "  else if constexpr (DT == 2) return ((const float *)b)[o];\n"
    "  else return (float)((const int *)b)[o];\n"
    "}\n"
    "/* Two adjacent values at q (aligned to two values). */\n"
    "template <int DT> __device__ __forceinline__ float2 ldv2(const uint8_t *q) {\n"
    "  if constexpr (DT == 0 || DT == 1) return up2<DT>(*(const uint32_t *)q);\n"
    "  else if constexpr (DT == 2) return *(const float2 *)q;\n"
    "  else { int2 v = *(const int2 *)q; return make_float2((float)v.x, (float)v.y); }\n"
    "}\n"
    "/* (b[o], b[o+step]); one access when step == 1 and aligned. */\n"
    "template <int DT> __device__ __forceinline__ float2 ld2(const void *b, long long o, long long step,\n"
    "                                                        bool ok0, bool ok1, bool al) {\n"
    "  if (ok0 && ok1 && al && step == 1) {\n"
    "    if constexpr (DT == 0 || DT == 1) return up2<DT>(*(const uint32_t *)((const uint16_t *)b + o));\n"
    "    else if constexpr (DT == 2) return *(const float2 *)((const float *)b + o);\n"
    "    else { int2 v = *(const int2 *)((const int *)b + o); return make_float2((float)v.x, (float)v.y); }\n"
    "  }\n"
    "  return make_float2(ok0 ? ld1<DT>(b, o) : 0.f, ok1 ? ld1<DT>(b, o + step) : 0.f);\n"
    "}\n"
    "/* b[o..o+3] of a 16-bit x2 tile: (even, odd) of point 0, then point 1. */\n"
    "template <int DT> __device__ __forceinline__ float4 ld4(const void *b, long long o, bool ok0,\n"
    "                                                        bool ok1, bool al4, bool al2) {\n"
    "  if (ok0 && ok1 && al4) {\n"
    "    uint2 u = *(const uint2 *)((const uint16_t *)b + o);\n"
    "    const float2 x = up2<DT>(u.x), y = up2<DT>(u.y);\n"
    "    return make_float4(x.x, x.y, y.x, y.y);\n"
    "  }\n"
    "  float2 x = ld2<DT>(b, o, 1, ok0, ok0, al2), y = ld2<DT>(b, o + 2, 1, ok1, ok1, al2);\n"
    "  return make_float4(x.x, x.y, y.x, y.y);\n"
    "}\n"
    "/* b[o] = round(v) (or round(b[o] + v), the sum in fp32). */\n"
    "template <int DT, bool ACC> __device__ __forceinline__ void st1(void *b, long long o, float v) {\n"
    "  if constexpr (DT == 0) { __nv_bfloat16 *p = (__nv_bfloat16 *)b + o; if (ACC) v += __bfloat162float(*p); *p = __float2bfloat16_rn(v); }\n"
    "  else if constexpr (DT == 1) { __half *p = (__half *)b + o; if (ACC) v += __half2float(*p); *p = __float2half_rn(v); }\n"
    "  else { float *p = (float *)b + o; if (ACC) v += *p; *p = v; }\n"
    "}\n"
    "template <int DT, bool ACC> __device__ __forceinline__ void st2(void *b, long long o, bool ok0, bool ok1,\n"
    "                                                                bool al, float v0, float v1) {\n"
    "  if (ok0 && ok1 && al) {\n"
    "    if constexpr (DT == 0 || DT == 1) { uint32_t *p = (uint32_t *)((uint16_t *)b + o);\n"
    "      if (ACC) { float2 q = up2<DT>(*p); v0 += q.x; v1 += q.y; } *p = pk2<DT>(v0, v1); }\n"
    "    else { float2 *p = (float2 *)((float *)b + o); if (ACC) { float2 q = *p; v0 += q.x; v1 += q.y; } *p = make_float2(v0, v1); }\n"
    "    return;\n"
    "  }\n"
    "  if (ok0) st1<DT, ACC>(b, o, v0);\n"
    "  if (ok1) st1<DT, ACC>(b, o + 1, v1);\n"
    "}\n"
    "template <int DT, bool ACC> __device__ __forceinline__ void st4(void *b, long long o, bool ok0, bool ok1,\n"
    "                                                                bool al4, bool al2, float4 v) {\n"
    "  if (ok0 && ok1 && al4 && !ACC) {\n"
    "    uint2 u;\n"
    "    u.x = pk2<DT>(v.x, v.y);\n"
    "    u.y = pk2<DT>(v.z, v.w);\n"
    "    *(uint2 *)((uint16_t *)b + o) = u;\n"
    "    return;\n"
    "  }\n"
    "  st2<DT, ACC>(b, o, ok0, ok0, al2, v.x, v.y);\n"
    "  st2<DT, ACC>(b, o + 2, ok1, ok1, al2, v.z, v.w);\n"
    "}\n"
    "/* Math, fp32, the same formulas as the CPU interpreter (no contraction:\n"
    " * the source is compiled with --fmad=false). */\n"
    "__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "__device__ __forceinline__ float gelu(float x) {\n"
    "  float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));\n"
    "  return 0.5f * x * (1.0f + t);\n"
    "}\n"
    "__device__ __forceinline__ float dgelu(float x) {\n"
    "  float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));\n"
    "  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);\n"
    "}\n"
    "__device__ __forceinline__ float dsilu(float x) { float s = sigm(x); return s * (1.0f + x * (1.0f - s)); }\n"
    "/* theta = 2*pi*frac(p*(fhi+flo)): p*fhi = hi + err exactly (two-product),\n"
    " * lo = err + p*flo, hi - rint(hi) is exact. */\n"
    "__device__ __forceinline__ void rope(float x, float y, float p, float fhi, float flo, float sgn,\n"
    "                                     float &x2, float &y2) {\n"
    "  float hi = p * fhi;\n"
    "  float err = fmaf(p, fhi, -hi);\n"
    "  float lo = fmaf(p, flo, err);\n"
    "  float f = (hi - rintf(hi)) + lo;\n"
    "  float sn, cs;\n"
    "  sincospif(2.0f * f, &sn, &cs); /* sin/cos(2*pi*f), exact argument reduction */\n"
    "  sn = sgn * sn;\n"
    "  x2 = x * cs - y * sn;\n"
    "  y2 = x * sn + y * cs;\n"
    "}\n"
    "/* log-sum-exp state (m, s): running max, sum of exp(v - m). */\n"
    "__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {\n"
    "  if (m2 == -CODA_INF) return;\n"
    "  if (m == -CODA_INF) { m = m2; s = s2; return; }\n"
    "  if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }\n"
    "  else if (m != CODA_INF) s += s2 * expf(m2 - m);\n"
    "}\n"
    "/* One chunk's values of one row half (J column pairs x 2) into the state:\n"
    " * the chunk's max first, then one exponential per value relative to it\n"
    " * (ex2.approx of (v - max) * log2(e): relative error ~2^-22 per term,\n"
    " * against expf's dozen instructions and a branch per value), then one\n"
    " * merge. Values that are not > -inf (masked, NaN) add nothing, as in\n"
    " * the CPU's fold; a +inf value makes the result +inf. */\n"
    "template <int J> __device__ __forceinline__ void lse_chunk(float &m, float &s, const float (&v)[J][2][2], int h) {\n"
    "  float cm = -CODA_INF;\n"
    "#pragma unroll\n"
    "  for (int j = 0; j < J; ++j)\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 2; ++e) cm = v[j][h][e] > cm ? v[j][h][e] : cm;\n"
    "  if (!(cm > -CODA_INF)) return;\n"
    "  float cs = 1.0f;\n"
    "  if (cm != CODA_INF) {\n"
    "    cs = 0.0f;\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < J; ++j)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 2; ++e) {\n"
    "        const float x = v[j][h][e];\n"
    "        float y;\n"
    "        asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"((x - cm) * 1.44269504088896341f));\n"
    "        cs += x > -CODA_INF ? y : 0.0f;\n"
    "      }\n"
    "  }\n"
    "  lse_merge(m, s, cm, cs);\n"
    "}\n"
    "__device__ __forceinline__ float shx(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }\n"
    "/* Staging of 64-row x 32-column chunks in the shared scratch: a row of RB\n"
    " * bytes, 16-byte unit u of row r at u ^ ((r / (128 / RB)) % (RB / 16)), so\n"
    " * the fragment's accesses (8 rows x 4 lanes) and the row vectors are\n"
    " * conflict-free without padding. */\n"
    "template <int RB> __device__ __forceinline__ int swz(int r, int b) {\n"
    "  /* unsigned: r and b are never negative, and the compiler then turns\n"
    "   * / and % into shifts and masks (signed ones cost a sign fix-up each) */\n"
    "  const unsigned ur = (unsigned)r, ub = (unsigned)b;\n"
    "  return (int)(ur * RB + ((((ub >> 4) ^ ((ur / (128 / RB)) % (RB / 16))) << 4) | (ub & 15)));\n"
    "}\n"
    "__device__ __forceinline__ void cp16(void *s, const void *g) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" ::\"r\"((unsigned)__cvta_generic_to_shared(s)), \"l\"(g) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void cp_commit() { asm volatile(\"cp.async.commit_group;\" ::: \"memory\"); }\n"
    "template <int N> __device__ __forceinline__ void cp_wait() { asm volatile(\"cp.async.wait_group %0;\" ::\"n\"(N) : \"memory\"); }\n"
    "/* Rows wr0.. of a chunk of a tile view (SZ-byte values, RB bytes per\n"
    " * chunk row, values v0.. of each row, L values per row) into shared\n"
    " * memory: whole 16-byte vectors with cp.async where the view is aligned\n"
    " * and the vector lies inside M x L, else value by value (zero outside). */\n"
    "template <int SZ, int RB> __device__ __forceinline__ void stage_in(uint8_t *s, const void *g, long long ld,\n"
    "    bool al, int wr0, long long v0, long long L, int M) {\n"
    "  const int t = threadIdx.x % 128;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < RB / 32; ++i) {\n"
    "    const int v = t + 128 * i, r = (int)((unsigned)v / (RB / 16)), u = (int)((unsigned)v % (RB / 16));\n"
    "    const int gr = wr0 + r;\n"
    "    const long long vo = v0 + u * (16 / SZ);\n"
    "    uint8_t *d = s + swz<RB>(r, u * 16);\n"
    "    const uint8_t *src = (const uint8_t *)g + ((long long)gr * ld + vo) * SZ;\n"
    "    if (al && gr < M && vo + 16 / SZ <= L) { cp16(d, src); continue; }\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 16 / SZ; ++e) {\n"
    "      const bool in = gr < M && vo + e < L;\n"
    "      if constexpr (SZ == 2) ((uint16_t *)d)[e] = in ? ((const uint16_t *)src)[e] : (uint16_t)0;\n"
    "      else ((uint32_t *)d)[e] = in ? ((const uint32_t *)src)[e] : 0u;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "/* The reverse: staged rows to the view, row-contiguous 16-byte stores\n"
    " * where aligned and inside, else value by value inside M x L only. ACC\n"
    " * (f32 only): g = g + staged, one fp32 addition per value. */\n"
    "template <int SZ, int RB, bool ACC = false> __device__ __forceinline__ void stage_out(const uint8_t *s, void *g, long long ld,\n"
    "    bool al, int wr0, long long v0, long long L, int M) {\n"
    "  const int t = threadIdx.x % 128;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < RB / 32; ++i) {\n"
    "    const int v = t + 128 * i, r = (int)((unsigned)v / (RB / 16)), u = (int)((unsigned)v % (RB / 16));\n"
    "    const int gr = wr0 + r;\n"
    "    const long long vo = v0 + u * (16 / SZ);\n"
    "    if (gr >= M) continue;\n"
    "    const uint8_t *d = s + swz<RB>(r, u * 16);\n"
    "    uint8_t *dst = (uint8_t *)g + ((long long)gr * ld + vo) * SZ;\n"
    "    if constexpr (ACC) {\n"
    "      static_assert(SZ == 4, \"accumulating staged outputs are f32\");\n"
    "      if (al && vo + 4 <= L) {\n"
    "        const float4 a = *(const float4 *)d; float4 o = *(float4 *)dst;\n"
    "        o.x += a.x; o.y += a.y; o.z += a.z; o.w += a.w;\n"
    "        *(float4 *)dst = o;\n"
    "        continue;\n"
    "      }\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; ++e) {\n"
    "        if (vo + e >= L) break;\n"
    "        ((float *)dst)[e] += ((const float *)d)[e];\n"
    "      }\n"
    "      continue;\n"
    "    }\n"
    "    if (al && vo + 16 / SZ <= L) { *(uint4 *)dst = *(const uint4 *)d; continue; }\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 16 / SZ; ++e) {\n"
    "      if (vo + e >= L) break;\n"
    "      if constexpr (SZ == 2) ((uint16_t *)dst)[e] = ((const uint16_t *)d)[e];\n"
    "      else ((uint32_t *)dst)[e] = ((const uint32_t *)d)[e];\n"
    "    }\n"
    "  }\n"
    "}\n"
    "/* Staged values to float: n = 1, 2 or 4 adjacent values (16-bit or 32-bit). */\n"
    "template <int DT> __device__ __forceinline__ float sv1(const uint8_t *q) {\n"
    "  if constexpr (DT == 0) { __nv_bfloat16 h; h.x = *(const uint16_t *)q; return __bfloat162float(h); }\n"
    "  else if constexpr (DT == 1) { __half h; h.x = *(const uint16_t *)q; return __half2float(h); }\n"
    "  else if constexpr (DT == 2) return *(const float *)q;\n"
    "  else return (float)*(const int *)q;\n"
    "}\n"
    "template <int DT> __device__ __forceinline__ float2 sv2(const uint8_t *q) {\n"
    "  if constexpr (DT == 0 || DT == 1) return up2<DT>(*(const uint32_t *)q);\n"
    "  else if constexpr (DT == 2) return *(const float2 *)q;\n"
    "  else { int2 v = *(const int2 *)q; return make_float2((float)v.x, (float)v.y); }\n"
    "}\n"
    "template <int DT> __device__ __forceinline__ float4 sv4(const uint8_t *q) {\n"
    "  uint2 u = *(const uint2 *)q;\n"
    "  const float2 x = up2<DT>(u.x), y = up2<DT>(u.y);\n"
    "  return make_float4(x.x, x.y, y.x, y.y);\n"
    "}\n"
    "/* Rounded values into the staging (the only rounding of the output). */\n"
    "template <int DT> __device__ __forceinline__ void so1(uint8_t *q, float a) {\n"
    "  if constexpr (DT == 0) *(uint16_t *)q = __float2bfloat16_rn(a).x;\n"
    "  else if constexpr (DT == 1) *(uint16_t *)q = __float2half_rn(a).x;\n"
    "  else *(float *)q = a;\n"
    "}\n"
    "template <int DT> __device__ __forceinline__ void so2(uint8_t *q, float a, float b) {\n"
    "  if constexpr (DT == 0 || DT == 1) *(uint32_t *)q = pk2<DT>(a, b);\n"
    "  else *(float2 *)q = make_float2(a, b);\n"
    "}\n"
    "template <int DT> __device__ __forceinline__ void so4(uint8_t *q, float4 v) {\n"
    "  uint2 u;\n"
    "  u.x = pk2<DT>(v.x, v.y);\n"
    "  u.y = pk2<DT>(v.z, v.w);\n"
    "  *(uint2 *)q = u;\n"
    "}\n"
    "}  // namespace coda_epi\n"
    "struct CodaEpiParams {\n"
    "  CUtensorMap tm[12];\n"
    "  const void *ptr[64];\n"
    "  long long ld[64];\n"
    "  int flags[64];\n"
    "  int cnt[64];\n"
    "  int M, N;\n"
    "};\n";

_Static_assert(CODA_EPI_MAX_TMA + CODA_EPI_MAX_TMA_IN == 12, "CodaEpiParams.tm in kHelpers");

/* ------------------------------------------------------------ functor */

static int dt_code(coda_dtype t) {
  switch (t) {
  case CODA_BF16: return 0;
  case CODA_F16: return 1;
  case CODA_F32: return 2;
  default: return 4;
  }
}

/* An fp32 literal that is exactly (float)v (what the CPU uses). */
static void emit_const(coda_strbuf *b, double v) {
  float f = (float)v;
  if (isnan(f)) coda_sb_printf(b, "__int_as_float(0x7fc00000)");
  else if (isinf(f)) coda_sb_printf(b, "%s__int_as_float(0x7f800000)", f < 0 ? "-" : "");
  else coda_sb_printf(b, "%af", (double)f);
}

/* column pairs per load chunk */
#define EPI_JC 4

typedef struct gen {
  const struct coda_program_s *p;
  coda_strbuf *b;
  int pair;
  int arg_out0, arg_red0;
  /* per register (plan_hoist): hoist = math computed once per fragment
   * row before the loops; pre = computed there (hoisted math and the
   * constants and row-invariant reads it needs); pp = read per point (by
   * an instruction that is not hoisted, a store or a reduction) */
  unsigned char hoist[2 * CODA_MAX_INSTRS], pre[2 * CODA_MAX_INSTRS], pp[2 * CODA_MAX_INSTRS];
} gen;

/* Expression of input k read with lane `lane` at point e (elem) / the pair. */
static void emit_read(gen *g, int k, coda_lane lane) {
  const ir_input *in = &g->p->inputs[k];
  coda_strbuf *b = g->b;
  int odd = lane == CODA_LANE_ODD;
  switch (in->kind) {
  case CODA_ARG_ROW: coda_sb_printf(b, "rw%d[h]", k); break;
  case CODA_ARG_ROWSUM: coda_sb_printf(b, "rq%d[h]", k); break;
  case CODA_ARG_SCALAR: coda_sb_printf(b, "sc%d", k); break;
  case CODA_ARG_COL:
    if (g->pair) coda_sb_printf(b, "cv%d.%c", k, odd ? 'y' : 'x');
    else coda_sb_printf(b, "(e ? cv%d.y : cv%d.x)", k, k);
    break;
  default:
    if (in->width == CODA_WIDTH_HALF) coda_sb_printf(b, "th%d", k);
    else if (in->width == CODA_WIDTH_X2) /* elem mode only */
      coda_sb_printf(b, odd ? "(e ? tv%d.w : tv%d.y)" : "(e ? tv%d.z : tv%d.x)", k, k);
    else if (g->pair) coda_sb_printf(b, "tv%d.%c", k, odd ? 'y' : 'x');
    else coda_sb_printf(b, "(e ? tv%d.y : tv%d.x)", k, k);
    break;
  }
}

static void emit_instr(gen *g, const ir_instr *in) {
  coda_strbuf *b = g->b;
  const int *a = in->args;
  switch (in->code) {
  case IR_CONST:
    coda_sb_printf(b, "      const float r%d = ", in->dst);
    emit_const(b, in->imm);
    coda_sb_printf(b, ";\n");
    return;
  case IR_ACC:
    if (g->pair) coda_sb_printf(b, "      const float r%d = f.v[i0 + %d];\n", in->dst, in->lane == CODA_LANE_ODD);
    else coda_sb_printf(b, "      const float r%d = f.v[i0 + e];\n", in->dst);
    return;
  case IR_ROW: coda_sb_printf(b, "      const float r%d = (float)r;\n", in->dst); return;
  case IR_COL:
    coda_sb_printf(b, "      const float r%d = (float)(%s);\n", in->dst, g->pair ? "c" : "c + e");
    return;
  case IR_READ:
    coda_sb_printf(b, "      const float r%d = ", in->dst);
    emit_read(g, in->input, in->lane);
    coda_sb_printf(b, ";\n");
    return;
  case IR_MATH: break;
  }
  const char *bin = NULL, *fn1 = NULL, *cmp = NULL;
  switch (in->op) {
  case CODA_OP_ADD: bin = "+"; break;
  case CODA_OP_SUB: bin = "-"; break;
  case CODA_OP_MUL: bin = "*"; break;
  case CODA_OP_DIV: bin = "/"; break;
  case CODA_OP_LT: cmp = "<"; break;
  case CODA_OP_LE: cmp = "<="; break;
  case CODA_OP_GT: cmp = ">"; break;
  case CODA_OP_GE: cmp = ">="; break;
  case CODA_OP_EQ: cmp = "=="; break;
  case CODA_OP_NE: cmp = "!="; break;
  case CODA_OP_EXP: fn1 = "expf"; break;
  case CODA_OP_LOG: fn1 = "logf"; break;
  case CODA_OP_SQRT: fn1 = "sqrtf"; break;
  case CODA_OP_TANH: fn1 = "tanhf"; break;
  case CODA_OP_ABS: fn1 = "fabsf"; break;
  case CODA_OP_SIGMOID: fn1 = "coda_epi::sigm"; break;
  case CODA_OP_GELU: fn1 = "coda_epi::gelu"; break;
  case CODA_OP_DGELU: fn1 = "coda_epi::dgelu"; break;
  case CODA_OP_DSILU: fn1 = "coda_epi::dsilu"; break;
  default: break;
  }
  if (bin) {
    coda_sb_printf(b, "      const float r%d = r%d %s r%d;\n", in->dst, a[0], bin, a[1]);
  } else if (cmp) {
    coda_sb_printf(b, "      const float r%d = r%d %s r%d ? 1.0f : 0.0f;\n", in->dst, a[0], cmp, a[1]);
  } else if (fn1) {
    coda_sb_printf(b, "      const float r%d = %s(r%d);\n", in->dst, fn1, a[0]);
  } else {
    switch (in->op) {
    case CODA_OP_NEG: coda_sb_printf(b, "      const float r%d = -r%d;\n", in->dst, a[0]); break;
    case CODA_OP_FMA:
      coda_sb_printf(b, "      const float r%d = fmaf(r%d, r%d, r%d);\n", in->dst, a[0], a[1], a[2]);
      break;
    case CODA_OP_RSQRT: coda_sb_printf(b, "      const float r%d = 1.0f / sqrtf(r%d);\n", in->dst, a[0]); break;
    case CODA_OP_SILU:
      coda_sb_printf(b, "      const float r%d = r%d * coda_epi::sigm(r%d);\n", in->dst, a[0], a[0]);
      break;
    case CODA_OP_MIN: coda_sb_printf(b, "      const float r%d = fminf(r%d, r%d);\n", in->dst, a[0], a[1]); break;
    case CODA_OP_MAX: coda_sb_printf(b, "      const float r%d = fmaxf(r%d, r%d);\n", in->dst, a[0], a[1]); break;
    case CODA_OP_SELECT:
      coda_sb_printf(b, "      const float r%d = r%d != 0.0f ? r%d : r%d;\n", in->dst, a[0], a[1], a[2]);
      break;
    case CODA_OP_SWIGLU:
      coda_sb_printf(b, "      const float r%d = r%d * coda_epi::sigm(r%d) * r%d;\n", in->dst, a[0], a[0], a[1]);
      break;
    case CODA_OP_GEGLU:
      coda_sb_printf(b, "      const float r%d = coda_epi::gelu(r%d) * r%d;\n", in->dst, a[0], a[1]);
      break;
    case CODA_OP_DSWIGLU: /* dg = dy*u*dsilu(g), du = dy*g*sigmoid(g) */
      coda_sb_printf(b,
                "      float r%d, r%d;\n      { const float s_ = coda_epi::sigm(r%d);\n"
                "        r%d = r%d * r%d * (s_ * (1.0f + r%d * (1.0f - s_)));\n"
                "        r%d = r%d * r%d * s_; }\n",
                in->dst, in->dst2, a[0], in->dst, a[2], a[1], a[0], in->dst2, a[2], a[0]);
      break;
    case CODA_OP_DGEGLU: /* dg = dy*u*dgelu(g), du = dy*gelu(g) */
      coda_sb_printf(b,
                "      const float r%d = r%d * r%d * coda_epi::dgelu(r%d);\n"
                "      const float r%d = r%d * coda_epi::gelu(r%d);\n",
                in->dst, a[2], a[1], a[0], in->dst2, a[2], a[0]);
      break;
    case CODA_OP_ROPE:
    case CODA_OP_ROPE_BWD:
      coda_sb_printf(b, "      float r%d, r%d;\n      coda_epi::rope(r%d, r%d, r%d, r%d, r%d, %s, r%d, r%d);\n",
                in->dst, in->dst2, a[0], a[1], a[2], a[3], a[4],
                in->op == CODA_OP_ROPE ? "1.0f" : "-1.0f", in->dst, in->dst2);
      break;
    default:
      coda_sb_printf(b, "#error unknown op %d\n", (int)in->op);
      break;
    }
  }
}

/* Row-invariant values: an instruction whose operands are constants,
 * scalar, row or rowsum inputs, the builtin `row` or other such values has
 * one value per fragment row. Math of that kind is computed once for each
 * of the thread's two rows (h = 0, 1) before the fragment loops and read
 * per point from hv%d[h]: the same fp32 operations, so the same bits, e.g.
 * one rsqrt(ss * inv_n + eps) per row instead of one per value. */
static void plan_hoist(gen *g) {
  const struct coda_program_s *p = g->p;
  unsigned char inv[2 * CODA_MAX_INSTRS];
  memset(inv, 0, sizeof inv);
  memset(g->hoist, 0, sizeof g->hoist);
  memset(g->pre, 0, sizeof g->pre);
  memset(g->pp, 0, sizeof g->pp);
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    int v = 0;
    switch (in->code) {
    case IR_CONST:
    case IR_ROW: v = 1; break;
    case IR_READ: {
      const coda_arg_kind k = p->inputs[in->input].kind;
      v = k == CODA_ARG_ROW || k == CODA_ARG_SCALAR || k == CODA_ARG_ROWSUM;
    } break;
    case IR_MATH:
      v = 1;
      for (int a = 0; a < in->nargs; a++) v &= inv[in->args[a]];
      break;
    default: break;
    }
    inv[in->dst] = (unsigned char)v;
    if (in->dst2 >= 0) inv[in->dst2] = (unsigned char)v;
    if (v && in->code == IR_MATH) {
      g->hoist[in->dst] = g->pre[in->dst] = 1;
      if (in->dst2 >= 0) g->hoist[in->dst2] = g->pre[in->dst2] = 1;
    }
  }
  for (int i = p->ninstrs - 1; i >= 0; i--) { /* what the hoisted math reads */
    const ir_instr *in = &p->instrs[i];
    if (in->code != IR_MATH) continue;
    const int h = g->hoist[in->dst];
    for (int a = 0; a < in->nargs; a++) {
      if (h) g->pre[in->args[a]] = 1;
      else g->pp[in->args[a]] = 1;
    }
  }
  for (int o = 0; o < p->noutputs; o++) {
    g->pp[p->outputs[o].reg_even] = 1;
    if (p->outputs[o].reg_odd >= 0) g->pp[p->outputs[o].reg_odd] = 1;
  }
  for (int q = 0; q < p->nreduces; q++) g->pp[p->reduces[q].reg] = 1;
}

/* The hoisted row values: hv%d[2] for those read per point. */
static void emit_hoist_prelude(gen *g) {
  const struct coda_program_s *p = g->p;
  int any = 0;
  for (int r = 0; r < p->nregs; r++) any |= g->hoist[r] && g->pp[r];
  if (!any) return;
  coda_strbuf *b = g->b;
  coda_sb_printf(b, "    /* row-invariant math, once per fragment row */\n");
  for (int r = 0; r < p->nregs; r++)
    if (g->hoist[r] && g->pp[r]) coda_sb_printf(b, "    float hv%d[2];\n", r);
  coda_sb_printf(b, "#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n      const int r = f.row0 + 8 * h;\n      (void)r;\n");
  for (int i = 0; i < p->ninstrs; i++)
    if (g->pre[p->instrs[i].dst]) emit_instr(g, &p->instrs[i]);
  for (int r = 0; r < p->nregs; r++)
    if (g->hoist[r] && g->pp[r]) coda_sb_printf(b, "      hv%d[h] = r%d;\n", r, r);
  coda_sb_printf(b, "    }\n");
}

/* The program's instructions at one point: hoisted values are read from
 * hv%d[h]; constants and row values only the hoisted math used are left
 * out. */
static void emit_point_instrs(gen *g) {
  const struct coda_program_s *p = g->p;
  for (int i = 0; i < p->ninstrs; i++) {
    const ir_instr *in = &p->instrs[i];
    if (g->hoist[in->dst]) {
      if (g->pp[in->dst]) coda_sb_printf(g->b, "      const float r%d = hv%d[h];\n", in->dst, in->dst);
      if (in->dst2 >= 0 && g->pp[in->dst2])
        coda_sb_printf(g->b, "      const float r%d = hv%d[h];\n", in->dst2, in->dst2);
      continue;
    }
    if (g->pre[in->dst] && !g->pp[in->dst]) continue;
    emit_instr(g, in);
  }
}

static int seg_width(const ir_reduce *r) {
  if (r->kind == CODA_REDUCE_SEGSUM) return r->segment < CODA_EPI_BN ? r->segment : CODA_EPI_BN;
  return CODA_EPI_BN;
}

/* Row-type reductions folded per thread over a row (g >= 8 columns). */
static int is_row_fold(const ir_reduce *r) {
  switch (r->kind) {
  case CODA_REDUCE_ROWSUM:
  case CODA_REDUCE_ROWMAX:
  case CODA_REDUCE_ROWLSE: return 1;
  case CODA_REDUCE_SEGSUM: return seg_width(r) >= 8;
  default: return 0;
  }
}

/* Quad combine of the folded state of reduction q for row half h and the
 * write by lane 0 of the quad at partial column `colexpr`. */
static void emit_row_flush(gen *g, int q, const char *colexpr, const char *cond, const char *indent) {
  coda_strbuf *b = g->b;
  const ir_reduce *r = &g->p->reduces[q];
  const int k = g->arg_red0 + q;
  coda_sb_printf(b, "%s{\n", indent);
  switch (r->kind) {
  case CODA_REDUCE_ROWMAX:
    coda_sb_printf(b, "%s  float v_ = ra%d[h], o_;\n", indent, q);
    coda_sb_printf(b, "%s  o_ = coda_epi::shx(v_, 1); v_ = o_ > v_ ? o_ : v_;\n", indent);
    coda_sb_printf(b, "%s  o_ = coda_epi::shx(v_, 2); v_ = o_ > v_ ? o_ : v_;\n", indent);
    break;
  case CODA_REDUCE_ROWLSE:
    coda_sb_printf(b, "%s  float m_ = ra%d[h], s_ = rs%d[h];\n", indent, q, q);
    coda_sb_printf(b, "%s  { float m2 = coda_epi::shx(m_, 1), s2 = coda_epi::shx(s_, 1); coda_epi::lse_merge(m_, s_, m2, s2); }\n", indent);
    coda_sb_printf(b, "%s  { float m2 = coda_epi::shx(m_, 2), s2 = coda_epi::shx(s_, 2); coda_epi::lse_merge(m_, s_, m2, s2); }\n", indent);
    coda_sb_printf(b, "%s  const float v_ = (m_ == -CODA_INF || m_ == CODA_INF) ? m_ : m_ + logf(s_);\n", indent);
    break;
  default:
    coda_sb_printf(b, "%s  float v_ = ra%d[h];\n", indent, q);
    coda_sb_printf(b, "%s  v_ += coda_epi::shx(v_, 1);\n", indent);
    coda_sb_printf(b, "%s  v_ += coda_epi::shx(v_, 2);\n", indent);
    break;
  }
  coda_sb_printf(b, "%s  if (qd == 0 && r < M && %s) ((float *)p.ptr[%d])[(long long)r * p.ld[%d] + (%s)] = v_;\n",
            indent, cond, k, k, colexpr);
  coda_sb_printf(b, "%s}\n", indent);
}

static void emit_row_reset(gen *g, int q, const char *indent) {
  const ir_reduce *r = &g->p->reduces[q];
  if (r->kind == CODA_REDUCE_ROWMAX || r->kind == CODA_REDUCE_ROWLSE)
    coda_sb_printf(g->b, "%sra%d[h] = -CODA_INF;\n", indent, q);
  else
    coda_sb_printf(g->b, "%sra%d[h] = 0.0f;\n", indent, q);
  if (r->kind == CODA_REDUCE_ROWLSE) coda_sb_printf(g->b, "%srs%d[h] = 0.0f;\n", indent, q);
}

/* Staging plan: tile inputs and outputs whose chunk rows (32 columns) are
 * 32-128 bytes go through the shared scratch in 64 x 32 chunks, so that
 * global accesses are row-contiguous 16-byte vectors (or TMA) instead of 8
 * rows x 4 bytes per warp instruction. Accumulating outputs are staged only
 * when they are f32 of standard width: the chunk holds the fp32 value and
 * TMA reduce-adds it (out = out + value, one fp32 addition rounded to
 * nearest even, each element once: the direct path's bits). 16-bit
 * accumulating outputs stay direct, since a bf16/f16 reduce-add would round
 * the value to the output type before the addition (two roundings). With
 * room for two buffers per input the next chunk's inputs are fetched
 * (cp.async) while the current one is computed. What does not fit keeps
 * direct accesses. */
typedef struct stage_plan {
  int in_off[CODA_MAX_INPUTS], in_rb[CODA_MAX_INPUTS];    /* -1: direct */
  int out_off[CODA_MAX_OUTPUTS], out_rb[CODA_MAX_OUTPUTS];
  int dbl;      /* inputs double-buffered */
  int out_dbl;  /* outputs double-buffered */
  int nin, nout;
} stage_plan;

static int dt_size(coda_dtype t) { return t == CODA_BF16 || t == CODA_F16 ? 2 : 4; }
static int chunk_row_bytes(coda_dtype t, coda_width w);
/* An output the staging may take (accumulating ones: f32, standard width). */
static int out_stageable(const ir_output *op) {
  return !op->accumulate || (op->dtype == CODA_F32 && op->width == CODA_WIDTH_FULL);
}

/* Bytes of one 32-column chunk row of a view (0: not stageable). */
int coda_epi_chunk_row_bytes(coda_dtype t, coda_width w) { return chunk_row_bytes(t, w); }
static int chunk_row_bytes(coda_dtype t, coda_width w) {
  int rb = 32 * dt_size(t);
  if (w == CODA_WIDTH_X2) rb *= 2;
  else if (w == CODA_WIDTH_HALF) rb /= 2;
  return rb >= 32 && rb <= 128 ? rb : 0;
}

/* The inputs the program reads (used[k]; rowpick indices are read
 * separately) and its number of colsum reductions. */
static int program_reads(const struct coda_program_s *p, int used[CODA_MAX_INPUTS]) {
  memset(used, 0, CODA_MAX_INPUTS * sizeof *used);
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].code == IR_READ) used[p->instrs[i].input] = 1;
  int ncol = 0;
  for (int q = 0; q < p->nreduces; q++) ncol += p->reduces[q].kind == CODA_REDUCE_COLSUM;
  return ncol;
}

static void plan_staging(const struct coda_program_s *p, const int *used, int ncol, long scratch,
                         stage_plan *sp) {
  memset(sp, 0, sizeof *sp);
  for (int k = 0; k < CODA_MAX_INPUTS; k++) sp->in_off[k] = -1;
  for (int o = 0; o < CODA_MAX_OUTPUTS; o++) sp->out_off[o] = -1;
  const long budget = scratch - (long)ncol * 4 * 4 * CODA_EPI_BN; /* after the colsum slots */
  long in_bytes = 0, out_bytes = 0;
  for (int k = 0; k < p->ninputs; k++)
    if (used[k] && p->inputs[k].kind == CODA_ARG_TILE)
      in_bytes += 64L * chunk_row_bytes(p->inputs[k].dtype, p->inputs[k].width);
  for (int o = 0; o < p->noutputs; o++)
    if (out_stageable(&p->outputs[o])) out_bytes += 64L * chunk_row_bytes(p->outputs[o].dtype, p->outputs[o].width);
  /* (shapes the plan skips below only make the estimate conservative) */
  /* everything with prefetch, else everything single-buffered, else
   * greedily in program order with prefetch */
  sp->dbl = !(2 * in_bytes + out_bytes > budget && in_bytes + out_bytes <= budget);
  const int nbuf = sp->dbl ? 2 : 1;
  long off = (long)ncol * 4 * 4 * CODA_EPI_BN;
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    const int rb = chunk_row_bytes(in->dtype, in->width);
    if (!used[k] || in->kind != CODA_ARG_TILE || !rb || (p->pair_mode && in->width == CODA_WIDTH_X2) ||
        off + nbuf * 64L * rb > scratch)
      continue;
    sp->in_off[k] = (int)off;
    sp->in_rb[k] = rb;
    off += nbuf * 64L * rb;
    sp->nin++;
  }
  /* Outputs: two buffers each when all of them fit twice (a chunk's TMA
   * store then reads one buffer while the next chunk fills the other),
   * else one. */
  const long out0 = off;
  for (sp->out_dbl = 1; sp->out_dbl >= 0; sp->out_dbl--) {
    off = out0;
    sp->nout = 0;
    int dropped = 0;
    for (int o = 0; o < p->noutputs; o++) {
      const ir_output *op = &p->outputs[o];
      const int rb = chunk_row_bytes(op->dtype, op->width);
      /* the store shapes of the direct path: pair mode standard or half,
       * elem mode standard or x2 */
      const int shape_ok = p->pair_mode ? op->width != CODA_WIDTH_X2 : op->width != CODA_WIDTH_HALF;
      sp->out_off[o] = -1;
      if (!out_stageable(op) || !rb || !shape_ok) continue;
      if (off + (1 + sp->out_dbl) * 64L * rb > scratch) {
        dropped = 1;
        continue;
      }
      sp->out_off[o] = (int)off;
      sp->out_rb[o] = rb;
      off += (1 + sp->out_dbl) * 64L * rb;
      sp->nout++;
    }
    if (!dropped || !sp->out_dbl) break;
  }
  if (sp->out_dbl < 0) sp->out_dbl = 0;
}

/* Values per row of a view (L) and the first value of chunk jc (v0). */
static const char *view_len(coda_width w) {
  return w == CODA_WIDTH_X2 ? "2LL * N" : w == CODA_WIDTH_HALF ? "(N + 1LL) / 2" : "(long long)N";
}
static const char *view_v0(coda_width w, const char *jc, char *out, size_t n) {
  if (w == CODA_WIDTH_X2) snprintf(out, n, "2LL * (tc0 + 8 * (%s))", jc);
  else if (w == CODA_WIDTH_HALF) snprintf(out, n, "(long long)(tc0 + 8 * (%s)) / 2", jc);
  else snprintf(out, n, "(long long)(tc0 + 8 * (%s))", jc);
  return out;
}
/* Byte of the thread's value(s) of column pair jj inside a chunk row. */
static const char *view_byte(coda_width w) {
  return w == CODA_WIDTH_X2 ? "2 * (8 * jj + 2 * qd)" : w == CODA_WIDTH_HALF ? "(4 * jj + qd)" : "(8 * jj + 2 * qd)";
}

static void emit_stage_in(gen *g, const stage_plan *sp, const char *jc, const char *buf, const char *indent) {
  for (int k = 0; k < g->p->ninputs; k++) {
    if (sp->in_off[k] < 0) continue;
    const ir_input *in = &g->p->inputs[k];
    char v0s[128];
    view_v0(in->width, jc, v0s, sizeof v0s);
    coda_sb_printf(g->b, "%scoda_epi::stage_in<%d, %d>(sb_ + %d + (%s) * %d, p.ptr[%d], p.ld[%d], al%d, wr0, %s, %s, M);\n",
              indent, dt_size(in->dtype), sp->in_rb[k], sp->in_off[k], buf, 64 * sp->in_rb[k], k, k, k, v0s,
              view_len(in->width));
  }
}

/* TMA slots of the staged inputs (the first CODA_EPI_MAX_TMA_IN of them);
 * returns 1 when every staged input has one. */
static int input_slots(const struct coda_program_s *p, const stage_plan *sp, int *slot) {
  int next = CODA_EPI_MAX_TMA, all = 1;
  for (int k = 0; k < p->ninputs; k++) {
    slot[k] = -1;
    if (sp->in_off[k] < 0) continue;
    if (next < CODA_EPI_MAX_TMA + CODA_EPI_MAX_TMA_IN) slot[k] = next++;
    else all = 0;
  }
  return all;
}

/* The staged inputs of chunk `jc` into buffer `buf` by TMA: one thread
 * arms the mbarrier with the bytes of the boxes it issues and issues them;
 * a box wholly outside the view (rows past M, a chunk past the row's end)
 * is not issued, so the barrier completes on what was, and its staged
 * values are never used (their points are outside M x N). */
static void emit_tma_in(gen *g, const stage_plan *sp, const int *slot, const char *jc, const char *buf,
                        const char *indent) {
  coda_sb_printf(g->b, "%sif (threadIdx.x %% 128 == 0) {\n", indent);
  coda_sb_printf(g->b, "%s  uint64_t *const lb_ = &sc.ld_bar[%s];\n%s  unsigned tx_ = 0;\n", indent, buf, indent);
  for (int k = 0; k < g->p->ninputs; k++) {
    if (sp->in_off[k] < 0) continue;
    const ir_input *in = &g->p->inputs[k];
    char v0[128];
    coda_sb_printf(g->b, "%s  const long long v%d_ = %s;\n", indent, k, view_v0(in->width, jc, v0, sizeof v0));
    coda_sb_printf(g->b, "%s  const bool i%d_ = wr0 < M && v%d_ < %s;\n", indent, k, k, view_len(in->width));
    coda_sb_printf(g->b, "%s  tx_ += i%d_ ? %du : 0u;\n", indent, k, 64 * sp->in_rb[k]);
  }
  coda_sb_printf(g->b, "%s  coda_sm90::mbar_expect_tx(lb_, tx_);\n", indent);
  for (int k = 0; k < g->p->ninputs; k++) {
    if (sp->in_off[k] < 0) continue;
    coda_sb_printf(g->b, "%s  if (i%d_) coda_sm90::tma_load_2d(sb_ + %d + (%s) * %d, &p.tm[%d], lb_, (int)v%d_, wr0);\n",
                   indent, k, sp->in_off[k], buf, 64 * sp->in_rb[k], slot[k], k);
  }
  coda_sb_printf(g->b, "%s}\n", indent);
}

/* tin: every staged input has its TMA map and the caller lent the
 * load barriers. */
static void emit_tin(gen *g, const stage_plan *sp, const int *slot, const char *indent) {
  coda_sb_printf(g->b, "%sconst bool tin = sc.ld_bar != nullptr", indent);
  for (int k = 0; k < g->p->ninputs; k++)
    if (sp->in_off[k] >= 0 && slot[k] >= 0) coda_sb_printf(g->b, " && (p.flags[%d] & 4)", k);
  coda_sb_printf(g->b, ";\n");
}

/* One chunk's staged inputs into buffer `buf`: by TMA when tin holds (code
 * for it only when every staged input has a slot), else by cp.async from
 * all threads, committed and followed by `cp_tail` (a wait, or NULL). */
static void emit_fetch(gen *g, const stage_plan *sp, const int *slot, int tma_in, const char *jc,
                       const char *buf, const char *cp_tail, const char *indent) {
  char in2[32];
  snprintf(in2, sizeof in2, "%s  ", indent);
  const char *ci = tma_in ? in2 : indent;
  if (tma_in) {
    coda_sb_printf(g->b, "%sif (tin) {\n", indent);
    emit_tma_in(g, sp, slot, jc, buf, in2);
    coda_sb_printf(g->b, "%s} else {\n", indent);
  }
  emit_stage_in(g, sp, jc, buf, ci);
  coda_sb_printf(g->b, "%scoda_epi::cp_commit();\n", ci);
  if (cp_tail) coda_sb_printf(g->b, "%s%s\n", ci, cp_tail);
  if (tma_in) coda_sb_printf(g->b, "%s}\n", indent);
}

void coda_epi_input_tma_slots(coda_program pg, int *slot) {
  const struct coda_program_s *p = pg;
  int used[CODA_MAX_INPUTS];
  const int ncol = program_reads(p, used);
  stage_plan sp;
  plan_staging(p, used, ncol, coda_epi_scratch_bytes(pg), &sp);
  input_slots(p, &sp, slot);
}

char *coda_epi_functor_source(coda_context ctx, coda_program pg) {
  const struct coda_program_s *p = pg;
  if (coda_epi_supported(ctx, pg) != CODA_OK) return NULL;
  coda_strbuf sb = {0};
  coda_strbuf *b = &sb;
  gen g = {p, b, p->pair_mode, p->ninputs, p->ninputs + p->noutputs, {0}, {0}, {0}};
  const int pair = p->pair_mode;
  plan_hoist(&g);

  int used[CODA_MAX_INPUTS];
  const int ncol = program_reads(p, used);
  int has_rowpick = 0;
  for (int q = 0; q < p->nreduces; q++) has_rowpick |= p->reduces[q].kind == CODA_REDUCE_ROWPICK;

  stage_plan sp;
  const long scratch = coda_epi_scratch_bytes(pg);
  plan_staging(p, used, ncol, scratch, &sp);
  const int staged = sp.nin + sp.nout > 0;
  /* staged inputs come by TMA (tin, decided at run time: every staged
   * input has a map) or by cp.async from all threads */
  int slot[CODA_MAX_INPUTS];
  const int tma_in = sp.nin > 0 && input_slots(p, &sp, slot);

  coda_sb_printf(b, "/* program (%s mode): %d instructions, %d inputs, %d outputs, %d reductions */\n",
            pair ? "pair" : "elem", p->ninstrs, p->ninputs, p->noutputs, p->nreduces);
  coda_sb_printf(b, "/* arguments:");
  for (int k = 0; k < p->ninputs; k++)
    coda_sb_printf(b, " %d=%s(%s %s%s)", k, p->inputs[k].name, kind_name(p->inputs[k].kind),
              coda_dtype_name(p->inputs[k].dtype),
              p->inputs[k].width == CODA_WIDTH_X2 ? " x2" : p->inputs[k].width == CODA_WIDTH_HALF ? " half" : "");
  for (int o = 0; o < p->noutputs; o++)
    coda_sb_printf(b, " %d=%s(output)", g.arg_out0 + o, p->outputs[o].name);
  for (int q = 0; q < p->nreduces; q++)
    coda_sb_printf(b, " %d=%s(%s)", g.arg_red0 + q, p->reduces[q].name, ir_reduce_kind_name(p->reduces[q].kind));
  coda_sb_printf(b, " */\n");
  /* the host fills coda_epi_params (epi_codegen.h): the two layouts agree */
  coda_sb_printf(b, "static_assert(sizeof(CodaEpiParams) == %zu, \"CodaEpiParams as the host's coda_epi_params\");\n",
                 sizeof(coda_epi_params));
  coda_sb_printf(b, "struct CodaEpi {\n  CodaEpiParams p;\n");
  if (sp.nout) /* the shared memory must outlive the last TMA stores' reads */
    coda_sb_printf(b, "  __device__ __forceinline__ void finish() const { if (threadIdx.x %% 128 == 0) coda_sm90::bulk_wait_all(); }\n");
  else
    coda_sb_printf(b, "  __device__ __forceinline__ void finish() const {}\n");
  /* the GEMM calls prefetch() during the mainloop: the first chunk's
   * inputs are then on their way when the fragment arrives */
  coda_sb_printf(b, "  __device__ __forceinline__ void prefetch(int wr0, int tc0, const coda_sm90::EpiScratch &sc) const {\n");
  if (sp.nin && sp.dbl) {
    coda_sb_printf(b, "    const int M = p.M, N = p.N;\n    uint8_t *const sb_ = (uint8_t *)sc.buf;\n");
    for (int k = 0; k < p->ninputs; k++)
      if (sp.in_off[k] >= 0)
        coda_sb_printf(b, "    const bool al%d = ((((unsigned long long)p.ptr[%d]) | (unsigned long long)(p.ld[%d] * %d)) & 15) == 0;\n",
                  k, k, k, dt_size(p->inputs[k].dtype));
    if (tma_in) emit_tin(&g, &sp, slot, "    ");
    emit_fetch(&g, &sp, slot, tma_in, "0", "0", NULL, "    ");
  } else {
    coda_sb_printf(b, "    (void)wr0; (void)tc0; (void)sc;\n");
  }
  coda_sb_printf(b, "  }\n");
  coda_sb_printf(b, "  template <int BN>\n  __device__ __forceinline__ void operator()("
               "const coda_sm90::AccFragment<BN> &f, const coda_sm90::EpiScratch &sc) const {\n");
  coda_sb_printf(b, "    static_assert(BN == %d, \"partials are generated for tile_n = %d\");\n", CODA_EPI_BN, CODA_EPI_BN);
  coda_sb_printf(b, "    static_assert(coda_sm90::kEpiScratchBytes == %ld, \"the staging plan's scratch\");\n", scratch);
  if (ncol)
    coda_sb_printf(b, "    static_assert(%d * 4 * BN * 4 <= coda_sm90::kEpiScratchBytes, \"colsum scratch\");\n", ncol);
  coda_sb_printf(b, "    const int M = p.M, N = p.N;\n");
  coda_sb_printf(b, "    const int lane = threadIdx.x %% 32, qd = lane %% 4, warp = (threadIdx.x %% 128) / 32;\n");
  coda_sb_printf(b, "    const int tc0 = f.col0 - 2 * qd;   /* first column of the tile */\n");
  coda_sb_printf(b, "    const int tn = tc0 / BN;           /* column tile */\n");
  coda_sb_printf(b, "    const int wr0 = f.row0 - warp * 16 - lane / 4; /* first row of the warpgroup's 64 */\n");
  coda_sb_printf(b, "    (void)tn; (void)wr0; (void)warp; (void)sc;\n");
  if (staged) {
    /* all 128 threads of the warpgroup take part (barriers) */
    coda_sb_printf(b, "    uint8_t *const sb_ = (uint8_t *)sc.buf;\n");
    coda_sb_printf(b, "    const int lrow = f.row0 - wr0; /* the thread's row in the chunk (and lrow + 8) */\n");
    coda_sb_printf(b, "    (void)lrow;\n");
    for (int k = 0; k < p->ninputs; k++)
      if (sp.in_off[k] >= 0)
        coda_sb_printf(b, "    const bool al%d = ((((unsigned long long)p.ptr[%d]) | (unsigned long long)(p.ld[%d] * %d)) & 15) == 0;\n",
                  k, k, k, dt_size(p->inputs[k].dtype));
    for (int o = 0; o < p->noutputs; o++)
      if (sp.out_off[o] >= 0) {
        const int k = g.arg_out0 + o;
        coda_sb_printf(b, "    const bool al%d = ((((unsigned long long)p.ptr[%d]) | (unsigned long long)(p.ld[%d] * %d)) & 15) == 0;\n",
                  k, k, k, dt_size(p->outputs[o].dtype));
      }
    if (tma_in) emit_tin(&g, &sp, slot, "    ");
  }

  /* scalars and row vectors; for column vectors the fast case (contiguous,
   * aligned, the tile's columns all inside N): one base pointer per
   * fragment and loads at compile-time offsets from it, instead of a 64-bit
   * address and bound checks per pair of values */
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    if (!used[k]) continue;
    if (in->kind == CODA_ARG_COL)
      coda_sb_printf(b,
                     "    const bool cf%d = (p.flags[%d] & 1) && tc0 + BN <= N;\n"
                     "    const uint8_t *const cp%d = (const uint8_t *)p.ptr[%d] + (long long)f.col0 * %d;\n",
                     k, k, k, k, dt_size(in->dtype));
    if (in->kind == CODA_ARG_SCALAR)
      coda_sb_printf(b, "    const float sc%d = coda_epi::ld1<%d>(p.ptr[%d], 0);\n", k, dt_code(in->dtype), k);
    else if (in->kind == CODA_ARG_ROW)
      coda_sb_printf(b,
                "    float rw%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
                "      const int r = f.row0 + 8 * h;\n"
                "      rw%d[h] = r < M ? coda_epi::ld1<%d>(p.ptr[%d], (long long)r * p.ld[%d]) : 0.0f;\n    }\n",
                k, k, dt_code(in->dtype), k, k);
    else if (in->kind == CODA_ARG_ROWSUM) /* the row's p.cnt partials, summed in index order */
      coda_sb_printf(b,
                "    float rq%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
                "      const int r = f.row0 + 8 * h;\n"
                "      float s_ = 0.0f;\n"
                "      if (r < M) {\n"
                "        const float *q_ = (const float *)p.ptr[%d] + (long long)r * p.ld[%d];\n"
                "        s_ = q_[0];\n"
                "        for (int t_ = 1; t_ < p.cnt[%d]; ++t_) s_ += q_[t_];\n"
                "      }\n"
                "      rq%d[h] = s_;\n    }\n",
                k, k, k, k, k);
  }
  emit_hoist_prelude(&g);
  /* reduction state */
  for (int q = 0; q < p->nreduces; q++) {
    const ir_reduce *r = &p->reduces[q];
    if (is_row_fold(r)) {
      int neg = r->kind == CODA_REDUCE_ROWMAX || r->kind == CODA_REDUCE_ROWLSE;
      coda_sb_printf(b, "    float ra%d[2] = {%s, %s};\n", q, neg ? "-CODA_INF" : "0.0f", neg ? "-CODA_INF" : "0.0f");
      if (r->kind == CODA_REDUCE_ROWLSE) coda_sb_printf(b, "    float rs%d[2] = {0.0f, 0.0f};\n", q);
    } else if (r->kind == CODA_REDUCE_ROWPICK) {
      const int ki = r->index_input, kp = g.arg_red0 + q;
      coda_sb_printf(b,
                "    int pk%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
                "      const int r = f.row0 + 8 * h;\n"
                "      const int k_ = r < M ? ((const int *)p.ptr[%d])[(long long)r * p.ld[%d]] : -1;\n"
                "      pk%d[h] = (k_ >= 0 && k_ < N) ? k_ : -1;\n"
                "      /* an index outside [0, N): column tile 0 writes 0 */\n"
                "      if (r < M && pk%d[h] < 0 && f.col0 == 0) ((float *)p.ptr[%d])[(long long)r * p.ld[%d]] = 0.0f;\n"
                "    }\n",
                q, ki, ki, q, q, kp, kp);
    }
  }

  /* the fragment, in chunks of JC column pairs: every input of a chunk is
   * loaded before any of its stores, so the loads are in flight together
   * (a store may alias a later load as far as the compiler knows) */
  if (sp.nin && sp.dbl) {
    coda_sb_printf(b, "    if (!sc.pre) {\n");
    emit_fetch(&g, &sp, slot, tma_in, "0", "0", NULL, "      ");
    coda_sb_printf(b, "    }\n");
  }
  coda_sb_printf(b, "#pragma unroll\n    for (int jc = 0; jc < BN / 8; jc += %d) {\n", EPI_JC);
  /* TMA: chunk c of a fragment uses buffer c % 2 (double) or 0 (single);
   * every fragment runs the same chunks, so each barrier's phase parity
   * is 0 at a fragment's first use */
  if (sp.nin && sp.dbl) {
    coda_sb_printf(b, "      if (jc + %d < BN / 8) {\n", EPI_JC);
    char buf[48];
    snprintf(buf, sizeof buf, "(jc / %d + 1) & 1", EPI_JC);
    emit_fetch(&g, &sp, slot, tma_in, "jc + 4", buf, "coda_epi::cp_wait<1>();", "        ");
    coda_sb_printf(b, "      } else {\n");
    coda_sb_printf(b, "        %scoda_epi::cp_wait<0>();\n      }\n", tma_in ? "if (!tin) " : "");
  } else if (sp.nin) {
    emit_fetch(&g, &sp, slot, tma_in, "jc", "0", "coda_epi::cp_wait<0>();", "      ");
  }
  /* the chunk's inputs are visible to all; the previous chunk's staged
   * outputs have been stored */
  /* TMA stores of earlier chunks must have read the output staging this
   * chunk writes (with two buffers: the store of chunk jc - 2) */
  if (sp.nout)
    coda_sb_printf(b, "      if (threadIdx.x %% 128 == 0) coda_sm90::bulk_wait_read<%d>();\n", sp.out_dbl ? 1 : 0);
  if (staged) {
    /* cp.async'ed inputs and the output staging need the barrier; TMA'd
     * inputs are visible to every thread that waits on their mbarrier */
    if (tma_in && !sp.nout) coda_sb_printf(b, "      if (!tin) coda_sm90::wg_sync(sc.bar);\n");
    else coda_sb_printf(b, "      coda_sm90::wg_sync(sc.bar);\n");
  }
  if (tma_in) {
    if (sp.dbl) coda_sb_printf(b, "      if (tin) coda_sm90::mbar_wait(&sc.ld_bar[(jc / %d) & 1], (jc / %d) & 1);\n", EPI_JC, 2 * EPI_JC);
    else coda_sb_printf(b, "      if (tin) coda_sm90::mbar_wait(&sc.ld_bar[0], (jc / %d) & 1);\n", EPI_JC);
  }
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    if (!used[k]) continue;
    if (in->kind == CODA_ARG_COL) coda_sb_printf(b, "      float2 cvb%d[%d];\n", k, EPI_JC);
    else if (in->kind == CODA_ARG_TILE)
      coda_sb_printf(b, "      %s tvb%d[%d][2];\n",
                in->width == CODA_WIDTH_HALF ? "float" : in->width == CODA_WIDTH_X2 ? "float4" : "float2", k,
                EPI_JC);
  }
  coda_sb_printf(b, "#pragma unroll\n      for (int jj = 0; jj < %d; ++jj) {\n", EPI_JC);
  coda_sb_printf(b, "        const int c = f.col0 + 8 * (jc + jj);\n");
  coda_sb_printf(b, "        const bool cok0 = c < N, cok1 = c + 1 < N;\n");
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    if (!used[k] || in->kind != CODA_ARG_COL) continue;
    coda_sb_printf(b, "        cvb%d[jj] = cf%d ? coda_epi::ldv2<%d>(cp%d + %d * (jc + jj))\n"
                   "                    : coda_epi::ld2<%d>(p.ptr[%d], (long long)c * p.ld[%d], p.ld[%d], cok0, cok1, p.flags[%d] & 1);\n",
              k, k, dt_code(in->dtype), k, 8 * dt_size(in->dtype), dt_code(in->dtype), k, k, k, k);
  }
  coda_sb_printf(b, "#pragma unroll\n        for (int h = 0; h < 2; ++h) {\n");
  coda_sb_printf(b, "          const int r = f.row0 + 8 * h;\n");
  coda_sb_printf(b, "          const bool ok0 = r < M && cok0, ok1 = r < M && cok1;\n");
  coda_sb_printf(b, "          const long long ro = (long long)r;\n          (void)ro; (void)ok1;\n");
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    if (!used[k] || in->kind != CODA_ARG_TILE) continue;
    int dt = dt_code(in->dtype);
    if (sp.in_off[k] >= 0) {
      const char *fn = in->width == CODA_WIDTH_HALF ? "sv1" : in->width == CODA_WIDTH_X2 ? "sv4" : "sv2";
      /* row lrow + 8h: swz(r + 8, b) == swz(r, b) + 8 * RB for every RB
       * (the XOR key of row r, (r / (128 / RB)) % (RB / 16), repeats every
       * 8 rows), so h becomes an immediate offset */
      coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::%s<%d>(sb_ + %d + %s * %d + %d * h + coda_epi::swz<%d>(lrow, %d * %s));\n",
                k, fn, dt, sp.in_off[k], sp.dbl ? "((jc / 4) & 1)" : "0", 64 * sp.in_rb[k],
                8 * sp.in_rb[k], sp.in_rb[k], dt_size(in->dtype), view_byte(in->width));
      continue;
    }
    if (in->width == CODA_WIDTH_HALF)
      coda_sb_printf(b, "          tvb%d[jj][h] = ok0 ? coda_epi::ld1<%d>(p.ptr[%d], ro * p.ld[%d] + c / 2) : 0.0f;\n",
                k, dt, k, k);
    else if (in->width == CODA_WIDTH_X2)
      coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::ld4<%d>(p.ptr[%d], ro * p.ld[%d] + 2 * c, ok0, ok1, p.flags[%d] & 2, p.flags[%d] & 1);\n",
                k, dt, k, k, k, k);
    else
      coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::ld2<%d>(p.ptr[%d], ro * p.ld[%d] + c, 1, ok0, ok1, p.flags[%d] & 1);\n",
                k, dt, k, k, k);
  }
  coda_sb_printf(b, "        }\n      }\n");
  for (int q = 0; q < p->nreduces; q++)
    if (p->reduces[q].kind == CODA_REDUCE_ROWLSE)
      coda_sb_printf(b, "    float lv%d[%d][2][2]; /* the chunk's values, folded after it */\n", q, EPI_JC);
  coda_sb_printf(b, "#pragma unroll\n    for (int jj = 0; jj < %d; ++jj) {\n", EPI_JC);
  coda_sb_printf(b, "      const int j = jc + jj;\n");
  coda_sb_printf(b, "      const int c = f.col0 + 8 * j;\n");
  coda_sb_printf(b, "      const bool cok0 = c < N, cok1 = c + 1 < N;\n");
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    if (!used[k] || in->kind != CODA_ARG_COL) continue;
    coda_sb_printf(b, "      const float2 cv%d = cvb%d[jj];\n", k, k);
  }
  for (int q = 0; q < p->nreduces; q++)
    if (p->reduces[q].kind == CODA_REDUCE_COLSUM) coda_sb_printf(b, "      float cs%d[2] = {0.0f, 0.0f};\n", q);
  coda_sb_printf(b, "#pragma unroll\n      for (int h = 0; h < 2; ++h) {\n");
  coda_sb_printf(b, "        const int r = f.row0 + 8 * h;\n");
  coda_sb_printf(b, "        const int i0 = 4 * j + 2 * h;\n");
  coda_sb_printf(b, "        const bool ok0 = r < M && cok0, ok1 = r < M && cok1;\n");
  coda_sb_printf(b, "        const long long ro = (long long)r;\n        (void)ro; (void)i0;\n");
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    if (!used[k] || in->kind != CODA_ARG_TILE) continue;
    coda_sb_printf(b, "        const %s %s%d = tvb%d[jj][h];\n",
              in->width == CODA_WIDTH_HALF ? "float" : in->width == CODA_WIDTH_X2 ? "float4" : "float2",
              in->width == CODA_WIDTH_HALF ? "th" : "tv", k, k);
  }
  /* per-point values that stores and narrow segments consume after the points */
  for (int o = 0; o < p->noutputs; o++)
    coda_sb_printf(b, "        float ov%d[2], ow%d[2]; (void)ow%d;\n", o, o, o);
  for (int q = 0; q < p->nreduces; q++)
    if (p->reduces[q].kind == CODA_REDUCE_SEGSUM && !is_row_fold(&p->reduces[q]))
      coda_sb_printf(b, "        float sv%d[2] = {0.0f, 0.0f};\n", q);

  if (pair) coda_sb_printf(b, "        {\n          const int e = 0; const bool ok = ok0; (void)e;\n");
  else coda_sb_printf(b, "#pragma unroll\n        for (int e = 0; e < 2; ++e) {\n          const bool ok = e ? ok1 : ok0;\n");
  emit_point_instrs(&g);
  for (int o = 0; o < p->noutputs; o++) {
    const ir_output *op = &p->outputs[o];
    coda_sb_printf(b, "          ov%d[e] = r%d;\n", o, op->reg_even);
    if (op->reg_odd >= 0) coda_sb_printf(b, "          ow%d[e] = r%d;\n", o, op->reg_odd);
  }
  for (int q = 0; q < p->nreduces; q++) {
    const ir_reduce *r = &p->reduces[q];
    const int v = r->reg;
    switch (r->kind) {
    case CODA_REDUCE_ROWSUM: coda_sb_printf(b, "          if (ok) ra%d[h] += r%d;\n", q, v); break;
    case CODA_REDUCE_ROWMAX: coda_sb_printf(b, "          if (ok && r%d > ra%d[h]) ra%d[h] = r%d;\n", v, q, q, v); break;
    case CODA_REDUCE_ROWLSE:
      coda_sb_printf(b, "          lv%d[jj][h][e] = ok ? r%d : -CODA_INF;\n", q, v);
      if (pair) coda_sb_printf(b, "          lv%d[jj][h][1] = -CODA_INF;\n", q);
      break;
    case CODA_REDUCE_COLSUM: coda_sb_printf(b, "          if (ok) cs%d[e] += r%d;\n", q, v); break;
    case CODA_REDUCE_SEGSUM:
      if (is_row_fold(r)) coda_sb_printf(b, "          if (ok) ra%d[h] += r%d;\n", q, v);
      else coda_sb_printf(b, "          if (ok) sv%d[e] = r%d;\n", q, v);
      break;
    case CODA_REDUCE_ROWPICK: {
      const int kp = g.arg_red0 + q;
      coda_sb_printf(b, "          if (ok && c + e == pk%d[h]) ((float *)p.ptr[%d])[ro * p.ld[%d]] = r%d;\n", q, kp, kp, v);
    } break;
    }
  }
  coda_sb_printf(b, "        }\n");
  /* stores */
  for (int o = 0; o < p->noutputs; o++) {
    const ir_output *op = &p->outputs[o];
    const int k = g.arg_out0 + o, dt = dt_code(op->dtype);
    const char *acc = op->accumulate ? "true" : "false";
    if (sp.out_off[o] >= 0) {
      const char *fn = pair ? (op->width == CODA_WIDTH_HALF ? "so1" : "so2")
                            : (op->width == CODA_WIDTH_X2 ? "so4" : "so2");
      coda_sb_printf(b, "        coda_epi::%s<%d>(sb_ + %d + %s * %d + %d * h + coda_epi::swz<%d>(lrow, %d * %s), ", fn, dt,
                sp.out_off[o], sp.out_dbl ? "((jc / 4) & 1)" : "0", 64 * sp.out_rb[o],
                8 * sp.out_rb[o], sp.out_rb[o], dt_size(op->dtype), view_byte(op->width));
      if (pair && op->width == CODA_WIDTH_HALF) coda_sb_printf(b, "ov%d[0]);\n", o);
      else if (pair) coda_sb_printf(b, "ov%d[0], ow%d[0]);\n", o, o);
      else if (op->width == CODA_WIDTH_X2) coda_sb_printf(b, "make_float4(ov%d[0], ow%d[0], ov%d[1], ow%d[1]));\n", o, o, o, o);
      else coda_sb_printf(b, "ov%d[0], ov%d[1]);\n", o, o);
      continue;
    }
    if (pair) {
      if (op->width == CODA_WIDTH_HALF)
        coda_sb_printf(b, "        if (ok0) coda_epi::st1<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c / 2, ov%d[0]);\n",
                  dt, acc, k, k, o);
      else
        coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c, ok0, ok0, p.flags[%d] & 1, ov%d[0], ow%d[0]);\n",
                  dt, acc, k, k, k, o, o);
    } else if (op->width == CODA_WIDTH_X2) {
      coda_sb_printf(b, "        coda_epi::st4<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + 2 * c, ok0, ok1, p.flags[%d] & 2, p.flags[%d] & 1, make_float4(ov%d[0], ow%d[0], ov%d[1], ow%d[1]));\n",
                dt, acc, k, k, k, k, o, o, o, o);
    } else {
      coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c, ok0, ok1, p.flags[%d] & 1, ov%d[0], ov%d[1]);\n",
                dt, acc, k, k, k, o, o);
    }
  }
  /* narrow segments (g = 1, 2, 4 columns) */
  for (int q = 0; q < p->nreduces; q++) {
    const ir_reduce *r = &p->reduces[q];
    if (r->kind != CODA_REDUCE_SEGSUM || is_row_fold(r)) continue;
    const int gw = seg_width(r), k = g.arg_red0 + q;
    char sum[64];
    if (pair) snprintf(sum, sizeof sum, "sv%d[0]", q);
    else snprintf(sum, sizeof sum, "sv%d[0] + sv%d[1]", q, q);
    if (gw == 1) /* elem mode only: each point is its own segment */
      coda_sb_printf(b,
                "        if (ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c] = sv%d[0];\n"
                "        if (ok1) ((float *)p.ptr[%d])[ro * p.ld[%d] + c + 1] = sv%d[1];\n",
                k, k, q, k, k, q);
    else if (gw == 2)
      coda_sb_printf(b, "        if (ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c / 2] = %s;\n", k, k, sum);
    else /* 4: lanes qd and qd^1 share the segment */
      coda_sb_printf(b,
                "        { float v_ = %s; v_ += coda_epi::shx(v_, 1);\n"
                "          if ((qd & 1) == 0 && ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c / 4] = v_; }\n",
                sum, k, k);
  }
  /* segments of 8 or more columns end after some column groups */
  for (int q = 0; q < p->nreduces; q++) {
    const ir_reduce *r = &p->reduces[q];
    if (r->kind != CODA_REDUCE_SEGSUM || !is_row_fold(r)) continue;
    const int gw = seg_width(r);
    if (gw >= CODA_EPI_BN) continue; /* flushed at the end, like rowsum */
    coda_sb_printf(b, "        if (((j + 1) * 8) %% %d == 0) {\n", gw);
    char col[96];
    snprintf(col, sizeof col, "(tc0 + 8 * j) / %d", gw);
    /* write only segments that start inside N */
    coda_sb_printf(b, "          const int sc0_ = tc0 + 8 * (j + 1) - %d;\n", gw);
    emit_row_flush(&g, q, col, "sc0_ < N", "          ");
    emit_row_reset(&g, q, "          ");
    coda_sb_printf(b, "        }\n");
  }
  coda_sb_printf(b, "      }\n"); /* h */
  /* colsum: rows of the two halves were added per thread; sum the 8 row
   * groups of the warp, then stash lanes 0-3's sums for the cross-warp step */
  {
    int slot = 0;
    for (int q = 0; q < p->nreduces; q++) {
      if (p->reduces[q].kind != CODA_REDUCE_COLSUM) continue;
      coda_sb_printf(b,
                "#pragma unroll\n      for (int e = 0; e < 2; ++e) {\n"
                "        float v_ = cs%d[e];\n"
                "        v_ += coda_epi::shx(v_, 4);\n        v_ += coda_epi::shx(v_, 8);\n        v_ += coda_epi::shx(v_, 16);\n"
                "        if (lane < 4) sc.buf[%d * 4 * BN + warp * BN + 8 * j + 2 * qd + e] = v_;\n      }\n",
                q, slot);
      slot++;
    }
  }
  coda_sb_printf(b, "    }\n"); /* jj */
  for (int q = 0; q < p->nreduces; q++)
    if (p->reduces[q].kind == CODA_REDUCE_ROWLSE)
      coda_sb_printf(b, "#pragma unroll\n    for (int h = 0; h < 2; ++h) coda_epi::lse_chunk<%d>(ra%d[h], rs%d[h], lv%d, h);\n",
                     EPI_JC, q, q, q);
  if (staged) {
    /* the chunk's staged inputs are read and its outputs written */
    /* staged outputs: the generic-proxy writes are made visible to the
     * TMA (async proxy) before the barrier; then one thread stores each
     * chunk with TMA (the staging swizzle is the map's), or, for views TMA
     * cannot address, all threads store it as 16-byte vectors */
    if (sp.nout) coda_sb_printf(b, "      asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n");
    coda_sb_printf(b, "      coda_sm90::wg_sync(sc.bar);\n");
    for (int o = 0; o < p->noutputs; o++) {
      if (sp.out_off[o] < 0) continue;
      const ir_output *op = &p->outputs[o];
      const int k = g.arg_out0 + o;
      char v0[96];
      view_v0(op->width, "jc", v0, sizeof v0);
      char buf[64];
      snprintf(buf, sizeof buf, "sb_ + %d + %s * %d", sp.out_off[o], sp.out_dbl ? "((jc / 4) & 1)" : "0",
               64 * sp.out_rb[o]);
      if (o < CODA_EPI_MAX_TMA)
        coda_sb_printf(b,
                  "      if (p.flags[%d] & 4) {\n"
                  "        if (threadIdx.x %% 128 == 0) coda_sm90::%s(&p.tm[%d], %s, (int)(%s), wr0);\n"
                  "      } else\n  ",
                  k, op->accumulate ? "tma_reduce_add_2d" : "tma_store_2d", o, buf, v0);
      coda_sb_printf(b, "      coda_epi::stage_out<%d, %d%s>(%s, (void *)p.ptr[%d], p.ld[%d], al%d, wr0, %s, %s, M);\n",
                dt_size(op->dtype), sp.out_rb[o], op->accumulate ? ", true" : "", buf, k, k, k, v0,
                view_len(op->width));
    }
    if (sp.nout) coda_sb_printf(b, "      if (threadIdx.x %% 128 == 0) coda_sm90::bulk_commit();\n");
  }
  coda_sb_printf(b, "    }\n"); /* jc */

  /* row partials of this column tile */
  int any_row_end = 0;
  for (int q = 0; q < p->nreduces; q++)
    if (is_row_fold(&p->reduces[q]) && seg_width(&p->reduces[q]) >= CODA_EPI_BN) any_row_end = 1;
  if (any_row_end) {
    coda_sb_printf(b, "#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n      const int r = f.row0 + 8 * h;\n");
    for (int q = 0; q < p->nreduces; q++) {
      const ir_reduce *r = &p->reduces[q];
      if (!is_row_fold(r) || seg_width(r) < CODA_EPI_BN) continue;
      emit_row_flush(&g, q, "tn", "true", "      ");
    }
    coda_sb_printf(b, "    }\n");
  }
  /* column partials: 4 warps' sums of column t added in order */
  if (ncol) {
    coda_sb_printf(b, "    coda_sm90::wg_sync(sc.bar);\n");
    coda_sb_printf(b, "    {\n      const int t = threadIdx.x %% 128;\n");
    coda_sb_printf(b, "      const int s_ = wr0 / %d;\n", CODA_EPI_TILE_M);
    int slot = 0;
    for (int q = 0; q < p->nreduces; q++) {
      if (p->reduces[q].kind != CODA_REDUCE_COLSUM) continue;
      const int k = g.arg_red0 + q;
      coda_sb_printf(b,
                "#pragma unroll\n      for (int cc = t; cc < BN; cc += 128) {\n"
                "        const float *w_ = sc.buf + %d * 4 * BN + cc;\n"
                "        const float v_ = ((w_[0] + w_[BN]) + w_[2 * BN]) + w_[3 * BN];\n"
                "        if (wr0 < M && tc0 + cc < N) ((float *)p.ptr[%d])[(long long)s_ * p.ld[%d] + tc0 + cc] = v_;\n"
                "      }\n",
                slot, k, k);
      slot++;
    }
    coda_sb_printf(b, "    }\n    coda_sm90::wg_sync(sc.bar); /* the scratch is reused by the next fragment */\n");
  }
  coda_sb_printf(b, "  }\n};\n");
  (void)has_rowpick;
  return sb_take(ctx, b);
}

/* The mainloop header without its includes and without the host-side launch
 * helpers (which need the runtime API). */
static void append_header(coda_strbuf *b, const char *text, int cut_launch) {
  const char *end = text + strlen(text);
  const char *cut = NULL;
  if (cut_launch) {
    const char *g = strstr(text, "struct GemmLaunch");
    if (g) {
      /* back up to the start of the comment line above, if any */
      const char *ls = g;
      while (ls > text && ls[-1] != '\n') ls--;
      const char *prev = ls;
      if (prev > text) {
        const char *pl = prev - 1;
        while (pl > text && pl[-1] != '\n') pl--;
        if (strncmp(pl, "/*", 2) == 0) ls = pl;
      }
      cut = ls;
    }
  }
  const char *s = text;
  const char *stop = cut ? cut : end;
  while (s < stop) {
    const char *nl = memchr(s, '\n', (size_t)(stop - s));
    const char *le = nl ? nl + 1 : stop;
    const char *t = s;
    while (t < le && (*t == ' ' || *t == '\t')) t++;
    if (!(strncmp(t, "#include", 8) == 0 || strncmp(t, "#pragma once", 12) == 0)) coda_sb_put(b, s, (size_t)(le - s));
    s = le;
  }
  if (cut) coda_sb_printf(b, "\n}  // namespace coda_sm90\n");
}

char *coda_epi_full_source(coda_context ctx, coda_program p, const coda_epi_config *cfg,
                           char **kernel_expr) {
  if (kernel_expr) *kernel_expr = NULL;
  char *fn = coda_epi_functor_source(ctx, p);
  if (!fn) return NULL;
  coda_strbuf sb = {0};
  coda_sb_printf(&sb, "%s", kPrelude);
  /* the program's scratch (the functor's staging plan assumes it) */
  coda_sb_printf(&sb, "#define CODA_EPI_SCRATCH_BYTES %ld\n", coda_epi_scratch_bytes(p));
  /* in gemm_sm90.cuh's include order: the PTX wrappers, wgmma, the mainloop */
  append_header(&sb, coda_epi_hdr_ptx_sm90, 0);
  append_header(&sb, coda_epi_hdr_wgmma, 0);
  append_header(&sb, coda_epi_hdr_gemm_sm90, 1);
  coda_sb_printf(&sb, "%s", kHelpers);
  coda_sb_printf(&sb, "%s", fn);
  free(fn);
  coda_sb_printf(&sb, "static_assert(coda_sm90::smem_bytes<%d, %d>() == %zu, \"host and device disagree on shared memory\");\n",
            cfg->bn, cfg->stages, coda_epi_smem_bytes(cfg));
  char *src = sb_take(ctx, &sb);
  if (!src) return NULL;
  if (kernel_expr) {
    char buf[160];
    snprintf(buf, sizeof buf, "coda_sm90::gemm_kernel<%d, %d, %s, %s, %s, %s, CodaEpi>", cfg->bn,
             cfg->stages, cfg->ping ? "true" : "false", cfg->trans_a ? "true" : "false",
             cfg->trans_b ? "true" : "false", cfg->f16 ? "true" : "false");
    *kernel_expr = malloc(strlen(buf) + 1);
    if (*kernel_expr) memcpy(*kernel_expr, buf, strlen(buf) + 1);
    if (!*kernel_expr) {
      free(src);
      coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      return NULL;
    }
  }
  return src;
}

/* 1 if the plan stages every tile input the program reads with prefetch
 * and every output. */
static int plan_all_staged(const struct coda_program_s *p, const int *used, const stage_plan *sp) {
  for (int k = 0; k < p->ninputs; k++)
    if (used[k] && p->inputs[k].kind == CODA_ARG_TILE && (sp->in_off[k] < 0 || !sp->dbl)) return 0;
  for (int o = 0; o < p->noutputs; o++)
    if (sp->out_off[o] < 0) return 0;
  return 1;
}

/* Staged tile accesses of a plan (prefetched inputs count twice). */
static int plan_staged_count(const stage_plan *sp) {
  return sp->nin * (sp->dbl ? 2 : 1) + sp->nout * (sp->out_dbl ? 2 : 1);
}

long coda_epi_scratch_bytes(coda_program pg) {
  const struct coda_program_s *p = pg;
  const long base = scratch_bytes();
  if (!p) return base;
  int used[CODA_MAX_INPUTS];
  const int ncol = program_reads(p, used);
  stage_plan a, b;
  plan_staging(p, used, ncol, base, &a);
  if (plan_all_staged(p, used, &a)) return base;
  plan_staging(p, used, ncol, 2 * base, &b);
  return plan_staged_count(&b) > plan_staged_count(&a) ? 2 * base : base;
}

void coda_epi_config_for(coda_program p, coda_epi_config *cfg) {
  cfg->scratch = (int)coda_epi_scratch_bytes(p);
  fit_stages(cfg);
}

/* 1 if every tile input the program reads is staged with prefetch and
 * every output is staged (no direct tile access; f32 accumulating outputs
 * are staged, 16-bit ones are not). */
static int all_staged(coda_program pg) {
  const struct coda_program_s *p = pg;
  int used[CODA_MAX_INPUTS];
  const int ncol = program_reads(p, used);
  stage_plan sp;
  plan_staging(p, used, ncol, coda_epi_scratch_bytes(pg), &sp);
  return plan_all_staged(p, used, &sp);
}

static coda_status build_one(coda_context ctx, coda_program p, const coda_epi_config *cfg,
                             int no_cache, coda_epi_binary *out) {
  char *expr = NULL;
  char *src = coda_epi_full_source(ctx, p, cfg, &expr);
  if (!src) return CODA_ERR_NOT_SUPPORTED;
  coda_status s = coda_epi_compile(ctx, src, expr, no_cache, &out->cubin, &out->size, &out->lowered,
                                   NULL, &out->from_cache, &out->spill);
  free(src);
  free(expr);
  return s;
}

void coda_epi_binary_free(coda_epi_binary *b) {
  if (!b) return;
  free(b->cubin);
  free(b->lowered);
  memset(b, 0, sizeof *b);
}

coda_status coda_epi_build(coda_context ctx, coda_program p, coda_epi_config *cfg, int no_cache,
                           coda_epi_binary *out) {
  memset(out, 0, sizeof *out);
  /* pingpong when every tile access of the program goes through the
   * staging (3-11 % faster than cooperative on prim_store, llama_residual,
   * llama_residual_norm and llama_swiglu), cooperative when some tile
   * input or output is accessed directly, e.g. a 16-bit accumulated output
   * (llama_swiglu_bwd: 2.3x faster cooperative); $CODA_EPI_SCHEDULE =
   * "pingpong" or "cooperative" forces one (bench/results/epilogue-notes.md) */
  coda_epi_config_for(p, cfg);
  const coda_epi_schedule force = ctx ? ctx->knobs.epi_schedule : CODA_EPI_SCHEDULE_AUTO;
  if (cfg->sched != CODA_SCHED_AUTO) cfg->ping = cfg->sched == CODA_SCHED_PINGPONG;
  else if (force != CODA_EPI_SCHEDULE_AUTO) cfg->ping = force == CODA_EPI_SCHEDULE_PINGPONG;
  else cfg->ping = all_staged(p);
  coda_status s = build_one(ctx, p, cfg, no_cache, out);
  /* The rule's pingpong choice also gives way when the kernel is large:
   * with the two consumer warpgroups in different code at once (one in its
   * MMAs, one in its epilogue), a big epilogue thrashes the instruction
   * cache (the likely cause; not measured directly). What was measured on
   * one H200 (bench/results/gpu-2026-11-30g.md, GPT-2 d768/d1600 block
   * steps): the three staged programs with pingpong cubins of 161-211 KiB
   * (gpt2_residual_ln, gpt2_ln_linear_gelu, gpt2_gelu_bwd) took 4-84 %
   * longer pingpong than cooperative, while the staged ones of 63-140 KiB (llama_swiglu,
   * llama_residual_norm, llama_qkv_rope, llama_lm_head, gpt2_ln_linear, ...)
   * ran pingpong faster or within 3 % (one exception: llama_residual at
   * the 8B-like shape, 7 % faster cooperative). Where it matters per shape,
   * coda_plan_tune_fusion times both. A forced schedule (cfg->sched) is
   * kept. */
  const int too_big = cfg->sched == CODA_SCHED_AUTO && force == CODA_EPI_SCHEDULE_AUTO &&
                      out->size > CODA_EPI_PINGPONG_MAX_CUBIN;
  if (s != CODA_OK || !cfg->ping || (out->spill == 0 && !too_big)) return s;
  /* the pingpong kernel spills (or its statistics are unknown), or is too
   * large for the rule: cooperative */
  coda_epi_binary coop;
  coda_epi_config c2 = *cfg;
  c2.ping = 0;
  memset(&coop, 0, sizeof coop);
  s = build_one(ctx, p, &c2, no_cache, &coop);
  if (s != CODA_OK) return s;
  coda_epi_binary_free(out);
  *out = coop;
  *cfg = c2;
  return CODA_OK;
}
