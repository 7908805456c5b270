/* Small helpers shared by the subcommands of the coda tool. */
#define _POSIX_C_SOURCE 200809L
#include "tool_util.h"
#include "progress.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>
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

/* mkdir -p */
static int tool_make_dirs(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    *q = '/';
  }
  return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* ---- --data PATH as a corpus (text, JSONL, llm.c shards) ----
 * A corpus is tokenized into OUT/data/train.tok and val.tok with a stamp
 * OUT/data/source.txt naming what they were made from: a later run with
 * the same source reuses them, another source makes them again, and
 * shards in OUT/data without a stamp (the user's) are never written over. */

/* The preparation's bar: the bytes read against the source's size. */
typedef struct prep_bar {
  coda_tool_bar bar;
  double total;
} prep_bar;

void coda_tool_prep_progress(uint64_t bytes, uint64_t tokens, void *user) {
  prep_bar *pb = user;
  if (pb && pb->bar.on) { /* a terminal: the bar on stderr, no line */
    char detail[96];
    snprintf(detail, sizeof detail, "%.1f MiB, %llu tokens", (double)bytes / (1024.0 * 1024.0),
             (unsigned long long)tokens);
    coda_tool_bar_update(&pb->bar, (double)bytes, pb->total, detail);
    return;
  }
  printf("preparing: %.1f MiB read, %llu tokens\n", (double)bytes / (1024.0 * 1024.0),
         (unsigned long long)tokens);
  fflush(stdout);
}

/* The sizes and newest change time of a file or of a directory's entries. */
static void source_state(const char *path, long long *size, long long *mtime) {
  struct stat st;
  *size = 0;
  *mtime = 0;
  if (stat(path, &st) != 0) return;
  *size = (long long)st.st_size;
  *mtime = (long long)st.st_mtime;
  if (!S_ISDIR(st.st_mode)) return;
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  char p[4096];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    if (stat(p, &st) == 0) {
      *size += (long long)st.st_size;
      if ((long long)st.st_mtime > *mtime) *mtime = (long long)st.st_mtime;
    }
  }
  closedir(d);
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Prepares (or reuses) OUT/data from the corpus o.path; *vocab = the
 * shards' vocabulary. 0 on success; else prints why and returns 1. */
int coda_tool_prepare_corpus(coda_context ctx, const char *cmd, const coda_data_options *d,
                             const char *out_dir, char *data_dir, size_t cap, uint32_t *vocab) {
  snprintf(data_dir, cap, "%s/data", out_dir);
  char stamp_path[4200], tr[4200], va[4200];
  snprintf(stamp_path, sizeof stamp_path, "%s/source.txt", data_dir);
  snprintf(tr, sizeof tr, "%s/train.tok", data_dir);
  snprintf(va, sizeof va, "%s/val.tok", data_dir);
  long long size, mtime;
  source_state(d->path, &size, &mtime);
  char want[8192];
  int n = snprintf(want, sizeof want,
                   "coda prepared data 1\npath %s\nformat %d\ntext-field %s\ntokenizer %s\n"
                   "size %lld\nmtime %lld\n", d->path, (int)d->format,
                   d->text_field ? d->text_field : "text", d->tokenizer ? d->tokenizer : "(bytes)",
                   size, mtime);
  const int have_shards = is_file(tr) || is_file(va);
  char have[8192 + 64] = "";
  /* the stamp is read only when it is a regular file: O_NONBLOCK so that a
   * FIFO in its place does not block the open; anything else is refused */
  FILE *f = NULL;
  size_t got = 0;
  int sfd = open(stamp_path, O_RDONLY | O_NONBLOCK);
  if (sfd >= 0) {
    struct stat sst;
    if (fstat(sfd, &sst) != 0 || !S_ISREG(sst.st_mode)) {
      close(sfd);
      fprintf(stderr, "coda %s: %s is not a regular file (a directory, FIFO or device), so it "
              "is not the stamp of prepared shards; remove it or use another --out\n", cmd, stamp_path);
      return 1;
    }
    int fl = fcntl(sfd, F_GETFL);
    if (fl >= 0) fcntl(sfd, F_SETFL, fl & ~O_NONBLOCK);
    f = fdopen(sfd, "r");
    if (!f) close(sfd);
  }
  if (f) {
    got = fread(have, 1, sizeof have - 1, f);
    have[got] = '\0';
    fclose(f);
  }
  unsigned vv = 0;
  if (have_shards && f && !strncmp(have, want, (size_t)n) && is_file(tr) && is_file(va) &&
      sscanf(have + n, "vocab %u", &vv) == 1) {
    printf("token shards in %s were prepared from %s: reused\n", data_dir, d->path);
    *vocab = vv;
    return 0;
  }
  if (have_shards && !f) {
    fprintf(stderr, "coda %s: %s holds token shards that coda did not prepare from a --data "
            "corpus; they are not written over (use another --out, or --data %s to train on "
            "them)\n", cmd, data_dir, data_dir);
    return 1;
  }
  if (tool_make_dirs(data_dir)) {
    fprintf(stderr, "coda %s: cannot create %s: %s\n", cmd, data_dir, strerror(errno));
    return 1;
  }
  remove(stamp_path); /* a run cut short leaves no stamp for shards it did not finish */
  printf("preparing token shards in %s from %s (%s)\n", data_dir, d->path,
         d->tokenizer ? d->tokenizer : "byte tokens");
  fflush(stdout);
  uint64_t ntr = 0, nva = 0;
  /* the tool's own progress callback gets a bar sized by the source */
  coda_data_options dd = *d;
  prep_bar pb;
  coda_tool_bar_start(&pb.bar, "preparing");
  pb.total = (double)size;
  if (dd.progress == coda_tool_prep_progress && !dd.user) dd.user = &pb;
  coda_status s = coda_prepare_data(ctx, &dd, data_dir, &ntr, &nva, vocab);
  coda_tool_bar_end(&pb.bar);
  coda_tool_warnings(ctx, cmd);
  if (s) {
    fprintf(stderr, "coda %s: %s\n", cmd, coda_last_error(ctx));
    return 1;
  }
  printf("wrote %s (%llu tokens) and %s (%llu tokens), vocabulary %u\n", tr,
         (unsigned long long)ntr, va, (unsigned long long)nva, *vocab);
  f = fopen(stamp_path, "w");
  if (!f || fprintf(f, "%svocab %u\n", want, *vocab) < 0 || fclose(f) != 0) {
    fprintf(stderr, "coda %s: cannot write %s\n", cmd, stamp_path);
    return 1;
  }
  return 0;
}


coda_status coda_tool_context(const coda_context_options *o, coda_context *out, const char *cmd,
                              const char *what) {
  coda_status s = coda_context_create(o, out);
  if (s == CODA_OK) return s;
  char why[512];
  if (coda_context_options_check(o, why, sizeof why) == CODA_OK || !why[0])
    snprintf(why, sizeof why, "%s", coda_status_string(s));
  fprintf(stderr, "coda %s: cannot create a%s %s context: %s\n", cmd,
          strchr("aeiouAEIOU", what[0]) ? "n" : "", what, why);
  return s;
}

void coda_tool_warnings(coda_context ctx, const char *cmd) {
  const char *w = coda_warnings(ctx);
  while (*w) {
    const char *e = strchr(w, '\n');
    const int n = e ? (int)(e - w) : (int)strlen(w);
    fprintf(stderr, "coda %s: warning: %.*s\n", cmd, n, w);
    w += n + (e != NULL);
  }
  coda_warnings_clear(ctx);
}

/* ---- numeric flags ---- */

const coda_tool_num *coda_tool_num_find(const coda_tool_num *table, const char *flag) {
  for (const coda_tool_num *t = table; t->flag; t++)
    if (!strcmp(t->flag, flag)) return t;
  return NULL;
}

static void num_text(const coda_tool_num *t, double x, char *b, size_t cap) {
  if (isinf(x)) snprintf(b, cap, "%sinf", x < 0 ? "-" : "");
  else if (t->integer || (x == floor(x) && fabs(x) < 1e15)) snprintf(b, cap, "%.0f", x);
  else snprintf(b, cap, "%g", x);
}

void coda_tool_num_range(const coda_tool_num *t, char *buf, size_t cap) {
  char lo[48], hi[48];
  num_text(t, t->lo, lo, sizeof lo);
  num_text(t, t->hi, hi, sizeof hi);
  snprintf(buf, cap, "%s%s, %s%s", t->lo_open || isinf(t->lo) ? "(" : "[", lo, hi,
           t->hi_open || isinf(t->hi) ? ")" : "]");
}

static int num_refuse(const char *cmd, const coda_tool_num *t, const char *v) {
  char r[128];
  coda_tool_num_range(t, r, sizeof r);
  if (!v || !*v)
    fprintf(stderr, "coda %s: %s: needs %s in %s (%s)\n", cmd, t->flag,
            t->integer ? "an integer" : "a number", r, t->meaning);
  else
    fprintf(stderr, "coda %s: %s: must be %sin %s, got '%s' (%s)\n", cmd, t->flag,
            t->integer ? "an integer " : "", r, v, t->meaning);
  return 2;
}

/* A value is the number alone: strtod and strtoll skip leading blanks,
 * which a quoted ' 64' would pass through. */
static int num_blank(const char *v) { return isspace((unsigned char)v[0]) != 0; }

int coda_tool_num_parse(const char *cmd, const coda_tool_num *t, const char *v, double *out) {
  if (!v || !*v || num_blank(v)) return num_refuse(cmd, t, v);
  char *end;
  errno = 0;
  double x;
  if (t->integer) {
    long long k = strtoll(v, &end, 10);
    x = (double)k;
  } else {
    x = strtod(v, &end);
  }
  const int ok = !errno && end != v && !*end && x == x &&
                 (t->lo_open ? x > t->lo : x >= t->lo) && (t->hi_open ? x < t->hi : x <= t->hi);
  if (!ok) return num_refuse(cmd, t, v);
  *out = x;
  return 0;
}

int coda_tool_num_parse_ll(const char *cmd, const coda_tool_num *t, const char *v, long long *out) {
  if (!v || !*v || num_blank(v)) return num_refuse(cmd, t, v);
  char *end;
  errno = 0;
  long long k = strtoll(v, &end, 10);
  const double x = (double)k;
  const int ok = t->integer && !errno && end != v && !*end &&
                 (t->lo_open ? x > t->lo : x >= t->lo) && (t->hi_open ? x < t->hi : x <= t->hi);
  if (!ok) return num_refuse(cmd, t, v);
  *out = k;
  return 0;
}

void coda_tool_num_help(FILE *f, const coda_tool_num *table) {
  fprintf(f, "Numeric options, their allowed values and meaning (a value outside is refused):\n");
  for (const coda_tool_num *t = table; t->flag; t++) {
    char r[128];
    coda_tool_num_range(t, r, sizeof r);
    fprintf(f, "  %-16s %-7s %-18s %s\n", t->flag, t->integer ? "integer" : "real", r, t->meaning);
  }
}

int coda_tool_params_parse(const char *cmd, const char *v, coda_tool_params *P) {
  if (!v || !*v) {
    fprintf(stderr, "coda %s: --param needs NAME=VALUE[,NAME=VALUE...]\n", cmd);
    return -1;
  }
  const char *s = v;
  while (*s) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    const char *eq = memchr(s, '=', len);
    if (!eq || eq == s) {
      fprintf(stderr, "coda %s: --param %.*s: expected NAME=VALUE\n", cmd, (int)len, s);
      return -1;
    }
    size_t nl = (size_t)(eq - s);
    if (nl >= sizeof P->name[0]) {
      fprintf(stderr, "coda %s: --param %.*s: the name is longer than %d characters\n", cmd, (int)nl, s,
              (int)sizeof P->name[0] - 1);
      return -1;
    }
    if (P->n >= CODA_TOOL_MAX_PARAMS) {
      fprintf(stderr, "coda %s: --param: more than %d values\n", cmd, CODA_TOOL_MAX_PARAMS);
      return -1;
    }
    char num[64];
    size_t vl = len - nl - 1;
    char *stop = NULL;
    double x = NAN;
    if (vl > 0 && vl < sizeof num) {
      memcpy(num, eq + 1, vl);
      num[vl] = '\0';
      x = strtod(num, &stop);
    }
    if (!stop || *stop || !isfinite(x)) {
      fprintf(stderr, "coda %s: --param %.*s: the value must be a finite number\n", cmd, (int)len, s);
      return -1;
    }
    memcpy(P->name[P->n], s, nl);
    P->name[P->n][nl] = '\0';
    P->value[P->n++] = x;
    s += len;
    if (*s == ',') s++;
  }
  return 0;
}

int coda_tool_program_has_param(coda_program p, const char *name) {
  coda_param_info in;
  for (int i = 0; i < coda_program_num_params(p); i++)
    if (coda_program_param(p, i, &in) == CODA_OK && !strcmp(in.name, name)) return 1;
  return 0;
}

coda_status coda_tool_params_bind(coda_context ctx, coda_program *p, const coda_tool_params *P,
                                  int only_declared) {
  coda_param_value v[CODA_TOOL_MAX_PARAMS];
  int n = 0;
  for (int i = 0; i < P->n; i++)
    if (!only_declared || coda_tool_program_has_param(*p, P->name[i]))
      v[n++] = (coda_param_value){P->name[i], P->value[i]};
  if (!n) return CODA_OK;
  coda_bind_options o = coda_bind_default_options();
  o.values = v;
  o.nvalues = n;
  coda_program q = NULL;
  coda_status s = coda_program_bind(ctx, *p, &o, &q);
  if (s != CODA_OK) return s;
  coda_program_destroy(*p);
  *p = q;
  return CODA_OK;
}

int coda_tool_family_parse(const char *cmd, const char *v, coda_model_family *out) {
  int f = 0;
  while (coda_model_family_name((coda_model_family)f) &&
         strcmp(coda_model_family_name((coda_model_family)f), v)) f++;
  if (coda_model_family_name((coda_model_family)f)) {
    *out = (coda_model_family)f;
    return 0;
  }
  fprintf(stderr, "%s: --family '%s' is not a model family (", cmd, v);
  for (int k = 0; coda_model_family_name((coda_model_family)k); k++)
    fprintf(stderr, "%s%s", k ? ", " : "", coda_model_family_name((coda_model_family)k));
  fprintf(stderr, ")\n");
  return 2;
}
