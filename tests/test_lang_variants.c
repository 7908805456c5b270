/* The variants of the built-ins as passes (docs/language.md, "Variants as
 * passes"):
 *  - each _folded / _keep / _infer built-in, derived from its source, runs
 *    in the fp64 interpreter to the results of its source composed with the
 *    rule by hand: a folded input computed here from the partials (r =
 *    1/sqrt(sum(ss) inv_n + eps); mu, rs of LayerNorm; a row dot as the sum
 *    of its partials), the dropped outputs absent, a kept value equal to
 *    its formula (the logits acc r) computed here;
 *  - each is listed once among the built-ins and looked up by its name;
 *  - the passes' refusals, with their messages, and their results;
 *  - coda_program_variant with a user's rule gives the built-in variant;
 *    its refusals. */
#include "check.h"
#include "coda.h"
#include "lang/ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kVariantNames[] = {
  "gpt2_ln_bwd_folded", "gpt2_ln_linear_folded", "gpt2_ln_linear_gelu_folded", "llama_ce_bwd_folded",
  "llama_head_norm_bwd_folded", "llama_lm_head_folded", "llama_lm_head_folded_keep", "llama_lm_head_keep",
  "llama_norm_bwd_folded", "llama_qkv_rope_folded", "llama_swiglu_folded", "llama_swiglu_folded_infer",
  "llama_swiglu_infer",
};


/* ---------------------------------------------------------------- fp64 runs */

enum { M = 16, N = 24, K = 5, T = 3, MAXB = 40 };
static const double kEps = 1e-5;

typedef struct buf {
  char name[32];
  double *d;          /* F64 data, or NULL */
  int32_t *i;         /* I32 data, or NULL */
  int64_t rows, cols;
} buf;

typedef struct bufs { int n; buf b[MAXB]; } bufs;

static buf *find(bufs *s, const char *name) {
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->b[k].name, name)) return &s->b[k];
  return NULL;
}

static buf *add(bufs *s, const char *name, int64_t rows, int64_t cols, int is_int) {
  buf *b = &s->b[s->n++];
  snprintf(b->name, sizeof b->name, "%s", name);
  b->rows = rows;
  b->cols = cols;
  b->d = is_int ? NULL : calloc((size_t)(rows * cols), sizeof(double));
  b->i = is_int ? calloc((size_t)(rows * cols), sizeof(int32_t)) : NULL;
  return b;
}

static void free_bufs(bufs *s) {
  for (int k = 0; k < s->n; k++) { free(s->b[k].d); free(s->b[k].i); }
  s->n = 0;
}

static uint64_t rng = 12345;
static double uniform(double lo, double hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

/* An input of the derived program, drawn at random (partials positive and
 * large enough for a positive variance, indices in range and beyond). */
static void draw(buf *b) {
  const int64_t n = b->rows * b->cols;
  for (int64_t k = 0; k < n; k++) {
    if (b->i) {
      b->i[k] = (int32_t)uniform(-2, N + 2);
      continue;
    }
    double v = uniform(-1, 1);
    if (!strcmp(b->name, "ss") || !strcmp(b->name, "psq")) v = uniform(0.5, 1.5);
    else if (!strcmp(b->name, "psum")) v = uniform(-0.3, 0.3);
    else if (!strcmp(b->name, "inv_n") || !strcmp(b->name, "invd")) v = 0.25;
    else if (!strcmp(b->name, "cnt")) v = 5;
    else if (!strcmp(b->name, "valid")) v = k % 3 ? 1 : 0;
    b->d[k] = v;
  }
}

static double rowsum(bufs *s, const char *name, int64_t m) {
  buf *b = find(s, name);
  double t = 0;
  for (int64_t c = 0; c < b->cols; c++) t += b->d[m * b->cols + c];
  return t;
}

/* A source input that a fold rule defines, computed here from the derived
 * program's inputs. 0 when `name` is none of them. */
static int by_rule(bufs *s, buf *b) {
  for (int64_t m = 0; m < M; m++) {
    double v;
    if (!strcmp(b->name, "r")) v = 1.0 / sqrt(rowsum(s, "ss", m) * find(s, "inv_n")->d[0] + kEps);
    else if (!strcmp(b->name, "mu")) v = rowsum(s, "psum", m) * find(s, "invd")->d[0];
    else if (!strcmp(b->name, "rs")) {
      const double invd = find(s, "invd")->d[0], mu = rowsum(s, "psum", m) * invd;
      v = 1.0 / sqrt(rowsum(s, "psq", m) * invd - mu * mu + kEps);
    } else if (!strcmp(b->name, "zdz")) v = rowsum(s, "zp", m);
    else if (!strcmp(b->name, "s1")) v = rowsum(s, "p1", m);
    else if (!strcmp(b->name, "s2")) v = rowsum(s, "p2", m);
    else return 0;
    b->d[m] = v;
  }
  return 1;
}

/* Runs p (exact form) on A, B and the inputs in `in` (which gains those p
 * reads and `in` lacks: drawn when draw_missing, else by a fold rule);
 * its outputs, partials and finished vectors go to `res`. */
static coda_status run(coda_context ctx, coda_program p, const coda_tensor *A, const coda_tensor *B,
                       bufs *in, int draw_missing, bufs *res) {
  const coda_tiling tl = {8, 8};
  coda_program x = NULL;
  coda_args a = NULL;
  coda_status st = coda_program_exact(ctx, p, &x);
  if (!st) st = coda_args_create(ctx, &a);
  for (int i = 0; !st && i < coda_program_num_args(x); i++) {
    coda_arg_info info;
    coda_program_arg(x, i, &info);
    int64_t rows = 0, cols = 0;
    st = coda_program_arg_shape_ctx(ctx, x, info.name, M, N, tl.tile_m, tl.tile_n, &rows, &cols);
    if (st) break;
    if (cols == 0) cols = T;
    const int is_input = info.kind == CODA_ARG_TILE || info.kind == CODA_ARG_SCALAR || info.kind == CODA_ARG_ROWSUM ||
                         ((info.kind == CODA_ARG_ROW || info.kind == CODA_ARG_COL) && i < x->ninputs);
    buf *b;
    if (is_input) {
      b = find(in, info.name);
      if (!b) {
        b = add(in, info.name, rows, cols, info.dtype == CODA_I32);
        if (draw_missing) draw(b);
        else CHECK_MSG(by_rule(in, b), "no rule gives the source's input '%s'", info.name);
      }
    } else {
      b = add(res, info.name, rows, cols, 0);
    }
    coda_tensor t = {b->i ? (void *)b->i : (void *)b->d, b->i ? CODA_I32 : CODA_F64, rows, cols, cols};
    if (info.kind == CODA_ARG_PARTIAL || (!is_input && info.kind != CODA_ARG_OUTPUT)) t.dtype = info.dtype;
    if (t.dtype == CODA_F32) { /* partials: kept in f32 by the interpreter */
      b->d = realloc(b->d, (size_t)(rows * cols) * sizeof(double));
      t.data = b->d;
      t.dtype = CODA_F64;
    }
    coda_args_set(a, info.name, &t);
  }
  if (!st) st = coda_gemm_epilogue(ctx, x, CODA_N, A, CODA_N, B, a, tl);
  for (int k = 0; !st && k < x->nfinishes; k++) st = coda_finish(ctx, x, x->finishes[k].name, a, M, N, tl);
  coda_args_destroy(a);
  coda_program_destroy(x);
  return st;
}

typedef struct expect { const char *name, *dropped, *kept; } expect;

static const expect kExpect[] = {
  {"gpt2_ln_bwd_folded", NULL, NULL}, {"gpt2_ln_linear_folded", NULL, NULL},
  {"gpt2_ln_linear_gelu_folded", NULL, NULL}, {"llama_ce_bwd_folded", "zdz", NULL},
  {"llama_head_norm_bwd_folded", NULL, NULL}, {"llama_lm_head_folded", NULL, NULL},
  {"llama_lm_head_folded_keep", NULL, "z"}, {"llama_lm_head_keep", NULL, "z"},
  {"llama_norm_bwd_folded", NULL, NULL}, {"llama_qkv_rope_folded", NULL, NULL},
  {"llama_swiglu_folded", NULL, NULL}, {"llama_swiglu_folded_infer", "z", NULL},
  {"llama_swiglu_infer", "z", NULL},
};

static void derived_runs_as_source(coda_context ctx) {
  double as[M * K], bs[K * N], acc[M * N];
  for (int k = 0; k < M * K; k++) as[k] = uniform(-1, 1);
  for (int k = 0; k < K * N; k++) bs[k] = uniform(-1, 1);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      acc[m * N + n] = 0;
      for (int k = 0; k < K; k++) acc[m * N + n] += as[m * K + k] * bs[k * N + n];
    }
  const coda_tensor A = {as, CODA_F64, M, K, K}, B = {bs, CODA_F64, K, N, N};
  for (size_t v = 0; v < sizeof kExpect / sizeof kExpect[0]; v++) {
    const expect *e = &kExpect[v];
    const char *src = ir_builtin_variant_source(e->name);
    coda_program d = NULL, s = NULL;
    CHECK_MSG(src != NULL, "%s: not a variant", e->name);
    if (!src) continue;
    CHECK_MSG(ir_builtin_variant(ctx, e->name, &d) == CODA_OK, "%s: %s", e->name, coda_last_error(ctx));
    CHECK_MSG(coda_program_builtin(ctx, src, &s) == CODA_OK, "%s: %s", src, coda_last_error(ctx));
    bufs in = {0}, rd = {0}, rs = {0};
    if (d && s) {
      CHECK_MSG(run(ctx, d, &A, &B, &in, 1, &rd) == CODA_OK, "%s: %s", e->name, coda_last_error(ctx));
      CHECK_MSG(run(ctx, s, &A, &B, &in, 0, &rs) == CODA_OK, "%s: %s", src, coda_last_error(ctx));
      for (int k = 0; k < rs.n; k++) /* what the source gives, the variant gives, but the dropped */
        CHECK_MSG(find(&rd, rs.b[k].name) || (e->dropped && !strcmp(e->dropped, rs.b[k].name)),
                  "%s: lacks '%s'", e->name, rs.b[k].name);
      if (e->dropped) CHECK_MSG(!find(&rd, e->dropped), "%s: still has '%s'", e->name, e->dropped);
      int bad = 0, compared = 0;
      for (int k = 0; k < rd.n; k++) {
        const buf *x = &rd.b[k], *y = find(&rs, x->name);
        const int kept = e->kept && !strcmp(e->kept, x->name);
        CHECK_MSG(y || kept, "%s: '%s' is not the source's", e->name, x->name);
        if (!y && !kept) continue;
        for (int64_t j = 0; j < x->rows * x->cols; j++) {
          /* the kept logits: acc r, r from the partials as the rule says */
          const int64_t m = j / x->cols;
          const double r = !kept ? 0 : find(&in, "ss") ? 1.0 / sqrt(rowsum(&in, "ss", m) * find(&in, "inv_n")->d[0] + kEps)
                                                       : find(&in, "r")->d[m];
          const double want = kept ? acc[j] * r : y->d[j];
          bad += !(fabs(x->d[j] - want) <= 1e-12 * (1 + fabs(want)));
          compared++;
        }
      }
      CHECK_MSG(bad == 0 && compared > 0, "%s: %d of %d values differ from the source with the rule", e->name, bad,
                compared);
    }
    free_bufs(&in);
    free_bufs(&rd);
    free_bufs(&rs);
    coda_program_destroy(d);
    coda_program_destroy(s);
  }
}

/* coda_program_builtin gives each variant under its name (listed once by
 * coda_builtin_program_name), as ir_builtin_variant derives it; its text
 * parses back to the same program. */
static void builtin_names(coda_context ctx) {
  for (size_t i = 0; i < sizeof kVariantNames / sizeof kVariantNames[0]; i++) {
    const char *name = kVariantNames[i];
    int listed = 0;
    for (int k = 0; coda_builtin_program_name(k); k++) listed += !strcmp(coda_builtin_program_name(k), name);
    CHECK_MSG(listed == 1, "%s: listed %d times", name, listed);
    coda_program d = NULL, b = NULL, t = NULL;
    CHECK_MSG(ir_builtin_variant(ctx, name, &d) == CODA_OK, "%s: %s", name, coda_last_error(ctx));
    CHECK_MSG(coda_program_builtin(ctx, name, &b) == CODA_OK, "%s: %s", name, coda_last_error(ctx));
    if (d && b) {
      char why[256];
      CHECK_MSG(ir_equal(d, b, 1, why, sizeof why), "%s: %s", name, why);
      CHECK_MSG(coda_program_parse(ctx, coda_program_text(d), &t) == CODA_OK, "%s: %s", name, coda_last_error(ctx));
      if (t) CHECK_MSG(ir_equal(d, t, 1, why, sizeof why), "%s: text does not parse back: %s", name, why);
    }
    coda_program_destroy(d);
    coda_program_destroy(b);
    coda_program_destroy(t);
  }
  coda_program p = NULL;
  CHECK(ir_builtin_variant(ctx, "llama_swiglu", &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(ir_builtin_variant_source("llama_swiglu") == NULL);
}

/* ------------------------------------------------------------- refusals */

static coda_program parse(coda_context ctx, const char *t) {
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, t, &p) == CODA_OK, "parse: %s\n%s", coda_last_error(ctx), t);
  return p;
}

static void expect_fail(coda_context ctx, coda_status st, coda_program q, const char *want) {
  CHECK_MSG(st != CODA_OK && !q, "accepted (expected '%s')", want);
  CHECK_MSG(strstr(coda_last_error(ctx), want), "message '%s' lacks '%s'", coda_last_error(ctx), want);
  coda_program_destroy(q);
}

static void refusals(coda_context ctx) {
  coda_program p = parse(ctx, "input r : row f32\ninput x : tile f32\noutput y : f32\noutput z : f32\n"
                              "l = acc * r\nstore y = l * x\nstore z = l\nreduce s = rowsum(l)\nfinish t = sum(s)\n");
  coda_program rule = parse(ctx, "input ss : rowsum f32\nr = ss * 2\n");
  coda_program none = parse(ctx, "input ss : rowsum f32\nq = ss * 2\n");
  coda_program tile = parse(ctx, "input ss : rowsum f32\nx = ss * 2\n");
  coda_program acc = parse(ctx, "input ss : rowsum f32\nr = ss * acc\n");
  coda_program clash = parse(ctx, "input ss : rowsum f32\nl = ss\nr = ss * 2\n");
  if (!p || !rule || !none || !tile || !acc || !clash) return;
  coda_program q = NULL;
  const char *bad[] = {"w"}, *good[] = {"z", "t"};
  expect_fail(ctx, ir_drop(ctx, p, bad, 1, &q), q, "'w' is not an output or a finisher of the program (it has: y, z, t)");
  expect_fail(ctx, ir_keep(ctx, p, "w", "k", CODA_BF16, &q), q, "'w' is not a named value");
  expect_fail(ctx, ir_keep(ctx, p, "l", "x", CODA_BF16, &q), q, "'x' is already a name of the program");
  expect_fail(ctx, ir_fold(ctx, p, none, &q), q, "defines none of the program's row inputs");
  expect_fail(ctx, ir_fold(ctx, p, tile, &q), q, "only a row input can be folded");
  expect_fail(ctx, ir_fold(ctx, p, acc, &q), q, "the rule reads acc");
  expect_fail(ctx, ir_fold(ctx, p, clash, &q), q, "the rule's value 'l' is already a name of the program");
  /* and what they do: the text of each result */
  CHECK(ir_drop(ctx, p, good, 2, &q) == CODA_OK);
  if (q) CHECK_MSG(!strcmp(coda_program_text(q), "input r : row f32\ninput x : tile f32\noutput y : f32\n"
                                                 "l = acc * r\nreduce s = rowsum(l)\nstore y = l * x\n"),
                   "drop:\n%s", coda_program_text(q));
  coda_program_destroy(q);
  CHECK(ir_keep(ctx, p, "l", "k", CODA_BF16, &q) == CODA_OK);
  if (q) CHECK_MSG(strstr(coda_program_text(q), "output k : bf16\n") && strstr(coda_program_text(q), "store k = l\n"),
                   "keep:\n%s", coda_program_text(q));
  coda_program_destroy(q);
  CHECK(ir_fold(ctx, p, rule, &q) == CODA_OK);
  if (q) CHECK_MSG(!strncmp(coda_program_text(q), "input ss : rowsum f32\ninput x : tile f32\noutput y : f32\n"
                                                  "output z : f32\nr = ss * 2\nl = acc * r\n", 80),
                   "fold:\n%s", coda_program_text(q));
  coda_program_destroy(q);
  coda_program_destroy(p);
  coda_program_destroy(rule);
  coda_program_destroy(none);
  coda_program_destroy(tile);
  coda_program_destroy(acc);
  coda_program_destroy(clash);
}

/* The public entry point: a user's rule and names give the built-in. */
static void public_api(coda_context ctx) {
  coda_program src = NULL, rule = NULL, want = NULL, got = NULL;
  CHECK(coda_program_builtin(ctx, "llama_swiglu", &src) == CODA_OK);
  CHECK(coda_program_builtin(ctx, "llama_swiglu_folded_infer", &want) == CODA_OK);
  rule = parse(ctx, "param eps = 1e-5\ninput ss : rowsum f32\ninput inv_n : scalar f32\n"
                    "r = rsqrt(ss * inv_n + eps)\n");
  if (!src || !want || !rule) return;
  const char *drop[] = {"z"};
  coda_variant_options o = coda_variant_default_options();
  o.fold = &rule;
  o.nfold = 1;
  o.drop = drop;
  o.ndrop = 1;
  CHECK_STATUS(ctx, coda_program_variant(ctx, src, &o, &got), CODA_OK);
  char why[256];
  if (got) CHECK_MSG(ir_equal(got, want, 1, why, sizeof why), "coda_program_variant: %s", why);
  coda_program_destroy(got);
  got = NULL;
  CHECK_STATUS(ctx, coda_program_variant(ctx, src, NULL, &got), CODA_OK); /* no pass: a copy */
  if (got) CHECK(ir_equal(got, src, 1, why, sizeof why) && !strcmp(coda_program_text(got), coda_program_text(src)));
  coda_program_destroy(got);
  got = NULL;
  coda_variant_options bad = o;
  bad.struct_size = 8;
  expect_fail(ctx, coda_program_variant(ctx, src, &bad, &got), got, "struct_size 8, expected");
  bad = coda_variant_default_options();
  bad.keep = "g";
  expect_fail(ctx, coda_program_variant(ctx, src, &bad, &got), got, "keep 'g' without keep_as");
  bad.ndrop = 2;
  expect_fail(ctx, coda_program_variant(ctx, src, &bad, &got), got, "ndrop 2 with drop NULL");
  coda_program_destroy(src);
  coda_program_destroy(rule);
  coda_program_destroy(want);
}

int main(void) {
  coda_context ctx;
  coda_context_options o = coda_context_default_options();
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  builtin_names(ctx);
  derived_runs_as_source(ctx);
  refusals(ctx);
  public_api(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
