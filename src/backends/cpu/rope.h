/* RoPE rotation of one adjacent pair (x, y) by sgn*theta, theta = 2*pi*frac(p*(fhi + flo)),
 * with the frequency in turns per position as a float-float pair (fhi, flo).
 * Shared by the program interpreter (rope, rope_bwd) and the CPU attention
 * backward's fused RoPE backward, so both compute the same bits. */
#ifndef CODA_CPU_ROPE_H
#define CODA_CPU_ROPE_H
#include <math.h>

static inline void coda_rope_f64(double x, double y, double p, double fhi, double flo, double sgn,
                                 double *x2, double *y2) {
  double t = p * (fhi + flo);
  t -= rint(t);
  const double th = 6.283185307179586 * t;
  const double cs = cos(th), sn = sgn * sin(th);
  *x2 = x * cs - y * sn;
  *y2 = x * sn + y * cs;
}

static inline void coda_rope_f32(float x, float y, float p, float fhi, float flo, float sgn,
                                 float *x2, float *y2) {
  /* float-float: p*fhi = hi + err exactly (two-product), lo = err + p*flo;
   * hi - rint(hi) is exact, so the fraction keeps float accuracy even when
   * p*f is ~1e6 turns. */
  const float hi = p * fhi;
  const float err = fmaf(p, fhi, -hi);
  const float lo = fmaf(p, flo, err);
  const float f = (hi - rintf(hi)) + lo;
  const float th = 6.28318530717958648f * f;
  const float cs = cosf(th), sn = sgn * sinf(th);
  *x2 = x * cs - y * sn;
  *y2 = x * sn + y * cs;
}
#endif
