#!/bin/sh
# tests/ckpt/fault_cli.sh - crashes during a save never lose a checkpoint.
# MTC_CKPT_FAULT_AFTER=k kills the saving process (SIGKILL, as kill -9) at
# its k-th write, fsync or rename, a data write torn in half. From a
# checkpoint of iteration 2 (tp2: two ranks write), a run resumes and saves
# iteration 3 and is killed at k = 1, 4, 7, ... and at each of the last 16
# points (the commit: metadata, renames, tracker); after every crash the
# tracker's checkpoint must load with its full state and train iteration 4
# to exactly the uninterrupted run's loss. Then the same for re-saving an
# existing iteration (the directory swap). At least 50 crashes are required.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
T="$TINY --world-size 2 --tp 2 --use-distributed-optimizer"
"$MTC" train $T --train-iters 4 --metrics "$D/ref.jsonl" >"$D/ref.log" 2>&1 || { bad "reference run"; cat "$D/ref.log"; }
ref4=$(metric_lines "$D/ref.jsonl" | awk '$1 == 4')
"$MTC" train $T --train-iters 2 --save "$D/base" >"$D/base.log" 2>&1 || { bad "base save"; cat "$D/base.log"; }
crashes=0 lost=0
# crash_at K EXTRA...: restore the base, crash the save at point K; 1 = it crashed
crash_at() {
    k=$1
    shift
    rm -rf "$D/s" && cp -r "$D/base" "$D/s"
    MTC_CKPT_FAULT_AFTER=$k "$MTC" train $T --train-iters 3 --load "$D/s" --save "$D/s" "$@" >"$D/c.log" 2>&1
    st=$?
    [ $st -eq 0 ] && return 1
    crashes=$((crashes + 1))
    if [ $st -ne 137 ]; then bad "k=$k: exit $st, not a kill"; cat "$D/c.log"; fi
    it=$(cat "$D/s/latest_checkpointed_iteration.txt")
    "$MTC" train $T --train-iters 4 --load "$D/s" --metrics "$D/v.jsonl" >"$D/v.log" 2>&1
    got=$(metric_lines "$D/v.jsonl" | awk '$1 == 4')
    if [ -z "$got" ] || [ "$got" != "$ref4" ]; then
        lost=$((lost + 1))
        bad "k=$k: the checkpoint of iteration $it does not resume ($got vs $ref4)"
        cat "$D/v.log"
    fi
    return 0
}
k=1
while crash_at $k; do k=$((k + 3)); done
n=$k # no crash at n: the save has fewer points
lo=$((n - 18))
[ $lo -lt 1 ] && lo=1
k=$lo
while [ $k -lt $n ]; do crash_at $k; k=$((k + 1)); done
# re-saving iteration 3 over a complete iteration 3 (from --ckpt-step 2)
MTC_CKPT_FAULT_AFTER=0 "$MTC" train $T --train-iters 3 --load "$D/base" --save "$D/base" >/dev/null 2>&1 || bad "save 3"
k=$lo
while [ $k -lt $n ]; do crash_at $k --ckpt-step 2; k=$((k + 1)); done
[ "$crashes" -ge 50 ] && [ "$lost" -eq 0 ] && ok "$crashes crashes during saves (points 1..$n of one save), $lost lost checkpoints" ||
    bad "$crashes crashes, $lost lost"
exit $fail
