/* core/limits.h - bounds on user numbers that depend on the machine.
 *
 * mtc_threads_max: the most compute threads one rank may start when
 * `ranks_here` ranks share this process's node: 8 x the online cores in all
 * (oversubscription is allowed for tests, a typo like --threads 2147483647
 * is refused before any thread starts), at least 1. */
#ifndef MTC_CORE_LIMITS_H
#define MTC_CORE_LIMITS_H

#include <unistd.h>

#define MTC_THREADS_PER_CORE_MAX 8

static inline int mtc_threads_max(int ranks_here) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    if (ranks_here < 1) ranks_here = 1;
    long m = MTC_THREADS_PER_CORE_MAX * cores / ranks_here;
    return m < 1 ? 1 : m > 65536 ? 65536 : (int)m;
}

#endif
