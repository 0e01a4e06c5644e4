#!/bin/sh
# bench/trace_cost.sh - what recording costs: the same small pipelined,
# tensor- and data-parallel training (world 4: tp 2, pp 2) without any
# recorder, with --metrics (group totals only) and with --trace (every span,
# every iteration), median ms per iteration of REPS runs each, and the
# ratios to the run without. The cost when off is a pointer test per call
# and cannot be told apart from noise here; compare builds to see it.
# Figures on a shared machine are only indicative.
# usage: bench/trace_cost.sh [build-dir]   (env REPS default 5, ITERS 20)
set -eu
B=${1:-build}
REPS=${REPS:-5}
ITERS=${ITERS:-20}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
ARGS="--mock-data --vocab-size 256 --num-layers 4 --hidden-size 64 --num-attention-heads 4 \
--seq-length 64 --micro-batch-size 2 --global-batch-size 16 --world-size 4 --tp 2 --pp 2 \
--threads 1 --train-iters $ITERS --log-interval $ITERS --eval-iters 0"
run() { # prints the run's ms per iteration
    "$B/mtc" train $ARGS "$@" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p'
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in off metrics trace; do
    : >"$D/$mode"
    for r in $(seq "$REPS"); do
        case $mode in
        off) run >>"$D/$mode" ;;
        metrics) run --metrics "$D/m.jsonl" >>"$D/$mode" ;;
        trace) run --trace "$D/t.json" >>"$D/$mode" ;;
        esac
    done
done
OFF=$(median <"$D/off")
for mode in off metrics trace; do
    M=$(median <"$D/$mode")
    awk -v m="$mode" -v v="$M" -v o="$OFF" 'BEGIN {printf "%-8s %8.2f ms/iteration  ratio to off %.3f\n", m, v, v / o}'
done
