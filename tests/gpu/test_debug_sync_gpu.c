/* GPU test of the debug-sync mode (needs an sm_90 GPU). An attention
 * forward reads from an unmapped device address, so its kernel faults.
 *   test_debug_sync_gpu           debug_sync set in the context options:
 *                                 the faulting call itself must return
 *                                 CODA_ERR_BACKEND naming the operation
 *   test_debug_sync_gpu --env     the same through CODA_DEBUG_SYNC=1 (the
 *                                 caller sets it; the option stays 0)
 *   test_debug_sync_gpu --off     neither: the launch succeeds and the
 *                                 fault shows at the next synchronization
 * A fault poisons the CUDA context, so each mode is its own process. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coda.h"
#include "backends/cuda/backend.h"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  const int env_mode = !strcmp(mode, "--env"), off = !strcmp(mode, "--off");
  if (!coda_cuda_available()) {
    printf("test_debug_sync_gpu: no sm_90 GPU, nothing run\n");
    return 77;
  }
  const char *env = getenv("CODA_DEBUG_SYNC");
  const int env_on = env && !strcmp(env, "1");
  if (env_mode != env_on) {
    printf("test_debug_sync_gpu: run %s with CODA_DEBUG_SYNC %s\n", mode[0] ? mode : "(no flag)",
           env_mode ? "=1" : "unset");
    return 2;
  }
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CUDA;
  o.debug_sync = !env_mode && !off;
  coda_context ctx;
  if (coda_context_create(&o, &ctx) != CODA_OK) {
    printf("FAIL: cannot create a CUDA context\n");
    return 1;
  }
  const int B = 1, T = 64, H = 2, hd = 64;
  void *out = NULL, *lse = NULL;
  if (coda_malloc(ctx, (size_t)B * T * H * hd * 2, &out) != CODA_OK ||
      coda_malloc(ctx, (size_t)B * T * H * 4, &lse) != CODA_OK) {
    printf("FAIL: cannot allocate: %s\n", coda_last_error(ctx));
    return 1;
  }
  /* 16-byte aligned, so it passes the argument checks, but unmapped */
  coda_tensor qkv = coda_tensor_2d((void *)(uintptr_t)(1u << 20), CODA_BF16, B * T, 3 * H * hd);
  coda_tensor to = coda_tensor_2d(out, CODA_BF16, B * T, H * hd);
  coda_tensor tl = coda_tensor_2d(lse, CODA_F32, B * T, H);
  coda_status s = coda_cuda_attention_forward(ctx, &qkv, B, T, H, H, hd, &to, &tl, NULL);
  int fail = 0;
  if (off) {
    const cudaError_t e = cudaDeviceSynchronize();
    printf("without debug sync: the call returned %d, the next synchronize: %s\n", (int)s,
           cudaGetErrorString(e));
    /* the launch itself is fine; the fault must show later */
    fail = s != CODA_OK || e == cudaSuccess;
  } else {
    printf("debug sync (%s): status %d, \"%s\"\n", env_mode ? "environment" : "option", (int)s,
           coda_last_error(ctx));
    fail = s != CODA_ERR_BACKEND || !strstr(coda_last_error(ctx), "attention forward");
  }
  printf("%s\n", fail ? "FAIL" : "ok");
  /* the context is unusable after a fault: exit without freeing */
  return fail;
}
