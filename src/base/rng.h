/* splitmix64, the library's seeded stream: the data order, weight
 * initialization, sampling and temporary file names draw from it. */
#ifndef CODA_RNG_H
#define CODA_RNG_H

#include <stdint.h>

/* splitmix64: the whole state is one 64-bit word, so it is stored in a
 * checkpoint as a decimal string and resuming draws the same numbers. */
uint64_t coda_rng_next(uint64_t *state);
/* The state after n draws from state s (the stream is a counter: draw k
 * of s is the next draw of coda_rng_skip(s, k)), so a long stream can be
 * drawn in parallel pieces with the same numbers. */
uint64_t coda_rng_skip(uint64_t s, uint64_t n);
/* Uniform in [0, n) (n > 0) by rejection, so there is no modulo bias. */
uint64_t coda_rng_below(uint64_t *state, uint64_t n);
/* Uniform in [0, 1) with 53 random bits. */
double coda_rng_uniform(uint64_t *state);

#endif
