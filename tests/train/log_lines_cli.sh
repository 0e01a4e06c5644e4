#!/bin/sh
# tests/train/log_lines_cli.sh - what the train log tells a new user: the
# MoE banner states ep, etp and expert-DP (world / (etp ep pp), as `mtc
# ranks` computes it) for two layouts, and --trace names its file with its
# size (the file's own, in MB).
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
B="--mock-data --vocab-size 64 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 16 --train-iters 2 --threads 1 --num-experts 4 --moe-router-topk 2"
check_moe() { # WORLD TP PP EP ETP
    # shellcheck disable=SC2086
    "$MTC" train $B --world-size "$1" --tensor-model-parallel-size "$2" --pipeline-model-parallel-size "$3" \
        --expert-model-parallel-size "$4" --expert-tensor-parallel-size "$5" $6 --trace "$D/t.json" >"$D/l.txt" 2>&1 ||
        { echo "FAIL train world $1"; cat "$D/l.txt"; fail=1; return; }
    edp=$(( $1 / ($5 * $4 * $3) ))
    want="> expert parallel: ep $4 x etp $5 x expert-DP $edp (x pp $3 = world $1); $((4 / $4)) local experts per rank"
    if grep -qF "$want" "$D/l.txt"; then echo "ok   world $1 tp $2 pp $3: $want"; else
        echo "FAIL banner: want '$want'"; grep "expert" "$D/l.txt"; fail=1; fi
    "$MTC" ranks --world-size "$1" --tp "$2" --pp "$3" --ep "$4" --etp "$5" --json >"$D/r.json" 2>&1
    n=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["groups"]["EXPERT_DATA_PARALLEL_GROUP"][0]))' "$D/r.json")
    [ "$n" = "$edp" ] && echo "ok   mtc ranks agrees: expert-DP groups of $n" || { echo "FAIL ranks says expert-DP $n"; fail=1; }
    mb=$(python3 -c 'import os, sys; print("%.1f" % (os.path.getsize(sys.argv[1]) / 1048576))' "$D/t.json")
    grep -qF "> trace: wrote $D/t.json ($mb MB" "$D/l.txt" && echo "ok   trace line: $(grep '> trace' "$D/l.txt")" ||
        { echo "FAIL trace line (want $mb MB)"; grep trace "$D/l.txt"; fail=1; }
}
check_moe 4 1 1 2 1
check_moe 8 2 2 2 2 "--sequence-parallel --disable-bias-linear"
exit $fail
