/* The reduction emitters of the epilogue code generator, one per kind
 * (deterministic, no atomics; the scheme is described at the top of
 * epi_codegen.c):
 *  - row folds (rowsum, rowmax, rowlse, segmented rowsum of g >= 8
 *    columns): per-thread state per row half, folded per point, combined
 *    over the quad and written by its lane 0 at a segment's end or after
 *    the chunks (rowlse folds a chunk's values at once, lse_chunk);
 *  - narrow segments (g = 1, 2, 4): written per group;
 *  - rowpick: the thread holding column idx[m] writes it;
 *  - colsum: per column pair, summed over the warp by shuffles into its
 *    scratch slot (epi_colsum_slot), then over the 4 warps after the
 *    chunks.
 * The hooks are called by the driver at the phases of epi_emit.h. */
#include "backends/cuda/epi_emit.h"

#include <stdio.h>

int epi_seg_width(const ir_reduce *r) {
  if (ir_reduce_is_segmented(r->kind)) return r->segment < CODA_EPI_BN ? r->segment : CODA_EPI_BN;
  return CODA_EPI_BN;
}

/* Row-type reductions folded per thread over a row (g >= 8 columns). */
int epi_is_row_fold(const ir_reduce *r) {
  switch (r->kind) {
  case CODA_REDUCE_ROWSUM:
  case CODA_REDUCE_ROWMAX:
  case CODA_REDUCE_ROWLSE: return 1;
  case CODA_REDUCE_SEGSUM:
  case CODA_REDUCE_SEGMAX: return epi_seg_width(r) >= 8;
  default: return 0;
  }
}

/* Quad combine of the folded state of reduction q for row half h and the
 * write by lane 0 of the quad at partial column `colexpr`. */
static void emit_row_flush(gen *g, int q, const char *colexpr, const char *cond, const char *indent) {
  coda_strbuf *b = g->b;
  const ir_reduce *r = &g->p->reduces[q];
  const int k = g->arg_red0 + q;
  coda_sb_printf(b, "%s{\n", indent);
  switch (r->kind) {
  case CODA_REDUCE_ROWMAX:
  case CODA_REDUCE_SEGMAX:
    coda_sb_printf(b, "%s  float v_ = ra%d[h], o_;\n", indent, q);
    coda_sb_printf(b, "%s  o_ = coda_epi::shx(v_, 1); v_ = o_ > v_ ? o_ : v_;\n", indent);
    coda_sb_printf(b, "%s  o_ = coda_epi::shx(v_, 2); v_ = o_ > v_ ? o_ : v_;\n", indent);
    break;
  case CODA_REDUCE_ROWLSE:
    coda_sb_printf(b, "%s  float m_ = ra%d[h], s_ = rs%d[h];\n", indent, q, q);
    coda_sb_printf(b, "%s  { float m2 = coda_epi::shx(m_, 1), s2 = coda_epi::shx(s_, 1); coda_epi::lse_merge(m_, s_, m2, s2); }\n", indent);
    coda_sb_printf(b, "%s  { float m2 = coda_epi::shx(m_, 2), s2 = coda_epi::shx(s_, 2); coda_epi::lse_merge(m_, s_, m2, s2); }\n", indent);
    coda_sb_printf(b, "%s  const float v_ = (m_ == -CODA_INF || m_ == CODA_INF) ? m_ : m_ + logf(s_);\n", indent);
    break;
  default:
    coda_sb_printf(b, "%s  float v_ = ra%d[h];\n", indent, q);
    coda_sb_printf(b, "%s  v_ += coda_epi::shx(v_, 1);\n", indent);
    coda_sb_printf(b, "%s  v_ += coda_epi::shx(v_, 2);\n", indent);
    break;
  }
  coda_sb_printf(b, "%s  if (qd == 0 && r < M && %s) ((float *)p.ptr[%d])[(long long)r * p.ld[%d] + (%s)] = v_;\n",
            indent, cond, k, k, colexpr);
  coda_sb_printf(b, "%s}\n", indent);
}

static void emit_row_reset(gen *g, int q, const char *indent) {
  const ir_reduce *r = &g->p->reduces[q];
  if (r->kind == CODA_REDUCE_ROWMAX || r->kind == CODA_REDUCE_SEGMAX || r->kind == CODA_REDUCE_ROWLSE)
    coda_sb_printf(g->b, "%sra%d[h] = -CODA_INF;\n", indent, q);
  else
    coda_sb_printf(g->b, "%sra%d[h] = 0.0f;\n", indent, q);
  if (r->kind == CODA_REDUCE_ROWLSE) coda_sb_printf(g->b, "%srs%d[h] = 0.0f;\n", indent, q);
}

/* The scratch slot of colsum reduction q: colsums before it. */
static int colsum_slot(const gen *g, int q) {
  int s = 0;
  for (int i = 0; i < q; i++) s += ir_reduce_is_col(g->p->reduces[i].kind);
  return s;
}

/* ------------------------------------------------------------ row folds */

static void fold_begin(gen *g, int q) {
  const ir_reduce *r = &g->p->reduces[q];
  int neg = r->kind == CODA_REDUCE_ROWMAX || r->kind == CODA_REDUCE_SEGMAX || r->kind == CODA_REDUCE_ROWLSE;
  coda_sb_printf(g->b, "    float ra%d[2] = {%s, %s};\n", q, neg ? "-CODA_INF" : "0.0f", neg ? "-CODA_INF" : "0.0f");
  if (r->kind == CODA_REDUCE_ROWLSE) coda_sb_printf(g->b, "    float rs%d[2] = {0.0f, 0.0f};\n", q);
}

static void rowsum_point(gen *g, int q) {
  coda_sb_printf(g->b, "          if (ok) ra%d[h] += r%d;\n", q, g->p->reduces[q].reg);
}

static void rowmax_point(gen *g, int q) {
  const int v = g->p->reduces[q].reg;
  coda_sb_printf(g->b, "          if (ok && r%d > ra%d[h]) ra%d[h] = r%d;\n", v, q, q, v);
}

/* the row's partial of this column tile, after the chunks */
static void fold_end_row(gen *g, int q) {
  if (epi_seg_width(&g->p->reduces[q]) >= CODA_EPI_BN) emit_row_flush(g, q, "tn", "true", "      ");
}

static void lse_fold_decl(gen *g, int q) {
  coda_sb_printf(g->b, "    float lv%d[%d][2][2]; /* the chunk's values, folded after it */\n", q, EPI_JC);
  /* half-split pairs: the second column pairs hold no points */
  if (g->split)
    coda_sb_printf(g->b, "#pragma unroll\n    for (int i_ = 0; i_ < %d; ++i_) (&lv%d[0][0][0])[i_] = -CODA_INF;\n", 4 * EPI_JC, q);
}

static void lse_point(gen *g, int q) {
  coda_sb_printf(g->b, "          lv%d[jj][h][e] = ok ? r%d : -CODA_INF;\n", q, g->p->reduces[q].reg);
  if (g->pair && !g->split) coda_sb_printf(g->b, "          lv%d[jj][h][1] = -CODA_INF;\n", q);
}

static void lse_chunk_fold(gen *g, int q) {
  coda_sb_printf(g->b, "#pragma unroll\n    for (int h = 0; h < 2; ++h) coda_epi::lse_chunk<%d>(ra%d[h], rs%d[h], lv%d, h);\n",
                 EPI_JC, q, q, q);
}

/* segments of 8 or more columns end after some column groups */
static void seg_flush(gen *g, int q) {
  const int gw = epi_seg_width(&g->p->reduces[q]);
  if (gw >= CODA_EPI_BN) return; /* flushed at the end, like rowsum */
  coda_sb_printf(g->b, "        if (((j + 1) * 8) %% %d == 0) {\n", gw);
  char col[96];
  snprintf(col, sizeof col, "(tc0 + 8 * j) / %d", gw);
  /* write only segments that start inside N */
  coda_sb_printf(g->b, "          const int sc0_ = tc0 + 8 * (j + 1) - %d;\n", gw);
  emit_row_flush(g, q, col, "sc0_ < N", "          ");
  emit_row_reset(g, q, "          ");
  coda_sb_printf(g->b, "        }\n");
}

/* ------------------------------------------------------------ narrow segments */

static void nseg_half(gen *g, int q) {
  if (g->p->reduces[q].kind == CODA_REDUCE_SEGMAX)
    coda_sb_printf(g->b, "        float sv%d[2] = {-CODA_INF, -CODA_INF};\n", q);
  else
    coda_sb_printf(g->b, "        float sv%d[2] = {0.0f, 0.0f};\n", q);
}

static void nseg_point(gen *g, int q) {
  coda_sb_printf(g->b, "          if (ok) sv%d[e] = r%d;\n", q, g->p->reduces[q].reg);
}

/* g = 1, 2, 4 columns */
static void nseg_store(gen *g, int q) {
  const int gw = epi_seg_width(&g->p->reduces[q]), k = g->arg_red0 + q;
  const int mx = g->p->reduces[q].kind == CODA_REDUCE_SEGMAX;
  char sum[96];
  if (g->pair) snprintf(sum, sizeof sum, "sv%d[0]", q);
  else if (mx) snprintf(sum, sizeof sum, "(sv%d[1] > sv%d[0] ? sv%d[1] : sv%d[0])", q, q, q, q);
  else snprintf(sum, sizeof sum, "sv%d[0] + sv%d[1]", q, q);
  if (gw == 1) /* elem mode only: each point is its own segment */
    coda_sb_printf(g->b,
              "        if (ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c] = sv%d[0];\n"
              "        if (ok1) ((float *)p.ptr[%d])[ro * p.ld[%d] + c + 1] = sv%d[1];\n",
              k, k, q, k, k, q);
  else if (gw == 2)
    coda_sb_printf(g->b, "        if (ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c / 2] = %s;\n", k, k, sum);
  else /* 4: lanes qd and qd^1 share the segment */
    coda_sb_printf(g->b,
              mx ? "        { float v_ = %s; const float o_ = coda_epi::shx(v_, 1); v_ = o_ > v_ ? o_ : v_;\n"
                   "          if ((qd & 1) == 0 && ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c / 4] = v_; }\n"
                 : "        { float v_ = %s; v_ += coda_epi::shx(v_, 1);\n"
                   "          if ((qd & 1) == 0 && ok0) ((float *)p.ptr[%d])[ro * p.ld[%d] + c / 4] = v_; }\n",
              sum, k, k);
}

/* ------------------------------------------------------------ rowpick */

static void pick_begin(gen *g, int q) {
  const ir_reduce *r = &g->p->reduces[q];
  const int ki = r->index_input, kp = g->arg_red0 + q;
  coda_sb_printf(g->b,
            "    int pk%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
            "      const int r = f.row0 + 8 * h;\n"
            "      const int k_ = r < M ? ((const int *)p.ptr[%d])[(long long)r * p.ld[%d]] : -1;\n"
            "      pk%d[h] = (k_ >= 0 && k_ < N) ? k_ : -1;\n"
            "      /* an index outside [0, N): column tile 0 writes 0 */\n"
            "      if (r < M && pk%d[h] < 0 && f.col0 == 0) ((float *)p.ptr[%d])[(long long)r * p.ld[%d]] = 0.0f;\n"
            "    }\n",
            q, ki, ki, q, q, kp, kp);
}

static void pick_point(gen *g, int q) {
  const int kp = g->arg_red0 + q;
  coda_sb_printf(g->b, "          if (ok && c + e == pk%d[h]) ((float *)p.ptr[%d])[ro * p.ld[%d]] = r%d;\n", q, kp, kp,
                 g->p->reduces[q].reg);
}

/* ------------------------------------------------------------ colsum */

static int col_is_max(const gen *g, int q) { return g->p->reduces[q].kind == CODA_REDUCE_COLMAX; }

static void col_group(gen *g, int q) {
  if (col_is_max(g, q)) coda_sb_printf(g->b, "      float cs%d[2] = {-CODA_INF, -CODA_INF};\n", q);
  else coda_sb_printf(g->b, "      float cs%d[2] = {0.0f, 0.0f};\n", q);
}

static void col_point(gen *g, int q) {
  const int v = g->p->reduces[q].reg;
  if (col_is_max(g, q)) coda_sb_printf(g->b, "          if (ok && r%d > cs%d[e]) cs%d[e] = r%d;\n", v, q, q, v);
  else coda_sb_printf(g->b, "          if (ok) cs%d[e] += r%d;\n", q, v);
}

/* rows of the two halves were added per thread; sum the 8 row groups of
 * the warp, then stash lanes 0-3's sums for the cross-warp step */
static void col_group_end(gen *g, int q) {
  if (col_is_max(g, q)) {
    coda_sb_printf(g->b,
                   "#pragma unroll\n      for (int e = 0; e < 2; ++e) {\n"
                   "        float v_ = cs%d[e], o_;\n"
                   "        o_ = coda_epi::shx(v_, 4); v_ = o_ > v_ ? o_ : v_;\n"
                   "        o_ = coda_epi::shx(v_, 8); v_ = o_ > v_ ? o_ : v_;\n"
                   "        o_ = coda_epi::shx(v_, 16); v_ = o_ > v_ ? o_ : v_;\n"
                   "        if (lane < 4) sc.buf[%d * 4 * BN + warp * BN + 8 * j + 2 * qd + e] = v_;\n      }\n",
                   q, colsum_slot(g, q));
    return;
  }
  coda_sb_printf(g->b,
            "#pragma unroll\n      for (int e = 0; e < 2; ++e) {\n"
            "        float v_ = cs%d[e];\n"
            "        v_ += coda_epi::shx(v_, 4);\n        v_ += coda_epi::shx(v_, 8);\n        v_ += coda_epi::shx(v_, 16);\n"
            "        if (lane < 4) sc.buf[%d * 4 * BN + warp * BN + 8 * j + 2 * qd + e] = v_;\n      }\n",
            q, colsum_slot(g, q));
}

/* column partials: 4 warps' sums of column t added in order */
static void col_end(gen *g, int q) {
  const int k = g->arg_red0 + q;
  if (col_is_max(g, q)) {
    coda_sb_printf(g->b,
                   "#pragma unroll\n      for (int cc = t; cc < BN; cc += 128) {\n"
                   "        const float *w_ = sc.buf + %d * 4 * BN + cc;\n"
                   "        float v_ = w_[0];\n"
                   "        v_ = w_[BN] > v_ ? w_[BN] : v_; v_ = w_[2 * BN] > v_ ? w_[2 * BN] : v_; v_ = w_[3 * BN] > v_ ? w_[3 * BN] : v_;\n"
                   "        if (wr0 < M && tc0 + cc < N) ((float *)p.ptr[%d])[(long long)s_ * p.ld[%d] + tc0 + cc] = v_;\n"
                   "      }\n",
                   colsum_slot(g, q), k, k);
    return;
  }
  coda_sb_printf(g->b,
            "#pragma unroll\n      for (int cc = t; cc < BN; cc += 128) {\n"
            "        const float *w_ = sc.buf + %d * 4 * BN + cc;\n"
            "        const float v_ = ((w_[0] + w_[BN]) + w_[2 * BN]) + w_[3 * BN];\n"
            "        if (wr0 < M && tc0 + cc < N) ((float *)p.ptr[%d])[(long long)s_ * p.ld[%d] + tc0 + cc] = v_;\n"
            "      }\n",
            colsum_slot(g, q), k, k);
}

static const epi_emitter kRowsum = {
    .name = "rowsum", .hook = {[EPI_BEGIN] = fold_begin, [EPI_POINT] = rowsum_point, [EPI_END_ROW] = fold_end_row}};
static const epi_emitter kRowmax = {
    .name = "rowmax", .hook = {[EPI_BEGIN] = fold_begin, [EPI_POINT] = rowmax_point, [EPI_END_ROW] = fold_end_row}};
static const epi_emitter kRowlse = {.name = "rowlse",
                                    .hook = {[EPI_BEGIN] = fold_begin,
                                     [EPI_FOLD_DECL] = lse_fold_decl,
                                     [EPI_POINT] = lse_point,
                                     [EPI_CHUNK_FOLD] = lse_chunk_fold,
                                     [EPI_END_ROW] = fold_end_row}};
static const epi_emitter kSegsum = {.name = "segsum",
                                    .hook = {[EPI_BEGIN] = fold_begin,
                                     [EPI_POINT] = rowsum_point,
                                     [EPI_FLUSH] = seg_flush,
                                     [EPI_END_ROW] = fold_end_row}};
static const epi_emitter kSegmax = {.name = "segmax",
                                    .hook = {[EPI_BEGIN] = fold_begin,
                                     [EPI_POINT] = rowmax_point,
                                     [EPI_FLUSH] = seg_flush,
                                     [EPI_END_ROW] = fold_end_row}};
static const epi_emitter kSegsumNarrow = {
    .name = "segsum narrow", .hook = {[EPI_HALF] = nseg_half, [EPI_POINT] = nseg_point, [EPI_STORE] = nseg_store}};
static const epi_emitter kRowpick = {.name = "rowpick", .hook = {[EPI_BEGIN] = pick_begin, [EPI_POINT] = pick_point}};
static const epi_emitter kColsum = {.name = "colsum",
                                    .hook = {[EPI_GROUP] = col_group,
                                     [EPI_POINT] = col_point,
                                     [EPI_GROUP_END] = col_group_end,
                                     [EPI_END] = col_end},
                                    .smem = 4L * CODA_EPI_BN * (long)sizeof(float)}; /* 4 warps' column sums */

const epi_emitter *epi_reduce_emitter(const ir_reduce *r) {
  switch (r->kind) {
  case CODA_REDUCE_ROWSUM: return &kRowsum;
  case CODA_REDUCE_ROWMAX: return &kRowmax;
  case CODA_REDUCE_ROWLSE: return &kRowlse;
  case CODA_REDUCE_SEGSUM: return epi_is_row_fold(r) ? &kSegsum : &kSegsumNarrow;
  case CODA_REDUCE_ROWPICK: return &kRowpick;
  case CODA_REDUCE_COLSUM:
  case CODA_REDUCE_COLMAX: return &kColsum; /* the hooks read the kind */
  case CODA_REDUCE_SEGMAX: return epi_is_row_fold(r) ? &kSegmax : &kSegsumNarrow;
  case CODA_REDUCE_TOTAL: return NULL; /* a pass list lowers it (lang/pass_split.c) */
  }
  return NULL;
}
