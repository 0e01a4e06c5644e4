#!/bin/sh
# tests/train/progress_cli.sh - set-up progress of `mtc train`.
# MTC_PROGRESS=always shows every phase on stderr (building, initialising
# N parameters with the rank's count, loading and saving a checkpoint),
# none of it on stdout (the log stays what parsers read); without it, a
# tiny model's set-up (well under a second) prints no progress at all (on a loaded
# machine: at most lines of phases that really took a second), so
# the phases stay out of the way of tests and short runs.
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
TINY="--mock-data --vocab-size 60 --make-vocab-size-divisible-by 16 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --lr-decay-iters 4 --eval-iters 0 --threads 1 --world-size 2 --tp 2"
MTC_PROGRESS=always "$MTC" train $TINY --train-iters 2 --save "$D/ck" >"$D/a.out" 2>"$D/a.err" || { bad "save run"; cat "$D/a.err"; }
MTC_PROGRESS=always "$MTC" train $TINY --train-iters 4 --load "$D/ck" >"$D/b.out" 2>"$D/b.err" || { bad "load run"; cat "$D/b.err"; }
# rank 0 reports its own shard: with tp 2, about half of the 28.9K parameters (14.5K, "14K")
n=14K
for want in "> building GPT model (parameters, gradients, optimizer state): done in" \
    "> initialising $n parameters: done in" "> saving the checkpoint of iteration 2: done in"; do
    grep -qF "$want" "$D/a.err" && ok "stderr has '$want'" || { bad "no '$want' on stderr"; cat "$D/a.err"; }
done
grep -q "^> loading checkpoint $D/ck/iter_0000002/metadata.json: done in" "$D/b.err" &&
    ok "stderr has the checkpoint load" || { bad "no load progress"; cat "$D/b.err"; }
[ "$(grep -c '^> building GPT model (parameters' "$D/a.err")" = 2 ] && ok "one start and one end line per phase in a log file" ||
    { bad "building lines"; cat "$D/a.err"; }
if grep -q -e "done in" -e "initialising" "$D/a.out" "$D/b.out"; then bad "progress on stdout"; else ok "no progress on stdout"; fi
"$MTC" train $TINY --train-iters 2 --save "$D/ck2" >"$D/c.out" 2>"$D/c.err" || bad "quiet run"
# a loaded machine may stretch a phase past the second: then only lines of phases that took
# at least a second may appear (never one of a shorter phase)
if awk '{ if (!match($0, /(after|done in) [0-9.]+ s$/)) exit 1; split(substr($0, RSTART), w, " ");
          t = w[1] == "after" ? w[2] : w[3]; if (t + 0 < 1.0) exit 1 }' "$D/c.err"; then
    [ -s "$D/c.err" ] && ok "stderr of a short run: only phases that took >= 1 s (a loaded machine)" ||
        ok "a set-up under a second prints nothing on stderr"
else bad "stderr of a short run"; cat "$D/c.err"; fi
exit $fail
