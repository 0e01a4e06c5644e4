#!/bin/sh
# tests/plan/plan_legend.sh - every abbreviation in `mtc plan`'s table is in
# its legend: the layout names' parts (tpN, cpN, ppN, vppN, dpN, epN, etpN,
# sp, do) of a dense and an MoE search on a GPU machine (cp searched by
# default there) and the column headings; the legend names the activation
# model (flash attention by default, --no-flash-attention without).
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
M="--machine dgx-h100 --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 --global-batch-size 64 --top 100000"
# shellcheck disable=SC2086
"$MTC" plan --world-size 16 $M >"$D/dense" 2>&1 || { echo "FAIL dense plan"; cat "$D/dense"; exit 1; }
# shellcheck disable=SC2086
"$MTC" plan --world-size 16 $M --num-experts 4 --moe-router-topk 2 >"$D/moe" 2>&1 || { echo "FAIL moe plan"; cat "$D/moe"; exit 1; }
# shellcheck disable=SC2086
"$MTC" plan --world-size 16 $M --no-flash-attention >"$D/noflash" 2>&1 || { echo "FAIL --no-flash-attention"; exit 1; }
for f in dense moe; do
    sed -n '/^legend:/,/^machine/p' "$D/$f" | tr '\n' ' ' >"$D/$f.legend"
    parts=$(awk 'NR > 1 && $1 ~ /^[0-9]+$/ { print $2 }' "$D/$f" | tr '-' '\n' | sed 's/[0-9]*$//' | sort -u)
    [ -n "$parts" ] || { echo "FAIL $f: no rows"; fail=1; }
    for p in $parts; do
        case $p in sp | do) key=" $p " ;; *) key=" ${p}N " ;; esac
        if grep -q -- "$key" "$D/$f.legend"; then :; else echo "FAIL $f: '$p' has no legend entry"; fail=1; fi
    done
    echo "ok   $f: layout parts $(echo $parts | tr '\n' ' ')all in the legend"
    for h in "MB" "step ms" "TFLOP/s" "MFU"; do
        grep -q " $h " "$D/$f.legend" || { echo "FAIL $f: column '$h' not in the legend"; fail=1; }
    done
done
grep -q "cp2" "$D/dense" && echo "ok   cp searched by default on dgx-h100" || { echo "FAIL no cp layouts"; fail=1; }
grep -q "with flash attention" "$D/dense.legend" && grep -q "without flash attention" "$D/noflash" &&
    echo "ok   the legend names the activation model" || { echo "FAIL activation model"; fail=1; }
awk 'NR > 1 && $1 ~ /^[0-9]+$/ { sub("%", "", $10); if ($10 + 0 > 100) bad = 1 } END { exit bad }' "$D/dense" "$D/moe" &&
    echo "ok   every MFU at most 100%" || { echo "FAIL an MFU above 100%"; fail=1; }
exit $fail
