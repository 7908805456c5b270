/* Helpers of the CPU program interpreter tests (test_cpu_program*.c):
 * the shared context and random stream, tensors, parsing and binding, the
 * tolerance of a stored value and the double references of the activation
 * functions. */
#ifndef CODA_TEST_CPU_PROGRAM_UTIL_H
#define CODA_TEST_CPU_PROGRAM_UTIL_H

#include "check.h"
#include "base/internal.h"
#include "lang/ir.h"
#include "test_util.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static coda_context ctx;
static uint64_t rng_state;
static inline double urand(void) { return xorshift64_unit(&rng_state); }

static inline coda_tensor mk(coda_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  return rand_view(&rng_state, dt, rows, cols, ld, 1, 1.0);
}
static inline double at(const coda_tensor *t, int64_t i, int64_t j) { return coda_load(t, i, j); }

static inline coda_program parse_with(coda_context c, const char *text) {
  coda_program p = NULL;
  coda_status s = coda_program_parse(c, text, &p);
  CHECK_MSG(s == CODA_OK, "parse: %s\n%s", coda_last_error(c), text);
  return p;
}
static inline coda_program parse(const char *text) { return parse_with(ctx, text); }

static inline void bind(coda_args a, const char *name, const coda_tensor *t) {
  CHECK(coda_args_set(a, name, t) == CODA_OK);
}

/* bound on |got - ref| for a value stored to dtype, computed in fp32 */
static inline double tol_for(coda_dtype dt, double ref, double scale) {
  double u = dt == CODA_BF16 ? 1.0 / 128 : dt == CODA_F16 ? 1.0 / 1024 : 0;
  return u * fabs(ref) + 2e-5 * (scale + fabs(ref)) + 1e-30;
}

static inline double sigm(double x) { return 1 / (1 + exp(-x)); }
static inline double gelu(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static inline double dgelu(double x) { /* derivative by the chain rule, written out */
  double k = sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
  double du = k * (1 + 3 * 0.044715 * x * x);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
}
static inline double dsilu(double x) { return sigm(x) + x * sigm(x) * (1 - sigm(x)); }
static inline double frac_turns(double p, double fh, double fl) {
  double t = p * (fh + fl);
  return t - floor(t);
}

#endif
