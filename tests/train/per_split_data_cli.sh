#!/bin/sh
# tests/train/per_split_data_cli.sh - Megatron's --train-data-path /
# --valid-data-path / --test-data-path (blend_per_split: each split reads
# every document of its own prefix or blend, indexed for its own size):
#  - training from --train-data-path A equals --data-path A --split 100,0,0
#    loss for loss (the same GPTDataset: all documents, the same size), and
#    a blend --train-data-path 0.5 A 0.5 B equals --data-path 0.5 A 0.5 B
#    --split 100,0,0;
#  - validation reads --valid-data-path B: with --lr 0 (the model stays as
#    initialised) and the validation size equal to the training size
#    (train-iters 4 x batch = (4/4 + 1) x 2 x batch), the validation loss of
#    2 batches is the mean of the first two training losses of
#    --data-path B --split 100,0,0 (the same samples of the same GPTDataset);
#  - Megatron's rules, one line and exit 2: with --data-path, --mock-data or
#    --split, and a valid path without a train path.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$SRC/tests/train/train_lib.sh"
V=$SRC/tests/data/gpt2_tiny
i=0
while [ $i -lt 200 ]; do
    echo "{\"text\": \"the quick brown fox jumps over the lazy dog $((i % 7)) times.\"}"
    i=$((i + 1))
done >"$D/a.jsonl"
i=0
while [ $i -lt 200 ]; do
    echo "{\"text\": \"a journey of a thousand miles begins with a single step, $((i % 5)) steps.\"}"
    i=$((i + 1))
done >"$D/b.jsonl"
for x in a b; do
    "$MTC" preprocess --input "$D/$x.jsonl" --json-keys text --output-prefix "$D/$x" --tokenizer-type GPT2BPETokenizer \
        --vocab-file "$V/vocab.json" --merge-file "$V/merges.txt" --append-eod --workers 1 >"$D/pre.log" 2>&1 ||
        { bad "preprocess $x"; cat "$D/pre.log"; }
done
A=$D/a_text_document B=$D/b_text_document
COMMON="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
 --micro-batch-size 2 --global-batch-size 4 --log-interval 1 --threads 1 --hidden-dropout 0 --attention-dropout 0
 --vocab-file $V/vocab.json --merge-file $V/merges.txt --train-iters 4 --eval-interval 4 --eval-iters 2"
losses() { grep -o "| lm loss: [0-9.E+-]*" "$1" | cut -d' ' -f4; }
run() { # NAME ARGS...
    name=$1
    shift
    # shellcheck disable=SC2086
    "$MTC" train $COMMON "$@" >"$D/$name.log" 2>&1 || { bad "$name: exit $?"; tail -n 3 "$D/$name.log"; }
    losses "$D/$name.log" >"$D/$name.txt"
}
run split --data-path "$A" --split 100,0,0
run per --train-data-path "$A"
[ "$(wc -l <"$D/per.txt")" -eq 4 ] && cmp -s "$D/per.txt" "$D/split.txt" &&
    ok "--train-data-path A = --data-path A --split 100,0,0: $(tr '\n' ' ' <"$D/per.txt")" ||
    { bad "train-data-path vs data-path"; paste "$D/per.txt" "$D/split.txt"; }
run bsplit --data-path 0.5 "$A" 0.5 "$B" --split 100,0,0
run bper --train-data-path 0.5 "$A" 0.5 "$B"
[ "$(wc -l <"$D/bper.txt")" -eq 4 ] && cmp -s "$D/bper.txt" "$D/bsplit.txt" &&
    ok "--train-data-path 0.5 A 0.5 B = the same blend with --split 100,0,0" ||
    { bad "blended train-data-path"; paste "$D/bper.txt" "$D/bsplit.txt"; }

run frozen --train-data-path "$A" --valid-data-path "$B" --lr 0
run onb --data-path "$B" --split 100,0,0 --lr 0
val=$(grep -o "validation loss at iteration 4 | lm loss value: [0-9.E+-]*" "$D/frozen.log" | awk '{ print $NF }')
mean=$(head -n 2 "$D/onb.txt" | awk '{ s += $1 } END { printf "%.6E", s / 2 }')
[ -n "$val" ] && awk -v a="$val" -v b="$mean" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2e-6 * b) }' &&
    ok "--valid-data-path B: validation loss $val = the mean of B's first two training batches $mean" ||
    { bad "valid-data-path: validation loss '$val', expected $mean"; grep -i "valid\|error" "$D/frozen.log" | head -n 3; }
grep -q "data: train: Megatron indexed dataset: .*a_text_document.bin.*; valid: Megatron indexed dataset: .*b_text_document.bin" "$D/frozen.log" &&
    ok "the banner names each split's data" || { bad "banner"; grep "data:" "$D/frozen.log"; }

refused "with --data-path" "exclude --data-path" --train-data-path "$A" --data-path "$B"
refused "with --mock-data" "exclude --mock-data" --train-data-path "$A" --mock-data
refused "with --split" "drop --split" --train-data-path "$A" --split 90,10,0
refused "valid without train" "need --train-data-path" --valid-data-path "$B"
refused "a missing prefix" "train-data-path: " --train-data-path "$D/nothing"
exit $fail
