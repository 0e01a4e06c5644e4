#!/bin/sh
# tests/parity/parity_cli.sh - `mtc train --world-size N` end to end against
# the serial run: per-iteration lm loss and grad norm in --metrics within
# 2e-5 relative for tp=2 x dp=2 with SP and overlapped uneven buckets and
# for dp=4 and pp=2 x tp=2 x dp=2; the banner states the layout in Megatron's words and the
# per-rank memory; a TP-sharded --save loads in `mtc generate` and, with
# --load, serially and on tp=2 alike; --tp 1 with
# --sequence-parallel warns and trains serially.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"

"$MTC" train $TINY --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
"$MTC" train $TINY --world-size 4 --tp 2 --sequence-parallel --overlap-grad-reduce \
    --ddp-bucket-size 700 --metrics "$D/l.jsonl" --save "$D/m.bin" >"$D/l.log" 2>&1 || { bad "tp2 dp2 run"; cat "$D/l.log"; }
same_losses "shm tp=2 dp=2 sp overlap bucket=700" "$D/s.jsonl" "$D/l.jsonl"
# Megatron's bucket rule: the size applies only with overlap
grep -q "overlap grad reduce: on; ddp bucket size: 700$" "$D/l.log" && ok "banner: bucket size 700 with overlap" || { bad "banner bucket"; head -3 "$D/l.log"; }
"$MTC" train $TINY --world-size 2 --ddp-bucket-size 700 --train-iters 1 --print-layout >"$D/nb.log" 2>&1 || { bad "dp=2 no-overlap run"; cat "$D/nb.log"; }
if grep -q "overlap grad reduce: off; ddp bucket size: one bucket$" "$D/nb.log" && grep -q "^buffer: .*, 1 bucket," "$D/nb.log"; then
    ok "--ddp-bucket-size without overlap: one bucket, as Megatron"
else bad "bucket size without overlap"; grep -E "bucket" "$D/nb.log" | head -5; fi
grep -q "^using world size: 4, data-parallel size: 2, context-parallel size: 1, hierarchical context-parallel sizes: None, tensor-model-parallel size: 2, pipeline-model-parallel size: 1$" "$D/l.log" \
    && ok "banner layout" || { bad "banner layout"; cat "$D/l.log"; }
grep -q "^> memory per rank (MB): parameters [0-9.]*, gradients [0-9.]*, optimizer state [0-9.]*, activations [0-9.]*$" "$D/l.log" \
    && ok "banner memory" || bad "banner memory"
[ "$(grep -c ' iteration  *[0-9]*/' "$D/l.log")" -eq 4 ] && ok "one log line per iteration (last rank only)" || bad "log lines"
"$MTC" generate --load "$D/m.bin" --prompt "" --max-new-tokens 8 >"$D/g.log" 2>&1 && ok "generate loads the TP-saved model" || { bad "generate"; cat "$D/g.log"; }

# --load --finetune of that checkpoint: serial and tp=2 + SP continue identically
"$MTC" train $TINY --load "$D/m.bin" --finetune --metrics "$D/ls.jsonl" >"$D/ls.log" 2>&1 || { bad "serial --load"; cat "$D/ls.log"; }
"$MTC" train $TINY --load "$D/m.bin" --finetune --world-size 2 --tp 2 --sequence-parallel --metrics "$D/lt.jsonl" >"$D/lt.log" 2>&1 || { bad "tp=2 --load"; cat "$D/lt.log"; }
same_losses "tp=2 sp --load shards the saved model" "$D/ls.jsonl" "$D/lt.jsonl"
if [ "$(head -c 60 "$D/ls.jsonl")" != "$(head -c 60 "$D/s.jsonl")" ]; then ok "--load changes the start"; else bad "--load had no effect"; fi

"$MTC" train $TINY --world-size 4 --metrics "$D/d.jsonl" >"$D/d.log" 2>&1 || { bad "dp4 run"; cat "$D/d.log"; }
same_losses "shm dp=4" "$D/s.jsonl" "$D/d.jsonl"

"$MTC" train $TINY --world-size 8 --pp 2 --tp 2 --sequence-parallel --overlap-grad-reduce --metrics "$D/p.jsonl" >"$D/p.log" 2>&1 || { bad "pp2 run"; cat "$D/p.log"; }
same_losses "shm pp=2 x tp=2 x dp=2 sp overlap" "$D/s.jsonl" "$D/p.jsonl"
grep -q "tensor-model-parallel size: 2, pipeline-model-parallel size: 2$" "$D/p.log" && ok "pp banner" || bad "pp banner"

# evaluation (forward-only pipeline schedule, DP share of the validation batch)
E="--split 90,10,0 --eval-interval 2"
"$MTC" train $TINY $E --eval-iters 2 --metrics "$D/es.jsonl" >"$D/es.log" 2>&1 || bad "serial eval run"
"$MTC" train $TINY $E --eval-iters 2 --world-size 8 --pp 2 --tp 2 --metrics "$D/ep.jsonl" >"$D/ep.log" 2>&1 || bad "pp eval run"
if grep -o '"val_loss": [0-9.e+-]*' "$D/es.jsonl" >"$D/v1" && grep -o '"val_loss": [0-9.e+-]*' "$D/ep.jsonl" >"$D/v2" &&
   [ "$(wc -l <"$D/v1")" -eq 2 ] && paste "$D/v1" "$D/v2" | awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > 2e-5 * $2) bad = 1 } END { exit bad }'; then
    ok "validation loss pp=2 x tp=2 x dp=2 = serial (2 evaluations)"
else bad "validation loss"; paste "$D/v1" "$D/v2"; fi

"$MTC" train $TINY --sequence-parallel --metrics "$D/w.jsonl" >"$D/w.log" 2>"$D/w.err" || bad "sp with tp 1"
grep -q "WARNING: --sequence-parallel is switched off" "$D/w.err" && ok "sp with tp=1 warns" || bad "sp warning"
same_losses "sp off at tp=1" "$D/s.jsonl" "$D/w.jsonl"
exit $fail
