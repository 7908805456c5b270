/* The corpus harness's reference (fuzz/fuzz_corpus.c): the token stream of
 * a text, JSON Lines or llm.c input decoded here independently of the
 * preparer, and the checks of the written shards against it (the split of
 * coda_train.h, the vocabulary, the _bpe modes' decoding to the documents). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_corpus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void push(stream *s, uint32_t v) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->t = realloc(s->t, s->cap * sizeof *s->t);
    if (!s->t) fail("out of memory");
  }
  s->t[s->n++] = v;
}

/* Documents run from the first byte that is not '\n' or '\r' to the first
 * '\n' followed by "\n" or "\r\n" (that '\n' kept); bytes as tokens. A
 * NUL byte is no text: refused; so is a file whose first 64 KiB hold at
 * least 4 control bytes (not tab, line ends, VT, FF, ESC; DEL counts), more
 * than 1 in 32 of them. */
int ref_binary(const uint8_t *d, size_t n) {
  if (memchr(d, 0, n)) return 1;
  size_t seen = n < ((size_t)64 << 10) ? n : (size_t)64 << 10, ctrl = 0;
  for (size_t i = 0; i < seen; i++)
    ctrl += (d[i] < 0x20 && !strchr("\t\n\v\f\r\x1b", d[i])) || d[i] == 0x7f;
  return ctrl >= 4 && ctrl * 32 > seen;
}

int ref_text(const uint8_t *d, size_t n, stream *s) {
  if (ref_binary(d, n)) return 0;
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
int ref_jsonl(const uint8_t *d, size_t n, stream *s) {
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
int ref_llmc(const uint8_t *d, size_t n, stream *s) {
  if (n < 1024 || le32(d) != 20240520 || le32(d + 4) != 1) return 0;
  int32_t count = le32(d + 8);
  if (count < 0 || (uint64_t)count * 2 != n - 1024) return 0;
  for (int32_t i = 0; i < count; i++)
    push(s, (uint32_t)d[1024 + 2 * i] | (uint32_t)d[1025 + 2 * i] << 8);
  return 1;
}

/* ---- the split of coda_train.h ---- */

/* OUT/name reads back as want's tokens, of vocabulary want_vocab. */
void expect_shard(const char *name, const stream *want, uint32_t want_vocab) {
  char p[4400];
  snprintf(p, sizeof p, "%s/%s", out_dir, name);
  uint32_t *got = NULL, vocab = 0;
  uint64_t count = 0;
  if (coda_shard_read(ctx, p, &got, &count, &vocab) != CODA_OK) {
    fprintf(stderr, "%s\n", coda_last_error(ctx));
    fail("a written shard does not read back");
  }
  if (vocab != want_vocab) fail("the shard's vocabulary differs");
  if (count != want->n || (count && memcmp(got, want->t, count * 4))) {
    fprintf(stderr, "%s: %llu tokens, the reference has %zu\n", name, (unsigned long long)count,
            want->n);
    fail("the shard's tokens differ from the reference");
  }
  free(got);
}

void expect_split(const stream *e, uint32_t want_vocab) {
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
  expect_shard("train.tok", &tr, want_vocab);
  expect_shard("val.tok", &va, want_vocab);
  free(tr.t);
  free(va.t);
}

/* The _bpe modes: the shards in stream order decode to the documents,
 * each followed by the separator's text. */
void expect_bpe(const stream *e, uint64_t ntr, uint64_t nva) {
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

int too_small(const stream *e) {
  const size_t cap = (size_t)CORPUS_BLOCK * 20;
  if (e->n < cap) return e->n < 4;
  size_t nva = 0;
  for (size_t i = 0; i < e->n; i++) nva += (i / CORPUS_BLOCK) % 20 == 19;
  return nva < 2 || e->n - nva < 2;
}

