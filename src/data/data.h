/* Internal interface of src/data: the token streams a model trains on.
 * Byte tokens, token shards (written whole or in pieces, read,
 * memory-mapped) and the sampler (shards.c); corpus preparation
 * (corpus.c). The BPE tokenizer (bpe*.c) is reached through the public
 * coda_tokenizer.h; its own headers (bpe.h, bpe_impl.h) are private to it. */
#ifndef CODA_DATA_H
#define CODA_DATA_H

#include "coda_train.h"
#include "base/internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ----------------------------------------------------------- tokenizer */

/* Byte-level tokenizer: token id = byte value (0..255). There are no
 * special tokens; documents in the corpus keep their own separators. */
#define CODA_TOK_BYTES 256
size_t coda_tok_encode(const char *text, size_t n, uint32_t *out);
/* Writes the bytes of tokens < 256; other ids are written as '?'. */
size_t coda_tok_decode(const uint32_t *tok, size_t n, char *out);

/* --------------------------------------------------------- token shards */

/* Shard file: a 32-byte little-endian header, then `count` tokens.
 *   0  magic "CODATOKS" (8 bytes)
 *   8  u32 version (1)
 *  12  u32 token width in bytes (2 = uint16, 4 = uint32)
 *  16  u64 count
 *  24  u32 vocab size (every token must be < vocab)
 *  28  u32 CRC-32 of the token bytes
 * The file size must equal 32 + count * width exactly. */
#define CODA_SHARD_HEADER 32
coda_status coda_shard_write(coda_context ctx, const char *path,
                             const uint32_t *tok, uint64_t count,
                             uint32_t vocab, int width);
/* Reads and validates a shard; *tok is malloc'ed (free it). */
coda_status coda_shard_read(coda_context ctx, const char *path, uint32_t **tok,
                            uint64_t *count, uint32_t *vocab);

/* The checks of coda_shard_read on a shard's n bytes in memory (header,
 * size, checksum, every token below the vocabulary). */
coda_status coda_shard_check(coda_context ctx, const char *path, const unsigned char *b,
                             size_t n);
/* A shard's tokens as uint32: a uint32 shard is memory-mapped (read in
 * place, so a shard larger than memory trains; checked once, as
 * coda_shard_read checks), a uint16 shard is read and widened. */
typedef struct coda_shard_view {
  const uint32_t *tok;
  uint64_t count;
  uint32_t vocab;
  void *map;       /* the mapping, or NULL */
  size_t map_len;
  uint32_t *owned; /* the widened copy, or NULL */
} coda_shard_view;
coda_status coda_shard_open(coda_context ctx, const char *path, coda_shard_view *v);
void coda_shard_close(coda_shard_view *v);

/* A uint32 shard written in pieces into dir/name: the tokens go to a
 * ".partial" file (their CRC-32 kept as they pass); close writes the
 * header, fsyncs and renames it over the final name; abort removes it. */
typedef struct coda_shard_stream {
  char *path, *tmp;
  FILE *f;
  uint64_t count;
  uint32_t crc;
} coda_shard_stream;
coda_status coda_shard_stream_open(coda_context ctx, const char *dir, const char *name,
                                   coda_shard_stream *o);
coda_status coda_shard_stream_put(coda_context ctx, coda_shard_stream *o, const uint32_t *t,
                                  size_t n);
coda_status coda_shard_stream_close(coda_context ctx, coda_shard_stream *o, uint32_t vocab);
void coda_shard_stream_abort(coda_shard_stream *o);

/* Builds train.tok / val.tok in out_dir from the files of src_dir (every
 * regular file in name order as byte tokens, one document each: a .jsonl
 * file as JSON Lines, any other as text; a fortune index X.dat or X.u8
 * beside its X left out, any other .dat or .u8 left out with a warning on
 * the context, a .bin file of llm.c tokens refused by name) with
 * coda_prepare_data's split: one block of 8192 tokens in every
 * 20, or a small corpus's last 20th (corpus.c, the one rule of every
 * preparation path). val_every is not used: it stays for the callers
 * written when the default corpus was split by documents. */
coda_status coda_prepare_corpus_dir(coda_context ctx, const char *src_dir,
                                    const char *out_dir, int val_every,
                                    uint64_t *n_train, uint64_t *n_val);
/* A test fixture's in-memory text (documents separated by "\n%\n"), as
 * byte shards: every `val_every`-th document goes to the validation
 * shard (a fixed, small split the tests rely on; no user path prepares
 * through it). */
coda_status coda_prepare_corpus_text(coda_context ctx, const char *text,
                                     size_t n, const char *out_dir,
                                     int val_every, uint64_t *n_train,
                                     uint64_t *n_val);

/* Random contiguous windows of a token stream. Every draw advances the
 * RNG; `drawn` counts sequences drawn (the data position). */
typedef struct coda_sampler {
  const uint32_t *tok;
  uint64_t count;
  uint64_t rng;
  uint64_t drawn;
} coda_sampler;
/* Fills inputs/targets (B x T): targets[t] = tokens[start + t + 1]. */
coda_status coda_sampler_batch(coda_context ctx, coda_sampler *s, int B, int T,
                               int32_t *inputs, int32_t *targets);

/* A binary file need not hold a NUL byte (compressed or encrypted data,
 * some images): its first CODA_TEXT_SNIFF bytes (the whole file when shorter)
 * count as binary when at least 4 of them, and more than 1 in 32, are
 * control characters other than tab, the line ends, vertical tab, form
 * feed and escape (random bytes have 1 in 10; text, in any 8-bit
 * encoding, next to none). Decided once, on those bytes only, so the
 * answer does not depend on how the file is read. */
#define CODA_TEXT_SNIFF ((size_t)64 << 10)
typedef struct {
  size_t seen, ctrl;
  int done;
} coda_text_sniff;

/* Feeds the next n bytes b of the file path (eof: none follow) to t; fails
 * (CODA_ERR_INVALID_ARGUMENT, naming the file and the count) once the
 * sample is complete and binary. */
coda_status coda_sniff_binary(coda_context ctx, const char *path, coda_text_sniff *t,
                              const unsigned char *b, size_t n, int eof);

#endif
