/* Parameters: listing them and binding values (coda_program_bind). */
#include "lang/ir.h"
#include "base/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int coda_program_num_params(coda_program p) { return p ? p->nparams : 0; }

coda_status coda_program_param(coda_program p, int i, coda_param_info *info) {
  if (!p || !info || i < 0 || i >= p->nparams) return CODA_ERR_INVALID_ARGUMENT;
  info->name = p->params[i].name;
  info->has_value = p->params[i].has_value;
  info->value = p->params[i].has_value ? p->params[i].value : 0.0;
  return CODA_OK;
}

coda_bind_options coda_bind_default_options(void) {
  coda_bind_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  return o;
}

/* "eps, cap" or "none" into buf. */
static void list_params(const struct coda_program_s *p, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  if (!p->nparams) snprintf(buf, n, "it declares none");
  for (int i = 0; i < p->nparams && len < n; i++) {
    int w = snprintf(buf + len, n - len, "%s%s", i ? ", " : "it declares ", p->params[i].name);
    if (w < 0) break;
    len += (size_t)w;
  }
}

coda_status coda_program_bind(coda_context ctx, coda_program p, const coda_bind_options *opts,
                              coda_program *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_bind: out is NULL");
  *out = NULL;
  if (!p) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_bind: program is NULL");
  coda_bind_options o = coda_bind_default_options();
  if (opts) {
    if (opts->struct_size != sizeof o)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "coda_bind_options: struct_size %zu, expected %zu (sizeof(coda_bind_options))",
                       opts->struct_size, sizeof o);
    o = *opts;
  }
  if (o.nvalues < 0 || (o.nvalues > 0 && !o.values))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "coda_program_bind: nvalues %d with values %s (nvalues >= 0, values set when it is > 0)",
                     o.nvalues, o.values ? "set" : "NULL");
  char names[512];
  for (int k = 0; k < o.nvalues; k++) {
    const char *nm = o.values[k].name;
    if (!nm) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_bind: value %d has no name", k);
    if (ir_find_param(p, nm) < 0) {
      list_params(p, names, sizeof names);
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_bind: unknown parameter '%.40s' (%s)", nm,
                       names);
    }
    for (int j = 0; j < k; j++)
      if (!strcmp(o.values[j].name, nm))
        return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_bind: parameter '%s' is given twice", nm);
    if (!isfinite(o.values[k].value))
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "coda_program_bind: parameter '%s': value %g is not finite (a finite number is allowed)", nm,
                       o.values[k].value);
  }
  coda_program q = NULL;
  coda_status s = coda_program_parse(ctx, coda_program_text(p), &q);
  if (s) return s;
  for (int k = 0; k < o.nvalues; k++) {
    int i = ir_find_param(q, o.values[k].name);
    q->params[i].has_value = 1;
    q->params[i].value = o.values[k].value;
    ir_param_propagate(q, i);
  }
  for (int i = 0; i < q->nparams; i++)
    if (!q->params[i].has_value) {
      coda_program_destroy(q);
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "coda_program_bind: parameter '%s' has no value: it has no default, so give one in "
                       "coda_bind_options.values", p->params[i].name);
    }
  if ((s = ir_validate(ctx, q)) || (s = ir_finalize(ctx, q))) {
    coda_program_destroy(q);
    return s;
  }
  coda_clear_error(ctx);
  *out = q;
  return CODA_OK;
}
