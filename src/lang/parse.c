/* Lexer and recursive-descent parser of the epilogue language (grammar in
 * docs/language.md, "Grammar and validation rules"). The parser resolves
 * names and emits IR instructions in post order, left to right; every
 * semantic rule beyond names and arity is checked by ir_validate. The
 * declarations are parsed in parse_decl.c. */
#include "lang/parse.h"
#include "base/internal.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT (1 << 20) /* bytes of program text */
#define MAX_DEPTH 64       /* nesting of parentheses, calls and unary minus */

/* ---------------------------------------------------------------- errors */

int ps_error(parser *ps, coda_status s, int line, int col, const char *fmt, ...) {
  if (ps->err) return -1; /* keep the first error */
  char msg[CODA_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ps->err = coda_fail(ps->ctx, s, "line %d, column %d: %s", line, col, msg);
  return -1;
}

/* What a token looks like in a message. */
static const char *describe(const token *t, char *buf, size_t n) {
  switch (t->k) {
  case T_EOF: return "end of input";
  case T_NL: return "end of line";
  case T_BAD: {
    unsigned char c = (unsigned char)t->s[0];
    if (isdigit(c)) { /* a malformed number: show it */
      if (t->len > 32) snprintf(buf, n, "'%.32s...'", t->s);
      else snprintf(buf, n, "'%.*s'", t->len, t->s);
      return buf;
    }
    if (isprint(c)) snprintf(buf, n, "character '%c'", c);
    else snprintf(buf, n, "byte 0x%02x", c);
    return buf;
  }
  default:
    if (t->len > 32) snprintf(buf, n, "'%.32s...'", t->s);
    else snprintf(buf, n, "'%.*s'", t->len, t->s);
    return buf;
  }
}

int ps_expected(parser *ps, const char *what) {
  char buf[64];
  return ps_error(ps, CODA_ERR_PARSE, ps->tok.line, ps->tok.col, "expected %s, found %s", what,
                  describe(&ps->tok, buf, sizeof buf));
}

/* ----------------------------------------------------------------- lexer */

static int is_name_start(int c) { return isalpha(c) || c == '_'; }
static int is_name_char(int c) { return isalnum(c) || c == '_'; }

void ps_next(parser *ps) {
  const char *s = ps->src;
  size_t i = ps->pos;
  for (;;) {
    while (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v') i++;
    if (s[i] == '#')
      while (s[i] && s[i] != '\n') i++;
    else
      break;
  }
  token *t = &ps->tok;
  t->s = s + i;
  t->line = ps->line;
  t->col = (int)(i - ps->line_start) + 1;
  t->len = 1;
  t->num = 0;
  unsigned char c = (unsigned char)s[i];
  if (c == '\0') {
    t->k = T_EOF;
    t->len = 0;
    ps->pos = i;
    return;
  }
  if (c == '\n') {
    t->k = T_NL;
    ps->line++;
    ps->line_start = i + 1;
    ps->pos = i + 1;
    return;
  }
  if (is_name_start(c)) {
    size_t j = i;
    while (is_name_char((unsigned char)s[j])) j++;
    t->k = T_NAME;
    t->len = (int)(j - i);
    ps->pos = j;
    return;
  }
  if (isdigit(c)) {
    size_t j = i;
    while (isdigit((unsigned char)s[j])) j++;
    if (s[j] == '.' && !is_name_start((unsigned char)s[j + 1])) { /* "1.5"; "x.even" is a lane */
      j++;
      while (isdigit((unsigned char)s[j])) j++;
    }
    if ((s[j] == 'e' || s[j] == 'E') &&
        (isdigit((unsigned char)s[j + 1]) ||
         ((s[j + 1] == '+' || s[j + 1] == '-') && isdigit((unsigned char)s[j + 2])))) {
      j += 2;
      while (isdigit((unsigned char)s[j])) j++;
    }
    t->k = T_NUM;
    t->len = (int)(j - i);
    ps->pos = j;
    if (is_name_char((unsigned char)s[j]) || s[j] == '.' || j - i > 400) {
      t->k = T_BAD; /* "1abc", "1e", "1.5.2", absurdly long: reported by the parser */
      while (is_name_char((unsigned char)s[j]) || s[j] == '.') j++;
      t->len = (int)(j - i);
      ps->pos = j;
      return;
    }
    char *end = NULL;
    t->num = strtod(t->s, &end);
    if (end != t->s + t->len || !isfinite(t->num)) t->k = T_BAD;
    return;
  }
  ps->pos = i + 1;
  switch (c) {
  case ',': t->k = T_COMMA; return;
  case ':': t->k = T_COLON; return;
  case '.': t->k = T_DOT; return;
  case '(': t->k = T_LP; return;
  case ')': t->k = T_RP; return;
  case '+': t->k = T_PLUS; return;
  case '-': t->k = T_MINUS; return;
  case '*': t->k = T_STAR; return;
  case '/': t->k = T_SLASH; return;
  case '=':
    if (s[i + 1] == '=') { t->k = T_EQ; t->len = 2; ps->pos = i + 2; }
    else t->k = T_ASSIGN;
    return;
  case '<':
    if (s[i + 1] == '=') { t->k = T_LE; t->len = 2; ps->pos = i + 2; }
    else t->k = T_LT;
    return;
  case '>':
    if (s[i + 1] == '=') { t->k = T_GE; t->len = 2; ps->pos = i + 2; }
    else t->k = T_GT;
    return;
  case '!':
    if (s[i + 1] == '=') { t->k = T_NE; t->len = 2; ps->pos = i + 2; return; }
    break;
  default: break;
  }
  t->k = T_BAD;
}

int ps_tok_is(const token *t, const char *word) {
  return t->k == T_NAME && (size_t)t->len == strlen(word) && !memcmp(t->s, word, (size_t)t->len);
}

int ps_accept(parser *ps, tok_kind k) {
  if (ps->tok.k != k) return 0;
  ps_next(ps);
  return 1;
}

int ps_expect(parser *ps, tok_kind k, const char *what) {
  if (ps->tok.k == T_BAD && ps->tok.s[0] && (isdigit((unsigned char)ps->tok.s[0]))) {
    char buf[64];
    return ps_error(ps, CODA_ERR_PARSE, ps->tok.line, ps->tok.col, "malformed or out-of-range number %s",
                    describe(&ps->tok, buf, sizeof buf));
  }
  if (ps->tok.k != k) return ps_expected(ps, what);
  ps_next(ps);
  return 0;
}

/* --------------------------------------------------------------- symbols */

symbol *ps_lookup(parser *ps, const token *t) {
  if (t->len >= CODA_NAME_MAX) return NULL;
  for (int i = 0; i < ps->nsyms; i++)
    if ((int)strlen(ps->syms[i].name) == t->len && !memcmp(ps->syms[i].name, t->s, (size_t)t->len))
      return &ps->syms[i];
  return NULL;
}

/* Checks that token t can name something new; copies it to out. */
int ps_new_name(parser *ps, const token *t, char out[CODA_NAME_MAX]) {
  if (t->k != T_NAME) return ps_expected(ps, "a name");
  if (t->len >= CODA_NAME_MAX)
    return ps_error(ps, CODA_ERR_TYPE, t->line, t->col, "name '%.32s...' is longer than %d characters", t->s,
                    CODA_NAME_MAX - 1);
  memcpy(out, t->s, (size_t)t->len);
  out[t->len] = '\0';
  if (ir_is_reserved(out))
    return ps_error(ps, CODA_ERR_TYPE, t->line, t->col, "'%s' is a reserved word and cannot be a name", out);
  if (out[0] == '_' && out[1] == '_')
    return ps_error(ps, CODA_ERR_TYPE, t->line, t->col,
                    "'%s': names beginning with '__' are reserved (the temporaries of a program's passes)", out);
  symbol *s = ps_lookup(ps, t);
  if (s) return ps_error(ps, CODA_ERR_TYPE, t->line, t->col, "'%s' is already defined (line %d)", out, s->line);
  return 0;
}

void ps_define(parser *ps, const char *name, sym_kind kind, int index, int line) {
  symbol *s = &ps->syms[ps->nsyms++]; /* capacity covers every limit */
  snprintf(s->name, sizeof s->name, "%s", name);
  s->kind = kind;
  s->index = index;
  s->line = line;
}

/* ---------------------------------------------------------- expressions */

static ir_instr *emit(parser *ps, ir_code code, const token *at) {
  struct coda_program_s *p = ps->p;
  if (p->ninstrs >= CODA_MAX_INSTRS) {
    ps_error(ps, CODA_ERR_TYPE, at->line, at->col, "program too large: more than %d instructions", CODA_MAX_INSTRS);
    return NULL;
  }
  ir_instr *in = &p->instrs[p->ninstrs++];
  memset(in, 0, sizeof *in);
  in->code = code;
  in->input = -1;
  for (int k = 0; k < CODA_MAX_ARGS; k++) in->args[k] = -1;
  in->dst = p->nregs++;
  in->dst2 = -1;
  in->line = at->line;
  in->col = at->col;
  return in;
}

static int emit_math(parser *ps, coda_op op, int nargs, const int *args, const token *at) {
  ir_instr *in = emit(ps, IR_MATH, at);
  if (!in) return -1;
  in->op = op;
  in->nargs = nargs;
  for (int k = 0; k < nargs; k++) in->args[k] = args[k];
  if (ir_op_results(op) == 2) in->dst2 = ps->p->nregs++;
  return in->dst;
}

/* Edit distance of a[0..la) and b (short names only). */
static int edit_distance(const char *a, int la, const char *b) {
  int lb = (int)strlen(b), d[CODA_NAME_MAX + 1];
  if (la > CODA_NAME_MAX || lb > CODA_NAME_MAX) return 99;
  for (int j = 0; j <= lb; j++) d[j] = j;
  for (int i = 1; i <= la; i++) {
    int diag = d[0];
    d[0] = i;
    for (int j = 1; j <= lb; j++) {
      int up = d[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (d[j - 1] + 1 < best) best = d[j - 1] + 1;
      d[j] = best;
      diag = up;
    }
  }
  return d[lb];
}

/* NAME( with NAME neither a function nor defined: the closest function
 * name, if one is close, and the list of them. */
static int unknown_function(parser *ps, const token *t, const char *nm);

/* The call ops of lang/ops.def by function name. */
static int find_function(const token *t) { return ir_op_find_call(t->s, (size_t)t->len); }

static int unknown_function(parser *ps, const token *t, const char *nm) {
  char list[400] = "", near[48] = "";
  size_t len = 0;
  int best = 3;
  for (int op = 0; op < ir_op_count(); op++) {
    if (ir_op_prec((coda_op)op) != 0) continue;
    const char *f = ir_op_name((coda_op)op);
    int n = snprintf(list + len, sizeof list - len, "%s%s", len ? " " : "", f);
    if (n > 0 && (size_t)n < sizeof list - len) len += (size_t)n;
    int d = edit_distance(t->s, t->len, f);
    if (d < best && d < t->len) {
      best = d;
      snprintf(near, sizeof near, "did you mean '%s'? ", f);
    }
  }
  return ps_error(ps, CODA_ERR_TYPE, t->line, t->col, "unknown function '%s': %s(functions: %s)", nm, near,
                  list);
}

int ps_enter(parser *ps, const token *at) {
  if (++ps->depth > MAX_DEPTH)
    return ps_error(ps, CODA_ERR_PARSE, at->line, at->col, "expression nested too deeply (more than %d levels)",
                    MAX_DEPTH);
  return 0;
}

/* Parses "(e, e, ...)" of function `op` (the current token is the '(') and
 * emits the call. */
static int parse_call(parser *ps, coda_op op, const token *fn) {
  int args[CODA_MAX_ARGS], n = 0;
  int arity = ir_op_arity(op);
  if (ps_expect(ps, T_LP, "'('")) return -1;
  if (ps_enter(ps, fn)) return -1;
  if (ps->tok.k != T_RP) {
    for (;;) {
      if (n == CODA_MAX_ARGS || n == arity)
        return ps_error(ps, CODA_ERR_TYPE, fn->line, fn->col, "%s takes %d argument%s, found more",
                        ir_op_name(op), arity, arity == 1 ? "" : "s");
      int r = ps_expr(ps);
      if (r < 0) return -1;
      args[n++] = r;
      if (!ps_accept(ps, T_COMMA)) break;
    }
  }
  if (ps_expect(ps, T_RP, n < arity ? "',' or ')'" : "')'")) return -1;
  ps->depth--;
  if (n != arity)
    return ps_error(ps, CODA_ERR_TYPE, fn->line, fn->col, "%s takes %d argument%s, found %d", ir_op_name(op),
                    arity, arity == 1 ? "" : "s", n);
  return emit_math(ps, op, n, args, fn);
}

/* Optional ".even" / ".odd" after a name. */
static int parse_lane(parser *ps, coda_lane *lane) {
  *lane = CODA_LANE_NONE;
  if (!ps_accept(ps, T_DOT)) return 0;
  if (ps_tok_is(&ps->tok, "even")) *lane = CODA_LANE_EVEN;
  else if (ps_tok_is(&ps->tok, "odd")) *lane = CODA_LANE_ODD;
  else return ps_expected(ps, "'even' or 'odd' after '.'");
  ps_next(ps);
  return 0;
}

static int parse_primary(parser *ps) {
  token t = ps->tok;
  if (t.k == T_NUM) {
    ps_next(ps);
    ir_instr *in = emit(ps, IR_CONST, &t);
    if (!in) return -1;
    in->imm = t.num;
    return in->dst;
  }
  if (t.k == T_LP) {
    ps_next(ps);
    if (ps_enter(ps, &t)) return -1;
    int r = ps_expr(ps);
    if (r < 0) return -1;
    if (ps_expect(ps, T_RP, "')'")) return -1;
    ps->depth--;
    return r;
  }
  if (t.k == T_BAD && isdigit((unsigned char)t.s[0])) return ps_expect(ps, T_NUM, "a number");
  if (t.k != T_NAME) return ps_expected(ps, "an expression");
  if (ps_tok_is(&t, "seg") || ps_tok_is(&t, "segpos")) { /* seg(S) = idiv(col, S), segpos(S) = imod(col, S) */
    const int pos = ps_tok_is(&t, "segpos");
    ps_next(ps);
    if (ps_expect(ps, T_LP, "'('")) return -1;
    token n = ps->tok;
    if (n.k != T_NUM || n.num != floor(n.num) || n.num < 1 || n.num > 16777216.0)
      return ps_error(ps, CODA_ERR_TYPE, n.line, n.col,
                      "%s(S) takes a segment width S, an integer literal from 1 to 16777216", pos ? "segpos" : "seg");
    ps_next(ps);
    if (ps_expect(ps, T_RP, "')'")) return -1;
    ir_instr *c = emit(ps, IR_COL, &t);
    if (!c) return -1;
    int args[2] = {c->dst, -1};
    ir_instr *k = emit(ps, IR_CONST, &n);
    if (!k) return -1;
    k->imm = n.num;
    args[1] = k->dst;
    return emit_math(ps, pos ? CODA_OP_IMOD : CODA_OP_IDIV, 2, args, &t);
  }
  int op = find_function(&t);
  if (op >= 0) {
    ps_next(ps);
    if (ir_op_results((coda_op)op) == 2)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "%s gives two results: write 'a, b = %s(...)' on its own line",
                      ir_op_name((coda_op)op), ir_op_name((coda_op)op));
    return parse_call(ps, (coda_op)op, &t);
  }
  char nm[CODA_NAME_MAX];
  snprintf(nm, sizeof nm, "%.*s", t.len < CODA_NAME_MAX ? t.len : CODA_NAME_MAX - 1, t.s);
  if (ps_tok_is(&t, "pack"))
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "pack(...) is only allowed as the whole value of a store");
  if (ps_tok_is(&t, "mode") || ps_tok_is(&t, "math") || ps_tok_is(&t, "input") || ps_tok_is(&t, "output") || ps_tok_is(&t, "store") ||
      ps_tok_is(&t, "reduce") || ps_tok_is(&t, "finish") || ps_tok_is(&t, "param"))
    return ps_expected(ps, "an expression");
  ps_next(ps);
  coda_lane lane;
  if (ps_tok_is(&t, "acc") || ps_tok_is(&t, "row") || ps_tok_is(&t, "col")) {
    if (parse_lane(ps, &lane)) return -1;
    ir_instr *in = emit(ps, ps_tok_is(&t, "acc") ? IR_ACC : ps_tok_is(&t, "row") ? IR_ROW : IR_COL, &t);
    if (!in) return -1;
    in->lane = lane; /* a lane on row/col is rejected by the validator */
    return in->dst;
  }
  symbol *s = ps_lookup(ps, &t);
  if (!s) {
    if (ir_reduce_kind_find(t.s, (size_t)t.len) >= 0)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is only allowed in a reduce statement", nm);
    /* a finisher's word that is also a function (max) is a call here */
    if (ir_finish_kind_find(t.s, (size_t)t.len) >= 0 && find_function(&t) < 0)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is only allowed in a finish statement", nm);
    if (ps->tok.k == T_LP) return unknown_function(ps, &t, nm);
    if (t.len >= CODA_NAME_MAX)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%.32s...' is used before it is defined", t.s);
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is used before it is defined", nm);
  }
  switch (s->kind) {
  case SYM_INPUT: {
    if (parse_lane(ps, &lane)) return -1;
    ir_instr *in = emit(ps, IR_READ, &t);
    if (!in) return -1;
    in->input = s->index;
    in->lane = lane;
    return in->dst;
  }
  case SYM_PARAM: {
    if (ps->tok.k == T_DOT)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is a parameter, one number: read it as %s, without a lane",
                      nm, nm);
    ir_instr *in = emit(ps, IR_CONST, &t);
    if (!in) return -1;
    in->param = s->index + 1;
    in->imm = ps->p->params[s->index].has_value ? ps->p->params[s->index].value : 0.0;
    return in->dst;
  }
  case SYM_VALUE:
    if (ps->tok.k == T_DOT)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col,
                      "'%s' is a computed value with one value per point: read it as %s, without a lane", nm, nm);
    return s->index;
  case SYM_OUTPUT:
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is an output: outputs are stored, not read", nm);
  case SYM_REDUCE:
    return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is a reduction partial: only a finish statement can use it", nm);
  case SYM_FINISH: {
    const char *why = ir_stat_unreadable(ps->p, s->index);
    if (why)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col, "'%s' is a finisher result that cannot be read: %s", nm, why);
    if (ps->tok.k == T_DOT)
      return ps_error(ps, CODA_ERR_TYPE, t.line, t.col,
                      "'%s' is a finished statistic, one value per point: read it as %s, without a lane", nm, nm);
    ir_instr *in = emit(ps, IR_STAT, &t);
    if (!in) return -1;
    in->input = s->index;
    return in->dst;
  }
  }
  return -1;
}

static int parse_unary(parser *ps) {
  if (ps->tok.k != T_MINUS) return parse_primary(ps);
  token t = ps->tok;
  ps_next(ps);
  if (ps->tok.k == T_NUM) { /* "-2.5" is a negative constant, "-(2.5)" a negation */
    token n = ps->tok;
    ps_next(ps);
    ir_instr *in = emit(ps, IR_CONST, &t);
    if (!in) return -1;
    in->imm = -n.num;
    return in->dst;
  }
  if (ps_enter(ps, &t)) return -1;
  int r = parse_unary(ps);
  if (r < 0) return -1;
  ps->depth--;
  return emit_math(ps, CODA_OP_NEG, 1, &r, &t);
}

static int parse_binary_level(parser *ps, int level);

static int parse_operand(parser *ps, int level) {
  return level == 2 ? parse_unary(ps) : parse_binary_level(ps, level + 1);
}

/* level 0: comparisons, 1: + -, 2: * / (all left associative). */
static int parse_binary_level(parser *ps, int level) {
  int l = parse_operand(ps, level);
  while (l >= 0) {
    /* the binary operators of lang/ops.def; level = precedence - 1 */
    tok_kind k = ps->tok.k;
    if (k < T_PLUS || k > T_NE) break;
    int found = ir_op_find_binary(ps->tok.s, (size_t)ps->tok.len, level + 1);
    if (found < 0) break;
    coda_op op = (coda_op)found;
    token t = ps->tok;
    ps_next(ps);
    int r = parse_operand(ps, level);
    if (r < 0) return -1;
    int args[2] = {l, r};
    l = emit_math(ps, op, 2, args, &t);
  }
  return l;
}

int ps_expr(parser *ps) { return parse_binary_level(ps, 0); }

/* ----------------------------------------------------------- statements */

/* NAME = EXPR  |  NAME , NAME = F(...) with F a two-result function. */
static int parse_assignment(parser *ps) {
  struct coda_program_s *p = ps->p;
  token t1 = ps->tok, t2;
  char n1[CODA_NAME_MAX], n2[CODA_NAME_MAX];
  if (ps_new_name(ps, &t1, n1)) return -1;
  ps_next(ps);
  int two = 0;
  if (ps_accept(ps, T_COMMA)) {
    t2 = ps->tok;
    if (ps_new_name(ps, &t2, n2)) return -1;
    if (!strcmp(n1, n2)) return ps_error(ps, CODA_ERR_TYPE, t2.line, t2.col, "'%s' is named twice", n2);
    ps_next(ps);
    two = 1;
  }
  if (ps_expect(ps, T_ASSIGN, two ? "'='" : "'=' or ','")) return -1;
  if (two) {
    token ft = ps->tok;
    int op = find_function(&ft);
    if (op < 0 || ir_op_results((coda_op)op) != 2)
      return ps_error(ps, CODA_ERR_TYPE, ft.line, ft.col,
                      "'%s, %s = ...' needs a two-result function (dswiglu, dgeglu, rope or rope_bwd)", n1, n2);
    ps_next(ps);
    if (parse_call(ps, (coda_op)op, &ft) < 0) return -1;
    ir_instr *in = &p->instrs[p->ninstrs - 1];
    snprintf(ps->regname[in->dst], CODA_NAME_MAX, "%s", n1);
    snprintf(ps->regname[in->dst2], CODA_NAME_MAX, "%s", n2);
    ps_define(ps, n1, SYM_VALUE, in->dst, t1.line);
    ps_define(ps, n2, SYM_VALUE, in->dst2, t1.line);
    return 0;
  }
  int before = p->ninstrs;
  token et = ps->tok;
  int r = ps_expr(ps);
  if (r < 0) return -1;
  if (p->ninstrs == before)
    return ps_error(ps, CODA_ERR_TYPE, et.line, et.col, "'%s = ...' only renames a value: use the value directly", n1);
  /* post order: the value of the whole expression is the last instruction */
  snprintf(ps->regname[r], CODA_NAME_MAX, "%s", n1);
  ps_define(ps, n1, SYM_VALUE, r, t1.line);
  return 0;
}

static int parse_statement(parser *ps) {
  token t = ps->tok;
  if (t.k == T_BAD) {
    char buf[64];
    return ps_error(ps, CODA_ERR_PARSE, t.line, t.col, "unexpected %s", describe(&t, buf, sizeof buf));
  }
  if (t.k != T_NAME) return ps_expected(ps, "a statement");
  int first = ps->nstatements++ == 0;
  if (ps_tok_is(&t, "math")) {
    /* the header: `mode` first, then `math`, before any other statement */
    if (ps->math_seen) return ps_error(ps, CODA_ERR_PARSE, t.line, t.col, "math is declared twice");
    if (ps->nheader != ps->nstatements - 1)
      return ps_error(ps, CODA_ERR_PARSE, t.line, t.col,
                      "math must come before the inputs, outputs and instructions (after mode, if there is one)");
    ps_next(ps);
    if (ps_tok_is(&ps->tok, "fast")) ps->p->math_fast = 1;
    else if (ps_tok_is(&ps->tok, "exact")) ps->p->math_fast = 0;
    else return ps_expected(ps, "'exact' or 'fast' after math");
    ps_next(ps);
    ps->nheader++;
    ps->math_seen = 1;
    return 0;
  }
  if (ps_tok_is(&t, "mode")) {
    if (!first) return ps_error(ps, CODA_ERR_PARSE, t.line, t.col, "mode must be the first statement");
    ps->nheader++;
    ps_next(ps);
    if (ps_tok_is(&ps->tok, "elem")) ps->p->pair_mode = 0;
    else if (ps_tok_is(&ps->tok, "pair")) ps->p->pair_mode = 1;
    else return ps_expected(ps, "'elem' or 'pair'");
    ps_next(ps);
    if (ps->p->pair_mode && ps_tok_is(&ps->tok, "split")) {
      /* half-split pairs: `split` alone pairs the halves of the row */
      ps_next(ps);
      ps->p->pair_split = CODA_PAIR_SPLIT_ROW;
      if (ps->tok.k == T_NUM) {
        token st = ps->tok;
        if (ps_columns(ps, &st, "a segment width", &ps->p->pair_split)) return -1;
        if (ps->p->pair_split < 2 || ps->p->pair_split % 2)
          return ps_error(ps, CODA_ERR_TYPE, st.line, st.col,
                          "the split segment must be even and at least 2 (a pair is column k and k + S/2), found %d",
                          ps->p->pair_split);
        ps_next(ps);
      }
    }
    return 0;
  }
  if (ps_tok_is(&t, "input")) { ps_next(ps); return ps_input(ps); }
  if (ps_tok_is(&t, "param")) { ps_next(ps); return ps_param(ps); }
  if (ps_tok_is(&t, "output")) { ps_next(ps); return ps_output(ps); }
  if (ps_tok_is(&t, "store")) { ps_next(ps); return ps_store(ps); }
  if (ps_tok_is(&t, "reduce")) { ps_next(ps); return ps_reduce(ps); }
  if (ps_tok_is(&t, "finish")) { ps_next(ps); return ps_finish(ps); }
  return parse_assignment(ps);
}

static coda_status build_reg_names(parser *ps) {
  struct coda_program_s *p = ps->p;
  if (p->nregs == 0) return CODA_OK;
  p->reg_names = calloc((size_t)p->nregs, sizeof *p->reg_names);
  if (!p->reg_names) return coda_fail(ps->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  for (int r = 0; r < p->nregs; r++) {
    if (!ps->regname[r][0]) continue;
    size_t n = strlen(ps->regname[r]) + 1;
    p->reg_names[r] = malloc(n);
    if (!p->reg_names[r]) return coda_fail(ps->ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(p->reg_names[r], ps->regname[r], n);
  }
  return CODA_OK;
}

coda_status coda_program_parse(coda_context ctx, const char *text, coda_program *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_parse: out is NULL");
  *out = NULL;
  if (!text) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_parse: text is NULL");
  size_t len = 0;
  while (len <= MAX_TEXT && text[len]) len++;
  if (len > MAX_TEXT)
    return coda_fail(ctx, CODA_ERR_PARSE, "line 1, column 1: program text is longer than %d bytes", MAX_TEXT);
  parser *ps = calloc(1, sizeof *ps);
  struct coda_program_s *p = ir_program_alloc();
  if (!ps || !p) {
    free(ps);
    free(p);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory parsing a program");
  }
  ps->ctx = ctx;
  ps->src = text;
  ps->line = 1;
  ps->p = p;
  ps_next(ps);
  while (!ps->err) {
    while (ps->tok.k == T_NL) ps_next(ps);
    if (ps->tok.k == T_EOF) break;
    if (parse_statement(ps)) break;
    if (ps->tok.k != T_NL && ps->tok.k != T_EOF) {
      if (ps->tok.k == T_BAD && isdigit((unsigned char)ps->tok.s[0])) ps_expect(ps, T_NUM, "a number");
      else ps_expected(ps, "end of line");
    }
  }
  coda_status st = ps->err;
  if (!st) st = build_reg_names(ps);
  if (!st) st = ir_validate(ctx, p);
  if (!st) st = ir_finalize(ctx, p);
  free(ps);
  if (st) {
    coda_program_destroy(p);
    return st;
  }
  coda_clear_error(ctx);
  *out = p;
  return CODA_OK;
}
