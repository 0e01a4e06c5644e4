#!/bin/sh
# tests/parity/moe_tp_cli.sh - mixture of experts under tensor parallelism
# (always with sequence parallelism, as Megatron's MoE layer needs) and
# expert-tensor parallelism, against the serial MoE run: per-iteration lm
# loss, grad norm, load_balancing_loss and z_loss within 2e-5 (4 iterations
# of the tiny model, 4 experts, top-2, aux loss and z-loss, dropout on).
#  - etp 1 (whole experts on every TP rank; GPT-2 with biases): tp 2; tp 2 x
#    ep 2 with both dispatchers; tp 2 x pp 2; tp 2 x dp 2 with the
#    distributed optimizer; a shared expert split over TP; seq_aux_loss;
#    sigmoid routing with the expert bias; tp 4 x ep 2 (expert-DP of TP
#    ranks with DP x CP 1), with the distributed optimizer too.
#  - etp = tp = 2 (fc1 column- and fc2 row-split over the expert-TP group;
#    --disable-bias-linear, Megatron's rule): ep 1 and ep 2 with both
#    dispatchers, pp 2, cp 2 (and cp 2 x ep 2 at etp 1 and 2), a Llama-style SwiGLU MoE (split [gate | up]
#    blocks, with --recompute-modules mlp too); a checkpoint saved at tp 2 etp 2 ep 2 loaded serially and at
#    tp 2 etp 1, one saved at tp 4 etp 1 ep 2 (distributed optimizer) loaded at tp 2 etp 2 ep 2.
#  - capacity: Megatron computes it on each rank's own tokens, under SP the
#    TP rank's half sequences, so a capacity run at tp 2 drops other tokens
#    than the serial run. Every tp 2 layout of one capacity model is checked
#    against the tp 2, ep 1, etp 1 run instead (the same tokens dropped:
#    equal dropped fractions, losses and grad norms), with probs and position
#    policies and padding to capacity.
#  - mpirun: tp 2 etp 2 with both dispatchers, tp 2 etp 1; 4 processes at
#    tp 2 etp 2 ep 2 with the distributed optimizer.
# Refusals of the layouts Megatron (or mtc) does not train: one line, exit 2.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/moe_lib.sh"
MOE="--num-experts~4~--moe-router-topk~2~--moe-aux-loss-coeff~0.01~--moe-z-loss-coeff~0.001"
NB="$MOE~--disable-bias-linear"
SP="--tp 2 --sequence-parallel"

# same_drops NAME REF.jsonl LAYOUT.jsonl: the last step's tokens per expert and dropped fraction
same_drops() {
    a=$(tail -1 "$2" | grep -o '"moe_layers": \[[^]]*\]') b=$(tail -1 "$3" | grep -o '"moe_layers": \[[^]]*\]')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$1: the same tokens per expert and dropped fraction"
    else bad "$1: drops differ"; echo "$a"; echo "$b"; fi
}

# ---- etp 1: whole experts on every TP rank ----
# (the base model at lr 1e-3: at 1e-2 the row-parallel attention's other
# summation order flips a near-tied top-k by iteration 3, as under CP in
# moe_cli.sh, and the runs then part by more than 2e-5 while equally valid)
B1="$MOE~--lr~1e-3"
pair tp2_etp1 base "$B1" --world-size 2 $SP --etp 1
for disp in allgather alltoall; do
    pair "tp2_etp1_ep2_$disp" base "$B1" --world-size 4 $SP --etp 1 --ep 2 --moe-token-dispatcher-type $disp
done
pair tp2_etp1_pp2 base "$B1" --world-size 4 $SP --etp 1 --pp 2
pair tp2_etp1_dp2_distopt base "$B1" --world-size 4 $SP --etp 1 --use-distributed-optimizer --moe-token-dispatcher-type alltoall
pair tp2_etp1_shared_ep2 shared "$MOE~--moe-shared-expert-intermediate-size~48" --world-size 4 $SP --etp 1 --ep 2 --moe-token-dispatcher-type alltoall
pair tp2_etp1_seq_aux seq "--num-experts~4~--moe-aux-loss-coeff~0.01~--moe-router-load-balancing-type~seq_aux_loss" --world-size 2 $SP --etp 1
SIG="--num-experts~4~--moe-router-score-function~sigmoid~--moe-router-enable-expert-bias~--moe-router-bias-update-rate~0.01~--moe-router-load-balancing-type~none"
pair tp2_etp1_sigmoid_bias_ep2 sig "$SIG" --world-size 4 $SP --etp 1 --ep 2
# tp 4 x etp 1 x ep 2: each EP group lies inside a TP group and expert-DP (2 ranks, with
# DP x CP 1) holds TP ranks, whose copies of an expert are replicas summed by the expert
# buffer alone (a TP sum on top would add another EP rank's expert)
for disp in allgather alltoall; do
    pair "tp4_etp1_ep2_$disp" base "$B1" --world-size 4 --tp 4 --sequence-parallel --etp 1 --ep 2 --moe-token-dispatcher-type $disp
done
pair tp4_etp1_ep2_distopt base "$B1" --world-size 4 --tp 4 --sequence-parallel --etp 1 --ep 2 --use-distributed-optimizer --overlap-grad-reduce

# ---- etp = tp = 2: experts split over the expert-TP group ----
for disp in allgather alltoall; do
    pair "tp2_etp2_$disp" nb "$NB" --world-size 2 $SP --moe-token-dispatcher-type $disp
    pair "tp2_etp2_ep2_$disp" nb "$NB" --world-size 4 $SP --etp 2 --ep 2 --moe-token-dispatcher-type $disp
done
pair tp2_etp2_pp2 nb "$NB" --world-size 4 $SP --etp 2 --pp 2 --moe-token-dispatcher-type alltoall
pair tp2_etp2_ep2_distopt nb "$NB" --world-size 4 $SP --ep 2 --use-distributed-optimizer --overlap-grad-reduce
LL="--normalization~RMSNorm~--position-embedding-type~rope~--swiglu~--ffn-hidden-size~48~--disable-bias-linear~--untie-embeddings-and-output-weights~$MOE~--moe-layer-freq~[0,1]~--moe-router-pre-softmax"
pair llama_tp2_etp2_ep2 llama "$LL" --world-size 4 $SP --ep 2 --moe-token-dispatcher-type alltoall
# --recompute-modules mlp recomputes the dense layer's MLP and leaves the MoE layer's (Megatron)
pair llama_tp2_etp2_recompute_mlp llama "$LL" --world-size 2 $SP --recompute-granularity selective --recompute-modules mlp
pair llama_tp2_etp2_shared llama_sh "$LL~--moe-shared-expert-intermediate-size~32" --world-size 2 $SP

pair tp2_etp2_cp2 nb3 "$NB~--lr~1e-3" --world-size 4 $SP --cp 2 --moe-token-dispatcher-type alltoall
# both generators at once on 8 ranks: tp 2 x cp 2 x dp 2 dense, ep 2 with etp 1 (expert-DP 4)
# or etp 2 (expert-DP 2) for the experts
pair tp2_etp1_cp2_ep2 base "$B1" --world-size 8 $SP --etp 1 --cp 2 --ep 2 --moe-token-dispatcher-type alltoall
pair tp2_etp2_cp2_ep2_distopt nb3 "$NB~--lr~1e-3" --world-size 8 $SP --cp 2 --ep 2 --use-distributed-optimizer

# ---- checkpoints: the ETP slices save whole experts; any layout loads them ----
# 2 iterations at tp 2 etp 2 ep 2 saved, then iterations 3 and 4 serially and
# at tp 2 etp 1 from the checkpoint against the serial run's 3 and 4
CK="$(echo "$NB" | tr '~' ' ') --lr-decay-iters 4"
T2=$(echo "$TINY" | sed 's/--train-iters 4/--train-iters 2/')
timeout -k 5 120 "$MTC" train $T2 $CK --world-size 4 $SP --ep 2 --save "$D/ck" >"$D/ck.log" 2>&1 || { bad "save at tp 2 etp 2 ep 2"; tail -3 "$D/ck.log"; }
run ck_serial $CK
for lay in serial tp2_etp1; do
    case $lay in serial) la="" ;; *) la="--world-size 2 $SP --etp 1" ;; esac
    run "ck_load_$lay" $CK $la --load "$D/ck"
    tail -2 "$D/ck_serial.jsonl" >"$D/ck_ref.tail"
    if [ "$(wc -l <"$D/ck_load_$lay.jsonl")" -eq 2 ] && paste -d' ' "$D/ck_ref.tail" "$D/ck_load_$lay.jsonl" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":" || $i == "\"load_balancing_loss\":" || $i == "\"z_loss\":") { v[n++] = $(i + 1) + 0 } }
        { h = n / 2; if (h < 2) bad = 1; for (k = 0; k < h; k++) { a = v[k]; b = v[k + h]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } }
        END { exit bad }'; then ok "saved at tp 2 etp 2 ep 2, loaded $lay: iterations 3 and 4 within 2e-5"
    else bad "checkpoint loaded $lay"; cat "$D/ck_load_$lay.jsonl" | cut -c1-200; fi
done
# saved at tp 4 etp 1 ep 2 with the distributed optimizer (whole experts, written by one
# rank of their expert-DP group of TP ranks, optimizer state from the expert instance),
# loaded at tp 2 etp 2 ep 2 (the experts' ETP slices) and continuing as the serial run
timeout -k 5 120 "$MTC" train $T2 $CK --world-size 4 --tp 4 --sequence-parallel --etp 1 --ep 2 --use-distributed-optimizer --save "$D/ck4" >"$D/ck4.log" 2>&1 || { bad "save at tp 4 etp 1 ep 2"; tail -3 "$D/ck4.log"; }
run ck4_load $CK --world-size 4 $SP --ep 2 --load "$D/ck4"
if [ "$(wc -l <"$D/ck4_load.jsonl")" -eq 2 ] && paste -d' ' "$D/ck_ref.tail" "$D/ck4_load.jsonl" | awk '
    { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":" || $i == "\"load_balancing_loss\":" || $i == "\"z_loss\":") { v[n++] = $(i + 1) + 0 } }
    { h = n / 2; if (h < 2) bad = 1; for (k = 0; k < h; k++) { a = v[k]; b = v[k + h]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } }
    END { exit bad }'; then ok "saved at tp 4 etp 1 ep 2 (distributed optimizer), loaded at tp 2 etp 2 ep 2: iterations 3 and 4 within 2e-5"
else bad "checkpoint saved at tp 4 etp 1 ep 2"; cut -c1-200 "$D/ck4_load.jsonl"; fi

# ---- capacity: against the tp 2, etp 1, ep 1 run (per-rank capacity) ----
REF_cap="--world-size 2 $SP --etp 1" REF_pos=$REF_cap REF_pad=$REF_cap
CAP="$NB~--moe-expert-capacity-factor~1.0"
for disp in allgather alltoall; do
    pair "cap_tp2_etp2_$disp" cap "$CAP" --world-size 2 $SP --moe-token-dispatcher-type $disp
    pair "cap_tp2_etp2_ep2_$disp" cap "$CAP" --world-size 4 $SP --ep 2 --moe-token-dispatcher-type $disp
    pair "cap_tp2_etp1_ep2_$disp" cap "$CAP" --world-size 4 $SP --etp 1 --ep 2 --moe-token-dispatcher-type $disp
    same_drops "cap_tp2_etp2_ep2_$disp" "$D/s_cap.jsonl" "$D/cap_tp2_etp2_ep2_$disp.jsonl"
done
grep -q '"dropped_fraction": 0[.]' "$D/s_cap.jsonl" && ok "capacity 1.0 at tp 2 drops tokens (dropped_fraction > 0)" || bad "capacity drops nothing"
pair cap_position_tp2_etp2_ep2 pos "$CAP~--moe-token-drop-policy~position" --world-size 4 $SP --ep 2 --moe-token-dispatcher-type alltoall
same_drops cap_position_tp2_etp2_ep2 "$D/s_pos.jsonl" "$D/cap_position_tp2_etp2_ep2.jsonl"
pair cap_pad_tp2_etp2_ep2 pad "$NB~--moe-expert-capacity-factor~1.5~--moe-pad-expert-input-to-capacity" --world-size 4 $SP --ep 2 --moe-token-dispatcher-type alltoall
# a capacity no TP rank's shard reaches drops nothing: the serial dropless run
pair cap_unreached_tp2_etp2 nb "$NB~--moe-expert-capacity-factor~4.0" --world-size 2 $SP --moe-token-dispatcher-type alltoall

grep -q '"moe_layers": \[{"layer": 0, "tokens_per_expert": {"min": [0-9]*, "max": [0-9]*, "p50": [0-9]*, "p90": [0-9]*}, "dropped_fraction": 0}' "$D/tp2_etp2_ep2_alltoall.jsonl" \
    && ok "--metrics at tp 2: per-layer tokens per expert" || { bad "metrics"; tail -1 "$D/tp2_etp2_ep2_alltoall.jsonl"; }
same_drops "tokens per expert at tp 2 etp 2 ep 2 = serial" "$D/s_nb.jsonl" "$D/tp2_etp2_ep2_alltoall.jsonl"

if [ "${MTC_HAVE_MPI:-OFF}" = ON ] && [ -n "${MPIEXEC:-}" ]; then
    mpi() { # NAME REF ARGS...
        mn=$1 mr=$2
        shift 2
        timeout -k 5 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $TINY --metrics "$D/$mn.jsonl" "$@" >"$D/$mn.log" 2>&1 || { bad "mpirun $mn"; tail -5 "$D/$mn.log"; }
        same_moe "mpirun $mn" "$D/s_$mr.jsonl" "$D/$mn.jsonl"
    }
    for disp in allgather alltoall; do
        mpi "mpi_tp2_etp2_$disp" nb $(echo "$NB" | tr '~' ' ') $SP --moe-token-dispatcher-type $disp
    done
    mpi mpi_tp2_etp1 base $(echo "$B1" | tr '~' ' ') $SP --etp 1
    # 4 processes: EP-sharded experts with their expert buffer and optimizer instance
    timeout -k 5 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --metrics "$D/mpi4.jsonl" $(echo "$NB" | tr '~' ' ') $SP --ep 2 --use-distributed-optimizer --moe-token-dispatcher-type alltoall >"$D/mpi4.log" 2>&1 || { bad "mpirun -np 4 tp 2 etp 2 ep 2"; tail -5 "$D/mpi4.log"; }
    same_moe "mpirun -np 4 tp 2 etp 2 ep 2 distributed optimizer" "$D/s_nb.jsonl" "$D/mpi4.jsonl"
else
    echo "skip mpirun cases: MPI not built"
fi

# refusals: one line, exit 2, nothing written
M4="--num-experts 4"
refuse "tp without sp" "tensor-model-parallel-size=2 with --num-experts needs --sequence-parallel" --world-size 2 --tp 2 $M4 --etp 1
refuse "expert biases with etp = tp" "expert-tensor-parallel-size=2 with expert biases" --world-size 2 $SP $M4
refuse "etp not 1 or tp" "expert-tensor-parallel-size=4 must be 1 or the tensor-parallel size 2" --world-size 4 $SP $M4 --etp 4 --disable-bias-linear
refuse "etp without tp" "expert-tensor-parallel-size=2 must be 1 or the tensor-parallel size 1" --world-size 2 $M4 --etp 2 --disable-bias-linear
refuse "moe ffn % etp" "moe-ffn-hidden-size=33 is not divisible by expert-tensor-parallel-size=2" --world-size 2 $SP $M4 --moe-ffn-hidden-size 33 --disable-bias-linear
refuse "shared ffn % tp" "moe-shared-expert-intermediate-size=33 is not divisible by tensor-model-parallel-size=2" --world-size 2 $SP $M4 --etp 1 --moe-shared-expert-intermediate-size 33
exit $fail
