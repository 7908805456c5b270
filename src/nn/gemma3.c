/* The Gemma 3 block's steps (see gemma3.h; docs/plans.md, "Gemma 3 block
 * plan"). Every norm weight buffer (wn1, wn2, wqn, wkn, wpa, wpf) holds the
 * scale g = 1 + w of Gemma's RMSNorm x r (1 + w): the model adds the 1 when
 * it rounds the stored w into the plan (model_plans.c), and since
 * d(1 + w)/dw = 1 the gradient of g is the gradient of w. The forward:
 *   norm1          map    h1 = x wn1, rstd1                     (llama_rmsnorm)
 *   qkv_qk_stats, qk_norm.rstd, qk_norm_rope                    (qwen3.c)
 *   attention             o, lse (the score scale and the local layers'
 *                         window from the geometry)
 *   out_proj_stats gemm   a1 = o Wo^T and its RMSNorm rpa   (gemma3_post_stats)
 *   post_attn      map    x1 = x + a1 rpa wpa, h2 = x1 wn2, rstd2
 *                                                        (gemma3_post_add_norm)
 *   gate_up_geglu  gemm   z = rstd2 (h2 Wgu^T), y = gelu(g) u   (gemma3_geglu)
 *   down_stats     gemm   a2 = y Wd^T and rpf                (gemma3_post_stats)
 *   post_ffn       map    x_out = x1 + a2 rpf wpf               (gemma3_post_add)
 * The backward, given dx_out; a post-norm's backward is the QK-norm's
 * (qknorm_bwd_dots, qknorm_bwd) over whole rows (hd = D):
 *   post_ffn_dots, post_ffn_bwd   da2 = RMSNorm-bwd(dx_out), dwpf
 *   down_dgrad_geglu_bwd gemm     dz, y_re, zdz2 from da2 Wd   (gemma3_geglu_bwd)
 *   dwd, gate_up_dgrad_norm_bwd (dx1 = dx_out + RMSNorm-bwd(dz Wgu)), dwn2, dwgu
 *   post_attn_dots, post_attn_bwd da1 = RMSNorm-bwd(dx1), dwpa
 *   do, dwo from da1; the QK-norm's attention backward (qwen3.c); then the
 *   qkv dgrad with the RMSNorm backward (dx = dx1 + ...), dwn1, dwqkv. */
#include "nn/qwen3.h"
#include "nn/gemma3.h"

#include "base/internal.h"

#include <stdio.h>

coda_status gemma3_check(coda_context ctx, unsigned flags) {
  static const struct { unsigned flag; const char *name; } no[5] = {
      {CODA_LLAMA_NORM_IN, "CODA_LLAMA_NORM_IN"}, {CODA_LLAMA_NORM_OUT, "CODA_LLAMA_NORM_OUT"},
      {CODA_LLAMA_FOLD, "CODA_LLAMA_FOLD"},       {CODA_LLAMA_ROPE_MAP, "CODA_LLAMA_ROPE_MAP"},
      {CODA_LLAMA_INFER, "CODA_LLAMA_INFER"}};
  for (int i = 0; i < 5; i++)
    if (flags & no[i].flag)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "llama config: the Gemma 3 block (CODA_LLAMA_GEMMA3) has no %s form yet "
                       "(its blocks chain by x and dx alone, unfolded, training)", no[i].name);
  return CODA_OK;
}

void gemma3_buffers(coda_plan p, const gemma3_shape *g) {
  const int64_t M = g->M, D = g->D;
  plan_buffer(p, "wpa", g->act, 1, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "wpf", g->act, 1, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "dwpa", g->st, 1, D, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwpf", g->st, 1, D, PLAN_ROLE_GRAD);
  /* the sublayer outputs before their post-norms, and the norms' r */
  plan_buffer(p, "a1", g->act, M, D, PLAN_ROLE_SAVED);
  plan_buffer(p, "rpa", g->st, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "a2", g->act, M, D, PLAN_ROLE_SAVED);
  plan_buffer(p, "rpf", g->st, M, 1, PLAN_ROLE_SAVED);
  /* backward: their gradients and the row sums sum_k dy_k g_k a_k */
  plan_buffer(p, "da1", g->act, M, D, PLAN_ROLE_TEMP);
  plan_buffer(p, "da2", g->act, M, D, PLAN_ROLE_TEMP);
  plan_buffer(p, "spa", g->st, M, 1, PLAN_ROLE_TEMP);
  plan_buffer(p, "spf", g->st, M, 1, PLAN_ROLE_TEMP);
  if (g->exact) plan_buffer(p, "dy", g->act, M, g->F, PLAN_ROLE_TEMP);
}

void gemma3_forward(coda_plan p, const gemma3_shape *g, const qwen3_shape *q, coda_tiling tl,
                    const plan_attention *att) {
  const coda_phase FW = CODA_PHASE_FORWARD;
  const int64_t M = g->M, D = g->D;
  plan_map(p, FW, "norm1", "llama_rmsnorm", M, D, tl, "x=x w=wn1 h=h1 ss=ss1");
  plan_finish(p, FW, "norm1.rstd", "llama_rmsnorm", "r", M, D, tl, "ss=ss1 r=rstd1");
  qwen3_qkv_forward(p, q, tl);
  plan_attention_fwd(p, FW, "attention", att, "qkv", "o", "lse");
  plan_gemm(p, FW, "out_proj_stats", "gemma3_post_stats", CODA_N, "o", CODA_T, "wo", tl,
            "a=a1 ss=ssa");
  plan_finish(p, FW, "post_attn.rstd", "gemma3_post_stats", "r", M, D, tl, "ss=ssa r=rpa");
  plan_map(p, FW, "post_attn_residual_norm", "gemma3_post_add_norm", M, D, tl,
           "a=a1 r=rpa w=wpa res=x wn=wn2 x=x1 h=h2 ss=ss2");
  plan_finish(p, FW, "norm2.rstd", "gemma3_post_add_norm", "rn", M, D, tl, "ss=ss2 rn=rstd2");
  plan_gemm(p, FW, "gate_up_geglu", "gemma3_geglu", CODA_N, "h2", CODA_T, "wgu", tl,
            "r=rstd2 z=z y=y");
  plan_gemm(p, FW, "down_stats", "gemma3_post_stats", CODA_N, "y", CODA_T, "wd", tl,
            "a=a2 ss=ssf");
  plan_finish(p, FW, "post_ffn.rstd", "gemma3_post_stats", "r", M, D, tl, "ss=ssf r=rpf");
  plan_map(p, FW, "post_ffn_residual", "gemma3_post_add", M, D, tl,
           "a=a2 r=rpf w=wpf res=x1 x=x_out");
}

/* The backward of x_out = res + a r w over M x D (w the post-norm's scale):
 * da = r (dy w - a r^2 s / D), s = sum_k dy_k w_k a_k (the QK-norm's
 * backward with hd = D), dw = colsum(dy a r). n: the buffers a, dy, r, w,
 * s, da, dw in that order. */
static void post_norm_bwd(coda_plan p, const gemma3_shape *g, coda_tiling tl, const char *tag,
                          const char *const n[7]) {
  const coda_phase BW = CODA_PHASE_BACKWARD;
  char label[48], binds[192];
  snprintf(label, sizeof label, "%s_dots", tag);
  snprintf(binds, sizeof binds, "x=%s dy=%s gamma=%s pd=pd_%s", n[0], n[1], n[3], tag);
  plan_map(p, BW, label, "qknorm_bwd_dots", g->M, g->D, tl, binds);
  snprintf(label, sizeof label, "%s.s", tag);
  snprintf(binds, sizeof binds, "pd=pd_%s s=%s", tag, n[4]);
  plan_finish(p, BW, label, "qknorm_bwd_dots", "s", g->M, g->D, tl, binds);
  snprintf(label, sizeof label, "%s_bwd", tag);
  snprintf(binds, sizeof binds, "x=%s dy=%s r=%s gamma=%s s=%s invhd=inv_d dx=%s pg=pg_%s", n[0],
           n[1], n[2], n[3], n[4], n[5], tag);
  plan_map(p, BW, label, "qknorm_bwd", g->M, g->D, tl, binds);
  snprintf(binds, sizeof binds, "pg=pg_%s dgamma=%s", tag, n[6]);
  plan_finish(p, BW, n[6], "qknorm_bwd", "dgamma", g->M, g->D, tl, binds);
}

void gemma3_backward(coda_plan p, const gemma3_shape *g, const qwen3_shape *q, coda_tiling tl,
                     const plan_attention *att) {
  const coda_phase BW = CODA_PHASE_BACKWARD;
  const int64_t M = g->M, D = g->D, F = g->F;
  static const char *const ffn[7] = {"a2", "dx_out", "rpf", "wpf", "spf", "da2", "dwpf"};
  static const char *const attn[7] = {"a1", "dx1", "rpa", "wpa", "spa", "da1", "dwpa"};
  post_norm_bwd(p, g, tl, "post_ffn", ffn);
  if (!g->exact) {
    plan_gemm(p, BW, "down_dgrad_geglu_bwd", "gemma3_geglu_bwd", CODA_N, "da2", CODA_N, "wd", tl,
              "z=z dz=dz y=y_re zp=zp2");
    plan_finish(p, BW, "zdz2", "gemma3_geglu_bwd", "zdz", M, F, tl, "zp=zp2 zdz=zdz2");
  } else { /* f64 has no packed pairs (x2): the dgrad, then the same math as a map */
    plan_matmul(p, BW, "down_dgrad", CODA_N, "da2", CODA_N, "wd", "dy", 1.0f, 0);
    plan_map(p, BW, "geglu_bwd", "gemma3_geglu_bwd_pairs", M, 2 * F, tl,
             "z=z dy=dy dz=dz y=y_re zp=zp2");
    plan_finish(p, BW, "zdz2", "gemma3_geglu_bwd_pairs", "zdz", M, 2 * F, tl, "zp=zp2 zdz=zdz2");
  }
  plan_matmul(p, BW, "dwd", CODA_T, "da2", CODA_N, "y_re", "dwd", 1.0f, 0);
  plan_gemm(p, BW, "gate_up_dgrad_norm_bwd", "llama_norm_bwd", CODA_N, "dz", CODA_N, "wgu", tl,
            "x=x1 w=wn2 r=rstd2 zdz=zdz2 inv_n=inv_d dres=dx_out dx=dx1 post=post2 dwp=dwp2");
  plan_finish(p, BW, "dwn2", "llama_norm_bwd", "dw", M, D, tl, "dwp=dwp2 dw=dwn2");
  plan_matmul(p, BW, "dwgu", CODA_T, "dz", CODA_N, "post2", "dwgu", 1.0f, 0);
  post_norm_bwd(p, g, tl, "post_attn", attn);
  plan_matmul(p, BW, "do", CODA_N, "da1", CODA_N, "wo", "do", 1.0f, 0);
  plan_matmul(p, BW, "dwo", CODA_T, "da1", CODA_N, "o", "dwo", 1.0f, 0);
  qwen3_qkv_backward(p, q, tl, att);
  plan_gemm(p, BW, "qkv_dgrad_norm_bwd", "llama_norm_bwd", CODA_N, "dqkvp", CODA_N, "wqkv", tl,
            "x=x w=wn1 r=rstd1 zdz=zdz1 inv_n=inv_d dres=dx1 dx=dx post=post1 dwp=dwp1");
  plan_finish(p, BW, "dwn1", "llama_norm_bwd", "dw", M, D, tl, "dwp=dwp1 dw=dwn1");
  plan_matmul(p, BW, "dwqkv", CODA_T, "dqkvp", CODA_N, "post1", "dwqkv", 1.0f, 0);
}
