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

/* Median of n doubles (sorts a copy in place of `scratch`, n <= 1<<20). */
double mtc_median(const double *v, int n);

#endif
