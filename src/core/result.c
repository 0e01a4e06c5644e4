/* core/result.c - names and advice for result codes; per-thread detail. */
#include "core/result.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_detail[1024];

const char *mtc_result_name(mtc_result_t rc) {
    switch (rc) {
    case MTC_OK: return "OK";
    case MTC_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case MTC_ERR_INVALID_USAGE: return "INVALID_USAGE";
    case MTC_ERR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case MTC_ERR_SYSTEM: return "SYSTEM";
    case MTC_ERR_IO: return "IO";
    case MTC_ERR_FORMAT: return "FORMAT";
    case MTC_ERR_REMOTE: return "REMOTE";
    case MTC_ERR_TIMEOUT: return "TIMEOUT";
    case MTC_ERR_UNSUPPORTED: return "UNSUPPORTED";
    case MTC_ERR_INTERNAL: return "INTERNAL";
    case MTC_ERR_NUMERIC: return "NUMERIC";
    }
    return "UNKNOWN";
}

const char *mtc_result_str(mtc_result_t rc) {
    switch (rc) {
    case MTC_OK: return "success";
    case MTC_ERR_INVALID_ARGUMENT:
        return "invalid argument: a value passed in is out of range; fix the value named in the "
               "message";
    case MTC_ERR_INVALID_USAGE:
        return "invalid usage: calls were made in the wrong order or ranks disagree; check the "
               "calls named in the message";
    case MTC_ERR_OUT_OF_MEMORY:
        return "out of memory: use a smaller model, batch or fewer ranks per machine";
    case MTC_ERR_SYSTEM:
        return "system error: the operating system refused a request (see the message)";
    case MTC_ERR_IO:
        return "I/O error: a file could not be read or written; check the path and permissions";
    case MTC_ERR_FORMAT: return "format error: a file is truncated, corrupted or of another kind";
    case MTC_ERR_REMOTE: return "remote error: another rank failed or exited; see its report";
    case MTC_ERR_TIMEOUT:
        return "timeout: a peer did not arrive in time; see which rank waits in which call (raise "
               "MTC_COMM_TIMEOUT if it is just slow)";
    case MTC_ERR_UNSUPPORTED:
        return "unsupported: this feature is not built in or not available here";
    case MTC_ERR_INTERNAL: return "internal error: a bug in mtc; please report it with the message";
    case MTC_ERR_NUMERIC:
        return "numeric error: training diverged; lower the learning rate or check the data";
    }
    return "unknown result code";
}

/* Formats into a copy first: callers may pass mtc_error_detail() itself as
 * an argument ("%s: %s", path, mtc_error_detail()), which vsnprintf must
 * not read while it writes the same buffer. */
mtc_result_t mtc_error(mtc_result_t rc, const char *fmt, ...) {
    char text[sizeof error_detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(error_detail, text, sizeof text);
    return rc;
}

const char *mtc_error_detail(void) { return error_detail; }
void mtc_error_clear(void) { error_detail[0] = '\0'; }
