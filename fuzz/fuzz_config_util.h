/* Shared by the model-configuration harnesses (fuzz_hf_config.c,
 * fuzz_checkpoint_config.c, and fuzz_checkpoint_tokenizer.c and
 * fuzz_eval_shard.c for their helpers): a per-input private directory, a count of
 * the open file descriptors, and the invariants an accepted model
 * configuration must hold, written out here rather than taken from
 * coda_model_config_check (which is also called, as a second opinion). */
#ifndef CODA_FUZZ_CONFIG_UTIL_H
#define CODA_FUZZ_CONFIG_UTIL_H

#define _POSIX_C_SOURCE 200809L
#include "coda_nn.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *fuzz_name = "fuzz_config";

static void fail(const char *what) {
  fprintf(stderr, "%s: %s\n", fuzz_name, what);
  abort();
}

/* Open descriptors of this process (the harness's own directory stream
 * counted in both calls, so the difference is what the reader kept). */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static void put_file(const char *path, const void *d, size_t n) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_CREAT, 0600);
  if (fd < 0) fail("cannot write a temporary file");
  size_t at = 0;
  while (at < n) {
    ssize_t w = write(fd, (const char *)d + at, n - at);
    if (w <= 0) fail("short write");
    at += (size_t)w;
  }
  close(fd);
}

static int pos_finite(double x) { return x > 0.0 && isfinite(x); }

/* What every model coda builds must satisfy: a known family, positive
 * sizes within the caps, an even head size (dim / heads unless head_dim is
 * set, and always dim / heads for Llama; GPT-2's any size, with one kv head
 * per head, a tied head and no RoPE scaling; Gemma 3's fields in gemma3
 * only), kv heads dividing heads, finite
 * RoPE and norm numbers, a valid RoPE scaling. */
static void check_accepted(coda_context ctx, const coda_model_config *c) {
  if (c->vocab < 2 || c->dim < 2 || c->layers < 1 || c->heads < 1 || c->kv_heads < 1 ||
      c->ffn < 1 || c->seq < 1)
    fail("accepted a non-positive size");
  if (c->dim > (1 << 16) || c->ffn > (1 << 18) || c->vocab > (1 << 24) || c->layers > 1024 ||
      c->seq > (1 << 20))
    fail("accepted a size above the caps");
  if (!coda_model_family_name(c->family)) fail("accepted an unknown model family");
  const int hd = coda_model_head_dim(c);
  const int gpt2 = c->family == CODA_FAMILY_GPT2; /* no RoPE: any head size */
  if ((!c->head_dim && c->dim % c->heads) || hd < 1 || (!gpt2 && (hd < 2 || hd % 2)) ||
      c->heads % c->kv_heads ||
      (c->family != CODA_FAMILY_QWEN3 && c->family != CODA_FAMILY_GEMMA3 &&
       hd * c->heads != c->dim))
    fail("accepted heads that do not divide the dimensions");
  /* Gemma 3's fields: its own only (llama takes a window, Mistral's, on
   * every layer: no pattern); a window with a layer pattern, no RoPE
   * scaling */
  const int gemma = c->family == CODA_FAMILY_GEMMA3, llama = c->family == CODA_FAMILY_LLAMA;
  if (!gemma && ((!llama && c->sliding_window) || c->sliding_pattern || c->rope_local_theta ||
                 c->attn_scalar || c->logit_softcap))
    fail("accepted Gemma 3 fields in another family");
  if (llama && c->sliding_window < 0) fail("accepted a negative llama window");
  if (gemma && (c->sliding_window < 0 || c->sliding_pattern < 0 ||
                (c->sliding_window > 0 && c->sliding_pattern < 1) ||
                c->rope.type != CODA_ROPE_DEFAULT || c->logit_softcap < 0 ||
                !isfinite(c->logit_softcap) || c->attn_scalar < 0 || !isfinite(c->attn_scalar)))
    fail("accepted a gemma3 model with a bad window, pattern, soft cap or RoPE scaling");
  if (gpt2 && (c->kv_heads != c->heads || !c->tied || c->rope.type != CODA_ROPE_DEFAULT))
    fail("accepted a gpt2 model with kv heads, an untied head or RoPE scaling");
  if (!(c->rope_theta > 1.0 && isfinite(c->rope_theta)) || !pos_finite(c->norm_eps))
    fail("accepted a non-finite or out-of-range rope_theta / norm_eps");
  if (c->tied != 0 && c->tied != 1) fail("tied is not 0 or 1");
  switch (c->rope.type) {
  case CODA_ROPE_DEFAULT: break;
  case CODA_ROPE_LINEAR:
    if (!pos_finite(c->rope.factor)) fail("accepted a bad linear RoPE factor");
    break;
  case CODA_ROPE_LLAMA3:
    if (!pos_finite(c->rope.factor) || !pos_finite(c->rope.low_freq_factor) ||
        !pos_finite(c->rope.high_freq_factor) || !(c->rope.high_freq_factor > c->rope.low_freq_factor) ||
        !pos_finite(c->rope.original_max_position))
      fail("accepted bad llama3 RoPE numbers");
    break;
  default: fail("accepted an unknown RoPE type");
  }
  if (coda_model_config_check(ctx, c) != CODA_OK) fail("accepted a config the library refuses");
}

/* A refusal: an error status and a message that names `must_name`. */
static void check_refused(coda_context ctx, coda_status s, const char *must_name) {
  if (s == CODA_OK) fail("check_refused on success");
  const char *m = coda_last_error(ctx);
  if (!m[0]) fail("refusal without a message");
  if (!strstr(m, must_name)) {
    fprintf(stderr, "%s: message \"%s\" does not name %s\n", fuzz_name, m, must_name);
    abort();
  }
}

#endif
