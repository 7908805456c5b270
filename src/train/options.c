/* The trainer's options: their defaults and the checks made before a run
 * touches a file (ranges; with data parallel, the same options on every
 * rank). */
#include "train/train.h"
#include "dist/comm.h"

#include <math.h>
#include <string.h>

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

/* keep_logits resolved: automatic (-1) keeps the head's logits on a GPU
 * where they take at most 1/16 of its memory (the kept GEMM is faster
 * wherever it was measured; the bound leaves the memory to the blocks at
 * large vocabularies and long batches). */
int coda_train_keep_logits(coda_context ctx, const coda_train_options *o, int gpu, int64_t B,
                            int64_t T, int64_t V) {
  if (o->keep_logits >= 0) return o->keep_logits != 0;
  size_t used = 0, total = 0;
  if (!gpu || coda_plans_device_memory(ctx, &used, &total) != CODA_OK) return 0;
  return (double)B * (double)T * (double)V * 2.0 <= (double)total / 16.0;
}

coda_status coda_train_check_options(coda_context ctx, const coda_train_options *o) {
  if (o->keep_logits < -1 || o->keep_logits > 1)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "keep_logits %d: 1 (keep the head's logits), "
                     "0 (recompute them) or -1 (automatic)", o->keep_logits);
  if (o->batch < 1 || o->accum < 1 || o->steps < 1 || o->warmup < 0 || o->val_batches < 0 ||
      o->val_every < 0 || o->save_every < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "batch %d, accum %d, steps %lld must be >= 1; warmup, val-every, "
                     "val-batches, save-every >= 0",
                     o->batch, o->accum, (long long)o->steps);
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
  if ((int)o->optim_state < CODA_OPTIM_STATE_FP32 || (int)o->optim_state > CODA_OPTIM_STATE_BF16)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "optimizer state %d: 0 (fp32 master weights "
                     "and moments) or 1 (bf16 weights and moments)", (int)o->optim_state);
  if (o->optim_state == CODA_OPTIM_STATE_BF16 && o->comm && coda_comm_size(o->comm) > 1)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "bf16 optimizer state: one process only (data "
                     "parallel shards fp32 state); use the fp32 state with --ranks");
  if (o->comm && coda_comm_size(o->comm) > 1) {
    const int gpu = coda_context_backend(ctx) == CODA_BACKEND_CUDA;
    const coda_comm_kind k = coda_comm_get_kind(o->comm);
    if (gpu != (k == CODA_COMM_NCCL))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "data parallel on the %s needs the %s "
                       "communicator", gpu ? "GPU" : "CPU", gpu ? "NCCL" : "CPU");
  }
  return CODA_OK;
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
coda_status coda_train_check_same_options(coda_context ctx, coda_comm comm,
                                          const coda_train_options *o) {
  const coda_model_config *c = &o->model;
  const int iv[] = {c->vocab, c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->seq, c->tied,
                    o->batch, o->accum, o->val_every, o->val_batches, o->save_every,
                    (int)o->engine, (int)o->model_set, o->resume != NULL, o->init != NULL,
                    o->shard_weights, (int)c->family, c->head_dim};
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
