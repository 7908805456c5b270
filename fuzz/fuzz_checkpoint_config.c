/* libFuzzer harness for the checkpoint metadata -> model config check
 * (coda_checkpoint_config and coda_checkpoint_config_to_load in
 * src/store/checkpoint.c, what `coda generate`, `coda eval` and
 * `coda train --resume` read first). Each input is a list of metadata
 * entries, one "key=value" a line (a line without '=' is a key with an
 * empty value); the project's safetensors writer (coda_st_save, which adds
 * the crc32 and header_crc32 entries) writes them with one small tensor,
 * so mutations reach the checks behind the header checksum.
 *
 * An accepted file must give a config holding the invariants of
 * fuzz_config_util.h whose sizes are the file's model.* entries (parsed
 * again here); a key given twice (crc32 and header_crc32 included) must be
 * refused; every refusal has a message naming the file; no descriptor
 * stays open. Any violation aborts (leaks: LeakSanitizer).
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=checkpoint_config) */
#include "fuzz_config_util.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <errno.h>

#define MAX_ENTRIES 64

static coda_context ctx;

/* The value of `key` among the entries, or NULL. */
static const char *entry(char *const *kv, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(kv[2 * i], key)) return kv[2 * i + 1];
  return NULL;
}

static long long entry_int(char *const *kv, int n, const char *key) {
  const char *v = entry(kv, n, key);
  if (!v) fail("accepted a checkpoint without a model entry");
  errno = 0;
  char *end;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end) fail("accepted a model entry that is not an integer");
  return x;
}

static void check_entries(char *const *kv, int n, const coda_model_config *c) {
  const char *fmt = entry(kv, n, "format"), *ver = entry(kv, n, "version");
  if (!fmt || strcmp(fmt, "coda-checkpoint") || !ver || strcmp(ver, "1"))
    fail("accepted a file that is not a version-1 coda checkpoint");
  if (entry_int(kv, n, "model.vocab") != c->vocab || entry_int(kv, n, "model.dim") != c->dim ||
      entry_int(kv, n, "model.layers") != c->layers || entry_int(kv, n, "model.heads") != c->heads ||
      entry_int(kv, n, "model.kv_heads") != c->kv_heads || entry_int(kv, n, "model.ffn") != c->ffn ||
      entry_int(kv, n, "model.seq") != c->seq || (entry_int(kv, n, "model.tied") != 0) != c->tied)
    fail("accepted config differs from the file's entries");
  /* family and head width: absent means Llama, dim / heads */
  const char *fam = entry(kv, n, "model.family");
  if (strcmp(fam ? fam : "llama", coda_model_family_name(c->family)) ||
      (entry(kv, n, "model.head_dim") ? entry_int(kv, n, "model.head_dim") : 0) != c->head_dim)
    fail("accepted family or head width differs from the file's entries");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) {
    fuzz_name = "fuzz_checkpoint_config";
    if (coda_context_create(NULL, &ctx) != CODA_OK) fail("no context");
  }
  const int fds = open_fds();
  /* the entries: a NUL-terminated copy cut at each '\n' and first '=' */
  char *text = malloc(size + 1);
  if (!text) fail("out of memory");
  memcpy(text, data, size);
  text[size] = '\0';
  char *kv[2 * MAX_ENTRIES];
  int n = 0;
  for (char *line = text; line && n < MAX_ENTRIES;) {
    char *next = memchr(line, '\n', (size_t)(text + size - line));
    if (next) *next++ = '\0';
    if (line >= text + size && !next) break;
    char *eq = strchr(line, '=');
    if (eq) *eq = '\0';
    kv[2 * n] = line;
    kv[2 * n + 1] = eq ? eq + 1 : line + strlen(line);
    n++;
    line = next;
  }
  int dup = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(kv[2 * i], "crc32") || !strcmp(kv[2 * i], "header_crc32")) dup = 1;
    for (int j = 0; j < i; j++) dup |= !strcmp(kv[2 * i], kv[2 * j]);
  }

  const char *t = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/fuzz-ckpt-XXXXXX", t && *t ? t : "/tmp");
  int tfd = mkstemp(path);
  if (tfd < 0) fail("mkstemp");
  close(tfd);
  const float x[2] = {1.0f, -2.0f};
  coda_st_entry e;
  memset(&e, 0, sizeof e);
  e.name = "norm.weight";
  e.dtype = "F32";
  e.ndim = 1;
  e.shape[0] = 2;
  e.data = x;
  if (coda_st_save(ctx, path, &e, 1, (const char *const *)kv, n) != CODA_OK)
    fail(coda_last_error(ctx));

  coda_model_config c;
  coda_status s = coda_checkpoint_config(ctx, path, &c);
  if (s == CODA_OK) {
    if (dup) fail("accepted a metadata key given twice");
    check_accepted(ctx, &c);
    check_entries(kv, n, &c);
  } else {
    check_refused(ctx, s, path);
  }
  coda_model_config c2;
  coda_status s2 = coda_checkpoint_config_to_load(ctx, path, &c2);
  if (s2 == CODA_OK) {
    if (s != CODA_OK) fail("config_to_load accepted what checkpoint_config refuses");
    if (coda_model_config_params(&c2) > CODA_CPU_MAX_PARAMS)
      fail("config_to_load accepted a model beyond the CPU limit");
  } else {
    check_refused(ctx, s2, path);
  }
  unlink(path);
  free(text);
  if (open_fds() != fds) fail("a file descriptor stayed open");
  return 0;
}
