/* The epilogue compiler: an epilogue program (src/lang/ir.h) becomes the
 * Epi functor of the Hopper GEMM mainloop (gemm_sm90.cuh) or of the sm_80
 * one (gemm_sm80.cuh), compiled at run time with NVRTC. Plain C; usable without a GPU (code generation and
 * compilation only need the NVRTC library). */
#ifndef CODA_CUDA_EPI_CODEGEN_H
#define CODA_CUDA_EPI_CODEGEN_H

#include "coda.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The GPU's partial granularity: one consumer warpgroup owns 64 rows, a
 * CTA tile has CODA_EPI_BN columns. */
#define CODA_EPI_TILE_M 64
#define CODA_EPI_BN 128
#define CODA_EPI_STAGES 6
/* Argument slots of the kernel's parameter block (inputs, outputs,
 * reductions in program order; 24 + 16 + 16 fit). */
#define CODA_EPI_MAX_ARGS 64
/* Outputs 0 .. CODA_EPI_MAX_TMA-1 may be stored by TMA from the staging;
 * the first CODA_EPI_MAX_TMA_IN staged tile inputs may be loaded by TMA
 * into it (maps in slots CODA_EPI_MAX_TMA ..). */
#define CODA_EPI_MAX_TMA 8
#define CODA_EPI_MAX_TMA_IN 4
/* The sm_80 mainloop (gemm_sm80.cuh): CTA tiles of CODA_EPI_SM80_BM rows
 * (two groups of 4 warps) x CODA_EPI_BN, k-blocks of 32, this many stages
 * (fewer where the shared memory of a block is smaller), 256 threads. */
#define CODA_EPI_SM80_BM 128
#define CODA_EPI_SM80_STAGES 4
#define CODA_EPI_SM80_THREADS (2 * CODA_EPI_SM80_BM)
/* The shared memory of a block the sm80 path sizes its stages for: the
 * 99 KiB of sm_86/sm_89 (A100 and Hopper have more). */
#define CODA_EPI_SM80_SMEM_MAX (99 * 1024)

/* Kernel instantiation chosen for one launch. */
typedef struct coda_epi_config {
  int bn;      /* columns per CTA tile (128) */
  int stages;  /* pipeline depth */
  int ping;    /* 1: pingpong schedule, 0: cooperative */
  int trans_a; /* 1: A stored K x M */
  int trans_b; /* 1: B stored N x K */
  int f16;     /* 1: fp16 operands, 0: bf16 */
  int sched;   /* CODA_SCHED_*: AUTO = the rule in coda_epi_build, else forced */
  int scratch; /* epilogue scratch bytes per consumer warpgroup (0 = the
                * header's default); coda_epi_config_for sets it */
  int arch;    /* the mainloop: CODA_PATH_SM80 (80) gemm_sm80.cuh, else
                * (0 or 90) gemm_sm90.cuh */
  int cc;      /* sm80 path: the architecture NVRTC compiles for, as
                * 10 * major + minor (80, 86, 89, 90, ...; 0: 80) */
} coda_epi_config;

/* The configuration a program's kernels run with: its scratch
 * (coda_epi_scratch_bytes) and as many stages as then fit. */
void coda_epi_config_for(coda_program p, coda_epi_config *cfg);
/* Epilogue scratch a program is given: the header's 16 KB, or 32 KB when
 * that stages tile accesses the 16 KB left direct (the mainloop then runs
 * one stage fewer). */
long coda_epi_scratch_bytes(coda_program p);

coda_epi_config coda_epi_default_config(void);

/* Parameter block of the generated functor; the device struct CodaEpiParams
 * in the generated source has exactly this layout. ld: row pitch of
 * tiles, outputs and partials, element stride of row/column vectors.
 * flags: bit 0 = element pairs at even columns are naturally aligned
 * (32-bit / 64-bit access), bit 1 = same for groups of four, bit 2 = the
 * view has a TMA map (box: one staged chunk, 64 rows x
 * coda_epi_chunk_row_bytes, swizzled like the staging): outputs in
 * tm[output index] (store or reduce-add), staged tile inputs in the slot
 * coda_epi_input_tma_slots gives (load).
 * tm holds CUtensorMap values (64-byte aligned, opaque here). cnt: the
 * number of partial columns T of a rowsum input (its view is M x T, ld its
 * row pitch), 0 for other arguments. */
typedef struct coda_epi_params {
  _Alignas(64) unsigned long long tm[CODA_EPI_MAX_TMA + CODA_EPI_MAX_TMA_IN][16];
  const void *ptr[CODA_EPI_MAX_ARGS];
  long long ld[CODA_EPI_MAX_ARGS];
  int flags[CODA_EPI_MAX_ARGS];
  int cnt[CODA_EPI_MAX_ARGS];
  int M, N;
} coda_epi_params;

/* Fills the parameter block for a program's views in argument order
 * (inputs, outputs, partials): pointers, pitches (vectors: element
 * stride), alignment flags; no TMA maps (the fused GEMM adds those). */
void coda_epi_fill_params(coda_epi_params *pp, coda_program p, const coda_tensor *const *inputs,
                          const coda_tensor *const *outputs, const coda_tensor *const *partials,
                          int64_t M, int64_t N);

/* For each input of the program, the tm slot of its TMA load map when the
 * staging plan stages it and a slot is free, else -1 (slot[k], ninputs
 * entries). The generated code loads a program's staged inputs by TMA
 * only when every one of them has a slot and a map (flags bit 2). */
void coda_epi_input_tma_slots(coda_program p, int *slot);

/* Bytes of one 32-column chunk row of a view of this type and width as the
 * epilogue stages it in shared memory (32, 64 or 128), 0 if not staged. */
int coda_epi_chunk_row_bytes(coda_dtype t, coda_width w);

/* CODA_OK if the GPU path can run the program; otherwise a message in terms
 * of the program (e.g. an f64 declaration) and CODA_ERR_NOT_SUPPORTED. */
coda_status coda_epi_supported(coda_context ctx, coda_program p);

/* CUDA source of the functor `CodaEpi` alone (malloc'ed), or NULL with the
 * error recorded on ctx: for the sm_90 mainloop, or (_for) for the one of
 * arch (CODA_PATH_SM80: no TMA, mbarrier or bulk-copy instructions; staged
 * outputs leave as 16-byte vector stores, staged inputs come by cp.async). */
char *coda_epi_functor_source(coda_context ctx, coda_program p);
char *coda_epi_functor_source_for(coda_context ctx, coda_program p, int arch);

/* Complete NVRTC translation unit: prelude, the embedded mainloop headers,
 * the functor; *kernel_expr (malloc'ed) is the name expression of the
 * kernel instantiation to look up. */
char *coda_epi_full_source(coda_context ctx, coda_program p, const coda_epi_config *cfg,
                           char **kernel_expr);

/* Dynamic shared memory of the kernel instantiation (matches
 * coda_sm90::smem_bytes<BN, STAGES>() or, sm80,
 * coda_sm80::smem_bytes<BM, BN, STAGES>()). */
size_t coda_epi_smem_bytes(const coda_epi_config *cfg);

/* Compiles a translation unit with NVRTC for sm_90a and returns the cubin
 * (malloc'ed) and the lowered kernel name (malloc'ed). log (optional,
 * malloc'ed) receives the compiler log (with ptxas statistics). Uses the
 * on-disk cache (CODA_CACHE_DIR or ~/.cache/coda) unless no_cache. math:
 * the program's (coda_program_math); CODA_MATH_FAST compiles with
 * contraction and approximate division and square root. */
coda_status coda_epi_compile(coda_context ctx, const char *source, const char *kernel_expr,
                             coda_math math, int no_cache, void **cubin, size_t *cubin_size, char **lowered,
                             char **log, int *from_cache, int *spill);
/* The same for an NVRTC target ("sm_90a", "sm_80", "sm_86", "sm_90", ...). */
coda_status coda_epi_compile_for(coda_context ctx, const char *target, const char *source,
                                 const char *kernel_expr, coda_math math, int no_cache, void **cubin,
                                 size_t *cubin_size, char **lowered, char **log, int *from_cache,
                                 int *spill);
/* The NVRTC target of a configuration into buf: sm_90a for the sm_90
 * mainloop, sm_<cc> for the sm80 one. */
const char *coda_epi_target(const coda_epi_config *cfg, char *buf, size_t n);

/* A compiled kernel for a program: by default the pingpong schedule (two
 * fragments per thread, its epilogue overlaps the other consumer's MMAs)
 * for programs with neither tile inputs nor reductions, else the
 * cooperative one (one 64-row fragment per thread); $CODA_EPI_SCHEDULE =
 * "pingpong" or "cooperative" forces one. A pingpong kernel that spills
 * registers is replaced by the cooperative one. cfg: operand layout and
 * type in, schedule out. */
typedef struct coda_epi_binary {
  void *cubin;
  size_t size;
  char *lowered;
  int spill;      /* spill-store bytes reported by ptxas (-1 unknown) */
  int from_cache;
} coda_epi_binary;
coda_status coda_epi_build(coda_context ctx, coda_program p, coda_epi_config *cfg, int no_cache,
                           coda_epi_binary *out);
void coda_epi_binary_free(coda_epi_binary *b);

/* A program's key in a context's table of loaded kernels: the hash of its
 * canonical text and IR listing. A program is immutable once built and the
 * two determine its generated functor (the text parses back to an equal
 * program), so a launch need not generate the functor (16-58 us on the
 * built-in programs) to find its kernel; the source is generated on a
 * miss only. */
uint64_t coda_epi_program_key(coda_program p, uint64_t seed);

/* Embedded header texts (NUL-terminated). */
extern const char coda_epi_hdr_gemm_sm90[];
/* The sm_80 mainloop (gemm_sm80.cuh). */
extern const char coda_epi_hdr_gemm_sm80[];
extern const char coda_epi_hdr_wgmma[];
/* The device helpers of the generated functors (epi_helpers.cuh). */
extern const char coda_epi_hdr_helpers[];
/* The shared Hopper PTX wrappers (ptx_sm90.cuh). */
extern const char coda_epi_hdr_ptx_sm90[];

#ifdef __cplusplus
}
#endif
#endif
