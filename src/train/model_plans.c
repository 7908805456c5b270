/* Plan engine: runs the model through the Llama-3 block plans of src/nn. */
#include "train/train.h"

int coda_plans_available(void) { return 0; }

void coda_plans_free(coda_model *m) { (void)m; }

coda_status coda_plans_forward(coda_context ctx, coda_model *m, const int32_t *inputs,
                               const int32_t *targets, int B, int T, int backward,
                               float grad_scale, double *loss, int64_t *n_valid,
                               float *last_logits) {
  (void)m; (void)inputs; (void)targets; (void)B; (void)T; (void)backward; (void)grad_scale;
  (void)loss; (void)n_valid; (void)last_logits;
  return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "the block-plan engine is not available");
}
