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
 *   flops/token = 6·N + 6·L·d·T,  N = parameters without the input
 *   embedding (the LM head's matrix counted also when tied),
 *   MFU = flops/token · tokens/s / peak_flops.
 *
 * The library prints nothing: progress goes to the options' callback, on
 * rank 0 only (the CLI, src/tools/cmd_train.c, prints it). */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "train/train.h"
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

#define CODA_MAX_BATCH_TOKENS (1 << 24)
#define CODA_MAX_STEPS (1LL << 27)

coda_train_options coda_train_default_options(void) {
  coda_train_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  coda_model_config_named("tiny", &o.model);
  o.batch = 8;
  o.accum = 1;
  o.steps = 200;
  o.warmup = 20;
  o.lr = 3e-3;
  o.min_lr_ratio = 0.1;
  o.weight_decay = 0.1;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.clip = 1.0;
  o.seed = 1;
  o.val_every = 50;
  o.val_batches = 4;
  o.save_every = 0;
  o.out_dir = "runs/tiny";
  o.profile_warmup = 1;
  o.tune_plans = 1;
  o.keep_logits = -1;
  return o;
}

static double now_s(void) {
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

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static coda_status mkdirs(coda_context ctx, const char *dir) {
  char *d = strdup(dir);
  if (!d) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(d, 0777) != 0 && errno != EEXIST) break;
    *p = '/';
  }
  int ok = mkdir(d, 0777) == 0 || errno == EEXIST;
  free(d);
  if (!ok) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
  return CODA_OK;
}

static int path_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
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
  if (resume && path_exists(csv)) {
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

coda_status coda_prepare_corpus(coda_context ctx, const char *src_dir, const char *out_dir) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!out_dir || !*out_dir)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "prepare corpus: no output directory");
  if (!src_dir || !*src_dir)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "prepare corpus: no source directory");
  coda_status s = mkdirs(ctx, out_dir);
  if (s) return s;
  return coda_prepare_corpus_dir(ctx, src_dir, out_dir, 20, NULL, NULL);
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

/* keep_logits resolved: automatic (-1) keeps the head's logits on a GPU
 * where they take at most 1/16 of its memory (the kept GEMM is faster
 * wherever it was measured; the bound leaves the memory to the blocks at
 * large vocabularies and long batches). */
static int keep_logits_for(coda_context ctx, const coda_train_options *o, int gpu, int64_t B,
                           int64_t T, int64_t V) {
  if (o->keep_logits >= 0) return o->keep_logits != 0;
  size_t used = 0, total = 0;
  if (!gpu || coda_plans_device_memory(ctx, &used, &total) != CODA_OK) return 0;
  return (double)B * (double)T * (double)V * 2.0 <= (double)total / 16.0;
}

static coda_status check_options(coda_context ctx, const coda_train_options *o) {
  if (o->keep_logits < -1 || o->keep_logits > 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "keep_logits %d: 1 (keep the head's logits), "
                     "0 (recompute them) or -1 (automatic)", o->keep_logits);
  if (o->batch < 1 || o->accum < 1 || o->steps < 1 || o->warmup < 0 || o->val_batches < 0 ||
      o->val_every < 0 || o->save_every < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "batch %d, accum %d, steps %lld must be >= 1; warmup, val-every, "
                     "val-batches, save-every >= 0",
                     o->batch, o->accum, (long long)o->steps);
  /* The loss history is one array of steps + 1 entries. */
  if (o->steps > CODA_MAX_STEPS)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "steps %lld: at most %lld",
                     (long long)o->steps, (long long)CODA_MAX_STEPS);
  if (!(o->lr > 0.0 && isfinite(o->lr)) || !(o->min_lr_ratio >= 0.0 && isfinite(o->min_lr_ratio)) ||
      !(o->weight_decay >= 0.0 && isfinite(o->weight_decay)) ||
      !(o->beta1 >= 0.0 && o->beta1 < 1.0) || !(o->beta2 >= 0.0 && o->beta2 < 1.0) ||
      !(o->eps > 0.0 && isfinite(o->eps)) || !(o->clip >= 0.0 && isfinite(o->clip)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "optimizer settings out of range: lr %g (finite, > 0), min-lr-ratio %g, "
                     "weight-decay %g, clip %g (finite, >= 0), betas %g, %g (in [0, 1)), eps %g "
                     "(> 0)", o->lr, o->min_lr_ratio, o->weight_decay, o->clip, o->beta1,
                     o->beta2, o->eps);
  if ((int)o->engine < CODA_TRAIN_ENGINE_AUTO || (int)o->engine > CODA_TRAIN_ENGINE_PLANS)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "engine %d: 0 auto, 1 reference, 2 plans",
                     (int)o->engine);
  if (!(o->peak_flops >= 0.0 && isfinite(o->peak_flops)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "peak flops %g: finite, >= 0 (0: unknown)",
                     o->peak_flops);
  if (!(o->peak_bandwidth >= 0.0 && isfinite(o->peak_bandwidth)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "peak bandwidth %g: finite, >= 0 (0: "
                     "unknown)", o->peak_bandwidth);
  if (o->profile_warmup < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "profile warm-up %d: >= 0 steps",
                     o->profile_warmup);
  if (!o->out_dir || !*o->out_dir)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "no output directory");
  if (o->comm && coda_comm_size(o->comm) > 1) {
    const int gpu = coda_context_backend(ctx) == CODA_BACKEND_CUDA;
    const coda_comm_kind k = coda_comm_get_kind(o->comm);
    if (gpu != (k == CODA_COMM_NCCL))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "data parallel on the %s needs the %s "
                       "communicator", gpu ? "GPU" : "CPU", gpu ? "NCCL" : "CPU");
  }
  return CODA_OK;
}

/* Training flops per token (see the top of this file). */
static double flops_per_token(const coda_model_config *c) {
  double n = (double)coda_model_config_params(c) - (double)c->vocab * c->dim;
  if (c->tied) n += (double)c->vocab * c->dim;
  return 6.0 * n + 6.0 * c->layers * (double)c->dim * c->seq;
}

coda_engine coda_engine_from_option(coda_train_engine e) {
  if (e == CODA_TRAIN_ENGINE_REFERENCE) return CODA_ENGINE_REFERENCE;
  if (e == CODA_TRAIN_ENGINE_PLANS) return CODA_ENGINE_PLANS;
  return coda_plans_available() ? CODA_ENGINE_PLANS : CODA_ENGINE_REFERENCE;
}

/* A progress report to the caller (rank 0 only; quiet keeps DONE,
 * WARNING, NONFINITE and INTERRUPTED). */
static void report(const coda_train_options *o, int lead, coda_train_progress *p) {
  if (!lead || !o->progress) return;
  if (o->quiet && p->event != CODA_TRAIN_EVENT_DONE && p->event != CODA_TRAIN_EVENT_WARNING &&
      p->event != CODA_TRAIN_EVENT_NONFINITE && p->event != CODA_TRAIN_EVENT_INTERRUPTED)
    return;
  o->progress(p, o->user);
}

static coda_train_progress progress_init(coda_train_event e, const coda_train_options *o) {
  coda_train_progress p;
  memset(&p, 0, sizeof p);
  p.event = e;
  p.val_loss = NAN;
  p.mfu = NAN;
  p.peak_flops = o->peak_flops;
  return p;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Data parallel: every rank must train with the same options (a rank with
 * another learning rate would update its shard differently, silently). A
 * 20-bit digest k of the options that must agree is summed over the ranks
 * with k²: both sums equal N·k and N·k² on a rank only when every rank has
 * that k (equality in Cauchy-Schwarz), and they stay exact in doubles.
 * Paths, threads, output and the profile may differ between ranks. */
static coda_status check_same_options(coda_context ctx, coda_comm comm,
                                      const coda_train_options *o) {
  const coda_model_config *c = &o->model;
  const int iv[] = {c->vocab, c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->seq, c->tied,
                    o->batch, o->accum, o->val_every, o->val_batches, o->save_every,
                    (int)o->engine, (int)o->model_set, o->resume != NULL, o->init != NULL,
                    o->shard_weights};
  const double dv[] = {c->rope_theta, c->norm_eps, o->lr, o->min_lr_ratio, o->weight_decay,
                       o->beta1, o->beta2, o->eps, o->clip};
  const int64_t lv[] = {o->steps, o->warmup, (int64_t)o->seed};
  uint64_t h = 1469598103934665603ull;
  h = fnv1a(h, iv, sizeof iv);
  h = fnv1a(h, dv, sizeof dv);
  h = fnv1a(h, lv, sizeof lv);
  const double k = (double)(h >> 44), n = (double)coda_comm_size(comm);
  double v[2] = {k, k * k};
  coda_status s = coda_comm_sum_host(ctx, comm, v, 2);
  if (s) return s;
  if (v[0] != n * k || v[1] != n * k * k)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "rank %d: the ranks were started with "
                     "different training options (model shape, batch, accumulation, steps, "
                     "optimizer, seed, engine, validation or checkpoint schedule, --resume, "
                     "--init or --zero); every rank needs the same", coda_comm_rank(comm));
  return CODA_OK;
}

/* ZeRO-3 on the CPU reference engine: the model's hooks (coda_ref_hooks)
 * gather, release and reduce-scatter bucket by bucket through coda_zero. */
typedef struct zero3_hooks {
  coda_ref_hooks h;
  coda_context ctx;
  coda_zero *z;
  float *W, *G;
  int micro; /* the micro-batch of the step: the later ones add to the shard */
} zero3_hooks;
static coda_status zero3_gather(void *u, int k) {
  zero3_hooks *q = u;
  return coda_zero_cpu_gather_bucket(q->ctx, q->z, k, q->W);
}
static void zero3_release(void *u, int k) {
  zero3_hooks *q = u;
  coda_zero_cpu_release_bucket(q->z, k, q->W);
}
static coda_status zero3_grad_done(void *u, int k) {
  zero3_hooks *q = u;
  return coda_zero_cpu_reduce_bucket(q->ctx, q->z, k, q->G, q->micro > 0);
}
static void zero3_release_all(zero3_hooks *q) {
  for (int k = 0; k < q->z->nb; k++) coda_zero_cpu_release_bucket(q->z, k, q->W);
}

coda_status coda_train(coda_context ctx, const coda_train_options *opts,
                       coda_train_summary *sum) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!opts || !sum) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL options or summary");
  const double t_enter = now_s();
  coda_train_options o = coda_train_default_options();
  /* layout 1: up to keep_logits (validation_progress came after) */
  static const coda_options_layout layouts[] = {
      {offsetof(coda_train_options, validation_progress), offsetof(coda_train_options, keep_logits) + sizeof(int)},
      CODA_OPTIONS_LAYOUT(coda_train_options)};
  if (coda_options_take(ctx, "coda_train_options", opts, &o, layouts, 2))
    return CODA_ERR_INVALID_ARGUMENT;
  /* data parallel: N ranks, rank 0 (the lead) prints, logs and saves */
  coda_comm comm = o.comm && coda_comm_size(o.comm) > 1 ? o.comm : NULL;
  const int N = coda_comm_size(comm), lead = coda_comm_rank(comm) == 0, dp = comm != NULL;
  if (!lead) o.quiet = 1;
  memset(sum, 0, sizeof *sum);
  sum->first_val = sum->final_val = NAN;
  sum->first_loss = sum->final_loss = NAN;
  sum->first_step_seconds = NAN;
  coda_status s = check_options(ctx, &o);
  if (!s && dp) s = check_same_options(ctx, comm, &o);
  if (s) return s;
  s = mkdirs(ctx, o.out_dir);
  if (s) return s;

  coda_model *model = NULL;
  const uint32_t *tr = NULL, *va = NULL;
  coda_shard_view trv = {0}, vav = {0}; /* mapped (uint32 shards) or read */
  float *mom = NULL, *vel = NULL;
  int32_t *in = NULL, *tg = NULL, *gin = NULL, *gtg = NULL;
  coda_zero *zero = NULL;
  zero3_hooks z3; /* weight sharding (options.shard_weights) */
  memset(&z3, 0, sizeof z3);
  const int sharded = dp && o.shard_weights;
  coda_prof *prof = NULL; /* step profile (options.profile) */
  double *hx = NULL, *hy = NULL, *vx = NULL, *vy = NULL;
  char *data_dir = NULL, *trp = NULL, *vap = NULL, *ckpt = NULL, *svg = NULL, *csv = NULL;
  FILE *log = NULL;
  uint64_t ntr = 0, nva = 0;

  /* ---- data ---- */
  data_dir = o.data_dir ? strdup(o.data_dir) : join(o.out_dir, "data");
  if (!data_dir) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory"); goto done; }
  trp = join(data_dir, "train.tok");
  vap = join(data_dir, "val.tok");
  ckpt = join(o.out_dir, "checkpoint.safetensors");
  svg = join(o.out_dir, "loss.svg");
  csv = join(o.out_dir, "loss.csv");
  if (!trp || !vap || !ckpt || !svg || !csv) {
    s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  if (lead && (!file_exists(trp) || !file_exists(vap))) {
    /* Never prepared over a file of the user's: one shard without the
     * other is an error naming the missing one. */
    const int htr = path_exists(trp), hva = path_exists(vap);
    struct stat dst;
    if (htr || hva) {
      const char *have = htr ? trp : vap, *miss = htr ? vap : trp;
      s = coda_fail(ctx, CODA_ERR_IO, "%s is missing (or not a regular file) next to %s; give "
                    "both token shards, or a data directory without either to prepare them",
                    path_exists(miss) ? have : miss, path_exists(miss) ? miss : have);
    } else if (o.data_dir && !o.corpus_dir && stat(o.data_dir, &dst) != 0) {
      s = coda_fail(ctx, CODA_ERR_IO, "%s: no such data directory (token shards train.tok and "
                    "val.tok)", o.data_dir);
    } else if (o.data_dir && stat(o.data_dir, &dst) == 0 && !S_ISDIR(dst.st_mode)) {
      s = coda_fail(ctx, CODA_ERR_IO, "%s: not a directory (the data directory holds the token "
                    "shards train.tok and val.tok)", o.data_dir);
    } else if (!o.corpus_dir) {
      s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "no token shards %s and %s, and no corpus "
                    "directory to prepare them from (corpus_dir)", trp, vap);
    } else {
      coda_train_progress p = progress_init(CODA_TRAIN_EVENT_PREPARE, &o);
      p.data_dir = data_dir;
      p.corpus_dir = o.corpus_dir;
      report(&o, lead, &p);
      s = coda_prepare_corpus(ctx, o.corpus_dir, data_dir);
    }
  }
  if (dp) { /* the other ranks wait for the lead's shards */
    double bad = s != CODA_OK;
    coda_status s2 = coda_comm_sum_host(ctx, comm, &bad, 1);
    if (!s && s2) s = s2;
    if (!s && bad > 0) s = coda_fail(ctx, CODA_ERR_IO, "rank 0 could not prepare the token shards");
  }
  if (s) goto done;
  uint32_t voc, vvoc = 0;
  s = coda_shard_open(ctx, trp, &trv);
  if (!s) s = coda_shard_open(ctx, vap, &vav);
  if (s) goto done;
  tr = trv.tok; ntr = trv.count; voc = trv.vocab;
  va = vav.tok; nva = vav.count; vvoc = vav.vocab;

  /* ---- model and state ---- */
  coda_train_state st = {0, 0, 0, NAN, "", 0, 0};
  coda_engine engine = coda_engine_from_option(o.engine);
  const int gpu = coda_context_backend(ctx) == CODA_BACKEND_CUDA;
  if (gpu && engine != CODA_ENGINE_PLANS) {
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                  "on the GPU the trainer runs the plan engine (--engine plans or auto), not the "
                  "host reference");
    goto done;
  }
  if (sharded && (gpu || engine != CODA_ENGINE_REFERENCE)) {
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "sharded weights (ZeRO-3, --zero 3) run on the CPU "
                  "reference engine only so far (--device cpu --engine reference)");
    goto done;
  }
  if (o.resume && o.init) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "resume and init exclude each other");
    goto done;
  }
  if (o.resume || o.init) { /* the checkpoint's configuration wins */
    const char *ck = o.resume ? o.resume : o.init;
    coda_model_config c;
    s = coda_checkpoint_config(ctx, ck, &c);
    if (s) goto done;
    const struct { unsigned bit; const char *name; int want, have; } f[] = {
        {CODA_MODEL_SET_VOCAB, "vocab", o.model.vocab, c.vocab},
        {CODA_MODEL_SET_DIM, "dim", o.model.dim, c.dim},
        {CODA_MODEL_SET_LAYERS, "layers", o.model.layers, c.layers},
        {CODA_MODEL_SET_HEADS, "heads", o.model.heads, c.heads},
        {CODA_MODEL_SET_KV_HEADS, "kv-heads", o.model.kv_heads, c.kv_heads},
        {CODA_MODEL_SET_FFN, "ffn", o.model.ffn, c.ffn},
        {CODA_MODEL_SET_SEQ, "seq", o.model.seq, c.seq},
        {CODA_MODEL_SET_TIED, "tied", o.model.tied, c.tied}};
    /* fine-tuning may train at a shorter sequence than the checkpoint's
     * window (weights do not depend on it; positions stay below it) */
    const int shorter_seq = o.init && (o.model_set & CODA_MODEL_SET_SEQ) && o.model.seq >= 1 &&
                            o.model.seq <= c.seq;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
      if ((o.model_set & f[i].bit) && f[i].want != f[i].have &&
          !(f[i].bit == CODA_MODEL_SET_SEQ && shorter_seq)) {
        s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s has %s %d, but %s %d was asked for; "
                      "the checkpoint's model is used: leave the model settings out, or give "
                      "its values%s", ck, f[i].name, f[i].have, f[i].name, f[i].want,
                      f[i].bit == CODA_MODEL_SET_SEQ && o.init ? " (a shorter --seq is allowed "
                      "when fine-tuning)" : "");
        goto done;
      }
    if (shorter_seq) c.seq = o.model.seq;
    o.model = c;
  }
  if ((uint32_t)o.model.vocab < voc || (uint32_t)o.model.vocab < vvoc) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: vocabulary of %u tokens exceeds the "
                  "model's vocab %d", (uint32_t)o.model.vocab < voc ? trp : vap,
                  (uint32_t)o.model.vocab < voc ? voc : vvoc, o.model.vocab);
    goto done;
  }
  /* Token counts are ints in the engines: keep batch x seq x accum in range. */
  if ((int64_t)o.batch * o.model.seq * N > CODA_MAX_BATCH_TOKENS ||
      (int64_t)o.batch * o.model.seq * o.accum * N > INT32_MAX) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                  "batch %d x seq %d x accum %d x ranks %d: too many tokens (at most %d per "
                  "micro-batch of all ranks and 2^31 - 1 per step)", o.batch, o.model.seq,
                  o.accum, N, CODA_MAX_BATCH_TOKENS);
    goto done;
  }
  if (coda_context_backend(ctx) == CODA_BACKEND_CPU &&
      coda_model_config_params(&o.model) > CODA_CPU_MAX_PARAMS) {
    s = coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                  "a model of %lld parameters (%.1f GiB of fp32 weights, gradients and AdamW "
                  "moments) is beyond the CPU trainer's limit of %lld; the 1b and 8b "
                  "configurations are for the GPU",
                  (long long)coda_model_config_params(&o.model),
                  16.0 * (double)coda_model_config_params(&o.model) / (1024.0 * 1024 * 1024),
                  (long long)CODA_CPU_MAX_PARAMS);
    goto done;
  }
  s = coda_model_create(ctx, &o.model, engine, &model);
  if (s) goto done;
  size_t n = coda_model_size(model);
  mom = calloc(n, sizeof *mom);
  vel = calloc(n, sizeof *vel);
  const int B = o.batch, T = o.model.seq;
  in = malloc((size_t)B * T * sizeof *in);
  tg = malloc((size_t)B * T * sizeof *tg);
  if (dp) {
    gin = malloc((size_t)N * B * T * sizeof *gin);
    gtg = malloc((size_t)N * B * T * sizeof *gtg);
    if (!gin || !gtg) {
      s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
  }
  int64_t cap = o.steps + 1;
  hx = malloc((size_t)cap * sizeof *hx); hy = malloc((size_t)cap * sizeof *hy);
  vx = malloc((size_t)cap * sizeof *vx); vy = malloc((size_t)cap * sizeof *vy);
  if (!mom || !vel || !in || !tg || !hx || !hy || !vx || !vy) {
    s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  if (o.resume) {
    s = coda_checkpoint_load(ctx, o.resume, model, mom, vel, &st);
    if (s) goto done;
    if (st.step >= o.steps) {
      s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                    "%s is at step %lld; --steps %lld leaves nothing to do", o.resume,
                    (long long)st.step, (long long)o.steps);
      goto done;
    }
  } else if (o.init) {
    s = coda_checkpoint_load(ctx, o.init, model, NULL, NULL, NULL);
    if (s) goto done;
    st.rng = o.seed * 0x9e3779b97f4a7c15ull + 0x64617461ull;
  } else {
    /* one GPU: drawn on the device, the host buffer is not touched */
    if (!gpu || dp) coda_model_init(model, o.seed);
    st.rng = o.seed * 0x9e3779b97f4a7c15ull + 0x64617461ull; /* data order from the seed */
  }
  /* The tokenizer goes beside the checkpoint and is named in it; without
   * one, a resumed checkpoint's record is not carried over (its file is
   * beside the old checkpoint, not necessarily beside this one). */
  st.tokenizer_file[0] = '\0';
  if (o.tokenizer && lead) {
    s = coda_checkpoint_carry_tokenizer(ctx, o.tokenizer, ckpt, coda_model_cfg(model)->vocab, &st);
    if (s) goto done;
  }
  if (dp) { /* every rank holds the same weights; the optimizer state is sharded */
    s = coda_zero_create(ctx, model, comm, !gpu, &zero);
    if (!s && gpu) s = coda_plans_device_set_zero(ctx, model, zero);
    if (!s && !gpu) coda_zero_cpu_take(zero, o.resume ? mom : NULL, o.resume ? vel : NULL);
    if (s) goto done;
    if (sharded) { /* from here a rank holds its pieces of W; the rest is gathered when read */
      z3.h.user = &z3;
      z3.h.gather = zero3_gather;
      z3.h.release = zero3_release;
      z3.h.grad_done = zero3_grad_done;
      z3.ctx = ctx;
      z3.z = zero;
      z3.W = coda_model_weights(model);
      z3.G = coda_model_grads(model);
      coda_model_set_ref_hooks(model, &z3.h);
      zero3_release_all(&z3);
    }
  }
  if (gpu && !dp && !o.resume && !o.init) {
    s = coda_plans_device_init(ctx, model, o.seed);
    if (s) goto done;
  } else if (gpu) { /* master weights and moments to the device */
    s = coda_plans_device_upload(ctx, model, o.resume ? mom : NULL, o.resume ? vel : NULL);
    if (s) goto done;
  }
  coda_sampler sampler = {tr, ntr, st.rng, st.drawn};
  if (lead) {
    s = loss_log_open(ctx, csv, o.resume != NULL, st.step, &log);
    if (!s) s = loss_log_flush(ctx, log, csv);
    if (s) goto done;
  }
  const coda_model_config *c = coda_model_cfg(model);
  const double fpt = flops_per_token(c);
  {
    coda_train_progress p = progress_init(CODA_TRAIN_EVENT_START, &o);
    p.model = c;
    p.params = coda_model_config_params(c);
    p.engine = engine == CODA_ENGINE_PLANS ? CODA_TRAIN_ENGINE_PLANS : CODA_TRAIN_ENGINE_REFERENCE;
    p.gpu = gpu;
    p.train_tokens = ntr;
    p.val_tokens = nva;
    p.batch = B;
    p.seq = T;
    p.accum = o.accum;
    p.ranks = N;
    p.sharded_weights = sharded;
    p.tokens_per_step = (int64_t)B * T * o.accum * N;
    p.steps = o.steps;
    p.resumed = o.resume != NULL;
    p.flops_per_token = fpt;
    report(&o, lead, &p);
  }

  coda_adamw adam = {o.beta1, o.beta2, o.eps, o.weight_decay, ctx->opts.num_threads};
  const int64_t start = st.step;
  /* the profile skips the first profile_warmup steps, but keeps one */
  int64_t pwarm = o.profile_warmup;
  if (pwarm > o.steps - start - 1) pwarm = o.steps - start - 1 > 0 ? o.steps - start - 1 : 0;
  coda_model_set_plan_tuning(model, o.tune_plans);
  coda_model_set_keep_logits(model, keep_logits_for(ctx, &o, gpu, B, T, c->vocab));
  if (o.profile) {
    s = coda_prof_create(ctx, c->layers, o.accum, &prof);
    if (s) goto done;
    coda_model_set_prof(model, prof);
  }
  int nh = 0, nvh = 0;
  double t_start = now_s(), tok_total = 0.0, sec_total = 0.0;
  int stopped_early = 0; /* a stop during the first validation: no step runs */
  if (start == 0 && o.val_batches > 0) {
    double vl;
    s = evaluate(ctx, &o, model, va, nva, o.val_batches, B, T, comm, gin, gtg, in, tg, &vl,
                 &stopped_early);
    if (s) goto done;
    if (!stopped_early) {
      sum->first_val = vl;
      vx[nvh] = 0; vy[nvh++] = vl;
      coda_train_progress p = progress_init(CODA_TRAIN_EVENT_VALIDATION, &o);
      p.val_loss = vl;
      p.elapsed_seconds = now_s() - t_start;
      report(&o, lead, &p);
    }
  }
  if (stopped_early) { /* nothing trained: nothing to save */
    sum->stopped = CODA_TRAIN_INTERRUPTED;
    coda_train_progress p = progress_init(CODA_TRAIN_EVENT_INTERRUPTED, &o);
    p.step = st.step;
    p.elapsed_seconds = now_s() - t_start;
    report(&o, lead, &p);
  }
  float *W = coda_model_weights(model), *G = coda_model_grads(model);
  for (int64_t step = start; step < o.steps && !stopped_early; step++) {
    double t0 = now_s();
    coda_prof_step_start(prof, step - start >= pwarm);
    if (gpu) s = coda_plans_device_zero_grad(ctx, model);
    else {
      coda_prof_begin(ctx, prof);
      coda_model_zero_grad(model);
      coda_prof_end(ctx, prof, CODA_PH_OPTIM, -1);
    }
    double loss = 0.0;
    for (int a = 0; a < o.accum && !s; a++) {
      double l = 0.0;
      int64_t nv;
      s = draw(ctx, &sampler, comm, B, T, gin, gtg, in, tg);
      /* data parallel on the GPU: the last backward reduce-scatters */
      if (!s && dp && gpu && a == o.accum - 1) s = coda_plans_device_arm_reduce(ctx, model);
      /* each rank adds 1/N of its gradient: the sum over ranks is the mean */
      z3.micro = a;
      if (!s) s = coda_model_step(ctx, model, in, tg, B, T, 1.0f / (float)(o.accum * N), &l, &nv);
      if (!s) loss += l / o.accum; /* loss = mean over micro-batches of their means */
    }
    if (s) goto done;
    double gn = 0.0;
    int stop_all = 0;
    if (dp) {
      /* the shards' sums of squares, the losses and the stop requests, all
       * summed over the ranks in one small reduction */
      double v[3] = {0.0, loss, o.should_stop && o.should_stop(o.user) ? 1.0 : 0.0};
      if (gpu) {
        s = coda_plans_device_shard_sumsq(ctx, model, &v[0]);
      } else {
        coda_prof_begin(ctx, prof);
        if (!sharded) s = coda_zero_cpu_reduce(ctx, zero, G); /* ZeRO-3: done in the backward */
        coda_prof_end(ctx, prof, CODA_PH_REDUCE, -1);
        coda_prof_begin(ctx, prof);
        v[0] = coda_zero_cpu_sumsq(zero);
        coda_prof_end(ctx, prof, CODA_PH_NORM, -1);
      }
      if (!s) s = coda_comm_sum_host(ctx, comm, v, 3);
      if (s) goto done;
      gn = sqrt(v[0]);
      loss = v[1] / N;
      stop_all = v[2] > 0.0;
    } else if (gpu) {
      s = coda_plans_device_grad_norm(ctx, model, &gn);
      if (s) goto done;
    } else {
      coda_prof_begin(ctx, prof);
      gn = coda_grad_norm(G, n);
      coda_prof_end(ctx, prof, CODA_PH_NORM, -1);
    }
    if (!isfinite(loss) || !isfinite(gn)) {
      sum->stopped = CODA_TRAIN_NONFINITE;
      sum->bad_step = step + 1;
      coda_train_progress p = progress_init(CODA_TRAIN_EVENT_NONFINITE, &o);
      p.step = step + 1;
      p.loss = loss;
      p.grad_norm = gn;
      p.checkpoint = file_exists(ckpt) ? ckpt : NULL;
      p.elapsed_seconds = now_s() - t_start;
      report(&o, lead, &p);
      break;
    }
    double lr = coda_lr_schedule(step, o.warmup, o.steps, o.lr, o.min_lr_ratio);
    if (gpu) { /* the clip factor (coda_clip_grad's, no data) scales inside AdamW */
      s = coda_plans_device_adamw(ctx, model, &adam, step + 1, lr, coda_clip_grad(NULL, 0, gn, o.clip));
      /* the step's time includes its kernels; the update itself, where it
       * runs on the side queue, is waited for by the next forward */
      if (!s) s = coda_synchronize(ctx);
      if (s) goto done;
    } else if (dp) { /* this rank's shard, then every rank's updated weights */
      coda_prof_begin(ctx, prof);
      coda_zero_cpu_update(zero, &adam, step + 1, lr, gn, o.clip, W);
      coda_prof_end(ctx, prof, CODA_PH_OPTIM, -1);
      coda_prof_begin(ctx, prof);
      if (!sharded) s = coda_zero_cpu_gather(ctx, zero, NULL, W); /* ZeRO-3: when read */
      coda_prof_end(ctx, prof, CODA_PH_REDUCE, -1);
      if (s) goto done;
    } else {
      coda_prof_begin(ctx, prof);
      coda_clip_grad(G, n, gn, o.clip);
    }
    for (int i = 0; !gpu && !dp && i < coda_model_num_params(model); i++) {
      const coda_param *p = coda_model_param(model, i);
      coda_adamw_update(&adam, step + 1, lr, p->decay, W + p->offset, G + p->offset,
                        mom + p->offset, vel + p->offset, p->size);
    }
    if (!gpu && !dp) coda_prof_end(ctx, prof, CODA_PH_OPTIM, -1);
    st.step = step + 1;
    st.last_loss = loss;
    double dt = now_s() - t0;
    s = coda_prof_step_end(ctx, prof, dt);
    if (s) goto done;
    double toks = (double)B * T * o.accum * N; /* all ranks */
    tok_total += toks;
    sec_total += dt;
    if (isnan(sum->first_loss)) {
      sum->first_loss = loss;
      sum->first_step_seconds = now_s() - t_enter;
    }
    sum->final_loss = loss;
    sum->steps_done++;
    hx[nh] = (double)st.step; hy[nh++] = loss;
    double vl = NAN;
    int do_val = o.val_batches > 0 && ((o.val_every > 0 && st.step % o.val_every == 0) ||
                                       st.step == o.steps);
    int val_stop = 0; /* a stop during this validation: it is cut short */
    if (do_val) {
      s = evaluate(ctx, &o, model, va, nva, o.val_batches, B, T, comm, gin, gtg, in, tg, &vl,
                   &val_stop);
      if (s) goto done;
      if (!val_stop) {
        if (isnan(sum->first_val)) sum->first_val = vl;
        sum->final_val = vl;
        vx[nvh] = (double)st.step; vy[nvh++] = vl;
      }
    }
    if (log) {
      fprintf(log, "%lld,%.9g,%.9g,%.9g,%.9g\n", (long long)st.step, loss, lr, gn, vl);
      s = loss_log_flush(ctx, log, csv);
      if (s) goto done;
    }
    if (lead && o.progress && !o.quiet) {
      coda_train_progress p = progress_init(CODA_TRAIN_EVENT_STEP, &o);
      p.step = st.step;
      p.loss = loss;
      p.val_loss = vl;
      p.lr = lr;
      p.grad_norm = gn;
      p.tokens_per_s = toks / dt;
      p.step_seconds = dt;
      p.elapsed_seconds = now_s() - t_start;
      p.flops_per_token = fpt;
      size_t dused = 0, dtot = 0;
      if (gpu && coda_plans_device_memory(ctx, &dused, &dtot) == CODA_OK) {
        p.device_memory = 1;
        p.device_bytes = dused;
        if (o.peak_flops > 0) p.mfu = fpt * toks / dt / o.peak_flops / N; /* per GPU */
      }
      p.host_bytes = (size_t)(rss_mib() * 1024.0 * 1024.0);
      coda_memory_info mi;
      if (coda_memory_stats(ctx, &mi) == CODA_OK) p.library_bytes = mi.current_bytes;
      report(&o, lead, &p);
    }
    /* data parallel: the stop request was summed over the ranks above, so
     * every rank stops after the same step */
    int stop = val_stop || (dp ? stop_all : o.should_stop && o.should_stop(o.user));
    if (stop || st.step == o.steps || (o.save_every > 0 && st.step % o.save_every == 0)) {
      const double t_save = now_s();
      st.rng = sampler.rng;
      st.drawn = sampler.drawn;
      /* data parallel: every rank takes part in gathering the shards, the
       * lead writes the one-process format */
      if (gpu && !dp) { /* streamed from the device: no host copy */
        s = coda_checkpoint_save_device(ctx, ckpt, model, &st);
      } else {
        if (gpu) s = coda_plans_device_download(ctx, model, mom, vel);
        else if (dp) s = coda_zero_cpu_gather(ctx, zero, zero->ms, mom);
        if (!s && !gpu && dp) s = coda_zero_cpu_gather(ctx, zero, zero->vs, vel);
        if (!s && sharded) s = coda_zero_cpu_gather(ctx, zero, NULL, W); /* the whole model */
        if (!s && lead) s = coda_checkpoint_save(ctx, ckpt, model, mom, vel, &st);
        if (sharded) zero3_release_all(&z3);
      }
      if (s) goto done;
      if (lead) snprintf(sum->checkpoint, sizeof sum->checkpoint, "%s", ckpt);
      sum->save_seconds += now_s() - t_save;
      sum->saves++;
    }
    if (stop) {
      sum->stopped = CODA_TRAIN_INTERRUPTED;
      coda_train_progress p = progress_init(CODA_TRAIN_EVENT_INTERRUPTED, &o);
      p.step = st.step;
      p.loss = loss;
      p.checkpoint = ckpt;
      p.elapsed_seconds = now_s() - t_start;
      report(&o, lead, &p);
      break;
    }
  }
  sum->seconds = now_s() - t_start;
  sum->tokens_per_s = sec_total > 0 ? tok_total / sec_total : 0.0;
  if (log) { /* the last rows must be on disk before the run counts as done */
    FILE *l = log;
    log = NULL;
    errno = 0;
    if (fclose(l) != 0) {
      s = coda_fail(ctx, CODA_ERR_IO, "%s: write failed on close: %s", csv,
                    errno ? strerror(errno) : "i/o error");
      goto done;
    }
  }
  int chart_written = nh + nvh > 0;
  if (lead && nh + nvh > 0) {
    char title[512];
    snprintf(title, sizeof title, "%s: training and validation loss", o.out_dir);
    coda_status ps = coda_plot_loss_svg(ctx, svg, title, 720, 440, hx, hy, nh, vx, vy, nvh);
    if (ps) {
      chart_written = 0;
      char msg[CODA_ERRMSG_LEN + 32];
      snprintf(msg, sizeof msg, "loss plot not written: %s", coda_last_error(ctx));
      coda_train_progress p = progress_init(CODA_TRAIN_EVENT_WARNING, &o);
      p.message = msg;
      report(&o, lead, &p);
    }
  }
  if (prof) { /* the step profile, also when quiet */
    coda_train_profile pr;
    const double adam_n = dp && zero ? (double)zero->nshard : (double)n;
    coda_prof_report(prof, c, (double)B * T * o.accum, adam_n, o.peak_flops, o.peak_bandwidth,
                     pwarm, gpu, &pr);
    coda_train_progress p = progress_init(CODA_TRAIN_EVENT_PROFILE, &o);
    p.step = st.step;
    p.gpu = gpu;
    p.ranks = N;
    p.profile = &pr;
    if (lead && o.progress) o.progress(&p, o.user);
  }
  { /* the summary is reported even when quiet */
    coda_train_progress p = progress_init(CODA_TRAIN_EVENT_DONE, &o);
    p.step = st.step;
    p.loss = sum->final_loss;
    p.val_loss = sum->final_val;
    p.tokens_per_s = sum->tokens_per_s;
    p.elapsed_seconds = sum->seconds;
    p.flops_per_token = fpt;
    p.gpu = gpu;
    p.ranks = N;
    if (gpu && o.peak_flops > 0) p.mfu = fpt * sum->tokens_per_s / o.peak_flops / N;
    p.host_bytes = (size_t)(rss_mib() * 1024.0 * 1024.0);
    p.checkpoint = sum->checkpoint[0] ? sum->checkpoint : NULL;
    p.summary = sum;
    p.loss_curve = chart_written ? svg : NULL;
    report(&o, lead, &p);
  }
done:
  if (log) fclose(log);
  if (model) coda_model_set_ref_hooks(model, NULL);
  coda_prof_destroy(ctx, prof);
  coda_model_destroy(model);
  coda_zero_destroy(zero);
  coda_shard_close(&trv); coda_shard_close(&vav); free(mom); free(vel); free(in); free(tg); free(gin); free(gtg);
  free(hx); free(hy); free(vx); free(vy);
  free(data_dir); free(trp); free(vap); free(ckpt); free(svg); free(csv);
  return s;
}
