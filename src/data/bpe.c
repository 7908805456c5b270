/* The byte-level BPE tokenizer of include/coda_tokenizer.h: loading a
 * tokenizer.json (bpe_load.c), encoding (added tokens, pre-tokenizer splits, BPE merges
 * by rank with a heap over a linked list of symbols, a cache of words) and
 * decoding.
 *
 * The model works on bytes: the vocabulary's strings, written in the
 * byte-level alphabet (each byte as one printable character), are turned
 * back into the bytes they stand for when the file is read, so a word is
 * merged from its bytes without mapping it through the alphabet. */
#include "coda_tokenizer.h"

#include "data/bpe_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ encoding */

static inline void out_push(coda_tokenizer tok, int32_t id) {
  if (tok->out_len == tok->out_cap) {
    size_t cap = tok->out_cap ? tok->out_cap * 2 : 1024;
    int32_t *o = realloc(tok->out, cap * sizeof *o);
    if (!o) {
      tok->oom = 1;
      return;
    }
    tok->out = o;
    tok->out_cap = cap;
  }
  tok->out[tok->out_len++] = id;
}

static int ensure(void **p, size_t *cap, size_t n, size_t elem) {
  if (n <= *cap) return 1;
  size_t c = *cap ? *cap : 64;
  while (c < n) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return 0;
  *p = q;
  *cap = c;
  return 1;
}

/* The heap of candidate merges: rank in the high half, position in the
 * low, so the smallest key is the lowest rank, leftmost. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p] <= v) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
  uint64_t top = h[0], v = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m) break;
    if (c + 1 < m && h[c + 1] < h[c]) c++;
    if (h[c] >= v) break;
    h[i] = h[c];
    i = c;
  }
  if (m) h[i] = v;
  return top;
}

/* BPE of one pre-token's bytes; appends its ids. */
static void bpe_word(coda_tokenizer tok, const uint8_t *w, size_t n) {
  if (!n) return;
  if (n == 1) {
    int32_t id = tok->byte_id[w[0]];
    if (id < 0) id = tok->unk_id;
    if (id >= 0) out_push(tok, id);
    return;
  }
  int64_t v;
  if (tok->ignore_merges && smap_get(&tok->words, w, n, &v)) {
    out_push(tok, (int32_t)v);
    return;
  }
  int cacheable = n <= CACHE_MAX_WORD;
  if (cacheable && smap_get(&tok->cache, w, n, &v)) {
    size_t off = (size_t)(v >> 16), cnt = (size_t)(v & 0xFFFF);
    for (size_t i = 0; i < cnt; i++) out_push(tok, tok->cache_ids[off + i]);
    return;
  }
  if (!ensure((void **)&tok->syms, &tok->syms_cap, n, sizeof(sym)) ||
      !ensure((void **)&tok->heap, &tok->heap_cap, 2 * n, sizeof(uint64_t))) {
    tok->oom = 1;
    return;
  }
  sym *s = tok->syms;
  uint64_t *heap = (uint64_t *)tok->heap;
  int32_t ns = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = tok->byte_id[w[i]];
    if (id < 0) {
      if (tok->unk_id < 0) continue; /* a byte without a token is left out */
      id = tok->unk_id;
    }
    s[ns] = (sym){id, ns - 1, ns + 1, 1};
    ns++;
  }
  if (!ns) return;
  s[ns - 1].next = -1;
  size_t hn = 0;
  for (int32_t i = 0; i + 1 < ns; i++) {
    const pair_slot *p = pmap_get(&tok->merges, pair_key(s[i].id, s[i + 1].id));
    if (p) heap_push(heap, &hn, ((uint64_t)p->rank << 32) | (uint32_t)i);
  }
  while (hn) {
    uint64_t top = heap_pop(heap, &hn);
    uint32_t rank = (uint32_t)(top >> 32);
    int32_t pos = (int32_t)(uint32_t)top;
    sym *a = &s[pos];
    if (!a->alive || a->next < 0) continue;
    const pair_slot *p = pmap_get(&tok->merges, pair_key(a->id, s[a->next].id));
    if (!p || p->rank != rank) continue; /* stale: a neighbour changed */
    a->id = p->id;
    s[a->next].alive = 0;
    a->next = s[a->next].next;
    if (a->next >= 0) s[a->next].prev = pos;
    if (hn + 2 > tok->heap_cap) { /* cannot happen: at most one push per pair and merge */
      tok->oom = 1;
      return;
    }
    if (a->prev >= 0) {
      const pair_slot *q = pmap_get(&tok->merges, pair_key(s[a->prev].id, a->id));
      if (q) heap_push(heap, &hn, ((uint64_t)q->rank << 32) | (uint32_t)a->prev);
    }
    if (a->next >= 0) {
      const pair_slot *q = pmap_get(&tok->merges, pair_key(a->id, s[a->next].id));
      if (q) heap_push(heap, &hn, ((uint64_t)q->rank << 32) | (uint32_t)pos);
    }
  }
  size_t first = tok->out_len;
  for (int32_t i = 0; i >= 0; i = s[i].next) out_push(tok, s[i].id);
  if (!cacheable || tok->oom) return;
  size_t cnt = tok->out_len - first;
  if (tok->cache.count >= CACHE_MAX_ENTRIES || tok->cache_len + cnt > ((size_t)1 << 40)) {
    smap_clear(&tok->cache);
    tok->cache_len = 0;
  }
  if (!ensure((void **)&tok->cache_ids, &tok->cache_cap, tok->cache_len + cnt, sizeof(int32_t))) return;
  memcpy(tok->cache_ids + tok->cache_len, tok->out + first, cnt * sizeof(int32_t));
  if (smap_put(&tok->cache, w, n, (int64_t)((tok->cache_len << 16) | cnt), NULL)) tok->cache_len += cnt;
}

/* Splits every piece of (base, ends[0..*count)) by a pattern, into
 * tok->ends_b, then swaps it into tok->ends_a. */
static int split_pieces(coda_tokenizer tok, coda_bpe_pattern pat, const uint8_t *base, size_t *count) {
  size_t nb = 0, a = 0;
  for (size_t i = 0; i < *count; i++) {
    size_t b = tok->ends_a[i];
    if (!coda_bpe_split(pat, base + a, b - a, a, &tok->ends_b, &nb, &tok->cap_b)) return 0;
    a = b;
  }
  size_t *t = tok->ends_a, tc = tok->cap_a;
  tok->ends_a = tok->ends_b;
  tok->cap_a = tok->cap_b;
  tok->ends_b = t;
  tok->cap_b = tc;
  *count = nb;
  return 1;
}

/* Pre-tokenizes one piece of text between added tokens and encodes it. */
static void encode_segment(coda_tokenizer tok, const uint8_t *s, size_t n) {
  if (!n) return;
  if (!ensure((void **)&tok->ends_a, &tok->cap_a, 1, sizeof(size_t))) {
    tok->oom = 1;
    return;
  }
  tok->ends_a[0] = n;
  size_t count = 1;
  const uint8_t *base = s;
  for (int k = 0; k < tok->nsteps; k++) {
    const step *st = &tok->steps[k];
    if (st->kind == STEP_BYTELEVEL && st->add_prefix_space) {
      /* Each piece that does not start with a space gets one. */
      size_t extra = 0, a = 0;
      for (size_t i = 0; i < count; i++) {
        if (tok->ends_a[i] > a && base[a] != ' ') extra++;
        a = tok->ends_a[i];
      }
      if (extra) {
        size_t total = a + extra;
        if (!ensure((void **)&tok->prefixed, &tok->prefixed_cap, total, 1)) {
          tok->oom = 1;
          return;
        }
        size_t q = 0;
        a = 0;
        for (size_t i = 0; i < count; i++) {
          size_t b = tok->ends_a[i];
          if (b > a && base[a] != ' ') tok->prefixed[q++] = ' ';
          memcpy(tok->prefixed + q, base + a, b - a);
          q += b - a;
          a = b;
          tok->ends_a[i] = q;
        }
        base = tok->prefixed;
      }
    }
    if (st->kind == STEP_SPLIT || st->use_regex) {
      if (!split_pieces(tok, st->pat, base, &count)) {
        tok->oom = 1;
        return;
      }
    }
  }
  size_t a = 0;
  for (size_t i = 0; i < count; i++) {
    bpe_word(tok, base + a, tok->ends_a[i] - a);
    a = tok->ends_a[i];
  }
}

/* Finds the added tokens of pass p in s[0..n) (leftmost, then longest),
 * encodes them as their ids and hands the text between them on: to pass 1
 * after pass 0, to the pre-tokenizer after pass 1. */
static void added_split(coda_tokenizer tok, int p, const uint8_t *s, size_t n);

/* The normalizer on the text between non-normalized added tokens, then the
 * second pass. NFC applies to each well-formed UTF-8 run; other bytes stay. */
static void normalize_then_split(coda_tokenizer tok, const uint8_t *s, size_t n) {
  if (!tok->nfc || !n) {
    added_split(tok, 1, s, n);
    return;
  }
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  size_t i = 0;
  while (i < n && !tok->oom) {
    uint32_t cp;
    size_t e = i;
    while (e < n) {
      size_t l = s[e] < 0x80 ? 1 : coda_utf8_decode(s + e, n - e, &cp);
      if (!l) break;
      e += l;
    }
    const uint8_t *piece = s + i;
    size_t plen = e - i;
    utf8proc_uint8_t *norm = NULL;
    if (plen) {
      utf8proc_ssize_t r = utf8proc_map(piece, (utf8proc_ssize_t)plen, &norm, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
      if (r < 0) {
        tok->oom = r == UTF8PROC_ERROR_NOMEM;
        norm = NULL;
      } else {
        piece = norm;
        plen = (size_t)r;
      }
    }
    if (!ensure((void **)&buf, &cap, len + plen + 1, 1)) {
      tok->oom = 1;
      free(norm);
      break;
    }
    memcpy(buf + len, piece, plen);
    len += plen;
    free(norm);
    if (e < n) buf[len++] = s[e++];
    i = e;
  }
  if (!tok->oom) added_split(tok, 1, buf, len);
  free(buf);
}

static void added_split(coda_tokenizer tok, int p, const uint8_t *s, size_t n) {
  const added_pass *ap = &tok->pass[p];
  size_t seg = 0, i = 0;
  if (ap->n) {
    while (i < n) {
      uint8_t c = s[i];
      size_t lo = ap->first[c], hi = ap->first[c + 1];
      size_t k;
      for (k = lo; k < hi; k++) {
        const added_token *t = &tok->added[ap->order[k]];
        if (t->len <= n - i && !memcmp(t->bytes, s + i, t->len)) break;
      }
      if (k == hi) {
        i++;
        continue;
      }
      const added_token *t = &tok->added[ap->order[k]];
      if (p == 0) normalize_then_split(tok, s + seg, i - seg);
      else encode_segment(tok, s + seg, i - seg);
      out_push(tok, t->id);
      i += t->len;
      seg = i;
    }
  }
  if (p == 0) normalize_then_split(tok, s + seg, n - seg);
  else encode_segment(tok, s + seg, n - seg);
}

static coda_status encode_into_scratch(coda_tokenizer tok, const void *text, size_t len, unsigned flags) {
  if (!text && len) return coda_fail(tok->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_encode: text is NULL");
  tok->out_len = 0;
  tok->oom = 0;
  if (flags & CODA_TOKENIZER_ADD_SPECIAL)
    for (size_t i = 0; i < tok->npre; i++) out_push(tok, tok->pre_ids[i]);
  if (len) added_split(tok, 0, text, len);
  if (flags & CODA_TOKENIZER_ADD_SPECIAL)
    for (size_t i = 0; i < tok->npost; i++) out_push(tok, tok->post_ids[i]);
  if (tok->oom) return coda_fail(tok->ctx, CODA_ERR_OUT_OF_MEMORY, "coda_tokenizer_encode: out of memory");
  return CODA_OK;
}

coda_status coda_tokenizer_encode(coda_tokenizer tok, const void *text, size_t len, unsigned flags,
                                  int32_t *ids, size_t cap, size_t *n) {
  if (!tok || !n || (cap && !ids)) return coda_fail(tok ? tok->ctx : NULL, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_encode: NULL argument");
  coda_status st = encode_into_scratch(tok, text, len, flags);
  if (st) return st;
  *n = tok->out_len;
  size_t k = tok->out_len < cap ? tok->out_len : cap;
  if (k) memcpy(ids, tok->out, k * sizeof *ids);
  if (tok->out_len > cap)
    return coda_fail(tok->ctx, CODA_ERR_OVERFLOW, "coda_tokenizer_encode: %zu ids do not fit in %zu", tok->out_len, cap);
  return CODA_OK;
}

coda_status coda_tokenizer_encode_alloc(coda_tokenizer tok, const void *text, size_t len, unsigned flags,
                                        int32_t **ids, size_t *cap, size_t *n) {
  if (!tok || !ids || !cap || !n) return coda_fail(tok ? tok->ctx : NULL, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_encode_alloc: NULL argument");
  coda_status st = encode_into_scratch(tok, text, len, flags);
  if (st) return st;
  if (!ensure((void **)ids, cap, tok->out_len ? tok->out_len : 1, sizeof(int32_t)))
    return coda_fail(tok->ctx, CODA_ERR_OUT_OF_MEMORY, "coda_tokenizer_encode_alloc: out of memory");
  if (tok->out_len) memcpy(*ids, tok->out, tok->out_len * sizeof(int32_t));
  *n = tok->out_len;
  return CODA_OK;
}

/* ------------------------------------------------------------ decoding */

static coda_status decode_len(coda_tokenizer tok, const int32_t *ids, size_t n, unsigned flags, size_t *len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || (size_t)id >= tok->vocab_size || !tok->has_token[id])
      return coda_fail(tok->ctx, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_decode: ids[%zu] = %d is not a token id", i, (int)id);
    if ((flags & CODA_TOKENIZER_SKIP_SPECIAL) && tok->is_special[id]) continue;
    total += tok->dec_off[id + 1] - tok->dec_off[id];
  }
  *len = total;
  return CODA_OK;
}

static void decode_write(coda_tokenizer tok, const int32_t *ids, size_t n, unsigned flags, char *out, size_t cap) {
  size_t q = 0;
  for (size_t i = 0; i < n && q < cap; i++) {
    int32_t id = ids[i];
    if ((flags & CODA_TOKENIZER_SKIP_SPECIAL) && tok->is_special[id]) continue;
    size_t l = tok->dec_off[id + 1] - tok->dec_off[id];
    if (l > cap - q) l = cap - q;
    memcpy(out + q, tok->dec_bytes + tok->dec_off[id], l);
    q += l;
  }
}

coda_status coda_tokenizer_decode(coda_tokenizer tok, const int32_t *ids, size_t n, unsigned flags, char *out,
                                  size_t cap, size_t *len) {
  if (!tok || !len || (n && !ids) || (cap && !out))
    return coda_fail(tok ? tok->ctx : NULL, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_decode: NULL argument");
  coda_status st = decode_len(tok, ids, n, flags, len);
  if (st) return st;
  decode_write(tok, ids, n, flags, out, cap);
  if (*len > cap) return coda_fail(tok->ctx, CODA_ERR_OVERFLOW, "coda_tokenizer_decode: %zu bytes do not fit in %zu", *len, cap);
  return CODA_OK;
}

coda_status coda_tokenizer_decode_alloc(coda_tokenizer tok, const int32_t *ids, size_t n, unsigned flags,
                                        char **out, size_t *cap, size_t *len) {
  if (!tok || !len || !out || !cap || (n && !ids))
    return coda_fail(tok ? tok->ctx : NULL, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_decode_alloc: NULL argument");
  coda_status st = decode_len(tok, ids, n, flags, len);
  if (st) return st;
  if (!ensure((void **)out, cap, *len + 1, 1))
    return coda_fail(tok->ctx, CODA_ERR_OUT_OF_MEMORY, "coda_tokenizer_decode_alloc: out of memory");
  decode_write(tok, ids, n, flags, *out, *len);
  (*out)[*len] = '\0';
  return CODA_OK;
}
