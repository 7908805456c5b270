/* CPU program interpreter, precision: rope at large positions (the
 * angle from split frequencies, forward and backward) and exact mode
 * (fp64 compute, one rounding of 16-bit stores, an f32 context refusing
 * f64 tensors), against double implementations written here. */
#include "cpu_program_test_util.h"

/* ------------------------------------------------ rope at large positions */

static void test_rope_large(void) {
  const int64_t M = 24, N = 64; /* 32 frequency pairs */
  coda_tiling tl = {8, 32};
  coda_program p = parse(
      "mode pair\n"
      "input x : tile f32\n"
      "input pos : row i32\n"
      "input fh : col f32\n"
      "input fl : col f32\n"
      "output y : f32\n"
      "output back : f32\n"
      "a, b = rope(x.even, x.odd, pos, fh.even, fl.even)\n"
      "c, d = rope_bwd(a, b, pos, fh.even, fl.even)\n"
      "store y = pack(a, b)\n"
      "store back = pack(c, d)\n");
  if (!p) return;
  coda_tensor x = mk(CODA_F32, M, N, N), fh = mk(CODA_F32, 1, N, N), fl = mk(CODA_F32, 1, N, N);
  coda_tensor pos = {calloc(M, 4), CODA_I32, M, 1, 1};
  coda_tensor y = mk(CODA_F32, M, N, N), back = mk(CODA_F32, M, N, N);
  double fr[64];
  for (int64_t j = 0; j < N / 2; j++) { /* turns per position: 10000^(-2j/N) / (2 pi) */
    double f = pow(10000.0, -2.0 * j / N) / (2 * M_PI);
    float hi = (float)f, lo = (float)(f - hi);
    fr[j] = (double)hi + (double)lo;
    coda_store(&fh, 0, 2 * j, hi); coda_store(&fh, 0, 2 * j + 1, hi);
    coda_store(&fl, 0, 2 * j, lo); coda_store(&fl, 0, 2 * j + 1, lo);
  }
  for (int64_t m = 0; m < M; m++) /* up to ~1.6e7 (< 2^24) */
    ((int32_t *)pos.data)[m] = (int32_t)(m < 8 ? m * 131 : (m < 16 ? 1000000 + m * 7919 : 16000000 + m * 29989));
  coda_args args;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  bind(args, "x", &x); bind(args, "pos", &pos); bind(args, "fh", &fh); bind(args, "fl", &fl);
  bind(args, "y", &y); bind(args, "back", &back);
  CHECK(coda_map(ctx, p, M, N, args, tl) == CODA_OK);
  double maxerr = 0, maxback = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t j = 0; j < N / 2; j++) {
      double pm = ((int32_t *)pos.data)[m];
      double th = 2 * M_PI * frac_turns(pm, fr[j], 0);
      double xe = at(&x, m, 2 * j), xo = at(&x, m, 2 * j + 1);
      double ye = xe * cos(th) - xo * sin(th), yo = xe * sin(th) + xo * cos(th);
      double e = fmax(fabs(at(&y, m, 2 * j) - ye), fabs(at(&y, m, 2 * j + 1) - yo));
      if (e > maxerr) maxerr = e;
      double eb = fmax(fabs(at(&back, m, 2 * j) - xe), fabs(at(&back, m, 2 * j + 1) - xo));
      if (eb > maxback) maxback = eb;
    }
  /* a plain fp32 angle would be off by ~1 rad at these positions */
  CHECK_MSG(maxerr < 2e-6, "rope max error %g", maxerr);
  CHECK_MSG(maxback < 2e-6, "rope_bwd(rope(x)) - x max error %g", maxback);
  free(x.data); free(fh.data); free(fl.data); free(pos.data); free(y.data); free(back.data);
  coda_args_destroy(args);
  coda_program_destroy(p);
}

/* ------------------------------------------------------------ exact mode */

static void test_exact(void) {
  coda_context cx = test_context(CODA_PRECISION_F64, 0);
  CHECK(cx != NULL);
  const int64_t M = 20, N = 36, K = 50;
  coda_tiling tl = {8, 16};
  coda_program p = parse_with(cx,
      "input b : col f64\n"
      "output y : f64\n"
      "h = gelu(acc + b)\n"
      "store y = h * exp(acc)\n"
      "reduce ss = rowsum(h * h)\n"
      "finish rs = rstd(ss, 1e-6)\n");
  if (!p) { coda_context_destroy(cx); return; }
  coda_tensor A = mk(CODA_F64, M, K, K), B = mk(CODA_F64, N, K, K), b = mk(CODA_F64, 1, N, N);
  coda_tensor y = mk(CODA_F64, M, N, N), ss = mk(CODA_F64, M, 3, 3), rs = mk(CODA_F64, M, 1, 1);
  coda_args args;
  CHECK(coda_args_create(cx, &args) == CODA_OK);
  bind(args, "b", &b); bind(args, "y", &y); bind(args, "ss", &ss); bind(args, "rs", &rs);
  CHECK(coda_gemm_epilogue(cx, p, CODA_N, &A, CODA_T, &B, args, tl) == CODA_OK);
  CHECK(coda_finish(cx, p, "rs", args, M, N, tl) == CODA_OK);
  double maxe = 0, maxr = 0;
  for (int64_t m = 0; m < M; m++) {
    double s2 = 0;
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) acc += at(&A, m, k) * at(&B, n, k);
      double h = gelu(acc + at(&b, 0, n));
      s2 += h * h;
      maxe = fmax(maxe, fabs(at(&y, m, n) - h * exp(acc)) / (1 + fabs(h * exp(acc))));
    }
    double r = 1 / sqrt(s2 / N + 1e-6);
    maxr = fmax(maxr, fabs(at(&rs, m, 0) - r) / r);
  }
  CHECK_MSG(maxe < 1e-12, "exact mode store error %g", maxe);
  CHECK_MSG(maxr < 1e-12, "exact mode rstd error %g", maxr);
  /* a 16-bit store from exact mode is rounded once: values just off a
   * bf16 tie (1 + (k + 1/2)/128 +- 2^-30) must round away from the tie's
   * even neighbour when they are past it */
  {
    coda_program q = parse_with(cx, "input x : tile f64\noutput y : bf16\nstore y = x\n");
    const int64_t n = 64;
    coda_tensor x = mk(CODA_F64, 1, n, n), yb = mk(CODA_BF16, 1, n, n);
    for (int64_t j = 0; j < n; j++) {
      double k = floor((urand() + 1) * 64);
      coda_store(&x, 0, j, 1 + (k + 0.5) / 128 + (j % 2 ? 1 : -1) * ldexp(1 + fabs(urand()), -30));
    }
    coda_args qa;
    CHECK(coda_args_create(cx, &qa) == CODA_OK);
    bind(qa, "x", &x); bind(qa, "y", &yb);
    coda_tiling t8 = {8, 8};
    CHECK(q && coda_map(cx, q, 1, n, qa, t8) == CODA_OK);
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
      double v = at(&x, 0, j), lo = 1 + floor((v - 1) * 128) / 128, hi = lo + 1.0 / 128;
      double ref = (v - lo < hi - v) ? lo : hi; /* never a tie here */
      if (at(&yb, 0, j) != ref) bad++;
    }
    CHECK_MSG(bad == 0, "exact-mode bf16 stores: %d not correctly rounded", bad);
    free(x.data); free(yb.data);
    coda_args_destroy(qa);
    coda_program_destroy(q);
  }
  /* an f32 context refuses the f64 program's tensors */
  CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, args, tl) != CODA_OK);
  free(A.data); free(B.data); free(b.data); free(y.data); free(ss.data); free(rs.data);
  coda_args_destroy(args);
  coda_program_destroy(p);
  coda_context_destroy(cx);
}

int main(void) {
  rng_state = test_seed();
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_rope_large();
  test_exact();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
