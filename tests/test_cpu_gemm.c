/* CPU GEMM: every layout and dtype, ragged sizes and strided views against
 * a naive double product of the same (rounded) inputs; exact mode; alpha
 * and accumulate; bitwise determinism across thread counts and tilings;
 * throughput report. */
#include "check.h"
#include "base/internal.h"
#include "test_util.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state;

/* A rows x cols view with leading dimension ld, filled with random values
 * already rounded to dtype. */
static coda_tensor rand_tensor(coda_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  return rand_view(&rng_state, dt, rows, cols, ld, 1, 1.0);
}

static double opget(const coda_tensor *t, coda_transpose tr, int64_t i, int64_t j) {
  return tr == CODA_N ? coda_load(t, i, j) : coda_load(t, j, i);
}

/* Half the spacing of the type's subnormals: the absolute rounding error
 * of a result below the smallest normal (f16: 6.1e-5), where the relative
 * bound above does not hold. */
static double subnormal_half_step(coda_dtype t) {
  switch (t) {
  case CODA_BF16: return 0x1p-134;
  case CODA_F16: return 0x1p-25;
  case CODA_F32: return 0x1p-150;
  default: return 0x1p-1074; /* (its half rounds to zero) */
  }
}

static double unit_roundoff(coda_dtype t) {
  switch (t) {
  case CODA_BF16: return 1.0 / 256;
  case CODA_F16: return 1.0 / 2048;
  case CODA_F32: return 1.0 / 16777216;
  default: return 1.0 / 9007199254740992.0;
  }
}

/* Checks D against alpha*op(A)op(B) (+ D0): error within rounding of D
 * plus the fp32 (or fp64) accumulation bound K*u*sum|a||b|. */
static int check_product(coda_transpose ta, const coda_tensor *A, coda_transpose tb,
                         const coda_tensor *B, const coda_tensor *D, const double *D0,
                         double alpha, double u_acc) {
  int64_t M = D->rows, N = D->cols, K = ta == CODA_N ? A->cols : A->rows;
  int bad = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = opget(A, ta, m, k) * opget(B, tb, k, n);
        s += p;
        sa += fabs(p);
      }
      double ref = alpha * s + (D0 ? D0[m * N + n] : 0);
      double got = coda_load(D, m, n);
      double tol = unit_roundoff(D->dtype) * fabs(ref) * 1.01 +
                   (K + 2) * u_acc * (fabs(alpha) * sa + (D0 ? fabs(D0[m * N + n]) : 0)) +
                   subnormal_half_step(D->dtype) + 1e-300;
      if (!(fabs(got - ref) <= tol)) {
        if (bad < 3)
          fprintf(stderr, "  (%lld,%lld): got %.17g ref %.17g tol %g\n", (long long)m,
                  (long long)n, got, ref, tol);
        bad++;
      }
    }
  return bad;
}

static void test_layouts(coda_context ctx) {
  const int sizes[][3] = {{1, 1, 1}, {37, 53, 71}, {130, 70, 300}, {7, 200, 5}, {97, 33, 600}};
  const coda_dtype dts[] = {CODA_BF16, CODA_F16, CODA_F32};
  for (int si = 0; si < 5; si++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int di = 0; di < 3; di++) {
          int M = sizes[si][0], N = sizes[si][1], K = sizes[si][2];
          coda_dtype da = dts[di], db = dts[(di + ta + 1) % 3], dd = dts[(di + tb + 2) % 3];
          int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
          coda_tensor A = rand_tensor(da, ar, ac, ac + (si % 2) * 3);
          coda_tensor B = rand_tensor(db, br, bc, bc + (si % 3));
          coda_tensor D = rand_tensor(dd, M, N, N + 2);
          CHECK(coda_gemm(ctx, (coda_transpose)ta, &A, (coda_transpose)tb, &B, &D, 1.0f, 0) == CODA_OK);
          int bad = check_product((coda_transpose)ta, &A, (coda_transpose)tb, &B, &D, NULL, 1.0,
                                  unit_roundoff(CODA_F32));
          CHECK_MSG(bad == 0, "M=%d N=%d K=%d ta=%d tb=%d A=%s B=%s D=%s: %d bad", M, N, K, ta, tb,
                    coda_dtype_name(da), coda_dtype_name(db), coda_dtype_name(dd), bad);
          free(A.data);
          free(B.data);
          free(D.data);
        }
}

static void test_alpha_accumulate(coda_context ctx) {
  int M = 45, N = 77, K = 129;
  coda_tensor A = rand_tensor(CODA_F32, M, K, K), B = rand_tensor(CODA_BF16, N, K, K);
  coda_tensor D = rand_tensor(CODA_F32, M, N, N);
  double *D0 = malloc(sizeof(double) * M * N);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) D0[m * N + n] = coda_load(&D, m, n);
  CHECK(coda_gemm(ctx, CODA_N, &A, CODA_T, &B, &D, -0.75f, 1) == CODA_OK);
  CHECK_EQ_INT(check_product(CODA_N, &A, CODA_T, &B, &D, D0, -0.75, unit_roundoff(CODA_F32)), 0);
  free(D0);
  free(A.data);
  free(B.data);
  free(D.data);
}

static void test_exact_mode(void) {
  coda_context cx = test_context(CODA_PRECISION_F64, 0);
  CHECK(cx != NULL);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int M = 29, N = 41, K = 301;
      coda_tensor A = rand_tensor(CODA_F64, ta ? K : M, ta ? M : K, ta ? M : K);
      coda_tensor B = rand_tensor(tb ? CODA_F64 : CODA_BF16, tb ? N : K, tb ? K : N, tb ? K : N);
      coda_tensor D = rand_tensor(CODA_F64, M, N, N);
      CHECK(coda_gemm(cx, (coda_transpose)ta, &A, (coda_transpose)tb, &B, &D, 1.0f, 0) == CODA_OK);
      /* double accumulation: error ~K*2^-53*sum|ab| ~ 1e-13 here */
      int bad = 0;
      double maxerr = 0;
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          double s = 0;
          for (int k = 0; k < K; k++)
            s += opget(&A, (coda_transpose)ta, m, k) * opget(&B, (coda_transpose)tb, k, n);
          double e = fabs(coda_load(&D, m, n) - s);
          if (e > maxerr) maxerr = e;
          if (e > 1e-12) bad++;
        }
      CHECK_MSG(bad == 0, "exact mode ta=%d tb=%d: max error %g", ta, tb, maxerr);
      free(A.data);
      free(B.data);
      free(D.data);
    }
  /* f64 tensors are refused outside exact mode */
  coda_context c32;
  CHECK(coda_context_create(NULL, &c32) == CODA_OK);
  coda_tensor A = rand_tensor(CODA_F64, 4, 4, 4), B = rand_tensor(CODA_F32, 4, 4, 4),
              D = rand_tensor(CODA_F32, 4, 4, 4);
  CHECK(coda_gemm(c32, CODA_N, &A, CODA_N, &B, &D, 1.0f, 0) == CODA_ERR_DTYPE);
  CHECK(strlen(coda_last_error(c32)) > 0);
  free(A.data);
  free(B.data);
  free(D.data);
  coda_context_destroy(c32);
  coda_context_destroy(cx);
}

/* The same product with 1, 2 and 3 threads (context option and
 * omp_set_num_threads) and through coda_gemm_epilogue with several tilings
 * is bitwise identical: every element sums k in order. */
static void test_determinism(void) {
  int M = 150, N = 170, K = 530;
  coda_tensor A = rand_tensor(CODA_BF16, K, M, M), B = rand_tensor(CODA_F32, K, N, N);
  float *ref = NULL;
  for (int nt = 1; nt <= 3; nt++) {
    coda_context_options o = coda_context_default_options();
    o.num_threads = nt == 3 ? 0 : nt;
    omp_set_num_threads(3);
    coda_context c;
    CHECK(coda_context_create(&o, &c) == CODA_OK);
    coda_tensor D = rand_tensor(CODA_F32, M, N, N);
    CHECK(coda_gemm(c, CODA_T, &A, CODA_N, &B, &D, 1.0f, 0) == CODA_OK);
    if (!ref) {
      ref = D.data;
    } else {
      CHECK_MSG(memcmp(ref, D.data, sizeof(float) * M * N) == 0, "threads %d differ", nt);
      free(D.data);
    }
    const coda_tiling tl[] = {{8, 8}, {64, 128}, {256, 56}};
    for (int ti = 0; ti < 3; ti++) {
      coda_tensor E = rand_tensor(CODA_F32, M, N, N);
      coda_args args;
      CHECK(coda_args_create(c, &args) == CODA_OK);
      CHECK(coda_args_set(args, "D", &E) == CODA_OK);
      CHECK(coda_gemm_epilogue(c, NULL, CODA_T, &A, CODA_N, &B, args, tl[ti]) == CODA_OK);
      CHECK_MSG(memcmp(ref, E.data, sizeof(float) * M * N) == 0, "tiling %d x %d differs",
                tl[ti].tile_m, tl[ti].tile_n);
      coda_args_destroy(args);
      free(E.data);
    }
    coda_context_destroy(c);
  }
  free(ref);
  free(A.data);
  free(B.data);
}

static double now(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void report_throughput(void) {
  int n = 512;
  coda_context c = test_context(CODA_PRECISION_F32, 1);
  CHECK(c != NULL);
  coda_tensor A = rand_tensor(CODA_F32, n, n, n), B = rand_tensor(CODA_F32, n, n, n),
              D = rand_tensor(CODA_F32, n, n, n);
  coda_tensor Ab = rand_tensor(CODA_BF16, n, n, n), Bb = rand_tensor(CODA_BF16, n, n, n);
  const char *names[] = {"f32 NN", "f32 NT", "bf16 NT"};
  for (int v = 0; v < 3; v++) {
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      double t0 = now();
      CHECK(coda_gemm(c, CODA_N, v == 2 ? &Ab : &A, v ? CODA_T : CODA_N, v == 2 ? &Bb : &B, &D,
                      1.0f, 0) == CODA_OK);
      double t = now() - t0;
      if (t < best) best = t;
    }
    printf("gemm %d^3 %s, 1 thread: %.1f GFLOP/s\n", n, names[v], 2.0 * n * n * n / best * 1e-9);
  }
  free(A.data);
  free(B.data);
  free(D.data);
  free(Ab.data);
  free(Bb.data);
  coda_context_destroy(c);
}

int main(void) {
  rng_state = test_seed();
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_layouts(ctx);
  test_alpha_accumulate(ctx);
  test_exact_mode();
  test_determinism();
  report_throughput();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
