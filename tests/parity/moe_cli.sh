#!/bin/sh
# tests/parity/moe_cli.sh - mixture of experts end to end against the serial
# MoE run: per-iteration lm loss, grad norm, load_balancing_loss and z_loss
# within 2e-5 (4 iterations of the tiny model with 4 experts, top-2, aux
# loss and z-loss, dropout on). Layouts: dp 2 (+ distributed optimizer),
# pp 2, ep 2 and 4 with the allgather and the alltoall dispatcher, ep 2 x dp 2
# with the distributed optimizer and overlap, ep 2 x pp 2, capacity with the
# probs and position policies and padding, sigmoid routing with the expert
# bias (its update all-reduced over DP), seq_aux_loss, a shared expert, a
# Llama-style (SwiGLU) MoE every other layer, full recomputation under ep 2,
# cp 2 and cp 2 x ep 2 (these at lr 1e-3: at 1e-2 the CP attention's other
# summation order flips a near-tied top-k by iteration 3, and the runs then
# part by more than 2e-5 while staying equally valid); mpirun ep 2 with
# both dispatchers. Megatron's MoE rules are refused with one line, exit 2.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"

# same_moe NAME SERIAL.jsonl LAYOUT.jsonl: lm_loss, grad_norm and the MoE losses
same_moe() {
    if [ ! -s "$2" ] || [ ! -s "$3" ]; then bad "$1: missing metrics"; return; fi
    if paste -d' ' "$2" "$3" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":" || $i == "\"load_balancing_loss\":" || $i == "\"z_loss\":") { v[n++] = $(i + 1) + 0 } }
        { h = n / 2; if (h < 2) bad = 1; for (k = 0; k < h; k++) { a = v[k]; b = v[k + h]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } ; lines++ }
        END { exit (bad || lines != 4) }'; then ok "$1: 4 iterations, loss, grad norm and MoE losses within 2e-5"
    else bad "$1"; paste -d'\n' "$2" "$3" | cut -c1-200; fi
}
run() { # NAME ARGS...
    rn=$1
    shift
    timeout -k 5 120 "$MTC" train $TINY --metrics "$D/$rn.jsonl" "$@" >"$D/$rn.log" 2>&1 || { bad "$rn run"; tail -5 "$D/$rn.log"; }
}
# pair NAME KEY MODEL LAYOUT ARGS...: the layout against the serial run of
# the same model flags (MODEL: words joined by ~), run once per KEY
pair() {
    pn=$1 key=$2 model=$(echo "$3" | tr '~' ' ')
    shift 3
    [ -s "$D/s_$key.jsonl" ] || run "s_$key" $model
    run "$pn" $model "$@"
    same_moe "$pn" "$D/s_$key.jsonl" "$D/$pn.jsonl"
}
M=$(echo "$MOE" | tr ' ' '~')
pair dp2 base "$M" --world-size 2
pair dp2_distopt base "$M" --world-size 2 --use-distributed-optimizer
pair pp2 base "$M" --world-size 2 --pp 2
for disp in allgather alltoall; do
    pair "ep2_$disp" base "$M" --world-size 2 --ep 2 --moe-token-dispatcher-type $disp
    pair "ep4_$disp" base "$M" --world-size 4 --ep 4 --moe-token-dispatcher-type $disp
    pair "ep2_dp2_distopt_$disp" base "$M" --world-size 4 --ep 2 --use-distributed-optimizer --overlap-grad-reduce --moe-token-dispatcher-type $disp
    pair "ep2_pp2_$disp" base "$M" --world-size 4 --ep 2 --pp 2 --moe-token-dispatcher-type $disp
    pair "cap_probs_ep2_$disp" cap "$M~--moe-expert-capacity-factor~1.0" --world-size 2 --ep 2 --moe-token-dispatcher-type $disp
done
pair cap_position_ep2 pos "$M~--moe-expert-capacity-factor~1.0~--moe-token-drop-policy~position" --world-size 2 --ep 2 --moe-token-dispatcher-type alltoall
pair cap_pad_ep4 pad "$M~--moe-expert-capacity-factor~1.5~--moe-pad-expert-input-to-capacity" --world-size 4 --ep 4 --moe-token-dispatcher-type alltoall
grep -q '"dropped_fraction": 0[.]' "$D/cap_probs_ep2_allgather.jsonl" && ok "capacity 1.0 drops tokens (dropped_fraction > 0)" || bad "capacity drops nothing"
SIG="--num-experts~4~--moe-router-score-function~sigmoid~--moe-router-enable-expert-bias~--moe-router-bias-update-rate~0.01~--moe-router-load-balancing-type~none"
pair sigmoid_bias_ep2_dp2 sig "$SIG" --world-size 4 --ep 2 --moe-token-dispatcher-type alltoall
pair seq_aux_ep2 seq "--num-experts~4~--moe-aux-loss-coeff~0.01~--moe-router-load-balancing-type~seq_aux_loss" --world-size 2 --ep 2
pair shared_ep2 shared "$M~--moe-shared-expert-intermediate-size~48" --world-size 2 --ep 2 --moe-token-dispatcher-type alltoall
LL="--normalization~RMSNorm~--position-embedding-type~rope~--swiglu~--ffn-hidden-size~48~--disable-bias-linear~--untie-embeddings-and-output-weights~$M~--moe-layer-freq~[0,1]~--moe-router-pre-softmax"
pair llama_ep2_a2a llama "$LL" --world-size 2 --ep 2 --moe-token-dispatcher-type alltoall
pair recompute_ep2 base "$M" --world-size 2 --ep 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
pair cp2 lr3 "$M~--lr~1e-3" --world-size 2 --cp 2
pair cp2_ep2 lr3 "$M~--lr~1e-3" --world-size 4 --cp 2 --ep 2 --moe-token-dispatcher-type alltoall
grep -q "mixture of experts: 2 of 2 layers, 4 experts (ffn 128), top-2 softmax, dropless; parameters: [0-9]* total, [0-9]* active per token" "$D/ep2_alltoall.log" \
    && ok "banner: total and active parameters" || { bad "banner"; grep "mixture" "$D/ep2_alltoall.log"; }
grep -q "lm loss: [0-9.E+-]* | load_balancing_loss: [0-9.E+-]* | z_loss: [0-9.E+-]* | loss scale" "$D/ep2_alltoall.log" \
    && ok "log line: load_balancing_loss and z_loss after the lm loss" || { bad "log line"; grep iteration "$D/ep2_alltoall.log" | head -1; }
grep -q '"moe_layers": \[{"layer": 0, "tokens_per_expert": {"min": [0-9]*, "max": [0-9]*, "p50": [0-9]*, "p90": [0-9]*}, "dropped_fraction": 0}' "$D/ep2_alltoall.jsonl" \
    && ok "--metrics: per-layer tokens per expert and dropped fraction" || { bad "metrics"; head -1 "$D/ep2_alltoall.jsonl"; }

if [ "${MTC_HAVE_MPI:-OFF}" = ON ] && [ -n "${MPIEXEC:-}" ]; then
    for disp in allgather alltoall; do
        timeout -k 5 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $TINY $MOE --ep 2 \
            --moe-token-dispatcher-type $disp --metrics "$D/mpi_$disp.jsonl" >"$D/mpi_$disp.log" 2>&1 || { bad "mpirun ep 2 $disp"; tail -5 "$D/mpi_$disp.log"; }
        same_moe "mpirun ep=2 $disp" "$D/s_base.jsonl" "$D/mpi_$disp.jsonl"
    done
else
    echo "skip mpirun cases: MPI not built"
fi

# refusals: one line, exit 2, nothing written
refuse "experts % ep" "num-experts=6 is not divisible by expert-model-parallel-size=4" --world-size 4 --num-experts 6 --ep 4
refuse "ep without experts" "expert-model-parallel-size=2 needs --num-experts" --world-size 2 --ep 2
refuse "expert bias with softmax" "enable-expert-bias needs --moe-router-score-function sigmoid" --num-experts 4 --moe-router-enable-expert-bias
refuse "softmax top-1" "moe-router-topk=1 with the softmax score function needs" --num-experts 4 --moe-router-topk 1
refuse "pad without capacity" "pad-expert-input-to-capacity needs --moe-expert-capacity-factor" --num-experts 4 --moe-pad-expert-input-to-capacity
refuse "tp without sp" "with --num-experts needs --sequence-parallel" --world-size 2 --tp 2 --num-experts 4
refuse "groups" "num-experts=4 is not divisible by moe-router-num-groups=3" --num-experts 4 --moe-router-num-groups 3 --moe-router-group-topk 1
refuse "topk > experts" "moe-router-topk=5 must be in \[1, num-experts=4\]" --num-experts 4 --moe-router-topk 5
refuse "dispatcher" "moe-token-dispatcher-type=flex is unknown" --num-experts 4 --moe-token-dispatcher-type flex
refuse "layer freq" "moe-layer-freq=\[1,2\] is neither an integer nor a list" --num-experts 4 --moe-layer-freq "[1,2]"
refuse "layer freq length" "moe-layer-freq has 3 entries but num-layers=2" --num-experts 4 --moe-layer-freq "[1,0,1]"
refuse "capacity" "moe-expert-capacity-factor=0 must be > 0" --num-experts 4 --moe-expert-capacity-factor 0
refuse "score function" "moe-router-score-function=tanh is unknown" --num-experts 4 --moe-router-score-function tanh
exit $fail
