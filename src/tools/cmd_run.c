/* coda run: runs an epilogue program fused into a GEMM on random inputs (or
 * inputs read from .npy files), on the CPU backend, on the CPU backend in
 * fp64 exact mode (the program against itself: the reference) and (with
 * --gpu) on the CUDA backend; times the CPU and GPU runs, judges every
 * output, partial and finished vector of the CPU run against the fp64 one
 * and compares the GPU with the CPU; optionally writes them all to .npy
 * files. This is how a new program is tried without writing any C or CUDA.
 * The operands and arguments are made in run_operands.c. */
#include "run_cmd.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}


/* The numeric options (tool_util.h): ranges and meanings in one table. */
static const coda_tool_num run_nums[] = {
    {"--m", 1, 1, 1 << 20, 0, 0, "GEMM rows (A is M x K)"},
    {"--n", 1, 1, 1 << 20, 0, 0, "GEMM columns (B is N x K)"},
    {"--k", 1, 1, 1 << 20, 0, 0, "GEMM depth"},
    {"--reps", 1, 1, 1000, 0, 0, "timed repetitions (the median is reported)"},
    {"--seed", 1, 0, 4611686018427387904.0, 0, 0, "random inputs' seed"},
    {"--max-memory", 0, 0, 1 << 20, 1, 0, "GiB the run's buffers may need in all"},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static int parse_i64(const char *flag, const char *s, int64_t *out) {
  long long x;
  if (coda_tool_num_parse_ll("run", coda_tool_num_find(run_nums, flag), s, &x)) return -1;
  *out = x;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: coda run [OPTIONS] FILE | --builtin NAME\n"
          "Runs the epilogue program fused into acc = A * B^T (A M x K, B N x K, bf16;\n"
          "the GEMM runs, and is timed, even for a program that does not read acc)\n"
          "on random inputs (never zero) or inputs from .npy files: on the CPU backend,\n"
          "on the CPU backend in fp64 exact mode (the reference) and, with --gpu, on the\n"
          "CUDA backend; prints times, the error of every output, partial and finished\n"
          "vector against the fp64 run, and the largest GPU - CPU difference.\n"
          "Options:\n"
          "  --m M --n N --k K   GEMM shape (default 512 512 256)\n"
          "  --gpu               also run on the GPU and compare\n"
          "  --reps R            timed repetitions, median reported (default 5)\n"
          "  --seed S            random seed (default 1)\n"
          "  --input NAME=FILE   read input NAME from a .npy file (f32, f64, i32, f16, bf16\n"
          "                      as <u2 bit patterns; converted to the declared dtype, and\n"
          "                      the fp64 reference reads the converted values).\n"
          "                      NAME acc: the accumulator (M x N; A = acc rounded to bf16,\n"
          "                      B = identity, K = N); A, B: the GEMM operands (M x K, N x K)\n"
          "  --range NAME=LO:HI  random input NAME uniform in [LO, HI] instead of +-[0.1, 1)\n"
          "  --param NAME=V,...  the program's parameter NAME (`param NAME`) = V instead of\n"
          "                      its default; a parameter without a default needs one\n"
          "  --out-dir DIR       write every input, output, partial and finished vector as\n"
          "                      DIR/NAME.npy (the CPU run), DIR/NAME.f64.npy (the fp64 run),\n"
          "                      DIR/NAME.gpu.npy (--gpu), and the operands as A.npy, B.npy;\n"
          "                      DIR must exist (it is not created)\n"
          "  --strict            values outside the fp64 rule make the exit status 1\n"
          "  --max-memory GIB    refuse a run whose buffers (operands, inputs, outputs,\n"
          "                      partials, finished vectors on every backend, the fp64\n"
          "                      reference and the downloaded results) would need more\n"
          "                      than GIB GiB in all, host and GPU (default 16)\n"
          "The fp64 rule, per value: |cpu - fp64| <= 2 u |fp64| + 1e-5 max|fp64| with u the\n"
          "unit rounding of its dtype (bf16 2^-8, f16 2^-11, f32 and partials 2^-24).\n"
          "Values outside it are counted (the program loses precision in fp32 on these\n"
          "inputs, or the inputs lie outside its domain: see --range). A non-finite value\n"
          "(other than -inf in a max or lse partial) makes the exit status 1.\n"
          "A rowsum (rowmax, rowlse) input gets ceil(N / tile_n) partials per row, the\n"
          "shape such a reduction of this GEMM writes (tile_n of the GPU's tiling, 128);\n"
          "rowsum partials and scalar inputs are positive.\n"
          "A program that reads a finished statistic or has a total runs as its passes\n"
          "(coda check lists them); the times are those of all of them.\n");
  coda_tool_num_help(f, run_nums);
}

static int parse_name_value(const char *flag, const char *v, run_opt *o, int is_range) {
  static char bufs[MAX_RUN_OPTS][256];
  static int nbuf = 0;
  if (!v) { fprintf(stderr, "coda run: %s needs NAME=%s\n", flag, is_range ? "LO:HI" : "FILE"); return -1; }
  if (nbuf >= MAX_RUN_OPTS || strlen(v) >= sizeof bufs[0]) {
    fprintf(stderr, "coda run: %s: too many or too long\n", flag);
    return -1;
  }
  char *b = bufs[nbuf++];
  strcpy(b, v);
  char *eq = strchr(b, '=');
  if (!eq || eq == b || !eq[1]) {
    fprintf(stderr, "coda run: %s needs NAME=%s, got '%s'\n", flag, is_range ? "LO:HI" : "FILE", v);
    return -1;
  }
  *eq = '\0';
  o->name = b;
  o->file = eq + 1;
  if (is_range) {
    char *colon = strchr(eq + 1, ':'), *end1, *end2;
    if (!colon) { fprintf(stderr, "coda run: %s %s: expected LO:HI\n", flag, b); return -1; }
    *colon = '\0';
    o->lo = strtod(eq + 1, &end1);
    o->hi = strtod(colon + 1, &end2);
    if (*end1 || *end2 || eq[1] == '\0' || colon[1] == '\0' || !isfinite(o->lo) || !isfinite(o->hi) ||
        !(o->lo < o->hi)) {
      fprintf(stderr, "coda run: %s %s: expected numbers LO < HI\n", flag, b);
      return -1;
    }
  }
  return 0;
}

/* unit rounding of a stored dtype */
static double unit_round(coda_dtype t) {
  switch (t) {
  case CODA_BF16: return 0x1p-8;
  case CODA_F16: return 0x1p-11;
  case CODA_F32: return 0x1p-24;
  default: return 0;
  }
}

/* The flags into cr. */
static int parse_args(run_cmd *cr, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!strcmp(a, "--m")) { rc = parse_i64(a, v, &cr->M); cr->m_set = 1; i++; }
    else if (!strcmp(a, "--n")) { rc = parse_i64(a, v, &cr->N); cr->n_set = 1; i++; }
    else if (!strcmp(a, "--k")) { rc = parse_i64(a, v, &cr->K); cr->k_set = 1; i++; }
    else if (!strcmp(a, "--reps")) { rc = parse_i64(a, v, &cr->reps); i++; }
    else if (!strcmp(a, "--seed")) { rc = parse_i64(a, v, &cr->seed); i++; }
    else if (!strcmp(a, "--gpu")) cr->gpu = 1;
    else if (!strcmp(a, "--strict")) cr->strict = 1;
    else if (!strcmp(a, "--max-memory")) {
      if (coda_tool_num_parse("run", coda_tool_num_find(run_nums, a), v, &cr->max_gib)) return 2;
      i++;
    }
    else if (!strcmp(a, "--input") || !strcmp(a, "--range")) {
      int is_range = a[2] == 'r';
      if ((is_range ? cr->nranges : cr->ninputs) >= MAX_RUN_OPTS) { fprintf(stderr, "coda run: too many %s\n", a); return 2; }
      rc = parse_name_value(a, v, is_range ? &cr->ranges[cr->nranges++] : &cr->inputs[cr->ninputs++], is_range);
      i++;
    } else if (!strcmp(a, "--param")) {
      rc = coda_tool_params_parse("run", v, &cr->params);
      i++;
    } else if (!strcmp(a, "--out-dir")) {
      if (!v) { fprintf(stderr, "coda run: --out-dir needs a directory\n"); return 2; }
      cr->out_dir = v;
      i++;
    } else if (!strcmp(a, "--builtin")) {
      if (!v) { fprintf(stderr, "coda run: --builtin needs a name\n"); return 2; }
      cr->builtin = v;
      i++;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "coda run: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    } else cr->file = a;
    if (rc) return 2;
  }
  if (!cr->file == !cr->builtin) { usage(stderr); return 2; }

  /* --input acc / A / B fix the GEMM shape */
  for (int i = 0; i < cr->ninputs; i++) {
    if (!strcmp(cr->inputs[i].name, "acc")) cr->file_acc = cr->inputs[i].file;
    else if (!strcmp(cr->inputs[i].name, "A")) cr->file_A = cr->inputs[i].file;
    else if (!strcmp(cr->inputs[i].name, "B")) cr->file_B = cr->inputs[i].file;
  }
  if (cr->file_acc && (cr->file_A || cr->file_B)) {
    fprintf(stderr, "coda run: --input acc replaces A and B; give one or the other\n");
    return 2;
  }
  return GO_ON;
}

/* A context, the program and its argument set per run. */
static int make_runs(run_cmd *cr) {
  for (int b = 0; b < 3; b++) {
    if (b == 1 && !cr->gpu) continue;
    coda_context_options o = coda_context_default_options();
    o.backend = b == 1 ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
    if (b == 2) o.precision = CODA_PRECISION_F64;
    coda_status s =
        b == 0 ? CODA_OK : coda_tool_context(&o, &cr->ctx[b], "run", b == 1 ? "CUDA" : "CPU fp64");
    if (s != CODA_OK) {
      return 1;
    }
    s = cr->builtin ? coda_program_builtin(cr->ctx[b], cr->builtin, &cr->prog[b])
                : coda_program_parse(cr->ctx[b], cr->text, &cr->prog[b]);
    if (s == CODA_OK) s = coda_tool_params_bind(cr->ctx[b], &cr->prog[b], &cr->params, 0);
    if (s != CODA_OK) {
      fprintf(stderr, "coda run: %s: %s\n", cr->builtin ? cr->builtin : cr->file, coda_last_error(cr->ctx[b]));
      return 1;
    }
    if (b == 2) { /* the program retyped to f64: the reference */
      coda_program e = NULL;
      if (coda_program_exact(cr->ctx[2], cr->prog[2], &e) != CODA_OK) {
        fprintf(stderr, "coda run: fp64 form: %s\n", coda_last_error(cr->ctx[2]));
        return 1;
      }
      coda_program_destroy(cr->prog[2]);
      cr->prog[2] = e;
    }
    if (coda_args_create(cr->ctx[b], &cr->args[b]) != CODA_OK) return 1;
  }
  return GO_ON;
}

/* The tiling, every argument's shape and kind, and the size guard over
 * them all. */
static int shape_args(run_cmd *cr) {
  /* The tiling the GPU uses fixes the partial shapes; the CPU runs with it. */
  int ref = cr->gpu ? 1 : 0;
  if (coda_preferred_tiling(cr->ctx[ref], cr->prog[ref], cr->M, cr->N, cr->K, &cr->tiling) != CODA_OK) {
    fprintf(stderr, "coda run: %s\n", coda_last_error(cr->ctx[ref]));
    return 1;
  }
  /* every argument's shape first: the size guard sums them all */
  cr->nargs = coda_program_num_args(cr->prog[0]);
  cr->ra = calloc((size_t)(cr->nargs > 0 ? cr->nargs : 1), sizeof *cr->ra);
  if (!cr->ra) return 1;
  {
    double host = cr->opnd * (2 + 8 + 2 + 8), dev = cr->gpu ? cr->opnd * 2 : 0, staging = 0;
    for (int i = 0; i < cr->nargs; i++) {
      run_arg *r = &cr->ra[i];
      coda_status s = coda_program_arg(cr->prog[0], i, &r->info);
      if (s == CODA_OK)
        s = coda_program_arg_shape_ctx(cr->ctx[0], cr->prog[0], r->info.name, cr->M, cr->N, cr->tiling.tile_m,
                                      cr->tiling.tile_n, &r->rows, &r->cols);
      if (s != CODA_OK) {
        fprintf(stderr, "coda run: %s\n", coda_last_error(cr->ctx[0]));
        return 1;
      }
      /* a rowsum input takes any number of partial columns: give it the
       * shape a rowsum reduction of this GEMM writes */
      if (run_kind_is_partials(r->info.kind)) r->cols = cr->N > 0 ? (cr->N + cr->tiling.tile_n - 1) / cr->tiling.tile_n : 1;
      r->bytes = (size_t)(r->rows * r->cols) * coda_dtype_size(r->info.dtype);
      /* the fp64 run's dtype, as the runs below choose it */
      coda_arg_info ei;
      coda_dtype t64 = coda_program_arg(cr->prog[2], i, &ei) == CODA_OK ? ei.dtype : r->info.dtype;
      int vector_kind = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                        r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                        run_kind_is_partials(r->info.kind);
      /* finished vectors are listed after the partials with a vector kind */
      for (int j = 0; j < i; j++)
        if (cr->ra[j].info.kind == CODA_ARG_PARTIAL) r->is_finish = vector_kind;
      if (r->is_finish || r->info.kind == CODA_ARG_PARTIAL) t64 = CODA_F64;
      const double n = (double)r->rows * (double)r->cols, b16 = (double)r->bytes;
      const double b64 = n * (double)coda_dtype_size(t64);
      /* host copy, the CPU run's buffer, the fp64 run's, one downloaded
       * result (as double) per run; the GPU run's buffer */
      host += b16 + b16 + b64 + n * 8 * (cr->gpu ? 3 : 2);
      if (cr->gpu) dev += b16;
      if (b64 > staging) staging = b64;
      if (b16 > staging) staging = b16;
    }
    if (run_too_large(host + staging, dev, cr->max_gib,
                      "this run (the operands; inputs, outputs, partials and finished vectors on "
                      "every backend, the fp64 reference included; the downloaded results)")) {
      return 2;
    }
  }
  return GO_ON;
}

/* Run b: the operands and arguments on its backend, the timed
 * repetitions (rep 0 warms up), the finishers, the results downloaded
 * (and written with --out-dir). */
static int run_backend(run_cmd *cr, int b) {
  int exact = b == 2;
  size_t ea = exact ? 8 : 2;
  coda_dtype opt = exact ? CODA_F64 : CODA_BF16;
  if (coda_malloc(cr->ctx[b], (size_t)(cr->M * cr->K) * ea, &cr->dA[b]) || coda_malloc(cr->ctx[b], (size_t)(cr->N * cr->K) * ea, &cr->dB[b]) ||
      coda_memcpy_h2d(cr->ctx[b], cr->dA[b], exact ? (void *)cr->hA64 : (void *)cr->hA, (size_t)(cr->M * cr->K) * ea) ||
      coda_memcpy_h2d(cr->ctx[b], cr->dB[b], exact ? (void *)cr->hB64 : (void *)cr->hB, (size_t)(cr->N * cr->K) * ea)) {
    fprintf(stderr, "coda run: cannot allocate the operands: %s\n", coda_last_error(cr->ctx[b]));
    return 1;
  }
  /* exact: every floating argument as f64 (x2 tiles stay 16-bit) */
  coda_arg_info ei;
  for (int i = 0; i < cr->nargs; i++) {
    run_arg *r = &cr->ra[i];
    coda_dtype t = r->info.dtype;
    if (exact && coda_program_arg(cr->prog[2], i, &ei) == CODA_OK) t = ei.dtype;
    if (exact && (r->is_finish || r->info.kind == CODA_ARG_PARTIAL)) t = CODA_F64;
    size_t bytes = (size_t)(r->rows * r->cols) * coda_dtype_size(t);
    if (coda_malloc(cr->ctx[b], bytes ? bytes : 1, &r->dev[b]) != CODA_OK) return 1;
    if (bytes) {
      void *tmp = malloc(bytes);
      if (!tmp) return 1;
      coda_tensor src = coda_tensor_2d(r->host, r->info.dtype, r->rows, r->cols);
      coda_tensor dst = coda_tensor_2d(tmp, t, r->rows, r->cols);
      for (int64_t e = 0; e < r->rows * r->cols; e++)
        coda_tensor_set(&dst, e / r->cols, e % r->cols, coda_tensor_get(&src, e / r->cols, e % r->cols));
      coda_memcpy_h2d(cr->ctx[b], r->dev[b], tmp, bytes);
      free(tmp);
    }
    coda_tensor t2 = coda_tensor_2d(r->dev[b], t, r->rows, r->cols);
    if (coda_args_set(cr->args[b], r->info.name, &t2) != CODA_OK) {
      fprintf(stderr, "coda run: %s\n", coda_last_error(cr->ctx[b]));
      return 1;
    }
  }
  coda_tensor A = coda_tensor_2d(cr->dA[b], opt, cr->M, cr->K), B = coda_tensor_2d(cr->dB[b], opt, cr->N, cr->K);
  int nrep = exact ? 0 : (int)cr->reps;
  double *times = calloc((size_t)nrep + 1, sizeof *times);
  if (!times) return 1;
  for (int rep = 0; rep <= nrep; rep++) { /* rep 0 warms up (loads / compiles kernels) */
    /* inputs and accumulated outputs start from their initial values */
    for (int i = 0; i < cr->nargs && rep > 0; i++) {
      run_arg *r = &cr->ra[i];
      if (r->info.kind == CODA_ARG_OUTPUT && r->info.accumulate && r->bytes)
        coda_memcpy_h2d(cr->ctx[b], r->dev[b], r->host, r->bytes);
    }
    coda_synchronize(cr->ctx[b]);
    double t0 = now_s();
    coda_status s = coda_gemm_epilogue(cr->ctx[b], cr->prog[b], CODA_N, &A, CODA_T, &B, cr->args[b], cr->tiling);
    if (s == CODA_OK) s = coda_synchronize(cr->ctx[b]);
    times[rep] = now_s() - t0;
    if (s != CODA_OK) {
      fprintf(stderr, "coda run: %s: %s\n", b == 1 ? "CUDA backend" : exact ? "CPU fp64" : "CPU backend",
              coda_last_error(cr->ctx[b]));
      free(times);
      return 1;
    }
  }
  if (nrep) {
    qsort(times + 1, (size_t)nrep, sizeof *times, cmp_double);
    cr->med[b] = times[1 + nrep / 2];
  }
  free(times);
  /* finishers turn the partials into vectors */
  for (int i = 0; i < cr->nargs; i++)
    if (cr->ra[i].is_finish &&
        coda_finish(cr->ctx[b], cr->prog[b], cr->ra[i].info.name, cr->args[b], cr->M, cr->N, cr->tiling) != CODA_OK) {
      fprintf(stderr, "coda run: finish %s: %s\n", cr->ra[i].info.name, coda_last_error(cr->ctx[b]));
      return 1;
    }
  for (int i = 0; i < cr->nargs; i++) {
    run_arg *r = &cr->ra[i];
    coda_dtype t = r->info.dtype;
    if (exact && coda_program_arg(cr->prog[2], i, &ei) == CODA_OK) t = ei.dtype;
    if (exact && (r->is_finish || r->info.kind == CODA_ARG_PARTIAL)) t = CODA_F64;
    size_t n = (size_t)(r->rows * r->cols), bytes = n * coda_dtype_size(t);
    void *tmp = malloc(bytes ? bytes : 1);
    r->result[b] = malloc((n ? n : 1) * sizeof(double));
    if (!tmp || !r->result[b]) { free(tmp); return 1; }
    coda_memcpy_d2h(cr->ctx[b], tmp, r->dev[b], bytes);
    for (size_t j = 0; j < n; j++) r->result[b][j] = run_get(tmp, t, j);
    if (cr->out_dir && (b != 2 || r->info.kind == CODA_ARG_OUTPUT || r->info.kind == CODA_ARG_PARTIAL ||
                    r->is_finish)) {
      int is_in = !r->is_finish && r->info.kind != CODA_ARG_OUTPUT && r->info.kind != CODA_ARG_PARTIAL;
      if ((b == 0 || !is_in) &&
          run_write_npy(cr->ctx[0], cr->out_dir, r->info.name, b == 0 ? "" : b == 1 ? ".gpu" : ".f64",
                    coda_tensor_2d(is_in && b == 0 ? r->host : tmp, is_in && b == 0 ? r->info.dtype : t,
                                   r->rows, r->cols))) {
        free(tmp);
        return 1;
      }
    }
    free(tmp);
  }
  return GO_ON;
}

/* The timings and each output against the fp64 run; the exit status. */
static int report(const run_cmd *cr) {
  double flops = 2.0 * (double)cr->M * cr->N * cr->K;
  printf("program %s, GEMM %lld x %lld x %lld (bf16), tiling %d x %d\n", cr->builtin ? cr->builtin : cr->file,
         (long long)cr->M, (long long)cr->N, (long long)cr->K, cr->tiling.tile_m, cr->tiling.tile_n);
  printf("  CPU: %.3f ms (%.1f GFLOP/s)\n", cr->med[0] * 1e3, flops / cr->med[0] * 1e-9);
  if (cr->gpu) printf("  GPU: %.3f ms (%.1f TFLOP/s, host-timed incl. launch)\n", cr->med[1] * 1e3, flops / cr->med[1] * 1e-12);
  printf("  vs fp64: |cpu - fp64| <= 2 u |fp64| + 1e-5 max|fp64| per value; rel = max|cpu - fp64| / "
         "max|fp64|, worst = largest |cpu - fp64| / |fp64|\n");
  int rc = 0;
  int bad_values = 0, bad_rule = 0;
  for (int i = 0; i < cr->nargs; i++) {
    run_arg *r = &cr->ra[i];
    int is_input = !r->is_finish && r->info.kind != CODA_ARG_OUTPUT && r->info.kind != CODA_ARG_PARTIAL;
    if (is_input) continue;
    size_t n = (size_t)(r->rows * r->cols);
    double maxref = 0, maxcpu = 0, maxdiff = 0, maxerr = 0, worst = 0;
    int nonfinite = 0, outside = 0;
    double u = r->is_finish || r->info.kind == CODA_ARG_PARTIAL ? 0x1p-24 : unit_round(r->info.dtype);
    for (size_t j = 0; j < n; j++) {
      double e = r->result[2][j];
      if (isfinite(e) && fabs(e) > maxref) maxref = fabs(e);
    }
    for (size_t j = 0; j < n; j++) {
      double c = r->result[0][j], e = r->result[2][j];
      if (!isfinite(c) && !(isinf(c) && c < 0)) nonfinite++;
      if (isfinite(c) && fabs(c) > maxcpu) maxcpu = fabs(c);
      double d = (isinf(c) && isinf(e) && (c > 0) == (e > 0)) ? 0 : fabs(c - e);
      if (!(d <= maxerr)) maxerr = d;
      if (!(d <= 2 * u * fabs(e) + 1e-5 * maxref)) outside++;
      if (fabs(e) > 1e-30 && d / fabs(e) > worst) worst = d / fabs(e);
      if (cr->gpu) {
        double g = r->result[1][j];
        double dg = (isinf(c) && isinf(g) && (c > 0) == (g > 0)) ? 0 : fabs(g - c);
        if (!(dg <= maxdiff)) maxdiff = dg; /* NaN propagates */
      }
    }
    printf("  %-10s %-7s %lld x %lld  max|cpu| %.4g  max|cpu-fp64| %.3g (rel %.3g, worst %.3g)%s",
           r->info.name, r->is_finish ? "finish" : r->info.kind == CODA_ARG_PARTIAL ? "partial" : "output",
           (long long)r->rows, (long long)r->cols, maxcpu, maxerr, maxref > 0 ? maxerr / maxref : maxerr,
           worst, outside ? "" : " ok");
    if (cr->gpu) printf("  max|gpu-cpu| %.3g (rel %.3g)", maxdiff, maxcpu > 0 ? maxdiff / maxcpu : maxdiff);
    if (nonfinite) printf("  (%d non-finite on the CPU)", nonfinite);
    if (outside) printf("  (%d outside the rule)", outside);
    printf("\n");
    bad_values += nonfinite;
    bad_rule += outside;
  }
  if (bad_values || (bad_rule && cr->strict)) {
    fprintf(stderr, "coda run: %s%s%s\n", bad_values ? "non-finite values" : "",
            bad_values && bad_rule ? " and " : "", bad_rule ? "values outside the fp64 rule" : "");
    rc = 1;
  } else if (bad_rule) {
    printf("  %d values outside the fp64 rule (fp32 precision of the program on these inputs; "
           "--strict makes this an error)\n", bad_rule);
  }
  return rc;
}

static void free_run(run_cmd *cr) {
  for (int i = 0; cr->ra && i < cr->nargs; i++) {
    for (int b = 0; b < 3; b++) {
      if (cr->ra[i].dev[b]) coda_free(cr->ctx[b], cr->ra[i].dev[b]);
      free(cr->ra[i].result[b]);
    }
    free(cr->ra[i].host);
  }
  free(cr->ra);
  for (int b = 0; b < 3; b++) {
    if (cr->dA[b]) coda_free(cr->ctx[b], cr->dA[b]);
    if (cr->dB[b]) coda_free(cr->ctx[b], cr->dB[b]);
    coda_args_destroy(cr->args[b]);
    coda_program_destroy(cr->prog[b]);
  }
  for (int b = 2; b >= 0; b--) coda_context_destroy(cr->ctx[b]);
  free(cr->hA);
  free(cr->hB);
  free(cr->hA64);
  free(cr->hB64);
  free(cr->text);
}

int coda_cmd_run(int argc, char **argv) {
  run_cmd run, *cr = &run;
  memset(cr, 0, sizeof *cr);
  cr->M = 512, cr->N = 512, cr->K = 256, cr->reps = 5, cr->seed = 1;
  cr->max_gib = 16;
  int rc = parse_args(cr, argc, argv);
  if (rc != GO_ON) return rc;
  {
    coda_context_options o = coda_context_default_options();
    if (coda_tool_context(&o, &cr->ctx[0], "run", "CPU") != CODA_OK) return 1;
  }
  rc = run_read_operands(cr);
  if (rc == GO_ON) rc = run_check_operands(cr);
  if (rc == GO_ON) rc = make_runs(cr);
  if (rc == GO_ON) rc = shape_args(cr);
  if (rc == GO_ON) rc = run_fill_operands(cr);
  if (rc == GO_ON) rc = run_fill_args(cr);
  if (rc == GO_ON) rc = run_write_operands(cr);
  for (int b = 0; b < 3 && rc == GO_ON; b++)
    if (cr->ctx[b]) rc = run_backend(cr, b);
  if (rc == GO_ON) rc = report(cr);
  free_run(cr);
  return rc;
}
