/* In place: an output that is the very same view as a tile input, and the
 * Llama-3 block's dz written over its saved z (CODA_LLAMA_INPLACE).
 *
 * - Dispatcher: an output identical to a tile input (data, ld, rows, cols,
 *   dtype, width) is accepted and gives the bits of the out-of-place run:
 *   the SwiGLU backward GEMM epilogue (elem mode, x2), its map form (pair
 *   mode, full width), standard and half widths, a padded view, several
 *   threads. Rejected with CODA_ERR_ALIAS and a message saying what is
 *   allowed: partial overlap, overlap with A or B, an accumulating output,
 *   a different dtype, ld or shape on the same pointer, a row input, two
 *   outputs over the same input.
 * - Plan aliases (plan_buffer_alias): shape and dtype checked, no binding
 *   of an alias, its view is its target's, and a step reading the target
 *   after the alias was written is refused.
 * - The Llama-3 block with the flag against the same block without it, on
 *   the same data: outputs and every gradient bit-identical (bf16 fused and
 *   unfused, exact f64), the context's peak memory strictly lower, the plan
 *   text naming dz an alias of z; coda_plan_tune_fusion leaves z as it
 *   found it. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include "coda_nn.h"
#include "check.h"
#include "file_util.h"
#include "plan_test_util.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static coda_context make_ctx(coda_precision prec, int threads) {
  coda_context ctx = test_context(prec, threads);
  CHECK(ctx != NULL);
  return ctx;
}

static void fill_rand(coda_tensor *t, double scale) {
  for (int64_t r = 0; r < t->rows; r++)
    for (int64_t c = 0; c < t->cols; c++) coda_store(t, r, c, scale * lt_rand());
}

/* Rows of two views hold the same bytes. */
static int same_bytes(const coda_tensor *a, const coda_tensor *b) {
  const size_t es = coda_dtype_size(a->dtype);
  for (int64_t r = 0; r < a->rows; r++)
    if (memcmp((const char *)a->data + (size_t)(r * a->ld) * es,
               (const char *)b->data + (size_t)(r * b->ld) * es, (size_t)a->cols * es))
      return 0;
  return 1;
}

static coda_program parse(coda_context ctx, const char *text) {
  coda_program p = NULL;
  CHECK_MSG(coda_program_parse(ctx, text, &p) == CODA_OK, "%s", coda_last_error(ctx));
  return p;
}

static coda_tensor alloc_view(coda_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  coda_tensor t = {calloc((size_t)(rows * ld) + 8, coda_dtype_size(dt)), dt, rows, cols, ld};
  return t;
}

static coda_tensor copy_of(const coda_tensor *t) {
  coda_tensor c = alloc_view(t->dtype, t->rows, t->cols, t->ld);
  memcpy(c.data, t->data, (size_t)(t->rows * t->ld) * coda_dtype_size(t->dtype));
  return c;
}

/* ------------------------------------------------------ the dispatcher */

/* llama_swiglu_bwd (elem mode, z and dz x2): acc = A B, dz written over z
 * equals the out-of-place dz, y and the partials too. */
static void gemm_x2_in_place(int threads) {
  coda_context ctx = make_ctx(CODA_PRECISION_F32, threads);
  coda_program prog = NULL;
  CHECK(coda_program_builtin(ctx, "llama_swiglu_bwd", &prog) == CODA_OK);
  const int64_t M = 70, K = 40, F = 150; /* ragged tiles */
  const coda_tiling tl = {64, 64};
  coda_tensor A = alloc_view(CODA_BF16, M, K, K), B = alloc_view(CODA_BF16, K, F, F);
  coda_tensor z = alloc_view(CODA_BF16, M, 2 * F, 2 * F + 6); /* padded rows */
  fill_rand(&A, 1.0);
  fill_rand(&B, 0.3);
  fill_rand(&z, 2.0);
  coda_tensor z0 = copy_of(&z);
  coda_tensor dz = alloc_view(CODA_BF16, M, 2 * F, 2 * F), y1 = alloc_view(CODA_BF16, M, F, F),
              y2 = alloc_view(CODA_BF16, M, F, F);
  const int64_t T = (F + tl.tile_n - 1) / tl.tile_n;
  coda_tensor zp1 = alloc_view(CODA_F32, M, T, T), zp2 = alloc_view(CODA_F32, M, T, T);
  coda_args a = NULL;
  CHECK(coda_args_create(ctx, &a) == CODA_OK);
  /* out of place */
  coda_args_set(a, "z", &z);
  coda_args_set(a, "dz", &dz);
  coda_args_set(a, "y", &y1);
  coda_args_set(a, "zp", &zp1);
  CHECK_MSG(coda_gemm_epilogue(ctx, prog, CODA_N, &A, CODA_N, &B, a, tl) == CODA_OK, "%s",
            coda_last_error(ctx));
  CHECK(same_bytes(&z, &z0));
  /* in place: dz is z */
  coda_args_set(a, "dz", &z);
  coda_args_set(a, "y", &y2);
  coda_args_set(a, "zp", &zp2);
  CHECK_MSG(coda_gemm_epilogue(ctx, prog, CODA_N, &A, CODA_N, &B, a, tl) == CODA_OK, "%s",
            coda_last_error(ctx));
  CHECK_MSG(same_bytes(&z, &dz), "in place dz differs (%d threads)", threads);
  CHECK(same_bytes(&y1, &y2));
  CHECK(same_bytes(&zp1, &zp2));
  CHECK(!same_bytes(&z, &z0)); /* it did write */

  /* rejected: dz over A's memory, a partial overlap of z, an accumulating output */
  coda_tensor big = alloc_view(CODA_BF16, M, 2 * F, 2 * F);
  coda_tensor onA = {A.data, CODA_BF16, M, 2 * F, 2 * F};
  memcpy(z.data, z0.data, (size_t)(M * z.ld) * 2);
  coda_args_set(a, "dz", &onA);
  CHECK(coda_gemm_epilogue(ctx, prog, CODA_N, &A, CODA_N, &B, a, tl) == CODA_ERR_ALIAS);
  CHECK(strstr(coda_last_error(ctx), "'dz' (written) overlaps 'A' (read)") != NULL);
  CHECK(strstr(coda_last_error(ctx), "only in place is allowed") != NULL);
  coda_tensor onB = {B.data, CODA_BF16, M, 2 * F, 2 * F};
  coda_tensor bigB = alloc_view(CODA_BF16, M, 2 * F, 2 * F); /* B inside a larger block */
  memcpy(bigB.data, B.data, (size_t)(K * F) * 2);
  coda_tensor B2 = {bigB.data, CODA_BF16, K, F, F};
  onB.data = bigB.data;
  coda_args_set(a, "dz", &onB);
  CHECK(coda_gemm_epilogue(ctx, prog, CODA_N, &A, CODA_N, &B2, a, tl) == CODA_ERR_ALIAS);
  CHECK(strstr(coda_last_error(ctx), "overlaps 'B' (read)") != NULL);
  coda_tensor shifted = z;
  shifted.data = (uint16_t *)z.data + 2; /* one point later: partial overlap */
  shifted.ld = z.ld;
  coda_args_set(a, "dz", &shifted);
  CHECK(coda_gemm_epilogue(ctx, prog, CODA_N, &A, CODA_N, &B, a, tl) == CODA_ERR_ALIAS);
  CHECK(strstr(coda_last_error(ctx), "'dz' (written) overlaps 'z' (read)") != NULL);
  coda_tensor dense = {z.data, CODA_BF16, M, 2 * F, 2 * F}; /* same pointer, other ld */
  coda_args_set(a, "dz", &dense);
  CHECK(coda_gemm_epilogue(ctx, prog, CODA_N, &A, CODA_N, &B, a, tl) == CODA_ERR_ALIAS);
  CHECK(same_bytes(&z, &z0)); /* nothing touched by the rejected runs */
  (void)big;

  coda_args_destroy(a);
  coda_program_destroy(prog);
  coda_tensor *all[] = {&A, &B, &z, &z0, &dz, &y1, &y2, &zp1, &zp2, &big, &bigB};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
  coda_context_destroy(ctx);
}

/* llama_swiglu_bwd_pairs (pair mode, z and dz full width) as a map, in
 * fp32 and in exact mode (f64 tensors). */
static void map_pairs_in_place(coda_precision prec) {
  coda_context ctx = make_ctx(prec, 2);
  coda_program prog = NULL;
  CHECK(plan_builtin(ctx, "llama_swiglu_bwd_pairs", &prog) == CODA_OK);
  const coda_dtype dt = prec == CODA_PRECISION_F64 ? CODA_F64 : CODA_BF16;
  const coda_dtype pt = prec == CODA_PRECISION_F64 ? CODA_F64 : CODA_F32;
  const int64_t M = 37, F = 90;
  const coda_tiling tl = {64, 64};
  coda_tensor z = alloc_view(dt, M, 2 * F, 2 * F), dy = alloc_view(dt, M, F, F);
  fill_rand(&z, 2.0);
  fill_rand(&dy, 1.0);
  coda_tensor z0 = copy_of(&z), dz = alloc_view(dt, M, 2 * F, 2 * F);
  coda_tensor y1 = alloc_view(dt, M, F, F), y2 = alloc_view(dt, M, F, F);
  const int64_t T = (2 * F + tl.tile_n - 1) / tl.tile_n;
  coda_tensor zp1 = alloc_view(pt, M, T, T), zp2 = alloc_view(pt, M, T, T);
  coda_args a = NULL;
  CHECK(coda_args_create(ctx, &a) == CODA_OK);
  coda_args_set(a, "z", &z);
  coda_args_set(a, "dy", &dy);
  coda_args_set(a, "dz", &dz);
  coda_args_set(a, "y", &y1);
  coda_args_set(a, "zp", &zp1);
  CHECK_MSG(coda_map(ctx, prog, M, 2 * F, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
  coda_args_set(a, "dz", &z);
  coda_args_set(a, "y", &y2);
  coda_args_set(a, "zp", &zp2);
  CHECK_MSG(coda_map(ctx, prog, M, 2 * F, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(same_bytes(&z, &dz));
  CHECK(same_bytes(&y1, &y2));
  CHECK(same_bytes(&zp1, &zp2));
  /* y written over dy: a half output over a half input, in place too */
  coda_tensor y3 = copy_of(&y1);
  memcpy(z.data, z0.data, (size_t)(M * 2 * F) * coda_dtype_size(dt));
  coda_args_set(a, "dz", &dz);
  coda_args_set(a, "y", &dy);
  CHECK_MSG(coda_map(ctx, prog, M, 2 * F, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(same_bytes(&dy, &y3));
  coda_args_destroy(a);
  coda_program_destroy(prog);
  coda_tensor *all[] = {&z, &dy, &z0, &dz, &y1, &y2, &zp1, &zp2, &y3};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
  coda_context_destroy(ctx);
}

/* Standard width in elem mode; the rejections that need other programs. */
static void map_rules(void) {
  coda_context ctx = make_ctx(CODA_PRECISION_F32, 3);
  const int64_t M = 130, N = 300; /* several threads' worth */
  const coda_tiling tl = {64, 128};
  coda_program prog = parse(ctx,
                            "input t : tile f32\ninput r : row f32\noutput o : f32\n"
                            "store o = t * r + t * t\n");
  coda_tensor t = alloc_view(CODA_F32, M, N, N + 3), r = alloc_view(CODA_F32, M, 1, 1);
  fill_rand(&t, 1.0);
  fill_rand(&r, 1.0);
  coda_tensor t0 = copy_of(&t), o = alloc_view(CODA_F32, M, N, N);
  coda_args a = NULL;
  CHECK(coda_args_create(ctx, &a) == CODA_OK);
  coda_args_set(a, "t", &t);
  coda_args_set(a, "r", &r);
  coda_args_set(a, "o", &o);
  CHECK(coda_map(ctx, prog, M, N, a, tl) == CODA_OK);
  coda_args_set(a, "o", &t);
  CHECK_MSG(coda_map(ctx, prog, M, N, a, tl) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(same_bytes(&t, &o));
  memcpy(t.data, t0.data, (size_t)(M * t.ld) * 4);

  /* an output over a row input */
  coda_tensor rr = alloc_view(CODA_F32, M * N, 1, 1);
  coda_tensor o_on_r = {rr.data, CODA_F32, M, N, N};
  coda_tensor r2 = {rr.data, CODA_F32, M, 1, 1};
  coda_args_set(a, "r", &r2);
  coda_args_set(a, "o", &o_on_r);
  CHECK(coda_map(ctx, prog, M, N, a, tl) == CODA_ERR_ALIAS);
  CHECK(strstr(coda_last_error(ctx), "overlaps 'r' (read)") != NULL);
  coda_args_set(a, "r", &r);
  /* same pointer, another dtype */
  coda_program p16 = parse(ctx, "input t : tile f32\noutput o : bf16\nstore o = t\n");
  coda_args b = NULL;
  CHECK(coda_args_create(ctx, &b) == CODA_OK);
  coda_tensor o16 = {t.data, CODA_BF16, M, N, t.ld};
  coda_args_set(b, "t", &t);
  coda_args_set(b, "o", &o16);
  CHECK(coda_map(ctx, p16, M, N, b, tl) == CODA_ERR_ALIAS);
  /* an accumulating output over its tile input */
  coda_program pacc = parse(ctx, "input t : tile f32\noutput o : f32 accumulate\nstore o = t\n");
  coda_args_set(b, "o", &t);
  CHECK(coda_map(ctx, pacc, M, N, b, tl) == CODA_ERR_ALIAS);
  CHECK(strstr(coda_last_error(ctx), "without accumulate") != NULL);
  /* two outputs over the same input */
  coda_program ptwo = parse(ctx, "input t : tile f32\noutput o : f32\noutput q : f32\n"
                                 "store o = t + 1\nstore q = t * 2\n");
  coda_args_set(b, "o", &t);
  coda_args_set(b, "q", &t);
  CHECK(coda_map(ctx, ptwo, M, N, b, tl) == CODA_ERR_ALIAS);
  CHECK(strstr(coda_last_error(ctx), "both are written") != NULL);
  /* an x2 input and a standard output at the same pointer (other shape) */
  coda_program pw = parse(ctx, "input t : tile bf16 x2\noutput o : bf16\nstore o = t.even + t.odd\n");
  coda_tensor tx2 = alloc_view(CODA_BF16, M, 2 * N, 2 * N);
  coda_tensor ow = {tx2.data, CODA_BF16, M, N, 2 * N};
  coda_args_clear(b);
  coda_args_set(b, "t", &tx2);
  coda_args_set(b, "o", &ow);
  CHECK(coda_map(ctx, pw, M, N, b, tl) == CODA_ERR_ALIAS);
  CHECK(same_bytes(&t, &t0));

  coda_args_destroy(a);
  coda_args_destroy(b);
  coda_program *progs[] = {&prog, &p16, &pacc, &ptwo, &pw};
  for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) coda_program_destroy(*progs[i]);
  coda_tensor *all[] = {&t, &r, &t0, &o, &rr, &tx2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
  coda_context_destroy(ctx);
}

/* ------------------------------------------------------ plan aliases */

static void plan_alias_rules(void) {
  coda_context ctx = make_ctx(CODA_PRECISION_F32, 1);
  const int64_t M = 9, F = 20;
  const coda_tiling tl = {64, 64};
  /* shape and dtype must match; one alias per buffer; not with itself */
  coda_plan p = NULL;
  CHECK(plan_create(ctx, "alias_bad", &p) == CODA_OK);
  plan_buffer(p, "z", CODA_BF16, M, 2 * F, PLAN_ROLE_SAVED);
  plan_buffer(p, "w", CODA_BF16, M, F, PLAN_ROLE_TEMP);
  plan_buffer_alias(p, "w", "z");
  CHECK(plan_status(p) == CODA_ERR_SHAPE);
  coda_plan_destroy(p);
  CHECK(plan_create(ctx, "alias_self", &p) == CODA_OK);
  plan_buffer(p, "z", CODA_BF16, M, 2 * F, PLAN_ROLE_SAVED);
  plan_buffer_alias(p, "z", "z");
  CHECK(plan_status(p) == CODA_ERR_INVALID_ARGUMENT);
  coda_plan_destroy(p);

  /* a map writing dz over z, then one reading z again: refused at run */
  for (int bad = 0; bad < 2; bad++) {
    CHECK(plan_create(ctx, "alias_use", &p) == CODA_OK);
    plan_buffer(p, "z", CODA_BF16, M, 2 * F, PLAN_ROLE_INPUT);
    plan_buffer(p, "dy", CODA_BF16, M, F, PLAN_ROLE_INPUT);
    plan_buffer(p, "dz", CODA_BF16, M, 2 * F, PLAN_ROLE_TEMP);
    plan_buffer(p, "y", CODA_BF16, M, F, PLAN_ROLE_OUTPUT);
    plan_buffer(p, "y2", CODA_BF16, M, F, PLAN_ROLE_OUTPUT);
    plan_buffer(p, "dz2", CODA_BF16, M, 2 * F, PLAN_ROLE_OUTPUT);
    plan_buffer_alias(p, "dz", "z");
    plan_map(p, CODA_PHASE_FORWARD, "bwd", "llama_swiglu_bwd_pairs", M, 2 * F, tl,
             "z=z dy=dy dz=dz y=y zp=zp");
    /* reads dz (fine) or z (its contents are gone) */
    plan_map(p, CODA_PHASE_FORWARD, "again", "llama_swiglu_bwd_pairs", M, 2 * F, tl,
             bad ? "z=z dy=dy dz=dz2 y=y2 zp=zq" : "z=dz dy=dy dz=dz2 y=y2 zp=zq");
    CHECK_MSG(plan_status(p) == CODA_OK, "%s", coda_last_error(ctx));
    coda_tensor z, dz, t;
    CHECK(coda_plan_tensor(p, "z", &z) == CODA_OK);
    CHECK(coda_plan_tensor(p, "dz", &dz) == CODA_OK);
    CHECK(z.data == dz.data && z.ld == dz.ld);
    fill_rand(&z, 1.0);
    CHECK(coda_plan_tensor(p, "dy", &t) == CODA_OK);
    fill_rand(&t, 1.0);
    CHECK(coda_plan_bind(p, "dz", &z) == CODA_ERR_INVALID_ARGUMENT);
    CHECK(strstr(coda_last_error(ctx), "bind 'z' instead") != NULL);
    const coda_status s = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
    if (bad) {
      CHECK(s == CODA_ERR_ALIAS);
      CHECK_MSG(strstr(coda_last_error(ctx), "reads 'z' after step 0 wrote") != NULL, "%s",
                coda_last_error(ctx));
    } else {
      CHECK_MSG(s == CODA_OK, "%s", coda_last_error(ctx));
      CHECK(strstr(coda_plan_text(p), "alias of z") != NULL);
    }
    /* binding the target moves the alias with it */
    coda_tensor own = alloc_view(CODA_BF16, M, 2 * F, 2 * F);
    CHECK(coda_plan_bind(p, "z", &own) == CODA_OK);
    CHECK(coda_plan_tensor(p, "dz", &dz) == CODA_OK);
    CHECK(dz.data == own.data);
    coda_plan_destroy(p);
    free(own.data);
  }
  coda_context_destroy(ctx);
}

/* ------------------------------------------------------ the Llama block */

/* Buffers whose bytes must agree between the two plans: results and the
 * saved activations other than z (which the flag overwrites). */
static int compared(const plan_buf *b) {
  return pt_is_result(b) || (b->role == PLAN_ROLE_SAVED && strcmp(b->name, "z"));
}

static const char *first_diff(coda_plan a, coda_plan b) {
  for (int i = 0; i < a->nbuf; i++) {
    if (!compared(&a->bufs[i])) continue;
    coda_tensor ta, tb;
    if (coda_plan_tensor(a, a->bufs[i].name, &ta) != CODA_OK ||
        coda_plan_tensor(b, a->bufs[i].name, &tb) != CODA_OK || !same_bytes(&ta, &tb))
      return a->bufs[i].name;
  }
  return NULL;
}

/* Both blocks on their own context (peak memory each), the same data,
 * forward + backward: identical results, strictly lower peak with the
 * flag. */
static void llama_block(coda_precision prec, int fused, unsigned flags) {
  const coda_dtype dt = prec == CODA_PRECISION_F64 ? CODA_F64 : CODA_BF16;
  coda_context c0 = make_ctx(prec, 2), c1 = make_ctx(prec, 2);
  coda_plan p0 = NULL, p1 = NULL;
  CHECK(pt_build(c0, PT_LLAMA_BLOCK, pt_small(), dt, (coda_tiling){0, 0}, flags, &p0) == CODA_OK);
  CHECK_MSG(pt_build(c1, PT_LLAMA_BLOCK, pt_small(), dt, (coda_tiling){0, 0}, flags | PT_INPLACE,
                     &p1) == CODA_OK, "%s", coda_last_error(c1));
  if (!p0 || !p1) return;
  CHECK(coda_plan_set_fused(p0, fused) == CODA_OK);
  CHECK(coda_plan_set_fused(p1, fused) == CODA_OK);
  lt_seed(7);
  CHECK(pt_fill_same(p0, p1, pt_small()->vocab));
  CHECK(coda_memory_reset_peak(c0) == CODA_OK && coda_memory_reset_peak(c1) == CODA_OK);
  CHECK(pt_run(c0, p0));
  CHECK(pt_run(c1, p1));
  const char *d = first_diff(p0, p1);
  CHECK_MSG(d == NULL, "%s %s flags %u: '%s' differs in place", dt == CODA_F64 ? "f64" : "bf16",
            fused ? "fused" : "unfused", flags, d);
  coda_memory_info m0, m1;
  CHECK(coda_memory_stats(c0, &m0) == CODA_OK && coda_memory_stats(c1, &m1) == CODA_OK);
  CHECK_MSG(m1.peak_bytes < m0.peak_bytes, "peak %zu in place, %zu without", m1.peak_bytes,
            m0.peak_bytes);
  const char *text = coda_plan_text(p1);
  CHECK(strstr(text, "alias of z (in place") != NULL);
  CHECK(strstr(coda_plan_text(p0), "alias of") == NULL);
  /* dz is z's memory; a backward consumed it */
  coda_tensor z, dz;
  CHECK(coda_plan_tensor(p1, "z", &z) == CODA_OK && coda_plan_tensor(p1, "dz", &dz) == CODA_OK);
  CHECK(z.data == dz.data);
  coda_plan_destroy(p0);
  coda_plan_destroy(p1);
  coda_context_destroy(c0);
  coda_context_destroy(c1);
}

/* The layout alone at the GPU test's sizes and tiling (no run): the arena
 * is smaller with the flag, fused and unfused. */
static void llama_layout_gpu_sizes(void) {
  const pt_shape sh = {.dim = 256, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .ffn_dim = 384,
                       .vocab = 1000, .batch = 2, .seq = 96, .gpt2_ffn_dim = 512};
  coda_context ctx = make_ctx(CODA_PRECISION_F32, 1);
  for (int fused = 0; fused < 2; fused++) {
    coda_plan p0 = NULL, p1 = NULL;
    CHECK(pt_build(ctx, PT_LLAMA_BLOCK, &sh, CODA_BF16, (coda_tiling){64, 128}, 0, &p0) == CODA_OK);
    CHECK(pt_build(ctx, PT_LLAMA_BLOCK, &sh, CODA_BF16, (coda_tiling){64, 128}, PT_INPLACE, &p1) ==
          CODA_OK);
    if (p0 && p1) {
      CHECK(coda_plan_set_fused(p0, fused) == CODA_OK && coda_plan_set_fused(p1, fused) == CODA_OK);
      CHECK(plan_layout(p0) == CODA_OK && plan_layout(p1) == CODA_OK);
      CHECK_MSG(p1->arena_bytes < p0->arena_bytes, "arena %zu in place, %zu without (%s)",
                p1->arena_bytes, p0->arena_bytes, fused ? "fused" : "unfused");
    }
    coda_plan_destroy(p0);
    coda_plan_destroy(p1);
  }
  coda_context_destroy(ctx);
}


/* coda_plan_tune_fusion runs the in-place step many times: z must be back
 * as the forward left it, so the backward after it is the default's. */
static void tune_keeps_z(void) {
  char dir[] = "test_nn_inplace.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  setenv("CODA_CACHE_DIR", dir, 1);
  setenv("CODA_RETUNE", "1", 1);
  coda_context c0 = make_ctx(CODA_PRECISION_F32, 1), c1 = make_ctx(CODA_PRECISION_F32, 1);
  coda_plan p0 = NULL, p1 = NULL;
  CHECK(pt_build(c0, PT_LLAMA_BLOCK, pt_small(), CODA_BF16, (coda_tiling){0, 0}, 0, &p0) == CODA_OK);
  CHECK(pt_build(c1, PT_LLAMA_BLOCK, pt_small(), CODA_BF16, (coda_tiling){0, 0}, PT_INPLACE, &p1) ==
        CODA_OK);
  if (p0 && p1) {
    lt_seed(11);
    CHECK(pt_fill_same(p0, p1, pt_small()->vocab));
    CHECK(coda_plan_run(c1, p1, CODA_PHASE_FORWARD) == CODA_OK);
    coda_tensor z;
    CHECK(coda_plan_tensor(p1, "z", &z) == CODA_OK);
    coda_tensor z0 = copy_of(&z);
    CHECK_MSG(coda_plan_tune_fusion(c1, p1, 1, NULL) == CODA_OK, "%s", coda_last_error(c1));
    CHECK(coda_plan_tensor(p1, "z", &z) == CODA_OK);
    CHECK_MSG(same_bytes(&z, &z0), "tuning left z changed");
    /* the default plan with the same choices, forward then backward */
    for (int k = 0; k < p0->nstep; k++) {
      p0->steps[k].unfused = p1->steps[k].unfused;
      p0->steps[k].sched = p1->steps[k].sched;
    }
    /* the in-place plan's forward ran fused: run it again with the choices */
    CHECK(pt_run(c0, p0));
    CHECK(pt_run(c1, p1));
    const char *d = first_diff(p0, p1);
    CHECK_MSG(d == NULL, "after tuning: '%s' differs in place", d);
    free(z0.data);
  }
  coda_plan_destroy(p0);
  coda_plan_destroy(p1);
  coda_context_destroy(c0);
  coda_context_destroy(c1);
  unsetenv("CODA_RETUNE");
  remove_dir(dir);
}

int main(void) {
  lt_seed(3);
  gemm_x2_in_place(1);
  gemm_x2_in_place(4);
  map_pairs_in_place(CODA_PRECISION_F32);
  map_pairs_in_place(CODA_PRECISION_F64);
  map_rules();
  plan_alias_rules();
  for (int fused = 0; fused < 2; fused++) {
    llama_block(CODA_PRECISION_F32, fused, 0);
    llama_block(CODA_PRECISION_F64, fused, 0);
  }
  llama_block(CODA_PRECISION_F32, 1, PT_FOLD | PT_GRAD_ACT);
  llama_layout_gpu_sizes();
  tune_keeps_z();
  return CHECK_DONE();
}
