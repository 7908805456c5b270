/* libFuzzer harness for corpus preparation (coda_prepare_data in
 * src/data/corpus.c, the entry point of `coda train --data`): one binary,
 * three readers, chosen by the name it is run under:
 *
 *   fuzz_jsonl   the input is a JSON Lines file (field "text")
 *   fuzz_llmc    the input is an llm.c token shard (.bin)
 *   fuzz_text    the input is a plain text file (blank-line documents)
 *   fuzz_dir     the input is a directory of several files
 *                (fuzz/fuzz_corpus_dir.c)
 *   fuzz_corpusdir  the same directories through coda_prepare_corpus_dir,
 *                the default corpus's walk (coda_prepare_corpus, `coda
 *                train --corpus DIR`; its reference is ref_corpus_dir in
 *                fuzz/fuzz_corpus_dir.c)
 *   fuzz_jsonl_bpe, fuzz_text_bpe, fuzz_dir_bpe   the same with a BPE
 *                tokenizer (the GPT-2-style seed
 *                fuzz/corpus/tokenizer/gpt2.json, whose path is compiled
 *                in as CODA_FUZZ_TOKENIZER)
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
 * Every mode checks that an input leaves no file descriptor open.
 * Built with -DFUZZ_VERBOSE, the directory mode prints each outcome.
 *
 * The harness is three files: this one (the modes, the single-file runs,
 * the temporary files and the descriptor check), fuzz/fuzz_corpus_reference.c
 * (the independent decoding and the split and shard checks) and
 * fuzz/fuzz_corpus_dir.c (fuzz_dir and fuzz_corpusdir: how the input
 * becomes a directory and what the reference expects of it).
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=jsonl, llmc, text,
 * dir, corpusdir, or one of the first four but llmc with _bpe) */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_corpus.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mode = -1;
int bpe; /* with the tokenizer */
coda_tokenizer tok;
coda_context ctx;
static char dir[4096];
char in_path[4200], out_dir[4200];

void fail(const char *what) {
  fprintf(stderr, "fuzz_corpus: %s\n", what);
  abort();
}

const char *const kOutNames[4] = {"train.tok", "val.tok", "train.tok.partial", "val.tok.partial"};

static void remove_dir(void) {
  if (mode == MODE_DIR || mode == MODE_CORPUSDIR) clear_entries();
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
         : strstr(name, "text") ? MODE_TEXT : strstr(name, "corpusdir") ? MODE_CORPUSDIR
         : strstr(name, "dir") ? MODE_DIR : -1;
  if (mode < 0)
    fail("run as fuzz_jsonl, fuzz_llmc, fuzz_text, fuzz_dir or fuzz_corpusdir (the name picks "
         "the reader)");
  bpe = strstr(name, "_bpe") != NULL && mode != MODE_LLMC && mode != MODE_CORPUSDIR;
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
  if (mode == MODE_DIR || mode == MODE_CORPUSDIR)
    snprintf(in_path, sizeof in_path, "%s/in", dir);
  else
    snprintf(in_path, sizeof in_path, "%s/in.%s", dir,
             mode == MODE_JSONL ? "jsonl" : mode == MODE_LLMC ? "bin" : "txt");
  snprintf(out_dir, sizeof out_dir, "%s/out", dir);
  atexit(remove_dir);
  return 0;
}

/* path = d[0, n) (open flags: O_WRONLY plus extra). */
void write_file(const char *path, int extra, const uint8_t *d, size_t n) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_CREAT | extra, 0600);
  if (fd < 0) fail("cannot write a temporary file");
  for (size_t at = 0; at < n;) {
    ssize_t w = write(fd, d + at, n - at);
    if (w <= 0) fail("short write");
    at += (size_t)w;
  }
  close(fd);
}

static void put_file(const uint8_t *d, size_t n) { write_file(in_path, 0, d, n); }

int exists(const char *name) {
  char p[4400];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", out_dir, name);
  return stat(p, &st) == 0;
}

void clear_out(void) {
  char p[4400];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", out_dir, kOutNames[i]);
    unlink(p);
  }
}

/* The lowest free descriptor: the same before and after an input, or the
 * input left one open (or closed one it did not own). Taken per input, so
 * descriptors the fuzzing engine holds between inputs do not count. */
static int lowest_free_fd(void) {
  int fd = open("/dev/null", O_RDONLY);
  if (fd < 0) fail("cannot open /dev/null");
  close(fd);
  return fd;
}

static void check_descriptors(int before) {
  const int after = lowest_free_fd();
  if (after != before) {
    char link[64], what[512] = "(closed)";
    snprintf(link, sizeof link, "/proc/self/fd/%d", before);
    ssize_t n = readlink(link, what, sizeof what - 1);
    if (n > 0) what[n] = 0;
    fprintf(stderr, "the lowest free descriptor was %d and is %d; %d: %s\n", before, after,
            before, what);
    fail("a file descriptor was left open or closed");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const int fd0 = lowest_free_fd();
  if (mode == MODE_DIR || mode == MODE_CORPUSDIR) {
    run_dir(data, size);
    check_descriptors(fd0);
    return 0;
  }
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
  check_descriptors(fd0);
  return 0;
}
