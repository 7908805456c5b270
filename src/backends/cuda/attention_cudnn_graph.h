/* What the cuDNN attention's two files share (attention_cudnn.c: loading,
 * the plan cache and the runs; attention_cudnn_graph.c: the graphs and
 * their plans): the entry points, a plan and its key, the tensor ids of
 * the variant pack. Only with cuDNN's header (CODA_HAVE_CUDNN_HEADERS). */
#ifndef CODA_CUDA_ATTENTION_CUDNN_GRAPH_H
#define CODA_CUDA_ATTENTION_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn_graph.h>

typedef struct cudnn_plan cudnn_plan;
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

/* Builds the plan of the key's pass on cuDNN `version` (cudnnGetVersion)
 * with the handle; NULL when out of memory. A plan cuDNN refuses comes
 * back with ok 0 and its reason. */
cudnn_plan *coda_cudnn_plan_build(const cudnn_fns *f, cudnnHandle_t handle, size_t version,
                                  const plan_key *k);
void coda_cudnn_plan_free(const cudnn_fns *f, cudnn_plan *p);

#endif
