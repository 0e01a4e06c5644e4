#!/bin/sh
# tests/ckpt/portable_cli.sh - a checkpoint carries its tokenizer: trained
# with GPT2BPETokenizer (tests/data/gpt2_tiny) or a HuggingFaceTokenizer
# tokenizer.json, the checkpoint folder is moved elsewhere and the original
# tokenizer files deleted, and `mtc generate --prompt` still gives the same
# greedy text as before the move; the metadata names no absolute path;
# resuming with the original files is accepted and with other files refused;
# an old checkpoint whose metadata names absolute paths still loads; `mtc
# import` of a Hugging Face folder with only tokenizer.json, or only
# vocab.json + merges.txt, gives a checkpoint whose --prompt text works.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/tok" "$D/hftok"
cp "$MTC_SOURCE_DIR/tests/data/gpt2_tiny/vocab.json" "$MTC_SOURCE_DIR/tests/data/gpt2_tiny/merges.txt" "$D/tok/"
python3 "$MTC_SOURCE_DIR/tests/data/make_hf_tokenizer.py" --tiny "$D/hftok/tokenizer.json" || bad "make tokenizer.json"
i=0
while [ $i -lt 80 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 5)) times."
    i=$((i + 1))
done >"$D/text.txt"
B="--data-path $D/text.txt --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 4 --global-batch-size 8 --lr 1e-2 --lr-decay-iters 100 --train-iters 40 --log-interval 40 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1"
G="--prompt the --max-new-tokens 12 --temperature 0"
# shellcheck disable=SC2086
"$MTC" train $B --tokenizer-type GPT2BPETokenizer --vocab-file "$D/tok/vocab.json" --merge-file "$D/tok/merges.txt" --save "$D/bpe" >"$D/t1.log" 2>&1 || { bad "train gpt2"; cat "$D/t1.log"; }
# shellcheck disable=SC2086
"$MTC" train $B --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/hftok/tokenizer.json" --save "$D/hf" >"$D/t2.log" 2>&1 || { bad "train hf"; cat "$D/t2.log"; }
for k in bpe hf; do
    # shellcheck disable=SC2086
    "$MTC" generate --load "$D/$k" $G >"$D/$k.before" 2>&1 || { bad "$k: generate"; cat "$D/$k.before"; }
done
M=$D/bpe/iter_0000040/metadata.json
if grep -q "$D" "$M"; then bad "metadata names an absolute path"; grep tokenizer "$M"; else ok "metadata names no absolute path"; fi
grep -q '"tokenizer":.*"GPT2BPETokenizer:vocab.json|merges.txt"' "$M" && ok "metadata names the copies" || { bad "tokenizer entry"; grep tokenizer "$M"; }
cmp -s "$D/bpe/iter_0000040/vocab.json" "$D/tok/vocab.json" && cmp -s "$D/bpe/iter_0000040/merges.txt" "$D/tok/merges.txt" &&
    ok "vocab.json and merges.txt copied unchanged" || bad "copies differ"
[ -f "$D/hf/iter_0000040/tokenizer.json" ] && ok "tokenizer.json copied" || bad "tokenizer.json not copied"

# resume: the original files are the same tokenizer, other files are not
# shellcheck disable=SC2086
"$MTC" train $B --train-iters 42 --tokenizer-type GPT2BPETokenizer --vocab-file "$D/tok/vocab.json" --merge-file "$D/tok/merges.txt" --load "$D/bpe" --save "$D/bpe2" >"$D/t3.log" 2>&1 &&
    ok "resume with the original files" || { bad "resume refused"; tail -3 "$D/t3.log"; }
mkdir "$D/tok2" && cp "$D/tok/vocab.json" "$D/tok2/" && head -n 20 "$D/tok/merges.txt" >"$D/tok2/merges.txt"
# shellcheck disable=SC2086
"$MTC" train $B --train-iters 42 --tokenizer-type GPT2BPETokenizer --vocab-file "$D/tok2/vocab.json" --merge-file "$D/tok2/merges.txt" --load "$D/bpe" >"$D/t4.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "different tokenizer" "$D/t4.log" && ok "resume with other merges refused" || { bad "other merges: exit $st"; tail -3 "$D/t4.log"; }

# move the checkpoints, delete the original files
mkdir "$D/elsewhere"
mv "$D/bpe" "$D/hf" "$D/elsewhere/"
rm -rf "$D/tok" "$D/hftok"
for k in bpe hf; do
    # shellcheck disable=SC2086
    "$MTC" generate --load "$D/elsewhere/$k" $G >"$D/$k.after" 2>&1 || { bad "$k: generate after the move"; cat "$D/$k.after"; }
    if cmp -s "$D/$k.before" "$D/$k.after" && grep -q '^the' "$D/$k.after"; then ok "$k: same text after the move: $(cat "$D/$k.after")"; else
        bad "$k: text differs"; cat "$D/$k.before" "$D/$k.after"; fi
done

# an old checkpoint: its metadata names the files by absolute path
mkdir -p "$D/old/tok"
cp "$D/elsewhere/bpe/iter_0000040/vocab.json" "$D/elsewhere/bpe/iter_0000040/merges.txt" "$D/old/tok/"
cp -r "$D/elsewhere/bpe" "$D/old/ckpt"
rm "$D/old/ckpt/iter_0000040/vocab.json" "$D/old/ckpt/iter_0000040/merges.txt"
python3 - "$D/old/ckpt/iter_0000040" "$D/old/tok" <<'EOF' || bad "rewrite old metadata"
import sys
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    return c ^ 0xffffffff
d, t = sys.argv[1], sys.argv[2]
s = open(d + "/metadata.json", "rb").read()
s = s.replace(b'"GPT2BPETokenizer:vocab.json|merges.txt"',
              ('"GPT2BPETokenizer:%s/vocab.json|%s/merges.txt"' % (t, t)).encode())
open(d + "/metadata.json", "wb").write(s)
open(d + "/metadata.json.crc32c", "w").write("%08x\n" % crc32c(s))
EOF
# shellcheck disable=SC2086
"$MTC" generate --load "$D/old/ckpt" $G >"$D/old.out" 2>&1 && cmp -s "$D/old.out" "$D/bpe.before" &&
    ok "an old checkpoint naming absolute paths loads" || { bad "old checkpoint"; cat "$D/old.out"; }

# import: a Hugging Face folder with only the tokenizer's native files
"$MTC" export --load "$D/elsewhere/bpe" --format safetensors --out "$D/hfexp" >"$D/e.log" 2>&1 || { bad "export"; cat "$D/e.log"; }
[ "$(cat "$D/hfexp/mtc_tokenizer.txt")" = "GPT2BPETokenizer:vocab.json|merges.txt" ] &&
    ok "the export's mtc_tokenizer.txt names its own files" || { bad "export mtc_tokenizer.txt"; cat "$D/hfexp/mtc_tokenizer.txt"; }
cp -r "$D/hfexp" "$D/hfexp3"
rm -f "$D/hfexp/mtc_tokenizer.txt"
cp -r "$D/hfexp" "$D/hfexp2"
rm -f "$D/hfexp2/tokenizer.json" "$D/hfexp2/tokenizer_config.json"
for k in hfexp hfexp2 hfexp3; do
    "$MTC" import --load "$D/$k" --save "$D/imp_$k" >"$D/i.log" 2>&1 || { bad "$k: import"; cat "$D/i.log"; }
    rm -rf "$D/$k"
    # shellcheck disable=SC2086
    "$MTC" generate --load "$D/imp_$k" $G >"$D/imp_$k.out" 2>&1 && cmp -s "$D/imp_$k.out" "$D/bpe.before" &&
        ok "$k: imported with its tokenizer, same text: $(grep -o '"tokenizer":[^|]*' "$D/imp_$k/iter_0000000/metadata.json")" ||
        { bad "$k: imported model's text"; cat "$D/imp_$k.out" "$D/i.log"; }
done
# a folder whose tokenizer.model is not a SentencePiece model: imported without a tokenizer,
# said so (a real one is imported with it: tests/ckpt/spm_export_cli.sh)
"$MTC" export --load "$D/elsewhere/bpe" --format safetensors --out "$D/spm" >/dev/null 2>&1 || bad "export spm"
rm -f "$D/spm/mtc_tokenizer.txt" "$D/spm/tokenizer.json" "$D/spm/tokenizer_config.json" "$D/spm/vocab.json" "$D/spm/merges.txt"
printf 'not read' >"$D/spm/tokenizer.model"
"$MTC" import --load "$D/spm" --save "$D/imp_spm" >"$D/i.log" 2>&1 || { bad "spm import"; cat "$D/i.log"; }
grep -q "its tokenizer is not imported: .*tokenizer.model" "$D/i.log" && ok "a broken tokenizer.model: $(grep note "$D/i.log" | cut -c1-120)..." ||
    { bad "no note on the broken tokenizer.model"; cat "$D/i.log"; }
"$MTC" generate --load "$D/imp_spm" --prompt the >/dev/null 2>&1
[ $? -eq 2 ] && "$MTC" generate --load "$D/imp_spm" --prompt-ids "1 2" --max-new-tokens 3 >/dev/null 2>&1 &&
    ok "its model takes --prompt-ids, refuses --prompt" || bad "spm model prompts"

# mtc preprocess writes PREFIX.tokenizer: a model trained on the dataset takes --prompt text
mkdir -p "$D/tok"
cp "$MTC_SOURCE_DIR/tests/data/gpt2_tiny/vocab.json" "$MTC_SOURCE_DIR/tests/data/gpt2_tiny/merges.txt" "$D/tok/"
python3 -c 'import json, sys
for l in open(sys.argv[1]): print(json.dumps({"text": l}))' "$D/text.txt" >"$D/docs.jsonl"
"$MTC" preprocess --input "$D/docs.jsonl" --output-prefix "$D/ds" --tokenizer-type GPT2BPETokenizer --vocab-file "$D/tok/vocab.json" --merge-file "$D/tok/merges.txt" --append-eod >"$D/p.log" 2>&1 || { bad "preprocess"; cat "$D/p.log"; }
[ -f "$D/ds_text_document.tokenizer" ] && ok "preprocess wrote ds_text_document.tokenizer" || bad "no PREFIX.tokenizer"
P=$(echo "$B" | sed "s|--data-path $D/text.txt|--data-path $D/ds_text_document|")
# shellcheck disable=SC2086
"$MTC" train $P --save "$D/ds_ckpt" >"$D/t5.log" 2>&1 || { bad "train on the dataset"; cat "$D/t5.log"; }
grep -q "tokenizer GPT2BPETokenizer" "$D/t5.log" && ok "banner names the dataset's tokenizer" || { bad "banner"; grep "data:" "$D/t5.log"; }
# shellcheck disable=SC2086
"$MTC" generate --load "$D/ds_ckpt" $G >"$D/ds.out" 2>&1 && grep -q '^the' "$D/ds.out" &&
    ok "the dataset's model takes --prompt text: $(head -n 1 "$D/ds.out")" || { bad "dataset model generate"; cat "$D/ds.out"; }
rm "$D/ds_text_document.tokenizer"
# shellcheck disable=SC2086
"$MTC" train $P --train-iters 2 >"$D/t6.log" 2>&1 || { bad "train on ids"; cat "$D/t6.log"; }
grep -q "no tokenizer, so the model will take --prompt-ids only" "$D/t6.log" && ok "banner: ids with no tokenizer" ||
    { bad "banner without tokenizer"; grep "data:" "$D/t6.log"; }
exit $fail
