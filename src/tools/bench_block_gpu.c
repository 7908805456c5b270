/* coda bench block on the GPU: the timing, the cuBLAS floor and the
 * memory described at the top of bench_block.c; built only with CUDA
 * (CMakeLists.txt). cuBLAS is loaded with dlopen when --floor needs it, so
 * the coda tool does not map it for every command. */
#include "bench_block.h"
#include "bench_block_common.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include <cublas_v2.h> /* the types and CUBLAS_VER_MAJOR; the calls go through cublas_api */
#include <cuda_runtime_api.h>
#include <dlfcn.h>

/* A failure of the benchmark itself (not of a library call): printed
 * here, since only the library sets a context's message. */
static coda_status bench_fail(coda_status s, const char *msg) {
  fprintf(stderr, "%s\n", msg);
  return s;
}

/* ---- inputs ---- */

typedef struct rng {
  uint64_t s;
} rng;

static float urand(rng *r) { /* uniform in [-1, 1) (splitmix64) */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 4503599627370496.0 - 1.0);
}

/* Writes offset + scale * U(-1, 1) into a plan buffer of any 16/32-bit
 * floating dtype (rounded to nearest even on the host). */
static coda_status fill(coda_context ctx, coda_plan p, const char *name, float scale, float offset,
                        rng *r) {
  coda_tensor t;
  coda_status s = coda_plan_tensor(p, name, &t);
  if (s != CODA_OK) return s;
  const size_t n = (size_t)(t.rows * t.cols), es = coda_dtype_size(t.dtype);
  unsigned char *h = malloc(n * es);
  if (!h) return bench_fail(CODA_ERR_OUT_OF_MEMORY, "bench: out of host memory");
  const coda_tensor ht = coda_tensor_2d(h, t.dtype, (int64_t)n, 1); /* rounds to nearest even */
  for (size_t i = 0; i < n; i++) coda_tensor_set(&ht, (int64_t)i, 0, offset + scale * urand(r));
  s = coda_memcpy_h2d(ctx, t.data, h, n * es);
  free(h);
  return s;
}

static coda_status fill_plan(coda_context ctx, coda_plan p, const bench_cfg *c, rng *r) {
  const float d = (float)c->d, f = (float)c->ffn;
  typedef struct { const char *name; float scale, offset; } init;
  const init llama[] = {{"x", 1, 0},           {"dx_out", 0.5f, 0},         {"wqkv", 1 / sqrtf(d), 0},
                        {"wo", 1 / sqrtf(d), 0}, {"wgu", 1 / sqrtf(d), 0}, {"wd", 1 / sqrtf(f), 0},
                        {"wn1", 0.1f, 1},      {"wn2", 0.1f, 1}};
  const init gpt2[] = {{"x", 1, 0},           {"dx_out", 0.5f, 0},       {"ln1_g", 0.1f, 1},
                       {"ln1_b", 0.1f, 0},    {"ln2_g", 0.1f, 1},        {"ln2_b", 0.1f, 0},
                       {"wqkv", 1 / sqrtf(d), 0}, {"bqkv", 0.1f, 0},    {"wo", 1 / sqrtf(d), 0},
                       {"bo", 0.1f, 0},       {"wfc", 1 / sqrtf(d), 0},  {"bfc", 0.1f, 0},
                       {"wproj", 1 / sqrtf(f), 0}, {"bproj", 0.1f, 0}};
  const init *v = c->kind == ARCH_GPT2 ? gpt2 : llama;
  const int n = c->kind == ARCH_GPT2 ? (int)(sizeof gpt2 / sizeof *gpt2)
                                     : (int)(sizeof llama / sizeof *llama);
  for (int i = 0; i < n; i++) {
    coda_status s = fill(ctx, p, v[i].name, v[i].scale, v[i].offset, r);
    if (s != CODA_OK) return s;
  }
  return CODA_OK;
}

/* ---- timing ---- */

typedef coda_status (*run_fn)(void *arg);

static int cmpf(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static double wall_ms(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Median of n values (sorts them). */
static float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmpf);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Median GPU time in ms of fn over o->iters runs (events around each run)
 * after o->warmup runs; pre (if not NULL) runs untimed before each of
 * them. With host_ms also the median time the host took to enqueue a run
 * (the call returns before the GPU finishes: when it is near the GPU time,
 * the run is host-bound). < 0 on a failure (the message is on the
 * context). */
static float time_it_host(run_fn fn, run_fn pre, void *arg, const bench_opts *o,
                          float *host_ms) {
  cudaEvent_t a, b;
  if (cudaEventCreate(&a) != cudaSuccess) return -1;
  if (cudaEventCreate(&b) != cudaSuccess) {
    cudaEventDestroy(a);
    return -1;
  }
  float *ms = malloc(2 * (size_t)o->iters * sizeof *ms), med = -1;
  float *hs = ms ? ms + o->iters : NULL;
  int ok = ms != NULL;
  for (int i = 0; ok && i < o->warmup; i++) ok = (!pre || pre(arg) == CODA_OK) && fn(arg) == CODA_OK;
  for (int i = 0; ok && i < o->iters; i++) {
    ok = !pre || pre(arg) == CODA_OK;
    ok = ok && cudaEventRecord(a, 0) == cudaSuccess;
    const double h0 = wall_ms();
    ok = ok && fn(arg) == CODA_OK;
    hs[i] = (float)(wall_ms() - h0);
    ok = ok && cudaEventRecord(b, 0) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
         cudaEventElapsedTime(&ms[i], a, b) == cudaSuccess;
  }
  if (ok) {
    med = median(ms, o->iters);
    if (host_ms) *host_ms = median(hs, o->iters);
  }
  free(ms);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return med;
}
static float time_it(run_fn fn, void *arg, const bench_opts *o) {
  return time_it_host(fn, NULL, arg, o, NULL);
}

typedef struct plan_arg {
  coda_context ctx;
  coda_plan p;
  int fw, bw;
} plan_arg;

static coda_status run_plan(void *v) {
  plan_arg *r = v;
  coda_status s = CODA_OK;
  if (r->fw) s = coda_plan_run(r->ctx, r->p, CODA_PHASE_FORWARD);
  if (s == CODA_OK && r->bw) s = coda_plan_run(r->ctx, r->p, CODA_PHASE_BACKWARD);
  return s;
}
static coda_status run_plan_forward(void *v) {
  plan_arg *r = v;
  return coda_plan_run(r->ctx, r->p, CODA_PHASE_FORWARD);
}

/* ---- the floor ---- */

/* The block's four linear layers, (out, in) = (N, K) of Y = X W^T. */
static void linears(const bench_cfg *c, int64_t nk[4][2]) {
  const int64_t hd = c->d / c->hq, D = c->d, F = c->ffn;
  if (c->kind == ARCH_GPT2) {
    const int64_t v[4][2] = {{3 * D, D}, {D, D}, {F, D}, {D, F}};
    memcpy(nk, v, sizeof v);
  } else {
    const int64_t v[4][2] = {{(c->hq + 2 * c->hkv) * hd, D}, {D, c->hq * hd}, {2 * F, D}, {D, F}};
    memcpy(nk, v, sizeof v);
  }
}

/* The three cuBLAS entry points the floor calls, from libcublas.so.<major>. */
typedef struct cublas_api {
  void *lib;
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void *, const void *, cudaDataType, int, const void *,
                            cudaDataType, int, const void *, void *, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t);
  cublasHandle_t h;
} cublas_api;

/* Loads cuBLAS and creates a handle; 0, or -1 with the reason printed. */
static int cublas_open(cublas_api *a, const char *cmd) {
  memset(a, 0, sizeof *a);
  char name[64];
  snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
  a->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!a->lib) {
    const char *e = dlerror();
    fprintf(stderr, "%s: --floor needs cuBLAS: cannot load %s: %s\n", cmd, name, e ? e : "not found");
    return -1;
  }
  *(void **)&a->create = dlsym(a->lib, "cublasCreate_v2");
  *(void **)&a->destroy = dlsym(a->lib, "cublasDestroy_v2");
  *(void **)&a->gemm_ex = dlsym(a->lib, "cublasGemmEx");
  if (!a->create || !a->destroy || !a->gemm_ex) {
    fprintf(stderr, "%s: --floor: %s lacks cublasCreate_v2, cublasDestroy_v2 or cublasGemmEx\n",
            cmd, name);
  } else if (a->create(&a->h) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "%s: cuBLAS (%s) did not start (needed for --floor)\n", cmd, name);
  } else {
    return 0;
  }
  dlclose(a->lib);
  a->lib = NULL;
  return -1;
}

static void cublas_close(cublas_api *a) {
  if (a->h) a->destroy(a->h);
  if (a->lib) dlclose(a->lib);
  memset(a, 0, sizeof *a);
}

typedef struct floor_arg {
  coda_context ctx;
  const cublas_api *h;
  const bench_cfg *c;
  void *A, *B, *C; /* scratch operands, large enough for every GEMM */
  void *qkv, *o, *lse, *dout, *dqkv;
  int fw, bw;
} floor_arg;

/* Row-major C (M x N) = op(A) op(B), op(A) M x K, op(B) K x N. */
static int rm_gemm(const cublas_api *h, int64_t M, int64_t N, int64_t K, int ta, int tb, const void *A,
                   const void *B, void *C) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  return h->gemm_ex(h->h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N,
                      (int)M, (int)K, &one, B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda,
                      &zero, C, CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
}

static coda_status run_floor(void *v) {
  floor_arg *f = v;
  const bench_cfg *c = f->c;
  coda_context ctx = f->ctx;
  const int64_t M = c->batch * c->seq, hd = c->d / c->hq, HQ = c->hq * hd,
                NQ = (c->hq + 2 * c->hkv) * hd;
  int64_t nk[4][2];
  linears(c, nk);
  coda_tensor qkv = coda_tensor_2d(f->qkv, CODA_BF16, M, NQ),
              o = coda_tensor_2d(f->o, CODA_BF16, M, HQ),
              lse = coda_tensor_2d(f->lse, CODA_F32, M, c->hq),
              dout = coda_tensor_2d(f->dout, CODA_BF16, M, HQ),
              dqkv = coda_tensor_2d(f->dqkv, CODA_BF16, M, NQ);
  int ok = 1;
  coda_status s = CODA_OK;
  if (f->fw) {
    for (int l = 0; l < 4 && ok && s == CODA_OK; l++) {
      ok = rm_gemm(f->h, M, nk[l][0], nk[l][1], 0, 1, f->A, f->B, f->C); /* Y = X W^T */
      if (l == 0 && ok)
        s = coda_attention_forward(ctx, &qkv, (int)c->batch, (int)c->seq, (int)c->hq, (int)c->hkv,
                                   (int)hd, &o, &lse);
    }
  }
  if (f->bw) {
    for (int l = 3; l >= 0 && ok && s == CODA_OK; l--) {
      if (l == 0)
        s = coda_attention_backward(ctx, &qkv, &o, &lse, &dout, (int)c->batch, (int)c->seq,
                                    (int)c->hq, (int)c->hkv, (int)hd, &dqkv);
      if (s != CODA_OK) break;
      ok = rm_gemm(f->h, M, nk[l][1], nk[l][0], 0, 0, f->A, f->B, f->C);      /* dX = dY W */
      ok = ok && rm_gemm(f->h, nk[l][0], nk[l][1], M, 1, 0, f->A, f->B, f->C); /* dW = dY^T X */
    }
  }
  if (s != CODA_OK) return s;
  return ok ? CODA_OK : bench_fail(CODA_ERR_BACKEND, "floor: cublasGemmEx failed");
}

/* ---- one configuration ---- */

enum { V_FUSED = 0, V_UNFUSED = 1, V_FLOOR = 2, V_TUNED = 3 };
typedef struct result {
  float t[4][3];      /* [variant][fwd, bwd, fwd+bwd] ms; < 0: not measured */
  double peak[4];     /* library peak bytes in one fwd+bwd per plan variant; < 0: not measured */
  int tuned_unfused;  /* GEMM steps the tuned plan runs unfused; < 0: not measured */
  double device_used; /* cudaMemGetInfo growth over the plan's life (bytes), < 0: none */
} result;

static size_t device_free(void) {
  size_t fr = 0, tot = 0;
  cudaDeviceSynchronize();
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return 0;
  return fr;
}

/* The fused plan's x_out and dx (as floats), kept to check the unfused
 * plan's against: a sanity check of fusion off on the GPU, where the unit
 * test (tests/test_plan_unfused.c) cannot run. */
typedef struct agree {
  float *v[2];
  size_t n[2];
} agree;
static const char *kAgreeNames[2] = {"x_out", "dx"};

static coda_status download(coda_context ctx, coda_plan p, const char *name, float **out,
                            size_t *n) {
  coda_tensor t;
  coda_status s = coda_plan_tensor(p, name, &t);
  if (s != CODA_OK) return s;
  *n = (size_t)(t.rows * t.cols);
  const size_t es = coda_dtype_size(t.dtype);
  unsigned char *h = malloc(*n * es);
  *out = malloc(*n * sizeof **out);
  if (!h || !*out) {
    free(h);
    free(*out);
    *out = NULL;
    return bench_fail(CODA_ERR_OUT_OF_MEMORY, "bench: out of host memory");
  }
  s = coda_memcpy_d2h(ctx, h, t.data, *n * es);
  const coda_tensor ht = coda_tensor_2d(h, t.dtype, (int64_t)*n, 1);
  for (size_t i = 0; s == CODA_OK && i < *n; i++) (*out)[i] = (float)coda_tensor_get(&ht, (int64_t)i, 0);
  free(h);
  return s;
}

/* fused: keep x_out and dx; unfused or tuned: compare with the kept ones,
 * print max|variant - fused| / max|fused| to stderr; 0 if they disagree by
 * more than 10 % (bf16 rounding of acc gives a few %). */
static int agree_step(coda_context ctx, coda_plan p, const bench_cfg *c, int variant, agree *a) {
  const int fused = variant == V_FUSED;
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    float *v = NULL;
    size_t n = 0;
    if (download(ctx, p, kAgreeNames[k], &v, &n) != CODA_OK) {
      fprintf(stderr, "%s: cannot read %s: %s\n", c->name, kAgreeNames[k], coda_last_error(ctx));
      return 0;
    }
    if (fused) {
      free(a->v[k]);
      a->v[k] = v;
      a->n[k] = n;
      continue;
    }
    if (a->v[k] && a->n[k] == n) {
      double diff = 0, mag = 0;
      for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)v[i] - (double)a->v[k][i]);
        diff = d > diff || isnan(d) ? d : diff;
        mag = fmax(mag, fabs((double)a->v[k][i]));
      }
      const double rel = mag > 0 ? diff / mag : (diff > 0 ? INFINITY : 0);
      const int good = rel <= 0.1;
      fprintf(stderr, "%s: %s vs fused %-5s max|diff| / max|fused| = %.3g%s\n", c->name,
              variant == V_TUNED ? "tuned" : "unfused", kAgreeNames[k], rel,
              good ? "" : "  (DISAGREE)");
      ok &= good;
    }
    free(v);
  }
  return ok;
}

typedef struct step_arg {
  coda_context ctx;
  coda_plan p;
  int k;
} step_arg;

static coda_status run_one_step(void *v) {
  step_arg *a = v;
  return coda_plan_run_step(a->ctx, a->p, a->k);
}

static const char *step_kind(const coda_plan_step_info *st) {
  switch (st->kind) {
  case CODA_PLAN_STEP_GEMM_EPILOGUE: return st->unfused ? "gemm+map" : "gemm+epi";
  case CODA_PLAN_STEP_MAP: return "map";
  case CODA_PLAN_STEP_FINISH: return "finish";
  case CODA_PLAN_STEP_GEMM: return "gemm";
  case CODA_PLAN_STEP_ATTENTION_FORWARD:
  case CODA_PLAN_STEP_ATTENTION_BACKWARD: return "attention";
  case CODA_PLAN_STEP_ZERO:
  case CODA_PLAN_STEP_COPY: return "copy";
  }
  return "?";
}

/* Every step alone, in plan order (the forward's steps after a forward
 * run, the backward's after a backward run): median ms each, to stderr,
 * with the sum per phase. Runs accumulating steps repeatedly, so the
 * plan's results are not used afterwards. */
static void profile_steps(coda_context ctx, const bench_cfg *c, coda_plan p, const char *variant,
                          const bench_opts *o) {
  for (int ph = 0; ph < 2; ph++) {
    double sum = 0;
    int n = 0;
    for (int k = 0; k < coda_plan_num_steps(p); k++) {
      coda_plan_step_info info;
      const coda_plan_step_info *st = &info;
      if (coda_plan_step(p, k, &info) != CODA_OK || (int)st->phase != ph) continue;
      step_arg a = {ctx, p, k};
      const float ms = time_it(run_one_step, &a, o);
      if (ms < 0) {
        fprintf(stderr, "%s: step %s: %s\n", c->name, st->label, coda_last_error(ctx));
        return;
      }
      sum += ms;
      n++;
      fprintf(stderr, "%s %s %s step %2d %-30s %-9s %8.3f ms\n", c->name, variant,
              ph ? "bwd" : "fwd", k, st->label, step_kind(st), ms);
    }
    fprintf(stderr, "%s %s %s: %d steps, sum of step times %.3f ms\n", c->name, variant,
            ph ? "bwd" : "fwd", n, sum);
  }
}

/* The tuned plan's choices, to stderr. */
static void print_choices(const bench_cfg *c, coda_plan p) {
  for (int k = 0; k < coda_plan_num_steps(p); k++) {
    coda_plan_step_info info;
    const coda_plan_step_info *st = &info;
    if (coda_plan_step(p, k, &info) != CODA_OK || st->kind != CODA_PLAN_STEP_GEMM_EPILOGUE) continue;
    fprintf(stderr,
            "%s: tuned %-26s %-22s pingpong %8.1f us  cooperative %8.1f us  unfused %8.1f us"
            "  -> %s%s\n",
            c->name, st->label, st->program, st->tuned_us[0], st->tuned_us[1],
            st->tuned_us[2],
            st->unfused ? "unfused"
                        : st->schedule == CODA_EPI_SCHEDULE_COOPERATIVE ? "cooperative" : "pingpong",
            st->tuned_cached ? " (from the tuning cache)" : "");
  }
}

static const char *const kVariant[4] = {"fused", "unfused", "floor", "tuned"};

/* Times one plan variant (V_FUSED, V_UNFUSED, V_TUNED) into t[3] and its
 * peak; 0 on failure. */
static int bench_plan(coda_context ctx, const bench_cfg *c, int variant, const bench_opts *o,
                      float t[3], double *peak, double *dev_used, int *n_unfused, agree *ag) {
  const size_t free0 = device_free();
  coda_plan p = NULL;
  rng r = {0x9e3779b97f4a7c15ull};
  coda_status s = bench_make_plan(ctx, c, o, &p);
  if (s == CODA_OK) s = coda_plan_set_fused(p, variant != V_UNFUSED);
  if (s == CODA_OK) s = fill_plan(ctx, p, c, &r);
  plan_arg a = {ctx, p, 1, 1};
  if (s == CODA_OK) s = run_plan(&a); /* loads the kernels, allocates every buffer */
  if (s == CODA_OK && variant == V_TUNED) {
    s = coda_plan_tune_fusion(ctx, p, 3, n_unfused);
    if (s == CODA_OK) print_choices(c, p);
    if (s == CODA_OK) s = run_plan(&a); /* the buffers as the tuned plan computes them */
  }
  if (s == CODA_OK) s = coda_synchronize(ctx);
  if (s == CODA_OK) {
    float host[3] = {0, 0, 0};
    a.bw = 0;
    t[0] = time_it_host(run_plan, NULL, &a, o, &host[0]);
    a.fw = 0, a.bw = 1;
    t[1] = time_it_host(run_plan, run_plan_forward, &a, o, &host[1]);
    a.fw = 1;
    t[2] = time_it_host(run_plan, NULL, &a, o, &host[2]);
    if (t[0] < 0 || t[1] < 0 || t[2] < 0) s = CODA_ERR_BACKEND;
    else
      fprintf(stderr, "%s %s: GPU fwd %.3f bwd %.3f fwd+bwd %.3f ms; host enqueue %.3f %.3f %.3f ms\n",
              c->name, kVariant[variant], t[0], t[1], t[2], host[0], host[1], host[2]);
  }
  coda_memory_info mi;
  if (s == CODA_OK) s = coda_synchronize(ctx);
  if (s == CODA_OK) s = coda_memory_reset_peak(ctx);
  if (s == CODA_OK) s = run_plan(&a);
  if (s == CODA_OK) s = coda_synchronize(ctx);
  if (s == CODA_OK) s = coda_memory_stats(ctx, &mi);
  if (s == CODA_OK) {
    *peak = (double)mi.peak_bytes;
    const size_t free1 = device_free();
    if (dev_used && free0 && free1 && free0 > free1) *dev_used = (double)(free0 - free1);
  }
  int ok = s == CODA_OK;
  if (!ok)
    fprintf(stderr, "%s (%s): %s\n", c->name, kVariant[variant], coda_last_error(ctx));
  else
    ok = agree_step(ctx, p, c, variant, ag);
  if (ok && o->steps) profile_steps(ctx, c, p, kVariant[variant], o);
  coda_plan_destroy(p);
  return ok;
}

static int bench_floor(coda_context ctx, const cublas_api *h, const bench_cfg *c, const bench_opts *o,
                       float t[3]) {
  const int64_t M = c->batch * c->seq, hd = c->d / c->hq, HQ = c->hq * hd,
                NQ = (c->hq + 2 * c->hkv) * hd;
  int64_t nk[4][2], big = 0;
  linears(c, nk);
  for (int l = 0; l < 4; l++) {
    const int64_t n = nk[l][0], k = nk[l][1];
    const int64_t sz[3] = {M * n, M * k, n * k};
    for (int i = 0; i < 3; i++) big = sz[i] > big ? sz[i] : big;
  }
  floor_arg fa;
  memset(&fa, 0, sizeof fa);
  fa.ctx = ctx;
  fa.h = h;
  fa.c = c;
  void **bufs[8] = {&fa.A, &fa.B, &fa.C, &fa.qkv, &fa.o, &fa.lse, &fa.dout, &fa.dqkv};
  const size_t bytes[8] = {(size_t)big * 2,      (size_t)big * 2,      (size_t)big * 2,
                           (size_t)(M * NQ) * 2, (size_t)(M * HQ) * 2, (size_t)(M * c->hq) * 4,
                           (size_t)(M * HQ) * 2, (size_t)(M * NQ) * 2};
  coda_status s = CODA_OK;
  for (int i = 0; i < 8 && s == CODA_OK; i++) s = coda_malloc(ctx, bytes[i], bufs[i]);
  if (s == CODA_OK) { /* attention on random q, k, v (zeros would make every score equal) */
    rng r = {0x2545f4914f6cdd1dull};
    const size_t n = (size_t)(M * NQ);
    uint16_t *hq = malloc(n * 2);
    if (!hq) s = bench_fail(CODA_ERR_OUT_OF_MEMORY, "bench: out of host memory");
    const coda_tensor hqt = coda_tensor_2d(hq, CODA_BF16, (int64_t)n, 1);
    for (size_t i = 0; hq && i < n; i++) coda_tensor_set(&hqt, (int64_t)i, 0, urand(&r));
    if (s == CODA_OK) s = coda_memcpy_h2d(ctx, fa.qkv, hq, n * 2);
    if (s == CODA_OK) s = coda_memcpy_h2d(ctx, fa.dout, hq, (size_t)(M * HQ) * 2);
    /* The GEMMs' operands random too: on zeros (fresh memory) the tensor
     * cores draw less power and keep a higher clock under the 700 W limit,
     * which made the floor's GEMMs read ~850 TFLOP/s. The random values
     * are copied in blocks of n (a repeat every n elements is no pattern
     * the GEMM's power can tell). */
    for (int b = 0; b < 2 && s == CODA_OK; b++) {
      unsigned char *dst = b ? fa.B : fa.A;
      for (size_t off = 0; off < (size_t)big && s == CODA_OK; off += n) {
        const size_t len = (size_t)big - off < n ? (size_t)big - off : n;
        s = coda_memcpy_h2d(ctx, dst + off * 2, hq, len * 2);
      }
    }
    free(hq);
  }
  if (s == CODA_OK) {
    fa.fw = fa.bw = 1;
    s = run_floor(&fa); /* the forward's o and lse for the backward */
  }
  if (s == CODA_OK) s = coda_synchronize(ctx);
  if (s == CODA_OK) {
    fa.bw = 0;
    t[0] = time_it(run_floor, &fa, o);
    fa.fw = 0, fa.bw = 1;
    t[1] = time_it(run_floor, &fa, o);
    fa.fw = 1;
    t[2] = time_it(run_floor, &fa, o);
    if (t[0] < 0 || t[1] < 0 || t[2] < 0) s = CODA_ERR_BACKEND;
  }
  if (s != CODA_OK) fprintf(stderr, "%s (floor): %s\n", c->name, coda_last_error(ctx));
  for (int i = 0; i < 8; i++) coda_free(ctx, *bufs[i]);
  return s == CODA_OK;
}

/* ---- output ---- */

static const char *kCols[] = {
    "config", "arch", "d", "ffn", "heads", "kv_heads", "head_dim", "batch", "seq",
    "fused_fwd_ms", "fused_bwd_ms", "fused_fwdbwd_ms",
    "unfused_fwd_ms", "unfused_bwd_ms", "unfused_fwdbwd_ms",
    "floor_fwd_ms", "floor_bwd_ms", "floor_fwdbwd_ms",
    "fused_over_floor", "unfused_over_fused",
    "fused_peak_mib", "unfused_peak_mib", "device_used_mib",
    "tuned_fwd_ms", "tuned_bwd_ms", "tuned_fwdbwd_ms", "tuned_over_floor", "tuned_unfused_steps",
    "tuned_peak_mib", "torch_name", "fold", "grad_bf16", "inplace", "rope_map"};

static void print_header(const bench_opts *o) {
  if (o->csv) {
    for (size_t i = 0; i < sizeof kCols / sizeof *kCols; i++) printf("%s%s", i ? "," : "", kCols[i]);
    printf("\n");
  } else {
    printf("| config | fwd ms | bwd ms | fwd+bwd ms | unfused fwd | unfused bwd | unfused fwd+bwd "
           "| floor fwd | floor bwd | floor fwd+bwd | fused / floor | unfused / fused "
           "| peak MiB | unfused peak MiB | device used MiB | tuned fwd | tuned bwd "
           "| tuned fwd+bwd | tuned / floor | tuned: unfused steps | tuned peak MiB |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  fflush(stdout);
}

static void cell(const bench_opts *o, double v, const char *fmt) {
  printf(o->csv ? "," : " | ");
  if (v < 0 || !isfinite(v)) printf(o->csv ? "" : "-");
  else printf(fmt, v);
}

static void print_row(const bench_opts *o, const bench_cfg *c, const result *r) {
  const int64_t hd = c->d / c->hq;
  if (o->csv)
    printf("%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld", c->name,
           c->kind == ARCH_GPT2 ? "gpt2" : "llama", (long long)c->d, (long long)c->ffn,
           (long long)c->hq, (long long)c->hkv, (long long)hd, (long long)c->batch,
           (long long)c->seq);
  else
    printf("| %s (%s d %lld, ffn %lld, %lld/%lld heads, %lldx%lld%s%s%s%s)", c->name,
           c->kind == ARCH_GPT2 ? "GPT-2" : "Llama", (long long)c->d, (long long)c->ffn,
           (long long)c->hq, (long long)c->hkv, (long long)c->batch, (long long)c->seq,
           o->fold ? ", folded" : "", o->grad_bf16 ? ", bf16 weight grads" : "",
           o->inplace && c->kind == ARCH_LLAMA ? ", in place" : "",
           o->rope_map && c->kind == ARCH_LLAMA ? ", RoPE map" : "");
  for (int v = 0; v < 3; v++)
    for (int k = 0; k < 3; k++) cell(o, r->t[v][k], "%.3f");
  cell(o, r->t[0][2] > 0 && r->t[2][2] > 0 ? r->t[0][2] / r->t[2][2] : -1, "%.2f");
  cell(o, r->t[0][2] > 0 && r->t[1][2] > 0 ? r->t[1][2] / r->t[0][2] : -1, "%.2f");
  const double mib = 1024.0 * 1024.0;
  cell(o, r->peak[0] >= 0 ? r->peak[0] / mib : -1, "%.0f");
  cell(o, r->peak[1] >= 0 ? r->peak[1] / mib : -1, "%.0f");
  cell(o, r->device_used >= 0 ? r->device_used / mib : -1, "%.0f");
  for (int k = 0; k < 3; k++) cell(o, r->t[V_TUNED][k], "%.3f");
  cell(o, r->t[V_TUNED][2] > 0 && r->t[2][2] > 0 ? r->t[V_TUNED][2] / r->t[2][2] : -1, "%.2f");
  cell(o, r->tuned_unfused, "%.0f");
  cell(o, r->peak[V_TUNED] >= 0 ? r->peak[V_TUNED] / mib : -1, "%.0f");
  if (o->csv)
    printf(",%s,%d,%d,%d,%d\n", c->torch, o->fold, o->grad_bf16, o->inplace && c->kind == ARCH_LLAMA,
           o->rope_map && c->kind == ARCH_LLAMA);
  else printf(" |\n");
  fflush(stdout);
}

/* ---- precompiling (no GPU) ---- */

static int precompile(const bench_opts *o, const char *cmd) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  int n = 0, bad = 0;
  for (int i = 0; i < NCFG; i++) {
    if (!o->want[i]) continue;
    const bench_cfg *c = &kConfigs[i];
    coda_plan p;
    if (bench_make_plan(ctx, c, o, &p) != CODA_OK) {
      fprintf(stderr, "%s: %s: %s\n", cmd, c->name, coda_last_error(ctx));
      bad++;
      continue;
    }
    for (int k = 0; k < coda_plan_num_steps(p); k++) {
      coda_plan_step_info info;
      const coda_plan_step_info *st = &info;
      if (coda_plan_step(p, k, &info) != CODA_OK) continue;
      for (int variant = 0; variant < 2; variant++) {
        /* variant 0: the fused GEMM kernels and the map steps; 1: the
         * programs of the GEMM steps as maps after a plain GEMM */
        const int want = st->kind == CODA_PLAN_STEP_GEMM_EPILOGUE
                             ? (variant ? o->unfused || o->tuned : o->fused || o->tuned)
                             : (variant == 0 && (o->fused || o->unfused || o->tuned));
        if (!want) continue;
        int cached = 0, skipped = 0;
        coda_status s = coda_plan_precompile_step(p, k, variant, &cached, &skipped);
        if (skipped) continue;
        if (s != CODA_OK) {
          fprintf(stderr, "%s: %s step %s%s: %s\n", cmd, c->name, st->label,
                  variant ? " (unfused)" : "", coda_last_error(ctx));
          bad++;
        } else {
          n++;
          printf("%-10s %-28s %-8s %s\n", c->name, st->label, variant ? "unfused" : "fused",
                 cached ? "cached" : "compiled");
        }
      }
    }
    coda_plan_destroy(p);
  }
  printf("precompiled %d kernels, %d failures\n", n, bad);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}

int coda_bench_block_main(int argc, char **argv) {
  const char *cmd = argv[0];
  bench_opts o;
  int r = bench_parse_args(argc, argv, &o);
  if (r <= 0) return r == 0 ? 0 : 2;
  if (o.precompile) return precompile(&o, cmd);
  if (!coda_cuda_available()) {
    fprintf(stderr,
            "%s: needs a CUDA GPU (sm_90a): no usable GPU or driver was found on this machine\n",
            cmd);
    return 2;
  }
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CUDA;
  coda_context ctx;
  coda_status s = coda_context_create(&co, &ctx);
  if (s != CODA_OK) {
    fprintf(stderr, "%s: cannot create a CUDA context: %s\n", cmd, coda_status_string(s));
    return 2;
  }
  cublas_api cb;
  memset(&cb, 0, sizeof cb);
  if (o.floor && cublas_open(&cb, cmd)) {
    coda_context_destroy(ctx);
    return 2;
  }
  print_header(&o);
  int failed = 0;
  for (int i = 0; i < NCFG; i++) {
    if (!o.want[i]) continue;
    const bench_cfg *c = &kConfigs[i];
    result res;
    for (int v = 0; v < 4; v++) {
      for (int k = 0; k < 3; k++) res.t[v][k] = -1;
      res.peak[v] = -1;
    }
    res.device_used = -1;
    res.tuned_unfused = -1;
    int ok = 1;
    agree ag = {{NULL, NULL}, {0, 0}};
    if (o.fused)
      ok &= bench_plan(ctx, c, V_FUSED, &o, res.t[0], &res.peak[0], &res.device_used, NULL, &ag);
    if (o.unfused)
      ok &= bench_plan(ctx, c, V_UNFUSED, &o, res.t[1], &res.peak[1],
                       o.fused ? NULL : &res.device_used, NULL, &ag);
    if (o.tuned)
      ok &= bench_plan(ctx, c, V_TUNED, &o, res.t[V_TUNED], &res.peak[V_TUNED], NULL,
                       &res.tuned_unfused, &ag);
    free(ag.v[0]);
    free(ag.v[1]);
    if (o.floor) ok &= bench_floor(ctx, &cb, c, &o, res.t[2]);
    if (!ok) failed = 1;
    print_row(&o, c, &res);
  }
  cublas_close(&cb);
  coda_context_destroy(ctx);
  return failed;
}

