/* The epilogue compiler's code generation: for every built-in program and
 * for programs exercising every op, reduction, dtype and width, the
 * generated CUDA source is produced and compiled by NVRTC for sm_90a (no GPU
 * needed). A compile error fails the test; so does a kernel that spills to
 * local memory (ptxas statistics in the compiler log). Skipped (passing)
 * when the library is built without CUDA: the compiler's entry points are
 * referenced weakly and are NULL then (coda_preferred_tiling is referenced
 * strongly, which links the CUDA dispatch and with it the compiler when it
 * exists). */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdir, getpid, readdir */
#include "check.h"
#include "epi_test_programs.h"
#include "coda.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cuda/epi_codegen.h"

#pragma weak coda_epi_full_source
#pragma weak coda_epi_compile
#pragma weak coda_epi_build
#pragma weak coda_epi_binary_free
#pragma weak coda_epi_functor_source
#pragma weak coda_epi_supported
#pragma weak coda_epi_default_config
#pragma weak coda_epi_fill_params
#pragma weak coda_epi_program_key

/* Programs that cover what the built-ins do not. */
static const char *const kExtra[][2] = {
    {"all_elementwise_ops",
     "input t : tile f16\n"
     "input r : row f32\n"
     "input c : col bf16\n"
     "input s : scalar f32\n"
     "input ri : row i32\n"
     "input ci : col i32\n"
     "input si : scalar i32\n"
     "output o1 : f32\n"
     "output o2 : f16 accumulate\n"
     "output o3 : bf16\n"
     "a = acc * s + t / (abs(c) + 1)\n"
     "b = fma(a, r, -a) - exp(-abs(a)) + log(abs(a) + 1) + sqrt(abs(a)) + rsqrt(abs(a) + 1)\n"
     "d = sigmoid(b) + silu(a) + gelu(b) + dgelu(a) + dsilu(b) + tanh(a)\n"
     "e = min(a, b) + max(a, d) + select(a < b, a, b) + (a <= d) + (a > b) + (a >= b) + (a == b) + (a != b)\n"
     "f = swiglu(a, b) + geglu(b, a) + ri + ci + si + row + col\n"
     "store o1 = e + f\n"
     "store o2 = d\n"
     "store o3 = -f\n"},
    {"pair_two_result_ops", EPI_TEST_PAIR_OPS},
    {"elem_reductions_x2", EPI_TEST_ELEM_REDUCE_X2},
    {"round2_ops", EPI_TEST_ROUND2_OPS},
    {"split64", EPI_TEST_SPLIT64},
    {"split16", EPI_TEST_SPLIT16},
    {"maxima", EPI_TEST_MAXIMA},
    {"pair_segmax", EPI_TEST_PAIR_SEGMAX},
    {"fast_ops", EPI_TEST_FAST_OPS},
    {"fast_pair", EPI_TEST_FAST_PAIR},
    /* index built-ins: seg/segpos, idiv/imod of row, col and i32 inputs */
    {"index_elem", EPI_TEST_INDEX_ELEM},
    {"index_pair_split", EPI_TEST_INDEX_SPLIT},
};

static int compile_one(coda_context ctx, const char *name, coda_program p, int ta, int tb, int f16) {
  coda_epi_config cfg = coda_epi_default_config();
  cfg.trans_a = ta;
  cfg.trans_b = tb;
  cfg.f16 = f16;
  /* fresh compiles (no cache) so ptxas reports its statistics */
  coda_epi_binary bin;
  coda_status s = coda_epi_build(ctx, p, &cfg, 1, &bin);
  CHECK_MSG(s == CODA_OK, "%s: %s", name, coda_last_error(ctx));
  int ok = s == CODA_OK && bin.size > 0 && bin.lowered != NULL;
  if (ok) {
    printf("  %-28s ta=%d tb=%d f16=%d  %-11s cubin %zu bytes, spill stores %d\n", name, ta, tb,
           f16, cfg.ping ? "pingpong" : "cooperative", bin.size, bin.spill);
    CHECK_MSG(bin.spill == 0, "%s: the chosen kernel spills (%d bytes)", name, bin.spill);
  }
  coda_epi_binary_free(&bin);
  return ok;
}

/* The disk cache: a second build of the same kernel comes from the cache
 * (as a second process would), and a damaged cache file is ignored and
 * rewritten. */
static void check_cache(void) {
  char dir[64];
  snprintf(dir, sizeof dir, "test_epi_cache.tmp.%ld", (long)getpid());
  CHECK(mkdir(dir, 0755) == 0);
  /* the cache directory is an option of the context (CODA_CACHE_DIR is
   * read the same way, once, when a context is created) */
  coda_context_options o = coda_context_default_options();
  o.cache_dir = dir;
  coda_context ctx = NULL;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  coda_program p = NULL;
  CHECK(coda_program_builtin(ctx, "llama_residual", &p) == CODA_OK);
  coda_epi_binary b1, b2, b3;
  coda_epi_config cfg = coda_epi_default_config();
  CHECK(coda_epi_build(ctx, p, &cfg, 0, &b1) == CODA_OK);
  CHECK(!b1.from_cache && b1.size > 0);
  CHECK(coda_epi_build(ctx, p, &cfg, 0, &b2) == CODA_OK);
  CHECK(b2.from_cache && b2.size == b1.size && memcmp(b1.cubin, b2.cubin, b1.size) == 0);
  CHECK(b2.lowered && b1.lowered && strcmp(b1.lowered, b2.lowered) == 0);
  /* damage the cached file: one byte of the cubin */
  DIR *d = opendir(dir);
  int files = 0;
  struct dirent *e;
  char path[512];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    files++;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (f) {
      fseek(f, -100, SEEK_END);
      int c = fgetc(f);
      fseek(f, -100, SEEK_END);
      fputc(c ^ 0x5a, f);
      fclose(f);
    }
  }
  if (d) closedir(d);
  CHECK_EQ_INT(files, 1);
  CHECK(coda_epi_build(ctx, p, &cfg, 0, &b3) == CODA_OK);
  CHECK(!b3.from_cache);
  /* the recompiled kernel was written back: the next build reads it */
  coda_epi_binary b4;
  CHECK(coda_epi_build(ctx, p, &cfg, 0, &b4) == CODA_OK);
  CHECK(b4.from_cache && b4.size == b3.size && memcmp(b3.cubin, b4.cubin, b3.size) == 0);
  coda_epi_binary_free(&b4);
  coda_epi_binary_free(&b1);
  coda_epi_binary_free(&b2);
  coda_epi_binary_free(&b3);
  coda_program_destroy(p);
  /* clean up */
  d = opendir(dir);
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  rmdir(dir);
  coda_context_destroy(ctx);
}

/* The kernel parameter block of a program's views (host side, shared by
 * the fused GEMM and the map kernel): pointers in argument order, pitches
 * (vectors: their element stride), alignment flags, M and N. */
static void test_fill_params(coda_context ctx) {
  coda_program p = NULL;
  CHECK(coda_program_parse(ctx,
                           "input t : tile bf16\ninput r : row f32\ninput c : col bf16\n"
                           "input s : scalar f32\noutput y : f32\n"
                           "reduce q = rowsum(acc)\nstore y = acc * t * r + c * s\n",
                           &p) == CODA_OK);
  if (!p) return;
  static _Alignas(64) unsigned char buf[1 << 16];
  /* t: 10 x 12 (pitch 16) at an aligned base; r: a column of 10 rows at
   * pitch 3 (column-shaped, strided); c: a 1 x 12 row (contiguous), first
   * at an odd element offset (no pair access) */
  coda_tensor t = coda_tensor_2d(buf, CODA_BF16, 10, 12);
  t.ld = 16;
  coda_tensor r = coda_tensor_2d(buf + 4096, CODA_F32, 10, 1);
  r.ld = 3;
  coda_tensor c = coda_tensor_2d(buf + 8192 + 2, CODA_BF16, 1, 12);
  coda_tensor sc = coda_tensor_2d(buf + 12288, CODA_F32, 1, 1);
  coda_tensor y = coda_tensor_2d(buf + 16384, CODA_F32, 10, 12);
  y.ld = 14; /* even, not a multiple of 4 */
  coda_tensor q = coda_tensor_2d(buf + 32768, CODA_F32, 10, 1);
  const coda_tensor *in[] = {&t, &r, &c, &sc}, *out[] = {&y}, *part[] = {&q};
  coda_epi_params pp;
  memset(&pp, 0x5a, sizeof pp);
  coda_epi_fill_params(&pp, p, in, out, part, 10, 12);
  CHECK(pp.M == 10 && pp.N == 12);
  CHECK(pp.ptr[0] == t.data && pp.ld[0] == 16 && pp.flags[0] == 3);
  CHECK(pp.ptr[1] == r.data && pp.ld[1] == 3 && pp.flags[1] == 0);
  CHECK(pp.ptr[2] == c.data && pp.ld[2] == 1 && pp.flags[2] == 0);
  CHECK(pp.ptr[3] == sc.data && pp.ld[3] == 1 && pp.flags[3] == 1);
  CHECK(pp.ptr[4] == y.data && pp.ld[4] == 14 && pp.flags[4] == 1);
  CHECK(pp.ptr[5] == q.data && pp.ld[5] == 1 && pp.flags[5] == 0); /* partials: 2-D views (M x tiles) */
  /* everything else is cleared (no stale TMA maps or flags) */
  int rest = 0;
  for (int k = 6; k < CODA_EPI_MAX_ARGS; k++) rest |= pp.flags[k] | (pp.ptr[k] != NULL) | (pp.ld[k] != 0);
  for (int m = 0; m < CODA_EPI_MAX_TMA; m++)
    for (int w = 0; w < 16; w++) rest |= pp.tm[m][w] != 0;
  CHECK(rest == 0);
  for (int k = 0; k < CODA_EPI_MAX_ARGS; k++) CHECK(pp.cnt[k] == 0);
  coda_program_destroy(p);
  /* a rowsum input: its M x T view by rows (ld the row pitch) and T in cnt */
  CHECK(coda_program_parse(ctx, "input s : rowsum f32\noutput y : f32\nstore y = acc * s\n", &p) == CODA_OK);
  if (!p) return;
  coda_tensor ps = coda_tensor_2d(buf + 4096, CODA_F32, 10, 3);
  ps.ld = 5;
  const coda_tensor *in2[] = {&ps}, *out2[] = {&y};
  memset(&pp, 0x5a, sizeof pp);
  coda_epi_fill_params(&pp, p, in2, out2, NULL, 10, 12);
  CHECK(pp.ptr[0] == ps.data && pp.ld[0] == 5 && pp.cnt[0] == 3);
  CHECK(pp.ptr[1] == y.data && pp.cnt[1] == 0);
  coda_program_destroy(p);
}

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *q = s; (q = strstr(q, what)); q += strlen(what)) n++;
  return n;
}

int main(void) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) {
    printf("no context\n");
    return 1;
  }
  coda_tiling tl = {0, 0};
  CHECK(coda_preferred_tiling(ctx, NULL, 100, 100, 100, &tl) == CODA_OK);
  CHECK(tl.tile_m > 0 && tl.tile_n > 0);
  if (!coda_epi_full_source || !coda_epi_build) {
    printf("test_epi_codegen: skipped (library built without CUDA)\n");
    coda_context_destroy(ctx);
    return CHECK_DONE();
  }
  if (coda_epi_fill_params) test_fill_params(ctx);
  { /* a program with a total runs as a pass list: building it as one
     * kernel is refused with the count of its passes (it once crashed in
     * the staging plan, which has no emitter for a total) */
    coda_program p = NULL;
    CHECK(coda_program_parse(ctx,
                             "input x : tile bf16\noutput y : f32\nstore y = acc * x\n"
                             "reduce sp = total(acc * x)\nfinish s = sum(sp)\n",
                             &p) == CODA_OK);
    if (p) {
      coda_epi_config cfg = coda_epi_default_config();
      coda_epi_binary bin;
      CHECK(coda_program_num_passes(p) > 1);
      CHECK(coda_epi_build(ctx, p, &cfg, 1, &bin) == CODA_ERR_NOT_SUPPORTED);
      CHECK_MSG(strstr(coda_last_error(ctx), "runs as ") && strstr(coda_last_error(ctx), " passes"),
                "%s", coda_last_error(ctx));
      coda_program_destroy(p);
    }
  }
  int compiled = 0, total = 0;
  /* every built-in program: the default layout (A N, B T, bf16) */
  for (int i = 0; coda_builtin_program_name(i); i++) {
    const char *name = coda_builtin_program_name(i);
    coda_program p = NULL;
    CHECK_MSG(coda_program_builtin(ctx, name, &p) == CODA_OK, "%s: %s", name, coda_last_error(ctx));
    if (!p) continue;
    total++;
    compiled += compile_one(ctx, name, p, 0, 1, 0);
    coda_program_destroy(p);
  }
  /* the extra programs, in every operand layout and type once */
  for (size_t i = 0; i < sizeof kExtra / sizeof kExtra[0]; i++) {
    coda_program p = NULL;
    CHECK_MSG(coda_program_parse(ctx, kExtra[i][1], &p) == CODA_OK, "%s: %s", kExtra[i][0],
              coda_last_error(ctx));
    if (!p) continue;
    total++;
    /* the four operand layouts and both operand types across the three */
    static const int lay[3][3] = {{0, 0, 1}, {1, 1, 0}, {1, 0, 1}};
    compiled += compile_one(ctx, kExtra[i][0], p, lay[i % 3][0], lay[i % 3][1], lay[i % 3][2]);
    coda_program_destroy(p);
  }
  /* math fast reaches the translation unit (the helpers' approximations
   * and, in coda_epi_compile, contraction) and nothing else: the functor
   * of the fast program is the exact one's */
  {
    const char *body = "input t : tile bf16\noutput y : bf16\nstore y = tanh(t) * acc + exp(t)\n";
    char fast_src[256];
    snprintf(fast_src, sizeof fast_src, "math fast\n%s", body);
    coda_program pe = NULL, pf = NULL;
    CHECK(coda_program_parse(ctx, body, &pe) == CODA_OK && coda_program_parse(ctx, fast_src, &pf) == CODA_OK);
    if (pe && pf) {
      coda_epi_config cfg = coda_epi_default_config();
      char *ue = coda_epi_full_source(ctx, pe, &cfg, NULL), *uf = coda_epi_full_source(ctx, pf, &cfg, NULL);
      char *fe = coda_epi_functor_source(ctx, pe), *ff = coda_epi_functor_source(ctx, pf);
      CHECK(ue && uf && strstr(ue, "#define CODA_EPI_FAST_MATH 0\n") && strstr(uf, "#define CODA_EPI_FAST_MATH 1\n"));
      CHECK(fe && ff && strstr(fe, "coda_epi::tanh_(") && strstr(fe, "coda_epi::exp_("));
      /* past the first line (the program's canonical text in a comment) */
      CHECK(fe && ff && strchr(fe, '\n') && strchr(ff, '\n') && !strcmp(strchr(fe, '\n'), strchr(ff, '\n')));
      free(ue), free(uf), free(fe), free(ff);
      total += 2;
      compiled += compile_one(ctx, "tanh_exp exact", pe, 0, 1, 0);
      compiled += compile_one(ctx, "tanh_exp fast", pf, 0, 1, 0);
    }
    coda_program_destroy(pe);
    coda_program_destroy(pf);
  }
  /* parameters: the bound value is a literal of the functor, so two values
   * give two sources and two program keys; no value, no source */
  if (coda_epi_program_key) {
    const char *text = "param cap\ninput t : tile bf16\noutput y : bf16\nstore y = cap * tanh(acc / cap) + t\n";
    coda_program p = NULL, b1 = NULL, b2 = NULL;
    CHECK(coda_program_parse(ctx, text, &p) == CODA_OK);
    coda_param_value v = {"cap", 0.5};
    coda_bind_options bo = coda_bind_default_options();
    bo.values = &v;
    bo.nvalues = 1;
    CHECK(p && coda_program_bind(ctx, p, &bo, &b1) == CODA_OK);
    v.value = 30;
    CHECK(p && coda_program_bind(ctx, p, &bo, &b2) == CODA_OK);
    char *f0 = p ? coda_epi_functor_source(ctx, p) : NULL;
    CHECK_MSG(!f0 && strstr(coda_last_error(ctx), "parameter 'cap' has no value"), "%s", coda_last_error(ctx));
    free(f0);
    char *f1 = b1 ? coda_epi_functor_source(ctx, b1) : NULL, *f2 = b2 ? coda_epi_functor_source(ctx, b2) : NULL;
    CHECK(f1 && f2 && strstr(f1, "0x1p-1f") && strstr(f2, "0x1.ep+4f") && strcmp(f1, f2));
    CHECK(b1 && b2 && coda_epi_program_key(b1, 0) != coda_epi_program_key(b2, 0));
    free(f1), free(f2);
    if (b1) {
      total++;
      compiled += compile_one(ctx, "param cap=0.5", b1, 0, 1, 0);
    }
    coda_program_destroy(p);
    coda_program_destroy(b1);
    coda_program_destroy(b2);
  }
  /* half-split pairs stage their full-width outputs for the whole
   * fragment: both columns of a point into the chunks' buffers, each chunk
   * stored by TMA after the last one, no direct stores */
  {
    coda_program p = NULL;
    CHECK(coda_program_parse(ctx, EPI_TEST_SPLIT64, &p) == CODA_OK);
    const char *rope = "mode pair split 64\ninput pos : row i32\ninput f : col f32\noutput y : bf16\n"
                       "x, w = rope(acc.even, acc.odd, pos, f.even, 0)\nstore y = pack(x, w)\n";
    coda_program q = NULL;
    CHECK(coda_program_parse(ctx, rope, &q) == CODA_OK);
    char *fn = q ? coda_epi_functor_source(ctx, q) : NULL;
    CHECK(fn && strstr(fn, "((j + 4) / 4) * 4096") && strstr(fn, "tma_store_2d(&p.tm[0], sb_ + 0 + (jc / 4) * 4096") &&
          count_of(fn, "bulk_wait_read<0>") == 1 && !strstr(fn, "coda_epi::st2<"));
    free(fn);
    coda_epi_config cfg = coda_epi_default_config();
    coda_epi_binary bin;
    if (q && coda_epi_build(ctx, q, &cfg, 1, &bin) == CODA_OK) {
      CHECK_MSG(cfg.ping, "a split program with every output staged runs pingpong");
      coda_epi_binary_free(&bin);
    }
    coda_program_destroy(p);
    coda_program_destroy(q);
  }
  /* the generated source names what it compiles: check a property of it */
  {
    coda_program p = NULL;
    if (coda_program_builtin(ctx, "llama_swiglu_bwd", &p) == CODA_OK) {
      char *fn = coda_epi_functor_source(ctx, p);
      /* the x2 bf16 input double-buffered takes the whole 16 KB scratch
       * (64 rows x 128 bytes x 2), so the program is given 32 KB, where
       * its two outputs are staged too and leave by TMA */
      CHECK(fn && strstr(fn, "struct CodaEpi") && strstr(fn, "stage_in<2, 128>") && strstr(fn, "sv4<0>") &&
            strstr(fn, "kEpiScratchBytes == 32768") && strstr(fn, "so4<0>") && strstr(fn, "so2<0>") &&
            strstr(fn, "tma_store_2d") && !strstr(fn, "st4<0, false>"));
      free(fn);
      coda_program_destroy(p);
    }
    /* a residual add stages its input and its output */
    if (coda_program_builtin(ctx, "llama_residual", &p) == CODA_OK) {
      char *fn = coda_epi_functor_source(ctx, p);
      CHECK(fn && strstr(fn, "stage_in<2, 64>") && strstr(fn, "stage_out<2, 64>") && !strstr(fn, "st2<"));
      free(fn);
      coda_program_destroy(p);
    }
  }
  /* accumulated outputs: f32 ones are staged and leave by TMA reduce-add
   * (read-add-write vectors where no map can be made), so a program whose
   * every tile access is staged runs pingpong; 16-bit ones stay a direct
   * read-add-write (a 16-bit reduce-add would round twice) */
  {
    coda_program p = NULL;
    if (coda_program_parse(ctx, EPI_TEST_ACC_F32, &p) == CODA_OK) {
      char *fn = coda_epi_functor_source(ctx, p);
      CHECK(fn && strstr(fn, "coda_sm90::tma_reduce_add_2d(&p.tm[0]") &&
            strstr(fn, "stage_out<4, 128, true>") && !strstr(fn, "st2<"));
      free(fn);
      if (!getenv("CODA_EPI_SCHEDULE")) {
        coda_epi_config cfg = coda_epi_default_config();
        cfg.trans_b = 1;
        coda_epi_binary bin;
        CHECK(coda_epi_build(ctx, p, &cfg, 1, &bin) == CODA_OK);
        printf("  %-28s %s, spill stores %d\n", "acc_f32", cfg.ping ? "pingpong" : "cooperative",
               bin.spill);
        CHECK(cfg.ping == 1 && bin.spill == 0);
        coda_epi_binary_free(&bin);
      }
      coda_program_destroy(p);
    }
    CHECK(coda_program_parse(ctx, EPI_TEST_ACC_F32_PAIR, &p) == CODA_OK);
    if (p) {
      char *fn = coda_epi_functor_source(ctx, p);
      CHECK(fn && strstr(fn, "tma_reduce_add_2d") && strstr(fn, "stage_out<4, 128, true>") &&
            strstr(fn, "st2<0, true>") && strstr(fn, "tma_store_2d"));
      free(fn);
      total++;
      compiled += compile_one(ctx, "acc_f32_pair", p, 1, 0, 1);
      coda_program_destroy(p);
    }
    CHECK(coda_program_parse(ctx, kExtra[0][1], &p) == CODA_OK); /* f16 accumulate */
    if (p) {
      char *fn = coda_epi_functor_source(ctx, p);
      CHECK(fn && strstr(fn, "st2<1, true>") && !strstr(fn, "tma_reduce_add_2d"));
      free(fn);
      coda_program_destroy(p);
    }
  }
  /* rowsum inputs: each row's partials summed in the prelude (T from
   * p.cnt), and the row-invariant math (here the rsqrt) computed once per
   * fragment row before the loops and read per point from hv%d[h] */
  {
    static const char *const rp[3][2] = {{"rowsum_hoist", EPI_TEST_ROWSUM_HOIST},
                                         {"rowsum_pair_rope", EPI_TEST_ROWSUM_PAIR},
                                         {"rowmax_rowlse", EPI_TEST_ROW_MAXLSE}};
    for (int i = 0; i < 3; i++) {
      coda_program p = NULL;
      CHECK_MSG(coda_program_parse(ctx, rp[i][1], &p) == CODA_OK, "%s: %s", rp[i][0], coda_last_error(ctx));
      if (!p) continue;
      char *fn = coda_epi_functor_source(ctx, p);
      if (i == 2) { /* the max and the log-sum-exp of the partials in the prelude */
        CHECK(fn && strstr(fn, "p.cnt[0]") && strstr(fn, "rq0[h]") && strstr(fn, "rq1[h]") &&
              strstr(fn, "m_ += logf(s_)"));
        free(fn);
        total++;
        compiled += compile_one(ctx, rp[i][0], p, 0, 1, 0);
        coda_program_destroy(p);
        continue;
      }
      CHECK(fn && strstr(fn, "p.cnt[0]") && strstr(fn, "rq0[h]") && strstr(fn, "float hv"));
      /* one rsqrt in the source, and it is in the prelude: before the
       * fragment loop */
      const char *sq = fn ? strstr(fn, "1.0f / sqrtf") : NULL, *loop = fn ? strstr(fn, "for (int jc = 0;") : NULL;
      CHECK(fn && count_of(fn, "1.0f / sqrtf") == 1 && sq && loop && sq < loop);
      if (i == 0) CHECK(fn && strstr(fn, "rq1[h]") && count_of(fn, "= hv") == 2); /* m and r per point */
      free(fn);
      total++;
      compiled += compile_one(ctx, rp[i][0], p, i, 1 - i, i);
      coda_program_destroy(p);
    }
  }
  /* programs the GPU cannot run say why in terms of the program */
  {
    coda_context_options o = coda_context_default_options();
    o.precision = CODA_PRECISION_F64;
    coda_context c64;
    if (coda_context_create(&o, &c64) == CODA_OK) {
      coda_program p = NULL;
      if (coda_program_parse(c64, "input x : tile f64\noutput y : f64\nstore y = acc * x\n", &p) ==
          CODA_OK) {
        CHECK(coda_epi_supported(c64, p) == CODA_ERR_NOT_SUPPORTED);
        CHECK(strstr(coda_last_error(c64), "'x'") != NULL);
        coda_program_destroy(p);
      }
      coda_context_destroy(c64);
    }
    /* half-split pairs the generator cannot pair inside one thread: the
     * whole row (S = N), a segment not dividing the 128-column tile or not
     * a multiple of 16, a narrow segmented partial */
    static const char *const refused[][2] = {
        {"mode pair split\noutput h : bf16 half\nstore h = acc.even * acc.odd\n", "halves of the whole row"},
        {"mode pair split 96\noutput h : bf16 half\nstore h = acc.even\n", "S % 16 == 0"},
        {"mode pair split 8\noutput h : bf16 half\nstore h = acc.even\n", "S % 16 == 0"},
        {"mode pair split 256\noutput h : bf16 half\nstore h = acc.even\n", "128-column tile"},
        {"mode pair split 64\noutput h : bf16 half\nstore h = acc.even\nreduce r = rowsum(acc.odd) per 4\n",
         "segments of 8"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
      coda_program p = NULL;
      CHECK_MSG(coda_program_parse(ctx, refused[i][0], &p) == CODA_OK, "%s", coda_last_error(ctx));
      if (!p) continue;
      CHECK(coda_epi_supported(ctx, p) == CODA_ERR_NOT_SUPPORTED);
      CHECK_MSG(strstr(coda_last_error(ctx), refused[i][1]) != NULL, "'%s' lacks '%s'", coda_last_error(ctx),
                refused[i][1]);
      coda_program_destroy(p);
    }
  }
  check_cache();
  printf("epilogue codegen: %d of %d programs compiled for sm_90a\n", compiled, total);
  CHECK_EQ_INT(compiled, total);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
