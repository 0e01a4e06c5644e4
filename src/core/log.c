/* core/log.c - rank-prefixed logging to stderr; see log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local int log_rank = -1;
static _Thread_local char log_coords[96];
static atomic_int log_level = MTC_LOG_INFO; /* mtc_log_set_level's (the CLI's MTC_LOG_LEVEL) */

void mtc_log_set_rank(int rank, const char *coords) {
    log_rank = rank;
    snprintf(log_coords, sizeof log_coords, "%s", coords ? coords : "");
}

int mtc_log_rank(void) { return log_rank; }
const char *mtc_log_coords(void) { return log_coords; }

int mtc_log_level_parse(const char *s) {
    static const char *names[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < 5; i++)
        if (strcasecmp(s, names[i]) == 0) return i;
    if (strcasecmp(s, "warning") == 0) return MTC_LOG_WARN;
    return -1;
}

void mtc_log_set_level(mtc_log_level_t level) { atomic_store(&log_level, (int)level); }

mtc_log_level_t mtc_log_level(void) { return (mtc_log_level_t)atomic_load(&log_level); }

static void log_vprint(mtc_log_level_t level, const char *fmt, va_list ap) {
    static const char *tags[] = {"error", "warning", "info", "debug", "trace"};
    char line[2048];
    int n = 0;
    if (log_rank >= 0) n = snprintf(line, sizeof line, "[rank %d] ", log_rank);
    if (level <= MTC_LOG_WARN)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", tags[level]);
    if (n < (int)sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* one fputs per line keeps lines of concurrent ranks from interleaving */
    size_t len = strlen(line);
    if (len + 1 < sizeof line && (len == 0 || line[len - 1] != '\n')) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
}

void mtc_log(mtc_log_level_t level, const char *fmt, ...) {
    if (level > mtc_log_level()) return;
    va_list ap;
    va_start(ap, fmt);
    log_vprint(level, fmt, ap);
    va_end(ap);
}

void mtc_log0(mtc_log_level_t level, const char *fmt, ...) {
    if (level > mtc_log_level() || log_rank > 0) return;
    va_list ap;
    va_start(ap, fmt);
    log_vprint(level, fmt, ap);
    va_end(ap);
}

void mtc_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "mtc: assertion failed: %s at %s:%d (rank %d%s%s)\n", cond, file, line,
            log_rank, log_coords[0] ? ", " : "", log_coords);
    fflush(stderr);
    abort();
}
