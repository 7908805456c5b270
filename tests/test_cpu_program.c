/* CPU program interpreter: every op, load kind, store kind and reduction
 * against straightforward double implementations written here; ragged
 * tiles, pair mode, x2/half, accumulate, rope at large positions,
 * finishers, exact mode, thread-count determinism, throughput report. */
#include "check.h"
#include "base/internal.h"
#include "lang/ir.h"
#include "test_util.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static coda_context ctx;
static uint64_t rng_state;
static double urand(void) { return xorshift64_unit(&rng_state); }

static coda_tensor mk(coda_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  return rand_view(&rng_state, dt, rows, cols, ld, 1, 1.0);
}
static double at(const coda_tensor *t, int64_t i, int64_t j) { return coda_load(t, i, j); }

static coda_program parse_with(coda_context c, const char *text) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(c, text, &p);
  CHECK_MSG(s == CODA_OK, "parse: %s\n%s", coda_last_error(c), text);
  return p;
}
static coda_program parse(const char *text) { return parse_with(ctx, text); }

static void bind(coda_args a, const char *name, const coda_tensor *t) {
  CHECK(coda_args_set(a, name, t) == CODA_OK);
}

/* bound on |got - ref| for a value stored to dtype, computed in fp32 */
static double tol_for(coda_dtype dt, double ref, double scale) {
  double u = dt == CODA_BF16 ? 1.0 / 128 : dt == CODA_F16 ? 1.0 / 1024 : 0;
  return u * fabs(ref) + 2e-5 * (scale + fabs(ref)) + 1e-30;
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double gelu(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double dgelu(double x) { /* derivative by the chain rule, written out */
  double k = sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
  double du = k * (1 + 3 * 0.044715 * x * x);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
}
static double dsilu(double x) { return sigm(x) + x * sigm(x) * (1 - sigm(x)); }
static double frac_turns(double p, double fh, double fl) {
  double t = p * (fh + fl);
  return t - floor(t);
}

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
  test_ops();
  test_elem_program();
  test_online_lse();
  test_determinism();
  test_pair_program();
  test_x2();
  test_rope_large();
  test_exact();
  test_rowsum_inputs();
  report_throughput();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
