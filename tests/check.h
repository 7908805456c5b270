/* Minimal assertion macros for CTest executables: a failed check prints
 * file:line and the expression, the test keeps going, and main returns
 * nonzero if anything failed. */
#ifndef CODA_TEST_CHECK_H
#define CODA_TEST_CHECK_H
#include <math.h>
#include <stdio.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    check_count++;                                                           \
    if (!(cond)) {                                                           \
      check_failures++;                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

#define CHECK_MSG(cond, ...)                                                 \
  do {                                                                       \
    check_count++;                                                           \
    if (!(cond)) {                                                           \
      check_failures++;                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
    }                                                                        \
  } while (0)

#define CHECK_EQ_INT(a, b) CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_NEAR(a, b, tol) CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.17g vs %.17g (tol %g)", (double)(a), (double)(b), (double)(tol))

/* A call that must return status, and when that is an error, leave a
 * message in coda_last_error(ctx). */
#define CHECK_STATUS(ctx, call, status)                                                   \
  do {                                                                                    \
    coda_status s_ = (call);                                                              \
    CHECK_MSG(s_ == (status), "%s -> %s (%s), expected %s", #call, coda_status_string(s_), \
              coda_last_error(ctx), coda_status_string(status));                          \
    if (s_ != CODA_OK) CHECK_MSG(strlen(coda_last_error(ctx)) > 0, "%s: empty message", #call); \
  } while (0)

#define CHECK_DONE()                                                         \
  (printf("%d checks, %d failed\n", check_count, check_failures),            \
   check_failures ? 1 : 0)

#endif
