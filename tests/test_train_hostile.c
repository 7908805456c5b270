/* The trainer and the sampler on hostile data: a val.tok of a larger
 * vocabulary than the model's is refused at the start, naming the file; a
 * stop request during a long validation is honoured inside it; NaN weights
 * make generation fail instead of printing nothing; a sampled byte 0 is
 * part of the generated text; top-k sampling keeps exactly k tokens. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"
#include "check.h"
#include "train_corpus.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int polls;
static int stop_at_poll_1(void *u) { (void)u; return ++polls >= 1; }

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

int main(void) {
  char dir[256], data[300], big[300], out[300], p[400], q[400];
  snprintf(dir, sizeof dir, "test_train_hostile.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(big, sizeof big, "%s/big", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  coda_context_options co = coda_context_default_options();
  co.num_threads = 2;
  coda_context ctx;
  CHECK(coda_context_create(&co, &ctx) == CODA_OK);
  size_t len;
  char *text = train_corpus(99, 30000, &len);
  CHECK(coda_prepare_corpus_text(ctx, text, len, data, 10, NULL, NULL) == CODA_OK);
  free(text);

  coda_train_options o = coda_train_default_options();
  o.model.dim = 32; o.model.layers = 1; o.model.heads = 2; o.model.kv_heads = 1;
  o.model.ffn = 64; o.model.seq = 16;
  o.batch = 2;
  o.steps = 3;
  o.val_every = 0;
  o.val_batches = 1;
  o.data_dir = big;
  o.out_dir = out;
  o.quiet = 1;
  coda_train_summary sum;

  /* val.tok of a vocabulary of 1000 next to a byte-level train.tok */
  CHECK(mkdir(big, 0777) == 0);
  snprintf(p, sizeof p, "%s/train.tok", data);
  snprintf(q, sizeof q, "%s/train.tok", big);
  uint32_t *tok;
  uint64_t n;
  CHECK(coda_shard_read(ctx, p, &tok, &n, NULL) == CODA_OK);
  CHECK(coda_shard_write(ctx, q, tok, n, 256, 2) == CODA_OK);
  snprintf(q, sizeof q, "%s/val.tok", big);
  CHECK(coda_shard_write(ctx, q, tok, n, 1000, 2) == CODA_OK);
  free(tok);
  CHECK(coda_train(ctx, &o, &sum) == CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(has(coda_last_error(ctx), q) && has(coda_last_error(ctx), "1000"), "%s",
            coda_last_error(ctx));
  CHECK(sum.steps_done == 0);

  /* A stop requested while the first validation (of many batches) runs:
   * it is cut short, no step runs. */
  o.data_dir = data;
  o.val_batches = 200;
  o.should_stop = stop_at_poll_1;
  polls = 0;
  CHECK_MSG(coda_train(ctx, &o, &sum) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK(sum.stopped == CODA_TRAIN_INTERRUPTED);
  CHECK_EQ_INT(sum.steps_done, 0);
  CHECK_EQ_INT(polls, 1);
  /* and during the validation after a step: the step is saved */
  o.val_every = 1;
  o.steps = 5;
  polls = -199; /* the 199 polls of the first validation pass, the next (inside the
                  * validation of step 1) stops */
  o.should_stop = stop_at_poll_1;
  CHECK(coda_train(ctx, &o, &sum) == CODA_OK);
  CHECK(sum.stopped == CODA_TRAIN_INTERRUPTED);
  CHECK_EQ_INT(sum.steps_done, 1);
  CHECK(sum.checkpoint[0] != '\0');

  /* A checkpoint of NaN weights, one of zero weights. */
  coda_model_config c = o.model;
  coda_model *m;
  CHECK(coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  float *w = coda_model_weights(m);
  const size_t nw = coda_model_size(m);
  coda_train_state st = {0, 0, 0, NAN, "", 0, 0};
  for (size_t i = 0; i < nw; i++) w[i] = NAN;
  snprintf(p, sizeof p, "%s/nan.safetensors", dir);
  CHECK(coda_checkpoint_save(ctx, p, m, NULL, NULL, &st) == CODA_OK);
  for (size_t i = 0; i < nw; i++) w[i] = 0.0f;
  snprintf(q, sizeof q, "%s/zero.safetensors", dir);
  CHECK(coda_checkpoint_save(ctx, q, m, NULL, NULL, &st) == CODA_OK);
  coda_model_destroy(m);

  coda_generate_options g = {.struct_size = sizeof g, .checkpoint = p, .prompt = "ab", .max_tokens = 4,
                           .temperature = 0.8, .top_k = 40, .seed = 1};
  char *gen = NULL;
  size_t glen = 0;
  CHECK(coda_generate_n(ctx, &g, &gen, &glen) != CODA_OK);
  CHECK_MSG(has(coda_last_error(ctx), "not finite") && has(coda_last_error(ctx), p), "%s",
            coda_last_error(ctx));
  CHECK(gen == NULL);
  /* all logits equal: greedy picks token 0, and every byte is returned */
  g.checkpoint = q;
  g.temperature = 0.0;
  CHECK_MSG(coda_generate_n(ctx, &g, &gen, &glen) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_EQ_INT(glen, 6);
  CHECK(gen && !memcmp(gen, "ab\0\0\0\0", 6));
  free(gen);
  /* sampling with top-k 1 among equal logits: the lowest id, every time */
  g.temperature = 1.0;
  g.top_k = 1;
  CHECK(coda_generate_n(ctx, &g, &gen, &glen) == CODA_OK);
  CHECK(glen == 6 && gen && !memcmp(gen, "ab\0\0\0\0", 6));
  free(gen);
  /* top-k 3 among equal logits: ids 0, 1 and 2 only */
  g.top_k = 3;
  g.max_tokens = 64;
  CHECK(coda_generate_n(ctx, &g, &gen, &glen) == CODA_OK);
  int in_range = glen == 66;
  for (size_t i = 2; gen && i < glen; i++) in_range &= (unsigned char)gen[i] <= 2;
  CHECK(in_range);
  free(gen);

  coda_context_destroy(ctx);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  return CHECK_DONE();
}
