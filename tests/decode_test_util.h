/* What the decoder tests share (tests/test_decode_plans.c,
 * tests/gpu/test_decode_gpu.c): a test model with bf16-exact weights, so
 * the CPU and the bf16 paths start from the same values, random prompts,
 * and the argmax of a logit row. Include after check.h. */
#ifndef CODA_TESTS_DECODE_TEST_UTIL_H
#define CODA_TESTS_DECODE_TEST_UTIL_H

#include "coda_decode.h"
#include "base/rng.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* f rounded to the nearest bf16 (ties to even), as a float. */
static inline float round_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* A reference-engine model of config c, initialized from seed, with larger
 * weights than the initialization (logits that differ clearly), each
 * rounded to bf16. NULL, with a failed check, if it cannot be made. */
static inline coda_model *make_model(coda_context ctx, const coda_model_config *c, uint64_t seed) {
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (!m) return NULL;
  coda_model_init(m, seed);
  float *w = coda_model_weights(m);
  uint64_t r = seed * 3 + 1;
  for (size_t i = 0; i < coda_model_size(m); i++)
    w[i] = round_bf16(w[i] + (float)(0.2 * (coda_rng_uniform(&r) - 0.5)));
  return m;
}

/* The largest of V logits (the lowest id on ties). */
static inline int argmax(const float *l, int64_t V) {
  int64_t b = 0;
  for (int64_t v = 1; v < V; v++) b = l[v] > l[b] ? v : b;
  return (int)b;
}

/* B prompts of plen[b] random tokens below V from seed; free_prompts frees. */
static inline int32_t **random_prompts(int B, const int *plen, int64_t V, uint64_t seed) {
  int32_t **seq = calloc((size_t)B, sizeof *seq);
  for (int b = 0; seq && b < B; b++) {
    seq[b] = malloc((size_t)plen[b] * 4);
    for (int i = 0; seq[b] && i < plen[b]; i++)
      seq[b][i] = (int32_t)coda_rng_below(&seed, (uint64_t)V);
  }
  return seq;
}

static inline void free_prompts(int32_t **seq, int B) {
  for (int b = 0; seq && b < B; b++) free(seq[b]);
  free(seq);
}

#endif
