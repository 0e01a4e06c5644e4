#!/bin/sh
# tests/plan/plan_vs_train.sh - `mtc plan` against mtc's own allocation:
# for layouts of a GPT-2 and a Llama-style model on 4 rank-threads (with
# the argument `mpi`: on 2 MPI processes, skipped when MPI is not built),
# context parallelism (p2p, all_gather, a2a) included,
# the parameters, gradients, optimizer state and activation bytes that
# `mtc train --metrics` reports for the last rank equal those of
# `mtc plan --explain LAYOUT --pp-rank pp-1 --dp-rank dp*cp-1` to the byte,
# and the banner's parameter count equals the plan's (uneven pipeline splits
# and MTP included). Bad input exits 2
# with one line. Uses a fixed machine file (no measurement).
set -u
MTC=${MTC:-build/mtc}
HOST=tests/plan/host_test.json
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

GPT="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 200 --micro-batch-size 2 --global-batch-size 16"
LLAMA="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 200 --micro-batch-size 2 --global-batch-size 16 --normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights --disable-bias-linear --num-query-groups 2"

# check NAME MODEL WORLD TP PP VPP SP DO ND [LAUNCH...]
check() {
    name=$1 model=$2 world=$3 tp=$4 pp=$5 vpp=$6 sp=$7 do=$8 nd=$9
    shift 9
    cp=${CP:-1}
    dp=$((world / tp / pp / cp))
    targs="--cp $cp --cp-comm-type ${CPT:-p2p}" lay="tp$tp-pp$pp-vpp$vpp" pargs="$targs"
    # MoE layouts: EP (and ETP) given in the environment, spelled as mtc train's
    # flags for the run and in the layout name for the plan
    [ -n "${EP:-}" ] && targs="$targs --ep $EP" && lay="$lay-ep$EP"
    [ -n "${ETP:-}" ] && targs="$targs --etp $ETP" && lay="$lay-etp$ETP"
    [ "$sp" = 1 ] && targs="$targs --sequence-parallel" && lay="$lay-sp"
    [ "$do" = 1 ] && targs="$targs --use-distributed-optimizer --num-distributed-optimizer-instances $nd" \
        && lay="$lay-do" && pargs="$pargs --use-distributed-optimizer --num-distributed-optimizer-instances $nd"
    tmodel=$(echo "$model" | sed 's/--num-query-groups/--group-query-attention --num-query-groups/')
    if [ $# -gt 0 ]; then
        "$@" "$MTC" train $tmodel --tp $tp --pp $pp --vpp $vpp $targs --mock-data --train-iters 1 \
            --eval-iters 0 --threads 1 --metrics "$D/m.json" >"$D/log" 2>&1
    else
        "$MTC" train $tmodel --world-size $world --tp $tp --pp $pp --vpp $vpp $targs --mock-data \
            --train-iters 1 --eval-iters 0 --threads 1 --metrics "$D/m.json" >"$D/log" 2>&1
    fi
    if [ $? -ne 0 ]; then bad "$name: mtc train failed"; tail -3 "$D/log"; return; fi
    # the Llama flags spelled for plan (no --group-query-attention there)
    "$MTC" plan $model --world-size $world $pargs --machine $HOST --explain "$lay" \
        --pp-rank $((pp - 1)) --dp-rank $((dp * cp - 1)) --json >"$D/p.json" 2>"$D/perr"
    if [ $? -ne 0 ]; then bad "$name: mtc plan failed: $(cat "$D/perr")"; return; fi
    for k in param_bytes grad_bytes optim_state_bytes activation_bytes; do
        m=$(tail -1 "$D/m.json" | sed -n "s/.*\"$k\": \([0-9]*\).*/\1/p")
        p=$(sed -n "s/.*\"$k\": \([0-9]*\).*/\1/p" "$D/p.json")
        if [ -z "$m" ] || [ "$m" != "$p" ]; then bad "$name $lay: $k train '$m' plan '$p'"; return; fi
    done
    nb=$(sed -n 's/.*model parallel rank ([0-9]*, [0-9]*): \([0-9]*\)$/\1/p' "$D/log")
    np=$(sed -n 's/.*"params": \([0-9]*\).*/\1/p' "$D/p.json")
    if [ "$nb" != "$np" ]; then bad "$name $lay: banner parameters '$nb', plan '$np'"; return; fi
    ok "$name $lay: $(sed -n 's/.*\(> memory per rank.*\)/\1/p' "$D/log")"
}

if [ "${1:-threads}" = mpi ]; then # the ctest case test_plan_vs_train_mpi (label mpi)
    if [ "${MTC_HAVE_MPI:-OFF}" = ON ] && command -v "${MPIEXEC:-mpirun}" >/dev/null 2>&1; then
        MPI="${MPIEXEC:-mpirun} --oversubscribe -np 2"
        [ "$(id -u)" = 0 ] && MPI="${MPIEXEC:-mpirun} --allow-run-as-root --oversubscribe -np 2"
        check "mpi gpt pp2" "$GPT" 2 1 2 1 0 0 1 timeout -k 5 120 $MPI
        check "mpi llama dp2 distopt" "$LLAMA" 2 1 1 1 0 1 1 timeout -k 5 120 $MPI
        EP=2 check "mpi moe ep2 alltoall distopt" \
            "$GPT --num-experts 8 --moe-router-topk 2 --moe-token-dispatcher-type alltoall" \
            2 1 1 1 0 1 1 timeout -k 5 120 $MPI
    else
        echo "skipped: MPI not built"
    fi
    exit $fail
fi
check "gpt serial dp"      "$GPT"   4 1 1 1 0 0 1
check "gpt tp pp sp distopt" "$GPT" 4 2 2 1 1 1 1
check "gpt interleaved"    "$GPT"   4 1 2 2 0 1 1
check "gpt 2 instances"    "$GPT"   4 2 1 1 1 1 2
check "gpt tp4"            "$GPT"   4 4 1 1 0 0 1
check "gpt 1F1B pp4"       "$GPT"   4 1 4 1 0 0 1
check "llama tp pp sp distopt" "$LLAMA" 4 2 2 1 1 1 1
check "llama interleaved"  "$LLAMA" 4 1 2 2 0 0 1
# uneven pipeline splits (pp/layout.c): the last rank holds 3 layers + head
check "gpt uneven first 1 distopt" "$GPT --decoder-first-pipeline-num-layers 1" 4 1 2 1 0 1 1
check "llama qk-layernorm tp2 sp" "$LLAMA --qk-layernorm" 4 2 1 1 1 0 1
MLA="$(echo "$LLAMA" | sed 's/ --num-query-groups 2//') --multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 8 --qk-pos-emb-head-dim 4 --v-head-dim 6 --qk-layernorm"
check "mla tp2 sp pp2 distopt" "$MLA" 4 2 2 1 1 1 1
check "mla tp2 (no q-lora-rank)" "$(echo "$MLA" | sed 's/--q-lora-rank 24 //')" 4 2 1 1 0 0 1
check "gpt account-for embedding, 5 layers" "$GPT --num-layers 5 --account-for-embedding-in-pipeline-split" 4 1 2 1 0 0 1
CP=2 CPT=p2p check "gpt cp2 p2p" "$GPT" 4 1 1 1 0 0 1
CP=2 CPT=all_gather check "gpt tp2 cp2 sp all_gather distopt" "$GPT" 4 2 1 1 1 1 1
CP=2 CPT=a2a check "llama cp2 a2a pp2" "$LLAMA" 4 1 2 1 0 0 1
CP=2 CPT=p2p check "llama cp2 p2p distopt" "$LLAMA" 4 1 1 1 0 1 1
# mixture of experts: the local experts' parameters, the expert-parallel
# buffer over expert-DP with its own optimizer instance, the MoE activations
MOE="--num-experts 8 --moe-router-topk 2"
EP=1 check "gpt moe ep1 distopt" "$GPT $MOE" 4 1 1 1 0 1 1
EP=2 check "gpt moe ep2" "$GPT $MOE" 4 1 1 1 0 0 1
EP=2 ETP=1 check "gpt moe tp2 sp ep2 etp1 distopt" "$GPT $MOE" 4 2 1 1 1 1 1
EP=2 ETP=2 check "gpt moe tp2 sp etp2 alltoall capacity distopt" \
    "$GPT $MOE --disable-bias-linear --moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity" 4 2 1 1 1 1 1
EP=2 check "gpt moe ep2 2 instances" "$GPT $MOE" 4 1 1 1 0 1 2
EP=2 check "llama moe pp2 vpp2 shared alltoall" \
    "$LLAMA $MOE --moe-layer-freq 2 --moe-ffn-hidden-size 96 --moe-shared-expert-intermediate-size 64 --moe-token-dispatcher-type alltoall" 4 1 2 2 0 1 1
EP=4 check "llama moe ep4 topk1 sigmoid" \
    "$LLAMA --num-experts 4 --moe-router-topk 1 --moe-router-score-function sigmoid --moe-expert-capacity-factor 1.0" 4 1 1 1 0 1 1
# multi-token prediction: the depths' slot rows, layers (an MoE layer's rows
# too) and shared buffers on the chunk with the loss; the DeepSeek-V3 shape
# (MLA + first-k-dense MoE + MTP)
check "llama mtp tp2 sp pp2 distopt" "$LLAMA --mtp-num-layers 2" 4 2 2 1 1 1 1
check "llama mtp pp2 vpp2" "$LLAMA --mtp-num-layers 2" 4 1 2 2 0 0 1
CP=2 CPT=a2a check "llama mtp cp2 a2a pp2" "$LLAMA --mtp-num-layers 2" 4 1 2 1 0 0 1
# a narrow FFN: MTP's eh_proj (2C -> C, its output gathered) sets the scratch width
NARROW="$(echo "$LLAMA" | sed 's/ --num-query-groups 2//') --ffn-hidden-size 8 --mtp-num-layers 1"
check "mtp narrow ffn tp2 sp" "$NARROW" 4 2 1 1 1 0 1
check "mtp narrow ffn tp4" "$NARROW" 4 4 1 1 0 0 1
EP=2 check "llama moe mtp ep2 shared distopt" \
    "$LLAMA --mtp-num-layers 2 --num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 32" 4 1 1 1 0 1 1
DSV3="$MLA --mtp-num-layers 1 --num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-shared-expert-intermediate-size 32 --moe-layer-freq [0]*1+[1]*3"
EP=2 ETP=1 check "dsv3 tp2 sp pp2 ep2 etp1" "$DSV3" 4 2 2 1 1 0 1
EP=2 check "dsv3 pp2 vpp2 ep2 distopt" "$DSV3" 4 1 2 2 0 1 1
# Megatron's standalone MTP stage ('m's before the loss's stage): the loss's
# rank holds the 1 + D states it receives, their gradients and the heads'
# d(h_k), its parameters by the layout (train gets --pp and the layout only)
check_layout() { # NAME MODEL PP VPP LAYOUT
    name=$1 model=$2 pp=$3 vpp=$4 lay=$5
    tmodel=$(echo "$model" | sed 's/--num-query-groups/--group-query-attention --num-query-groups/')
    "$MTC" train $tmodel --world-size $pp --pp $pp --pipeline-model-parallel-layout "$lay" \
        --mock-data --train-iters 1 --eval-iters 0 --threads 1 --metrics "$D/m.json" >"$D/log" 2>&1 ||
        { bad "$name: mtc train failed"; tail -3 "$D/log"; return; }
    "$MTC" plan $model --world-size $pp --pipeline-model-parallel-layout "$lay" --machine $HOST \
        --explain "tp1-pp$pp-vpp$vpp" --pp-rank $((pp - 1)) --dp-rank 0 --json >"$D/p.json" 2>"$D/perr" ||
        { bad "$name: mtc plan failed: $(cat "$D/perr")"; return; }
    for k in param_bytes grad_bytes optim_state_bytes activation_bytes; do
        m=$(tail -1 "$D/m.json" | sed -n "s/.*\"$k\": \([0-9]*\).*/\1/p")
        p=$(sed -n "s/.*\"$k\": \([0-9]*\).*/\1/p" "$D/p.json")
        if [ -z "$m" ] || [ "$m" != "$p" ]; then bad "$name $lay: $k train '$m' plan '$p'"; return; fi
    done
    ok "$name $lay: the loss's rank's bytes equal train's"
}
check_layout "llama standalone mtp pp3" "$LLAMA --mtp-num-layers 2" 3 1 'Ett|ttmm|L'
check_layout "llama standalone mtp pp4 (the depths alone)" "$LLAMA --mtp-num-layers 2" 4 1 'Ett|tt|mm|L'
check_layout "llama standalone mtp pp2 vpp2" "$LLAMA --mtp-num-layers 2" 2 2 'Et|tt|tmm|L'
check_layout "gpt standalone mtp pp3 tied" "$GPT --position-embedding-type rope --mtp-num-layers 1" 3 1 'Ett|ttm|L'
"$MTC" plan $LLAMA --mtp-num-layers 2 --pipeline-model-parallel-layout 'Ett|ttmm|L' --world-size 3 --machine $HOST \
    --explain tp1-pp3-vpp1 2>&1 | grep -q "carry \[h_0 | h_1 .. h_2\], 3 hidden states.*priced approximately" &&
    ok "plan --explain names the standalone MTP stage's messages and their approximate price" ||
    bad "plan --explain: no standalone MTP messages line"

# bad input: exit 2, one line, before any work
expect_usage() {
    name=$1 pat=$2; shift 2
    "$MTC" "$@" >"$D/out" 2>"$D/err"
    rc=$?
    if [ $rc -ne 2 ]; then bad "$name: exit $rc, expected 2"; cat "$D/err"; return; fi
    if [ "$(wc -l <"$D/err")" -ne 1 ] || ! grep -q -- "$pat" "$D/err"; then
        bad "$name: stderr not one line matching '$pat'"; cat "$D/err"; return; fi
    ok "$name: $(cat "$D/err")"
}
expect_usage "unknown machine" "neither a named machine" plan $GPT --world-size 4 --machine dgx-z900
expect_usage "bad layout" "not tpN, cpN, ppN" plan $GPT --world-size 4 --machine $HOST --explain tp2-xx3
expect_usage "tp vs heads" "num-attention-heads=4 is not divisible by tensor-model-parallel-size=3" \
    plan $GPT --world-size 3 --machine $HOST --explain tp3
expect_usage "batch vs dp" "global-batch-size=16 is not divisible" plan $GPT --world-size 4 \
    --global-batch-size 16 --micro-batch-size 8 --machine $HOST --explain tp1
expect_usage "mtc acts with bf16" "activations mtc" plan $GPT --world-size 4 --machine $HOST --bf16 --activations mtc
expect_usage "moe ep vs experts" "num-experts=8 is not divisible by expert-model-parallel-size=3" \
    plan $GPT --world-size 6 --global-batch-size 12 --num-experts 8 --ep 3 --machine $HOST --explain tp1
expect_usage "moe etp not 1 or tp" "expert-tensor-parallel-size=2 must be 1 or the tensor-parallel size 1" \
    plan $GPT --world-size 4 --num-experts 8 --machine $HOST --explain tp1-etp2
expect_usage "moe tp without sp" "needs --sequence-parallel" \
    plan $GPT --world-size 4 --num-experts 8 --machine $HOST --explain tp2-ep2
expect_usage "moe ep without experts" "needs --num-experts" plan $GPT --world-size 4 --ep 2 --machine $HOST
expect_usage "moe bad dispatcher" "moe-token-dispatcher-type=flex is unknown" \
    plan $GPT --world-size 4 --num-experts 8 --moe-token-dispatcher-type flex --machine $HOST
expect_usage "moe topk above experts" "moe-router-topk=9 must be in" \
    plan $GPT --world-size 4 --num-experts 8 --moe-router-topk 9 --machine $HOST
expect_usage "moe ep no layout" "no valid layout on 4 ranks" \
    plan $GPT --world-size 4 --num-experts 6 --ep 4 --machine $HOST
expect_usage "tp overlap on a CPU host" "tp-comm-overlap: machine .* is a CPU host" \
    plan $GPT --world-size 4 --machine $HOST --tp-comm-overlap
expect_usage "tp overlap without sp" "tp-comm-overlap needs sequence parallelism" \
    plan $GPT --world-size 4 --machine dgx-h100 --tp-comm-overlap --no-sequence-parallel
expect_usage "param gather without distopt" "overlap-param-gather needs the distributed optimizer" \
    plan $GPT --world-size 4 --machine dgx-h100 --overlap-param-gather --no-distributed-optimizer
MTC_CACHE_DIR="$D/nocache" expect_usage "this unmeasured" "run .mtc bench-peak" plan $GPT --world-size 4
# the table lists every layout once, sorted by step time among fitting ones
"$MTC" plan $GPT --world-size 4 --machine $HOST --json >"$D/all.json" || bad "plan --json failed"
n=$(grep -c '"layout"' "$D/all.json")
u=$(sed -n 's/.*"layout": "\([^"]*\)".*/\1/p' "$D/all.json" | sort -u | wc -l)
[ "$n" -ge 10 ] && [ "$n" = "$u" ] && ok "enumeration: $n distinct layouts" || bad "enumeration: $n rows, $u distinct"
sed -n 's/.*"step_ms": \([0-9.e+-]*\),.*/\1/p' "$D/all.json" | sort -g -c 2>/dev/null \
    && ok "rows sorted by step time" || bad "rows not sorted by step time"
# MoE (no biases, so etp 2 is valid): every ep dividing the experts and etp 1 / tp
# appear, once each, and
# --ep fixes it
"$MTC" plan $GPT $MOE --disable-bias-linear --world-size 4 --machine $HOST --json >"$D/moe.json" || bad "moe plan --json failed"
n=$(grep -c '"layout"' "$D/moe.json")
u=$(sed -n 's/.*"layout": "\([^"]*\)".*/\1/p' "$D/moe.json" | sort -u | wc -l)
eps=$(sed -n 's/.*"ep": \([0-9]*\),.*/\1/p' "$D/moe.json" | sort -u | tr '\n' ' ')
etps=$(grep '"tp": 2,' "$D/moe.json" | sed -n 's/.*"etp": \([0-9]*\),.*/\1/p' | sort -u | tr '\n' ' ')
[ "$n" = "$u" ] && [ "$eps" = "1 2 4 " ] && [ "$etps" = "1 2 " ] \
    && ok "moe enumeration: $n distinct layouts, ep $eps, etp at tp 2: $etps" \
    || bad "moe enumeration: $n rows, $u distinct, ep '$eps', etp at tp 2 '$etps'"
"$MTC" plan $GPT $MOE --world-size 4 --ep 2 --machine $HOST --json >"$D/moe2.json" || bad "moe plan --ep 2 failed"
eps=$(sed -n 's/.*"ep": \([0-9]*\),.*/\1/p' "$D/moe2.json" | sort -u | tr '\n' ' ')
[ "$eps" = "2 " ] && ok "moe --ep 2 fixes ep" || bad "moe --ep 2: ep values '$eps'"
exit $fail
