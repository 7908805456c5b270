/* The progress bar of progress.h. */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { BAR_WIDTH = 30 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void coda_tool_bar_start(coda_tool_bar *b, const char *label) {
  memset(b, 0, sizeof *b);
  b->on = isatty(fileno(stderr));
  b->last_permille = -1;
  snprintf(b->label, sizeof b->label, "%s", label ? label : "");
}

void coda_tool_bar_update(coda_tool_bar *b, double done, double total, const char *detail) {
  if (!b->on) return;
  double f = total > 0 ? done / total : -1;
  if (f > 1) f = 1;
  const int pm = f >= 0 ? (int)(f * 1000) : -1;
  const double t = now_s();
  if (b->drawn && pm != 1000 && (t - b->last_s < 0.1 || (pm >= 0 && pm == b->last_permille))) return;
  b->last_s = t;
  b->last_permille = pm;
  char bar[BAR_WIDTH + 1];
  if (f >= 0) {
    const int full = (int)(f * BAR_WIDTH + 0.5);
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < full ? '#' : '-';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s] %5.1f%%%s%s\033[K", b->label, bar, 100.0 * f, detail ? "  " : "",
            detail ? detail : "");
  } else {
    fprintf(stderr, "\r%s%s%s\033[K", b->label, detail ? "  " : "", detail ? detail : "");
  }
  fflush(stderr);
  b->drawn = 1;
}

void coda_tool_bar_end(coda_tool_bar *b) {
  if (!b->on || !b->drawn) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  b->drawn = 0;
}
