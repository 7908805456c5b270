/* The CPU backend's table (backends/backend.h): host memory, the blocked
 * GEMM and the program interpreter (fp32, or fp64 in exact mode), the
 * finishers and attention. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime: the timing markers */
#include "backends/backend.h"
#include "backends/cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static coda_status cpu_create(coda_context ctx) {
  (void)ctx;
  return CODA_OK;
}
static void cpu_destroy(coda_context ctx) { (void)ctx; }

static coda_status cpu_alloc(coda_context ctx, size_t bytes, void **out) {
  *out = calloc(bytes ? bytes : 1, 1);
  if (!*out) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "coda_malloc: cannot allocate %zu bytes", bytes);
  return CODA_OK;
}
static void cpu_free(coda_context ctx, void *p) {
  (void)ctx;
  free(p);
}

static coda_status cpu_copy_bytes(coda_context ctx, void *dst, const void *src, size_t bytes,
                                  coda_copy_kind kind) {
  (void)ctx, (void)kind;
  if (bytes) memmove(dst, src, bytes);
  return CODA_OK;
}

static coda_status cpu_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src) {
  (void)ctx;
  if (src && src->dtype != dst->dtype) { /* converted, rounded to dst's dtype */
    for (int64_t r = 0; r < dst->rows; r++)
      for (int64_t c = 0; c < dst->cols; c++) coda_store(dst, r, c, coda_load(src, r, c));
    return CODA_OK;
  }
  const size_t es = coda_dtype_size(dst->dtype), row = (size_t)dst->cols * es;
  for (int64_t r = 0; r < dst->rows; r++) {
    char *d = (char *)dst->data + (size_t)(r * dst->ld) * es;
    if (src) memmove(d, (const char *)src->data + (size_t)(r * src->ld) * es, row);
    else memset(d, 0, row);
  }
  return CODA_OK;
}

static coda_status cpu_synchronize(coda_context ctx) {
  (void)ctx;
  return CODA_OK;
}

/* The thread count is part of the device: timings depend on it. */
static coda_status cpu_tags(coda_context ctx, char *device, size_t ndevice, char *code,
                            size_t ncode) {
  int threads = ctx->opts.num_threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  snprintf(device, ndevice, "cpu/%dt", threads > 0 ? threads : 1);
  if (ncode) code[0] = '\0';
  return CODA_OK;
}

static cpu_view op_view(const coda_tensor *t, coda_transpose tr) {
  cpu_view v = {t->data, t->dtype, tr == CODA_N ? t->ld : 1, tr == CODA_N ? 1 : t->ld};
  return v;
}

/* The interpreter's job for a checked run. */
static void to_cpu_job(coda_context ctx, const coda_epi_job *j, cpu_job *c) {
  memset(c, 0, sizeof *c);
  c->prog = j->prog;
  c->M = j->M;
  c->N = j->N;
  c->tile_m = j->tiling.tile_m;
  c->tile_n = j->tiling.tile_n;
  c->f64 = ctx->opts.precision == CODA_PRECISION_F64;
  c->num_threads = ctx->opts.num_threads;
  memcpy(c->inputs, j->inputs, sizeof c->inputs);
  memcpy(c->outputs, j->outputs, sizeof c->outputs);
  memcpy(c->partials, j->partials, sizeof c->partials);
  c->D = j->D;
  c->alpha = j->alpha;
  c->accumulate = j->accumulate;
  if (j->has_gemm) {
    c->has_gemm = 1;
    c->gemm.a = op_view(j->A, j->ta);
    c->gemm.b = op_view(j->B, j->tb);
    c->gemm.M = j->M;
    c->gemm.N = j->N;
    c->gemm.K = j->K;
  }
}

static coda_status cpu_run_job(coda_context ctx, const coda_epi_job *j) {
  cpu_job c;
  to_cpu_job(ctx, j, &c);
  return cpu_run(ctx, &c);
}

static coda_status cpu_gemm(coda_context ctx, const coda_epi_job *j) {
  cpu_job c;
  to_cpu_job(ctx, j, &c);
  c.tile_m = 96; /* a multiple of the micro-kernel's 6 rows */
  c.tile_n = 128;
  return cpu_run(ctx, &c);
}

static coda_status cpu_finish_job(coda_context ctx, const coda_finish_job *j) {
  cpu_finish_desc d;
  memset(&d, 0, sizeof d);
  d.kind = (coda_finish_kind)j->kind;
  d.layout = j->layout;
  d.P = j->P;
  d.Q = j->Q;
  d.out = j->out;
  d.M = j->M;
  d.N = j->N;
  d.tile_m = j->tiling.tile_m;
  d.tile_n = j->tiling.tile_n;
  d.seg = j->seg;
  d.eps = j->eps;
  d.f64 = ctx->opts.precision == CODA_PRECISION_F64;
  cpu_finish(&d);
  return CODA_OK;
}

static coda_status cpu_preferred_tiling(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                        int64_t K, coda_tiling *out) {
  (void)ctx, (void)p, (void)M, (void)N, (void)K;
  out->tile_m = 64;
  out->tile_n = 128;
  return CODA_OK;
}

/* Timing markers: the host clock (every operation of this backend has
 * finished when its call returns). */
static coda_status cpu_timer_create(coda_context ctx, int n, void **set) {
  double *t = calloc((size_t)n, sizeof *t);
  if (!t) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  *set = t;
  return CODA_OK;
}
static coda_status cpu_timer_record(coda_context ctx, void *set, int i) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((double *)set)[i] = (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
  return CODA_OK;
}
static coda_status cpu_timer_elapsed(coda_context ctx, void *set, int a, int b, double *ms) {
  (void)ctx;
  *ms = ((const double *)set)[b] - ((const double *)set)[a];
  return CODA_OK;
}
static void cpu_timer_destroy(coda_context ctx, void *set) {
  (void)ctx;
  free(set);
}

const coda_backend_ops coda_cpu_backend_ops = {
    .name = "cpu",
    .kind = CODA_BACKEND_CPU,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_bytes = cpu_copy_bytes,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .tags = cpu_tags,
    .gemm = cpu_gemm,
    .gemm_epilogue = cpu_run_job,
    .map = cpu_run_job,
    .finish = cpu_finish_job,
    .preferred_tiling = cpu_preferred_tiling,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .train = NULL,
    .timer_create = cpu_timer_create,
    .timer_record = cpu_timer_record,
    .timer_elapsed = cpu_timer_elapsed,
    .timer_destroy = cpu_timer_destroy,
};
