/* core/progress.c - the phase reporter of progress.h: a grace second, then
 * rate-limited lines (a redrawn bar on a terminal). Relies on core/timer.h
 * for the clock. */
#include "core/progress.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/timer.h"

#define GRACE_NS 1000000000ull /* a phase shorter than this prints nothing (no terminal) */
#define TTY_EVERY_NS 100000000ull
#define LOG_EVERY_NS 5000000000ull

void mtc_progress_init(mtc_progress *p, FILE *f, mtc_progress_mode mode) {
    memset(p, 0, sizeof *p);
    if (mode == MTC_PROGRESS_OFF) f = NULL;
    p->f = f;
    p->always = mode == MTC_PROGRESS_ALWAYS;
    p->tty = f && !p->always && isatty(fileno(f));
    p->now = mtc_time_ns;
}

const char *mtc_progress_count(char *buf, double n) {
    static const char *const unit[] = {"", "K", "M", "B", "T"};
    int u = 0;
    while (n >= 1000 && u < 4)
        n /= 1000, u++;
    snprintf(buf, 16, u == 0 ? "%.0f%s" : n < 10 ? "%.1f%s" : "%.0f%s", n, unit[u]);
    return buf;
}

static void progress_line(mtc_progress *p, int final) {
    double s = (double)(p->now() - p->t0) * 1e-9;
    double frac = p->total > 0 ? p->done / p->total : -1;
    if (frac > 1) frac = 1;
    if (p->tty) {
        fprintf(p->f, "\r> %s", p->what);
        if (frac >= 0) {
            char bar[21];
            int fill = (int)(frac * 20 + 0.5);
            for (int i = 0; i < 20; i++)
                bar[i] = i < fill ? '#' : '.';
            bar[20] = 0;
            fprintf(p->f, " [%s] %3.0f%%", bar, 100 * frac);
        }
        fprintf(p->f, "  %.1f s\033[K%s", s, final ? "\n" : "");
    } else if (final) {
        fprintf(p->f, "> %s: done in %.1f s\n", p->what, s);
    } else if (frac >= 0) {
        fprintf(p->f, "> %s: %.0f%% after %.1f s\n", p->what, 100 * frac, s);
    } else {
        fprintf(p->f, "> %s ... (%.1f s)\n", p->what, s);
    }
    fflush(p->f);
    p->shown = 1, p->pending = p->tty && !final;
}

void mtc_progress_begin(mtc_progress *p, const char *fmt, ...) {
    if (!p->f) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    p->t0 = p->last = p->now();
    p->done = p->total = 0;
    p->shown = p->pending = 0;
    if (p->tty || p->always) progress_line(p, 0);
}

void mtc_progress_update(mtc_progress *p, double done, double total) {
    if (!p->f) return;
    p->done = done, p->total = total;
    uint64_t t = p->now();
    int due = p->tty
                  ? t - p->last >= TTY_EVERY_NS
                  : (p->shown || p->always ? t - p->last >= LOG_EVERY_NS : t - p->t0 >= GRACE_NS);
    if (!due) return;
    p->last = t;
    progress_line(p, 0);
}

void mtc_progress_end(mtc_progress *p) {
    if (!p->f) return;
    if (p->total > 0) p->done = p->total;
    /* a log file hears of a phase only when it took long enough to be shown */
    if (p->tty || p->shown || p->always || p->now() - p->t0 >= GRACE_NS) progress_line(p, 1);
    p->shown = p->pending = 0;
}
