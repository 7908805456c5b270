/* coda_evaluate: the loss and perplexity of a checkpoint on a token shard,
 * in consecutive windows. */
#define _POSIX_C_SOURCE 200809L /* stat */
#include "coda_train.h"
#include "io/io.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"
#include "base/options.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

coda_eval_options coda_eval_default_options(void) {
  coda_eval_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  return o;
}

/* The tokenizer a shard was prepared with, as its directory's source.txt
 * records it (the stamp coda train / coda eval write beside prepared
 * shards: a line "tokenizer PATH", "(bytes)" for byte tokens); *tok
 * malloc'ed, NULL when there is no such record. */
static coda_status shard_record(coda_context ctx, const char *shard, char **tok) {
  *tok = NULL;
  const char *slash = strrchr(shard, '/');
  const size_t dn = slash ? (size_t)(slash - shard) : 1;
  char *sp = malloc(dn + 16);
  if (!sp) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  snprintf(sp, dn + 16, "%.*s/source.txt", (int)dn, slash ? shard : ".");
  struct stat st;
  unsigned char *b = NULL;
  size_t n = 0;
  const int have = stat(sp, &st) == 0 && S_ISREG(st.st_mode) &&
                   coda_read_file_max(ctx, sp, 1 << 16, &b, &n) == CODA_OK;
  free(sp);
  coda_clear_error(ctx);
  if (!have) return CODA_OK;
  const char *t = NULL;
  if (n > 20 && !memcmp(b, "coda prepared data ", 19)) /* a stamp, not the user's file */
    for (size_t i = 0; i + 10 <= n && !t; i++)
      if ((i == 0 || b[i - 1] == '\n') && !memcmp(b + i, "tokenizer ", 10)) t = (const char *)b + i + 10;
  if (t) {
    const char *e = memchr(t, '\n', n - (size_t)(t - (const char *)b));
    const size_t k = e ? (size_t)(e - t) : n - (size_t)(t - (const char *)b);
    *tok = malloc(k + 1);
    if (*tok) {
      memcpy(*tok, t, k);
      (*tok)[k] = '\0';
    }
  }
  free(b);
  return t && !*tok ? coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory") : CODA_OK;
}

/* 1 when the two files hold the same bytes; -1 when one cannot be read. */
static int same_file_bytes(coda_context ctx, const char *a, const char *b) {
  unsigned char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  int r = -1;
  if (coda_read_file_max(ctx, a, (uint64_t)1 << 30, &x, &nx) == CODA_OK &&
      coda_read_file_max(ctx, b, (uint64_t)1 << 30, &y, &ny) == CODA_OK)
    r = nx == ny && !memcmp(x, y, nx);
  free(x);
  free(y);
  coda_clear_error(ctx);
  return r;
}

/* The shard's tokens are the model's: byte-token shards (their stamp says
 * so, or, without a stamp, their vocabulary is the 256 bytes) are refused
 * on a model with a tokenizer; shards whose stamp names a tokenizer are
 * refused on a model without one (none named, none beside it: byte tokens,
 * or ids whose text nothing records, whatever the vocabulary size) and
 * where that tokenizer differs from the checkpoint's (another tokenizer of
 * the same vocabulary size reads the same ids as other text). A stamp naming a tokenizer that cannot be read
 * is a warning (coda_warnings): not checked. */
static coda_status check_shard_tokens(coda_context ctx, const char *shard, uint32_t shard_vocab,
                                      const char *checkpoint, int model_vocab) {
  char *rec = NULL, *ck = NULL;
  coda_status s = shard_record(ctx, shard, &rec);
  if (!s) s = coda_checkpoint_tokenizer(ctx, checkpoint, &ck, NULL);
  if (s) {
    free(rec);
    return s;
  }
  const int rec_bytes = rec ? !strcmp(rec, "(bytes)") : shard_vocab == CODA_TOK_BYTES;
  if (rec_bytes && ck)
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                  "%s: byte-token shards (%s), but the model's tokenizer is %s: prepare the "
                  "data with it (coda eval --data CORPUS tokenizes with the checkpoint's "
                  "tokenizer)", shard, rec ? "source.txt says (bytes)" : "vocabulary 256", ck);
  else if (rec && !rec_bytes && !ck)
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                  "%s: prepared with the tokenizer %s (its source.txt), but %s is a %smodel of "
                  "vocabulary %d without a tokenizer (it names none, and no tokenizer.json lies "
                  "beside it or in its folder): prepare the data as bytes, or put the tokenizer "
                  "the model was trained with there as tokenizer.json to have the two compared",
                  shard, rec, checkpoint, model_vocab == CODA_TOK_BYTES ? "byte-token " : "",
                  model_vocab);
  else if (rec && !rec_bytes && ck) {
    const int same = same_file_bytes(ctx, rec, ck);
    if (same == 0)
      s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                    "%s: prepared with the tokenizer %s (its source.txt), which differs from "
                    "the checkpoint's %s: the same ids would be other text; prepare the data "
                    "with the checkpoint's tokenizer", shard, rec, ck);
    else if (same < 0)
      coda_warn(ctx, "%s: its source.txt names the tokenizer %s, which cannot be read to "
                "compare with the checkpoint's %s: not checked", shard, rec, ck);
  }
  free(rec);
  free(ck);
  return s;
}

/* coda_eval_options before progress and user. */
typedef struct eval_options_layout1 {
  size_t struct_size;
  const char *checkpoint;
  const char *shard;
  int batch;
  int seq;
  int64_t max_windows;
  coda_train_engine engine;
} eval_options_layout1;
_Static_assert(offsetof(eval_options_layout1, engine) == offsetof(coda_eval_options, engine),
               "layout 1 of coda_eval_options is a prefix of the current one");
_Static_assert(sizeof(eval_options_layout1) < sizeof(coda_eval_options),
               "each layout of coda_eval_options is larger than the one before");

coda_status coda_evaluate(coda_context ctx, const coda_eval_options *opts, coda_eval_result *r) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  coda_eval_options taken = coda_eval_default_options();
  static const coda_options_layout layouts[] = {CODA_OPTIONS_LAYOUT_OLD(eval_options_layout1, engine),
                                                CODA_OPTIONS_LAYOUT(coda_eval_options)};
  if (opts && coda_options_take(ctx, "coda_eval_options", opts, &taken, layouts, 2))
    return CODA_ERR_INVALID_ARGUMENT;
  const coda_eval_options *o = opts ? &taken : NULL;
  if (!o || !r || !o->checkpoint || !o->shard)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "evaluate: checkpoint, shard and result are required");
  memset(r, 0, sizeof *r);
  r->loss = r->perplexity = NAN;
  const int B = o->batch > 0 ? o->batch : 8;
  if (o->batch < 0 || o->seq < 0 || o->max_windows < 0 || B > (1 << 16))
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "evaluate: batch %d, seq %d, windows %lld out "
                     "of range", o->batch, o->seq, (long long)o->max_windows);
  if (o->engine == CODA_TRAIN_ENGINE_REFERENCE && coda_context_backend(ctx) != CODA_BACKEND_CPU)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "evaluate: the reference engine runs on the "
                     "host: use a CPU context (coda eval --device cpu)");
  coda_model_config cfg;
  struct stat sb;
  /* a directory: a Hugging Face model, imported in memory */
  const int hf = stat(o->checkpoint, &sb) == 0 && S_ISDIR(sb.st_mode);
  coda_status s = hf ? coda_hf_config(ctx, o->checkpoint, &cfg)
                     : coda_checkpoint_config_to_load(ctx, o->checkpoint, &cfg);
  if (s) return s;
  if (hf && coda_context_backend(ctx) == CODA_BACKEND_CPU &&
      coda_model_config_params(&cfg) > CODA_CPU_MAX_PARAMS)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: a model of %lld parameters is beyond the "
                     "CPU limit of %lld", o->checkpoint, (long long)coda_model_config_params(&cfg),
                     (long long)CODA_CPU_MAX_PARAMS);
  const int T = o->seq > 0 ? o->seq : cfg.seq;
  if (T > cfg.seq)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "evaluate: seq %d is longer than the model's %d",
                     T, cfg.seq);
  coda_shard_view v;
  s = coda_shard_open(ctx, o->shard, &v);
  if (s) return s;
  if (v.vocab > (uint32_t)cfg.vocab) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: vocabulary of %u tokens exceeds the model's "
                  "vocab %d (%s)", o->shard, v.vocab, cfg.vocab, o->checkpoint);
    coda_shard_close(&v);
    return s;
  }
  s = check_shard_tokens(ctx, o->shard, v.vocab, o->checkpoint, cfg.vocab);
  if (s) {
    coda_shard_close(&v);
    return s;
  }
  int64_t nw = v.count > 0 ? (int64_t)((v.count - 1) / (uint64_t)T) : 0;
  if (nw < 1) {
    s = coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s: %llu tokens, shorter than one window of %d + 1",
                  o->shard, (unsigned long long)v.count, T);
    coda_shard_close(&v);
    return s;
  }
  if (o->max_windows > 0 && nw > o->max_windows) nw = o->max_windows;
  coda_model *m = NULL;
  const coda_engine engine = coda_engine_for_model(o->engine, &cfg);
  if (hf) {
    s = coda_hf_import(ctx, o->checkpoint, engine, &m);
  } else {
    s = coda_model_create(ctx, &cfg, engine, &m);
    if (!s) s = coda_checkpoint_load(ctx, o->checkpoint, m, NULL, NULL, NULL);
  }
  int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  if (!s && (!in || !tg)) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  double sum = 0.0;
  int64_t cnt = 0;
  for (int64_t w0 = 0; !s && w0 < nw; w0 += B) {
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const size_t i = (size_t)b * T + t;
        if (w0 + b < nw) {
          const uint64_t at = (uint64_t)(w0 + b) * (uint64_t)T + (uint64_t)t;
          in[i] = (int32_t)v.tok[at];
          tg[i] = (int32_t)v.tok[at + 1];
        } else { /* past the last window: ignored targets */
          in[i] = 0;
          tg[i] = -1;
        }
      }
    double l;
    int64_t nv;
    s = coda_model_loss(ctx, m, in, tg, B, T, &l, &nv);
    if (!s && !isfinite(l))
      s = coda_fail(ctx, CODA_ERR_IO, "%s: the loss of windows %lld.. is not finite",
                    o->checkpoint, (long long)w0);
    if (!s) {
      sum += l * (double)nv;
      cnt += nv;
      if (o->progress) o->progress(w0 + B < nw ? w0 + B : nw, nw, o->user);
    }
  }
  if (!s) {
    r->loss = sum / (double)cnt;
    r->perplexity = exp(r->loss);
    r->tokens = cnt;
    r->windows = nw;
  }
  free(in);
  free(tg);
  coda_model_destroy(m);
  coda_shard_close(&v);
  return s;
}
