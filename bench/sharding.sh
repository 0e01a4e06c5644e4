#!/bin/sh
# bench/sharding.sh [BUILD_DIR] - the trade-off between tensor parallelism,
# plain data parallelism, the distributed optimizer (ZeRO-1) and
# Megatron-FSDP (ZeRO-2 optim_grads, ZeRO-3 optim_grads_params with and
# without overlap), measured on one GPT on 4 rank-threads in one run.
#
#   MODEL   the model's flags (default: 8 layers, hidden 512, 8 heads,
#           vocabulary 8192, sequence 128: ~29M parameters)
#   ITERS   iterations per configuration (default 6; the last 3 averaged)
#
# Per configuration, from --metrics (averaged over the last log lines): step
# time, tokens/s, time and bytes per step in each communication group (the
# DP group carries all-reduce for DP, reduce-scatter + all-gather for the
# distributed optimizer and FSDP; TP carries TP's), the rank's parameter +
# gradient + optimizer-state bytes (FSDP: the measured peak of resident
# pages) and the process's peak resident set (4 thread-ranks share one
# process, so that figure is the sum over ranks). The machine is shared:
# compare the columns of one run.
set -eu
B=${1:-build}
MTC=$B/mtc
[ -x "$MTC" ] || { echo "bench/sharding.sh: $MTC not found (build first)" >&2; exit 2; }
MODEL=${MODEL:---num-layers 8 --hidden-size 512 --num-attention-heads 8 --vocab-size 8192 --seq-length 128}
ITERS=${ITERS:-6}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
COMMON="--mock-data $MODEL --micro-batch-size 2 --global-batch-size 8 --train-iters $ITERS --log-interval 1 --eval-iters 0 --lr 1e-4 --world-size 4"
F="--use-megatron-fsdp"
printf '%-34s %9s %9s %-34s %14s %8s\n' configuration step_ms tok/s "comm ms/step (MB/step) per group" p+g+optim_MB rss_MB
while IFS='|' read -r name flags; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    "$MTC" train $COMMON $flags --metrics "$D/m.jsonl" >"$D/log" 2>&1 || { echo "$name: failed"; tail -3 "$D/log"; continue; }
    tail -3 "$D/m.jsonl" | awk -v name="$name" '
        function num(key,   r) { if (!match($0, "\"" key "\": [0-9.e+-]+")) return 0; r = substr($0, RSTART, RLENGTH); sub(/.*: /, "", r); return r + 0 }
        {
            n++; ms += num("elapsed_ms"); tps += num("tokens_per_s")
            st = num("param_bytes") + num("grad_bytes") + num("optim_state_bytes")
            if (match($0, /"peak_rss_bytes": \[[0-9]+/)) { r = substr($0, RSTART + 19, RLENGTH - 19); rss = r + 0 }
            s = $0; groups = ""
            while (match(s, /"[A-Z_]+": \{"bytes": [0-9]+, "ms": [0-9.]+/)) {
                g = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
                split(g, p, /[":,{} ]+/); gname = p[2]; gb[gname] += p[4]; gm[gname] += p[6]; seen[gname] = 1
            }
        }
        END {
            out = ""
            for (k in seen) if (k != "WORLD") out = out sprintf("%s %.1f (%.1f) ", k == "DATA_PARALLEL_GROUP_WITH_CP" ? "dp" : k == "TENSOR_MODEL_PARALLEL_GROUP" ? "tp" : k, gm[k] / n, gb[k] / n / 1e6)
            printf "%-34s %9.1f %9.0f %-34s %14.2f %8.0f\n", name, ms / n, tps / n, out, st / 1e6, rss / 1e6
        }'
done <<CONF
TP 4 + SP|--tp 4 --sequence-parallel
DP 4|
DP 4 distributed optimizer|--use-distributed-optimizer
DP 4 distopt + overlap|--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
FSDP optim_grads|$F --data-parallel-sharding-strategy optim_grads
FSDP optim_grads_params|$F
FSDP optim_grads_params + overlap|$F --overlap-grad-reduce --overlap-param-gather
CONF
