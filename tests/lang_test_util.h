/* Helpers of the language tests. */
#ifndef CODA_TEST_LANG_UTIL_H
#define CODA_TEST_LANG_UTIL_H

#include "check.h"
#include "coda.h"

#include <string.h>

/* src must not parse, and the message must contain want. */
static inline void expect_parse_error(coda_context ctx, const char *src, const char *want) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, src, &p);
  CHECK_MSG(s != CODA_OK && !p, "accepted:\n%s", src);
  CHECK_MSG(strstr(coda_last_error(ctx), want), "message '%s' lacks '%s'", coda_last_error(ctx), want);
  coda_program_destroy(p);
}

#endif
