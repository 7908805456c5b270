/* Plan builder, printer and executor (see plan.h). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime for coda_plan_tune_fusion */
#include "nn/plan.h"

#include "base/internal.h"
#include "base/strbuf.h"
#include "base/tune_cache.h" /* coda_plan_tune_fusion's choices on disk */
#include "api/api.h"           /* copies, cache tags, kernel precompilation */

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ utilities */

static int name_ok(const char *s) {
  return s && s[0] && strlen(s) < PLAN_NAME_MAX;
}

coda_status plan_status(coda_plan p) {
  return p ? p->status : CODA_ERR_INVALID_ARGUMENT;
}

coda_status plan_fail(coda_plan p, coda_status s, const char *fmt, ...) {
  if (!p) return s;
  if (p->status != CODA_OK) return p->status;
  char msg[CODA_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->status = s;
  return coda_fail(p->ctx, s, "plan '%s': %s", p->name, msg);
}

/* Grows an array of `size`-byte elements to hold at least n + 1. */
static int grow(void **arr, int *cap, int n, size_t size) {
  if (n < *cap) return 1;
  int nc = *cap ? *cap * 2 : 16;
  void *q = realloc(*arr, (size_t)nc * size);
  if (!q) return 0;
  memset((char *)q + (size_t)*cap * size, 0, (size_t)(nc - *cap) * size);
  *arr = q;
  *cap = nc;
  return 1;
}

static coda_dtype partial_dtype(coda_plan p) {
  return coda_context_precision(p->ctx) == CODA_PRECISION_F64 ? CODA_F64 : CODA_F32;
}

/* ------------------------------------------------------------- building */

coda_status plan_create(coda_context ctx, const char *name, coda_plan *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan_create: out is NULL");
  *out = NULL;
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!name_ok(name))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan_create: bad plan name");
  coda_plan p = calloc(1, sizeof *p);
  if (!p) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "plan_create: out of memory");
  p->ctx = ctx;
  p->device = coda_context_backend(ctx) != CODA_BACKEND_CPU;
  snprintf(p->name, sizeof p->name, "%s", name);
  *out = p;
  return CODA_OK;
}

void coda_plan_destroy(coda_plan p) {
  if (!p) return;
  for (int i = 0; i < p->nbuf; i++) {
    if (p->bufs[i].owned) {
      if (p->device) coda_free(p->ctx, p->bufs[i].data); /* the context must still exist */
      else free(p->bufs[i].data);
    }
    free(p->bufs[i].init);
  }
  for (int i = 0; i < p->nprog; i++) {
    coda_program_destroy(p->progs[i].prog);
    coda_program_destroy(p->progs[i].unfused);
  }
  if (p->acc_tmp) coda_free(p->ctx, p->acc_tmp);
  if (p->arena) coda_free(p->ctx, p->arena);
  free(p->bufs);
  free(p->steps);
  free(p->progs);
  free(p->text);
  free(p);
}

int plan_find(coda_plan p, const char *name) {
  if (!p || !name) return -1;
  for (int i = 0; i < p->nbuf; i++)
    if (!strcmp(p->bufs[i].name, name)) return i;
  return -1;
}

int plan_buffer(coda_plan p, const char *name, coda_dtype dtype, int64_t rows,
                int64_t cols, plan_role role) {
  if (!p || p->status != CODA_OK) return -1;
  if (!name_ok(name)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "buffer name '%s' is empty or too long",
              name ? name : "(null)");
    return -1;
  }
  if (plan_find(p, name) >= 0) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "buffer '%s' declared twice", name);
    return -1;
  }
  int64_t n;
  if (rows <= 0 || cols <= 0 || !coda_mul_i64(rows, cols, &n) ||
      !coda_mul_i64(n, (int64_t)coda_dtype_size(dtype), &n) || coda_dtype_size(dtype) == 0) {
    plan_fail(p, CODA_ERR_SHAPE, "buffer '%s': bad shape %lld x %lld or dtype", name,
              (long long)rows, (long long)cols);
    return -1;
  }
  if (!grow((void **)&p->bufs, &p->capbuf, p->nbuf, sizeof *p->bufs)) {
    plan_fail(p, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  plan_buf *b = &p->bufs[p->nbuf];
  memset(b, 0, sizeof *b);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->dtype = dtype;
  b->rows = rows;
  b->cols = cols;
  b->ld = cols;
  b->role = role;
  b->live_first = b->live_last = -1;
  b->arena_off = -1;
  b->alias = -1;
  return p->nbuf++;
}

int plan_storage(coda_plan p, int i) {
  return i >= 0 && p->bufs[i].alias >= 0 ? p->bufs[i].alias : i;
}

static int is_alias_target(coda_plan p, int i) {
  for (int k = 0; k < p->nbuf; k++)
    if (p->bufs[k].alias == i) return 1;
  return 0;
}

void plan_buffer_alias(coda_plan p, const char *name, const char *target) {
  if (!p || p->status != CODA_OK) return;
  const int i = plan_find(p, name), t = plan_find(p, target);
  if (i < 0 || t < 0) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "alias: unknown buffer '%s'",
              i < 0 ? (name ? name : "(null)") : target ? target : "(null)");
    return;
  }
  plan_buf *b = &p->bufs[i];
  const plan_buf *u = &p->bufs[t];
  if (i == t || b->alias >= 0 || u->alias >= 0 || is_alias_target(p, i) || is_alias_target(p, t)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT,
              "alias '%s' -> '%s': a buffer takes part in at most one alias, not with itself",
              name, target);
    return;
  }
  if (b->dtype != u->dtype || b->rows != u->rows || b->cols != u->cols) {
    plan_fail(p, CODA_ERR_SHAPE, "alias '%s' (%lld x %lld %s) -> '%s' (%lld x %lld %s): shape and "
              "dtype must be the same", name, (long long)b->rows, (long long)b->cols,
              coda_dtype_name(b->dtype), target, (long long)u->rows, (long long)u->cols,
              coda_dtype_name(u->dtype));
    return;
  }
  if (b->init || b->data) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "alias '%s': it has initial values or memory already", name);
    return;
  }
  b->alias = t;
}

void plan_buffer_init(coda_plan p, const char *name, const double *values) {
  if (!p || p->status != CODA_OK) return;
  int i = plan_find(p, name);
  if (i < 0 || !values) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "initial values for unknown buffer '%s'",
              name ? name : "(null)");
    return;
  }
  plan_buf *b = &p->bufs[i];
  size_t n = (size_t)(b->rows * b->cols);
  free(b->init);
  b->init = malloc(n * sizeof(double));
  if (!b->init) {
    plan_fail(p, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    return;
  }
  memcpy(b->init, values, n * sizeof(double));
}

static int ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

coda_status plan_builtin(coda_context ctx, const char *name, coda_program *out) {
  coda_status s = coda_program_builtin(ctx, name, out);
  if (s != CODA_OK || coda_context_precision(ctx) != CODA_PRECISION_F64) return s;
  /* exact mode: every floating declaration becomes f64 (i32 stays) */
  const char *t = coda_program_text(*out);
  size_t n = strlen(t);
  char *r = malloc(n + 1), *o = r;
  if (!r) {
    coda_program_destroy(*out);
    *out = NULL;
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory retyping '%s'", name);
  }
  for (size_t i = 0; i < n;) {
    int start = i == 0 || !ident_char(t[i - 1]);
    size_t k = 0;
    if (start && !strncmp(t + i, "bf16", 4)) k = 4;
    else if (start && (!strncmp(t + i, "f32", 3) || !strncmp(t + i, "f16", 3))) k = 3;
    if (k && !ident_char(t[i + k])) {
      memcpy(o, "f64", 3);
      o += 3;
      i += k;
    } else {
      *o++ = t[i++];
    }
  }
  *o = '\0';
  coda_program_destroy(*out);
  *out = NULL;
  s = coda_program_parse(ctx, r, out);
  free(r);
  if (s != CODA_OK) {
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
    return coda_fail(ctx, s, "built-in program '%s' retyped to f64: %s", name, msg);
  }
  return CODA_OK;
}

int plan_program_load(coda_plan p, const char *builtin) {
  if (!p || p->status != CODA_OK) return -1;
  if (!name_ok(builtin)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "bad program name");
    return -1;
  }
  for (int i = 0; i < p->nprog; i++)
    if (!strcmp(p->progs[i].name, builtin)) return i;
  coda_program prog = NULL;
  coda_status s = plan_builtin(p->ctx, builtin, &prog);
  if (s != CODA_OK) {
    char inner[CODA_ERRMSG_LEN];
    snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
    plan_fail(p, s, "built-in program '%s': %s", builtin, inner);
    return -1;
  }
  if (!grow((void **)&p->progs, &p->capprog, p->nprog, sizeof *p->progs)) {
    coda_program_destroy(prog);
    plan_fail(p, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  snprintf(p->progs[p->nprog].name, PLAN_NAME_MAX, "%s", builtin);
  p->progs[p->nprog].prog = prog;
  return p->nprog++;
}

/* Appends a zeroed step; NULL after a failure. */
static plan_step *new_step(coda_plan p, plan_step_kind kind, coda_phase phase,
                           const char *label) {
  if (!p || p->status != CODA_OK) return NULL;
  if (phase != CODA_PHASE_FORWARD && phase != CODA_PHASE_BACKWARD) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': bad phase", label ? label : "");
    return NULL;
  }
  if (!grow((void **)&p->steps, &p->capstep, p->nstep, sizeof *p->steps)) {
    plan_fail(p, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    return NULL;
  }
  plan_step *s = &p->steps[p->nstep];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->phase = phase;
  s->prog = s->a = s->b = s->d = -1;
  s->acc_off = -1;
  snprintf(s->label, sizeof s->label, "%s", label ? label : "");
  return s;
}

static int need_buf(coda_plan p, const char *label, const char *name) {
  if (p->status != CODA_OK) return -1;
  int i = plan_find(p, name);
  if (i < 0)
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': unknown buffer '%s'", label,
              name ? name : "(null)");
  return i;
}

/* Parses "arg=buf arg=buf ..." into the step's bindings, creating partial
 * buffers the program asks for. */
static void parse_binds(coda_plan p, plan_step *s, const char *binds) {
  if (!binds) return;
  coda_program prog = s->prog >= 0 ? p->progs[s->prog].prog : NULL;
  const char *c = binds;
  while (p->status == CODA_OK) {
    while (*c == ' ' || *c == '\t' || *c == '\n') c++;
    if (!*c) break;
    const char *eq = strchr(c, '=');
    const char *end = c;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n') end++;
    if (!eq || eq > end || eq == c || eq + 1 == end || eq - c >= PLAN_NAME_MAX ||
        end - eq - 1 >= PLAN_NAME_MAX) {
      plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': bad binding near '%.20s'",
                s->label, c);
      return;
    }
    if (s->nbind >= PLAN_MAX_BINDS) {
      plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': too many bindings", s->label);
      return;
    }
    char arg[PLAN_NAME_MAX], buf[PLAN_NAME_MAX];
    snprintf(arg, sizeof arg, "%.*s", (int)(eq - c), c);
    snprintf(buf, sizeof buf, "%.*s", (int)(end - eq - 1), eq + 1);
    int bi = plan_find(p, buf);
    if (bi < 0 && prog) {
      /* a reduction partial: shape from the program for this step */
      coda_arg_kind kind = CODA_ARG_OUTPUT;
      for (int i = 0; i < coda_program_num_args(prog); i++) {
        coda_arg_info info;
        if (coda_program_arg(prog, i, &info) == CODA_OK && !strcmp(info.name, arg))
          kind = info.kind;
      }
      if (kind == CODA_ARG_PARTIAL) {
        int64_t r = 0, cc = 0;
        coda_status st = coda_program_arg_shape(prog, arg, s->M, s->N, s->tiling.tile_m,
                                                s->tiling.tile_n, &r, &cc);
        if (st != CODA_OK) {
          char inner[CODA_ERRMSG_LEN];
          snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
          plan_fail(p, st, "step '%s': shape of partial '%s': %s", s->label, arg, inner);
          return;
        }
        bi = plan_buffer(p, buf, partial_dtype(p), r, cc, PLAN_ROLE_TEMP);
      }
    }
    if (bi < 0) {
      plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': argument '%s' bound to unknown buffer '%s'",
                s->label, arg, buf);
      return;
    }
    snprintf(s->bind[s->nbind].arg, PLAN_NAME_MAX, "%s", arg);
    s->bind[s->nbind].buf = bi;
    s->nbind++;
    c = end;
  }
}

static int64_t op_rows(const plan_buf *b, coda_transpose t) { return t == CODA_T ? b->cols : b->rows; }
static int64_t op_cols(const plan_buf *b, coda_transpose t) { return t == CODA_T ? b->rows : b->cols; }

void plan_gemm(coda_plan p, coda_phase phase, const char *label, const char *program,
               coda_transpose ta, const char *A, coda_transpose tb, const char *B,
               coda_tiling tiling, const char *binds) {
  plan_step *s = new_step(p, PLAN_GEMM, phase, label);
  if (!s) return;
  s->prog = plan_program_load(p, program);
  s->ta = ta;
  s->tb = tb;
  s->a = need_buf(p, label, A);
  s->b = need_buf(p, label, B);
  s->tiling = tiling;
  if (p->status != CODA_OK) return;
  const plan_buf *a = &p->bufs[s->a], *b = &p->bufs[s->b];
  if (op_cols(a, ta) != op_rows(b, tb)) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': op(%s) is %lld x %lld but op(%s) is %lld x %lld",
              label, A, (long long)op_rows(a, ta), (long long)op_cols(a, ta), B,
              (long long)op_rows(b, tb), (long long)op_cols(b, tb));
    return;
  }
  s->M = op_rows(a, ta);
  s->N = op_cols(b, tb);
  parse_binds(p, s, binds);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_map(coda_plan p, coda_phase phase, const char *label, const char *program,
              int64_t M, int64_t N, coda_tiling tiling, const char *binds) {
  plan_step *s = new_step(p, PLAN_MAP, phase, label);
  if (!s) return;
  s->prog = plan_program_load(p, program);
  s->M = M;
  s->N = N;
  s->tiling = tiling;
  parse_binds(p, s, binds);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_finish(coda_plan p, coda_phase phase, const char *label, const char *program,
                 const char *finish, int64_t M, int64_t N, coda_tiling tiling,
                 const char *binds) {
  plan_step *s = new_step(p, PLAN_FINISH, phase, label);
  if (!s) return;
  s->prog = plan_program_load(p, program);
  if (!name_ok(finish)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': bad finish name", label);
    return;
  }
  snprintf(s->finish, sizeof s->finish, "%s", finish);
  s->M = M;
  s->N = N;
  s->tiling = tiling;
  parse_binds(p, s, binds);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_matmul(coda_plan p, coda_phase phase, const char *label, coda_transpose ta,
                 const char *A, coda_transpose tb, const char *B, const char *D,
                 float alpha, int accumulate) {
  plan_step *s = new_step(p, PLAN_MATMUL, phase, label);
  if (!s) return;
  s->ta = ta;
  s->tb = tb;
  s->a = need_buf(p, label, A);
  s->b = need_buf(p, label, B);
  s->d = need_buf(p, label, D);
  s->alpha = alpha;
  s->accumulate = accumulate;
  if (p->status != CODA_OK) return;
  const plan_buf *a = &p->bufs[s->a], *b = &p->bufs[s->b], *d = &p->bufs[s->d];
  if (op_cols(a, ta) != op_rows(b, tb) || d->rows != op_rows(a, ta) || d->cols != op_cols(b, tb)) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': %s = op(%s) op(%s) shapes do not match", label, D,
              A, B);
    return;
  }
  s->M = d->rows;
  s->N = d->cols;
  p->nstep++;
}

static void attn_common(coda_plan p, plan_step *s, const plan_attention *g, const char *qkv,
                        const char *o, const char *lse) {
  if (!g) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': no attention geometry", s->label);
    return;
  }
  s->attn = *g;
  s->attn.qkv = need_buf(p, s->label, qkv);
  s->attn.o = need_buf(p, s->label, o);
  s->attn.lse = need_buf(p, s->label, lse);
  s->attn.dout = s->attn.dqkv = -1;
  s->attn.pos = s->attn.freq = s->attn.zp = -1;
  if (p->status != CODA_OK) return;
  int64_t M = g->batch * g->seq;
  int64_t nqkv = (int64_t)(g->n_heads + 2 * g->n_kv_heads) * g->head_dim;
  const plan_buf *bq = &p->bufs[s->attn.qkv], *bo = &p->bufs[s->attn.o],
                    *bl = &p->bufs[s->attn.lse];
  if (bq->rows != M || bq->cols != nqkv || bo->rows != M ||
      bo->cols != (int64_t)g->n_heads * g->head_dim || bl->rows != M || bl->cols != g->n_heads)
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': attention buffers do not match the geometry",
              s->label);
  s->M = M;
  s->N = nqkv;
}

void plan_attention_fwd(coda_plan p, coda_phase phase, const char *label,
                        const plan_attention *geometry, const char *qkv, const char *o,
                        const char *lse) {
  plan_step *s = new_step(p, PLAN_ATTN_FWD, phase, label);
  if (!s) return;
  attn_common(p, s, geometry, qkv, o, lse);
  if (p->status == CODA_OK) p->nstep++;
}

static void attn_bwd(coda_plan p, coda_phase phase, const char *label,
                     const plan_attention *geometry, const char *qkv, const char *o,
                     const char *lse, const char *dout, const char *pos, const char *freq,
                     const char *dqkv, const char *zp) {
  plan_step *s = new_step(p, PLAN_ATTN_BWD, phase, label);
  if (!s) return;
  attn_common(p, s, geometry, qkv, o, lse);
  if (p->status != CODA_OK) return;
  s->attn.dout = need_buf(p, label, dout);
  s->attn.dqkv = need_buf(p, label, dqkv);
  if (zp) {
    s->attn.pos = need_buf(p, label, pos);
    s->attn.freq = need_buf(p, label, freq);
    s->attn.zp = need_buf(p, label, zp);
  }
  if (p->status != CODA_OK) return;
  const plan_buf *bd = &p->bufs[s->attn.dout], *bq = &p->bufs[s->attn.dqkv];
  if (bd->rows != p->bufs[s->attn.o].rows || bd->cols != p->bufs[s->attn.o].cols ||
      bq->rows != p->bufs[s->attn.qkv].rows || bq->cols != p->bufs[s->attn.qkv].cols) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': gradient buffers do not match", label);
    return;
  }
  if (zp) {
    const plan_buf *bz = &p->bufs[s->attn.zp];
    if (bz->rows != s->M || bz->cols != geometry->n_heads + 2 * geometry->n_kv_heads) {
      plan_fail(p, CODA_ERR_SHAPE, "step '%s': '%s' is not M x heads", label, zp);
      return;
    }
  }
  p->nstep++;
}

void plan_attention_bwd(coda_plan p, coda_phase phase, const char *label,
                        const plan_attention *geometry, const char *qkv, const char *o,
                        const char *lse, const char *dout, const char *dqkv) {
  attn_bwd(p, phase, label, geometry, qkv, o, lse, dout, NULL, NULL, dqkv, NULL);
}

void plan_attention_bwd_rope(coda_plan p, coda_phase phase, const char *label,
                             const plan_attention *geometry, const char *qkv, const char *o,
                             const char *lse, const char *dout, const char *pos,
                             const char *freq, const char *dqkv, const char *zp) {
  attn_bwd(p, phase, label, geometry, qkv, o, lse, dout, pos, freq, dqkv, zp);
}

void plan_zero(coda_plan p, coda_phase phase, const char *label, const char *dst) {
  plan_step *s = new_step(p, PLAN_ZERO, phase, label);
  if (!s) return;
  s->d = need_buf(p, label, dst);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_copy(coda_plan p, coda_phase phase, const char *label, const char *src,
               const char *dst) {
  plan_step *s = new_step(p, PLAN_COPY, phase, label);
  if (!s) return;
  s->a = need_buf(p, label, src);
  s->d = need_buf(p, label, dst);
  if (p->status != CODA_OK) return;
  if (p->bufs[s->a].rows != p->bufs[s->d].rows || p->bufs[s->a].cols != p->bufs[s->d].cols) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': copy %s -> %s shapes differ", label, src, dst);
    return;
  }
  p->nstep++;
}

/* ------------------------------------------------------------- executing */

static coda_tensor view_of(const plan_buf *b) {
  coda_tensor t = {b->data, b->dtype, b->rows, b->cols, b->ld};
  return t;
}

/* Device buffers (coda_malloc), initial values converted on the host and
 * uploaded. */
static coda_status alloc_device(coda_plan p, plan_buf *b) {
  size_t n = (size_t)(b->rows * b->cols), bytes = n * coda_dtype_size(b->dtype);
  void *d = NULL;
  coda_status s = coda_malloc(p->ctx, bytes, &d);
  if (s != CODA_OK) return s;
  if (b->init) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h) {
      coda_free(p->ctx, d);
      return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
    }
    coda_tensor t = {h, b->dtype, b->rows, b->cols, b->cols};
    for (int64_t r = 0; r < b->rows; r++)
      for (int64_t c = 0; c < b->cols; c++) coda_store(&t, r, c, b->init[r * b->cols + c]);
    s = coda_memcpy_h2d(p->ctx, d, h, bytes);
    free(h);
    if (s != CODA_OK) {
      coda_free(p->ctx, d);
      return s;
    }
  }
  b->data = d;
  b->owned = 1;
  b->ld = b->cols;
  return CODA_OK;
}

static coda_status arena_alloc(coda_plan p);

static coda_status alloc_one(coda_plan p, plan_buf *b) {
  if (b->alias >= 0) { /* the target's memory, as it is now */
    plan_buf *t = &p->bufs[b->alias];
    coda_status s = alloc_one(p, t);
    if (s != CODA_OK) return s;
    b->data = t->data;
    b->ld = t->ld;
    b->owned = 0;
    return CODA_OK;
  }
  if (b->data) return CODA_OK;
  if (b->role == PLAN_ROLE_TEMP && !p->arena_live) { /* it may live in the arena */
    coda_status s = arena_alloc(p);
    if (s != CODA_OK || b->data) return s;
  }
  if (p->device) return alloc_device(p, b);
  size_t n = (size_t)(b->rows * b->cols);
  b->data = calloc(n ? n : 1, coda_dtype_size(b->dtype));
  if (!b->data)
    return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': cannot allocate '%s' (%lld x %lld %s)",
                     p->name, b->name, (long long)b->rows, (long long)b->cols,
                     coda_dtype_name(b->dtype));
  b->owned = 1;
  b->ld = b->cols;
  if (b->init) {
    coda_tensor t = view_of(b);
    for (int64_t r = 0; r < b->rows; r++)
      for (int64_t c = 0; c < b->cols; c++) coda_store(&t, r, c, b->init[r * b->cols + c]);
  }
  return CODA_OK;
}

coda_status plan_alloc(coda_plan p) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  coda_status s0 = arena_alloc(p);
  if (s0 != CODA_OK) return s0;
  for (int i = 0; i < p->nbuf; i++) {
    coda_status s = alloc_one(p, &p->bufs[i]);
    if (s != CODA_OK) return s;
  }
  return CODA_OK;
}

coda_status coda_plan_tensor(coda_plan p, const char *name, coda_tensor *out) {
  if (!p || !out) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  int i = plan_find(p, name);
  if (i < 0)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT, "plan '%s' has no buffer '%s'", p->name,
                     name ? name : "(null)");
  coda_status s = alloc_one(p, &p->bufs[i]);
  if (s != CODA_OK) return s;
  *out = view_of(&p->bufs[i]);
  return CODA_OK;
}

coda_status coda_plan_bind(coda_plan p, const char *name, const coda_tensor *t) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  int i = plan_find(p, name);
  if (i < 0)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT, "plan '%s' has no buffer '%s'", p->name,
                     name ? name : "(null)");
  coda_status s = coda_check_tensor(p->ctx, name, t);
  if (s != CODA_OK) return s;
  plan_buf *b = &p->bufs[i];
  if (b->alias >= 0)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT,
                     "plan '%s': '%s' lives in '%s''s memory (in place); bind '%s' instead",
                     p->name, name, p->bufs[b->alias].name, p->bufs[b->alias].name);
  if (t->dtype != b->dtype || t->rows != b->rows || t->cols != b->cols)
    return coda_fail(p->ctx, CODA_ERR_SHAPE,
                     "plan '%s': binding '%s' as %lld x %lld %s, the plan needs %lld x %lld %s",
                     p->name, name, (long long)t->rows, (long long)t->cols,
                     coda_dtype_name(t->dtype), (long long)b->rows, (long long)b->cols,
                     coda_dtype_name(b->dtype));
  if (b->owned) {
    if (p->device) coda_free(p->ctx, b->data);
    else free(b->data);
  }
  b->owned = 0;
  b->arena_off = -1; /* its arena bytes stay unused until the arena is laid out again */
  b->data = t->data;
  b->ld = t->ld;
  return CODA_OK;
}

/* Host ops (on the device for a device plan). */
static coda_status host_op(coda_plan p, const plan_step *s) {
  coda_tensor d = view_of(&p->bufs[s->d]);
  if (p->device) {
    coda_tensor a = s->kind == PLAN_COPY ? view_of(&p->bufs[s->a]) : d;
    return coda_tensor_copy(p->ctx, &d, s->kind == PLAN_COPY ? &a : NULL);
  }
  if (s->kind == PLAN_ZERO) {
    for (int64_t r = 0; r < d.rows; r++)
      memset((char *)d.data + (size_t)(r * d.ld) * coda_dtype_size(d.dtype), 0,
             (size_t)d.cols * coda_dtype_size(d.dtype));
    return CODA_OK;
  }
  coda_tensor a = view_of(&p->bufs[s->a]);
  for (int64_t r = 0; r < d.rows; r++)
    for (int64_t c = 0; c < d.cols; c++) coda_store(&d, r, c, coda_load(&a, r, c));
  return CODA_OK;
}

/* ---------------------------------------------------- fusion turned off */

static coda_dtype acc_dtype(coda_plan p) {
  return coda_context_precision(p->ctx) == CODA_PRECISION_F64 ? CODA_F64 : CODA_BF16;
}

/* -------------------------------------- temporaries sharing memory by liveness */

static int size_add(size_t a, size_t b, size_t *out) {
  if (a > SIZE_MAX - b) return 0;
  *out = a + b;
  return 1;
}

static int align_arena(size_t x, size_t *out) {
  if (!size_add(x, PLAN_ARENA_ALIGN - 1, out)) return 0;
  *out -= *out % PLAN_ARENA_ALIGN;
  return 1;
}

typedef struct pack_key {
  size_t bytes;
  int i;
} pack_key;

static int pack_cmp(const void *a, const void *b) {
  const pack_key *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

int plan_pack(const plan_interval *iv, int n, size_t *off, size_t *arena) {
  *arena = 0;
  if (n <= 0) return 0;
  pack_key *key = malloc((size_t)n * sizeof *key);
  int *placed = malloc((size_t)n * sizeof *placed); /* placed blocks by offset */
  if (!key || !placed) {
    free(key);
    free(placed);
    return -1;
  }
  for (int i = 0; i < n; i++) key[i] = (pack_key){iv[i].bytes, i};
  qsort(key, (size_t)n, sizeof *key, pack_cmp);
  int np = 0, ok = 1;
  size_t end = 0;
  for (int t = 0; t < n && ok; t++) {
    const int j = key[t].i;
    const size_t bytes = iv[j].bytes;
    size_t at = 0, top;
    /* lowest gap among the blocks that intersect j in time: walk them in
     * offset order; every block below `at` has been stepped over */
    for (int u = 0; u < np && ok; u++) {
      const int q = placed[u];
      if (iv[q].first > iv[j].last || iv[j].first > iv[q].last) continue;
      ok = size_add(at, bytes, &top);
      if (ok && top <= off[q]) break;
      size_t qend;
      ok = ok && size_add(off[q], iv[q].bytes, &qend) && align_arena(qend, &qend);
      if (ok && qend > at) at = qend;
    }
    ok = ok && size_add(at, bytes, &top);
    if (!ok) break;
    off[j] = at;
    if (top > end) end = top;
    int u = np++; /* insert by (offset, index) */
    while (u > 0 && (off[placed[u - 1]] > at || (off[placed[u - 1]] == at && placed[u - 1] > j))) {
      placed[u] = placed[u - 1];
      u--;
    }
    placed[u] = j;
  }
  free(key);
  free(placed);
  if (!ok || !align_arena(end, arena)) return -1;
  return 0;
}

enum { REF_READ = 1, REF_WRITE = 2 }; /* an accumulating write is both */

/* How step s uses program argument `arg`: outputs and partials are
 * written whole ("every declared output is stored exactly once"), an
 * accumulating output is read too; a finish step writes its finisher and
 * reads the rest. An argument the program lacks counts as read and
 * written (the run rejects it anyway). */
static int arg_use(coda_program prog, const plan_step *s, const char *arg) {
  const int n = coda_program_num_args(prog);
  for (int i = 0; i < n; i++) {
    coda_arg_info ai;
    if (coda_program_arg(prog, i, &ai) != CODA_OK || strcmp(ai.name, arg)) continue;
    if (s->kind == PLAN_FINISH) return strcmp(arg, s->finish) ? REF_READ : REF_WRITE;
    if (ai.kind == CODA_ARG_OUTPUT) return ai.accumulate ? REF_READ | REF_WRITE : REF_WRITE;
    if (ai.kind == CODA_ARG_PARTIAL) return REF_WRITE;
    return REF_READ;
  }
  return REF_READ | REF_WRITE;
}

#define PLAN_MAX_REFS (PLAN_MAX_BINDS + 6)

/* Records buffer b used as u by a step (each buffer once, uses or-ed). */
static void add_ref(int *buf, int *use, int *n, int b, int u) {
  if (b < 0) return;
  int k = 0;
  while (k < *n && buf[k] != b) k++;
  if (k == *n) {
    if (*n == PLAN_MAX_REFS) return;
    buf[k] = b;
    use[k] = 0;
    (*n)++;
  }
  use[k] |= u;
}

/* The buffers step s references, each once, with how (REF_*). */
static int step_refs(coda_plan p, const plan_step *s, int *buf, int *use) {
  int n = 0;
  switch (s->kind) {
  case PLAN_GEMM:
  case PLAN_MAP:
  case PLAN_FINISH:
    if (s->kind == PLAN_GEMM) {
      add_ref(buf, use, &n, s->a, REF_READ);
      add_ref(buf, use, &n, s->b, REF_READ);
    }
    for (int i = 0; i < s->nbind; i++)
      add_ref(buf, use, &n, s->bind[i].buf, arg_use(p->progs[s->prog].prog, s, s->bind[i].arg));
    break;
  case PLAN_MATMUL:
    add_ref(buf, use, &n, s->a, REF_READ);
    add_ref(buf, use, &n, s->b, REF_READ);
    add_ref(buf, use, &n, s->d, s->accumulate ? REF_READ | REF_WRITE : REF_WRITE);
    break;
  case PLAN_ATTN_FWD:
    add_ref(buf, use, &n, s->attn.qkv, REF_READ);
    add_ref(buf, use, &n, s->attn.o, REF_WRITE);
    add_ref(buf, use, &n, s->attn.lse, REF_WRITE);
    break;
  case PLAN_ATTN_BWD:
    add_ref(buf, use, &n, s->attn.qkv, REF_READ);
    add_ref(buf, use, &n, s->attn.o, REF_READ);
    add_ref(buf, use, &n, s->attn.lse, REF_READ);
    add_ref(buf, use, &n, s->attn.dout, REF_READ);
    add_ref(buf, use, &n, s->attn.dqkv, REF_WRITE);
    if (s->attn.zp >= 0) {
      add_ref(buf, use, &n, s->attn.pos, REF_READ);
      add_ref(buf, use, &n, s->attn.freq, REF_READ);
      add_ref(buf, use, &n, s->attn.zp, REF_WRITE);
    }
    break;
  case PLAN_ZERO: add_ref(buf, use, &n, s->d, REF_WRITE); break;
  case PLAN_COPY:
    add_ref(buf, use, &n, s->a, REF_READ);
    add_ref(buf, use, &n, s->d, REF_WRITE);
    break;
  }
  return n;
}

coda_status plan_layout(coda_plan p) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  const int n = p->nstep, nb = p->nbuf;
  int *order = malloc(((size_t)n + 1) * sizeof *order);
  int *first = malloc(((size_t)nb + 1) * sizeof *first), *last = malloc(((size_t)nb + 1) * sizeof *last);
  int *use0 = calloc((size_t)nb + 1, sizeof *use0), *phases = calloc((size_t)nb + 1, sizeof *phases);
  plan_interval *iv = calloc((size_t)nb + (size_t)n + 1, sizeof *iv);
  size_t *off = malloc(((size_t)nb + (size_t)n + 1) * sizeof *off);
  int *who = malloc(((size_t)nb + (size_t)n + 1) * sizeof *who); /* buffer, or -1 - step */
  int *aw = malloc(((size_t)nb + 1) * sizeof *aw); /* per target: step its alias is first written */
  coda_status st = CODA_OK;
  if (!order || !first || !last || !use0 || !phases || !iv || !off || !who || !aw) {
    st = coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
    goto done;
  }
  /* run order: the forward steps, then the backward ones */
  int q = 0;
  for (int ph = 0; ph < 2; ph++)
    for (int k = 0; k < n; k++)
      if ((int)p->steps[k].phase == ph) order[q++] = k;
  for (int i = 0; i < nb; i++) first[i] = last[i] = aw[i] = -1;
  for (q = 0; q < n; q++) {
    int buf[PLAN_MAX_REFS], use[PLAN_MAX_REFS];
    const plan_step *s = &p->steps[order[q]];
    const int nr = step_refs(p, s, buf, use);
    /* in place: once an alias is written, its target's old contents are
     * gone, so no later step may read the target */
    for (int r = 0; r < nr; r++)
      if ((use[r] & REF_READ) && aw[buf[r]] >= 0 && aw[buf[r]] < q) {
        int a = 0;
        while (a < nb - 1 && p->bufs[a].alias != buf[r]) a++;
        st = coda_fail(p->ctx, CODA_ERR_ALIAS,
                       "plan '%s': step %d (%s) reads '%s' after step %d wrote '%s' in its "
                       "memory (in place)",
                       p->name, order[q], s->label, p->bufs[buf[r]].name, order[aw[buf[r]]],
                       p->bufs[a].name);
        goto done;
      }
    for (int r = 0; r < nr; r++) {
      const int t = p->bufs[buf[r]].alias;
      if (t >= 0 && (use[r] & REF_WRITE) && aw[t] < 0) aw[t] = q;
    }
    for (int r = 0; r < nr; r++) {
      const int b = buf[r];
      if (first[b] < 0) first[b] = q, use0[b] = use[r];
      last[b] = q;
      phases[b] |= 1 << (int)s->phase;
    }
  }
  for (int i = 0; i < nb; i++) {
    p->bufs[i].live_first = first[i] < 0 ? -1 : order[first[i]];
    p->bufs[i].live_last = last[i] < 0 ? -1 : order[last[i]];
  }
  /* an alias's references are its target's (the same memory) */
  for (int i = 0; i < nb; i++) {
    const int t = p->bufs[i].alias;
    if (t < 0 || first[i] < 0) continue;
    if (first[t] < 0 || first[i] < first[t]) first[t] = first[i], use0[t] = use0[i];
    else if (first[i] == first[t]) use0[t] |= use0[i];
    if (last[i] > last[t]) last[t] = last[i];
    phases[t] |= phases[i];
  }
  if (p->arena_live) goto done; /* the offsets in force stay */
  /* Members: temporaries without initial values or memory of their own,
   * whose first reference writes them whole (a buffer read, or
   * accumulated into, before any write would see another's bytes). One
   * referenced by both phases stays live to the end, so a backward phase
   * run again still finds it. */
  const int share = !p->no_share;
  int nblk = 0;
  p->ntemp = 0;
  for (int i = 0; i < nb; i++) {
    plan_buf *b = &p->bufs[i];
    b->arena_off = -1;
    if (b->role != PLAN_ROLE_TEMP || b->init || b->data || b->alias >= 0 || first[i] < 0 ||
        use0[i] != REF_WRITE)
      continue;
    iv[nblk].first = share ? first[i] : 0;
    iv[nblk].last = share ? (phases[i] == 3 ? n - 1 : last[i]) : 0;
    iv[nblk].bytes = (size_t)(b->rows * b->cols) * coda_dtype_size(b->dtype);
    who[nblk++] = i;
    p->ntemp++;
  }
  /* with sharing on, each unfused GEMM step's accumulator: live for its
   * step alone (off, the plan's one acc_tmp as before) */
  for (q = 0; q < n; q++) {
    plan_step *s = &p->steps[order[q]];
    s->acc_off = -1;
    if (!share || s->kind != PLAN_GEMM || !s->unfused) continue;
    iv[nblk].first = iv[nblk].last = q;
    iv[nblk].bytes = (size_t)s->M * (size_t)s->N * coda_dtype_size(acc_dtype(p));
    who[nblk++] = -1 - order[q];
  }
  size_t arena = 0, sum = 0;
  if (plan_pack(iv, nblk, off, &arena) != 0) {
    st = coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': temporaries: out of memory", p->name);
    goto done;
  }
  for (int k = 0; k < nblk; k++) {
    sum += iv[k].bytes;
    if (who[k] >= 0) p->bufs[who[k]].arena_off = (int64_t)off[k];
    else p->steps[-1 - who[k]].acc_off = (int64_t)off[k];
  }
  p->arena_bytes = arena;
  p->temp_bytes = sum;
done:
  free(order);
  free(first);
  free(last);
  free(use0);
  free(phases);
  free(iv);
  free(off);
  free(who);
  free(aw);
  return st;
}

/* Lays out and allocates the arena (one coda_malloc, zeroed, on every
 * backend) and points its temporaries into it. */
static coda_status arena_alloc(coda_plan p) {
  if (p->arena_live) return CODA_OK;
  coda_status s = plan_layout(p);
  if (s != CODA_OK) return s;
  if (p->arena_bytes) {
    s = coda_malloc(p->ctx, p->arena_bytes, &p->arena);
    if (s != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
      return coda_fail(p->ctx, s, "plan '%s': temporaries (%zu bytes): %s", p->name,
                       p->arena_bytes, inner);
    }
  }
  for (int i = 0; i < p->nbuf; i++) {
    plan_buf *b = &p->bufs[i];
    if (b->arena_off < 0) continue;
    b->data = (char *)p->arena + b->arena_off;
    b->ld = b->cols;
    b->owned = 0;
  }
  p->arena_live = 1;
  return CODA_OK;
}

/* Gives the arena back (its temporaries lose their memory and contents);
 * the next run lays it out again. */
static void arena_release(coda_plan p) {
  if (!p->arena_live) return;
  for (int i = 0; i < p->nbuf; i++)
    if (p->bufs[i].arena_off >= 0) {
      p->bufs[i].data = NULL;
      p->bufs[i].arena_off = -1;
    }
  for (int k = 0; k < p->nstep; k++) p->steps[k].acc_off = -1;
  if (p->arena) coda_free(p->ctx, p->arena);
  p->arena = NULL;
  p->arena_bytes = 0;
  p->arena_live = 0;
}

/* After the fusion choices changed: an arena whose accumulator slots no
 * longer match the unfused steps is given back, to be laid out again. */
static void arena_refresh(coda_plan p) {
  if (!p->arena_live) return;
  for (int k = 0; k < p->nstep; k++) {
    const plan_step *s = &p->steps[k];
    if (s->kind == PLAN_GEMM && (!p->no_share && s->unfused) != (s->acc_off >= 0)) {
      arena_release(p);
      return;
    }
  }
}

coda_status coda_plan_set_share_temps(coda_plan p, int share) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  if (p->no_share != !share) {
    arena_release(p);
    p->no_share = !share;
  }
  return CODA_OK;
}

coda_status plan_unfused_program(coda_plan p, int prog, coda_program *out) {
  if (!p || !out || prog < 0 || prog >= p->nprog) return CODA_ERR_INVALID_ARGUMENT;
  plan_program *pp = &p->progs[prog];
  if (pp->unfused) {
    *out = pp->unfused;
    return CODA_OK;
  }
  /* Rewrite the canonical text: declare the tile input after the optional
   * `mode` line and rename every `acc` token to it. */
  const char *src = coda_program_text(pp->prog);
  const size_t n = strlen(src);
  size_t cap = 2 * n + 128, k = 0;
  char *t = malloc(cap);
  if (!t) return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
  size_t i = 0;
  if (!strncmp(src, "mode ", 5)) {
    while (i < n && src[i] != '\n') t[k++] = src[i++];
    if (i < n) t[k++] = src[i++];
  }
  k += (size_t)snprintf(t + k, cap - k, "input %s : tile %s\n", PLAN_ACC_INPUT,
                        coda_dtype_name(acc_dtype(p)));
  while (i < n) {
    if (k + 2 * (sizeof PLAN_ACC_INPUT) + 2 >= cap) {
      char *q = realloc(t, cap *= 2);
      if (!q) {
        free(t);
        return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
      }
      t = q;
    }
    const char c = src[i];
    if (ident_char(c)) { /* a whole identifier or number */
      size_t j = i;
      while (j < n && (ident_char(src[j]) || (c >= '0' && c <= '9' && src[j] == '.'))) j++;
      if (j - i == 3 && !strncmp(src + i, "acc", 3)) {
        memcpy(t + k, PLAN_ACC_INPUT, sizeof PLAN_ACC_INPUT - 1);
        k += sizeof PLAN_ACC_INPUT - 1;
        i = j;
        continue;
      }
      while (i < j) {
        if (k + 2 >= cap) {
          char *q = realloc(t, cap *= 2);
          if (!q) {
            free(t);
            return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
          }
          t = q;
        }
        t[k++] = src[i++];
      }
      continue;
    }
    t[k++] = src[i++];
  }
  t[k] = '\0';
  coda_status st = coda_program_parse(p->ctx, t, &pp->unfused);
  free(t);
  if (st != CODA_OK) {
    char inner[CODA_ERRMSG_LEN];
    snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
    return coda_fail(p->ctx, st, "plan '%s': program %s without fusion: %s", p->name, pp->name,
                     inner);
  }
  *out = pp->unfused;
  return CODA_OK;
}

coda_status coda_plan_set_fused(coda_plan p, int fused) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  for (int i = 0; i < p->nstep; i++)
    if (p->steps[i].kind == PLAN_GEMM) {
      p->steps[i].unfused = !fused;
      p->steps[i].sched = CODA_SCHED_AUTO;
    }
  arena_refresh(p);
  return CODA_OK;
}

/* A GEMM + epilogue step with fusion off: acc_tmp = op(A)·op(B) (plain
 * GEMM), then the rewritten program as a map pass reading acc_tmp. */
static coda_status run_unfused(coda_context ctx, coda_plan p, const plan_step *s, coda_args args) {
  coda_program prog;
  coda_status st = plan_unfused_program(p, s->prog, &prog);
  if (st != CODA_OK) {
    if (ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
    return st;
  }
  const coda_dtype dt = acc_dtype(p);
  const size_t bytes = (size_t)s->M * (size_t)s->N * coda_dtype_size(dt);
  void *acc = p->acc_tmp;
  if (s->acc_off >= 0 && p->arena) {
    acc = (char *)p->arena + s->acc_off; /* laid out with the temporaries */
  } else if (bytes > p->acc_tmp_bytes) {
    if (p->acc_tmp) coda_free(p->ctx, p->acc_tmp);
    p->acc_tmp = NULL;
    p->acc_tmp_bytes = 0;
    st = coda_malloc(p->ctx, bytes, &p->acc_tmp);
    if (st != CODA_OK) {
      if (ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
      return st;
    }
    p->acc_tmp_bytes = bytes;
    acc = p->acc_tmp;
  }
  coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]);
  coda_tensor T = coda_tensor_2d(acc, dt, s->M, s->N);
  st = coda_gemm(ctx, s->ta, &A, s->tb, &B, &T, 1.0f, 0);
  if (st != CODA_OK) return st;
  st = coda_args_set(args, PLAN_ACC_INPUT, &T);
  if (st != CODA_OK) return st;
  return coda_map(ctx, prog, s->M, s->N, args, s->tiling);
}

static coda_status run_step(coda_context ctx, coda_plan p, const plan_step *s, coda_args args) {
  coda_program prog = s->prog >= 0 ? p->progs[s->prog].prog : NULL;
  coda_status st;
  if (s->kind == PLAN_GEMM || s->kind == PLAN_MAP || s->kind == PLAN_FINISH) {
    coda_args_clear(args);
    for (int i = 0; i < s->nbind; i++) {
      coda_tensor t = view_of(&p->bufs[s->bind[i].buf]);
      st = coda_args_set(args, s->bind[i].arg, &t);
      if (st != CODA_OK) return st;
    }
  }
  switch (s->kind) {
  case PLAN_GEMM: {
    if (s->unfused) return run_unfused(ctx, p, s, args);
    coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]);
    return coda_gemm_epilogue_sched(ctx, prog, s->ta, &A, s->tb, &B, args, s->tiling, s->sched);
  }
  case PLAN_MAP: return coda_map(ctx, prog, s->M, s->N, args, s->tiling);
  case PLAN_FINISH: return coda_finish(ctx, prog, s->finish, args, s->M, s->N, s->tiling);
  case PLAN_MATMUL: {
    coda_tensor A = view_of(&p->bufs[s->a]), B = view_of(&p->bufs[s->b]),
                D = view_of(&p->bufs[s->d]);
    return coda_gemm(ctx, s->ta, &A, s->tb, &B, &D, s->alpha, s->accumulate);
  }
  case PLAN_ATTN_FWD:
  case PLAN_ATTN_BWD: {
    const plan_attention *g = &s->attn;
    coda_tensor qkv = view_of(&p->bufs[g->qkv]), o = view_of(&p->bufs[g->o]),
                lse = view_of(&p->bufs[g->lse]);
    if (s->kind == PLAN_ATTN_FWD)
      return coda_attention_forward(ctx, &qkv, (int)g->batch, (int)g->seq, g->n_heads,
                                    g->n_kv_heads, g->head_dim, &o, &lse);
    coda_tensor dout = view_of(&p->bufs[g->dout]), dqkv = view_of(&p->bufs[g->dqkv]);
    if (g->zp >= 0) {
      coda_tensor pos = view_of(&p->bufs[g->pos]), freq = view_of(&p->bufs[g->freq]),
                  zp = view_of(&p->bufs[g->zp]);
      return coda_attention_backward_rope(ctx, &qkv, &o, &lse, &dout, (int)g->batch,
                                          (int)g->seq, g->n_heads, g->n_kv_heads, g->head_dim,
                                          &pos, &freq, &dqkv, &zp);
    }
    return coda_attention_backward(ctx, &qkv, &o, &lse, &dout, (int)g->batch, (int)g->seq,
                                   g->n_heads, g->n_kv_heads, g->head_dim, &dqkv);
  }
  case PLAN_ZERO:
  case PLAN_COPY: return host_op(p, s);
  }
  return coda_fail(ctx, CODA_ERR_INTERNAL, "unknown step kind %d", (int)s->kind);
}

coda_status plan_run_step(coda_context ctx, coda_plan p, int k) {
  if (!ctx || !p || k < 0 || k >= p->nstep) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan_run_step: bad argument");
  coda_args args = NULL;
  coda_status st = coda_args_create(ctx, &args);
  if (st == CODA_OK) st = run_step(ctx, p, &p->steps[k], args);
  coda_args_destroy(args);
  return st;
}

/* The checks every entry that runs steps makes, then the buffers
 * allocated: both arguments, a plan that built, the context's backend. */
static coda_status plan_enter(coda_context ctx, coda_plan p, const char *what) {
  if (!ctx || !p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: null argument", what);
  if (p->status != CODA_OK)
    return coda_fail(ctx, p->status, "plan '%s' was not built successfully", p->name);
  if (coda_context_backend(ctx) != coda_context_backend(p->ctx))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan '%s' was built for another backend",
                     p->name);
  coda_status st = plan_alloc(p);
  if (st != CODA_OK && ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
  return st;
}

/* ------------------------------------------ choosing fusion per GEMM step */

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* Copies buffer b into a dense snapshot of the same backend (restore = 0)
 * or back (restore = 1). */
static coda_status snap_copy(coda_plan p, const plan_buf *b, void *snap, int restore) {
  coda_tensor v = view_of(b);
  if (p->device) {
    coda_tensor d = coda_tensor_2d(snap, b->dtype, b->rows, b->cols);
    return restore ? coda_tensor_copy(p->ctx, &v, &d) : coda_tensor_copy(p->ctx, &d, &v);
  }
  const size_t es = coda_dtype_size(b->dtype), rb = (size_t)b->cols * es;
  for (int64_t r = 0; r < b->rows; r++) {
    char *x = (char *)v.data + (size_t)(r * v.ld) * es, *y = (char *)snap + (size_t)r * rb;
    memcpy(restore ? x : y, restore ? y : x, rb);
  }
  return CODA_OK;
}

/* Buffers step s changes in a way a repeated run does not undo: outputs it
 * accumulates into, and outputs it also reads (in place: an output whose
 * memory is an input's, by plan_buffer_alias). Returns their count (the
 * buffers that own the memory). */
static int state_bufs(coda_plan p, const plan_step *s, int *out) {
  coda_program prog = p->progs[s->prog].prog;
  int n = 0;
  for (int i = 0; i < s->nbind; i++) {
    coda_arg_info ai;
    int written = 0, acc = 0, read = 0;
    for (int a = 0; a < coda_program_num_args(prog); a++) {
      if (coda_program_arg(prog, a, &ai) != CODA_OK || strcmp(ai.name, s->bind[i].arg)) continue;
      written = ai.kind == CODA_ARG_OUTPUT || ai.kind == CODA_ARG_PARTIAL;
      acc = ai.kind == CODA_ARG_OUTPUT && ai.accumulate;
    }
    if (!written) continue;
    const int mem = plan_storage(p, s->bind[i].buf);
    for (int j = 0; j < s->nbind; j++) {
      if (j == i || plan_storage(p, s->bind[j].buf) != mem) continue;
      for (int a = 0; a < coda_program_num_args(prog); a++)
        if (coda_program_arg(prog, a, &ai) == CODA_OK && !strcmp(ai.name, s->bind[j].arg) &&
            ai.kind != CODA_ARG_OUTPUT && ai.kind != CODA_ARG_PARTIAL)
          read = 1;
    }
    int seen = 0;
    for (int k = 0; k < n; k++) seen |= out[k] == mem;
    if ((acc || read) && !seen) out[n++] = mem;
  }
  return n;
}

/* Median over 5 samples of the time of one run of step s (us), each sample
 * `iters` back-to-back runs closed by a synchronize. */
static coda_status time_step(coda_context ctx, coda_plan p, const plan_step *s, coda_args args,
                             int iters, double *us) {
  double t[5];
  for (int k = 0; k < 5; k++) {
    coda_status st = coda_synchronize(ctx);
    const double t0 = now_us();
    for (int i = 0; i < iters && st == CODA_OK; i++) st = run_step(ctx, p, s, args);
    if (st == CODA_OK) st = coda_synchronize(ctx);
    if (st != CODA_OK) return st;
    t[k] = (now_us() - t0) / iters;
  }
  for (int i = 1; i < 5; i++) /* insertion sort of five */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      const double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  *us = t[2];
  return CODA_OK;
}

/* One GEMM step: every variant (fused and unfused; on CUDA the fused one
 * under both schedules) warmed up (kernels loaded or compiled; a variant
 * that cannot be built is left out), then timed in two rounds, the second
 * in reverse order; the buffers it must not disturb are saved first and
 * restored after. Leaves the step at the fastest variant. */
static coda_status tune_step(coda_context ctx, coda_plan p, plan_step *s, coda_args args,
                             int iters) {
  typedef struct { int unfused, sched; } variant;
  const int gpu = coda_context_backend(ctx) == CODA_BACKEND_CUDA;
  const variant vs[3] = {{0, gpu ? CODA_SCHED_PINGPONG : CODA_SCHED_AUTO},
                         {0, CODA_SCHED_COOPERATIVE},
                         {1, CODA_SCHED_AUTO}};
  int bufs[PLAN_MAX_BINDS];
  void *snap[PLAN_MAX_BINDS] = {0};
  const int nb = state_bufs(p, s, bufs);
  coda_status st = CODA_OK;
  for (int i = 0; i < nb && st == CODA_OK; i++) {
    const plan_buf *b = &p->bufs[bufs[i]];
    st = coda_malloc(p->ctx, (size_t)(b->rows * b->cols) * coda_dtype_size(b->dtype), &snap[i]);
    if (st == CODA_OK) st = snap_copy(p, b, snap[i], 0);
  }
  double t[3] = {INFINITY, INFINITY, INFINITY};
  int ok[3] = {0, 0, 0};
  for (int v = 0; v < 3 && st == CODA_OK; v++) { /* warm-up */
    if (v == 1 && !gpu) continue;
    s->unfused = vs[v].unfused;
    s->sched = vs[v].sched;
    const coda_status r = run_step(ctx, p, s, args);
    if (r == CODA_OK) ok[v] = 1;
    else if (v == 2) st = r; /* plain GEMM + map must work */
  }
  if (st == CODA_OK && !ok[0] && !ok[1])
    st = coda_fail(ctx, CODA_ERR_BACKEND, "no fused variant of the step could run");
  for (int rep = 0; rep < 2 && st == CODA_OK; rep++)
    for (int i = 0; i < 3 && st == CODA_OK; i++) {
      const int v = rep ? 2 - i : i;
      if (!ok[v]) continue;
      s->unfused = vs[v].unfused;
      s->sched = vs[v].sched;
      double us;
      st = time_step(ctx, p, s, args, iters, &us);
      if (st == CODA_OK && us < t[v]) t[v] = us;
    }
  if (st == CODA_OK) st = coda_synchronize(ctx);
  for (int i = 0; i < nb; i++) {
    if (snap[i] && st == CODA_OK) st = snap_copy(p, &p->bufs[bufs[i]], snap[i], 1);
    coda_free(p->ctx, snap[i]);
  }
  for (int v = 0; v < 3; v++) s->tuned_us[v] = ok[v] && isfinite(t[v]) ? t[v] : 0;
  /* the faster fused schedule; the unfused pair must win by 2 %, since
   * fusion also saves memory (no M x N temporary) */
  const int fv = t[1] < t[0] ? 1 : 0;
  s->sched = vs[fv].sched;
  s->unfused = st == CODA_OK && t[2] < 0.98 * t[fv];
  if (s->unfused) s->sched = CODA_SCHED_AUTO;
  return st;
}

/* The context's table of fusion choices, made on first use with the
 * running tags: on CUDA the GPU (name, SM count) and the library version
 * with a hash of the fused kernels' mainloop headers (a choice measured
 * on other kernels is not reused); on the CPU the thread count and the
 * version. File: $CODA_CACHE_DIR/fused-tune.txt or
 * ~/.cache/coda/fused-tune.txt. */
static coda_status fused_table(coda_context ctx, coda_fused_cache **out) {
  *out = coda_fused_tune_state(ctx);
  if (*out) return CODA_OK;
  char device[CODA_TUNE_TAG_LEN], lib[CODA_TUNE_TAG_LEN], path[CODA_TUNE_PATH_LEN];
  coda_status st = coda_backend_tags(ctx, device, sizeof device, lib, sizeof lib);
  if (st != CODA_OK) return st;
  if (!coda_fused_cache_default_path(&ctx->knobs, path, sizeof path)) path[0] = '\0';
  *out = coda_fused_tune_create(ctx, device, lib, path);
  if (!*out) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "fusion tuning cache: out of memory");
  return CODA_OK;
}

/* A stored choice below UNFUSED is the fused kernel's schedule. */
_Static_assert((int)CODA_FUSED_CHOICE_FUSED == (int)CODA_SCHED_AUTO &&
                   (int)CODA_FUSED_CHOICE_PINGPONG == (int)CODA_SCHED_PINGPONG &&
                   (int)CODA_FUSED_CHOICE_COOPERATIVE == (int)CODA_SCHED_COOPERATIVE,
               "fusion choices and schedules are numbered alike");

/* Key of a GEMM step in the table: the program's identity (hash of its
 * canonical text), the problem, the operand type and the tiling. */
static coda_fused_key fused_key(coda_plan p, const plan_step *s) {
  coda_fused_key k;
  memset(&k, 0, sizeof k);
  const char *text = coda_program_text(p->progs[s->prog].prog);
  k.program = coda_fnv1a64(text, strlen(text), 0);
  k.m = s->M;
  k.n = s->N;
  k.k = op_cols(&p->bufs[s->a], s->ta);
  k.trans_a = s->ta == CODA_T;
  k.trans_b = s->tb == CODA_T;
  k.ab = p->bufs[s->a].dtype;
  k.tile_m = s->tiling.tile_m;
  k.tile_n = s->tiling.tile_n;
  return k;
}

coda_status coda_plan_tune_fusion(coda_context ctx, coda_plan p, int iters, int *n_unfused) {
  if (n_unfused) *n_unfused = 0;
  if (ctx && p && (iters < 1 || iters > 100000))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_plan_tune_fusion: iters %d not in 1..100000", iters);
  coda_status st = plan_enter(ctx, p, "coda_plan_tune_fusion");
  if (st != CODA_OK) return st;
  coda_fused_cache *table = NULL;
  st = fused_table(ctx, &table);
  if (st != CODA_OK) return st;
  /* retune (CODA_RETUNE=1): time every step again and overwrite the stored choices */
  const int retune = ctx->knobs.retune;
  int stored = 0;
  coda_args args = NULL;
  st = coda_args_create(ctx, &args);
  for (int i = 0; i < p->nstep && st == CODA_OK; i++) {
    plan_step *s = &p->steps[i];
    if (s->kind != PLAN_GEMM) continue;
    const coda_fused_key key = fused_key(p, s);
    const coda_fused_entry *hit = retune ? NULL : coda_fused_cache_find(table, &key);
    if (hit) { /* applied without running the step */
      s->unfused = hit->choice == CODA_FUSED_CHOICE_UNFUSED;
      s->sched = s->unfused ? CODA_SCHED_AUTO : hit->choice;
      for (int v = 0; v < 3; v++) s->tuned_us[v] = hit->us[v];
      s->tuned_cached = 1;
    } else {
      s->tuned_cached = 0;
      st = tune_step(ctx, p, s, args, iters);
      if (st == CODA_OK) {
        st = coda_fused_cache_put(table, &key,
                                  s->unfused ? CODA_FUSED_CHOICE_UNFUSED : s->sched, s->tuned_us);
        if (st != CODA_OK) coda_fail(ctx, st, "fusion tuning cache: cannot record the choice");
        stored++;
      }
    }
    if (st != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(ctx));
      coda_fail(ctx, st, "plan '%s', timing step %d (%s): %s", p->name, i, s->label, inner);
    } else if (n_unfused) {
      *n_unfused += s->unfused;
    }
  }
  coda_args_destroy(args);
  /* Saved once, with what was measured even if a later step failed. A
   * file that cannot be written costs only re-timing in the next process:
   * the call still succeeds, and this context tries no more writes. */
  if (stored && table->disk_ok && coda_fused_cache_save(NULL, table) != CODA_OK)
    table->disk_ok = 0;
  /* the temporary is reallocated for the largest step that stays unfused */
  if (p->acc_tmp) coda_free(p->ctx, p->acc_tmp);
  p->acc_tmp = NULL;
  p->acc_tmp_bytes = 0;
  arena_refresh(p); /* or in the arena, for the steps left unfused */
  return st;
}

coda_status coda_plan_run(coda_context ctx, coda_plan p, coda_phase phase) {
  if (ctx && p && phase != CODA_PHASE_FORWARD && phase != CODA_PHASE_BACKWARD)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_plan_run: bad phase %d", (int)phase);
  coda_status st = plan_enter(ctx, p, "coda_plan_run");
  if (st != CODA_OK) return st;
  coda_args args = NULL;
  st = coda_args_create(ctx, &args);
  if (st != CODA_OK) return st;
  for (int i = 0; i < p->nstep && st == CODA_OK; i++) {
    const plan_step *s = &p->steps[i];
    if (s->phase != phase) continue;
    st = run_step(ctx, p, s, args);
    if (st != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(ctx));
      coda_fail(ctx, st, "plan '%s', step %d (%s): %s", p->name, i, s->label, inner);
    }
  }
  coda_args_destroy(args);
  return st;
}

/* -------------------------------------------------------------- printing */

static const char *role_name(plan_role r) {
  switch (r) {
  case PLAN_ROLE_INPUT: return "input";
  case PLAN_ROLE_PARAM: return "param";
  case PLAN_ROLE_OUTPUT: return "output";
  case PLAN_ROLE_GRAD: return "grad";
  case PLAN_ROLE_SAVED: return "saved";
  case PLAN_ROLE_TEMP: return "temp";
  case PLAN_ROLE_CONST: return "const";
  }
  return "?";
}

/* A size or offset, short: bytes below 10 KiB, KiB below 10 MiB, then MiB. */
static const char *fmt_bytes(char buf[32], size_t v) {
  if (v < 10240) snprintf(buf, 32, "%zu B", v);
  else if (v < 10485760) snprintf(buf, 32, "%.1f KiB", (double)v / 1024.0);
  else snprintf(buf, 32, "%.2f MiB", (double)v / 1048576.0);
  return buf;
}

static void print_binds(coda_plan p, coda_strbuf *b, const plan_step *s) {
  for (int i = 0; i < s->nbind; i++)
    coda_sb_printf(b, "%s%s=%s", i ? " " : "", s->bind[i].arg, p->bufs[s->bind[i].buf].name);
}

static void print_step(coda_plan p, coda_strbuf *b, int i, const plan_step *s) {
  const char *tn[2] = {"", "^T"};
  coda_sb_printf(b, "  %2d  %-22s ", i, s->label);
  switch (s->kind) {
  case PLAN_GEMM:
    coda_sb_printf(b, "gemm   %s%s . %s%s  [%lld x %lld, tile %dx%d]  %s: ", p->bufs[s->a].name,
              tn[s->ta], p->bufs[s->b].name, tn[s->tb], (long long)s->M, (long long)s->N,
              s->tiling.tile_m, s->tiling.tile_n, p->progs[s->prog].name);
    print_binds(p, b, s);
    if (s->unfused) coda_sb_printf(b, "  [unfused]");
    else if (s->sched != CODA_SCHED_AUTO)
      coda_sb_printf(b, "  [%s]", s->sched == CODA_SCHED_PINGPONG ? "pingpong" : "cooperative");
    if (s->unfused && s->acc_off >= 0) {
      char o[32];
      coda_sb_printf(b, " (" PLAN_ACC_INPUT " @ %s)", fmt_bytes(o, (size_t)s->acc_off));
    }
    if (s->tuned_us[1] > 0)
      coda_sb_printf(b, "  (timed: fused pingpong %.1f us, fused cooperative %.1f us, unfused %.1f us%s)",
                     s->tuned_us[0], s->tuned_us[1], s->tuned_us[2],
                     s->tuned_cached ? "; from the tuning cache" : "");
    else if (s->tuned_us[0] > 0)
      coda_sb_printf(b, "  (timed: fused %.1f us, unfused %.1f us%s)", s->tuned_us[0], s->tuned_us[2],
                     s->tuned_cached ? "; from the tuning cache" : "");
    break;
  case PLAN_MAP:
    coda_sb_printf(b, "map    [%lld x %lld, tile %dx%d]  %s: ", (long long)s->M, (long long)s->N,
              s->tiling.tile_m, s->tiling.tile_n, p->progs[s->prog].name);
    print_binds(p, b, s);
    break;
  case PLAN_FINISH:
    coda_sb_printf(b, "finish %s.%s: ", p->progs[s->prog].name, s->finish);
    print_binds(p, b, s);
    break;
  case PLAN_MATMUL:
    coda_sb_printf(b, "matmul %s %s= %s%s . %s%s", p->bufs[s->d].name, s->accumulate ? "+" : "",
              p->bufs[s->a].name, tn[s->ta], p->bufs[s->b].name, tn[s->tb]);
    if (s->alpha != 1.0f) coda_sb_printf(b, " * %g", (double)s->alpha);
    break;
  case PLAN_ATTN_FWD:
    coda_sb_printf(b, "attention forward (causal, %d/%d heads, hd %d): %s -> %s, %s",
              s->attn.n_heads, s->attn.n_kv_heads, s->attn.head_dim, p->bufs[s->attn.qkv].name,
              p->bufs[s->attn.o].name, p->bufs[s->attn.lse].name);
    break;
  case PLAN_ATTN_BWD:
    coda_sb_printf(b, "attention backward: %s (with %s, %s, %s) -> %s", p->bufs[s->attn.dout].name,
              p->bufs[s->attn.qkv].name, p->bufs[s->attn.o].name, p->bufs[s->attn.lse].name,
              p->bufs[s->attn.dqkv].name);
    if (s->attn.zp >= 0)
      coda_sb_printf(b, ", then RoPE backward (%s, %s) with partials %s", p->bufs[s->attn.pos].name,
                p->bufs[s->attn.freq].name, p->bufs[s->attn.zp].name);
    break;
  case PLAN_ZERO: coda_sb_printf(b, "host   %s = 0", p->bufs[s->d].name); break;
  case PLAN_COPY:
    coda_sb_printf(b, "host   %s = %s", p->bufs[s->d].name, p->bufs[s->a].name);
    break;
  }
  coda_sb_printf(b, "\n");
}

const char *coda_plan_text(coda_plan p) {
  if (!p) return "";
  coda_strbuf b = {0};
  int ngemm = 0, nunf = 0;
  for (int i = 0; i < p->nstep; i++)
    if (p->steps[i].kind == PLAN_GEMM) ngemm++, nunf += p->steps[i].unfused;
  coda_sb_printf(&b, "plan %s%s", p->name, p->status != CODA_OK ? " (failed to build)" : "");
  if (nunf)
    coda_sb_printf(&b, " (fusion off for %d of %d gemm steps, marked unfused: each runs as a "
                   "plain gemm into " PLAN_ACC_INPUT " and its program as a map)", nunf, ngemm);
  coda_sb_printf(&b, "\n");
  /* intervals always; offsets as laid out now, or as the next run will */
  const int laid = p->status == CODA_OK && plan_layout(p) == CODA_OK;
  if (laid) {
    char a[32], t[32];
    int nacc = 0;
    for (int i = 0; i < p->nstep; i++) nacc += p->steps[i].acc_off >= 0;
    coda_sb_printf(&b, "temporaries: %d%s in one arena of %s (%s side by side; %s)%s\n", p->ntemp,
                   nacc ? " and the unfused accumulators" : "", fmt_bytes(a, p->arena_bytes),
                   fmt_bytes(t, p->temp_bytes),
                   p->no_share ? "sharing off" : "shared where their steps do not overlap",
                   p->arena_live ? "" : ", before allocation");
  }
  coda_sb_printf(&b, "buffers:\n");
  for (int i = 0; i < p->nbuf; i++) {
    const plan_buf *u = &p->bufs[i];
    coda_sb_printf(&b, "  %-12s %-6s %6lld x %-6lld %s%s", u->name, role_name(u->role),
              (long long)u->rows, (long long)u->cols, coda_dtype_name(u->dtype),
              u->init ? " (initialized)" : "");
    if (laid && u->role == PLAN_ROLE_TEMP && u->live_first >= 0) {
      char o[32];
      coda_sb_printf(&b, "  steps %d-%d", u->live_first, u->live_last);
      if (u->arena_off >= 0) coda_sb_printf(&b, " @ %s", fmt_bytes(o, (size_t)u->arena_off));
      else if (u->alias < 0) coda_sb_printf(&b, ", own memory");
    }
    if (u->alias >= 0) coda_sb_printf(&b, "  alias of %s (in place, in its memory)", p->bufs[u->alias].name);
    coda_sb_printf(&b, "\n");
  }
  for (int ph = 0; ph < 2; ph++) {
    coda_sb_printf(&b, "%s:\n", ph == 0 ? "forward" : "backward");
    for (int i = 0; i < p->nstep; i++)
      if ((int)p->steps[i].phase == ph) print_step(p, &b, i, &p->steps[i]);
  }
  char *text = coda_sb_take(&b);
  if (!text) return "(out of memory)";
  free(p->text);
  p->text = text;
  return p->text;
}

void plan_print(coda_plan p, FILE *f) {
  if (f) fputs(coda_plan_text(p), f);
}

coda_status plan_precompile_step(coda_plan p, int k, int unfused, int *cached, int *skipped) {
  *cached = 0;
  *skipped = 0;
  const plan_step *st = &p->steps[k];
  coda_program prog = st->prog >= 0 ? p->progs[st->prog].prog : NULL;
  if (st->kind == PLAN_GEMM && !unfused) /* both schedules, for coda_plan_tune_fusion */
    return coda_precompile_gemm_epilogue(p->ctx, prog, st->ta == CODA_T, st->tb == CODA_T,
                                         p->bufs[st->a].dtype == CODA_F16, cached);
  if (st->kind == PLAN_GEMM) {
    coda_program up;
    coda_status s = plan_unfused_program(p, st->prog, &up);
    return s == CODA_OK ? coda_precompile_map(p->ctx, up, cached) : s;
  }
  if (st->kind == PLAN_MAP && !unfused) return coda_precompile_map(p->ctx, prog, cached);
  *skipped = 1;
  return CODA_OK;
}
