/* Hostile files and arguments at the library's entries: messages that wrap
 * the previous one, empty tensor views, NULL arguments, checkpoints that
 * are not regular files (a directory, a FIFO, /dev/zero), duplicate
 * metadata keys, non-finite model numbers, temporaries left by a killed
 * save, and the mode new files get. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "base/internal.h"
#include "io/io.h"
#include "data/data.h"
#include "model/model.h"
#include "store/store.h"
#include "base/tune_cache.h"
#include "check.h"
#include "file_util.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* A config-only checkpoint: the metadata of a tiny model, rope_theta as
 * given, no tensors (the configuration is read before any tensor). */
static coda_status save_meta(coda_context ctx, const char *path, const char *rope,
                             const char *dup_key) {
  const char *kv[] = {"format", "coda-checkpoint", "version", "1", "model.vocab", "256",
                      "model.dim", "32", "model.layers", "1", "model.heads", "2",
                      "model.kv_heads", "1", "model.ffn", "64", "model.seq", "16",
                      "model.tied", "0", "model.rope_theta", rope, "model.norm_eps", "1e-5",
                      dup_key ? dup_key : "extra", "0"};
  return coda_st_save(ctx, path, NULL, 0, kv, (int)(sizeof kv / sizeof kv[0]) / 2);
}

int main(void) {
  coda_context_options co = coda_context_default_options();
  co.num_threads = 1;
  coda_context ctx;
  CHECK(coda_context_create(&co, &ctx) == CODA_OK);
  char dir[] = "/tmp/coda_hostile_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char p[512], q[512];
  alarm(120); /* a blocking open (FIFO) must fail the test, not hang it */

  /* A message that wraps the context's previous one. */
  coda_fail(ctx, CODA_ERR_IO, "inner %d", 7);
  coda_fail(ctx, CODA_ERR_IO, "outer: %s", coda_last_error(ctx));
  CHECK_MSG(!strcmp(coda_last_error(ctx), "outer: inner 7"), "'%s'", coda_last_error(ctx));
  coda_fail(ctx, CODA_ERR_IO, "%s", coda_last_error(ctx));
  CHECK_MSG(!strcmp(coda_last_error(ctx), "outer: inner 7"), "'%s'", coda_last_error(ctx));

  /* An empty view is a valid tensor. */
  coda_tensor e = coda_tensor_2d(NULL, CODA_F32, 0, 0);
  CHECK_MSG(coda_check_tensor(ctx, "empty", &e) == CODA_OK, "%s", coda_last_error(ctx));
  e = coda_tensor_2d(NULL, CODA_F32, 0, 5);
  CHECK(coda_check_tensor(ctx, "empty", &e) == CODA_OK);

  /* NULL arguments at the train entries: errors, never a crash. */
  CHECK(coda_prepare_corpus(ctx, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_prepare_corpus(NULL, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  snprintf(p, sizeof p, "%s/never", dir);
  CHECK(coda_prepare_corpus(ctx, NULL, p) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(access(p, F_OK) != 0); /* nothing created for a refused call */
  CHECK(coda_train(NULL, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_train(ctx, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_generate(NULL, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_generate(ctx, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_hf_export_checkpoint(ctx, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_hf_import_checkpoint(NULL, NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);

  /* Not regular files: refused by name, without blocking or reading. */
  coda_model_config c;
  CHECK(coda_checkpoint_config(ctx, dir, &c) == CODA_ERR_IO);
  CHECK_MSG(has(coda_last_error(ctx), "directory") && has(coda_last_error(ctx), dir), "%s",
            coda_last_error(ctx));
  CHECK(coda_checkpoint_config(ctx, "/dev/zero", &c) == CODA_ERR_IO);
  CHECK_MSG(has(coda_last_error(ctx), "/dev/zero: is a device, not a regular file"), "%s",
            coda_last_error(ctx));
  snprintf(p, sizeof p, "%s/fifo", dir);
  CHECK(mkfifo(p, 0600) == 0);
  CHECK(coda_checkpoint_config(ctx, p, &c) == CODA_ERR_IO);
  CHECK_MSG(has(coda_last_error(ctx), "FIFO"), "%s", coda_last_error(ctx));
  unsigned char *b = NULL;
  size_t n = 0;
  CHECK(coda_read_file(ctx, p, &b, &n) == CODA_ERR_IO);
  uint32_t *tok = NULL;
  uint64_t cnt;
  CHECK(coda_shard_read(ctx, "/dev/zero", &tok, &cnt, NULL) == CODA_ERR_IO);
  CHECK(coda_read_file_max(ctx, "/dev/null", 10, &b, &n) == CODA_ERR_IO);
  /* a tuning cache that is a FIFO is ignored, without blocking */
  {
    coda_tune_cache tc;
    coda_tune_cache_init(&tc, "dev", "lib", p);
    CHECK(coda_tune_cache_load(&tc) == 0);
    coda_tune_cache_free(&tc);
  }
  unlink(p);
  /* A header length larger than the file: refused before the whole read. */
  snprintf(p, sizeof p, "%s/len.safetensors", dir);
  unsigned char len8[16] = {0xff, 0xff, 0xff, 0x00, 0, 0, 0, 0, '{', '}'};
  CHECK(spit(p, len8, sizeof len8) == 0);
  CHECK(coda_checkpoint_config(ctx, p, &c) == CODA_ERR_IO);
  CHECK_MSG(has(coda_last_error(ctx), "bad header length"), "%s", coda_last_error(ctx));

  /* Configuration numbers: finite at the checkpoint check; a bad one is
   * named once, with the path. */
  snprintf(p, sizeof p, "%s/inf.safetensors", dir);
  CHECK(save_meta(ctx, p, "inf", NULL) == CODA_OK);
  CHECK(coda_checkpoint_config(ctx, p, &c) == CODA_ERR_IO);
  CHECK_MSG(has(coda_last_error(ctx), "model.rope_theta") && has(coda_last_error(ctx), "finite"),
            "%s", coda_last_error(ctx));
  snprintf(p, sizeof p, "%s/small.safetensors", dir);
  CHECK(save_meta(ctx, p, "0.5", NULL) == CODA_OK);
  CHECK(coda_checkpoint_config(ctx, p, &c) == CODA_ERR_IO);
  {
    const char *m = coda_last_error(ctx);
    const char *first = strstr(m, "bad model configuration");
    CHECK_MSG(first && !strstr(first + 1, "bad model configuration") && has(m, "rope theta 0.5"),
              "%s", m);
    CHECK_MSG(!strncmp(m, p, strlen(p)) && !strstr(m + 1, p), "%s", m);
  }
  snprintf(p, sizeof p, "%s/ok.safetensors", dir);
  CHECK(save_meta(ctx, p, "10000", NULL) == CODA_OK);
  CHECK_MSG(coda_checkpoint_config(ctx, p, &c) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_EQ_INT(c.dim, 32);

  /* A checkpoint grown (sparse) to 8 GiB: its configuration comes from the
   * header alone, and loading refuses it by size before reading. */
  {
    coda_model_config mc;
    CHECK(coda_model_config_named("tiny", &mc) == CODA_OK);
    mc.dim = 32; mc.layers = 1; mc.heads = 2; mc.kv_heads = 1; mc.ffn = 64; mc.seq = 16;
    coda_model *m;
    CHECK(coda_model_create(ctx, &mc, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
    coda_model_init(m, 1);
    coda_train_state ts = {0, 0, 0, 0.0, "", 0, 0};
    snprintf(q, sizeof q, "%s/huge.safetensors", dir);
    CHECK(coda_checkpoint_save(ctx, q, m, NULL, NULL, &ts) == CODA_OK);
    CHECK(coda_checkpoint_load(ctx, q, m, NULL, NULL, NULL) == CODA_OK);
    CHECK(truncate(q, (off_t)8 << 30) == 0);
    CHECK_MSG(coda_checkpoint_config(ctx, q, &c) == CODA_OK, "%s", coda_last_error(ctx));
    CHECK_EQ_INT(c.dim, 32);
    CHECK(coda_checkpoint_load(ctx, q, m, NULL, NULL, NULL) == CODA_ERR_IO);
    CHECK_MSG(has(coda_last_error(ctx), "more than"), "%s", coda_last_error(ctx));
    unlink(q);
    coda_model_destroy(m);
  }

  /* Duplicate metadata keys are refused. */
  snprintf(p, sizeof p, "%s/dup.safetensors", dir);
  CHECK(save_meta(ctx, p, "10000", "model.dim") == CODA_OK);
  CHECK(coda_checkpoint_config(ctx, p, &c) == CODA_ERR_IO);
  CHECK_MSG(has(coda_last_error(ctx), "'model.dim' appears twice"), "%s", coda_last_error(ctx));

  /* A save removes the temporaries a killed save of the same target left,
   * and only those. */
  snprintf(p, sizeof p, "%s/ck.safetensors", dir);
  const char *left[] = {"ck.safetensors.tmp.Ab12Zz", "ck.safetensors.tmp.000000"};
  const char *kept[] = {"ck.safetensors.tmp.abc", "ck.safetensors.tmp.Ab12Zz.keep",
                        "other.safetensors.tmp.Ab12Zz", "ck.safetensors.tmp.Ab-2Zz"};
  for (int i = 0; i < 2; i++) {
    snprintf(q, sizeof q, "%s/%s", dir, left[i]);
    CHECK(spit(q, (const unsigned char *)"x", 1) == 0);
  }
  for (int i = 0; i < 4; i++) {
    snprintf(q, sizeof q, "%s/%s", dir, kept[i]);
    CHECK(spit(q, (const unsigned char *)"x", 1) == 0);
  }
  /* the mode: 0666 less the umask, as for any file the user creates */
  mode_t old = umask(022);
  CHECK(save_meta(ctx, p, "10000", NULL) == CODA_OK);
  umask(old);
  struct stat st;
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0644);
  for (int i = 0; i < 2; i++) {
    snprintf(q, sizeof q, "%s/%s", dir, left[i]);
    CHECK_MSG(access(q, F_OK) != 0, "%s was not removed", q);
    unlink(q);
  }
  for (int i = 0; i < 4; i++) {
    snprintf(q, sizeof q, "%s/%s", dir, kept[i]);
    CHECK_MSG(access(q, F_OK) == 0, "%s was removed", q);
    unlink(q);
  }
  const char *files[] = {"ck.safetensors", "ok.safetensors", "dup.safetensors", "inf.safetensors",
                         "small.safetensors", "len.safetensors"};
  for (int i = 0; i < 6; i++) {
    snprintf(q, sizeof q, "%s/%s", dir, files[i]);
    unlink(q);
  }
  rmdir(dir);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
