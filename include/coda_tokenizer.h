/* coda: byte-level BPE tokenizer (public header).
 *
 * Loads a Hugging Face tokenizer.json of the kind GPT-2, Llama 3 and Qwen
 * ship (model BPE over the byte-level alphabet) and encodes text to token
 * ids and back, with the ids the `tokenizers` library gives. Conventions
 * are those of coda.h: every call returns a coda_status and, on failure,
 * leaves a message in the context (coda_last_error). docs/tokenizer.md
 * lists what is supported and what is refused, and the rule for bytes that
 * are not valid UTF-8.
 *
 * A tokenizer keeps the context it was loaded with (for messages) and a
 * cache of encoded words: like the context, it is not for concurrent use
 * from several threads. */
#ifndef CODA_TOKENIZER_H
#define CODA_TOKENIZER_H

#include "coda.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct coda_tokenizer_s *coda_tokenizer;

/* Loads a tokenizer.json file. Errors: CODA_ERR_IO (cannot read),
 * CODA_ERR_PARSE (not JSON, or a field of the wrong kind; the message
 * names the field, e.g. "model.merges[3]"), CODA_ERR_NOT_SUPPORTED (a
 * model, normalizer, pre-tokenizer, post-processor or decoder kind, or an
 * option, that coda does not implement; the message names it). */
coda_status coda_tokenizer_load(coda_context ctx, const char *path, coda_tokenizer *out);
/* The same from the JSON text in memory (len bytes). */
coda_status coda_tokenizer_load_json(coda_context ctx, const char *json, size_t len,
                                     coda_tokenizer *out);
void coda_tokenizer_destroy(coda_tokenizer tok);

/* Flags of encode and decode. */
enum {
  /* encode: add the post-processor's special tokens (BOS/EOS of the
   * TemplateProcessing "single" template), as add_special_tokens=True */
  CODA_TOKENIZER_ADD_SPECIAL = 1,
  /* decode: leave out special added tokens, as skip_special_tokens=True */
  CODA_TOKENIZER_SKIP_SPECIAL = 2
};

/* Encodes len bytes of text (any bytes: see docs/tokenizer.md for those
 * that are not valid UTF-8). Writes at most cap ids and sets *n to the
 * number of ids of the whole encoding; when that is more than cap the
 * first cap are written and CODA_ERR_OVERFLOW is returned. */
coda_status coda_tokenizer_encode(coda_tokenizer tok, const void *text, size_t len,
                                  unsigned flags, int32_t *ids, size_t cap, size_t *n);
/* The same into a buffer that grows as needed (*ids, *cap: malloc'ed,
 * may start NULL / 0; the caller frees *ids). */
coda_status coda_tokenizer_encode_alloc(coda_tokenizer tok, const void *text, size_t len,
                                        unsigned flags, int32_t **ids, size_t *cap, size_t *n);

/* Decodes n ids to bytes (not NUL-terminated). Writes at most cap bytes
 * and sets *len to the length of the whole text; when that is more than
 * cap, CODA_ERR_OVERFLOW. An id outside the vocabulary is
 * CODA_ERR_INVALID_ARGUMENT. decode(encode(x)) == x for every x when the
 * tokenizer adds no prefix space and no special tokens were added. */
coda_status coda_tokenizer_decode(coda_tokenizer tok, const int32_t *ids, size_t n,
                                  unsigned flags, char *out, size_t cap, size_t *len);
coda_status coda_tokenizer_decode_alloc(coda_tokenizer tok, const int32_t *ids, size_t n,
                                        unsigned flags, char **out, size_t *cap, size_t *len);

/* Number of ids: one more than the largest id of the vocabulary and the
 * added tokens. */
size_t coda_tokenizer_vocab_size(coda_tokenizer tok);
/* The ids the post-processor puts before and after a sequence (the first
 * of each), -1 if none. */
int32_t coda_tokenizer_bos_id(coda_tokenizer tok);
int32_t coda_tokenizer_eos_id(coda_tokenizer tok);
/* Id of a token given as it is written in the file (a vocabulary entry in
 * the byte-level alphabet, or an added token's content); -1 if none. */
int32_t coda_tokenizer_token_id(coda_tokenizer tok, const char *token);

#ifdef __cplusplus
}
#endif

#endif
