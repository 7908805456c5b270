/* coda_train: the training loop (data, micro-batches, clipping, AdamW,
 * schedule, validation, checkpoints, loss curve).
 *
 * Precision: on the CPU the weights, gradients and both AdamW moments are
 * fp32 and the model computes in fp32. On the GPU bf16
 * weights feed the GEMMs, an fp32 master copy and fp32 m, v live next to
 * them; the fp32 master is rounded (to nearest even) into the plans' bf16
 * weight buffers before every forward; gradients are produced in bf16
 * or fp32 by the weight-gradient GEMMs and accumulated in fp32 across
 * micro-batches. Checkpoints always hold the fp32 master.
 *
 * On a CUDA context (plan engine only) the master weights, gradient and
 * moments stay on the device between steps (coda_plans_device_*): the
 * step's gradient norm comes down as a few partial sums, clipping is folded
 * into the device AdamW, and the weights and moments come down only for
 * checkpoints, in the CPU's file format, so runs move between CPU and GPU.
 * Step reports then add the model-flops utilization when the caller
 * gives the device's peak (per GPU with --ranks; tokens/s counts every
 * rank's tokens):
 *   flops/token = 6·N + 6·L·(Hq·hd)·T,  N = parameters without the input
 *   embedding and GPT-2's position table (lookups; the LM head's matrix
 *   counted also when tied), Hq·hd the
 *   attention width (d unless the family sets head_dim), and T per layer
 *   the keys a query sees at most (a windowed layer's window: Gemma 3's
 *   local layers, every layer of a Llama/Mistral sliding_window),
 *   MFU = flops/token · tokens/s / peak_flops.
 *
 * The library prints nothing: progress goes to the options' callback, on
 * rank 0 only (the CLI, src/tools/cmd_train.c, prints it). The phases
 * before the first step are in setup.c, the options' checks in options.c. */
#define _POSIX_C_SOURCE 200809L
#include "train/train.h"
#include "io/io.h"
#include "base/options.h"
#include "dist/comm.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double coda_train_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0.0;
  long pages = 0, res = 0;
  int ok = fscanf(f, "%ld %ld", &pages, &res) == 2;
  fclose(f);
  return ok ? (double)res * 4096.0 / (1024.0 * 1024.0) : 0.0;
}

/* The loss log: a new one for a fresh run. That of a resumed run: rows after the checkpoint's step (logged
 * before a kill, the checkpoint not yet saved) and a last row cut by the
 * kill are dropped, so the log continues exactly where the checkpoint
 * does; a missing or headerless log starts over with its header. */
static coda_status loss_log_open(coda_context ctx, const char *csv, int resume, int64_t step,
                                 FILE **out) {
  static const char header[] = "step,loss,lr,grad_norm,val_loss\n";
  unsigned char *b = NULL;
  size_t n = 0, keep = 0;
  struct stat cst;
  if (resume && stat(csv, &cst) == 0) {
    coda_status s = coda_read_file_max(ctx, csv, (uint64_t)1 << 32, &b, &n);
    if (s) return s;
    const size_t hl = sizeof header - 1;
    if (n >= hl && !memcmp(b, header, hl)) {
      keep = hl;
      long long prev = 0;
      for (size_t i = hl; i < n;) {
        const unsigned char *nl = memchr(b + i, '\n', n - i);
        if (!nl) break; /* cut by a kill */
        long long x = 0;
        size_t k = i;
        int digits = 0;
        while (k < n && b[k] >= '0' && b[k] <= '9' && digits < 18) {
          x = x * 10 + (b[k++] - '0');
          digits++;
        }
        if (!digits || b[k] != ',' || x <= prev || x > step) break;
        prev = x;
        i = keep = (size_t)(nl - b) + 1;
      }
    }
    free(b);
  }
  FILE *f = keep ? fopen(csv, "r+") : fopen(csv, "w");
  if (!f) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: %s", csv, strerror(errno));
  if (keep && (ftruncate(fileno(f), (off_t)keep) != 0 || fseek(f, 0, SEEK_END) != 0)) {
    coda_status s = coda_fail(ctx, CODA_ERR_IO, "%s: cannot truncate to the checkpoint's step "
                              "%lld: %s", csv, (long long)step, strerror(errno));
    fclose(f);
    return s;
  }
  if (!keep) fputs(header, f);
  *out = f;
  return CODA_OK;
}

/* A loss-log row (or the header) must reach the file: a full disk stops
 * the run rather than dropping rows. */
static coda_status loss_log_flush(coda_context ctx, FILE *log, const char *csv) {
  errno = 0;
  if (fflush(log) != 0 || ferror(log))
    return coda_fail(ctx, CODA_ERR_IO, "%s: write failed: %s; stopping (the loss log would "
                     "lose rows)", csv, errno ? strerror(errno) : "i/o error");
  return CODA_OK;
}

/* Data parallel: every rank draws the whole batch of ranks x B sequences
 * (so the sampler state stays that of one process with that batch) and
 * keeps its slice, rank r sequences r·B .. r·B + B - 1. gin/gtg hold the
 * whole batch (unused with one process). */
static coda_status draw(coda_context ctx, coda_sampler *smp, coda_comm comm, int B, int T,
                        int32_t *gin, int32_t *gtg, int32_t *in, int32_t *tg) {
  const int N = coda_comm_size(comm), r = coda_comm_rank(comm);
  if (N == 1) return coda_sampler_batch(ctx, smp, B, T, in, tg);
  coda_status s = coda_sampler_batch(ctx, smp, N * B, T, gin, gtg);
  if (s) return s;
  const size_t off = (size_t)r * B * T, cnt = (size_t)B * T;
  memcpy(in, gin + off, cnt * sizeof *in);
  memcpy(tg, gtg + off, cnt * sizeof *tg);
  return CODA_OK;
}

/* A validation loss over nb micro-batches. The stop request is polled
 * between batches (a step polls it once more after its validation): a stop cuts the validation short (*stopped = 1, *out
 * NaN). With data parallel the batches run no collective, so every rank
 * reaches the one sum below, which also tells every rank of a stop. */
static coda_status evaluate(coda_context ctx, const coda_train_options *o, coda_model *m,
                            const uint32_t *tok, uint64_t n, int nb, int B, int T,
                            coda_comm comm, int32_t *gin, int32_t *gtg, int32_t *in, int32_t *tg,
                            double *out, int *stopped) {
  /* The same validation windows every time (own RNG), so values compare. */
  coda_sampler vs = {tok, n, o->seed ^ 0x76616c6964ull, 0};
  double acc[3] = {0.0, 0.0, 0.0}; /* loss sum, valid targets, stops (summed over ranks) */
  for (int i = 0; i < nb; i++) {
    if (i > 0 && o->should_stop && o->should_stop(o->user)) {
      acc[2] = 1.0;
      break;
    }
    coda_status s = draw(ctx, &vs, comm, B, T, gin, gtg, in, tg);
    if (s) return s;
    double l;
    int64_t nv;
    s = coda_model_loss(ctx, m, in, tg, B, T, &l, &nv);
    if (s) return s;
    acc[0] += l * (double)nv;
    acc[1] += (double)nv;
    if (o->validation_progress && !o->quiet && coda_comm_rank(comm) == 0)
      o->validation_progress(i + 1, nb, o->user);
  }
  if (coda_comm_size(comm) > 1) {
    coda_status s = coda_comm_sum_host(ctx, comm, acc, 3);
    if (s) return s;
  }
  *stopped = acc[2] > 0.0;
  *out = acc[1] > 0 && !*stopped ? acc[0] / acc[1] : NAN;
  return CODA_OK;
}

/* Training flops per token (see the top of this file). */
static double flops_per_token(const coda_model_config *c) {
  double n = (double)coda_model_config_params(c) - (double)c->vocab * c->dim;
  if (c->tied) n += (double)c->vocab * c->dim;
  if (c->family == CODA_FAMILY_GPT2) n -= (double)c->seq * c->dim; /* wpe: a lookup too */
  double att = 0.0; /* keys seen per query: seq, a windowed layer's window at most */
  for (int li = 0; li < c->layers; li++) {
    const int w = coda_model_layer_window(c, li);
    att += w > 0 && w < c->seq ? w : c->seq;
  }
  return 6.0 * n + 6.0 * (double)c->heads * coda_model_head_dim(c) * att;
}

/* A progress report to the caller (rank 0 only; quiet keeps DONE,
 * WARNING, NONFINITE and INTERRUPTED). */
void coda_train_report(const coda_train_options *o, int lead, coda_train_progress *p) {
  if (!lead || !o->progress) return;
  if (o->quiet && p->event != CODA_TRAIN_EVENT_DONE && p->event != CODA_TRAIN_EVENT_WARNING &&
      p->event != CODA_TRAIN_EVENT_NONFINITE && p->event != CODA_TRAIN_EVENT_INTERRUPTED)
    return;
  o->progress(p, o->user);
}

coda_train_progress coda_train_progress_init(coda_train_event e, const coda_train_options *o) {
  coda_train_progress p;
  memset(&p, 0, sizeof p);
  p.event = e;
  p.val_loss = NAN;
  p.mfu = NAN;
  p.peak_flops = o->peak_flops;
  return p;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The loss log (lead only) and the START report. */
static coda_status begin_run(coda_train_run *r) {
  const coda_train_options *o = &r->o;
  if (r->lead) {
    coda_status s = loss_log_open(r->ctx, r->csv, o->resume != NULL, r->st.step, &r->log);
    if (!s) s = loss_log_flush(r->ctx, r->log, r->csv);
    if (s) return s;
  }
  const coda_model_config *c = r->c = coda_model_cfg(r->model);
  r->fpt = flops_per_token(c);
  coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_START, o);
  p.model = c;
  p.params = coda_model_config_params(c);
  p.engine = r->engine == CODA_ENGINE_PLANS ? CODA_TRAIN_ENGINE_PLANS : CODA_TRAIN_ENGINE_REFERENCE;
  p.gpu = r->gpu;
  p.train_tokens = r->trv.count;
  p.val_tokens = r->vav.count;
  p.batch = r->B;
  p.seq = r->T;
  p.accum = o->accum;
  p.ranks = r->N;
  p.sharded_weights = r->sharded;
  p.tokens_per_step = (int64_t)r->B * r->T * o->accum * r->N;
  p.steps = o->steps;
  p.resumed = o->resume != NULL;
  p.flops_per_token = r->fpt;
  coda_train_report(o, r->lead, &p);
  return CODA_OK;
}

/* AdamW, the profile and the plans' settings for the steps of this call. */
static coda_status prepare_steps(coda_train_run *r) {
  const coda_train_options *o = &r->o;
  r->adam = (coda_adamw){o->beta1, o->beta2, o->eps, o->weight_decay, r->ctx->opts.num_threads};
  r->start = r->st.step;
  /* the profile skips the first profile_warmup steps, but keeps one */
  const int64_t left = o->steps - r->start - 1;
  r->pwarm = o->profile_warmup;
  if (r->pwarm > left) r->pwarm = left > 0 ? left : 0;
  coda_model_set_plan_tuning(r->model, o->tune_plans);
  /* automatic: gpt2's head plan recomputes its logits (it cannot keep them) */
  const int keep = o->keep_logits < 0 && r->c->family == CODA_FAMILY_GPT2
                       ? 0
                       : coda_train_keep_logits(r->ctx, o, r->gpu, r->B, r->T, r->c->vocab);
  coda_model_set_keep_logits(r->model, keep);
  if (o->profile) {
    coda_status s = coda_prof_create(r->ctx, r->c->layers, o->accum, &r->prof);
    if (s) return s;
    coda_model_set_prof(r->model, r->prof);
  }
  return CODA_OK;
}

/* The validation of the validation shard (vl NaN when cut short). */
static coda_status validate(coda_train_run *r, double *vl, int *stopped) {
  return evaluate(r->ctx, &r->o, r->model, r->vav.tok, r->vav.count, r->o.val_batches, r->B, r->T,
                  r->comm, r->gin, r->gtg, r->in, r->tg, vl, stopped);
}

/* A fresh run's validation before its first step; a stop during it ends
 * the run before any step (nothing trained: nothing to save). */
static coda_status first_validation(coda_train_run *r, int *stopped_early) {
  const coda_train_options *o = &r->o;
  if (r->start == 0 && o->val_batches > 0) {
    double vl;
    coda_status s = validate(r, &vl, stopped_early);
    if (s) return s;
    if (!*stopped_early) {
      r->sum->first_val = vl;
      r->vx[r->nvh] = 0; r->vy[r->nvh++] = vl;
      coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_VALIDATION, o);
      p.val_loss = vl;
      p.elapsed_seconds = coda_train_now() - r->t_start;
      coda_train_report(o, r->lead, &p);
    }
  }
  if (*stopped_early) {
    r->sum->stopped = CODA_TRAIN_INTERRUPTED;
    coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_INTERRUPTED, o);
    p.step = r->st.step;
    p.elapsed_seconds = coda_train_now() - r->t_start;
    coda_train_report(o, r->lead, &p);
  }
  return CODA_OK;
}

/* The step's gradient over its micro-batches; *loss their mean loss. */
static coda_status step_gradients(coda_train_run *r, double *loss) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  coda_status s = CODA_OK;
  if (r->gpu) s = coda_plans_device_zero_grad(ctx, r->model);
  else {
    coda_prof_begin(ctx, r->prof);
    coda_model_zero_grad(r->model);
    coda_prof_end(ctx, r->prof, CODA_PH_OPTIM, -1);
  }
  *loss = 0.0;
  for (int a = 0; a < o->accum && !s; a++) {
    double l = 0.0;
    int64_t nv;
    s = draw(ctx, &r->sampler, r->comm, r->B, r->T, r->gin, r->gtg, r->in, r->tg);
    /* data parallel on the GPU: the last backward reduce-scatters */
    if (!s && r->dp && r->gpu && a == o->accum - 1) s = coda_plans_device_arm_reduce(ctx, r->model);
    /* each rank adds 1/N of its gradient: the sum over ranks is the mean */
    r->z3.micro = a;
    if (!s)
      s = coda_model_step(ctx, r->model, r->in, r->tg, r->B, r->T,
                          1.0f / (float)(o->accum * r->N), &l, &nv);
    if (!s) *loss += l / o->accum; /* loss = mean over micro-batches of their means */
  }
  return s;
}

/* The gradient's norm; data parallel also sums the loss and the stop
 * requests over the ranks (*stop_all). */
static coda_status step_grad_norm(coda_train_run *r, double *loss, double *gn, int *stop_all) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  coda_status s = CODA_OK;
  if (r->dp) {
    /* the shards' sums of squares, the losses and the stop requests, all
     * summed over the ranks in one small reduction */
    double v[3] = {0.0, *loss, o->should_stop && o->should_stop(o->user) ? 1.0 : 0.0};
    if (r->gpu) {
      s = coda_plans_device_shard_sumsq(ctx, r->model, &v[0]);
    } else {
      coda_prof_begin(ctx, r->prof);
      if (!r->sharded) s = coda_zero_cpu_reduce(ctx, r->zero, r->G); /* ZeRO-3: done in the backward */
      coda_prof_end(ctx, r->prof, CODA_PH_REDUCE, -1);
      coda_prof_begin(ctx, r->prof);
      v[0] = coda_zero_cpu_sumsq(r->zero);
      coda_prof_end(ctx, r->prof, CODA_PH_NORM, -1);
    }
    if (!s) s = coda_comm_sum_host(ctx, r->comm, v, 3);
    if (s) return s;
    *gn = sqrt(v[0]);
    *loss = v[1] / r->N;
    *stop_all = v[2] > 0.0;
  } else if (r->gpu) {
    s = coda_plans_device_grad_norm(ctx, r->model, gn);
  } else {
    coda_prof_begin(ctx, r->prof);
    *gn = coda_grad_norm(r->G, r->n);
    coda_prof_end(ctx, r->prof, CODA_PH_NORM, -1);
  }
  return s;
}

/* Clipping and AdamW at learning rate lr (step is 0-based). */
static coda_status step_update(coda_train_run *r, int64_t step, double lr, double gn) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  const int gpu = r->gpu, dp = r->dp;
  coda_status s = CODA_OK;
  if (gpu) { /* the clip factor (coda_clip_grad's, no data) scales inside AdamW */
    s = coda_plans_device_adamw(ctx, r->model, &r->adam, step + 1, lr,
                                coda_clip_grad(NULL, 0, gn, o->clip));
    /* the step's time includes its kernels; the update itself, where it
     * runs on the side queue, is waited for by the next forward */
    if (!s) s = coda_synchronize(ctx);
    return s;
  } else if (dp) { /* this rank's shard, then every rank's updated weights */
    coda_prof_begin(ctx, r->prof);
    coda_zero_cpu_update(r->zero, &r->adam, step + 1, lr, gn, o->clip, r->W);
    coda_prof_end(ctx, r->prof, CODA_PH_OPTIM, -1);
    coda_prof_begin(ctx, r->prof);
    if (!r->sharded) s = coda_zero_cpu_gather(ctx, r->zero, NULL, r->W); /* ZeRO-3: when read */
    coda_prof_end(ctx, r->prof, CODA_PH_REDUCE, -1);
    return s;
  }
  coda_prof_begin(ctx, r->prof);
  coda_clip_grad(r->G, r->n, gn, o->clip);
  for (int i = 0; i < coda_model_num_params(r->model); i++) {
    const coda_param *p = coda_model_param(r->model, i);
    if (o->optim_state == CODA_OPTIM_STATE_BF16)
      coda_adamw_update_bf16(&r->adam, step + 1, lr, p->decay, o->seed, p->offset,
                             r->W + p->offset, r->G + p->offset, r->mom + p->offset,
                             r->vel + p->offset, p->size);
    else
      coda_adamw_update(&r->adam, step + 1, lr, p->decay, r->W + p->offset, r->G + p->offset,
                        r->mom + p->offset, r->vel + p->offset, p->size);
  }
  coda_prof_end(ctx, r->prof, CODA_PH_OPTIM, -1);
  return CODA_OK;
}

/* The STEP report (not when quiet). */
static void report_step(coda_train_run *r, double loss, double vl, double lr, double gn,
                        double toks, double dt) {
  const coda_train_options *o = &r->o;
  if (!r->lead || !o->progress || o->quiet) return;
  coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_STEP, o);
  p.step = r->st.step;
  p.loss = loss;
  p.val_loss = vl;
  p.lr = lr;
  p.grad_norm = gn;
  p.tokens_per_s = toks / dt;
  p.step_seconds = dt;
  p.elapsed_seconds = coda_train_now() - r->t_start;
  p.flops_per_token = r->fpt;
  size_t dused = 0, dtot = 0;
  if (r->gpu && coda_plans_device_memory(r->ctx, &dused, &dtot) == CODA_OK) {
    p.device_memory = 1;
    p.device_bytes = dused;
    if (o->peak_flops > 0) p.mfu = r->fpt * toks / dt / o->peak_flops / r->N; /* per GPU */
  }
  p.host_bytes = (size_t)(rss_mib() * 1024.0 * 1024.0);
  coda_memory_info mi;
  if (coda_memory_stats(r->ctx, &mi) == CODA_OK) p.library_bytes = mi.current_bytes;
  coda_train_report(o, r->lead, &p);
}

/* The checkpoint. Data parallel: every rank takes part in gathering the
 * shards, the lead writes the one-process format. */
static coda_status save(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const int gpu = r->gpu, dp = r->dp;
  const double t_save = coda_train_now();
  coda_status s = CODA_OK;
  r->st.rng = r->sampler.rng;
  r->st.drawn = r->sampler.drawn;
  if (gpu && !dp) { /* streamed from the device: no host copy */
    s = coda_checkpoint_save_device(ctx, r->ckpt, r->model, &r->st);
  } else {
    if (gpu) s = coda_plans_device_download(ctx, r->model, r->mom, r->vel);
    else if (dp) s = coda_zero_cpu_gather(ctx, r->zero, r->zero->ms, r->mom);
    if (!s && !gpu && dp) s = coda_zero_cpu_gather(ctx, r->zero, r->zero->vs, r->vel);
    if (!s && r->sharded) s = coda_zero_cpu_gather(ctx, r->zero, NULL, r->W); /* the whole model */
    if (!s && r->lead) s = coda_checkpoint_save(ctx, r->ckpt, r->model, r->mom, r->vel, &r->st);
    if (r->sharded) coda_zero3_release_all(&r->z3);
  }
  if (s) return s;
  if (r->lead) snprintf(r->sum->checkpoint, sizeof r->sum->checkpoint, "%s", r->ckpt);
  r->sum->save_seconds += coda_train_now() - t_save;
  r->sum->saves++;
  return CODA_OK;
}

/* After a step's update: the summary, the curves, validation, the loss
 * log, the STEP report, a checkpoint when due; *end when the run stops. */
static coda_status step_record(coda_train_run *r, double loss, double lr, double gn, double dt,
                               int stop_all, int *end) {
  const coda_train_options *o = &r->o;
  coda_train_summary *sum = r->sum;
  const int64_t step = r->st.step;
  coda_status s = CODA_OK;
  double toks = (double)r->B * r->T * o->accum * r->N; /* all ranks */
  r->tok_total += toks;
  r->sec_total += dt;
  if (isnan(sum->first_loss)) {
    sum->first_loss = loss;
    sum->first_step_seconds = coda_train_now() - r->t_enter;
  }
  sum->final_loss = loss;
  sum->steps_done++;
  r->hx[r->nh] = (double)step; r->hy[r->nh++] = loss;
  double vl = NAN;
  int do_val = o->val_batches > 0 && ((o->val_every > 0 && step % o->val_every == 0) ||
                                      step == o->steps);
  int val_stop = 0; /* a stop during this validation: it is cut short */
  if (do_val) {
    s = validate(r, &vl, &val_stop);
    if (s) return s;
    if (!val_stop) {
      if (isnan(sum->first_val)) sum->first_val = vl;
      sum->final_val = vl;
      r->vx[r->nvh] = (double)step; r->vy[r->nvh++] = vl;
    }
  }
  if (r->log) {
    fprintf(r->log, "%lld,%.9g,%.9g,%.9g,%.9g\n", (long long)step, loss, lr, gn, vl);
    s = loss_log_flush(r->ctx, r->log, r->csv);
    if (s) return s;
  }
  report_step(r, loss, vl, lr, gn, toks, dt);
  /* data parallel: the stop request was summed over the ranks above, so
   * every rank stops after the same step */
  int stop = val_stop || (r->dp ? stop_all : o->should_stop && o->should_stop(o->user));
  if (stop || step == o->steps || (o->save_every > 0 && step % o->save_every == 0)) {
    s = save(r);
    if (s) return s;
  }
  if (stop) {
    sum->stopped = CODA_TRAIN_INTERRUPTED;
    coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_INTERRUPTED, o);
    p.step = step;
    p.loss = loss;
    p.checkpoint = r->ckpt;
    p.elapsed_seconds = coda_train_now() - r->t_start;
    coda_train_report(o, r->lead, &p);
    *end = 1;
  }
  return CODA_OK;
}

/* One optimizer step (0-based step); *end when the run stops after it (a
 * non-finite loss or norm, or a stop request). */
static coda_status train_step(coda_train_run *r, int64_t step, int *end) {
  const coda_train_options *o = &r->o;
  double t0 = coda_train_now();
  coda_prof_step_start(r->prof, step - r->start >= r->pwarm);
  double loss, gn = 0.0;
  int stop_all = 0;
  coda_status s = step_gradients(r, &loss);
  if (!s) s = step_grad_norm(r, &loss, &gn, &stop_all);
  if (s) return s;
  if (!isfinite(loss) || !isfinite(gn)) {
    r->sum->stopped = CODA_TRAIN_NONFINITE;
    r->sum->bad_step = step + 1;
    coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_NONFINITE, o);
    p.step = step + 1;
    p.loss = loss;
    p.grad_norm = gn;
    p.checkpoint = file_exists(r->ckpt) ? r->ckpt : NULL;
    p.elapsed_seconds = coda_train_now() - r->t_start;
    coda_train_report(o, r->lead, &p);
    *end = 1;
    return CODA_OK;
  }
  double lr = coda_lr_schedule(step, o->warmup, o->steps, o->lr, o->min_lr_ratio);
  s = step_update(r, step, lr, gn);
  if (s) return s;
  r->st.step = step + 1;
  r->st.last_loss = loss;
  double dt = coda_train_now() - t0;
  s = coda_prof_step_end(r->ctx, r->prof, dt);
  if (s) return s;
  return step_record(r, loss, lr, gn, dt, stop_all, end);
}

/* The end of a run: the loss log closed, the plot, the profile and the
 * DONE report (the last two even when quiet). */
static coda_status end_run(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  coda_train_summary *sum = r->sum;
  sum->seconds = coda_train_now() - r->t_start;
  sum->tokens_per_s = r->sec_total > 0 ? r->tok_total / r->sec_total : 0.0;
  if (r->log) { /* the last rows must be on disk before the run counts as done */
    FILE *l = r->log;
    r->log = NULL;
    errno = 0;
    if (fclose(l) != 0)
      return coda_fail(ctx, CODA_ERR_IO, "%s: write failed on close: %s", r->csv,
                       errno ? strerror(errno) : "i/o error");
  }
  int chart_written = r->nh + r->nvh > 0;
  if (r->lead && r->nh + r->nvh > 0) {
    char title[512];
    snprintf(title, sizeof title, "%s: training and validation loss", o->out_dir);
    coda_status ps = coda_plot_loss_svg(ctx, r->svg, title, 720, 440, r->hx, r->hy, r->nh, r->vx,
                                        r->vy, r->nvh);
    if (ps) {
      chart_written = 0;
      char msg[CODA_ERRMSG_LEN + 32];
      snprintf(msg, sizeof msg, "loss plot not written: %s", coda_last_error(ctx));
      coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_WARNING, o);
      p.message = msg;
      coda_train_report(o, r->lead, &p);
    }
  }
  if (r->prof) { /* the step profile, also when quiet */
    coda_train_profile pr;
    const double adam_n = r->dp && r->zero ? (double)r->zero->nshard : (double)r->n;
    /* bytes a parameter: AdamW reads w, g, m, v and writes w, m, v;
     * zeroing writes g (fp32 g; w, m, v fp32 or bf16) */
    const double per = o->optim_state == CODA_OPTIM_STATE_BF16 ? 20.0 : 32.0;
    coda_prof_report(r->prof, r->c, (double)r->B * r->T * o->accum, adam_n * per, o->peak_flops,
                     o->peak_bandwidth, r->pwarm, r->gpu, &pr);
    coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_PROFILE, o);
    p.step = r->st.step;
    p.gpu = r->gpu;
    p.ranks = r->N;
    p.profile = &pr;
    if (r->lead && o->progress) o->progress(&p, o->user);
  }
  /* the summary is reported even when quiet */
  coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_DONE, o);
  p.step = r->st.step;
  p.loss = sum->final_loss;
  p.val_loss = sum->final_val;
  p.tokens_per_s = sum->tokens_per_s;
  p.elapsed_seconds = sum->seconds;
  p.flops_per_token = r->fpt;
  p.gpu = r->gpu;
  p.ranks = r->N;
  if (r->gpu && o->peak_flops > 0) p.mfu = r->fpt * sum->tokens_per_s / o->peak_flops / r->N;
  p.host_bytes = (size_t)(rss_mib() * 1024.0 * 1024.0);
  p.checkpoint = sum->checkpoint[0] ? sum->checkpoint : NULL;
  p.summary = sum;
  p.loss_curve = chart_written ? r->svg : NULL;
  coda_train_report(o, r->lead, &p);
  return CODA_OK;
}

static void free_run(coda_train_run *r) {
  if (r->log) fclose(r->log);
  if (r->model) coda_model_set_ref_hooks(r->model, NULL);
  coda_prof_destroy(r->ctx, r->prof);
  coda_model_destroy(r->model);
  coda_zero_destroy(r->zero);
  coda_shard_close(&r->trv); coda_shard_close(&r->vav);
  free(r->mom); free(r->vel); free(r->in); free(r->tg); free(r->gin); free(r->gtg);
  free(r->hx); free(r->hy); free(r->vx); free(r->vy);
  free(r->data_dir); free(r->trp); free(r->vap); free(r->ckpt); free(r->svg); free(r->csv);
}

/* The steps of this call, from the first validation to a stop or the
 * last step. */
static coda_status run_steps(coda_train_run *r) {
  r->t_start = coda_train_now();
  int stopped_early = 0; /* a stop during the first validation: no step runs */
  coda_status s = first_validation(r, &stopped_early);
  if (s) return s;
  r->W = coda_model_weights(r->model);
  r->G = coda_model_grads(r->model);
  for (int64_t step = r->start; step < r->o.steps && !stopped_early; step++) {
    int end = 0;
    s = train_step(r, step, &end);
    if (s) return s;
    if (end) break;
  }
  return CODA_OK;
}

coda_status coda_train(coda_context ctx, const coda_train_options *opts,
                       coda_train_summary *sum) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!opts || !sum) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL options or summary");
  coda_train_run run, *r = &run;
  memset(r, 0, sizeof *r);
  r->ctx = ctx;
  r->sum = sum;
  r->t_enter = coda_train_now();
  r->o = coda_train_default_options();
  /* One layout: coda_model_config, the struct's first member after
   * struct_size, grew (family, head_dim; then Gemma 3's window, layer
   * pattern, local RoPE base, score scalar and soft cap) in 0.2, which moved every member
   * after it, so a struct of an earlier layout cannot be read; its size
   * is refused with the size expected. */
  static const coda_options_layout layouts[] = {CODA_OPTIONS_LAYOUT(coda_train_options)};
  if (coda_options_take(ctx, "coda_train_options", opts, &r->o, layouts, 1))
    return CODA_ERR_INVALID_ARGUMENT;
  /* data parallel: N ranks, rank 0 (the lead) prints, logs and saves */
  r->comm = r->o.comm && coda_comm_size(r->o.comm) > 1 ? r->o.comm : NULL;
  r->N = coda_comm_size(r->comm);
  r->lead = coda_comm_rank(r->comm) == 0;
  r->dp = r->comm != NULL;
  if (!r->lead) r->o.quiet = 1;
  memset(sum, 0, sizeof *sum);
  sum->first_val = sum->final_val = NAN;
  sum->first_loss = sum->final_loss = NAN;
  sum->first_step_seconds = NAN;
  coda_status s = coda_train_check_options(ctx, &r->o);
  if (!s && r->dp) s = coda_train_check_same_options(ctx, r->comm, &r->o);
  if (s) return s;
  r->sharded = r->dp && r->o.shard_weights;
  r->st = (coda_train_state){0, 0, 0, NAN, "", 0, 0};
  s = coda_train_setup_data(r);
  if (!s) s = coda_train_setup_model(r);
  if (!s) s = coda_train_setup_state(r);
  if (!s) s = begin_run(r);
  if (!s) s = prepare_steps(r);
  if (!s) s = run_steps(r);
  if (!s) s = end_run(r);
  free_run(r);
  return s;
}
