/* The drop pass: a program without some of its outputs.
 *
 * Rule: every named output loses its store and its declaration, every
 * named finisher its finish statement (the reduction it finishes stays: its
 * partials are still an argument); then every computation that nothing left
 * uses goes, and the registers are renumbered. Inputs, parameters, mode and
 * math are unchanged. This derives the inference form of a forward program
 * (drop what only the backward reads) and a producer whose consumer reads
 * its partials instead of the finished vector. See ir.h. */
#include "lang/ir.h"
#include "base/internal.h"

#include <stdio.h>
#include <string.h>

/* The outputs and finishers of p, for a message. */
static void list_droppable(const struct coda_program_s *p, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int k = 0; k < p->noutputs + p->nfinishes && at + 1 < len; k++) {
    const char *nm = k < p->noutputs ? p->outputs[k].name : p->finishes[k - p->noutputs].name;
    int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", nm);
    if (w < 0) break;
    at += (size_t)w;
  }
  if (!at) snprintf(buf, len, "none");
}

coda_status ir_drop(coda_context ctx, const struct coda_program_s *p, const char *const *names, int n,
                    struct coda_program_s **out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "drop pass: out is NULL");
  *out = NULL;
  if (!p || (n > 0 && !names) || n < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "drop pass: program or names is NULL");
  struct coda_program_s *q = ir_clone(p);
  if (!q) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory in the drop pass");
  for (int i = 0; i < n; i++) {
    const char *nm = names[i] ? names[i] : "";
    int k;
    if ((k = ir_find_output(q, nm)) >= 0) {
      memmove(&q->outputs[k], &q->outputs[k + 1], (size_t)(q->noutputs - k - 1) * sizeof q->outputs[0]);
      q->noutputs--;
    } else if ((k = ir_find_finish(q, nm)) >= 0) {
      for (int j = 0; j < q->ninstrs; j++) {
        ir_instr *in = &q->instrs[j];
        if (in->code == IR_STAT && in->input == k) {
          const int line = in->line; /* q, and in with it, is freed before the message */
          coda_program_destroy(q);
          return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "drop pass: the program reads '%s' (line %d): "
                           "a finisher it reads cannot be dropped", nm, line);
        }
        if (in->code == IR_STAT && in->input > k) in->input--;
      }
      memmove(&q->finishes[k], &q->finishes[k + 1], (size_t)(q->nfinishes - k - 1) * sizeof q->finishes[0]);
      q->nfinishes--;
    } else {
      char known[256];
      list_droppable(q, known, sizeof known);
      coda_program_destroy(q);
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "drop pass: '%.40s' is not an output or a finisher "
                       "of the program (it has: %s)", nm, known);
    }
  }
  coda_status st = ir_compact(q, 1);
  if (st) st = coda_fail(ctx, st, "out of memory in the drop pass");
  if (st == CODA_OK) st = ir_validate(ctx, q);
  if (st == CODA_OK) st = ir_finalize(ctx, q);
  if (st != CODA_OK) {
    coda_program_destroy(q);
    return st;
  }
  *out = q;
  return CODA_OK;
}
