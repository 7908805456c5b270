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
#include "family_test_util.h"

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

typedef struct {
  const coda_model *m;
  const double *w; /* the flat weights in double, the model's layout */
  const coda_model_config *c;
} ref64;

static const double *P(const ref64 *r, const char *fmt, int li) {
  char nm[96];
  snprintf(nm, sizeof nm, fmt, li);
  const coda_param *p = coda_model_find(r->m, nm);
  CHECK_MSG(p != NULL, "no parameter %s", nm);
  return r->w + (p ? p->offset : 0);
}

/* y = v / sqrt(mean(v²) + eps) · (1 + w) over n entries */
static void norm1p(const double *v, const double *w, double *y, int n, double eps) {
  double ss = 0;
  for (int k = 0; k < n; k++) ss += v[k] * v[k];
  const double r = 1.0 / sqrt(ss / n + eps);
  for (int k = 0; k < n; k++) y[k] = v[k] * r * (1.0 + w[k]);
}

static double gelu_tanh(double u) {
  return 0.5 * u * (1.0 + tanh(sqrt(2.0 / acos(-1.0)) * (u + 0.044715 * u * u * u)));
}

/* out (n x rows) = in (n x cols) · Wᵀ, W rows x cols */
static void linear(const double *in, const double *Wt, double *out, int n, int rows, int cols) {
  for (int i = 0; i < n; i++)
    for (int o = 0; o < rows; o++) {
      double s = 0;
      for (int k = 0; k < cols; k++) s += in[i * cols + k] * Wt[o * cols + k];
      out[i * rows + o] = s;
    }
}

/* The mean loss over valid targets with the window `win` on local layers;
 * last (V) gets sequence 0's last position's logits when non-NULL. */
static double forward64(const ref64 *r, const int32_t *in, const int32_t *tg, int win,
                        double *last) {
  const coda_model_config *c = r->c;
  enum { M = B * T, NQ = (H + 2 * HK) * HD };
  static double x[M * D], h[M * D], qkv[M * NQ], o[M * H * HD], a[M * D], z[M * 2 * F],
      y[M * F], n[M * D];
  const double *emb = P(r, "tok_embeddings.weight", 0);
  for (int i = 0; i < M; i++)
    for (int k = 0; k < D; k++) x[i * D + k] = emb[in[i] * D + k] * sqrt((double)D);
  for (int li = 0; li < L; li++) {
    const int local = (li + 1) % c->sliding_pattern != 0;
    const double base = local ? c->rope_local_theta : c->rope_theta;
    for (int i = 0; i < M; i++)
      norm1p(x + i * D, P(r, "layers.%d.attention_norm.weight", li), h + i * D, D, c->norm_eps);
    linear(h, P(r, "layers.%d.attention.wqkv.weight", li), qkv, M, NQ, D);
    for (int i = 0; i < M; i++) {
      const int t = i % T;
      for (int hh = 0; hh < H + HK; hh++) {
        double *q = qkv + i * NQ + hh * HD, tmp[HD];
        norm1p(q, P(r, hh < H ? "layers.%d.attention.q_norm.weight"
                              : "layers.%d.attention.k_norm.weight", li), tmp, HD, c->norm_eps);
        for (int j = 0; j < HD / 2; j++) { /* pairs (2j, 2j+1): coda's row order */
          const double th = t * pow(base, -2.0 * j / HD);
          q[2 * j] = tmp[2 * j] * cos(th) - tmp[2 * j + 1] * sin(th);
          q[2 * j + 1] = tmp[2 * j] * sin(th) + tmp[2 * j + 1] * cos(th);
        }
      }
    }
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < H; hh++) {
        const int kv = hh / (H / HK);
        for (int t = 0; t < T; t++) {
          double sc[T], mx = -INFINITY, se = 0;
          const double *q = qkv + (b * T + t) * NQ + hh * HD;
          for (int s = 0; s < T; s++) {
            /* HF: causal (kv <= q) and, on a local layer, kv > q - window */
            const int seen = s <= t && (!local || s > t - win);
            sc[s] = -INFINITY;
            if (!seen) continue;
            const double *k = qkv + (b * T + s) * NQ + (H + kv) * HD;
            double d = 0;
            for (int e = 0; e < HD; e++) d += q[e] * k[e];
            sc[s] = d / sqrt(c->attn_scalar);
            mx = fmax(mx, sc[s]);
          }
          for (int s = 0; s < T; s++) se += sc[s] == -INFINITY ? 0 : exp(sc[s] - mx);
          double *orow = o + (b * T + t) * H * HD + hh * HD;
          for (int e = 0; e < HD; e++) orow[e] = 0;
          for (int s = 0; s < T; s++) {
            if (sc[s] == -INFINITY) continue;
            const double pr = exp(sc[s] - mx) / se;
            const double *v = qkv + (b * T + s) * NQ + (H + HK + kv) * HD;
            for (int e = 0; e < HD; e++) orow[e] += pr * v[e];
          }
        }
      }
    linear(o, P(r, "layers.%d.attention.wo.weight", li), a, M, D, H * HD);
    for (int i = 0; i < M; i++) {
      norm1p(a + i * D, P(r, "layers.%d.attention.post_norm.weight", li), n + i * D, D,
             c->norm_eps);
      for (int k = 0; k < D; k++) x[i * D + k] += n[i * D + k];
      norm1p(x + i * D, P(r, "layers.%d.ffn_norm.weight", li), h + i * D, D, c->norm_eps);
    }
    linear(h, P(r, "layers.%d.feed_forward.w13.weight", li), z, M, 2 * F, D);
    for (int i = 0; i < M * F; i++) y[i] = gelu_tanh(z[2 * i]) * z[2 * i + 1];
    linear(y, P(r, "layers.%d.feed_forward.w2.weight", li), a, M, D, F);
    for (int i = 0; i < M; i++) {
      norm1p(a + i * D, P(r, "layers.%d.feed_forward.post_norm.weight", li), n + i * D, D,
             c->norm_eps);
      for (int k = 0; k < D; k++) x[i * D + k] += n[i * D + k];
    }
  }
  double loss = 0;
  int valid = 0;
  for (int i = 0; i < M; i++) {
    double hf[D], lg[V], mx = -INFINITY, se = 0;
    norm1p(x + i * D, P(r, "norm.weight", 0), hf, D, c->norm_eps);
    for (int v = 0; v < V; v++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += hf[k] * emb[v * D + k];
      lg[v] = c->logit_softcap > 0 ? c->logit_softcap * tanh(s / c->logit_softcap) : s;
      mx = fmax(mx, lg[v]);
    }
    if (last && i == T - 1) memcpy(last, lg, sizeof lg);
    if (tg[i] < 0) continue;
    for (int v = 0; v < V; v++) se += exp(lg[v] - mx);
    loss += mx + log(se) - lg[tg[i]];
    valid++;
  }
  return loss / valid;
}

/* The engine (fp32) against the fp64 model: the loss, the last logits,
 * and every parameter's gradient against central differences of the fp64
 * loss (h = 1e-5: their error is far below the tolerance). */
static void against_fp64(coda_context ctx) {
  coda_model_config c = gemma_config();
  int32_t in[B * T], tg[B * T];
  coda_model *m = make_model(ctx, &c, in, tg);
  if (!m) return;
  double loss;
  int64_t nv;
  coda_model_zero_grad(m);
  CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &loss, &nv) == CODA_OK);
  const size_t n = coda_model_size(m);
  double *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g);
  for (size_t i = 0; i < n; i++) w[i] = coda_model_weights(m)[i];
  ref64 r = {m, w, &c};
  double last[V];
  const double want = forward64(&r, in, tg, W, last);
  CHECK_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "gemma3 loss %.9g, fp64 %.9g", loss, want);
  /* the window's edge is exercised: one wider or narrower is another loss */
  const double wider = forward64(&r, in, tg, W + 1, NULL), narrower = forward64(&r, in, tg, W - 1, NULL);
  CHECK_MSG(fabs(wider - want) > 1e-3 * fabs(want) && fabs(narrower - want) > 1e-3 * fabs(want),
            "the window's edge does not change the loss (%.9g, %.9g, %.9g)", narrower, want,
            wider);
  for (size_t i = 0; i < n; i++) {
    const double w0 = w[i], h = 1e-5;
    w[i] = w0 + h;
    const double lp = forward64(&r, in, tg, W, NULL);
    w[i] = w0 - h;
    const double lm = forward64(&r, in, tg, W, NULL);
    w[i] = w0;
    g[i] = (lp - lm) / (2 * h);
  }
  for (int pi = 0; pi < coda_model_num_params(m); pi++) {
    const coda_param *p = coda_model_param(m, pi);
    family_close_grad("gemma3", m, p->name, g + p->offset, 1e-4);
  }
  float got[V];
  CHECK(coda_model_last_logits(ctx, m, in, T, got) == CODA_OK);
  for (int v = 0; v < V; v++)
    CHECK_MSG(fabs(got[v] - last[v]) <= 1e-4 * (1 + fabs(last[v])),
              "gemma3 last logit %d: %.7g, fp64 %.7g", v, got[v], last[v]);
  free(w);
  free(g);
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

#define REFUSED(cfg, a, b)                                                        \
  do {                                                                            \
    CHECK(coda_model_config_check(ctx, &(cfg)) == CODA_ERR_INVALID_ARGUMENT);     \
    CHECK_MSG(strstr(coda_last_error(ctx), a) && strstr(coda_last_error(ctx), b), \
              "message: %s", coda_last_error(ctx));                               \
  } while (0)

static void refusals(coda_context ctx) {
  coda_model_config c = gemma_config();
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c.tied = 0; /* an untied head is fine (lm_head) */
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c = gemma_config();
  c.sliding_pattern = 0;
  REFUSED(c, "sliding_window 3", "sliding_pattern");
  c = gemma_config();
  c.rope.type = CODA_ROPE_LINEAR;
  c.rope.factor = 8.0;
  REFUSED(c, "gemma3", "RoPE scaling linear");
  c = gemma_config();
  c.logit_softcap = -1.0;
  REFUSED(c, "logit_softcap -1", "0 or > 0");
  c = gemma_config();
  c.head_dim = 7;
  REFUSED(c, "head dim 7", "even");
  /* the other families have none of Gemma 3's fields */
  c = gemma_config();
  c.family = CODA_FAMILY_QWEN3;
  REFUSED(c, "qwen3 family has none", "gemma3 takes them");
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
