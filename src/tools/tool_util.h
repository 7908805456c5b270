/* Small helpers shared by the subcommands of the coda tool. */
#ifndef CODA_TOOL_UTIL_H
#define CODA_TOOL_UTIL_H

/* Reads a whole file (or stdin for "-") into a NUL-terminated string the
 * caller frees. On failure returns NULL and *why says what went wrong
 * (cannot open, too large, read error, NUL byte, out of memory). */
char *coda_tool_read_text(const char *path, const char **why);

#endif
