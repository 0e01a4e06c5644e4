#!/bin/sh
# tests/ckpt/gguf_cli.sh - `mtc export --format gguf` read by the real
# llama.cpp: the npm package node-llama-cpp (its prebuilt CPU binary),
# installed once into $MTC_BUILD_DIR/npm-cache (skipped with a notice only
# when npm cannot reach the registry). A GPT-2 (byte tokenizer) and a
# Llama (GQA, SwiGLU, untied head; char tokenizer) trained at tp2 on a
# small text, exported as F32 and F16: for several prompts llama.cpp's own
# tokenizer must give mtc's token ids and its greedy continuation must be
# `mtc generate --temperature 0`'s text.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
NPM_DIR=${MTC_BUILD_DIR:-$D}/npm-cache/llama
MODS=$NPM_DIR/node_modules
if [ ! -f "$MODS/node-llama-cpp/dist/index.js" ] || [ ! -d "$MODS/@node-llama-cpp/linux-x64" ]; then
    if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
        echo "skip: npm/node are not installed (apt-get install npm), so llama.cpp cannot be fetched"
        exit 0
    fi
    mkdir -p "$NPM_DIR"
    echo '{"name": "mtc-gguf-test", "private": true, "type": "module"}' >"$NPM_DIR/package.json"
    if ! (cd "$NPM_DIR" && timeout 600 npm install --omit=optional --ignore-scripts --no-audit --no-fund \
        node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 >"$D/npm.log" 2>&1); then
        echo "skip: npm cannot reach the registry to install node-llama-cpp@3.22.1:"
        tail -n 3 "$D/npm.log"
        exit 0
    fi
fi
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times"
    i=$((i + 1))
done >"$D/text.txt"
B="--data-path $D/text.txt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 100 --log-interval 50 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1 --world-size 2 --tp 2"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
"$MTC" train $B --tokenizer-type byte --save "$D/gpt2" >"$D/t1.log" 2>&1 || { bad "gpt2 train"; cat "$D/t1.log"; }
"$MTC" train $B $LLAMA --tokenizer-type char --save "$D/llama" >"$D/t2.log" 2>&1 || { bad "llama train"; cat "$D/t2.log"; }
PROMPTS="the qu|over the lazy|jumps ov"
models=""
for fam in gpt2 llama; do
    for dt in fp32 fp16; do
        "$MTC" export --load "$D/$fam" --format gguf --dtype $dt --out "$D/$fam.$dt.gguf" >"$D/e.log" 2>&1 ||
            { bad "$fam $dt export"; cat "$D/e.log"; }
        models="$models${models:+,}$D/$fam.$dt.gguf"
    done
done
(IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_greedy.mjs" "$MODS" 14 "$models" $PROMPTS) >"$D/l.out" 2>"$D/l.err" ||
    { bad "llama.cpp failed"; cat "$D/l.err"; }
# json_text: the JSON string literal of stdin's text (without the last newline)
json_text() { python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()[:-1]))'; }
for fam in gpt2 llama; do
    for dt in fp32 fp16; do
        echo "$PROMPTS" | tr '|' '\n' | while read -r p; do
            line=$(awk -F '\t' -v m="$D/$fam.$dt.gguf" -v p="$p" '$1 == m && $2 == p' "$D/l.out")
            ids=$(printf '%s' "$line" | cut -f3)
            got=$(printf '%s' "$line" | cut -f4)
            want=$("$MTC" generate --load "$D/$fam" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1 | json_text)
            if [ $fam = gpt2 ]; then # byte tokenizer: the ids are the bytes
                exp_ids=$(printf '%s' "$p" | od -An -tu1 | tr -s ' \n' '  ' | sed 's/^ //; s/ $//')
                [ "$ids" = "$exp_ids" ] || echo "FAIL $fam $dt '$p': llama.cpp tokenizes as '$ids', mtc as '$exp_ids'"
            fi
            [ -n "$got" ] && [ "$got" = "$want" ] && echo "ok   $fam $dt '$p': llama.cpp = mtc generate: $got" ||
                echo "FAIL $fam $dt '$p': llama.cpp $got vs mtc $want"
        done
    done
done >"$D/res"
cat "$D/res"
grep -q FAIL "$D/res" && fail=1
[ "$(grep -c '^ok' "$D/res")" = 12 ] || bad "12 comparisons expected"
exit $fail
