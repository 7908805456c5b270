/* libFuzzer harness for the JSON reader (src/io/json.c, on jansson), which reads
 * tokenizer.json. Every input is parsed; a rejected one must come with a
 * "line L, column C: ..." message whose position lies inside the text. An
 * accepted one is written back as JSON by an independent writer (below),
 * parsed again, and the two trees must be equal (kinds, numbers, string
 * bytes with embedded NULs, member order and keys), no object may hold a
 * key twice (the reader refuses that); the text must also be
 * accepted with whitespace around it and refused with a second value after
 * it. Any violation aborts.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=json) */
#include "io/io.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what) {
  fprintf(stderr, "fuzz_json: %s\n", what);
  abort();
}

typedef struct out {
  char *p;
  size_t n, cap;
} out;

static void put(out *o, const char *s, size_t n) {
  if (o->n + n + 1 > o->cap) {
    size_t cap = (o->cap ? o->cap * 2 : 256) + n;
    char *p = realloc(o->p, cap);
    if (!p) fail("out of memory");
    o->p = p;
    o->cap = cap;
  }
  memcpy(o->p + o->n, s, n);
  o->n += n;
  o->p[o->n] = '\0';
}
static void puts_(out *o, const char *s) { put(o, s, strlen(s)); }

static void put_string(out *o, const char *s, size_t n) {
  puts_(o, "\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char b[8];
    if (c == '"' || c == '\\') {
      b[0] = '\\';
      b[1] = (char)c;
      put(o, b, 2);
    } else if (c < 0x20) {
      snprintf(b, sizeof b, "\\u%04x", c);
      puts_(o, b);
    } else {
      put(o, (const char *)&c, 1); /* other bytes as they are */
    }
  }
  puts_(o, "\"");
}

static void write_value(out *o, const coda_json *v) {
  char b[64];
  switch (v->kind) {
  case CODA_JSON_NULL: puts_(o, "null"); break;
  case CODA_JSON_FALSE: puts_(o, "false"); break;
  case CODA_JSON_TRUE: puts_(o, "true"); break;
  case CODA_JSON_NUMBER:
    if (isnan(v->u.num)) fail("a NaN number was accepted");
    if (isinf(v->u.num)) puts_(o, v->u.num > 0 ? "1e999" : "-1e999");
    else {
      snprintf(b, sizeof b, "%.17g", v->u.num);
      puts_(o, b);
    }
    break;
  case CODA_JSON_STRING:
    if (!v->u.str || v->u.str[v->n] != '\0') fail("a string is not NUL-terminated");
    put_string(o, v->u.str, v->n);
    break;
  case CODA_JSON_ARRAY:
    puts_(o, "[");
    for (size_t i = 0; i < v->n; i++) {
      if (i) puts_(o, ",");
      write_value(o, &v->u.items[i]);
    }
    puts_(o, "]");
    break;
  case CODA_JSON_OBJECT:
    for (size_t i = 1; i < v->n && v->n <= 512; i++) /* the reader refuses a key twice */
      for (size_t j = 0; j < i; j++)
        if (v->u.members[i].key_len == v->u.members[j].key_len &&
            !memcmp(v->u.members[i].key, v->u.members[j].key, v->u.members[i].key_len))
          fail("an object with a key twice was accepted");
    puts_(o, "{");
    for (size_t i = 0; i < v->n; i++) {
      if (i) puts_(o, ",");
      const coda_json_member *m = &v->u.members[i];
      if (m->key[m->key_len] != '\0') fail("a key is not NUL-terminated");
      put_string(o, m->key, m->key_len);
      puts_(o, ":");
      write_value(o, &m->value);
    }
    puts_(o, "}");
    break;
  default: fail("unknown kind");
  }
}

static int same(const coda_json *a, const coda_json *b) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case CODA_JSON_NUMBER: return a->u.num == b->u.num;
  case CODA_JSON_STRING: return a->n == b->n && !memcmp(a->u.str, b->u.str, a->n);
  case CODA_JSON_ARRAY:
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
      if (!same(&a->u.items[i], &b->u.items[i])) return 0;
    return 1;
  case CODA_JSON_OBJECT:
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
      const coda_json_member *x = &a->u.members[i], *y = &b->u.members[i];
      if (x->key_len != y->key_len || memcmp(x->key, y->key, x->key_len) || !same(&x->value, &y->value))
        return 0;
    }
    return 1;
  default: return a->n == b->n;
  }
}

/* The message of a refusal: "line L, column C: what", inside the text. */
static void check_refusal(const char *err, const uint8_t *d, size_t n) {
  int line = 0, col = 0, used = 0;
  if (!strcmp(err, "out of memory")) return;
  if (sscanf(err, "line %d, column %d: %n", &line, &col, &used) != 2 || used == 0 || !err[used])
    fail("a refusal without 'line L, column C: what'");
  int lines = 1;
  for (size_t i = 0; i < n; i++) lines += d[i] == '\n';
  if (line < 1 || line > lines || col < 1 || (size_t)col > n + 1) fail("the refusal's position is outside the text");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[300];
  coda_json_doc *d = coda_json_parse((const char *)data, size, err, sizeof err);
  if (!d) {
    check_refusal(err, data, size);
    return 0;
  }
  if (err[0]) fail("an accepted text left a message");
  out o = {NULL, 0, 0};
  write_value(&o, coda_json_root(d));
  coda_json_doc *again = coda_json_parse(o.p, o.n, err, sizeof err);
  if (!again) {
    fprintf(stderr, "rewritten: %.200s\nerror: %s\n", o.p, err);
    fail("the rewritten text was refused");
  }
  if (!same(coda_json_root(d), coda_json_root(again))) fail("the rewritten text parses to another tree");
  coda_json_free(again);
  /* whitespace around the value changes nothing; a second value is refused */
  size_t m = size + 4;
  char *w = malloc(m + 4);
  if (!w) fail("out of memory");
  memcpy(w, " \n\t", 3);
  memcpy(w + 3, data, size);
  w[3 + size] = '\r';
  coda_json_doc *ws = coda_json_parse(w, m, err, sizeof err);
  if (!ws || !same(coda_json_root(d), coda_json_root(ws))) fail("whitespace around the value changed it");
  coda_json_free(ws);
  memcpy(w + 3 + size, " 0", 2);
  coda_json_doc *two = coda_json_parse(w, size + 5, err, sizeof err);
  if (two) fail("a second value after the first was accepted");
  check_refusal(err, (const uint8_t *)w, size + 5);
  free(w);
  free(o.p);
  coda_json_free(d);
  return 0;
}
