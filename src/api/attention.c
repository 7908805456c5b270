/* Attention entry points: every argument checked (shapes, dtypes, sizes,
 * aliasing; the views by base/tensor_check.c), then the context's backend
 * runs it (backends/backend.h). */
#include "backends/backend.h"
#include "api/api.h"

#include <math.h>

#include <stdio.h>

typedef struct att_dims {
  int64_t BT, qkv_cols, o_cols;
} att_dims;

static coda_status check_dims(coda_context ctx, int B, int T, int Hq, int Hkv, int hd,
                              att_dims *d) {
  if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || hd <= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "attention: batch %d, seq %d, heads_q %d, heads_kv %d, head_dim %d must be "
                     "positive", B, T, Hq, Hkv, hd);
  if (Hq % Hkv)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "attention: heads_q %d is not a multiple of heads_kv %d", Hq, Hkv);
  int64_t heads = (int64_t)Hq + 2 * (int64_t)Hkv, bufn;
  if (!coda_mul_i64(B, T, &d->BT) || !coda_mul_i64(heads, hd, &d->qkv_cols) ||
      !coda_mul_i64(Hq, hd, &d->o_cols) || !coda_mul_i64((int64_t)T * 10, hd, &bufn) ||
      bufn > (int64_t)1 << 40 || d->BT > (int64_t)1 << 31 || d->qkv_cols > (int64_t)1 << 31)
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "attention: sizes overflow");
  return CODA_OK;
}

/* The dimensions and the views both passes share: qkv, out and lse. */
static coda_status check_qkv_out_lse(coda_context ctx, int B, int T, int Hq, int Hkv, int hd,
                                     const coda_tensor *qkv, const coda_tensor *out,
                                     const coda_tensor *lse, att_dims *dm) {
  coda_status s;
  if ((s = check_dims(ctx, B, T, Hq, Hkv, hd, dm))) return s;
  if ((s = coda_check_float(ctx, "qkv", qkv, dm->BT, dm->qkv_cols, 0))) return s;
  if ((s = coda_check_float(ctx, "out", out, dm->BT, dm->o_cols, 0))) return s;
  return coda_check_float(ctx, "lse", lse, dm->BT, Hq, 1);
}

coda_attn_mask coda_attn_default_mask(void) {
  const coda_attn_mask m = {sizeof(coda_attn_mask), 0.0, 0};
  return m;
}

/* A mask's layout (one so far) and its scale and window: finite and >= 0.
 * Every backend takes both (on CUDA the own kernels; the cuDNN path names
 * what it cannot run, cuda_backend.c). */
static coda_status check_mask(coda_context ctx, const char *fn, const coda_attn_mask *m) {
  if (!m) return CODA_OK;
  if (m->struct_size != sizeof(coda_attn_mask))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "%s: coda_attn_mask.struct_size is %zu, expected %zu (use "
                     "coda_attn_default_mask())", fn, m->struct_size, sizeof(coda_attn_mask));
  if (!(m->scale >= 0.0) || !isfinite(m->scale) || m->window < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "%s: score scale %g and window %d must be >= 0 (0: 1/sqrt(head_dim), no "
                     "window)", fn, m->scale, m->window);
  return CODA_OK;
}

coda_status coda_attention_forward(coda_context ctx, const coda_tensor *qkv, int B, int T,
                                   int Hq, int Hkv, int hd, const coda_tensor *out,
                                   const coda_tensor *lse) {
  return coda_attention_forward_mask(ctx, qkv, B, T, Hq, Hkv, hd, out, lse, NULL);
}

coda_status coda_attention_forward_mask(coda_context ctx, const coda_tensor *qkv, int B, int T,
                                        int Hq, int Hkv, int hd, const coda_tensor *out,
                                        const coda_tensor *lse, const coda_attn_mask *mask) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!qkv || !out || !lse)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_attention_forward: %s is NULL",
                     !qkv ? "qkv" : !out ? "out" : "lse");
  att_dims dm;
  coda_status s;
  if ((s = check_mask(ctx, "coda_attention_forward", mask))) return s;
  if ((s = check_qkv_out_lse(ctx, B, T, Hq, Hkv, hd, qkv, out, lse, &dm))) return s;
  if (coda_tensors_overlap(out, lse)) return coda_fail(ctx, CODA_ERR_ALIAS, "'out' and 'lse' overlap");
  if (coda_tensors_overlap(out, qkv) || coda_tensors_overlap(lse, qkv))
    return coda_fail(ctx, CODA_ERR_ALIAS, "'%s' overlaps 'qkv'",
                     coda_tensors_overlap(out, qkv) ? "out" : "lse");
  const coda_attn_job job = {qkv, out, lse, NULL, NULL, B, T, Hq, Hkv, hd, NULL,
                             mask ? mask->scale : 0.0, mask ? mask->window : 0};
  return ctx->ops->attention_forward(ctx, &job);
}

static coda_status attention_backward(coda_context ctx, const char *fn, const coda_tensor *qkv,
                                      const coda_tensor *out, const coda_tensor *lse,
                                      const coda_tensor *dout, int B, int T, int Hq, int Hkv,
                                      int hd, const coda_tensor *dqkv,
                                      const coda_attn_rope *rope, const coda_attn_mask *mask) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_clear_error(ctx);
  if (!qkv || !out || !lse || !dout || !dqkv)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                     !qkv ? "qkv" : !out ? "out" : !lse ? "lse" : !dout ? "dout" : "dqkv");
  if (rope && (!rope->pos || !rope->freq || !rope->zp))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                     !rope->pos ? "pos" : !rope->freq ? "freq" : "zp");
  att_dims dm;
  coda_status s;
  if ((s = check_mask(ctx, fn, mask))) return s;
  if ((s = check_qkv_out_lse(ctx, B, T, Hq, Hkv, hd, qkv, out, lse, &dm))) return s;
  if ((s = coda_check_float(ctx, "dout", dout, dm.BT, dm.o_cols, 0))) return s;
  if ((s = coda_check_float(ctx, "dqkv", dqkv, dm.BT, dm.qkv_cols, 0))) return s;
  const coda_tensor *rd[4] = {qkv, out, lse, dout};
  const char *rn[4] = {"qkv", "out", "lse", "dout"};
  for (int i = 0; i < 4; i++)
    if (coda_tensors_overlap(dqkv, rd[i]))
      return coda_fail(ctx, CODA_ERR_ALIAS, "'dqkv' (written) overlaps '%s' (read)", rn[i]);
  if (rope) { /* the views the fused RoPE backward adds */
    if ((s = coda_check_tensor(ctx, "pos", rope->pos))) return s;
    if ((s = coda_check_tensor(ctx, "freq", rope->freq))) return s;
    if ((s = coda_check_tensor(ctx, "zp", rope->zp))) return s;
    if (hd % 2)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "attention RoPE backward: head_dim %d is odd (RoPE rotates column pairs)", hd);
    const coda_tensor *pos = rope->pos;
    if (pos->dtype != CODA_I32 || pos->rows != dm.BT || pos->cols != 1)
      return coda_fail(ctx, pos->dtype != CODA_I32 ? CODA_ERR_DTYPE : CODA_ERR_SHAPE,
                       "pos: %s %lld x %lld, expected i32 %lld x 1", coda_dtype_name(pos->dtype),
                       (long long)pos->rows, (long long)pos->cols, (long long)dm.BT);
    if ((s = coda_check_float(ctx, "freq", rope->freq, 1, dm.qkv_cols, 1))) return s;
    if ((s = coda_check_float(ctx, "zp", rope->zp, dm.BT, Hq + 2 * Hkv, 1))) return s;
    if (coda_tensors_overlap(rope->zp, dqkv))
      return coda_fail(ctx, CODA_ERR_ALIAS, "'zp' and 'dqkv' (both written) overlap");
    for (int i = 0; i < 4; i++)
      if (coda_tensors_overlap(rope->zp, rd[i]))
        return coda_fail(ctx, CODA_ERR_ALIAS, "'zp' (written) overlaps '%s' (read)", rn[i]);
    if (coda_tensors_overlap(dqkv, pos) || coda_tensors_overlap(dqkv, rope->freq))
      return coda_fail(ctx, CODA_ERR_ALIAS, "'dqkv' (written) overlaps '%s' (read)",
                       coda_tensors_overlap(dqkv, pos) ? "pos" : "freq");
  }
  const coda_attn_job job = {qkv, out, lse, dout, dqkv, B, T, Hq, Hkv, hd, rope,
                             mask ? mask->scale : 0.0, mask ? mask->window : 0};
  return ctx->ops->attention_backward(ctx, &job);
}

coda_status coda_attention_backward(coda_context ctx, const coda_tensor *qkv,
                                    const coda_tensor *out, const coda_tensor *lse,
                                    const coda_tensor *dout, int B, int T, int Hq, int Hkv,
                                    int hd, const coda_tensor *dqkv) {
  return attention_backward(ctx, "coda_attention_backward", qkv, out, lse, dout, B, T, Hq, Hkv,
                            hd, dqkv, NULL, NULL);
}

coda_status coda_attention_backward_rope(coda_context ctx, const coda_tensor *qkv,
                                         const coda_tensor *out, const coda_tensor *lse,
                                         const coda_tensor *dout, int B, int T, int Hq, int Hkv,
                                         int hd, const coda_tensor *pos, const coda_tensor *freq,
                                         const coda_tensor *dqkv, const coda_tensor *zp) {
  const coda_attn_rope rope = {pos, freq, zp};
  return attention_backward(ctx, "coda_attention_backward_rope", qkv, out, lse, dout, B, T, Hq,
                            Hkv, hd, dqkv, &rope, NULL);
}

coda_status coda_attention_backward_mask(coda_context ctx, const coda_tensor *qkv,
                                         const coda_tensor *out, const coda_tensor *lse,
                                         const coda_tensor *dout, int B, int T, int Hq, int Hkv,
                                         int hd, const coda_tensor *pos, const coda_tensor *freq,
                                         const coda_tensor *dqkv, const coda_tensor *zp,
                                         const coda_attn_mask *mask) {
  const coda_attn_rope rope = {pos, freq, zp};
  return attention_backward(ctx, "coda_attention_backward_mask", qkv, out, lse, dout, B, T, Hq,
                            Hkv, hd, dqkv, zp ? &rope : NULL, mask);
}
