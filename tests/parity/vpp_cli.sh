#!/bin/sh
# tests/parity/vpp_cli.sh - `mtc train` with interleaved virtual pipeline
# stages end to end on shm rank-threads: per-iteration lm loss and
# grad norm within 2e-5 of the serial run for pp=2 x vpp=2 x tp=2 + SP and
# pp=4 x vpp=2 on 8 layers; --num-layers-per-virtual-pipeline-stage 1 is
# the same run as --vpp 2; validation losses (forward-only order) equal
# the serial ones; a --save from pp=2 x vpp=2 (chunks gathered) continues
# serially like the save of the same tp=2 run without the pipeline, and a
# serial save loads into pp=2 x vpp=2 chunks; invalid schedule
# configurations exit 2 before training with Megatron's conditions.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
L4="$TINY --num-layers 4"
L8="$TINY --num-layers 8"

"$MTC" train $L4 --metrics "$D/s4.jsonl" --save "$D/s4.bin" >"$D/s4.log" 2>&1 || { bad "serial 4 layers"; cat "$D/s4.log"; }
"$MTC" train $L8 --metrics "$D/s8.jsonl" >"$D/s8.log" 2>&1 || { bad "serial 8 layers"; cat "$D/s8.log"; }
"$MTC" train $L4 --world-size 4 --tp 2 --pp 2 --vpp 2 --sequence-parallel --metrics "$D/a.jsonl" \
    --save "$D/a.bin" >"$D/a.log" 2>&1 || { bad "pp=2 vpp=2 tp=2 run"; cat "$D/a.log"; }
same_losses "shm pp=2 vpp=2 tp=2 sp" "$D/s4.jsonl" "$D/a.jsonl"
"$MTC" train $L8 --world-size 4 --pp 4 --virtual-pipeline-model-parallel-size 2 --metrics "$D/b.jsonl" \
    >"$D/b.log" 2>&1 || { bad "pp=4 vpp=2 run"; cat "$D/b.log"; }
same_losses "shm pp=4 vpp=2" "$D/s8.jsonl" "$D/b.jsonl"
"$MTC" train $L4 --world-size 2 --pp 2 --num-layers-per-virtual-pipeline-stage 1 --metrics "$D/c.jsonl" \
    >"$D/c.log" 2>&1 || { bad "layers-per-virtual-stage run"; cat "$D/c.log"; }
"$MTC" train $L4 --world-size 2 --pp 2 --num-virtual-stages-per-pipeline-rank 2 --metrics "$D/d.jsonl" \
    >"$D/d.log" 2>&1 || { bad "virtual-stages-per-rank run"; cat "$D/d.log"; }
same_losses "--num-layers-per-virtual-pipeline-stage 1 (vpp 2)" "$D/s4.jsonl" "$D/c.jsonl"
if cmp -s "$D/c.jsonl" "$D/d.jsonl" || [ "$(sed 's/"elapsed[^,]*,//; s/"tokens_per_s[^,]*,//' "$D/c.jsonl" | cut -c1-80)" = "$(sed 's/"elapsed[^,]*,//; s/"tokens_per_s[^,]*,//' "$D/d.jsonl" | cut -c1-80)" ]; then
    ok "layers-per-virtual-stage 1 and virtual-stages-per-rank 2 agree"
else bad "the two vpp spellings differ"; fi

# the banner counts every model chunk of the printing (last) rank: with
# equal layers, pp=2 x vpp=2 holds as many parameters there as pp=2 alone
"$MTC" train $L4 --world-size 2 --pp 2 --train-iters 1 >"$D/e.log" 2>&1 || { bad "pp=2 run"; cat "$D/e.log"; }
pe=$(grep -o 'model parallel rank ([0-9]*, [0-9]*): [0-9]*' "$D/e.log")
pc=$(grep -o 'model parallel rank ([0-9]*, [0-9]*): [0-9]*' "$D/c.log")
if [ -n "$pe" ] && [ "$pe" = "$pc" ] && [ "${pe#*(0, 1)}" != "$pe" ]; then
    ok "banner parameters of pp=2 vpp=2 = pp=2 ($pe)"
else bad "banner parameter count: pp=2 '$pe', pp=2 vpp=2 '$pc'"; fi

# the saved pp=2 x vpp=2 model (every chunk gathered) continues like the
# save of the same tp=2 + SP run without the pipeline (the serial run's own
# save differs by AdamW-amplified rounding in near-zero-gradient elements,
# see test_parity.c, which grows over 4 more steps past 2e-5)
"$MTC" train $L4 --world-size 2 --tp 2 --sequence-parallel --save "$D/t.bin" >"$D/t.log" 2>&1 || { bad "tp=2 run"; cat "$D/t.log"; }
"$MTC" train $L4 --load "$D/t.bin" --finetune --metrics "$D/lt.jsonl" >/dev/null 2>&1 || bad "--load of the tp save"
"$MTC" train $L4 --load "$D/a.bin" --finetune --metrics "$D/la.jsonl" >/dev/null 2>&1 || bad "--load of the vpp save"
same_losses "--load of the pp=2 vpp=2 save" "$D/lt.jsonl" "$D/la.jsonl"
"$MTC" train $L4 --load "$D/s4.bin" --finetune --metrics "$D/ls.jsonl" >/dev/null 2>&1 || bad "serial --load"
"$MTC" train $L4 --load "$D/s4.bin" --finetune --world-size 2 --pp 2 --vpp 2 --metrics "$D/lv.jsonl" >/dev/null 2>&1 || bad "vpp --load"
same_losses "--load into pp=2 vpp=2 chunks" "$D/ls.jsonl" "$D/lv.jsonl"

# evaluation (forward-only interleaved order): the same validation losses
"$MTC" train $L8 --split 90,10,0 --eval-iters 3 --eval-interval 2 >"$D/vs.log" 2>&1 || bad "serial eval run"
"$MTC" train $L8 --split 90,10,0 --eval-iters 3 --eval-interval 2 --world-size 4 --pp 4 --vpp 2 >"$D/vp.log" 2>&1 || bad "vpp eval run"
grep -o 'lm loss value: [0-9.E+-]*' "$D/vs.log" >"$D/vs.val"
grep -o 'lm loss value: [0-9.E+-]*' "$D/vp.log" >"$D/vp.val"
if [ "$(wc -l <"$D/vs.val")" -eq 2 ] && paste -d' ' "$D/vs.val" "$D/vp.val" | awk '
    { d = $4 - $8; if (d < 0) d = -d; if (d > 2e-5 * $4) bad = 1 } END { exit bad }'; then
    ok "pp=4 vpp=2 validation losses (forward-only order) equal the serial ones"
else bad "validation losses"; cat "$D/vs.val" "$D/vp.val"; fi

# refused up front (exit 2, one line, nothing trained)
refused() { # NAME EXPECTED-TEXT ARGS...
    name=$1 want=$2; shift 2
    "$MTC" train "$@" >"$D/r.out" 2>"$D/r.err"; st=$?
    if [ $st -eq 2 ] && grep -qF -- "$want" "$D/r.err" && ! grep -q ' iteration ' "$D/r.out"; then
        ok "refused: $name"
    else bad "$name: exit $st"; cat "$D/r.err"; fi
}
refused "M=1 < pp (group size range)" "should range in [PP=2 , M=1]" $L4 --world-size 2 --pp 2 --vpp 2 --global-batch-size 2
refused "M % group < pp" "divided by N (number of contiguous micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to the pipeline-parallel size, but it is 1" \
    $L4 --world-size 2 --pp 2 --vpp 2 --microbatch-group-size-per-virtual-pipeline-stage 3
refused "layers % (pp*vpp)" "num-layers=4 is not divisible by pipeline-model-parallel-size*vpp = 2*3 = 6" $L4 --world-size 2 --pp 2 --vpp 3
refused "vpp without pp" "When interleaved schedule is used, pipeline-model-parallel size should be greater than 1" $L4 --vpp 2
refused "layers per virtual stage" "number of layers per pipeline stage must be divisible number of layers per virtual pipeline stage" \
    $L4 --world-size 2 --pp 2 --num-layers-per-virtual-pipeline-stage 3
refused "two spellings of vpp" "No more than one of the following arguments can be set at the same time" \
    $L4 --world-size 2 --pp 2 --num-layers-per-virtual-pipeline-stage 1 --num-virtual-stages-per-pipeline-rank 2
exit $fail
