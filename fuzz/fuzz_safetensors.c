/* libFuzzer harness for the safetensors reader (src/io/safetensors.c).
 * Arbitrary bytes go to coda_st_parse (the in-memory entry point that
 * coda_st_load uses after reading a file), with and without a required
 * checksum. A rejected input must return a status with a message; an
 * accepted one must describe only bytes inside the buffer: every tensor's
 * [begin, end) lies inside the data region, end − begin equals the product
 * of its shape times its dtype size, tensors do not overlap, names are
 * unique and findable, and every data byte is read (so ASan sees any
 * pointer that escapes the buffer). Any violation aborts.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] */
#include "io/io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coda_context ctx;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_safetensors: %s\n", what);
  abort();
}

static int cmp_u64pair(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void check_file(const coda_st_file *f, const uint8_t *data, size_t size) {
  if (f->size != size || f->data_start < 10 || f->data_start > size) fail("bad sizes");
  if (memcmp(f->buf, data, size)) fail("buffer differs from the input");
  uint64_t region = size - f->data_start;
  uint64_t *spans = malloc(2 * sizeof(uint64_t) * (size_t)(f->n ? f->n : 1));
  if (!spans) abort();
  volatile unsigned sink = 0;
  for (int i = 0; i < f->n; i++) {
    const coda_st_tensor *t = &f->t[i];
    size_t es = coda_st_dtype_size(t->dtype);
    if (!es) fail("accepted an unknown dtype");
    if (t->ndim < 0 || t->ndim > CODA_ST_MAX_DIMS) fail("bad rank");
    /* The product cannot overflow here: the reader must have bounded it. */
    uint64_t el = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] < 0) fail("negative dimension");
      if (t->shape[d] && el > UINT64_MAX / (uint64_t)t->shape[d]) fail("shape overflows");
      el *= (uint64_t)t->shape[d];
    }
    if (el > UINT64_MAX / es) fail("byte count overflows");
    if (t->begin > t->end || t->end > region) fail("tensor outside the data region");
    if (t->end - t->begin != el * es) fail("size does not match shape and dtype");
    if (t->data != f->buf + f->data_start + t->begin) fail("data pointer is wrong");
    for (uint64_t k = 0; k < t->end - t->begin; k++) sink += t->data[k];
    if (coda_st_find(f, t->name) != t) fail("coda_st_find does not find a unique name");
    spans[2 * i] = t->begin;
    spans[2 * i + 1] = t->end;
  }
  qsort(spans, (size_t)f->n, 2 * sizeof(uint64_t), cmp_u64pair);
  for (int i = 1; i < f->n; i++)
    if (spans[2 * i] < spans[2 * i - 1]) fail("overlapping tensors accepted");
  free(spans);
  for (int i = 0; i < f->nmeta; i++) {
    if (!f->meta_key[i] || !f->meta_val[i]) fail("NULL metadata");
    sink += (unsigned)strlen(f->meta_val[i]);
    if (!coda_st_meta(f, f->meta_key[i])) fail("coda_st_meta does not find a key");
  }
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && coda_context_create(NULL, &ctx) != CODA_OK) abort();
  for (int require_crc = 0; require_crc < 2; require_crc++) {
    coda_st_file f;
    coda_status s = coda_st_parse(ctx, data, size, require_crc, "fuzz", &f);
    if (s == CODA_OK) {
      check_file(&f, data, size);
      coda_st_free(&f);
    } else {
      if (s != CODA_ERR_IO && s != CODA_ERR_OUT_OF_MEMORY) fail("unexpected status");
      if (!coda_last_error(ctx)[0]) fail("failure without a message");
      if (s == CODA_ERR_IO && (f.buf || f.t || f.n || f.meta_key))
        fail("failed parse left state behind");
    }
  }
  return 0;
}
