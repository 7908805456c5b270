/* coda_train's phases before the first step: the output and data
 * directories, the token shards (prepared from a corpus when missing), the
 * model's configuration (a checkpoint's wins) and buffers, and the state a
 * step starts from (weights, AdamW moments, the data-parallel shards, the
 * sampler). Each phase reads and fills a coda_train_run. */
#define _POSIX_C_SOURCE 200809L
#include "train/train.h"
#include "dist/comm.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The lead prepares missing shards, never over a file of the user's: one
 * shard without the other is an error naming the missing one. */
static coda_status prepare_shards(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  const char *trp = r->trp, *vap = r->vap;
  const int htr = path_exists(trp), hva = path_exists(vap);
  struct stat dst;
  if (htr || hva) {
    const char *have = htr ? trp : vap, *miss = htr ? vap : trp;
    return coda_fail(ctx, CODA_ERR_IO, "%s is missing (or not a regular file) next to %s; give "
                     "both token shards, or a data directory without either to prepare them",
                     path_exists(miss) ? have : miss, path_exists(miss) ? miss : have);
  } else if (o->data_dir && !o->corpus_dir && stat(o->data_dir, &dst) != 0) {
    return coda_fail(ctx, CODA_ERR_IO, "%s: no such data directory (token shards train.tok and "
                     "val.tok)", o->data_dir);
  } else if (o->data_dir && stat(o->data_dir, &dst) == 0 && !S_ISDIR(dst.st_mode)) {
    return coda_fail(ctx, CODA_ERR_IO, "%s: not a directory (the data directory holds the token "
                     "shards train.tok and val.tok)", o->data_dir);
  } else if (!o->corpus_dir) {
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "no token shards %s and %s, and no corpus "
                     "directory to prepare them from (corpus_dir)", trp, vap);
  }
  coda_train_progress p = coda_train_progress_init(CODA_TRAIN_EVENT_PREPARE, o);
  p.data_dir = r->data_dir;
  p.corpus_dir = o->corpus_dir;
  coda_train_report(o, r->lead, &p);
  return coda_prepare_corpus(ctx, o->corpus_dir, r->data_dir);
}

coda_status coda_train_setup_data(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  coda_status s = mkdirs(ctx, o->out_dir);
  if (s) return s;
  r->data_dir = o->data_dir ? strdup(o->data_dir) : join(o->out_dir, "data");
  if (!r->data_dir) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  r->trp = join(r->data_dir, "train.tok");
  r->vap = join(r->data_dir, "val.tok");
  r->ckpt = join(o->out_dir, "checkpoint.safetensors");
  r->svg = join(o->out_dir, "loss.svg");
  r->csv = join(o->out_dir, "loss.csv");
  if (!r->trp || !r->vap || !r->ckpt || !r->svg || !r->csv)
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  if (r->lead && (!file_exists(r->trp) || !file_exists(r->vap))) s = prepare_shards(r);
  if (r->dp) { /* the other ranks wait for the lead's shards */
    double bad = s != CODA_OK;
    coda_status s2 = coda_comm_sum_host(ctx, r->comm, &bad, 1);
    if (!s && s2) s = s2;
    if (!s && bad > 0) s = coda_fail(ctx, CODA_ERR_IO, "rank 0 could not prepare the token shards");
  }
  if (s) return s;
  s = coda_shard_open(ctx, r->trp, &r->trv);
  if (!s) s = coda_shard_open(ctx, r->vap, &r->vav);
  return s;
}

/* resume or init: the checkpoint's configuration wins; a model setting
 * the caller gave must agree with it. */
static coda_status take_checkpoint_config(coda_train_run *r) {
  coda_train_options *o = &r->o;
  const char *ck = o->resume ? o->resume : o->init;
  coda_model_config c;
  coda_status s = coda_checkpoint_config(r->ctx, ck, &c);
  if (s) return s;
  const struct { unsigned bit; const char *name; int want, have; } f[] = {
      {CODA_MODEL_SET_VOCAB, "vocab", o->model.vocab, c.vocab},
      {CODA_MODEL_SET_DIM, "dim", o->model.dim, c.dim},
      {CODA_MODEL_SET_LAYERS, "layers", o->model.layers, c.layers},
      {CODA_MODEL_SET_HEADS, "heads", o->model.heads, c.heads},
      {CODA_MODEL_SET_KV_HEADS, "kv-heads", o->model.kv_heads, c.kv_heads},
      {CODA_MODEL_SET_FFN, "ffn", o->model.ffn, c.ffn},
      {CODA_MODEL_SET_SEQ, "seq", o->model.seq, c.seq},
      {CODA_MODEL_SET_TIED, "tied", o->model.tied, c.tied},
      {CODA_MODEL_SET_HEAD_DIM, "head-dim", o->model.head_dim, c.head_dim},
      {CODA_MODEL_SET_WINDOW, "sliding-window", o->model.sliding_window, c.sliding_window},
      {CODA_MODEL_SET_WINDOW, "sliding-pattern", o->model.sliding_pattern, c.sliding_pattern}};
  if ((o->model_set & CODA_MODEL_SET_FAMILY) && o->model.family != c.family)
    return coda_fail(r->ctx, CODA_ERR_INVALID_ARGUMENT, "%s is a model of family %s, but family "
                     "%s was asked for; leave --family out, or give %s", ck,
                     coda_model_family_name(c.family), coda_model_family_name(o->model.family),
                     coda_model_family_name(c.family));
  /* fine-tuning may train at a shorter sequence than the checkpoint's
   * window (weights do not depend on it; positions stay below it), but
   * GPT-2's learned positions are seq rows of its weights */
  const int gpt2 = c.family == CODA_FAMILY_GPT2;
  const int shorter_seq = o->init && (o->model_set & CODA_MODEL_SET_SEQ) && o->model.seq >= 1 &&
                          o->model.seq <= c.seq && !gpt2;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if ((o->model_set & f[i].bit) && f[i].want != f[i].have &&
        !(f[i].bit == CODA_MODEL_SET_SEQ && shorter_seq))
      return coda_fail(r->ctx, CODA_ERR_INVALID_ARGUMENT, "%s has %s %d, but %s %d was asked "
                       "for; the checkpoint's model is used: leave the model settings out, or "
                       "give its values%s", ck, f[i].name, f[i].have, f[i].name, f[i].want,
                       f[i].bit != CODA_MODEL_SET_SEQ || !o->init ? ""
                       : gpt2 ? " (gpt2's learned positions are seq rows of its weights: "
                       "fine-tuning keeps its seq)" : " (a shorter --seq is allowed when "
                       "fine-tuning)");
  if (shorter_seq) c.seq = o->model.seq;
  o->model = c;
  return CODA_OK;
}

/* The engine and the configuration checked against the device, the data
 * and the limits. */
static coda_status resolve_model(coda_train_run *r) {
  coda_context ctx = r->ctx;
  coda_train_options *o = &r->o;
  if (o->resume && o->init)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "resume and init exclude each other");
  if (o->resume || o->init) {
    coda_status s = take_checkpoint_config(r);
    if (s) return s;
  }
  /* the family is known now (a checkpoint's may differ from the options') */
  r->engine = coda_engine_for_model(o->engine, &o->model);
  r->gpu = coda_context_backend(ctx) == CODA_BACKEND_CUDA;
  /* the GPU runs the plans only: automatic takes them for every family */
  if (r->gpu && o->engine == CODA_TRAIN_ENGINE_AUTO) r->engine = CODA_ENGINE_PLANS;
  if (r->gpu && o->model.family != CODA_FAMILY_LLAMA && o->model.family != CODA_FAMILY_QWEN3 &&
      o->model.family != CODA_FAMILY_GPT2 && o->model.family != CODA_FAMILY_GEMMA3)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "family %s trains on the CPU so far (--device "
                     "cpu): the GPU trainer runs the llama, qwen3, gpt2 and gemma3 families",
                     coda_model_family_name(o->model.family));
  /* gemma3 on several GPUs has not run yet: one rank, as gpt2 */
  if (r->gpu && r->dp &&
      (o->model.family == CODA_FAMILY_GPT2 || o->model.family == CODA_FAMILY_GEMMA3))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "data parallel training on the GPU runs the "
                     "llama and qwen3 families; family %s trains on one GPU (one rank)",
                     coda_model_family_name(o->model.family));
  if (r->gpu && r->engine != CODA_ENGINE_PLANS)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "on the GPU the trainer runs the plan engine (--engine plans or auto), not "
                     "the host reference");
  if (r->sharded && (r->gpu || r->engine != CODA_ENGINE_REFERENCE))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "sharded weights (ZeRO-3, --zero 3) run on the "
                     "CPU reference engine only so far (--device cpu --engine reference)");
  const uint32_t voc = r->trv.vocab, vvoc = r->vav.vocab;
  if ((uint32_t)o->model.vocab < voc || (uint32_t)o->model.vocab < vvoc)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: vocabulary of %u tokens exceeds the "
                     "model's vocab %d", (uint32_t)o->model.vocab < voc ? r->trp : r->vap,
                     (uint32_t)o->model.vocab < voc ? voc : vvoc, o->model.vocab);
  const int N = r->N;
  if ((int64_t)o->batch * o->model.seq * N > CODA_MAX_BATCH_TOKENS ||
      (int64_t)o->batch * o->model.seq * o->accum * N > INT32_MAX)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "batch %d x seq %d x accum %d x ranks %d: too many tokens (at most %d per "
                     "micro-batch of all ranks and 2^31 - 1 per step)", o->batch, o->model.seq,
                     o->accum, N, CODA_MAX_BATCH_TOKENS);
  if (coda_context_backend(ctx) == CODA_BACKEND_CPU &&
      coda_model_config_params(&o->model) > CODA_CPU_MAX_PARAMS)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "a model of %lld parameters (%.1f GiB of fp32 weights, gradients and AdamW "
                     "moments) is beyond the CPU trainer's limit of %lld; the 1b and 8b "
                     "configurations are for the GPU",
                     (long long)coda_model_config_params(&o->model),
                     16.0 * (double)coda_model_config_params(&o->model) / (1024.0 * 1024 * 1024),
                     (long long)CODA_CPU_MAX_PARAMS);
  return CODA_OK;
}

coda_status coda_train_setup_model(coda_train_run *r) {
  coda_context ctx = r->ctx;
  coda_status s = resolve_model(r);
  if (!s) s = coda_model_create(ctx, &r->o.model, r->engine, &r->model);
  if (s) return s;
  const size_t n = r->n = coda_model_size(r->model);
  r->mom = calloc(n, sizeof *r->mom);
  r->vel = calloc(n, sizeof *r->vel);
  const int B = r->B = r->o.batch, T = r->T = r->o.model.seq, N = r->N;
  r->in = malloc((size_t)B * T * sizeof *r->in);
  r->tg = malloc((size_t)B * T * sizeof *r->tg);
  if (r->dp) {
    r->gin = malloc((size_t)N * B * T * sizeof *r->gin);
    r->gtg = malloc((size_t)N * B * T * sizeof *r->gtg);
    if (!r->gin || !r->gtg) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  int64_t cap = r->o.steps + 1;
  r->hx = malloc((size_t)cap * sizeof *r->hx); r->hy = malloc((size_t)cap * sizeof *r->hy);
  r->vx = malloc((size_t)cap * sizeof *r->vx); r->vy = malloc((size_t)cap * sizeof *r->vy);
  if (!r->mom || !r->vel || !r->in || !r->tg || !r->hx || !r->hy || !r->vx || !r->vy)
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  return CODA_OK;
}

static coda_status zero3_gather(void *u, int k) {
  coda_zero3_hooks *q = u;
  return coda_zero_cpu_gather_bucket(q->ctx, q->z, k, q->W);
}
static void zero3_release(void *u, int k) {
  coda_zero3_hooks *q = u;
  coda_zero_cpu_release_bucket(q->z, k, q->W);
}
static coda_status zero3_grad_done(void *u, int k) {
  coda_zero3_hooks *q = u;
  return coda_zero_cpu_reduce_bucket(q->ctx, q->z, k, q->G, q->micro > 0);
}
void coda_zero3_release_all(coda_zero3_hooks *q) {
  for (int k = 0; k < q->z->nb; k++) coda_zero_cpu_release_bucket(q->z, k, q->W);
}

/* Weights from a checkpoint (resume: with the moments and the trainer's
 * state) or drawn from the seed, and the data order's seed. */
static coda_status load_weights(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  coda_train_state *st = &r->st;
  if (o->resume) {
    coda_status s = coda_checkpoint_load(ctx, o->resume, r->model, r->mom, r->vel, st);
    if (s) return s;
    if (st->step >= o->steps)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "%s is at step %lld; --steps %lld leaves nothing to do", o->resume,
                       (long long)st->step, (long long)o->steps);
  } else if (o->init) {
    coda_status s = coda_checkpoint_load(ctx, o->init, r->model, NULL, NULL, NULL);
    if (s) return s;
    st->rng = o->seed * 0x9e3779b97f4a7c15ull + 0x64617461ull;
  } else {
    /* one GPU: drawn on the device, the host buffer is not touched */
    if (!r->gpu || r->dp) coda_model_init(r->model, o->seed);
    st->rng = o->seed * 0x9e3779b97f4a7c15ull + 0x64617461ull; /* data order from the seed */
  }
  return CODA_OK;
}

/* Data parallel: every rank holds the same weights; the optimizer state
 * is sharded (and with ZeRO-3 the weights too). */
static coda_status shard_state(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const int gpu = r->gpu;
  coda_status s = coda_zero_create(ctx, r->model, r->comm, !gpu, &r->zero);
  if (!s && gpu) s = coda_plans_device_set_zero(ctx, r->model, r->zero);
  if (!s && !gpu)
    coda_zero_cpu_take(r->zero, r->o.resume ? r->mom : NULL, r->o.resume ? r->vel : NULL);
  if (s) return s;
  if (r->sharded) { /* from here a rank holds its pieces of W; the rest is gathered when read */
    coda_zero3_hooks *z3 = &r->z3;
    z3->h.user = z3;
    z3->h.gather = zero3_gather;
    z3->h.release = zero3_release;
    z3->h.grad_done = zero3_grad_done;
    z3->ctx = ctx;
    z3->z = r->zero;
    z3->W = coda_model_weights(r->model);
    z3->G = coda_model_grads(r->model);
    coda_model_set_ref_hooks(r->model, &z3->h);
    coda_zero3_release_all(z3);
  }
  return CODA_OK;
}

coda_status coda_train_setup_state(coda_train_run *r) {
  coda_context ctx = r->ctx;
  const coda_train_options *o = &r->o;
  coda_status s = load_weights(r);
  if (s) return s;
  /* The tokenizer goes beside the checkpoint and is named in it; without
   * one, a resumed checkpoint's record is not carried over (its file is
   * beside the old checkpoint, not necessarily beside this one). */
  r->st.tokenizer_file[0] = '\0';
  if (o->tokenizer && r->lead) {
    s = coda_checkpoint_carry_tokenizer(ctx, o->tokenizer, r->ckpt,
                                        coda_model_cfg(r->model)->vocab, &r->st);
    if (s) return s;
  }
  if (r->dp) {
    s = shard_state(r);
    if (s) return s;
  }
  const int bf16 = o->optim_state == CODA_OPTIM_STATE_BF16;
  if (bf16 && r->gpu) s = coda_plans_device_set_bf16_state(ctx, r->model, o->seed);
  if (s) return s;
  if (bf16 && !r->gpu) { /* the host state held as bf16 values from the start */
    coda_round_bf16(coda_model_weights(r->model), r->n);
    coda_round_bf16(r->mom, r->n);
    coda_round_bf16(r->vel, r->n);
  }
  if (r->gpu && !r->dp && !o->resume && !o->init) {
    s = coda_plans_device_init(ctx, r->model, o->seed);
  } else if (r->gpu) { /* master weights and moments to the device */
    s = coda_plans_device_upload(ctx, r->model, o->resume ? r->mom : NULL,
                                 o->resume ? r->vel : NULL);
  }
  if (s) return s;
  r->sampler = (coda_sampler){r->trv.tok, r->trv.count, r->st.rng, r->st.drawn};
  return CODA_OK;
}
