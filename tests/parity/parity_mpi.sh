#!/bin/sh
# tests/parity/parity_mpi.sh - the parity check with ranks as MPI processes:
# `mpirun -np 2|4 mtc train` (tp=2 with SP; tp=2 x dp=2 with overlapped
# buckets; pp=2 x tp=2; pp=2 x vpp=2 x tp=2; pp=4 x vpp=2) against the serial run, per-iteration lm loss and grad norm
# within 2e-5 relative. Skips with a notice without MPI.
set -u
MTC=${MTC:-build/mtc}
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ] && [ "${MTC_HAVE_MPI:-0}" != "1" ]; then
    echo "notice: MTC_HAVE_MPI is ${MTC_HAVE_MPI:-unset}: MPI parity skipped"; exit 0
fi
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
"$MTC" train $TINY --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $TINY --tp 2 --sequence-parallel \
    --metrics "$D/a.jsonl" >"$D/a.log" 2>&1 || { bad "mpirun -np 2"; cat "$D/a.log"; }
same_losses "mpi tp=2 sp" "$D/s.jsonl" "$D/a.jsonl"
grep -q "backend: mpi" "$D/a.log" && ok "ran on the mpi backend" || { bad "backend"; cat "$D/a.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --tp 2 --overlap-grad-reduce \
    --ddp-bucket-size 700 --metrics "$D/b.jsonl" >"$D/b.log" 2>&1 || { bad "mpirun -np 4"; cat "$D/b.log"; }
same_losses "mpi tp=2 dp=2 overlap bucket=700" "$D/s.jsonl" "$D/b.jsonl"
# measured peak RSS: 4 processes, each its own figure, all positive
grep -q '"peak_rss_bytes": \[[1-9][0-9]*, [1-9][0-9]*, [1-9][0-9]*, [1-9][0-9]*\], "rss_processes": 4' "$D/b.jsonl" &&
    ok "metrics peak_rss_bytes: 4 processes" ||
    bad "metrics peak_rss_bytes under mpirun: $(grep -o '"peak_rss_bytes": [^]]*], "rss_processes": [0-9]*' "$D/b.jsonl" | head -1)"
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --pp 2 --tp 2 \
    --metrics "$D/c.jsonl" >"$D/c.log" 2>&1 || { bad "mpirun -np 4 pp"; cat "$D/c.log"; }
same_losses "mpi pp=2 tp=2" "$D/s.jsonl" "$D/c.jsonl"
# interleaved virtual stages: 4 layers over pp=2 x vpp=2 x tp=2, 8 over pp=4 x vpp=2
"$MTC" train $TINY --num-layers 4 --metrics "$D/s4.jsonl" >"$D/s4.log" 2>&1 || { bad "serial 4 layers"; cat "$D/s4.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --num-layers 4 --pp 2 --vpp 2 --tp 2 \
    --metrics "$D/d.jsonl" >"$D/d.log" 2>&1 || { bad "mpirun -np 4 pp vpp tp"; cat "$D/d.log"; }
same_losses "mpi pp=2 vpp=2 tp=2" "$D/s4.jsonl" "$D/d.jsonl"
"$MTC" train $TINY --num-layers 8 --metrics "$D/s8.jsonl" >"$D/s8.log" 2>&1 || { bad "serial 8 layers"; cat "$D/s8.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --num-layers 8 --pp 4 --vpp 2 \
    --metrics "$D/e.jsonl" >"$D/e.log" 2>&1 || { bad "mpirun -np 4 pp=4 vpp=2"; cat "$D/e.log"; }
same_losses "mpi pp=4 vpp=2" "$D/s8.jsonl" "$D/e.jsonl"
# ranks started with different flags are refused, naming the flag and both values
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 1 "$MTC" train $TINY --lr 1e-2 : \
    -np 1 "$MTC" train $TINY --lr 2e-2 >"$D/f.log" 2>&1
st=$?
[ $st -ne 0 ] && grep -q "ranks disagree on --lr: rank 0 has 0.01, rank 1 has 0.02" "$D/f.log" &&
    ok "mpi ranks with different --lr refused (status $st)" || { bad "flag mismatch"; cat "$D/f.log"; }
# a flag that changes when collectives run (a save schedule, an exit, an
# output) differing on one rank: refused before set-up, blaming that rank
# (it once ran until the collective deadline and blamed rank 0)
B3="--micro-batch-size 1 --global-batch-size 3 --train-iters 2"
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $TINY $B3 --save "$D/k" \
    --save-interval 2 : -np 1 "$MTC" train $TINY $B3 --save "$D/k" --save-interval 1 >"$D/g.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "rank 2 differs on --save-interval: it has 1, the other 2 ranks have 2" "$D/g.log" &&
    ! grep -q "iteration  *1/" "$D/g.log" && ok "mpi: --save-interval on one rank refused, rank 2 blamed" ||
    { bad "save-interval mismatch (status $st)"; cat "$D/g.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 1 "$MTC" train $TINY $B3 --exit-interval 1 : \
    -np 2 "$MTC" train $TINY $B3 >"$D/h.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "rank 0 differs on --exit-interval: it has 1, the other 2 ranks have 0" "$D/h.log" &&
    ok "mpi: --exit-interval on one rank refused, rank 0 blamed" || { bad "exit-interval mismatch (status $st)"; cat "$D/h.log"; }
exit $fail
