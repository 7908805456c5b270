/* The BPE tokenizer's API on a small hand-written tokenizer.json: merges
 * by rank (both file forms), added tokens, the BOS template, decoding,
 * buffers too small, bytes that are not UTF-8, and files it refuses with a
 * message naming the field (also what the fuzzer found: ids far above the
 * vocabulary's size, keys twice, NUL bytes in a type, non-regular files). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "coda.h"
#include "coda_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* a=0 b=1 c=2 " "=3 ab=4 abc=5 " a"=6 <s>=7 (U+0120 is the alphabet's space) */
static const char *vocab = "{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,\"abc\":5,\"\\u0120a\":6}";
static const char *merges_str = "[\"a b\",\"ab c\",\"\\u0120 a\"]";
static const char *merges_pair = "[[\"a\",\"b\"],[\"ab\",\"c\"],[\"\\u0120\",\"a\"]]";
static const char *bytelevel = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}";
static const char *added = "[{\"id\":7,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                           "\"normalized\":false,\"special\":true}]";
static const char *post = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                          "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
                          "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[7],\"tokens\":[\"<s>\"]}}}";

static char *make(const char *model_type, const char *merges, const char *normalizer, const char *pre) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":%s,\"normalizer\":%s,"
           "\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":{\"type\":\"ByteLevel\"},"
           "\"model\":{\"type\":\"%s\",\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,"
           "\"byte_fallback\":false,\"vocab\":%s,\"merges\":%s}}",
           added, normalizer, pre, post, model_type, vocab, merges);
  return buf;
}

static coda_status load(coda_context ctx, const char *json, coda_tokenizer *tok) {
  return coda_tokenizer_load_json(ctx, json, strlen(json), tok);
}

static void check_ids(coda_tokenizer tok, const char *text, unsigned flags, const int32_t *want, size_t nwant) {
  int32_t ids[64];
  size_t n = 0;
  CHECK(coda_tokenizer_encode(tok, text, strlen(text), flags, ids, 64, &n) == CODA_OK);
  CHECK_MSG(n == nwant && (!n || !memcmp(ids, want, n * sizeof *ids)), "\"%s\": %zu ids", text, n);
}

static void check_refused(coda_context ctx, const char *json, coda_status want, const char *needle) {
  coda_tokenizer tok = (coda_tokenizer)1;
  coda_status st = load(ctx, json, &tok);
  CHECK_EQ_INT(st, want);
  CHECK(tok == NULL);
  CHECK_MSG(strstr(coda_last_error(ctx), needle) != NULL, "message \"%s\" lacks \"%s\"", coda_last_error(ctx), needle);
}

int main(void) {
  coda_context_options o = coda_context_default_options();
  coda_context ctx;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);

  for (int form = 0; form < 2; form++) {
    coda_tokenizer tok = NULL;
    CHECK_MSG(load(ctx, make("BPE", form ? merges_pair : merges_str, "null", bytelevel), &tok) == CODA_OK, "%s",
              coda_last_error(ctx));
    if (!tok) continue;
    CHECK_EQ_INT(coda_tokenizer_vocab_size(tok), 8);
    CHECK_EQ_INT(coda_tokenizer_bos_id(tok), 7);
    CHECK_EQ_INT(coda_tokenizer_eos_id(tok), -1);
    CHECK_EQ_INT(coda_tokenizer_token_id(tok, "abc"), 5);
    CHECK_EQ_INT(coda_tokenizer_token_id(tok, "<s>"), 7);
    CHECK_EQ_INT(coda_tokenizer_token_id(tok, "zz"), -1);
    /* "abc" -> a b c -> ab c -> abc; " ab": (a b) ranks before (" " a) */
    check_ids(tok, "abc ab", 0, (const int32_t[]){5, 3, 4}, 3);
    check_ids(tok, " a", 0, (const int32_t[]){6}, 1);
    check_ids(tok, "<s>abc", 0, (const int32_t[]){7, 5}, 2);
    check_ids(tok, "ab", CODA_TOKENIZER_ADD_SPECIAL, (const int32_t[]){7, 4}, 2);
    check_ids(tok, "", 0, NULL, 0);
    /* bytes without a token are left out (as in tokenizers), their neighbours then merge */
    check_ids(tok, "adb", 0, (const int32_t[]){4}, 1);

    int32_t ids[4];
    size_t n = 0;
    CHECK_EQ_INT(coda_tokenizer_encode(tok, "abc ab", 6, 0, ids, 1, &n), CODA_ERR_OVERFLOW);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 5);

    char out[64];
    size_t len = 0;
    CHECK(coda_tokenizer_decode(tok, (const int32_t[]){7, 5, 3, 4}, 4, 0, out, sizeof out, &len) == CODA_OK);
    CHECK(len == 9 && !memcmp(out, "<s>abc ab", 9));
    CHECK(coda_tokenizer_decode(tok, (const int32_t[]){7, 5}, 2, CODA_TOKENIZER_SKIP_SPECIAL, out, sizeof out, &len) == CODA_OK);
    CHECK(len == 3 && !memcmp(out, "abc", 3));
    CHECK_EQ_INT(coda_tokenizer_decode(tok, (const int32_t[]){5, 5}, 2, 0, out, 4, &len), CODA_ERR_OVERFLOW);
    CHECK_EQ_INT(len, 6);
    CHECK_EQ_INT(coda_tokenizer_decode(tok, (const int32_t[]){5, 99}, 2, 0, out, sizeof out, &len), CODA_ERR_INVALID_ARGUMENT);
    CHECK(strstr(coda_last_error(ctx), "ids[1]") != NULL);

    /* not UTF-8: no failure; what has tokens decodes back */
    int32_t *all = NULL;
    size_t cap = 0;
    const char bad[] = "\xff\xfe a\xc3(\xe2\x82 ab\x80";
    CHECK(coda_tokenizer_encode_alloc(tok, bad, sizeof bad - 1, 0, &all, &cap, &n) == CODA_OK);
    char *text = NULL;
    size_t tcap = 0;
    CHECK(coda_tokenizer_decode_alloc(tok, all, n, 0, &text, &tcap, &len) == CODA_OK);
    CHECK(text && len == 5 && !memcmp(text, " a ab", 5));
    free(all);
    free(text);
    coda_tokenizer_destroy(tok);
  }

  /* refusals and bad files, each naming what is wrong */
  check_refused(ctx, "{\"model\": ", CODA_ERR_PARSE, "line 1, column 11");
  check_refused(ctx, "[1, 2", CODA_ERR_PARSE, "line 1, column 6: ']' expected");
  check_refused(ctx, make("WordPiece", merges_str, "null", bytelevel), CODA_ERR_NOT_SUPPORTED, "model.type: \"WordPiece\"");
  check_refused(ctx, make("BPE", "[\"a z\"]", "null", bytelevel), CODA_ERR_PARSE, "model.merges[0]");
  check_refused(ctx, make("BPE", "[\"abc\"]", "null", bytelevel), CODA_ERR_PARSE, "model.merges[0]");
  check_refused(ctx, make("BPE", "{}", "null", bytelevel), CODA_ERR_PARSE, "model.merges: expected an array");
  check_refused(ctx, make("BPE", merges_str, "{\"type\":\"NFKC\"}", bytelevel), CODA_ERR_NOT_SUPPORTED, "normalizer.type: \"NFKC\"");
  check_refused(ctx, make("BPE", merges_str, "null", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}"),
                CODA_ERR_NOT_SUPPORTED, "pre_tokenizer.type: \"Metaspace\"");
  check_refused(ctx, make("BPE", merges_str, "null",
                          "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},"
                          "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"use_regex\":false}]}"),
                CODA_ERR_NOT_SUPPORTED, "pre_tokenizer.pretokenizers[0].pattern.Regex");
  check_refused(ctx, make("BPE", merges_str, "null", "null"), CODA_ERR_NOT_SUPPORTED, "pre_tokenizer");
  /* a 1 KB file with one id near 2^31 asked for 16 GB before it was bounded */
  const char *dense = vocab;
  vocab = "{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,\"abc\":5,\"\\u0120a\":6,\"z\":2000000000}";
  check_refused(ctx, make("BPE", merges_str, "null", bytelevel), CODA_ERR_NOT_SUPPORTED,
                "model.vocab: the largest id, 2000000000, is far above the 9 entries");
  /* a token twice: the first and the last reader disagree; refused by the JSON reader */
  vocab = "{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,\"abc\":5,\"\\u0120a\":6,\"a\":6}";
  check_refused(ctx, make("BPE", merges_str, "null", bytelevel), CODA_ERR_PARSE, "the key \"a\" appears twice");
  vocab = dense;
  check_refused(ctx, "{\"model\": {}, \"model\": {}}", CODA_ERR_PARSE, "line 1, column 21: the key \"model\" appears twice in the object");
  /* "ByteLevel\0x" is not ByteLevel */
  check_refused(ctx, make("BPE", merges_str, "null", "{\"type\":\"ByteLevel\\u0000x\",\"use_regex\":true}"),
                CODA_ERR_PARSE, "pre_tokenizer.type: the string holds a NUL byte");
  coda_tokenizer tok = NULL;
  /* only a regular file is read, and a FIFO does not block */
  CHECK_EQ_INT(coda_tokenizer_load(ctx, ".", &tok), CODA_ERR_IO);
  CHECK_MSG(strstr(coda_last_error(ctx), "is a directory, not a regular file") != NULL, "%s", coda_last_error(ctx));
  char fifo[64];
  snprintf(fifo, sizeof fifo, "test_tokenizer_fifo.%ld.json", (long)getpid());
  unlink(fifo);
  if (mkfifo(fifo, 0600) == 0) {
    CHECK_EQ_INT(coda_tokenizer_load(ctx, fifo, &tok), CODA_ERR_IO);
    CHECK_MSG(strstr(coda_last_error(ctx), "is a FIFO") != NULL, "%s", coda_last_error(ctx));
    unlink(fifo);
  }
  CHECK_EQ_INT(coda_tokenizer_load(ctx, "/nonexistent/tokenizer.json", &tok), CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "/nonexistent/tokenizer.json") != NULL);
  CHECK_EQ_INT(coda_tokenizer_load(ctx, NULL, &tok), CODA_ERR_INVALID_ARGUMENT);

  coda_context_destroy(ctx);
  return CHECK_DONE();
}
