/* The GEMM autotuner's table and its text file (format in tune_cache.h). */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen, fsync, mkdir */

#include "core/tune_cache.h"

#include "core/internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TUNE_FILE "gemm-tune.txt"
#define TUNE_LINE_MAX 512

static void copy_tag(char *dst, const char *src) {
  size_t i = 0;
  for (; src && src[i] && i + 1 < CODA_TUNE_TAG_LEN; i++)
    dst[i] = isspace((unsigned char)src[i]) ? '_' : src[i];
  dst[i] = '\0';
  if (i == 0) strcpy(dst, "?");
}

void coda_tune_cache_init(coda_tune_cache *c, const char *device, const char *lib,
                          const char *path) {
  memset(c, 0, sizeof *c);
  copy_tag(c->device, device);
  copy_tag(c->lib, lib);
  if (path && strlen(path) < sizeof c->path) strcpy(c->path, path);
}

void coda_tune_cache_free(coda_tune_cache *c) {
  free(c->e);
  c->e = NULL;
  c->n = c->cap = 0;
}

int coda_tune_cache_default_path(char *buf, size_t n) {
  const char *dir = getenv("CODA_CACHE_DIR");
  int len;
  if (dir && dir[0])
    len = snprintf(buf, n, "%s/%s", dir, TUNE_FILE);
  else if (getenv("HOME") && getenv("HOME")[0])
    len = snprintf(buf, n, "%s/.cache/coda/%s", getenv("HOME"), TUNE_FILE);
  else
    len = -1;
  if (len < 0 || (size_t)len >= n) {
    if (n) buf[0] = '\0';
    return 0;
  }
  return 1;
}

static int key_eq(const coda_tune_key *a, const coda_tune_key *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->trans_a == b->trans_a &&
         a->trans_b == b->trans_b && a->ab == b->ab && a->d == b->d &&
         a->accumulate == b->accumulate;
}

static coda_tune_entry *find_tagged(const coda_tune_cache *c, const char *device,
                                    const char *lib, const coda_tune_key *key) {
  for (int i = 0; i < c->n; i++)
    if (key_eq(&c->e[i].key, key) && strcmp(c->e[i].device, device) == 0 &&
        strcmp(c->e[i].lib, lib) == 0)
      return &c->e[i];
  return NULL;
}

const coda_tune_entry *coda_tune_cache_find(const coda_tune_cache *c, const coda_tune_key *key) {
  return find_tagged(c, c->device, c->lib, key);
}

/* Adds e, or overwrites the entry with the same tags and key. */
static coda_status put_entry(coda_tune_cache *c, const coda_tune_entry *e) {
  coda_tune_entry *old = find_tagged(c, e->device, e->lib, &e->key);
  if (old) {
    *old = *e;
    return CODA_OK;
  }
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    coda_tune_entry *ne = realloc(c->e, (size_t)cap * sizeof *ne);
    if (!ne) return CODA_ERR_OUT_OF_MEMORY;
    c->e = ne;
    c->cap = cap;
  }
  c->e[c->n++] = *e;
  return CODA_OK;
}

coda_status coda_tune_cache_put(coda_tune_cache *c, const coda_tune_key *key, int config,
                                int splits, double us) {
  if (config < 0 || splits < 1 || !(us >= 0)) return CODA_ERR_INVALID_ARGUMENT;
  coda_tune_entry e;
  memset(&e, 0, sizeof e);
  strcpy(e.device, c->device);
  strcpy(e.lib, c->lib);
  e.key = *key;
  e.config = config;
  e.splits = splits;
  e.us = us;
  return put_entry(c, &e);
}

/* ---------------------------------------------------------------- lines */

static const char *layout_name(int ta, int tb) {
  static const char *names[4] = {"NN", "NT", "TN", "TT"};
  return names[(ta ? 2 : 0) + (tb ? 1 : 0)];
}

int coda_tune_format_line(const coda_tune_entry *e, char *buf, size_t n) {
  int len = snprintf(buf, n, "%s %s %lld %lld %lld %s %s %s %d %d %d %.2f", e->device, e->lib,
                     (long long)e->key.m, (long long)e->key.n, (long long)e->key.k,
                     layout_name(e->key.trans_a, e->key.trans_b), coda_dtype_name(e->key.ab),
                     coda_dtype_name(e->key.d), e->key.accumulate, e->config, e->splits, e->us);
  return len >= 0 && (size_t)len < n;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int parse_dtype(const char *s, coda_dtype *out) {
  static const coda_dtype all[] = {CODA_BF16, CODA_F16, CODA_F32, CODA_F64, CODA_I32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(s, coda_dtype_name(all[i])) == 0) {
      *out = all[i];
      return 1;
    }
  return 0;
}

int coda_tune_parse_line(const char *line, coda_tune_entry *out) {
  char buf[TUNE_LINE_MAX];
  const size_t len = strlen(line);
  if (len >= sizeof buf) return -1;
  memcpy(buf, line, len + 1);
  char *tok[13];
  int nt = 0;
  for (char *p = buf; *p;) {
    while (*p && isspace((unsigned char)*p)) *p++ = '\0';
    if (!*p) break;
    if (nt == 0 && *p == '#') return 0;
    if (nt == 13) return -1;
    tok[nt++] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
  }
  if (nt == 0) return 0;
  if (nt != 12) return -1;
  coda_tune_entry e;
  memset(&e, 0, sizeof e);
  if (strlen(tok[0]) >= sizeof e.device || strlen(tok[1]) >= sizeof e.lib) return -1;
  strcpy(e.device, tok[0]);
  strcpy(e.lib, tok[1]);
  const int64_t dim_max = ((int64_t)1 << 31) - 1;
  int64_t v[3], acc, cfg, spl;
  for (int i = 0; i < 3; i++)
    if (!parse_i64(tok[2 + i], 1, dim_max, &v[i])) return -1;
  e.key.m = v[0];
  e.key.n = v[1];
  e.key.k = v[2];
  const char *lay = tok[5];
  if (strlen(lay) != 2 || (lay[0] != 'N' && lay[0] != 'T') || (lay[1] != 'N' && lay[1] != 'T'))
    return -1;
  e.key.trans_a = lay[0] == 'T';
  e.key.trans_b = lay[1] == 'T';
  if (!parse_dtype(tok[6], &e.key.ab) || !parse_dtype(tok[7], &e.key.d)) return -1;
  if (!parse_i64(tok[8], 0, 1, &acc) || !parse_i64(tok[9], 0, 63, &cfg) ||
      !parse_i64(tok[10], 1, 4096, &spl))
    return -1;
  e.key.accumulate = (int)acc;
  e.config = (int)cfg;
  e.splits = (int)spl;
  char *end;
  e.us = strtod(tok[11], &end);
  if (end == tok[11] || *end || !isfinite(e.us) || e.us < 0) return -1;
  *out = e;
  return 1;
}

/* Reads every line of the file into c (memory entries win when keep_memory
 * is set). Returns the number of corrupt lines, or -1 if the file could not
 * be opened. */
static int read_file(coda_tune_cache *c, int keep_memory) {
  FILE *f = fopen(c->path, "r");
  if (!f) return -1;
  char line[TUNE_LINE_MAX];
  int bad = 0;
  while (fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') { /* overlong: skip the rest */
      int ch;
      while ((ch = fgetc(f)) != EOF && ch != '\n') {
      }
      bad++;
      continue;
    }
    coda_tune_entry e;
    int r = coda_tune_parse_line(line, &e);
    if (r < 0) bad++;
    if (r <= 0) continue;
    if (keep_memory && find_tagged(c, e.device, e.lib, &e.key)) continue;
    if (put_entry(c, &e) != CODA_OK) break;
  }
  fclose(f);
  return bad;
}

int coda_tune_cache_load(coda_tune_cache *c) {
  if (c->loaded || !c->path[0]) return 0;
  c->loaded = 1;
  int bad = read_file(c, 1);
  return bad < 0 ? 0 : bad;
}

/* mkdir -p of the directory part of path. */
static int make_dirs(const char *path) {
  char dir[CODA_TUNE_PATH_LEN];
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return 1;
  size_t len = (size_t)(slash - path);
  if (len >= sizeof dir) return 0;
  memcpy(dir, path, len);
  dir[len] = '\0';
  for (char *p = dir + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      const char saved = *p;
      *p = '\0';
      if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
      *p = saved;
      if (!saved) break;
    }
  }
  return 1;
}

coda_status coda_tune_cache_save(coda_context ctx, coda_tune_cache *c) {
  if (!c->path[0]) return CODA_OK;
  (void)read_file(c, 1); /* entries another process wrote meanwhile */
  c->loaded = 1;
  if (!make_dirs(c->path))
    return coda_fail(ctx, CODA_ERR_IO, "GEMM tuning cache: cannot create the directory of %s: %s",
                     c->path, strerror(errno));
  char tmp[CODA_TUNE_PATH_LEN + 16];
  snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", c->path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return coda_fail(ctx, CODA_ERR_IO, "GEMM tuning cache: cannot create a temporary file for %s: %s",
                     c->path, strerror(errno));
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(tmp);
    return coda_fail(ctx, CODA_ERR_IO, "GEMM tuning cache: cannot open %s", tmp);
  }
  int ok = fprintf(f,
                   "# coda GEMM autotuner choices: device lib M N K layout ab d accumulate "
                   "config splits us\n") > 0;
  char line[TUNE_LINE_MAX];
  for (int i = 0; ok && i < c->n; i++) {
    ok = coda_tune_format_line(&c->e[i], line, sizeof line) && fprintf(f, "%s\n", line) > 0;
  }
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (fclose(f) != 0) ok = 0;
  /* rename() replaces the file in one step: readers see the old or the new one. */
  if (!ok || rename(tmp, c->path) != 0) {
    const int err = errno;
    unlink(tmp);
    return coda_fail(ctx, CODA_ERR_IO, "GEMM tuning cache: cannot write %s: %s", c->path,
                     strerror(err));
  }
  return CODA_OK;
}
