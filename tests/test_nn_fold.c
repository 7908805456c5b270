/* Folded plans (CODA_LLAMA_FOLD, CODA_GPT2_FOLD): the GEMMs that read a row
 * statistic read the producer's rowsum partials (program input kind
 * rowsum) and compute it in their epilogue, so no row finisher runs.
 *
 * Against the same plan unfolded, on the same random inputs and weights,
 * for the Llama-3 block (alone and as the producer of the next norm), the
 * LM head and the GPT-2 block:
 *  - exact mode: every output and gradient within 1e-12 of max|unfolded|
 *    (the two differ only in where the statistics are rounded);
 *  - bf16 storage: within 2e-2 of max|unfolded| (an fp32 statistic
 *    rounded differently may move a bf16 rounding of what it scales);
 *  - the saved statistics buffers hold M x ceil(dim/tile_n) partials, and
 *    finishing them gives the unfolded vector (rstd_next, the head's rstd);
 *  - launches: the folded plan has the same steps minus the row
 *    finishers; the finishers left are the named column-sum / lse ones;
 *  - the folded plan with fusion off (plain GEMM + map) equals it fused.
 * The fp64 references (and the bf16 rule against them) for the folded
 * plans are in test_nn_llama_block.c and test_nn_gpt2_block.c. */
#include "coda_nn.h"
#include "check.h"
#include "plan_test_util.h"

enum { LLAMA_BLOCK, LLAMA_BLOCK_NORM_OUT, LLAMA_HEAD, GPT2_BLOCK };
static const char *const kind_names[] = {"llama block", "llama block (NORM_OUT)", "llama head",
                                         "gpt2 block"};

static coda_status build(coda_context ctx, int kind, int exact, int fold, coda_tiling tl,
                         coda_plan *out) {
  const pt_kind k = kind == GPT2_BLOCK ? PT_GPT2_BLOCK : kind == LLAMA_HEAD ? PT_LLAMA_HEAD : PT_LLAMA_BLOCK;
  return pt_build(ctx, k, pt_small(), exact ? CODA_F64 : CODA_BF16, tl,
                  (fold ? PT_FOLD : 0) | (kind == LLAMA_BLOCK_NORM_OUT ? PT_NORM_OUT : 0), out);
}

/* max|a - b| / max|b| over a buffer of both plans */
static double buf_relerr(coda_plan a, coda_plan b, const char *name) {
  coda_tensor ta, tb;
  if (coda_plan_tensor(a, name, &ta) != CODA_OK || coda_plan_tensor(b, name, &tb) != CODA_OK) return INFINITY;
  double e = 0, m = 0;
  for (int64_t r = 0; r < tb.rows; r++)
    for (int64_t c = 0; c < tb.cols; c++) {
      double x = coda_load(&ta, r, c), y = coda_load(&tb, r, c), d = fabs(x - y);
      if (!(d <= e)) e = d;
      m = fmax(m, fabs(y));
    }
  return m > 0 ? e / m : e;
}

static int count_finish(coda_plan p, coda_phase ph) {
  int n = 0;
  for (int k = 0; k < p->nstep; k++) n += p->steps[k].kind == PLAN_FINISH && p->steps[k].phase == ph;
  return n;
}

/* The finisher steps a folded plan keeps, by label, in order. */
static void check_kept(coda_plan p, const char *const *want, int n, const char *what) {
  int k = 0, ok = 1;
  for (int i = 0; i < p->nstep; i++) {
    if (p->steps[i].kind != PLAN_FINISH) continue;
    if (k >= n || strcmp(p->steps[i].label, want[k])) ok = 0;
    k++;
  }
  CHECK_MSG(ok && k == n, "%s: the folded plan's finishers are not the expected %d", what, n);
}

/* rsqrt(sum_t P[m,t] / D + 1e-5) of the folded plan's partials vs the
 * unfolded plan's finished vector. */
static double rstd_from_partials(coda_plan f, coda_plan u, const char *name, int64_t D) {
  coda_tensor tf, tu;
  if (coda_plan_tensor(f, name, &tf) != CODA_OK || coda_plan_tensor(u, name, &tu) != CODA_OK) return INFINITY;
  double e = 0;
  for (int64_t m = 0; m < tu.rows; m++) {
    double s = 0;
    for (int64_t t = 0; t < tf.cols; t++) s += coda_load(&tf, m, t);
    double r = 1.0 / sqrt(s / (double)D + 1e-5), ru = coda_load(&tu, m, 0);
    e = fmax(e, fabs(r - ru) / ru);
  }
  return e;
}

static void test_kind(int kind, int exact, coda_tiling tl) {
  coda_context ctx = lt_context(exact ? CODA_PRECISION_F64 : CODA_PRECISION_F32);
  const char *what = kind_names[kind];
  coda_plan u = NULL, f = NULL;
  CHECK_MSG(build(ctx, kind, exact, 0, tl, &u) == CODA_OK, "%s: %s", what, coda_last_error(ctx));
  CHECK_MSG(build(ctx, kind, exact, 1, tl, &f) == CODA_OK, "%s folded: %s", what, coda_last_error(ctx));
  if (!u || !f) goto done;
  const int64_t D = 48, M = 14, T = (D + tl.tile_n - 1) / tl.tile_n;

  /* launches: the same steps less the row finishers */
  int fu = count_finish(u, CODA_PHASE_FORWARD), bu = count_finish(u, CODA_PHASE_BACKWARD);
  int ff = count_finish(f, CODA_PHASE_FORWARD), bf = count_finish(f, CODA_PHASE_BACKWARD);
  CHECK_MSG(f->nstep == u->nstep - (fu + bu - ff - bf), "%s: %d steps folded, %d unfolded", what,
            f->nstep, u->nstep);
  if (exact) printf("%-24s finish steps forward %d -> %d, backward %d -> %d\n", what, fu, ff, bu, bf);
  static const char *const llama_kept[] = {"dwn2", "dwn1"};
  static const char *const head_kept[] = {"lse", "ce_lsum", "ce_cnt", "dwnf"};
  static const char *const gpt2_kept[] = {"dbproj", "dbfc", "dln2_g", "dln2_b",
                                          "dbo = colsum(dx1)", "dbqkv", "dln1_g", "dln1_b"};
  switch (kind) {
  case LLAMA_BLOCK:
    CHECK(fu == 2 && bu == 4 && ff == 0 && bf == 2);
    check_kept(f, llama_kept, 2, what);
    break;
  case LLAMA_BLOCK_NORM_OUT:
    CHECK(fu == 3 && bu == 4 && ff == 0 && bf == 2);
    check_kept(f, llama_kept, 2, what);
    break;
  case LLAMA_HEAD:
    CHECK(fu == 4 && bu == 2 && ff == 3 && bf == 1);
    check_kept(f, head_kept, 4, what);
    break;
  default:
    CHECK(fu == 4 && bu == 12 && ff == 0 && bf == 8);
    check_kept(f, gpt2_kept, 8, what);
    break;
  }
  const char *t = coda_plan_text(f);
  CHECK(t && strstr(t, "_folded"));

  /* the saved statistics are partials */
  static const char *const llama_stats[] = {"rstd1", "rstd2"}, *const gpt2_stats[] = {"mu1", "rs1", "mu2", "rs2"};
  const char *const *stats = kind == GPT2_BLOCK ? gpt2_stats : kind == LLAMA_HEAD ? (const char *const[]){"rstd"} : llama_stats;
  int nstats = kind == GPT2_BLOCK ? 4 : kind == LLAMA_HEAD ? 1 : 2;
  for (int i = 0; i < nstats; i++) {
    int bi = plan_find(f, stats[i]), ui = plan_find(u, stats[i]);
    CHECK_MSG(bi >= 0 && ui >= 0 && f->bufs[bi].rows == M && f->bufs[bi].cols == T && u->bufs[ui].cols == 1,
              "%s: buffer %s", what, stats[i]);
  }

  /* same data, both runs */
  CHECK(pt_fill_same(u, f, pt_small()->vocab));
  int ok = pt_run(ctx, u) && pt_run(ctx, f);
  CHECK_MSG(ok, "%s: runs", what);
  if (!ok) goto done;
  const double tol = exact ? 1e-12 : 2e-2;
  int compared = 0;
  for (int i = 0; i < u->nbuf; i++) {
    const plan_buf *pb = &u->bufs[i];
    if (!pt_is_result(pb)) continue;
    int fi = plan_find(f, pb->name);
    if (fi < 0 || f->bufs[fi].cols != pb->cols) continue; /* rstd_next: below */
    double e = buf_relerr(f, u, pb->name);
    if (getenv("CODA_TEST_VERBOSE")) printf("  %s %-8s %.3g\n", what, pb->name, e);
    CHECK_MSG(e <= tol, "%s (%s): %s folded vs unfolded %.3g > %.0e", what, exact ? "exact" : "bf16",
              pb->name, e, tol);
    compared++;
  }
  CHECK(compared >= (kind == LLAMA_HEAD ? 4 : 8));
  /* the statistics the folded plan leaves as partials finish to the
   * unfolded plan's vectors (fp32 rounding of those in bf16 mode) */
  const double stol = exact ? 1e-12 : 1e-6;
  if (kind == LLAMA_BLOCK_NORM_OUT) {
    double e = rstd_from_partials(f, u, "rstd_next", D);
    CHECK_MSG(e <= stol, "%s: rstd_next from the partials %.3g", what, e);
  }
  if (kind == LLAMA_HEAD || kind == LLAMA_BLOCK) {
    double e = rstd_from_partials(f, u, kind == LLAMA_HEAD ? "rstd" : "rstd1", D);
    CHECK_MSG(e <= stol, "%s: rstd from the partials %.3g", what, e);
  }

  /* fusion off: the rowsum inputs pass through the map pass unchanged */
  if (exact && kind != LLAMA_HEAD) {
    coda_plan f2 = NULL;
    CHECK(build(ctx, kind, exact, 1, tl, &f2) == CODA_OK);
    /* new data in both, both run */
    if (f2 && pt_fill_same(f, f2, pt_small()->vocab) && coda_plan_set_fused(f2, 0) == CODA_OK &&
        pt_run(ctx, f) && pt_run(ctx, f2)) {
      double e = fmax(buf_relerr(f2, f, "dx"), buf_relerr(f2, f, "x_out"));
      CHECK_MSG(e <= 1e-12, "%s: folded unfused vs fused %.3g", what, e);
    } else {
      CHECK_MSG(0, "%s: folded unfused run: %s", what, coda_last_error(ctx));
    }
    coda_plan_destroy(f2);
  }
done:
  coda_plan_destroy(u);
  coda_plan_destroy(f);
  coda_context_destroy(ctx);
}

/* Config checks: unknown flags are refused; the folded LM head refuses
 * NORM_OUT like the unfolded one. */
static void test_configs(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F32);
  coda_llama_config c = coda_llama_default_config();
  coda_plan p = NULL;
  c.flags = CODA_LLAMA_GEMMA3 << 1; /* past the last flag */
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  c.flags = CODA_LLAMA_FOLD | CODA_LLAMA_NORM_OUT;
  CHECK(coda_llama_head_plan(ctx, &c, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  c.flags = CODA_LLAMA_FOLD;
  CHECK(coda_llama_head_plan(ctx, &c, &p) == CODA_OK);
  coda_plan_destroy(p);
  coda_context_destroy(ctx);
}

int main(void) {
  lt_seed(20261201);
  test_configs();
  const coda_tiling tilings[2] = {{16, 16}, {8, 32}};
  for (int exact = 1; exact >= 0; exact--)
    for (int kind = LLAMA_BLOCK; kind <= GPT2_BLOCK; kind++) test_kind(kind, exact, tilings[kind % 2]);
  return CHECK_DONE();
}
