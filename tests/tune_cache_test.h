/* Shared parts of the two tuning-cache file tests (tests/test_tune_cache.c:
 * the GEMM table, tests/test_fused_tune_cache.c: the fused-step table): a
 * clock-seeded random stream, the file in a directory its first save
 * creates, the default-location rule, lines every reader skips, and what an
 * atomic rewrite leaves in the directory. Include after _POSIX_C_SOURCE. */
#ifndef CODA_TEST_TUNE_CACHE_H
#define CODA_TEST_TUNE_CACHE_H

#include "check.h"
#include "base/tune_cache.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng;
static inline uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static inline int64_t irange(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

/* A new stream per run; the seed is printed so that a failure can be
 * replayed. */
static inline void seed_from_clock(void) {
  rng = ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull) | 1;
  printf("seed %llu\n", (unsigned long long)rng);
}

/* <dir>/sub/<file>: the first save creates the directories. */
typedef struct cache_files {
  char dir[64], sub[128], path[256];
} cache_files;

static inline void cache_files_remove(const cache_files *f) {
  remove(f->path);
  rmdir(f->sub);
  rmdir(f->dir);
}

/* Names the files and removes what an earlier run left. */
static inline void cache_files_init(cache_files *f, const char *dir, const char *file) {
  snprintf(f->dir, sizeof f->dir, "%s", dir);
  snprintf(f->sub, sizeof f->sub, "%s/sub", dir);
  snprintf(f->path, sizeof f->path, "%s/%s", f->sub, file);
  cache_files_remove(f);
}

/* $CODA_CACHE_DIR/<file> first, then $HOME/.cache/coda/<file>; "" when the
 * path does not fit. */
/* The default path comes from the knobs, read from the environment once:
 * CODA_CACHE_DIR wins over $HOME/.cache/coda. */
static inline void check_default_path(int (*default_path)(const coda_knobs *, char *, size_t),
                                      const char *file) {
  char p[CODA_TUNE_PATH_LEN], want[CODA_TUNE_PATH_LEN];
  coda_knobs k;
  setenv("CODA_CACHE_DIR", "/some/dir", 1);
  coda_knobs_from_env(&k);
  snprintf(want, sizeof want, "/some/dir/%s", file);
  CHECK(default_path(&k, p, sizeof p) && strcmp(p, want) == 0);
  unsetenv("CODA_CACHE_DIR");
  setenv("HOME", "/home/x", 1);
  coda_knobs_from_env(&k);
  snprintf(want, sizeof want, "/home/x/.cache/coda/%s", file);
  CHECK(default_path(&k, p, sizeof p) && strcmp(p, want) == 0);
  CHECK(!default_path(&k, p, 10) && p[0] == '\0'); /* does not fit */
}

static inline int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, ch;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

/* The rest of an open file as a string (malloc'ed). */
static inline char *read_rest(FILE *f) {
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap);
  size_t r;
  while ((r = fread(s + n, 1, cap - 1 - n, f)) > 0) {
    n += r;
    if (n + 1 == cap) s = realloc(s, cap *= 2);
  }
  s[n] = '\0';
  return s;
}

/* A comment, an empty and a blank line (skipped, not counted) and an
 * overlong line (skipped and counted as corrupt). */
static inline void append_skipped_lines(FILE *f) {
  fprintf(f, "# a comment\n\n   \n");
  for (int i = 0; i < 1000; i++) fputc('7', f);
  fputc('\n', f);
}

/* dir holds no entry but `file` (an atomic rewrite leaves no temporary). */
static inline void check_only_file(const char *dir, const char *file) {
  int others = 0;
  DIR *dd = opendir(dir);
  CHECK(dd != NULL);
  for (struct dirent *de; dd && (de = readdir(dd));)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, file)) others++;
  if (dd) closedir(dd);
  CHECK_EQ_INT(others, 0);
}

#endif
