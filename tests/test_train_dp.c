/* Data-parallel training on the CPU communicator (forked ranks):
 *  - N ranks x batch B give the losses, gradient norms, weights and AdamW
 *    moments of one process with batch N·B (N = 2, and N = 3 with gradient
 *    accumulation, whose shards are uneven);
 *  - stop + resume with 2 ranks is bit-identical to a straight run, and a
 *    2-rank checkpoint continues on one rank with batch 2B;
 *  - a failing run fails on every rank with a message naming a rank;
 *  - ZeRO-3 (shard_weights) gives ZeRO-1's bits without accumulation
 *    (tied and untied heads) and one process's results within the bounds
 *    below with 3 ranks and accumulation.
 *
 * Tolerance. The reference engine is fp32 with sums in double, and the two
 * runs see the same sequences, so the one difference is where the
 * per-sequence gradient contributions are added: one process adds them all
 * before rounding to fp32; N ranks each round their part (scaled by 1/N,
 * exact for N = 2) and the communicator adds N fp32 values. The gradient
 * then differs by |dg| <= about N · 2^-24 · |a rank's part|, ~1e-10 for
 * parts of ~1e-3. Losses and gradient norms are means over many elements:
 * they agree to ~1e-7 relative; we allow 1e-6. AdamW's step lr · m̂/(√v̂ + ε)
 * changes by at most lr · |dg| / ε per step (the worst case is an element
 * whose gradient cancels to ~0, where ε dominates): 3e-3 · 1e-10 / 1e-8 =
 * 3e-5; typical elements move by lr · 1e-7 relative. Weights and moments
 * after 6 steps must agree within 2e-5 absolute (3e-7 measured), while a
 * wrong data slice or a missing average moves the losses and gradient
 * norms by 1e-3 to 2x. The plan engine rounds weights to bf16, so a 1-ulp
 * fp32 difference can flip a bf16 rounding: there the losses
 * must agree within 1e-3 relative (bf16 has 8 bits). */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "dist/comm.h"
#include "file_util.h"
#include "train_corpus.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct job {
  coda_train_options o;
  int stop_after; /* > 0: the last rank requests a stop at that poll */
} job;

static int polls;
static int stop_poll(void *u) { return ++polls >= ((const job *)u)->stop_after; }

static int rank_main(coda_comm comm, void *user) {
  job *j = user;
  coda_context_options co = coda_context_default_options();
  co.num_threads = 1;
  coda_context ctx;
  if (coda_context_create(&co, &ctx) != CODA_OK) return 1;
  coda_train_options o = j->o;
  o.comm = comm;
  if (j->stop_after > 0 && coda_comm_rank(comm) == coda_comm_size(comm) - 1) {
    polls = 0;
    o.should_stop = stop_poll;
    o.user = j;
  }
  coda_train_summary sum;
  coda_status s = coda_train(ctx, &o, &sum);
  if (s) fprintf(stderr, "rank %d: %s\n", coda_comm_rank(comm), coda_last_error(ctx));
  int rc = s ? 1 : sum.stopped == 2 ? 3 : 0;
  coda_context_destroy(ctx);
  return rc;
}

static coda_train_options base(const char *data, const char *out, int engine, int batch) {
  coda_train_options o = coda_train_default_options();
  o.batch = batch;
  o.model.dim = 64;
  o.model.layers = 2;
  o.model.heads = 2;
  o.model.kv_heads = 1;
  o.model.ffn = 128;
  o.model.seq = 32;
  o.steps = 6;
  o.warmup = 2;
  o.val_every = 3;
  o.val_batches = 2;
  o.seed = 5;
  o.engine = engine;
  o.data_dir = data;
  o.out_dir = out;
  o.quiet = 1;
  return o;
}

static int run(int ranks, coda_train_options o, int stop_after) {
  job j = {o, stop_after};
  char err[512];
  int rc = coda_dist_launch(ranks, CODA_COMM_CPU, rank_main, &j, err, sizeof err);
  if (rc) fprintf(stderr, "launch of %d ranks: status %d: %s\n", ranks, rc, err);
  return rc;
}

/* loss.csv: step,loss,lr,grad_norm,val_loss -> loss, grad_norm, val_loss */
static int read_log(const char *dir, double *v, int max) {
  char p[512];
  snprintf(p, sizeof p, "%s/loss.csv", dir);
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  char line[512];
  int n = 0;
  if (!fgets(line, sizeof line, f)) { fclose(f); return 0; }
  while (n < max && fgets(line, sizeof line, f)) {
    double st, l, lr, g, vl;
    if (sscanf(line, "%lf,%lf,%lf,%lf,%lf", &st, &l, &lr, &g, &vl) != 5) break;
    v[3 * n] = l; v[3 * n + 1] = g; v[3 * n + 2] = vl;
    n++;
  }
  fclose(f);
  return n;
}

static void compare_logs(const char *a, const char *b, double rel, const char *what) {
  double va[60], vb[60];
  int na = read_log(a, va, 20), nb = read_log(b, vb, 20);
  CHECK_MSG(na == 6 && nb == 6, "%s: %d and %d steps logged", what, na, nb);
  double worst = 0.0;
  for (int i = 0; i < 3 * (na < nb ? na : nb); i++) {
    if (isnan(va[i]) && isnan(vb[i])) continue;
    double r = fabs(va[i] - vb[i]) / fabs(va[i]);
    if (!(r <= worst)) worst = r;
  }
  printf("%s: losses, gradient norms, validation losses agree within %.2e relative\n", what, worst);
  CHECK_MSG(worst <= rel, "%s: %g > %g", what, worst, rel);
}

/* Every F32 tensor of two checkpoints (weights, m, v) within tol. */
static void compare_ckpt(const char *a, const char *b, double tol, const char *what) {
  char pa[512], pb[512];
  snprintf(pa, sizeof pa, "%s/checkpoint.safetensors", a);
  snprintf(pb, sizeof pb, "%s/checkpoint.safetensors", b);
  coda_st_file fa, fb;
  CHECK(coda_st_load(NULL, pa, 1, &fa) == CODA_OK);
  CHECK(coda_st_load(NULL, pb, 1, &fb) == CODA_OK);
  CHECK_EQ_INT(fa.n, fb.n);
  double worst = 0.0;
  int tensors = 0;
  for (int i = 0; i < fa.n; i++) {
    const coda_st_tensor *x = &fa.t[i], *y = coda_st_find(&fb, x->name);
    CHECK_MSG(y && y->end - y->begin == x->end - x->begin, "%s", x->name);
    if (!y || y->end - y->begin != x->end - x->begin || strcmp(x->dtype, "F32")) continue;
    const float *p = (const float *)x->data, *q = (const float *)y->data;
    for (size_t k = 0; k < (x->end - x->begin) / 4; k++) {
      double d = fabs((double)p[k] - q[k]);
      if (!(d <= worst)) worst = d;
    }
    tensors++;
  }
  CHECK(tensors > 20);
  printf("%s: %d tensors (weights, m, v) agree within %.2e\n", what, tensors, worst);
  CHECK_MSG(worst <= tol, "%s: %g > %g", what, worst, tol);
  coda_st_free(&fa);
  coda_st_free(&fb);
}

/* Two runs' logs within rel and their checkpoints within tol. */
static void compare_runs(const char *a, const char *b, double rel, double tol, const char *what) {
  compare_logs(a, b, rel, what);
  compare_ckpt(a, b, tol, what);
}

int main(void) {
  char dir[128], data[256], p[16][300];
  snprintf(dir, sizeof dir, "test_train_dp.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  const char *names[] = {"one4", "two2", "one6", "three2", "stop", "stopcopy", "onecont",
                         "twocont", "plans1", "plans2", "bad", "z3two", "z3three", "z1tied",
                         "z3tied", "z3plans"};
  for (int i = 0; i < 16; i++) snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
  {
    coda_context ctx;
    CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
    size_t len;
    char *text = train_corpus(4242, 60000, &len);
    CHECK(coda_prepare_corpus_text(ctx, text, len, data, 10, NULL, NULL) == CODA_OK);
    free(text);
    coda_context_destroy(ctx);
  }
  /* 2 ranks x 2 sequences = 1 process x 4 */
  coda_train_options o = base(data, p[0], 1, 4);
  CHECK_EQ_INT(run(1, o, 0), 0);
  o = base(data, p[1], 1, 2);
  CHECK_EQ_INT(run(2, o, 0), 0);
  compare_runs(p[0], p[1], 1e-6, 2e-5, "2 ranks x 2 vs 1 x 4");
  /* 3 ranks x 2 sequences x 2 micro-batches = 1 process x 6 x 2 */
  o = base(data, p[2], 1, 6);
  o.accum = 2;
  CHECK_EQ_INT(run(1, o, 0), 0);
  o = base(data, p[3], 1, 2);
  o.accum = 2;
  CHECK_EQ_INT(run(3, o, 0), 0);
  compare_runs(p[2], p[3], 1e-6, 2e-5, "3 ranks x 2 x accum 2 vs 1 x 6 x accum 2");

  /* ZeRO-3 (weights and gradients sharded, gathered and reduce-scattered
   * bucket by bucket; the buckets' other pieces are NaN between uses, so a
   * weight read before its gather makes the loss non-finite): without
   * accumulation the same sums in the same order as ZeRO-1, so the same
   * bits (p[1]); with accumulation every micro-batch is reduced on its own
   * (the sums of the ranks' parts are added per micro-batch, not once),
   * which moves the gradient by a few fp32 roundings: the bounds above */
  o = base(data, p[11], 1, 2);
  o.shard_weights = 1;
  CHECK_EQ_INT(run(2, o, 0), 0);
  compare_runs(p[1], p[11], 0.0, 0.0, "ZeRO-3 vs ZeRO-1, 2 ranks x 2");
  o = base(data, p[12], 1, 2);
  o.accum = 2;
  o.shard_weights = 1;
  CHECK_EQ_INT(run(3, o, 0), 0);
  compare_runs(p[2], p[12], 1e-6, 2e-5, "ZeRO-3, 3 ranks x 2 x accum 2 vs 1 x 6 x accum 2");
  /* a tied head reads the embedding bucket at both ends of the pass */
  o = base(data, p[13], 1, 2);
  o.model.tied = 1;
  CHECK_EQ_INT(run(2, o, 0), 0);
  o = base(data, p[14], 1, 2);
  o.model.tied = 1;
  o.shard_weights = 1;
  CHECK_EQ_INT(run(2, o, 0), 0);
  compare_runs(p[13], p[14], 0.0, 0.0, "ZeRO-3 vs ZeRO-1, tied head");
  /* not on the plan engine yet: refused on every rank */
  o = base(data, p[15], 2, 2);
  o.shard_weights = 1;
  CHECK(run(2, o, 0) == 1);

  /* 2 ranks stopped after 3 steps (only rank 1 asks, as when a signal
   * reaches one process: the request is summed, so both stop and rank 0
   * saves), then resumed with 2 ranks: identical files to the straight run
   * (p[1]) */
  o = base(data, p[4], 1, 2);
  CHECK_EQ_INT(run(2, o, 3), 0);
  char a[400], b[400];
  snprintf(a, sizeof a, "%s/checkpoint.safetensors", p[4]);
  size_t n = 0;
  unsigned char *ck = slurp(a, &n);
  CHECK(ck != NULL);
  coda_model_config mc;
  CHECK(coda_checkpoint_config(NULL, a, &mc) == CODA_OK);
  o.resume = a;
  CHECK_EQ_INT(run(2, o, 0), 0);
  snprintf(b, sizeof b, "%s/checkpoint.safetensors", p[1]);
  CHECK_MSG(same_file(a, b), "resumed 2-rank checkpoint differs from the straight run");
  snprintf(a, sizeof a, "%s/loss.csv", p[4]);
  snprintf(b, sizeof b, "%s/loss.csv", p[1]);
  CHECK_MSG(same_file(a, b), "resumed 2-rank loss log differs from the straight run");
  /* the 2-rank checkpoint of step 3 continues on one process with batch 4 */
  CHECK(mkdir(p[6], 0777) == 0);
  snprintf(a, sizeof a, "%s/step3.safetensors", p[6]);
  CHECK(ck && spit(a, ck, n) == 0);
  free(ck);
  snprintf(b, sizeof b, "%s/loss.csv", p[6]);
  {
    char c0[400];
    snprintf(c0, sizeof c0, "%s/loss.csv", p[4]); /* the first 3 steps' log, for comparison */
    size_t ln = 0;
    unsigned char *lg = slurp(c0, &ln);
    /* keep the header and steps 1-3 */
    int lines = 0;
    size_t cut = 0;
    while (lg && cut < ln && lines < 4) if (lg[cut++] == '\n') lines++;
    CHECK(lg && spit(b, lg, cut) == 0);
    free(lg);
  }
  o = base(data, p[6], 1, 4);
  o.resume = a;
  CHECK_EQ_INT(run(1, o, 0), 0);
  compare_runs(p[0], p[6], 1e-6, 2e-5, "2-rank checkpoint resumed on 1 x 4 vs 1 x 4");

  /* the plan engine (bf16 weights in the plans) */
  o = base(data, p[8], 2, 4);
  CHECK_EQ_INT(run(1, o, 0), 0);
  o = base(data, p[9], 2, 2);
  CHECK_EQ_INT(run(2, o, 0), 0);
  compare_logs(p[8], p[9], 1e-3, "plan engine: 2 ranks x 2 vs 1 x 4");

  /* failures end the run on every rank */
  o = base(data, p[10], 1, 2);
  o.resume = "no/such/checkpoint.safetensors";
  CHECK(run(2, o, 0) == 1);

  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
