/* What the GPT-2 block plan (gpt2.c) and head plan (gpt2_head.c) share. */
#ifndef CODA_NN_GPT2_H
#define CODA_NN_GPT2_H

#include "coda_nn.h"

/* The config's limits (head: the head plan's, which needs a vocabulary
 * and takes no CODA_GPT2_FOLD); a clear error naming what is allowed. */
coda_status gpt2_check_config(coda_context ctx, const coda_gpt2_config *c, int head);

#endif
