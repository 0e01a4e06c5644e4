#!/bin/sh
# tests/fp8/param_gather_cli.sh - --fp8-param-gather (docs/fp8.md): the
# distributed optimizer's all-gather carries E4M3 bytes for the fp8 weights
# and dequantizes after, which is exactly the quantization the forward does
# without the flag: each recipe's run with the flag equals the run without
# it bit for bit (loss and grad norm every iteration), on dp 2 and on
# tp 2 x dp 2 (tensorwise: the weight's amax over TP x DP); and the bytes
# the metrics and the comm counters report are fewer than a bf16 gather's.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
M="--mock-data --vocab-size 64 --make-vocab-size-divisible-by 16 --num-layers 2 --hidden-size 128
--num-attention-heads 4 --seq-length 64 --micro-batch-size 2 --global-batch-size 8 --train-iters 3
--lr 1e-3 --lr-decay-style constant --log-interval 1 --eval-iters 0 --threads 1 --bf16 --seed 7
--use-distributed-optimizer --fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max"
run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $M --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1 ||
        { bad "$name run"; tail -3 "$D/$name.log"; }
}
lg() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$D/$1.jsonl"; }
field() { grep -o "\"$2\": [0-9]*" "$D/$1.jsonl" | head -1 | awk '{ print $2 }'; }
for r in delayed tensorwise blockwise; do
    for L in "dp2:--world-size 2" "tp2dp2:--world-size 4 --tp 2 --sequence-parallel"; do
        n=${L%%:*} a=${L#*:}
        [ "$n" = tp2dp2 ] && [ "$r" != tensorwise ] && continue
        run "$r.$n" --fp8-recipe "$r" $a
        run "$r.$n.pg" --fp8-recipe "$r" $a --fp8-param-gather
        if [ "$(lg "$r.$n" | wc -l)" = 3 ] && [ "$(lg "$r.$n")" = "$(lg "$r.$n.pg")" ]; then
            ok "$r $n: fp8 gather = bf16 gather + forward quantization, bit for bit"
        else bad "$r $n: runs differ"; paste -d'\n' "$D/$r.$n.jsonl" "$D/$r.$n.pg.jsonl" | cut -c1-120; fi
        g=$(field "$r.$n.pg" fp8_param_gather_bytes) b=$(field "$r.$n.pg" fp8_param_gather_bf16_bytes)
        if grep -q "> fp8 parameter all-gather: the owners cast" "$D/$r.$n.pg.log" &&
            [ -n "$g" ] && [ -n "$b" ] && [ "$g" -lt $((b * 6 / 10)) ]; then
            ok "$r $n: $g bytes gathered a step, $b as bf16"
        else bad "$r $n: gather bytes '$g' vs bf16 '$b'"; grep "parameter all-gather" "$D/$r.$n.pg.log"; fi
    done
done
# the comm counters (an independent count) see the fewer bytes on the data-parallel group
dpb() { grep -o '"DATA_PARALLEL_GROUP_WITH_CP": {"bytes": [0-9]*' "$D/$1.jsonl" | head -1 | grep -o '[0-9]*$'; }
x=$(dpb delayed.dp2) y=$(dpb delayed.dp2.pg)
[ -n "$x" ] && [ -n "$y" ] && [ "$y" -lt "$x" ] && ok "comm counters: $y bytes on the DP group a step, $x without" ||
    bad "comm counters: '$y' not below '$x'"
# mxfp8: TE's MXFP8 weights need both copies (no saving); the gather stays bf16, said so
run mx --fp8-recipe mxfp8 --world-size 2 --fp8-param-gather
grep -q "fp8 parameter all-gather: not applied (mxfp8" "$D/mx.log" && ok "mxfp8: the banner says the gather stays bf16" ||
    bad "mxfp8 banner"
exit $fail
