/* A growing, NUL-terminated string for the library's text output (program
 * printing, plan listings, generated CUDA, safetensors headers). A failed
 * allocation sets oom and makes every later append a no-op, so callers
 * check once at the end. */
#ifndef CODA_CORE_STRBUF_H
#define CODA_CORE_STRBUF_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct coda_strbuf {
  char *s;    /* the text (NULL until the first append) */
  size_t len; /* bytes, without the terminating NUL */
  size_t cap;
  int oom;
} coda_strbuf;

/* Appends n bytes of t. */
void coda_sb_put(coda_strbuf *b, const char *t, size_t n);
/* Appends printf-formatted text. */
void coda_sb_printf(coda_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The text, owned by the caller from now on ("" when nothing was
 * appended); NULL, with the buffer freed, after an allocation failure. */
char *coda_sb_take(coda_strbuf *b);
#ifdef __cplusplus
}
#endif

#endif
