#!/bin/sh
# tests/train/lr_schedule_cli.sh - Megatron's schedule flags through mtc
# train: for every case of tests/reference/lr_schedule.fixture (made by
# tests/reference/lr_schedule_reference.py from Megatron's formulas), the
# learning rate mtc logs after each iteration equals Megatron's, and a saved
# checkpoint records Megatron's scheduler state (warm-up, decay and
# weight-decay steps in samples, the weight-decay ends). Then the exits:
# --exit-interval and --exit-duration-in-mins stop early and save, and bad
# schedule combinations are refused in one line (exit 2) as Megatron's
# argument checks do.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
TINY="--mock-data --vocab-size 32 --make-vocab-size-divisible-by 8 --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 2 --log-interval 1 --eval-iters 0 --threads 1 --hidden-dropout 0 --attention-dropout 0"
FIX=$SRC/tests/reference/lr_schedule.fixture
n=0
for name in $(sed -n 's/^case //p' "$FIX"); do
    n=$((n + 1))
    awk -v c="$name" '$1 == "case" { on = $2 == c } on' "$FIX" >"$D/case"
    flags=$(sed -n 's/^flags //p' "$D/case")
    # shellcheck disable=SC2086
    "$MTC" train $TINY $flags --metrics "$D/m.jsonl" --save "$D/ck_$name" >"$D/log" 2>&1 ||
        { bad "$name: mtc train $flags"; cat "$D/log"; continue; }
    sed -n 's/.*"iteration": \([0-9]*\), .*"lr": \([^,]*\),.*/\1 \2/p' "$D/m.jsonl" >"$D/got"
    if awk 'NR == FNR { if ($1 ~ /^[0-9]+$/) want[$1] = $2; next }
        { n++; d = $2 - want[$1]; if (d < 0) d = -d; s = want[$1] < 0 ? -want[$1] : want[$1]
          if (!($1 in want) || d > 1e-12 + 1e-6 * s) { print "iteration " $1 ": mtc " $2 ", Megatron " want[$1]; bad = 1 } }
        END { exit bad || n < 10 }' "$D/case" "$D/got"; then
        ok "$name: $(wc -l <"$D/got") iterations' learning rates = Megatron's ($flags)"
    else bad "$name: learning rates differ"; fi
    # the saved scheduler state: lr_warmup_steps lr_decay_steps wd_incr_steps start_wd end_wd
    set -- $(sed -n 's/^sched //p' "$D/case")
    meta=$(cat "$D/ck_$name"/iter_*/common.json 2>/dev/null || cat "$D/ck_$name"/iter_*/metadata.json)
    python3 - "$1" "$2" "$4" "${11}" "${12}" "$meta" <<'PY' || bad "$name: saved scheduler state"
import json, sys
w, d, i, swd, ewd, meta = sys.argv[1:]
m = json.loads(meta)
def find(o):
    if isinstance(o, dict):
        if "opt_param_scheduler" in o: return o["opt_param_scheduler"]
        for v in o.values():
            r = find(v)
            if r: return r
s = find(m)
want = dict(lr_warmup_steps=float(w), lr_decay_steps=float(d), wd_incr_steps=float(i), start_wd=float(swd), end_wd=float(ewd))
diff = {k: (s.get(k), v) for k, v in want.items() if abs(float(s.get(k, -1)) - v) > 1e-9 * max(1, abs(v))}
if diff: print("   saved vs Megatron:", diff); sys.exit(1)
PY
done
[ $n -ge 13 ] && ok "$n cases" || bad "only $n cases in the fixture"

# exits
"$MTC" train $TINY --train-iters 30 --exit-interval 7 --save "$D/ex" >"$D/ex.log" 2>&1 || bad "exit-interval run"
grep -q "^\[exiting program at iteration 7\] datetime: " "$D/ex.log" && [ -d "$D/ex/iter_0000007" ] &&
    ! grep -q "iteration        8/" "$D/ex.log" && ok "--exit-interval 7 stops at iteration 7 and saves it" ||
    { bad "exit-interval"; tail -n 3 "$D/ex.log"; }
"$MTC" train $TINY --train-iters 100000 --exit-duration-in-mins 0.002 --world-size 2 >"$D/ed.log" 2>&1 || bad "exit-duration run"
grep -q "^\[exiting program after [0-9.e-]* minutes\] datetime: " "$D/ed.log" && ! grep -q "iteration   100000/" "$D/ed.log" &&
    ok "--exit-duration-in-mins stops both ranks early: $(grep exiting "$D/ed.log")" || { bad "exit-duration"; tail -n 3 "$D/ed.log"; }

# refusals, one line and exit 2 before any work
expect_usage() {
    name=$1 pat=$2; shift 2
    "$MTC" train $TINY "$@" >"$D/out" 2>"$D/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q -- "$pat" "$D/err"; then ok "$name: $(cat "$D/err")"
    else bad "$name (exit $rc)"; cat "$D/err"; fi
}
expect_usage "samples and iters" "exclude each other" --train-samples 100 --train-iters 10
expect_usage "iters flags with samples" "give the schedule in samples" --train-samples 100 --lr-decay-iters 10
expect_usage "samples flags with iters" "need sample-based training" --train-iters 10 --lr-warmup-samples 8
expect_usage "fraction and warm-up iters" "one of --lr-warmup-fraction and --lr-warmup-iters" --train-iters 10 --lr-warmup-fraction 0.1 --lr-warmup-iters 2
expect_usage "WSD without its decay" "WSD needs --lr-wsd-decay-iters" --train-iters 10 --lr-decay-style WSD
expect_usage "WSD style" "lr-wsd-decay-style=square is unknown" --train-iters 10 --lr-decay-style WSD --lr-wsd-decay-iters 4 --lr-wsd-decay-style square
expect_usage "wd ends without a style" "need --weight-decay-incr-style linear or cosine" --train-iters 10 --start-weight-decay 0.1
expect_usage "wd style without ends" "needs --start-weight-decay and --end-weight-decay" --train-iters 10 --weight-decay-incr-style linear
expect_usage "warm-up past the decay" "must end before the decay" --train-iters 10 --lr-warmup-iters 5 --lr-decay-iters 3
expect_usage "too few samples" "less than one global batch" --train-samples 1
exit $fail
