#!/bin/sh
# tests/pp/test_executor_mpi.sh BIN - the pipeline executor's toy-model test
# (tests/pp/test_executor.c) with ranks as MPI processes: np 2 and 4 run the
# configurations whose pp equals the world size, each process checking its
# own stages against the serial twin. Bounded by `timeout`.
set -u
BIN=$1
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ]; then echo "skipped: MPI not built"; exit 0; fi
MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
status=0
for np in 2 4; do
    out=$(timeout 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np "$np" "$BIN" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL: np $np exit $rc"
        echo "$out" | head -40 | sed 's/^/    | /'
        status=1
    else
        echo "ok: np $np: $(echo "$out" | grep -c ' passed, 0 failed') ranks passed"
    fi
done
[ $status -eq 0 ] && echo "2 passed, 0 failed" || echo "0 passed, 1 failed"
exit $status
