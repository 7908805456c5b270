/* The pre-tokenizers' split patterns as hand-written matchers (bpe.h).
 * Each matcher returns the end of the match the regex engine (leftmost
 * alternative first, greedy quantifiers with backtracking) finds at a
 * position; the classes are those of Oniguruma on Unicode text: \p{L} the
 * general categories Lu Ll Lt Lm Lo, \p{N} Nd Nl No (from utf8proc), \s the
 * White_Space property. */
#include "data/bpe.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_RE                                                                               \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                            \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

int coda_bpe_pattern_from_regex(const char *re, size_t n, coda_bpe_pattern *out) {
  static const struct { const char *re; coda_bpe_pattern p; } known[] = {
    {GPT2_RE, CODA_BPE_PAT_GPT2}, {LLAMA3_RE, CODA_BPE_PAT_LLAMA3}, {QWEN2_RE, CODA_BPE_PAT_QWEN2}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strlen(known[i].re) == n && !memcmp(known[i].re, re, n)) {
      *out = known[i].p;
      return 1;
    }
  return 0;
}

size_t coda_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t c = s[0];
  if (c < 0x80) { *cp = c; return 1; }
  if (c < 0xC2) return 0;
  if (c < 0xE0) {
    if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
    *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    return 2;
  }
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    uint32_t v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    if (v < 0x800 || (v >= 0xD800 && v < 0xE000)) return 0;
    *cp = v;
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                 ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    if (v < 0x10000 || v > 0x10FFFF) return 0;
    *cp = v;
    return 4;
  }
  return 0;
}

enum { C_L = 1, C_N = 2, C_S = 4, C_NL = 8 /* \r or \n */ };

static int is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static int char_class(uint32_t c) {
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_L;
    if (c >= '0' && c <= '9') return C_N;
    if (c == '\r' || c == '\n') return C_S | C_NL;
    if ((c >= 0x09 && c <= 0x0D) || c == 0x20) return C_S;
    return 0;
  }
  if (is_white_space(c)) return C_S;
  switch (utf8proc_category((utf8proc_int32_t)c)) {
  case UTF8PROC_CATEGORY_LU:
  case UTF8PROC_CATEGORY_LL:
  case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM:
  case UTF8PROC_CATEGORY_LO: return C_L;
  case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_NO: return C_N;
  default: return 0;
  }
}

/* The text being matched: well-formed UTF-8 s[0..n). */
typedef struct run {
  const uint8_t *s;
  size_t n;
} run;

/* Class and length of the character at i (< n). */
static inline int at(const run *r, size_t i, size_t *len, uint32_t *cp_out) {
  uint32_t cp;
  if (r->s[i] < 0x80) {
    cp = r->s[i];
    *len = 1;
  } else {
    *len = coda_utf8_decode(r->s + i, r->n - i, &cp);
  }
  if (cp_out) *cp_out = cp;
  return char_class(cp);
}

/* End of the longest run of characters starting at i whose class satisfies
 * (class & want) != 0 when `in`, == 0 when !in (and has none of `not`). */
static size_t span(const run *r, size_t i, int want, int in, size_t max_chars) {
  size_t k = 0;
  while (i < r->n && k < max_chars) {
    size_t l;
    int c = at(r, i, &l, NULL);
    if (in ? !(c & want) : (c & want)) break;
    i += l;
    k++;
  }
  return i;
}

static int is_other(int c) { return !(c & (C_L | C_N | C_S)); }

/* Case-insensitive ASCII letter test of the byte at i (with the letter
 * ſ U+017F, which folds to s). Returns the bytes taken, 0 if none. */
static size_t fold_is(const run *r, size_t i, char lower, int fold) {
  if (i >= r->n) return 0;
  uint8_t b = r->s[i];
  if (b == (uint8_t)lower) return 1;
  if (!fold) return 0;
  if (b == (uint8_t)(lower - 32)) return 1;
  if (lower == 's' && i + 1 < r->n && b == 0xC5 && r->s[i + 1] == 0xBF) return 2;
  return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i (case-insensitive when fold). */
static size_t contraction(const run *r, size_t i, int fold) {
  if (r->s[i] != '\'' || i + 1 >= r->n) return 0;
  size_t j = i + 1, l;
  if ((l = fold_is(r, j, 's', fold)) || (l = fold_is(r, j, 't', fold)) || (l = fold_is(r, j, 'm', fold)) ||
      (l = fold_is(r, j, 'd', fold)))
    return j + l;
  static const char two[3][2] = {{'r', 'e'}, {'v', 'e'}, {'l', 'l'}};
  for (int k = 0; k < 3; k++) {
    size_t a = fold_is(r, j, two[k][0], fold);
    if (!a) continue;
    size_t b = fold_is(r, j + a, two[k][1], fold);
    if (b) return j + a + b;
  }
  return 0;
}

/* \s+(?!\S)|\s+ at i, the character at i being white space. */
static size_t spaces(const run *r, size_t i) {
  size_t e = i, last = i, k = 0;
  while (e < r->n) {
    size_t l;
    if (!(at(r, e, &l, NULL) & C_S)) break;
    last = e;
    e += l;
    k++;
  }
  if (e == r->n || k == 1) return e;
  return last; /* leave the last white space before the non-space */
}

static size_t match_gpt2(const run *r, size_t i) {
  size_t m = contraction(r, i, 0);
  if (m) return m;
  size_t l0, l1;
  uint32_t cp0;
  int c0 = at(r, i, &l0, &cp0);
  int c1 = -1;
  if (cp0 == ' ' && i + l0 < r->n) c1 = at(r, i + l0, &l1, NULL);
  /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' */
  if (c1 >= 0 && (c1 & C_L)) return span(r, i + l0, C_L, 1, SIZE_MAX);
  if (c0 & C_L) return span(r, i, C_L, 1, SIZE_MAX);
  if (c1 >= 0 && (c1 & C_N)) return span(r, i + l0, C_N, 1, SIZE_MAX);
  if (c0 & C_N) return span(r, i, C_N, 1, SIZE_MAX);
  if (c1 >= 0 && is_other(c1)) return span(r, i + l0, C_L | C_N | C_S, 0, SIZE_MAX);
  if (is_other(c0)) return span(r, i, C_L | C_N | C_S, 0, SIZE_MAX);
  return spaces(r, i);
}

static size_t match_llama3(const run *r, size_t i, size_t max_digits) {
  size_t m = contraction(r, i, 1);
  if (m) return m;
  size_t l0, l1 = 0;
  uint32_t cp0;
  int c0 = at(r, i, &l0, &cp0);
  int c1 = i + l0 < r->n ? at(r, i + l0, &l1, NULL) : -1;
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  if (!(c0 & (C_NL | C_L | C_N)) && c1 >= 0 && (c1 & C_L)) return span(r, i + l0, C_L, 1, SIZE_MAX);
  if (c0 & C_L) return span(r, i, C_L, 1, SIZE_MAX);
  /* \p{N}{1,3} */
  if (c0 & C_N) return span(r, i, C_N, 1, max_digits);
  /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
  size_t j = SIZE_MAX;
  if (cp0 == ' ' && c1 >= 0 && is_other(c1)) j = i + l0;
  else if (is_other(c0)) j = i;
  if (j != SIZE_MAX) {
    size_t e = span(r, j, C_L | C_N | C_S, 0, SIZE_MAX);
    return span(r, e, C_NL, 1, SIZE_MAX);
  }
  /* \s*[\r\n]+ : up to the last \r or \n of the white-space run */
  size_t e = i, nl_end = 0;
  while (e < r->n) {
    size_t l;
    int c = at(r, e, &l, NULL);
    if (!(c & C_S)) break;
    e += l;
    if (c & C_NL) nl_end = e;
  }
  if (nl_end) return nl_end;
  return spaces(r, i);
}

static int push_end(size_t **ends, size_t *count, size_t *cap, size_t e) {
  if (*count == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    size_t *ne = realloc(*ends, nc * sizeof *ne);
    if (!ne) return 0;
    *ends = ne;
    *cap = nc;
  }
  (*ends)[(*count)++] = e;
  return 1;
}

int coda_bpe_split(coda_bpe_pattern pat, const uint8_t *s, size_t n, size_t base, size_t **ends,
                   size_t *count, size_t *cap) {
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    if (s[i] >= 0x80 && !coda_utf8_decode(s + i, n - i, &cp)) {
      if (!push_end(ends, count, cap, base + i + 1)) return 0;
      i++;
      continue;
    }
    /* The well-formed run from i. */
    size_t e = i;
    while (e < n) {
      if (s[e] < 0x80) { e++; continue; }
      size_t l = coda_utf8_decode(s + e, n - e, &cp);
      if (!l) break;
      e += l;
    }
    run r = {s, e};
    while (i < e) {
      size_t m = pat == CODA_BPE_PAT_GPT2 ? match_gpt2(&r, i)
                                          : match_llama3(&r, i, pat == CODA_BPE_PAT_QWEN2 ? 1 : 3);
      if (m <= i) { /* no alternative matched: one character (never with these patterns) */
        uint32_t c;
        m = i + coda_utf8_decode(s + i, e - i, &c);
      }
      if (!push_end(ends, count, cap, base + m)) return 0;
      i = m;
    }
  }
  return 1;
}
