/* The argument emitters of the epilogue code generator: one per input kind
 * (scalar, row vector, rowsum input, column vector, tile) and one for the
 * outputs, each a set of hooks the driver (coda_epi_functor_source) calls
 * at the phases of the functor (epi_emit.h): what the argument declares,
 * loads per fragment, per chunk, per column pair and per group, which
 * expression a read of it is at a point, and how an output is kept per
 * point and stored (direct, or into the staging and then by TMA or as
 * 16-byte vectors). Tile inputs and outputs read their place in the shared
 * scratch from the staging plan (gen.sp, epi_emit_stage.c). */
#include "backends/cuda/epi_emit.h"

#include <stdio.h>

/* ------------------------------------------------------------ scalar */

static void scalar_begin(gen *g, int k) {
  coda_sb_printf(g->b, "    const float sc%d = coda_epi::ld1<%d>(p.ptr[%d], 0);\n", k,
                 epi_dt_code(g->p->inputs[k].dtype), k);
}

static void scalar_read(gen *g, int k, coda_lane lane) { coda_sb_printf(g->b, "sc%d", k); }

/* ------------------------------------------------------------ row vector */

static void row_begin(gen *g, int k) {
  coda_sb_printf(g->b,
            "    float rw%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
            "      const int r = f.row0 + 8 * h;\n"
            "      rw%d[h] = r < M ? coda_epi::ld1<%d>(p.ptr[%d], (long long)r * p.ld[%d]) : 0.0f;\n    }\n",
            k, k, epi_dt_code(g->p->inputs[k].dtype), k, k);
}

static void row_read(gen *g, int k, coda_lane lane) { coda_sb_printf(g->b, "rw%d[h]", k); }

/* ------------------------------------------------------------ rowsum input */

/* the row's p.cnt partials, summed in index order */
static void rowsum_begin(gen *g, int k) {
  coda_sb_printf(g->b,
            "    float rq%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
            "      const int r = f.row0 + 8 * h;\n"
            "      float s_ = 0.0f;\n"
            "      if (r < M) {\n"
            "        const float *q_ = (const float *)p.ptr[%d] + (long long)r * p.ld[%d];\n"
            "        s_ = q_[0];\n"
            "        for (int t_ = 1; t_ < p.cnt[%d]; ++t_) s_ += q_[t_];\n"
            "      }\n"
            "      rq%d[h] = s_;\n    }\n",
            k, k, k, k, k);
}

static void rowsum_read(gen *g, int k, coda_lane lane) { coda_sb_printf(g->b, "rq%d[h]", k); }

/* rowmax / rowlse inputs: the row's partials combined as the max and lse
 * finishers do (backends/cpu/finish.c): the max from -inf keeping a value
 * greater than it; lse = mx + log sum exp(P - mx), mx itself at +-inf */
static void rowmaxlse_begin(gen *g, int k) {
  const int lse = g->p->inputs[k].kind == CODA_ARG_ROWLSE;
  coda_sb_printf(g->b,
            "    float rq%d[2];\n#pragma unroll\n    for (int h = 0; h < 2; ++h) {\n"
            "      const int r = f.row0 + 8 * h;\n"
            "      float m_ = -CODA_INF;\n"
            "      if (r < M) {\n"
            "        const float *q_ = (const float *)p.ptr[%d] + (long long)r * p.ld[%d];\n"
            "        for (int t_ = 0; t_ < p.cnt[%d]; ++t_) m_ = q_[t_] > m_ ? q_[t_] : m_;\n",
            k, k, k, k);
  if (lse)
    coda_sb_printf(g->b,
            "        if (m_ != -CODA_INF && m_ != CODA_INF) {\n"
            "          float s_ = 0.0f;\n"
            "          for (int t_ = 0; t_ < p.cnt[%d]; ++t_) s_ += expf(q_[t_] - m_);\n"
            "          m_ += logf(s_);\n"
            "        }\n", k);
  coda_sb_printf(g->b, "      }\n      rq%d[h] = m_;\n    }\n", k);
}

/* ------------------------------------------------------------ column vector */

/* The fast case (contiguous, aligned, the tile's columns all inside N): one
 * base pointer per fragment and loads at compile-time offsets from it,
 * instead of a 64-bit address and bound checks per pair of values. */
static void col_begin(gen *g, int k) {
  coda_sb_printf(g->b,
                 "    const bool cf%d = (p.flags[%d] & 1) && tc0 + BN <= N;\n"
                 "    const uint8_t *const cp%d = (const uint8_t *)p.ptr[%d] + (long long)f.col0 * %d;\n",
                 k, k, k, k, epi_dt_size(g->p->inputs[k].dtype));
}

static void col_chunk_decl(gen *g, int k) {
  if (g->split) /* the second pairs' entries are read, not used: zeros */
    coda_sb_printf(g->b, "      float2 cvb%d[%d] = {}, cwb%d[%d] = {}; /* cwb: the pairs S/2 columns on */\n", k, EPI_JC,
                   k, EPI_JC);
  else coda_sb_printf(g->b, "      float2 cvb%d[%d];\n", k, EPI_JC);
}

static void col_pair_load(gen *g, int k) {
  const ir_input *in = &g->p->inputs[k];
  coda_sb_printf(g->b, "        cvb%d[jj] = cf%d ? coda_epi::ldv2<%d>(cp%d + %d * (jc + jj))\n"
                 "                    : coda_epi::ld2<%d>(p.ptr[%d], (long long)c * p.ld[%d], p.ld[%d], cok0, cok1, p.flags[%d] & 1);\n",
                 k, k, epi_dt_code(in->dtype), k, 8 * epi_dt_size(in->dtype), epi_dt_code(in->dtype), k, k,
                 k, k);
  if (g->split)
    coda_sb_printf(g->b, "        cwb%d[jj] = cf%d ? coda_epi::ldv2<%d>(cp%d + %d * (jc + jj) + %d)\n"
                   "                    : coda_epi::ld2<%d>(p.ptr[%d], (long long)(c + %d) * p.ld[%d], p.ld[%d], cok0, cok1, p.flags[%d] & 1);\n",
                   k, k, epi_dt_code(in->dtype), k, 8 * epi_dt_size(in->dtype), g->split / 2 * epi_dt_size(in->dtype),
                   epi_dt_code(in->dtype), k, g->split / 2, k, k, k);
}

static void col_group(gen *g, int k) {
  coda_sb_printf(g->b, "      const float2 cv%d = cvb%d[jj];\n", k, k);
  if (g->split) coda_sb_printf(g->b, "      const float2 cw%d = cwb%d[jj];\n", k, k);
}

static void col_read(gen *g, int k, coda_lane lane) {
  if (g->split) coda_sb_printf(g->b, lane == CODA_LANE_ODD ? "(e ? cw%d.y : cw%d.x)" : "(e ? cv%d.y : cv%d.x)", k, k);
  else if (g->pair) coda_sb_printf(g->b, "cv%d.%c", k, lane == CODA_LANE_ODD ? 'y' : 'x');
  else coda_sb_printf(g->b, "(e ? cv%d.y : cv%d.x)", k, k);
}

/* ------------------------------------------------------------ tile input */

/* half: one value per point, two points per group with half-split pairs */
static const char *tile_type(const gen *g, coda_width w) {
  return w == CODA_WIDTH_HALF ? (g->split ? "float2" : "float") : w == CODA_WIDTH_X2 ? "float4" : "float2";
}

/* The index of a half-width view at column c of a half-split point: the
 * pair's number (c / S) (S/2) + c % S, even for even c. */
static void split_half_index(gen *g, char *out, size_t n) {
  snprintf(out, n, "(c / %d) * %d + c %% %d", g->split, g->split / 2, g->split);
}

static void tile_stage_decl(gen *g, int k) {
  if (g->sp.in_off[k] >= 0) epi_emit_align_flag(g, k, epi_dt_size(g->p->inputs[k].dtype));
}

static void tile_chunk_decl(gen *g, int k) {
  coda_sb_printf(g->b, "      %s tvb%d[%d][2];\n", tile_type(g, g->p->inputs[k].width), k, EPI_JC);
  if (g->split && g->p->inputs[k].width == CODA_WIDTH_FULL)
    coda_sb_printf(g->b, "      float2 twb%d[%d][2]; /* the pairs S/2 columns on */\n", k, EPI_JC);
}

static void tile_half_load(gen *g, int k) {
  const ir_input *in = &g->p->inputs[k];
  const stage_plan *sp = &g->sp;
  coda_strbuf *b = g->b;
  int dt = epi_dt_code(in->dtype);
  if (sp->in_off[k] >= 0) {
    const char *fn = in->width == CODA_WIDTH_HALF ? "sv1" : in->width == CODA_WIDTH_X2 ? "sv4" : "sv2";
    /* row lrow + 8h: swz(r + 8, b) == swz(r, b) + 8 * RB for every RB
     * (the XOR key of row r, (r / (128 / RB)) % (RB / 16), repeats every
     * 8 rows), so h becomes an immediate offset */
    coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::%s<%d>(sb_ + %d + %s * %d + %d * h + coda_epi::swz<%d>(lrow, %d * %s));\n",
              k, fn, dt, sp->in_off[k], sp->dbl ? "((jc / 4) & 1)" : "0", 64 * sp->in_rb[k],
              8 * sp->in_rb[k], sp->in_rb[k], epi_dt_size(in->dtype), epi_view_byte(in->width));
    return;
  }
  if (g->split) { /* staging is off with half-split pairs */
    if (in->width == CODA_WIDTH_HALF) {
      char hx[64];
      split_half_index(g, hx, sizeof hx);
      coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::ld2<%d>(p.ptr[%d], ro * p.ld[%d] + %s, 1, ok0, ok1, p.flags[%d] & 1);\n",
                     k, dt, k, k, hx, k);
    } else {
      coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::ld2<%d>(p.ptr[%d], ro * p.ld[%d] + c, 1, ok0, ok1, p.flags[%d] & 1);\n",
                     k, dt, k, k, k);
      coda_sb_printf(b, "          twb%d[jj][h] = coda_epi::ld2<%d>(p.ptr[%d], ro * p.ld[%d] + c + %d, 1, ok0, ok1, p.flags[%d] & 1);\n",
                     k, dt, k, k, g->split / 2, k);
    }
    return;
  }
  if (in->width == CODA_WIDTH_HALF)
    coda_sb_printf(b, "          tvb%d[jj][h] = ok0 ? coda_epi::ld1<%d>(p.ptr[%d], ro * p.ld[%d] + c / 2) : 0.0f;\n",
              k, dt, k, k);
  else if (in->width == CODA_WIDTH_X2)
    coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::ld4<%d>(p.ptr[%d], ro * p.ld[%d] + 2 * c, ok0, ok1, p.flags[%d] & 2, p.flags[%d] & 1);\n",
              k, dt, k, k, k, k);
  else
    coda_sb_printf(b, "          tvb%d[jj][h] = coda_epi::ld2<%d>(p.ptr[%d], ro * p.ld[%d] + c, 1, ok0, ok1, p.flags[%d] & 1);\n",
              k, dt, k, k, k);
}

static void tile_half(gen *g, int k) {
  const coda_width w = g->p->inputs[k].width;
  coda_sb_printf(g->b, "        const %s %s%d = tvb%d[jj][h];\n", tile_type(g, w), w == CODA_WIDTH_HALF ? "th" : "tv",
                 k, k);
  if (g->split && w == CODA_WIDTH_FULL) coda_sb_printf(g->b, "        const float2 tw%d = twb%d[jj][h];\n", k, k);
}

static void tile_read(gen *g, int k, coda_lane lane) {
  const ir_input *in = &g->p->inputs[k];
  coda_strbuf *b = g->b;
  int odd = lane == CODA_LANE_ODD;
  if (g->split && in->width == CODA_WIDTH_HALF) coda_sb_printf(b, "(e ? th%d.y : th%d.x)", k, k);
  else if (g->split) coda_sb_printf(b, odd ? "(e ? tw%d.y : tw%d.x)" : "(e ? tv%d.y : tv%d.x)", k, k);
  else if (in->width == CODA_WIDTH_HALF) coda_sb_printf(b, "th%d", k);
  else if (in->width == CODA_WIDTH_X2) /* elem mode only */
    coda_sb_printf(b, odd ? "(e ? tv%d.w : tv%d.y)" : "(e ? tv%d.z : tv%d.x)", k, k);
  else if (g->pair) coda_sb_printf(b, "tv%d.%c", k, odd ? 'y' : 'x');
  else coda_sb_printf(b, "(e ? tv%d.y : tv%d.x)", k, k);
}

static const epi_emitter kScalar = {.name = "scalar", .hook = {[EPI_BEGIN] = scalar_begin}, .read = scalar_read};
static const epi_emitter kRow = {.name = "row", .hook = {[EPI_BEGIN] = row_begin}, .read = row_read};
static const epi_emitter kRowsum = {.name = "rowsum", .hook = {[EPI_BEGIN] = rowsum_begin}, .read = rowsum_read};
static const epi_emitter kRowmax = {.name = "rowmax", .hook = {[EPI_BEGIN] = rowmaxlse_begin}, .read = rowsum_read};
static const epi_emitter kRowlse = {.name = "rowlse", .hook = {[EPI_BEGIN] = rowmaxlse_begin}, .read = rowsum_read};
static const epi_emitter kCol = {.name = "col",
                                 .hook = {[EPI_BEGIN] = col_begin,
                                  [EPI_CHUNK_DECL] = col_chunk_decl,
                                  [EPI_PAIR_LOAD] = col_pair_load,
                                  [EPI_GROUP] = col_group},
                                 .read = col_read};
static const epi_emitter kTile = {.name = "tile",
                                  .hook = {[EPI_STAGE_DECL] = tile_stage_decl,
                                   [EPI_CHUNK_DECL] = tile_chunk_decl,
                                   [EPI_HALF_LOAD] = tile_half_load,
                                   [EPI_HALF] = tile_half},
                                  .read = tile_read};

const epi_emitter *epi_input_emitter(coda_arg_kind k) {
  switch (k) {
  case CODA_ARG_ROW: return &kRow;
  case CODA_ARG_COL: return &kCol;
  case CODA_ARG_SCALAR: return &kScalar;
  case CODA_ARG_ROWSUM: return &kRowsum;
  case CODA_ARG_ROWMAX: return &kRowmax;
  case CODA_ARG_ROWLSE: return &kRowlse;
  default: return &kTile;
  }
}

/* ------------------------------------------------------------ output */

static void out_stage_decl(gen *g, int o) {
  if (g->sp.out_off[o] >= 0) epi_emit_align_flag(g, g->arg_out0 + o, epi_dt_size(g->p->outputs[o].dtype));
}

/* per-point values that the store consumes after the points */
static void out_half(gen *g, int o) { coda_sb_printf(g->b, "        float ov%d[2], ow%d[2]; (void)ow%d;\n", o, o, o); }

static void out_point(gen *g, int o) {
  const ir_output *op = &g->p->outputs[o];
  coda_sb_printf(g->b, "          ov%d[e] = r%d;\n", o, op->reg_even);
  if (op->reg_odd >= 0) coda_sb_printf(g->b, "          ow%d[e] = r%d;\n", o, op->reg_odd);
}

/* The group's values: rounded into the staging, or stored (accumulated)
 * directly. */
static void out_store(gen *g, int o) {
  const ir_output *op = &g->p->outputs[o];
  const stage_plan *sp = &g->sp;
  coda_strbuf *b = g->b;
  const int pair = g->pair;
  const int k = g->arg_out0 + o, dt = epi_dt_code(op->dtype);
  const char *acc = op->accumulate ? "true" : "false";
  if (sp->out_off[o] >= 0 && sp->frag) {
    /* half-split pairs, staged per fragment: the first columns c, c + 1
     * (column pair j) and the second ones (pair j + S/16), each in its
     * chunk's buffer */
    for (int half = 0; half < 2; half++) {
      char jx[32];
      snprintf(jx, sizeof jx, half ? "(j + %d)" : "(j)", g->split / 16);
      coda_sb_printf(b, "        coda_epi::so2<%d>(sb_ + %d + (%s / 4) * %d + %d * h + coda_epi::swz<%d>(lrow, %d * (8 * (%s %% 4) + 2 * qd)), %s%d[0], %s%d[1]);\n",
                     dt, sp->out_off[o], jx, 64 * sp->out_rb[o], 8 * sp->out_rb[o], sp->out_rb[o],
                     epi_dt_size(op->dtype), jx, half ? "ow" : "ov", o, half ? "ow" : "ov", o);
    }
    return;
  }
  if (sp->out_off[o] >= 0) {
    const char *fn = pair ? (op->width == CODA_WIDTH_HALF ? "so1" : "so2")
                          : (op->width == CODA_WIDTH_X2 ? "so4" : "so2");
    coda_sb_printf(b, "        coda_epi::%s<%d>(sb_ + %d + %s * %d + %d * h + coda_epi::swz<%d>(lrow, %d * %s), ", fn, dt,
              sp->out_off[o], sp->out_dbl ? "((jc / 4) & 1)" : "0", 64 * sp->out_rb[o],
              8 * sp->out_rb[o], sp->out_rb[o], epi_dt_size(op->dtype), epi_view_byte(op->width));
    if (pair && op->width == CODA_WIDTH_HALF) coda_sb_printf(b, "ov%d[0]);\n", o);
    else if (pair) coda_sb_printf(b, "ov%d[0], ow%d[0]);\n", o, o);
    else if (op->width == CODA_WIDTH_X2) coda_sb_printf(b, "make_float4(ov%d[0], ow%d[0], ov%d[1], ow%d[1]));\n", o, o, o, o);
    else coda_sb_printf(b, "ov%d[0], ov%d[1]);\n", o, o);
    return;
  }
  if (g->split) { /* two points: first columns c, c + 1 and the second ones S/2 on */
    if (op->width == CODA_WIDTH_HALF) {
      char hx[64];
      split_half_index(g, hx, sizeof hx);
      coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + %s, ok0, ok1, p.flags[%d] & 1, ov%d[0], ov%d[1]);\n",
                     dt, acc, k, k, hx, k, o, o);
    } else {
      coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c, ok0, ok1, p.flags[%d] & 1, ov%d[0], ov%d[1]);\n",
                     dt, acc, k, k, k, o, o);
      coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c + %d, ok0, ok1, p.flags[%d] & 1, ow%d[0], ow%d[1]);\n",
                     dt, acc, k, k, g->split / 2, k, o, o);
    }
  } else if (pair) {
    if (op->width == CODA_WIDTH_HALF)
      coda_sb_printf(b, "        if (ok0) coda_epi::st1<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c / 2, ov%d[0]);\n",
                dt, acc, k, k, o);
    else
      coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c, ok0, ok0, p.flags[%d] & 1, ov%d[0], ow%d[0]);\n",
                dt, acc, k, k, k, o, o);
  } else if (op->width == CODA_WIDTH_X2) {
    coda_sb_printf(b, "        coda_epi::st4<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + 2 * c, ok0, ok1, p.flags[%d] & 2, p.flags[%d] & 1, make_float4(ov%d[0], ow%d[0], ov%d[1], ow%d[1]));\n",
              dt, acc, k, k, k, k, o, o, o, o);
  } else {
    coda_sb_printf(b, "        coda_epi::st2<%d, %s>((void *)p.ptr[%d], ro * p.ld[%d] + c, ok0, ok1, p.flags[%d] & 1, ov%d[0], ov%d[1]);\n",
              dt, acc, k, k, k, o, o);
  }
}

/* A staged chunk to the view: one thread stores it with TMA (the staging
 * swizzle is the map's), or, for views TMA cannot address, all threads
 * store it as 16-byte vectors. */
static void out_chunk_store(gen *g, int o) {
  const stage_plan *sp = &g->sp;
  if (sp->out_off[o] < 0) return;
  const ir_output *op = &g->p->outputs[o];
  const int k = g->arg_out0 + o;
  char v0[96];
  epi_view_v0(op->width, "jc", v0, sizeof v0);
  char buf[64];
  snprintf(buf, sizeof buf, "sb_ + %d + %s * %d", sp->out_off[o],
           sp->frag ? "(jc / 4)" : sp->out_dbl ? "((jc / 4) & 1)" : "0", 64 * sp->out_rb[o]);
  if (o < CODA_EPI_MAX_TMA && !g->sm80) /* (sm80: no TMA) */
    coda_sb_printf(g->b,
              "      if (p.flags[%d] & 4) {\n"
              "        if (threadIdx.x %% 128 == 0) coda_sm90::%s(&p.tm[%d], %s, (int)(%s), wr0);\n"
              "      } else\n  ",
              k, op->accumulate ? "tma_reduce_add_2d" : "tma_store_2d", o, buf, v0);
  coda_sb_printf(g->b, "      coda_epi::stage_out<%d, %d%s>(%s, (void *)p.ptr[%d], p.ld[%d], al%d, wr0, %s, %s, M);\n",
            epi_dt_size(op->dtype), sp->out_rb[o], op->accumulate ? ", true" : "", buf, k, k, k, v0,
            epi_view_len(op->width));
}

const epi_emitter epi_output_emitter = {.name = "output",
                                        .hook = {[EPI_STAGE_DECL] = out_stage_decl,
                                         [EPI_HALF] = out_half,
                                         [EPI_POINT] = out_point,
                                         [EPI_STORE] = out_store,
                                         [EPI_CHUNK_STORE] = out_chunk_store}};
