/* The cuDNN attention's graphs (attention_cudnn.c loads cuDNN, caches the
 * plans and runs them): the composite forward and backward graphs of
 * matmul, pointwise and reduction operations over strided views of the
 * packed tensors, their heuristics and the first engine configuration
 * that finalizes into a plan. Built only with cuDNN's header. */
#ifdef CODA_HAVE_CUDNN_HEADERS
#include "backends/cuda/attention_cudnn_graph.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void coda_cudnn_plan_free(const cudnn_fns *f, cudnn_plan *p) {
  if (!p) return;
  if (p->plan) f->desc_destroy(p->plan);
  for (int i = p->ndescs - 1; i >= 0; i--) f->desc_destroy(p->descs[i]);
  free(p);
}

/* Builds one plan for the key; with stats_tmp 0 first (Stats as a strided
 * view of lse), else with a contiguous Stats buffer. */
cudnn_plan *coda_cudnn_plan_build(const cudnn_fns *f, cudnnHandle_t handle, size_t version,
                                  const plan_key *k) {
  cudnn_plan *p = NULL;
  char first[400] = "";
  for (int tmp = 0; tmp < 2; tmp++) {
    coda_cudnn_plan_free(f, p);
    p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->key = *k;
    p->stats_tmp = tmp;
    p->scale = 1.f / sqrtf((float)k->hd);
    /* cuDNN before 9.10 wants the lowest float, not -inf, for masked scores */
    p->neg_inf = version < 91000 ? -3.402823466e38f : -INFINITY;
    p->one = 1.f;
    views v;
    make_views(p, &v);
    gbuild g = {.f = f, .p = p, .next_uid = UID_VIRTUAL, .why = p->why, .nwhy = sizeof p->why};
    if (k->backward) build_backward(&g, &v, k->nondet);
    else build_forward(&g, &v);
    make_plan(&g, handle);
    if (!g.failed) {
      p->ok = 1;
      return p;
    }
    if (!tmp) memcpy(first, p->why, sizeof first);
  }
  /* keep the descriptors' memory small: a refused plan keeps its reason */
  char why[400];
  snprintf(why, sizeof why, "%s", first[0] ? first : p->why);
  for (int i = p->ndescs - 1; i >= 0; i--) f->desc_destroy(p->descs[i]);
  p->ndescs = 0;
  memcpy(p->why, why, sizeof why);
  p->ok = 0;
  return p;
}

#endif /* CODA_HAVE_CUDNN_HEADERS */
