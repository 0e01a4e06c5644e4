/* core/result.h - result codes, the thread-local error detail, and the
 * propagation macros every fallible function uses.
 *
 * Codes say whose fault it is; mtc_result_str() says what to do about it.
 * The detail message (mtc_error_detail) is per thread, which is per rank in
 * the shm backend, so ranks never overwrite each other's messages.
 * This file does not print or exit: callers decide (only cli/ exits). */
#ifndef MTC_CORE_RESULT_H
#define MTC_CORE_RESULT_H

#include <stddef.h>

typedef enum {
    MTC_OK = 0,
    MTC_ERR_INVALID_ARGUMENT, /* the caller passed a bad value */
    MTC_ERR_INVALID_USAGE,    /* calls in the wrong order, or ranks disagree */
    MTC_ERR_OUT_OF_MEMORY,
    MTC_ERR_SYSTEM,      /* the OS refused (threads, mmap, ...) */
    MTC_ERR_IO,          /* a file could not be read or written */
    MTC_ERR_FORMAT,      /* a file's contents are not what they claim */
    MTC_ERR_REMOTE,      /* another rank failed or went away */
    MTC_ERR_TIMEOUT,     /* a peer did not arrive in time */
    MTC_ERR_UNSUPPORTED, /* not built in, or not available here */
    MTC_ERR_INTERNAL,    /* a bug in mtc */
    MTC_ERR_NUMERIC,     /* the computation diverged (NaN or Inf in the loss or gradients) */
} mtc_result_t;

/* Short upper-case name of a code ("INVALID_ARGUMENT"). */
const char *mtc_result_name(mtc_result_t rc);
/* One sentence: whose fault it is and what to do about it. */
const char *mtc_result_str(mtc_result_t rc);

/* Record a detail message for the calling thread and return rc, so that
 *   return mtc_error(MTC_ERR_INVALID_ARGUMENT, "count %zu too large", n);
 * both explains and propagates. The message replaces any earlier one. */
mtc_result_t mtc_error(mtc_result_t rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The calling thread's last detail message ("" if none). */
const char *mtc_error_detail(void);
void mtc_error_clear(void);

#define MTC_CHECK(call)                                                                            \
    do {                                                                                           \
        mtc_result_t mtc_rc_ = (call);                                                             \
        if (mtc_rc_ != MTC_OK) return mtc_rc_;                                                     \
    } while (0)

/* Stores the code in rc and jumps to the cleanup label on failure. */
#define MTC_CHECK_GOTO(call, rc, label)                                                            \
    do {                                                                                           \
        (rc) = (call);                                                                             \
        if ((rc) != MTC_OK) goto label;                                                            \
    } while (0)

#endif
