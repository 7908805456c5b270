/* The JSON reader of io.h: a recursive-descent parser (nesting bounded)
 * writing into a chunked arena. */
#include "io/io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 256
#define CHUNK_MIN ((size_t)1 << 20)

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  max_align_t data[];
} chunk;

struct coda_json_doc {
  chunk *chunks;
  coda_json root;
};

typedef struct parser {
  const char *p, *end, *start;
  coda_json_doc *doc;
  char *err;
  size_t err_len;
  int failed;
  /* Stacks of the values and members of the arrays and objects being read. */
  coda_json *vals;
  size_t nvals, capvals;
  coda_json_member *mems;
  size_t nmems, capmems;
  char found_buf[16]; /* what `found` describes */
} parser;

static void *arena_alloc(coda_json_doc *d, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  chunk *c = d->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
    c = malloc(sizeof(chunk) + cap);
    if (!c) return NULL;
    c->used = 0;
    c->cap = cap;
    c->next = d->chunks;
    d->chunks = c;
  }
  void *r = (char *)c->data + c->used;
  c->used += n;
  return r;
}

static int fail(parser *ps, const char *fmt, ...) {
  if (ps->failed) return 0;
  ps->failed = 1;
  int line = 1, col = 1;
  for (const char *q = ps->start; q < ps->p && q < ps->end; q++) {
    if (*q == '\n') {
      line++;
      col = 1;
    } else if (((unsigned char)*q & 0xC0) != 0x80) {
      col++;
    }
  }
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (ps->err && ps->err_len) snprintf(ps->err, ps->err_len, "line %d, column %d: %s", line, col, what);
  return 0;
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static const char *found(parser *ps) {
  if (ps->p >= ps->end) return "the end of the text";
  char *b = ps->found_buf;
  unsigned char c = (unsigned char)*ps->p;
  if (c >= 0x20 && c < 0x7f) snprintf(b, sizeof ps->found_buf, "'%c'", c);
  else snprintf(b, sizeof ps->found_buf, "byte 0x%02x", c);
  return b;
}

static int hex4(parser *ps, unsigned *out) {
  if (ps->end - ps->p < 4) return fail(ps, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = ps->p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return fail(ps, "bad \\u escape");
  }
  ps->p += 4;
  *out = v;
  return 1;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
  o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
  return 4;
}

/* The length of the well-formed UTF-8 sequence at p (Unicode's table 3-7:
 * no overlong forms, no surrogates, nothing past U+10FFFF), 0 if none. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  const unsigned c = p[0];
  size_t k;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) k = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    k = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    k = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (n < k || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < k; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return k;
}

/* Reads a string (ps->p at the opening quote) into the arena. */
static int parse_string(parser *ps, const char **out, size_t *out_len) {
  ps->p++;
  const char *s = ps->p;
  size_t escapes = 0;
  while (ps->p < ps->end && *ps->p != '"') {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) return fail(ps, "control character in a string");
    if (c >= 0x80) { /* JSON text is UTF-8 (RFC 8259): raw bytes are checked as the escapes are */
      const size_t k = utf8_len((const unsigned char *)ps->p, (size_t)(ps->end - ps->p));
      if (!k)
        return fail(ps, "invalid UTF-8 in a string: byte 0x%02x at byte offset %zu", c,
                    (size_t)(ps->p - ps->start));
      ps->p += k;
      continue;
    }
    if (c == '\\') {
      escapes++;
      ps->p++;
      if (ps->p >= ps->end) break;
    }
    ps->p++;
  }
  if (ps->p >= ps->end) return fail(ps, "unterminated string");
  size_t raw = (size_t)(ps->p - s);
  char *o = arena_alloc(ps->doc, raw + 1);
  if (!o) return fail(ps, "out of memory");
  if (!escapes) {
    memcpy(o, s, raw);
    o[raw] = '\0';
    ps->p++;
    *out = o;
    *out_len = raw;
    return 1;
  }
  /* Decode the escapes (the output is never longer than the input). */
  const char *q_end = ps->p;
  ps->p = s;
  size_t n = 0;
  while (ps->p < q_end) {
    char c = *ps->p++;
    if (c != '\\') { o[n++] = c; continue; }
    char e = *ps->p++;
    switch (e) {
    case '"': o[n++] = '"'; break;
    case '\\': o[n++] = '\\'; break;
    case '/': o[n++] = '/'; break;
    case 'b': o[n++] = '\b'; break;
    case 'f': o[n++] = '\f'; break;
    case 'n': o[n++] = '\n'; break;
    case 'r': o[n++] = '\r'; break;
    case 't': o[n++] = '\t'; break;
    case 'u': {
      unsigned cp;
      if (!hex4(ps, &cp)) return 0;
      if (cp >= 0xD800 && cp < 0xDC00) {
        unsigned lo;
        if (q_end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') return fail(ps, "unpaired surrogate in \\u escape");
        ps->p += 2;
        if (!hex4(ps, &lo)) return 0;
        if (lo < 0xDC00 || lo >= 0xE000) return fail(ps, "unpaired surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp < 0xE000) {
        return fail(ps, "unpaired surrogate in \\u escape");
      }
      n += put_utf8(o + n, cp);
      break;
    }
    default: ps->p--; return fail(ps, "bad escape in a string");
    }
  }
  o[n] = '\0';
  ps->p = q_end + 1;
  *out = o;
  *out_len = n;
  return 1;
}

static int parse_value(parser *ps, coda_json *v, int depth);

static int push_val(parser *ps, const coda_json *v) {
  if (ps->nvals == ps->capvals) {
    size_t cap = ps->capvals ? ps->capvals * 2 : 256;
    coda_json *nv = realloc(ps->vals, cap * sizeof *nv);
    if (!nv) return fail(ps, "out of memory");
    ps->vals = nv;
    ps->capvals = cap;
  }
  ps->vals[ps->nvals++] = *v;
  return 1;
}

static int push_mem(parser *ps, const coda_json_member *m) {
  if (ps->nmems == ps->capmems) {
    size_t cap = ps->capmems ? ps->capmems * 2 : 256;
    coda_json_member *nm = realloc(ps->mems, cap * sizeof *nm);
    if (!nm) return fail(ps, "out of memory");
    ps->mems = nm;
    ps->capmems = cap;
  }
  ps->mems[ps->nmems++] = *m;
  return 1;
}

static int parse_number(parser *ps, coda_json *v) {
  const char *s = ps->p;
  if (ps->p < ps->end && *ps->p == '-') ps->p++;
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "expected a value, found %s", found(ps));
  while (ps->p < ps->end && ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '.' || *ps->p == 'e' ||
                             *ps->p == 'E' || *ps->p == '+' || *ps->p == '-'))
    ps->p++;
  char buf[64];
  size_t n = (size_t)(ps->p - s);
  if (n >= sizeof buf) return fail(ps, "number too long");
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *e;
  double d = strtod(buf, &e);
  if (*e) return fail(ps, "bad number '%s'", buf);
  v->kind = CODA_JSON_NUMBER;
  v->u.num = d;
  return 1;
}

static int literal(parser *ps, const char *word, coda_json_kind k, coda_json *v) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n))
    return fail(ps, "expected a value, found %s", found(ps));
  ps->p += n;
  v->kind = k;
  return 1;
}

/* Orders members by key (length, then bytes), for the duplicate check. */
static int cmp_key(const void *a, const void *b) {
  const coda_json_member *x = *(const coda_json_member *const *)a, *y = *(const coda_json_member *const *)b;
  if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
  return memcmp(x->key, y->key, x->key_len);
}

/* An object with a key twice is refused: readers disagree on which one
 * counts (the first, the last, an error), so the file means nothing sure. */
static int check_unique_keys(parser *ps, const coda_json_member *m, size_t n) {
  const coda_json_member *dup = NULL;
  if (n < 2) return 1;
  if (n <= 16) {
    for (size_t i = 1; i < n && !dup; i++)
      for (size_t j = 0; j < i && !dup; j++)
        if (m[i].key_len == m[j].key_len && !memcmp(m[i].key, m[j].key, m[i].key_len)) dup = &m[i];
  } else {
    const coda_json_member **idx = malloc(n * sizeof *idx);
    if (!idx) return fail(ps, "out of memory");
    for (size_t i = 0; i < n; i++) idx[i] = &m[i];
    qsort(idx, n, sizeof *idx, cmp_key);
    for (size_t i = 1; i < n && !dup; i++)
      if (!cmp_key(&idx[i - 1], &idx[i])) dup = idx[i];
    free(idx);
  }
  if (!dup) return 1;
  ps->p--; /* at the closing brace */
  return fail(ps, "the key \"%.60s\" appears twice in the object ending here", dup->key);
}

static int parse_value(parser *ps, coda_json *v, int depth) {
  memset(v, 0, sizeof *v);
  skip_ws(ps);
  if (ps->p >= ps->end) return fail(ps, "expected a value, found the end of the text");
  if (depth > JSON_MAX_DEPTH) return fail(ps, "nesting deeper than %d", JSON_MAX_DEPTH);
  char c = *ps->p;
  if (c == '"') {
    v->kind = CODA_JSON_STRING;
    return parse_string(ps, &v->u.str, &v->n);
  }
  if (c == '[') {
    ps->p++;
    size_t base = ps->nvals;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
      ps->p++;
    } else {
      for (;;) {
        coda_json item;
        if (!parse_value(ps, &item, depth + 1) || !push_val(ps, &item)) return 0;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == ']') { ps->p++; break; }
        return fail(ps, "expected ',' or ']', found %s", found(ps));
      }
    }
    v->kind = CODA_JSON_ARRAY;
    v->n = ps->nvals - base;
    if (v->n) {
      v->u.items = arena_alloc(ps->doc, v->n * sizeof(coda_json));
      if (!v->u.items) return fail(ps, "out of memory");
      memcpy(v->u.items, ps->vals + base, v->n * sizeof(coda_json));
    }
    ps->nvals = base;
    return 1;
  }
  if (c == '{') {
    ps->p++;
    size_t base = ps->nmems;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
      ps->p++;
    } else {
      for (;;) {
        coda_json_member m;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a member name, found %s", found(ps));
        if (!parse_string(ps, &m.key, &m.key_len)) return 0;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':', found %s", found(ps));
        ps->p++;
        if (!parse_value(ps, &m.value, depth + 1) || !push_mem(ps, &m)) return 0;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == '}') { ps->p++; break; }
        return fail(ps, "expected ',' or '}', found %s", found(ps));
      }
    }
    v->kind = CODA_JSON_OBJECT;
    v->n = ps->nmems - base;
    if (v->n) {
      if (!check_unique_keys(ps, ps->mems + base, v->n)) return 0;
      v->u.members = arena_alloc(ps->doc, v->n * sizeof(coda_json_member));
      if (!v->u.members) return fail(ps, "out of memory");
      memcpy(v->u.members, ps->mems + base, v->n * sizeof(coda_json_member));
    }
    ps->nmems = base;
    return 1;
  }
  if (c == 't') return literal(ps, "true", CODA_JSON_TRUE, v);
  if (c == 'f') return literal(ps, "false", CODA_JSON_FALSE, v);
  if (c == 'n') return literal(ps, "null", CODA_JSON_NULL, v);
  return parse_number(ps, v);
}

coda_json_doc *coda_json_parse(const char *text, size_t n, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  coda_json_doc *d = calloc(1, sizeof *d);
  if (!d) {
    if (err && err_len) snprintf(err, err_len, "out of memory");
    return NULL;
  }
  parser ps = {.p = text, .end = text + n, .start = text, .doc = d, .err = err, .err_len = err_len};
  int ok = parse_value(&ps, &d->root, 0);
  if (ok) {
    skip_ws(&ps);
    if (ps.p < ps.end) ok = fail(&ps, "unexpected %s after the value", found(&ps));
  }
  free(ps.vals);
  free(ps.mems);
  if (!ok) {
    coda_json_free(d);
    return NULL;
  }
  return d;
}

const coda_json *coda_json_root(const coda_json_doc *d) { return &d->root; }

void coda_json_free(coda_json_doc *d) {
  if (!d) return;
  for (chunk *c = d->chunks; c;) {
    chunk *next = c->next;
    free(c);
    c = next;
  }
  free(d);
}

const coda_json *coda_json_get(const coda_json *v, const char *key) {
  if (!v || v->kind != CODA_JSON_OBJECT) return NULL;
  size_t kl = strlen(key);
  for (size_t i = 0; i < v->n; i++)
    if (v->u.members[i].key_len == kl && !memcmp(v->u.members[i].key, key, kl)) return &v->u.members[i].value;
  return NULL;
}

int coda_json_is_str(const coda_json *v, const char *s) {
  return v && v->kind == CODA_JSON_STRING && v->n == strlen(s) && !memcmp(v->u.str, s, v->n);
}

const char *coda_json_kind_name(coda_json_kind k) {
  switch (k) {
  case CODA_JSON_NULL: return "null";
  case CODA_JSON_FALSE:
  case CODA_JSON_TRUE: return "a boolean";
  case CODA_JSON_NUMBER: return "a number";
  case CODA_JSON_STRING: return "a string";
  case CODA_JSON_ARRAY: return "an array";
  case CODA_JSON_OBJECT: return "an object";
  }
  return "?";
}
