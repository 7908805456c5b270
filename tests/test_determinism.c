/* Determinism of CPU training: the same seed and configuration give
 * bit-identical loss logs (loss.csv: loss, lr, gradient norm, validation
 * loss, printed with 9 significant digits) and bit-identical checkpoints
 * across two runs, and across 1 and 2 threads (docs/backends.md: results
 * never depend on the thread count), for both engines. A different seed
 * must change the log (so the comparison can fail). Sizes are chosen so
 * the GEMMs are above the one-thread cut-off and really run in parallel. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "train_corpus.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One `coda train` run (the command calls exactly this) into dir/name. */
static coda_status run(const char *dir, const char *data, const char *name, int threads,
                       int engine, uint64_t seed) {
  char out[400];
  snprintf(out, sizeof out, "%s/%s", dir, name);
  coda_context_options co = coda_context_default_options();
  co.num_threads = threads;
  coda_context ctx;
  if (coda_context_create(&co, &ctx) != CODA_OK) return CODA_ERR_INTERNAL;
  coda_train_options o = coda_train_default_options();
  o.model.seq = 32; /* tiny: dim 128, 2 layers, heads 4/2, ffn 384 */
  o.batch = 4;      /* 128 rows: the larger GEMMs run on all threads */
  o.accum = 2;
  o.steps = 3;
  o.warmup = 2;
  o.val_every = 2;
  o.val_batches = 1;
  o.seed = seed;
  o.engine = engine;
  o.data_dir = data;
  o.out_dir = out;
  o.quiet = 1;
  coda_train_summary sum;
  coda_status s = coda_train(ctx, &o, &sum);
  if (s) fprintf(stderr, "%s: %s\n", name, coda_last_error(ctx));
  else if (!isfinite(sum.final_loss) || sum.steps_done != 3) s = CODA_ERR_INTERNAL;
  coda_context_destroy(ctx);
  return s;
}

static void files(const char *dir, const char *a, const char *b, int want_same) {
  const char *f[2] = {"loss.csv", "checkpoint.safetensors"};
  for (int i = 0; i < 2; i++) {
    char pa[500], pb[500];
    snprintf(pa, sizeof pa, "%s/%s/%s", dir, a, f[i]);
    snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, f[i]);
    CHECK_MSG(same_file(pa, pb) == want_same, "%s vs %s: %s should %sbe identical", a, b, f[i],
              want_same ? "" : "not ");
  }
}

int main(void) {
  char dir[256], data[300];
  snprintf(dir, sizeof dir, "test_determinism.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  CHECK(mkdir(data, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  uint64_t cseed = (uint64_t)time(NULL);
  size_t len;
  char *text = train_corpus(cseed, 80000, &len);
  CHECK(coda_prepare_corpus_text(ctx, text, len, data, 10, NULL, NULL) == CODA_OK);
  free(text);
  uint64_t seed = 1 + cseed % 1000;

  /* engine 2: block plans; engine 1: host reference */
  const char *names[] = {"plans_t2_a", "plans_t2_b", "plans_t1", "ref_t2_a", "ref_t2_b", "ref_t1",
                         "plans_t2_other_seed"};
  int threads[] = {2, 2, 1, 2, 2, 1, 2};
  int engine[] = {2, 2, 2, 1, 1, 1, 2};
  uint64_t seeds[] = {seed, seed, seed, seed, seed, seed, seed + 1};
  for (int i = 0; i < 7; i++)
    CHECK(run(dir, data, names[i], threads[i], engine[i], seeds[i]) == CODA_OK);
  files(dir, "plans_t2_a", "plans_t2_b", 1);
  files(dir, "plans_t2_a", "plans_t1", 1);
  files(dir, "ref_t2_a", "ref_t2_b", 1);
  files(dir, "ref_t2_a", "ref_t1", 1);
  files(dir, "plans_t2_a", "plans_t2_other_seed", 0);
  /* the engines differ (bf16 plan buffers vs fp32), so their logs do too */
  files(dir, "plans_t2_a", "ref_t2_a", 0);

  /* The log has one line per step plus the header. */
  char p[500];
  size_t n;
  snprintf(p, sizeof p, "%s/plans_t2_a/loss.csv", dir);
  unsigned char *log = slurp(p, &n);
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += log && log[i] == '\n';
  CHECK_EQ_INT(lines, 4);
  free(log);

  for (int i = 0; i < 7; i++) {
    const char *f[] = {"loss.csv", "checkpoint.safetensors", "loss.svg"};
    for (int k = 0; k < 3; k++) {
      snprintf(p, sizeof p, "%s/%s/%s", dir, names[i], f[k]);
      remove(p);
    }
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    rmdir(p);
  }
  snprintf(p, sizeof p, "%s/train.tok", data); remove(p);
  snprintf(p, sizeof p, "%s/val.tok", data); remove(p);
  rmdir(data);
  rmdir(dir);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
