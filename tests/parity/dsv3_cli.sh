#!/bin/sh
# tests/parity/dsv3_cli.sh - the DeepSeek-V3 shape of test_dsv3_fixture
# (MLA with q compression, latent norms and YaRN; a dense first layer then
# sigmoid group-limited MoE layers with expert bias, top-k scaling, a shared
# expert and seq_aux_loss; one MTP depth) end to end on shm rank-threads
# against the serial run: the lm loss, grad norm and MTP loss within 2e-5
# under tp 2 + SP, pp 2 with an uneven split (2|1), pp 2 x vpp 2 with a
# layout string placing 'm', tp 2 + SP with ep 2 and etp 1, dp 2 with the
# distributed optimizer, Megatron-FSDP (also with tp 2 x ep 2), cp 2 and cp 2 (a2a) x tp 2 + SP x ep 2; the
# example's recompute modules (mlp moe mla_up_proj layernorm, and moe_act)
# keep the serial bits with fewer activation bytes; a layout that would drop a layer is refused by name.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/dsv3_lib.sh"
run() { # NAME ARGS...
    rn=$1
    shift
    "$MTC" train $TINY $DSV3 "$@" --metrics "$D/$rn.jsonl" >"$D/$rn.log" 2>&1 ||
        { bad "$rn exited $?"; tail -3 "$D/$rn.log"; }
}
run s $DSV3_MTP
run tp $DSV3_MTP --world-size 2 --tp 2 --sequence-parallel
same_dsv3 "dsv3 tp 2 + SP" "$D/s.jsonl" "$D/tp.jsonl"
run pp $DSV3_MTP --world-size 2 --pp 2 --decoder-last-pipeline-num-layers 1
same_dsv3 "dsv3 pp 2 uneven (2|1, MTP with the last layer)" "$D/s.jsonl" "$D/pp.jsonl"
run vpp $DSV3_MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|t|t|mL'
same_dsv3 "dsv3 pp 2 x vpp 2 layout Et|t|t|mL" "$D/s.jsonl" "$D/vpp.jsonl"
run ep $DSV3_MTP --world-size 2 --tp 2 --sequence-parallel --ep 2 --etp 1
same_dsv3 "dsv3 tp 2 + SP x ep 2 etp 1" "$D/s.jsonl" "$D/ep.jsonl"
run do $DSV3_MTP --world-size 2 --use-distributed-optimizer --overlap-grad-reduce
same_dsv3 "dsv3 dp 2 distributed optimizer" "$D/s.jsonl" "$D/do.jsonl"
run fsdp $DSV3_MTP --world-size 2 --use-megatron-fsdp --overlap-grad-reduce --overlap-param-gather
same_dsv3 "dsv3 dp 2 Megatron-FSDP optim_grads_params overlapped" "$D/s.jsonl" "$D/fsdp.jsonl"
run fsdpep $DSV3_MTP --world-size 4 --tp 2 --sequence-parallel --ep 2 --etp 1 --use-megatron-fsdp
same_dsv3 "dsv3 tp 2 + SP x dp 2 x ep 2 etp 1 Megatron-FSDP" "$D/s.jsonl" "$D/fsdpep.jsonl"
run big $DSV3_MTP --world-size 8 --tp 2 --sequence-parallel --pp 2 --decoder-first-pipeline-num-layers 2 --ep 2 --etp 1 --use-distributed-optimizer
same_dsv3 "dsv3 tp 2 + SP x pp 2 (2|1) x dp 2, ep 2 etp 1, distopt" "$D/s.jsonl" "$D/big.jsonl"
run cp $DSV3_MTP --world-size 2 --cp 2
same_dsv3 "dsv3 cp 2" "$D/s.jsonl" "$D/cp.jsonl"
run cpep $DSV3_MTP --world-size 4 --cp 2 --tp 2 --sequence-parallel --ep 2 --etp 1 --cp-comm-type a2a
same_dsv3 "dsv3 cp 2 a2a x tp 2 + SP x ep 2 etp 1" "$D/s.jsonl" "$D/cpep.jsonl"
# Megatron's DeepSeek-V3 example's recompute modules (space-separated, nargs),
# moe_act too: the serial run's bits, and under tp 2 + SP x ep 2 etp 1
REC="--recompute-granularity selective --recompute-modules mlp moe mla_up_proj layernorm moe_act --moe-grouped-gemm"
run rec $DSV3_MTP $REC
run recep $DSV3_MTP $REC --world-size 2 --tp 2 --sequence-parallel --ep 2 --etp 1
v() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*\|"mtp_1_loss": [^,}]*' "$D/$1.jsonl"; }
a() { grep -o '"activation_bytes": [0-9]*' "$D/$1.jsonl" | head -1 | cut -d' ' -f2; }
if [ -n "$(v rec)" ] && [ "$(v rec)" = "$(v s)" ] && [ "$(a rec)" -lt "$(a s)" ]; then
    ok "dsv3 recompute mlp moe mla_up_proj layernorm moe_act: the serial bits, activation bytes $(a s) -> $(a rec)"
else bad "dsv3 recompute modules: $(a s) -> $(a rec)"; fi
same_dsv3 "dsv3 recompute modules under tp 2 + SP x ep 2 etp 1" "$D/s.jsonl" "$D/recep.jsonl"
grep -q 'mtp_1 loss' "$D/s.log" && grep -q 'load_balancing_loss' "$D/s.log" &&
    ok "the log line has the MTP and load-balancing losses" || { bad "log line"; grep iteration "$D/s.log" | head -1; }
refuse "a layout one layer short" "Number of decoder layers 2 must match num_layers 3" $DSV3 $DSV3_MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|tmL'
exit $fail
