/* The environment knobs (src/base/knobs.c): each takes the values its
 * documentation lists (docs/backends.md), and any other value makes
 * context creation fail with CODA_ERR_INVALID_ARGUMENT and a message that
 * names the variable, the value and the allowed values, instead of
 * running with a default the caller did not ask for. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "coda.h"
#include "base/knobs.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  const char *good[7]; /* NULL-terminated */
  const char *bad[3];
} knob_case;

static const knob_case kCases[] = {
    {"CODA_DEBUG_SYNC", {"0", "1", NULL}, {"yes", "2", NULL}},
    {"CODA_AUTOTUNE", {"0", "1", NULL}, {"on", "01", NULL}},
    {"CODA_RETUNE", {"0", "1", NULL}, {"true", NULL}},
    {"CODA_EPI_SCHEDULE", {"auto", "pingpong", "cooperative", NULL}, {"ping", "Pingpong", NULL}},
    {"CODA_EPI_TMA_LOADS", {"0", "1", NULL}, {"off", NULL}},
    {"CODA_ATTN_IMPL", {"default", "v1", NULL}, {"v2", NULL}},
    {"CODA_DECODE_PDL", {"0", "1", NULL}, {"no", NULL}},
    {"CODA_DECODE_NORM", {"fused", "separate", NULL}, {"apart", NULL}},
    {"CODA_DECODE_MERGE", {"kernel", "last", NULL}, {"first", "last ", NULL}},
    {"CODA_DECODE_ROW_SPLIT", {"auto", "0", "1", "2", "4", "8", NULL}, {"3", "16", NULL}},
    {"CODA_DECODE_ROW_STEP", {"0", "1", NULL}, {"one", NULL}},
    {"CODA_OPTIM_OVERLAP", {"0", "1", NULL}, {"y", NULL}},
    {"CODA_ATTENTION", {"auto", "own", "cudnn", "cudnn-nondet", NULL}, {"flash", "CUDNN", NULL}},
    {"CODA_ARCH", {"auto", "sm90", "sm80", NULL}, {"SM80", "sm_80", "sm100"}},
    {"CODA_COMM_TIMEOUT", {"0.5", "20", "600", NULL}, {"-1", "ten", "1e12"}},
};

static coda_status create_cpu(char *why, size_t n) {
  coda_context_options o = coda_context_default_options();
  o.backend = CODA_BACKEND_CPU;
  coda_context ctx = NULL;
  coda_status s = coda_context_create(&o, &ctx);
  coda_context_destroy(ctx);
  coda_status c = coda_context_options_check(&o, why, n);
  CHECK_EQ_INT(c, s); /* the check says why create failed */
  return s;
}

static void check_case(const knob_case *c) {
  char why[512];
  for (int i = 0; c->good[i]; i++) {
    setenv(c->name, c->good[i], 1);
    CHECK_EQ_INT(create_cpu(why, sizeof why), CODA_OK);
  }
  setenv(c->name, "", 1); /* empty reads as unset */
  CHECK_EQ_INT(create_cpu(why, sizeof why), CODA_OK);
  for (int i = 0; i < 3 && c->bad[i]; i++) {
    setenv(c->name, c->bad[i], 1);
    CHECK_EQ_INT(create_cpu(why, sizeof why), CODA_ERR_INVALID_ARGUMENT);
    CHECK(strstr(why, c->name) != NULL);
    CHECK(strstr(why, c->bad[i]) != NULL);
    CHECK(strstr(why, "allowed are") != NULL);
    if (c->good[0] && strcmp(c->name, "CODA_COMM_TIMEOUT")) CHECK(strstr(why, c->good[1]) != NULL);
  }
  unsetenv(c->name);
}

/* The values reach the knob fields as documented. */
static void check_values(void) {
  coda_knobs k;
  setenv("CODA_DECODE_ROW_SPLIT", "4", 1);
  setenv("CODA_EPI_TMA_LOADS", "0", 1);
  setenv("CODA_DECODE_PDL", "0", 1);
  setenv("CODA_DECODE_MERGE", "last", 1);
  setenv("CODA_EPI_SCHEDULE", "cooperative", 1);
  coda_knobs_from_env(&k);
  CHECK_EQ_INT(k.decode_row_split, 4);
  CHECK_EQ_INT(k.epi_tma_loads, -1);
  CHECK_EQ_INT(k.decode_pdl_off, 1);
  CHECK_EQ_INT(k.decode_merge_last, 1);
  CHECK_EQ_INT(k.epi_schedule, CODA_EPI_SCHEDULE_COOPERATIVE);
  CHECK(k.invalid[0] == '\0');
  setenv("CODA_DECODE_ROW_SPLIT", "auto", 1);
  setenv("CODA_EPI_TMA_LOADS", "1", 1);
  setenv("CODA_DECODE_PDL", "1", 1);
  setenv("CODA_DECODE_MERGE", "kernel", 1);
  coda_knobs_from_env(&k);
  CHECK_EQ_INT(k.decode_row_split, -1);
  CHECK_EQ_INT(k.epi_tma_loads, 0);
  CHECK_EQ_INT(k.decode_pdl_off, 0);
  CHECK_EQ_INT(k.decode_merge_last, 0);
  /* two bad knobs: the first read is named, the other kept out */
  setenv("CODA_DEBUG_SYNC", "yes", 1);
  setenv("CODA_OPTIM_OVERLAP", "maybe", 1);
  coda_knobs_from_env(&k);
  CHECK(strstr(k.invalid, "CODA_DEBUG_SYNC='yes'") != NULL);
  CHECK(strstr(k.invalid, "OVERLAP") == NULL);
  /* a long value is cut, the message stays within its buffer */
  char longv[400];
  memset(longv, 'x', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  setenv("CODA_DEBUG_SYNC", longv, 1);
  coda_knobs_from_env(&k);
  CHECK(strlen(k.invalid) < sizeof k.invalid);
  CHECK(strstr(k.invalid, "...") != NULL);
  const char *names[] = {"CODA_DECODE_ROW_SPLIT", "CODA_EPI_TMA_LOADS", "CODA_DECODE_PDL",
                         "CODA_DECODE_MERGE", "CODA_EPI_SCHEDULE", "CODA_DEBUG_SYNC",
                         "CODA_OPTIM_OVERLAP"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) unsetenv(names[i]);
}

int main(void) {
  for (size_t i = 0; i < sizeof kCases / sizeof *kCases; i++) unsetenv(kCases[i].name);
  for (size_t i = 0; i < sizeof kCases / sizeof *kCases; i++) check_case(&kCases[i]);
  check_values();
  return CHECK_DONE();
}
