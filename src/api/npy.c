/* .npy reader and writer (include/coda.h): a strict subset of the NumPy
 * format, the dtypes of the library, 0- to 2-D C-order arrays. */

#define _POSIX_C_SOURCE 200809L /* fdopen */
#include "api/api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAX_HEADER 65536

static const struct { const char *descr; coda_dtype t; } npy_types[] = {
    {"<f4", CODA_F32}, {"<f8", CODA_F64}, {"<i4", CODA_I32}, {"<f2", CODA_F16}, {"<u2", CODA_BF16},
};

/* The value of key 'name' in the header dict: pointer past "'name':" and blanks. */
static const char *npy_key(const char *h, const char *name) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", name);
  const char *p = strstr(h, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p++ != ':') return NULL;
  while (*p == ' ') p++;
  return p;
}

coda_status coda_npy_read(coda_context ctx, const char *path, coda_dtype *dtype, int64_t *rows,
                          int64_t *cols, int *ndim, void **data) {
  if (!path || !dtype || !rows || !cols || !data)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_npy_read: NULL argument");
  *data = NULL;
  /* a regular file only: O_NONBLOCK so that a FIFO does not block the
   * open, and its size bounds what the header may claim */
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  memset(&st, 0, sizeof st);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int is_dir = S_ISDIR(st.st_mode), is_fifo = S_ISFIFO(st.st_mode);
    close(fd);
    return coda_fail(ctx, CODA_ERR_IO, "%s: is %s, not a regular .npy file", path,
                     is_dir ? "a directory" : is_fifo ? "a FIFO" : "a device or another non-file");
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return coda_fail(ctx, CODA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  }
  const uint64_t file_size = (uint64_t)st.st_size;
  unsigned char pre[12];
  coda_status s = CODA_OK;
  char *h = NULL;
  void *buf = NULL;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
    s = coda_fail(ctx, CODA_ERR_IO, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    goto done;
  }
  size_t hlen;
  if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
  else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, f) != 2) { s = coda_fail(ctx, CODA_ERR_IO, "%s: truncated header", path); goto done; }
    hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else {
    s = coda_fail(ctx, CODA_ERR_IO, "%s: .npy format version %d is not supported", path, pre[6]);
    goto done;
  }
  if (hlen == 0 || hlen > NPY_MAX_HEADER) { s = coda_fail(ctx, CODA_ERR_IO, "%s: bad header length %zu", path, hlen); goto done; }
  h = malloc(hlen + 1);
  if (!h) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", path); goto done; }
  if (fread(h, 1, hlen, f) != hlen) { s = coda_fail(ctx, CODA_ERR_IO, "%s: truncated header", path); goto done; }
  h[hlen] = '\0';
  if (memchr(h, '\0', hlen)) { s = coda_fail(ctx, CODA_ERR_IO, "%s: NUL byte in the header", path); goto done; }
  const char *d = npy_key(h, "descr"), *fo = npy_key(h, "fortran_order"), *sh = npy_key(h, "shape");
  if (!d || !fo || !sh) { s = coda_fail(ctx, CODA_ERR_IO, "%s: header lacks descr, fortran_order or shape", path); goto done; }
  int ti = -1;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
    size_t n = strlen(npy_types[i].descr);
    if (d[0] == '\'' && !strncmp(d + 1, npy_types[i].descr, n) && d[1 + n] == '\'') ti = (int)i;
  }
  if (ti < 0) {
    s = coda_fail(ctx, CODA_ERR_IO, "%s: dtype %.12s is not supported ('<f4', '<f8', '<i4', '<f2', "
                  "'<u2' = bf16 bits)", path, d);
    goto done;
  }
  if (strncmp(fo, "False", 5)) { s = coda_fail(ctx, CODA_ERR_IO, "%s: Fortran order is not supported", path); goto done; }
  if (*sh != '(') { s = coda_fail(ctx, CODA_ERR_IO, "%s: bad shape", path); goto done; }
  int64_t dims[3];
  int nd = 0;
  const char *p = sh + 1;
  for (;;) {
    while (*p == ' ') p++;
    if (*p == ')') break;
    if (nd == 3 || *p < '0' || *p > '9') { s = coda_fail(ctx, CODA_ERR_IO, "%s: bad shape (0 to 2 dimensions)", path); goto done; }
    char *end;
    long long v = strtoll(p, &end, 10);
    if (v < 0 || v > ((int64_t)1 << 40)) { s = coda_fail(ctx, CODA_ERR_IO, "%s: bad dimension", path); goto done; }
    dims[nd++] = v;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
  }
  if (nd > 2) { s = coda_fail(ctx, CODA_ERR_IO, "%s: %d-D arrays are not supported (0 to 2)", path, nd); goto done; }
  int64_t r = nd == 2 ? dims[0] : 1, c = nd == 2 ? dims[1] : nd == 1 ? dims[0] : 1;
  size_t es = coda_dtype_size(npy_types[ti].t);
  if (c > 0 && r > (int64_t)(((size_t)1 << 40) / es) / c) { s = coda_fail(ctx, CODA_ERR_IO, "%s: array too large", path); goto done; }
  size_t bytes = (size_t)(r * c) * es;
  /* the data follow the header to the file's end: the shape is checked
   * against the file before anything of its size is allocated */
  const uint64_t data_at = (pre[6] == 1 ? 10 : 12) + (uint64_t)hlen;
  const uint64_t held = file_size < data_at ? 0 : file_size - data_at;
  if (held != bytes) {
    s = coda_fail(ctx, CODA_ERR_IO, "%s: %s: the header's shape needs %zu bytes of data, the "
                  "file holds %llu", path, held < bytes ? "truncated data" : "data past the array's end",
                  bytes, (unsigned long long)held);
    goto done;
  }
  buf = malloc(bytes ? bytes : 1);
  if (!buf) { s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "%s: out of memory", path); goto done; }
  if (fread(buf, 1, bytes, f) != bytes) { s = coda_fail(ctx, CODA_ERR_IO, "%s: truncated data (%zu bytes expected)", path, bytes); goto done; }
  if (fgetc(f) != EOF) { s = coda_fail(ctx, CODA_ERR_IO, "%s: data past the array's end", path); goto done; }
  *dtype = npy_types[ti].t;
  *rows = r;
  *cols = c;
  if (ndim) *ndim = nd;
  *data = buf;
  buf = NULL;
done:
  free(buf);
  free(h);
  fclose(f);
  return s;
}

coda_status coda_npy_write(coda_context ctx, const char *path, const coda_tensor *t) {
  if (!path || !t || (!t->data && t->rows * t->cols > 0))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_npy_write: NULL argument");
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (npy_types[i].t == t->dtype) descr = npy_types[i].descr;
  if (!descr) return coda_fail(ctx, CODA_ERR_DTYPE, "coda_npy_write: dtype not supported");
  char h[160];
  int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
                   descr, (long long)t->rows, (long long)t->cols);
  int total = 10 + n + 1;
  int pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) return coda_fail(ctx, CODA_ERR_IO, "%s: cannot create", path);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  int hl = n + pad + 1;
  pre[8] = (unsigned char)(hl & 0xff);
  pre[9] = (unsigned char)(hl >> 8);
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)n, f) == (size_t)n;
  for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  size_t es = coda_dtype_size(t->dtype);
  for (int64_t r = 0; ok && r < t->rows; r++)
    ok = fwrite((const char *)t->data + (size_t)(r * t->ld) * es, es, (size_t)t->cols, f) == (size_t)t->cols;
  if (fclose(f) != 0) ok = 0;
  if (!ok) return coda_fail(ctx, CODA_ERR_IO, "%s: write failed", path);
  return CODA_OK;
}
