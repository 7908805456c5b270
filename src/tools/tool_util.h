/* Small helpers shared by the subcommands of the coda tool. */
#ifndef CODA_TOOL_UTIL_H
#define CODA_TOOL_UTIL_H

/* Reads a whole file (or stdin for "-") into a NUL-terminated string the
 * caller frees. On failure returns NULL and *why says what went wrong
 * (cannot open, too large, read error, NUL byte, out of memory). */
char *coda_tool_read_text(const char *path, const char **why);

#include "coda_train.h"

#include <stdio.h>

/* --data PATH as a corpus: prepares OUT/data/train.tok and val.tok from
 * d->path (coda_prepare_data) with a stamp OUT/data/source.txt naming the
 * source, or reuses them when the stamp matches; shards there without a
 * stamp are never written over. data_dir (cap bytes) = OUT/data; *vocab =
 * the shards' vocabulary. 0 on success; else prints why ("coda CMD: ...")
 * and returns 1. */
int coda_tool_prepare_corpus(coda_context ctx, const char *cmd, const coda_data_options *d,
                             const char *out_dir, char *data_dir, size_t cap, uint32_t *vocab);
/* The preparation's progress (coda_data_options.progress): with user NULL
 * a line on stdout; coda_tool_prepare_corpus passes its own user, and
 * then, where stderr is a terminal, a bar there (progress.h) instead. */
void coda_tool_prep_progress(uint64_t bytes, uint64_t tokens, void *user);

/* --param NAME=VALUE[,NAME=VALUE...]: program parameter values
 * (coda_program_bind). */
#define CODA_TOOL_MAX_PARAMS 16
typedef struct coda_tool_params {
  char name[CODA_TOOL_MAX_PARAMS][32];
  double value[CODA_TOOL_MAX_PARAMS];
  int n;
} coda_tool_params;
/* Adds the values of one --param option; 0, or -1 after printing
 * "coda CMD: --param ..." (a missing '=', a name too long, a value that is
 * not a finite number, too many). */
int coda_tool_params_parse(const char *cmd, const char *v, coda_tool_params *P);
/* Replaces *p with *p bound to the values of P (only those it declares when
 * only_declared is set; every one otherwise, so an unknown name is the
 * library's error). Nothing to bind: *p unchanged. The status, with the
 * message in ctx. */
coda_status coda_tool_params_bind(coda_context ctx, coda_program *p, const coda_tool_params *P,
                                  int only_declared);
/* 1 if p declares parameter name. */
int coda_tool_program_has_param(coda_program p, const char *name);

/* coda_context_create(o, out) (o NULL: the defaults); on failure prints
 * "coda CMD: cannot create a WHAT context: REASON" (the reason from
 * coda_context_options_check, else the status) and returns the status. */
coda_status coda_tool_context(const coda_context_options *o, coda_context *out, const char *cmd,
                              const char *what);

/* ---- numeric flags: one table per command, one check, one help ----
 * Every numeric flag of a command is a row: its name, integer or real,
 * its allowed range (bounds closed or open) and its meaning. The parser
 * refuses a value outside the range as
 *   "coda CMD: --top-p: must be in (0, 1], got 1.5 (MEANING)"
 * and the help lists every row with its range and meaning. */
typedef struct coda_tool_num {
  const char *flag;    /* "--top-p" */
  int integer;         /* 1: an integer (decimal); 0: a real number */
  double lo, hi;       /* the range (integers: exact up to 2^53) */
  int lo_open, hi_open;/* 1: the bound itself is not allowed */
  const char *meaning; /* what the value says, for the refusal and the help */
} coda_tool_num;

/* The row of `flag` in a table ended by a row whose flag is NULL; NULL
 * when the flag is not numeric. */
const coda_tool_num *coda_tool_num_find(const coda_tool_num *table, const char *flag);
/* Parses v as the row says: 0 and *out on success; else prints the
 * refusal naming the flag, the range, the value and the meaning, and
 * returns 2 (the tools' usage status). v NULL: the value is missing. */
int coda_tool_num_parse(const char *cmd, const coda_tool_num *t, const char *v, double *out);
/* The same for an integer flag, into *out. */
int coda_tool_num_parse_ll(const char *cmd, const coda_tool_num *t, const char *v, long long *out);
/* The range as text: "[1, 65536]", "(0, 1]", "[0, inf)". */
void coda_tool_num_range(const coda_tool_num *t, char *buf, size_t cap);
/* The help's section of the table: one line per flag, "--flag  RANGE  meaning". */
void coda_tool_num_help(FILE *f, const coda_tool_num *table);

/* Prints the context's warnings (coda_warnings), each line as
 * "coda CMD: warning: LINE" on stderr, and clears them. */
void coda_tool_warnings(coda_context ctx, const char *cmd);

/* The family named v (coda_model_family_name's names); 0, or 2 after a
 * message on stderr that lists the families of the table. */
int coda_tool_family_parse(const char *cmd, const char *v, coda_model_family *out);

#endif
