/* The host reference model of the Gemma 3 family: its loss, logits and
 * every gradient against an independent fp64 model written out here (the
 * (1 + w) RMSNorms, the embedding × sqrt(dim), QK-norm, the two RoPE bases,
 * the sliding-window mask in HF's form kv > q − window, the post-norms,
 * GeGLU, the soft cap) whose gradient is taken by central differences in
 * double; the engine's gradients against finite differences of its own
 * loss; the window's edge (a window one wider or narrower gives another
 * loss); the parameter list; config refusals naming what is allowed; the
 * plan engine's refusal by name; a checkpoint round trip. */
#define _POSIX_C_SOURCE 200809L
#include "ref64_test_util.h"

/* head_dim 6 over dim 8 and 4 heads (GQA 2 kv heads); 3 layers, pattern 2:
 * layers 0 and 2 local (window 3 over T 9), layer 1 global */
enum { V = 19, D = 8, L = 3, H = 4, HK = 2, HD = 6, F = 12, S = 16, B = 2, T = 9, W = 3 };

static coda_model_config gemma_config(void) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = V; c.dim = D; c.layers = L; c.heads = H; c.kv_heads = HK; c.ffn = F; c.seq = S;
  c.tied = 1; c.rope_theta = 1e6; c.norm_eps = 1e-6; c.family = CODA_FAMILY_GEMMA3;
  c.head_dim = HD; c.sliding_window = W; c.sliding_pattern = 2; c.rope_local_theta = 1e4;
  c.attn_scalar = 10.0; c.logit_softcap = 3.0;
  return c;
}

/* The engine tests' model (family_step_model: the norm weights non-zero)
 * and a batch of B x T. */
static coda_model *make_model(coda_context ctx, const coda_model_config *c, int32_t *in,
                              int32_t *tg) {
  return family_step_model(ctx, c, 0.3, in, tg, B * T);
}

/* ------------------------------------------------ the fp64 model */

static double gelu_tanh(double u) {
  return 0.5 * u * (1.0 + tanh(sqrt(2.0 / acos(-1.0)) * (u + 0.044715 * u * u * u)));
}

/* The mean loss over valid targets with the window `win` on local layers;
 * last (V) gets sequence 0's last position's logits when non-NULL. */
static double forward64(const ref64 *r, const int32_t *in, const int32_t *tg, int win,
                        double *last) {
  const coda_model_config *c = r->c;
  enum { M = B * T, NQ = (H + 2 * HK) * HD };
  static double x[M * D], h[M * D], qkv[M * NQ], o[M * H * HD], a[M * D], z[M * 2 * F],
      y[M * F], n[M * D];
  ref64_embed(r, in, M, sqrt((double)D), x);
  for (int li = 0; li < L; li++) {
    const int local = (li + 1) % c->sliding_pattern != 0;
    const double base = local ? c->rope_local_theta : c->rope_theta;
    ref64_rmsnorm(x, ref64_param(r, "layers.%d.attention_norm.weight", li), 1, h, M, D,
                  c->norm_eps);
    ref64_linear(h, ref64_param(r, "layers.%d.attention.wqkv.weight", li), qkv, M, NQ, D, 0);
    for (int i = 0; i < M; i++)
      for (int hh = 0; hh < H + HK; hh++) { /* QK-norm, then RoPE at the layer's base */
        double *q = qkv + i * NQ + hh * HD;
        ref64_rmsnorm(q, ref64_param(r, hh < H ? "layers.%d.attention.q_norm.weight"
                                               : "layers.%d.attention.k_norm.weight", li),
                      1, q, 1, HD, c->norm_eps);
        ref64_rope(q, HD, i % T, base);
      }
    ref64_attention(r, qkv, o, B, T, local ? win : 0, c->attn_scalar);
    ref64_linear(o, ref64_param(r, "layers.%d.attention.wo.weight", li), a, M, D, H * HD, 0);
    ref64_rmsnorm(a, ref64_param(r, "layers.%d.attention.post_norm.weight", li), 1, n, M, D,
                  c->norm_eps);
    for (int k = 0; k < M * D; k++) x[k] += n[k];
    ref64_rmsnorm(x, ref64_param(r, "layers.%d.ffn_norm.weight", li), 1, h, M, D, c->norm_eps);
    ref64_linear(h, ref64_param(r, "layers.%d.feed_forward.w13.weight", li), z, M, 2 * F, D, 0);
    for (int i = 0; i < M * F; i++) y[i] = gelu_tanh(z[2 * i]) * z[2 * i + 1];
    ref64_linear(y, ref64_param(r, "layers.%d.feed_forward.w2.weight", li), a, M, D, F, 0);
    ref64_rmsnorm(a, ref64_param(r, "layers.%d.feed_forward.post_norm.weight", li), 1, n, M, D,
                  c->norm_eps);
    for (int k = 0; k < M * D; k++) x[k] += n[k];
  }
  /* the tied head */
  return ref64_loss(r, x, M, T, 1, ref64_param(r, "tok_embeddings.weight", 0), c->logit_softcap,
                    tg, last);
}

/* The engine (fp32) against the fp64 model (ref64_against_engine); the
 * window's edge: one wider or narrower is another loss. */
static void against_fp64(coda_context ctx) {
  coda_model_config c = gemma_config();
  int32_t in[B * T], tg[B * T];
  coda_model *m = make_model(ctx, &c, in, tg);
  if (!m) return;
  const int other[] = {W + 1, W - 1};
  ref64_against_engine("gemma3", ctx, m, &c, in, tg, B, T, forward64, W, other, 2);
  coda_model_destroy(m);
}

/* Every parameter's gradient along a random direction against central
 * differences of the engine's own loss; the parameter list and count. */
static void finite_differences(coda_context ctx) {
  coda_model_config c = gemma_config();
  int32_t in[B * T], tg[B * T];
  coda_model *m = make_model(ctx, &c, in, tg);
  if (!m) return;
  /* the embedding (tied head); 10 per layer; the final norm */
  CHECK_EQ_INT(coda_model_num_params(m), 1 + 10 * L + 1);
  const int64_t per = D + (H + 2 * HK) * HD * D + 2 * HD + D * H * HD + D + D + 2 * F * D +
                      D * F + D;
  CHECK_EQ_INT((int64_t)coda_model_size(m), (int64_t)V * D + L * per + D);
  CHECK_EQ_INT(coda_model_config_params(&c), (int64_t)coda_model_size(m));
  family_finite_differences("gemma3", ctx, m, in, tg, B, T, 5e-4);
  coda_model_destroy(m);
}

static void refusals(coda_context ctx) {
  coda_model_config c = gemma_config();
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c.tied = 0; /* an untied head is fine (lm_head) */
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c = gemma_config();
  c.sliding_pattern = 0;
  CONFIG_REFUSED(ctx, c, "sliding_window 3", "sliding_pattern");
  c = gemma_config();
  c.rope.type = CODA_ROPE_LINEAR;
  c.rope.factor = 8.0;
  CONFIG_REFUSED(ctx, c, "gemma3", "RoPE scaling linear");
  c = gemma_config();
  c.logit_softcap = -1.0;
  CONFIG_REFUSED(ctx, c, "logit_softcap -1", "0 or > 0");
  c = gemma_config();
  c.head_dim = 7;
  CONFIG_REFUSED(ctx, c, "head dim 7", "even");
  /* the other families have none of Gemma 3's fields */
  c = gemma_config();
  c.family = CODA_FAMILY_QWEN3;
  CONFIG_REFUSED(ctx, c, "qwen3 family has none", "gemma3 takes them");
  /* the plan engine takes the family (test_train_plans compares it) */
  c = gemma_config();
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_PLANS, &m) == CODA_OK && m);
  coda_model_destroy(m);
  coda_model_family f;
  CHECK(coda_model_family_from_name(ctx, "gemma3", &f) == CODA_OK && f == CODA_FAMILY_GEMMA3);
  CHECK(!strcmp(coda_model_family_name(CODA_FAMILY_GEMMA3), "gemma3"));
  /* the layer pattern: every second layer global */
  c = gemma_config();
  CHECK(coda_model_layer_window(&c, 0) == W && coda_model_layer_window(&c, 1) == 0 &&
        coda_model_layer_window(&c, 2) == W);
  CHECK(coda_model_layer_rope_theta(&c, 0) == 1e4 && coda_model_layer_rope_theta(&c, 1) == 1e6);
}

static void checkpoint(coda_context ctx) {
  coda_model_config c = gemma_config(), c2;
  coda_model *b = family_checkpoint_round_trip(ctx, &c, &c2);
  if (!b) return;
  CHECK(c2.family == CODA_FAMILY_GEMMA3 && c2.head_dim == HD && c2.kv_heads == HK &&
        c2.sliding_window == W && c2.sliding_pattern == 2 && c2.rope_local_theta == 1e4 &&
        c2.attn_scalar == 10.0 && c2.logit_softcap == 3.0 && c2.rope_theta == 1e6);
  /* the init: every norm weight 0 (the identity of (1 + w)) */
  const coda_param *q = coda_model_find(b, "layers.1.attention.q_norm.weight");
  const coda_param *pn = coda_model_find(b, "layers.2.feed_forward.post_norm.weight");
  CHECK(q && pn && coda_model_weights(b)[q->offset + 1] == 0.0f &&
        coda_model_weights(b)[pn->offset + 3] == 0.0f);
  coda_model_destroy(b);
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_model_gemma3");
  against_fp64(ctx);
  finite_differences(ctx);
  refusals(ctx);
  checkpoint(ctx);
  return family_test_end(ctx);
}
