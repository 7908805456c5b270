/* Memory accounting per context (coda_memory_stats, coda_memory_reset_peak)
 * on the CPU backend: current and peak bytes against an independent model
 * of the allocations, through table growth and frees in random order, the
 * reset semantics, foreign pointers, independence of contexts, and a
 * plan's buffers being counted. */
#include "coda_nn.h"
#include "check.h"
#include "nn/plan.h" /* the plan's arena size */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static coda_memory_info stats(coda_context ctx) {
  coda_memory_info m;
  memset(&m, 0xff, sizeof m);
  CHECK(coda_memory_stats(ctx, &m) == CODA_OK);
  return m;
}

int main(void) {
  coda_context ctx, other;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  CHECK(coda_context_create(NULL, &other) == CODA_OK);

  coda_memory_info m = stats(ctx);
  CHECK_EQ_INT(m.current_bytes, 0);
  CHECK_EQ_INT(m.peak_bytes, 0);
  CHECK_EQ_INT(m.live_blocks, 0);

  /* simple pattern: a, b, free a, c; peak is the largest sum alive */
  void *a, *b, *c;
  CHECK(coda_malloc(ctx, 1000, &a) == CODA_OK);
  CHECK(coda_malloc(ctx, 3000, &b) == CODA_OK);
  m = stats(ctx);
  CHECK_EQ_INT(m.current_bytes, 4000);
  CHECK_EQ_INT(m.peak_bytes, 4000);
  CHECK_EQ_INT(m.live_blocks, 2);
  coda_free(ctx, a);
  CHECK(coda_malloc(ctx, 500, &c) == CODA_OK);
  m = stats(ctx);
  CHECK_EQ_INT(m.current_bytes, 3500);
  CHECK_EQ_INT(m.peak_bytes, 4000);

  /* reset: peak drops to current, then follows new allocations only */
  CHECK(coda_memory_reset_peak(ctx) == CODA_OK);
  m = stats(ctx);
  CHECK_EQ_INT(m.peak_bytes, 3500);
  coda_free(ctx, b);
  m = stats(ctx);
  CHECK_EQ_INT(m.current_bytes, 500);
  CHECK_EQ_INT(m.peak_bytes, 3500);
  CHECK(coda_memory_reset_peak(ctx) == CODA_OK);
  CHECK_EQ_INT(stats(ctx).peak_bytes, 500);
  void *d;
  CHECK(coda_malloc(ctx, 100, &d) == CODA_OK);
  coda_free(ctx, d);
  m = stats(ctx);
  CHECK_EQ_INT(m.current_bytes, 500);
  CHECK_EQ_INT(m.peak_bytes, 600);

  /* zero-byte blocks are live blocks of 0 bytes */
  void *z;
  CHECK(coda_malloc(ctx, 0, &z) == CODA_OK && z);
  CHECK_EQ_INT(stats(ctx).live_blocks, 2);
  coda_free(ctx, z);
  CHECK_EQ_INT(stats(ctx).live_blocks, 1);

  /* a pointer this context did not allocate changes nothing (it is still
   * released, as before: here it belongs to the other context) */
  void *foreign;
  CHECK(coda_malloc(other, 7777, &foreign) == CODA_OK);
  CHECK_EQ_INT(stats(other).current_bytes, 7777);
  CHECK_EQ_INT(stats(ctx).current_bytes, 500);
  coda_free(ctx, NULL);
  CHECK_EQ_INT(stats(ctx).current_bytes, 500);
  CHECK_EQ_INT(stats(other).current_bytes, 7777); /* contexts are independent */
  coda_free(other, foreign);
  CHECK_EQ_INT(stats(other).current_bytes, 0);
  CHECK_EQ_INT(stats(other).peak_bytes, 7777);
  coda_free(ctx, c);

  /* many blocks freed in random order (table growth, deletion with
   * probing), against a running model of current and peak */
  enum { N = 3000 };
  void **p = calloc(N, sizeof *p);
  size_t *sz = calloc(N, sizeof *sz);
  CHECK(p && sz);
  CHECK(coda_memory_reset_peak(ctx) == CODA_OK);
  size_t cur = 0, peak = 0;
  uint64_t s = 12345;
  int mismatches = 0;
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < N; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const int k = (int)((s >> 33) % N);
      if (p[k]) {
        coda_free(ctx, p[k]);
        p[k] = NULL;
        cur -= sz[k];
      } else {
        sz[k] = (size_t)((s >> 20) % 4096);
        if (coda_malloc(ctx, sz[k], &p[k]) != CODA_OK) mismatches++;
        cur += sz[k];
        if (cur > peak) peak = cur;
      }
      coda_memory_info q = stats(ctx);
      if (q.current_bytes != cur || q.peak_bytes != peak) mismatches++;
    }
  }
  CHECK_EQ_INT(mismatches, 0);
  size_t live = 0;
  for (int k = 0; k < N; k++) live += p[k] != NULL;
  CHECK_EQ_INT(stats(ctx).live_blocks, live);
  for (int k = 0; k < N; k++) coda_free(ctx, p[k]);
  m = stats(ctx);
  CHECK_EQ_INT(m.current_bytes, 0);
  CHECK_EQ_INT(m.live_blocks, 0);
  CHECK_EQ_INT(m.peak_bytes, peak);
  free(p);
  free(sz);

  /* bad arguments */
  CHECK(coda_memory_stats(NULL, &m) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_memory_stats(ctx, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_memory_reset_peak(NULL) == CODA_ERR_INVALID_ARGUMENT);

  /* a plan with fusion off allocates its temporaries and accumulators
   * through coda_malloc: the context sees them, and they go away with the
   * plan */
  for (int share = 1; share >= 0; share--) {
    coda_llama_config cfg = coda_llama_default_config();
    coda_plan plan;
    CHECK(coda_llama_block_plan(ctx, &cfg, &plan) == CODA_OK);
    CHECK(coda_plan_set_fused(plan, 0) == CODA_OK);
    CHECK(coda_plan_set_share_temps(plan, share) == CODA_OK);
    CHECK(coda_memory_reset_peak(ctx) == CODA_OK);
    CHECK(coda_plan_run(ctx, plan, CODA_PHASE_FORWARD) == CODA_OK);
    CHECK(coda_plan_run(ctx, plan, CODA_PHASE_BACKWARD) == CODA_OK);
    m = stats(ctx);
    /* the largest GEMM step of the default block: M = 32 rows by the
     * gate/up width 2 ffn = 256 columns, bf16 */
    const size_t acc = (size_t)(cfg.batch * cfg.seq) * (size_t)(2 * cfg.ffn_dim) * 2;
    /* shared: every accumulator is a slot of the temporaries' arena; not
     * shared: the temporaries side by side, and one accumulator for all */
    CHECK_EQ_INT(m.current_bytes, plan->arena_bytes + (share ? 0 : acc));
    CHECK(plan->arena_bytes >= (share ? acc : plan->temp_bytes));
    CHECK(m.peak_bytes >= m.current_bytes);
    coda_plan_destroy(plan);
    CHECK_EQ_INT(stats(ctx).current_bytes, 0);
  }

  coda_context_destroy(ctx);
  coda_context_destroy(other);
  return CHECK_DONE();
}
