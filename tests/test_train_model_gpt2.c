/* The host reference model of the GPT-2 family: its loss and every
 * gradient against an independent fp64 forward and backward (the block of
 * src/nn/ref_gpt2.c per layer, the learned positions, the final LayerNorm
 * and the tied head written out here in double), its gradients against
 * central finite differences of its own loss, the family's parameter list
 * and sizes, config refusals naming what is allowed, the plan engine
 * taking the family, and a checkpoint round trip. */
#define _POSIX_C_SOURCE 200809L
#include "family_test_util.h"
#include "nn/ref_gpt2.h"

enum { V = 29, D = 16, L = 2, H = 4, F = 40, S = 8, B = 2, T = 7 };

static coda_model_config gpt2_config(void) {
  coda_model_config c = {V, D, L, H, H, F, S, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0},
                         CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};
  return c;
}

/* The engine tests' model (family_step_model) and a batch of B x T. */
static coda_model *make_model(coda_context ctx, int32_t *in, int32_t *tg) {
  coda_model_config c = gpt2_config();
  return family_step_model(ctx, &c, 0.25, in, tg, B * T);
}

static double *to_f64(const coda_model *m, const char *name) {
  const coda_param *p = coda_model_find(m, name);
  CHECK(p != NULL);
  const float *w = coda_model_weights((coda_model *)m) + p->offset;
  double *d = malloc(p->size * sizeof *d);
  for (size_t i = 0; i < p->size; i++) d[i] = w[i];
  return d;
}

static void close_grad(const coda_model *m, const char *name, const double *want, double tol) {
  family_close_grad("gpt2", m, name, want, tol);
}

static const char *layer_names[GPT2_REF_NPARAMS] = {
    "attention_norm.weight", "attention_norm.bias", "attention.wqkv.weight",
    "attention.wqkv.bias",   "attention.wo.weight", "attention.wo.bias",
    "ffn_norm.weight",       "ffn_norm.bias",       "feed_forward.wfc.weight",
    "feed_forward.wfc.bias", "feed_forward.wproj.weight", "feed_forward.wproj.bias"};

/* The whole model in fp64, forward and backward, against the fp32 engine. */
static void against_fp64(coda_context ctx) {
  int32_t in[B * T], tg[B * T];
  coda_model *m = make_model(ctx, in, tg);
  if (!m) return;
  const float gs = 1.0f;
  double loss;
  int64_t nv;
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, gs, &loss, &nv) == CODA_OK);
  const int M = B * T;
  gpt2_ref_dims dm = {B, T, D, H, F, 1e-5, CODA_F64};
  double *wte = to_f64(m, "tok_embeddings.weight"), *wpe = to_f64(m, "pos_embeddings.weight");
  double *x = malloc(sizeof(double) * M * D);
  for (int i = 0; i < M; i++)
    for (int k = 0; k < D; k++) x[i * D + k] = wte[in[i] * D + k] + wpe[(i % T) * D + k];
  gpt2_ref_params w[L], g[L];
  gpt2_ref_acts a[L];
  char nm[96];
  for (int li = 0; li < L; li++) {
    CHECK(gpt2_ref_params_alloc(&dm, &w[li]) == 0 && gpt2_ref_params_alloc(&dm, &g[li]) == 0);
    CHECK(gpt2_ref_acts_alloc(&dm, &a[li]) == 0);
    for (int k = 0; k < GPT2_REF_NPARAMS; k++) {
      long n;
      double *dst = gpt2_ref_param(&w[li], &dm, k, &n, NULL);
      snprintf(nm, sizeof nm, "layers.%d.%s", li, layer_names[k]);
      double *src = to_f64(m, nm);
      CHECK_EQ_INT((int64_t)coda_model_find(m, nm)->size, n);
      memcpy(dst, src, sizeof(double) * (size_t)n);
      free(src);
    }
    gpt2_ref_forward(&dm, &w[li], li ? a[li - 1].y : x, &a[li]);
  }
  double *gf = to_f64(m, "norm.weight"), *bf = to_f64(m, "norm.bias");
  double *hf = malloc(sizeof(double) * M * D), *muf = malloc(sizeof(double) * M),
         *rf = malloc(sizeof(double) * M), *dl = calloc((size_t)M * V, sizeof(double));
  gpt2_ref_layernorm(M, D, a[L - 1].y, gf, bf, 1e-5, hf, muf, rf);
  int valid = 0;
  for (int i = 0; i < M; i++) valid += tg[i] >= 0;
  double want = 0;
  for (int i = 0; i < M; i++) {
    if (tg[i] < 0) continue;
    double lg[V], mx = -INFINITY, se = 0;
    for (int v = 0; v < V; v++) {
      lg[v] = 0;
      for (int k = 0; k < D; k++) lg[v] += hf[i * D + k] * wte[v * D + k];
      mx = fmax(mx, lg[v]);
    }
    for (int v = 0; v < V; v++) se += exp(lg[v] - mx);
    want += mx + log(se) - lg[tg[i]];
    for (int v = 0; v < V; v++) dl[i * V + v] = exp(lg[v] - mx) / se / valid;
    dl[i * V + tg[i]] -= 1.0 / valid;
  }
  want /= valid;
  CHECK_EQ_INT(nv, valid);
  CHECK_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "gpt2 loss %.9g, fp64 %.9g", loss, want);
  /* backward: the tied head, the final norm, the layers, the embeddings */
  double *gwte = calloc((size_t)V * D, sizeof(double)), *gwpe = calloc((size_t)S * D, sizeof(double));
  double *dh = calloc((size_t)M * D, sizeof(double)), *dx = malloc(sizeof(double) * M * D),
         *dgf = calloc(D, sizeof(double)), *dbf = calloc(D, sizeof(double));
  for (int i = 0; i < M; i++)
    for (int v = 0; v < V; v++)
      for (int k = 0; k < D; k++) {
        gwte[v * D + k] += dl[i * V + v] * hf[i * D + k];
        dh[i * D + k] += dl[i * V + v] * wte[v * D + k];
      }
  gpt2_ref_layernorm_bwd(M, D, a[L - 1].y, gf, muf, rf, dh, dx, dgf, dbf);
  close_grad(m, "norm.weight", dgf, 1e-4);
  close_grad(m, "norm.bias", dbf, 1e-4);
  for (int li = L - 1; li >= 0; li--) {
    double *dx0 = malloc(sizeof(double) * M * D);
    gpt2_ref_backward(&dm, &w[li], &a[li], dx, dx0, &g[li]);
    memcpy(dx, dx0, sizeof(double) * M * D);
    free(dx0);
    for (int k = 0; k < GPT2_REF_NPARAMS; k++) {
      snprintf(nm, sizeof nm, "layers.%d.%s", li, layer_names[k]);
      close_grad(m, nm, gpt2_ref_param(&g[li], &dm, k, NULL, NULL), 1e-4);
    }
  }
  for (int i = 0; i < M; i++)
    for (int k = 0; k < D; k++) {
      gwte[in[i] * D + k] += dx[i * D + k];
      gwpe[(i % T) * D + k] += dx[i * D + k];
    }
  close_grad(m, "tok_embeddings.weight", gwte, 1e-4);
  close_grad(m, "pos_embeddings.weight", gwpe, 1e-4);
  /* the last position's logits of the sampling path are the loss path's */
  float last[V];
  CHECK(coda_model_last_logits(ctx, m, in, T, last) == CODA_OK);
  for (int v = 0; v < V; v++) {
    double l = 0;
    for (int k = 0; k < D; k++) l += hf[(T - 1) * D + k] * wte[v * D + k];
    CHECK_MSG(fabs(last[v] - l) <= 1e-4 * (1 + fabs(l)), "gpt2 last logit %d: %.7g, fp64 %.7g", v,
              last[v], l);
  }
  for (int li = 0; li < L; li++) {
    gpt2_ref_params_free(&w[li]);
    gpt2_ref_params_free(&g[li]);
    gpt2_ref_acts_free(&a[li]);
  }
  free(wte); free(wpe); free(x); free(gf); free(bf); free(hf); free(muf); free(rf); free(dl);
  free(gwte); free(gwpe); free(dh); free(dx); free(dgf); free(dbf);
  coda_model_destroy(m);
}

/* Every parameter's gradient along a random direction against central
 * differences of the loss (the engine's own forward). */
static void finite_differences(coda_context ctx) {
  int32_t in[B * T], tg[B * T];
  coda_model *m = make_model(ctx, in, tg);
  if (!m) return;
  /* wte, wpe; 12 per layer (6 weights, 6 biases); the final norm's two */
  CHECK_EQ_INT(coda_model_num_params(m), 2 + 12 * L + 2);
  const int64_t per = 4 * D + 3 * D * D + 3 * D + D * D + D + F * D + F + D * F + D;
  CHECK_EQ_INT((int64_t)coda_model_size(m), (int64_t)V * D + S * D + L * per + 2 * D);
  family_finite_differences("gpt2", ctx, m, in, tg, B, T, 2e-3);
  coda_model_destroy(m);
}

static void refusals(coda_context ctx) {
  coda_model_config c = gpt2_config();
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c.kv_heads = 2;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "gpt2") && strstr(coda_last_error(ctx), "kv-heads 2"));
  c = gpt2_config();
  c.tied = 0;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "gpt2") && strstr(coda_last_error(ctx), "tied"));
  c = gpt2_config();
  c.rope.type = CODA_ROPE_LINEAR;
  c.rope.factor = 2.0;
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "gpt2") && strstr(coda_last_error(ctx), "RoPE"));
  c = gpt2_config();
  c.head_dim = 8; /* 4 heads x 8 != dim 16 */
  CHECK(coda_model_config_check(ctx, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "gpt2") && strstr(coda_last_error(ctx), "head_dim 8"));
  /* no RoPE: an odd head width is fine (dim 12 over 4 heads) */
  c = gpt2_config();
  c.dim = 12;
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  /* the plan engine takes GPT-2 (its block and head plans; compared with
   * this engine in tests/test_train_plans.c) */
  c = gpt2_config();
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_PLANS, &m) == CODA_OK && m != NULL);
  coda_model_destroy(m);
  coda_model_family f;
  CHECK(coda_model_family_from_name(ctx, "gpt2", &f) == CODA_OK && f == CODA_FAMILY_GPT2);
  CHECK(!strcmp(coda_model_family_name(CODA_FAMILY_GPT2), "gpt2"));
}

static void checkpoint(coda_context ctx) {
  coda_model_config c = gpt2_config(), c2;
  coda_model *b = family_checkpoint_round_trip(ctx, &c, &c2);
  if (!b) return;
  CHECK(c2.family == CODA_FAMILY_GPT2 && c2.tied && c2.kv_heads == H && c2.seq == S);
  /* the init: LayerNorm weights 1, every bias 0 */
  const coda_param *q = coda_model_find(b, "layers.1.attention.wqkv.bias");
  const coda_param *gn = coda_model_find(b, "layers.0.ffn_norm.weight");
  CHECK(q && gn && coda_model_weights(b)[q->offset + 5] == 0.0f &&
        coda_model_weights(b)[gn->offset + 3] == 1.0f);
  coda_model_destroy(b);
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_model_gpt2");
  against_fp64(ctx);
  finite_differences(ctx);
  refusals(ctx);
  checkpoint(ctx);
  return family_test_end(ctx);
}
