/* The Qwen3 block's QK-norm steps (see qwen3.h; docs/plans.md, "Qwen3 block
 * plan"). With heads = hq + 2 hkv and the packed qkv (M x heads*hd, row
 * m = [Q heads | K heads | V heads]) viewed as (M heads) x hd, one head
 * per row (plan_buffer_view), a per-head statistic is a row vector and
 * the norm weights are column vectors:
 *
 *   qkv_qk_stats  gemm   qkv_pre = rstd1 (h1 Wqkv^T), ss = per-head sum of
 *                        squares                                (qwen3_qkv)
 *   qk_norm.rstd  finish rq = (ss / hd + eps)^(-1/2), M x heads
 *   qk_norm_rope  map    qkv = RoPE(qkv_pre rq g), g = wqn (Q), wkn (K);
 *                        V copied                       (qwen3_qknorm_rope)
 * backward:
 *   attention_rope_bwd   dzqkv = R^-1 dqkv, zp1 = per-head sum qkv dqkv
 *   qk_norm_bwd   map    dqkvp (the gradient of qkv_pre), zq partials of
 *                        sum qkv_pre dqkvp, dgq / dgk colsum partials
 *                                                        (qwen3_qknorm_bwd)
 *   dwqn, dwkn    finish the norm weights' gradients (over rows and heads)
 *   zdz1          finish zdz1 = sum zq over the row (M x heads*T viewed)
 * after which llama3.c's qkv dgrad runs on dqkvp. */
#include "nn/qwen3.h"

#include "base/internal.h"

#include <math.h>
#include <stdlib.h>

#define PI_D 3.14159265358979323846

coda_status qwen3_check(coda_context ctx, unsigned flags, int64_t head_dim, coda_tiling tl) {
  if (flags & (CODA_LLAMA_FOLD | CODA_LLAMA_ROPE_MAP | CODA_LLAMA_INFER))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "llama config: the QK-norm block (CODA_LLAMA_QK_NORM, Qwen3) has no %s form "
                     "yet", (flags & CODA_LLAMA_FOLD) ? "CODA_LLAMA_FOLD"
                            : (flags & CODA_LLAMA_ROPE_MAP) ? "CODA_LLAMA_ROPE_MAP"
                                                            : "CODA_LLAMA_INFER");
  if (head_dim % tl.tile_n && tl.tile_n % head_dim)
    return coda_fail(ctx, CODA_ERR_SHAPE,
                     "llama config: the QK-norm's per-head statistics need head_dim %lld and "
                     "tile_n %d to divide one another", (long long)head_dim, tl.tile_n);
  return CODA_OK;
}

static void const_i32(coda_plan p, const char *name, int64_t v) {
  const double d = (double)v;
  plan_buffer(p, name, CODA_I32, 1, 1, PLAN_ROLE_CONST);
  plan_buffer_init(p, name, &d);
}

/* The frequencies of one head's pairs in turns (float-float, as llama3.c's
 * table: hi at 2j, lo at 2j+1; exact mode lo = 0). */
static void head_freq(coda_plan p, const qwen3_shape *q) {
  double *f = calloc((size_t)q->hd, sizeof *f);
  if (!f) {
    plan_fail(p, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    return;
  }
  for (int64_t j = 0; j < q->hd / 2; j++) {
    const double v = coda_rope_inv_freq(q->theta, q->hd, q->rope, j) / (2.0 * PI_D);
    f[2 * j] = q->st == CODA_F64 ? v : (double)(float)v;
    f[2 * j + 1] = q->st == CODA_F64 ? 0.0 : (double)(float)(v - (double)(float)v);
  }
  plan_buffer_init(p, "hfreq", f);
  free(f);
}

/* zq's columns per head row: the map's rowsum partials over hd columns */
static int64_t zq_cols(const qwen3_shape *q, coda_tiling tl) {
  return (q->hd + tl.tile_n - 1) / tl.tile_n;
}

void qwen3_buffers(coda_plan p, const qwen3_shape *q, coda_tiling tl) {
  const int64_t H = q->hq + 2 * q->hkv, MH = q->M * H, N = H * q->hd;
  plan_buffer(p, "wqn", q->act, 1, q->hd, PLAN_ROLE_PARAM);
  plan_buffer(p, "wkn", q->act, 1, q->hd, PLAN_ROLE_PARAM);
  plan_buffer(p, "dwqn", q->st, 1, q->hd, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwkn", q->st, 1, q->hd, PLAN_ROLE_GRAD);
  plan_buffer(p, "qkv_pre", q->act, q->M, N, PLAN_ROLE_SAVED);
  plan_buffer(p, "qkvh", q->act, MH, q->hd, PLAN_ROLE_SAVED);
  plan_buffer_view(p, "qkvh", "qkv_pre");
  plan_buffer(p, "rqk", q->st, q->M, H, PLAN_ROLE_SAVED);
  plan_buffer(p, "rqkh", q->st, MH, 1, PLAN_ROLE_SAVED);
  plan_buffer_view(p, "rqkh", "rqk");
  plan_buffer(p, "qkvn", q->act, MH, q->hd, PLAN_ROLE_SAVED);
  plan_buffer_view(p, "qkvn", "qkv");
  plan_buffer(p, "hfreq", q->st, 1, q->hd, PLAN_ROLE_CONST);
  if (plan_status(p) == CODA_OK) head_freq(p, q);
  const_i32(p, "ht", H);
  const_i32(p, "hq", q->hq);
  const_i32(p, "hqk", q->hq + q->hkv);
  const_i32(p, "seqc", q->seq);
  const double inv = 1.0 / (double)q->hd;
  plan_buffer(p, "invhd", q->st, 1, 1, PLAN_ROLE_CONST);
  plan_buffer_init(p, "invhd", &inv);
  /* backward: the one-head-per-row views of the attention backward's
   * results, the gradient of qkv_pre and the zq partials */
  plan_buffer(p, "dzh", q->act, MH, q->hd, PLAN_ROLE_TEMP);
  plan_buffer_view(p, "dzh", "dzqkv");
  plan_buffer(p, "zp1h", q->st, MH, 1, PLAN_ROLE_TEMP);
  plan_buffer_view(p, "zp1h", "zp1");
  plan_buffer(p, "dqkvp", q->act, q->M, N, PLAN_ROLE_TEMP);
  plan_buffer(p, "dqkvph", q->act, MH, q->hd, PLAN_ROLE_TEMP);
  plan_buffer_view(p, "dqkvph", "dqkvp");
  const int64_t T = zq_cols(q, tl);
  plan_buffer(p, "zqh", q->st, MH, T, PLAN_ROLE_TEMP);
  plan_buffer(p, "zq1", q->st, q->M, H * T, PLAN_ROLE_TEMP);
  plan_buffer_view(p, "zq1", "zqh");
}

void qwen3_qkv_forward(coda_plan p, const qwen3_shape *q, coda_tiling tl) {
  const coda_phase FW = CODA_PHASE_FORWARD;
  const int64_t H = q->hq + 2 * q->hkv;
  /* the program's heads are of 128 columns: this model's are hd */
  plan_program_load_seg(p, "qwen3_qkv", 128, (int)q->hd);
  plan_gemm(p, FW, "qkv_qk_stats", "qwen3_qkv", CODA_N, "h1", CODA_T, "wqkv", tl,
            "r=rstd1 qkv=qkv_pre ss=ssqk");
  plan_finish(p, FW, "qk_norm.rstd", "qwen3_qkv", "rq", q->M, H * q->hd, tl, "ss=ssqk rq=rqk");
  plan_map(p, FW, "qk_norm_rope", "qwen3_qknorm_rope", q->M * H, q->hd, tl,
           "x=qkvh r=rqkh gq=wqn gk=wkn freq=hfreq ht=ht hq=hq hqk=hqk seq=seqc y=qkvn");
}

void qwen3_qkv_backward(coda_plan p, const qwen3_shape *q, coda_tiling tl,
                        const plan_attention *g) {
  const coda_phase BW = CODA_PHASE_BACKWARD;
  const int64_t H = q->hq + 2 * q->hkv, MH = q->M * H;
  plan_attention_bwd_rope(p, BW, "attention_rope_bwd", g, "qkv", "o", "lse", "do", "pos", "freq",
                          "dzqkv", "zp1");
  plan_map(p, BW, "qk_norm_bwd", "qwen3_qknorm_bwd", MH, q->hd, tl,
           "x=qkvh dy=dzh r=rqkh zp=zp1h gq=wqn gk=wkn invhd=invhd ht=ht hq=hq hqk=hqk "
           "dx=dqkvph zq=zqh pgq=pgq pgk=pgk");
  plan_finish(p, BW, "dwqn", "qwen3_qknorm_bwd", "dgq", MH, q->hd, tl, "pgq=pgq dgq=dwqn");
  plan_finish(p, BW, "dwkn", "qwen3_qknorm_bwd", "dgk", MH, q->hd, tl, "pgk=pgk dgk=dwkn");
  /* zq viewed M x (heads T): the row's sum over every head's partials */
  plan_finish(p, BW, "zdz1", "llama_rope_bwd", "zdz", q->M, H * zq_cols(q, tl) * tl.tile_n, tl,
              "zp=zq1 zdz=zdz1");
}
