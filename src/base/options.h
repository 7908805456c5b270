/* Versioned option structs (include/coda.h, "Versioned option structs"):
 * each begins with `size_t struct_size`, the caller's sizeof of the
 * struct. A function that takes one copies it over the defaults with
 * coda_options_take, so a caller built against an older, shorter layout
 * gets the defaults for the fields it does not have, and a size the
 * library does not know is refused before a byte past it is read. */
#ifndef CODA_BASE_OPTIONS_H
#define CODA_BASE_OPTIONS_H

#include "coda.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One layout a struct has had, oldest first; the last is the current one. */
typedef struct coda_options_layout {
  size_t size; /* sizeof the struct in a header of that layout */
  size_t used; /* its bytes that hold members (size less tail padding): a
                * later member may sit in an older layout's padding, so only
                * these bytes are the caller's */
} coda_options_layout;

/* The current layout of struct type T (every byte copied). */
#define CODA_OPTIONS_LAYOUT(T) {sizeof(T), sizeof(T)}
/* An older layout: the frozen struct OLD, whose last member is LAST. */
#define CODA_OPTIONS_LAYOUT_OLD(OLD, LAST) \
  {sizeof(OLD), offsetof(OLD, LAST) + sizeof(((OLD *)0)->LAST)}

/* Copies the caller's struct `in` (name: its C type name, for messages)
 * over `out`, which holds the current layout's defaults on entry: the
 * bytes of the caller's layout are copied, the members it lacks keep their
 * defaults, and out's struct_size becomes the current size. A struct_size
 * that is 0, larger than the current size, or no known layout's is
 * CODA_ERR_INVALID_ARGUMENT, with a message naming the struct, the size
 * given and the sizes expected in msg (cap bytes; out untouched). */
coda_status coda_options_take_msg(const char *name, const void *in, void *out,
                                  const coda_options_layout *layouts, int nlayouts, char *msg,
                                  size_t cap);
/* The same, the message recorded on ctx. */
coda_status coda_options_take(coda_context ctx, const char *name, const void *in, void *out,
                              const coda_options_layout *layouts, int nlayouts);

#ifdef __cplusplus
}
#endif
#endif
