#!/bin/sh
# bench/scale_ranks.sh [path/to/mtc] - thread-rank scale: set-up time and
# peak memory (max RSS) of `mtc train` with many tiny ranks (one layer,
# hidden 8, data parallel over the whole world), for each world size in
# WORLDS (default "1024 2048 4096"). The targets (issue: scale of
# thread-ranks): set-up linear in the ranks, 4096 ranks set up in under
# 20 s and under 2 GB. Figures move with the machine's load; the per-rank
# column shows whether growth is linear.
set -eu
MTC=${1:-build/mtc}
WORLDS=${WORLDS:-1024 2048 4096}
[ -x "$MTC" ] || { echo "scale_ranks.sh: no mtc at $MTC (build first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "scale_ranks.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
printf "%7s %10s %12s %14s %8s\n" ranks setup_s peak_MB KB_per_rank target
for w in $WORLDS; do
    /usr/bin/time -f "%M" -o "$T/rss" "$MTC" train --world-size "$w" --threads 1 --mock-data \
        --vocab-size 64 --num-layers 1 --hidden-size 8 --num-attention-heads 1 --seq-length 8 \
        --micro-batch-size 1 --train-iters 1 --eval-iters 0 >"$T/log" 2>&1 ||
        { echo "scale_ranks.sh: $w ranks failed:" >&2; tail -n 3 "$T/log" >&2; exit 1; }
    setup=$(sed -n 's/.*set up in \([0-9.]*\) s.*/\1/p' "$T/log" | head -n 1)
    kb=$(cat "$T/rss")
    awk -v w="$w" -v s="$setup" -v kb="$kb" 'BEGIN {
        t = "";
        if (w == 4096) t = (s < 20 && kb / 1024 < 2048) ? "met" : "MISSED";
        printf "%7d %10.2f %12.0f %14.0f %8s\n", w, s, kb / 1024, kb / w, t }'
done
