/* The epilogue IR: what a parsed or built program is.
 *
 * A program is straight-line SSA over per-iteration-point scalars:
 * instructions write registers, then stores and reductions consume them.
 * Evaluation order is instruction order; stores and reductions happen after
 * all instructions of an iteration point. See docs/language.md for the
 * language semantics this IR encodes. */
#ifndef CODA_LANG_IR_H
#define CODA_LANG_IR_H

#include "coda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_NAME_MAX 32      /* including the terminating NUL */
#define CODA_MAX_INSTRS 512
#define CODA_MAX_INPUTS 24
#define CODA_MAX_OUTPUTS 16
#define CODA_MAX_REDUCES 16
#define CODA_MAX_FINISHES 16
#define CODA_MAX_ARGS 5       /* operands of one instruction */
#define CODA_MAX_PARAMS 16    /* named scalar parameters (`param`) */

typedef enum ir_code {
  IR_CONST = 0, /* dst = imm */
  IR_ACC,       /* dst = accumulator value (lane in pair mode) */
  IR_ROW,       /* dst = global row index m */
  IR_COL,       /* dst = global column index n (pair mode: the even column) */
  IR_READ,      /* dst = inputs[input] at this point (lane where required) */
  IR_MATH,      /* dst (and dst2 for two-result ops) = op(args[0..nargs)) */
  IR_STAT       /* dst = finisher `input`'s finished statistic at this point (its
                 * row's, column's or the total): only the pass list
                 * (pass_split.c) runs it, as an input of a later pass */
} ir_code;

typedef struct ir_instr {
  ir_code code;
  coda_op op;      /* IR_MATH */
  coda_lane lane;  /* IR_ACC, IR_READ */
  int input;       /* IR_READ: index into inputs */
  int nargs;
  int args[CODA_MAX_ARGS];
  int dst;         /* register written */
  int dst2;        /* second register of two-result ops, else -1 */
  double imm;      /* IR_CONST (a parameter: its value, 0 while it has none) */
  int param;       /* IR_CONST: 1 + index into params when the constant is a
                    * parameter's value, 0 for a literal */
  int line, col;   /* source position (0 for the builder) */
} ir_instr;

typedef struct ir_input {
  char name[CODA_NAME_MAX];
  coda_arg_kind kind; /* ROW, COL, SCALAR, TILE */
  coda_dtype dtype;
  coda_width width;   /* TILE only */
  int line, col;      /* declaration (0 for the builder) */
} ir_input;

typedef struct ir_output {
  char name[CODA_NAME_MAX];
  coda_dtype dtype;
  coda_width width;
  int accumulate;
  int reg_even;       /* register stored (the only one when single) */
  int reg_odd;        /* second register for pack(), else -1 */
  int line, col;      /* declaration (0 for the builder) */
  int store_line, store_col; /* the store statement (0 for the builder) */
} ir_output;

typedef struct ir_reduce {
  char name[CODA_NAME_MAX];
  coda_reduce_kind kind;
  int reg;            /* value reduced */
  int index_input;    /* ROWPICK: the row i32 input holding column indices */
  int segment;        /* SEGSUM: segment width in columns */
  int line, col;      /* the reduction keyword (0 for the builder) */
} ir_reduce;

typedef struct ir_finish {
  char name[CODA_NAME_MAX];
  coda_finish_kind kind;
  int reduce;         /* index into reduces */
  double eps;         /* RSTD */
  int eps_param;      /* RSTD: 1 + index into params when eps is a parameter, else 0 */
  int reduce2;        /* centered RSTD: rowsum partial of x, else -1 */
  int line, col;      /* the finisher keyword (0 for the builder) */
} ir_finish;

/* A named scalar parameter (`param NAME [= NUMBER]`): a constant of the
 * program whose value is set per use (coda_program_bind). Its uses are
 * IR_CONST instructions (and rstd eps) marked with its index, holding its
 * value, so every evaluator reads it as a literal. */
typedef struct ir_param {
  char name[CODA_NAME_MAX];
  int has_value;      /* a default in the text, or a value bound */
  double value;       /* when has_value */
  int line, col;      /* declaration (0 for the builder) */
} ir_param;

struct ir_passes;

/* A program's signature (signature.c): its arguments in the order of
 * coda_program_arg (inputs, outputs, reduction partials, finisher
 * results), each with what a run checks and the rule of its shape, built
 * once by ir_validate, so that a run binds tensors by index without
 * looking names up. */
#define CODA_MAX_SIG (CODA_MAX_INPUTS + CODA_MAX_OUTPUTS + CODA_MAX_REDUCES + CODA_MAX_FINISHES)

/* One extent of an argument for a run over M x N with a tiling. */
typedef enum ir_dim {
  IR_DIM_ONE,       /* 1 */
  IR_DIM_M,         /* M */
  IR_DIM_N,         /* N */
  IR_DIM_2N,        /* 2N: an x2 operand */
  IR_DIM_HALF_N,    /* N/2: a half operand */
  IR_DIM_ROW_TILES, /* ceil(M / tile_m): column partials */
  IR_DIM_COL_TILES, /* ceil(N / tile_n): row partials */
  IR_DIM_SEG_TILES, /* ceil(N / min(S, tile_n)): segmented partials */
  IR_DIM_SEGS,      /* ceil(N / S): a segmented finisher's result */
  IR_DIM_ANY,       /* any count >= 1 (a rowsum input's partials), given as 0 */
  IR_DIM_WIDTH      /* in lang/kinds.def only: N, 2N or N/2 by the declared width */
} ir_dim;

/* The shape of a reduction's partials (lang/kinds.def). */
typedef enum { IR_PART_ROW, IR_PART_COL, IR_PART_SEG, IR_PART_PICK, IR_PART_TOTAL } ir_part;

typedef enum ir_role { IR_ROLE_INPUT, IR_ROLE_OUTPUT, IR_ROLE_PARTIAL, IR_ROLE_RESULT } ir_role;

typedef struct ir_arg {
  char name[CODA_NAME_MAX];
  ir_role role;
  coda_arg_kind kind; /* as coda_program_arg reports it */
  coda_dtype dtype;   /* declared; F32 for partials and finisher results */
  coda_width width;
  int accumulate;     /* outputs */
  ir_dim rows, cols;
  int segment;        /* IR_DIM_SEG_TILES, IR_DIM_SEGS: S */
  ir_part part;       /* partials, finisher results: the part of their reduction */
  int reads, writes;  /* a run reads it, writes it (an accumulating output: both;
                       * a finisher result is written by its finish run only,
                       * or also by the run of a program with a pass list) */
  const char *noun;   /* how messages name it: "row input", "output", "partial",
                       * "finisher result" */
} ir_arg;

typedef struct ir_signature {
  int ok;             /* built by the last successful ir_validate */
  int needs_exact;    /* an f64 declaration: runs in exact mode only */
  int unset_params;   /* parameters without a value */
  int reads_acc;      /* the program reads acc (needs a GEMM) */
  int nargs;
  ir_arg args[CODA_MAX_SIG];
} ir_signature;

struct coda_program_s {
  int pair_mode;
  int pair_split;     /* pair mode: 0 adjacent pairs (2j, 2j+1); S > 0 half-split
                       * pairs (s*S + k, s*S + k + S/2); CODA_PAIR_SPLIT_ROW: S = N */
  int math_fast;      /* `math fast`: the GPU may contract and approximate (coda_math) */
  int ninstrs, ninputs, noutputs, nreduces, nfinishes;
  int nregs;
  ir_instr instrs[CODA_MAX_INSTRS];
  ir_input inputs[CODA_MAX_INPUTS];
  ir_output outputs[CODA_MAX_OUTPUTS];
  ir_reduce reduces[CODA_MAX_REDUCES];
  ir_finish finishes[CODA_MAX_FINISHES];
  int nparams;
  ir_param params[CODA_MAX_PARAMS];
  char **reg_names;   /* nregs entries, NULL for unnamed temporaries */
  char *text;         /* canonical text (printer), owned */
  char *ir_dump;      /* IR listing, owned */
  struct ir_passes *passes[2]; /* a program that reads a finished statistic or has a
                                * total: its pass lists, [0] with f32 and [1] with f64
                                * temporaries (ir_finalize builds them), owned */
  ir_signature sig;   /* the arguments, resolved once (ir_signature_build) */
};

/* Number of results of a math op (1 or 2) and its operand count. */
int ir_op_results(coda_op op);
int ir_op_arity(coda_op op);
const char *ir_op_name(coda_op op);
/* The entries of lang/ops.def: their number, an operator's symbol ("" for
 * a call) and precedence (0 call, 1..3 binary, 4 prefix). */
int ir_op_count(void);
const char *ir_op_symbol(coda_op op);
int ir_op_prec(coda_op op);
/* The call op named s[0..len), or -1. */
int ir_op_find_call(const char *s, size_t len);
/* The binary op of precedence prec written s[0..len), or -1. */
int ir_op_find_binary(const char *s, size_t len, int prec);

/* Index of the named input/output/reduce, or -1. */
int ir_find_input(const struct coda_program_s *p, const char *name);
int ir_find_output(const struct coda_program_s *p, const char *name);
int ir_find_reduce(const struct coda_program_s *p, const char *name);

int ir_find_finish(const struct coda_program_s *p, const char *name);
int ir_find_param(const struct coda_program_s *p, const char *name);

/* Sets every use of parameter i (its IR_CONST instructions and rstd eps) to
 * its value. */
void ir_param_propagate(struct coda_program_s *p, int i);
/* CODA_OK when every parameter has a value; else CODA_ERR_INVALID_ARGUMENT
 * naming the first without one (what: the caller, for the message). */
coda_status ir_check_params(coda_context ctx, const struct coda_program_s *p, const char *what);
#define IR_PARAM_UNSET                                                                       \
  "%s: parameter '%s' has no value: it has no default, so bind one with coda_program_bind " \
  "(docs/language.md, \"Parameters\")"

/* Validates a complete program (used by parser and builder). Messages carry
 * "line L, column C: " when the offending item has a source position. */
coda_status ir_validate(coda_context ctx, struct coda_program_s *p);
/* The same, with f64 declarations allowed when exact is nonzero (else
 * only in an exact context's validation: ir_validate). */
coda_status ir_validate_as(coda_context ctx, struct coda_program_s *p, int exact);

/* The signature (signature.c). ir_signature_build fills p->sig (ir_validate
 * calls it on success). ir_arg_find: the index of the argument `name`, or
 * -1. ir_arg_shape: argument i's rows x cols for a run over M x N with
 * tile_m x tile_n (cols 0 for IR_DIM_ANY); CODA_ERR_SHAPE when a segment
 * and tile_n do not divide one another. */
void ir_signature_build(struct coda_program_s *p);
int ir_arg_find(const struct coda_program_s *p, const char *name);
coda_status ir_arg_shape(const struct coda_program_s *p, int i, int64_t M, int64_t N, int tile_m,
                         int tile_n, int64_t *rows, int64_t *cols);
/* The rules of a validated program that depend on the context: f64
 * declarations need exact mode (validate.c; ir_validate checks them too). */
coda_status ir_check_precision(coda_context ctx, const struct coda_program_s *p);

/* One run of a program over M x N, its tensors bound by argument index. */
typedef struct ir_run {
  const char *what;          /* the caller, for the parameter message */
  int map;                   /* a map pass: the program must not read acc */
  int64_t M, N;
  coda_tiling tiling;
  int finish;                /* a finish run: its result's argument index (an index
                              * that is no finisher's: none named finish_name); -1
                              * for a GEMM or map run */
  const char *finish_name;
  const char *unknown;       /* a binding that names no argument, or NULL */
  const coda_tensor *const *t; /* t[i]: argument i's tensor, NULL where unbound */
} ir_run;
/* The program's part of the checks of run q, in order: validated (the
 * signature built), ir_check_precision, not reading acc in a map,
 * parameters, tiling, domain, the mode's rules
 * for N (ir_check_domain), the finisher, no unknown binding; then the
 * arguments the run binds (a GEMM or map: inputs, outputs, partials; a
 * finish: the finisher's partials and result) with their shapes for it,
 * appended to c[*n...), for coda_check_args. */
struct coda_arg_check; /* base/internal.h */
coda_status ir_run_check(coda_context ctx, struct coda_program_s *p, const ir_run *q,
                         struct coda_arg_check *c, int *n);

/* 1 if the operand holds two values per iteration point (and so is read
 * through a lane / stored with pack()), 0 otherwise. */
int ir_input_is_pair(const struct coda_program_s *p, int input);
int ir_output_is_pair(const struct coda_program_s *p, int output);

/* An input of row partials (rowsum, rowmax, rowlse): M x T, any T >= 1,
 * f32 (f64 in exact mode), read as its row's sum, max or log-sum-exp. */
static inline int ir_kind_is_partials(coda_arg_kind k) {
  return k == CODA_ARG_ROWSUM || k == CODA_ARG_ROWMAX || k == CODA_ARG_ROWLSE;
}

/* The kinds of lang/kinds.def. A reduction's partials and what it reduces
 * to (the finishers of the same class take it). */
typedef enum { IR_CLASS_SUM, IR_CLASS_MAX, IR_CLASS_LSE, IR_CLASS_PICK } ir_class;
/* Keyword lookups: the kind, or -1 (a segmented reduction has no keyword
 * of its own: `per` makes it). */
int ir_input_kind_find(const char *s, size_t len);
int ir_reduce_kind_find(const char *s, size_t len);
int ir_finish_kind_find(const char *s, size_t len);
/* 1 for a kind of the table (an input kind: one a declaration can name). */
int ir_input_kind_known(int k);
int ir_reduce_kind_known(int k);
int ir_finish_kind_known(int k);
/* An input kind's keyword ("?" for none); "a, b or c" of a table's
 * keywords (which: 'i' inputs, 'r' reductions, 'f' finishers) into buf. */
const char *ir_input_kind_word(coda_arg_kind k);
/* How a run's messages name an input of kind k ("row input"), and its
 * shape's rules (IR_DIM_M and IR_DIM_N for a kind not in the table). */
const char *ir_input_kind_noun(coda_arg_kind k);
void ir_input_kind_dims(coda_arg_kind k, ir_dim *rows, ir_dim *cols);
const char *ir_kind_words(char which, char *buf, size_t n);
const char *ir_reduce_kind_name(coda_reduce_kind k);
/* The keyword a reduction is written with (a segmented one: its base's). */
const char *ir_reduce_kind_word(coda_reduce_kind k);
ir_part ir_reduce_part(coda_reduce_kind k);
ir_class ir_reduce_class(coda_reduce_kind k);
/* The kind `per S` makes of k, or -1. */
int ir_reduce_per(coda_reduce_kind k);
ir_class ir_finish_class(coda_finish_kind k);
/* The reductions a finisher takes, for messages. */
const char *ir_finish_needs(coda_finish_kind k);
/* Segmented row partials (rowsum/rowmax per S) and column partials
 * (colsum/colmax). */
static inline int ir_reduce_is_segmented(coda_reduce_kind k) { return ir_reduce_part(k) == IR_PART_SEG; }
static inline int ir_reduce_is_col(coda_reduce_kind k) { return ir_reduce_part(k) == IR_PART_COL; }
/* The half-split segment of p for a domain of N columns: S, N for
 * CODA_PAIR_SPLIT_ROW, 0 for adjacent pairs and elem mode. */
static inline int64_t ir_split_width(const struct coda_program_s *p, int64_t N) {
  if (!p->pair_mode || !p->pair_split) return 0;
  return p->pair_split == CODA_PAIR_SPLIT_ROW ? N : p->pair_split;
}
/* The domain rules of the mode for N columns and the tiling's tile_n: pair
 * mode needs an even N; half-split pairs need N a multiple of S and either
 * tile_n a multiple of S (a tile holds whole segments) or S/2 a multiple of
 * tile_n (a tile lies in one half of a segment). CODA_ERR_SHAPE with the
 * reason in ctx (which may be NULL). */
coda_status ir_check_domain(coda_context ctx, const struct coda_program_s *p, int64_t N, int tile_n);
const char *ir_finish_kind_name(coda_finish_kind k);
/* Why the program cannot read finisher f's result (a segmented one), or
 * NULL: a row statistic is read as its row's value, a column statistic
 * (colsum, colmax) as its column's, a total as the one value. */
const char *ir_stat_unreadable(const struct coda_program_s *p, int f);
/* The argument kind of finisher f's result: ROW, COL or SCALAR (a total). */
coda_arg_kind ir_finish_arg_kind(const struct coda_program_s *p, int f);
/* 1 if p reads a finished statistic or has a total: it runs as a pass list. */
int ir_needs_passes(const struct coda_program_s *p);

/* 1 if `s` is a reserved word of the language (not usable as a name). */
int ir_is_reserved(const char *s);

/* Allocation and the owned strings. ir_finalize (re)builds p->text,
 * p->ir_dump and, for a program that needs them, its pass lists; it fails
 * when out of memory or when the program cannot be split (a message). */
struct coda_program_s *ir_program_alloc(void);
coda_status ir_finalize(coda_context ctx, struct coda_program_s *p);
char *ir_print_text(const struct coda_program_s *p);
char *ir_print_listing(const struct coda_program_s *p);

/* A deep copy of p without its text and listing (ir_finalize builds them);
 * NULL when out of memory. The passes below start from one. */
struct coda_program_s *ir_clone(const struct coda_program_s *p);
/* Renumbers the registers in instruction order (the order the parser gives
 * them), after a pass removed or moved instructions; with drop_dead, first
 * removes every instruction whose results no store, reduction or kept
 * instruction uses. Fails only when out of memory. */
coda_status ir_compact(struct coda_program_s *p, int drop_dead);

/* Structural equality of two programs (source positions are ignored;
 * register names are compared when compare_names is nonzero). On a
 * difference returns 0 and describes the first one in why. */
int ir_equal(const struct coda_program_s *a, const struct coda_program_s *b,
             int compare_names, char *why, size_t why_len);

/* The unfused form of a GEMM-epilogue program (pass_unfuse.c): the same
 * program as a map that reads the accumulator from a new tile input
 * `input` (dtype `dtype`, full width: in pair mode a pair read by the same
 * lanes) declared before every other input, instead of from `acc`. Mode,
 * outputs, reductions and finishers are unchanged (a rowpick's index input
 * keeps naming the same input). Fails (CODA_ERR_TYPE) when `input` is
 * reserved or already a name of p, or p has the most inputs allowed. */
coda_status ir_unfuse(coda_context ctx, const struct coda_program_s *p, const char *input,
                      coda_dtype dtype, struct coda_program_s **out);

/* The variants of a program as passes (docs/language.md, "Variants as
 * passes"); each fails with a message naming what was wrong and what is
 * allowed, and validates its result.
 *
 * ir_drop (pass_drop.c): p without the outputs and finishers named in
 * names[0..n), and without the computations only they used. */
coda_status ir_drop(coda_context ctx, const struct coda_program_s *p, const char *const *names, int n,
                    struct coda_program_s **out);
/* ir_keep (pass_keep.c): p that also stores its named value `value` as a
 * new last output `output` of dtype `dtype`. */
coda_status ir_keep(coda_context ctx, const struct coda_program_s *p, const char *value, const char *output,
                    coda_dtype dtype, struct coda_program_s **out);
/* ir_fold (pass_fold.c): p with the row inputs that the rule program
 * `rule` defines as named values replaced by those definitions, over the
 * rule's inputs and parameters (see pass_fold.c for the placement rules). */
coda_status ir_fold(coda_context ctx, const struct coda_program_s *p, const struct coda_program_s *rule,
                    struct coda_program_s **out);

/* The pass list of a program that reads a finished statistic or has a
 * total (pass_split.c; docs/language.md, "Whole operators in one file").
 * Each pass is an ordinary program over its domain: the pass of level 0
 * (the GEMM's epilogue when it reads acc, else a map over M x N), a map
 * over M x N per later level, and after a level with totals a map over
 * M x 1 that sums their row partials (`colsum` of a `rowsum` input).
 * Values a later pass uses are carried in temporaries: tiles written by
 * the pass that computes them (`half` in pair mode), the totals' row
 * partials. A finished statistic a later pass reads is a `row`, `col` or
 * `scalar` input of that pass, named as its finisher. */
#define IR_MAX_PASSES 8
typedef enum { IR_PASS_GEMM, IR_PASS_MAP, IR_PASS_ROWS } ir_pass_kind;
typedef struct ir_pass {
  ir_pass_kind kind;              /* GEMM: M x N, reads acc; MAP: M x N; ROWS: M x 1 */
  struct coda_program_s *prog;    /* owned */
  int nread;                      /* finishers of prog that a later pass reads: */
  int read[CODA_MAX_FINISHES];    /* the runner finishes them after this pass */
} ir_pass;
typedef struct ir_passes {
  int npasses;
  ir_pass pass[IR_MAX_PASSES];
  int ntemps;
  char temp[CODA_MAX_INPUTS * IR_MAX_PASSES][CODA_NAME_MAX]; /* names of the temporaries */
  int temp_pass[CODA_MAX_INPUTS * IR_MAX_PASSES];            /* the pass that writes each */
  coda_dtype dtype;               /* of the carried tiles and statistics */
  char *text;                     /* the printable list, owned */
} ir_passes;
/* Builds p's pass list with temporaries of dtype (F32 or F64) into *out;
 * CODA_ERR_TYPE with a message when p cannot be split (too many passes,
 * inputs or outputs in one). */
coda_status ir_passes_build(coda_context ctx, const struct coda_program_s *p, coda_dtype dtype,
                            ir_passes **out);
void ir_passes_free(ir_passes *l);
/* The pass list a run in ctx uses (f64 temporaries in exact mode), or NULL
 * for a program of one pass. */
const ir_passes *ir_passes_for(coda_context ctx, const struct coda_program_s *p);
/* The pass, of the pass list for dtype, that holds finisher `name`, and the
 * finisher's index in its program; -1 if none. */
int ir_passes_find_finish(const ir_passes *l, const char *name, int *fi);

/* The built-in programs (builtin.c): the files of programs/ and the
 * variants derived from them by the passes above. ir_builtin_count is the
 * number of names coda_builtin_program_name gives; ir_builtin_variant
 * derives the variant `name` (CODA_ERR_INVALID_ARGUMENT when it is not
 * one), ir_builtin_variant_source names its source (NULL when not one). */
int ir_builtin_count(void);
coda_status ir_builtin_variant(coda_context ctx, const char *name, struct coda_program_s **out);
const char *ir_builtin_variant_source(const char *name);

#ifdef __cplusplus
}
#endif

#endif
