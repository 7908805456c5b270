/* Communicator dispatch, the CPU backend of forked ranks (one shared-memory
 * segment), the fork launcher, and the joining of a job that another
 * launcher started (its environment and the rank's life; the TCP transport
 * is socket.c). See comm.h. */
#define _GNU_SOURCE
#include "coda_train.h"
#include "dist/comm.h"
#include "base/internal.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Bytes of each rank's slot: collectives move data through the segment in
 * chunks of this size. */
#define SLOT_BYTES (1u << 20)
#define HDR_BYTES 4096

/* The segment every rank maps (created by the launcher before forking). */
struct shared_hdr {
  atomic_int abort;    /* set by the launcher when a rank failed */
  atomic_int count;    /* barrier arrivals */
  atomic_int gen;      /* barrier generation */
  atomic_int id_ready; /* rank 0 wrote the NCCL id */
  unsigned char nccl_id[128];
  atomic_long arrivals[CODA_DIST_MAX_RANKS]; /* barriers each rank has entered */
};
typedef struct shared_hdr shared_hdr;
_Static_assert(sizeof(shared_hdr) <= HDR_BYTES, "shared header larger than its page");

/* How long a barrier waits for its peers before it fails (the knob
 * CODA_COMM_TIMEOUT overrides): long enough for rank 0 to write a large
 * checkpoint while the others wait, short enough that a stopped or hung
 * rank ends the job with a message instead of hanging it. */
#define COMM_TIMEOUT_DEFAULT_S 600.0

double coda_comm_timeout_s(coda_context ctx) {
  return ctx && ctx->knobs.comm_timeout_s > 0 ? ctx->knobs.comm_timeout_s : COMM_TIMEOUT_DEFAULT_S;
}

int coda_comm_rank(const coda_comm c) { return c ? c->rank : 0; }
int coda_comm_size(const coda_comm c) { return c ? c->size : 1; }
coda_comm_kind coda_comm_get_kind(const coda_comm c) { return c ? c->kind : CODA_COMM_CPU; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pause_briefly(int spins) {
  if (spins < 200) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, 50000};
  nanosleep(&ts, NULL);
}

/* Sense-reversing barrier; fails when the launcher flags an abort (another
 * rank died), so no rank waits forever on a peer that is gone. */
static coda_status barrier(coda_context ctx, coda_comm c) {
  shared_hdr *h = c->sh;
  int g = atomic_load(&h->gen);
  const long mine = atomic_fetch_add(&h->arrivals[c->rank], 1) + 1;
  if (atomic_fetch_add(&h->count, 1) == c->size - 1) {
    atomic_store(&h->count, 0);
    atomic_fetch_add(&h->gen, 1);
    return CODA_OK;
  }
  const double limit = coda_comm_timeout_s(ctx);
  const double t0 = now_s();
  for (int spins = 0; atomic_load(&h->gen) == g; spins++) {
    if (atomic_load(&h->abort))
      return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: another rank failed; stopping", c->rank);
    if (spins % 64 == 63 && now_s() - t0 > limit) {
      /* the ranks that have not reached this barrier */
      char who[256] = "";
      size_t at = 0;
      for (int r = 0; r < c->size && at + 8 < sizeof who; r++)
        if (atomic_load(&h->arrivals[r]) < mine)
          at += (size_t)snprintf(who + at, sizeof who - at, "%s%d", at ? ", " : "", r);
      atomic_store(&h->abort, 1); /* the others stop too */
      return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: no word from rank %s for %.0f s in a "
                       "collective (stopped, hung or dead); stopping the job (CODA_COMM_TIMEOUT "
                       "sets the limit in seconds)", c->rank, who[0] ? who : "?", limit);
    }
    pause_briefly(spins);
  }
  return CODA_OK;
}

static size_t dtype_bytes(coda_dtype dt) {
  switch (dt) {
  case CODA_F32: return 4;
  case CODA_F64: return 8;
  case CODA_BF16: case CODA_F16: return 2;
  case CODA_I32: return 4;
  default: return 0;
  }
}

static coda_status check_args(coda_context ctx, coda_comm c, const void *send, void *recv,
                              size_t count, coda_dtype dt, int reduce, const char *what) {
  if (!c) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: no communicator", what);
  if (count && (!send || !recv))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: NULL buffer", what);
  if (reduce ? (dt != CODA_F32 && dt != CODA_F64) : dtype_bytes(dt) == 0)
    return coda_fail(ctx, CODA_ERR_DTYPE, "%s: unsupported dtype %d", what, (int)dt);
  return CODA_OK;
}

/* Sums elements [lo, hi) of the slots' chunk into out (in rank order). */
static void sum_slots(coda_comm c, coda_dtype dt, size_t lo, size_t hi, void *out) {
  if (dt == CODA_F32) {
    for (size_t i = lo; i < hi; i++) {
      float a = ((const float *)c->slots)[i];
      for (int r = 1; r < c->size; r++) a += ((const float *)(c->slots + (size_t)r * SLOT_BYTES))[i];
      ((float *)out)[i - lo] = a;
    }
  } else {
    for (size_t i = lo; i < hi; i++) {
      double a = ((const double *)c->slots)[i];
      for (int r = 1; r < c->size; r++)
        a += ((const double *)(c->slots + (size_t)r * SLOT_BYTES))[i];
      ((double *)out)[i - lo] = a;
    }
  }
}

/* Reductions over the global index range [0, total): every rank puts its
 * chunk in its slot, then each rank sums the part it receives. own_lo/hi:
 * the range this rank receives (recv holds it from own_lo). */
static coda_status cpu_reduce(coda_context ctx, coda_comm c, const void *send, void *recv,
                              size_t total, size_t own_lo, size_t own_hi, coda_dtype dt) {
  const size_t es = dtype_bytes(dt), per = SLOT_BYTES / es;
  unsigned char *mine = c->slots + (size_t)c->rank * SLOT_BYTES;
  /* a separate buffer when recv overlaps send (in-place forms) */
  for (size_t a = 0; a < total; a += per) {
    size_t b = a + per < total ? a + per : total;
    memcpy(mine, (const unsigned char *)send + a * es, (b - a) * es);
    coda_status s = barrier(ctx, c);
    if (s) return s;
    size_t lo = a > own_lo ? a : own_lo, hi = b < own_hi ? b : own_hi;
    if (lo < hi) {
      /* recv may alias send: the chunk [a, b) of send is already in the
       * slot, and later chunks lie beyond hi, so writing [lo, hi) is safe */
      sum_slots(c, dt, lo - a, hi - a, (unsigned char *)recv + (lo - own_lo) * es);
    }
    s = barrier(ctx, c); /* everyone has read the slots */
    if (s) return s;
  }
  return CODA_OK;
}

coda_status coda_comm_reduce_scatter(coda_context ctx, coda_comm c, const void *send, void *recv,
                                     size_t count, coda_dtype dt) {
  coda_status s = check_args(ctx, c, send, recv, count, dt, 1, "reduce-scatter");
  if (s) return s;
  if (c->kind == CODA_COMM_NCCL)
    return coda_nccl_collective(ctx, c->nccl, CODA_NCCL_REDUCE_SCATTER, send, recv, count, dt);
  if (c->fd)
    return coda_sock_reduce(ctx, c, send, recv, count * (size_t)c->size, count * (size_t)c->rank,
                            count * (size_t)(c->rank + 1), dt);
  return cpu_reduce(ctx, c, send, recv, count * (size_t)c->size, count * (size_t)c->rank,
                    count * (size_t)(c->rank + 1), dt);
}

coda_status coda_comm_all_reduce(coda_context ctx, coda_comm c, const void *send, void *recv,
                                 size_t count, coda_dtype dt) {
  coda_status s = check_args(ctx, c, send, recv, count, dt, 1, "all-reduce");
  if (s) return s;
  if (c->kind == CODA_COMM_NCCL)
    return coda_nccl_collective(ctx, c->nccl, CODA_NCCL_ALL_REDUCE, send, recv, count, dt);
  if (c->fd) return coda_sock_reduce(ctx, c, send, recv, count, 0, count, dt);
  return cpu_reduce(ctx, c, send, recv, count, 0, count, dt);
}

coda_status coda_comm_all_gather(coda_context ctx, coda_comm c, const void *send, void *recv,
                                 size_t count, coda_dtype dt) {
  coda_status s = check_args(ctx, c, send, recv, count, dt, 0, "all-gather");
  if (s) return s;
  if (c->kind == CODA_COMM_NCCL)
    return coda_nccl_collective(ctx, c->nccl, CODA_NCCL_ALL_GATHER, send, recv, count, dt);
  if (c->fd) return coda_sock_all_gather(ctx, c, send, recv, count, dt);
  const size_t es = dtype_bytes(dt), per = SLOT_BYTES / es;
  unsigned char *mine = c->slots + (size_t)c->rank * SLOT_BYTES;
  for (size_t a = 0; a < count; a += per) {
    size_t n = (a + per < count ? per : count - a) * es;
    memcpy(mine, (const unsigned char *)send + a * es, n);
    s = barrier(ctx, c);
    if (s) return s;
    for (int r = 0; r < c->size; r++) /* in place: rank r's own part is rewritten with itself */
      memmove((unsigned char *)recv + ((size_t)r * count + a) * es,
              c->slots + (size_t)r * SLOT_BYTES, n);
    s = barrier(ctx, c);
    if (s) return s;
  }
  return CODA_OK;
}

coda_status coda_comm_sum_host(coda_context ctx, coda_comm c, double *v, int n) {
  if (!c || n < 0 || (n && !v))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "sum over ranks: bad arguments");
  if (c->kind == CODA_COMM_NCCL) return coda_nccl_sum_host(ctx, c->nccl, v, n);
  if (c->fd) return coda_sock_reduce(ctx, c, v, v, (size_t)n, 0, (size_t)n, CODA_F64);
  return cpu_reduce(ctx, c, v, v, (size_t)n, 0, (size_t)n, CODA_F64);
}

coda_status coda_comm_group_start(coda_context ctx, coda_comm c) {
  return c && c->kind == CODA_COMM_NCCL ? coda_nccl_group(ctx, c->nccl, 1) : CODA_OK;
}
coda_status coda_comm_group_end(coda_context ctx, coda_comm c) {
  return c && c->kind == CODA_COMM_NCCL ? coda_nccl_group(ctx, c->nccl, 0) : CODA_OK;
}
coda_status coda_comm_wait_compute(coda_context ctx, coda_comm c) {
  return c && c->kind == CODA_COMM_NCCL ? coda_nccl_order(ctx, c->nccl, 1) : CODA_OK;
}
coda_status coda_comm_join(coda_context ctx, coda_comm c) {
  return c && c->kind == CODA_COMM_NCCL ? coda_nccl_order(ctx, c->nccl, 0) : CODA_OK;
}

/* ------------------------------------------------------------ launcher */

/* The NCCL id travels from rank 0 through the segment. */
static int wait_id(shared_hdr *h, char *err, size_t errlen) {
  const double limit = 300.0, t0 = now_s(); /* seconds: rank 0 may be slow to load NCCL */
  for (int spins = 0; !atomic_load(&h->id_ready); spins++) {
    if (atomic_load(&h->abort)) {
      snprintf(err, errlen, "another rank failed before the communicator was set up");
      return -1;
    }
    if (now_s() - t0 > limit) {
      snprintf(err, errlen, "rank 0 did not publish the NCCL id within %.0f s", limit);
      return -1;
    }
    pause_briefly(spins + 200);
  }
  return 0;
}

static int rank_process(int rank, int size, coda_comm_kind kind, shared_hdr *sh,
                        coda_rank_main fn, void *user, pid_t launcher) {
  /* die with the launcher, so no rank outlives a killed run (and give up
   * if it is gone already) */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) return 1;
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast stays off */
  struct coda_comm_s c;
  memset(&c, 0, sizeof c);
  c.kind = kind;
  c.rank = rank;
  c.size = size;
  c.sh = sh;
  c.slots = (unsigned char *)sh + HDR_BYTES;
  char err[512] = "";
  if (kind == CODA_COMM_NCCL) {
    if (rank == 0) {
      if (coda_nccl_unique_id(sh->nccl_id, err, sizeof err)) goto fail;
      atomic_store(&sh->id_ready, 1);
    } else if (wait_id(sh, err, sizeof err)) {
      goto fail;
    }
    if (coda_nccl_create(rank, size, rank, sh->nccl_id, &c.nccl, err, sizeof err)) goto fail;
  }
  int rc = fn(&c, user);
  fflush(stdout);
  fflush(stderr);
  if (c.nccl) coda_nccl_destroy(c.nccl, rc != 0);
  return rc;
fail:
  fprintf(stderr, "rank %d: %s\n", rank, err);
  return 1;
}

static void describe(int rank, int st, char *err, size_t errlen) {
  if (WIFEXITED(st))
    snprintf(err, errlen, "rank %d failed (exit status %d); the other ranks were stopped", rank,
             WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    snprintf(err, errlen, "rank %d was killed by signal %d; the other ranks were stopped", rank,
             WTERMSIG(st));
  else
    snprintf(err, errlen, "rank %d ended abnormally", rank);
}

int coda_dist_launch(int ranks, coda_comm_kind kind, coda_rank_main fn, void *user, char *err,
                     size_t errlen) {
  char dummy[8];
  if (!err) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  if (ranks < 1 || ranks > CODA_DIST_MAX_RANKS || !fn ||
      (kind != CODA_COMM_CPU && kind != CODA_COMM_NCCL)) {
    snprintf(err, errlen, "ranks %d: need 1 to %d ranks, a rank function and a known backend",
             ranks, CODA_DIST_MAX_RANKS);
    return 1;
  }
  const size_t bytes = HDR_BYTES + (size_t)ranks * SLOT_BYTES;
  shared_hdr *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    snprintf(err, errlen, "cannot map %zu bytes of shared memory: %s", bytes, strerror(errno));
    return 1;
  }
  atomic_init(&sh->abort, 0);
  atomic_init(&sh->count, 0);
  atomic_init(&sh->gen, 0);
  atomic_init(&sh->id_ready, 0);
  for (int r = 0; r < CODA_DIST_MAX_RANKS; r++) atomic_init(&sh->arrivals[r], 0);
  pid_t pid[CODA_DIST_MAX_RANKS];
  int status[CODA_DIST_MAX_RANKS], done[CODA_DIST_MAX_RANKS];
  memset(done, 0, sizeof done);
  fflush(stdout);
  fflush(stderr);
  /* The launcher ignores Ctrl-C: the ranks get it too and stop together. */
  struct sigaction ign, old;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGINT, &ign, &old);
  int started = 0, fork_failed = 0, first_bad = -1;
  const pid_t self = getpid();
  for (; started < ranks; started++) {
    pid_t p = fork();
    if (p == 0) {
      sigaction(SIGINT, &old, NULL);
      _exit(rank_process(started, ranks, kind, sh, fn, user, self) & 0xff);
    }
    if (p < 0) {
      snprintf(err, errlen, "fork of rank %d failed: %s", started, strerror(errno));
      fork_failed = 1;
      break;
    }
    pid[started] = p;
  }
  /* After a failure the others get a grace period to stop by themselves
   * (they see the abort flag, or reach the same decision, e.g. a non-finite
   * loss), then SIGKILL: a rank blocked in a collective whose peer is gone
   * never returns. */
  const double grace = 10.0;
  double deadline = -1.0;
  if (fork_failed) {
    atomic_store(&sh->abort, 1);
    deadline = now_s() + grace;
  }
  for (int left = started; left > 0;) {
    int st;
    pid_t p = waitpid(-1, &st, deadline < 0 ? 0 : WNOHANG);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) break;
    if (p == 0) {
      if (now_s() > deadline)
        for (int r = 0; r < started; r++)
          if (!done[r]) kill(pid[r], SIGKILL);
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
      continue;
    }
    int r = 0;
    while (r < started && pid[r] != p) r++;
    if (r == started) continue;
    done[r] = 1;
    status[r] = st;
    left--;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && first_bad < 0) {
      first_bad = r;
      atomic_store(&sh->abort, 1);
      if (deadline < 0) deadline = now_s() + grace;
    }
  }
  sigaction(SIGINT, &old, NULL);
  int rc = fork_failed;
  if (!fork_failed && first_bad >= 0) {
    /* every rank stopping with the same status (3: a non-finite loss, which
     * all ranks see alike; 130: an interruption, which they agree on) is
     * that status; otherwise the first failure */
    int same = 1;
    for (int r = 0; r < started; r++) same &= done[r] && status[r] == status[first_bad];
    const int st = status[first_bad];
    rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    if (!same || (rc != 3 && rc != 130)) describe(first_bad, st, err, errlen);
    if (rc == 0) rc = 1;
  }
  munmap(sh, bytes);
  return rc;
}

int coda_nccl_device_count(void); /* nccl.c, or 0 from nccl_none.c */

/* In a child process: the parent must not create a CUDA context before it
 * forks the ranks. */
int coda_dist_gpu_count(void) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p == 0) {
    close(fd[0]);
    int n = coda_nccl_device_count();
    ssize_t w = write(fd[1], &n, sizeof n);
    _exit(w == (ssize_t)sizeof n ? 0 : 1);
  }
  close(fd[1]);
  if (p < 0) { close(fd[0]); return -1; }
  int n = -1;
  ssize_t got;
  do got = read(fd[0], &n, sizeof n); while (got < 0 && errno == EINTR);
  close(fd[0]);
  int st;
  while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
  return got == (ssize_t)sizeof n ? n : -1;
}

/* ------------------------------------------------- jobs of other launchers */

/* How long the rendezvous waits for every rank (CODA_COMM_TIMEOUT
 * overrides): time for a scheduler to start the processes of every host. */
#define RENDEZVOUS_DEFAULT_S 300.0

/* A decimal integer in [lo, hi] from variable `name`; -1 with err set. */
static int env_int(const char *name, const char *v, long lo, long hi, int *out, char *err,
                   size_t errlen) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    snprintf(err, errlen, "%s='%s': need an integer in [%ld, %ld]", name, v, lo, hi);
    return -1;
  }
  *out = (int)x;
  return 0;
}

int coda_dist_env_read(coda_dist_env *env, char *err, size_t errlen) {
  char dummy[8];
  if (!err) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  memset(env, 0, sizeof *env);
  coda_knobs k;
  coda_knobs_from_env(&k);
  const coda_launch_vars *l = &k.launch;
  const int torch = l->set & (CODA_LAUNCH_RANK | CODA_LAUNCH_WORLD_SIZE);
  const int master = (l->set & CODA_LAUNCH_MASTER_ADDR) && (l->set & CODA_LAUNCH_MASTER_PORT);
  const int slurm = !torch && master && (l->set & CODA_LAUNCH_SLURM_PROCID);
  const int max = CODA_DIST_MAX_JOINED_RANKS;
  if (torch) {
    if (!(l->set & CODA_LAUNCH_RANK) || !(l->set & CODA_LAUNCH_WORLD_SIZE)) {
      snprintf(err, errlen, "%s is set but %s is not: a launcher sets both (torchrun does)",
               l->set & CODA_LAUNCH_RANK ? "RANK" : "WORLD_SIZE",
               l->set & CODA_LAUNCH_RANK ? "WORLD_SIZE" : "RANK");
      return -1;
    }
    snprintf(env->source, sizeof env->source, "torchrun");
    if (env_int("WORLD_SIZE", l->world_size, 1, max, &env->world_size, err, errlen) ||
        env_int("RANK", l->rank, 0, max - 1, &env->rank, err, errlen))
      return -1;
    env->local_rank = env->rank;
    if ((l->set & CODA_LAUNCH_LOCAL_RANK) &&
        env_int("LOCAL_RANK", l->local_rank, 0, max - 1, &env->local_rank, err, errlen))
      return -1;
    if ((l->set & CODA_LAUNCH_LOCAL_WORLD_SIZE) &&
        env_int("LOCAL_WORLD_SIZE", l->local_world_size, 1, max, &env->local_world_size, err,
                errlen))
      return -1;
    /* no LOCAL_RANK: launchers number the ranks host by host */
    if (!(l->set & CODA_LAUNCH_LOCAL_RANK) && env->local_world_size)
      env->local_rank = env->rank % env->local_world_size;
  } else if (slurm) {
    if (!(l->set & CODA_LAUNCH_SLURM_NTASKS)) {
      snprintf(err, errlen, "SLURM_PROCID is set but SLURM_NTASKS is not");
      return -1;
    }
    snprintf(env->source, sizeof env->source, "slurm");
    if (env_int("SLURM_NTASKS", l->slurm_ntasks, 1, max, &env->world_size, err, errlen) ||
        env_int("SLURM_PROCID", l->slurm_procid, 0, max - 1, &env->rank, err, errlen))
      return -1;
    env->local_rank = env->rank;
    if ((l->set & CODA_LAUNCH_SLURM_LOCALID) &&
        env_int("SLURM_LOCALID", l->slurm_localid, 0, max - 1, &env->local_rank, err, errlen))
      return -1;
  } else {
    if (l->set & (CODA_LAUNCH_LOCAL_RANK | CODA_LAUNCH_LOCAL_WORLD_SIZE)) {
      snprintf(err, errlen, "%s is set but RANK and WORLD_SIZE are not: a launcher sets them all",
               l->set & CODA_LAUNCH_LOCAL_RANK ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE");
      return -1;
    }
    return 0; /* no launcher: one process, or coda's own fork launcher */
  }
  const char *rv = env->source[0] == 't' ? "RANK" : "SLURM_PROCID";
  const char *wv = env->source[0] == 't' ? "WORLD_SIZE" : "SLURM_NTASKS";
  if (env->rank >= env->world_size) {
    snprintf(err, errlen, "%s=%d with %s=%d: the rank must be below the world size", rv,
             env->rank, wv, env->world_size);
    return -1;
  }
  if (env->local_rank >= env->world_size) {
    snprintf(err, errlen, "%s=%d with %s=%d: the local rank must be below the world size",
             env->source[0] == 't' ? "LOCAL_RANK" : "SLURM_LOCALID", env->local_rank, wv,
             env->world_size);
    return -1;
  }
  if (env->local_world_size && (env->local_world_size > env->world_size ||
                                env->local_rank >= env->local_world_size)) {
    snprintf(err, errlen, "LOCAL_RANK=%d, LOCAL_WORLD_SIZE=%d, WORLD_SIZE=%d: need LOCAL_RANK < "
             "LOCAL_WORLD_SIZE <= WORLD_SIZE", env->local_rank, env->local_world_size,
             env->world_size);
    return -1;
  }
  if (env->world_size == 1) return 0; /* alone: nothing to meet */
  if (!master || !l->master_addr[0]) {
    snprintf(err, errlen, "%s=%d, %s=%d but %s: rank 0's address and port are needed for the "
             "rendezvous", rv, env->rank, wv, env->world_size,
             !(l->set & CODA_LAUNCH_MASTER_ADDR) || !l->master_addr[0] ? "no MASTER_ADDR"
                                                                       : "no MASTER_PORT");
    return -1;
  }
  snprintf(env->master_addr, sizeof env->master_addr, "%s", l->master_addr);
  if (env_int("MASTER_PORT", l->master_port, 1, 65535 - (l->agent_store ? 1 : 0),
              &env->master_port, err, errlen))
    return -1;
  env->rendezvous_port = env->master_port + (l->agent_store && torch ? 1 : 0);
  return 0;
}

int coda_dist_join(const coda_dist_env *env, coda_comm_kind kind, coda_rank_main fn, void *user,
                   char *err, size_t errlen) {
  return coda_dist_join_watched(env, kind, kind == CODA_COMM_NCCL, fn, user, err, errlen);
}

int coda_dist_join_watched(const coda_dist_env *env, coda_comm_kind kind, int watch,
                           coda_rank_main fn, void *user, char *err, size_t errlen) {
  char dummy[8];
  if (!err) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  if (!env || env->world_size < 2 || env->world_size > CODA_DIST_MAX_JOINED_RANKS ||
      env->rank < 0 || env->rank >= env->world_size || !fn ||
      (kind != CODA_COMM_CPU && kind != CODA_COMM_NCCL) || env->rendezvous_port < 1 ||
      env->rendezvous_port > 65535) {
    snprintf(err, errlen, "joining a job needs 2 to %d ranks, a rank below the world size, a "
             "port, a rank function and a known backend", CODA_DIST_MAX_JOINED_RANKS);
    return 1;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast stays off */
  coda_knobs k;
  coda_knobs_from_env(&k);
  const double limit = k.comm_timeout_s > 0 ? k.comm_timeout_s : RENDEZVOUS_DEFAULT_S;
  struct coda_comm_s c;
  memset(&c, 0, sizeof c);
  c.kind = kind;
  c.rank = env->rank;
  c.size = env->world_size;
  unsigned char id[128];
  memset(id, 0, sizeof id);
  char e[512] = "";
  if (kind == CODA_COMM_NCCL && c.rank == 0 && coda_nccl_unique_id(id, e, sizeof e)) {
    /* the others learn it at the rendezvous's end (they time out) */
    snprintf(err, errlen, "rank 0: %s", e);
    return 1;
  }
  if (coda_sock_rendezvous(env, &c, kind == CODA_COMM_NCCL ? id : NULL, limit, err, errlen))
    return 1;
  /* the watchdog runs before NCCL's set-up, which waits for every rank */
  if (watch && coda_sock_watch_start(&c, k.comm_timeout_s > 0 ? k.comm_timeout_s :
                                                   coda_comm_timeout_s(NULL), err, errlen)) {
    coda_sock_notify_failure(&c, 1);
    coda_sock_close(&c);
    return 1;
  }
  int rc;
  if (kind == CODA_COMM_NCCL &&
      coda_nccl_create(c.rank, c.size, env->local_rank, id, &c.nccl, e, sizeof e)) {
    snprintf(err, errlen, "rank %d: %s", c.rank, e);
    rc = 1;
  } else {
    rc = fn(&c, user);
  }
  fflush(stdout);
  fflush(stderr);
  if (c.watch) coda_sock_watch_stop(&c, rc);
  else if (rc) coda_sock_notify_failure(&c, rc);
  if (c.nccl) coda_nccl_destroy(c.nccl, rc != 0);
  coda_sock_close(&c);
  return rc;
}
