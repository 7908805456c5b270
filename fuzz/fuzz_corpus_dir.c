/* fuzz_dir and fuzz_corpusdir of the corpus harness (fuzz/fuzz_corpus.c):
 * the input made into a directory, the outcome the reference expects of it
 * (coda_prepare_data's listing and formats, or coda_prepare_corpus_dir's
 * walk) and the run that checks the preparer's against it.
 *
 * fuzz_dir turns the input into a directory: byte 0 picks the format
 * asked for (its low 2 bits: auto, text, jsonl, llmc), the rest is up to
 * 16 entries separated by "|#|", each a kind byte, a name up to the first
 * '\n' and the contents after it. The kind's low 3 bits: 0 a file (6, 7
 * too), 1 an llm.c shard (a valid header for the contents' uint16
 * tokens), 2 an llm.c shard whose header starts with the contents' first
 * 12 bytes (magic, version, count: lies included), 3 a subdirectory (the
 * contents in a file inside it), 4 a symbolic link to the contents (a
 * name in the directory, or "." / ".."), 5 a FIFO; bits 3-5 add a suffix
 * to the name (1 .txt, 2 .jsonl, 3 .bin, 4 .parquet, 5 .dat, 6 .u8). The reference
 * resolves the links itself, lists the names of the format (auto: .txt
 * and .jsonl together, each read by its suffix, else .bin; .bin beside
 * either refused; hidden names skipped) in byte order, refuses
 * the first that is not a regular file (a dangling or looping link, a
 * subdirectory, a FIFO), and decodes the files: a text file one document
 * (a NUL byte refused), JSONL and
 * llm.c as fuzz/fuzz_corpus.c describes, and for llm.c names holding "train" and "val" the
 * split as named (other names left out; a name holding both refused).
 * An accepted directory's shards must match; a refused one must be
 * refused with the status the first failing check calls for, and its
 * message must begin with the path of the file that failed (or the
 * directory's, for a directory without such files or a corpus too small).
 *
 * No input is left out without a word: once the listing went through
 * (whatever comes after), every regular file the reference does not read
 * (links followed, hidden names aside) must be counted in a warning naming
 * the first in byte order, and an accepted named llm.c split must name the
 * shards of neither split the same way; no such warning where every file
 * is read.
 */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_corpus.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { E_FILE, E_LLMC, E_LLMC_RAW, E_SUBDIR, E_LINK, E_FIFO };
enum { R_FILE, R_DIR, R_FIFO, R_NONE }; /* what a name resolves to */
#define MAX_ENTRIES 16
#define MAX_NAME 120

typedef struct entry {
  char name[MAX_NAME + 16];
  int kind;
  uint8_t *bytes; /* a file's contents (owned); a link's target is in `target` */
  size_t n;
  char target[MAX_NAME + 16];
} entry;

static entry entries[MAX_ENTRIES];
static int nentries;

static void entry_path(char *p, size_t cap, const char *name) {
  snprintf(p, cap, "%s/%s", in_path, name);
}

void clear_entries(void) {
  char p[4600];
  for (int i = 0; i < nentries; i++) {
    entry_path(p, sizeof p, entries[i].name);
    if (entries[i].kind == E_SUBDIR) {
      char q[4700];
      snprintf(q, sizeof q, "%s/inner.txt", p);
      unlink(q);
      rmdir(p);
    } else {
      unlink(p);
    }
    free(entries[i].bytes);
  }
  memset(entries, 0, sizeof entries);
  nentries = 0;
  rmdir(in_path);
}

static void write_all(const char *path, const uint8_t *d, size_t n) {
  write_file(path, O_EXCL, d, n);
}

static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* One entry of the input: kind byte, name to '\n', contents. */
static void add_entry(const uint8_t *d, size_t n) {
  if (n == 0 || nentries == MAX_ENTRIES) return;
  entry *e = &entries[nentries];
  memset(e, 0, sizeof *e);
  const int type = d[0] & 7, suffix = (d[0] >> 3) & 7;
  e->kind = type >= 6 ? E_FILE : type;
  d++, n--;
  const uint8_t *nl = memchr(d, '\n', n);
  size_t nlen = nl ? (size_t)(nl - d) : n, k = 0;
  for (size_t i = 0; i < nlen && k < MAX_NAME; i++)
    if (d[i] != '/' && d[i] != 0) e->name[k++] = (char)d[i];
  static const char *const sufs[8] = {"", ".txt", ".jsonl", ".bin", ".parquet", ".dat", ".u8", ""};
  strcat(e->name, sufs[suffix]);
  if (!e->name[0]) snprintf(e->name, sizeof e->name, "e%d", nentries);
  if (!strcmp(e->name, ".") || !strcmp(e->name, "..")) return;
  const uint8_t *c = nl ? nl + 1 : d + n;
  size_t cn = (size_t)(d + n - c);
  char p[4600];
  entry_path(p, sizeof p, e->name);
  struct stat st;
  if (lstat(p, &st) == 0) return; /* a name given twice: the first stays */
  switch (e->kind) {
  case E_FILE:
    e->bytes = malloc(cn ? cn : 1);
    if (!e->bytes) fail("out of memory");
    memcpy(e->bytes, c, cn);
    e->n = cn;
    break;
  case E_LLMC:
  case E_LLMC_RAW: {
    const size_t head = e->kind == E_LLMC_RAW ? (cn < 12 ? cn : 12) : 0;
    const size_t body = e->kind == E_LLMC ? cn & ~(size_t)1 : cn - head;
    e->n = 1024 + body;
    e->bytes = calloc(1, e->n);
    if (!e->bytes) fail("out of memory");
    if (e->kind == E_LLMC) {
      put_le32(e->bytes, 20240520);
      put_le32(e->bytes + 4, 1);
      put_le32(e->bytes + 8, (uint32_t)(body / 2));
    } else {
      memcpy(e->bytes, c, head);
    }
    memcpy(e->bytes + 1024, c + head, body);
    e->kind = E_FILE;
    break;
  }
  case E_SUBDIR:
    break;
  case E_LINK:
    for (size_t i = 0, t = 0; i < cn && t < MAX_NAME; i++)
      if (c[i] != '/' && c[i] != 0) e->target[t++] = (char)c[i];
    if (!e->target[0]) strcpy(e->target, "missing");
    break;
  default:
    break;
  }
  if (e->kind == E_FILE) {
    write_all(p, e->bytes, e->n);
  } else if (e->kind == E_SUBDIR) {
    if (mkdir(p, 0700) != 0) fail("cannot create a subdirectory");
    char q[4700];
    snprintf(q, sizeof q, "%s/inner.txt", p);
    write_all(q, c, cn); /* read only if the listing wrongly went inside */
  } else if (e->kind == E_LINK) {
    if (symlink(e->target, p) != 0) fail("cannot create a symbolic link");
  } else if (mkfifo(p, 0600) != 0) {
    fail("cannot create a FIFO");
  }
  nentries++;
}

/* What a name of the directory is, links followed (as stat does; the
 * kernel gives up after 40 links: here a chain longer than the entries is
 * a loop). *f: the file's entry. */
static int resolve(const char *name, int depth, const entry **f) {
  if (!strcmp(name, ".") || !strcmp(name, "..")) return R_DIR;
  if (depth > MAX_ENTRIES) return R_NONE;
  for (int i = 0; i < nentries; i++) {
    const entry *e = &entries[i];
    if (strcmp(e->name, name)) continue;
    if (e->kind == E_FILE) {
      *f = e;
      return R_FILE;
    }
    if (e->kind == E_LINK) return resolve(e->target, depth + 1, f);
    return e->kind == E_SUBDIR ? R_DIR : R_FIFO;
  }
  return R_NONE;
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

typedef struct listed {
  const char *name;
  const entry *file; /* NULL: not a regular file once links are followed */
} listed;

static int cmp_listed(const void *a, const void *b) {
  return strcmp(((const listed *)a)->name, ((const listed *)b)->name);
}

/* The names that end in suf, not hidden, in name order, each with its
 * file (NULL where it is not a regular one). */
static size_t listing(const char *suf, listed *out) {
  size_t n = 0;
  for (int i = 0; i < nentries; i++) {
    const entry *f = NULL;
    if (entries[i].name[0] == '.' || !ends_with(entries[i].name, suf)) continue;
    out[n].name = entries[i].name;
    out[n++].file = resolve(entries[i].name, 0, &f) == R_FILE ? f : NULL;
  }
  qsort(out, n, sizeof *out, cmp_listed);
  return n;
}

static int is_par1(const entry *f) {
  return f->n >= 12 && !memcmp(f->bytes, "PAR1", 4) && !memcmp(f->bytes + f->n - 4, "PAR1", 4);
}

/* The expected outcome of a directory. */
typedef struct dir_expect {
  coda_status status;      /* CODA_OK or the refusal's */
  char path[4600];         /* a refusal: the path its message begins with */
  int size_only;           /* the tokens decode, but the corpus may be too small */
  int named;               /* llm.c's split as named: tr and va as they are */
  int listed;              /* the listing went through: its warning is due */
  size_t skipped;          /* regular files (links followed) not read, */
  const char *skipped_first; /* the first of them in name order */
  size_t neither;          /* named split: shards of neither split, */
  const char *neither_first; /* the first of them */
  stream all, tr, va;      /* the stream (all) or the named split */
  uint32_t vocab;
} dir_expect;

static void expect_refusal(dir_expect *x, coda_status s, const char *name) {
  x->status = s;
  if (name) entry_path(x->path, sizeof x->path, name);
  else snprintf(x->path, sizeof x->path, "%s", in_path);
}

static void ref_dir(int fmt, dir_expect *x) {
  static const char *const sufs[3] = {".txt", ".jsonl", ".bin"};
  listed files[MAX_ENTRIES];
  size_t nf = 0;
  /* the listings of the formats read (auto: all three), each in name
   * order; the first entry of one that is not a regular file is refused
   * by name, in the order .txt, .jsonl, .bin */
  listed l[3][MAX_ENTRIES];
  size_t nl[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) {
    if (fmt != CODA_DATA_AUTO && fmt != CODA_DATA_TEXT + k) continue;
    nl[k] = listing(sufs[k], l[k]);
    for (size_t i = 0; i < nl[k]; i++)
      if (!l[k][i].file) {
        expect_refusal(x, CODA_ERR_IO, l[k][i].name);
        return;
      }
  }
  if (fmt == CODA_DATA_AUTO && nl[2] && (nl[0] || nl[1])) { /* tokens beside text */
    expect_refusal(x, CODA_ERR_INVALID_ARGUMENT, NULL);
    return;
  }
  if (fmt == CODA_DATA_AUTO) { /* .txt and .jsonl together, else .bin */
    for (int k = 0; k < 2; k++)
      for (size_t i = 0; i < nl[k]; i++) files[nf++] = l[k][i];
    qsort(files, nf, sizeof *files, cmp_listed);
    if (nf == 0) {
      nf = nl[2];
      memcpy(files, l[2], nf * sizeof *files);
      if (nf) fmt = CODA_DATA_LLMC;
    } else if (!nl[1]) {
      fmt = CODA_DATA_TEXT;
    } else if (!nl[0]) {
      fmt = CODA_DATA_JSONL;
    }
  } else {
    nf = nl[fmt - CODA_DATA_TEXT];
    memcpy(files, l[fmt - CODA_DATA_TEXT], nf * sizeof *files);
  }
  if (nf == 0) { /* Parquet files (regular ones) are named as such */
    listed pq[MAX_ENTRIES];
    size_t npq = listing(".parquet", pq), first = 0;
    while (first < npq && !pq[first].file) first++;
    if (first < npq) expect_refusal(x, CODA_ERR_NOT_SUPPORTED, pq[first].name);
    else expect_refusal(x, CODA_ERR_IO, NULL);
    return;
  }
  /* every other regular file (not hidden, links followed) is named in a
   * warning: how many, and the first in name order */
  x->listed = 1;
  {
    listed every[MAX_ENTRIES];
    const size_t ne = listing("", every);
    for (size_t i = 0; i < ne; i++) {
      int read = 0;
      for (size_t j = 0; j < nf && !read; j++) read = !strcmp(files[j].name, every[i].name);
      if (every[i].file && !read && !x->skipped++) x->skipped_first = every[i].name;
    }
  }
  for (size_t i = 0; i < nf; i++)
    if (is_par1(files[i].file)) {
      expect_refusal(x, CODA_ERR_NOT_SUPPORTED, files[i].name);
      return;
    }
  if (bpe && fmt == CODA_DATA_LLMC) {
    expect_refusal(x, CODA_ERR_INVALID_ARGUMENT, NULL);
    return;
  }
  if (fmt == CODA_DATA_LLMC) {
    int ntr = 0, nva = 0;
    for (size_t i = 0; i < nf; i++) {
      ntr += strstr(files[i].name, "train") != NULL;
      nva += strstr(files[i].name, "val") != NULL;
    }
    x->named = ntr > 0 && nva > 0;
    for (size_t i = 0; x->named && i < nf; i++)
      if (strstr(files[i].name, "train") && strstr(files[i].name, "val")) {
        expect_refusal(x, CODA_ERR_INVALID_ARGUMENT, files[i].name);
        return;
      }
    for (size_t i = 0; x->named && i < nf; i++)
      if (!strstr(files[i].name, "train") && !strstr(files[i].name, "val") && !x->neither++)
        x->neither_first = files[i].name;
  }
  for (size_t i = 0; i < nf; i++) {
    const entry *f = files[i].file;
    stream *to = &x->all;
    if (x->named) {
      if (strstr(files[i].name, "val")) to = &x->va;
      else if (strstr(files[i].name, "train")) to = &x->tr;
      else continue; /* not part of the dataset's split */
    }
    int ok = 1;
    /* auto with .txt and .jsonl: each file by its suffix */
    const int ff = fmt != CODA_DATA_AUTO ? fmt
                   : ends_with(files[i].name, ".jsonl") ? CODA_DATA_JSONL : CODA_DATA_TEXT;
    if (ff == CODA_DATA_TEXT) {
      if (ref_binary(f->bytes, f->n)) { /* a NUL byte or control bytes: no text */
        expect_refusal(x, CODA_ERR_INVALID_ARGUMENT, files[i].name);
        return;
      }
      for (size_t j = 0; j < f->n; j++) push(to, f->bytes[j]);
      if (bpe && f->n > 0) push(to, DOC_END); /* one document per file */
    } else if (ff == CODA_DATA_JSONL) {
      ok = ref_jsonl(f->bytes, f->n, to);
    } else {
      ok = ref_llmc(f->bytes, f->n, to);
    }
    if (!ok) {
      expect_refusal(x, CODA_ERR_IO, files[i].name);
      return;
    }
  }
  x->vocab = 256;
  if (fmt == CODA_DATA_LLMC) {
    uint32_t mx = 0;
    for (int k = 0; k < 3; k++) {
      const stream *t = k == 0 ? &x->all : k == 1 ? &x->tr : &x->va;
      for (size_t i = 0; i < t->n; i++) mx = t->t[i] > mx ? t->t[i] : mx;
    }
    x->vocab = mx + 1;
  }
  x->status = CODA_OK;
  if (x->named) {
    if (x->tr.n < 2 || x->va.n < 2) expect_refusal(x, CODA_ERR_IO, NULL);
  } else if (bpe) {
    x->size_only = 1; /* the token count is the tokenizer's */
  } else if (too_small(&x->all)) {
    expect_refusal(x, CODA_ERR_IO, NULL);
  }
}

/* fuzz_corpusdir: the default corpus's walk (coda_prepare_corpus_dir behind
 * coda_prepare_corpus, what
 * `coda train --corpus DIR` runs) over the same directories: every regular
 * file (links followed, hidden names aside) in name order, one document
 * each, a .jsonl file as JSON Lines and any other as text (a NUL byte
 * refused); X.dat or X.u8 beside a read X (a fortune index) left out
 * silently, any other .dat or .u8 counted in the warning of files not
 * read; a .bin file (llm.c tokens) refused by name, then a Parquet file (by
 * name or magic); nothing to read refused naming the directory. Byte
 * tokens. */
static void ref_corpus_dir(dir_expect *x) {
  listed every[MAX_ENTRIES], files[MAX_ENTRIES];
  size_t nf = 0;
  const size_t ne = listing("", every);
  x->listed = 1;
  for (size_t i = 0; i < ne; i++) {
    if (!every[i].file) continue; /* not a regular file: not listed */
    const char *nm = every[i].name;
    const size_t n = strlen(nm), k = ends_with(nm, ".dat") ? 4 : ends_with(nm, ".u8") ? 3 : 0;
    int indexed = 0;
    for (size_t j = 0; k && j < nf && !indexed; j++)
      indexed = strlen(files[j].name) == n - k && !strncmp(files[j].name, nm, n - k);
    if (!k) files[nf++] = every[i];
    else if (!indexed && !x->skipped++) x->skipped_first = nm;
  }
  for (size_t i = 0; i < nf; i++)
    if (ends_with(files[i].name, ".bin")) { /* llm.c tokens: --data's */
      expect_refusal(x, CODA_ERR_INVALID_ARGUMENT, files[i].name);
      return;
    }
  if (nf == 0) {
    expect_refusal(x, CODA_ERR_IO, NULL);
    return;
  }
  for (size_t i = 0; i < nf; i++)
    if (is_par1(files[i].file) || ends_with(files[i].name, ".parquet") ||
        ends_with(files[i].name, ".PARQUET")) {
      expect_refusal(x, CODA_ERR_NOT_SUPPORTED, files[i].name);
      return;
    }
  for (size_t i = 0; i < nf; i++) {
    const entry *f = files[i].file;
    if (ends_with(files[i].name, ".jsonl")) {
      if (!ref_jsonl(f->bytes, f->n, &x->all)) {
        expect_refusal(x, CODA_ERR_IO, files[i].name);
        return;
      }
    } else if (ref_binary(f->bytes, f->n)) {
      expect_refusal(x, CODA_ERR_INVALID_ARGUMENT, files[i].name);
      return;
    } else {
      for (size_t j = 0; j < f->n; j++) push(&x->all, f->bytes[j]);
    }
  }
  x->vocab = 256;
  x->status = too_small(&x->all) ? CODA_ERR_IO : CODA_OK;
  if (x->status) expect_refusal(x, CODA_ERR_IO, NULL);
}

static int begins_with_path(const char *msg, const char *path) {
  size_t n = strlen(path);
  return !strncmp(msg, path, n) && msg[n] == ':';
}

/* The warning lines of w that begin with the input directory's path, a
 * count and `what` ("file", "llm.c shard", plural or not) followed by " not
 * read (first: "): how many; *line the first such line. Names hold no '/'
 * or '\n', so a line that begins with the path is a warning's start. */
static int warning_lines(const char *w, const char *what, const char **line) {
  int n = 0;
  const size_t pl = strlen(in_path), wl = strlen(what);
  *line = NULL;
  for (const char *l = w; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
    if (strncmp(l, in_path, pl) || strncmp(l + pl, ": ", 2)) continue;
    const char *p = l + pl + 2;
    if (*p < '1' || *p > '9') continue;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != ' ' || strncmp(p, what, wl)) continue;
    p += wl;
    if (*p == 's') p++;
    if (strncmp(p, " not read (first: ", 18)) continue;
    if (!n++) *line = l;
  }
  return n;
}

/* No input is left out without a word: once the listing went through, the
 * regular files not read are counted and the first named in one warning
 * (none when every file is read); an accepted named llm.c split names the
 * shards of neither split the same way. */
static void check_warnings(const dir_expect *x, coda_status s) {
  const char *w = coda_warnings(ctx), *line;
  char want[4800];
  const int files = warning_lines(w, "file", &line);
  if (x->listed && x->skipped) {
    snprintf(want, sizeof want, "%s: %zu file%s not read (first: %s): ", in_path, x->skipped,
             x->skipped == 1 ? "" : "s", x->skipped_first);
    if (files != 1 || strncmp(line, want, strlen(want))) {
      fprintf(stderr, "warnings: '%s'\nexpected: '%s'\n", w, want);
      fail("files left out without the one warning that names them");
    }
  } else if (files) {
    fprintf(stderr, "warnings: '%s'\n", w);
    fail("a warning of files left out where the reference reads every file");
  }
  if (s != CODA_OK) return;
  const int shards = warning_lines(w, "llm.c shard", &line);
  if (x->named && x->neither) {
    snprintf(want, sizeof want, "%s: %zu llm.c shard%s not read (first: %s): ", in_path,
             x->neither, x->neither == 1 ? "" : "s", x->neither_first);
    if (shards != 1 || strncmp(line, want, strlen(want))) {
      fprintf(stderr, "warnings: '%s'\nexpected: '%s'\n", w, want);
      fail("shards of neither split left out without the one warning that names them");
    }
  } else if (shards) {
    fprintf(stderr, "warnings: '%s'\n", w);
    fail("a warning of shards left out where the reference reads every shard");
  }
}

void run_dir(const uint8_t *data, size_t size) {
  if (mkdir(in_path, 0700) != 0) fail("cannot create the input directory");
  const int fmt = size > 0 ? data[0] & 3 : 0;
  static const uint8_t sep[3] = {'|', '#', '|'};
  size_t at = size > 0 ? 1 : 0;
  while (at < size) {
    size_t end = at;
    while (end < size && !(end + 3 <= size && !memcmp(data + end, sep, 3))) end++;
    add_entry(data + at, end - at);
    at = end + 3;
  }
  dir_expect *x = calloc(1, sizeof *x);
  if (!x) fail("out of memory");
  const int walk = mode == MODE_CORPUSDIR; /* the walk behind coda_prepare_corpus */
  if (walk) ref_corpus_dir(x);
  else ref_dir(fmt, x);
  coda_data_options o = coda_data_default_options();
  o.path = in_path;
  o.format = (coda_data_format)fmt;
#ifdef CODA_FUZZ_TOKENIZER
  if (bpe) o.tokenizer = CODA_FUZZ_TOKENIZER;
#endif
  uint64_t ntr = 0, nva = 0;
  uint32_t got_vocab = 0;
  coda_warnings_clear(ctx);
  coda_status s = walk ? coda_prepare_corpus_dir(ctx, in_path, out_dir, 20, &ntr, &nva)
                       : coda_prepare_data(ctx, &o, out_dir, &ntr, &nva, &got_vocab);
  if (walk) got_vocab = 256; /* byte tokens */
  const char *msg = coda_last_error(ctx);
  check_warnings(x, s);
#ifdef FUZZ_VERBOSE
  fprintf(stderr, "status %d (reference %d%s, %s) tr %llu va %llu: %s\n", (int)s, (int)x->status,
          x->named ? ", named" : "", x->path, (unsigned long long)ntr, (unsigned long long)nva,
          s ? msg : "");
#endif
  if (s != CODA_OK) {
    if (exists("train.tok") || exists("val.tok") || exists("train.tok.partial") ||
        exists("val.tok.partial"))
      fail("a refusal left a shard behind");
    const int size_refusal = strstr(msg, "too small") || strstr(msg, "needs at least");
    if (x->status == CODA_OK && !(x->size_only && size_refusal && begins_with_path(msg, in_path))) {
      fprintf(stderr, "%s\n", msg);
      fail("a directory the reference accepts was refused");
    }
    if (x->status != CODA_OK && s != x->status) {
      fprintf(stderr, "status %d, the reference's %d: %s\n", (int)s, (int)x->status, msg);
      fail("a refusal with another status than the reference's");
    }
    if (x->status != CODA_OK && !begins_with_path(msg, x->path)) {
      fprintf(stderr, "%s\nthe reference refuses %s\n", msg, x->path);
      fail("a refusal that does not begin with the path of the file that fails");
    }
  } else {
    if (x->status != CODA_OK) {
      fprintf(stderr, "the reference refuses %s (status %d)\n", x->path, (int)x->status);
      fail("a directory the reference refuses was accepted");
    }
    if (bpe) {
      expect_bpe(&x->all, ntr, nva);
    } else if (x->named) {
      if (got_vocab != x->vocab || ntr != x->tr.n || nva != x->va.n)
        fail("the reported counts or vocabulary differ");
      expect_shard("train.tok", &x->tr, x->vocab);
      expect_shard("val.tok", &x->va, x->vocab);
    } else {
      if (got_vocab != x->vocab || ntr + nva != x->all.n)
        fail("the reported counts or vocabulary differ");
      expect_split(&x->all, x->vocab);
    }
  }
  free(x->all.t);
  free(x->tr.t);
  free(x->va.t);
  free(x);
  clear_out();
  clear_entries();
}
