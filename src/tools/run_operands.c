/* The operands and arguments of `coda run` (cmd_run.c runs them): the GEMM
 * operands read from .npy files or drawn at random, every argument's
 * initial contents (random, --range, --input), and --out-dir's copies. */
#include "run_cmd.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

double run_get(const void *p, coda_dtype t, size_t i) {
  switch (t) {
  case CODA_BF16: return from_bf16(((const uint16_t *)p)[i]);
  case CODA_F16: { _Float16 h; memcpy(&h, (const uint16_t *)p + i, 2); return (double)h; }
  case CODA_F32: return ((const float *)p)[i];
  case CODA_F64: return ((const double *)p)[i];
  case CODA_I32: return ((const int32_t *)p)[i];
  }
  return 0;
}

/* Reads a .npy file into r->host (dtype of the argument, shape rows x cols;
 * a rowsum input takes the file's column count). */
static int load_input(coda_context ctx, const char *file, const char *name, coda_dtype dtype,
                      int any_cols, int64_t rows, int64_t *cols, void **host, size_t *bytes) {
  coda_dtype ft;
  int64_t fr, fc;
  int nd;
  void *data = NULL;
  if (coda_npy_read(ctx, file, &ft, &fr, &fc, &nd, &data) != CODA_OK) {
    fprintf(stderr, "coda run: --input %s: %s\n", name, coda_last_error(ctx));
    return -1;
  }
  if (nd == 1 && *cols == 1 && rows != 1) { fr = fc; fc = 1; } /* (M,) for a row vector */
  if (fr != rows || (any_cols ? fc < 1 : fc != *cols)) {
    fprintf(stderr, "coda run: --input %s: %s is %lld x %lld, expected %lld x %s%lld\n", name, file,
            (long long)fr, (long long)fc, (long long)rows, any_cols ? "T, T >= 1, e.g. " : "",
            (long long)*cols);
    free(data);
    return -1;
  }
  if ((ft == CODA_I32) != (dtype == CODA_I32)) {
    fprintf(stderr, "coda run: --input %s: %s holds %s, the argument is %s\n", name, file,
            coda_dtype_name(ft), coda_dtype_name(dtype));
    free(data);
    return -1;
  }
  *cols = fc;
  free(*host);
  *bytes = (size_t)(fr * fc) * coda_dtype_size(dtype);
  *host = malloc(*bytes ? *bytes : 1);
  if (!*host) { free(data); return -1; }
  coda_tensor src = coda_tensor_2d(data, ft, fr, fc), dst = coda_tensor_2d(*host, dtype, fr, fc);
  for (int64_t i = 0; i < fr; i++)
    for (int64_t j = 0; j < fc; j++) coda_tensor_set(&dst, i, j, coda_tensor_get(&src, i, j));
  free(data);
  return 0;
}

int run_write_npy(coda_context ctx, const char *dir, const char *name, const char *suffix,
                     coda_tensor t) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%s.npy", dir, name, suffix);
  if (coda_npy_write(ctx, path, &t) != CODA_OK) {
    fprintf(stderr, "coda run: %s\n", coda_last_error(ctx));
    return -1;
  }
  return 0;
}

/* The size guard: every buffer a run allocates, summed (host and GPU),
 * against --max-memory; one buffer within bounds says nothing of forty. */
int run_too_large(double host_bytes, double gpu_bytes, double max_gib, const char *what) {
  const double gib = 1024.0 * 1024.0 * 1024.0, total = host_bytes + gpu_bytes;
  if (total <= max_gib * gib) return 0;
  fprintf(stderr,
          "coda run: %s would need %.3g GiB in all (%.3g GiB on the host, %.3g GiB on the GPU), "
          "more than the limit of %.3g GiB (--max-memory GIB raises it)\n",
          what, total / gib, host_bytes / gib, gpu_bytes / gib, max_gib);
  return 1;
}

/* --input acc / A / B: the operands from .npy files (bf16 on the host),
 * the shape from theirs. */
int run_read_operands(run_cmd *cr) {
  /* operands from files */
  if (cr->file_acc || cr->file_A || cr->file_B) {
    for (int w = 0; w < 3; w++) {
      const char *fn = w == 0 ? cr->file_acc : w == 1 ? cr->file_A : cr->file_B;
      if (!fn) continue;
      coda_dtype ft;
      int64_t fr, fc;
      void *data = NULL;
      if (coda_npy_read(cr->ctx[0], fn, &ft, &fr, &fc, NULL, &data) != CODA_OK || ft == CODA_I32) {
        fprintf(stderr, "coda run: --input %s: %s\n", w == 0 ? "acc" : w == 1 ? "A" : "B",
                data ? "integer operands are not supported" : coda_last_error(cr->ctx[0]));
        free(data);
        return 1;
      }
      if (w == 0 || w == 1) {
        if (cr->m_set && cr->M != fr) { fprintf(stderr, "coda run: %s has %lld rows, --m is %lld\n", fn, (long long)fr, (long long)cr->M); free(data); return 1; }
        cr->M = fr;
      }
      if (w == 0) {
        if (cr->n_set && cr->N != fc) { fprintf(stderr, "coda run: %s has %lld columns, --n is %lld\n", fn, (long long)fc, (long long)cr->N); free(data); return 1; }
        cr->N = fc;
        cr->K = fc;
      } else if (w == 1) {
        if (cr->k_set && cr->K != fc) { fprintf(stderr, "coda run: %s has %lld columns, --k is %lld\n", fn, (long long)fc, (long long)cr->K); free(data); return 1; }
        cr->K = fc;
      } else {
        if (cr->n_set && cr->N != fr) { fprintf(stderr, "coda run: %s has %lld rows, --n is %lld\n", fn, (long long)fr, (long long)cr->N); free(data); return 1; }
        cr->N = fr;
      }
      if (w == 2 && cr->file_A && fc != cr->K) {
        fprintf(stderr, "coda run: --input B: %lld columns, A has K = %lld\n", (long long)fc, (long long)cr->K);
        free(data);
        return 1;
      }
      if (w == 2) cr->K = fc;
      uint16_t **dst = w == 2 ? &cr->hB : &cr->hA;
      *dst = malloc((size_t)(fr * fc) * 2 + 2);
      if (!*dst) { free(data); return 1; }
      coda_tensor src = coda_tensor_2d(data, ft, fr, fc);
      for (int64_t i = 0; i < fr * fc; i++)
        (*dst)[i] = to_bf16((float)coda_tensor_get(&src, i / fc, i % fc));
      free(data);
    }
    if (!cr->hA || (!cr->hB && !cr->file_acc)) {
      fprintf(stderr, "coda run: --input A needs --input B too (or give --input acc)\n");
      return 1;
    }
  }
  return GO_ON;
}

/* The operands' size bounded, the identity B of --input acc, the
 * program's text. */
int run_check_operands(run_cmd *cr) {
  /* the operands alone (bf16 and f64 on the host, one copy per backend),
   * before any context or argument exists */
  cr->opnd = (double)cr->M * cr->K + (double)cr->N * cr->K;
  if (run_too_large(cr->opnd * (2 + 8 + 2 + 8), cr->gpu ? cr->opnd * 2 : 0, cr->max_gib,
                    "the GEMM operands (bf16 and fp64 copies, one per backend)")) {
    return 2;
  }
  if (cr->file_acc) { /* B = identity */
    cr->hB = calloc((size_t)(cr->N * cr->N) + 1, 2);
    if (!cr->hB) {
      fprintf(stderr, "coda run: out of memory for the identity B (%lld x %lld)\n", (long long)cr->N,
              (long long)cr->N);
      return 1;
    }
    for (int64_t i = 0; i < cr->N; i++) cr->hB[i * cr->N + i] = to_bf16(1.0f);
  }
  if (cr->gpu && !coda_cuda_available()) {
    fprintf(stderr, "coda run: --gpu: no usable GPU (or the library was built without CUDA)\n");
    return 1;
  }
  const char *why = NULL;
  if (cr->file && !(cr->text = coda_tool_read_text(cr->file, &why))) {
    fprintf(stderr, "coda run: %s: %s\n", cr->file, why ? why : "cannot read");
    return 1;
  }
  return GO_ON;
}

/* Random operands where no file gave them, and their fp64 copies. */
int run_fill_operands(run_cmd *cr) {
  cr->st = 0x9e3779b97f4a7c15ull ^ (uint64_t)cr->seed;
  if (!cr->st) cr->st = 1;
  if (!cr->hA) {
    cr->hA = malloc((size_t)(cr->M * cr->K) * 2);
    cr->hB = malloc((size_t)(cr->N * cr->K) * 2);
    if (!cr->hA || !cr->hB) return 1;
    fill(cr->hA, CODA_BF16, (size_t)(cr->M * cr->K), &cr->st, 0);
    fill(cr->hB, CODA_BF16, (size_t)(cr->N * cr->K), &cr->st, 0);
    for (size_t i = 0; i < (size_t)(cr->N * cr->K); i++) /* keep |acc| ~ 1 */
      cr->hB[i] = to_bf16(from_bf16(cr->hB[i]) / (float)sqrt((double)cr->K));
  }
  cr->hA64 = malloc((size_t)(cr->M * cr->K) * 8);
  cr->hB64 = malloc((size_t)(cr->N * cr->K) * 8);
  if (!cr->hA64 || !cr->hB64) return 1;
  for (size_t i = 0; i < (size_t)(cr->M * cr->K); i++) cr->hA64[i] = from_bf16(cr->hA[i]);
  for (size_t i = 0; i < (size_t)(cr->N * cr->K); i++) cr->hB64[i] = from_bf16(cr->hB[i]);
  return GO_ON;
}

/* Every argument's initial host contents (random, ranged or from a
 * file); --input and --range must name arguments of the program. */
int run_fill_args(run_cmd *cr) {
  for (int i = 0; i < cr->nargs; i++) {
    run_arg *r = &cr->ra[i];
    r->host = calloc(1, r->bytes ? r->bytes : 1);
    if (!r->host) return 1;
    int is_input = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                   r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                   run_kind_is_partials(r->info.kind);
    if (r->is_finish) is_input = 0; /* set with the shapes above */
    for (int j = 0; j < cr->ninputs; j++)
      if (!strcmp(cr->inputs[j].name, r->info.name)) r->file = cr->inputs[j].file;
    for (int j = 0; j < cr->nranges; j++)
      if (!strcmp(cr->ranges[j].name, r->info.name)) {
        r->ranged = 1;
        r->lo = cr->ranges[j].lo;
        r->hi = cr->ranges[j].hi;
      }
    if ((r->file || r->ranged) && !is_input) {
      fprintf(stderr, "coda run: %s %s: '%s' is not an input of the program\n",
              r->file ? "--input" : "--range", r->info.name, r->info.name);
      return 1;
    }
    if (is_input || (r->info.kind == CODA_ARG_OUTPUT && r->info.accumulate))
      fill(r->host, r->info.dtype, (size_t)(r->rows * r->cols), &cr->st,
           r->info.kind == CODA_ARG_COL ? 1 : cr->N);
    /* rowsum partials and scalars positive, like the sums of squares and
     * the scales (1/N, counts) they stand for in practice */
    if (is_input && (r->info.kind == CODA_ARG_ROWSUM || r->info.kind == CODA_ARG_SCALAR))
      for (size_t e = 0; e < (size_t)(r->rows * r->cols); e++) {
        if (r->info.dtype == CODA_F32) ((float *)r->host)[e] = fabsf(((float *)r->host)[e]);
        else if (r->info.dtype == CODA_F64) ((double *)r->host)[e] = fabs(((double *)r->host)[e]);
      }
    if (r->ranged) {
      coda_tensor t = coda_tensor_2d(r->host, r->info.dtype, r->rows, r->cols);
      for (int64_t e = 0; e < r->rows * r->cols; e++) {
        double u = (double)(rng_next(&cr->st) >> 11) / 9007199254740992.0;
        double v = r->lo + (r->hi - r->lo) * u;
        if (r->info.dtype == CODA_I32) v = floor(v);
        coda_tensor_set(&t, e / r->cols, e % r->cols, v);
      }
    }
    if (r->file && load_input(cr->ctx[0], r->file, r->info.name, r->info.dtype,
                              run_kind_is_partials(r->info.kind), r->rows, &r->cols, &r->host,
                              &r->bytes))
      return 1;
  }
  for (int j = 0; j < cr->ninputs; j++) {
    int known = !strcmp(cr->inputs[j].name, "acc") || !strcmp(cr->inputs[j].name, "A") ||
                !strcmp(cr->inputs[j].name, "B");
    for (int i = 0; i < cr->nargs && !known; i++) known = !strcmp(cr->ra[i].info.name, cr->inputs[j].name);
    if (!known) {
      fprintf(stderr, "coda run: --input %s: the program has no argument of that name\n", cr->inputs[j].name);
      return 1;
    }
  }
  for (int j = 0; j < cr->nranges; j++) {
    int known = 0;
    for (int i = 0; i < cr->nargs && !known; i++) known = !strcmp(cr->ra[i].info.name, cr->ranges[j].name);
    if (!known) {
      fprintf(stderr, "coda run: --range %s: the program has no input of that name\n", cr->ranges[j].name);
      return 1;
    }
  }
  return GO_ON;
}

/* --out-dir: the operands, to run again with --input A=... --input B=... */
int run_write_operands(run_cmd *cr) {
  if (cr->out_dir) {
    int clash = 0;
    for (int i = 0; i < cr->nargs; i++) clash |= !strcmp(cr->ra[i].info.name, "A") || !strcmp(cr->ra[i].info.name, "B");
    if (clash) fprintf(stderr, "coda run: the program has an argument named A or B: operands not written\n");
    else if (run_write_npy(cr->ctx[0], cr->out_dir, "A", "", coda_tensor_2d(cr->hA, CODA_BF16, cr->M, cr->K)) ||
             run_write_npy(cr->ctx[0], cr->out_dir, "B", "", coda_tensor_2d(cr->hB, CODA_BF16, cr->N, cr->K)))
      return 1;
  }
  return GO_ON;
}
