/* What the tokenizer's two halves share (bpe_load.c reads a
 * tokenizer.json into the type below, bpe.c encodes and decodes with it):
 * the byte and pair hash maps, the tokenizer's struct, the byte-level
 * alphabet. Small helpers, inline. */
#ifndef CODA_DATA_BPE_IMPL_H
#define CODA_DATA_BPE_IMPL_H

#include "coda_tokenizer.h"

#include "base/internal.h"
#include "data/bpe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- byte hash map */

/* Byte strings -> int64, open addressing; the keys are kept in a pool. */
typedef struct smap_slot {
  uint64_t hash; /* 0: empty */
  size_t off;
  size_t len;
  int64_t val;
} smap_slot;

typedef struct smap {
  smap_slot *slots;
  size_t cap, count;
  uint8_t *pool;
  size_t pool_len, pool_cap;
} smap;

static inline uint64_t smap_hash(const void *k, size_t n) { return coda_fnv1a64(k, n, 0) | 1; }

static inline int smap_grow(smap *m) {
  size_t cap = m->cap ? m->cap * 2 : 1024;
  smap_slot *s = calloc(cap, sizeof *s);
  if (!s) return 0;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i].hash) continue;
    size_t j = m->slots[i].hash & (cap - 1);
    while (s[j].hash) j = (j + 1) & (cap - 1);
    s[j] = m->slots[i];
  }
  free(m->slots);
  m->slots = s;
  m->cap = cap;
  return 1;
}

static inline smap_slot *smap_find(const smap *m, const void *k, size_t n, uint64_t h) {
  if (!m->cap) return NULL;
  size_t j = h & (m->cap - 1);
  while (m->slots[j].hash) {
    smap_slot *s = &m->slots[j];
    if (s->hash == h && s->len == n && !memcmp(m->pool + s->off, k, n)) return s;
    j = (j + 1) & (m->cap - 1);
  }
  return NULL;
}

static inline int smap_get(const smap *m, const void *k, size_t n, int64_t *v) {
  smap_slot *s = smap_find(m, k, n, smap_hash(k, n));
  if (!s) return 0;
  *v = s->val;
  return 1;
}

/* Inserts k -> v unless k is present (then *existing, if given, is set). */
static inline int smap_put(smap *m, const void *k, size_t n, int64_t v, int *existing) {
  uint64_t h = smap_hash(k, n);
  smap_slot *f = smap_find(m, k, n, h);
  if (existing) *existing = f != NULL;
  if (f) return 1;
  if ((m->count + 1) * 4 > m->cap * 3 && !smap_grow(m)) return 0;
  if (m->pool_len + n > m->pool_cap) {
    size_t pc = m->pool_cap ? m->pool_cap : 4096;
    while (pc < m->pool_len + n) pc *= 2;
    uint8_t *p = realloc(m->pool, pc);
    if (!p) return 0;
    m->pool = p;
    m->pool_cap = pc;
  }
  if (n) memcpy(m->pool + m->pool_len, k, n);
  size_t j = h & (m->cap - 1);
  while (m->slots[j].hash) j = (j + 1) & (m->cap - 1);
  m->slots[j] = (smap_slot){h, m->pool_len, n, v};
  m->pool_len += n;
  m->count++;
  return 1;
}

static inline void smap_clear(smap *m) {
  if (m->slots) memset(m->slots, 0, m->cap * sizeof *m->slots);
  m->count = 0;
  m->pool_len = 0;
}

static inline void smap_free(smap *m) {
  free(m->slots);
  free(m->pool);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------- pair hash map */

/* (left id, right id) -> (rank, merged id). */
typedef struct pair_slot {
  uint64_t key; /* UINT64_MAX: empty */
  uint32_t rank;
  int32_t id;
} pair_slot;

typedef struct pmap {
  pair_slot *slots;
  size_t cap, count;
} pmap;

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static inline size_t pair_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k;
}

static inline int pmap_init(pmap *m, size_t n) {
  size_t cap = 1024;
  while (cap < n * 2) cap *= 2;
  m->slots = malloc(cap * sizeof *m->slots);
  if (!m->slots) return 0;
  for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
  m->cap = cap;
  m->count = 0;
  return 1;
}

/* Keeps the first (lowest-rank) entry of a pair. */
static inline void pmap_put(pmap *m, uint64_t k, uint32_t rank, int32_t id) {
  size_t j = pair_hash(k) & (m->cap - 1);
  while (m->slots[j].key != UINT64_MAX) {
    if (m->slots[j].key == k) return;
    j = (j + 1) & (m->cap - 1);
  }
  m->slots[j] = (pair_slot){k, rank, id};
  m->count++;
}

static inline const pair_slot *pmap_get(const pmap *m, uint64_t k) {
  size_t j = pair_hash(k) & (m->cap - 1);
  while (m->slots[j].key != UINT64_MAX) {
    if (m->slots[j].key == k) return &m->slots[j];
    j = (j + 1) & (m->cap - 1);
  }
  return NULL;
}

/* ------------------------------------------------------------ the type */

#define MAX_STEPS 16
#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES 65536

typedef enum { STEP_SPLIT = 0, STEP_BYTELEVEL = 1 } step_kind;

typedef struct step {
  step_kind kind;
  coda_bpe_pattern pat;  /* SPLIT, or BYTELEVEL with use_regex */
  int use_regex;         /* BYTELEVEL */
  int add_prefix_space;  /* BYTELEVEL */
} step;

typedef struct added_token {
  const uint8_t *bytes; /* content (in tok->added_pool) */
  size_t len;
  int32_t id;
  int special;
  int normalized;
} added_token;

/* One matching pass over the added tokens: those of one `normalized`
 * value, by first byte, longest first. */
typedef struct added_pass {
  size_t *order; /* indices into tok->added */
  size_t n;
  size_t first[257]; /* order[first[b]..first[b+1]) start with byte b */
} added_pass;

typedef struct sym {
  int32_t id;
  int32_t prev, next;
  int32_t alive;
} sym;

typedef struct heap_item {
  uint32_t rank;
  int32_t pos;
} heap_item;

struct coda_tokenizer_s {
  coda_context ctx;
  size_t vocab_size;
  /* decoding: the bytes of each id, and whether it is a special token */
  uint8_t *dec_bytes;
  size_t *dec_off; /* vocab_size + 1 */
  uint8_t *is_special;
  uint8_t *has_token;
  int32_t byte_id[256]; /* id of each single byte, -1 if none */
  int32_t unk_id;
  int ignore_merges;
  int nfc; /* normalizer NFC */
  smap words;  /* bytes of a vocabulary entry -> id */
  smap names;  /* the entry as written (and added tokens' content) -> id */
  pmap merges;
  added_token *added;
  size_t nadded;
  uint8_t *added_pool;
  added_pass pass[2]; /* [0]: not normalized, [1]: normalized */
  step steps[MAX_STEPS];
  int nsteps;
  int32_t *pre_ids, *post_ids;
  size_t npre, npost;
  /* the word cache: bytes -> (offset << 16 | count) into cache_ids */
  smap cache;
  int32_t *cache_ids;
  size_t cache_len, cache_cap;
  /* scratch of encode */
  int32_t *out;
  size_t out_len, out_cap;
  int oom;
  size_t *ends_a, *ends_b;
  size_t cap_a, cap_b;
  uint8_t *prefixed;
  size_t prefixed_cap;
  sym *syms;
  size_t syms_cap;
  heap_item *heap;
  size_t heap_cap;
};

/* ------------------------------------------------------ byte alphabet */

/* GPT-2's byte-level alphabet: bytes 33..126, 161..172 and 174..255 stand
 * for themselves, the others for U+0100 onwards in byte order. */
static inline void byte_alphabet(uint32_t cp_of[256]) {
  uint32_t next = 256;
  for (int b = 0; b < 256; b++) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) cp_of[b] = (uint32_t)b;
    else cp_of[b] = next++;
  }
}

/* The byte a character of the alphabet stands for, -1 if none. */
static inline int alphabet_byte(uint32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
  if (cp < 256 || cp >= 256 + 68) return -1;
  uint32_t cp_of[256];
  byte_alphabet(cp_of);
  for (int b = 0; b < 256; b++)
    if (cp_of[b] == cp) return b;
  return -1;
}

/* Maps a string of the alphabet to its bytes (out has room for n bytes);
 * returns the length, or SIZE_MAX if a character is not of the alphabet
 * (or the string is not UTF-8). */
static inline size_t from_alphabet(const uint8_t *s, size_t n, uint8_t *out, const int16_t *rev) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t l = coda_utf8_decode(s + i, n - i, &cp);
    if (!l || cp >= 256 + 68 || rev[cp] < 0) return SIZE_MAX;
    out[k++] = (uint8_t)rev[cp];
    i += l;
  }
  return k;
}

#endif
