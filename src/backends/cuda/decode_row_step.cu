/* A one-row decode step (batch 1) as one persistent kernel
 * (coda_decode_row_step_job): every layer's RMSNorm + qkv + RoPE + cache
 * append, attention and its merge, out projection + residual, RMSNorm +
 * gate/up + SwiGLU, down projection + residual, then the final norm and
 * the head, with a grid barrier between the phases instead of a kernel
 * boundary.
 *
 * Why one kernel: at batch 1 the step reads its weights once and does
 * almost nothing else, so what it costs beyond the bytes is the time the
 * memory system idles: a kernel's ramp and tail and the gap to the next
 * one, five or six times a layer (decode_kernels.cu's path). Here the
 * weights never wait for the activations: one warp of each block streams
 * its share of every phase's weight rows into a ring of shared-memory
 * stages by bulk copies, running ahead across the phases (weights are
 * constant), while the other warps wait at the grid barrier for the row
 * they multiply. The barrier's latency is hidden as long as the ring is not
 * full.
 *
 * Work split: a phase's weight rows (= output columns) are cut into tiles
 * of R rows (R·K·2 ≤ kStageBytes; R even where the store takes column
 * pairs), and the tiles of all phases of the step, in order, are dealt to
 * the blocks round robin, so every block streams the same bytes to within
 * a tile over the step. A tile's K is split over the eight consumer warps
 * (lane chunks of 8 values, 256 chunks a round), each holding its slice of
 * the input row in registers for the whole phase; the warps' partial sums
 * are added in warp order (deterministic).
 *
 * The math is that of the separate kernels: the norm on load as in
 * gemv_row_kernel (the sum of squares in double, 1/rms applied to the fp32
 * dot products), the RoPE in double, the attention's online softmax and
 * its merge as decode_attention.cu's, bf16 q, cache, attention output and
 * SwiGLU output, the residual row in fp32. Values one phase writes and
 * another reads go through L2 (ld.global.cg), never L1. Needs every block
 * resident: launched cooperatively, one block an SM.
 *
 * Opt-in (CODA_DECODE_ROW_STEP=1): its GEMV phases stream slower than the
 * separate kernels, which stay the default (docs/decisions.md). Hopper
 * only (bulk copies, mbarrier transaction counts): not on the sm80 path,
 * where the separate kernels run. */
#include "backends/cuda/decode_attention.cuh"
#include "backends/cuda/ptx_sm90.cuh"

namespace {

using namespace coda_sm90;

constexpr int kStepWarps = 8; /* consumers; one more warp loads */
constexpr int kStepThreads = 32 * (kStepWarps + 1);
constexpr int kStages = 5;
constexpr int kStageBytes = 32768;
constexpr int kMaxRows = 8;              /* weight rows per tile */
constexpr int kChunkRound = 32 * kStepWarps; /* 8-value chunks a round */
constexpr int kMaxChunks = 8;            /* rounds: K <= 8·256·8 = 16384 */
constexpr int kMaxK = kMaxChunks * kChunkRound * 8;
constexpr int kAttnSpan = 16;            /* cache positions a split takes at least */
constexpr int kAttnScratch = 512;        /* query heads of a KV head × hd, at most */

/* The kernel's parameters: the job as given, its rows by value (the job
 * holds a host pointer to them), and the two widths derived from them. */
struct step_params {
  coda_decode_row_step_job j;
  coda_decode_rows r;
  long long nq, qd; /* (Hq + 2 Hk)·hd, Hq·hd */
};

__device__ __forceinline__ bf16 *as_bf16(uint16_t *p) { return reinterpret_cast<bf16 *>(p); }
__device__ __forceinline__ const bf16 *as_bf16(const uint16_t *p) {
  return reinterpret_cast<const bf16 *>(p);
}

/* The step's linear phases: four a layer, then the head. */
enum { PH_QKV, PH_OUT, PH_GATE_UP, PH_DOWN, PH_HEAD };

struct phase {
  const bf16 *w;
  long long N, K;
  int kind, R;
};

__device__ __forceinline__ int tile_rows(long long K, bool pairs) {
  int R = (int)(kStageBytes / 2 / K);
  if (R > kMaxRows) R = kMaxRows;
  if (pairs) R &= ~1;
  return R;
}

__device__ __forceinline__ phase phase_of(const step_params &p, int i) {
  phase f;
  if (i == 4 * p.j.layers) {
    f = {as_bf16(p.j.wout), p.j.V, p.j.D, PH_HEAD, 0};
  } else {
    const coda_decode_layer_weights &l = p.j.layer[i / 4];
    switch (i % 4) {
    case PH_QKV: f = {(const bf16 *)l.wqkv, p.nq, p.j.D, PH_QKV, 0}; break;
    case PH_OUT: f = {(const bf16 *)l.wo, p.j.D, p.qd, PH_OUT, 0}; break;
    case PH_GATE_UP: f = {(const bf16 *)l.w13, 2 * p.j.F, p.j.D, PH_GATE_UP, 0}; break;
    default: f = {(const bf16 *)l.w2, p.j.D, p.j.F, PH_DOWN, 0}; break;
    }
  }
  f.R = tile_rows(f.K, f.kind == PH_QKV || f.kind == PH_GATE_UP);
  return f;
}

/* The first tile of a phase block b takes when the phase's tiles start at
 * global tile index g0 (the deal is round robin over the whole step). */
__device__ __forceinline__ long long first_tile(long long g0, int b, int G) {
  return ((long long)b - g0 % G + G) % G;
}

/* ------------------------------------------------------- grid barrier */

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* All consumer threads of all blocks: every write before it is visible to
 * every read (through L2) after it. *sync counts the blocks' arrivals and
 * only grows within a launch (zeroed before each); barrier k of the step
 * is passed when it reaches (k + 1) · blocks. */
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void grid_sync(unsigned *sync, unsigned *passed,
                                          uint64_t *trace) {
  named_sync(1);
  if (threadIdx.x == 0) {
    const unsigned target = ++*passed * gridDim.x;
    __threadfence();
    atomicAdd(sync, 1u);
    while (ld_acquire(sync) < target) {
    }
    __threadfence();
    if (trace && blockIdx.x == 0) trace[*passed] = global_ns();
  }
  named_sync(1);
}

/* ------------------------------------------------------ L2-only loads */

__device__ __forceinline__ void ldcg_bf16x8(const bf16 *p, float *f) {
  const uint4 v = __ldcg(reinterpret_cast<const uint4 *>(p));
  const bf16 *b = reinterpret_cast<const bf16 *>(&v);
#pragma unroll
  for (int i = 0; i < 8; i++) f[i] = __bfloat162float(b[i]);
}

/* ------------------------------------------------------- shared memory */

struct step_smem {
  uint64_t full[kStages], empty[kStages];
  /* the residual row as the last norm phase read it: the next phase adds
   * its results to it without reading x again (no L2 round trip a tile) */
  float xs[kMaxK / 2];
  double rc[128], rs[128]; /* cos, sin of pos · inv_freq[j], j < hd/2 */
  float mm[32], ml[32];    /* the merge: the splits' maxes and sums */
  float red[2][kStepWarps][kMaxRows]; /* a tile's partial sums, two tiles alternating */
  double part[kStepWarps];            /* the norm's sum of squares */
  float am[kStepWarps][8], al[kStepWarps][8];
  float acc[kStepWarps][kAttnScratch]; /* attention: a warp's values per query head */
};
constexpr size_t kRingOffset = (sizeof(step_smem) + 127) / 128 * 128;
constexpr size_t kStepSmem = kRingOffset + (size_t)kStages * kStageBytes;

/* ----------------------------------------------------------- attention */


/* Splits of the cache: enough units (KV head, split) for the grid, each
 * at least kAttnSpan positions; every block computes the same. */
__device__ __forceinline__ int attn_splits(const step_params &p, int n) {
  int s = (int)gridDim.x / p.r.Hk;
  const int by_len = (n + kAttnSpan - 1) / kAttnSpan;
  if (s > by_len) s = by_len;
  if (s > p.j.max_splits) s = p.j.max_splits;
  if (s > 32) s = 32; /* the merge's registers */
  return s < 1 ? 1 : s;
}

/* Unit (KV head kh, split s of S): the partials of its grp query heads
 * over positions [lo, hi), as attn_partial_kernel with eight warps. */
template <int HDL>
__device__ void attn_unit(const step_params &p, step_smem &sm, const bf16 *kc, const bf16 *vc,
                          int seq, int n, int kh, int s, int S) {
  constexpr int hd = HDL * 32;
  const int grp = p.r.Hq / p.r.Hk, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int cs = (n + S - 1) / S, lo = s * cs, hi = lo + cs < n ? lo + cs : n;
  const float scale = rsqrtf((float)hd);
  float qv[8][HDL], acc[8][HDL], mx[8], l[8];
#pragma unroll
  for (int g = 0; g < 8; g++) {
    mx[g] = -INFINITY;
    l[g] = 0.0f;
    float t[HDL];
    if (g < grp)
      load_bf16<HDL, true>(as_bf16(p.j.q) + (long long)(kh * grp + g) * hd + lane * HDL, t);
#pragma unroll
    for (int i = 0; i < HDL; i++) {
      acc[g][i] = 0.0f;
      qv[g][i] = g < grp ? scale * t[i] : 0.0f;
    }
  }
  const long long stride = (long long)p.r.Hk * hd;
  const bf16 *kb = kc + (long long)seq * p.r.max_len * stride + (long long)kh * hd + lane * HDL;
  const bf16 *vb = vc + (long long)seq * p.r.max_len * stride + (long long)kh * hd + lane * HDL;
  attn_scan<HDL, kStepWarps, true>(qv, acc, mx, l, kb, vb, stride, lo, hi, grp, warp);
#pragma unroll
  for (int g = 0; g < 8; g++) {
    if (g >= grp) break;
    if (lane == 0) {
      sm.am[warp][g] = mx[g];
      sm.al[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < HDL; i++) sm.acc[warp][g * hd + lane * HDL + i] = acc[g][i];
  }
  named_sync(1);
  for (int i = threadIdx.x; i < grp * hd; i += 32 * kStepWarps) {
    const int g = i / hd, e = i % hd;
    float M = -INFINITY;
    for (int w = 0; w < kStepWarps; w++) M = fmaxf(M, sm.am[w][g]);
    float L = 0.0f, A = 0.0f;
    if (M != -INFINITY)
      for (int w = 0; w < kStepWarps; w++) {
        const float c = __expf(sm.am[w][g] - M);
        L += sm.al[w][g] * c;
        A += sm.acc[w][i] * c;
      }
    float *out = p.j.work + ((long long)(kh * grp + g) * S + s) * (hd + 2);
    if (e == 0) {
      out[0] = M;
      out[1] = L;
    }
    out[2 + e] = A;
  }
  named_sync(1); /* the scratch is free for the next unit */
}

/* Query head h: its S partials merged into o (bf16), as attn_combine_kernel
 * (the sums in split order), every load of a round issued before any of
 * its values is used. */
__device__ void attn_merge(const step_params &p, step_smem &sm, int h, int S) {
  const int hd = p.r.hd;
  const long long stride = hd + 2;
  const float *base = p.j.work + (long long)h * S * stride;
  if (threadIdx.x < S) {
    sm.mm[threadIdx.x] = __ldcg(base + threadIdx.x * stride);
    sm.ml[threadIdx.x] = __ldcg(base + threadIdx.x * stride + 1);
  }
  named_sync(1);
  float M = -INFINITY;
  for (int s = 0; s < S; s++) M = fmaxf(M, sm.mm[s]);
  for (int e = threadIdx.x; e < hd; e += 32 * kStepWarps) {
    float av[32];
#pragma unroll
    for (int s = 0; s < 32; s++) av[s] = s < S ? __ldcg(base + s * stride + 2 + e) : 0.0f;
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int s = 0; s < 32; s++) {
      if (s >= S) break;
      if (sm.mm[s] == -INFINITY) continue; /* an empty split */
      const float c = __expf(sm.mm[s] - M);
      L += sm.ml[s] * c;
      A += av[s] * c;
    }
    as_bf16(p.j.o)[(long long)h * hd + e] = __float2bfloat16_rn(L > 0.0f ? A / L : 0.0f);
  }
  named_sync(1); /* sm.mm is free for the next head */
}

/* -------------------------------------------------------- linear phases */

/* The input row of phase f into this lane's registers: chunk c of the lane
 * is values [8·ci, 8·ci + 8), ci = c·256 + warp·32 + lane, the chunks of
 * all lanes the whole row, all loads issued together. Where the phase
 * normalizes, the row's sum of squares comes from the same loads (in
 * double, lanes then warps in order), x is kept in sm.xs for the residual
 * phase after it, and the result is the scale 1/rms of the dot products;
 * else 1. */
__device__ float load_row(const step_params &p, step_smem &sm, const phase &f, int li,
                          float (*a)[8]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long nchunk = f.K / 8;
  const bf16 *in = f.kind == PH_OUT ? as_bf16(p.j.o) : as_bf16(p.j.y);
  const float *g = NULL;
  if (f.kind == PH_QKV) g = p.j.layer[li].norm_attn;
  if (f.kind == PH_GATE_UP) g = p.j.layer[li].norm_ffn;
  if (f.kind == PH_HEAD) g = p.j.norm;
#pragma unroll
  for (int c = 0; c < kMaxChunks; c++) {
    const long long ci = (long long)c * kChunkRound + warp * 32 + lane;
    if (ci >= nchunk) {
#pragma unroll
      for (int i = 0; i < 8; i++) a[c][i] = 0.0f;
    } else if (g) {
      const float4 x0 = __ldcg(reinterpret_cast<const float4 *>(p.j.x + ci * 8));
      const float4 x1 = __ldcg(reinterpret_cast<const float4 *>(p.j.x + ci * 8 + 4));
      a[c][0] = x0.x; a[c][1] = x0.y; a[c][2] = x0.z; a[c][3] = x0.w;
      a[c][4] = x1.x; a[c][5] = x1.y; a[c][6] = x1.z; a[c][7] = x1.w;
    } else {
      ldcg_bf16x8(in + ci * 8, a[c]);
    }
  }
  if (!g) return 1.0f;
  double ss = 0.0;
#pragma unroll
  for (int c = 0; c < kMaxChunks; c++) {
    const long long ci = (long long)c * kChunkRound + warp * 32 + lane;
    if (ci >= nchunk) break;
    const float4 g0 = *reinterpret_cast<const float4 *>(g + ci * 8);
    const float4 g1 = *reinterpret_cast<const float4 *>(g + ci * 8 + 4);
    const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
      ss += (double)a[c][i] * a[c][i];
      if (f.kind != PH_HEAD) sm.xs[ci * 8 + i] = a[c][i];
      a[c][i] *= gv[i];
    }
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) sm.part[warp] = ss;
  named_sync(1);
  double tot = 0.0;
  for (int i = 0; i < kStepWarps; i++) tot += sm.part[i];
  return (float)(1.0 / sqrt(tot / (double)f.K + p.j.eps));
}

/* The stores of output column c0 + t (lane t of warp 0) of phase f, v its
 * scaled result and vn the next column's; where columns pair, even lanes
 * store the pair (c0 + t, c0 + t + 1). */
__device__ void store_col(const step_params &p, step_smem &sm, const phase &f, int li,
                          long long c0, int t, int rows, float v, float vn, int seq, int pos) {
  if (t >= rows) return;
  if (f.kind == PH_OUT || f.kind == PH_DOWN) {
    const float xn = sm.xs[c0 + t] + v;
    p.j.x[c0 + t] = xn;
    sm.xs[c0 + t] = xn; /* the down projection adds to the out projection's row */
    return;
  }
  if (f.kind == PH_HEAD) {
    p.j.logits[c0 + t] = v;
    return;
  }
  if (t & 1) return;
  if (f.kind == PH_GATE_UP) {
    as_bf16(p.j.y)[(c0 + t) / 2] = __float2bfloat16_rn(v / (1.0f + __expf(-v)) * vn);
    return;
  }
  /* qkv: RoPE pairs adjacent, V copied; as store_pair of decode_kernels.cu */
  const long long c = c0 + t;
  const int hd = p.r.hd;
  const coda_decode_layer_weights &l = p.j.layer[li];
  const long long cbase = ((long long)seq * p.r.max_len + pos) * (long long)p.r.Hk * hd;
  const long long nr = (long long)(p.r.Hq + p.r.Hk) * hd;
  if (c < nr) {
    const int h = (int)(c / hd), j = (int)(c % hd) / 2;
    const double cs = sm.rc[j], sn = sm.rs[j];
    const float o0 = (float)((double)v * cs - (double)vn * sn);
    const float o1 = (float)((double)v * sn + (double)vn * cs);
    bf16 *dst = h < p.r.Hq ? as_bf16(p.j.q) + (long long)h * hd
                           : as_bf16(l.kc) + cbase + (long long)(h - p.r.Hq) * hd;
    dst[2 * j] = __float2bfloat16_rn(o0);
    dst[2 * j + 1] = __float2bfloat16_rn(o1);
  } else {
    bf16 *vc = as_bf16(l.vc) + cbase + c - nr;
    vc[0] = __float2bfloat16_rn(v);
    vc[1] = __float2bfloat16_rn(vn);
  }
}

/* The consumers' share of phase f: its tiles from the ring, counted by the
 * block's running tile number *i. */
__device__ void run_phase(const step_params &p, step_smem &sm, const unsigned char *ring,
                          const phase &f, int li, long long g0, unsigned *i, int seq, int pos) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long T = (f.N + f.R - 1) / f.R;
  long long t = first_tile(g0, blockIdx.x, gridDim.x);
  /* without tiles a norm phase still keeps x for the residual phase after it */
  if (t >= T && f.kind != PH_QKV && f.kind != PH_GATE_UP) return;
  float a[kMaxChunks][8];
  const float r = load_row(p, sm, f, li, a);
  const long long nchunk = f.K / 8;
  for (; t < T; t += gridDim.x, (*i)++) {
    const int slot = *i % kStages;
    mbar_wait(&sm.full[slot], (*i / kStages) & 1);
    const unsigned char *st = ring + (size_t)slot * kStageBytes;
    float acc[kMaxRows];
#pragma unroll
    for (int j = 0; j < kMaxRows; j++) acc[j] = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; c++) {
      const long long ci = (long long)c * kChunkRound + warp * 32 + lane;
      if (ci >= nchunk) break;
#pragma unroll
      for (int j = 0; j < kMaxRows; j++) {
        if (j >= f.R) break;
        const uint4 wv = *reinterpret_cast<const uint4 *>(st + ((size_t)j * f.K + ci * 8) * 2);
        const bf16 *wb = reinterpret_cast<const bf16 *>(&wv);
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) s = fmaf(a[c][e], __bfloat162float(wb[e]), s);
        acc[j] += s;
      }
    }
    /* Every consumer thread releases its own reads of the stage, which the
     * loader's next bulk copy overwrites. (Thread 0 alone after the named
     * barrier is as ordered in the PTX memory model, but racecheck does not
     * follow that chain through bar.sync into the async proxy's write and
     * reported the copy as a hazard.) */
    mbar_arrive(&sm.empty[slot]);
    float (*red)[kMaxRows] = sm.red[*i & 1];
#pragma unroll
    for (int j = 0; j < kMaxRows; j++) {
      if (j >= f.R) break;
      const float s = warp_sum(acc[j]);
      if (lane == 0) red[warp][j] = s;
    }
    named_sync(1); /* the partials written */
    const long long c0 = t * f.R;
    const int rows = (int)(f.N - c0 < f.R ? f.N - c0 : f.R);
    if (warp == 0) { /* lane j: column c0 + j, the warps' sums in order */
      float v = 0.0f;
      if (lane < f.R)
        for (int w = 0; w < kStepWarps; w++) v += red[w][lane];
      v *= r;
      const float vn = __shfl_down_sync(0xffffffffu, v, 1);
      store_col(p, sm, f, li, c0, lane, rows, v, vn, seq, pos);
    }
  }
}

/* The tiles of one block over the whole step, in order. */
struct tile_cursor {
  int ph;
  long long t, T, g0;
  phase f;
};

__device__ __forceinline__ void cursor_settle(const step_params &p, tile_cursor &c, int nphase) {
  while (c.ph < nphase && c.t >= c.T) {
    c.g0 += c.T;
    if (++c.ph == nphase) break;
    c.f = phase_of(p, c.ph);
    c.T = (c.f.N + c.f.R - 1) / c.f.R;
    c.t = first_tile(c.g0, blockIdx.x, gridDim.x);
  }
}

__device__ __forceinline__ tile_cursor cursor_start(const step_params &p, int nphase) {
  tile_cursor c;
  c.ph = 0;
  c.g0 = 0;
  c.f = phase_of(p, 0);
  c.T = (c.f.N + c.f.R - 1) / c.f.R;
  c.t = first_tile(0, blockIdx.x, gridDim.x);
  cursor_settle(p, c, nphase);
  return c;
}

/* Weight rows [r0, r0 + rows) of tile c: its address and bytes. */
__device__ __forceinline__ const bf16 *tile_src(const tile_cursor &c, uint32_t *bytes) {
  const long long r0 = c.t * c.f.R, rows = c.f.N - r0 < c.f.R ? c.f.N - r0 : c.f.R;
  *bytes = (uint32_t)(rows * c.f.K * 2);
  return c.f.w + r0 * c.f.K;
}

/* The loader: each tile into the next ring stage once the consumers have
 * freed it. (Prefetching tiles past the ring into L2 as well made the
 * step slower: bench/results/gpu-2026-12-02d.md.) */
__device__ void load_tiles(const step_params &p, step_smem &sm, unsigned char *ring, int nphase) {
  tile_cursor cp = cursor_start(p, nphase);
  uint32_t bytes;
  for (unsigned i = 0; cp.ph < nphase; i++) {
    const int slot = i % kStages;
    if (i >= kStages) mbar_wait(&sm.empty[slot], (i / kStages - 1) & 1);
    const bf16 *src = tile_src(cp, &bytes);
    mbar_expect_tx(&sm.full[slot], bytes);
    bulk_load_1d(ring + (size_t)slot * kStageBytes, src, bytes, &sm.full[slot]);
    cp.t += gridDim.x;
    cursor_settle(p, cp, nphase);
  }
}

/* ------------------------------------------------------------ the kernel */

template <int HDL>
__global__ void __launch_bounds__(kStepThreads, 1) row_step_kernel(step_params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  step_smem &sm = *reinterpret_cast<step_smem *>(smem);
  unsigned char *ring = smem + kRingOffset;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; s++) {
      mbar_init(&sm.full[s], 1);
      mbar_init(&sm.empty[s], 32 * kStepWarps); /* every consumer thread */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int nphase = 4 * p.j.layers + 1;
  if (threadIdx.x >= 32 * kStepWarps) { /* the loader */
    if (threadIdx.x == 32 * kStepWarps) load_tiles(p, sm, ring, nphase);
    return;
  }
  if (p.j.trace && blockIdx.x == 0 && threadIdx.x == 0) p.j.trace[0] = global_ns();
  const int seq = p.r.seq[0], pos = p.r.pos[0], n = pos + 1;
  const int S = attn_splits(p, n);
  /* the RoPE angles of the row's position, the same in every layer */
  for (int j = threadIdx.x; j < p.r.hd / 2; j += 32 * kStepWarps)
    sincos((double)pos * p.j.inv_freq[j], &sm.rs[j], &sm.rc[j]);
  named_sync(1);
  long long g0 = 0;
  unsigned i = 0, passed = 0;
  for (int ph = 0; ph < nphase; ph++) {
    const phase f = phase_of(p, ph);
    const int li = ph / 4;
    if (ph > 0) grid_sync(p.j.sync, &passed, p.j.trace);
    if (f.kind == PH_OUT) { /* attention of layer li, then its merge */
      const coda_decode_layer_weights &l = p.j.layer[li];
      for (int u = blockIdx.x; u < p.r.Hk * S; u += gridDim.x)
        attn_unit<HDL>(p, sm, (const bf16 *)l.kc, (const bf16 *)l.vc, seq, n, u / S, u % S, S);
      grid_sync(p.j.sync, &passed, p.j.trace);
      for (int h = blockIdx.x; h < p.r.Hq; h += gridDim.x) attn_merge(p, sm, h, S);
      grid_sync(p.j.sync, &passed, p.j.trace);
    }
    run_phase(p, sm, ring, f, li, g0, &i, seq, pos);
    g0 += (f.N + f.R - 1) / f.R;
  }
  if (p.j.trace) grid_sync(p.j.sync, &passed, p.j.trace); /* the end of the last block's head */
}

/* Shapes the kernel takes (the reason in msg when not). */
int row_step_shapes(const coda_decode_row_step_job *j, char *msg, size_t cap) {
  const coda_decode_rows *r = j->rows;
  const int64_t nq = (int64_t)(r->Hq + 2 * r->Hk) * r->hd, qd = (int64_t)r->Hq * r->hd;
  const char *why = NULL;
  if (r->M != 1) why = "more than one row";
  else if (r->hd % 32 || r->hd > 256 || (r->hd / 32) & (r->hd / 32 - 1))
    why = "a head dim other than 32, 64, 128 or 256";
  else if (r->Hk < 1 || r->Hq % r->Hk || r->Hq / r->Hk > 8 ||
           (r->Hq / r->Hk) * r->hd > kAttnScratch)
    why = "more than 8 query heads per KV head, or their values over 512";
  else if (j->D % 8 || j->F % 8 || j->D > kMaxK / 2 || j->F > kMaxK || qd > kMaxK)
    why = "D or F not a multiple of 8, D above 8192 or F or Hq·hd above 16384";
  else if (j->layers < 1 || j->max_splits < 1 || nq > 0x7fffffffLL || j->V > 0x7fffffffLL)
    why = "no layers, no attention splits, or a dimension above 2^31";
  if (why && msg && cap) snprintf(msg, cap, "one-kernel decode step: %s", why);
  return why == NULL;
}

} // namespace

/* The kernel's weight ring is fed by bulk copies completing on mbarrier
 * transaction counts: sm_90 only (this file is built for sm_90a alone). */
static const char kHopperOnly[] = "bulk copies into shared memory with mbarrier transaction counts";

extern "C" int coda_cuda_decode_row_step_ok(coda_context ctx, const coda_decode_row_step_job *j,
                                            char *msg, size_t cap) {
  if (!ctx->knobs.decode_row_step_on) { /* slower than the separate kernels so far */
    if (msg && cap)
      snprintf(msg, cap, "one-kernel decode step: off (CODA_DECODE_ROW_STEP=1 takes it)");
    return 0;
  }
  if (coda_cuda_sm80(ctx)) { /* the separate kernels run instead */
    if (msg && cap)
      snprintf(msg, cap, "one-kernel decode step: not on the sm80 path (it needs Hopper: %s)",
               kHopperOnly);
    return 0;
  }
  return row_step_shapes(j, msg, cap);
}

extern "C" coda_status coda_cuda_decode_row_step(coda_context ctx,
                                                 const coda_decode_row_step_job *j) {
  const coda_status hs = coda_cuda_hopper_only(ctx, "one-kernel decode step", kHopperOnly);
  if (hs != CODA_OK) return hs;
  char why[160];
  if (!row_step_shapes(j, why, sizeof why))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s", why);
  const coda_decode_rows *r = j->rows;
  step_params p = {*j, *r, (long long)(r->Hq + 2 * r->Hk) * r->hd, (long long)r->Hq * r->hd};
  p.j.rows = NULL; /* a host pointer: the kernel reads p.r */
  void (*kernel)(step_params) = r->hd == 32    ? row_step_kernel<1>
                                : r->hd == 64  ? row_step_kernel<2>
                                : r->hd == 128 ? row_step_kernel<4>
                                               : row_step_kernel<8>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)kStepSmem);
  int dev = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStepThreads, kStepSmem);
  if (e == cudaSuccess && per_sm < 1) e = cudaErrorCooperativeLaunchTooLarge;
  cudaStream_t st = coda_cuda_stream(ctx);
  if (e == cudaSuccess) e = cudaMemsetAsync(j->sync, 0, sizeof(unsigned), st);
  if (e == cudaSuccess) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)sms);
    cfg.blockDim = dim3(kStepThreads);
    cfg.dynamicSmemBytes = kStepSmem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kernel, p);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA decode kernel (one-kernel step, %zu bytes of "
                     "shared memory a block): %s", kStepSmem, cudaGetErrorString(e));
  }
  return check_launch(ctx, "one-kernel step");
}
