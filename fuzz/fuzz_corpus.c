/* libFuzzer harness for corpus preparation (coda_prepare_data in
 * src/train/corpus.c, the entry point of `coda train --data`): one binary,
 * three readers, chosen by the name it is run under:
 *
 *   fuzz_jsonl   the input is a JSON Lines file (field "text")
 *   fuzz_llmc    the input is an llm.c token shard (.bin)
 *   fuzz_text    the input is a plain text file (blank-line documents)
 *   fuzz_jsonl_bpe, fuzz_text_bpe   the same with a BPE tokenizer (the
 *                GPT-2-style seed fuzz/corpus/tokenizer/gpt2.json, whose
 *                path is compiled in as CODA_FUZZ_TOKENIZER)
 *
 * Each input is written to a private temporary file and prepared into a
 * fresh output directory, with byte tokens or the tokenizer. The fuzz build makes the
 * reader's chunk (61 bytes), block (8 tokens) and line limit (700 bytes)
 * small, so that inputs of a few KB cross every one of them and reach the
 * streaming split.
 *
 * A refusal must have a message that names the input file and leave no
 * shard (final or partial) behind; an input with "PAR1" at both ends is
 * refused as Parquet (CODA_ERR_NOT_SUPPORTED), and only such an input. An accepted input must give train.tok
 * and val.tok that read back, whose concatenation is the token stream
 * decoded here independently of the preparer (text: the blank-line rule
 * over the whole file at once; JSONL: line by line, the "text" strings;
 * llm.c: the header checks and the uint16 tokens), split by the rule of
 * coda_train.h (a small corpus: its last 20th, at least 2 tokens; else one
 * block in 20), and the vocabulary 256 (bytes) or the largest llm.c token
 * + 1. With the tokenizer, the shards put back in stream order (the split
 * rule) must decode to the documents, each followed by <|endoftext|>, and
 * every id must be below the tokenizer's vocabulary. Inputs the reference
 * refuses must be refused. Any violation aborts.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=jsonl, llmc or text) */
#define _POSIX_C_SOURCE 200809L
#include "coda_tokenizer.h"
#include "coda_train.h"
#include "train/json.h"
#include "train/train.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CORPUS_BLOCK
#error "build with the sizes of scripts/fuzz.sh (-DCORPUS_BLOCK=... -DCORPUS_LINE_MAX=...)"
#endif

enum { MODE_JSONL, MODE_LLMC, MODE_TEXT };
static int mode = -1;
static int bpe; /* with the tokenizer */
static coda_tokenizer tok;
static coda_context ctx;
static char dir[4096], in_path[4200], out_dir[4200];

static void fail(const char *what) {
  fprintf(stderr, "fuzz_corpus: %s\n", what);
  abort();
}

static const char *const kOutNames[4] = {"train.tok", "val.tok", "train.tok.partial",
                                         "val.tok.partial"};

static void remove_dir(void) {
  unlink(in_path);
  char p[4400];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", out_dir, kOutNames[i]);
    unlink(p);
  }
  rmdir(out_dir);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  const char *name = strrchr((*argv)[0], '/');
  name = name ? name + 1 : (*argv)[0];
  mode = strstr(name, "jsonl") ? MODE_JSONL : strstr(name, "llmc") ? MODE_LLMC
         : strstr(name, "text") ? MODE_TEXT : -1;
  if (mode < 0) fail("run as fuzz_jsonl, fuzz_llmc or fuzz_text (the name picks the reader)");
  bpe = strstr(name, "_bpe") != NULL && mode != MODE_LLMC;
  if (coda_context_create(NULL, &ctx) != CODA_OK) fail("no context");
#ifdef CODA_FUZZ_TOKENIZER
  if (bpe && coda_tokenizer_load(ctx, CODA_FUZZ_TOKENIZER, &tok) != CODA_OK) {
    fprintf(stderr, "%s\n", coda_last_error(ctx));
    fail("the tokenizer does not load");
  }
#endif
  if (bpe && !tok) fail("a _bpe mode needs the build's -DCODA_FUZZ_TOKENIZER=path");
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/fuzz_corpus.%ld", t && *t ? t : "/tmp", (long)getpid());
  if (mkdir(dir, 0700) != 0) fail("cannot create the temporary directory");
  snprintf(in_path, sizeof in_path, "%s/in.%s", dir,
           mode == MODE_JSONL ? "jsonl" : mode == MODE_LLMC ? "bin" : "txt");
  snprintf(out_dir, sizeof out_dir, "%s/out", dir);
  atexit(remove_dir);
  return 0;
}

static void put_file(const uint8_t *d, size_t n) {
  int fd = open(in_path, O_WRONLY | O_TRUNC | O_CREAT, 0600);
  if (fd < 0) fail("cannot write the temporary file");
  for (size_t at = 0; at < n;) {
    ssize_t w = write(fd, d + at, n - at);
    if (w <= 0) fail("short write");
    at += (size_t)w;
  }
  close(fd);
}

static int exists(const char *name) {
  char p[4400];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", out_dir, name);
  return stat(p, &st) == 0;
}

static void clear_out(void) {
  char p[4400];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", out_dir, kOutNames[i]);
    unlink(p);
  }
}

/* ---- the reference stream ---- */

#define DOC_END 0x100u /* in the reference of the _bpe modes: a document ends */

typedef struct stream {
  uint32_t *t;
  size_t n, cap;
} stream;

static void push(stream *s, uint32_t v) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->t = realloc(s->t, s->cap * sizeof *s->t);
    if (!s->t) fail("out of memory");
  }
  s->t[s->n++] = v;
}

/* Documents run from the first byte that is not '\n' or '\r' to the first
 * '\n' followed by "\n" or "\r\n" (that '\n' kept); bytes as tokens. */
static int ref_text(const uint8_t *d, size_t n, stream *s) {
  size_t i = 0;
  while (i < n) {
    while (i < n && (d[i] == '\n' || d[i] == '\r')) i++;
    if (i == n) break;
    size_t end = n;
    for (size_t j = i; j < n; j++)
      if (d[j] == '\n' && ((j + 1 < n && d[j + 1] == '\n') ||
                           (j + 2 < n && d[j + 1] == '\r' && d[j + 2] == '\n'))) {
        end = j + 1;
        break;
      }
    for (; i < end; i++) push(s, d[i]);
    if (bpe) push(s, DOC_END);
  }
  return 1;
}

/* Lines split at '\n', trailing "\n", "\r" and " " dropped, blank lines
 * skipped; each an object whose "text" is a string, its UTF-8 bytes the
 * tokens. 0: the input must be refused. */
static int ref_jsonl(const uint8_t *d, size_t n, stream *s) {
  size_t i = 0;
  while (i < n) {
    const uint8_t *nl = memchr(d + i, '\n', n - i);
    size_t len = nl ? (size_t)(nl - (d + i)) + 1 : n - i;
    if (len > CORPUS_LINE_MAX) return 0;
    size_t k = len;
    while (k > 0 && (d[i + k - 1] == '\n' || d[i + k - 1] == '\r' || d[i + k - 1] == ' ')) k--;
    if (k > 0) {
      char err[200];
      coda_json_doc *doc = coda_json_parse((const char *)d + i, k, err, sizeof err);
      if (!doc) return 0;
      const coda_json *r = coda_json_root(doc), *t = coda_json_get(r, "text");
      int ok = r->kind == CODA_JSON_OBJECT && t && t->kind == CODA_JSON_STRING;
      for (size_t j = 0; ok && j < t->n; j++) push(s, (unsigned char)t->u.str[j]);
      if (ok && bpe && t->n > 0) push(s, DOC_END);
      coda_json_free(doc);
      if (!ok) return 0;
    }
    i += len;
  }
  return 1;
}

static int32_t le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

/* 256 int32 of header (magic 20240520, version 1, count), count uint16. */
static int ref_llmc(const uint8_t *d, size_t n, stream *s) {
  if (n < 1024 || le32(d) != 20240520 || le32(d + 4) != 1) return 0;
  int32_t count = le32(d + 8);
  if (count < 0 || (uint64_t)count * 2 != n - 1024) return 0;
  for (int32_t i = 0; i < count; i++)
    push(s, (uint32_t)d[1024 + 2 * i] | (uint32_t)d[1025 + 2 * i] << 8);
  return 1;
}

/* ---- the split of coda_train.h ---- */

static void expect_split(const stream *e, uint32_t want_vocab) {
  const size_t need = 2, cap = (size_t)CORPUS_BLOCK * 20;
  stream tr = {0}, va = {0};
  if (e->n < cap) {
    size_t nv = (e->n + 19) / 20;
    if (nv < need) nv = need;
    if (e->n < 2 * need) fail("a corpus too small was accepted");
    for (size_t i = 0; i < e->n; i++) push(i < e->n - nv ? &tr : &va, e->t[i]);
  } else {
    for (size_t i = 0; i < e->n; i++)
      push((i / CORPUS_BLOCK) % 20 == 19 ? &va : &tr, e->t[i]);
    if (tr.n < need || va.n < need) fail("a split with too few tokens was accepted");
  }
  char p[4400];
  const stream *want[2] = {&tr, &va};
  static const char *const names[2] = {"train.tok", "val.tok"};
  for (int k = 0; k < 2; k++) {
    snprintf(p, sizeof p, "%s/%s", out_dir, names[k]);
    uint32_t *got = NULL, vocab = 0;
    uint64_t count = 0;
    if (coda_shard_read(ctx, p, &got, &count, &vocab) != CODA_OK) {
      fprintf(stderr, "%s\n", coda_last_error(ctx));
      fail("a written shard does not read back");
    }
    if (vocab != want_vocab) fail("the shard's vocabulary differs");
    if (count != want[k]->n || (count && memcmp(got, want[k]->t, count * 4))) {
      fprintf(stderr, "%s: %llu tokens, the reference has %zu\n", names[k],
              (unsigned long long)count, want[k]->n);
      fail("the shard's tokens differ from the reference");
    }
    free(got);
  }
  free(tr.t);
  free(va.t);
}

/* The _bpe modes: the shards in stream order decode to the documents,
 * each followed by the separator's text. */
static void expect_bpe(const stream *e, uint64_t ntr, uint64_t nva) {
  char p[4400];
  uint32_t *t[2] = {NULL, NULL}, vocab = 0;
  uint64_t n[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    snprintf(p, sizeof p, "%s/%s", out_dir, kOutNames[k]);
    if (coda_shard_read(ctx, p, &t[k], &n[k], &vocab) != CODA_OK) {
      fprintf(stderr, "%s\n", coda_last_error(ctx));
      fail("a written shard does not read back");
    }
    if (vocab != coda_tokenizer_vocab_size(tok)) fail("the shard's vocabulary is not the tokenizer's");
  }
  if (n[0] != ntr || n[1] != nva) fail("the reported counts differ from the shards'");
  /* back in stream order: a small corpus is train then its tail; else
   * block b of the stream went to validation when b % 20 == 19 */
  const size_t total = (size_t)(n[0] + n[1]), cap = (size_t)CORPUS_BLOCK * 20;
  int32_t *ids = malloc((total ? total : 1) * sizeof *ids);
  if (!ids) fail("out of memory");
  size_t at[2] = {0, 0};
  if (total < cap) {
    size_t nv = (total + 19) / 20;
    if (nv < 2) nv = 2;
    if (n[1] != nv) fail("a small corpus' validation is not its last 20th");
    for (size_t i = 0; i < total; i++) ids[i] = (int32_t)(i < n[0] ? t[0][i] : t[1][i - n[0]]);
  } else {
    for (size_t i = 0; i < total; i++) {
      const int k = (i / CORPUS_BLOCK) % 20 == 19;
      if (at[k] >= n[k]) fail("the shards' sizes do not follow the block split");
      ids[i] = (int32_t)t[k][at[k]++];
    }
  }
  for (size_t i = 0; i < total; i++)
    if ((uint32_t)ids[i] >= vocab) fail("an id outside the vocabulary");
  char *text = NULL;
  size_t tcap = 0, tlen = 0;
  if (coda_tokenizer_decode_alloc(tok, ids, total, 0, &text, &tcap, &tlen) != CODA_OK)
    fail("the shards do not decode");
  static const char sep[] = "<|endoftext|>";
  size_t want = 0;
  for (size_t i = 0; i < e->n; i++) want += e->t[i] == DOC_END ? sizeof sep - 1 : 1;
  int same = want == tlen;
  for (size_t i = 0, j = 0; same && i < e->n; i++) {
    if (e->t[i] == DOC_END) {
      same = !memcmp(text + j, sep, sizeof sep - 1);
      j += sizeof sep - 1;
    } else {
      same = (unsigned char)text[j++] == e->t[i];
    }
  }
  if (!same) {
    fprintf(stderr, "decoded %zu bytes, the documents and separators are %zu\n", tlen, want);
    fail("the shards do not decode to the documents");
  }
  free(text);
  free(ids);
  free(t[0]);
  free(t[1]);
}

static int too_small(const stream *e) {
  const size_t cap = (size_t)CORPUS_BLOCK * 20;
  if (e->n < cap) return e->n < 4;
  size_t nva = 0;
  for (size_t i = 0; i < e->n; i++) nva += (i / CORPUS_BLOCK) % 20 == 19;
  return nva < 2 || e->n - nva < 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  put_file(data, size);
  clear_out();
  /* a Parquet file ("PAR1" at both ends, whatever its name) is refused as
   * not supported, naming it */
  const int parquet = size >= 12 && !memcmp(data, "PAR1", 4) && !memcmp(data + size - 4, "PAR1", 4);
  stream e = {0};
  const int ok = mode == MODE_JSONL ? ref_jsonl(data, size, &e)
                 : mode == MODE_LLMC ? ref_llmc(data, size, &e) : ref_text(data, size, &e);
  uint32_t vocab = 256;
  if (mode == MODE_LLMC) {
    uint32_t mx = 0;
    for (size_t i = 0; i < e.n; i++) mx = e.t[i] > mx ? e.t[i] : mx;
    vocab = mx + 1;
  }
  coda_data_options o = coda_data_default_options();
  o.path = in_path;
  o.format = mode == MODE_JSONL ? CODA_DATA_JSONL : mode == MODE_LLMC ? CODA_DATA_LLMC
             : CODA_DATA_TEXT;
#ifdef CODA_FUZZ_TOKENIZER
  if (bpe) o.tokenizer = CODA_FUZZ_TOKENIZER;
#endif
  uint64_t ntr = 0, nva = 0;
  uint32_t got_vocab = 0;
  coda_status s = coda_prepare_data(ctx, &o, out_dir, &ntr, &nva, &got_vocab);
  if (parquet != (s == CODA_ERR_NOT_SUPPORTED)) fail("a Parquet file not refused as one, or another refused as one");
  if (s != CODA_OK) {
    if (s != CODA_ERR_IO && s != CODA_ERR_INVALID_ARGUMENT && s != CODA_ERR_OUT_OF_MEMORY &&
        s != CODA_ERR_NOT_SUPPORTED)
      fail("unexpected status");
    if (!strstr(coda_last_error(ctx), in_path)) {
      fprintf(stderr, "%s\n", coda_last_error(ctx));
      fail("a refusal that does not name the input file");
    }
    if (exists("train.tok") || exists("val.tok") || exists("train.tok.partial") ||
        exists("val.tok.partial"))
      fail("a refusal left a shard behind");
    /* with the tokenizer the count of tokens is not known here: a refusal
     * for size must say so */
    const int size_refusal = strstr(coda_last_error(ctx), "too small") ||
                             strstr(coda_last_error(ctx), "needs at least");
    if (ok && !parquet && (bpe ? !size_refusal : !too_small(&e))) {
      fprintf(stderr, "%s\n", coda_last_error(ctx));
      fail("an input the reference accepts was refused");
    }
  } else {
    if (!ok) fail("an input the reference refuses was accepted");
    if (parquet) fail("a Parquet file was accepted");
    if (bpe) {
      expect_bpe(&e, ntr, nva);
    } else {
      if (got_vocab != vocab || ntr + nva != e.n) fail("the reported counts or vocabulary differ");
      expect_split(&e, vocab);
    }
  }
  free(e.t);
  clear_out();
  unlink(in_path);
  return 0;
}
