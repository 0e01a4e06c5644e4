#!/bin/sh
# tests/comm/bench_comm.sh - `mtc bench-comm` end to end: every operation x
# every usable algorithm on 3 thread-ranks prints one JSON row per case with
# the nccl-tests keys and ok=true; bad flags exit 2 with a one-line error.
set -u
MTC=${MTC:?path of the mtc binary}
fail=0
out=$("$MTC" bench-comm --world-size 3 --op all --algo all --sizes 8,4K,100K --iters 3 --warmup 1 --json)
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; fail=1; }
rows=$(printf '%s\n' "$out" | grep -c '"op"')
[ "$rows" -ge 40 ] || { echo "FAIL: only $rows rows"; fail=1; }
for key in op algo backend ranks bytes time_us algbw_gbps busbw_gbps ok; do
    n=$(printf '%s\n' "$out" | grep -c "\"$key\": ")
    [ "$n" -eq "$rows" ] || { echo "FAIL: key $key in $n of $rows rows"; fail=1; }
done
bad=$(printf '%s\n' "$out" | grep -c '"ok": false')
[ "$bad" -eq 0 ] || { echo "FAIL: $bad rows not ok"; fail=1; }
# busbw = algbw * 2(n-1)/n for all_reduce on 3 ranks (4/3), within print rounding
printf '%s\n' "$out" | grep '"op": "all_reduce"' | sed 's/.*"algbw_gbps": \([0-9.]*\), "busbw_gbps": \([0-9.]*\).*/\1 \2/' |
    awk '{ if ($1 > 0.01 && ($2 / $1 < 1.32 || $2 / $1 > 1.35)) { print "FAIL: busbw/algbw " $2 / $1; exit 1 } }' || fail=1
# the table form has a header and the correctness column
"$MTC" bench-comm --world-size 2 --sizes 8 --iters 2 | grep -q 'busbw(GB/s)  ok' || { echo "FAIL: table header"; fail=1; }
for args in "--op gather" "--algo rign" "--dtype f16" "--sizes 8,x" "--world-size 0" "--algo hier"; do
    # shellcheck disable=SC2086
    "$MTC" bench-comm --sizes 8 --iters 1 $args >/dev/null 2>/tmp/bench_comm_err.$$
    rc=$?
    lines=$(wc -l < /tmp/bench_comm_err.$$)
    if [ $rc -ne 2 ] || [ "$lines" -ne 1 ]; then echo "FAIL: '$args' gave exit $rc, $lines lines"; fail=1; fi
done
rm -f /tmp/bench_comm_err.$$
# the environment is read at the CLI edge (cli_launch_defaults) and reaches
# the launch: MTC_COMM_ALGO forces the all-reduce either way, --comm-algo wins
for a in ring direct; do
    r=$(MTC_COMM_ALGO=all_reduce=$a "$MTC" bench-comm --world-size 2 --op all_reduce --sizes 8 --iters 1 --json)
    printf '%s\n' "$r" | grep -q "\"resolved\": \"$a\"" || { echo "FAIL: MTC_COMM_ALGO=all_reduce=$a: $r"; fail=1; }
done
r=$(MTC_COMM_ALGO=all_reduce=ring "$MTC" bench-comm --world-size 2 --op all_reduce --sizes 8 --iters 1 --json --comm-algo all_reduce=direct)
printf '%s\n' "$r" | grep -q '"resolved": "direct"' || { echo "FAIL: --comm-algo over MTC_COMM_ALGO: $r"; fail=1; }
# the shm wait tuning and the MPI check switch pass through as launch options
MTC_SHM_SPIN=0 MTC_SHM_YIELD=0 MTC_COMM_CHECK=0 "$MTC" bench-comm --world-size 2 --op all_reduce --sizes 8 --iters 1 --json |
    grep -q '"ok": true' || { echo "FAIL: MTC_SHM_SPIN=0 MTC_SHM_YIELD=0"; fail=1; }
[ $fail -eq 0 ] && echo "bench_comm: ok"
exit $fail
