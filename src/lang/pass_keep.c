/* The keep pass: a program that also stores one of its named values.
 *
 * Rule: `keep VALUE as OUTPUT : DTYPE` declares `output OUTPUT : DTYPE`
 * after the other outputs (`half` in pair mode: one value per column pair)
 * and adds `store OUTPUT = VALUE`; nothing else changes. This derives a
 * forward that hands an intermediate to its backward instead of having the
 * backward recompute it. See ir.h. */
#include "lang/ir.h"
#include "base/internal.h"

#include <stdio.h>
#include <string.h>

static int value_reg(const struct coda_program_s *p, const char *name) {
  for (int r = 0; p->reg_names && r < p->nregs; r++)
    if (p->reg_names[r] && !strcmp(p->reg_names[r], name)) return r;
  return -1;
}

coda_status ir_keep(coda_context ctx, const struct coda_program_s *p, const char *value, const char *output,
                    coda_dtype dtype, struct coda_program_s **out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "keep pass: out is NULL");
  *out = NULL;
  if (!p || !value || !output)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "keep pass: program, value or output name is NULL");
  const int reg = value_reg(p, value);
  if (reg < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "keep pass: '%.40s' is not a named value of the "
                     "program (only a value defined by `NAME = expression` can be kept)", value);
  const size_t len = strlen(output);
  if (len == 0 || len >= CODA_NAME_MAX)
    return coda_fail(ctx, CODA_ERR_TYPE, "keep pass: output name '%.32s' is empty or longer than %d "
                     "characters", output, CODA_NAME_MAX - 1);
  if (ir_is_reserved(output))
    return coda_fail(ctx, CODA_ERR_TYPE, "keep pass: '%s' is a reserved word and cannot be a name", output);
  if (ir_find_input(p, output) >= 0 || ir_find_output(p, output) >= 0 || ir_find_reduce(p, output) >= 0 ||
      ir_find_finish(p, output) >= 0 || ir_find_param(p, output) >= 0 || value_reg(p, output) >= 0)
    return coda_fail(ctx, CODA_ERR_TYPE, "keep pass: '%s' is already a name of the program", output);
  if (p->noutputs >= CODA_MAX_OUTPUTS)
    return coda_fail(ctx, CODA_ERR_TYPE, "keep pass: the program has the most outputs allowed (%d)",
                     CODA_MAX_OUTPUTS);
  struct coda_program_s *q = ir_clone(p);
  if (!q) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in the keep pass");
  ir_output *o = &q->outputs[q->noutputs++];
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", output);
  o->dtype = dtype;
  o->width = q->pair_mode ? CODA_WIDTH_HALF : CODA_WIDTH_FULL;
  o->reg_even = reg;
  o->reg_odd = -1;
  coda_status st = ir_validate(ctx, q);
  if (st == CODA_OK) st = ir_finalize(ctx, q);
  if (st != CODA_OK) {
    coda_program_destroy(q);
    return st;
  }
  *out = q;
  return CODA_OK;
}
