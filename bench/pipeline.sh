#!/bin/sh
# bench/pipeline.sh - the pipeline bubble of mtc's executor (src/pp/executor.c)
# for pp=2, vpp 1 and 2, M in {2,4,8,16}: measured on shm rank-threads with a
# busy-loop toy model (forward 1 unit, backward 2 units per microbatch and
# rank, split over the vpp chunks; the loop is timed by the clock), next to
# the same orders on an ideal machine (exec-sim: the executor's blocking
# exchanges; sched-sim: free asynchronous transfers) and the paper's
# (p-1)/(m*v).
#
# The measurement needs one free core per rank: on a shared machine every
# wait for a descheduled peer counts as bubble. So, when run as root with
# chrt available, the benchmark runs at real-time priority (SCHED_FIFO 10,
# a few seconds, bounded by `timeout`; the kernel's RT throttling keeps 5%
# for everyone else). NO_RT=1 runs it at normal priority; the load average
# is printed either way.
#
# usage: bench/pipeline.sh [build-dir]   (env UNIT_US default 2000, REPS 7, PP 2)
set -eu
B=${1:-build}
UNIT_US=${UNIT_US:-2000}
REPS=${REPS:-7}
PP=${PP:-2}
if [ ! -x "$B/tests/pp_bench_executor" ]; then
    cmake --build "$B" --target pp_bench_executor >/dev/null
fi
PRIO=""
if [ "${NO_RT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && chrt -f 10 true 2>/dev/null; then
    PRIO="chrt -f 10"
fi
echo "cores: $(nproc), load average: $(cut -d' ' -f1-3 /proc/loadavg), priority: ${PRIO:-normal}"
timeout 300 $PRIO "$B/tests/pp_bench_executor" --unit-us "$UNIT_US" --reps "$REPS" --pp "$PP"
