#!/bin/sh
# tests/parity/mtp_mpi.sh - multi-token prediction with ranks as MPI
# processes: `mpirun -np 4 mtc train --mtp-num-layers 2 --pp 2 --tp 2
# --sequence-parallel` against the serial run (lm loss, grad norm and both
# mtp_k losses within 2e-5), `mpirun -np 3` with a standalone MTP stage
# (pp 3 'Et|tmm|L'), and the DeepSeek-V3 shape (dsv3_lib.sh: MLA,
# first-k-dense sigmoid MoE, MTP) under `mpirun -np 4` as pp 2 (2|1) x
# ep 2 etp 1 x tp 2 + SP. Skips with a notice without MPI.
set -u
MTC=${MTC:-build/mtc}
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ] && [ "${MTC_HAVE_MPI:-0}" != "1" ]; then
    echo "notice: MTC_HAVE_MPI is ${MTC_HAVE_MPI:-unset}: MPI MTP parity skipped"; exit 0
fi
MPIRUN=${MPIEXEC:-mpirun}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/mtp_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/dsv3_lib.sh"
"$MTC" train $TINY $MTP --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY $MTP --pp 2 --tp 2 \
    --sequence-parallel --metrics "$D/a.jsonl" >"$D/a.log" 2>&1 || { bad "mpirun -np 4"; cat "$D/a.log"; }
same_mtp "mpi mtp pp=2 tp=2 sp" "$D/s.jsonl" "$D/a.jsonl"
# Megatron's standalone MTP stage: [h_0 | h_1 | h_2] between MPI processes
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 3 "$MTC" train $TINY $MTP --pp 3 \
    --pipeline-model-parallel-layout 'Et|tmm|L' --metrics "$D/b.jsonl" >"$D/b.log" 2>&1 || { bad "mpirun -np 3"; cat "$D/b.log"; }
same_mtp "mpi standalone mtp pp=3 Et|tmm|L" "$D/s.jsonl" "$D/b.jsonl"
"$MTC" train $TINY $DSV3 $DSV3_MTP --metrics "$D/ds.jsonl" >"$D/ds.log" 2>&1 || { bad "dsv3 serial run"; cat "$D/ds.log"; }
timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY $DSV3 $DSV3_MTP --pp 2 \
    --decoder-first-pipeline-num-layers 2 --tp 2 --sequence-parallel --ep 2 --etp 1 --metrics "$D/da.jsonl" \
    >"$D/da.log" 2>&1 || { bad "dsv3 mpirun -np 4"; cat "$D/da.log"; }
same_dsv3 "mpi dsv3 pp=2 (2|1) tp=2 sp ep=2 etp=1" "$D/ds.jsonl" "$D/da.jsonl"
grep -q "backend: mpi" "$D/a.log" && ok "ran on the mpi backend" || { bad "backend"; tail -3 "$D/a.log"; }
exit $fail
