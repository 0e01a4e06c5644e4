/* core/log.h - rank-prefixed logging and the always-on assert.
 *
 * Every line is prefixed with the calling rank ("[rank 3] ..."), taken from a
 * thread-local identity that the runtime sets when a rank starts
 * (mtc_log_set_rank); with ranks as threads, each thread is one rank.
 * The level (error, warn, info, debug, trace; default info) is the
 * process's, set by mtc_log_set_level (the CLI sets it from MTC_LOG_LEVEL
 * before a command runs). Logging writes to stderr; user-facing results
 * (tables, JSON) go to stdout from cli/, never through here. */
#ifndef MTC_CORE_LOG_H
#define MTC_CORE_LOG_H

typedef enum {
    MTC_LOG_ERROR = 0,
    MTC_LOG_WARN,
    MTC_LOG_INFO,
    MTC_LOG_DEBUG,
    MTC_LOG_TRACE,
} mtc_log_level_t;

/* Identity of the calling thread's rank: global rank (-1 = none) and an
 * optional coordinate string ("tp1 pp0 dp1") shown by assertions. */
void mtc_log_set_rank(int rank, const char *coords);
int mtc_log_rank(void);
const char *mtc_log_coords(void);

void mtc_log_set_level(mtc_log_level_t level);
mtc_log_level_t mtc_log_level(void);
/* Parse "error|warn|info|debug|trace"; returns -1 when unknown. */
int mtc_log_level_parse(const char *s);

void mtc_log(mtc_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, printed only when the calling rank is 0 (or has no rank). */
void mtc_log0(mtc_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MTC_ERROR(...) mtc_log(MTC_LOG_ERROR, __VA_ARGS__)
#define MTC_WARN(...) mtc_log(MTC_LOG_WARN, __VA_ARGS__)
#define MTC_INFO(...) mtc_log(MTC_LOG_INFO, __VA_ARGS__)
#define MTC_DEBUG(...) mtc_log(MTC_LOG_DEBUG, __VA_ARGS__)
#define MTC_INFO0(...) mtc_log0(MTC_LOG_INFO, __VA_ARGS__)
#define MTC_WARN0(...) mtc_log0(MTC_LOG_WARN, __VA_ARGS__)

/* Internal invariants only, never user input: always on, prints the
 * condition, file:line and the rank's identity, then aborts. */
#define MTC_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0)) mtc_assert_fail(#cond, __FILE__, __LINE__);              \
    } while (0)

_Noreturn void mtc_assert_fail(const char *cond, const char *file, int line);

#endif
