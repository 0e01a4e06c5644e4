#!/bin/sh
# tests/mpi/errors.sh BIN - an MPI job whose ranks disagree, time out or die
# must end (not hang) with a non-zero status and a report naming the
# problem; a correct job must exit 0. Each run is bounded by `timeout`
# (60 s, then SIGKILL to mpirun and its rank processes: timeout signals its
# whole process group), so the 10 runs end well inside ctest's 600 s even
# when mpirun or MPI_Finalize/MPI_Abort hangs on a loaded machine; the
# ranks' own collective timeout is 2 s (mpi_errors.c's launch options,
# which take precedence over MTC_COMM_TIMEOUT).
set -u
BIN=$1
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ]; then echo "skipped: MPI not built"; exit 0; fi
MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
status=0

# run NP MODE WANT_STATUS(0|nonzero) PATTERN
run() {
    np=$1 mode=$2 want=$3 pattern=$4
    t0=$(date +%s)
    timeout -k 5 60 "$MPIRUN" --allow-run-as-root --oversubscribe -np "$np" "$BIN" "$mode" \
        >"$OUT" 2>&1 </dev/null
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    ok=1
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "FAIL: $mode (np $np) hung (killed after 60 s)"; ok=0
    elif [ "$want" = 0 ] && [ $rc -ne 0 ]; then echo "FAIL: $mode (np $np) exit $rc, want 0"; ok=0
    elif [ "$want" != 0 ] && [ $rc -eq 0 ]; then echo "FAIL: $mode (np $np) exit 0, want failure"; ok=0
    elif [ -n "$pattern" ] && ! grep -q "$pattern" "$OUT"; then
        echo "FAIL: $mode (np $np) output lacks '$pattern'"; ok=0
    fi
    if [ $ok -eq 1 ]; then
        echo "ok: $mode (np $np) exit $rc in ${secs} s"
        grep -m1 "$pattern" "$OUT" 2>/dev/null | cut -c1-300 | sed 's/^/    /'
    else
        sed 's/^/    | /' "$OUT" | head -40
        status=1
    fi
}

run 2 ok 0 "mpi_errors ok: ok"
run 4 ok 0 "mpi_errors ok: ok"
run 2 mismatch 1 "collective mismatch in WORLD (seq 2): rank 0 called all_reduce(count=4"
run 4 mismatch 1 "collective mismatch in WORLD"
run 2 timeout 1 "timeout in WORLD (seq 2)"
run 4 timeout 1 "waited in all_reduce(count=8, f32, sum) for"
run 2 dies 1 ""
run 4 dies 1 ""
# a rank that said farewell and went silent is not blamed: its peers read
# its farewell instead of its (absent) answer
for np in 2 4; do
    run $np gone 1 "rank $((np - 1)) has failed already (INTERNAL)"
    if grep -q "does not answer\|it is the cause" "$OUT"; then
        echo "FAIL: gone (np $np): a report blames a rank"; sed 's/^/    | /' "$OUT" | head -20; status=1
    fi
done
exit $status
