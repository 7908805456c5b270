/* QK-norm statistics epilogue; see qknorm.h. */
#include "nn/qknorm.h"
#include "base/internal.h"

#include <math.h>

coda_status qknorm_stats_program(coda_context ctx, int head_dim, double eps,
                                 coda_dtype dtype, coda_program *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "qknorm: null output");
  *out = NULL;
  if (head_dim <= 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "qknorm: head_dim %d must be positive",
                     head_dim);
  if (!(eps >= 0) || !isfinite(eps))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "qknorm: eps %g must be >= 0", eps);
  coda_builder b;
  coda_status st = coda_builder_create(ctx, 0, &b);
  if (st != CODA_OK) return st;
  coda_value x = coda_b_output(b, "x", dtype, CODA_WIDTH_FULL, 0);
  coda_value a = coda_b_acc(b, CODA_LANE_NONE);
  coda_value args[2] = {a, a};
  coda_value sq = coda_b_op(b, CODA_OP_MUL, 2, args, NULL);
  st = coda_b_store(b, x, a);
  if (st == CODA_OK) st = coda_b_reduce(b, "ss", CODA_REDUCE_SEGSUM, sq, -1, head_dim);
  if (st == CODA_OK) st = coda_b_finish(b, "r", CODA_FINISH_RSTD, "ss", NULL, eps);
  if (st == CODA_OK) st = coda_builder_finish(b, out);
  coda_builder_destroy(b);
  return st;
}
