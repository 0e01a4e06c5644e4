#!/bin/sh
# bench/ckpt.sh [BUILD_DIR] - checkpoint save and load throughput of GPT-2
# 124M (12 layers, hidden 768, 12 heads, vocabulary 50257, 1024 positions;
# weights + AdamW moments: ~1.5 GB) against the disk's sequential write speed
# measured in the same run (dd with fsync), and the time to reshard it:
# saved at one layout, loaded at another with no conversion step.
#
#   SAVE_LAYOUT   flags of the saving run   (default: --world-size 2 --tp 2)
#   LOAD_LAYOUT   flags of the loading run  (default: --world-size 2 --pp 2)
#   BENCH_DIR     where to write            (default: a temporary folder in $TMPDIR)
#
# Prints mtc's save GB/s beside dd's and their ratio (target >= 0.70), the
# load GB/s (from the page cache when memory allows: not a disk figure) and
# the reshard (load) time (target < 5 s). Figures on a shared machine move
# with its load: compare columns of one run.
set -eu
B=${1:-build}
MTC=$B/mtc
[ -x "$MTC" ] || { echo "bench/ckpt.sh: $MTC not found (build first: cmake --build $B)" >&2; exit 2; }
SAVE_LAYOUT=${SAVE_LAYOUT:---world-size 2 --tp 2}
LOAD_LAYOUT=${LOAD_LAYOUT:---world-size 2 --pp 2}
D=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$D"
trap 'rm -rf "$D/ck" "$D/dd.bin"' EXIT
M="--mock-data --vocab-size 50257 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 64 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 2 --log-interval 1 --eval-iters 0 --lr-decay-iters 10"
echo "## GPT-2 124M checkpoint: save $SAVE_LAYOUT, load $LOAD_LAYOUT, in $D"
# dd: ~the checkpoint's bytes, one sequential file, fsync at the end; run
# before and after the save (the disk's pending writeback moves both), each
# after a sync
mb=1426
dd_run() {
    sync
    dd if=/dev/zero of="$D/dd.bin" bs=1M count=$mb conv=fsync 2>&1 | tail -n 1 | sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p'
    rm -f "$D/dd.bin"
}
dd1=$(dd_run)
sync
"$MTC" train $M $SAVE_LAYOUT --train-iters 1 --save "$D/ck" >"$D/save.log" 2>&1 || { cat "$D/save.log"; exit 1; }
bytes=$(du -sb "$D/ck/iter_0000001" | cut -f1)
save_s=$(sed -n 's/.*successfully saved checkpoint .*\[ \([0-9.]*\) s \].*/\1/p' "$D/save.log" | tail -n 1)
dd2=$(dd_run)
dd_s=$(awk -v a="$dd1" -v b="$dd2" 'BEGIN { print (a + b) / 2 }')
echo "dd runs: $dd1 s and $dd2 s for $mb MiB"
"$MTC" train $M $LOAD_LAYOUT --train-iters 1 --load "$D/ck" >"$D/load.log" 2>&1 || { cat "$D/load.log"; exit 1; }
load_s=$(sed -n 's/.*successfully loaded checkpoint .*, \([0-9.]*\) s \].*/\1/p' "$D/load.log" | tail -n 1)
awk -v b="$bytes" -v s="$save_s" -v d="$dd_s" -v mb="$mb" -v l="$load_s" 'BEGIN {
    gs = b / s / 1e9; gd = mb * 1048576 / d / 1e9; gl = b / l / 1e9
    printf "checkpoint %.3f GB (%s)\n", b / 1e9, "weights + AdamW moments, float32"
    printf "%-28s %10s %10s\n", "", "seconds", "GB/s"
    printf "%-28s %10.3f %10.3f\n", "mtc save (all ranks, fsync)", s, gs
    printf "%-28s %10.3f %10.3f\n", "dd bs=1M conv=fsync", d, gd
    printf "%-28s %10.3f %10.3f\n", "mtc load + reshard", l, gl
    printf "save / dd = %.2f (target >= 0.70: %s)\n", gs / gd, (gs / gd >= 0.70) ? "met" : "MISSED"
    printf "reshard (load into the new layout) %.3f s (target < 5 s: %s)\n", l, (l < 5) ? "met" : "MISSED"
}'
