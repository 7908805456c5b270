/* Mistral's sliding window on the llama family: every layer's query t sees
 * the keys j with t − sliding_window < j <= t (transformers' MistralModel:
 * the causal mask with sliding_window_overlay, kv > q − window). The
 * reference engine's loss, logits and every gradient against an
 * independent fp64 Llama written out here with that mask (gradients by
 * central differences in double); the window's edge (one wider or
 * narrower is another loss; one covering the sequence is no window, bit
 * for bit); every layer windowed, the RoPE base the global one; config
 * refusals naming what is allowed (a pattern, Gemma 3's other fields, a
 * window in qwen3 and gpt2); a checkpoint round trip; the Hugging Face
 * export (MistralForCausalLM with its sliding_window) read back, and the
 * import of Mistral and Llama configs with and without a window. */
#define _POSIX_C_SOURCE 200809L
#include "family_test_util.h"

/* 2 layers, 4 query heads over 2 kv heads of 4 (dim 16); window 3 over T 9 */
enum { V = 23, D = 16, L = 2, H = 4, HK = 2, HD = 4, F = 20, S = 16, B = 2, T = 9, W = 3 };

static coda_model_config mistral_config(void) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = V; c.dim = D; c.layers = L; c.heads = H; c.kv_heads = HK; c.ffn = F; c.seq = S;
  c.tied = 0; c.rope_theta = 1e4; c.norm_eps = 1e-5; c.family = CODA_FAMILY_LLAMA;
  c.sliding_window = W;
  return c;
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

/* y = v / sqrt(mean(v²) + eps) · w over n entries */
static void rmsnorm(const double *v, const double *w, double *y, int n, double eps) {
  double ss = 0;
  for (int k = 0; k < n; k++) ss += v[k] * v[k];
  const double r = 1.0 / sqrt(ss / n + eps);
  for (int k = 0; k < n; k++) y[k] = v[k] * r * w[k];
}

/* out (n x rows) = in (n x cols) · Wᵀ, W rows x cols; added to out when acc */
static void linear(const double *in, const double *Wt, double *out, int n, int rows, int cols,
                   int acc) {
  for (int i = 0; i < n; i++)
    for (int o = 0; o < rows; o++) {
      double s = 0;
      for (int k = 0; k < cols; k++) s += in[i * cols + k] * Wt[o * cols + k];
      out[i * rows + o] = acc ? out[i * rows + o] + s : s;
    }
}

/* One head's causal attention within window win (0: none) of the rows of
 * sequence b into o; HF's mask: kv <= q and kv > q − win. */
static void attend(const double *qkv, double *o, int b, int hh, int win) {
  enum { NQ = (H + 2 * HK) * HD };
  const int kv = hh / (H / HK);
  for (int t = 0; t < T; t++) {
    double sc[T], mx = -INFINITY, se = 0;
    const double *q = qkv + (b * T + t) * NQ + hh * HD;
    for (int s = 0; s < T; s++) {
      sc[s] = -INFINITY;
      if (s > t || (win > 0 && s <= t - win)) continue;
      const double *k = qkv + (b * T + s) * NQ + (H + kv) * HD;
      double d = 0;
      for (int e = 0; e < HD; e++) d += q[e] * k[e];
      sc[s] = d / sqrt((double)HD);
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

/* The mean loss over valid targets with window win on every layer; last
 * (V) gets sequence 0's last position's logits when non-NULL. */
static double forward64(const ref64 *r, const int32_t *in, const int32_t *tg, int win,
                        double *last) {
  const coda_model_config *c = r->c;
  enum { M = B * T, NQ = (H + 2 * HK) * HD };
  static double x[M * D], h[M * D], qkv[M * NQ], o[M * H * HD], z[M * 2 * F], y[M * F];
  const double *emb = P(r, "tok_embeddings.weight", 0);
  for (int i = 0; i < M; i++)
    for (int k = 0; k < D; k++) x[i * D + k] = emb[in[i] * D + k];
  for (int li = 0; li < L; li++) {
    for (int i = 0; i < M; i++)
      rmsnorm(x + i * D, P(r, "layers.%d.attention_norm.weight", li), h + i * D, D, c->norm_eps);
    linear(h, P(r, "layers.%d.attention.wqkv.weight", li), qkv, M, NQ, D, 0);
    for (int i = 0; i < M; i++)
      for (int hh = 0; hh < H + HK; hh++) {
        double *q = qkv + i * NQ + hh * HD;
        for (int j = 0; j < HD / 2; j++) { /* pairs (2j, 2j+1): coda's row order */
          const double th = (i % T) * pow(c->rope_theta, -2.0 * j / HD);
          const double a = q[2 * j], bb = q[2 * j + 1];
          q[2 * j] = a * cos(th) - bb * sin(th);
          q[2 * j + 1] = a * sin(th) + bb * cos(th);
        }
      }
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < H; hh++) attend(qkv, o, b, hh, win);
    linear(o, P(r, "layers.%d.attention.wo.weight", li), x, M, D, H * HD, 1);
    for (int i = 0; i < M; i++)
      rmsnorm(x + i * D, P(r, "layers.%d.ffn_norm.weight", li), h + i * D, D, c->norm_eps);
    linear(h, P(r, "layers.%d.feed_forward.w13.weight", li), z, M, 2 * F, D, 0);
    for (int i = 0; i < M * F; i++) y[i] = z[2 * i] / (1.0 + exp(-z[2 * i])) * z[2 * i + 1];
    linear(y, P(r, "layers.%d.feed_forward.w2.weight", li), x, M, D, F, 1);
  }
  const double *wout = P(r, "output.weight", 0);
  double loss = 0;
  int valid = 0;
  for (int i = 0; i < M; i++) {
    double hf[D], lg[V], mx = -INFINITY, se = 0;
    rmsnorm(x + i * D, P(r, "norm.weight", 0), hf, D, c->norm_eps);
    for (int v = 0; v < V; v++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += hf[k] * wout[v * D + k];
      lg[v] = s;
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
 * every parameter's gradient against central differences of the fp64
 * loss; the window's edge. */
static void against_fp64(coda_context ctx) {
  coda_model_config c = mistral_config();
  int32_t in[B * T], tg[B * T];
  coda_model *m = family_step_model(ctx, &c, 0.3, in, tg, B * T);
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
  CHECK_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "mistral loss %.9g, fp64 %.9g", loss, want);
  /* the window's edge is exercised: one wider or narrower, or none, is
   * another loss */
  const double wider = forward64(&r, in, tg, W + 1, NULL),
               narrower = forward64(&r, in, tg, W - 1, NULL), none = forward64(&r, in, tg, 0, NULL);
  CHECK_MSG(fabs(wider - want) > 1e-3 * fabs(want) && fabs(narrower - want) > 1e-3 * fabs(want) &&
                fabs(none - want) > 1e-3 * fabs(want),
            "the window's edge does not change the loss (%.9g, %.9g, %.9g; none %.9g)", narrower,
            want, wider, none);
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
    family_close_grad("mistral", m, p->name, g + p->offset, 1e-4);
  }
  float got[V];
  CHECK(coda_model_last_logits(ctx, m, in, T, got) == CODA_OK);
  for (int v = 0; v < V; v++)
    CHECK_MSG(fabs(got[v] - last[v]) <= 1e-4 * (1 + fabs(last[v])),
              "mistral last logit %d: %.7g, fp64 %.7g", v, got[v], last[v]);
  family_finite_differences("mistral", ctx, m, in, tg, B, T, 5e-4);
  free(w);
  free(g);
  coda_model_destroy(m);
}

/* A window covering the sequence masks nothing: the loss and the gradients
 * of window T and of no window are the same bits. */
static void covering_window(coda_context ctx) {
  coda_model_config c = mistral_config();
  int32_t in[B * T], tg[B * T];
  double l[2];
  float *gr[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    c.sliding_window = k ? 0 : T;
    coda_model *m = family_step_model(ctx, &c, 0.3, in, tg, B * T);
    if (!m) return;
    int64_t nv;
    coda_model_zero_grad(m);
    CHECK(coda_model_step(ctx, m, in, tg, B, T, 1.0f, &l[k], &nv) == CODA_OK);
    gr[k] = malloc(coda_model_size(m) * 4);
    memcpy(gr[k], coda_model_grads(m), coda_model_size(m) * 4);
    if (k) CHECK(!memcmp(gr[0], gr[1], coda_model_size(m) * 4));
    coda_model_destroy(m);
  }
  CHECK_MSG(l[0] == l[1], "window %d: loss %.9g, no window %.9g", T, l[0], l[1]);
  free(gr[0]);
  free(gr[1]);
}

#define REFUSED(cfg, a, b)                                                        \
  do {                                                                            \
    CHECK(coda_model_config_check(ctx, &(cfg)) == CODA_ERR_INVALID_ARGUMENT);     \
    CHECK_MSG(strstr(coda_last_error(ctx), a) && strstr(coda_last_error(ctx), b), \
              "message: %s", coda_last_error(ctx));                               \
  } while (0)

static void config(coda_context ctx) {
  coda_model_config c = mistral_config();
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  for (int li = 0; li < L; li++) /* every layer windowed, at the global base */
    CHECK(coda_model_layer_is_local(&c, li) && coda_model_layer_window(&c, li) == W &&
          coda_model_layer_rope_theta(&c, li) == 1e4);
  c.sliding_window = 4096; /* longer than seq: taken (no effect) */
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK);
  c.sliding_window = 0;
  CHECK(coda_model_config_check(ctx, &c) == CODA_OK && coda_model_layer_window(&c, 0) == 0 &&
        !coda_model_layer_is_local(&c, 1));
  c = mistral_config();
  c.sliding_pattern = 2;
  REFUSED(c, "sliding_pattern 2", "llama family windows every layer alike");
  c = mistral_config();
  c.sliding_window = -1;
  REFUSED(c, "sliding_window -1", ">= 0");
  c = mistral_config();
  c.rope_local_theta = 1e4;
  REFUSED(c, "rope_local_theta 10000", "llama family has none of these");
  c = mistral_config();
  c.logit_softcap = 30.0;
  REFUSED(c, "logit_softcap 30", "gemma3 takes them");
  /* qwen3 and gpt2 have no window */
  c = mistral_config();
  c.family = CODA_FAMILY_QWEN3;
  REFUSED(c, "the qwen3 family has none of these", "llama takes sliding_window");
  c = mistral_config();
  c.family = CODA_FAMILY_GPT2;
  c.kv_heads = c.heads;
  c.tied = 1;
  REFUSED(c, "the gpt2 family has none of these", "sliding_window 3");
}

static void checkpoint(coda_context ctx) {
  coda_model_config c = mistral_config(), c2;
  coda_model *b = family_checkpoint_round_trip(ctx, &c, &c2);
  if (!b) return;
  CHECK(c2.family == CODA_FAMILY_LLAMA && c2.sliding_window == W && c2.sliding_pattern == 0);
  coda_model_destroy(b);
  /* without a window the checkpoint holds no window key (as before) */
  c.sliding_window = 0;
  b = family_checkpoint_round_trip(ctx, &c, &c2);
  if (!b) return;
  CHECK(c2.sliding_window == 0);
  coda_model_destroy(b);
}

/* The export is Mistral's (LlamaForCausalLM has no window), read back with
 * its window, and stable; a model without a window stays Llama's. */
static void hf_round_trip(coda_context ctx) {
  coda_model_config c = mistral_config();
  coda_model *m = hf_random_model(ctx, &c, 41);
  if (!m) return;
  coda_model *back = hf_export_import(ctx, m);
  if (back) {
    const coda_model_config *b = coda_model_cfg(back);
    CHECK(b->family == CODA_FAMILY_LLAMA && b->sliding_window == W && b->sliding_pattern == 0);
    CHECK(same_weights(m, back));
    char *cfg1 = hf_export_again(ctx, back);
    CHECK(cfg1 && strstr(cfg1, "\"architectures\": [\"MistralForCausalLM\"]") &&
          strstr(cfg1, "\"model_type\": \"mistral\"") && strstr(cfg1, "\"sliding_window\": 3,") &&
          !strstr(cfg1, "mlp_bias"));
    free(cfg1);
    coda_model_destroy(back);
  }
  coda_model_destroy(m);
  c.sliding_window = 0;
  hf_export_random(ctx, &c, 42);
  char *cfg = read_text("config.json");
  CHECK(cfg && strstr(cfg, "\"LlamaForCausalLM\"") && !strstr(cfg, "sliding_window"));
  free(cfg);
}

/* config.json cases over the weights of a model of mistral_config()'s
 * shapes (max_position_embeddings 16). */
#define MBASE                                                                                  \
  "\"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 2, "                \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 23, "               \
  "\"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0"
#define MISTRAL "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", " MBASE
#define LLAMA "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", " MBASE

static void window_of(coda_context ctx, const char *json, int want) {
  write_text("config.json", json);
  coda_model_config c;
  CHECK_STATUS(ctx, coda_hf_config(ctx, test_dir, &c), CODA_OK);
  CHECK_MSG(c.sliding_window == want && c.sliding_pattern == 0, "%s: window %d (wanted %d)", json,
            c.sliding_window, want);
}

static void hf_import(coda_context ctx) {
  coda_model_config c = mistral_config();
  hf_export_random(ctx, &c, 43);
  window_of(ctx, MISTRAL ", \"sliding_window\": 3}", 3);
  window_of(ctx, MISTRAL ", \"sliding_window\": 4096}", 4096); /* kept: no effect */
  window_of(ctx, MISTRAL ", \"sliding_window\": null}", 0);
  window_of(ctx, MISTRAL "}", 4096);                          /* MistralConfig's default */
  window_of(ctx, MISTRAL ", \"use_sliding_window\": true, \"sliding_window\": 5}", 5);
  /* no model_type: the architecture says Mistral */
  window_of(ctx, "{\"architectures\": [\"MistralForCausalLM\"], " MBASE ", \"sliding_window\": 6}",
            6);
  window_of(ctx, LLAMA ", \"sliding_window\": 4096}", 0); /* Llama ignores it: no effect */
  window_of(ctx, LLAMA ", \"use_sliding_window\": false, \"sliding_window\": 3}", 0);
  config_case(ctx, MISTRAL ", \"sliding_window\": 3}", CODA_OK, "");
  config_case(ctx, LLAMA ", \"sliding_window\": 3}", CODA_ERR_NOT_SUPPORTED,
              "LlamaForCausalLM ignores the key");
  config_case(ctx, MISTRAL ", \"use_sliding_window\": false, \"sliding_window\": 3}",
              CODA_ERR_NOT_SUPPORTED, "does not read use_sliding_window");
  config_case(ctx, MISTRAL ", \"sliding_window\": 0}", CODA_ERR_NOT_SUPPORTED,
              "sliding_window 0 is not a window");
  config_case(ctx, MISTRAL ", \"sliding_window\": 2.5}", CODA_ERR_NOT_SUPPORTED,
              "sliding_window 2.5 is not a window");
}

int main(void) {
  coda_context ctx = family_test_begin("test_train_model_mistral");
  against_fp64(ctx);
  covering_window(ctx);
  config(ctx);
  checkpoint(ctx);
  hf_round_trip(ctx);
  hf_import(ctx);
  return family_test_end(ctx);
}
