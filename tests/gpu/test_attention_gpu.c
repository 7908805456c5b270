/* GPU test of the causal GQA attention kernels (coda_cuda_attention_forward
 * and _backward): head_dim 32, 64 and 128, every kernel variant, the
 * defaults and the first defaults (CODA_ATTN_IMPL=v1), grouped and plain
 * heads, sequence lengths that are and are not multiples of the 64-row
 * tile, padded leading dimensions, against a reference in double written here. Outputs are
 * poisoned (NaN bytes) before every run and the padding between rows is
 * checked to stay untouched; two runs must be bit-identical. Each variant
 * also runs with the fused RoPE backward (coda_attention_backward_rope),
 * checked against its own plain result rotated here. Also checks
 * that unsupported requests fail cleanly. The head_dim 64 and 128 cases run
 * again through coda_attention_forward / _backward on a context with
 * CODA_ATTENTION=cudnn (cuDNN's fused attention, attention_cudnn.c) with
 * the same checks, when cuDNN loads (CODA_CUDNN_LIB or LD_LIBRARY_PATH);
 * otherwise its refusal is checked to be a clean error. Sliding windows
 * (1, under a kernel block, not a multiple of one, equal to and longer
 * than the sequence) and score scales run every variant against the same
 * reference, and again through coda_attention_forward_mask / _backward_mask
 * on a context with CODA_ATTENTION=own (the dispatcher's path; with cuDNN,
 * the scale through it and the window's refusal). Exits non-zero on any
 * failure.
 *   test_attention_gpu [seed]            every shape
 *   test_attention_gpu --small [seed]    four ragged shapes only
 *   test_attention_gpu --sanitize [seed] every forward and backward variant
 *                                        of every head size (and the RoPE
 *                                        backward of each) on minimal
 *                                        ragged shapes, one run each (no
 *                                        repeat for bit-identity): for the
 *                                        slow compute-sanitizer tools
 *   test_attention_gpu --persistent [seed] the warp-specialized variants on
 *                                        more 128-query tiles than twice
 *                                        the SMs (each persistent CTA runs
 *                                        several tiles) at the fewest tile
 *                                        pairs, one run each
 *                                        (compute-sanitizer)
 * On the sm80 path (an sm_8x GPU, or CODA_ARCH=sm80 on any) the same runs
 * take the mma.sync variants alone, the defaults are mma.sync ones, and a
 * wgmma or warp-specialized variant is checked to be refused by name.
 * Every mode ends with a "coverage:" line: per head size, how many of the
 * forward and backward variants ran. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "backends/cuda/attention.cuh"
#include "backends/cuda/attention_cudnn.h"
#include "backends/cuda/backend.h"
#include "gpu/cuda_check.h"
#include "test_util.h"

static int g_fail = 0, g_pass = 0;
static int g_runs = 2; /* runs of each case: 2 checks bit-identity; 1 under the sanitizer modes */
/* non-NULL: run_case and run_rope call the public API on this context
 * (CODA_ATTENTION=cudnn, or own: g_api_name) instead of the kernel variants */
static coda_context g_api = NULL;
static const char *g_api_name = "cudnn";

/* Which variants ran, per head size (32, 64, 128) and pass (0 forward, 1
 * backward): the "coverage:" line. */
#define MAX_VARIANTS 64
static const int kHeadDims[3] = {32, 64, 128};
static unsigned char g_ran[3][2][MAX_VARIANTS];

/* 1 on the sm80 path (an sm_8x GPU, or CODA_ARCH=sm80): the mma.sync
 * variants alone run there, the others refuse it by name (bad_inputs) */
static int g_sm80 = 0;

/* The variants this context runs, of a pass at head_dim hd: their count
 * and the i-th name (all of them on the sm90 path, the "mma_" ones on the
 * sm80 path). */
static int runnable(int backward, int hd, int i, const char **name) {
  const int n = coda_cuda_attention_num_variants(backward, hd);
  int k = 0;
  for (int v = 0; v < n; v++) {
    const char *nm = coda_cuda_attention_variant_name(backward, hd, v);
    if (g_sm80 && strncmp(nm, "mma_", 4)) continue;
    if (k++ == i && name) *name = nm;
  }
  return k;
}
static int num_runnable(int backward, int hd) { return runnable(backward, hd, -1, NULL); }
static const char *runnable_name(int backward, int hd, int i) {
  const char *nm = NULL;
  runnable(backward, hd, i, &nm);
  return nm;
}

static void mark_ran(int hd, int backward, const char *name) {
  for (int h = 0; h < 3; h++) {
    if (kHeadDims[h] != hd) continue;
    const int n = coda_cuda_attention_num_variants(backward, hd);
    for (int v = 0; v < n && v < MAX_VARIANTS; v++)
      if (name && !strcmp(name, coda_cuda_attention_variant_name(backward, hd, v)))
        g_ran[h][backward][v] = 1;
  }
}

static void print_coverage(void) {
  printf("coverage:");
  for (int h = 0; h < 3; h++) {
    int ran[2] = {0, 0}, n[2];
    for (int b = 0; b < 2; b++) {
      n[b] = coda_cuda_attention_num_variants(b, kHeadDims[h]);
      for (int v = 0; v < n[b] && v < MAX_VARIANTS; v++) ran[b] += g_ran[h][b][v];
    }
    printf(" hd%d %d/%d forward %d/%d backward%s", kHeadDims[h], ran[0], n[0], ran[1], n[1],
           h < 2 ? "," : "");
  }
  printf(" variants\n");
}


#define EXPECT(cond, ...)                \
  do {                                   \
    if (cond) {                          \
      g_pass++;                          \
    } else {                             \
      g_fail++;                          \
      printf("FAIL: " __VA_ARGS__);      \
      printf("\n");                      \
    }                                    \
  } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { return xorshift64_unit(&g_rng); } /* uniform in [-1, 1) */

typedef struct {
  int B, T, Hq, Hkv, hd, pad; /* pad: extra elements per row (multiple of 8) */
  double scale;               /* the scores' scale; 0: 1/sqrt(hd) */
  int window;                 /* > 0: query t sees keys t - window < j <= t */
} shape;

/* Reference in double on the bf16 inputs (qkv, dout given as doubles):
 * forward o, lse; backward dq, dk, dv in the packed layout. */
static void reference(const shape *s, const double *qkv, int64_t ldq, const double *dout,
                      double *o, double *lse, double *dqkv) {
  const int T = s->T, hd = s->hd, Hq = s->Hq, Hkv = s->Hkv, grp = Hq / Hkv;
  const int64_t cols = (int64_t)(Hq + 2 * Hkv) * hd, oc = (int64_t)Hq * hd;
  const double scale = s->scale > 0 ? s->scale : 1.0 / sqrt((double)hd);
  double *p = malloc(sizeof(double) * T), *dp = malloc(sizeof(double) * T);
  memset(dqkv, 0, sizeof(double) * (size_t)s->B * T * cols);
  for (int b = 0; b < s->B; b++)
    for (int h = 0; h < Hq; h++) {
      const int g = h / grp;
#define Q(t, d) qkv[((int64_t)b * T + (t)) * ldq + (int64_t)h * hd + (d)]
#define K(t, d) qkv[((int64_t)b * T + (t)) * ldq + (int64_t)(Hq + g) * hd + (d)]
#define V(t, d) qkv[((int64_t)b * T + (t)) * ldq + (int64_t)(Hq + Hkv + g) * hd + (d)]
#define DO(t, d) dout[((int64_t)b * T + (t)) * oc + (int64_t)h * hd + (d)]
#define G(t, c) dqkv[((int64_t)b * T + (t)) * cols + (c)]
      for (int t = 0; t < T; t++) {
        /* the keys query t sees: j0 <= j <= t */
        const int j0 = s->window > 0 && t - s->window + 1 > 0 ? t - s->window + 1 : 0;
        double m = -INFINITY, l = 0;
        for (int j = j0; j <= t; j++) {
          double a = 0;
          for (int d = 0; d < hd; d++) a += Q(t, d) * K(j, d);
          p[j] = a * scale;
          if (p[j] > m) m = p[j];
        }
        for (int j = j0; j <= t; j++) l += exp(p[j] - m);
        const double L = m + log(l);
        lse[((int64_t)b * T + t) * Hq + h] = L;
        double *ot = o + ((int64_t)b * T + t) * oc + (int64_t)h * hd;
        for (int d = 0; d < hd; d++) ot[d] = 0;
        for (int j = j0; j <= t; j++) {
          p[j] = exp(p[j] - L);
          for (int d = 0; d < hd; d++) ot[d] += p[j] * V(j, d);
        }
        /* backward of this row: D = do.o, ds_j = p_j (do.v_j - D) */
        double D = 0;
        for (int d = 0; d < hd; d++) D += DO(t, d) * ot[d];
        for (int j = j0; j <= t; j++) {
          double a = 0;
          for (int d = 0; d < hd; d++) a += DO(t, d) * V(j, d);
          dp[j] = p[j] * (a - D) * scale;
        }
        for (int j = j0; j <= t; j++)
          for (int d = 0; d < hd; d++) {
            G(t, (int64_t)h * hd + d) += dp[j] * K(j, d);
            G(j, (int64_t)(Hq + g) * hd + d) += dp[j] * Q(t, d);
            G(j, (int64_t)(Hq + Hkv + g) * hd + d) += p[j] * DO(t, d);
          }
      }
#undef Q
#undef K
#undef V
#undef DO
#undef G
    }
  free(p);
  free(dp);
}

/* Device buffer of rows x ld 16-bit or 32-bit values with a host copy. */
typedef struct {
  size_t bytes;
  void *d;
  unsigned char *h;
} buf;

static buf buf_new(size_t bytes) {
  buf b;
  b.bytes = bytes;
  b.h = malloc(bytes);
  CUDA_CHECK(cudaMalloc(&b.d, bytes));
  return b;
}
static void buf_free(buf *b) {
  free(b->h);
  cudaFree(b->d);
}
static void poison(buf *b) { CUDA_CHECK(cudaMemset(b->d, 0xFF, b->bytes)); }
static void fetch(buf *b) { CUDA_CHECK(cudaMemcpy(b->h, b->d, b->bytes, cudaMemcpyDeviceToHost)); }

/* max |x - r| over the valid region must stay within atol + rtol |r|,
 * with atol relative to the rms of the reference block; the padding
 * (columns cols..ld-1) must still hold the poison. */
typedef struct {
  double max_rel; /* max |x - r| / rms(r) */
  int bad, pad_bad;
} cmp_result;

static cmp_result compare_bf16(const buf *b, int64_t rows, int64_t cols, int64_t ld,
                               int64_t c0, int64_t c1, const double *ref, int64_t ldr,
                               double rtol, double atol_rms) {
  const uint16_t *x = (const uint16_t *)b->h;
  cmp_result r = {0, 0, 0};
  double ss = 0;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t c = c0; c < c1; c++) ss += ref[i * ldr + c] * ref[i * ldr + c];
  /* floor: a block that is zero in exact math (one token) has roundoff only */
  const double rms = fmax(sqrt(ss / (double)(rows * (c1 - c0))), 1e-3);
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t c = c0; c < c1; c++) {
      const double v = coda_bf16_to_f32(x[i * ld + c]), rv = ref[i * ldr + c];
      const double e = fabs(v - rv);
      if (!(e <= atol_rms * rms + rtol * fabs(rv))) {
        if (r.bad < 3)
          printf("    mismatch at row %lld col %lld: got %.6g want %.6g\n", (long long)i,
                 (long long)c, v, rv);
        r.bad++;
      }
      if (!(e / rms <= r.max_rel)) r.max_rel = e / rms; /* NaN sticks */
    }
    for (int64_t c = cols; c < ld; c++)
      if (x[i * ld + c] != 0xFFFF) r.pad_bad++;
  }
  return r;
}

/* The backward with the fused RoPE backward (coda_attention_backward_rope)
 * against the plain backward's own result g (bf16, the same variant)
 * rotated here in double: dz = R(-theta) g per adjacent pair, theta =
 * 2 pi frac(pos (fhi + flo)) (Llama frequencies, base 10000, turns as a
 * float-float pair; V columns 0), zp[m, head] = sum qkv * g over the head.
 * Two runs bit-identical; the padding of dz and zp untouched. */
static void run_rope(coda_context ctx, const shape *s, const char *bc, const char *name,
                     const coda_tensor *tq, const coda_tensor *to, const coda_tensor *tl,
                     const coda_tensor *tdo, const uint16_t *g, const double *xq) {
  const int B = s->B, T = s->T, Hq = s->Hq, Hkv = s->Hkv, hd = s->hd, NH = Hq + 2 * Hkv;
  const int64_t BT = (int64_t)B * T, cols = (int64_t)NH * hd, ldq = tq->ld, ldz = NH + 1;
  buf pos = buf_new((size_t)BT * 4), freq = buf_new((size_t)cols * 4),
      dz = buf_new((size_t)BT * ldq * 2), zp = buf_new((size_t)BT * ldz * 4);
  int32_t *hp = (int32_t *)pos.h;
  float *hf = (float *)freq.h;
  for (int64_t m = 0; m < BT; m++) hp[m] = (int32_t)(m % T) + 3 * (int32_t)(m / T);
  for (int64_t c = 0; c < cols; c += 2) {
    const int j = (int)((c % hd) / 2);
    const double f = c < (int64_t)(Hq + Hkv) * hd
                         ? pow(10000.0, -2.0 * j / hd) / (2 * 3.141592653589793) : 0.0;
    hf[c] = (float)f;
    hf[c + 1] = (float)(f - (double)hf[c]);
  }
  CUDA_CHECK(cudaMemcpy(pos.d, pos.h, pos.bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(freq.d, freq.h, freq.bytes, cudaMemcpyHostToDevice));
  coda_tensor tp = {pos.d, CODA_I32, BT, 1, 1}, tf = {freq.d, CODA_F32, 1, cols, cols},
              tz = {dz.d, CODA_BF16, BT, cols, ldq}, tzp = {zp.d, CODA_F32, BT, NH, ldz};
  const coda_attn_rope rope = {&tp, &tf, &tzp};
  const coda_attn_mask mask = {sizeof mask, s->scale, s->window};
  unsigned char *first_z = malloc(dz.bytes), *first_p = malloc(zp.bytes);
  for (int run = 0; run < g_runs; run++) {
    poison(&dz);
    poison(&zp);
    const coda_status st =
        g_api ? coda_attention_backward_mask(g_api, tq, to, tl, tdo, B, T, Hq, Hkv, hd, &tp, &tf,
                                             &tz, &tzp, &mask)
              : coda_cuda_attention_backward_variant(ctx, tq, to, tl, tdo, B, T, Hq, Hkv, hd, &tz,
                                                     &rope, &mask, bc);
    if (g_api) ctx = g_api;
    EXPECT(st == CODA_OK, "%s: RoPE backward returned %d (%s)", name, (int)st,
           coda_last_error(ctx));
    CUDA_CHECK(cudaDeviceSynchronize());
    fetch(&dz);
    fetch(&zp);
    if (run == 0) {
      memcpy(first_z, dz.h, dz.bytes);
      memcpy(first_p, zp.h, zp.bytes);
    }
  }
  if (g_runs > 1)
    EXPECT(memcmp(first_z, dz.h, dz.bytes) == 0 && memcmp(first_p, zp.h, zp.bytes) == 0,
           "%s: RoPE backward: two runs differ", name);
  const uint16_t *hz = (const uint16_t *)dz.h;
  const float *hzp = (const float *)zp.h;
  double ss = 0, ez = 0, ep = 0;
  int zbad = 0, pbad = 0, pad = 0;
  for (int64_t m = 0; m < BT; m++)
    for (int64_t c = 0; c < cols; c++) ss += pow(coda_bf16_to_f32(g[m * ldq + c]), 2);
  const double rms = sqrt(ss / (double)(BT * cols)) + 1e-30;
  for (int64_t m = 0; m < BT; m++) {
    for (int h = 0; h < NH; h++) {
      double z = 0, za = 0;
      for (int64_t c = (int64_t)h * hd; c < (int64_t)(h + 1) * hd; c += 2) {
        const double a = coda_bf16_to_f32(g[m * ldq + c]), b = coda_bf16_to_f32(g[m * ldq + c + 1]);
        z += xq[m * ldq + c] * a + xq[m * ldq + c + 1] * b;
        za += fabs(xq[m * ldq + c] * a) + fabs(xq[m * ldq + c + 1] * b);
        double t = (double)hp[m] * ((double)hf[c] + (double)hf[c + 1]);
        const double th = 2 * 3.141592653589793 * (t - rint(t));
        const double r0 = a * cos(th) + b * sin(th), r1 = b * cos(th) - a * sin(th);
        const double e0 = fabs(coda_bf16_to_f32(hz[m * ldq + c]) - r0);
        const double e1 = fabs(coda_bf16_to_f32(hz[m * ldq + c + 1]) - r1);
        /* the GPU rotates the fp32 gradient, the reference its bf16 rounding
         * (at most 2^-8 of each component): the rotation mixes both into each
         * result (a vector error within 2^-8 (|r0| + |r1|)), which is rounded
         * once more (2^-8 |r|): within 2^-7 (|r0| + |r1|) */
        const double tol = 1e-3 * rms + 7.9e-3 * (fabs(r0) + fabs(r1));
        if (!(e0 <= tol) || !(e1 <= tol)) {
          if (zbad < 3)
            printf("    dz mismatch at row %lld col %lld: got %.6g %.6g want %.6g %.6g\n",
                   (long long)m, (long long)c, coda_bf16_to_f32(hz[m * ldq + c]),
                   coda_bf16_to_f32(hz[m * ldq + c + 1]), r0, r1);
          zbad++;
        }
        if (!(fmax(e0, e1) / rms <= ez)) ez = fmax(e0, e1) / rms;
      }
      const double e = fabs(hzp[m * ldz + h] - z);
      if (!(e <= 4e-3 * za + 1e-6)) pbad++;
      if (!(e / (za + 1e-30) <= ep)) ep = e / (za + 1e-30);
    }
    for (int64_t c = cols; c < ldq; c++) pad += hz[m * ldq + c] != 0xFFFF;
    uint32_t u;
    memcpy(&u, &hzp[m * ldz + NH], 4);
    pad += u != 0xFFFFFFFFu;
  }
  EXPECT(zbad == 0 && pbad == 0 && pad == 0,
         "%s: RoPE backward: %d dz mismatches (max %.2e rms), %d zp mismatches (max %.2e of "
         "sum |y g|), %d padding changed",
         name, zbad, ez, pbad, ep, pad);
  printf("  %-38s RoPE backward: dz max|err|/rms %.2e, zp max err / sum|y g| %.2e\n", name, ez,
         ep);
  free(first_z);
  free(first_p);
  buf_free(&pos);
  buf_free(&freq);
  buf_free(&dz);
  buf_free(&zp);
}

/* Runs forward variant fc and backward variant bc (by name; NULL: the
 * default) g_runs times each and checks them against the reference. */
static void run_case(coda_context ctx, const shape *s, const char *fc, const char *bc) {
  const int B = s->B, T = s->T, Hq = s->Hq, Hkv = s->Hkv, hd = s->hd;
  const int64_t BT = (int64_t)B * T, cols = (int64_t)(Hq + 2 * Hkv) * hd, oc = (int64_t)Hq * hd;
  const int64_t ldq = cols + s->pad, ldo = oc + s->pad, ldl = Hq + (s->pad ? 3 : 0);
  char name[160];
  const char *impl = getenv("CODA_ATTN_IMPL");
  char mk[48] = "";
  if (s->window || s->scale > 0) snprintf(mk, sizeof mk, " w%d s%g", s->window, s->scale);
  snprintf(name, sizeof name, "B%d T%d Hq%d Hkv%d hd%d pad%d%s %s/%s%s", B, T, Hq, Hkv, hd,
           s->pad, mk, g_api ? g_api_name : fc ? fc : "default",
           g_api ? g_api_name : bc ? bc : "default", impl && !strcmp(impl, "v1") ? " (v1)" : "");
  const coda_attn_mask mask = {sizeof mask, s->scale, s->window};
  if (g_api) ctx = g_api;

  buf qkv = buf_new((size_t)BT * ldq * 2), out = buf_new((size_t)BT * ldo * 2),
      lse = buf_new((size_t)BT * ldl * 4), dout = buf_new((size_t)BT * ldo * 2),
      dqkv = buf_new((size_t)BT * ldq * 2);
  double *xq = malloc(sizeof(double) * BT * ldq), *xdo = malloc(sizeof(double) * BT * oc);
  uint16_t *hq = (uint16_t *)qkv.h, *hdo = (uint16_t *)dout.h;
  /* q and k larger than v so the softmax is far from uniform */
  for (int64_t i = 0; i < BT; i++)
    for (int64_t c = 0; c < ldq; c++) {
      const double amp = c < (int64_t)(Hq + Hkv) * hd ? 2.5 : 1.0;
      hq[i * ldq + c] = coda_f32_to_bf16((float)(amp * urand()));
      xq[i * ldq + c] = coda_bf16_to_f32(hq[i * ldq + c]);
    }
  for (int64_t i = 0; i < BT; i++)
    for (int64_t c = 0; c < ldo; c++) {
      hdo[i * ldo + c] = coda_f32_to_bf16((float)urand());
      if (c < oc) xdo[i * oc + c] = coda_bf16_to_f32(hdo[i * ldo + c]);
    }
  CUDA_CHECK(cudaMemcpy(qkv.d, qkv.h, qkv.bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dout.d, dout.h, dout.bytes, cudaMemcpyHostToDevice));

  double *ro = malloc(sizeof(double) * BT * oc), *rl = malloc(sizeof(double) * BT * Hq),
         *rg = malloc(sizeof(double) * BT * cols);
  reference(s, xq, ldq, xdo, ro, rl, rg);
  if (!g_api) {
    mark_ran(hd, 0, fc);
    mark_ran(hd, 1, bc);
  }

  coda_tensor tq = {qkv.d, CODA_BF16, BT, cols, ldq}, to = {out.d, CODA_BF16, BT, oc, ldo},
              tl = {lse.d, CODA_F32, BT, Hq, ldl}, tdo = {dout.d, CODA_BF16, BT, oc, ldo},
              tg = {dqkv.d, CODA_BF16, BT, cols, ldq};
  unsigned char *first_o = malloc(out.bytes), *first_l = malloc(lse.bytes),
                *first_g = malloc(dqkv.bytes);
  for (int run = 0; run < g_runs; run++) {
    poison(&out);
    poison(&lse);
    poison(&dqkv);
    coda_status st =
        g_api ? coda_attention_forward_mask(ctx, &tq, B, T, Hq, Hkv, hd, &to, &tl, &mask)
              : coda_cuda_attention_forward_variant(ctx, &tq, B, T, Hq, Hkv, hd, &to, &tl, &mask,
                                                    fc);
    EXPECT(st == CODA_OK, "%s: forward returned %d (%s)", name, (int)st, coda_last_error(ctx));
    st = g_api ? coda_attention_backward_mask(ctx, &tq, &to, &tl, &tdo, B, T, Hq, Hkv, hd, NULL,
                                              NULL, &tg, NULL, &mask)
               : coda_cuda_attention_backward_variant(ctx, &tq, &to, &tl, &tdo, B, T, Hq, Hkv, hd,
                                                      &tg, NULL, &mask, bc);
    EXPECT(st == CODA_OK, "%s: backward returned %d (%s)", name, (int)st, coda_last_error(ctx));
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaSuccess, "%s: kernel error %s", name, cudaGetErrorString(e));
    if (e != cudaSuccess) exit(2);
    fetch(&out);
    fetch(&lse);
    fetch(&dqkv);
    if (run == 0) {
      memcpy(first_o, out.h, out.bytes);
      memcpy(first_l, lse.h, lse.bytes);
      memcpy(first_g, dqkv.h, dqkv.bytes);
      continue;
    }
    EXPECT(memcmp(first_o, out.h, out.bytes) == 0 && memcmp(first_l, lse.h, lse.bytes) == 0 &&
               memcmp(first_g, dqkv.h, dqkv.bytes) == 0,
           "%s: two runs differ", name);
  }

  /* out: bf16 output of fp32 math with P rounded to bf16 for the PV product */
  cmp_result co = compare_bf16(&out, BT, oc, ldo, 0, oc, ro, oc, 2e-2, 2e-2);
  EXPECT(co.bad == 0 && co.pad_bad == 0, "%s: out: %d mismatches, %d padding changed", name,
         co.bad, co.pad_bad);
  /* lse in fp32 */
  int lbad = 0, lpad = 0;
  double lmax = 0;
  const float *hl = (const float *)lse.h;
  for (int64_t i = 0; i < BT; i++) {
    for (int h = 0; h < Hq; h++) {
      const double e = fabs(hl[i * ldl + h] - rl[i * Hq + h]);
      if (!(e <= 1e-3 + 1e-4 * fabs(rl[i * Hq + h]))) lbad++;
      if (!(e <= lmax)) lmax = e;
    }
    for (int64_t c = Hq; c < ldl; c++) {
      uint32_t u;
      memcpy(&u, &hl[i * ldl + c], 4);
      if (u != 0xFFFFFFFFu) lpad++;
    }
  }
  EXPECT(lbad == 0 && lpad == 0, "%s: lse: %d mismatches (max err %.3g), %d padding changed",
         name, lbad, lmax, lpad);
  /* dq, dk, dv: bf16 P and dS feed the tensor cores; the worst element of
   * a block reaches about 5 % of its rms (short rows and head_dim 32 sum
   * the fewest terms, and D = dO.O comes from the bf16 output) */
  const char *part[3] = {"dq", "dk", "dv"};
  const int64_t c0[4] = {0, (int64_t)Hq * hd, (int64_t)(Hq + Hkv) * hd, cols};
  double gmax[3];
  for (int k = 0; k < 3; k++) {
    cmp_result cg = compare_bf16(&dqkv, BT, cols, ldq, c0[k], c0[k + 1], rg, cols, 3e-2, 6e-2);
    gmax[k] = cg.max_rel;
    EXPECT(cg.bad == 0 && (k > 0 || cg.pad_bad == 0), "%s: %s: %d mismatches, %d padding changed",
           name, part[k], cg.bad, cg.pad_bad);
  }
  printf("  %-38s max|err|/rms: out %.2e  dq %.2e  dk %.2e  dv %.2e   lse max err %.2e\n", name,
         co.max_rel, gmax[0], gmax[1], gmax[2], lmax);
  run_rope(ctx, s, bc, name, &tq, &to, &tl, &tdo, (const uint16_t *)dqkv.h, xq);

  free(first_o);
  free(first_l);
  free(first_g);
  free(xq);
  free(xdo);
  free(ro);
  free(rl);
  free(rg);
  buf_free(&qkv);
  buf_free(&out);
  buf_free(&lse);
  buf_free(&dout);
  buf_free(&dqkv);
}

/* The head_dim 64 and 128 cases through cuDNN (CODA_ATTENTION=cudnn on a
 * context of its own), or, where cuDNN does not load, its clean refusal;
 * head_dim 32 is refused with a message either way. */
static void cudnn_cases(const shape *cases, size_t n, const shape *more, size_t nmore) {
  setenv("CODA_ATTENTION", "cudnn", 1);
  coda_context_options opts = coda_context_default_options();
  opts.backend = CODA_BACKEND_CUDA;
  coda_context c = NULL;
  const coda_status cs = coda_context_create(&opts, &c);
  unsetenv("CODA_ATTENTION");
  EXPECT(cs == CODA_OK, "cannot create a CUDA context with CODA_ATTENTION=cudnn");
  if (cs != CODA_OK) return;
  const size_t ver = coda_cudnn_version(c);
  const shape one = {1, 64, 2, 1, 64, 0, 0, 0};
  if (!ver) {
    /* the refusal: an error naming cuDNN, no crash */
    const int64_t cols = 4 * 64, oc = 2 * 64;
    buf q = buf_new(64 * cols * 2), o = buf_new(64 * oc * 2), l = buf_new(64 * 2 * 4);
    coda_tensor tq = {q.d, CODA_BF16, 64, cols, cols}, to = {o.d, CODA_BF16, 64, oc, oc},
                tl = {l.d, CODA_F32, 64, 2, 2};
    const coda_status st = coda_attention_forward(c, &tq, one.B, one.T, one.Hq, one.Hkv, one.hd,
                                                  &to, &tl);
    EXPECT(st == CODA_ERR_NOT_SUPPORTED && strstr(coda_last_error(c), "cuDNN"),
           "cuDNN absent: status %d (%s)", (int)st, coda_last_error(c));
    printf("cuDNN not loaded, refusal checked: %s\n", coda_last_error(c));
    buf_free(&q);
    buf_free(&o);
    buf_free(&l);
    coda_context_destroy(c);
    return;
  }
  printf("cuDNN %zu: the head_dim 64 and 128 cases through CODA_ATTENTION=cudnn\n", ver);
  g_api = c;
  for (size_t i = 0; i < n; i++)
    if (cases[i].hd != 32) run_case(NULL, &cases[i], NULL, NULL);
  for (size_t i = 0; i < nmore; i++) run_case(NULL, &more[i], NULL, NULL);
  g_api = NULL;
  printf("  last choice: %s\n", coda_cudnn_attention_choice(c));
  /* head_dim 32: refused by name */
  const int64_t cols = 4 * 32, oc = 2 * 32;
  buf q = buf_new(64 * cols * 2), o = buf_new(64 * oc * 2), l = buf_new(64 * 2 * 4);
  coda_tensor tq = {q.d, CODA_BF16, 64, cols, cols}, to = {o.d, CODA_BF16, 64, oc, oc},
              tl = {l.d, CODA_F32, 64, 2, 2};
  const coda_status st = coda_attention_forward(c, &tq, 1, 64, 2, 1, 32, &to, &tl);
  EXPECT(st == CODA_ERR_NOT_SUPPORTED && strstr(coda_last_error(c), "head_dim 32"),
         "cuDNN head_dim 32: status %d (%s)", (int)st, coda_last_error(c));
  buf_free(&q);
  buf_free(&o);
  buf_free(&l);
  coda_context_destroy(c);
}

/* Every variant of a shape's head size (forward and backward walked
 * together, the last one repeating when one list is shorter). */
static void run_variants(coda_context ctx, const shape *s) {
  const int nf = num_runnable(0, s->hd);
  const int nb = num_runnable(1, s->hd);
  for (int v = 0; v < (nf > nb ? nf : nb); v++)
    run_case(ctx, s, runnable_name(0, s->hd, v < nf ? v : nf - 1),
             runnable_name(1, s->hd, v < nb ? v : nb - 1));
}

/* A context whose CODA_ATTENTION is `choice` (own, cudnn), or NULL. */
static coda_context attention_context(const char *choice) {
  setenv("CODA_ATTENTION", choice, 1);
  coda_context_options opts = coda_context_default_options();
  opts.backend = CODA_BACKEND_CUDA;
  coda_context c = NULL;
  const coda_status cs = coda_context_create(&opts, &c);
  unsetenv("CODA_ATTENTION");
  EXPECT(cs == CODA_OK, "cannot create a CUDA context with CODA_ATTENTION=%s", choice);
  return cs == CODA_OK ? c : NULL;
}

/* Sliding windows and score scales: every variant of each head size
 * against the reference; then the public mask calls on a context with
 * CODA_ATTENTION=own (the dispatcher's path); with cuDNN loaded, the scale
 * through CODA_ATTENTION=cudnn and a window's refusal by name. The block
 * sizes: 64 or 128 queries (mma, wg), 128 (ws); 32, 64 or 128 keys
 * (forward), 64 (dQ, dK/dV query tiles). */
static void mask_cases(coda_context ctx, int small) {
  const shape win[] = {
      {1, 200, 4, 2, 64, 8, 0, 1},      /* window 1: the diagonal alone */
      {2, 400, 4, 1, 128, 0, 0, 40},    /* under every block: whole blocks skipped, and
                                         * rows (a warpgroup's) whose first block is all masked */
      {1, 300, 2, 1, 64, 0, 0, 100},    /* not a multiple of any block */
      {2, 200, 4, 2, 32, 8, 0, 77},     /* head_dim 32 (mma only), ragged */
      {1, 130, 2, 1, 128, 8, 0, 130},   /* window = T: the causal mask */
      {1, 75, 4, 2, 32, 0, 0, 500},     /* window > T */
      {1, 190, 4, 2, 64, 0, 0.3, 0},    /* another scale, no window */
      {2, 260, 4, 2, 128, 8, 0.05, 70}, /* another scale and a window */
      {1, 600, 8, 2, 64, 0, 0.125, 200}, /* several 128-query tiles, each skipping blocks */
  };
  const size_t n = small ? 4 : sizeof win / sizeof win[0];
  for (size_t i = 0; i < n; i++) run_variants(ctx, &win[i]);
  coda_context c = attention_context("own");
  if (c) {
    g_api = c;
    g_api_name = "own";
    for (size_t i = 0; i < n; i++) run_case(NULL, &win[i], NULL, NULL);
    g_api = NULL;
    g_api_name = "cudnn";
    coda_context_destroy(c);
  }
  if (small || !(c = attention_context("cudnn"))) return;
  if (coda_cudnn_version(c)) {
    g_api = c;
    run_case(NULL, &win[6], NULL, NULL); /* the scale: a by-value tensor of the graph */
    g_api = NULL;
    const int64_t cols = 4 * 64, oc = 2 * 64;
    buf q = buf_new(64 * cols * 2), o = buf_new(64 * oc * 2), l = buf_new(64 * 2 * 4);
    coda_tensor tq = {q.d, CODA_BF16, 64, cols, cols}, to = {o.d, CODA_BF16, 64, oc, oc},
                tl = {l.d, CODA_F32, 64, 2, 2};
    const coda_attn_mask m = {sizeof m, 0.0, 16};
    const coda_status st = coda_attention_forward_mask(c, &tq, 1, 64, 2, 1, 64, &to, &tl, &m);
    EXPECT(st == CODA_ERR_NOT_SUPPORTED && strstr(coda_last_error(c), "window"),
           "cuDNN with a window: status %d (%s)", (int)st, coda_last_error(c));
    buf_free(&q);
    buf_free(&o);
    buf_free(&l);
  }
  coda_context_destroy(c);
}

/* Requests the kernels do not handle must fail with a message, not run. */
static void bad_inputs(coda_context ctx) {
  const int B = 1, T = 8, Hq = 2, Hkv = 1, hd = 64;
  const int64_t cols = (Hq + 2 * Hkv) * hd, oc = Hq * hd;
  void *q, *o, *l;
  CUDA_CHECK(cudaMalloc(&q, (size_t)T * cols * 4 + 64));
  CUDA_CHECK(cudaMalloc(&o, (size_t)T * oc * 4 + 64));
  CUDA_CHECK(cudaMalloc(&l, (size_t)T * Hq * 4 + 64));
  coda_tensor tq = {q, CODA_BF16, T, cols, cols}, to = {o, CODA_BF16, T, oc, oc},
              tl = {l, CODA_F32, T, Hq, Hq};
  coda_status st = coda_cuda_attention_forward(ctx, &tq, B, T, Hq, Hkv, 96, &to, &tl, NULL);
  EXPECT(st == CODA_ERR_NOT_SUPPORTED, "head_dim 96: status %d", (int)st);
  coda_tensor t32 = tq;
  t32.dtype = CODA_F32;
  st = coda_cuda_attention_forward(ctx, &t32, B, T, Hq, Hkv, hd, &to, &tl, NULL);
  EXPECT(st == CODA_ERR_NOT_SUPPORTED, "f32 qkv: status %d", (int)st);
  coda_tensor tmis = tq;
  tmis.data = (char *)q + 2;
  st = coda_cuda_attention_forward(ctx, &tmis, B, T, Hq, Hkv, hd, &to, &tl, NULL);
  EXPECT(st == CODA_ERR_LAYOUT, "misaligned qkv: status %d", (int)st);
  st = coda_cuda_attention_forward(ctx, &tq, B, T, 3, Hkv + 1, hd, &to, &tl, NULL);
  EXPECT(st != CODA_OK, "heads 3/2 accepted");
  coda_tensor tshort = to;
  tshort.rows = T - 1;
  st = coda_cuda_attention_forward(ctx, &tq, B, T, Hq, Hkv, hd, &tshort, &tl, NULL);
  EXPECT(st == CODA_ERR_SHAPE, "short out: status %d", (int)st);
  EXPECT(strlen(coda_last_error(ctx)) > 0, "no message for a failed call");
  st = coda_cuda_attention_forward_variant(ctx, &tq, B, T, Hq, Hkv, hd, &to, &tl, NULL,
                                           "no_such_variant");
  EXPECT(st == CODA_ERR_INVALID_ARGUMENT, "unknown variant: status %d", (int)st);
  /* on the sm80 path a variant of the wgmma or warp-specialized family is
   * refused by name, forward and backward, naming the path */
  for (int b = 0; g_sm80 && b < 2; b++) {
    const char *hopper = NULL;
    for (int v = 0; v < coda_cuda_attention_num_variants(b, hd) && !hopper; v++)
      if (strncmp(coda_cuda_attention_variant_name(b, hd, v), "mma_", 4))
        hopper = coda_cuda_attention_variant_name(b, hd, v);
    EXPECT(hopper != NULL, "hd%d: no variant but mma.sync ones", hd);
    if (!hopper) continue;
    st = b ? coda_cuda_attention_backward_variant(ctx, &tq, &to, &tl, &to, B, T, Hq, Hkv, hd, &tq,
                                                  NULL, NULL, hopper)
           : coda_cuda_attention_forward_variant(ctx, &tq, B, T, Hq, Hkv, hd, &to, &tl, NULL,
                                                 hopper);
    const char *e = coda_last_error(ctx);
    EXPECT(st == CODA_ERR_NOT_SUPPORTED && strstr(e, hopper) && strstr(e, "sm80 path") &&
               strstr(e, "CODA_ARCH"),
           "%s variant %s on the sm80 path: status %d (%s)", b ? "backward" : "forward", hopper,
           (int)st, e);
  }
  /* a negative window or scale: refused by name, on the kernels' entry and
   * on the public call */
  const coda_attn_mask bad[2] = {{sizeof bad[0], 0.0, -3}, {sizeof bad[0], -0.5, 0}};
  for (int i = 0; i < 2; i++) {
    st = coda_cuda_attention_forward(ctx, &tq, B, T, Hq, Hkv, hd, &to, &tl, &bad[i]);
    EXPECT(st == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), "window"),
           "bad mask %d: status %d (%s)", i, (int)st, coda_last_error(ctx));
    st = coda_attention_forward_mask(ctx, &tq, B, T, Hq, Hkv, hd, &to, &tl, &bad[i]);
    EXPECT(st == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), ">= 0"),
           "bad mask %d (public call): status %d (%s)", i, (int)st, coda_last_error(ctx));
  }
  cudaFree(q);
  cudaFree(o);
  cudaFree(l);
}

int main(int argc, char **argv) {
  if (!coda_cuda_available()) {
    printf("no sm_90 GPU: nothing tested\n");
    return 1;
  }
  /* line-buffered: a run stopped by a time budget still shows how far it got */
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
  const int sanitize = argc > 1 && strcmp(argv[1], "--sanitize") == 0;
  const int persistent = argc > 1 && strcmp(argv[1], "--persistent") == 0;
  const int mode_arg = small || sanitize || persistent;
  if (argc > 1 + mode_arg) g_rng ^= strtoull(argv[1 + mode_arg], NULL, 10) * 0x2545F4914F6CDD1Dull;
  if (sanitize || persistent) g_runs = 1;
  printf("seed state %llu\n", (unsigned long long)g_rng);
  coda_context_options opts = coda_context_default_options();
  opts.backend = CODA_BACKEND_CUDA;
  coda_context ctx = NULL;
  if (coda_context_create(&opts, &ctx) != CODA_OK) {
    printf("cannot create a CUDA context\n");
    return 1;
  }
  g_sm80 = coda_cuda_sm80(ctx);
  if (g_sm80) printf("the sm80 path: the mma.sync variants only\n");
  const shape cases[] = {
      {1, 64, 2, 2, 64, 0, 0, 0},    /* one full tile, plain multi-head */
      {2, 100, 4, 2, 64, 8, 0, 0},   /* ragged, group 2, padded rows */
      {2, 75, 8, 2, 32, 8, 0, 0},    /* head_dim 32: ragged, group 4, padded rows */
      {1, 1, 2, 1, 64, 0, 0, 0},     /* a single token */
      {1, 17, 4, 4, 128, 0, 0, 0},   /* shorter than a tile */
      {1, 130, 4, 1, 128, 8, 0, 0},  /* ragged, group 4, padded */
      {2, 192, 6, 2, 64, 0, 0, 0},   /* three full tiles, group 3 */
      {1, 257, 2, 1, 128, 0, 0, 0},  /* five tiles, one row into the fifth */
      {3, 128, 4, 2, 32, 0, 0, 0},   /* head_dim 32: the tiny training shape */
      {1, 300, 2, 2, 32, 0, 0, 0},   /* head_dim 32: ragged, plain multi-head */
  };
  /* More 128-query tiles than the GPU has SMs, so every persistent CTA of
   * the warp-specialized forward runs several tiles (its barrier phases and
   * its K/V ring carry over from one tile to the next); ragged in the last
   * tile of every sequence, batch 2 behind batch 1 in the TMA map. Run with
   * the last two forward and backward variants (the warp-specialized ones)
   * and the defaults only: the reference in double is the slow part. */
  const shape many_tiles[] = {
      {2, 520, 40, 8, 64, 8, 0, 0},
      {1, 600, 40, 8, 128, 0, 0, 0},
  };
  /* --sanitize: every variant of each head size on a minimal shape that
   * still has a ragged last tile, more than one tile, grouped heads and
   * padded rows (batch 2 for head_dim 32 and 64: the TMA maps cross a
   * sequence boundary), and a single token at head_dim 64 */
  const shape minimal[] = {
      {2, 75, 8, 2, 32, 8, 0, 0},
      {2, 100, 4, 2, 64, 8, 0, 0},
      {1, 1, 2, 1, 64, 0, 0, 0},
      {1, 130, 2, 1, 128, 8, 0, 0},
  };
  /* every kernel variant: v walks the forward and backward variants
   * together (the last one repeats when one list is shorter) */
  for (size_t i = 0; sanitize && i < sizeof minimal / sizeof minimal[0]; i++) {
    run_variants(ctx, &minimal[i]);
  }
  /* --small: cases 1-3 (ragged with padded rows, one token, shorter than
   * a tile), which still cover both head sizes */
  const size_t first = small ? 1 : 0,
               end = sanitize || persistent ? 0 : small ? 5 : sizeof cases / sizeof cases[0];
  for (size_t i = first; i < end; i++) {
    run_variants(ctx, &cases[i]);
    /* the defaults, and the first measured defaults and block order
     * (CODA_ATTN_IMPL=v1): the same kernels, so not under --small */
    if (small) continue;
    run_case(ctx, &cases[i], NULL, NULL);
    setenv("CODA_ATTN_IMPL", "v1", 1);
    run_case(ctx, &cases[i], NULL, NULL);
    unsetenv("CODA_ATTN_IMPL");
  }
  /* --persistent: the fewest tile pairs that still give every persistent
   * CTA more than one tile (272 single-tile heads: more than twice the
   * H200's 132 SMs, forward and backward), so that the slow racecheck
   * finishes; the shapes above stay in the full test */
  const shape few_tiles[] = {
      {1, 128, 272, 272, 64, 0, 0, 0},
      {1, 128, 272, 272, 128, 0, 0, 0},
  };
  const shape *many = persistent ? few_tiles : many_tiles;
  /* (the warp-specialized family is Hopper-only: not on the sm80 path) */
  for (size_t i = 0; !g_sm80 && (persistent || (!small && !sanitize)) && i < sizeof many_tiles / sizeof many_tiles[0]; i++) {
    /* the warp-specialized variants (persistent CTAs running several
     * tiles), named "ws_*": both forwards against both backwards */
    const int hd = many[i].hd;
    const int nf = coda_cuda_attention_num_variants(0, hd);
    const int nb = coda_cuda_attention_num_variants(1, hd);
    const char *wf[2] = {NULL, NULL}, *wb[2] = {NULL, NULL};
    for (int v = 0, k = 0; v < nf && k < 2; v++)
      if (!strncmp(coda_cuda_attention_variant_name(0, hd, v), "ws_", 3))
        wf[k++] = coda_cuda_attention_variant_name(0, hd, v);
    for (int v = 0, k = 0; v < nb && k < 2; v++)
      if (!strncmp(coda_cuda_attention_variant_name(1, hd, v), "ws_", 3))
        wb[k++] = coda_cuda_attention_variant_name(1, hd, v);
    EXPECT(wf[1] && wb[1], "hd%d: fewer than two warp-specialized variants", hd);
    for (int v = 0; v < 2 && wf[1] && wb[1]; v++) run_case(ctx, &many[i], wf[1 - v], wb[v]);
    if (!persistent) run_case(ctx, &many[i], NULL, NULL);
  }
  if (!sanitize && !persistent) mask_cases(ctx, small);
  bad_inputs(ctx);
  if (!sanitize && !persistent) cudnn_cases(cases, small ? 5 : sizeof cases / sizeof cases[0],
                                            many_tiles, small ? 0 : 2);
  coda_context_destroy(ctx);
  print_coverage();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
