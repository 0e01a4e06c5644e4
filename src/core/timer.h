/* core/timer.h - monotonic clock and accumulating timers. */
#ifndef MTC_CORE_TIMER_H
#define MTC_CORE_TIMER_H

#include <stdint.h>

/* Nanoseconds from CLOCK_MONOTONIC. */
uint64_t mtc_time_ns(void);
static inline double mtc_time_s(void) { return (double)mtc_time_ns() * 1e-9; }
/* Seconds of CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID):
 * preemption by other work does not count. */
double mtc_thread_cpu_s(void);

/* A stopwatch that accumulates over start/stop pairs. */
typedef struct {
    uint64_t total_ns;
    uint64_t started_ns;
    uint64_t count;
} mtc_timer;

static inline void mtc_timer_start(mtc_timer *t) { t->started_ns = mtc_time_ns(); }
static inline void mtc_timer_stop(mtc_timer *t) {
    t->total_ns += mtc_time_ns() - t->started_ns;
    t->count++;
}
static inline void mtc_timer_reset(mtc_timer *t) { t->total_ns = t->started_ns = t->count = 0; }
static inline double mtc_timer_ms(const mtc_timer *t) { return (double)t->total_ns * 1e-6; }

/* Median of n doubles (sorts a copy in place of `scratch`, n <= 1<<20). */
double mtc_median(const double *v, int n);

#endif
