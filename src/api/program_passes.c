/* Program rewrites the layers above need (nn plans), as entry points of
 * the api layer: they take and return public coda_program handles, so a
 * caller never sees the IR (see api.h; the passes live in src/lang). */
#include "api/api.h"

#include "lang/ir.h"

coda_status coda_program_unfused(coda_context ctx, coda_program prog, const char *input,
                                 coda_dtype dtype, coda_program *out) {
  return ir_unfuse(ctx, prog, input, dtype, out);
}
