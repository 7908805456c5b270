/* The CUDA backend's table (backends/backend.h): adapters from the checked
 * jobs of the api layer to the backend's entry points (backend.h, gplan.h),
 * which keep their own signatures. */
#include "backends/backend.h"
#include "backends/decode_ops.h"
#include "backends/train_ops.h"
#include "backends/cuda/attention_cudnn.h"
#include "backends/cuda/backend.h"
#include "backends/cuda/epi_codegen.h"
#include "backends/cuda/gemm_internal.h"
#include "backends/cuda/gplan.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/workspace.h"
#include "base/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kernel_source.c */
coda_status coda_cuda_program_source(coda_context ctx, coda_program p, char **source);
coda_status coda_cuda_program_compile(coda_context ctx, coda_program p, coda_dtype operand_dtype,
                                      coda_transpose trans_a, coda_transpose trans_b, int no_cache,
                                      coda_cuda_kernel_info *info, char **unit, char **log);

extern const coda_backend_ops coda_cuda_backend_ops;

coda_cuda_ctx *coda_cuda_ctx_of(coda_context ctx) {
  return ctx && ctx->ops == &coda_cuda_backend_ops ? (coda_cuda_ctx *)ctx->backend : NULL;
}

/* The context's mainloop path for its device and CODA_ARCH (base/arch.h). */
static coda_status pick_path(coda_context ctx) {
  coda_cuda_ctx *b = ctx->backend;
  const int dev = ctx->opts.device;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return coda_fail(ctx, CODA_ERR_BACKEND, "CUDA backend: cannot read device %d's compute capability", dev);
  }
  char why[256];
  coda_status s = coda_arch_select(ctx->knobs.arch, major, minor, &b->path, why, sizeof why);
  if (s != CODA_OK) return coda_fail(ctx, s, "CUDA backend, device %d: %s", dev, why);
  b->cc = 10 * major + minor;
  return CODA_OK;
}

int coda_cuda_sm80(coda_context ctx) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  return b && b->path == CODA_PATH_SM80;
}

coda_status coda_cuda_hopper_only(coda_context ctx, const char *what, const char *why) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (!b || b->path != CODA_PATH_SM80) return CODA_OK;
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                   "%s: not on the sm80 path (it needs Hopper: %s; device compute capability "
                   "%d.%d, CODA_ARCH=%s); it runs on an sm_90 GPU with CODA_ARCH=auto or sm90",
                   what, why, b->cc / 10, b->cc % 10, coda_arch_choice_name(ctx->knobs.arch));
}

static coda_status cuda_create(coda_context ctx) {
  ctx->backend = calloc(1, sizeof(coda_cuda_ctx));
  if (!ctx->backend) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "CUDA backend: out of memory");
  if (!coda_cuda_device_usable())
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "CUDA backend: no usable GPU (compute capability 8.0 or newer)");
  coda_status s = pick_path(ctx);
  if (s != CODA_OK) return s;
  s = coda_cuda_stream_open(ctx);
  if (s == CODA_OK && ctx->opts.autotune) s = coda_cuda_gemm_set_autotune(ctx, 1);
  return s;
}

static void cuda_destroy(coda_context ctx) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (b)
    for (size_t i = 0; i < sizeof b->sm80_store / sizeof b->sm80_store[0]; i++)
      coda_program_destroy(b->sm80_store[i].prog);
  coda_cuda_context_release(ctx); /* loaded fused kernels, the tuner's table */
  coda_cudnn_release(ctx);       /* its plans and handle, before the workspaces */
  coda_cuda_workspace_release(ctx);
  coda_cuda_stream_close(ctx); /* after the stream-ordered frees above */
  free(ctx->backend);
  ctx->backend = NULL;
}

static coda_status cuda_alloc(coda_context ctx, size_t bytes, void **out) {
  return coda_cuda_malloc(ctx, bytes, out);
}
static void cuda_free(coda_context ctx, void *p) {
  (void)ctx;
  coda_cuda_free(p);
}

static coda_status cuda_copy_bytes(coda_context ctx, void *dst, const void *src, size_t bytes,
                                   coda_copy_kind kind) {
  if (kind == CODA_COPY_H2D_QUEUED) return coda_cuda_memcpy_queued(ctx, dst, src, bytes);
  return coda_cuda_memcpy(ctx, dst, src, bytes, kind == CODA_COPY_H2D);
}

/* A copy with a source converts and strides in a kernel (finish.cu); a
 * zero fill is a memset. */
static coda_status cuda_copy(coda_context ctx, const coda_tensor *dst, const coda_tensor *src) {
  return coda_cuda_copy(ctx, dst, src);
}

static coda_status cuda_tags(coda_context ctx, char *device, size_t ndevice, char *code,
                             size_t ncode) {
  coda_status st = coda_cuda_device_tag(ctx, device, ndevice);
  if (st != CODA_OK) return st;
  /* the choices were timed with this mainloop code: the sm80 path's own
   * header joins the hash on that path */
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  uint64_t h = coda_fnv1a64(coda_epi_hdr_gemm_sm90, strlen(coda_epi_hdr_gemm_sm90), 0);
  if (b && b->path == CODA_PATH_SM80)
    h = coda_fnv1a64(coda_epi_hdr_gemm_sm80, strlen(coda_epi_hdr_gemm_sm80), h);
  h = coda_fnv1a64(coda_epi_hdr_wgmma, strlen(coda_epi_hdr_wgmma), h);
  h = coda_fnv1a64(coda_epi_hdr_helpers, strlen(coda_epi_hdr_helpers), h);
  h = coda_fnv1a64(coda_epi_hdr_ptx_sm90, strlen(coda_epi_hdr_ptx_sm90), h);
  snprintf(code, ncode, "+k%08x", (unsigned)(h >> 32));
  return CODA_OK;
}

/* The store program of the sm80 path's plain GEMM for (dt, accumulate,
 * alpha), from the context's table (parsed on first use; a full table
 * gives its oldest slot up, round robin). */
static coda_status sm80_store_program(coda_context ctx, coda_dtype dt, int accumulate, float alpha,
                                      coda_program *out) {
  coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  const size_t n = sizeof b->sm80_store / sizeof b->sm80_store[0];
  size_t slot = n;
  for (size_t i = 0; i < n; i++) {
    if (!b->sm80_store[i].prog) {
      if (slot == n) slot = i;
      continue;
    }
    if (b->sm80_store[i].dtype == (int)dt && b->sm80_store[i].accumulate == accumulate &&
        b->sm80_store[i].alpha == alpha) {
      *out = b->sm80_store[i].prog;
      return CODA_OK;
    }
  }
  if (slot == n) { /* full: the slots are filled in order, so evict round robin */
    slot = (size_t)b->sm80_store_next++ % n;
    coda_program_destroy(b->sm80_store[slot].prog);
    b->sm80_store[slot].prog = NULL;
  }
  char text[128];
  snprintf(text, sizeof text, "output d : %s%s\nstore d = acc * %.9g\n", coda_dtype_name(dt),
           accumulate ? " accumulate" : "", (double)alpha);
  coda_status s = coda_program_parse(ctx, text, &b->sm80_store[slot].prog);
  if (s) return s;
  b->sm80_store[slot].dtype = (int)dt;
  b->sm80_store[slot].accumulate = accumulate;
  b->sm80_store[slot].alpha = alpha;
  *out = b->sm80_store[slot].prog;
  return CODA_OK;
}

/* The plain GEMM on the sm80 path: the fused kernel with a store program,
 * D = round(alpha * acc (+ D)), the product and the addition each in fp32
 * and one rounding, as the sm_90 kernels compute it. One program (and
 * kernel) per D type, accumulate flag and alpha (printed with the 9 digits
 * that give the float back). */
static coda_status sm80_gemm(coda_context ctx, const coda_epi_job *j) {
  const float alpha = (float)j->alpha;
  const coda_dtype dt = j->D->dtype;
  if (!isfinite(alpha))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "CUDA GEMM on the sm80 path: alpha %g is not finite",
                     (double)alpha);
  if (dt != CODA_BF16 && dt != CODA_F16 && dt != CODA_F32)
    return coda_fail(ctx, CODA_ERR_DTYPE, "CUDA GEMM on the sm80 path: D is %s, not bf16, f16 or f32",
                     coda_dtype_name(dt));
  coda_program p = NULL;
  coda_status s = sm80_store_program(ctx, dt, j->accumulate != 0, alpha, &p);
  if (s) return s;
  const coda_tensor *out[1] = {j->D};
  return coda_cuda_gemm_epilogue(ctx, p, j->ta, j->A, j->tb, j->B, NULL, out, NULL,
                                 (coda_tiling){CODA_EPI_TILE_M, CODA_EPI_BN}, CODA_SCHED_AUTO);
}

static coda_status cuda_gemm(coda_context ctx, const coda_epi_job *j) {
  const coda_cuda_ctx *b = coda_cuda_ctx_of(ctx);
  if (b && b->path == CODA_PATH_SM80) return sm80_gemm(ctx, j);
  return coda_cuda_gemm(ctx, j->ta, j->A, j->tb, j->B, j->D, (float)j->alpha, j->accumulate);
}

coda_status coda_cuda_gemm_path(coda_context ctx, coda_transpose trans_a, const coda_tensor *A,
                                coda_transpose trans_b, const coda_tensor *B,
                                const coda_tensor *D, float alpha, int accumulate) {
  coda_epi_job j = {.has_gemm = 1, .ta = trans_a, .tb = trans_b, .A = A, .B = B, .D = D,
                    .alpha = alpha, .accumulate = accumulate};
  j.M = trans_a == CODA_N ? A->rows : A->cols;
  j.K = trans_a == CODA_N ? A->cols : A->rows;
  j.N = D->cols;
  j.tiling = (coda_tiling){CODA_EPI_TILE_M, CODA_EPI_BN};
  return cuda_gemm(ctx, &j);
}

static coda_status cuda_gemm_epilogue(coda_context ctx, const coda_epi_job *j) {
  if (!j->prog) return cuda_gemm(ctx, j);
  return coda_cuda_gemm_epilogue(ctx, j->prog, j->ta, j->A, j->tb, j->B, j->inputs, j->outputs,
                                 j->partials, j->tiling, j->schedule);
}

static coda_status cuda_map(coda_context ctx, const coda_epi_job *j) {
  return coda_cuda_map(ctx, j->prog, j->M, j->N, j->inputs, j->outputs, j->partials, j->tiling);
}

static coda_status cuda_finish(coda_context ctx, const coda_finish_job *j) {
  return coda_cuda_finish(ctx, j->kind, j->layout, j->P, j->Q, j->out, j->M, j->N,
                          j->tiling.tile_n, j->seg, j->eps);
}

/* CODA_ATTENTION picks cuDNN's fused attention or the own kernels per
 * pass: own; cudnn (a failure naming why when cuDNN cannot run the job);
 * auto, the own forward and cuDNN's backward where it was measured faster,
 * loads and builds a plan for the shape, else the own kernels, the reason
 * kept for coda_cudnn_attention_choice. Both write and read the same lse
 * (natural log-sum-exp of the scaled scores, [B*T][Hq]) and O, so a
 * forward of one and a backward of the other agree. */
static coda_status pick_attention(coda_context ctx, const coda_attn_job *j, int backward,
                                  int *cudnn) {
  *cudnn = 0;
  const char *pass = backward ? "backward" : "forward";
  switch (ctx->knobs.attention) {
    case CODA_ATTENTION_OWN:
      coda_cudnn_attention_note(ctx, "%s: own kernels (CODA_ATTENTION=own)", pass);
      return CODA_OK;
    case CODA_ATTENTION_CUDNN:
    case CODA_ATTENTION_CUDNN_NONDET: {
      const coda_status s = coda_cudnn_attention_prepare(ctx, j, backward);
      if (s) return s;
      *cudnn = 1;
      coda_cudnn_attention_note(ctx, "%s: cuDNN %zu (CODA_ATTENTION=cudnn)", pass,
                                coda_cudnn_version(ctx));
      return CODA_OK;
    }
    case CODA_ATTENTION_AUTO: {
      /* the sm80 path: the own kernels (the mma.sync family) both ways;
       * cuDNN's backward was measured faster on Hopper only */
      if (coda_cuda_sm80(ctx)) {
        coda_cudnn_attention_note(ctx, "%s: own kernels (auto on the sm80 path: the mma.sync "
                                  "family; CODA_ATTENTION=cudnn takes cuDNN)", pass);
        return CODA_OK;
      }
      /* by measurement (bench/results/attention-cudnn-2026-12-06.md, H100):
       * the own forward is as fast as cuDNN's at every shape measured, its
       * backward slower from 4096 tokens on; cuDNN's deterministic
       * backward holds a bf16 dP of B*Hq*T^2 (T in 64s) in its workspace,
       * taken only while it is at most a quarter of the device memory */
      if (!backward) {
        coda_cudnn_attention_note(ctx, "%s: own kernels (auto: the own forward is as fast)", pass);
        return CODA_OK;
      }
      if (j->hd != 64 && j->hd != 128) {
        coda_cudnn_attention_note(ctx, "%s: own kernels (auto: cuDNN runs head_dim 64 and 128)",
                                  pass);
        return CODA_OK;
      }
      if (j->window > 0 && j->window < j->T) {
        coda_cudnn_attention_note(ctx, "%s: own kernels (auto: a sliding window, which coda's "
                                  "cuDNN graph does not have)", pass);
        return CODA_OK;
      }
      if (j->T < 4096) {
        coda_cudnn_attention_note(ctx, "%s: own kernels (auto: faster below 4096 tokens)", pass);
        return CODA_OK;
      }
      const double t64 = (double)((j->T + 63) / 64 * 64);
      const double dp = 2.0 * j->B * j->Hq * t64 * t64;
      size_t mfree = 0, mtotal = 0;
      /* ... and while it fits what is free (with what the slot holds
       * already) less 2 GiB, so taking it cannot run the device out of
       * memory where the own kernels would not */
      const double held = (double)coda_cuda_workspace_held(ctx, CODA_CUDA_WS_CUDNN);
      if (cudaMemGetInfo(&mfree, &mtotal) != cudaSuccess || dp > 0.25 * (double)mtotal ||
          dp > (double)mfree + held - 2.0 * 1073741824.0) {
        (void)cudaGetLastError();
        coda_cudnn_attention_note(ctx,
                                  "%s: own kernels (auto: cuDNN's deterministic backward would "
                                  "take %.1f GiB of workspace: over a quarter of the device's "
                                  "%.1f GiB, or over its %.1f GiB free less 2)",
                                  pass, dp / 1073741824.0, (double)mtotal / 1073741824.0,
                                  ((double)mfree + held) / 1073741824.0);
        return CODA_OK;
      }
      if (coda_cudnn_attention_prepare(ctx, j, backward) == CODA_OK) {
        *cudnn = 1;
        coda_cudnn_attention_note(ctx, "%s: cuDNN %zu (auto)", pass, coda_cudnn_version(ctx));
        return CODA_OK;
      }
      char why[CODA_ERRMSG_LEN];
      snprintf(why, sizeof why, "%s", coda_last_error(ctx));
      coda_clear_error(ctx);
      coda_cudnn_attention_note(ctx, "%s: own kernels (auto: %s)", pass, why);
      return CODA_OK;
    }
    default:
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "CODA_ATTENTION is not one of auto, own, cudnn, cudnn-nondet");
  }
}

static coda_status cuda_attention_forward(coda_context ctx, const coda_attn_job *j) {
  int cudnn = 0;
  coda_status s = pick_attention(ctx, j, 0, &cudnn);
  if (s) return s;
  if (cudnn) return coda_cudnn_attention_forward(ctx, j);
  const coda_attn_mask mask = {sizeof mask, j->scale, j->window};
  return coda_cuda_attention_forward(ctx, j->qkv, j->B, j->T, j->Hq, j->Hkv, j->hd, j->out, j->lse,
                                     &mask);
}

static coda_status cuda_attention_backward(coda_context ctx, const coda_attn_job *j) {
  int cudnn = 0;
  coda_status s = pick_attention(ctx, j, 1, &cudnn);
  if (s) return s;
  if (cudnn) return coda_cudnn_attention_backward(ctx, j);
  const coda_attn_mask mask = {sizeof mask, j->scale, j->window};
  return coda_cuda_attention_backward(ctx, j->qkv, j->out, j->lse, j->dout, j->B, j->T, j->Hq,
                                      j->Hkv, j->hd, j->dqkv, j->rope, &mask);
}

static coda_status cuda_precompile_gemm_epilogue(coda_context ctx, coda_program prog, int trans_a,
                                                 int trans_b, int f16, int *from_cache) {
  coda_status s = CODA_OK;
  *from_cache = 1;
  coda_epi_config probe = coda_epi_default_config();
  coda_cuda_epi_arch(ctx, &probe);
  /* the sm80 path has one schedule */
  const int last = probe.arch == CODA_PATH_SM80 ? CODA_SCHED_PINGPONG : CODA_SCHED_COOPERATIVE;
  for (int sched = CODA_SCHED_PINGPONG; sched <= last && s == CODA_OK; sched++) {
    coda_epi_config cfg = probe;
    cfg.trans_a = trans_a;
    cfg.trans_b = trans_b;
    cfg.f16 = f16;
    cfg.sched = sched;
    coda_epi_binary bin;
    s = coda_epi_build(ctx, prog, &cfg, 0, &bin);
    *from_cache &= bin.from_cache;
    coda_epi_binary_free(&bin);
  }
  return s;
}

static const coda_train_ops cuda_train_ops = {
    .round = coda_cuda_train_round,
    .accum = coda_cuda_train_accum,
    .embed = coda_cuda_train_embed,
    .embed16 = coda_cuda_train_embed16,
    .embed_grad = coda_cuda_train_embed_grad,
    .targets = coda_cuda_train_targets,
    .sumsq = coda_cuda_train_sumsq,
    .adamw = coda_cuda_train_adamw,
    .adamw_multi = coda_cuda_train_adamw_multi,
    .adamw_bf16 = coda_cuda_train_adamw_bf16,
    .init_normal = coda_cuda_train_init_normal,
    .fill = coda_cuda_train_fill,
    .zero = coda_cuda_train_zero,
    .memory = coda_cuda_train_memory,
    .side_create = coda_cuda_side_create,
    .side_fork = coda_cuda_side_fork,
    .side_mark = coda_cuda_side_mark,
    .side_wait = coda_cuda_side_wait,
    .side_destroy = coda_cuda_side_destroy,
};

static const coda_decode_ops cuda_decode_ops = {
    .embed = coda_cuda_decode_embed,
    .linear = coda_cuda_decode_linear,
    .attention = coda_cuda_decode_attention,
    .gather_rows = coda_cuda_decode_gather_rows,
    .sample = coda_cuda_decode_sample,
    .row_step = coda_cuda_decode_row_step,
    .row_step_ok = coda_cuda_decode_row_step_ok,
};

/* Timing markers: CUDA events recorded on the context's stream. */
typedef struct {
  int n;
  cudaEvent_t ev[];
} cuda_timer_set;

static coda_status cuda_timer_fail(coda_context ctx, const char *what, cudaError_t e) {
  return coda_fail(ctx, CODA_ERR_BACKEND, "%s: %s", what, cudaGetErrorString(e));
}
static void cuda_timer_destroy(coda_context ctx, void *set) {
  (void)ctx;
  cuda_timer_set *t = set;
  if (!t) return;
  for (int i = 0; i < t->n; i++) cudaEventDestroy(t->ev[i]);
  free(t);
}
static coda_status cuda_timer_create(coda_context ctx, int n, void **set) {
  cuda_timer_set *t = calloc(1, sizeof *t + (size_t)n * sizeof(cudaEvent_t));
  if (!t) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (; t->n < n; t->n++) {
    cudaError_t e = cudaEventCreate(&t->ev[t->n]);
    if (e != cudaSuccess) {
      cuda_timer_destroy(ctx, t);
      return cuda_timer_fail(ctx, "cudaEventCreate", e);
    }
  }
  *set = t;
  return CODA_OK;
}
static coda_status cuda_timer_record(coda_context ctx, void *set, int i) {
  cudaError_t e = cudaEventRecord(((cuda_timer_set *)set)->ev[i], coda_cuda_stream(ctx));
  return e == cudaSuccess ? CODA_OK : cuda_timer_fail(ctx, "cudaEventRecord", e);
}
static coda_status cuda_timer_elapsed(coda_context ctx, void *set, int a, int b, double *ms) {
  cuda_timer_set *t = set;
  cudaError_t e = cudaEventSynchronize(t->ev[b]);
  float f = 0.0f;
  if (e == cudaSuccess) e = cudaEventElapsedTime(&f, t->ev[a], t->ev[b]);
  if (e != cudaSuccess) return cuda_timer_fail(ctx, "cudaEventElapsedTime", e);
  *ms = (double)f;
  return CODA_OK;
}

const coda_backend_ops coda_cuda_backend_ops = {
    .name = "cuda",
    .kind = CODA_BACKEND_CUDA,
    .available = coda_cuda_device_usable,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_bytes = cuda_copy_bytes,
    .copy = cuda_copy,
    /* no path_check: both paths run every table entry; the Hopper-only
     * kernels refuse the sm80 path themselves (coda_cuda_hopper_only) */
    .synchronize = coda_cuda_sync,
    .tags = cuda_tags,
    .gemm = cuda_gemm,
    .gemm_epilogue = cuda_gemm_epilogue,
    .map = cuda_map,
    .finish = cuda_finish,
    .preferred_tiling = coda_cuda_preferred_tiling,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .train = &cuda_train_ops,
    .decode = &cuda_decode_ops,
    .timer_create = cuda_timer_create,
    .timer_record = cuda_timer_record,
    .timer_elapsed = cuda_timer_elapsed,
    .timer_destroy = cuda_timer_destroy,
    .graph_begin = coda_cuda_graph_begin,
    .graph_end = coda_cuda_graph_end,
    .graph_launch = coda_cuda_graph_launch,
    .graph_destroy = coda_cuda_graph_destroy,
    .precompile_gemm_epilogue = cuda_precompile_gemm_epilogue,
    .precompile_map = coda_cuda_map_precompile,
    .program_source = coda_cuda_program_source,
    .program_compile = coda_cuda_program_compile,
};
