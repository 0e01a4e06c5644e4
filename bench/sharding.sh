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
# distributed optimizer and FSDP; TP carries TP's), the DP group's time split
# into all-reduce / all-gather / reduce-scatter, the rank's parameter +
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
printf '%-34s %9s %7s %-26s %-24s %11s %7s\n' configuration step_ms tok/s "comm ms/step (MB) per group" "dp: ar / ag / rs ms" p+g+optim_MB rss_MB
while IFS='|' read -r name flags; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    "$MTC" train $COMMON $flags --metrics "$D/m.jsonl" >"$D/log" 2>&1 || { echo "$name: failed"; tail -3 "$D/log"; continue; }
    tail -3 "$D/m.jsonl" | python3 -c '
import json, sys
name = sys.argv[1]
rows = [json.loads(l) for l in sys.stdin if l.strip()]
n = len(rows)
mean = lambda f: sum(f(r) for r in rows) / n
short = {"DATA_PARALLEL_GROUP_WITH_CP": "dp", "TENSOR_MODEL_PARALLEL_GROUP": "tp"}
groups = sorted({g for r in rows for g in r.get("comm_groups", {}) if g != "WORLD"})
comm = " ".join("%s %.0f (%.0f)" % (short.get(g, g), mean(lambda r: r["comm_groups"].get(g, {}).get("ms", 0)),
                                     mean(lambda r: r["comm_groups"].get(g, {}).get("bytes", 0)) / 1e6) for g in groups)
dpg = lambda r, op: r.get("comm_groups", {}).get("DATA_PARALLEL_GROUP_WITH_CP", {}).get(op, {}).get("ms", 0)
split = " / ".join("%.0f" % mean(lambda r: dpg(r, op)) for op in ("all_reduce", "all_gather", "reduce_scatter"))
state = mean(lambda r: r.get("param_bytes", 0) + r.get("grad_bytes", 0) + r.get("optim_state_bytes", 0)) / 1e6
rss = max(r.get("peak_rss_bytes", [0])[0] for r in rows) / 1e6
print("%-34s %9.1f %7.0f %-26s %-24s %11.2f %7.0f" % (name, mean(lambda r: r["elapsed_ms"]), mean(lambda r: r["tokens_per_s"]), comm, split, state, rss))
' "$name"
done <<CONF
TP 4 + SP|--tp 4 --sequence-parallel
DP 4|
DP 4 distributed optimizer|--use-distributed-optimizer
DP 4 distopt + overlap|--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
FSDP optim_grads|$F --data-parallel-sharding-strategy optim_grads
FSDP optim_grads_params|$F
FSDP optim_grads_params + overlap|$F --overlap-grad-reduce --overlap-param-gather
CONF

# mtc plan's prediction for the founding document's case: a 7B GPT
# (32 layers, hidden 4096, sequence 2048) on 4 x A100 (the dgx-a100
# machine, bf16), beside the published per-step figures. The plan prices
# mtc's own implementation: optim_grads_params keeps the fp32 main params'
# shard and the bf16 compute copy's shard plus the gathered units, and the
# step prices each unit's all-gathers before the forward and the backward
# (bf16, as mtc moves them with --bf16) and its reduce-scatter every
# microbatch (fp32 unless --grad-reduce-in-bf16); optim_grads keeps the
# whole bf16 copy.
P7="--machine dgx-a100 --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --vocab-size 50257 --micro-batch-size 1 --global-batch-size 4 --world-size 4"
echo
printf '%-34s %12s %12s %12s %14s\n' "7B on 4 x A100 (mtc plan)" step_ms tp_comm_ms dp_comm_ms memory_GB
while IFS='|' read -r name lay flags published; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    "$MTC" plan $P7 $flags --explain "$lay" 2>/dev/null | awk -v name="$name" -v pub="$published" '
        /^  total/ { mem = $2 / 1024 } /^  TP collectives/ { tp = $3 } /^  DP reduction/ { dp = $3 } /^  step / { st = $2 }
        END { printf "%-34s %12.1f %12.1f %12.1f %14.1f   published: %s\n", name, st, tp, dp, mem, pub }'
done <<CONF
TP 4 + SP|tp4-pp1-sp||all-reduce 18 ms, all-gather 12 ms, 27.5 GB
DP 4 distributed optimizer|tp1-pp1-do|--use-distributed-optimizer|-
FSDP optim_grads|tp1-pp1-do|$F --data-parallel-sharding-strategy optim_grads|-
FSDP optim_grads_params|tp1-pp1-do|$F|40 / 38 ms, 24.1 GB (ZeRO-3: 29 / 22 ms, 21.3 GB)
CONF
