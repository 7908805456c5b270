/* Plan runs captured into a CUDA graph: a context given a stream of its own
 * (cudaStreamNonBlocking) issues every launch and copy there, allocates
 * nothing and never synchronizes the host once its workspaces have grown,
 * so the forward and backward phases of a Llama-3 block plan can be
 * captured with cudaStreamBeginCapture and replayed with cudaGraphLaunch.
 *
 * Checks, on the block (fresh random inputs and weights):
 *   - two direct runs are bit-identical (the baseline: the plan is
 *     deterministic, and the state a run changes is reset before each);
 *   - capturing runs nothing (every output still holds its reset value
 *     after cudaStreamEndCapture: no work went to another stream) and
 *     allocates nothing (coda_memory_stats unchanged);
 *   - every replay (three) gives every output, gradient and saved tensor
 *     bit-identical to the direct run (memcmp);
 *   - a second context given no stream (the legacy default stream) runs the
 *     same plan on the same data to the same bits.
 * And single calls captured and replayed bitwise: a fused GEMM
 * (coda_gemm_epilogue, llama_residual) and a split-K plain GEMM (the
 * context's split-K workspace), also on a debug-sync context (which must
 * not synchronize a stream that is being captured).
 *
 * A graph holds the addresses of the plan's buffers and of the context's
 * workspaces, so it is captured after a direct run (the workspaces have
 * grown, the kernels are loaded, the GEMM shapes tuned) and replayed only
 * while neither is reallocated.
 *
 *   test_graph_gpu     the checks (needs an sm_90 GPU); exit 1 on a mismatch */
#define _POSIX_C_SOURCE 200809L
#include "coda.h"
#include "base/internal.h"
#include "nn/plan.h"
#include "plan_test_util.h"
#include "test_util.h"
#include "gpu/expect.h"

#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng;
static double urand(void) { return splitmix64_unit(&g_rng); } /* uniform [-1, 1) */

/* Bytes a view spans, from its first element to its last. */
static size_t extent(const coda_tensor *t) {
  if (t->rows <= 0 || t->cols <= 0) return 0;
  return ((size_t)(t->rows - 1) * (size_t)t->ld + (size_t)t->cols) * coda_dtype_size(t->dtype);
}

static const char *cuda_err(cudaError_t e) { return cudaGetErrorString(e); }

/* ------------------------------------------------------------ the block */

/* A plan's state between runs: the raw bytes of every buffer but the
 * temporaries, taken once after the inputs are written (outputs,
 * gradients and saved tensors as the executor left them: zeroed).
 * Restoring it before a run makes every run start from the same bits,
 * whatever a run writes in place or accumulates. */
typedef struct plan_state {
  int n;
  int *buf;
  void **host;
  size_t *bytes;
} plan_state;

static int state_take(coda_context ctx, coda_plan p, plan_state *st) {
  memset(st, 0, sizeof *st);
  st->buf = calloc((size_t)p->nbuf, sizeof *st->buf);
  st->host = calloc((size_t)p->nbuf, sizeof *st->host);
  st->bytes = calloc((size_t)p->nbuf, sizeof *st->bytes);
  if (!st->buf || !st->host || !st->bytes) return 0;
  for (int i = 0; i < p->nbuf; i++) {
    if (p->bufs[i].role == PLAN_ROLE_TEMP) continue;
    coda_tensor t;
    if (coda_plan_tensor(p, p->bufs[i].name, &t) != CODA_OK) return 0;
    const size_t b = extent(&t);
    void *h = malloc(b ? b : 1);
    if (!h) return 0;
    st->buf[st->n] = i;
    st->host[st->n] = h;
    st->bytes[st->n] = b;
    st->n++;
    if (b && coda_memcpy_d2h(ctx, h, t.data, b) != CODA_OK) return 0;
  }
  return 1;
}

static int state_restore(coda_context ctx, coda_plan p, const plan_state *st) {
  for (int k = 0; k < st->n; k++) {
    coda_tensor t;
    if (coda_plan_tensor(p, p->bufs[st->buf[k]].name, &t) != CODA_OK) return 0;
    if (st->bytes[k] && coda_memcpy_h2d(ctx, t.data, st->host[k], st->bytes[k]) != CODA_OK)
      return 0;
  }
  return 1;
}

static void state_free(plan_state *st) {
  for (int k = 0; k < st->n; k++) free(st->host[k]);
  free(st->buf);
  free(st->host);
  free(st->bytes);
  memset(st, 0, sizeof *st);
}

/* What a run computes: outputs, gradients and saved tensors. */
static int is_checked(const plan_buf *b) {
  return b->role == PLAN_ROLE_OUTPUT || b->role == PLAN_ROLE_GRAD || b->role == PLAN_ROLE_SAVED;
}

/* Raw bytes of every checked buffer, in buffer order (NULL for others). */
typedef struct results {
  int nbuf;
  void **host;
  size_t *bytes;
} results;

static int results_take(coda_context ctx, coda_plan p, results *r) {
  r->nbuf = p->nbuf;
  r->host = calloc((size_t)p->nbuf, sizeof *r->host);
  r->bytes = calloc((size_t)p->nbuf, sizeof *r->bytes);
  if (!r->host || !r->bytes) return 0;
  for (int i = 0; i < p->nbuf; i++) {
    if (!is_checked(&p->bufs[i])) continue;
    coda_tensor t;
    if (coda_plan_tensor(p, p->bufs[i].name, &t) != CODA_OK) return 0;
    const size_t es = coda_dtype_size(t.dtype), row = (size_t)t.cols * es;
    char *h = malloc(row * (size_t)t.rows + 1);
    if (!h) return 0;
    r->host[i] = h;
    r->bytes[i] = row * (size_t)t.rows;
    /* row by row: the gaps of a strided view are not this buffer's */
    if (t.ld == t.cols) {
      if (r->bytes[i] && coda_memcpy_d2h(ctx, h, t.data, r->bytes[i]) != CODA_OK) return 0;
      continue;
    }
    for (int64_t y = 0; y < t.rows; y++)
      if (row && coda_memcpy_d2h(ctx, h + (size_t)y * row,
                                 (const char *)t.data + (size_t)y * (size_t)t.ld * es, row) != CODA_OK)
        return 0;
  }
  return 1;
}

static void results_free(results *r) {
  for (int i = 0; r->host && i < r->nbuf; i++) free(r->host[i]);
  free(r->host);
  free(r->bytes);
  memset(r, 0, sizeof *r);
}

/* Compares every checked buffer bitwise; prints the differing ones.
 * Returns the number of buffers that differ. */
static int results_diff(coda_plan p, const results *a, const results *b, const char *what) {
  int bad = 0, n = 0;
  for (int i = 0; i < p->nbuf; i++) {
    if (!a->host[i] || !b->host[i]) continue;
    n++;
    if (a->bytes[i] != b->bytes[i] || memcmp(a->host[i], b->host[i], a->bytes[i])) {
      size_t first = 0;
      const unsigned char *x = a->host[i], *y = b->host[i];
      while (first < a->bytes[i] && x[first] == y[first]) first++;
      printf("  %s: '%s' differs (first at byte %zu of %zu)\n", what, p->bufs[i].name, first,
             a->bytes[i]);
      bad++;
    }
  }
  printf("  %s: %d of %d tensors bit-identical\n", what, n - bad, n);
  return bad;
}

/* Fresh random inputs and weights (the same for the same seed): norm gains
 * near 1, vectors small, matrices scaled by 1/sqrt(cols), bf16-rounded by
 * the store. Written through the plan's views. */
static int fill_inputs(coda_context ctx, coda_plan p, uint64_t seed) {
  g_rng = seed;
  for (int i = 0; i < p->nbuf; i++) {
    const plan_buf *b = &p->bufs[i];
    if (b->role != PLAN_ROLE_INPUT && b->role != PLAN_ROLE_PARAM) continue;
    coda_tensor t;
    if (coda_plan_tensor(p, b->name, &t) != CODA_OK) return 0;
    const size_t es = coda_dtype_size(t.dtype);
    void *h = calloc((size_t)(t.rows * t.cols) + 1, es);
    if (!h) return 0;
    coda_tensor ht = {h, t.dtype, t.rows, t.cols, t.cols};
    const int norm = b->rows == 1 && (strstr(b->name, "_g") || !strncmp(b->name, "wn", 2));
    for (int64_t r = 0; r < t.rows; r++)
      for (int64_t c = 0; c < t.cols; c++) {
        const double u = urand();
        double v;
        if (t.dtype == CODA_I32) v = r % 7 == 3 ? -100.0 : (double)((int64_t)((u + 1.0) * 0.5 * 1000.0) % 1000);
        else if (norm) v = 1.0 + 0.2 * u;
        else if (b->rows == 1) v = 0.1 * u;
        else if (b->role == PLAN_ROLE_PARAM) v = u / sqrt((double)b->cols);
        else v = u;
        coda_store(&ht, r, c, v);
      }
    int ok = 1;
    if (t.ld == t.cols)
      ok = coda_memcpy_h2d(ctx, t.data, h, (size_t)(t.rows * t.cols) * es) == CODA_OK;
    else
      for (int64_t r = 0; r < t.rows && ok; r++)
        ok = coda_memcpy_h2d(ctx, (char *)t.data + (size_t)(r * t.ld) * es,
                             (const char *)h + (size_t)(r * t.cols) * es, (size_t)t.cols * es) ==
             CODA_OK;
    free(h);
    if (!ok) return 0;
  }
  return 1;
}

static int run_direct(coda_context ctx, coda_plan p) {
  coda_status s = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
  if (s == CODA_OK) s = coda_plan_run(ctx, p, CODA_PHASE_BACKWARD);
  if (s == CODA_OK) s = coda_synchronize(ctx);
  if (s != CODA_OK) printf("  run failed: %s\n", coda_last_error(ctx));
  return s == CODA_OK;
}

static const uint64_t kSeed = 0x243f6a8885a308d3ull;

/* The block on a context with its own stream: direct runs, then captured
 * and replayed. *ref gets the direct run's results (for the legacy check). */
static void check_block_graph(coda_context ctx, cudaStream_t stream, results *ref) {
  printf("== llama block, forward + backward captured into a graph\n");
  coda_plan p = NULL;
  plan_state st = {0};
  results r2 = {0}, cap = {0}, before = {0};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  coda_status s = pt_build(ctx, PT_LLAMA_BLOCK, pt_gpu_shape(), CODA_BF16, (coda_tiling){0, 0}, 0, &p);
  EXPECT(s == CODA_OK, "building the plan: %s", coda_last_error(ctx));
  if (s != CODA_OK) goto out;
  int ok = fill_inputs(ctx, p, kSeed);
  EXPECT(ok, "writing the inputs: %s", coda_last_error(ctx));
  if (!ok) goto out;
  ok = state_take(ctx, p, &st);
  EXPECT(ok, "saving the plan's state: %s", coda_last_error(ctx));
  if (!ok) goto out;

  /* Direct runs: the first grows the workspaces and loads the kernels. */
  ok = state_restore(ctx, p, &st) && run_direct(ctx, p) && results_take(ctx, p, ref);
  EXPECT(ok, "direct run 1: %s", coda_last_error(ctx));
  if (!ok) goto out;
  ok = state_restore(ctx, p, &st) && run_direct(ctx, p) && results_take(ctx, p, &r2);
  EXPECT(ok, "direct run 2: %s", coda_last_error(ctx));
  if (!ok) goto out;
  EXPECT(results_diff(p, ref, &r2, "direct run 2 vs 1") == 0, "two direct runs differ");

  /* Capture: nothing may run, nothing may be allocated. */
  ok = state_restore(ctx, p, &st) && results_take(ctx, p, &before);
  EXPECT(ok, "resetting the state: %s", coda_last_error(ctx));
  if (!ok) goto out;
  coda_memory_info m0, m1;
  coda_memory_stats(ctx, &m0);
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  EXPECT(e == cudaSuccess, "cudaStreamBeginCapture: %s", cuda_err(e));
  if (e != cudaSuccess) goto out;
  s = coda_plan_run(ctx, p, CODA_PHASE_FORWARD);
  if (s == CODA_OK) s = coda_plan_run(ctx, p, CODA_PHASE_BACKWARD);
  EXPECT(s == CODA_OK, "plan run under capture: %s", coda_last_error(ctx));
  e = cudaStreamEndCapture(stream, &graph); /* ends it in every case */
  EXPECT(e == cudaSuccess, "cudaStreamEndCapture: %s", cuda_err(e));
  coda_memory_stats(ctx, &m1);
  EXPECT(m1.current_bytes == m0.current_bytes && m1.live_blocks == m0.live_blocks,
         "memory changed while capturing: %zu -> %zu bytes, %zu -> %zu blocks", m0.current_bytes,
         m1.current_bytes, m0.live_blocks, m1.live_blocks);
  if (s != CODA_OK || e != cudaSuccess) goto out;
  size_t nodes = 0;
  cudaGraphGetNodes(graph, NULL, &nodes);
  printf("  captured %zu graph nodes\n", nodes);
  e = cudaDeviceSynchronize();
  EXPECT(e == cudaSuccess, "after the capture: %s", cuda_err(e));
  {
    results now = {0};
    ok = results_take(ctx, p, &now);
    EXPECT(ok, "reading the state after the capture: %s", coda_last_error(ctx));
    if (ok)
      EXPECT(results_diff(p, &before, &now, "untouched by the capture") == 0,
             "work ran while the stream was being captured (outside the graph)");
    results_free(&now);
  }
  e = cudaGraphInstantiate(&exec, graph, 0);
  EXPECT(e == cudaSuccess, "cudaGraphInstantiate: %s", cuda_err(e));
  if (e != cudaSuccess) goto out;

  for (int rep = 0; rep < 3; rep++) {
    char what[48];
    snprintf(what, sizeof what, "graph replay %d vs direct", rep + 1);
    ok = state_restore(ctx, p, &st);
    EXPECT(ok, "resetting the state: %s", coda_last_error(ctx));
    if (!ok) break;
    e = cudaGraphLaunch(exec, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    EXPECT(e == cudaSuccess, "cudaGraphLaunch: %s", cuda_err(e));
    if (e != cudaSuccess) break;
    ok = results_take(ctx, p, &cap);
    EXPECT(ok, "reading the results: %s", coda_last_error(ctx));
    if (!ok) break;
    EXPECT(results_diff(p, ref, &cap, what) == 0, "%s: results differ", what);
    results_free(&cap);
  }
  /* Replayed without a reset in between too: the graph is the run, so it
   * gives what two direct runs in a row give. */
  {
    results d2 = {0}, g2 = {0};
    ok = state_restore(ctx, p, &st) && run_direct(ctx, p) && run_direct(ctx, p) &&
         results_take(ctx, p, &d2) && state_restore(ctx, p, &st);
    if (ok) {
      e = cudaGraphLaunch(exec, stream);
      if (e == cudaSuccess) e = cudaGraphLaunch(exec, stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      ok = e == cudaSuccess && results_take(ctx, p, &g2);
    }
    EXPECT(ok, "back-to-back runs: %s / %s", coda_last_error(ctx), cuda_err(e));
    if (ok)
      EXPECT(results_diff(p, &d2, &g2, "two replays vs two direct runs") == 0,
             "back-to-back replays differ from back-to-back runs");
    results_free(&d2);
    results_free(&g2);
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  results_free(&r2);
  results_free(&cap);
  results_free(&before);
  state_free(&st);
  coda_plan_destroy(p);
}

/* The same plan and data on a context without a stream of its own. */
static void check_block_legacy(coda_context ctx, const results *ref) {
  printf("== llama block on the legacy default stream\n");
  coda_plan p = NULL;
  results r = {0};
  coda_status s = pt_build(ctx, PT_LLAMA_BLOCK, pt_gpu_shape(), CODA_BF16, (coda_tiling){0, 0}, 0, &p);
  EXPECT(s == CODA_OK, "building the plan: %s", coda_last_error(ctx));
  if (s == CODA_OK) {
    const int ok = fill_inputs(ctx, p, kSeed) && run_direct(ctx, p) && results_take(ctx, p, &r);
    EXPECT(ok, "legacy-stream run: %s", coda_last_error(ctx));
    if (ok && ref->host)
      EXPECT(results_diff(p, ref, &r, "legacy stream vs own stream") == 0,
             "the legacy-stream context computes other bits");
  }
  results_free(&r);
  coda_plan_destroy(p);
}

/* ------------------------------------------------------- single calls */

static void *dev_random(coda_context ctx, coda_dtype dt, int64_t rows, int64_t cols, double scale) {
  const size_t es = coda_dtype_size(dt), n = (size_t)(rows * cols);
  void *h = malloc(n * es), *d = NULL;
  if (!h) return NULL;
  coda_tensor ht = {h, dt, rows, cols, cols};
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) coda_store(&ht, r, c, scale * urand());
  if (coda_malloc(ctx, n * es, &d) != CODA_OK || coda_memcpy_h2d(ctx, d, h, n * es) != CODA_OK) {
    if (d) coda_free(ctx, d);
    d = NULL;
  }
  free(h);
  return d;
}

/* One call (fused GEMM or split-K GEMM) run directly, then captured and
 * replayed twice with D cleared before each run: bitwise the same. */
typedef enum { CALL_FUSED, CALL_SPLITK } call_kind;

static coda_status do_call(coda_context ctx, call_kind k, coda_program prog, const coda_tensor *A,
                           const coda_tensor *B, const coda_tensor *res, const coda_tensor *D) {
  if (k == CALL_SPLITK) return coda_gemm(ctx, CODA_N, A, CODA_T, B, D, 0.5f, 0);
  coda_args args = NULL;
  coda_status s = coda_args_create(ctx, &args);
  if (s == CODA_OK) s = coda_args_set(args, "res", res);
  if (s == CODA_OK) s = coda_args_set(args, "x", D);
  coda_tiling tl;
  if (s == CODA_OK) s = coda_preferred_tiling(ctx, prog, D->rows, D->cols, A->cols, &tl);
  if (s == CODA_OK) s = coda_gemm_epilogue(ctx, prog, CODA_N, A, CODA_T, B, args, tl);
  coda_args_destroy(args);
  return s;
}

static void check_call(coda_context ctx, cudaStream_t stream, call_kind k, const char *label) {
  printf("== %s captured into a graph\n", label);
  /* split-K: one 128 x 128 tile and K = 8192, so the default splits K
   * (partials in the context's split-K workspace); fused: 192 x 256 x 512 */
  const int64_t M = k == CALL_SPLITK ? 128 : 192, N = k == CALL_SPLITK ? 128 : 256,
                K = k == CALL_SPLITK ? 8192 : 512;
  const coda_dtype ddt = k == CALL_SPLITK ? CODA_F32 : CODA_BF16;
  coda_program prog = NULL;
  void *a = NULL, *b = NULL, *rs = NULL, *d = NULL;
  void *h0 = NULL, *h1 = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  const size_t dbytes = (size_t)(M * N) * coda_dtype_size(ddt);
  g_rng = kSeed + (uint64_t)k;
  if (k == CALL_FUSED && coda_program_builtin(ctx, "llama_residual", &prog) != CODA_OK) {
    EXPECT(0, "llama_residual: %s", coda_last_error(ctx));
    return;
  }
  a = dev_random(ctx, CODA_BF16, M, K, 1.0);
  b = dev_random(ctx, CODA_BF16, N, K, 1.0 / 32.0);
  rs = dev_random(ctx, CODA_BF16, M, N, 1.0);
  h0 = malloc(dbytes);
  h1 = malloc(dbytes);
  int ok = a && b && rs && h0 && h1 && coda_malloc(ctx, dbytes, &d) == CODA_OK;
  EXPECT(ok, "%s: buffers: %s", label, coda_last_error(ctx));
  if (!ok) goto out;
  coda_tensor A = coda_tensor_2d(a, CODA_BF16, M, K), B = coda_tensor_2d(b, CODA_BF16, N, K),
              R = coda_tensor_2d(rs, CODA_BF16, M, N), D = coda_tensor_2d(d, ddt, M, N);
  void *zero = calloc(1, dbytes);
  ok = zero != NULL;
  /* direct (twice: the first grows the workspace and loads the kernel) */
  for (int i = 0; i < 2 && ok; i++)
    ok = coda_memcpy_h2d(ctx, d, zero, dbytes) == CODA_OK && do_call(ctx, k, prog, &A, &B, &R, &D) == CODA_OK &&
         coda_memcpy_d2h(ctx, h0, d, dbytes) == CODA_OK;
  EXPECT(ok, "%s: direct call: %s", label, coda_last_error(ctx));
  cudaError_t e = cudaSuccess;
  if (ok) ok = coda_memcpy_h2d(ctx, d, zero, dbytes) == CODA_OK;
  if (ok) {
    e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    coda_status s = e == cudaSuccess ? do_call(ctx, k, prog, &A, &B, &R, &D) : CODA_OK;
    EXPECT(s == CODA_OK, "%s: call under capture: %s", label, coda_last_error(ctx));
    if (e == cudaSuccess) e = cudaStreamEndCapture(stream, &graph);
    if (e == cudaSuccess && s == CODA_OK) e = cudaGraphInstantiate(&exec, graph, 0);
    EXPECT(e == cudaSuccess, "%s: capture: %s", label, cuda_err(e));
    ok = s == CODA_OK && e == cudaSuccess;
  }
  for (int rep = 0; rep < 2 && ok; rep++) {
    ok = coda_memcpy_h2d(ctx, d, zero, dbytes) == CODA_OK;
    if (ok) {
      e = cudaGraphLaunch(exec, stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      ok = e == cudaSuccess && coda_memcpy_d2h(ctx, h1, d, dbytes) == CODA_OK;
    }
    EXPECT(ok, "%s: replay: %s / %s", label, cuda_err(e), coda_last_error(ctx));
    if (ok) {
      const int same = !memcmp(h0, h1, dbytes);
      printf("  replay %d: %s\n", rep + 1, same ? "bit-identical" : "DIFFERS");
      EXPECT(same, "%s: replay %d differs from the direct call", label, rep + 1);
    }
  }
  free(zero);
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (a) coda_free(ctx, a);
  if (b) coda_free(ctx, b);
  if (rs) coda_free(ctx, rs);
  if (d) coda_free(ctx, d);
  free(h0);
  free(h1);
  coda_program_destroy(prog);
}

int main(void) {
  if (!coda_cuda_available()) {
    printf("no usable GPU\n");
    return 2;
  }
  cudaStream_t stream = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    printf("cudaStreamCreateWithFlags: %s\n", cuda_err(e));
    return 2;
  }
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  o.stream = stream;
  coda_context ctx = NULL, legacy = NULL, dbg = NULL;
  if (coda_context_create(&o, &ctx) != CODA_OK) {
    printf("cannot create a CUDA context: %s\n", coda_last_error(NULL));
    return 2;
  }
  results ref = {0};
  check_block_graph(ctx, stream, &ref);
  check_call(ctx, stream, CALL_FUSED, "fused GEMM (coda_gemm_epilogue, llama_residual)");
  check_call(ctx, stream, CALL_SPLITK, "split-K GEMM (coda_gemm)");

  o.debug_sync = 1; /* waits after every launch, but not on a captured stream */
  if (coda_context_create(&o, &dbg) == CODA_OK) {
    check_call(dbg, stream, CALL_FUSED, "fused GEMM, debug-sync context");
    check_call(dbg, stream, CALL_SPLITK, "split-K GEMM, debug-sync context");
  } else {
    EXPECT(0, "debug-sync context: %s", coda_last_error(NULL));
  }

  o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA; /* no stream: the legacy default stream */
  if (coda_context_create(&o, &legacy) == CODA_OK) check_block_legacy(legacy, &ref);
  else EXPECT(0, "legacy-stream context: %s", coda_last_error(NULL));

  results_free(&ref);
  coda_context_destroy(legacy);
  coda_context_destroy(dbg);
  coda_context_destroy(ctx);
  cudaStreamDestroy(stream);
  /* the line tests/gpu/sanitize.sh shows for each sanitizer run */
  printf("coverage: the Llama-3 block plan's forward and backward captured and replayed 3 times, "
         "a fused GEMM and a split-K GEMM captured (also on a debug-sync context), the legacy "
         "default stream\n");
  printf("%d passed, %d failed%s\n", g_pass, g_fail,
         g_fail ? "" : " (graph replays bit-identical to direct runs)");
  return g_fail ? 1 : 0;
}
