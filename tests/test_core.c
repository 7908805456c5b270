/* Core: dtype conversion against independent definitions, tensor checks. */
#include "check.h"
#include "base/internal.h"
#include <stdlib.h>
#include <string.h>

int main(void) {
  /* bf16 round trip is exact for bf16-representable values and rounds ties to even. */
  CHECK(coda_bf16_to_f32(coda_f32_to_bf16(1.0f)) == 1.0f);
  CHECK(coda_bf16_to_f32(coda_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f); /* tie -> even */
  CHECK(coda_bf16_to_f32(coda_f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  /* f16: compare with the compiler's own _Float16 conversion on many random values. */
  srand(1);
  int bad = 0;
  for (int i = 0; i < 200000; i++) {
    float f = ldexpf((float)rand() / RAND_MAX - 0.5f, rand() % 40 - 28);
    _Float16 h = (_Float16)f;
    uint16_t ref;
    memcpy(&ref, &h, 2);
    if (coda_f32_to_f16(f) != ref) bad++;
    if (coda_f16_to_f32(ref) != (float)h) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(coda_f32_to_f16(1e6f) == 0x7c00);
  /* tensor checks */
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  float buf[16];
  coda_tensor t = coda_tensor_2d(buf, CODA_F32, 4, 4);
  CHECK(coda_check_tensor(ctx, "t", &t) == CODA_OK);
  t.ld = 3;
  CHECK(coda_check_tensor(ctx, "t", &t) == CODA_ERR_LAYOUT);
  CHECK(strstr(coda_last_error(ctx), "leading dimension") != NULL);
  t = coda_tensor_2d(NULL, CODA_F32, 4, 4);
  CHECK(coda_check_tensor(ctx, "t", &t) == CODA_ERR_INVALID_ARGUMENT);
  t = coda_tensor_2d(buf, CODA_F32, INT64_MAX / 2, 4);
  CHECK(coda_check_tensor(ctx, "t", &t) == CODA_ERR_OVERFLOW);
  coda_tensor a = coda_tensor_2d(buf, CODA_F32, 2, 4), b = coda_tensor_2d(buf + 7, CODA_F32, 1, 2);
  CHECK(coda_tensors_overlap(&a, &b));
  b.data = buf + 8;
  CHECK(!coda_tensors_overlap(&a, &b));
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
