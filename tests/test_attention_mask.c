/* The public masked attention calls (coda_attention_forward_mask /
 * _backward_mask, coda_attn_mask) on the CPU backend: the default mask
 * (NULL or coda_attn_default_mask()) gives the plain call's bits; a sliding
 * window and a score scale against a naive double softmax attention over
 * the keys t - window < j <= t; the backward with the mask against central
 * finite differences of the masked forward in exact mode; a window of seq
 * or more is the causal mask; bad masks (struct_size, a negative window or
 * scale, a NaN scale) are refused by name and write nothing. */
#include "check.h"
#include "base/internal.h"
#include "test_util.h"
#include "attention_test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static coda_tensor mk(coda_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  return rand_view(&rng_state, dt, rows, cols, ld, 1, 1.5);
}
static double at(const coda_tensor *t, int64_t i, int64_t j) { return coda_load(t, i, j); }
static coda_attn_mask mask_of(double scale, int window) {
  coda_attn_mask m = coda_attn_default_mask();
  m.scale = scale;
  m.window = window;
  return m;
}

/* f32 forward with the mask against the double reference. */
static void forward_case(coda_context ctx, double scale, int window) {
  const int B = 2, T = 11, Hq = 4, Hkv = 2, hd = 8;
  const int64_t BT = B * T, W = (int64_t)(Hq + 2 * Hkv) * hd;
  coda_tensor qkv = mk(CODA_F32, BT, W, W + 1), out = mk(CODA_F32, BT, Hq * hd, Hq * hd),
              lse = mk(CODA_F32, BT, Hq, Hq);
  const coda_attn_mask m = mask_of(scale, window);
  coda_status s = coda_attention_forward_mask(ctx, &qkv, B, T, Hq, Hkv, hd, &out, &lse, &m);
  CHECK_MSG(s == CODA_OK, "%s", coda_last_error(ctx));
  double *o = malloc(sizeof(double) * BT * Hq * hd), *l = malloc(sizeof(double) * BT * Hq);
  attn_ref_forward(&qkv, B, T, Hq, Hkv, hd, scale, window, o, l);
  int bad = 0;
  for (int64_t r = 0; r < BT; r++)
    for (int h = 0; h < Hq; h++) {
      if (!(fabs(at(&lse, r, h) - l[r * Hq + h]) <= 1e-5 * (1 + fabs(l[r * Hq + h])))) bad++;
      for (int e = 0; e < hd; e++) {
        const double ref = o[(r * Hq + h) * hd + e];
        if (!(fabs(at(&out, r, h * hd + e) - ref) <= 1e-5 * (1 + fabs(ref)))) bad++;
      }
    }
  CHECK_MSG(bad == 0, "forward scale %g window %d: %d mismatches", scale, window, bad);
  free(o); free(l); free(qkv.data); free(out.data); free(lse.data);
}

/* The default mask, NULL or coda_attn_default_mask(), and a window of seq
 * or more: the plain call's bits. */
static void default_is_plain(coda_context ctx) {
  const int B = 1, T = 9, Hq = 2, Hkv = 1, hd = 8;
  const int64_t BT = B * T, W = (int64_t)(Hq + 2 * Hkv) * hd, O = Hq * hd;
  coda_tensor qkv = mk(CODA_F32, BT, W, W), o0 = mk(CODA_F32, BT, O, O),
              l0 = mk(CODA_F32, BT, Hq, Hq), o1 = mk(CODA_F32, BT, O, O),
              l1 = mk(CODA_F32, BT, Hq, Hq);
  CHECK(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &o0, &l0) == CODA_OK);
  const coda_attn_mask d = coda_attn_default_mask();
  CHECK(d.struct_size == sizeof(coda_attn_mask) && d.scale == 0.0 && d.window == 0);
  const coda_attn_mask full = mask_of(0.0, T), longer = mask_of(0.0, 3 * T);
  const coda_attn_mask *ms[4] = {NULL, &d, &full, &longer};
  for (int i = 0; i < 4; i++) {
    CHECK(coda_attention_forward_mask(ctx, &qkv, B, T, Hq, Hkv, hd, &o1, &l1, ms[i]) == CODA_OK);
    CHECK_MSG(!memcmp(o0.data, o1.data, (size_t)BT * O * 4) &&
                  !memcmp(l0.data, l1.data, (size_t)BT * Hq * 4),
              "mask %d differs from the plain forward", i);
  }
  free(qkv.data); free(o0.data); free(l0.data); free(o1.data); free(l1.data);
}

/* Exact mode: the masked backward is the gradient of the masked forward's
 * sum out * dout (central differences). */
static void backward_case(double scale, int window) {
  coda_context cx = test_context(CODA_PRECISION_F64, 0);
  CHECK(cx != NULL);
  if (!cx) return;
  const int B = 2, T = 7, Hq = 2, Hkv = 1, hd = 4;
  const int64_t BT = B * T, W = (int64_t)(Hq + 2 * Hkv) * hd;
  coda_tensor qkv = mk(CODA_F64, BT, W, W), out = mk(CODA_F64, BT, Hq * hd, Hq * hd);
  coda_tensor lse = mk(CODA_F64, BT, Hq, Hq), dout = mk(CODA_F64, BT, Hq * hd, Hq * hd);
  coda_tensor dqkv = mk(CODA_F64, BT, W, W);
  coda_tensor o2 = mk(CODA_F64, BT, Hq * hd, Hq * hd), l2 = mk(CODA_F64, BT, Hq, Hq);
  const coda_attn_mask m = mask_of(scale, window);
  CHECK(coda_attention_forward_mask(cx, &qkv, B, T, Hq, Hkv, hd, &out, &lse, &m) == CODA_OK);
  CHECK(coda_attention_backward_mask(cx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, NULL, NULL,
                                     &dqkv, NULL, &m) == CODA_OK);
  double maxerr, maxg;
  attn_fd_error(cx, &qkv, &dout, &dqkv, B, T, Hq, Hkv, hd, &m, &o2, &l2, &maxerr, &maxg);
  CHECK_MSG(maxerr < 1e-7 * (1 + maxg),
            "backward scale %g window %d vs finite differences: max error %g (max |g| %g)", scale,
            window, maxerr, maxg);
  CHECK(maxg > 1e-3);
  free(qkv.data); free(out.data); free(lse.data); free(dout.data); free(dqkv.data);
  free(o2.data); free(l2.data);
  coda_context_destroy(cx);
}

/* Bad masks: refused by name, the outputs untouched. */
static void refusals(coda_context ctx) {
  const int T = 4, Hq = 1, Hkv = 1, hd = 4;
  coda_tensor qkv = mk(CODA_F32, T, 3 * hd, 3 * hd), out = mk(CODA_F32, T, hd, hd),
              lse = mk(CODA_F32, T, 1, 1);
  float keep[16];
  memcpy(keep, out.data, sizeof keep);
  coda_attn_mask m[4] = {mask_of(0.0, 2), mask_of(0.0, -1), mask_of(-0.5, 0), mask_of(NAN, 0)};
  m[0].struct_size = sizeof(coda_attn_mask) - 4;
  const char *want[4] = {"struct_size", "window -1", "scale -0.5", "nan"};
  for (int i = 0; i < 4; i++) {
    const coda_status s = coda_attention_forward_mask(ctx, &qkv, 1, T, Hq, Hkv, hd, &out, &lse,
                                                      &m[i]);
    CHECK_MSG(s == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), want[i]) &&
                  strstr(coda_last_error(ctx), "coda_attention_forward"),
              "mask %d: status %d (%s)", i, (int)s, coda_last_error(ctx));
    const coda_status sb = coda_attention_backward_mask(ctx, &qkv, &out, &lse, &out, 1, T, Hq, Hkv,
                                                        hd, NULL, NULL, &qkv, NULL, &m[i]);
    CHECK_MSG(sb == CODA_ERR_INVALID_ARGUMENT && strstr(coda_last_error(ctx), want[i]) &&
                  strstr(coda_last_error(ctx), "coda_attention_backward_mask"),
              "backward mask %d: status %d (%s)", i, (int)sb, coda_last_error(ctx));
  }
  CHECK(!memcmp(keep, out.data, sizeof keep));
  free(qkv.data); free(out.data); free(lse.data);
}

int main(void) {
  rng_state = test_seed();
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  default_is_plain(ctx);
  const double scales[3] = {0.0, 0.3, 0.0};
  const int windows[3] = {3, 0, 1};
  for (int i = 0; i < 3; i++) forward_case(ctx, scales[i], windows[i]);
  forward_case(ctx, 0.2, 5);
  backward_case(0.0, 3);
  backward_case(0.4, 2);
  refusals(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
