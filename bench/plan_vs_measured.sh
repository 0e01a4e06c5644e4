#!/bin/sh
# bench/plan_vs_measured.sh - `mtc plan`'s prediction beside a measured run
# for layouts of the small GPT (4 layers, hidden 128, 4 heads, seq 128,
# vocab 256 mock tokens, micro batch 2, global batch 16) on 2, 4 and 8
# rank-threads and on 2 and 4 MPI processes: step time (the median logged
# iteration after the first, which makes oneDNN's kernels and faults the
# pages in: the typical step, as the plan's kernel costs are bench-peak's
# medians; the fastest of 5 moved by 10-20% from one run of a layout to
# the next here, the median of 11 by a few %) and memory per rank (the banner's
# allocation, exact by construction, and the process's peak RSS over the
# ranks it holds, which also counts code, BLAS buffers and data: predicted
# from the allocations and bench-peak's resident set of a process without
# a model).
# ROUNDS rounds: each measures the machine (`mtc bench-peak` into a temporary
# file: the GEMM rate at mtc's shapes and the share of a core a compute-bound
# thread gets under the current load) and then runs every layout, so the
# prediction and the runs see the same load; the table shows per layout the
# median prediction and the median measurement over the rounds. The machine
# is shared: the figures move with the load and are not asserted anywhere.
# MoE rows: the same GPT with 8 experts top-2 in every layer (expert ffn 4h)
# at ep 1 / 2 / 4, etp 1 / tp, with the allgather and the alltoall
# dispatcher, one with dp 2 x ep 2 and the distributed optimizer.
# FSDP rows: Megatron-FSDP optim_grads and optim_grads_params, with and
# without --overlap-grad-reduce --overlap-param-gather, on dp 4
# rank-threads (the plan prices each unit's gathers and reduce-scatters and
# the page pool: docs/fsdp.md), beside the distributed optimizer's row.
# Usage: bench/plan_vs_measured.sh [build-dir]
# Env: ITERS (default 12), ROUNDS (default 3), MPI (auto|off), CPU (1: also the plan at a
# share of 1 beside each rank-thread layout's CPU seconds per step, a check the load moves less),
# ROWS (all, dense, moe or fsdp; default all)
set -eu
BUILD=${1:-build}
MTC=$BUILD/mtc
[ -x "$MTC" ] || { echo "plan_vs_measured: $MTC not built (cmake --build $BUILD)" >&2; exit 2; }
ITERS=${ITERS:-12}
case $ITERS in '' | *[!0-9]*) echo "plan_vs_measured: ITERS=$ITERS must be an integer >= 2" >&2; exit 2 ;; esac
[ "$ITERS" -ge 2 ] || { echo "plan_vs_measured: ITERS=$ITERS must be >= 2" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-all}
case $ROWS in all | dense | moe | fsdp) ;; *) echo "plan_vs_measured: ROWS=$ROWS must be all, dense, moe or fsdp" >&2; exit 2 ;; esac
case $ROUNDS in '' | *[!0-9]*) echo "plan_vs_measured: ROUNDS=$ROUNDS must be an integer >= 1" >&2; exit 2 ;; esac
[ "$ROUNDS" -ge 1 ] || { echo "plan_vs_measured: ROUNDS=$ROUNDS must be >= 1" >&2; exit 2; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MODEL="--vocab-size 256 --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --micro-batch-size 2 --global-batch-size 16"
TRAIN="--mock-data --train-iters $ITERS --log-interval 1 --eval-iters 0"
MPIRUN=""
if [ "${MPI:-auto}" != off ] && command -v mpirun >/dev/null 2>&1; then
    MPIRUN="mpirun --oversubscribe"
    [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
fi
# run LAUNCH WORLD TP PP VPP SP DO [EP ETP DISPATCHER]: with EP, the MoE model
run() {
    launch=$1 world=$2 tp=$3 pp=$4 vpp=$5 sp=$6 do=$7 ep=${8:-} etp=${9:-} disp=${10:-allgather}
    targs="--tp $tp --pp $pp --vpp $vpp" lay="tp$tp-pp$pp-vpp$vpp" pargs="" key=""
    # FSDP (fsdp_rows): both commands take the flags; the row's name carries them
    [ -n "${FX:-}" ] && targs="$targs $FX" pargs="$FX" key="$FK"
    if [ -n "$ep" ]; then # flags both commands take; the layout name carries ep / etp
        moe="--num-experts 8 --moe-router-topk 2 --moe-token-dispatcher-type $disp"
        targs="$targs $moe --ep $ep --etp $etp" pargs="$moe" lay="$lay-ep$ep-etp$etp"
        key=$([ "$disp" = alltoall ] && echo "-a2a" || echo "-ag")
    fi
    [ "$sp" = 1 ] && targs="$targs --sequence-parallel" && lay="$lay-sp"
    [ "$do" = 1 ] && targs="$targs --use-distributed-optimizer" && lay="$lay-do" &&
        pargs="$pargs --use-distributed-optimizer"
    if [ "$launch" = mpi ]; then
        [ -n "$MPIRUN" ] || return 0
        /usr/bin/time -f "%M" -o "$D/rss" $MPIRUN -np "$world" "$MTC" train $MODEL $TRAIN $targs \
            --metrics "$D/m" >"$D/log" 2>&1 || { echo "$launch $lay failed:"; tail -3 "$D/log"; return 0; }
        perproc=1 # replaced below by the rank processes' own peaks (--metrics)
    else
        /usr/bin/time -f "%M %U %S" -o "$D/rss" "$MTC" train $MODEL $TRAIN $targs --world-size "$world" \
            --metrics "$D/m" >"$D/log" 2>&1 || { echo "$launch $lay failed:"; tail -3 "$D/log"; return 0; }
        perproc=$world
        if [ "${CPU:-0}" = 1 ]; then # CPU seconds per step: ITERS iterations less 2
            /usr/bin/time -f "%M %U %S" -o "$D/rss2" "$MTC" train $MODEL --mock-data --train-iters 2 \
                --log-interval 1 --eval-iters 0 $targs --world-size "$world" >"$D/log2" 2>&1
            cpu=$(awk -v w="$world" -v c="$CORES" -v n="$ITERS" 'NR == FNR { a = $2 + $3; next }
                { b = $2 + $3 } END { f = w > c ? w / c : 1; print (a - b) / (n - 2) / w * f * 1e3 }' \
                "$D/rss" "$D/rss2")
            "$MTC" plan $MODEL --world-size "$world" $pargs --machine "$D/machine1.json" --explain "$lay" \
                --json >"$D/p1" 2>>"$D/perr"
            plan1=$(sed -n 's/.*"step_ms": \([0-9.e+-]*\),.*/\1/p' "$D/p1")
            echo "$launch $world:$lay$key $plan1 $cpu" >>"$D/rawcpu"
        fi
    fi
    dp=$((world / tp / pp)) rpp=""
    [ "$launch" = mpi ] && rpp="--ranks-per-process 1" # processes: their own oversubscription
    "$MTC" plan $MODEL --world-size "$world" $pargs --machine "$D/machine.json" --explain "$lay" \
        --pp-rank $((pp - 1)) --dp-rank $((dp - 1)) $rpp --json >"$D/p" 2>"$D/perr" ||
        { echo "$launch $lay: plan failed: $(cat "$D/perr")"; return 0; }
    # resident memory: under mpirun the largest process holds one rank (the
    # peak one: the explained one); rank-threads share one process, so its
    # resident set per rank is the mean over the pipeline ranks' allocations
    # plus the process's fixed resident set (bench-peak's base_rss) / world
    if [ "$launch" = mpi ]; then
        "$MTC" plan $MODEL --world-size "$world" $pargs --machine "$D/machine.json" --explain "$lay" \
            --ranks-per-process 1 --json >"$D/pr" 2>>"$D/perr"
        plan_rss=$(sed -n 's/.*"rss_bytes": \([0-9.e+]*\)}.*/\1/p' "$D/pr" | awk '{ print $1 / 1048576 }')
    else
        # (its own counter: sh has no locals, and the rounds loop counts with r)
        plan_rss=0 q=0
        while [ "$q" -lt "$pp" ]; do
            "$MTC" plan $MODEL --world-size "$world" $pargs --machine "$D/machine.json" --explain "$lay" \
                --pp-rank "$q" --json >"$D/pr" 2>>"$D/perr"
            plan_rss=$(sed -n 's/.*"rss_bytes": \([0-9.e+]*\)}.*/\1/p' "$D/pr" |
                awk -v a="$plan_rss" -v p="$pp" '{ print a + $1 / 1048576 / p }')
            q=$((q + 1))
        done
    fi
    meas=$(sed -n 's/.*"elapsed_ms": \([0-9.]*\).*/\1/p' "$D/m" | tail -n +2 | sort -g |
        awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    alloc=$(tail -1 "$D/m" | sed 's/.*"param_bytes": \([0-9]*\), "grad_bytes": \([0-9]*\), "optim_state_bytes": \([0-9]*\), "activation_bytes": \([0-9]*\).*/\1 \2 \3 \4/' |
        awk '{ print ($1 + $2 + $3 + $4) / 1048576 }')
    rss=$(tail -1 "$D/rss" | awk -v n="$perproc" '{ print $1 / 1024 / n }')
    if [ "$launch" = mpi ]; then # the largest rank process's own peak, from --metrics
        rss=$(tail -1 "$D/m" | sed -n 's/.*"peak_rss_bytes": \[\([0-9, ]*\)\].*/\1/p' |
            awk -F', ' '{ m = 0; for (i = 1; i <= NF; i++) if ($i > m) m = $i; print m / 1048576 }')
    fi
    plan_ms=$(sed -n 's/.*"step_ms": \([0-9.e+-]*\),.*/\1/p' "$D/p")
    plan_mb=$(sed -n 's/.*"param_bytes": \([0-9]*\), "grad_bytes": \([0-9]*\), "optim_state_bytes": \([0-9]*\), "activation_bytes": \([0-9]*\).*/\1 \2 \3 \4/p' "$D/p" |
        awk '{ print ($1 + $2 + $3 + $4) / 1048576 }')
    echo "$launch $world:$lay$key $plan_ms $meas $plan_mb $alloc $rss $plan_rss" >>"$D/raw"
}
rows() {
case $ROWS in all | dense) dense_rows ;; esac
case $ROWS in all | moe) moe_rows ;; esac
case $ROWS in all | fsdp) fsdp_rows ;; esac
}
fsdp_rows() {
F="--use-megatron-fsdp --data-parallel-sharding-strategy" O="--overlap-grad-reduce --overlap-param-gather"
FX="" FK=""
run threads 4 1 1 1 0 1
FX="$F optim_grads" FK="-fsdp-og"
run threads 4 1 1 1 0 1
FX="$F optim_grads $O" FK="-fsdp-og-ov"
run threads 4 1 1 1 0 1
FX="$F optim_grads_params" FK="-fsdp-ogp"
run threads 4 1 1 1 0 1
FX="$F optim_grads_params $O" FK="-fsdp-ogp-ov"
run threads 4 1 1 1 0 1
FX="" FK=""
}
moe_rows() {
run threads 2 1 1 1 0 0 1 1 allgather
run threads 2 1 1 1 0 0 2 1 allgather
run threads 2 1 1 1 0 0 2 1 alltoall
run threads 2 2 1 1 1 0 2 1 allgather
run threads 4 1 1 1 0 0 2 1 allgather
run threads 4 1 1 1 0 0 2 1 alltoall
run threads 4 1 1 1 0 1 2 1 allgather
run threads 4 1 1 1 0 0 4 1 alltoall
run threads 4 2 1 1 1 1 2 1 alltoall
run mpi 2 1 1 1 0 0 2 1 alltoall
}
dense_rows() {
run threads 2 1 1 1 0 0
run threads 2 2 1 1 1 0
run threads 2 1 2 1 0 0
run threads 4 1 1 1 0 0
run threads 4 2 1 1 1 1
run threads 4 2 2 1 1 1
run threads 4 1 2 2 0 1
run threads 4 1 4 1 0 0
run threads 8 2 2 1 1 1
run threads 8 2 4 1 0 0
run mpi 2 1 1 1 0 0
run mpi 2 1 2 1 0 0
run mpi 4 2 2 1 1 1
}
: >"$D/raw"
: >"$D/rawcpu"
CORES=$(nproc 2>/dev/null || echo 2)
r=1
while [ "$r" -le "$ROUNDS" ]; do
    "$MTC" bench-peak --output "$D/machine.json" | sed -n "s/^> GEMM fp32 256/# round $r: GEMM fp32 256/p"
    sed 's/"cpu_share": [0-9.e+-]*/"cpu_share": 1/' "$D/machine.json" >"$D/machine1.json"
    rows
    r=$((r + 1))
done
printf "%-9s %-30s %10s %10s %7s | %9s %9s %7s | %9s %9s %7s\n" launch layout "plan ms" "meas ms" ratio \
    "plan MB" "alloc MB" ratio "plan RSS" "RSS MB" ratio
# per layout, in first-seen order: medians over the rounds
awk '{ k = $1 " " $2; if (!(k in n)) order[++nk] = k; i = ++n[k]
       pm[k, i] = $3; mm[k, i] = $4; pb[k] = $5; ab[k] = $6; rs[k, i] = $7; pr[k, i] = $8 }
     function med(a, k, c,   i, j, t, v) {
         for (i = 1; i <= c; i++) v[i] = a[k, i]
         for (i = 2; i <= c; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
         return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2 }
     END { for (o = 1; o <= nk; o++) { k = order[o]; split(k, f, " "); c = n[k]
         p = med(pm, k, c); m = med(mm, k, c); r = med(rs, k, c); q = med(pr, k, c)
         printf "%-9s %-30s %10.1f %10.1f %7.2f | %9.2f %9.2f %7.3f | %9.1f %9.1f %7.2f\n", f[1], f[2], p, m, p / m, pb[k], ab[k], pb[k] / ab[k], q, r, q / r } }' "$D/raw" | tee "$D/table"
echo "# medians over $ROUNDS rounds (plan: each round's own bench-peak)."
echo "# ratio = plan / measured; target: step time within 20%, memory within 10% (alloc: the banner's"
echo "# allocation; RSS: peak resident set per rank, under mpirun of the largest process; plan RSS:"
echo "# the allocation (mean over pipeline ranks for rank-threads) + bench-peak's resident set of a"
echo "# process without a model / ranks per process)."
awk '{ t = $5; m = $9; q = $13; if (t < 0.8 || t > 1.25) bt++; if (m < 0.9 || m > 1.11) bm++
       if (q < 0.9 || q > 1.11) bq++; n++ }
     END { printf "# %d layouts: step time off by more than 20%%: %d; allocation off by more than 10%%: %d; RSS off by more than 10%%: %d\n", n, bt, bm, bq }' "$D/table"
if [ "${CPU:-0}" = 1 ]; then
    echo "# CPU=1, a check the load moves less (rank-threads): the plan at a share of 1 beside the CPU"
    echo "# seconds per step per rank (ITERS - 2 iterations, x ranks / cores when they outnumber the"
    echo "# cores; spin-waits count, sleeping waits and the bubble do not), medians over the rounds"
    printf "%-9s %-30s %10s %10s %7s\n" launch layout "plan@1 ms" "CPU ms" ratio
    awk '{ k = $1 " " $2; if (!(k in n)) order[++nk] = k; i = ++n[k]; pm[k, i] = $3; cm[k, i] = $4 }
         function med(a, k, c,   i, j, t, v) {
             for (i = 1; i <= c; i++) v[i] = a[k, i]
             for (i = 2; i <= c; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
             return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2 }
         END { for (o = 1; o <= nk; o++) { k = order[o]; split(k, f, " "); p = med(pm, k, n[k]); c = med(cm, k, n[k])
             printf "%-9s %-30s %10.1f %10.1f %7.2f\n", f[1], f[2], p, c, (c > 0 ? p / c : 0) } }' "$D/rawcpu"
fi
