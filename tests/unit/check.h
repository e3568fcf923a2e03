/* check.h — non-fatal checks for the test programs that do not use cmocka (test_cuda_backend.c,
 * test_emu.c): CHECK(cond, fmt, ...) counts the check, and where cond is false counts a failure and prints
 * "FAIL file:line: " and the message; the program goes on, so one run reports every failing check.
 * check_summary() prints "N passed, M failed" and returns the exit status (1 where any check failed).
 * Each including program gets its own counters (a forked child may reset them). */
#ifndef DDP_TEST_CHECK_H
#define DDP_TEST_CHECK_H

#include <stdio.h>

static int checks, failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static inline int check_summary(void)
{
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}

#endif
