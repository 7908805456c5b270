/* Causal GQA attention on packed qkv: forward against a naive double
 * softmax attention, backward against central finite differences of the
 * forward in exact mode, fp32 backward against the exact one, thread-count
 * determinism, argument checks; the backward with the fused RoPE backward
 * against the backward followed by the llama_rope_bwd map. */
#include "check.h"
#include "base/internal.h"
#include "nn/plan.h"
#include "test_util.h"
#include "attention_test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state;
static coda_tensor mk(coda_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  return rand_view(&rng_state, dt, rows, cols, ld, 1, 1.5);
}
static double at(const coda_tensor *t, int64_t i, int64_t j) { return coda_load(t, i, j); }

static void test_forward(coda_context ctx, coda_dtype dq, coda_dtype dout, int Hq, int Hkv) {
  const int B = 2, T = 13, hd = 16;
  const int64_t BT = B * T, W = (int64_t)(Hq + 2 * Hkv) * hd;
  coda_tensor qkv = mk(dq, BT, W, W + 3), out = mk(dout, BT, Hq * hd, Hq * hd),
              lse = mk(CODA_F32, BT, Hq, Hq + 1);
  coda_status s = coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &out, &lse);
  CHECK_MSG(s == CODA_OK, "%s", coda_last_error(ctx));
  double *o = malloc(sizeof(double) * BT * Hq * hd), *l = malloc(sizeof(double) * BT * Hq);
  attn_ref_forward(&qkv, B, T, Hq, Hkv, hd, 0.0, 0, o, l);
  double u = dout == CODA_BF16 ? 1.0 / 128 : dout == CODA_F16 ? 1.0 / 1024 : 0;
  int bad = 0;
  for (int64_t r = 0; r < BT; r++)
    for (int h = 0; h < Hq; h++) {
      if (!(fabs(at(&lse, r, h) - l[r * Hq + h]) <= 1e-5 * (1 + fabs(l[r * Hq + h])))) bad++;
      for (int e = 0; e < hd; e++) {
        double ref = o[(r * Hq + h) * hd + e];
        if (!(fabs(at(&out, r, h * hd + e) - ref) <= u * fabs(ref) + 1e-5)) bad++;
      }
    }
  CHECK_MSG(bad == 0, "forward qkv %s out %s Hq %d Hkv %d: %d mismatches", coda_dtype_name(dq),
            coda_dtype_name(dout), Hq, Hkv, bad);
  free(o); free(l); free(qkv.data); free(out.data); free(lse.data);
}

static void test_backward(void) {
  coda_context cx = test_context(CODA_PRECISION_F64, 0);
  CHECK(cx != NULL);
  const int B = 2, T = 6, Hq = 4, Hkv = 2, hd = 4;
  const int64_t BT = B * T, W = (int64_t)(Hq + 2 * Hkv) * hd;
  coda_tensor qkv = mk(CODA_F64, BT, W, W), out = mk(CODA_F64, BT, Hq * hd, Hq * hd);
  coda_tensor lse = mk(CODA_F64, BT, Hq, Hq), dout = mk(CODA_F64, BT, Hq * hd, Hq * hd);
  coda_tensor dqkv = mk(CODA_F64, BT, W, W);
  coda_tensor o2 = mk(CODA_F64, BT, Hq * hd, Hq * hd), l2 = mk(CODA_F64, BT, Hq, Hq);
  CHECK(coda_attention_forward(cx, &qkv, B, T, Hq, Hkv, hd, &out, &lse) == CODA_OK);
  CHECK(coda_attention_backward(cx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, &dqkv) == CODA_OK);
  double maxerr, maxg; /* L(qkv) = sum out * dout: its gradient is the backward's */
  attn_fd_error(cx, &qkv, &dout, &dqkv, B, T, Hq, Hkv, hd, NULL, &o2, &l2, &maxerr, &maxg);
  CHECK_MSG(maxerr < 1e-7 * (1 + maxg), "backward vs finite differences: max error %g (max |g| %g)",
            maxerr, maxg);
  CHECK(maxg > 1e-3); /* the gradient is not trivially zero */

  /* fp32 backward on f32 copies agrees with the exact one */
  coda_context c32;
  CHECK(coda_context_create(NULL, &c32) == CODA_OK);
  coda_tensor q32 = mk(CODA_F32, BT, W, W), o32 = mk(CODA_F32, BT, Hq * hd, Hq * hd);
  coda_tensor l32 = mk(CODA_F32, BT, Hq, Hq), d32 = mk(CODA_F32, BT, Hq * hd, Hq * hd);
  coda_tensor g32 = mk(CODA_F32, BT, W, W), g32b = mk(CODA_F32, BT, W, W);
  for (int64_t r = 0; r < BT; r++) {
    for (int64_t c = 0; c < W; c++) coda_store(&q32, r, c, at(&qkv, r, c));
    for (int64_t c = 0; c < Hq * hd; c++) coda_store(&d32, r, c, at(&dout, r, c));
  }
  /* exact gradient of the rounded inputs */
  for (int64_t r = 0; r < BT; r++) {
    for (int64_t c = 0; c < W; c++) coda_store(&qkv, r, c, at(&q32, r, c));
    for (int64_t c = 0; c < Hq * hd; c++) coda_store(&dout, r, c, at(&d32, r, c));
  }
  CHECK(coda_attention_forward(cx, &qkv, B, T, Hq, Hkv, hd, &out, &lse) == CODA_OK);
  CHECK(coda_attention_backward(cx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, &dqkv) == CODA_OK);
  CHECK(coda_attention_forward(c32, &q32, B, T, Hq, Hkv, hd, &o32, &l32) == CODA_OK);
  CHECK(coda_attention_backward(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &g32) == CODA_OK);
  double e32 = 0;
  for (int64_t r = 0; r < BT; r++)
    for (int64_t c = 0; c < W; c++) e32 = fmax(e32, fabs(at(&g32, r, c) - at(&dqkv, r, c)));
  CHECK_MSG(e32 < 1e-5, "fp32 backward vs exact: %g", e32);
  /* determinism across thread counts (a size that runs in parallel) */
  {
    coda_context_options o1 = coda_context_default_options();
    o1.num_threads = 1;
    coda_context c1, c3;
    CHECK(coda_context_create(&o1, &c1) == CODA_OK);
    o1.num_threads = 3;
    CHECK(coda_context_create(&o1, &c3) == CODA_OK);
    const int b2 = 2, t2 = 96, h2 = 32;
    const int64_t bt2 = b2 * t2, w2 = (int64_t)(Hq + 2 * Hkv) * h2;
    coda_tensor q = mk(CODA_BF16, bt2, w2, w2), dO = mk(CODA_BF16, bt2, Hq * h2, Hq * h2);
    coda_tensor ob[2], lb[2], gb[2];
    coda_context cs[2] = {c1, c3};
    for (int i = 0; i < 2; i++) {
      ob[i] = mk(CODA_BF16, bt2, Hq * h2, Hq * h2);
      lb[i] = mk(CODA_F32, bt2, Hq, Hq);
      gb[i] = mk(CODA_BF16, bt2, w2, w2);
      CHECK(coda_attention_forward(cs[i], &q, b2, t2, Hq, Hkv, h2, &ob[i], &lb[i]) == CODA_OK);
      CHECK(coda_attention_backward(cs[i], &q, &ob[i], &lb[i], &dO, b2, t2, Hq, Hkv, h2, &gb[i]) == CODA_OK);
    }
    CHECK(memcmp(ob[0].data, ob[1].data, 2 * bt2 * Hq * h2) == 0);
    CHECK(memcmp(lb[0].data, lb[1].data, 4 * bt2 * Hq) == 0);
    CHECK(memcmp(gb[0].data, gb[1].data, 2 * bt2 * w2) == 0);
    for (int i = 0; i < 2; i++) { free(ob[i].data); free(lb[i].data); free(gb[i].data); }
    free(q.data); free(dO.data);
    coda_context_destroy(c1);
    coda_context_destroy(c3);
  }

  /* argument checks: the output is left untouched */
  memcpy(g32b.data, g32.data, sizeof(float) * BT * W);
  CHECK(coda_attention_backward(c32, &q32, &o32, &l32, &d32, B, T, Hq, 3, hd, &g32) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strlen(coda_last_error(c32)) > 0);
  CHECK(coda_attention_backward(c32, &q32, &o32, &l32, &d32, B, T + 1, Hq, Hkv, hd, &g32) == CODA_ERR_SHAPE);
  CHECK(coda_attention_backward(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &q32) == CODA_ERR_ALIAS);
  CHECK(coda_attention_backward(c32, &q32, &o32, NULL, &d32, B, T, Hq, Hkv, hd, &g32) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_attention_forward(c32, &q32, B, T, Hq, Hkv, hd, &o32, &o32) != CODA_OK);
  coda_tensor lbad = mk(CODA_BF16, BT, Hq, Hq);
  CHECK(coda_attention_forward(c32, &q32, B, T, Hq, Hkv, hd, &o32, &lbad) == CODA_ERR_DTYPE);
  CHECK(coda_attention_forward(c32, &qkv, B, T, Hq, Hkv, hd, &o32, &l32) == CODA_ERR_DTYPE); /* f64 outside exact mode */
  CHECK(coda_attention_forward(c32, &q32, 0, T, Hq, Hkv, hd, &o32, &l32) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_attention_forward(c32, &q32, B, T, Hq, Hkv, 1 << 30, &o32, &l32) != CODA_OK);
  CHECK(coda_attention_forward(NULL, &q32, B, T, Hq, Hkv, hd, &o32, &l32) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(memcmp(g32b.data, g32.data, sizeof(float) * BT * W) == 0);

  free(lbad.data);
  free(q32.data); free(o32.data); free(l32.data); free(d32.data); free(g32.data); free(g32b.data);
  coda_context_destroy(c32);
  free(qkv.data); free(out.data); free(lse.data); free(dout.data); free(dqkv.data);
  free(o2.data); free(l2.data);
  coda_context_destroy(cx);
}

/* coda_attention_backward_rope against its definition: the plain
 * backward, then the RoPE backward map (program llama_rope_bwd) and the sum
 * of its partials, in exact mode; then the fp32 path against it, and the
 * argument checks. */
static void test_backward_rope(void) {
  coda_context_options o = coda_context_default_options();
  o.precision = CODA_PRECISION_F64;
  coda_context cx, c32;
  CHECK(coda_context_create(&o, &cx) == CODA_OK);
  CHECK(coda_context_create(NULL, &c32) == CODA_OK);
  const int B = 2, T = 9, Hq = 6, Hkv = 2, hd = 6, NH = Hq + 2 * Hkv;
  const int64_t BT = B * T, W = (int64_t)NH * hd;
  coda_tensor qkv = mk(CODA_F64, BT, W, W), out = mk(CODA_F64, BT, Hq * hd, Hq * hd);
  coda_tensor lse = mk(CODA_F64, BT, Hq, Hq), dout = mk(CODA_F64, BT, Hq * hd, Hq * hd);
  coda_tensor g = mk(CODA_F64, BT, W, W), dz_ref = mk(CODA_F64, BT, W, W);
  coda_tensor dz = mk(CODA_F64, BT, W, W + 3), zp = mk(CODA_F64, BT, NH, NH + 1);
  coda_tensor pos = mk(CODA_I32, BT, 1, 1), freq = mk(CODA_F64, 1, W, W);
  for (int64_t m = 0; m < BT; m++) coda_store(&pos, m, 0, (double)(m % T) + 1000 * (m / T));
  for (int64_t c = 0; c < W; c += 2) { /* Q and K pairs rotate, V's do not */
    const int v = c >= (int64_t)(Hq + Hkv) * hd;
    coda_store(&freq, 0, c, v ? 0 : 0.013 * (1 + (c % hd)));
    coda_store(&freq, 0, c + 1, v ? 0 : 1e-9 * (c % 7));
  }
  CHECK(coda_attention_forward(cx, &qkv, B, T, Hq, Hkv, hd, &out, &lse) == CODA_OK);
  CHECK(coda_attention_backward(cx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, &g) == CODA_OK);
  coda_program rp;
  CHECK(plan_builtin(cx, "llama_rope_bwd", &rp) == CODA_OK); /* retyped to f64 */
  const coda_tiling tl = {8, 16};
  const int64_t nt = (W + tl.tile_n - 1) / tl.tile_n;
  coda_tensor zpm = mk(CODA_F64, BT, nt, nt), zdz = mk(CODA_F64, BT, 1, 1);
  coda_args a;
  CHECK(coda_args_create(cx, &a) == CODA_OK);
  coda_args_set(a, "y", &qkv);
  coda_args_set(a, "dy", &g);
  coda_args_set(a, "pos", &pos);
  coda_args_set(a, "freq", &freq);
  coda_args_set(a, "dz", &dz_ref);
  coda_args_set(a, "zp", &zpm);
  coda_args_set(a, "zdz", &zdz);
  coda_status st = coda_map(cx, rp, BT, W, a, tl);
  CHECK_MSG(st == CODA_OK, "rope map: %s", coda_last_error(cx));
  st = coda_finish(cx, rp, "zdz", a, BT, W, tl);
  CHECK_MSG(st == CODA_OK, "rope finish: %s", coda_last_error(cx));
  CHECK(coda_attention_backward_rope(cx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, &pos, &freq,
                                     &dz, &zp) == CODA_OK);
  double e = 0, es = 0, mz = 0;
  for (int64_t m = 0; m < BT; m++) {
    for (int64_t c = 0; c < W; c++) e = fmax(e, fabs(at(&dz, m, c) - at(&dz_ref, m, c)));
    double s = 0;
    for (int j = 0; j < NH; j++) s += at(&zp, m, j);
    es = fmax(es, fabs(s - at(&zdz, m, 0)));
    mz = fmax(mz, fabs(at(&zdz, m, 0)));
  }
  CHECK_MSG(e < 1e-12, "fused RoPE backward vs the map pass: max error %g", e);
  CHECK_MSG(es < 1e-12 * (1 + mz) && mz > 1e-3, "sum of zp vs the map's zdz: %g (max %g)", es, mz);
  /* the rotation does something: dz differs from g on Q/K pairs */
  double rot = 0;
  for (int64_t m = 1; m < BT; m++) rot = fmax(rot, fabs(at(&dz, m, 0) - at(&g, m, 0)));
  CHECK(rot > 1e-6);

  /* fp32 storage and compute: close to the exact result */
  coda_tensor q32 = mk(CODA_F32, BT, W, W), o32 = mk(CODA_F32, BT, Hq * hd, Hq * hd);
  coda_tensor l32 = mk(CODA_F32, BT, Hq, Hq), d32 = mk(CODA_F32, BT, Hq * hd, Hq * hd);
  coda_tensor z32 = mk(CODA_F32, BT, W, W), zp32 = mk(CODA_F32, BT, NH, NH);
  coda_tensor f32 = mk(CODA_F32, 1, W, W);
  for (int64_t c = 0; c < W; c++) coda_store(&f32, 0, c, at(&freq, 0, c));
  for (int64_t m = 0; m < BT; m++) {
    for (int64_t c = 0; c < W; c++) coda_store(&q32, m, c, at(&qkv, m, c));
    for (int64_t c = 0; c < Hq * hd; c++) coda_store(&d32, m, c, at(&dout, m, c));
  }
  CHECK(coda_attention_forward(c32, &q32, B, T, Hq, Hkv, hd, &o32, &l32) == CODA_OK);
  CHECK(coda_attention_backward_rope(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &pos, &f32,
                                     &z32, &zp32) == CODA_OK);
  double e32 = 0;
  for (int64_t m = 0; m < BT; m++)
    for (int64_t c = 0; c < W; c++) e32 = fmax(e32, fabs(at(&z32, m, c) - at(&dz, m, c)));
  CHECK_MSG(e32 < 1e-4, "fp32 fused RoPE backward vs exact: %g", e32);

  /* argument checks: nothing written */
  memcpy(dz_ref.data, z32.data, sizeof(float) * BT * W);
  coda_tensor p16 = mk(CODA_F32, BT, 1, 1), fshort = mk(CODA_F32, 1, W - 2, W - 2);
  CHECK(coda_attention_backward_rope(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &p16, &f32,
                                     &z32, &zp32) == CODA_ERR_DTYPE);
  CHECK(coda_attention_backward_rope(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &pos, &fshort,
                                     &z32, &zp32) == CODA_ERR_SHAPE);
  CHECK(coda_attention_backward_rope(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &pos, &f32,
                                     &z32, &z32) != CODA_OK);
  CHECK(coda_attention_backward_rope(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &pos, &f32,
                                     &z32, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_attention_backward_rope(c32, &q32, &o32, &l32, &d32, B, T, Hq, Hkv, hd, &pos, &f32,
                                     &z32, &q32) == CODA_ERR_SHAPE);
  coda_tensor q5 = mk(CODA_F32, BT, (int64_t)NH * 5, (int64_t)NH * 5);
  coda_tensor o5 = mk(CODA_F32, BT, Hq * 5, Hq * 5), d5 = mk(CODA_F32, BT, Hq * 5, Hq * 5);
  coda_tensor g5 = mk(CODA_F32, BT, (int64_t)NH * 5, (int64_t)NH * 5);
  coda_tensor f5 = mk(CODA_F32, 1, (int64_t)NH * 5, (int64_t)NH * 5);
  CHECK(coda_attention_backward_rope(c32, &q5, &o5, &l32, &d5, B, T, Hq, Hkv, 5, &pos, &f5, &g5,
                                     &zp32) == CODA_ERR_INVALID_ARGUMENT); /* odd head_dim */
  CHECK(memcmp(dz_ref.data, z32.data, sizeof(float) * BT * W) == 0);

  coda_args_destroy(a);
  coda_program_destroy(rp);
  coda_tensor all[] = {qkv, out, lse, dout, g, dz_ref, dz, zp, pos, freq, zpm, zdz, q32, o32,
                       l32, d32, z32, zp32, f32, p16, fshort, q5, o5, d5, g5, f5};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i].data);
  coda_context_destroy(c32);
  coda_context_destroy(cx);
}

int main(void) {
  rng_state = test_seed();
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  test_forward(ctx, CODA_F32, CODA_F32, 4, 2);
  test_forward(ctx, CODA_BF16, CODA_BF16, 4, 2);
  test_forward(ctx, CODA_F16, CODA_F32, 3, 3);
  test_forward(ctx, CODA_F32, CODA_F16, 4, 1);
  test_backward();
  test_backward_rope();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
