/* coda_generate: byte-level sampling from a checkpoint by full recompute
 * (the library's older generation path; the KV-cache decoder of
 * include/coda_decode.h is decode.c). Each token is drawn from the logits
 * of the last position of a sliding window of the last `seq` tokens, run
 * through the model's default engine for Llama (the plan engine: its bf16
 * weights) and the fp32 reference engine for the other families;
 * temperature > 0 takes one uniform draw of a splitmix64 stream per token. */
#include "coda_train.h"
#include "base/rng.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"
#include "base/options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Moves the k largest of v[0..n) (ties: any) to v[0..k) by quickselect
 * (median-of-three pivots): O(n) on average. */
static void select_top(float *v, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    float a = v[lo], b = v[mid], c = v[hi];
    float piv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
    int i = lo, j = hi;
    while (i <= j) { /* descending: larger to the left */
      while (v[i] > piv) i++;
      while (v[j] < piv) j--;
      if (i <= j) {
        float t = v[i]; v[i] = v[j]; v[j] = t;
        i++;
        j--;
      }
    }
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else return;
  }
}

static int sample(float *logits, float *tmp, int V, double temp, int top_k, uint64_t *rng) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  if (!(temp > 0.0)) return best;
  /* Keep the top_k largest (ties by lower id): threshold = k-th largest,
   * found by selection, O(V) per token. */
  if (top_k > 0 && top_k < V) {
    memcpy(tmp, logits, (size_t)V * sizeof *tmp);
    select_top(tmp, V, top_k);
    float thr = tmp[0];
    for (int k = 1; k < top_k; k++) if (tmp[k] < thr) thr = tmp[k];
    int above = 0, ties = 0;
    for (int v = 0; v < V; v++) above += logits[v] > thr;
    for (int v = 0; v < V; v++) { /* exactly top_k kept: ties by lower id */
      if (logits[v] > thr) continue;
      if (logits[v] == thr && above + ties < top_k) ties++;
      else logits[v] = -INFINITY;
    }
  }
  double mx = logits[best], z = 0.0;
  for (int v = 0; v < V; v++) z += exp(((double)logits[v] - mx) / temp);
  double u = coda_rng_uniform(rng) * z, acc = 0.0;
  for (int v = 0; v < V; v++) {
    acc += exp(((double)logits[v] - mx) / temp);
    if (u < acc) return v;
  }
  return best;
}

coda_generate_options coda_generate_default_options(void) {
  coda_generate_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  return o;
}

coda_status coda_generate(coda_context ctx, const coda_generate_options *o, char **text) {
  size_t len;
  return coda_generate_n(ctx, o, text, &len);
}

coda_status coda_generate_n(coda_context ctx, const coda_generate_options *opts, char **text,
                            size_t *len) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_generate_options taken = coda_generate_default_options();
  static const coda_options_layout layouts[] = {CODA_OPTIONS_LAYOUT(coda_generate_options)};
  if (opts && coda_options_take(ctx, "coda_generate_options", opts, &taken, layouts, 1))
    return CODA_ERR_INVALID_ARGUMENT;
  const coda_generate_options *o = opts ? &taken : NULL;
  if (!o || !text || !len || !o->checkpoint)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "generate: checkpoint and output are required");
  *text = NULL;
  *len = 0;
  if (o->max_tokens < 0 || o->max_tokens > (1 << 24) || o->temperature < 0.0 || o->top_k < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "generate: max tokens %d, temperature %g, top-k %d out of range",
                     o->max_tokens, o->temperature, o->top_k);
  coda_model_config cfg;
  coda_status s = coda_checkpoint_config_to_load(ctx, o->checkpoint, &cfg);
  if (s) return s;
  coda_model *m;
  /* Llama samples from the default engine (the plans' bf16 weights);
   * another family from the reference engine (fp32), whose greedy bytes
   * the host decoder's are (coda_train.h says so) */
  const coda_engine eng = cfg.family == CODA_FAMILY_LLAMA
                              ? coda_engine_from_option(CODA_TRAIN_ENGINE_AUTO)
                              : CODA_ENGINE_REFERENCE;
  s = coda_model_create(ctx, &cfg, eng, &m);
  if (s) return s;
  s = coda_checkpoint_load(ctx, o->checkpoint, m, NULL, NULL, NULL);
  const char *prompt = o->prompt && *o->prompt ? o->prompt : "\n";
  size_t pl = strlen(prompt), total = pl + (size_t)o->max_tokens;
  int32_t *tok = malloc(total * sizeof *tok);
  float *logits = malloc((size_t)cfg.vocab * sizeof *logits);
  float *tmp = malloc((size_t)cfg.vocab * sizeof *tmp);
  char *out = malloc(total + 1);
  if (!s && (!tok || !logits || !tmp || !out)) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!s && cfg.vocab < CODA_TOK_BYTES)
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "model vocab %d cannot hold byte tokens", cfg.vocab);
  size_t n = pl;
  if (!s) {
    for (size_t i = 0; i < pl; i++) tok[i] = (unsigned char)prompt[i];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 1;
    for (int k = 0; k < o->max_tokens && !s; k++) {
      size_t ctxlen = n < (size_t)cfg.seq ? n : (size_t)cfg.seq; /* sliding window */
      s = coda_model_last_logits(ctx, m, tok + n - ctxlen, (int)ctxlen, logits);
      for (int v = 0; !s && v < cfg.vocab; v++)
        if (!isfinite(logits[v]))
          s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: the model's logits are not finite "
                        "(logit %d of token %d is %g): the checkpoint's weights are damaged or "
                        "diverged", o->checkpoint, v, k + 1, (double)logits[v]);
      if (!s) tok[n++] = sample(logits, tmp, cfg.vocab, o->temperature, o->top_k, &rng);
    }
  }
  if (!s) {
    for (size_t i = 0; i < n; i++) out[i] = tok[i] < 256 ? (char)tok[i] : '?';
    out[n] = '\0';
    *len = n;
    *text = out;
    out = NULL;
  }
  free(tok);
  free(logits);
  free(tmp);
  free(out);
  coda_model_destroy(m);
  return s;
}
