/* Plan printing: the plan as text (coda_plan_text, plan_print): buffers
 * with shape, dtype, role and the temporaries' arena layout, then the
 * steps of each phase (each kind prints its own line, step_*.c). */
#include "nn/plan_internal.h"

#include "base/internal.h"
#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>

/* -------------------------------------------------------------- printing */

static const char *role_name(plan_role r) {
  switch (r) {
  case PLAN_ROLE_INPUT: return "input";
  case PLAN_ROLE_PARAM: return "param";
  case PLAN_ROLE_OUTPUT: return "output";
  case PLAN_ROLE_GRAD: return "grad";
  case PLAN_ROLE_SAVED: return "saved";
  case PLAN_ROLE_TEMP: return "temp";
  case PLAN_ROLE_CONST: return "const";
  }
  return "?";
}

const char *plan_fmt_bytes(char buf[32], size_t v) {
  if (v < 10240) snprintf(buf, 32, "%zu B", v);
  else if (v < 10485760) snprintf(buf, 32, "%.1f KiB", (double)v / 1024.0);
  else snprintf(buf, 32, "%.2f MiB", (double)v / 1048576.0);
  return buf;
}

static void print_step(coda_plan p, coda_strbuf *b, int i, const plan_step *s) {
  coda_sb_printf(b, "  %2d  %-22s ", i, s->label);
  plan_step_ops_of(s->kind)->print(p, b, s);
  coda_sb_printf(b, "\n");
}

const char *coda_plan_text(coda_plan p) {
  if (!p) return "";
  coda_strbuf b = {0};
  int ngemm = 0, nunf = 0;
  for (int i = 0; i < p->nstep; i++)
    if (p->steps[i].kind == PLAN_GEMM) ngemm++, nunf += p->steps[i].unfused;
  coda_sb_printf(&b, "plan %s%s", p->name, p->status != CODA_OK ? " (failed to build)" : "");
  if (nunf)
    coda_sb_printf(&b, " (fusion off for %d of %d gemm steps, marked unfused: each runs as a "
                   "plain gemm into " PLAN_ACC_INPUT " and its program as a map)", nunf, ngemm);
  coda_sb_printf(&b, "\n");
  /* intervals always; offsets as laid out now, or as the next run will */
  const int laid = p->status == CODA_OK && plan_layout(p) == CODA_OK;
  if (laid) {
    char a[32], t[32];
    int nacc = 0;
    for (int i = 0; i < p->nstep; i++) nacc += p->steps[i].acc_off >= 0;
    coda_sb_printf(&b, "temporaries: %d%s in one arena of %s (%s side by side; %s)%s\n", p->ntemp,
                   nacc ? " and the unfused accumulators" : "", plan_fmt_bytes(a, p->arena_bytes),
                   plan_fmt_bytes(t, p->temp_bytes),
                   p->no_share ? "sharing off" : "shared where their steps do not overlap",
                   p->arena_live ? "" : ", before allocation");
  }
  coda_sb_printf(&b, "buffers:\n");
  for (int i = 0; i < p->nbuf; i++) {
    const plan_buf *u = &p->bufs[i];
    coda_sb_printf(&b, "  %-12s %-6s %6lld x %-6lld %s%s", u->name, role_name(u->role),
              (long long)u->rows, (long long)u->cols, coda_dtype_name(u->dtype),
              u->init ? " (initialized)" : "");
    if (laid && u->role == PLAN_ROLE_TEMP && u->live_first >= 0) {
      char o[32];
      coda_sb_printf(&b, "  steps %d-%d", u->live_first, u->live_last);
      if (u->arena_off >= 0) coda_sb_printf(&b, " @ %s", plan_fmt_bytes(o, (size_t)u->arena_off));
      else if (u->alias < 0) coda_sb_printf(&b, ", own memory");
    }
    if (u->alias >= 0 && u->reshape) coda_sb_printf(&b, "  view of %s (its memory, this shape)", p->bufs[u->alias].name);
    else if (u->alias >= 0) coda_sb_printf(&b, "  alias of %s (in place, in its memory)", p->bufs[u->alias].name);
    coda_sb_printf(&b, "\n");
  }
  for (int ph = 0; ph < 2; ph++) {
    coda_sb_printf(&b, "%s:\n", ph == 0 ? "forward" : "backward");
    for (int i = 0; i < p->nstep; i++)
      if ((int)p->steps[i].phase == ph) print_step(p, &b, i, &p->steps[i]);
  }
  char *text = coda_sb_take(&b);
  if (!text) return "(out of memory)";
  free(p->text);
  p->text = text;
  return p->text;
}

void plan_print(coda_plan p, FILE *f) {
  if (f) fputs(coda_plan_text(p), f);
}
