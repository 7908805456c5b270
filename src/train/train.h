/* Internal interface of src/train: the training loop, cut into phases
 * that share one coda_train_run (options.c: the options' defaults and
 * checks; setup.c: data, model and state before the first step;
 * trainer.c: coda_train, the steps, validation, saves and the end),
 * evaluation (eval.c) and the loss plot (plot.c). The public entry points
 * are in coda_train.h. */
#ifndef CODA_TRAIN_H
#define CODA_TRAIN_H

#include "coda_train.h"
#include "base/internal.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"

#include <stdint.h>
#include <stdio.h>

/* Writes the loss chart as an SVG of w x h pixels: the title, the axes
 * (step, loss) with tick values, the training series (x1, y1) and the
 * validation series (x2, y2; n2 may be 0) as lines (a NaN point is
 * skipped and breaks its line), and a legend. */
coda_status coda_plot_loss_svg(coda_context ctx, const char *path, const char *title,
                               int w, int h, const double *x1, const double *y1, int n1,
                               const double *x2, const double *y2, int n2);
/* The same chart (720 x 440) from a loss log: a CSV whose header names
 * step, loss and optionally val_loss (the trainer's loss.csv; "nan" where
 * a step had no validation). */
coda_status coda_plot_loss_csv(coda_context ctx, const char *csv, const char *svg,
                               const char *title);

/* ------------------------------------------------------ options (options.c) */

/* Token counts are ints in the engines: batch x seq x ranks is bounded per
 * micro-batch. */
#define CODA_MAX_BATCH_TOKENS (1 << 24)
/* The loss history is one array of steps + 1 entries. */
#define CODA_MAX_STEPS (1LL << 27)

/* Ranges of every option that does not depend on the data or the model. */
coda_status coda_train_check_options(coda_context ctx, const coda_train_options *o);
/* Data parallel: every rank was started with the same options (a
 * collective: every rank calls it). */
coda_status coda_train_check_same_options(coda_context ctx, coda_comm comm,
                                          const coda_train_options *o);
/* keep_logits resolved for a B x T batch over vocabulary V. */
int coda_train_keep_logits(coda_context ctx, const coda_train_options *o, int gpu, int64_t B,
                           int64_t T, int64_t V);

/* ---------------------------------------------- one run (setup.c, trainer.c) */

/* ZeRO-3 on the CPU reference engine: the model's hooks (coda_ref_hooks)
 * gather, release and reduce-scatter bucket by bucket through coda_zero. */
typedef struct coda_zero3_hooks {
  coda_ref_hooks h;
  coda_context ctx;
  coda_zero *z;
  float *W, *G;
  int micro; /* the micro-batch of the step: the later ones add to the shard */
} coda_zero3_hooks;
/* Every bucket's pieces of other ranks released (after a whole-model
 * gather). */
void coda_zero3_release_all(coda_zero3_hooks *q);

/* The state of one coda_train call, handed from phase to phase. Pointers
 * are NULL until their phase sets them; coda_train frees them all at the
 * end, on success and on error alike. Data parallel: N ranks, rank 0 (the
 * lead) prints, logs and saves. */
typedef struct coda_train_run {
  coda_context ctx;
  coda_train_options o;  /* the caller's, resolved (the checkpoint's model wins) */
  coda_train_summary *sum;
  coda_comm comm;        /* NULL: one process */
  int N, lead, dp, sharded, gpu;
  double t_enter;        /* when coda_train was called */
  char *data_dir, *trp, *vap, *ckpt, *svg, *csv;
  coda_shard_view trv, vav; /* mapped (uint32 shards) or read */
  coda_engine engine;
  coda_model *model;
  const coda_model_config *c;
  size_t n;              /* values in the flat weight buffer */
  int B, T;
  float *mom, *vel, *W, *G;
  int32_t *in, *tg, *gin, *gtg; /* this rank's batch; all ranks' (data parallel) */
  double *hx, *hy, *vx, *vy;    /* the loss and validation curves */
  int nh, nvh;
  coda_train_state st;
  coda_zero *zero;
  coda_zero3_hooks z3;   /* weight sharding (options.shard_weights) */
  coda_sampler sampler;
  FILE *log;
  coda_prof *prof;       /* step profile (options.profile) */
  coda_adamw adam;
  int64_t start, pwarm;  /* the first step of this call; profiled warm-up */
  double fpt, t_start, tok_total, sec_total;
} coda_train_run;

/* The phases before the first step, in order (setup.c): the token shards
 * (prepared from the corpus when missing), the model's configuration and
 * buffers, and its weights, optimizer state and sampler. */
coda_status coda_train_setup_data(coda_train_run *r);
coda_status coda_train_setup_model(coda_train_run *r);
coda_status coda_train_setup_state(coda_train_run *r);

/* Progress to the caller (rank 0 only; quiet keeps DONE, WARNING,
 * NONFINITE and INTERRUPTED), and a report of event e with no values yet. */
void coda_train_report(const coda_train_options *o, int lead, coda_train_progress *p);
coda_train_progress coda_train_progress_init(coda_train_event e, const coda_train_options *o);
/* The monotonic clock in seconds. */
double coda_train_now(void);

#endif
