#!/bin/sh
# bench/pipeline.sh - the pipeline bubble of mtc's executor (src/pp/executor.c)
# for pp=2, vpp 1 and 2, M in {2,4,8,16}: measured on shm rank-threads with a
# calibrated busy-loop model (forward 1 unit, backward 2 units per microbatch
# and rank, split over the vpp chunks), next to the dependency simulation of
# the same orders (free transfers) and the paper's (p-1)/(m*v).
#
# The measurement needs one idle core per rank: on a loaded machine every
# wait for a descheduled peer counts as bubble. The load average is printed
# first for that reason.
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
echo "cores: $(nproc), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$B/tests/pp_bench_executor" --unit-us "$UNIT_US" --reps "$REPS" --pp "$PP"
