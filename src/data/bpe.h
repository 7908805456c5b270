/* Internals of the byte-level BPE tokenizer (include/coda_tokenizer.h):
 * the split patterns of the pre-tokenizers, written as matchers over
 * Unicode general categories (utf8proc), and UTF-8 decoding. */
#ifndef CODA_DATA_BPE_H
#define CODA_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

/* The split regexes coda implements, recognised by their exact text. */
typedef enum coda_bpe_pattern {
  /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   * (GPT-2; also what ByteLevel with use_regex splits by) */
  CODA_BPE_PAT_GPT2 = 0,
  /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
   *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+  (Llama 3) */
  CODA_BPE_PAT_LLAMA3 = 1,
  /* The Llama 3 pattern with \p{N} for \p{N}{1,3} (Qwen2) */
  CODA_BPE_PAT_QWEN2 = 2
} coda_bpe_pattern;

/* The pattern whose regex text is re (n bytes); 0 if it is none of them. */
int coda_bpe_pattern_from_regex(const char *re, size_t n, coda_bpe_pattern *out);

/* Length of the well-formed UTF-8 sequence at s[0..n) (1..4), its code
 * point in *cp; 0 if s[0] does not start one (overlong forms, surrogates
 * and values above U+10FFFF are not well-formed). n > 0. */
size_t coda_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Splits s[0..n) as the pattern's find-all with behavior Isolated does:
 * appends the end offset of each piece to ends[] (grown with realloc;
 * *count pieces so far, *cap its capacity). A byte that is not part of
 * well-formed UTF-8 is a piece of its own, and the pattern is matched on
 * each well-formed run between such bytes as on a whole text. Returns 0
 * if memory runs out. */
int coda_bpe_split(coda_bpe_pattern pat, const uint8_t *s, size_t n, size_t base, size_t **ends,
                   size_t *count, size_t *cap);

#endif
