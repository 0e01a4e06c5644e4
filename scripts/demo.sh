#!/bin/sh
# The main job behind `make run`: train a char-level GPT (4 layers, hidden
# 128, 0.8M parameters) on the text of Debian's `fortunes` package (about
# 2.5 MB of English), printing Megatron's log line as the loss goes down,
# then sample text from the saved model and say how to go on.
# Chosen by measuring (figures in the report of issue 16, taken on a loaded
# 2-core machine): one rank using both cores runs an iteration about 3x
# faster than the tp=2 x pp=2 layout on 4 thread-ranks sharing those two
# cores, so in the same ~3 minutes it sees 3x the text, and 1600 iterations
# of 16 x 128 characters give samples with real words, the "%" separators
# and "-- Author" lines (on the idle machine: 1500 iterations trained in
# 160 s, 2m41s for the whole demo; 2000 gave no visibly better sample). The parallel layouts train the same model
# (tests/parity): DEMO_LAYOUT picks one.
# Usage: scripts/demo.sh [path/to/mtc]
# Environment: DEMO_DATA (any text file or folder), DEMO_ITERS (default 1600),
# DEMO_LAYOUT (default "--world-size 1"; e.g. "--world-size 4
# --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", add --vpp 2
# for the interleaved schedule).
set -e
MTC=${1:-build/mtc}
DATA=${DEMO_DATA:-/usr/share/games/fortunes}
ITERS=${DEMO_ITERS:-1600}
LAYOUT=${DEMO_LAYOUT:-"--world-size 1"}
OUT=$(dirname "$MTC")/fortunes-gpt
if [ ! -e "$DATA" ]; then
    echo "demo: $DATA not found (apt-get install fortunes, or set DEMO_DATA to a text file or folder)" >&2
    exit 1
fi
rm -rf "$OUT"
echo "== training a char-level GPT (4 layers, hidden 128, 0.8M parameters) on $DATA, $LAYOUT"
start=$(date +%s)
# shellcheck disable=SC2086
"$MTC" train $LAYOUT --data-path "$DATA" --tokenizer-type CharLevelTokenizer \
    --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
    --micro-batch-size 8 --global-batch-size 16 --train-iters "$ITERS" \
    --lr 3e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 30 \
    --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0 \
    --log-interval 100 --eval-interval 500 --eval-iters 4 --split 98,2,0 \
    --save "$OUT"
echo "== trained in $(($(date +%s) - start)) s"
echo
echo "== a sample from the trained model (mtc generate --load $OUT --prompt \"The \" --top-k 10 --temperature 0.8)"
"$MTC" generate --load "$OUT" --prompt "The " --max-new-tokens 400 --top-k 10 --temperature 0.8
cat <<EOT

== to go on
  $MTC generate --load $OUT --prompt "Q: " --temperature 0.7      # more samples, your prompt
  $MTC export --load $OUT --format gguf --out fortunes.gguf        # for llama.cpp
  $MTC export --load $OUT --format safetensors --out fortunes-hf   # Hugging Face folder
  DEMO_LAYOUT="--world-size 4 --tp 2 --pp 2" scripts/demo.sh $MTC
      # the same model on 4 rank-threads, tensor x pipeline parallel (slower on 2 cores)
  $MTC ranks --world-size 4 --tp 2 --pp 2; $MTC schedule --pp 2 --microbatches 4
      # that layout's process groups and 1F1B order
EOT
