/* Code generation: epilogue program IR -> CUDA source of an Epi functor for
 * the Hopper mainloop (gemm_sm90.cuh) or the sm_80 one (gemm_sm80.cuh,
 * coda_epi_config.arch = CODA_PATH_SM80), whose fragment has the same
 * layout. For sm_80 the functor is the same less the TMA loads and stores,
 * mbarrier waits and bulk-copy fences and waits (gen.sm80): staged inputs
 * come by cp.async, staged outputs leave as 16-byte vectors, the paths the
 * sm_90 functor takes at run time for views without a TMA map.
 *
 * This file holds the driver: coda_epi_functor_source plans the functor
 * (hoisting, staging, one emitter per argument) and prints its loop
 * structure, calling the arguments' hooks at each phase (epi_emit.h; the
 * emitters are in epi_emit_args.c and epi_emit_reduce.c, the instructions
 * in epi_emit_ops.c, the staging in epi_emit_stage.c); around it the
 * translation unit (prelude, embedded headers, epi_helpers.cuh), the
 * configuration and scratch rules and the build with its schedule choice.
 *
 * Each consumer thread holds BN/2 accumulator values of a 64 x BN block:
 * value i at row row0 + 8*((i>>1)&1), column col0 + 8*(i>>2) + (i&1). The
 * functor walks them as (j, h) groups: j = i>>2 picks the column pair
 * (c, c+1) with c = col0 + 8j, h = (i>>1)&1 the row. A group is two
 * iteration points in elem mode and one in pair mode. Loops have constant
 * trip counts and are fully unrolled, so every fragment index is a
 * compile-time constant and the fragment stays in registers.
 *
 * Per group, every input the program reads is loaded once (column vectors
 * once per j, row vectors and scalars once per fragment), pairs of adjacent
 * 16-bit values with one 32-bit access (x2 tiles: four values, 64 bits)
 * when the view is aligned; points outside M x N load nothing and store
 * nothing. The instructions then run as straight-line fp32 code. Tile
 * inputs and outputs that fit the scratch are staged there in 64 x 32
 * chunks instead (see epi_plan_staging): 16-byte cp.async loads, rounded values
 * written to shared memory and stored by TMA (accumulating f32 outputs: TMA
 * reduce-add) or as row-contiguous 16-byte vectors.
 *
 * Reductions (deterministic, no atomics):
 *  - row partials (rowsum/rowmax/rowlse, and segmented rowsum with segment
 *    g >= 8 columns): each thread folds its values of a row, the quad of 4
 *    lanes sharing the row combines with xor-1 and xor-2 shuffles, and lane
 *    0 of the quad writes the partial of (row, column tile or segment);
 *  - segments narrower than 8 columns: g = 1, 2 lie inside one thread's
 *    column pair, g = 4 spans two lanes (one xor-1 shuffle);
 *  - rowpick: the single thread holding column idx[m] writes it;
 *  - colsum over the warpgroup's 64 rows: the two rows of a thread are
 *    added, shuffles xor 4, 8, 16 sum the 8 row groups of a warp, lanes 0-3
 *    put the warp's column sums into the shared scratch, and after a
 *    warpgroup barrier thread t adds the 4 warps' sums of column t in order.
 * This fixes the partial tiling at tile_m = 64, tile_n = BN. */
#include "backends/cuda/epi_codegen.h"
#include "backends/cuda/epi_emit.h"

#include "base/arch.h"
#include "base/internal.h"
#include "base/strbuf.h"
#include "lang/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long scratch_bytes(void);
size_t coda_epi_smem_bytes(const coda_epi_config *cfg);

#define CODA_EPI_PINGPONG_MAX_CUBIN (150 * 1024)

static int is_sm80(const coda_epi_config *cfg) { return cfg->arch == CODA_PATH_SM80; }

/* As many mainloop stages as fit, with the configuration's scratch, in the
 * 227 KiB of shared memory of a Hopper block (sm80: in the 99 KiB of the
 * smallest sm_8x block). */
static void fit_stages(coda_epi_config *cfg) {
  const int sm80 = is_sm80(cfg);
  const size_t cap = sm80 ? CODA_EPI_SM80_SMEM_MAX : 232448;
  cfg->stages = sm80 ? CODA_EPI_SM80_STAGES : CODA_EPI_STAGES;
  while (cfg->stages > 2 && coda_epi_smem_bytes(cfg) > cap) cfg->stages--;
}

coda_epi_config coda_epi_default_config(void) {
  coda_epi_config c = {CODA_EPI_BN, CODA_EPI_STAGES, 0, 0, 1, 0, CODA_SCHED_AUTO, 0, 0, 0};
  fit_stages(&c);
  return c;
}

/* The epilogue scratch per consumer warpgroup, as the embedded mainloop
 * header declares it (the generated source static_asserts that this host
 * computation matches the header's smem_bytes). */
static long scratch_bytes(void) {
  const char *k = strstr(coda_epi_hdr_gemm_sm90, "#define CODA_EPI_SCRATCH_BYTES ");
  long v = k ? strtol(k + strlen("#define CODA_EPI_SCRATCH_BYTES "), NULL, 10) : 0;
  return v > 0 ? v : 64 * 40 * 4;
}

/* gemm_sm80.cuh's pitch<>: an operand buffer of `ext` rows (m or n) x 32 k
 * or 32 rows x `ext`, rows padded by 16 bytes; the larger of the two. */
static size_t sm80_operand_bytes(size_t ext) {
  const size_t kmajor = ext * (2 * 32 + 16), mnmajor = 32 * (2 * ext + 16);
  return kmajor > mnmajor ? kmajor : mnmajor;
}

size_t coda_epi_smem_bytes(const coda_epi_config *cfg) {
  const size_t scratch = cfg->scratch > 0 ? (size_t)cfg->scratch : (size_t)scratch_bytes();
  if (is_sm80(cfg)) {
    /* the stages, or the two groups' scratches that reuse them, + 128
     * bytes of alignment slack (coda_sm80::smem_bytes) */
    const size_t pipe = (size_t)cfg->stages * (sm80_operand_bytes(CODA_EPI_SM80_BM) + sm80_operand_bytes((size_t)cfg->bn));
    const size_t epi = (size_t)(CODA_EPI_SM80_BM / 64) * scratch;
    return (pipe > epi ? pipe : epi) + 128;
  }
  /* STAGES x (A + B) k-blocks + 2 epilogue scratches + 2 x STAGES mbarriers
   * + 4 epilogue-load mbarriers + 1024 bytes of alignment slack. */
  return (size_t)cfg->stages * (128 + cfg->bn) * 64 * 2 + 2 * scratch +
         (2 * (size_t)cfg->stages + 4) * 8 + 1024;
}

uint64_t coda_epi_program_key(coda_program p, uint64_t seed) {
  const char *t = coda_program_text(p), *ir = coda_program_ir(p);
  return coda_fnv1a64(ir, strlen(ir), coda_fnv1a64(t, strlen(t), seed));
}

/* ------------------------------------------------------------ buffer */

static char *sb_take(coda_context ctx, coda_strbuf *b) {
  char *s = coda_sb_take(b);
  if (!s) coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory while generating CUDA source");
  return s;
}

/* ------------------------------------------------------------ checks */

coda_status coda_epi_supported(coda_context ctx, coda_program pg) {
  const struct coda_program_s *p = pg;
  if (!p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "CUDA epilogue: program is NULL");
  /* a parameter's uses are constants holding its value (a literal in the
   * generated code, and so part of the program key and the source hash) */
  coda_status ps = ir_check_params(ctx, p, "CUDA epilogue");
  if (ps) return ps;
  if (ir_needs_passes(p))
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the program reads a finished statistic or has a total: it runs as %d passes, "
                     "each its own kernel (coda_program_pass gives them)", coda_program_num_passes(pg));
  for (int i = 0; i < p->ninputs; i++)
    if (p->inputs[i].dtype == CODA_F64)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "input '%s' is f64: exact mode (fp64) programs run only on the CPU backend",
                       p->inputs[i].name);
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].dtype == CODA_F64 || p->outputs[i].dtype == CODA_I32)
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "output '%s' is %s: the GPU stores bf16, f16 or f32 outputs",
                       p->outputs[i].name, coda_dtype_name(p->outputs[i].dtype));
  if (p->pair_mode && p->pair_split) {
    /* a thread holds columns c, c + 1 of the pairs j = 0 .. BN/8 - 1 at
     * c = col0 + 8j: columns k and k + S/2 of a segment are then the same
     * thread's when S/2 is a multiple of 8 and the tile holds whole segments */
    const int S = p->pair_split;
    if (S == CODA_PAIR_SPLIT_ROW || S % 16 != 0 || CODA_EPI_BN % S != 0) {
      char seg[24] = "";
      if (S != CODA_PAIR_SPLIT_ROW) snprintf(seg, sizeof seg, " %d", S);
      return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                       "mode pair split%s: the GPU epilogue pairs columns within one %d-column tile, "
                       "so it needs a segment S with S %% 16 == 0 and %d %% S == 0 (16, 32, 64 or 128: "
                       "a head size); halves of the whole row ([gate | up]) run on the CPU only, or "
                       "interleave the weight's columns and use mode pair",
                       seg, CODA_EPI_BN, CODA_EPI_BN);
    }
    for (int i = 0; i < p->nreduces; i++)
      if (ir_reduce_is_segmented(p->reduces[i].kind) && p->reduces[i].segment < 8)
        return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                         "reduction '%s': with half-split pairs the GPU epilogue takes segments of 8 "
                         "columns or more, found %d",
                         p->reduces[i].name, p->reduces[i].segment);
  }
  int ncol = 0;
  for (int i = 0; i < p->nreduces; i++) ncol += ir_reduce_is_col(p->reduces[i].kind);
  /* 4 warps x BN floats per colsum in the 64 x 40-float scratch. */
  const long cap = scratch_bytes() / (4 * 4 * CODA_EPI_BN);
  if (ncol > cap)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED,
                     "the program has %d colsum/colmax reductions; the GPU epilogue stages at most %ld "
                     "at once in shared memory",
                     ncol, cap);
  if (p->ninputs + p->noutputs + p->nreduces > CODA_EPI_MAX_ARGS)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "too many arguments for the GPU epilogue");
  return CODA_OK;
}

/* ------------------------------------------------------------ prelude */

/* Types NVRTC lacks without the toolkit headers, and the device helpers
 * the generated functors call. */
static const char kPrelude[] =
    "/* generated by the coda epilogue compiler */\n"
    "typedef unsigned char uint8_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "typedef int int32_t;\n"
    "typedef long long int64_t;\n"
    "#ifndef CUDA_VERSION\n"
    "typedef struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; } CUtensorMap;\n"
    "#endif\n"
    "/* The 16-bit types and conversions the mainloop header uses (NVRTC has\n"
    " * no toolkit headers at run time); conversions round to nearest even. */\n"
    "struct alignas(2) __nv_bfloat16 { unsigned short x; };\n"
    "struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };\n"
    "struct alignas(2) __half { unsigned short x; };\n"
    "struct alignas(4) __half2 { __half x, y; };\n"
    "__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }\n"
    "__device__ __forceinline__ float2 __bfloat1622float2(__nv_bfloat162 h) {\n"
    "  return make_float2(__bfloat162float(h.x), __bfloat162float(h.y)); }\n"
    "__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {\n"
    "  __nv_bfloat16 r; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r.x) : \"f\"(f)); return r; }\n"
    "__device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {\n"
    "  unsigned u; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
    "  __nv_bfloat162 r; r.x.x = (unsigned short)(u & 0xffffu); r.y.x = (unsigned short)(u >> 16); return r; }\n"
    "__device__ __forceinline__ float __half2float(__half h) {\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h.x)); return f; }\n"
    "__device__ __forceinline__ float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }\n"
    "__device__ __forceinline__ __half __float2half_rn(float f) {\n"
    "  __half r; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(r.x) : \"f\"(f)); return r; }\n"
    "__device__ __forceinline__ __half2 __floats2half2_rn(float a, float b) {\n"
    "  unsigned u; asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
    "  __half2 r; r.x.x = (unsigned short)(u & 0xffffu); r.y.x = (unsigned short)(u >> 16); return r; }\n"
    "#define CODA_INF __int_as_float(0x7f800000)\n";

/* The device helpers and CodaEpiParams come from epi_helpers.cuh
 * (coda_epi_hdr_helpers). */
_Static_assert(CODA_EPI_MAX_TMA + CODA_EPI_MAX_TMA_IN == 12, "CodaEpiParams.tm in epi_helpers.cuh");

/* ------------------------------------------------------------ functor */

/* Calls phase `ph` of the arguments first .. last-1 in argument order. */
static void visit(gen *g, epi_phase ph, int first, int last) {
  for (int i = first; i < last; i++)
    if (g->args[i].em->hook[ph]) g->args[i].em->hook[ph](g, g->args[i].idx);
}
static void visit_all(gen *g, epi_phase ph) { visit(g, ph, 0, g->nargs); }

/* The functor's plan: hoisting, the inputs read, the staging and the
 * arguments with their emitters (inputs the program reads, outputs,
 * reductions). */
static void plan_functor(gen *g, const struct coda_program_s *p, coda_strbuf *b, long scratch, int arch) {
  memset(g, 0, sizeof *g);
  g->sm80 = arch == CODA_PATH_SM80;
  g->ns = g->sm80 ? "coda_sm80" : "coda_sm90";
  g->p = p;
  g->b = b;
  g->pair = p->pair_mode;
  g->split = p->pair_mode ? p->pair_split : 0;
  g->arg_out0 = p->ninputs;
  g->arg_red0 = p->ninputs + p->noutputs;
  g->scratch = scratch;
  epi_plan_hoist(g);
  g->ncol = epi_program_reads(p, g->used);
  epi_plan_staging(p, g->used, scratch, &g->sp);
  g->staged = g->sp.nin + g->sp.nout > 0;
  /* staged inputs come by TMA (tin, decided at run time: every staged
   * input has a map) or by cp.async from all threads */
  g->tma_in = g->sp.nin > 0 && epi_input_slots(p, &g->sp, g->slot) && !g->sm80;
  for (int k = 0; k < p->ninputs; k++) {
    g->in_em[k] = epi_input_emitter(p->inputs[k].kind);
    if (g->used[k]) g->args[g->nargs++] = (epi_arg){g->in_em[k], k};
  }
  g->nin_args = g->nargs;
  for (int o = 0; o < p->noutputs; o++) g->args[g->nargs++] = (epi_arg){&epi_output_emitter, o};
  for (int q = 0; q < p->nreduces; q++) {
    g->args[g->nargs++] = (epi_arg){epi_reduce_emitter(&p->reduces[q]), q};
    if (epi_is_row_fold(&p->reduces[q]) && epi_seg_width(&p->reduces[q]) >= CODA_EPI_BN) g->any_row_end = 1;
  }
}

/* The comments naming the program and its arguments, the struct, finish()
 * and prefetch(). */
static void emit_head(gen *g) {
  const struct coda_program_s *p = g->p;
  coda_strbuf *b = g->b;
  coda_sb_printf(b, "/* program (%s mode%s%s): %d instructions, %d inputs, %d outputs, %d reductions */\n",
            g->pair ? "pair" : "elem", g->split ? ", half-split pairs" : "", p->math_fast ? ", math fast" : "", p->ninstrs, p->ninputs, p->noutputs, p->nreduces);
  coda_sb_printf(b, "/* arguments:");
  for (int k = 0; k < p->ninputs; k++)
    coda_sb_printf(b, " %d=%s(%s %s%s)", k, p->inputs[k].name, g->in_em[k]->name,
              coda_dtype_name(p->inputs[k].dtype),
              p->inputs[k].width == CODA_WIDTH_X2 ? " x2" : p->inputs[k].width == CODA_WIDTH_HALF ? " half" : "");
  for (int o = 0; o < p->noutputs; o++)
    coda_sb_printf(b, " %d=%s(output)", g->arg_out0 + o, p->outputs[o].name);
  for (int q = 0; q < p->nreduces; q++)
    coda_sb_printf(b, " %d=%s(%s)", g->arg_red0 + q, p->reduces[q].name, ir_reduce_kind_name(p->reduces[q].kind));
  coda_sb_printf(b, " */\n");
  /* the host fills coda_epi_params (epi_codegen.h): the two layouts agree */
  coda_sb_printf(b, "static_assert(sizeof(CodaEpiParams) == %zu, \"CodaEpiParams as the host's coda_epi_params\");\n",
                 sizeof(coda_epi_params));
  coda_sb_printf(b, "struct CodaEpi {\n  CodaEpiParams p;\n");
  if (g->sp.nout && !g->sm80) /* the shared memory must outlive the last TMA stores' reads */
    coda_sb_printf(b, "  __device__ __forceinline__ void finish() const { if (threadIdx.x %% 128 == 0) coda_sm90::bulk_wait_all(); }\n");
  else
    coda_sb_printf(b, "  __device__ __forceinline__ void finish() const {}\n");
  /* the GEMM calls prefetch() during the mainloop: the first chunk's
   * inputs are then on their way when the fragment arrives */
  coda_sb_printf(b, "  __device__ __forceinline__ void prefetch(int wr0, int tc0, const %s::EpiScratch &sc) const {\n", g->ns);
  if (g->sp.nin && g->sp.dbl) {
    coda_sb_printf(b, "    const int M = p.M, N = p.N;\n    uint8_t *const sb_ = (uint8_t *)sc.buf;\n");
    visit(g, EPI_STAGE_DECL, 0, g->nin_args);
    if (g->tma_in) epi_emit_tin(g, "    ");
    epi_emit_fetch(g, "0", "0", NULL, "    ");
  } else {
    coda_sb_printf(b, "    (void)wr0; (void)tc0; (void)sc;\n");
  }
  coda_sb_printf(b, "  }\n");
}

/* operator(): the thread's coordinates, the staging's flags, what is loaded
 * once per fragment, the hoisted row values and the reduction state. */
static void emit_fragment_begin(gen *g) {
  coda_strbuf *b = g->b;
  coda_sb_printf(b, "  template <int BN>\n  __device__ __forceinline__ void operator()("
               "const %s::AccFragment<BN> &f, const %s::EpiScratch &sc) const {\n", g->ns, g->ns);
  coda_sb_printf(b, "    static_assert(BN == %d, \"partials are generated for tile_n = %d\");\n", CODA_EPI_BN, CODA_EPI_BN);
  coda_sb_printf(b, "    static_assert(%s::kEpiScratchBytes == %ld, \"the staging plan's scratch\");\n", g->ns, g->scratch);
  if (g->ncol)
    coda_sb_printf(b, "    static_assert(%d * 4 * BN * 4 <= %s::kEpiScratchBytes, \"colsum scratch\");\n", g->ncol, g->ns);
  coda_sb_printf(b, "    const int M = p.M, N = p.N;\n");
  coda_sb_printf(b, "    const int lane = threadIdx.x %% 32, qd = lane %% 4, warp = (threadIdx.x %% 128) / 32;\n");
  coda_sb_printf(b, "    const int tc0 = f.col0 - 2 * qd;   /* first column of the tile */\n");
  coda_sb_printf(b, "    const int tn = tc0 / BN;           /* column tile */\n");
  coda_sb_printf(b, "    const int wr0 = f.row0 - warp * 16 - lane / 4; /* first row of the warpgroup's 64 */\n");
  coda_sb_printf(b, "    (void)tn; (void)wr0; (void)warp; (void)sc;\n");
  if (g->staged) {
    /* all 128 threads of the warpgroup take part (barriers) */
    coda_sb_printf(b, "    uint8_t *const sb_ = (uint8_t *)sc.buf;\n");
    coda_sb_printf(b, "    const int lrow = f.row0 - wr0; /* the thread's row in the chunk (and lrow + 8) */\n");
    coda_sb_printf(b, "    (void)lrow;\n");
    visit_all(g, EPI_STAGE_DECL);
    if (g->tma_in) epi_emit_tin(g, "    ");
  }
  visit(g, EPI_BEGIN, 0, g->nin_args);
  epi_emit_hoist_prelude(g);
  visit(g, EPI_BEGIN, g->nin_args, g->nargs); /* reduction state */
}

/* A chunk's staged inputs fetched (the next one's while this one is
 * computed when double-buffered) and the barriers that make the chunk's
 * inputs visible and the staging writable. */
static void emit_chunk_fetch(gen *g) {
  coda_strbuf *b = g->b;
  const stage_plan *sp = &g->sp;
  const int tma_in = g->tma_in;
  /* TMA: chunk c of a fragment uses buffer c % 2 (double) or 0 (single);
   * every fragment runs the same chunks, so each barrier's phase parity
   * is 0 at a fragment's first use */
  if (sp->nin && sp->dbl) {
    coda_sb_printf(b, "      if (jc + %d < BN / 8) {\n", EPI_JC);
    char buf[48];
    snprintf(buf, sizeof buf, "(jc / %d + 1) & 1", EPI_JC);
    epi_emit_fetch(g, "jc + 4", buf, "coda_epi::cp_wait<1>();", "        ");
    coda_sb_printf(b, "      } else {\n");
    coda_sb_printf(b, "        %scoda_epi::cp_wait<0>();\n      }\n", tma_in ? "if (!tin) " : "");
  } else if (sp->nin) {
    epi_emit_fetch(g, "jc", "0", "coda_epi::cp_wait<0>();", "      ");
  }
  /* the chunk's inputs are visible to all; the previous chunk's staged
   * outputs have been stored */
  /* TMA stores of earlier chunks must have read the output staging this
   * chunk writes (with two buffers: the store of chunk jc - 2) */
  if (sp->frag) return; /* (its staging is ordered once per fragment) */
  if (sp->nout && !g->sm80)
    coda_sb_printf(b, "      if (threadIdx.x %% 128 == 0) coda_sm90::bulk_wait_read<%d>();\n", sp->out_dbl ? 1 : 0);
  if (g->staged) {
    /* cp.async'ed inputs and the output staging need the barrier; TMA'd
     * inputs are visible to every thread that waits on their mbarrier */
    if (tma_in && !sp->nout) coda_sb_printf(b, "      if (!tin) coda_sm90::wg_sync(sc.bar);\n");
    else coda_sb_printf(b, "      %s::wg_sync(sc.bar);\n", g->ns);
  }
  if (tma_in) {
    if (sp->dbl) coda_sb_printf(b, "      if (tin) coda_sm90::mbar_wait(&sc.ld_bar[(jc / %d) & 1], (jc / %d) & 1);\n", EPI_JC, 2 * EPI_JC);
    else coda_sb_printf(b, "      if (tin) coda_sm90::mbar_wait(&sc.ld_bar[0], (jc / %d) & 1);\n", EPI_JC);
  }
}

/* One chunk of EPI_JC column pairs: every input of a chunk is loaded
 * before any of its stores, so the loads are in flight together (a store
 * may alias a later load as far as the compiler knows); then the groups
 * (j, h) and their points. */
static void emit_chunk(gen *g) {
  coda_strbuf *b = g->b;
  emit_chunk_fetch(g);
  visit_all(g, EPI_CHUNK_DECL);
  coda_sb_printf(b, "#pragma unroll\n      for (int jj = 0; jj < %d; ++jj) {\n", EPI_JC);
  coda_sb_printf(b, "        const int c = f.col0 + 8 * (jc + jj);\n");
  coda_sb_printf(b, "        const bool cok0 = c < N, cok1 = c + 1 < N;\n");
  /* half-split pairs: the loads of a point's two column pairs are made at
   * its first one (a compile-time test once unrolled) */
  if (g->split) coda_sb_printf(b, "        if (((jc + jj) / %d) %% 2 == 0) {\n", g->split / 16);
  visit_all(g, EPI_PAIR_LOAD);
  coda_sb_printf(b, "#pragma unroll\n        for (int h = 0; h < 2; ++h) {\n");
  coda_sb_printf(b, "          const int r = f.row0 + 8 * h;\n");
  coda_sb_printf(b, "          const bool ok0 = r < M && cok0, ok1 = r < M && cok1;\n");
  coda_sb_printf(b, "          const long long ro = (long long)r;\n          (void)ro; (void)ok1;\n");
  visit_all(g, EPI_HALF_LOAD);
  coda_sb_printf(b, "        }\n      }\n");
  if (g->split) coda_sb_printf(b, "      }\n");
  visit_all(g, EPI_FOLD_DECL);
  coda_sb_printf(b, "#pragma unroll\n    for (int jj = 0; jj < %d; ++jj) {\n", EPI_JC);
  coda_sb_printf(b, "      const int j = jc + jj;\n");
  coda_sb_printf(b, "      const int c = f.col0 + 8 * j;\n");
  coda_sb_printf(b, "      const bool cok0 = c < N, cok1 = c + 1 < N;\n");
  /* half-split pairs: the points are computed at their first column pair;
   * the segment ends (EPI_FLUSH) are visited at every pair */
  if (g->split) coda_sb_printf(b, "      const bool lo_ = (j / %d) %% 2 == 0; (void)lo_;\n", g->split / 16);
  visit_all(g, EPI_GROUP); /* (the buffers of skipped pairs are zero-initialized) */
  coda_sb_printf(b, "#pragma unroll\n      for (int h = 0; h < 2; ++h) {\n");
  coda_sb_printf(b, "        const int r = f.row0 + 8 * h;\n");
  coda_sb_printf(b, "        const int i0 = 4 * j + 2 * h;\n");
  coda_sb_printf(b, "        const bool ok0 = r < M && cok0, ok1 = r < M && cok1;\n");
  coda_sb_printf(b, "        const long long ro = (long long)r;\n        (void)ro; (void)i0;\n");
  if (g->split) coda_sb_printf(b, "        if (lo_) {\n");
  visit_all(g, EPI_HALF);
  if (g->pair && !g->split) coda_sb_printf(b, "        {\n          const int e = 0; const bool ok = ok0; (void)e;\n");
  else coda_sb_printf(b, "#pragma unroll\n        for (int e = 0; e < 2; ++e) {\n          const bool ok = e ? ok1 : ok0;\n");
  epi_emit_point_instrs(g);
  visit_all(g, EPI_POINT);
  coda_sb_printf(b, "        }\n");
  visit_all(g, EPI_STORE);
  if (g->split) coda_sb_printf(b, "        }\n");
  visit_all(g, EPI_FLUSH);
  coda_sb_printf(b, "      }\n"); /* h */
  visit_all(g, EPI_GROUP_END);
  coda_sb_printf(b, "    }\n"); /* jj */
  visit_all(g, EPI_CHUNK_FOLD);
  if (g->staged && !g->sp.frag) {
    /* the chunk's staged inputs are read and its outputs written; the
     * generic-proxy writes of staged outputs are made visible to the TMA
     * (async proxy) before the barrier */
    if (g->sp.nout && !g->sm80) coda_sb_printf(b, "      asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n");
    coda_sb_printf(b, "      %s::wg_sync(sc.bar);\n", g->ns);
    visit_all(g, EPI_CHUNK_STORE);
    if (g->sp.nout && !g->sm80) coda_sb_printf(b, "      if (threadIdx.x %% 128 == 0) coda_sm90::bulk_commit();\n");
  }
}

/* The staged outputs of a fragment (half-split pairs) leave after its
 * last chunk: the previous fragment's stores have read the staging before
 * this one writes it; afterwards every chunk is written, then stored. */
static void emit_frag_out_begin(gen *g) {
  if (g->sm80) coda_sb_printf(g->b, "    coda_sm80::wg_sync(sc.bar);\n");
  else coda_sb_printf(g->b, "    if (threadIdx.x %% 128 == 0) coda_sm90::bulk_wait_read<0>();\n    coda_sm90::wg_sync(sc.bar);\n");
}
static void emit_frag_out_end(gen *g) {
  coda_strbuf *b = g->b;
  if (!g->sm80) coda_sb_printf(b, "    asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n");
  coda_sb_printf(b, "    %s::wg_sync(sc.bar);\n", g->ns);
  coda_sb_printf(b, "#pragma unroll\n    for (int jc = 0; jc < BN / 8; jc += %d) {\n", EPI_JC);
  visit_all(g, EPI_CHUNK_STORE);
  coda_sb_printf(b, "    }\n");
  if (!g->sm80) coda_sb_printf(b, "    if (threadIdx.x %% 128 == 0) coda_sm90::bulk_commit();\n");
}

char *coda_epi_functor_source(coda_context ctx, coda_program pg) {
  return coda_epi_functor_source_for(ctx, pg, CODA_PATH_SM90);
}

char *coda_epi_functor_source_for(coda_context ctx, coda_program pg, int arch) {
  const struct coda_program_s *p = pg;
  if (coda_epi_supported(ctx, pg) != CODA_OK) return NULL;
  coda_strbuf sb = {0};
  coda_strbuf *b = &sb;
  gen g;
  plan_functor(&g, p, b, coda_epi_scratch_bytes(pg), arch);
  emit_head(&g);
  emit_fragment_begin(&g);
  if (g.sp.nin && g.sp.dbl) {
    coda_sb_printf(b, "    if (!sc.pre) {\n");
    epi_emit_fetch(&g, "0", "0", NULL, "      ");
    coda_sb_printf(b, "    }\n");
  }
  /* outputs staged per fragment: the previous fragment's stores have read
   * the staging before this one writes it */
  if (g.sp.frag && g.sp.nout) emit_frag_out_begin(&g);
  coda_sb_printf(b, "#pragma unroll\n    for (int jc = 0; jc < BN / 8; jc += %d) {\n", EPI_JC);
  emit_chunk(&g);
  coda_sb_printf(b, "    }\n"); /* jc */
  if (g.sp.frag && g.sp.nout) emit_frag_out_end(&g); /* every chunk of the fragment leaves */
  /* row partials of this column tile */
  if (g.any_row_end) {
    coda_sb_printf(b, "#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n      const int r = f.row0 + 8 * h;\n");
    visit_all(&g, EPI_END_ROW);
    coda_sb_printf(b, "    }\n");
  }
  /* column partials, from the warps' sums in the scratch */
  if (g.ncol) {
    coda_sb_printf(b, "    %s::wg_sync(sc.bar);\n", g.ns);
    coda_sb_printf(b, "    {\n      const int t = threadIdx.x %% 128;\n");
    coda_sb_printf(b, "      const int s_ = wr0 / %d;\n", CODA_EPI_TILE_M);
    visit_all(&g, EPI_END);
    coda_sb_printf(b, "    }\n    %s::wg_sync(sc.bar); /* the scratch is reused by the next fragment */\n", g.ns);
  }
  coda_sb_printf(b, "  }\n};\n");
  return sb_take(ctx, b);
}

/* The mainloop header without its includes and without the host-side launch
 * helpers (which need the runtime API). */
static void append_header(coda_strbuf *b, const char *text, int cut_launch) {
  const char *end = text + strlen(text);
  const char *cut = NULL;
  if (cut_launch) {
    const char *g = strstr(text, "struct GemmLaunch");
    if (g) {
      /* back up to the start of the comment line above, if any */
      const char *ls = g;
      while (ls > text && ls[-1] != '\n') ls--;
      const char *prev = ls;
      if (prev > text) {
        const char *pl = prev - 1;
        while (pl > text && pl[-1] != '\n') pl--;
        if (strncmp(pl, "/*", 2) == 0) ls = pl;
      }
      cut = ls;
    }
  }
  const char *s = text;
  const char *stop = cut ? cut : end;
  while (s < stop) {
    const char *nl = memchr(s, '\n', (size_t)(stop - s));
    const char *le = nl ? nl + 1 : stop;
    const char *t = s;
    while (t < le && (*t == ' ' || *t == '\t')) t++;
    if (!(strncmp(t, "#include", 8) == 0 || strncmp(t, "#pragma once", 12) == 0)) coda_sb_put(b, s, (size_t)(le - s));
    s = le;
  }
  if (cut) coda_sb_printf(b, "\n}  // namespace coda_sm90\n");
}

/* The device helpers (epi_helpers.cuh) without their leading comment and
 * #pragma once: the text between them and the functor is the helpers'
 * code only. */
static void append_helpers(coda_strbuf *b, const char *text) {
  if (strncmp(text, "/*", 2) == 0) {
    const char *e = strstr(text, "*/");
    if (e) {
      text = e + 2;
      if (*text == '\n') text++;
    }
  }
  append_header(b, text, 0);
}

/* The kernel's name expression (the mainloop's template instance). */
static void kernel_name(const coda_epi_config *cfg, char *buf, size_t n) {
  const char *ta = cfg->trans_a ? "true" : "false", *tb = cfg->trans_b ? "true" : "false";
  const char *f16 = cfg->f16 ? "true" : "false";
  if (is_sm80(cfg))
    snprintf(buf, n, "coda_sm80::gemm_kernel<%d, %d, %d, %s, %s, %s, CodaEpi>", CODA_EPI_SM80_BM,
             cfg->bn, cfg->stages, ta, tb, f16);
  else
    snprintf(buf, n, "coda_sm90::gemm_kernel<%d, %d, %s, %s, %s, %s, CodaEpi>", cfg->bn,
             cfg->stages, cfg->ping ? "true" : "false", ta, tb, f16);
}

const char *coda_epi_target(const coda_epi_config *cfg, char *buf, size_t n) {
  if (is_sm80(cfg)) snprintf(buf, n, "sm_%d", cfg->cc > 0 ? cfg->cc : 80);
  else snprintf(buf, n, "sm_90a");
  return buf;
}

/* The mainloop headers in their include order and the check that host and
 * device agree on the shared memory. */
static void append_mainloop(coda_strbuf *sb, const coda_epi_config *cfg) {
  if (is_sm80(cfg)) {
    append_header(sb, coda_epi_hdr_gemm_sm80, 0);
    return;
  }
  /* in gemm_sm90.cuh's include order: the PTX wrappers, wgmma, the mainloop */
  append_header(sb, coda_epi_hdr_ptx_sm90, 0);
  append_header(sb, coda_epi_hdr_wgmma, 0);
  append_header(sb, coda_epi_hdr_gemm_sm90, 1);
}
static void append_smem_check(coda_strbuf *sb, const coda_epi_config *cfg) {
  if (is_sm80(cfg))
    coda_sb_printf(sb, "static_assert(coda_sm80::smem_bytes<%d, %d, %d>() == %zu, \"host and device disagree on shared memory\");\n",
                   CODA_EPI_SM80_BM, cfg->bn, cfg->stages, coda_epi_smem_bytes(cfg));
  else
    coda_sb_printf(sb, "static_assert(coda_sm90::smem_bytes<%d, %d>() == %zu, \"host and device disagree on shared memory\");\n",
                   cfg->bn, cfg->stages, coda_epi_smem_bytes(cfg));
}

char *coda_epi_full_source(coda_context ctx, coda_program p, const coda_epi_config *cfg,
                           char **kernel_expr) {
  if (kernel_expr) *kernel_expr = NULL;
  char *fn = coda_epi_functor_source_for(ctx, p, is_sm80(cfg) ? CODA_PATH_SM80 : CODA_PATH_SM90);
  if (!fn) return NULL;
  coda_strbuf sb = {0};
  coda_sb_printf(&sb, "%s", kPrelude);
  /* the program's scratch (the functor's staging plan assumes it) */
  coda_sb_printf(&sb, "#define CODA_EPI_SCRATCH_BYTES %ld\n", coda_epi_scratch_bytes(p));
  /* the program's math: which function helpers epi_helpers.cuh defines */
  coda_sb_printf(&sb, "#define CODA_EPI_FAST_MATH %d\n", coda_program_math(p) == CODA_MATH_FAST);
  append_mainloop(&sb, cfg);
  append_helpers(&sb, coda_epi_hdr_helpers);
  coda_sb_printf(&sb, "%s", fn);
  free(fn);
  append_smem_check(&sb, cfg);
  char *src = sb_take(ctx, &sb);
  if (!src) return NULL;
  if (kernel_expr) {
    char buf[160];
    kernel_name(cfg, buf, sizeof buf);
    *kernel_expr = malloc(strlen(buf) + 1);
    if (*kernel_expr) memcpy(*kernel_expr, buf, strlen(buf) + 1);
    if (!*kernel_expr) {
      free(src);
      coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
      return NULL;
    }
  }
  return src;
}

long coda_epi_scratch_bytes(coda_program pg) {
  const struct coda_program_s *p = pg;
  const long base = scratch_bytes();
  if (!p) return base;
  int used[CODA_MAX_INPUTS];
  epi_program_reads(p, used);
  stage_plan a, b;
  epi_plan_staging(p, used, base, &a);
  if (epi_plan_all_staged(p, used, &a)) return base;
  epi_plan_staging(p, used, 2 * base, &b);
  return epi_plan_staged_count(&b) > epi_plan_staged_count(&a) ? 2 * base : base;
}

void coda_epi_config_for(coda_program p, coda_epi_config *cfg) {
  cfg->scratch = (int)coda_epi_scratch_bytes(p);
  fit_stages(cfg);
}

/* 1 if every tile input the program reads is staged with prefetch and
 * every output is staged (no direct tile access; f32 accumulating outputs
 * are staged, 16-bit ones are not). */
static int all_staged(coda_program pg) {
  const struct coda_program_s *p = pg;
  int used[CODA_MAX_INPUTS];
  epi_program_reads(p, used);
  stage_plan sp;
  epi_plan_staging(p, used, coda_epi_scratch_bytes(pg), &sp);
  return epi_plan_all_staged(p, used, &sp);
}

static coda_status build_one(coda_context ctx, coda_program p, const coda_epi_config *cfg,
                             int no_cache, coda_epi_binary *out) {
  char *expr = NULL;
  char *src = coda_epi_full_source(ctx, p, cfg, &expr);
  if (!src) return CODA_ERR_NOT_SUPPORTED;
  char target[16];
  coda_status s = coda_epi_compile_for(ctx, coda_epi_target(cfg, target, sizeof target), src, expr,
                                       coda_program_math(p), no_cache, &out->cubin, &out->size,
                                       &out->lowered, NULL, &out->from_cache, &out->spill);
  free(src);
  free(expr);
  return s;
}

void coda_epi_binary_free(coda_epi_binary *b) {
  if (!b) return;
  free(b->cubin);
  free(b->lowered);
  memset(b, 0, sizeof *b);
}

coda_status coda_epi_build(coda_context ctx, coda_program p, coda_epi_config *cfg, int no_cache,
                           coda_epi_binary *out) {
  memset(out, 0, sizeof *out);
  coda_status sup = coda_epi_supported(ctx, p); /* e.g. a pass list: its passes are built */
  if (sup != CODA_OK) return sup;
  /* pingpong when every tile access of the program goes through the
   * staging (3-11 % faster than cooperative on prim_store, llama_residual,
   * llama_residual_norm and llama_swiglu), cooperative when some tile
   * input or output is accessed directly, e.g. a 16-bit accumulated output
   * (llama_swiglu_bwd: 2.3x faster cooperative); $CODA_EPI_SCHEDULE =
   * "pingpong" or "cooperative" forces one (bench/results/epilogue-notes.md) */
  coda_epi_config_for(p, cfg);
  if (is_sm80(cfg)) { /* one schedule: every group its own tile rows */
    cfg->ping = 0;
    return build_one(ctx, p, cfg, no_cache, out);
  }
  const coda_epi_schedule force = ctx ? ctx->knobs.epi_schedule : CODA_EPI_SCHEDULE_AUTO;
  if (cfg->sched != CODA_SCHED_AUTO) cfg->ping = cfg->sched == CODA_SCHED_PINGPONG;
  else if (force != CODA_EPI_SCHEDULE_AUTO) cfg->ping = force == CODA_EPI_SCHEDULE_PINGPONG;
  else cfg->ping = all_staged(p);
  coda_status s = build_one(ctx, p, cfg, no_cache, out);
  /* The rule's pingpong choice also gives way when the kernel is large:
   * with the two consumer warpgroups in different code at once (one in its
   * MMAs, one in its epilogue), a big epilogue thrashes the instruction
   * cache (the likely cause; not measured directly). What was measured on
   * one H200 (bench/results/gpu-2026-11-30g.md, GPT-2 d768/d1600 block
   * steps): the three staged programs with pingpong cubins of 161-211 KiB
   * (gpt2_residual_ln, gpt2_ln_linear_gelu, gpt2_gelu_bwd) took 4-84 %
   * longer pingpong than cooperative, while the staged ones of 63-140 KiB (llama_swiglu,
   * llama_residual_norm, llama_qkv_rope, llama_lm_head, gpt2_ln_linear, ...)
   * ran pingpong faster or within 3 % (one exception: llama_residual at
   * the 8B-like shape, 7 % faster cooperative). Where it matters per shape,
   * coda_plan_tune_fusion times both. A forced schedule (cfg->sched) is
   * kept. */
  const int too_big = cfg->sched == CODA_SCHED_AUTO && force == CODA_EPI_SCHEDULE_AUTO &&
                      out->size > CODA_EPI_PINGPONG_MAX_CUBIN;
  if (s != CODA_OK || !cfg->ping || (out->spill == 0 && !too_big)) return s;
  /* the pingpong kernel spills (or its statistics are unknown), or is too
   * large for the rule: cooperative */
  coda_epi_binary coop;
  coda_epi_config c2 = *cfg;
  c2.ping = 0;
  memset(&coop, 0, sizeof coop);
  s = build_one(ctx, p, &c2, no_cache, &coop);
  if (s != CODA_OK) return s;
  coda_epi_binary_free(out);
  *out = coop;
  *cfg = c2;
  return CODA_OK;
}
