/* The JSON reader of the files the library loads (tokenizer.json,
 * config.json, JSON Lines corpora), on jansson: the whole text (at most
 * 1 GiB, nesting at most 256 deep) is parsed into a tree of values that
 * lives in one arena, freed at once. Strings are decoded to UTF-8 (\u
 * escapes included, surrogate pairs joined) and NUL-terminated; object
 * members keep the file's order, and an object with a key twice is
 * refused (readers disagree on which one counts). */
#ifndef CODA_TRAIN_JSON_H
#define CODA_TRAIN_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum coda_json_kind {
  CODA_JSON_NULL = 0,
  CODA_JSON_FALSE,
  CODA_JSON_TRUE,
  CODA_JSON_NUMBER,
  CODA_JSON_STRING,
  CODA_JSON_ARRAY,
  CODA_JSON_OBJECT
} coda_json_kind;

typedef struct coda_json_member coda_json_member;

typedef struct coda_json {
  coda_json_kind kind;
  size_t n; /* string: bytes; array: items; object: members */
  union {
    double num;
    const char *str;
    struct coda_json *items;
    coda_json_member *members;
  } u;
} coda_json;

struct coda_json_member {
  const char *key;
  size_t key_len;
  coda_json value;
};

typedef struct coda_json_doc coda_json_doc;

/* Parses n bytes of text. On failure returns NULL and writes
 * "line L, column C: what" to err (err_len bytes). */
coda_json_doc *coda_json_parse(const char *text, size_t n, char *err, size_t err_len);
const coda_json *coda_json_root(const coda_json_doc *d);
void coda_json_free(coda_json_doc *d);

/* The member `key` of an object (NULL if v is not an object or has none). */
const coda_json *coda_json_get(const coda_json *v, const char *key);
/* 1 if v is a string equal to s. */
int coda_json_is_str(const coda_json *v, const char *s);
/* Name of a kind, for messages ("string", "object"...). */
const char *coda_json_kind_name(coda_json_kind k);

#endif
