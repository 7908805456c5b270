/* The CPU communicator of joined ranks (coda_dist_join: processes that
 * another launcher started, here forked by the test with their own
 * environments, meeting over TCP on 127.0.0.1): the collectives of
 * dist_collectives.h (every size up to several 1 MiB chunks, in place and
 * not, f32 and f64) for 2 and 3 ranks, exactly equal to direct sums in rank
 * order; a rank that fails makes rank 0's collective fail naming it and its
 * status; a rank that dies makes the others fail naming it; bad arguments.
 * And the watchdog of joined GPU ranks (whose sockets carry no collectives;
 * run here with CPU ranks that run none): ranks ending at different times
 * with status 0 end cleanly; a rank killed, stopped or failing ends the
 * others (status 1) within seconds, with a message naming it. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "dist/comm.h"
#include "dist_collectives.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char msg_path[128];

/* A TCP port free now (the kernel's pick). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* rank 0 keeps the message of its failed collective */
static void keep_message(coda_context ctx) {
  FILE *f = fopen(msg_path, "w");
  if (f) {
    fputs(coda_last_error(ctx), f);
    fclose(f);
  }
}

static int one_fails(coda_comm c, void *user) {
  (void)user;
  if (coda_comm_rank(c) == 1) return 5;
  coda_context ctx;
  if (coda_context_create(NULL, &ctx)) return 1;
  double v = 1.0;
  coda_status s = coda_comm_sum_host(ctx, c, &v, 1);
  if (s && coda_comm_rank(c) == 0) keep_message(ctx);
  coda_context_destroy(ctx);
  return s ? 7 : 0;
}

static int one_dies(coda_comm c, void *user) {
  (void)user;
  coda_context ctx;
  if (coda_context_create(NULL, &ctx)) return 1;
  double v = 1.0;
  coda_status s = coda_comm_sum_host(ctx, c, &v, 1); /* everyone is here */
  if (!s && coda_comm_rank(c) == 2) raise(SIGKILL);
  if (!s) s = coda_comm_sum_host(ctx, c, &v, 1);
  if (s && coda_comm_rank(c) == 1) keep_message(ctx); /* told by rank 0 */
  coda_context_destroy(ctx);
  return s ? 7 : 0;
}

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}
/* watched jobs: rank r works 0.3 r s and ends well */
static int staggered(coda_comm c, void *user) {
  (void)user;
  nap(0.3 * coda_comm_rank(c));
  return 0;
}
/* rank 2 dies, rank 1 stops or fails; the others work 60 s (the watchdog
 * must end them long before) */
static int watched_kill(coda_comm c, void *user) {
  (void)user;
  if (coda_comm_rank(c) == 2) { nap(0.3); raise(SIGKILL); }
  nap(60.0);
  return 0;
}
static int watched_stop(coda_comm c, void *user) {
  (void)user;
  if (coda_comm_rank(c) == 1) { nap(0.3); raise(SIGSTOP); }
  nap(60.0);
  return 0;
}
static int watched_fail(coda_comm c, void *user) {
  (void)user;
  if (coda_comm_rank(c) == 1) { nap(0.3); return 5; }
  nap(60.0);
  return 0;
}

static int watch_mode;      /* job(): join with the watchdog */
static int stop_rank = -1;  /* job(): SIGKILL this rank once the others ended */

/* Starts n processes joining one job; statuses (exit codes, or 128 + the
 * signal) into st. Each rank's stderr goes to MSG_PATH.rR. */
static void job(int n, coda_rank_main fn, int *st) {
  const int port = free_port();
  CHECK(port > 0);
  pid_t pid[8];
  fflush(stdout);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      coda_dist_env env;
      memset(&env, 0, sizeof env);
      env.world_size = n;
      env.rank = r;
      env.local_rank = r;
      snprintf(env.master_addr, sizeof env.master_addr, "127.0.0.1");
      env.master_port = env.rendezvous_port = port;
      char err[512], path[160];
      snprintf(path, sizeof path, "%s.r%d", msg_path, r);
      if (watch_mode && !freopen(path, "w", stderr)) _exit(99);
      int rc = watch_mode ? coda_dist_join_watched(&env, CODA_COMM_CPU, 1, fn, NULL, err, sizeof err)
                          : coda_dist_join(&env, CODA_COMM_CPU, fn, NULL, err, sizeof err);
      if (err[0]) fprintf(stderr, "rank %d: %s\n", r, err);
      _exit(rc & 0xff);
    }
  }
  for (int r = 0; r < n; r++) {
    int s = 0;
    if (r == stop_rank) continue;
    waitpid(pid[r], &s, 0);
    st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  }
  for (int r = 0; r < n; r++) {
    int s = 0;
    if (r != stop_rank) continue;
    kill(pid[r], SIGKILL);
    waitpid(pid[r], &s, 0);
    st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  }
}

static void read_message(char *msg, size_t n) {
  msg[0] = '\0';
  FILE *f = fopen(msg_path, "r");
  if (f) {
    size_t k = fread(msg, 1, n - 1, f);
    msg[k] = '\0';
    fclose(f);
  }
  unlink(msg_path);
}

int main(void) {
  snprintf(msg_path, sizeof msg_path, "test_dist_join.tmp.%d", (int)getpid());
  setenv("CODA_COMM_TIMEOUT", "20", 1);
  alarm(300);
  int st[8];
  char msg[600];
  for (int n = 2; n <= 3; n++) {
    job(n, collectives, st);
    for (int r = 0; r < n; r++) CHECK_MSG(st[r] == 0, "%d ranks: rank %d status %d", n, r, st[r]);
    printf("%d joined ranks: collectives exact\n", n);
  }
  job(3, one_fails, st);
  CHECK_EQ_INT(st[1], 5);
  CHECK_EQ_INT(st[0], 7);
  CHECK_EQ_INT(st[2], 7);
  read_message(msg, sizeof msg);
  CHECK_MSG(strstr(msg, "rank 1 failed (exit status 5)") != NULL, "'%s'", msg);
  printf("a rank failing: %s\n", msg);
  job(3, one_dies, st);
  CHECK_EQ_INT(st[2], 128 + SIGKILL);
  CHECK_EQ_INT(st[0], 7);
  CHECK_EQ_INT(st[1], 7);
  read_message(msg, sizeof msg);
  CHECK_MSG(strstr(msg, "rank 1: rank 2 is gone") != NULL, "'%s'", msg);
  printf("a rank dying: %s\n", msg);
  /* the watchdog */
  watch_mode = 1;
  setenv("CODA_COMM_TIMEOUT", "5", 1); /* a loaded machine may starve a watchdog a moment */
  struct timespec t0, t1;
  job(3, staggered, st);
  for (int r = 0; r < 3; r++) CHECK_MSG(st[r] == 0, "watched, staggered: rank %d status %d", r, st[r]);
  struct { coda_rank_main fn; int culprit; const char *words; } cases[] = {
    {watched_kill, 2, "rank 2 is gone"},
    {watched_stop, 1, "rank 1 sent nothing for 5 s"},
    {watched_fail, 1, "rank 1 failed (exit status 5)"},
  };
  for (int k = 0; k < 3; k++) {
    stop_rank = cases[k].fn == watched_stop ? 1 : -1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    job(3, cases[k].fn, st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK_MSG(secs < 30.0, "%s: %.1f s", cases[k].words, secs);
    for (int r = 0; r < 3; r++) {
      if (r == cases[k].culprit) continue;
      CHECK_MSG(st[r] == 1, "%s: rank %d status %d", cases[k].words, r, st[r]);
      char path[160];
      snprintf(path, sizeof path, "%s.r%d", msg_path, r);
      FILE *f = fopen(path, "r");
      size_t got = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
      msg[got] = '\0';
      if (f) fclose(f);
      const char *want = r == 0 || cases[k].fn != watched_stop ? cases[k].words
                                                                : "rank 1 sent nothing for 5 s";
      CHECK_MSG(strstr(msg, want) != NULL, "rank %d: '%s' lacks '%s'", r, msg, want);
      if (r == 0) printf("watchdog, %.1f s: %s", secs, msg);
    }
  }
  stop_rank = -1;
  for (int r = 0; r < 3; r++) {
    char path[160];
    snprintf(path, sizeof path, "%s.r%d", msg_path, r);
    unlink(path);
  }
  /* bad arguments */
  coda_dist_env env;
  memset(&env, 0, sizeof env);
  char err[512];
  CHECK(coda_dist_join(&env, CODA_COMM_CPU, collectives, NULL, err, sizeof err) == 1);
  CHECK_MSG(strstr(err, "2 to") != NULL, "%s", err);
  env.world_size = 2;
  env.rank = 2;
  env.rendezvous_port = 1;
  CHECK(coda_dist_join(&env, CODA_COMM_CPU, collectives, NULL, err, sizeof err) == 1);
  env.rank = 0;
  CHECK(coda_dist_join(&env, CODA_COMM_CPU, NULL, NULL, err, sizeof err) == 1);
  CHECK(coda_dist_join(NULL, CODA_COMM_CPU, collectives, NULL, err, sizeof err) == 1);
  return CHECK_DONE();
}
