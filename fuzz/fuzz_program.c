/* libFuzzer harness for the epilogue language: arbitrary bytes go to
 * coda_program_parse. A failure must be a parse or type error with a
 * positioned message; a success must print to canonical text that parses
 * back to the same IR (names included) and prints identically, and every
 * introspection call must answer without crashing. Any violation aborts.
 *
 * Build and run: scripts/fuzz.sh [SECONDS] */
#include "coda.h"
#include "lang/ir.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *text, const char *detail) {
  fprintf(stderr, "fuzz_program: %s: %s\n--- input:\n%s\n", what, detail ? detail : "", text);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 16)) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  /* the last byte's low bit picks the precision, so f64 programs are reached */
  coda_context_options o = coda_context_default_options();
  if (size && (data[size - 1] & 1)) o.precision = CODA_PRECISION_F64;
  coda_context ctx;
  if (coda_context_create(&o, &ctx) != CODA_OK) abort();
  coda_program p = NULL;
  coda_status s = coda_program_parse(ctx, text, &p);
  if (s != CODA_OK) {
    if (p) fail("out not NULL on failure", text, NULL);
    if (s != CODA_ERR_PARSE && s != CODA_ERR_TYPE) fail("unexpected status", text, coda_status_string(s));
    if (strncmp(coda_last_error(ctx), "line ", 5)) fail("message without a position", text, coda_last_error(ctx));
  } else {
    size_t tl = strlen(coda_program_text(p));
    char *t1 = malloc(tl + 1);
    coda_program q = NULL;
    if (!t1) abort();
    memcpy(t1, coda_program_text(p), tl + 1);
    if (coda_program_parse(ctx, t1, &q) != CODA_OK) fail("canonical text does not parse", t1, coda_last_error(ctx));
    char why[256];
    if (!ir_equal(p, q, 1, why, sizeof why)) fail("round trip changed the IR", t1, why);
    if (strcmp(t1, coda_program_text(q))) fail("canonical text is not a fixed point", t1, coda_program_text(q));
    if (!coda_program_ir(p)[0]) fail("empty IR listing", text, NULL);
    int n = coda_program_num_args(p);
    for (int i = 0; i < n; i++) {
      coda_arg_info info;
      if (coda_program_arg(p, i, &info) != CODA_OK) fail("coda_program_arg failed", text, NULL);
      int64_t r, c;
      static const int64_t sizes[][4] = {{3, 8, 64, 128}, {130, 6, 16, 32}, {1, 1, 1, 1}};
      for (int k = 0; k < 3; k++) {
        coda_status ss = coda_program_arg_shape(p, info.name, sizes[k][0], sizes[k][1], (int)sizes[k][2],
                                                (int)sizes[k][3], &r, &c);
        if (ss != CODA_OK && ss != CODA_ERR_SHAPE) fail("arg_shape status", text, coda_status_string(ss));
        if (ss == CODA_OK && (r < 0 || c < 0)) fail("negative shape", text, info.name);
      }
    }
    coda_program_destroy(q);
    free(t1);
    coda_program_destroy(p);
  }
  coda_context_destroy(ctx);
  free(text);
  return 0;
}
