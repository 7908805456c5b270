/* The JSON reader of io.h, on jansson (Debian's libjansson-dev): jansson
 * checks the grammar, the UTF-8 of the whole text (no overlong forms, no
 * encoded surrogates, nothing past U+10FFFF), \u escapes and surrogate
 * pairs, and refuses an object with a key twice (JSON_REJECT_DUPLICATES).
 * Around it this file keeps the bounds of the reader it replaced: the text's
 * size, the nesting depth (checked before jansson recurses), and messages
 * that begin with "line L, column C". The tree jansson builds is copied into
 * one arena (io.h's plain structs, which the callers walk) and dropped. */
#include "io/io.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 256
#define JSON_MAX_BYTES ((size_t)1 << 30)
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

static void *arena_alloc(coda_json_doc *d, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  if (!n) n = sizeof(max_align_t);
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

/* Line and column (1-based, a column counts characters: UTF-8 continuation
 * bytes do not move it) of byte offset `at` of the text. */
static void position_of(const char *text, size_t n, size_t at, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < at && i < n; i++) {
    if (text[i] == '\n') {
      ++*line;
      *col = 1;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      ++*col;
    }
  }
}

static void say(char *err, size_t err_len, int line, int col, const char *fmt, ...) {
  if (!err || !err_len) return;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(err, err_len, "line %d, column %d: %s", line, col, what);
}

/* The offset of the first '[' or '{' deeper than JSON_MAX_DEPTH outside the
 * strings, or SIZE_MAX. jansson's own bound is a compile-time 2048. */
static size_t too_deep_at(const char *text, size_t n) {
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < n; i++) {
    const char c = text[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > JSON_MAX_DEPTH) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return SIZE_MAX;
}

/* jansson's refusal as "line L, column C: what". */
static void say_refusal(const json_error_t *je, const char *text, size_t n, char *err, size_t err_len) {
  int line, col;
  const size_t at = je->position > 0 ? (size_t)je->position : 0;
  switch (json_error_code(je)) {
  case json_error_invalid_utf8:
    /* jansson stops before the first byte it cannot decode */
    if (at < n && (unsigned char)text[at] >= 0x80) {
      position_of(text, n, at, &line, &col);
      say(err, err_len, line, col, "invalid UTF-8: byte 0x%02x at byte offset %zu", (unsigned char)text[at], at);
      return;
    }
    break;
  case json_error_duplicate_key: {
    /* jansson's text: duplicate object key near '"KEY"' */
    const char *k = strstr(je->text, "near '\"");
    int kl = 0;
    if (k) {
      k += 7;
      const char *e = strrchr(k, '\'');
      kl = e && e > k && e[-1] == '"' ? (int)(e - 1 - k) : 0;
    }
    /* jansson's position: the end of the second occurrence of the key */
    line = je->line > 0 ? je->line : 1;
    col = je->column > 0 ? je->column : 1;
    if (kl > 60) kl = 60;
    say(err, err_len, line, col, "the key \"%.*s\" appears twice in the object", kl, k ? k : "");
    return;
  }
  default: break;
  }
  if (json_error_code(je) == json_error_premature_end_of_input) {
    /* the text ended early: the column just past its last character */
    position_of(text, n, n, &line, &col);
  } else {
    line = je->line > 0 ? je->line : 1;
    col = je->column > 0 ? je->column : 1;
  }
  say(err, err_len, line, col, "%s", je->text[0] ? je->text : "invalid JSON");
}

/* Copies jansson's value j into v (strings and arrays into the arena). */
static int copy_value(coda_json_doc *d, const json_t *j, coda_json *v) {
  memset(v, 0, sizeof *v);
  switch (json_typeof(j)) {
  case JSON_NULL: v->kind = CODA_JSON_NULL; return 1;
  case JSON_FALSE: v->kind = CODA_JSON_FALSE; return 1;
  case JSON_TRUE: v->kind = CODA_JSON_TRUE; return 1;
  case JSON_INTEGER:
  case JSON_REAL:
    v->kind = CODA_JSON_NUMBER;
    v->u.num = json_number_value(j);
    return 1;
  case JSON_STRING: {
    const size_t n = json_string_length(j);
    char *s = arena_alloc(d, n + 1);
    if (!s) return 0;
    memcpy(s, json_string_value(j), n);
    s[n] = '\0';
    v->kind = CODA_JSON_STRING;
    v->u.str = s;
    v->n = n;
    return 1;
  }
  case JSON_ARRAY: {
    v->kind = CODA_JSON_ARRAY;
    v->n = json_array_size(j);
    if (!v->n) return 1;
    v->u.items = arena_alloc(d, v->n * sizeof(coda_json));
    if (!v->u.items) return 0;
    for (size_t i = 0; i < v->n; i++)
      if (!copy_value(d, json_array_get(j, i), &v->u.items[i])) return 0;
    return 1;
  }
  case JSON_OBJECT: {
    v->kind = CODA_JSON_OBJECT;
    v->n = json_object_size(j);
    if (!v->n) return 1;
    v->u.members = arena_alloc(d, v->n * sizeof(coda_json_member));
    if (!v->u.members) return 0;
    size_t i = 0;
    /* jansson keeps an object's members in the file's order */
    for (void *it = json_object_iter((json_t *)j); it && i < v->n; it = json_object_iter_next((json_t *)j, it), i++) {
      coda_json_member *m = &v->u.members[i];
      const size_t kl = json_object_iter_key_len(it);
      char *k = arena_alloc(d, kl + 1);
      if (!k) return 0;
      memcpy(k, json_object_iter_key(it), kl);
      k[kl] = '\0';
      m->key = k;
      m->key_len = kl;
      if (!copy_value(d, json_object_iter_value(it), &m->value)) return 0;
    }
    v->n = i;
    return 1;
  }
  }
  return 0;
}

coda_json_doc *coda_json_parse(const char *text, size_t n, char *err, size_t err_len) {
  int line, col;
  if (err && err_len) err[0] = '\0';
  if (n > JSON_MAX_BYTES) {
    say(err, err_len, 1, 1, "the text is %zu bytes, more than %zu", n, JSON_MAX_BYTES);
    return NULL;
  }
  const size_t deep = too_deep_at(text, n);
  if (deep != SIZE_MAX) {
    position_of(text, n, deep, &line, &col);
    say(err, err_len, line, col, "nesting deeper than %d", JSON_MAX_DEPTH);
    return NULL;
  }
  /* Any value at the top; all numbers as doubles (no "too big integer");
   * \u0000 kept inside strings (their length is known). */
  json_error_t je;
  json_t *j = json_loadb(text, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL,
                         &je);
  if (!j) {
    if (json_error_code(&je) == json_error_out_of_memory) {
      if (err && err_len) snprintf(err, err_len, "out of memory");
    } else {
      say_refusal(&je, text, n, err, err_len);
    }
    return NULL;
  }
  coda_json_doc *d = calloc(1, sizeof *d);
  if (!d || !copy_value(d, j, &d->root)) {
    json_decref(j);
    coda_json_free(d);
    if (err && err_len) snprintf(err, err_len, "out of memory");
    return NULL;
  }
  json_decref(j);
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
