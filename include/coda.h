/* coda: Transformer blocks as GEMM-plus-epilogue programs.
 *
 * The core public header; blocks and plans are declared in coda_nn.h
 * (which includes this one), the trainer in coda_train.h (which includes
 * coda_nn.h). Handles are opaque; every call returns a
 * coda_status and, on failure, leaves a message naming the problem in the
 * context (coda_last_error). There is no global mutable state: everything
 * lives in a context the caller owns.
 *
 * Sections: core (status, dtypes, tensors, context), epilogue programs
 * (language and builder), GEMM + epilogue execution, attention.
 */
#ifndef CODA_H
#define CODA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_VERSION_MAJOR 0
#define CODA_VERSION_MINOR 2
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

/* Host access to one element of a view whose data is host memory (a CPU
 * context's memory, or the caller's): read as double (i32 exactly), or
 * round v to the view's dtype (to nearest even) and store it. No bounds or
 * NULL checks: (row, col) must lie inside the view. */
double coda_tensor_get(const coda_tensor *t, int64_t row, int64_t col);
void coda_tensor_set(const coda_tensor *t, int64_t row, int64_t col, double v);
/* v rounded to the precision of dtype t (to nearest even), not stored. */
double coda_dtype_round(coda_dtype t, double v);

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

/* Versioned option structs. Every struct named coda_*_options that a
 * caller fills and passes by pointer (coda_context_options,
 * coda_gradcheck_options, coda_bind_options,
 * coda_variant_options, coda_attn_mask; coda_train_options, coda_generate_options,
 * coda_eval_options, coda_data_options in coda_train.h;
 * coda_decoder_options and coda_generate_params in coda_decode.h) begins
 * with
 *
 *   size_t struct_size;  (sizeof the struct, as the caller's header has it)
 *
 * which its *_default_options() function (coda_generate_default_params)
 * sets: start from that and set the fields you need, or use a designated
 * initializer that sets it, e.g.
 *   coda_decoder_options o = {.struct_size = sizeof o, .batch = 4};
 * (the members it leaves out are 0, which is not the default of every
 * member: coda_train_options' defaults are not zeros).
 * Members are only ever appended, and every function that takes such a
 * struct checks struct_size first: the size of an older layout the library
 * knows is accepted, the members that layout lacks taking their defaults
 * (a caller built against an older header keeps working); 0 (unset), a
 * size larger than the library's current struct (a caller built against a
 * newer header) or any other size is CODA_ERR_INVALID_ARGUMENT with a
 * message naming the struct, the size given and the sizes expected, and
 * nothing past the caller's size is read. A language binding that mirrors
 * a struct sets struct_size to its mirror's size, so a mirror that lacks a
 * member is refused instead of read past. */

/* The CUDA backend's GEMM mainloop (also CODA_ARCH=auto|sm90|sm80): AUTO
 * by the device's compute capability (SM90 on 9.0, SM80 on 8.x and later
 * majors), SM90 wgmma + TMA (sm_90a only), SM80 mma.sync + ldmatrix +
 * cp.async (any GPU from 8.0; on a Hopper it tests and times that path). */
typedef enum coda_arch_choice {
  CODA_ARCH_AUTO = 0,
  CODA_ARCH_SM90 = 1,
  CODA_ARCH_SM80 = 2
} coda_arch_choice;

typedef struct coda_context_options {
  size_t struct_size;       /* sizeof(coda_context_options). Layouts known:
                             * the first ends at cache_dir, the second
                             * appends own_stream (default 0), the current
                             * one arch and compile_cc (default 0) */
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
  int own_stream;           /* CUDA, when stream is NULL: 1 = the context
                             * creates a non-blocking stream of its own at
                             * the device's greatest priority (and destroys
                             * it), so its work can be recorded by
                             * coda_graph_begin and outranks side work;
                             * 0 = the legacy default stream */
  coda_arch_choice arch;    /* the GEMM mainloop; AUTO: CODA_ARCH, else by
                             * the device */
  int compile_cc;           /* with arch SM80, where no GPU decides it (a CPU
                             * context compiling kernels ahead, as coda
                             * compile does): the compute capability the
                             * sm80 kernels are compiled for, 80 to 129
                             * (90: an H100/H200 forced to the sm80 path);
                             * 0 = 80 */
} coda_context_options;

coda_context_options coda_context_default_options(void);
/* opts NULL: the defaults. Refused options (a struct_size the library does
 * not know, a bad enum or number) are CODA_ERR_INVALID_ARGUMENT: there is
 * no context yet to hold the message, so coda_context_options_check gives
 * it. */
coda_status coda_context_create(const coda_context_options *opts,
                                coda_context *out);
/* Checks opts as coda_context_create does (struct_size, then the fields)
 * and writes why it would refuse them into msg (cap bytes; "" when they
 * are accepted). Returns the status coda_context_create would give for
 * them, CODA_ERR_NOT_SUPPORTED included (CUDA asked for, none usable). */
coda_status coda_context_options_check(const coda_context_options *opts, char *msg, size_t cap);
void coda_context_destroy(coda_context ctx);
/* Message of the last failure on this context ("" if none). */
const char *coda_last_error(coda_context ctx);
/* Warnings recorded on this context since it was created or last cleared:
 * non-fatal problems a call got past and went on (e.g. a Hugging Face
 * import whose config ties the head while the weights hold a different
 * lm_head.weight: imported untied, as transformers does), one line each,
 * each ending in '\n'; "" when there are none. The tools print them. */
const char *coda_warnings(coda_context ctx);
void coda_warnings_clear(coda_context ctx);
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

/* Graphs: the launches a context issues between coda_graph_begin and
 * coda_graph_end are recorded, not run, into a graph that coda_graph_launch
 * replays on the context's stream with the same arguments (CUDA: stream
 * capture of the context's stream, which must not be the legacy default
 * stream; see coda_context_options.stream and own_stream). Device memory
 * the graph reads is read at each replay, so inputs change by copying into
 * the same buffers. No copy, synchronization or allocation may come between
 * begin and end, and work that tunes or allocates on first use must run
 * once before it is recorded. CODA_ERR_NOT_SUPPORTED on the CPU backend. */
typedef struct coda_graph_s *coda_graph;
coda_status coda_graph_begin(coda_context ctx);
/* Ends the recording and instantiates it; on failure nothing is returned
 * and the context is no longer recording. */
coda_status coda_graph_end(coda_context ctx, coda_graph *out);
coda_status coda_graph_launch(coda_context ctx, coda_graph g);
void coda_graph_destroy(coda_graph g);

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

/* .npy files (NumPy format versions 1.0 to 3.0, little-endian, C order,
 * 0-, 1- or 2-D). dtypes: '<f4' f32, '<f8' f64, '<i4' i32, '<f2' f16, and
 * bf16 stored as '<u2' holding the bf16 bit patterns (the upper 16 bits of
 * the f32; NumPy reads them as uint16: view them with
 * (a.astype(np.uint32) << 16).view(np.float32)). Anything else (other
 * descr, Fortran order, 3-D, a size that does not match the file) is
 * CODA_ERR_IO with a message.
 * coda_npy_read: *data (malloc'ed, caller frees) holds rows x cols dense
 * elements of *dtype; a 1-D (n,) array is 1 x n, a 0-D one 1 x 1; *ndim
 * (may be NULL) is the number of dimensions in the file.
 * coda_npy_write: writes the host view t as a 2-D array (rows, cols). */
coda_status coda_npy_read(coda_context ctx, const char *path, coda_dtype *dtype, int64_t *rows,
                          int64_t *cols, int *ndim, void **data);
coda_status coda_npy_write(coda_context ctx, const char *path, const coda_tensor *t);

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

/* Whole operators in one file (docs/language.md): a program that reads a
 * finished statistic (`finish r = ...` then `... * r`) or has a total
 * (`reduce t = total(e)`) runs as a list of passes, each an ordinary
 * program, which coda_gemm_epilogue, coda_map and coda_finish run for it
 * (temporaries allocated per run). Every other program is one pass, the
 * program itself. */
typedef enum coda_pass_kind {
  CODA_PASS_EPILOGUE = 0, /* the GEMM's epilogue over M x N (a map when no GEMM is given) */
  CODA_PASS_MAP = 1,      /* a map over M x N */
  CODA_PASS_ROWS = 2      /* a map over M x 1 (the totals) */
} coda_pass_kind;
typedef struct coda_pass_info {
  coda_pass_kind kind;
  coda_program program;      /* owned by the program it was split from */
  int nfinish;               /* finishers run after the pass (a later pass reads them) */
  const char *finish[16];
} coda_pass_info;
int coda_program_num_passes(coda_program p);
/* Pass i (from 0) of the list the context runs (exact contexts carry f64
 * temporaries, others f32). */
coda_status coda_program_pass(coda_context ctx, coda_program p, int i, coda_pass_info *info);
/* The printable pass list ("" for a program of one pass); owned by p. */
const char *coda_program_passes_text(coda_program p);

typedef enum coda_arg_kind {
  CODA_ARG_ROW = 0,    /* length-M vector */
  CODA_ARG_COL = 1,    /* length-N vector */
  CODA_ARG_SCALAR = 2, /* one element */
  CODA_ARG_TILE = 3,   /* M x N (or M x 2N for x2, M x N/2 for half) */
  CODA_ARG_OUTPUT = 4, /* stored tile output */
  CODA_ARG_PARTIAL = 5, /* fp32 reduction partials */
  CODA_ARG_ROWSUM = 6, /* input: M x T fp32 row partials (any T >= 1), read
                        * at (m, n) as sum_t P[m,t] in index order in the
                        * compute type (text: `rowsum`; f32, f64 in exact
                        * mode; no width, no lane) */
  CODA_ARG_ROWMAX = 7, /* input: rowmax partials, read as max_t P[m,t] (as
                        * ROWSUM otherwise; text: `rowmax`) */
  CODA_ARG_ROWLSE = 8  /* input: rowlse partials, read as log sum_t exp(P[m,t])
                        * as the lse finisher computes it (text: `rowlse`) */
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
 * finishers (M,1), (M, ceil(N/S)) for a segment S, or (1,N) for colsum and colmax.
 * CODA_ERR_SHAPE if N is odd in pair mode, a segment and tile_n do not
 * divide one another, or N and tile_n do not suit a half-split segment
 * (docs/language.md); CODA_ERR_INVALID_ARGUMENT for an unknown name. */
coda_status coda_program_arg_shape(coda_program p, const char *name,
                                   int64_t M, int64_t N, int tile_m,
                                   int tile_n, int64_t *rows, int64_t *cols);

/* coda_program_arg and coda_program_arg_shape take no context and so
 * return a bare status; these variants leave a message in ctx on failure
 * that says why ("pair mode needs an even N, found 63", "segment 96 and
 * tile_n 128 do not divide one another", "no argument named 'q'"). */
coda_status coda_program_arg_ctx(coda_context ctx, coda_program p, int i, coda_arg_info *info);
coda_status coda_program_arg_shape_ctx(coda_context ctx, coda_program p, const char *name,
                                       int64_t M, int64_t N, int tile_m, int tile_n,
                                       int64_t *rows, int64_t *cols);

/* Parameters (text `param NAME` or `param NAME = NUMBER`, docs/language.md
 * "Parameters"): named scalar constants of a program whose values are set
 * per use. A program's parameters are listed by index (declaration order);
 * has_value is 1 when the text gives a default or a value was bound. */
typedef struct coda_param_info {
  const char *name; /* owned by the program */
  int has_value;
  double value;     /* when has_value */
} coda_param_info;
int coda_program_num_params(coda_program p);
coda_status coda_program_param(coda_program p, int i, coda_param_info *info);

/* One value for coda_program_bind. */
typedef struct coda_param_value {
  const char *name;
  double value;
} coda_param_value;

typedef struct coda_bind_options {
  size_t struct_size; /* sizeof(coda_bind_options) (see "Versioned option
                       * structs"); opts NULL: no values, the defaults */
  const coda_param_value *values; /* nvalues entries, each naming a
                                   * parameter of the program once */
  int nvalues;
} coda_bind_options;
coda_bind_options coda_bind_default_options(void);

/* coda_program_bind: a new program (*out, destroy it with
 * coda_program_destroy) equal to p with the given parameter values; a
 * parameter given none keeps its default. Its text declares the bound
 * values as defaults (`param eps = 1e-6`), so it prints, hashes and
 * compiles as a program with those constants: the CUDA backend generates
 * the value into the kernel as a literal and caches a kernel per value.
 * CODA_ERR_INVALID_ARGUMENT, *out NULL, with a message naming the
 * parameter, for: a name the program does not declare (the message lists
 * its parameters), a name given twice, a non-finite value, a parameter left
 * without a value (no default and none given); CODA_ERR_TYPE when a value
 * breaks a rule of its use (rstd's eps must be >= 0). A program whose
 * parameters do not all have a value parses, prints and binds, but running
 * or compiling it fails with CODA_ERR_INVALID_ARGUMENT. */
coda_status coda_program_bind(coda_context ctx, coda_program p, const coda_bind_options *opts,
                              coda_program *out);

/* Variants of a program as IR passes (docs/language.md, "Variants as
 * passes"), applied in this order: each rule of `fold` (a program whose
 * named values define row inputs of p over row, rowsum and scalar inputs
 * and parameters) replaces those inputs by its formula; the outputs and
 * finishers named in `drop` go, with what only they computed; the named
 * value `keep` is stored as a new last output `keep_as` of `keep_dtype`. */
typedef struct coda_variant_options {
  size_t struct_size;         /* sizeof(coda_variant_options) (see "Versioned
                               * option structs"); opts NULL: no pass, a copy */
  const coda_program *fold;   /* nfold rule programs */
  int nfold;
  const char *const *drop;    /* ndrop output or finisher names */
  int ndrop;
  const char *keep;           /* a named value of p, or NULL */
  const char *keep_as;        /* the new output's name (with keep) */
  coda_dtype keep_dtype;      /* its dtype (default CODA_BF16) */
} coda_variant_options;
coda_variant_options coda_variant_default_options(void);

/* coda_program_variant: the new program (*out) that the passes of opts
 * make of p. CODA_ERR_INVALID_ARGUMENT, *out NULL, with a message, for a
 * bad struct_size, counts or NULL entries, a name to drop that is not an
 * output or finisher of the program, a value to keep that is not a named
 * value; CODA_ERR_TYPE for a rule that defines none of p's row inputs or
 * reads a tile, a column, acc or col, a name that clashes, and a result
 * the validator refuses. */
coda_status coda_program_variant(coda_context ctx, coda_program p, const coda_variant_options *opts,
                                 coda_program *out);

/* Built-in programs (the .coda files of programs/, embedded at build time,
 * and their _folded / _infer / _keep variants, derived from them by
 * coda_program_variant's passes): parse or derive the one named `name`
 * (the file name without .coda, or the variant's); names are listed by
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
  CODA_OP_DSWIGLU, CODA_OP_DGEGLU, CODA_OP_ROPE, CODA_OP_ROPE_BWD,
  /* one result, added after the first set (values kept) */
  CODA_OP_ERF, CODA_OP_RELU, CODA_OP_POW, CODA_OP_ROUND_BF16, CODA_OP_ROUND_F16,
  /* integer division and remainder, floor semantics (integer operands only) */
  CODA_OP_IDIV, CODA_OP_IMOD
} coda_op;

typedef enum coda_lane { CODA_LANE_NONE = 0, CODA_LANE_EVEN = 1, CODA_LANE_ODD = 2 } coda_lane;

typedef enum coda_reduce_kind {
  CODA_REDUCE_ROWSUM, CODA_REDUCE_ROWMAX, CODA_REDUCE_ROWLSE,
  CODA_REDUCE_COLSUM, CODA_REDUCE_SEGSUM, CODA_REDUCE_ROWPICK,
  /* added after the first set (values kept): rowmax per segment (text
   * `rowmax(e) per S`, segment S as for SEGSUM) and the column max */
  CODA_REDUCE_SEGMAX, CODA_REDUCE_COLMAX,
  /* a total over the whole M x N domain (text `total(e)`): partials one
   * per row tile, ceil(M / tile_m) x 1, finished by `sum` to 1 x 1. A
   * program with a total runs as a pass list (coda_program_num_passes);
   * no backend runs it in one launch */
  CODA_REDUCE_TOTAL
} coda_reduce_kind;

typedef enum coda_finish_kind {
  CODA_FINISH_RSTD, CODA_FINISH_SUM, CODA_FINISH_MAX, CODA_FINISH_LSE,
  CODA_FINISH_MEAN
} coda_finish_kind;

coda_status coda_builder_create(coda_context ctx, int pair_mode,
                                coda_builder *out);
void coda_builder_destroy(coda_builder b);
/* Half-split pairs (text `mode pair split [S]`, docs/language.md): in a
 * pair-mode builder, a point is the pair of columns (s*S + k, s*S + k + S/2)
 * of segment s, 0 <= k < S/2, instead of (2j, 2j+1); segment S even >= 2,
 * or CODA_PAIR_SPLIT_ROW for S = N (the two halves of the row). 0 goes back
 * to adjacent pairs. */
#define CODA_PAIR_SPLIT_ROW (-1)
coda_status coda_builder_pair_split(coda_builder b, int segment);
/* The pair layout of a program: 0 adjacent pairs (or elem mode), S > 0 the
 * half-split segment, CODA_PAIR_SPLIT_ROW halves of the row. */
int coda_program_pair_split(coda_program p);
/* The math of a program (text `math fast`, docs/language.md "Math"):
 * exact (the default) evaluates every operation as the CPU interpreter
 * does, one rounding each, with the accurate library functions; fast lets
 * the GPU contract a*b+c into one fma and use the hardware approximations
 * of tanh, exp, log, sigmoid and division, within the error bounds the
 * document gives. The CPU backend computes both the same, exactly. */
typedef enum coda_math { CODA_MATH_EXACT = 0, CODA_MATH_FAST = 1 } coda_math;
coda_status coda_builder_math(coda_builder b, coda_math math);
coda_math coda_program_math(coda_program p);
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
 * then rstd is centered, rsqrt(sum(P)/C - (sum(P2)/C)^2 + eps), with C the
 * count summed: N for row partials, M for column partials, S for a segment
 * S (docs/language.md). */
coda_status coda_b_finish(coda_builder b, const char *name, coda_finish_kind kind,
                          const char *partial, const char *partial2, double eps);
/* Validates and returns the program; the builder may then be destroyed. */
coda_status coda_builder_finish(coda_builder b, coda_program *out);

/* ------------------------------------------------ checking a program */

/* A copy of p for exact mode: every bf16, f16 and f32 declaration (inputs
 * and outputs) becomes f64; i32 and `x2` declarations (16-bit packing)
 * stay. ctx must be a CPU context of precision CODA_PRECISION_F64. Used to
 * evaluate a program against itself in fp64 (coda run) and by
 * coda_program_gradcheck. */
coda_status coda_program_exact(coda_context ctx, coda_program p, coda_program *out);

/* coda_program_gradcheck: checks that program `bwd` computes the backward
 * of program `fwd` against central finite differences of fwd, in fp64.
 * With random forward inputs X and random gradients dY of the seeded
 * forward outputs, L(X) = sum over seeded outputs Y of sum(dY * Y(X)); the
 * backward run on (saved values, dY) must give dL/dx for every `wrt` link,
 * element by element: max|bwd - fd| / max|fd| <= tol. Links name the
 * correspondence; `fwd` is always a forward name, `bwd` a backward one. */
typedef enum coda_grad_role {
  CODA_GRAD_WRT = 0,   /* backward output/finisher `bwd` is dL/d(forward input `fwd`;
                        * "acc": the forward's accumulator). For a scalar, row or
                        * column input the backward tensor may be wider: it is
                        * summed over the broadcast dimension (M x N, M x T
                        * partials, 1 x N for a scalar; M x N for a row or column
                        * vector) before the comparison */
  CODA_GRAD_SEED = 1,  /* backward input `bwd` ("acc": the backward's accumulator)
                        * is dL/d(forward output or finisher `fwd`), random */
  CODA_GRAD_SAVE = 2,  /* backward input `bwd` holds forward input/output `fwd`
                        * (implied for a backward input named like one) */
  CODA_GRAD_DOT = 3,   /* backward row or rowsum input `bwd`[m] =
                        * sum_n fwd[m,n] dfwd[m,n], fwd a seeded forward output */
  CODA_GRAD_VALUE = 4, /* input `fwd` of the forward and/or `bwd` of the backward
                        * (either may be NULL) = lo everywhere (a forward input
                        * named by a wrt link is still perturbed from there) */
  CODA_GRAD_RANGE = 5  /* forward input `fwd` ("acc": the accumulator) random
                        * uniform in [lo, hi] (default: +-[0.1, 1), acc +-[0.1, 4);
                        * values within 1e3 step of a threshold constant of the
                        * forward are drawn again) */
} coda_grad_role;

typedef struct coda_grad_link {
  coda_grad_role role;
  const char *fwd;
  const char *bwd;
  double lo, hi;
} coda_grad_link;

typedef struct coda_gradcheck_options {
  size_t struct_size; /* sizeof(coda_gradcheck_options) (see "Versioned
                       * option structs"); opt NULL: the defaults */
  int64_t M, N;   /* the forward's domain (default 3 x 8); the backward's N is
                   * N, N/2 or 2N: the one where every linked shape agrees */
  uint64_t seed;  /* default 1 */
  double step;    /* finite-difference step, relative: h = step max(1, |x|)
                   * (default 1e-6) */
  double tol;     /* default 1e-6 */
  /* Since the second layout: nonzero draws half of the random values of
   * acc and of every floating forward input (within its range, if one is
   * given) just beside a threshold the forward compares against: a
   * literal operand of min, max or a comparison (a select's condition
   * that is no comparison: 0), at 1e3 step to 5e4 step (relative) on
   * either side. Default 0. */
  int points;
} coda_gradcheck_options;
coda_gradcheck_options coda_gradcheck_default_options(void);

#define CODA_GRADCHECK_MAX 16
typedef struct coda_gradcheck_entry {
  const char *fwd, *bwd;  /* the wrt link */
  double max_abs_err;     /* max |bwd - fd| */
  double max_abs_fd;      /* max |fd| */
  double rel_err;         /* max_abs_err / max_abs_fd (NaN if non-finite) */
  int64_t worst_row, worst_col; /* where |bwd - fd| is largest */
  int pass;
} coda_gradcheck_entry;
typedef struct coda_gradcheck_report {
  int nentries;
  coda_gradcheck_entry entry[CODA_GRADCHECK_MAX];
  int64_t bwd_N;          /* the backward's N */
  int evaluations;        /* forward runs */
  int pass;               /* every entry passed */
} coda_gradcheck_report;

/* ctx: a CPU context of precision F64; fwd and bwd may come from any
 * context (they are copied with coda_program_exact). Returns CODA_OK when
 * the check ran (the verdict is in out->pass); an error (with a message)
 * when the links do not fit the programs: an unknown name, a backward
 * input left unlinked, shapes that do not agree for any backward N, an
 * `x2` declaration (check the pair-mode form of the program). */
coda_status coda_program_gradcheck(coda_context ctx, coda_program fwd, coda_program bwd,
                                   const coda_grad_link *links, int nlinks,
                                   const coda_gradcheck_options *opt,
                                   coda_gradcheck_report *out);

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

/* --------------------------------------------- CUDA kernels of a program */

/* The epilogue compiler of the CUDA backend, usable without a GPU (code
 * generation and NVRTC only). In a build without CUDA both calls return
 * CODA_ERR_NOT_SUPPORTED.
 *
 * coda_program_cuda_source: *source (malloc'ed, caller frees) is the CUDA
 * epilogue functor generated for the program. CODA_ERR_NOT_SUPPORTED (with
 * a message) if the GPU cannot run the program. */
coda_status coda_program_cuda_source(coda_context ctx, coda_program p, char **source);

/* What coda_program_cuda_compile built. */
typedef struct coda_cuda_kernel_info {
  int from_cache;     /* 1: the kernel came from the kernel cache */
  int pingpong;       /* schedule chosen: 1 pingpong, 0 cooperative */
  size_t cubin_bytes; /* size of the compiled kernel */
  int spill_stores;   /* spill-store bytes reported by ptxas (-1 unknown) */
  char kernel[1024];  /* lowered (mangled) kernel name, truncated to fit */
} coda_cuda_kernel_info;

/* Compiles the program's GEMM + epilogue kernel for sm_90a with NVRTC, or
 * finds it in the kernel cache ($CODA_CACHE_DIR or ~/.cache/coda) unless
 * no_cache; the operands are of operand_dtype (CODA_BF16 or CODA_F16),
 * stored with trans_a / trans_b as in coda_gemm_epilogue. Optional outputs
 * (NULL: not wanted; malloc'ed, caller frees; NULL if unavailable):
 * *unit, the whole NVRTC translation unit of the kernel built (mainloop
 * headers included, the schedule chosen), and *log, the compiler log of
 * that unit (ptxas register and spill statistics), for which it is
 * compiled once more. */
coda_status coda_program_cuda_compile(coda_context ctx, coda_program p,
                                      coda_dtype operand_dtype, coda_transpose trans_a,
                                      coda_transpose trans_b, int no_cache,
                                      coda_cuda_kernel_info *info, char **unit, char **log);

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

/* A mask for the two calls below (Gemma 3's local layers and query scale):
 * scores scale * q.k (0: 1/sqrt(head_dim)); query t sees keys t - window <
 * j <= t (window 0: every j <= t). Versioned (see "Versioned option
 * structs"; start from coda_attn_default_mask()); a negative or non-finite
 * scale or a negative window is CODA_ERR_INVALID_ARGUMENT. Both backends
 * take it (CUDA: the own kernels; cuDNN the scale, no window < seq). */
typedef struct coda_attn_mask {
  size_t struct_size; /* sizeof(coda_attn_mask) */
  double scale;
  int window;
} coda_attn_mask;
coda_attn_mask coda_attn_default_mask(void); /* {sizeof, 0, 0}: the plain causal mask */
/* coda_attention_forward / _backward with a mask (NULL: the default; the
 * forward's again in the backward); pos, freq, zp (all or none) as in
 * coda_attention_backward_rope. */
coda_status coda_attention_forward_mask(coda_context ctx, const coda_tensor *qkv, int batch,
                                        int seq, int heads_q, int heads_kv, int head_dim,
                                        const coda_tensor *out, const coda_tensor *lse,
                                        const coda_attn_mask *mask);
coda_status coda_attention_backward_mask(coda_context ctx, const coda_tensor *qkv,
                                         const coda_tensor *out, const coda_tensor *lse,
                                         const coda_tensor *dout, int batch, int seq,
                                         int heads_q, int heads_kv, int head_dim,
                                         const coda_tensor *pos, const coda_tensor *freq,
                                         const coda_tensor *dqkv, const coda_tensor *zp,
                                         const coda_attn_mask *mask);

#ifdef __cplusplus
}
#endif
#endif /* CODA_H */
