#!/bin/sh
# tests/multihost/kill.sh - a host that dies in the middle of training: every
# process of host mtc-b (its daemon and its ranks) is killed with SIGKILL
# while `mtc train` runs tp2 x dp2 on 2 hosts x 2 ranks. The job must end,
# with a non-zero status, within the collective deadline (MTC_COMM_TIMEOUT=5)
# + the watchdog's grace (3 s) + 10 s for the launcher to take the job down,
# with a report on stderr that says what happened (mtc's, naming the rank
# and host that failed, or Open MPI's about the lost daemon on mtc-b), and
# leave no process behind on mtc-a. Root only: otherwise skipped (exit 77).
set -u
MTC=${MTC:-build/mtc}
. "${MTC_SOURCE_DIR:-.}/tests/multihost/hosts_lib.sh"
mh_require
mh_setup
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
MTC=$(cd "$(dirname "$MTC")" && pwd)/$(basename "$MTC")
OUT=$MH_TMP/out
DEADLINE=5
LIMIT=$((DEADLINE + 3 + 10))
: >"$OUT" # before the job starts: the polling below must not race its redirect
MH_TIMEOUT=120 MTC_COMM_TIMEOUT=$DEADLINE mh_run 2 -x MTC_COMM_TIMEOUT -- "$MTC" train $TINY --tp 2 \
    --train-iters 100000 --log-interval 1 >"$OUT" 2>&1 &
job=$!
# wait for the run to be stepping (a few iterations logged), at most 60 s
n=0
while [ $n -lt 600 ] && [ "$(grep -c ' iteration ' "$OUT")" -lt 5 ]; do
    kill -0 $job 2>/dev/null || break
    sleep 0.1
    n=$((n + 1))
done
if [ "$(grep -c ' iteration ' "$OUT")" -lt 5 ]; then
    bad "the run never got going"; sed 's/^/    | /' "$OUT" | tail -20
    kill $job 2>/dev/null; wait $job 2>/dev/null; exit 1
fi
pids=$(ip netns pids $MH_NSB)
t0=$(date +%s%3N)
kill -KILL $pids
wait $job
st=$?
secs=$(( ($(date +%s%3N) - t0) / 1000 ))
if [ $st -eq 124 ] || [ $st -eq 137 ]; then bad "the job hung after mtc-b died (killed by timeout)"
elif [ $st -eq 0 ]; then bad "the job exited 0 after mtc-b died"
elif [ $secs -gt $LIMIT ]; then bad "the job ended $secs s after mtc-b died (> $LIMIT s)"
else ok "the job ended $secs s after mtc-b died (status $st, limit $LIMIT s)"
fi
if grep -q "mtc: rank [0-9]* on mtc-a failed with\|mtc: watchdog: .*on mtc-\|ORTE has lost communication with a remote daemon\|daemon.*mtc-b\|mtc-b.*daemon" "$OUT"; then
    ok "report: $(grep -m1 "mtc: rank [0-9]* on mtc-a failed with\|mtc: watchdog:\|ORTE has lost communication\|daemon.*mtc-b\|mtc-b.*daemon" "$OUT" | cut -c1-300)"
else bad "no report of the lost host"; sed 's/^/    | /' "$OUT" | grep -v " iteration " | tail -30; fi
left=$(ip netns pids $MH_NSA)
[ -z "$left" ] && ok "nothing left running on mtc-a" || bad "processes left on mtc-a: $left"
exit $fail
