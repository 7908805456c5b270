/* Small helpers shared by the subcommands of the coda tool. */
#define _POSIX_C_SOURCE 200809L
#include "tool_util.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE (16u << 20)

/* Reads a whole file (or stdin for "-") into a NUL-terminated string. */
char *coda_tool_read_text(const char *path, const char **why) {
  FILE *f = stdin;
  if (strcmp(path, "-")) {
    /* O_NONBLOCK: a FIFO must not block the open; only a regular file is
     * read */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
      *why = "cannot open the file";
      return NULL;
    }
    int ok = fstat(fd, &st) == 0;
    if (!ok || !S_ISREG(st.st_mode)) {
      *why = !ok ? "cannot stat the file"
             : S_ISDIR(st.st_mode) ? "is a directory, not a file" : "not a regular file";
      close(fd);
      return NULL;
    }
    if ((uint64_t)st.st_size >= MAX_FILE) {
      *why = "file is too large";
      close(fd);
      return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    f = fdopen(fd, "rb");
    if (!f) {
      close(fd);
      *why = "cannot open the file";
      return NULL;
    }
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
