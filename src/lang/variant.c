/* coda_program_variant: the variant passes (pass_fold.c, pass_drop.c,
 * pass_keep.c) as one public entry point, applied fold, drop, keep. */
#include "lang/ir.h"
#include "base/internal.h"

#include <string.h>

coda_variant_options coda_variant_default_options(void) {
  coda_variant_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.keep_dtype = CODA_BF16;
  return o;
}

/* *p replaced by the result *q of a pass that returned st. */
static coda_status step(coda_status st, coda_program *p, coda_program *q) {
  if (st == CODA_OK) {
    coda_program_destroy(*p);
    *p = *q;
    *q = NULL;
  }
  return st;
}

coda_status coda_program_variant(coda_context ctx, coda_program p, const coda_variant_options *opts,
                                 coda_program *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_variant: out is NULL");
  *out = NULL;
  if (!p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_variant: program is NULL");
  coda_variant_options o = coda_variant_default_options();
  if (opts) {
    if (opts->struct_size != sizeof o)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "coda_variant_options: struct_size %zu, expected %zu (sizeof(coda_variant_options))",
                       opts->struct_size, sizeof o);
    o = *opts;
  }
  if (o.nfold < 0 || (o.nfold > 0 && !o.fold) || o.ndrop < 0 || (o.ndrop > 0 && !o.drop))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_program_variant: nfold %d with fold %s, ndrop %d with drop %s (counts >= 0, "
                     "the array set when its count is > 0)",
                     o.nfold, o.fold ? "set" : "NULL", o.ndrop, o.drop ? "set" : "NULL");
  for (int k = 0; k < o.nfold; k++)
    if (!o.fold[k]) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_variant: fold rule %d is NULL", k);
  for (int k = 0; k < o.ndrop; k++)
    if (!o.drop[k]) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_variant: drop name %d is NULL", k);
  if (o.keep && !o.keep_as)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_program_variant: keep '%.40s' without keep_as (the new output's name)", o.keep);
  coda_program r = ir_clone(p), q = NULL;
  if (!r) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in coda_program_variant");
  coda_status st = CODA_OK;
  for (int k = 0; k < o.nfold && st == CODA_OK; k++) {
    st = ir_fold(ctx, r, o.fold[k], &q);
    st = step(st, &r, &q);
  }
  if (st == CODA_OK && o.ndrop > 0) {
    st = ir_drop(ctx, r, o.drop, o.ndrop, &q);
    st = step(st, &r, &q);
  }
  if (st == CODA_OK && o.keep) {
    st = ir_keep(ctx, r, o.keep, o.keep_as, o.keep_dtype, &q);
    st = step(st, &r, &q);
  }
  if (st == CODA_OK) st = ir_finalize(ctx, r);
  if (st != CODA_OK) {
    coda_program_destroy(r);
    return st;
  }
  *out = r;
  return CODA_OK;
}
