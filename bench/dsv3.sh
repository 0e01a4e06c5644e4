#!/bin/sh
# bench/dsv3.sh [BUILD_DIR] - a small DeepSeek-V3-shaped model (RMSNorm,
# RoPE, SwiGLU, untied head, MoE with a shared expert, sigmoid routing with
# expert bias, first layer dense: --moe-layer-freq [0]*1+[1]*3) on pp 2 as
# two MPI processes: tokens/s and each rank's peak RSS for the even split
# (2|2) and the uneven one (--decoder-last-pipeline-num-layers 1: 3|1, the
# split that makes room for MTP on the last stage), each without and with
# one MTP depth. Speed is measured, not asserted (DESIGN.md 5).
set -eu
B=${1:-build}
MTC=$B/mtc
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
M="--mock-data --vocab-size 4096 --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 \
--micro-batch-size 2 --global-batch-size 16 --train-iters 8 --lr 1e-3 --log-interval 1 --eval-iters 0 --threads 1 \
--normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights --disable-bias-linear \
--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 256 \
--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-load-balancing-type none \
--moe-layer-freq [0]*1+[1]*3"
printf '%-16s %-5s %12s %12s %12s  %s\n' split mtp tokens/s "rank0 MB" "rank1 MB" "lm loss (last)"
for split in even uneven; do
    for mtp in 0 1; do
        extra=""
        [ $split = uneven ] && extra="--decoder-last-pipeline-num-layers 1"
        [ $mtp = 1 ] && extra="$extra --mtp-num-layers 1"
        "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $M --pp 2 $extra \
            --metrics "$D/m.jsonl" >"$D/log" 2>&1 || { echo "run failed: $split mtp $mtp"; tail -3 "$D/log"; exit 1; }
        # tokens/s: the mean over iterations 3.. (the first ones warm up)
        tps=$(awk -F'"tokens_per_s": ' 'NR > 2 { split($2, a, ","); s += a[1]; n++ } END { printf "%.0f", s / n }' "$D/m.jsonl")
        rss=$(tail -1 "$D/m.jsonl" | sed 's/.*"peak_rss_bytes": \[\([0-9]*\), \([0-9]*\)\].*/\1 \2/')
        loss=$(tail -1 "$D/m.jsonl" | sed 's/.*"lm_loss": \([0-9.e+-]*\),.*/\1/')
        set -- $rss
        printf '%-16s %-5s %12s %12.1f %12.1f  %s\n' "$([ $split = even ] && echo 'even 2|2' || echo 'uneven 3|1')" $mtp "$tps" \
            "$(echo "$1 / 1048576" | bc -l)" "$(echo "$2 / 1048576" | bc -l)" "$loss"
    done
done
