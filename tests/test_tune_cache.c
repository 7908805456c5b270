/* The GEMM autotuner's on-disk cache (base/tune_cache.c), without a GPU:
 * write/read round trip of random entries, entries of another device kept
 * but not used, corrupt lines ignored and counted, merging of two writers,
 * atomic replacement (no temporary left behind, an open reader keeps the
 * old file), and a failed write reporting the path. */
#define _POSIX_C_SOURCE 200809L /* setenv, dirent, mkdir, rmdir */

#include "base/internal.h"
#include "tune_cache_test.h"

static coda_tune_key random_key(void) {
  static const coda_dtype ab[2] = {CODA_BF16, CODA_F16};
  static const coda_dtype d[3] = {CODA_BF16, CODA_F16, CODA_F32};
  coda_tune_key k;
  memset(&k, 0, sizeof k);
  k.m = irange(1, 70000);
  k.n = irange(1, 70000);
  k.k = irange(1, 70000);
  k.trans_a = (int)irange(0, 1);
  k.trans_b = (int)irange(0, 1);
  k.ab = ab[irange(0, 1)];
  k.d = d[irange(0, 2)];
  k.accumulate = (int)irange(0, 1);
  return k;
}

typedef struct {
  coda_tune_key key;
  int config, splits;
  double us;
} truth;

/* Entries of the running tags in c equal the expected ones. */
static void check_has(const coda_tune_cache *c, const truth *t, int n) {
  for (int i = 0; i < n; i++) {
    const coda_tune_entry *e = coda_tune_cache_find(c, &t[i].key);
    CHECK_MSG(e != NULL, "entry %d missing", i);
    if (!e) continue;
    CHECK_EQ_INT(e->config, t[i].config);
    CHECK_EQ_INT(e->splits, t[i].splits);
    CHECK_NEAR(e->us, t[i].us, 0.0051); /* written with two decimals */
  }
}

int main(void) {
  seed_from_clock();
  cache_files files;
  cache_files_init(&files, "test_tune_cache.dir", "gemm-tune.txt");
  const char *sub = files.sub, *path = files.path;

  /* Default location: $CODA_CACHE_DIR first, then ~/.cache/coda. */
  check_default_path(coda_tune_cache_default_path, "gemm-tune.txt");

  /* Round trip through the file (its directory is created). */
  enum { NE = 40 };
  truth t[NE];
  coda_tune_cache a;
  coda_tune_cache_init(&a, "Test GPU\tX", "0.1.0+c2", path);
  CHECK(strcmp(a.device, "Test_GPU_X") == 0); /* whitespace would split the fields */
  for (int i = 0; i < NE; i++) {
    t[i].key = random_key();
    t[i].config = (int)irange(0, 5);
    t[i].splits = (int)irange(1, 16);
    t[i].us = (double)irange(1, 10000000) / 100.0;
    CHECK_EQ_INT(coda_tune_cache_put(&a, &t[i].key, t[i].config, t[i].splits, t[i].us), CODA_OK);
  }
  CHECK_EQ_INT(coda_tune_cache_put(&a, &t[0].key, -1, 1, 1.0), CODA_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(coda_tune_cache_put(&a, &t[0].key, 0, 0, 1.0), CODA_ERR_INVALID_ARGUMENT);
  /* Replacing a key keeps one entry. */
  t[3].config = (t[3].config + 1) % 6;
  CHECK_EQ_INT(coda_tune_cache_put(&a, &t[3].key, t[3].config, t[3].splits, t[3].us), CODA_OK);
  CHECK_EQ_INT(a.n, NE);
  CHECK_EQ_INT(coda_tune_cache_save(NULL, &a), CODA_OK);
  CHECK_EQ_INT(count_lines(path), NE + 1); /* + the header comment */

  coda_tune_cache b;
  coda_tune_cache_init(&b, "Test_GPU_X", "0.1.0+c2", path);
  int nbad_b = coda_tune_cache_load(&b);
  CHECK_EQ_INT(nbad_b, 0);
  CHECK_EQ_INT(b.n, NE);
  check_has(&b, t, NE);
  /* Read once: a second load does not read again. */
  CHECK_EQ_INT(coda_tune_cache_load(&b), 0);
  CHECK_EQ_INT(b.n, NE);

  /* Another device or library version: kept in the file, never matched. */
  coda_tune_cache other;
  coda_tune_cache_init(&other, "Other_GPU", "0.1.0+c2", path);
  coda_tune_cache_load(&other);
  CHECK_EQ_INT(other.n, NE);
  for (int i = 0; i < NE; i++) CHECK(coda_tune_cache_find(&other, &t[i].key) == NULL);
  coda_tune_cache_free(&other);
  coda_tune_cache_init(&other, "Test_GPU_X", "0.2.0+c2", path);
  coda_tune_cache_load(&other);
  CHECK(coda_tune_cache_find(&other, &t[0].key) == NULL);
  coda_tune_key ok = random_key();
  CHECK_EQ_INT(coda_tune_cache_put(&other, &ok, 1, 2, 3.0), CODA_OK);
  CHECK_EQ_INT(coda_tune_cache_save(NULL, &other), CODA_OK);
  coda_tune_cache_free(&other);

  /* Two writers that loaded the same file: the second save keeps the
   * first one's new entry (merge on save). */
  coda_tune_key ka = random_key(), kb = random_key();
  CHECK_EQ_INT(coda_tune_cache_put(&a, &ka, 2, 3, 4.5), CODA_OK);
  CHECK_EQ_INT(coda_tune_cache_put(&b, &kb, 1, 1, 7.25), CODA_OK);
  CHECK_EQ_INT(coda_tune_cache_save(NULL, &a), CODA_OK);
  CHECK_EQ_INT(coda_tune_cache_save(NULL, &b), CODA_OK);
  {
    coda_tune_cache c;
    coda_tune_cache_init(&c, "Test_GPU_X", "0.1.0+c2", path);
    coda_tune_cache_load(&c);
    CHECK_EQ_INT(c.n, NE + 3); /* NE + ka + kb + the other version's entry */
    check_has(&c, t, NE);
    const coda_tune_entry *ea = coda_tune_cache_find(&c, &ka), *eb = coda_tune_cache_find(&c, &kb);
    CHECK(ea && ea->config == 2 && ea->splits == 3);
    CHECK(eb && eb->config == 1 && eb->splits == 1);
    CHECK(coda_tune_cache_find(&c, &ok) == NULL); /* other version */
    coda_tune_cache_free(&c);
  }

  /* Corrupt lines between valid ones: each is skipped and counted; a valid
   * line written by hand (not by the formatter) is read. */
  {
    FILE *f = fopen(path, "a");
    static const char *bad[] = {
        "Test_GPU_X 0.1.0+c2 64 64",                              /* truncated */
        "Test_GPU_X 0.1.0+c2 64 64 64 NX bf16 bf16 0 0 1 5.0",    /* layout */
        "Test_GPU_X 0.1.0+c2 0 64 64 NT bf16 bf16 0 0 1 5.0",     /* M = 0 */
        "Test_GPU_X 0.1.0+c2 -5 64 64 NT bf16 bf16 0 0 1 5.0",    /* negative */
        "Test_GPU_X 0.1.0+c2 6x4 64 64 NT bf16 bf16 0 0 1 5.0",   /* not a number */
        "Test_GPU_X 0.1.0+c2 64 64 64 NT f8 bf16 0 0 1 5.0",      /* dtype */
        "Test_GPU_X 0.1.0+c2 64 64 64 NT bf16 bf16 2 0 1 5.0",    /* accumulate */
        "Test_GPU_X 0.1.0+c2 64 64 64 NT bf16 bf16 0 0 0 5.0",    /* splits 0 */
        "Test_GPU_X 0.1.0+c2 64 64 64 NT bf16 bf16 0 -1 1 5.0",   /* config */
        "Test_GPU_X 0.1.0+c2 64 64 64 NT bf16 bf16 0 0 1 nan",    /* time */
        "Test_GPU_X 0.1.0+c2 64 64 64 NT bf16 bf16 0 0 1 5.0 9",  /* extra field */
        "Test_GPU_X 0.1.0+c2 99999999999 64 64 NT bf16 bf16 0 0 1 5.0", /* > 2^31 */
    };
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++) fprintf(f, "%s\n", bad[i]);
    append_skipped_lines(f); /* one overlong */
    const int64_t hm = irange(1, 9999), hn = irange(1, 9999), hk = irange(1, 9999);
    fprintf(f, "  Test_GPU_X\t0.1.0+c2 %lld %lld %lld TN f16 f32 1 1 12 33.5\n", (long long)hm,
            (long long)hn, (long long)hk);
    fprintf(f, "Test_GPU_X 0.1.0+c2 5 5 5 NT bf16 bf16 0 0 1"); /* torn last line */
    fclose(f);
    coda_tune_cache c;
    coda_tune_cache_init(&c, "Test_GPU_X", "0.1.0+c2", path);
    const int nbad_read = coda_tune_cache_load(&c);
    CHECK_EQ_INT(nbad_read, nbad + 2);
    CHECK_EQ_INT(c.n, NE + 4);
    check_has(&c, t, NE);
    coda_tune_key hk_key = {hm, hn, hk, 1, 0, CODA_F16, CODA_F32, 1};
    const coda_tune_entry *e = coda_tune_cache_find(&c, &hk_key);
    CHECK(e && e->config == 1 && e->splits == 12 && e->us == 33.5);
    /* Line parser on its own. */
    coda_tune_entry pe;
    CHECK_EQ_INT(coda_tune_parse_line("# x y", &pe), 0);
    CHECK_EQ_INT(coda_tune_parse_line("", &pe), 0);
    for (int i = 0; i < nbad; i++) CHECK_EQ_INT(coda_tune_parse_line(bad[i], &pe), -1);
    char line[512];
    CHECK(coda_tune_format_line(&c.e[0], line, sizeof line));
    CHECK_EQ_INT(coda_tune_parse_line(line, &pe), 1);
    const coda_tune_key *x = &pe.key, *y = &c.e[0].key;
    CHECK(x->m == y->m && x->n == y->n && x->k == y->k && x->trans_a == y->trans_a &&
          x->trans_b == y->trans_b && x->ab == y->ab && x->d == y->d &&
          x->accumulate == y->accumulate && pe.config == c.e[0].config &&
          pe.splits == c.e[0].splits && strcmp(pe.device, c.e[0].device) == 0);
    CHECK(!coda_tune_format_line(&c.e[0], line, 8)); /* does not fit */

    /* Atomic replacement: a reader holding the old file keeps reading it
     * whole; the rewrite drops the corrupt lines and leaves no temporary. */
    FILE *old = fopen(path, "r");
    CHECK(old != NULL);
    coda_tune_key kn = random_key();
    CHECK_EQ_INT(coda_tune_cache_put(&c, &kn, 0, 1, 1.0), CODA_OK);
    CHECK_EQ_INT(coda_tune_cache_save(NULL, &c), CODA_OK);
    if (old) {
      char *s = read_rest(old);
      fclose(old);
      CHECK(strstr(s, "NX bf16") != NULL);       /* the old content, still there */
      CHECK(strstr(s, "5 5 5 NT bf16 bf16 0 0 1") != NULL);
      free(s);
    }
    CHECK_EQ_INT(count_lines(path), 1 + NE + 5);
    check_only_file(sub, "gemm-tune.txt");
    coda_tune_cache_free(&c);
  }

  /* A write that cannot happen (the directory is a file) fails with the
   * path in the message; the cache in memory is unaffected. */
  {
    coda_context ctx;
    CHECK_EQ_INT(coda_context_create(NULL, &ctx), CODA_OK);
    char bad_path[300];
    snprintf(bad_path, sizeof bad_path, "%s/gemm-tune.txt/x.txt", sub);
    coda_tune_cache c;
    coda_tune_cache_init(&c, "Test_GPU_X", "0.1.0+c2", bad_path);
    CHECK_EQ_INT(coda_tune_cache_put(&c, &t[0].key, 1, 1, 1.0), CODA_OK);
    CHECK_EQ_INT(coda_tune_cache_save(ctx, &c), CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), bad_path) != NULL);
    CHECK(coda_tune_cache_find(&c, &t[0].key) != NULL);
    coda_tune_cache_free(&c);
    /* A cache without a file is memory only. */
    coda_tune_cache_init(&c, "Test_GPU_X", "0.1.0+c2", NULL);
    CHECK_EQ_INT(coda_tune_cache_load(&c), 0);
    CHECK_EQ_INT(coda_tune_cache_save(ctx, &c), CODA_OK);
    coda_tune_cache_free(&c);
    coda_context_destroy(ctx);
  }

  coda_tune_cache_free(&a);
  coda_tune_cache_free(&b);
  cache_files_remove(&files);
  return CHECK_DONE();
}
