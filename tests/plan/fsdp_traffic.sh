#!/bin/sh
# tests/plan/fsdp_traffic.sh - `mtc plan` counts Megatron-FSDP's collectives
# of a step exactly as mtc train issues them: for optim_grads_params (tied
# and untied head, with and without --overlap-param-gather) and optim_grads
# on dp 4 rank-threads with 2 microbatches, the plan's all-gathers (forward
# + backward, or after the step; with --bf16 half the bytes) and
# reduce-scatters, calls and bytes, equal
# the DATA_PARALLEL_GROUP_WITH_CP split of the last step's --metrics; HFSDP
# on 2 instances x 2 (with and without overlap): the same of the instance's
# group, and the per-step reduce-scatter and all-gather over the instances
# equal INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP's.
# Counts only: no timing is compared.
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
MODEL="--num-layers 4 --hidden-size 128 --num-attention-heads 4 --vocab-size 256 --seq-length 128 --micro-batch-size 2 --global-batch-size 16 --world-size 4 --use-megatron-fsdp"
HF="--num-distributed-optimizer-instances 2 --outer-dp-sharding-strategy optim"
split() { # calls and bytes of all_gather / reduce_scatter of group $1 in the last step
    tail -1 "$D/m.jsonl" | python3 -c '
import json, sys
g = json.loads(sys.stdin.read())["comm_groups"].get(sys.argv[1], {})
print(" ".join("%d %d" % (g.get(k, {}).get("calls", 0), g.get(k, {}).get("bytes", 0)) for k in ("all_gather", "reduce_scatter")))' "$1"
}
while IFS='|' read -r name flags; do
    [ -n "$name" ] || continue
    # --bf16 gathers bf16 units on oneDNN's bf16 engine: pinned, since
    # --bf16-gemm auto picks an engine by this machine's measured rates
    tflags=
    case "$flags" in *--bf16*) tflags="--bf16-gemm dnnl-bf16" ;; esac
    # shellcheck disable=SC2086
    "$MTC" train $MODEL $flags $tflags --mock-data --train-iters 2 --log-interval 1 --eval-iters 0 \
        --metrics "$D/m.jsonl" >"$D/log" 2>&1 || { echo "FAIL $name: train"; tail -3 "$D/log"; fail=1; continue; }
    # plan's --bf16 needs a bf16 GEMM rate and prices Megatron's activations
    # (the counts compared do not depend on the machine)
    pflags="--machine tests/plan/host_test.json"
    case "$flags" in *--bf16*) pflags="--machine dgx-a100 --activations megatron" ;; esac
    # shellcheck disable=SC2086
    "$MTC" plan $MODEL $flags $pflags --explain tp1-pp1-do >"$D/plan" 2>&1 ||
        { echo "FAIL $name: plan"; cat "$D/plan"; fail=1; continue; }
    # measured: calls and bytes of all_gather / reduce_scatter in the DP group
    case "$flags" in
    *outer-dp-sharding-strategy*) meas=$(split INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP) ;;
    *) meas=$(split DATA_PARALLEL_GROUP_WITH_CP) ;;
    esac
    plan=$(awk '/forward gather|backward gather|step gather/ { c += $5; b += $(NF - 1) }
                /    reduce-scatter/ { rc = $4; rb = $(NF - 1) }
                END { printf "%d %d %d %d\n", c, b, rc, rb }' "$D/plan")
    if [ -n "$meas" ] && [ "$meas" = "$plan" ]; then
        echo "ok   $name: all-gather calls/bytes, reduce-scatter calls/bytes = $plan"
    else
        echo "FAIL $name: plan '$plan' against measured '$meas'"; fail=1
    fi
    case "$flags" in
    *outer-dp-sharding-strategy*)
        meas=$(split INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP)
        plan=$(sed -n 's/^    HFSDP outer .* ms  \([0-9]*\) reduce-scatters.*, \([0-9]*\) B; \([0-9]*\) all-gathers.*, \([0-9]*\) B (blocking)$/\3 \4 \1 \2/p' "$D/plan")
        if [ -n "$meas" ] && [ "$meas" = "$plan" ]; then
            echo "ok   $name: over the instances all-gather calls/bytes, reduce-scatter calls/bytes = $plan"
        else
            echo "FAIL $name: over the instances plan '$plan' against measured '$meas'"; fail=1
        fi ;;
    esac
done <<CONF
optim_grads_params tied|
optim_grads_params untied|--untie-embeddings-and-output-weights
optim_grads_params tied + overlap|--overlap-grad-reduce --overlap-param-gather
optim_grads_params untied + overlap|--overlap-grad-reduce --overlap-param-gather --untie-embeddings-and-output-weights
optim_grads|--data-parallel-sharding-strategy optim_grads
optim_grads_params bf16 (units gathered as bf16)|--bf16
HFSDP 2 x 2|$HF
HFSDP 2 x 2 + overlap|$HF --overlap-grad-reduce --overlap-param-gather
CONF
exit $fail
