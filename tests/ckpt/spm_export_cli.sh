#!/bin/sh
# tests/ckpt/spm_export_cli.sh - a Llama-style model trained with a
# SentencePiece tokenizer (Llama2Tokenizer on a model spm_train makes: BPE,
# byte fallback, identity normalisation, white space kept, as
# tests/data/tok_export.sh) keeps that tokenizer in every export and back:
#   1. the checkpoint holds tokenizer.model: moved away from the original
#      .model (deleted), it still generates the same text;
#   2. safetensors: the folder holds tokenizer.model and a tokenizer.json
#      that transformers.js' AutoTokenizer loads without a warning and that
#      gives mtc's ids for each prompt;
#   3. ONNX: transformers.js' text-generation pipeline (its tokenizer on the
#      same tokenizer.json) continues each prompt as mtc generate;
#   4. GGUF: llama.cpp (npm node-llama-cpp) reads the "llama" (SPM)
#      vocabulary (pieces, scores, token types), tokenizes each prompt to
#      mtc's ids and continues greedily as mtc generate (fp32, fp16);
#   5. mtc import of the safetensors folder reads tokenizer.model (with or
#      without mtc_tokenizer.txt), copies it into the checkpoint, and the
#      imported model generates mtc's text after the folder is deleted.
# npm as in onnx_cli.sh (77 only without a registry); spm_train is Debian's
# sentencepiece package.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
command -v spm_train >/dev/null 2>&1 || { echo "FAIL: spm_train missing (apt-get install sentencepiece)"; exit 1; }
. "$MTC_SOURCE_DIR/tests/ckpt/onnx_lib.sh"
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times, café über 日本"
    i=$((i + 1))
done >"$D/text.txt"
cat /usr/share/games/fortunes/*.u8 /usr/share/games/fortunes/fortunes 2>/dev/null | head -c 150000 >"$D/corpus.txt"
cat "$D/text.txt" >>"$D/corpus.txt"
spm_train --input="$D/corpus.txt" --model_prefix="$D/sp" --vocab_size=500 --model_type=bpe \
    --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
    --minloglevel=2 >"$D/spm.log" 2>&1 || { echo "FAIL: spm_train"; cat "$D/spm.log"; exit 1; }
mkdir -p "$D/orig" && mv "$D/sp.model" "$D/orig/sp.model"
B="--data-path $D/text.txt --tokenizer-type Llama2Tokenizer --tokenizer-model $D/orig/sp.model --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 60 --log-interval 30 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA --save "$D/run/spm" >"$D/t.log" 2>&1 || { bad "train"; cat "$D/t.log"; }
PROMPTS="the quick|over the lazy|2 times, ca"
gen() { "$MTC" generate --load "$1" --prompt "$2" --max-new-tokens 12 --temperature 0 2>&1; }
echo "$PROMPTS" | tr '|' '\n' | while read -r p; do gen "$D/run/spm" "$p"; done >"$D/before.txt"
# 1. the checkpoint carries tokenizer.model
ls "$D"/run/spm/iter_*/tokenizer.model >/dev/null 2>&1 && cmp -s "$D"/run/spm/iter_*/tokenizer.model "$D/orig/sp.model" &&
    ok "the checkpoint holds a copy of the SentencePiece model" || bad "no tokenizer.model in the checkpoint"
mv "$D/run" "$D/moved" && mv "$D/orig" "$D/gone"
C=$D/moved/spm
echo "$PROMPTS" | tr '|' '\n' | while read -r p; do gen "$C" "$p"; done >"$D/after.txt"
cmp -s "$D/before.txt" "$D/after.txt" && ok "moved, the original .model gone: the same text ($(head -n 1 "$D/after.txt"))" ||
    { bad "the moved checkpoint generates otherwise"; cat "$D/before.txt" "$D/after.txt"; }
# 2. safetensors
H=$D/spm.hf
"$MTC" export --load "$C" --format safetensors --out "$H" >"$D/e.log" 2>&1 || { bad "export"; cat "$D/e.log"; }
for f in tokenizer.model tokenizer.json tokenizer_config.json config.json; do
    [ -f "$H/$f" ] || bad "safetensors: no $f"
done
cmp -s "$H/tokenizer.model" "$D/gone/sp.model" && ok "safetensors: tokenizer.model is the SentencePiece model" || bad "safetensors: tokenizer.model differs"
EOS=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eos_token_id"])' "$H/config.json")
check_config "spm safetensors" "$H" "$C" "$EOS" "$PROMPTS"
# 3. ONNX
"$MTC" export --load "$C" --format onnx --out "$D/spm.onnx" >"$D/e.log" 2>&1 || { bad "onnx export"; cat "$D/e.log"; }
check_onnx "spm onnx" "$D/spm.onnx" "$C" 12 "$PROMPTS"
# 4. GGUF in llama.cpp
npm_need "$CACHE" llama node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 --omit=optional
for dt in fp32 fp16; do
    "$MTC" export --load "$C" --format gguf --dtype $dt --out "$D/spm.$dt.gguf" >"$D/e.log" 2>&1 || { bad "gguf $dt export"; cat "$D/e.log"; }
done
(IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_greedy.mjs" "$CACHE/llama/node_modules" 12 "$D/spm.fp32.gguf,$D/spm.fp16.gguf" $PROMPTS) >"$D/l.out" 2>"$D/l.err" ||
    { bad "llama.cpp failed on the SentencePiece GGUF"; cat "$D/l.err"; }
for dt in fp32 fp16; do
    echo "$PROMPTS" | tr '|' '\n' | while IFS= read -r p; do
        line=$(awk -F '\t' -v m="$D/spm.$dt.gguf" -v p="$p" '$1 == m && $2 == p' "$D/l.out")
        ids=$(printf '%s' "$line" | cut -f3)
        got=$(printf '%s' "$line" | cut -f4)
        want_ids=$("$REF" "$C" ids "$p")
        want=$(gen "$C" "$p" | json_text)
        [ -n "$ids" ] && [ "$ids" = "$want_ids" ] && [ "$got" = "$want" ] &&
            echo "ok   spm gguf $dt '$p': llama.cpp's ids and greedy text = mtc's: $got" ||
            echo "FAIL spm gguf $dt '$p': llama.cpp '$ids' $got, mtc '$want_ids' $want"
    done
done >"$D/res"
cat "$D/res"
grep -q FAIL "$D/res" && fail=1
[ "$(grep -c '^ok' "$D/res")" = 6 ] || bad "6 llama.cpp comparisons expected"
# 5. import reads tokenizer.model, with and without mtc_tokenizer.txt
cp -r "$H" "$D/bare.hf" && rm -f "$D/bare.hf/mtc_tokenizer.txt"
for h in spm.hf bare.hf; do
    "$MTC" import --load "$D/$h" --save "$D/imp_$h" >"$D/i.log" 2>&1 || { bad "$h import"; cat "$D/i.log"; continue; }
    grep -q note "$D/i.log" && { bad "$h import: a note"; cat "$D/i.log"; }
    cmp -s "$D"/imp_$h/iter_*/tokenizer.model "$D/gone/sp.model" || bad "$h import: no copy of tokenizer.model in the checkpoint"
    rm -rf "${D:?}/$h"
    echo "$PROMPTS" | tr '|' '\n' | while read -r p; do gen "$D/imp_$h" "$p"; done >"$D/imp.txt"
    cmp -s "$D/before.txt" "$D/imp.txt" &&
        ok "$h: imported with its SentencePiece model, the folder deleted: mtc's text ($(grep -o '"tokenizer":[^,]*' "$D"/imp_$h/iter_*/metadata.json | cut -c1-60)...)" ||
        { bad "$h: the imported model's text differs"; cat "$D/imp.txt"; }
done
exit $fail
