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
# keep the serial bits with fewer activation bytes; Megatron's DeepSeek-V3
# example's flags (shrunk) train with the loss falling; a layout that would drop a layer is refused by name.
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
# Megatron's examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh, every flag of
# it and of its Megatron-FSDP block with the sizes shrunk (mock data, 4 layers,
# hidden 64, 8 experts, 400 samples), on 4 rank-threads: the loss falls
# (left out: --fsdp-double-buffer, unknown to mtc, and --grad-reduce-in-bf16,
# which mtc's optim_grads_params does not take yet)
EX="--distributed-timeout-minutes 60 --tensor-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 --context-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-mcore-models --sequence-parallel --use-flash-attn --disable-bias-linear --micro-batch-size 2 --global-batch-size 8 --train-samples 400 --exit-duration-in-mins 220 --no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval 10 --recompute-granularity selective --recompute-modules mlp moe mla_up_proj layernorm --transformer-impl transformer_engine --seq-length 64 --split 99,1,0 --num-layers 4 --hidden-size 64 --ffn-hidden-size 128 --num-attention-heads 4 --kv-channels 16 --max-position-embeddings 64 --position-embedding-type rope --rotary-base 10000 --make-vocab-size-divisible-by 64 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --untie-embeddings-and-output-weights --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 --clip-grad 1.0 --weight-decay 0.1 --qk-layernorm --lr-decay-samples 400 --lr-warmup-samples 40 --lr-warmup-init 3.9e-5 --lr 3e-3 --min-lr 3.9e-5 --lr-decay-style cosine --adam-beta1 0.9 --adam-beta2 0.95 --num-experts 8 --moe-layer-freq [0]*1+[1]*3 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32 --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 2 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-router-pre-softmax --moe-grouped-gemm --moe-aux-loss-coeff 1e-4 --moe-router-group-topk 2 --moe-router-num-groups 4 --moe-router-topk-scaling-factor 2.5 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3 --moe-router-dtype fp32 --moe-permute-fusion --moe-router-force-load-balancing --q-lora-rank 32 --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --eval-iters 2 --eval-interval 25 --auto-detect-ckpt-format --dist-ckpt-strictness log_all --init-method-std 0.02 --log-num-zeros-in-grad --log-params-norm --log-throughput --log-interval 10 --logging-level 40 --bf16 --enable-experimental --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --no-gradient-accumulation-fusion --calculate-per-token-loss --init-model-with-meta-device --ckpt-format fsdp_dtensor --use-nccl-ub"
"$MTC" train --mock-data --vocab-size 256 --world-size 4 --threads 1 $EX >"$D/ex.log" 2>&1 || { bad "the example's flags: exit $?"; tail -3 "$D/ex.log"; }
l10=$(sed -n 's/.*iteration *10\/ *50 .* lm loss: \([^ ]*\) .*/\1/p' "$D/ex.log")
l50=$(sed -n 's/.*iteration *50\/ *50 .* lm loss: \([^ ]*\) .*/\1/p' "$D/ex.log")
if [ -n "$l10" ] && [ -n "$l50" ] && awk -v a="$l10" -v b="$l50" 'BEGIN { exit !(b < 0.7 * a) }' && grep -q 'mtp_1 loss' "$D/ex.log"; then
    ok "the DeepSeek-V3 example's flags (shrunk) train: lm loss $l10 at iteration 10 -> $l50 at 50"
else bad "the example's loss: '$l10' -> '$l50'"; fi
refuse "a layout one layer short" "Number of decoder layers 2 must match num_layers 3" $DSV3 $DSV3_MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|tmL'
exit $fail
