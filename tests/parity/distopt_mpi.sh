#!/bin/sh
# tests/parity/distopt_mpi.sh - the distributed optimizer with ranks as MPI
# processes: `mpirun -np 4 mtc train --use-distributed-optimizer` (dp=4 with
# overlapped reduce-scatter and param gather over 2 instances; tp=2 x dp=2
# with SP) against the serial run, per-iteration lm loss and grad norm
# within 2e-5 relative. Skips with a notice without MPI.
set -u
MTC=${MTC:-build/mtc}
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ] && [ "${MTC_HAVE_MPI:-0}" != "1" ]; then
    echo "notice: MTC_HAVE_MPI is ${MTC_HAVE_MPI:-unset}: MPI distributed-optimizer parity skipped"; exit 0
fi
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
"$MTC" train $TINY --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --use-distributed-optimizer \
    --overlap-grad-reduce --ddp-bucket-size 900 --overlap-param-gather --num-distributed-optimizer-instances 2 \
    --metrics "$D/a.jsonl" >"$D/a.log" 2>&1 || { bad "mpirun -np 4 dp=4"; cat "$D/a.log"; }
same_losses "mpi distopt dp=4 overlap param-gather instances=2" "$D/s.jsonl" "$D/a.jsonl"
grep -q "backend: mpi" "$D/a.log" && ok "ran on the mpi backend" || { bad "backend"; cat "$D/a.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --tp 2 --sequence-parallel \
    --use-distributed-optimizer --metrics "$D/b.jsonl" >"$D/b.log" 2>&1 || { bad "mpirun -np 4 tp=2 dp=2"; cat "$D/b.log"; }
same_losses "mpi distopt tp=2 x dp=2 sp" "$D/s.jsonl" "$D/b.jsonl"
exit $fail
