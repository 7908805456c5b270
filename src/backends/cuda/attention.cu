/* Causal grouped-query attention, bf16 in and out, fp32 accumulation, with
 * an optional score scale and sliding window: the host side. Checks the
 * views, fills the kernel parameters, runs the backward's prep pass (D =
 * rowsum(dO*O), L = lse*log2(e)) into the context's attention workspace,
 * and dispatches to a kernel variant by name: the three kernel families live in
 * attention_mma.cu (mma.sync, head_dim 32/64/128), attention_wg.cu (wgmma
 * fed by cp.async) and attention_ws.cu (warp-specialized, TMA-fed; the
 * defaults at head_dim 64 and 128 on Hopper), over what attention_common.cuh
 * and attention_wg.cuh share. The mma.sync family and this file's prep
 * kernel are built for sm_80 too and are all the sm80 path runs (its
 * defaults are mma.sync variants; a wg_ or ws_ variant asked for by name
 * refuses it). Every launch goes to the context's stream.
 * docs/backends.md, "Attention on the GPU", has the design. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/stream.h"
#include "backends/cuda/workspace.h"

namespace coda_attn {

/* ------------------------------------------------------------ backward */

/* D[b][h][t] = sum_d dO*O and L[b][h][t] = lse*log2(e): one block per
 * token, HD/8 lanes per head, each with one 16-byte chunk of O and dO;
 * the lanes of a head sum in a fixed shuffle order. */
template <int HD>
__global__ void __launch_bounds__(256) bwd_prep_kernel(Params p) {
  constexpr int L = HD / 8; /* lanes per head: 4, 8 or 16, within one warp */
  const int bt = blockIdx.x; /* token b*T + t */
  const int b = bt / p.T, t = bt - b * p.T;
  const bf16 *o = p.out + (long long)bt * p.ld_out;
  const bf16 *d = p.dout + (long long)bt * p.ld_dout;
  for (int i0 = 0; i0 < p.Hq * L; i0 += 256) { /* uniform trip count: full-warp shuffles */
    const int i = i0 + threadIdx.x, h = i / L, c = i % L;
    const bool valid = i < p.Hq * L;
    float acc = 0.f;
    if (valid) {
      const uint4 a = *reinterpret_cast<const uint4 *>(o + h * HD + c * 8);
      const uint4 e = *reinterpret_cast<const uint4 *>(d + h * HD + c * 8);
      const uint32_t av[4] = {a.x, a.y, a.z, a.w}, ev[4] = {e.x, e.y, e.z, e.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&av[k]));
        const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&ev[k]));
        acc = fmaf(x.x, y.x, acc);
        acc = fmaf(x.y, y.y, acc);
      }
    }
#pragma unroll
    for (int sh = L / 2; sh > 0; sh >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, sh);
    if (valid && c == 0) {
      const long long idx = ((long long)b * p.Hq + h) * p.T + t;
      p.ws_d[idx] = acc;
      p.ws_l[idx] = p.lse[(long long)bt * p.ld_lse + h] * kLog2e;
    }
  }
}

/* The backward's three passes: prep (D, L), dQ, dK/dV; each pass launcher
 * sets its shared-memory limit and grid. */
template <int HD>
coda_status launch_prep(coda_context ctx, Params p, cudaStream_t stream, cudaError_t *e) {
  (void)e;
  bwd_prep_kernel<HD><<<(unsigned)(p.B * p.T), 256, 0, stream>>>(p);
  return coda_cuda_check_launch(ctx, "attention backward (prep pass)");
}

static coda_status launch_prep_hd(coda_context ctx, int hd, const Params &p, cudaStream_t stream,
                                  cudaError_t *e) {
  switch (hd) {
    case 32: return launch_prep<32>(ctx, p, stream, e);
    case 64: return launch_prep<64>(ctx, p, stream, e);
    default: return launch_prep<128>(ctx, p, stream, e);
  }
}

/* The variants of a pass at head_dim hd: the mma.sync family's, then the
 * wgmma family's, then the warp-specialized family's (the order of the
 * benchmark's tables; the first of each were measured in
 * bench/results/attention-2026-11-30.md). Index i of the concatenation,
 * or NULL. */
static const Variant *variant_at(int backward, int hd, int i) {
  const VariantList lists[3] = {mma_variants(backward, hd), wg_variants(backward, hd),
                                ws_variants(backward, hd)};
  for (int k = 0; k < 3; ++k) {
    if (i >= 0 && i < lists[k].n) return &lists[k].v[i];
    i -= lists[k].n;
  }
  return NULL;
}
static int num_variants(int backward, int hd) {
  return mma_variants(backward, hd).n + wg_variants(backward, hd).n + ws_variants(backward, hd).n;
}
static const Variant *variant_named(int backward, int hd, const char *name) {
  for (int i = 0; i < num_variants(backward, hd); ++i) {
    const Variant *v = variant_at(backward, hd, i);
    if (!strcmp(v->name, name)) return v;
  }
  return NULL;
}

}  // namespace coda_attn

using namespace coda_attn;

static coda_status attn_cuda_fail(coda_context ctx, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA attention: %s failed: %s", what,
                   cudaGetErrorString(e));
}

/* Checks what the kernels rely on beyond the caller's shape checks. */
static coda_status check_bf16(coda_context ctx, const char *what, const coda_tensor *t,
                              int64_t rows, int64_t cols) {
  if (!t || !t->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: %s is NULL", what);
  if (t->dtype != CODA_BF16)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: %s is %s; the GPU kernels take bf16 only", what,
                     coda_dtype_name(t->dtype));
  if (t->rows != rows || t->cols != cols || t->ld < t->cols)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                     "CUDA attention: %s is %lld x %lld (ld %lld), expected %lld x %lld", what,
                     (long long)t->rows, (long long)t->cols, (long long)t->ld, (long long)rows,
                     (long long)cols);
  /* 16-byte cp.async of 8 bf16 per row chunk. */
  if (((uintptr_t)t->data & 15) != 0 || (t->ld & 7) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT,
                     "CUDA attention: %s needs a 16-byte aligned base and a leading dimension "
                     "that is a multiple of 8 (ld %lld)",
                     what, (long long)t->ld);
  return CODA_OK;
}

static coda_status check_lse(coda_context ctx, const coda_tensor *t, int64_t rows, int64_t cols) {
  if (!t || !t->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: lse is NULL");
  if (t->dtype != CODA_F32)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "CUDA attention: lse is %s; it must be f32",
                     coda_dtype_name(t->dtype));
  if (t->rows != rows || t->cols != cols || t->ld < t->cols)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                     "CUDA attention: lse is %lld x %lld (ld %lld), expected %lld x %lld",
                     (long long)t->rows, (long long)t->cols, (long long)t->ld, (long long)rows,
                     (long long)cols);
  if (((uintptr_t)t->data & 3) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT, "CUDA attention: lse is not 4-byte aligned");
  return CODA_OK;
}

/* The fused RoPE backward's views: pos i32 (BT x 1), freq f32 (1 x qkv
 * columns, 8-byte aligned: the kernels read (hi, lo) as one float2), zp
 * f32 (BT x heads, 4-byte aligned). */
static coda_status set_rope(coda_context ctx, const coda_attn_rope *r, int64_t BT, int64_t cols,
                            int heads, Params *p) {
  if (!r->pos || !r->freq || !r->zp || !r->pos->data || !r->freq->data || !r->zp->data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA attention: a RoPE view is NULL");
  if (r->pos->dtype != CODA_I32 || r->pos->rows != BT || r->pos->cols != 1 ||
      ((uintptr_t)r->pos->data & 3))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: pos must be i32 %lld x 1, 4-byte aligned", (long long)BT);
  if (r->freq->dtype != CODA_F32 || r->freq->rows != 1 || r->freq->cols != cols ||
      ((uintptr_t)r->freq->data & 7))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: freq must be f32 1 x %lld, 8-byte aligned", (long long)cols);
  if (r->zp->dtype != CODA_F32 || r->zp->rows != BT || r->zp->cols != heads ||
      r->zp->ld < heads || ((uintptr_t)r->zp->data & 3))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: zp must be f32 %lld x %d, 4-byte aligned", (long long)BT,
                     heads);
  p->rope_pos = static_cast<const int *>(r->pos->data);
  p->ld_pos = r->pos->ld;
  p->rope_freq = static_cast<const float *>(r->freq->data);
  p->zp = static_cast<float *>(r->zp->data);
  p->ld_zp = r->zp->ld;
  return CODA_OK;
}

/* attn_impl V1 (CODA_ATTN_IMPL=v1) selects the first measured defaults
 * and block order (bench/results/attention-2026-11-30.md), to compare
 * against or fall back to. */
static bool legacy_impl(coda_context ctx) { return ctx->knobs.attn_impl == CODA_ATTN_IMPL_V1; }

static coda_status setup(coda_context ctx, const coda_tensor *qkv, int B, int T, int Hq, int Hkv,
                         int hd, const coda_attn_mask *mask, Params *p) {
  if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "CUDA attention: batch %d, seq %d, heads %d/%d are not valid", B, T, Hq, Hkv);
  if (hd != 32 && hd != 64 && hd != 128)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA attention: head_dim %d (the GPU kernels support 32, 64 and 128)", hd);
  if (B > 65535 || Hq > 65535 || (long long)B * T >= (1LL << 31) ||
      (long long)B * T * Hq >= (1LL << 33))
    return coda_fail(ctx, CODA_ERR_OVERFLOW,
                     "CUDA attention: batch %d x seq %d x heads %d exceeds the launch grid", B, T,
                     Hq);
  if (mask && (!(mask->scale >= 0.0) || !isfinite(mask->scale) || mask->window < 0))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "CUDA attention: score scale %g and window %d must be >= 0", mask->scale,
                     mask->window);
  const int64_t cols = (int64_t)(Hq + 2 * Hkv) * hd;
  coda_status s = check_bf16(ctx, "qkv", qkv, (int64_t)B * T, cols);
  if (s) return s;
  const cudaError_t e = cudaSetDevice(ctx ? ctx->opts.device : 0);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "cudaSetDevice");
  *p = Params{};
  p->qkv = static_cast<const bf16 *>(qkv->data);
  p->ld_qkv = qkv->ld;
  p->B = B;
  p->T = T;
  p->Hq = Hq;
  p->Hkv = Hkv;
  p->scale = mask && mask->scale > 0.0 ? (float)mask->scale : 1.f / sqrtf((float)hd);
  p->scale2 = p->scale * kLog2e;
  /* a window of T or more keys is the causal mask: win = T never reaches
   * the lower edge, so that path runs no extra masking (sees_key) */
  p->win = mask && mask->window > 0 && mask->window < T ? mask->window : T;
  p->flat = !legacy_impl(ctx);
  return CODA_OK;
}

/* Default kernel variants, the fastest in bench/results/attention-*.md and
 * gpu-*.md: the warp-specialized forward (with pingpong) and backward for
 * head_dim 64 and 128 (gpu-2026-11-30j); with attn_impl v1 the first
 * measured defaults. */
/* The sm80 path runs the mma.sync family alone (the wgmma and
 * warp-specialized ones are Hopper-only): its defaults there are the
 * mma.sync defaults of attn_impl v1 at head_dim 64 and 128, and the
 * default at 32 (mma.sync already). */
static const char *default_fwd_variant(coda_context ctx, int hd) {
  if (legacy_impl(ctx) || (coda_cuda_sm80(ctx) && hd != 32))
    return hd == 128 ? "mma_m2_k32" : "mma_m2_k64";
  return hd == 32 ? "mma_m2_k64" : hd == 64 ? "ws_s3_ping" : "ws_s2_ping";
}
static const char *default_bwd_variant(coda_context ctx, int hd) {
  if (legacy_impl(ctx)) return hd == 128 ? "mma_q1_k1" : hd == 64 ? "mma_q2_k2" : "mma_q2_k2_kvreg";
  if (coda_cuda_sm80(ctx) && hd != 32) return hd == 128 ? "mma_q1_k1" : "mma_q2_k2";
  return hd == 32 ? "mma_q2_k1_kvreg" : "ws_s4";
}

/* A variant of the wgmma or warp-specialized family (not the mma.sync
 * one) refuses the sm80 path, naming the variant. */
static coda_status check_family(coda_context ctx, int backward, int hd, const Variant *v) {
  const VariantList mma = mma_variants(backward, hd);
  if (v >= mma.v && v < mma.v + mma.n) return CODA_OK;
  char what[96];
  snprintf(what, sizeof what, "CUDA attention %s variant \"%s\"", backward ? "backward" : "forward",
           v->name);
  return coda_cuda_hopper_only(ctx, what,
                               strncmp(v->name, "ws_", 3) ? "wgmma"
                                                          : "wgmma, TMA, mbarriers and setmaxnreg");
}

extern "C" int coda_cuda_attention_num_variants(int backward, int hd) {
  return num_variants(backward ? 1 : 0, hd);
}

extern "C" const char *coda_cuda_attention_variant_name(int backward, int hd, int index) {
  const Variant *v = variant_at(backward ? 1 : 0, hd, index);
  return v ? v->name : NULL;
}

extern "C" coda_status coda_cuda_attention_forward(coda_context ctx, const coda_tensor *qkv,
                                                   int B, int T, int Hq, int Hkv, int hd,
                                                   const coda_tensor *out,
                                                   const coda_tensor *lse,
                                                   const coda_attn_mask *mask) {
  return coda_cuda_attention_forward_variant(ctx, qkv, B, T, Hq, Hkv, hd, out, lse, mask, NULL);
}

extern "C" coda_status coda_cuda_attention_backward(coda_context ctx, const coda_tensor *qkv,
                                                    const coda_tensor *out,
                                                    const coda_tensor *lse,
                                                    const coda_tensor *dout, int B, int T, int Hq,
                                                    int Hkv, int hd, const coda_tensor *dqkv,
                                                    const coda_attn_rope *rope,
                                                    const coda_attn_mask *mask) {
  return coda_cuda_attention_backward_variant(ctx, qkv, out, lse, dout, B, T, Hq, Hkv, hd, dqkv,
                                              rope, mask, NULL);
}

extern "C" coda_status coda_cuda_attention_forward_variant(coda_context ctx,
                                                           const coda_tensor *qkv, int B, int T,
                                                           int Hq, int Hkv, int hd,
                                                           const coda_tensor *out,
                                                           const coda_tensor *lse,
                                                           const coda_attn_mask *mask,
                                                           const char *variant) {
  Params p;
  coda_status s = setup(ctx, qkv, B, T, Hq, Hkv, hd, mask, &p);
  if (s) return s;
  const int64_t BT = (int64_t)B * T;
  if ((s = check_bf16(ctx, "out", out, BT, (int64_t)Hq * hd))) return s;
  if ((s = check_lse(ctx, lse, BT, Hq))) return s;
  p.out = static_cast<bf16 *>(out->data);
  p.ld_out = out->ld;
  p.lse = static_cast<float *>(lse->data);
  p.ld_lse = lse->ld;
  if (!variant) variant = default_fwd_variant(ctx, hd);
  const Variant *v = variant_named(0, hd, variant);
  if (!v)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "CUDA attention: no forward variant \"%s\" at head_dim %d", variant, hd);
  if ((s = check_family(ctx, 0, hd, v))) return s;
  cudaError_t e = cudaSuccess;
  s = v->fn(ctx, p, coda_cuda_stream(ctx), &e);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "forward kernel setup");
  return s;
}

extern "C" coda_status coda_cuda_attention_backward_variant(
    coda_context ctx, const coda_tensor *qkv, const coda_tensor *out, const coda_tensor *lse,
    const coda_tensor *dout, int B, int T, int Hq, int Hkv, int hd, const coda_tensor *dqkv,
    const coda_attn_rope *rope, const coda_attn_mask *mask, const char *variant) {
  Params p;
  coda_status s = setup(ctx, qkv, B, T, Hq, Hkv, hd, mask, &p);
  if (s) return s;
  const int64_t BT = (int64_t)B * T;
  if ((s = check_bf16(ctx, "out", out, BT, (int64_t)Hq * hd))) return s;
  if ((s = check_lse(ctx, lse, BT, Hq))) return s;
  if ((s = check_bf16(ctx, "dout", dout, BT, (int64_t)Hq * hd))) return s;
  if ((s = check_bf16(ctx, "dqkv", dqkv, BT, (int64_t)(Hq + 2 * Hkv) * hd))) return s;
  p.out = static_cast<bf16 *>(out->data);
  p.ld_out = out->ld;
  p.lse = static_cast<float *>(lse->data);
  p.ld_lse = lse->ld;
  p.dout = static_cast<const bf16 *>(dout->data);
  p.ld_dout = dout->ld;
  p.dqkv = static_cast<bf16 *>(dqkv->data);
  p.ld_dqkv = dqkv->ld;
  if (rope && (s = set_rope(ctx, rope, BT, (int64_t)(Hq + 2 * Hkv) * hd, Hq + 2 * Hkv, &p)))
    return s;
  if (!variant) variant = default_bwd_variant(ctx, hd);
  const Variant *v = variant_named(1, hd, variant);
  if (!v)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "CUDA attention: no backward variant \"%s\" at head_dim %d", variant, hd);
  if ((s = check_family(ctx, 1, hd, v))) return s;
  /* D and L (2 x B*Hq*T floats) in the context's attention workspace:
   * reused across calls, written by the prep pass and read by the two
   * gradient passes, all on the context's stream */
  void *ws = NULL;
  const size_t n = (size_t)BT * Hq;
  if ((s = coda_cuda_workspace(ctx, CODA_CUDA_WS_ATTENTION, 2 * n * sizeof(float), &ws)))
    return s;
  p.ws_d = static_cast<float *>(ws);
  p.ws_l = p.ws_d + n;
  const cudaStream_t stream = coda_cuda_stream(ctx);
  cudaError_t e = cudaSuccess;
  s = launch_prep_hd(ctx, hd, p, stream, &e);
  if (s == CODA_OK) s = v->fn(ctx, p, stream, &e);
  if (e != cudaSuccess) return attn_cuda_fail(ctx, e, "backward kernel setup");
  return s;
}
