/* The GPT-2 block plan against the unfused double reference (ref_gpt2.c):
 * the output, dx and every parameter gradient.
 *
 * 1. Exact mode (fp64 context, f64 buffers): the reparameterized plan must
 *    agree with the ordinary block to round-off, max|plan - ref| <= 1e-10
 *    max|ref| per tensor.
 * 2. bf16 storage, fp32 compute: the rule of the reference's kernel tests,
 *      max|plan - ref64| <= 2 max|lowp - ref64| + atol
 *    per tensor, where ref64 is the reference in double on the same
 *    bf16-rounded inputs and weights, and lowp is the reference with bf16
 *    rounding at every tensor the plan stores in bf16 (LN outputs, qkv, o,
 *    x1, u, g, x_out; du, dx1, do, dqkv, dx). atol = 1e-3 max|ref64| covers
 *    tensors whose low-precision error happens to be tiny next to the fp32
 *    compute noise of the plan.
 * Both also with CODA_GPT2_FOLD (no row finishers), under the same rules.
 * With CODA_GPT2_GRAD_ACT (bf16 weight gradients of wqkv, wo, wfc, wproj)
 * those four gradients are rounded once more to bf16, so their bound gets
 * one bf16 rounding of the plan's largest value on top: 2^-8 max|plan|
 * (with 1 % slack); every other tensor keeps the rule above. */
#include "coda_nn.h"
#include "check.h"
#include "base/internal.h"
#include "nn/ref_gpt2.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { return xorshift64star_unit(&rng_state); }

/* plan buffer name of reference parameter i (gpt2_ref_param order) */
static const char *const plan_param[GPT2_REF_NPARAMS] = {
    "ln1_g", "ln1_b", "wqkv", "bqkv", "wo", "bo",
    "ln2_g", "ln2_b", "wfc", "bfc", "wproj", "bproj"};

static int put(coda_plan p, const char *name, const double *v, long n) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return -1;
  if ((long)(t.rows * t.cols) != n) return -1;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) coda_store(&t, r, c, v[r * t.cols + c]);
  return 0;
}

/* max |plan - ref| and max |ref| over a plan buffer */
static int diff(coda_plan p, const char *name, const double *ref, long n,
                double *maxdiff, double *maxref) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return -1;
  if ((long)(t.rows * t.cols) != n) return -1;
  *maxdiff = 0;
  *maxref = 0;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      double a = coda_load(&t, r, c), b = ref[r * t.cols + c];
      if (!(fabs(a - b) <= *maxdiff)) *maxdiff = fabs(a - b); /* NaN propagates */
      if (fabs(b) > *maxref) *maxref = fabs(b);
    }
  return 0;
}

static double maxabsdiff(const double *a, const double *b, long n) {
  double m = 0;
  for (long i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
  return m;
}

typedef struct {
  gpt2_ref_params w, g64, glow;
  gpt2_ref_acts a64, alow;
  double *x, *dy, *dx64, *dxlow;
} refs;

static void run_case(coda_dtype dtype, coda_tiling tiling, unsigned flags) {
  coda_context ctx = test_context(dtype == CODA_F64 ? CODA_PRECISION_F64 : CODA_PRECISION_F32, 0);
  CHECK(ctx != NULL);
  coda_gpt2_config cfg = coda_gpt2_default_config();
  cfg.dtype = dtype;
  cfg.tiling = tiling;
  cfg.flags = flags;
  gpt2_ref_dims dm = {(int)cfg.batch, (int)cfg.seq, (int)cfg.dim, (int)cfg.n_heads,
                      (int)cfg.ffn_dim, 1e-5, CODA_F64};
  long M = (long)dm.B * dm.T, d = dm.d;

  refs R;
  memset(&R, 0, sizeof R);
  CHECK(gpt2_ref_params_alloc(&dm, &R.w) == 0);
  CHECK(gpt2_ref_params_alloc(&dm, &R.g64) == 0);
  CHECK(gpt2_ref_params_alloc(&dm, &R.glow) == 0);
  CHECK(gpt2_ref_acts_alloc(&dm, &R.a64) == 0);
  CHECK(gpt2_ref_acts_alloc(&dm, &R.alow) == 0);
  R.x = malloc(sizeof(double) * M * d);
  R.dy = malloc(sizeof(double) * M * d);
  R.dx64 = malloc(sizeof(double) * M * d);
  R.dxlow = malloc(sizeof(double) * M * d);
  /* Fresh random data; stored values are exactly representable in the
   * storage dtype so both sides start from the same numbers. */
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    long n;
    const char *name;
    double *v = gpt2_ref_param(&R.w, &dm, i, &n, &name);
    int gamma = strstr(name, "gamma") != NULL, mat = name[0] == 'W';
    for (long j = 0; j < n; j++) {
      double val = gamma ? 1.0 + 0.3 * urand() : mat ? 0.5 * urand() / sqrt((double)d) * 1.7
                                                     : 0.2 * urand();
      v[j] = coda_round_to(dtype, val);
    }
  }
  for (long i = 0; i < M * d; i++) {
    R.x[i] = coda_round_to(dtype, 1.2 * urand() + 0.25 * ((i % d) % 3 - 1));
    R.dy[i] = coda_round_to(dtype, urand());
  }
  gpt2_ref_forward(&dm, &R.w, R.x, &R.a64);
  gpt2_ref_backward(&dm, &R.w, &R.a64, R.dy, R.dx64, &R.g64);
  if (dtype != CODA_F64) {
    gpt2_ref_dims dl = dm;
    dl.round = dtype;
    gpt2_ref_forward(&dl, &R.w, R.x, &R.alow);
    gpt2_ref_backward(&dl, &R.w, &R.alow, R.dy, R.dxlow, &R.glow);
  }

  coda_plan p = NULL;
  coda_status st = coda_gpt2_block_plan(ctx, &cfg, &p);
  CHECK_MSG(st == CODA_OK, "plan: %s", coda_last_error(ctx));
  if (st != CODA_OK) goto done;
  int ok = put(p, "x", R.x, M * d) == 0 && put(p, "dx_out", R.dy, M * d) == 0;
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    long n;
    double *v = gpt2_ref_param(&R.w, &dm, i, &n, NULL);
    ok = ok && put(p, plan_param[i], v, n) == 0;
  }
  CHECK_MSG(ok, "writing plan buffers: %s", coda_last_error(ctx));
  st = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
  CHECK_MSG(st == CODA_OK, "forward: %s", coda_last_error(ctx));
  if (st == CODA_OK) {
    st = coda_plan_run(ctx, p, CODA_PHASE_BACKWARD);
    CHECK_MSG(st == CODA_OK, "backward: %s", coda_last_error(ctx));
  }
  if (st != CODA_OK) goto done;

  /* every compared tensor: plan name, fp64 ref, lowp ref, length */
  struct { const char *name; const double *r64, *rlow; long n; } cmp[2 + GPT2_REF_NPARAMS];
  int nc = 0;
  cmp[nc].name = "x_out"; cmp[nc].r64 = R.a64.y; cmp[nc].rlow = R.alow.y; cmp[nc++].n = M * d;
  cmp[nc].name = "dx"; cmp[nc].r64 = R.dx64; cmp[nc].rlow = R.dxlow; cmp[nc++].n = M * d;
  for (int i = 0; i < GPT2_REF_NPARAMS; i++) {
    static char names[GPT2_REF_NPARAMS][16];
    snprintf(names[i], sizeof names[i], "d%s", plan_param[i]);
    long n;
    cmp[nc].name = names[i];
    cmp[nc].r64 = gpt2_ref_param(&R.g64, &dm, i, &n, NULL);
    cmp[nc].rlow = gpt2_ref_param(&R.glow, &dm, i, NULL, NULL);
    cmp[nc++].n = n;
  }
  /* one bf16 rounding more for the GEMM weights' gradients with the flag */
  const double grad_round = (flags & CODA_GPT2_GRAD_ACT) ? 1.01 * 0x1p-8 : 0.0;
  for (int i = 0; i < nc; i++) {
    double md = 0, mr = 0;
    CHECK_MSG(diff(p, cmp[i].name, cmp[i].r64, cmp[i].n, &md, &mr) == 0, "buffer %s",
              cmp[i].name);
    CHECK_MSG(mr > 1e-3, "%s: reference is (near) zero", cmp[i].name);
    if (dtype == CODA_F64) {
      if (getenv("CODA_TEST_VERBOSE")) printf("%-8s rel %.3g\n", cmp[i].name, md / mr);
      CHECK_MSG(md <= 1e-10 * mr, "%s: max|plan-ref| %.3g, max|ref| %.3g (rel %.3g)",
                cmp[i].name, md, mr, md / mr);
    } else {
      double lowp = maxabsdiff(cmp[i].rlow, cmp[i].r64, cmp[i].n);
      double bound = 2 * lowp + 1e-3 * mr;
      const char *nm = cmp[i].name;
      if (!strcmp(nm, "dwqkv") || !strcmp(nm, "dwo") || !strcmp(nm, "dwfc") || !strcmp(nm, "dwproj")) {
        coda_tensor t;
        CHECK(coda_plan_tensor(p, nm, &t) == CODA_OK &&
              t.dtype == (grad_round > 0 ? CODA_BF16 : CODA_F32));
        bound += grad_round * (mr + md); /* max|plan| <= max|ref| + max|plan - ref| */
      }
      CHECK_MSG(md <= bound, "%s: max|plan-ref| %.3g > 2 max|lowp-ref| %.3g + atol %.3g",
                cmp[i].name, md, 2 * lowp, 1e-3 * mr);
      if (getenv("CODA_TEST_VERBOSE"))
        printf("%-8s plan %.3g lowp %.3g max %.3g\n", cmp[i].name, md, lowp, mr);
    }
  }
done:
  coda_plan_destroy(p);
  gpt2_ref_params_free(&R.w);
  gpt2_ref_params_free(&R.g64);
  gpt2_ref_params_free(&R.glow);
  gpt2_ref_acts_free(&R.a64);
  gpt2_ref_acts_free(&R.alow);
  free(R.x);
  free(R.dy);
  free(R.dx64);
  free(R.dxlow);
  coda_context_destroy(ctx);
}

static void bad_configs(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  coda_gpt2_config cfg = coda_gpt2_default_config();
  coda_plan p = NULL;
  cfg.n_heads = 5; /* 64 % 5 != 0 */
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(p == NULL);
  CHECK(strstr(coda_last_error(ctx), "n_heads") != NULL);
  cfg = coda_gpt2_default_config();
  cfg.dtype = CODA_F64; /* needs an exact-mode context */
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_ERR_DTYPE);
  cfg = coda_gpt2_default_config();
  cfg.dtype = CODA_F16;
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_ERR_DTYPE);
  {
    coda_context c64 = test_context(CODA_PRECISION_F64, 0);
    CHECK(c64 != NULL);
    cfg = coda_gpt2_default_config(); /* bf16 in an exact-mode context */
    CHECK(coda_gpt2_block_plan(c64, &cfg, &p) == CODA_ERR_DTYPE);
    coda_context_destroy(c64);
  }
  cfg = coda_gpt2_default_config();
  cfg.seq = 0;
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT);
  cfg = coda_gpt2_default_config();
  cfg.flags = 4; /* unknown (past CODA_GPT2_GRAD_ACT) */
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "flags") != NULL);
  CHECK(coda_gpt2_block_plan(ctx, NULL, &p) == CODA_ERR_INVALID_ARGUMENT);
  cfg = coda_gpt2_default_config();
  cfg.tiling.tile_m = 12; /* not a multiple of 8 */
  cfg.tiling.tile_n = 32;
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "tiling") != NULL);
  /* a plan runs and prints: every step is listed */
  cfg = coda_gpt2_default_config();
  CHECK(coda_gpt2_block_plan(ctx, &cfg, &p) == CODA_OK);
  const char *text = p ? coda_plan_text(p) : NULL;
  CHECK(text && strstr(text, "gpt2_ln_bwd") && strstr(text, "gpt2_residual_ln"));
  coda_plan_destroy(p);
  p = NULL;
  CHECK(coda_gpt2_block_plan(ctx, &cfg, NULL) == CODA_ERR_INVALID_ARGUMENT);
  coda_context_destroy(ctx);
}

int main(void) {
  bad_configs();
  /* several column tiles per row and row tiles per column, ragged included */
  coda_tiling small = {16, 48};
  run_case(CODA_F64, small, 0);
  coda_tiling wide = {64, 128};
  run_case(CODA_F64, wide, 0);
  run_case(CODA_BF16, small, 0);
  coda_tiling deflt = {0, 0};
  run_case(CODA_BF16, deflt, 0);
  /* folded: partials read by the consumers */
  run_case(CODA_F64, small, CODA_GPT2_FOLD);
  run_case(CODA_BF16, small, CODA_GPT2_FOLD);
  run_case(CODA_BF16, deflt, CODA_GPT2_FOLD);
  /* bf16 weight gradients; in exact mode the flag changes nothing */
  run_case(CODA_BF16, small, CODA_GPT2_GRAD_ACT);
  run_case(CODA_BF16, deflt, CODA_GPT2_GRAD_ACT | CODA_GPT2_FOLD);
  run_case(CODA_F64, small, CODA_GPT2_GRAD_ACT);
  return CHECK_DONE();
}
