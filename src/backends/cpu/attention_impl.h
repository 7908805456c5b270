/* Attention numerics for one compute type; included by attention.c with
 * REAL, SFX and RF(name) defined. */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

/* dst[t*hd + d] = x[(b*T + t), col0 + d] for t < T, d < hd. */
static void CAT(att_load, SFX)(REAL *dst, const coda_tensor *x, int64_t b, int T, int64_t col0,
                               int hd) {
  for (int t = 0; t < T; t++)
    for (int d = 0; d < hd; d++)
      dst[(int64_t)t * hd + d] = (REAL)coda_load(x, b * T + t, col0 + d);
}

static void CAT(att_store, SFX)(const coda_tensor *x, const REAL *src, int64_t b, int T,
                                int64_t col0, int hd) {
  for (int t = 0; t < T; t++)
    for (int d = 0; d < hd; d++)
      coda_store(x, b * T + t, col0 + d, (double)src[(int64_t)t * hd + d]);
}

/* The first key that query t sees: t - window + 1 with a window (> 0), else 0
 * (model.h's coda_ref_window_start, Hugging Face's sliding mask). */
#ifndef CODA_ATT_J0
#define CODA_ATT_J0
static int att_j0(int t, int window) {
  return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}
#endif

/* One (batch, query head): scores s_j = scale q_t.k_j (j0(t) <= j <= t),
 * lse_t = m + log sum_j exp(s_j - m), o_t = sum_j exp(s_j - lse_t) v_j. */
static void CAT(att_fwd_head, SFX)(const coda_tensor *qkv, const coda_tensor *out,
                                   const coda_tensor *lse, int64_t b, int h, int T, int Hq,
                                   int Hkv, int hd, double scale_in, int window, REAL *buf) {
  const int g = h / (Hq / Hkv);
  /* scale_in 0: 1/sqrt(hd) */
  const REAL scale = scale_in > 0.0 ? (REAL)scale_in : (REAL)1 / RF(sqrt)((REAL)hd);
  const int64_t n = (int64_t)T * hd;
  REAL *q = buf, *k = q + n, *v = k + n, *o = v + n, *s = o + n;
  CAT(att_load, SFX)(q, qkv, b, T, (int64_t)h * hd, hd);
  CAT(att_load, SFX)(k, qkv, b, T, (int64_t)(Hq + g) * hd, hd);
  CAT(att_load, SFX)(v, qkv, b, T, (int64_t)(Hq + Hkv + g) * hd, hd);
  for (int t = 0; t < T; t++) {
    const REAL *qt = q + (int64_t)t * hd;
    REAL m = -(REAL)INFINITY;
    const int j0 = att_j0(t, window);
    for (int j = j0; j <= t; j++) {
      const REAL *kj = k + (int64_t)j * hd;
      REAL dot = 0;
      for (int d = 0; d < hd; d++) dot += qt[d] * kj[d];
      s[j] = dot * scale;
      if (s[j] > m) m = s[j];
    }
    REAL l = 0;
    for (int j = j0; j <= t; j++) {
      s[j] = RF(exp)(s[j] - m);
      l += s[j];
    }
    REAL *ot = o + (int64_t)t * hd;
    for (int d = 0; d < hd; d++) ot[d] = 0;
    for (int j = j0; j <= t; j++) {
      const REAL p = s[j] / l, *vj = v + (int64_t)j * hd;
      for (int d = 0; d < hd; d++) ot[d] += p * vj[d];
    }
    coda_store(lse, b * T + t, h, (double)(m + RF(log)(l)));
  }
  CAT(att_store, SFX)(out, o, b, T, (int64_t)h * hd, hd);
}

/* The fused RoPE backward on one head's gradient slice gr (T x hd, at qkv
 * columns col0..) with y the same slice of qkv: zp[m, slot] = sum y*gr,
 * then each pair of gr rotated by -theta, pairs of frequency (0, 0) copied
 * (coda_attention_backward_rope). */
static void CAT(att_rope_bwd, SFX)(REAL *gr, const REAL *y, const coda_attn_rope *rope,
                                   int64_t b, int T, int64_t col0, int hd, int slot) {
  for (int t = 0; t < T; t++) {
    const int64_t m = b * T + t;
    const REAL pm = (REAL)coda_load(rope->pos, m, 0);
    REAL *g = gr + (int64_t)t * hd;
    const REAL *yt = y + (int64_t)t * hd;
    REAL z = 0;
    for (int d = 0; d + 1 < hd; d += 2) {
      const REAL a = g[d], c = g[d + 1];
      const REAL fh = (REAL)coda_load(rope->freq, 0, col0 + d),
                 fl = (REAL)coda_load(rope->freq, 0, col0 + d + 1);
      z += yt[d] * a + yt[d + 1] * c;
      if (fh != 0 || fl != 0) /* frequency (0, 0) (V's columns): copied */
        CAT(coda_rope, SFX)(a, c, pm, fh, fl, (REAL)-1, &g[d], &g[d + 1]);
    }
    coda_store(rope->zp, m, slot, (double)z);
  }
}

/* One (batch, kv head) with every query head of its group, so dk and dv
 * are owned by one task (deterministic, no atomics). With
 * p_tj = exp(s_tj - lse_t), D_t = do_t.o_t:
 *   dv_j += p_tj do_t,  ds_tj = p_tj (do_t.v_j - D_t),
 *   dq_t += scale ds_tj k_j,  dk_j += scale ds_tj q_t. */
static void CAT(att_bwd_group, SFX)(const coda_tensor *qkv, const coda_tensor *out,
                                    const coda_tensor *lse, const coda_tensor *dout,
                                    const coda_tensor *dqkv, const coda_attn_rope *rope,
                                    int64_t b, int g, int T, int Hq, int Hkv, int hd,
                                    double scale_in, int window, REAL *buf) {
  const int group = Hq / Hkv;
  /* scale_in 0: 1/sqrt(hd) */
  const REAL scale = scale_in > 0.0 ? (REAL)scale_in : (REAL)1 / RF(sqrt)((REAL)hd);
  const int64_t n = (int64_t)T * hd;
  REAL *k = buf, *v = k + n, *dk = v + n, *dv = dk + n, *q = dv + n, *o = q + n, *dO = o + n,
       *dq = dO + n, *L = dq + n;
  CAT(att_load, SFX)(k, qkv, b, T, (int64_t)(Hq + g) * hd, hd);
  CAT(att_load, SFX)(v, qkv, b, T, (int64_t)(Hq + Hkv + g) * hd, hd);
  for (int64_t i = 0; i < n; i++) dk[i] = dv[i] = 0;
  for (int h = g * group; h < (g + 1) * group; h++) {
    CAT(att_load, SFX)(q, qkv, b, T, (int64_t)h * hd, hd);
    CAT(att_load, SFX)(o, out, b, T, (int64_t)h * hd, hd);
    CAT(att_load, SFX)(dO, dout, b, T, (int64_t)h * hd, hd);
    for (int t = 0; t < T; t++) L[t] = (REAL)coda_load(lse, b * T + t, h);
    for (int64_t i = 0; i < n; i++) dq[i] = 0;
    for (int t = 0; t < T; t++) {
      const REAL *qt = q + (int64_t)t * hd, *ot = o + (int64_t)t * hd, *dot_ = dO + (int64_t)t * hd;
      REAL *dqt = dq + (int64_t)t * hd;
      REAL Dt = 0;
      for (int d = 0; d < hd; d++) Dt += dot_[d] * ot[d];
      for (int j = att_j0(t, window); j <= t; j++) {
        const REAL *kj = k + (int64_t)j * hd, *vj = v + (int64_t)j * hd;
        REAL *dkj = dk + (int64_t)j * hd, *dvj = dv + (int64_t)j * hd;
        REAL sc = 0, dp = 0;
        for (int d = 0; d < hd; d++) {
          sc += qt[d] * kj[d];
          dp += dot_[d] * vj[d];
        }
        const REAL p = RF(exp)(sc * scale - L[t]);
        const REAL ds = p * (dp - Dt) * scale;
        for (int d = 0; d < hd; d++) {
          dvj[d] += p * dot_[d];
          dqt[d] += ds * kj[d];
          dkj[d] += ds * qt[d];
        }
      }
    }
    if (rope) CAT(att_rope_bwd, SFX)(dq, q, rope, b, T, (int64_t)h * hd, hd, h);
    CAT(att_store, SFX)(dqkv, dq, b, T, (int64_t)h * hd, hd);
  }
  if (rope) {
    CAT(att_rope_bwd, SFX)(dk, k, rope, b, T, (int64_t)(Hq + g) * hd, hd, Hq + g);
    CAT(att_rope_bwd, SFX)(dv, v, rope, b, T, (int64_t)(Hq + Hkv + g) * hd, hd, Hq + Hkv + g);
  }
  CAT(att_store, SFX)(dqkv, dk, b, T, (int64_t)(Hq + g) * hd, hd);
  CAT(att_store, SFX)(dqkv, dv, b, T, (int64_t)(Hq + Hkv + g) * hd, hd);
}

#undef CAT
#undef CAT_
