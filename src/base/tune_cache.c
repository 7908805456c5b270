/* The autotuners' tables and their text files (formats in tune_cache.h):
 * the plain GEMM's choices and the fused GEMM steps'. The tags, the growth
 * of the entry array, the common line fields, reading once, merging and
 * atomic rewriting, and the default location are shared; each table has its
 * own key and line format. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen, fsync, mkdir */

#include "base/tune_cache.h"

#include "base/internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdint.h>
#include <fcntl.h>
#include <unistd.h>

#define TUNE_FILE "gemm-tune.txt"
#define FUSED_FILE "fused-tune.txt"
#define TUNE_LINE_MAX 512

static void copy_tag(char *dst, const char *src) {
  size_t i = 0;
  for (; src && src[i] && i + 1 < CODA_TUNE_TAG_LEN; i++)
    dst[i] = isspace((unsigned char)src[i]) ? '_' : src[i];
  dst[i] = '\0';
  if (i == 0) strcpy(dst, "?");
}

/* The running tags and the file path (both tables' fields of those sizes). */
static void init_tags(char *device_out, char *lib_out, char *path_out, const char *device,
                      const char *lib, const char *path) {
  copy_tag(device_out, device);
  copy_tag(lib_out, lib);
  if (path && strlen(path) < CODA_TUNE_PATH_LEN) strcpy(path_out, path);
}

void coda_tune_cache_init(coda_tune_cache *c, const char *device, const char *lib,
                          const char *path) {
  memset(c, 0, sizeof *c);
  init_tags(c->device, c->lib, c->path, device, lib, path);
}

void coda_tune_cache_free(coda_tune_cache *c) {
  free(c->e);
  c->e = NULL;
  c->n = c->cap = 0;
}

int coda_tune_cache_default_path(const coda_knobs *k, char *buf, size_t n) {
  return coda_knobs_cache_path(k, TUNE_FILE, buf, n);
}

/* An entry's tags (device, lib) are these. */
static int same_tags(const char *device, const char *lib, const char *want_device,
                     const char *want_lib) {
  return strcmp(device, want_device) == 0 && strcmp(lib, want_lib) == 0;
}

/* The entry array of a table with room for one more (16, then doubling):
 * buf itself while there is room, NULL when out of memory (buf kept). */
static void *room_for_one(void *buf, int n, int *cap, size_t size) {
  if (n < *cap) return buf;
  const int ncap = *cap ? 2 * *cap : 16;
  void *nb = realloc(buf, (size_t)ncap * size);
  if (nb) *cap = ncap;
  return nb;
}

static int key_eq(const coda_tune_key *a, const coda_tune_key *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->trans_a == b->trans_a &&
         a->trans_b == b->trans_b && a->ab == b->ab && a->d == b->d &&
         a->accumulate == b->accumulate;
}

static coda_tune_entry *find_tagged(const coda_tune_cache *c, const char *device,
                                    const char *lib, const coda_tune_key *key) {
  for (int i = 0; i < c->n; i++)
    if (key_eq(&c->e[i].key, key) && same_tags(c->e[i].device, c->e[i].lib, device, lib))
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
  coda_tune_entry *ne = room_for_one(c->e, c->n, &c->cap, sizeof *ne);
  if (!ne) return CODA_ERR_OUT_OF_MEMORY;
  c->e = ne;
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

/* Splits line (copied into buf, TUNE_LINE_MAX bytes) into whitespace-
 * separated fields: their count if it is want, 0 for a comment or blank
 * line, -1 otherwise. */
static int split_fields(const char *line, char *buf, char **tok, int want) {
  const size_t len = strlen(line);
  if (len >= TUNE_LINE_MAX) return -1;
  memcpy(buf, line, len + 1);
  int nt = 0;
  for (char *p = buf; *p;) {
    while (*p && isspace((unsigned char)*p)) *p++ = '\0';
    if (!*p) break;
    if (nt == 0 && *p == '#') return 0;
    if (nt == want) return -1;
    tok[nt++] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
  }
  return nt == 0 ? 0 : nt == want ? nt : -1;
}

/* The two tags (tok[0], tok[1]) into device and lib: 0 if one is too long. */
static int parse_tags(char *const *tok, char *device, char *lib) {
  if (strlen(tok[0]) >= CODA_TUNE_TAG_LEN || strlen(tok[1]) >= CODA_TUNE_TAG_LEN) return 0;
  strcpy(device, tok[0]);
  strcpy(lib, tok[1]);
  return 1;
}

/* M, N, K from three fields, each 1 .. 2^31 - 1. */
static int parse_mnk(char *const *tok, int64_t *m, int64_t *n, int64_t *k) {
  const int64_t dim_max = ((int64_t)1 << 31) - 1;
  return parse_i64(tok[0], 1, dim_max, m) && parse_i64(tok[1], 1, dim_max, n) &&
         parse_i64(tok[2], 1, dim_max, k);
}

static int parse_layout(const char *lay, int *ta, int *tb) {
  if (strlen(lay) != 2 || (lay[0] != 'N' && lay[0] != 'T') || (lay[1] != 'N' && lay[1] != 'T'))
    return 0;
  *ta = lay[0] == 'T';
  *tb = lay[1] == 'T';
  return 1;
}

static int parse_us(const char *s, double *out) {
  char *end;
  const double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v) || v < 0) return 0;
  *out = v;
  return 1;
}

int coda_tune_parse_line(const char *line, coda_tune_entry *out) {
  char buf[TUNE_LINE_MAX];
  char *tok[12];
  const int nt = split_fields(line, buf, tok, 12);
  if (nt <= 0) return nt;
  coda_tune_entry e;
  memset(&e, 0, sizeof e);
  if (!parse_tags(tok, e.device, e.lib) || !parse_mnk(tok + 2, &e.key.m, &e.key.n, &e.key.k))
    return -1;
  int64_t acc, cfg, spl;
  if (!parse_layout(tok[5], &e.key.trans_a, &e.key.trans_b)) return -1;
  if (!parse_dtype(tok[6], &e.key.ab) || !parse_dtype(tok[7], &e.key.d)) return -1;
  if (!parse_i64(tok[8], 0, 1, &acc) || !parse_i64(tok[9], 0, 63, &cfg) ||
      !parse_i64(tok[10], 1, 4096, &spl))
    return -1;
  e.key.accumulate = (int)acc;
  e.config = (int)cfg;
  e.splits = (int)spl;
  if (!parse_us(tok[11], &e.us)) return -1;
  *out = e;
  return 1;
}

/* Reads every line of the file at path, handing each to take(c, line,
 * keep_memory) (1 = taken, 0 = comment or blank, -1 = corrupt, -2 = out of
 * memory: stop). Returns the number of corrupt lines (overlong ones
 * included), or -1 if the file could not be opened. */
typedef int (*take_line_fn)(void *c, const char *line, int keep_memory);
/* The largest cache file read: beyond it the file is ignored, as is one
 * that is not a regular file (a FIFO must not block the open). */
#define TUNE_FILE_MAX (64u << 20)
static int read_lines(const char *path, take_line_fn take, void *c, int keep_memory) {
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > TUNE_FILE_MAX) {
    close(fd);
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return -1;
  }
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
    const int r = take(c, line, keep_memory);
    if (r == -2) break;
    if (r < 0) bad++;
  }
  fclose(f);
  return bad;
}

/* One GEMM line into the table (memory entries win when keep_memory). */
static int take_gemm_line(void *cv, const char *line, int keep_memory) {
  coda_tune_cache *c = cv;
  coda_tune_entry e;
  const int r = coda_tune_parse_line(line, &e);
  if (r <= 0) return r;
  if (keep_memory && find_tagged(c, e.device, e.lib, &e.key)) return 1;
  return put_entry(c, &e) == CODA_OK ? 1 : -2;
}

/* A table's first load: reads path (if any) into c once; the number of
 * corrupt lines. */
static int load_once(const char *path, int *loaded, take_line_fn take, void *c) {
  if (*loaded || !path[0]) return 0;
  *loaded = 1;
  const int bad = read_lines(path, take, c, 1);
  return bad < 0 ? 0 : bad;
}

int coda_tune_cache_load(coda_tune_cache *c) {
  return load_once(c->path, &c->loaded, take_gemm_line, c);
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

/* Writes header and the lines fmt(c, i) for i < n to path atomically: a
 * temporary file in the same directory (created if needed), flushed to
 * disk, then rename()d over the old file. `what` names the file in
 * messages. */
typedef int (*format_fn)(const void *c, int i, char *buf, size_t n);
static coda_status write_atomic(coda_context ctx, const char *path, const char *what,
                                const char *header, int n, format_fn fmt, const void *c) {
  if (!make_dirs(path))
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create the directory of %s: %s", what, path,
                     strerror(errno));
  char tmp[CODA_TUNE_PATH_LEN + 16];
  snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create a temporary file for %s: %s", what,
                     path, strerror(errno));
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(tmp);
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open %s", what, tmp);
  }
  int ok = fprintf(f, "%s\n", header) > 0;
  char line[TUNE_LINE_MAX];
  for (int i = 0; ok && i < n; i++) ok = fmt(c, i, line, sizeof line) && fprintf(f, "%s\n", line) > 0;
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (fclose(f) != 0) ok = 0;
  /* rename() replaces the file in one step: readers see the old or the new one. */
  if (!ok || rename(tmp, path) != 0) {
    const int err = errno;
    unlink(tmp);
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot write %s: %s", what, path, strerror(err));
  }
  return CODA_OK;
}

/* A table's save: merges in the entries another process wrote since the
 * load (memory wins), then rewrites the file with the *n entries. */
static coda_status merge_and_write(coda_context ctx, const char *path, int *loaded,
                                   take_line_fn take, format_fn fmt, void *c, const int *n,
                                   const char *what, const char *header) {
  if (!path[0]) return CODA_OK;
  (void)read_lines(path, take, c, 1);
  *loaded = 1;
  return write_atomic(ctx, path, what, header, *n, fmt, c);
}

static int format_gemm(const void *c, int i, char *buf, size_t n) {
  return coda_tune_format_line(&((const coda_tune_cache *)c)->e[i], buf, n);
}

coda_status coda_tune_cache_save(coda_context ctx, coda_tune_cache *c) {
  return merge_and_write(ctx, c->path, &c->loaded, take_gemm_line, format_gemm, c, &c->n,
                         "GEMM tuning cache",
                         "# coda GEMM autotuner choices: device lib M N K layout ab d accumulate "
                         "config splits us");
}

/* ------------------------------------------------ fused-step choices */

void coda_fused_cache_init(coda_fused_cache *c, const char *device, const char *lib,
                           const char *path) {
  memset(c, 0, sizeof *c);
  init_tags(c->device, c->lib, c->path, device, lib, path);
  c->disk_ok = 1;
}

void coda_fused_cache_free(coda_fused_cache *c) {
  free(c->e);
  c->e = NULL;
  c->n = c->cap = 0;
}

int coda_fused_cache_default_path(const coda_knobs *k, char *buf, size_t n) {
  return coda_knobs_cache_path(k, FUSED_FILE, buf, n);
}

static int fused_key_eq(const coda_fused_key *a, const coda_fused_key *b) {
  return a->program == b->program && a->m == b->m && a->n == b->n && a->k == b->k &&
         a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->ab == b->ab &&
         a->tile_m == b->tile_m && a->tile_n == b->tile_n;
}

static coda_fused_entry *fused_find_tagged(const coda_fused_cache *c, const char *device,
                                           const char *lib, const coda_fused_key *key) {
  for (int i = 0; i < c->n; i++)
    if (fused_key_eq(&c->e[i].key, key) && same_tags(c->e[i].device, c->e[i].lib, device, lib))
      return &c->e[i];
  return NULL;
}

const coda_fused_entry *coda_fused_cache_find(const coda_fused_cache *c, const coda_fused_key *key) {
  return fused_find_tagged(c, c->device, c->lib, key);
}

static coda_status fused_put_entry(coda_fused_cache *c, const coda_fused_entry *e) {
  coda_fused_entry *old = fused_find_tagged(c, e->device, e->lib, &e->key);
  if (old) {
    *old = *e;
    return CODA_OK;
  }
  coda_fused_entry *ne = room_for_one(c->e, c->n, &c->cap, sizeof *ne);
  if (!ne) return CODA_ERR_OUT_OF_MEMORY;
  c->e = ne;
  c->e[c->n++] = *e;
  return CODA_OK;
}

coda_status coda_fused_cache_put(coda_fused_cache *c, const coda_fused_key *key, int choice,
                                 const double us[3]) {
  if (choice < CODA_FUSED_CHOICE_FUSED || choice > CODA_FUSED_CHOICE_UNFUSED || !us)
    return CODA_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < 3; i++)
    if (!(us[i] >= 0) || !isfinite(us[i])) return CODA_ERR_INVALID_ARGUMENT;
  coda_fused_entry e;
  memset(&e, 0, sizeof e);
  strcpy(e.device, c->device);
  strcpy(e.lib, c->lib);
  e.key = *key;
  e.choice = choice;
  for (int i = 0; i < 3; i++) e.us[i] = us[i];
  return fused_put_entry(c, &e);
}

static const char *const kChoice[4] = {"fused", "pingpong", "cooperative", "unfused"};

const char *coda_fused_choice_name(int choice) {
  return choice >= 0 && choice < 4 ? kChoice[choice] : "?";
}

int coda_fused_format_line(const coda_fused_entry *e, char *buf, size_t n) {
  if (e->choice < 0 || e->choice > 3) return 0;
  int len = snprintf(buf, n, "%s %s %016llx %lld %lld %lld %s %s %dx%d %s %.2f %.2f %.2f",
                     e->device, e->lib, (unsigned long long)e->key.program, (long long)e->key.m,
                     (long long)e->key.n, (long long)e->key.k,
                     layout_name(e->key.trans_a, e->key.trans_b), coda_dtype_name(e->key.ab),
                     e->key.tile_m, e->key.tile_n, kChoice[e->choice], e->us[0], e->us[1],
                     e->us[2]);
  return len >= 0 && (size_t)len < n;
}

/* "<m>x<n>", each 1..4096. */
static int parse_tile(const char *s, int *tm, int *tn) {
  const char *x = strchr(s, 'x');
  if (!x || x == s || (size_t)(x - s) > 4) return 0;
  char a[8];
  memcpy(a, s, (size_t)(x - s));
  a[x - s] = '\0';
  int64_t m, n;
  if (!parse_i64(a, 1, 4096, &m) || !parse_i64(x + 1, 1, 4096, &n)) return 0;
  *tm = (int)m;
  *tn = (int)n;
  return 1;
}

int coda_fused_parse_line(const char *line, coda_fused_entry *out) {
  char buf[TUNE_LINE_MAX];
  char *tok[13];
  const int nt = split_fields(line, buf, tok, 13);
  if (nt <= 0) return nt;
  coda_fused_entry e;
  memset(&e, 0, sizeof e);
  if (!parse_tags(tok, e.device, e.lib)) return -1;
  const char *h = tok[2];
  if (strlen(h) != 16) return -1;
  for (int i = 0; i < 16; i++) {
    const char ch = h[i];
    const int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return -1;
    e.key.program = e.key.program << 4 | (uint64_t)d;
  }
  if (!parse_mnk(tok + 3, &e.key.m, &e.key.n, &e.key.k)) return -1;
  if (!parse_layout(tok[6], &e.key.trans_a, &e.key.trans_b)) return -1;
  if (!parse_dtype(tok[7], &e.key.ab)) return -1;
  if (!parse_tile(tok[8], &e.key.tile_m, &e.key.tile_n)) return -1;
  e.choice = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(tok[9], kChoice[i]) == 0) e.choice = i;
  if (e.choice < 0) return -1;
  for (int i = 0; i < 3; i++)
    if (!parse_us(tok[10 + i], &e.us[i])) return -1;
  *out = e;
  return 1;
}

static int take_fused_line(void *cv, const char *line, int keep_memory) {
  coda_fused_cache *c = cv;
  coda_fused_entry e;
  const int r = coda_fused_parse_line(line, &e);
  if (r <= 0) return r;
  if (keep_memory && fused_find_tagged(c, e.device, e.lib, &e.key)) return 1;
  return fused_put_entry(c, &e) == CODA_OK ? 1 : -2;
}

int coda_fused_cache_load(coda_fused_cache *c) {
  return load_once(c->path, &c->loaded, take_fused_line, c);
}

static int format_fused(const void *c, int i, char *buf, size_t n) {
  return coda_fused_format_line(&((const coda_fused_cache *)c)->e[i], buf, n);
}

coda_status coda_fused_cache_save(coda_context ctx, coda_fused_cache *c) {
  return merge_and_write(ctx, c->path, &c->loaded, take_fused_line, format_fused, c, &c->n,
                         "fusion tuning cache",
                         "# coda fused GEMM step choices: device lib program M N K layout ab tile "
                         "choice us_fused us_cooperative us_unfused");
}

coda_fused_cache *coda_fused_tune_state(coda_context ctx) {
  return ctx ? ctx->fused_tune : NULL;
}

coda_fused_cache *coda_fused_tune_create(coda_context ctx, const char *device, const char *lib,
                                         const char *path) {
  if (!ctx) return NULL;
  if (ctx->fused_tune) return ctx->fused_tune;
  coda_fused_cache *c = malloc(sizeof *c);
  if (!c) return NULL;
  coda_fused_cache_init(c, device, lib, path);
  (void)coda_fused_cache_load(c); /* corrupt lines are skipped */
  ctx->fused_tune = c;
  return c;
}

void coda_fused_tune_release(coda_context ctx) {
  if (!ctx || !ctx->fused_tune) return;
  coda_fused_cache_free(ctx->fused_tune);
  free(ctx->fused_tune);
  ctx->fused_tune = NULL;
}
