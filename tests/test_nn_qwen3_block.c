/* The Qwen3 block plan (coda_llama_block_plan with CODA_LLAMA_QK_NORM,
 * src/nn/qwen3.c) in exact mode (fp64):
 *  - every gradient (dx and each weight's, the q/k norm weights' included)
 *    against central finite differences of L = sum x_out * dx_out computed
 *    by the plan's own forward, for head sizes that fill several column
 *    tiles, share one, and do not divide the default tile (12: tile 24);
 *  - the QK-norm's defining property in the forward: scaling the Q and K
 *    rows of wqkv leaves x_out unchanged (to the epsilon), scaling the V
 *    rows does not;
 *  - the printed plan: the QK-norm steps and the views;
 *  - the refusals: the flags it has no form for, a head size that does not
 *    tile, and a plan_buffer_view of another element count. */
#include "check.h"
#include "test_nn_llama_util.h"
#include "nn/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 9 };
static const char *pnames[NP] = {"x", "wqkv", "wo", "wgu", "wd", "wn1", "wn2", "wqn", "wkn"};
static const char *gnames[NP] = {"dx", "dwqkv", "dwo", "dwgu", "dwd", "dwn1", "dwn2", "dwqn", "dwkn"};

static coda_llama_config qcfg(int64_t hd, coda_tiling tl) {
  coda_llama_config c = coda_llama_default_config();
  c.dim = 16;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = hd;
  c.ffn_dim = 24;
  c.batch = 1;
  c.seq = 6;
  c.dtype = CODA_F64;
  c.norm_eps = 1e-6;
  c.tiling = tl;
  c.flags = CODA_LLAMA_QK_NORM | CODA_LLAMA_INPLACE;
  return c;
}

/* L = sum x_out * dx_out after a forward with the values in v. */
static double loss(coda_context ctx, coda_plan p, double *const v[NP], const double *dxo, int64_t n) {
  return lt_block_loss(ctx, p, NP, pnames, v, dxo, n, NULL);
}

static void fd_block(coda_context ctx, int64_t hd, coda_tiling tl) {
  coda_llama_config c = qcfg(hd, tl);
  coda_plan p = NULL;
  coda_status s = coda_llama_block_plan(ctx, &c, &p);
  CHECK_MSG(s == CODA_OK, "qwen3 block hd %lld: %s", (long long)hd, coda_last_error(ctx));
  if (s != CODA_OK) return;
  double *v[NP], *g[NP];
  int64_t n[NP];
  for (int i = 0; i < NP; i++) {
    n[i] = lt_plan_count(p, pnames[i]);
    CHECK(n[i] > 0 && n[i] == lt_plan_count(p, gnames[i]));
    const int norm = !strncmp(pnames[i], "wn", 2) || !strcmp(pnames[i], "wqn") ||
                     !strcmp(pnames[i], "wkn");
    v[i] = lt_vec(n[i], norm ? 0.2 : 0.5);
    if (norm)
      for (int64_t k = 0; k < n[i]; k++) v[i][k] += 1.0;
    g[i] = lt_zeros(n[i]);
  }
  const int64_t nout = lt_plan_count(p, "x_out");
  double *dxo = lt_vec(nout, 1.0);
  char label[48];
  snprintf(label, sizeof label, "hd %lld, tile_n %d", (long long)hd, tl.tile_n);
  lt_block_fd(ctx, p, NP, pnames, gnames, v, g, n, dxo, nout, label);
  /* the QK-norm: the Q and K rows of wqkv scaled by 3 leave x_out as it
   * was up to eps (1e-6 against per-head mean squares of order 0.1:
   * a few 1e-7); the V rows scaled change it */
  const int64_t D = c.dim, nqk = (c.n_heads + c.n_kv_heads) * hd;
  double *xo0 = lt_zeros(nout), *xo1 = lt_zeros(nout);
  loss(ctx, p, v, dxo, nout);
  lt_plan_get(p, "x_out", xo0);
  for (int part = 0; part < 2; part++) {
    double *w = malloc((size_t)n[1] * sizeof *w);
    memcpy(w, v[1], (size_t)n[1] * sizeof *w);
    for (int64_t k = part ? nqk * D : 0; k < (part ? n[1] : nqk * D); k++) w[k] *= 3.0;
    double *vv[NP];
    memcpy(vv, v, sizeof vv);
    vv[1] = w;
    loss(ctx, p, vv, dxo, nout);
    lt_plan_get(p, "x_out", xo1);
    const double d = lt_maxabs_diff(xo0, xo1, nout) / lt_maxabs(xo0, nout);
    if (part == 0) CHECK_MSG(d < 1e-5, "hd %lld: q/k scaled by 3 moved x_out by %.3g", (long long)hd, d);
    else CHECK_MSG(d > 1e-3, "hd %lld: v scaled by 3 moved x_out by only %.3g", (long long)hd, d);
    free(w);
  }
  free(xo0);
  free(xo1);
  /* the printed plan names the QK-norm steps and the views */
  const char *txt = coda_plan_text(p);
  CHECK(txt && strstr(txt, "qk_norm_rope") && strstr(txt, "qk_norm_bwd") &&
        strstr(txt, "view of qkv_pre") && !strstr(txt, "qkv_rope "));
  for (int i = 0; i < NP; i++) {
    free(v[i]);
    free(g[i]);
  }
  free(dxo);
  coda_plan_destroy(p);
}

static void refusals(coda_context ctx) {
  coda_plan p = NULL;
  coda_llama_config c = qcfg(16, (coda_tiling){0, 0});
  const unsigned no[3] = {CODA_LLAMA_FOLD, CODA_LLAMA_ROPE_MAP, CODA_LLAMA_INFER};
  const char *name[3] = {"CODA_LLAMA_FOLD", "CODA_LLAMA_ROPE_MAP", "CODA_LLAMA_INFER"};
  for (int i = 0; i < 3; i++) {
    c.flags = CODA_LLAMA_QK_NORM | no[i];
    CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_ERR_NOT_SUPPORTED && !p);
    CHECK_MSG(strstr(coda_last_error(ctx), name[i]) != NULL, "%s", coda_last_error(ctx));
  }
  /* head size 24 on column tiles of 16: neither divides the other */
  c = qcfg(24, (coda_tiling){16, 16});
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_ERR_SHAPE && !p);
  CHECK(strstr(coda_last_error(ctx), "head_dim 24") && strstr(coda_last_error(ctx), "tile_n 16"));
  /* the head plan takes the flag and is Llama's */
  c = qcfg(16, (coda_tiling){0, 0});
  c.flags = CODA_LLAMA_QK_NORM;
  CHECK(coda_llama_head_plan(ctx, &c, &p) == CODA_OK && p);
  coda_plan_destroy(p);
  /* a view of another element count */
  CHECK(plan_create(ctx, "views", &p) == CODA_OK);
  plan_buffer(p, "a", CODA_F64, 4, 6, PLAN_ROLE_TEMP);
  plan_buffer(p, "b", CODA_F64, 5, 5, PLAN_ROLE_TEMP);
  plan_buffer_view(p, "b", "a");
  CHECK(plan_status(p) == CODA_ERR_SHAPE);
  coda_plan_destroy(p);
}

int main(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  lt_seed(38);
  fd_block(ctx, 16, (coda_tiling){8, 8});   /* two column tiles per head */
  fd_block(ctx, 8, (coda_tiling){16, 32});  /* several heads per tile */
  fd_block(ctx, 12, (coda_tiling){0, 0});   /* the default: tile_n 24 */
  refusals(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
