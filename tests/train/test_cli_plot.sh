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
# a resumed run continues its parent's curve; every panel has ticks on both axes
B="--mock-data --vocab-size 64 --num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --threads 1 --log-interval 1 --eval-iters 0 --lr-decay-iters 20"
# shellcheck disable=SC2086
"$MTC" train $B --train-iters 8 --save "$D/ck" --metrics "$D/p1.jsonl" >/dev/null 2>&1 || bad "train part 1"
# shellcheck disable=SC2086
"$MTC" train $B --train-iters 16 --load "$D/ck" --metrics "$D/p2.jsonl" >/dev/null 2>&1 || bad "train part 2"
"$MTC" plot "$D/p1.jsonl" "$D/p2.jsonl" "$D/b.jsonl" --svg "$D/r.svg" 2>"$D/err" || { bad "plot resumed"; cat "$D/err"; }
python3 - "$D/r.svg" "$D/p1.jsonl" "$D/p2.jsonl" <<'PY' && ok "resumed run joined; 1-2-5 ticks on both axes of every panel" || bad "joined curve / ticks"
import json, math, sys, xml.etree.ElementTree as E
root = E.parse(sys.argv[1]).getroot()
tag = lambda e: e.tag.split("}")[-1]
lines = [e for e in root.iter() if tag(e) == "polyline"]
# p1 + p2 as one curve per series (4) and b.jsonl's 5
assert len(lines) == 9, len(lines)
iters = [json.loads(l)["iteration"] for f in sys.argv[2:4] for l in open(f)]
first = lines[0].get("points").split()
assert len(first) == len(iters) == 16, (len(first), len(iters))
xs = [float(p.split(",")[0]) for p in first]
assert all(a < b for a, b in zip(xs, xs[1:])), "x not increasing along the joined curve"
texts = ["".join(e.itertext()) for e in root.iter() if tag(e) == "text"]
assert any("p2.jsonl (resumed: from iteration 9 on" in t for t in texts), "legend"
for kind in ("xtick", "ytick"):
    n = len([e for e in root.iter() if e.get("class") == kind])
    assert n >= 4 * 3, (kind, n)
# each panel's y labels: 3+ evenly spaced multiples of one 1, 2 or 5 x 10^k step
for p in range(4):
    v = sorted(float("".join(e.itertext())) for e in root.iter() if e.get("class") == "ylabel%d" % p)
    assert len(v) >= 3, (p, v)
    step = v[1] - v[0]
    assert all(abs((b - a) - step) < 1e-6 * step for a, b in zip(v, v[1:])), (p, v)
    m = step / 10 ** math.floor(math.log10(step))
    assert min(abs(m - k) for k in (1, 2, 5)) < 1e-6, (p, step)
    assert all(abs(x / step - round(x / step)) < 1e-6 for x in v), (p, v)
PY
exit $fail
