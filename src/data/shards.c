/* Byte-level tokenizer, token shards (written whole or a piece at a time,
 * read, memory-mapped), the test fixtures' corpus of documents, batch
 * sampler. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "base/rng.h"
#include "io/io.h"
#include "data/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

size_t coda_tok_encode(const char *text, size_t n, uint32_t *out) {
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)text[i];
  return n;
}

size_t coda_tok_decode(const uint32_t *tok, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) out[i] = tok[i] < 256 ? (char)tok[i] : '?';
  return n;
}

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) {
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

coda_status coda_shard_write(coda_context ctx, const char *path, const uint32_t *tok,
                             uint64_t count, uint32_t vocab, int width) {
  if (width != 2 && width != 4)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: token width must be 2 or 4, not %d",
                     path, width);
  if (vocab == 0 || (width == 2 && vocab > 65536))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "%s: vocab %u does not fit %d-byte tokens", path, vocab, width);
  if (count > (UINT64_MAX - CODA_SHARD_HEADER) / 4 || count * (uint64_t)width > SIZE_MAX)
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "%s: %llu tokens is too many", path,
                     (unsigned long long)count);
  size_t nb = (size_t)count * (size_t)width;
  unsigned char *body = malloc(nb ? nb : 1);
  if (!body) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  for (uint64_t i = 0; i < count; i++) {
    if (tok[i] >= vocab) {
      free(body);
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: token %llu is %u, outside vocab %u",
                       path, (unsigned long long)i, tok[i], vocab);
    }
    for (int b = 0; b < width; b++) body[i * width + b] = (unsigned char)(tok[i] >> (8 * b));
  }
  unsigned char h[CODA_SHARD_HEADER];
  memcpy(h, "CODATOKS", 8);
  put_u32(h + 8, 1);
  put_u32(h + 12, (uint32_t)width);
  put_u64(h + 16, count);
  put_u32(h + 24, vocab);
  put_u32(h + 28, coda_crc32(0, body, nb));
  const void *parts[2] = {h, body};
  size_t sizes[2] = {sizeof h, nb};
  coda_status s = coda_write_atomic(ctx, path, parts, sizes, 2);
  free(body);
  return s;
}

coda_status coda_shard_check(coda_context ctx, const char *path, const unsigned char *b,
                             size_t n) {
  const coda_status s = CODA_ERR_IO;
  if (n < CODA_SHARD_HEADER)
    return coda_fail(ctx, s, "%s: truncated: %zu bytes, the header alone is %d", path, n,
                     CODA_SHARD_HEADER);
  if (memcmp(b, "CODATOKS", 8)) return coda_fail(ctx, s, "%s: bad magic (not a coda token shard)", path);
  uint32_t version = get_u32(b + 8), width = get_u32(b + 12), voc = get_u32(b + 24);
  uint64_t cnt = get_u64(b + 16);
  if (version != 1)
    return coda_fail(ctx, s, "%s: unsupported shard version %u (expected 1)", path, version);
  if (width != 2 && width != 4)
    return coda_fail(ctx, s, "%s: bad token dtype: width %u (expected 2 = uint16 or 4 = uint32)",
                     path, width);
  if (voc == 0 || (width == 2 && voc > 65536))
    return coda_fail(ctx, s, "%s: bad vocab size %u for %u-byte tokens", path, voc, width);
  if (cnt > (uint64_t)(n - CODA_SHARD_HEADER) / width ||
      cnt * width != (uint64_t)(n - CODA_SHARD_HEADER))
    return coda_fail(ctx, s, "%s: size mismatch: header says %llu tokens of %u bytes, file has %zu "
                             "payload bytes (truncated or corrupted)",
                     path, (unsigned long long)cnt, width, n - CODA_SHARD_HEADER);
  const unsigned char *body = b + CODA_SHARD_HEADER;
  uint32_t crc = coda_crc32(0, body, (size_t)(cnt * width));
  if (crc != get_u32(b + 28))
    return coda_fail(ctx, s, "%s: checksum mismatch (stored %08x, computed %08x)", path,
                     get_u32(b + 28), crc);
  for (uint64_t i = 0; i < cnt; i++) {
    uint32_t v = 0;
    for (uint32_t k = 0; k < width; k++) v |= (uint32_t)body[i * width + k] << (8 * k);
    if (v >= voc)
      return coda_fail(ctx, s, "%s: token %llu is %u, outside vocab %u", path,
                       (unsigned long long)i, v, voc);
  }
  return CODA_OK;
}

coda_status coda_shard_read(coda_context ctx, const char *path, uint32_t **tok,
                            uint64_t *count, uint32_t *vocab) {
  *tok = NULL;
  unsigned char *b;
  size_t n;
  coda_status s = coda_read_file(ctx, path, &b, &n);
  if (s) return s;
  s = coda_shard_check(ctx, path, b, n);
  if (s) {
    free(b);
    return s;
  }
  uint32_t width = get_u32(b + 12), voc = get_u32(b + 24);
  uint64_t cnt = get_u64(b + 16);
  const unsigned char *body = b + CODA_SHARD_HEADER;
  uint32_t *t = malloc(cnt ? cnt * sizeof *t : 1);
  if (!t) {
    free(b);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  for (uint64_t i = 0; i < cnt; i++) {
    uint32_t v = 0;
    for (uint32_t k = 0; k < width; k++) v |= (uint32_t)body[i * width + k] << (8 * k);
    t[i] = v;
  }
  free(b);
  *tok = t;
  *count = cnt;
  if (vocab) *vocab = voc;
  return CODA_OK;
}

/* ---- corpus ---- */

typedef struct { uint32_t *p; size_t n, cap; } tokbuf;

static int tb_push(tokbuf *t, const char *s, size_t n) {
  if (t->n + n > t->cap) {
    size_t c = t->cap ? t->cap : 4096;
    while (c < t->n + n) c *= 2;
    uint32_t *np = realloc(t->p, c * sizeof *np);
    if (!np) return -1;
    t->p = np;
    t->cap = c;
  }
  coda_tok_encode(s, n, t->p + t->n);
  t->n += n;
  return 0;
}

/* Splits text into documents at lines that hold only "%" (the separator
 * line stays with the document it ends, so the model sees it) and deals
 * them to train / val by global document index. */
static int split_docs(const char *text, size_t n, int val_every, uint64_t *doc_index,
                      tokbuf *train, tokbuf *val) {
  size_t start = 0, i = 0;
  while (i < n) {
    size_t eol = i;
    while (eol < n && text[eol] != '\n') eol++;
    size_t next = eol < n ? eol + 1 : n;
    int sep = (eol - i == 1 && text[i] == '%');
    if (sep || next == n) {
      tokbuf *dst = (val_every > 0 && *doc_index % (uint64_t)val_every == (uint64_t)val_every - 1)
                        ? val : train;
      if (next > start && tb_push(dst, text + start, next - start)) return -1;
      (*doc_index)++;
      start = next;
    }
    i = next;
  }
  return 0;
}

static coda_status write_pair(coda_context ctx, const char *out_dir, tokbuf *tr, tokbuf *va,
                              uint64_t *n_train, uint64_t *n_val) {
  if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create directory: %s", out_dir,
                     strerror(errno));
  if (tr->n < 2 || va->n < 2)
    return coda_fail(ctx, CODA_ERR_IO, "corpus too small: %zu train and %zu validation tokens",
                     tr->n, va->n);
  size_t L = strlen(out_dir) + 16;
  char *p = malloc(L);
  if (!p) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  snprintf(p, L, "%s/train.tok", out_dir);
  coda_status s = coda_shard_write(ctx, p, tr->p, tr->n, CODA_TOK_BYTES, 2);
  if (!s) {
    snprintf(p, L, "%s/val.tok", out_dir);
    s = coda_shard_write(ctx, p, va->p, va->n, CODA_TOK_BYTES, 2);
  }
  free(p);
  if (n_train) *n_train = tr->n;
  if (n_val) *n_val = va->n;
  return s;
}

coda_status coda_prepare_corpus_text(coda_context ctx, const char *text, size_t n,
                                     const char *out_dir, int val_every, uint64_t *n_train,
                                     uint64_t *n_val) {
  tokbuf tr = {0}, va = {0};
  uint64_t di = 0;
  coda_status s;
  if (split_docs(text, n, val_every, &di, &tr, &va))
    s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  else
    s = write_pair(ctx, out_dir, &tr, &va, n_train, n_val);
  free(tr.p);
  free(va.p);
  return s;
}

coda_status coda_sampler_batch(coda_context ctx, coda_sampler *s, int B, int T, int32_t *inputs,
                               int32_t *targets) {
  if (B <= 0 || T <= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "batch %d x %d must be positive", B, T);
  if (s->count < (uint64_t)T + 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "token stream of %llu tokens is shorter than one sequence of %d + 1",
                     (unsigned long long)s->count, T);
  for (int b = 0; b < B; b++) {
    uint64_t start = coda_rng_below(&s->rng, s->count - (uint64_t)T);
    for (int t = 0; t < T; t++) {
      inputs[(size_t)b * T + t] = (int32_t)s->tok[start + t];
      targets[(size_t)b * T + t] = (int32_t)s->tok[start + t + 1];
    }
    s->drawn++;
  }
  return CODA_OK;
}

/* ---------------------------------------------- a shard written in pieces */

coda_status coda_shard_stream_open(coda_context ctx, const char *dir, const char *name,
                                    coda_shard_stream *o) {
  memset(o, 0, sizeof *o);
  size_t n = strlen(dir) + strlen(name) + 16;
  o->path = malloc(n);
  o->tmp = malloc(n + 16);
  if (!o->path || !o->tmp) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  snprintf(o->path, n, "%s/%s", dir, name);
  snprintf(o->tmp, n + 16, "%s.partial", o->path);
  o->f = fopen(o->tmp, "wb");
  if (!o->f) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create: %s", o->tmp, strerror(errno));
  unsigned char h[CODA_SHARD_HEADER] = {0};
  if (fwrite(h, 1, sizeof h, o->f) != sizeof h)
    return coda_fail(ctx, CODA_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
  return CODA_OK;
}

coda_status coda_shard_stream_put(coda_context ctx, coda_shard_stream *o, const uint32_t *t,
                                  size_t n) {
  unsigned char b[4 * 1024];
  while (n > 0) {
    size_t k = n < 1024 ? n : 1024;
    for (size_t i = 0; i < k; i++)
      for (int j = 0; j < 4; j++) b[4 * i + (size_t)j] = (unsigned char)(t[i] >> (8 * j));
    if (fwrite(b, 4, k, o->f) != k)
      return coda_fail(ctx, CODA_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
    o->crc = coda_crc32(o->crc, b, 4 * k);
    o->count += k;
    t += k;
    n -= k;
  }
  return CODA_OK;
}

/* The header (uint32 tokens), fsync, then the rename over the final name. */
coda_status coda_shard_stream_close(coda_context ctx, coda_shard_stream *o, uint32_t vocab) {
  unsigned char h[CODA_SHARD_HEADER];
  memcpy(h, "CODATOKS", 8);
  /* the layout of data.h: version, width, count, vocab, CRC-32 */
  for (int i = 0; i < 4; i++) {
    h[8 + i] = (unsigned char)(1u >> (8 * i));
    h[12 + i] = (unsigned char)(4u >> (8 * i));
    h[24 + i] = (unsigned char)(vocab >> (8 * i));
    h[28 + i] = (unsigned char)(o->crc >> (8 * i));
  }
  for (int i = 0; i < 8; i++) h[16 + i] = (unsigned char)(o->count >> (8 * i));
  int bad = fseek(o->f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, o->f) != sizeof h ||
            fflush(o->f) != 0 || fsync(fileno(o->f)) != 0;
  bad |= fclose(o->f) != 0;
  o->f = NULL;
  if (bad) return coda_fail(ctx, CODA_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
  if (rename(o->tmp, o->path) != 0)
    return coda_fail(ctx, CODA_ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->path,
                     strerror(errno));
  return CODA_OK;
}

void coda_shard_stream_abort(coda_shard_stream *o) {
  if (o->f) {
    fclose(o->f);
    unlink(o->tmp);
  }
  free(o->path);
  free(o->tmp);
  memset(o, 0, sizeof *o);
}

/* --------------------------------------------------------- mapped shards */

coda_status coda_shard_open(coda_context ctx, const char *path, coda_shard_view *v) {
  memset(v, 0, sizeof *v);
  int fd;
  uint64_t size;
  coda_status s = coda_open_regular(ctx, path, UINT64_MAX, &fd, &size);
  if (s) return s;
  unsigned char h[CODA_SHARD_HEADER];
  s = size < sizeof h ? coda_fail(ctx, CODA_ERR_IO, "%s: truncated: %llu bytes, the header alone "
                                  "is %d", path, (unsigned long long)size, CODA_SHARD_HEADER)
                      : coda_read_fd(ctx, fd, path, 0, h, sizeof h);
  const uint32_t width = s ? 0 : (uint32_t)h[12] | (uint32_t)h[13] << 8;
  const int le = 1;
  /* uint32 tokens on a little-endian host are read in place */
  if (!s && width == 4 && *(const unsigned char *)&le == 1 && size <= SIZE_MAX) {
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
      return coda_fail(ctx, CODA_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    /* the checks of coda_shard_read, on the mapping */
    coda_status c = coda_shard_check(ctx, path, m, (size_t)size);
    if (c) {
      munmap(m, (size_t)size);
      return c;
    }
    const unsigned char *b = m;
    v->tok = (const uint32_t *)(const void *)(b + CODA_SHARD_HEADER);
    v->count = (size - CODA_SHARD_HEADER) / 4;
    v->vocab = (uint32_t)b[24] | (uint32_t)b[25] << 8 | (uint32_t)b[26] << 16 | (uint32_t)b[27] << 24;
    v->map = m;
    v->map_len = (size_t)size;
    return CODA_OK;
  }
  close(fd);
  if (s) return s;
  uint32_t *t;
  s = coda_shard_read(ctx, path, &t, &v->count, &v->vocab);
  if (s) return s;
  v->tok = t;
  v->owned = t;
  return CODA_OK;
}

void coda_shard_close(coda_shard_view *v) {
  if (!v) return;
  if (v->map) munmap(v->map, v->map_len);
  free(v->owned);
  memset(v, 0, sizeof *v);
}
