/* The GPT-2 block as a plan of GEMM-epilogue programs.
 *
 * Block (pre-LayerNorm, as in GPT-2):
 *   x1    = x + Attn(LN(x; ln1) Wqkv^T + bqkv) Wo^T + bo
 *   x_out = x1 + gelu(LN(x1; ln2) Wfc^T + bfc) Wproj^T + bproj
 *
 * LayerNorm runs as a producer/consumer pair (the consumer GEMM works on
 * h = x * gamma and corrects its accumulator with rs, mu and the per-column
 * vectors c = W gamma, dv = W beta + b), and its backward takes the two row
 * means as dots in the consumer's output space where dz is produced. The
 * math is stated next to the programs: gpt2_residual_ln and gpt2_ln_linear
 * (forward), gpt2_gelu_bwd and gpt2_ln_bwd (backward). c and dv are
 * recomputed from the weights at the start of every forward (1 x N GEMMs,
 * negligible next to the block).
 *
 * Forward steps: fold (c, dv for both norms) -> ln1 stats (map) -> QKV
 * (consumer) -> attention -> out-proj (+bias +residual, ln2 producer) -> fc
 * (consumer + GELU) -> proj (+bias +residual).
 * Backward: dbproj (map) -> dWproj -> proj dgrad (GELU bwd + ln2 dots) ->
 * fc dgrad (ln2 bwd + residual, dgamma/dbeta/dbo) -> dWfc -> dWo -> do ->
 * attention bwd -> ln1 dots (map) -> QKV dgrad (ln1 bwd + residual) -> dWqkv.
 *
 * Folded (CODA_GPT2_FOLD): no row finishers. mu1/rs1 and mu2/rs2 hold the
 * producers' rowsum partials of x and x^2 (M x ceil(d/tile_n)); the
 * consumers (gpt2_ln_linear_folded, gpt2_ln_linear_gelu_folded) and the
 * LayerNorm-backward dgrads (gpt2_ln_bwd_folded) compute mean and centered
 * rstd from them per row, and the dgrads read the s1/s2 row-dot partials
 * of gpt2_gelu_bwd and gpt2_qkv_dots directly. Launches that remain: the
 * fold GEMMs, the ln1 map, and the 8 colsum finishers of the backward
 * (dbproj, dbfc, dln2_g, dln2_b, dbo, dbqkv, dln1_g, dln1_b): column sums
 * over all rows, which no later GEMM reads.
 *
 * CODA_GPT2_GRAD_ACT: dwqkv, dwo, dwfc, dwproj are of the activation dtype
 * (same steps; the plain weight-gradient GEMMs round once into them). */
#include "coda_nn.h"
#include "base/internal.h"
#include "nn/gpt2.h"
#include "nn/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

coda_gpt2_config coda_gpt2_default_config(void) {
  coda_gpt2_config c;
  memset(&c, 0, sizeof c);
  c.dim = 64;
  c.n_heads = 4;
  c.ffn_dim = 256;
  c.batch = 2;
  c.seq = 16;
  c.dtype = CODA_BF16;
  c.norm_eps = 1e-5;
  c.vocab = 256;
  c.tiling.tile_m = 0;
  c.tiling.tile_n = 0;
  return c;
}

coda_status gpt2_check_config(coda_context ctx, const coda_gpt2_config *c, int head) {
  if (!c) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gpt2: null config");
  if (c->dim <= 0 || c->n_heads <= 0 || c->ffn_dim <= 0 || c->batch <= 0 || c->seq <= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gpt2: dim %lld, n_heads %lld, ffn_dim %lld, batch %lld, seq %lld "
                     "must all be positive",
                     (long long)c->dim, (long long)c->n_heads, (long long)c->ffn_dim,
                     (long long)c->batch, (long long)c->seq);
  if (c->dim % c->n_heads != 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gpt2: dim %lld is not a multiple of n_heads %lld",
                     (long long)c->dim, (long long)c->n_heads);
  if (c->dim > (1 << 24) || c->ffn_dim > (1 << 24) || c->n_heads > (1 << 16) ||
      c->batch > (1 << 24) || c->seq > (1 << 24) || c->batch * c->seq > ((int64_t)1 << 31))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "gpt2: sizes too large");
  if (c->dtype != CODA_BF16 && c->dtype != CODA_F64)
    return coda_fail(ctx, CODA_ERR_DTYPE, "gpt2: dtype %s (expected bf16 or f64)",
                     coda_dtype_name(c->dtype));
  if ((c->dtype == CODA_F64) != (coda_context_precision(ctx) == CODA_PRECISION_F64))
    return coda_fail(ctx, CODA_ERR_DTYPE,
                     "gpt2: %s storage needs a context of %s precision (f64 storage goes "
                     "with exact mode)",
                     coda_dtype_name(c->dtype), c->dtype == CODA_F64 ? "fp64" : "fp32");
  if (!(c->norm_eps >= 0.0) || !isfinite(c->norm_eps))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gpt2: norm_eps %g (expected finite and >= 0; 0 for 1e-5)", c->norm_eps);
  if (head && (c->vocab <= 0 || c->vocab > (1 << 24)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gpt2 head: vocab %lld (expected 1 to 16777216)", (long long)c->vocab);
  if (head && (c->flags & CODA_GPT2_FOLD))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gpt2 head: CODA_GPT2_FOLD is for the block plan (the head allows "
                     "CODA_GPT2_GRAD_ACT)");
  if (c->flags & ~(CODA_GPT2_FOLD | CODA_GPT2_GRAD_ACT))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gpt2: unknown flags 0x%x", c->flags);
  int tm = c->tiling.tile_m, tn = c->tiling.tile_n;
  if ((tm != 0 || tn != 0) &&
      (tm <= 0 || tn <= 0 || tm % 8 || tn % 8 || tm > 256 || tn > 256))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "gpt2: tiling %d x %d (tile_m and tile_n: positive multiples of 8, at "
                     "most 256; or both 0 for the default)",
                     tm, tn);
  return CODA_OK;
}

/* dx = dres + LN bwd(dz W) for LayerNorm n (1 or 2), with its gamma and
 * beta gradients finished; the bias partials pr<n> are left to the caller.
 * The statistics are mu<n>, rs<n> (folded: their rowsum partials), the row
 * dots those of the GEMM that read the norm: s1<t>, s2<t> (folded: the
 * partials p1<t>, p2<t>). */
static void ln_backward(coda_plan p, int fold, int n, char t, const char *label, const char *dz,
                        const char *w, const char *x, const char *dres, const char *dx, int64_t M,
                        int64_t d, coda_tiling tl) {
  const char *prog = fold ? "gpt2_ln_bwd_folded" : "gpt2_ln_bwd";
  char stats[96], binds[320], name[24];
  if (fold) snprintf(stats, sizeof stats, "psum=mu%d psq=rs%d p1=p1%c p2=p2%c", n, n, t, t);
  else snprintf(stats, sizeof stats, "mu=mu%d rs=rs%d s1=s1%c s2=s2%c", n, n, t, t);
  snprintf(binds, sizeof binds,
           "x=%s dres=%s gamma=ln%d_g beta=ln%d_b %s invd=invd dx=%s post=post%d pg=pg%d pb=pb%d pr=pr%d",
           x, dres, n, n, stats, dx, n, n, n, n);
  plan_gemm(p, CODA_PHASE_BACKWARD, label, prog, CODA_N, dz, CODA_N, w, tl, binds);
  snprintf(name, sizeof name, "dln%d_g", n);
  snprintf(binds, sizeof binds, "pg=pg%d dgamma=%s", n, name);
  plan_finish(p, CODA_PHASE_BACKWARD, name, prog, "dgamma", M, d, tl, binds);
  snprintf(name, sizeof name, "dln%d_b", n);
  snprintf(binds, sizeof binds, "pb=pb%d dbeta=%s", n, name);
  plan_finish(p, CODA_PHASE_BACKWARD, name, prog, "dbeta", M, d, tl, binds);
}

/* What the block plan's buffers and passes share: its dtypes (io the
 * activations', fp the statistics' and folded vectors', gw the weight
 * gradients'), shapes and whether the statistics are folded. */
typedef struct {
  int fold;
  coda_dtype io, fp, gw;
  int64_t d, H, F, M, N3, rcols;
} gpt2_shape;

/* The block's buffers: inputs, parameters, outputs, gradients, saved
 * activations and statistics, the backward's temporaries. */
static void gpt2_buffers(coda_plan p, const gpt2_shape *sh) {
  const int fold = sh->fold;
  const coda_dtype io = sh->io, fp = sh->fp, gw = sh->gw;
  const int64_t d = sh->d, H = sh->H, F = sh->F, M = sh->M, N3 = sh->N3, rcols = sh->rcols;
  /* inputs, parameters, outputs */
  plan_buffer(p, "x", io, M, d, PLAN_ROLE_INPUT);
  plan_buffer(p, "dx_out", io, M, d, PLAN_ROLE_INPUT);
  plan_buffer(p, "ln1_g", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "ln1_b", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "wqkv", io, N3, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "bqkv", io, 1, N3, PLAN_ROLE_PARAM);
  plan_buffer(p, "wo", io, d, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "bo", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "ln2_g", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "ln2_b", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "wfc", io, F, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "bfc", io, 1, F, PLAN_ROLE_PARAM);
  plan_buffer(p, "wproj", io, d, F, PLAN_ROLE_PARAM);
  plan_buffer(p, "bproj", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "x_out", io, M, d, PLAN_ROLE_OUTPUT);
  /* gradients */
  plan_buffer(p, "dx", io, M, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dln1_g", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dln1_b", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwqkv", gw, N3, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dbqkv", fp, 1, N3, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwo", gw, d, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dbo", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dln2_g", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dln2_b", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwfc", gw, F, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dbfc", fp, 1, F, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwproj", gw, d, F, PLAN_ROLE_GRAD);
  plan_buffer(p, "dbproj", fp, 1, d, PLAN_ROLE_GRAD);
  /* saved activations and statistics */
  plan_buffer(p, "cq", fp, 1, N3, PLAN_ROLE_SAVED);  /* Wqkv ln1_g */
  plan_buffer(p, "dq", fp, 1, N3, PLAN_ROLE_SAVED);  /* Wqkv ln1_b + bqkv */
  plan_buffer(p, "cf", fp, 1, F, PLAN_ROLE_SAVED);   /* Wfc ln2_g */
  plan_buffer(p, "df", fp, 1, F, PLAN_ROLE_SAVED);   /* Wfc ln2_b + bfc */
  plan_buffer(p, "h1", io, M, d, PLAN_ROLE_TEMP);
  plan_buffer(p, "mu1", fp, M, rcols, PLAN_ROLE_SAVED);
  plan_buffer(p, "rs1", fp, M, rcols, PLAN_ROLE_SAVED);
  plan_buffer(p, "qkv", io, M, N3, PLAN_ROLE_SAVED);
  plan_buffer(p, "o", io, M, d, PLAN_ROLE_SAVED);
  plan_buffer(p, "lse", fp, M, H, PLAN_ROLE_SAVED);
  plan_buffer(p, "x1", io, M, d, PLAN_ROLE_SAVED);
  plan_buffer(p, "h2", io, M, d, PLAN_ROLE_TEMP);
  plan_buffer(p, "mu2", fp, M, rcols, PLAN_ROLE_SAVED);
  plan_buffer(p, "rs2", fp, M, rcols, PLAN_ROLE_SAVED);
  plan_buffer(p, "u", io, M, F, PLAN_ROLE_SAVED);
  plan_buffer(p, "g", io, M, F, PLAN_ROLE_SAVED);
  /* backward temporaries */
  plan_buffer(p, "du", io, M, F, PLAN_ROLE_TEMP);
  if (!fold) {
    plan_buffer(p, "s1f", fp, M, 1, PLAN_ROLE_TEMP);
    plan_buffer(p, "s2f", fp, M, 1, PLAN_ROLE_TEMP);
  }
  plan_buffer(p, "dx1", io, M, d, PLAN_ROLE_TEMP);
  plan_buffer(p, "post2", io, M, d, PLAN_ROLE_TEMP);
  plan_buffer(p, "do", io, M, d, PLAN_ROLE_TEMP);
  plan_buffer(p, "dqkv", io, M, N3, PLAN_ROLE_TEMP);
  if (!fold) {
    plan_buffer(p, "s1q", fp, M, 1, PLAN_ROLE_TEMP);
    plan_buffer(p, "s2q", fp, M, 1, PLAN_ROLE_TEMP);
  }
  plan_buffer(p, "post1", io, M, d, PLAN_ROLE_TEMP);
  plan_buffer(p, "invd", fp, 1, 1, PLAN_ROLE_CONST);
  double invd = 1.0 / (double)d;
  plan_buffer_init(p, "invd", &invd);
}

/* The forward pass: the folded LayerNorm vectors, LN1 + qkv, attention,
 * out projection with the residual and the LN2 producer, fc + GELU,
 * projection with the residual. */
static void gpt2_forward(coda_plan p, const gpt2_shape *sh, coda_tiling tl,
                         const plan_attention *att) {
  const int fold = sh->fold;
  const int64_t d = sh->d, M = sh->M;
  const coda_phase FW = CODA_PHASE_FORWARD;
  plan_matmul(p, FW, "fold c1 = ln1_g Wqkv^T", CODA_N, "ln1_g", CODA_T, "wqkv", "cq", 1.0f, 0);
  plan_gemm(p, FW, "fold d1 = ln1_b Wqkv^T + bqkv", "gpt2_fold_bias", CODA_N, "ln1_b",
            CODA_T, "wqkv", tl, "b=bqkv dv=dq");
  plan_matmul(p, FW, "fold c2 = ln2_g Wfc^T", CODA_N, "ln2_g", CODA_T, "wfc", "cf", 1.0f, 0);
  plan_gemm(p, FW, "fold d2 = ln2_b Wfc^T + bfc", "gpt2_fold_bias", CODA_N, "ln2_b",
            CODA_T, "wfc", tl, "b=bfc dv=df");
  if (fold) {
    plan_map(p, FW, "ln1 stats, h1 = x ln1_g", "gpt2_ln_stats", M, d, tl,
             "x=x gamma=ln1_g h=h1 psum=mu1 psq=rs1");
    plan_gemm(p, FW, "qkv = LN1(x) Wqkv^T + bqkv", "gpt2_ln_linear_folded", CODA_N, "h1",
              CODA_T, "wqkv", tl, "psum=mu1 psq=rs1 invd=invd c=cq dv=dq z=qkv");
  } else {
    plan_map(p, FW, "ln1 stats, h1 = x ln1_g", "gpt2_ln_stats", M, d, tl,
             "x=x gamma=ln1_g h=h1 psum=ps1 psq=pq1");
    plan_finish(p, FW, "mu1", "gpt2_ln_stats", "mu", M, d, tl, "psum=ps1 mu=mu1");
    plan_finish(p, FW, "rs1", "gpt2_ln_stats", "rs", M, d, tl, "psum=ps1 psq=pq1 rs=rs1");
    plan_gemm(p, FW, "qkv = LN1(x) Wqkv^T + bqkv", "gpt2_ln_linear", CODA_N, "h1", CODA_T,
              "wqkv", tl, "mu=mu1 rs=rs1 c=cq dv=dq z=qkv");
  }
  plan_attention_fwd(p, FW, "attention", att, "qkv", "o", "lse");
  if (fold) {
    plan_gemm(p, FW, "x1 = x + o Wo^T + bo, ln2 producer", "gpt2_residual_ln", CODA_N, "o",
              CODA_T, "wo", tl, "bias=bo res=x gamma=ln2_g x=x1 h=h2 psum=mu2 psq=rs2");
    plan_gemm(p, FW, "u = LN2(x1) Wfc^T + bfc, g = gelu(u)", "gpt2_ln_linear_gelu_folded",
              CODA_N, "h2", CODA_T, "wfc", tl, "psum=mu2 psq=rs2 invd=invd c=cf dv=df u=u g=g");
  } else {
    plan_gemm(p, FW, "x1 = x + o Wo^T + bo, ln2 producer", "gpt2_residual_ln", CODA_N, "o",
              CODA_T, "wo", tl, "bias=bo res=x gamma=ln2_g x=x1 h=h2 psum=ps2 psq=pq2");
    plan_finish(p, FW, "mu2", "gpt2_residual_ln", "mu", M, d, tl, "psum=ps2 mu=mu2");
    plan_finish(p, FW, "rs2", "gpt2_residual_ln", "rs", M, d, tl, "psum=ps2 psq=pq2 rs=rs2");
    plan_gemm(p, FW, "u = LN2(x1) Wfc^T + bfc, g = gelu(u)", "gpt2_ln_linear_gelu", CODA_N,
              "h2", CODA_T, "wfc", tl, "mu=mu2 rs=rs2 c=cf dv=df u=u g=g");
  }
  plan_gemm(p, FW, "x_out = x1 + g Wproj^T + bproj", "gpt2_bias_residual", CODA_N, "g",
            CODA_T, "wproj", tl, "bias=bproj res=x1 y=x_out");
}

/* The backward pass, in the forward's reverse order. */
static void gpt2_backward(coda_plan p, const gpt2_shape *sh, coda_tiling tl,
                          const plan_attention *att) {
  const int fold = sh->fold;
  const int64_t d = sh->d, F = sh->F, M = sh->M, N3 = sh->N3;
  const coda_phase BW = CODA_PHASE_BACKWARD;
  plan_map(p, BW, "dbproj = colsum(dx_out)", "gpt2_colsum", M, d, tl, "t=dx_out p=pbp");
  plan_finish(p, BW, "dbproj", "gpt2_colsum", "s", M, d, tl, "p=pbp s=dbproj");
  plan_matmul(p, BW, "dWproj = dx_out^T g", CODA_T, "dx_out", CODA_N, "g", "dwproj", 1.0f, 0);
  plan_gemm(p, BW, "du = (dx_out Wproj) gelu'(u), ln2 dots", "gpt2_gelu_bwd", CODA_N,
            "dx_out", CODA_N, "wproj", tl, "u=u c=cf dv=df du=du p1=p1f p2=p2f pb=pbf");
  const char *lnb = fold ? "gpt2_ln_bwd_folded" : "gpt2_ln_bwd";
  if (!fold) {
    plan_finish(p, BW, "s1 (ln2)", "gpt2_gelu_bwd", "s1", M, F, tl, "p1=p1f s1=s1f");
    plan_finish(p, BW, "s2 (ln2)", "gpt2_gelu_bwd", "s2", M, F, tl, "p2=p2f s2=s2f");
  }
  plan_finish(p, BW, "dbfc", "gpt2_gelu_bwd", "db", M, F, tl, "pb=pbf db=dbfc");
  ln_backward(p, fold, 2, 'f', "dx1 = dx_out + LN2 bwd(du Wfc)", "du", "wfc", "x1", "dx_out", "dx1",
              M, d, tl);
  plan_finish(p, BW, "dbo = colsum(dx1)", lnb, "dbias", M, d, tl, "pr=pr2 dbias=dbo");
  plan_matmul(p, BW, "dWfc = du^T LN2(x1)", CODA_T, "du", CODA_N, "post2", "dwfc", 1.0f, 0);
  plan_matmul(p, BW, "dWo = dx1^T o", CODA_T, "dx1", CODA_N, "o", "dwo", 1.0f, 0);
  plan_matmul(p, BW, "do = dx1 Wo", CODA_N, "dx1", CODA_N, "wo", "do", 1.0f, 0);
  plan_attention_bwd(p, BW, "attention backward", att, "qkv", "o", "lse", "do", "dqkv");
  plan_map(p, BW, "ln1 dots, dbqkv", "gpt2_qkv_dots", M, N3, tl,
           "dz=dqkv z=qkv c=cq dv=dq p1=p1q p2=p2q pb=pbq");
  if (!fold) {
    plan_finish(p, BW, "s1 (ln1)", "gpt2_qkv_dots", "s1", M, N3, tl, "p1=p1q s1=s1q");
    plan_finish(p, BW, "s2 (ln1)", "gpt2_qkv_dots", "s2", M, N3, tl, "p2=p2q s2=s2q");
  }
  plan_finish(p, BW, "dbqkv", "gpt2_qkv_dots", "db", M, N3, tl, "pb=pbq db=dbqkv");
  ln_backward(p, fold, 1, 'q', "dx = dx1 + LN1 bwd(dqkv Wqkv)", "dqkv", "wqkv", "x", "dx1", "dx",
              M, d, tl);
  plan_matmul(p, BW, "dWqkv = dqkv^T LN1(x)", CODA_T, "dqkv", CODA_N, "post1", "dwqkv", 1.0f,
              0);
}

coda_status coda_gpt2_block_plan(coda_context ctx, const coda_gpt2_config *cfg,
                                 coda_plan *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gpt2: null output");
  *out = NULL;
  coda_status st = gpt2_check_config(ctx, cfg, 0);
  if (st != CODA_OK) return st;
  const int64_t d = cfg->dim, H = cfg->n_heads, hd = d / H, F = cfg->ffn_dim;
  const int64_t M = cfg->batch * cfg->seq, N3 = 3 * d;
  const coda_dtype io = cfg->dtype;
  /* statistics, folded vectors and weight gradients */
  const coda_dtype fp = io == CODA_F64 ? CODA_F64 : CODA_F32;
  /* the GEMM weights' gradients: plain GEMM outputs, so they can be
   * stored in the activation dtype (CODA_GPT2_GRAD_ACT) */
  const coda_dtype gw = (cfg->flags & CODA_GPT2_GRAD_ACT) ? io : fp;
  coda_tiling tl = cfg->tiling;
  /* a GPU computes partials for its own tiling only */
  if (tl.tile_m == 0 && tl.tile_n == 0 && coda_context_backend(ctx) != CODA_BACKEND_CPU &&
      (st = coda_preferred_tiling(ctx, NULL, cfg->batch * cfg->seq, d, d, &tl)) != CODA_OK)
    return st;
  if (tl.tile_m == 0) tl.tile_m = 128;
  if (tl.tile_n == 0) tl.tile_n = 128;
  const int fold = (cfg->flags & CODA_GPT2_FOLD) != 0;
  /* folded: the row statistics' M x T rowsum partials (of x, of x^2) */
  const int64_t rcols = fold ? (d + tl.tile_n - 1) / tl.tile_n : 1;
  const gpt2_shape sh = {fold, io, fp, gw, d, H, F, M, N3, rcols};

  coda_plan p;
  st = plan_create(ctx, "gpt2_block", &p);
  if (st != CODA_OK) return st;
  plan_set_norm_eps(p, cfg->norm_eps == 0.0 ? 1e-5 : cfg->norm_eps);

  gpt2_buffers(p, &sh);

  plan_attention att;
  memset(&att, 0, sizeof att);
  att.batch = cfg->batch;
  att.seq = cfg->seq;
  att.n_heads = (int)H;
  att.n_kv_heads = (int)H;
  att.head_dim = (int)hd;

  /* ---- forward ---- */
  gpt2_forward(p, &sh, tl, &att);

  /* ---- backward ---- */
  gpt2_backward(p, &sh, tl, &att);

  st = plan_status(p);
  if (st != CODA_OK) {
    coda_plan_destroy(p);
    return st;
  }
  *out = p;
  return CODA_OK;
}
