#!/bin/sh
# tests/mpi/stall.sh BIN NP REPEATS ALGO... - a stopped rank (SIGSTOP, see
# mpi_stall.c) must end the MPI job, for every forced algorithm (native =
# the MPI library's own collectives), every time: a 1-in-8 hang must show,
# so each algorithm runs REPEATS times. Each run must
#   - end (timeout 30 s around mpirun; a hang fails instead of hanging CI),
#     with a non-zero status, within deadline (2 s) + 5 s of the stop;
#   - print a timeout report that names the stopped rank as the cause, and
#     blame no other rank (every "...: it is the cause" names the last rank);
#   - show the waiting ranks sleeping, not spinning: the CPU time of a
#     waiter's process over its failed call is below 30% of that call's
#     wall time (a correctness property: a spinning waiter uses ~100%).
# The stopped process is killed by pid if it outlives mpirun.
set -u
BIN=$1 NP=$2 REPEATS=$3
shift 3
if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ]; then echo "skipped: MPI not built"; exit 0; fi
MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/out PIDF=$TMP/pid
victim=$((NP - 1))
# the ranks the reports name as the cause, one a line: "; rank 3 does not
# answer (...): it is the cause" or "...; the chain of waits ends at world
# rank 3, which ...: it is the cause" (WORLD only here: ranks are world ranks)
# the causes the live ranks name; the stopped rank's own report is left out:
# continued by mpirun's SIGCONT after the others aborted, it may time out and
# name a rank that has already exited
causes() {
    grep -v "^ *mtc: rank $victim failed" "$OUT" |
        grep -o "; rank [0-9]*[^;]*: it is the cause\|ends at world rank [0-9]*, which[^;]*: it is the cause" |
        sed 's/^; rank \([0-9]*\).*/\1/; s/^ends at world rank \([0-9]*\).*/\1/'
}
status=0
for algo in "$@"; do
    i=0
    while [ $i -lt "$REPEATS" ]; do
        i=$((i + 1))
        rm -f "$PIDF"
        MTC_COMM_ALGO=$algo MTC_STALL_PIDFILE=$PIDF timeout -k 5 30 "$MPIRUN" --allow-run-as-root \
            --oversubscribe -x MTC_COMM_ALGO -x MTC_STALL_PIDFILE -np "$NP" "$BIN" >"$OUT" 2>&1 </dev/null
        rc=$?
        end=$(date +%s%3N)
        alive=""
        if [ -s "$PIDF" ]; then
            pid=$(cat "$PIDF")
            # a zombie is dead (its reaper may be slow); a process still there 3 s
            # after mpirun returned (mpirun's SIGCONT/SIGTERM/SIGKILL may trail it)
            # outlived the job
            n=0
            while :; do
                st=$(sed -n 's/^[0-9]* ([^)]*) \([A-Z]\).*/\1/p' /proc/"$pid"/stat 2>/dev/null)
                { [ -z "$st" ] || [ "$st" = Z ] || [ $n -ge 30 ]; } && break
                sleep 0.1
                n=$((n + 1))
            done
            if [ -n "$st" ] && [ "$st" != Z ]; then
                kill -KILL "$pid" 2>/dev/null
                alive="the stopped rank (pid $pid, state $st) outlived mpirun (killed now)"
            fi
        fi
        stop=$(sed -n 's/^mpi_stall: rank [0-9]* stops at \([0-9]*\) ms$/\1/p' "$OUT" | head -1)
        why=""
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="hung (killed after 30 s)"
        elif [ -n "$alive" ]; then why=$alive
        elif [ $rc -eq 0 ]; then why="exit 0, want failure"
        elif [ -z "$stop" ]; then why="the last rank never stopped"
        elif [ $((end - stop)) -gt 7000 ]; then why="ended $((end - stop)) ms after the stop (> 2 s + 5 s)"
        elif ! grep -q "timeout in " "$OUT"; then why="no timeout report"
        elif [ -z "$(causes)" ]; then why="no report names a cause"
        elif causes | grep -vqx "$victim"; then why="a report blames rank(s) $(causes | grep -vx "$victim" | tr '\n' ' ')"
        else
            hot=$(sed -n 's/^mpi_stall: rank [0-9]* waited \([0-9.]*\) s using \([0-9.]*\) s of CPU$/\1 \2/p' "$OUT" |
                awk '$1 > 1 && $2 > 0.3 * $1 { print }' | head -1)
            [ -n "$hot" ] && why="a waiter burned CPU while waiting (wall s, cpu s: $hot)"
        fi
        if [ -n "$why" ]; then
            echo "FAIL: np $NP $algo run $i: $why"
            sed 's/^/    | /' "$OUT" | head -30
            status=1
        else
            echo "ok: np $NP $algo run $i: exit $rc, ended $((end - stop)) ms after the stop"
            grep -m1 "it is the cause" "$OUT" | cut -c1-400 | sed 's/^/    /'
            grep -m1 "waited .* of CPU" "$OUT" | sed 's/^/    /'
        fi
    done
done
exit $status
