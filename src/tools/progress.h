/* A progress bar on stderr for the tool's long waits (corpus preparation,
 * kernel precompilation, evaluation): drawn in place with '\r' only when
 * stderr is a terminal; otherwise every call does nothing, so logs and
 * pipes get no bar. The library never prints: it reports through the
 * callbacks of its options structs, and the tool draws. */
#ifndef CODA_TOOL_PROGRESS_H
#define CODA_TOOL_PROGRESS_H

typedef struct coda_tool_bar {
  int on;             /* stderr is a terminal */
  int drawn;          /* a bar is on the line (coda_tool_bar_end ends it) */
  int last_permille;  /* the fraction last drawn, in 1/1000 */
  double last_s;      /* when it was drawn (monotonic seconds) */
  char label[48];
} coda_tool_bar;

/* Starts a bar named label (e.g. "preparing"); draws nothing yet. */
void coda_tool_bar_start(coda_tool_bar *b, const char *label);
/* Shows done of total (total <= 0: unknown, only the detail) with a short
 * detail after it ("12.0 MiB, 3400 tokens"; NULL: none). Redraws at most
 * ten times a second unless the fraction reaches 1. */
void coda_tool_bar_update(coda_tool_bar *b, double done, double total, const char *detail);
/* Clears the bar's line, so what is printed next starts on a clean line. */
void coda_tool_bar_end(coda_tool_bar *b);

#endif
