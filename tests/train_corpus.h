/* A synthetic English-like corpus for trainer tests: sentences of words
 * drawn from a fixed list with a seeded RNG, documents separated by "%"
 * lines (the fortune format). Learnable (spelling, spaces, punctuation)
 * and independent of any installed data. */
#ifndef CODA_TEST_TRAIN_CORPUS_H
#define CODA_TEST_TRAIN_CORPUS_H
#include "base/rng.h"
#include "io/io.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

static char *train_corpus(uint64_t seed, size_t want, size_t *len) {
  static const char *words[] = {
      "the", "a", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "with",
      "as", "his", "they", "be", "at", "one", "have", "this", "from", "by", "hot", "word",
      "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when",
      "up", "use", "your", "how", "said", "an", "each", "she", "which", "do", "their",
      "time", "if", "will", "way", "about", "many", "then", "them", "write", "would",
      "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has"};
  const size_t nw = sizeof words / sizeof words[0];
  char *t = malloc(want + 256);
  size_t n = 0;
  uint64_t r = seed;
  while (n < want) {
    int sentences = 1 + (int)coda_rng_below(&r, 3);
    for (int s = 0; s < sentences; s++) {
      int k = 3 + (int)coda_rng_below(&r, 8);
      for (int i = 0; i < k; i++) {
        const char *w = words[coda_rng_below(&r, nw)];
        size_t L = strlen(w);
        memcpy(t + n, w, L);
        if (i == 0) t[n] = (char)(t[n] - 'a' + 'A');
        n += L;
        t[n++] = i + 1 < k ? ' ' : '.';
      }
      t[n++] = s + 1 < sentences ? ' ' : '\n';
    }
    memcpy(t + n, "%\n", 2);
    n += 2;
  }
  *len = n;
  return t;
}
#endif
