/* The variants of the built-ins as passes (docs/language.md, "Variants as
 * passes"): each _folded / _keep / _infer built-in derived from its source
 * is the program the hand-written copy was (same IR with names, same
 * canonical text). */
#include "check.h"
#include "coda.h"
#include "lang/ir.h"

#include <stdio.h>
#include <string.h>

static const char *const kVariantNames[] = {
  "gpt2_ln_bwd_folded", "gpt2_ln_linear_folded", "gpt2_ln_linear_gelu_folded", "llama_ce_bwd_folded",
  "llama_head_norm_bwd_folded", "llama_lm_head_folded", "llama_lm_head_folded_keep", "llama_lm_head_keep",
  "llama_norm_bwd_folded", "llama_qkv_rope_folded", "llama_swiglu_folded", "llama_swiglu_folded_infer",
  "llama_swiglu_infer",
};

static void derived_equals_copies(coda_context ctx) {
  for (size_t i = 0; i < sizeof kVariantNames / sizeof kVariantNames[0]; i++) {
    const char *name = kVariantNames[i];
    coda_program d = NULL, c = NULL;
    CHECK_MSG(ir_builtin_variant(ctx, name, &d) == CODA_OK, "%s: %s", name, coda_last_error(ctx));
    CHECK_MSG(coda_program_builtin(ctx, name, &c) == CODA_OK, "%s: %s", name, coda_last_error(ctx));
    if (d && c) {
      char why[256];
      CHECK_MSG(ir_equal(d, c, 1, why, sizeof why), "%s: %s\nderived:\n%s\ncopy:\n%s", name, why,
                coda_program_text(d), coda_program_text(c));
      CHECK_MSG(!strcmp(coda_program_text(d), coda_program_text(c)), "%s: text differs\n%s\nvs\n%s", name,
                coda_program_text(d), coda_program_text(c));
    }
    coda_program_destroy(d);
    coda_program_destroy(c);
  }
}

int main(void) {
  coda_context ctx;
  coda_context_options o = coda_context_default_options();
  o.precision = CODA_PRECISION_F64;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  derived_equals_copies(ctx);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
