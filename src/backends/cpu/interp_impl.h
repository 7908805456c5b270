/* Body of the program interpreter for one compute type; included by
 * interp.c with REAL (float or double), SFX (f32 or f64) and RF(name)
 * (the libm function of that type) defined. */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

/* d[i] = t[off + i*stride] converted to REAL, i < n. */
static void CAT(load, SFX)(REAL *restrict d, const coda_tensor *t, int64_t off,
                           int64_t stride, int n) {
  switch (t->dtype) {
  case CODA_BF16: {
    const uint16_t *s = (const uint16_t *)t->data + off;
    for (int i = 0; i < n; i++) d[i] = cpu_bf16_to_f32(s[i * stride]);
  } break;
  case CODA_F16: {
    const uint16_t *s = (const uint16_t *)t->data + off;
    for (int i = 0; i < n; i++) d[i] = cpu_f16_to_f32(s[i * stride]);
  } break;
  case CODA_F32: {
    const float *s = (const float *)t->data + off;
    for (int i = 0; i < n; i++) d[i] = (REAL)s[i * stride];
  } break;
  case CODA_F64: {
    const double *s = (const double *)t->data + off;
    for (int i = 0; i < n; i++) d[i] = (REAL)s[i * stride];
  } break;
  case CODA_I32: {
    const int32_t *s = (const int32_t *)t->data + off;
    for (int i = 0; i < n; i++) d[i] = (REAL)s[i * stride];
  } break;
  }
}

/* REAL -> float for a later rounding to 16 bits. In exact mode the double
 * is first rounded to float with round-to-odd (truncate, then set the last
 * bit if inexact): with 13+ spare bits this makes the second rounding
 * give the correctly rounded 16-bit value, so the value is rounded once. */
static inline float CAT(narrow, SFX)(REAL x) {
#if CPU_REAL_IS_DOUBLE
  float f = (float)x;
  if ((double)f != x && x == x) {
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
    union { float f; uint32_t u; } v = {f};
    v.u |= 1u;
    f = v.f;
  }
  return f;
#else
  return x;
#endif
}

/* t[off + i*stride] = round(v[i]) (or round(old + v[i]) when accumulating;
 * the addition happens in REAL: fp32, or fp64 in exact mode). */
static void CAT(store, SFX)(const coda_tensor *t, int64_t off, int64_t stride,
                            const REAL *restrict v, int n, int accumulate) {
  switch (t->dtype) {
  case CODA_BF16: {
    uint16_t *s = (uint16_t *)t->data + off;
    for (int i = 0; i < n; i++) {
      REAL x = v[i];
      if (accumulate) x += (REAL)cpu_bf16_to_f32(s[i * stride]);
      s[i * stride] = cpu_f32_to_bf16(CAT(narrow, SFX)(x));
    }
  } break;
  case CODA_F16: {
    uint16_t *s = (uint16_t *)t->data + off;
    for (int i = 0; i < n; i++) {
      REAL x = v[i];
      if (accumulate) x += (REAL)cpu_f16_to_f32(s[i * stride]);
      s[i * stride] = coda_f32_to_f16(CAT(narrow, SFX)(x));
    }
  } break;
  case CODA_F32: {
    float *s = (float *)t->data + off;
    for (int i = 0; i < n; i++) {
      REAL x = v[i];
      if (accumulate) x += (REAL)s[i * stride];
      s[i * stride] = (float)x;
    }
  } break;
  case CODA_F64: {
    double *s = (double *)t->data + off;
    for (int i = 0; i < n; i++) s[i * stride] = accumulate ? s[i * stride] + (double)v[i] : (double)v[i];
  } break;
  case CODA_I32: {
    int32_t *s = (int32_t *)t->data + off;
    for (int i = 0; i < n; i++) s[i * stride] = (int32_t)v[i];
  } break;
  }
}

static REAL CAT(load1, SFX)(const coda_tensor *t, int64_t off) {
  REAL v = 0;
  CAT(load, SFX)(&v, t, off, 1, 1);
  return v;
}
static void CAT(store1, SFX)(const coda_tensor *t, int64_t off, REAL v) {
  CAT(store, SFX)(t, off, 1, &v, 1, 0);
}

/* Per-row sums of an M x T partials tensor, in index order in REAL:
 * s = P[m,0]; s += P[m,1]; ... (the semantics of a rowsum input). */
static void CAT(row_sums, SFX)(REAL *restrict out, const coda_tensor *P) {
  for (int64_t m = 0; m < P->rows; m++) {
    REAL s = CAT(load1, SFX)(P, m * P->ld);
    for (int64_t t = 1; t < P->cols; t++) s += CAT(load1, SFX)(P, m * P->ld + t);
    out[m] = s;
  }
}

/* Per-row max (kind ROWMAX) or log-sum-exp (ROWLSE) of M x T partials, as
 * the max and lse finishers combine them (backends/cpu/finish.c): the max
 * from -inf keeping a value greater than it; lse = mx + log sum exp(P - mx),
 * mx itself when it is +-inf. */
static void CAT(row_maxlse, SFX)(REAL *restrict out, const coda_tensor *P, int lse) {
  for (int64_t m = 0; m < P->rows; m++) {
    REAL mx = -(REAL)INFINITY;
    for (int64_t t = 0; t < P->cols; t++) {
      const REAL v = CAT(load1, SFX)(P, m * P->ld + t);
      if (v > mx) mx = v;
    }
    if (lse && mx != -(REAL)INFINITY && mx != (REAL)INFINITY) {
      REAL s = 0;
      for (int64_t t = 0; t < P->cols; t++) s += RF(exp)(CAT(load1, SFX)(P, m * P->ld + t) - mx);
      mx += RF(log)(s);
    }
    out[m] = mx;
  }
}

static inline REAL CAT(sigm, SFX)(REAL x) { return (REAL)1 / ((REAL)1 + RF(exp)(-x)); }

#define GELU_K0 ((REAL)0.7978845608028654) /* sqrt(2/pi) */
#define GELU_K1 ((REAL)0.044715)
static inline REAL CAT(gelu, SFX)(REAL x) {
  REAL t = RF(tanh)(GELU_K0 * (x + GELU_K1 * x * x * x));
  return (REAL)0.5 * x * ((REAL)1 + t);
}
/* d/dx of the tanh-form gelu: 0.5(1+t) + 0.5x(1-t^2)k0(1+3k1 x^2). */
static inline REAL CAT(dgelu, SFX)(REAL x) {
  REAL t = RF(tanh)(GELU_K0 * (x + GELU_K1 * x * x * x));
  return (REAL)0.5 * ((REAL)1 + t) +
         (REAL)0.5 * x * ((REAL)1 - t * t) * GELU_K0 * ((REAL)1 + (REAL)3 * GELU_K1 * x * x);
}
/* idiv(a, b) = floor(a / b), imod(a, b) = a - b floor(a / b) on integer
 * values (the validator admits no other operands), exactly in 64-bit
 * integers; b = 0 gives 0 and a; beyond 2^53 (not an index) NaN. */
static inline REAL CAT(idiv, SFX)(REAL a, REAL b) {
  if (!(RF(fabs)(a) < (REAL)9.0e15) || !(RF(fabs)(b) < (REAL)9.0e15)) return (REAL)NAN;
  const int64_t x = (int64_t)a, y = (int64_t)b;
  if (!y) return 0;
  int64_t q = x / y;
  if (x % y != 0 && ((x < 0) != (y < 0))) q--;
  return (REAL)q;
}
static inline REAL CAT(imod, SFX)(REAL a, REAL b) {
  if (!(RF(fabs)(a) < (REAL)9.0e15) || !(RF(fabs)(b) < (REAL)9.0e15)) return (REAL)NAN;
  const int64_t x = (int64_t)a, y = (int64_t)b;
  if (!y) return a;
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return (REAL)r;
}
/* d/dx silu = s(1 + x(1 - s)), s = sigmoid(x). */
static inline REAL CAT(dsilu, SFX)(REAL x) {
  REAL s = CAT(sigm, SFX)(x);
  return s * ((REAL)1 + x * ((REAL)1 - s));
}
/* dswiglu(g, u, dy): dg = dy*u*dsilu(g), du = dy*silu(g). */
static inline void CAT(dswiglu, SFX)(REAL g, REAL u, REAL dy, REAL *dg, REAL *du) {
  REAL s = CAT(sigm, SFX)(g);
  *dg = dy * u * (s * ((REAL)1 + g * ((REAL)1 - s)));
  *du = dy * g * s;
}
/* dgeglu(g, u, dy): dg = dy*u*dgelu(g), du = dy*gelu(g). */
static inline void CAT(dgeglu, SFX)(REAL g, REAL u, REAL dy, REAL *dg, REAL *du) {
  *dg = dy * u * CAT(dgelu, SFX)(g);
  *du = dy * CAT(gelu, SFX)(g);
}

/* Runs the instructions of a program on cnt iteration points of row m,
 * points p0 .. p0+cnt-1 (columns in elem mode, pairs in pair mode).
 * Half-split pairs (h = S/2 > 0): the chunk lies in one half of a segment,
 * so its points' first columns are lo0 .. lo0+cnt-1 and their second ones
 * h further; acc_hi is the accumulator row at the second columns, indexed
 * like acc_row (column - c0). */
static void CAT(eval_chunk, SFX)(const cpu_job *job, REAL *regs, const REAL *acc_row,
                                 const REAL *acc_hi, int64_t c0, int64_t m, int64_t p0, int cnt,
                                 int64_t lo0, int64_t h) {
  const struct coda_program_s *pg = job->prog;
  const int pair = pg->pair_mode;
  for (int ii = 0; ii < pg->ninstrs; ii++) {
    const ir_instr *in = &pg->instrs[ii];
    REAL *d = regs + (int64_t)in->dst * CPU_CHUNK;
    switch (in->code) {
    case IR_CONST:
      for (int i = 0; i < cnt; i++) d[i] = (REAL)in->imm;
      break;
    case IR_ACC:
      if (!acc_row) {
        for (int i = 0; i < cnt; i++) d[i] = 0;
      } else if (!pair) {
        for (int i = 0; i < cnt; i++) d[i] = acc_row[p0 - c0 + i];
      } else if (h) {
        const REAL *src = in->lane == CODA_LANE_ODD ? acc_hi : acc_row;
        for (int i = 0; i < cnt; i++) d[i] = src[lo0 - c0 + i];
      } else {
        int odd = in->lane == CODA_LANE_ODD;
        for (int i = 0; i < cnt; i++) d[i] = acc_row[2 * (p0 + i) - c0 + odd];
      }
      break;
    case IR_ROW:
      for (int i = 0; i < cnt; i++) d[i] = (REAL)m;
      break;
    case IR_COL:
      for (int i = 0; i < cnt; i++) d[i] = (REAL)(h ? lo0 + i : pair ? 2 * (p0 + i) : p0 + i);
      break;
    case IR_READ: {
      const ir_input *ip = &pg->inputs[in->input];
      const coda_tensor *t = job->inputs[in->input];
      int odd = in->lane == CODA_LANE_ODD;
      switch (ip->kind) {
      case CODA_ARG_ROW: {
        REAL v = CAT(load1, SFX)(t, m * cpu_vec_stride(t));
        for (int i = 0; i < cnt; i++) d[i] = v;
      } break;
      case CODA_ARG_SCALAR: {
        REAL v = CAT(load1, SFX)(t, 0);
        for (int i = 0; i < cnt; i++) d[i] = v;
      } break;
      case CODA_ARG_ROWSUM:
      case CODA_ARG_ROWMAX:
      case CODA_ARG_ROWLSE: {
        REAL v = ((const REAL *)job->rowsums[in->input])[m];
        for (int i = 0; i < cnt; i++) d[i] = v;
      } break;
      case CODA_ARG_COL: {
        int64_t vs = cpu_vec_stride(t);
        if (h) CAT(load, SFX)(d, t, (lo0 + odd * h) * vs, vs, cnt);
        else if (pair) CAT(load, SFX)(d, t, (2 * p0 + odd) * vs, 2 * vs, cnt);
        else CAT(load, SFX)(d, t, p0 * vs, vs, cnt);
      } break;
      default: /* tile */
        if (ip->width == CODA_WIDTH_HALF || (!pair && ip->width == CODA_WIDTH_FULL))
          CAT(load, SFX)(d, t, m * t->ld + p0, 1, cnt);
        else if (h)
          CAT(load, SFX)(d, t, m * t->ld + lo0 + odd * h, 1, cnt);
        else
          CAT(load, SFX)(d, t, m * t->ld + 2 * p0 + odd, 2, cnt);
        break;
      }
    } break;
    case IR_STAT: /* a pass list runs such a program (lang/pass_split.c), never one job */
      for (int i = 0; i < cnt; i++) d[i] = (REAL)NAN;
      break;
    case IR_MATH: {
      const REAL *a = regs + (int64_t)in->args[0] * CPU_CHUNK;
      const REAL *b = in->nargs > 1 ? regs + (int64_t)in->args[1] * CPU_CHUNK : a;
      const REAL *c = in->nargs > 2 ? regs + (int64_t)in->args[2] * CPU_CHUNK : a;
      const REAL *e = in->nargs > 3 ? regs + (int64_t)in->args[3] * CPU_CHUNK : a;
      const REAL *f = in->nargs > 4 ? regs + (int64_t)in->args[4] * CPU_CHUNK : a;
      REAL *d2 = in->dst2 >= 0 ? regs + (int64_t)in->dst2 * CPU_CHUNK : NULL;
      /* The CPU column of lang/ops.def: an expression of A0..A4 for one
       * result, a statement setting R0 and R1 for two. Two results go
       * through temporaries: a destination may not alias an operand in
       * SSA, but two-result ops write two registers. */
      switch (in->op) {
#define A0 a[i]
#define A1 b[i]
#define A2 c[i]
#define A3 e[i]
#define A4 f[i]
#define OPF(name) CAT(name, SFX)
#define OP_RESULTS_1(cpu) for (int i = 0; i < cnt; i++) d[i] = (cpu)
#define OP_RESULTS_2(cpu)           \
  for (int i = 0; i < cnt; i++) {   \
    REAL R0, R1;                    \
    cpu;                            \
    d[i] = R0;                      \
    if (d2) d2[i] = R1;             \
  }
#define CODA_OP(id, name, arity, results, sym, prec, cpu, cuda) \
      case CODA_OP_##id: CAT(OP_RESULTS, results)(cpu); break;
#include "lang/ops.def"
#undef OP_RESULTS_1
#undef OP_RESULTS_2
#undef OPF
#undef A0
#undef A1
#undef A2
#undef A3
#undef A4
      }
    } break;
    }
  }
}

/* Folds a chunk of cnt points from point p0 (lo0, h: the half-split
 * pairs' first column and half width, as eval_chunk takes them) into the
 * reductions: the row's running sums, maxima and picks, and the tile's
 * column and segment buffers. */
static inline void CAT(reduce_chunk, SFX)(const cpu_job *job, const REAL *regs, int64_t c0, int64_t p0,
                                          int cnt, int64_t lo0, int64_t h, REAL *rsum, REAL *rmax,
                                          const int64_t *pick, REAL *colbuf, REAL *segbuf) {
  const struct coda_program_s *pg = job->prog;
  const int pair = pg->pair_mode, tile_n = job->tile_n;
  for (int q = 0; q < pg->nreduces; q++) {
    const ir_reduce *rd = &pg->reduces[q];
    const REAL *v = regs + (int64_t)rd->reg * CPU_CHUNK;
    switch (rd->kind) {
    case CODA_REDUCE_ROWSUM:
      for (int i = 0; i < cnt; i++) rsum[q] += v[i];
      break;
    case CODA_REDUCE_ROWMAX:
      for (int i = 0; i < cnt; i++) rmax[q] = v[i] > rmax[q] ? v[i] : rmax[q];
      break;
    case CODA_REDUCE_ROWLSE: {
      /* online log-sum-exp: (rmax, rsum) = running max and sum of
       * exp(v - rmax); a new max rescales the sum. */
      REAL mc = -(REAL)INFINITY;
      for (int i = 0; i < cnt; i++) mc = v[i] > mc ? v[i] : mc;
      if (mc == -(REAL)INFINITY) break;
      if (mc > rmax[q]) {
        rsum[q] = rmax[q] == -(REAL)INFINITY ? 0 : rsum[q] * RF(exp)(rmax[q] - mc);
        rmax[q] = mc;
      }
      if (rmax[q] == (REAL)INFINITY) break;
      for (int i = 0; i < cnt; i++) rsum[q] += RF(exp)(v[i] - rmax[q]);
    } break;
    case CODA_REDUCE_COLSUM:
      for (int i = 0; i < cnt; i++) colbuf[(int64_t)q * tile_n + (p0 - c0) + i] += v[i];
      break;
    case CODA_REDUCE_COLMAX:
      for (int i = 0; i < cnt; i++) {
        REAL *c = &colbuf[(int64_t)q * tile_n + (p0 - c0) + i];
        *c = v[i] > *c ? v[i] : *c;
      }
      break;
    case CODA_REDUCE_TOTAL: /* a pass list lowers it (lang/pass_split.c) */
      break;
    case CODA_REDUCE_SEGSUM:
    case CODA_REDUCE_SEGMAX: {
      /* the segment of a pair is that of its first column */
      int64_t g = rd->segment < tile_n ? rd->segment : tile_n;
      const int mx = rd->kind == CODA_REDUCE_SEGMAX;
      for (int i = 0; i < cnt; i++) {
        int64_t col = h ? lo0 + i : pair ? 2 * (p0 + i) : p0 + i;
        REAL *sb = &segbuf[(int64_t)q * tile_n + (col - c0) / g];
        if (mx) *sb = v[i] > *sb ? v[i] : *sb;
        else *sb += v[i];
      }
    } break;
    case CODA_REDUCE_ROWPICK: {
      int64_t pk = pick[q] < 0 ? -1 : (pair ? pick[q] / 2 : pick[q]);
      if (pk >= p0 && pk < p0 + cnt) rsum[q] = v[pk - p0];
    } break;
    }
  }
}

/* Runs the program (or the plain store) on one tile: rows r0..r0+mt-1,
 * columns c0..c0+nt-1, tile indices (ti, tj). acc is the tile's
 * accumulator (NULL for coda_map); acc2, for half-split pairs whose
 * segment is wider than tile_n, the accumulator of columns c0 + S/2 ..
 * (same pitch), else NULL. */
static void CAT(run_tile, SFX)(const cpu_job *job, const REAL *acc, const REAL *acc2, int64_t ldacc,
                               int64_t r0, int mt, int64_t c0, int nt, int64_t ti,
                               int64_t tj, REAL *regs, REAL *colbuf, REAL *segbuf) {
  const struct coda_program_s *pg = job->prog;
  if (!pg) { /* plain: D = alpha*acc (+ D) */
    REAL alpha = (REAL)job->alpha;
    REAL *tmp = regs;
    for (int r = 0; r < mt; r++) {
      for (int j = 0; j < nt; j++) tmp[j] = alpha * acc[r * ldacc + j];
      CAT(store, SFX)(job->D, (r0 + r) * job->D->ld + c0, 1, tmp, nt, job->accumulate);
    }
    return;
  }
  const int pair = pg->pair_mode;
  int64_t pbeg = pair ? c0 / 2 : c0, pend = pair ? (c0 + nt) / 2 : c0 + nt;
  const int tile_n = job->tile_n;
  /* half-split pairs: pair j is columns lo(j) = (j / h) S + j % h and
   * lo(j) + h; the tile's points are the pairs whose first column it
   * holds: with S <= tile_n whole segments (the pairs c0/2 .. as for
   * adjacent pairs), with S > tile_n a tile in a first half (S/2 is a
   * multiple of tile_n) or none */
  const int64_t S = ir_split_width(pg, job->N), h = S / 2;
  if (S > tile_n) {
    const int64_t off = c0 % S;
    pbeg = off < h ? c0 / S * h + off : 0;
    pend = off < h ? pbeg + nt : 0;
  }
  for (int q = 0; q < pg->nreduces; q++)
    if (ir_reduce_is_col(pg->reduces[q].kind)) {
      const REAL init = pg->reduces[q].kind == CODA_REDUCE_COLMAX ? -(REAL)INFINITY : 0;
      for (int j = 0; j < nt; j++) colbuf[(int64_t)q * tile_n + j] = init;
    }
  for (int r = 0; r < mt; r++) {
    const int64_t m = r0 + r;
    const REAL *acc_row = acc ? acc + r * ldacc : NULL;
    const REAL *acc_hi = !acc || !h ? NULL : acc2 ? acc2 + r * ldacc : acc_row + h;
    REAL rsum[CODA_MAX_REDUCES], rmax[CODA_MAX_REDUCES];
    int64_t pick[CODA_MAX_REDUCES];
    for (int q = 0; q < pg->nreduces; q++) {
      const ir_reduce *rd = &pg->reduces[q];
      rsum[q] = 0;
      rmax[q] = -(REAL)INFINITY;
      pick[q] = -1;
      if (ir_reduce_is_segmented(rd->kind)) {
        const REAL init = rd->kind == CODA_REDUCE_SEGMAX ? -(REAL)INFINITY : 0;
        for (int j = 0; j < nt; j++) segbuf[(int64_t)q * tile_n + j] = init;
      }
      if (rd->kind == CODA_REDUCE_ROWPICK) {
        const coda_tensor *it = job->inputs[rd->index_input];
        double k = coda_load(it, m, 0); /* a row input is (M, 1) */
        pick[q] = (k >= 0 && k < (double)job->N) ? (int64_t)k : -1;
      }
    }
    int cnt = 0;
    for (int64_t p0 = pbeg; p0 < pend; p0 += cnt) {
      cnt = (int)(pend - p0 < CPU_CHUNK ? pend - p0 : CPU_CHUNK);
      int64_t lo0 = 0;
      if (h) { /* a chunk stays inside one half of a segment */
        if (h - p0 % h < cnt) cnt = (int)(h - p0 % h);
        lo0 = p0 / h * S + p0 % h;
      }
      CAT(eval_chunk, SFX)(job, regs, acc_row, acc_hi, c0, m, p0, cnt, lo0, h);
      for (int o = 0; o < pg->noutputs; o++) {
        const ir_output *op = &pg->outputs[o];
        const coda_tensor *t = job->outputs[o];
        const REAL *ve = regs + (int64_t)op->reg_even * CPU_CHUNK;
        if (op->reg_odd >= 0 && h) {
          const REAL *vo = regs + (int64_t)op->reg_odd * CPU_CHUNK;
          CAT(store, SFX)(t, m * t->ld + lo0, 1, ve, cnt, op->accumulate);
          CAT(store, SFX)(t, m * t->ld + lo0 + h, 1, vo, cnt, op->accumulate);
        } else if (op->reg_odd >= 0) {
          const REAL *vo = regs + (int64_t)op->reg_odd * CPU_CHUNK;
          CAT(store, SFX)(t, m * t->ld + 2 * p0, 2, ve, cnt, op->accumulate);
          CAT(store, SFX)(t, m * t->ld + 2 * p0 + 1, 2, vo, cnt, op->accumulate);
        } else {
          CAT(store, SFX)(t, m * t->ld + p0, 1, ve, cnt, op->accumulate);
        }
      }
      CAT(reduce_chunk, SFX)(job, regs, c0, p0, cnt, lo0, h, rsum, rmax, pick, colbuf, segbuf);
    }
    /* row partials of this row, column tile tj */
    for (int q = 0; q < pg->nreduces; q++) {
      const ir_reduce *rd = &pg->reduces[q];
      const coda_tensor *P = job->partials[q];
      switch (rd->kind) {
      case CODA_REDUCE_ROWSUM: CAT(store1, SFX)(P, m * P->ld + tj, rsum[q]); break;
      case CODA_REDUCE_ROWMAX: CAT(store1, SFX)(P, m * P->ld + tj, rmax[q]); break;
      case CODA_REDUCE_ROWLSE: {
        REAL l = rmax[q];
        if (l != -(REAL)INFINITY && l != (REAL)INFINITY) l += RF(log)(rsum[q]);
        CAT(store1, SFX)(P, m * P->ld + tj, l);
      } break;
      case CODA_REDUCE_SEGSUM:
      case CODA_REDUCE_SEGMAX: {
        int64_t g = rd->segment < tile_n ? rd->segment : tile_n;
        int64_t nint = (nt + g - 1) / g;
        for (int64_t s = 0; s < nint; s++)
          CAT(store1, SFX)(P, m * P->ld + c0 / g + s, segbuf[(int64_t)q * tile_n + s]);
      } break;
      case CODA_REDUCE_ROWPICK: {
        /* the tile holding column idx[m] writes it; tile 0 writes 0 for
         * an index outside [0, N) */
        int64_t k = pick[q];
        if (k >= c0 && k < c0 + nt) CAT(store1, SFX)(P, m * P->ld, rsum[q]);
        else if (k < 0 && tj == 0) CAT(store1, SFX)(P, m * P->ld, 0);
      } break;
      default: break;
      }
    }
  }
  for (int q = 0; q < pg->nreduces; q++)
    if (ir_reduce_is_col(pg->reduces[q].kind)) {
      const coda_tensor *P = job->partials[q];
      CAT(store, SFX)(P, ti * P->ld + c0, 1, colbuf + (int64_t)q * tile_n, nt, 0);
    }
}

#undef GELU_K0
#undef GELU_K1
#undef CAT
#undef CAT_
