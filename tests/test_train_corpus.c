/* Corpus preparation (coda_prepare_data) on small generated files: plain
 * text (blank-line documents), a directory of .txt files, JSON Lines with
 * a BPE tokenizer (BOS between documents, the field named), llm.c token
 * shards; the validation split (a small corpus' tail, then one block in
 * 20), the errors that name the file and the count (and an llm.c name
 * holding both "train" and "val"; a directory entry named like a corpus
 * file that is not a regular file), the default corpus's directory walk
 * (coda_prepare_corpus) by the same rule, determinism, and
 * token shards opened as memory maps. Expected streams are built here
 * from the documents, independently of the preparer. */
#define _POSIX_C_SOURCE 200809L
#include "coda_tokenizer.h"
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "base/rng.h"
#include "data/data.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], out[300];

static void put_file(const char *name, const void *data, size_t n) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  CHECK(spit(p, data, n) == 0);
}

static char *path_of(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

/* Reads out/train.tok and out/val.tok. */
static void read_out(coda_context ctx, uint32_t **tr, uint64_t *ntr, uint32_t **va, uint64_t *nva,
                     uint32_t *vocab) {
  char p[512];
  snprintf(p, sizeof p, "%s/train.tok", out);
  CHECK(coda_shard_read(ctx, p, tr, ntr, vocab) == CODA_OK);
  snprintf(p, sizeof p, "%s/val.tok", out);
  CHECK(coda_shard_read(ctx, p, va, nva, NULL) == CODA_OK);
}

static coda_status prepare(coda_context ctx, const char *path, coda_data_format f,
                           const char *tokenizer, const char *field, uint64_t min_tokens) {
  coda_data_options o = coda_data_default_options();
  o.path = path;
  o.format = f;
  o.tokenizer = tokenizer;
  o.text_field = field;
  o.min_tokens = min_tokens;
  return coda_prepare_data(ctx, &o, out, NULL, NULL, NULL);
}

/* The small-corpus rule: validation = the last max(ceil(n/20), need). */
static void check_tail_split(coda_context ctx, const uint32_t *want, uint64_t n, uint64_t need,
                             const char *what) {
  uint32_t *tr = NULL, *va = NULL, voc = 0;
  uint64_t ntr = 0, nva = 0;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  uint64_t wv = (n + 19) / 20 > need ? (n + 19) / 20 : need;
  CHECK_MSG(ntr + nva == n && nva == wv, "%s: %llu + %llu tokens, wanted %llu with %llu validation",
            what, (unsigned long long)ntr, (unsigned long long)nva, (unsigned long long)n,
            (unsigned long long)wv);
  if (ntr + nva == n && tr && va) {
    CHECK(!memcmp(tr, want, ntr * 4));
    CHECK(!memcmp(va, want + ntr, nva * 4));
  }
  free(tr);
  free(va);
}

static void text_file(coda_context ctx) {
  /* documents separated by runs of blank lines (CRLF too); leading blank lines */
  const char *text = "\n\nfirst doc line one\nline two\n\n\nsecond doc\r\n\r\nthird\n";
  put_file("c.txt", text, strlen(text));
  const char *docs = "first doc line one\nline two\nsecond doc\r\nthird\n";
  uint32_t want[128];
  size_t n = coda_tok_encode(docs, strlen(docs), want);
  CHECK(prepare(ctx, path_of("c.txt"), CODA_DATA_AUTO, NULL, NULL, 5) == CODA_OK);
  check_tail_split(ctx, want, n, 5, "text file");
  /* too small: the file and the count */
  CHECK(prepare(ctx, path_of("c.txt"), CODA_DATA_AUTO, NULL, NULL, 40) == CODA_ERR_IO);
  char msg[128];
  snprintf(msg, sizeof msg, "c.txt: corpus too small: %zu tokens in 1 file", n);
  CHECK_MSG(strstr(coda_last_error(ctx), msg) != NULL, "%s", coda_last_error(ctx));
  put_file("empty.txt", "\n\n", 2);
  CHECK(prepare(ctx, path_of("empty.txt"), CODA_DATA_TEXT, NULL, NULL, 0) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "0 tokens") != NULL);
  CHECK(prepare(ctx, path_of("missing.txt"), CODA_DATA_AUTO, NULL, NULL, 0) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "missing.txt: no such file") != NULL);
}

/* A corpus of more than 20 blocks: every 20th block of 8192 to validation. */
static void large_text(coda_context ctx) {
  const size_t n = 8192 * 47 + 1000;
  char *t = malloc(n);
  uint64_t r = 5;
  for (size_t i = 0; i < n; i++) t[i] = (char)('a' + coda_rng_below(&r, 26));
  put_file("big.txt", t, n);
  CHECK(prepare(ctx, path_of("big.txt"), CODA_DATA_TEXT, NULL, NULL, 100) == CODA_OK);
  uint32_t *tr = NULL, *va = NULL, voc = 0;
  uint64_t ntr = 0, nva = 0;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK(voc == 256 && ntr + nva == n && nva == 2 * 8192);
  int ok = tr && va;
  uint64_t it = 0, iv = 0;
  for (size_t b = 0; ok && b * 8192 < n; b++) {
    size_t len = n - b * 8192 < 8192 ? n - b * 8192 : 8192;
    int val = b % 20 == 19;
    for (size_t k = 0; ok && k < len; k++) {
      uint32_t want = (unsigned char)t[b * 8192 + k];
      ok = val ? (iv < nva && va[iv++] == want) : (it < ntr && tr[it++] == want);
    }
  }
  CHECK(ok && it == ntr && iv == nva);
  /* the same corpus gives the same files */
  char p[512], q[512];
  snprintf(p, sizeof p, "%s/train.tok", out);
  snprintf(q, sizeof q, "%s/train.copy", dir);
  size_t a;
  unsigned char *first = slurp(p, &a);
  CHECK(first && spit(q, first, a) == 0);
  free(first);
  CHECK(prepare(ctx, path_of("big.txt"), CODA_DATA_TEXT, NULL, NULL, 100) == CODA_OK);
  CHECK(same_file(p, q));
  /* the shard opens as a memory map with the same tokens */
  coda_shard_view v;
  CHECK(coda_shard_open(ctx, p, &v) == CODA_OK);
  CHECK(v.map != NULL && v.owned == NULL && v.count == ntr && v.vocab == 256);
  CHECK(tr && v.tok && !memcmp(v.tok, tr, ntr * 4));
  coda_shard_close(&v);
  /* a uint16 shard is widened into memory */
  uint32_t small[5] = {1, 2, 3, 250, 7};
  snprintf(q, sizeof q, "%s/w2.tok", dir);
  CHECK(coda_shard_write(ctx, q, small, 5, 256, 2) == CODA_OK);
  CHECK(coda_shard_open(ctx, q, &v) == CODA_OK);
  CHECK(v.map == NULL && v.owned != NULL && v.count == 5 && !memcmp(v.tok, small, sizeof small));
  coda_shard_close(&v);
  /* a damaged mapped shard is refused as coda_shard_read refuses it */
  unsigned char *b = slurp(p, &a);
  if (b) {
    b[40] ^= 1;
    CHECK(spit(q, b, a) == 0);
    CHECK(coda_shard_open(ctx, q, &v) == CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), "checksum mismatch") != NULL);
  }
  free(b);
  free(tr);
  free(va);
  free(t);
}

/* Documents whose blank line falls on the 4 MiB boundary of the reads:
 * split there as anywhere else. */
static void chunk_boundary(coda_context ctx) {
  const size_t chunk = (size_t)4 << 20, n = chunk + 4000;
  char *t = malloc(n);
  for (size_t i = 0; i < n; i++) t[i] = (char)('a' + i % 23);
  for (size_t i = 100; i < n; i += 1000) t[i] = '\n'; /* lines */
  /* a blank line across the boundary: the first read ends in one newline
   * and the next begins with another */
  t[chunk - 1] = t[chunk] = '\n';
  t[chunk + 2000] = t[chunk + 2001] = t[chunk + 2002] = '\n'; /* and a run of them inside */
  t[n - 1] = '\n';
  put_file("chunk.txt", t, n);
  /* the expected stream: blank-line runs dropped (each document keeps its
   * last newline) */
  uint32_t *want = malloc(n * sizeof *want);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i] == '\n' && (m == 0 || want[m - 1] == '\n')) continue;
    want[m++] = (unsigned char)t[i];
  }
  CHECK(prepare(ctx, path_of("chunk.txt"), CODA_DATA_TEXT, NULL, NULL, 100) == CODA_OK);
  uint32_t *tr = NULL, *va = NULL, voc;
  uint64_t ntr = 0, nva = 0;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK_MSG(ntr + nva == m, "%llu tokens, wanted %zu", (unsigned long long)(ntr + nva), m);
  /* train and validation blocks interleave: rebuild the stream */
  int ok = tr && va && ntr + nva == m;
  uint64_t it = 0, iv = 0;
  for (size_t i = 0; ok && i < m; i++) {
    int val = (i / 8192) % 20 == 19;
    ok = (val ? va[iv++] : tr[it++]) == want[i];
  }
  CHECK(ok);
  free(tr);
  free(va);
  free(want);
  free(t);
}

/* A run of carriage returns longer than a read (no line break to cut
 * after), whose blank line "\n\r\n" starts in the last two bytes of one
 * read and ends in the next: still a blank line between two documents
 * (found by fuzz/fuzz_corpus.c; the reader took the whole read as text and
 * lost the separator). Two documents: "A\n" + CRs + "\n" and "B\n". Then
 * a blank line split by the last read. */
static void crlf_run_boundary(coda_context ctx) {
  const size_t chunk = (size_t)4 << 20, n = chunk + 4;
  char *t = malloc(n);
  t[0] = 'A';
  t[1] = '\n';
  for (size_t i = 2; i < chunk - 1; i++) t[i] = '\r';
  /* "\n\r" ends the second read, "\n" begins the third */
  memcpy(t + chunk - 1, "\n\r\nB\n", 5);
  put_file("crlf_run.txt", t, n);
  const size_t want = chunk + 2; /* all but the "\r\n" of the blank line */
  CHECK(prepare(ctx, path_of("crlf_run.txt"), CODA_DATA_TEXT, NULL, NULL, 100) == CODA_OK);
  uint32_t *tr = NULL, *va = NULL, voc;
  uint64_t ntr = 0, nva = 0;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK_MSG(ntr + nva == want, "%llu tokens, wanted %zu", (unsigned long long)(ntr + nva), want);
  /* the last tokens of the stream (a validation block or the training
   * tail) are "\n" "B" "\n" */
  const uint64_t last_block = (want - 1) / 8192;
  const uint32_t *end = last_block % 20 == 19 ? va + nva : tr + ntr;
  CHECK(ntr >= 3 && end[-3] == '\n' && end[-2] == 'B' && end[-1] == '\n');
  free(tr);
  free(va);
  /* a blank line at the end whose second '\n' comes alone in the last
   * read: dropped, as anywhere else (the document keeps its one '\n') */
  for (size_t i = 0; i < chunk - 1; i++) t[i] = (char)('a' + i % 23);
  t[chunk - 1] = t[chunk] = '\n';
  put_file("crlf_run.txt", t, chunk + 1);
  CHECK(prepare(ctx, path_of("crlf_run.txt"), CODA_DATA_TEXT, NULL, NULL, 100) == CODA_OK);
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK_MSG(ntr + nva == chunk, "%llu tokens, wanted %zu", (unsigned long long)(ntr + nva), chunk);
  free(tr);
  free(va);
  free(t);
}

static void txt_directory(coda_context ctx) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s/docs", dir);
  CHECK(mkdir(sub, 0777) == 0);
  /* one document per file, in name order, blank lines kept; other files
   * not read (named in a warning: mixed_directory) */
  const char *names[3] = {"docs/b.txt", "docs/a.txt", "docs/notes.md"};
  const char *texts[3] = {"bee\n\nbee two\n", "ay\n", "ignored\n"};
  for (int i = 0; i < 3; i++) put_file(names[i], texts[i], strlen(texts[i]));
  const char *docs = "ay\nbee\n\nbee two\n";
  uint32_t want[64];
  size_t n = coda_tok_encode(docs, strlen(docs), want);
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 3) == CODA_OK);
  check_tail_split(ctx, want, n, 3, "directory");
  CHECK(prepare(ctx, sub, CODA_DATA_JSONL, NULL, NULL, 3) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "no .jsonl files") != NULL);
}

/* An entry of a corpus directory named like a corpus file but not a
 * regular file (a dangling or looping symbolic link, a subdirectory, a
 * FIFO) is refused by name, not skipped: skipping it trained on part of
 * the corpus without a word (found by fuzz_dir). A link to a regular file
 * is read through; hidden names stay out. */
static void txt_directory_not_files(coda_context ctx) {
  static const char *const bad[5] = {"dangling", "loop", "subdir", "fifo", "link_to_dir"};
  static const char *const why[5] = {"dangling symbolic link", "cannot stat", "a directory",
                                     "a FIFO", "a directory"};
  for (int k = 0; k < 5; k++) {
    char sub[300], rel[64], p[600], q[700];
    snprintf(sub, sizeof sub, "%s/odd%d", dir, k);
    CHECK(mkdir(sub, 0777) == 0);
    snprintf(rel, sizeof rel, "odd%d/a.txt", k);
    put_file(rel, "some text to train on\n", 22);
    snprintf(rel, sizeof rel, "odd%d/.hidden.txt", k);
    CHECK(symlink("nowhere", path_of(rel)) == 0); /* hidden: not listed */
    snprintf(p, sizeof p, "%s/b.txt", sub);
    if (k == 0) CHECK(symlink("nowhere.txt", p) == 0);
    if (k == 1) CHECK(symlink("b.txt", p) == 0);
    if (k == 2) CHECK(mkdir(p, 0777) == 0);
    if (k == 3) CHECK(mkfifo(p, 0600) == 0);
    if (k == 4) CHECK(symlink("..", p) == 0);
    snprintf(q, sizeof q, "%s:", p);
    CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_ERR_IO);
    const char *m = coda_last_error(ctx);
    CHECK_MSG(!strncmp(m, q, strlen(q)) && strstr(m, why[k]), "%s: %s", bad[k], m);
    /* with the format named, and when another format's files would be
     * taken in auto mode */
    CHECK(prepare(ctx, sub, CODA_DATA_TEXT, NULL, NULL, 2) == CODA_ERR_IO);
    CHECK_MSG(!strncmp(coda_last_error(ctx), q, strlen(q)), "%s", coda_last_error(ctx));
    snprintf(rel, sizeof rel, "odd%d/a.txt", k);
    CHECK(unlink(path_of(rel)) == 0);
    snprintf(rel, sizeof rel, "odd%d/c.jsonl", k);
    put_file(rel, "{\"text\":\"a document of JSON Lines\"}\n", 36);
    CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_ERR_IO);
    CHECK_MSG(!strncmp(coda_last_error(ctx), q, strlen(q)), "%s", coda_last_error(ctx));
    CHECK(prepare(ctx, sub, CODA_DATA_JSONL, NULL, NULL, 2) == CODA_OK);
  }
  /* a link to a regular file is read through, in the link's place */
  char sub[300], p[600];
  snprintf(sub, sizeof sub, "%s/linked", dir);
  CHECK(mkdir(sub, 0777) == 0);
  put_file("linked/b.txt", "bee ", 4);
  snprintf(p, sizeof p, "%s/a.txt", sub);
  CHECK(symlink("b.txt", p) == 0);
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_OK);
  uint32_t want[8];
  size_t n = coda_tok_encode("bee bee ", 8, want);
  check_tail_split(ctx, want, n, 2, "linked");
}

/* A directory of .txt and .jsonl files: both read, each by its suffix, in
 * name order (the .jsonl was dropped without a word); another file is
 * named in a warning; llm.c shards beside text are refused by name; an
 * explicit format names the files it leaves out. */
static void mixed_directory(coda_context ctx) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s/mixed", dir);
  CHECK(mkdir(sub, 0777) == 0);
  put_file("mixed/a.txt", "plain text\n", 11);
  const char *jl = "{\"text\": \"first json\"}\n{\"text\": \"second\\njson\"}\n";
  put_file("mixed/b.jsonl", jl, strlen(jl));
  put_file("mixed/c.txt", "more text\n", 10);
  put_file("mixed/notes.md", "not read\n", 9);
  const char *docs = "plain text\nfirst jsonsecond\njsonmore text\n";
  uint32_t want[128];
  size_t n = coda_tok_encode(docs, strlen(docs), want);
  coda_warnings_clear(ctx);
  CHECK_MSG(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_OK, "%s", coda_last_error(ctx));
  check_tail_split(ctx, want, n, 2, "mixed .txt and .jsonl");
  const char *w = coda_warnings(ctx);
  CHECK_MSG(strstr(w, "mixed: 1 file not read (first: notes.md)") != NULL, "warning '%s'", w);
  /* --data-format text: the .jsonl is named as left out */
  coda_warnings_clear(ctx);
  CHECK(prepare(ctx, sub, CODA_DATA_TEXT, NULL, NULL, 2) == CODA_OK);
  w = coda_warnings(ctx);
  CHECK_MSG(strstr(w, "2 files not read (first: b.jsonl): --data-format text reads only .txt") != NULL,
            "warning '%s'", w);
  const char *docs2 = "plain text\nmore text\n";
  n = coda_tok_encode(docs2, strlen(docs2), want);
  check_tail_split(ctx, want, n, 2, "--data-format text");
  /* text and llm.c token shards together: refused, both named */
  put_file("mixed/d.bin", "x", 1);
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_ERR_INVALID_ARGUMENT);
  const char *m = coda_last_error(ctx);
  CHECK_MSG(strstr(m, "d.bin") && strstr(m, "a.txt") && strstr(m, "cannot make one stream"), "%s", m);
  coda_warnings_clear(ctx);
}

/* The default corpus's path (coda_prepare_corpus: a directory of fortune
 * files) splits by the rule of --data: three one-document books gave 0
 * validation tokens under the old rule (every 20th document). Both paths
 * give the same shards, and the split is the small corpus's tail. */
static void few_books(coda_context ctx) {
  char sub[300], o2[300];
  snprintf(sub, sizeof sub, "%s/books", dir);
  CHECK(mkdir(sub, 0777) == 0);
  const size_t len = 20000;
  char *all = malloc(3 * len);
  uint64_t r = 17;
  for (size_t i = 0; i < 3 * len; i++)
    all[i] = i % 61 == 60 ? '\n' : (char)('a' + coda_rng_below(&r, 26));
  for (int b = 0; b < 3; b++) {
    char nm[64];
    snprintf(nm, sizeof nm, "books/book%d.txt", b);
    put_file(nm, all + b * len, len);
  }
  put_file("books/book0.txt.dat", "\0\0index", 7); /* a fortune index: not read */
  snprintf(o2, sizeof o2, "%.200s/prepared", dir);
  CHECK_MSG(coda_prepare_corpus(ctx, sub, o2) == CODA_OK, "%s", coda_last_error(ctx));
  uint32_t *want = malloc(3 * len * sizeof *want);
  size_t n = coda_tok_encode(all, 3 * len, want);
  /* read the corpus path's shards through the same checker */
  char save[300];
  snprintf(save, sizeof save, "%s", out);
  snprintf(out, sizeof out, "%s", o2);
  check_tail_split(ctx, want, n, 2, "three books through --corpus");
  uint32_t *tr = NULL, *va = NULL, voc = 0;
  uint64_t ntr = 0, nva = 0;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  snprintf(out, sizeof out, "%s", save);
  /* --data on the same books: the same shards (the index file is named
   * as not read there) */
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_OK);
  uint32_t *tr2 = NULL, *va2 = NULL, voc2 = 0;
  uint64_t ntr2 = 0, nva2 = 0;
  read_out(ctx, &tr2, &ntr2, &va2, &nva2, &voc2);
  CHECK(ntr == ntr2 && nva == nva2 && nva > 0 && voc == voc2);
  if (tr && tr2 && va && va2 && ntr == ntr2 && nva == nva2)
    CHECK(!memcmp(tr, tr2, ntr * 4) && !memcmp(va, va2, nva * 4));
  coda_warnings_clear(ctx);
  free(tr);
  free(va);
  free(tr2);
  free(va2);
  free(want);
  free(all);
}

/* coda_prepare_corpus (coda train --corpus DIR) walks a directory by the
 * rule of --data: a .jsonl file is JSON Lines (it was read as text, its
 * JSON syntax as tokens), any other file text; a fortune index (X.dat,
 * X.u8 beside X) is left out silently, another .dat is named in a warning
 * (it was dropped without a word). */
static void corpus_dir_walker(coda_context ctx) {
  char sub[300], o2[300], save[300];
  snprintf(sub, sizeof sub, "%s/walk", dir);
  CHECK(mkdir(sub, 0777) == 0);
  put_file("walk/a.txt", "plain text\n", 11);
  const char *jl = "{\"text\": \"first json\"}\n{\"text\": \"second\\njson\"}\n";
  put_file("walk/b.jsonl", jl, strlen(jl));
  put_file("walk/c", "a fortune\n%\nanother\n", 20);
  put_file("walk/c.dat", "\0\0\0\2index", 10);
  put_file("walk/c.u8", "\0\0\0\2index", 10);
  put_file("walk/orphan.dat", "\0\1binary", 9);
  snprintf(o2, sizeof o2, "%.200s/walked", dir);
  coda_warnings_clear(ctx);
  CHECK_MSG(coda_prepare_corpus(ctx, sub, o2) == CODA_OK, "%s", coda_last_error(ctx));
  const char *w = coda_warnings(ctx);
  CHECK_MSG(strstr(w, "walk: 1 file not read (first: orphan.dat)") && !strstr(w, "c.dat") &&
                !strstr(w, "c.u8"),
            "warning '%s'", w);
  const char *docs = "plain text\nfirst jsonsecond\njsona fortune\n%\nanother\n";
  uint32_t want[128];
  size_t n = coda_tok_encode(docs, strlen(docs), want);
  snprintf(save, sizeof save, "%s", out);
  snprintf(out, sizeof out, "%s", o2);
  check_tail_split(ctx, want, n, 2, "--corpus: text, JSON Lines, fortune and indexes");
  snprintf(out, sizeof out, "%s", save);
  /* only indexes without their text: nothing to read, refused by name */
  char sub2[300];
  snprintf(sub2, sizeof sub2, "%s/walk2", dir);
  CHECK(mkdir(sub2, 0777) == 0);
  put_file("walk2/x.dat", "\0\0", 2);
  coda_warnings_clear(ctx);
  CHECK(coda_prepare_corpus(ctx, sub2, o2) == CODA_ERR_IO);
  CHECK_MSG(strstr(coda_last_error(ctx), "walk2: no corpus files found"), "%s",
            coda_last_error(ctx));
  CHECK(strstr(coda_warnings(ctx), "(first: x.dat)") != NULL);
  coda_warnings_clear(ctx);
  /* llm.c token shards are --data's: refused by name (their NUL bytes were
   * refused as not text, with a message that offered .bin as a corpus) */
  put_file("walk2/tokens.bin", "\x28\x0d\x35\x01", 4);
  put_file("walk2/x", "some text\n", 10);
  CHECK(coda_prepare_corpus(ctx, sub2, o2) == CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(coda_last_error(ctx), "walk2/tokens.bin: llm.c token shards are not read as a "
                   "corpus of text: pass their directory as --data DIR"), "%s", coda_last_error(ctx));
  coda_warnings_clear(ctx);
}

/* Input that is not what it claims: raw invalid UTF-8 inside a JSON
 * string is refused with its line and byte offset (as an escaped lone
 * surrogate is), and so are overlong forms and encoded surrogates; a NUL
 * byte in a text file (a binary file named as a corpus) is refused with
 * its offset. Valid multi-byte UTF-8 stays accepted. */
static void bad_bytes(coda_context ctx) {
  static const struct { const char *line, *why; } cases[] = {
      {"{\"text\": \"ok \xff bad\"}\n", "byte 0xff at byte offset 13"},
      {"{\"text\": \"\xc0\xaf\"}\n", "byte 0xc0 at byte offset 10"},      /* overlong '/' */
      {"{\"text\": \"x\xed\xa0\x80\"}\n", "byte 0xed at byte offset 11"}, /* U+D800 */
      {"{\"text\": \"\xe2\x82\"}\n", "byte 0xe2 at byte offset 10"},      /* truncated */
      {"{\"text\": \"\\ud800\"}\n", "invalid Unicode '\\uD800'"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char body[256];
    snprintf(body, sizeof body, "{\"text\": \"a fine first line\"}\n%s", cases[k].line);
    put_file("bad.jsonl", body, strlen(body));
    CHECK(prepare(ctx, path_of("bad.jsonl"), CODA_DATA_AUTO, NULL, NULL, 2) == CODA_ERR_IO);
    const char *m = coda_last_error(ctx);
    CHECK_MSG(strstr(m, "bad.jsonl:2: invalid JSON") && strstr(m, cases[k].why), "case %zu: %s", k, m);
  }
  const char *good = "{\"text\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 and more text\"}\n";
  put_file("good.jsonl", good, strlen(good));
  CHECK_MSG(prepare(ctx, path_of("good.jsonl"), CODA_DATA_AUTO, NULL, NULL, 2) == CODA_OK, "%s",
            coda_last_error(ctx));
  static const char bin[] = "some text\n\0\x01\x02 then bytes";
  put_file("binary.txt", bin, sizeof bin - 1);
  CHECK(prepare(ctx, path_of("binary.txt"), CODA_DATA_AUTO, NULL, NULL, 2) == CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(coda_last_error(ctx), "binary.txt: a NUL byte at byte offset 10: not a text file"),
            "%s", coda_last_error(ctx));
  /* binary without a NUL byte (bytes 1..255 from a fixed LCG): refused by
   * its control bytes; text with a few of them (a DOS end-of-file mark, a
   * bell), Latin-1 text and escape sequences are read */
  static char noisy[3000];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof noisy; i++) {
    x = x * 1664525u + 1013904223u;
    noisy[i] = (char)(1 + (x >> 24) % 255);
  }
  put_file("noisy.dat.txt", noisy, sizeof noisy);
  CHECK(prepare(ctx, path_of("noisy.dat.txt"), CODA_DATA_AUTO, NULL, NULL, 2) ==
        CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(coda_last_error(ctx), "noisy.dat.txt: ") &&
                strstr(coda_last_error(ctx), "of its first 3000 bytes are control characters") &&
                strstr(coda_last_error(ctx), "not a text file"),
            "%s", coda_last_error(ctx));
  static const char texty[] = "caf\xe9 cr\xe8me, na\xefve\n\x1b[1mbold\x1b[0m\tand a bell \x07\n"
                              "\n\fpage two: four control bytes in more than 128 are text, as in a file\n"
                              "that someone saved from an old editor\x1a\x1a\x1a\n";
  put_file("latin1.txt", texty, sizeof texty - 1);
  CHECK_MSG(prepare(ctx, path_of("latin1.txt"), CODA_DATA_AUTO, NULL, NULL, 2) == CODA_OK, "%s",
            coda_last_error(ctx));
}

/* A tokenizer over a, b, c, space and newline, with <s> as its BOS. */
static const char *tokenizer_json =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":8,"
    "\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
    "\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},\"post_processor\":"
    "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
    "\"ids\":[8],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
    "\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"vocab\":{\"a\":0,"
    "\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,\"abc\":5,\"\\u0120a\":6,\"\\u010a\":7},"
    "\"merges\":[\"a b\",\"ab c\",\"\\u0120 a\"]}}";

static void jsonl_tokenizer(coda_context ctx) {
  put_file("tok.json", tokenizer_json, strlen(tokenizer_json));
  const char *doc[4] = {"abc ab", "a\nb", "cab abc a", "ba"};
  char lines[1024];
  size_t o = 0;
  for (int i = 0; i < 4; i++)
    o += (size_t)snprintf(lines + o, sizeof lines - o, "{\"id\": %d, \"body\": \"%s\"}\n%s", i,
                          i == 1 ? "a\\nb" : doc[i], i == 2 ? "\n" : "");
  put_file("c.jsonl", lines, o);
  coda_tokenizer tok;
  CHECK(coda_tokenizer_load(ctx, path_of("tok.json"), &tok) == CODA_OK);
  uint32_t want[128];
  size_t n = 0;
  for (int i = 0; i < 4; i++) {
    int32_t ids[32];
    size_t k;
    want[n++] = 8; /* BOS before each document */
    CHECK(coda_tokenizer_encode(tok, doc[i], strlen(doc[i]), 0, ids, 32, &k) == CODA_OK);
    for (size_t j = 0; j < k; j++) want[n++] = (uint32_t)ids[j];
  }
  coda_tokenizer_destroy(tok);
  char tp[512];
  snprintf(tp, sizeof tp, "%s", path_of("tok.json"));
  CHECK(prepare(ctx, path_of("c.jsonl"), CODA_DATA_AUTO, tp, "body", 2) == CODA_OK);
  check_tail_split(ctx, want, n, 2, "jsonl");
  uint32_t *tr = NULL, *va = NULL, voc = 0;
  uint64_t ntr, nva;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK(voc == 9); /* the tokenizer's vocabulary */
  free(tr);
  free(va);
  /* the field is named; a missing one, another kind, bad JSON: file and line */
  CHECK(prepare(ctx, path_of("c.jsonl"), CODA_DATA_JSONL, tp, NULL, 2) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "c.jsonl:1: no field \"text\"") != NULL);
  CHECK(prepare(ctx, path_of("c.jsonl"), CODA_DATA_JSONL, tp, "id", 2) == CODA_ERR_IO);
  CHECK_MSG(strstr(coda_last_error(ctx), "c.jsonl:1: field \"id\" is a number") != NULL, "%s",
            coda_last_error(ctx));
  const char *bad = "{\"text\": \"ab\"}\n{\"text\": \"ab\n";
  put_file("bad.jsonl", bad, strlen(bad));
  CHECK(prepare(ctx, path_of("bad.jsonl"), CODA_DATA_JSONL, NULL, NULL, 2) == CODA_ERR_IO);
  CHECK_MSG(strstr(coda_last_error(ctx), "bad.jsonl:2: invalid JSON") != NULL, "%s",
            coda_last_error(ctx));
  /* a byte the tokenizer's vocabulary lacks is an error naming the file */
  put_file("x.jsonl", "{\"text\": \"xyz\"}\n", 16);
  CHECK(prepare(ctx, path_of("x.jsonl"), CODA_DATA_JSONL, tp, NULL, 2) != CODA_OK);
  CHECK(strstr(coda_last_error(ctx), "x.jsonl") != NULL);
}

static void put_i32(unsigned char *p, int32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

static void llmc_shards(coda_context ctx) {
  const size_t n = 3000;
  size_t bytes = 1024 + 2 * n;
  unsigned char *b = calloc(1, bytes);
  uint32_t *want = malloc(n * sizeof *want);
  put_i32(b, 20240520);
  put_i32(b + 4, 1);
  put_i32(b + 8, (int32_t)n);
  uint64_t r = 9;
  for (size_t i = 0; i < n; i++) {
    want[i] = (uint32_t)coda_rng_below(&r, 50257);
    b[1024 + 2 * i] = (unsigned char)want[i];
    b[1024 + 2 * i + 1] = (unsigned char)(want[i] >> 8);
  }
  uint32_t mx = 0;
  for (size_t i = 0; i < n; i++) mx = want[i] > mx ? want[i] : mx;
  put_file("fw_train_000001.bin", b, bytes);
  CHECK(prepare(ctx, path_of("fw_train_000001.bin"), CODA_DATA_AUTO, NULL, NULL, 65) == CODA_OK);
  check_tail_split(ctx, want, n, 65, "llm.c shard");
  uint32_t *tr = NULL, *va = NULL, voc = 0;
  uint64_t ntr, nva;
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK(voc == mx + 1);
  free(tr);
  free(va);
  /* with a tokenizer (given, or a checkpoint's in coda eval): refused,
   * naming it (the refusal spoke of --tokenizer where none was given) */
  char tok[512];
  snprintf(tok, sizeof tok, "%s", path_of("tok.json"));
  CHECK(prepare(ctx, path_of("fw_train_000001.bin"), CODA_DATA_AUTO, tok, NULL, 2) ==
        CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(coda_last_error(ctx), "hold token ids already, and the tokenizer ") &&
                strstr(coda_last_error(ctx), "tok.json") && !strstr(coda_last_error(ctx), "--"),
            "%s", coda_last_error(ctx));
  /* wrong magic, version, truncated */
  put_i32(b, 20240521);
  put_file("bad.bin", b, bytes);
  CHECK(prepare(ctx, path_of("bad.bin"), CODA_DATA_LLMC, NULL, NULL, 2) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "bad.bin: magic 20240521") != NULL);
  put_i32(b, 20240520);
  put_i32(b + 4, 2);
  put_file("bad.bin", b, bytes);
  CHECK(prepare(ctx, path_of("bad.bin"), CODA_DATA_LLMC, NULL, NULL, 2) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "version 2") != NULL);
  put_i32(b + 4, 1);
  put_file("bad.bin", b, bytes - 1);
  CHECK(prepare(ctx, path_of("bad.bin"), CODA_DATA_LLMC, NULL, NULL, 2) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "truncated") != NULL);
  /* a directory with the dataset's own split: the val shard is the
   * validation, the train shards (in name order) the training tokens */
  char sub[300];
  snprintf(sub, sizeof sub, "%s/fw", dir);
  CHECK(mkdir(sub, 0777) == 0);
  const int counts[3] = {700, 500, 300}; /* train_1, train_2, val_0 */
  const char *names[3] = {"fw/fw_train_000001.bin", "fw/fw_train_000002.bin", "fw/fw_val_000000.bin"};
  size_t off = 0;
  for (int f = 0; f < 3; f++) {
    unsigned char *fb = calloc(1, 1024 + 2 * (size_t)counts[f]);
    put_i32(fb, 20240520);
    put_i32(fb + 4, 1);
    put_i32(fb + 8, counts[f]);
    for (int i = 0; i < counts[f]; i++) {
      fb[1024 + 2 * i] = (unsigned char)want[off + (size_t)i];
      fb[1024 + 2 * i + 1] = (unsigned char)(want[off + (size_t)i] >> 8);
    }
    off += (size_t)counts[f];
    put_file(names[f], fb, 1024 + 2 * (size_t)counts[f]);
    free(fb);
  }
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 65) == CODA_OK);
  read_out(ctx, &tr, &ntr, &va, &nva, &voc);
  CHECK(ntr == 1200 && nva == 300);
  CHECK(tr && va && !memcmp(tr, want, 1200 * 4) && !memcmp(va, want + 1200, 300 * 4));
  free(tr);
  free(va);
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 301) == CODA_ERR_IO);
  CHECK(strstr(coda_last_error(ctx), "the val shards 300") != NULL);
  /* a name holding both "train" and "val" is refused by name, not put in
   * one of the splits by accident */
  snprintf(sub, sizeof sub, "%s/fw_ambiguous", dir);
  CHECK(mkdir(sub, 0777) == 0);
  unsigned char *fb = calloc(1, 1024 + 2 * 400);
  put_i32(fb, 20240520);
  put_i32(fb + 4, 1);
  put_i32(fb + 8, 400);
  put_file("fw_ambiguous/fw_train_000001.bin", fb, 1024 + 2 * 400);
  put_file("fw_ambiguous/fw_train_interval.bin", fb, 1024 + 2 * 400);
  free(fb);
  CHECK(prepare(ctx, sub, CODA_DATA_AUTO, NULL, NULL, 2) == CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(coda_last_error(ctx), "fw_train_interval.bin: the name holds both") != NULL,
            "%s", coda_last_error(ctx));
  free(b);
  free(want);
}

int main(void) {
  snprintf(dir, sizeof dir, "test_train_corpus.tmp.%d", (int)getpid());
  snprintf(out, sizeof out, "%s/out", dir);
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  text_file(ctx);
  large_text(ctx);
  chunk_boundary(ctx);
  crlf_run_boundary(ctx);
  txt_directory(ctx);
  txt_directory_not_files(ctx);
  mixed_directory(ctx);
  few_books(ctx);
  corpus_dir_walker(ctx);
  bad_bytes(ctx);
  jsonl_tokenizer(ctx);
  llmc_shards(ctx);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
