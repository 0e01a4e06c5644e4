#!/bin/sh
# tests/parity/mla_mpi.sh - multi-latent attention with ranks as MPI
# processes: `mpirun -np 4 mtc train --multi-latent-attention` at tp 2 + SP
# x pp 2 and at tp 2 x cp 2 (no SP: the shared key head's TP all-reduce),
# loss and grad norm within 2e-5 of the serial run. Skips without MPI.
set -u
MTC=${MTC:-build/mtc}
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ] && [ "${MTC_HAVE_MPI:-0}" != "1" ]; then
    echo "notice: MTC_HAVE_MPI is ${MTC_HAVE_MPI:-unset}: MPI MLA parity skipped"; exit 0
fi
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
MLA="--multi-latent-attention --q-lora-rank 12 --kv-lora-rank 10 --qk-head-dim 6 --qk-pos-emb-head-dim 4 --v-head-dim 5 --qk-layernorm --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --untie-embeddings-and-output-weights --rotary-scaling-factor 4 --mscale-all-dim 0.7 --original-max-position-embeddings 8"
"$MTC" train $TINY $MLA --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY $MLA --tp 2 --sequence-parallel \
    --pp 2 --metrics "$D/a.jsonl" >"$D/a.log" 2>&1 || { bad "mpirun -np 4 tp 2 + SP x pp 2"; tail -5 "$D/a.log"; }
same_losses "mpi mla tp 2 + SP x pp 2" "$D/s.jsonl" "$D/a.jsonl"
grep -q "backend: mpi" "$D/a.log" && ok "ran on the mpi backend" || { bad "backend"; tail -5 "$D/a.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY $MLA --tp 2 --cp 2 \
    --metrics "$D/b.jsonl" >"$D/b.log" 2>&1 || { bad "mpirun -np 4 tp 2 x cp 2"; tail -5 "$D/b.log"; }
same_losses "mpi mla tp 2 x cp 2" "$D/s.jsonl" "$D/b.jsonl"
exit $fail
