/* The checkpoint's tokenizer record (coda_checkpoint_tokenizer) is read
 * strictly: tokenizer.bytes decimal digits only and tokenizer.crc32
 * exactly 8 hex digits. A size or CRC-32 with a sign, a leading space or
 * "0x" that strtoull / strtoul would take as the right number was accepted;
 * each is now refused with a message naming the checkpoint, and the exact
 * record still gives the file beside it. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "io/io.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256], ck[320], tok[320];

/* A checkpoint whose metadata records tokenizer.json with these texts. */
static coda_status record(coda_context ctx, const char *bytes, const char *crc, char **path) {
  const char *kv[6] = {"tokenizer.file", "tokenizer.json", "tokenizer.bytes", bytes,
                       "tokenizer.crc32", crc};
  const float x[2] = {1.0f, 2.0f};
  coda_st_entry e;
  memset(&e, 0, sizeof e);
  e.name = "norm.weight";
  e.dtype = "F32";
  e.ndim = 1;
  e.shape[0] = 2;
  e.data = x;
  CHECK(coda_st_save(ctx, ck, &e, 1, kv, 3) == CODA_OK);
  *path = NULL;
  return coda_checkpoint_tokenizer(ctx, ck, path, NULL);
}

static void expect_refused(coda_context ctx, const char *bytes, const char *crc) {
  char *p = NULL;
  const coda_status s = record(ctx, bytes, crc, &p);
  CHECK_MSG(s == CODA_ERR_IO && p == NULL && strstr(coda_last_error(ctx), ck),
            "bytes '%s', crc32 '%s': status %d, '%s'", bytes, crc, (int)s,
            s ? coda_last_error(ctx) : "accepted");
  free(p);
}

int main(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  snprintf(dir, sizeof dir, "/tmp/coda_tokrec_XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
  snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
  /* contents whose CRC-32 is below 2^24, so that "0x" and a sign fit in
   * the 8 characters and still name the right number */
  char text[64];
  uint32_t crc = 0;
  for (int i = 0;; i++) {
    snprintf(text, sizeof text, "{\"tokenizer\": %d}", i);
    crc = coda_crc32(0, text, strlen(text));
    if (crc < (1u << 24)) break;
  }
  FILE *f = fopen(tok, "wb");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  char n[32], c[16], plus[16], space[16], hex[16];
  snprintf(n, sizeof n, "%zu", strlen(text));
  snprintf(c, sizeof c, "%08x", (unsigned)crc);
  snprintf(plus, sizeof plus, "+%07x", (unsigned)crc);
  snprintf(space, sizeof space, " %07x", (unsigned)crc);
  snprintf(hex, sizeof hex, "0x%06x", (unsigned)crc);
  char *p = NULL;
  CHECK_MSG(record(ctx, n, c, &p) == CODA_OK && p && !strcmp(p, tok), "the exact record: %s",
            coda_last_error(ctx));
  free(p);
  char sized[40];
  snprintf(sized, sizeof sized, "+%s", n);
  expect_refused(ctx, sized, c);
  snprintf(sized, sizeof sized, " %s", n);
  expect_refused(ctx, sized, c);
  expect_refused(ctx, "", c);
  expect_refused(ctx, n, plus);
  expect_refused(ctx, n, space);
  expect_refused(ctx, n, hex);
  unlink(tok);
  unlink(ck);
  rmdir(dir);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
