/* Launch of a GEMM with a compiled epilogue program (one kernel per fused
 * GEMM): checks, TMA tensor maps (the sm80 kernel takes the operands'
 * pointers and pitches instead), the parameter block, the module cache of
 * the context, cuLaunchKernel.
 *
 * The driver API is reached only through the runtime's entry-point query
 * (libcuda is never linked), so the library loads without a driver. Loaded
 * kernels are kept per context (its coda_cuda_ctx) keyed by the hash of the
 * generated functor and the kernel configuration. */
#include "backends/cuda/backend.h"
#include "backends/cuda/debug.h"
#include "backends/cuda/epi_codegen.h"
#include "backends/cuda/gemm_internal.h"
#include "backends/cuda/stream.h"

#include "base/arch.h"
#include "base/internal.h"
#include "lang/ir.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*pfn_load)(CUmodule *, const void *);
typedef CUresult (*pfn_unload)(CUmodule);
typedef CUresult (*pfn_getfn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*pfn_setattr)(CUfunction, CUfunction_attribute, int);
typedef CUresult (*pfn_getattr)(int *, CUfunction_attribute, CUfunction);
typedef CUresult (*pfn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*pfn_encode)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                               const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                               const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                               CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

typedef struct epi_kernel {
  uint64_t key;
  coda_epi_config cfg; /* with the schedule chosen */
  CUmodule mod;
  CUfunction fn;
  int local_bytes;
  int tma_slot[CODA_MAX_INPUTS]; /* coda_epi_input_tma_slots of the program */
} epi_kernel;

/* State of the CUDA backend kept on a context. */
typedef struct coda_cuda_state {
  int have_fns;
  pfn_load load;
  pfn_unload unload;
  pfn_getfn getfn;
  pfn_setattr setattr;
  pfn_getattr getattr;
  pfn_launch launch;
  pfn_encode encode;
  epi_kernel *k;
  int nk, capk;
} coda_cuda_state;

void coda_cuda_context_release(coda_context ctx) {
  if (!ctx) return;
  coda_cuda_gemm_tune_release(ctx); /* the GEMM autotuner's table (gemm_tune.cu) */
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b || !b->kernels) return;
  coda_cuda_state *s = b->kernels;
  for (int i = 0; i < s->nk; i++)
    if (s->unload) s->unload(s->k[i].mod);
  free(s->k);
  free(s);
  b->kernels = NULL;
}

static void *entry(const char *name, int version) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, (unsigned)version, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

static coda_status get_state(coda_context ctx, coda_cuda_state **out) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA epilogue: not a CUDA context");
  if (!b->kernels) {
    b->kernels = calloc(1, sizeof(coda_cuda_state));
    if (!b->kernels) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  coda_cuda_state *s = b->kernels;
  if (!s->have_fns) {
    s->load = (pfn_load)entry("cuModuleLoadData", 2000);
    s->unload = (pfn_unload)entry("cuModuleUnload", 2000);
    s->getfn = (pfn_getfn)entry("cuModuleGetFunction", 2000);
    s->setattr = (pfn_setattr)entry("cuFuncSetAttribute", 9000);
    s->getattr = (pfn_getattr)entry("cuFuncGetAttribute", 2020);
    s->launch = (pfn_launch)entry("cuLaunchKernel", 4000);
    s->encode = (pfn_encode)entry("cuTensorMapEncodeTiled", 12000);
    if (!s->load || !s->unload || !s->getfn || !s->setattr || !s->getattr || !s->launch ||
        !s->encode)
      return coda_fail(ctx, CODA_ERR_BACKEND,
                       "CUDA epilogue: the driver does not provide the module/launch entry points");
    s->have_fns = 1;
  }
  *out = s;
  return CODA_OK;
}

/* The loaded kernel for (program, configuration): memory, disk cache or
 * NVRTC, in that order. cfg gets the chosen schedule. */
static coda_status get_kernel(coda_context ctx, coda_cuda_state *s, coda_program p,
                              coda_epi_config *cfg, epi_kernel **out) {
  /* the key names every option that changes the generated code: the
   * configuration and the forced schedule (ctx->knobs.epi_schedule) */
  const int force = (int)ctx->knobs.epi_schedule;
  uint64_t key = coda_epi_program_key(p, 0);
  key = coda_fnv1a64(cfg, sizeof *cfg, key);
  key = coda_fnv1a64(&force, sizeof force, key);
  for (int i = 0; i < s->nk; i++)
    if (s->k[i].key == key) {
      *cfg = s->k[i].cfg;
      *out = &s->k[i];
      return CODA_OK;
    }
  coda_epi_binary bin;
  coda_status st = coda_epi_build(ctx, p, cfg, 0, &bin);
  if (st != CODA_OK) return st;
  if (s->nk == s->capk) {
    int cap = s->capk ? 2 * s->capk : 8;
    epi_kernel *nk = realloc(s->k, (size_t)cap * sizeof *nk);
    if (!nk) {
      coda_epi_binary_free(&bin);
      return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    }
    s->k = nk;
    s->capk = cap;
  }
  epi_kernel k;
  memset(&k, 0, sizeof k);
  k.key = key;
  k.cfg = *cfg;
  coda_epi_input_tma_slots(p, k.tma_slot);
  CUresult r = s->load(&k.mod, bin.cubin);
  if (r == CUDA_SUCCESS) r = s->getfn(&k.fn, k.mod, bin.lowered);
  coda_epi_binary_free(&bin);
  if (r == CUDA_SUCCESS)
    r = s->setattr(k.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)coda_epi_smem_bytes(cfg));
  if (r == CUDA_SUCCESS) r = s->getattr(&k.local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k.fn);
  if (r != CUDA_SUCCESS) {
    if (k.mod) s->unload(k.mod);
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA epilogue: loading the compiled kernel failed (driver error %d)", (int)r);
  }
  s->k[s->nk] = k;
  *out = &s->k[s->nk++];
  return CODA_OK;
}

/* One view's entry: vectors use their element stride (a column-shaped
 * vector its pitch), alignment flags enable paired access. */
static void fill_arg(coda_epi_params *pp, int k, const coda_tensor *t, int vector) {
  const size_t es = coda_dtype_size(t->dtype);
  const uintptr_t a = (uintptr_t)t->data;
  long long ld = t->ld;
  if (vector) ld = (t->cols == 1 && t->rows != 1) ? t->ld : 1;
  pp->ptr[k] = t->data;
  pp->ld[k] = ld;
  int fl = 0;
  if (vector) {
    if (ld == 1 && a % (2 * es) == 0) fl |= 1;
  } else {
    if (ld % 2 == 0 && a % (2 * es) == 0) fl |= 1;
    if (ld % 4 == 0 && a % (4 * es) == 0) fl |= 2;
  }
  pp->flags[k] = fl;
}

void coda_epi_fill_params(coda_epi_params *pp, coda_program program,
                          const coda_tensor *const *inputs, const coda_tensor *const *outputs,
                          const coda_tensor *const *partials, int64_t M, int64_t N) {
  const struct coda_program_s *p = program;
  memset(pp, 0, sizeof *pp);
  int ka = 0;
  for (int i = 0; i < p->ninputs; i++, ka++) {
    const int rowsum = ir_kind_is_partials(p->inputs[i].kind); /* M x T, read by rows */
    fill_arg(pp, ka, inputs[i], p->inputs[i].kind != CODA_ARG_TILE && !rowsum);
    if (rowsum) pp->cnt[ka] = (int)inputs[i]->cols;
  }
  for (int i = 0; i < p->noutputs; i++, ka++) fill_arg(pp, ka, outputs[i], 0);
  for (int i = 0; i < p->nreduces; i++, ka++) fill_arg(pp, ka, partials[i], 0);
  pp->M = (int)M;
  pp->N = (int)N;
}

/* A TMA map of a view for the epilogue's staged chunks (an output's store
 * or reduce-add, a tile input's load): box =
 * one chunk (64 rows x rb bytes), swizzled as the staging is (16-byte unit u
 * of row r at u ^ (r / (128 / rb)) % (rb / 16), which is the hardware's
 * 32/64/128-byte swizzle). Only views TMA stores exactly: 16-byte aligned
 * base and pitch, and a row length that is a multiple of 16 bytes (a
 * ragged last 16-byte unit was seen written past the row's end by the
 * plain GEMM's TMA store). Returns 1 when tm[slot] holds the map. */
static int chunk_map(pfn_encode encode, coda_epi_params *pp, int slot, const coda_tensor *t,
                     coda_width w) {
  const int rb = coda_epi_chunk_row_bytes(t->dtype, w);
  const size_t es = coda_dtype_size(t->dtype);
  if (!rb || t->rows <= 0 || t->cols <= 0 || ((uintptr_t)t->data & 15) != 0 ||
      ((size_t)t->ld * es) % 16 != 0 || ((size_t)t->cols * es) % 16 != 0)
    return 0;
  CUtensorMapDataType dt;
  switch (t->dtype) {
  case CODA_BF16: dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
  case CODA_F16: dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
  case CODA_F32: dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
  default: return 0;
  }
  cuuint64_t dims[2] = {(cuuint64_t)t->cols, (cuuint64_t)t->rows};
  cuuint64_t strides[1] = {(cuuint64_t)t->ld * es};
  cuuint32_t box[2] = {(cuuint32_t)(rb / (int)es), 64};
  cuuint32_t estr[2] = {1, 1};
  CUtensorMapSwizzle sw = rb == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                          : rb == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                     : CU_TENSOR_MAP_SWIZZLE_32B;
  CUtensorMap m;
  if (encode(&m, dt, 2, t->data, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
             CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return 0;
  _Static_assert(sizeof m == sizeof pp->tm[0], "tensor map size");
  memcpy(pp->tm[slot], &m, sizeof m);
  return 1;
}

void coda_cuda_epi_arch(coda_context ctx, coda_epi_config *cfg) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (b) {
    cfg->arch = b->path;
    cfg->cc = b->path == CODA_PATH_SM80 ? b->cc : 0;
  } else {
    /* no GPU decides: the options' target (compile_cc), else sm_80 */
    const int sm80 = ctx && ctx->knobs.arch == CODA_ARCH_SM80;
    cfg->arch = sm80 ? CODA_PATH_SM80 : CODA_PATH_SM90;
    cfg->cc = sm80 ? (ctx->knobs.compile_cc ? ctx->knobs.compile_cc : 80) : 0;
  }
}

coda_status coda_cuda_preferred_tiling(coda_context ctx, coda_program p, int64_t M, int64_t N,
                                       int64_t K, coda_tiling *out) {
  (void)ctx; (void)p; (void)M; (void)N; (void)K;
  out->tile_m = CODA_EPI_TILE_M;
  out->tile_n = CODA_EPI_BN;
  return CODA_OK;
}

/* The sm80 kernel: operands by pointer and pitch (cp.async), one CTA per
 * 128 x 128 tile, no TMA maps (the functor stores its staged chunks as
 * vectors: flags bit 2 stays clear). */
static coda_status launch_sm80(coda_context ctx, coda_cuda_state *s, const epi_kernel *k,
                               const coda_epi_config *cfg, coda_program program,
                               const coda_tensor *A, const coda_tensor *B,
                               const coda_tensor *const *inputs, const coda_tensor *const *outputs,
                               const coda_tensor *const *partials, int64_t M, int64_t N, int64_t K) {
  coda_epi_params pp;
  coda_epi_fill_params(&pp, program, inputs, outputs, partials, M, N);
  const void *a = A->data, *b = B->data;
  long long lda = A->ld, ldb = B->ld;
  int iM = (int)M, iN = (int)N, iK = (int)K, group_m = 8;
  const int64_t tiles = ((M + CODA_EPI_SM80_BM - 1) / CODA_EPI_SM80_BM) * ((N + cfg->bn - 1) / cfg->bn);
  if (tiles >= ((int64_t)1 << 31))
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "CUDA GEMM epilogue (sm80): %lld tiles exceed the grid",
                     (long long)tiles);
  void *args[] = {&a, &lda, &b, &ldb, &iM, &iN, &iK, &group_m, &pp};
  CUresult r = s->launch(k->fn, (unsigned)tiles, 1, 1, CODA_EPI_SM80_THREADS, 1, 1,
                         (unsigned)coda_epi_smem_bytes(cfg), (CUstream)coda_cuda_stream(ctx), args, NULL);
  if (r != CUDA_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND,
                     "CUDA GEMM epilogue (sm80): kernel launch failed (driver error %d)", (int)r);
  return coda_cuda_check_launch(ctx, "CUDA GEMM epilogue (sm80 fused program kernel)");
}

static coda_status check_operand(coda_context ctx, const char *name, const coda_tensor *t) {
  if (((uintptr_t)t->data & 15) != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT,
                     "CUDA GEMM epilogue: %s data pointer is not 16-byte aligned (TMA requires it)", name);
  if ((t->ld * 2) % 16 != 0)
    return coda_fail(ctx, CODA_ERR_LAYOUT,
                     "CUDA GEMM epilogue: %s leading dimension %lld is not a multiple of 8 elements "
                     "(TMA requires a 16-byte row pitch)",
                     name, (long long)t->ld);
  return CODA_OK;
}

coda_status coda_cuda_gemm_epilogue(coda_context ctx, coda_program program, coda_transpose trans_a,
                                    const coda_tensor *A, coda_transpose trans_b,
                                    const coda_tensor *B, const coda_tensor *const *inputs,
                                    const coda_tensor *const *outputs,
                                    const coda_tensor *const *partials, coda_tiling tiling,
                                    int schedule) {
  const struct coda_program_s *p = program;
  coda_status st = coda_epi_supported(ctx, program);
  if (st != CODA_OK) return st;
  if (tiling.tile_m != CODA_EPI_TILE_M || tiling.tile_n != CODA_EPI_BN)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "CUDA GEMM epilogue: tiling %d x %d; the GPU computes partials for tile_m = %d "
                     "(one consumer warpgroup) and tile_n = %d (see coda_preferred_tiling)",
                     tiling.tile_m, tiling.tile_n, CODA_EPI_TILE_M, CODA_EPI_BN);
  if (A->dtype != B->dtype || (A->dtype != CODA_BF16 && A->dtype != CODA_F16))
    return coda_fail(ctx, CODA_ERR_DTYPE,
                     "CUDA GEMM epilogue: A and B must both be bf16 or both f16 (got %s and %s)",
                     coda_dtype_name(A->dtype), coda_dtype_name(B->dtype));
  const int64_t M = trans_a == CODA_N ? A->rows : A->cols;
  const int64_t K = trans_a == CODA_N ? A->cols : A->rows;
  const int64_t N = trans_b == CODA_N ? B->cols : B->rows;
  const int64_t lim = ((int64_t)1 << 31) - 256;
  if (M >= lim || N >= lim || K >= lim)
    return coda_fail(ctx, CODA_ERR_OVERFLOW, "CUDA GEMM epilogue: a dimension exceeds 2^31");
  if (M == 0 || N == 0) return CODA_OK;
  if (K == 0)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "CUDA GEMM epilogue: K = 0 is not supported");
  if ((st = check_operand(ctx, "A", A)) || (st = check_operand(ctx, "B", B))) return st;

  const int dev = ctx->opts.device;
  cudaError_t e = cudaSetDevice(dev);
  int num_sms = 0;
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
  /* cudaFree(NULL) makes the primary context current; a stream being
   * captured has a current context already, and the call is not one a
   * capture allows. */
  if (e == cudaSuccess && !coda_cuda_capturing(ctx)) e = cudaFree(NULL);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA GEMM epilogue: device setup failed: %s",
                     cudaGetErrorString(e));
  }
  coda_cuda_state *s;
  if ((st = get_state(ctx, &s))) return st;

  coda_epi_config cfg = coda_epi_default_config();
  coda_cuda_epi_arch(ctx, &cfg);
  cfg.trans_a = trans_a == CODA_T;
  cfg.trans_b = trans_b == CODA_T;
  cfg.f16 = A->dtype == CODA_F16;
  cfg.sched = schedule;
  epi_kernel *k;
  if ((st = get_kernel(ctx, s, program, &cfg, &k))) return st;
  if (cfg.arch == CODA_PATH_SM80)
    return launch_sm80(ctx, s, k, &cfg, program, A, B, inputs, outputs, partials, M, N, K);

  CUtensorMap ta, tb;
  CUresult r = coda_cuda_operand_map((void *)s->encode, &ta, A, 64, trans_a == CODA_N ? 128u : 64u);
  if (r == CUDA_SUCCESS)
    r = coda_cuda_operand_map((void *)s->encode, &tb, B, 64, trans_b == CODA_T ? (uint32_t)cfg.bn : 64u);
  if (r != CUDA_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND,
                     "CUDA GEMM epilogue: cuTensorMapEncodeTiled failed (error %d)", (int)r);

  coda_epi_params pp;
  coda_epi_fill_params(&pp, program, inputs, outputs, partials, M, N);
  /* Stored outputs, and accumulating f32 ones (the same map; the generated
   * code issues a TMA reduce-add for them; 16-bit accumulating outputs are
   * never staged, see plan_staging in epi_codegen.c). */
  for (int i = 0; i < p->noutputs && i < CODA_EPI_MAX_TMA; i++) {
    const ir_output *op = &p->outputs[i];
    const int tma_ok = !op->accumulate || (op->dtype == CODA_F32 && op->width == CODA_WIDTH_FULL);
    if (tma_ok && chunk_map(s->encode, &pp, i, outputs[i], op->width)) pp.flags[p->ninputs + i] |= 4;
  }
  /* Staged tile inputs, loaded by TMA when all of them have a map (the
   * generated code checks; otherwise cp.async, also when
   * the epi_tma_loads knob is off, to compare the two). */
  for (int i = 0; i < p->ninputs && ctx->knobs.epi_tma_loads >= 0; i++)
    if (k->tma_slot[i] >= 0 && chunk_map(s->encode, &pp, k->tma_slot[i], inputs[i], p->inputs[i].width))
      pp.flags[i] |= 4;

  int iM = (int)M, iN = (int)N, iK = (int)K, group_m = 16, splits = 1, kbs = (int)((K + 63) / 64);
  const int64_t tiles = ((M + 127) / 128) * ((N + cfg.bn - 1) / cfg.bn);
  const unsigned grid = (unsigned)(tiles < num_sms ? tiles : num_sms);
  void *args[] = {&ta, &tb, &iM, &iN, &iK, &group_m, &splits, &kbs, &pp};
  /* the runtime's cudaStream_t is the driver's CUstream */
  r = s->launch(k->fn, grid, 1, 1, 384, 1, 1, (unsigned)coda_epi_smem_bytes(&cfg),
                (CUstream)coda_cuda_stream(ctx), args, NULL);
  if (r != CUDA_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA GEMM epilogue: kernel launch failed (driver error %d)",
                     (int)r);
  return coda_cuda_check_launch(ctx, "CUDA GEMM epilogue (fused program kernel)");
}

int coda_cuda_epilogue_local_bytes(coda_context ctx, coda_program program, int trans_a,
                                   int trans_b, int f16, int *ping) {
  coda_cuda_state *s;
  if (get_state(ctx, &s)) return -1;
  coda_epi_config cfg = coda_epi_default_config();
  coda_cuda_epi_arch(ctx, &cfg);
  cfg.trans_a = trans_a;
  cfg.trans_b = trans_b;
  cfg.f16 = f16;
  epi_kernel *k;
  if (get_kernel(ctx, s, program, &cfg, &k)) return -1;
  if (ping) *ping = k->cfg.ping;
  return k->local_bytes;
}

/* ---- gplan: generic loaded kernels (the coda_map kernels of epi_map.c) ----
 * Kept in the same per-context table as the fused GEMMs (cfg unused). */
#include "backends/cuda/gplan.h"

void *coda_cuda_kernel_find(coda_context ctx, uint64_t key) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  coda_cuda_state *s = b ? b->kernels : NULL;
  if (!s) return NULL;
  for (int i = 0; i < s->nk; i++)
    if (s->k[i].key == key) return (void *)s->k[i].fn;
  return NULL;
}

coda_status coda_cuda_kernel_add(coda_context ctx, uint64_t key, const void *cubin,
                                 const char *lowered, void **fn) {
  coda_cuda_state *s;
  coda_status st = get_state(ctx, &s);
  if (st != CODA_OK) return st;
  if (s->nk == s->capk) {
    int cap = s->capk ? 2 * s->capk : 8;
    epi_kernel *nk = realloc(s->k, (size_t)cap * sizeof *nk);
    if (!nk) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    s->k = nk;
    s->capk = cap;
  }
  epi_kernel k;
  memset(&k, 0, sizeof k);
  k.key = key;
  CUresult r = s->load(&k.mod, cubin);
  if (r == CUDA_SUCCESS) r = s->getfn(&k.fn, k.mod, lowered);
  if (r != CUDA_SUCCESS) {
    if (k.mod) s->unload(k.mod);
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA: loading a compiled kernel failed (driver error %d)",
                     (int)r);
  }
  s->k[s->nk++] = k;
  *fn = (void *)k.fn;
  return CODA_OK;
}

coda_status coda_cuda_kernel_launch(coda_context ctx, void *fn, unsigned grid, unsigned block,
                                    unsigned smem, void **args) {
  coda_cuda_state *s;
  coda_status st = get_state(ctx, &s);
  if (st != CODA_OK) return st;
  CUresult r = s->launch((CUfunction)fn, grid, 1, 1, block, 1, 1, smem,
                         (CUstream)coda_cuda_stream(ctx), args, NULL);
  if (r != CUDA_SUCCESS)
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA: kernel launch failed (driver error %d)", (int)r);
  return coda_cuda_check_launch(ctx, "CUDA elementwise program kernel (coda_map)");
}
/* ---- end gplan ---- */
