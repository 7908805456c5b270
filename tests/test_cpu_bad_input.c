/* Bad input to the GEMM / program / finish entry points: every case gets
 * the right status and a non-empty message, nothing crashes, and the
 * outputs are left untouched. */
#include "check.h"
#include "base/internal.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static coda_context ctx;
static uint64_t rng_state;
static coda_tensor mk(coda_dtype dt, int64_t rows, int64_t cols) {
  return rand_view(&rng_state, dt, rows, cols, cols, 8, 1.0);
}

#define EXPECT(call, status) CHECK_STATUS(ctx, call, status)

static const char *prog_text =
    "input b : col f32\n"
    "input t : tile bf16\n"
    "output y : bf16\n"
    "output z : f32\n"
    "h = acc + b + t\n"
    "store y = h\n"
    "store z = h * h\n"
    "reduce ss = rowsum(h * h)\n"
    "reduce sg = rowsum(h) per 24\n"
    "finish rs = rstd(ss, 1e-5)\n";

int main(void) {
  rng_state = (uint64_t)time(NULL) * 2654435761u + 1;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  const int64_t M = 16, N = 48, K = 8;
  coda_tiling tl = {8, 24}, bad_tl[] = {{0, 8}, {8, 12}, {512, 8}, {8, -8}};
  coda_program p = NULL;
  CHECK(coda_program_parse(ctx, prog_text, &p) == CODA_OK);
  if (!p) return CHECK_DONE();
  coda_tensor A = mk(CODA_BF16, M, K), B = mk(CODA_F32, K, N);
  coda_tensor b = mk(CODA_F32, 1, N), t = mk(CODA_BF16, M, N);
  coda_tensor y = mk(CODA_BF16, M, N), z = mk(CODA_F32, M, N);
  coda_tensor ss = mk(CODA_F32, M, 2), sg = mk(CODA_F32, M, 2), rs = mk(CODA_F32, M, 1);
  /* snapshots: a failed call must not write */
  void *ys = malloc(2 * M * N), *zs = malloc(4 * M * N);
  memcpy(ys, y.data, 2 * M * N);
  memcpy(zs, z.data, 4 * M * N);
  coda_args a;
  CHECK(coda_args_create(ctx, &a) == CODA_OK);
  coda_args_set(a, "b", &b);
  coda_args_set(a, "t", &t);
  coda_args_set(a, "y", &y);
  coda_args_set(a, "z", &z);
  coda_args_set(a, "ss", &ss);

  /* missing binding: the message names it */
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "sg") != NULL);
  coda_args_set(a, "sg", &sg);
  /* unknown binding */
  coda_args_set(a, "bogus", &rs);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "bogus") != NULL);
  coda_args_clear(a);
  coda_args_set(a, "b", &b);
  coda_args_set(a, "t", &t);
  coda_args_set(a, "y", &y);
  coda_args_set(a, "z", &z);
  coda_args_set(a, "ss", &ss);
  coda_args_set(a, "sg", &sg);
  coda_args_set(a, "rs", &rs); /* a finisher's name is a program name */

  /* null pointers */
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, NULL, CODA_N, &B, a, tl), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, NULL, a, tl), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, NULL, tl), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_map(ctx, NULL, M, N, a, tl), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_finish(ctx, p, NULL, a, M, N, tl), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_gemm(ctx, CODA_N, &A, CODA_N, &B, NULL, 1.0f, 0), CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_gemm_epilogue(NULL, p, CODA_N, &A, CODA_N, &B, a, tl) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_args_set(a, NULL, &b) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_args_set(a, "b", NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_args_set(a, "a_name_that_is_much_longer_than_31_chars", &b) == CODA_ERR_INVALID_ARGUMENT);
  coda_tensor nulldata = t;
  nulldata.data = NULL;
  coda_args_set(a, "t", &nulldata);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_INVALID_ARGUMENT);
  coda_args_set(a, "t", &t);

  /* bad enums and tilings */
  EXPECT(coda_gemm_epilogue(ctx, p, (coda_transpose)7, &A, CODA_N, &B, a, tl), CODA_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < 4; i++)
    EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, bad_tl[i]), CODA_ERR_INVALID_ARGUMENT);

  /* shapes: K mismatch, wrong tile shape, wrong partial shape, vector orientation */
  coda_tensor Bk = mk(CODA_F32, K + 1, N);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &Bk, a, tl), CODA_ERR_SHAPE);
  EXPECT(coda_gemm(ctx, CODA_N, &A, CODA_N, &Bk, &z, 1.0f, 0), CODA_ERR_SHAPE);
  coda_tensor tw = mk(CODA_BF16, M - 1, N);
  coda_args_set(a, "t", &tw);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_SHAPE);
  coda_args_set(a, "t", &t);
  coda_tensor ssw = mk(CODA_F32, M, 3);
  coda_args_set(a, "ss", &ssw);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_SHAPE);
  coda_args_set(a, "ss", &ss);
  coda_tensor bcol = b;
  bcol.rows = N;
  bcol.cols = 1;
  bcol.ld = 1;
  coda_args_set(a, "b", &bcol);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_SHAPE);
  coda_args_set(a, "b", &b);
  /* segment 24 with tile_n 16: the boundaries do not nest */
  coda_tiling tl16 = {8, 16};
  coda_tensor ss3 = mk(CODA_F32, M, 3);
  coda_args_set(a, "ss", &ss3);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl16), CODA_ERR_SHAPE);
  coda_args_set(a, "ss", &ss);

  /* dtypes: declared vs bound, partial not f32, i32 operand, f64 outside exact mode */
  coda_tensor tf = mk(CODA_F32, M, N);
  coda_args_set(a, "t", &tf);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_DTYPE);
  coda_args_set(a, "t", &t);
  coda_tensor ssb = mk(CODA_BF16, M, 2);
  coda_args_set(a, "ss", &ssb);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_DTYPE);
  coda_args_set(a, "ss", &ss);
  coda_tensor Ai = mk(CODA_I32, M, K);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &Ai, CODA_N, &B, a, tl), CODA_ERR_DTYPE);
  coda_tensor Ad = mk(CODA_F64, M, K);
  EXPECT(coda_gemm(ctx, CODA_N, &Ad, CODA_N, &B, &z, 1.0f, 0), CODA_ERR_DTYPE);
  coda_tensor badtype = A;
  badtype.dtype = (coda_dtype)42;
  EXPECT(coda_gemm(ctx, CODA_N, &badtype, CODA_N, &B, &z, 1.0f, 0), CODA_ERR_DTYPE);

  /* strides: ld < cols, misaligned data */
  coda_tensor yl = y;
  yl.ld = N - 1;
  coda_args_set(a, "y", &yl);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_LAYOUT);
  coda_tensor zm = z;
  zm.data = (char *)z.data + 2;
  coda_args_set(a, "y", &y);
  coda_args_set(a, "z", &zm);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_LAYOUT);
  coda_args_set(a, "z", &z);

  /* aliasing: two outputs, output and input, output and A, partial and output */
  coda_tensor zy = {y.data, CODA_F32, M, N / 2, N / 2};
  coda_tensor zbig = mk(CODA_F32, M, N);
  coda_tensor zin = {(char *)t.data, CODA_F32, M, N, N}; /* overlaps t */
  (void)zbig;
  coda_tensor yy = {(char *)z.data, CODA_BF16, M, N, N}; /* y inside z */
  coda_args_set(a, "y", &yy);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_ALIAS);
  coda_args_set(a, "y", &y);
  coda_tensor tz = mk(CODA_F32, M * 2, N); /* z and t share memory */
  coda_tensor tview = {tz.data, CODA_BF16, M, N, N};
  coda_tensor zview = {(char *)tz.data + 64, CODA_F32, M, N, N};
  coda_args_set(a, "t", &tview);
  coda_args_set(a, "z", &zview);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_ALIAS);
  coda_args_set(a, "t", &t);
  coda_args_set(a, "z", &z);
  coda_tensor ya = {A.data, CODA_BF16, M, N, N};
  coda_tensor Abig = mk(CODA_BF16, M * N, 1);
  coda_tensor Av = {Abig.data, CODA_BF16, M, K, K};
  coda_tensor yv = {(char *)Abig.data + 2 * 8, CODA_BF16, M, N, N};
  (void)ya;
  coda_args_set(a, "y", &yv);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &Av, CODA_N, &B, a, tl), CODA_ERR_ALIAS);
  coda_args_set(a, "y", &y);
  coda_tensor ssz = {z.data, CODA_F32, M, 2, 2};
  coda_args_set(a, "ss", &ssz);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_ALIAS);
  coda_args_set(a, "ss", &ss);
  EXPECT(coda_gemm(ctx, CODA_N, &Av, CODA_N, &B, &yv, 1.0f, 0), CODA_ERR_ALIAS);
  (void)zy;
  (void)zin;

  /* overflow: huge tensor and huge domain */
  coda_tensor huge = {t.data, CODA_BF16, INT64_MAX / 4, N, N};
  coda_args_set(a, "t", &huge);
  EXPECT(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl), CODA_ERR_OVERFLOW);
  coda_args_set(a, "t", &t);
  EXPECT(coda_map(ctx, p, (int64_t)1 << 40, (int64_t)1 << 40, a, tl), CODA_ERR_INVALID_ARGUMENT); /* reads acc */
  coda_program q = NULL;
  CHECK(coda_program_parse(ctx, "input x : scalar f32\noutput o : f32\nstore o = x\n", &q) == CODA_OK);
  if (q) {
    coda_args qa;
    CHECK(coda_args_create(ctx, &qa) == CODA_OK);
    coda_tensor x = mk(CODA_F32, 1, 1), o = mk(CODA_F32, 4, 4);
    coda_args_set(qa, "x", &x);
    coda_args_set(qa, "o", &o);
    EXPECT(coda_map(ctx, q, (int64_t)1 << 40, (int64_t)1 << 40, qa, tl), CODA_ERR_OVERFLOW);
    EXPECT(coda_map(ctx, q, -1, 4, qa, tl), CODA_ERR_SHAPE);
    EXPECT(coda_map(ctx, q, 4, 5, qa, tl), CODA_ERR_SHAPE);
    CHECK(coda_map(ctx, q, 4, 4, qa, tl) == CODA_OK);
    CHECK(coda_load(&o, 3, 3) == coda_load(&x, 0, 0));
    free(x.data);
    free(o.data);
    coda_args_destroy(qa);
    coda_program_destroy(q);
  }

  /* odd N in pair mode */
  coda_program pp = NULL;
  CHECK(coda_program_parse(ctx, "mode pair\noutput o : f32\nstore o = pack(acc.even, acc.odd)\n", &pp) == CODA_OK);
  if (pp) {
    coda_args pa;
    CHECK(coda_args_create(ctx, &pa) == CODA_OK);
    coda_tensor Bo = mk(CODA_F32, K, 7), o = mk(CODA_F32, M, 7);
    coda_args_set(pa, "o", &o);
    EXPECT(coda_gemm_epilogue(ctx, pp, CODA_N, &A, CODA_N, &Bo, pa, tl), CODA_ERR_SHAPE);
    free(Bo.data);
    free(o.data);
    coda_args_destroy(pa);
    coda_program_destroy(pp);
  }

  /* finish: unknown name, missing result */
  EXPECT(coda_finish(ctx, p, "nope", a, M, N, tl), CODA_ERR_INVALID_ARGUMENT);
  coda_args fa;
  CHECK(coda_args_create(ctx, &fa) == CODA_OK);
  coda_args_set(fa, "ss", &ss);
  EXPECT(coda_finish(ctx, p, "rs", fa, M, N, tl), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "rs") != NULL);
  coda_tensor rsw = mk(CODA_F32, 1, M);
  coda_args_set(fa, "rs", &rsw);
  EXPECT(coda_finish(ctx, p, "rs", fa, M, N, tl), CODA_ERR_SHAPE);
  coda_args_destroy(fa);

  /* nothing was written by any failed call */
  CHECK(memcmp(ys, y.data, 2 * M * N) == 0);
  CHECK(memcmp(zs, z.data, 4 * M * N) == 0);
  /* and the valid call still works */
  CHECK(coda_gemm_epilogue(ctx, p, CODA_N, &A, CODA_N, &B, a, tl) == CODA_OK);
  CHECK(memcmp(zs, z.data, 4 * M * N) != 0);

  free(ys); free(zs); free(A.data); free(B.data); free(b.data); free(t.data); free(y.data);
  free(z.data); free(ss.data); free(sg.data); free(rs.data); free(Bk.data); free(tw.data);
  free(ssw.data); free(ss3.data); free(tf.data); free(ssb.data); free(Ai.data); free(Ad.data);
  free(zbig.data); free(tz.data); free(Abig.data); free(rsw.data);
  coda_args_destroy(a);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
