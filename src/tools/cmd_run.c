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

/* One `coda run`: the command line, then what each phase makes (freed
 * by free_run on every path). Runs: 0 the CPU, 1 CUDA (--gpu), 2 the CPU
 * in fp64, the reference. */
typedef struct run_cmd {
  const char *file, *builtin, *out_dir;
  int64_t M, N, K, reps, seed;
  int gpu, m_set, n_set, k_set, strict;
  double max_gib;
  run_opt inputs[MAX_RUN_OPTS], ranges[MAX_RUN_OPTS];
  int ninputs, nranges;
  coda_tool_params params; /* --param */
  const char *file_acc, *file_A, *file_B; /* --input acc / A / B fix the GEMM shape */
  coda_context ctx[3];
  coda_program prog[3];
  coda_args args[3];
  run_arg *ra;
  int nargs;
  void *dA[3], *dB[3];
  uint16_t *hA, *hB;
  double *hA64, *hB64;
  char *text;
  double opnd; /* values in A and B */
  coda_tiling tiling;
  uint64_t st; /* the random inputs' stream */
  double med[3]; /* median seconds per run */
} run_cmd;

/* A phase's result when the command goes on (else the exit status). */
#define GO_ON (-1)

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

/* --input acc / A / B: the operands from .npy files (bf16 on the host),
 * the shape from theirs. */
static int read_operands(run_cmd *cr) {
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
static int check_operands(run_cmd *cr) {
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
      if (r->info.kind == CODA_ARG_ROWSUM) r->cols = cr->N > 0 ? (cr->N + cr->tiling.tile_n - 1) / cr->tiling.tile_n : 1;
      r->bytes = (size_t)(r->rows * r->cols) * coda_dtype_size(r->info.dtype);
      /* the fp64 run's dtype, as the runs below choose it */
      coda_arg_info ei;
      coda_dtype t64 = coda_program_arg(cr->prog[2], i, &ei) == CODA_OK ? ei.dtype : r->info.dtype;
      int vector_kind = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                        r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                        r->info.kind == CODA_ARG_ROWSUM;
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

/* Random operands where no file gave them, and their fp64 copies. */
static int fill_operands(run_cmd *cr) {
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
static int fill_args(run_cmd *cr) {
  for (int i = 0; i < cr->nargs; i++) {
    run_arg *r = &cr->ra[i];
    r->host = calloc(1, r->bytes ? r->bytes : 1);
    if (!r->host) return 1;
    int is_input = r->info.kind == CODA_ARG_ROW || r->info.kind == CODA_ARG_COL ||
                   r->info.kind == CODA_ARG_SCALAR || r->info.kind == CODA_ARG_TILE ||
                   r->info.kind == CODA_ARG_ROWSUM;
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
                              r->info.kind == CODA_ARG_ROWSUM, r->rows, &r->cols, &r->host,
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
static int write_operands(run_cmd *cr) {
  if (cr->out_dir) {
    int clash = 0;
    for (int i = 0; i < cr->nargs; i++) clash |= !strcmp(cr->ra[i].info.name, "A") || !strcmp(cr->ra[i].info.name, "B");
    if (clash) fprintf(stderr, "coda run: the program has an argument named A or B: operands not written\n");
    else if (write_npy(cr->ctx[0], cr->out_dir, "A", "", coda_tensor_2d(cr->hA, CODA_BF16, cr->M, cr->K)) ||
             write_npy(cr->ctx[0], cr->out_dir, "B", "", coda_tensor_2d(cr->hB, CODA_BF16, cr->N, cr->K)))
      return 1;
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
    for (size_t j = 0; j < n; j++) r->result[b][j] = get(tmp, t, j);
    if (cr->out_dir && (b != 2 || r->info.kind == CODA_ARG_OUTPUT || r->info.kind == CODA_ARG_PARTIAL ||
                    r->is_finish)) {
      int is_in = !r->is_finish && r->info.kind != CODA_ARG_OUTPUT && r->info.kind != CODA_ARG_PARTIAL;
      if ((b == 0 || !is_in) &&
          write_npy(cr->ctx[0], cr->out_dir, r->info.name, b == 0 ? "" : b == 1 ? ".gpu" : ".f64",
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
  rc = read_operands(cr);
  if (rc == GO_ON) rc = check_operands(cr);
  if (rc == GO_ON) rc = make_runs(cr);
  if (rc == GO_ON) rc = shape_args(cr);
  if (rc == GO_ON) rc = fill_operands(cr);
  if (rc == GO_ON) rc = fill_args(cr);
  if (rc == GO_ON) rc = write_operands(cr);
  for (int b = 0; b < 3 && rc == GO_ON; b++)
    if (cr->ctx[b]) rc = run_backend(cr, b);
  if (rc == GO_ON) rc = report(cr);
  free_run(cr);
  return rc;
}
