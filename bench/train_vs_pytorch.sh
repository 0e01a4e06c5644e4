#!/bin/sh
# bench/train_vs_pytorch.sh - one training step (forward + backward + AdamW)
# of mtc and of PyTorch on CPU, same model, same init scale, same threads,
# measured in one run, with the sgemm throughput of this machine for scale.
#
# PyTorch runs as a careful user runs it: tcmalloc preloaded, OMP_WAIT_POLICY
# =PASSIVE with 2 threads. For both programs OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are unset in the command (a forced Haswell core type halves
# sgemm on this machine). Model FLOPs: Megatron core_v0.14's
# 72*B*s*L*h^2*(1 + s/(12h) + V/(12hL)) (V = padded vocabulary).
# Timing: STEPS steps after 2 warm-up steps, in ROUNDS rounds that alternate
# the two programs (mtc first in odd rounds, PyTorch first in even ones), so
# a slow phase of a shared machine falls on both; the table gives the best
# step of each program (the least disturbed) and the ratio of the medians.
#
# usage: bench/train_vs_pytorch.sh [path/to/mtc]
#   env: STEPS (default 5), ROUNDS (default 3), THREADS (default "1 2")
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
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
TCM=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[ -e "$TCM" ] || TCM=
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

flops() { # L C T V B -> model FLOPs per step
    awk -v L="$1" -v h="$2" -v s="$3" -v V="$4" -v B="$5" \
        'BEGIN { printf "%.6e", 72*B*s*L*h*h*(1 + s/(12*h) + V/(12*h*L)) }'
}

mtc_step() { # L C NH T V B threads -> STEPS step times (ms), one per line
    $CLEAN "$MTC" train --mock-data --vocab-size "$5" --make-vocab-size-divisible-by 128 \
        --num-layers "$1" --hidden-size "$2" --num-attention-heads "$3" --seq-length "$4" \
        --max-position-embeddings "$4" --micro-batch-size "$6" --global-batch-size "$6" \
        --train-iters $((STEPS + 2)) --log-interval 1 --eval-iters 0 --hidden-dropout 0 \
        --attention-dropout 0 --threads "$7" --metrics "$T/m.jsonl" >/dev/null
    tail -n "$STEPS" "$T/m.jsonl" | sed 's/.*"elapsed_ms": \([0-9.]*\).*/\1/'
}

torch_step() { # L C NH T V Vp B threads -> STEPS step times (ms), one per line
    omp=""
    [ "$8" -gt 1 ] && omp="OMP_WAIT_POLICY=PASSIVE"
    $CLEAN ${TCM:+LD_PRELOAD=$TCM} $omp OMP_NUM_THREADS="$8" \
        "$PY" "$HERE/train_step.py" "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$STEPS" |
        sed -n 's/^times //p' | tr ' ' '\n'
}

best() { sort -n "$1" | head -n 1; }
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

printf '%-22s %3s %8s %8s %9s %9s %8s %8s %8s %7s %7s\n' model thr "mtc ms" "torch ms" "mtc tok/s" \
    "torch t/s" "mtc TF/s" "sgemm GF" "%sgemm" "speedup" "median"
for th in ${THREADS:-1 2}; do
    peak=$($CLEAN "$T/sgemm" "$th")
    # name L C NH T V B
    for cfg in "small-gpt 6 384 6 256 50304 4" "gpt2-124M 12 768 12 64 50257 4"; do
        set -- $cfg
        name=$1 L=$2 C=$3 NH=$4 S=$5 V=$6 B=$7
        Vp=$(( (V + 127) / 128 * 128 ))
        fl=$(flops "$L" "$C" "$S" "$Vp" "$B")
        : >"$T/mtc.txt"
        : >"$T/torch.txt"
        r=1
        while [ "$r" -le "$ROUNDS" ]; do
            if [ $((r % 2)) -eq 1 ]; then
                mtc_step "$L" "$C" "$NH" "$S" "$V" "$B" "$th" >>"$T/mtc.txt"
                torch_step "$L" "$C" "$NH" "$S" "$V" "$Vp" "$B" "$th" >>"$T/torch.txt"
            else
                torch_step "$L" "$C" "$NH" "$S" "$V" "$Vp" "$B" "$th" >>"$T/torch.txt"
                mtc_step "$L" "$C" "$NH" "$S" "$V" "$B" "$th" >>"$T/mtc.txt"
            fi
            r=$((r + 1))
        done
        m=$(best "$T/mtc.txt") p=$(best "$T/torch.txt")
        mm=$(median "$T/mtc.txt") pm=$(median "$T/torch.txt")
        awk -v n="$name" -v th="$th" -v m="$m" -v p="$p" -v mm="$mm" -v pm="$pm" -v f="$fl" \
            -v tok=$((B * S)) -v pk="$peak" \
            'BEGIN { tf = f / (m * 1e-3) / 1e12;
                     printf "%-22s %3d %8.1f %8.1f %9.0f %9.0f %8.3f %8.1f %7.1f%% %6.2fx %6.2fx\n",
                            n, th, m, p, tok / (m * 1e-3), tok / (p * 1e-3), tf, pk,
                            100 * tf * 1e3 / pk, p / m, pm / mm }'
    done
done
