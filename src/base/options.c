/* Versioned option structs: the size check and the copy over defaults. */
#include "base/options.h"
#include "base/internal.h"

#include <stdio.h>
#include <string.h>

/* "80 or 88" / "88": the sizes of the layouts the library knows. */
static void known_sizes(const coda_options_layout *l, int n, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && at < cap; i++) {
    int w = snprintf(buf + at, cap - at, "%s%zu", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                     l[i].size);
    if (w < 0) break;
    at += (size_t)w;
  }
}

coda_status coda_options_take_msg(const char *name, const void *in, void *out,
                                  const coda_options_layout *layouts, int nlayouts, char *msg,
                                  size_t cap) {
  size_t given, current = layouts[nlayouts - 1].size;
  memcpy(&given, in, sizeof given); /* the first member of every such struct */
  const coda_options_layout *match = NULL;
  for (int i = 0; i < nlayouts; i++)
    if (layouts[i].size == given) match = &layouts[i];
  if (match) {
    memcpy(out, in, match->used);
    memcpy(out, &current, sizeof current);
    return CODA_OK;
  }
  /* "coda_train_options" -> "coda_train_default_options()" */
  char init[96];
  size_t stem = strlen(name);
  if (stem > 8 && strcmp(name + stem - 8, "_options") == 0) stem -= 8;
  snprintf(init, sizeof init, "%.*s_default_options()", (int)stem, name);
  char sizes[96];
  known_sizes(layouts, nlayouts, sizes, sizeof sizes);
  if (given == 0)
    snprintf(msg, cap,
             "%s.struct_size is 0 (unset): expected sizeof(%s), %s bytes in this library; "
             "start from %s or set it", name, name, sizes, init);
  else if (given > current)
    snprintf(msg, cap,
             "%s.struct_size is %zu, larger than the %zu bytes of this library's %s: the "
             "caller was built against a newer header than the library it runs with",
             name, given, current, name);
  else
    snprintf(msg, cap,
             "%s.struct_size is %zu, not the size of a %s layout this library knows "
             "(expected %s)", name, given, name, sizes);
  return CODA_ERR_INVALID_ARGUMENT;
}

coda_status coda_options_take(coda_context ctx, const char *name, const void *in, void *out,
                              const coda_options_layout *layouts, int nlayouts) {
  char msg[CODA_ERRMSG_LEN];
  coda_status s = coda_options_take_msg(name, in, out, layouts, nlayouts, msg, sizeof msg);
  if (s != CODA_OK) return coda_fail(ctx, s, "%s", msg);
  return CODA_OK;
}
