#!/bin/sh
# tests/fp8/parity_mpi.sh - the fp8 recipes with ranks as MPI processes:
# `mpirun -np 2 mtc train --tp 2 --sequence-parallel` with the delayed and
# the tensorwise recipe against the serial fp8 run (their amaxes travel
# through the mpi backend's MAX all-reduces), within parity_cli.sh's
# tolerances; ranks started with different fp8 flags are refused by the flag
# agreement (they hung at the first amax reduction). Skips with a notice without MPI.
set -u
MTC=${MTC:-build/mtc}
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ] && [ "${MTC_HAVE_MPI:-0}" != "1" ]; then
    echo "notice: MTC_HAVE_MPI is ${MTC_HAVE_MPI:-unset}: fp8 MPI parity skipped"; exit 0
fi
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
M="--mock-data --vocab-size 64 --make-vocab-size-divisible-by 16 --num-layers 2 --hidden-size 64
--num-attention-heads 4 --seq-length 128 --micro-batch-size 2 --global-batch-size 8 --train-iters 4
--lr 1e-3 --lr-decay-style constant --log-interval 1 --eval-iters 0 --threads 1 --bf16 --seed 7
--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max"
for r in delayed tensorwise; do
    "$MTC" train $M --fp8-recipe $r --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial $r"; tail -3 "$D/s.log"; }
    timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $M --fp8-recipe $r \
        --tp 2 --sequence-parallel --metrics "$D/m.jsonl" >"$D/m.log" 2>&1 || { bad "mpirun $r"; tail -3 "$D/m.log"; }
    grep -q "backend: mpi" "$D/m.log" || bad "$r: not on the mpi backend"
    if paste -d' ' "$D/s.jsonl" "$D/m.jsonl" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":") v[n++] = $(i + 1) + 0
          for (k = 0; k < 2; k++) { d = (v[k] - v[k + 2]) / v[k]; if (d < 0) d = -d; if (d > (NR == 1 ? (k ? 1e-4 : 1e-6) : 5e-3)) bad = 1 }; lines++ }
        END { exit (bad || lines != 4) }'; then ok "mpirun tp=2 sp $r = serial fp8"
    else bad "mpirun tp=2 sp $r"; paste -d'\n' "$D/s.jsonl" "$D/m.jsonl" | cut -c1-120; fi
done
# a rank started with another fp8 recipe (or without fp8) would run other amax reductions and
# hang at the first one: the flag agreement names the flag at once, exit 2
for pair in "--fp8-recipe tensorwise|--fp8-recipe delayed|--fp8-recipe" "--fp8-recipe delayed|--fp8-recipe delayed --fp8-param-gather|--fp8-param-gather"; do
    a=${pair%%|*} rest=${pair#*|} b=${rest%%|*} flag=${rest#*|}
    timeout -k 5 60 "$MPIRUN" --allow-run-as-root --oversubscribe -np 1 "$MTC" train $M --train-iters 1 \
        --use-distributed-optimizer $a : -np 1 "$MTC" train $M --train-iters 1 --use-distributed-optimizer $b \
        >"$D/a.log" 2>&1
    st=$?
    if [ $st -eq 2 ] && grep -q "ranks disagree on -*$flag" "$D/a.log"; then
        ok "ranks with $a / $b: $(grep -m1 -o 'ranks disagree on [^(]*' "$D/a.log")"
    else bad "ranks with $a / $b: exit $st"; grep -v '^>' "$D/a.log" | tail -3; fi
done
exit $fail
