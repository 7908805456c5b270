/* The bytes a decode step reads, by phase (coda_decoder_step_bytes), on
 * the CPU: their sum against the weights and cache a step reads counted
 * here from the model's size and the cache lengths (fp32 on the CPU), the
 * attention phase against the cache alone, sequences left out of a step,
 * a tied head, Qwen3's q and k norm weights, and the caches left where
 * they were. */
#include "coda_decode.h"
#include "check.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

static void step_bytes(coda_context ctx, const coda_model_config *c, const char *what) {
  coda_model *m = NULL;
  CHECK(coda_model_create(ctx, c, CODA_ENGINE_REFERENCE, &m) == CODA_OK);
  if (!m) return;
  coda_model_init(m, 3);
  enum { B = 3 };
  coda_decoder d = NULL;
  coda_decoder_options o = {.struct_size = sizeof o, .batch = B};
  CHECK_STATUS(ctx, coda_decoder_create(ctx, m, &o, &d), CODA_OK);
  if (!d) {
    coda_model_destroy(m);
    return;
  }
  const int plen[B] = {5, 2, 9};
  int32_t p0[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int32_t *prompts[B] = {p0, p0, p0};
  CHECK_STATUS(ctx, coda_decoder_prefill(d, prompts, plen), CODA_OK);

  /* sequence 1 sits this step out */
  const int32_t tokens[B] = {7, -1, 11};
  double by[CODA_DECODE_PHASES];
  CHECK_STATUS(ctx, coda_decoder_step_bytes(d, tokens, by), CODA_OK);
  double sum = 0.0;
  for (int p = 0; p < CODA_DECODE_PHASES; p++) {
    CHECK_MSG(by[p] > 0.0, "%s: phase %s reads %g bytes", what, coda_decoder_phase_name(p), by[p]);
    sum += by[p];
  }

  /* every weight once but the embedding table, of which the stepped rows
   * (a tied head reads the whole table as the head) */
  const double D = c->dim, V = c->vocab, rows = 2;
  const double weights = ((double)coda_model_size(m) - (c->tied ? 0.0 : V * D) + rows * D) * 4.0;
  /* keys and values of every layer, the new token's included */
  const double kvd = (double)c->kv_heads * (c->head_dim ? c->head_dim : c->dim / c->heads);
  const double cache = (double)c->layers * ((plen[0] + 1) + (plen[2] + 1)) * 2.0 * kvd * 4.0;
  CHECK_MSG(sum == weights + cache, "%s: the phases read %.0f bytes, the weights and cache %.0f",
            what, sum, weights + cache);
  int attn = -1;
  for (int p = 0; p < CODA_DECODE_PHASES; p++)
    if (!strcmp(coda_decoder_phase_name(p), "attention")) attn = p;
  CHECK(attn >= 0);
  if (attn >= 0) CHECK_MSG(by[attn] == cache, "%s: attention %.0f, cache %.0f", what, by[attn], cache);

  /* a query: nothing moves, and the step it describes then runs */
  CHECK_EQ_INT(coda_decoder_length(d, 0), plen[0]);
  CHECK_EQ_INT(coda_decoder_length(d, 2), plen[2]);
  CHECK_STATUS(ctx, coda_decoder_step(d, tokens), CODA_OK);
  CHECK_EQ_INT(coda_decoder_length(d, 0), plen[0] + 1);
  CHECK_EQ_INT(coda_decoder_length(d, 1), plen[1]);

  CHECK_STATUS(ctx, coda_decoder_step_bytes(d, NULL, by), CODA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(ctx, coda_decoder_step_bytes(d, tokens, NULL), CODA_ERR_INVALID_ARGUMENT);
  coda_decoder_destroy(d);
  coda_model_destroy(m);
}

int main(void) {
  coda_context ctx;
  coda_context_options co = coda_context_default_options();
  CHECK(coda_context_create(&co, &ctx) == CODA_OK);
  coda_model_config gqa = {.vocab = 300, .dim = 48, .layers = 2, .heads = 6, .kv_heads = 2, .ffn = 40,
                           .seq = 32, .rope_theta = 10000.0, .norm_eps = 1e-5};
  step_bytes(ctx, &gqa, "gqa, untied");
  coda_model_config mha = {.vocab = 260, .dim = 32, .layers = 3, .heads = 4, .kv_heads = 4, .ffn = 24,
                           .seq = 20, .tied = 1, .rope_theta = 500000.0, .norm_eps = 1e-6};
  step_bytes(ctx, &mha, "mha, tied");
  /* Qwen3: the q and k norm weights counted with the rest; heads of 10
   * over dim 32, tied, and of dim / heads, untied */
  coda_model_config q3t = mha;
  q3t.family = CODA_FAMILY_QWEN3;
  q3t.head_dim = 10;
  step_bytes(ctx, &q3t, "qwen3, head_dim 10, tied");
  coda_model_config q3u = gqa;
  q3u.family = CODA_FAMILY_QWEN3;
  step_bytes(ctx, &q3u, "qwen3, untied");
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
