#!/bin/sh
# tests/parity/router_mtp_cli.sh - the DeepSeek-V3 recipe's last router and
# MTP settings against the serial run:
#  - --recompute-granularity full --recompute-method uniform recomputes the
#    MTP depths' layers too (Megatron's MultiTokenPredictionLayer
#    _checkpointed_forward): the same checkpoint tensors, losses, grad norms
#    and MTP losses bit for bit as without recomputation, serially, on
#    pp 2 and on a layout with MTP alone in the loss's stage (Ett|mmL), with
#    fewer activation bytes than the block method over every decoder layer
#    (which, as Megatron's, leaves the MTP layers alone); uniform with
#    --recompute-num-layers 2 is refused with Megatron's message;
#  - MTP under --bf16: tp 2 + SP and pp 2 within 5e-3 of the serial bf16
#    run (lm and both MTP losses);
#  - --moe-router-dtype fp64 (the gating GEMMs summed in double) and
#    --moe-router-force-load-balancing (random normal logits keyed by the
#    global token) on the sigmoid, expert-bias, shared-expert MoE model with
#    MTP: ep 2, tp 2 + SP with etp 1, pp 2 and (force-balancing) cp 2 equal the serial run to 2e-5; forced routing
#    spreads the tokens more evenly than the learned router; a bad dtype is
#    refused.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/mtp_lib.sh"
run() { # NAME ARGS...
    rn=$1
    shift
    "$MTC" train $TINY "$@" --metrics "$D/$rn.jsonl" >"$D/$rn.log" 2>&1 ||
        { bad "$rn exited $?"; tail -3 "$D/$rn.log"; }
}
act() { grep -o '"activation_bytes": [0-9]*' "$D/$1.jsonl" | head -1 | cut -d' ' -f2; }
vals() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*\|"mtp_[0-9]_loss": [^,}]*' "$D/$1.jsonl"; }
same_bits() { # NAME BASE OTHER
    same=1
    for f in "$D/$2.ckpt"/iter_*/*.distcp; do cmp -s "$f" "$D/$3.ckpt/${f#"$D/$2.ckpt/"}" || same=0; done
    ls "$D/$2.ckpt"/iter_*/*.distcp >/dev/null 2>&1 || same=0
    if [ $same = 1 ] && [ -n "$(vals "$2")" ] && [ "$(vals "$2")" = "$(vals "$3")" ]; then
        ok "$1: the same checkpoint tensors, losses, grad norms and MTP losses bit for bit (activation bytes $(act "$2") -> $(act "$3"))"
    else bad "$1: differs"; fi
}
UNI="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
BLK="--recompute-granularity full --recompute-method block --recompute-num-layers 2"
for layout in "serial|" "pp2|--world-size 2 --pp 2" "Ett-mmL|--world-size 2 --pp 2 --pipeline-model-parallel-layout Ett|mmL"; do
    name=${layout%%|*} args=${layout#*|}
    run "$name.none" $MTP $args --save "$D/$name.none.ckpt"
    run "$name.uni" $MTP $args $UNI --save "$D/$name.uni.ckpt"
    same_bits "MTP $name, full uniform recompute" "$name.none" "$name.uni"
done
run serial.blk $MTP $BLK
if [ -n "$(act serial.uni)" ] && [ "$(act serial.uni)" -lt "$(act serial.blk)" ] && [ "$(act serial.blk)" -lt "$(act serial.none)" ]; then
    ok "uniform recomputes the MTP layers as well: activation bytes none $(act serial.none) > block $(act serial.blk) > uniform $(act serial.uni)"
else bad "activation bytes none $(act serial.none) block $(act serial.blk) uniform $(act serial.uni)"; fi
refuse "uniform recompute-num-layers 2 with MTP" "recompute_num_layers must be 1 for MTP recompute" $MTP --recompute-granularity full --recompute-method uniform --recompute-num-layers 2

# MTP under --bf16: serial against tp 2 + SP and pp 2
if "$MTC" train $TINY --bf16 --train-iters 1 2>&1 | grep -q "needs oneDNN"; then
    echo "skip MTP --bf16: this mtc was built without oneDNN"
else
    run bf $MTP --bf16
    run bf.sp $MTP --bf16 --world-size 2 --tp 2 --sequence-parallel
    run bf.pp $MTP --bf16 --world-size 2 --pp 2
    for o in sp pp; do
        if [ -s "$D/bf.$o.jsonl" ] && paste -d' ' "$D/bf.jsonl" "$D/bf.$o.jsonl" | awk '
            { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i ~ /^"mtp_[0-9]+_loss":$/) v[n++] = $(i + 1) + 0 }
            { h = n / 2; if (h != 3) bad = 1; for (k = 0; k < h; k++) { d = v[k] - v[k + h]; if (d < 0) d = -d; if (d > 5e-3 * v[k]) bad = 1 }; lines++ }
            END { exit (bad || lines != 4) }'; then ok "MTP --bf16 $o: lm and both MTP losses within 5e-3 of the serial bf16 run"
        else bad "MTP --bf16 $o"; cat "$D/bf.jsonl" "$D/bf.$o.jsonl"; fi
    done
fi

# the router flags on a DeepSeek-shaped MoE (first layer dense) with MTP
MOE="--num-layers 3 --num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-aux-loss-coeff 0.01 --moe-router-load-balancing-type seq_aux_loss --moe-shared-expert-intermediate-size 32 --moe-layer-freq [0]*1+[1]*2"
for flag in "fp64|--moe-router-dtype fp64" "force|--moe-router-force-load-balancing"; do
    tag=${flag%%|*} f=${flag#*|}
    run "$tag.s" $MOE $MTP $f
    run "$tag.ep" $MOE $MTP $f --world-size 2 --ep 2
    same_mtp "$tag: ep 2" "$D/$tag.s.jsonl" "$D/$tag.ep.jsonl"
    run "$tag.tp" $MOE $MTP $f --world-size 2 --tp 2 --sequence-parallel --etp 1
    same_mtp "$tag: tp 2 + SP etp 1" "$D/$tag.s.jsonl" "$D/$tag.tp.jsonl"
    run "$tag.pp" $MOE $MTP $f --world-size 2 --pp 2 --decoder-last-pipeline-num-layers 1
    same_mtp "$tag: pp 2 (2|1)" "$D/$tag.s.jsonl" "$D/$tag.pp.jsonl"
done
run force.cp $MOE $MTP --moe-router-force-load-balancing --world-size 2 --cp 2
same_mtp "force: cp 2" "$D/force.s.jsonl" "$D/force.cp.jsonl"
run fp32.s $MOE $MTP --moe-router-dtype fp32
run learned $MOE $MTP
if [ -n "$(vals fp32.s)" ] && [ "$(vals fp32.s)" = "$(vals learned)" ]; then ok "--moe-router-dtype fp32 is mtc's router"
else bad "--moe-router-dtype fp32 changed the run"; fi
# fp64 gating: other roundings than fp32's (so the flag acts), the same run to 2e-5
same_mtp "fp64 gating vs fp32" "$D/fp32.s.jsonl" "$D/fp64.s.jsonl"
[ -n "$(vals fp64.s)" ] && [ "$(vals fp64.s)" != "$(vals fp32.s)" ] && ok "fp64 gating rounds otherwise than fp32" ||
    bad "--moe-router-dtype fp64 gave fp32's bits"
# the forced router's loads: the largest gap between the busiest and the
# idlest expert's tokens over every iteration and MoE layer
spread() { grep -o '"tokens_per_expert": {"min": [0-9]*, "max": [0-9]*' "$D/$1.jsonl" | awk '{ g = $5 - $3; if (g > m) m = g } END { if (NR) print m }'; }
a=$(spread learned) b=$(spread force.s)
if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -lt "$a" ]; then
    ok "force-load-balancing: the busiest minus the idlest expert's tokens $a -> $b"
else bad "force-load-balancing loads: learned '$a' forced '$b'"; fi
refuse "router dtype bf16" "moe-router-dtype=bf16 is unknown (use fp32 or fp64)" $MOE --moe-router-dtype bf16
exit $fail
