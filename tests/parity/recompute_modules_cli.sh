#!/bin/sh
# tests/parity/recompute_modules_cli.sh - selective recomputation of an MoE
# model's modules: --recompute-modules shared_experts (each MoE layer's
# shared expert forward again in backward) gives bit for bit the run
# without it (losses, grad norms and checkpoint tensors) serially, under
# tp 2 + SP and ep 2, with dropout on, while the activation memory
# (--metrics activation_bytes) falls; core_attn and layernorm, what mtc
# always does, change neither the bits nor the memory; the first-k-dense
# pattern --moe-layer-freq [0]*1+[1]*3 is Megatron's list (the same run as
# [0,1,1,1]); moe (each MoE layer's forward again in backward, shared
# expert included) and moe_act (the experts' activation again) give the same
# bits with less memory, also with the alltoall dispatcher and all four
# together; moe_act without --moe-grouped-gemm is refused as in Megatron.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
MOE="--num-layers 4 --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-shared-expert-intermediate-size 48 --moe-layer-freq [0]*1+[1]*3"
run() { # NAME ARGS...
    rn=$1
    shift
    "$MTC" train $TINY $MOE --metrics "$D/$rn.jsonl" --save "$D/$rn.ckpt" "$@" >"$D/$rn.log" 2>&1 ||
        { bad "$rn run"; tail -3 "$D/$rn.log"; }
}
act() { grep -o '"activation_bytes": [0-9]*' "$D/$1.jsonl" | head -1 | cut -d' ' -f2; }
ll() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$D/$1.jsonl"; }
same_bits() { # NAME BASE OTHER
    same=1
    for f in "$D/$2.ckpt"/iter_*/*.distcp; do cmp -s "$f" "$D/$3.ckpt/${f#"$D/$2.ckpt/"}" || same=0; done
    ls "$D/$2.ckpt"/iter_*/*.distcp >/dev/null 2>&1 || same=0
    if [ $same = 1 ] && [ -n "$(ll "$2")" ] && [ "$(ll "$2")" = "$(ll "$3")" ]; then
        ok "$1: the same checkpoint tensors, losses and grad norms bit for bit (activation bytes $(act "$2") -> $(act "$3"))"
    else bad "$1: differs"; fi
}
for layout in "serial|" "tp2 sp|--world-size 2 --tp 2 --sequence-parallel --etp 1" "ep2|--world-size 2 --ep 2" "ep2 a2a|--world-size 2 --ep 2 --moe-token-dispatcher-type alltoall"; do
    name=${layout%%|*} args=${layout#*|}
    tag=$(echo "$name" | tr -c 'a-z0-9' '_')
    run "${tag}none" $args
    run "${tag}sh" $args --recompute-granularity selective --recompute-modules shared_experts
    run "${tag}ln" $args --recompute-granularity selective --recompute-modules core_attn,layernorm
    run "${tag}moe" $args --recompute-granularity selective --recompute-modules moe
    run "${tag}act" $args --recompute-granularity selective --recompute-modules moe_act --moe-grouped-gemm
    run "${tag}all" $args --recompute-granularity selective --recompute-modules mlp moe,moe_act layernorm --moe-grouped-gemm
    same_bits "$name shared_experts" "${tag}none" "${tag}sh"
    same_bits "$name moe" "${tag}none" "${tag}moe"
    same_bits "$name moe_act" "${tag}none" "${tag}act"
    same_bits "$name mlp moe moe_act layernorm" "${tag}none" "${tag}all"
    if [ "$(act "${tag}moe")" -lt "$(act "${tag}sh")" ] && [ "$(act "${tag}act")" -lt "$(act "${tag}none")" ] && [ "$(act "${tag}all")" -lt "$(act "${tag}moe")" ]; then
        ok "$name: activation bytes none $(act "${tag}none") > moe_act $(act "${tag}act"); shared_experts $(act "${tag}sh") > moe $(act "${tag}moe") > mlp,moe,moe_act $(act "${tag}all")"
    else bad "$name: activation bytes none $(act "${tag}none") sh $(act "${tag}sh") moe $(act "${tag}moe") moe_act $(act "${tag}act") all $(act "${tag}all")"; fi
    same_bits "$name core_attn layernorm" "${tag}none" "${tag}ln"
    if [ "$(act "${tag}sh")" -lt "$(act "${tag}none")" ]; then ok "$name: shared_experts lowers the activation bytes"
    else bad "$name: activation bytes $(act "${tag}none") -> $(act "${tag}sh")"; fi
    [ -n "$(act "${tag}ln")" ] && [ "$(act "${tag}ln")" = "$(act "${tag}none")" ] && ok "$name: core_attn,layernorm keep the activation bytes (nothing more to drop)" ||
        bad "$name: core_attn,layernorm changed the activation bytes"
done
run list --moe-layer-freq [0,1,1,1]
same_bits "[0]*1+[1]*3 is [0,1,1,1]" serial_none list
grep -q '"moe_layers": \[{"layer": 1,' "$D/serial_none.jsonl" && ! grep -q '{"layer": 0,' "$D/serial_none.jsonl" &&
    ok "first-k-dense: layer 0 dense, 1..3 MoE" || bad "first-k-dense layers"
refuse "moe_act without grouped GEMM" "moe_act in recompute_modules is only supported with moe_grouped_gemm" $MOE --recompute-granularity selective --recompute-modules moe_act
exit $fail
