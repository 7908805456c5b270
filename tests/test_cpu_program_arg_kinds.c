/* CPU program interpreter, argument kinds beyond elem mode's plain ones:
 * pair mode with half inputs and outputs, elem x2 inputs and outputs, and
 * rowsum inputs (summed in index order, in a map, fused into a GEMM, their
 * binding errors and exact mode), against double implementations written
 * here. */
#include "cpu_program_test_util.h"

/* ------------------------------------------------------- pair mode, half */

static void test_pair_program(void) {
  const int64_t M = 21, N = 70, K = 19;
  coda_tiling tl = {8, 16};
  coda_program p = parse(
      "mode pair\n"
      "input c : col f32\n"
      "input t : tile bf16\n"
      "input hf : tile f32 half\n"
      "output y : bf16\n"
      "output w : f32 half\n"
      "output ci : f32 half\n"
      "e = acc.even * c.even + t.even\n"
      "o = acc.odd * c.odd + t.odd\n"
      "store y = pack(e, o)\n"
      "store w = e * o + hf\n"
      "store ci = col + row * 1000\n"
      "reduce rs = rowsum(e * e + o * o)\n"
      "reduce sg = rowsum(e) per 8\n"
      "reduce mx = rowmax(o)\n");
  if (!p) return;
  coda_tensor A = mk(CODA_F32, K, M, M), B = mk(CODA_F16, K, N, N); /* acc = A^T B */
  coda_tensor c = mk(CODA_F32, 1, N, N), t = mk(CODA_BF16, M, N, N), hf = mk(CODA_F32, M, N / 2, N / 2);
  coda_tensor y = mk(CODA_BF16, M, N, N), w = mk(CODA_F32, M, N / 2, N / 2 + 1);
  coda_tensor ci = mk(CODA_F32, M, N / 2, N / 2);
  int64_t nt = (N + 15) / 16;
  coda_tensor rs = mk(CODA_F32, M, nt, nt), sg = mk(CODA_F32, M, (N + 7) / 8, (N + 7) / 8), mx = mk(CODA_F32, M, nt, nt);
  coda_args args;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  bind(args, "c", &c); bind(args, "t", &t); bind(args, "hf", &hf); bind(args, "y", &y);
  bind(args, "w", &w); bind(args, "ci", &ci); bind(args, "rs", &rs); bind(args, "sg", &sg); bind(args, "mx", &mx);
  coda_status st = coda_gemm_epilogue(ctx, p, CODA_T, &A, CODA_N, &B, args, tl);
  CHECK_MSG(st == CODA_OK, "%s", coda_last_error(ctx));
  int bad = 0;
  double *hv = malloc(sizeof(double) * M * N);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) acc += at(&A, k, m) * at(&B, k, n);
      hv[m * N + n] = acc * at(&c, 0, n) + at(&t, m, n);
      if (!(fabs(at(&y, m, n) - hv[m * N + n]) <= tol_for(CODA_BF16, hv[m * N + n], 10))) bad++;
    }
  for (int64_t m = 0; m < M; m++) {
    for (int64_t j = 0; j < N / 2; j++) {
      double e = hv[m * N + 2 * j], o = hv[m * N + 2 * j + 1], wr = e * o + at(&hf, m, j);
      if (!(fabs(at(&w, m, j) - wr) <= tol_for(CODA_F32, wr, 100))) bad++;
      if (at(&ci, m, j) != (double)(2 * j + 1000 * m)) bad++; /* col is the even column */
    }
    for (int64_t tj = 0; tj < nt; tj++) {
      double s = 0, mo = -INFINITY;
      for (int64_t n = tj * 16; n < N && n < (tj + 1) * 16; n += 2) {
        s += hv[m * N + n] * hv[m * N + n] + hv[m * N + n + 1] * hv[m * N + n + 1];
        if (hv[m * N + n + 1] > mo) mo = hv[m * N + n + 1];
      }
      if (!(fabs(at(&rs, m, tj) - s) <= 1e-5 * (s + 100))) bad++;
      if (!(fabs(at(&mx, m, tj) - mo) <= 1e-5 * (fabs(mo) + 10))) bad++;
    }
    for (int64_t i = 0; i < (N + 7) / 8; i++) {
      double s = 0;
      for (int64_t n = i * 8; n < N && n < (i + 1) * 8; n += 2) s += hv[m * N + n];
      if (!(fabs(at(&sg, m, i) - s) <= 1e-5 * (fabs(s) + 100))) bad++;
    }
  }
  CHECK_MSG(bad == 0, "pair mode: %d mismatches", bad);
  /* odd N in pair mode is refused */
  coda_tensor Bo = mk(CODA_F16, K, N - 1, N - 1);
  CHECK(coda_gemm_epilogue(ctx, p, CODA_T, &A, CODA_N, &Bo, args, tl) == CODA_ERR_SHAPE);
  CHECK(strlen(coda_last_error(ctx)) > 0);
  free(Bo.data);
  free(hv);
  free(A.data); free(B.data); free(c.data); free(t.data); free(hf.data); free(y.data);
  free(w.data); free(ci.data); free(rs.data); free(sg.data); free(mx.data);
  coda_args_destroy(args);
  coda_program_destroy(p);
}

/* ------------------------------------------------------ elem x2 in/out */

static void test_x2(void) {
  const int64_t M = 13, N = 27, K = 9;
  coda_tiling tl = {8, 8};
  coda_program p = parse(
      "input t : tile bf16 x2\n"
      "output y : f16 x2\n"
      "store y = pack(t.even * acc, t.odd + acc)\n");
  if (!p) return;
  coda_tensor A = mk(CODA_F32, M, K, K), B = mk(CODA_F32, K, N, N);
  coda_tensor t = mk(CODA_BF16, M, 2 * N, 2 * N), y = mk(CODA_F16, M, 2 * N, 2 * N + 4);
  coda_args args;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  bind(args, "t", &t); bind(args, "y", &y);
  CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, args, tl) == CODA_OK);
  int bad = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) acc += at(&A, m, k) * at(&B, k, n);
      double e = at(&t, m, 2 * n) * acc, o = at(&t, m, 2 * n + 1) + acc;
      if (!(fabs(at(&y, m, 2 * n) - e) <= tol_for(CODA_F16, e, 5))) bad++;
      if (!(fabs(at(&y, m, 2 * n + 1) - o) <= tol_for(CODA_F16, o, 5))) bad++;
    }
  CHECK_MSG(bad == 0, "x2: %d mismatches", bad);
  free(A.data); free(B.data); free(t.data); free(y.data);
  coda_args_destroy(args);
  coda_program_destroy(p);
}

/* ------------------------------------------------------------ rowsum inputs */

/* A rowsum input reads, at every point of row m, sum_t P[m,t] summed in
 * index order in the compute type. Partials of very different magnitudes
 * make the order visible in the bits; the reference is the float (exact
 * mode: double) loop written here. */
static void fill_partials(coda_tensor *P) {
  for (int64_t m = 0; m < P->rows; m++)
    for (int64_t t = 0; t < P->cols; t++) {
      double mag = (t % 3 == 0) ? 1e7 : (t % 3 == 1) ? 1.0 : 1e-3;
      coda_store(P, m, t, mag * urand());
    }
}

static void test_rowsum_inputs(void) {
  const int64_t M = 21, N = 40;
  coda_tiling tl = {8, 16};
  static const int64_t Ts[3] = {1, 3, 17};
  for (int pair = 0; pair < 2; pair++)
    for (int i = 0; i < 3; i++) {
      const int64_t T = Ts[i], T2 = Ts[(i + 1) % 3];
      coda_program p = parse(pair ? "mode pair\ninput s : rowsum f32\ninput q : rowsum f32\n"
                                    "output y : f32\nstore y = pack(s, q * 2)\n"
                                  : "input s : rowsum f32\ninput q : rowsum f32\n"
                                    "output y : f32\noutput z : f32\nstore y = s\nstore z = q * 2\n");
      if (!p) return;
      /* s strided (ld > T), q dense */
      coda_tensor s = mk(CODA_F32, M, T, T + 5), q = mk(CODA_F32, M, T2, T2);
      fill_partials(&s);
      fill_partials(&q);
      coda_tensor y = mk(CODA_F32, M, N, N), z = mk(CODA_F32, M, N, N);
      coda_args a;
      CHECK(coda_args_create(ctx, &a) == CODA_OK);
      bind(a, "s", &s); bind(a, "q", &q); bind(a, "y", &y);
      if (!pair) bind(a, "z", &z);
      CHECK_MSG(coda_map(ctx, p, M, N, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
      int bad = 0;
      for (int64_t m = 0; m < M; m++) {
        const float *sp = (const float *)s.data + m * s.ld, *qp = (const float *)q.data + m * q.ld;
        float rs = sp[0], rq = qp[0];
        for (int64_t t = 1; t < T; t++) rs += sp[t];
        for (int64_t t = 1; t < T2; t++) rq += qp[t];
        for (int64_t n = 0; n < N; n++) {
          float ys = ((const float *)y.data)[m * N + n];
          float want = pair && n % 2 ? rq * 2.0f : rs;
          float zs = ((const float *)z.data)[m * N + n];
          if (memcmp(&ys, &want, 4) != 0) bad++;
          if (!pair && zs != rq * 2.0f) bad++;
        }
      }
      CHECK_MSG(bad == 0, "rowsum input (pair %d, T %lld/%lld): %d values differ from the float loop",
                pair, (long long)T, (long long)T2, bad);
      free(s.data); free(q.data); free(y.data); free(z.data);
      coda_args_destroy(a);
      coda_program_destroy(p);
    }

  /* fused into a GEMM: acc scaled by rsqrt of the row sum (the folded
   * RMSNorm), against a double reference */
  {
    const int64_t K = 30, T = 3;
    coda_program p = parse("input ss : rowsum f32\ninput w : col f32\noutput y : f32\n"
                           "r = rsqrt(ss * 0.05 + 1e-5)\nstore y = acc * r * w\n");
    coda_tensor A = mk(CODA_F32, M, K, K), B = mk(CODA_F32, N, K, K), w = mk(CODA_F32, 1, N, N);
    coda_tensor ss = mk(CODA_F32, M, T, T), y = mk(CODA_F32, M, N, N);
    for (int64_t m = 0; m < M; m++)
      for (int64_t t = 0; t < T; t++) coda_store(&ss, m, t, fabs(urand()) + 0.1);
    coda_args a;
    CHECK(coda_args_create(ctx, &a) == CODA_OK);
    bind(a, "ss", &ss); bind(a, "w", &w); bind(a, "y", &y);
    CHECK(p && coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, a, tl) == CODA_OK);
    double maxe = 0;
    for (int64_t m = 0; m < M; m++) {
      double sum = 0;
      for (int64_t t = 0; t < T; t++) sum += at(&ss, m, t);
      double r = 1 / sqrt(sum * 0.05 + 1e-5);
      for (int64_t n = 0; n < N; n++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += at(&A, m, k) * at(&B, n, k);
        double ref = acc * r * at(&w, 0, n);
        maxe = fmax(maxe, fabs(at(&y, m, n) - ref) / (1 + fabs(ref)));
      }
    }
    CHECK_MSG(maxe < 1e-5, "rowsum in a GEMM epilogue: error %g", maxe);

    /* binding errors: rows != M, no columns, wrong dtype */
    coda_tensor s_rows = mk(CODA_F32, M + 1, T, T), s_none = {ss.data, CODA_F32, M, 0, 1};
    coda_tensor s_bf = mk(CODA_BF16, M, T, T), s_f64 = mk(CODA_F64, M, T, T);
    bind(a, "ss", &s_rows);
    CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, a, tl) == CODA_ERR_SHAPE);
    CHECK_MSG(strstr(coda_last_error(ctx), "rowsum input 'ss'") &&
              strstr(coda_last_error(ctx), "expected 21 rows"), "%s", coda_last_error(ctx));
    bind(a, "ss", &s_none);
    CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, a, tl) == CODA_ERR_SHAPE);
    CHECK_MSG(strstr(coda_last_error(ctx), "at least one column"), "%s", coda_last_error(ctx));
    bind(a, "ss", &s_bf);
    CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, a, tl) == CODA_ERR_DTYPE);
    CHECK_MSG(strstr(coda_last_error(ctx), "dtype bf16, declared f32"), "%s", coda_last_error(ctx));
    bind(a, "ss", &s_f64);
    CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, a, tl) == CODA_ERR_DTYPE);
    free(A.data); free(B.data); free(w.data); free(ss.data); free(y.data);
    free(s_rows.data); free(s_bf.data); free(s_f64.data);
    coda_args_destroy(a);
    coda_program_destroy(p);
  }

  /* exact mode: the sum in double, in index order */
  {
    coda_context cx = test_context(CODA_PRECISION_F64, 0);
    CHECK(cx != NULL);
    coda_program p = parse_with(cx, "input s : rowsum f64\ninput q : rowsum f32\noutput y : f64\n"
                                    "output z : f64\nstore y = s\nstore z = q\n");
    coda_tensor s = mk(CODA_F64, M, 17, 17), q = mk(CODA_F32, M, 3, 3);
    fill_partials(&s);
    fill_partials(&q);
    coda_tensor y = mk(CODA_F64, M, N, N), z = mk(CODA_F64, M, N, N);
    coda_args a;
    CHECK(coda_args_create(cx, &a) == CODA_OK);
    bind(a, "s", &s); bind(a, "q", &q); bind(a, "y", &y); bind(a, "z", &z);
    CHECK(p && coda_map(cx, p, M, N, a, tl) == CODA_OK);
    int bad = 0;
    for (int64_t m = 0; m < M; m++) {
      double rs = ((const double *)s.data)[m * 17], rq = ((const float *)q.data)[m * 3];
      for (int t = 1; t < 17; t++) rs += ((const double *)s.data)[m * 17 + t];
      for (int t = 1; t < 3; t++) rq += ((const float *)q.data)[m * 3 + t];
      for (int64_t n = 0; n < N; n++) bad += at(&y, m, n) != rs || at(&z, m, n) != rq;
    }
    CHECK_MSG(bad == 0, "exact-mode rowsum inputs: %d values differ from the double loop", bad);
    free(s.data); free(q.data); free(y.data); free(z.data);
    coda_args_destroy(a);
    coda_program_destroy(p);
    coda_context_destroy(cx);
  }
}

int main(void) {
  rng_state = test_seed();
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_pair_program();
  test_x2();
  test_rowsum_inputs();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
