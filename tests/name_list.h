/* Comma-separated name lists of the test and benchmark command lines
 * ("--only a,b,c"). */
#ifndef CODA_TEST_NAME_LIST_H
#define CODA_TEST_NAME_LIST_H
#include <string.h>

/* 1 if name is an item of the comma-separated list (a NULL list holds
 * every name). */
static inline int name_in_list(const char *list, const char *name) {
  if (!list) return 1;
  const size_t n = strlen(name);
  for (const char *q = list; *q;) {
    const char *e = strchr(q, ',');
    const size_t len = e ? (size_t)(e - q) : strlen(q);
    if (len == n && !strncmp(q, name, n)) return 1;
    if (!e) break;
    q = e + 1;
  }
  return 0;
}
#endif
