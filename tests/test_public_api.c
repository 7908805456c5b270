/* The public functions the CLI relies on instead of internal headers:
 * element access, plan step introspection, CUDA kernel calls (not
 * supported without CUDA), the reference Llama block, and the trainer's
 * progress callback (events, no default corpus, peak FLOP/s option), and
 * graphs and decoder profiles, refused by name on the CPU backend. */
#define _POSIX_C_SOURCE 200809L
#include "coda_decode.h"
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "train_corpus.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct seen {
  int n[8];
  int64_t last_step;
  int mfu_nan, dev_mem, val_on_step;
  const char *curve;
} seen;

static void on_progress(const coda_train_progress *p, void *user) {
  seen *s = user;
  CHECK((int)p->event >= 0 && (int)p->event < 8);
  s->n[p->event]++;
  if (p->event == CODA_TRAIN_EVENT_STEP) {
    CHECK(p->step == s->last_step + 1);
    s->last_step = p->step;
    CHECK(isfinite(p->loss) && p->tokens_per_s > 0 && p->step_seconds > 0);
    CHECK(p->elapsed_seconds >= p->step_seconds * 0.5);
    s->mfu_nan += isnan(p->mfu);
    s->dev_mem += p->device_memory;
    s->val_on_step += !isnan(p->val_loss);
  }
  if (p->event == CODA_TRAIN_EVENT_START) {
    CHECK(p->model && p->params > 0 && p->engine != CODA_TRAIN_ENGINE_AUTO && p->ranks == 1);
    CHECK(p->tokens_per_step == (int64_t)p->batch * p->seq * p->accum);
  }
  if (p->event == CODA_TRAIN_EVENT_DONE) CHECK(p->summary && p->loss_curve);
}

int main(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);

  /* graphs: the CPU backend records none, and says so */
  CHECK(coda_graph_begin(ctx) == CODA_ERR_NOT_SUPPORTED);
  CHECK(strstr(coda_last_error(ctx), "cpu") && strstr(coda_last_error(ctx), "no graphs"));
  coda_graph g = (coda_graph)&ctx; /* must be cleared on failure */
  CHECK(coda_graph_end(ctx, &g) == CODA_ERR_NOT_SUPPORTED && g == NULL);
  CHECK(coda_graph_end(ctx, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_graph_launch(ctx, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_graph_begin(NULL) == CODA_ERR_INVALID_ARGUMENT);
  coda_graph_destroy(NULL);

  /* the decoder's step profile needs device markers */
  {
    coda_model_config mc = {64, 32, 1, 2, 1, 64, 16, 0, 10000.0, 1e-5, {CODA_ROPE_DEFAULT, 0, 0, 0, 0}, CODA_FAMILY_LLAMA, 0, 0, 0, 0, 0, 0};
    coda_decoder_options o = coda_decoder_default_options();
    coda_decoder d = NULL;
    CHECK(coda_decoder_create_random(ctx, &mc, 1, &o, &d) == CODA_OK);
    int32_t tok = 1;
    const int32_t *pr[1] = {&tok};
    int len = 1;
    double ms[CODA_DECODE_PHASES];
    CHECK(coda_decoder_prefill(d, pr, &len) == CODA_OK);
    CHECK(coda_decoder_step_profile(d, &tok, ms) == CODA_ERR_NOT_SUPPORTED);
    CHECK(strstr(coda_last_error(ctx), "CPU") != NULL);
    CHECK(coda_decoder_graphs(d) == 0);
    CHECK(coda_decoder_phase_name(0) && !coda_decoder_phase_name(CODA_DECODE_PHASES));
    coda_decoder_destroy(d);
  }

  /* element access and rounding */
  uint16_t h[2] = {0, 0};
  coda_tensor t = coda_tensor_2d(h, CODA_BF16, 1, 2);
  coda_tensor_set(&t, 0, 1, 1.0 + 1.0 / 1024);
  CHECK(coda_tensor_get(&t, 0, 1) == 1.0);
  CHECK(coda_dtype_round(CODA_BF16, 1.0 + 3.0 / 256) == 1.0 + 1.0 / 64);
  CHECK(coda_dtype_round(CODA_F64, 0.1) == 0.1);

  /* plan steps */
  coda_llama_config c = coda_llama_default_config();
  coda_plan p;
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_OK);
  const int n = coda_plan_num_steps(p);
  CHECK(n > 4);
  int gemm_epi = 0, fwd = 0;
  for (int k = 0; k < n; k++) {
    coda_plan_step_info si;
    CHECK(coda_plan_step(p, k, &si) == CODA_OK);
    CHECK(si.label && !strcmp(si.label, coda_plan_step_label(p, k)));
    if (si.kind == CODA_PLAN_STEP_GEMM_EPILOGUE) {
      gemm_epi++;
      CHECK(si.program && *si.program);
    }
    fwd += si.phase == CODA_PHASE_FORWARD;
  }
  CHECK(gemm_epi > 0 && fwd > 0 && fwd < n);
  CHECK(coda_plan_step_label(p, n) == NULL);
  coda_plan_step_info si;
  CHECK(coda_plan_step(p, n, &si) == CODA_ERR_INVALID_ARGUMENT);
  /* a step runs alone after the earlier steps of its phase */
  CHECK(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK);
  CHECK(coda_plan_run_step(ctx, p, 0) == CODA_OK);
  CHECK(coda_plan_run_step(ctx, p, -1) == CODA_ERR_INVALID_ARGUMENT);
#ifndef CODA_HAVE_CUDA
  int built = -1;
  CHECK(coda_plan_precompile(p, 0, &built, NULL) == CODA_ERR_NOT_SUPPORTED);
  coda_program prog;
  CHECK(coda_program_builtin(ctx, coda_builtin_program_name(0), &prog) == CODA_OK);
  char *src = (char *)1;
  CHECK(coda_program_cuda_source(ctx, prog, &src) == CODA_ERR_NOT_SUPPORTED && src == NULL);
  coda_cuda_kernel_info ki;
  CHECK(coda_program_cuda_compile(ctx, prog, CODA_BF16, CODA_N, CODA_T, 0, &ki, NULL, NULL) ==
        CODA_ERR_NOT_SUPPORTED);
  coda_program_destroy(prog);
#endif
  coda_plan_destroy(p);

  /* trainer: no shards and no corpus is an error, not a default path */
  char dir[256], data[300], out[300];
  snprintf(dir, sizeof dir, "test_public_api.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  coda_train_options o = coda_train_default_options();
  CHECK(o.corpus_dir == NULL && o.progress == NULL && o.peak_flops == 0);
  CHECK(o.engine == CODA_TRAIN_ENGINE_AUTO);
  o.data_dir = data;
  o.out_dir = out;
  o.model.seq = 32;
  o.model.layers = 1;
  o.batch = 2;
  o.steps = 4;
  o.val_every = 2;
  o.val_batches = 1;
  coda_train_summary sum;
  CHECK(coda_train(ctx, &o, &sum) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "corpus"));
  CHECK(coda_prepare_corpus(ctx, NULL, data) == CODA_ERR_INVALID_ARGUMENT);
  size_t len;
  char *text = train_corpus(4242, 40000, &len);
  CHECK(coda_prepare_corpus_text(ctx, text, len, data, 10, NULL, NULL) == CODA_OK);
  free(text);
  o.peak_flops = -1;
  CHECK(coda_train(ctx, &o, &sum) == CODA_ERR_INVALID_ARGUMENT);
  o.peak_flops = 1e12; /* a CPU context reports no MFU all the same */
  seen s;
  memset(&s, 0, sizeof s);
  o.progress = on_progress;
  o.user = &s;
  CHECK(coda_train(ctx, &o, &sum) == CODA_OK);
  CHECK(sum.stopped == CODA_TRAIN_FINISHED && sum.steps_done == 4);
  CHECK(s.n[CODA_TRAIN_EVENT_START] == 1 && s.n[CODA_TRAIN_EVENT_VALIDATION] == 1);
  CHECK(s.n[CODA_TRAIN_EVENT_STEP] == 4 && s.n[CODA_TRAIN_EVENT_DONE] == 1);
  CHECK(s.n[CODA_TRAIN_EVENT_PREPARE] == 0 && s.n[CODA_TRAIN_EVENT_NONFINITE] == 0);
  CHECK(s.mfu_nan == 4 && s.dev_mem == 0 && s.val_on_step == 2);
  /* quiet: the summary only */
  memset(&s, 0, sizeof s);
  o.quiet = 1;
  o.out_dir = data; /* a fresh run directory */
  CHECK(coda_train(ctx, &o, &sum) == CODA_OK);
  CHECK(s.n[CODA_TRAIN_EVENT_DONE] == 1 && s.n[CODA_TRAIN_EVENT_STEP] == 0 &&
        s.n[CODA_TRAIN_EVENT_START] == 0);
  CHECK(remove_tree(dir) == 0);
  coda_context_destroy(ctx);
  printf("test_public_api: OK\n");
  return 0;
}
