/* The communicator's NCCL entry points in a build without CUDA: each says
 * so (CMakeLists.txt builds this file instead of nccl.c). */
#include "dist/comm.h"
#include "base/internal.h"

#include <stdio.h>

int coda_nccl_device_count(void) { return 0; }
int coda_nccl_unique_id(void *id, char *err, size_t errlen) {
  (void)id;
  snprintf(err, errlen, "this build has no CUDA, so no NCCL backend");
  return -1;
}
int coda_nccl_create(int rank, int size, int device, const void *id, coda_nccl **out, char *err,
                     size_t errlen) {
  (void)rank; (void)size; (void)device; (void)id;
  *out = NULL;
  snprintf(err, errlen, "this build has no CUDA, so no NCCL backend");
  return -1;
}
void coda_nccl_destroy(coda_nccl *n, int abort) { (void)n; (void)abort; }
static coda_status none(coda_context ctx) {
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "this build has no CUDA, so no NCCL backend");
}
coda_status coda_nccl_collective(coda_context ctx, coda_nccl *n, int op, const void *send,
                                 void *recv, size_t count, coda_dtype dt) {
  (void)n; (void)op; (void)send; (void)recv; (void)count; (void)dt;
  return none(ctx);
}
coda_status coda_nccl_sum_host(coda_context ctx, coda_nccl *n, double *v, int cnt) {
  (void)n; (void)v; (void)cnt;
  return none(ctx);
}
coda_status coda_nccl_group(coda_context ctx, coda_nccl *n, int start) {
  (void)n; (void)start;
  return none(ctx);
}
coda_status coda_nccl_order(coda_context ctx, coda_nccl *n, int comm_waits_compute) {
  (void)n; (void)comm_waits_compute;
  return none(ctx);
}
