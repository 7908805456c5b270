/* The fused-step tuning cache's file (base/tune_cache.c, fused-tune.txt),
 * without a GPU: FNV-1a against the published test vectors, write/read
 * round trip of random entries, entries of another device or library kept
 * but never used, corrupt lines (GEMM lines among them) ignored and
 * counted, a truncated file, merging of two writers, atomic replacement (an
 * open reader keeps the old file, no temporary left behind), a failed write
 * naming the path, and the table a context holds. */
#define _POSIX_C_SOURCE 200809L /* setenv, dirent, mkdir, rmdir, truncate */

#include "base/internal.h"
#include "tune_cache_test.h"

static coda_fused_key random_key(void) {
  static const coda_dtype ab[3] = {CODA_BF16, CODA_F16, CODA_F64};
  coda_fused_key k;
  memset(&k, 0, sizeof k);
  k.program = next() | (uint64_t)irange(0, 1) << 63; /* the top bit too */
  k.m = irange(1, 70000);
  k.n = irange(1, 70000);
  k.k = irange(1, 70000);
  k.trans_a = (int)irange(0, 1);
  k.trans_b = (int)irange(0, 1);
  k.ab = ab[irange(0, 2)];
  k.tile_m = 8 * (int)irange(1, 32);
  k.tile_n = 8 * (int)irange(1, 32);
  return k;
}

typedef struct {
  coda_fused_key key;
  int choice;
  double us[3];
} truth;

static truth random_truth(void) {
  truth t;
  t.key = random_key();
  t.choice = (int)irange(0, 3);
  for (int v = 0; v < 3; v++) t.us[v] = irange(0, 3) ? (double)irange(1, 10000000) / 100.0 : 0.0;
  return t;
}

static int key_eq(const coda_fused_key *a, const coda_fused_key *b) {
  return a->program == b->program && a->m == b->m && a->n == b->n && a->k == b->k &&
         a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->ab == b->ab &&
         a->tile_m == b->tile_m && a->tile_n == b->tile_n;
}

/* Entries of the running tags in c equal the expected ones. */
static void check_has(const coda_fused_cache *c, const truth *t, int n) {
  for (int i = 0; i < n; i++) {
    const coda_fused_entry *e = coda_fused_cache_find(c, &t[i].key);
    CHECK_MSG(e != NULL, "entry %d missing", i);
    if (!e) continue;
    CHECK(key_eq(&e->key, &t[i].key));
    CHECK_EQ_INT(e->choice, t[i].choice);
    for (int v = 0; v < 3; v++) CHECK_NEAR(e->us[v], t[i].us[v], 0.0051); /* two decimals */
  }
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int main(void) {
  seed_from_clock();
  cache_files files;
  cache_files_init(&files, "test_fused_tune_cache.dir", "fused-tune.txt");
  const char *sub = files.sub, *path = files.path;

  /* FNV-1a 64, published test vectors. */
  CHECK(coda_fnv1a64("", 0, 0) == 0xcbf29ce484222325ull);
  CHECK(coda_fnv1a64("a", 1, 0) == 0xaf63dc4c8601ec8cull);
  CHECK(coda_fnv1a64("foobar", 6, 0) == 0x85944171f73967e8ull);

  /* Default location: beside gemm-tune.txt. */
  check_default_path(coda_fused_cache_default_path, "fused-tune.txt");

  /* Round trip through the file (its directory is created). */
  enum { NE = 40 };
  truth t[NE];
  coda_fused_cache a;
  coda_fused_cache_init(&a, "Test GPU\tX", "0.1.0+k12345678", path);
  CHECK(strcmp(a.device, "Test_GPU_X") == 0);
  for (int i = 0; i < NE; i++) {
    t[i] = random_truth();
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[i].key, t[i].choice, t[i].us), CODA_OK);
  }
  {
    const double ok_us[3] = {1, 2, 3}, neg[3] = {1, -2, 3}, inf[3] = {1, 2, 1.0 / 0.0};
    double nan_us[3] = {1, 2, 3};
    nan_us[1] = 0.0 / 0.0;
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[0].key, 4, ok_us), CODA_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[0].key, -1, ok_us), CODA_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[0].key, 0, neg), CODA_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[0].key, 0, inf), CODA_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[0].key, 0, nan_us), CODA_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(coda_fused_cache_put(&a, &t[0].key, 0, NULL), CODA_ERR_INVALID_ARGUMENT);
  }
  /* Replacing a key keeps one entry; keys differing in one field are distinct. */
  t[3].choice = (t[3].choice + 1) % 4;
  CHECK_EQ_INT(coda_fused_cache_put(&a, &t[3].key, t[3].choice, t[3].us), CODA_OK);
  CHECK_EQ_INT(a.n, NE);
  {
    coda_fused_key k = t[5].key;
    k.tile_n += 8;
    CHECK(coda_fused_cache_find(&a, &k) == NULL);
    k = t[5].key;
    k.program ^= 1;
    CHECK(coda_fused_cache_find(&a, &k) == NULL);
    k = t[5].key;
    k.trans_b = !k.trans_b;
    CHECK(coda_fused_cache_find(&a, &k) == NULL);
  }
  CHECK_EQ_INT(coda_fused_cache_save(NULL, &a), CODA_OK);
  CHECK_EQ_INT(count_lines(path), NE + 1); /* + the header comment */

  coda_fused_cache b;
  coda_fused_cache_init(&b, "Test_GPU_X", "0.1.0+k12345678", path);
  CHECK_EQ_INT(coda_fused_cache_load(&b), 0);
  CHECK_EQ_INT(b.n, NE);
  check_has(&b, t, NE);
  CHECK_EQ_INT(coda_fused_cache_load(&b), 0); /* read once */
  CHECK_EQ_INT(b.n, NE);

  /* Another device or library: kept in the file, never matched. */
  coda_fused_cache other;
  coda_fused_cache_init(&other, "Other_GPU", "0.1.0+k12345678", path);
  coda_fused_cache_load(&other);
  CHECK_EQ_INT(other.n, NE);
  for (int i = 0; i < NE; i++) CHECK(coda_fused_cache_find(&other, &t[i].key) == NULL);
  coda_fused_cache_free(&other);
  coda_fused_cache_init(&other, "Test_GPU_X", "0.1.0+k87654321", path);
  coda_fused_cache_load(&other);
  CHECK(coda_fused_cache_find(&other, &t[0].key) == NULL);
  const truth ot = random_truth();
  CHECK_EQ_INT(coda_fused_cache_put(&other, &ot.key, ot.choice, ot.us), CODA_OK);
  CHECK_EQ_INT(coda_fused_cache_save(NULL, &other), CODA_OK);
  coda_fused_cache_free(&other);

  /* Two writers that loaded the same file: the second save keeps the
   * first one's new entry (merge on save). */
  const truth ta = random_truth(), tb = random_truth();
  CHECK_EQ_INT(coda_fused_cache_put(&a, &ta.key, ta.choice, ta.us), CODA_OK);
  CHECK_EQ_INT(coda_fused_cache_put(&b, &tb.key, tb.choice, tb.us), CODA_OK);
  CHECK_EQ_INT(coda_fused_cache_save(NULL, &a), CODA_OK);
  CHECK_EQ_INT(coda_fused_cache_save(NULL, &b), CODA_OK);
  {
    coda_fused_cache c;
    coda_fused_cache_init(&c, "Test_GPU_X", "0.1.0+k12345678", path);
    coda_fused_cache_load(&c);
    CHECK_EQ_INT(c.n, NE + 3); /* NE + ta + tb + the other library's entry */
    check_has(&c, t, NE);
    check_has(&c, &ta, 1);
    check_has(&c, &tb, 1);
    CHECK(coda_fused_cache_find(&c, &ot.key) == NULL);
    coda_fused_cache_free(&c);
  }

  /* Corrupt lines between valid ones: each is skipped and counted; a valid
   * line written by hand is read. */
  const char *tag = "Test_GPU_X 0.1.0+k12345678";
  truth tn; /* written by the rewrite below */
  {
    FILE *f = fopen(path, "a");
    static const char *bad[] = {
        "00000000000000aa 64 64 64 NT bf16 64x128 fused 1 2 3",                    /* no tags */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64",                      /* truncated */
        "Test_GPU_X 0.1.0+k12345678 aa 64 64 64 NT bf16 64x128 fused 1 2 3",      /* short hash */
        "Test_GPU_X 0.1.0+k12345678 00000000000000AA 64 64 64 NT bf16 64x128 fused 1 2 3", /* case */
        "Test_GPU_X 0.1.0+k12345678 000000000000zzzz 64 64 64 NT bf16 64x128 fused 1 2 3", /* hex */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 0 64 64 NT bf16 64x128 fused 1 2 3",  /* M = 0 */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 -6 64 NT bf16 64x128 fused 1 2 3", /* N < 0 */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 99999999999 NT bf16 64x128 fused 1 2 3",
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 XT bf16 64x128 fused 1 2 3", /* layout */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT f8 64x128 fused 1 2 3",   /* dtype */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 64 fused 1 2 3",     /* tile */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 0x128 fused 1 2 3",
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 64x9999 fused 1 2 3",
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 x128 fused 1 2 3",
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 64x128 fastest 1 2 3", /* choice */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 64x128 fused 1 -2 3",  /* time */
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 64x128 fused 1 2 nan",
        "Test_GPU_X 0.1.0+k12345678 00000000000000aa 64 64 64 NT bf16 64x128 fused 1 2 3 4", /* extra */
        "Test_GPU_X 0.1.0+k12345678 64 64 64 NT bf16 bf16 0 0 1 5.0", /* a GEMM line */
    };
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++) fprintf(f, "%s\n", bad[i]);
    append_skipped_lines(f); /* one overlong */
    const int64_t hm = irange(1, 9999), hn = irange(1, 9999), hk = irange(1, 9999);
    fprintf(f, "  Test_GPU_X\t0.1.0+k12345678 ffffffffffffff01 %lld %lld %lld TN f16 64x256 "
               "cooperative 10.5 9.25 0\n",
            (long long)hm, (long long)hn, (long long)hk);
    fprintf(f, "%s 0000000000000005 5 5 5 NT bf16 64x128 unfused 1 2", tag); /* torn last line */
    fclose(f);
    coda_fused_cache c;
    coda_fused_cache_init(&c, "Test_GPU_X", "0.1.0+k12345678", path);
    CHECK_EQ_INT(coda_fused_cache_load(&c), nbad + 2);
    CHECK_EQ_INT(c.n, NE + 4);
    check_has(&c, t, NE);
    const coda_fused_key hkey = {0xffffffffffffff01ull, hm, hn, hk, 1, 0, CODA_F16, 64, 256};
    const coda_fused_entry *e = coda_fused_cache_find(&c, &hkey);
    CHECK(e && e->choice == CODA_FUSED_CHOICE_COOPERATIVE && e->us[0] == 10.5 &&
          e->us[1] == 9.25 && e->us[2] == 0);
    /* The line parser on its own. */
    coda_fused_entry pe;
    CHECK_EQ_INT(coda_fused_parse_line("# x y", &pe), 0);
    CHECK_EQ_INT(coda_fused_parse_line("  ", &pe), 0);
    for (int i = 0; i < nbad; i++) CHECK_MSG(coda_fused_parse_line(bad[i], &pe) == -1, "%s", bad[i]);
    char line[512];
    CHECK(coda_fused_format_line(&c.e[0], line, sizeof line));
    CHECK_EQ_INT(coda_fused_parse_line(line, &pe), 1);
    CHECK(key_eq(&pe.key, &c.e[0].key) && pe.choice == c.e[0].choice &&
          strcmp(pe.device, c.e[0].device) == 0 && strcmp(pe.lib, c.e[0].lib) == 0);
    CHECK(!coda_fused_format_line(&c.e[0], line, 8)); /* does not fit */
    for (int ch = 0; ch < 4; ch++) {
      coda_fused_entry x = c.e[0];
      x.choice = ch;
      CHECK(coda_fused_format_line(&x, line, sizeof line));
      CHECK(strstr(line, coda_fused_choice_name(ch)) != NULL);
      CHECK(coda_fused_parse_line(line, &pe) == 1 && pe.choice == ch);
    }

    /* Atomic replacement: a reader holding the old file keeps reading it
     * whole; the rewrite drops the corrupt lines and leaves no temporary. */
    FILE *old = fopen(path, "r");
    CHECK(old != NULL);
    tn = random_truth();
    CHECK_EQ_INT(coda_fused_cache_put(&c, &tn.key, tn.choice, tn.us), CODA_OK);
    CHECK_EQ_INT(coda_fused_cache_save(NULL, &c), CODA_OK);
    if (old) {
      char *s = read_rest(old);
      fclose(old);
      CHECK(strstr(s, "fastest") != NULL); /* the old content, still there */
      CHECK(strstr(s, "5 5 5 NT bf16 64x128 unfused 1 2") != NULL);
      free(s);
    }
    CHECK_EQ_INT(count_lines(path), 1 + NE + 5);
    check_only_file(sub, "fused-tune.txt");
    coda_fused_cache_free(&c);
  }

  /* A file cut off mid-line (e.g. copied while a non-atomic writer ran):
   * the whole lines before the cut are read, the torn one is skipped. */
  {
    const long full = file_size(path);
    CHECK(full > 100);
    CHECK(truncate(path, full / 2) == 0);
    coda_fused_cache c;
    coda_fused_cache_init(&c, "Test_GPU_X", "0.1.0+k12345678", path);
    const int nbad = coda_fused_cache_load(&c);
    CHECK(nbad <= 1);
    CHECK_MSG(c.n >= NE / 3 && c.n < NE + 5, "%d entries", c.n);
    for (int i = 0; i < c.n; i++) { /* every entry read is one that was written */
      int found = 0;
      for (int j = 0; j < NE; j++) found |= key_eq(&c.e[i].key, &t[j].key);
      found |= key_eq(&c.e[i].key, &ta.key) || key_eq(&c.e[i].key, &tb.key) ||
               key_eq(&c.e[i].key, &ot.key) || key_eq(&c.e[i].key, &tn.key);
      CHECK(found || c.e[i].key.program == 0xffffffffffffff01ull);
    }
    coda_fused_cache_free(&c);
  }

  /* A write that cannot happen (the directory is a file) fails with the
   * path in the message; the table in memory is unaffected. */
  coda_context ctx;
  CHECK_EQ_INT(coda_context_create(NULL, &ctx), CODA_OK);
  {
    char bad_path[300];
    snprintf(bad_path, sizeof bad_path, "%s/fused-tune.txt/x.txt", sub);
    coda_fused_cache c;
    coda_fused_cache_init(&c, "Test_GPU_X", "0.1.0+k12345678", bad_path);
    CHECK_EQ_INT(coda_fused_cache_put(&c, &t[0].key, 1, t[0].us), CODA_OK);
    CHECK_EQ_INT(coda_fused_cache_save(ctx, &c), CODA_ERR_IO);
    CHECK(strstr(coda_last_error(ctx), bad_path) != NULL);
    CHECK(strstr(coda_last_error(ctx), "fusion tuning cache") != NULL);
    CHECK(coda_fused_cache_find(&c, &t[0].key) != NULL);
    coda_fused_cache_free(&c);
    coda_fused_cache_init(&c, "Test_GPU_X", "0.1.0+k12345678", NULL); /* memory only */
    CHECK_EQ_INT(coda_fused_cache_load(&c), 0);
    CHECK_EQ_INT(coda_fused_cache_save(ctx, &c), CODA_OK);
    coda_fused_cache_free(&c);
  }

  /* The table a context holds: made once (later tags are ignored), read
   * from the file then, freed with the context. */
  {
    CHECK(coda_fused_tune_state(ctx) == NULL);
    coda_fused_cache *c = coda_fused_tune_create(ctx, "Test_GPU_X", "0.1.0+k12345678", path);
    CHECK(c != NULL && coda_fused_tune_state(ctx) == c);
    CHECK(c && c->loaded && c->n > 0);
    CHECK(coda_fused_tune_create(ctx, "Other", "x", NULL) == c);
    CHECK(c && strcmp(c->device, "Test_GPU_X") == 0);
    coda_fused_tune_release(ctx);
    CHECK(coda_fused_tune_state(ctx) == NULL);
    CHECK(coda_fused_tune_create(ctx, "Test_GPU_X", "0.1.0+k12345678", NULL) != NULL);
  }
  coda_context_destroy(ctx); /* frees the second table */

  coda_fused_cache_free(&a);
  coda_fused_cache_free(&b);
  cache_files_remove(&files);
  return CHECK_DONE();
}
