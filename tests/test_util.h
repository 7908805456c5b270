/* Helpers shared by the tests: the random generators their data and seeds
 * are written for (each on a state the test owns, so a test's streams do
 * not depend on another's), random tensors, the max relative error, and a
 * reference CRC-32. The generators differ on purpose: each test keeps the
 * one its expected values were drawn with. */
#ifndef CODA_TEST_UTIL_H
#define CODA_TEST_UTIL_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "coda.h"

/* xorshift64 (13, 7, 17): the next state. */
static inline uint64_t xorshift64_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
/* xorshift64, uniform in [-1, 1). */
static inline double xorshift64_unit(uint64_t *s) {
  return (double)(xorshift64_next(s) >> 11) / 4503599627370496.0 - 1.0;
}
/* xorshift64, uniform in [0, 1). */
static inline double xorshift64_unit01(uint64_t *s) {
  return (double)(xorshift64_next(s) >> 11) / 9007199254740992.0;
}

/* xorshift64* (12, 25, 27), uniform in (-1, 1). */
static inline double xorshift64star_unit(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  uint64_t v = *s * 2685821657736338717ull;
  return ((double)(v >> 11) / 9007199254740992.0) * 2.0 - 1.0;
}

/* splitmix64, uniform in [-1, 1). */
static inline double splitmix64_unit(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

/* The 64-bit LCG (Knuth's MMIX constants): the top 53 bits of the next
 * state. */
static inline uint64_t lcg64_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}
/* The LCG, uniform in [-1, 1). */
static inline double lcg64_unit(uint64_t *s) { return (double)lcg64_next(s) / 9007199254740992.0 * 2 - 1; }

/* The seed of a randomized test: $CODA_TEST_SEED, else one from the clock;
 * printed ("seed N") so that a failing run can be repeated. */
static inline uint64_t test_seed(void) {
  const char *seed = getenv("CODA_TEST_SEED");
  uint64_t s = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) * 2654435761u + 1;
  printf("seed %llu\n", (unsigned long long)s);
  return s;
}

/* max |a - b| / max |b| (b the reference; NaN propagates). */
static inline double rel_err(const double *a, const double *b, int64_t n) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]);
    if (!(d <= e)) e = d;
    m = fmax(m, fabs(b[i]));
  }
  return m > 0 ? e / m : e;
}

/* Bitwise CRC-32, written independently of the library's table form. */
static inline uint32_t crc32_ref(const unsigned char *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xedb88320u : c >> 1;
  }
  return ~c;
}

/* A CPU context of precision prec on threads threads (0: the default), or
 * NULL, with a message, when it cannot be created. */
static inline coda_context test_context(coda_precision prec, int threads) {
  coda_context_options o = coda_context_default_options();
  o.precision = prec;
  o.num_threads = threads;
  coda_context c = NULL;
  if (coda_context_create(&o, &c) != CODA_OK)
    fprintf(stderr, "cannot create a context (precision %d, %d threads)\n", (int)prec, threads);
  return c;
}

/* Random tensors need the element accessors of base/internal.h. */
#ifdef CODA_INTERNAL_H
/* A rows x cols view with leading dimension ld (pad spare elements after
 * it, zeroed), filled row by row with scale * xorshift64_unit(s), rounded
 * to dtype. */
static inline coda_tensor rand_view(uint64_t *s, coda_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                                    int64_t pad, double scale) {
  coda_tensor t = {calloc((size_t)(rows * ld + pad), coda_dtype_size(dt)), dt, rows, cols, ld};
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) coda_store(&t, i, j, scale * xorshift64_unit(s));
  return t;
}
#endif
#endif
