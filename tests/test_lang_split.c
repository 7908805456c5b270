/* Half-split pairs (`mode pair split [S]`), rowmax per segment and colmax
 * on the CPU, against references computed here in double on random data:
 *  - a GEMM + epilogue program in split mode reading acc, a column vector,
 *    a full and a half tile through both lanes and `col`, storing a packed
 *    and a half output, with a row partial, a segmented row max and their
 *    finishers; segments inside a tile (S <= tile_n) and wider than it
 *    (the second column in another tile, and S = N), in exact mode (fp64,
 *    to round-off) and in fp32 (to the fp32 rule);
 *  - colmax and rowmax per S over a map whose shape is not a multiple of
 *    the tiles, partials and finishers;
 *  - RoPE with half-split pairs against Hugging Face Llama's rotate_half
 *    form (q cos + rotate_half(q) sin, rotate_half(x) = [-x2, x1] per head);
 *  - canonical text, the builder, and the errors (segment, shapes, kinds). */
#include "coda.h"
#include "check.h"
#include "base/internal.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* max |got - want| <= tol * max(1, |want|) over n values */
static void check_close(const char *what, const double *got, const double *want, int64_t n, double tol) {
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  CHECK_MSG(worst <= tol, "%s: worst error %.3g at %lld (%.17g vs %.17g), tol %.3g", what, worst,
            (long long)at, at >= 0 ? got[at] : 0, at >= 0 ? want[at] : 0, tol);
}

/* check_close for maxima: where want is -inf (nothing reduced into it) got
 * must be exactly that; both are then set to 0 for the comparison. */
static void check_close_max(const char *what, const char *unit, double *got, double *want, int64_t n,
                            double tol) {
  for (int64_t i = 0; i < n; i++)
    if (isinf(want[i])) CHECK_MSG(got[i] == want[i], "%s: empty %s %lld is %g", what, unit, (long long)i, got[i]);
  for (int64_t i = 0; i < n; i++)
    if (isinf(want[i])) got[i] = want[i] = 0;
  check_close(what, got, want, n, tol);
}

static double *to_double(const coda_tensor *t) {
  double *d = malloc((size_t)(t->rows * t->cols) * sizeof *d);
  for (int64_t i = 0; i < t->rows; i++)
    for (int64_t j = 0; j < t->cols; j++) d[i * t->cols + j] = coda_load(t, i, j);
  return d;
}

static coda_tensor zeros(coda_dtype dt, int64_t rows, int64_t cols) {
  coda_tensor t = {calloc((size_t)(rows * cols > 0 ? rows * cols : 1), coda_dtype_size(dt)), dt, rows, cols, cols};
  return t;
}

/* The split program over A (M x K) . B (K x N) with segment S (0: the
 * row), tiling tl, segment SEG of the row max. */
static void run_split_gemm(coda_precision prec, int S, int64_t M, int64_t N, int64_t K, coda_tiling tl, int SEG,
                           uint64_t *seed) {
  const int f64 = prec == CODA_PRECISION_F64;
  const char *dt = f64 ? "f64" : "f32";
  const coda_dtype cdt = f64 ? CODA_F64 : CODA_F32;
  coda_context ctx = test_context(prec, 2);
  CHECK(ctx != NULL);
  if (!ctx) return;
  char src[1024], mode[48];
  if (S) snprintf(mode, sizeof mode, "mode pair split %d", S);
  else snprintf(mode, sizeof mode, "mode pair split");
  snprintf(src, sizeof src,
           "%s\n"
           "input t : tile %s\ninput hf : tile %s half\ninput v : col %s\n"
           "output y : %s\noutput z : %s half\n"
           "a = acc.even * v.even + t.odd\n"
           "b = acc.odd - t.even * v.odd + col * 0.01\n"
           "store y = pack(a, b)\n"
           "z0 = a * b + hf\n"
           "store z = z0\n"
           "reduce s = rowsum(z0)\n"
           "reduce mx = rowmax(z0) per %d\n"
           "finish fs = sum(s)\n"
           "finish fm = max(mx)\n",
           mode, dt, dt, dt, dt, dt, SEG);
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s", coda_last_error(ctx));
  if (!p) {
    coda_context_destroy(ctx);
    return;
  }
  CHECK_EQ_INT(coda_program_pair_split(p), S ? S : CODA_PAIR_SPLIT_ROW);
  const int64_t Sw = S ? S : N, hh = Sw / 2;
  coda_tensor A = rand_view(seed, cdt, M, K, K, 0, 1.0), B = rand_view(seed, cdt, K, N, N, 0, 1.0);
  coda_tensor t = rand_view(seed, cdt, M, N, N, 0, 1.0), hf = rand_view(seed, cdt, M, N / 2, N / 2, 0, 1.0);
  coda_tensor v = rand_view(seed, cdt, 1, N, N, 0, 1.0);
  coda_tensor y = zeros(cdt, M, N), z = zeros(cdt, M, N / 2);
  int64_t rs, cs_, rm, cm, rfm, cfm;
  CHECK(coda_program_arg_shape_ctx(ctx, p, "s", M, N, tl.tile_m, tl.tile_n, &rs, &cs_) == CODA_OK);
  CHECK(coda_program_arg_shape_ctx(ctx, p, "mx", M, N, tl.tile_m, tl.tile_n, &rm, &cm) == CODA_OK);
  CHECK(coda_program_arg_shape_ctx(ctx, p, "fm", M, N, tl.tile_m, tl.tile_n, &rfm, &cfm) == CODA_OK);
  CHECK_EQ_INT(cs_, cdiv(N, tl.tile_n));
  CHECK_EQ_INT(cm, cdiv(N, SEG < tl.tile_n ? SEG : tl.tile_n));
  CHECK_EQ_INT(cfm, cdiv(N, SEG));
  coda_dtype pdt = f64 ? CODA_F64 : CODA_F32;
  coda_tensor s = zeros(pdt, M, cs_), mx = zeros(pdt, M, cm), fs = zeros(pdt, M, 1), fm = zeros(pdt, M, cfm);
  coda_args a;
  coda_args_create(ctx, &a);
  coda_args_set(a, "t", &t);
  coda_args_set(a, "hf", &hf);
  coda_args_set(a, "v", &v);
  coda_args_set(a, "y", &y);
  coda_args_set(a, "z", &z);
  coda_args_set(a, "s", &s);
  coda_args_set(a, "mx", &mx);
  coda_args_set(a, "fs", &fs);
  coda_args_set(a, "fm", &fm);
  CHECK_MSG(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl) == CODA_OK, "%s",
            coda_last_error(ctx));
  CHECK_MSG(coda_finish(ctx, p, "fs", a, M, N, tl) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_MSG(coda_finish(ctx, p, "fm", a, M, N, tl) == CODA_OK, "%s", coda_last_error(ctx));

  /* the reference, in double from the stored (rounded) operands */
  double *Ad = to_double(&A), *Bd = to_double(&B), *td = to_double(&t), *hd = to_double(&hf), *vd = to_double(&v);
  double *yr = calloc((size_t)(M * N), sizeof *yr), *zr = calloc((size_t)(M * N / 2), sizeof *zr);
  double *sr = calloc((size_t)(M * cs_), sizeof *sr), *mr = malloc((size_t)(M * cm) * sizeof *mr);
  double *fsr = calloc((size_t)M, sizeof *fsr), *fmr = malloc((size_t)(M * cfm) * sizeof *fmr);
  const int64_t g = SEG < tl.tile_n ? SEG : tl.tile_n;
  for (int64_t i = 0; i < M * cm; i++) mr[i] = -INFINITY;
  for (int64_t i = 0; i < M * cfm; i++) fmr[i] = -INFINITY;
  for (int64_t m = 0; m < M; m++)
    for (int64_t j = 0; j < N / 2; j++) {
      const int64_t lo = j / hh * Sw + j % hh, hi = lo + hh;
      double alo = 0, ahi = 0;
      for (int64_t k = 0; k < K; k++) alo += Ad[m * K + k] * Bd[k * N + lo], ahi += Ad[m * K + k] * Bd[k * N + hi];
      const double av = alo * vd[lo] + td[m * N + hi];
      const double bv = ahi - td[m * N + lo] * vd[hi] + (double)lo * (f64 ? 0.01 : (double)0.01f);
      yr[m * N + lo] = av;
      yr[m * N + hi] = bv;
      const double z0 = av * bv + hd[m * (N / 2) + j];
      zr[m * (N / 2) + j] = z0;
      sr[m * cs_ + lo / tl.tile_n] += z0; /* the tile of the first column */
      fsr[m] += z0;
      mr[m * cm + lo / g] = fmax(mr[m * cm + lo / g], z0);
      fmr[m * cfm + lo / SEG] = fmax(fmr[m * cfm + lo / SEG], z0);
    }
  double *yg = to_double(&y), *zg = to_double(&z), *sg = to_double(&s), *mg = to_double(&mx);
  double *fsg = to_double(&fs), *fmg = to_double(&fm);
  const double tol = f64 ? 1e-12 : 2e-5 * (double)K;
  char what[128];
  snprintf(what, sizeof what, "%s split %d tile_n %d: y", f64 ? "fp64" : "fp32", S, tl.tile_n);
  check_close(what, yg, yr, M * N, tol);
  snprintf(what, sizeof what, "%s split %d tile_n %d: z (half)", f64 ? "fp64" : "fp32", S, tl.tile_n);
  check_close(what, zg, zr, M * N / 2, tol);
  snprintf(what, sizeof what, "%s split %d tile_n %d: rowsum partials", f64 ? "fp64" : "fp32", S, tl.tile_n);
  check_close(what, sg, sr, M * cs_, tol * 8);
  snprintf(what, sizeof what, "%s split %d tile_n %d: rowmax per %d partials", f64 ? "fp64" : "fp32", S, tl.tile_n, SEG);
  /* an interval without a first column is empty */
  check_close_max(what, "interval", mg, mr, M * cm, tol);
  snprintf(what, sizeof what, "%s split %d: sum finisher", f64 ? "fp64" : "fp32", S);
  check_close(what, fsg, fsr, M, tol * 8);
  snprintf(what, sizeof what, "%s split %d: max finisher per %d", f64 ? "fp64" : "fp32", S, SEG);
  check_close_max(what, "segment", fmg, fmr, M * cfm, tol);

  free(Ad), free(Bd), free(td), free(hd), free(vd), free(yr), free(zr), free(sr), free(mr), free(fsr), free(fmr);
  free(yg), free(zg), free(sg), free(mg), free(fsg), free(fmg);
  coda_tensor *all[] = {&A, &B, &t, &hf, &v, &y, &z, &s, &mx, &fs, &fm};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->data);
  coda_args_destroy(a);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
}

/* colmax and rowmax per SEG in elem mode over an M x N map */
static void run_maxima(coda_precision prec, int64_t M, int64_t N, coda_tiling tl, int SEG, uint64_t *seed) {
  const int f64 = prec == CODA_PRECISION_F64;
  const char *dt = f64 ? "f64" : "f32";
  const coda_dtype cdt = f64 ? CODA_F64 : CODA_F32;
  coda_context ctx = test_context(prec, 2);
  if (!ctx) return;
  char src[512];
  snprintf(src, sizeof src,
           "input x : tile %s\noutput y : %s\n"
           "v = x * x - 0.5 * x\nstore y = v\n"
           "reduce cm = colmax(v)\nreduce sm = rowmax(v) per %d\n"
           "finish fc = max(cm)\nfinish fs = max(sm)\n",
           dt, dt, SEG);
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, src, &p) == CODA_OK, "%s", coda_last_error(ctx));
  if (!p) {
    coda_context_destroy(ctx);
    return;
  }
  int64_t r1, c1, r2, c2, r3, c3, r4, c4;
  CHECK(coda_program_arg_shape(p, "cm", M, N, tl.tile_m, tl.tile_n, &r1, &c1) == CODA_OK);
  CHECK(coda_program_arg_shape(p, "sm", M, N, tl.tile_m, tl.tile_n, &r2, &c2) == CODA_OK);
  CHECK(coda_program_arg_shape(p, "fc", M, N, tl.tile_m, tl.tile_n, &r3, &c3) == CODA_OK);
  CHECK(coda_program_arg_shape(p, "fs", M, N, tl.tile_m, tl.tile_n, &r4, &c4) == CODA_OK);
  const int64_t g = SEG < tl.tile_n ? SEG : tl.tile_n;
  CHECK(r1 == cdiv(M, tl.tile_m) && c1 == N && r2 == M && c2 == cdiv(N, g));
  CHECK(r3 == 1 && c3 == N && r4 == M && c4 == cdiv(N, SEG));
  coda_arg_info info;
  CHECK(coda_program_arg(p, coda_program_num_args(p) - 2, &info) == CODA_OK && info.kind == CODA_ARG_COL);
  coda_tensor x = rand_view(seed, cdt, M, N, N, 0, 2.0), y = zeros(cdt, M, N);
  coda_dtype pdt = f64 ? CODA_F64 : CODA_F32;
  coda_tensor cm = zeros(pdt, r1, c1), sm = zeros(pdt, r2, c2), fc = zeros(pdt, 1, N), fs = zeros(pdt, M, c4);
  coda_args a;
  coda_args_create(ctx, &a);
  coda_args_set(a, "x", &x);
  coda_args_set(a, "y", &y);
  coda_args_set(a, "cm", &cm);
  coda_args_set(a, "sm", &sm);
  coda_args_set(a, "fc", &fc);
  coda_args_set(a, "fs", &fs);
  CHECK_MSG(coda_map(ctx, p, M, N, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_MSG(coda_finish(ctx, p, "fc", a, M, N, tl) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_MSG(coda_finish(ctx, p, "fs", a, M, N, tl) == CODA_OK, "%s", coda_last_error(ctx));
  double *xd = to_double(&x);
  double *cr = malloc((size_t)(r1 * N) * sizeof *cr), *sr = malloc((size_t)(M * c2) * sizeof *sr);
  double *fcr = malloc((size_t)N * sizeof *fcr), *fsr = malloc((size_t)(M * c4) * sizeof *fsr);
  for (int64_t i = 0; i < r1 * N; i++) cr[i] = -INFINITY;
  for (int64_t i = 0; i < M * c2; i++) sr[i] = -INFINITY;
  for (int64_t i = 0; i < N; i++) fcr[i] = -INFINITY;
  for (int64_t i = 0; i < M * c4; i++) fsr[i] = -INFINITY;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      const double xv = xd[m * N + n];
      const double v = f64 ? xv * xv - 0.5 * xv : (double)((float)((float)xv * (float)xv) - 0.5f * (float)xv);
      cr[(m / tl.tile_m) * N + n] = fmax(cr[(m / tl.tile_m) * N + n], v);
      sr[m * c2 + n / g] = fmax(sr[m * c2 + n / g], v);
      fcr[n] = fmax(fcr[n], v);
      fsr[m * c4 + n / SEG] = fmax(fsr[m * c4 + n / SEG], v);
    }
  double *cg = to_double(&cm), *sg = to_double(&sm), *fcg = to_double(&fc), *fsg = to_double(&fs);
  /* maxima of the same values are exact, in either precision */
  char what[96];
  snprintf(what, sizeof what, "%s colmax partials (tile_m %d)", f64 ? "fp64" : "fp32", tl.tile_m);
  const double mtol = f64 ? 0 : 1e-6;
  check_close(what, cg, cr, r1 * N, mtol);
  snprintf(what, sizeof what, "%s rowmax per %d partials (tile_n %d)", f64 ? "fp64" : "fp32", SEG, tl.tile_n);
  check_close(what, sg, sr, M * c2, mtol);
  check_close("colmax finisher", fcg, fcr, N, mtol);
  snprintf(what, sizeof what, "rowmax per %d finisher", SEG);
  check_close(what, fsg, fsr, M * c4, mtol);
  free(xd), free(cr), free(sr), free(fcr), free(fsr), free(cg), free(sg), free(fcg), free(fsg);
  free(x.data), free(y.data), free(cm.data), free(sm.data), free(fc.data), free(fs.data);
  coda_args_destroy(a);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
}

/* y = RoPE(A.B) per head of D columns, pairs (k, k + D/2), exact mode:
 * against q_k cos - q_{k+D/2} sin, q_{k+D/2} cos + q_k sin with
 * theta = pos * base^(-2k/D) (k < D/2), the frequency given in turns. */
static void run_rope_hf(uint64_t *seed) {
  coda_context ctx = test_context(CODA_PRECISION_F64, 2);
  if (!ctx) return;
  const int64_t M = 24, D = 64, H = 3, N = D * H, K = 16;
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx,
                               "mode pair split 64\ninput pos : row i32\ninput fhi : col f64\ninput flo : col f64\n"
                               "output y : f64\nx, w = rope(acc.even, acc.odd, pos, fhi.even, flo.even)\n"
                               "store y = pack(x, w)\n",
                               &p) == CODA_OK,
            "%s", coda_last_error(ctx));
  if (!p) {
    coda_context_destroy(ctx);
    return;
  }
  coda_tensor A = rand_view(seed, CODA_F64, M, K, K, 0, 1.0), B = rand_view(seed, CODA_F64, K, N, N, 0, 1.0);
  coda_tensor pos = zeros(CODA_I32, M, 1), fhi = zeros(CODA_F64, 1, N), flo = zeros(CODA_F64, 1, N);
  coda_tensor y = zeros(CODA_F64, M, N);
  for (int64_t m = 0; m < M; m++) ((int32_t *)pos.data)[m] = (int32_t)(m * 37 % 500);
  for (int64_t n = 0; n < N; n++) { /* both columns of a pair carry the frequency of k */
    const int64_t k = n % D % (D / 2);
    ((double *)fhi.data)[n] = pow(10000.0, -2.0 * (double)k / (double)D) / (2 * 3.14159265358979323846);
  }
  coda_args a;
  coda_args_create(ctx, &a);
  coda_args_set(a, "pos", &pos);
  coda_args_set(a, "fhi", &fhi);
  coda_args_set(a, "flo", &flo);
  coda_args_set(a, "y", &y);
  coda_tiling tl = {8, 64};
  CHECK_MSG(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
  double *q = calloc((size_t)(M * N), sizeof *q), *ref = calloc((size_t)(M * N), sizeof *ref);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < K; k++) q[m * N + n] += coda_load(&A, m, k) * coda_load(&B, k, n);
  for (int64_t m = 0; m < M; m++)
    for (int64_t hd = 0; hd < H; hd++)
      for (int64_t k = 0; k < D; k++) {
        const int64_t kk = k % (D / 2), c0 = hd * D;
        const double th = (double)((int32_t *)pos.data)[m] * pow(10000.0, -2.0 * (double)kk / (double)D);
        /* rotate_half(q) = cat(-q[D/2:], q[:D/2]) */
        const double rot = k < D / 2 ? -q[m * N + c0 + k + D / 2] : q[m * N + c0 + k - D / 2];
        ref[m * N + c0 + k] = q[m * N + c0 + k] * cos(th) + rot * sin(th);
      }
  double *got = to_double(&y);
  check_close("rope half-split vs rotate_half", got, ref, M * N, 1e-9);
  free(q), free(ref), free(got);
  free(A.data), free(B.data), free(pos.data), free(fhi.data), free(flo.data), free(y.data);
  coda_args_destroy(a);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
}

/* parse must fail with status and a message containing `frag` */
static void parse_fails(coda_context ctx, const char *src, coda_status status, const char *frag) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, src, &p);
  CHECK_MSG(s == status && !p, "%s: %s (%s)", src, coda_status_string(s), coda_last_error(ctx));
  CHECK_MSG(strstr(coda_last_error(ctx), frag) != NULL, "%s: message '%s' lacks '%s'", src, coda_last_error(ctx), frag);
  coda_program_destroy(p);
}

static void test_text_and_errors(void) {
  coda_context ctx = test_context(CODA_PRECISION_F32, 1);
  if (!ctx) return;
  const char *srcs[] = {
      "mode pair split 64\ninput f : col f32\noutput y : bf16\nx, w = rope(acc.even, acc.odd, row, f.even, 0)\n"
      "store y = pack(x, w)\nreduce q = rowmax(x * w) per 64\nfinish qm = max(q)\n",
      "mode pair split\noutput h : bf16 half\nstore h = swiglu(acc.even, acc.odd)\n",
      "input x : tile f32\noutput y : f32\nstore y = x\nreduce c = colmax(x)\nreduce r = rowmax(x) per 4\n"
      "finish cf = max(c)\nfinish rf = max(r)\n"};
  const char *want_mode[] = {"mode pair split 64\n", "mode pair split\n", "input"};
  for (int i = 0; i < 3; i++) {
    coda_program p = NULL, q = NULL;
    CHECK_MSG(coda_program_parse(ctx, srcs[i], &p) == CODA_OK, "%s", coda_last_error(ctx));
    if (!p) continue;
    const char *text = coda_program_text(p);
    CHECK_MSG(strncmp(text, want_mode[i], strlen(want_mode[i])) == 0, "canonical text starts '%.40s'", text);
    CHECK_MSG(coda_program_parse(ctx, text, &q) == CODA_OK, "reparse: %s", coda_last_error(ctx));
    if (q) CHECK(strcmp(coda_program_text(q), text) == 0);
    if (q) CHECK(coda_program_pair_split(q) == coda_program_pair_split(p));
    coda_program_destroy(p);
    coda_program_destroy(q);
  }
  parse_fails(ctx, "mode pair split 7\noutput h : f32 half\nstore h = acc.even\n", CODA_ERR_TYPE, "even");
  parse_fails(ctx, "mode pair split x\noutput h : f32 half\nstore h = acc.even\n", CODA_ERR_PARSE, "expected end of line");
  parse_fails(ctx, "mode elem split 8\noutput h : f32\nstore h = acc\n", CODA_ERR_PARSE, "expected");
  parse_fails(ctx, "output y : f32\nstore y = acc\nreduce r = rowlse(acc) per 8\n", CODA_ERR_TYPE,
              "only rowsum and rowmax");
  parse_fails(ctx, "output y : f32\nstore y = acc\nreduce r = colsum(acc) per 8\n", CODA_ERR_TYPE,
              "only rowsum and rowmax");
  parse_fails(ctx, "mode pair\noutput y : f32 half\nstore y = acc.even\nreduce c = colmax(acc.odd)\n", CODA_ERR_TYPE,
              "colmax is only allowed in elem mode");
  parse_fails(ctx, "output y : f32\nstore y = acc\nreduce c = colmax(acc)\nfinish s = sum(c)\n", CODA_ERR_TYPE,
              "needs a rowsum");
  parse_fails(ctx, "output y : f32\nstore y = acc\nreduce c = rowmax(acc) per 8\nfinish s = rstd(c, 1e-5)\n",
              CODA_ERR_TYPE, "needs a rowsum");
  parse_fails(ctx, "mode pair split 16\noutput y : f32\nstore y = pack(acc.even, acc.odd)\nreduce r = rowmax(acc.even) per 5\n",
              CODA_ERR_TYPE, "even");
  /* shapes: N a multiple of S; a tile holds whole segments or lies in one half */
  coda_program p = NULL;
  CHECK(coda_program_parse(ctx, "mode pair split 16\noutput h : f32 half\nstore h = acc.even\n", &p) == CODA_OK);
  int64_t r, c;
  CHECK_STATUS(ctx, coda_program_arg_shape_ctx(ctx, p, "h", 4, 40, 16, 32, &r, &c), CODA_ERR_SHAPE);
  CHECK_MSG(strstr(coda_last_error(ctx), "multiple of the segment") != NULL, "%s", coda_last_error(ctx));
  CHECK_STATUS(ctx, coda_program_arg_shape_ctx(ctx, p, "h", 4, 48, 16, 24, &r, &c), CODA_ERR_SHAPE);
  CHECK_MSG(strstr(coda_last_error(ctx), "whole segments") != NULL, "%s", coda_last_error(ctx));
  CHECK(coda_program_arg_shape(p, "h", 4, 64, 16, 32, &r, &c) == CODA_OK && r == 4 && c == 32);
  CHECK(coda_program_arg_shape(p, "h", 4, 64, 16, 8, &r, &c) == CODA_OK); /* S/2 = 8 = tile_n */
  coda_program_destroy(p);
  /* the builder gives the parser's program */
  coda_builder b = NULL;
  CHECK(coda_builder_create(ctx, 1, &b) == CODA_OK);
  CHECK(coda_builder_pair_split(b, 5) == CODA_ERR_INVALID_ARGUMENT);
  coda_builder_destroy(b);
  CHECK(coda_builder_create(ctx, 1, &b) == CODA_OK);
  CHECK(coda_builder_pair_split(b, 64) == CODA_OK);
  coda_value h = coda_b_output(b, "h", CODA_F32, CODA_WIDTH_HALF, 0);
  coda_value ev = coda_b_acc(b, CODA_LANE_EVEN), od = coda_b_acc(b, CODA_LANE_ODD);
  coda_value args[2] = {ev, od};
  coda_value m = coda_b_op(b, CODA_OP_MUL, 2, args, NULL);
  CHECK(coda_b_store(b, h, m) == CODA_OK);
  CHECK(coda_b_reduce(b, "q", CODA_REDUCE_SEGMAX, m, -1, 64) == CODA_OK);
  coda_program built = NULL, parsed = NULL;
  CHECK_MSG(coda_builder_finish(b, &built) == CODA_OK, "%s", coda_last_error(ctx));
  coda_builder_destroy(b);
  CHECK(coda_program_parse(ctx, "mode pair split 64\noutput h : f32 half\nstore h = acc.even * acc.odd\n"
                                "reduce q = rowmax(acc.even * acc.odd) per 64\n", &parsed) == CODA_OK);
  if (built) CHECK_MSG(strncmp(coda_program_text(built), "mode pair split 64\n", 19) == 0, "%s",
                       coda_program_text(built));
  if (built) CHECK_EQ_INT(coda_program_pair_split(built), 64);
  coda_program_destroy(built);
  coda_program_destroy(parsed);
  CHECK(coda_builder_create(ctx, 0, &b) == CODA_OK);
  CHECK(coda_builder_pair_split(b, 64) == CODA_ERR_INVALID_ARGUMENT);
  coda_builder_destroy(b);
  coda_context_destroy(ctx);
}

int main(void) {
  uint64_t seed = test_seed();
  test_text_and_errors();
  run_rope_hf(&seed);
  const coda_precision precs[2] = {CODA_PRECISION_F64, CODA_PRECISION_F32};
  for (int i = 0; i < 2; i++) {
    /* segments inside a tile, several per tile; rowmax intervals per segment */
    run_split_gemm(precs[i], 16, 37, 96, 19, (coda_tiling){16, 32}, 16, &seed);
    /* a segment wider than the tile: the second column lies in another tile */
    run_split_gemm(precs[i], 64, 21, 128, 13, (coda_tiling){8, 16}, 32, &seed);
    /* the halves of the row ([gate | up]), wider than a tile and within one */
    run_split_gemm(precs[i], 0, 9, 96, 7, (coda_tiling){8, 16}, 48, &seed);
    run_split_gemm(precs[i], 0, 9, 24, 7, (coda_tiling){8, 32}, 8, &seed);
    run_maxima(precs[i], 37, 60, (coda_tiling){16, 24}, 12, &seed);
    run_maxima(precs[i], 37, 60, (coda_tiling){8, 8}, 24, &seed);
  }
  return CHECK_DONE();
}
