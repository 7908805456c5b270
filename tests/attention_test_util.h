/* The CPU attention tests' references (tests/test_attention.c,
 * tests/test_attention_mask.c): a naive double softmax attention over the
 * keys t - window < j <= t, and the central differences of
 * L(qkv) = sum out * dout through the library's own forward, which the
 * backward's gradient is held against. */
#ifndef CODA_TEST_ATTENTION_UTIL_H
#define CODA_TEST_ATTENTION_UTIL_H
#include "check.h"
#include "base/internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* o[b,t,h,:] = sum over t - window < j <= t (window 0: j <= t) of
 * softmax_j(scale q.k_j) v_j, scale 0 meaning 1/sqrt(hd); lse per row and
 * head. qkv packs q (Hq heads), k and v (Hkv heads) per row. */
static inline void attn_ref_forward(const coda_tensor *qkv, int B, int T, int Hq, int Hkv, int hd,
                                    double scale, int window, double *o, double *lse) {
  const double c = scale > 0 ? scale : 1.0 / sqrt((double)hd);
  double *s = malloc(sizeof(double) * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      const int g = h / (Hq / Hkv);
      for (int t = 0; t < T; t++) {
        const int j0 = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
        double mx = -INFINITY, l = 0;
        for (int j = j0; j <= t; j++) {
          double d = 0;
          for (int e = 0; e < hd; e++)
            d += coda_load(qkv, b * T + t, h * hd + e) * coda_load(qkv, b * T + j, (Hq + g) * hd + e);
          s[j] = c * d;
          mx = fmax(mx, s[j]);
        }
        for (int j = j0; j <= t; j++) l += exp(s[j] - mx);
        lse[(b * T + t) * Hq + h] = mx + log(l);
        for (int e = 0; e < hd; e++) {
          double acc = 0;
          for (int j = j0; j <= t; j++)
            acc += exp(s[j] - mx) / l * coda_load(qkv, b * T + j, (Hq + Hkv + g) * hd + e);
          o[((int64_t)(b * T + t) * Hq + h) * hd + e] = acc;
        }
      }
    }
  free(s);
}

/* L(qkv) = sum out * dout through the forward with mask m (NULL: the plain
 * coda_attention_forward); out and lse are scratch. */
static inline double attn_loss(coda_context cx, const coda_tensor *qkv, const coda_tensor *dout,
                               int B, int T, int Hq, int Hkv, int hd, const coda_attn_mask *m,
                               coda_tensor *out, coda_tensor *lse) {
  CHECK(m ? coda_attention_forward_mask(cx, qkv, B, T, Hq, Hkv, hd, out, lse, m) == CODA_OK
          : coda_attention_forward(cx, qkv, B, T, Hq, Hkv, hd, out, lse) == CODA_OK);
  double L = 0;
  for (int64_t r = 0; r < out->rows; r++)
    for (int64_t c = 0; c < out->cols; c++) L += coda_load(out, r, c) * coda_load(dout, r, c);
  return L;
}

/* The largest |fd - dqkv| and |fd| over every element of qkv, fd the
 * central difference (step 1e-5) of attn_loss; qkv is restored. */
static inline void attn_fd_error(coda_context cx, coda_tensor *qkv, const coda_tensor *dout,
                                 const coda_tensor *dqkv, int B, int T, int Hq, int Hkv, int hd,
                                 const coda_attn_mask *m, coda_tensor *out, coda_tensor *lse,
                                 double *maxerr, double *maxg) {
  const double eps = 1e-5;
  *maxerr = 0;
  *maxg = 0;
  for (int64_t r = 0; r < qkv->rows; r++)
    for (int64_t c = 0; c < qkv->cols; c++) {
      const double x = coda_load(qkv, r, c);
      coda_store(qkv, r, c, x + eps);
      const double Lp = attn_loss(cx, qkv, dout, B, T, Hq, Hkv, hd, m, out, lse);
      coda_store(qkv, r, c, x - eps);
      const double Lm = attn_loss(cx, qkv, dout, B, T, Hq, Hkv, hd, m, out, lse);
      coda_store(qkv, r, c, x);
      const double fd = (Lp - Lm) / (2 * eps);
      *maxerr = fmax(*maxerr, fabs(fd - coda_load(dqkv, r, c)));
      *maxg = fmax(*maxg, fabs(fd));
    }
}
#endif
