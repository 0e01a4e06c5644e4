#!/bin/sh
# tests/train/test_cli_plot.sh - `mtc plot`: two metrics files (one written
# by a real `mtc train --metrics` run, one by hand with a validation loss)
# give one well-formed SVG with a polyline per drawn series and both files
# in the legend; bad input exits 2 with one line and writes nothing.
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
"$MTC" train --mock-data --vocab-size 64 --num-layers 1 --hidden-size 32 --num-attention-heads 4 \
    --seq-length 16 --micro-batch-size 2 --threads 1 --train-iters 4 --log-interval 1 --eval-iters 0 \
    --metrics "$D/a.jsonl" >/dev/null 2>"$D/err" || { bad "train"; cat "$D/err"; }
printf '%s\n' '{"iteration": 1, "lm_loss": 4.0, "lr": 0.001, "grad_norm": 2.0, "tokens_per_s": 100}' \
    '{"iteration": 2, "lm_loss": 3.5, "val_loss": 3.7, "lr": 0.0009, "grad_norm": 1.5, "tokens_per_s": 120}' \
    '{"iteration": 3, "lm_loss": 3.0, "val_loss": 3.2, "lr": 0.0008, "grad_norm": 1.0, "tokens_per_s": 110}' >"$D/b.jsonl"
if "$MTC" plot "$D/a.jsonl" "$D/b.jsonl" --svg "$D/loss.svg" 2>"$D/err"; then ok "plot: exit 0"
else bad "plot"; cat "$D/err"; fi
# well-formed XML (the parser of the Python standard library), polylines counted
N=$(python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
print(len([e for e in r.iter() if e.tag.endswith("polyline")]))' "$D/loss.svg" 2>"$D/err")
# a: loss, lr, grad norm, tokens/s (4); b: the same and the validation loss (5)
[ "$N" = 9 ] && ok "well-formed SVG, 9 curves" || { bad "SVG: '$N' curves"; cat "$D/err"; }
grep -q "a.jsonl" "$D/loss.svg" && grep -q "b.jsonl" "$D/loss.svg" && ok "legend names both runs" || bad "legend"
grep -q 'stroke-dasharray' "$D/loss.svg" && ok "validation loss dashed" || bad "dashed validation loss"
expect_usage() {
    name=$1 pat=$2; shift 2
    "$MTC" "$@" >"$D/out" 2>"$D/err"
    rc=$?
    if [ $rc -ne 2 ] || [ "$(wc -l <"$D/err")" -ne 1 ] || ! grep -q -- "$pat" "$D/err" || [ -e "$D/never.svg" ]; then
        bad "$name: exit $rc"; cat "$D/err"; return; fi
    ok "$name: $(cat "$D/err")"
}
expect_usage "no svg" "--svg FILE is required" plot "$D/a.jsonl"
expect_usage "missing file" "cannot read $D/none.jsonl" plot "$D/none.jsonl" --svg "$D/never.svg"
echo 'not json' >"$D/c.jsonl"
expect_usage "not metrics" "c.jsonl:1 is not a metrics line" plot "$D/c.jsonl" --svg "$D/never.svg"
exit $fail
