/* coda_plan_tune_fusion: every GEMM + epilogue step is timed both ways and
 * keeps one of them; the plan then computes the same block (bitwise when
 * every step stays fused, within the bf16 rounding of the temporary
 * otherwise); a buffer a step accumulates into is left as it was;
 * coda_plan_set_fused overrides the choices; bad arguments are refused. */
#include "coda.h"
#include "core/internal.h"
#include "nn/plan.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}
static double urand(uint64_t *s) { return (double)next(s) / 9007199254740992.0 * 2 - 1; }

static void fill(coda_plan p, const char *name, uint64_t seed, double scale, double offset) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) coda_store(&t, r, c, offset + scale * urand(&seed));
}

static double *snapshot(coda_plan p, const char *name, size_t *n) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  *n = (size_t)(t.rows * t.cols);
  double *v = malloc(*n * sizeof *v);
  for (int64_t r = 0; v && r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) v[r * t.cols + c] = coda_load(&t, r, c);
  return v;
}

/* max |buffer - v| / max |v| */
static double rel_diff(coda_plan p, const char *name, const double *v) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  double d = 0, m = 0;
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      const double x = coda_load(&t, r, c), y = v[r * t.cols + c];
      d = isnan(x - y) ? INFINITY : fmax(d, fabs(x - y));
      m = fmax(m, fabs(y));
    }
  return m > 0 ? d / m : d;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *q = strstr(s, needle); q; q = strstr(q + 1, needle)) n++;
  return n;
}

/* y += h W^T + r (an accumulating output): tuning runs the step dozens of
 * times, and y must come out as it went in. No built-in program
 * accumulates, so the step's program is swapped for one that does. */
static void accumulating(coda_context ctx) {
  const int64_t M = 37, N = 24, K = 40;
  coda_plan p = NULL;
  CHECK(plan_create(ctx, "accumulating", &p) == CODA_OK);
  plan_buffer(p, "h", CODA_F64, M, K, PLAN_ROLE_INPUT);
  plan_buffer(p, "W", CODA_F64, N, K, PLAN_ROLE_PARAM);
  plan_buffer(p, "r", CODA_F64, M, N, PLAN_ROLE_INPUT);
  plan_buffer(p, "y", CODA_F64, M, N, PLAN_ROLE_OUTPUT);
  coda_tiling tl = {16, 16};
  plan_gemm(p, CODA_PHASE_FORWARD, "proj", "llama_residual", CODA_N, "h", CODA_T, "W", tl,
            "res=r x=y");
  CHECK_MSG(plan_status(p) == CODA_OK, "%s", coda_last_error(ctx));
  coda_program acc = NULL;
  CHECK_MSG(coda_program_parse(ctx,
                               "input res : tile f64\n"
                               "output x : f64 accumulate\n"
                               "store x = acc + res\n",
                               &acc) == CODA_OK,
            "%s", coda_last_error(ctx));
  if (!acc || p->nprog != 1) return;
  coda_program_destroy(p->progs[0].prog);
  p->progs[0].prog = acc;
  fill(p, "h", 1, 1.0, 0);
  fill(p, "W", 2, 0.3, 0);
  fill(p, "r", 3, 1.0, 0);
  fill(p, "y", 4, 1.0, 0.25);
  size_t n;
  double *y0 = snapshot(p, "y", &n);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  double *y1 = snapshot(p, "y", &n);
  CHECK(rel_diff(p, "y", y0) > 1e-3); /* the step did change y */
  coda_tensor t;
  CHECK(coda_plan_tensor(p, "y", &t) == CODA_OK);
  for (int64_t r = 0; r < M; r++)
    for (int64_t c = 0; c < N; c++) coda_store(&t, r, c, y0[r * N + c]);
  int nu = -1;
  CHECK_MSG(coda_plan_tune_fusion(ctx, p, 2, &nu) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(nu == 0 || nu == 1);
  CHECK_MSG(rel_diff(p, "y", y0) == 0, "tuning changed an accumulated buffer: %g",
            rel_diff(p, "y", y0));
  CHECK(count(coda_plan_text(p), "(timed: fused") == 1);
  /* one more run gives y1 again (f64: fused and unfused differ only in
   * summation order) */
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK_MSG(rel_diff(p, "y", y1) <= 1e-14, "after tuning: %g", rel_diff(p, "y", y1));
  free(y0);
  free(y1);
  coda_plan_destroy(p);
}

static const char *kIn[] = {"x", "dx_out", "wqkv", "wo", "wgu", "wd", "wn1", "wn2", NULL};
static const char *kOut[] = {"x_out", "dx", "dwqkv", "dwo", "dwgu", "dwd", "dwn1", "dwn2", NULL};

static void block(coda_context ctx) {
  coda_llama_config c = coda_llama_default_config();
  coda_plan p = NULL;
  CHECK_MSG(coda_llama_block_plan(ctx, &c, &p) == CODA_OK, "%s", coda_last_error(ctx));
  if (!p) return;
  for (int i = 0; kIn[i]; i++) {
    const int norm = strstr(kIn[i], "wn") != NULL;
    fill(p, kIn[i], 100 + (uint64_t)i, norm ? 0.1 : 0.5, norm ? 1.0 : 0.0);
  }
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
  double *ref[8];
  size_t n;
  for (int i = 0; kOut[i]; i++) ref[i] = snapshot(p, kOut[i], &n);

  int ngemm = 0;
  for (int i = 0; i < p->nstep; i++) ngemm += p->steps[i].kind == PLAN_GEMM;
  CHECK(ngemm >= 4);
  int nu = -1;
  CHECK_MSG(coda_plan_tune_fusion(ctx, p, 1, &nu) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(nu >= 0 && nu <= ngemm);
  const char *text = coda_plan_text(p);
  CHECK_EQ_INT(count(text, "(timed: fused"), ngemm);
  CHECK_EQ_INT(count(text, "  [unfused]"), nu);
  printf("  llama block: %d of %d gemm steps unfused after timing\n", nu, ngemm);

  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
  for (int i = 0; kOut[i]; i++) {
    const double e = rel_diff(p, kOut[i], ref[i]);
    if (nu == 0) CHECK_MSG(e == 0, "%s: %g with every step fused", kOut[i], e);
    else CHECK_MSG(e <= 5e-2, "%s: %g", kOut[i], e);
  }
  /* everything fused again: the first run's results, bit for bit */
  CHECK(coda_plan_set_fused(p, 1) == CODA_OK);
  CHECK_EQ_INT(count(coda_plan_text(p), "  [unfused]"), 0);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
  for (int i = 0; kOut[i]; i++) {
    CHECK_MSG(rel_diff(p, kOut[i], ref[i]) == 0, "%s after set_fused(1)", kOut[i]);
    free(ref[i]);
  }
  /* and every step unfused: marked, still the same block */
  CHECK(coda_plan_set_fused(p, 0) == CODA_OK);
  CHECK_EQ_INT(count(coda_plan_text(p), "  [unfused]"), ngemm);

  CHECK(coda_plan_tune_fusion(ctx, p, 0, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_plan_tune_fusion(NULL, p, 1, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_plan_tune_fusion(ctx, NULL, 1, NULL) == CODA_ERR_INVALID_ARGUMENT);
  coda_plan_destroy(p);
}

int main(void) {
  coda_context ctx, c64;
  coda_context_options o = coda_context_default_options();
  o.num_threads = 2;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &c64) == CODA_OK);
  accumulating(c64);
  block(ctx);
  coda_context_destroy(ctx);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
