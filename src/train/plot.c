/* The loss chart: an SVG file (text, viewable in a browser) with a title
 * naming the run, both axes labelled (step, loss) with tick values at
 * round numbers, grid lines, the training loss as a line, the validation
 * loss as a line with a marker per point, and a legend. A NaN or infinite
 * point is skipped and breaks its line. coda_plot_loss_csv draws the same
 * chart from a loss.csv (the trainer's log). */
#include "train/train.h"
#include "io/io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text_buf {
  char *p;
  size_t n, cap;
  int oom;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = 1; return; }
    if (b->p && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
    size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)k + 1;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p;
    b->cap = cap;
  }
}

/* s as XML character data: markup characters escaped, control bytes and
 * bytes that are not well-formed UTF-8 as '?'. */
static void put_escaped(text_buf *b, const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; u[i];) {
    const unsigned c = u[i];
    if (c == '&') put(b, "&amp;");
    else if (c == '<') put(b, "&lt;");
    else if (c == '>') put(b, "&gt;");
    else if (c == '"') put(b, "&quot;");
    else if (c < 0x20 || c == 0x7f) put(b, "?");
    else if (c < 0x80) put(b, "%c", (int)c);
    else {
      size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
      for (size_t j = 1; j < k; j++)
        if ((u[i + j] & 0xC0) != 0x80) k = 0;
      if (!k) put(b, "?");
      else put(b, "%.*s", (int)k, (const char *)u + i);
      i += k ? k : 1;
      continue;
    }
    i++;
  }
}

/* Ticks at round numbers (1, 2 or 5 times a power of ten) covering
 * [lo, hi]: the axis becomes [first tick, last tick]. */
typedef struct axis {
  double lo, hi, step;
  int decimals;
} axis;

static axis make_axis(double lo, double hi) {
  if (!isfinite(lo) || !isfinite(hi)) { lo = 0; hi = 1; }
  if (!(hi > lo)) { lo -= 0.5; hi += 0.5; }
  const double raw = (hi - lo) / 6, mag = pow(10, floor(log10(raw))), f = raw / mag;
  axis a;
  a.step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  a.lo = floor(lo / a.step) * a.step;
  a.hi = ceil(hi / a.step) * a.step;
  const int d = -(int)floor(log10(a.step) + 1e-9);
  a.decimals = d > 0 ? d : 0;
  return a;
}

static int ticks(const axis *a) { return (int)lround((a->hi - a->lo) / a->step); }

coda_status coda_plot_loss_svg(coda_context ctx, const char *path, const char *title, int w, int h,
                               const double *x1, const double *y1, int n1,
                               const double *x2, const double *y2, int n2) {
  if (w < 200 || h < 150 || w > 8192 || h > 8192)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "chart size %dx%d outside 200x150..8192x8192", w, h);
  if (n1 < 0 || n2 < 0 || (n1 && (!x1 || !y1)) || (n2 && (!x2 || !y2)))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "chart: a series without its points");
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (int s = 0; s < 2; s++) {
    const double *xs = s ? x2 : x1, *ys = s ? y2 : y1;
    for (int i = 0; i < (s ? n2 : n1); i++)
      if (isfinite(xs[i]) && isfinite(ys[i])) {
        xmin = fmin(xmin, xs[i]); xmax = fmax(xmax, xs[i]);
        ymin = fmin(ymin, ys[i]); ymax = fmax(ymax, ys[i]);
      }
  }
  const axis ax = make_axis(xmin, xmax), ay = make_axis(ymin, ymax);
  /* the plot area */
  const double L = 72, R = w - 24, T = 48, B = h - 56;
#define PX(v) (L + ((v) - ax.lo) / (ax.hi - ax.lo) * (R - L))
#define PY(v) (B - ((v) - ay.lo) / (ay.hi - ay.lo) * (B - T))
  text_buf b = {0};
  put(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  put(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n", w, h, w, h);
  put(&b, "<title>");
  put_escaped(&b, title ? title : "loss");
  put(&b, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
  put(&b, "<text id=\"title\" x=\"%.1f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">", w / 2.0);
  put_escaped(&b, title ? title : "loss");
  put(&b, "</text>\n");
  /* grid, ticks and tick values */
  put(&b, "<g id=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n");
  for (int k = 0; k <= ticks(&ay); k++)
    put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, PY(ay.lo + k * ay.step), R,
        PY(ay.lo + k * ay.step));
  for (int k = 0; k <= ticks(&ax); k++)
    put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", PX(ax.lo + k * ax.step), T,
        PX(ax.lo + k * ax.step), B);
  put(&b, "</g>\n<g id=\"x-axis\" stroke=\"black\">\n");
  put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, B, R, B);
  for (int k = 0; k <= ticks(&ax); k++) {
    const double v = ax.lo + k * ax.step, x = PX(v);
    put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x, B, x, B + 5);
    put(&b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" stroke=\"none\">%.*f</text>\n",
        x, B + 18, ax.decimals, v);
  }
  put(&b, "<text id=\"x-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" stroke=\"none\" "
          "font-size=\"14\">step</text>\n</g>\n", (L + R) / 2, B + 40);
  put(&b, "<g id=\"y-axis\" stroke=\"black\">\n");
  put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, T, L, B);
  for (int k = 0; k <= ticks(&ay); k++) {
    const double v = ay.lo + k * ay.step, y = PY(v);
    put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L - 5, y, L, y);
    put(&b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" stroke=\"none\">%.*f</text>\n",
        L - 8, y + 4, ay.decimals, v);
  }
  put(&b, "<text id=\"y-label\" x=\"18\" y=\"%.1f\" text-anchor=\"middle\" stroke=\"none\" font-size=\"14\" "
          "transform=\"rotate(-90 18 %.1f)\">loss</text>\n</g>\n", (T + B) / 2, (T + B) / 2);
  /* the series: a polyline per run of finite points (round caps draw a
   * lone point as a dot); validation points also get a marker */
  static const char *const name[2] = {"train", "validation"}, *const color[2] = {"#1f5ac8", "#d73c28"};
  for (int s = 0; s < 2; s++) {
    const double *xs = s ? x2 : x1, *ys = s ? y2 : y1;
    const int n = s ? n2 : n1;
    put(&b, "<g id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-linejoin=\"round\" "
            "stroke-linecap=\"round\">\n", name[s], color[s]);
    int open = 0;
    for (int i = 0; i < n; i++) {
      if (!isfinite(xs[i]) || !isfinite(ys[i])) {
        if (open) put(&b, "\"/>\n");
        open = 0;
        continue;
      }
      put(&b, open ? " %.1f,%.1f" : "<polyline points=\"%.1f,%.1f", PX(xs[i]), PY(ys[i]));
      open = 1;
    }
    if (open) put(&b, "\"/>\n");
    if (s == 1)
      for (int i = 0; i < n; i++)
        if (isfinite(xs[i]) && isfinite(ys[i]))
          put(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(xs[i]), PY(ys[i]), color[s]);
    put(&b, "</g>\n");
  }
  /* the legend, top right inside the plot area */
  const double lx = R - 130, ly = T + 8;
  put(&b, "<g id=\"legend\">\n<rect x=\"%.1f\" y=\"%.1f\" width=\"122\" height=\"46\" fill=\"white\" "
          "stroke=\"#888888\"/>\n", lx, ly);
  for (int s = 0; s < 2; s++) {
    const double y = ly + 15 + 18 * s;
    put(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
        lx + 8, y, lx + 32, y, color[s]);
    put(&b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 40, y + 4, name[s]);
  }
  put(&b, "</g>\n</svg>\n");
#undef PX
#undef PY
  if (b.oom) {
    free(b.p);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "chart: out of memory");
  }
  const void *parts[1] = {b.p};
  const size_t sizes[1] = {b.n};
  coda_status st = coda_write_atomic(ctx, path, parts, sizes, 1);
  free(b.p);
  return st;
}

/* The index of column `name` in a CSV header line (up to its '\n'), or -1. */
static int column_of(const char *hdr, size_t n, const char *name) {
  const size_t k = strlen(name);
  int col = 0;
  for (size_t i = 0; i <= n; col++) {
    size_t j = i;
    while (j < n && hdr[j] != ',') j++;
    if (j - i == k && !memcmp(hdr + i, name, k)) return col;
    i = j + 1;
  }
  return -1;
}

coda_status coda_plot_loss_csv(coda_context ctx, const char *csv, const char *svg, const char *title) {
  unsigned char *buf = NULL;
  size_t n = 0;
  coda_status st = coda_read_file_max(ctx, csv, (uint64_t)1 << 30, &buf, &n);
  if (st) return st;
  const char *t = (const char *)buf;
  const char *nl = memchr(t, '\n', n);
  const size_t hl = nl ? (size_t)(nl - t) : n;
  const int cs = column_of(t, hl, "step"), cl = column_of(t, hl, "loss"), cv = column_of(t, hl, "val_loss");
  if (cs < 0 || cl < 0) {
    free(buf);
    return coda_fail(ctx, CODA_ERR_PARSE, "%s: the header names no step and loss columns", csv);
  }
  size_t rows = 0;
  for (size_t i = 0; i < n; i++) rows += t[i] == '\n';
  double *v = malloc((rows + 1) * 4 * sizeof *v);
  if (!v) {
    free(buf);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", csv);
  }
  double *x1 = v, *y1 = v + rows + 1, *x2 = v + 2 * (rows + 1), *y2 = v + 3 * (rows + 1);
  int n1 = 0, n2 = 0;
  size_t line = 1;
  for (size_t i = nl ? hl + 1 : n; i < n; line++) {
    const char *e = memchr(t + i, '\n', n - i);
    const size_t end = e ? (size_t)(e - t) : n;
    double step = NAN, loss = NAN, val = NAN;
    int col = 0;
    for (size_t p = i; p <= end && p < n + 1; col++) {
      size_t q = p;
      while (q < end && t[q] != ',') q++;
      char cell[64];
      const size_t k = q - p < sizeof cell - 1 ? q - p : sizeof cell - 1;
      memcpy(cell, t + p, k);
      cell[k] = '\0';
      char *stop;
      const double d = strtod(cell, &stop);
      const int ok = k > 0 && *stop == '\0';
      if (col == cs) step = ok ? d : NAN;
      if (col == cl) loss = ok ? d : NAN;
      if (col == cv) val = ok ? d : NAN;
      p = q + 1;
    }
    if (end > i) { /* blank lines are skipped */
      if (!isfinite(step)) {
        free(v);
        free(buf);
        return coda_fail(ctx, CODA_ERR_PARSE, "%s:%zu: no step number", csv, line + 1);
      }
      x1[n1] = step; y1[n1++] = loss;
      if (!isnan(val)) { x2[n2] = step; y2[n2++] = val; }
    }
    i = end + 1;
  }
  st = coda_plot_loss_svg(ctx, svg, title, 720, 440, x1, y1, n1, x2, y2, n2);
  free(v);
  free(buf);
  return st;
}
