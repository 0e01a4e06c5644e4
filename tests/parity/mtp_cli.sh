#!/bin/sh
# tests/parity/mtp_cli.sh - multi-token prediction (--mtp-num-layers 2,
# model/mtp.c) end to end on shm rank-threads against the serial run: the
# lm loss, the grad norm and both "mtp_k loss" values within 2e-5 under
# tp 2 + SP, pp 2 (MTP on the last stage, with the tied and the untied
# head: the wte copy there is in the embedding group), pp 2 with a layout
# string placing 'm' (an uneven split), pp 2 x vpp 2, dp 2 with the
# distributed optimizer and overlapped reduction, and an MoE model (the
# MTP layer is an MoE layer like the last decoder layer) under ep 2, and
# context parallelism (cp 2 with each comm type, cp 4, cp 2 x tp 2 + SP x
# pp 2), and Megatron-FSDP (each sharding strategy, overlapped, untied);
# a checkpoint saved under pp 2 resumes serially with the same
# losses; the log line carries Megatron's "mtp_1 loss"; bad MTP flags, a --load
# without the saved MTP depths and the Hugging Face export are refused.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/mtp_lib.sh"
run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $TINY $MTP "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name exited $?"; tail -3 "$D/$name.log"; }
}
run s
run tp --world-size 2 --tp 2 --sequence-parallel
same_mtp "mtp tp 2 + SP" "$D/s.jsonl" "$D/tp.jsonl"
run pp --world-size 2 --pp 2 --save "$D/ck"
same_mtp "mtp pp 2 (tied head)" "$D/s.jsonl" "$D/pp.jsonl"
run lay --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|tmmL'
same_mtp "mtp pp 2 layout Et|tmmL" "$D/s.jsonl" "$D/lay.jsonl"
run s4 --num-layers 4
run vpp --num-layers 4 --world-size 2 --pp 2 --vpp 2
same_mtp "mtp pp 2 x vpp 2" "$D/s4.jsonl" "$D/vpp.jsonl"
run lay4 --num-layers 4 --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|t|tt|mmL'
same_mtp "mtp pp 2 x vpp 2 layout Et|t|tt|mmL" "$D/s4.jsonl" "$D/lay4.jsonl"
run do --world-size 4 --pp 2 --use-distributed-optimizer --overlap-grad-reduce
same_mtp "mtp dp 2 x pp 2 distopt overlap" "$D/s.jsonl" "$D/do.jsonl"
run u --untie-embeddings-and-output-weights
run upp --untie-embeddings-and-output-weights --world-size 2 --pp 2
same_mtp "mtp pp 2 (untied head: MTP's own wte copy)" "$D/u.jsonl" "$D/upp.jsonl"
run ufs --untie-embeddings-and-output-weights --world-size 2 --use-megatron-fsdp
same_mtp "mtp Megatron-FSDP optim_grads_params, untied head" "$D/u.jsonl" "$D/ufs.jsonl"
# context parallelism: the shifted tokens and labels from the whole rows
# (Megatron's CP roll_tensor), every comm type, with TP + SP and pp
for t in p2p all_gather a2a; do
    run cp.$t --world-size 2 --cp 2 --cp-comm-type $t
    same_mtp "mtp cp 2 $t" "$D/s.jsonl" "$D/cp.$t.jsonl"
done
run cp4 --world-size 4 --cp 4
same_mtp "mtp cp 4 p2p" "$D/s.jsonl" "$D/cp4.jsonl"
run cptp --world-size 8 --cp 2 --tp 2 --sequence-parallel --pp 2
same_mtp "mtp cp 2 x tp 2 + SP x pp 2" "$D/s.jsonl" "$D/cptp.jsonl"
# Megatron-FSDP: each sharding strategy, overlapped gathers, the untied head
for st in optim optim_grads optim_grads_params; do
    run fsdp.$st --world-size 2 --use-megatron-fsdp --data-parallel-sharding-strategy $st
    same_mtp "mtp Megatron-FSDP $st" "$D/s.jsonl" "$D/fsdp.$st.jsonl"
done
run fsdp.ov --world-size 2 --use-megatron-fsdp --overlap-grad-reduce --overlap-param-gather
same_mtp "mtp Megatron-FSDP overlapped" "$D/s.jsonl" "$D/fsdp.ov.jsonl"
MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-shared-expert-intermediate-size 32 --moe-layer-freq [0,1]"
run ms $MOE
run mep $MOE --world-size 2 --ep 2
same_mtp "mtp MoE ep 2" "$D/ms.jsonl" "$D/mep.jsonl"
# MTP changes the objective: the gradient differs from the run without it
"$MTC" train $TINY --position-embedding-type rope --metrics "$D/plain.jsonl" >/dev/null 2>&1
if [ "$(grep -o '"grad_norm": [0-9.e-]*' "$D/plain.jsonl" | head -1)" != "$(grep -o '"grad_norm": [0-9.e-]*' "$D/s.jsonl" | head -1)" ] &&
    [ "$(grep -o '"lm_loss": [0-9.e-]*' "$D/plain.jsonl" | head -1)" = "$(grep -o '"lm_loss": [0-9.e-]*' "$D/s.jsonl" | head -1)" ]; then
    ok "MTP leaves the first lm loss and changes the gradient"
else bad "MTP's effect on the first step"; fi
grep -q ' lm loss: [0-9.E+-]* | mtp_1 loss: [0-9.E+-]* | mtp_2 loss: [0-9.E+-]* |' "$D/s.log" &&
    ok "the log line has Megatron's mtp_k loss entries" || { bad "mtp loss in the log line"; grep iteration "$D/s.log" | head -1; }
# the checkpoint of the pp 2 run (MTP parameters included) resumes serially
"$MTC" train $TINY $MTP --load "$D/ck" --train-iters 6 --override-opt-param-scheduler --metrics "$D/r1.jsonl" >"$D/r1.log" 2>&1 || { bad "serial resume"; tail -3 "$D/r1.log"; }
"$MTC" train $TINY $MTP --load "$D/ck" --train-iters 6 --override-opt-param-scheduler --world-size 2 --tp 2 --metrics "$D/r2.jsonl" >"$D/r2.log" 2>&1 || { bad "tp 2 resume"; tail -3 "$D/r2.log"; }
same_mtp "a pp 2 MTP checkpoint resumed serially and under tp 2" "$D/r1.jsonl" "$D/r2.jsonl" 2
grep -rqa 'eh_proj' "$D/ck" && ok "the checkpoint holds the MTP projection" || bad "no eh_proj in the checkpoint"
"$MTC" train $TINY --position-embedding-type rope --load "$D/ck" --train-iters 6 --override-opt-param-scheduler >"$D/n.out" 2>"$D/n.err"; st=$?
if [ $st -eq 2 ] && grep -q "mtp-num-layers=2 but this run has 0" "$D/n.err"; then ok "a load without --mtp-num-layers refused: $(head -1 "$D/n.err")"
else bad "load of an MTP checkpoint without MTP (exit $st)"; cat "$D/n.err"; fi
"$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" >"$D/e.out" 2>"$D/e.err"; st=$?
if [ $st -eq 2 ] && grep -q "mtp-num-layers" "$D/e.err" && [ ! -e "$D/hf/model.safetensors" ]; then ok "HF export refuses MTP: $(head -1 "$D/e.err")"
else bad "HF export of an MTP model (exit $st)"; cat "$D/e.err"; fi
refuse "MTP with learned positions" "not supported with learned_absolute" --mtp-num-layers 1
refuse "a layout whose m count differs" "Number of mtp layers in layout must match" $MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|tmL'
refuse "mtp-num-layers -1" "mtp-num-layers=-1" --mtp-num-layers -1
exit $fail
