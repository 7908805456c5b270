/* Small helpers shared by the subcommands of the coda tool. */
#ifndef CODA_TOOL_UTIL_H
#define CODA_TOOL_UTIL_H

/* Reads a whole file (or stdin for "-") into a NUL-terminated string the
 * caller frees. On failure returns NULL and *why says what went wrong
 * (cannot open, too large, read error, NUL byte, out of memory). */
char *coda_tool_read_text(const char *path, const char **why);

#include "coda_train.h"

/* --data PATH as a corpus: prepares OUT/data/train.tok and val.tok from
 * d->path (coda_prepare_data) with a stamp OUT/data/source.txt naming the
 * source, or reuses them when the stamp matches; shards there without a
 * stamp are never written over. data_dir (cap bytes) = OUT/data; *vocab =
 * the shards' vocabulary. 0 on success; else prints why and returns 1. */
int coda_tool_prepare_corpus(coda_context ctx, const coda_data_options *d, const char *out_dir,
                             char *data_dir, size_t cap, uint32_t *vocab);
/* The progress line of the preparation (coda_data_options.progress). */
void coda_tool_prep_progress(uint64_t bytes, uint64_t tokens, void *user);

/* coda_context_create(o, out) (o NULL: the defaults); on failure prints
 * "coda CMD: cannot create a WHAT context: REASON" (the reason from
 * coda_context_options_check, else the status) and returns the status. */
coda_status coda_tool_context(const coda_context_options *o, coda_context *out, const char *cmd,
                              const char *what);

/* Prints the context's warnings (coda_warnings), each line as
 * "coda CMD: warning: LINE" on stderr, and clears them. */
void coda_tool_warnings(coda_context ctx, const char *cmd);

#endif
