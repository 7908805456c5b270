/* Corpus preparation for real text (coda_prepare_data): plain text files,
 * JSON Lines and llm.c token shards, tokenized with a BPE tokenizer or as
 * bytes, streamed into train.tok / val.tok in bounded memory (through
 * coda_shard_stream, shards.c).
 *
 * The validation split is by blocks of the token stream: of every
 * CORPUS_SPLIT_EVERY blocks of CORPUS_BLOCK tokens the last goes to
 * validation. The first CORPUS_SPLIT_EVERY blocks are held in memory; a
 * corpus that ends before they fill takes its validation tokens from its
 * end instead (a 20th of it, at least min_tokens), so one small file
 * splits too. The rule depends only on the token stream: the same corpus
 * always gives the same shards. */
#define _POSIX_C_SOURCE 200809L
#include "coda_tokenizer.h"
#include "io/io.h"
#include "data/data.h"
#include "base/options.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The sizes below may be set smaller when this file is built for the
 * fuzzer (fuzz/fuzz_corpus.c), so that its small inputs cross chunk,
 * block and line limits. */
#ifndef CORPUS_BLOCK
#define CORPUS_BLOCK 8192
#endif
#define CORPUS_SPLIT_EVERY 20
#ifndef CORPUS_CHUNK
#define CORPUS_CHUNK ((size_t)4 << 20) /* text read per piece of a document */
#endif
#ifndef CORPUS_LINE_MAX
/* the longest JSONL line: a line is held whole to be parsed, so this
 * bounds the reader's memory */
#define CORPUS_LINE_MAX ((size_t)64 << 20)
#endif
#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256

/* ------------------------------------------------------------- the split */

typedef struct prep {
  coda_context ctx;
  const coda_data_options *o;
  coda_tokenizer tok;       /* NULL: bytes */
  int32_t sep_before, sep_after; /* document separators (-1: none) */
  uint32_t vocab;           /* the shards' vocabulary */
  coda_shard_stream tr, va;
  uint32_t *head;           /* the first CORPUS_SPLIT_EVERY blocks, held */
  size_t nhead;
  int streaming;            /* the held blocks went out: every token streams */
  uint32_t block[CORPUS_BLOCK];
  size_t nblock;
  uint64_t block_index, total;
  uint64_t bytes_read, next_report;
  int32_t *ids;             /* tokenizer output */
  size_t ids_cap;
  const char *source;       /* the file being read, for messages */
  int route;                /* llm.c dataset split by name: 1 train, 2 val (0: by blocks) */
  uint32_t max_token;
} prep;

static coda_status flush_block(prep *p) {
  const int val = p->block_index % CORPUS_SPLIT_EVERY == CORPUS_SPLIT_EVERY - 1;
  coda_status s = coda_shard_stream_put(p->ctx, val ? &p->va : &p->tr, p->block, p->nblock);
  p->block_index++;
  p->nblock = 0;
  return s;
}

static coda_status emit(prep *p, const uint32_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t[i] >= p->vocab)
      return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT,
                       "%s: token %u is outside the vocabulary of %u", p->source, t[i], p->vocab);
    if (t[i] > p->max_token) p->max_token = t[i];
  }
  p->total += n;
  if (p->route) return coda_shard_stream_put(p->ctx, p->route == 2 ? &p->va : &p->tr, t, n);
  if (!p->streaming) {
    const size_t cap = (size_t)CORPUS_BLOCK * CORPUS_SPLIT_EVERY;
    size_t k = n < cap - p->nhead ? n : cap - p->nhead;
    memcpy(p->head + p->nhead, t, k * sizeof *t);
    p->nhead += k;
    t += k;
    n -= k;
    if (p->nhead < cap) return CODA_OK;
    /* the held blocks are full: from here on every block streams */
    p->streaming = 1;
    for (size_t b = 0; b < CORPUS_SPLIT_EVERY; b++) {
      memcpy(p->block, p->head + b * CORPUS_BLOCK, sizeof p->block);
      p->nblock = CORPUS_BLOCK;
      coda_status s = flush_block(p);
      if (s) return s;
    }
  }
  while (n > 0) {
    size_t k = CORPUS_BLOCK - p->nblock < n ? CORPUS_BLOCK - p->nblock : n;
    memcpy(p->block + p->nblock, t, k * sizeof *t);
    p->nblock += k;
    t += k;
    n -= k;
    if (p->nblock == CORPUS_BLOCK) {
      coda_status s = flush_block(p);
      if (s) return s;
    }
  }
  return CODA_OK;
}

static coda_status emit_id(prep *p, int32_t id) {
  if (id < 0) return CODA_OK;
  uint32_t u = (uint32_t)id;
  return emit(p, &u, 1);
}

static void report(prep *p, int force) {
  if (!p->o->progress || (!force && p->bytes_read < p->next_report)) return;
  p->next_report = p->bytes_read + ((uint64_t)64 << 20);
  p->o->progress(p->bytes_read, p->total, p->o->user);
}

/* Text of one document, in pieces (each cut after a newline where it can
 * be, so words are not split): tokens out. */
static coda_status text_piece(prep *p, const char *text, size_t n) {
  p->bytes_read += n;
  if (!p->tok) {
    uint32_t buf[4096];
    while (n > 0) {
      size_t k = n < 4096 ? n : 4096;
      coda_tok_encode(text, k, buf);
      coda_status s = emit(p, buf, k);
      if (s) return s;
      text += k;
      n -= k;
    }
    return CODA_OK;
  }
  size_t nid;
  coda_status s = coda_tokenizer_encode_alloc(p->tok, text, n, 0, &p->ids, &p->ids_cap, &nid);
  if (s) return coda_fail(p->ctx, s, "%s: %s", p->source, coda_last_error(p->ctx));
  /* int32 ids of a loaded tokenizer are >= 0: the same bits as uint32 */
  return emit(p, (const uint32_t *)p->ids, nid);
}

static coda_status doc_begin(prep *p) { return emit_id(p, p->sep_before); }

static coda_status doc_end(prep *p) {
  coda_status s = emit_id(p, p->sep_after);
  report(p, 0);
  return s;
}

/* ------------------------------------------------------------- readers */

/* Opens an input file: a regular file (a FIFO, device or directory put in
 * its place after the listing is refused by name, not read or waited on). */
static coda_status open_input(coda_context ctx, const char *path, FILE **f) {
  int fd;
  uint64_t size;
  *f = NULL;
  coda_status s = coda_open_regular(ctx, path, UINT64_MAX, &fd, &size);
  if (s) return s;
  *f = fdopen(fd, "rb");
  if (!*f) {
    s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    close(fd);
  }
  return s;
}

/* Lines of a file, each at most max bytes: a line is held whole (JSON is
 * parsed from it), and a longer one is refused once max bytes of it are
 * read, so memory stays bounded whatever the file holds. */
typedef struct line_reader {
  FILE *f;
  char *buf;
  size_t cap, beg, end; /* unread bytes: buf[beg, end) */
  int eof;
} line_reader;

/* The next line in *line, *len bytes (its '\n' included where there is
 * one): 1; 0 at the end of the file; -1 a read error (errno); -2 a line
 * longer than max. *line is valid until the next call. */
static int next_line(line_reader *r, size_t max, const char **line, size_t *len) {
  for (;;) {
    const char *nl = r->end > r->beg ? memchr(r->buf + r->beg, '\n', r->end - r->beg) : NULL;
    size_t have = nl ? (size_t)(nl - (r->buf + r->beg)) + 1 : r->end - r->beg;
    if (have > max) return -2;
    if (nl || (r->eof && have > 0)) {
      *line = r->buf + r->beg;
      *len = have;
      r->beg += have;
      return 1;
    }
    if (r->eof) return 0;
    /* more of the line: move it to the front, grow to at most max + 1 */
    if (r->beg > 0) {
      memmove(r->buf, r->buf + r->beg, have);
      r->beg = 0;
      r->end = have;
    }
    if (r->end == r->cap) {
      size_t want = r->cap ? 2 * r->cap : (size_t)64 << 10;
      if (want > max + 1) want = max + 1;
      if (want <= r->cap) return -2;
      char *nb = realloc(r->buf, want);
      if (!nb) {
        errno = ENOMEM;
        return -1;
      }
      r->buf = nb;
      r->cap = want;
    }
    size_t got = fread(r->buf + r->end, 1, r->cap - r->end, r->f);
    if (got == 0 && ferror(r->f)) return -1;
    if (got == 0) r->eof = 1;
    r->end += got;
  }
}

/* A plain text file: documents separated by blank lines (sep == NULL) or
 * a whole file as one document. Read in chunks, cut after a newline. */
static coda_status read_text_file(prep *p, const char *path, int split_blank) {
  FILE *f;
  coda_status s0 = open_input(p->ctx, path, &f);
  if (s0) return s0;
  p->source = path;
  char *buf = malloc(CORPUS_CHUNK + 1);
  if (!buf) { fclose(f); return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); }
  coda_status s = CODA_OK;
  size_t have = 0;
  uint64_t base = 0; /* the file offset of buf[0] */
  int in_doc = 0, eof = 0;
  coda_text_sniff sniff = {0, 0, 0};
  while (!s && (!eof || have > 0)) {
    if (!eof) {
      size_t r = fread(buf + have, 1, CORPUS_CHUNK - have, f);
      if (r == 0 && ferror(f)) {
        s = coda_fail(p->ctx, CODA_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        break;
      }
      if (r == 0) eof = 1;
      /* a NUL byte is no text: a binary file named as a corpus (a checkpoint,
       * an image, another kind of shard) is refused, not read as bytes */
      const char *z = memchr(buf + have, '\0', r);
      if (z) {
        s = coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT,
                      "%s: a NUL byte at byte offset %llu: not a text file (a corpus is text, "
                      "JSON Lines (.jsonl) or llm.c token shards (.bin); coda token shards "
                      "(.tok) are passed as they are)", path,
                      (unsigned long long)(base + (uint64_t)(z - buf)));
        break;
      }
      s = coda_sniff_binary(p->ctx, path, &sniff, (const unsigned char *)buf + have, r, eof);
      if (s) break;
      have += r;
    }
    /* the part to tokenize now: up to the last run of newlines unless at
     * the end (the run stays for the next round, so a blank line is seen
     * whole) */
    size_t cut = have;
    if (!eof) {
      while (cut > 0 && buf[cut - 1] != '\n') cut--;
      if (cut > 0) cut--;
      while (cut > 0 && (buf[cut - 1] == '\n' || buf[cut - 1] == '\r')) cut--;
      if (cut == 0) {
        /* a line (or a run of line ends) longer than a chunk: all of it,
         * but from a '\n' in its last two bytes on, since the bytes not yet
         * read may make that '\n' the start of a blank line ("\n\n",
         * "\n\r\n"); with nothing left to take, the next read adds to it */
        cut = have;
        for (size_t j = have >= 2 ? have - 2 : 0; j < have; j++)
          if (buf[j] == '\n') {
            cut = j;
            break;
          }
      }
    }
    size_t i = 0;
    while (!s && i < cut) {
      if (split_blank) {
        /* skip blank lines between documents */
        if (!in_doc) {
          size_t j = i;
          while (j < cut && (buf[j] == '\n' || buf[j] == '\r')) j++;
          i = j;
          if (i == cut) break;
          s = doc_begin(p);
          in_doc = 1;
          if (s) break;
        }
        /* the document runs to the next blank line ("\n\n" or "\n\r\n";
         * what follows a '\n' is looked at up to `have`: a '\n' at the end
         * of this piece may begin a blank line in the bytes kept) */
        size_t j = i, end = cut;
        int blank = 0;
        for (; j < cut; j++)
          if (buf[j] == '\n' && ((j + 1 < have && buf[j + 1] == '\n') ||
                                 (j + 2 < have && buf[j + 1] == '\r' && buf[j + 2] == '\n'))) {
            end = j + 1; /* the document keeps its last newline */
            blank = 1;
            break;
          }
        s = text_piece(p, buf + i, end - i);
        i = end;
        if (!s && blank) {
          s = doc_end(p);
          in_doc = 0;
        }
      } else {
        if (!in_doc) {
          s = doc_begin(p);
          in_doc = 1;
        }
        if (!s) s = text_piece(p, buf + i, cut - i);
        i = cut;
      }
    }
    memmove(buf, buf + cut, have - cut);
    have -= cut;
    base += cut;
  }
  if (!s && in_doc) s = doc_end(p);
  free(buf);
  fclose(f);
  return s;
}

/* JSON Lines: one object per line, the document in field `field`. */
static coda_status read_jsonl_file(prep *p, const char *path, const char *field) {
  FILE *f;
  coda_status s = open_input(p->ctx, path, &f);
  if (s) return s;
  p->source = path;
  line_reader rd = {f, NULL, 0, 0, 0, 0};
  const char *line;
  size_t n;
  uint64_t lineno = 0;
  int got;
  while (!s && (got = next_line(&rd, CORPUS_LINE_MAX, &line, &n)) != 0) {
    lineno++;
    if (got == -1) {
      s = coda_fail(p->ctx, CODA_ERR_IO, "%s:%llu: read failed: %s", path,
                    (unsigned long long)lineno, strerror(errno));
      break;
    }
    if (got == -2) {
      s = coda_fail(p->ctx, CODA_ERR_IO, "%s:%llu: line longer than %zu bytes", path,
                    (unsigned long long)lineno, (size_t)CORPUS_LINE_MAX);
      break;
    }
    p->bytes_read += (uint64_t)n;
    size_t k = n;
    while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ')) k--;
    if (k == 0) continue; /* blank lines are allowed */
    char err[200];
    coda_json_doc *d = coda_json_parse(line, k, err, sizeof err);
    if (!d) {
      s = coda_fail(p->ctx, CODA_ERR_IO, "%s:%llu: invalid JSON: %s", path,
                    (unsigned long long)lineno, err);
      break;
    }
    const coda_json *r = coda_json_root(d);
    const coda_json *t = coda_json_get(r, field);
    if (r->kind != CODA_JSON_OBJECT)
      s = coda_fail(p->ctx, CODA_ERR_IO, "%s:%llu: %s, not an object", path,
                    (unsigned long long)lineno, coda_json_kind_name(r->kind));
    else if (!t)
      s = coda_fail(p->ctx, CODA_ERR_IO, "%s:%llu: no field \"%s\" (--text-field names another)",
                    path, (unsigned long long)lineno, field);
    else if (t->kind != CODA_JSON_STRING)
      s = coda_fail(p->ctx, CODA_ERR_IO, "%s:%llu: field \"%s\" is %s, not a string", path,
                    (unsigned long long)lineno, field, coda_json_kind_name(t->kind));
    if (!s && t->n > 0) {
      s = doc_begin(p);
      p->bytes_read -= t->n; /* counted with the line */
      if (!s) s = text_piece(p, t->u.str, t->n);
      if (!s) s = doc_end(p);
    }
    coda_json_free(d);
  }
  free(rd.buf);
  fclose(f);
  return s;
}

/* llm.c token shard: 256 int32 (magic 20240520, version 1, token count),
 * then count uint16 tokens. The tokens are taken as they are (documents
 * are already delimited in them). */
static coda_status read_llmc_file(prep *p, const char *path) {
  p->source = path;
  int fd;
  uint64_t size;
  coda_status s = coda_open_regular(p->ctx, path, UINT64_MAX, &fd, &size);
  if (s) return s;
  unsigned char h[4 * LLMC_HEADER_INTS] = {0};
  if (size < sizeof h) {
    close(fd);
    return coda_fail(p->ctx, CODA_ERR_IO, "%s: %llu bytes, shorter than the llm.c header of %zu",
                     path, (unsigned long long)size, sizeof h);
  }
  s = coda_read_fd(p->ctx, fd, path, 0, h, sizeof h);
  int32_t hv[3];
  for (int i = 0; i < 3; i++)
    hv[i] = (int32_t)((uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 |
                      (uint32_t)h[4 * i + 2] << 16 | (uint32_t)h[4 * i + 3] << 24);
  if (!s && hv[0] != LLMC_MAGIC)
    s = coda_fail(p->ctx, CODA_ERR_IO, "%s: magic %d is not llm.c's %d", path, hv[0], LLMC_MAGIC);
  else if (!s && hv[1] != 1)
    s = coda_fail(p->ctx, CODA_ERR_IO, "%s: llm.c shard version %d (1 = uint16 tokens is read)",
                  path, hv[1]);
  else if (!s && (hv[2] < 0 || (uint64_t)hv[2] * 2 != size - sizeof h))
    s = coda_fail(p->ctx, CODA_ERR_IO, "%s: the header says %d tokens, the file holds %llu bytes "
                  "of them (truncated or not an llm.c shard)", path, hv[2],
                  (unsigned long long)(size - sizeof h));
  uint64_t off = sizeof h, left = s ? 0 : (uint64_t)hv[2];
  unsigned char raw[2 * 4096];
  uint32_t t[4096];
  while (!s && left > 0) {
    size_t k = left < 4096 ? (size_t)left : 4096;
    s = coda_read_fd(p->ctx, fd, path, off, raw, 2 * k);
    for (size_t i = 0; i < k; i++) t[i] = (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8;
    if (!s) s = emit(p, t, k);
    off += 2 * k;
    left -= k;
    p->bytes_read += 2 * k;
    report(p, 0);
  }
  close(fd);
  return s;
}

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* ------------------------------------------------------------ Parquet */

/* A Parquet file: by its name, or by the magic "PAR1" at both ends (as the
 * format writes it), whatever its name. */
static int is_parquet(const char *path) {
  if (has_suffix(path, ".parquet") || has_suffix(path, ".PARQUET")) return 1;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char h[4], t[4];
  int yes = fread(h, 1, 4, f) == 4 && !memcmp(h, "PAR1", 4) && fseek(f, -4, SEEK_END) == 0 &&
            ftell(f) >= 8 && fread(t, 1, 4, f) == 4 && !memcmp(t, "PAR1", 4);
  fclose(f);
  return yes;
}

/* Debian packages no Parquet reader for C (Apache Arrow is not in main), so
 * coda reads none; docs/training.md gives the conversion. */
static coda_status parquet_refused(coda_context ctx, const char *path) {
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                   "%s: a Parquet file: coda does not read Parquet (there is no Parquet reader "
                   "for C in Debian to build on); convert it to JSON Lines first, e.g. with "
                   "pandas: pd.read_parquet(\"%s\").to_json(\"data.jsonl\", orient=\"records\", "
                   "lines=True), then --data data.jsonl (docs/training.md, \"Parquet\")",
                   path, path);
}

/* ------------------------------------------------------------ the driver */

coda_data_options coda_data_default_options(void) {
  coda_data_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  return o;
}

/* The one preparation of every path (coda_prepare_data's files and
 * directories, the default corpus's directory): files in order, each read
 * by fmt (CODA_DATA_AUTO: by its suffix, .jsonl as JSON Lines, else text),
 * split by the block rule at the top of this file. */
static coda_status prepare_files(coda_context ctx, const coda_data_options *o,
                                 coda_data_format fmt, int is_dir, char **files, size_t nfiles,
                                 const char *out_dir, uint64_t *n_train, uint64_t *n_val,
                                 uint32_t *vocab) {
  const char *field = o->text_field && o->text_field[0] ? o->text_field : "text";
  coda_status s = CODA_OK;
  for (size_t i = 0; !s && i < nfiles; i++)
    if (is_parquet(files[i])) s = parquet_refused(ctx, files[i]);
  prep *p = s ? NULL : calloc(1, sizeof *p);
  if (!s && !p) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (!s) {
    p->ctx = ctx;
    p->o = o;
    p->sep_before = p->sep_after = -1;
    p->vocab = CODA_TOK_BYTES;
    p->head = malloc((size_t)CORPUS_BLOCK * CORPUS_SPLIT_EVERY * sizeof *p->head);
    if (!p->head) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (!s && o->tokenizer) {
    s = coda_tokenizer_load(ctx, o->tokenizer, &p->tok);
    if (!s) {
      p->vocab = (uint32_t)coda_tokenizer_vocab_size(p->tok);
      /* documents: EOS after each where the tokenizer has one (GPT-2's
       * <|endoftext|>), else BOS before each (Llama 3) */
      int32_t eos = coda_tokenizer_eos_id(p->tok), bos = coda_tokenizer_bos_id(p->tok);
      if (eos < 0) eos = coda_tokenizer_token_id(p->tok, "<|endoftext|>");
      if (eos >= 0) p->sep_after = eos;
      else if (bos >= 0) p->sep_before = bos;
    }
  } else if (!s && fmt == CODA_DATA_LLMC) {
    p->vocab = 65536; /* uint16 tokens; the shards keep the largest + 1 */
  }
  if (!s && fmt == CODA_DATA_LLMC && o->tokenizer) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                  "%s: llm.c token shards (.bin) hold token ids already, and the tokenizer "
                  "%s (given, or the checkpoint's) does not apply to them: pass them without "
                  "a tokenizer, to a model trained on the same ids", o->path, o->tokenizer);
  }
  if (!s && mkdir(out_dir, 0777) != 0 && errno != EEXIST)
    s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot create directory: %s", out_dir, strerror(errno));
  if (!s) s = coda_shard_stream_open(ctx, out_dir, "train.tok", &p->tr);
  if (!s) s = coda_shard_stream_open(ctx, out_dir, "val.tok", &p->va);
  /* an llm.c dataset directory with its own split (names holding "train"
   * and "val", as dev/data writes them): kept as it is */
  int named_split = 0;
  if (!s && is_dir && fmt == CODA_DATA_LLMC) {
    int ntr = 0, nva = 0;
    for (size_t i = 0; i < nfiles; i++) {
      const char *b = strrchr(files[i], '/') + 1;
      ntr += strstr(b, "train") != NULL;
      nva += strstr(b, "val") != NULL;
    }
    named_split = ntr > 0 && nva > 0;
    /* a name holding both words ("train_interval") would go to one split
     * or the other by accident: refused, named */
    for (size_t i = 0; named_split && i < nfiles && !s; i++) {
      const char *b = strrchr(files[i], '/') + 1;
      if (strstr(b, "train") && strstr(b, "val"))
        s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                      "%s: the name holds both \"train\" and \"val\", so the dataset's split "
                      "it belongs to is ambiguous (rename it)", files[i]);
    }
    /* the shards of neither split are left out, with a word */
    size_t neither = 0;
    const char *first = NULL;
    for (size_t i = 0; named_split && i < nfiles; i++) {
      const char *b = strrchr(files[i], '/') + 1;
      if (!strstr(b, "train") && !strstr(b, "val") && !neither++) first = b;
    }
    if (!s && neither)
      coda_warn(ctx, "%s: %zu llm.c shard%s not read (first: %s): the directory's shards are split "
                "by their names, and these hold neither \"train\" nor \"val\"", o->path, neither,
                neither == 1 ? "" : "s", first);
  }
  for (size_t i = 0; i < nfiles && !s; i++) {
    if (named_split) {
      const char *b = strrchr(files[i], '/') + 1;
      p->route = strstr(b, "val") ? 2 : strstr(b, "train") ? 1 : 0;
      if (!p->route) continue; /* neither: not part of the dataset's split */
    }
    const coda_data_format f = fmt != CODA_DATA_AUTO ? fmt
                               : has_suffix(files[i], ".jsonl") ? CODA_DATA_JSONL : CODA_DATA_TEXT;
    if (f == CODA_DATA_JSONL) s = read_jsonl_file(p, files[i], field);
    else if (f == CODA_DATA_LLMC) s = read_llmc_file(p, files[i]);
    else s = read_text_file(p, files[i], !is_dir); /* a directory: one document per file */
  }
  const uint64_t need = o->min_tokens > 2 ? o->min_tokens : 2;
  if (!s && named_split) {
    if (p->tr.count < need || p->va.count < need)
      s = coda_fail(ctx, CODA_ERR_IO, "%s: the train shards hold %llu tokens and the val shards "
                    "%llu: each needs at least %llu", o->path, (unsigned long long)p->tr.count,
                    (unsigned long long)p->va.count, (unsigned long long)need);
  } else if (!s && !p->streaming) {
    /* a small corpus: validation from its end, a 20th (at least `need`) */
    uint64_t nv = (p->nhead + CORPUS_SPLIT_EVERY - 1) / CORPUS_SPLIT_EVERY;
    if (nv < need) nv = need;
    if (p->nhead < 2 * need)
      s = coda_fail(ctx, CODA_ERR_IO,
                    "%s: corpus too small: %zu tokens in %zu file%s; training needs at least %llu "
                    "(%llu for training and %llu for validation)", o->path, p->nhead, nfiles,
                    nfiles == 1 ? "" : "s", (unsigned long long)(2 * need),
                    (unsigned long long)need, (unsigned long long)need);
    if (!s) s = coda_shard_stream_put(ctx, &p->tr, p->head, p->nhead - (size_t)nv);
    if (!s) s = coda_shard_stream_put(ctx, &p->va, p->head + (p->nhead - (size_t)nv), (size_t)nv);
  } else if (!s) {
    if (p->nblock) s = flush_block(p);
    if (!s && (p->tr.count < need || p->va.count < need))
      s = coda_fail(ctx, CODA_ERR_IO, "%s: %llu training and %llu validation tokens: each needs at "
                    "least %llu", o->path, (unsigned long long)p->tr.count,
                    (unsigned long long)p->va.count, (unsigned long long)need);
  }
  if (!s && fmt == CODA_DATA_LLMC && !o->tokenizer) p->vocab = p->max_token + 1;
  if (!s) s = coda_shard_stream_close(ctx, &p->tr, p->vocab);
  if (!s) s = coda_shard_stream_close(ctx, &p->va, p->vocab);
  if (!s) {
    if (p) report(p, 1);
    if (n_train) *n_train = p->tr.count;
    if (n_val) *n_val = p->va.count;
    if (vocab) *vocab = p->vocab;
  }
  if (p) {
    coda_shard_stream_abort(&p->tr);
    coda_shard_stream_abort(&p->va);
    coda_tokenizer_destroy(p->tok);
    free(p->head);
    free(p->ids);
    free(p);
  }
  return s;
}

static void free_list(char **f, size_t n) {
  for (size_t i = 0; i < n; i++) free(f[i]);
  free(f);
}

/* The base name of a path in a listing. */
static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b ? b + 1 : path;
}

/* The files of a --data directory and the format that reads them. Auto:
 * its .txt and .jsonl files together (each read by its suffix, in name
 * order), else its .bin llm.c shards; text and token shards in one
 * directory are refused by name (they cannot make one stream). An
 * explicit format reads its suffix alone. Every other regular file left
 * out is named in a warning on the context (coda_warnings): no input is
 * skipped without a word. */
static coda_status data_dir_files(coda_context ctx, const char *dir, coda_data_format *fmt,
                                  char ***out, size_t *nout) {
  *out = NULL;
  *nout = 0;
  static const char *const suf[3] = {".txt", ".jsonl", ".bin"};
  static const coda_data_format fm[3] = {CODA_DATA_TEXT, CODA_DATA_JSONL, CODA_DATA_LLMC};
  const coda_data_format given = *fmt;
  char **l[3] = {NULL, NULL, NULL};
  size_t n[3] = {0, 0, 0};
  coda_status s = CODA_OK;
  for (int i = 0; i < 3 && !s; i++)
    if (*fmt == CODA_DATA_AUTO || *fmt == fm[i]) s = coda_list_dir(ctx, dir, suf[i], 1, &l[i], &n[i]);
  if (!s && *fmt == CODA_DATA_AUTO && n[2] && (n[0] || n[1]))
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                  "%s: holds both llm.c token shards (.bin, e.g. %s) and text (%s, e.g. %s); "
                  "tokens and text cannot make one stream: prepare them apart (move one kind "
                  "out, or pass --data-format text|jsonl|llmc to read one kind)", dir,
                  base_name(l[2][0]), n[0] ? ".txt" : ".jsonl", base_name(n[0] ? l[0][0] : l[1][0]));
  char **all = NULL;
  size_t na = 0;
  if (!s) {
    const int k = *fmt == CODA_DATA_AUTO ? (n[0] || n[1] ? -1 : 2)
                  : *fmt == CODA_DATA_TEXT ? 0 : *fmt == CODA_DATA_JSONL ? 1 : 2;
    if (k >= 0) { /* one list */
      all = l[k];
      na = n[k];
      l[k] = NULL;
      n[k] = 0;
      if (*fmt == CODA_DATA_AUTO && na) *fmt = fm[k];
    } else { /* .txt and .jsonl, merged in name order; each read by its suffix */
      all = malloc((n[0] + n[1]) * sizeof *all);
      if (!all) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      for (size_t i = 0, j = 0; !s && (i < n[0] || j < n[1]);)
        all[na++] = j == n[1] || (i < n[0] && strcmp(l[0][i], l[1][j]) < 0) ? l[0][i++] : l[1][j++];
      if (!s) {
        if (!n[0]) *fmt = CODA_DATA_JSONL;
        else if (!n[1]) *fmt = CODA_DATA_TEXT;
        free(l[0]);
        free(l[1]);
        l[0] = l[1] = NULL;
        n[0] = n[1] = 0;
      }
    }
  }
  if (!s && na == 0) { /* a directory of Parquet files is named as such */
    char **pq = NULL;
    size_t npq = 0;
    if (coda_list_dir(ctx, dir, ".parquet", 0, &pq, &npq) == CODA_OK && npq > 0)
      s = parquet_refused(ctx, pq[0]);
    free_list(pq, npq);
    if (!s)
      s = coda_fail(ctx, CODA_ERR_IO, "%s: no %s files in the directory", dir,
                    *fmt == CODA_DATA_TEXT ? ".txt" : *fmt == CODA_DATA_JSONL ? ".jsonl" :
                    *fmt == CODA_DATA_LLMC ? ".bin" : ".txt, .jsonl or .bin");
  }
  if (!s) { /* the regular files left out, named */
    char **every = NULL;
    size_t ne = 0, skipped = 0;
    const char *first = NULL;
    if (coda_list_dir(ctx, dir, "", 0, &every, &ne) == CODA_OK) {
      for (size_t i = 0, j = 0; i < ne; i++) {
        while (j < na && strcmp(all[j], every[i]) < 0) j++;
        if (j < na && !strcmp(all[j], every[i])) continue;
        if (!first) first = every[i];
        skipped++;
      }
      if (skipped && given == CODA_DATA_AUTO)
        coda_warn(ctx, "%s: %zu file%s not read (first: %s): a directory is read by its .txt "
                  "and .jsonl files, or else its .bin llm.c shards", dir, skipped,
                  skipped == 1 ? "" : "s", base_name(first));
      else if (skipped)
        coda_warn(ctx, "%s: %zu file%s not read (first: %s): --data-format %s reads only %s files",
                  dir, skipped, skipped == 1 ? "" : "s", base_name(first),
                  given == CODA_DATA_TEXT ? "text" : given == CODA_DATA_JSONL ? "jsonl" : "llmc",
                  given == CODA_DATA_TEXT ? ".txt" : given == CODA_DATA_JSONL ? ".jsonl" : ".bin");
    }
    free_list(every, ne);
  }
  for (int i = 0; i < 3; i++) free_list(l[i], n[i]);
  if (s) {
    free_list(all, na);
    return s;
  }
  *out = all;
  *nout = na;
  return CODA_OK;
}

coda_status coda_prepare_data(coda_context ctx, const coda_data_options *opts, const char *out_dir,
                              uint64_t *n_train, uint64_t *n_val, uint32_t *vocab) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_data_options taken = coda_data_default_options();
  static const coda_options_layout layouts[] = {CODA_OPTIONS_LAYOUT(coda_data_options)};
  if (opts && coda_options_take(ctx, "coda_data_options", opts, &taken, layouts, 1))
    return CODA_ERR_INVALID_ARGUMENT;
  const coda_data_options *o = opts ? &taken : NULL;
  if (!o || !o->path || !out_dir)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "prepare data: NULL options, path or output");
  struct stat st;
  if (stat(o->path, &st) != 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: no such file or directory", o->path);
  const int is_dir = S_ISDIR(st.st_mode);
  if (!is_dir && !S_ISREG(st.st_mode))
    return coda_fail(ctx, CODA_ERR_IO, "%s: not a regular file or a directory", o->path);
  coda_data_format fmt = o->format;
  char **files = NULL;
  size_t nfiles = 0;
  coda_status s = CODA_OK;
  if (is_dir) {
    s = data_dir_files(ctx, o->path, &fmt, &files, &nfiles);
  } else {
    if (fmt == CODA_DATA_AUTO)
      fmt = has_suffix(o->path, ".jsonl") ? CODA_DATA_JSONL
            : has_suffix(o->path, ".bin") ? CODA_DATA_LLMC : CODA_DATA_TEXT;
    files = malloc(sizeof *files);
    if (files && (files[0] = strdup(o->path))) nfiles = 1;
    else s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (!s) s = prepare_files(ctx, o, fmt, is_dir, files, nfiles, out_dir, n_train, n_val, vocab);
  for (size_t i = 0; i < nfiles; i++) free(files[i]);
  free(files);
  return s;
}

/* The default corpus's directory (a fortune directory): every regular file
 * in name order, one document each, .jsonl as JSON Lines and any other as
 * text (a NUL byte refused), through prepare_files: the one split rule. A
 * fortune index (X.dat, X.u8 beside its text X) is left out silently, any
 * other .dat or .u8 with a warning naming it; .bin (llm.c tokens) refused. */
coda_status coda_prepare_corpus_dir(coda_context ctx, const char *src_dir, const char *out_dir,
                                    int val_every, uint64_t *n_train, uint64_t *n_val) {
  (void)val_every; /* the block rule decides; see data.h */
  char **files = NULL, *first = NULL;
  size_t nfiles = 0, kept = 0, skipped = 0;
  coda_status s = coda_list_dir(ctx, src_dir, "", 0, &files, &nfiles);
  if (s) return s;
  char **keep = malloc((nfiles ? nfiles : 1) * sizeof *keep);
  for (size_t i = 0; keep && i < nfiles; i++) {
    const size_t n = strlen(files[i]);
    const size_t k = has_suffix(files[i], ".dat") ? 4 : has_suffix(files[i], ".u8") ? 3 : 0;
    int indexed = 0; /* its text X is listed too (before it: the listing is in name order) */
    for (size_t j = 0; k && j < kept && !indexed; j++)
      indexed = strlen(keep[j]) == n - k && !memcmp(keep[j], files[i], n - k);
    if (!k) keep[kept++] = files[i];
    else if (!indexed && !skipped++) first = files[i];
    else free(files[i]);
  }
  if (!keep) free_list(files, nfiles);
  if (!keep) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  free(files);
  if (skipped)
    coda_warn(ctx, "%s: %zu file%s not read (first: %s): a .dat or .u8 file is read only as "
              "the index of the fortune file it sits beside", src_dir, skipped,
              skipped == 1 ? "" : "s", base_name(first));
  free(first);
  for (size_t i = 0; i < kept && !s; i++) /* tokens, not text: the --data reader's */
    if (has_suffix(keep[i], ".bin"))
      s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: llm.c token shards are not read as a "
                    "corpus of text: pass their directory as --data DIR", keep[i]);
  if (!kept) s = coda_fail(ctx, CODA_ERR_IO, "%s: no corpus files found (every regular file but "
                           "fortune indexes is read: text, or .jsonl as JSON Lines)", src_dir);
  coda_data_options o = coda_data_default_options();
  o.path = src_dir;
  if (!s) s = prepare_files(ctx, &o, CODA_DATA_AUTO, 1, keep, kept, out_dir, n_train, n_val, NULL);
  free_list(keep, kept);
  return s;
}
