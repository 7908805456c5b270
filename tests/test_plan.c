/* The plan infrastructure (src/nn/plan_*.c): building (sticky errors,
 * bindings, partials shaped by the program), binding caller memory,
 * running through the public API (checked against a direct double
 * computation), host ops, error messages naming the step, printing, the
 * exact-mode retyping of built-in programs, and the Llama-3 config checks
 * and layout map. */
#include "coda_nn.h"
#include "check.h"
#include "test_nn_llama_util.h"

#include <string.h>

static int contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void test_builder_errors(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  coda_plan p = NULL;
  CHECK(plan_create(ctx, "t", &p) == CODA_OK);
  CHECK(plan_buffer(p, "a", CODA_F64, 4, 8, PLAN_ROLE_INPUT) == 0);
  CHECK(plan_buffer(p, "a", CODA_F64, 4, 8, PLAN_ROLE_INPUT) < 0);
  CHECK(plan_status(p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(contains(coda_last_error(ctx), "'a' declared twice"));
  /* sticky: later calls do nothing */
  CHECK(plan_buffer(p, "b", CODA_F64, 4, 8, PLAN_ROLE_INPUT) < 0);
  CHECK(plan_find(p, "b") < 0);
  coda_tensor t;
  CHECK(coda_plan_tensor(p, "a", &t) != CODA_OK);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) != CODA_OK);
  coda_plan_destroy(p);

  CHECK(plan_create(ctx, "t", &p) == CODA_OK);
  plan_buffer(p, "x", CODA_F64, 5, 8, PLAN_ROLE_INPUT);
  plan_buffer(p, "w", CODA_F64, 6, 7, PLAN_ROLE_PARAM);
  coda_tiling tl = {8, 8};
  plan_gemm(p, CODA_PHASE_FORWARD, "mismatch", "llama_residual", CODA_N, "x", CODA_T, "w", tl,
            "res=x x=x");
  CHECK(plan_status(p) == CODA_ERR_SHAPE);
  CHECK(contains(coda_last_error(ctx), "mismatch"));
  coda_plan_destroy(p);

  CHECK(plan_create(ctx, "t", &p) == CODA_OK);
  plan_buffer(p, "x", CODA_F64, 5, 8, PLAN_ROLE_INPUT);
  plan_map(p, CODA_PHASE_FORWARD, "norm", "llama_rmsnorm", 5, 8, tl, "x=x w=nowhere");
  CHECK(plan_status(p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(contains(coda_last_error(ctx), "nowhere"));
  coda_plan_destroy(p);

  CHECK(plan_create(ctx, "t", &p) == CODA_OK);
  plan_buffer(p, "x", CODA_F64, 5, 8, PLAN_ROLE_INPUT);
  plan_map(p, CODA_PHASE_FORWARD, "bad", "no_such_program", 5, 8, tl, "");
  CHECK(plan_status(p) != CODA_OK);
  CHECK(contains(coda_last_error(ctx), "no_such_program"));
  coda_plan_destroy(p);

  CHECK(plan_create(ctx, "t", &p) == CODA_OK);
  plan_buffer(p, "x", CODA_F64, 5, 8, PLAN_ROLE_INPUT);
  plan_map(p, CODA_PHASE_FORWARD, "bad", "llama_rmsnorm", 5, 8, tl, "x=x w");
  CHECK(plan_status(p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(contains(coda_last_error(ctx), "bad binding"));
  coda_plan_destroy(p);
  coda_context_destroy(ctx);
}

/* A three-step plan: RMSNorm map + finish, a residual GEMM on h, a plain
 * GEMM on the result; plus host copy/zero. Checked against doubles. */
static void test_run_small_plan(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  enum { M = 19, D = 24, N = 40 };
  coda_tiling tl = {8, 16};
  coda_plan p = NULL;
  CHECK(plan_create(ctx, "small", &p) == CODA_OK);
  plan_buffer(p, "x", CODA_F64, M, D, PLAN_ROLE_INPUT);
  plan_buffer(p, "w", CODA_F64, 1, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "W", CODA_F64, N, D, PLAN_ROLE_PARAM);
  plan_buffer(p, "res", CODA_F64, M, N, PLAN_ROLE_CONST);
  plan_buffer(p, "h", CODA_F64, M, D, PLAN_ROLE_TEMP);
  plan_buffer(p, "r", CODA_F64, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "y", CODA_F64, M, N, PLAN_ROLE_OUTPUT);
  plan_buffer(p, "G", CODA_F64, N, D, PLAN_ROLE_GRAD);
  plan_buffer(p, "ycopy", CODA_F64, M, N, PLAN_ROLE_OUTPUT);
  double *res = lt_vec(M * N, 1);
  plan_buffer_init(p, "res", res);
  plan_map(p, CODA_PHASE_FORWARD, "norm", "llama_rmsnorm", M, D, tl, "x=x w=w h=h ss=ss");
  plan_finish(p, CODA_PHASE_FORWARD, "norm.r", "llama_rmsnorm", "r", M, D, tl, "ss=ss r=r");
  plan_gemm(p, CODA_PHASE_FORWARD, "proj", "llama_residual", CODA_N, "h", CODA_T, "W", tl,
            "res=res x=y");
  plan_copy(p, CODA_PHASE_FORWARD, "copy", "y", "ycopy");
  plan_zero(p, CODA_PHASE_BACKWARD, "zero", "ycopy");
  plan_matmul(p, CODA_PHASE_BACKWARD, "G", CODA_T, "y", CODA_N, "x", "G", 0.5f, 0);
  CHECK(plan_status(p) == CODA_OK);
  /* the partial was created with the program's shape for M x D, tile_n 16 */
  int ss = plan_find(p, "ss");
  CHECK(ss >= 0);
  if (ss >= 0) {
    CHECK_EQ_INT(p->bufs[ss].rows, M);
    CHECK_EQ_INT(p->bufs[ss].cols, (D + 15) / 16);
    CHECK_EQ_INT(p->bufs[ss].dtype, CODA_F64);
  }
  const char *text = coda_plan_text(p);
  CHECK(contains(text, "forward:") && contains(text, "backward:"));
  CHECK(contains(text, "llama_rmsnorm") && contains(text, "proj") && contains(text, "G = y^T . x"));

  /* x from caller memory; a wrong shape is refused */
  double *x = lt_vec(M * D, 1.5), *w = lt_vec(D, 1), *W = lt_vec(N * D, 0.3);
  coda_tensor bad = coda_tensor_2d(x, CODA_F64, M, D - 1);
  CHECK(coda_plan_bind(p, "x", &bad) == CODA_ERR_SHAPE);
  coda_tensor xt = coda_tensor_2d(x, CODA_F64, M, D);
  CHECK(coda_plan_bind(p, "x", &xt) == CODA_OK);
  coda_tensor t;
  CHECK(coda_plan_tensor(p, "w", &t) == CODA_OK);
  lt_write(&t, w);
  CHECK(coda_plan_tensor(p, "W", &t) == CODA_OK);
  lt_write(&t, W);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);

  double *y = lt_zeros(M * N), *G = lt_zeros(N * D), *r = lt_zeros(M);
  for (int m = 0; m < M; m++) {
    double s2 = 0;
    for (int k = 0; k < D; k++) s2 += x[m * D + k] * x[m * D + k];
    r[m] = 1.0 / sqrt(s2 / D + 1e-5);
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += x[m * D + k] * w[k] * W[n * D + k];
      y[m * N + n] = s + res[m * N + n]; /* y = h W^T + res, h = x * w */
    }
  }
  for (int n = 0; n < N; n++)
    for (int k = 0; k < D; k++) {
      double s = 0;
      for (int m = 0; m < M; m++) s += y[m * N + n] * x[m * D + k];
      G[n * D + k] = 0.5 * s;
    }
  double *gy = lt_zeros(M * N), *gr = lt_zeros(M), *gG = lt_zeros(N * D), *gc = lt_zeros(M * N);
  CHECK(coda_plan_tensor(p, "y", &t) == CODA_OK);
  lt_read(&t, gy);
  CHECK(coda_plan_tensor(p, "r", &t) == CODA_OK);
  lt_read(&t, gr);
  CHECK_MSG(lt_relerr(gr, r, M) <= 1e-12, "r: %.3g", lt_relerr(gr, r, M));
  CHECK_MSG(lt_relerr(gy, y, M * N) <= 1e-12, "y: %.3g", lt_relerr(gy, y, M * N));
  CHECK(coda_plan_tensor(p, "ycopy", &t) == CODA_OK);
  lt_read(&t, gc);
  CHECK(lt_maxabs_diff(gc, gy, M * N) == 0);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
  CHECK(coda_plan_tensor(p, "G", &t) == CODA_OK);
  lt_read(&t, gG);
  CHECK_MSG(lt_relerr(gG, G, N * D) <= 1e-12, "G: %.3g", lt_relerr(gG, G, N * D));
  CHECK(coda_plan_tensor(p, "ycopy", &t) == CODA_OK);
  lt_read(&t, gc);
  CHECK(lt_maxabs(gc, M * N) == 0);
  CHECK(coda_plan_run(ctx, p, (coda_phase)7) == CODA_ERR_INVALID_ARGUMENT);
  coda_plan_destroy(p);
  free(res); free(x); free(w); free(W); free(y); free(G); free(gy); free(gr); free(gG);
  free(gc); free(r);
  coda_context_destroy(ctx);
}

/* A failing step names the plan and the step. */
static void test_run_error(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  coda_plan p = NULL;
  coda_tiling tl = {8, 8};
  CHECK(plan_create(ctx, "errplan", &p) == CODA_OK);
  plan_buffer(p, "x", CODA_F64, 8, 8, PLAN_ROLE_INPUT);
  plan_buffer(p, "h", CODA_F64, 8, 8, PLAN_ROLE_TEMP);
  /* w is never bound: the backend refuses at run time */
  plan_map(p, CODA_PHASE_FORWARD, "the_norm_step", "llama_rmsnorm", 8, 8, tl, "x=x h=h ss=ss");
  CHECK(plan_status(p) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) != CODA_OK);
  CHECK(contains(coda_last_error(ctx), "errplan"));
  CHECK(contains(coda_last_error(ctx), "the_norm_step"));
  CHECK(contains(coda_last_error(ctx), "'w'"));
  coda_plan_destroy(p);
  coda_context_destroy(ctx);
}

static void test_retype(void) {
  coda_context c64 = lt_context(CODA_PRECISION_F64), c32 = lt_context(CODA_PRECISION_F32);
  coda_program a = NULL, b = NULL;
  CHECK(plan_builtin(c32, "llama_norm_bwd", &a) == CODA_OK);
  CHECK(plan_builtin(c64, "llama_norm_bwd", &b) == CODA_OK);
  if (a && b) {
    CHECK(contains(coda_program_text(a), "bf16") && !contains(coda_program_text(a), "f64"));
    CHECK(!contains(coda_program_text(b), "bf16") && !contains(coda_program_text(b), "f32"));
    CHECK(contains(coda_program_text(b), "f64"));
  }
  coda_program_destroy(a);
  coda_program_destroy(b);
  /* i32 stays i32 */
  CHECK(plan_builtin(c64, "llama_qkv_rope", &a) == CODA_OK);
  if (a) CHECK(contains(coda_program_text(a), "i32"));
  coda_program_destroy(a);
  coda_context_destroy(c64);
  coda_context_destroy(c32);
}

static void test_llama_config(void) {
  coda_context c32 = lt_context(CODA_PRECISION_F32), c64 = lt_context(CODA_PRECISION_F64);
  coda_llama_config c = coda_llama_default_config();
  coda_plan p = NULL;
  CHECK(coda_llama_block_plan(c32, &c, &p) == CODA_OK);
  if (p) {
    const char *t = coda_plan_text(p);
    CHECK(contains(t, "llama_qkv_rope") && contains(t, "llama_swiglu_bwd") &&
          contains(t, "attention"));
  }
  coda_plan_destroy(p);
  CHECK(coda_llama_block_plan(c64, &c, &p) == CODA_ERR_DTYPE); /* bf16 in exact mode */
  CHECK(p == NULL);
  coda_llama_config b = c;
  b.n_kv_heads = 3;
  CHECK(coda_llama_block_plan(c32, &b, &p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(contains(coda_last_error(c32), "n_kv_heads"));
  b = c;
  b.head_dim = 15;
  CHECK(coda_llama_block_plan(c32, &b, &p) == CODA_ERR_INVALID_ARGUMENT);
  b = c;
  b.tiling.tile_m = 12;
  b.tiling.tile_n = 16;
  CHECK(coda_llama_block_plan(c32, &b, &p) == CODA_ERR_INVALID_ARGUMENT);
  b = c;
  b.vocab = 0;
  CHECK(coda_llama_head_plan(c32, &b, &p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_llama_head_plan(c32, &c, NULL) == CODA_ERR_INVALID_ARGUMENT);

  /* the half-split -> adjacent-pair map is a permutation fixing V rows */
  int64_t n = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  int64_t qk = (c.n_heads + c.n_kv_heads) * c.head_dim;
  char *seen = calloc((size_t)n, 1);
  int okp = 1;
  for (int64_t r = 0; r < n; r++) {
    int64_t q = coda_llama_qkv_row(&c, r);
    if (q < 0 || q >= n || seen[q]) okp = 0;
    else seen[q] = 1;
    if (r >= qk && q != r) okp = 0;
  }
  CHECK(okp);
  free(seen);
  CHECK_EQ_INT(coda_llama_qkv_row(&c, 1), 2);                  /* j = 1 -> 2j */
  CHECK_EQ_INT(coda_llama_qkv_row(&c, c.head_dim / 2 + 1), 3); /* hd/2 + 1 -> 3 */
  CHECK_EQ_INT(coda_llama_qkv_row(&c, n), -1);
  coda_context_destroy(c32);
  coda_context_destroy(c64);
}

int main(void) {
  lt_seed(7);
  test_builder_errors();
  test_run_small_plan();
  test_run_error();
  test_retype();
  test_llama_config();
  return CHECK_DONE();
}
