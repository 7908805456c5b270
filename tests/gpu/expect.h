/* GPU tests: EXPECT counts a passed check, or prints file:line and the
 * message of a failed one and counts it; main reports g_fail. */
#ifndef CODA_TEST_GPU_EXPECT_H
#define CODA_TEST_GPU_EXPECT_H
#include <stdio.h>

static int g_fail = 0, g_pass = 0;
#define EXPECT(c, ...)                                                                              \
  do {                                                                                              \
    if (c) g_pass++;                                                                                \
    else {                                                                                          \
      g_fail++;                                                                                     \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                   \
      printf(__VA_ARGS__);                                                                          \
      printf("\n");                                                                                 \
    }                                                                                               \
  } while (0)
#endif
