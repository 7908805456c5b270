/* splitmix64 (base/rng.h). */
#include "base/rng.h"

uint64_t coda_rng_skip(uint64_t s, uint64_t n) { return s + n * 0x9e3779b97f4a7c15ull; }

uint64_t coda_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t coda_rng_below(uint64_t *s, uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
  for (;;) {
    uint64_t r = coda_rng_next(s);
    if (r < limit) return r % n;
  }
}

double coda_rng_uniform(uint64_t *s) {
  return (double)(coda_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}
