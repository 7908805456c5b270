/* coda run: runs an epilogue program fused into a GEMM on random inputs (or
 * inputs read from .npy files), on the CPU backend, on the CPU backend in
 * fp64 exact mode (the program against itself: the reference) and (with
 * --gpu) on the CUDA backend; times the CPU and GPU runs, judges every
 * output, partial and finished vector of the CPU run against the fp64 one
 * and compares the GPU with the CPU; optionally writes them all to .npy
 * files. This is how a new program is tried without writing any C or CUDA. */
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
  void *dev[3];   /* per run: 0 CPU, 1 CUDA, 2 CPU fp64 */
  double *result[3]; /* downloaded, as double */
  const char *file;  /* --input */
  double lo, hi;     /* --range (lo < hi when given) */
  int ranged;
} run_arg;

/* --input NAME=FILE and --range NAME=LO:HI */
typedef struct { const char *name; const char *file; double lo, hi; } run_opt;
#define MAX_RUN_OPTS 64

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
          "Runs the epilogue program fused into acc = A * B^T (A M x K, B N x K, bf16)\n"
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
          "                      as <u2 bit patterns; converted to the declared dtype).\n"
          "                      NAME acc: the accumulator (M x N; A = acc rounded to bf16,\n"
          "                      B = identity, K = N); A, B: the GEMM operands (M x K, N x K)\n"
          "  --range NAME=LO:HI  random input NAME uniform in [LO, HI] instead of +-[0.1, 1)\n"
          "  --param NAME=V,...  the program's parameter NAME (`param NAME`) = V instead of\n"
          "                      its default; a parameter without a default needs one\n"
          "  --out-dir DIR       write every input, output, partial and finished vector as\n"
          "                      DIR/NAME.npy (the CPU run), DIR/NAME.f64.npy (the fp64 run),\n"
          "                      DIR/NAME.gpu.npy (--gpu), and the operands as A.npy, B.npy\n"
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
          "A rowsum input gets ceil(N / tile_n) partials per row, the shape a rowsum\n"
          "reduction of this GEMM writes (tile_n of the GPU's tiling, 128); its partials\n"
          "and scalar inputs are positive.\n");
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

static int write_npy(coda_context ctx, const char *dir, const char *name, const char *suffix,
                     coda_tensor t) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%s.npy", dir, name, suffix);
  if (coda_npy_write(ctx, path, &t) != CODA_OK) {
    fprintf(stderr, "coda run: %s\n", coda_last_error(ctx));
    return -1;
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

/* The size guard: every buffer a run allocates, summed (host and GPU),
 * against --max-memory; one buffer within bounds says nothing of forty. */
static int run_too_large(double host_bytes, double gpu_bytes, double max_gib, const char *what) {
  const double gib = 1024.0 * 1024.0 * 1024.0, total = host_bytes + gpu_bytes;
  if (total <= max_gib * gib) return 0;
  fprintf(stderr,
          "coda run: %s would need %.3g GiB in all (%.3g GiB on the host, %.3g GiB on the GPU), "
          "more than the limit of %.3g GiB (--max-memory GIB raises it)\n",
          what, total / gib, host_bytes / gib, gpu_bytes / gib, max_gib);
  return 1;
}

int coda_cmd_run(int argc, char **argv) {
  const char *file = NULL, *builtin = NULL, *out_dir = NULL;
  int64_t M = 512, N = 512, K = 256, reps = 5, seed = 1;
  int gpu = 0, m_set = 0, n_set = 0, k_set = 0, strict = 0;
  double max_gib = 16;
  run_opt inputs[MAX_RUN_OPTS], ranges[MAX_RUN_OPTS];
  int ninputs = 0, nranges = 0;
  coda_tool_params params = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!strcmp(a, "--m")) { rc = parse_i64(a, v, &M); m_set = 1; i++; }
    else if (!strcmp(a, "--n")) { rc = parse_i64(a, v, &N); n_set = 1; i++; }
    else if (!strcmp(a, "--k")) { rc = parse_i64(a, v, &K); k_set = 1; i++; }
    else if (!strcmp(a, "--reps")) { rc = parse_i64(a, v, &reps); i++; }
    else if (!strcmp(a, "--seed")) { rc = parse_i64(a, v, &seed); i++; }
    else if (!strcmp(a, "--gpu")) gpu = 1;
    else if (!strcmp(a, "--strict")) strict = 1;
    else if (!strcmp(a, "--max-memory")) {
      if (coda_tool_num_parse("run", coda_tool_num_find(run_nums, a), v, &max_gib)) return 2;
      i++;
    }
    else if (!strcmp(a, "--input") || !strcmp(a, "--range")) {
      int is_range = a[2] == 'r';
      if ((is_range ? nranges : ninputs) >= MAX_RUN_OPTS) { fprintf(stderr, "coda run: too many %s\n", a); return 2; }
      rc = parse_name_value(a, v, is_range ? &ranges[nranges++] : &inputs[ninputs++], is_range);
      i++;
    } else if (!strcmp(a, "--param")) {
      rc = coda_tool_params_parse("run", v, &params);
      i++;
    } else if (!strcmp(a, "--out-dir")) {
      if (!v) { fprintf(stderr, "coda run: --out-dir needs a directory\n"); return 2; }
      out_dir = v;
      i++;
    } else if (!strcmp(a, "--builtin")) {
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

  /* --input acc / A / B fix the GEMM shape */
  const char *file_acc = NULL, *file_A = NULL, *file_B = NULL;
  for (int i = 0; i < ninputs; i++) {
    if (!strcmp(inputs[i].name, "acc")) file_acc = inputs[i].file;
    else if (!strcmp(inputs[i].name, "A")) file_A = inputs[i].file;
    else if (!strcmp(inputs[i].name, "B")) file_B = inputs[i].file;
  }
  if (file_acc && (file_A || file_B)) {
    fprintf(stderr, "coda run: --input acc replaces A and B; give one or the other\n");
    return 2;
  }
  int rc = 1;
  coda_context ctx[3] = {NULL, NULL, NULL};
  coda_program prog[3] = {NULL, NULL, NULL};
  coda_args args[3] = {NULL, NULL, NULL};
  run_arg *ra = NULL;
  int nargs = 0;
  void *dA[3] = {NULL, NULL, NULL}, *dB[3] = {NULL, NULL, NULL};
  uint16_t *hA = NULL, *hB = NULL;
  double *hA64 = NULL, *hB64 = NULL;
  char *text = NULL;
  const char *why = NULL;
  {
    coda_context_options o = coda_context_default_options();
    if (coda_tool_context(&o, &ctx[0], "run", "CPU") != CODA_OK) return 1;
  }
  /* operands from files */
  if (file_acc || file_A || file_B) {
    for (int w = 0; w < 3; w++) {
      const char *fn = w == 0 ? file_acc : w == 1 ? file_A : file_B;
      if (!fn) continue;
      coda_dtype ft;
      int64_t fr, fc;
      void *data = NULL;
      if (coda_npy_read(ctx[0], fn, &ft, &fr, &fc, NULL, &data) != CODA_OK || ft == CODA_I32) {
        fprintf(stderr, "coda run: --input %s: %s\n", w == 0 ? "acc" : w == 1 ? "A" : "B",
                data ? "integer operands are not supported" : coda_last_error(ctx[0]));
        free(data);
        goto out;
      }
      if (w == 0 || w == 1) {
        if (m_set && M != fr) { fprintf(stderr, "coda run: %s has %lld rows, --m is %lld\n", fn, (long long)fr, (long long)M); free(data); goto out; }
        M = fr;
      }
      if (w == 0) {
        if (n_set && N != fc) { fprintf(stderr, "coda run: %s has %lld columns, --n is %lld\n", fn, (long long)fc, (long long)N); free(data); goto out; }
        N = fc;
        K = fc;
      } else if (w == 1) {
        if (k_set && K != fc) { fprintf(stderr, "coda run: %s has %lld columns, --k is %lld\n", fn, (long long)fc, (long long)K); free(data); goto out; }
        K = fc;
      } else {
        if (n_set && N != fr) { fprintf(stderr, "coda run: %s has %lld rows, --n is %lld\n", fn, (long long)fr, (long long)N); free(data); goto out; }
        N = fr;
      }
      if (w == 2 && file_A && fc != K) {
        fprintf(stderr, "coda run: --input B: %lld columns, A has K = %lld\n", (long long)fc, (long long)K);
        free(data);
        goto out;
      }
      if (w == 2) K = fc;
      uint16_t **dst = w == 2 ? &hB : &hA;
      *dst = malloc((size_t)(fr * fc) * 2 + 2);
      if (!*dst) { free(data); goto out; }
      coda_tensor src = coda_tensor_2d(data, ft, fr, fc);
      for (int64_t i = 0; i < fr * fc; i++)
        (*dst)[i] = to_bf16((float)coda_tensor_get(&src, i / fc, i % fc));
      free(data);
    }
    if (!hA || (!hB && !file_acc)) {
      fprintf(stderr, "coda run: --input A needs --input B too (or give --input acc)\n");
      goto out;
    }
  }
  /* the operands alone (bf16 and f64 on the host, one copy per backend),
   * before any context or argument exists */
  const double opnd = (double)M * K + (double)N * K;
  if (run_too_large(opnd * (2 + 8 + 2 + 8), gpu ? opnd * 2 : 0, max_gib,
                    "the GEMM operands (bf16 and fp64 copies, one per backend)")) {
    rc = 2;
    goto out;
  }
  if (file_acc) { /* B = identity */
    hB = calloc((size_t)(N * N) + 1, 2);
    if (!hB) {
      fprintf(stderr, "coda run: out of memory for the identity B (%lld x %lld)\n", (long long)N,
              (long long)N);
      goto out;
    }
    for (int64_t i = 0; i < N; i++) hB[i * N + i] = to_bf16(1.0f);
  }
  if (gpu && !coda_cuda_available()) {
    fprintf(stderr, "coda run: --gpu: no usable GPU (or the library was built without CUDA)\n");
    goto out;
  }
  if (file && !(text = coda_tool_read_text(file, &why))) {
    fprintf(stderr, "coda run: %s: %s\n", file, why ? why : "cannot read");
    goto out;
  }
  for (int b = 0; b < 3; b++) {
    if (b == 1 && !gpu) continue;
    coda_context_options o = coda_context_default_options();
    o.backend = b == 1 ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
    if (b == 2) o.precision = CODA_PRECISION_F64;
    coda_status s =
        b == 0 ? CODA_OK : coda_tool_context(&o, &ctx[b], "run", b == 1 ? "CUDA" : "CPU fp64");
    if (s != CODA_OK) {
      goto out;
    }
    s = builtin ? coda_program_builtin(ctx[b], builtin, &prog[b])
                : coda_program_parse(ctx[b], text, &prog[b]);
    if (s == CODA_OK) s = coda_tool_params_bind(ctx[b], &prog[b], &params, 0);
    if (s != CODA_OK) {
      fprintf(stderr, "coda run: %s: %s\n", builtin ? builtin : file, coda_last_error(ctx[b]));
      goto out;
    }
    if (b == 2) { /* the program retyped to f64: the reference */
      coda_program e = NULL;
      if (coda_program_exact(ctx[2], prog[2], &e) != CODA_OK) {
        fprintf(stderr, "coda run: fp64 form: %s\n", coda_last_error(ctx[2]));
        goto out;
      }
      coda_program_destroy(prog[2]);
      prog[2] = e;
    }
    if (coda_args_create(ctx[b], &args[b]) != CODA_OK) goto out;
  }

  /* The tiling the GPU uses fixes the partial shapes; the CPU runs with it. */
  int ref = gpu ? 1 : 0;
  coda_tiling tiling;
  if (coda_preferred_tiling(ctx[ref], prog[ref], M, N, K, &tiling) != CODA_OK) {
    fprintf(stderr, "coda run: %s\n", coda_last_error(ctx[ref]));
    goto out;
  }
  /* every argument's shape first: the size guard sums them all */
  nargs = coda_program_num_args(prog[0]);
  ra = calloc((size_t)(nargs > 0 ? nargs : 1), sizeof *ra);
  if (!ra) goto out;
  {
    double host = opnd * (2 + 8 + 2 + 8), dev = gpu ? opnd * 2 : 0, staging = 0;
    for (int i = 0; i < nargs; i++) {
      run_arg *r = &ra[i];
      coda_status s = coda_program_arg(prog[0], i, &r->info);
      if (s == CODA_OK)
        s = coda_program_arg_shape_ctx(ctx[0], prog[0], r->info.name, M, N, tiling.tile_m,
                                      tiling.tile_n, &r->rows, &r->cols);
      if (s != CODA_OK) {
        fprintf(stderr, "coda run: %s\n", coda_last_error(ctx[0]));
        goto out;
      }
      /* a rowsum input takes any number of partial columns: give it the
       * shape a rowsum reduction of this GEMM writes */
      if (r->info.kind == CODA_ARG_ROWSUM) r->cols = N > 0 ? (N + tiling.tile_n - 1) / tiling.tile_n : 1;
      r->bytes = (size_t)(r->rows * r->cols) * coda_dtype_size(r->info.dtype);
      /* the fp64 run's dtype, as the runs below choose it */
      coda_arg_info ei;
      coda_dtype t64 = coda_program_arg(prog[2], i, &ei) == CODA_OK ? ei.dtype : r->info.dtype;
      int vector_kind = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                        r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                        r->info.kind == CODA_ARG_ROWSUM;
      /* finished vectors are listed after the partials with a vector kind */
      for (int j = 0; j < i; j++)
        if (ra[j].info.kind == CODA_ARG_PARTIAL) r->is_finish = vector_kind;
      if (r->is_finish || r->info.kind == CODA_ARG_PARTIAL) t64 = CODA_F64;
      const double n = (double)r->rows * (double)r->cols, b16 = (double)r->bytes;
      const double b64 = n * (double)coda_dtype_size(t64);
      /* host copy, the CPU run's buffer, the fp64 run's, one downloaded
       * result (as double) per run; the GPU run's buffer */
      host += b16 + b16 + b64 + n * 8 * (gpu ? 3 : 2);
      if (gpu) dev += b16;
      if (b64 > staging) staging = b64;
      if (b16 > staging) staging = b16;
    }
    if (run_too_large(host + staging, dev, max_gib,
                      "this run (the operands; inputs, outputs, partials and finished vectors on "
                      "every backend, the fp64 reference included; the downloaded results)")) {
      rc = 2;
      goto out;
    }
  }
  uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed;
  if (!st) st = 1;
  if (!hA) {
    hA = malloc((size_t)(M * K) * 2);
    hB = malloc((size_t)(N * K) * 2);
    if (!hA || !hB) goto out;
    fill(hA, CODA_BF16, (size_t)(M * K), &st, 0);
    fill(hB, CODA_BF16, (size_t)(N * K), &st, 0);
    for (size_t i = 0; i < (size_t)(N * K); i++) /* keep |acc| ~ 1 */
      hB[i] = to_bf16(from_bf16(hB[i]) / (float)sqrt((double)K));
  }
  hA64 = malloc((size_t)(M * K) * 8);
  hB64 = malloc((size_t)(N * K) * 8);
  if (!hA64 || !hB64) goto out;
  for (size_t i = 0; i < (size_t)(M * K); i++) hA64[i] = from_bf16(hA[i]);
  for (size_t i = 0; i < (size_t)(N * K); i++) hB64[i] = from_bf16(hB[i]);

  for (int i = 0; i < nargs; i++) {
    run_arg *r = &ra[i];
    r->host = calloc(1, r->bytes ? r->bytes : 1);
    if (!r->host) goto out;
    int is_input = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                   r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                   r->info.kind == CODA_ARG_ROWSUM;
    if (r->is_finish) is_input = 0; /* set with the shapes above */
    for (int j = 0; j < ninputs; j++)
      if (!strcmp(inputs[j].name, r->info.name)) r->file = inputs[j].file;
    for (int j = 0; j < nranges; j++)
      if (!strcmp(ranges[j].name, r->info.name)) {
        r->ranged = 1;
        r->lo = ranges[j].lo;
        r->hi = ranges[j].hi;
      }
    if ((r->file || r->ranged) && !is_input) {
      fprintf(stderr, "coda run: %s %s: '%s' is not an input of the program\n",
              r->file ? "--input" : "--range", r->info.name, r->info.name);
      goto out;
    }
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
    if (r->ranged) {
      coda_tensor t = coda_tensor_2d(r->host, r->info.dtype, r->rows, r->cols);
      for (int64_t e = 0; e < r->rows * r->cols; e++) {
        double u = (double)(rng_next(&st) >> 11) / 9007199254740992.0;
        double v = r->lo + (r->hi - r->lo) * u;
        if (r->info.dtype == CODA_I32) v = floor(v);
        coda_tensor_set(&t, e / r->cols, e % r->cols, v);
      }
    }
    if (r->file && load_input(ctx[0], r->file, r->info.name, r->info.dtype,
                              r->info.kind == CODA_ARG_ROWSUM, r->rows, &r->cols, &r->host,
                              &r->bytes))
      goto out;
  }
  for (int j = 0; j < ninputs; j++) {
    int known = !strcmp(inputs[j].name, "acc") || !strcmp(inputs[j].name, "A") ||
                !strcmp(inputs[j].name, "B");
    for (int i = 0; i < nargs && !known; i++) known = !strcmp(ra[i].info.name, inputs[j].name);
    if (!known) {
      fprintf(stderr, "coda run: --input %s: the program has no argument of that name\n", inputs[j].name);
      goto out;
    }
  }
  for (int j = 0; j < nranges; j++) {
    int known = 0;
    for (int i = 0; i < nargs && !known; i++) known = !strcmp(ra[i].info.name, ranges[j].name);
    if (!known) {
      fprintf(stderr, "coda run: --range %s: the program has no input of that name\n", ranges[j].name);
      goto out;
    }
  }

  if (out_dir) { /* the operands, to run again with --input A=... --input B=... */
    int clash = 0;
    for (int i = 0; i < nargs; i++) clash |= !strcmp(ra[i].info.name, "A") || !strcmp(ra[i].info.name, "B");
    if (clash) fprintf(stderr, "coda run: the program has an argument named A or B: operands not written\n");
    else if (write_npy(ctx[0], out_dir, "A", "", coda_tensor_2d(hA, CODA_BF16, M, K)) ||
             write_npy(ctx[0], out_dir, "B", "", coda_tensor_2d(hB, CODA_BF16, N, K)))
      goto out;
  }
  double med[3] = {0, 0, 0};
  for (int b = 0; b < 3; b++) {
    if (!ctx[b]) continue;
    int exact = b == 2;
    size_t ea = exact ? 8 : 2;
    coda_dtype opt = exact ? CODA_F64 : CODA_BF16;
    if (coda_malloc(ctx[b], (size_t)(M * K) * ea, &dA[b]) || coda_malloc(ctx[b], (size_t)(N * K) * ea, &dB[b]) ||
        coda_memcpy_h2d(ctx[b], dA[b], exact ? (void *)hA64 : (void *)hA, (size_t)(M * K) * ea) ||
        coda_memcpy_h2d(ctx[b], dB[b], exact ? (void *)hB64 : (void *)hB, (size_t)(N * K) * ea)) {
      fprintf(stderr, "coda run: cannot allocate the operands: %s\n", coda_last_error(ctx[b]));
      goto out;
    }
    /* exact: every floating argument as f64 (x2 tiles stay 16-bit) */
    coda_arg_info ei;
    for (int i = 0; i < nargs; i++) {
      run_arg *r = &ra[i];
      coda_dtype t = r->info.dtype;
      if (exact && coda_program_arg(prog[2], i, &ei) == CODA_OK) t = ei.dtype;
      if (exact && (r->is_finish || r->info.kind == CODA_ARG_PARTIAL)) t = CODA_F64;
      size_t bytes = (size_t)(r->rows * r->cols) * coda_dtype_size(t);
      if (coda_malloc(ctx[b], bytes ? bytes : 1, &r->dev[b]) != CODA_OK) goto out;
      if (bytes) {
        void *tmp = malloc(bytes);
        if (!tmp) goto out;
        coda_tensor src = coda_tensor_2d(r->host, r->info.dtype, r->rows, r->cols);
        coda_tensor dst = coda_tensor_2d(tmp, t, r->rows, r->cols);
        for (int64_t e = 0; e < r->rows * r->cols; e++)
          coda_tensor_set(&dst, e / r->cols, e % r->cols, coda_tensor_get(&src, e / r->cols, e % r->cols));
        coda_memcpy_h2d(ctx[b], r->dev[b], tmp, bytes);
        free(tmp);
      }
      coda_tensor t2 = coda_tensor_2d(r->dev[b], t, r->rows, r->cols);
      if (coda_args_set(args[b], r->info.name, &t2) != CODA_OK) {
        fprintf(stderr, "coda run: %s\n", coda_last_error(ctx[b]));
        goto out;
      }
    }
    coda_tensor A = coda_tensor_2d(dA[b], opt, M, K), B = coda_tensor_2d(dB[b], opt, N, K);
    int nrep = exact ? 0 : (int)reps;
    double *times = calloc((size_t)nrep + 1, sizeof *times);
    if (!times) goto out;
    for (int rep = 0; rep <= nrep; rep++) { /* rep 0 warms up (loads / compiles kernels) */
      /* inputs and accumulated outputs start from their initial values */
      for (int i = 0; i < nargs && rep > 0; i++) {
        run_arg *r = &ra[i];
        if (r->info.kind == CODA_ARG_OUTPUT && r->info.accumulate && r->bytes)
          coda_memcpy_h2d(ctx[b], r->dev[b], r->host, r->bytes);
      }
      coda_synchronize(ctx[b]);
      double t0 = now_s();
      coda_status s = coda_gemm_epilogue(ctx[b], prog[b], CODA_N, &A, CODA_T, &B, args[b], tiling);
      if (s == CODA_OK) s = coda_synchronize(ctx[b]);
      times[rep] = now_s() - t0;
      if (s != CODA_OK) {
        fprintf(stderr, "coda run: %s: %s\n", b == 1 ? "CUDA backend" : exact ? "CPU fp64" : "CPU backend",
                coda_last_error(ctx[b]));
        free(times);
        goto out;
      }
    }
    if (nrep) {
      qsort(times + 1, (size_t)nrep, sizeof *times, cmp_double);
      med[b] = times[1 + nrep / 2];
    }
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
      coda_dtype t = r->info.dtype;
      if (exact && coda_program_arg(prog[2], i, &ei) == CODA_OK) t = ei.dtype;
      if (exact && (r->is_finish || r->info.kind == CODA_ARG_PARTIAL)) t = CODA_F64;
      size_t n = (size_t)(r->rows * r->cols), bytes = n * coda_dtype_size(t);
      void *tmp = malloc(bytes ? bytes : 1);
      r->result[b] = malloc((n ? n : 1) * sizeof(double));
      if (!tmp || !r->result[b]) { free(tmp); goto out; }
      coda_memcpy_d2h(ctx[b], tmp, r->dev[b], bytes);
      for (size_t j = 0; j < n; j++) r->result[b][j] = get(tmp, t, j);
      if (out_dir && (b != 2 || r->info.kind == CODA_ARG_OUTPUT || r->info.kind == CODA_ARG_PARTIAL ||
                      r->is_finish)) {
        int is_in = !r->is_finish && r->info.kind != CODA_ARG_OUTPUT && r->info.kind != CODA_ARG_PARTIAL;
        if ((b == 0 || !is_in) &&
            write_npy(ctx[0], out_dir, r->info.name, b == 0 ? "" : b == 1 ? ".gpu" : ".f64",
                      coda_tensor_2d(is_in && b == 0 ? r->host : tmp, is_in && b == 0 ? r->info.dtype : t,
                                     r->rows, r->cols))) {
          free(tmp);
          goto out;
        }
      }
      free(tmp);
    }
  }

  double flops = 2.0 * (double)M * N * K;
  printf("program %s, GEMM %lld x %lld x %lld (bf16), tiling %d x %d\n", builtin ? builtin : file,
         (long long)M, (long long)N, (long long)K, tiling.tile_m, tiling.tile_n);
  printf("  CPU: %.3f ms (%.1f GFLOP/s)\n", med[0] * 1e3, flops / med[0] * 1e-9);
  if (gpu) printf("  GPU: %.3f ms (%.1f TFLOP/s, host-timed incl. launch)\n", med[1] * 1e3, flops / med[1] * 1e-12);
  printf("  vs fp64: |cpu - fp64| <= 2 u |fp64| + 1e-5 max|fp64| per value; rel = max|cpu - fp64| / "
         "max|fp64|, worst = largest |cpu - fp64| / |fp64|\n");
  rc = 0;
  int bad_values = 0, bad_rule = 0;
  for (int i = 0; i < nargs; i++) {
    run_arg *r = &ra[i];
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
      if (gpu) {
        double g = r->result[1][j];
        double dg = (isinf(c) && isinf(g) && (c > 0) == (g > 0)) ? 0 : fabs(g - c);
        if (!(dg <= maxdiff)) maxdiff = dg; /* NaN propagates */
      }
    }
    printf("  %-10s %-7s %lld x %lld  max|cpu| %.4g  max|cpu-fp64| %.3g (rel %.3g, worst %.3g)%s",
           r->info.name, r->is_finish ? "finish" : r->info.kind == CODA_ARG_PARTIAL ? "partial" : "output",
           (long long)r->rows, (long long)r->cols, maxcpu, maxerr, maxref > 0 ? maxerr / maxref : maxerr,
           worst, outside ? "" : " ok");
    if (gpu) printf("  max|gpu-cpu| %.3g (rel %.3g)", maxdiff, maxcpu > 0 ? maxdiff / maxcpu : maxdiff);
    if (nonfinite) printf("  (%d non-finite on the CPU)", nonfinite);
    if (outside) printf("  (%d outside the rule)", outside);
    printf("\n");
    bad_values += nonfinite;
    bad_rule += outside;
  }
  if (bad_values || (bad_rule && strict)) {
    fprintf(stderr, "coda run: %s%s%s\n", bad_values ? "non-finite values" : "",
            bad_values && bad_rule ? " and " : "", bad_rule ? "values outside the fp64 rule" : "");
    rc = 1;
  } else if (bad_rule) {
    printf("  %d values outside the fp64 rule (fp32 precision of the program on these inputs; "
           "--strict makes this an error)\n", bad_rule);
  }

out:
  for (int i = 0; ra && i < nargs; i++) {
    for (int b = 0; b < 3; b++) {
      if (ra[i].dev[b]) coda_free(ctx[b], ra[i].dev[b]);
      free(ra[i].result[b]);
    }
    free(ra[i].host);
  }
  free(ra);
  for (int b = 0; b < 3; b++) {
    if (dA[b]) coda_free(ctx[b], dA[b]);
    if (dB[b]) coda_free(ctx[b], dB[b]);
    coda_args_destroy(args[b]);
    coda_program_destroy(prog[b]);
  }
  for (int b = 2; b >= 0; b--) coda_context_destroy(ctx[b]);
  free(hA);
  free(hB);
  free(hA64);
  free(hB64);
  free(text);
  return rc;
}
