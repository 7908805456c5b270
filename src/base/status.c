/* Status codes and the context's last error message. */
#include "base/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *coda_status_string(coda_status s) {
  switch (s) {
  case CODA_OK: return "ok";
  case CODA_ERR_INVALID_ARGUMENT: return "invalid argument";
  case CODA_ERR_PARSE: return "parse error";
  case CODA_ERR_TYPE: return "invalid program";
  case CODA_ERR_SHAPE: return "shape mismatch";
  case CODA_ERR_DTYPE: return "dtype not allowed";
  case CODA_ERR_LAYOUT: return "unsupported stride or alignment";
  case CODA_ERR_ALIAS: return "overlapping tensors";
  case CODA_ERR_OUT_OF_MEMORY: return "out of memory";
  case CODA_ERR_NOT_SUPPORTED: return "not supported";
  case CODA_ERR_BACKEND: return "backend failure";
  case CODA_ERR_IO: return "i/o error";
  case CODA_ERR_OVERFLOW: return "size overflow";
  case CODA_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

coda_status coda_fail(coda_context ctx, coda_status s, const char *fmt, ...) {
  if (ctx) {
    /* Formatted aside, then copied: an argument may point into last_error
     * itself (a message that wraps the previous one), and vsnprintf into
     * a buffer one of its arguments reads is undefined. */
    char msg[sizeof ctx->last_error];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) msg[0] = '\0';
    memcpy(ctx->last_error, msg, sizeof msg);
  }
  return s;
}

/* Public (coda.h), and here rather than in the api layer: every layer that
 * wraps a failure of a call below it into its own message reads it. */
const char *coda_last_error(coda_context ctx) {
  return ctx ? ctx->last_error : "no context";
}

void coda_clear_error(coda_context ctx) {
  if (ctx) ctx->last_error[0] = '\0';
}

void coda_warn(coda_context ctx, const char *fmt, ...) {
  if (!ctx) return;
  char msg[CODA_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t have = strlen(ctx->warnings), len = strlen(msg);
  if (have + len + 2 > sizeof ctx->warnings) return; /* full: the earlier lines stay */
  memcpy(ctx->warnings + have, msg, len);
  ctx->warnings[have + len] = '\n';
  ctx->warnings[have + len + 1] = '\0';
}

const char *coda_warnings(coda_context ctx) { return ctx ? ctx->warnings : ""; }

void coda_warnings_clear(coda_context ctx) {
  if (ctx) ctx->warnings[0] = '\0';
}

