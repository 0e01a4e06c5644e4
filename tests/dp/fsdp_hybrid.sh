#!/bin/sh
# tests/dp/fsdp_hybrid.sh - Megatron-FSDP's HFSDP (--outer-dp-sharding-strategy
# optim with --num-distributed-optimizer-instances 2, optim_grads_params):
# params and grads sharded over the instance's DP group as HSDP, the
# optimizer state over the instances too (each unit's shard reduce-scattered
# over the inter-instance group once per step, AdamW on the slice, the
# slices all-gathered back). Against the serial run (lm loss and grad norm
# per iteration within 2e-5, HSDP's tolerance): 2 instances x 2 with 2
# microbatches accumulated, with overlap, with --bf16, MoE ep 2 (the expert
# buffer's slices over the expert inter-instance group), pp 2 (and with
# vpp 2), tp 2 + SP and cp 2 x (2 x 2), merged units with the double buffer;
# --log-params-norm equal to the serial run's; --metrics' optimizer state
# of the last rank is its slice's params exactly (closed form of the unit
# layout: 1/(2 x 2) of each unit, padded to whole 4 KiB pages per slice),
# less than half HSDP's; checkpoints
# with the optimizer state saved from HFSDP resume in HFSDP, serial, FSDP dp 4,
# HSDP and the distributed optimizer on tp 2, and saved from those resume in
# HFSDP, equal to the uninterrupted run; mtc plan's memory of the same
# HFSDP run equals the measured (optimizer state, params) exactly.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
H="--use-megatron-fsdp --num-distributed-optimizer-instances 2 --outer-dp-sharding-strategy optim"
run() {
    name=$1
    shift
    "$MTC" train $TINY "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name run"; cat "$D/$name.log"; }
}

run s
run hf --world-size 4 --micro-batch-size 1 $H
same_losses "HFSDP 2 instances x 2, 2 microbatches" "$D/s.jsonl" "$D/hf.jsonl"
grep -q '"INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": {[^}]*"reduce_scatter"' "$D/hf.jsonl" &&
    ! grep -q '"INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": {[^}]*"all_reduce"' "$D/hf.jsonl" &&
    ok "HFSDP reduce-scatters over the instances (no all-reduce there)" ||
    { bad "HFSDP's inter-instance collectives"; tail -1 "$D/hf.jsonl"; }
run ov --world-size 4 --micro-batch-size 1 $H --overlap-grad-reduce --overlap-param-gather
same_losses "HFSDP 2 x 2, overlap" "$D/s.jsonl" "$D/ov.jsonl"
# the bf16 engine pinned: --bf16-gemm auto picks by this machine's rates
# at each run's micro batch, and the two runs' differ
run sb --bf16 --bf16-gemm dnnl-bf16
run bf --world-size 4 --micro-batch-size 1 $H --bf16 --bf16-gemm dnnl-bf16
same_losses "HFSDP 2 x 2 --bf16" "$D/sb.jsonl" "$D/bf.jsonl"
# --log-params-norm sums the slices' params over the whole DP group
run pn --log-params-norm
run hpn --world-size 4 --micro-batch-size 1 $H --log-params-norm
pn() { grep -o '"params_norm": [0-9.e+-]*' "$D/$1.jsonl" | awk '{ print $2 }'; }
pn pn >"$D/pn.n"
pn hpn >"$D/hpn.n"
if paste -d' ' "$D/pn.n" "$D/hpn.n" |
    awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-6) bad = 1; n++ } END { exit bad || n != 4 }'; then
    ok "HFSDP --log-params-norm equals the serial run's (1e-6)"
else bad "HFSDP params norm"; paste -d' ' "$D/pn.n" "$D/hpn.n"; fi
MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
run ms $MOE
run me $MOE --world-size 4 --ep 2 $H
same_losses "HFSDP MoE ep=2: experts' slices over the expert inter-instance group" "$D/ms.jsonl" "$D/me.jsonl"
run pp --world-size 8 --pp 2 --micro-batch-size 1 $H --overlap-grad-reduce --overlap-param-gather
same_losses "HFSDP pp=2 x (2 x 2), tied embedding's slice over EMBEDDING_GROUP" "$D/s.jsonl" "$D/pp.jsonl"
run tp --world-size 8 --tp 2 --sequence-parallel --micro-batch-size 1 $H
same_losses "HFSDP tp=2 + SP x (2 x 2)" "$D/s.jsonl" "$D/tp.jsonl"

run cp --world-size 8 --cp 2 --micro-batch-size 1 $H
same_losses "HFSDP cp=2 x (2 x 2): the slices of the DP x CP shard" "$D/s.jsonl" "$D/cp.jsonl"
run us --world-size 4 --micro-batch-size 1 $H --suggested-communication-unit-size 20000 --fsdp-double-buffer
same_losses "HFSDP merged units (20000), --fsdp-double-buffer" "$D/s.jsonl" "$D/us.jsonl"
run s4 --num-layers 4
run pv --num-layers 4 --world-size 8 --pp 2 --num-layers-per-virtual-pipeline-stage 1 --micro-batch-size 1 $H
same_losses "HFSDP pp=2 x vpp 2 x (2 x 2)" "$D/s4.jsonl" "$D/pv.jsonl"

# memory: units (floats) embedding (64 + 16) x 128 = 10240, layer 12 C^2 +
# 13 C = 198272 (x4), head 2 C = 256, padded to whole pages per slice of
# 2 x 2 ranks (multiples of 4096): 12288, 200704, 4096. The last rank
# (inner 1, outer 1) holds the last quarter of each: 1024 + 4 x 47744 + 0
# params of m and v; HSDP's last rank the second half of each unit padded
# to 2 x 1024: 5120 + 4 x 98944 + 0.
M="--num-layers 4 --hidden-size 128 --train-iters 2"
if [ "$(getconf PAGESIZE 2>/dev/null)" = 4096 ]; then
    run m1 $M
    run m2 $M --world-size 4 --use-megatron-fsdp --num-distributed-optimizer-instances 2
    run m3 $M --world-size 4 $H
    f() { grep -o "\"optim_state_bytes\": [0-9]*" "$D/$1.jsonl" | tail -1 | awk '{ print $2 }'; }
    S=$(f m1) HS=$(f m2) HF=$(f m3)
    if [ "$S" = $((8 * (10240 + 4 * 198272 + 256))) ] && [ "$HS" = $((8 * (5120 + 4 * 98944))) ] &&
        [ "$HF" = $((8 * (1024 + 4 * 47744))) ]; then
        ok "optimizer state per rank: serial $S, HSDP $HS, HFSDP $HF (its quarter of every unit)"
    else bad "optimizer state: serial '$S' HSDP '$HS' HFSDP '$HF'"; fi
    # mtc plan prices HFSDP's memory to the byte: the last rank's optimizer
    # slice, the resident params (HSDP's: shard + 2 units of the slice-padded
    # layout), the gradients' bound
    pl() { "$MTC" plan --num-layers 4 --hidden-size 128 --num-attention-heads 4 --vocab-size 60 \
        --make-vocab-size-divisible-by 16 --seq-length 16 --micro-batch-size 2 --global-batch-size 8 \
        --world-size 4 --machine dgx-a100 --fp32 $H --explain tp1-pp1-do "$@" 2>&1; }
    g() { grep -o "\"$2\": [0-9]*" "$D/$1.jsonl" | tail -1 | awk '{ print $2 }'; }
    P=$(g m3 param_bytes) G=$(g m3 grad_bytes)
    QO=$(pl --dp-rank 3 | sed -n 's/^  optimizer state .* \([0-9]*\) elements x 8 B.*/\1/p')
    Q=$(pl | grep "^  FSDP")
    QP=$(echo "$Q" | sed 's/.*params \([0-9]*\) B.*/\1/') QG=$(echo "$Q" | sed 's/.*at most \([0-9]*\) B.*/\1/')
    if [ -n "$QO" ] && [ $((8 * QO)) = "$HF" ] && [ "$QP" = "$P" ] && [ -n "$QG" ] && [ "$QG" -ge "$G" ]; then
        ok "mtc plan HFSDP: optimizer state $((8 * QO)) (dp rank 3), params $QP = measured, gradients <= $QG"
    else bad "mtc plan HFSDP memory: optim '$QO' x 8 against $HF, '$Q' against params $P, grads $G"; fi
else
    ok "memory check skipped: page size $(getconf PAGESIZE) (the closed form assumes 4096)"
fi

# checkpoints with the optimizer state, resharded: saved at 4 iterations,
# resumed to 8, equal to an uninterrupted 8 (its last 4 iterations)
ckpt_reference
ckpt_run ca 4 --world-size 4 $H --save "$D/ck"
ckpt_run cb 8 --world-size 4 $H --load "$D/ck"
grep -q "successfully loaded checkpoint from .*iteration 4, .*optimizer state" "$D/cb.log" || { bad "no load line"; cat "$D/cb.log"; }
same_losses "HFSDP save -> HFSDP resume" "$D/full4.jsonl" "$D/cb.jsonl"
ckpt_run cc 8 --load "$D/ck"
same_losses "HFSDP save -> serial resume" "$D/full4.jsonl" "$D/cc.jsonl"
ckpt_run cd 8 --world-size 4 --use-megatron-fsdp --load "$D/ck"
same_losses "HFSDP save -> FSDP dp=4 resume" "$D/full4.jsonl" "$D/cd.jsonl"
ckpt_run ce 8 --world-size 4 --use-megatron-fsdp --num-distributed-optimizer-instances 2 --load "$D/ck"
same_losses "HFSDP save -> HSDP resume" "$D/full4.jsonl" "$D/ce.jsonl"
ckpt_run cf 4 --world-size 4 --tp 2 --use-distributed-optimizer --save "$D/ck2"
ckpt_run cg 8 --world-size 4 $H --load "$D/ck2"
same_losses "distopt tp=2 x dp=2 save -> HFSDP resume" "$D/full4.jsonl" "$D/cg.jsonl"
ckpt_run ch 4 --world-size 4 --use-megatron-fsdp --num-distributed-optimizer-instances 2 --save "$D/ck3"
ckpt_run ci 8 --world-size 4 $H --load "$D/ck3"
same_losses "HSDP save -> HFSDP resume" "$D/full4.jsonl" "$D/ci.jsonl"
ckpt_run cj 8 --world-size 8 --pp 2 $H --load "$D/ck"
same_losses "HFSDP save -> HFSDP pp=2 x (2 x 2) resume" "$D/full4.jsonl" "$D/cj.jsonl"
exit $fail
