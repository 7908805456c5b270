#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `more` bytes and the NUL. */
static int reserve(coda_strbuf *b, size_t more) {
  if (b->oom) return 0;
  if (b->s && b->len + more < b->cap) return 1;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap <= b->len + more) cap *= 2;
  char *s = realloc(b->s, cap);
  if (!s) {
    b->oom = 1;
    return 0;
  }
  b->s = s;
  b->cap = cap;
  return 1;
}

void coda_sb_put(coda_strbuf *b, const char *t, size_t n) {
  if (!reserve(b, n)) return;
  memcpy(b->s + b->len, t, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void coda_sb_printf(coda_strbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  const int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0) {
    b->oom = 1;
    return;
  }
  if (!reserve(b, (size_t)k)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)k;
}

char *coda_sb_take(coda_strbuf *b) {
  if (b->oom) {
    free(b->s);
    b->s = NULL;
    return NULL;
  }
  if (!b->s) {
    b->s = malloc(1);
    if (b->s) b->s[0] = '\0';
  }
  char *s = b->s;
  b->s = NULL;
  b->len = b->cap = 0;
  return s;
}
