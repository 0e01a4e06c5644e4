#!/bin/sh
# bench/fp8.sh - what each fp8 recipe does to the fortunes demo model
# (scripts/demo.sh's char GPT: 4 layers, hidden 128, 4 heads, seq 128, micro
# batch 8, global batch 16) against its bf16 run: ITERS iterations (600) of
# bf16 and of delayed (amax history 1024, max: Megatron's Llama-3 fp8
# example), tensorwise, mxfp8 and blockwise, all --fp8-format hybrid.
#
#   per run: the final validation loss (eval at the last iteration, 8
#   batches), its gap to bf16, the values clipped at the format's maximum
#   over the run (inputs / weights / gradients, from --metrics), the median
#   step time of the logged intervals after the first, and step / bf16's.
#
# The fp8 step pays for the emulation (one quantize-dequantize pass per GEMM
# operand, amax passes, the block scales); the GEMMs are the bf16 run's fp32
# GEMMs, so the ratio is the quantization's cost, not an fp8 speed.
# usage: bench/fp8.sh [MTC]   env: ITERS (600), DATA (/usr/share/games/fortunes), THREADS (2)
set -eu
MTC=${1:-build/mtc}
ITERS=${ITERS:-600}
DATA=${DATA:-/usr/share/games/fortunes}
THREADS=${THREADS:-2}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
[ -e "$DATA" ] || { echo "bench/fp8.sh: $DATA not found (apt-get install fortunes, or DATA=file)" >&2; exit 1; }
M="--data-path $DATA --tokenizer-type CharLevelTokenizer --num-layers 4 --hidden-size 128
--num-attention-heads 4 --seq-length 128 --micro-batch-size 8 --global-batch-size 16
--train-iters $ITERS --lr 3e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 30
--weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0 --log-interval 50
--eval-interval $ITERS --eval-iters 8 --split 98,2,0 --threads $THREADS --bf16 --seed 1234"
run() { # NAME ARGS...
    n=$1
    shift
    "$MTC" train $M "$@" --metrics "$D/$n.jsonl" >"$D/$n.log" 2>&1 || { echo "$n failed:"; tail -3 "$D/$n.log"; exit 1; }
}
# field NAME KEY: the last value of KEY; sum NAME KEY; median step ms after the first record
field() { grep -o "\"$2\": [0-9.e+-]*" "$D/$1.jsonl" | tail -1 | awk '{ print $2 }'; }
sum() { grep -o "\"$2\": [0-9.e+-]*" "$D/$1.jsonl" | awk '{ s += $2 } END { printf "%.0f", s }'; }
median() { grep -o '"elapsed_ms": [0-9.]*' "$D/$1.jsonl" | awk 'NR > 1 { print $2 }' | sort -n |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
run bf16
run delayed --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max
run tensorwise --fp8-format hybrid --fp8-recipe tensorwise
run mxfp8 --fp8-format hybrid --fp8-recipe mxfp8
run blockwise --fp8-format hybrid --fp8-recipe blockwise
vb=$(field bf16 val_loss) tb=$(median bf16)
echo "fortunes demo model, $ITERS iterations, $THREADS threads, fp8 format hybrid"
printf '%-11s %10s %8s %26s %9s %7s\n' run "val loss" "gap" "clipped in/weight/grad" "step ms" "x bf16"
for n in bf16 delayed tensorwise mxfp8 blockwise; do
    v=$(field $n val_loss) t=$(median $n)
    clip="-"
    [ $n != bf16 ] && clip="$(sum $n fp8_clipped_input)/$(sum $n fp8_clipped_weight)/$(sum $n fp8_clipped_grad)"
    printf '%-11s %10.5f %+7.2f%% %26s %9.1f %7.2f\n' $n "$v" "$(echo "$v $vb" | awk '{ print 100 * ($1 - $2) / $2 }')" \
        "$clip" "$t" "$(echo "$t $tb" | awk '{ print $1 / $2 }')"
done
