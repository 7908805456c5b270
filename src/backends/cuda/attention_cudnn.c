/* Causal GQA attention through cuDNN's fused attention (its backend graph
 * API, C only). cuDNN is loaded at run time (dlopen: libcudnn.so.9, else
 * libcudnn_graph.so.9, or the file CODA_CUDNN_LIB names), so the library
 * builds and runs without it; the entry points are typed from
 * cudnn_graph.h, which the build needs (CMake defines
 * CODA_HAVE_CUDNN_HEADERS when it finds it; otherwise every call says
 * so). The graphs are the composite ones cuDNN's fused flash-attention
 * engines recognise (matmul, pointwise and reduction operations; the
 * single SDPA operations of newer releases take no causal mask before
 * cuDNN 9.21):
 *   forward  S = (Q K^T) * scale, causal select, softmax with
 *            Stats = max + log(sum exp) (the natural log-sum-exp of the
 *            scaled scores: coda's lse), O = P V;
 *   backward softmax_sum = rowsum(dO * O), P = exp(S*scale - Stats) under
 *            the mask, dV = P^T dO, dS = P (dO V^T - softmax_sum) * scale,
 *            dK = dS^T Q, dQ = dS K (grouped heads: dK, dV reduced over the
 *            query heads of a group).
 * Q, K, V, O, dO and the gradients are strided views of the packed
 * tensors (no copies); lse is a strided [B, Hq, T, 1] view of the
 * [B*T][Hq] matrix when the engine takes it, else it goes through a
 * contiguous buffer and a copy kernel. The backward's dQ comes from the
 * deterministic algorithm (a dP buffer in the workspace instead of atomic
 * fp32 accumulation) unless CODA_ATTENTION=cudnn-nondet. Plans are cached
 * per shape and strides on the context and destroyed with it. This file
 * loads cuDNN, keeps the plan cache and runs the plans; the graphs are
 * built in attention_cudnn_graph.c. */
#define _GNU_SOURCE
#include "backends/cuda/attention_cudnn.h"
#include "backends/cuda/backend.h" /* coda_cuda_ctx */
#include "backends/cuda/stream.h"
#include "backends/cuda/workspace.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

/* The per-context state: the choice line exists without cuDNN too. */
typedef struct cudnn_plan cudnn_plan;
typedef struct coda_cudnn_state {
  char choice[320];
#ifdef CODA_HAVE_CUDNN_HEADERS
  int load_tried;
  char load_err[400];
  void *lib;
  size_t version;
  void *handle; /* cudnnHandle_t */
  cudnn_plan **plans;
  int nplans, cap;
  struct cudnn_fns *fn;
#endif
} coda_cudnn_state;

static coda_cudnn_state *state(coda_context ctx) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b) return NULL;
  if (!b->cudnn) b->cudnn = calloc(1, sizeof(coda_cudnn_state));
  return b->cudnn;
}

/* The state if it was made (NULL otherwise, or not a CUDA context). */
static coda_cudnn_state *state_held(coda_context ctx) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  return b ? b->cudnn : NULL;
}

/* Forgets the state (after it was freed). */
static void state_drop(coda_context ctx) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (b) b->cudnn = NULL;
}

void coda_cudnn_attention_note(coda_context ctx, const char *fmt, ...) {
  coda_cudnn_state *s = state(ctx);
  if (!s) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->choice, sizeof s->choice, fmt, ap);
  va_end(ap);
}

const char *coda_cudnn_attention_choice(coda_context ctx) {
  const coda_cudnn_state *s = state_held(ctx);
  return s ? s->choice : "";
}

#ifndef CODA_HAVE_CUDNN_HEADERS

coda_status coda_cudnn_attention_prepare(coda_context ctx, const coda_attn_job *job, int backward) {
  (void)job;
  (void)backward;
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                   "cuDNN attention: coda was not built with cuDNN headers (cudnn_graph.h)");
}
coda_status coda_cudnn_attention_forward(coda_context ctx, const coda_attn_job *job) {
  return coda_cudnn_attention_prepare(ctx, job, 0);
}
coda_status coda_cudnn_attention_backward(coda_context ctx, const coda_attn_job *job) {
  return coda_cudnn_attention_prepare(ctx, job, 1);
}
size_t coda_cudnn_version(coda_context ctx) {
  (void)ctx;
  return 0;
}
void coda_cudnn_release(coda_context ctx) {
  free(state_held(ctx));
  state_drop(ctx);
}

#else /* CODA_HAVE_CUDNN_HEADERS */

#include "backends/cuda/attention_cudnn_graph.h"
/* ------------------------------------------------------------ loading */

static int load(coda_context ctx, coda_cudnn_state *s) {
  if (s->load_tried) return s->lib != NULL;
  s->load_tried = 1;
  const char *names[3] = {ctx->knobs.cudnn_lib[0] ? ctx->knobs.cudnn_lib : NULL,
                          "libcudnn.so.9", "libcudnn_graph.so.9"};
  char tried[300] = "";
  for (int i = 0; i < 3 && !s->lib; i++) {
    if (!names[i]) continue;
    s->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!s->lib) {
      const char *e = dlerror();
      snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", tried[0] ? "; " : "",
               e ? e : names[i]);
    }
    if (i == 0 && !s->lib) break; /* a named file that does not load is an error */
  }
  if (!s->lib) {
    snprintf(s->load_err, sizeof s->load_err,
             "cannot load cuDNN (%s); set CODA_CUDNN_LIB to libcudnn.so.9 (e.g. the lib/ of the "
             "nvidia-cudnn Python package) or add its folder to LD_LIBRARY_PATH",
             tried);
    return 0;
  }
  cudnn_fns *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(s->load_err, sizeof s->load_err, "out of memory");
    return 0;
  }
  s->fn = f;
#define SYM(field, name)                                                                   \
  do {                                                                                     \
    *(void **)&f->field = dlsym(s->lib, name);                                             \
    if (!f->field) {                                                                       \
      snprintf(s->load_err, sizeof s->load_err, "the cuDNN library lacks %s", name);       \
      goto fail;                                                                           \
    }                                                                                      \
  } while (0)
  SYM(get_version, "cudnnGetVersion");
  SYM(error_string, "cudnnGetErrorString");
  SYM(create, "cudnnCreate");
  SYM(destroy, "cudnnDestroy");
  SYM(set_stream, "cudnnSetStream");
  SYM(desc_create, "cudnnBackendCreateDescriptor");
  SYM(desc_destroy, "cudnnBackendDestroyDescriptor");
  SYM(set_attr, "cudnnBackendSetAttribute");
  SYM(get_attr, "cudnnBackendGetAttribute");
  SYM(finalize, "cudnnBackendFinalize");
  SYM(execute, "cudnnBackendExecute");
#undef SYM
  *(void **)&f->last_error = dlsym(s->lib, "cudnnGetLastErrorString");
  s->version = f->get_version();
  /* the enum values and attribute layouts used here are cuDNN 9's ABI;
   * the composite causal graphs with grouped heads need 9.0 or later */
  if (s->version < 90000 || s->version >= 100000) {
    snprintf(s->load_err, sizeof s->load_err,
             "cuDNN %zu.%zu.%zu is loaded; coda's cuDNN attention needs a 9.x release",
             s->version / 10000, s->version / 100 % 100, s->version % 100);
    goto fail;
  }
  cudnnHandle_t h = NULL;
  cudnnStatus_t st = f->create(&h);
  if (st != CUDNN_STATUS_SUCCESS) {
    snprintf(s->load_err, sizeof s->load_err, "cudnnCreate failed: %s", f->error_string(st));
    goto fail;
  }
  s->handle = h;
  return 1;
fail:
  dlclose(s->lib);
  s->lib = NULL;
  free(s->fn);
  s->fn = NULL;
  return 0;
}

size_t coda_cudnn_version(coda_context ctx) {
  coda_cudnn_state *s = state(ctx);
  if (!s || cudaSetDevice(ctx->opts.device) != cudaSuccess) return 0;
  return load(ctx, s) ? s->version : 0;
}

static void key_of(coda_context ctx, const coda_attn_job *j, int backward, plan_key *k) {
  memset(k, 0, sizeof *k);
  k->backward = backward;
  k->nondet = backward && ctx->knobs.attention == CODA_ATTENTION_CUDNN_NONDET;
  k->B = j->B, k->T = j->T, k->Hq = j->Hq, k->Hkv = j->Hkv, k->hd = j->hd;
  k->ld_qkv = j->qkv->ld;
  k->ld_out = j->out->ld;
  k->ld_lse = j->lse->ld;
  if (backward) {
    k->ld_dout = j->dout->ld;
    k->ld_dqkv = j->dqkv->ld;
  }
}

/* What the engines need beyond the api layer's checks. */
static coda_status check_job(coda_context ctx, const coda_attn_job *j, int backward) {
  const coda_tensor *t[4] = {j->qkv, j->out, backward ? j->dout : NULL, backward ? j->dqkv : NULL};
  const char *names[4] = {"qkv", "out", "dout", "dqkv"};
  if (j->hd != 64 && j->hd != 128)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "cuDNN attention: head_dim %d (coda runs cuDNN at 64 and 128)", j->hd);
  /* the graph has the causal mask only; a window of seq or more is that */
  if (j->window > 0 && j->window < j->T)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "cuDNN attention: a sliding window (window %d, seq %d) is not in coda's "
                     "cuDNN graph; CODA_ATTENTION=own or auto runs it", j->window, j->T);
  for (int i = 0; i < 4; i++) {
    if (!t[i]) continue;
    if (t[i]->dtype != CODA_BF16)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "cuDNN attention: %s is %s; it takes bf16",
                       names[i], coda_dtype_name(t[i]->dtype));
    if (((uintptr_t)t[i]->data & 15) || (t[i]->ld & 7))
      return coda_fail(ctx, CODA_ERR_LAYOUT,
                       "cuDNN attention: %s needs a 16-byte aligned base and rows of a multiple "
                       "of 8 elements (ld %lld)",
                       names[i], (long long)t[i]->ld);
  }
  if (j->lse->dtype != CODA_F32 || ((uintptr_t)j->lse->data & 3))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "cuDNN attention: lse must be 4-byte aligned f32");
  return CODA_OK;
}

static coda_status get_plan(coda_context ctx, const coda_attn_job *j, int backward,
                            cudnn_plan **out) {
  coda_cudnn_state *s = state(ctx);
  if (!s) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_status st = check_job(ctx, j, backward);
  if (st) return st;
  const cudaError_t ce = cudaSetDevice(ctx->opts.device);
  if (ce != cudaSuccess)
    return coda_fail(ctx, CODA_ERR_BACKEND, "cuDNN attention: cudaSetDevice: %s",
                     cudaGetErrorString(ce));
  if (!load(ctx, s)) return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "cuDNN attention: %s", s->load_err);
  plan_key k;
  key_of(ctx, j, backward, &k);
  cudnn_plan *p = NULL;
  for (int i = 0; i < s->nplans; i++)
    if (!memcmp(&s->plans[i]->key, &k, sizeof k)) p = s->plans[i];
  if (!p) {
    if (s->nplans == s->cap) {
      const int cap = s->cap ? 2 * s->cap : 8;
      cudnn_plan **np = realloc(s->plans, sizeof *np * cap);
      if (!np) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      s->plans = np;
      s->cap = cap;
    }
    p = coda_cudnn_plan_build(s->fn, (cudnnHandle_t)s->handle, s->version, &k);
    if (!p) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    s->plans[s->nplans++] = p;
  }
  if (!p->ok)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "cuDNN %zu.%zu.%zu attention %s, batch %d seq %d heads %d/%d head_dim %d: %s",
                     s->version / 10000, s->version / 100 % 100, s->version % 100,
                     backward ? "backward" : "forward", j->B, j->T, j->Hq, j->Hkv, j->hd, p->why);
  *out = p;
  return CODA_OK;
}

coda_status coda_cudnn_attention_prepare(coda_context ctx, const coda_attn_job *job, int backward) {
  cudnn_plan *p;
  return get_plan(ctx, job, backward, &p);
}

/* ------------------------------------------------------------ running */

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static coda_status execute(coda_context ctx, coda_cudnn_state *s, cudnn_plan *p,
                           const int64_t *uids, void **ptrs, int n, void *ws) {
  const cudnn_fns *f = s->fn;
  cudnnStatus_t st = f->set_stream((cudnnHandle_t)s->handle, coda_cuda_stream(ctx));
  desc_t vp = NULL;
  if (st == CUDNN_STATUS_SUCCESS) st = f->desc_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = f->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = f->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = f->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = f->finalize(vp);
  if (st == CUDNN_STATUS_SUCCESS) st = f->execute((cudnnHandle_t)s->handle, p->plan, vp);
  if (vp) f->desc_destroy(vp);
  if (st != CUDNN_STATUS_SUCCESS) {
    char detail[256] = "";
    if (f->last_error) f->last_error(detail, sizeof detail);
    return coda_fail(ctx, CODA_ERR_BACKEND, "cuDNN attention: execute failed: %s%s%s",
                     f->error_string(st), detail[0] ? ": " : "", detail);
  }
  return CODA_OK;
}

coda_status coda_cudnn_attention_forward(coda_context ctx, const coda_attn_job *j) {
  cudnn_plan *p;
  coda_status st = get_plan(ctx, j, 0, &p);
  if (st) return st;
  coda_cudnn_state *s = state_held(ctx);
  const size_t nstats = (size_t)j->B * j->Hq * j->T;
  const size_t extra = p->stats_tmp ? align256(nstats * sizeof(float)) : 0;
  void *ws = NULL;
  if ((st = coda_cuda_workspace(ctx, CODA_CUDA_WS_CUDNN, extra + (size_t)p->plan_ws + 256, &ws)))
    return st;
  char *base = ws;
  float *stats = p->stats_tmp ? (float *)base : (float *)j->lse->data;
  const size_t hd = (size_t)j->hd;
  char *q = j->qkv->data;
  /* the scale is a by-value tensor of the graph: the job's, else the plan's
   * 1/sqrt(head_dim) */
  float scale = j->scale > 0.0 ? (float)j->scale : p->scale;
  void *ptrs[7] = {q, q + (size_t)j->Hq * hd * 2, q + (size_t)(j->Hq + j->Hkv) * hd * 2,
                   j->out->data, stats, &scale, &p->neg_inf};
  const int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEGINF};
  if ((st = execute(ctx, s, p, uids, ptrs, 7, base + extra))) return st;
  if (p->stats_tmp)
    st = coda_cudnn_lse_copy(ctx, j->lse->data, j->lse->ld, stats, j->B, j->T, j->Hq, 0);
  return st;
}

coda_status coda_cudnn_attention_backward(coda_context ctx, const coda_attn_job *j) {
  cudnn_plan *p;
  coda_status st = get_plan(ctx, j, 1, &p);
  if (st) return st;
  coda_cudnn_state *s = state_held(ctx);
  const size_t nrow = (size_t)j->B * j->Hq * j->T, hd = (size_t)j->hd;
  const size_t sz_sum = align256(nrow * sizeof(float));
  const size_t sz_stats = p->stats_tmp ? align256(nrow * sizeof(float)) : 0;
  const size_t sz_acc = p->key.nondet ? align256(nrow * hd * sizeof(float)) : 0;
  void *ws = NULL;
  if ((st = coda_cuda_workspace(ctx, CODA_CUDA_WS_CUDNN,
                                sz_sum + sz_stats + sz_acc + (size_t)p->plan_ws + 256, &ws)))
    return st;
  char *base = ws;
  float *ssum = (float *)base, *stats = p->stats_tmp ? (float *)(base + sz_sum) : j->lse->data;
  float *acc = (float *)(base + sz_sum + sz_stats);
  if (p->stats_tmp &&
      (st = coda_cudnn_lse_copy(ctx, j->lse->data, j->lse->ld, stats, j->B, j->T, j->Hq, 1)))
    return st;
  if (p->key.nondet) {
    const cudaError_t e =
        cudaMemsetAsync(acc, 0, nrow * hd * sizeof(float), coda_cuda_stream(ctx));
    if (e != cudaSuccess)
      return coda_fail(ctx, CODA_ERR_BACKEND, "cuDNN attention: clearing dQ: %s",
                       cudaGetErrorString(e));
  }
  char *q = j->qkv->data, *g = j->dqkv->data;
  const size_t ok = (size_t)j->Hq * hd * 2, ov = (size_t)(j->Hq + j->Hkv) * hd * 2;
  float scale = j->scale > 0.0 ? (float)j->scale : p->scale; /* as the forward's */
  void *ptrs[14] = {q,      q + ok,       q + ov,     j->out->data, j->dout->data,
                    stats,  g,            g + ok,     g + ov,       ssum,
                    &scale, &p->neg_inf, &p->one,  acc};
  const int64_t uids[14] = {UID_Q,  UID_K,  UID_V,  UID_O,           UID_DO,    UID_STATS,
                            UID_DQ, UID_DK, UID_DV, UID_SOFTMAX_SUM, UID_SCALE, UID_NEGINF,
                            UID_ONE, UID_DQ_ACCUM};
  if ((st = execute(ctx, s, p, uids, ptrs, p->key.nondet ? 14 : 13, base + sz_sum + sz_stats + sz_acc)))
    return st;
  if (j->rope) {
    const coda_attn_rope *r = j->rope;
    if (!r->pos || !r->freq || !r->zp || r->pos->dtype != CODA_I32 || r->freq->dtype != CODA_F32 ||
        r->zp->dtype != CODA_F32 || ((uintptr_t)r->freq->data & 7) || ((uintptr_t)r->zp->data & 3))
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "cuDNN attention: the RoPE backward takes i32 pos, f32 freq (8-byte "
                       "aligned) and f32 zp");
    st = coda_cudnn_rope_bwd(ctx, j->dqkv->data, j->dqkv->ld, j->qkv->data, j->qkv->ld,
                             (long long)j->B * j->T, j->Hq + 2 * j->Hkv, j->hd, r->pos->data,
                             r->pos->ld, r->freq->data, r->zp->data, r->zp->ld);
  }
  return st;
}

void coda_cudnn_release(coda_context ctx) {
  coda_cudnn_state *s = state_held(ctx);
  if (!s) return;
  if (s->fn) {
    for (int i = 0; i < s->nplans; i++) coda_cudnn_plan_free(s->fn, s->plans[i]);
    if (s->handle) s->fn->destroy((cudnnHandle_t)s->handle);
  }
  free(s->plans);
  free(s->fn);
  /* the library stays loaded: cuDNN keeps process-wide state of its own */
  free(s);
  state_drop(ctx);
}

#endif /* CODA_HAVE_CUDNN_HEADERS */
