/* Loss-curve plot: lines drawn into an RGB pixel buffer and written as a
 * PNG whose zlib stream uses stored (uncompressed) deflate blocks, so no
 * compression library is needed. Axis labels: loss values at the grid
 * lines, step numbers at the start, middle and end of the x axis. */
#include "train/train.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned char *px; int w, h; } canvas;

static void dot(canvas *c, int x, int y, const unsigned char rgb[3]) {
  if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
  memcpy(c->px + ((size_t)y * c->w + x) * 3, rgb, 3);
}

static void line(canvas *c, int x0, int y0, int x1, int y1, const unsigned char rgb[3], int thick) {
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    for (int a = 0; a < thick; a++)
      for (int b = 0; b < thick; b++) dot(c, x0 + a, y0 + b, rgb);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) { err += dy; x0 += sx; }
    if (e2 <= dx) { err += dx; y0 += sy; }
  }
}

/* 3x5 pixel digits (and '.'), one row per 3 bits, top row first, drawn
 * at scale 2 for the axis labels. */
static const unsigned char glyph[11][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
    {0, 0, 0, 0, 2}};

/* Draws text of digits and '.' with its top-left corner at (x, y). */
static void text(canvas *c, int x, int y, const char *s, const unsigned char rgb[3]) {
  for (; *s; s++, x += 8) {
    int g = *s == '.' ? 10 : (*s >= '0' && *s <= '9') ? *s - '0' : -1;
    if (g < 0) continue;
    for (int r = 0; r < 5; r++)
      for (int b = 0; b < 3; b++)
        if (glyph[g][r] >> (2 - b) & 1)
          for (int dy = 0; dy < 2; dy++)
            for (int dx = 0; dx < 2; dx++) dot(c, x + 2 * b + dx, y + 2 * r + dy, rgb);
  }
}

static void be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* Appends a PNG chunk (length, type, data, CRC of type+data). */
static unsigned char *chunk(unsigned char *o, const char *type, const unsigned char *d, size_t n) {
  be32(o, (uint32_t)n);
  memcpy(o + 4, type, 4);
  if (n) memcpy(o + 8, d, n);
  be32(o + 8 + n, coda_crc32(0, o + 4, n + 4));
  return o + 12 + n;
}

coda_status coda_plot_png(coda_context ctx, const char *path, int w, int h, const double *x1,
                          const double *y1, int n1, const double *x2, const double *y2, int n2) {
  if (w < 64 || h < 64 || w > 4096 || h > 4096)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "plot size %dx%d outside 64..4096", w, h);
  canvas c = {calloc((size_t)w * h, 3), w, h};
  if (!c.px) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  memset(c.px, 255, (size_t)w * h * 3);
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (int s = 0; s < 2; s++) {
    const double *xs = s ? x2 : x1, *ys = s ? y2 : y1;
    int n = s ? n2 : n1;
    for (int i = 0; i < n; i++)
      if (isfinite(xs[i]) && isfinite(ys[i])) {
        xmin = fmin(xmin, xs[i]); xmax = fmax(xmax, xs[i]);
        ymin = fmin(ymin, ys[i]); ymax = fmax(ymax, ys[i]);
      }
  }
  if (!(xmax > xmin)) { xmin = isfinite(xmin) ? xmin - 1 : 0; xmax = xmin + 2; }
  if (!(ymax > ymin)) { ymin = isfinite(ymin) ? ymin - 1 : 0; ymax = ymin + 2; }
  ymin = floor(ymin * 2) / 2; ymax = ceil(ymax * 2) / 2; /* grid every 0.5 nats */
  const int L = 56, R = w - 20, T = 20, B = h - 30;
  const unsigned char black[3] = {0, 0, 0}, grid[3] = {225, 225, 225},
                      blue[3] = {31, 90, 200}, red[3] = {215, 60, 40};
  const double ystep = ymax - ymin > 8 ? 1.0 : 0.5;
  for (double g = ymin; g <= ymax + 1e-9; g += ystep) {
    int y = B - (int)lround((g - ymin) / (ymax - ymin) * (B - T));
    line(&c, L, y, R, y, grid, 1);
    line(&c, L - 6, y, L, y, black, 1);
    char lab[16];
    snprintf(lab, sizeof lab, "%.1f", g);
    text(&c, L - 8 - 8 * (int)strlen(lab), y - 5, lab, black);
  }
  for (int k = 0; k <= 10; k++) {
    int x = L + (R - L) * k / 10;
    line(&c, x, B, x, B + 6, black, 1);
    if (k % 5 == 0) { /* step numbers at the start, middle and end */
      char lab[24];
      snprintf(lab, sizeof lab, "%.0f", xmin + (xmax - xmin) * k / 10.0);
      int tw = 8 * (int)strlen(lab);
      text(&c, k == 10 ? x - tw + 2 : k == 5 ? x - tw / 2 : x, B + 10, lab, black);
    }
  }
  line(&c, L, T, L, B, black, 1);
  line(&c, L, B, R, B, black, 1);
  for (int s = 0; s < 2; s++) {
    const double *xs = s ? x2 : x1, *ys = s ? y2 : y1;
    int n = s ? n2 : n1, have = 0, px = 0, py = 0;
    for (int i = 0; i < n; i++) {
      if (!isfinite(xs[i]) || !isfinite(ys[i])) { have = 0; continue; }
      int X = L + (int)lround((xs[i] - xmin) / (xmax - xmin) * (R - L));
      int Y = B - (int)lround((ys[i] - ymin) / (ymax - ymin) * (B - T));
      if (have) line(&c, px, py, X, Y, s ? red : blue, 2);
      else dot(&c, X, Y, s ? red : blue);
      px = X; py = Y; have = 1;
    }
  }
  /* Raw scanlines (filter byte 0), then zlib with stored blocks. */
  size_t raw_n = (size_t)h * (1 + (size_t)w * 3);
  unsigned char *raw = malloc(raw_n);
  size_t nblk = raw_n / 65535 + 1;
  size_t z_n = 2 + raw_n + nblk * 5 + 4;
  unsigned char *z = malloc(z_n);
  unsigned char *png = malloc(8 + 25 + 12 + z_n + 12);
  coda_status st = CODA_OK;
  if (!raw || !z || !png) {
    st = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    goto out;
  }
  for (int y = 0; y < h; y++) {
    raw[(size_t)y * (1 + (size_t)w * 3)] = 0;
    memcpy(raw + (size_t)y * (1 + (size_t)w * 3) + 1, c.px + (size_t)y * w * 3, (size_t)w * 3);
  }
  size_t zo = 0;
  z[zo++] = 0x78; z[zo++] = 0x01;
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < raw_n; i++) { a = (a + raw[i]) % 65521; b = (b + a) % 65521; }
  for (size_t off = 0; off < raw_n || off == 0;) {
    size_t n = raw_n - off > 65535 ? 65535 : raw_n - off;
    z[zo++] = off + n == raw_n ? 1 : 0;
    z[zo++] = (unsigned char)n; z[zo++] = (unsigned char)(n >> 8);
    z[zo++] = (unsigned char)~n; z[zo++] = (unsigned char)(~n >> 8);
    memcpy(z + zo, raw + off, n);
    zo += n;
    off += n;
    if (n == 0) break;
  }
  be32(z + zo, (b << 16) | a);
  zo += 4;
  unsigned char ihdr[13];
  be32(ihdr, (uint32_t)w); be32(ihdr + 4, (uint32_t)h);
  ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0;
  unsigned char *o = png;
  memcpy(o, "\x89PNG\r\n\x1a\n", 8);
  o += 8;
  o = chunk(o, "IHDR", ihdr, 13);
  o = chunk(o, "IDAT", z, zo);
  o = chunk(o, "IEND", NULL, 0);
  {
    const void *parts[1] = {png};
    size_t sizes[1] = {(size_t)(o - png)};
    st = coda_write_atomic(ctx, path, parts, sizes, 1);
  }
out:
  free(raw); free(z); free(png); free(c.px);
  return st;
}
