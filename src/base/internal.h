/* Internal helpers shared by every part of the library. */
#ifndef CODA_INTERNAL_H
#define CODA_INTERNAL_H

#include "coda.h"
#include "base/knobs.h"

#include <stdarg.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_ERRMSG_LEN 512

struct coda_backend_ops;

struct coda_context_s {
  const struct coda_backend_ops *ops; /* the backend's table, chosen at creation */
  coda_context_options opts; /* as given, with the knobs' values filled in */
  coda_knobs knobs;          /* the tunables, read once at creation (base/knobs.h) */
  void *stream;              /* CUDA: the cudaStream_t of every launch (NULL: legacy default) */
  int owns_stream;           /* the backend created stream (own_stream) and destroys it */
  char last_error[CODA_ERRMSG_LEN];
  /* Warnings since the last coda_warnings_clear, one line each
   * (coda_warn; coda_warnings). */
  char warnings[4 * CODA_ERRMSG_LEN];
  /* The backend's own state, owned by the backend: made by its create,
   * freed by its destroy, read by it alone (NULL for a backend without). */
  void *backend;
  /* Fused-step choices of coda_plan_tune_fusion (base/tune_cache.h; NULL
   * until the first tuning on this context). */
  struct coda_fused_cache *fused_tune;
  /* Memory accounting (coda_memory_stats): bytes in use through coda_malloc
   * and the backend's workspaces, their high-water mark, and the sizes of
   * live coda_malloc blocks (pointer -> bytes, open addressing). */
  size_t mem_current, mem_peak;
  struct coda_mem_slot *mem_slots;
  size_t mem_cap, mem_count;
};

/* Records a message on the context and returns `s`, so callers can write
 * `return coda_fail(ctx, CODA_ERR_SHAPE, "A has %lld rows", r);`.
 * ctx may be NULL (the message is then dropped). */
coda_status coda_fail(coda_context ctx, coda_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void coda_clear_error(coda_context ctx);
/* Records a warning on the context (a non-fatal problem a call got past),
 * one line appended to what coda_warnings gives; a full buffer keeps the
 * earlier lines. ctx may be NULL (dropped). */
void coda_warn(coda_context ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Memory accounting of workspaces the backend allocates itself (split-K,
 * attention scratch): add when allocated, subtract when freed (in host
 * order; a stream-ordered free counts when it is enqueued). base/mem_count.c */
void coda_mem_add(coda_context ctx, size_t bytes);
void coda_mem_sub(coda_context ctx, size_t bytes);
/* Frees the accounting table of coda_malloc's blocks (context destruction;
 * api/memory.c, the only layer that calls it). */
void coda_mem_release(coda_context ctx);

/* Schedule of a fused GEMM on the CUDA backend: AUTO = the epilogue
 * compiler's rule (pingpong when every tile access of the program is
 * staged), else forced; a forced pingpong kernel that would spill runs
 * cooperative. The result bits do not depend on it; the CPU ignores it. */
enum { CODA_SCHED_AUTO = 0, CODA_SCHED_PINGPONG = 1, CODA_SCHED_COOPERATIVE = 2 };
/* coda_gemm_epilogue with a schedule (plans choose one per step by timing,
 * coda_plan_tune_fusion). */
coda_status coda_gemm_epilogue_sched(coda_context ctx, coda_program program,
                                     coda_transpose trans_a, const coda_tensor *A,
                                     coda_transpose trans_b, const coda_tensor *B, coda_args args,
                                     coda_tiling tiling, int schedule);

/* Tensor checks. `what` names the tensor in messages. */
/* 64-bit FNV-1a of n bytes, its offset basis XORed with seed (0: plain
 * FNV-1a): the keys of the kernel caches and the tuning files. */
uint64_t coda_fnv1a64(const void *data, size_t n, uint64_t seed);

coda_status coda_check_tensor(coda_context ctx, const char *what,
                              const coda_tensor *t);
/* Byte range [lo, hi) covered by a view (for alias checks). */
void coda_tensor_extent(const coda_tensor *t, uintptr_t *lo, uintptr_t *hi);
bool coda_tensors_overlap(const coda_tensor *a, const coda_tensor *b);

/* The checks of a run (base/tensor_check.c), each failing with a message
 * that names what was wrong. The tiling: tile_m and tile_n positive
 * multiples of 8, at most 256; the domain: not negative, M·N without
 * overflow; a matrix operand: a valid view of a floating dtype (f64 in
 * exact mode only); a shape; GEMM operands: transposes, both matrices,
 * op(A) M x K against op(B) K x N. */
coda_status coda_check_tiling(coda_context ctx, coda_tiling t);
coda_status coda_check_domain(coda_context ctx, int64_t M, int64_t N);
coda_status coda_check_matrix(coda_context ctx, const char *what, const coda_tensor *t);
coda_status coda_check_shape(coda_context ctx, const char *what, const coda_tensor *t,
                             int64_t rows, int64_t cols);
/* A floating tensor of rows x cols: bf16, f16 or f32 (f32 alone with
 * fp32 set: statistics such as lse), f64 in exact mode. */
coda_status coda_check_float(coda_context ctx, const char *what, const coda_tensor *t,
                             int64_t rows, int64_t cols, int fp32);
coda_status coda_check_gemm(coda_context ctx, coda_transpose ta, const coda_tensor *A,
                            coda_transpose tb, const coda_tensor *B, int64_t *M, int64_t *N,
                            int64_t *K);
/* A tensor bound to a program argument, with what the program's signature
 * asks of it for one run (lang/signature.c fills these). */
typedef struct coda_arg_check {
  const char *noun, *name; /* messages: "row input 'x'" */
  const coda_tensor *t;    /* NULL: not bound */
  coda_dtype dtype;        /* declared */
  int fp_result;           /* partials, finisher results: f32 (f64 in exact mode) instead */
  int64_t rows, cols;
  int any_cols;            /* rows x (any count >= 1): a rowsum input's partials */
  coda_status shape;       /* CODA_OK, or no shape exists for this run */
  int writes, inplace;     /* the overlap rule: written; a tile input or an output
                            * without accumulate, which may be the very same view */
  coda_width width;
  int operand;             /* A or B of the GEMM: in the overlap rule only */
} coda_arg_check;
/* Each of a[0..n) in order (bound, a valid view, its dtype, its shape for
 * the run over M x N with tile_n), then with alias nonzero no written
 * tensor overlapping another or a read one except in place. */
coda_status coda_check_args(coda_context ctx, const coda_arg_check *a, int n, int64_t M, int64_t N,
                            int tile_n, int alias);

/* Element access as double (CPU). i32 converts exactly. */
double coda_load(const coda_tensor *t, int64_t r, int64_t c);
/* Rounds v to the tensor dtype (round to nearest even) and stores it. */
void coda_store(const coda_tensor *t, int64_t r, int64_t c, double v);

/* bf16 / f16 conversion, round to nearest even (NaN stays NaN). */
uint16_t coda_f32_to_bf16(float f);
float coda_bf16_to_f32(uint16_t h);
uint16_t coda_f32_to_f16(float f);
float coda_f16_to_f32(uint16_t h);
/* Rounds to the precision of dtype without storing. */
double coda_round_to(coda_dtype t, double v);

/* Overflow-checked size arithmetic: returns false on overflow. */
bool coda_mul_i64(int64_t a, int64_t b, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif
