#!/bin/sh
# tests/dp/fsdp_meta.sh - --init-model-with-meta-device with Megatron-FSDP
# optim_grads_params: each rank allocates its model buffers without faulting
# them in and draws only its shards of the params (the counter-based
# generator gives each element its serial value wherever it is drawn).
# Against the same run without the flag: the per-iteration lm loss and grad
# norm bit for bit and the checkpoint shards (params and optimizer state)
# byte for byte, on dp 4, pp 2 x dp 2, HFSDP 2 x 2, tp 2 + SP x dp 2, MoE
# ep 2, --bf16; and --metrics' fsdp_setup_bytes (the params and grads
# pages, and with --bf16 the compute copies', resident when set-up ends,
# before sharding) is the last rank's
# shard pages exactly with the flag and the whole buffers without it: no
# rank ever held the whole model; a resume with the flag reads only the
# shards of the stored params (equal to the uninterrupted run, its set-up
# bytes the shard pages again). no_shard with the flag is refused
# (Megatron's ValueError).
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
F="--use-megatron-fsdp"
# the same run without and with the flag, saved after its 4 iterations
pair() {
    name=$1
    shift
    for m in "" --init-model-with-meta-device; do
        "$MTC" train $TINY "$@" $m --save "$D/c$name$m" --metrics "$D/$name$m.jsonl" >"$D/$name$m.log" 2>&1 ||
            { bad "$name $m run"; cat "$D/$name$m.log"; }
    done
    a=$(grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$D/$name.jsonl")
    b=$(grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$D/$name--init-model-with-meta-device.jsonl")
    n=0 same=1
    for f in "$D/c$name"/iter_0000004/*.distcp; do
        n=$((n + 1))
        cmp -s "$f" "$D/c$name--init-model-with-meta-device/iter_0000004/${f##*/}" || same=0
    done
    if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$n" -gt 0 ] && [ "$same" = 1 ]; then
        ok "meta-device init $name: losses, grad norms and $n checkpoint shards bit-identical"
    else bad "meta-device init $name: losses or checkpoint shards differ"; fi
}
pair "dp=4" --world-size 4 $F
pair "pp=2 x dp=2" --world-size 4 --pp 2 $F --overlap-grad-reduce --overlap-param-gather
pair "HFSDP 2 x 2" --world-size 4 --micro-batch-size 1 $F --num-distributed-optimizer-instances 2 \
    --outer-dp-sharding-strategy optim
pair "tp=2 + SP x dp=2" --world-size 4 --tp 2 --sequence-parallel $F
pair "MoE ep=2" --world-size 4 --ep 2 $F --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01
pair "bf16" --world-size 4 --bf16 $F

# memory: units (floats) embedding (64 + 16) x 128 = 10240, layer 12 C^2 +
# 13 C = 198272 (x4), head 2 C = 256, padded to whole 4 KiB pages per shard
# of 4 ranks: 12288, 200704 (x4), 4096, total 819200. Without the flag
# set-up holds the whole params and grads: 2 x 4 x 819200 bytes; with it
# the last rank's shard pages that hold params: embedding [9216, 10240) 1
# page, each layer [150528, 198272) 47 pages, head none.
M="--num-layers 4 --hidden-size 128 --train-iters 2"
if [ "$(getconf PAGESIZE 2>/dev/null)" = 4096 ]; then
    for m in "" --init-model-with-meta-device; do
        "$MTC" train $TINY $M --world-size 4 $F $m --metrics "$D/m$m.jsonl" >"$D/m.log" 2>&1 || { bad "memory run $m"; cat "$D/m.log"; }
    done
    f() { grep -o "\"fsdp_setup_bytes\": [0-9]*" "$D/$1.jsonl" | tail -1 | awk '{ print $2 }'; }
    W=$(f m) S=$(f m--init-model-with-meta-device)
    if [ "$W" = $((2 * 4 * 819200)) ] && [ "$S" = $((4096 * (1 + 4 * 47))) ]; then
        ok "set-up resident params + grads: whole $W bytes, meta-device $S (this rank's shard pages)"
    else bad "set-up resident bytes: without '$W' (want $((2 * 4 * 819200))), meta '$S' (want $((4096 * (1 + 4 * 47))))"; fi
    # --bf16: the compute copies (params_c in fp32 storage, oneDNN's bf16
    # copy) whole besides without the flag, never touched at set-up with it;
    # the engine pinned (auto picks by this machine's measured rates)
    for m in "" --init-model-with-meta-device; do
        "$MTC" train $TINY $M --world-size 4 $F --bf16 --bf16-gemm dnnl-bf16 $m --metrics "$D/b$m.jsonl" >"$D/b.log" 2>&1 || { bad "bf16 memory run $m"; cat "$D/b.log"; }
    done
    W=$(f b) S=$(f b--init-model-with-meta-device)
    if [ "$W" = $(((4 + 4 + 4 + 2) * 819200)) ] && [ "$S" = $((4096 * (1 + 4 * 47))) ]; then
        ok "--bf16 set-up resident params + grads + compute copies: whole $W bytes, meta-device $S"
    else bad "--bf16 set-up resident bytes: without '$W' (want $((14 * 819200))), meta '$S' (want $((4096 * (1 + 4 * 47))))"; fi
else
    ok "memory check skipped: page size $(getconf PAGESIZE) (the closed form assumes 4096)"
fi
# --load with the flag reads only this rank's shards of the stored params:
# saved at 4 iterations, resumed to 8, equal to an uninterrupted 8; the
# last rank of dp 4 holds after set-up one page of each layer (its shard
# [12288, 16384) of 12704 + padding holds 416 params) and nothing of the
# embedding's and the head's shards
ckpt_reference
ckpt_run ca 4 --world-size 4 $F --save "$D/ck"
ckpt_run cb 8 --world-size 4 $F --init-model-with-meta-device --load "$D/ck"
same_losses "fsdp dp=4 save -> meta-device dp=4 resume" "$D/full4.jsonl" "$D/cb.jsonl"
ckpt_run cc 8 --world-size 4 --pp 2 $F --init-model-with-meta-device --load "$D/ck"
same_losses "fsdp dp=4 save -> meta-device pp=2 x dp=2 resume" "$D/full4.jsonl" "$D/cc.jsonl"
B=$(grep -o "\"fsdp_setup_bytes\": [0-9]*" "$D/cb.jsonl" | tail -1 | awk '{ print $2 }')
[ "$B" = 8192 ] && ok "meta-device resume: set-up held $B bytes (the shards' pages read)" ||
    bad "meta-device resume: set-up held '$B' bytes (want 8192)"
refuse "meta-device with no_shard" "is not supported or necessary for the 'no_shard'" --world-size 2 $F \
    --data-parallel-sharding-strategy no_shard --init-model-with-meta-device
exit $fail
