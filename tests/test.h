/* tests/test.h - the tiny assertion kit every test program uses.
 * Checks record failures and go on, so one run shows every mismatch;
 * T_DONE() prints "N passed, M failed" and returns the exit status. */
#ifndef MTC_TESTS_TEST_H
#define MTC_TESTS_TEST_H

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int t_passed_, t_failed_;

#define T_CHECK(cond)                                                                              \
    do {                                                                                           \
        if (cond)                                                                                  \
            atomic_fetch_add(&t_passed_, 1);                                                       \
        else {                                                                                     \
            atomic_fetch_add(&t_failed_, 1);                                                       \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

#define T_CHECKF(cond, ...)                                                                        \
    do {                                                                                           \
        if (cond)                                                                                  \
            atomic_fetch_add(&t_passed_, 1);                                                       \
        else {                                                                                     \
            atomic_fetch_add(&t_failed_, 1);                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define T_CLOSE(a, b, atol, rtol)                                                                  \
    T_CHECKF(fabs((double)(a) - (double)(b)) <= (atol) + (rtol)*fabs((double)(b)), "%.9g vs %.9g", \
             (double)(a), (double)(b))

/* The exit status must be returned (`return T_DONE();`): a bare `T_DONE();`
 * would let main return 0 whatever failed, so it does not compile cleanly
 * (warn_unused_result; an error under CI's -Werror). */
__attribute__((warn_unused_result, unused)) static int t_done_(void) {
    printf("%d passed, %d failed\n", atomic_load(&t_passed_), atomic_load(&t_failed_));
    return atomic_load(&t_failed_) ? 1 : 0;
}
#define T_DONE() t_done_()

#endif
