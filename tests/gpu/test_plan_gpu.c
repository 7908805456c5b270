/* Block plans on the GPU: the Llama-3 block (forward + backward), the LM
 * head and the GPT-2 block run on a CUDA context, checked against the same
 * plans on the CPU backend (fp32 compute) and in exact mode (fp64).
 *
 * Rule, per output and gradient tensor T, with ref the fp64 plan on the
 * same (bf16-rounded) inputs, e_gpu = max|gpu − ref|, e_cpu = max|cpu − ref|:
 *
 *     e_gpu ≤ 2·e_cpu + a_T·rms(ref)
 *
 * a_T = 1e-6 where no attention is involved (the head); the GPU attention
 * rounds P and dS to bf16 for the tensor cores, the CPU keeps them fp32
 * (docs/backends.md: ~1 % of rms on its output, 3–5 % on dq/dk/dv), so
 * a_T = 2e-2 for tensors computed after the forward attention and
 * a_T = 5e-2 for those downstream of the attention backward (dx, the qkv
 * weight gradient, the first norm's gradients). Also: two GPU runs are
 * bit-identical, so are runs with the temporaries sharing memory and side
 * by side (coda_plan_set_share_temps; fused, and unfused for the
 * blocks), and the number of kernel launches per phase is printed (what
 * each step is for). The
 * three plans run again folded (CODA_LLAMA_FOLD, CODA_GPT2_FOLD: no row
 * finishers, the consumers read the rowsum partials), same rule. And the
 * three plans with the GEMM weights' gradients in bf16 (CODA_LLAMA_GRAD_ACT,
 * CODA_GPT2_GRAD_ACT) against the same plans without it on the GPU: every
 * other result bit-identical, each weight-gradient element within one bf16
 * rounding of the f32 plan's (|bf16 - f32| <= 2^-8 |f32| + 1e-6 max|f32|).
 * And the Llama-3 block with dz written over the saved z
 * (CODA_LLAMA_INPLACE) against the default block on the GPU, fused and
 * unfused: every result and saved buffer but z bit-identical, a smaller
 * temporaries' arena.
 *
 *   test_plan_gpu               the checks (needs an sm_90 GPU)
 *   test_plan_gpu --precompile  compiles every generated kernel the plans use
 *                               into the cache ($CODA_CACHE_DIR; no GPU) */
#define _POSIX_C_SOURCE 200809L
#include "coda_nn.h"
#include "base/internal.h"
#include "backends/cuda/epi_codegen.h"
#include "backends/cuda/gplan.h"
#include "nn/plan.h"
#include "plan_test_util.h"
#include "test_util.h"
#include "gpu/expect.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static double urand(void) { return splitmix64_unit(&g_rng); } /* uniform [-1, 1) */

typedef enum { KIND_LLAMA, KIND_HEAD, KIND_GPT2, KIND_LLAMA_FOLD, KIND_HEAD_FOLD, KIND_GPT2_FOLD } plan_kind;
#define NKINDS 6
static int is_fold(plan_kind k) { return k >= KIND_LLAMA_FOLD; }
static plan_kind base_kind(plan_kind k) { return is_fold(k) ? (plan_kind)(k - KIND_LLAMA_FOLD) : k; }

static pt_kind pt_kind_of(plan_kind k) {
  k = base_kind(k);
  return k == KIND_GPT2 ? PT_GPT2_BLOCK : k == KIND_HEAD ? PT_LLAMA_HEAD : PT_LLAMA_BLOCK;
}

/* grad_act: the GEMM weights' gradients in bf16 (CODA_*_GRAD_ACT) */
static coda_status make_plan_g(coda_context ctx, plan_kind k, int f64, int grad_act,
                               coda_plan *out) {
  return pt_build(ctx, pt_kind_of(k), pt_gpu_shape(), f64 ? CODA_F64 : CODA_BF16, (coda_tiling){0, 0},
                  (is_fold(k) ? PT_FOLD : 0) | (grad_act ? PT_GRAD_ACT : 0), out);
}
static coda_status make_plan(coda_context ctx, plan_kind k, int f64, coda_plan *out) {
  return make_plan_g(ctx, k, f64, 0, out);
}

static const char *kind_name(plan_kind k) {
  static const char *const names[NKINDS] = {"llama block", "llama head", "gpt2 block",
                                            "llama block (folded)", "llama head (folded)",
                                            "gpt2 block (folded)"};
  return names[k];
}

/* ------------------------------------------------------------ precompile */

static int precompile(void) {
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 2;
  int n = 0, bad = 0;
  for (int k = 0; k < NKINDS; k++) {
    coda_plan p;
    /* the CPU plan with the GPU's tiling: the same programs and operand
     * layouts (GPT-2 at the test's sizes, Llama-3 at the default ones) */
    coda_status s = pt_build(ctx, pt_kind_of(k), base_kind(k) == KIND_GPT2 ? pt_gpu_shape() : NULL, CODA_BF16,
                             (coda_tiling){CODA_EPI_TILE_M, CODA_EPI_BN}, is_fold(k) ? PT_FOLD : 0, &p);
    if (s != CODA_OK) {
      printf("%s: %s\n", kind_name(k), coda_last_error(ctx));
      bad++;
      continue;
    }
    /* unfused too: the sharing check runs the blocks with fusion off */
    for (int i = 0; i < (base_kind(k) == KIND_HEAD ? 1 : 2) * p->nstep; i++) {
      const plan_step *st = &p->steps[i % p->nstep];
      const int unfused = i >= p->nstep;
      int cached = 0, skipped = 0;
      s = plan_precompile_step(p, i % p->nstep, unfused, &cached, &skipped);
      if (skipped) continue;
      if (s != CODA_OK) {
        printf("%s step %s%s: %s\n", kind_name(k), st->label, unfused ? " (unfused)" : "",
               coda_last_error(ctx));
        bad++;
      } else {
        n++;
        printf("%s %-28s%s %s\n", kind_name(k), st->label, unfused ? " (unfused)" : "",
               cached ? "cached" : "compiled");
      }
    }
    coda_plan_destroy(p);
  }
  printf("precompiled %d kernels, %d failures\n", n, bad);
  coda_context_destroy(ctx);
  return bad ? 1 : 0;
}

/* ------------------------------------------------------------ buffers */

/* Host copy of a plan buffer as doubles. */
static double *fetch(coda_context ctx, coda_plan p, const char *name, int64_t *count) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return NULL;
  const size_t n = (size_t)(t.rows * t.cols), es = coda_dtype_size(t.dtype);
  void *h = malloc(n * es);
  double *v = malloc(n * sizeof *v);
  if (!h || !v || t.ld != t.cols || coda_memcpy_d2h(ctx, h, t.data, n * es) != CODA_OK) {
    free(h);
    free(v);
    return NULL;
  }
  coda_tensor ht = {h, t.dtype, t.rows, t.cols, t.cols};
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) v[r * t.cols + c] = coda_load(&ht, r, c);
  free(h);
  *count = (int64_t)n;
  return v;
}

/* Raw bytes of a buffer (bitwise comparisons). */
static void *fetch_raw(coda_context ctx, coda_plan p, const char *name, size_t *bytes) {
  coda_tensor t;
  if (coda_plan_tensor(p, name, &t) != CODA_OK) return NULL;
  *bytes = (size_t)(t.rows * t.cols) * coda_dtype_size(t.dtype);
  void *h = malloc(*bytes);
  if (h && coda_memcpy_d2h(ctx, h, t.data, *bytes) != CODA_OK) {
    free(h);
    return NULL;
  }
  return h;
}

static coda_status put(coda_context ctx, coda_plan p, const char *name, const double *v) {
  coda_tensor t;
  coda_status s = coda_plan_tensor(p, name, &t);
  if (s != CODA_OK) return s;
  const size_t n = (size_t)(t.rows * t.cols), es = coda_dtype_size(t.dtype);
  void *h = malloc(n * es);
  if (!h) return CODA_ERR_OUT_OF_MEMORY;
  coda_tensor ht = {h, t.dtype, t.rows, t.cols, t.cols};
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t c = 0; c < t.cols; c++) coda_store(&ht, r, c, v[r * t.cols + c]);
  s = coda_memcpy_h2d(ctx, t.data, h, n * es);
  free(h);
  return s;
}

/* Random values for an input or parameter buffer, rounded to the storage
 * dtype of the bf16 plan (so the fp64 plan sees the same numbers). */
static double *make_values(const plan_buf *b, int64_t vocab) {
  const int64_t n = b->rows * b->cols;
  double *v = malloc((size_t)n * sizeof *v);
  if (!v) return NULL;
  const char *nm = b->name;
  for (int64_t i = 0; i < n; i++) {
    double u = urand();
    if (b->dtype == CODA_I32) /* targets: every 7th ignored */
      v[i] = i % 7 == 3 ? -100.0 : floor((u + 1.0) * 0.5 * (double)vocab);
    else if (b->rows == 1 && (strstr(nm, "_g") || !strncmp(nm, "wn", 2)))
      v[i] = 1.0 + 0.2 * u; /* norm gains */
    else if (b->rows == 1)
      v[i] = 0.1 * u; /* biases */
    else if (b->role == PLAN_ROLE_PARAM)
      v[i] = u / sqrt((double)b->cols);
    else
      v[i] = !strcmp(nm, "dx_out") ? 0.5 * u : u;
    if (b->dtype == CODA_BF16) { /* round to bf16 through a one-element view */
      uint16_t h;
      coda_tensor t = {&h, CODA_BF16, 1, 1, 1};
      coda_store(&t, 0, 0, v[i]);
      v[i] = coda_load(&t, 0, 0);
    } else if (b->dtype == CODA_F32) {
      v[i] = (double)(float)v[i];
    }
  }
  return v;
}

/* The same random values (make_values) into every input and weight of n
 * plans built alike, plan p[i] on context ctx[i]; the buffer list walked is
 * that of `walk`, one of them. A failure names ctx[0]'s error. */
static void put_inputs(plan_kind k, coda_plan walk, int n, const coda_context *ctx,
                       const coda_plan *p) {
  int64_t vocab = 0;
  {
    int it = plan_find(walk, "wout");
    if (it >= 0) vocab = walk->bufs[it].rows;
  }
  for (int i = 0; i < walk->nbuf; i++) {
    const plan_buf *b = &walk->bufs[i];
    if (b->role != PLAN_ROLE_INPUT && b->role != PLAN_ROLE_PARAM) continue;
    if (!strcmp(b->name, "h1") || !strcmp(b->name, "rstd1") || !strcmp(b->name, "h") ||
        !strcmp(b->name, "rstd"))
      continue; /* chaining inputs (not used without the flags) */
    double *v = make_values(b, vocab);
    int ok = v != NULL;
    for (int j = 0; j < n && ok; j++) ok = put(ctx[j], p[j], b->name, v) == CODA_OK;
    EXPECT(ok, "%s: setting '%s': %s", kind_name(k), b->name, coda_last_error(ctx[0]));
    free(v);
  }
}

static double tol_for(plan_kind k, const plan_buf *b) {
  if (base_kind(k) == KIND_HEAD) return 1e-6;
  if (b->role == PLAN_ROLE_OUTPUT) return 2e-2;
  static const char *const through_bwd[] = {"dx", "dwqkv", "dwn1", "dbqkv", "dln1_g", "dln1_b"};
  for (size_t i = 0; i < sizeof through_bwd / sizeof *through_bwd; i++)
    if (!strcmp(b->name, through_bwd[i])) return 5e-2;
  return 2e-2;
}

static int run_both(coda_context ctx, coda_plan p) {
  coda_status s = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
  if (s == CODA_OK) s = coda_plan_run(ctx, p, CODA_PHASE_BACKWARD);
  if (s == CODA_OK) s = coda_synchronize(ctx);
  if (s != CODA_OK) printf("  run failed: %s\n", coda_last_error(ctx));
  return s == CODA_OK;
}

static void print_launches(coda_plan p) {
  for (int ph = 0; ph < 2; ph++) {
    int total = 0;
    printf("  %s launches:\n", ph ? "backward" : "forward");
    for (int i = 0; i < p->nstep; i++) {
      const plan_step *s = &p->steps[i];
      if ((int)s->phase != ph) continue;
      int n = 1;
      const char *what = "";
      switch (s->kind) {
      case PLAN_GEMM: what = "GEMM + fused epilogue"; break;
      case PLAN_MAP: what = "map pass (generated epilogue, no GEMM)"; break;
      case PLAN_FINISH: what = "finish (partials -> vector)"; break;
      case PLAN_MATMUL: what = "plain GEMM (+1 reduce kernel if split-K)"; break;
      case PLAN_ATTN_FWD: what = "attention forward"; break;
      case PLAN_ATTN_BWD: what = "attention backward (D, dQ, dK/dV)"; n = 3; break;
      case PLAN_ZERO: what = "zero fill"; break;
      case PLAN_COPY: what = "copy/cast"; break;
      }
      printf("    %-34s %d  %s\n", s->label, n, what);
      total += n;
    }
    printf("  %s total: %d launches\n", ph ? "backward" : "forward", total);
  }
}

static void check_kind(plan_kind k, coda_context gpu, coda_context cpu, coda_context f64) {
  printf("== %s\n", kind_name(k));
  coda_plan pg = NULL, pc = NULL, pd = NULL;
  coda_status s = make_plan(gpu, k, 0, &pg);
  if (s == CODA_OK) s = make_plan(cpu, k, 0, &pc);
  if (s == CODA_OK) s = make_plan(f64, k, 1, &pd);
  if (s != CODA_OK) {
    EXPECT(0, "%s: building the plans: %s / %s / %s", kind_name(k), coda_last_error(gpu),
           coda_last_error(cpu), coda_last_error(f64));
    goto out;
  }
  put_inputs(k, pc, 3, (const coda_context[]){gpu, cpu, f64}, (const coda_plan[]){pg, pc, pd});
  int ok_gpu = run_both(gpu, pg);
  EXPECT(ok_gpu, "%s: GPU run", kind_name(k));
  EXPECT(run_both(cpu, pc), "%s: CPU run", kind_name(k));
  EXPECT(run_both(f64, pd), "%s: fp64 run", kind_name(k));
  if (!ok_gpu) goto out;
  printf("  %-8s %12s %12s %12s %8s %8s\n", "tensor", "e_gpu", "e_cpu", "rms(ref)", "gpu/cpu", "tol a");
  for (int i = 0; i < pc->nbuf; i++) {
    const plan_buf *b = &pc->bufs[i];
    if (!pt_is_result(b)) continue;
    int64_t n1 = 0, n2 = 0, n3 = 0;
    double *g = fetch(gpu, pg, b->name, &n1), *c = fetch(cpu, pc, b->name, &n2),
           *r = fetch(f64, pd, b->name, &n3);
    if (!g || !c || !r || n1 != n2 || n2 != n3) {
      EXPECT(0, "%s: reading '%s'", kind_name(k), b->name);
    } else {
      double eg = 0, ec = 0, ss = 0;
      int finite = 1;
      for (int64_t j = 0; j < n1; j++) {
        if (!isfinite(g[j])) finite = 0;
        eg = fmax(eg, fabs(g[j] - r[j]));
        ec = fmax(ec, fabs(c[j] - r[j]));
        ss += r[j] * r[j];
      }
      const double rms = sqrt(ss / (double)n1), a = tol_for(k, b);
      printf("  %-8s %12.4e %12.4e %12.4e %8.2f %8.0e\n", b->name, eg, ec, rms, ec > 0 ? eg / ec : 0.0, a);
      EXPECT(finite && eg <= 2 * ec + a * rms, "%s '%s': max|gpu-ref| %.4e > 2*%.4e + %.0e*%.4e",
             kind_name(k), b->name, eg, ec, a, rms);
    }
    free(g);
    free(c);
    free(r);
  }
  /* two runs, identical bits */
  {
    int nres = 0;
    void *first[64];
    size_t bytes[64];
    for (int i = 0; i < pg->nbuf && nres < 64; i++)
      if (pt_is_result(&pg->bufs[i])) {
        first[nres] = fetch_raw(gpu, pg, pg->bufs[i].name, &bytes[nres]);
        nres++;
      }
    EXPECT(run_both(gpu, pg), "%s: second GPU run", kind_name(k));
    int j = 0, same = 1;
    for (int i = 0; i < pg->nbuf && j < nres; i++)
      if (pt_is_result(&pg->bufs[i])) {
        size_t nb = 0;
        void *again = fetch_raw(gpu, pg, pg->bufs[i].name, &nb);
        if (!first[j] || !again || nb != bytes[j] || memcmp(first[j], again, nb)) {
          same = 0;
          printf("  '%s' differs between two runs\n", pg->bufs[i].name);
        }
        free(again);
        free(first[j]);
        j++;
      }
    EXPECT(same, "%s: two GPU runs are not bit-identical", kind_name(k));
    if (same) printf("  two runs: bit-identical (%d tensors)\n", nres);
  }
  /* temporaries side by side (coda_plan_set_share_temps(p, 0)) instead of
   * sharing memory by liveness: the same bits, fused and, for the blocks,
   * unfused (where the unfused accumulators are arena slots too) */
  for (int fused = 1; fused >= (base_kind(k) == KIND_HEAD ? 1 : 0); fused--) {
    int nres = 0, same = 1;
    void *ref[64];
    size_t bytes[64];
    int ok = coda_plan_set_fused(pg, fused) == CODA_OK && run_both(gpu, pg);
    for (int i = 0; ok && i < pg->nbuf && nres < 64; i++)
      if (pt_is_result(&pg->bufs[i]) || pg->bufs[i].role == PLAN_ROLE_SAVED) {
        ref[nres] = fetch_raw(gpu, pg, pg->bufs[i].name, &bytes[nres]);
        nres++;
      }
    ok = ok && coda_plan_set_share_temps(pg, 0) == CODA_OK && run_both(gpu, pg);
    EXPECT(ok, "%s: runs with sharing on and off (%s)", kind_name(k), fused ? "fused" : "unfused");
    for (int i = 0, j = 0; i < pg->nbuf && j < nres; i++)
      if (pt_is_result(&pg->bufs[i]) || pg->bufs[i].role == PLAN_ROLE_SAVED) {
        size_t nb = 0;
        void *off = ok ? fetch_raw(gpu, pg, pg->bufs[i].name, &nb) : NULL;
        if (!ref[j] || !off || nb != bytes[j] || memcmp(ref[j], off, nb)) {
          same = 0;
          printf("  '%s' differs with sharing off (%s)\n", pg->bufs[i].name,
                 fused ? "fused" : "unfused");
        }
        free(off);
        free(ref[j]);
        j++;
      }
    EXPECT(same, "%s: sharing temporaries changed the results (%s)", kind_name(k),
           fused ? "fused" : "unfused");
    if (same)
      printf("  temporaries shared or side by side (%s): bit-identical (%d tensors)\n",
             fused ? "fused" : "unfused", nres);
    coda_plan_set_share_temps(pg, 1);
  }
  coda_plan_set_fused(pg, 1);
  const char *tline = strstr(coda_plan_text(pg), "temporaries:");
  if (tline) printf("  %.*s\n", (int)strcspn(tline, "\n"), tline);
  print_launches(pg);
out:
  coda_plan_destroy(pg); /* before the contexts */
  coda_plan_destroy(pc);
  coda_plan_destroy(pd);
}

/* The plan with bf16 GEMM weight gradients against the plan without, both
 * on the GPU, on the same inputs. */
static void check_grad_act(plan_kind k, coda_context gpu) {
  printf("== %s, bf16 weight gradients\n", kind_name(k));
  coda_plan pf = NULL, pb = NULL;
  coda_status s = make_plan_g(gpu, k, 0, 0, &pf);
  if (s == CODA_OK) s = make_plan_g(gpu, k, 0, 1, &pb);
  if (s != CODA_OK) {
    EXPECT(0, "%s: building the plans: %s", kind_name(k), coda_last_error(gpu));
    goto out;
  }
  put_inputs(k, pf, 2, (const coda_context[]){gpu, gpu}, (const coda_plan[]){pf, pb});
  if (!run_both(gpu, pf) || !run_both(gpu, pb)) {
    EXPECT(0, "%s: GPU runs", kind_name(k));
    goto out;
  }
  int nsame = 0, ngrad = 0;
  for (int i = 0; i < pf->nbuf; i++) {
    const plan_buf *b = &pf->bufs[i];
    if (!pt_is_result(b)) continue;
    const int j = plan_find(pb, b->name);
    if (j < 0) {
      EXPECT(0, "%s: '%s' missing with the flag", kind_name(k), b->name);
      continue;
    }
    if (pb->bufs[j].dtype == b->dtype) { /* not a GEMM weight gradient: the same bits */
      size_t n1 = 0, n2 = 0;
      void *x = fetch_raw(gpu, pf, b->name, &n1), *y = fetch_raw(gpu, pb, b->name, &n2);
      EXPECT(x && y && n1 == n2 && !memcmp(x, y, n1), "%s: '%s' differs with the flag",
             kind_name(k), b->name);
      free(x);
      free(y);
      nsame++;
      continue;
    }
    EXPECT(b->dtype == CODA_F32 && pb->bufs[j].dtype == CODA_BF16, "%s: '%s' is %s / %s",
           kind_name(k), b->name, coda_dtype_name(b->dtype), coda_dtype_name(pb->bufs[j].dtype));
    int64_t n1 = 0, n2 = 0, bad = 0, exact = 0;
    double *x = fetch(gpu, pf, b->name, &n1), *y = fetch(gpu, pb, b->name, &n2);
    if (!x || !y || n1 != n2) {
      EXPECT(0, "%s: reading '%s'", kind_name(k), b->name);
    } else {
      double mx = 0;
      for (int64_t e = 0; e < n1; e++) mx = fmax(mx, fabs(x[e]));
      for (int64_t e = 0; e < n1; e++) {
        uint16_t h;
        coda_tensor t = {&h, CODA_BF16, 1, 1, 1};
        coda_store(&t, 0, 0, x[e]);
        exact += coda_load(&t, 0, 0) == y[e];
        bad += !(fabs(y[e] - x[e]) <= 0x1p-8 * fabs(x[e]) + 1e-6 * mx);
      }
      printf("  %-8s bf16 vs f32: %lld of %lld past one rounding, %lld the f32 value rounded "
             "to nearest\n", b->name, (long long)bad, (long long)n1, (long long)exact);
      EXPECT(bad == 0, "%s: '%s': %lld values past one bf16 rounding of the f32 plan's",
             kind_name(k), b->name, (long long)bad);
      EXPECT(mx > 0, "%s: '%s' is zero", kind_name(k), b->name);
    }
    free(x);
    free(y);
    ngrad++;
  }
  EXPECT(ngrad == (base_kind(k) == KIND_HEAD ? 1 : 4), "%s: %d bf16 weight gradients", kind_name(k),
         ngrad);
  printf("  %d other results bit-identical, %d weight gradients in bf16\n", nsame, ngrad);
out:
  coda_plan_destroy(pf);
  coda_plan_destroy(pb);
}

/* The Llama-3 block with CODA_LLAMA_INPLACE against the default block, both
 * on the GPU, on the same inputs, fused and unfused. */
static void check_inplace(coda_context gpu) {
  printf("== llama block, dz in place over z\n");
  coda_plan pf = NULL, pi = NULL;
  coda_status s = pt_build(gpu, PT_LLAMA_BLOCK, pt_gpu_shape(), CODA_BF16, (coda_tiling){0, 0}, 0, &pf);
  if (s == CODA_OK)
    s = pt_build(gpu, PT_LLAMA_BLOCK, pt_gpu_shape(), CODA_BF16, (coda_tiling){0, 0}, PT_INPLACE, &pi);
  if (s != CODA_OK) {
    EXPECT(0, "in place: building the plans: %s", coda_last_error(gpu));
    goto out;
  }
  put_inputs(KIND_LLAMA, pf, 2, (const coda_context[]){gpu, gpu}, (const coda_plan[]){pf, pi});
  for (int fused = 1; fused >= 0; fused--) {
    const int ok = coda_plan_set_fused(pf, fused) == CODA_OK &&
                   coda_plan_set_fused(pi, fused) == CODA_OK && run_both(gpu, pf) &&
                   run_both(gpu, pi);
    EXPECT(ok, "in place: GPU runs (%s)", fused ? "fused" : "unfused");
    if (!ok) continue;
    int n = 0, same = 1;
    for (int i = 0; i < pf->nbuf; i++) {
      const plan_buf *b = &pf->bufs[i];
      if (!pt_is_result(b) && !(b->role == PLAN_ROLE_SAVED && strcmp(b->name, "z"))) continue;
      size_t n1 = 0, n2 = 0;
      void *x = fetch_raw(gpu, pf, b->name, &n1), *y = fetch_raw(gpu, pi, b->name, &n2);
      if (!x || !y || n1 != n2 || memcmp(x, y, n1)) {
        same = 0;
        printf("  '%s' differs in place (%s)\n", b->name, fused ? "fused" : "unfused");
      }
      free(x);
      free(y);
      n++;
    }
    EXPECT(same, "in place: results differ (%s)", fused ? "fused" : "unfused");
    if (same)
      printf("  in place vs default (%s): bit-identical (%d tensors); temporaries' arena %zu vs "
             "%zu bytes\n", fused ? "fused" : "unfused", n, pi->arena_bytes, pf->arena_bytes);
    EXPECT(pi->arena_bytes < pf->arena_bytes, "in place: arena %zu not below %zu", pi->arena_bytes,
           pf->arena_bytes);
  }
out:
  coda_plan_destroy(pf);
  coda_plan_destroy(pi);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--precompile")) return precompile();
  if (!coda_cuda_available()) {
    printf("no usable GPU\n");
    return 2;
  }
  coda_context_options o = coda_context_default_options();
  coda_context cpu, f64, gpu;
  o.backend = CODA_BACKEND_CPU;
  if (coda_context_create(&o, &cpu) != CODA_OK) return 2;
  o.precision = CODA_PRECISION_F64;
  if (coda_context_create(&o, &f64) != CODA_OK) return 2;
  o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  if (coda_context_create(&o, &gpu) != CODA_OK) {
    printf("cannot create a CUDA context: %s\n", coda_last_error(NULL));
    return 2;
  }
  check_kind(KIND_LLAMA, gpu, cpu, f64);
  check_kind(KIND_HEAD, gpu, cpu, f64);
  check_kind(KIND_GPT2, gpu, cpu, f64);
  check_kind(KIND_LLAMA_FOLD, gpu, cpu, f64);
  check_kind(KIND_HEAD_FOLD, gpu, cpu, f64);
  check_kind(KIND_GPT2_FOLD, gpu, cpu, f64);
  check_grad_act(KIND_LLAMA, gpu);
  check_grad_act(KIND_HEAD, gpu);
  check_grad_act(KIND_GPT2, gpu);
  check_inplace(gpu);
  /* the line tests/gpu/sanitize.sh shows for each sanitizer run */
  printf("coverage: the Llama-3 block, LM head and GPT-2 block plans (forward and backward, "
         "fused and unfused, folded), their bf16 weight gradients, the Llama block in place\n");
  printf("%d passed, %d failed\n", g_pass, g_fail);
  coda_context_destroy(gpu);
  coda_context_destroy(cpu);
  coda_context_destroy(f64);
  return g_fail ? 1 : 0;
}
