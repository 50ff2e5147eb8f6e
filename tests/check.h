/* check.h — the tests' tiny harness: each check prints "ok NAME" or "FAIL NAME: detail" (tests/run.sh counts
 * them) and the program exits non-zero when any failed. */
#ifndef TFB_TEST_CHECK_H
#define TFB_TEST_CHECK_H
#include <stdio.h>

static int test_failures = 0;

#define EXPECT(name, cond, ...)                        \
    do {                                               \
        if (cond) printf("ok %s\n", name);             \
        else {                                         \
            printf("FAIL %s: ", name);                 \
            printf(__VA_ARGS__);                       \
            printf("\n");                              \
            test_failures++;                           \
        }                                              \
    } while (0)

#endif
