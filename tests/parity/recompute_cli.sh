#!/bin/sh
# tests/parity/recompute_cli.sh - activation recomputation is bit-identical
# to none: for several layouts, training with --recompute-granularity full
# (uniform, and block with 2 layers) or selective --recompute-modules mlp saves exactly the same checkpoint tensors and
# logs exactly the same losses and grad norms as the run without, while the
# banner's activation memory falls. Dropout is on (the recomputed forward
# must redraw the same masks). Bad recompute flags exit 2 with one line.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
L4="--num-layers 4"

run() { # NAME ARGS...
    rn=$1
    shift
    "$MTC" train $TINY $L4 --metrics "$D/$rn.jsonl" --save "$D/$rn.ckpt" "$@" >"$D/$rn.log" 2>&1 ||
        { bad "$rn run"; cat "$D/$rn.log"; }
}
act() { sed -n 's/.*activations \([0-9.]*\)$/\1/p' "$D/$1.log"; }
# the checkpoints' tensor files (every rank's pieces; metadata.json records
# the flags, which differ by design)
same_pieces() {
    for f in "$D/$1.ckpt"/iter_*/*.distcp; do
        cmp -s "$f" "$D/$2.ckpt/${f#"$D/$1.ckpt/"}" || return 1
    done
    ls "$D/$1.ckpt"/iter_*/*.distcp >/dev/null 2>&1
}
same_bits() { # NAME BASE OTHER
    if same_pieces "$2" "$3" && cmp -s "$D/$2.jsonl.ll" "$D/$3.jsonl.ll"; then
        ok "$1: the same checkpoint tensors and losses bit for bit (activations $(act "$2") -> $(act "$3") MB)"
    else bad "$1: differs"; fi
}
ll() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$D/$1.jsonl" >"$D/$1.jsonl.ll"; }

for layout in "serial|" "tp2 sp|--world-size 2 --tp 2 --sequence-parallel" \
    "pp2 vpp2|--world-size 2 --pp 2 --vpp 2" "cp2|--world-size 2 --cp 2" \
    "dp2 distopt|--world-size 2 --use-distributed-optimizer --overlap-grad-reduce"; do
    name=${layout%%|*} args=${layout#*|}
    tag=$(echo "$name" | tr -c 'a-z0-9' '_')
    run "${tag}none" $args
    run "${tag}uni" $args --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
    run "${tag}blk" $args --recompute-granularity full --recompute-method block --recompute-num-layers 2
    run "${tag}mlp" $args --recompute-granularity selective --recompute-modules mlp
    ll "${tag}none"; ll "${tag}uni"; ll "${tag}blk"; ll "${tag}mlp"
    same_bits "$name full uniform" "${tag}none" "${tag}uni"
    same_bits "$name full block 2" "${tag}none" "${tag}blk"
    same_bits "$name selective mlp" "${tag}none" "${tag}mlp"
    if awk -v a="$(act "${tag}none")" -v b="$(act "${tag}mlp")" 'BEGIN { exit !(b + 0 < a + 0) }'; then
        ok "$name: selective mlp recomputation lowers the activation memory"
    else bad "$name: activation memory did not fall with selective mlp"; fi
    if awk -v a="$(act "${tag}none")" -v b="$(act "${tag}uni")" 'BEGIN { exit !(b + 0 < a + 0) }'; then
        ok "$name: recomputation lowers the activation memory"
    else bad "$name: activation memory did not fall"; fi
done
"$MTC" train $TINY $L4 --recompute-granularity selective --train-iters 1 >"$D/sel.log" 2>&1 &&
    ok "selective (core_attn) trains" || { bad "selective"; cat "$D/sel.log"; }

refuse "full without method" "needs --recompute-method" --recompute-granularity full --recompute-num-layers 1
refuse "full without layers" "needs --recompute-num-layers" --recompute-granularity full --recompute-method block
refuse "method without full" "apply only with --recompute-granularity full" --recompute-method uniform
refuse "unknown granularity" "recompute-granularity=some is unknown" --recompute-granularity some
refuse "an unknown module" "moe_ac is unknown" --recompute-granularity selective --recompute-modules mlp,moe_ac
exit $fail
