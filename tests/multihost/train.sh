#!/bin/sh
# tests/multihost/train.sh - `mtc train` on two hosts (network namespaces,
# hosts_lib.sh) against the single-host serial run: per-iteration lm loss and
# grad norm within 2e-5 relative (tests/parity/parity_lib.sh), for
#   tp2 x dp2        2 hosts x 2 ranks, TP inside each host, DP across;
#   tp2 x pp2        2 hosts x 2 ranks, the pipeline across the hosts;
#   dp4              2 hosts x 2 ranks, distributed optimizer, overlapped
#                    gradient reduce-scatter and param all-gather;
#   cp2              2 hosts x 1 rank, context parallel across the hosts;
#   tp2 across       2 hosts x 1 rank (TP over the network): still right,
#                    and the banner warns.
# The banner must show the node map and which groups cross nodes, and the
# trace of the dp4 run (2 ranks on each host: two levels) must show the
# selector choosing the hierarchical reduce-scatter and all-gather for the
# data-parallel group.
# Root only: otherwise skipped (exit 77) with a notice.
set -u
MTC=${MTC:-build/mtc}
. "${MTC_SOURCE_DIR:-.}/tests/multihost/hosts_lib.sh"
mh_require
mh_setup
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
D=$MH_TMP
MTC=$(cd "$(dirname "$MTC")" && pwd)/$(basename "$MTC")

"$MTC" train $TINY --metrics "$D/s.jsonl" >"$D/s.log" 2>&1 || { bad "serial run"; cat "$D/s.log"; }
# banner NAME LOG PATTERN: a line of the banner
banner() {
    if grep -q "$3" "$2"; then ok "$1: $(grep -m1 "$3" "$2")"; else bad "$1: no '$3'"; grep "^>" "$2"; fi
}

mh_run 2 "$MTC" train $TINY --tp 2 --metrics "$D/a.jsonl" >"$D/a.log" 2>&1 || { bad "tp2 x dp2 run"; cat "$D/a.log"; }
same_losses "2 hosts: tp2 x dp2 (TP inside hosts)" "$D/s.jsonl" "$D/a.jsonl"
banner "node map" "$D/a.log" "^> nodes: 2 (mtc-a: ranks 0-1; mtc-b: ranks 2-3)$"
banner "groups across nodes" "$D/a.log" "^> process groups across nodes: tp 0/2, dp 2/2$"
grep -q "WARNING: tensor-parallel" "$D/a.log" && bad "tp2 x dp2 warned about TP" || ok "no TP warning with TP inside hosts"

mh_run 2 "$MTC" train $TINY --tp 2 --pp 2 --metrics "$D/b.jsonl" >"$D/b.log" 2>&1 || { bad "tp2 x pp2 run"; cat "$D/b.log"; }
same_losses "2 hosts: tp2 x pp2 (the pipeline across hosts)" "$D/s.jsonl" "$D/b.jsonl"
banner "pp across nodes" "$D/b.log" "^> process groups across nodes: tp 0/2, pp 2/2$"

mh_run 2 "$MTC" train $TINY --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 900 \
    --overlap-param-gather --trace "$D/c.trace.json" --metrics "$D/c.jsonl" >"$D/c.log" 2>&1 ||
    { bad "dp4 distopt run"; cat "$D/c.log"; }
same_losses "2 hosts: dp4, distributed optimizer, overlapped reduce-scatter and param gather" "$D/s.jsonl" "$D/c.jsonl"
banner "dp across nodes" "$D/c.log" "^> process groups across nodes: dp 1/1$"
for op in reduce_scatter all_gather; do
    # a span: {"name": "reduce_scatter", ..., "args": {"group": "DATA_PARALLEL_GROUP_WITH_CP", ..., "algo": "hier", ...
    if grep -q "{\"name\": \"$op\"[^{}]*{\"group\": \"DATA_PARALLEL_GROUP_WITH_CP\"[^{}]*\"algo\": \"hier\"" "$D/c.trace.json"; then
        ok "dp4 across hosts: the selector chose hier for $op"
    else bad "dp4: no hierarchical $op in the trace"; grep -o ".\{80\}$op.\{120\}" "$D/c.trace.json" | head -3; fi
done

MH_MAP=node mh_run 1 "$MTC" train $TINY --cp 2 --metrics "$D/d.jsonl" >"$D/d.log" 2>&1 || { bad "cp2 run"; cat "$D/d.log"; }
same_losses "2 hosts: cp2 across hosts" "$D/s.jsonl" "$D/d.jsonl"
banner "cp across nodes" "$D/d.log" "^> process groups across nodes: cp 1/1$"

mh_run 1 "$MTC" train $TINY --tp 2 --metrics "$D/e.jsonl" >"$D/e.log" 2>&1 || { bad "tp2 across run"; cat "$D/e.log"; }
same_losses "2 hosts: tp2 across hosts" "$D/s.jsonl" "$D/e.jsonl"
banner "TP warning" "$D/e.log" "^> WARNING: tensor-parallel groups cross nodes (1 of 1; e.g. ranks 0 on mtc-a, 1 on mtc-b)"
exit $fail
