#!/bin/sh
# tests/ckpt/async_cli.sh - --async-save: shards written by a background
# thread per rank from a snapshot, committed once every writer finished.
#  1. The checkpoints of an asynchronous run equal a synchronous run's byte
#     for byte (every file, tracker included), in two layouts.
#  2. The save is deferred: iteration 2's commit is logged after iteration
#     3 ran (the step loop went on while the shards were written).
#  3. Resuming from the asynchronous checkpoint of iteration 4 and training
#     to 8 gives the uninterrupted run's losses bit for bit.
#  4. Crashes (MTC_CKPT_FAULT_AFTER=k: SIGKILL at the k-th write, fsync or
#     rename, now mostly on the writer threads, while iterations run) at
#     points spread over two asynchronous saves: the tracker's checkpoint
#     always loads and resumes to the uninterrupted run's loss.
#  5. --async-save without --save is a usage error (exit 2).
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
for L in "--world-size 2 --tp 2 --use-distributed-optimizer" "--world-size 4 --tp 2 --pp 2"; do
    name=$(echo "$L" | tr -d ' -')
    "$MTC" train $TINY $L --train-iters 6 --save "$D/$name.sync" --save-interval 2 >"$D/$name.sync.log" 2>&1 ||
        { bad "$name: synchronous run"; cat "$D/$name.sync.log"; }
    "$MTC" train $TINY $L --train-iters 6 --save "$D/$name.async" --save-interval 2 --async-save \
        >"$D/$name.async.log" 2>&1 || { bad "$name: asynchronous run"; cat "$D/$name.async.log"; }
    nfiles=$(find "$D/$name.async" -type f | wc -l)
    if [ "$nfiles" -ge 10 ] && diff -r "$D/$name.sync" "$D/$name.async" >"$D/diff.txt"; then
        ok "$name: iterations 2, 4, 6 saved asynchronously equal the synchronous saves byte for byte ($nfiles files)"
    else
        bad "$name: asynchronous and synchronous checkpoints differ ($nfiles files)"
        cat "$D/diff.txt"
    fi
    # the commit of iteration 2 comes after iteration 3's log line
    awk '/iteration +3\/ +6/ { seen3 = NR } /successfully saved checkpoint from iteration +2 / { s2 = NR }
        END { exit !(seen3 && s2 > seen3) }' "$D/$name.async.log" &&
        ok "$name: iteration 3 ran before the save of iteration 2 was committed" ||
        { bad "$name: the save of iteration 2 was not deferred"; cat "$D/$name.async.log"; }
done

T="$TINY --world-size 2 --tp 2 --use-distributed-optimizer"
N=worldsize2tp2usedistributedoptimizer
"$MTC" train $T --train-iters 8 --metrics "$D/full.jsonl" >"$D/full.log" 2>&1 || { bad "reference run"; cat "$D/full.log"; }
"$MTC" train $T --train-iters 8 --load "$D/$N.async" --ckpt-step 4 --metrics "$D/resumed.jsonl" >"$D/resumed.log" 2>&1 ||
    { bad "resume from the asynchronous checkpoint"; cat "$D/resumed.log"; }
grep -q "successfully loaded checkpoint from .*iteration 4, consumed samples 64, optimizer state" "$D/resumed.log" ||
    { bad "no load line"; cat "$D/resumed.log"; }
same_metrics "resume from the asynchronous save of iteration 4" "$D/full.jsonl" "$D/resumed.jsonl" 0

ref5=$(metric_lines "$D/full.jsonl" | awk '$1 == 5')
"$MTC" train $T --train-iters 2 --save "$D/base" >"$D/base.log" 2>&1 || { bad "base save"; cat "$D/base.log"; }
crashes=0 lost=0 k=1
while :; do
    rm -rf "$D/s" && cp -r "$D/base" "$D/s"
    MTC_CKPT_FAULT_AFTER=$k "$MTC" train $T --train-iters 4 --load "$D/s" --save "$D/s" --save-interval 1 \
        --async-save >"$D/c.log" 2>&1
    st=$?
    [ $st -eq 0 ] && break # past the last point of both saves
    crashes=$((crashes + 1))
    if [ $st -ne 137 ]; then bad "k=$k: exit $st, not a kill"; cat "$D/c.log"; fi
    it=$(cat "$D/s/latest_checkpointed_iteration.txt")
    "$MTC" train $T --train-iters 5 --load "$D/s" --metrics "$D/v.jsonl" >"$D/v.log" 2>&1
    got=$(metric_lines "$D/v.jsonl" | awk '$1 == 5')
    if [ -z "$got" ] || [ "$got" != "$ref5" ]; then
        lost=$((lost + 1))
        bad "k=$k: the checkpoint of iteration $it does not resume ($got vs $ref5)"
        cat "$D/c.log" "$D/v.log"
    fi
    k=$((k + 7))
done
[ "$crashes" -ge 50 ] && [ "$lost" -eq 0 ] &&
    ok "$crashes crashes during two asynchronous saves (points 1..$k, every seventh), $lost lost checkpoints" ||
    bad "$crashes crashes, $lost lost"

"$MTC" train $TINY --train-iters 1 --async-save >"$D/u.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q -- "--async-save needs --save DIR" "$D/u.log" && ok "--async-save without --save: exit 2" ||
    { bad "--async-save without --save: exit $st"; cat "$D/u.log"; }
exit $fail
