/* The CUDA backend's mainloop choice (see arch.h). */
#include "base/arch.h"

#include <stdio.h>

const char *coda_arch_choice_name(coda_arch_choice c) {
  switch (c) {
  case CODA_ARCH_AUTO: return "auto";
  case CODA_ARCH_SM90: return "sm90";
  case CODA_ARCH_SM80: return "sm80";
  default: return "invalid";
  }
}

coda_status coda_arch_select(coda_arch_choice knob, int major, int minor, int *path, char *msg,
                             size_t cap) {
  if (cap) msg[0] = '\0';
  *path = 0;
  if (knob == CODA_ARCH_INVALID) {
    snprintf(msg, cap, "CODA_ARCH is not one of %s", CODA_ARCH_VALUES);
    return CODA_ERR_INVALID_ARGUMENT;
  }
  if (major < 8) {
    snprintf(msg, cap,
             "the GPU has compute capability %d.%d; coda's CUDA backend needs 8.0 or newer "
             "(the sm80 path: A100, Ada and later; the sm90 path: Hopper)", major, minor);
    return CODA_ERR_NOT_SUPPORTED;
  }
  const int hopper = major == 9 && minor == 0;
  if (knob == CODA_ARCH_SM90 && !hopper) {
    snprintf(msg, cap,
             "the sm90 mainloop (CODA_ARCH=sm90, coda_context_options.arch SM90) needs a "
             "compute capability 9.0 GPU (its kernels are sm_90a); this one is %d.%d (auto or "
             "sm80 runs the sm80 path)", major, minor);
    return CODA_ERR_NOT_SUPPORTED;
  }
  *path = knob == CODA_ARCH_SM80 || !hopper ? CODA_PATH_SM80 : CODA_PATH_SM90;
  return CODA_OK;
}
