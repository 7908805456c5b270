/* Checkpoints: one safetensors file with the fp32 weights, the AdamW
 * moments ("optimizer.m.NAME", "optimizer.v.NAME") and, in __metadata__,
 * the model configuration, the step, the sampler position and RNG state,
 * the CRC-32 of the data region (verified on load), and the name, size and
 * CRC-32 of the tokenizer saved beside it, if any. */
#define _POSIX_C_SOURCE 200809L /* lstat */
#include "coda_tokenizer.h"
#include "coda_train.h"
#include "io/io.h"
#include "model/model.h"
#include "store/store.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CKPT_FORMAT "coda-checkpoint"

/* Entry k of a device save: pass k / np (weights, m, v) of parameter k % np. */
typedef struct {
  coda_context ctx;
  coda_model *model;
  int np;
} device_reader;

static coda_status read_device(void *user, int k, uint64_t off, void *dst, size_t n) {
  const device_reader *r = user;
  const coda_param *p = coda_model_param(r->model, k % r->np);
  return coda_plans_device_read(r->ctx, r->model, k / r->np, p->offset * sizeof(float) + off, dst,
                                n);
}

static coda_status save(coda_context ctx, const char *path, coda_model *model, const float *m,
                        const float *v, int device, const coda_train_state *st);

coda_status coda_checkpoint_save(coda_context ctx, const char *path, coda_model *model,
                                 const float *m, const float *v, const coda_train_state *st) {
  return save(ctx, path, model, m, v, 0, st);
}

coda_status coda_checkpoint_save_device(coda_context ctx, const char *path, coda_model *model,
                                        const coda_train_state *st) {
  return save(ctx, path, model, NULL, NULL, 1, st);
}

static coda_status save(coda_context ctx, const char *path, coda_model *model, const float *m,
                        const float *v, int device, const coda_train_state *st) {
  int np = coda_model_num_params(model);
  const int with_opt = device || (m && v);
  int n = np * (with_opt ? 3 : 1);
  coda_st_entry *e = calloc((size_t)n, sizeof *e);
  char (*names)[128] = calloc((size_t)n, sizeof *names);
  if (!e || !names) {
    free(e); free(names);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const float *w = coda_model_weights(model);
  int k = 0;
  for (int pass = 0; pass < (with_opt ? 3 : 1); pass++) {
    const float *base = device ? NULL : pass == 0 ? w : pass == 1 ? m : v;
    for (int i = 0; i < np; i++) {
      const coda_param *p = coda_model_param(model, i);
      snprintf(names[k], sizeof names[k], "%s%s", pass == 0 ? "" : pass == 1 ? "optimizer.m." : "optimizer.v.", p->name);
      e[k].name = names[k];
      e[k].dtype = "F32";
      e[k].ndim = p->ndim;
      e[k].shape[0] = p->shape[0];
      e[k].shape[1] = p->shape[1];
      e[k].data = base ? base + p->offset : NULL;
      k++;
    }
  }
  const coda_model_config *c = coda_model_cfg(model);
  char val[24][64];
  snprintf(val[0], 64, "%d", c->vocab);
  snprintf(val[1], 64, "%d", c->dim);
  snprintf(val[2], 64, "%d", c->layers);
  snprintf(val[3], 64, "%d", c->heads);
  snprintf(val[4], 64, "%d", c->kv_heads);
  snprintf(val[5], 64, "%d", c->ffn);
  snprintf(val[6], 64, "%d", c->seq);
  snprintf(val[7], 64, "%d", c->tied);
  snprintf(val[8], 64, "%.17g", c->rope_theta);
  snprintf(val[9], 64, "%.17g", c->norm_eps);
  snprintf(val[10], 64, "%lld", (long long)(st ? st->step : 0));
  snprintf(val[11], 64, "%llu", (unsigned long long)(st ? st->rng : 0));
  snprintf(val[12], 64, "%llu", (unsigned long long)(st ? st->drawn : 0));
  snprintf(val[13], 64, "%.17g", st ? st->last_loss : NAN);
  const char *rope_name[] = {"none", "linear", "llama3"};
  const int rt = c->rope.type == CODA_ROPE_LINEAR ? 1 : c->rope.type == CODA_ROPE_LLAMA3 ? 2 : 0;
  snprintf(val[14], 64, "%.17g", c->rope.factor);
  snprintf(val[15], 64, "%.17g", c->rope.low_freq_factor);
  snprintf(val[16], 64, "%.17g", c->rope.high_freq_factor);
  snprintf(val[17], 64, "%.17g", c->rope.original_max_position);
  snprintf(val[18], 64, "%d", c->head_dim);
  snprintf(val[19], 64, "%d", c->sliding_window);
  snprintf(val[20], 64, "%d", c->sliding_pattern);
  snprintf(val[21], 64, "%.17g", c->rope_local_theta);
  snprintf(val[22], 64, "%.17g", c->attn_scalar);
  snprintf(val[23], 64, "%.17g", c->logit_softcap);
  char tcrc[16], tbytes[32];
  const int tok = st && st->tokenizer_file[0];
  if (tok) {
    snprintf(tcrc, sizeof tcrc, "%08x", (unsigned)st->tokenizer_crc32);
    snprintf(tbytes, sizeof tbytes, "%llu", (unsigned long long)st->tokenizer_bytes);
  }
  const char *kv[] = {"format", CKPT_FORMAT, "version", "1", "tokenizer", tok ? "bpe" : "bytes",
                      "has_optimizer", with_opt ? "1" : "0",
                      "model.vocab", val[0], "model.dim", val[1], "model.layers", val[2],
                      "model.heads", val[3], "model.kv_heads", val[4], "model.ffn", val[5],
                      "model.seq", val[6], "model.tied", val[7], "model.rope_theta", val[8],
                      "model.norm_eps", val[9], "train.step", val[10], "train.rng_state", val[11],
                      "train.samples_drawn", val[12], "train.last_loss", val[13],
                      /* the family table's name and the head width (0: dim / heads) */
                      "model.family", coda_model_family_name(c->family), "model.head_dim", val[18],
                      /* Gemma 3's fields, written for that family only (a llama
                       * model's window too, when it has one) */
                      "model.sliding_window", val[19], "model.sliding_pattern", val[20],
                      "model.rope_local_theta", val[21], "model.attn_scalar", val[22],
                      "model.logit_softcap", val[23],
                      "model.rope_scaling", rope_name[rt],
                      /* the scaling's numbers, only for the types that read them */
                      "model.rope_factor", val[14], "model.rope_low_freq_factor", val[15],
                      "model.rope_high_freq_factor", val[16],
                      "model.rope_original_max_position", val[17],
                      /* the tokenizer beside the checkpoint (coda_checkpoint_tokenizer) */
                      "tokenizer.file", tok ? st->tokenizer_file : "",
                      "tokenizer.crc32", tok ? tcrc : "", "tokenizer.bytes", tok ? tbytes : ""};
  /* the scaling's numbers only for the types that read them; the
   * tokenizer's entries only when there is one */
  const int nrope_unused = rt == 0 ? 4 : rt == 1 ? 3 : 0;
  const char *kvs[2 * (sizeof kv / sizeof kv[0] / 2)];
  int nkv = 0;
  const int nall = (int)(sizeof kv / sizeof kv[0]) / 2, first_rope_num = nall - 3 - 4;
  for (int i = 0; i < nall; i++) {
    if (i >= first_rope_num + 4 - nrope_unused && i < first_rope_num + 4) continue;
    if (i >= nall - 3 && !tok) continue;
    const int llama_window = c->family == CODA_FAMILY_LLAMA && c->sliding_window > 0 &&
                             !strcmp(kv[2 * i], "model.sliding_window");
    if (c->family != CODA_FAMILY_GEMMA3 && !llama_window &&
        !strncmp(kv[2 * i], "model.sliding_", 14))
      continue;
    if (c->family != CODA_FAMILY_GEMMA3 &&
        (!strcmp(kv[2 * i], "model.rope_local_theta") || !strcmp(kv[2 * i], "model.attn_scalar") ||
         !strcmp(kv[2 * i], "model.logit_softcap")))
      continue;
    kvs[2 * nkv] = kv[2 * i];
    kvs[2 * nkv + 1] = kv[2 * i + 1];
    nkv++;
  }
  device_reader rd = {ctx, model, np};
  coda_status s = coda_st_save_from(ctx, path, e, n, kvs, nkv, device ? read_device : NULL, &rd);
  free(e);
  free(names);
  return s;
}

static coda_status meta_i64(coda_context ctx, const coda_st_file *f, const char *path,
                            const char *key, int64_t lo, int64_t hi, int64_t *out) {
  const char *v = coda_st_meta(f, key);
  if (!v) return coda_fail(ctx, CODA_ERR_IO, "%s: metadata '%s' is missing", path, key);
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return coda_fail(ctx, CODA_ERR_IO, "%s: metadata '%s' = '%s' is not an integer in [%lld, %lld]",
                     path, key, v, (long long)lo, (long long)hi);
  *out = x;
  return CODA_OK;
}

static coda_status meta_u64(coda_context ctx, const coda_st_file *f, const char *path,
                            const char *key, uint64_t *out) {
  const char *v = coda_st_meta(f, key);
  if (!v) return coda_fail(ctx, CODA_ERR_IO, "%s: metadata '%s' is missing", path, key);
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || !isdigit((unsigned char)*v)) /* digits only: no sign, no space */
    return coda_fail(ctx, CODA_ERR_IO, "%s: metadata '%s' = '%s' is not an unsigned integer",
                     path, key, v);
  *out = x;
  return CODA_OK;
}

/* finite: also refuse inf and nan (the model's numbers; the last loss may
 * be nan). */
static coda_status meta_f64(coda_context ctx, const coda_st_file *f, const char *path,
                            const char *key, int finite, double *out) {
  const char *v = coda_st_meta(f, key);
  if (!v) return coda_fail(ctx, CODA_ERR_IO, "%s: metadata '%s' is missing", path, key);
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || (finite && !isfinite(x)))
    return coda_fail(ctx, CODA_ERR_IO, "%s: metadata '%s' = '%s' is not a%s number", path,
                     key, v, finite ? " finite" : "");
  *out = x;
  return CODA_OK;
}

static coda_status config_from(coda_context ctx, const coda_st_file *f, const char *path,
                               coda_model_config *c) {
  const char *fmt = coda_st_meta(f, "format");
  if (!fmt || strcmp(fmt, CKPT_FORMAT))
    return coda_fail(ctx, CODA_ERR_IO, "%s: not a coda checkpoint (metadata format is '%s')", path,
                     fmt ? fmt : "missing");
  const char *ver = coda_st_meta(f, "version");
  if (!ver || strcmp(ver, "1"))
    return coda_fail(ctx, CODA_ERR_IO, "%s: unsupported checkpoint version '%s'", path,
                     ver ? ver : "missing");
  int64_t x[8];
  const char *keys[8] = {"model.vocab", "model.dim", "model.layers", "model.heads",
                         "model.kv_heads", "model.ffn", "model.seq", "model.tied"};
  for (int i = 0; i < 8; i++) {
    coda_status s = meta_i64(ctx, f, path, keys[i], 0, 1 << 30, &x[i]);
    if (s) return s;
  }
  memset(c, 0, sizeof *c);
  c->vocab = (int)x[0]; c->dim = (int)x[1]; c->layers = (int)x[2]; c->heads = (int)x[3];
  c->kv_heads = (int)x[4]; c->ffn = (int)x[5]; c->seq = (int)x[6]; c->tied = x[7] != 0;
  coda_status s = meta_f64(ctx, f, path, "model.rope_theta", 1, &c->rope_theta);
  if (!s) s = meta_f64(ctx, f, path, "model.norm_eps", 1, &c->norm_eps);
  /* family and head width: absent in checkpoints written before the family
   * table (Llama, dim / heads) */
  const char *fam = coda_st_meta(f, "model.family");
  if (!s && fam && coda_model_family_from_name(ctx, fam, &c->family))
    return coda_fail(ctx, CODA_ERR_IO, "%s: metadata 'model.family' = '%.64s' is not a model "
                     "family (llama, qwen3, gpt2, gemma3)", path, fam);
  if (!s && coda_st_meta(f, "model.head_dim")) {
    int64_t hd = 0;
    s = meta_i64(ctx, f, path, "model.head_dim", 0, 1024, &hd);
    c->head_dim = (int)hd;
  }
  /* Gemma 3's fields: absent in other families' checkpoints (0) */
  if (!s && c->family == CODA_FAMILY_GEMMA3) {
    int64_t sw = 0, sp = 0;
    s = meta_i64(ctx, f, path, "model.sliding_window", 0, 1 << 30, &sw);
    if (!s) s = meta_i64(ctx, f, path, "model.sliding_pattern", 0, 1 << 30, &sp);
    c->sliding_window = (int)sw;
    c->sliding_pattern = (int)sp;
    if (!s) s = meta_f64(ctx, f, path, "model.rope_local_theta", 1, &c->rope_local_theta);
    if (!s) s = meta_f64(ctx, f, path, "model.attn_scalar", 1, &c->attn_scalar);
    if (!s) s = meta_f64(ctx, f, path, "model.logit_softcap", 1, &c->logit_softcap);
  }
  /* a llama model's window (Mistral's): written only when it has one */
  if (!s && c->family == CODA_FAMILY_LLAMA && coda_st_meta(f, "model.sliding_window")) {
    int64_t sw = 0;
    s = meta_i64(ctx, f, path, "model.sliding_window", 0, 1 << 30, &sw);
    c->sliding_window = (int)sw;
  }
  /* RoPE scaling: absent in checkpoints written before it existed (none) */
  const char *rs = coda_st_meta(f, "model.rope_scaling");
  if (!s && rs && strcmp(rs, "none")) {
    if (!strcmp(rs, "linear")) c->rope.type = CODA_ROPE_LINEAR;
    else if (!strcmp(rs, "llama3")) c->rope.type = CODA_ROPE_LLAMA3;
    else return coda_fail(ctx, CODA_ERR_IO, "%s: metadata 'model.rope_scaling' = '%s' is not "
                          "none, linear or llama3", path, rs);
    s = meta_f64(ctx, f, path, "model.rope_factor", 1, &c->rope.factor);
    if (!s && c->rope.type == CODA_ROPE_LLAMA3) {
      s = meta_f64(ctx, f, path, "model.rope_low_freq_factor", 1, &c->rope.low_freq_factor);
      if (!s) s = meta_f64(ctx, f, path, "model.rope_high_freq_factor", 1, &c->rope.high_freq_factor);
      if (!s) s = meta_f64(ctx, f, path, "model.rope_original_max_position", 1,
                           &c->rope.original_max_position);
    }
  }
  if (!s) {
    s = coda_model_config_check(ctx, c);
    if (s) return coda_fail(ctx, CODA_ERR_IO, "%s: bad model configuration: %s", path,
                            coda_last_error(ctx));
  }
  return s;
}

coda_status coda_checkpoint_config(coda_context ctx, const char *path, coda_model_config *cfg) {
  coda_st_file f;
  /* the header alone (bounded; its checksum verified): the configuration
   * is known before any weight is read */
  coda_status s = coda_st_load_ex(ctx, path, 1, UINT64_MAX, 1, &f);
  if (s) return s;
  s = config_from(ctx, &f, path, cfg);
  coda_st_free(&f);
  return s;
}

static coda_status copy_tensor(coda_context ctx, const coda_st_file *f, const char *path,
                               const char *name, const coda_param *p, float *dst) {
  const coda_st_tensor *t = coda_st_find(f, name);
  if (!t) return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' is missing", path, name);
  if (strcmp(t->dtype, "F32"))
    return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has dtype %s, expected F32", path, name,
                     t->dtype);
  int ok = t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
           (p->ndim == 1 || t->shape[1] == p->shape[1]);
  if (!ok)
    return coda_fail(ctx, CODA_ERR_IO, "%s: tensor '%s' has the wrong shape", path, name);
  memcpy(dst, t->data, p->size * sizeof(float)); /* little-endian host */
  return CODA_OK;
}

coda_status coda_checkpoint_load(coda_context ctx, const char *path, coda_model *model, float *m,
                                 float *v, coda_train_state *st) {
  coda_st_file f;
  /* At most the header and the weights with both moments of this model:
   * a larger file is refused before it is read. */
  const uint64_t max = 8 + (uint64_t)CODA_ST_MAX_HEADER + 3 * (uint64_t)coda_model_size(model) * 4;
  coda_status s = coda_st_load_ex(ctx, path, 1, max, 0, &f);
  if (s) return s;
  coda_model_config c;
  s = config_from(ctx, &f, path, &c);
  const coda_model_config *mc = coda_model_cfg(model);
  if (!s && (c.vocab != mc->vocab || c.dim != mc->dim || c.layers != mc->layers ||
             c.heads != mc->heads || c.kv_heads != mc->kv_heads || c.ffn != mc->ffn ||
             c.tied != mc->tied))
    s = coda_fail(ctx, CODA_ERR_SHAPE, "%s: checkpoint model (dim %d, layers %d, heads %d/%d, "
                  "ffn %d, vocab %d, tied %d) differs from the requested one", path, c.dim,
                  c.layers, c.heads, c.kv_heads, c.ffn, c.vocab, c.tied);
  if (!s && (m || v)) {
    const char *h = coda_st_meta(&f, "has_optimizer");
    if (!h || strcmp(h, "1"))
      s = coda_fail(ctx, CODA_ERR_IO, "%s: checkpoint has no optimizer state", path);
  }
  char name[128];
  for (int i = 0; i < coda_model_num_params(model) && !s; i++) {
    const coda_param *p = coda_model_param(model, i);
    s = copy_tensor(ctx, &f, path, p->name, p, coda_model_weights(model) + p->offset);
    if (!s && m) {
      snprintf(name, sizeof name, "optimizer.m.%s", p->name);
      s = copy_tensor(ctx, &f, path, name, p, m + p->offset);
    }
    if (!s && v) {
      snprintf(name, sizeof name, "optimizer.v.%s", p->name);
      s = copy_tensor(ctx, &f, path, name, p, v + p->offset);
    }
  }
  if (!s && st) {
    s = meta_i64(ctx, &f, path, "train.step", 0, INT64_MAX, &st->step);
    if (!s) s = meta_u64(ctx, &f, path, "train.rng_state", &st->rng);
    if (!s) s = meta_u64(ctx, &f, path, "train.samples_drawn", &st->drawn);
    if (!s) s = meta_f64(ctx, &f, path, "train.last_loss", 0, &st->last_loss);
    /* the tokenizer it names (coda_checkpoint_tokenizer verifies the file) */
    const char *tf = coda_st_meta(&f, "tokenizer.file"), *tc = coda_st_meta(&f, "tokenizer.crc32");
    st->tokenizer_file[0] = '\0';
    st->tokenizer_crc32 = 0;
    st->tokenizer_bytes = 0;
    if (!s && tf && tc && strlen(tf) < sizeof st->tokenizer_file) {
      snprintf(st->tokenizer_file, sizeof st->tokenizer_file, "%s", tf);
      st->tokenizer_crc32 = (uint32_t)strtoul(tc, NULL, 16);
      s = meta_u64(ctx, &f, path, "tokenizer.bytes", &st->tokenizer_bytes);
    }
  }
  coda_st_free(&f);
  return s;
}

coda_status coda_checkpoint_config_to_load(coda_context ctx, const char *path,
                                           coda_model_config *cfg) {
  coda_status s = coda_checkpoint_config(ctx, path, cfg);
  if (s) return s;
  if (coda_context_backend(ctx) == CODA_BACKEND_CPU &&
      coda_model_config_params(cfg) > CODA_CPU_MAX_PARAMS)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "%s: a model of %lld parameters is beyond the "
                     "CPU limit of %lld", path, (long long)coda_model_config_params(cfg),
                     (long long)CODA_CPU_MAX_PARAMS);
  return CODA_OK;
}

/* ------------------------------------------------- the carried tokenizer */

/* The directory of a file path ("." for a bare name), malloc'ed, joined
 * with name. */
static char *beside(const char *file, const char *name) {
  const char *slash = strrchr(file, '/');
  const size_t dl = slash ? (size_t)(slash - file) : 1, n = dl + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%.*s/%s", (int)dl, slash ? file : ".", name);
  return p;
}

static int regular_file(const char *p, struct stat *sb) {
  return stat(p, sb) == 0 && S_ISREG(sb->st_mode);
}

coda_status coda_checkpoint_carry_tokenizer(coda_context ctx, const char *src, const char *ckpt,
                                            int vocab, coda_train_state *st) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!src || !ckpt || !st) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL argument");
  /* it must be a tokenizer coda reads, fitting the model */
  coda_tokenizer tk = NULL;
  coda_status s = coda_tokenizer_load(ctx, src, &tk);
  if (s) return s;
  const size_t tv = coda_tokenizer_vocab_size(tk);
  coda_tokenizer_destroy(tk);
  if (vocab > 0 && tv > (size_t)vocab)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "%s has %zu tokens, more than the model's "
                     "vocab %d", src, tv, vocab);
  unsigned char *b = NULL;
  size_t n = 0;
  s = coda_read_file_max(ctx, src, CODA_TOKENIZER_FILE_MAX, &b, &n);
  if (s) return s;
  char *dst = beside(ckpt, "tokenizer.json");
  if (!dst) {
    free(b);
    return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  }
  struct stat ss, ds;
  const int same = regular_file(src, &ss) && regular_file(dst, &ds) && ss.st_dev == ds.st_dev &&
                   ss.st_ino == ds.st_ino;
  if (!same && regular_file(dst, &ds)) {
    /* a file is already there: the same bytes, or it is not ours to replace */
    unsigned char *o = NULL;
    size_t on = 0;
    s = coda_read_file_max(ctx, dst, CODA_TOKENIZER_FILE_MAX, &o, &on);
    if (!s && (on != n || memcmp(o, b, n)))
      s = coda_fail(ctx, CODA_ERR_IO, "%s already exists and differs from the tokenizer %s: it "
                    "is not replaced (remove it, or write the run to another directory)", dst, src);
    free(o);
  } else if (!same) {
    struct stat any;
    if (lstat(dst, &any) == 0)
      s = coda_fail(ctx, CODA_ERR_IO, "%s exists and is not a regular file: the tokenizer %s "
                    "cannot be put beside the checkpoint", dst, src);
    else {
      const void *parts[1] = {b};
      size_t sizes[1] = {n};
      s = coda_write_atomic(ctx, dst, parts, sizes, 1);
    }
  }
  if (!s) {
    snprintf(st->tokenizer_file, sizeof st->tokenizer_file, "tokenizer.json");
    st->tokenizer_crc32 = coda_crc32(0, b, n);
    st->tokenizer_bytes = n;
  }
  free(b);
  free(dst);
  return s;
}

/* A name in the checkpoint's directory (no path separators, not . or ..). */
static int plain_file_name(const char *s) {
  if (!*s || strlen(s) > 255 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
  for (const char *p = s; *p; p++)
    if (*p == '/' || *p == '\\') return 0;
  return 1;
}

coda_status coda_checkpoint_tokenizer(coda_context ctx, const char *checkpoint, char **path,
                                      int *recorded) {
  if (!ctx) return CODA_ERR_INVALID_ARGUMENT;
  if (!checkpoint || !path) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "NULL argument");
  *path = NULL;
  if (recorded) *recorded = 0;
  struct stat sb;
  if (stat(checkpoint, &sb) != 0)
    return coda_fail(ctx, CODA_ERR_IO, "%s: no such checkpoint file or model folder", checkpoint);
  if (S_ISDIR(sb.st_mode)) { /* a Hugging Face model folder */
    const size_t n = strlen(checkpoint) + 16;
    char *p = malloc(n);
    if (!p) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(p, n, "%s/tokenizer.json", checkpoint);
    if (regular_file(p, &sb)) *path = p;
    else free(p);
    return CODA_OK;
  }
  coda_st_file f;
  coda_status s = coda_st_load_ex(ctx, checkpoint, 1, UINT64_MAX, 1, &f);
  if (s) return s;
  const char *name = coda_st_meta(&f, "tokenizer.file");
  if (!name) { /* none recorded: the file beside it, if any */
    coda_st_free(&f);
    char *p = beside(checkpoint, "tokenizer.json");
    if (!p) return coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
    if (regular_file(p, &sb)) *path = p;
    else free(p);
    return CODA_OK;
  }
  uint64_t want_bytes = 0;
  uint32_t want_crc = 0;
  const char *crc = coda_st_meta(&f, "tokenizer.crc32");
  char *end = NULL;
  if (!plain_file_name(name))
    s = coda_fail(ctx, CODA_ERR_IO, "%s: metadata 'tokenizer.file' = '%.64s' is not a file name",
                  checkpoint, name);
  if (!s) s = meta_u64(ctx, &f, checkpoint, "tokenizer.bytes", &want_bytes);
  if (!s) {
    errno = 0;
    unsigned long x = crc ? strtoul(crc, &end, 16) : 0;
    if (!crc || errno || end == crc || *end || strlen(crc) != 8 || x > 0xffffffffUL ||
        strspn(crc, "0123456789abcdefABCDEF") != 8) /* no sign, space or 0x */
      s = coda_fail(ctx, CODA_ERR_IO, "%s: metadata 'tokenizer.crc32' is missing or not 8 hex "
                    "digits", checkpoint);
    want_crc = (uint32_t)x;
  }
  char *p = s ? NULL : beside(checkpoint, name);
  if (!s && !p) s = coda_fail(ctx, CODA_ERR_OUT_OF_MEMORY, "out of memory");
  coda_st_free(&f);
  if (!s && !regular_file(p, &sb))
    s = coda_fail(ctx, CODA_ERR_IO, "%s: the checkpoint's tokenizer %s is missing (it was saved "
                  "beside the checkpoint; copy it back, or name one with --tokenizer)",
                  checkpoint, p);
  if (!s) {
    unsigned char *b = NULL;
    size_t n = 0;
    s = coda_read_file_max(ctx, p, CODA_TOKENIZER_FILE_MAX, &b, &n);
    if (!s && (n != want_bytes || coda_crc32(0, b, n) != want_crc))
      s = coda_fail(ctx, CODA_ERR_IO, "%s: the tokenizer %s is not the one the checkpoint was "
                    "trained with (%zu bytes, CRC-32 %08x; recorded %llu bytes, %08x): restore "
                    "it, or name one with --tokenizer", checkpoint, p, n,
                    (unsigned)coda_crc32(0, b, n), (unsigned long long)want_bytes,
                    (unsigned)want_crc);
    free(b);
  }
  if (s) {
    free(p);
    return s;
  }
  *path = p;
  if (recorded) *recorded = 1;
  return CODA_OK;
}
