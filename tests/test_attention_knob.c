/* The attention knobs (CODA_ATTENTION, CODA_CUDNN_LIB): how
 * coda_knobs_from_env reads them, and that a CPU context's attention is
 * untouched by them (the CPU backend has one implementation; cuDNN is the
 * CUDA backend's, tests/gpu/test_attention_gpu.c). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "coda.h"
#include "base/knobs.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static coda_attention_choice read_choice(const char *v) {
  if (v) setenv("CODA_ATTENTION", v, 1);
  else unsetenv("CODA_ATTENTION");
  coda_knobs k;
  coda_knobs_from_env(&k);
  return k.attention;
}

int main(void) {
  CHECK_EQ_INT(read_choice(NULL), CODA_ATTENTION_AUTO);
  CHECK_EQ_INT(read_choice(""), CODA_ATTENTION_AUTO);
  CHECK_EQ_INT(read_choice("auto"), CODA_ATTENTION_AUTO);
  CHECK_EQ_INT(read_choice("own"), CODA_ATTENTION_OWN);
  CHECK_EQ_INT(read_choice("cudnn"), CODA_ATTENTION_CUDNN);
  CHECK_EQ_INT(read_choice("cudnn-nondet"), CODA_ATTENTION_CUDNN_NONDET);
  CHECK_EQ_INT(read_choice("CUDNN"), CODA_ATTENTION_INVALID);
  CHECK_EQ_INT(read_choice("flash"), CODA_ATTENTION_INVALID);

  coda_knobs k;
  unsetenv("CODA_CUDNN_LIB");
  coda_knobs_from_env(&k);
  CHECK(k.cudnn_lib[0] == '\0');
  setenv("CODA_CUDNN_LIB", "/opt/cudnn/lib/libcudnn.so.9", 1);
  coda_knobs_from_env(&k);
  CHECK(strcmp(k.cudnn_lib, "/opt/cudnn/lib/libcudnn.so.9") == 0);
  unsetenv("CODA_CUDNN_LIB");

  /* a CPU context runs its attention whatever CODA_ATTENTION says */
  setenv("CODA_ATTENTION", "cudnn", 1);
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CPU;
  coda_context ctx = NULL;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  unsetenv("CODA_ATTENTION");
  if (ctx) {
    const int T = 5, Hq = 2, Hkv = 1, hd = 4, cols = (Hq + 2 * Hkv) * hd;
    float qkv[5 * 16], out[5 * 8], lse[5 * 2];
    for (int i = 0; i < T * cols; i++) qkv[i] = (float)((i * 37) % 11) / 11.f - 0.5f;
    coda_tensor tq = {qkv, CODA_F32, T, cols, cols}, to = {out, CODA_F32, T, Hq * hd, Hq * hd},
                tl = {lse, CODA_F32, T, Hq, Hq};
    CHECK_STATUS(ctx, coda_attention_forward(ctx, &tq, 1, T, Hq, Hkv, hd, &to, &tl), CODA_OK);
    /* the first token attends to itself alone: its output is its v */
    for (int c = 0; c < hd; c++) CHECK_NEAR(out[c], qkv[(Hq + Hkv) * hd + c], 1e-6);
    coda_context_destroy(ctx);
  }
  return CHECK_DONE();
}
