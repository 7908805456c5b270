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
 * per shape and strides on the context and destroyed with it. */
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

#include <cudnn_graph.h>

typedef cudnnBackendDescriptor_t desc_t;

/* The entry points used, typed from the header. */
typedef struct cudnn_fns {
  __typeof__(cudnnGetVersion) *get_version;
  __typeof__(cudnnGetErrorString) *error_string;
  __typeof__(cudnnGetLastErrorString) *last_error; /* may be NULL */
  __typeof__(cudnnCreate) *create;
  __typeof__(cudnnDestroy) *destroy;
  __typeof__(cudnnSetStream) *set_stream;
  __typeof__(cudnnBackendCreateDescriptor) *desc_create;
  __typeof__(cudnnBackendDestroyDescriptor) *desc_destroy;
  __typeof__(cudnnBackendSetAttribute) *set_attr;
  __typeof__(cudnnBackendGetAttribute) *get_attr;
  __typeof__(cudnnBackendFinalize) *finalize;
  __typeof__(cudnnBackendExecute) *execute;
} cudnn_fns;

/* What a plan is keyed by: the shape, the pass and every stride. */
typedef struct plan_key {
  int backward, nondet;
  int B, T, Hq, Hkv, hd;
  long long ld_qkv, ld_out, ld_lse, ld_dout, ld_dqkv;
} plan_key;

#define MAX_DESCS 160

struct cudnn_plan {
  plan_key key;
  int ok;          /* 0: refused, why says why */
  char why[400];
  desc_t plan;
  int64_t plan_ws; /* bytes the plan asks for */
  int stats_tmp;   /* 1: Stats through a contiguous [B][Hq][T] buffer */
  int nondet_engine; /* the engine's notes say nondeterministic */
  desc_t descs[MAX_DESCS]; /* every descriptor of the graph, kept with the plan */
  int ndescs;
  /* by-value scalars: the variant pack points at these */
  float scale, neg_inf, one;
};

/* Tensor ids of the variant pack. */
enum {
  UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEGINF, UID_ONE, UID_DO, UID_DQ,
  UID_DK, UID_DV, UID_SOFTMAX_SUM, UID_DQ_ACCUM, UID_VIRTUAL = 100
};

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

/* --------------------------------------------------- building a graph */

/* A graph under construction: its descriptors (kept with the plan) and
 * the first failure, by step. */
typedef struct gbuild {
  const cudnn_fns *f;
  cudnn_plan *p;
  desc_t ops[64];
  int nops;
  int64_t next_uid;
  int failed;
  char *why;
  size_t nwhy;
} gbuild;

static void gb_fail(gbuild *g, const char *what, cudnnStatus_t st) {
  if (g->failed) return;
  g->failed = 1;
  char detail[256] = "";
  if (g->f->last_error) g->f->last_error(detail, sizeof detail);
  snprintf(g->why, g->nwhy, "%s: %s%s%s", what, g->f->error_string(st), detail[0] ? ": " : "",
           detail);
}

static desc_t gb_new(gbuild *g, cudnnBackendDescriptorType_t type, const char *what) {
  if (g->failed) return NULL;
  if (g->p->ndescs >= MAX_DESCS) {
    g->failed = 1;
    snprintf(g->why, g->nwhy, "%s: too many descriptors", what);
    return NULL;
  }
  desc_t d = NULL;
  cudnnStatus_t st = g->f->desc_create(type, &d);
  if (st != CUDNN_STATUS_SUCCESS) {
    gb_fail(g, what, st);
    return NULL;
  }
  g->p->descs[g->p->ndescs++] = d;
  return d;
}

static void gb_set(gbuild *g, desc_t d, cudnnBackendAttributeName_t a,
                   cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what) {
  if (g->failed) return;
  cudnnStatus_t st = g->f->set_attr(d, a, t, n, v);
  if (st != CUDNN_STATUS_SUCCESS) gb_fail(g, what, st);
}

static void gb_finalize(gbuild *g, desc_t d, const char *what) {
  if (g->failed) return;
  cudnnStatus_t st = g->f->finalize(d);
  if (st != CUDNN_STATUS_SUCCESS) gb_fail(g, what, st);
}

/* A 4-d tensor: uid 0 makes a virtual one with the next virtual id. */
static desc_t tensor(gbuild *g, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                     const int64_t stride[4], int by_value) {
  desc_t d = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
  const int virt = uid == 0;
  if (virt) uid = g->next_uid++;
  const int64_t align = 16;
  const bool bv = by_value != 0, bvirt = virt != 0;
  gb_set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
  gb_set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dimensions");
  gb_set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, "tensor strides");
  gb_set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
  gb_set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  gb_set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &bvirt, "tensor virtual");
  if (by_value)
    gb_set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv, "tensor by value");
  gb_finalize(g, d, "tensor descriptor");
  return d;
}

static desc_t vtensor(gbuild *g, cudnnDataType_t dt, int64_t d0, int64_t d1, int64_t d2,
                      int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
  const int64_t dim[4] = {d0, d1, d2, d3}, st[4] = {s0, s1, s2, s3};
  return tensor(g, 0, dt, dim, st, 0);
}

static desc_t scalar(gbuild *g, int64_t uid) {
  const int64_t one[4] = {1, 1, 1, 1};
  return tensor(g, uid, CUDNN_DATA_FLOAT, one, one, 1);
}

static void add_op(gbuild *g, desc_t op) {
  if (g->failed) return;
  if (g->nops >= 64) {
    g->failed = 1;
    snprintf(g->why, g->nwhy, "too many operations");
    return;
  }
  g->ops[g->nops++] = op;
}

/* y = mode(x[, b][, t]) with math precision prec (axis >= 0: GEN_INDEX). */
static void pw(gbuild *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, desc_t x, desc_t b,
               desc_t t, desc_t y, int64_t axis, const char *what) {
  desc_t pd = gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
  gb_set(g, pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
  gb_set(g, pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
  if (axis >= 0) gb_set(g, pd, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
  gb_finalize(g, pd, what);
  desc_t op = gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
         &pd, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
  if (b)
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
           what);
  if (t)
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
           what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
  gb_finalize(g, op, what);
  add_op(g, op);
}

static void reduce(gbuild *g, cudnnReduceTensorOp_t mode, desc_t x, desc_t y, const char *what) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  desc_t rd = gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
  gb_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
  gb_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
  gb_finalize(g, rd, what);
  desc_t op = gb_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
  gb_finalize(g, op, what);
  add_op(g, op);
}

static void matmul(gbuild *g, desc_t a, desc_t b, desc_t c, const char *what) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  desc_t md = gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
  gb_set(g, md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
  gb_finalize(g, md, what);
  desc_t op = gb_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &md, what);
  gb_finalize(g, op, what);
  add_op(g, op);
}

static void reshape(gbuild *g, desc_t x, desc_t y, const char *what) {
  desc_t op = gb_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
  gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
  gb_finalize(g, op, what);
  add_op(g, op);
}

/* The causal mask on scores x [b, h, s, s]: keep row >= col, else -inf
 * (row and column indices generated by the graph, top-left aligned). */
static desc_t causal(gbuild *g, desc_t x, int64_t b, int64_t h, int64_t s) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bo = CUDNN_DATA_BOOLEAN;
  desc_t row = vtensor(g, i32, b, h, s, s, h * s * s, s * s, s, 1);
  desc_t col = vtensor(g, i32, b, h, s, s, h * s * s, s * s, s, 1);
  pw(g, CUDNN_POINTWISE_GEN_INDEX, f32, x, NULL, NULL, row, 2, "causal mask: row index");
  pw(g, CUDNN_POINTWISE_GEN_INDEX, f32, x, NULL, NULL, col, 3, "causal mask: column index");
  desc_t keep = vtensor(g, bo, b, h, s, s, h * s * s, s * s, s, 1);
  pw(g, CUDNN_POINTWISE_CMP_GE, bo, row, col, NULL, keep, -1, "causal mask: compare");
  desc_t y = vtensor(g, f32, b, h, s, s, h * s * s, s * s, s, 1);
  desc_t ninf = scalar(g, UID_NEGINF);
  pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, x, ninf, keep, y, -1, "causal mask: select");
  return y;
}

/* The views of the packed tensors as [B, H, T, hd] (BSHD in memory). */
typedef struct views {
  int64_t b, hq, hk, s, d;
  int64_t q_st[4], kv_st[4], kt_st[4], o_st[4], do_st[4], g_st[4], gk_st[4], stats_st[4];
} views;

static void make_views(const cudnn_plan *p, views *v) {
  const plan_key *k = &p->key;
  v->b = k->B, v->hq = k->Hq, v->hk = k->Hkv, v->s = k->T, v->d = k->hd;
  const int64_t T = k->T, d = k->hd;
  const int64_t q[4] = {T * k->ld_qkv, d, k->ld_qkv, 1};
  memcpy(v->q_st, q, sizeof q);
  memcpy(v->kv_st, q, sizeof q);
  const int64_t kt[4] = {T * k->ld_qkv, d, 1, k->ld_qkv}; /* [B, Hkv, hd, T] */
  memcpy(v->kt_st, kt, sizeof kt);
  const int64_t o[4] = {T * k->ld_out, d, k->ld_out, 1};
  memcpy(v->o_st, o, sizeof o);
  const int64_t dO[4] = {T * k->ld_dout, d, k->ld_dout, 1};
  memcpy(v->do_st, dO, sizeof dO);
  const int64_t g[4] = {T * k->ld_dqkv, d, k->ld_dqkv, 1};
  memcpy(v->g_st, g, sizeof g);
  memcpy(v->gk_st, g, sizeof g);
  if (p->stats_tmp) {
    const int64_t st[4] = {k->Hq * T, T, 1, 1};
    memcpy(v->stats_st, st, sizeof st);
  } else {
    const int64_t st[4] = {T * k->ld_lse, 1, k->ld_lse, 1};
    memcpy(v->stats_st, st, sizeof st);
  }
}

static void build_forward(gbuild *g, const views *v) {
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  const int64_t b = v->b, hq = v->hq, hk = v->hk, s = v->s, d = v->d;
  const int64_t qd[4] = {b, hq, s, d}, kd[4] = {b, hk, d, s}, vd[4] = {b, hk, s, d};
  const int64_t sd[4] = {b, hq, s, 1};
  desc_t Q = tensor(g, UID_Q, bf, qd, v->q_st, 0);
  desc_t KT = tensor(g, UID_K, bf, kd, v->kt_st, 0);
  desc_t V = tensor(g, UID_V, bf, vd, v->kv_st, 0);
  desc_t O = tensor(g, UID_O, bf, qd, v->o_st, 0);
  desc_t stats = tensor(g, UID_STATS, f32, sd, v->stats_st, 0);
  const int64_t ss0 = hq * s * s, ss1 = s * s;
  desc_t S = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  matmul(g, Q, KT, S, "forward: Q K^T");
  desc_t S2 = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_MUL, f32, S, scalar(g, UID_SCALE), NULL, S2, -1, "forward: scale");
  desc_t S3 = causal(g, S2, b, hq, s);
  desc_t mx = vtensor(g, f32, b, hq, s, 1, hq * s, s, 1, 1);
  reduce(g, CUDNN_REDUCE_TENSOR_MAX, S3, mx, "forward: row max");
  desc_t sub = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_SUB, f32, S3, mx, NULL, sub, -1, "forward: minus max");
  desc_t e = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_EXP, f32, sub, NULL, NULL, e, -1, "forward: exp");
  desc_t sum = vtensor(g, f32, b, hq, s, 1, hq * s, s, 1, 1);
  reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, sum, "forward: row sum");
  desc_t lg = vtensor(g, f32, b, hq, s, 1, hq * s, s, 1, 1);
  pw(g, CUDNN_POINTWISE_LOG, f32, sum, NULL, NULL, lg, -1, "forward: log");
  pw(g, CUDNN_POINTWISE_ADD, f32, mx, lg, NULL, stats, -1, "forward: stats");
  /* P in the I/O type feeds the second product */
  desc_t P = vtensor(g, bf, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_DIV, f32, e, sum, NULL, P, -1, "forward: softmax");
  matmul(g, P, V, O, "forward: P V");
}

static void build_backward(gbuild *g, const views *v, int nondet) {
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  const int64_t b = v->b, hq = v->hq, hk = v->hk, s = v->s, d = v->d;
  const int64_t qd[4] = {b, hq, s, d}, ktd[4] = {b, hk, d, s}, kvd[4] = {b, hk, s, d};
  const int64_t sd[4] = {b, hq, s, 1};
  desc_t Q = tensor(g, UID_Q, bf, qd, v->q_st, 0);
  desc_t KT = tensor(g, UID_K, bf, ktd, v->kt_st, 0);
  desc_t VT = tensor(g, UID_V, bf, ktd, v->kt_st, 0);
  desc_t O = tensor(g, UID_O, bf, qd, v->o_st, 0);
  desc_t dO = tensor(g, UID_DO, bf, qd, v->do_st, 0);
  desc_t stats = tensor(g, UID_STATS, f32, sd, v->stats_st, 0);
  desc_t dQ = tensor(g, UID_DQ, bf, qd, v->g_st, 0);
  desc_t dK = tensor(g, UID_DK, bf, kvd, v->gk_st, 0);
  desc_t dV = tensor(g, UID_DV, bf, kvd, v->gk_st, 0);
  const int64_t ss0 = hq * s * s, ss1 = s * s;
  /* softmax_sum = rowsum(dO * O), a buffer of the workspace */
  desc_t dOO = vtensor(g, f32, b, hq, s, d, hq * s * d, s * d, hq * d, 1);
  pw(g, CUDNN_POINTWISE_MUL, f32, dO, O, NULL, dOO, -1, "backward: dO * O");
  desc_t red = vtensor(g, f32, b, hq, s, 1, hq * s, s, 1, 1);
  reduce(g, CUDNN_REDUCE_TENSOR_ADD, dOO, red, "backward: rowsum(dO * O)");
  const int64_t sst[4] = {hq * s, s, 1, 1};
  desc_t ssum = tensor(g, UID_SOFTMAX_SUM, f32, sd, sst, 0);
  pw(g, CUDNN_POINTWISE_MUL, f32, red, scalar(g, UID_ONE), NULL, ssum, -1, "backward: softmax_sum");
  /* P = exp(S * scale - Stats) under the mask */
  desc_t S = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  matmul(g, Q, KT, S, "backward: Q K^T");
  desc_t scale = scalar(g, UID_SCALE);
  desc_t S2 = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_MUL, f32, S, scale, NULL, S2, -1, "backward: scale");
  desc_t S3 = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_SUB, f32, S2, stats, NULL, S3, -1, "backward: minus stats");
  desc_t S4 = causal(g, S3, b, hq, s);
  desc_t P = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_EXP, f32, S4, NULL, NULL, P, -1, "backward: exp");
  /* dV = P^T dO (per query head, then summed over the group) */
  desc_t PT = vtensor(g, bf, b, hq, s, s, ss0, ss1, 1, s);
  reshape(g, P, PT, "backward: P^T");
  if (hq == hk) {
    matmul(g, PT, dO, dV, "backward: P^T dO");
  } else {
    desc_t dVf = vtensor(g, bf, b, hq, s, d, hq * s * d, s * d, d, 1);
    matmul(g, PT, dO, dVf, "backward: P^T dO");
    reduce(g, CUDNN_REDUCE_TENSOR_ADD, dVf, dV, "backward: dV over the group");
  }
  /* dS = P (dO V^T - softmax_sum) * scale */
  desc_t dP = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  matmul(g, dO, VT, dP, "backward: dO V^T");
  desc_t dP2 = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_SUB, f32, dP, ssum, NULL, dP2, -1, "backward: minus softmax_sum");
  desc_t dS = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_MUL, f32, dP2, P, NULL, dS, -1, "backward: times P");
  desc_t dS2 = vtensor(g, f32, b, hq, s, s, ss0, ss1, s, 1);
  pw(g, CUDNN_POINTWISE_MUL, f32, dS, scale, NULL, dS2, -1, "backward: dS scale");
  /* dK = dS^T Q */
  desc_t dST = vtensor(g, bf, b, hq, s, s, ss0, ss1, 1, s);
  reshape(g, dS2, dST, "backward: dS^T");
  if (hq == hk) {
    matmul(g, dST, Q, dK, "backward: dS^T Q");
  } else {
    desc_t dKf = vtensor(g, bf, b, hq, s, d, hq * s * d, s * d, d, 1);
    matmul(g, dST, Q, dKf, "backward: dS^T Q");
    reduce(g, CUDNN_REDUCE_TENSOR_ADD, dKf, dK, "backward: dK over the group");
  }
  /* dQ = dS K: directly (deterministic), or through an fp32 accumulator */
  desc_t K = vtensor(g, bf, b, hk, s, d, v->kv_st[0], v->kv_st[1], v->kv_st[2], v->kv_st[3]);
  reshape(g, KT, K, "backward: K");
  if (!nondet) {
    matmul(g, dS2, K, dQ, "backward: dS K");
  } else {
    const int64_t ad[4] = {b, hq, s, d}, ast[4] = {hq * s * d, s * d, d, 1};
    desc_t acc = tensor(g, UID_DQ_ACCUM, f32, ad, ast, 0);
    matmul(g, dS2, K, acc, "backward: dS K");
    pw(g, CUDNN_POINTWISE_IDENTITY, f32, acc, NULL, NULL, dQ, -1, "backward: dQ");
  }
}

/* The operation graph, heuristics and the first engine configuration that
 * finalizes into a plan. */
static void make_plan(gbuild *g, cudnnHandle_t handle) {
  if (g->failed) return;
  desc_t og = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  gb_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
         "operation graph: operations");
  gb_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
         "operation graph: handle");
  gb_finalize(g, og, "operation graph (cuDNN does not support this graph)");
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  for (int m = 0; m < 2 && !g->failed && !g->p->plan; m++) {
    desc_t heur = gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
           "heuristics: graph");
    gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m],
           "heuristics: mode");
    gb_finalize(g, heur, "heuristics");
    if (g->failed) return;
    enum { NCFG = 8 };
    desc_t cfg[NCFG];
    int ncreated = 0;
    for (; ncreated < NCFG; ncreated++)
      if (g->f->desc_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[ncreated]) !=
          CUDNN_STATUS_SUCCESS)
        break;
    int64_t n = 0;
    cudnnStatus_t st = g->f->get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, ncreated, &n, cfg);
    char last[300] = "no engine configuration";
    if (st != CUDNN_STATUS_SUCCESS) n = 0;
    for (int64_t i = 0; i < n && !g->p->plan; i++) {
      desc_t plan = NULL;
      if (g->f->desc_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
        break;
      cudnnStatus_t a = g->f->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                       &handle);
      if (a == CUDNN_STATUS_SUCCESS)
        a = g->f->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
      if (a == CUDNN_STATUS_SUCCESS) a = g->f->finalize(plan);
      if (a != CUDNN_STATUS_SUCCESS) {
        char detail[200] = "";
        if (g->f->last_error) g->f->last_error(detail, sizeof detail);
        snprintf(last, sizeof last, "%s%s%s", g->f->error_string(a), detail[0] ? ": " : "",
                 detail);
        g->f->desc_destroy(plan);
        continue;
      }
      g->p->plan = plan;
      int64_t ws = 0, cnt = 0;
      g->f->get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
      g->p->plan_ws = ws;
      /* the engine's numerical notes: is it deterministic? */
      desc_t eng = NULL;
      if (g->f->desc_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS) {
        if (g->f->get_attr(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                           &cnt, &eng) == CUDNN_STATUS_SUCCESS) {
          cudnnBackendNumericalNote_t notes[16];
          int64_t nn = 0;
          if (g->f->get_attr(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16,
                             &nn, notes) == CUDNN_STATUS_SUCCESS)
            for (int64_t j = 0; j < nn; j++)
              if (notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) g->p->nondet_engine = 1;
        }
        g->f->desc_destroy(eng);
      }
    }
    for (int i = 0; i < ncreated; i++) g->f->desc_destroy(cfg[i]);
    if (!g->p->plan && m == 1) {
      g->failed = 1;
      snprintf(g->why, g->nwhy, "no cuDNN engine runs this graph (%s)", last);
    }
  }
}

static void plan_free(const cudnn_fns *f, cudnn_plan *p) {
  if (!p) return;
  if (p->plan) f->desc_destroy(p->plan);
  for (int i = p->ndescs - 1; i >= 0; i--) f->desc_destroy(p->descs[i]);
  free(p);
}

/* Builds one plan for the key; with stats_tmp 0 first (Stats as a strided
 * view of lse), else with a contiguous Stats buffer. */
static cudnn_plan *build(coda_cudnn_state *s, const plan_key *k) {
  cudnn_plan *p = NULL;
  char first[400] = "";
  for (int tmp = 0; tmp < 2; tmp++) {
    plan_free(s->fn, p);
    p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->key = *k;
    p->stats_tmp = tmp;
    p->scale = 1.f / sqrtf((float)k->hd);
    /* cuDNN before 9.10 wants the lowest float, not -inf, for masked scores */
    p->neg_inf = s->version < 91000 ? -3.402823466e38f : -INFINITY;
    p->one = 1.f;
    views v;
    make_views(p, &v);
    gbuild g = {.f = s->fn, .p = p, .next_uid = UID_VIRTUAL, .why = p->why, .nwhy = sizeof p->why};
    if (k->backward) build_backward(&g, &v, k->nondet);
    else build_forward(&g, &v);
    make_plan(&g, (cudnnHandle_t)s->handle);
    if (!g.failed) {
      p->ok = 1;
      return p;
    }
    if (!tmp) memcpy(first, p->why, sizeof first);
  }
  /* keep the descriptors' memory small: a refused plan keeps its reason */
  char why[400];
  snprintf(why, sizeof why, "%s", first[0] ? first : p->why);
  for (int i = p->ndescs - 1; i >= 0; i--) s->fn->desc_destroy(p->descs[i]);
  p->ndescs = 0;
  memcpy(p->why, why, sizeof why);
  p->ok = 0;
  return p;
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
    p = build(s, &k);
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
  void *ptrs[7] = {q, q + (size_t)j->Hq * hd * 2, q + (size_t)(j->Hq + j->Hkv) * hd * 2,
                   j->out->data, stats, &p->scale, &p->neg_inf};
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
  void *ptrs[14] = {q,      q + ok,       q + ov,     j->out->data, j->dout->data,
                    stats,  g,            g + ok,     g + ov,       ssum,
                    &p->scale, &p->neg_inf, &p->one,  acc};
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
    for (int i = 0; i < s->nplans; i++) plan_free(s->fn, s->plans[i]);
    if (s->handle) s->fn->destroy((cudnnHandle_t)s->handle);
  }
  free(s->plans);
  free(s->fn);
  /* the library stays loaded: cuDNN keeps process-wide state of its own */
  free(s);
  state_drop(ctx);
}

#endif /* CODA_HAVE_CUDNN_HEADERS */
