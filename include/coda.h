/* coda: Transformer blocks as GEMM-plus-epilogue programs.
 *
 * The one public header. Handles are opaque; every call returns a
 * coda_status and, on failure, leaves a message naming the problem in the
 * context (coda_last_error). There is no global mutable state: everything
 * lives in a context the caller owns.
 *
 * Sections: core (status, dtypes, tensors, context), epilogue programs
 * (language and builder), GEMM + epilogue execution, blocks (nn), trainer.
 */
#ifndef CODA_H
#define CODA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_VERSION_MAJOR 0
#define CODA_VERSION_MINOR 1
#define CODA_VERSION_PATCH 0

/* ------------------------------------------------------------------ core */

typedef enum coda_status {
  CODA_OK = 0,
  CODA_ERR_INVALID_ARGUMENT = 1, /* null pointer, bad enum, bad number */
  CODA_ERR_PARSE = 2,            /* epilogue program text does not parse */
  CODA_ERR_TYPE = 3,             /* program is ill-typed / invalid */
  CODA_ERR_SHAPE = 4,            /* tensor shape does not match */
  CODA_ERR_DTYPE = 5,            /* tensor dtype not allowed here */
  CODA_ERR_LAYOUT = 6,           /* stride / alignment not supported */
  CODA_ERR_ALIAS = 7,            /* outputs overlap each other or inputs */
  CODA_ERR_OUT_OF_MEMORY = 8,
  CODA_ERR_NOT_SUPPORTED = 9, /* valid request this backend cannot run */
  CODA_ERR_BACKEND = 10,      /* CUDA / driver failure */
  CODA_ERR_IO = 11,           /* file missing, truncated, corrupted */
  CODA_ERR_OVERFLOW = 12,     /* sizes overflow the index type */
  CODA_ERR_INTERNAL = 13
} coda_status;

const char *coda_status_string(coda_status s);

typedef enum coda_dtype {
  CODA_BF16 = 0,
  CODA_F16 = 1,
  CODA_F32 = 2,
  CODA_F64 = 3, /* exact mode only */
  CODA_I32 = 4
} coda_dtype;

const char *coda_dtype_name(coda_dtype t);
size_t coda_dtype_size(coda_dtype t);

/* A 2-D strided view, row-major with leading dimension ld (in elements,
 * ld >= cols). Vectors are (len, 1) or (1, len); a scalar is (1, 1).
 * The view does not own its memory. On the CUDA backend data is a device
 * pointer. */
typedef struct coda_tensor {
  void *data;
  coda_dtype dtype;
  int64_t rows;
  int64_t cols;
  int64_t ld;
} coda_tensor;

/* Convenience constructor: a dense row-major view. */
coda_tensor coda_tensor_2d(void *data, coda_dtype dtype, int64_t rows,
                           int64_t cols);

typedef enum coda_backend {
  CODA_BACKEND_CPU = 0,
  CODA_BACKEND_CUDA = 1
} coda_backend;

/* Compute precision of the CPU backend: fp32 (the GPU's semantics) or
 * fp64 (exact mode, for algebra checks). */
typedef enum coda_precision {
  CODA_PRECISION_F32 = 0,
  CODA_PRECISION_F64 = 1
} coda_precision;

typedef struct coda_context_s *coda_context;

/* Schedule of the CUDA backend's fused GEMM kernels: AUTO = the epilogue
 * compiler's rule; the result bits do not depend on it. */
typedef enum coda_epi_schedule {
  CODA_EPI_SCHEDULE_AUTO = 0,
  CODA_EPI_SCHEDULE_PINGPONG = 1,
  CODA_EPI_SCHEDULE_COOPERATIVE = 2
} coda_epi_schedule;

/* Kernel set of the CUDA attention: DEFAULT, or V1 (the first measured
 * defaults and block order, kept to compare against). */
typedef enum coda_attn_impl {
  CODA_ATTN_IMPL_DEFAULT = 0,
  CODA_ATTN_IMPL_V1 = 1
} coda_attn_impl;

typedef struct coda_context_options {
  coda_backend backend;
  coda_precision precision; /* CPU backend only */
  int num_threads;          /* CPU: 0 = OpenMP default */
  int device;               /* CUDA device ordinal */
  int autotune;             /* CUDA: time the tile configurations on first use of
                             * a GEMM shape and keep the fastest, in memory and in
                             * a cache file ($CODA_CACHE_DIR or ~/.cache/coda);
                             * also enabled by CODA_AUTOTUNE=1 */
  int debug_sync;           /* CUDA: after every kernel launch, wait for the
                             * device and check for errors, so a fault is
                             * reported (CODA_ERR_BACKEND, message naming the
                             * operation) by the call that caused it; slow, for
                             * debugging; also enabled by CODA_DEBUG_SYNC=1.
                             * Without it launch errors are still checked, but
                             * a fault inside a kernel surfaces at a later
                             * synchronizing call (a copy, coda_synchronize) */
  /* Fields below: zero means "the environment variable named, else the
   * default". The environment is read once, by coda_context_create. */
  void *stream;             /* CUDA: the cudaStream_t every launch and copy of
                             * the context is issued on (caller-owned; it must
                             * outlive the context); NULL: the legacy default
                             * stream. A plan run on a non-default stream can
                             * be captured into a CUDA graph. */
  int retune;               /* coda_plan_tune_fusion times every step again and
                             * overwrites the stored choices; CODA_RETUNE=1 */
  coda_epi_schedule epi_schedule; /* CUDA: force the fused kernels' schedule;
                             * CODA_EPI_SCHEDULE=pingpong|cooperative */
  int epi_tma_loads;        /* CUDA: 1 = staged tile inputs by TMA where a map
                             * exists (the default), -1 = by cp.async;
                             * CODA_EPI_TMA_LOADS=0 gives -1 */
  coda_attn_impl attn_impl; /* CUDA attention kernels: DEFAULT or V1 (the first
                             * measured defaults); CODA_ATTN_IMPL=v1 */
  const char *cache_dir;    /* kernel and tuning caches; CODA_CACHE_DIR, else
                             * $HOME/.cache/coda (copied at creation) */
} coda_context_options;

coda_context_options coda_context_default_options(void);
coda_status coda_context_create(const coda_context_options *opts,
                                coda_context *out);
void coda_context_destroy(coda_context ctx);
/* Message of the last failure on this context ("" if none). */
const char *coda_last_error(coda_context ctx);
coda_backend coda_context_backend(coda_context ctx);
coda_precision coda_context_precision(coda_context ctx);
/* 1 if the library was built with CUDA and a usable GPU is present. */
int coda_cuda_available(void);

/* Memory of a context's backend (device memory on CUDA, host memory on
 * the CPU backend, where these are calloc/free/memcpy). Tensors passed to
 * the other calls on a CUDA context must point into such memory. Allocated
 * memory is zeroed. Copies are synchronous: a download waits for the work
 * queued before it. coda_synchronize waits for all queued work (timing). */
coda_status coda_malloc(coda_context ctx, size_t bytes, void **out);
void coda_free(coda_context ctx, void *p);
coda_status coda_memcpy_h2d(coda_context ctx, void *dst, const void *src, size_t bytes);
coda_status coda_memcpy_d2h(coda_context ctx, void *dst, const void *src, size_t bytes);
coda_status coda_synchronize(coda_context ctx);

/* Memory accounting, per context: bytes currently allocated through
 * coda_malloc (by the caller, by plans on a CUDA context, and a plan's
 * temporaries and unfused accumulator on either backend) plus the workspaces the CUDA
 * backend takes for itself while a call runs (GEMM split-K partials,
 * attention backward scratch, autotuner scratch), and the high-water mark of that sum since
 * the context was created or coda_memory_reset_peak. Stream-ordered
 * workspaces count from the allocation to the free as the host enqueues
 * them. Not counted: the CUDA runtime's own context, loaded kernels, the
 * memory pool's reserve, and host memory the CPU backend allocates
 * internally (a CPU plan's other buffers included). Like every call on a context, not for concurrent use from
 * several threads. */
typedef struct coda_memory_info {
  size_t current_bytes; /* in use now */
  size_t peak_bytes;    /* high-water mark */
  size_t live_blocks;   /* coda_malloc blocks not yet freed */
} coda_memory_info;
coda_status coda_memory_stats(coda_context ctx, coda_memory_info *out);
/* Sets the peak to the current usage (to measure one phase). */
coda_status coda_memory_reset_peak(coda_context ctx);

/* ------------------------------------------------------ epilogue programs */

typedef struct coda_program_s *coda_program;

/* Parses and validates program text. On failure *out is NULL and the
 * context's error says "line L, column C: expected ..., found ...". */
coda_status coda_program_parse(coda_context ctx, const char *text,
                               coda_program *out);
void coda_program_destroy(coda_program p);
/* Canonical text of the program (parses back to the same IR). The string
 * is owned by the program. */
const char *coda_program_text(coda_program p);
/* Human-readable dump of the IR (instructions, registers, I/O). */
const char *coda_program_ir(coda_program p);

typedef enum coda_arg_kind {
  CODA_ARG_ROW = 0,    /* length-M vector */
  CODA_ARG_COL = 1,    /* length-N vector */
  CODA_ARG_SCALAR = 2, /* one element */
  CODA_ARG_TILE = 3,   /* M x N (or M x 2N for x2, M x N/2 for half) */
  CODA_ARG_OUTPUT = 4, /* stored tile output */
  CODA_ARG_PARTIAL = 5, /* fp32 reduction partials */
  CODA_ARG_ROWSUM = 6  /* input: M x T fp32 row partials (any T >= 1), read
                        * at (m, n) as sum_t P[m,t] in index order in the
                        * compute type (text: `rowsum`; f32, f64 in exact
                        * mode; no width, no lane) */
} coda_arg_kind;

typedef enum coda_width {
  CODA_WIDTH_FULL = 0,
  CODA_WIDTH_X2 = 1,  /* two 16-bit values per column: M x 2N */
  CODA_WIDTH_HALF = 2 /* one value per column pair: M x N/2 */
} coda_width;

/* Introspection: the program's named arguments. Index order: the inputs
 * (kind ROW/COL/SCALAR/TILE/ROWSUM), then the outputs (OUTPUT), then the
 * reductions (PARTIAL, fp32), then the finishers (fp32 vectors: kind ROW
 * for row and segmented partials, COL for column partials), each group in
 * declaration order. */
int coda_program_num_args(coda_program p);
typedef struct coda_arg_info {
  const char *name;
  coda_arg_kind kind;
  coda_dtype dtype; /* inputs/outputs; F32 for partials */
  coda_width width;
  int accumulate; /* outputs */
} coda_arg_info;
coda_status coda_program_arg(coda_program p, int i, coda_arg_info *info);
/* Shape of argument `name` for a GEMM of M x N with the given tiling:
 * row input (M,1), column input (1,N), scalar (1,1), rowsum input (M,0):
 * cols 0 means any number of columns >= 1, tile/output M x N
 * (M x 2N for x2, M x N/2 for half), partials as in docs/language.md,
 * finishers (M,1), (M, ceil(N/S)) for a segment S, or (1,N) for colsum.
 * CODA_ERR_SHAPE if N is odd in pair mode or a segment and tile_n do not
 * divide one another; CODA_ERR_INVALID_ARGUMENT for an unknown name. */
coda_status coda_program_arg_shape(coda_program p, const char *name,
                                   int64_t M, int64_t N, int tile_m,
                                   int tile_n, int64_t *rows, int64_t *cols);

/* Built-in programs (the .coda files of programs/, embedded at build time): parse the
 * one named `name` (the file name without .coda); names are listed by
 * index, NULL past the end. */
coda_status coda_program_builtin(coda_context ctx, const char *name,
                                 coda_program *out);
const char *coda_builtin_program_name(int i);

/* Builder API: constructs the same IR as the text language. Values are
 * integer handles (>= 0); a negative handle means an error, recorded in the
 * builder and reported by coda_builder_finish. */
typedef struct coda_builder_s *coda_builder;
typedef int coda_value;

typedef enum coda_op {
  CODA_OP_ADD, CODA_OP_SUB, CODA_OP_MUL, CODA_OP_DIV, CODA_OP_NEG,
  CODA_OP_FMA, CODA_OP_EXP, CODA_OP_LOG, CODA_OP_SQRT, CODA_OP_RSQRT,
  CODA_OP_SIGMOID, CODA_OP_SILU, CODA_OP_GELU, CODA_OP_DGELU, CODA_OP_DSILU,
  CODA_OP_TANH, CODA_OP_ABS, CODA_OP_MIN, CODA_OP_MAX,
  CODA_OP_LT, CODA_OP_LE, CODA_OP_GT, CODA_OP_GE, CODA_OP_EQ, CODA_OP_NE,
  CODA_OP_SELECT, CODA_OP_SWIGLU, CODA_OP_GEGLU,
  /* two-result ops */
  CODA_OP_DSWIGLU, CODA_OP_DGEGLU, CODA_OP_ROPE, CODA_OP_ROPE_BWD
} coda_op;

typedef enum coda_lane { CODA_LANE_NONE = 0, CODA_LANE_EVEN = 1, CODA_LANE_ODD = 2 } coda_lane;

typedef enum coda_reduce_kind {
  CODA_REDUCE_ROWSUM, CODA_REDUCE_ROWMAX, CODA_REDUCE_ROWLSE,
  CODA_REDUCE_COLSUM, CODA_REDUCE_SEGSUM, CODA_REDUCE_ROWPICK
} coda_reduce_kind;

typedef enum coda_finish_kind {
  CODA_FINISH_RSTD, CODA_FINISH_SUM, CODA_FINISH_MAX, CODA_FINISH_LSE,
  CODA_FINISH_MEAN
} coda_finish_kind;

coda_status coda_builder_create(coda_context ctx, int pair_mode,
                                coda_builder *out);
void coda_builder_destroy(coda_builder b);
coda_value coda_b_input(coda_builder b, const char *name, coda_arg_kind kind,
                        coda_dtype dtype, coda_width width);
coda_value coda_b_output(coda_builder b, const char *name, coda_dtype dtype,
                         coda_width width, int accumulate);
coda_value coda_b_acc(coda_builder b, coda_lane lane);
coda_value coda_b_read(coda_builder b, coda_value input, coda_lane lane);
coda_value coda_b_row_index(coda_builder b);
coda_value coda_b_col_index(coda_builder b);
coda_value coda_b_const(coda_builder b, double v);
/* Ops with 1..5 operands; two-result ops write the second result to *second. */
coda_value coda_b_op(coda_builder b, coda_op op, int nargs, const coda_value *args,
                     coda_value *second);
coda_status coda_b_name(coda_builder b, coda_value v, const char *name);
coda_status coda_b_store(coda_builder b, coda_value output, coda_value v);
coda_status coda_b_store_pair(coda_builder b, coda_value output, coda_value even,
                              coda_value odd);
coda_status coda_b_reduce(coda_builder b, const char *name, coda_reduce_kind kind,
                          coda_value v, coda_value index_input, int segment);
/* partial2: for RSTD, an optional rowsum partial of x (NULL otherwise):
 * then rstd is centered, rsqrt(sum(P)/N - (sum(P2)/N)^2 + eps). */
coda_status coda_b_finish(coda_builder b, const char *name, coda_finish_kind kind,
                          const char *partial, const char *partial2, double eps);
/* Validates and returns the program; the builder may then be destroyed. */
coda_status coda_builder_finish(coda_builder b, coda_program *out);

/* ------------------------------------------------ GEMM + epilogue on a backend */

typedef enum coda_transpose { CODA_N = 0, CODA_T = 1 } coda_transpose;

/* Tiling that fixes the shape of reduction partials. The CPU backend uses
 * it only for that; the CUDA backend runs with it. */
typedef struct coda_tiling {
  int tile_m;
  int tile_n;
} coda_tiling;

/* Named tensor bindings for one run of a program. */
typedef struct coda_args_s *coda_args;
coda_status coda_args_create(coda_context ctx, coda_args *out);
void coda_args_destroy(coda_args a);
/* Binds `name` to a view (copied; the memory is not). Rebinding replaces. */
coda_status coda_args_set(coda_args a, const char *name, const coda_tensor *t);
void coda_args_clear(coda_args a);

/* acc = op(A) · op(B), op(A) M x K, op(B) K x N, then `program` runs on acc.
 * A program of NULL stores acc into the argument named "D".
 * Written tensors may not overlap each other, A, B or any input
 * (CODA_ERR_ALIAS), with one exception, in place: an output without
 * `accumulate` may be the very same view as a tile input (same data, ld,
 * rows, cols and dtype, and the same width: both standard, both x2 or
 * both half). Every iteration point reads its inputs before its outputs
 * are written, and a point's outputs touch only its own position, so the
 * output simply replaces the input. The same holds for coda_map. */
coda_status coda_gemm_epilogue(coda_context ctx, coda_program program,
                               coda_transpose trans_a, const coda_tensor *A,
                               coda_transpose trans_b, const coda_tensor *B,
                               coda_args args, coda_tiling tiling);

/* The tiling a backend runs the program with for an M x N x K GEMM (the
 * shape of its reduction partials): the CUDA backend computes partials for
 * tile_m = 64 (one consumer warpgroup's rows) and tile_n = 128 and rejects
 * other tilings; the CPU backend accepts any valid tiling and returns
 * {64, 128}. p may be NULL. */
coda_status coda_preferred_tiling(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                  int64_t K, coda_tiling *out);

/* Runs the program's `finish` statement `name`: partial -> vector. */
coda_status coda_finish(coda_context ctx, coda_program program,
                        const char *name, coda_args args, int64_t M, int64_t N,
                        coda_tiling tiling);

/* Runs a program that does not read `acc` over an M x N domain (no GEMM):
 * elementwise passes such as a RoPE backward or a cross-entropy backward.
 * An output may overwrite a tile input in place (coda_gemm_epilogue). */
coda_status coda_map(coda_context ctx, coda_program program, int64_t M,
                     int64_t N, coda_args args, coda_tiling tiling);

/* Plain GEMM D = alpha·op(A)·op(B) (+ D if accumulate). */
coda_status coda_gemm(coda_context ctx, coda_transpose trans_a,
                      const coda_tensor *A, coda_transpose trans_b,
                      const coda_tensor *B, const coda_tensor *D, float alpha,
                      int accumulate);

/* ------------------------------------------------------------ attention */

/* Causal softmax attention with grouped-query heads, on a packed qkv
 * tensor of shape (batch*seq, (heads_q + 2*heads_kv)*head_dim): per token
 * [q heads | k heads | v heads], query head h reads kv head
 * h / (heads_q/heads_kv). Scale 1/sqrt(head_dim); fp32 compute (fp64 in
 * exact mode). qkv, out, dout, dqkv may be bf16, f16 or f32 (f64 in exact
 * mode); lse is fp32 (f64 allowed in exact mode).
 * Forward: out (batch*seq, heads_q*head_dim), lse (batch*seq, heads_q) =
 * log sum_j exp(score_j), saved for the backward pass. */
coda_status coda_attention_forward(coda_context ctx, const coda_tensor *qkv, int batch,
                                   int seq, int heads_q, int heads_kv, int head_dim,
                                   const coda_tensor *out, const coda_tensor *lse);
/* Backward: from qkv, the forward's out and lse, and dout, writes dqkv
 * (same packed layout as qkv). */
coda_status coda_attention_backward(coda_context ctx, const coda_tensor *qkv,
                                    const coda_tensor *out, const coda_tensor *lse,
                                    const coda_tensor *dout, int batch, int seq,
                                    int heads_q, int heads_kv, int head_dim,
                                    const coda_tensor *dqkv);
/* The backward with the RoPE backward applied to its result in the same
 * pass (no separate pass over dqkv; the program llama_rope_bwd has the
 * same math). With g the attention gradient of qkv, per token m and
 * adjacent column pair (c, c+1) of every head:
 *   dqkv[m, c..c+1] = R(-theta) g[m, c..c+1],
 *   theta = 2 pi frac(pos[m] (freq[c] + freq[c+1]))
 * (the frequency in turns per position as a float-float pair; columns with
 * frequency 0, such as V's, are copied), and per head slot j (query heads,
 * then key heads, then value heads)
 *   zp[m, j] = sum over the head's columns of qkv[m, c] g[m, c],
 * which equals the sum of z dz over the pre-rotation values (the rotation
 * is orthogonal): the partials of the RMSNorm backward's row sum.
 * pos is (batch*seq) x 1 i32, freq 1 x (heads_q + 2 heads_kv) head_dim f32,
 * zp (batch*seq) x (heads_q + 2 heads_kv) f32 (f64 allowed in exact mode). */
coda_status coda_attention_backward_rope(coda_context ctx, const coda_tensor *qkv,
                                         const coda_tensor *out, const coda_tensor *lse,
                                         const coda_tensor *dout, int batch, int seq,
                                         int heads_q, int heads_kv, int head_dim,
                                         const coda_tensor *pos, const coda_tensor *freq,
                                         const coda_tensor *dqkv, const coda_tensor *zp);

/* ----------------------------------------------------------------- nn */

/* A plan is a Transformer block (or the LM head) as an explicit list of
 * steps (GEMM + epilogue program, map pass, finish, plain GEMM, attention)
 * over named buffers. The executor allocates the buffers on first use
 * with coda_malloc (device memory on a CUDA context: move data in and out
 * with coda_memcpy_h2d / coda_memcpy_d2h) unless the caller binds its own
 * memory, and runs the steps of one phase through the calls above, so a
 * plan runs on any backend. */
typedef struct coda_plan_s *coda_plan;

typedef enum coda_phase {
  CODA_PHASE_FORWARD = 0,
  CODA_PHASE_BACKWARD = 1
} coda_phase;

/* Before the context it was built on: its memory is the context's. */
void coda_plan_destroy(coda_plan p);
/* The plan as text: buffers (shape, dtype, role; a temporary's steps and
 * arena offset) and the steps of both phases. Owned by the plan. */
const char *coda_plan_text(coda_plan p);
/* A view of buffer `name` (allocated first if needed): write inputs and
 * weights into it, read outputs and gradients from it. A temporary (role
 * temp in coda_plan_text) may share its memory with other temporaries
 * (coda_plan_set_share_temps): its contents are defined only from the step
 * that writes it to the last step that reads it, and its view only until
 * the arena is laid out again (coda_plan_set_fused,
 * coda_plan_set_share_temps, coda_plan_tune_fusion). */
coda_status coda_plan_tensor(coda_plan p, const char *name, coda_tensor *out);
/* Uses the caller's memory for buffer `name` (same shape and dtype; the
 * view must outlive the plan's use of it). Rebinding replaces. */
coda_status coda_plan_bind(coda_plan p, const char *name, const coda_tensor *t);
/* Runs every step of one phase. The backward phase reads the buffers the
 * forward phase saved, so it must follow a forward run. */
coda_status coda_plan_run(coda_context ctx, coda_plan p, coda_phase phase);
/* Fusion switch, to measure what fusion saves: with fused = 0 every GEMM +
 * epilogue step runs as a plain GEMM (coda_gemm) into a temporary M x N
 * accumulator of the activation dtype (bf16; f64 in exact mode), then its
 * program as a separate map pass (coda_map) reading that temporary where
 * the fused step reads acc. The other steps are unchanged. Results equal
 * the fused plan's up to the rounding of acc to the temporary's dtype.
 * Each unfused step's temporary is a slot of the temporaries' arena
 * (coda_plan_set_share_temps); with sharing off, one temporary (the
 * largest step's M x N) is allocated with coda_malloc on first use and
 * freed with the plan. Default: fused. */
coda_status coda_plan_set_fused(coda_plan p, int fused);
/* Temporaries share memory by liveness: the plan's temporaries (and, with
 * fusion off, the unfused steps' accumulators) live in one coda_malloc
 * arena where two share bytes only if no step lies in both of their live
 * spans (first to last step that references it, in run order: forward,
 * then backward; to the end for one both phases use). A temporary read
 * or accumulated into before it is written keeps memory of its own.
 * share = 0 gives each its own place in the arena (the sum of their
 * sizes), to compare results or bisect. Changing the switch gives the
 * arena back; the next run lays it out again. coda_plan_text shows the
 * arena and each temporary's steps and offset. Default: shared. */
coda_status coda_plan_set_share_temps(coda_plan p, int share);
/* Fusion chosen by measurement, per GEMM + epilogue step: each such step
 * runs fused and unfused (as above) on ctx's backend, `iters` back-to-back
 * runs per sample, median of 5 samples, the two variants alternating; the
 * unfused pair is kept where it is at least 2 % faster (fusion also saves
 * the M x N temporary). coda_plan_text shows each choice and both times.
 * Allocates the plan's buffers first. Times depend on the shapes, not on
 * the values in the buffers; buffers a step accumulates into or reads and
 * writes are saved and restored, the others hold whatever the last timed
 * run wrote, so tune before the runs whose results are used (e.g. once
 * after building the plan). *n_unfused (optional) = steps left unfused.
 * coda_plan_set_fused afterwards overrides every choice.
 * Choices are cached per context and on disk ($CODA_CACHE_DIR/fused-tune.txt
 * or ~/.cache/coda/fused-tune.txt), keyed by device, library version,
 * program text, shape, layout, operand dtype and tiling: a step found there
 * takes the stored choice and times and does not run (coda_plan_text says
 * "from the tuning cache"); CODA_RETUNE=1 times every step again and
 * replaces the stored choices. A cache file that cannot be written is not
 * an error. */
coda_status coda_plan_tune_fusion(coda_context ctx, coda_plan p, int iters, int *n_unfused);

/* Llama-3 style block and head.
 *
 * Block (forward): x -> x_out with
 *   x1    = x + Attn(RoPE(RMSNorm(x; wn1) Wqkv^T)) Wo^T
 *   x_out = x1 + SwiGLU(RMSNorm(x1; wn2) Wgu^T) Wd^T
 * RMSNorm(x; w) = x / sqrt(mean(x^2) + 1e-5) * w, attention causal with
 * grouped query heads, scale 1/sqrt(head_dim).
 * Block (backward): given dx_out, computes dx and every weight gradient.
 *
 * Buffers (rows x cols), M = batch*seq, Nqkv = (n_heads + 2 n_kv_heads) hd:
 *   inputs   x (M, dim); backward: dx_out (M, dim)
 *   weights  wqkv (Nqkv, dim), wo (dim, n_heads*hd), wgu (2 ffn, dim),
 *            wd (dim, ffn), wn1 (1, dim), wn2 (1, dim)
 *   outputs  x_out (M, dim)
 *   grads    dx (M, dim), dwqkv, dwo, dwgu, dwd, dwn1, dwn2 (weight shapes)
 * Weight layouts (Linear (out, in) rows):
 *   wgu rows interleaved: row 2i = gate row i, row 2i+1 = up row i.
 *   wqkv rows [Q heads | K heads | V heads], head_dim rows per head; within
 *   each Q and K head the RoPE pairs are adjacent rows (2j, 2j+1), rotated
 *   by +theta_j = pos * rope_theta^(-2j/hd) (the Hugging Face sign). A
 *   Hugging Face half-split checkpoint loads by the row permutation
 *   coda_llama_qkv_row (V rows are not permuted).
 *
 * Head (forward): loss = mean over rows m with targets[m] in [0, vocab) of
 *   logsumexp(l_m) - l_m[targets[m]], l = RMSNorm(x; wnf) Wout^T. Targets
 *   outside [0, vocab) are ignored (the convention is -100). The forward
 *   never stores the logits; the backward recomputes them in the GEMM that
 *   writes dlogits (M, vocab).
 *   inputs x (M, dim), targets (M, 1) i32; weights wnf (1, dim),
 *   wout (vocab, dim); output loss (1, 1); backward (d loss = 1):
 *   grads dx (M, dim), dwnf (1, dim), dwout (vocab, dim).
 *
 * dtype: storage of activations and weights, CODA_BF16 (fp32 compute;
 * statistics, rstd, lse, the loss and the weight gradients in f32 unless
 * CODA_LLAMA_GRAD_ACT) or
 * CODA_F64 (exact mode context: every floating buffer f64). Rows are
 * m = b*seq + t; the RoPE position of row m is t.
 *
 * Chaining (flags): a stack of blocks runs the way the GEMM-epilogue
 * rewrite intends when each block's last GEMM also produces the next
 * RMSNorm's input and statistics:
 *   CODA_LLAMA_NORM_OUT  the block's down projection also writes
 *                        h_next = x_out * wn_next (M, dim) and rstd_next
 *                        (M, 1); extra param wn_next (1, dim): bind it to
 *                        the next block's wn1 (or the head's wnf).
 *   CODA_LLAMA_NORM_IN   the block (or head) takes its first RMSNorm's
 *                        h1 (head: h) and rstd1 (head: rstd) as inputs,
 *                        bound to the previous block's h_next and
 *                        rstd_next, instead of computing them by a map
 *                        pass over x (x is still needed by the backward).
 *   CODA_LLAMA_FOLD      no row finisher launches: the GEMMs that read a
 *                        row statistic (rstd, the backward's Sigma z*dz)
 *                        read the producer's rowsum partials (program
 *                        input kind rowsum) and compute it in their
 *                        epilogue. rstd1, rstd2, rstd_next (head: rstd)
 *                        then hold those M x ceil(dim/tile_n) partials
 *                        of x^2 instead of M x 1 vectors; linked plans
 *                        must agree on this flag. Off by default.
 *   CODA_LLAMA_GRAD_ACT  the GEMM weights' gradients (block: dwqkv, dwo,
 *                        dwgu, dwd; head: dwout) are stored in the
 *                        activation dtype (bf16) instead of f32, written
 *                        once by their weight-gradient GEMM (fp32
 *                        accumulation, one rounding): a bf16 framework
 *                        block's gradient memory. The norm-weight
 *                        gradients stay f32; in exact mode (f64) nothing
 *                        changes. Off by default (a trainer with fp32
 *                        master weights wants f32 gradients).
 *   CODA_LLAMA_INPLACE   the SwiGLU backward writes dz (M, 2 ffn) in place
 *                        over the saved z it reads last (an output that is
 *                        the very same view as a tile input,
 *                        coda_gemm_epilogue), so dz needs no memory of its
 *                        own: the backward's peak memory drops by
 *                        M x 2 ffn activations. Results are bit-identical.
 *                        The backward consumes the saved z: a second
 *                        backward needs a new forward first (like a
 *                        framework freeing saved tensors after backward).
 *                        No effect on the head. Off by default.
 *   CODA_LLAMA_ROPE_MAP  the RoPE backward (and its Sigma qkv*dqkv partials)
 *                        as its own map pass (program llama_rope_bwd) over
 *                        the attention backward's dqkv (M, Nqkv), instead
 *                        of fused into the attention backward's stores
 *                        (coda_attention_backward_rope; no dqkv buffer).
 *                        For comparison; off by default. */
#define CODA_LLAMA_NORM_IN 1u
#define CODA_LLAMA_NORM_OUT 2u
#define CODA_LLAMA_FOLD 4u
#define CODA_LLAMA_GRAD_ACT 8u
#define CODA_LLAMA_INPLACE 16u
#define CODA_LLAMA_ROPE_MAP 32u
typedef struct coda_llama_config {
  int64_t dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
  int64_t batch, seq;
  double rope_theta;   /* RoPE base, e.g. 500000 */
  coda_dtype dtype;    /* CODA_BF16 or CODA_F64 */
  coda_tiling tiling;  /* partial-reduction tiling; {0, 0} = 64 x 64 */
  unsigned flags;      /* CODA_LLAMA_NORM_IN | CODA_LLAMA_NORM_OUT | CODA_LLAMA_FOLD |
                          CODA_LLAMA_GRAD_ACT | CODA_LLAMA_INPLACE | CODA_LLAMA_ROPE_MAP */
} coda_llama_config;

/* A small default configuration (dim 64, heads 4/2, head_dim 16, ffn 128,
 * vocab 256, batch 2, seq 16, theta 10000, bf16). */
coda_llama_config coda_llama_default_config(void);
coda_status coda_llama_block_plan(coda_context ctx,
                                  const coda_llama_config *cfg,
                                  coda_plan *out);
coda_status coda_llama_head_plan(coda_context ctx,
                                 const coda_llama_config *cfg,
                                 coda_plan *out);
/* Links two consecutive plans of a stack without copies: next's x is
 * prev's x_out, prev's dx_out is next's dx, and with the chaining flags
 * next's h1/rstd1 (head: h/rstd) are prev's h_next/rstd_next and prev's
 * wn_next is next's wn1 (head: wnf). prev is a block plan, next a block
 * or head plan of the same shapes; link after any coda_plan_bind of
 * next's norm weight. NORM_IN on next requires NORM_OUT on prev, and then
 * both the same CODA_LLAMA_FOLD and tiling (CODA_ERR_SHAPE otherwise). */
coda_status coda_llama_link(coda_plan prev, coda_plan next);
/* Row of wqkv that receives row `hf_row` of a Hugging Face (half-split
 * RoPE) Wqkv of the same [Q | K | V] order: within a Q or K head,
 * hf row j < hd/2 -> 2j and hf row hd/2 + j -> 2j + 1. -1 if out of range. */
int64_t coda_llama_qkv_row(const coda_llama_config *cfg, int64_t hf_row);

/* GPT-2 block (pre-LayerNorm), as a plan.
 *
 * Block (forward): x -> x_out with
 *   x1    = x + Attn(LN(x; ln1_g, ln1_b) Wqkv^T + bqkv) Wo^T + bo
 *   x_out = x1 + gelu(LN(x1; ln2_g, ln2_b) Wfc^T + bfc) Wproj^T + bproj
 * LN(x) = (x - mean(x)) / sqrt(var(x) + 1e-5) * g + b per row, gelu in the
 * tanh form, attention causal multi-head with scale 1/sqrt(head_dim),
 * head_dim = dim / n_heads.
 * Block (backward): given dx_out, computes dx and every gradient.
 *
 * Buffers (rows x cols), M = batch*seq; vectors are (1, len) rows, the
 * shape of a per-column program input:
 *   inputs   x (M, dim); backward: dx_out (M, dim)
 *   weights  ln1_g, ln1_b, ln2_g, ln2_b (1, dim),
 *            wqkv (3 dim, dim), bqkv (1, 3 dim), wo (dim, dim), bo (1, dim),
 *            wfc (ffn, dim), bfc (1, ffn), wproj (dim, ffn), bproj (1, dim)
 *   outputs  x_out (M, dim)
 *   grads    dx (M, dim) and d<weight> for every weight (its shape)
 * Weights are Linear (out, in) (a GPT-2 Conv1D checkpoint stores the
 * transpose); wqkv rows are [Q heads | K heads | V heads].
 *
 * dtype: storage of activations and weights, CODA_BF16 (fp32 compute;
 * statistics and every weight/bias/norm gradient in f32, unless
 * CODA_GPT2_GRAD_ACT) or CODA_F64
 * (exact-mode context: every floating buffer f64).
 *
 * CODA_GPT2_FOLD (flags): no row finisher launches: the LayerNorm
 * consumers read the producer's rowsum partials of x and x^2 and compute
 * mean and centered rstd in their epilogue, and the LayerNorm backward
 * dgrads read the row-dot partials (s1, s2) directly. The saved mu1, rs1,
 * mu2, rs2 then hold those M x ceil(dim/tile_n) partials (of x for mu, of
 * x^2 for rs). The column-sum finishers (bias and LayerNorm-weight
 * gradients) remain. Off by default.
 *
 * CODA_GPT2_GRAD_ACT (flags): the gradients of the four GEMM weights
 * (dwqkv, dwo, dwfc, dwproj) are stored in the activation dtype (bf16)
 * instead of f32, written once by their weight-gradient GEMM (fp32
 * accumulation, one rounding). Bias and LayerNorm-weight gradients stay
 * f32; in exact mode (f64) nothing changes. Off by default. */
#define CODA_GPT2_FOLD 1u
#define CODA_GPT2_GRAD_ACT 2u
typedef struct coda_gpt2_config {
  int64_t dim, n_heads, ffn_dim;
  int64_t batch, seq;
  coda_dtype dtype;   /* CODA_BF16 or CODA_F64 */
  coda_tiling tiling; /* partial-reduction tiling; {0, 0} = default */
  unsigned flags;     /* CODA_GPT2_FOLD | CODA_GPT2_GRAD_ACT */
} coda_gpt2_config;

/* A small configuration (dim 64, 4 heads, ffn 256, batch 2, seq 16, bf16). */
coda_gpt2_config coda_gpt2_default_config(void);
coda_status coda_gpt2_block_plan(coda_context ctx, const coda_gpt2_config *cfg,
                                 coda_plan *out);

/* trainer */
/* ---------------------------------------------------------------- trainer */
/* Training and sampling of a Llama-3 style model (src/train). The tokenizer
 * is byte level (vocab 256, token = byte value). */

typedef struct coda_model_config {
  int vocab, dim, layers, heads, kv_heads, ffn, seq;
  int tied;          /* 1: the LM head reuses the token embedding */
  double rope_theta; /* RoPE base */
  double norm_eps;   /* RMSNorm epsilon */
} coda_model_config;

/* Named configurations: "tiny" (d 128, 2 layers, 4/2 heads, ffn 384, seq
 * 128, vocab 256), "d512" (d 512, 8 layers, 8/4 heads, ffn 1536, seq 512),
 * "1b" and "8b" (Llama-3 shapes, vocab 128256). */
coda_status coda_model_config_named(const char *name, coda_model_config *out);
coda_status coda_model_config_check(coda_context ctx,
                                    const coda_model_config *c);

/* A data-parallel group: the ranks of one training run, each rank a process
 * made by the launcher of `coda train --ranks N` (coda_dist_launch in
 * src/dist/comm.h, which forks the ranks and hands each its handle). */
typedef struct coda_comm_s *coda_comm;

typedef struct coda_train_options {
  coda_model_config model;
  int batch;             /* sequences per micro-batch */
  int accum;             /* micro-batches per optimizer step */
  int64_t steps;         /* total optimizer steps (also when resuming) */
  int64_t warmup;        /* linear warm-up steps */
  double lr, min_lr_ratio; /* peak learning rate; cosine floor = lr·ratio */
  double weight_decay, beta1, beta2, eps;
  double clip;           /* global gradient-norm clip (<= 0: off) */
  uint64_t seed;         /* initialization and data order */
  int val_every;         /* validation every N steps (0: only at the end) */
  int val_batches;       /* micro-batches per validation */
  int save_every;        /* checkpoint every N steps (0: only at the end) */
  const char *out_dir;   /* checkpoints, loss curve, log */
  const char *resume;    /* checkpoint to resume from, or NULL */
  const char *init;      /* checkpoint whose weights start a fresh run */
  const char *data_dir;  /* train.tok / val.tok (prepared if missing) */
  const char *corpus_dir;/* text files to prepare from */
  int engine;            /* 0 auto, 1 host reference, 2 block plans */
  int quiet;             /* no per-step lines (the summary still prints) */
  /* Polled once per step; nonzero stops after the step (with a save). */
  int (*should_stop)(void *user);
  void *user;
  /* Data parallel (NULL: one process). Every rank calls coda_train with the
   * same options; batch is per rank, so a step sees ranks x batch x accum
   * sequences, the same ones one process with batch ranks x batch would.
   * Gradients are averaged, the optimizer state is sharded (ZeRO-1); rank
   * 0 alone prints, logs and writes checkpoints (in the one-process format). */
  coda_comm comm;
} coda_train_options;

typedef struct coda_train_summary {
  int64_t steps_done;
  double first_loss, final_loss; /* training loss of the first/last step */
  double first_val, final_val;   /* validation loss (NaN if none) */
  double seconds, tokens_per_s;
  int stopped; /* 0 finished, 1 interrupted, 2 non-finite loss/grad norm */
  int64_t bad_step; /* the step that was not finite (stopped == 2) */
  char checkpoint[1024]; /* last checkpoint written */
} coda_train_summary;

coda_train_options coda_train_default_options(void);
coda_status coda_train(coda_context ctx, const coda_train_options *o,
                       coda_train_summary *summary);

typedef struct coda_generate_options {
  const char *checkpoint;
  const char *prompt;
  int max_tokens;
  double temperature; /* 0: greedy */
  int top_k;          /* 0: all */
  uint64_t seed;
} coda_generate_options;

/* Samples text after the prompt; *text is malloc'ed (caller frees). */
coda_status coda_generate(coda_context ctx, const coda_generate_options *o,
                          char **text);

/* Hugging Face Llama layout (config.json + model.safetensors, HF tensor
 * names, half-split RoPE rows, separate gate/up): export the weights of a
 * checkpoint, or import them into a weights-only checkpoint (usable with
 * coda_train_options.init and coda_generate). */
coda_status coda_hf_export_checkpoint(coda_context ctx, const char *checkpoint,
                                      const char *hf_dir);
coda_status coda_hf_import_checkpoint(coda_context ctx, const char *hf_dir,
                                      const char *checkpoint);

/* Writes train.tok / val.tok into out_dir from the text files of src_dir. */
coda_status coda_prepare_corpus(coda_context ctx, const char *src_dir,
                                const char *out_dir);

#ifdef __cplusplus
}
#endif
#endif /* CODA_H */
