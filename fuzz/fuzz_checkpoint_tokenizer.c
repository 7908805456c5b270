/* libFuzzer harness for the checkpoint's tokenizer record
 * (coda_checkpoint_tokenizer in src/store/checkpoint.c: the metadata
 * entries tokenizer.file, tokenizer.crc32 and tokenizer.bytes, and the
 * file they name beside the checkpoint; what `coda generate`, `coda eval`
 * and `coda train --resume` use to find the tokenizer a model was trained
 * with).
 *
 * An input is two parts split at the first line "--":
 *   - the checkpoint's metadata entries, one "key=value" a line (a line
 *     without '=' is a key with an empty value), written by the project's
 *     safetensors writer with one small tensor. The value "@crc" of
 *     tokenizer.crc32 becomes the CRC-32 of the first entry below (8 hex
 *     digits), "@n" of tokenizer.bytes its size, so that mutations reach
 *     the comparison of a matching record;
 *   - up to 4 entries beside the checkpoint, separated by "|#|", each a
 *     kind byte, a name up to the first '\n' and the contents after it.
 *     The kind's low 2 bits: 0 a regular file, 1 a directory, 2 a
 *     symbolic link to a regular file holding the contents (in a directory
 *     beside the checkpoint's, so that no other name reaches it), 3 a dangling
 *     symbolic link. Names that are not plain names (empty, ".", "..",
 *     holding '/', longer than 100 bytes) are not created.
 *
 * The outcome must be the reference's, computed here from the entries
 * themselves: a file that the safetensors reader refuses (a key given
 * twice, ...) is refused; without tokenizer.file, the regular file
 * tokenizer.json beside the checkpoint (links followed) is the answer, not
 * recorded, or none; with it, the name must be a plain name, the size an
 * unsigned decimal integer (digits only), the CRC-32 exactly 8 hex digits,
 * and the named file a regular file of that size and CRC-32, else the
 * record is refused. Every refusal is CODA_ERR_IO with a message naming
 * the checkpoint and leaves *path NULL; an answer's path is the named
 * file beside the checkpoint; no descriptor stays open. Any violation
 * aborts (leaks: LeakSanitizer).
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=checkpoint_tokenizer) */
#include "fuzz_config_util.h"
#include "coda_train.h"
#include "io/io.h"
#include "train/train.h"

#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>

#define MAX_META 32
#define MAX_BESIDE 4
#define MAX_NAME 100

static coda_context ctx;
/* dir holds the checkpoint and the entries; links point into tdir, beside
 * it, so that no name in dir reaches a link's target but through the link */
static char top[4096], dir[4200], tdir[4200], ckpt[4300];

typedef struct beside {
  char name[MAX_NAME + 1];
  int kind;
  const uint8_t *bytes;
  size_t n;
} beside;

static beside ent[MAX_BESIDE];
static int nent;

static int plain_name(const char *s) {
  if (!*s || strlen(s) > 255 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
  for (const char *p = s; *p; p++)
    if (*p == '/' || *p == '\\') return 0;
  return 1;
}

static void path_of(char *p, size_t cap, const char *name) { snprintf(p, cap, "%s/%s", dir, name); }

/* Removes whatever the entries made (and the checkpoint). */
static void clear(void) {
  char p[4400], q[4500];
  for (int i = 0; i < nent; i++) {
    path_of(p, sizeof p, ent[i].name);
    if (ent[i].kind == 1) {
      snprintf(q, sizeof q, "%s/inner", p);
      unlink(q);
      rmdir(p);
    } else {
      unlink(p);
    }
    snprintf(q, sizeof q, "%s/target%d", tdir, i);
    unlink(q);
  }
  nent = 0;
  unlink(ckpt);
}

static void at_exit(void) {
  clear();
  rmdir(dir);
  rmdir(tdir);
  rmdir(top);
}

static void add_beside(const uint8_t *d, size_t n) {
  if (n == 0 || nent == MAX_BESIDE) return;
  const int kind = d[0] & 3;
  const uint8_t *nl = memchr(d + 1, '\n', n - 1);
  const size_t nlen = nl ? (size_t)(nl - (d + 1)) : n - 1;
  if (nlen > MAX_NAME || memchr(d + 1, 0, nlen)) return;
  beside *e = &ent[nent];
  memcpy(e->name, d + 1, nlen);
  e->name[nlen] = '\0';
  if (!plain_name(e->name) || !strcmp(e->name, "ck.safetensors"))
    return;
  for (int i = 0; i < nent; i++)
    if (!strcmp(ent[i].name, e->name)) return; /* the first of a name only */
  e->kind = kind;
  e->bytes = nl ? nl + 1 : d + n;
  e->n = nl ? n - nlen - 2 : 0;
  char p[4400], t[4400];
  path_of(p, sizeof p, e->name);
  if (kind == 0) {
    put_file(p, e->bytes, e->n);
  } else if (kind == 1) {
    if (mkdir(p, 0700) != 0) fail("mkdir");
    char q[4500];
    snprintf(q, sizeof q, "%s/inner", p);
    put_file(q, e->bytes, e->n);
  } else {
    snprintf(t, sizeof t, "%s/target%d", tdir, nent);
    if (kind == 2) put_file(t, e->bytes, e->n);
    if (symlink(t, p) != 0) fail("symlink");
  }
  nent++;
}

/* The entry a name resolves to beside the checkpoint: its contents when it
 * is (or links to) a regular file; NULL otherwise. */
static const beside *regular(const char *name) {
  for (int i = 0; i < nent; i++)
    if (!strcmp(ent[i].name, name)) return ent[i].kind == 0 || ent[i].kind == 2 ? &ent[i] : NULL;
  return NULL;
}

static const char *meta(char *const *kv, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(kv[2 * i], key)) return kv[2 * i + 1];
  return NULL;
}

/* Digits only, no overflow. */
static int parse_u64(const char *v, uint64_t *x) {
  if (!*v) return 0;
  uint64_t r = 0;
  for (const char *p = v; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    const uint64_t d = (uint64_t)(*p - '0');
    if (r > (UINT64_MAX - d) / 10) return 0;
    r = r * 10 + d;
  }
  *x = r;
  return 1;
}

static int parse_crc(const char *v, uint32_t *x) {
  if (strlen(v) != 8) return 0;
  uint32_t r = 0;
  for (int i = 0; i < 8; i++) {
    const int c = (unsigned char)v[i];
    if (!isxdigit(c)) return 0;
    r = r << 4 | (uint32_t)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
  }
  *x = r;
  return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_name = "fuzz_checkpoint_tokenizer";
  if (coda_context_create(NULL, &ctx) != CODA_OK) fail("no context");
  const char *t = getenv("TMPDIR");
  snprintf(top, sizeof top, "%s/fuzz_ckpt_tok.%ld", t && *t ? t : "/tmp", (long)getpid());
  snprintf(dir, sizeof dir, "%s/ck", top);
  snprintf(tdir, sizeof tdir, "%s/targets", top);
  if (mkdir(top, 0700) != 0 || mkdir(dir, 0700) != 0 || mkdir(tdir, 0700) != 0)
    fail("cannot create the temporary directories");
  snprintf(ckpt, sizeof ckpt, "%s/ck.safetensors", dir);
  atexit(at_exit);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const int fds = open_fds();
  /* the two parts */
  size_t cut = size, rest = size;
  for (size_t i = 0; i + 2 <= size; i++)
    if ((i == 0 || data[i - 1] == '\n') && data[i] == '-' && data[i + 1] == '-' &&
        (i + 2 == size || data[i + 2] == '\n')) {
      cut = i;
      rest = i + 2 < size ? i + 3 : size;
      break;
    }
  /* the entries beside the checkpoint */
  static const uint8_t sep[3] = {'|', '#', '|'};
  for (size_t at = rest; at < size;) {
    size_t end = at;
    while (end < size && !(end + 3 <= size && !memcmp(data + end, sep, 3))) end++;
    add_beside(data + at, end - at);
    at = end + 3;
  }
  const beside *first = nent ? &ent[0] : NULL;
  char crc_text[16], n_text[32];
  snprintf(crc_text, sizeof crc_text, "%08x",
           first ? (unsigned)coda_crc32(0, first->bytes, first->n) : 0u);
  snprintf(n_text, sizeof n_text, "%zu", first ? first->n : (size_t)0);

  /* the metadata entries: a NUL-terminated copy cut at each '\n' and first '=' */
  char *text = malloc(cut + 1);
  if (!text) fail("out of memory");
  memcpy(text, data, cut);
  text[cut] = '\0';
  char *kv[2 * MAX_META];
  int n = 0;
  for (char *line = text; line && line < text + cut && n < MAX_META;) {
    char *next = memchr(line, '\n', (size_t)(text + cut - line));
    if (next) *next++ = '\0';
    char *eq = strchr(line, '=');
    if (eq) *eq = '\0';
    kv[2 * n] = line;
    kv[2 * n + 1] = eq ? eq + 1 : line + strlen(line);
    if (!strcmp(kv[2 * n], "tokenizer.crc32") && !strcmp(kv[2 * n + 1], "@crc")) kv[2 * n + 1] = crc_text;
    if (!strcmp(kv[2 * n], "tokenizer.bytes") && !strcmp(kv[2 * n + 1], "@n")) kv[2 * n + 1] = n_text;
    n++;
    line = next;
  }
  const float x[2] = {1.0f, -2.0f};
  coda_st_entry e;
  memset(&e, 0, sizeof e);
  e.name = "norm.weight";
  e.dtype = "F32";
  e.ndim = 1;
  e.shape[0] = 2;
  e.data = x;
  if (coda_st_save(ctx, ckpt, &e, 1, (const char *const *)kv, n) != CODA_OK)
    fail(coda_last_error(ctx));

  /* the reference */
  coda_st_file f;
  const int loads = coda_st_load_ex(ctx, ckpt, 1, UINT64_MAX, 1, &f) == CODA_OK;
  if (loads) coda_st_free(&f);
  int want_ok = 0, want_recorded = 0;
  const beside *want = NULL;
  const char *want_name = NULL;
  const char *name = meta(kv, n, "tokenizer.file");
  if (!loads) {
    want_ok = 0;
  } else if (!name) {
    want_ok = 1;
    want = regular("tokenizer.json");
    want_name = "tokenizer.json";
  } else {
    uint64_t bytes = 0;
    uint32_t crc = 0;
    const char *b = meta(kv, n, "tokenizer.bytes"), *c = meta(kv, n, "tokenizer.crc32");
    want = plain_name(name) ? regular(name) : NULL;
    want_ok = plain_name(name) && b && parse_u64(b, &bytes) && c && parse_crc(c, &crc) && want &&
              want->n == bytes && coda_crc32(0, want->bytes, want->n) == crc;
    want_recorded = want_ok;
    want_name = name;
  }

  char *path = (char *)"not set";
  int recorded = -1;
  const coda_status s = coda_checkpoint_tokenizer(ctx, ckpt, &path, &recorded);
  if (s == CODA_OK) {
    if (!want_ok) {
      fprintf(stderr, "accepted %s (recorded %d)\n", path ? path : "(none)", recorded);
      fail("a tokenizer record the reference refuses was accepted");
    }
    if (recorded != want_recorded) fail("recorded differs from the reference");
    if (!want != !path) {
      fprintf(stderr, "path %s, the reference %s\n", path ? path : "(none)",
              want ? want->name : "(none)");
      fail("the answer differs from the reference");
    }
    if (path) {
      char p[4400];
      path_of(p, sizeof p, want_name);
      if (strcmp(path, p)) {
        fprintf(stderr, "path %s, the reference %s\n", path, p);
        fail("the answer is not the named file beside the checkpoint");
      }
      struct stat sb;
      if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size != want->n)
        fail("the answer is not the regular file the reference found");
    }
    free(path);
  } else {
    if (s != CODA_ERR_IO) fail("a refusal that is not CODA_ERR_IO");
    check_refused(ctx, s, ckpt);
    if (path != NULL) fail("a refusal left *path set");
    if (recorded != 0) fail("a refusal left *recorded set");
    if (want_ok) {
      fprintf(stderr, "%s\n", coda_last_error(ctx));
      fail("a tokenizer record the reference accepts was refused");
    }
  }
  clear();
  free(text);
  if (open_fds() != fds) fail("a file descriptor stayed open");
  return 0;
}
