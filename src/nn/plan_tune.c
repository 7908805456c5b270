/* Choosing fusion per GEMM step (coda_plan_tune_fusion): each step timed
 * fused (both schedules on CUDA) and unfused, the faster kept, and the
 * choice stored in the context's tuning cache so a later process applies
 * it without timing. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "nn/plan_internal.h"

#include "base/internal.h"
#include "base/tune_cache.h" /* the choices on disk */
#include "api/api.h"         /* copies, cache tags */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* Copies buffer b into a dense snapshot of the same backend (restore = 0)
 * or back (restore = 1). */
static coda_status snap_copy(coda_plan p, const plan_buf *b, void *snap, int restore) {
  coda_tensor v = view_of(b);
  coda_tensor d = coda_tensor_2d(snap, b->dtype, b->rows, b->cols);
  return restore ? coda_tensor_copy(p->ctx, &v, &d) : coda_tensor_copy(p->ctx, &d, &v);
}

/* Buffers step s changes in a way a repeated run does not undo: outputs it
 * accumulates into, and outputs it also reads (in place: an output whose
 * memory is an input's, by plan_buffer_alias). Returns their count (the
 * buffers that own the memory). */
static int state_bufs(coda_plan p, const plan_step *s, int *out) {
  coda_program prog = p->progs[s->prog].prog;
  int n = 0;
  for (int i = 0; i < s->nbind; i++) {
    coda_arg_info ai;
    int written = 0, acc = 0, read = 0;
    if (coda_program_arg(prog, s->bind[i].index, &ai) == CODA_OK) { /* by the step's index */
      written = ai.kind == CODA_ARG_OUTPUT || ai.kind == CODA_ARG_PARTIAL;
      acc = ai.kind == CODA_ARG_OUTPUT && ai.accumulate;
    }
    if (!written) continue;
    const int mem = plan_storage(p, s->bind[i].buf);
    for (int j = 0; j < s->nbind; j++) {
      if (j == i || plan_storage(p, s->bind[j].buf) != mem) continue;
      if (coda_program_arg(prog, s->bind[j].index, &ai) == CODA_OK && ai.kind != CODA_ARG_OUTPUT &&
          ai.kind != CODA_ARG_PARTIAL)
        read = 1;
    }
    int seen = 0;
    for (int k = 0; k < n; k++) seen |= out[k] == mem;
    if ((acc || read) && !seen) out[n++] = mem;
  }
  return n;
}

/* Median over 5 samples of the time of one run of step s (us), each sample
 * `iters` back-to-back runs closed by a synchronize. */
static coda_status time_step(coda_context ctx, coda_plan p, const plan_step *s, int iters,
                             double *us) {
  double t[5];
  for (int k = 0; k < 5; k++) {
    coda_status st = coda_synchronize(ctx);
    const double t0 = now_us();
    for (int i = 0; i < iters && st == CODA_OK; i++) st = plan_exec_step(ctx, p, s);
    if (st == CODA_OK) st = coda_synchronize(ctx);
    if (st != CODA_OK) return st;
    t[k] = (now_us() - t0) / iters;
  }
  for (int i = 1; i < 5; i++) /* insertion sort of five */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      const double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  *us = t[2];
  return CODA_OK;
}

/* One GEMM step: every variant (fused and unfused; on CUDA the fused one
 * under both schedules) warmed up (kernels loaded or compiled; a variant
 * that cannot be built is left out), then timed in two rounds, the second
 * in reverse order; the buffers it must not disturb are saved first and
 * restored after. Leaves the step at the fastest variant. */
static coda_status tune_step(coda_context ctx, coda_plan p, plan_step *s, int iters) {
  typedef struct { int unfused, sched; } variant;
  const int gpu = coda_context_backend(ctx) == CODA_BACKEND_CUDA;
  const variant vs[3] = {{0, gpu ? CODA_SCHED_PINGPONG : CODA_SCHED_AUTO},
                         {0, CODA_SCHED_COOPERATIVE},
                         {1, CODA_SCHED_AUTO}};
  int bufs[PLAN_MAX_BINDS];
  void *snap[PLAN_MAX_BINDS] = {0};
  const int nb = state_bufs(p, s, bufs);
  coda_status st = CODA_OK;
  for (int i = 0; i < nb && st == CODA_OK; i++) {
    const plan_buf *b = &p->bufs[bufs[i]];
    st = coda_malloc(p->ctx, (size_t)(b->rows * b->cols) * coda_dtype_size(b->dtype), &snap[i]);
    if (st == CODA_OK) st = snap_copy(p, b, snap[i], 0);
  }
  double t[3] = {INFINITY, INFINITY, INFINITY};
  int ok[3] = {0, 0, 0};
  for (int v = 0; v < 3 && st == CODA_OK; v++) { /* warm-up */
    if (v == 1 && !gpu) continue;
    s->unfused = vs[v].unfused;
    s->sched = vs[v].sched;
    const coda_status r = plan_exec_step(ctx, p, s);
    if (r == CODA_OK) ok[v] = 1;
    else if (v == 2) st = r; /* plain GEMM + map must work */
  }
  if (st == CODA_OK && !ok[0] && !ok[1])
    st = coda_fail(ctx, CODA_ERR_BACKEND, "no fused variant of the step could run");
  for (int rep = 0; rep < 2 && st == CODA_OK; rep++)
    for (int i = 0; i < 3 && st == CODA_OK; i++) {
      const int v = rep ? 2 - i : i;
      if (!ok[v]) continue;
      s->unfused = vs[v].unfused;
      s->sched = vs[v].sched;
      double us;
      st = time_step(ctx, p, s, iters, &us);
      if (st == CODA_OK && us < t[v]) t[v] = us;
    }
  if (st == CODA_OK) st = coda_synchronize(ctx);
  for (int i = 0; i < nb; i++) {
    if (snap[i] && st == CODA_OK) st = snap_copy(p, &p->bufs[bufs[i]], snap[i], 1);
    coda_free(p->ctx, snap[i]);
  }
  for (int v = 0; v < 3; v++) s->tuned_us[v] = ok[v] && isfinite(t[v]) ? t[v] : 0;
  /* the faster fused schedule; the unfused pair must win by 2 %, since
   * fusion also saves memory (no M x N temporary) */
  const int fv = t[1] < t[0] ? 1 : 0;
  s->sched = vs[fv].sched;
  s->unfused = st == CODA_OK && t[2] < 0.98 * t[fv];
  if (s->unfused) s->sched = CODA_SCHED_AUTO;
  return st;
}

/* The context's table of fusion choices, made on first use with the
 * running tags: on CUDA the GPU (name, SM count) and the library version
 * with a hash of the fused kernels' mainloop headers (a choice measured
 * on other kernels is not reused); on the CPU the thread count and the
 * version. File: $CODA_CACHE_DIR/fused-tune.txt or
 * ~/.cache/coda/fused-tune.txt. */
static coda_status fused_table(coda_context ctx, coda_fused_cache **out) {
  *out = coda_fused_tune_state(ctx);
  if (*out) return CODA_OK;
  char device[CODA_TUNE_TAG_LEN], lib[CODA_TUNE_TAG_LEN], path[CODA_TUNE_PATH_LEN];
  coda_status st = coda_backend_tags(ctx, device, sizeof device, lib, sizeof lib);
  if (st != CODA_OK) return st;
  if (!coda_fused_cache_default_path(&ctx->knobs, path, sizeof path)) path[0] = '\0';
  *out = coda_fused_tune_create(ctx, device, lib, path);
  if (!*out) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "fusion tuning cache: out of memory");
  return CODA_OK;
}

/* A stored choice below UNFUSED is the fused kernel's schedule. */
_Static_assert((int)CODA_FUSED_CHOICE_FUSED == (int)CODA_SCHED_AUTO &&
                   (int)CODA_FUSED_CHOICE_PINGPONG == (int)CODA_SCHED_PINGPONG &&
                   (int)CODA_FUSED_CHOICE_COOPERATIVE == (int)CODA_SCHED_COOPERATIVE,
               "fusion choices and schedules are numbered alike");

/* Key of a GEMM step in the table: the program's identity (hash of its
 * canonical text), the problem, the operand type and the tiling. */
static coda_fused_key fused_key(coda_plan p, const plan_step *s) {
  coda_fused_key k;
  memset(&k, 0, sizeof k);
  const char *text = coda_program_text(p->progs[s->prog].prog);
  k.program = coda_fnv1a64(text, strlen(text), 0);
  k.m = s->M;
  k.n = s->N;
  k.k = op_cols(&p->bufs[s->a], s->ta);
  k.trans_a = s->ta == CODA_T;
  k.trans_b = s->tb == CODA_T;
  k.ab = p->bufs[s->a].dtype;
  k.tile_m = s->tiling.tile_m;
  k.tile_n = s->tiling.tile_n;
  return k;
}

coda_status coda_plan_tune_fusion(coda_context ctx, coda_plan p, int iters, int *n_unfused) {
  if (n_unfused) *n_unfused = 0;
  if (ctx && p && (iters < 1 || iters > 100000))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_plan_tune_fusion: iters %d not in 1..100000", iters);
  coda_status st = plan_enter(ctx, p, "coda_plan_tune_fusion");
  if (st != CODA_OK) return st;
  coda_fused_cache *table = NULL;
  st = fused_table(ctx, &table);
  if (st != CODA_OK) return st;
  /* retune (CODA_RETUNE=1): time every step again and overwrite the stored choices */
  const int retune = ctx->knobs.retune;
  int stored = 0;
  for (int i = 0; i < p->nstep && st == CODA_OK; i++) {
    plan_step *s = &p->steps[i];
    if (s->kind != PLAN_GEMM) continue;
    const coda_fused_key key = fused_key(p, s);
    const coda_fused_entry *hit = retune ? NULL : coda_fused_cache_find(table, &key);
    if (hit) { /* applied without running the step */
      s->unfused = hit->choice == CODA_FUSED_CHOICE_UNFUSED;
      s->sched = s->unfused ? CODA_SCHED_AUTO : hit->choice;
      for (int v = 0; v < 3; v++) s->tuned_us[v] = hit->us[v];
      s->tuned_cached = 1;
    } else {
      s->tuned_cached = 0;
      st = tune_step(ctx, p, s, iters);
      if (st == CODA_OK) {
        st = coda_fused_cache_put(table, &key,
                                  s->unfused ? CODA_FUSED_CHOICE_UNFUSED : s->sched, s->tuned_us);
        if (st != CODA_OK) coda_fail(ctx, st, "fusion tuning cache: cannot record the choice");
        stored++;
      }
    }
    if (st != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(ctx));
      coda_fail(ctx, st, "plan '%s', timing step %d (%s): %s", p->name, i, s->label, inner);
    } else if (n_unfused) {
      *n_unfused += s->unfused;
    }
  }
  /* Saved once, with what was measured even if a later step failed. A
   * file that cannot be written costs only re-timing in the next process:
   * the call still succeeds, and this context tries no more writes. */
  if (stored && table->disk_ok && coda_fused_cache_save(NULL, table) != CODA_OK)
    table->disk_ok = 0;
  /* the temporary is reallocated for the largest step that stays unfused */
  if (p->acc_tmp) coda_free(p->ctx, p->acc_tmp);
  p->acc_tmp = NULL;
  p->acc_tmp_bytes = 0;
  plan_arena_refresh(p); /* or in the arena, for the steps left unfused */
  return st;
}
