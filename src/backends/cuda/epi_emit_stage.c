/* The staging of the epilogue code generator: which tile inputs and
 * outputs of a program go through the shared scratch, at which offsets and
 * with how many buffers (epi_plan_staging), their TMA load slots, and the
 * code that fetches one chunk's staged inputs (cp.async from all threads,
 * or TMA issued by one thread: epi_emit_fetch). The plan is a function of
 * the program and the scratch size only; the argument emitters read it from
 * gen.sp. */
#include "backends/cuda/epi_emit.h"

#include <stdio.h>
#include <string.h>

int epi_dt_code(coda_dtype t) {
  switch (t) {
  case CODA_BF16: return 0;
  case CODA_F16: return 1;
  case CODA_F32: return 2;
  default: return 4;
  }
}

int epi_dt_size(coda_dtype t) { return t == CODA_BF16 || t == CODA_F16 ? 2 : 4; }
/* An output the staging may take (accumulating ones: f32, standard width). */
static int out_stageable(const ir_output *op) {
  return !op->accumulate || (op->dtype == CODA_F32 && op->width == CODA_WIDTH_FULL);
}

/* Bytes of one 32-column chunk row of a view (0: not stageable). */
int coda_epi_chunk_row_bytes(coda_dtype t, coda_width w) { return epi_chunk_row_bytes(t, w); }
int epi_chunk_row_bytes(coda_dtype t, coda_width w) {
  int rb = 32 * epi_dt_size(t);
  if (w == CODA_WIDTH_X2) rb *= 2;
  else if (w == CODA_WIDTH_HALF) rb /= 2;
  return rb >= 32 && rb <= 128 ? rb : 0;
}

/* The inputs the program reads (used[k]; rowpick indices are read
 * separately) and its number of colsum reductions. */
int epi_program_reads(const struct coda_program_s *p, int used[CODA_MAX_INPUTS]) {
  memset(used, 0, CODA_MAX_INPUTS * sizeof *used);
  for (int i = 0; i < p->ninstrs; i++)
    if (p->instrs[i].code == IR_READ) used[p->instrs[i].input] = 1;
  int ncol = 0;
  for (int q = 0; q < p->nreduces; q++) ncol += ir_reduce_is_col(p->reduces[q].kind);
  return ncol;
}

/* Staging plan: tile inputs and outputs whose chunk rows (32 columns) are
 * 32-128 bytes go through the shared scratch in 64 x 32 chunks, so that
 * global accesses are row-contiguous 16-byte vectors (or TMA) instead of 8
 * rows x 4 bytes per warp instruction. Accumulating outputs are staged only
 * when they are f32 of standard width: the chunk holds the fp32 value and
 * TMA reduce-adds it (out = out + value, one fp32 addition rounded to
 * nearest even, each element once: the direct path's bits). 16-bit
 * accumulating outputs stay direct, since a bf16/f16 reduce-add would round
 * the value to the output type before the addition (two roundings). With
 * room for two buffers per input the next chunk's inputs are fetched
 * (cp.async) while the current one is computed. What does not fit keeps
 * direct accesses. */
long epi_fixed_smem(const struct coda_program_s *p) {
  long n = 0;
  for (int k = 0; k < p->ninputs; k++) n += epi_input_emitter(p->inputs[k].kind)->smem;
  n += (long)p->noutputs * epi_output_emitter.smem;
  for (int q = 0; q < p->nreduces; q++) n += epi_reduce_emitter(&p->reduces[q])->smem;
  return n;
}

void epi_plan_staging(const struct coda_program_s *p, const int *used, long scratch, stage_plan *sp) {
  memset(sp, 0, sizeof *sp);
  for (int k = 0; k < CODA_MAX_INPUTS; k++) sp->in_off[k] = -1;
  for (int o = 0; o < CODA_MAX_OUTPUTS; o++) sp->out_off[o] = -1;
  const long fixed = epi_fixed_smem(p);
  if (p->pair_mode && p->pair_split) {
    /* Half-split pairs: a point's two columns lie S/2 apart, in different
     * 32-column chunks for S >= 64. Full-width outputs are staged for the
     * whole fragment, one buffer per chunk, so a point writes both of its
     * columns into the staging and every chunk leaves by TMA after the
     * fragment's last one; tile inputs are read directly. */
    sp->frag = 1;
    long off = fixed;
    const int nchunk = CODA_EPI_BN / 32;
    for (int o = 0; o < p->noutputs; o++) {
      const ir_output *op = &p->outputs[o];
      const int rb = epi_chunk_row_bytes(op->dtype, op->width);
      if (!out_stageable(op) || !rb || op->width != CODA_WIDTH_FULL || off + nchunk * 64L * rb > scratch) continue;
      sp->out_off[o] = (int)off;
      sp->out_rb[o] = rb;
      off += nchunk * 64L * rb;
      sp->nout++;
    }
    return;
  }
  const long budget = scratch - fixed; /* after the colsum slots */
  long in_bytes = 0, out_bytes = 0;
  for (int k = 0; k < p->ninputs; k++)
    if (used[k] && p->inputs[k].kind == CODA_ARG_TILE)
      in_bytes += 64L * epi_chunk_row_bytes(p->inputs[k].dtype, p->inputs[k].width);
  for (int o = 0; o < p->noutputs; o++)
    if (out_stageable(&p->outputs[o])) out_bytes += 64L * epi_chunk_row_bytes(p->outputs[o].dtype, p->outputs[o].width);
  /* (shapes the plan skips below only make the estimate conservative) */
  /* everything with prefetch, else everything single-buffered, else
   * greedily in program order with prefetch */
  sp->dbl = !(2 * in_bytes + out_bytes > budget && in_bytes + out_bytes <= budget);
  const int nbuf = sp->dbl ? 2 : 1;
  long off = fixed;
  for (int k = 0; k < p->ninputs; k++) {
    const ir_input *in = &p->inputs[k];
    const int rb = epi_chunk_row_bytes(in->dtype, in->width);
    if (!used[k] || in->kind != CODA_ARG_TILE || !rb || (p->pair_mode && in->width == CODA_WIDTH_X2) ||
        off + nbuf * 64L * rb > scratch)
      continue;
    sp->in_off[k] = (int)off;
    sp->in_rb[k] = rb;
    off += nbuf * 64L * rb;
    sp->nin++;
  }
  /* Outputs: two buffers each when all of them fit twice (a chunk's TMA
   * store then reads one buffer while the next chunk fills the other),
   * else one. */
  const long out0 = off;
  for (sp->out_dbl = 1; sp->out_dbl >= 0; sp->out_dbl--) {
    off = out0;
    sp->nout = 0;
    int dropped = 0;
    for (int o = 0; o < p->noutputs; o++) {
      const ir_output *op = &p->outputs[o];
      const int rb = epi_chunk_row_bytes(op->dtype, op->width);
      /* the store shapes of the direct path: pair mode standard or half,
       * elem mode standard or x2 */
      const int shape_ok = p->pair_mode ? op->width != CODA_WIDTH_X2 : op->width != CODA_WIDTH_HALF;
      sp->out_off[o] = -1;
      if (!out_stageable(op) || !rb || !shape_ok) continue;
      if (off + (1 + sp->out_dbl) * 64L * rb > scratch) {
        dropped = 1;
        continue;
      }
      sp->out_off[o] = (int)off;
      sp->out_rb[o] = rb;
      off += (1 + sp->out_dbl) * 64L * rb;
      sp->nout++;
    }
    if (!dropped || !sp->out_dbl) break;
  }
  if (sp->out_dbl < 0) sp->out_dbl = 0;
}

/* Values per row of a view (L) and the first value of chunk jc (v0). */
const char *epi_view_len(coda_width w) {
  return w == CODA_WIDTH_X2 ? "2LL * N" : w == CODA_WIDTH_HALF ? "(N + 1LL) / 2" : "(long long)N";
}
const char *epi_view_v0(coda_width w, const char *jc, char *out, size_t n) {
  if (w == CODA_WIDTH_X2) snprintf(out, n, "2LL * (tc0 + 8 * (%s))", jc);
  else if (w == CODA_WIDTH_HALF) snprintf(out, n, "(long long)(tc0 + 8 * (%s)) / 2", jc);
  else snprintf(out, n, "(long long)(tc0 + 8 * (%s))", jc);
  return out;
}
/* Byte of the thread's value(s) of column pair jj inside a chunk row. */
const char *epi_view_byte(coda_width w) {
  return w == CODA_WIDTH_X2 ? "2 * (8 * jj + 2 * qd)" : w == CODA_WIDTH_HALF ? "(4 * jj + qd)" : "(8 * jj + 2 * qd)";
}

static void emit_stage_in(gen *g, const char *jc, const char *buf, const char *indent) {
  const stage_plan *sp = &g->sp;
  for (int k = 0; k < g->p->ninputs; k++) {
    if (sp->in_off[k] < 0) continue;
    const ir_input *in = &g->p->inputs[k];
    char v0s[128];
    epi_view_v0(in->width, jc, v0s, sizeof v0s);
    coda_sb_printf(g->b, "%scoda_epi::stage_in<%d, %d>(sb_ + %d + (%s) * %d, p.ptr[%d], p.ld[%d], al%d, wr0, %s, %s, M);\n",
              indent, epi_dt_size(in->dtype), sp->in_rb[k], sp->in_off[k], buf, 64 * sp->in_rb[k], k, k, k, v0s,
              epi_view_len(in->width));
  }
}

/* TMA slots of the staged inputs (the first CODA_EPI_MAX_TMA_IN of them);
 * returns 1 when every staged input has one. */
int epi_input_slots(const struct coda_program_s *p, const stage_plan *sp, int *slot) {
  int next = CODA_EPI_MAX_TMA, all = 1;
  for (int k = 0; k < p->ninputs; k++) {
    slot[k] = -1;
    if (sp->in_off[k] < 0) continue;
    if (next < CODA_EPI_MAX_TMA + CODA_EPI_MAX_TMA_IN) slot[k] = next++;
    else all = 0;
  }
  return all;
}

/* The staged inputs of chunk `jc` into buffer `buf` by TMA: one thread
 * arms the mbarrier with the bytes of the boxes it issues and issues them;
 * a box wholly outside the view (rows past M, a chunk past the row's end)
 * is not issued, so the barrier completes on what was, and its staged
 * values are never used (their points are outside M x N). */
static void emit_tma_in(gen *g, const char *jc, const char *buf, const char *indent) {
  const stage_plan *sp = &g->sp;
  const int *slot = g->slot;
  coda_sb_printf(g->b, "%sif (threadIdx.x %% 128 == 0) {\n", indent);
  coda_sb_printf(g->b, "%s  uint64_t *const lb_ = &sc.ld_bar[%s];\n%s  unsigned tx_ = 0;\n", indent, buf, indent);
  for (int k = 0; k < g->p->ninputs; k++) {
    if (sp->in_off[k] < 0) continue;
    const ir_input *in = &g->p->inputs[k];
    char v0[128];
    coda_sb_printf(g->b, "%s  const long long v%d_ = %s;\n", indent, k, epi_view_v0(in->width, jc, v0, sizeof v0));
    coda_sb_printf(g->b, "%s  const bool i%d_ = wr0 < M && v%d_ < %s;\n", indent, k, k, epi_view_len(in->width));
    coda_sb_printf(g->b, "%s  tx_ += i%d_ ? %du : 0u;\n", indent, k, 64 * sp->in_rb[k]);
  }
  coda_sb_printf(g->b, "%s  coda_sm90::mbar_expect_tx(lb_, tx_);\n", indent);
  for (int k = 0; k < g->p->ninputs; k++) {
    if (sp->in_off[k] < 0) continue;
    coda_sb_printf(g->b, "%s  if (i%d_) coda_sm90::tma_load_2d(sb_ + %d + (%s) * %d, &p.tm[%d], lb_, (int)v%d_, wr0);\n",
                   indent, k, sp->in_off[k], buf, 64 * sp->in_rb[k], slot[k], k);
  }
  coda_sb_printf(g->b, "%s}\n", indent);
}

/* tin: every staged input has its TMA map and the caller lent the
 * load barriers. */
void epi_emit_tin(gen *g, const char *indent) {
  const stage_plan *sp = &g->sp;
  const int *slot = g->slot;
  coda_sb_printf(g->b, "%sconst bool tin = sc.ld_bar != nullptr", indent);
  for (int k = 0; k < g->p->ninputs; k++)
    if (sp->in_off[k] >= 0 && slot[k] >= 0) coda_sb_printf(g->b, " && (p.flags[%d] & 4)", k);
  coda_sb_printf(g->b, ";\n");
}

/* One chunk's staged inputs into buffer `buf`: by TMA when tin holds (code
 * for it only when every staged input has a slot), else by cp.async from
 * all threads, committed and followed by `cp_tail` (a wait, or NULL). */
void epi_emit_fetch(gen *g, const char *jc, const char *buf, const char *cp_tail, const char *indent) {
  const int tma_in = g->tma_in;
  char in2[32];
  snprintf(in2, sizeof in2, "%s  ", indent);
  const char *ci = tma_in ? in2 : indent;
  if (tma_in) {
    coda_sb_printf(g->b, "%sif (tin) {\n", indent);
    emit_tma_in(g, jc, buf, in2);
    coda_sb_printf(g->b, "%s} else {\n", indent);
  }
  emit_stage_in(g, jc, buf, ci);
  coda_sb_printf(g->b, "%scoda_epi::cp_commit();\n", ci);
  if (cp_tail) coda_sb_printf(g->b, "%s%s\n", ci, cp_tail);
  if (tma_in) coda_sb_printf(g->b, "%s}\n", indent);
}

void coda_epi_input_tma_slots(coda_program pg, int *slot) {
  const struct coda_program_s *p = pg;
  int used[CODA_MAX_INPUTS];
  epi_program_reads(p, used);
  stage_plan sp;
  epi_plan_staging(p, used, coda_epi_scratch_bytes(pg), &sp);
  epi_input_slots(p, &sp, slot);
}


/* 1 if the plan stages every tile input the program reads with prefetch
 * and every output. */
int epi_plan_all_staged(const struct coda_program_s *p, const int *used, const stage_plan *sp) {
  for (int k = 0; k < p->ninputs; k++)
    if (used[k] && p->inputs[k].kind == CODA_ARG_TILE && (sp->in_off[k] < 0 || !sp->dbl)) return 0;
  for (int o = 0; o < p->noutputs; o++)
    if (sp->out_off[o] < 0) return 0;
  return 1;
}

/* Staged tile accesses of a plan (prefetched inputs count twice). */
int epi_plan_staged_count(const stage_plan *sp) {
  return sp->nin * (sp->dbl ? 2 : 1) + sp->nout * (sp->out_dbl ? 2 : 1);
}

/* The alignment flag of a staged view: base and row pitch multiples of 16
 * bytes (argument slot k, `size`-byte values). */
void epi_emit_align_flag(gen *g, int k, int size) {
  coda_sb_printf(g->b, "    const bool al%d = ((((unsigned long long)p.ptr[%d]) | (unsigned long long)(p.ld[%d] * %d)) & 15) == 0;\n",
                 k, k, k, size);
}
