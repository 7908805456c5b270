/* coda_npy_read / coda_npy_write: round trip of every supported dtype
 * (bf16 as <u2 bit patterns), 1-D and 0-D files, strided views, and the
 * strict rejections (descr, Fortran order, 3-D, truncated data, trailing
 * bytes, bad magic); a header whose shape claims more data than the file
 * holds (refused before anything of that size is allocated), and a FIFO
 * or a directory in the file's place (refused by name, never waited on).
 * Also coda_program_arg_shape_ctx's reasons. */
#define _POSIX_C_SOURCE 200809L /* mkfifo */
#include "coda.h"
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *path = "test_npy.tmp.npy";

static void write_raw(const char *header, const void *data, size_t bytes, int extra) {
  FILE *f = fopen(path, "wb");
  size_t hl = strlen(header);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
  fwrite(pre, 1, 10, f);
  fwrite(header, 1, hl, f);
  fwrite(data, 1, bytes, f);
  if (extra) fputc(0, f);
  fclose(f);
}

static void expect_fail(coda_context ctx, const char *want) {
  coda_dtype t;
  int64_t r, c;
  void *d = NULL;
  coda_status s = coda_npy_read(ctx, path, &t, &r, &c, NULL, &d);
  CHECK_MSG(s == CODA_ERR_IO && !d, "expected an error about '%s', got %d", want, (int)s);
  CHECK_MSG(strstr(coda_last_error(ctx), want), "message '%s' lacks '%s'", coda_last_error(ctx), want);
  free(d);
}

int main(void) {
  coda_context ctx;
  coda_context_options o = coda_context_default_options();
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  remove(path); /* a FIFO left by a run that was stopped would block the writes below */
  const coda_dtype types[] = {CODA_F32, CODA_F64, CODA_I32, CODA_F16, CODA_BF16};
  for (int k = 0; k < 5; k++) {
    coda_dtype t = types[k];
    size_t es = coda_dtype_size(t);
    /* a 3 x 5 view with ld 7 */
    unsigned char *buf = calloc(3 * 7, es);
    coda_tensor v = {buf, t, 3, 5, 7};
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++) coda_tensor_set(&v, i, j, (i * 5 + j) * 0.75 - 4);
    CHECK(coda_npy_write(ctx, path, &v) == CODA_OK);
    coda_dtype rt;
    int64_t r, c;
    int nd;
    void *d = NULL;
    CHECK_MSG(coda_npy_read(ctx, path, &rt, &r, &c, &nd, &d) == CODA_OK, "%s", coda_last_error(ctx));
    CHECK(rt == t && r == 3 && c == 5 && nd == 2);
    coda_tensor w = coda_tensor_2d(d, rt, r, c);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++)
        CHECK_NEAR(coda_tensor_get(&w, i, j), coda_tensor_get(&v, i, j), 0);
    free(d);
    free(buf);
  }
  /* bf16 convention: <u2 holding the upper half of the f32 */
  {
    uint16_t bits[2] = {0x3f80, 0xc040}; /* 1.0, -3.0 */
    write_raw("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }\n", bits, 4, 0);
    coda_dtype t;
    int64_t r, c;
    int nd;
    void *d = NULL;
    CHECK(coda_npy_read(ctx, path, &t, &r, &c, &nd, &d) == CODA_OK);
    CHECK(t == CODA_BF16 && r == 1 && c == 2 && nd == 1);
    coda_tensor w = coda_tensor_2d(d, t, 1, 2);
    CHECK_NEAR(coda_tensor_get(&w, 0, 0), 1.0, 0);
    CHECK_NEAR(coda_tensor_get(&w, 0, 1), -3.0, 0);
    free(d);
    double x = 2.5;
    write_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", &x, 8, 0);
    CHECK(coda_npy_read(ctx, path, &t, &r, &c, &nd, &d) == CODA_OK);
    CHECK(t == CODA_F64 && r == 1 && c == 1 && nd == 0 && *(double *)d == 2.5);
    free(d);
  }
  float f4[6] = {0};
  write_raw("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", f4, 24, 0);
  expect_fail(ctx, "not supported");
  write_raw("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", f4, 24, 0);
  expect_fail(ctx, "Fortran");
  write_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3), }\n", f4, 24, 0);
  expect_fail(ctx, "3-D");
  write_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", f4, 20, 0);
  expect_fail(ctx, "truncated");
  write_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", f4, 24, 1);
  expect_fail(ctx, "past the array");
  write_raw("{'fortran_order': False, 'shape': (2, 3), }\n", f4, 24, 0);
  expect_fail(ctx, "lacks descr");
  FILE *f = fopen(path, "wb");
  fputs("PK\x03\x04 not npy", f);
  fclose(f);
  expect_fail(ctx, "not a .npy file");
  remove(path);

  /* a 16 GiB shape over 24 bytes: refused by the file's size, not by a
   * failed (or, with overcommit, successful) allocation */
  write_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536), }\n", f4, 24, 0);
  expect_fail(ctx, "truncated data: the header's shape needs 17179869184 bytes of data, the file holds 24");
  remove(path);
  /* not regular files: a FIFO must not block the open (the alarm ends a
   * reader that waits for a writer), a directory is named as one */
  alarm(20);
  CHECK(mkfifo(path, 0600) == 0);
  expect_fail(ctx, "is a FIFO, not a regular .npy file");
  remove(path);
  CHECK(mkdir(path, 0700) == 0);
  expect_fail(ctx, "is a directory, not a regular .npy file");
  rmdir(path);
  alarm(0);

  /* the reasons coda_program_arg_shape does not give */
  coda_program p = NULL;
  CHECK(coda_program_parse(ctx, "mode pair\ninput r : row f32\noutput y : bf16 half\n"
                                "store y = acc.even * r\nreduce q = rowsum(acc.odd) per 96\n", &p) == CODA_OK);
  int64_t r, c;
  CHECK(coda_program_arg_shape_ctx(ctx, p, "r", 4, 63, 64, 128, &r, &c) == CODA_ERR_SHAPE);
  CHECK(strstr(coda_last_error(ctx), "pair mode needs an even N, found 63") != NULL);
  CHECK(coda_program_arg_shape_ctx(ctx, p, "q", 4, 192, 64, 128, &r, &c) == CODA_ERR_SHAPE);
  CHECK(strstr(coda_last_error(ctx), "segment 96 and tile_n 128") != NULL);
  CHECK(coda_program_arg_shape_ctx(ctx, p, "nosuch", 4, 192, 64, 128, &r, &c) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "no argument named 'nosuch'") != NULL);
  CHECK(coda_program_arg_shape_ctx(ctx, p, "q", 4, 192, 64, 96, &r, &c) == CODA_OK && r == 4 && c == 2);
  coda_arg_info a;
  CHECK(coda_program_arg_ctx(ctx, p, 9, &a) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "out of range") != NULL);
  coda_program_destroy(p);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
