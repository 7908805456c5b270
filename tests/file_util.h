/* Whole-file helpers shared by the tests that write, damage and compare
 * files (checkpoints, token shards, loss logs). */
#ifndef CODA_TEST_FILE_UTIL_H
#define CODA_TEST_FILE_UTIL_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The file's bytes (malloc'ed, one spare byte) and their count in *n, or
 * NULL with *n = 0 when it cannot be read. */
static inline unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  *n = 0;
  if (!f) return NULL;
  long L = -1;
  if (fseek(f, 0, SEEK_END) == 0) L = ftell(f);
  unsigned char *b = L >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)L + 1) : NULL;
  if (b) *n = fread(b, 1, (size_t)L, f);
  fclose(f);
  return b;
}

/* Writes n bytes to p; 0 on success, -1 otherwise. */
static inline int spit(const char *p, const unsigned char *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (!f) return -1;
  size_t w = fwrite(b, 1, n, f);
  return fclose(f) == 0 && w == n ? 0 : -1;
}

/* 1 when both files can be read and hold the same bytes. */
static inline int same_file(const char *a, const char *b) {
  size_t na, nb;
  unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
  int same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

/* Removes the files of a flat directory, then the directory. */
static inline void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  char path[1024];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* Removes a directory and everything below it (rm -rf); system()'s
 * status, 0 on success. */
static inline int remove_tree(const char *dir) {
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd);
}
/* Writes the string text to DIR/NAME; 0 on success, -1 otherwise. */
static inline int write_text_in(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* The first 64 KiB of DIR/NAME as a string (malloc'ed), or NULL. */
static inline char *read_text_in(const char *dir, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  char *s = calloc(1, 1 << 16);
  if (s && fread(s, 1, (1 << 16) - 1, f) == 0 && ferror(f)) s[0] = 0;
  fclose(f);
  return s;
}

#endif
