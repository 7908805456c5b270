/* coda_plan_tune_fusion: every GEMM + epilogue step is timed both ways and
 * keeps one of them; the plan then computes the same block (bitwise when
 * every step stays fused, within the bf16 rounding of the temporary
 * otherwise); a buffer a step accumulates into is left as it was;
 * coda_plan_set_fused overrides the choices; bad arguments are refused.
 * The choices persist in the tuning cache ($CODA_CACHE_DIR/fused-tune.txt,
 * a fresh directory here): a second plan, on the same or a fresh context,
 * takes them without running a step; another program, shape or thread
 * count misses; CODA_RETUNE=1 times again; an unwritable cache is no
 * failure. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, dirent */
#include "coda_nn.h"
#include "base/internal.h"
#include "nn/plan.h"
#include "check.h"
#include "file_util.h"
#include "test_util.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double urand(uint64_t *s) { return lcg64_unit(s); }

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

static void run_block(coda_context ctx, coda_plan p) {
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK);
}

/* Every output and gradient bit for bit as in want (snapshots, freed). */
static void check_same(coda_plan p, double **want, const char *what) {
  for (int i = 0; kOut[i]; i++) {
    CHECK_MSG(rel_diff(p, kOut[i], want[i]) == 0, "%s: %s", kOut[i], what);
    free(want[i]);
  }
}

static void block(coda_context ctx) {
  coda_llama_config c = coda_llama_default_config();
  coda_plan p = NULL;
  CHECK_MSG(coda_llama_block_plan(ctx, &c, &p) == CODA_OK, "%s", coda_last_error(ctx));
  if (!p) return;
  for (int i = 0; kIn[i]; i++) {
    const int norm = strstr(kIn[i], "wn") != NULL;
    fill(p, kIn[i], 100 + (uint64_t)i, norm ? 0.1 : 0.5, norm ? 1.0 : 0.0);
  }
  run_block(ctx, p);
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

  run_block(ctx, p);
  for (int i = 0; kOut[i]; i++) {
    const double e = rel_diff(p, kOut[i], ref[i]);
    if (nu == 0) CHECK_MSG(e == 0, "%s: %g with every step fused", kOut[i], e);
    else CHECK_MSG(e <= 5e-2, "%s: %g", kOut[i], e);
  }
  /* the tuned plan (its unfused steps' accumulators in the temporaries'
   * arena) with the temporaries side by side instead: the same bits */
  double *tuned[8];
  for (int i = 0; kOut[i]; i++) tuned[i] = snapshot(p, kOut[i], &n);
  CHECK(coda_plan_set_share_temps(p, 0) == CODA_OK);
  run_block(ctx, p);
  check_same(p, tuned, "sharing changed the tuned plan");
  CHECK(coda_plan_set_share_temps(p, 1) == CODA_OK);
  /* everything fused again: the first run's results, bit for bit */
  CHECK(coda_plan_set_fused(p, 1) == CODA_OK);
  CHECK_EQ_INT(count(coda_plan_text(p), "  [unfused]"), 0);
  run_block(ctx, p);
  check_same(p, ref, "differs after set_fused(1)");
  /* and every step unfused: marked, still the same block */
  CHECK(coda_plan_set_fused(p, 0) == CODA_OK);
  CHECK_EQ_INT(count(coda_plan_text(p), "  [unfused]"), ngemm);

  CHECK(coda_plan_tune_fusion(ctx, p, 0, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_plan_tune_fusion(NULL, p, 1, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_plan_tune_fusion(ctx, NULL, 1, NULL) == CODA_ERR_INVALID_ARGUMENT);
  coda_plan_destroy(p);
}

/* ------------------------------------------------- the tuning cache */

/* Two GEMM steps with different programs, exact mode (f64):
 *   x = h W^T + r (llama_residual), y = h W^T + bias + r (gpt2_bias_residual) */
static coda_plan small_plan(coda_context ctx, int64_t M) {
  const int64_t N = 24, K = 40;
  coda_plan p = NULL;
  CHECK(plan_create(ctx, "cached", &p) == CODA_OK);
  if (!p) return NULL;
  plan_buffer(p, "h", CODA_F64, M, K, PLAN_ROLE_INPUT);
  plan_buffer(p, "W", CODA_F64, N, K, PLAN_ROLE_PARAM);
  plan_buffer(p, "r", CODA_F64, M, N, PLAN_ROLE_INPUT);
  plan_buffer(p, "bias", CODA_F64, 1, N, PLAN_ROLE_PARAM);
  plan_buffer(p, "x", CODA_F64, M, N, PLAN_ROLE_OUTPUT);
  plan_buffer(p, "y", CODA_F64, M, N, PLAN_ROLE_OUTPUT);
  coda_tiling tl = {16, 16};
  plan_gemm(p, CODA_PHASE_FORWARD, "x = hW^T + r", "llama_residual", CODA_N, "h", CODA_T, "W",
            tl, "res=r x=x");
  plan_gemm(p, CODA_PHASE_FORWARD, "y = hW^T + b + r", "gpt2_bias_residual", CODA_N, "h",
            CODA_T, "W", tl, "bias=bias res=r y=y");
  CHECK_MSG(plan_status(p) == CODA_OK, "%s", coda_last_error(ctx));
  fill(p, "h", 11, 1.0, 0);
  fill(p, "W", 12, 0.3, 0);
  fill(p, "r", 13, 1.0, 0.5);
  fill(p, "bias", 14, 1.0, 0.5);
  return p;
}

/* Whether buffer `name` is still all zeros (as allocated: no step ran). */
static int untouched(coda_plan p, const char *name) {
  coda_tensor t;
  CHECK(coda_plan_tensor(p, name, &t) == CODA_OK);
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++)
      if (coda_load(&t, r, c) != 0) return 0;
  return 1;
}

static int n_cached(coda_plan p) {
  int n = 0;
  for (int i = 0; i < p->nstep; i++) n += p->steps[i].kind == PLAN_GEMM && p->steps[i].tuned_cached;
  return n;
}

static int data_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += line[0] != '#' && line[0] != '\n';
  fclose(f);
  return n;
}

/* Tunes p on ctx; returns the number of steps taken from the cache. */
static int tune(coda_context ctx, coda_plan p) {
  CHECK_MSG(coda_plan_tune_fusion(ctx, p, 1, NULL) == CODA_OK, "%s", coda_last_error(ctx));
  const int n = n_cached(p);
  CHECK_EQ_INT(count(coda_plan_text(p), "; from the tuning cache)"), n);
  CHECK_EQ_INT(count(coda_plan_text(p), "(timed: fused"), 2);
  return n;
}

/* The choices of p's two GEMM steps equal ref's (times within the file's
 * two decimals). */
static void same_choices(coda_plan p, coda_plan ref, double tol) {
  for (int i = 0; i < 2; i++) {
    const plan_step *a = &p->steps[i], *b = &ref->steps[i];
    CHECK_EQ_INT(a->unfused, b->unfused);
    CHECK_EQ_INT(a->sched, b->sched);
    for (int v = 0; v < 3; v++) CHECK_NEAR(a->tuned_us[v], b->tuned_us[v], tol);
  }
}

static void cache_end_to_end(const char *file) {
  coda_context_options o = coda_context_default_options();
  o.num_threads = 2;
  o.precision = CODA_PRECISION_F64;
  coda_context c1, c2, c3;
  CHECK(coda_context_create(&o, &c1) == CODA_OK);
  CHECK(coda_context_create(&o, &c2) == CODA_OK);
  o.num_threads = 1; /* another device tag on the CPU */
  CHECK(coda_context_create(&o, &c3) == CODA_OK);

  /* First tuning: every step timed, the file written once with both. */
  const int lines0 = data_lines(file) < 0 ? 0 : data_lines(file);
  coda_plan p1 = small_plan(c1, 37);
  if (!p1) return;
  CHECK_EQ_INT(tune(c1, p1), 0);
  CHECK(!untouched(p1, "x") && !untouched(p1, "y")); /* the steps ran */
  CHECK_EQ_INT(data_lines(file), lines0 + 2);

  /* A fresh plan on the same context: both choices from the table, no
   * step runs (its outputs keep their zeros). */
  coda_plan p2 = small_plan(c1, 37);
  CHECK_EQ_INT(tune(c1, p2), 2);
  CHECK(untouched(p2, "x") && untouched(p2, "y"));
  same_choices(p2, p1, 0);
  coda_plan_destroy(p2);

  /* A fresh context reads them from the file. */
  p2 = small_plan(c2, 37);
  CHECK_EQ_INT(tune(c2, p2), 2);
  CHECK(untouched(p2, "x") && untouched(p2, "y"));
  same_choices(p2, p1, 0.0051);
  /* The cached choices compute the block as the timed ones do. */
  CHECK(coda_plan_run(c1, p1, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_run(c2, p2, CODA_PHASE_FORWARD) == CODA_OK);
  size_t n;
  double *x1 = snapshot(p1, "x", &n), *y1 = snapshot(p1, "y", &n);
  CHECK(rel_diff(p2, "x", x1) <= 1e-14 && rel_diff(p2, "y", y1) <= 1e-14);
  free(x1);
  free(y1);
  coda_plan_destroy(p2);

  /* Another shape misses both steps and adds two entries. */
  p2 = small_plan(c2, 45);
  CHECK_EQ_INT(tune(c2, p2), 0);
  CHECK(!untouched(p2, "x"));
  CHECK_EQ_INT(data_lines(file), lines0 + 4);
  coda_plan_destroy(p2);

  /* Another program text for the first step: it misses, the second hits. */
  p2 = small_plan(c2, 37);
  coda_program other = NULL;
  CHECK_MSG(coda_program_parse(c2,
                               "input res : tile f64\n"
                               "output x : f64\n"
                               "store x = res + acc\n",
                               &other) == CODA_OK,
            "%s", coda_last_error(c2));
  if (other && p2->nprog == 2) {
    coda_program_destroy(p2->progs[0].prog);
    p2->progs[0].prog = other;
    CHECK_EQ_INT(tune(c2, p2), 1);
    CHECK(!p2->steps[0].tuned_cached && p2->steps[1].tuned_cached);
    CHECK(!untouched(p2, "x") && untouched(p2, "y"));
    CHECK_EQ_INT(data_lines(file), lines0 + 5);
  }
  coda_plan_destroy(p2);

  /* Another thread count is another device: misses. */
  p2 = small_plan(c3, 37);
  CHECK_EQ_INT(tune(c3, p2), 0);
  CHECK_EQ_INT(data_lines(file), lines0 + 7);
  coda_plan_destroy(p2);

  /* CODA_RETUNE=1 (read when a context is created): timed again although
   * stored, entries replaced; a context created before it is set, and one
   * created after it is unset, take the stored choices. */
  setenv("CODA_RETUNE", "1", 1);
  coda_context cr;
  CHECK(coda_context_create(&o, &cr) == CODA_OK);
  p2 = small_plan(c1, 37);
  CHECK_EQ_INT(tune(c1, p2), 2);
  coda_plan_destroy(p2);
  p2 = small_plan(cr, 37);
  CHECK_EQ_INT(tune(cr, p2), 0);
  CHECK(!untouched(p2, "x") && !untouched(p2, "y"));
  CHECK_EQ_INT(data_lines(file), lines0 + 7);
  coda_plan_destroy(p2);
  coda_context_destroy(cr);
  unsetenv("CODA_RETUNE");
  p2 = small_plan(c1, 37);
  CHECK_EQ_INT(tune(c1, p2), 2);
  coda_plan_destroy(p2);

  /* A cache that cannot be written: tuning still succeeds (memory only). */
  const char *dir = getenv("CODA_CACHE_DIR");
  char blocked[1024];
  snprintf(blocked, sizeof blocked, "%s/fused-tune.txt/sub", dir ? dir : ".");
  setenv("CODA_CACHE_DIR", blocked, 1);
  coda_context c4;
  o.num_threads = 3;
  CHECK(coda_context_create(&o, &c4) == CODA_OK);
  p2 = small_plan(c4, 37);
  CHECK_EQ_INT(tune(c4, p2), 0);
  coda_plan_destroy(p2);
  p2 = small_plan(c4, 37);
  CHECK_EQ_INT(tune(c4, p2), 2); /* the context's table still holds them */
  coda_plan_destroy(p2);
  coda_context_destroy(c4);
  if (dir) setenv("CODA_CACHE_DIR", dir, 1);

  coda_plan_destroy(p1);
  coda_context_destroy(c1);
  coda_context_destroy(c2);
  coda_context_destroy(c3);
}


int main(void) {
  /* A fresh tuning cache (and never the user's), removed at the end. */
  char dir[] = "test_plan_tune_fusion.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  setenv("CODA_CACHE_DIR", dir, 1);
  unsetenv("CODA_RETUNE");
  char file[128];
  snprintf(file, sizeof file, "%s/fused-tune.txt", dir);

  coda_context ctx = test_context(CODA_PRECISION_F32, 2), c64 = test_context(CODA_PRECISION_F64, 2);
  CHECK(ctx != NULL);
  CHECK(c64 != NULL);
  accumulating(c64);
  block(ctx);
  coda_context_destroy(ctx);
  coda_context_destroy(c64);
  cache_end_to_end(file);
  remove_dir(dir);
  return CHECK_DONE();
}
