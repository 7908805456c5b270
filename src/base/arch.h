/* Which GEMM mainloop the CUDA backend runs: the CODA_ARCH knob's values
 * and the choice for a device's compute capability (coda_arch_select), a
 * pure function so that it is tested on machines without a GPU. */
#ifndef CODA_BASE_ARCH_H
#define CODA_BASE_ARCH_H

#include "coda.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CODA_ARCH: auto (default), sm90 or sm80 (coda_arch_choice, coda.h); any
 * other value is refused by name when a context is created. */
#define CODA_ARCH_INVALID ((coda_arch_choice)3)

/* The mainloop paths, numbered as the architectures they need. */
#define CODA_PATH_SM90 90
#define CODA_PATH_SM80 80

/* The values CODA_ARCH takes, for messages. */
#define CODA_ARCH_VALUES "auto, sm90, sm80"

/* The path for a device of compute capability major.minor: auto takes
 * sm90 on 9.0 (the sm_90a kernels run on 9.0 only) and sm80 on 8.x and on
 * later majors (mma.sync runs on every GPU from 8.0 on); sm80 forces the
 * mma.sync path on any GPU of 8.0 or newer; sm90 needs 9.0. A device
 * below 8.0 or a choice the device cannot run gives
 * CODA_ERR_NOT_SUPPORTED and the reason in msg. */
coda_status coda_arch_select(coda_arch_choice knob, int major, int minor, int *path, char *msg,
                             size_t cap);

/* "auto", "sm90", "sm80" or "invalid". */
const char *coda_arch_choice_name(coda_arch_choice c);

#ifdef __cplusplus
}
#endif
#endif
