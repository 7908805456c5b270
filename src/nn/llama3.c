/* The Llama-3 block and LM head as plans (see include/coda.h, nn section,
 * and docs/plans.md, "Llama-3 block plan").
 *
 * Forward of the block (M = batch*seq rows):
 *   norm1     map   h1 = x*wn1, rstd1                      (llama_rmsnorm)
 *   qkv       gemm  qkv = RoPE(rstd1 * (h1 Wqkv^T))        (llama_qkv_rope)
 *   attention       o, lse = causal GQA attention(qkv)
 *   out_proj  gemm  x1 = x + o Wo^T, h2 = x1*wn2, rstd2    (llama_residual_norm)
 *   gate_up   gemm  z = rstd2 * (h2 Wgu^T), y = SwiGLU(z)  (llama_swiglu)
 *   down      gemm  x_out = x1 + y Wd^T                    (llama_residual)
 * Saved for the backward: x, rstd1, qkv, o, lse, x1, rstd2, z.
 * Chained (flags): norm1 is skipped and h1, rstd1 are inputs (NORM_IN);
 * the down GEMM also produces the next norm's h_next, rstd_next (NORM_OUT).
 *
 * Backward, given dx_out:
 *   down_dgrad      gemm  dz, y, zdz2 from dx_out Wd       (llama_swiglu_bwd; in
 *                         exact mode, with no packed f64 pairs, a plain GEMM
 *                         and the map llama_swiglu_bwd_pairs)
 *   dwd             matmul dx_out^T y
 *   gate_up_dgrad   gemm  dx1 = dx_out + RMSNorm-bwd(dz Wgu), post2, dwn2
 *   dwgu            matmul dz^T post2
 *   do, dwo         matmul dx1 Wo, dx1^T o
 *   attention bwd         dzqkv = R^-1 dqkv (the RoPE backward fused into
 *                         its stores), zp1 = per-head sums of qkv dqkv
 *                         (coda_attention_backward_rope); with
 *                         CODA_LLAMA_ROPE_MAP the attention backward writes
 *                         dqkv and a map pass does the same (llama_rope_bwd)
 *   zdz1            finish zdz1 = sum zp1 over its columns
 *   qkv_dgrad       gemm  dx = dx1 + RMSNorm-bwd(dzqkv Wqkv), post1, dwn1
 *   dwqkv           matmul dzqkv^T post1
 *
 * Folded (CODA_LLAMA_FOLD): the row finishers go; every GEMM that reads a
 * row statistic reads its producer's rowsum partials (program input kind
 * rowsum, programs *_folded) and computes it in its epilogue:
 *   rstd1, rstd2, rstd_next hold the M x ceil(D/tile_n) partials of x^2
 *   (written by norm1 / out_proj / down), read by qkv_rope, gate_up and the
 *   two RMSNorm-backward dgrads, which compute rsqrt(sum/D + eps) per row;
 *   the Sigma z*dz partials of down_dgrad and the attention / rope backward
 *   are read as they are
 *   by gate_up_dgrad and qkv_dgrad.
 * Launches that remain: the colsum finishers dwn2, dwn1 (norm-weight
 * gradients: no GEMM consumes them) and the norm1 map when the block input
 * comes from no GEMM. The head keeps its lse finisher (rowlse partials:
 * the ce maps read lse as a finished vector), the ce_stats colsum
 * finishers (lsum, cnt) and dwnf; its rstd and zdz finishers go.
 *
 * CODA_LLAMA_GRAD_ACT: dwqkv, dwo, dwgu, dwd (head: dwout) are of the
 * activation dtype; the steps are the same (the plain weight-gradient
 * GEMMs round their fp32 sums once into them).
 *
 * CODA_LLAMA_INPLACE: dz is an alias of z (plan_buffer_alias): the SwiGLU
 * backward step (fused, unfused, or the exact-mode map) writes dz over the
 * saved z it reads, so dz takes no arena slot.
 *
 * CODA_LLAMA_KEEP_LOGITS (head): lm_head_lse_pick also stores
 * z = r (h wout^T) (llama_lm_head_keep / _folded_keep), saved; the
 * backward's
 *     dl = (exp(z - lse) - [n == tgt]) * valid / max(cnt, 1),  zp = rowsum(z dl)
 * is the map llama_ce_bwd_map over z, writing dl over z (an alias), in
 * place of the GEMM lm_head_ce_bwd that recomputes z from h and wout; h is
 * then a temporary.
 *
 * CODA_LLAMA_QK_NORM (Qwen3): qkv_rope becomes the GEMM qwen3_qkv (the
 * pre-norm q/k/v and per-head statistics), a finisher and the map
 * qwen3_qknorm_rope; the backward's RoPE backward, the QK-norm backward
 * map and its finishers give dqkvp, which the qkv dgrad and dwqkv read in
 * place of dzqkv (src/nn/qwen3.c).
 *
 * CODA_LLAMA_INFER (forward only, e.g. a decoder's prefill): the same
 * forward steps and no backward phase. Nothing is kept for a backward:
 * rstd1, o, lse, x1 and rstd2 are temporaries (arena), gate_up runs
 * llama_swiglu_infer (llama_swiglu_folded_infer) which stores y only, not
 * z, and there is no dx_out, dx or weight-gradient buffer. qkv is an
 * output: its rotated K and V columns are the keys and values of the rows. */
#include "coda_nn.h"
#include "nn/plan.h"
#include "nn/qwen3.h"
#include "nn/gemma3.h"

#include "base/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI_D 3.14159265358979323846

coda_llama_config coda_llama_default_config(void) {
  coda_llama_config c;
  memset(&c, 0, sizeof c);
  c.dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 128;
  c.vocab = 256;
  c.batch = 2;
  c.seq = 16;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  c.dtype = CODA_BF16;
  return c;
}

double coda_rope_inv_freq(double theta, int64_t head_dim, const coda_rope_scaling *s, int64_t j) {
  if (!(theta > 1.0) || head_dim <= 0 || head_dim % 2 || j < 0 || j >= head_dim / 2) return NAN;
  const double f = pow(theta, -2.0 * (double)j / (double)head_dim);
  if (!s || s->type == CODA_ROPE_DEFAULT) return f;
  if (s->type == CODA_ROPE_LINEAR) return f / s->factor;
  if (s->type != CODA_ROPE_LLAMA3) return NAN;
  const double wavelen = 2.0 * PI_D / f, L = s->original_max_position;
  if (wavelen > L / s->low_freq_factor) return f / s->factor; /* long waves: interpolated */
  if (wavelen < L / s->high_freq_factor) return f;            /* short waves: kept */
  const double sm = (L / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
  return (1.0 - sm) * f / s->factor + sm * f;
}

static int pos_finite(double v) { return v > 0.0 && isfinite(v); }

coda_status coda_rope_scaling_check(coda_context ctx, const coda_rope_scaling *s) {
  if (!s || s->type == CODA_ROPE_DEFAULT) return CODA_OK;
  if (s->type != CODA_ROPE_LINEAR && s->type != CODA_ROPE_LLAMA3)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "rope scaling: unknown type %d", (int)s->type);
  const char *t = s->type == CODA_ROPE_LINEAR ? "linear" : "llama3";
  if (!pos_finite(s->factor))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "rope scaling %s: factor %g must be finite and > 0", t, s->factor);
  if (s->type == CODA_ROPE_LLAMA3) {
    if (!pos_finite(s->low_freq_factor) || !pos_finite(s->high_freq_factor) ||
        !(s->high_freq_factor > s->low_freq_factor))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "rope scaling llama3: low_freq_factor %g and high_freq_factor %g must be "
                       "finite, > 0, and high > low", s->low_freq_factor, s->high_freq_factor);
    if (!pos_finite(s->original_max_position))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "rope scaling llama3: original_max_position_embeddings %g must be > 0",
                       s->original_max_position);
  }
  return CODA_OK;
}

/* The epsilon the plans write into their programs (0: the default). */
static double llama_eps(const coda_llama_config *c) { return c->norm_eps == 0.0 ? 1e-5 : c->norm_eps; }

/* The QK-norm's flags: Qwen3's, and Gemma 3's block, which has it. */
#define LLAMA_QK_ANY (CODA_LLAMA_QK_NORM | CODA_LLAMA_GEMMA3)

/* The fields appended for Gemma 3: the score scale and the window (any
 * block), the soft cap (the head, without FOLD or KEEP_LOGITS). */
static coda_status gemma3_fields_check(coda_context ctx, const coda_llama_config *c, int head) {
  if (!(c->attn_scale >= 0.0) || !isfinite(c->attn_scale) || c->window < 0 ||
      !(c->logit_softcap >= 0.0) || !isfinite(c->logit_softcap))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: attn_scale %g, window %d, logit_softcap %g must be finite and "
                     ">= 0 (0: 1/sqrt(head_dim), no window, no cap)", c->attn_scale, c->window,
                     c->logit_softcap);
  if (head && c->logit_softcap > 0.0 && (c->flags & (CODA_LLAMA_FOLD | CODA_LLAMA_KEEP_LOGITS)))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "llama config: the head's logit soft cap has no %s form yet",
                     (c->flags & CODA_LLAMA_FOLD) ? "CODA_LLAMA_FOLD" : "CODA_LLAMA_KEEP_LOGITS");
  return CODA_OK;
}

static coda_status check_config(coda_context ctx, const coda_llama_config *c, int head,
                                coda_tiling *tiling) {
  if (!c) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "llama config is NULL");
  if (c->dim <= 0 || c->batch <= 0 || c->seq <= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: dim, batch and seq must be > 0 (found %lld, %lld, %lld)",
                     (long long)c->dim, (long long)c->batch, (long long)c->seq);
  if (c->seq > (1 << 24))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: seq %lld too long for exact positions", (long long)c->seq);
  int64_t M;
  if (!coda_mul_i64(c->batch, c->seq, &M) || M > ((int64_t)1 << 31))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "llama config: batch*seq overflows");
  /* Columns stay far inside 32-bit indices (as in the GPT-2 plan). */
  if (c->dim > (1 << 24) || (!head && c->ffn_dim > (1 << 24)))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "llama config: dim %lld / ffn_dim %lld past 2^24",
                     (long long)c->dim, (long long)c->ffn_dim);
  if (head) {
    if (c->vocab <= 0 || c->vocab > (1 << 24))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "llama config: vocab %lld out of range",
                       (long long)c->vocab);
  } else {
    if (c->n_heads <= 0 || c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "llama config: n_heads %lld must be a positive multiple of n_kv_heads %lld",
                       (long long)c->n_heads, (long long)c->n_kv_heads);
    if (c->head_dim <= 0 || c->head_dim % 2)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "llama config: head_dim %lld must be positive and even (RoPE pairs)",
                       (long long)c->head_dim);
    if (c->ffn_dim <= 0)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "llama config: ffn_dim must be > 0");
    if (!(c->rope_theta > 1.0) || !isfinite(c->rope_theta))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "llama config: rope_theta must be > 1");
    if (c->n_heads > 4096 || c->head_dim > 4096)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "llama config: too many heads");
    coda_status rs = coda_rope_scaling_check(ctx, &c->rope);
    if (rs != CODA_OK) return rs;
  }
  if (!(c->norm_eps >= 0.0) || !isfinite(c->norm_eps))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: norm_eps %g must be finite and >= 0", c->norm_eps);
  if (c->flags &
      ~(CODA_LLAMA_NORM_IN | CODA_LLAMA_NORM_OUT | CODA_LLAMA_FOLD | CODA_LLAMA_GRAD_ACT |
        CODA_LLAMA_INPLACE | CODA_LLAMA_ROPE_MAP | CODA_LLAMA_INFER | CODA_LLAMA_KEEP_LOGITS |
        CODA_LLAMA_QK_NORM | CODA_LLAMA_GEMMA3))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "llama config: unknown flags 0x%x",
                     c->flags);
  if (head && (c->flags & CODA_LLAMA_INFER))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: the head plan computes the training loss and has no "
                     "forward-only form (CODA_LLAMA_INFER is for block plans)");
  if ((c->flags & CODA_LLAMA_INFER) &&
      (c->flags & (CODA_LLAMA_GRAD_ACT | CODA_LLAMA_INPLACE | CODA_LLAMA_ROPE_MAP)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: flags 0x%x shape the backward (GRAD_ACT, INPLACE, ROPE_MAP), "
                     "which a forward-only plan (CODA_LLAMA_INFER) does not have", c->flags);
  if ((c->flags & CODA_LLAMA_INFER) && (c->flags & CODA_LLAMA_KEEP_LOGITS))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: CODA_LLAMA_KEEP_LOGITS keeps the head's logits for a "
                     "backward, which a forward-only plan (CODA_LLAMA_INFER) does not have");
  coda_status gs = gemma3_fields_check(ctx, c, head);
  if (gs != CODA_OK) return gs;
  if (head && (c->flags & CODA_LLAMA_NORM_OUT))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: the head has no next norm (CODA_LLAMA_NORM_OUT)");
  int exact = coda_context_precision(ctx) == CODA_PRECISION_F64;
  if (c->dtype != CODA_BF16 && c->dtype != CODA_F64)
    return coda_fail(ctx, CODA_ERR_DTYPE, "llama config: dtype must be bf16 or f64, found %s",
                     coda_dtype_name(c->dtype));
  if ((c->dtype == CODA_F64) != exact)
    return coda_fail(ctx, CODA_ERR_DTYPE,
                     "llama config: dtype %s needs a context of %s precision",
                     coda_dtype_name(c->dtype), c->dtype == CODA_F64 ? "fp64" : "fp32");
  *tiling = c->tiling;
  if (tiling->tile_m == 0 && tiling->tile_n == 0) {
    tiling->tile_m = 64;
    tiling->tile_n = 64;
    /* the QK-norm's head segments must fit the column tiles (qwen3_check):
     * else the least multiple of 8 and head_dim */
    const int64_t hd = c->head_dim, l = hd % 8 == 0 ? hd : hd % 4 == 0 ? 2 * hd : 4 * hd;
    if (!head && (c->flags & LLAMA_QK_ANY) && hd > 0 && hd % 64 && 64 % hd && l <= 256)
      tiling->tile_n = (int)l;
    /* a GPU computes partials for its own tiling only */
    if (coda_context_backend(ctx) != CODA_BACKEND_CPU) {
      coda_status s = coda_preferred_tiling(ctx, NULL, c->batch * c->seq, c->dim, c->dim, tiling);
      if (s != CODA_OK) return s;
    }
  }
  if (tiling->tile_m <= 0 || tiling->tile_n <= 0 || tiling->tile_m % 8 || tiling->tile_n % 8 ||
      tiling->tile_m > 256 || tiling->tile_n > 256)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "llama config: tiling %d x %d: tiles must be positive multiples of 8, at most 256",
                     tiling->tile_m, tiling->tile_n);
  if (!head && (c->flags & CODA_LLAMA_GEMMA3)) {
    coda_status s = gemma3_check(ctx, c->flags);
    if (s != CODA_OK) return s;
  }
  if (!head && (c->flags & LLAMA_QK_ANY))
    return qwen3_check(ctx, c->flags, c->head_dim, *tiling);
  return CODA_OK;
}

int64_t coda_llama_qkv_row(const coda_llama_config *cfg, int64_t hf_row) {
  if (!cfg || cfg->head_dim <= 0 || cfg->head_dim % 2) return -1;
  int64_t hd = cfg->head_dim, qk = (cfg->n_heads + cfg->n_kv_heads) * hd;
  int64_t n = qk + cfg->n_kv_heads * hd;
  if (hf_row < 0 || hf_row >= n) return -1;
  if (hf_row >= qk) return hf_row; /* V: no rotation */
  int64_t head = hf_row / hd, i = hf_row % hd, half = hd / 2;
  return head * hd + (i < half ? 2 * i : 2 * (i - half) + 1);
}

/* Position (row % seq) of every row, and the RoPE frequency table: per Q/K
 * head column pair (2j, 2j+1) the frequency f_j / (2 pi) in turns (f_j =
 * coda_rope_inv_freq: theta^(-2j/hd), scaled as c->rope says), split
 * float-float (hi at 2j, lo at 2j+1; exact mode: lo = 0); V columns 0.
 * Every backend reads the scaling from this table alone. */
static void rope_tables(coda_plan p, const coda_llama_config *c, int exact) {
  int64_t M = c->batch * c->seq, hd = c->head_dim;
  int64_t nqk = (c->n_heads + c->n_kv_heads) * hd, nqkv = nqk + c->n_kv_heads * hd;
  double *pos = malloc((size_t)M * sizeof(double));
  double *freq = calloc((size_t)nqkv, sizeof(double));
  if (!pos || !freq) {
    free(pos);
    free(freq);
    plan_fail(p, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    return;
  }
  for (int64_t m = 0; m < M; m++) pos[m] = (double)(m % c->seq);
  for (int64_t n = 0; n < nqk; n += 2) {
    int64_t j = (n % hd) / 2;
    double f = coda_rope_inv_freq(c->rope_theta, hd, &c->rope, j) / (2.0 * PI_D);
    if (exact) {
      freq[n] = f;
      freq[n + 1] = 0.0;
    } else {
      float hi = (float)f;
      freq[n] = hi;
      freq[n + 1] = (float)(f - (double)hi);
    }
  }
  plan_buffer_init(p, "pos", pos);
  plan_buffer_init(p, "freq", freq);
  free(pos);
  free(freq);
}

static void scalar_const(coda_plan p, const char *name, coda_dtype t, double v) {
  plan_buffer(p, name, t, 1, 1, PLAN_ROLE_CONST);
  plan_buffer_init(p, name, &v);
}

static coda_status finish_build(coda_context ctx, coda_plan p, coda_plan *out) {
  coda_status s = plan_status(p);
  if (s != CODA_OK) {
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
    coda_plan_destroy(p);
    return coda_fail(ctx, s, "%s", msg);
  }
  *out = p;
  return CODA_OK;
}

/* What the block plan's buffers and passes share: its dtypes (act the
 * activations', st the statistics', gw the weight gradients'), shapes
 * and flags. */
typedef struct {
  int exact, infer, norm_in, norm_out, fold, rope_map;
  coda_dtype act, st, gw;
  int64_t M, D, F, hd, HQ, NQKV, rcols;
  plan_role saved; /* what the backward reads: temporaries when forward only */
} llama_shape;

/* The block's buffers: caller-facing, tables, forward activations and the
 * backward's temporaries. */
static void llama_buffers(coda_plan p, const coda_llama_config *c, const llama_shape *sh) {
  const int exact = sh->exact, infer = sh->infer, norm_in = sh->norm_in, norm_out = sh->norm_out,
      fold = sh->fold, rope_map = sh->rope_map;
  const coda_dtype act = sh->act, st = sh->st, gw = sh->gw;
  const int64_t M = sh->M, D = sh->D, F = sh->F, HQ = sh->HQ, NQKV = sh->NQKV, rcols = sh->rcols;
  const plan_role saved = sh->saved;
  /* caller-facing buffers */
  plan_buffer(p, "x", act, M, D, PLAN_ROLE_INPUT);
  if (!infer) plan_buffer(p, "dx_out", act, M, D, PLAN_ROLE_INPUT);
  plan_buffer(p, "wqkv", act, NQKV, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "wo", act, D, HQ, PLAN_ROLE_PARAM);
  plan_buffer(p, "wgu", act, 2 * F, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "wd", act, D, F, PLAN_ROLE_PARAM);
  plan_buffer(p, "wn1", act, 1, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "wn2", act, 1, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "x_out", act, M, D, PLAN_ROLE_OUTPUT);
  if (!infer) {
    plan_buffer(p, "dx", act, M, D, PLAN_ROLE_GRAD);
    plan_buffer(p, "dwqkv", gw, NQKV, D, PLAN_ROLE_GRAD);
    plan_buffer(p, "dwo", gw, D, HQ, PLAN_ROLE_GRAD);
    plan_buffer(p, "dwgu", gw, 2 * F, D, PLAN_ROLE_GRAD);
    plan_buffer(p, "dwd", gw, D, F, PLAN_ROLE_GRAD);
    plan_buffer(p, "dwn1", st, 1, D, PLAN_ROLE_GRAD);
    plan_buffer(p, "dwn2", st, 1, D, PLAN_ROLE_GRAD);
  }
  /* tables */
  plan_buffer(p, "pos", CODA_I32, M, 1, PLAN_ROLE_CONST);
  plan_buffer(p, "freq", st, 1, NQKV, PLAN_ROLE_CONST);
  if (plan_status(p) == CODA_OK) rope_tables(p, c, exact);
  scalar_const(p, "inv_d", st, 1.0 / (double)D);
  /* forward activations */
  plan_buffer(p, "h1", act, M, D, norm_in ? PLAN_ROLE_INPUT : PLAN_ROLE_TEMP);
  plan_buffer(p, "rstd1", st, M, rcols, norm_in ? PLAN_ROLE_INPUT : saved);
  if (norm_out) {
    plan_buffer(p, "wn_next", act, 1, D, PLAN_ROLE_PARAM);
    plan_buffer(p, "h_next", act, M, D, PLAN_ROLE_OUTPUT);
    plan_buffer(p, "rstd_next", st, M, rcols, PLAN_ROLE_OUTPUT);
  }
  /* forward only, qkv is an output: its rotated K and V columns are what
   * a decoder keeps in its cache */
  plan_buffer(p, "qkv", act, M, NQKV, infer ? PLAN_ROLE_OUTPUT : PLAN_ROLE_SAVED);
  plan_buffer(p, "o", act, M, HQ, saved);
  plan_buffer(p, "lse", st, M, c->n_heads, saved);
  plan_buffer(p, "x1", act, M, D, saved);
  plan_buffer(p, "h2", act, M, D, PLAN_ROLE_TEMP);
  plan_buffer(p, "rstd2", st, M, rcols, saved);
  if (!infer) plan_buffer(p, "z", act, M, 2 * F, PLAN_ROLE_SAVED);
  plan_buffer(p, "y", act, M, F, PLAN_ROLE_TEMP);
  if (!infer) { /* backward temporaries */
    plan_buffer(p, "dz", act, M, 2 * F, PLAN_ROLE_TEMP);
    /* in place: the SwiGLU backward (z's last reader) writes dz over z */
    if (c->flags & CODA_LLAMA_INPLACE) plan_buffer_alias(p, "dz", "z");
    plan_buffer(p, "y_re", act, M, F, PLAN_ROLE_TEMP);
    if (!fold) plan_buffer(p, "zdz2", st, M, 1, PLAN_ROLE_TEMP);
    plan_buffer(p, "dx1", act, M, D, PLAN_ROLE_TEMP);
    plan_buffer(p, "post2", act, M, D, PLAN_ROLE_TEMP);
    plan_buffer(p, "do", act, M, HQ, PLAN_ROLE_TEMP);
    if (rope_map) plan_buffer(p, "dqkv", act, M, NQKV, PLAN_ROLE_TEMP);
    /* fused: the attention backward's per-head Sigma qkv*dqkv partials */
    else plan_buffer(p, "zp1", st, M, c->n_heads + 2 * c->n_kv_heads, PLAN_ROLE_TEMP);
    plan_buffer(p, "dzqkv", act, M, NQKV, PLAN_ROLE_TEMP);
    if (!fold) plan_buffer(p, "zdz1", st, M, 1, PLAN_ROLE_TEMP);
    plan_buffer(p, "post1", act, M, D, PLAN_ROLE_TEMP);
  }
}

/* The forward pass: norm, qkv + RoPE, attention, out projection with the
 * residual and the second norm, gate/up + SwiGLU, down with the residual. */
static void llama_forward(coda_plan p, const llama_shape *sh, const qwen3_shape *qs,
                          coda_tiling tl, const plan_attention *g) {
  const int infer = sh->infer, norm_in = sh->norm_in, norm_out = sh->norm_out, fold = sh->fold;
  const int64_t M = sh->M, D = sh->D;
  const coda_phase FW = CODA_PHASE_FORWARD;
  if (!norm_in && fold) {
    plan_map(p, FW, "norm1", "llama_rmsnorm", M, D, tl, "x=x w=wn1 h=h1 ss=rstd1");
  } else if (!norm_in) {
    plan_map(p, FW, "norm1", "llama_rmsnorm", M, D, tl, "x=x w=wn1 h=h1 ss=ss1");
    plan_finish(p, FW, "norm1.rstd", "llama_rmsnorm", "r", M, D, tl, "ss=ss1 r=rstd1");
  }
  if (qs) /* Qwen3: the QK-norm before RoPE (qwen3.c) */
    qwen3_qkv_forward(p, qs, tl);
  else if (fold)
    plan_gemm(p, FW, "qkv_rope", "llama_qkv_rope_folded", CODA_N, "h1", CODA_T, "wqkv", tl,
              "ss=rstd1 inv_n=inv_d pos=pos freq=freq qkv=qkv");
  else
    plan_gemm(p, FW, "qkv_rope", "llama_qkv_rope", CODA_N, "h1", CODA_T, "wqkv", tl,
              "r=rstd1 pos=pos freq=freq qkv=qkv");
  plan_attention_fwd(p, FW, "attention", g, "qkv", "o", "lse");
  if (fold) {
    plan_gemm(p, FW, "out_proj_residual_norm", "llama_residual_norm", CODA_N, "o", CODA_T, "wo",
              tl, "res=x w=wn2 x=x1 h=h2 ss=rstd2");
    if (infer) /* the variant without the store of z */
      plan_gemm(p, FW, "gate_up_swiglu", "llama_swiglu_folded_infer", CODA_N, "h2", CODA_T, "wgu",
                tl, "ss=rstd2 inv_n=inv_d y=y");
    else
      plan_gemm(p, FW, "gate_up_swiglu", "llama_swiglu_folded", CODA_N, "h2", CODA_T, "wgu", tl,
                "ss=rstd2 inv_n=inv_d z=z y=y");
  } else {
    plan_gemm(p, FW, "out_proj_residual_norm", "llama_residual_norm", CODA_N, "o", CODA_T, "wo",
              tl, "res=x w=wn2 x=x1 h=h2 ss=ss2");
    plan_finish(p, FW, "norm2.rstd", "llama_residual_norm", "r", M, D, tl, "ss=ss2 r=rstd2");
    if (infer)
      plan_gemm(p, FW, "gate_up_swiglu", "llama_swiglu_infer", CODA_N, "h2", CODA_T, "wgu", tl,
                "r=rstd2 y=y");
    else
      plan_gemm(p, FW, "gate_up_swiglu", "llama_swiglu", CODA_N, "h2", CODA_T, "wgu", tl,
                "r=rstd2 z=z y=y");
  }
  if (norm_out && fold) {
    plan_gemm(p, FW, "down_residual_norm", "llama_residual_norm", CODA_N, "y", CODA_T, "wd", tl,
              "res=x1 w=wn_next x=x_out h=h_next ss=rstd_next");
  } else if (norm_out) {
    /* the next block's RMSNorm producer, as out_proj is for norm2 */
    plan_gemm(p, FW, "down_residual_norm", "llama_residual_norm", CODA_N, "y", CODA_T, "wd", tl,
              "res=x1 w=wn_next x=x_out h=h_next ss=ss3");
    plan_finish(p, FW, "next_norm.rstd", "llama_residual_norm", "r", M, D, tl,
                "ss=ss3 r=rstd_next");
  } else {
    plan_gemm(p, FW, "down_residual", "llama_residual", CODA_N, "y", CODA_T, "wd", tl,
              "res=x1 x=x_out");
  }
}

/* The backward pass, in the forward's reverse order (qkv_heads: query,
 * key and value heads). */
static void llama_backward(coda_plan p, int64_t qkv_heads, const llama_shape *sh,
                           const qwen3_shape *qs, coda_tiling tl, const plan_attention *g) {
  const int exact = sh->exact, fold = sh->fold, rope_map = sh->rope_map;
  const coda_dtype act = sh->act;
  const int64_t M = sh->M, D = sh->D, F = sh->F, NQKV = sh->NQKV;
  const coda_phase BW = CODA_PHASE_BACKWARD;
  if (!exact) {
    plan_gemm(p, BW, "down_dgrad_swiglu_bwd", "llama_swiglu_bwd", CODA_N, "dx_out", CODA_N,
              "wd", tl, "z=z dz=dz y=y_re zp=zp2");
    if (!fold)
      plan_finish(p, BW, "zdz2", "llama_swiglu_bwd", "zdz", M, F, tl, "zp=zp2 zdz=zdz2");
  } else {
    /* f64 has no packed pairs (x2): the dgrad, then the same math as a map */
    plan_buffer(p, "dy", act, M, F, PLAN_ROLE_TEMP);
    plan_matmul(p, BW, "down_dgrad", CODA_N, "dx_out", CODA_N, "wd", "dy", 1.0f, 0);
    plan_map(p, BW, "swiglu_bwd", "llama_swiglu_bwd_pairs", M, 2 * F, tl,
             "z=z dy=dy dz=dz y=y_re zp=zp2");
    if (!fold)
      plan_finish(p, BW, "zdz2", "llama_swiglu_bwd_pairs", "zdz", M, 2 * F, tl,
                  "zp=zp2 zdz=zdz2");
  }
  plan_matmul(p, BW, "dwd", CODA_T, "dx_out", CODA_N, "y_re", "dwd", 1.0f, 0);
  const char *nbwd = fold ? "llama_norm_bwd_folded" : "llama_norm_bwd";
  if (fold)
    plan_gemm(p, BW, "gate_up_dgrad_norm_bwd", nbwd, CODA_N, "dz", CODA_N, "wgu", tl,
              "x=x1 w=wn2 ss=rstd2 zp=zp2 inv_n=inv_d dres=dx_out dx=dx1 post=post2 dwp=dwp2");
  else
    plan_gemm(p, BW, "gate_up_dgrad_norm_bwd", nbwd, CODA_N, "dz", CODA_N, "wgu", tl,
              "x=x1 w=wn2 r=rstd2 zdz=zdz2 inv_n=inv_d dres=dx_out dx=dx1 post=post2 dwp=dwp2");
  plan_finish(p, BW, "dwn2", nbwd, "dw", M, D, tl, "dwp=dwp2 dw=dwn2");
  plan_matmul(p, BW, "dwgu", CODA_T, "dz", CODA_N, "post2", "dwgu", 1.0f, 0);
  plan_matmul(p, BW, "do", CODA_N, "dx1", CODA_N, "wo", "do", 1.0f, 0);
  plan_matmul(p, BW, "dwo", CODA_T, "dx1", CODA_N, "o", "dwo", 1.0f, 0);
  /* the zdz1 finisher sums zp1's columns: one per tile_n columns of a map
   * pass, one per head when fused (an N of heads x tile_n) */
  int64_t zp_n = NQKV;
  /* the gradient of the qkv GEMM's output: Qwen3's is that of the pre-norm
   * q/k/v, and its QK-norm backward finishes zdz1 itself */
  const char *dq = qs ? "dqkvp" : "dzqkv";
  if (qs) {
    qwen3_qkv_backward(p, qs, tl, g);
  } else if (rope_map) {
    plan_attention_bwd(p, BW, "attention_bwd", g, "qkv", "o", "lse", "do", "dqkv");
    plan_map(p, BW, "rope_bwd", "llama_rope_bwd", M, NQKV, tl,
             "y=qkv dy=dqkv pos=pos freq=freq dz=dzqkv zp=zp1");
  } else {
    plan_attention_bwd_rope(p, BW, "attention_rope_bwd", g, "qkv", "o", "lse", "do", "pos",
                            "freq", "dzqkv", "zp1");
    zp_n = qkv_heads * (int64_t)tl.tile_n;
  }
  if (fold) {
    plan_gemm(p, BW, "qkv_dgrad_norm_bwd", nbwd, CODA_N, "dzqkv", CODA_N, "wqkv", tl,
              "x=x w=wn1 ss=rstd1 zp=zp1 inv_n=inv_d dres=dx1 dx=dx post=post1 dwp=dwp1");
  } else {
    if (!qs) plan_finish(p, BW, "zdz1", "llama_rope_bwd", "zdz", M, zp_n, tl, "zp=zp1 zdz=zdz1");
    plan_gemm(p, BW, "qkv_dgrad_norm_bwd", nbwd, CODA_N, dq, CODA_N, "wqkv", tl,
              "x=x w=wn1 r=rstd1 zdz=zdz1 inv_n=inv_d dres=dx1 dx=dx post=post1 dwp=dwp1");
  }
  plan_finish(p, BW, "dwn1", nbwd, "dw", M, D, tl, "dwp=dwp1 dw=dwn1");
  plan_matmul(p, BW, "dwqkv", CODA_T, dq, CODA_N, "post1", "dwqkv", 1.0f, 0);
}

coda_status coda_llama_block_plan(coda_context ctx, const coda_llama_config *cfg,
                                  coda_plan *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_llama_block_plan: out is NULL");
  *out = NULL;
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_tiling tl;
  coda_status s = check_config(ctx, cfg, 0, &tl);
  if (s != CODA_OK) return s;
  const coda_llama_config c = *cfg;
  const int exact = c.dtype == CODA_F64;
  const coda_dtype act = c.dtype, st = exact ? CODA_F64 : CODA_F32;
  /* the GEMM weights' gradients: written once by a plain GEMM, so they can
   * be stored in the activation dtype (one rounding of the fp32 sum) */
  const coda_dtype gw = (c.flags & CODA_LLAMA_GRAD_ACT) ? act : st;
  const int64_t M = c.batch * c.seq, D = c.dim, F = c.ffn_dim, hd = c.head_dim;
  const int64_t HQ = c.n_heads * hd, NQKV = (c.n_heads + 2 * c.n_kv_heads) * hd;
  /* forward only: no backward phase, nothing saved for one */
  const int infer = (c.flags & CODA_LLAMA_INFER) != 0;
  const plan_role saved = infer ? PLAN_ROLE_TEMP : PLAN_ROLE_SAVED;
  const int norm_in = (c.flags & CODA_LLAMA_NORM_IN) != 0;
  const int norm_out = (c.flags & CODA_LLAMA_NORM_OUT) != 0;
  const int fold = (c.flags & CODA_LLAMA_FOLD) != 0;
  /* a row statistic over D columns: its M x T rowsum partials when folded */
  const int64_t rcols = fold ? (D + tl.tile_n - 1) / tl.tile_n : 1;
  const int rope_map = (c.flags & CODA_LLAMA_ROPE_MAP) != 0;
  const int gemma = (c.flags & CODA_LLAMA_GEMMA3) != 0;
  const int qk = (c.flags & LLAMA_QK_ANY) != 0;
  const llama_shape sh = {exact, infer, norm_in, norm_out, fold, rope_map, act, st, gw, M, D, F, hd,
                          HQ, NQKV, rcols, saved};
  const qwen3_shape qs = {M, c.seq, hd, c.n_heads, c.n_kv_heads, act, st, c.rope_theta, &cfg->rope};

  coda_plan p;
  s = plan_create(ctx, "llama_block", &p);
  if (s != CODA_OK) return s;
  plan_set_norm_eps(p, llama_eps(&c));

  llama_buffers(p, &c, &sh);
  if (qk) qwen3_buffers(p, &qs, tl);
  const gemma3_shape gsh = {exact, M, D, F, HQ, act, st, gw};
  if (gemma) gemma3_buffers(p, &gsh);

  plan_attention g;
  memset(&g, 0, sizeof g);
  g.batch = c.batch;
  g.seq = c.seq;
  g.n_heads = (int)c.n_heads;
  g.n_kv_heads = (int)c.n_kv_heads;
  g.head_dim = (int)hd;
  g.scale = c.attn_scale;
  g.window = c.window;

  if (gemma) { /* Gemma 3: its own forward and backward over these buffers */
    gemma3_forward(p, &gsh, &qs, tl, &g);
    gemma3_backward(p, &gsh, &qs, tl, &g);
    return finish_build(ctx, p, out);
  }

  /* ---- forward ---- */
  llama_forward(p, &sh, qk ? &qs : NULL, tl, &g);
  if (infer) return finish_build(ctx, p, out);

  /* ---- backward ---- */
  llama_backward(p, c.n_heads + 2 * c.n_kv_heads, &sh, qk ? &qs : NULL, tl, &g);

  return finish_build(ctx, p, out);
}

coda_status coda_llama_head_plan(coda_context ctx, const coda_llama_config *cfg,
                                 coda_plan *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_llama_head_plan: out is NULL");
  *out = NULL;
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_tiling tl;
  coda_status s = check_config(ctx, cfg, 1, &tl);
  if (s != CODA_OK) return s;
  const coda_llama_config c = *cfg;
  const int exact = c.dtype == CODA_F64;
  const coda_dtype act = c.dtype, st = exact ? CODA_F64 : CODA_F32;
  const coda_dtype gw = (c.flags & CODA_LLAMA_GRAD_ACT) ? act : st; /* dwout */
  const int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  const coda_phase FW = CODA_PHASE_FORWARD, BW = CODA_PHASE_BACKWARD;

  coda_plan p;
  s = plan_create(ctx, "llama_head", &p);
  if (s != CODA_OK) return s;
  plan_set_norm_eps(p, llama_eps(&c));
  plan_buffer(p, "x", act, M, D, PLAN_ROLE_INPUT);
  plan_buffer(p, "targets", CODA_I32, M, 1, PLAN_ROLE_INPUT);
  plan_buffer(p, "wnf", act, 1, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "wout", act, V, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "loss", st, 1, 1, PLAN_ROLE_OUTPUT);
  plan_buffer(p, "dx", act, M, D, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwnf", st, 1, D, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwout", gw, V, D, PLAN_ROLE_GRAD);
  scalar_const(p, "inv_d", st, 1.0 / (double)D);
  scalar_const(p, "nv", st, (double)V);
  const int norm_in = (c.flags & CODA_LLAMA_NORM_IN) != 0;
  const int fold = (c.flags & CODA_LLAMA_FOLD) != 0;
  /* folded: rstd holds the M x T rowsum partials of x^2 */
  const int64_t rcols = fold ? (D + tl.tile_n - 1) / tl.tile_n : 1;
  const int keep = (c.flags & CODA_LLAMA_KEEP_LOGITS) != 0;
  /* h: read again only by the backward that recomputes the logits */
  plan_buffer(p, "h", act, M, D,
              norm_in ? PLAN_ROLE_INPUT : keep ? PLAN_ROLE_TEMP : PLAN_ROLE_SAVED);
  plan_buffer(p, "rstd", st, M, rcols, norm_in ? PLAN_ROLE_INPUT : PLAN_ROLE_SAVED);
  plan_buffer(p, "lse", st, M, 1, PLAN_ROLE_SAVED);
  /* the target's logit (a rowpick partial): kept, with lse and valid it
   * gives each row's loss after the run */
  plan_buffer(p, "pick", st, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "valid", st, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "lsum", st, 1, 1, PLAN_ROLE_TEMP);
  plan_buffer(p, "cnt", st, 1, 1, PLAN_ROLE_SAVED);
  /* keep: the forward stores the logits z; the backward's map writes dl
   * over them (the backward consumes its forward's state) */
  if (keep) plan_buffer(p, "z", act, M, V, PLAN_ROLE_SAVED);
  plan_buffer(p, "dl", act, M, V, PLAN_ROLE_TEMP);
  if (keep) plan_buffer_alias(p, "dl", "z");
  if (!fold) plan_buffer(p, "zdz", st, M, 1, PLAN_ROLE_TEMP);
  plan_buffer(p, "post", act, M, D, PLAN_ROLE_TEMP);
  coda_tiling one = {tl.tile_m, 8}; /* the M x 1 and 1 x 1 bookkeeping passes */
  /* (same partial shapes with the GPU's one tiling: a single column tile) */
  if (coda_context_backend(ctx) != CODA_BACKEND_CPU) one = tl;

  if (!norm_in && fold) {
    plan_map(p, FW, "final_norm", "llama_rmsnorm", M, D, tl, "x=x w=wnf h=h ss=rstd");
  } else if (!norm_in) {
    plan_map(p, FW, "final_norm", "llama_rmsnorm", M, D, tl, "x=x w=wnf h=h ss=ssf");
    plan_finish(p, FW, "final_norm.rstd", "llama_rmsnorm", "r", M, D, tl, "ss=ssf r=rstd");
  }
  /* Gemma 3's soft cap l = cap tanh(z / cap) on the logits z: its own
   * programs (neither folded nor kept: check_config) */
  const int cap = c.logit_softcap > 0.0;
  if (cap) {
    scalar_const(p, "cap", st, c.logit_softcap);
    scalar_const(p, "icap", st, 1.0 / c.logit_softcap);
  }
  const char *lmh = cap ? "gemma3_lm_head"
                    : keep ? (fold ? "llama_lm_head_folded_keep" : "llama_lm_head_keep")
                           : (fold ? "llama_lm_head_folded" : "llama_lm_head");
  char lmh_args[112];
  snprintf(lmh_args, sizeof lmh_args, "%s tgt=targets lp=lp pick=pick%s%s",
           fold ? "ss=rstd inv_n=inv_d" : "r=rstd", keep ? " z=z" : "",
           cap ? " cap=cap icap=icap" : "");
  plan_gemm(p, FW, "lm_head_lse_pick", lmh, CODA_N, "h", CODA_T, "wout", tl, lmh_args);
  plan_finish(p, FW, "lse", lmh, "lse", M, V, tl, "lp=lp lse=lse");
  plan_map(p, FW, "ce_stats", "llama_ce_stats", M, 1, one,
           "lse=lse pick=pick tgt=targets nv=nv valid=valid lp=lpl cp=cpl");
  plan_finish(p, FW, "ce_lsum", "llama_ce_stats", "lsum", M, 1, one, "lp=lpl lsum=lsum");
  plan_finish(p, FW, "ce_cnt", "llama_ce_stats", "cnt", M, 1, one, "cp=cpl cnt=cnt");
  plan_map(p, FW, "ce_loss", "llama_ce_loss", 1, 1, one, "lsum=lsum cnt=cnt loss=loss");

  if (keep) { /* d loss / d logits from the stored logits: a map, not a GEMM */
    plan_map(p, BW, "ce_bwd_map", "llama_ce_bwd_map", M, V, tl,
             "z=z tgt=targets lse=lse valid=valid cnt=cnt dl=dl zp=zpl");
    if (!fold) plan_finish(p, BW, "zdz", "llama_ce_bwd_map", "zdz", M, V, tl, "zp=zpl zdz=zdz");
  } else if (fold) {
    plan_gemm(p, BW, "lm_head_ce_bwd", "llama_ce_bwd_folded", CODA_N, "h", CODA_T, "wout", tl,
              "ss=rstd inv_n=inv_d tgt=targets lse=lse valid=valid cnt=cnt dl=dl zp=zpl");
  } else if (cap) { /* dl = d loss / dz: the cap's derivative 1 - (l / cap)^2 inside */
    plan_gemm(p, BW, "lm_head_ce_bwd", "gemma3_ce_bwd", CODA_N, "h", CODA_T, "wout", tl,
              "r=rstd tgt=targets lse=lse valid=valid cnt=cnt cap=cap icap=icap dl=dl zp=zpl");
    plan_finish(p, BW, "zdz", "gemma3_ce_bwd", "zdz", M, V, tl, "zp=zpl zdz=zdz");
  } else {
    plan_gemm(p, BW, "lm_head_ce_bwd", "llama_ce_bwd", CODA_N, "h", CODA_T, "wout", tl,
              "r=rstd tgt=targets lse=lse valid=valid cnt=cnt dl=dl zp=zpl");
    plan_finish(p, BW, "zdz", "llama_ce_bwd", "zdz", M, V, tl, "zp=zpl zdz=zdz");
  }
  if (fold) {
    plan_gemm(p, BW, "head_dgrad_norm_bwd", "llama_head_norm_bwd_folded", CODA_N, "dl", CODA_N,
              "wout", tl, "x=x w=wnf ss=rstd zp=zpl inv_n=inv_d dx=dx post=post dwp=dwpf");
    plan_finish(p, BW, "dwnf", "llama_head_norm_bwd_folded", "dw", M, D, tl, "dwp=dwpf dw=dwnf");
  } else {
    plan_gemm(p, BW, "head_dgrad_norm_bwd", "llama_head_norm_bwd", CODA_N, "dl", CODA_N, "wout",
              tl, "x=x w=wnf r=rstd zdz=zdz inv_n=inv_d dx=dx post=post dwp=dwpf");
    plan_finish(p, BW, "dwnf", "llama_head_norm_bwd", "dw", M, D, tl, "dwp=dwpf dw=dwnf");
  }
  plan_matmul(p, BW, "dwout", CODA_T, "dl", CODA_N, "post", "dwout", 1.0f, 0);

  return finish_build(ctx, p, out);
}

/* Binds next's buffer `dst` to prev's buffer `src` (or the reverse). */
static coda_status link_one(coda_plan from, const char *src, coda_plan to, const char *dst) {
  coda_tensor t;
  coda_status s = coda_plan_tensor(from, src, &t);
  if (s == CODA_OK) s = coda_plan_bind(to, dst, &t);
  return s;
}

coda_status coda_llama_link(coda_plan prev, coda_plan next) {
  if (!prev || !next) return CODA_ERR_INVALID_ARGUMENT;
  coda_context ctx = prev->ctx;
  if (strcmp(prev->name, "llama_block") ||
      (strcmp(next->name, "llama_block") && strcmp(next->name, "llama_head")))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_llama_link: needs a llama_block followed by a llama_block or "
                     "llama_head, found %s then %s", prev->name, next->name);
  int head = !strcmp(next->name, "llama_head");
  const char *hn = head ? "h" : "h1", *rn = head ? "rstd" : "rstd1", *wn = head ? "wnf" : "wn1";
  int hi = plan_find(next, hn);
  int next_in = hi >= 0 && next->bufs[hi].role == PLAN_ROLE_INPUT;
  int prev_out = plan_find(prev, "h_next") >= 0;
  if (next_in && !prev_out)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_llama_link: the next plan takes its norm input (CODA_LLAMA_NORM_IN) "
                     "but the previous block does not produce it (CODA_LLAMA_NORM_OUT)");
  if (next_in) { /* the two plans must agree on CODA_LLAMA_FOLD (and the tiling) */
    int rp = plan_find(prev, "rstd_next"), rq = plan_find(next, rn);
    if (rp >= 0 && rq >= 0 && prev->bufs[rp].cols != next->bufs[rq].cols)
      return coda_fail(ctx, CODA_ERR_SHAPE,
                       "coda_llama_link: the previous block's rstd_next is %lld x %lld but the "
                       "next plan's %s is %lld x %lld: build both with the same "
                       "CODA_LLAMA_FOLD flag and tiling",
                       (long long)prev->bufs[rp].rows, (long long)prev->bufs[rp].cols, rn,
                       (long long)next->bufs[rq].rows, (long long)next->bufs[rq].cols);
  }
  coda_status s = link_one(prev, "x_out", next, "x");
  if (s == CODA_OK) s = link_one(next, "dx", prev, "dx_out");
  if (s == CODA_OK && prev_out) s = link_one(next, wn, prev, "wn_next");
  if (s == CODA_OK && next_in) s = link_one(prev, "h_next", next, hn);
  if (s == CODA_OK && next_in) s = link_one(prev, "rstd_next", next, rn);
  return s;
}
