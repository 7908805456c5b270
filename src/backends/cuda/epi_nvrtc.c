/* NVRTC compilation of generated epilogue kernels, with an on-disk cache.
 *
 * Cache: one file per kernel, <dir>/epi-<key>.cubin, dir = $CODA_CACHE_DIR
 * or ~/.cache/coda. key = two 64-bit FNV-1a hashes (different seeds) of the
 * translation unit, the kernel name expression, the compiler options, the
 * target architecture, the NVRTC version and the library version. The file
 * holds a header (magic, sizes, checksum of the payload), the lowered
 * kernel name and the cubin; a file that fails any check is ignored and
 * rewritten. Files are written to a temporary name and renamed, so a
 * reader never sees a partial file. NVRTC needs no GPU.
 *
 * NVRTC is loaded with dlopen (libnvrtc.so.<CUDA major>) the first time a
 * kernel is compiled or looked up, not when the program starts: a command
 * that compiles nothing (coda version, coda check, CPU training) does not
 * map its ~100 MB. nvrtc.h gives the types only; the entry points come
 * from the table below. */
#define _POSIX_C_SOURCE 200809L
#include "backends/cuda/epi_codegen.h"

#include "base/internal.h"

#include <cuda_runtime_api.h> /* CUDART_VERSION: the NVRTC soname this build matches */
#include <nvrtc.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The NVRTC entry points this file calls. The table is filled once per
 * process (pthread_once) and never changes after: a loaded library is
 * process-wide anyway (dlopen returns the same handle to every caller), so
 * a per-context copy would only repeat the load. */
typedef struct nvrtc_api {
  nvrtcResult (*version)(int *, int *);
  nvrtcResult (*create_program)(nvrtcProgram *, const char *, const char *, int,
                                const char *const *, const char *const *);
  nvrtcResult (*add_name_expression)(nvrtcProgram, const char *);
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*get_program_log_size)(nvrtcProgram, size_t *);
  nvrtcResult (*get_program_log)(nvrtcProgram, char *);
  nvrtcResult (*get_lowered_name)(nvrtcProgram, const char *, const char **);
  nvrtcResult (*get_cubin_size)(nvrtcProgram, size_t *);
  nvrtcResult (*get_cubin)(nvrtcProgram, char *);
  nvrtcResult (*destroy_program)(nvrtcProgram *);
  const char *(*get_error_string)(nvrtcResult);
} nvrtc_api;

static nvrtc_api g_nvrtc;
static int g_nvrtc_ok;
static char g_nvrtc_why[512];
static pthread_once_t g_nvrtc_once = PTHREAD_ONCE_INIT;

static void nvrtc_load(void) {
  char name[64];
  snprintf(name, sizeof name, "libnvrtc.so.%d", CUDART_VERSION / 1000);
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(g_nvrtc_why, sizeof g_nvrtc_why,
             "cannot load NVRTC (%s), which compiles the GPU's generated kernels: %s; install "
             "the CUDA %d NVRTC library or add its folder to LD_LIBRARY_PATH",
             name, e ? e : "not found", CUDART_VERSION / 1000);
    return;
  }
  nvrtc_api a;
#define SYM(field, sym)                                                                        \
  do {                                                                                         \
    *(void **)&a.field = dlsym(lib, sym);                                                      \
    if (!a.field) {                                                                            \
      snprintf(g_nvrtc_why, sizeof g_nvrtc_why, "the NVRTC library %s lacks %s", name, sym); \
      dlclose(lib);                                                                            \
      return;                                                                                  \
    }                                                                                          \
  } while (0)
  SYM(version, "nvrtcVersion");
  SYM(create_program, "nvrtcCreateProgram");
  SYM(add_name_expression, "nvrtcAddNameExpression");
  SYM(compile_program, "nvrtcCompileProgram");
  SYM(get_program_log_size, "nvrtcGetProgramLogSize");
  SYM(get_program_log, "nvrtcGetProgramLog");
  SYM(get_lowered_name, "nvrtcGetLoweredName");
  SYM(get_cubin_size, "nvrtcGetCUBINSize");
  SYM(get_cubin, "nvrtcGetCUBIN");
  SYM(destroy_program, "nvrtcDestroyProgram");
  SYM(get_error_string, "nvrtcGetErrorString");
#undef SYM
  g_nvrtc = a;
  g_nvrtc_ok = 1; /* the library stays loaded for the process */
}

/* The loaded table, or NULL with the reason recorded on ctx. */
static const nvrtc_api *nvrtc(coda_context ctx) {
  pthread_once(&g_nvrtc_once, nvrtc_load);
  if (g_nvrtc_ok) return &g_nvrtc;
  coda_fail(ctx, CODA_ERR_BACKEND, "CUDA epilogue: %s", g_nvrtc_why);
  return NULL;
}

/* Exact math: the CPU reference does not contract a*b+c and divides and
 * takes square roots correctly rounded; fast math (docs/language.md) lets
 * the GPU do neither. */
static const char *const kOptions[] = {
    "--gpu-architecture=sm_90a", "-default-device", "--std=c++17",
    "--fmad=false", "--ptxas-options=-v",
};
static const char *const kFastOptions[] = {
    "--gpu-architecture=sm_90a", "-default-device", "--std=c++17",
    "--fmad=true", "--prec-div=false", "--prec-sqrt=false", "--ptxas-options=-v",
};
#define NOPTIONS ((int)(sizeof kOptions / sizeof kOptions[0]))
#define NFAST_OPTIONS ((int)(sizeof kFastOptions / sizeof kFastOptions[0]))
static const char kMagic[8] = {'C', 'O', 'D', 'A', 'E', 'P', 'I', '2'};

/* The context's cache directory (created if needed, with its parent for
 * the default $HOME/.cache/coda) into buf, or 0 if there is none. */
static int cache_dir(coda_context ctx, char *buf, size_t n) {
  const char *d = ctx ? ctx->knobs.cache_dir : "";
  if (!d[0] || (size_t)snprintf(buf, n, "%s", d) >= n) return 0;
  char *slash = strrchr(buf, '/');
  if (slash && slash != buf) { /* the parent, e.g. ~/.cache */
    *slash = '\0';
    (void)mkdir(buf, 0755); /* may exist; the directory's own mkdir decides */
    *slash = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) return 0;
  return 1;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Reads a cache file; 1 on success (cubin, lowered malloc'ed). */
static int cache_read(const char *path, void **cubin, size_t *size, char **lowered, int *spill) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char h[40];
  int ok = 0;
  char *name = NULL;
  unsigned char *bin = NULL;
  if (fread(h, 1, 40, f) == 40 && memcmp(h, kMagic, 8) == 0) {
    uint64_t nbin = get_u64(h + 8), nname = get_u64(h + 16), sum = get_u64(h + 24);
    *spill = (int)(int64_t)get_u64(h + 32);
    if (nbin > 0 && nbin < ((uint64_t)1 << 30) && nname > 0 && nname < 4096) {
      name = malloc((size_t)nname + 1);
      bin = malloc((size_t)nbin);
      if (name && bin && fread(name, 1, (size_t)nname, f) == nname &&
          fread(bin, 1, (size_t)nbin, f) == nbin && fgetc(f) == EOF) {
        name[nname] = '\0';
        uint64_t s = coda_fnv1a64(name, (size_t)nname, get_u64(h + 32));
        s = coda_fnv1a64(bin, (size_t)nbin, s);
        ok = s == sum && strlen(name) == nname;
      }
    }
    if (ok) {
      *cubin = bin;
      *size = (size_t)get_u64(h + 8);
      *lowered = name;
    }
  }
  fclose(f);
  if (!ok) {
    free(name);
    free(bin);
  }
  return ok;
}

/* Writes a cache file atomically (best effort: failures only cost a
 * recompilation later). */
static void cache_write(const char *path, const void *cubin, size_t size, const char *lowered,
                        int spill) {
  char tmp[4200];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) return;
  FILE *f = fopen(tmp, "wb");
  if (!f) return;
  size_t nn = strlen(lowered);
  unsigned char h[40];
  memcpy(h, kMagic, 8);
  put_u64(h + 8, size);
  put_u64(h + 16, nn);
  put_u64(h + 32, (uint64_t)(int64_t)spill);
  uint64_t s = coda_fnv1a64(lowered, nn, (uint64_t)(int64_t)spill);
  put_u64(h + 24, coda_fnv1a64(cubin, size, s));
  int ok = fwrite(h, 1, 40, f) == 40 && fwrite(lowered, 1, nn, f) == nn &&
           fwrite(cubin, 1, size, f) == size && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (fclose(f) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) remove(tmp);
}

/* Largest "N bytes spill stores" of the ptxas statistics in the log. */
static int log_spill_bytes(const char *log) {
  int best = 0;
  for (const char *p = strstr(log, "bytes spill stores"); p; p = strstr(p + 1, "bytes spill stores")) {
    const char *b = p;
    while (b > log && b[-1] == ' ') b--;
    while (b > log && b[-1] >= '0' && b[-1] <= '9') b--;
    int v = atoi(b);
    if (v > best) best = v;
  }
  return best;
}

coda_status coda_epi_compile(coda_context ctx, const char *source, const char *kernel_expr,
                             coda_math math, int no_cache, void **cubin, size_t *cubin_size, char **lowered,
                             char **log, int *from_cache, int *spill) {
  return coda_epi_compile_for(ctx, "sm_90a", source, kernel_expr, math, no_cache, cubin, cubin_size,
                              lowered, log, from_cache, spill);
}

/* The options with the architecture of `target` in place of the first
 * (the tables' sm_90a) into opts (NOPTIONS_MAX entries); their count. */
#define NOPTIONS_MAX 8
_Static_assert(NOPTIONS <= NOPTIONS_MAX && NFAST_OPTIONS <= NOPTIONS_MAX, "NOPTIONS_MAX");
static int target_options(const char *target, int fast, char *arch, size_t n, const char **opts) {
  const char *const *base = fast ? kFastOptions : kOptions;
  const int nb = fast ? NFAST_OPTIONS : NOPTIONS;
  snprintf(arch, n, "--gpu-architecture=%s", target);
  opts[0] = arch;
  for (int i = 1; i < nb && i < NOPTIONS_MAX; i++) opts[i] = base[i];
  return nb;
}

coda_status coda_epi_compile_for(coda_context ctx, const char *target, const char *source,
                                 const char *kernel_expr, coda_math math, int no_cache, void **cubin,
                                 size_t *cubin_size, char **lowered, char **log, int *from_cache,
                                 int *spill) {
  *cubin = NULL;
  *cubin_size = 0;
  *lowered = NULL;
  if (log) *log = NULL;
  if (from_cache) *from_cache = 0;
  int spill_ = -1;
  int vmaj = 0, vmin = 0;
  const nvrtc_api *nv = nvrtc(ctx);
  if (!nv) return CODA_ERR_BACKEND;
  if (nv->version(&vmaj, &vmin) != NVRTC_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA epilogue: NVRTC is not usable");

  /* cache key */
  char meta[512];
  int ml = snprintf(meta, sizeof meta, "%s|nvrtc %d.%d|coda %d.%d.%d|", target, vmaj, vmin,
                    CODA_VERSION_MAJOR, CODA_VERSION_MINOR, CODA_VERSION_PATCH);
  const int fast = math == CODA_MATH_FAST;
  const char *opts[NOPTIONS_MAX];
  char arch[64];
  const int nopts = target_options(target, fast, arch, sizeof arch, opts);
  for (int i = 0; i < nopts && ml > 0 && (size_t)ml < sizeof meta; i++)
    ml += snprintf(meta + ml, sizeof meta - (size_t)ml, "%s|", opts[i]);
  uint64_t k1 = 1, k2 = 2;
  const char *parts[3] = {meta, kernel_expr, source};
  for (int i = 0; i < 3; i++) {
    k1 = coda_fnv1a64(parts[i], strlen(parts[i]) + 1, k1 * 0x9E3779B97F4A7C15ull);
    k2 = coda_fnv1a64(parts[i], strlen(parts[i]) + 1, k2 * 0xC2B2AE3D27D4EB4Full);
  }
  char dir[4000], path[4100];
  int have_dir = !no_cache && cache_dir(ctx, dir, sizeof dir);
  if (have_dir) {
    snprintf(path, sizeof path, "%s/epi-%016llx%016llx.cubin", dir, (unsigned long long)k1,
             (unsigned long long)k2);
    if (cache_read(path, cubin, cubin_size, lowered, &spill_)) {
      if (from_cache) *from_cache = 1;
      if (spill) *spill = spill_;
      return CODA_OK;
    }
  }

  nvrtcProgram prog;
  nvrtcResult r = nv->create_program(&prog, source, "coda_epilogue.cu", 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA epilogue: nvrtcCreateProgram: %s",
                     nv->get_error_string(r));
  coda_status st = CODA_OK;
  r = nv->add_name_expression(prog, kernel_expr);
  if (r == NVRTC_SUCCESS) r = nv->compile_program(prog, nopts, opts);
  size_t logn = 0;
  char *lg = NULL;
  if (nv->get_program_log_size(prog, &logn) == NVRTC_SUCCESS && logn > 0) {
    lg = malloc(logn + 1);
    if (lg && nv->get_program_log(prog, lg) == NVRTC_SUCCESS) lg[logn] = '\0';
    else if (lg) lg[0] = '\0';
  }
  if (r != NVRTC_SUCCESS) {
    /* the first error line is the useful part of the message */
    const char *e = lg ? strstr(lg, "error") : NULL;
    char first[300] = "";
    if (e) {
      size_t n = strcspn(e, "\n");
      if (n >= sizeof first) n = sizeof first - 1;
      memcpy(first, e, n);
      first[n] = '\0';
    }
    st = coda_fail(ctx, CODA_ERR_BACKEND,
                   "CUDA epilogue: NVRTC failed to compile the generated kernel (%s)%s%s",
                   nv->get_error_string(r), first[0] ? ": " : "", first);
    goto done;
  }
  const char *low = NULL;
  size_t n = 0;
  if (nv->get_lowered_name(prog, kernel_expr, &low) != NVRTC_SUCCESS || !low ||
      nv->get_cubin_size(prog, &n) != NVRTC_SUCCESS || n == 0) {
    st = coda_fail(ctx, CODA_ERR_BACKEND, "CUDA epilogue: NVRTC produced no cubin");
    goto done;
  }
  *lowered = malloc(strlen(low) + 1);
  if (*lowered) memcpy(*lowered, low, strlen(low) + 1);
  *cubin = malloc(n);
  if (!*lowered || !*cubin) {
    st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory for the compiled kernel");
    goto done;
  }
  if (nv->get_cubin(prog, *cubin) != NVRTC_SUCCESS) {
    st = coda_fail(ctx, CODA_ERR_BACKEND, "CUDA epilogue: nvrtcGetCUBIN failed");
    goto done;
  }
  *cubin_size = n;
  spill_ = lg ? log_spill_bytes(lg) : -1;
  if (spill) *spill = spill_;
  if (have_dir) cache_write(path, *cubin, n, *lowered, spill_);
done:
  nv->destroy_program(&prog);
  if (st != CODA_OK) {
    free(*cubin);
    free(*lowered);
    *cubin = NULL;
    *lowered = NULL;
  }
  if (log) *log = lg;
  else free(lg);
  return st;
}
