/* The parser's state and the helpers its two halves share: parse.c (the
 * lexer, expressions, statements and the driver) and parse_decl.c (the
 * declarations: inputs, parameters, outputs, stores, reductions and
 * finishers). Private to src/lang. */
#ifndef CODA_LANG_PARSE_H
#define CODA_LANG_PARSE_H

#include "lang/ir.h"

#define MAX_SYMS (CODA_MAX_INPUTS + CODA_MAX_OUTPUTS + CODA_MAX_REDUCES + CODA_MAX_FINISHES + CODA_MAX_PARAMS + \
                  2 * CODA_MAX_INSTRS)

typedef enum {
  T_EOF, T_NL, T_NAME, T_NUM, T_COMMA, T_COLON, T_DOT, T_LP, T_RP, T_ASSIGN,
  T_PLUS, T_MINUS, T_STAR, T_SLASH, T_LT, T_LE, T_GT, T_GE, T_EQ, T_NE, T_BAD
} tok_kind;

typedef struct {
  tok_kind k;
  const char *s;
  int len;
  int line, col;
  double num;
} token;

typedef enum { SYM_INPUT, SYM_OUTPUT, SYM_VALUE, SYM_REDUCE, SYM_FINISH, SYM_PARAM } sym_kind;

typedef struct {
  char name[CODA_NAME_MAX];
  sym_kind kind;
  int index; /* input/output/reduce/finish/param index or register */
  int line;
} symbol;

typedef struct {
  coda_context ctx;
  const char *src;
  size_t pos, line_start;
  int line;
  token tok;
  struct coda_program_s *p;
  symbol syms[MAX_SYMS];
  int nsyms;
  char regname[2 * CODA_MAX_INSTRS][CODA_NAME_MAX];
  int depth;
  int nstatements;
  int nheader;        /* statements so far that were `mode` or `math` */
  int math_seen;
  coda_status err;
} parser;

/* errors: the first one is kept; each returns -1 */
int ps_error(parser *ps, coda_status s, int line, int col, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
int ps_expected(parser *ps, const char *what);

/* tokens */
void ps_next(parser *ps);
int ps_tok_is(const token *t, const char *word);
int ps_accept(parser *ps, tok_kind k);
int ps_expect(parser *ps, tok_kind k, const char *what);

/* symbols */
symbol *ps_lookup(parser *ps, const token *t);
int ps_new_name(parser *ps, const token *t, char out[CODA_NAME_MAX]);
void ps_define(parser *ps, const char *name, sym_kind kind, int index, int line);

/* expressions: one more level of nesting, and an expression's register */
int ps_enter(parser *ps, const token *at);
int ps_expr(parser *ps);

/* declarations (parse_decl.c), after their keyword */
int ps_input(parser *ps);
int ps_param(parser *ps);
int ps_output(parser *ps);
int ps_store(parser *ps);
int ps_reduce(parser *ps);
int ps_finish(parser *ps);
int ps_columns(parser *ps, const token *st, const char *what, int *out);

#endif
