/* libFuzzer harness for the BPE tokenizer: the tokenizer.json loader
 * (src/data/bpe_load.c over src/io/json.c) and encode / decode
 * (src/data/bpe.c, bpe_split.c) on arbitrary bytes.
 *
 * An input that starts with '{' is a tokenizer.json: a refusal must be
 * CODA_ERR_PARSE, CODA_ERR_NOT_SUPPORTED or CODA_ERR_OUT_OF_MEMORY with a
 * message naming tokenizer.json; a tokenizer that loads must encode the
 * input itself (any bytes) into ids below its vocabulary size and decode
 * them.
 *
 * Any other input is text: byte 0 picks one of three tokenizers written
 * below (GPT-2: ByteLevel with its regex; Llama 3 and Qwen2: Split with
 * their regex, then ByteLevel), each with the full byte alphabet, a few
 * merges and added tokens, so that decode(encode(x)) == x holds for every
 * byte string x (docs/tokenizer.md). The rest is encoded and must give ids
 * below the vocabulary size, decode back to the same bytes, encode the same
 * way twice (the word cache), give the same prefix and total when the
 * buffer is too small (CODA_ERR_OVERFLOW), and with
 * CODA_TOKENIZER_ADD_SPECIAL the BOS id before the same ids. Any
 * violation aborts.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=tokenizer) */
#include "coda_tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coda_context ctx;
static coda_tokenizer builtin[3];

static void fail(const char *what) {
  fprintf(stderr, "fuzz_tokenizer: %s\n", what);
  abort();
}

/* ---- the three tokenizers of the text mode ---- */

typedef struct text {
  char *p;
  size_t n, cap;
} text;

static void put(text *t, const char *s) {
  size_t n = strlen(s);
  if (t->n + n + 1 > t->cap) {
    t->cap = (t->cap + n) * 2 + 64;
    t->p = realloc(t->p, t->cap);
    if (!t->p) fail("out of memory");
  }
  memcpy(t->p + t->n, s, n + 1);
  t->n += n;
}

/* The GPT-2 byte alphabet: printable Latin-1 bytes stand for themselves,
 * the other 68 for U+0100 onwards in byte order. As a JSON escape. */
static void alphabet_escape(int b, char out[8]) {
  static int next[256], done;
  if (!done) {
    int k = 256;
    for (int i = 0; i < 256; i++)
      next[i] = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174) ? i : k++;
    done = 1;
  }
  snprintf(out, 8, "\\u%04x", next[b]);
}

static const char *const kRegex[3] = {
    NULL, /* GPT-2: ByteLevel's own */
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"};

/* merges over the alphabet (\u0120 is the space), then added tokens */
static const char *const kMerges[] = {"\\u0120 t", "h e", "\\u0120t he", "i n", "in g", "e r",
                                      "\\u0120 a", "o n", "\\u00c3 \\u00a9", "\\u0120 \\u0120"};
static const char *const kMerged[] = {"\\u0120t", "he", "\\u0120the", "in", "ing", "er",
                                      "\\u0120a", "on", "\\u00c3\\u00a9", "\\u0120\\u0120"};
#define NMERGES ((int)(sizeof kMerges / sizeof kMerges[0]))

static coda_tokenizer make_builtin(int kind) {
  text t = {NULL, 0, 0};
  char b[1024];
  put(&t, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
  const int bos = 256 + NMERGES, eot = bos + 1, word = bos + 2;
  snprintf(b, sizeof b,
           "{\"id\":%d,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
           "\"normalized\":false,\"special\":true},"
           "{\"id\":%d,\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,"
           "\"rstrip\":false,\"normalized\":false,\"special\":true},"
           "{\"id\":%d,\"content\":\"hello world\",\"single_word\":false,\"lstrip\":false,"
           "\"rstrip\":false,\"normalized\":true,\"special\":false}],",
           bos, eot, word);
  put(&t, b);
  put(&t, "\"normalizer\":null,\"pre_tokenizer\":");
  if (kind == 0) {
    put(&t, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}");
  } else {
    put(&t, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"");
    put(&t, kRegex[kind]);
    put(&t, "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
            "\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]}");
  }
  snprintf(b, sizeof b,
           ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
           "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
           "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[%d],\"tokens\":[\"<s>\"]}}},",
           bos);
  put(&t, b);
  put(&t, "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
          "\"unk_token\":null,\"byte_fallback\":false,\"ignore_merges\":");
  put(&t, kind == 1 ? "true" : "false");
  put(&t, ",\"vocab\":{");
  for (int i = 0; i < 256; i++) {
    char e[8];
    alphabet_escape(i, e);
    snprintf(b, sizeof b, "%s\"%s\":%d", i ? "," : "", e, i);
    put(&t, b);
  }
  for (int i = 0; i < NMERGES; i++) {
    snprintf(b, sizeof b, ",\"%s\":%d", kMerged[i], 256 + i);
    put(&t, b);
  }
  put(&t, "},\"merges\":[");
  for (int i = 0; i < NMERGES; i++) {
    snprintf(b, sizeof b, "%s\"%s\"", i ? "," : "", kMerges[i]);
    put(&t, b);
  }
  put(&t, "]}}");
  coda_tokenizer tok = NULL;
  if (coda_tokenizer_load_json(ctx, t.p, t.n, &tok) != CODA_OK) {
    fprintf(stderr, "%s\n", coda_last_error(ctx));
    fail("a built-in tokenizer does not load");
  }
  free(t.p);
  return tok;
}

/* ---- the two modes ---- */

static void load_mode(const uint8_t *d, size_t n) {
  coda_tokenizer tok = (coda_tokenizer)(uintptr_t)1; /* must be reset */
  coda_status s = coda_tokenizer_load_json(ctx, (const char *)d, n, &tok);
  if (s != CODA_OK) {
    if (tok) fail("a refused tokenizer.json returned a tokenizer");
    if (s != CODA_ERR_PARSE && s != CODA_ERR_NOT_SUPPORTED && s != CODA_ERR_OUT_OF_MEMORY)
      fail("unexpected status for a refused tokenizer.json");
    if (!strstr(coda_last_error(ctx), "tokenizer.json")) fail("a refusal that does not name tokenizer.json");
    return;
  }
  size_t vocab = coda_tokenizer_vocab_size(tok);
  int32_t *ids = NULL;
  size_t cap = 0, m = 0;
  s = coda_tokenizer_encode_alloc(tok, d, n, CODA_TOKENIZER_ADD_SPECIAL, &ids, &cap, &m);
  if (s != CODA_OK && s != CODA_ERR_OUT_OF_MEMORY) fail("encode failed on a loaded tokenizer");
  if (s == CODA_OK) {
    for (size_t i = 0; i < m; i++)
      if (ids[i] < 0 || (size_t)ids[i] >= vocab) fail("an id outside the vocabulary");
    char *out = NULL;
    size_t ocap = 0, len = 0;
    s = coda_tokenizer_decode_alloc(tok, ids, m, 0, &out, &ocap, &len);
    if (s != CODA_OK && s != CODA_ERR_OUT_OF_MEMORY) fail("decode of encoded ids failed");
    free(out);
  }
  free(ids);
  (void)coda_tokenizer_token_id(tok, "<s>");
  coda_tokenizer_destroy(tok);
}

static void text_mode(coda_tokenizer tok, const uint8_t *d, size_t n) {
  size_t vocab = coda_tokenizer_vocab_size(tok);
  int32_t *ids = NULL, *again = NULL, *sp = NULL;
  size_t cap = 0, m = 0, cap2 = 0, m2 = 0, cap3 = 0, m3 = 0;
  if (coda_tokenizer_encode_alloc(tok, d, n, 0, &ids, &cap, &m) != CODA_OK) fail("encode failed");
  for (size_t i = 0; i < m; i++)
    if (ids[i] < 0 || (size_t)ids[i] >= vocab) fail("an id outside the vocabulary");
  if (m > n) fail("more ids than bytes");
  char *out = NULL;
  size_t ocap = 0, len = 0;
  if (coda_tokenizer_decode_alloc(tok, ids, m, 0, &out, &ocap, &len) != CODA_OK) fail("decode failed");
  if (len != n || (n && memcmp(out, d, n))) fail("decode(encode(x)) != x");
  free(out);
  if (coda_tokenizer_encode_alloc(tok, d, n, 0, &again, &cap2, &m2) != CODA_OK || m2 != m ||
      (m && memcmp(again, ids, m * sizeof *ids)))
    fail("a second encode differs");
  if (m >= 2) { /* a buffer too small: the first ids and the whole count */
    size_t half = m / 2, total = 0;
    int32_t *small = malloc(half * sizeof *small);
    if (!small) fail("out of memory");
    if (coda_tokenizer_encode(tok, d, n, 0, small, half, &total) != CODA_ERR_OVERFLOW || total != m ||
        memcmp(small, ids, half * sizeof *small))
      fail("a short buffer does not give the prefix, the count and CODA_ERR_OVERFLOW");
    free(small);
  }
  if (coda_tokenizer_encode_alloc(tok, d, n, CODA_TOKENIZER_ADD_SPECIAL, &sp, &cap3, &m3) != CODA_OK ||
      m3 != m + 1 || sp[0] != coda_tokenizer_bos_id(tok) || (m && memcmp(sp + 1, ids, m * sizeof *ids)))
    fail("ADD_SPECIAL does not give BOS then the same ids");
  free(ids);
  free(again);
  free(sp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) {
    if (coda_context_create(NULL, &ctx) != CODA_OK) abort();
    for (int k = 0; k < 3; k++) builtin[k] = make_builtin(k);
  }
  if (size && data[0] == '{') load_mode(data, size);
  else if (size) text_mode(builtin[data[0] % 3], data + 1, size - 1);
  return 0;
}
