/* Plans: a Transformer block (or head) written down as an explicit list of
 * steps over named buffers.
 *
 * A plan is data. Each step is one call of the public API:
 *
 *   PLAN_GEMM      coda_gemm_epilogue with a built-in program
 *                  (acc = op(A)·op(B), then the program on acc)
 *   PLAN_MAP       coda_map: a built-in program over an M x N domain, no GEMM
 *   PLAN_FINISH    coda_finish: one `finish` statement of a program
 *                  (partials -> vector)
 *   PLAN_MATMUL    coda_gemm: D = alpha·op(A)·op(B) (+ D), no epilogue
 *                  (weight gradients, plain dgrads)
 *   PLAN_ATTN_FWD  coda_attention_forward (causal GQA on packed qkv)
 *   PLAN_ATTN_BWD  coda_attention_backward
 *   PLAN_ZERO      small op: fill a buffer with zeros (a device kernel on a
 *                  device backend; use only where no program can do it)
 *   PLAN_COPY      small op: dst = src with dtype conversion
 *
 * Every step belongs to a phase (forward or backward). Buffers are named,
 * have a fixed shape and dtype, and are allocated by the executor on first
 * use unless the caller binds its own memory (coda_plan_bind), which is how
 * the output of one block becomes the input of the next without a copy.
 * Buffers may carry host initial values (RoPE tables, positions, constants),
 * written when the buffer is allocated.
 *
 * Because steps only call the public API, the same plan runs on any
 * backend; only allocation and the host ops are backend specific.
 *
 * Building a plan: create it, declare buffers, load programs by built-in
 * name, append steps. Builder calls are sticky: the first failure is kept
 * (with its message on the context) and every later call is a no-op, so a
 * builder can be written as straight-line code and checked once with
 * plan_status().
 *
 *   coda_plan p;
 *   plan_create(ctx, "llama_block", &p);
 *   plan_buffer(p, "x", CODA_BF16, M, D, PLAN_ROLE_INPUT);
 *   ...
 *   plan_gemm(p, CODA_PHASE_FORWARD, "qkv", "llama_qkv_rope",
 *             CODA_N, "h1", CODA_T, "wqkv", tiling,
 *             "r=rstd1 pos=pos freq=freq qkv=qkv");
 *   if (plan_status(p) != CODA_OK) ...
 *
 * Bindings are a space-separated list of ARG=BUFFER (program argument name
 * = plan buffer name). A binding to a buffer that does not exist yet
 * creates it, if the argument is a reduction partial, as an F32 (F64 in
 * exact mode) temporary with the shape the program reports for the step's
 * M, N and tiling (coda_program_arg_shape). Every other buffer must be
 * declared first.
 *
 * Programs are loaded through plan_builtin, so in exact mode (fp64
 * context) their floating declarations are retyped to f64 and a plan
 * declares its buffers f64. On a device backend the executor allocates
 * with coda_malloc, uploads initial values, and runs the host ops
 * (copy, zero) on the device.
 *
 * The implementation, one concern per file: plan_build.c (builder:
 * buffers, programs), plan_layout.c (allocation, binding, the
 * liveness-packed arena of temporaries), plan_run.c (executor, fusion
 * switch, the table of step kinds), plan_tune.c (coda_plan_tune_fusion),
 * plan_print.c (printer); each step kind of step_kinds.def in a file of
 * its own: step_program.c (gemm, map, finish: bindings resolved to the
 * program's argument indices when the step is built, fusion off),
 * step_matmul.c, step_attention.c, step_host.c (zero, copy);
 * plan_internal.h holds what they share. */
#ifndef CODA_NN_PLAN_H
#define CODA_NN_PLAN_H

#include "coda_nn.h"

#include <stdio.h>

#define PLAN_NAME_MAX 32
#define PLAN_MAX_BINDS 20

/* The kinds of nn/step_kinds.def, and their number. */
typedef enum plan_step_kind {
#define PLAN_STEP_KIND(id, public, ops) PLAN_##id,
#include "nn/step_kinds.def"
#undef PLAN_STEP_KIND
} plan_step_kind;
enum {
  PLAN_STEP_KINDS = 0
#define PLAN_STEP_KIND(id, public, ops) +1
#include "nn/step_kinds.def"
#undef PLAN_STEP_KIND
};

/* What a buffer is to the caller (printing and documentation; saved
 * activations are the forward buffers the backward phase reads). */
typedef enum plan_role {
  PLAN_ROLE_INPUT = 0, /* activation given by the caller (x, targets, dx_out) */
  PLAN_ROLE_PARAM,     /* weight */
  PLAN_ROLE_OUTPUT,    /* result of the forward (x_out, loss) */
  PLAN_ROLE_GRAD,      /* result of the backward (dx, dW...) */
  PLAN_ROLE_SAVED,     /* written in forward, read in backward */
  PLAN_ROLE_TEMP,      /* scratch within one phase */
  PLAN_ROLE_CONST      /* tables with initial values (rope, positions) */
} plan_role;

typedef struct plan_buf {
  char name[PLAN_NAME_MAX];
  coda_dtype dtype;
  int64_t rows, cols;
  plan_role role;
  double *init;  /* rows*cols initial values (row-major), or NULL */
  void *data;    /* NULL until allocated or bound */
  int64_t ld;    /* of the bound view (cols when owned) */
  int owned;     /* data was allocated by the executor */
  int live_first, live_last; /* steps of the first and last reference in run order
                              * (forward, then backward), -1 if none (plan_layout) */
  int64_t arena_off;         /* byte offset in the plan's temporary arena, -1 when the
                              * buffer has memory of its own (plan_layout) */
  int alias;                 /* index of the buffer whose memory it is (plan_buffer_alias,
                              * plan_buffer_view), -1 for memory of its own */
  int reshape;               /* the alias is another shape of the same contiguous
                              * memory (plan_buffer_view), not a write in place */
} plan_buf;

typedef struct plan_bind {
  char arg[PLAN_NAME_MAX]; /* program argument */
  int index;               /* its index in the program's signature (coda_program_arg) */
  int buf;                 /* index into plan buffers */
} plan_bind;

/* Causal grouped-query attention on packed qkv: rows m = b·T + t, columns
 * [Q heads | K heads | V heads], head_dim each. */
typedef struct plan_attention {
  int64_t batch, seq;
  int n_heads, n_kv_heads, head_dim;
  double scale;     /* the scores' scale; 0: 1/sqrt(head_dim) */
  int window;       /* > 0: query t sees keys t - window < j <= t */
  int qkv, o, lse;  /* forward: qkv -> o (M, Hq·hd), lse (M, Hq) f32 */
  int dout, dqkv;   /* backward: also reads qkv, o, lse */
  int pos, freq, zp; /* backward with the RoPE backward fused (plan_attention_bwd_rope),
                      * else -1 */
} plan_attention;

typedef struct plan_step {
  plan_step_kind kind;
  coda_phase phase;
  char label[48];        /* short description for printing and errors */
  int prog;              /* GEMM, MAP, FINISH: index into plan programs */
  char finish[PLAN_NAME_MAX]; /* FINISH: the finish statement's name */
  int finish_index;      /* FINISH: its result's argument index, -1 if none */
  coda_transpose ta, tb; /* GEMM, MATMUL */
  int a, b;              /* GEMM, MATMUL operands; COPY: a = source */
  int d;                 /* MATMUL: result; ZERO, COPY: destination */
  float alpha;           /* MATMUL */
  int accumulate;        /* MATMUL: D += ... */
  int64_t M, N;          /* domain (GEMM: derived from A and B) */
  coda_tiling tiling;
  int nbind;
  plan_bind bind[PLAN_MAX_BINDS];
  plan_attention attn;   /* ATTN_FWD, ATTN_BWD */
  int unfused;           /* GEMM: runs as a plain GEMM + map pass (coda_plan_set_fused,
                          * coda_plan_tune_fusion) */
  int sched;             /* GEMM, fused: CODA_SCHED_* (coda_plan_tune_fusion on CUDA) */
  double tuned_us[3];    /* GEMM: microseconds per run measured by coda_plan_tune_fusion,
                          * [fused (pingpong on CUDA), fused cooperative (CUDA only),
                          * unfused]; 0 = not measured */
  int tuned_cached;      /* GEMM: the choice and times came from the context's tuning
                          * cache (base/tune_cache.h), no timing ran */
  int64_t acc_off;       /* GEMM, unfused: its accumulator's offset in the temporary
                          * arena, -1 for none (then the plan's acc_tmp) */
} plan_step;

typedef struct plan_program {
  char name[PLAN_NAME_MAX]; /* built-in name (programs/NAME.coda) */
  coda_program prog;
  coda_program unfused; /* prog reading acc from a tile input (built on demand) */
} plan_program;

struct coda_plan_s {
  char name[PLAN_NAME_MAX];
  coda_context ctx;   /* context used to build and allocate */
  int device;         /* buffers live in device memory (coda_malloc) */
  coda_status status; /* sticky builder status */
  int nbuf, capbuf;
  plan_buf *bufs;
  int nstep, capstep;
  plan_step *steps;
  int nprog, capprog;
  plan_program *progs;
  char *text;         /* printed plan (built on demand) */
  void *acc_tmp;      /* the unfused GEMM steps' accumulator (coda_malloc), or NULL */
  size_t acc_tmp_bytes;
  int no_share;       /* coda_plan_set_share_temps(p, 0): temporaries side by side */
  int arena_live;     /* the layout is in force (arena allocated, or nothing to place) */
  void *arena;        /* the temporaries' memory (coda_malloc), or NULL */
  size_t arena_bytes; /* its size (plan_layout) */
  size_t temp_bytes;  /* sum of the sizes placed in it (plan_layout) */
  int ntemp;          /* buffers placed in it (plan_layout) */
  int has_eps;        /* plan_set_norm_eps was called: programs get parameter eps = norm_eps */
  double norm_eps;
};

/* ---- building ---- */

coda_status plan_create(coda_context ctx, const char *name, coda_plan *out);
/* Sticky status of the builder: CODA_OK or the first failure. */
coda_status plan_status(coda_plan p);
/* Records a failure (message on the plan's context) unless one is already
 * recorded; returns the plan's status. */
coda_status plan_fail(coda_plan p, coda_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Declares a buffer; returns its index, or -1 (duplicate name, bad shape). */
int plan_buffer(coda_plan p, const char *name, coda_dtype dtype, int64_t rows,
                int64_t cols, plan_role role);
/* Index of a buffer, or -1. */
int plan_find(coda_plan p, const char *name);
/* Host initial values for a buffer (rows*cols doubles, copied). */
void plan_buffer_init(coda_plan p, const char *name, const double *values);
/* Buffer `name` lives in buffer `target`'s memory (same shape and dtype):
 * it gets no memory or arena slot of its own, its view is target's (also
 * after target is rebound or laid out again), and it cannot be bound.
 * For a step that writes `name` in place over `target` (an output that is
 * the very same view as a tile input), target's last reader. The plan
 * refuses to run (CODA_ERR_ALIAS) when a step reads target after a step
 * wrote `name` in run order (forward, then backward). Neither may already
 * take part in another alias; `name` has no initial values. */
void plan_buffer_alias(coda_plan p, const char *name, const char *target);
/* Buffer `name` is another shape of buffer `target`'s memory: the same
 * dtype and number of elements, read row-major (target must be contiguous,
 * ld = cols, when the plan runs). Unlike plan_buffer_alias it is no write
 * in place: a step may write either name and a later step read the other
 * (the QK-norm passes view M x (heads hd) as (M heads) x hd, one head per
 * row). It cannot be bound; `target` takes part in no other alias. */
void plan_buffer_view(coda_plan p, const char *name, const char *target);
/* Index of the buffer whose memory buffer i uses (i itself without alias). */
int plan_storage(coda_plan p, int i);

/* A built-in program as the context runs it: verbatim, or in exact mode
 * (fp64 context) with every floating declaration (bf16, f16, f32) retyped
 * to f64, since exact mode runs on f64 tensors. x2 declarations need a
 * 16-bit dtype, so programs with x2 operands have no exact-mode form. */
coda_status plan_builtin(coda_context ctx, const char *name, coda_program *out);
/* The same with the program's parameter `eps` (the norm epsilon of the
 * built-ins, `param eps = 1e-5`) bound to *eps (coda_program_bind); eps
 * NULL, or a program without that parameter: its default. */
coda_status plan_builtin_eps(coda_context ctx, const char *name, const double *eps,
                             coda_program *out);
/* The programs this plan loads afterwards get parameter `eps` = eps (the
 * Llama plans' RMSNorm epsilon; finite, >= 0). */
void plan_set_norm_eps(coda_plan p, double eps);

/* Loads (once per plan) a built-in program (through plan_builtin);
 * returns its index or -1. */
int plan_program_load(coda_plan p, const char *builtin);
/* The same with the built-in's segment width `per S0` written `per S`
 * (a model's head size in a program written for S0 = 128), loaded before
 * the steps that name it. */
int plan_program_load_seg(coda_plan p, const char *builtin, int s0, int s);

/* Steps. `binds` is "arg=buffer arg=buffer ..." (may be NULL or ""). */
void plan_gemm(coda_plan p, coda_phase phase, const char *label,
               const char *program, coda_transpose ta, const char *A,
               coda_transpose tb, const char *B, coda_tiling tiling,
               const char *binds);
void plan_map(coda_plan p, coda_phase phase, const char *label,
              const char *program, int64_t M, int64_t N, coda_tiling tiling,
              const char *binds);
/* M, N, tiling: those of the GEMM or map that wrote the partials. */
void plan_finish(coda_plan p, coda_phase phase, const char *label,
                 const char *program, const char *finish, int64_t M,
                 int64_t N, coda_tiling tiling, const char *binds);
void plan_matmul(coda_plan p, coda_phase phase, const char *label,
                 coda_transpose ta, const char *A, coda_transpose tb,
                 const char *B, const char *D, float alpha, int accumulate);
void plan_attention_fwd(coda_plan p, coda_phase phase, const char *label,
                        const plan_attention *geometry, const char *qkv,
                        const char *o, const char *lse);
void plan_attention_bwd(coda_plan p, coda_phase phase, const char *label,
                        const plan_attention *geometry, const char *qkv,
                        const char *o, const char *lse, const char *dout,
                        const char *dqkv);
/* The backward with the RoPE backward on its result in the same pass
 * (coda_attention_backward_rope): dqkv receives the rotated gradient and
 * zp (M x heads) the per-head partials of sum qkv * gradient. */
void plan_attention_bwd_rope(coda_plan p, coda_phase phase, const char *label,
                             const plan_attention *geometry, const char *qkv, const char *o,
                             const char *lse, const char *dout, const char *pos,
                             const char *freq, const char *dqkv, const char *zp);
void plan_zero(coda_plan p, coda_phase phase, const char *label,
               const char *dst);
void plan_copy(coda_plan p, coda_phase phase, const char *label,
               const char *src, const char *dst);

/* ---- executing (also public: coda_plan_run, coda_plan_tensor, ...) ---- */

/* Allocates every unbound buffer and writes initial values. */
coda_status plan_alloc(coda_plan p);
/* The program of a GEMM step with fusion off (coda_plan_set_fused): the
 * same program (the IR pass coda_program_unfused) with `acc` read from the
 * tile input PLAN_ACC_INPUT (dtype of the plan's activations: bf16, f64 in
 * exact mode), so it runs as a map after a plain GEMM. Built once per
 * program and kept by the plan. */
#define PLAN_ACC_INPUT "gemm_acc"
coda_status plan_unfused_program(coda_plan p, int prog, coda_program *out);
/* GPU builds only: compiles, or finds in the disk cache, the kernel step k
 * runs on the CUDA backend: with unfused = 0 a GEMM step's fused kernel or a
 * map step's map kernel, with unfused = 1 a GEMM step's program as the map
 * kernel that follows its plain GEMM. *cached = 1 when the kernel came from
 * the cache; *skipped = 1 (and CODA_OK) when the step has no kernel of that
 * kind. For tools that fill the kernel cache ahead of a run. */
coda_status plan_precompile_step(coda_plan p, int k, int unfused, int *cached, int *skipped);

/* Runs step k alone (its phase's earlier steps must have run), for
 * per-step timing in benchmarks. */
coda_status plan_run_step(coda_context ctx, coda_plan p, int k);

/* Writes the plan as text: buffers (shape, dtype, role) and steps. */
void plan_print(coda_plan p, FILE *f);

/* ---- temporaries sharing memory by liveness ---- */

/* A block of `bytes` needed from step `first` to step `last` (inclusive,
 * positions in run order). */
typedef struct plan_interval {
  int first, last;
  size_t bytes;
} plan_interval;
#define PLAN_ARENA_ALIGN 256
/* Places n blocks in one arena so that two blocks whose step intervals
 * intersect never share a byte: blocks by size, largest first (ties by
 * index), each at the lowest PLAN_ARENA_ALIGN-aligned offset clear of the
 * blocks already placed that intersect it in time. off[i] = offset of
 * block i; *arena = the size needed (aligned). Deterministic. Returns 0,
 * or -1 when out of memory or the sizes overflow. */
int plan_pack(const plan_interval *iv, int n, size_t *off, size_t *arena);
/* Computes every buffer's live interval and, when the arena is not
 * allocated yet, the offsets of the temporaries it will hold (see
 * docs/plans.md, "Temporaries share memory"). No allocation of memory
 * the plan keeps. */
coda_status plan_layout(coda_plan p);

#endif
