/* Loading a Hugging Face tokenizer.json into the byte-level BPE tokenizer
 * (bpe_impl.h): the model's vocabulary and merges, the pre-tokenizer, the
 * post-processor's special tokens, the added tokens; anything else is
 * refused by name. */
#include "data/bpe_impl.h"
#include "io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------- loading */

typedef struct loader {
  coda_context ctx;
  coda_tokenizer tok;
  int16_t rev[256 + 68]; /* alphabet character -> byte */
} loader;

#define PARSE_FAIL(ld, ...) coda_fail((ld)->ctx, CODA_ERR_PARSE, "tokenizer.json: " __VA_ARGS__)
#define REFUSE(ld, ...) coda_fail((ld)->ctx, CODA_ERR_NOT_SUPPORTED, "tokenizer.json: " __VA_ARGS__)

static int is_null(const coda_json *v) { return !v || v->kind == CODA_JSON_NULL; }
static int is_true(const coda_json *v) { return v && v->kind == CODA_JSON_TRUE; }

static coda_status want_kind(loader *ld, const coda_json *v, coda_json_kind k, const char *path) {
  if (!v) return PARSE_FAIL(ld, "%s: missing (expected %s)", path, coda_json_kind_name(k));
  int ok = v->kind == k || (k == CODA_JSON_TRUE && v->kind == CODA_JSON_FALSE);
  if (!ok) return PARSE_FAIL(ld, "%s: expected %s, found %s", path, coda_json_kind_name(k), coda_json_kind_name(v->kind));
  return CODA_OK;
}

static coda_status want_id(loader *ld, const coda_json *v, const char *path, int32_t *id) {
  if (!v || v->kind != CODA_JSON_NUMBER || v->u.num < 0 || v->u.num > 2147483647.0 || v->u.num != (double)(int64_t)v->u.num)
    return PARSE_FAIL(ld, "%s: expected a token id (an integer >= 0)", path);
  *id = (int32_t)v->u.num;
  return CODA_OK;
}

/* A boolean option that must be false (absent or null counts as false). */
static coda_status refuse_true(loader *ld, const coda_json *obj, const char *key, const char *path) {
  if (is_true(coda_json_get(obj, key))) return REFUSE(ld, "%s.%s: true is not supported", path, key);
  return CODA_OK;
}

/* A string option that must be null or empty. */
static coda_status refuse_string(loader *ld, const coda_json *obj, const char *key, const char *path) {
  const coda_json *v = coda_json_get(obj, key);
  if (is_null(v) || (v->kind == CODA_JSON_STRING && v->n == 0)) return CODA_OK;
  return REFUSE(ld, "%s.%s: only null is supported", path, key);
}

static coda_status read_type(loader *ld, const coda_json *v, const char *path, const char **type) {
  const coda_json *t = coda_json_get(v, "type");
  char p[256];
  snprintf(p, sizeof p, "%s.type", path);
  coda_status st = want_kind(ld, t, CODA_JSON_STRING, p);
  if (st) return st;
  if (strlen(t->u.str) != t->n) return PARSE_FAIL(ld, "%s: the string holds a NUL byte", p);
  *type = t->u.str;
  return CODA_OK;
}

/* The model's kind and settings: a BPE model without dropout, a subword
 * prefix or suffix, or byte fallback (coda reads no other). */
static coda_status check_model_kind(loader *ld, const coda_json *model) {
  coda_tokenizer tok = ld->tok;
  coda_status st = want_kind(ld, model, CODA_JSON_OBJECT, "model");
  if (st) return st;
  const coda_json *type = coda_json_get(model, "type");
  if (type && !coda_json_is_str(type, "BPE")) {
    if (type->kind != CODA_JSON_STRING) return PARSE_FAIL(ld, "model.type: expected a string");
    return REFUSE(ld, "model.type: \"%s\" is not supported (coda reads \"BPE\" models)", type->u.str);
  }
  if (!type && !coda_json_get(model, "merges"))
    return REFUSE(ld, "model: no type and no merges (coda reads \"BPE\" models)");
  if (!is_null(coda_json_get(model, "dropout"))) return REFUSE(ld, "model.dropout: only null is supported");
  if ((st = refuse_string(ld, model, "continuing_subword_prefix", "model")) ||
      (st = refuse_string(ld, model, "end_of_word_suffix", "model")) ||
      (st = refuse_true(ld, model, "byte_fallback", "model")))
    return st;
  tok->ignore_merges = is_true(coda_json_get(model, "ignore_merges"));
  return CODA_OK;
}

/* The vocabulary's size: one slot per id up to the largest id of the
 * vocabulary and the added tokens. */
static coda_status count_ids(loader *ld, const coda_json *vocab, const coda_json *added) {
  coda_tokenizer tok = ld->tok;
  coda_status st;
  size_t max_id = 0;
  for (size_t i = 0; i < vocab->n; i++) {
    int32_t id = 0;
    char p[64];
    snprintf(p, sizeof p, "model.vocab[%zu]", i);
    if ((st = want_id(ld, &vocab->u.members[i].value, p, &id))) return st;
    if ((size_t)id + 1 > max_id) max_id = (size_t)id + 1;
  }
  if (added) {
    for (size_t i = 0; i < added->n; i++) {
      char p[64];
      snprintf(p, sizeof p, "added_tokens[%zu].id", i);
      int32_t id = 0;
      if ((st = want_kind(ld, &added->u.items[i], CODA_JSON_OBJECT, p))) return st;
      if ((st = want_id(ld, coda_json_get(&added->u.items[i], "id"), p, &id))) return st;
      if ((size_t)id + 1 > max_id) max_id = (size_t)id + 1;
    }
  }
  if (!max_id) return PARSE_FAIL(ld, "model.vocab: empty");
  /* One slot per id up to the largest: ids far above the number of
   * entries would make a small file allocate gigabytes. */
  const size_t entries = vocab->n + (added ? added->n : 0);
  if (max_id > 4 * entries + 4096)
    return REFUSE(ld, "model.vocab: the largest id, %zu, is far above the %zu entries of the vocabulary and "
                  "the added tokens (coda keeps one slot per id: ids must be nearly dense)", max_id - 1, entries);
  tok->vocab_size = max_id;
  return CODA_OK;
}

/* The decoding table while it is built: id's bytes at start[id] (len[id]
 * of them) of tok->dec_bytes, in file order until lay_out_ids. */
typedef struct dec_build {
  size_t *start, *len;
  uint8_t *tmp; /* an entry's bytes, decoded */
  size_t pos;   /* bytes written */
} dec_build;

static void dec_put(coda_tokenizer tok, dec_build *b, int32_t id, size_t k) {
  memcpy(tok->dec_bytes + b->pos, b->tmp, k);
  b->start[id] = b->pos;
  b->len[id] = k;
  tok->has_token[id] = 1;
  b->pos += k;
}

/* The vocabulary's entries: the alphabet's bytes of each, or the UTF-8
 * text of an entry with a character outside the alphabet (as the ByteLevel
 * decoder does). An out-of-memory status is returned unreported. */
static coda_status read_vocab_entries(loader *ld, const coda_json *vocab, dec_build *b) {
  coda_tokenizer tok = ld->tok;
  coda_status st = CODA_OK;
  for (size_t i = 0; i < vocab->n && !st; i++) {
    const coda_json_member *m = &vocab->u.members[i];
    int32_t id = (int32_t)m->value.u.num;
    size_t k = from_alphabet((const uint8_t *)m->key, m->key_len, b->tmp, ld->rev);
    if (k != SIZE_MAX) {
      int dup;
      if (!smap_put(&tok->words, b->tmp, k, id, &dup)) st = CODA_ERR_OUT_OF_MEMORY;
      if (k == 1 && tok->byte_id[b->tmp[0]] < 0) tok->byte_id[b->tmp[0]] = id;
    } else {
      memcpy(b->tmp, m->key, m->key_len);
      k = m->key_len;
    }
    int twice = 0;
    if (!smap_put(&tok->names, m->key, m->key_len, id, &twice)) st = CODA_ERR_OUT_OF_MEMORY;
    else if (twice) st = PARSE_FAIL(ld, "model.vocab[%zu]: the token \"%s\" is listed twice", i, m->key);
    dec_put(tok, b, id, k);
  }
  return st;
}

/* Added tokens: their content decodes as vocabulary entries do. */
static coda_status read_added_tokens(loader *ld, const coda_json *added, size_t total,
                                     dec_build *b) {
  coda_tokenizer tok = ld->tok;
  tok->added = calloc(added->n, sizeof *tok->added);
  tok->added_pool = malloc(total + 1);
  if (!tok->added || !tok->added_pool)
    return coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  coda_status st = CODA_OK;
  size_t apos = 0;
  for (size_t i = 0; i < added->n && !st; i++) {
    const coda_json *a = &added->u.items[i];
    char p[64];
    snprintf(p, sizeof p, "added_tokens[%zu]", i);
    const coda_json *c = coda_json_get(a, "content");
    char pc[80];
    snprintf(pc, sizeof pc, "%s.content", p);
    if ((st = want_kind(ld, c, CODA_JSON_STRING, pc))) break;
    if (!c->n) { st = PARSE_FAIL(ld, "%s: empty", pc); break; }
    if ((st = refuse_true(ld, a, "single_word", p)) || (st = refuse_true(ld, a, "lstrip", p)) ||
        (st = refuse_true(ld, a, "rstrip", p)))
      break;
    int32_t id = (int32_t)coda_json_get(a, "id")->u.num;
    added_token *t = &tok->added[tok->nadded++];
    memcpy(tok->added_pool + apos, c->u.str, c->n);
    t->bytes = tok->added_pool + apos;
    t->len = c->n;
    apos += c->n;
    t->id = id;
    t->special = is_true(coda_json_get(a, "special"));
    const coda_json *norm = coda_json_get(a, "normalized");
    t->normalized = norm ? is_true(norm) : !t->special;
    tok->is_special[id] = (uint8_t)t->special;
    size_t k = from_alphabet(t->bytes, t->len, b->tmp, ld->rev);
    if (k == SIZE_MAX) {
      memcpy(b->tmp, t->bytes, t->len);
      k = t->len;
    }
    dec_put(tok, b, id, k);
    if (!smap_put(&tok->names, t->bytes, t->len, id, NULL)) st = coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  }
  return st;
}

/* The bytes laid out in id order. */
static coda_status lay_out_ids(loader *ld, dec_build *b) {
  coda_tokenizer tok = ld->tok;
  const size_t max_id = tok->vocab_size;
  uint8_t *ordered = malloc(b->pos + 1);
  if (!ordered) return coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  size_t q = 0;
  for (size_t id = 0; id < max_id; id++) {
    tok->dec_off[id] = q;
    if (tok->has_token[id]) {
      memcpy(ordered + q, tok->dec_bytes + b->start[id], b->len[id]);
      q += b->len[id];
    }
  }
  tok->dec_off[max_id] = q;
  free(tok->dec_bytes);
  tok->dec_bytes = ordered;
  return CODA_OK;
}

/* The decoding table of every id (tok->dec_bytes, dec_off), the names
 * and byte strings of the vocabulary, the added tokens. */
static coda_status load_vocab(loader *ld, const coda_json *vocab, const coda_json *added) {
  coda_tokenizer tok = ld->tok;
  const size_t max_id = tok->vocab_size;
  size_t total = 0;
  for (size_t i = 0; i < vocab->n; i++) total += vocab->u.members[i].key_len;
  if (added)
    for (size_t i = 0; i < added->n; i++) {
      const coda_json *c = coda_json_get(&added->u.items[i], "content");
      if (c && c->kind == CODA_JSON_STRING) total += c->n;
    }
  tok->dec_bytes = malloc(total + 1);
  tok->dec_off = calloc(max_id + 1, sizeof *tok->dec_off);
  tok->is_special = calloc(max_id, 1);
  tok->has_token = calloc(max_id, 1);
  dec_build b = {calloc(max_id, sizeof(size_t)), calloc(max_id, sizeof(size_t)), malloc(total + 1), 0};
  coda_status st;
  if (!tok->dec_bytes || !tok->dec_off || !tok->is_special || !tok->has_token || !b.start ||
      !b.len || !b.tmp) {
    st = coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory reading the vocabulary");
  } else {
    st = read_vocab_entries(ld, vocab, &b);
    if (st && st != CODA_ERR_PARSE) /* a parse failure's message names the entry */
      st = coda_fail(ld->ctx, st, "tokenizer: out of memory reading the vocabulary");
    if (!st && added && added->n) st = read_added_tokens(ld, added, total, &b);
    if (!st) st = lay_out_ids(ld, &b);
  }
  free(b.start); free(b.len); free(b.tmp);
  return st;
}

static coda_status read_unk(loader *ld, const coda_json *model) {
  coda_tokenizer tok = ld->tok;
  const coda_json *unk = coda_json_get(model, "unk_token");
  tok->unk_id = -1;
  if (!is_null(unk)) {
    int64_t v;
    if (unk->kind != CODA_JSON_STRING) return PARSE_FAIL(ld, "model.unk_token: expected a string or null");
    if (!smap_get(&tok->names, unk->u.str, unk->n, &v))
      return PARSE_FAIL(ld, "model.unk_token: \"%s\" is not in the vocabulary", unk->u.str);
    tok->unk_id = (int32_t)v;
  }

  return CODA_OK;
}

static coda_status read_merges(loader *ld, const coda_json *model) {
  coda_tokenizer tok = ld->tok;
  coda_status st;
  /* "a b" strings or [a, b] pairs; the rank is the position. */
  const coda_json *merges = coda_json_get(model, "merges");
  if ((st = want_kind(ld, merges, CODA_JSON_ARRAY, "model.merges"))) return st;
  if (!pmap_init(&tok->merges, merges->n)) return coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  char *joined = NULL;
  size_t joined_cap = 0;
  for (size_t i = 0; i < merges->n; i++) {
    const coda_json *m = &merges->u.items[i];
    const char *a, *b;
    size_t la, lb;
    if (m->kind == CODA_JSON_STRING) {
      const char *sp = memchr(m->u.str, ' ', m->n);
      if (!sp || memchr(sp + 1, ' ', m->n - (size_t)(sp + 1 - m->u.str)))
        { st = PARSE_FAIL(ld, "model.merges[%zu]: \"%s\" is not two tokens separated by one space", i, m->u.str); break; }
      a = m->u.str;
      la = (size_t)(sp - a);
      b = sp + 1;
      lb = m->n - la - 1;
    } else if (m->kind == CODA_JSON_ARRAY && m->n == 2 && m->u.items[0].kind == CODA_JSON_STRING &&
               m->u.items[1].kind == CODA_JSON_STRING) {
      a = m->u.items[0].u.str;
      la = m->u.items[0].n;
      b = m->u.items[1].u.str;
      lb = m->u.items[1].n;
    } else {
      st = PARSE_FAIL(ld, "model.merges[%zu]: expected a string \"a b\" or a pair [\"a\", \"b\"]", i);
      break;
    }
    int64_t ia, ib, ij;
    if (!smap_get(&tok->names, a, la, &ia) || !smap_get(&tok->names, b, lb, &ib)) {
      st = PARSE_FAIL(ld, "model.merges[%zu]: a token of the merge is not in the vocabulary", i);
      break;
    }
    if (la + lb > joined_cap) {
      joined_cap = (la + lb) * 2;
      char *nj = realloc(joined, joined_cap);
      if (!nj) { st = coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory"); break; }
      joined = nj;
    }
    memcpy(joined, a, la);
    memcpy(joined + la, b, lb);
    if (!smap_get(&tok->names, joined, la + lb, &ij)) {
      st = PARSE_FAIL(ld, "model.merges[%zu]: the merged token is not in the vocabulary", i);
      break;
    }
    pmap_put(&tok->merges, pair_key((int32_t)ia, (int32_t)ib), (uint32_t)i, (int32_t)ij);
  }
  free(joined);
  return st;
}

static coda_status load_model(loader *ld, const coda_json *model, const coda_json *added) {
  coda_status st = check_model_kind(ld, model);
  if (st) return st;
  const coda_json *vocab = coda_json_get(model, "vocab");
  if ((st = want_kind(ld, vocab, CODA_JSON_OBJECT, "model.vocab"))) return st;
  if ((st = count_ids(ld, vocab, added))) return st;
  if ((st = load_vocab(ld, vocab, added))) return st;
  if ((st = read_unk(ld, model))) return st;
  return read_merges(ld, model);
}

static coda_status load_pre(loader *ld, const coda_json *v, const char *path) {
  coda_tokenizer tok = ld->tok;
  coda_status st;
  const char *type = NULL;
  if ((st = want_kind(ld, v, CODA_JSON_OBJECT, path)) || (st = read_type(ld, v, path, &type))) return st;
  if (!strcmp(type, "Sequence")) {
    const coda_json *list = coda_json_get(v, "pretokenizers");
    char p[256];
    snprintf(p, sizeof p, "%s.pretokenizers", path);
    if ((st = want_kind(ld, list, CODA_JSON_ARRAY, p))) return st;
    for (size_t i = 0; i < list->n; i++) {
      char pi[300];
      snprintf(pi, sizeof pi, "%s[%zu]", p, i);
      if ((st = load_pre(ld, &list->u.items[i], pi))) return st;
    }
    return CODA_OK;
  }
  if (tok->nsteps == MAX_STEPS) return REFUSE(ld, "%s: more than %d pre-tokenizers", path, MAX_STEPS);
  if (tok->nsteps && tok->steps[tok->nsteps - 1].kind == STEP_BYTELEVEL)
    return REFUSE(ld, "%s: a pre-tokenizer after ByteLevel is not supported", path);
  step *s = &tok->steps[tok->nsteps];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "ByteLevel")) {
    s->kind = STEP_BYTELEVEL;
    const coda_json *ur = coda_json_get(v, "use_regex");
    s->use_regex = ur ? is_true(ur) : 1;
    s->pat = CODA_BPE_PAT_GPT2;
    s->add_prefix_space = is_true(coda_json_get(v, "add_prefix_space"));
  } else if (!strcmp(type, "Split")) {
    s->kind = STEP_SPLIT;
    const coda_json *pat = coda_json_get(v, "pattern");
    const coda_json *re = coda_json_get(pat, "Regex");
    if (!re || re->kind != CODA_JSON_STRING) {
      if (coda_json_get(pat, "String")) return REFUSE(ld, "%s.pattern: a String pattern is not supported (only the Regex patterns of GPT-2, Llama 3 and Qwen2)", path);
      return PARSE_FAIL(ld, "%s.pattern: expected {\"Regex\": \"...\"}", path);
    }
    if (!coda_bpe_pattern_from_regex(re->u.str, re->n, &s->pat))
      return REFUSE(ld, "%s.pattern.Regex: the pattern %.120s is not supported (only those of GPT-2, Llama 3 and Qwen2)", path, re->u.str);
    const coda_json *beh = coda_json_get(v, "behavior");
    if (!coda_json_is_str(beh, "Isolated"))
      return REFUSE(ld, "%s.behavior: %s%s%s is not supported (only \"Isolated\")", path,
                    beh && beh->kind == CODA_JSON_STRING ? "\"" : "",
                    beh && beh->kind == CODA_JSON_STRING ? beh->u.str : "this value",
                    beh && beh->kind == CODA_JSON_STRING ? "\"" : "");
    if ((st = refuse_true(ld, v, "invert", path))) return st;
  } else {
    return REFUSE(ld, "%s.type: \"%s\" is not supported (coda implements ByteLevel, Split and Sequence)", path, type);
  }
  tok->nsteps++;
  return CODA_OK;
}

static coda_status load_post(loader *ld, const coda_json *v, const char *path) {
  coda_tokenizer tok = ld->tok;
  coda_status st;
  const char *type = NULL;
  if ((st = want_kind(ld, v, CODA_JSON_OBJECT, path)) || (st = read_type(ld, v, path, &type))) return st;
  if (!strcmp(type, "Sequence")) {
    const coda_json *list = coda_json_get(v, "processors");
    char p[256];
    snprintf(p, sizeof p, "%s.processors", path);
    if ((st = want_kind(ld, list, CODA_JSON_ARRAY, p))) return st;
    for (size_t i = 0; i < list->n; i++) {
      char pi[300];
      snprintf(pi, sizeof pi, "%s[%zu]", p, i);
      if ((st = load_post(ld, &list->u.items[i], pi))) return st;
    }
    return CODA_OK;
  }
  if (!strcmp(type, "ByteLevel")) return CODA_OK; /* offsets only */
  if (strcmp(type, "TemplateProcessing"))
    return REFUSE(ld, "%s.type: \"%s\" is not supported (coda implements TemplateProcessing, ByteLevel and Sequence)", path, type);
  if (tok->npre || tok->npost) return REFUSE(ld, "%s: a second TemplateProcessing is not supported", path);
  const coda_json *single = coda_json_get(v, "single"), *specials = coda_json_get(v, "special_tokens");
  char p[256];
  snprintf(p, sizeof p, "%s.single", path);
  if ((st = want_kind(ld, single, CODA_JSON_ARRAY, p))) return st;
  free(tok->pre_ids);
  free(tok->post_ids);
  tok->pre_ids = malloc((single->n + 1) * 16 * sizeof(int32_t));
  tok->post_ids = malloc((single->n + 1) * 16 * sizeof(int32_t));
  if (!tok->pre_ids || !tok->post_ids) return coda_fail(ld->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  int seen_a = 0;
  for (size_t i = 0; i < single->n; i++) {
    const coda_json *it = &single->u.items[i];
    const coda_json *sp = coda_json_get(it, "SpecialToken"), *sq = coda_json_get(it, "Sequence");
    if (sq) {
      if (!coda_json_is_str(coda_json_get(sq, "id"), "A"))
        return REFUSE(ld, "%s[%zu].Sequence.id: only \"A\" is supported in a single template", p, i);
      if (seen_a) return REFUSE(ld, "%s: the sequence twice", p);
      seen_a = 1;
      continue;
    }
    const coda_json *name = coda_json_get(sp, "id");
    if (!name || name->kind != CODA_JSON_STRING)
      return PARSE_FAIL(ld, "%s[%zu]: expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}", p, i);
    const coda_json *def = coda_json_get(specials, name->u.str);
    const coda_json *ids = coda_json_get(def, "ids");
    if (!ids || ids->kind != CODA_JSON_ARRAY)
      return PARSE_FAIL(ld, "%s.special_tokens: \"%s\" missing (or without ids)", path, name->u.str);
    if (ids->n > 16) return REFUSE(ld, "%s.special_tokens.%s: more than 16 ids", path, name->u.str);
    for (size_t k = 0; k < ids->n; k++) {
      int32_t id = 0;
      char pk[300];
      snprintf(pk, sizeof pk, "%s.special_tokens.%s.ids[%zu]", path, name->u.str, k);
      if ((st = want_id(ld, &ids->u.items[k], pk, &id))) return st;
      if ((size_t)id >= tok->vocab_size) return PARSE_FAIL(ld, "%s: id %d is outside the vocabulary", pk, (int)id);
      if (seen_a) tok->post_ids[tok->npost++] = id;
      else tok->pre_ids[tok->npre++] = id;
    }
  }
  if (!seen_a) return REFUSE(ld, "%s: a template without the sequence $A is not supported", p);
  return CODA_OK;
}

static int cmp_added_len(const added_token *all, size_t a, size_t b) {
  const added_token *x = &all[a], *y = &all[b];
  if (x->bytes[0] != y->bytes[0]) return x->bytes[0] < y->bytes[0] ? -1 : 1;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  return a < b ? -1 : (a > b);
}

static coda_status build_passes(coda_tokenizer tok) {
  for (int p = 0; p < 2; p++) {
    added_pass *ap = &tok->pass[p];
    ap->order = malloc((tok->nadded + 1) * sizeof *ap->order);
    if (!ap->order) return coda_fail(tok->ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (size_t i = 0; i < tok->nadded; i++)
      if (tok->added[i].normalized == p) ap->order[ap->n++] = i;
    /* insertion sort: few added tokens, once */
    for (size_t i = 1; i < ap->n; i++) {
      size_t v = ap->order[i], j = i;
      while (j > 0 && cmp_added_len(tok->added, v, ap->order[j - 1]) < 0) {
        ap->order[j] = ap->order[j - 1];
        j--;
      }
      ap->order[j] = v;
    }
    size_t k = 0;
    for (int b = 0; b <= 256; b++) {
      while (k < ap->n && tok->added[ap->order[k]].bytes[0] < b) k++;
      ap->first[b] = k;
    }
  }
  return CODA_OK;
}

static coda_status load_doc(loader *ld, const coda_json *root) {
  coda_tokenizer tok = ld->tok;
  coda_status st;
  if ((st = want_kind(ld, root, CODA_JSON_OBJECT, "the top level"))) return st;
  const coda_json *added = coda_json_get(root, "added_tokens");
  if (!is_null(added) && (st = want_kind(ld, added, CODA_JSON_ARRAY, "added_tokens"))) return st;
  if (is_null(added)) added = NULL;
  if ((st = load_model(ld, coda_json_get(root, "model"), added))) return st;
  if (!is_null(coda_json_get(root, "truncation"))) return REFUSE(ld, "truncation: only null is supported");
  if (!is_null(coda_json_get(root, "padding"))) return REFUSE(ld, "padding: only null is supported");
  const coda_json *norm = coda_json_get(root, "normalizer");
  if (!is_null(norm)) {
    const char *type = NULL;
    if ((st = want_kind(ld, norm, CODA_JSON_OBJECT, "normalizer")) || (st = read_type(ld, norm, "normalizer", &type))) return st;
    const coda_json *list = coda_json_get(norm, "normalizers");
    if (!strcmp(type, "NFC"))
      tok->nfc = 1;
    else if (strcmp(type, "Sequence") || !list || list->kind != CODA_JSON_ARRAY || list->n)
      return REFUSE(ld, "normalizer.type: \"%s\" is not supported (coda implements NFC, or null)", type);
  }
  const coda_json *pre = coda_json_get(root, "pre_tokenizer");
  if (is_null(pre)) return REFUSE(ld, "pre_tokenizer: null is not supported (a byte-level BPE needs a ByteLevel pre-tokenizer)");
  if ((st = load_pre(ld, pre, "pre_tokenizer"))) return st;
  if (!tok->nsteps || tok->steps[tok->nsteps - 1].kind != STEP_BYTELEVEL)
    return REFUSE(ld, "pre_tokenizer: no ByteLevel pre-tokenizer at the end (coda implements byte-level BPE only)");
  const coda_json *post = coda_json_get(root, "post_processor");
  if (!is_null(post) && (st = load_post(ld, post, "post_processor"))) return st;
  const coda_json *dec = coda_json_get(root, "decoder");
  if (is_null(dec)) return REFUSE(ld, "decoder: null is not supported (coda implements the ByteLevel decoder)");
  const char *type = NULL;
  if ((st = want_kind(ld, dec, CODA_JSON_OBJECT, "decoder")) || (st = read_type(ld, dec, "decoder", &type))) return st;
  if (strcmp(type, "ByteLevel"))
    return REFUSE(ld, "decoder.type: \"%s\" is not supported (coda implements ByteLevel)", type);
  return build_passes(tok);
}

coda_status coda_tokenizer_load_json(coda_context ctx, const char *json, size_t len, coda_tokenizer *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_load_json: out is NULL");
  *out = NULL;
  if (!json) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_load_json: json is NULL");
  char err[300];
  coda_json_doc *doc = coda_json_parse(json, len, err, sizeof err);
  if (!doc) return coda_fail(ctx, CODA_ERR_PARSE, "tokenizer.json: %s", err);
  coda_tokenizer tok = calloc(1, sizeof *tok);
  if (!tok) {
    coda_json_free(doc);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  }
  tok->ctx = ctx;
  for (int b = 0; b < 256; b++) tok->byte_id[b] = -1;
  loader ld = {.ctx = ctx, .tok = tok};
  uint32_t cp_of[256];
  byte_alphabet(cp_of);
  for (int i = 0; i < 256 + 68; i++) ld.rev[i] = -1;
  for (int b = 0; b < 256; b++) ld.rev[cp_of[b]] = (int16_t)b;
  (void)alphabet_byte;
  coda_status st = load_doc(&ld, coda_json_root(doc));
  coda_json_free(doc);
  if (st) {
    coda_tokenizer_destroy(tok);
    return st;
  }
  *out = tok;
  return CODA_OK;
}

/* The largest tokenizer.json read: those shipped with models are tens of
 * MB at most; the bound keeps a device or a wrong file from being read
 * until memory runs out. */
#define TOKENIZER_FILE_MAX ((uint64_t)1 << 30)

coda_status coda_tokenizer_load(coda_context ctx, const char *path, coda_tokenizer *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_load: out is NULL");
  *out = NULL;
  if (!path) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_tokenizer_load: path is NULL");
  /* a regular file of bounded size (a FIFO or device is refused without
   * blocking); the message names the path */
  unsigned char *buf = NULL;
  size_t n = 0;
  coda_status st = coda_read_file_max(ctx, path, TOKENIZER_FILE_MAX, &buf, &n);
  if (st) return st;
  st = coda_tokenizer_load_json(ctx, (const char *)buf, n, out);
  free(buf);
  if (st && ctx) {
    char msg[CODA_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
    coda_fail(ctx, st, "%s: %s", path, msg);
  }
  return st;
}

void coda_tokenizer_destroy(coda_tokenizer tok) {
  if (!tok) return;
  free(tok->dec_bytes);
  free(tok->dec_off);
  free(tok->is_special);
  free(tok->has_token);
  smap_free(&tok->words);
  smap_free(&tok->names);
  free(tok->merges.slots);
  free(tok->added);
  free(tok->added_pool);
  free(tok->pass[0].order);
  free(tok->pass[1].order);
  free(tok->pre_ids);
  free(tok->post_ids);
  smap_free(&tok->cache);
  free(tok->cache_ids);
  free(tok->out);
  free(tok->ends_a);
  free(tok->ends_b);
  free(tok->prefixed);
  free(tok->syms);
  free(tok->heap);
  free(tok);
}

size_t coda_tokenizer_vocab_size(coda_tokenizer tok) { return tok ? tok->vocab_size : 0; }
int32_t coda_tokenizer_bos_id(coda_tokenizer tok) { return tok && tok->npre ? tok->pre_ids[0] : -1; }
int32_t coda_tokenizer_eos_id(coda_tokenizer tok) { return tok && tok->npost ? tok->post_ids[0] : -1; }

int32_t coda_tokenizer_token_id(coda_tokenizer tok, const char *token) {
  int64_t v;
  if (!tok || !token || !smap_get(&tok->names, token, strlen(token), &v)) return -1;
  return (int32_t)v;
}
