/* coda demo: a small Llama-style model (a stack of blocks and the LM head)
 * with random weights, trained for one step's forward and backward
 * through the block plans on the CPU: in bf16 storage with fp32 compute,
 * then in fp64 (exact mode) against the unfused reference. Prints time
 * per step, the loss, and the largest relative deviation (max abs error /
 * max abs value) of each tensor group from the unfused fp64 reference.
 * Exits nonzero if the fp64 plan deviates by more than 1e-9. */
#include "coda_nn.h"
#include "tool_util.h"

#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct demo_opts {
  int layers, dim, seq, batch, heads, kv_heads, ffn, vocab, steps, threads;
  int print_plan, chain;
  unsigned long long seed;
} demo_opts;

/* The numeric options (tool_util.h). The demo holds every layer's weights
 * and activations on the host (and the device), so sizes are bounded here
 * with a message, not by running out of memory. */
static const coda_tool_num demo_nums[] = {
    {"--layers", 1, 1, 64, 0, 0, "transformer blocks"},
    {"--dim", 1, 1, 8192, 0, 0, "model width"},
    {"--seq", 1, 1, 8192, 0, 0, "sequence length"},
    {"--batch", 1, 1, 1024, 0, 0, "sequences per step"},
    {"--heads", 1, 1, 256, 0, 0, "attention heads"},
    {"--kv-heads", 1, 1, 256, 0, 0, "key/value heads"},
    {"--ffn", 1, 1, 32768, 0, 0, "feed-forward hidden size (default 3 x --dim)"},
    {"--vocab", 1, 1, 1 << 18, 0, 0, "vocabulary size"},
    {"--steps", 1, 1, 10000, 0, 0, "timed steps"},
    {"--threads", 1, 1, 4096, 0, 0, "CPU threads"},
    {"--seed", 1, 1, 1 << 20, 0, 0, "the random weights' seed"},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static void demo_usage(FILE *f) {
  fprintf(f,
          "usage: coda demo [--layers N] [--dim D] [--seq T] [--batch B] [--heads H]\n"
          "                 [--kv-heads H] [--ffn F] [--vocab V] [--steps S] [--threads N]\n"
          "                 [--seed S] [--no-chain] [--print-plan]\n"
          "Runs forward and backward of a random Llama-style model (blocks + LM head)\n"
          "through the block plans: bf16 storage / fp32 compute, and fp64 against the\n"
          "unfused reference. Defaults: 2 layers, dim 128, seq 64, batch 4, heads 4/2,\n"
          "ffn 3*dim, vocab 256, 3 timed steps. Blocks are chained (each block's last\n"
          "GEMM produces the next RMSNorm's input); --no-chain runs self-contained\n"
          "blocks. --print-plan prints the plans (first block, a middle block, head).\n");
  coda_tool_num_help(f, demo_nums);
}

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state;
static double rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

/* One layer's weights in the reference layout (bf16-representable values). */
typedef struct layer {
  coda_llama_ref_weights w, g;
  int64_t n[7];
} layer;

static double **slot(coda_llama_ref_weights *w, int i) {
  double **s[7] = {&w->wqkv, &w->wo, &w->wgate, &w->wup, &w->wd, &w->wn1, &w->wn2};
  return s[i];
}

static double *alloc_rand(int64_t n, double scale, double offset) {
  double *v = malloc(sizeof(double) * (size_t)n);
  if (!v) return NULL;
  for (int64_t i = 0; i < n; i++) v[i] = coda_dtype_round(CODA_BF16, offset + scale * rnd());
  return v;
}

/* max |a - b| / max |b| over n elements, folded into *acc (max). */
static void dev(double *acc, const double *a, const double *b, int64_t n) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]);
    if (!(d <= e)) e = d;
    m = fmax(m, fabs(b[i]));
  }
  double r = m > 0 ? e / m : e;
  if (!(r <= *acc)) *acc = r;
}

enum { G_ACT, G_DX, G_ATTN, G_MLP, G_NORM, G_HEAD, G_COUNT };
static const char *group_names[G_COUNT] = {
    "activations (block outputs)", "input gradient dx", "attention weights (dWqkv, dWo)",
    "MLP weights (dWgu, dWd)", "norm weights (dwn1, dwn2, dwnf)", "LM head weight (dWout)"};

typedef struct model_run {
  coda_plan *blocks;
  coda_plan head;
  double loss;
} model_run;

static int fail_ctx(coda_context ctx, const char *what) {
  fprintf(stderr, "coda demo: %s: %s\n", what, coda_last_error(ctx));
  return 0;
}

/* Builds the plan stack for one context, loads the weights, and links the
 * plans (coda_llama_link: x_out -> next x, next dx -> dx_out, and when
 * chained each block's down GEMM produces the next RMSNorm's input and
 * statistics) without copies. */
static int build_stack(coda_context ctx, const coda_llama_config *c, int L, int chain, layer *ly,
                       const double *wnf, const double *wout, const double *x,
                       const int32_t *tgt, model_run *r) {
  int64_t M = c->batch * c->seq, D = c->dim, F = c->ffn_dim;
  int64_t nqkv = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
  r->blocks = calloc((size_t)L, sizeof(coda_plan));
  if (!r->blocks) return 0;
  coda_tensor t;
  for (int l = 0; l < L; l++) {
    coda_llama_config cl = *c;
    if (chain) cl.flags = (l > 0 ? CODA_LLAMA_NORM_IN : 0u) | CODA_LLAMA_NORM_OUT;
    if (coda_llama_block_plan(ctx, &cl, &r->blocks[l]) != CODA_OK) return fail_ctx(ctx, "block plan");
    coda_plan p = r->blocks[l];
    if (coda_plan_tensor(p, "wqkv", &t) != CODA_OK) return fail_ctx(ctx, "wqkv");
    for (int64_t i = 0; i < nqkv; i++)
      for (int64_t k = 0; k < D; k++) coda_tensor_set(&t, coda_llama_qkv_row(c, i), k, ly[l].w.wqkv[i * D + k]);
    if (coda_plan_tensor(p, "wgu", &t) != CODA_OK) return fail_ctx(ctx, "wgu");
    for (int64_t f = 0; f < F; f++)
      for (int64_t k = 0; k < D; k++) {
        coda_tensor_set(&t, 2 * f, k, ly[l].w.wgate[f * D + k]);
        coda_tensor_set(&t, 2 * f + 1, k, ly[l].w.wup[f * D + k]);
      }
    const char *names[4] = {"wo", "wd", "wn1", "wn2"};
    const double *src[4] = {ly[l].w.wo, ly[l].w.wd, ly[l].w.wn1, ly[l].w.wn2};
    for (int i = 0; i < 4; i++) {
      if (coda_plan_tensor(p, names[i], &t) != CODA_OK) return fail_ctx(ctx, names[i]);
      for (int64_t a = 0; a < t.rows; a++)
        for (int64_t b = 0; b < t.cols; b++) coda_tensor_set(&t, a, b, src[i][a * t.cols + b]);
    }
    if (l > 0 && coda_llama_link(r->blocks[l - 1], p) != CODA_OK) return fail_ctx(ctx, "link");
  }
  if (coda_plan_tensor(r->blocks[0], "x", &t) != CODA_OK) return fail_ctx(ctx, "x");
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < D; k++) coda_tensor_set(&t, m, k, x[m * D + k]);
  coda_llama_config ch = *c;
  if (chain) ch.flags = CODA_LLAMA_NORM_IN;
  if (coda_llama_head_plan(ctx, &ch, &r->head) != CODA_OK) return fail_ctx(ctx, "head plan");
  if (coda_plan_tensor(r->head, "wnf", &t) != CODA_OK) return fail_ctx(ctx, "wnf");
  for (int64_t k = 0; k < D; k++) coda_tensor_set(&t, 0, k, wnf[k]);
  if (coda_plan_tensor(r->head, "wout", &t) != CODA_OK) return fail_ctx(ctx, "wout");
  for (int64_t v = 0; v < c->vocab; v++)
    for (int64_t k = 0; k < D; k++) coda_tensor_set(&t, v, k, wout[v * D + k]);
  if (coda_plan_tensor(r->head, "targets", &t) != CODA_OK) return fail_ctx(ctx, "targets");
  for (int64_t m = 0; m < M; m++) ((int32_t *)t.data)[m * t.ld] = tgt[m];
  if (coda_llama_link(r->blocks[L - 1], r->head) != CODA_OK) return fail_ctx(ctx, "link head");
  return 1;
}

static int run_step(coda_context ctx, int L, model_run *r) {
  for (int l = 0; l < L; l++)
    if (coda_plan_run(ctx, r->blocks[l], CODA_PHASE_FORWARD) != CODA_OK)
      return fail_ctx(ctx, "forward");
  if (coda_plan_run(ctx, r->head, CODA_PHASE_FORWARD) != CODA_OK ||
      coda_plan_run(ctx, r->head, CODA_PHASE_BACKWARD) != CODA_OK)
    return fail_ctx(ctx, "head");
  for (int l = L - 1; l >= 0; l--)
    if (coda_plan_run(ctx, r->blocks[l], CODA_PHASE_BACKWARD) != CODA_OK)
      return fail_ctx(ctx, "backward");
  coda_tensor t;
  if (coda_plan_tensor(r->head, "loss", &t) != CODA_OK) return fail_ctx(ctx, "loss");
  r->loss = coda_tensor_get(&t, 0, 0);
  return 1;
}

static void free_stack(int L, model_run *r) {
  if (r->blocks)
    for (int l = 0; l < L; l++) coda_plan_destroy(r->blocks[l]);
  free(r->blocks);
  coda_plan_destroy(r->head);
  memset(r, 0, sizeof *r);
}

static double *read_named(coda_plan p, const char *name) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return NULL;
  double *v = malloc(sizeof(double) * (size_t)(t.rows * t.cols));
  if (!v) return NULL;
  for (int64_t a = 0; a < t.rows; a++)
    for (int64_t b = 0; b < t.cols; b++) v[a * t.cols + b] = coda_tensor_get(&t, a, b);
  return v;
}

/* Deviations of a plan stack from the reference, per group. */
static int deviations(const coda_llama_config *c, int L, model_run *r, layer *ly,
                      double **xs_ref, const double *dx0_ref, const double *dwnf_ref,
                      const double *dwout_ref, double *g) {
  int64_t M = c->batch * c->seq, D = c->dim, F = c->ffn_dim, V = c->vocab;
  int64_t nqkv = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
  for (int i = 0; i < G_COUNT; i++) g[i] = 0;
  for (int l = 0; l < L; l++) {
    coda_plan p = r->blocks[l];
    double *xo = read_named(p, "x_out"), *q = read_named(p, "dwqkv"), *gu = read_named(p, "dwgu");
    double *wo = read_named(p, "dwo"), *wd = read_named(p, "dwd"), *n1 = read_named(p, "dwn1"),
           *n2 = read_named(p, "dwn2");
    double *qr = malloc(sizeof(double) * (size_t)(nqkv * D)), *gg = malloc(sizeof(double) * (size_t)(F * D)),
           *uu = malloc(sizeof(double) * (size_t)(F * D));
    int ok = xo && q && gu && wo && wd && n1 && n2 && qr && gg && uu;
    if (ok) {
      for (int64_t i = 0; i < nqkv; i++)
        for (int64_t k = 0; k < D; k++) qr[i * D + k] = q[coda_llama_qkv_row(c, i) * D + k];
      for (int64_t f = 0; f < F; f++)
        for (int64_t k = 0; k < D; k++) {
          gg[f * D + k] = gu[2 * f * D + k];
          uu[f * D + k] = gu[(2 * f + 1) * D + k];
        }
      dev(&g[G_ACT], xo, xs_ref[l + 1], M * D);
      dev(&g[G_ATTN], qr, ly[l].g.wqkv, ly[l].n[0]);
      dev(&g[G_ATTN], wo, ly[l].g.wo, ly[l].n[1]);
      dev(&g[G_MLP], gg, ly[l].g.wgate, ly[l].n[2]);
      dev(&g[G_MLP], uu, ly[l].g.wup, ly[l].n[3]);
      dev(&g[G_MLP], wd, ly[l].g.wd, ly[l].n[4]);
      dev(&g[G_NORM], n1, ly[l].g.wn1, D);
      dev(&g[G_NORM], n2, ly[l].g.wn2, D);
    }
    free(xo); free(q); free(gu); free(wo); free(wd); free(n1); free(n2); free(qr); free(gg); free(uu);
    if (!ok) return 0;
  }
  double *dx = read_named(r->blocks[0], "dx"), *nf = read_named(r->head, "dwnf"),
         *wout = read_named(r->head, "dwout");
  int ok = dx && nf && wout;
  if (ok) {
    dev(&g[G_DX], dx, dx0_ref, M * D);
    dev(&g[G_NORM], nf, dwnf_ref, D);
    dev(&g[G_HEAD], wout, dwout_ref, V * D);
  }
  free(dx); free(nf); free(wout);
  return ok;
}

/* A phase's result when the command goes on (else the exit status). */
#define GO_ON (-1)

/* The flags into o, checked against the demo's bounds. */
static int demo_parse(demo_opts *o, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int *dst = !strcmp(a, "--layers")     ? &o->layers
               : !strcmp(a, "--dim")      ? &o->dim
               : !strcmp(a, "--seq")      ? &o->seq
               : !strcmp(a, "--batch")    ? &o->batch
               : !strcmp(a, "--heads")    ? &o->heads
               : !strcmp(a, "--kv-heads") ? &o->kv_heads
               : !strcmp(a, "--ffn")      ? &o->ffn
               : !strcmp(a, "--vocab")    ? &o->vocab
               : !strcmp(a, "--steps")    ? &o->steps
               : !strcmp(a, "--threads")  ? &o->threads
                                          : NULL;
    const coda_tool_num *num = coda_tool_num_find(demo_nums, a);
    if (num) {
      long long x;
      if (coda_tool_num_parse_ll("demo", num, v, &x)) return 2;
      if (dst) *dst = (int)x;
      else o->seed = (unsigned long long)x; /* --seed */
      i++;
    } else if (!strcmp(a, "--print-plan")) {
      o->print_plan = 1;
    } else if (!strcmp(a, "--no-chain")) {
      o->chain = 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      demo_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "coda demo: unknown option '%s'\n", a);
      demo_usage(stderr);
      return 2;
    }
  }
  if (o->ffn == 0) o->ffn = 3 * o->dim;
  {
    /* weights and activations of every layer, in elements */
    const double D = o->dim, F = o->ffn, M = (double)o->batch * o->seq, L = o->layers;
    const double elems = L * (4.0 * D * D + 3.0 * D * F) + (double)o->vocab * D +
                         L * M * (8.0 * D + 3.0 * F) + M * (double)o->vocab;
    if (M > (1 << 16) || elems > (double)(1 << 28)) {
      fprintf(stderr, "coda demo: --layers %d --dim %d --ffn %d --batch %d --seq %d --vocab %d "
              "is too large for the demo (at most 65536 tokens, batch x seq, and 2^28 weight "
              "and activation elements; this is %.3g)\n", o->layers, o->dim, o->ffn, o->batch,
              o->seq, o->vocab, elems);
      return 2;
    }
  }
  if (o->dim % o->heads || (o->dim / o->heads) % 2 || o->heads % o->kv_heads) {
    fprintf(stderr, "coda demo: dim must split into heads of even size, and heads must be a "
                    "multiple of kv-heads\n");
    return 2;
  }
  return GO_ON;
}

/* --print-plan: the plans of the blocks and the head, as text. */
static int print_plans(coda_context c32, const coda_llama_config *c, int chain) {
  coda_plan bp = NULL, mp = NULL, hp = NULL;
  coda_llama_config cf = *c, cm = *c, chd = *c;
  if (chain) {
    cf.flags = CODA_LLAMA_NORM_OUT;
    cm.flags = CODA_LLAMA_NORM_IN | CODA_LLAMA_NORM_OUT;
    chd.flags = CODA_LLAMA_NORM_IN;
  }
  int ok = coda_llama_block_plan(c32, &cf, &bp) == CODA_OK &&
           coda_llama_block_plan(c32, &cm, &mp) == CODA_OK &&
           coda_llama_head_plan(c32, &chd, &hp) == CODA_OK;
  if (ok && chain)
    printf("# first block\n%s\n# every later block\n%s\n# LM head\n%s", coda_plan_text(bp),
           coda_plan_text(mp), coda_plan_text(hp));
  else if (ok)
    printf("# every block\n%s\n# LM head\n%s", coda_plan_text(bp), coda_plan_text(hp));
  else fprintf(stderr, "coda demo: %s\n", coda_last_error(c32));
  coda_plan_destroy(bp);
  coda_plan_destroy(mp);
  coda_plan_destroy(hp);
  return ok ? 0 : 1;
}

/* The unfused fp64 reference, forward and backward, into xs, dxs and the
 * gradients; 0 when out of memory. */
static int reference_pass(const coda_llama_config *c64cfg, int L, layer *ly, double **xs, double **dxs,
                          const double *wnf, const double *wout, const int32_t *tgt, double *loss_ref,
                          double *dwnf, double *dwout) {
  const int64_t M = c64cfg->batch * c64cfg->seq, D = c64cfg->dim;
  for (int l = 0; l < L; l++)
    if (coda_llama_reference_block(c64cfg, CODA_F64, &ly[l].w, xs[l], xs[l + 1], NULL, NULL, NULL)) return 0;
  if (coda_llama_reference_head(c64cfg, CODA_F64, wnf, wout, xs[L], tgt, loss_ref, NULL, dxs[L], dwnf, dwout))
    return 0;
  for (int l = L - 1; l >= 0; l--) {
    double *tmp = calloc((size_t)(M * D), sizeof(double));
    if (!tmp) return 0;
    int e = coda_llama_reference_block(c64cfg, CODA_F64, &ly[l].w, xs[l], tmp, dxs[l + 1], dxs[l], &ly[l].g);
    free(tmp);
    if (e) return 0;
  }
  return 1;
}

/* The times, the losses and the deviations from the reference; 0 when
 * the fp64 plan matches it. */
static int demo_report(int64_t V, double t_bf16, double t_f64, double t_ref, double loss32, double loss64,
                       double loss_ref, double lossdev32, double lossdev64, const double *g32,
                       const double *g64) {
  printf("\ntime per step (forward + backward):\n");
  printf("  plan, bf16 storage / fp32 compute   %9.2f ms\n", 1e3 * t_bf16);
  printf("  plan, fp64 (exact mode)             %9.2f ms\n", 1e3 * t_f64);
  printf("  unfused reference, fp64 (naive)     %9.2f ms\n", 1e3 * t_ref);
  printf("\nloss (mean cross-entropy, ln %lld = %.4f):\n", (long long)V, log((double)V));
  printf("  plan bf16 %.6f   plan fp64 %.12f   unfused fp64 %.12f\n", loss32, loss64, loss_ref);
  printf("\nlargest relative deviation from the unfused fp64 reference\n"
         "(max |plan - ref| / max |ref| over the group):\n");
  printf("  %-34s %12s %12s\n", "group", "plan fp64", "plan bf16");
  printf("  %-34s %12.3e %12.3e\n", "loss", lossdev64, lossdev32);
  double worst = lossdev64;
  for (int i = 0; i < G_COUNT; i++) {
    printf("  %-34s %12.3e %12.3e\n", group_names[i], g64[i], g32[i]);
    if (!(g64[i] <= worst)) worst = g64[i];
  }
  if (worst <= 1e-9) {
    printf("\nfp64 plan matches the unfused block to %.1e: OK\n", worst);
    return 0;
  }
  printf("\nfp64 plan deviates by %.3e (> 1e-9): FAILED\n", worst);
  return 1;
}

int cmd_demo(int argc, char **argv) {
  demo_opts o = {2, 128, 64, 4, 4, 2, 0, 256, 3, 0, 0, 1, 1};
  int prc = demo_parse(&o, argc, argv);
  if (prc != GO_ON) return prc;
  coda_llama_config c = coda_llama_default_config();
  c.dim = o.dim;
  c.n_heads = o.heads;
  c.n_kv_heads = o.kv_heads;
  c.head_dim = o.dim / o.heads;
  c.ffn_dim = o.ffn;
  c.vocab = o.vocab;
  c.batch = o.batch;
  c.seq = o.seq;
  c.rope_theta = 10000.0;
  c.dtype = CODA_BF16;

  coda_context_options co = coda_context_default_options();
  co.num_threads = o.threads;
  coda_context c32 = NULL, c64 = NULL;
  if (coda_tool_context(&co, &c32, "demo", "CPU") != CODA_OK) return 1;
  if (o.print_plan) {
    int rc = print_plans(c32, &c, o.chain);
    coda_context_destroy(c32);
    return rc;
  }
  co.precision = CODA_PRECISION_F64;
  if (coda_tool_context(&co, &c64, "demo", "exact-mode") != CODA_OK) {
    coda_context_destroy(c32);
    return 1;
  }

  const int L = o.layers;
  const int64_t M = c.batch * c.seq, D = c.dim, V = c.vocab;
  rng_state = 0x9e3779b97f4a7c15ull * (o.seed + 1);
  int ok = 1, rc = 1;
  layer *ly = calloc((size_t)L, sizeof(layer));
  double **xs = calloc((size_t)L + 1, sizeof(double *));
  double **dxs = calloc((size_t)L + 1, sizeof(double *));
  double *wnf = NULL, *wout = NULL, *dwnf = NULL, *dwout = NULL;
  int32_t *tgt = malloc(sizeof(int32_t) * (size_t)M);
  model_run r32 = {0}, r64 = {0};
  if (!ly || !xs || !dxs || !tgt) ok = 0;

  /* random weights, bf16-representable so every run sees the same model */
  for (int l = 0; ok && l < L; l++) {
    int64_t hd = c.head_dim, nqkv = (c.n_heads + 2 * c.n_kv_heads) * hd;
    int64_t n[7] = {nqkv * D, D * c.n_heads * hd, c.ffn_dim * D, c.ffn_dim * D, D * c.ffn_dim, D, D};
    double sc[7] = {1 / sqrt((double)D), 1 / sqrt((double)(c.n_heads * hd)), 1 / sqrt((double)D),
                    1 / sqrt((double)D), 1 / sqrt((double)c.ffn_dim), 0.1, 0.1};
    for (int i = 0; i < 7; i++) {
      ly[l].n[i] = n[i];
      *slot(&ly[l].w, i) = alloc_rand(n[i], sc[i], i >= 5 ? 1.0 : 0.0);
      *slot(&ly[l].g, i) = calloc((size_t)n[i], sizeof(double));
      if (!*slot(&ly[l].w, i) || !*slot(&ly[l].g, i)) ok = 0;
    }
  }
  if (ok) {
    wnf = alloc_rand(D, 0.1, 1.0);
    wout = alloc_rand(V * D, 2.0 / sqrt((double)D), 0.0);
    dwnf = calloc((size_t)D, sizeof(double));
    dwout = calloc((size_t)(V * D), sizeof(double));
    for (int l = 0; l <= L; l++) {
      xs[l] = calloc((size_t)(M * D), sizeof(double));
      dxs[l] = calloc((size_t)(M * D), sizeof(double));
      if (!xs[l] || !dxs[l]) ok = 0;
    }
    ok = ok && wnf && wout && dwnf && dwout;
  }
  if (ok) {
    for (int64_t i = 0; i < M * D; i++) xs[0][i] = coda_dtype_round(CODA_BF16, rnd());
    for (int64_t m = 0; m < M; m++)
      tgt[m] = m % 16 == 15 ? -100 : (int32_t)((int64_t)((rnd() + 1.0) * 0.5 * (double)V) % V);
  }
  if (!ok) {
    fprintf(stderr, "coda demo: out of memory\n");
    goto done;
  }

  printf("coda demo: %d %s blocks + LM head, dim %lld, heads %lld/%lld (hd %lld), ffn %lld, vocab %lld, "
         "batch %lld x seq %lld\n",
         L, o.chain ? "chained" : "self-contained", (long long)D, (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim,
         (long long)c.ffn_dim, (long long)V, (long long)c.batch, (long long)c.seq);

  /* bf16 plans, timed */
  if (!build_stack(c32, &c, L, o.chain, ly, wnf, wout, xs[0], tgt, &r32)) goto done;
  if (!run_step(c32, L, &r32)) goto done; /* warm-up */
  double t0 = now_s();
  for (int s = 0; s < o.steps; s++)
    if (!run_step(c32, L, &r32)) goto done;
  double t_bf16 = (now_s() - t0) / o.steps;

  /* fp64 plans */
  coda_llama_config c64cfg = c;
  c64cfg.dtype = CODA_F64;
  if (!build_stack(c64, &c64cfg, L, o.chain, ly, wnf, wout, xs[0], tgt, &r64)) goto done;
  t0 = now_s();
  if (!run_step(c64, L, &r64)) goto done;
  double t_f64 = now_s() - t0;

  /* unfused reference in fp64 */
  t0 = now_s();
  double loss_ref;
  if (!reference_pass(&c64cfg, L, ly, xs, dxs, wnf, wout, tgt, &loss_ref, dwnf, dwout)) goto oom;
  double t_ref = now_s() - t0;

  double g32[G_COUNT], g64[G_COUNT];
  if (!deviations(&c, L, &r32, ly, xs, dxs[0], dwnf, dwout, g32) ||
      !deviations(&c64cfg, L, &r64, ly, xs, dxs[0], dwnf, dwout, g64))
    goto oom;
  double lossdev32 = fabs(r32.loss - loss_ref) / fabs(loss_ref);
  double lossdev64 = fabs(r64.loss - loss_ref) / fabs(loss_ref);

  rc = demo_report(V, t_bf16, t_f64, t_ref, r32.loss, r64.loss, loss_ref, lossdev32, lossdev64, g32, g64);
  goto done;
oom:
  fprintf(stderr, "coda demo: out of memory\n");
done:
  free_stack(L, &r32);
  free_stack(L, &r64);
  if (ly)
    for (int l = 0; l < L; l++)
      for (int i = 0; i < 7; i++) {
        free(*slot(&ly[l].w, i));
        free(*slot(&ly[l].g, i));
      }
  if (xs)
    for (int l = 0; l <= L; l++) free(xs[l]);
  if (dxs)
    for (int l = 0; l <= L; l++) free(dxs[l]);
  free(ly); free(xs); free(dxs); free(wnf); free(wout); free(dwnf); free(dwout); free(tgt);
  coda_context_destroy(c32);
  coda_context_destroy(c64);
  return rc;
}
