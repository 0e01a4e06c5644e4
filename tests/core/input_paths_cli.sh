#!/bin/sh
# tests/core/input_paths_cli.sh - inputs that are FIFOs or devices are
# refused at once with exit status 2 (a FIFO's open would wait for a writer
# forever, /dev/zero would read forever), and `mtc preprocess` outputs
# follow the output-path rules (a FIFO, device or directory there is
# refused before any work; a symlink there is replaced, never written
# through). Every
# case runs under `timeout`: a hang fails the test instead of stalling it.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
mkfifo "$D/fifo"
echo '{"text": "hello world"}' >"$D/in.jsonl"
echo "hello" >"$D/in.txt"

# refused NAME PATTERN ARGS...: exit 2 within 20 s, stderr matching PATTERN, the FIFO kept
refused() {
    name=$1 pat=$2; shift 2
    timeout 20 "$MTC" "$@" </dev/null >"$D/out" 2>"$D/err"; st=$?
    if [ $st -eq 124 ]; then bad "$name: hung (killed after 20 s)"; return; fi
    if [ $st -ne 2 ] || ! grep -q -- "$pat" "$D/err" || [ ! -p "$D/fifo" ]; then
        bad "$name: status $st"; cat "$D/err"; return; fi
    ok "$name: $(tail -1 "$D/err")"
}
F="is a FIFO, not a regular file"
refused "generate --load FIFO" "$F" generate --load "$D/fifo" --prompt 1
refused "generate --load /dev/zero" "is a character device, not a regular file" generate --load /dev/zero --prompt 1
refused "export --load FIFO" "$F" export --load "$D/fifo" --format safetensors --out "$D/hf"
refused "tokenize --input FIFO" "$F" tokenize --tokenizer-type ByteLevelTokenizer --input "$D/fifo"
refused "tokenize --vocab-file FIFO" "vocab-file" tokenize --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$D/fifo" --merge-file "$D/fifo" --input "$D/in.txt"
refused "tokenize --tokenizer-model FIFO" "tokenizer-model" tokenize --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$D/fifo" --input "$D/in.txt"
refused "preprocess --input FIFO" "$F" preprocess --input "$D/fifo" --output-prefix "$D/p" \
    --tokenizer-type ByteLevelTokenizer
refused "plot of a FIFO" "$F" plot "$D/fifo" --svg "$D/x.svg"
refused "train --data-path FIFO" "data-path $D/fifo is a FIFO, not a regular file" train --data-path "$D/fifo" --train-iters 1
refused "plan --machine FIFO" "$F" plan --world-size 8 --machine "$D/fifo"
refused "schedule --from-trace FIFO" "$F" schedule --from-trace "$D/fifo"
refused "schedule --from-trace /dev/zero" "is a character device, not a regular file" schedule --from-trace /dev/zero
# the SentencePiece and tiktoken readers once opened theirs blocking (hung)
refused "tokenize SentencePiece --tokenizer-model FIFO" "$F" tokenize --tokenizer-type SentencePieceTokenizer \
    --tokenizer-model "$D/fifo" --input "$D/in.txt"
refused "train TikTokenizer --tokenizer-model /dev/zero" "is a character device" train --mock-data \
    --tokenizer-type TikTokenizer --tokenizer-model /dev/zero --train-iters 1
# a Megatron prefix whose .bin is a FIFO
"$MTC" preprocess --input "$D/in.jsonl" --output-prefix "$D/pre" --tokenizer-type ByteLevelTokenizer >"$D/out" 2>&1 ||
    { bad "preprocess"; cat "$D/out"; }
rm -f "$D/pre_text_document.bin" && ln -s "$D/fifo" "$D/pre_text_document.bin"
refused "train --data-path PREFIX with a FIFO .bin" "document.bin: not a regular file" train --data-path "$D/pre_text_document" \
    --tokenizer-type ByteLevelTokenizer --train-iters 1
# an HF folder's tokenizer file that is a FIFO: refused, not skipped (import went on without it)
"$MTC" train --mock-data --vocab-size 64 --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 \
    --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --eval-iters 0 --threads 1 --save "$D/ck" >"$D/out" 2>&1 &&
    "$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" >"$D/out" 2>&1 || { bad "export for import"; cat "$D/out"; }
rm -f "$D/hf/mtc_tokenizer.txt" && ln -s "$D/fifo" "$D/hf/mtc_tokenizer.txt"
refused "import of a folder whose mtc_tokenizer.txt is a FIFO" "mtc_tokenizer.txt is a FIFO" import --load "$D/hf" --save "$D/imp"

# preprocess outputs: PREFIX_text_document.{bin,idx}
P="$D/out_text_document"
mv "$D/fifo" "$P.bin"
timeout 20 "$MTC" preprocess --input "$D/in.jsonl" --output-prefix "$D/out" --tokenizer-type ByteLevelTokenizer \
    >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && [ -p "$P.bin" ] && [ ! -e "$P.idx" ] && grep -q "is a FIFO, not a file mtc may replace" "$D/err" &&
    ok "preprocess output onto a FIFO refused, FIFO kept" || { bad "preprocess FIFO output (status $st)"; cat "$D/err"; }
rm -f "$P.bin"
ln -s /dev/null "$P.idx"
timeout 20 "$MTC" preprocess --input "$D/in.jsonl" --output-prefix "$D/out" --tokenizer-type ByteLevelTokenizer \
    >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 0 ] && [ -f "$P.idx" ] && [ ! -L "$P.idx" ] && [ -c /dev/null ] &&
    ok "preprocess output at a symlink to a device replaces the link, the device untouched" || { bad "preprocess device link (status $st)"; cat "$D/err"; }
rm -f "$P.idx" "$P.bin"
mkdir "$P.bin"
timeout 20 "$MTC" preprocess --input "$D/in.jsonl" --output-prefix "$D/out" --tokenizer-type ByteLevelTokenizer \
    >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && [ -d "$P.bin" ] && grep -q "is a directory" "$D/err" &&
    ok "preprocess output onto a directory refused before work" || { bad "preprocess dir output (status $st)"; cat "$D/err"; }
rmdir "$P.bin"
: >"$D/real.idx"
ln -s "$D/real.idx" "$P.idx"
timeout 20 "$MTC" preprocess --input "$D/in.jsonl" --output-prefix "$D/out" --tokenizer-type ByteLevelTokenizer \
    >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 0 ] && [ ! -L "$P.idx" ] && [ -s "$P.idx" ] && [ ! -s "$D/real.idx" ] && [ -s "$P.bin" ] &&
    ok "preprocess output at a symlink replaces the link, its target untouched" || { bad "preprocess symlink (status $st)"; cat "$D/err"; }
# an empty --output-prefix would write _text_document.bin into the working folder: refused
case $MTC in /*) A=$MTC ;; *) A=$(pwd)/$MTC ;; esac
(cd "$D" && mkdir -p empty && cd empty && timeout 20 "$A" preprocess --input "$D/in.jsonl" --output-prefix "" \
    --tokenizer-type ByteLevelTokenizer >"$D/out" 2>"$D/err"); st=$?
[ $st -eq 2 ] && grep -q "output-prefix is empty" "$D/err" && [ -z "$(ls -A "$D/empty")" ] &&
    ok "preprocess --output-prefix \"\" refused, nothing written: $(cat "$D/err")" ||
    { bad "empty output prefix (status $st)"; cat "$D/err"; ls -A "$D/empty"; }
[ -z "$(ls -A "$D" | grep '\.tmp')" ] && ok "no temporary files left" || bad "temporary files left: $(ls -A "$D")"
exit $fail
