/* The GPT-2 head as a plan: final LayerNorm (with bias), tied LM head and
 * mean cross-entropy (docs/plans.md, "GPT-2 head plan").
 *
 * The LayerNorm is reparameterized as in the block (gpt2_ln_linear): the
 * head GEMM runs on h = x gamma and corrects its accumulator with the row
 * statistics mu, rs and the per-column c = W gamma, dv = W beta, so the
 * normalized rows are never stored. The logits are not stored either: the
 * forward keeps only their row LSE and the target's logit
 * (gpt2_lm_head), and the backward recomputes them (gpt2_ce_bwd), which
 * also gives the LayerNorm backward's two row sums in the vocabulary
 * space; the dgrad is then gpt2_ln_bwd with a zero residual gradient.
 *
 * Forward:  fold c, dv (1 x V GEMMs) -> ln stats (map) + mu, rs ->
 *           lm head (lse partials, pick) + lse -> ce stats + lsum, cnt -> loss
 * Backward: ce bwd (dl, s1, s2) -> dx = LN bwd(dl W), post = LN(x),
 *           dlnf_g, dlnf_b -> dWout = dl^T post */
#include "coda_nn.h"
#include "base/internal.h"
#include "nn/gpt2.h"
#include "nn/plan.h"

#include <stdio.h>

static void constant(coda_plan p, const char *name, coda_dtype t, double v) {
  plan_buffer(p, name, t, 1, 1, PLAN_ROLE_CONST);
  plan_buffer_init(p, name, &v);
}

/* Its buffers: inputs, parameters, outputs and gradients, then what the
 * forward keeps for the backward and the temporaries. */
static void head_buffers(coda_plan p, coda_dtype io, coda_dtype fp, coda_dtype gw, int64_t M,
                         int64_t d, int64_t V) {
  plan_buffer(p, "x", io, M, d, PLAN_ROLE_INPUT);
  plan_buffer(p, "targets", CODA_I32, M, 1, PLAN_ROLE_INPUT);
  plan_buffer(p, "lnf_g", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "lnf_b", io, 1, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "wout", io, V, d, PLAN_ROLE_PARAM);
  plan_buffer(p, "loss", fp, 1, 1, PLAN_ROLE_OUTPUT);
  plan_buffer(p, "dx", io, M, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dlnf_g", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dlnf_b", fp, 1, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "dwout", gw, V, d, PLAN_ROLE_GRAD);
  plan_buffer(p, "c", fp, 1, V, PLAN_ROLE_SAVED);  /* Wout lnf_g */
  plan_buffer(p, "dv", fp, 1, V, PLAN_ROLE_SAVED); /* Wout lnf_b */
  plan_buffer(p, "h", io, M, d, PLAN_ROLE_SAVED);  /* x lnf_g */
  plan_buffer(p, "mu", fp, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "rs", fp, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "lse", fp, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "pick", fp, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "valid", fp, M, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "lsum", fp, 1, 1, PLAN_ROLE_TEMP);
  plan_buffer(p, "cnt", fp, 1, 1, PLAN_ROLE_SAVED);
  plan_buffer(p, "dl", io, M, V, PLAN_ROLE_TEMP);
  plan_buffer(p, "s1", fp, M, 1, PLAN_ROLE_TEMP);
  plan_buffer(p, "s2", fp, M, 1, PLAN_ROLE_TEMP);
  plan_buffer(p, "dres0", io, M, d, PLAN_ROLE_TEMP); /* the head adds no residual gradient */
  plan_buffer(p, "post", io, M, d, PLAN_ROLE_TEMP);
  constant(p, "invd", fp, 1.0 / (double)d);
  constant(p, "nv", fp, (double)V);
}

coda_status coda_gpt2_head_plan(coda_context ctx, const coda_gpt2_config *cfg,
                                coda_plan *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "gpt2 head: null output");
  *out = NULL;
  coda_status st = gpt2_check_config(ctx, cfg, 1);
  if (st != CODA_OK) return st;
  const int64_t d = cfg->dim, V = cfg->vocab, M = cfg->batch * cfg->seq;
  const coda_dtype io = cfg->dtype, fp = io == CODA_F64 ? CODA_F64 : CODA_F32;
  const coda_dtype gw = (cfg->flags & CODA_GPT2_GRAD_ACT) ? io : fp;
  coda_tiling tl = cfg->tiling;
  /* a GPU computes partials for its own tiling only */
  if (tl.tile_m == 0 && tl.tile_n == 0 && coda_context_backend(ctx) != CODA_BACKEND_CPU &&
      (st = coda_preferred_tiling(ctx, NULL, M, V, d, &tl)) != CODA_OK)
    return st;
  if (tl.tile_m == 0) tl.tile_m = 128;
  if (tl.tile_n == 0) tl.tile_n = 128;
  coda_tiling one = {tl.tile_m, 8}; /* the M x 1 and 1 x 1 bookkeeping passes */
  if (coda_context_backend(ctx) != CODA_BACKEND_CPU) one = tl;
  const coda_phase FW = CODA_PHASE_FORWARD, BW = CODA_PHASE_BACKWARD;

  coda_plan p;
  st = plan_create(ctx, "gpt2_head", &p);
  if (st != CODA_OK) return st;
  plan_set_norm_eps(p, cfg->norm_eps == 0.0 ? 1e-5 : cfg->norm_eps);
  head_buffers(p, io, fp, gw, M, d, V);

  plan_matmul(p, FW, "fold c = lnf_g Wout^T", CODA_N, "lnf_g", CODA_T, "wout", "c", 1.0f, 0);
  plan_matmul(p, FW, "fold dv = lnf_b Wout^T", CODA_N, "lnf_b", CODA_T, "wout", "dv", 1.0f, 0);
  plan_map(p, FW, "lnf stats, h = x lnf_g", "gpt2_ln_stats", M, d, tl,
           "x=x gamma=lnf_g h=h psum=psf psq=pqf");
  plan_finish(p, FW, "mu", "gpt2_ln_stats", "mu", M, d, tl, "psum=psf mu=mu");
  plan_finish(p, FW, "rs", "gpt2_ln_stats", "rs", M, d, tl, "psum=psf psq=pqf rs=rs");
  plan_gemm(p, FW, "lm_head_lse_pick", "gpt2_lm_head", CODA_N, "h", CODA_T, "wout", tl,
            "mu=mu rs=rs c=c dv=dv tgt=targets lp=lp pick=pick");
  plan_finish(p, FW, "lse", "gpt2_lm_head", "lse", M, V, tl, "lp=lp lse=lse");
  plan_map(p, FW, "ce_stats", "llama_ce_stats", M, 1, one,
           "lse=lse pick=pick tgt=targets nv=nv valid=valid lp=lpl cp=cpl");
  plan_finish(p, FW, "ce_lsum", "llama_ce_stats", "lsum", M, 1, one, "lp=lpl lsum=lsum");
  plan_finish(p, FW, "ce_cnt", "llama_ce_stats", "cnt", M, 1, one, "cp=cpl cnt=cnt");
  plan_map(p, FW, "ce_loss", "llama_ce_loss", 1, 1, one, "lsum=lsum cnt=cnt loss=loss");

  plan_gemm(p, BW, "lm_head_ce_bwd", "gpt2_ce_bwd", CODA_N, "h", CODA_T, "wout", tl,
            "mu=mu rs=rs c=c dv=dv tgt=targets lse=lse valid=valid cnt=cnt dl=dl p1=p1 p2=p2");
  plan_finish(p, BW, "s1", "gpt2_ce_bwd", "s1", M, V, tl, "p1=p1 s1=s1");
  plan_finish(p, BW, "s2", "gpt2_ce_bwd", "s2", M, V, tl, "p2=p2 s2=s2");
  plan_zero(p, BW, "dres0 = 0", "dres0");
  plan_gemm(p, BW, "dx = LNf bwd(dl Wout)", "gpt2_ln_bwd", CODA_N, "dl", CODA_N, "wout", tl,
            "x=x dres=dres0 gamma=lnf_g beta=lnf_b mu=mu rs=rs s1=s1 s2=s2 invd=invd dx=dx "
            "post=post pg=pgf pb=pbf pr=prf");
  plan_finish(p, BW, "dlnf_g", "gpt2_ln_bwd", "dgamma", M, d, tl, "pg=pgf dgamma=dlnf_g");
  plan_finish(p, BW, "dlnf_b", "gpt2_ln_bwd", "dbeta", M, d, tl, "pb=pbf dbeta=dlnf_b");
  plan_matmul(p, BW, "dWout = dl^T LNf(x)", CODA_T, "dl", CODA_N, "post", "dwout", 1.0f, 0);

  st = plan_status(p);
  if (st != CODA_OK) {
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
    coda_plan_destroy(p);
    return coda_fail(ctx, st, "%s", msg);
  }
  *out = p;
  return CODA_OK;
}
