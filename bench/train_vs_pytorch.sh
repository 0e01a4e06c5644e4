#!/bin/sh
# bench/train_vs_pytorch.sh - one training step (forward + backward + AdamW)
# of mtc and of PyTorch on CPU, same model, same init scale, same threads,
# measured in one run, with the sgemm throughput of this machine for scale.
#
# Rows (MODELS selects them, in this order):
#   gpt        small-gpt         GPT-2, 6 layers, hidden 384, 6 heads, seq 256, vocab 50304, mb 4
#   gpt2       gpt2-124M         GPT-2 124M, seq 64, vocab 50257 (padded 50304), mb 4
#   llama      small-llama       Llama: 6 layers, hidden 384, 6 heads, SwiGLU ffn 1024, RoPE,
#                                RMSNorm, untied head, no biases, seq 256, vocab 32000, mb 4
#   llama-gqa  small-llama-gqa2  the same with grouped-query attention, 2 key/value groups
# Precisions (PRECISIONS, default "fp32 bf16"): fp32 rows, and bf16 rows of
# mtc --bf16 against PyTorch's torch.autocast("cpu", dtype=torch.bfloat16)
# with the same tuning; after the table, mtc bf16 against mtc fp32 per row.
# Dropout is 0 on both sides. Each row checks that mtc and PyTorch have the
# same parameter count (printed after the table); a mismatch exits 1.
#
# PyTorch runs as a careful user runs it: tcmalloc preloaded, foreach AdamW,
# OMP_WAIT_POLICY=PASSIVE with 2 threads. For both programs OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE are unset in the command (a forced Haswell core type
# halves sgemm on this machine). Model FLOPs (both TF/s columns): mtc's
# mtc_gpt_flops, Megatron's count of the GEMMs,
#   6*B*s*(L*(h*(qd + 2*kd) + qd*s + qd*h + h*ffn) + h*V)
# with qd = heads*head size, kd = groups*head size, ffn = 2F (GELU) or 3F
# (SwiGLU) and V padded; for GPT-2 shapes it is core_v0.14's
# 72*B*s*L*h^2*(1 + s/(12h) + V/(12hL)).
# Timing: STEPS steps after 2 warm-up steps, in ROUNDS rounds that alternate
# the two programs (mtc first in odd rounds, PyTorch first in even ones), so
# a slow phase of a shared machine falls on both; the table gives the best
# step of each program (the least disturbed) and the ratio of the medians.
#
# Recomputation row (RECOMPUTE, e.g. "none selective full"; empty: skipped):
# mtc alone, GPT-2 124M at sequence RC_SEQ (default 1024), micro batch 1,
# RC_THREADS threads (default 2), RC_PREC (fp32 or bf16, default fp32); per
# granularity the median step, its ratio to "none", the banner's activation
# arena (the analytic activation memory) and the process's peak resident
# set (/usr/bin/time), ROUNDS rounds in alternating order. selective is
# --recompute-modules core_attn,mlp; full is uniform, 1 layer per unit.
#
# usage: bench/train_vs_pytorch.sh [path/to/mtc]
#   env: STEPS (default 5), ROUNDS (default 3), THREADS (default "1 2"),
#        MODELS (default "gpt gpt2 llama llama-gqa"; may be empty with RECOMPUTE),
#        PRECISIONS (default "fp32 bf16"), RECOMPUTE, RC_SEQ, RC_THREADS, RC_PREC (above)
set -eu
MTC=${1:-build/mtc}
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-3}
for v in "STEPS=$STEPS" "ROUNDS=$ROUNDS"; do
    case ${v#*=} in
    '' | *[!0-9]* | 0) echo "train_vs_pytorch.sh: $v must be a positive integer" >&2; exit 2 ;;
    esac
done
[ -x "$MTC" ] || { echo "train_vs_pytorch.sh: no mtc at $MTC (build with make, or pass its path)" >&2; exit 2; }
# key name L C NH NG F T V B family (NG key/value groups, F the MLP hidden size)
ROWS="gpt small-gpt 6 384 6 6 1536 256 50304 4 gpt
gpt2 gpt2-124M 12 768 12 12 3072 64 50257 4 gpt
llama small-llama 6 384 6 6 1024 256 32000 4 llama
llama-gqa small-llama-gqa2 6 384 6 2 1024 256 32000 4 llama"
MODELS=${MODELS-gpt gpt2 llama llama-gqa}
PRECISIONS=${PRECISIONS-fp32 bf16}
for p in $PRECISIONS; do
    case $p in fp32 | bf16) ;; *) echo "train_vs_pytorch.sh: PRECISIONS entry '$p' is not fp32 or bf16" >&2; exit 2 ;; esac
done
[ -n "$PRECISIONS" ] || { echo "train_vs_pytorch.sh: PRECISIONS is empty (fp32 and/or bf16)" >&2; exit 2; }
KEYS=$(echo "$ROWS" | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $1 }')
[ -n "$MODELS" ] || [ -n "${RECOMPUTE-}" ] || { echo "train_vs_pytorch.sh: MODELS is empty (choose from: $KEYS)" >&2; exit 2; }
for m in $MODELS; do
    echo "$ROWS" | awk -v m="$m" '$1 == m { f = 1 } END { exit f ? 0 : 1 }' ||
        { echo "train_vs_pytorch.sh: MODELS entry '$m' is not a row (choose from: $KEYS)" >&2; exit 2; }
done
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
TCM=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[ -e "$TCM" ] || { TCM=; echo "train_vs_pytorch.sh: no tcmalloc (apt-get install libtcmalloc-minimal4): PyTorch runs on glibc malloc" >&2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CLEAN="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"

# ---- sgemm throughput (OpenBLAS, square 1536) ----
cat >"$T/sgemm.c" <<'CEOF'
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void openblas_set_num_threads(int);
int main(int argc, char **argv) {
    int th = atoi(argv[1]), n = 1536, reps = 8;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f, c[i] = 0;
    openblas_set_num_threads(th);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (s < best) best = s;
    }
    printf("%.1f\n", 2.0 * n * n * (double)n / best * 1e-9);
    return 0;
}
CEOF
cc -O2 -o "$T/sgemm" "$T/sgemm.c" $(pkg-config --cflags --libs openblas 2>/dev/null || echo -lopenblas)

flops() { # L C NH NG F swiglu T Vp B -> model FLOPs per step (mtc_gpt_flops)
    awk -v L="$1" -v h="$2" -v NH="$3" -v NG="$4" -v F="$5" -v sw="$6" -v s="$7" -v V="$8" -v B="$9" \
        'BEGIN { hs = h / NH; qd = NH * hs; kd = NG * hs; ffn = F * (sw ? 3 : 2);
                 printf "%.6e", 6*B*s*(L*(h*(qd + 2*kd) + qd*s + qd*h + h*ffn) + h*V) }'
}

mtc_step() { # L C NH NG F T V B family threads -> STEPS step times (ms), one per line
    extra=""
    if [ "$9" = llama ]; then
        extra="--normalization RMSNorm --position-embedding-type rope --swiglu
             --untie-embeddings-and-output-weights --disable-bias-linear"
        [ "$4" -lt "$3" ] && extra="$extra --group-query-attention --num-query-groups $4"
    fi
    $CLEAN "$MTC" train --mock-data --vocab-size "$7" --make-vocab-size-divisible-by 128 \
        --num-layers "$1" --hidden-size "$2" --num-attention-heads "$3" --ffn-hidden-size "$5" \
        --seq-length "$6" --max-position-embeddings "$6" --micro-batch-size "$8" \
        --global-batch-size "$8" $extra --train-iters $((STEPS + 2)) --log-interval 1 --eval-iters 0 \
        --hidden-dropout 0 --attention-dropout 0 --threads "${10}" --metrics "$T/m.jsonl" $PFLAG >"$T/mtc.out"
    sed -n 's/.*number of parameters on .*: \([0-9]*\)$/\1/p' "$T/mtc.out" >"$T/mtc.params"
    tail -n "$STEPS" "$T/m.jsonl" | sed 's/.*"elapsed_ms": \([0-9.]*\).*/\1/'
}

torch_step() { # L C NH NG F T V Vp B family threads -> STEPS step times (ms), one per line
    omp=""
    [ "${11}" -gt 1 ] && omp="OMP_WAIT_POLICY=PASSIVE"
    $CLEAN ${TCM:+LD_PRELOAD=$TCM} $omp OMP_NUM_THREADS="${11}" \
        "$PY" "$HERE/train_step.py" "$1" "$2" "$3" "$6" "$7" "$8" "$9" "${11}" "$STEPS" \
        --family "${10}" --groups "$4" --ffn "$5" $PFLAG >"$T/torch.out"
    sed -n 's/^params //p' "$T/torch.out" >"$T/torch.params"
    sed -n 's/^times //p' "$T/torch.out" | tr ' ' '\n'
}

best() { sort -n "$1" | head -n 1; }
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

printf '%-22s %4s %3s %8s %8s %9s %9s %8s %9s %8s %8s %7s %7s\n' model prec thr "mtc ms" "torch ms" "mtc tok/s" \
    "torch t/s" "mtc TF/s" "trch TF/s" "sgemm GF" "%sgemm" "speedup" "median"
: >"$T/params.txt"
: >"$T/prec.txt"
for th in ${THREADS:-1 2}; do
    peak=$($CLEAN "$T/sgemm" "$th")
    for key in $MODELS; do
    for prec in $PRECISIONS; do
        PFLAG=
        [ "$prec" = bf16 ] && PFLAG=--bf16
        set -- $(echo "$ROWS" | awk -v m="$key" '$1 == m')
        name=$2 L=$3 C=$4 NH=$5 NG=$6 FF=$7 S=$8 V=$9 B=${10} fam=${11}
        Vp=$(( (V + 127) / 128 * 128 ))
        sw=0
        [ "$fam" = llama ] && sw=1
        fl=$(flops "$L" "$C" "$NH" "$NG" "$FF" "$sw" "$S" "$Vp" "$B")
        : >"$T/mtc.txt"
        : >"$T/torch.txt"
        r=1
        while [ "$r" -le "$ROUNDS" ]; do
            if [ $((r % 2)) -eq 1 ]; then
                mtc_step "$L" "$C" "$NH" "$NG" "$FF" "$S" "$V" "$B" "$fam" "$th" >>"$T/mtc.txt"
                torch_step "$L" "$C" "$NH" "$NG" "$FF" "$S" "$V" "$Vp" "$B" "$fam" "$th" >>"$T/torch.txt"
            else
                torch_step "$L" "$C" "$NH" "$NG" "$FF" "$S" "$V" "$Vp" "$B" "$fam" "$th" >>"$T/torch.txt"
                mtc_step "$L" "$C" "$NH" "$NG" "$FF" "$S" "$V" "$B" "$fam" "$th" >>"$T/mtc.txt"
            fi
            r=$((r + 1))
        done
        m=$(best "$T/mtc.txt") p=$(best "$T/torch.txt")
        mm=$(median "$T/mtc.txt") pm=$(median "$T/torch.txt")
        awk -v n="$name" -v pr="$prec" -v th="$th" -v m="$m" -v p="$p" -v mm="$mm" -v pm="$pm" -v f="$fl" \
            -v tok=$((B * S)) -v pk="$peak" \
            'BEGIN { tf = f / (m * 1e-3) / 1e12;
                     printf "%-22s %4s %3d %8.1f %8.1f %9.0f %9.0f %8.3f %9.3f %8.1f %7.1f%% %6.2fx %6.2fx\n",
                            n, pr, th, m, p, tok / (m * 1e-3), tok / (p * 1e-3), tf, f / (p * 1e-3) / 1e12,
                            pk, 100 * tf * 1e3 / pk, p / m, pm / mm }'
        echo "$name $th $prec $m $p" >>"$T/prec.txt"
        pa=$(cat "$T/mtc.params") pb=$(cat "$T/torch.params")
        grep -q "^$name " "$T/params.txt" || echo "$name $pa $pb" >>"$T/params.txt"
        if [ -z "$pa" ] || [ "$pa" != "$pb" ]; then
            echo "train_vs_pytorch.sh: $name: parameter counts differ: mtc ${pa:-?}, PyTorch ${pb:-?}" >&2
            exit 1
        fi
    done
    done
done
echo
# mtc bf16 against mtc fp32 (and PyTorch autocast against its fp32), best steps
awk '{ k = $1 " " $2; if ($3 == "fp32") { mf[k] = $4; pf[k] = $5 } else { mb[k] = $4; pb[k] = $5 } ; keys[k] = 1 }
     END { for (k in keys) if ((k in mf) && (k in mb))
               printf "bf16 vs fp32 %-26s mtc %.2fx  torch %.2fx (fp32 ms / bf16 ms)\n", k, mf[k] / mb[k], pf[k] / pb[k] }' "$T/prec.txt" | sort
awk '{ printf "parameters %-22s mtc %11d  torch %11d  %s\n", $1, $2, $3, $2 == $3 ? "(equal)" : "(DIFFER)" }' "$T/params.txt"

# ---- recomputation: step time and memory of none / selective / full ----
RECOMPUTE=${RECOMPUTE-}
[ -n "$RECOMPUTE" ] || exit 0
RC_SEQ=${RC_SEQ:-1024} RC_THREADS=${RC_THREADS:-2} RC_PREC=${RC_PREC:-fp32}
[ -x /usr/bin/time ] || { echo "train_vs_pytorch.sh: RECOMPUTE needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
rc_flags() {
    case $1 in
    none) echo "" ;;
    selective) echo "--recompute-granularity selective --recompute-modules core_attn,mlp" ;;
    full) echo "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" ;;
    *) echo "train_vs_pytorch.sh: RECOMPUTE entry '$1' is not none, selective or full" >&2; exit 2 ;;
    esac
}
for g in $RECOMPUTE; do rc_flags "$g" >/dev/null || exit 2; done
PF=
[ "$RC_PREC" = bf16 ] && PF=--bf16
rc_run() { # granularity -> appends step times to $T/rc.$1, peak RSS (KB) to $T/rss.$1
    $CLEAN /usr/bin/time -f "%M" -o "$T/time.out" "$MTC" train --mock-data --vocab-size 50257 \
        --make-vocab-size-divisible-by 128 --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
        --seq-length "$RC_SEQ" --max-position-embeddings "$RC_SEQ" --micro-batch-size 1 \
        --global-batch-size 1 --train-iters $((STEPS + 1)) --log-interval 1 --eval-iters 0 \
        --hidden-dropout 0 --attention-dropout 0 --threads "$RC_THREADS" $PF $(rc_flags "$1") \
        --metrics "$T/rc.jsonl" >"$T/rc.out" 2>&1 || { cat "$T/rc.out" >&2; exit 1; }
    tail -n "$STEPS" "$T/rc.jsonl" | sed 's/.*"elapsed_ms": \([0-9.]*\).*/\1/' >>"$T/rc.$1"
    tail -n 1 "$T/time.out" >>"$T/rss.$1"
    sed -n 's/.*activations \([0-9.]*\)$/\1/p' "$T/rc.out" | head -n 1 >"$T/act.$1"
}
for g in $RECOMPUTE; do : >"$T/rc.$g"; : >"$T/rss.$g"; done
r=1
while [ "$r" -le "$ROUNDS" ]; do
    order=$RECOMPUTE
    [ $((r % 2)) -eq 0 ] && order=$(echo "$RECOMPUTE" | tr ' ' '\n' | sed '1!G;h;$!d' | tr '\n' ' ')
    for g in $order; do rc_run "$g"; done
    r=$((r + 1))
done
echo
printf '%-30s %-10s %9s %8s %12s %8s %12s\n' "recomputation ($RC_PREC)" granularity "median ms" "x none" "activ. MB" "none/x" "peak RSS MB"
first=${RECOMPUTE%% *}
m0=$(median "$T/rc.$first") a0=$(cat "$T/act.$first")
for g in $RECOMPUTE; do
    m=$(median "$T/rc.$g") a=$(cat "$T/act.$g") rss=$(sort -n "$T/rss.$g" | tail -n 1)
    awk -v n="gpt2-124M seq $RC_SEQ thr $RC_THREADS" -v g="$g" -v m="$m" -v m0="$m0" -v a="$a" -v a0="$a0" -v rss="$rss" \
        'BEGIN { printf "%-30s %-10s %9.1f %7.2fx %12.1f %7.2fx %12.1f\n", n, g, m, m / m0, a, a0 / a, rss / 1024 }'
done
