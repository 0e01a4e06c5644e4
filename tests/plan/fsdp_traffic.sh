#!/bin/sh
# tests/plan/fsdp_traffic.sh - `mtc plan` counts Megatron-FSDP's collectives
# of a step exactly as mtc train issues them: for optim_grads_params (tied
# and untied head, with and without --overlap-param-gather) and optim_grads
# on dp 4 rank-threads with 2 microbatches, the plan's all-gathers (forward
# + backward, or after the step) and reduce-scatters, calls and bytes, equal
# the DATA_PARALLEL_GROUP_WITH_CP split of the last step's --metrics.
# Counts only: no timing is compared.
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
MODEL="--num-layers 4 --hidden-size 128 --num-attention-heads 4 --vocab-size 256 --seq-length 128 --micro-batch-size 2 --global-batch-size 16 --world-size 4 --use-megatron-fsdp"
while IFS='|' read -r name flags; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    "$MTC" train $MODEL $flags --mock-data --train-iters 2 --log-interval 1 --eval-iters 0 \
        --metrics "$D/m.jsonl" >"$D/log" 2>&1 || { echo "FAIL $name: train"; tail -3 "$D/log"; fail=1; continue; }
    # shellcheck disable=SC2086
    "$MTC" plan $MODEL $flags --machine tests/plan/host_test.json --explain tp1-pp1-do >"$D/plan" 2>&1 ||
        { echo "FAIL $name: plan"; cat "$D/plan"; fail=1; continue; }
    # measured: calls and bytes of all_gather / reduce_scatter in the DP group
    meas=$(tail -1 "$D/m.jsonl" | python3 -c '
import json, sys
g = json.loads(sys.stdin.read())["comm_groups"]["DATA_PARALLEL_GROUP_WITH_CP"]
print(" ".join("%d %d" % (g.get(k, {}).get("calls", 0), g.get(k, {}).get("bytes", 0)) for k in ("all_gather", "reduce_scatter")))')
    plan=$(awk '/forward gather|backward gather|step gather/ { c += $5; b += $(NF - 1) }
                /    reduce-scatter/ { rc = $4; rb = $(NF - 1) }
                END { printf "%d %d %d %d\n", c, b, rc, rb }' "$D/plan")
    if [ -n "$meas" ] && [ "$meas" = "$plan" ]; then
        echo "ok   $name: all-gather calls/bytes, reduce-scatter calls/bytes = $plan"
    else
        echo "FAIL $name: plan '$plan' against measured '$meas'"; fail=1
    fi
done <<CONF
optim_grads_params tied|
optim_grads_params untied|--untie-embeddings-and-output-weights
optim_grads_params tied + overlap|--overlap-grad-reduce --overlap-param-gather
optim_grads_params untied + overlap|--overlap-grad-reduce --overlap-param-gather --untie-embeddings-and-output-weights
optim_grads|--data-parallel-sharding-strategy optim_grads
CONF
exit $fail
