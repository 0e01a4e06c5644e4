#!/bin/sh
# tests/multihost/comm.sh MATRIX ERRORS STALL PIPELINE - the communication library on
# two hosts (network namespaces, hosts_lib.sh): mtc-a and mtc-b, Open MPI over
# TCP between them and shared memory inside each.
#   - the collective matrix (tests/comm/test_coll_matrix.c: every algorithm,
#     hierarchical included, x operation x dtype x count against closed-form
#     values) on 2 hosts x 1 rank and 2 hosts x 2 ranks, with the real node
#     map (MTC_TEST_NODES=2: the world must span both hosts);
#   - a collective mismatch and a skipped collective (tests/mpi/mpi_errors.c)
#     end the job with a report naming the ranks and their hosts;
#   - a rank stopped with SIGSTOP on mtc-b (tests/mpi/mpi_stall.c) ends the
#     job within deadline (2 s) + 5 s with a report blaming it on mtc-b;
#   - oversubscription (2 ranks on each host's one core) is reported in one
#     line (the run of the matrix on 2 x 2);
#   - the selector (mtc bench-comm --algo auto) picks the hierarchical
#     all-reduce, reduce-scatter and all-gather across the hosts.
# Root only: otherwise skipped (exit 77) with a notice.
set -u
MATRIX=$1 ERRORS=$2 STALL=$3 PIPELINE=$4
. "${MTC_SOURCE_DIR:-.}/tests/multihost/hosts_lib.sh"
mh_require
mh_setup
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
OUT=$MH_TMP/out

if mh_run 1 -x MTC_TEST_QUICK=1 -x MTC_TEST_NODES=2 -- "$MATRIX" >"$OUT" 2>&1; then
    ok "collective matrix (reduced), 2 hosts x 1 rank: $(grep -c passed "$OUT") ranks, $(grep -m1 passed "$OUT")"
else bad "collective matrix, 2 hosts x 1 rank"; tail -30 "$OUT"; fi
if mh_run 2 -x MTC_TEST_NODES=2 -- "$MATRIX" >"$OUT" 2>&1; then
    ok "collective matrix, 2 hosts x 2 ranks: $(grep -m1 passed "$OUT")"
else bad "collective matrix, 2 hosts x 2 ranks"; tail -30 "$OUT"; fi
# every one of the 4 ranks reports no failure
if mh_run 2 -x MTC_TEST_NODES=2 -- "$PIPELINE" >"$MH_TMP/pipe" 2>&1 &&
    [ "$(grep -c " passed, 0 failed" "$MH_TMP/pipe")" = 4 ]; then
    ok "pipelined hierarchical all-reduce, 2 hosts x 2 ranks: $(grep -m1 passed "$MH_TMP/pipe")"
else bad "pipelined hierarchical all-reduce, 2 hosts x 2 ranks"; tail -20 "$MH_TMP/pipe"; fi
# with ranks_per_node 0 the matrix reaches the hierarchical cases only
# where sub-communicators span both hosts (sizes 3 and 4): they ran
grep -q "^p=4 (mpi)" "$OUT" && ok "the matrix ran on 4 ranks across the hosts" || bad "no p=4 run"; 
n=$(grep -c "^mtc: oversubscribed: 2 ranks on 1 core on mtc-a, 2 ranks on 1 core on mtc-b; waiting ranks yield" "$OUT")
if [ "$MH_CPUA" = "$MH_CPUB" ] || [ "$n" = 1 ]; then
    ok "oversubscription reported once ($n line)"
else bad "oversubscription line: $n, want 1"; grep oversub "$OUT"; fi

# the selector: across 2 hosts x 2 ranks, medium and large all-reduce,
# reduce-scatter and all-gather resolve to the hierarchical algorithm
MTC=${MTC:-build/mtc}
MTC=$(cd "$(dirname "$MTC")" && pwd)/$(basename "$MTC")
# (the model's crossovers: all-reduce from ~16 KB up; reduce-scatter and
# all-gather below a few hundred KB, src/comm/select.c)
: >"$OUT"
mh_run 2 "$MTC" bench-comm --op all_reduce --sizes 256K,4M --iters 2 --warmup 1 --json >>"$OUT" 2>&1
for op in reduce_scatter all_gather; do
    mh_run 2 "$MTC" bench-comm --op $op --sizes 16K,64K --iters 2 --warmup 1 --json >>"$OUT" 2>&1
done
for op in all_reduce reduce_scatter all_gather; do
    n=$(grep -c "\"op\": \"$op\", \"algo\": \"auto\", \"resolved\": \"hier\".*\"ok\": true" "$OUT")
    [ "$n" = 2 ] && ok "auto $op across hosts resolves to hier (both sizes, results right)" ||
        { bad "auto $op: hier on $n of 2 sizes"; grep "\"$op\"" "$OUT" | head -4; }
done

# expect NAME STATUS PATTERN: the last run's status (0 / nonzero) and output
expect() {
    st=$2
    if [ "$st" -eq 124 ] || [ "$st" -eq 137 ]; then bad "$1: hung (killed)"; sed 's/^/    | /' "$OUT" | head -20; return; fi
    if { [ "$3" = 0 ] && [ "$st" -ne 0 ]; } || { [ "$3" != 0 ] && [ "$st" -eq 0 ]; }; then
        bad "$1: exit $st"; sed 's/^/    | /' "$OUT" | head -20; return
    fi
    if grep -q "$4" "$OUT"; then ok "$1: exit $st: $(grep -m1 -o "$4.\{0,120\}" "$OUT")"
    else bad "$1: no '$4'"; sed 's/^/    | /' "$OUT" | head -20; fi
}
MH_TIMEOUT=60 mh_run 2 "$ERRORS" ok >"$OUT" 2>&1
expect "control run" $? 0 "mpi_errors ok: ok"
MH_TIMEOUT=60 mh_run 2 "$ERRORS" mismatch >"$OUT" 2>&1
expect "mismatch names hosts" $? 1 "collective mismatch in WORLD (seq 2): rank 0 on mtc-a called all_reduce(count=4.* but rank [23] on mtc-b called all_reduce(count=8"
MH_TIMEOUT=60 mh_run 2 "$ERRORS" timeout >"$OUT" 2>&1
expect "timeout names hosts" $? 1 "timeout in WORLD (seq 2): rank [0-2] on mtc-[ab] waited in .* for .*rank 3 on mtc-b"

# a stopped rank on mtc-b: reports blame "rank 3 on mtc-b", the job ends in time
MH_TIMEOUT=30 MTC_STALL_PIDFILE=$MH_TMP/pid mh_run 2 -x MTC_STALL_PIDFILE -- "$STALL" >"$OUT" 2>&1
st=$?
end=$(date +%s%3N)
stop=$(sed -n 's/^mpi_stall: rank [0-9]* stops at \([0-9]*\) ms$/\1/p' "$OUT" | head -1)
if [ -z "$stop" ]; then bad "stall: the last rank never stopped (exit $st)"; sed 's/^/    | /' "$OUT" | head -20
elif [ $((end - stop)) -gt 7000 ]; then bad "stall: ended $((end - stop)) ms after the stop (> 2 s + 5 s)"
# the blame reads "rank 3 on mtc-b ..." or, at the end of a chain of waits
# through a node sub-communicator, "world rank 3, which is on mtc-b ..."
else expect "stall on mtc-b ended $((end - stop)) ms after the stop" $st 1 "rank 3\(,\| on\)[^;]*mtc-b[^;]*: it is the cause"
fi
blamed=$(grep -o "; \(world \)\?rank [0-9]*\(,\| on\)[^;]*mtc-[ab][^;]*: it is the cause" "$OUT" | grep -v "rank 3\(,\| on\)[^;]*mtc-b" | head -1)
[ -z "$blamed" ] && ok "stall: no other rank blamed" || bad "stall: a report blames $blamed"
exit $fail
