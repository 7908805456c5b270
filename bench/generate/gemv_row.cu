/* The one-row decode GEMV (gemv_row_kernel of src/backends/cuda/decode_kernels.cu)
 * and its variants, at the linear layers of a decode step: qkv and gate/up
 * normalize their fp32 row on load, out and down read a bf16 row. Each
 * variant runs a "step" of L layers x (qkv, out, gate/up, down) on distinct
 * weights, launched with programmatic dependent launch and captured in a
 * CUDA graph, as the decoder does; the table gives the median replay in µs
 * per layer against the floor (the layer's weight bytes at the copy
 * bandwidth measured in the same run). Every variant's results are checked
 * against an fp64 CPU reference on fresh random data first.
 *   S:  warps per column pair, each a contiguous K slice, their partial
 *       sums added in warp order through shared memory (S = 1: the
 *       library's kernel as it was)
 *   pf: the warp's weight slice prefetched into L2 (cp.async.bulk.prefetch)
 *       before griddepcontrol.wait, while the previous kernel drains
 *   ah: the warp's first two 256-wide chunks of both rows loaded into
 *       registers before griddepcontrol.wait
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a gemv_row.cu -o gemv_row
 * Run:   ./gemv_row [1b|8b] */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

typedef __nv_bfloat16 bf16;

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

constexpr int kWarps = 8;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void bf16x8(const uint4 v, float *f) {
  const bf16 *b = reinterpret_cast<const bf16 *>(&v);
#pragma unroll
  for (int i = 0; i < 8; i++) f[i] = __bfloat162float(b[i]);
}
__device__ __forceinline__ void f32x8(const float *p, float *f) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

__device__ __forceinline__ void prefetch_l2(const void *p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

/* y[c], y[c+1] for the column pair of each S warps; xn: fp32 row and norm
 * weights g (normalized on load) or NULL, then xb: the bf16 row. */
template <int S, bool PF, int AH, bool NORM>
__global__ void __launch_bounds__(32 * kWarps)
    row_kernel(float *y, long long N, const bf16 *xb, const float *xf, const float *g,
               const bf16 *w, long long K, double eps) {
  __shared__ float part[kWarps][3];
  __shared__ double pss[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, s = warp % S;
  const long long c = 2 * ((long long)blockIdx.x * (kWarps / S) + warp / S);
  const bool live = c < N;
  const long long ks = (K / S + 7) / 8 * 8, k0 = s * ks, k1 = k0 + ks < K ? k0 + ks : K;
  const bf16 *w0 = w + (live ? c : 0) * K, *w1 = live && c + 1 < N ? w0 + K : w0;
  if (PF && live && lane < 2 && k1 > k0)
    prefetch_l2((lane ? w1 : w0) + k0, (unsigned)((k1 - k0) * 2));
  /* AH: the warp's first AH chunks of both rows loaded before the wait */
  uint4 pre[AH > 0 ? 2 * AH : 1];
#pragma unroll
  for (int i = 0; i < AH; i++) {
    const long long k = k0 + lane * 8 + 256LL * i;
    pre[2 * i] = live && k < k1 ? *reinterpret_cast<const uint4 *>(w0 + k) : make_uint4(0, 0, 0, 0);
    pre[2 * i + 1] = live && k < k1 ? *reinterpret_cast<const uint4 *>(w1 + k) : make_uint4(0, 0, 0, 0);
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float a0 = 0.0f, a1 = 0.0f;
  double ss = 0.0;
  if (live) {
    /* one 8-wide chunk of both rows at k against the row */
    auto chunk = [&](const uint4 v0, const uint4 v1, long long k) {
      float xv[8], f0[8], f1[8];
      bf16x8(v0, f0);
      bf16x8(v1, f1);
      float s0 = 0.0f, s1 = 0.0f;
      if (NORM) {
        float gv[8];
        f32x8(xf + k, xv);
        f32x8(g + k, gv);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          ss += (double)xv[i] * xv[i];
          const float xg = xv[i] * gv[i];
          s0 = fmaf(xg, f0[i], s0);
          s1 = fmaf(xg, f1[i], s1);
        }
      } else {
        const uint4 xq = *reinterpret_cast<const uint4 *>(xb + k); /* one 16-byte load */
        bf16x8(xq, xv);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          s0 = fmaf(xv[i], f0[i], s0);
          s1 = fmaf(xv[i], f1[i], s1);
        }
      }
      a0 += s0;
      a1 += s1;
    };
    long long k = k0 + lane * 8;
#pragma unroll
    for (int i = 0; i < AH; i++, k += 256)
      if (k < k1) chunk(pre[2 * i], pre[2 * i + 1], k);
#pragma unroll 4 /* several weight loads in flight per lane */
    for (; k < k1; k += 256)
      chunk(*reinterpret_cast<const uint4 *>(w0 + k), *reinterpret_cast<const uint4 *>(w1 + k), k);
    if (NORM) ss = warp_sum_d(ss);
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
  }
  if (S > 1) {
    if (lane == 0) {
      part[warp][0] = a0;
      part[warp][1] = a1;
      pss[warp] = ss;
    }
    __syncthreads();
    if (s != 0 || lane != 0 || !live) return;
    for (int i = 1; i < S; i++) {
      a0 += part[warp + i][0];
      a1 += part[warp + i][1];
      ss += pss[warp + i];
    }
  } else if (lane != 0 || !live) {
    return;
  }
  const float r = NORM ? (float)(1.0 / sqrt(ss / (double)K + eps)) : 1.0f;
  y[c] = a0 * r;
  if (c + 1 < N) y[c + 1] = a1 * r;
}

struct variant {
  int S;
  bool pf;
  int ah;
};
typedef void (*kern_t)(float *, long long, const bf16 *, const float *, const float *,
                       const bf16 *, long long, double);
template <bool NORM> static kern_t kernel_of(variant v) {
#define K_(s)                                                                                  \
  if (v.S == s)                                                                                \
    return v.pf ? row_kernel<s, true, 0, NORM>                                                 \
                : v.ah ? row_kernel<s, false, 2, NORM> : row_kernel<s, false, 0, NORM>;
  K_(1) K_(2) K_(4) K_(8)
#undef K_
  return nullptr;
}

static void launch_row(variant v, cudaStream_t st, float *y, long long N, const bf16 *xb,
                       const float *xf, const float *g, const bf16 *w, long long K) {
  const long long warps = (N + 1) / 2 * v.S;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)((warps + kWarps - 1) / kWarps));
  cfg.blockDim = dim3(32 * kWarps);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, g ? kernel_of<true>(v) : kernel_of<false>(v), y, N, xb, xf, g, w, K, 1e-5));
}

struct lin {
  long long N, K;
  bool norm;
  const char *name;
};

static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char **argv) {
  const bool big = argc > 1 && strcmp(argv[1], "8b") == 0;
  const long long D = big ? 4096 : 2048, F = big ? 14336 : 8192, hd = 128 / (big ? 1 : 2);
  const long long Hq = 32, Hk = 8;
  const int L = big ? 32 : 16;
  const lin lins[4] = {{(Hq + 2 * Hk) * hd, D, true, "qkv"},
                       {D, D, false, "out"},
                       {2 * F, D, true, "gate/up"},
                       {D, F, false, "down"}};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs; shape %s: %d layers, d %lld, ffn %lld\n", prop.name,
         prop.multiProcessorCount, big ? "8b" : "1b", L, D, F);

  /* weights: L layers x 4 matrices, random bf16 in [-1, 1) / sqrt(K) */
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  size_t layer_elems = 0;
  for (const lin &l : lins) layer_elems += (size_t)(l.N * l.K);
  const double layer_bytes = 2.0 * layer_elems;
  bf16 *W;
  CK(cudaMalloc(&W, layer_elems * 2 * L));
  {
    /* fill on the device from a small random host block, offset per layer */
    std::vector<uint16_t> blk(1 << 20);
    for (auto &b : blk) {
      const float f = uni(rng) * 0.03f;
      uint32_t u;
      memcpy(&u, &f, 4);
      b = (uint16_t)(u >> 16);
    }
    bf16 *d;
    CK(cudaMalloc(&d, blk.size() * 2));
    CK(cudaMemcpy(d, blk.data(), blk.size() * 2, cudaMemcpyHostToDevice));
    const size_t n = layer_elems * L;
    for (size_t o = 0; o < n; o += blk.size()) {
      const size_t m = std::min(blk.size(), n - o);
      const size_t rot = (o / blk.size() * 7919) % blk.size();
      const size_t m1 = std::min(m, blk.size() - rot);
      CK(cudaMemcpy(W + o, d + rot, m1 * 2, cudaMemcpyDeviceToDevice));
      if (m1 < m) CK(cudaMemcpy(W + o + m1, d, (m - m1) * 2, cudaMemcpyDeviceToDevice));
    }
    CK(cudaFree(d));
  }
  const long long maxK = F, maxN = 2 * F;
  std::vector<float> hx(maxK), hg(maxK);
  std::vector<uint16_t> hxb(maxK);
  for (long long k = 0; k < maxK; k++) {
    hx[k] = uni(rng) * 3.0f;
    hg[k] = 0.5f + 0.5f * uni(rng);
    uint32_t u;
    const float f = uni(rng);
    memcpy(&u, &f, 4);
    hxb[k] = (uint16_t)(u >> 16);
  }
  float *xf, *g, *y;
  bf16 *xb;
  CK(cudaMalloc(&xf, maxK * 4));
  CK(cudaMalloc(&g, maxK * 4));
  CK(cudaMalloc(&xb, maxK * 2));
  CK(cudaMalloc(&y, maxN * 4 * 4));
  CK(cudaMemcpy(xf, hx.data(), maxK * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(g, hg.data(), maxK * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(xb, hxb.data(), maxK * 2, cudaMemcpyHostToDevice));

  /* copy bandwidth, read + write, as the decoder's --hbm-gbps */
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double bw;
  {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    std::vector<float> t;
    for (int i = 0; i < 7; i++) {
      CK(cudaEventRecord(e0, st));
      CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    bw = 2.0 * n / (t[3] * 1e-3) / 1e9;
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  printf("copy bandwidth %.0f GB/s; a layer's weights %.1f MB, floor %.2f us\n", bw,
         layer_bytes / 1e6, layer_bytes / bw * 1e-3);

  const variant vars[] = {{1, false, 0}, {1, false, 1}, {2, false, 0}, {2, false, 1},
                          {2, true, 0}, {4, false, 0}, {4, false, 1}, {8, false, 1}};
  const int nv = sizeof vars / sizeof vars[0];

  /* correctness: layer L-1's four linears of every variant against fp64 */
  {
    size_t off = layer_elems * (L - 1);
    for (const lin &l : lins) {
      std::vector<uint16_t> hw((size_t)(l.N * l.K));
      CK(cudaMemcpy(hw.data(), W + off, hw.size() * 2, cudaMemcpyDeviceToHost));
      std::vector<double> ref(l.N);
      double ss = 0.0;
      for (long long k = 0; k < l.K; k++) ss += (double)hx[k] * hx[k];
      const double r = 1.0 / sqrt(ss / l.K + 1e-5);
      double scale = 0.0;
      for (long long n = 0; n < l.N; n++) {
        double a = 0.0, m = 0.0;
        for (long long k = 0; k < l.K; k++) {
          const double xv = l.norm ? (double)hx[k] * hg[k] * r : (double)bf2f(hxb[k]);
          const double t = xv * bf2f(hw[(size_t)(n * l.K + k)]);
          a += t;
          m += fabs(t);
        }
        ref[n] = a;
        scale = std::max(scale, m);
      }
      for (int v = 0; v < nv; v++) {
        CK(cudaMemset(y, 0xff, l.N * 4));
        launch_row(vars[v], st, y, l.N, xb, l.norm ? xf : nullptr, l.norm ? g : nullptr, W + off,
                   l.K);
        CK(cudaStreamSynchronize(st));
        std::vector<float> hy(l.N);
        CK(cudaMemcpy(hy.data(), y, l.N * 4, cudaMemcpyDeviceToHost));
        double err = 0.0;
        for (long long n = 0; n < l.N; n++) err = std::max(err, fabs(hy[n] - ref[n]));
        const bool ok = err <= 1e-5 * scale + 1e-6 && std::isfinite(err);
        printf("check %-8s S=%d pf=%d ah=%d: max|err| %.3g of sum|x w| %.3g %s\n", l.name,
               vars[v].S, vars[v].pf, vars[v].ah, err, scale, ok ? "ok" : "FAILED");
        if (!ok) return 1;
      }
      off += (size_t)(l.N * l.K);
    }
  }

  /* timing: a graph of the whole step's linears per variant (and per
   * linear kind alone, L launches on the L layers' weights) */
  printf("\n| variant | qkv us | out us | gate/up us | down us | step us/layer | of floor |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int v = 0; v < nv; v++) {
    double per[5];
    for (int which = 0; which < 5; which++) { /* 0..3 one kind, 4 the step */
      cudaGraph_t graph;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int layer = 0; layer < L; layer++) {
        size_t off = layer_elems * layer;
        for (int i = 0; i < 4; i++) {
          const lin &l = lins[i];
          if (which == 4 || which == i)
            launch_row(vars[v], st, y + (i % 2) * maxN, l.N, xb, l.norm ? xf : nullptr,
                       l.norm ? g : nullptr, W + off, l.K);
          off += (size_t)(l.N * l.K);
        }
      }
      CK(cudaStreamEndCapture(st, &graph));
      cudaGraphExec_t ex;
      CK(cudaGraphInstantiate(&ex, graph, 0));
      std::vector<float> t;
      for (int rep = 0; rep < 23; rep++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ex, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep >= 3) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      per[which] = t[t.size() / 2] * 1e3 / L;
      CK(cudaGraphExecDestroy(ex));
      CK(cudaGraphDestroy(graph));
    }
    printf("| S=%d pf=%d ah=%d | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f %% |\n", vars[v].S,
           vars[v].pf, vars[v].ah,
           per[0], per[1], per[2], per[3], per[4], 100.0 * layer_bytes / bw * 1e-3 / per[4]);
  }
  double fl[4];
  for (int i = 0; i < 4; i++) fl[i] = 2.0 * lins[i].N * lins[i].K / bw * 1e-3;
  printf("| floor | %.2f | %.2f | %.2f | %.2f | %.2f | |\n", fl[0], fl[1], fl[2], fl[3],
         layer_bytes / bw * 1e-3);
  return 0;
}
