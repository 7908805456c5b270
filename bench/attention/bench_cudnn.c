/* cuDNN's fused attention through coda (CODA_ATTENTION=cudnn, cudnn-nondet
 * and auto) beside coda's own kernels (own), through the public API:
 * causal GQA forward, backward and forward+backward at the training
 * shapes, CUDA events, 3 warm-up runs, median of 15. Each cuDNN result is
 * checked against the own kernels' on the same random data (max|diff| /
 * rms of out, lse and each of dq, dk, dv, and of the RoPE backward's
 * dqkv and zp), its backward run twice for bit-identity, outputs poisoned
 * before each checked run. Prints a markdown table and CUDNN|... lines for
 * sdpa_cudnn.py; writes JSON to the file given as the first argument.
 *   bench_cudnn [out.json] */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/attention_cudnn.h"
#include "base/internal.h"
#include "gpu/cuda_check.h"

#define OK(c, x)                                                                           \
  do {                                                                                     \
    coda_status s_ = (x);                                                                  \
    if (s_ != CODA_OK) {                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, coda_last_error(c));      \
      exit(2);                                                                             \
    }                                                                                      \
  } while (0)

typedef struct {
  const char *name;
  int B, T, Hq, Hkv, hd;
} shape;

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static float urand(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (float)((g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}
static uint16_t bf(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
static float unbf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static coda_context make_ctx(const char *impl) {
  setenv("CODA_ATTENTION", impl, 1);
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  coda_context c = NULL;
  if (coda_context_create(&o, &c) != CODA_OK) {
    fprintf(stderr, "no CUDA context\n");
    exit(2);
  }
  unsetenv("CODA_ATTENTION");
  return c;
}

typedef struct {
  coda_tensor qkv, out, lse, dout, dqkv, pos, freq, zp;
} views;

/* max|a - b| / rms(b) over bf16 [rows][cols] blocks with leading dim ld */
static double err_bf16(const uint16_t *a, const uint16_t *b, int64_t rows, int64_t ld, int64_t c0,
                       int64_t c1) {
  double mx = 0, ss = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = c0; c < c1; c++) {
      const double x = unbf(a[r * ld + c]), y = unbf(b[r * ld + c]);
      if (!(fabs(x - y) <= mx)) mx = fabs(x - y);
      ss += y * y;
    }
  return mx / (sqrt(ss / ((double)rows * (c1 - c0))) + 1e-30);
}
static double err_f32(const float *a, const float *b, int64_t n) {
  double mx = 0, ss = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!(fabs((double)a[i] - b[i]) <= mx)) mx = fabs((double)a[i] - b[i]);
    ss += (double)b[i] * b[i];
  }
  return mx / (sqrt(ss / (double)n) + 1e-30);
}

static int cmpf(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* median ms of what: 0 forward, 1 backward, 2 forward+backward */
static float time_it(coda_context c, const shape *s, const views *v, int what) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  float t[18];
  for (int r = 0; r < 18; r++) {
    CUDA_CHECK(cudaEventRecord(a, 0));
    if (what != 1)
      OK(c, coda_attention_forward(c, &v->qkv, s->B, s->T, s->Hq, s->Hkv, s->hd, &v->out, &v->lse));
    if (what != 0)
      OK(c, coda_attention_backward(c, &v->qkv, &v->out, &v->lse, &v->dout, s->B, s->T, s->Hq,
                                    s->Hkv, s->hd, &v->dqkv));
    CUDA_CHECK(cudaEventRecord(b, 0));
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaEventElapsedTime(&t[r], a, b));
  }
  qsort(t + 3, 15, sizeof(float), cmpf);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[3 + 7];
}

typedef struct {
  uint16_t *out, *dqkv, *dz;
  float *lse, *zp;
} result;

static void run_once(coda_context c, const shape *s, const views *v, result *r, size_t bo,
                     size_t bl, size_t bq, size_t bz) {
  CUDA_CHECK(cudaMemset(v->out.data, 0xFF, bo));
  CUDA_CHECK(cudaMemset(v->lse.data, 0xFF, bl));
  CUDA_CHECK(cudaMemset(v->dqkv.data, 0xFF, bq));
  OK(c, coda_attention_forward(c, &v->qkv, s->B, s->T, s->Hq, s->Hkv, s->hd, &v->out, &v->lse));
  OK(c, coda_attention_backward(c, &v->qkv, &v->out, &v->lse, &v->dout, s->B, s->T, s->Hq, s->Hkv,
                                s->hd, &v->dqkv));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(r->out, v->out.data, bo, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(r->lse, v->lse.data, bl, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(r->dqkv, v->dqkv.data, bq, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemset(v->dqkv.data, 0xFF, bq));
  CUDA_CHECK(cudaMemset(v->zp.data, 0xFF, bz));
  OK(c, coda_attention_backward_rope(c, &v->qkv, &v->out, &v->lse, &v->dout, s->B, s->T, s->Hq,
                                     s->Hkv, s->hd, &v->pos, &v->freq, &v->dqkv, &v->zp));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(r->dz, v->dqkv.data, bq, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(r->zp, v->zp.data, bz, cudaMemcpyDeviceToHost));
}

int main(int argc, char **argv) {
  const shape shapes[] = {
      {"1b 4x2048 32q/8kv hd64", 4, 2048, 32, 8, 64},
      {"4x8192 32q/8kv hd64", 4, 8192, 32, 8, 64},
      {"1x8192 32q/8kv hd128", 1, 8192, 32, 8, 128},
      {"2x4096 32q/8kv hd128", 2, 4096, 32, 8, 128},
  };
  const int ns = sizeof shapes / sizeof shapes[0];
  const char *impls[4] = {"own", "cudnn", "cudnn-nondet", "auto"};
  coda_context ctx[4];
  for (int i = 0; i < 4; i++) ctx[i] = make_ctx(impls[i]);
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t ver = coda_cudnn_version(ctx[1]);
  printf("GPU: %s; cuDNN %zu\n\n", prop.name, ver);
  FILE *js = argc > 1 ? fopen(argv[1], "w") : NULL;
  if (js) fprintf(js, "{\"gpu\": \"%s\", \"cudnn\": %zu, \"rows\": [\n", prop.name, ver);
  printf("| shape | impl | fwd ms | bwd ms | fwd+bwd ms | err out | lse | dq | dk | dv | rope dqkv "
         "| zp | bwd bit-identical | workspace MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int si = 0; si < ns; si++) {
    const shape *s = &shapes[si];
    const int64_t BT = (int64_t)s->B * s->T, NH = s->Hq + 2 * s->Hkv, cols = NH * s->hd,
                  oc = (int64_t)s->Hq * s->hd;
    const size_t bq = BT * cols * 2, bo = BT * oc * 2, bl = BT * s->Hq * 4, bz = BT * NH * 4;
    views v;
    void *d[8];
    const size_t sizes[8] = {bq, bo, bl, bo, bq, BT * 4, cols * 4, bz};
    for (int i = 0; i < 8; i++) CUDA_CHECK(cudaMalloc(&d[i], sizes[i]));
    v.qkv = (coda_tensor){d[0], CODA_BF16, BT, cols, cols};
    v.out = (coda_tensor){d[1], CODA_BF16, BT, oc, oc};
    v.lse = (coda_tensor){d[2], CODA_F32, BT, s->Hq, s->Hq};
    v.dout = (coda_tensor){d[3], CODA_BF16, BT, oc, oc};
    v.dqkv = (coda_tensor){d[4], CODA_BF16, BT, cols, cols};
    v.pos = (coda_tensor){d[5], CODA_I32, BT, 1, 1};
    v.freq = (coda_tensor){d[6], CODA_F32, 1, cols, cols};
    v.zp = (coda_tensor){d[7], CODA_F32, BT, NH, NH};
    uint16_t *h = malloc(bq > bo ? bq : bo);
    for (int64_t i = 0; i < BT * cols; i++)
      h[i] = bf((i % cols) < (s->Hq + s->Hkv) * s->hd ? 2.f * urand() : urand());
    CUDA_CHECK(cudaMemcpy(d[0], h, bq, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < BT * oc; i++) h[i] = bf(urand());
    CUDA_CHECK(cudaMemcpy(d[3], h, bo, cudaMemcpyHostToDevice));
    int32_t *hp = malloc(BT * 4);
    for (int64_t m = 0; m < BT; m++) hp[m] = (int32_t)(m % s->T);
    CUDA_CHECK(cudaMemcpy(d[5], hp, BT * 4, cudaMemcpyHostToDevice));
    float *hf = malloc(cols * 4);
    for (int64_t c = 0; c < cols; c += 2) {
      const int j = (int)((c % s->hd) / 2);
      const double f = c < (int64_t)(s->Hq + s->Hkv) * s->hd
                           ? pow(500000.0, -2.0 * j / s->hd) / (2 * 3.141592653589793) : 0.0;
      hf[c] = (float)f;
      hf[c + 1] = (float)(f - (double)hf[c]);
    }
    CUDA_CHECK(cudaMemcpy(d[6], hf, cols * 4, cudaMemcpyHostToDevice));
    result r[4], r2;
    for (int i = 0; i < 5; i++) {
      result *x = i < 4 ? &r[i] : &r2;
      x->out = malloc(bo);
      x->dqkv = malloc(bq);
      x->dz = malloc(bq);
      x->lse = malloc(bl);
      x->zp = malloc(bz);
    }
    for (int ii = 0; ii < 4; ii++) {
      coda_context c = ctx[ii];
      if (ii > 0 && ii < 3) {
        /* a refused plan is reported and the row skipped */
        const coda_attn_job job = {&v.qkv, &v.out, &v.lse, &v.dout, &v.dqkv, s->B, s->T, s->Hq,
                                   s->Hkv, s->hd, NULL};
        if (coda_cudnn_attention_prepare(c, &job, 0) != CODA_OK ||
            coda_cudnn_attention_prepare(c, &job, 1) != CODA_OK) {
          printf("| %s | %s | refused: %s |\n", s->name, impls[ii], coda_last_error(c));
          continue;
        }
      }
      size_t free0 = 0, free1 = 0, tot = 0;
      cudaMemGetInfo(&free0, &tot);
      run_once(c, s, &v, &r[ii], bo, bl, bq, bz);
      cudaMemGetInfo(&free1, &tot);
      run_once(c, s, &v, &r2, bo, bl, bq, bz);
      const int ident = !memcmp(r2.dqkv, r[ii].dqkv, bq) && !memcmp(r2.dz, r[ii].dz, bq) &&
                        !memcmp(r2.zp, r[ii].zp, bz) && !memcmp(r2.out, r[ii].out, bo);
      const float tf = time_it(c, s, &v, 0), tb = time_it(c, s, &v, 1), tfb = time_it(c, s, &v, 2);
      double e[8] = {0};
      if (ii > 0) {
        const int64_t c0 = 0, c1 = (int64_t)s->Hq * s->hd, c2 = (int64_t)(s->Hq + s->Hkv) * s->hd;
        e[0] = err_bf16(r[ii].out, r[0].out, BT, oc, 0, oc);
        e[1] = err_f32(r[ii].lse, r[0].lse, BT * s->Hq);
        e[2] = err_bf16(r[ii].dqkv, r[0].dqkv, BT, cols, c0, c1);
        e[3] = err_bf16(r[ii].dqkv, r[0].dqkv, BT, cols, c1, c2);
        e[4] = err_bf16(r[ii].dqkv, r[0].dqkv, BT, cols, c2, cols);
        e[5] = err_bf16(r[ii].dz, r[0].dz, BT, cols, 0, cols);
        e[6] = err_f32(r[ii].zp, r[0].zp, BT * NH);
      }
      const double ws = ((double)free0 - (double)free1) / 1048576.0;
      printf("| %s | %s | %.3f | %.3f | %.3f | %.1e | %.1e | %.1e | %.1e | %.1e | %.1e | %.1e | %s "
             "| %.0f |\n",
             s->name, impls[ii], tf, tb, tfb, e[0], e[1], e[2], e[3], e[4], e[5], e[6],
             ident ? "yes" : "NO", ws);
      printf("CUDNN|%s|%d|%d|%d|%d|%d|%s|%.4f|%.4f|%.4f\n", s->name, s->B, s->T, s->Hq, s->Hkv,
             s->hd, impls[ii], tf, tb, tfb);
      fprintf(stderr, "  %s %s: %s\n", s->name, impls[ii], coda_cudnn_attention_choice(c));
      if (js)
        fprintf(js,
                "%s  {\"shape\": \"%s\", \"B\": %d, \"T\": %d, \"Hq\": %d, \"Hkv\": %d, \"hd\": %d, "
                "\"impl\": \"%s\", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f, "
                "\"err_vs_own\": {\"out\": %.3e, \"lse\": %.3e, \"dq\": %.3e, \"dk\": %.3e, "
                "\"dv\": %.3e, \"rope_dqkv\": %.3e, \"zp\": %.3e}, \"bwd_bit_identical\": %s, "
                "\"first_call_mem_mib\": %.0f}",
                si || ii ? ",\n" : "", s->name, s->B, s->T, s->Hq, s->Hkv, s->hd, impls[ii], tf, tb,
                tfb, e[0], e[1], e[2], e[3], e[4], e[5], e[6], ident ? "true" : "false", ws);
    }
    for (int i = 0; i < 5; i++) {
      result *x = i < 4 ? &r[i] : &r2;
      free(x->out), free(x->dqkv), free(x->dz), free(x->lse), free(x->zp);
    }
    for (int i = 0; i < 8; i++) cudaFree(d[i]);
    free(h), free(hp), free(hf);
    fflush(stdout);
  }
  if (js) {
    fprintf(js, "\n]}\n");
    fclose(js);
  }
  for (int i = 0; i < 4; i++) coda_context_destroy(ctx[i]);
  return 0;
}
