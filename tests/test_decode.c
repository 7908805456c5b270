/* The KV-cache decoder on the CPU (src/infer/decode.c) against the full
 * recompute of the reference engine (coda_model_last_logits over each
 * sequence's whole prefix): the logits of every step for GQA and MHA
 * shapes, a batch of prompts of different lengths, a prefill longer than
 * one chunk, a prefill of one sequence while the others keep their cache;
 * sampling (seeded repeatability, top-k and top-p candidate sets checked
 * against a sort, the temperature distribution), stop tokens, the length
 * limits, byte 0 in the output, non-finite weights and logits, scaled
 * RoPE (llama3, linear), Qwen3, GPT-2 and Gemma 3 on the host, and the
 * plan prefill refused by name for the families but Llama. */
#define _POSIX_C_SOURCE 200809L
#include "coda_decode.h"
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "model/model.h"
#include "store/store.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static coda_model *make_model(coda_context ctx, const coda_model_config *c, uint64_t seed) {
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (!m) return NULL;
  coda_model_init(m, seed);
  /* larger weights than the initialization: logits that differ clearly */
  float *w = coda_model_weights(m);
  uint64_t r = seed * 7 + 1;
  for (size_t i = 0; i < coda_model_size(m); i++) w[i] += (float)(0.3 * (coda_rng_uniform(&r) - 0.5));
  return m;
}

static double max_abs(const float *a, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
  return m;
}

/* Logits of the decoder vs the full recompute for sequence b. */
static void compare_seq(coda_context ctx, coda_model *m, const float *dec, const int32_t *seq,
                        int T, const char *what, int step, int b) {
  const int64_t V = coda_model_cfg(m)->vocab;
  float *ref = malloc((size_t)V * 4);
  CHECK(coda_model_last_logits(ctx, m, seq, T, ref) == CODA_OK);
  double scale = max_abs(ref, V), worst = 0.0;
  for (int64_t v = 0; v < V; v++) {
    double e = fabs((double)dec[v] - ref[v]);
    worst = e > worst ? e : worst;
  }
  CHECK_MSG(worst <= 1e-5 * scale + 1e-6, "%s: step %d sequence %d: logits differ by %g "
            "(max |logit| %g)", what, step, b, worst, scale);
  free(ref);
}

/* Prompts of different lengths, then greedy steps; every step compared. */
static void against_recompute(coda_context ctx, const coda_model_config *c, const int *plen,
                              int B, int steps, const char *what) {
  coda_model *m = make_model(ctx, c, 11);
  if (!m) return;
  coda_decoder d = NULL;
  coda_decoder_options o = {.struct_size = sizeof o, .batch = B};
  CHECK_STATUS(ctx, coda_decoder_create(ctx, m, &o, &d), CODA_OK);
  if (!d) { coda_model_destroy(m); return; }
  CHECK_EQ_INT(coda_decoder_max_len(d), c->seq);
  const int64_t V = c->vocab;
  int32_t **seq = calloc((size_t)B, sizeof *seq);
  int *len = calloc((size_t)B, sizeof *len);
  uint64_t r = 5;
  for (int b = 0; b < B; b++) {
    seq[b] = malloc((size_t)c->seq * 4);
    len[b] = plen[b];
    for (int i = 0; i < plen[b]; i++) seq[b][i] = (int32_t)coda_rng_below(&r, (uint64_t)V);
  }
  CHECK_STATUS(ctx, coda_decoder_prefill(d, (const int32_t *const *)seq, len), CODA_OK);
  float *lg = malloc((size_t)B * V * 4);
  int32_t *tok = malloc((size_t)B * 4);
  coda_sampling greedy = {0.0, 0, 1.0, 1};
  for (int st = 0; st <= steps; st++) {
    CHECK(coda_decoder_logits(d, lg) == CODA_OK);
    for (int b = 0; b < B; b++) {
      CHECK_EQ_INT(coda_decoder_length(d, b), len[b]);
      compare_seq(ctx, m, lg + b * V, seq[b], len[b], what, st, b);
    }
    if (st == steps) break;
    CHECK_STATUS(ctx, coda_decoder_sample(d, &greedy, NULL, tok), CODA_OK);
    for (int b = 0; b < B; b++) {
      int64_t best = 0; /* greedy = the largest logit, lowest id on ties */
      for (int64_t v = 1; v < V; v++) best = lg[b * V + v] > lg[b * V + best] ? v : best;
      CHECK_EQ_INT(tok[b], best);
      /* sequence 0 sits out one step: the others move on without it */
      if (b == 0 && st == 1) tok[b] = -1;
      else seq[b][len[b]++] = tok[b];
    }
    CHECK_STATUS(ctx, coda_decoder_step(d, tok), CODA_OK);
  }
  /* a new prompt for sequence B-1 only: the others keep their caches */
  const int32_t **again = calloc((size_t)B, sizeof *again);
  int *alen = calloc((size_t)B, sizeof *alen);
  again[B - 1] = seq[0];
  alen[B - 1] = 3;
  CHECK_STATUS(ctx, coda_decoder_prefill(d, again, alen), CODA_OK);
  CHECK(coda_decoder_logits(d, lg) == CODA_OK);
  compare_seq(ctx, m, lg + (B - 1) * V, seq[0], 3, what, -1, B - 1);
  for (int b = 0; b < B - 1; b++) compare_seq(ctx, m, lg + b * V, seq[b], len[b], what, -1, b);
  /* a full cache refuses a step */
  if (B == 1) {
    int32_t one[1] = {1};
    while (coda_decoder_length(d, 0) < c->seq) CHECK(coda_decoder_step(d, one) == CODA_OK);
    CHECK_STATUS(ctx, coda_decoder_step(d, one), CODA_ERR_OVERFLOW);
  }
  free(again); free(alen);
  for (int b = 0; b < B; b++) free(seq[b]);
  free(seq); free(len); free(lg); free(tok);
  coda_decoder_destroy(d);
  coda_model_destroy(m);
}

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct {
  char buf[256];
  size_t n;
  int calls;
} sink;

static int collect(void *user, int b, int32_t t, const char *bytes, size_t n) {
  sink *s = user;
  (void)b; (void)t;
  s->calls++;
  for (size_t i = 0; i < n && s->n < sizeof s->buf; i++) s->buf[s->n++] = bytes[i];
  return 0;
}

static void sampling(coda_context ctx) {
  coda_model_config c = {256, 32, 1, 4, 2, 48, 64, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *m = make_model(ctx, &c, 3);
  if (!m) return;
  const int B = 4;
  coda_decoder d = NULL;
  coda_decoder_options o = {.struct_size = sizeof o, .batch = B};
  CHECK(coda_decoder_create(ctx, m, &o, &d) == CODA_OK);
  if (!d) { coda_model_destroy(m); return; }
  int32_t p[3] = {10, 20, 30};
  const int32_t *pr[4] = {p, p, p, p};
  int pl[4] = {3, 3, 3, 3};
  CHECK(coda_decoder_prefill(d, pr, pl) == CODA_OK);
  float *lg = malloc((size_t)B * 256 * 4), sorted[256];
  CHECK(coda_decoder_logits(d, lg) == CODA_OK);
  memcpy(sorted, lg, sizeof sorted);
  qsort(sorted, 256, sizeof(float), cmp_desc);
  /* the four rows hold the same prompt: the same logits */
  CHECK(!memcmp(lg, lg + 3 * 256, 256 * 4));
  int32_t t1[4], t2[4];
  const double temp = 1.5;
  int counts[256] = {0}, draws = 0, differ = 0;
  for (uint64_t seed = 1; seed <= 600; seed++) {
    coda_sampling s = {temp, 0, 1.0, seed};
    CHECK(coda_decoder_sample(d, &s, NULL, t1) == CODA_OK);
    CHECK(coda_decoder_sample(d, &s, NULL, t2) == CODA_OK);
    CHECK(!memcmp(t1, t2, sizeof t1)); /* same seed, same tokens */
    differ += t1[0] != t1[1];          /* rows draw their own numbers */
    for (int b = 0; b < B; b++) counts[t1[b]]++, draws++;
    /* top-k: only the k largest; top-k 1 is greedy */
    coda_sampling k5 = {temp, 5, 1.0, seed}, k1 = {temp, 1, 1.0, seed};
    CHECK(coda_decoder_sample(d, &k5, NULL, t1) == CODA_OK);
    for (int b = 0; b < B; b++) CHECK(lg[t1[b]] >= sorted[4]);
    CHECK(coda_decoder_sample(d, &k1, NULL, t1) == CODA_OK);
    for (int b = 0; b < B; b++) CHECK(lg[t1[b]] == sorted[0]);
    /* top-p: within the shortest prefix of the sorted probabilities that
     * holds p of the mass */
    coda_sampling tp = {temp, 0, 0.5, seed};
    CHECK(coda_decoder_sample(d, &tp, NULL, t1) == CODA_OK);
    double z = 0.0, acc = 0.0;
    for (int v = 0; v < 256; v++) z += exp((sorted[v] - sorted[0]) / temp);
    float cut = sorted[0];
    for (int v = 0; v < 256 && acc < 0.5 * z; v++) {
      acc += exp((sorted[v] - sorted[0]) / temp);
      cut = sorted[v];
    }
    for (int b = 0; b < B; b++) CHECK_MSG(lg[t1[b]] >= cut, "top-p drew logit %g below %g", lg[t1[b]], cut);
  }
  CHECK(differ > 0);
  /* the frequencies follow softmax(l / T): each within 5 sigma */
  double z = 0.0;
  for (int v = 0; v < 256; v++) z += exp((lg[v] - sorted[0]) / temp);
  for (int v = 0; v < 256; v++) {
    double pv = exp((lg[v] - sorted[0]) / temp) / z, mu = pv * draws;
    double sd = sqrt(draws * pv * (1 - pv)) + 1.0;
    CHECK_MSG(fabs(counts[v] - mu) <= 5 * sd, "token %d drawn %d times, expected %.1f", v,
              counts[v], mu);
  }
  coda_sampling bad = {-1.0, 0, 1.0, 1};
  CHECK_STATUS(ctx, coda_decoder_sample(d, &bad, NULL, t1), CODA_ERR_INVALID_ARGUMENT);
  bad.temperature = 1.0;
  bad.top_p = 1.5;
  CHECK_STATUS(ctx, coda_decoder_sample(d, &bad, NULL, t1), CODA_ERR_INVALID_ARGUMENT);

  /* generate: stop tokens, maximum new tokens, the window, batch
   * independence and streaming */
  coda_generate_params g = coda_generate_default_params();
  g.sampling.temperature = 0.8;
  g.sampling.seed = 9;
  g.max_new_tokens = 12;
  coda_generate_result r1[4], r2[4];
  int32_t q[2] = {65, 66};
  const int32_t *prs[4] = {p, q, p, q};
  int pls[4] = {3, 2, 3, 2};
  CHECK_STATUS(ctx, coda_decoder_generate(d, prs, pls, 4, &g, r1, NULL, NULL), CODA_OK);
  for (int b = 0; b < 4; b++) {
    CHECK_EQ_INT(r1[b].n, 12);
    CHECK_EQ_INT(r1[b].stop, CODA_STOP_MAX_TOKENS);
  }
  /* the same seed: the same text */
  CHECK_STATUS(ctx, coda_decoder_generate(d, prs, pls, 4, &g, r2, NULL, NULL), CODA_OK);
  for (int b = 0; b < 4; b++) CHECK(!memcmp(r1[b].tokens, r2[b].tokens, 12 * 4));
  coda_generate_result_free(r2, 4);
  /* a stop token ends the sequence where it first appears */
  int32_t stop = r1[0].tokens[5];
  int first = 0;
  while (r1[0].tokens[first] != stop) first++;
  g.stop = &stop;
  g.nstop = 1;
  CHECK_STATUS(ctx, coda_decoder_generate(d, prs, pls, 1, &g, r2, NULL, NULL), CODA_OK);
  CHECK_EQ_INT(r2[0].n, first);
  CHECK_EQ_INT(r2[0].stop, CODA_STOP_TOKEN);
  CHECK(!memcmp(r2[0].tokens, r1[0].tokens, (size_t)first * 4));
  coda_generate_result_free(r2, 1);
  coda_generate_result_free(r1, 4);
  coda_decoder_destroy(d);

  /* the window: a cache of 6 positions after a 3-token prompt */
  coda_decoder_options small = {.struct_size = sizeof small, .batch = 1, .max_len = 6};
  CHECK(coda_decoder_create(ctx, m, &small, &d) == CODA_OK);
  g.nstop = 0;
  g.stop = NULL;
  g.max_new_tokens = 100;
  sink sk;
  memset(&sk, 0, sizeof sk);
  g.on_token = collect;
  g.user = &sk;
  CHECK_STATUS(ctx, coda_decoder_generate(d, prs, pls, 1, &g, r1, NULL, NULL), CODA_OK);
  CHECK_EQ_INT(r1[0].stop, CODA_STOP_WINDOW);
  CHECK_EQ_INT(r1[0].n, 6 - 3 + 1);
  CHECK_EQ_INT(sk.calls, r1[0].n);
  CHECK_EQ_INT(sk.n, (size_t)r1[0].n); /* byte tokens: one byte each */
  for (int i = 0; i < r1[0].n && i < (int)sk.n; i++) CHECK((unsigned char)sk.buf[i] == r1[0].tokens[i]);
  coda_generate_result_free(r1, 1);
  int32_t p7[7] = {1, 2, 3, 4, 5, 6, 7};
  const int32_t *pr7[1] = {p7};
  int l7[1] = {7};
  CHECK_STATUS(ctx, coda_decoder_prefill(d, pr7, l7), CODA_ERR_INVALID_ARGUMENT);
  int32_t badtok[1] = {256};
  l7[0] = 1;
  pr7[0] = badtok;
  CHECK_STATUS(ctx, coda_decoder_prefill(d, pr7, l7), CODA_ERR_INVALID_ARGUMENT);
  coda_decoder_destroy(d);

  /* byte 0: a model whose logits are all zero picks token 0 (greedy, lowest
   * id), and the bytes reach the caller whole */
  float *w = coda_model_weights(m);
  const coda_param *nw = coda_model_find(m, "norm.weight");
  for (size_t i = 0; i < nw->size; i++) w[nw->offset + i] = 0.0f;
  coda_decoder_options one = coda_decoder_default_options();
  CHECK(coda_decoder_create(ctx, m, &one, &d) == CODA_OK);
  memset(&sk, 0, sizeof sk);
  g.sampling.temperature = 0.0;
  g.max_new_tokens = 5;
  CHECK_STATUS(ctx, coda_decoder_generate(d, prs, pls, 1, &g, r1, NULL, NULL), CODA_OK);
  CHECK_EQ_INT(r1[0].n, 5);
  CHECK_EQ_INT(sk.n, 5);
  for (size_t i = 0; i < sk.n; i++) CHECK(sk.buf[i] == '\0');
  coda_generate_result_free(r1, 1);
  coda_decoder_destroy(d);

  /* overflowing logits (finite weights): an error naming the sequence */
  for (size_t i = 0; i < nw->size; i++) w[nw->offset + i] = FLT_MAX;
  CHECK(coda_decoder_create(ctx, m, &one, &d) == CODA_OK);
  CHECK(coda_decoder_prefill(d, prs, pls) == CODA_OK);
  coda_sampling gs = {0.0, 0, 1.0, 1};
  CHECK_STATUS(ctx, coda_decoder_sample(d, &gs, NULL, t1), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "not finite") != NULL);
  coda_decoder_destroy(d);
  /* NaN weights: refused when the decoder is made */
  w[nw->offset] = NAN;
  d = NULL;
  CHECK_STATUS(ctx, coda_decoder_create(ctx, m, &one, &d), CODA_ERR_INVALID_ARGUMENT);
  CHECK(d == NULL);
  CHECK(strstr(coda_last_error(ctx), "norm.weight") != NULL);
  free(lg);
  coda_model_destroy(m);
}

/* A byte-level BPE tokenizer.json: a=0 b=1 c=2 " "=3 ab=4 abc=5 " a"=6 <s>=7
 * (BOS added by the post-processor). */
static const char *tokenizer_json =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":7,"
    "\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
    "\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},\"post_processor\":{\"type\":"
    "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":"
    "{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[7],"
    "\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
    "\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"vocab\":{\"a\":0,"
    "\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,\"abc\":5,\"\\u0120a\":6},\"merges\":[\"a b\",\"ab c\","
    "\"\\u0120 a\"]}}";

typedef struct {
  char buf[4096];
  size_t n;
} text_buf;

static int append(void *user, int b, int32_t t, const char *bytes, size_t n) {
  text_buf *s = user;
  (void)b; (void)t;
  for (size_t i = 0; i < n && s->n < sizeof s->buf; i++) s->buf[s->n++] = bytes[i];
  return 0;
}

/* Loading: a Hugging Face folder with its tokenizer.json and a coda
 * checkpoint give the weights of the model (the same logits bit for bit);
 * the streamed bytes are the tokenizer's decoding; NaN weights in a file
 * are refused naming the tensor. */
static void loading(coda_context ctx) {
  char dir[256], sub[300], ck[340], tj[300];
  snprintf(dir, sizeof dir, "test_decode.tmp.%d", (int)getpid());
  snprintf(sub, sizeof sub, "%s/ck", dir);
  snprintf(ck, sizeof ck, "%s/model.safetensors", sub);
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  /* vocab 10: the tokenizer's 8 ids and two padding rows */
  coda_model_config c = {10, 32, 1, 4, 2, 24, 48, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  coda_model *m = make_model(ctx, &c, 21);
  if (!m) return;
  CHECK(coda_hf_export(ctx, m, dir) == CODA_OK);
  CHECK(spit(tj, (const unsigned char *)tokenizer_json, strlen(tokenizer_json)) == 0);
  CHECK(mkdir(sub, 0700) == 0);
  CHECK(coda_checkpoint_save(ctx, ck, m, NULL, NULL, NULL) == CODA_OK);
  char tj2[360];
  snprintf(tj2, sizeof tj2, "%s/tokenizer.json", sub);
  coda_decoder_options o = coda_decoder_default_options();
  coda_decoder dx = NULL;
  /* vocab 10 and no tokenizer.json beside the checkpoint: bytes do not fit */
  CHECK_STATUS(ctx, coda_decoder_load(ctx, ck, &o, &dx), CODA_ERR_NOT_SUPPORTED);
  CHECK(spit(tj2, (const unsigned char *)tokenizer_json, strlen(tokenizer_json)) == 0);
  coda_decoder dh = NULL, dc = NULL, dm = NULL;
  CHECK_STATUS(ctx, coda_decoder_load(ctx, dir, &o, &dh), CODA_OK);
  CHECK_STATUS(ctx, coda_decoder_load(ctx, ck, &o, &dc), CODA_OK);
  CHECK(coda_decoder_create(ctx, m, &o, &dm) == CODA_OK);
  if (dh && dc && dm) {
    CHECK(coda_decoder_tokenizer(dh) != NULL);
    CHECK(coda_decoder_tokenizer(dc) != NULL); /* the tokenizer.json beside the checkpoint */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(coda_decoder_encode(dh, "ab ab c", 7, &ids, &n) == CODA_OK);
    /* <s>, "ab", " ab" (merge "a b" ranks before "Ġ a"), " c" */
    const int32_t want[] = {7, 4, 3, 4, 3, 2};
    CHECK_MSG(n == 6 && !memcmp(ids, want, sizeof want), "%zu ids", n);
    const int32_t *pr[1] = {ids};
    int pl[1] = {(int)n};
    float l1[10], l2[10], l3[10];
    CHECK(coda_decoder_prefill(dh, pr, pl) == CODA_OK);
    CHECK(coda_decoder_prefill(dc, pr, pl) == CODA_OK);
    CHECK(coda_decoder_prefill(dm, pr, pl) == CODA_OK);
    CHECK(coda_decoder_logits(dh, l1) == CODA_OK);
    CHECK(coda_decoder_logits(dc, l2) == CODA_OK);
    CHECK(coda_decoder_logits(dm, l3) == CODA_OK);
    CHECK(!memcmp(l1, l3, sizeof l1) && !memcmp(l2, l3, sizeof l2));
    /* streamed bytes = the decoding of the tokens; ids 8 and 9 (no
     * tokenizer entry) stream as U+FFFD */
    coda_generate_params g = coda_generate_default_params();
    g.sampling.temperature = 2.0;
    g.sampling.seed = 4;
    g.max_new_tokens = 40;
    text_buf tb;
    memset(&tb, 0, sizeof tb);
    g.on_token = append;
    g.user = &tb;
    coda_generate_result r[1];
    CHECK_STATUS(ctx, coda_decoder_generate(dh, pr, pl, 1, &g, r, NULL, NULL), CODA_OK);
    char want_text[4096];
    size_t wn = 0;
    int pads = 0;
    for (int i = 0; i < r[0].n; i++) {
      if (r[0].tokens[i] >= 8) {
        memcpy(want_text + wn, "\xef\xbf\xbd", 3);
        wn += 3;
        pads++;
        continue;
      }
      size_t k = 0;
      CHECK(coda_tokenizer_decode(coda_decoder_tokenizer(dh), &r[0].tokens[i], 1, 0,
                                  want_text + wn, sizeof want_text - wn, &k) == CODA_OK);
      wn += k;
    }
    CHECK(r[0].n == 40);
    CHECK(pads > 0); /* temperature 2 over 10 rows draws the padding rows too */
    CHECK(tb.n == wn && !memcmp(tb.buf, want_text, wn));
    coda_generate_result_free(r, 1);
    free(ids);
  }
  coda_decoder_destroy(dh);
  coda_decoder_destroy(dc);
  coda_decoder_destroy(dm);
  /* NaN in a checkpoint */
  float *w = coda_model_weights(m);
  w[coda_model_find(m, "layers.0.feed_forward.w2.weight")->offset + 3] = NAN;
  CHECK(coda_checkpoint_save(ctx, ck, m, NULL, NULL, NULL) == CODA_OK);
  CHECK_STATUS(ctx, coda_decoder_load(ctx, ck, &o, &dc), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "layers.0.feed_forward.w2.weight") != NULL);
  CHECK_STATUS(ctx, coda_decoder_load(ctx, "no-such-model.safetensors", &o, &dc), CODA_ERR_IO);
  coda_model_destroy(m);
  CHECK(remove_tree(dir) == 0);
}

/* coda_generate on a Qwen3 or GPT-2 checkpoint (the reference engine's
 * recompute, which coda_generate takes for families other than Llama) and
 * the host decoder agree on the greedy bytes. */
static void generate_host(coda_context ctx, const coda_model_config *cfg) {
  const coda_model_config c = *cfg;
  const char *fam = coda_model_family_name(c.family);
  coda_model *m = make_model(ctx, &c, 21);
  if (!m) return;
  char ck[256];
  snprintf(ck, sizeof ck, "test_decode_%s.tmp.%d.safetensors", fam, (int)getpid());
  CHECK(coda_checkpoint_save(ctx, ck, m, NULL, NULL, NULL) == CODA_OK);
  enum { N = 10 };
  coda_generate_options g = coda_generate_default_options();
  g.checkpoint = ck;
  g.prompt = "qk";
  g.max_tokens = N;
  char *text = NULL;
  size_t len = 0;
  CHECK_STATUS(ctx, coda_generate_n(ctx, &g, &text, &len), CODA_OK);
  coda_decoder d = NULL;
  coda_decoder_options o = {.struct_size = sizeof o, .batch = 1};
  CHECK_STATUS(ctx, coda_decoder_create(ctx, m, &o, &d), CODA_OK);
  if (text && d && len == 2 + N) {
    int32_t p[2] = {'q', 'k'}, tok[1];
    const int32_t *pr[1] = {p};
    int pl[1] = {2}, same = 1;
    coda_sampling greedy = {0.0, 0, 1.0, 1};
    CHECK_STATUS(ctx, coda_decoder_prefill(d, pr, pl), CODA_OK);
    for (int k = 0; k < N; k++) {
      CHECK_STATUS(ctx, coda_decoder_sample(d, &greedy, NULL, tok), CODA_OK);
      same &= (unsigned char)text[2 + k] == (tok[0] < 256 ? tok[0] : '?');
      if (k + 1 < N) CHECK_STATUS(ctx, coda_decoder_step(d, tok), CODA_OK);
    }
    CHECK_MSG(same, "coda_generate and the decoder differ on a %s checkpoint", fam);
  } else {
    CHECK_MSG(0, "%s generate: %zu bytes, decoder %p", fam, len, (void *)d);
  }
  coda_decoder_destroy(d);
  free(text);
  remove(ck);
  coda_model_destroy(m);
}

int main(void) {
  coda_context ctx;
  coda_context_options co = coda_context_default_options();
  CHECK(coda_context_create(&co, &ctx) == CODA_OK);
  /* GQA (6 query heads over 2), untied head */
  coda_model_config gqa = {300, 48, 2, 6, 2, 40, 32, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p3[3] = {5, 1, 9};
  against_recompute(ctx, &gqa, p3, 3, 8, "gqa");
  /* multi-head, tied embedding, one sequence up to a full cache */
  coda_model_config mha = {260, 32, 2, 4, 4, 24, 20, 1, 500000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p1[1] = {4};
  against_recompute(ctx, &mha, p1, 1, 6, "mha");
  /* a prefill longer than one host chunk (256 rows) */
  coda_model_config lng = {256, 16, 1, 2, 1, 16, 160, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p2[2] = {150, 131};
  against_recompute(ctx, &lng, p2, 2, 2, "chunks");
  /* scaled RoPE (the decoder's frequency table is the training engines'):
   * llama3 with a pre-training context of 8 positions, so the prompts and
   * the new tokens run past it and every kind of pair (kept, smoothed,
   * divided) is used; linear */
  coda_model_config l3 = {270, 32, 2, 4, 2, 40, 40, 0, 10000.0, 1e-5, {CODA_ROPE_LLAMA3, 4.0, 1.0, 4.0, 8.0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  int p4[2] = {19, 6};
  against_recompute(ctx, &l3, p4, 2, 10, "llama3 rope");
  coda_model_config lin = {260, 32, 1, 4, 4, 24, 32, 1, 10000.0, 1e-6, {CODA_ROPE_LINEAR, 4.0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
  against_recompute(ctx, &lin, p4, 2, 8, "linear rope");
  /* Mistral's window on every llama layer: 6 keys, the prompts (19 and 6)
   * and the steps run past it; then 9 keys over prefills longer than one
   * host chunk (the window crosses the chunks' cache) */
  coda_model_config mis = {270, 32, 2, 4, 2, 40, 40, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 6, 0, 0, 0, 0};
  against_recompute(ctx, &mis, p4, 2, 10, "mistral window");
  coda_model_config misl = lng;
  misl.sliding_window = 9;
  against_recompute(ctx, &misl, p2, 2, 2, "mistral window chunks");
  /* Qwen3 on the host: q/k norms before RoPE; tied with 4 heads of 10 over
   * dim 32, untied GQA with head_dim = dim / heads */
  coda_model_config q3t = {280, 32, 2, 4, 2, 40, 24, 1, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, 10, 0, 0, 0, 0, 0};
  against_recompute(ctx, &q3t, p4, 2, 4, "qwen3 tied");
  coda_model_config q3u = {300, 48, 2, 6, 2, 40, 32, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, 0, 0, 0, 0, 0, 0};
  against_recompute(ctx, &q3u, p3, 3, 5, "qwen3 gqa");
  /* the plan prefill is Llama's: Qwen3 asks for it and is refused by name */
  coda_model *qm = make_model(ctx, &q3t, 2);
  if (qm) {
    coda_decoder qd = NULL;
    coda_decoder_options po = {.struct_size = sizeof po, .batch = 1, .prefill = CODA_PREFILL_PLANS};
    CHECK_STATUS(ctx, coda_decoder_create(ctx, qm, &po, &qd), CODA_ERR_NOT_SUPPORTED);
    CHECK(qd == NULL && strstr(coda_last_error(ctx), "qwen3") &&
          strstr(coda_last_error(ctx), "plan prefill"));
    coda_model_destroy(qm);
  }
  coda_model_config gq = {260, 32, 2, 4, 2, 40, 24, 0, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_QWEN3, 6, 0, 0, 0, 0, 0};
  generate_host(ctx, &gq);
  coda_model_config gg = {260, 32, 2, 4, 4, 40, 24, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};
  generate_host(ctx, &gg);
  /* GPT-2 on the host: LayerNorms, biases, GELU, learned positions (the
   * prompts and steps run up to its table's end), no RoPE; an odd head
   * width (27 over 3 heads) */
  coda_model_config g2 = {280, 32, 2, 4, 4, 40, 24, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};
  against_recompute(ctx, &g2, p4, 2, 4, "gpt2");
  coda_model_config g9 = {260, 27, 2, 3, 3, 36, 20, 1, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GPT2, 0, 0, 0, 0, 0, 0};
  against_recompute(ctx, &g9, p1, 1, 6, "gpt2 head width 9");
  coda_model *gm = make_model(ctx, &g2, 2);
  if (gm) {
    coda_decoder gd = NULL;
    coda_decoder_options po = {.struct_size = sizeof po, .batch = 1, .prefill = CODA_PREFILL_PLANS};
    CHECK_STATUS(ctx, coda_decoder_create(ctx, gm, &po, &gd), CODA_ERR_NOT_SUPPORTED);
    CHECK(gd == NULL && strstr(coda_last_error(ctx), "gpt2") &&
          strstr(coda_last_error(ctx), "plan prefill"));
    coda_model_destroy(gm);
  }
  /* Gemma 3 on the host: (1 + w) norms, post-norms, GeGLU, the embedding
   * scale, the soft cap; layers 0 and 2 local with a window of 5 (the
   * prompts and the steps run well past it), layer 1 global; head_dim 10
   * over dim 32; then untied with a window of 7 over prefills longer than
   * one host chunk (the window crosses the chunks' cache) */
  coda_model_config gm3 = {280, 32, 3, 4, 2, 40, 40, 1, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GEMMA3, 10, 5, 2, 10000.0, 12.0, 20.0};
  against_recompute(ctx, &gm3, p4, 2, 10, "gemma3");
  coda_model_config gml = {256, 16, 2, 2, 1, 16, 160, 0, 1000000.0, 1e-6, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_GEMMA3, 0, 7, 2, 10000.0, 0, 0};
  against_recompute(ctx, &gml, p2, 2, 2, "gemma3 chunks");
  generate_host(ctx, &gm3);
  coda_model *g3 = make_model(ctx, &gm3, 2);
  if (g3) {
    coda_decoder gd = NULL;
    coda_decoder_options po = {.struct_size = sizeof po, .batch = 1, .prefill = CODA_PREFILL_PLANS};
    CHECK_STATUS(ctx, coda_decoder_create(ctx, g3, &po, &gd), CODA_ERR_NOT_SUPPORTED);
    CHECK(gd == NULL && strstr(coda_last_error(ctx), "gemma3") &&
          strstr(coda_last_error(ctx), "plan prefill"));
    coda_model_destroy(g3);
  }
  sampling(ctx);
  loading(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
