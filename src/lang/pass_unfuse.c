/* The unfused form of a GEMM-epilogue program, as a pass over the IR.
 *
 * A GEMM step with fusion off runs as a plain GEMM into a temporary, then
 * its program as a map pass over the same M x N domain. That map program
 * is the epilogue with the accumulator read from a tile input instead of
 * `acc`: this pass builds it from the IR (no re-parsing of text), so it is
 * exactly the program the text rewrite "declare `input NAME : tile DTYPE`
 * first, rename every `acc` to NAME" would give. See ir.h. */
#include "lang/ir.h"
#include "base/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 if `name` already names something in p (input, output, reduction,
 * finisher or named value). */
static int name_used(const struct coda_program_s *p, const char *name) {
  if (ir_find_input(p, name) >= 0 || ir_find_output(p, name) >= 0 ||
      ir_find_reduce(p, name) >= 0 || ir_find_finish(p, name) >= 0)
    return 1;
  for (int r = 0; p->reg_names && r < p->nregs; r++)
    if (p->reg_names[r] && !strcmp(p->reg_names[r], name)) return 1;
  return 0;
}

coda_status ir_unfuse(coda_context ctx, const struct coda_program_s *p, const char *input,
                      coda_dtype dtype, struct coda_program_s **out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "ir_unfuse: out is NULL");
  *out = NULL;
  if (!p || !input)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "ir_unfuse: program or input name is NULL");
  const size_t len = strlen(input);
  if (len == 0 || len >= CODA_NAME_MAX)
    return coda_fail(ctx, CODA_ERR_TYPE, "unfused program: input name '%.32s' is empty or longer "
                     "than %d characters", input, CODA_NAME_MAX - 1);
  if (ir_is_reserved(input))
    return coda_fail(ctx, CODA_ERR_TYPE, "unfused program: '%s' is a reserved word and cannot be a name",
                     input);
  if (name_used(p, input))
    return coda_fail(ctx, CODA_ERR_TYPE, "unfused program: '%s' is already defined", input);
  if (p->ninputs >= CODA_MAX_INPUTS)
    return coda_fail(ctx, CODA_ERR_TYPE, "unfused program: too many inputs (at most %d)",
                     CODA_MAX_INPUTS);

  struct coda_program_s *q = ir_program_alloc();
  if (!q) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory unfusing a program");
  /* The plain data is copied; the owned strings are made anew below. */
  memcpy(q, p, sizeof *q);
  q->reg_names = NULL;
  q->text = NULL;
  q->ir_dump = NULL;
  q->passes[0] = q->passes[1] = NULL;

  /* The accumulator input comes first, before every other declaration
   * (as if declared right after the `mode` line): the others move up one. */
  memmove(&q->inputs[1], &q->inputs[0], (size_t)p->ninputs * sizeof q->inputs[0]);
  q->ninputs = p->ninputs + 1;
  ir_input *in = &q->inputs[0];
  memset(in, 0, sizeof *in);
  snprintf(in->name, sizeof in->name, "%s", input);
  in->kind = CODA_ARG_TILE;
  in->dtype = dtype;
  in->width = CODA_WIDTH_FULL; /* one value per point; in pair mode a pair, read by lane */
  for (int i = 0; i < q->ninstrs; i++) {
    ir_instr *ins = &q->instrs[i];
    if (ins->code == IR_READ) ins->input++;
    else if (ins->code == IR_ACC) { /* the lane (pair mode) stays */
      ins->code = IR_READ;
      ins->input = 0;
    }
  }
  for (int k = 0; k < q->nreduces; k++)
    if (q->reduces[k].kind == CODA_REDUCE_ROWPICK) q->reduces[k].index_input++;

  coda_status st = CODA_OK;
  if (p->reg_names && p->nregs > 0) {
    q->reg_names = calloc((size_t)p->nregs, sizeof *q->reg_names);
    if (!q->reg_names) st = CODA_ERR_OUT_OF_MEMORY;
    for (int r = 0; r < p->nregs && st == CODA_OK; r++) {
      if (!p->reg_names[r]) continue;
      const size_t n = strlen(p->reg_names[r]) + 1;
      q->reg_names[r] = malloc(n);
      if (!q->reg_names[r]) st = CODA_ERR_OUT_OF_MEMORY;
      else memcpy(q->reg_names[r], p->reg_names[r], n);
    }
    if (st != CODA_OK) st = coda_fail(ctx, st, "out of memory unfusing a program");
  }
  if (st == CODA_OK) st = ir_validate(ctx, q);
  if (st == CODA_OK) st = ir_finalize(ctx, q);
  if (st != CODA_OK) {
    coda_program_destroy(q);
    return st;
  }
  *out = q;
  return CODA_OK;
}
