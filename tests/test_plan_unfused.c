/* A block plan with fusion off (coda_plan_set_fused(p, 0): every GEMM +
 * epilogue step as a plain GEMM into a temporary plus the program as a map
 * pass) computes the same block as the fused plan: Llama-3 and GPT-2
 * blocks, forward and backward, every output and gradient. In exact mode
 * (f64 everywhere, also the temporary) the two agree to round-off; in the
 * bf16 mode they differ only by rounding the accumulator to bf16. */
#include "coda_nn.h"
#include "base/internal.h"
#include "check.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *kLlamaIn[] = {"x", "dx_out", "wqkv", "wo", "wgu", "wd", "wn1", "wn2", NULL};
static const char *kLlamaOut[] = {"x_out", "dx",  "dwqkv", "dwo", "dwgu",
                                  "dwd",   "dwn1", "dwn2", NULL};
static const char *kGpt2In[] = {"x",   "dx_out", "ln1_g", "ln1_b", "ln2_g", "ln2_b", "wqkv", "bqkv",
                                "wo",  "bo",     "wfc",   "bfc",   "wproj", "bproj", NULL};
static const char *kGpt2Out[] = {"x_out", "dx",   "dln1_g", "dln1_b", "dwqkv", "dbqkv", "dwo",
                                 "dbo",   "dln2_g", "dln2_b", "dwfc", "dbfc", "dwproj", "dbproj",
                                 NULL};

static void fill(coda_plan p, const char *name, uint64_t seed) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  const int norm = strstr(name, "wn") || strstr(name, "_g");
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) {
      const double u = lcg64_unit(&seed);
      coda_store(&t, r, c, norm ? 1 + 0.1 * u : 0.5 * u);
    }
}

/* Runs the block fused and unfused on the same inputs; returns the worst
 * max|unfused - fused| / max|fused| over the outputs and gradients. */
static double compare(coda_context ctx, int gpt2, coda_dtype dt) {
  coda_plan p[2];
  for (int v = 0; v < 2; v++) {
    coda_status s;
    if (gpt2) {
      coda_gpt2_config c = coda_gpt2_default_config();
      c.dtype = dt;
      s = coda_gpt2_block_plan(ctx, &c, &p[v]);
    } else {
      coda_llama_config c = coda_llama_default_config();
      c.dtype = dt;
      s = coda_llama_block_plan(ctx, &c, &p[v]);
    }
    CHECK_MSG(s == CODA_OK, "%s", coda_last_error(ctx));
    if (s != CODA_OK) return INFINITY;
    const char **in = gpt2 ? kGpt2In : kLlamaIn;
    for (int i = 0; in[i]; i++) fill(p[v], in[i], 1000 + (uint64_t)i);
  }
  CHECK(coda_plan_set_fused(p[1], 0) == CODA_OK);
  CHECK(strstr(coda_plan_text(p[1]), "fusion off") != NULL);
  CHECK(strstr(coda_plan_text(p[0]), "fusion off") == NULL);
  for (int v = 0; v < 2; v++) {
    CHECK_MSG(coda_plan_run(ctx, p[v], CODA_PHASE_FORWARD) == CODA_OK, "%s", coda_last_error(ctx));
    CHECK_MSG(coda_plan_run(ctx, p[v], CODA_PHASE_BACKWARD) == CODA_OK, "%s", coda_last_error(ctx));
  }
  double worst = 0;
  const char **out = gpt2 ? kGpt2Out : kLlamaOut;
  for (int i = 0; out[i]; i++) {
    coda_tensor a, b;
    CHECK(coda_plan_tensor(p[0], out[i], &a) == CODA_OK);
    CHECK(coda_plan_tensor(p[1], out[i], &b) == CODA_OK);
    double diff = 0, mag = 0;
    for (int64_t r = 0; r < a.rows; r++)
      for (int64_t c = 0; c < a.cols; c++) {
        const double x = coda_load(&a, r, c), y = coda_load(&b, r, c);
        diff = fmax(diff, fabs(x - y));
        mag = fmax(mag, fabs(x));
      }
    CHECK_MSG(mag > 0 && isfinite(diff), "%s: all zero or not finite", out[i]);
    const double rel = mag > 0 ? diff / mag : INFINITY;
    printf("  %s %s %-7s max|unfused - fused| / max|fused| = %.3g\n", gpt2 ? "gpt2 " : "llama",
           coda_dtype_name(dt), out[i], rel);
    worst = fmax(worst, rel);
  }
  /* fusion back on: the same plan object reproduces the fused result */
  CHECK(coda_plan_set_fused(p[1], 1) == CODA_OK);
  CHECK(coda_plan_run(ctx, p[1], CODA_PHASE_FORWARD) == CODA_OK);
  coda_tensor a, b;
  CHECK(coda_plan_tensor(p[0], "x_out", &a) == CODA_OK);
  CHECK(coda_plan_tensor(p[1], "x_out", &b) == CODA_OK);
  CHECK(memcmp(a.data, b.data, (size_t)(a.rows * a.cols) * coda_dtype_size(a.dtype)) == 0);
  coda_plan_destroy(p[0]);
  coda_plan_destroy(p[1]);
  return worst;
}

int main(void) {
  coda_context ctx = test_context(CODA_PRECISION_F32, 2), c64 = test_context(CODA_PRECISION_F64, 2);
  CHECK(ctx != NULL);
  CHECK(c64 != NULL);

  for (int gpt2 = 0; gpt2 < 2; gpt2++) {
    /* exact mode: the same algebra in f64, so only summation order differs */
    const double e = compare(c64, gpt2, CODA_F64);
    CHECK_MSG(e <= 1e-10, "%s exact mode: %g", gpt2 ? "gpt2" : "llama", e);
    /* bf16 storage: the unfused plan rounds acc to bf16 (relative 2^-9)
     * before the epilogue; a few such roundings along the block */
    const double b = compare(ctx, gpt2, CODA_BF16);
    CHECK_MSG(b <= 5e-2, "%s bf16: %g", gpt2 ? "gpt2" : "llama", b);
  }

  CHECK(coda_plan_set_fused(NULL, 0) == CODA_ERR_INVALID_ARGUMENT);
  coda_context_destroy(ctx);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
