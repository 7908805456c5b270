/* libFuzzer harness for coda_evaluate's checks of a shard against the
 * checkpoint (src/train/eval.c, what `coda eval --data` runs): a file that
 * is no token shard, a shard of a vocabulary larger than the model's, a
 * shard whose stamp (source.txt beside it) names another tokenizer than
 * the checkpoint's, byte shards on a model with a tokenizer, tokenizer
 * shards on a model without one, a shard shorter than one window.
 *
 * Three tiny checkpoints are made once: a byte model (vocabulary 256, no
 * tokenizer), a BPE model (vocabulary 300) carrying a 9-token
 * tokenizer.json, and a model of vocabulary 300 without a tokenizer (as
 * trained on another program's token ids). Byte 0 of
 * an input picks: bit 0 the checkpoint (0 bytes, 1 BPE; bit 5 set with
 * bit 0 clear: the model without a tokenizer); bit 1 the shard
 * (0 the shard part's bytes as the file, 1 a valid shard the harness
 * writes: the part's first 4 bytes a little-endian vocabulary, raised to
 * the largest token + 1, the rest uint16 tokens); bit 2 a uint32 shard
 * (built shards); bits 3-4 source.txt beside the shard (0 none, 1 the
 * source part as is, 2 the stamp's first line "coda prepared data 1"
 * followed by the source part, 3 a directory). After byte 0: the shard
 * part, "|#|", the source part, in which "@tok", "@copy", "@other", "@gone"
 * and "@ck" become the paths of the checkpoint's tokenizer's source, a
 * byte-identical copy, a tokenizer of the same size that reads the same
 * ids as other text, a missing file, and the tokenizer beside the BPE
 * checkpoint.
 *
 * The outcome must be the reference's, computed here: a file the shard
 * reader refuses (coda_shard_read, a second opinion) is refused; then a
 * vocabulary above the model's; then the stamp's record (a source.txt of
 * at most 64 KiB beginning "coda prepared data ", its first line
 * "tokenizer PATH"): byte shards ("(bytes)", or vocabulary 256 without a
 * record) on the BPE model, a tokenizer's shards on either model without a
 * tokenizer, and a
 * recorded tokenizer whose bytes differ from the checkpoint's are refused,
 * one that cannot be read is a warning naming the shard; then a shard
 * shorter than one window is refused. Refusals are
 * CODA_ERR_INVALID_ARGUMENT (CODA_ERR_IO, ..., for the reader's) with a
 * message naming the shard; an accepted shard scores one window with a
 * finite loss. No descriptor stays open. Any violation aborts (leaks:
 * LeakSanitizer).
 *
 * Built with -DFUZZ_VERBOSE, each outcome is printed.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] (FUZZ_ONLY=eval_shard) */
#include "fuzz_config_util.h"
#include "coda_train.h"
#include "train/train.h"

#include <sys/stat.h>

#define SEQ 8
#define BPE_VOCAB 300 /* above 256: byte shards reach the tokenizer check */

static coda_context ctx;
static char dir[4096], tokp[4200], copyp[4200], otherp[4200], gonep[4200];
static char ck_bpe[4200], ck_bytes[4200], ck_ids[4200], ck_tok[4200], sd[4200], shard[4300],
    srcp[4300];

/* Two tokenizers of 9 ids that read the same ids as different text ("ab"
 * is one merge or another). */
static const char *tokenizer_json(int other) {
  static char buf[2][2048];
  snprintf(buf[other], sizeof buf[other],
           "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":8,"
           "\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
           "\"normalized\":false,\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":"
           "\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
           "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
           "\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,\"byte_fallback\":false,"
           "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"%s\":4,\"%s\":5,\"\\u0120a\":6,"
           "\"\\u010a\":7},\"merges\":[\"%s\",\"%s\",\"\\u0120 a\"]}}",
           other ? "bc" : "ab", "abc", other ? "b c" : "a b", other ? "a bc" : "ab c");
  return buf[other];
}

static void put_text(const char *path, const char *t) { put_file(path, t, strlen(t)); }

static void at_exit(void) {
  const char *files[] = {tokp, copyp, otherp, ck_bpe, ck_tok, ck_bytes, ck_ids, shard, srcp};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(files[i]);
  rmdir(srcp);
  char p[4400];
  snprintf(p, sizeof p, "%s/ckb", dir);
  rmdir(p);
  snprintf(p, sizeof p, "%s/ckbytes", dir);
  rmdir(p);
  snprintf(p, sizeof p, "%s/ckids", dir);
  rmdir(p);
  rmdir(sd);
  rmdir(dir);
}

static void save_model(int vocab, const char *path, const char *carry) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = vocab;
  c.dim = 16;
  c.layers = 1;
  c.heads = 2;
  c.kv_heads = 1;
  c.ffn = 24;
  c.seq = SEQ;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  coda_model *m = NULL;
  if (coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m) != CODA_OK) fail(coda_last_error(ctx));
  coda_model_init(m, 7);
  coda_train_state st;
  memset(&st, 0, sizeof st);
  if (carry && coda_checkpoint_carry_tokenizer(ctx, carry, path, vocab, &st) != CODA_OK)
    fail(coda_last_error(ctx));
  if (coda_checkpoint_save(ctx, path, m, NULL, NULL, &st) != CODA_OK) fail(coda_last_error(ctx));
  coda_model_destroy(m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_name = "fuzz_eval_shard";
  if (coda_context_create(NULL, &ctx) != CODA_OK) fail("no context");
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/fuzz_eval_shard.%ld", t && *t ? t : "/tmp", (long)getpid());
  if (mkdir(dir, 0700) != 0) fail("cannot create the temporary directory");
  atexit(at_exit);
  snprintf(tokp, sizeof tokp, "%s/tok.json", dir);
  snprintf(copyp, sizeof copyp, "%s/copy.json", dir);
  snprintf(otherp, sizeof otherp, "%s/other.json", dir);
  snprintf(gonep, sizeof gonep, "%s/gone.json", dir);
  put_text(tokp, tokenizer_json(0));
  put_text(copyp, tokenizer_json(0));
  put_text(otherp, tokenizer_json(1));
  char p[4400];
  snprintf(p, sizeof p, "%s/ckb", dir);
  snprintf(ck_bpe, sizeof ck_bpe, "%s/ck.safetensors", p);
  snprintf(ck_tok, sizeof ck_tok, "%s/tokenizer.json", p);
  if (mkdir(p, 0700) != 0) fail("mkdir");
  snprintf(p, sizeof p, "%s/ckbytes", dir);
  snprintf(ck_bytes, sizeof ck_bytes, "%s/ck.safetensors", p);
  if (mkdir(p, 0700) != 0) fail("mkdir");
  snprintf(p, sizeof p, "%s/ckids", dir);
  snprintf(ck_ids, sizeof ck_ids, "%s/ck.safetensors", p);
  if (mkdir(p, 0700) != 0) fail("mkdir");
  save_model(BPE_VOCAB, ck_bpe, tokp);
  save_model(256, ck_bytes, NULL);
  save_model(BPE_VOCAB, ck_ids, NULL);
  snprintf(sd, sizeof sd, "%s/shards", dir);
  if (mkdir(sd, 0700) != 0) fail("mkdir");
  snprintf(shard, sizeof shard, "%s/val.tok", sd);
  snprintf(srcp, sizeof srcp, "%s/source.txt", sd);
  return 0;
}

/* src with the placeholders replaced (malloc'ed, NUL-terminated; *n its
 * length, NUL bytes of the input kept). */
static char *expand(const uint8_t *src, size_t len, size_t *n) {
  static const char *const keys[5] = {"@tok", "@copy", "@other", "@gone", "@ck"};
  const char *const vals[5] = {tokp, copyp, otherp, gonep, ck_tok};
  size_t cap = len * 4 + 1, k = 0; /* a value is longer than its key: grown below */
  char *out = malloc(cap);
  if (!out) fail("out of memory");
  for (size_t i = 0; i < len;) {
    const char *val = NULL;
    size_t klen = 0;
    for (int j = 0; j < 5 && !val; j++) {
      const size_t kl = strlen(keys[j]);
      if (i + kl <= len && !memcmp(src + i, keys[j], kl)) {
        val = vals[j];
        klen = kl;
      }
    }
    const size_t add = val ? strlen(val) : 1;
    if (k + add + 1 > cap) {
      cap = 2 * (k + add + 1);
      out = realloc(out, cap);
      if (!out) fail("out of memory");
    }
    if (val) {
      memcpy(out + k, val, add);
      i += klen;
    } else {
      out[k] = (char)src[i++];
    }
    k += add;
  }
  out[k] = '\0';
  *n = k;
  return out;
}

/* The whole of a regular file, or NULL (not one, unreadable, or above the
 * 1 GiB the library reads to compare tokenizers). */
static unsigned char *slurp(const char *path, size_t *n) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (1 << 30)) return NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = malloc((size_t)sb.st_size + 1);
  if (!b) fail("out of memory");
  *n = fread(b, 1, (size_t)sb.st_size, f);
  fclose(f);
  if (*n != (size_t)sb.st_size) {
    free(b);
    return NULL;
  }
  return b;
}

/* The stamp's tokenizer record as the reference reads it: NULL, or the
 * text after "tokenizer " of the first line beginning with it, up to the
 * line's end (a C string: up to a NUL byte). */
static char *record(const unsigned char *b, size_t n) {
  if (n <= 20 || memcmp(b, "coda prepared data ", 19) || n > (1u << 16)) return NULL;
  for (size_t i = 1; i + 10 <= n; i++)
    if (b[i - 1] == '\n' && !memcmp(b + i, "tokenizer ", 10)) {
      const unsigned char *t = b + i + 10, *e = memchr(t, '\n', n - i - 10);
      const size_t k = e ? (size_t)(e - t) : n - i - 10;
      char *r = malloc(k + 1);
      if (!r) fail("out of memory");
      memcpy(r, t, k);
      r[k] = '\0';
      return r;
    }
  return NULL;
}

static void remove_source(void) {
  unlink(srcp);
  rmdir(srcp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int fds = open_fds();
  const int bpe = data[0] & 1, built = (data[0] >> 1) & 1, wide = (data[0] >> 2) & 1;
  const int ids = !bpe && (data[0] >> 5) & 1; /* the model of 300 ids without a tokenizer */
  const int src_mode = (data[0] >> 3) & 3;
  static const uint8_t sep[3] = {'|', '#', '|'};
  size_t cut = 1;
  while (cut < size && !(cut + 3 <= size && !memcmp(data + cut, sep, 3))) cut++;
  const uint8_t *sh = data + 1, *sr = cut < size ? data + cut + 3 : data + size;
  const size_t shn = cut - 1, srn = cut < size ? size - cut - 3 : 0;

  /* the shard */
  unlink(shard);
  if (built) {
    uint32_t vocab = 0;
    for (size_t i = 0; i < 4 && i < shn; i++) vocab |= (uint32_t)sh[i] << (8 * i);
    vocab &= (1u << 17) - 1;
    const size_t nt = shn > 4 ? (shn - 4) / 2 : 0;
    uint32_t *t = malloc((nt ? nt : 1) * sizeof *t);
    if (!t) fail("out of memory");
    for (size_t i = 0; i < nt; i++) {
      t[i] = (uint32_t)sh[4 + 2 * i] | (uint32_t)sh[5 + 2 * i] << 8;
      if (t[i] + 1 > vocab) vocab = t[i] + 1;
    }
    if (vocab < 1) vocab = 1;
    const int width = wide || vocab > 65536 ? 4 : 2;
    if (coda_shard_write(ctx, shard, t, nt, vocab, width) != CODA_OK) fail(coda_last_error(ctx));
    free(t);
  } else {
    put_file(shard, sh, shn);
  }
  /* source.txt */
  remove_source();
  size_t en = 0;
  char *ex = expand(sr, srn, &en);
  if (src_mode == 1) {
    put_file(srcp, ex, en);
  } else if (src_mode == 2) {
    static const char head[] = "coda prepared data 1\n";
    char *b = malloc(sizeof head + en);
    if (!b) fail("out of memory");
    memcpy(b, head, sizeof head - 1);
    memcpy(b + sizeof head - 1, ex, en);
    put_file(srcp, b, sizeof head - 1 + en);
    free(b);
  } else if (src_mode == 3) {
    if (mkdir(srcp, 0700) != 0) fail("mkdir");
  }
  free(ex);

  /* the reference */
  const char *ck = bpe ? ck_bpe : ids ? ck_ids : ck_bytes;
  const int model_vocab = bpe || ids ? BPE_VOCAB : 256;
  coda_status want = CODA_OK;
  int want_warning = 0;
  uint32_t *tok = NULL, vocab = 0;
  uint64_t count = 0;
  const coda_status rs = coda_shard_read(ctx, shard, &tok, &count, &vocab);
  free(tok);
  if (built && rs != CODA_OK) fail(coda_last_error(ctx));
  if (rs != CODA_OK) {
    want = rs;
  } else if (vocab > (uint32_t)model_vocab) {
    want = CODA_ERR_INVALID_ARGUMENT;
  } else {
    size_t sn = 0;
    unsigned char *sb = src_mode == 0 ? NULL : slurp(srcp, &sn);
    char *rec = sb ? record(sb, sn) : NULL;
    free(sb);
    const int rec_bytes = rec ? !strcmp(rec, "(bytes)") : vocab == CODA_TOK_BYTES;
    if (rec_bytes && bpe) {
      want = CODA_ERR_INVALID_ARGUMENT;
    } else if (rec && !rec_bytes && !bpe) {
      want = CODA_ERR_INVALID_ARGUMENT;
    } else if (rec && !rec_bytes && bpe) {
      size_t an = 0, bn = 0;
      unsigned char *a = slurp(rec, &an), *b = slurp(ck_tok, &bn);
      if (!b) fail("the checkpoint's tokenizer is gone");
      if (!a) want_warning = 1;
      else if (an != bn || memcmp(a, b, an)) want = CODA_ERR_INVALID_ARGUMENT;
      free(a);
      free(b);
    }
    free(rec);
    if (want == CODA_OK && (count < 1 || (count - 1) / SEQ < 1)) want = CODA_ERR_INVALID_ARGUMENT;
  }

  coda_warnings_clear(ctx);
  coda_eval_options o = coda_eval_default_options();
  o.checkpoint = ck;
  o.shard = shard;
  o.batch = 1;
  o.max_windows = 1;
  o.engine = CODA_TRAIN_ENGINE_REFERENCE;
  coda_eval_result r;
  const coda_status s = coda_evaluate(ctx, &o, &r);
#ifdef FUZZ_VERBOSE
  fprintf(stderr, "%s model, status %d (reference %d%s): %s%s",
          bpe ? "BPE" : ids ? "300-id" : "byte", (int)s,
          (int)want, want_warning ? ", a warning" : "", s ? coda_last_error(ctx) : "scored",
          "\n");
  fputs(coda_warnings(ctx), stderr);
#endif
  if (s == CODA_OK) {
    if (want != CODA_OK) {
      fprintf(stderr, "the reference refuses with status %d\n", (int)want);
      fail("a shard the reference refuses was scored");
    }
    if (!isfinite(r.loss) || r.windows != 1 || r.tokens != SEQ) fail("a score that is not one finite window");
  } else {
    check_refused(ctx, s, shard);
    if (want == CODA_OK) {
      fprintf(stderr, "%s\n", coda_last_error(ctx));
      fail("a shard the reference accepts was refused");
    }
    if (s != want) {
      fprintf(stderr, "status %d, the reference's %d: %s\n", (int)s, (int)want, coda_last_error(ctx));
      fail("a refusal with another status than the reference's");
    }
  }
  const int warned = strstr(coda_warnings(ctx), "cannot be read to compare") != NULL;
  if (s == CODA_OK && warned != want_warning) {
    fprintf(stderr, "warnings: '%s'\n", coda_warnings(ctx));
    fail(want_warning ? "an unreadable tokenizer record without a warning" : "a warning the reference does not expect");
  }
  if (warned && !strstr(coda_warnings(ctx), shard)) fail("a warning that does not name the shard");
  coda_warnings_clear(ctx);
  unlink(shard);
  remove_source();
  if (open_fds() != fds) fail("a file descriptor stayed open");
  return 0;
}
