/* The declarations of the epilogue language: inputs, parameters, outputs,
 * stores, reductions and finishers (docs/language.md), each parsed after
 * its keyword over the lexer and expressions of parse.c. */
#include "lang/parse.h"
#include "base/internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* --------------------------------------------------------- declarations */

static const char *const dtype_words[] = {"bf16", "f16", "f32", "f64", "i32"};
static const coda_dtype dtype_vals[] = {CODA_BF16, CODA_F16, CODA_F32, CODA_F64, CODA_I32};

static int parse_dtype(parser *ps, coda_dtype *dt) {
  for (int i = 0; i < 5; i++)
    if (ps_tok_is(&ps->tok, dtype_words[i])) {
      *dt = dtype_vals[i];
      ps_next(ps);
      return 0;
    }
  return ps_expected(ps, "a dtype (bf16, f16, f32, f64 or i32)");
}

static coda_width parse_width(parser *ps) {
  if (ps_tok_is(&ps->tok, "x2")) { ps_next(ps); return CODA_WIDTH_X2; }
  if (ps_tok_is(&ps->tok, "half")) { ps_next(ps); return CODA_WIDTH_HALF; }
  return CODA_WIDTH_FULL;
}

int ps_input(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t = ps->tok;
  char name[CODA_NAME_MAX];
  if (ps_new_name(ps, &t, name)) return -1;
  if (p->ninputs >= CODA_MAX_INPUTS)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "too many inputs (at most %d)", CODA_MAX_INPUTS);
  ps_next(ps);
  if (ps_expect(ps, T_COLON, "':'")) return -1;
  ir_input *in = &p->inputs[p->ninputs];
  memset(in, 0, sizeof *in);
  const int ik = ps->tok.k == T_NAME ? ir_input_kind_find(ps->tok.s, (size_t)ps->tok.len) : -1;
  if (ik < 0) {
    char words[96], what[128];
    snprintf(what, sizeof what, "an input kind (%s)", ir_kind_words('i', words, sizeof words));
    return ps_expected(ps, what);
  }
  in->kind = (coda_arg_kind)ik;
  ps_next(ps);
  if (parse_dtype(ps, &in->dtype)) return -1;
  in->width = parse_width(ps);
  snprintf(in->name, sizeof in->name, "%s", name);
  in->line = t.line;
  in->col = t.col;
  ps_define(ps, name, SYM_INPUT, p->ninputs++, t.line);
  return 0;
}

/* param NAME [= NUMBER]: a named constant whose value is set per use. */
int ps_param(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t = ps->tok;
  char name[CODA_NAME_MAX];
  if (ps_new_name(ps, &t, name)) return -1;
  if (p->nparams >= CODA_MAX_PARAMS)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "too many parameters (at most %d)", CODA_MAX_PARAMS);
  ps_next(ps);
  ir_param *pm = &p->params[p->nparams];
  memset(pm, 0, sizeof *pm);
  if (ps_accept(ps, T_ASSIGN)) {
    int neg = ps_accept(ps, T_MINUS);
    token n = ps->tok;
    if (n.k != T_NUM)
      return ps_expected(ps, "a number literal as the parameter's default (e.g. 'param eps = 1e-5')");
    if (!isfinite(n.num))
      return ps_error(ps, CODA_ERR_TYPE, n.line, n.col, "parameter '%s': default %.*s is not finite", name, n.len,
                      n.s);
    ps_next(ps);
    pm->has_value = 1;
    pm->value = neg ? -n.num : n.num;
  } else if (ps->tok.k != T_NL && ps->tok.k != T_EOF) {
    return ps_expected(ps, "'=' and a default, or end of line, after the parameter's name");
  }
  snprintf(pm->name, sizeof pm->name, "%s", name);
  pm->line = t.line;
  pm->col = t.col;
  ps_define(ps, name, SYM_PARAM, p->nparams++, t.line);
  return 0;
}

int ps_output(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t = ps->tok;
  char name[CODA_NAME_MAX];
  if (ps_new_name(ps, &t, name)) return -1;
  if (p->noutputs >= CODA_MAX_OUTPUTS)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "too many outputs (at most %d)", CODA_MAX_OUTPUTS);
  ps_next(ps);
  if (ps_expect(ps, T_COLON, "':'")) return -1;
  ir_output *o = &p->outputs[p->noutputs];
  memset(o, 0, sizeof *o);
  if (parse_dtype(ps, &o->dtype)) return -1;
  o->width = parse_width(ps);
  if (ps_tok_is(&ps->tok, "accumulate")) {
    o->accumulate = 1;
    ps_next(ps);
  }
  snprintf(o->name, sizeof o->name, "%s", name);
  o->line = t.line;
  o->col = t.col;
  o->reg_even = o->reg_odd = -1;
  ps_define(ps, name, SYM_OUTPUT, p->noutputs++, t.line);
  return 0;
}

int ps_store(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t = ps->tok;
  if (t.k != T_NAME) return ps_expected(ps, "an output name");
  symbol *s = ps_lookup(ps, &t);
  char nm[CODA_NAME_MAX];
  snprintf(nm, sizeof nm, "%.*s", t.len < CODA_NAME_MAX ? t.len : CODA_NAME_MAX - 1, t.s);
  if (!s) return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "output '%s' is not declared", nm);
  if (s->kind != SYM_OUTPUT) return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is not an output", nm);
  ir_output *o = &p->outputs[s->index];
  if (o->reg_even >= 0)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "output '%s' is already stored (line %d)", nm, o->store_line);
  ps_next(ps);
  if (ps_expect(ps, T_ASSIGN, "'='")) return -1;
  int even, odd = -1;
  if (ps_tok_is(&ps->tok, "pack")) {
    token pk = ps->tok;
    ps_next(ps);
    if (ps_expect(ps, T_LP, "'('")) return -1;
    if (ps_enter(ps, &pk)) return -1;
    if ((even = ps_expr(ps)) < 0) return -1;
    if (ps_expect(ps, T_COMMA, "','")) return -1;
    if ((odd = ps_expr(ps)) < 0) return -1;
    if (ps_expect(ps, T_RP, "')'")) return -1;
    ps->depth--;
  } else if ((even = ps_expr(ps)) < 0) {
    return -1;
  }
  o->reg_even = even;
  o->reg_odd = odd;
  o->store_line = t.line;
  o->store_col = t.col;
  return 0;
}

/* A whole number of columns at token st (the current token) into *out. */
int ps_columns(parser *ps, const token *st, const char *what, int *out) {
  int digits = st->k == T_NUM;
  for (int i = 0; digits && i < st->len; i++) digits = isdigit((unsigned char)st->s[i]);
  if (!digits) {
    char buf[96];
    snprintf(buf, sizeof buf, "%s (a whole number of columns)", what);
    return ps_expected(ps, buf);
  }
  if (st->num > (double)(1 << 30))
    return ps_error(ps, CODA_ERR_TYPE, st->line, st->col, "segment %.*s is too large", st->len < 32 ? st->len : 32, st->s);
  *out = (int)st->num;
  return 0;
}

int ps_reduce(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t = ps->tok;
  char name[CODA_NAME_MAX];
  if (ps_new_name(ps, &t, name)) return -1;
  if (p->nreduces >= CODA_MAX_REDUCES)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "too many reductions (at most %d)", CODA_MAX_REDUCES);
  ps_next(ps);
  if (ps_expect(ps, T_ASSIGN, "'='")) return -1;
  token kt = ps->tok;
  const int rk = kt.k == T_NAME ? ir_reduce_kind_find(kt.s, (size_t)kt.len) : -1;
  if (rk < 0) {
    char words[128], what[160];
    snprintf(what, sizeof what, "a reduction (%s)", ir_kind_words('r', words, sizeof words));
    return ps_expected(ps, what);
  }
  coda_reduce_kind kind = (coda_reduce_kind)rk;
  ps_next(ps);
  if (ps_expect(ps, T_LP, "'('")) return -1;
  if (ps_enter(ps, &kt)) return -1;
  int reg = ps_expr(ps);
  if (reg < 0) return -1;
  int index = -1, segment = 0;
  if (kind == CODA_REDUCE_ROWPICK) {
    if (ps_expect(ps, T_COMMA, "','")) return -1;
    token it = ps->tok;
    if (it.k != T_NAME) return ps_expected(ps, "the name of a row i32 input");
    symbol *s = ps_lookup(ps, &it);
    if (!s || s->kind != SYM_INPUT)
      return ps_error(ps, CODA_ERR_TYPE, it.line, it.col, "the rowpick index '%.*s' is not an input",
                      it.len < 32 ? it.len : 32, it.s);
    index = s->index;
    ps_next(ps);
  }
  if (ps_expect(ps, T_RP, "')'")) return -1;
  ps->depth--;
  if (ir_reduce_per(kind) >= 0 && ps_tok_is(&ps->tok, "per")) {
    ps_next(ps);
    token st = ps->tok;
    if (ps_columns(ps, &st, "a segment width", &segment)) return -1;
    kind = (coda_reduce_kind)ir_reduce_per(kind);
    ps_next(ps);
  } else if (ps_tok_is(&ps->tok, "per")) {
    return ps_error(ps, CODA_ERR_TYPE, ps->tok.line, ps->tok.col,
                    "'per' segments only rowsum and rowmax, not %s", ir_reduce_kind_name(kind));
  }
  ir_reduce *r = &p->reduces[p->nreduces];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  r->kind = kind;
  r->reg = reg;
  r->index_input = index;
  r->segment = segment;
  r->line = kt.line;
  r->col = kt.col;
  ps_define(ps, name, SYM_REDUCE, p->nreduces++, t.line);
  return 0;
}

static int partial_ref(parser *ps, int *index) {
  token t = ps->tok;
  if (t.k != T_NAME) return ps_expected(ps, "the name of a reduction");
  symbol *s = ps_lookup(ps, &t);
  if (!s || s->kind != SYM_REDUCE)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%.*s' is not a reduction defined before this line",
                    t.len < 32 ? t.len : 32, t.s);
  *index = s->index;
  ps_next(ps);
  return 0;
}

int ps_finish(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t = ps->tok;
  char name[CODA_NAME_MAX];
  if (ps_new_name(ps, &t, name)) return -1;
  if (p->nfinishes >= CODA_MAX_FINISHES)
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "too many finishers (at most %d)", CODA_MAX_FINISHES);
  ps_next(ps);
  if (ps_expect(ps, T_ASSIGN, "'='")) return -1;
  token kt = ps->tok;
  const int fk = kt.k == T_NAME ? ir_finish_kind_find(kt.s, (size_t)kt.len) : -1;
  if (fk < 0) {
    char words[96], what[128];
    snprintf(what, sizeof what, "a finisher (%s)", ir_kind_words('f', words, sizeof words));
    return ps_expected(ps, what);
  }
  const coda_finish_kind kind = (coda_finish_kind)fk;
  ps_next(ps);
  if (ps_expect(ps, T_LP, "'('")) return -1;
  int reduce = -1, reduce2 = -1;
  double eps = 0;
  int eps_param = 0;
  if (partial_ref(ps, &reduce)) return -1;
  if (kind == CODA_FINISH_RSTD) {
    if (ps_expect(ps, T_COMMA, "','")) return -1;
    symbol *ps_sym = ps->tok.k == T_NAME ? ps_lookup(ps, &ps->tok) : NULL;
    if (ps_sym && ps_sym->kind == SYM_PARAM) {
      const ir_param *pm = &p->params[ps_sym->index];
      eps_param = ps_sym->index + 1;
      eps = pm->has_value ? pm->value : 0.0;
    } else if (ps->tok.k != T_NUM) {
      return ps_expected(ps, "a number literal or a parameter as rstd's eps (eps must be a literal or a "
                          "parameter, not an expression)");
    } else {
      eps = ps->tok.num;
    }
    ps_next(ps);
    if (ps->tok.k != T_COMMA && ps->tok.k != T_RP)
      return ps_expected(ps, "')' or ',' after rstd's eps (eps must be a literal, not an expression)");
    if (ps_accept(ps, T_COMMA) && partial_ref(ps, &reduce2)) return -1;
  }
  if (ps_expect(ps, T_RP, "')'")) return -1;
  ir_finish *f = &p->finishes[p->nfinishes];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  f->kind = kind;
  f->reduce = reduce;
  f->reduce2 = reduce2;
  f->eps = eps;
  f->eps_param = eps_param;
  f->line = kt.line;
  f->col = kt.col;
  ps_define(ps, name, SYM_FINISH, p->nfinishes++, t.line);
  return 0;
}
