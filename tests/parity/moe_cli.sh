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
# Experts sharded over EP: the banner's parameter count drops by the experts
# other EP ranks hold; dp 2 x ep 2 (expert-DP 1) and dp 4 x ep 2 (expert-DP
# 2) with the distributed optimizer (its expert instance sharded over
# expert-DP, also in two instances); a checkpoint saved at ep 2 (4 iterations)
# loads at ep 1 and at ep 4 (and ep 2 x dp 2 distopt) and continues as the
# serial 8-iteration run; the MoE flags in its metadata are checked on --load.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/moe_lib.sh"
MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"

M=$(echo "$MOE" | tr ' ' '~')
# dp 2 x ep 2 (expert-DP 1) and dp 4 x ep 2 (expert-DP 2) with the distributed optimizer
pair dp2_ep2_distopt base "$M" --world-size 2 --ep 2 --use-distributed-optimizer
pair dp4_ep2_distopt base "$M" --world-size 4 --ep 2 --use-distributed-optimizer --moe-token-dispatcher-type alltoall
# two dense optimizer instances beside the expert one; several expert buckets with both overlaps;
# a pipeline stage without MoE layers (no expert buffer there) under ep 2
pair ep2_inst2 base "$M" --world-size 4 --ep 2 --use-distributed-optimizer --num-distributed-optimizer-instances 2
# 8 ranks, expert-DP 4 in two instances: expert shards over the intra-instance slice, then an
# all-reduce across the instances (Megatron's intra_expt_dp_group)
pair ep2_edp4_inst2 gb16 "$M~--global-batch-size~16" --world-size 8 --ep 2 --use-distributed-optimizer --num-distributed-optimizer-instances 2 --overlap-grad-reduce --ddp-bucket-size 3000
pair ep2_buckets_overlap base "$M" --world-size 4 --ep 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 2000
pair ep2_pp2_half freq "$M~--moe-layer-freq~[1,0]" --world-size 4 --ep 2 --pp 2 --use-distributed-optimizer
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

# the experts are sharded: 2 layers x 4 experts of 8352 parameters (fc1 128 x 32 + 128,
# fc2 32 x 128 + 32); ep 2 holds 2 of them per layer, ep 4 one
count() { sed -n 's/.*number of parameters on (tensor, pipeline) model parallel rank (0, 0): \([0-9]*\).*/\1/p' "$1"; }
cs=$(count "$D/s_base.log") c2=$(count "$D/ep2_alltoall.log") c4=$(count "$D/ep4_alltoall.log")
[ -n "$cs" ] && [ "$((cs - c2))" = $((2 * 2 * 8352)) ] && [ "$((cs - c4))" = $((2 * 3 * 8352)) ] \
    && ok "banner: ep 2 / ep 4 ranks hold E/ep experts ($cs, $c2, $c4 parameters)" || bad "parameter counts $cs $c2 $c4"

# checkpoints: saved at ep 2 (+ dp 2 with the distributed optimizer), loaded at ep 1, 4, 2 x dp 2
CK="$MOE --lr-decay-iters 8"
run ck_full $CK --train-iters 8
run ck_a $CK --train-iters 4 --world-size 4 --ep 2 --use-distributed-optimizer --save "$D/ck"
run ck_a1 $CK --train-iters 4 --world-size 2 --ep 2 --save "$D/ck1"
tail -4 "$D/ck_full.jsonl" >"$D/ck_tail.jsonl"
for ld in "ep1:" "ep4:--world-size 4 --ep 4" "ep2dp2:--world-size 4 --ep 2 --use-distributed-optimizer" "ep4_plain:--world-size 4 --ep 4 --moe-token-dispatcher-type alltoall"; do
    nm=${ld%%:*} args=${ld#*:}
    src=ck; [ "$nm" = ep4_plain ] && src=ck1
    run "ck_$nm" $CK --train-iters 8 $args --load "$D/$src"
    grep -q "successfully loaded checkpoint from .*iteration 4, consumed samples 32, optimizer state" "$D/ck_$nm.log" \
        || { bad "ckpt $nm: no load line"; tail -3 "$D/ck_$nm.log"; }
    same_moe "checkpoint saved at ep 2 ($src), loaded at $nm, iterations 5-8" "$D/ck_tail.jsonl" "$D/ck_$nm.jsonl"
done
# two optimizer instances (expert shards on the intra-instance slice of expert-DP) -> serial
run ck16_full $CK --global-batch-size 16 --train-iters 8
run ck16_a $CK --global-batch-size 16 --train-iters 4 --world-size 8 --ep 2 --use-distributed-optimizer --num-distributed-optimizer-instances 2 --save "$D/ck16"
run ck16_b $CK --global-batch-size 16 --train-iters 8 --load "$D/ck16"
tail -4 "$D/ck16_full.jsonl" >"$D/ck16_tail.jsonl"
same_moe "checkpoint saved at ep 2 x expert-DP 4 in two instances, loaded serially" "$D/ck16_tail.jsonl" "$D/ck16_b.jsonl"

# the checkpoint's metadata records the MoE flags: --load refuses the ones that change the
# model, one line and exit 2, takes changed training-only ones; generate adopts them
refuse "--load without the MoE flags" "was saved with num-experts=4 but this run has 0 (pass the saved model's MoE flags)" --lr-decay-iters 8 --train-iters 8 --load "$D/ck"
refuse "--load with another router" "was saved with moe-router-pre-softmax=0 but this run has 1" $CK --moe-router-pre-softmax --train-iters 8 --load "$D/ck"
refuse "--load with another layer pattern" "was saved with moe-layer-freq=\[1,1\] but this run has \[1,0\]" $CK --moe-layer-freq "[1,0]" --train-iters 8 --load "$D/ck"
run ck_train_flags $CK --moe-z-loss-coeff 0.01 --moe-expert-capacity-factor 2.0 --train-iters 6 --load "$D/ck"
grep -q "successfully loaded checkpoint" "$D/ck_train_flags.log" && ok "--load with other training-only MoE flags (z-loss, capacity)" || { bad "training-only MoE flags"; tail -3 "$D/ck_train_flags.log"; }
"$MTC" generate --load "$D/ck" --prompt-ids 1,2,3 --max-new-tokens 3 >"$D/gen.out" 2>"$D/gen.err" && [ -s "$D/gen.out" ] \
    && ok "generate adopts the saved MoE model: $(cat "$D/gen.out")" || { bad "generate of an MoE checkpoint"; cat "$D/gen.err"; }
"$MTC" export --load "$D/ck" --format safetensors --out "$D/x.safetensors" >"$D/ex.out" 2>"$D/ex.err"
st=$?
[ $st = 2 ] && [ "$(wc -l <"$D/ex.err")" -eq 1 ] && grep -q "no Hugging Face class holds a GPT-2-style" "$D/ex.err" \
    && ok "export refuses a GPT-2-style MoE checkpoint: $(cat "$D/ex.err")" || { bad "export of a GPT-2 MoE checkpoint (status $st)"; cat "$D/ex.err"; }

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
refuse "dispatcher" "moe-token-dispatcher-type=allreduce is unknown" --num-experts 4 --moe-token-dispatcher-type allreduce
refuse "layer freq" "moe-layer-freq=\[1,2\] is neither an integer nor a list" --num-experts 4 --moe-layer-freq "[1,2]"
refuse "layer freq length" "moe-layer-freq has 3 entries but num-layers=2" --num-experts 4 --moe-layer-freq "[1,0,1]"
refuse "capacity" "moe-expert-capacity-factor=0 must be > 0" --num-experts 4 --moe-expert-capacity-factor 0
refuse "score function" "moe-router-score-function=tanh is unknown" --num-experts 4 --moe-router-score-function tanh
exit $fail
