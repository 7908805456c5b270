/* Backend memory API on the CPU backend (coda_malloc / coda_free /
 * coda_memcpy_h2d / coda_memcpy_d2h / coda_synchronize), the plan
 * executor's buffers through it, and the device path's refusals without a
 * GPU. */
#include "coda_nn.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);

  /* zeroed allocation, round trip of random bytes */
  const size_t n = 1000;
  unsigned char *d = NULL;
  CHECK(coda_malloc(ctx, n, (void **)&d) == CODA_OK && d);
  int zero = 1;
  for (size_t i = 0; i < n; i++) zero &= d[i] == 0;
  CHECK(zero);
  unsigned char src[1000], back[1000];
  uint64_t s = 0x1234567u;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    src[i] = (unsigned char)(s >> 56);
  }
  CHECK(coda_memcpy_h2d(ctx, d, src, n) == CODA_OK);
  memset(back, 0, n);
  CHECK(coda_memcpy_d2h(ctx, back, d, n) == CODA_OK);
  CHECK(memcmp(src, back, n) == 0);
  CHECK(coda_synchronize(ctx) == CODA_OK);
  /* bad arguments fail with a message, never crash */
  CHECK(coda_malloc(ctx, 8, NULL) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "out is NULL") != NULL);
  CHECK(coda_memcpy_h2d(ctx, NULL, src, 4) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_memcpy_d2h(ctx, back, NULL, 4) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_memcpy_h2d(ctx, NULL, NULL, 0) == CODA_OK);
  CHECK(coda_malloc(NULL, 8, (void **)&d) == CODA_ERR_INVALID_ARGUMENT);
  coda_free(ctx, d);
  coda_free(ctx, NULL);

  /* plan buffers are coda_malloc memory: a view written through
   * coda_memcpy_h2d reads back the same */
  coda_llama_config c = coda_llama_default_config();
  coda_plan p;
  CHECK(coda_llama_block_plan(ctx, &c, &p) == CODA_OK);
  coda_tensor x;
  CHECK(coda_plan_tensor(p, "x", &x) == CODA_OK);
  CHECK(x.rows == c.batch * c.seq && x.cols == c.dim && x.dtype == CODA_BF16);
  size_t bytes = (size_t)(x.rows * x.cols) * 2;
  uint16_t *hx = malloc(bytes), *hb = malloc(bytes);
  for (size_t i = 0; i < bytes / 2; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    hx[i] = (uint16_t)(0x3f00u + (s >> 58)); /* finite bf16 values */
  }
  CHECK(coda_memcpy_h2d(ctx, x.data, hx, bytes) == CODA_OK);
  CHECK(coda_memcpy_d2h(ctx, hb, x.data, bytes) == CODA_OK);
  CHECK(memcmp(hx, hb, bytes) == 0);
  free(hx);
  free(hb);
  coda_plan_destroy(p);

  /* a CUDA context is refused where no GPU (or no CUDA build) is present */
  if (!coda_cuda_available()) {
    coda_context_options o = coda_context_default_options();
    o.backend = CODA_BACKEND_CUDA;
    coda_context g = NULL;
    CHECK(coda_context_create(&o, &g) != CODA_OK);
    coda_context_destroy(g);
  }
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
