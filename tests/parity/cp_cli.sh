#!/bin/sh
# tests/parity/cp_cli.sh - context parallelism end to end against the serial
# run (per-iteration lm loss and grad norm within 2e-5, parity_lib.sh; the
# tiny model has hidden and attention dropout, so the masks keyed by global
# positions are checked too): cp 2 and 4 with each comm type (p2p ring,
# all_gather, a2a), cp 4 a2a+p2p with sizes 2 2, 1 4 and 4 1, one comm type
# per layer, cp2 x tp2 + SP, cp2 x pp2 x vpp2, cp2 x dp2 with the
# distributed optimizer and overlap, a Llama with GQA under a2a and p2p,
# mpirun cp2 x tp2 and cp4 a2a+p2p; the banner names the CP size; bad CP settings exit 2
# with one line before any work.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"

run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $TINY --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1 || { bad "$name run"; cat "$D/$name.log"; }
}
run s
for t in p2p all_gather a2a; do
    run "cp2$t" --world-size 2 --cp 2 --cp-comm-type $t
    same_losses "cp=2 $t" "$D/s.jsonl" "$D/cp2$t.jsonl"
    run "cp4$t" --world-size 4 --cp 4 --cp-comm-type $t
    same_losses "cp=4 $t" "$D/s.jsonl" "$D/cp4$t.jsonl"
done
grep -q "context-parallel size: 4," "$D/cp4p2p.log" && ok "banner: context-parallel size 4" || { bad "banner"; head -3 "$D/cp4p2p.log"; }
grep -q "context parallel: 4 ranks, p2p" "$D/cp4p2p.log" && ok "banner: cp comm type" || { bad "banner comm type"; head -5 "$D/cp4p2p.log"; }
run tpsp --world-size 4 --cp 2 --tp 2 --sequence-parallel
same_losses "cp=2 x tp=2 sp" "$D/s.jsonl" "$D/tpsp.jsonl"
run dopt --world-size 4 --cp 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
same_losses "cp=2 x dp=2 distributed optimizer overlap" "$D/s.jsonl" "$D/dopt.jsonl"
# a2a+p2p: the all-to-all inside pairs, the ring across them
run cp4h --world-size 4 --cp 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2
same_losses "cp=4 a2a+p2p 2x2" "$D/s.jsonl" "$D/cp4h.jsonl"
grep -q "context parallel: 4 ranks, a2a+p2p" "$D/cp4h.log" && ok "banner: a2a+p2p" || { bad "banner a2a+p2p"; head -5 "$D/cp4h.log"; }
run cp4h14 --world-size 4 --cp 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 1 4
same_losses "cp=4 a2a+p2p 1x4 (ring only)" "$D/s.jsonl" "$D/cp4h14.jsonl"
run cp4h41 --world-size 4 --cp 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 1
same_losses "cp=4 a2a+p2p 4x1 (a2a only)" "$D/s.jsonl" "$D/cp4h41.jsonl"
run s4 --num-layers 4
run vpp --num-layers 4 --world-size 4 --cp 2 --pp 2 --vpp 2
same_losses "cp=2 x pp=2 x vpp=2" "$D/s4.jsonl" "$D/vpp.jsonl"
# one comm type per layer (Megatron's list form), across pipeline chunks
run perlayer --num-layers 4 --world-size 4 --cp 4 --cp-comm-type p2p a2a all_gather a2a+p2p \
    --hierarchical-context-parallel-sizes 2 2
same_losses "cp=4 one comm type per layer" "$D/s4.jsonl" "$D/perlayer.jsonl"
grep -q "per layer p2p a2a all_gather a2a+p2p attention" "$D/perlayer.log" && ok "banner: per-layer types" || { bad "banner per-layer"; head -5 "$D/perlayer.log"; }
run perlayerpp --num-layers 4 --world-size 8 --cp 2 --pp 2 --vpp 2 --tp 2 --cp-comm-type all_gather a2a p2p a2a
same_losses "cp=2 x tp=2 x pp=2 x vpp=2 per-layer types" "$D/s4.jsonl" "$D/perlayerpp.jsonl"

LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 48 \
--untie-embeddings-and-output-weights --disable-bias-linear --num-attention-heads 8 \
--group-query-attention --num-query-groups 4"
run ls $LLAMA
run la2a $LLAMA --world-size 4 --cp 4 --cp-comm-type a2a
same_losses "llama GQA cp=4 a2a" "$D/ls.jsonl" "$D/la2a.jsonl"
run lh $LLAMA --world-size 4 --cp 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2
same_losses "llama GQA cp=4 a2a+p2p 2x2" "$D/ls.jsonl" "$D/lh.jsonl"
run lp2p $LLAMA --world-size 4 --cp 2 --tp 2 --sequence-parallel
same_losses "llama GQA cp=2 x tp=2 sp p2p (RoPE at global positions)" "$D/ls.jsonl" "$D/lp2p.jsonl"

if [ "${MTC_HAVE_MPI:-OFF}" = ON ] && [ -n "${MPIEXEC:-}" ]; then
    timeout 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --cp 2 --tp 2 \
        --metrics "$D/mpi.jsonl" >"$D/mpi.log" 2>&1 || { bad "mpirun cp=2 x tp=2"; cat "$D/mpi.log"; }
    same_losses "mpirun cp=2 x tp=2" "$D/s.jsonl" "$D/mpi.jsonl"
    timeout 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --cp 4 \
        --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2 \
        --metrics "$D/mpih.jsonl" >"$D/mpih.log" 2>&1 || { bad "mpirun cp=4 a2a+p2p"; cat "$D/mpih.log"; }
    same_losses "mpirun cp=4 a2a+p2p 2x2 (ring hops on the progress thread)" "$D/s.jsonl" "$D/mpih.jsonl"
else
    echo "skip mpirun case: MPI not built"
fi

# refusals: one line, exit 2, nothing written
refuse "odd chunks" "seq-length=16 is not divisible by 2" --world-size 3 --cp 3
refuse "a2a heads" "cp-comm-type a2a splits the heads" --world-size 8 --cp 8 --seq-length 16 --cp-comm-type a2a
refuse "hierarchical without sizes" "a2a+p2p needs --hierarchical-context-parallel-sizes" --world-size 4 --cp 4 --cp-comm-type a2a+p2p
refuse "hierarchical sizes" "must be two sizes A P with A\*P = context-parallel-size=4" --world-size 4 --cp 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 3
refuse "hierarchical heads" "a2a+p2p splits the heads over its all-to-all size A=8" --world-size 8 --cp 8 --seq-length 16 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 1
refuse "per-layer count" "cp-comm-type has 3 values: give one, or one per layer (num-layers=2)" --world-size 2 --cp 2 --cp-comm-type p2p a2a p2p
refuse "unknown comm type" "cp-comm-type=ring is unknown" --world-size 2 --cp 2 --cp-comm-type ring
exit $fail
