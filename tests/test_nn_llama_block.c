/* The Llama-3 block and head plans against the unfused reference
 * (src/nn/ref_llama3.c: standard weight layout, half-split RoPE).
 *
 * 1. Exact mode: the plan in fp64 (f64 tensors) vs the unfused block in
 *    double: the output and every gradient to relative error 1e-10 (max
 *    abs error / max abs value). Weights go through the documented layout
 *    maps (coda_llama_qkv_row, gate/up interleaving), so this also checks
 *    them.
 * 2. The unfused block's own gradients vs central finite differences of
 *    L = sum(dx_out * x_out) (head: L = loss), a few random coordinates of
 *    every parameter and of x (h = 1e-6, relative error 1e-6).
 * 3. bf16 storage, fp32 compute (the reference's kernel-test rule): with
 *    the inputs and weights rounded to bf16, truth = the unfused block in
 *    double on them, lowp = the same unfused block with bf16 rounding at
 *    every activation tensor it materializes (see ref_llama3.h); every
 *    output and gradient of the plan must satisfy
 *      max|plan - truth| <= 2 max|lowp - truth| + 1e-6 max|truth|.
 * Each also runs with CODA_LLAMA_FOLD (no row finishers: the consumers read
 * the rowsum partials), under the same criteria. With CODA_LLAMA_GRAD_ACT
 * (the GEMM weights' gradients stored in bf16) the block and head run in
 * bf16 again: those gradients are rounded once more, so their bound adds
 * one bf16 rounding of the plan's largest value, 2^-8 max|plan| (1 %
 * slack); every other tensor keeps the rule. Exact mode: the flag changes
 * nothing, the 1e-10 criterion holds. */
#include "coda_nn.h"
#include "check.h"
#include "nn/ref_llama3.h"
#include "plan_test_util.h"

typedef struct blockw {
  ref_llama_weights w; /* reference layout */
  int64_t n[7];        /* element counts */
} blockw;

static const char *wnames[7] = {"wqkv", "wo", "wgate", "wup", "wd", "wn1", "wn2"};

static double **wslot(ref_llama_weights *w, int i) {
  double **s[7] = {&w->wqkv, &w->wo, &w->wgate, &w->wup, &w->wd, &w->wn1, &w->wn2};
  return s[i];
}

static void block_sizes(const coda_llama_config *c, int64_t *n) {
  int64_t D = c->dim, F = c->ffn_dim, hd = c->head_dim;
  n[0] = (c->n_heads + 2 * c->n_kv_heads) * hd * D;
  n[1] = D * c->n_heads * hd;
  n[2] = n[3] = F * D;
  n[4] = D * F;
  n[5] = n[6] = D;
}

static void block_alloc(const coda_llama_config *c, blockw *b, int random) {
  block_sizes(c, b->n);
  double scale[7] = {1.0 / sqrt((double)c->dim), 1.0 / sqrt((double)(c->n_heads * c->head_dim)),
                     1.0 / sqrt((double)c->dim), 1.0 / sqrt((double)c->dim),
                     1.0 / sqrt((double)c->ffn_dim), 0.2, 0.2};
  for (int i = 0; i < 7; i++) {
    *wslot(&b->w, i) = random ? lt_vec(b->n[i], scale[i]) : lt_zeros(b->n[i]);
    if (random && i >= 5)
      for (int64_t k = 0; k < b->n[i]; k++) (*wslot(&b->w, i))[k] += 1.0;
  }
}

static void block_free(blockw *b) {
  for (int i = 0; i < 7; i++) free(*wslot(&b->w, i));
}

static void round_all(double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) v[i] = coda_round_to(CODA_BF16, v[i]);
}

/* Writes reference-layout weights into a block plan (plan layout). */
static int load_block(coda_plan p, const coda_llama_config *c, const blockw *b) {
  int64_t D = c->dim, F = c->ffn_dim, nqkv = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
  coda_tensor t;
  int ok = 1;
  ok &= coda_plan_tensor(p, "wqkv", &t) == CODA_OK;
  if (ok)
    for (int64_t r = 0; r < nqkv; r++)
      for (int64_t k = 0; k < D; k++)
        coda_store(&t, coda_llama_qkv_row(c, r), k, b->w.wqkv[r * D + k]);
  ok &= coda_plan_tensor(p, "wgu", &t) == CODA_OK;
  if (ok)
    for (int64_t f = 0; f < F; f++)
      for (int64_t k = 0; k < D; k++) {
        coda_store(&t, 2 * f, k, b->w.wgate[f * D + k]);
        coda_store(&t, 2 * f + 1, k, b->w.wup[f * D + k]);
      }
  const char *direct[4] = {"wo", "wd", "wn1", "wn2"};
  const double *src[4] = {b->w.wo, b->w.wd, b->w.wn1, b->w.wn2};
  for (int i = 0; i < 4 && ok; i++) {
    ok &= coda_plan_tensor(p, direct[i], &t) == CODA_OK;
    if (ok) lt_write(&t, src[i]);
  }
  return ok;
}

/* Reads a block plan's gradients into reference layout. */
static int read_grads(coda_plan p, const coda_llama_config *c, blockw *g) {
  int64_t D = c->dim, F = c->ffn_dim, nqkv = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
  coda_tensor t;
  int ok = coda_plan_tensor(p, "dwqkv", &t) == CODA_OK;
  if (ok)
    for (int64_t r = 0; r < nqkv; r++)
      for (int64_t k = 0; k < D; k++)
        g->w.wqkv[r * D + k] = coda_load(&t, coda_llama_qkv_row(c, r), k);
  ok &= coda_plan_tensor(p, "dwgu", &t) == CODA_OK;
  if (ok)
    for (int64_t f = 0; f < F; f++)
      for (int64_t k = 0; k < D; k++) {
        g->w.wgate[f * D + k] = coda_load(&t, 2 * f, k);
        g->w.wup[f * D + k] = coda_load(&t, 2 * f + 1, k);
      }
  const char *direct[4] = {"dwo", "dwd", "dwn1", "dwn2"};
  double *dst[4] = {g->w.wo, g->w.wd, g->w.wn1, g->w.wn2};
  for (int i = 0; i < 4 && ok; i++) {
    ok &= coda_plan_tensor(p, direct[i], &t) == CODA_OK;
    if (ok) lt_read(&t, dst[i]);
  }
  return ok;
}

static int set_tensor(coda_plan p, const char *name, const double *v) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return 0;
  lt_write(&t, v);
  return 1;
}
static int get_tensor(coda_plan p, const char *name, double *v) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return 0;
  lt_read(&t, v);
  return 1;
}

/* Runs the block plan forward and backward; outputs into xo, dx, g. */
static int run_block_plan(coda_context ctx, const coda_llama_config *c, const blockw *b,
                          const double *x, const double *dxo, double *xo, double *dx,
                          blockw *g) {
  coda_plan p = NULL;
  if (coda_llama_block_plan(ctx, c, &p) != CODA_OK) {
    fprintf(stderr, "block plan: %s\n", coda_last_error(ctx));
    return 0;
  }
  int ok = load_block(p, c, b) && set_tensor(p, "x", x) && set_tensor(p, "dx_out", dxo);
  if (ok && coda_plan_run(ctx, p, CODA_PHASE_FORWARD) != CODA_OK) ok = 0;
  if (ok && coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) != CODA_OK) ok = 0;
  if (!ok) fprintf(stderr, "block plan run: %s\n", coda_last_error(ctx));
  ok = ok && get_tensor(p, "x_out", xo) && get_tensor(p, "dx", dx) && read_grads(p, c, g);
  coda_plan_destroy(p);
  return ok;
}

static coda_llama_config small_config(coda_dtype dt) {
  static const pt_shape s = {.dim = 64, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .ffn_dim = 128,
                             .vocab = 96, .batch = 2, .seq = 16};
  return pt_llama_config(&s, dt, (coda_tiling){16, 32}); /* several tiles in both directions */
}

/* ------------------------------------------------------------ block tests */

static void test_block_exact(coda_llama_config c) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  int64_t M = c.batch * c.seq, D = c.dim;
  blockw b, gr, gp;
  block_alloc(&c, &b, 1);
  block_alloc(&c, &gr, 0);
  block_alloc(&c, &gp, 0);
  double *x = lt_vec(M * D, 1), *dxo = lt_vec(M * D, 1);
  double *xo_r = lt_zeros(M * D), *dx_r = lt_zeros(M * D), *xo_p = lt_zeros(M * D),
         *dx_p = lt_zeros(M * D);
  CHECK(ref_llama_block(&c, CODA_F64, &b.w, x, xo_r, dxo, dx_r, &gr.w) == 0);
  CHECK(run_block_plan(ctx, &c, &b, x, dxo, xo_p, dx_p, &gp));
  double e = lt_relerr(xo_p, xo_r, M * D);
  CHECK_MSG(e <= 1e-10, "block x_out: %.3g", e);
  e = lt_relerr(dx_p, dx_r, M * D);
  CHECK_MSG(e <= 1e-10, "block dx: %.3g", e);
  for (int i = 0; i < 7; i++) {
    e = lt_relerr(*wslot(&gp.w, i), *wslot(&gr.w, i), gr.n[i]);
    CHECK_MSG(e <= 1e-10, "block d%s: %.3g", wnames[i], e);
  }
  block_free(&b); block_free(&gr); block_free(&gp);
  free(x); free(dxo); free(xo_r); free(dx_r); free(xo_p); free(dx_p);
  coda_context_destroy(ctx);
}

/* CODA_LLAMA_INFER: the forward-only plan. Exact mode: x_out against the
 * reference forward to 1e-10. bf16: x_out and qkv bit-identical to the
 * training plan's forward on the same inputs (the stored values are
 * computed the same way; llama_swiglu_infer leaves out only the store of
 * z). Either way: no backward step, no buffer only a backward uses (z,
 * dx_out, dx, the weight gradients), nothing saved, qkv an output; the
 * backward flags and the head refuse the flag. */
static void test_block_infer(coda_dtype dt, unsigned flags) {
  coda_llama_config c = small_config(dt);
  c.flags = flags | CODA_LLAMA_INFER;
  coda_context ctx = lt_context(dt == CODA_F64 ? CODA_PRECISION_F64 : CODA_PRECISION_F32);
  const int64_t M = c.batch * c.seq, D = c.dim;
  const int64_t nqkv = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  blockw b;
  block_alloc(&c, &b, 1);
  double *x = lt_vec(M * D, 1), *xo = lt_zeros(M * D), *xo_t = lt_zeros(M * D);
  double *qkv = lt_zeros(M * nqkv), *qkv_t = lt_zeros(M * nqkv);
  if (dt != CODA_F64) {
    round_all(x, M * D);
    for (int i = 0; i < 7; i++) round_all(*wslot(&b.w, i), b.n[i]);
  }
  coda_plan p = NULL;
  CHECK_STATUS(ctx, coda_llama_block_plan(ctx, &c, &p), CODA_OK);
  if (p) {
    int ok = load_block(p, &c, &b) && set_tensor(p, "x", x);
    CHECK_STATUS(ctx, coda_plan_run(ctx, p, CODA_PHASE_FORWARD), CODA_OK);
    ok = ok && get_tensor(p, "x_out", xo) && get_tensor(p, "qkv", qkv);
    CHECK(ok);
    for (int i = 0; i < coda_plan_num_steps(p); i++) {
      coda_plan_step_info si;
      CHECK(coda_plan_step(p, i, &si) == CODA_OK);
      CHECK_MSG(si.phase == CODA_PHASE_FORWARD, "inference plan step %s is not forward", si.label);
      CHECK_MSG(!si.program || strcmp(si.program, "llama_swiglu") != 0, "step %s runs %s",
                si.label, si.program);
    }
    const char *gone[] = {"z", "dx_out", "dx", "dwqkv", "dwgu", "dwn1", "dz"};
    coda_tensor t;
    for (int i = 0; i < 7; i++)
      CHECK_MSG(coda_plan_tensor(p, gone[i], &t) == CODA_ERR_INVALID_ARGUMENT,
                "the inference plan has a buffer '%s'", gone[i]);
    const char *text = coda_plan_text(p);
    if (!text) text = "";
    CHECK_MSG(!strstr(text, " saved "), "an inference plan saves a buffer:\n%s", text);
    CHECK(strstr(text, "qkv          output") != NULL);
    /* the backward phase is empty: running it does nothing */
    CHECK_STATUS(ctx, coda_plan_run(ctx, p, CODA_PHASE_BACKWARD), CODA_OK);
  }
  coda_plan_destroy(p);
  if (dt == CODA_F64) {
    CHECK(ref_llama_block(&c, CODA_F64, &b.w, x, xo_t, NULL, NULL, NULL) == 0);
    double e = lt_relerr(xo, xo_t, M * D);
    CHECK_MSG(e <= 1e-10, "inference block x_out (flags 0x%x): %.3g", flags, e);
  } else {
    coda_llama_config tc = c;
    tc.flags = flags;
    coda_plan q = NULL;
    CHECK_STATUS(ctx, coda_llama_block_plan(ctx, &tc, &q), CODA_OK);
    if (q) {
      int ok = load_block(q, &tc, &b) && set_tensor(q, "x", x);
      CHECK_STATUS(ctx, coda_plan_run(ctx, q, CODA_PHASE_FORWARD), CODA_OK);
      ok = ok && get_tensor(q, "x_out", xo_t) && get_tensor(q, "qkv", qkv_t);
      CHECK(ok);
      CHECK_MSG(!memcmp(xo, xo_t, (size_t)(M * D) * sizeof *xo),
                "inference x_out differs from the training forward's (flags 0x%x)", flags);
      CHECK_MSG(!memcmp(qkv, qkv_t, (size_t)(M * nqkv) * sizeof *qkv),
                "inference qkv differs from the training forward's (flags 0x%x)", flags);
    }
    coda_plan_destroy(q);
  }
  /* refusals */
  const unsigned bad[4] = {CODA_LLAMA_GRAD_ACT, CODA_LLAMA_INPLACE, CODA_LLAMA_ROPE_MAP,
                           CODA_LLAMA_KEEP_LOGITS};
  for (int i = 0; i < 4; i++) {
    coda_llama_config bc = c;
    bc.flags = CODA_LLAMA_INFER | bad[i];
    coda_plan bp = (coda_plan)1;
    CHECK_EQ_INT(coda_llama_block_plan(ctx, &bc, &bp), CODA_ERR_INVALID_ARGUMENT);
    CHECK(bp == NULL);
    CHECK_MSG(strstr(coda_last_error(ctx), "forward-only") != NULL, "%s", coda_last_error(ctx));
  }
  coda_llama_config hc = c;
  hc.flags = CODA_LLAMA_INFER;
  coda_plan hp = NULL;
  CHECK_EQ_INT(coda_llama_head_plan(ctx, &hc, &hp), CODA_ERR_INVALID_ARGUMENT);
  CHECK(hp == NULL);
  block_free(&b);
  free(x); free(xo); free(xo_t); free(qkv); free(qkv_t);
  coda_context_destroy(ctx);
}

static double block_loss(const coda_llama_config *c, const blockw *b, const double *x,
                         const double *dxo, double *xo) {
  int64_t n = c->batch * c->seq * c->dim;
  if (ref_llama_block(c, CODA_F64, &b->w, x, xo, NULL, NULL, NULL) != 0) return NAN;
  double L = 0;
  for (int64_t i = 0; i < n; i++) L += dxo[i] * xo[i];
  return L;
}

/* |fd - g| / max|G|: relative to the size of the whole gradient tensor
 * G, the measure used for every comparison here (a coordinate near zero
 * would otherwise measure the finite difference's own round-off). */
static void fd_check(const char *what, double *theta, double g, double gmax,
                     double (*f)(void *), void *arg) {
  const double h = 1e-6;
  double t0 = *theta;
  *theta = t0 + h;
  double lp = f(arg);
  *theta = t0 - h;
  double lm = f(arg);
  *theta = t0;
  double fd = (lp - lm) / (2 * h);
  double e = fabs(fd - g) / gmax;
  if (getenv("CODA_TEST_VERBOSE")) printf("  fd %-18s rel %.3g\n", what, e);
  CHECK_MSG(e <= 1e-6, "%s: finite difference %.10g vs gradient %.10g (rel %.3g)", what, fd, g, e);
}

typedef struct bargs {
  const coda_llama_config *c;
  blockw *b;
  double *x, *dxo, *xo;
} bargs;
static double bfun(void *a) {
  bargs *s = a;
  return block_loss(s->c, s->b, s->x, s->dxo, s->xo);
}

static void test_block_fd(void) {
  coda_llama_config c = small_config(CODA_F64);
  c.batch = 1;
  c.seq = 8; /* the loss is evaluated many times */
  int64_t M = c.batch * c.seq, D = c.dim;
  blockw b, g;
  block_alloc(&c, &b, 1);
  block_alloc(&c, &g, 0);
  double *x = lt_vec(M * D, 1), *dxo = lt_vec(M * D, 1), *xo = lt_zeros(M * D),
         *dx = lt_zeros(M * D);
  CHECK(ref_llama_block(&c, CODA_F64, &b.w, x, xo, dxo, dx, &g.w) == 0);
  bargs a = {&c, &b, x, dxo, xo};
  char what[64];
  for (int i = 0; i < 7; i++) {
    double *th = *wslot(&b.w, i), *gg = *wslot(&g.w, i);
    double gmax = lt_maxabs(gg, g.n[i]);
    for (int k = 0; k < 3; k++) {
      int64_t idx = (int64_t)((lt_rand() + 1.0) * 0.5 * (double)g.n[i]) % g.n[i];
      snprintf(what, sizeof what, "d%s[%lld]", wnames[i], (long long)idx);
      fd_check(what, &th[idx], gg[idx], gmax, bfun, &a);
    }
  }
  double gmax = lt_maxabs(dx, M * D);
  for (int k = 0; k < 4; k++) {
    int64_t idx = (int64_t)((lt_rand() + 1.0) * 0.5 * (double)(M * D)) % (M * D);
    snprintf(what, sizeof what, "dx[%lld]", (long long)idx);
    fd_check(what, &x[idx], dx[idx], gmax, bfun, &a);
  }
  block_free(&b); block_free(&g);
  free(x); free(dxo); free(xo); free(dx);
}

/* max|plan - truth| <= 2 max|lowp - truth| + 1e-6 max|truth|
 *                      (+ round * max|plan|: a rounding the plan adds) */
static void lowp_rule_r(const char *what, const double *plan, const double *lowp,
                        const double *truth, int64_t n, double round) {
  double ep = lt_maxabs_diff(plan, truth, n), el = lt_maxabs_diff(lowp, truth, n);
  double bound = 2 * el + 1e-6 * lt_maxabs(truth, n) + round * lt_maxabs(plan, n);
  CHECK_MSG(ep <= bound, "%s: bf16 plan error %.3g > bound %.3g (ordinary bf16 block %.3g)",
            what, ep, bound, el);
  if (getenv("CODA_TEST_VERBOSE"))
    printf("  %-10s plan %.3g  ordinary bf16 %.3g\n", what, ep, el);
}
static void lowp_rule(const char *what, const double *plan, const double *lowp,
                      const double *truth, int64_t n) {
  lowp_rule_r(what, plan, lowp, truth, n, 0.0);
}
/* one bf16 rounding (2^-8, 1 % slack) of the GEMM weights' gradients */
static double grad_round(unsigned flags) {
  return (flags & CODA_LLAMA_GRAD_ACT) ? 1.01 * 0x1p-8 : 0.0;
}

static void test_block_bf16(unsigned flags) {
  coda_context ctx = lt_context(CODA_PRECISION_F32);
  coda_llama_config c = small_config(CODA_BF16);
  c.flags = flags;
  int64_t M = c.batch * c.seq, D = c.dim;
  blockw b, gt, gl, gp;
  block_alloc(&c, &b, 1);
  block_alloc(&c, &gt, 0);
  block_alloc(&c, &gl, 0);
  block_alloc(&c, &gp, 0);
  for (int i = 0; i < 7; i++) round_all(*wslot(&b.w, i), b.n[i]);
  double *x = lt_vec(M * D, 1), *dxo = lt_vec(M * D, 1);
  round_all(x, M * D);
  round_all(dxo, M * D);
  double *xo_t = lt_zeros(M * D), *dx_t = lt_zeros(M * D), *xo_l = lt_zeros(M * D),
         *dx_l = lt_zeros(M * D), *xo_p = lt_zeros(M * D), *dx_p = lt_zeros(M * D);
  CHECK(ref_llama_block(&c, CODA_F64, &b.w, x, xo_t, dxo, dx_t, &gt.w) == 0);
  CHECK(ref_llama_block(&c, CODA_BF16, &b.w, x, xo_l, dxo, dx_l, &gl.w) == 0);
  CHECK(run_block_plan(ctx, &c, &b, x, dxo, xo_p, dx_p, &gp));
  lowp_rule("x_out", xo_p, xo_l, xo_t, M * D);
  lowp_rule("dx", dx_p, dx_l, dx_t, M * D);
  char what[32];
  for (int i = 0; i < 7; i++) { /* 0-4: GEMM weights, 5-6: norm weights */
    snprintf(what, sizeof what, "d%s", wnames[i]);
    lowp_rule_r(what, *wslot(&gp.w, i), *wslot(&gl.w, i), *wslot(&gt.w, i), gt.n[i],
                i < 5 ? grad_round(flags) : 0.0);
  }
  block_free(&b); block_free(&gt); block_free(&gl); block_free(&gp);
  free(x); free(dxo); free(xo_t); free(dx_t); free(xo_l); free(dx_l); free(xo_p); free(dx_p);
  coda_context_destroy(ctx);
}

/* ------------------------------------------------------------- head tests */

typedef struct headd {
  double *wnf, *wout, *x;
  int32_t *tgt;
} headd;

static void head_data(const coda_llama_config *c, headd *h) {
  int64_t M = c->batch * c->seq, D = c->dim, V = c->vocab;
  h->wnf = lt_vec(D, 0.2);
  for (int64_t k = 0; k < D; k++) h->wnf[k] += 1.0;
  h->wout = lt_vec(V * D, 1.5 / sqrt((double)D));
  h->x = lt_vec(M * D, 1);
  h->tgt = malloc(sizeof(int32_t) * (size_t)M);
  for (int64_t m = 0; m < M; m++) {
    int64_t v = (int64_t)((lt_rand() + 1.0) * 0.5 * (double)V) % V;
    h->tgt[m] = m % 5 == 2 ? -100 : (int32_t)v; /* some ignored rows */
  }
}
static void head_free(headd *h) {
  free(h->wnf); free(h->wout); free(h->x); free(h->tgt);
}

/* row_loss (may be NULL): valid * (lse - pick) per row, from the plan's
 * saved buffers. */
static int run_head_plan(coda_context ctx, const coda_llama_config *c, const headd *h,
                         double *loss, double *row_loss, double *dx, double *dwnf,
                         double *dwout) {
  coda_plan p = NULL;
  if (coda_llama_head_plan(ctx, c, &p) != CODA_OK) {
    fprintf(stderr, "head plan: %s\n", coda_last_error(ctx));
    return 0;
  }
  int64_t M = c->batch * c->seq;
  int ok = set_tensor(p, "wnf", h->wnf) && set_tensor(p, "wout", h->wout) &&
           set_tensor(p, "x", h->x);
  coda_tensor t;
  ok = ok && coda_plan_tensor(p, "targets", &t) == CODA_OK;
  if (ok)
    for (int64_t m = 0; m < M; m++) ((int32_t *)t.data)[m * t.ld] = h->tgt[m];
  if (ok && coda_plan_run(ctx, p, CODA_PHASE_FORWARD) != CODA_OK) ok = 0;
  if (ok && coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) != CODA_OK) ok = 0;
  if (!ok) fprintf(stderr, "head plan run: %s\n", coda_last_error(ctx));
  ok = ok && get_tensor(p, "loss", loss) && get_tensor(p, "dx", dx) &&
       get_tensor(p, "dwnf", dwnf) && get_tensor(p, "dwout", dwout);
  if (ok && row_loss) {
    double *lse = lt_zeros(M), *pick = lt_zeros(M), *valid = lt_zeros(M);
    ok = get_tensor(p, "lse", lse) && get_tensor(p, "pick", pick) && get_tensor(p, "valid", valid);
    for (int64_t m = 0; m < M; m++) row_loss[m] = valid[m] * (lse[m] - pick[m]);
    free(lse); free(pick); free(valid);
  }
  coda_plan_destroy(p);
  return ok;
}

static void test_head_exact(coda_llama_config c) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  headd h;
  head_data(&c, &h);
  double lr, lp, *dx_r = lt_zeros(M * D), *dwnf_r = lt_zeros(D), *dwo_r = lt_zeros(V * D);
  double *dx_p = lt_zeros(M * D), *dwnf_p = lt_zeros(D), *dwo_p = lt_zeros(V * D);
  CHECK(ref_llama_head(&c, CODA_F64, h.wnf, h.wout, h.x, h.tgt, &lr, NULL, dx_r, dwnf_r, dwo_r) == 0);
  CHECK(run_head_plan(ctx, &c, &h, &lp, NULL, dx_p, dwnf_p, dwo_p));
  CHECK_MSG(fabs(lp - lr) <= 1e-10 * fabs(lr), "head loss %.17g vs %.17g", lp, lr);
  double e = lt_relerr(dx_p, dx_r, M * D);
  CHECK_MSG(e <= 1e-10, "head dx: %.3g", e);
  e = lt_relerr(dwnf_p, dwnf_r, D);
  CHECK_MSG(e <= 1e-10, "head dwnf: %.3g", e);
  e = lt_relerr(dwo_p, dwo_r, V * D);
  CHECK_MSG(e <= 1e-10, "head dwout: %.3g", e);
  head_free(&h);
  free(dx_r); free(dwnf_r); free(dwo_r); free(dx_p); free(dwnf_p); free(dwo_p);
  coda_context_destroy(ctx);
}

typedef struct hargs {
  const coda_llama_config *c;
  headd *h;
} hargs;
static double hfun(void *a) {
  hargs *s = a;
  double L = NAN;
  ref_llama_head(s->c, CODA_F64, s->h->wnf, s->h->wout, s->h->x, s->h->tgt, &L, NULL, NULL, NULL,
                 NULL);
  return L;
}

static void test_head_fd(void) {
  coda_llama_config c = small_config(CODA_F64);
  int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  headd h;
  head_data(&c, &h);
  double L, *dx = lt_zeros(M * D), *dwnf = lt_zeros(D), *dwo = lt_zeros(V * D);
  CHECK(ref_llama_head(&c, CODA_F64, h.wnf, h.wout, h.x, h.tgt, &L, NULL, dx, dwnf, dwo) == 0);
  hargs a = {&c, &h};
  double *th[3] = {h.x, h.wnf, h.wout}, *gg[3] = {dx, dwnf, dwo};
  int64_t n[3] = {M * D, D, V * D};
  const char *nm[3] = {"head dx", "head dwnf", "head dwout"};
  char what[64];
  for (int i = 0; i < 3; i++) {
    double gmax = lt_maxabs(gg[i], n[i]);
    for (int k = 0; k < 4; k++) {
      int64_t idx = (int64_t)((lt_rand() + 1.0) * 0.5 * (double)n[i]) % n[i];
      snprintf(what, sizeof what, "%s[%lld]", nm[i], (long long)idx);
      fd_check(what, &th[i][idx], gg[i][idx], gmax, hfun, &a);
    }
  }
  head_free(&h);
  free(dx); free(dwnf); free(dwo);
}

static void test_head_bf16(unsigned flags) {
  coda_context ctx = lt_context(CODA_PRECISION_F32);
  coda_llama_config c = small_config(CODA_BF16);
  c.flags = flags;
  int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  headd h;
  head_data(&c, &h);
  round_all(h.wnf, D);
  round_all(h.wout, V * D);
  round_all(h.x, M * D);
  double lt, ll, lp, *rl_t = lt_zeros(M), *rl_l = lt_zeros(M), *rl_p = lt_zeros(M);
  double *dx_t = lt_zeros(M * D), *dwnf_t = lt_zeros(D), *dwo_t = lt_zeros(V * D);
  double *dx_l = lt_zeros(M * D), *dwnf_l = lt_zeros(D), *dwo_l = lt_zeros(V * D);
  double *dx_p = lt_zeros(M * D), *dwnf_p = lt_zeros(D), *dwo_p = lt_zeros(V * D);
  CHECK(ref_llama_head(&c, CODA_F64, h.wnf, h.wout, h.x, h.tgt, &lt, rl_t, dx_t, dwnf_t, dwo_t) == 0);
  CHECK(ref_llama_head(&c, CODA_BF16, h.wnf, h.wout, h.x, h.tgt, &ll, rl_l, dx_l, dwnf_l, dwo_l) == 0);
  CHECK(run_head_plan(ctx, &c, &h, &lp, rl_p, dx_p, dwnf_p, dwo_p));
  /* per-row losses by the rule; the mean loss is bounded by the row errors */
  lowp_rule("row loss", rl_p, rl_l, rl_t, M);
  double el = lt_maxabs_diff(rl_l, rl_t, M);
  CHECK_MSG(fabs(lp - lt) <= 2 * el + 1e-6 * fabs(lt), "loss: plan error %.3g > 2 x %.3g",
            fabs(lp - lt), el);
  (void)ll;
  lowp_rule("head dx", dx_p, dx_l, dx_t, M * D);
  lowp_rule("head dwnf", dwnf_p, dwnf_l, dwnf_t, D);
  lowp_rule_r("head dwout", dwo_p, dwo_l, dwo_t, V * D, grad_round(flags));
  head_free(&h);
  free(dx_t); free(dwnf_t); free(dwo_t); free(dx_l); free(dwnf_l); free(dwo_l);
  free(dx_p); free(dwnf_p); free(dwo_p); free(rl_t); free(rl_l); free(rl_p);
  coda_context_destroy(ctx);
}

/* ------------------------------------------------------------ chain test */

/* Two chained blocks (each block's down GEMM produces the next RMSNorm's
 * input and statistics) and the head, linked with coda_llama_link, against
 * the unfused reference run block by block. exact: 1e-10; bf16: the rule. */
static void test_chain(int exact, unsigned fold) {
  coda_context ctx = lt_context(exact ? CODA_PRECISION_F64 : CODA_PRECISION_F32);
  coda_llama_config c = small_config(exact ? CODA_F64 : CODA_BF16);
  c.flags = fold;
  int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  blockw b[2], gt[2], gl[2], gp[2];
  headd h;
  for (int l = 0; l < 2; l++) {
    block_alloc(&c, &b[l], 1);
    block_alloc(&c, &gt[l], 0);
    block_alloc(&c, &gl[l], 0);
    block_alloc(&c, &gp[l], 0);
    if (!exact)
      for (int i = 0; i < 7; i++) round_all(*wslot(&b[l].w, i), b[l].n[i]);
  }
  head_data(&c, &h);
  if (!exact) {
    round_all(h.wnf, D);
    round_all(h.wout, V * D);
    round_all(h.x, M * D);
  }
  /* references: forward block by block, head, backward block by block */
  double *xs_t[3], *xs_l[3], *dx_t[3], *dx_l[3], *tmp = lt_zeros(M * D);
  for (int l = 0; l < 3; l++) {
    xs_t[l] = lt_zeros(M * D); xs_l[l] = lt_zeros(M * D);
    dx_t[l] = lt_zeros(M * D); dx_l[l] = lt_zeros(M * D);
  }
  memcpy(xs_t[0], h.x, sizeof(double) * (size_t)(M * D));
  memcpy(xs_l[0], h.x, sizeof(double) * (size_t)(M * D));
  double lt_, ll_, *nf_t = lt_zeros(D), *nf_l = lt_zeros(D), *wo_t = lt_zeros(V * D),
                   *wo_l = lt_zeros(V * D);
  for (int l = 0; l < 2; l++) {
    CHECK(ref_llama_block(&c, CODA_F64, &b[l].w, xs_t[l], xs_t[l + 1], NULL, NULL, NULL) == 0);
    CHECK(ref_llama_block(&c, CODA_BF16, &b[l].w, xs_l[l], xs_l[l + 1], NULL, NULL, NULL) == 0);
  }
  CHECK(ref_llama_head(&c, CODA_F64, h.wnf, h.wout, xs_t[2], h.tgt, &lt_, NULL, dx_t[2], nf_t,
                       wo_t) == 0);
  CHECK(ref_llama_head(&c, CODA_BF16, h.wnf, h.wout, xs_l[2], h.tgt, &ll_, NULL, dx_l[2], nf_l,
                       wo_l) == 0);
  for (int l = 1; l >= 0; l--) {
    CHECK(ref_llama_block(&c, CODA_F64, &b[l].w, xs_t[l], tmp, dx_t[l + 1], dx_t[l], &gt[l].w) == 0);
    CHECK(ref_llama_block(&c, CODA_BF16, &b[l].w, xs_l[l], tmp, dx_l[l + 1], dx_l[l], &gl[l].w) == 0);
  }
  /* the chained plans */
  coda_plan p[2] = {NULL, NULL}, hp = NULL;
  coda_llama_config c0 = c, c1 = c, chd = c;
  c0.flags = CODA_LLAMA_NORM_OUT | fold;
  c1.flags = CODA_LLAMA_NORM_IN | CODA_LLAMA_NORM_OUT | fold;
  chd.flags = CODA_LLAMA_NORM_IN | fold;
  int ok = coda_llama_block_plan(ctx, &c0, &p[0]) == CODA_OK &&
           coda_llama_block_plan(ctx, &c1, &p[1]) == CODA_OK &&
           coda_llama_head_plan(ctx, &chd, &hp) == CODA_OK;
  CHECK(ok);
  /* linking a NORM_IN plan after a block without NORM_OUT is refused */
  if (ok) {
    coda_plan lone = NULL;
    CHECK(coda_llama_block_plan(ctx, &c, &lone) == CODA_OK);
    CHECK(coda_llama_link(lone, p[1]) == CODA_ERR_INVALID_ARGUMENT);
    CHECK(coda_llama_link(hp, p[0]) == CODA_ERR_INVALID_ARGUMENT);
    coda_plan_destroy(lone);
    /* folded and unfolded plans hold different rstd buffers: not linkable */
    coda_llama_config other = c1;
    other.flags ^= CODA_LLAMA_FOLD;
    CHECK(coda_llama_block_plan(ctx, &other, &lone) == CODA_OK);
    CHECK(coda_llama_link(p[0], lone) == CODA_ERR_SHAPE);
    CHECK(strstr(coda_last_error(ctx), "CODA_LLAMA_FOLD") != NULL);
    coda_plan_destroy(lone);
  }
  ok = ok && load_block(p[0], &c, &b[0]) && load_block(p[1], &c, &b[1]) &&
       set_tensor(hp, "wnf", h.wnf) && set_tensor(hp, "wout", h.wout) &&
       set_tensor(p[0], "x", h.x);
  coda_tensor t;
  ok = ok && coda_plan_tensor(hp, "targets", &t) == CODA_OK;
  if (ok)
    for (int64_t m = 0; m < M; m++) ((int32_t *)t.data)[m * t.ld] = h.tgt[m];
  ok = ok && coda_llama_link(p[0], p[1]) == CODA_OK && coda_llama_link(p[1], hp) == CODA_OK;
  ok = ok && coda_plan_run(ctx, p[0], CODA_PHASE_FORWARD) == CODA_OK &&
       coda_plan_run(ctx, p[1], CODA_PHASE_FORWARD) == CODA_OK &&
       coda_plan_run(ctx, hp, CODA_PHASE_FORWARD) == CODA_OK &&
       coda_plan_run(ctx, hp, CODA_PHASE_BACKWARD) == CODA_OK &&
       coda_plan_run(ctx, p[1], CODA_PHASE_BACKWARD) == CODA_OK &&
       coda_plan_run(ctx, p[0], CODA_PHASE_BACKWARD) == CODA_OK;
  if (!ok) fprintf(stderr, "chain: %s\n", coda_last_error(ctx));
  CHECK(ok);
  double lp = 0, *x1 = lt_zeros(M * D), *x2 = lt_zeros(M * D), *dx0 = lt_zeros(M * D),
         *nf = lt_zeros(D), *wo = lt_zeros(V * D);
  ok = ok && get_tensor(p[0], "x_out", x1) && get_tensor(p[1], "x_out", x2) &&
       get_tensor(hp, "loss", &lp) && get_tensor(p[0], "dx", dx0) && get_tensor(hp, "dwnf", nf) &&
       get_tensor(hp, "dwout", wo) && read_grads(p[0], &c, &gp[0]) && read_grads(p[1], &c, &gp[1]);
  CHECK(ok);
  if (exact) {
    CHECK_MSG(lt_relerr(x1, xs_t[1], M * D) <= 1e-10, "chain x1 %.3g", lt_relerr(x1, xs_t[1], M * D));
    CHECK_MSG(lt_relerr(x2, xs_t[2], M * D) <= 1e-10, "chain x2 %.3g", lt_relerr(x2, xs_t[2], M * D));
    CHECK_MSG(fabs(lp - lt_) <= 1e-10 * fabs(lt_), "chain loss %.17g vs %.17g", lp, lt_);
    CHECK_MSG(lt_relerr(dx0, dx_t[0], M * D) <= 1e-10, "chain dx %.3g", lt_relerr(dx0, dx_t[0], M * D));
    CHECK_MSG(lt_relerr(nf, nf_t, D) <= 1e-10, "chain dwnf %.3g", lt_relerr(nf, nf_t, D));
    CHECK_MSG(lt_relerr(wo, wo_t, V * D) <= 1e-10, "chain dwout %.3g", lt_relerr(wo, wo_t, V * D));
    for (int l = 0; l < 2; l++)
      for (int i = 0; i < 7; i++) {
        double e = lt_relerr(*wslot(&gp[l].w, i), *wslot(&gt[l].w, i), gt[l].n[i]);
        CHECK_MSG(e <= 1e-10, "chain block %d d%s: %.3g", l, wnames[i], e);
      }
  } else {
    lowp_rule("chain x1", x1, xs_l[1], xs_t[1], M * D);
    lowp_rule("chain x2", x2, xs_l[2], xs_t[2], M * D);
    lowp_rule("chain dx", dx0, dx_l[0], dx_t[0], M * D);
    lowp_rule("chain dwnf", nf, nf_l, nf_t, D);
    lowp_rule("chain dwout", wo, wo_l, wo_t, V * D);
    char what[40];
    for (int l = 0; l < 2; l++)
      for (int i = 0; i < 7; i++) {
        snprintf(what, sizeof what, "chain %d d%s", l, wnames[i]);
        lowp_rule(what, *wslot(&gp[l].w, i), *wslot(&gl[l].w, i), *wslot(&gt[l].w, i), gt[l].n[i]);
      }
  }
  coda_plan_destroy(p[0]);
  coda_plan_destroy(p[1]);
  coda_plan_destroy(hp);
  for (int l = 0; l < 2; l++) {
    block_free(&b[l]); block_free(&gt[l]); block_free(&gl[l]); block_free(&gp[l]);
  }
  for (int l = 0; l < 3; l++) {
    free(xs_t[l]); free(xs_l[l]); free(dx_t[l]); free(dx_l[l]);
  }
  head_free(&h);
  free(tmp); free(nf_t); free(nf_l); free(wo_t); free(wo_l); free(x1); free(x2); free(dx0);
  free(nf); free(wo);
  coda_context_destroy(ctx);
}

int main(void) {
  lt_seed(getenv("CODA_TEST_SEED") ? (uint64_t)atoll(getenv("CODA_TEST_SEED")) : 424242);
  /* the small configuration, then ragged sizes (no dimension a multiple
   * of its tile, MQA 3/1 heads) under several tilings */
  coda_llama_config c = small_config(CODA_F64);
  test_block_exact(c);
  test_head_exact(c);
  static const pt_shape ragged = {.dim = 40, .n_heads = 3, .n_kv_heads = 1, .head_dim = 14,
                                   .ffn_dim = 52, .vocab = 37, .batch = 3, .seq = 7};
  coda_llama_config r = pt_llama_config(&ragged, CODA_F64, c.tiling);
  const coda_tiling tilings[3] = {{8, 8}, {24, 16}, {64, 128}};
  for (int i = 0; i < 3; i++) {
    r.tiling = tilings[i];
    test_block_exact(r);
    test_head_exact(r);
  }
  test_block_fd();
  test_block_infer(CODA_F64, 0);
  test_block_infer(CODA_F64, CODA_LLAMA_FOLD);
  test_block_infer(CODA_BF16, 0);
  test_block_infer(CODA_BF16, CODA_LLAMA_FOLD);
  test_block_infer(CODA_BF16, CODA_LLAMA_NORM_OUT);
  test_block_bf16(0);
  test_head_fd();
  test_head_bf16(0);
  test_chain(1, 0);
  test_chain(0, 0);
  /* folded: the small configuration and one ragged tiling */
  c.flags = CODA_LLAMA_FOLD;
  test_block_exact(c);
  test_head_exact(c);
  r.flags = CODA_LLAMA_FOLD;
  r.tiling = tilings[1];
  test_block_exact(r);
  test_head_exact(r);
  test_block_bf16(CODA_LLAMA_FOLD);
  test_head_bf16(CODA_LLAMA_FOLD);
  test_chain(1, CODA_LLAMA_FOLD);
  test_chain(0, CODA_LLAMA_FOLD);
  /* bf16 weight gradients (alone and folded); exact mode: no change */
  test_block_bf16(CODA_LLAMA_GRAD_ACT);
  test_head_bf16(CODA_LLAMA_GRAD_ACT);
  test_block_bf16(CODA_LLAMA_GRAD_ACT | CODA_LLAMA_FOLD);
  c.flags = CODA_LLAMA_GRAD_ACT;
  test_block_exact(c);
  test_head_exact(c);
  /* the RoPE backward as its own map pass instead of fused into the
   * attention backward (alone, ragged, folded, bf16) */
  c.flags = CODA_LLAMA_ROPE_MAP;
  test_block_exact(c);
  r.flags = CODA_LLAMA_ROPE_MAP;
  test_block_exact(r);
  c.flags = CODA_LLAMA_ROPE_MAP | CODA_LLAMA_FOLD;
  test_block_exact(c);
  test_block_bf16(CODA_LLAMA_ROPE_MAP);
  /* an RMSNorm eps other than 1e-5 (bound to the programs' parameter eps) and RoPE
   * scaling (the frequency table) against the reference, which computes
   * both its own way; fused and folded, fused and map RoPE backward */
  const coda_rope_scaling llama3 = {CODA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 128.0};
  const coda_rope_scaling linear = {CODA_ROPE_LINEAR, 4.0, 0, 0, 0};
  c.norm_eps = 0.05;
  c.rope = llama3;
  for (unsigned f = 0; f < 3; f++) {
    c.flags = f == 0 ? 0u : f == 1 ? CODA_LLAMA_FOLD : CODA_LLAMA_ROPE_MAP;
    test_block_exact(c);
    test_head_exact(c);
  }
  r.norm_eps = 1e-6;
  r.rope = linear;
  r.flags = CODA_LLAMA_FOLD;
  test_block_exact(r);
  test_head_exact(r);
  /* the head keeping its logits (the backward a map over them): exact,
   * folded, ragged, another eps; bf16 by the rule; chained */
  c = small_config(CODA_F64);
  c.flags = CODA_LLAMA_KEEP_LOGITS;
  test_head_exact(c);
  c.flags = CODA_LLAMA_KEEP_LOGITS | CODA_LLAMA_FOLD;
  test_head_exact(c);
  c.norm_eps = 0.05;
  test_head_exact(c);
  r.flags = CODA_LLAMA_KEEP_LOGITS;
  test_head_exact(r);
  test_head_bf16(CODA_LLAMA_KEEP_LOGITS);
  test_head_bf16(CODA_LLAMA_KEEP_LOGITS | CODA_LLAMA_FOLD);
  test_chain(1, CODA_LLAMA_KEEP_LOGITS);
  test_chain(0, CODA_LLAMA_KEEP_LOGITS | CODA_LLAMA_FOLD);
  return CHECK_DONE();
}
