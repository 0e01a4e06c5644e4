#!/bin/sh
# tests/ckpt/export_cli.sh - `mtc export` / `mtc import` end to end: a
# trained GPT-2 and a Llama (tp2 checkpoints) exported to safetensors
# (F32, BF16, sharded) and imported back; the imported checkpoint generates
# the same greedy text as the original and trains in another layout; models
# the architectures cannot express and bad flags exit 2 with one line.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
for fam in gpt2 llama; do
    X=""
    [ $fam = llama ] && X=$LLAMA
    "$MTC" train $TINY $X --train-iters 3 --world-size 2 --tp 2 --save "$D/$fam.ck" >"$D/$fam.log" 2>&1 || { bad "$fam train"; cat "$D/$fam.log"; }
    "$MTC" export --load "$D/$fam.ck" --format safetensors --out "$D/$fam.hf" >"$D/e.log" 2>&1 &&
        [ -s "$D/$fam.hf/model.safetensors" ] && [ -s "$D/$fam.hf/config.json" ] && ok "$fam: export" || { bad "$fam export"; cat "$D/e.log"; }
    "$MTC" import --load "$D/$fam.hf" --save "$D/$fam.imp" >"$D/i.log" 2>&1 &&
        [ "$(cat "$D/$fam.imp/latest_checkpointed_iteration.txt")" = 0 ] && ok "$fam: import" || { bad "$fam import"; cat "$D/i.log"; }
    "$MTC" generate --load "$D/$fam.ck" --prompt-ids "1 2 3" --max-new-tokens 12 --temperature 0 >"$D/g1" 2>&1
    "$MTC" generate --load "$D/$fam.imp" --prompt-ids "1 2 3" --max-new-tokens 12 --temperature 0 >"$D/g2" 2>&1
    [ -s "$D/g1" ] && cmp -s "$D/g1" "$D/g2" && ok "$fam: greedy text of the imported model = the original's: $(cat "$D/g1")" ||
        { bad "$fam generate"; cat "$D/g1" "$D/g2"; }
    "$MTC" export --load "$D/$fam.ck" --format safetensors --dtype bf16 --max-shard-size 30000 --out "$D/$fam.bf" >"$D/e.log" 2>&1 &&
        [ -s "$D/$fam.bf/model.safetensors.index.json" ] && [ ! -e "$D/$fam.bf/model.safetensors" ] &&
        ls "$D/$fam.bf"/model-00001-of-0000*.safetensors >/dev/null 2>&1 && ok "$fam: bf16, sharded with an index" ||
        { bad "$fam bf16 shards"; ls "$D/$fam.bf"; cat "$D/e.log"; }
    "$MTC" import --load "$D/$fam.bf" --save "$D/$fam.bfimp" >/dev/null 2>&1 || bad "$fam import of bf16 shards"
    "$MTC" train $TINY $X --train-iters 2 --world-size 2 --pp 2 --load "$D/$fam.bfimp" --metrics "$D/$fam.ft.jsonl" >"$D/ft.log" 2>&1 &&
        grep -q '"iteration": 1,' "$D/$fam.ft.jsonl" && grep -q "no optimizer state" "$D/ft.log" &&
        ok "$fam: the imported checkpoint trains at pp2 from iteration 1" || { bad "$fam fine-tune"; cat "$D/ft.log"; }
done
# refusals: one line, exit 2
"$MTC" train $TINY --disable-bias-linear --train-iters 1 --save "$D/nb.ck" >/dev/null 2>&1
"$MTC" export --load "$D/nb.ck" --format safetensors --out "$D/nb.hf" 2>"$D/err"
[ $? -eq 2 ] && grep -q "GPT2LMHeadModel has biases" "$D/err" && ok "a GPT-2 without biases is refused" || { bad "refusal"; cat "$D/err"; }
"$MTC" export --load "$D/gpt2.ck" --format tflite --out "$D/x" 2>"$D/err"
[ $? -eq 2 ] && grep -q "format=tflite is unknown" "$D/err" && ok "unknown format refused" || bad "unknown format"
"$MTC" import --load "$D/nothing" --save "$D/x" 2>"$D/err"
[ $? -eq 2 ] && grep -q "nothing/config.json" "$D/err" && ok "import of a missing folder refused: $(cat "$D/err")" || { bad "missing folder"; cat "$D/err"; }
exit $fail
