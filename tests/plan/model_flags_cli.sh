#!/bin/sh
# tests/plan/model_flags_cli.sh - `mtc plan` takes the model-architecture
# flags of `mtc train` from the one shared table (model/model_cli.h): every
# one of them is in both commands' --help, --group-query-attention with
# --num-query-groups plans exactly as --num-query-groups alone (plan's
# older form), a Llama-style flag set (RoPE base, rotary percent, QKV bias,
# head size) changes the plan, and a bad value is refused by both commands
# with the same one line and exit status 2. Uses a named machine (no
# measurement).
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

M="--machine dgx-a100 --world-size 8 --num-layers 4 --hidden-size 128 --num-attention-heads 8 --seq-length 128 --vocab-size 256 --micro-batch-size 2 --global-batch-size 16"
FLAGS="normalization norm-epsilon position-embedding-type use-rotary-position-embeddings rotary-base rotary-percent rotary-interleaved swiglu group-query-attention num-query-groups kv-channels untie-embeddings-and-output-weights disable-bias-linear add-qkv-bias init-method-std"

"$MTC" train --help >"$D/train.help" 2>&1
"$MTC" plan --help >"$D/plan.help" 2>&1
missing=""
for f in $FLAGS; do
    grep -q -- "--$f\b" "$D/train.help" || missing="$missing train:--$f"
    grep -q -- "--$f\b" "$D/plan.help" || missing="$missing plan:--$f"
done
[ -z "$missing" ] && ok "every model flag in train --help and plan --help" || bad "missing:$missing"

"$MTC" plan $M --group-query-attention --num-query-groups 2 --json >"$D/gqa.json" 2>&1
"$MTC" plan $M --num-query-groups 2 --json >"$D/groups.json" 2>&1
"$MTC" plan $M --json >"$D/mha.json" 2>&1
if [ -s "$D/gqa.json" ] && cmp -s "$D/gqa.json" "$D/groups.json" && ! cmp -s "$D/gqa.json" "$D/mha.json"; then
    ok "--group-query-attention --num-query-groups 2 plans as --num-query-groups 2, not as 8 heads"
else bad "grouped-query attention in plan"; head -3 "$D/gqa.json" "$D/groups.json"; fi

L="--normalization RMSNorm --use-rotary-position-embeddings --rotary-base 500000 --rotary-percent 0.5 --swiglu --kv-channels 32 --disable-bias-linear --add-qkv-bias --untie-embeddings-and-output-weights"
"$MTC" plan $M $L --json >"$D/llama.json" 2>&1
st=$?
[ $st -eq 0 ] && ! cmp -s "$D/llama.json" "$D/mha.json" && ok "a Llama-style flag set plans (and differs from GPT-2's)" \
    || { bad "llama flags in plan (status $st)"; head -3 "$D/llama.json"; }

# bad values: the same one line from both commands, exit 2
for a in "--rotary-percent 2" "--norm-epsilon 0" "--init-method-std 0" "--normalization Foo" \
         "--position-embedding-type alibi" "--kv-channels -1" "--group-query-attention --num-query-groups 0"; do
    "$MTC" train --mock-data $a >"$D/t.out" 2>"$D/t.err"
    ts=$?
    "$MTC" plan $M $a >"$D/p.out" 2>"$D/p.err"
    ps=$?
    te=$(sed 's/^mtc train: error: //' "$D/t.err") pe=$(sed 's/^mtc plan: error: //' "$D/p.err")
    if [ $ts -eq 2 ] && [ $ps -eq 2 ] && [ "$(wc -l <"$D/p.err")" -eq 1 ] && [ -n "$pe" ] && [ "$te" = "$pe" ]; then
        ok "$a refused alike: $pe"
    else bad "$a: train $ts '$te', plan $ps '$pe'"; fi
done
exit $fail
