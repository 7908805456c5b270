/* Telling a binary file named as a text corpus from text (data.h,
 * coda_sniff_binary). */
#include "data/data.h"

static int is_binary_control(unsigned char c) {
  return (c < 0x20 && c != '\t' && c != '\n' && c != '\v' && c != '\f' && c != '\r' &&
          c != 0x1b) || c == 0x7f;
}

coda_status coda_sniff_binary(coda_context ctx, const char *path, coda_text_sniff *t,
                              const unsigned char *b, size_t n, int eof) {
  if (t->done) return CODA_OK;
  size_t take = CODA_TEXT_SNIFF - t->seen < n ? CODA_TEXT_SNIFF - t->seen : n;
  for (size_t i = 0; i < take; i++) t->ctrl += is_binary_control(b[i]);
  t->seen += take;
  if (t->seen < CODA_TEXT_SNIFF && !eof) return CODA_OK;
  t->done = 1;
  if (t->ctrl >= 4 && t->ctrl * 32 > t->seen)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                     "%s: %zu of its first %zu bytes are control characters (other than tab, "
                     "line ends, form feed and escape): not a text file (a corpus is text, "
                     "JSON Lines (.jsonl) or llm.c token shards (.bin); coda token shards "
                     "(.tok) are passed as they are)", path, t->ctrl, t->seen);
  return CODA_OK;
}
