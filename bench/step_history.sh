#!/bin/sh
# bench/step_history.sh - a regression guard for the training step: builds
# an older revision of mtc in a temporary folder and alternates its step
# with the working tree's build on one configuration, in one run.
#
#   git archive REV -> $TMP/src -> cmake Release -> $TMP/build/mtc (target mtc only)
#   rounds: [old, new] in odd rounds, [new, old] in even ones (a slow phase of
#   a shared machine falls on both) -> STEPS step times per run, after 2 warm-up steps
#   -> median of each program over all rounds, and new / old throughput
#
# The configuration is the small GPT of bench/train_vs_pytorch.sh (6 layers,
# hidden 384, 6 heads, seq 256, micro batch 4, vocab 50304, dropout 0) on
# THREADS threads; ARGS adds flags to both programs (they must exist in REV:
# milestone 1, 5a0e000, knows no --bf16). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are unset for both programs. The working tree's mtc is
# NEW (default build/mtc, build it first); REV's build is deleted at exit
# unless KEEP=dir names a folder to build it in (reused when it has a
# build/mtc already).
#
# Output: one line per program (median ms, best ms, tokens/s of the median)
# and "ratio old/new" (> 1: the working tree is faster).
#
# usage: bench/step_history.sh REV [NEW_MTC]
#   env: STEPS (default 5), ROUNDS (default 3), THREADS (default 2), ARGS, KEEP
# Limitations: REV must build with this machine's packages and take the
# flags used here (its CLI is the one of mtc train at REV).
set -eu
[ $# -ge 1 ] || { echo "usage: bench/step_history.sh REV [NEW_MTC] (e.g. 5a0e000)" >&2; exit 2; }
REV=$1
NEW=${2:-build/mtc}
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
ARGS=${ARGS-}
for v in "STEPS=$STEPS" "ROUNDS=$ROUNDS" "THREADS=$THREADS"; do
    case ${v#*=} in
    '' | *[!0-9]* | 0) echo "step_history.sh: $v must be a positive integer" >&2; exit 2 ;;
    esac
done
[ -x "$NEW" ] || { echo "step_history.sh: no mtc at $NEW (build with make, or pass its path)" >&2; exit 2; }
TOP=$(git rev-parse --show-toplevel 2>/dev/null) ||
    { echo "step_history.sh: run inside mtc's git work tree (git rev-parse failed)" >&2; exit 2; }
FULL=$(git -C "$TOP" rev-parse --verify --quiet "$REV^{commit}") ||
    { echo "step_history.sh: REV '$REV' is not a commit of $TOP (git log --oneline lists them)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
B=${KEEP:-$T/old}
mkdir -p "$B"
if [ ! -x "$B/build/mtc" ]; then
    echo "step_history.sh: building $REV (${FULL%"${FULL#????????????}"}) in $B" >&2
    rm -rf "$B/src" && mkdir -p "$B/src"
    git -C "$TOP" archive "$FULL" | tar -x -C "$B/src"
    cmake -S "$B/src" -B "$B/build" -DCMAKE_BUILD_TYPE=Release >"$B/cmake.log" 2>&1 ||
        { tail -n 20 "$B/cmake.log" >&2; echo "step_history.sh: cmake of $REV failed" >&2; exit 1; }
    nice cmake --build "$B/build" --target mtc -j 2 >"$B/build.log" 2>&1 ||
        { tail -n 20 "$B/build.log" >&2; echo "step_history.sh: build of $REV failed" >&2; exit 1; }
fi
OLD=$B/build/mtc

step() { # mtc -> STEPS step times (ms), one per line
    # shellcheck disable=SC2086 # ARGS is a list of flags
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$1" train --mock-data --vocab-size 50304 \
        --make-vocab-size-divisible-by 128 --num-layers 6 --hidden-size 384 --num-attention-heads 6 \
        --ffn-hidden-size 1536 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 \
        --global-batch-size 4 --train-iters $((STEPS + 2)) --log-interval 1 --eval-iters 0 \
        --hidden-dropout 0 --attention-dropout 0 --threads "$THREADS" $ARGS \
        --metrics "$T/m.jsonl" >"$T/out" 2>&1 || { tail -n 5 "$T/out" >&2; echo "step_history.sh: $1 failed" >&2; exit 1; }
    tail -n "$STEPS" "$T/m.jsonl" | sed 's/.*"elapsed_ms": \([0-9.]*\).*/\1/'
}
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

: >"$T/old.txt"
: >"$T/new.txt"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    if [ $((r % 2)) -eq 1 ]; then
        step "$OLD" >>"$T/old.txt"
        step "$NEW" >>"$T/new.txt"
    else
        step "$NEW" >>"$T/new.txt"
        step "$OLD" >>"$T/old.txt"
    fi
    r=$((r + 1))
done
mo=$(median "$T/old.txt") mn=$(median "$T/new.txt")
bo=$(sort -n "$T/old.txt" | head -n 1) bn=$(sort -n "$T/new.txt" | head -n 1)
echo "small GPT (6x384, seq 256, mb 4, vocab 50304), $THREADS threads, $ROUNDS rounds x $STEPS steps${ARGS:+, $ARGS}"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
awk -v r="$REV" -v mo="$mo" -v mn="$mn" -v bo="$bo" -v bn="$bn" 'BEGIN {
    printf "%-22s median %8.1f ms  best %8.1f ms  %7.0f tok/s\n", "old " r, mo, bo, 1024 / (mo * 1e-3)
    printf "%-22s median %8.1f ms  best %8.1f ms  %7.0f tok/s\n", "new (working tree)", mn, bn, 1024 / (mn * 1e-3)
    printf "ratio old/new %.3f (> 1: the working tree is faster)\n", mo / mn }'
