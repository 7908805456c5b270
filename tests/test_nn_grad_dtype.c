/* Weight gradients in the activation dtype (CODA_LLAMA_GRAD_ACT,
 * CODA_GPT2_GRAD_ACT): the GEMM weights' gradients are bf16 buffers written
 * directly by the weight-gradient GEMMs.
 *
 * For the Llama-3 block (plain and folded), the LM head and the GPT-2 block
 * (plain and folded), each against the same plan without the flag, on the
 * same random inputs and weights, bf16 storage:
 *  - buffer dtypes: the GEMM weights' gradients bf16 with the flag and f32
 *    without; norm-weight and bias gradients f32 either way;
 *  - every other output and gradient is bit-identical (the flag only
 *    changes where the weight-gradient GEMMs store, and nothing reads
 *    those buffers);
 *  - each weight-gradient element is the f32 plan's rounded once to bf16:
 *    |bf16 - f32| <= 2^-8 |f32| (one rounding), and on the CPU exactly
 *    round-to-nearest-even of the f32 value (the same fp32 sum);
 *  - the saving is 2 bytes per weight-gradient element (checked on the
 *    plans at the 8B-like benchmark shape, built without allocating).
 * Exact mode: the flag changes nothing (every buffer f64, results
 * bit-identical). Unknown flag bits are still refused.
 * The fp64-reference checks with the flag are in test_nn_llama_block.c and
 * test_nn_gpt2_block.c. */
#include "coda_nn.h"
#include "check.h"
#include "plan_test_util.h"

static const char *const kind_names[] = {"llama block", "llama head", "gpt2 block"};

/* the GEMM weights' gradients of each kind */
static const char *const llama_gw[] = {"dwqkv", "dwo", "dwgu", "dwd", NULL};
static const char *const head_gw[] = {"dwout", NULL};
static const char *const gpt2_gw[] = {"dwqkv", "dwo", "dwfc", "dwproj", NULL};

static const char *const *gemm_grads(pt_kind kind) {
  return kind == PT_GPT2_BLOCK ? gpt2_gw : kind == PT_LLAMA_HEAD ? head_gw : llama_gw;
}

static int is_gemm_grad(pt_kind kind, const char *name) {
  for (const char *const *g = gemm_grads(kind); *g; g++)
    if (!strcmp(*g, name)) return 1;
  return 0;
}

static coda_status build(coda_context ctx, pt_kind kind, int exact, int fold, int gact,
                         coda_plan *out) {
  const coda_tiling tl = kind == PT_GPT2_BLOCK ? (coda_tiling){16, 32} : (coda_tiling){16, 16};
  return pt_build(ctx, kind, pt_small(), exact ? CODA_F64 : CODA_BF16, tl,
                  (fold ? PT_FOLD : 0) | (gact ? PT_GRAD_ACT : 0), out);
}

/* Every value of two buffers equal (the same dtype, compared as values). */
static int same_values(const coda_tensor *a, const coda_tensor *b) {
  if (a->dtype != b->dtype || a->rows != b->rows || a->cols != b->cols) return 0;
  for (int64_t r = 0; r < a->rows; r++)
    for (int64_t c = 0; c < a->cols; c++) {
      double x = coda_load(a, r, c), y = coda_load(b, r, c);
      if (!(x == y) && !(isnan(x) && isnan(y))) return 0;
    }
  return 1;
}

static void test_kind(pt_kind kind, int exact, int fold) {
  coda_context ctx = lt_context(exact ? CODA_PRECISION_F64 : CODA_PRECISION_F32);
  char what[64];
  snprintf(what, sizeof what, "%s%s%s", kind_names[kind], fold ? " (folded)" : "",
           exact ? " exact" : "");
  coda_plan f = NULL, g = NULL;
  CHECK_MSG(build(ctx, kind, exact, fold, 0, &f) == CODA_OK, "%s: %s", what, coda_last_error(ctx));
  CHECK_MSG(build(ctx, kind, exact, fold, 1, &g) == CODA_OK, "%s with the flag: %s", what,
            coda_last_error(ctx));
  if (!f || !g) goto done;
  CHECK_MSG(f->nbuf == g->nbuf && f->nstep == g->nstep, "%s: the flag changed the steps", what);

  /* dtypes: only the GEMM weights' gradients change, and only in bf16 mode */
  int ngw = 0;
  for (int i = 0; i < f->nbuf && f->nbuf == g->nbuf; i++) {
    const plan_buf *pb = &f->bufs[i];
    CHECK_MSG(!strcmp(pb->name, g->bufs[i].name), "%s: buffer %d is %s / %s", what, i, pb->name,
              g->bufs[i].name);
    if (!pt_is_result(pb)) {
      /* activations, statistics, tables: internal, the same dtype */
      CHECK_MSG(pb->dtype == g->bufs[i].dtype, "%s: the flag changed the dtype of %s", what,
                pb->name);
      continue;
    }
    coda_tensor tf, tg; /* what a caller sees */
    if (coda_plan_tensor(f, pb->name, &tf) != CODA_OK || coda_plan_tensor(g, pb->name, &tg) != CODA_OK) {
      CHECK_MSG(0, "%s: %s: %s", what, pb->name, coda_last_error(ctx));
      continue;
    }
    if (pb->role == PLAN_ROLE_GRAD && is_gemm_grad(kind, pb->name)) {
      ngw++;
      CHECK_MSG(tf.dtype == (exact ? CODA_F64 : CODA_F32), "%s: %s without the flag is %s", what,
                pb->name, coda_dtype_name(tf.dtype));
      CHECK_MSG(tg.dtype == (exact ? CODA_F64 : CODA_BF16), "%s: %s with the flag is %s", what,
                pb->name, coda_dtype_name(tg.dtype));
    } else {
      CHECK_MSG(tf.dtype == tg.dtype, "%s: the flag changed the dtype of %s", what, pb->name);
    }
    if (pb->role == PLAN_ROLE_GRAD && pb->rows == 1) /* norm weights, biases */
      CHECK_MSG(tg.dtype == (exact ? CODA_F64 : CODA_F32), "%s: %s is %s", what, pb->name,
                coda_dtype_name(tg.dtype));
  }
  int want = 0;
  for (const char *const *n = gemm_grads(kind); *n; n++) want++;
  CHECK_MSG(ngw == want, "%s: %d GEMM weight gradients, expected %d", what, ngw, want);

  CHECK(pt_fill_same(f, g, pt_small()->vocab));
  int ok = pt_run(ctx, f) && pt_run(ctx, g);
  CHECK_MSG(ok, "%s: runs", what);
  if (!ok) goto done;
  int nsame = 0;
  for (int i = 0; i < f->nbuf; i++) {
    const plan_buf *pb = &f->bufs[i];
    if (!pt_is_result(pb)) continue;
    coda_tensor tf, tg;
    if (coda_plan_tensor(f, pb->name, &tf) != CODA_OK || coda_plan_tensor(g, pb->name, &tg) != CODA_OK) {
      CHECK_MSG(0, "%s: %s", what, pb->name);
      continue;
    }
    if (exact || !is_gemm_grad(kind, pb->name)) {
      CHECK_MSG(same_values(&tf, &tg), "%s: %s differs with the flag", what, pb->name);
      nsame++;
      continue;
    }
    /* one rounding of the f32 plan's value */
    int64_t bad = 0, inexact = 0, nonzero = 0;
    for (int64_t r = 0; r < tf.rows; r++)
      for (int64_t c = 0; c < tf.cols; c++) {
        const double x = coda_load(&tf, r, c), y = coda_load(&tg, r, c);
        if (!(fabs(y - x) <= 0x1p-8 * fabs(x) + 1e-30)) bad++;
        if (y != coda_round_to(CODA_BF16, x)) inexact++;
        nonzero += x != 0;
      }
    CHECK_MSG(bad == 0, "%s: %s: %lld values off by more than one bf16 rounding", what, pb->name,
              (long long)bad);
    CHECK_MSG(inexact == 0, "%s: %s: %lld values are not the f32 value rounded to nearest", what,
              pb->name, (long long)inexact);
    CHECK_MSG(nonzero > tf.rows * tf.cols / 2, "%s: %s is mostly zero", what, pb->name);
  }
  CHECK_MSG(nsame >= (kind == PT_LLAMA_HEAD ? 2 : 3), "%s: only %d tensors compared", what, nsame);
done:
  coda_plan_destroy(f);
  coda_plan_destroy(g);
  coda_context_destroy(ctx);
}

/* Bytes of a plan's gradient buffers (from the plan's buffer table: the
 * plan is not allocated). */
static double grad_bytes(coda_plan p) {
  double b = 0;
  for (int i = 0; i < p->nbuf; i++)
    if (p->bufs[i].role == PLAN_ROLE_GRAD)
      b += (double)p->bufs[i].rows * (double)p->bufs[i].cols * (double)coda_dtype_size(p->bufs[i].dtype);
  return b;
}

/* The 8B-like block of the benchmark (d 4096, ffn 14336, 32/8 heads of
 * 128, 2 x 4096 tokens) and GPT-2 1600: the flag saves 2 bytes per GEMM
 * weight-gradient element. */
static void test_saving(void) {
  static const struct {
    const char *what;
    pt_kind kind;
    pt_shape shape;
    double n; /* GEMM weight elements */
  } cases[] = {
      {"llama 8B-like", PT_LLAMA_BLOCK,
       {.dim = 4096, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .ffn_dim = 14336, .vocab = 256,
        .batch = 2, .seq = 4096},
       (6144.0 + 4096.0 + 2 * 14336.0 + 14336.0) * 4096.0}, /* wqkv, wo, wgu, wd */
      {"gpt2-1600", PT_GPT2_BLOCK,
       {.dim = 1600, .n_heads = 25, .batch = 8, .seq = 1024, .gpt2_ffn_dim = 6400},
       (3.0 * 1600 + 1600 + 6400 + 6400) * 1600.0}, /* wqkv, wo, wfc, wproj */
  };
  coda_context ctx = lt_context(CODA_PRECISION_F32);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    coda_plan f = NULL, g = NULL;
    CHECK(pt_build(ctx, cases[i].kind, &cases[i].shape, CODA_BF16, (coda_tiling){0, 0}, 0, &f) == CODA_OK);
    CHECK(pt_build(ctx, cases[i].kind, &cases[i].shape, CODA_BF16, (coda_tiling){0, 0}, PT_GRAD_ACT, &g) ==
          CODA_OK);
    if (f && g) {
      const double saved = grad_bytes(f) - grad_bytes(g), n = cases[i].n;
      printf("%s block: gradient buffers %.0f MiB -> %.0f MiB\n", cases[i].what,
             grad_bytes(f) / 1048576.0, grad_bytes(g) / 1048576.0);
      CHECK_MSG(saved == 2 * n, "%s: saved %.0f bytes, expected %.0f", cases[i].what, saved, 2 * n);
    }
    coda_plan_destroy(f);
    coda_plan_destroy(g);
  }
  coda_context_destroy(ctx);
}

/* Unknown bits are refused next to the known ones; the flag combines with
 * the others. */
static void test_flags(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F32);
  coda_llama_config c = coda_llama_default_config();
  coda_plan p = NULL;
  c.flags = CODA_LLAMA_GEMMA3 << 1; /* past the last flag */
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(strstr(coda_last_error(ctx), "flags") != NULL);
  c.flags = CODA_LLAMA_GRAD_ACT | (CODA_LLAMA_GEMMA3 << 1);
  CHECK(coda_llama_head_plan(ctx, &c, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  c.flags = CODA_LLAMA_GRAD_ACT | CODA_LLAMA_FOLD | CODA_LLAMA_NORM_IN | CODA_LLAMA_NORM_OUT;
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_OK);
  coda_plan_destroy(p);
  p = NULL;
  coda_gpt2_config g = coda_gpt2_default_config();
  g.flags = CODA_GPT2_GRAD_ACT << 1;
  CHECK(coda_gpt2_block_plan(ctx, &g, &p) == CODA_ERR_INVALID_ARGUMENT && !p);
  CHECK(strstr(coda_last_error(ctx), "flags") != NULL);
  g.flags = CODA_GPT2_GRAD_ACT | CODA_GPT2_FOLD;
  CHECK(coda_gpt2_block_plan(ctx, &g, &p) == CODA_OK);
  coda_plan_destroy(p);
  coda_context_destroy(ctx);
}

int main(void) {
  lt_seed(20261202);
  test_flags();
  test_saving();
  for (int kind = PT_LLAMA_BLOCK; kind <= PT_GPT2_BLOCK; kind++) {
    test_kind((pt_kind)kind, 0, 0);
    test_kind((pt_kind)kind, 0, 1);
    test_kind((pt_kind)kind, 1, 0);
  }
  return CHECK_DONE();
}
