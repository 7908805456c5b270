/* coda: blocks and plans (Llama-3 and GPT-2 blocks and heads as plans of
 * GEMM + epilogue steps) and the model configurations of the trainer.
 * Includes coda.h. */
#ifndef CODA_NN_PUBLIC_H
#define CODA_NN_PUBLIC_H

#include "coda.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Steps of a plan, in run order (the forward phase's, then the backward
 * phase's; coda_plan_text lists them): their number, and step i's short
 * label (owned by the plan; NULL out of range). */
int coda_plan_num_steps(coda_plan p);
const char *coda_plan_step_label(coda_plan p, int step);
/* What a plan step is (coda_plan_text names the same). */
typedef enum coda_plan_step_kind {
  CODA_PLAN_STEP_GEMM_EPILOGUE = 0, /* coda_gemm_epilogue with a built-in program */
  CODA_PLAN_STEP_MAP = 1,           /* coda_map */
  CODA_PLAN_STEP_FINISH = 2,        /* coda_finish */
  CODA_PLAN_STEP_GEMM = 3,          /* coda_gemm, no epilogue */
  CODA_PLAN_STEP_ATTENTION_FORWARD = 4,
  CODA_PLAN_STEP_ATTENTION_BACKWARD = 5,
  CODA_PLAN_STEP_ZERO = 6,          /* fills a buffer with zeros */
  CODA_PLAN_STEP_COPY = 7           /* copies a buffer */
} coda_plan_step_kind;
/* One step of a plan. The strings are owned by the plan. */
typedef struct coda_plan_step_info {
  coda_plan_step_kind kind;
  coda_phase phase;
  const char *label;    /* as coda_plan_step_label */
  const char *program;  /* GEMM_EPILOGUE, MAP, FINISH: the built-in program's
                         * name; else NULL */
  /* GEMM_EPILOGUE only: */
  int unfused;          /* runs as a plain GEMM + map pass (coda_plan_set_fused,
                         * coda_plan_tune_fusion) */
  coda_epi_schedule schedule; /* fused: the schedule chosen by
                         * coda_plan_tune_fusion on CUDA, AUTO = the rule */
  double tuned_us[3];   /* microseconds per run measured by coda_plan_tune_fusion:
                         * pingpong, cooperative, unfused; 0 = not measured */
  int tuned_cached;     /* the choice and times came from the tuning cache */
} coda_plan_step_info;
coda_status coda_plan_step(coda_plan p, int step, coda_plan_step_info *out);
/* Runs step `step` alone (the earlier steps of its phase must have run),
 * for per-step timing in benchmarks. */
coda_status coda_plan_run_step(coda_context ctx, coda_plan p, int step);
/* Kernel precompilation, to fill the kernel cache ahead of a run (no GPU
 * needed; the plan may be built on a CPU context with the CUDA tiling,
 * coda_preferred_tiling): compiles, or finds in the disk cache, the CUDA
 * kernel that step `step` runs, with unfused = 0 a GEMM + epilogue step's
 * fused kernels (both schedules) or a map step's kernel, with unfused = 1 a
 * GEMM + epilogue step's program as the map kernel that follows its plain
 * GEMM (coda_plan_set_fused). *from_cache (optional) = 1 if every kernel
 * came from the cache; *skipped (optional) = 1, and CODA_OK, when the step
 * has no kernel of that kind. CODA_ERR_NOT_SUPPORTED in a build without
 * CUDA. */
coda_status coda_plan_precompile_step(coda_plan p, int step, int unfused, int *from_cache,
                                      int *skipped);
/* Every step's kernels (unfused = 1: also the unfused variants); stops at
 * the first failure. *n_kernels / *n_compiled (optional): kernels ready,
 * and of those compiled now (not from the cache). */
coda_status coda_plan_precompile(coda_plan p, int unfused, int *n_kernels, int *n_compiled);

/* Llama-3 style block and head.
 *
 * Block (forward): x -> x_out with
 *   x1    = x + Attn(RoPE(RMSNorm(x; wn1) Wqkv^T)) Wo^T
 *   x_out = x1 + SwiGLU(RMSNorm(x1; wn2) Wgu^T) Wd^T
 * RMSNorm(x; w) = x / sqrt(mean(x^2) + eps) * w (eps = norm_eps, default
 * 1e-5), attention causal with
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
 *   by +theta_j = pos * f_j, f_j = coda_rope_inv_freq(rope_theta, hd, &rope,
 *   j) (rope_theta^(-2j/hd) unscaled; the Hugging Face sign). A
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
 *                        For comparison; off by default.
 *   CODA_LLAMA_INFER     forward only (inference, a decoder's prefill): the
 *                        block plan has no backward phase and keeps
 *                        nothing for one. No dx_out, dx or weight-gradient
 *                        buffers; rstd1, o, lse, x1, rstd2 are temporaries;
 *                        the gate/up GEMM runs llama_swiglu_infer (folded:
 *                        llama_swiglu_folded_infer), which stores y and not
 *                        z; qkv (M, Nqkv: rotated Q and K, V) is an output,
 *                        so its K and V columns can be read after the run
 *                        (a KV cache). Not with GRAD_ACT, INPLACE or
 *                        ROPE_MAP (backward flags), nor on the head plan
 *                        (CODA_ERR_INVALID_ARGUMENT).
 *   CODA_LLAMA_KEEP_LOGITS the head's forward also stores the logits
 *                        z = r (h wout^T) (M, vocab; saved) and its
 *                        backward's d loss / d logits is a map over them
 *                        (program llama_ce_bwd_map, dl written over z)
 *                        instead of a GEMM that recomputes them: three
 *                        vocabulary-wide GEMMs a step instead of four, for
 *                        M x vocab activations kept from the forward to
 *                        the backward (h is then a temporary). The same
 *                        bits in exact mode; in bf16 the gradients see
 *                        the logits rounded to bf16. The backward consumes
 *                        z, as with CODA_LLAMA_INPLACE. No effect on
 *                        blocks; not with CODA_LLAMA_INFER. Off by default.
 *   CODA_LLAMA_QK_NORM   the Qwen3 block: per-head RMSNorm of q and k
 *                        before RoPE (src/nn/qwen3.c), with the weights
 *                        wqn, wkn (1, head_dim; gradients dwqn, dwkn).
 *                        No effect on the head. Not with FOLD, ROPE_MAP or
 *                        INFER (CODA_ERR_NOT_SUPPORTED, by name).
 *   CODA_LLAMA_GEMMA3    the Gemma 3 block (src/nn/gemma3.c): the QK-norm
 *                        of CODA_LLAMA_QK_NORM, a post-norm on the
 *                        attention's and the MLP's output before each
 *                        residual add (weights wpa, wpf, 1 x dim;
 *                        gradients dwpa, dwpf) and GeGLU (tanh GELU) for
 *                        SwiGLU. Every norm weight buffer holds the scale
 *                        itself (Gemma's 1 + w: the caller adds the 1).
 *                        No effect on the head. Not with FOLD, ROPE_MAP,
 *                        INFER, NORM_IN or NORM_OUT
 *                        (CODA_ERR_NOT_SUPPORTED, by name). */
#define CODA_LLAMA_NORM_IN 1u
#define CODA_LLAMA_NORM_OUT 2u
#define CODA_LLAMA_FOLD 4u
#define CODA_LLAMA_GRAD_ACT 8u
#define CODA_LLAMA_INPLACE 16u
#define CODA_LLAMA_ROPE_MAP 32u
#define CODA_LLAMA_INFER 64u
#define CODA_LLAMA_KEEP_LOGITS 128u
#define CODA_LLAMA_QK_NORM 256u
#define CODA_LLAMA_GEMMA3 512u

/* RoPE frequency scaling, as Hugging Face transformers defines it
 * (`rope_scaling` / `rope_parameters` with `rope_type`). The unscaled
 * inverse frequency of pair j of a head of hd columns is
 * f_j = theta^(-2j/hd) radians per position.
 *   DEFAULT  f_j (the other fields are ignored)
 *   LINEAR   f_j / factor (positions divided by factor)
 *   LLAMA3   with wavelength w = 2 pi / f_j, L = original_max_position:
 *            w > L / low_freq_factor:   f_j / factor
 *            w < L / high_freq_factor:  f_j
 *            otherwise, s = (L / w - low_freq_factor) /
 *            (high_freq_factor - low_freq_factor):
 *            (1 - s) f_j / factor + s f_j
 * Neither scales the attention (attention factor 1). */
typedef enum coda_rope_type {
  CODA_ROPE_DEFAULT = 0,
  CODA_ROPE_LINEAR = 1,
  CODA_ROPE_LLAMA3 = 2
} coda_rope_type;
typedef struct coda_rope_scaling {
  coda_rope_type type;
  double factor;                 /* LINEAR, LLAMA3: finite, > 0 */
  double low_freq_factor;        /* LLAMA3: finite, > 0 */
  double high_freq_factor;       /* LLAMA3: finite, > low_freq_factor */
  double original_max_position;  /* LLAMA3: the pre-training context, > 0 */
} coda_rope_scaling;
/* The (scaled) inverse frequency of pair j (0 <= j < head_dim/2) in
 * radians per position; NaN for arguments out of range. */
double coda_rope_inv_freq(double theta, int64_t head_dim, const coda_rope_scaling *s, int64_t j);
/* CODA_OK or CODA_ERR_INVALID_ARGUMENT naming the bad field (NULL: none). */
coda_status coda_rope_scaling_check(coda_context ctx, const coda_rope_scaling *s);

typedef struct coda_llama_config {
  int64_t dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
  int64_t batch, seq;
  double rope_theta;   /* RoPE base, e.g. 500000 */
  coda_dtype dtype;    /* CODA_BF16 or CODA_F64 */
  coda_tiling tiling;  /* partial-reduction tiling; {0, 0} = 64 x 64 */
  unsigned flags;      /* CODA_LLAMA_NORM_IN | CODA_LLAMA_NORM_OUT | CODA_LLAMA_FOLD |
                          CODA_LLAMA_GRAD_ACT | CODA_LLAMA_INPLACE | CODA_LLAMA_ROPE_MAP |
                          CODA_LLAMA_INFER | CODA_LLAMA_KEEP_LOGITS | CODA_LLAMA_QK_NORM |
                          CODA_LLAMA_GEMMA3 */
  double norm_eps;     /* RMSNorm epsilon (finite, >= 0), written into the
                          plans' program text; 0 = 1e-5 */
  coda_rope_scaling rope; /* frequency scaling of the RoPE table (zero: none) */
  /* appended for Gemma 3 (zero: as before) */
  double attn_scale;   /* block: the attention scores' scale; 0 = 1/sqrt(head_dim) */
  int window;          /* block: > 0, query t attends to keys t - window < j <= t
                          (a sliding window) */
  double logit_softcap; /* head: > 0, the logits are cap * tanh(l / cap) (not with
                           FOLD or KEEP_LOGITS) */
} coda_llama_config;

/* A small default configuration (dim 64, heads 4/2, head_dim 16, ffn 128,
 * vocab 256, batch 2, seq 16, theta 10000, no RoPE scaling, eps 1e-5,
 * bf16). */
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

/* Unfused reference of the Llama-3 block and LM head, written the ordinary
 * way in double (RMSNorm, linear layers, half-split Hugging Face RoPE,
 * causal GQA attention, SwiGLU, cross-entropy, every backward by hand),
 * sharing no code with the plans: to check a plan against. It uses the
 * standard weight layout: separate gate and up matrices and half-split
 * RoPE rows in Wq and Wk (coda_llama_qkv_row maps them to the plan's).
 * act: CODA_F64 rounds nothing (the exact reference); CODA_BF16 rounds
 * every activation and activation gradient the ordinary block materializes
 * to bf16, and rstd, lse, the loss and the weight gradients to f32.
 *
 * Row-major host arrays. Shapes with M = batch*seq, HQ = n_heads*hd,
 * HKV = n_kv_heads*hd: wqkv (HQ + 2 HKV, D) in [Q | K | V] order with
 * half-split RoPE pairs (j, j + hd/2) in each Q and K head; wo (D, HQ);
 * wgate, wup (F, D); wd (D, F); wn1, wn2 (D). */
typedef struct coda_llama_ref_weights {
  double *wqkv, *wo, *wgate, *wup, *wd, *wn1, *wn2;
} coda_llama_ref_weights;
/* Block: x -> x_out (M x D); if dx_out is not NULL also the backward: dx
 * (M x D) and the weight gradients into grad (same shapes).
 * CODA_ERR_OUT_OF_MEMORY, CODA_ERR_INVALID_ARGUMENT for NULL inputs. */
coda_status coda_llama_reference_block(const coda_llama_config *cfg, coda_dtype act,
                                       const coda_llama_ref_weights *w, const double *x,
                                       double *x_out, const double *dx_out, double *dx,
                                       coda_llama_ref_weights *grad);
/* Head: *loss = mean over rows with 0 <= targets[m] < vocab of
 * logsumexp(l_m) - l_m[targets[m]], l = RMSNorm(x; wnf) Wout^T; row_loss
 * (M, may be NULL) each row's term (0 for ignored rows). If dx is not NULL
 * also the gradients: dx (M x D), dwnf (D), dwout (V x D). */
coda_status coda_llama_reference_head(const coda_llama_config *cfg, coda_dtype act,
                                      const double *wnf, const double *wout, const double *x,
                                      const int32_t *targets, double *loss, double *row_loss,
                                      double *dx, double *dwnf, double *dwout);

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
  double norm_eps;    /* LayerNorm epsilon (finite, >= 0); 0 = 1e-5 */
  int64_t vocab;      /* the head plan's vocabulary (the block ignores it) */
} coda_gpt2_config;

/* A small configuration (dim 64, 4 heads, ffn 256, batch 2, seq 16,
 * vocab 256, eps 1e-5, bf16). */
coda_gpt2_config coda_gpt2_default_config(void);
coda_status coda_gpt2_block_plan(coda_context ctx, const coda_gpt2_config *cfg,
                                 coda_plan *out);

/* GPT-2 head plan (src/nn/gpt2_head.c): final LayerNorm (with bias), tied
 * LM head and mean cross-entropy, forward and backward; the logits are
 * never stored (the backward recomputes them).
 *   inputs   x (M, dim) bf16, targets (M, 1) i32 (outside [0, vocab): ignored)
 *   weights  lnf_g, lnf_b (1, dim), wout (vocab, dim)
 *   outputs  loss (1, 1) f32: the mean over counted targets
 *   grads    dx (M, dim), dlnf_g, dlnf_b (1, dim) f32, dwout (vocab, dim)
 *            (f32; bf16 with CODA_GPT2_GRAD_ACT)
 * CODA_GPT2_FOLD is not taken by the head. */
coda_status coda_gpt2_head_plan(coda_context ctx, const coda_gpt2_config *cfg,
                                coda_plan *out);

/* -------------------------------------------------------- model configs */

/* The architecture of a model (docs/models.md). Zero is Llama, so a
 * zero-initialized configuration keeps meaning Llama. */
typedef enum coda_model_family {
  CODA_FAMILY_LLAMA = 0, /* Llama 3: RMSNorm, RoPE, GQA, SwiGLU, no biases */
  CODA_FAMILY_QWEN3 = 1, /* Llama plus a per-head RMSNorm on q and k before RoPE */
  CODA_FAMILY_GPT2 = 2,  /* GPT-2: LayerNorm with bias, learned positions, GELU (tanh),
                          * a bias on every linear, the head tied to the embedding */
  CODA_FAMILY_GEMMA3 = 3 /* Gemma 3 (text): RMSNorm with (1 + w), embeddings scaled by
                          * sqrt(dim), QK-norm, pre- and post-norms around attention
                          * and MLP, GeGLU (tanh), sliding-window layers */
} coda_model_family;

typedef struct coda_model_config {
  int vocab, dim, layers, heads, kv_heads, ffn, seq;
  int tied;          /* 1: the LM head reuses the token embedding */
  double rope_theta; /* RoPE base (GPT-2 has no RoPE: unused) */
  double norm_eps;   /* RMSNorm epsilon (also of Qwen3's q/k norms; GPT-2's LayerNorm's) */
  coda_rope_scaling rope; /* RoPE frequency scaling (zero: none) */
  coda_model_family family; /* zero: Llama */
  int head_dim;      /* the width of one attention head; 0: dim / heads */
  /* A local layer's token attends to itself and the sliding_window - 1
   * positions before it (0: no local layers). Llama (Mistral's window):
   * every layer is local, sliding_pattern is 0. Gemma 3's (the rest are 0
   * in the other families, and both are in Qwen3 and GPT-2): layer i is
   * global when (i + 1) % sliding_pattern == 0, local
   * otherwise; local layers rotate with rope_local_theta (0: rope_theta);
   * scores are scaled by attn_scalar^-1/2 (0: head_dim); logit_softcap > 0
   * caps the logits as cap * tanh(logits / cap) (0: none). */
  int sliding_window, sliding_pattern;
  double rope_local_theta, attn_scalar, logit_softcap;
} coda_model_config;

/* "llama", "qwen3", "gpt2", "gemma3"; NULL for a value that names no family. */
const char *coda_model_family_name(coda_model_family f);
/* The family a name gives (as coda_model_family_name writes it). */
coda_status coda_model_family_from_name(coda_context ctx, const char *name,
                                        coda_model_family *out);
/* The head width of c: c->head_dim, or dim / heads when it is 0. */
int coda_model_head_dim(const coda_model_config *c);

/* Named configurations: "tiny" (d 128, 2 layers, 4/2 heads, ffn 384, seq
 * 128, vocab 256), "d512" (d 512, 8 layers, 8/4 heads, ffn 1536, seq 512),
 * "1b" and "8b" (Llama-3 shapes, vocab 128256). */
coda_status coda_model_config_named(const char *name, coda_model_config *out);
coda_status coda_model_config_check(coda_context ctx,
                                    const coda_model_config *c);

#ifdef __cplusplus
}
#endif
#endif /* CODA_NN_PUBLIC_H */
