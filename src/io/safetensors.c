/* Minimal safetensors reader / writer: an 8-byte little-endian header
 * length, a JSON object {name: {dtype, shape, data_offsets}, __metadata__:
 * {string: string}}, then the raw little-endian data region. Nothing read
 * from a file is trusted: every length and offset is checked. */
#define _POSIX_C_SOURCE 200809L
#include "io/io.h"
#include "base/strbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_MAX_HEADER CODA_ST_MAX_HEADER

size_t coda_st_dtype_size(const char *d) {
  if (!strcmp(d, "F32") || !strcmp(d, "I32") || !strcmp(d, "U32")) return 4;
  if (!strcmp(d, "F16") || !strcmp(d, "BF16") || !strcmp(d, "I16") || !strcmp(d, "U16")) return 2;
  if (!strcmp(d, "F64") || !strcmp(d, "I64") || !strcmp(d, "U64")) return 8;
  if (!strcmp(d, "U8") || !strcmp(d, "I8") || !strcmp(d, "BOOL")) return 1;
  return 0;
}

/* ---- JSON (only what safetensors headers use) ---- */

typedef struct {
  const char *p, *end;
  const char *what;
  coda_context ctx;
  coda_status err;
} jp;

static coda_status jfail(jp *j, const char *msg) {
  if (!j->err)
    j->err = coda_fail(j->ctx, CODA_ERR_IO, "%s: bad safetensors header: %s", j->what, msg);
  return j->err;
}

static void jws(jp *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static int jlit(jp *j, char c) {
  jws(j);
  if (j->p < j->end && *j->p == c) {
    j->p++;
    return 1;
  }
  return 0;
}

/* Parses a JSON string into a malloc'ed UTF-8 string (\u escapes of the
 * BMP are encoded; NUL characters are rejected). */
static char *jstr(jp *j) {
  jws(j);
  if (j->p >= j->end || *j->p != '"') { jfail(j, "expected a string"); return NULL; }
  j->p++;
  size_t cap = 32, n = 0;
  char *s = malloc(cap);
  if (!s) { jfail(j, "out of memory"); return NULL; }
  while (1) {
    if (j->p >= j->end) { jfail(j, "unterminated string"); free(s); return NULL; }
    unsigned char c = (unsigned char)*j->p++;
    if (c == '"') break;
    if (c < 0x20) { jfail(j, "control character in string"); free(s); return NULL; }
    char buf[4];
    int k = 1;
    buf[0] = (char)c;
    if (c == '\\') {
      if (j->p >= j->end) { jfail(j, "bad escape"); free(s); return NULL; }
      char e = *j->p++;
      switch (e) {
      case '"': buf[0] = '"'; break;
      case '\\': buf[0] = '\\'; break;
      case '/': buf[0] = '/'; break;
      case 'b': buf[0] = '\b'; break;
      case 'f': buf[0] = '\f'; break;
      case 'n': buf[0] = '\n'; break;
      case 'r': buf[0] = '\r'; break;
      case 't': buf[0] = '\t'; break;
      case 'u': {
        if (j->end - j->p < 4) { jfail(j, "bad \\u escape"); free(s); return NULL; }
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          char h = *j->p++;
          v <<= 4;
          if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
          else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
          else { jfail(j, "bad \\u escape"); free(s); return NULL; }
        }
        if (v == 0) { jfail(j, "NUL in string"); free(s); return NULL; }
        if (v < 0x80) { buf[0] = (char)v; }
        else if (v < 0x800) { buf[0] = (char)(0xc0 | v >> 6); buf[1] = (char)(0x80 | (v & 63)); k = 2; }
        else { buf[0] = (char)(0xe0 | v >> 12); buf[1] = (char)(0x80 | ((v >> 6) & 63));
               buf[2] = (char)(0x80 | (v & 63)); k = 3; }
        break;
      }
      default: jfail(j, "bad escape"); free(s); return NULL;
      }
    }
    if (n + (size_t)k + 1 > cap) {
      cap *= 2;
      char *ns = realloc(s, cap);
      if (!ns) { free(s); jfail(j, "out of memory"); return NULL; }
      s = ns;
    }
    memcpy(s + n, buf, (size_t)k);
    n += (size_t)k;
  }
  s[n] = '\0';
  return s;
}

/* Non-negative integer (no sign, fraction or exponent), at most 2^53. */
static int juint(jp *j, uint64_t *out) {
  jws(j);
  const char *st = j->p;
  uint64_t v = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    if (v > (UINT64_C(1) << 53) / 10) { jfail(j, "integer too large"); return -1; }
    v = v * 10 + (uint64_t)(*j->p - '0');
    j->p++;
  }
  if (j->p == st) { jfail(j, "expected a non-negative integer"); return -1; }
  if (j->p - st > 1 && *st == '0') { jfail(j, "leading zero in integer"); return -1; }
  *out = v;
  return 0;
}

static int parse_tensor(jp *j, coda_st_tensor *t) {
  int have_dtype = 0, have_shape = 0, have_off = 0;
  if (!jlit(j, '{')) { jfail(j, "tensor entry is not an object"); return -1; }
  if (jlit(j, '}')) { jfail(j, "empty tensor entry"); return -1; }
  do {
    char *k = jstr(j);
    if (!k) return -1;
    if (!jlit(j, ':')) { free(k); jfail(j, "expected ':'"); return -1; }
    if (!strcmp(k, "dtype") && !have_dtype) {
      char *v = jstr(j);
      if (!v) { free(k); return -1; }
      if (strlen(v) >= sizeof t->dtype || !coda_st_dtype_size(v)) {
        free(v); free(k);
        jfail(j, "unknown dtype");
        return -1;
      }
      strcpy(t->dtype, v);
      free(v);
      have_dtype = 1;
    } else if (!strcmp(k, "shape") && !have_shape) {
      if (!jlit(j, '[')) { free(k); jfail(j, "shape is not an array"); return -1; }
      t->ndim = 0;
      if (!jlit(j, ']')) {
        do {
          uint64_t d;
          if (t->ndim >= CODA_ST_MAX_DIMS) { free(k); jfail(j, "too many dimensions"); return -1; }
          if (juint(j, &d)) { free(k); return -1; }
          t->shape[t->ndim++] = (int64_t)d;
        } while (jlit(j, ','));
        if (!jlit(j, ']')) { free(k); jfail(j, "expected ']' after shape"); return -1; }
      }
      have_shape = 1;
    } else if (!strcmp(k, "data_offsets") && !have_off) {
      if (!jlit(j, '[') || juint(j, &t->begin) || !jlit(j, ',') || juint(j, &t->end) ||
          !jlit(j, ']')) {
        free(k);
        jfail(j, "data_offsets must be [begin, end]");
        return -1;
      }
      have_off = 1;
    } else {
      free(k);
      jfail(j, "unknown or repeated key in tensor entry");
      return -1;
    }
    free(k);
  } while (jlit(j, ','));
  if (!jlit(j, '}')) { jfail(j, "expected '}' after tensor entry"); return -1; }
  if (!have_dtype || !have_shape || !have_off) {
    jfail(j, "tensor entry lacks dtype, shape or data_offsets");
    return -1;
  }
  return 0;
}

void coda_st_free(coda_st_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  for (int i = 0; i < f->nmeta; i++) {
    free(f->meta_key[i]);
    free(f->meta_val[i]);
  }
  free(f->t);
  free(f->meta_key);
  free(f->meta_val);
  free(f->buf);
  memset(f, 0, sizeof *f);
}

static int cmp_begin(const void *a, const void *b) {
  const coda_st_tensor *x = *(const coda_st_tensor *const *)a, *y = *(const coda_st_tensor *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The header checksum: CRC-32 of the 8 length bytes and the header with
 * the 8 hex digits of header_crc32 itself read as '0'. The writer emits
 * exactly HCRC_KEY followed by the digits, once; 0 if it matches. */
#define HCRC_KEY "\"header_crc32\":\""
static int check_header_crc(const unsigned char *buf, size_t hl, const char *val) {
  const size_t kl = sizeof HCRC_KEY - 1;
  const unsigned char *h = buf + 8;
  size_t at = 0, found = 0;
  for (size_t i = 0; i + kl + 9 <= hl; i++)
    if (h[i] == '"' && !memcmp(h + i, HCRC_KEY, kl) && h[i + kl + 8] == '"') {
      at = i + kl;
      found++;
    }
  if (found != 1 || strlen(val) != 8 || memcmp(h + at, val, 8)) return -1;
  unsigned want = 0;
  for (int k = 0; k < 8; k++) {
    char c = val[k];
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16u;
    if (d > 15) return -1;
    want = want << 4 | d;
  }
  uint32_t crc = coda_crc32(0, buf, 8 + at);
  crc = coda_crc32(crc, "00000000", 8);
  crc = coda_crc32(crc, h + at + 8, hl - at - 8);
  return crc == want ? 0 : -1;
}

static int cmp_name(const void *a, const void *b) {
  const coda_st_tensor *x = *(const coda_st_tensor *const *)a, *y = *(const coda_st_tensor *const *)b;
  return strcmp(x->name, y->name);
}

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The __metadata__ object (after its key): string values only. */
static int parse_metadata(jp *j, coda_st_file *f) {
  if (!jlit(j, '{')) { jfail(j, "__metadata__ is not an object"); return -1; }
  if (!jlit(j, '}')) {
    size_t mcap = 0;
    do {
      char *k = jstr(j);
      if (!k) return -1;
      if (!jlit(j, ':')) { free(k); jfail(j, "expected ':'"); return -1; }
      char *v = jstr(j);
      if (!v) { free(k); jfail(j, "metadata values must be strings"); return -1; }
      if ((size_t)f->nmeta == mcap) {
        mcap = mcap ? mcap * 2 : 16;
        char **a = realloc(f->meta_key, mcap * sizeof *a);
        if (a) f->meta_key = a;
        char **b = realloc(f->meta_val, mcap * sizeof *b);
        if (b) f->meta_val = b;
        if (!a || !b) { free(k); free(v); jfail(j, "out of memory"); return -1; }
      }
      f->meta_key[f->nmeta] = k;
      f->meta_val[f->nmeta] = v;
      f->nmeta++;
    } while (jlit(j, ','));
    if (!jlit(j, '}')) { jfail(j, "expected '}' after __metadata__"); return -1; }
  }
  return 0;
}

/* The header's JSON object: the tensors' entries and the metadata. */
static int parse_header(jp *j, coda_st_file *f) {
  size_t cap = 0;
  if (!jlit(j, '{')) {
    jfail(j, "not a JSON object");
    return -1;
  }
  if (!jlit(j, '}')) {
    int have_meta = 0;
    do {
      char *key = jstr(j);
      if (!key) return -1;
      if (!jlit(j, ':')) { free(key); jfail(j, "expected ':'"); return -1; }
      if (!strcmp(key, "__metadata__")) {
        free(key);
        if (have_meta) { jfail(j, "repeated __metadata__"); return -1; }
        have_meta = 1;
        if (parse_metadata(j, f)) return -1;
        continue;
      }
      if ((size_t)f->n == cap) {
        cap = cap ? cap * 2 : 64;
        coda_st_tensor *nt = realloc(f->t, cap * sizeof *nt);
        if (!nt) { free(key); jfail(j, "out of memory"); return -1; }
        f->t = nt;
      }
      coda_st_tensor *t = &f->t[f->n];
      memset(t, 0, sizeof *t);
      t->name = key;
      f->n++;
      if (parse_tensor(j, t)) return -1;
    } while (jlit(j, ','));
    if (!jlit(j, '}')) { jfail(j, "expected '}' or ','"); return -1; }
  }
  jws(j);
  if (j->p != j->end) { jfail(j, "trailing bytes after the JSON object"); return -1; }
  return 0;
}

/* Every tensor's shape, dtype and offsets agree and lie within the data
 * region (data_len bytes); data pointers unless header_only. */
static int check_extents(jp *j, coda_st_file *f, const unsigned char *buf, uint64_t data_len,
                         int header_only) {
  coda_context ctx = j->ctx;
  const char *what = j->what;
  for (int i = 0; i < f->n; i++) {
    coda_st_tensor *t = &f->t[i];
    uint64_t elems = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] != 0 && elems > (UINT64_C(1) << 53) / (uint64_t)t->shape[d]) {
        jfail(j, "shape overflows");
        return -1;
      }
      elems *= (uint64_t)t->shape[d];
    }
    uint64_t es = coda_st_dtype_size(t->dtype);
    if (elems > (UINT64_C(1) << 60) / es || t->begin > t->end || t->end - t->begin != elems * es) {
      coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s': data_offsets [%llu, %llu] do not match shape "
                "and dtype %s (%llu bytes)", what, t->name, (unsigned long long)t->begin,
                (unsigned long long)t->end, t->dtype, (unsigned long long)(elems * es));
      j->err = CODA_ERR_IO;
      return -1;
    }
    if (t->end > data_len) {
      coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' ends at %llu, past the data region of %llu "
                "bytes (truncated?)", what, t->name, (unsigned long long)t->end,
                (unsigned long long)data_len);
      j->err = CODA_ERR_IO;
      return -1;
    }
    t->data = header_only ? NULL : buf + f->data_start + t->begin;
  }
  return 0;
}

/* No two tensors overlap or share a name; no metadata key twice. */
static int check_unique(jp *j, coda_st_file *f) {
  coda_context ctx = j->ctx;
  const char *what = j->what;
  if (f->n > 1) {
    const coda_st_tensor **o = malloc((size_t)f->n * sizeof *o);
    if (!o) { jfail(j, "out of memory"); return -1; }
    for (int i = 0; i < f->n; i++) o[i] = &f->t[i];
    qsort(o, (size_t)f->n, sizeof *o, cmp_begin);
    for (int i = 1; i < f->n; i++) {
      if (o[i]->begin < o[i - 1]->end) {
        coda_fail(ctx, CODA_ERR_IO, "%s: tensors '%s' and '%s' overlap", what, o[i - 1]->name,
                  o[i]->name);
        free(o);
        j->err = CODA_ERR_IO;
        return -1;
      }
    }
    /* Unique names: sorted, so a hostile header of many entries costs
     * n log n, not n^2. */
    qsort(o, (size_t)f->n, sizeof *o, cmp_name);
    for (int i = 1; i < f->n; i++) {
      if (!strcmp(o[i]->name, o[i - 1]->name)) {
        coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' appears twice", what, o[i]->name);
        free(o);
        j->err = CODA_ERR_IO;
        return -1;
      }
    }
    free(o);
  }
  if (f->nmeta > 1) { /* unique metadata keys (else the first would win silently) */
    char **k = malloc((size_t)f->nmeta * sizeof *k);
    if (!k) { jfail(j, "out of memory"); return -1; }
    memcpy(k, f->meta_key, (size_t)f->nmeta * sizeof *k);
    qsort(k, (size_t)f->nmeta, sizeof *k, cmp_cstr);
    for (int i = 1; i < f->nmeta; i++) {
      if (!strcmp(k[i], k[i - 1])) {
        coda_fail(ctx, CODA_ERR_IO, "%s: metadata key '%s' appears twice", what, k[i]);
        free(k);
        j->err = CODA_ERR_IO;
        return -1;
      }
    }
    free(k);
  }
  return 0;
}

/* The data checksum (crc32) unless header_only, and the header's
 * (header_crc32); require_crc: both must be there. */
static int check_crcs(jp *j, coda_st_file *f, const unsigned char *buf, uint64_t hl,
                      uint64_t data_len, int header_only, int require_crc) {
  coda_context ctx = j->ctx;
  const char *what = j->what;
  const char *crc = coda_st_meta(f, "crc32");
  if (crc && !header_only) {
    char *endp;
    errno = 0;
    unsigned long want = strtoul(crc, &endp, 16);
    if (errno || *endp || strlen(crc) != 8) {
      coda_fail(ctx, CODA_ERR_IO, "%s: malformed crc32 metadata '%s'", what, crc);
      j->err = CODA_ERR_IO;
      return -1;
    }
    uint32_t got = coda_crc32(0, buf + f->data_start, (size_t)data_len);
    if (got != (uint32_t)want) {
      coda_fail(ctx, CODA_ERR_IO, "%s: checksum mismatch (stored %s, computed %08x): the file is "
                "corrupted", what, crc, got);
      j->err = CODA_ERR_IO;
      return -1;
    }
  } else if (require_crc && !crc) {
    coda_fail(ctx, CODA_ERR_IO, "%s: no crc32 in the metadata", what);
    j->err = CODA_ERR_IO;
    return -1;
  }
  /* crc32 covers the data only; header_crc32 covers the length and the
   * header (metadata such as the step or rope_theta included). */
  const char *hcrc = coda_st_meta(f, "header_crc32");
  if (hcrc) {
    if (check_header_crc(buf, (size_t)hl, hcrc)) {
      coda_fail(ctx, CODA_ERR_IO, "%s: header checksum mismatch (header_crc32 '%s'): the header "
                "is corrupted", what, hcrc);
      j->err = CODA_ERR_IO;
      return -1;
    }
  } else if (require_crc) {
    coda_fail(ctx, CODA_ERR_IO, "%s: no header_crc32 in the metadata", what);
    j->err = CODA_ERR_IO;
    return -1;
  }
  return 0;
}

/* file_size: the size of the whole file; size < file_size when buf holds
 * only the length and the header (header_only loads: the tensors' offsets
 * are checked against file_size, no data pointer is set and the data
 * checksum is not verified; the header checksum is). */
static coda_status st_parse_owned(coda_context ctx, unsigned char *buf, size_t size,
                                  uint64_t file_size, int require_crc, const char *what,
                                  coda_st_file *f) {
  memset(f, 0, sizeof *f);
  f->buf = buf;
  f->size = size;
  if (size < 8) {
    coda_st_free(f);
    return coda_fail(ctx, CODA_ERR_IO, "%s: truncated: %zu bytes, no header length", what, size);
  }
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
  if (hl < 2 || hl > ST_MAX_HEADER || hl > size - 8 || file_size < size) {
    coda_st_free(f);
    return coda_fail(ctx, CODA_ERR_IO,
                     "%s: bad header length %llu (file has %zu bytes; truncated or not safetensors)",
                     what, (unsigned long long)hl, size);
  }
  f->data_start = 8 + (size_t)hl;
  jp j = {(const char *)buf + 8, (const char *)buf + 8 + hl, what, ctx, CODA_OK};
  if (parse_header(&j, f)) goto fail;
  const int header_only = file_size > size;
  uint64_t data_len = file_size - f->data_start;
  if (check_extents(&j, f, buf, data_len, header_only) || check_unique(&j, f) ||
      check_crcs(&j, f, buf, hl, data_len, header_only, require_crc))
    goto fail;
  return CODA_OK;
fail:
  coda_st_free(f);
  return j.err ? j.err : CODA_ERR_IO;
}

coda_status coda_st_parse(coda_context ctx, const void *bytes, size_t n, int require_crc,
                          const char *what, coda_st_file *out) {
  memset(out, 0, sizeof *out); /* also on failure, as coda_st_load does */
  unsigned char *b = malloc(n ? n : 1);
  if (!b) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  memcpy(b, bytes, n);
  return st_parse_owned(ctx, b, n, n, require_crc, what, out);
}

coda_status coda_st_load(coda_context ctx, const char *path, int require_crc, coda_st_file *out) {
  return coda_st_load_ex(ctx, path, require_crc, UINT64_MAX, 0, out);
}

coda_status coda_st_load_ex(coda_context ctx, const char *path, int require_crc, uint64_t max,
                            int header_only, coda_st_file *out) {
  memset(out, 0, sizeof *out);
  int fd;
  uint64_t size;
  coda_status s = coda_open_regular(ctx, path, UINT64_MAX, &fd, &size);
  if (s != CODA_OK) return s;
  /* The header length against the file's size before the whole file is
   * read (and allocated). */
  uint64_t want = size;
  if (size >= 8) {
    unsigned char len8[8];
    s = coda_read_fd(ctx, fd, path, 0, len8, 8);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)len8[i] << (8 * i);
    if (!s && (hl < 2 || hl > ST_MAX_HEADER || hl > size - 8))
      s = coda_fail(ctx, CODA_ERR_IO, "%s: bad header length %llu (file has %llu bytes; "
                    "truncated or not safetensors)", path, (unsigned long long)hl,
                    (unsigned long long)size);
    if (!s && !header_only && size > max)
      s = coda_fail(ctx, CODA_ERR_IO, "%s: %llu bytes, more than the %llu bytes its model can "
                    "take (not this model's file, or damaged)", path,
                    (unsigned long long)size, (unsigned long long)max);
    if (header_only) want = 8 + hl;
    if (s) {
      close(fd);
      return s;
    }
  }
  unsigned char *b = malloc(want ? (size_t)want : 1);
  if (!b) {
    close(fd);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory (%llu bytes)", path,
                     (unsigned long long)want);
  }
  s = coda_read_fd(ctx, fd, path, 0, b, (size_t)want);
  close(fd);
  if (s) {
    free(b);
    return s;
  }
  return st_parse_owned(ctx, b, (size_t)want, size, require_crc, path, out);
}

const coda_st_tensor *coda_st_find(const coda_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

const char *coda_st_meta(const coda_st_file *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
  return NULL;
}

/* ---- writer ---- */

static void sb_str(coda_strbuf *s, const char *t) { coda_sb_put(s, t, strlen(t)); }
static void sb_json(coda_strbuf *s, const char *t) {
  coda_sb_put(s, "\"", 1);
  for (; *t; t++) {
    unsigned char c = (unsigned char)*t;
    char e[8];
    if (c == '"' || c == '\\') { e[0] = '\\'; e[1] = (char)c; coda_sb_put(s, e, 2); }
    else if (c < 0x20) { snprintf(e, sizeof e, "\\u%04x", c); coda_sb_put(s, e, 6); }
    else coda_sb_put(s, (const char *)&c, 1);
  }
  coda_sb_put(s, "\"", 1);
}

/* Bytes of a tensor read through a staging buffer at a time. */
#define ST_CHUNK ((size_t)64 << 20)

coda_status coda_st_save_from(coda_context ctx, const char *path, const coda_st_entry *e, int n,
                              const char *const *meta_kv, int nmeta, coda_st_reader read,
                              void *user) {
  uint64_t off = 0;
  size_t *nbytes = malloc((size_t)(n > 0 ? n : 1) * sizeof *nbytes);
  if (!nbytes) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) {
    size_t es = coda_st_dtype_size(e[i].dtype);
    if (!es || e[i].ndim < 0 || e[i].ndim > CODA_ST_MAX_DIMS) {
      free(nbytes);
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: tensor '%s': bad dtype or rank", path,
                       e[i].name);
    }
    uint64_t el = 1;
    for (int d = 0; d < e[i].ndim; d++) el *= (uint64_t)e[i].shape[d];
    nbytes[i] = (size_t)(el * es);
  }
  /* The header first, with both CRCs as zeros: its length does not depend
   * on them (8 hex digits each), so the data can be written behind it and
   * the CRCs filled in after. */
  coda_strbuf h = {0};
  char num[64];
  sb_str(&h, "{\"__metadata__\":{");
  for (int i = 0; i < nmeta; i++) {
    sb_json(&h, meta_kv[2 * i]);
    sb_str(&h, ":");
    sb_json(&h, meta_kv[2 * i + 1]);
    sb_str(&h, ",");
  }
  sb_str(&h, "\"crc32\":\"");
  size_t crc_at = h.len;
  sb_str(&h, "00000000\",");
  sb_str(&h, HCRC_KEY);
  size_t hcrc_at = h.len; /* filled in once the header is complete */
  sb_str(&h, "00000000\"}");
  for (int i = 0; i < n; i++) {
    sb_str(&h, ",");
    sb_json(&h, e[i].name);
    sb_str(&h, ":{\"dtype\":");
    sb_json(&h, e[i].dtype);
    sb_str(&h, ",\"shape\":[");
    for (int d = 0; d < e[i].ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
      sb_str(&h, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
             (unsigned long long)(off + nbytes[i]));
    sb_str(&h, num);
    off += nbytes[i];
  }
  sb_str(&h, "}");
  while (h.len % 8) sb_str(&h, " "); /* the data region starts 8-aligned */
  unsigned char *stage = read ? malloc(ST_CHUNK) : NULL;
  if (h.oom || (read && !stage)) {
    free(h.s);
    free(nbytes);
    free(stage);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  coda_atomic_file f;
  coda_status s = coda_atomic_open(ctx, path, &f);
  uint32_t crc = 0;
  uint64_t at = 8 + (uint64_t)h.len;
  for (int i = 0; i < n && !s; i++) {
    if (!read) {
      crc = coda_crc32(crc, e[i].data, nbytes[i]);
      s = coda_atomic_write_at(ctx, &f, at, e[i].data, nbytes[i]);
      at += nbytes[i];
      continue;
    }
    for (uint64_t o = 0; o < nbytes[i] && !s; o += ST_CHUNK) {
      const size_t k = nbytes[i] - o < ST_CHUNK ? (size_t)(nbytes[i] - o) : ST_CHUNK;
      s = read(user, i, o, stage, k);
      if (s) {
        coda_atomic_abort(&f);
        break;
      }
      crc = coda_crc32(crc, stage, k);
      s = coda_atomic_write_at(ctx, &f, at, stage, k);
      at += k;
    }
  }
  if (!s) {
    snprintf(num, sizeof num, "%08x", crc);
    memcpy(h.s + crc_at, num, 8);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    uint32_t hcrc = coda_crc32(coda_crc32(0, len8, 8), h.s, h.len);
    snprintf(num, sizeof num, "%08x", hcrc);
    memcpy(h.s + hcrc_at, num, 8);
    s = coda_atomic_write_at(ctx, &f, 0, len8, 8);
    if (!s) s = coda_atomic_write_at(ctx, &f, 8, h.s, h.len);
    if (!s) s = coda_atomic_commit(ctx, &f);
  }
  free(stage);
  free(h.s);
  free(nbytes);
  return s;
}

coda_status coda_st_save(coda_context ctx, const char *path, const coda_st_entry *e, int n,
                         const char *const *meta_kv, int nmeta) {
  return coda_st_save_from(ctx, path, e, n, meta_kv, nmeta, NULL, NULL);
}
