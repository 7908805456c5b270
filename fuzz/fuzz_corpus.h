/* What the files of the corpus harness share (fuzz/fuzz_corpus.c,
 * fuzz/fuzz_corpus_reference.c, fuzz/fuzz_corpus_dir.c): the mode the
 * binary runs in, its context and temporary paths, the reference token
 * stream and the checks of the written shards. */
#ifndef CODA_FUZZ_CORPUS_H
#define CODA_FUZZ_CORPUS_H

#include "coda_tokenizer.h"
#include "coda_train.h"
#include "io/io.h"
#include "data/data.h"

#include <stddef.h>
#include <stdint.h>

#ifndef CORPUS_BLOCK
#error "build with the sizes of scripts/fuzz.sh (-DCORPUS_BLOCK=... -DCORPUS_LINE_MAX=...)"
#endif

enum { MODE_JSONL, MODE_LLMC, MODE_TEXT, MODE_DIR, MODE_CORPUSDIR };
extern int mode;
extern int bpe; /* with the tokenizer */
extern coda_tokenizer tok;
extern coda_context ctx;
extern char in_path[4200], out_dir[4200]; /* the input (file or directory), the output directory */
/* the shards coda_prepare_data writes, final and partial */
extern const char *const kOutNames[4];

/* Aborts with what went wrong (a finding). */
void fail(const char *what);
/* path = d[0, n) (open flags: O_WRONLY plus extra). */
void write_file(const char *path, int extra, const uint8_t *d, size_t n);
/* OUT/name exists. */
int exists(const char *name);
/* Removes the shards of OUT. */
void clear_out(void);

/* ---- the reference stream (fuzz/fuzz_corpus_reference.c) ---- */

#define DOC_END 0x100u /* in the reference of the _bpe modes: a document ends */

typedef struct stream {
  uint32_t *t;
  size_t n, cap;
} stream;

void push(stream *s, uint32_t v);
/* A NUL byte, or too many control bytes: no text. */
int ref_binary(const uint8_t *d, size_t n);
/* The stream of a text, JSON Lines or llm.c input; 0: it must be refused. */
int ref_text(const uint8_t *d, size_t n, stream *s);
int ref_jsonl(const uint8_t *d, size_t n, stream *s);
int ref_llmc(const uint8_t *d, size_t n, stream *s);
/* OUT/name reads back as want's tokens, of vocabulary want_vocab. */
void expect_shard(const char *name, const stream *want, uint32_t want_vocab);
/* train.tok and val.tok are e split by the rule of coda_train.h. */
void expect_split(const stream *e, uint32_t want_vocab);
/* The _bpe modes: the shards in stream order decode to the documents. */
void expect_bpe(const stream *e, uint64_t ntr, uint64_t nva);
/* e is too small to split. */
int too_small(const stream *e);

/* ---- the directory modes (fuzz/fuzz_corpus_dir.c) ---- */

/* Runs one input of fuzz_dir or fuzz_corpusdir. */
void run_dir(const uint8_t *data, size_t size);
/* Removes the input directory's entries and the directory. */
void clear_entries(void);

#endif
