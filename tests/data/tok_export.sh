#!/bin/sh
# tests/data/tok_export.sh - SentencePiece and TikTokenizer models keep their
# tokenizer through `mtc export --format safetensors`, checked with Hugging
# Face's own JavaScript tokenizers (npm @huggingface/tokenizers, through
# tests/ckpt/hf_tokenizer.mjs): on the edge cases and 1500 fortunes,
#   1. a Llama-style SentencePiece model (spm_train: BPE, byte fallback,
#      identity, no white space removal) trained on with Llama2Tokenizer:
#      tokenizer.json encodes to mtc's ids (== sentencepiece's, tok_spm.sh)
#      and decodes back (but for texts of its control pieces, see below);
#   2. a unigram model: the export says in one note why no tokenizer.json
#      is written, and writes none;
#   3. TikTokenizer (v1 and v2, 64 special tokens, a 20000-entry vocabulary
#      from js-tiktoken's cl100k_base as tok_tiktoken.sh makes it): the same;
#   4. GGUF, read by llama.cpp's own tokenizer (npm node-llama-cpp, through
#      llama_cpp_tokenize.mjs): the SentencePiece model as a "llama" (SPM)
#      vocabulary and TikTokenizer v2 as BPE with the "tekken" pre-tokenizer
#      encode to mtc's ids (texts holding special token texts left out:
#      Megatron matches them, a text-only tokenize does not); v1 gets a note.
# npm packages go to a cache under the build folder; skipped (exit 77) only
# when npm cannot reach its registry.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
BUILD=${MTC_BUILD_DIR:?build folder}
PY=/usr/bin/python3
FORTUNES=/usr/share/games/fortunes
cache="$BUILD/npm-cache/tokexport"
mods="$cache/node_modules"
work="$BUILD/tok-export-test"
rm -rf "$work" && mkdir -p "$cache" "$work"
if [ ! -f "$mods/@huggingface/tokenizers/package.json" ] || [ ! -f "$mods/js-tiktoken/package.json" ] ||
    [ ! -f "$mods/node-llama-cpp/package.json" ]; then
    if ! command -v npm >/dev/null 2>&1 || ! timeout 60 npm ping >/dev/null 2>&1; then
        echo "SKIP: npm cannot reach its registry (or is not installed); nothing was compared"
        exit 77
    fi
    [ -f "$cache/package.json" ] || echo '{"name": "mtc-test-cache", "private": true}' >"$cache/package.json"
    (cd "$cache" && timeout 600 npm install --omit=optional --ignore-scripts --no-audit --no-fund \
        @huggingface/tokenizers@0.2.0 js-tiktoken@1.0.21 node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1) \
        >"$work/npm.log" 2>&1 || { echo "FAIL: npm install (registry reachable):"; tail -5 "$work/npm.log"; exit 1; }
fi
fail=0
cat "$SRC/tests/data/tok_edge_cases.jsonl" "$SRC/tests/data/tok_edge_cases_tt.jsonl" >"$work/edge.jsonl"
$PY "$SRC/tests/data/spm_cases.py" "$work/edge.jsonl" "$FORTUNES" 1500 \
    "$work/cases.jsonl" "$work/lines.txt" "$work/corpus.txt" || exit 1
head -c 400000 "$work/corpus.txt" >"$work/train.txt"
head -c 20000 "$work/corpus.txt" >"$work/small.txt"
B="--data-path $work/small.txt --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 2 --lr 3e-3 --train-iters 2 --log-interval 1 --eval-iters 0 --threads 1"

# check NAME CASES TOKENIZER-FLAGS...: train, export, Tokenizers.js ids == mtc tokenize ids
check() {
    name=$1 cases=$2
    shift 2
    # shellcheck disable=SC2086
    "$MTC" train $B "$@" --save "$work/ck_$name" >"$work/train_$name.log" 2>&1 ||
        { echo "FAIL: $name train: $(tail -2 "$work/train_$name.log")"; fail=1; return; }
    "$MTC" export --load "$work/ck_$name" --format safetensors --out "$work/hf_$name" >"$work/export_$name.log" 2>&1 ||
        { echo "FAIL: $name export: $(cat "$work/export_$name.log")"; fail=1; return; }
    "$MTC" tokenize "$@" --json-lines --input "$cases" >"$work/mtc_$name.txt" || { fail=1; return; }
    node "$SRC/tests/ckpt/hf_tokenizer.mjs" "$mods" "$work/hf_$name" "$cases" "$work/js_$name.txt" ||
        { echo "FAIL: $name: Tokenizers.js does not decode its ids back"; fail=1; }
    cmp -s "$work/js_$name.txt" "$work/mtc_$name.txt" || {
        echo "FAIL: $name: Tokenizers.js ids on the exported tokenizer.json differ from mtc's"
        awk 'NR == FNR { a[FNR] = $0; next } a[FNR] != $0 { print "case " FNR ": mtc " substr(a[FNR], 1, 100) "\n        js " substr($0, 1, 100); exit }' \
            "$work/mtc_$name.txt" "$work/js_$name.txt"
        fail=1
    }
}

# 1. Llama-style SentencePiece
spm_train --input="$work/train.txt" --model_prefix="$work/llama" --vocab_size=600 --model_type=bpe \
    --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
    --minloglevel=2 >"$work/spm.log" 2>&1 || { echo "FAIL: spm_train"; cat "$work/spm.log"; exit 1; }
# The model's control pieces (<unk> <s> </s>) are added special tokens in
# tokenizer.json, as Hugging Face's Llama converter makes them, so Tokenizers.js
# matches their text inside a document, which SentencePiece never does: the
# cases holding such a text are left out here (and counted).
grep -v '<unk>\|<s>\|</s>' "$work/cases.jsonl" >"$work/cases_spm.jsonl"
n_out=$(($(wc -l <"$work/cases.jsonl") - $(wc -l <"$work/cases_spm.jsonl")))
[ "$n_out" -le 3 ] || { echo "FAIL: $n_out cases hold control piece texts (expected a few)"; fail=1; }
check spm "$work/cases_spm.jsonl" --tokenizer-type Llama2Tokenizer --tokenizer-model "$work/llama.model"

# 2. unigram: a note, no tokenizer.json
spm_train --input="$work/train.txt" --model_prefix="$work/uni" --vocab_size=600 --model_type=unigram \
    --minloglevel=2 >"$work/spm.log" 2>&1 || { echo "FAIL: spm_train"; exit 1; }
"$MTC" train $B --tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/uni.model" --save "$work/ck_uni" \
    >/dev/null 2>&1 && "$MTC" export --load "$work/ck_uni" --format safetensors --out "$work/hf_uni" \
    >"$work/export_uni.log" 2>&1 || { echo "FAIL: unigram export: $(cat "$work/export_uni.log")"; fail=1; }
grep -q "note: .*not a BPE model" "$work/export_uni.log" && [ ! -f "$work/hf_uni/tokenizer.json" ] ||
    { echo "FAIL: unigram export: no note or a tokenizer.json: $(cat "$work/export_uni.log")"; fail=1; }

# 3. TikTokenizer
node "$SRC/tests/data/tiktoken_ref.js" "$mods" "$work/cases.jsonl" 20000 64 "$work/tt.json" \
    "$work/tt.v1.ref" "$work/tt.v2.ref" >/dev/null || exit 1
for pat in v1 v2; do
    check "tt_$pat" "$work/cases.jsonl" --tokenizer-type TikTokenizer --tokenizer-model "$work/tt.json" --vocab-size 20064 \
        --tiktoken-num-special-tokens 64 --tiktoken-pattern $pat
    cmp -s "$work/mtc_tt_$pat.txt" "$work/tt.$pat.ref" || { echo "FAIL: tiktoken $pat ids differ from js-tiktoken's"; fail=1; }
done

# 4. GGUF in llama.cpp
LL="--normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights --disable-bias-linear"
grep -v '<unk>\|<s>\|</s>\|<mask>\|<pad>\|<cls>\|<sep>\|<SPECIAL_' "$work/cases.jsonl" >"$work/cases_text.jsonl"
# gguf NAME CASES EXPECTED-IDS TOKENIZER-FLAGS...
gguf() {
    name=$1 cases=$2 want=$3
    shift 3
    # shellcheck disable=SC2086
    "$MTC" train $B $LL "$@" --save "$work/g_$name" >"$work/gtrain_$name.log" 2>&1 &&
        "$MTC" export --load "$work/g_$name" --format gguf --out "$work/$name.gguf" >"$work/gexport_$name.log" 2>&1 ||
        { echo "FAIL: $name gguf: $(tail -2 "$work/gtrain_$name.log" "$work/gexport_$name.log")"; fail=1; return; }
    node "$SRC/tests/data/llama_cpp_tokenize.mjs" "$mods" "$work/$name.gguf" "$cases" "$work/lc_$name.txt" \
        >"$work/lc_$name.log" 2>&1 || { echo "FAIL: $name: llama.cpp: $(cat "$work/lc_$name.log")"; fail=1; return; }
    grep -q " 0 detokenize differences" "$work/lc_$name.log" || { echo "FAIL: $name: $(cat "$work/lc_$name.log")"; fail=1; }
    "$MTC" tokenize "$@" --json-lines --input "$cases" >"$work/gm_$name.txt"
    cmp -s "$work/gm_$name.txt" "$work/lc_$name.txt" || {
        echo "FAIL: $name: llama.cpp's ids on the exported GGUF differ from mtc's"
        awk 'NR == FNR { a[FNR] = $0; next } a[FNR] != $0 { print "case " FNR ": mtc " substr(a[FNR], 1, 100) "\n        llama.cpp " substr($0, 1, 100); exit }' \
            "$work/gm_$name.txt" "$work/lc_$name.txt"
        fail=1
    }
}
gguf spm "$work/cases.jsonl" "" --tokenizer-type Llama2Tokenizer --tokenizer-model "$work/llama.model"
gguf tt "$work/cases_text.jsonl" "" --tokenizer-type TikTokenizer --tokenizer-model "$work/tt.json" --vocab-size 20064 \
    --tiktoken-num-special-tokens 64
"$MTC" train $B $LL --tokenizer-type TikTokenizer --tokenizer-model "$work/tt.json" --vocab-size 20064 \
    --tiktoken-num-special-tokens 64 --tiktoken-pattern v1 --save "$work/g_v1" >/dev/null 2>&1
"$MTC" export --load "$work/g_v1" --format gguf --out "$work/v1.gguf" >/dev/null 2>"$work/v1.err" &&
    grep -q "note: llama.cpp has no pre-tokenizer for TikTokenizer's v1" "$work/v1.err" ||
    { echo "FAIL: v1 GGUF export without its note: $(cat "$work/v1.err")"; fail=1; }

[ $fail -eq 0 ] && echo "tok_export: ok ($(wc -l <"$work/cases.jsonl") cases: SentencePiece BPE ($n_out with control piece texts left out), TikTokenizer v1 and v2; GGUF in llama.cpp: SentencePiece, TikTokenizer v2)"
exit $fail
