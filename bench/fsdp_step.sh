#!/bin/sh
# bench/fsdp_step.sh [BUILD_DIR] - Megatron-FSDP's step beside the
# distributed optimizer's on one GPT on 4 rank-threads, in one run:
# ROUNDS rounds, each running the distributed optimizer, FSDP
# optim_grads_params with --overlap-grad-reduce --overlap-param-gather and
# without, one after the other (alternating, so load from other jobs falls
# on all alike). Per configuration: the median step over the rounds' logged
# iterations after the second (the first ones fault the buffers and
# oneDNN's kernels in), the median of the rounds' CPU seconds per step
# (user + system of the process, less a 2-iteration run's, over ITERS - 2:
# the start-up cancels; all 4 ranks), the
# all-gather / reduce-scatter calls per step, and each against the
# distributed optimizer's. The machine may be shared: compare within a run.
#   MODEL   the model's flags (default: 8 layers, hidden 512, 8 heads,
#           vocabulary 8192, sequence 128, as bench/sharding.sh)
#   ITERS   iterations per run (default 6), ROUNDS (default 2)
set -eu
B=${1:-build}
MTC=$B/mtc
[ -x "$MTC" ] || { echo "bench/fsdp_step.sh: $MTC not found (build first)" >&2; exit 2; }
MODEL=${MODEL:---num-layers 8 --hidden-size 512 --num-attention-heads 8 --vocab-size 8192 --seq-length 128}
ITERS=${ITERS:-6}
ROUNDS=${ROUNDS:-2}
case $ITERS in '' | *[!0-9]*) echo "bench/fsdp_step.sh: ITERS=$ITERS must be an integer >= 3" >&2; exit 2 ;; esac
[ "$ITERS" -ge 3 ] || { echo "bench/fsdp_step.sh: ITERS=$ITERS must be >= 3" >&2; exit 2; }
case $ROUNDS in '' | *[!0-9]*) echo "bench/fsdp_step.sh: ROUNDS=$ROUNDS must be an integer >= 1" >&2; exit 2 ;; esac
[ "$ROUNDS" -ge 1 ] || { echo "bench/fsdp_step.sh: ROUNDS=$ROUNDS must be >= 1" >&2; exit 2; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
BASE="--mock-data $MODEL --micro-batch-size 2 --global-batch-size 8 --log-interval 1 --eval-iters 0 --lr 1e-4 --world-size 4"
COMMON="$BASE --train-iters $ITERS" COMMON2="$BASE --train-iters 2"
F="--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
: >"$D/raw"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    while IFS='|' read -r key flags; do
        [ -n "$key" ] || continue
        # shellcheck disable=SC2086
        /usr/bin/time -f "%U %S" -o "$D/t" "$MTC" train $COMMON $flags --metrics "$D/m.jsonl" >"$D/log" 2>&1 ||
            { echo "$key: failed"; tail -3 "$D/log"; continue; }
        # CPU seconds per step: this run's less a 2-iteration run's, over ITERS - 2 (start-up cancels)
        # shellcheck disable=SC2086
        /usr/bin/time -f "%U %S" -o "$D/t2" "$MTC" train $COMMON2 $flags >"$D/log2" 2>&1 || { echo "$key: 2-iteration run failed"; tail -3 "$D/log2"; continue; }
        cpu=$(awk -v n="$ITERS" 'NR == FNR { a = $1 + $2; next } { print (a - $1 - $2) / (n - 2) }' "$D/t" "$D/t2")
        tail -n +3 "$D/m.jsonl" | python3 -c '
import json, sys
key, cpu = sys.argv[1], sys.argv[2]
for l in sys.stdin:
    if not l.strip(): continue
    r = json.loads(l)
    g = r.get("comm_groups", {}).get("DATA_PARALLEL_GROUP_WITH_CP", {})
    print(key, r["elapsed_ms"], cpu, g.get("all_gather", {}).get("calls", 0), g.get("reduce_scatter", {}).get("calls", 0))
' "$key" "$cpu" >>"$D/raw"
    done <<CONF
distopt|--use-distributed-optimizer
fsdp-ogp-overlap|$F --overlap-grad-reduce --overlap-param-gather
fsdp-ogp|$F
CONF
    r=$((r + 1))
done
uptime | sed 's/.*load/# load/'
printf '%-20s %10s %17s %8s %12s %8s %10s\n' configuration "step ms" "(min - max)" ratio "CPU s/step" ratio "AG / RS"
awk 'function med(a, n,   i, j, t) {
         for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
     { k = $1; if (!(k in n)) order[++nk] = k; n[k]++; s[k, n[k]] = $2; c[k, n[k]] = $3; ag[k] = $4; rs[k] = $5 }
     END { for (o = 1; o <= nk; o++) { k = order[o]; delete v; delete w
             for (i = 1; i <= n[k]; i++) { v[i] = s[k, i]; w[i] = c[k, i] }
             ms[k] = med(v, n[k]); cs[k] = med(w, n[k]); lo[k] = v[1]; hi[k] = v[n[k]] }
           for (o = 1; o <= nk; o++) { k = order[o]
             printf "%-20s %10.1f %8.0f - %-6.0f %8.2f %12.3f %8.2f %5d / %-4d\n", k, ms[k], lo[k], hi[k], ms[k] / ms["distopt"], cs[k], cs[k] / cs["distopt"], ag[k], rs[k] } }' "$D/raw"
echo "# medians over $ROUNDS rounds of iterations 3-$ITERS (step; min - max: the fastest and slowest of them) and of"
echo "# the runs (CPU seconds per step of the process, start-up cancelled); ratio: against distopt; AG / RS: calls per step"
