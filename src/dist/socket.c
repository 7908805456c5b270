/* The TCP transport of the CPU communicator for ranks that another
 * launcher started (torchrun, srun), and the rendezvous of every joined
 * job (both kinds). See comm.h and coda_dist_join in coda_train.h.
 *
 * Rendezvous: rank 0 listens on the rendezvous port; every other rank
 * connects (retrying until the limit), says who it is (rank, world size,
 * communicator kind), and waits; when all have come, rank 0 answers each
 * with the NCCL unique id (zeros for the CPU kind). A disagreement (two
 * processes with one rank, a different world size or kind) is refused
 * with a reason every connected rank prints.
 *
 * Collectives (CPU kind): a star through rank 0. Reductions go in chunks:
 * every rank sends its chunk, rank 0 adds them in rank order (x0 + x1 + ...
 * in the element type, as the shared-memory transport does, so forked and
 * joined ranks give the same bits) and sends each rank the part it
 * receives. Every message carries the collective's number, so ranks that
 * run different sequences of collectives fail instead of mixing data.
 *
 * Failures: all I/O polls with a limit (CODA_COMM_TIMEOUT; no progress for
 * that long is a failure). Rank 0 tells the others which rank failed and
 * why (an ABORT message) before it gives up; the others tell rank 0 when
 * they stop with an error. Byte order: every host of a job is taken to be
 * little-endian (x86-64, AArch64). */
#define _GNU_SOURCE
#include "dist/comm.h"
#include "base/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG_MAGIC 0x41444f43u /* "CODA" */
#define CHUNK_BYTES (1u << 20)
#define NCCL_ID_BYTES 128
/* How long a failing rank spends telling its peers (and letting them read
 * it) before it gives up on them. */
#define NOTIFY_S 2.0
/* A connection that says nothing within this long is not a coda rank. */
#define HELLO_S 10.0

enum { M_HELLO = 1, M_WELCOME = 2, M_REFUSE = 3, M_DATA = 4, M_ABORT = 5, M_BEAT = 6, M_BYE = 7 };
/* Why a job stops (ABORT messages) */
enum { WHY_FAILED = 1, WHY_GONE = 2, WHY_SILENT = 3, WHY_MISMATCH = 4 };
/* io_all results */
enum { IO_OK = 0, IO_GONE = -1, IO_SILENT = -2, IO_ERROR = -3 };

typedef struct msg {
  uint32_t magic, type;
  int32_t rank; /* the sender; ABORT: the rank at fault */
  int32_t a, b; /* HELLO: world size, kind; ABORT: why, status or seconds */
  uint32_t pad;
  int64_t seq;    /* DATA: the collective's number */
  uint64_t bytes; /* payload that follows */
} msg;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* 1: fd ready for ev, 0: nothing within limit_s, -1: poll failed. */
static int wait_fd(int fd, short ev, double limit_s) {
  const double end = now_s() + limit_s;
  for (;;) {
    double left = end - now_s();
    if (left < 0) left = 0;
    struct pollfd p = {fd, ev, 0};
    int ms = left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
    int r = poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r == 0) return now_s() >= end ? 0 : 1; /* a rounding short of the end: look again */
    if (errno != EINTR) return -1;
  }
}

/* n bytes in or out; fails when the peer makes no progress for limit_s. */
static int io_all(int fd, void *p, size_t n, int out, double limit_s) {
  unsigned char *b = p;
  size_t done = 0;
  while (done < n) {
    int w = wait_fd(fd, out ? POLLOUT : POLLIN, limit_s);
    if (w == 0) return IO_SILENT;
    if (w < 0) return IO_ERROR;
    ssize_t k = out ? send(fd, b + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                    : recv(fd, b + done, n - done, MSG_DONTWAIT);
    if (k > 0) {
      done += (size_t)k;
      continue;
    }
    if (k == 0) return IO_GONE;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT)
      return IO_GONE;
    return IO_ERROR;
  }
  return IO_OK;
}

static int send_msg(int fd, uint32_t type, int rank, int a, int b, int64_t seq, const void *data,
                    size_t bytes, double limit_s) {
  msg m;
  memset(&m, 0, sizeof m);
  m.magic = MSG_MAGIC;
  m.type = type;
  m.rank = rank;
  m.a = a;
  m.b = b;
  m.seq = seq;
  m.bytes = bytes;
  int r = io_all(fd, &m, sizeof m, 1, limit_s);
  if (!r && bytes) r = io_all(fd, (void *)data, bytes, 1, limit_s);
  return r;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* small sums each step */
}

/* ------------------------------------------------------------ failures */

static const char *TIMEOUT_HINT = "CODA_COMM_TIMEOUT sets the limit in seconds";

/* The words of an ABORT: "rank R failed (status S)" etc. */
static void describe_abort(const msg *m, char *out, size_t n) {
  switch (m->a) {
  case WHY_FAILED:
    snprintf(out, n, "rank %d failed (exit status %d)", m->rank, m->b);
    break;
  case WHY_GONE:
    snprintf(out, n, "rank %d is gone (its connection closed: it exited, failed or was killed)",
             m->rank);
    break;
  case WHY_SILENT:
    snprintf(out, n, "rank %d sent nothing for %d s (stopped, hung or dead)",
             m->rank, m->b);
    break;
  default:
    snprintf(out, n, "rank %d ran a different collective (the ranks' options or programs differ)",
             m->rank);
  }
}

/* Rank 0: tells every rank but `who` why the job stops, lets them read it,
 * and closes their connections. */
static void root_abort(struct coda_comm_s *c, int who, int why, int detail) {
  c->broken = 1;
  for (int r = 1; r < c->size; r++) {
    if (c->fd[r] < 0) continue;
    /* the rank at fault hears it too when it is there to hear (a mismatch) */
    if (r != who || why == WHY_MISMATCH)
      send_msg(c->fd[r], M_ABORT, who, why, detail, c->seq, NULL, 0, NOTIFY_S);
    shutdown(c->fd[r], SHUT_WR);
  }
  /* Drain: a rank still sending its chunk finishes, then reads the ABORT
   * (closing a connection with unread data would reset it, and the ABORT
   * with it). */
  const double end = now_s() + NOTIFY_S;
  unsigned char sink[4096];
  for (int open = 1; open && now_s() < end;) {
    open = 0;
    for (int r = 1; r < c->size; r++) {
      if (c->fd[r] < 0) continue;
      ssize_t k = recv(c->fd[r], sink, sizeof sink, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        close_fd(&c->fd[r]);
      else
        open = 1;
    }
    if (open) sleep_s(0.005);
  }
  for (int r = 1; r < c->size; r++) close_fd(&c->fd[r]);
}

/* An I/O failure with peer p (r: IO_*). Rank 0 tells the others. */
static coda_status peer_fail(coda_context ctx, struct coda_comm_s *c, int p, int r,
                             double limit_s) {
  const int e = errno; /* of the failed call, before the notices below */
  c->broken = 1;
  if (c->rank == 0)
    root_abort(c, p, r == IO_SILENT ? WHY_SILENT : WHY_GONE, (int)limit_s);
  if (r == IO_SILENT)
    return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: no word from rank %d for %.0f s in a "
                     "collective (stopped, hung or dead); stopping the job (%s)", c->rank, p,
                     limit_s, TIMEOUT_HINT);
  if (r == IO_GONE)
    return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: rank %d is gone (its connection closed: it "
                     "exited, failed or was killed); stopping the job", c->rank, p);
  return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: the connection to rank %d failed: %s; "
                   "stopping the job", c->rank, p, strerror(e));
}

static coda_status aborted(coda_context ctx, struct coda_comm_s *c, const msg *m) {
  char why[256];
  describe_abort(m, why, sizeof why);
  c->broken = 1;
  if (c->rank == 0) root_abort(c, m->rank, m->a, m->b); /* a rank told rank 0 */
  return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: %s; stopping the job", c->rank, why);
}

/* A non-root rank lost rank 0 while sending: rank 0 may have left an ABORT
 * saying why. */
static coda_status lost_root(coda_context ctx, struct coda_comm_s *c, int r, double limit_s) {
  msg m;
  if (r == IO_GONE && io_all(c->fd[0], &m, sizeof m, 0, 0.5) == IO_OK && m.magic == MSG_MAGIC &&
      m.type == M_ABORT)
    return aborted(ctx, c, &m);
  return peer_fail(ctx, c, 0, r, limit_s);
}

/* How long a rank waits for rank 0: longer than rank 0 waits for a rank,
 * so that when a rank stops answering, rank 0's verdict naming it arrives
 * before the others give up on rank 0 itself. */
static double wait_for_root_s(double limit_s) { return limit_s + 2.0 * NOTIFY_S + 1.0; }

/* The next message from peer p must be DATA of collective c->seq with
 * `bytes` bytes; its payload goes to dst. */
static coda_status recv_data(coda_context ctx, struct coda_comm_s *c, int p, void *dst,
                             size_t bytes, double limit_s) {
  const int fd = c->fd[c->rank == 0 ? p : 0];
  if (c->rank) limit_s = wait_for_root_s(limit_s);
  msg m;
  int r = io_all(fd, &m, sizeof m, 0, limit_s);
  if (r) return peer_fail(ctx, c, p, r, limit_s);
  if (m.magic != MSG_MAGIC) {
    if (c->rank == 0) root_abort(c, p, WHY_MISMATCH, 0);
    c->broken = 1;
    return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: rank %d sent something that is not a coda "
                     "message; stopping the job", c->rank, p);
  }
  if (m.type == M_ABORT) return aborted(ctx, c, &m);
  if (m.type != M_DATA || m.seq != c->seq || m.bytes != bytes) {
    if (c->rank == 0) root_abort(c, p, WHY_MISMATCH, 0);
    c->broken = 1;
    return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: rank %d sent %llu bytes for collective "
                     "%lld where this rank expects %zu bytes for collective %lld: the ranks run "
                     "different steps (their options differ?); stopping the job", c->rank, p,
                     (unsigned long long)m.bytes, (long long)m.seq, bytes, (long long)c->seq);
  }
  r = io_all(fd, dst, bytes, 0, limit_s);
  return r ? peer_fail(ctx, c, p, r, limit_s) : CODA_OK;
}

static coda_status send_data(coda_context ctx, struct coda_comm_s *c, int p, const void *src,
                             size_t bytes, double limit_s) {
  const int fd = c->fd[c->rank == 0 ? p : 0];
  if (c->rank) limit_s = wait_for_root_s(limit_s);
  int r = send_msg(fd, M_DATA, c->rank, 0, 0, c->seq, src, bytes, limit_s);
  if (!r) return CODA_OK;
  return c->rank == 0 ? peer_fail(ctx, c, p, r, limit_s) : lost_root(ctx, c, r, limit_s);
}

static coda_status check_usable(coda_context ctx, struct coda_comm_s *c) {
  if (c->watched)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "rank %d: this job's connections carry no "
                     "CPU collectives", c->rank);
  if (c->broken)
    return coda_fail(ctx, CODA_ERR_BACKEND, "rank %d: the job stopped after an earlier failure "
                     "of a collective", c->rank);
  c->seq++;
  return CODA_OK;
}

/* ------------------------------------------------------------ collectives */

static size_t elem_bytes(coda_dtype dt) {
  switch (dt) {
  case CODA_F32: case CODA_I32: return 4;
  case CODA_F64: return 8;
  case CODA_BF16: case CODA_F16: return 2;
  default: return 0;
  }
}

static void add_into(void *acc, const void *x, size_t n, coda_dtype dt) {
  if (dt == CODA_F32) {
    float *a = acc;
    const float *b = x;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
  } else {
    double *a = acc;
    const double *b = x;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
  }
}

coda_status coda_sock_reduce(coda_context ctx, struct coda_comm_s *c, const void *send, void *recv,
                             size_t total, size_t own_lo, size_t own_hi, coda_dtype dt) {
  coda_status s = check_usable(ctx, c);
  if (s) return s;
  const double limit = coda_comm_timeout_s(ctx);
  const size_t es = elem_bytes(dt), per = CHUNK_BYTES / es;
  /* the whole range (all-reduce, host sums) or slices of total / size */
  const int scatter = own_hi - own_lo != total;
  const size_t slice = total / (size_t)c->size;
  for (size_t a = 0; a < total; a += per) {
    const size_t b = a + per < total ? a + per : total;
    if (c->rank == 0) {
      unsigned char *acc = c->buf, *in = c->buf + CHUNK_BYTES;
      memcpy(acc, (const unsigned char *)send + a * es, (b - a) * es);
      for (int r = 1; r < c->size; r++) {
        s = recv_data(ctx, c, r, in, (b - a) * es, limit);
        if (s) return s;
        add_into(acc, in, b - a, dt);
      }
      for (int r = 0; r < c->size; r++) {
        const size_t rlo = scatter ? (size_t)r * slice : 0, rhi = scatter ? rlo + slice : total;
        const size_t lo = a > rlo ? a : rlo, hi = b < rhi ? b : rhi;
        if (lo >= hi) continue;
        /* recv may alias send: chunk [a, b) of send is in acc already */
        if (r == 0) memcpy((unsigned char *)recv + (lo - own_lo) * es, acc + (lo - a) * es,
                           (hi - lo) * es);
        else if ((s = send_data(ctx, c, r, acc + (lo - a) * es, (hi - lo) * es, limit)))
          return s;
      }
    } else {
      s = send_data(ctx, c, 0, (const unsigned char *)send + a * es, (b - a) * es, limit);
      if (s) return s;
      const size_t lo = a > own_lo ? a : own_lo, hi = b < own_hi ? b : own_hi;
      if (lo < hi) {
        s = recv_data(ctx, c, 0, (unsigned char *)recv + (lo - own_lo) * es, (hi - lo) * es,
                      limit);
        if (s) return s;
      }
    }
  }
  return CODA_OK;
}

coda_status coda_sock_all_gather(coda_context ctx, struct coda_comm_s *c, const void *send,
                                 void *recv, size_t count, coda_dtype dt) {
  coda_status s = check_usable(ctx, c);
  if (s) return s;
  const double limit = coda_comm_timeout_s(ctx);
  const size_t part = count * elem_bytes(dt);
  unsigned char *out = recv;
  if (c->rank == 0) {
    memmove(out, send, part); /* in place: rank 0's part is itself */
    for (int r = 1; r < c->size; r++)
      if ((s = recv_data(ctx, c, r, out + (size_t)r * part, part, limit))) return s;
    for (int r = 1; r < c->size; r++)
      if ((s = send_data(ctx, c, r, out, (size_t)c->size * part, limit))) return s;
    return CODA_OK;
  }
  /* in place (send == recv + rank·part): sent before it is rewritten with
   * the same bytes */
  s = send_data(ctx, c, 0, send, part, limit);
  return s ? s : recv_data(ctx, c, 0, out, (size_t)c->size * part, limit);
}

void coda_sock_notify_failure(struct coda_comm_s *c, int status) {
  if (!c->fd || c->broken) return; /* a broken job's peers know already */
  c->broken = 1;
  if (c->rank == 0) {
    root_abort(c, 0, WHY_FAILED, status);
  } else if (c->fd[0] >= 0) {
    send_msg(c->fd[0], M_ABORT, c->rank, WHY_FAILED, status, c->seq, NULL, 0, NOTIFY_S);
    shutdown(c->fd[0], SHUT_WR);
  }
}

void coda_sock_close(struct coda_comm_s *c) {
  if (c->fd)
    for (int r = 0; r < c->size; r++) close_fd(&c->fd[r]);
  free(c->fd);
  free(c->buf);
  c->fd = NULL;
  c->buf = NULL;
}

/* ------------------------------------------------------------ rendezvous */

static int listen_on(int port, char *err, size_t errlen) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int g = getaddrinfo(NULL, ps, &hints, &res);
  if (g) {
    snprintf(err, errlen, "rank 0: cannot listen on port %d: %s", port, gai_strerror(g));
    return -1;
  }
  int fd = -1, e = 0;
  /* IPv6 first where it exists: with IPV6_V6ONLY off it takes IPv4 too */
  for (int pass = 0; pass < 2 && fd < 0; pass++)
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      if ((ai->ai_family == AF_INET6) != (pass == 0)) continue;
      fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) { e = errno; continue; }
      int one = 1, zero = 0;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 256) != 0) {
        e = errno;
        close(fd);
        fd = -1;
      }
    }
  freeaddrinfo(res);
  if (fd < 0)
    snprintf(err, errlen, "rank 0: cannot listen on port %d for the rendezvous: %s%s", port,
             strerror(e), e == EADDRINUSE ? " (another job or program holds it; choose another "
             "MASTER_PORT)" : "");
  return fd;
}

/* Rank 0 refuses the job: every connected rank gets the reason. */
static int refuse_all(struct coda_comm_s *c, int extra_fd, const char *why, char *err,
                      size_t errlen) {
  for (int r = 1; r < c->size; r++)
    if (c->fd[r] >= 0) send_msg(c->fd[r], M_REFUSE, 0, 0, 0, 0, why, strlen(why), NOTIFY_S);
  if (extra_fd >= 0) send_msg(extra_fd, M_REFUSE, 0, 0, 0, 0, why, strlen(why), NOTIFY_S);
  snprintf(err, errlen, "rank 0: %s", why);
  return -1;
}

static const char *kind_name(int k) { return k == CODA_COMM_NCCL ? "NCCL (GPU)" : "CPU"; }

static int root_rendezvous(const coda_dist_env *env, struct coda_comm_s *c,
                           const unsigned char *id, double limit_s, char *err, size_t errlen) {
  const int lfd = listen_on(env->rendezvous_port, err, errlen);
  if (lfd < 0) return -1;
  const double end = now_s() + limit_s;
  char why[512];
  int joined = 0, rc = 0;
  while (joined < c->size - 1) {
    const double left = end - now_s();
    if (left <= 0) {
      int at = snprintf(why, sizeof why, "rank%s ", c->size - 1 - joined > 1 ? "s" : "");
      for (int r = 1, k = 0; r < c->size && at < (int)sizeof why - 80; r++)
        if (c->fd[r] < 0) {
          if (k++ == 8) { at += snprintf(why + at, sizeof why - (size_t)at, ", ..."); break; }
          at += snprintf(why + at, sizeof why - (size_t)at, "%s%d", k > 1 ? ", " : "", r);
        }
      snprintf(why + at, sizeof why - (size_t)at, " did not join the rendezvous on port %d within "
               "%.0f s (not started, failed early, or given another MASTER_ADDR/MASTER_PORT; %s)",
               env->rendezvous_port, limit_s, TIMEOUT_HINT);
      rc = refuse_all(c, -1, why, err, errlen);
      break;
    }
    if (wait_fd(lfd, POLLIN, left < 1.0 ? left : 1.0) <= 0) continue;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    tune_socket(fd);
    msg m;
    if (io_all(fd, &m, sizeof m, 0, HELLO_S) || m.magic != MSG_MAGIC || m.type != M_HELLO) {
      close(fd); /* not a coda rank: a probe, or a stray connection */
      continue;
    }
    if (m.a != c->size)
      snprintf(why, sizeof why, "rank %d has a world size of %d, rank 0 has %d (the ranks were "
               "started with different WORLD_SIZE)", m.rank, m.a, c->size);
    else if (m.b != (int)c->kind)
      snprintf(why, sizeof why, "rank %d uses the %s communicator, rank 0 the %s (different "
               "--device?)", m.rank, kind_name(m.b), kind_name((int)c->kind));
    else if (m.rank <= 0 || m.rank >= c->size || c->fd[m.rank] >= 0)
      snprintf(why, sizeof why, "two processes claim rank %d (RANK must differ between the "
               "processes of a job)", m.rank);
    else {
      c->fd[m.rank] = fd;
      joined++;
      continue;
    }
    rc = refuse_all(c, fd, why, err, errlen);
    close(fd);
    break;
  }
  close(lfd);
  if (rc) return rc;
  for (int r = 1; r < c->size; r++) {
    int e = send_msg(c->fd[r], M_WELCOME, 0, c->size, (int)c->kind, 0, id, NCCL_ID_BYTES, limit_s);
    if (e) {
      snprintf(err, errlen, "rank 0: rank %d left the rendezvous before the job started", r);
      return -1;
    }
  }
  return 0;
}

/* A non-blocking connect to one address, waiting at most limit_s. */
static int connect_one(const struct addrinfo *ai, double limit_s, int *err_no) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) { *err_no = errno; return -1; }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) { *err_no = errno; close(fd); return -1; }
    int e = 0;
    socklen_t len = sizeof e;
    if (wait_fd(fd, POLLOUT, limit_s) <= 0) e = ETIMEDOUT;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
    if (e) { *err_no = e; close(fd); return -1; }
  }
  return fd;
}

static int peer_rendezvous(const coda_dist_env *env, struct coda_comm_s *c, unsigned char *id,
                           double limit_s, char *err, size_t errlen) {
  const double end = now_s() + limit_s;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", env->rendezvous_port);
  char last[320] = "no answer";
  for (;;) {
    const double left = end - now_s();
    if (left <= 0) {
      snprintf(err, errlen, "rank %d: could not reach rank 0 at %s:%d within %.0f s (%s; is rank "
               "0 running, with the same MASTER_ADDR and MASTER_PORT? %s)", c->rank,
               env->master_addr, env->rendezvous_port, limit_s, last, TIMEOUT_HINT);
      return -1;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(env->master_addr, ps, &hints, &res);
    if (g == EAI_NONAME || g == EAI_SERVICE || g == EAI_FAMILY) {
      snprintf(err, errlen, "rank %d: MASTER_ADDR '%s': %s", c->rank, env->master_addr,
               gai_strerror(g));
      return -1;
    }
    int fd = -1, e = 0;
    if (g) snprintf(last, sizeof last, "MASTER_ADDR '%s': %s", env->master_addr, gai_strerror(g));
    for (struct addrinfo *ai = g ? NULL : res; ai && fd < 0; ai = ai->ai_next)
      if ((fd = connect_one(ai, left < 5.0 ? left : 5.0, &e)) < 0)
        snprintf(last, sizeof last, "%s", strerror(e));
    if (res) freeaddrinfo(res);
    if (fd < 0) {
      sleep_s(0.1);
      continue;
    }
    tune_socket(fd);
    msg m;
    int r = send_msg(fd, M_HELLO, c->rank, c->size, (int)c->kind, 0, NULL, 0, HELLO_S);
    if (!r) r = io_all(fd, &m, sizeof m, 0, end - now_s() > 0 ? end - now_s() : 0.1);
    if (!r && m.magic == MSG_MAGIC && m.type == M_HELLO) { /* connected to itself */
      close(fd);
      continue;
    }
    if (r == IO_SILENT) {
      close(fd);
      snprintf(err, errlen, "rank %d: rank 0 at %s:%d did not start the job within %.0f s (other "
               "ranks missing? %s)", c->rank, env->master_addr, env->rendezvous_port, limit_s,
               TIMEOUT_HINT);
      return -1;
    }
    if (r || m.magic != MSG_MAGIC) {
      close(fd);
      snprintf(err, errlen, "rank %d: %s:%d answered, but not as rank 0 of a coda job (%s)",
               c->rank, env->master_addr, env->rendezvous_port,
               r ? "it closed the connection" : "an unknown reply");
      return -1;
    }
    if (m.type == M_REFUSE) {
      char why[1024] = "";
      size_t n = m.bytes < sizeof why - 1 ? (size_t)m.bytes : sizeof why - 1;
      if (n && io_all(fd, why, n, 0, NOTIFY_S)) why[0] = '\0';
      why[n] = '\0';
      close(fd);
      snprintf(err, errlen, "rank %d: rank 0 stopped the job: %s", c->rank,
               why[0] ? why : "(no reason received)");
      return -1;
    }
    if (m.type != M_WELCOME || m.bytes != NCCL_ID_BYTES) {
      close(fd);
      snprintf(err, errlen, "rank %d: an unexpected reply from rank 0", c->rank);
      return -1;
    }
    unsigned char got[NCCL_ID_BYTES];
    if (io_all(fd, got, sizeof got, 0, NOTIFY_S)) {
      close(fd);
      snprintf(err, errlen, "rank %d: rank 0 left before the job started", c->rank);
      return -1;
    }
    if (id) memcpy(id, got, sizeof got);
    c->fd[0] = fd;
    return 0;
  }
}

int coda_sock_rendezvous(const coda_dist_env *env, struct coda_comm_s *c, unsigned char *nccl_id,
                         double limit_s, char *err, size_t errlen) {
  c->fd = malloc((size_t)c->size * sizeof *c->fd);
  if (c->rank == 0) c->buf = malloc(2 * (size_t)CHUNK_BYTES);
  if (!c->fd || (c->rank == 0 && !c->buf)) {
    snprintf(err, errlen, "rank %d: out of memory", c->rank);
    coda_sock_close(c);
    return -1;
  }
  for (int r = 0; r < c->size; r++) c->fd[r] = -1;
  static const unsigned char zeros[NCCL_ID_BYTES];
  int rc = c->rank == 0 ? root_rendezvous(env, c, nccl_id ? nccl_id : zeros, limit_s, err, errlen)
                        : peer_rendezvous(env, c, nccl_id, limit_s, err, errlen);
  if (rc) coda_sock_close(c);
  return rc;
}

/* ------------------------------------------------------------ watchdog */

struct coda_watch {
  pthread_t thread;
  atomic_int stop;
  double limit_s;
};

/* The job ends here: rank 0 tells the others first. */
static void watch_verdict(struct coda_comm_s *c, int who, int why, int detail) {
  msg m;
  memset(&m, 0, sizeof m);
  m.rank = who;
  m.a = why;
  m.b = detail;
  char text[256];
  if (who == 0 && why == WHY_GONE)
    snprintf(text, sizeof text, "rank 0 is gone (its connection closed: it exited, failed or was "
             "killed)");
  else if (who == 0 && why == WHY_SILENT)
    snprintf(text, sizeof text, "no word from rank 0 for %d s (stopped, hung or dead; %s)", detail,
             TIMEOUT_HINT);
  else
    describe_abort(&m, text, sizeof text);
  if (c->rank == 0) root_abort(c, who, why, detail);
  fprintf(stderr, "coda: rank %d: %s; stopping the job\n", c->rank, text);
  fflush(stderr);
  _exit(1);
}

static void *watch_main(void *arg) {
  struct coda_comm_s *c = arg;
  struct coda_watch *w = c->watch;
  const int lo = c->rank == 0 ? 1 : 0, hi = c->rank == 0 ? c->size : 1;
  double *seen = malloc((size_t)c->size * sizeof *seen);
  struct pollfd *pf = malloc((size_t)c->size * sizeof *pf);
  if (!seen || !pf) {
    free(seen);
    free(pf);
    return NULL;
  }
  for (int r = 0; r < c->size; r++) seen[r] = now_s();
  double next_beat = 0.0;
  while (!atomic_load(&w->stop)) {
    const double t = now_s();
    int n = 0, open = 0;
    for (int r = lo; r < hi; r++) {
      if (c->fd[r] < 0) continue;
      open++;
      if (t >= next_beat) send_msg(c->fd[r], M_BEAT, c->rank, 0, 0, 0, NULL, 0, 1.0);
      if (t - seen[r] > w->limit_s) watch_verdict(c, r, WHY_SILENT, (int)w->limit_s);
      pf[n].fd = c->fd[r];
      pf[n].events = POLLIN;
      pf[n].revents = 0;
      n++;
    }
    if (!open) break; /* every peer said goodbye */
    if (t >= next_beat) next_beat = t + 1.0;
    if (poll(pf, (nfds_t)n, 200) <= 0) continue;
    for (int i = 0, r = lo; r < hi; r++) {
      if (c->fd[r] < 0) continue;
      const short ev = pf[i++].revents;
      if (!ev) continue;
      msg m;
      int e = io_all(c->fd[r], &m, sizeof m, 0, 5.0);
      if (e == IO_SILENT) watch_verdict(c, r, WHY_SILENT, 5); /* a header cut short */
      if (e || m.magic != MSG_MAGIC) watch_verdict(c, r, WHY_GONE, 0);
      seen[r] = now_s();
      if (m.type == M_BYE) close_fd(&c->fd[r]);
      else if (m.type == M_ABORT) watch_verdict(c, m.rank, m.a, m.b);
    }
  }
  free(seen);
  free(pf);
  return NULL;
}

int coda_sock_watch_start(struct coda_comm_s *c, double limit_s, char *err, size_t errlen) {
  c->watched = 1;
  c->watch = calloc(1, sizeof *c->watch);
  if (!c->watch) {
    snprintf(err, errlen, "rank %d: out of memory", c->rank);
    return -1;
  }
  atomic_init(&c->watch->stop, 0);
  c->watch->limit_s = limit_s;
  int e = pthread_create(&c->watch->thread, NULL, watch_main, c);
  if (e) {
    snprintf(err, errlen, "rank %d: cannot start the watchdog thread: %s", c->rank, strerror(e));
    free(c->watch);
    c->watch = NULL;
    return -1;
  }
  return 0;
}

void coda_sock_watch_stop(struct coda_comm_s *c, int status) {
  if (!c->watch) return;
  atomic_store(&c->watch->stop, 1);
  pthread_join(c->watch->thread, NULL);
  free(c->watch);
  c->watch = NULL;
  if (status) {
    coda_sock_notify_failure(c, status);
    return;
  }
  for (int r = 0; r < c->size; r++)
    if (c->fd[r] >= 0) {
      send_msg(c->fd[r], M_BYE, c->rank, 0, 0, 0, NULL, 0, NOTIFY_S);
      shutdown(c->fd[r], SHUT_WR);
    }
}
