/* `coda train`: trains a model of the family table (docs/models.md) on the
 * CPU, one GPU, or data parallel over N processes (N GPUs through NCCL, or
 * N CPU processes), forked here with --ranks N or started by another
 * launcher (torchrun, srun) that sets the rank environment; see --help. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "tool_util.h"
#include "progress.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The corpus the shards are prepared from when --corpus is not given. */
#define DEFAULT_CORPUS "/usr/share/games/fortunes"
/* Peak dense bf16 FLOP/s of an H100/H200, for the MFU on a GPU. */
#define PEAK_FLOPS_H100_H200 989e12
/* Peak HBM bandwidth of an H200 in bytes/s, for the profile's floors. */
#define PEAK_BANDWIDTH_H200 4.3e12

/* Set by SIGINT; the trainer polls it once per step and between
 * validation batches. */
static volatile sig_atomic_t interrupted = 0;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }
static int should_stop(void *user) { (void)user; return interrupted != 0; }

/* The bar of a validation in progress (stderr, a terminal only). */
static coda_tool_bar val_bar;

static void validation_progress(int done, int batches, void *user) {
  (void)user;
  if (done == 1) coda_tool_bar_start(&val_bar, "validating");
  char detail[64];
  snprintf(detail, sizeof detail, "%d of %d batches", done, batches);
  coda_tool_bar_update(&val_bar, done, batches, detail);
  if (done == batches) coda_tool_bar_end(&val_bar);
}

/* Prints the trainer's progress (the lines of `coda train`); user is the
 * run's context, whose warnings (files a preparation left out) go first. */
static void print_progress(const coda_train_progress *p, void *user) {
  coda_tool_bar_end(&val_bar); /* a cut-short validation's bar off the line */
  const double MiB = 1024.0 * 1024.0;
  switch (p->event) {
  case CODA_TRAIN_EVENT_PREPARE:
    printf("preparing token shards in %s from %s\n", p->data_dir, p->corpus_dir);
    break;
  case CODA_TRAIN_EVENT_START: {
    fflush(stdout);
    coda_tool_warnings((coda_context)user, "train");
    const coda_model_config *c = p->model;
    printf("model: dim %d, layers %d, heads %d/%d, ffn %d, seq %d, vocab %d, %s head; %lld "
           "parameters; engine %s\n",
           c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->seq, c->vocab,
           c->tied ? "tied" : "untied", (long long)p->params,
           p->engine == CODA_TRAIN_ENGINE_PLANS ? (p->gpu ? "block plans on the GPU" : "block plans")
                                                : "host reference");
    printf("data: %llu train / %llu validation tokens; batch %d x %d, accum %d (%d tokens/step); "
           "steps %lld%s\n",
           (unsigned long long)p->train_tokens, (unsigned long long)p->val_tokens, p->batch,
           p->seq, p->accum, (int)p->tokens_per_step, (long long)p->steps,
           p->resumed ? " (resumed)" : "");
    if (p->ranks > 1)
      printf("data parallel: %d ranks (%s), batch %d per rank, %s\n", p->ranks,
             p->gpu ? "NCCL, one GPU each" : "CPU processes", p->batch,
             p->sharded_weights ? "weights, gradients and optimizer state sharded (ZeRO-3)"
                                : "optimizer state sharded (ZeRO-1)");
    fflush(stdout);
    break;
  }
  case CODA_TRAIN_EVENT_VALIDATION:
    printf("step %6d  val_loss %.4f\n", 0, p->val_loss);
    break;
  case CODA_TRAIN_EVENT_STEP:
    if (p->device_memory && p->mfu == p->mfu)
      printf("step %6lld  loss %.4f  lr %.3e  tok/s %8.0f  ms/step %7.1f  grad_norm %.3f  "
             "mfu %.1f%%  dev_mem %.0f MiB  mem %.0f MiB  coda_mem %.0f MiB\n",
             (long long)p->step, p->loss, p->lr, p->tokens_per_s, p->step_seconds * 1e3,
             p->grad_norm, 100.0 * p->mfu, (double)p->device_bytes / MiB,
             (double)p->host_bytes / MiB, (double)p->library_bytes / MiB);
    else if (p->device_memory)
      printf("step %6lld  loss %.4f  lr %.3e  tok/s %8.0f  ms/step %7.1f  grad_norm %.3f  "
             "dev_mem %.0f MiB  mem %.0f MiB  coda_mem %.0f MiB\n",
             (long long)p->step, p->loss, p->lr, p->tokens_per_s, p->step_seconds * 1e3,
             p->grad_norm, (double)p->device_bytes / MiB, (double)p->host_bytes / MiB,
             (double)p->library_bytes / MiB);
    else
      printf("step %6lld  loss %.4f  lr %.3e  tok/s %8.0f  ms/step %7.1f  grad_norm %.3f  "
             "mem %.0f MiB\n",
             (long long)p->step, p->loss, p->lr, p->tokens_per_s, p->step_seconds * 1e3,
             p->grad_norm, (double)p->host_bytes / MiB);
    if (p->val_loss == p->val_loss) printf("step %6lld  val_loss %.4f\n", (long long)p->step, p->val_loss);
    fflush(stdout);
    break;
  case CODA_TRAIN_EVENT_INTERRUPTED:
    if (p->checkpoint)
      printf("interrupted: saved step %lld to %s\n", (long long)p->step, p->checkpoint);
    else
      printf("interrupted at step %lld, before any step ran: nothing saved\n", (long long)p->step);
    break;
  case CODA_TRAIN_EVENT_NONFINITE: {
    const int bad_loss = !(p->loss - p->loss == 0.0);
    fprintf(stderr, "coda train: stopping at step %lld: %s is not finite (loss %g, grad norm "
            "%g); the last good checkpoint is kept%s%s\n", (long long)p->step,
            bad_loss ? "the loss" : "the gradient norm", p->loss, p->grad_norm,
            p->checkpoint ? ": " : "", p->checkpoint ? p->checkpoint : "");
    break;
  }
  case CODA_TRAIN_EVENT_WARNING:
    fprintf(stderr, "coda train: %s\n", p->message);
    break;
  case CODA_TRAIN_EVENT_PROFILE: {
    const coda_train_profile *f = p->profile;
    printf("profile: %lld steps after %lld warm-up, %.3f ms per step (%s)\n",
           (long long)f->steps, (long long)f->warmup, f->step_ms,
           f->device_clock ? "device events on the context's stream" : "host clock, CPU backend");
    printf("  %-28s %10s %7s %10s %21s\n", "phase", "ms/step", "share", "floor ms",
           "per block mean / max");
    for (int i = 0; i < f->nphase; i++) {
      const coda_train_profile_phase *q = &f->phase[i];
      char fl[32] = "", blk[48] = "";
      if (q->floor_ms == q->floor_ms) snprintf(fl, sizeof fl, "%.3f", q->floor_ms);
      if (q->block_mean_ms == q->block_mean_ms)
        snprintf(blk, sizeof blk, "%.3f / %.3f", q->block_mean_ms, q->block_max_ms);
      if (blk[0])
        printf("  %-28s %10.3f %6.1f%% %10s %21s\n", q->name, q->ms, 100.0 * q->share, fl, blk);
      else if (fl[0])
        printf("  %-28s %10.3f %6.1f%% %10s\n", q->name, q->ms, 100.0 * q->share, fl);
      else
        printf("  %-28s %10.3f %6.1f%%\n", q->name, q->ms, 100.0 * q->share);
    }
    printf("  %-28s %10.3f %6.1f%%\n", "step (wall)", f->step_ms, f->step_ms > 0 ? 100.0 : 0.0);
    if (f->incomplete) printf("  (markers ran out: some phases are counted in the last row)\n");
    break;
  }
  case CODA_TRAIN_EVENT_DONE: {
    const coda_train_summary *sum = p->summary;
    printf("summary: %s%lld steps in %.1f s (%.0f tokens/s); train loss %.4f -> %.4f; val loss "
           "%.4f -> %.4f; checkpoint %s; loss curve %s\n",
           sum->stopped == CODA_TRAIN_INTERRUPTED ? "INTERRUPTED after " : "",
           (long long)sum->steps_done, sum->seconds, sum->tokens_per_s, sum->first_loss,
           sum->final_loss, sum->first_val, sum->final_val,
           sum->checkpoint[0] ? sum->checkpoint : "(none)",
           p->loss_curve ? p->loss_curve : "(not written)");
    if (sum->first_step_seconds == sum->first_step_seconds)
      printf("time: first step done %.1f s after the start of training (set-up included); "
             "%d checkpoint save%s %.1f s\n",
             sum->first_step_seconds, sum->saves, sum->saves == 1 ? "" : "s", sum->save_seconds);
    if (p->gpu && p->mfu == p->mfu)
      printf("gpu: %.0f tokens/s, mfu %.1f%% (%.3g flops/token, peak %.0f TFLOP/s)\n",
             sum->tokens_per_s, 100.0 * p->mfu, p->flops_per_token, p->peak_flops / 1e12);
    else if (p->gpu)
      printf("gpu: %.0f tokens/s (%.3g flops/token)\n", sum->tokens_per_s, p->flops_per_token);
    break;
  }
  }
}

/* The numeric options (tool_util.h): their ranges and meanings, checked
 * and listed in the help from this one table. */
#define P2(k) 1.0 * (1LL << (k))
static const coda_tool_num train_nums[] = {
    {"--layers", 1, 1, 1024, 0, 0, "transformer blocks"},
    {"--dim", 1, 2, 65536, 0, 0, "model width (hidden size)"},
    {"--heads", 1, 1, 4096, 0, 0, "attention heads (divide --dim)"},
    {"--kv-heads", 1, 1, 4096, 0, 0, "key/value heads (divide --heads)"},
    {"--ffn", 1, 1, P2(18), 0, 0, "feed-forward hidden size"},
    {"--seq", 1, 1, P2(20), 0, 0, "sequence length in tokens"},
    {"--vocab", 1, 256, P2(24), 0, 0, "vocabulary size (default: the tokenizer's)"},
    {"--tied", 1, 0, 1, 0, 0, "1 = the output head is the embedding"},
    {"--head-dim", 1, 0, 1024, 0, 0, "attention head width; 0 = dim / heads (qwen3 may differ)"},
    {"--sliding-window", 1, 0, P2(20), 0, 0,
     "keys a token sees; llama: every layer; gemma3: local ones"},
    {"--sliding-pattern", 1, 0, 1024, 0, 0, "gemma3: every N-th layer global, the others local"},
    {"--batch", 1, 1, P2(20), 0, 0, "sequences per micro-batch (per rank)"},
    {"--accum", 1, 1, P2(20), 0, 0, "micro-batches per optimizer step"},
    {"--steps", 1, 1, P2(40), 0, 0, "optimizer steps in all (also when resuming)"},
    {"--warmup", 1, 0, P2(40), 0, 0, "steps of linear learning-rate warm-up"},
    {"--seed", 1, 0, P2(62), 0, 0, "initialization and data order"},
    {"--val-every", 1, 0, P2(30), 0, 0, "validation every N steps; 0 = at the end only"},
    {"--val-batches", 1, 0, P2(20), 0, 0, "micro-batches per validation; 0 = none"},
    {"--save-every", 1, 0, P2(30), 0, 0, "checkpoint every N steps; 0 = at the end only"},
    {"--threads", 1, 0, 4096, 0, 0, "CPU threads; 0 = the OpenMP default"},
    {"--ranks", 1, 1, CODA_DIST_MAX_RANKS, 0, 0, "data-parallel processes"},
    {"--profile-warmup", 1, 0, 1e9, 0, 0, "steps not profiled at the start"},
    {"--tune-plans", 1, 0, 1, 0, 0, "1 = time each fused step's schedule first (GPU)"},
    {"--keep-logits", 1, 0, 1, 0, 0, "1 = the head keeps its logits, 0 = recomputes them "
                                     "(or auto)"},
    {"--lr", 0, 0, INFINITY, 1, 1, "peak learning rate"},
    {"--min-lr-ratio", 0, 0, 1, 0, 0, "the cosine schedule's floor, a fraction of --lr"},
    {"--weight-decay", 0, 0, INFINITY, 0, 1, "AdamW's decoupled weight decay"},
    {"--clip", 0, 0, INFINITY, 0, 1, "global gradient-norm clip; 0 = off"},
    {"--beta1", 0, 0, 1, 0, 1, "AdamW's first-moment decay"},
    {"--beta2", 0, 0, 1, 0, 1, "AdamW's second-moment decay"},
    {"--peak-flops", 0, 0, INFINITY, 0, 1, "peak FLOP/s for the MFU; 0 = the default"},
    {"--peak-bandwidth", 0, 0, INFINITY, 0, 1, "peak memory bytes/s for the profile; 0 = the "
                                               "default"},
    {NULL, 0, 0, 0, 0, 0, NULL}};
#undef P2

static void train_usage(FILE *f) {
  fprintf(f,
      "usage: coda train [OPTIONS]\n"
      "  --config NAME     tiny | d512 | 1b | 8b (default tiny)\n"
      "  --layers N --dim N --heads N --kv-heads N --ffn N --seq N --vocab N --tied 0|1\n"
      "  --family NAME     llama | qwen3 | gpt2 | gemma3 (docs/models.md; default llama)\n"
      "  --head-dim N --sliding-window N (llama, gemma3) --sliding-pattern N (gemma3)\n"
      "  --batch N         sequences per micro-batch (default 8)\n"
      "  --accum N         micro-batches per step (default 1)\n"
      "  --steps N         optimizer steps (default 200)\n"
      "  --lr X --warmup N --min-lr-ratio X --weight-decay X --clip X --beta1 X --beta2 X\n"
      "  --seed N          initialization and data order (default 1)\n"
      "  --val-every N     validation loss every N steps (default 50)\n"
      "  --val-batches N   micro-batches per validation (default 4)\n"
      "  --save-every N    checkpoint every N steps (default: at the end)\n"
      "  --out DIR         output directory: checkpoint, loss.csv, the loss chart loss.svg\n"
      "                    (default runs/tiny)\n"
      "  --resume PATH     continue from a checkpoint\n"
      "  --init PATH       start a fresh run from the weights of a checkpoint\n"
      "  --export-hf DIR   write the weights of --resume PATH in Hugging Face layout\n"
      "                    (config.json + model.safetensors), then exit\n"
      "  --init-from DIR   fine-tune: start from the weights of a Hugging Face directory\n"
      "                    (imported into OUT/init-hf.safetensors; the model is its config;\n"
      "                    its tokenizer.json, if any, is the run's tokenizer)\n"
      "  --import-hf DIR   convert a Hugging Face directory (docs/models.md) into the\n"
      "                    weights-only checkpoint OUT/checkpoint.safetensors, then exit\n"
      "  --data PATH       token shards: a directory holding train.tok/val.tok (default\n"
      "                    OUT/data); or a corpus, tokenized into OUT/data (reused when\n"
      "                    unchanged): a text file (documents separated by blank lines), a\n"
      "                    directory of .txt files (one document each), JSON Lines (.jsonl),\n"
      "                    or llm.c token shards (.bin, magic 20240520)\n"
      "  --data-format F   auto (by name) | text | jsonl | llmc\n"
      "  --text-field NAME JSONL: the field holding the text (default text)\n"
      "  --tokenizer FILE  tokenizer.json (byte-level BPE) for a --data corpus (default: the\n"
      "                    --init/--resume checkpoint's, else bytes); the model's vocab becomes\n"
      "                    the tokenizer's unless --vocab is given. It is saved as\n"
      "                    OUT/tokenizer.json (an existing different file there is refused)\n"
      "                    and named, with its checksum, in the checkpoint, so coda generate\n"
      "                    and coda eval use it without being told\n"
      "  --corpus DIR      a directory to prepare shards from, one document a file (text;\n"
      "                    .jsonl as JSON Lines; default: the fortunes package)\n"
      "  --prepare         only write the token shards, then exit\n"
      "  --engine NAME     auto | reference | plans\n"
      "  --device NAME     cpu (default) | gpu | auto (the GPU when one is usable);\n"
      "                    --backend cpu|cuda|auto is the same; the GPU runs the plan engine\n"
      "  --threads N       CPU threads (default: OpenMP default; with --ranks, the cores\n"
      "                    divided among the ranks)\n"
      "  --ranks N         data parallel over N processes (default 1): with --device gpu one\n"
      "                    GPU each (rank r on GPU r, NCCL; CODA_NCCL_LIB names libnccl.so.2\n"
      "                    if the loader cannot find it), else N CPU processes; --batch is per\n"
      "                    rank, so a step sees N x batch x accum sequences (the same as one\n"
      "                    process with batch N x batch); optimizer state sharded (ZeRO-1)\n"
      "  Started by torchrun or srun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;\n"
      "  or SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID with MASTER_ADDR, MASTER_PORT), each\n"
      "  process is one rank of the job (GPU LOCAL_RANK with --device gpu); the ranks meet at\n"
      "  MASTER_ADDR:MASTER_PORT; --ranks, if given, must equal WORLD_SIZE. CODA_COMM_TIMEOUT\n"
      "  (seconds) limits the rendezvous and every collective\n"
      "  --zero 1|3        with several ranks: 1 (default) shards the optimizer state, 3 also\n"
      "                    the weights and gradients (gathered per layer; CPU reference engine)\n"
      "  --quiet           no per-step lines\n"
      "  --profile         time the phases of each step (device events on a GPU, the host\n"
      "                    clock on the CPU) and print a table per phase at the end\n"
      "  --profile-warmup N  steps not profiled at the start (default 1)\n"
      "  --tune-plans 0|1  GPU: time each fused step's schedule before the first step\n"
      "                    (cached on disk; default 1)\n"
      "  --keep-logits 0|1|auto  plan engine: 1 = the head keeps its logits for the backward\n"
      "                    (one vocabulary-wide GEMM fewer, batch x seq x vocab bf16 more memory);\n"
      "                    auto (default) = kept on a GPU where they fit in 1/16 of its memory\n"
      "  --optimizer-state fp32|bf16  fp32 (default): fp32 master weights and AdamW moments;\n"
      "                    bf16: bf16 weights and moments only, each update rounded\n"
      "                    stochastically (half the optimizer's memory traffic; one process)\n"
      "  --peak-flops X    peak FLOP/s of a device for the MFU and the profile's floors\n"
      "                    (default on a GPU 989e12, H100/H200 dense bf16)\n"
      "  --peak-bandwidth X  peak memory bytes/s for the profile's floors (default on a\n"
      "                    GPU 4.3e12, H200)\n"
      "Prints one line per step; Ctrl-C finishes the step (or cuts a validation short),\n"
      "saves and exits with status 130; a second Ctrl-C ends it at once.\n");
  coda_tool_num_help(f, train_nums);
}

/* mkdir -p */
static int make_dirs(const char *dir) {
  char d[4096];
  snprintf(d, sizeof d, "%s", dir);
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(d, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(d, 0777) != 0 && errno != EEXIST) return -1;
  errno = 0;
  return 0;
}

/* One training process: a whole run, or one rank of a data-parallel run. */
typedef struct train_job {
  coda_train_options o;
  int device; /* 0 CPU, 1 GPU */
  int threads;
  int gpu;    /* the GPU of a joined rank (LOCAL_RANK); -1: forked rank r uses GPU r */
} train_job;

/* Why the token shards are missing. On a rank other than 0 of a job,
 * rank 0 prepared them (into its own data directory) and reported success:
 * a rank that still cannot open them does not see rank 0's files. */
static const char *corpus_hint(const coda_train_options *o, coda_status s, int rank,
                               const char *msg) {
  char p[4096];
  if (o->data_dir) snprintf(p, sizeof p, "%s/train.tok", o->data_dir);
  else snprintf(p, sizeof p, "%s/data/train.tok", o->out_dir);
  struct stat st;
  if (s == CODA_ERR_IO && o->corpus_dir && rank > 0 && stat(p, &st) != 0 &&
      !strstr(msg, "rank 0 could not prepare"))
    return " (rank 0 prepares the token shards into its own --out, and this rank does not "
           "see them at this path, as when each rank has its own --out or its own host's "
           "file system: in a job of several ranks give every rank the same --out on a file system they share, or prepare once (coda train "
           "--prepare --out OUT) and give every rank --data OUT/data at a path each of them "
           "reads)";
  if (s == CODA_ERR_IO && o->corpus_dir && !strcmp(o->corpus_dir, DEFAULT_CORPUS) &&
      stat(p, &st) != 0)
    return " (the default corpus comes from the Debian package 'fortunes'; install it or pass "
           "--corpus DIR)";
  return "";
}

/* ctx: the caller's context (one process), or NULL: a rank makes its own. */
static int train_process(const train_job *job, coda_comm comm, coda_context ctx) {
  const int rank = comm ? coda_comm_rank(comm) : 0;
  char who[32] = "";
  if (comm) snprintf(who, sizeof who, " (rank %d)", rank);
  coda_context_options co = coda_context_default_options();
  co.num_threads = job->threads;
  co.backend = job->device ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
  co.device = !job->device || !comm ? 0 : job->gpu >= 0 ? job->gpu : rank;
  const int own = ctx == NULL;
  char cmd_name[64];
  snprintf(cmd_name, sizeof cmd_name, "train%s", who);
  if (own && coda_tool_context(&co, &ctx, cmd_name, job->device ? "CUDA" : "CPU") != CODA_OK)
    return 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the process at once */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  coda_train_options o = job->o;
  o.should_stop = should_stop;
  o.progress = print_progress;
  o.user = ctx;
  o.validation_progress = validation_progress;
  o.comm = comm;
  /* The MFU figure is the H100/H200 peak on any GPU (unless given). */
  if (job->device && o.peak_flops == 0) o.peak_flops = PEAK_FLOPS_H100_H200;
  if (job->device && o.peak_bandwidth == 0) o.peak_bandwidth = PEAK_BANDWIDTH_H200;
  coda_train_summary sum;
  int rc = 0;
  coda_status s = coda_train(ctx, &o, &sum);
  coda_tool_warnings(ctx, cmd_name);
  if (s) {
    fprintf(stderr, "coda train%s: %s%s\n", who, coda_last_error(ctx),
            corpus_hint(&o, s, rank, coda_last_error(ctx)));
    rc = 1;
  } else if (sum.stopped == CODA_TRAIN_NONFINITE) {
    rc = 3;
  } else if (sum.stopped == CODA_TRAIN_INTERRUPTED) {
    if (rank == 0)
      fprintf(stderr, "coda train: interrupted after %lld steps of this run%s%s\n",
              (long long)sum.steps_done, sum.checkpoint[0] ? "; resume with --resume " : "",
              sum.checkpoint[0] ? sum.checkpoint : "");
    rc = 130; /* as a shell reports a run ended by SIGINT */
  }
  fflush(stdout);
  if (own) coda_context_destroy(ctx);
  return rc;
}

static int rank_main(coda_comm comm, void *user) { return train_process(user, comm, NULL); }

/* The command line of one `coda train` and what its phases resolved. */
typedef struct train_cli {
  coda_train_options o;
  int prepare_only, threads, device, ranks, ranks_given, corpus_given;
  coda_data_options dopt;
  int data_flags; /* --data-format, --text-field or --tokenizer given */
  const char *export_hf, *import_hf, *init_from;
  coda_dist_env env; /* a job started by another launcher */
  char err[512];
} train_cli;

/* A phase's result when the command goes on to the next phase (else the
 * exit status). */
#define GO_ON (-1)

/* The flags into c (the named configuration first, so explicit flags
 * override it). */
static int parse_args(train_cli *c, int argc, char **argv) {
  const char *config = "tiny";
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[i + 1];
  if (coda_model_config_named(config, &c->o.model) != CODA_OK) {
    fprintf(stderr, "coda train: unknown --config '%s' (tiny, d512, 1b, 8b)\n", config);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long x;
    double d;
    /* numeric flags: the range and meaning of each in train_nums */
#define NUM(name) coda_tool_num_find(train_nums, name)
#define INTFLAG(name, dst) \
    if (!strcmp(a, name)) { if (coda_tool_num_parse_ll("train", NUM(name), v, &x)) return 2; \
                            dst = x; i++; continue; }
#define MODELFLAG(name, dst, bit) \
    if (!strcmp(a, name)) { if (coda_tool_num_parse_ll("train", NUM(name), v, &x)) return 2; \
                            dst = x; c->o.model_set |= bit; i++; continue; }
#define REALFLAG(name, dst) \
    if (!strcmp(a, name)) { if (coda_tool_num_parse("train", NUM(name), v, &d)) return 2; \
                            dst = d; i++; continue; }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { train_usage(stdout); return 0; }
    if (!strcmp(a, "--config")) { c->o.model_set = CODA_MODEL_SET_ALL; i++; continue; }
    MODELFLAG("--layers", c->o.model.layers, CODA_MODEL_SET_LAYERS)
    MODELFLAG("--dim", c->o.model.dim, CODA_MODEL_SET_DIM)
    MODELFLAG("--heads", c->o.model.heads, CODA_MODEL_SET_HEADS)
    MODELFLAG("--kv-heads", c->o.model.kv_heads, CODA_MODEL_SET_KV_HEADS)
    MODELFLAG("--ffn", c->o.model.ffn, CODA_MODEL_SET_FFN)
    MODELFLAG("--seq", c->o.model.seq, CODA_MODEL_SET_SEQ)
    MODELFLAG("--vocab", c->o.model.vocab, CODA_MODEL_SET_VOCAB)
    MODELFLAG("--tied", c->o.model.tied, CODA_MODEL_SET_TIED)
    MODELFLAG("--head-dim", c->o.model.head_dim, CODA_MODEL_SET_HEAD_DIM)
    MODELFLAG("--sliding-window", c->o.model.sliding_window, CODA_MODEL_SET_WINDOW)
    MODELFLAG("--sliding-pattern", c->o.model.sliding_pattern, CODA_MODEL_SET_WINDOW)
    if (!strcmp(a, "--family") && v) {
      if (coda_tool_family_parse("coda train", v, &c->o.model.family)) return 2;
      c->o.model_set |= CODA_MODEL_SET_FAMILY;
      i++;
      continue;
    }
    INTFLAG("--batch", c->o.batch)
    INTFLAG("--accum", c->o.accum)
    INTFLAG("--steps", c->o.steps)
    INTFLAG("--warmup", c->o.warmup)
    INTFLAG("--seed", c->o.seed)
    INTFLAG("--val-every", c->o.val_every)
    INTFLAG("--val-batches", c->o.val_batches)
    INTFLAG("--save-every", c->o.save_every)
    INTFLAG("--threads", c->threads)
    if (!strcmp(a, "--ranks")) c->ranks_given = 1;
    INTFLAG("--ranks", c->ranks)
    INTFLAG("--profile-warmup", c->o.profile_warmup)
    if (!strcmp(a, "--zero")) {
      if (!v || (strcmp(v, "1") && strcmp(v, "3"))) {
        fprintf(stderr, "coda train: --zero is 1 (the optimizer state sharded) or 3 (also the "
                "weights and gradients), got '%s'\n", v ? v : "(nothing)");
        return 2;
      }
      c->o.shard_weights = v[0] == '3';
      i++;
      continue;
    }
    if (!strcmp(a, "--optimizer-state")) {
      if (!v || (strcmp(v, "fp32") && strcmp(v, "bf16"))) {
        fprintf(stderr, "coda train: --optimizer-state is fp32 (fp32 master weights and moments) "
                "or bf16 (bf16 weights and moments, stochastic rounding), got '%s'\n",
                v ? v : "(nothing)");
        return 2;
      }
      c->o.optim_state = v[0] == 'b' ? CODA_OPTIM_STATE_BF16 : CODA_OPTIM_STATE_FP32;
      i++;
      continue;
    }
    INTFLAG("--tune-plans", c->o.tune_plans)
    if (!strcmp(a, "--keep-logits") && v && !strcmp(v, "auto")) { c->o.keep_logits = -1; i++; continue; }
    INTFLAG("--keep-logits", c->o.keep_logits)
    REALFLAG("--lr", c->o.lr)
    REALFLAG("--min-lr-ratio", c->o.min_lr_ratio)
    REALFLAG("--weight-decay", c->o.weight_decay)
    REALFLAG("--clip", c->o.clip)
    REALFLAG("--beta1", c->o.beta1)
    REALFLAG("--beta2", c->o.beta2)
    REALFLAG("--peak-flops", c->o.peak_flops)
    REALFLAG("--peak-bandwidth", c->o.peak_bandwidth)
#undef INTFLAG
#undef MODELFLAG
#undef REALFLAG
#undef NUM
    if (!strcmp(a, "--out") && v) { c->o.out_dir = v; i++; continue; }
    if (!strcmp(a, "--resume") && v) { c->o.resume = v; i++; continue; }
    if (!strcmp(a, "--init") && v) { c->o.init = v; i++; continue; }
    if (!strcmp(a, "--export-hf") && v) { c->export_hf = v; i++; continue; }
    if (!strcmp(a, "--import-hf") && v) { c->import_hf = v; i++; continue; }
    if (!strcmp(a, "--init-from") && v) { c->init_from = v; i++; continue; }
    if (!strcmp(a, "--data") && v) { c->o.data_dir = v; i++; continue; }
    if (!strcmp(a, "--corpus") && v) { c->o.corpus_dir = v; c->corpus_given = 1; i++; continue; }
    if (!strcmp(a, "--prepare")) { c->prepare_only = 1; continue; }
    if (!strcmp(a, "--tokenizer") && v) { c->dopt.tokenizer = v; c->data_flags = 1; i++; continue; }
    if (!strcmp(a, "--text-field") && v) { c->dopt.text_field = v; c->data_flags = 1; i++; continue; }
    if (!strcmp(a, "--data-format") && v) {
      if (!strcmp(v, "auto")) c->dopt.format = CODA_DATA_AUTO;
      else if (!strcmp(v, "text")) c->dopt.format = CODA_DATA_TEXT;
      else if (!strcmp(v, "jsonl")) c->dopt.format = CODA_DATA_JSONL;
      else if (!strcmp(v, "llmc")) c->dopt.format = CODA_DATA_LLMC;
      else { fprintf(stderr, "coda train: --data-format is auto, text, jsonl or llmc\n"); return 2; }
      c->data_flags = 1;
      i++;
      continue;
    }
    if (!strcmp(a, "--quiet")) { c->o.quiet = 1; continue; }
    if (!strcmp(a, "--profile")) { c->o.profile = 1; continue; }
    if ((!strcmp(a, "--device") || !strcmp(a, "--backend")) && v) {
      if (!strcmp(v, "cpu")) c->device = 0;
      else if (!strcmp(v, "gpu") || !strcmp(v, "cuda")) c->device = 1;
      else if (!strcmp(v, "auto")) c->device = 2; /* decided below (no CUDA before forking) */
      else { fprintf(stderr, "coda train: %s is cpu, gpu (cuda) or auto\n", a); return 2; }
      i++;
      continue;
    }
    if (!strcmp(a, "--engine") && v) {
      if (!strcmp(v, "auto")) c->o.engine = CODA_TRAIN_ENGINE_AUTO;
      else if (!strcmp(v, "reference")) c->o.engine = CODA_TRAIN_ENGINE_REFERENCE;
      else if (!strcmp(v, "plans")) c->o.engine = CODA_TRAIN_ENGINE_PLANS;
      else { fprintf(stderr, "coda train: --engine is auto, reference or plans\n"); return 2; }
      i++;
      continue;
    }
    fprintf(stderr, "coda train: unknown or incomplete option '%s'\n", a);
    train_usage(stderr);
    return 2;
  }
  return GO_ON;
}

/* The rank environment of another launcher, checked against --ranks. */
static int read_launcher(train_cli *c) {
  /* Shards the user names are theirs: without --corpus a missing --data
   * directory is an error, not prepared from the default corpus. */
  if (c->o.data_dir && !c->corpus_given && !c->prepare_only) c->o.corpus_dir = NULL;
  /* A job started by another launcher: this process is one of its ranks. */
  if (coda_dist_env_read(&c->env, c->err, sizeof c->err)) {
    fprintf(stderr, "coda train: %s\n", c->err);
    return 2;
  }
  if (c->env.world_size && c->ranks_given && c->ranks != c->env.world_size) {
    fprintf(stderr, "coda train: --ranks %d, but the launcher started %d ranks (%s=%d): give "
            "--ranks %d or leave it out\n", c->ranks, c->env.world_size,
            c->env.source[0] == 't' ? "WORLD_SIZE" : "SLURM_NTASKS", c->env.world_size, c->env.world_size);
    return 2;
  }
  if (c->env.world_size > 1 && (c->export_hf || c->import_hf || c->prepare_only) && c->env.rank != 0)
    return 0; /* one-shot work runs once, on rank 0 */
  return GO_ON;
}

static int import_init_from(train_cli *c) {
  /* --init-from HF_DIR: the Hugging Face weights, imported into
   * OUT/init-hf.safetensors, start the run (as --init would) */
  static char init_path[4096];
  if (!c->init_from) return GO_ON;
  if (c->env.world_size > 1) {
    fprintf(stderr, "coda train: --init-from in a job of %d ranks: every rank would import at "
            "once; import once (coda train --import-hf DIR --out OUT) and give every rank "
            "--init OUT/checkpoint.safetensors\n", c->env.world_size);
    return 2;
  }
  if (c->o.init || c->o.resume || c->export_hf || c->import_hf) {
    fprintf(stderr, "coda train: --init-from excludes --init, --resume, --export-hf and --import-hf\n");
    return 2;
  }
  coda_context ictx;
  if (coda_tool_context(NULL, &ictx, "train", "CPU") != CODA_OK) return 1;
  snprintf(init_path, sizeof init_path, "%s/init-hf.safetensors", c->o.out_dir);
  int irc = 0;
  if (make_dirs(c->o.out_dir)) {
    fprintf(stderr, "coda train: cannot create %s: %s\n", c->o.out_dir, strerror(errno));
    irc = 1;
  } else if (coda_hf_import_checkpoint(ictx, c->init_from, init_path) != CODA_OK) {
    coda_tool_warnings(ictx, "train");
    fprintf(stderr, "coda train: --init-from %s: %s\n", c->init_from, coda_last_error(ictx));
    irc = 1;
  } else {
    coda_tool_warnings(ictx, "train");
    printf("imported %s into %s\n", c->init_from, init_path);
  }
  coda_context_destroy(ictx);
  if (irc) return irc;
  c->o.init = init_path;
  return GO_ON;
}

static int carry_tokenizer(train_cli *c) {
  /* The run's tokenizer, saved beside its checkpoint and named in it:
   * --tokenizer (which tokenizes a --data corpus), else the one the
   * --init/--resume checkpoint carries (an --init-from folder's
   * tokenizer.json was carried by the import). */
  static char carried_tok[4096];
  if (!c->dopt.tokenizer && (c->o.init || c->o.resume) && !c->export_hf && !c->import_hf) {
    coda_context tctx;
    if (coda_tool_context(NULL, &tctx, "train", "CPU") != CODA_OK) return 1;
    char *tp = NULL;
    const char *ck = c->o.init ? c->o.init : c->o.resume;
    if (coda_checkpoint_tokenizer(tctx, ck, &tp, NULL) != CODA_OK) {
      fprintf(stderr, "coda train: %s\n", coda_last_error(tctx));
      coda_context_destroy(tctx);
      return 1;
    }
    coda_context_destroy(tctx);
    if (tp) {
      snprintf(carried_tok, sizeof carried_tok, "%s", tp);
      c->dopt.tokenizer = carried_tok;
      if (!c->o.quiet || c->init_from) printf("tokenizer %s (the checkpoint's)\n", carried_tok);
    }
    free(tp);
  }
  if (!c->export_hf && !c->import_hf) c->o.tokenizer = c->dopt.tokenizer;
  return GO_ON;
}

static int prepare_data_corpus(train_cli *c) {
  /* --data naming a corpus (a file, or a directory without token shards):
   * tokenized into OUT/data before any rank starts. */
  static char corpus_data_dir[4096];
  if (c->o.data_dir && !c->export_hf && !c->import_hf) {
    struct stat st;
    char tr[4200], va[4200];
    snprintf(tr, sizeof tr, "%s/train.tok", c->o.data_dir);
    snprintf(va, sizeof va, "%s/val.tok", c->o.data_dir);
    const int exists = stat(c->o.data_dir, &st) == 0;
    const int shards = exists && S_ISDIR(st.st_mode) && (stat(tr, &st) == 0 || stat(va, &st) == 0);
    /* with --corpus, --data is the shard directory to prepare into (as before) */
    if (exists && !shards && !c->corpus_given && c->env.world_size > 1 && !c->prepare_only) {
      fprintf(stderr, "coda train: --data %s is a corpus, and a job of %d ranks would tokenize it "
              "on every rank at once: prepare the shards once (coda train --prepare --data %s "
              "--out OUT), then give every rank --data OUT/data\n", c->o.data_dir, c->env.world_size,
              c->o.data_dir);
      return 2;
    }
    if (exists && !shards && !c->corpus_given) {
      coda_context pctx;
      if (coda_tool_context(NULL, &pctx, "train", "CPU") != CODA_OK) return 1;
      c->dopt.path = c->o.data_dir;
      c->dopt.min_tokens = (uint64_t)c->o.model.seq + 1;
      c->dopt.progress = coda_tool_prep_progress;
      uint32_t vocab = 0;
      int prc = make_dirs(c->o.out_dir) ? (fprintf(stderr, "coda train: cannot create %s: %s\n",
                                                c->o.out_dir, strerror(errno)), 1)
                                     : coda_tool_prepare_corpus(pctx, "train", &c->dopt, c->o.out_dir, corpus_data_dir,
                                                           sizeof corpus_data_dir, &vocab);
      coda_context_destroy(pctx);
      if (prc) return prc;
      if (c->prepare_only) return 0;
      c->o.data_dir = corpus_data_dir;
      c->o.corpus_dir = NULL;
      /* the model's vocabulary is the tokenizer's unless --vocab says it */
      if (!(c->o.model_set & CODA_MODEL_SET_VOCAB) && vocab > 0) c->o.model.vocab = (int)vocab;
    } else if (c->data_flags && shards) {
      fprintf(stderr, "coda train: --data %s holds token shards; --tokenizer, --text-field and "
              "--data-format apply to a corpus\n", c->o.data_dir);
      return 2;
    }
  } else if (c->data_flags && !c->export_hf && !c->import_hf) {
    fprintf(stderr, "coda train: --tokenizer, --text-field and --data-format need --data FILE|DIR\n");
    return 2;
  }
  return GO_ON;
}

/* This process is one rank of another launcher's job. */
static int run_joined(train_cli *c) {
  if (c->device == 2) c->device = coda_cuda_available() ? 1 : 0;
  else if (c->device && !coda_cuda_available()) {
    fprintf(stderr, "coda train: rank %d: --device gpu: no usable CUDA GPU (or this build has "
            "no CUDA)\n", c->env.rank);
    return 1;
  }
  train_job job = {c->o, c->device, c->threads, c->env.local_rank};
  if (!c->threads && !c->device && c->env.local_world_size > 0) { /* share the host's cores */
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    job.threads = nc / c->env.local_world_size > 1 ? (int)(nc / c->env.local_world_size) : 1;
  }
  int rc = coda_dist_join(&c->env, c->device ? CODA_COMM_NCCL : CODA_COMM_CPU, rank_main, &job, c->err,
                          sizeof c->err);
  if (c->err[0]) fprintf(stderr, "coda train: %s\n", c->err);
  return rc;
}

/* --ranks N: the ranks forked here. */
static int run_forked(train_cli *c) {
  /* The launcher forks the ranks: this process must not touch CUDA, so
   * the GPUs are counted in a short-lived child. */
  const int ngpu = c->device ? coda_dist_gpu_count() : 0;
  if (c->device == 2) c->device = ngpu > 0;
  if (c->device && ngpu < c->ranks) {
    fprintf(stderr, "coda train: --ranks %d with --device gpu needs %d GPUs, %d usable%s\n",
            c->ranks, c->ranks, ngpu < 0 ? 0 : ngpu, ngpu <= 0 ? " (or this build has no CUDA)" : "");
    return 1;
  }
  train_job job = {c->o, c->device, c->threads, -1};
  if (!c->threads) { /* share the cores among CPU ranks */
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    job.threads = c->device ? 0 : (nc / c->ranks > 1 ? (int)(nc / c->ranks) : 1);
  }
  int rc = coda_dist_launch(c->ranks, c->device ? CODA_COMM_NCCL : CODA_COMM_CPU, rank_main, &job, c->err,
                            sizeof c->err);
  if (c->err[0]) fprintf(stderr, "coda train: %s\n", c->err);
  return rc;
}

/* --export-hf / --import-hf: one conversion on ctx (destroyed here). */
static int convert_hf(train_cli *c, coda_context ctx) {
  int rc = 0;
  coda_status s = CODA_OK;
  char ck[4096];
  if (c->export_hf && !c->o.resume) {
    fprintf(stderr, "coda train: --export-hf needs --resume CHECKPOINT\n");
    rc = 2;
  } else if (c->export_hf) {
    s = coda_hf_export_checkpoint(ctx, c->o.resume, c->export_hf);
    if (!s) printf("wrote %s/config.json and %s/model.safetensors\n", c->export_hf, c->export_hf);
  } else if (make_dirs(c->o.out_dir)) {
    fprintf(stderr, "coda train: cannot create %s: %s\n", c->o.out_dir, strerror(errno));
    rc = 1;
  } else {
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", c->o.out_dir);
    s = coda_hf_import_checkpoint(ctx, c->import_hf, ck);
    coda_tool_warnings(ctx, "train");
    if (!s) printf("wrote %s (weights only; train from it with --init %s)\n", ck, ck);
  }
  if (s) {
    fprintf(stderr, "coda train: %s\n", coda_last_error(ctx));
    rc = 1;
  }
  coda_context_destroy(ctx);
  return rc;
}

/* --prepare: the token shards only, on ctx (destroyed here). */
static int prepare_shards_only(train_cli *c, coda_context ctx) {
  int rc = 0;
  char dir[4096];
  if (c->o.data_dir) snprintf(dir, sizeof dir, "%s", c->o.data_dir);
  else snprintf(dir, sizeof dir, "%s/data", c->o.out_dir);
  coda_status s = coda_prepare_corpus(ctx, c->o.corpus_dir, dir);
  coda_tool_warnings(ctx, "train");
  if (s) {
    fprintf(stderr, "coda train: %s%s\n", coda_last_error(ctx),
            corpus_hint(&c->o, s, 0, coda_last_error(ctx)));
    rc = 1;
  } else {
    printf("wrote %s/train.tok and %s/val.tok\n", dir, dir);
  }
  coda_context_destroy(ctx);
  return rc;
}

/* One process: a conversion, a preparation or the whole run. */
static int run_local(train_cli *c) {
  if (c->device == 2) c->device = coda_cuda_available() ? 1 : 0;
  coda_context_options co = coda_context_default_options();
  co.num_threads = c->threads;
  co.backend = c->device ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
  coda_context ctx;
  if (c->device && !coda_cuda_available()) {
    fprintf(stderr, "coda train: --device gpu: no usable CUDA GPU (or this build has no CUDA)\n");
    return 1;
  }
  if (coda_tool_context(&co, &ctx, "train", c->device ? "CUDA" : "CPU") != CODA_OK) return 1;
  if (c->export_hf || c->import_hf) return convert_hf(c, ctx);
  if (c->prepare_only) return prepare_shards_only(c, ctx);
  train_job job = {c->o, c->device, c->threads, -1};
  int rc = train_process(&job, NULL, ctx);
  coda_context_destroy(ctx);
  return rc;
}

int cmd_train(int argc, char **argv) {
  train_cli cli, *c = &cli;
  memset(c, 0, sizeof *c);
  c->o = coda_train_default_options();
  c->o.corpus_dir = DEFAULT_CORPUS;
  c->ranks = 1;
  c->dopt = coda_data_default_options();
  int rc = parse_args(c, argc, argv);
  if (rc == GO_ON) rc = read_launcher(c);
  if (rc == GO_ON) rc = import_init_from(c);
  if (rc == GO_ON) rc = carry_tokenizer(c);
  if (rc == GO_ON) rc = prepare_data_corpus(c);
  if (rc != GO_ON) return rc;
  const int one_shot = c->export_hf || c->import_hf || c->prepare_only;
  if (c->env.world_size > 1 && !one_shot) return run_joined(c);
  if (c->ranks > 1 && !one_shot) return run_forked(c);
  return run_local(c);
}
