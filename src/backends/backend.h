/* The table of backend operations. A context picks one table when it is
 * created (coda_backend_ops_for) and the api layer calls through it after
 * checking every argument: a backend trusts what it is given. Adding a
 * backend is writing one table (backends/<name>/<name>_backend.c) and
 * registering it in backends/registry.c, the only place that knows which
 * backends this build has. The table holds what every backend does (memory,
 * GEMM with epilogue, map, finish, attention, markers, graphs, the kernel
 * compiler); what only the trainer or the decoder asks of a device is in
 * feature tables of their own (train_ops.h, decode_ops.h), which a backend
 * may leave out. */
#ifndef CODA_BACKENDS_BACKEND_H
#define CODA_BACKENDS_BACKEND_H

#include "base/internal.h"
#include "lang/ir.h" /* the program limits */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A checked GEMM + epilogue, plain GEMM or map run. */
typedef struct coda_epi_job {
  coda_program prog; /* NULL: plain D = alpha * acc (+ D) */
  int has_gemm;      /* 0: a map pass over M x N (no A, B) */
  coda_transpose ta, tb;
  const coda_tensor *A, *B;
  int64_t M, N, K;
  coda_tiling tiling;
  int schedule; /* CODA_SCHED_* (CUDA fused kernels; the bits do not depend on it) */
  const coda_tensor *inputs[CODA_MAX_INPUTS];
  const coda_tensor *outputs[CODA_MAX_OUTPUTS];
  const coda_tensor *partials[CODA_MAX_REDUCES];
  const coda_tensor *D; /* plain store */
  double alpha;
  int accumulate;
} coda_epi_job;

/* A checked row finisher: partials P (and Q) -> out. layout 0 rowsum
 * partials, 1 colsum, 2 segsum. */
typedef struct coda_finish_job {
  int kind, layout;
  const coda_tensor *P, *Q, *out;
  int64_t M, N;
  coda_tiling tiling;
  int seg;
  double eps;
} coda_finish_job;

/* The fused RoPE backward's extra views (coda_attention_backward_rope). */
typedef struct coda_attn_rope {
  const coda_tensor *pos, *freq, *zp;
} coda_attn_rope;

/* A checked attention call (causal GQA on packed qkv). */
typedef struct coda_attn_job {
  const coda_tensor *qkv, *out, *lse, *dout, *dqkv;
  int B, T, Hq, Hkv, hd;
  const coda_attn_rope *rope; /* backward only; NULL: no fused RoPE backward */
  double scale;               /* the scores' scale; 0: 1/sqrt(hd) */
  int window;                 /* > 0: query t sees keys t - window < j <= t */
} coda_attn_job;

/* Copy directions of copy_bytes. */
/* H2D_QUEUED: queued after the stream's work without waiting for it; the
 * source may be reused on return (the backend stages it). */
typedef enum { CODA_COPY_H2D = 0, CODA_COPY_D2H = 1, CODA_COPY_H2D_QUEUED = 2 } coda_copy_kind;

typedef struct coda_backend_ops {
  const char *name;
  coda_backend kind;
  /* Whether the backend can run on this machine (CUDA: a usable GPU is
   * present; NULL: always). */
  int (*available)(void);
  /* Context life: state the backend hangs on the context. */
  coda_status (*create)(coda_context ctx);
  void (*destroy)(coda_context ctx);
  /* Memory of the backend (accounted by the api layer). */
  coda_status (*alloc)(coda_context ctx, size_t bytes, void **out);
  void (*free)(coda_context ctx, void *p);
  coda_status (*copy_bytes)(coda_context ctx, void *dst, const void *src, size_t bytes,
                            coda_copy_kind kind);
  /* dst = src for two views of one shape (converted when the dtypes differ); src NULL: zeros. */
  coda_status (*copy)(coda_context ctx, const coda_tensor *dst, const coda_tensor *src);
  /* Whether the context's device path runs the kernels of `what` (the
   * training and decoding tables' entries): CODA_OK, or a refusal naming
   * the path and its knob. NULL: always. */
  coda_status (*path_check)(coda_context ctx, const char *what);
  coda_status (*synchronize)(coda_context ctx);
  /* The device tag of tuning caches, and the kernel-code suffix of the
   * library tag ("" when the backend has no generated kernels). */
  coda_status (*tags)(coda_context ctx, char *device, size_t ndevice, char *code, size_t ncode);
  /* Compute. */
  coda_status (*gemm)(coda_context ctx, const coda_epi_job *job);
  coda_status (*gemm_epilogue)(coda_context ctx, const coda_epi_job *job);
  coda_status (*map)(coda_context ctx, const coda_epi_job *job);
  coda_status (*finish)(coda_context ctx, const coda_finish_job *job);
  coda_status (*preferred_tiling)(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                  int64_t K, coda_tiling *out);
  coda_status (*attention_forward)(coda_context ctx, const coda_attn_job *job);
  coda_status (*attention_backward)(coda_context ctx, const coda_attn_job *job);
  /* Feature tables, each in its own header: the trainer's device kernels
   * (backends/train_ops.h; NULL: the trainer's device state is not on
   * this backend) and the decoder's (backends/decode_ops.h; NULL: the
   * decoder runs on the host, as on the CPU backend). */
  const struct coda_train_ops *train;
  const struct coda_decode_ops *decode;
  /* Timing markers (the profile of a training step): a set of n markers;
   * record puts marker i after the work issued so far (CUDA: an event on
   * the context's stream; a synchronous backend: the host clock); elapsed
   * gives the milliseconds from marker a to marker b, waiting for b. NULL:
   * the backend has no markers. */
  coda_status (*timer_create)(coda_context ctx, int n, void **set);
  coda_status (*timer_record)(coda_context ctx, void *set, int i);
  coda_status (*timer_elapsed)(coda_context ctx, void *set, int a, int b, double *ms);
  void (*timer_destroy)(coda_context ctx, void *set);
  /* Graphs (coda_graph_begin ..): record the context's launches, end into
   * an instantiated graph, replay it, free it. NULL: no graphs. */
  coda_status (*graph_begin)(coda_context ctx);
  coda_status (*graph_end)(coda_context ctx, void **exec);
  coda_status (*graph_launch)(coda_context ctx, void *exec);
  void (*graph_destroy)(void *exec);
  /* Ahead-of-time compilation of the generated kernels a fused GEMM (both
   * schedules) or a map launches, into the disk cache; needs no device, so
   * any context may ask (NULL: the backend generates no kernels). */
  coda_status (*precompile_gemm_epilogue)(coda_context ctx, coda_program prog, int trans_a,
                                          int trans_b, int f16, int *from_cache);
  coda_status (*precompile_map)(coda_context ctx, coda_program prog, int *from_cache);
  /* The generated source of a program's fused kernel, and one compilation
   * of it (coda_program_cuda_source / _compile; checked arguments). */
  coda_status (*program_source)(coda_context ctx, coda_program p, char **source);
  coda_status (*program_compile)(coda_context ctx, coda_program p, coda_dtype operand_dtype,
                                 coda_transpose trans_a, coda_transpose trans_b, int no_cache,
                                 coda_cuda_kernel_info *info, char **unit, char **log);
} coda_backend_ops;

/* The table of a backend, or NULL when this build does not have it. */
const coda_backend_ops *coda_backend_ops_for(coda_backend b);

extern const coda_backend_ops coda_cpu_backend_ops;

#ifdef __cplusplus
}
#endif
#endif
