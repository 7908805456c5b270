/* Loss-curve PNG: the file is decoded here independently (chunk CRCs,
 * zlib stored blocks, Adler-32, scanline filters) and must hold an image
 * of the requested size with both series drawn. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "train/train.h"
#include "base/rng.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t be(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int main(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  char path[128];
  snprintf(path, sizeof path, "test_train_plot.tmp.%d.png", (int)getpid());
  enum { N = 300, W = 320, H = 200 };
  double x[N], y[N], vx[6], vy[6];
  uint64_t r = 3;
  for (int i = 0; i < N; i++) {
    x[i] = i + 1;
    y[i] = 2 + 3 * exp(-i / 40.0) + 0.2 * coda_rng_uniform(&r);
  }
  y[17] = NAN; /* skipped, not drawn */
  for (int i = 0; i < 6; i++) {
    vx[i] = i * 60;
    vy[i] = 2 + 3 * exp(-i * 1.5);
  }
  CHECK(coda_plot_png(ctx, path, W, H, x, y, N, vx, vy, 6) == CODA_OK);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return CHECK_DONE();
  static unsigned char b[1 << 20];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  CHECK(n > 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8));
  size_t raw_n = (size_t)H * (1 + 3 * W);
  unsigned char *raw = malloc(raw_n + 65536), *z = malloc(n);
  size_t zn = 0, o = 8;
  int w = 0, h = 0, ok_ihdr = 0, iend = 0;
  while (o + 12 <= n) {
    uint32_t len = be(b + o);
    if (o + 12 + len > n) break;
    CHECK(be(b + o + 8 + len) == crc32_ref(b + o + 4, len + 4));
    if (!memcmp(b + o + 4, "IHDR", 4)) {
      w = (int)be(b + o + 8);
      h = (int)be(b + o + 12);
      ok_ihdr = b[o + 16] == 8 && b[o + 17] == 2 && !b[o + 18] && !b[o + 19] && !b[o + 20];
    } else if (!memcmp(b + o + 4, "IDAT", 4)) {
      memcpy(z + zn, b + o + 8, len);
      zn += len;
    } else if (!memcmp(b + o + 4, "IEND", 4)) {
      iend = 1;
    }
    o += 12 + len;
  }
  CHECK(w == W && h == H && ok_ihdr && iend && o == n);
  /* zlib: header, stored blocks, Adler-32 */
  CHECK(zn > 6 && ((z[0] << 8) | z[1]) % 31 == 0 && (z[0] & 15) == 8);
  size_t zo = 2, rn = 0;
  int last = 0;
  while (!last && zo + 5 <= zn) {
    last = z[zo] & 1;
    CHECK((z[zo] >> 1 & 3) == 0); /* stored */
    unsigned len = z[zo + 1] | z[zo + 2] << 8, nlen = z[zo + 3] | z[zo + 4] << 8;
    CHECK((len ^ 0xffff) == nlen);
    zo += 5;
    if (zo + len > zn || rn + len > raw_n) break;
    memcpy(raw + rn, z + zo, len);
    rn += len;
    zo += len;
  }
  CHECK(last && rn == raw_n && zo + 4 == zn);
  uint32_t a = 1, s2 = 0;
  for (size_t i = 0; i < rn; i++) {
    a = (a + raw[i]) % 65521;
    s2 = (s2 + a) % 65521;
  }
  CHECK(zo + 4 <= zn && be(z + zo) == (s2 << 16 | a));
  int filt_ok = 1, blue = 0, red = 0;
  for (int row = 0; row < H; row++) {
    const unsigned char *p = raw + (size_t)row * (1 + 3 * W);
    filt_ok &= p[0] == 0;
    for (int c = 0; c < W; c++) {
      const unsigned char *px = p + 1 + 3 * c;
      blue += px[2] > 150 && px[0] < 100;
      red += px[0] > 150 && px[2] < 100;
    }
  }
  CHECK(filt_ok);
  CHECK(blue > 100 && red > 50);
  CHECK(raw[1] == 255 && raw[2] == 255 && raw[3] == 255); /* white background */
  free(raw);
  free(z);
  CHECK(coda_plot_png(ctx, path, 10, 10, x, y, N, vx, vy, 6) == CODA_ERR_INVALID_ARGUMENT);
  /* nothing finite to plot still gives a valid (empty) picture */
  double nan1[1] = {NAN};
  CHECK(coda_plot_png(ctx, path, 64, 64, nan1, nan1, 1, NULL, NULL, 0) == CODA_OK);
  unlink(path);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
