/* A short run of the tiny configuration learns: the validation loss starts
 * at about ln 256 (uniform over bytes) and falls below 3.0 nats within 40
 * steps of 8 x 128 tokens (well under a minute on 2 cores). */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "train_corpus.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  char dir[256], data[300];
  snprintf(dir, sizeof dir, "test_train_learn.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  size_t len;
  char *text = train_corpus(2718, 400000, &len);
  CHECK(coda_prepare_corpus_text(ctx, text, len, data, 20, NULL, NULL) == CODA_OK);
  free(text);
  coda_train_options o = coda_train_default_options(); /* tiny */
  o.steps = 40;
  o.warmup = 10;
  o.batch = 8;
  o.val_every = 0;
  o.val_batches = 4;
  o.data_dir = data;
  o.out_dir = dir;
  o.quiet = getenv("CODA_TEST_VERBOSE") == NULL;
  coda_train_summary s;
  CHECK(coda_train(ctx, &o, &s) == CODA_OK);
  printf("validation loss %.4f -> %.4f in %.1f s\n", s.first_val, s.final_val, s.seconds);
  CHECK(fabs(s.first_val - log(256.0)) < 0.15);
  CHECK(s.final_val < 3.0);
  CHECK(s.first_val - s.final_val > 2.0);
  CHECK(s.steps_done == 40 && s.stopped == 0);
  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
