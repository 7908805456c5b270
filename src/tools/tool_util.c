/* Small helpers shared by the subcommands of the coda tool. */
#include "tool_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE (16u << 20)

/* Reads a whole file (or stdin for "-") into a NUL-terminated string. */
char *coda_tool_read_text(const char *path, const char **why) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) {
    *why = "cannot open the file";
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (len + 1 >= cap) {
      if (cap >= MAX_FILE) {
        *why = "file is too large";
        free(buf);
        buf = NULL;
        break;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        *why = "out of memory";
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t n = fread(buf + len, 1, cap - 1 - len, f);
    if (n == 0) break;
    len += n;
  }
  if (buf && ferror(f)) {
    *why = "read error";
    free(buf);
    buf = NULL;
  }
  if (f != stdin) fclose(f);
  if (!buf) return NULL;
  buf[len] = '\0';
  if (memchr(buf, '\0', len)) {
    *why = "file contains a NUL byte";
    free(buf);
    return NULL;
  }
  return buf;
}
