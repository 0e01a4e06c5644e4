#!/bin/sh
# tests/mpi/coll_matrix.sh BIN - the collective matrix (reduced) under
# mpirun with 2 and 4 ranks: every algorithm on sub-communicators of sizes
# 1..N over the mpi backend, plus MPI's native collectives.
set -u
BIN=$1
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ]; then echo "skipped: MPI not built"; exit 0; fi
MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
status=0
for np in 2 4; do
    echo "== mpirun -np $np $(basename "$BIN") (MTC_TEST_QUICK=1)"
    # bounded: a hang is killed (whole process group) well inside ctest's 600 s
    if ! MTC_TEST_QUICK=1 timeout -k 5 240 "$MPIRUN" --allow-run-as-root --oversubscribe -np $np "$BIN" </dev/null; then
        echo "FAIL: matrix under mpirun -np $np"
        status=1
    fi
done
exit $status
