#!/bin/sh
# tests/parity/llama_cli.sh - a tiny Llama-style model (RMSNorm, RoPE,
# SwiGLU, grouped-query attention, untied head, no biases) trained by
# `mtc train --world-size N` on every strategy against its serial run:
# per-iteration lm loss and grad norm within 2e-5 relative (the tolerance of
# parity_lib.sh). Two head layouts: 8 heads over 2 key/value groups (tp 2:
# one group per rank) and over 4 groups (tp 2: two groups per rank; tp 4:
# one). Plus a save that `mtc generate` and a tp=2 --load read, and the
# refusal of a tp that does not divide the groups.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"

LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 48 \
--untie-embeddings-and-output-weights --disable-bias-linear --num-attention-heads 8 \
--group-query-attention"
# TINY's 2 layers; 4 for the interleaved schedule
run() { # NAME GROUPS LAYERS ARGS...
    name=$1 g=$2 l=$3
    shift 3
    "$MTC" train $TINY $LLAMA --num-query-groups "$g" --num-layers "$l" --metrics "$D/$name.jsonl" "$@" \
        >"$D/$name.log" 2>&1 || { bad "$name run"; cat "$D/$name.log"; }
}

run s2 2 2
run s4 4 2
run s4l 4 4
run tp2g2 2 2 --world-size 2 --tp 2
same_losses "llama G=2 tp=2 (one group per rank)" "$D/s2.jsonl" "$D/tp2g2.jsonl"
run tp2g4 4 2 --world-size 2 --tp 2 --sequence-parallel
same_losses "llama G=4 tp=2 sp (two groups per rank)" "$D/s4.jsonl" "$D/tp2g4.jsonl"
run tp4g4 4 2 --world-size 4 --tp 4 --sequence-parallel --save "$D/m.bin"
same_losses "llama G=4 tp=4 sp (one group per rank)" "$D/s4.jsonl" "$D/tp4g4.jsonl"
run vpp 4 4 --world-size 2 --pp 2 --vpp 2
same_losses "llama pp=2 vpp=2" "$D/s4l.jsonl" "$D/vpp.jsonl"
run dopt 2 2 --world-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --ddp-bucket-size 500
same_losses "llama dp=2 distributed optimizer overlap" "$D/s2.jsonl" "$D/dopt.jsonl"
run mix 2 2 --world-size 8 --tp 2 --pp 2 --sequence-parallel --use-distributed-optimizer
same_losses "llama tp=2 x pp=2 x dp=2 sp distopt" "$D/s2.jsonl" "$D/mix.jsonl"
if [ "${MTC_HAVE_MPI:-OFF}" = ON ] && [ -n "${MPIEXEC:-}" ]; then
    timeout 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY $LLAMA \
        --num-query-groups 2 --num-layers 2 --tp 2 --pp 2 --metrics "$D/mpi.jsonl" >"$D/mpi.log" 2>&1 ||
        { bad "mpirun tp=2 x pp=2"; cat "$D/mpi.log"; }
    same_losses "llama mpirun tp=2 x pp=2" "$D/s2.jsonl" "$D/mpi.jsonl"
else
    echo "skip mpirun case: MPI not built"
fi

# the saved Llama loads in generate and, sharded, in training
"$MTC" generate --load "$D/m.bin" --prompt "" --max-new-tokens 4 >"$D/g.log" 2>&1 &&
    ok "generate loads the tp=4 Llama save" || { bad "generate"; cat "$D/g.log"; }
run ls 4 2 --load "$D/m.bin" --finetune
run lt 4 2 --load "$D/m.bin" --finetune --world-size 2 --tp 2
same_losses "llama --load serial = tp=2" "$D/ls.jsonl" "$D/lt.jsonl"

# refusal: tp must divide the key/value groups (one line, exit 2, no work)
"$MTC" train $TINY $LLAMA --num-query-groups 2 --world-size 4 --tp 4 >"$D/r.out" 2>"$D/r.err"
st=$?
if [ $st -eq 2 ] && [ "$(wc -l <"$D/r.err")" -eq 1 ] && grep -q "num-query-groups=2 is not divisible by tensor-model-parallel-size=4" "$D/r.err" && [ ! -s "$D/r.out" ]; then
    ok "tp=4 with 2 groups refused in one line"
else bad "groups refusal (status $st)"; cat "$D/r.err"; fi
exit $fail
