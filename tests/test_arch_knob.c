/* CODA_ARCH and coda_context_options.arch: how coda_knobs_from_env reads
 * the knob, how the option overrides it, the refusal of another value by
 * name at context creation (and of compile_cc outside its use), and the
 * choice of the CUDA backend's
 * mainloop path for a device's compute capability (coda_arch_select, a
 * pure function: tested here with made-up devices, no GPU needed). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "coda.h"
#include "base/arch.h"
#include "base/knobs.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static coda_arch_choice read_choice(const char *v) {
  if (v) setenv("CODA_ARCH", v, 1);
  else unsetenv("CODA_ARCH");
  coda_knobs k;
  coda_knobs_from_env(&k);
  return k.arch;
}

/* The path for (knob, major.minor), or -status when refused (with a
 * message naming the capability). */
static int path_of(coda_arch_choice knob, int major, int minor) {
  int path = -1;
  char msg[256];
  coda_status s = coda_arch_select(knob, major, minor, &path, msg, sizeof msg);
  if (s != CODA_OK) {
    CHECK(msg[0] != '\0');
    CHECK_EQ_INT(path, 0);
    return -(int)s;
  }
  return path;
}

static void test_select(void) {
  /* auto: Hopper runs the sm90 path, every other GPU from 8.0 on sm80 */
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 9, 0), CODA_PATH_SM90);
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 8, 0), CODA_PATH_SM80);
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 8, 6), CODA_PATH_SM80);
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 8, 9), CODA_PATH_SM80);
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 10, 0), CODA_PATH_SM80); /* sm_90a code does not run there */
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 12, 0), CODA_PATH_SM80);
  /* sm80 forces the mma.sync path, on Hopper too */
  CHECK_EQ_INT(path_of(CODA_ARCH_SM80, 9, 0), CODA_PATH_SM80);
  CHECK_EQ_INT(path_of(CODA_ARCH_SM80, 8, 0), CODA_PATH_SM80);
  /* sm90 runs on 9.0 only */
  CHECK_EQ_INT(path_of(CODA_ARCH_SM90, 9, 0), CODA_PATH_SM90);
  CHECK_EQ_INT(path_of(CODA_ARCH_SM90, 8, 0), -(int)CODA_ERR_NOT_SUPPORTED);
  CHECK_EQ_INT(path_of(CODA_ARCH_SM90, 10, 0), -(int)CODA_ERR_NOT_SUPPORTED);
  /* below 8.0: refused whatever the knob, naming the capability */
  CHECK_EQ_INT(path_of(CODA_ARCH_AUTO, 7, 5), -(int)CODA_ERR_NOT_SUPPORTED);
  CHECK_EQ_INT(path_of(CODA_ARCH_SM80, 7, 0), -(int)CODA_ERR_NOT_SUPPORTED);
  CHECK_EQ_INT(path_of(CODA_ARCH_INVALID, 9, 0), -(int)CODA_ERR_INVALID_ARGUMENT);
  int path;
  char msg[256];
  coda_arch_select(CODA_ARCH_AUTO, 7, 5, &path, msg, sizeof msg);
  CHECK(strstr(msg, "7.5") != NULL && strstr(msg, "8.0") != NULL);
  coda_arch_select(CODA_ARCH_SM90, 8, 6, &path, msg, sizeof msg);
  CHECK(strstr(msg, "CODA_ARCH=sm90") != NULL && strstr(msg, "arch SM90") != NULL &&
        strstr(msg, "8.6") != NULL);
}

/* CODA_ARCH=bogus: no context, and coda_context_options_check names the
 * knob, its value and the values it takes. */
static void test_refusal(void) {
  setenv("CODA_ARCH", "bogus", 1);
  coda_context_options o = coda_context_default_options();
  coda_context ctx = NULL;
  CHECK_EQ_INT(coda_context_create(&o, &ctx), CODA_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL);
  char msg[256];
  CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(msg, "CODA_ARCH") && strstr(msg, "bogus") && strstr(msg, "auto, sm90, sm80"));
  /* a value the knob takes: the CPU context is made (the knob picks a GPU path only) */
  setenv("CODA_ARCH", "sm80", 1);
  CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_OK);
  CHECK_EQ_INT(coda_context_create(&o, &ctx), CODA_OK);
  coda_context_destroy(ctx);
  unsetenv("CODA_ARCH");
}

/* The option over the knob: a set arch wins, AUTO takes CODA_ARCH; an
 * arch out of range and compile_cc without arch SM80 or outside 80-129
 * are refused naming the member. */
static void test_option(void) {
  coda_context_options o = coda_context_default_options();
  coda_knobs k;
  setenv("CODA_ARCH", "sm90", 1);
  o.arch = CODA_ARCH_SM80;
  coda_knobs_resolve(&o, &k);
  CHECK_EQ_INT(k.arch, CODA_ARCH_SM80);
  o.arch = CODA_ARCH_AUTO;
  coda_knobs_resolve(&o, &k);
  CHECK_EQ_INT(k.arch, CODA_ARCH_SM90);
  unsetenv("CODA_ARCH");
  char msg[256];
  o.arch = (coda_arch_choice)3;
  CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(msg, "coda_context_options.arch is 3") != NULL);
  const struct { coda_arch_choice arch; int cc; coda_status want; } cases[] = {
      {CODA_ARCH_SM80, 90, CODA_OK},  {CODA_ARCH_SM80, 80, CODA_OK},
      {CODA_ARCH_SM80, 129, CODA_OK}, {CODA_ARCH_SM80, 75, CODA_ERR_INVALID_ARGUMENT},
      {CODA_ARCH_SM80, 130, CODA_ERR_INVALID_ARGUMENT},
      {CODA_ARCH_SM90, 90, CODA_ERR_INVALID_ARGUMENT},
      {CODA_ARCH_AUTO, 90, CODA_ERR_INVALID_ARGUMENT}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    o.arch = cases[i].arch;
    o.compile_cc = cases[i].cc;
    CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), cases[i].want);
    if (cases[i].want != CODA_OK)
      CHECK_MSG(strstr(msg, "compile_cc") && strstr(msg, "80 to 129"), "%s", msg);
  }
  /* a CPU context keeps the option it was given */
  o.arch = CODA_ARCH_SM80;
  o.compile_cc = 90;
  coda_context ctx = NULL;
  CHECK_EQ_INT(coda_context_create(&o, &ctx), CODA_OK);
  coda_context_destroy(ctx);
}

int main(void) {
  CHECK_EQ_INT(read_choice(NULL), CODA_ARCH_AUTO);
  CHECK_EQ_INT(read_choice(""), CODA_ARCH_AUTO);
  CHECK_EQ_INT(read_choice("auto"), CODA_ARCH_AUTO);
  CHECK_EQ_INT(read_choice("sm90"), CODA_ARCH_SM90);
  CHECK_EQ_INT(read_choice("sm80"), CODA_ARCH_SM80);
  CHECK_EQ_INT(read_choice("SM80"), CODA_ARCH_INVALID);
  CHECK_EQ_INT(read_choice("sm_80"), CODA_ARCH_INVALID);
  CHECK_EQ_INT(read_choice("bogus"), CODA_ARCH_INVALID);
  unsetenv("CODA_ARCH");
  test_select();
  test_refusal();
  test_option();
  return CHECK_DONE();
}
