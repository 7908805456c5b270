/* The CPU communicator's collectives checked on one rank against direct
 * sums (test_dist_comm.c: forked ranks; test_dist_join.c: joined ranks over
 * TCP). Each rank regenerates every rank's data from a seed, so it computes
 * the reference sum itself (in rank order, the order the communicator
 * promises, hence exact equality). Returns 0 or failure bits. */
#ifndef CODA_TEST_DIST_COLLECTIVES_H
#define CODA_TEST_DIST_COLLECTIVES_H

#include "coda_train.h"
#include "dist/comm.h"
#include "base/rng.h"
#include "io/io.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float rnd_f(uint64_t *s) { return (float)(coda_rng_uniform(s) * 2.0 - 1.0); }

static void fill(float *x, size_t n, int rank, int salt) {
  uint64_t s = 1000003ull * (uint64_t)(rank + 1) + (uint64_t)salt;
  for (size_t i = 0; i < n; i++) x[i] = rnd_f(&s);
}

/* Sizes per rank: one element, odd, and more than one 1 MiB slot. */
static const size_t sizes[] = {1, 7, 1000, 300001};

static int collectives(coda_comm c, void *user) {
  (void)user;
  const int N = coda_comm_size(c), r = coda_comm_rank(c);
  int bad = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    const size_t cnt = sizes[si], tot = cnt * (size_t)N;
    float *send = malloc(tot * sizeof *send), *other = malloc(tot * sizeof *other);
    float *ref = calloc(tot, sizeof *ref), *recv = malloc(tot * sizeof *recv);
    for (int q = 0; q < N; q++) { /* the direct sum, rank by rank */
      fill(other, tot, q, (int)si);
      for (size_t i = 0; i < tot; i++) ref[i] = q == 0 ? other[i] : ref[i] + other[i];
    }
    fill(send, tot, r, (int)si);
    /* reduce-scatter, separate and in place */
    if (coda_comm_reduce_scatter(NULL, c, send, recv, cnt, CODA_F32)) bad |= 1;
    for (size_t i = 0; i < cnt; i++) bad |= (recv[i] != ref[(size_t)r * cnt + i]) << 1;
    if (coda_comm_reduce_scatter(NULL, c, send, send + (size_t)r * cnt, cnt, CODA_F32)) bad |= 1;
    for (size_t i = 0; i < cnt; i++) bad |= (send[(size_t)r * cnt + i] != ref[(size_t)r * cnt + i]) << 2;
    /* all-gather of each rank's slice of the sum: the whole sum */
    memset(recv, 0, tot * sizeof *recv);
    if (coda_comm_all_gather(NULL, c, send + (size_t)r * cnt, recv, cnt, CODA_F32)) bad |= 1;
    for (size_t i = 0; i < tot; i++) bad |= (recv[i] != ref[i]) << 3;
    /* in place, bf16-sized elements (bytes are bytes) */
    fill(other, tot, 99, 0);
    memcpy(recv, other, tot * sizeof *recv);
    for (size_t i = 0; i < cnt; i++) recv[(size_t)r * cnt + i] = ref[(size_t)r * cnt + i];
    if (coda_comm_all_gather(NULL, c, recv + (size_t)r * cnt, recv, cnt, CODA_F32)) bad |= 1;
    for (size_t i = 0; i < tot; i++) bad |= (recv[i] != ref[i]) << 4;
    /* all-reduce in place */
    fill(send, tot, r, (int)si);
    if (coda_comm_all_reduce(NULL, c, send, send, tot, CODA_F32)) bad |= 1;
    for (size_t i = 0; i < tot; i++) bad |= (send[i] != ref[i]) << 5;
    free(send); free(other); free(ref); free(recv);
  }
  /* doubles: host sum and f64 all-reduce */
  double v[3] = {r + 0.5, 1.0, -2.0 * r};
  if (coda_comm_sum_host(NULL, c, v, 3)) bad |= 1;
  double e0 = 0.0, e2 = 0.0;
  for (int q = 0; q < N; q++) { e0 += q + 0.5; e2 += -2.0 * q; }
  bad |= (v[0] != e0 || v[1] != N || v[2] != e2) << 6;
  /* bad arguments fail cleanly */
  if (coda_comm_all_reduce(NULL, c, v, v, 1, CODA_I32) != CODA_ERR_DTYPE) bad |= 1 << 7;
  if (coda_comm_reduce_scatter(NULL, c, NULL, v, 1, CODA_F32) != CODA_ERR_INVALID_ARGUMENT)
    bad |= 1 << 7;
  if (bad) fprintf(stderr, "rank %d of %d: failure bits %#x\n", r, N, bad);
  return bad ? 1 : 0;
}

#endif
