/* Finishing reductions: partials -> vectors (deterministic, in order).
 *
 * Row partials P (M x T) give one value per row, column partials (S x N)
 * one per column, segmented partials (M x I) one per row and segment.
 * sum = sum_t P, mean = sum / count, max = max_t P,
 * lse = m + log sum_t exp(P - m) with m = max_t P (-inf if all are -inf),
 * rstd = rsqrt(sum/count + eps), centered rstd = rsqrt(sum/count -
 * (sumQ/count)^2 + eps), count = N for row partials, M for column
 * partials, S for segments. Sums run in double (they are tiny). */
#include "backends/cpu/cpu.h"

#include <math.h>

static double reduce_range(const cpu_finish_desc *d, const coda_tensor *P, int64_t r,
                           int64_t t0, int64_t t1, int by_col) {
  /* by_col: partial index runs down the rows of P at column r */
  coda_finish_kind k = d->kind;
  if (k == CODA_FINISH_MAX || k == CODA_FINISH_LSE) {
    double m = -INFINITY;
    for (int64_t t = t0; t < t1; t++) {
      double v = by_col ? coda_load(P, t, r) : coda_load(P, r, t);
      if (v > m) m = v;
    }
    if (k == CODA_FINISH_MAX || m == -INFINITY || m == INFINITY) return m;
    double s = 0;
    for (int64_t t = t0; t < t1; t++) s += exp((by_col ? coda_load(P, t, r) : coda_load(P, r, t)) - m);
    return m + log(s);
  }
  double s = 0;
  for (int64_t t = t0; t < t1; t++) s += by_col ? coda_load(P, t, r) : coda_load(P, r, t);
  return s;
}

static double finish_value(const cpu_finish_desc *d, int64_t r, int64_t t0, int64_t t1,
                           int by_col, double count) {
  double s = reduce_range(d, d->P, r, t0, t1, by_col);
  switch (d->kind) {
  case CODA_FINISH_SUM:
  case CODA_FINISH_MAX:
  case CODA_FINISH_LSE: return s;
  case CODA_FINISH_MEAN: return s / count;
  case CODA_FINISH_RSTD: {
    double var = s / count;
    if (d->Q) {
      double mu = reduce_range(d, d->Q, r, t0, t1, by_col) / count;
      var -= mu * mu;
    }
    return 1.0 / sqrt(var + d->eps);
  }
  }
  return s;
}

/* Stored in the context's compute type, then rounded to out's dtype. */
static void put(const cpu_finish_desc *d, int64_t r, int64_t c, double v) {
  coda_store(d->out, r, c, d->f64 ? v : (double)(float)v);
}

void cpu_finish(const cpu_finish_desc *d) {
  if (d->layout == 1) { /* column partials S x N -> (1, N) */
    int64_t S = d->P->rows;
    for (int64_t n = 0; n < d->N; n++) put(d, 0, n, finish_value(d, n, 0, S, 1, (double)d->M));
  } else if (d->layout == 2) { /* segmented M x I -> M x ceil(N/seg) */
    int64_t g = d->seg < d->tile_n ? d->seg : d->tile_n; /* interval width */
    int64_t per = d->seg / g;                            /* intervals per segment */
    int64_t I = d->P->cols, nseg = d->out->cols;
    for (int64_t m = 0; m < d->M; m++)
      for (int64_t s = 0; s < nseg; s++) {
        int64_t t0 = s * per, t1 = t0 + per < I ? t0 + per : I;
        put(d, m, s, finish_value(d, m, t0, t1, 0, (double)d->seg));
      }
  } else { /* row partials M x T -> (M, 1) */
    int64_t T = d->P->cols;
    for (int64_t m = 0; m < d->M; m++) put(d, m, 0, finish_value(d, m, 0, T, 0, (double)d->N));
  }
}
