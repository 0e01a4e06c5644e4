#!/bin/sh
# tests/fp8/parity_cli.sh - every fp8 recipe trained on each layout (tp 2 +
# SP, pp 2 x vpp 2, dp 2 with the distributed optimizer, cp 2, ep 2) against
# its serial fp8 run: per-iteration lm loss and grad norm within TOL relative.
# This holds because the amax reductions are layout-invariant (docs/fp8.md):
# delayed scaling reduces each step's amaxes over TP x DP x CP, tensorwise
# each operand's over TP x CP, and the block recipes' blocks never straddle
# a shard here (hidden 64, seq 128: every split is a multiple of 32; the
# 128-blocks of blockwise only on the layouts that split no tensor).
# The loss tolerance (5e-3 over 4 steps) is wider than the fp32 parity's
# 2e-5: one fp32 rounding difference of a sum (a TP, CP or DP reduction
# order) moves a value across an fp8 rounding midpoint now and then, a 1/16
# relative jump of that element (layouts that change no sum, pp and dp here,
# stay within 1e-8). The scales themselves are compared tightly: iterations
# 1-2's scale range within 1e-5.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
TOL=${TOL:-5e-3}
M="--mock-data --vocab-size 64 --make-vocab-size-divisible-by 16 --num-layers 2 --hidden-size 64
--num-attention-heads 4 --seq-length 128 --micro-batch-size 2 --global-batch-size 8 --train-iters 4
--lr 1e-3 --lr-decay-style constant --log-interval 1 --eval-iters 0 --threads 1 --bf16 --seed 7"
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    "$MTC" train $M --fp8-format hybrid --fp8-recipe "$r" --fp8-amax-history-len 4 \
        --fp8-amax-compute-algo max --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1 ||
        { bad "$name run"; tail -3 "$D/$name.log"; }
}
# same NAME SERIAL LAYOUT: loss and grad norm of the 4 iterations within TOL
same() {
    if [ ! -s "$D/$2.jsonl" ] || [ ! -s "$D/$3.jsonl" ]; then bad "$1: missing metrics"; return; fi
    worst=$(paste -d' ' "$D/$2.jsonl" "$D/$3.jsonl" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":") v[n++] = $(i + 1) + 0
          for (k = 0; k < 2; k++) { d = (v[k] - v[k + 2]) / v[k]; if (d < 0) d = -d; if (d > w) w = d }; lines++ }
        END { if (lines != 4) print "nan"; else printf "%.2e\n", w }')
    if awk -v w="$worst" -v t="$TOL" 'BEGIN { exit !(w != "nan" && w + 0 <= t + 0) }'; then
        ok "$1: 4 iterations, loss and grad norm within $worst"
    else bad "$1: worst relative difference $worst > $TOL"; paste -d'\n' "$D/$2.jsonl" "$D/$3.jsonl" | cut -c1-200; fi
    # iteration 1 (identical weights): its loss is the forward through the
    # quantized GEMMs (tensorwise: scales from the reduced amaxes), within
    # 1e-6; its grad norm the backward's, within 1e-4 (one flipped fp8
    # rounding moves it by about 1e-5). A rank using its shard's own amax
    # quantizes every value of the tensor differently.
    first=$(paste -d' ' "$D/$2.jsonl" "$D/$3.jsonl" | head -1 | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":") v[n++] = $(i + 1) + 0
          l = (v[0] - v[2]) / v[0]; g = (v[1] - v[3]) / v[1]; if (l < 0) l = -l; if (g < 0) g = -g
          printf "%.1e %.1e", l, g; exit !(n == 4 && l <= 1e-6 && g <= 1e-4) }') &&
        ok "$1: iteration 1 loss, grad norm within $first" || bad "$1: iteration 1 differs: $first"
}
MOE="--num-experts 4 --moe-router-topk 2"
# `parity_cli.sh quick` (the test that also runs under the sanitizers): the
# tensorwise recipe (an amax all-reduce per GEMM operand) on tp 2 + SP and cp 2
QUICK=0
[ "${1:-}" = quick ] && QUICK=1
RECIPES="delayed tensorwise mxfp8 blockwise"
[ $QUICK = 1 ] && RECIPES="tensorwise"
for r in $RECIPES; do
    run "$r" "$r"
    if [ $QUICK = 1 ]; then
        run "$r.tp" "$r" --world-size 2 --tp 2 --sequence-parallel
        same "$r tp=2 sp" "$r" "$r.tp"
        run "$r.cp" "$r" --world-size 2 --cp 2
        same "$r cp=2" "$r" "$r.cp"
        continue
    fi
    run "$r.l4" "$r" --num-layers 4
    run "$r.vpp" "$r" --num-layers 4 --world-size 2 --pp 2 --vpp 2
    same "$r pp=2 vpp=2" "$r.l4" "$r.vpp"
    run "$r.dopt" "$r" --world-size 2 --use-distributed-optimizer --fp8-param-gather
    same "$r dp=2 distributed optimizer" "$r" "$r.dopt"
    if [ "$r" != blockwise ]; then
        run "$r.tp" "$r" --world-size 2 --tp 2 --sequence-parallel
        same "$r tp=2 sp" "$r" "$r.tp"
        run "$r.cp" "$r" --world-size 2 --cp 2
        same "$r cp=2" "$r" "$r.cp"
        run "$r.moe" "$r" $MOE
        run "$r.ep" "$r" $MOE --world-size 2 --ep 2
        same "$r ep=2 (MoE)" "$r.moe" "$r.ep"
    fi
done
[ $QUICK = 1 ] && exit $fail
# the fp8 run is not the bf16 run (the quantization is there at all)
"$MTC" train $M --metrics "$D/bf16.jsonl" >"$D/bf16.log" 2>&1 || bad "bf16 run"
if ! cmp -s "$D/bf16.jsonl" "$D/delayed.jsonl" && [ -s "$D/bf16.jsonl" ]; then
    ok "bf16 and fp8 runs differ"
else bad "bf16 = fp8"; fi
# --first-last-layers-bf16 keeping both layers bf16: the bf16 run (fp32 GEMM engine) bit for bit,
# and one fp8 layer of three is neither that nor the all-fp8 run
"$MTC" train $M --bf16-gemm fp32 --metrics "$D/b32.jsonl" >"$D/b32.log" 2>&1 || bad "bf16 fp32-GEMM run"
run fl tensorwise --first-last-layers-bf16
if [ -s "$D/fl.jsonl" ] && [ "$(grep -o '"lm_loss": [^,]*' "$D/fl.jsonl")" = "$(grep -o '"lm_loss": [^,]*' "$D/b32.jsonl")" ] &&
    grep -q "GEMMs of 0 of 2 layers" "$D/fl.log"; then ok "--first-last-layers-bf16 over both layers = bf16 bit for bit"
else bad "--first-last-layers-bf16 over both layers"; fi
"$MTC" train $M --num-layers 3 --bf16-gemm fp32 --metrics "$D/b3.jsonl" >"$D/b3.log" 2>&1 || bad "bf16 3 layers"
run fl3 tensorwise --num-layers 3 --first-last-layers-bf16
run all3 tensorwise --num-layers 3
l() { grep -o '"lm_loss": [^,]*' "$D/$1.jsonl" | tail -1; }
grep -q "GEMMs of 1 of 3 layers" "$D/fl3.log" && [ "$(l fl3)" != "$(l b3)" ] && [ "$(l fl3)" != "$(l all3)" ] &&
    ok "one fp8 layer of three: $(l fl3) between bf16 $(l b3) and all-fp8 $(l all3)" || bad "1 of 3 fp8 layers"
exit $fail
