/* GEMM autotuner: on the first automatic-choice call of a key on a context
 * with tuning on, every candidate (tile configuration x k-splits) is timed
 * with CUDA events and the fastest kept, per context and on disk.
 *
 * Measuring: one warm-up call, then kReps back-to-back calls with an event
 * between consecutive ones on the context's stream; the candidate's time is the
 * median interval. Non-accumulating
 * calls run on the caller's buffers (every candidate writes the same D, and
 * the real call follows); accumulating ones on a scratch copy of D, since
 * each run would add into D again. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/backend.h" /* coda_cuda_device_tag */
#include "backends/cuda/debug.h"
#include "backends/cuda/gemm_internal.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/workspace.h"

extern "C" {
#include "base/internal.h"
#include "base/tune_cache.h"
}

/* A forced (configuration, splits) call: never re-enters the tuner. */
static coda_status gemm_call(coda_context ctx, coda_transpose ta, const coda_tensor *A,
                             coda_transpose tb, const coda_tensor *B, const coda_tensor *D,
                             float alpha, int accumulate, int config, int splits) {
  return coda_cuda_gemm_config(ctx, ta, A, tb, B, D, alpha, accumulate, config, splits, 0);
}

namespace {

const int kReps = 5;
const int kMaxCandidates = 32;

struct TuneState {
  int enabled;
  int have_tags;  /* device tags and file path filled in */
  int disk_ok;    /* cleared after a failed write: no retry per key */
  coda_tune_cache cache;
};

TuneState *state(coda_context ctx, int create) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b) return NULL;
  if (!b->gemm_tune && create) {
    TuneState *s = (TuneState *)calloc(1, sizeof(TuneState));
    if (!s) return NULL;
    s->enabled = ctx->knobs.autotune;
    s->disk_ok = 1;
    coda_tune_cache_init(&s->cache, "?", "?", NULL);
    b->gemm_tune = s;
  }
  return (TuneState *)b->gemm_tune;
}

/* Tags of the running device and library, the file path, and the file's
 * entries (read once per context). */
coda_status ensure_cache(coda_context ctx, TuneState *s) {
  if (s->have_tags) return CODA_OK;
  char device[CODA_TUNE_TAG_LEN], lib[CODA_TUNE_TAG_LEN], path[CODA_TUNE_PATH_LEN];
  coda_status st = coda_cuda_device_tag(ctx, device, sizeof device);
  if (st != CODA_OK) return st;
  /* The tile-table size is part of the library tag: indices change with it. */
  snprintf(lib, sizeof lib, "%d.%d.%d+c%d", CODA_VERSION_MAJOR, CODA_VERSION_MINOR,
           CODA_VERSION_PATCH, coda_cuda_gemm_num_configs());
  if (!coda_tune_cache_default_path(&ctx->knobs, path, sizeof path)) path[0] = '\0';
  coda_tune_cache_free(&s->cache);
  coda_tune_cache_init(&s->cache, device, lib, path);
  (void)coda_tune_cache_load(&s->cache); /* corrupt lines are skipped */
  s->have_tags = 1;
  return CODA_OK;
}

/* Key of a call; 0 if the call is not one the tuner handles (bad arguments
 * are left for the GEMM itself to report, empty problems need no choice). */
int make_key(coda_transpose ta, const coda_tensor *A, coda_transpose tb, const coda_tensor *B,
             const coda_tensor *D, int accumulate, coda_tune_key *k) {
  if (!A || !B || !D || !A->data || !B->data || !D->data) return 0;
  if ((ta != CODA_N && ta != CODA_T) || (tb != CODA_N && tb != CODA_T)) return 0;
  memset(k, 0, sizeof *k);
  k->m = ta == CODA_N ? A->rows : A->cols;
  k->k = ta == CODA_N ? A->cols : A->rows;
  k->n = tb == CODA_N ? B->cols : B->rows;
  k->trans_a = ta == CODA_T;
  k->trans_b = tb == CODA_T;
  k->ab = A->dtype;
  k->d = D->dtype;
  k->accumulate = accumulate ? 1 : 0;
  const int64_t kb = tb == CODA_N ? B->rows : B->cols;
  if (kb != k->k || D->rows != k->m || D->cols != k->n || D->ld < D->cols) return 0;
  const int64_t lim = ((int64_t)1 << 31) - 256;
  return k->m > 0 && k->n > 0 && k->k > 0 && k->m < lim && k->n < lim && k->k < lim;
}

float median(float *t, int n) {
  for (int i = 1; i < n; ++i) /* insertion sort: n is tiny */
    for (int j = i; j > 0 && t[j] < t[j - 1]; --j) {
      const float x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  return t[n / 2];
}

/* Times every candidate for key on (A, B, Dt) and records the fastest. */
coda_status tune(coda_context ctx, TuneState *s, const coda_tune_key *key, coda_transpose ta,
                 const coda_tensor *A, coda_transpose tb, const coda_tensor *B,
                 const coda_tensor *Dt, float alpha) {
  int num_sms = 0;
  cudaError_t e = cudaSetDevice(ctx->opts.device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, ctx->opts.device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "GEMM autotuner: cannot query the device: %s",
                     cudaGetErrorString(e));
  }
  int cand[kMaxCandidates][2];
  const int nc = coda_cuda_gemm_candidates(key->m, key->n, key->k, num_sms, cand, kMaxCandidates);
  /* The calls and the events go to the context's stream: the times are
   * those of that stream's work. */
  cudaStream_t stream = coda_cuda_stream(ctx);
  cudaEvent_t ev[kReps + 1];
  int nev = 0;
  for (; nev <= kReps; ++nev)
    if ((e = cudaEventCreate(&ev[nev])) != cudaSuccess) break;
  coda_status result = CODA_OK, first_err = CODA_OK;
  char first_msg[CODA_ERRMSG_LEN] = "";
  int best = -1;
  float best_ms = 0;
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    result = coda_fail(ctx, CODA_ERR_BACKEND, "GEMM autotuner: cudaEventCreate failed: %s",
                       cudaGetErrorString(e));
  }
  for (int c = 0; result == CODA_OK && c < nc; ++c) {
    coda_status st = gemm_call(ctx, ta, A, tb, B, Dt, alpha, key->accumulate, cand[c][0], cand[c][1]);
    /* Back-to-back calls with an event between consecutive ones, as a
     * model runs them: host-side launch work overlaps the previous call. */
    float t[kReps];
    e = cudaSuccess;
    if (st == CODA_OK) e = cudaEventRecord(ev[0], stream);
    for (int r = 0; st == CODA_OK && e == cudaSuccess && r < kReps; ++r) {
      st = gemm_call(ctx, ta, A, tb, B, Dt, alpha, key->accumulate, cand[c][0], cand[c][1]);
      if (st == CODA_OK) e = cudaEventRecord(ev[r + 1], stream);
    }
    if (st == CODA_OK && e == cudaSuccess) e = cudaEventSynchronize(ev[kReps]);
    for (int r = 0; st == CODA_OK && e == cudaSuccess && r < kReps; ++r)
      e = cudaEventElapsedTime(&t[r], ev[r], ev[r + 1]);
    if (st == CODA_OK && e != cudaSuccess) {
      (void)cudaGetLastError();
      st = coda_fail(ctx, CODA_ERR_BACKEND, "GEMM autotuner: timing failed: %s",
                     cudaGetErrorString(e));
    }
    if (st != CODA_OK) { /* e.g. no memory for one split-K workspace: skip it */
      if (first_err == CODA_OK) {
        first_err = st;
        snprintf(first_msg, sizeof first_msg, "%s", coda_last_error(ctx));
      }
      continue;
    }
    const float ms = median(t, kReps);
    if (best < 0 || ms < best_ms) {
      best = c;
      best_ms = ms;
    }
  }
  for (int i = 0; i < nev; ++i) cudaEventDestroy(ev[i]);
  if (result != CODA_OK) return result;
  if (best < 0) /* every candidate failed: the arguments are bad; report the first reason */
    return coda_fail(ctx, first_err == CODA_OK ? CODA_ERR_INTERNAL : first_err, "%s",
                     first_msg[0] ? first_msg : "GEMM autotuner: no candidate configuration");
  if (first_err != CODA_OK) coda_clear_error(ctx); /* a skipped candidate is no failure */
  result = coda_tune_cache_put(&s->cache, key, cand[best][0], cand[best][1], best_ms * 1000.0);
  if (result != CODA_OK) return coda_fail(ctx, result, "GEMM autotuner: out of memory");
  /* A cache that cannot be written costs only re-tuning in the next
   * process: the call still succeeds, and no more writes are tried. */
  if (s->disk_ok && coda_tune_cache_save(NULL, &s->cache) != CODA_OK) s->disk_ok = 0;
  return CODA_OK;
}

}  // namespace

extern "C" coda_status coda_cuda_device_tag(coda_context ctx, char *buf, size_t n) {
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, ctx->opts.device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "autotuner: cudaGetDeviceProperties failed: %s",
                     cudaGetErrorString(e));
  }
  snprintf(buf, n, "%.80s/%dsm", prop.name, prop.multiProcessorCount);
  return CODA_OK;
}

extern "C" coda_status coda_cuda_gemm_set_autotune(coda_context ctx, int on) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  TuneState *s = state(ctx, 1);
  if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  s->enabled = on ? 1 : 0;
  return CODA_OK;
}

extern "C" int coda_cuda_gemm_autotune_enabled(coda_context ctx) {
  TuneState *s = state(ctx, 1);
  return s && s->enabled;
}

extern "C" coda_status coda_cuda_gemm_tuned(coda_context ctx, coda_transpose ta,
                                            const coda_tensor *A, coda_transpose tb,
                                            const coda_tensor *B, const coda_tensor *D,
                                            float alpha, int accumulate) {
  TuneState *s = state(ctx, 1);
  coda_tune_key key;
  /* Calls the tuner does not key (bad arguments, empty problems) run with
   * a forced configuration: the GEMM reports the error or does the trivial
   * work, no kernel is chosen. */
  if (!s || !make_key(ta, A, tb, B, D, accumulate, &key))
    return gemm_call(ctx, ta, A, tb, B, D, alpha, accumulate, 0, 0);
  coda_status st = ensure_cache(ctx, s);
  if (st != CODA_OK) return st;
  const coda_tune_entry *hit = coda_tune_cache_find(&s->cache, &key);
  if (!hit || hit->config >= coda_cuda_gemm_num_configs()) {
    /* Timing waits for events, which a stream being captured into a graph
     * cannot do (and the captured call would not run the chosen kernel
     * anyway): tune by running the work once before capturing it. */
    if (coda_cuda_capturing(ctx))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "GEMM autotuner: a new GEMM shape (%lld x %lld x %lld) while the stream "
                       "is captured; run the work once before capturing it",
                       (long long)key.m, (long long)key.n, (long long)key.k);
    if (!accumulate) {
      st = tune(ctx, s, &key, ta, A, tb, B, D, alpha);
    } else {
      /* Scratch copy of D's whole extent, at the same offset modulo 256
       * bytes so that the same store paths (alignment-dependent) are timed. */
      const size_t es = coda_dtype_size(D->dtype);
      const size_t extent = ((size_t)(D->rows - 1) * (size_t)D->ld + (size_t)D->cols) * es;
      const size_t off = (uintptr_t)D->data % 256;
      /* The scratch is the context's tuner workspace (kept for the next
       * key; cudaMalloc alignment keeps the offset modulo 256), the copy
       * on the context's stream, ahead of the timed calls. */
      void *w = NULL;
      unsigned char *scratch = NULL;
      st = coda_cuda_workspace(ctx, CODA_CUDA_WS_TUNE, extent + off, &w);
      cudaError_t e = cudaSuccess;
      if (st == CODA_OK) {
        scratch = (unsigned char *)w;
        e = cudaMemcpyAsync(scratch + off, D->data, extent, cudaMemcpyDeviceToDevice,
                            coda_cuda_stream(ctx));
      }
      if (st != CODA_OK || e != cudaSuccess) {
        (void)cudaGetLastError();
        coda_clear_error(ctx);
        /* No room to tune this key: the default choice, not recorded. */
        int num_sms = 0;
        if (cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, ctx->opts.device) !=
            cudaSuccess) {
          (void)cudaGetLastError();
          num_sms = 1;
        }
        return gemm_call(ctx, ta, A, tb, B, D, alpha, accumulate,
                         coda_cuda_gemm_default_config(key.m, key.n, key.k, num_sms), 0);
      }
      coda_tensor Ds = *D;
      Ds.data = scratch + off;
      st = tune(ctx, s, &key, ta, A, tb, B, &Ds, alpha);
    }
    if (st != CODA_OK) return st;
    hit = coda_tune_cache_find(&s->cache, &key);
    if (!hit) return coda_fail(ctx, CODA_ERR_INTERNAL, "GEMM autotuner: choice not recorded");
  }
  return gemm_call(ctx, ta, A, tb, B, D, alpha, accumulate, hit->config, hit->splits);
}

extern "C" int coda_cuda_gemm_tuned_choice(coda_context ctx, coda_transpose ta,
                                           const coda_tensor *A, coda_transpose tb,
                                           const coda_tensor *B, const coda_tensor *D,
                                           int accumulate, int *config, int *splits, double *us) {
  TuneState *s = state(ctx, 0);
  coda_tune_key key;
  if (!s || !s->have_tags || !make_key(ta, A, tb, B, D, accumulate, &key)) return 0;
  const coda_tune_entry *hit = coda_tune_cache_find(&s->cache, &key);
  if (!hit) return 0;
  if (config) *config = hit->config;
  if (splits) *splits = hit->splits;
  if (us) *us = hit->us;
  return 1;
}

extern "C" const char *coda_cuda_gemm_tune_path(coda_context ctx) {
  TuneState *s = state(ctx, 0);
  return s && s->have_tags ? s->cache.path : "";
}

extern "C" void coda_cuda_gemm_tune_release(coda_context ctx) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b || !b->gemm_tune) return;
  TuneState *s = (TuneState *)b->gemm_tune;
  coda_tune_cache_free(&s->cache);
  free(s);
  b->gemm_tune = NULL;
}
