/* Training loop: N steps straight equal N/2 steps + save + resume + N/2
 * steps bit for bit (weights, moments, metadata and every logged loss),
 * with the fp32 and the bf16 optimizer state; Ctrl-C style stop; stop with
 * a message on a non-finite loss. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "model/model.h"
#include "file_util.h"
#include "train_corpus.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int calls;
static int stop_after_4(void *u) { (void)u; return ++calls >= 4; }

static coda_train_options opts(const char *data, const char *out) {
  coda_train_options o = coda_train_default_options();
  o.model.seq = 32;
  o.model.layers = 2;
  o.batch = 3;
  o.accum = 2;
  o.steps = 8;
  o.warmup = 3;
  o.val_every = 3;
  o.val_batches = 1;
  o.seed = 77;
  o.data_dir = data;
  o.out_dir = out;
  o.quiet = 1;
  return o;
}

/* The bf16 optimizer state: the loss falls; interrupted and resumed equals
 * straight bit for bit; every stored weight and moment is a bf16 value;
 * the run differs from the fp32 state's. */
static void test_bf16_state(coda_context ctx, const char *data, const char *dir,
                            const char *fp32_ckpt) {
  char a[300], b[300], pa[400], pb[400];
  snprintf(a, sizeof a, "%s/bf16a", dir);
  snprintf(b, sizeof b, "%s/bf16b", dir);
  coda_train_options o = opts(data, a);
  o.optim_state = CODA_OPTIM_STATE_BF16;
  coda_train_summary sa, sb, sc;
  CHECK(coda_train(ctx, &o, &sa) == CODA_OK);
  CHECK(isfinite(sa.final_loss) && sa.final_loss < sa.first_loss);
  o = opts(data, b);
  o.optim_state = CODA_OPTIM_STATE_BF16;
  calls = 0;
  o.should_stop = stop_after_4;
  CHECK(coda_train(ctx, &o, &sb) == CODA_OK);
  CHECK(sb.stopped == 1 && sb.steps_done == 4);
  snprintf(pb, sizeof pb, "%s/checkpoint.safetensors", b);
  o = opts(data, b);
  o.optim_state = CODA_OPTIM_STATE_BF16;
  o.resume = pb;
  CHECK(coda_train(ctx, &o, &sc) == CODA_OK);
  CHECK(sc.final_loss == sa.final_loss);
  snprintf(pa, sizeof pa, "%s/checkpoint.safetensors", a);
  CHECK(same_file(pa, pb));
  CHECK(!same_file(pa, fp32_ckpt));
  coda_model_config mc;
  CHECK(coda_checkpoint_config(ctx, pa, &mc) == CODA_OK);
  coda_model *m;
  CHECK(coda_model_create(ctx, &mc, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  const size_t n = coda_model_size(m);
  float *mom = malloc(n * sizeof *mom), *vel = malloc(n * sizeof *vel);
  CHECK(coda_checkpoint_load(ctx, pa, m, mom, vel, NULL) == CODA_OK);
  const float *w = coda_model_weights(m);
  size_t not_bf16 = 0, moved = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u[3];
    memcpy(&u[0], &w[i], 4), memcpy(&u[1], &mom[i], 4), memcpy(&u[2], &vel[i], 4);
    not_bf16 += (u[0] & 0xffff) != 0 || (u[1] & 0xffff) != 0 || (u[2] & 0xffff) != 0;
    moved += mom[i] != 0;
  }
  CHECK_MSG(not_bf16 == 0, "%zu of %zu stored values are not bf16", not_bf16, n);
  CHECK(moved > n / 2);
  free(mom);
  free(vel);
  coda_model_destroy(m);
  /* refused: an unknown state */
  o = opts(data, a);
  o.optim_state = (coda_optim_state)2;
  CHECK(coda_train(ctx, &o, &sc) == CODA_ERR_INVALID_ARGUMENT);
}

int main(void) {
  char dir[256], data[300], a[300], b[300], c[300], pa[400], pb[400];
  snprintf(dir, sizeof dir, "test_train_resume.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(c, sizeof c, "%s/c", dir);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  size_t len;
  char *text = train_corpus(12345, 60000, &len);
  CHECK(coda_prepare_corpus_text(ctx, text, len, data, 10, NULL, NULL) == CODA_OK);
  free(text);

  /* A: 8 steps straight */
  coda_train_options o = opts(data, a);
  coda_train_summary sa, sb, sc;
  CHECK(coda_train(ctx, &o, &sa) == CODA_OK);
  CHECK(sa.steps_done == 8 && sa.stopped == 0);
  CHECK(isfinite(sa.final_loss) && sa.final_loss < sa.first_loss);
  /* B: interrupted after 4 steps (the stop request saves), then resumed */
  o = opts(data, b);
  calls = 0;
  o.should_stop = stop_after_4;
  CHECK(coda_train(ctx, &o, &sb) == CODA_OK);
  CHECK(sb.stopped == 1 && sb.steps_done == 4);
  snprintf(pb, sizeof pb, "%s/checkpoint.safetensors", b);
  coda_train_state st;
  coda_model_config mc;
  CHECK(coda_checkpoint_config(ctx, pb, &mc) == CODA_OK);
  CHECK(mc.seq == 32);
  o = opts(data, b);
  o.resume = pb;
  o.model.dim = 64; /* ignored: the checkpoint's configuration wins */
  CHECK(coda_train(ctx, &o, &sc) == CODA_OK);
  CHECK(sc.steps_done == 4 && sc.stopped == 0);
  CHECK(sc.final_loss == sa.final_loss);
  CHECK(sc.final_val == sa.final_val);
  snprintf(pa, sizeof pa, "%s/checkpoint.safetensors", a);
  /* identical files: weights, m, v, step, RNG state, data position, loss */
  CHECK(same_file(pa, pb));
  snprintf(pa, sizeof pa, "%s/loss.csv", a);
  snprintf(pb, sizeof pb, "%s/loss.csv", b);
  CHECK(same_file(pa, pb));
  snprintf(pa, sizeof pa, "%s/loss.svg", a);
  struct stat sst;
  CHECK(stat(pa, &sst) == 0 && sst.st_size > 1000);
  {
    size_t n;
    unsigned char *svg = slurp(pa, &n);
    CHECK(svg && n > 40 && !memcmp(svg, "<?xml", 5) && strstr((const char *)svg, "<svg ") &&
          !memcmp(svg + n - 7, "</svg>\n", 7));
    free(svg);
  }
  /* sampling from the checkpoint: greedy = argmax of the model's logits,
   * top-k 1 = greedy, the same seed gives the same text */
  snprintf(pb, sizeof pb, "%s/checkpoint.safetensors", b);
  {
    coda_generate_options g = {.struct_size = sizeof g, .checkpoint = pb, .prompt = "The ", .max_tokens = 12,
                               .temperature = 0.0, .top_k = 0, .seed = 5};
    char *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    CHECK(coda_generate(ctx, &g, &t1) == CODA_OK);
    g.temperature = 1.0;
    g.top_k = 1;
    CHECK(coda_generate(ctx, &g, &t2) == CODA_OK);
    g.top_k = 0;
    g.temperature = 1.5;
    CHECK(coda_generate(ctx, &g, &t3) == CODA_OK);
    CHECK(coda_generate(ctx, &g, &t4) == CODA_OK);
    if (t1 && t2 && t3 && t4) {
      CHECK(strlen(t1) == 16 && !strncmp(t1, "The ", 4));
      CHECK(!strcmp(t1, t2));
      CHECK(!strcmp(t3, t4));
      CHECK(strlen(t3) == 16 && !strncmp(t3, "The ", 4));
    }
    coda_model_config gc;
    coda_model *gm;
    CHECK(coda_checkpoint_config(ctx, pb, &gc) == CODA_OK);
    CHECK(coda_model_create(ctx, &gc, CODA_ENGINE_PLANS, &gm) == CODA_OK);
    CHECK(coda_checkpoint_load(ctx, pb, gm, NULL, NULL, NULL) == CODA_OK);
    int32_t pr[4] = {'T', 'h', 'e', ' '};
    float lg[256];
    CHECK(coda_model_last_logits(ctx, gm, pr, 4, lg) == CODA_OK);
    int best = 0;
    for (int v = 1; v < 256; v++)
      if (lg[v] > lg[best]) best = v;
    if (t1) CHECK((unsigned char)t1[4] == best);
    coda_model_destroy(gm);
    free(t1); free(t2); free(t3); free(t4);
    g.checkpoint = "missing.safetensors";
    CHECK(coda_generate(ctx, &g, &t1) == CODA_ERR_IO);
  }
  snprintf(pa, sizeof pa, "%s/checkpoint.safetensors", a);
  test_bf16_state(ctx, data, dir, pa);
  /* resuming a finished run has nothing to do */
  o = opts(data, b);
  o.resume = pb;
  CHECK(coda_train(ctx, &o, &sc) == CODA_ERR_INVALID_ARGUMENT);
  (void)st;

  /* C: an absurd learning rate makes the loss non-finite: the run stops,
   * names the step, and keeps the last good checkpoint. */
  o = opts(data, c);
  o.lr = 1e30;
  o.warmup = 0;
  o.clip = 0;
  o.save_every = 1;
  o.steps = 6;
  CHECK(coda_train(ctx, &o, &sc) == CODA_OK);
  CHECK(sc.stopped == 2);
  CHECK(sc.bad_step >= 2 && sc.bad_step <= 6);
  CHECK(sc.steps_done == sc.bad_step - 1);
  char pc[400];
  snprintf(pc, sizeof pc, "%s/checkpoint.safetensors", c);
  coda_model *m;
  CHECK(coda_model_create(ctx, &mc, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  CHECK(coda_checkpoint_load(ctx, pc, m, NULL, NULL, &st) == CODA_OK);
  CHECK(st.step == sc.bad_step - 1 && isfinite(st.last_loss));
  coda_model_destroy(m);

  /* bad options are refused with a message */
  o = opts(data, c);
  o.batch = 0;
  CHECK(coda_train(ctx, &o, &sc) == CODA_ERR_INVALID_ARGUMENT);
  o = opts(data, c);
  o.resume = "does-not-exist.safetensors";
  CHECK(coda_train(ctx, &o, &sc) == CODA_ERR_IO);

  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
