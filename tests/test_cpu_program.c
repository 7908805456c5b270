/* CPU program interpreter: every op, load kind, store kind and reduction
 * of elem mode against straightforward double implementations written
 * here; ragged tiles, accumulate, finishers, rowlse across chunks,
 * thread-count determinism, throughput report. Pair mode, x2/half and
 * rowsum inputs are in test_cpu_program_arg_kinds.c, rope at large
 * positions and exact mode in test_cpu_program_precision.c. */
#include "cpu_program_test_util.h"

#include <float.h>
#include <time.h>

/* ------------------------------------------------------------ every op */

enum { NOPS = 28 };
static const char *op_text[NOPS] = {
    "y = a + b", "y = a - b", "y = a * b", "y = a / (abs(b) + 0.5)", "y = -a",
    "y = fma(a, b, c)", "y = exp(a * 3)", "y = log(abs(a) + 0.25)", "y = sqrt(abs(a) + 0.25)",
    "y = rsqrt(abs(a) + 0.25)", "y = sigmoid(a * 4)", "y = silu(a * 4)", "y = gelu(a * 4)",
    "y = dgelu(a * 4)", "y = dsilu(a * 4)", "y = tanh(a * 2)", "y = min(a, b)", "y = max(a, b)",
    "y = (a < b) + 2 * (a <= c) + 4 * (a > b) + 8 * (a >= c) + 16 * (a == a) + 32 * (a != b)",
    "y = select(a < b, c, a)", "g = a * 4\ny = swiglu(g, b)", "g = a * 4\ny = geglu(g, b)",
    "g = a * 4\ny, z = dswiglu(g, b, c)", "g = a * 4\ny, z = dgeglu(g, b, c)",
    "y, z = rope(a, b, row, c, 0.0)", "y, z = rope_bwd(a, b, row, c, 0.0)",
    "y = row * 1000 + col + 1.5e-3 * a", "e = a * b\nf = e + c\ny = f * f"};

static double op_ref(int op, double a, double b, double c, double m, double n, double *z) {
  double g = 4 * a;
  *z = 0;
  switch (op) {
  case 0: return a + b;
  case 1: return a - b;
  case 2: return a * b;
  case 3: return a / (fabs(b) + 0.5);
  case 4: return -a;
  case 5: return a * b + c;
  case 6: return exp(3 * a);
  case 7: return log(fabs(a) + 0.25);
  case 8: return sqrt(fabs(a) + 0.25);
  case 9: return 1 / sqrt(fabs(a) + 0.25);
  case 10: return sigm(g);
  case 11: return g * sigm(g);
  case 12: return gelu(g);
  case 13: return dgelu(g);
  case 14: return dsilu(g);
  case 15: return tanh(2 * a);
  case 16: return a < b ? a : b;
  case 17: return a > b ? a : b;
  case 18: return (a < b) + 2 * (a <= c) + 4 * (a > b) + 8 * (a >= c) + 16 + 32 * (a != b);
  case 19: return a < b ? c : a;
  case 20: return g * sigm(g) * b;
  case 21: return gelu(g) * b;
  case 22: *z = c * g * sigm(g); return c * b * dsilu(g);
  case 23: *z = c * gelu(g); return c * b * dgelu(g);
  case 24:
  case 25: {
    double th = 2 * M_PI * frac_turns(m, c, 0) * (op == 24 ? 1 : -1);
    *z = a * sin(th) + b * cos(th);
    return a * cos(th) - b * sin(th);
  }
  case 26: return m * 1000 + n + 1.5e-3 * a;
  case 27: return (a * b + c) * (a * b + c);
  }
  return 0;
}

static void test_ops(void) {
  const int64_t M = 19, N = 70;
  coda_tiling tl = {8, 32};
  for (int op = 0; op < NOPS; op++) {
    int two = strstr(op_text[op], "y, z") != NULL;
    char text[512];
    snprintf(text, sizeof text,
             "input a : tile f32\ninput b : tile f32\ninput c : tile bf16\noutput Y : f32\n%s"
             "%s\nstore Y = y\n%s",
             two ? "output Z : f32\n" : "", op_text[op], two ? "store Z = z\n" : "");
    coda_program p = parse(text);
    if (!p) continue;
    coda_tensor A = mk(CODA_F32, M, N, N + 1), B = mk(CODA_F32, M, N, N), C = mk(CODA_BF16, M, N, N + 5);
    coda_tensor Y = mk(CODA_F32, M, N, N), Z = mk(CODA_F32, M, N, N);
    /* exact ties for the comparisons */
    for (int64_t i = 0; i < M; i += 3) coda_store(&B, i, i % N, at(&A, i, i % N));
    coda_args args;
    CHECK(coda_args_create(ctx, &args) == CODA_OK);
    bind(args, "a", &A);
    bind(args, "b", &B);
    bind(args, "c", &C);
    bind(args, "Y", &Y);
    if (two) bind(args, "Z", &Z);
    coda_status s = coda_map(ctx, p, M, N, args, tl);
    CHECK_MSG(s == CODA_OK, "op %d: %s", op, coda_last_error(ctx));
    int bad = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double z, y = op_ref(op, at(&A, m, n), at(&B, m, n), at(&C, m, n), (double)m, (double)n, &z);
        double tol = 1e-5 * (1 + fabs(y));
        if (!(fabs(at(&Y, m, n) - y) <= tol)) {
          if (bad++ < 3) fprintf(stderr, "op %d (%lld,%lld): %.9g vs %.9g\n", op, (long long)m, (long long)n, at(&Y, m, n), y);
        }
        if (two && !(fabs(at(&Z, m, n) - z) <= 1e-5 * (1 + fabs(z)))) {
          if (bad++ < 3) fprintf(stderr, "op %d second (%lld,%lld): %.9g vs %.9g\n", op, (long long)m, (long long)n, at(&Z, m, n), z);
        }
      }
    CHECK_MSG(bad == 0, "op %d (%s): %d mismatches", op, op_text[op], bad);
    coda_args_destroy(args);
    coda_program_destroy(p);
    free(A.data); free(B.data); free(C.data); free(Y.data); free(Z.data);
  }
}

/* ------------------------------------- elem GEMM program, all reductions */

static const char *prog_elem =
    "input b : col bf16\n"
    "input r : row f32\n"
    "input s : scalar f16\n"
    "input t : tile bf16\n"
    "input idx : row i32\n"
    "output y : bf16\n"
    "output z : f32 accumulate\n"
    "h = acc * r + b\n"
    "store y = h * s + t\n"
    "store z = h * 0.5\n"
    "reduce ss = rowsum(h * h)\n"
    "reduce sx = rowsum(h)\n"
    "reduce mx = rowmax(h)\n"
    "reduce ls = rowlse(h)\n"
    "reduce cs = colsum(h * t)\n"
    "reduce sg = rowsum(h * h) per 16\n"
    "reduce sg2 = rowsum(h) per 16\n"
    "reduce sgb = rowsum(h) per 64\n"
    "reduce pk = rowpick(h, idx)\n"
    "reduce ninf = rowlse(log(h * 0))\n"
    "finish rs = rstd(ss, 1e-5)\n"
    "finish rc = rstd(ss, 1e-5, sx)\n"
    "finish su = sum(sx)\n"
    "finish me = mean(sx)\n"
    "finish mxf = max(mx)\n"
    "finish lf = lse(ls)\n"
    "finish csum = sum(cs)\n"
    "finish cmean = mean(cs)\n"
    "finish srs = rstd(sg, 1e-6, sg2)\n"
    "finish sgs = sum(sgb)\n"
    "finish lninf = lse(ninf)\n";

typedef struct named {
  const char *name;
  coda_tensor t;
} named;

static void test_elem_program(void) {
  const int64_t M = 45, N = 150, K = 37;
  const int tm = 16, tn = 32;
  coda_tiling tl = {tm, tn};
  coda_program p = parse(prog_elem);
  if (!p) return;
  coda_tensor A = mk(CODA_BF16, M, K, K), B = mk(CODA_F32, N, K, K + 3); /* acc = A B^T */
  coda_tensor b = mk(CODA_BF16, 1, N, N), r = mk(CODA_F32, M, 1, 2), s = mk(CODA_F16, 1, 1, 1);
  coda_tensor t = mk(CODA_BF16, M, N, N), idx = {calloc(3 * M, 4), CODA_I32, M, 1, 3};
  for (int64_t m = 0; m < M; m++)
    ((int32_t *)idx.data)[3 * m] = m % 5 == 0 ? -1 : m % 7 == 0 ? (int32_t)N + 3 : (int32_t)((m * 37) % N);
  coda_tensor y = mk(CODA_BF16, M, N, N), z = mk(CODA_F32, M, N, N + 2);
  double *z0 = malloc(sizeof(double) * M * N);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) z0[m * N + n] = at(&z, m, n);
  const int64_t nt = (N + tn - 1) / tn, mt = (M + tm - 1) / tm;
  named parts[] = {{"ss", mk(CODA_F32, M, nt, nt)},       {"sx", mk(CODA_F32, M, nt, nt)},
                   {"mx", mk(CODA_F32, M, nt, nt + 1)},   {"ls", mk(CODA_F32, M, nt, nt)},
                   {"cs", mk(CODA_F32, mt, N, N)},        {"sg", mk(CODA_F32, M, 10, 10)},
                   {"sg2", mk(CODA_F32, M, 10, 10)},      {"sgb", mk(CODA_F32, M, 5, 5)},
                   {"pk", mk(CODA_F32, M, 1, 1)},         {"ninf", mk(CODA_F32, M, nt, nt)}};
  const int NP = 10;
  coda_args args;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  bind(args, "b", &b); bind(args, "r", &r); bind(args, "s", &s); bind(args, "t", &t);
  bind(args, "idx", &idx); bind(args, "y", &y); bind(args, "z", &z);
  for (int i = 0; i < NP; i++) bind(args, parts[i].name, &parts[i].t);
  coda_status st = coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_T, &B, args, tl);
  CHECK_MSG(st == CODA_OK, "%s", coda_last_error(ctx));

  /* reference in double */
  double *h = malloc(sizeof(double) * M * N), *ha = malloc(sizeof(double) * M * N);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0, aa = 0;
      for (int64_t k = 0; k < K; k++) {
        acc += at(&A, m, k) * at(&B, n, k);
        aa += fabs(at(&A, m, k) * at(&B, n, k));
      }
      h[m * N + n] = acc * at(&r, m, 0) + at(&b, 0, n);
      ha[m * N + n] = aa * fabs(at(&r, m, 0)) + fabs(at(&b, 0, n)); /* error scale */
    }
  int bad = 0;
  double sv = at(&s, 0, 0);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double hv = h[m * N + n], sc = ha[m * N + n];
      double yr = hv * sv + at(&t, m, n);
      if (!(fabs(at(&y, m, n) - yr) <= tol_for(CODA_BF16, yr, sc))) bad++;
      double zr = z0[m * N + n] + 0.5 * hv;
      if (!(fabs(at(&z, m, n) - zr) <= tol_for(CODA_F32, zr, sc))) bad++;
    }
  CHECK_MSG(bad == 0, "elem stores: %d mismatches", bad);

  /* partials */
  bad = 0;
  for (int64_t m = 0; m < M; m++) {
    for (int64_t j = 0; j < nt; j++) {
      double ss = 0, sx = 0, mx = -INFINITY, sa = 0;
      for (int64_t n = j * tn; n < N && n < (j + 1) * tn; n++) {
        double v = h[m * N + n];
        ss += v * v; sx += v; sa += fabs(v) + ha[m * N + n];
        if (v > mx) mx = v;
      }
      double ls = 0;
      for (int64_t n = j * tn; n < N && n < (j + 1) * tn; n++) ls += exp(h[m * N + n] - mx);
      ls = mx + log(ls);
      if (!(fabs(at(&parts[0].t, m, j) - ss) <= 1e-5 * (sa * sa + 1))) bad++;
      if (!(fabs(at(&parts[1].t, m, j) - sx) <= 1e-5 * (sa + 1))) bad++;
      if (!(fabs(at(&parts[2].t, m, j) - mx) <= 1e-5 * (fabs(mx) + 1))) bad++;
      if (!(fabs(at(&parts[3].t, m, j) - ls) <= 1e-5 * (fabs(ls) + 1))) bad++;
      if (!(at(&parts[9].t, m, j) == -INFINITY)) bad++;
    }
    for (int64_t i = 0; i < 10; i++) { /* per 16 with tile_n 32: intervals of 16 */
      double a = 0, a2 = 0, sa = 0;
      for (int64_t n = i * 16; n < N && n < (i + 1) * 16; n++) {
        a += h[m * N + n] * h[m * N + n]; a2 += h[m * N + n]; sa += fabs(h[m * N + n]) + 1;
      }
      if (!(fabs(at(&parts[5].t, m, i) - a) <= 1e-5 * (sa * sa + 1))) bad++;
      if (!(fabs(at(&parts[6].t, m, i) - a2) <= 1e-5 * (sa + 1))) bad++;
    }
    for (int64_t i = 0; i < 5; i++) { /* per 64 with tile_n 32: intervals of 32 */
      double a = 0, sa = 0;
      for (int64_t n = i * 32; n < N && n < (i + 1) * 32; n++) { a += h[m * N + n]; sa += fabs(h[m * N + n]) + 1; }
      if (!(fabs(at(&parts[7].t, m, i) - a) <= 1e-5 * (sa + 1))) bad++;
    }
    int32_t k = ((int32_t *)idx.data)[3 * m];
    double pk = (k >= 0 && k < N) ? h[m * N + k] : 0;
    if (!(fabs(at(&parts[8].t, m, 0) - pk) <= 1e-5 * (fabs(pk) + ha[m * N + (k >= 0 && k < N ? k : 0)] + 1))) bad++;
  }
  for (int64_t i = 0; i < mt; i++)
    for (int64_t n = 0; n < N; n++) {
      double a = 0, sa = 0;
      for (int64_t m = i * tm; m < M && m < (i + 1) * tm; m++) {
        a += h[m * N + n] * at(&t, m, n); sa += (fabs(h[m * N + n]) + ha[m * N + n]) * fabs(at(&t, m, n));
      }
      if (!(fabs(at(&parts[4].t, i, n) - a) <= 1e-5 * (sa + 1))) bad++;
    }
  CHECK_MSG(bad == 0, "partials: %d mismatches", bad);

  /* finishers, against statistics of the full rows (not of the partials) */
  struct { const char *name; int64_t rows, cols; } fin[] = {
      {"rs", M, 1}, {"rc", M, 1}, {"su", M, 1}, {"me", M, 1}, {"mxf", M, 1}, {"lf", M, 1},
      {"csum", 1, N}, {"cmean", 1, N}, {"srs", M, 10}, {"sgs", M, 3}, {"lninf", M, 1}};
  const int NF = 11;
  coda_tensor fo[11];
  for (int i = 0; i < NF; i++) {
    fo[i] = mk(CODA_F32, fin[i].rows, fin[i].cols, fin[i].cols);
    bind(args, fin[i].name, &fo[i]);
  }
  for (int i = 0; i < NF; i++) {
    st = coda_finish(ctx, p, fin[i].name, args, M, N, tl);
    CHECK_MSG(st == CODA_OK, "finish %s: %s", fin[i].name, coda_last_error(ctx));
  }
  bad = 0;
  for (int64_t m = 0; m < M; m++) {
    double ss = 0, sx = 0, mx = -INFINITY, sa = 0, l = 0;
    for (int64_t n = 0; n < N; n++) {
      double v = h[m * N + n];
      ss += v * v; sx += v; sa += fabs(v) + ha[m * N + n];
      if (v > mx) mx = v;
    }
    for (int64_t n = 0; n < N; n++) l += exp(h[m * N + n] - mx);
    double rs = 1 / sqrt(ss / N + 1e-5), mu = sx / N, rc = 1 / sqrt(ss / N - mu * mu + 1e-5);
    double ref[] = {rs, rc, sx, mu, mx, mx + log(l)};
    double scl[] = {rs, rc * rc * rc * (sa * sa / N) , sa, sa / N, fabs(mx) + 1, fabs(mx) + 1};
    for (int i = 0; i < 6; i++)
      if (!(fabs(at(&fo[i], m, 0) - ref[i]) <= 1e-5 * (scl[i] + fabs(ref[i]) + 1))) {
        if (bad++ < 5) fprintf(stderr, "finish %s row %lld: %.9g vs %.9g\n", fin[i].name, (long long)m, at(&fo[i], m, 0), ref[i]);
      }
    if (!(at(&fo[10], m, 0) == -INFINITY)) bad++;
    for (int64_t sgi = 0; sgi < 10; sgi++) { /* segment 16: centered rstd over 16 columns */
      double a = 0, a2 = 0, sa2 = 0;
      for (int64_t n = sgi * 16; n < N && n < (sgi + 1) * 16; n++) {
        a += h[m * N + n] * h[m * N + n]; a2 += h[m * N + n]; sa2 += fabs(h[m * N + n]) + 1;
      }
      double mu2 = a2 / 16, rr = 1 / sqrt(a / 16 - mu2 * mu2 + 1e-6);
      if (!(fabs(at(&fo[8], m, sgi) - rr) <= 1e-4 * rr * rr * rr * (sa2 * sa2 / 16 + 1) + 1e-5 * rr)) {
        if (bad++ < 5) fprintf(stderr, "srs (%lld,%lld): %.9g vs %.9g\n", (long long)m, (long long)sgi, at(&fo[8], m, sgi), rr);
      }
    }
    for (int64_t sgi = 0; sgi < 3; sgi++) { /* segment 64 */
      double a = 0, sa2 = 0;
      for (int64_t n = sgi * 64; n < N && n < (sgi + 1) * 64; n++) { a += h[m * N + n]; sa2 += fabs(h[m * N + n]) + 1; }
      if (!(fabs(at(&fo[9], m, sgi) - a) <= 1e-5 * (sa2 + 1))) bad++;
    }
  }
  for (int64_t n = 0; n < N; n++) {
    double a = 0, sa = 0;
    for (int64_t m = 0; m < M; m++) { a += h[m * N + n] * at(&t, m, n); sa += (fabs(h[m * N + n]) + ha[m * N + n]) * fabs(at(&t, m, n)); }
    if (!(fabs(at(&fo[6], 0, n) - a) <= 1e-5 * (sa + 1))) bad++;
    if (!(fabs(at(&fo[7], 0, n) - a / M) <= 1e-5 * (sa / M + 1))) bad++;
  }
  CHECK_MSG(bad == 0, "finishers: %d mismatches", bad);

  for (int i = 0; i < NF; i++) free(fo[i].data);
  for (int i = 0; i < NP; i++) free(parts[i].t.data);
  free(h); free(ha); free(z0);
  free(A.data); free(B.data); free(b.data); free(r.data); free(s.data); free(t.data);
  free(idx.data); free(y.data); free(z.data);
  coda_args_destroy(args);
  coda_program_destroy(p);
}

/* The same program with 1 and 3 threads (large enough to run in
 * parallel) gives bitwise identical outputs and partials. */
static void test_determinism(void) {
  const int64_t M = 200, N = 330, K = 64;
  const int tm = 16, tn = 32;
  coda_tiling tl = {tm, tn};
  coda_program p = parse(prog_elem);
  if (!p) return;
  coda_tensor A = mk(CODA_BF16, M, K, K), B = mk(CODA_F32, N, K, K);
  coda_tensor b = mk(CODA_BF16, 1, N, N), r = mk(CODA_F32, M, 1, 1), s = mk(CODA_F16, 1, 1, 1);
  coda_tensor t = mk(CODA_BF16, M, N, N), idx = {calloc(M, 4), CODA_I32, M, 1, 1};
  for (int64_t m = 0; m < M; m++) ((int32_t *)idx.data)[m] = (int32_t)((m * 53) % (N + 20)) - 10;
  const int64_t nt = (N + tn - 1) / tn, mt = (M + tm - 1) / tm;
  const char *pn[] = {"ss", "sx", "mx", "ls", "cs", "sg", "sg2", "sgb", "pk", "ninf"};
  const int64_t pr[] = {M, M, M, M, mt, M, M, M, M, M};
  const int64_t pc[] = {nt, nt, nt, nt, N, (N + 15) / 16, (N + 15) / 16, nt, 1, nt};
  coda_tensor out[2][12], zinit = mk(CODA_F32, M, N, N);
  for (int run = 0; run < 2; run++) {
    coda_context c = test_context(CODA_PRECISION_F32, run ? 3 : 1);
    CHECK(c != NULL);
    coda_args a;
    CHECK(coda_args_create(c, &a) == CODA_OK);
    bind(a, "b", &b); bind(a, "r", &r); bind(a, "s", &s); bind(a, "t", &t); bind(a, "idx", &idx);
    out[run][0] = mk(CODA_BF16, M, N, N);
    out[run][1] = mk(CODA_F32, M, N, N);
    memcpy(out[run][1].data, zinit.data, sizeof(float) * M * N); /* same start for z */
    bind(a, "y", &out[run][0]);
    bind(a, "z", &out[run][1]);
    for (int i = 0; i < 10; i++) {
      out[run][2 + i] = mk(CODA_F32, pr[i], pc[i], pc[i]);
      bind(a, pn[i], &out[run][2 + i]);
    }
    CHECK_MSG(coda_gemm_epilogue(c, p, CODA_N, &A, CODA_T, &B, a, tl) == CODA_OK, "%s", coda_last_error(c));
    coda_args_destroy(a);
    coda_context_destroy(c);
  }
  for (int i = 0; i < 12; i++) {
    const coda_tensor *x = &out[0][i];
    CHECK_MSG(memcmp(x->data, out[1][i].data, coda_dtype_size(x->dtype) * x->rows * x->cols) == 0,
              "tensor %d differs between 1 and 3 threads", i);
    free(out[0][i].data);
    free(out[1][i].data);
  }
  free(A.data); free(B.data); free(b.data); free(r.data); free(s.data); free(t.data); free(idx.data);
  free(zinit.data);
  coda_program_destroy(p);
}

/* rowlse over tiles wider than one evaluation chunk: the running max and
 * sum must be combined across chunks (values grow along the row so later
 * chunks raise the max). */
static void test_online_lse(void) {
  const int64_t M = 9, N = 300;
  coda_tiling tl = {8, 256};
  coda_program p = parse("input x : tile f32\n"
                         "reduce l = rowlse(x * 8 + col * 0.05)\n"
                         "finish lf = lse(l)\n");
  if (!p) return;
  coda_tensor x = mk(CODA_F32, M, N, N), l = mk(CODA_F32, M, 2, 2), lf = mk(CODA_F32, M, 1, 1);
  coda_args args;
  CHECK(coda_args_create(ctx, &args) == CODA_OK);
  bind(args, "x", &x); bind(args, "l", &l); bind(args, "lf", &lf);
  CHECK(coda_map(ctx, p, M, N, args, tl) == CODA_OK);
  CHECK(coda_finish(ctx, p, "lf", args, M, N, tl) == CODA_OK);
  int bad = 0;
  for (int64_t m = 0; m < M; m++) {
    double tot = 0;
    for (int64_t j = 0; j < 2; j++) {
      double s = 0;
      for (int64_t n = j * 256; n < N && n < (j + 1) * 256; n++) s += exp(8 * at(&x, m, n) + 0.05 * n);
      tot += s;
      if (!(fabs(at(&l, m, j) - log(s)) <= 1e-5 * (1 + fabs(log(s))))) bad++;
    }
    if (!(fabs(at(&lf, m, 0) - log(tot)) <= 1e-5 * (1 + fabs(log(tot))))) bad++;
  }
  CHECK_MSG(bad == 0, "online rowlse: %d mismatches", bad);
  free(x.data); free(l.data); free(lf.data);
  coda_args_destroy(args);
  coda_program_destroy(p);
}

/* ------------------------------------------------------------ throughput */

static double now(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void report_throughput(void) {
  coda_context c1 = test_context(CODA_PRECISION_F32, 1);
  CHECK(c1 != NULL);
  const int64_t M = 512, N = 1024;
  coda_tiling tl = {128, 128};
  coda_program p = parse_with(c1,
      "mode pair\n"
      "input g : tile bf16\n"
      "input dy : tile bf16 half\n"
      "input r : row f32\n"
      "output dg : bf16\n"
      "output h : bf16 half\n"
      "a = g.even * r\n"
      "u = g.odd * r\n"
      "da, du = dswiglu(a, u, dy)\n"
      "store dg = pack(da, du)\n"
      "store h = swiglu(a, u)\n"
      "reduce s = rowsum(da * a + du * u)\n");
  if (!p) { coda_context_destroy(c1); return; }
  coda_tensor g = mk(CODA_BF16, M, N, N), dy = mk(CODA_BF16, M, N / 2, N / 2), r = mk(CODA_F32, M, 1, 1);
  coda_tensor dg = mk(CODA_BF16, M, N, N), h = mk(CODA_BF16, M, N / 2, N / 2), s = mk(CODA_F32, M, N / 128, N / 128);
  coda_args args;
  CHECK(coda_args_create(c1, &args) == CODA_OK);
  bind(args, "g", &g); bind(args, "dy", &dy); bind(args, "r", &r); bind(args, "dg", &dg);
  bind(args, "h", &h); bind(args, "s", &s);
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = now();
    CHECK(coda_map(c1, p, M, N, args, tl) == CODA_OK);
    best = fmin(best, now() - t0);
  }
  printf("interpreter (dswiglu pass, %d instrs, bf16), 1 thread: %.1f M elements/s\n",
         p->ninstrs, M * N / best * 1e-6);
  coda_program q = parse_with(c1,
      "input b : col f32\n"
      "output y : bf16\n"
      "h = acc * 0.5 + b\n"
      "store y = h\n"
      "reduce ss = rowsum(h * h)\n");
  coda_tensor A = mk(CODA_BF16, M, 512, 512), B = mk(CODA_BF16, N, 512, 512), b = mk(CODA_F32, 1, N, N);
  coda_tensor ss = mk(CODA_F32, M, N / 128, N / 128);
  coda_args qa;
  CHECK(coda_args_create(c1, &qa) == CODA_OK);
  bind(qa, "b", &b); bind(qa, "y", &dg); bind(qa, "ss", &ss);
  best = 1e30;
  for (int rep = 0; rep < 3 && q; rep++) {
    double t0 = now();
    CHECK(coda_gemm_epilogue(c1, q, CODA_N, &A, CODA_T, &B, qa, tl) == CODA_OK);
    best = fmin(best, now() - t0);
  }
  printf("gemm+epilogue %lldx%lldx512 bf16 (bias, store, rowsum of squares), 1 thread: %.1f GFLOP/s\n",
         (long long)M, (long long)N, 2.0 * M * N * 512 / best * 1e-9);
  free(g.data); free(dy.data); free(r.data); free(dg.data); free(h.data); free(s.data);
  free(A.data); free(B.data); free(b.data); free(ss.data);
  coda_args_destroy(args); coda_args_destroy(qa);
  coda_program_destroy(p); coda_program_destroy(q);
  coda_context_destroy(c1);
}

int main(void) {
  rng_state = test_seed();
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_ops();
  test_elem_program();
  test_online_lse();
  test_determinism();
  report_throughput();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
