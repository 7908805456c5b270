/* The device AdamW on bf16 state (CODA_OPTIM_STATE_BF16) against the
 * host's coda_adamw_update_bf16, bit for bit: random bf16 weights and
 * moments, a random fp32 gradient, segments that decay and segments that
 * do not, a clip factor (gscale != 1) and without, a range that starts
 * inside the buffer and ends off a multiple of four, and the same update
 * on a side queue.
 *
 *   test_optim_gpu     the checks (needs a CUDA GPU); exit 1 on a mismatch,
 *                      77 without a GPU */
#include "coda.h"
#include "api/api.h"
#include "base/bf16_round.h"
#include "base/rng.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

static void one_case(coda_context ctx, size_t n, size_t lo, size_t hi, double gscale, int side) {
  uint64_t r = 1234 + n + lo;
  float *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g), *m = malloc(n * sizeof *m),
        *v = malloc(n * sizeof *v);
  uint16_t *wb = malloc(n * 2), *mb = malloc(n * 2), *vb = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    wb[i] = coda_bf16_rne((float)(coda_rng_uniform(&r) * 2 - 1));
    mb[i] = coda_bf16_rne((float)((coda_rng_uniform(&r) * 2 - 1) * 1e-2));
    vb[i] = coda_bf16_rne((float)(coda_rng_uniform(&r) * 1e-4));
    g[i] = (float)((coda_rng_uniform(&r) * 2 - 1) * 3e-2);
    w[i] = coda_bf16_widen(wb[i]), m[i] = coda_bf16_widen(mb[i]), v[i] = coda_bf16_widen(vb[i]);
  }
  /* three segments: decays, does not, decays */
  const int64_t seg[6] = {(int64_t)(n / 3), 1, (int64_t)(2 * n / 3), 0, (int64_t)n, 1};
  const coda_adamw o = {0.9, 0.95, 1e-8, 0.1, 0};
  const int64_t t = 7;
  const double lr = 3e-3;
  const double coef[7] = {o.beta1, o.beta2, 1.0 - pow(o.beta1, (double)t),
                          1.0 - pow(o.beta2, (double)t), lr, o.eps, 1.0 - lr * o.weight_decay};
  const uint64_t seed = 99;
  void *dw = NULL, *dg = NULL, *dm = NULL, *dv = NULL, *dseg = NULL, *q = NULL;
  coda_status st = coda_malloc(ctx, n * 2, &dw);
  if (!st) st = coda_malloc(ctx, n * 4, &dg);
  if (!st) st = coda_malloc(ctx, n * 2, &dm);
  if (!st) st = coda_malloc(ctx, n * 2, &dv);
  if (!st) st = coda_malloc(ctx, sizeof seg, &dseg);
  if (!st) st = coda_memcpy_h2d(ctx, dw, wb, n * 2);
  if (!st) st = coda_memcpy_h2d(ctx, dg, g, n * 4);
  if (!st) st = coda_memcpy_h2d(ctx, dm, mb, n * 2);
  if (!st) st = coda_memcpy_h2d(ctx, dv, vb, n * 2);
  if (!st) st = coda_memcpy_h2d(ctx, dseg, seg, sizeof seg);
  if (!st && side) st = coda_train_side_create(ctx, 1, &q);
  if (!st && q) st = coda_train_side_fork(ctx, q);
  if (!st)
    st = coda_train_adamw_bf16(ctx, dw, dg, dm, dv, lo, hi, dseg, 3, coef, gscale, seed, t, q);
  if (!st && q) st = coda_train_side_mark(ctx, q, 0);
  if (!st && q) st = coda_train_side_wait(ctx, q, 0);
  uint16_t *gw = malloc(n * 2), *gm = malloc(n * 2), *gv = malloc(n * 2);
  if (!st) st = coda_memcpy_d2h(ctx, gw, dw, n * 2);
  if (!st) st = coda_memcpy_d2h(ctx, gm, dm, n * 2);
  if (!st) st = coda_memcpy_d2h(ctx, gv, dv, n * 2);
  if (!st) st = coda_synchronize(ctx);
  if (st) {
    printf("FAIL n %zu: %s\n", n, coda_last_error(ctx));
    fails++;
  } else {
    /* the host: the clip factor applied to the gradient first, as the
     * trainer does, then segment by segment */
    for (size_t i = 0; i < n; i++)
      if (gscale != 1.0) g[i] = (float)((double)g[i] * gscale);
    size_t s0 = 0;
    for (int k = 0; k < 3; k++) {
      const size_t e = (size_t)seg[2 * k];
      const size_t a = s0 > lo ? s0 : lo, b = e < hi ? e : hi;
      if (a < b)
        coda_adamw_update_bf16(&o, t, lr, (int)seg[2 * k + 1], seed, a, w + a, g + a, m + a, v + a,
                               b - a);
      s0 = e;
    }
    size_t diff = 0, moved = 0, outside = 0;
    for (size_t i = 0; i < n; i++) {
      const int in = i >= lo && i < hi;
      if (in) {
        diff += coda_bf16_rne(w[i]) != gw[i] || coda_bf16_rne(m[i]) != gm[i] ||
                coda_bf16_rne(v[i]) != gv[i];
        moved += gw[i] != wb[i];
      } else {
        outside += gw[i] != wb[i] || gm[i] != mb[i] || gv[i] != vb[i];
      }
    }
    const int ok = diff == 0 && outside == 0 && moved > (hi - lo) / 2;
    printf("%s n %zu [%zu, %zu) gscale %g%s: %zu of %zu differ from the host, %zu outside the "
           "range changed, %zu weights moved\n", ok ? "ok" : "FAIL", n, lo, hi, gscale,
           side ? " (side queue)" : "", diff, hi - lo, outside, moved);
    fails += !ok;
  }
  if (q) coda_train_side_destroy(ctx, q);
  coda_free(ctx, dw); coda_free(ctx, dg); coda_free(ctx, dm); coda_free(ctx, dv);
  coda_free(ctx, dseg);
  free(w); free(g); free(m); free(v); free(wb); free(mb); free(vb); free(gw); free(gm); free(gv);
}

int main(void) {
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CUDA;
  coda_context ctx;
  if (coda_context_create(&co, &ctx) != CODA_OK) {
    printf("test_optim_gpu: no CUDA context (skipped)\n");
    return 77;
  }
  one_case(ctx, 1 << 20, 0, 1 << 20, 1.0, 0);
  one_case(ctx, 1000003, 4096, 1000001, 0.37, 0);
  one_case(ctx, 65539, 0, 65539, 1.0, 1);
  coda_context_destroy(ctx);
  /* the line tests/gpu/sanitize.sh shows for each sanitizer run */
  printf("coverage: the bf16-state AdamW kernel over 3 ranges (a whole buffer; an offset range "
         "ending off a multiple of four, with a clip factor; a side queue)\n");
  printf("test_optim_gpu: %s\n", fails ? "FAILED" : "all passed");
  return fails ? 1 : 0;
}
