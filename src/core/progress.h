/* core/progress.h - telling a person what a long set-up phase is doing.
 *
 * A phase (building the model, initialising N parameters, loading a
 * checkpoint) is begun, updated with how much of it is done, and ended:
 *   - stderr a terminal: one line redrawn in place at most ten times a
 *     second, "> initialising 124M parameters [########........]  52%  3.1 s",
 *     left on screen with its time when the phase ends;
 *   - otherwise (a log file, a pipe, a test): nothing for a phase that ends
 *     within a second; a longer one prints its line once it passes the
 *     second, then at most every 5 seconds, and once when it ends.
 * The mode switches it off, or prints every phase as a log file would see a
 * long one (what the tests use; the CLI's MTC_PROGRESS=0 and always).
 * Contract: one phase at a time per reporter, updated from one thread; the
 * caller decides which rank reports (NULL stream: everything is a no-op).
 * Does not: measure anything itself, or print to stdout (the log there
 * stays what log parsers expect). */
#ifndef MTC_CORE_PROGRESS_H
#define MTC_CORE_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;           /* NULL: off */
    int tty;           /* redraw in place */
    int always;        /* MTC_PROGRESS_ALWAYS: no first-second grace */
    char what[128];    /* "initialising 124M parameters" */
    uint64_t t0, last; /* phase start, last line (ns) */
    double done, total;
    int shown;             /* a line of this phase was printed */
    int pending;           /* a tty line awaits its end */
    uint64_t (*now)(void); /* the clock (tests substitute one) */
} mtc_progress;

typedef enum {
    MTC_PROGRESS_ON = 0, /* the default: a grace second, then rate-limited lines */
    MTC_PROGRESS_OFF,    /* nothing */
    MTC_PROGRESS_ALWAYS, /* every phase, as a log file would see a long one */
} mtc_progress_mode;

/* f: the stream (stderr), NULL to switch the reporter off. */
void mtc_progress_init(mtc_progress *p, FILE *f, mtc_progress_mode mode);
void mtc_progress_begin(mtc_progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* done of total (total 0: no fraction is known; only the time is shown). */
void mtc_progress_update(mtc_progress *p, double done, double total);
void mtc_progress_end(mtc_progress *p);
/* "124M", "1.5B", "532K", "17" (buf of at least 16). */
const char *mtc_progress_count(char *buf, double n);

#endif
