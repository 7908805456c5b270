/* Plan building: creation and destruction, buffers (declaration,
 * initial values, aliases), built-in programs (retyped to f64 in exact
 * mode) and a new step, which each kind's builder (step_*.c) fills (see
 * plan.h). The sticky builder status lives here too. */
#include "nn/plan_internal.h"

#include "base/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ utilities */

int plan_name_ok(const char *s) {
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

/* ------------------------------------------------------------- building */

coda_status plan_create(coda_context ctx, const char *name, coda_plan *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plan_create: out is NULL");
  *out = NULL;
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!plan_name_ok(name))
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
  if (!plan_name_ok(name)) {
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

/* name shares target's memory: as an alias (view 0: the same shape and
 * dtype) or as a view (view 1: the same dtype and element count, another
 * shape). Each buffer takes part in at most one such pair. */
static void buffer_share(coda_plan p, const char *name, const char *target, int view) {
  const char *what = view ? "view" : "alias";
  if (!p || p->status != CODA_OK) return;
  const int i = plan_find(p, name), t = plan_find(p, target);
  if (i < 0 || t < 0) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "%s: unknown buffer '%s'", what,
              i < 0 ? (name ? name : "(null)") : target ? target : "(null)");
    return;
  }
  plan_buf *b = &p->bufs[i];
  const plan_buf *u = &p->bufs[t];
  if (i == t || b->alias >= 0 || u->alias >= 0 || is_alias_target(p, i) || is_alias_target(p, t)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT,
              "%s '%s' -> '%s': a buffer takes part in at most one alias, not with itself", what,
              name, target);
    return;
  }
  const int same = view ? b->rows * b->cols == u->rows * u->cols
                        : b->rows == u->rows && b->cols == u->cols;
  if (b->dtype != u->dtype || !same) {
    plan_fail(p, CODA_ERR_SHAPE, "%s '%s' (%lld x %lld %s) -> '%s' (%lld x %lld %s): %s must be "
              "the same", what, name, (long long)b->rows, (long long)b->cols,
              coda_dtype_name(b->dtype), target, (long long)u->rows, (long long)u->cols,
              coda_dtype_name(u->dtype), view ? "dtype and element count" : "shape and dtype");
    return;
  }
  if (b->init || b->data) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "%s '%s': it has initial values or memory already",
              what, name);
    return;
  }
  b->alias = t;
  b->reshape = view;
}

void plan_buffer_alias(coda_plan p, const char *name, const char *target) {
  buffer_share(p, name, target, 0);
}

void plan_buffer_view(coda_plan p, const char *name, const char *target) {
  buffer_share(p, name, target, 1);
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

/* Program `name` from its text: in exact mode every floating declaration
 * retyped to f64 (i32 stays), and `per s0` written `per s` when s0 > 0. */
static coda_status program_from_text(coda_context ctx, const char *name, const char *t,
                                     int s0, int seg, coda_program *out) {
  const int retype = coda_context_precision(ctx) == CODA_PRECISION_F64;
  char per[32];
  snprintf(per, sizeof per, "per %d", s0);
  const size_t np = strlen(per), n = strlen(t);
  char *r = malloc(2 * n + 16), *o = r; /* "per S" grows by at most 8 per match */
  if (!r) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory loading '%s'", name);
  int nseg = 0;
  for (size_t i = 0; i < n;) {
    int start = i == 0 || !ident_char(t[i - 1]);
    size_t k = 0;
    if (start && retype && !strncmp(t + i, "bf16", 4)) k = 4;
    else if (start && retype && (!strncmp(t + i, "f32", 3) || !strncmp(t + i, "f16", 3))) k = 3;
    if (k && !ident_char(t[i + k])) {
      memcpy(o, "f64", 3);
      o += 3;
      i += k;
    } else if (start && s0 > 0 && !strncmp(t + i, per, np) && !ident_char(t[i + np]) &&
               nseg < 8) {
      o += sprintf(o, "per %d", seg);
      i += np;
      nseg++;
    } else {
      *o++ = t[i++];
    }
  }
  *o = '\0';
  coda_status s = coda_program_parse(ctx, r, out);
  free(r);
  if (s != CODA_OK) {
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
    return coda_fail(ctx, s, "built-in program '%s'%s: %s", name, retype ? " retyped to f64" : "",
                     msg);
  }
  if (s0 > 0 && nseg == 0) {
    coda_program_destroy(*out);
    *out = NULL;
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "built-in program '%s' has no 'per %d'",
                     name, s0);
  }
  return CODA_OK;
}

/* The parameter eps bound to *eps, when given and declared. */
static coda_status bind_eps(coda_context ctx, const char *name, const double *eps,
                            coda_program *out) {
  if (!eps) return CODA_OK;
  coda_status s;
  coda_param_info info;
  int has = 0;
  for (int i = 0; i < coda_program_num_params(*out) && !has; i++)
    has = coda_program_param(*out, i, &info) == CODA_OK && !strcmp(info.name, "eps");
  if (!has) return CODA_OK;
  /* the norm epsilon is a parameter of the program: bound by value */
  coda_param_value v = {"eps", *eps};
  coda_bind_options bo = coda_bind_default_options();
  bo.values = &v;
  bo.nvalues = 1;
  coda_program bound = NULL;
  s = coda_program_bind(ctx, *out, &bo, &bound);
  coda_program_destroy(*out);
  *out = bound;
  if (s != CODA_OK) {
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
    return coda_fail(ctx, s, "built-in program '%s' with eps %g: %s", name, *eps, msg);
  }
  return CODA_OK;
}

static coda_status builtin_seg(coda_context ctx, const char *name, int s0, int seg,
                               const double *eps, coda_program *out) {
  coda_program b = NULL;
  coda_status s = coda_program_builtin(ctx, name, &b);
  if (s != CODA_OK) return s;
  const int retype = coda_context_precision(ctx) == CODA_PRECISION_F64;
  if (!retype && s0 <= 0) {
    *out = b;
  } else {
    s = program_from_text(ctx, name, coda_program_text(b), s0, seg, out);
    coda_program_destroy(b);
    if (s != CODA_OK) return s;
  }
  return bind_eps(ctx, name, eps, out);
}

coda_status plan_builtin_eps(coda_context ctx, const char *name, const double *eps,
                             coda_program *out) {
  return builtin_seg(ctx, name, 0, 0, eps, out);
}

coda_status plan_builtin(coda_context ctx, const char *name, coda_program *out) {
  return plan_builtin_eps(ctx, name, NULL, out);
}

void plan_set_norm_eps(coda_plan p, double eps) {
  if (!p || p->status != CODA_OK) return;
  if (!(eps >= 0.0) || !isfinite(eps)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "norm eps %g must be finite and >= 0", eps);
    return;
  }
  p->has_eps = 1;
  p->norm_eps = eps;
}

int plan_program_load_seg(coda_plan p, const char *builtin, int s0, int seg) {
  if (!p || p->status != CODA_OK) return -1;
  if (!plan_name_ok(builtin)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "bad program name");
    return -1;
  }
  for (int i = 0; i < p->nprog; i++)
    if (!strcmp(p->progs[i].name, builtin)) return i;
  if (s0 > 0 && (seg < 1 || seg > (1 << 24))) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "program '%s': segment %d out of range", builtin, seg);
    return -1;
  }
  coda_program prog = NULL;
  coda_status s = builtin_seg(p->ctx, builtin, s0, seg, p->has_eps ? &p->norm_eps : NULL, &prog);
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

int plan_program_load(coda_plan p, const char *builtin) {
  return plan_program_load_seg(p, builtin, 0, 0);
}

/* Appends a zeroed step; NULL after a failure. */
plan_step *plan_new_step(coda_plan p, plan_step_kind kind, coda_phase phase,
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
  s->finish_index = -1;
  s->acc_off = -1;
  snprintf(s->label, sizeof s->label, "%s", label ? label : "");
  return s;
}

int plan_need_buf(coda_plan p, const char *label, const char *name) {
  if (p->status != CODA_OK) return -1;
  int i = plan_find(p, name);
  if (i < 0)
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': unknown buffer '%s'", label,
              name ? name : "(null)");
  return i;
}
