/* The library's one non-cryptographic hash: the keys of the kernel caches
 * (in memory and on disk) and of the tuning files. */
#include "base/internal.h"

uint64_t coda_fnv1a64(const void *data, size_t n, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = 14695981039346656037ull ^ seed;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
