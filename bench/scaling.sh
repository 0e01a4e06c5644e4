#!/bin/sh
# bench/scaling.sh - tokens/s of the small GPT (4 layers, hidden 128, 4
# heads, seq 128, vocab 256 mock tokens, global batch 16) trained serially
# (1 and 2 threads) and on 2 ranks as tp=2, dp=2 and tp=2 + sequence
# parallelism (and pp=2, 1F1B and interleaved with vpp=2, on 2 and 4
# microbatches of 8 and 4 samples), with the share of the step the logging rank spends inside
# collectives (every collective, p2p call and request wait timed per
# rank-thread with core/timer.h: the mtc_commtimed build, see
# tests/parity/comm_wrap.c). The machine is shared, so each layout runs
# ITERS iterations logged every 10 and the fastest 10-iteration window is
# reported (other processes only add time).
# Usage: bench/scaling.sh [build-dir]   Env: ITERS (default 40), BACKEND
# (shm; "mpi" runs the 2-rank layouts under mpirun).
set -eu
BUILD=${1:-build}
MTC=$BUILD/mtc_commtimed
[ -x "$MTC" ] || { echo "scaling: $MTC not built (cmake --build $BUILD --target mtc_commtimed)" >&2; exit 1; }
ITERS=${ITERS:-40}
BACKEND=${BACKEND:-shm}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MODEL="--mock-data --vocab-size 256 --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --micro-batch-size 8 --global-batch-size 16 --train-iters $ITERS --log-interval 10 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0"
printf "%-22s %12s %12s %10s %8s\n" layout "tokens/s" "ms/iter" "comm ms" "comm %"
run() { # NAME RANKS FLAGS...
    name=$1 ranks=$2; shift 2
    if [ "$BACKEND" = mpi ] && [ "$ranks" -gt 1 ]; then
        ${MPIEXEC:-mpirun} --allow-run-as-root --oversubscribe -np "$ranks" "$MTC" train $MODEL "$@" --metrics "$D/m" >"$D/log" 2>&1
    else
        [ "$ranks" -gt 1 ] && set -- --world-size "$ranks" "$@"
        "$MTC" train $MODEL "$@" --metrics "$D/m" >"$D/log" 2>&1
    fi || { echo "$name failed:"; cat "$D/log"; return 1; }
    sed 's/.*"elapsed_ms": \([0-9.]*\).*"comm_ms": \([0-9.]*\).*/\1 \2/' "$D/m" | sort -n | head -n1 |
        awk -v n="$name" '{ printf "%-22s %12.0f %12.1f %10.1f %7.1f%%\n", n, 16 * 128 / ($1 / 1000), $1, $2, 100 * $2 / $1 }'
}
run "serial, 1 thread" 1 --threads 1
run "serial, 2 threads" 1 --threads 2
run "tp=2" 2 --tp 2
run "dp=2" 2
run "dp=2, overlap" 2 --overlap-grad-reduce --ddp-bucket-size 200000
run "tp=2 + SP" 2 --tp 2 --sequence-parallel
run "pp=2" 2 --pp 2
run "pp=2 vpp=2" 2 --pp 2 --vpp 2
run "pp=2, M=4" 2 --pp 2 --micro-batch-size 4
run "pp=2 vpp=2, M=4" 2 --pp 2 --vpp 2 --micro-batch-size 4
