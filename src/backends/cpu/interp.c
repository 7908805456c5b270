/* The program interpreter of the CPU backend: the reference semantics of
 * the epilogue language (docs/language.md).
 *
 * Work is split into the caller's tiles (tile_m x tile_n). Each tile first
 * computes its accumulator tile (full K, see gemm.c), then runs the program
 * on it row by row, CPU_CHUNK iteration points at a time: every register
 * holds one chunk, so the per-instruction dispatch is paid once per chunk.
 * A tile owns its partials (row partials of its column tile, column
 * partials of its row tile), so the run is deterministic and needs no
 * atomics; there is no M x N temporary. */
#include "backends/cpu/cpu.h"
#include "backends/cpu/rope.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CPU_CHUNK 64

#define REAL float
#define SFX f32
#define RF(name) name##f
#define CPU_REAL_IS_DOUBLE 0
#include "backends/cpu/interp_impl.h"
#undef REAL
#undef SFX
#undef RF
#undef CPU_REAL_IS_DOUBLE

#define REAL double
#define SFX f64
#define RF(name) name
#define CPU_REAL_IS_DOUBLE 1
#include "backends/cpu/interp_impl.h"
#undef REAL
#undef SFX
#undef RF
#undef CPU_REAL_IS_DOUBLE

typedef struct thread_ws {
  cpu_gemm_ws gemm, gemm2; /* gemm2: the second columns of half-split pairs */
  int has_gemm, has_gemm2;
  void *regs, *colbuf, *segbuf;
} thread_ws;

static void thread_ws_free(thread_ws *w) {
  if (w->has_gemm) cpu_gemm_ws_free(&w->gemm);
  if (w->has_gemm2) cpu_gemm_ws_free(&w->gemm2);
  free(w->regs);
  free(w->colbuf);
  free(w->segbuf);
}

static coda_status run_job(coda_context ctx, const cpu_job *job);

/* Computes the rowsum inputs' per-row sums once per job, then runs it. */
coda_status cpu_run(coda_context ctx, const cpu_job *job) {
  const struct coda_program_s *pg = job->prog;
  int any = 0;
  for (int i = 0; pg && i < pg->ninputs; i++) any |= ir_kind_is_partials(pg->inputs[i].kind);
  if (!any) return run_job(ctx, job);
  cpu_job j = *job;
  void *sums[CODA_MAX_INPUTS] = {0};
  coda_status s = CODA_OK;
  for (int i = 0; i < pg->ninputs && !s; i++) {
    const coda_arg_kind kind = pg->inputs[i].kind;
    if (!ir_kind_is_partials(kind)) continue;
    const coda_tensor *P = job->inputs[i];
    sums[i] = malloc((size_t)(P->rows > 0 ? P->rows : 1) * (job->f64 ? sizeof(double) : sizeof(float)));
    if (!sums[i]) {
      s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for the sums of rowsum input '%s'",
                    pg->inputs[i].name);
      break;
    }
    if (kind != CODA_ARG_ROWSUM && job->f64) row_maxlse_f64((double *)sums[i], P, kind == CODA_ARG_ROWLSE);
    else if (kind != CODA_ARG_ROWSUM) row_maxlse_f32((float *)sums[i], P, kind == CODA_ARG_ROWLSE);
    else if (job->f64) row_sums_f64((double *)sums[i], P);
    else row_sums_f32((float *)sums[i], P);
    j.rowsums[i] = sums[i];
  }
  if (!s) s = run_job(ctx, &j);
  for (int i = 0; i < pg->ninputs; i++) free(sums[i]);
  return s;
}

static coda_status run_job(coda_context ctx, const cpu_job *job) {
  const int64_t M = job->M, N = job->N;
  const int tm = job->tile_m, tn = job->tile_n;
  const int64_t tiles_m = (M + tm - 1) / tm, tiles_n = (N + tn - 1) / tn;
  int64_t ntiles;
  if (!coda_mul_i64(tiles_m, tiles_n, &ntiles))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "%lld x %lld tiles overflow",
                     (long long)tiles_m, (long long)tiles_n);
  const struct coda_program_s *pg = job->prog;
  const size_t es = job->f64 ? sizeof(double) : sizeof(float);

  /* rowpick over an empty column range: every index is out of range */
  if (pg && N == 0)
    for (int q = 0; q < pg->nreduces; q++)
      if (pg->reduces[q].kind == CODA_REDUCE_ROWPICK)
        for (int64_t m = 0; m < M; m++) coda_store(job->partials[q], m, 0, 0.0);
  if (ntiles == 0) return CODA_OK;

  int nth = job->num_threads > 0 ? job->num_threads : omp_get_max_threads();
  if (nth < 1) nth = 1;
  if ((int64_t)nth > ntiles) nth = (int)ntiles;
  /* Small runs stay on one thread: waking the pool costs more than the
   * work (the result does not depend on the thread count). */
  {
    double work = (double)M * (double)N *
                  ((job->has_gemm ? 2.0 * (double)job->gemm.K : 0.0) +
                   8.0 * (pg ? pg->ninstrs + 1 : 1));
    if (work < CPU_SERIAL_WORK) nth = 1;
  }
  thread_ws *ws = calloc((size_t)nth, sizeof *ws);
  if (!ws) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for %d workspaces", nth);
  size_t nregs = pg ? (size_t)(pg->nregs > 0 ? pg->nregs : 1) : 1;
  size_t regs_n = nregs * CPU_CHUNK > (size_t)tn ? nregs * CPU_CHUNK : (size_t)tn;
  size_t nred = pg && pg->nreduces > 0 ? (size_t)pg->nreduces : 1;
  /* half-split pairs with segments wider than a tile: a tile in the first
   * half of a segment also computes the tile S/2 to its right */
  const int64_t split = pg ? ir_split_width(pg, N) : 0;
  const int far = job->has_gemm && split > tn;
  int ok = 1;
  for (int t = 0; t < nth && ok; t++) {
    ws[t].has_gemm = job->has_gemm && cpu_gemm_ws_init(&ws[t].gemm, job->f64, tm, tn);
    if (job->has_gemm && !ws[t].has_gemm) ok = 0;
    ws[t].has_gemm2 = far && cpu_gemm_ws_init(&ws[t].gemm2, job->f64, tm, tn);
    if (far && !ws[t].has_gemm2) ok = 0;
    ws[t].regs = malloc(regs_n * es);
    ws[t].colbuf = malloc(nred * (size_t)tn * es);
    ws[t].segbuf = malloc(nred * (size_t)tn * es);
    if (!ws[t].regs || !ws[t].colbuf || !ws[t].segbuf) ok = 0;
  }
  if (!ok) {
    for (int t = 0; t < nth; t++) thread_ws_free(&ws[t]);
    free(ws);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for tile workspaces");
  }

#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) if (nth > 1)
  for (int64_t t = 0; t < ntiles; t++) {
    thread_ws *w = &ws[omp_get_thread_num()];
    int64_t ti = t / tiles_n, tj = t % tiles_n;
    int64_t r0 = ti * tm, c0 = tj * tn;
    int mt = (int)(M - r0 < tm ? M - r0 : tm), nt = (int)(N - c0 < tn ? N - c0 : tn);
    const void *acc = NULL, *acc2 = NULL;
    int64_t ldacc = 0;
    if (job->has_gemm) {
      cpu_gemm_tile(&job->gemm, &w->gemm, r0, mt, c0, nt);
      acc = w->gemm.acc;
      ldacc = w->gemm.ldacc;
      if (far && c0 % split < split / 2) {
        cpu_gemm_tile(&job->gemm, &w->gemm2, r0, mt, c0 + split / 2, nt);
        acc2 = w->gemm2.acc;
      }
    }
    if (job->f64)
      run_tile_f64(job, (const double *)acc, (const double *)acc2, ldacc, r0, mt, c0, nt, ti, tj,
                   (double *)w->regs, (double *)w->colbuf, (double *)w->segbuf);
    else
      run_tile_f32(job, (const float *)acc, (const float *)acc2, ldacc, r0, mt, c0, nt, ti, tj,
                   (float *)w->regs, (float *)w->colbuf, (float *)w->segbuf);
  }

  for (int t = 0; t < nth; t++) thread_ws_free(&ws[t]);
  free(ws);
  return CODA_OK;
}
