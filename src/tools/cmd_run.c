/* coda run: runs an epilogue program fused into a GEMM on random inputs, on
 * the CPU backend and (with --gpu) on the CUDA backend, times both and
 * compares every output, partial and finished vector of the GPU with the
 * CPU. This is how a new program is tried without writing any C or CUDA. */
#include "coda.h"
#include "tool_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  coda_arg_info info;
  int is_finish;
  int64_t rows, cols;
  size_t bytes;
  void *host;     /* initial contents (inputs, accumulated outputs) */
  void *dev[2];   /* per backend: 0 CPU, 1 CUDA */
  double *result[2]; /* downloaded, as double */
} run_arg;

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
/* Uniform in ±[0.1, 1): never zero, so unwritten or mis-indexed values show. */
static double rng_value(uint64_t *s) {
  double u = (double)(rng_next(s) >> 11) / 9007199254740992.0;
  double mag = 0.1 + 0.9 * u;
  return (rng_next(s) & 1) ? mag : -mag;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void fill(void *p, coda_dtype t, size_t n, uint64_t *s, int64_t int_range) {
  for (size_t i = 0; i < n; i++) {
    double v = rng_value(s);
    switch (t) {
    case CODA_BF16: ((uint16_t *)p)[i] = to_bf16((float)v); break;
    case CODA_F16: { _Float16 h = (_Float16)v; memcpy((uint16_t *)p + i, &h, 2); break; }
    case CODA_F32: ((float *)p)[i] = (float)v; break;
    case CODA_F64: ((double *)p)[i] = v; break;
    case CODA_I32: ((int32_t *)p)[i] = (int32_t)(rng_next(s) % (uint64_t)(int_range + 1)) - 1; break;
    }
  }
}

static double get(const void *p, coda_dtype t, size_t i) {
  switch (t) {
  case CODA_BF16: return from_bf16(((const uint16_t *)p)[i]);
  case CODA_F16: { _Float16 h; memcpy(&h, (const uint16_t *)p + i, 2); return (double)h; }
  case CODA_F32: return ((const float *)p)[i];
  case CODA_F64: return ((const double *)p)[i];
  case CODA_I32: return ((const int32_t *)p)[i];
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}


static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  if (!s) { fprintf(stderr, "coda run: %s needs a value\n", flag); return -1; }
  long long v = strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "coda run: %s needs an integer in [%lld, %lld], got '%s'\n", flag,
            (long long)lo, (long long)hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: coda run [OPTIONS] FILE | --builtin NAME\n"
          "Runs the epilogue program fused into acc = A * B^T (A M x K, B N x K, bf16)\n"
          "on random inputs (never zero), on the CPU backend and, with --gpu, on the\n"
          "CUDA backend; prints times and the largest GPU - CPU difference per output.\n"
          "Options:\n"
          "  --m M --n N --k K   GEMM shape (default 512 512 256)\n"
          "  --gpu               also run on the GPU and compare\n"
          "  --reps R            timed repetitions, median reported (default 5)\n"
          "  --seed S            random seed (default 1)\n"
          "A rowsum input gets ceil(N / tile_n) partials per row, the shape a rowsum\n"
          "reduction of this GEMM writes (tile_n of the GPU's tiling, 128); its partials\n"
          "and scalar inputs are positive.\n");
}

int coda_cmd_run(int argc, char **argv) {
  const char *file = NULL, *builtin = NULL;
  int64_t M = 512, N = 512, K = 256, reps = 5, seed = 1;
  int gpu = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!strcmp(a, "--m")) { rc = parse_i64(a, v, 1, 1 << 20, &M); i++; }
    else if (!strcmp(a, "--n")) { rc = parse_i64(a, v, 1, 1 << 20, &N); i++; }
    else if (!strcmp(a, "--k")) { rc = parse_i64(a, v, 1, 1 << 20, &K); i++; }
    else if (!strcmp(a, "--reps")) { rc = parse_i64(a, v, 1, 1000, &reps); i++; }
    else if (!strcmp(a, "--seed")) { rc = parse_i64(a, v, 0, INT64_MAX, &seed); i++; }
    else if (!strcmp(a, "--gpu")) gpu = 1;
    else if (!strcmp(a, "--builtin")) {
      if (!v) { fprintf(stderr, "coda run: --builtin needs a name\n"); return 2; }
      builtin = v;
      i++;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "coda run: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    } else file = a;
    if (rc) return 2;
  }
  if (!file == !builtin) { usage(stderr); return 2; }
  if ((double)M * N * 8 > 4e9 || (double)M * K * 2 > 4e9 || (double)N * K * 2 > 4e9) {
    fprintf(stderr, "coda run: shape %lld x %lld x %lld is too large for this tool\n",
            (long long)M, (long long)N, (long long)K);
    return 2;
  }
  if (gpu && !coda_cuda_available()) {
    fprintf(stderr, "coda run: --gpu: no usable GPU (or the library was built without CUDA)\n");
    return 1;
  }

  int nb = gpu ? 2 : 1, rc = 1;
  coda_context ctx[2] = {NULL, NULL};
  coda_program prog[2] = {NULL, NULL};
  coda_args args[2] = {NULL, NULL};
  run_arg *ra = NULL;
  int nargs = 0;
  void *dA[2] = {NULL, NULL}, *dB[2] = {NULL, NULL};
  uint16_t *hA = NULL, *hB = NULL;
  char *text = NULL;
  const char *why = NULL;
  if (file && !(text = coda_tool_read_text(file, &why))) {
    fprintf(stderr, "coda run: %s: %s\n", file, why ? why : "cannot read");
    return 1;
  }
  for (int b = 0; b < nb; b++) {
    coda_context_options o = coda_context_default_options();
    o.backend = b ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
    coda_status s = coda_context_create(&o, &ctx[b]);
    if (s != CODA_OK) {
      fprintf(stderr, "coda run: cannot create the %s context: %s\n", b ? "CUDA" : "CPU",
              coda_status_string(s));
      goto out;
    }
    s = builtin ? coda_program_builtin(ctx[b], builtin, &prog[b])
                : coda_program_parse(ctx[b], text, &prog[b]);
    if (s != CODA_OK) {
      fprintf(stderr, "coda run: %s: %s\n", builtin ? builtin : file, coda_last_error(ctx[b]));
      goto out;
    }
    if (coda_args_create(ctx[b], &args[b]) != CODA_OK) goto out;
  }

  /* The tiling the GPU uses fixes the partial shapes; the CPU runs with it. */
  coda_tiling tiling;
  if (coda_preferred_tiling(ctx[nb - 1], prog[nb - 1], M, N, K, &tiling) != CODA_OK) {
    fprintf(stderr, "coda run: %s\n", coda_last_error(ctx[nb - 1]));
    goto out;
  }
  uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed;
  if (!st) st = 1;
  hA = malloc((size_t)(M * K) * 2);
  hB = malloc((size_t)(N * K) * 2);
  if (!hA || !hB) goto out;
  fill(hA, CODA_BF16, (size_t)(M * K), &st, 0);
  fill(hB, CODA_BF16, (size_t)(N * K), &st, 0);
  for (size_t i = 0; i < (size_t)(N * K); i++) /* keep |acc| ~ 1 */
    hB[i] = to_bf16(from_bf16(hB[i]) / (float)sqrt((double)K));

  nargs = coda_program_num_args(prog[0]);
  ra = calloc((size_t)(nargs > 0 ? nargs : 1), sizeof *ra);
  if (!ra) goto out;
  for (int i = 0; i < nargs; i++) {
    run_arg *r = &ra[i];
    coda_program_arg(prog[0], i, &r->info);
    if (coda_program_arg_shape(prog[0], r->info.name, M, N, tiling.tile_m, tiling.tile_n,
                               &r->rows, &r->cols) != CODA_OK) {
      fprintf(stderr, "coda run: argument '%s': %s\n", r->info.name, coda_last_error(ctx[0]));
      goto out;
    }
    /* a rowsum input takes any number of partial columns: give it the
     * shape a rowsum reduction of this GEMM writes */
    if (r->info.kind == CODA_ARG_ROWSUM) r->cols = N > 0 ? (N + tiling.tile_n - 1) / tiling.tile_n : 1;
    r->bytes = (size_t)(r->rows * r->cols) * coda_dtype_size(r->info.dtype);
    r->host = calloc(1, r->bytes ? r->bytes : 1);
    if (!r->host) goto out;
    int is_input = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                   r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                   r->info.kind == CODA_ARG_ROWSUM;
    /* finished vectors are listed after the partials with a vector kind */
    for (int j = 0; j < i; j++)
      if (ra[j].info.kind == CODA_ARG_PARTIAL || ra[j].is_finish) r->is_finish = is_input;
    if (r->is_finish) is_input = 0;
    if (is_input || (r->info.kind == CODA_ARG_OUTPUT && r->info.accumulate))
      fill(r->host, r->info.dtype, (size_t)(r->rows * r->cols), &st,
           r->info.kind == CODA_ARG_COL ? 1 : N);
    /* rowsum partials and scalars positive, like the sums of squares and
     * the scales (1/N, counts) they stand for in practice */
    if (is_input && (r->info.kind == CODA_ARG_ROWSUM || r->info.kind == CODA_ARG_SCALAR))
      for (size_t e = 0; e < (size_t)(r->rows * r->cols); e++) {
        if (r->info.dtype == CODA_F32) ((float *)r->host)[e] = fabsf(((float *)r->host)[e]);
        else if (r->info.dtype == CODA_F64) ((double *)r->host)[e] = fabs(((double *)r->host)[e]);
      }
  }

  double med[2] = {0, 0};
  for (int b = 0; b < nb; b++) {
    if (coda_malloc(ctx[b], (size_t)(M * K) * 2, &dA[b]) || coda_malloc(ctx[b], (size_t)(N * K) * 2, &dB[b]) ||
        coda_memcpy_h2d(ctx[b], dA[b], hA, (size_t)(M * K) * 2) ||
        coda_memcpy_h2d(ctx[b], dB[b], hB, (size_t)(N * K) * 2)) {
      fprintf(stderr, "coda run: cannot allocate the operands: %s\n", coda_last_error(ctx[b]));
      goto out;
    }
    for (int i = 0; i < nargs; i++) {
      run_arg *r = &ra[i];
      if (coda_malloc(ctx[b], r->bytes ? r->bytes : 1, &r->dev[b]) != CODA_OK) goto out;
      coda_tensor t = coda_tensor_2d(r->dev[b], r->info.dtype, r->rows, r->cols);
      if (coda_args_set(args[b], r->info.name, &t) != CODA_OK) {
        fprintf(stderr, "coda run: %s\n", coda_last_error(ctx[b]));
        goto out;
      }
    }
    coda_tensor A = coda_tensor_2d(dA[b], CODA_BF16, M, K), B = coda_tensor_2d(dB[b], CODA_BF16, N, K);
    double *times = calloc((size_t)reps + 1, sizeof *times);
    if (!times) goto out;
    for (int rep = 0; rep <= reps; rep++) { /* rep 0 warms up (loads / compiles kernels) */
      for (int i = 0; i < nargs; i++)
        if (ra[i].bytes) coda_memcpy_h2d(ctx[b], ra[i].dev[b], ra[i].host, ra[i].bytes);
      coda_synchronize(ctx[b]);
      double t0 = now_s();
      coda_status s = coda_gemm_epilogue(ctx[b], prog[b], CODA_N, &A, CODA_T, &B, args[b], tiling);
      if (s == CODA_OK) s = coda_synchronize(ctx[b]);
      times[rep] = now_s() - t0;
      if (s != CODA_OK) {
        fprintf(stderr, "coda run: %s backend: %s\n", b ? "CUDA" : "CPU", coda_last_error(ctx[b]));
        free(times);
        goto out;
      }
    }
    qsort(times + 1, (size_t)reps, sizeof *times, cmp_double);
    med[b] = times[1 + reps / 2];
    free(times);
    /* finishers turn the partials into vectors */
    for (int i = 0; i < nargs; i++)
      if (ra[i].is_finish &&
          coda_finish(ctx[b], prog[b], ra[i].info.name, args[b], M, N, tiling) != CODA_OK) {
        fprintf(stderr, "coda run: finish %s: %s\n", ra[i].info.name, coda_last_error(ctx[b]));
        goto out;
      }
    for (int i = 0; i < nargs; i++) {
      run_arg *r = &ra[i];
      size_t n = (size_t)(r->rows * r->cols);
      void *tmp = malloc(r->bytes ? r->bytes : 1);
      r->result[b] = malloc((n ? n : 1) * sizeof(double));
      if (!tmp || !r->result[b]) { free(tmp); goto out; }
      coda_memcpy_d2h(ctx[b], tmp, r->dev[b], r->bytes);
      for (size_t j = 0; j < n; j++) r->result[b][j] = get(tmp, r->info.dtype, j);
      free(tmp);
    }
  }

  double flops = 2.0 * (double)M * N * K;
  printf("program %s, GEMM %lld x %lld x %lld (bf16), tiling %d x %d\n", builtin ? builtin : file,
         (long long)M, (long long)N, (long long)K, tiling.tile_m, tiling.tile_n);
  printf("  CPU: %.3f ms (%.1f GFLOP/s)\n", med[0] * 1e3, flops / med[0] * 1e-9);
  if (gpu) printf("  GPU: %.3f ms (%.1f TFLOP/s, host-timed incl. launch)\n", med[1] * 1e3, flops / med[1] * 1e-12);
  rc = 0;
  for (int i = 0; i < nargs; i++) {
    run_arg *r = &ra[i];
    int is_input = !r->is_finish && r->info.kind != CODA_ARG_OUTPUT && r->info.kind != CODA_ARG_PARTIAL;
    if (is_input) continue;
    size_t n = (size_t)(r->rows * r->cols);
    double maxref = 0, maxdiff = 0;
    int nonfinite = 0;
    for (size_t j = 0; j < n; j++) {
      double c = r->result[0][j];
      if (!isfinite(c) && !(isinf(c) && c < 0)) nonfinite++;
      if (isfinite(c) && fabs(c) > maxref) maxref = fabs(c);
      if (gpu) {
        double g = r->result[1][j];
        double d = (isinf(c) && isinf(g) && (c > 0) == (g > 0)) ? 0 : fabs(g - c);
        if (!(d <= maxdiff)) maxdiff = d; /* NaN propagates */
      }
    }
    printf("  %-10s %-7s %lld x %lld  max|cpu| %.4g", r->info.name,
           r->is_finish ? "finish" : r->info.kind == CODA_ARG_PARTIAL ? "partial" : "output",
           (long long)r->rows, (long long)r->cols, maxref);
    if (gpu) printf("  max|gpu-cpu| %.3g (rel %.3g)", maxdiff, maxref > 0 ? maxdiff / maxref : maxdiff);
    if (nonfinite) printf("  (%d non-finite on the CPU)", nonfinite);
    printf("\n");
  }

out:
  for (int i = 0; ra && i < nargs; i++) {
    for (int b = 0; b < nb; b++) {
      if (ra[i].dev[b]) coda_free(ctx[b], ra[i].dev[b]);
      free(ra[i].result[b]);
    }
    free(ra[i].host);
  }
  free(ra);
  for (int b = 0; b < nb; b++) {
    if (dA[b]) coda_free(ctx[b], dA[b]);
    if (dB[b]) coda_free(ctx[b], dB[b]);
    coda_args_destroy(args[b]);
    coda_program_destroy(prog[b]);
    coda_context_destroy(ctx[b]);
  }
  free(hA);
  free(hB);
  free(text);
  return rc;
}
