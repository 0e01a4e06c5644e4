#!/bin/sh
# The main job behind `make run`: train a char-level GPT on the text of
# Debian's `fortunes` package (about 2.5 MB of English), printing Megatron's
# log line as the loss goes down, then sample text from the saved model.
# Trains on 4 thread-ranks with tensor and pipeline parallelism (tp=2 x
# pp=2: attention heads, MLP columns and the vocabulary split over 2 ranks,
# the 4 layers over 2 pipeline stages running Megatron's 1F1B schedule on 4
# microbatches per iteration), then samples serially from the gathered
# weights.
# A few minutes on 2 cores. Usage: scripts/demo.sh [path/to/mtc]
# Environment: DEMO_DATA (any text file or folder), DEMO_ITERS (default 1500),
# DEMO_LAYOUT (default "--world-size 4 --tensor-model-parallel-size 2
# --pipeline-model-parallel-size 2"; e.g. add --vpp 2 for the interleaved
# schedule, or use "--world-size 4 --tensor-model-parallel-size 2" for tp x dp).
set -e
MTC=${1:-build/mtc}
DATA=${DEMO_DATA:-/usr/share/games/fortunes}
ITERS=${DEMO_ITERS:-1500}
LAYOUT=${DEMO_LAYOUT:-"--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"}
OUT=$(dirname "$MTC")/fortunes-gpt.bin
if [ ! -e "$DATA" ]; then
    echo "demo: $DATA not found (apt-get install fortunes, or set DEMO_DATA to a text file or folder)" >&2
    exit 1
fi
echo "== training a char-level GPT (4 layers, hidden 128, 0.8M parameters) on $DATA, $LAYOUT"
# shellcheck disable=SC2086
"$MTC" train $LAYOUT --data-path "$DATA" --tokenizer-type char \
    --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
    --micro-batch-size 4 --global-batch-size 16 --train-iters "$ITERS" \
    --lr 2e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 30 \
    --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0 \
    --log-interval 50 --eval-interval 200 --eval-iters 4 --split 98,2,0 \
    --save "$OUT"
echo
echo "== a sample from the trained model (mtc generate --load $OUT --top-k 10 --temperature 0.8)"
"$MTC" generate --load "$OUT" --prompt "The " --max-new-tokens 400 --top-k 10 --temperature 0.8
