/* Shared helpers of the block-plan tests (folded plans, bf16 weight
 * gradients, the Llama-3 block against its reference, the GPU plans): the
 * Llama-3 block, its LM head and the GPT-2 block built from one set of
 * sizes, the same random inputs in two plans, a forward + backward run and
 * buffer comparisons. */
#ifndef CODA_TEST_PLAN_UTIL_H
#define CODA_TEST_PLAN_UTIL_H

#include "coda_nn.h"
#include "test_nn_llama_util.h"

typedef enum { PT_LLAMA_BLOCK, PT_LLAMA_HEAD, PT_GPT2_BLOCK } pt_kind;

/* Plan variants, mapped to each model's own flag. */
enum {
  PT_FOLD = 1u,     /* CODA_LLAMA_FOLD, CODA_GPT2_FOLD */
  PT_GRAD_ACT = 2u, /* CODA_LLAMA_GRAD_ACT, CODA_GPT2_GRAD_ACT */
  PT_NORM_OUT = 4u, /* CODA_LLAMA_NORM_OUT (the Llama-3 block only) */
  PT_INPLACE = 8u   /* CODA_LLAMA_INPLACE (the Llama-3 block only) */
};

/* Sizes of a test's plans: the Llama-3 ones, and GPT-2 with the same dim,
 * heads and tokens (head_dim = dim / n_heads) and its own FFN width. */
typedef struct pt_shape {
  int64_t dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
  int64_t batch, seq;
  int64_t gpt2_ffn_dim;
} pt_shape;

/* The small plans of the plan-variant tests: 2 x 7 tokens (a partial row
 * tile), dim 48 in 3 heads of 16 (Llama-3: one kv head), FFN 72 (GPT-2:
 * 80), vocab 53. */
static inline const pt_shape *pt_small(void) {
  static const pt_shape s = {.dim = 48, .n_heads = 3, .n_kv_heads = 1, .head_dim = 16, .ffn_dim = 72,
                             .vocab = 53, .batch = 2, .seq = 7, .gpt2_ffn_dim = 80};
  return &s;
}

/* The plans of the GPU plan tests (test_plan_gpu; test_graph_gpu shares its
 * precompiled kernels): M = 192, a partial 128-row tile; vocab not a
 * multiple of the 128-column tile; head_dim 64 (GPT-2 too: 256 / 4). */
static inline const pt_shape *pt_gpu_shape(void) {
  static const pt_shape s = {.dim = 256, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .ffn_dim = 384,
                             .vocab = 1000, .batch = 2, .seq = 96, .gpt2_ffn_dim = 512};
  return &s;
}

static inline coda_llama_config pt_llama_config(const pt_shape *s, coda_dtype dt, coda_tiling tl) {
  coda_llama_config c = coda_llama_default_config();
  c.dim = s->dim;
  c.n_heads = s->n_heads;
  c.n_kv_heads = s->n_kv_heads;
  c.head_dim = s->head_dim;
  c.ffn_dim = s->ffn_dim;
  c.vocab = s->vocab;
  c.batch = s->batch;
  c.seq = s->seq;
  c.rope_theta = 10000.0;
  c.dtype = dt;
  c.tiling = tl;
  return c;
}

static inline coda_gpt2_config pt_gpt2_config(const pt_shape *s, coda_dtype dt, coda_tiling tl) {
  coda_gpt2_config g = coda_gpt2_default_config();
  g.dim = s->dim;
  g.n_heads = s->n_heads;
  g.ffn_dim = s->gpt2_ffn_dim;
  g.batch = s->batch;
  g.seq = s->seq;
  g.dtype = dt;
  g.tiling = tl;
  return g;
}

/* A plan of the given kind, sizes (NULL: the library's default
 * configurations), storage dtype, tiling ({0, 0}: the default) and PT_*
 * flags. */
static inline coda_status pt_build(coda_context ctx, pt_kind kind, const pt_shape *s, coda_dtype dt,
                                   coda_tiling tl, unsigned flags, coda_plan *out) {
  if (kind == PT_GPT2_BLOCK) {
    coda_gpt2_config g = s ? pt_gpt2_config(s, dt, tl) : coda_gpt2_default_config();
    g.dtype = dt;
    g.tiling = tl;
    g.flags = ((flags & PT_FOLD) ? CODA_GPT2_FOLD : 0) | ((flags & PT_GRAD_ACT) ? CODA_GPT2_GRAD_ACT : 0);
    return coda_gpt2_block_plan(ctx, &g, out);
  }
  coda_llama_config c = s ? pt_llama_config(s, dt, tl) : coda_llama_default_config();
  c.dtype = dt;
  c.tiling = tl;
  c.flags = ((flags & PT_FOLD) ? CODA_LLAMA_FOLD : 0) | ((flags & PT_GRAD_ACT) ? CODA_LLAMA_GRAD_ACT : 0) |
            ((flags & PT_NORM_OUT) ? CODA_LLAMA_NORM_OUT : 0) | ((flags & PT_INPLACE) ? CODA_LLAMA_INPLACE : 0);
  return kind == PT_LLAMA_HEAD ? coda_llama_head_plan(ctx, &c, out) : coda_llama_block_plan(ctx, &c, out);
}

/* An output or a gradient: what a plan computes for its caller. */
static inline int pt_is_result(const plan_buf *b) {
  return b->role == PLAN_ROLE_OUTPUT || b->role == PLAN_ROLE_GRAD;
}

/* Random caller-facing inputs and weights (lt_rand), the same in both
 * plans: norm gains near 1, other vectors (biases) small, matrices scaled by
 * 1/sqrt(cols), targets in [0, vocab) but for some ignored rows. */
static inline int pt_fill_same(coda_plan a, coda_plan b, int64_t vocab) {
  for (int i = 0; i < a->nbuf; i++) {
    const plan_buf *pb = &a->bufs[i];
    if (pb->role != PLAN_ROLE_INPUT && pb->role != PLAN_ROLE_PARAM) continue;
    coda_tensor ta, tb;
    if (coda_plan_tensor(a, pb->name, &ta) != CODA_OK || coda_plan_tensor(b, pb->name, &tb) != CODA_OK)
      return 0;
    const int norm_w = !strncmp(pb->name, "wn", 2) || !strcmp(pb->name, "ln1_g") || !strcmp(pb->name, "ln2_g");
    const double scale = pb->role == PLAN_ROLE_INPUT ? 1.0 : 1.0 / sqrt((double)pb->cols);
    for (int64_t r = 0; r < pb->rows; r++)
      for (int64_t c = 0; c < pb->cols; c++) {
        double v;
        if (pb->dtype == CODA_I32) /* targets: some ignored rows */
          v = r % 5 == 2 ? -100 : (double)((int64_t)((lt_rand() + 1) * 0.5 * (double)vocab) % vocab);
        else if (norm_w) v = 1.0 + 0.2 * lt_rand();
        else if (pb->rows == 1) v = 0.2 * lt_rand();
        else v = scale * lt_rand();
        coda_store(&ta, r, c, v);
        coda_store(&tb, r, c, coda_load(&ta, r, c));
      }
  }
  return 1;
}

/* Forward then backward; 0 (with the context's message) on a failure. */
static inline int pt_run(coda_context ctx, coda_plan p) {
  coda_status s = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
  if (s == CODA_OK) s = coda_plan_run(ctx, p, CODA_PHASE_BACKWARD);
  if (s != CODA_OK) fprintf(stderr, "plan %s: %s\n", p->name, coda_last_error(ctx));
  return s == CODA_OK;
}

#endif
