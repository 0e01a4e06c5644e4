#!/bin/sh
# tests/dp/fsdp_mpi.sh - Megatron-FSDP with ranks as MPI processes:
# `mpirun -np 4 mtc train --use-megatron-fsdp` (optim_grads_params and
# optim_grads on dp 4, optim_grads_params on tp 2 x dp 2 with SP and on pp 2 x dp 2,
# HFSDP over 2 instances x 2, --init-model-with-meta-device on pp 2 x dp 2) against
# the serial run, per-iteration lm loss and grad norm within 2e-5 relative.
# Skips with a notice without MPI.
set -u
MTC=${MTC:-build/mtc}
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ] && [ "${MTC_HAVE_MPI:-0}" != "1" ]; then
    echo "notice: MTC_HAVE_MPI is ${MTC_HAVE_MPI:-unset}: MPI FSDP parity skipped"; exit 0
fi
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
"$MTC" train $TINY --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
mpi() {
    name=$1
    shift
    timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --use-megatron-fsdp "$@" \
        --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "mpirun -np 4 $name"; cat "$D/$name.log"; }
}
mpi a
same_losses "mpi fsdp optim_grads_params dp=4" "$D/s.jsonl" "$D/a.jsonl"
grep -q "backend: mpi" "$D/a.log" && ok "ran on the mpi backend" || { bad "backend"; cat "$D/a.log"; }
mpi b --data-parallel-sharding-strategy optim_grads
same_losses "mpi fsdp optim_grads dp=4" "$D/s.jsonl" "$D/b.jsonl"
mpi c --tp 2 --sequence-parallel
same_losses "mpi fsdp optim_grads_params tp=2 x dp=2 sp" "$D/s.jsonl" "$D/c.jsonl"
mpi p --pp 2 --overlap-grad-reduce --overlap-param-gather
same_losses "mpi fsdp optim_grads_params pp=2 x dp=2 overlap" "$D/s.jsonl" "$D/p.jsonl"
mpi h --micro-batch-size 1 --num-distributed-optimizer-instances 2 --outer-dp-sharding-strategy optim
same_losses "mpi HFSDP 2 instances x 2, 2 microbatches" "$D/s.jsonl" "$D/h.jsonl"
mpi m --pp 2 --init-model-with-meta-device
same_losses "mpi fsdp pp=2 x dp=2 --init-model-with-meta-device" "$D/s.jsonl" "$D/m.jsonl"
exit $fail
