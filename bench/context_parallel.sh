#!/bin/sh
# bench/context_parallel.sh - context parallelism: activation memory per
# rank and training tokens/s for cp 1, 2, 4 and each comm type (a2a+p2p at
# cp 4 with hierarchical sizes 2 2), at several
# sequence lengths, printed side by side; then the longest sequence whose
# activations fit a per-rank budget, cp 1 vs cp 4, and what the untiled
# attention (the (B, NH, T, T) probabilities it kept per layer) would have
# allowed.
#
# Model: GPT-2 style, 2 layers, hidden 256, 4 heads, micro batch 1, mock
# data (vocabulary 256); ITERS iterations after one warm-up (the log line's
# average). Ranks are threads; THREADS per rank for cp 1 is 2 (the machine's
# cores), 1 per rank otherwise, so every row uses both cores.
# Activation bytes are the arena each rank allocates at set-up (the banner's
# "activations" figure), which is linear in the sequence once no T x T
# buffer exists: the budget search fits a line through two lengths.
#
# usage: bench/context_parallel.sh [path/to/mtc]
#   env: SEQS (default "1024 4096 16384"), ITERS (default 2), BUDGET_GIB (2)
set -eu
MTC=${1:-build/mtc}
SEQS=${SEQS:-1024 4096 16384}
ITERS=${ITERS:-2}
BUDGET_GIB=${BUDGET_GIB:-2}
[ -x "$MTC" ] || { echo "context_parallel.sh: no mtc at $MTC (build with make, or pass its path)" >&2; exit 2; }
case $ITERS in '' | *[!0-9]* | 0) echo "context_parallel.sh: ITERS=$ITERS must be a positive integer" >&2; exit 2 ;; esac
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CLEAN="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
L=2 C=256 NH=4
MODEL="--mock-data --vocab-size 256 --num-layers $L --hidden-size $C --num-attention-heads $NH \
--micro-batch-size 1 --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0 \
--lr 1e-4 --lr-decay-style constant"

# run SEQ CP TYPE -> "activation_MB tokens_per_s"
run() {
    seq=$1 cp=$2 type=$3
    thr=1
    [ "$cp" -eq 1 ] && thr=2
    hier=
    [ "$type" = a2a+p2p ] && hier="--hierarchical-context-parallel-sizes 2 $((cp / 2))"
    $CLEAN "$MTC" train $MODEL $hier --seq-length "$seq" --max-position-embeddings "$seq" \
        --world-size "$cp" --cp "$cp" --cp-comm-type "$type" --threads "$thr" \
        --train-iters $((ITERS + 1)) --metrics "$T/m.jsonl" >"$T/log" 2>&1 || { echo "- -"; return; }
    act=$(sed -n 's/.*activations \([0-9.]*\)$/\1/p' "$T/log" | head -1)
    tps=$(tail -n "$ITERS" "$T/m.jsonl" | sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' |
        awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else print "-" }')
    echo "$act $tps"
}

echo "## activation memory per rank (MB) and tokens/s (model L=$L h=$C heads=$NH, micro batch 1)"
printf "%7s %-14s %9s %12s %10s %12s\n" seq layout act_MB act/cp1 tok/s tok/s/cp1
for seq in $SEQS; do
    set -- $(run "$seq" 1 p2p)
    a1=$1 t1=$2
    printf "%7s %-14s %9s %12s %10s %12s\n" "$seq" "cp1" "$a1" "1.00" "$t1" "1.00"
    for cp in 2 4; do
        types="p2p all_gather a2a"
        [ "$cp" -eq 4 ] && types="$types a2a+p2p" # sizes 2 2
        for type in $types; do
            set -- $(run "$seq" "$cp" "$type")
            printf "%7s %-14s %9s %12s %10s %12s\n" "$seq" "cp$cp $type" "$1" \
                "$(awk -v a="$1" -v b="$a1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }')" \
                "$2" "$(awk -v a="$2" -v b="$t1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }')"
        done
    done
done

# the budget: activations = a + b*seq per rank (two short runs fit it)
fit() { # CP -> "a b" in MB, MB per position
    fcp=$1
    set -- $(run 1024 "$fcp" p2p)
    m1=$1
    set -- $(run 2048 "$fcp" p2p)
    m2=$1
    awk -v m1="$m1" -v m2="$m2" 'BEGIN { b = (m2 - m1) / 1024; printf "%.6f %.6f", m1 - 1024 * b, b }'
}
budget=$(awk -v g="$BUDGET_GIB" 'BEGIN { print g * 1024 }')
set -- $(fit 1)
a1=$1 b1=$2
set -- $(fit 4)
a4=$1 b4=$2
echo
echo "## longest sequence with activations <= $BUDGET_GIB GiB per rank"
awk -v a1="$a1" -v b1="$b1" -v a4="$a4" -v b4="$b4" -v M="$budget" -v L=$L -v NH=$NH 'BEGIN {
    s1 = (M - a1) / b1; s4 = (M - a4) / b4
    # the untiled attention also kept B*NH*T*T floats per layer (B = 1):
    # solve a1 + b1 s + 4 L NH s^2 / 2^20 = M
    q = 4 * L * NH / 1048576; so = (-b1 + sqrt(b1 * b1 + 4 * q * (M - a1))) / (2 * q)
    printf "tiled attention, cp 1:  %9.0f positions (%.4f MB per position)\n", s1, b1
    printf "tiled attention, cp 4:  %9.0f positions (%.4f MB per position per rank)\n", s4, b4
    printf "untiled attention, cp 1: %8.0f positions (its T x T probabilities)\n", so
    printf "tiled cp1 / untiled: %.1fx    cp4 / cp1: %.1fx\n", s1 / so, s4 / s1
}'
