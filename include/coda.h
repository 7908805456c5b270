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

typedef struct coda_context_options {
  coda_backend backend;
  coda_precision precision; /* CPU backend only */
  int num_threads;          /* CPU: 0 = OpenMP default */
  int device;               /* CUDA device ordinal */
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
  CODA_ARG_PARTIAL = 5 /* fp32 reduction partials */
} coda_arg_kind;

typedef enum coda_width {
  CODA_WIDTH_FULL = 0,
  CODA_WIDTH_X2 = 1,  /* two 16-bit values per column: M x 2N */
  CODA_WIDTH_HALF = 2 /* one value per column pair: M x N/2 */
} coda_width;

/* Introspection: the program's named arguments, in declaration order
 * (inputs, outputs, reductions). */
int coda_program_num_args(coda_program p);
typedef struct coda_arg_info {
  const char *name;
  coda_arg_kind kind;
  coda_dtype dtype; /* inputs/outputs; F32 for partials */
  coda_width width;
  int accumulate; /* outputs */
} coda_arg_info;
coda_status coda_program_arg(coda_program p, int i, coda_arg_info *info);
/* Shape of argument `name` for a GEMM of M x N with the given tiling. */
coda_status coda_program_arg_shape(coda_program p, const char *name,
                                   int64_t M, int64_t N, int tile_m,
                                   int tile_n, int64_t *rows, int64_t *cols);

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
 * A program of NULL stores acc into the argument named "D". */
coda_status coda_gemm_epilogue(coda_context ctx, coda_program program,
                               coda_transpose trans_a, const coda_tensor *A,
                               coda_transpose trans_b, const coda_tensor *B,
                               coda_args args, coda_tiling tiling);

/* Runs the program's `finish` statement `name`: partial -> vector. */
coda_status coda_finish(coda_context ctx, coda_program program,
                        const char *name, coda_args args, int64_t M, int64_t N,
                        coda_tiling tiling);

/* Runs a program that does not read `acc` over an M x N domain (no GEMM):
 * elementwise passes such as a RoPE backward or a cross-entropy backward. */
coda_status coda_map(coda_context ctx, coda_program program, int64_t M,
                     int64_t N, coda_args args, coda_tiling tiling);

/* Plain GEMM D = alpha·op(A)·op(B) (+ D if accumulate). */
coda_status coda_gemm(coda_context ctx, coda_transpose trans_a,
                      const coda_tensor *A, coda_transpose trans_b,
                      const coda_tensor *B, const coda_tensor *D, float alpha,
                      int accumulate);

/* ----------------------------------------------------------------- nn */
/* (blocks, plans: see the nn section, added by src/nn) */

#ifdef __cplusplus
}
#endif
#endif /* CODA_H */
