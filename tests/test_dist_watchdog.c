/* The CPU communicator's watchdog: a rank that stops (SIGSTOP) before a
 * collective must not hang the job: its peer's collective fails after the
 * timeout (CODA_COMM_TIMEOUT) with a message naming the stopped rank, and
 * the launcher ends the job. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "dist/comm.h"
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char msg_path[256];

static int rank_main(coda_comm comm, void *user) {
  (void)user;
  coda_context_options co = coda_context_default_options();
  co.num_threads = 1;
  coda_context ctx;
  if (coda_context_create(&co, &ctx) != CODA_OK) return 1;
  double v[2] = {1.0, 2.0};
  /* one collective that everyone completes, then rank 1 stops */
  coda_status s = coda_comm_sum_host(ctx, comm, v, 2);
  if (!s && coda_comm_rank(comm) == 1) raise(SIGSTOP);
  if (!s) s = coda_comm_sum_host(ctx, comm, v, 2);
  if (s && coda_comm_rank(comm) == 0) {
    FILE *f = fopen(msg_path, "w");
    if (f) {
      fputs(coda_last_error(ctx), f);
      fclose(f);
    }
  }
  coda_context_destroy(ctx);
  return s ? 1 : 0;
}

int main(void) {
  snprintf(msg_path, sizeof msg_path, "test_dist_watchdog.tmp.%d", (int)getpid());
  setenv("CODA_COMM_TIMEOUT", "2", 1);
  alarm(120);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  char err[512];
  int rc = coda_dist_launch(2, CODA_COMM_CPU, rank_main, NULL, err, sizeof err);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  CHECK(rc != 0);
  CHECK_MSG(secs < 60.0, "the job took %.1f s", secs);
  char msg[600] = "";
  FILE *f = fopen(msg_path, "r");
  CHECK(f != NULL);
  if (f) {
    size_t n = fread(msg, 1, sizeof msg - 1, f);
    msg[n] = '\0';
    fclose(f);
  }
  unlink(msg_path);
  CHECK_MSG(strstr(msg, "no word from rank 1") != NULL, "'%s'", msg);
  printf("rank 0: %s\nlauncher: %s\n", msg, err);
  return CHECK_DONE();
}
