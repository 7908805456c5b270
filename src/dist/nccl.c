/* The NCCL backend of the communicator: libnccl.so.2 is loaded at run time
 * (dlopen), so the library and the coda binary run on machines without
 * NCCL; CODA_NCCL_LIB may name the file (e.g. the lib/libnccl.so.2 of the
 * nvidia-nccl Python wheel). Only the handful of entry points below are
 * used, declared here with NCCL's C ABI (the enum values and the 128-byte
 * id are part of that ABI), so no NCCL header is needed to build.
 *
 * Each rank owns one device (its local rank: rank r of forked ranks, LOCAL_RANK of a
 * joined job) and one non-blocking
 * stream for communication; two events order it against the compute
 * stream (the context's stream, coda_context_options.stream).
 * Built only with CUDA (CMakeLists.txt); nccl_none.c stands in otherwise. */
#define _GNU_SOURCE
#include "dist/comm.h"
#include "base/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

typedef int nccl_result;       /* ncclResult_t: 0 success, 7 in progress */
typedef struct nccl_comm *nccl_comm_t;
typedef struct { char internal[128]; } nccl_id;
enum { NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_BFLOAT16 = 9, NCCL_FLOAT16 = 6, NCCL_INT32 = 2 };
enum { NCCL_SUM = 0 };

typedef struct nccl_api {
  void *lib;
  nccl_result (*get_unique_id)(nccl_id *);
  nccl_result (*comm_init_rank)(nccl_comm_t *, int, nccl_id, int);
  nccl_result (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  nccl_result (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, cudaStream_t);
  nccl_result (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  nccl_result (*comm_destroy)(nccl_comm_t);
  nccl_result (*comm_abort)(nccl_comm_t);
  nccl_result (*group_start)(void);
  nccl_result (*group_end)(void);
  const char *(*error_string)(nccl_result);
} nccl_api;

struct coda_nccl {
  nccl_api api;
  nccl_comm_t comm;
  int rank, size, device;
  cudaStream_t stream;
  cudaEvent_t compute_done, comm_done;
  double *scratch; /* device doubles for coda_nccl_sum_host */
};

#define SCRATCH_DOUBLES 64

static int load_api(nccl_api *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  coda_knobs k; /* no context here: the knobs are read for this load */
  coda_knobs_from_env(&k);
  const char *name = k.nccl_lib[0] ? k.nccl_lib : "libnccl.so.2";
  a->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!a->lib) {
    snprintf(err, errlen, "cannot load NCCL (%s): %s; set CODA_NCCL_LIB to the library file, "
             "e.g. the lib/libnccl.so.2 of the nvidia-nccl Python package", name, dlerror());
    return -1;
  }
#define SYM(field, sym)                                                                   \
  do {                                                                                    \
    *(void **)&a->field = dlsym(a->lib, sym);                                             \
    if (!a->field) {                                                                      \
      snprintf(err, errlen, "NCCL library %s lacks %s", name, sym);                       \
      return -1;                                                                          \
    }                                                                                     \
  } while (0)
  SYM(get_unique_id, "ncclGetUniqueId");
  SYM(comm_init_rank, "ncclCommInitRank");
  SYM(reduce_scatter, "ncclReduceScatter");
  SYM(all_gather, "ncclAllGather");
  SYM(all_reduce, "ncclAllReduce");
  SYM(comm_destroy, "ncclCommDestroy");
  SYM(comm_abort, "ncclCommAbort");
  SYM(group_start, "ncclGroupStart");
  SYM(group_end, "ncclGroupEnd");
  SYM(error_string, "ncclGetErrorString");
#undef SYM
  return 0;
}

int coda_nccl_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

int coda_nccl_unique_id(void *id, char *err, size_t errlen) {
  nccl_api a;
  if (load_api(&a, err, errlen)) return -1;
  nccl_id u;
  nccl_result r = a.get_unique_id(&u);
  if (r != 0) {
    snprintf(err, errlen, "ncclGetUniqueId: %s", a.error_string(r));
    return -1;
  }
  memcpy(id, &u, sizeof u);
  return 0; /* the library stays loaded: the id's bootstrap lives in it */
}

int coda_nccl_create(int rank, int size, int device, const void *id, coda_nccl **out, char *err,
                     size_t errlen) {
  *out = NULL;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "no usable CUDA device: %s", cudaGetErrorString(e));
    return -1;
  }
  if (device < 0 || device >= ndev) {
    snprintf(err, errlen, "rank %d wants GPU %d (its local rank), %d visible", rank, device, ndev);
    return -1;
  }
  coda_nccl *n = calloc(1, sizeof *n);
  if (!n) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  n->rank = rank;
  n->size = size;
  n->device = device;
  if (load_api(&n->api, err, errlen)) goto fail;
  e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFree(NULL); /* create the context before NCCL uses it */
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->compute_done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->comm_done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaMalloc((void **)&n->scratch, SCRATCH_DOUBLES * sizeof(double));
  if (e != cudaSuccess) {
    snprintf(err, errlen, "device %d: %s", device, cudaGetErrorString(e));
    goto fail;
  }
  nccl_id u;
  memcpy(&u, id, sizeof u);
  nccl_result r = n->api.comm_init_rank(&n->comm, size, u, rank);
  if (r != 0) {
    snprintf(err, errlen, "ncclCommInitRank (rank %d of %d): %s", rank, size,
             n->api.error_string(r));
    n->comm = NULL;
    goto fail;
  }
  *out = n;
  return 0;
fail:
  coda_nccl_destroy(n, 1);
  return -1;
}

void coda_nccl_destroy(coda_nccl *n, int abort) {
  if (!n) return;
  if (n->comm) {
    if (abort) n->api.comm_abort(n->comm);
    else {
      cudaStreamSynchronize(n->stream);
      n->api.comm_destroy(n->comm);
    }
  }
  if (n->scratch) cudaFree(n->scratch);
  if (n->compute_done) cudaEventDestroy(n->compute_done);
  if (n->comm_done) cudaEventDestroy(n->comm_done);
  if (n->stream) cudaStreamDestroy(n->stream);
  /* the library stays loaded: NCCL's own threads may still be unwinding */
  free(n);
}

static int nccl_type(coda_dtype dt) {
  switch (dt) {
  case CODA_F32: return NCCL_FLOAT32;
  case CODA_F64: return NCCL_FLOAT64;
  case CODA_BF16: return NCCL_BFLOAT16;
  case CODA_F16: return NCCL_FLOAT16;
  case CODA_I32: return NCCL_INT32;
  default: return -1;
  }
}

static coda_status nccl_fail(coda_context ctx, coda_nccl *n, nccl_result r, const char *what) {
  return coda_fail(ctx, CODA_ERR_BACKEND, "%s (rank %d of %d): %s", what, n->rank, n->size,
                   n->api.error_string(r));
}

coda_status coda_nccl_collective(coda_context ctx, coda_nccl *n, int op, const void *send,
                                 void *recv, size_t count, coda_dtype dt) {
  const int t = nccl_type(dt);
  if (t < 0) return coda_fail(ctx, CODA_ERR_DTYPE, "NCCL: unsupported dtype %d", (int)dt);
  if (count == 0) return CODA_OK;
  nccl_result r;
  const char *what;
  if (op == CODA_NCCL_REDUCE_SCATTER) {
    what = "ncclReduceScatter";
    r = n->api.reduce_scatter(send, recv, count, t, NCCL_SUM, n->comm, n->stream);
  } else if (op == CODA_NCCL_ALL_GATHER) {
    what = "ncclAllGather";
    r = n->api.all_gather(send, recv, count, t, n->comm, n->stream);
  } else {
    what = "ncclAllReduce";
    r = n->api.all_reduce(send, recv, count, t, NCCL_SUM, n->comm, n->stream);
  }
  return r == 0 ? CODA_OK : nccl_fail(ctx, n, r, what);
}

static coda_status cuda_fail(coda_context ctx, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return coda_fail(ctx, CODA_ERR_BACKEND, "%s: %s", what, cudaGetErrorString(e));
}

coda_status coda_nccl_sum_host(coda_context ctx, coda_nccl *n, double *v, int cnt) {
  for (int a = 0; a < cnt; a += SCRATCH_DOUBLES) {
    const int k = cnt - a < SCRATCH_DOUBLES ? cnt - a : SCRATCH_DOUBLES;
    cudaError_t e = cudaMemcpyAsync(n->scratch, v + a, (size_t)k * sizeof *v,
                                    cudaMemcpyHostToDevice, n->stream);
    if (e != cudaSuccess) return cuda_fail(ctx, e, "sum over ranks (upload)");
    nccl_result r = n->api.all_reduce(n->scratch, n->scratch, (size_t)k, NCCL_FLOAT64, NCCL_SUM,
                                      n->comm, n->stream);
    if (r != 0) return nccl_fail(ctx, n, r, "ncclAllReduce");
    e = cudaMemcpyAsync(v + a, n->scratch, (size_t)k * sizeof *v, cudaMemcpyDeviceToHost,
                        n->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(n->stream);
    if (e != cudaSuccess) return cuda_fail(ctx, e, "sum over ranks");
  }
  return CODA_OK;
}

coda_status coda_nccl_group(coda_context ctx, coda_nccl *n, int start) {
  nccl_result r = start ? n->api.group_start() : n->api.group_end();
  return r == 0 ? CODA_OK : nccl_fail(ctx, n, r, start ? "ncclGroupStart" : "ncclGroupEnd");
}

coda_status coda_nccl_order(coda_context ctx, coda_nccl *n, int comm_waits_compute) {
  /* one event each way suffices: a wait captures the event's latest record */
  cudaStream_t compute = ctx && ctx->stream ? (cudaStream_t)ctx->stream : cudaStreamLegacy;
  cudaError_t e;
  if (comm_waits_compute) {
    e = cudaEventRecord(n->compute_done, compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(n->stream, n->compute_done, 0);
  } else {
    e = cudaEventRecord(n->comm_done, n->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(compute, n->comm_done, 0);
  }
  return e == cudaSuccess ? CODA_OK : cuda_fail(ctx, e, "stream ordering");
}
