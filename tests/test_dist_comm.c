/* The CPU communicator (src/dist): reduce-scatter, all-gather, all-reduce
 * and the host sum against direct sums of the same random data, for 1, 2
 * and 3 forked ranks, sizes from 1 element to several shared-memory chunks,
 * in-place and separate buffers; and the launcher's handling of failing
 * ranks and bad arguments. Each rank regenerates every rank's data from a
 * seed, so it computes the reference sum itself (in rank order, the order
 * the communicator promises, hence exact equality). */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "dist/comm.h"
#include "dist_collectives.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* rank 1 fails while rank 0 waits in a collective: the launcher must stop
 * rank 0 and report rank 1 */
static int one_fails(coda_comm c, void *user) {
  (void)user;
  if (coda_comm_rank(c) == 1) return 5;
  double v = 1.0;
  return coda_comm_sum_host(NULL, c, &v, 1) == CODA_OK ? 0 : 7;
}
static int one_crashes(coda_comm c, void *user) {
  (void)user;
  if (coda_comm_rank(c) == 0) raise(SIGKILL);
  double v = 1.0;
  return coda_comm_sum_host(NULL, c, &v, 1) == CODA_OK ? 0 : 7;
}
static int all_three(coda_comm c, void *user) { (void)c; (void)user; return 3; }

int main(void) {
  char err[512];
  for (int n = 1; n <= 3; n++) {
    int rc = coda_dist_launch(n, CODA_COMM_CPU, collectives, NULL, err, sizeof err);
    CHECK_MSG(rc == 0, "%d ranks: status %d: %s", n, rc, err);
  }
  int rc = coda_dist_launch(2, CODA_COMM_CPU, one_fails, NULL, err, sizeof err);
  CHECK_EQ_INT(rc, 5);
  CHECK_MSG(strstr(err, "rank 1") && strstr(err, "status 5"), "%s", err);
  rc = coda_dist_launch(3, CODA_COMM_CPU, one_crashes, NULL, err, sizeof err);
  CHECK(rc != 0);
  CHECK_MSG(strstr(err, "rank 0") && strstr(err, "signal"), "%s", err);
  /* every rank stopping alike (a non-finite loss) keeps that status */
  rc = coda_dist_launch(2, CODA_COMM_CPU, all_three, NULL, err, sizeof err);
  CHECK_EQ_INT(rc, 3);
  /* bad arguments */
  CHECK(coda_dist_launch(0, CODA_COMM_CPU, collectives, NULL, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "ranks 0"), "%s", err);
  CHECK(coda_dist_launch(CODA_DIST_MAX_RANKS + 1, CODA_COMM_CPU, collectives, NULL, err,
                         sizeof err) != 0);
  CHECK(coda_dist_launch(2, CODA_COMM_CPU, NULL, NULL, err, sizeof err) != 0);
  CHECK(coda_dist_launch(2, (coda_comm_kind)7, collectives, NULL, err, sizeof err) != 0);
#ifndef CODA_HAVE_CUDA
  /* without CUDA the NCCL backend says so */
  rc = coda_dist_launch(2, CODA_COMM_NCCL, collectives, NULL, err, sizeof err);
  CHECK(rc != 0);
#endif
  return CHECK_DONE();
}
