/* Checkpoint faults. A child process trains with a checkpoint after every
 * step and is killed with SIGKILL after a random delay, ten times; each
 * child resumes from what the previous one left. After every kill the
 * checkpoint (if one was written yet) must load completely, with its
 * checksum, optimizer state and metadata, and its step must never go back.
 * Temporary files left by a kill that landed inside a write are read too:
 * they must be rejected with a message or load as a whole checkpoint,
 * never crash. Then single bytes of the data region are flipped at random
 * places: every flip must be caught by the CRC-32 on load. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"
#include "train_corpus.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static coda_train_options opts(const char *data, const char *out) {
  coda_train_options o = coda_train_default_options();
  o.model.seq = 32; /* otherwise the tiny configuration (dim 128, 2 layers) */
  o.batch = 2;
  o.steps = 100000; /* never reached: the child is killed */
  o.warmup = 10;
  o.save_every = 1;
  o.val_every = 0;
  o.val_batches = 0;
  o.seed = 5;
  o.data_dir = data;
  o.out_dir = out;
  o.quiet = 1;
  return o;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static int temp_present(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  while (d && !found && (e = readdir(d))) found = strstr(e->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return found;
}

/* Loads a checkpoint fully (config, weights, moments, state). */
static coda_status load_all(coda_context ctx, const char *path, coda_train_state *st) {
  coda_model_config c;
  coda_status s = coda_checkpoint_config(ctx, path, &c);
  if (s) return s;
  coda_model *m;
  s = coda_model_create(ctx, &c, CODA_ENGINE_REFERENCE, &m);
  if (s) return s;
  size_t n = coda_model_size(m);
  float *mo = malloc(n * sizeof *mo), *ve = malloc(n * sizeof *ve);
  s = mo && ve ? coda_checkpoint_load(ctx, path, m, mo, ve, st) : CODA_ERR_OUT_OF_MEMORY;
  free(mo);
  free(ve);
  coda_model_destroy(m);
  return s;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("random seed %llu\n", (unsigned long long)seed);
  char dir[256], data[300], out[300], ck[400];
  snprintf(dir, sizeof dir, "test_fault_checkpoint.tmp.%d", (int)getpid());
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(out, sizeof out, "%s/run", dir);
  snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", out);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  size_t len;
  char *text = train_corpus(seed, 60000, &len);
  CHECK(mkdir(data, 0777) == 0);
  CHECK(coda_prepare_corpus_text(ctx, text, len, data, 10, NULL, NULL) == CODA_OK);
  free(text);

  int64_t last_step = 0;
  int kills = 0, mid_write = 0, temp_ok = 0, temp_rejected = 0;
  uint64_t r = seed;
  for (int round = 0; round < 10; round++) {
    int resume = file_exists(ck);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      coda_context_options co = coda_context_default_options();
      co.num_threads = 1;
      coda_context cc;
      if (coda_context_create(&co, &cc) != CODA_OK) _exit(10);
      coda_train_options o = opts(data, out);
      if (resume) o.resume = ck;
      coda_train_summary sum;
      coda_status s = coda_train(cc, &o, &sum);
      if (s) fprintf(stderr, "child: %s\n", coda_last_error(cc));
      _exit(s ? 11 : 12); /* both are failures: the child is meant to be killed */
    }
    /* Until a first checkpoint exists, let the child write one (start-up
     * takes long under sanitizers on a loaded machine). Then 0.1 .. 2 s:
     * anywhere in the start-up or the steps. On odd rounds, from there wait
     * for a temporary file to appear (a write has begun) and kill 0..4 ms
     * into it. */
    if (!resume) {
      struct timespec poll = {0, 5000000L};
      for (int t = 0; t < 24000 && !file_exists(ck); t++) nanosleep(&poll, NULL);
    }
    long ms = 100 + (long)coda_rng_below(&r, 1900);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (round % 2) {
      struct timespec poll = {0, 200000L};
      for (int t = 0; t < 20000 && !temp_present(out); t++) nanosleep(&poll, NULL);
      struct timespec more = {0, (long)coda_rng_below(&r, 4000) * 1000L};
      nanosleep(&more, NULL);
    }
    CHECK(kill(pid, SIGKILL) == 0);
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid);
    CHECK_MSG(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "round %d: child ended by itself (%d)",
              round, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    kills++;

    if (file_exists(ck)) {
      coda_train_state st;
      coda_status s = load_all(ctx, ck, &st);
      CHECK_MSG(s == CODA_OK, "round %d (after %ld ms): checkpoint does not load: %s", round, ms,
                coda_last_error(ctx));
      if (s == CODA_OK) {
        CHECK_MSG(st.step >= last_step, "round %d: step went back from %lld to %lld", round,
                  (long long)last_step, (long long)st.step);
        CHECK(isfinite(st.last_loss));
        last_step = st.step;
      }
    } else {
      CHECK_MSG(last_step == 0, "round %d: the checkpoint disappeared", round);
    }
    /* Leftover temporary files: a kill inside coda_write_atomic. */
    DIR *d = opendir(out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (!strstr(e->d_name, ".tmp.")) continue;
      char tp[700];
      snprintf(tp, sizeof tp, "%s/%s", out, e->d_name);
      coda_train_state st;
      coda_status s = load_all(ctx, tp, &st);
      if (s == CODA_OK) temp_ok++; /* killed after the last byte, before the rename */
      else {
        temp_rejected++;
        CHECK(strlen(coda_last_error(ctx)) > 0);
      }
      mid_write++;
      unlink(tp);
    }
    if (d) closedir(d);
  }
  printf("%d kills, %d inside a checkpoint write (%d partial files rejected, %d complete); "
         "last checkpoint at step %lld\n", kills, mid_write, temp_rejected, temp_ok,
         (long long)last_step);
  CHECK_MSG(last_step > 0, "no checkpoint was ever written");

  /* Flipped bytes in the data region are caught by the data checksum,
   * anywhere else by the header checksum or the header's validation. */
  size_t n;
  unsigned char *b = slurp(ck, &n);
  CHECK(b != NULL && n > 16);
  if (b && n > 16) {
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    CHECK(8 + hl < n);
    char bad[500];
    snprintf(bad, sizeof bad, "%s/flipped.safetensors", dir);
    for (int k = 0; k < 8 && 8 + hl < n; k++) {
      size_t at = 8 + (size_t)hl + (size_t)coda_rng_below(&r, n - 8 - hl);
      unsigned char bit = (unsigned char)(1u << coda_rng_below(&r, 8));
      b[at] ^= bit;
      CHECK(spit(bad, b, n) == 0);
      coda_train_state st;
      coda_status s = load_all(ctx, bad, &st);
      CHECK_MSG(s == CODA_ERR_IO && strstr(coda_last_error(ctx), "checksum"),
                "flip at byte %zu of %zu: %s -> '%s'", at, n, coda_status_string(s),
                coda_last_error(ctx));
      b[at] ^= bit;
    }
    int by_crc = 0;
    for (int k = 0; k < 24; k++) {
      size_t at = (size_t)coda_rng_below(&r, 8 + hl); /* length bytes and header */
      if (k < 4) at = 8 + (size_t)coda_rng_below(&r, 600); /* the metadata comes first */
      unsigned char bit = (unsigned char)(1u << coda_rng_below(&r, 8));
      b[at] ^= bit;
      CHECK(spit(bad, b, n) == 0);
      coda_train_state st;
      coda_status s = load_all(ctx, bad, &st);
      CHECK_MSG(s == CODA_ERR_IO || s == CODA_ERR_SHAPE, "header flip at byte %zu: %s -> '%s'", at,
                coda_status_string(s), coda_last_error(ctx));
      by_crc += strstr(coda_last_error(ctx), "header checksum") != NULL;
      b[at] ^= bit;
    }
    printf("24 header flips: all rejected, %d of them by the header checksum\n", by_crc);
    /* a digit of a metadata value: consistent JSON, only the checksum sees it */
    char *step = strstr((char *)b + 8, "\"train.step\":\"");
    CHECK(step != NULL);
    if (step) {
      char *digit = step + strlen("\"train.step\":\""), orig = *digit;
      *digit = orig == '9' ? '8' : (char)(orig + 1);
      CHECK(spit(bad, b, n) == 0);
      coda_train_state st;
      CHECK(load_all(ctx, bad, &st) == CODA_ERR_IO);
      CHECK(strstr(coda_last_error(ctx), "header checksum mismatch") != NULL);
      *digit = orig;
    }
    /* and the unflipped bytes still load */
    CHECK(spit(bad, b, n) == 0);
    coda_train_state st;
    CHECK(load_all(ctx, bad, &st) == CODA_OK);
    remove(bad);
  }
  free(b);

  /* clean up */
  const char *files[] = {"checkpoint.safetensors", "loss.csv", "loss.svg"};
  for (int i = 0; i < 3; i++) {
    char p[500];
    snprintf(p, sizeof p, "%s/%s", out, files[i]);
    remove(p);
  }
  rmdir(out);
  char p[500];
  snprintf(p, sizeof p, "%s/train.tok", data); remove(p);
  snprintf(p, sizeof p, "%s/val.tok", data); remove(p);
  rmdir(data);
  rmdir(dir);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
