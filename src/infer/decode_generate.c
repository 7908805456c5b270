/* The decoder's sampling and generation (include/coda_decode.h):
 * coda_decoder_sample (on the host, or by the backend's sampling kernel,
 * the same draw), coda_decoder_generate (prefill, then steps with
 * streaming and stop rules) and coda_decoder_encode. The forward passes
 * are decode.c's. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "coda_decode.h"
#include "api/api.h" /* the backend's sampling kernel */
#include "infer/infer.h"
#include "base/rng.h"
#include "base/options.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ helpers */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The uniform number of the draw at position pos of sequence b: one
 * splitmix64 step from a state mixed of the three (the CUDA sampler
 * computes the same). */
static double draw_uniform(uint64_t seed, int b, int pos) {
  uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(b + 1)) ^
               (0xd1b54a32d192ed03ull * (uint64_t)(pos + 1));
  return coda_rng_uniform(&s);
}

/* Order-preserving key of a float: a > b iff key(a) > key(b) (finite). */
static uint32_t fkey(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ------------------------------------------------------ host sampling */

/* The token drawn from logits l[0..V) by the rule of coda_sampling, with
 * the uniform number u; keep is V bytes of scratch. -2: a logit is not
 * finite. Candidate cuts are found by bisection on the float keys, 32
 * passes over the vocabulary: O(V) for any k. */
static int32_t host_sample(const float *l, int64_t V, const coda_sampling *s, double u,
                           unsigned char *keep) {
  int64_t best = 0;
  for (int64_t v = 0; v < V; v++) {
    if (!isfinite(l[v])) return -2;
    if (l[v] > l[best]) best = v;
  }
  if (!(s->temperature > 0.0)) return (int32_t)best;
  const double T = s->temperature, mx = l[best];
  for (int64_t v = 0; v < V; v++) keep[v] = 1;
  if (s->top_k > 0 && s->top_k < V) {
    /* t: the largest key with at least k logits at or above it (the k-th
     * largest value); those above are kept, ties at it by lower id. */
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; bit--) {
      uint32_t cand = t | (1u << bit);
      int64_t cnt = 0;
      for (int64_t v = 0; v < V; v++) cnt += fkey(l[v]) >= cand;
      if (cnt >= s->top_k) t = cand;
    }
    int64_t above = 0;
    for (int64_t v = 0; v < V; v++) above += fkey(l[v]) > t;
    int64_t ties = s->top_k - above;
    for (int64_t v = 0; v < V; v++) {
      uint32_t k = fkey(l[v]);
      if (k > t) continue;
      if (k == t && ties > 0) ties--;
      else keep[v] = 0;
    }
  }
  if (s->top_p > 0.0 && s->top_p < 1.0) {
    double z = 0.0;
    for (int64_t v = 0; v < V; v++)
      if (keep[v]) z += exp(((double)l[v] - mx) / T);
    /* the largest key whose kept logits at or above it hold top_p of z */
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; bit--) {
      uint32_t cand = t | (1u << bit);
      double m = 0.0;
      for (int64_t v = 0; v < V; v++)
        if (keep[v] && fkey(l[v]) >= cand) m += exp(((double)l[v] - mx) / T);
      if (m >= s->top_p * z) t = cand;
    }
    for (int64_t v = 0; v < V; v++)
      if (fkey(l[v]) < t) keep[v] = 0;
  }
  double z = 0.0;
  for (int64_t v = 0; v < V; v++)
    if (keep[v]) z += exp(((double)l[v] - mx) / T);
  double target = u * z, acc = 0.0;
  int64_t last = best;
  for (int64_t v = 0; v < V; v++) {
    if (!keep[v]) continue;
    acc += exp(((double)l[v] - mx) / T);
    last = v;
    if (target < acc) return (int32_t)v;
  }
  return (int32_t)last;
}

static coda_status check_sampling(coda_context ctx, const coda_sampling *s) {
  if (!s || !(s->temperature >= 0.0) || !isfinite(s->temperature) || s->top_k < 0 ||
      !(s->top_p >= 0.0 && s->top_p <= 1.0))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "sampling: temperature %g (>= 0), top-k %d "
                     "(>= 0), top-p %g (0 .. 1) out of range", s ? s->temperature : 0.0,
                     s ? s->top_k : 0, s ? s->top_p : 0.0);
  return CODA_OK;
}

coda_status coda_decoder_sample(coda_decoder d, const coda_sampling *sp, const int *active,
                                int32_t *tokens) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  coda_context ctx = d->ctx;
  if (!tokens) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_sample: tokens is NULL");
  coda_status s = check_sampling(ctx, sp);
  if (s) return s;
  coda_sampling sm = *sp;
  if (sm.top_p == 0.0) sm.top_p = 1.0;
  int32_t *pos = d->h_pos; /* B <= chunk entries */
  for (int b = 0; b < d->B; b++) {
    int on = (active ? active[b] != 0 : 1) && d->has_logits[b];
    if (active && active[b] && !d->has_logits[b])
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "sample: sequence %d was not prefilled", b);
    pos[b] = on ? d->len[b] : -1;
  }
  if (d->gpu) {
    s = coda_memcpy_h2d_queued(ctx, d->d_spos, pos, (size_t)d->B * 4);
    if (!s) s = coda_decode_sample(ctx, d->d_sample, d->d_logits, d->d_spos, d->B, d->V,
                                   sm.temperature, sm.top_k, sm.top_p, sm.seed);
    if (!s) s = coda_memcpy_d2h(ctx, tokens, d->d_sample, (size_t)d->B * 4);
  } else {
    unsigned char *keep = malloc((size_t)d->V);
    if (!keep) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    for (int b = 0; b < d->B; b++)
      tokens[b] = pos[b] < 0 ? -1
                             : host_sample(d->logits + (size_t)b * d->V, d->V, &sm,
                                           draw_uniform(sm.seed, b, pos[b]), keep);
    free(keep);
  }
  for (int b = 0; !s && b < d->B; b++)
    if (tokens[b] == -2)
      s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "the logits of sequence %d are not finite "
                    "(at position %d): the weights are damaged or diverged", b, pos[b]);
  return s;
}

/* ---------------------------------------------------------- generate */

static coda_status token_bytes(coda_decoder d, int32_t t, char **buf, size_t *cap, size_t *n) {
  if (!d->tok) {
    if (*cap < 1) {
      char *p = realloc(*buf, 16);
      if (!p) return coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      *buf = p;
      *cap = 16;
    }
    (*buf)[0] = t < 256 ? (char)t : '?';
    *n = 1;
    return CODA_OK;
  }
  if ((size_t)t >= coda_tokenizer_vocab_size(d->tok)) { /* a model row the tokenizer lacks */
    static const char repl[] = "\xef\xbf\xbd";          /* U+FFFD */
    if (*cap < 3) {
      char *p = realloc(*buf, 16);
      if (!p) return coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      *buf = p;
      *cap = 16;
    }
    memcpy(*buf, repl, 3);
    *n = 3;
    return CODA_OK;
  }
  return coda_tokenizer_decode_alloc(d->tok, &t, 1, 0, buf, cap, n);
}

void coda_generate_result_free(coda_generate_result *r, int n) {
  if (!r) return;
  for (int i = 0; i < n; i++) {
    free(r[i].tokens);
    r[i].tokens = NULL;
    r[i].n = 0;
  }
}

coda_generate_params coda_generate_default_params(void) {
  coda_generate_params g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.sampling.top_p = 1.0;
  return g;
}

coda_status coda_decoder_generate(coda_decoder d, const int32_t *const *prompts, const int *lens,
                                  int n, const coda_generate_params *params,
                                  coda_generate_result *out, double *prefill_s, double *decode_s) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  coda_context ctx = d->ctx;
  if (!prompts || !lens || !params || !out || n < 1 || n > d->B)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_generate: %d prompts for a "
                     "batch of %d, or a NULL argument", n, d->B);
  static const coda_options_layout layouts[] = {CODA_OPTIONS_LAYOUT(coda_generate_params)};
  coda_generate_params pv = coda_generate_default_params();
  coda_status st = coda_options_take(ctx, "coda_generate_params", params, &pv, layouts, 1);
  if (st) return st;
  const coda_generate_params *p = &pv;
  if (p->max_new_tokens < 0 || p->nstop < 0 || (p->nstop > 0 && !p->stop))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "generate: max new tokens %d or %d stop "
                     "tokens out of range", p->max_new_tokens, p->nstop);
  coda_status s = check_sampling(ctx, &p->sampling);
  if (s) return s;
  for (int b = 0; b < n; b++)
    if (!prompts[b])
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "generate: prompt %d is NULL", b);
  memset(out, 0, (size_t)n * sizeof *out);
  const int32_t eos = p->stop_at_eos && d->tok ? coda_tokenizer_eos_id(d->tok) : -1;
  const int32_t **pr = calloc((size_t)d->B, sizeof *pr);
  int *ln = calloc((size_t)d->B, sizeof *ln), *active = calloc((size_t)d->B, sizeof *active);
  int32_t *tok = malloc((size_t)d->B * sizeof *tok), *next = malloc((size_t)d->B * sizeof *next);
  char *bytes = NULL;
  size_t bcap = 0, blen = 0;
  if (!pr || !ln || !active || !tok || !next) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (int b = 0; b < n && !s; b++) {
    pr[b] = prompts[b];
    ln[b] = lens[b];
    out[b].tokens = malloc(((size_t)p->max_new_tokens + 1) * sizeof(int32_t));
    if (!out[b].tokens) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  double t0 = now_s();
  if (!s) s = coda_decoder_prefill(d, pr, ln);
  if (!s && d->gpu) s = coda_synchronize(ctx);
  double t1 = now_s();
  int left = 0;
  for (int b = 0; b < n && !s; b++) {
    active[b] = p->max_new_tokens > 0;
    left += active[b];
  }
  while (!s && left > 0) {
    s = coda_decoder_sample(d, &p->sampling, active, tok);
    for (int b = 0; b < d->B; b++) next[b] = -1;
    for (int b = 0; b < n && !s; b++) {
      if (!active[b]) continue;
      int32_t t = tok[b];
      int stop = t == eos;
      for (int i = 0; i < p->nstop && !stop; i++) stop = t == p->stop[i];
      if (stop) {
        out[b].stop = CODA_STOP_TOKEN;
        active[b] = 0;
        left--;
        continue;
      }
      out[b].tokens[out[b].n++] = t;
      if (p->on_token) {
        s = token_bytes(d, t, &bytes, &bcap, &blen);
        if (!s && p->on_token(p->user, b, t, bytes, blen)) {
          out[b].stop = CODA_STOP_CALLBACK;
          active[b] = 0;
          left--;
          continue;
        }
      }
      if (out[b].n >= p->max_new_tokens) {
        out[b].stop = CODA_STOP_MAX_TOKENS;
        active[b] = 0;
        left--;
      } else if (d->len[b] >= d->max_len) {
        out[b].stop = CODA_STOP_WINDOW;
        active[b] = 0;
        left--;
      } else {
        next[b] = t;
      }
    }
    if (!s && left > 0) s = coda_decoder_step(d, next);
  }
  if (!s && d->gpu) s = coda_synchronize(ctx);
  double t2 = now_s();
  if (prefill_s) *prefill_s = t1 - t0;
  if (decode_s) *decode_s = t2 - t1;
  if (s) coda_generate_result_free(out, n);
  free(pr); free(ln); free(active); free(tok); free(next); free(bytes);
  return s;
}

coda_status coda_decoder_encode(coda_decoder d, const char *text, size_t len, int32_t **ids,
                                size_t *n) {
  if (!d) return CODA_ERR_INVALID_ARGUMENT;
  if (!text || !ids || !n)
    return coda_fail(d->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_decoder_encode: a NULL argument");
  *ids = NULL;
  *n = 0;
  if (d->tok) {
    size_t cap = 0;
    return coda_tokenizer_encode_alloc(d->tok, text, len, CODA_TOKENIZER_ADD_SPECIAL, ids, &cap, n);
  }
  int32_t *p = malloc((len ? len : 1) * sizeof *p);
  if (!p) return coda_fail(d->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < len; i++) p[i] = (unsigned char)text[i];
  *ids = p;
  *n = len;
  return CODA_OK;
}
