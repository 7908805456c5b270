/* Internal interface of the epilogue code generator (not installed, not
 * used outside src/backends/cuda/epi_*.c).
 *
 * The functor is printed by a short driver (coda_epi_functor_source in
 * epi_codegen.c) that owns the loop structure (fragment, chunks of EPI_JC
 * column pairs, groups (j, h), points) and, at each point of it, visits the
 * program's arguments in argument order (inputs, outputs, reductions) and
 * calls the hook of that phase of each argument's emitter. One emitter per
 * argument kind, in the manner of an epilogue visitor tree:
 *  - epi_emit_args.c: scalar, row vector, column vector, tile input, rowsum
 *    input (declarations, per-fragment loads, per-chunk and per-group loads,
 *    the value read at a point) and the output store (per point value,
 *    direct or staged store, the staged chunk's store by TMA or vectors);
 *  - epi_emit_reduce.c: the reduction kinds (state, fold per point, quad
 *    combine and partial write, colsum's cross-warp step);
 *  - epi_emit_ops.c: one instruction's CUDA (the op switch) and the
 *    row-invariant hoisting;
 *  - epi_emit_stage.c: the staging plan (which tile inputs and outputs go
 *    through the shared scratch, at which offsets) and the chunk fetches
 *    (cp.async or TMA).
 * Shared memory: each emitter declares the scratch it holds for the whole
 * fragment (epi_emitter.smem: the colsum slots, 4 warps x BN floats per
 * colsum reduction, in reduction order); the staging plan places the
 * staged tile inputs and outputs after them. */
#ifndef CODA_CUDA_EPI_EMIT_H
#define CODA_CUDA_EPI_EMIT_H

#include "backends/cuda/epi_codegen.h"

#include "base/strbuf.h"
#include "lang/ir.h"

/* column pairs per load chunk */
#define EPI_JC 4

/* Staging plan: tile inputs and outputs whose chunk rows (32 columns) are
 * 32-128 bytes go through the shared scratch in 64 x 32 chunks (see
 * epi_plan_staging in epi_emit_stage.c). */
typedef struct stage_plan {
  int in_off[CODA_MAX_INPUTS], in_rb[CODA_MAX_INPUTS];    /* -1: direct */
  int out_off[CODA_MAX_OUTPUTS], out_rb[CODA_MAX_OUTPUTS];
  int dbl;      /* inputs double-buffered */
  int out_dbl;  /* outputs double-buffered */
  int frag;     /* half-split pairs: outputs staged for the whole fragment
                 * (one buffer per chunk), stored after its last chunk */
  int nin, nout;
} stage_plan;

/* The phases of the functor at which the driver visits the arguments, in
 * the order of the generated code. */
typedef enum epi_phase {
  EPI_STAGE_DECL,  /* operator(): alignment flags of staged views */
  EPI_BEGIN,       /* once per fragment, before the loops */
  EPI_CHUNK_DECL,  /* per chunk: the chunk's load buffers */
  EPI_PAIR_LOAD,   /* per column pair of the chunk's loads */
  EPI_HALF_LOAD,   /* per column pair and row half of the chunk's loads */
  EPI_FOLD_DECL,   /* per chunk, after the loads: values folded after it */
  EPI_GROUP,       /* per column pair j of the compute loop */
  EPI_HALF,        /* per group (j, h), before the points */
  EPI_POINT,       /* per point, after the program's instructions */
  EPI_STORE,       /* per group, after the points: stores */
  EPI_FLUSH,       /* per group, after the stores: segment ends */
  EPI_GROUP_END,   /* per column pair j, after its row halves */
  EPI_CHUNK_FOLD,  /* per chunk, after its column pairs */
  EPI_CHUNK_STORE, /* per chunk, after the staging barrier */
  EPI_END_ROW,     /* after the chunks, inside a loop over h (gen.any_row_end) */
  EPI_END,         /* after the chunks, inside the colsum block (gen.ncol) */
  EPI_NPHASES
} epi_phase;

struct gen;
typedef void (*epi_hook)(struct gen *g, int idx);

/* One argument kind: a hook per phase (NULL: nothing there); idx is the
 * input, output or reduction index. name: the kind (for inputs, as the
 * generated source's argument list names it). read: the expression of an
 * input read with a lane at the current point (inputs only). smem: bytes of the
 * shared scratch the argument holds for the whole fragment, placed at the
 * start of the scratch in argument order (colsum: its 4 warps' column
 * sums); the staged tile inputs and outputs are placed after these by the
 * staging plan. */
typedef struct epi_emitter {
  const char *name;
  epi_hook hook[EPI_NPHASES];
  void (*read)(struct gen *g, int k, coda_lane lane);
  long smem;
} epi_emitter;

typedef struct epi_arg {
  const epi_emitter *em;
  int idx;
} epi_arg;

typedef struct gen {
  const struct coda_program_s *p;
  coda_strbuf *b;
  int pair;
  /* half-split pairs (mode pair split S): S, else 0. A point is then two
   * values of the group of its first column pair j (j / (S/16) even) and
   * two of the pair j + S/16 (8 * S/16 = S/2 columns on); the points are
   * those of elem mode, e = 0, 1 */
  int split;
  int arg_out0, arg_red0;
  /* per register (plan_hoist): hoist = math computed once per fragment
   * row before the loops; pre = computed there (hoisted math and the
   * constants and row-invariant reads it needs); pp = read per point (by
   * an instruction that is not hoisted, a store or a reduction) */
  unsigned char hoist[2 * CODA_MAX_INSTRS], pre[2 * CODA_MAX_INSTRS], pp[2 * CODA_MAX_INSTRS];
  /* the plan of the functor */
  int used[CODA_MAX_INPUTS]; /* inputs the program reads */
  int ncol;                  /* colsum reductions */
  int any_row_end;           /* row folds flushed after the chunks */
  stage_plan sp;
  int staged;                 /* something is staged */
  int slot[CODA_MAX_INPUTS];  /* TMA slots of staged inputs */
  int tma_in;                 /* staged inputs may come by TMA */
  /* the sm_80 mainloop: no TMA, mbarriers or bulk copies (staged outputs
   * leave by stage_out only); ns names its namespace (the seam's types) */
  int sm80;
  const char *ns;
  long scratch;
  /* the arguments the driver visits: used inputs, outputs, reductions */
  epi_arg args[CODA_EPI_MAX_ARGS];
  int nargs, nin_args;
  const epi_emitter *in_em[CODA_MAX_INPUTS];
} gen;

/* ---- epi_emit_args.c */
const epi_emitter *epi_input_emitter(coda_arg_kind k);
extern const epi_emitter epi_output_emitter;
/* Expression of input k read with lane `lane` at the current point (its
 * emitter's read). */
static inline void emit_read(gen *g, int k, coda_lane lane) { g->in_em[k]->read(g, k, lane); }

/* ---- epi_emit_reduce.c */
const epi_emitter *epi_reduce_emitter(const ir_reduce *r);
/* Row-type reductions folded per thread over a row (g >= 8 columns). */
int epi_is_row_fold(const ir_reduce *r);
int epi_seg_width(const ir_reduce *r);

/* ---- epi_emit_ops.c */
void epi_emit_instr(gen *g, const ir_instr *in);
void epi_plan_hoist(gen *g);
void epi_emit_hoist_prelude(gen *g);
void epi_emit_point_instrs(gen *g);

/* ---- epi_emit_stage.c */
int epi_dt_code(coda_dtype t);
int epi_dt_size(coda_dtype t);
int epi_chunk_row_bytes(coda_dtype t, coda_width w);
int epi_program_reads(const struct coda_program_s *p, int used[CODA_MAX_INPUTS]);
/* Bytes of the scratch the program's arguments hold for the whole fragment
 * (the sum of their emitters' smem). */
long epi_fixed_smem(const struct coda_program_s *p);
void epi_plan_staging(const struct coda_program_s *p, const int *used, long scratch, stage_plan *sp);
int epi_input_slots(const struct coda_program_s *p, const stage_plan *sp, int *slot);
int epi_plan_all_staged(const struct coda_program_s *p, const int *used, const stage_plan *sp);
int epi_plan_staged_count(const stage_plan *sp);
/* Values per row of a view (L), the first value of chunk jc (v0), the byte
 * of the thread's value(s) of column pair jj inside a chunk row. */
const char *epi_view_len(coda_width w);
const char *epi_view_v0(coda_width w, const char *jc, char *out, size_t n);
const char *epi_view_byte(coda_width w);
/* The alignment flag al%d of a staged view (argument slot k, SZ-byte values). */
void epi_emit_align_flag(gen *g, int k, int size);
void epi_emit_tin(gen *g, const char *indent);
void epi_emit_fetch(gen *g, const char *jc, const char *buf, const char *cp_tail, const char *indent);

#endif
