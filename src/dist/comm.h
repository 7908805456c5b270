/* Data-parallel communicator and launcher (src/dist).
 *
 * A communicator joins `size` processes (ranks) of one training run. Two
 * backends:
 *   CPU   collectives work on host buffers, synchronously, and reductions
 *         add in rank order (x0 + x1 + ... in the element type), so results
 *         are deterministic and identical on every rank. Two transports:
 *         forked ranks share one POSIX shared-memory segment (chunks
 *         through per-rank slots; comm.c); ranks started by another
 *         launcher (coda_dist_join) talk over TCP, every rank to rank 0,
 *         which sums and sends back (socket.c).
 *   NCCL  libnccl.so.2 loaded at run time (dlopen; CODA_NCCL_LIB names
 *         another file), one GPU per rank (forked rank r uses device r, a joined rank its
 *         LOCAL_RANK); collectives
 *         work on device buffers and are issued on the communicator's own
 *         stream, ordered against the compute stream (the legacy default
 *         stream every kernel of this library runs on) by events.
 * In-place forms follow NCCL: reduce-scatter with recv == send + rank·count,
 * all-gather with send == recv + rank·count.
 *
 * coda_dist_launch forks the ranks (the caller must not have initialized
 * CUDA), creates each rank's communicator, runs the rank function and waits;
 * when one rank fails the others are stopped and the failure is reported. */
#ifndef CODA_DIST_COMM_H
#define CODA_DIST_COMM_H

#include "coda_train.h" /* the communicator handle, its rank, size and kind, and the launcher */

#include <stddef.h>

typedef struct coda_nccl coda_nccl;
struct shared_hdr;

/* One rank's end of the communicator. */
struct coda_comm_s {
  coda_comm_kind kind;
  int rank, size;
  /* forked ranks: the shared segment and its slots (size x SLOT_BYTES) */
  struct shared_hdr *sh;
  unsigned char *slots;
  /* joined ranks: sockets (rank 0: fd[r] to rank r, fd[0] unused; the
   * others: fd[0] to rank 0), -1 when closed */
  int *fd;
  unsigned char *buf; /* rank 0's chunk buffers for the sums */
  long long seq;      /* collectives so far: every message carries it */
  int broken;         /* a collective failed: every later one fails at once */
  /* joined GPU ranks: the sockets carry no collectives, only the
   * watchdog's heartbeats and verdicts (socket.c) */
  int watched;
  struct coda_watch *watch;
  coda_nccl *nccl;
};

/* Sum over ranks of count elements per rank slice: rank r receives elements
 * [r·count, (r+1)·count) of the sum of every rank's send (size·count
 * elements). dt: CODA_F32 or CODA_F64. */
coda_status coda_comm_reduce_scatter(coda_context ctx, coda_comm c, const void *send, void *recv,
                                     size_t count, coda_dtype dt);
/* recv (size·count elements) = the ranks' sends (count each) in rank order.
 * Any dtype (bytes are copied). */
coda_status coda_comm_all_gather(coda_context ctx, coda_comm c, const void *send, void *recv,
                                 size_t count, coda_dtype dt);
/* recv = sum over ranks of send (count elements). dt: CODA_F32 or CODA_F64. */
coda_status coda_comm_all_reduce(coda_context ctx, coda_comm c, const void *send, void *recv,
                                 size_t count, coda_dtype dt);
/* Host doubles summed over ranks in place (synchronous on both backends). */
coda_status coda_comm_sum_host(coda_context ctx, coda_comm c, double *v, int n);
/* NCCL: brackets several collectives into one launch (ncclGroupStart/End).
 * CPU: no-ops. */
coda_status coda_comm_group_start(coda_context ctx, coda_comm c);
coda_status coda_comm_group_end(coda_context ctx, coda_comm c);
/* NCCL: the communication stream waits for the work issued so far on the
 * compute stream (before a collective reads what kernels wrote), and the
 * compute stream waits for the communication issued so far (before
 * kernels read what a collective wrote). CPU: no-ops. */
coda_status coda_comm_wait_compute(coda_context ctx, coda_comm c);
coda_status coda_comm_join(coda_context ctx, coda_comm c);


/* ---- internal: the TCP transport (socket.c) ---- */
/* The rendezvous of coda_dist_join: fills c->fd; nccl_id: rank 0's id goes
 * to every rank (128 bytes; NULL for the CPU kind). limit_s: how long rank 0
 * waits for the others and the others try to reach rank 0. */
int coda_sock_rendezvous(const coda_dist_env *env, struct coda_comm_s *c, unsigned char *nccl_id,
                         double limit_s, char *err, size_t errlen);
/* The CPU collectives over the sockets (arguments as cpu_reduce and the
 * all-gather of comm.c). */
coda_status coda_sock_reduce(coda_context ctx, struct coda_comm_s *c, const void *send, void *recv,
                             size_t total, size_t own_lo, size_t own_hi, coda_dtype dt);
coda_status coda_sock_all_gather(coda_context ctx, struct coda_comm_s *c, const void *send,
                                 void *recv, size_t count, coda_dtype dt);
/* This rank stopped with status `status` (nonzero): its peers are told (rank
 * 0 tells every rank, the others tell rank 0), so their next collective
 * fails naming it. */
void coda_sock_notify_failure(struct coda_comm_s *c, int status);
void coda_sock_close(struct coda_comm_s *c);
/* The watchdog of joined ranks whose collectives do not use the sockets
 * (NCCL): a thread sends a heartbeat every second and watches the peers
 * (rank 0 all ranks, the others rank 0). A peer whose connection closes
 * without a goodbye, that tells of a failure, or that is silent for
 * limit_s ends this process (status 1) with a message naming it, after
 * rank 0 has told every other rank. Stop: the thread ends, then peers get
 * a goodbye (status 0) or the failure (coda_sock_notify_failure). */
int coda_sock_watch_start(struct coda_comm_s *c, double limit_s, char *err, size_t errlen);
void coda_sock_watch_stop(struct coda_comm_s *c, int status);
/* coda_dist_join; watch: sockets for the watchdog only (NCCL does so; the
 * tests do so on the CPU, where the rank function then runs no collective) */
int coda_dist_join_watched(const coda_dist_env *env, coda_comm_kind kind, int watch,
                           coda_rank_main fn, void *user, char *err, size_t errlen);
/* How long one collective may wait for a peer (CODA_COMM_TIMEOUT). */
double coda_comm_timeout_s(coda_context ctx);

/* ---- internal: the NCCL backend (nccl.c) ---- */
/* Writes the 128-byte unique id of a new NCCL clique. */
int coda_nccl_unique_id(void *id, char *err, size_t errlen);
/* Binds the calling process to `device`, joins the clique as `rank`. */
int coda_nccl_create(int rank, int size, int device, const void *id, coda_nccl **out, char *err,
                     size_t errlen);
void coda_nccl_destroy(coda_nccl *n, int abort);
coda_status coda_nccl_collective(coda_context ctx, coda_nccl *n, int op, const void *send,
                                 void *recv, size_t count, coda_dtype dt);
coda_status coda_nccl_sum_host(coda_context ctx, coda_nccl *n, double *v, int cnt);
coda_status coda_nccl_group(coda_context ctx, coda_nccl *n, int start);
coda_status coda_nccl_order(coda_context ctx, coda_nccl *n, int comm_waits_compute);
enum { CODA_NCCL_REDUCE_SCATTER = 0, CODA_NCCL_ALL_GATHER = 1, CODA_NCCL_ALL_REDUCE = 2 };

#endif
