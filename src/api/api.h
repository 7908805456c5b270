/* Entry points of the api layer for the layers above it (nn, train, dist,
 * tools) beyond the public headers: what a plan or the trainer needs from
 * the backend, without naming a backend. Nothing here is CUDA-specific.
 * The decoder's entries, which take the jobs of the backends' decoding
 * table, are in api/decode.h. */
#ifndef CODA_API_API_H
#define CODA_API_API_H

#include "base/internal.h"

#include <stddef.h>
#include <stdint.h>

/* Copies src into dst (both in the context's backend memory, same shape;
 * a different dtype is converted, rounded to dst's); src NULL writes zeros
 * into dst. Stream-ordered on CUDA. */
/* The runner of a program's pass list (program_passes.c), which
 * coda_gemm_epilogue (g: its operands), coda_map (g NULL) and coda_finish
 * call for a program with passes. */
typedef struct coda_passes_gemm {
  coda_transpose ta, tb;
  const coda_tensor *A, *B;
  int schedule;
} coda_passes_gemm;
coda_status coda_passes_run(coda_context ctx, coda_program p, const coda_passes_gemm *g, int64_t M, int64_t N,
                            coda_args args, coda_tiling tiling);
coda_status coda_passes_finish(coda_context ctx, coda_program p, const char *name, coda_args args, int64_t M,
                               int64_t N, coda_tiling tiling);
/* The tensor bound to name, or NULL (dispatch.c); CODA_OK when every
 * binding names an argument of p, else a message naming the first that
 * does not. */
const coda_tensor *coda_args_find(coda_args a, const char *name);
coda_status coda_args_check_names(coda_context ctx, coda_program p, coda_args a);

coda_status coda_tensor_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src);

/* A program run with its arguments bound by index, in the order of its
 * signature (coda_program_arg), as a plan step keeps them: args[i] is the
 * tensor of argument i, NULL where unbound. Checked and run exactly as
 * coda_gemm_epilogue (GEMM_EPILOGUE: op(A)·op(B) with a CODA_SCHED_*
 * schedule), coda_map (MAP) or coda_finish (FINISH: finish = the argument
 * index of the finisher's result) over M x N, without looking a name up.
 * GEMM_UNFUSED is a GEMM + epilogue with fusion off, as coda_gemm of
 * op(A)·op(B) into args[0] then coda_map of prog, which reads args[0] as
 * its first input (the unfused form, coda_program_unfused). */
typedef enum coda_run_kind {
  CODA_RUN_GEMM_EPILOGUE,
  CODA_RUN_MAP,
  CODA_RUN_FINISH,
  CODA_RUN_GEMM_UNFUSED
} coda_run_kind;
typedef struct coda_run {
  coda_run_kind kind;
  coda_program prog;
  coda_transpose ta, tb;
  const coda_tensor *A, *B;
  int schedule;
  int64_t M, N; /* MAP, FINISH (the GEMMs: from A and B) */
  coda_tiling tiling;
  int finish;
  const coda_tensor *const *args;
} coda_run;
coda_status coda_run_program(coda_context ctx, const coda_run *r);

/* The tags that key the on-disk tuning caches: device names the device
 * (the GPU's name and properties, or "cpu/<threads>t"), lib the library
 * version and, on CUDA, a hash of the kernel code the choices were timed
 * with. */
coda_status coda_backend_tags(coda_context ctx, char *device, size_t ndevice, char *lib,
                              size_t nlib);

/* Compiles ahead of time the kernels the CUDA backend launches for a fused
 * GEMM step (both schedules) or a map step, into the disk cache; *from_cache
 * is 1 when every kernel came from it. Needs no GPU (any context backend);
 * CODA_ERR_NOT_SUPPORTED in a library built without CUDA. */
coda_status coda_precompile_gemm_epilogue(coda_context ctx, coda_program prog, int trans_a,
                                          int trans_b, int f16, int *from_cache);
coda_status coda_precompile_map(coda_context ctx, coda_program prog, int *from_cache);

/* 1 when the library was built with the backend. */
int coda_backend_built(coda_backend b);

/* The trainer's device-resident kernels, on a backend that keeps the
 * training state on its device (CUDA): fp32 master -> bf16 weights
 * (round), gradient accumulation from bf16 (accum), embedding lookups from
 * the fp32 or bf16 table and their gradient, the target column, gradient
 * sum-of-squares partials, the AdamW update, zeroing, device memory in use.
 * CODA_ERR_NOT_SUPPORTED on a backend without them. Stream-ordered. */
coda_status coda_train_round(coda_context ctx, const coda_tensor *dst, const float *src,
                             float shift);
coda_status coda_train_accum(coda_context ctx, float *dst, const coda_tensor *src, float scale);
/* x row r = bf16((table[tok[r]] + pos[r % period]) * scale) (fp32 sum and
 * product, one rounding); pos NULL: table[tok[r]] alone (period unused);
 * scale 1: no product (Gemma 3 scales by sqrt(dim)). */
coda_status coda_train_embed(coda_context ctx, const coda_tensor *x, const float *table,
                             const int32_t *tok, const float *pos, int64_t period, float scale);
coda_status coda_train_embed16(coda_context ctx, const coda_tensor *x, const uint16_t *table,
                               const int32_t *tok, const uint16_t *pos, int64_t period,
                               float scale);
coda_status coda_train_embed_grad(coda_context ctx, float *g, const coda_tensor *dx,
                                  const int32_t *rows, const int32_t *seg, const int32_t *pos,
                                  int nrows, float scale);
coda_status coda_train_targets(coda_context ctx, const coda_tensor *tgt, const int32_t *tg);
/* part[b] = the sum of squares of chunk b of g (n elements). */
coda_status coda_train_sumsq(coda_context ctx, const float *g, size_t n, size_t chunk,
                             double *part);
coda_status coda_train_adamw(coda_context ctx, float *w, const float *g, float *m, float *v,
                             size_t n, const double *coef, double gscale);
/* AdamW over the elements [lo, hi) of parameters laid out back to back
 * in one pass (see the CUDA backend's coda_cuda_train_adamw_multi; seg
 * holds the segments' absolute ends), optionally writing the rounded bf16
 * weights; on the side queue `side` (NULL: the context's stream). */
coda_status coda_train_adamw_multi(coda_context ctx, float *w, const float *g, float *m, float *v,
                                   uint16_t *wb, size_t lo, size_t hi, const int64_t *seg,
                                   int nseg, const double *coef, double gscale, void *side);
/* The same over bf16 weights and moments, rounded stochastically with the
 * bits of (seed, t, element index) (CODA_OPTIM_STATE_BF16). */
coda_status coda_train_adamw_bf16(coda_context ctx, uint16_t *w, const float *g, uint16_t *m,
                                  uint16_t *v, size_t lo, size_t hi, const int64_t *seg, int nseg,
                                  const double *coef, double gscale, uint64_t seed, int64_t t,
                                  void *side);
/* A side queue beside the context's stream (backends/train_ops.h, side_*): its
 * work waits for the context's work issued before a fork, and the
 * context's work waits for a marker of it. coda_train_has_side_queues: 1
 * when the context's backend has them. */
int coda_train_has_side_queues(coda_context ctx);
coda_status coda_train_side_create(coda_context ctx, int nmarks, void **side);
coda_status coda_train_side_fork(coda_context ctx, void *side);
coda_status coda_train_side_mark(coda_context ctx, void *side, int i);
coda_status coda_train_side_wait(coda_context ctx, void *side, int i);
void coda_train_side_destroy(coda_context ctx, void *side); /* NULL: nothing */
/* The initial weights on the device: w[k] = sd · normal number k of the
 * splitmix64 stream s0 from draw draw0 (two draws per value, as
 * coda_model_init on the host); and w[k] = value. */
coda_status coda_train_init_normal(coda_context ctx, float *w, size_t n, uint64_t s0,
                                   uint64_t draw0, double sd);
coda_status coda_train_fill(coda_context ctx, float *w, size_t n, float value);
coda_status coda_train_zero(coda_context ctx, void *p, size_t bytes);
coda_status coda_train_device_memory(coda_context ctx, size_t *used, size_t *total);

/* A host-to-device copy queued on the context's stream after its work,
 * without waiting for it; src may be reused on return. Not while the
 * stream is recorded into a graph. */
coda_status coda_memcpy_h2d_queued(coda_context ctx, void *dst, const void *src, size_t bytes);

/* Timing markers on the context's backend, in its order of work: on CUDA
 * events on the context's stream (device time), on the CPU the host clock
 * (the CPU backend is synchronous). A timeline holds n markers; record
 * places marker i (0 <= i < n) after everything issued so far; elapsed is
 * the milliseconds from marker a to marker b once both were recorded (it
 * waits for b). CODA_ERR_NOT_SUPPORTED on a backend without markers. */
typedef struct coda_timeline_s *coda_timeline;
coda_status coda_timeline_create(coda_context ctx, int n, coda_timeline *out);
coda_status coda_timeline_record(coda_context ctx, coda_timeline t, int i);
coda_status coda_timeline_elapsed(coda_context ctx, coda_timeline t, int a, int b, double *ms);
void coda_timeline_destroy(coda_context ctx, coda_timeline t);

/* The unfused form of a GEMM-epilogue program (the pass ir_unfuse in
 * src/lang/pass_unfuse.c): the same program as a map reading the
 * accumulator from the tile input `input` (dtype `dtype`, declared first)
 * instead of `acc`, for a plain GEMM followed by a map pass. */
coda_status coda_program_unfused(coda_context ctx, coda_program prog, const char *input,
                                 coda_dtype dtype, coda_program *out);

#endif
