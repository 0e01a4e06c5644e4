#!/bin/sh
# bench/gemm_bf16.sh - GFLOP/s of OpenBLAS sgemm (nn_sgemm on the pool),
# oneDNN fp32 matmul and oneDNN bf16 matmul (nn/lowp.h) for the small GPT's
# GEMMs (N = 1024 rows, C = 384, 4C, vocab 50304; forward, input gradient,
# weight gradient) at 1 and 2 threads, with the ratios to OpenBLAS.
#
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for the program unless
# CORETYPE is given (below). The program alternates
# the three paths within each round and prints medians over rounds; see
# bench/gemm_bf16.c for the method. On a shared machine rerun it and compare
# columns of one run, not runs.
#
# usage: bench/gemm_bf16.sh [BUILD_DIR]      (default build)
#   env: ROUNDS (default 5), THREADS (default "1 2"), GEMM_NO_HEAD=1 (skip
#        the LM head: about 10x quicker), GEMM_N, GEMM_V, GEMM_MIN_S;
#        CORETYPE=Haswell|SkylakeX|... runs OpenBLAS with that OPENBLAS_CORETYPE
#        instead (OpenBLAS 0.3.21 does not know the development VM's CPU,
#        which CPUID calls GenuineIntel family 6 model 207, and falls back to
#        its Prescott SSE3 kernels when the variable is unset: the banner
#        line says which kernels it chose)
set -eu
BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-1 2}
case $ROUNDS in
'' | *[!0-9]* | 0) echo "gemm_bf16.sh: ROUNDS=$ROUNDS must be a positive integer" >&2; exit 2 ;;
esac
for t in $THREADS; do
    case $t in
    '' | *[!0-9]* | 0) echo "gemm_bf16.sh: THREADS=\"$THREADS\" must be positive integers" >&2; exit 2 ;;
    esac
done
BIN=$BUILD/bench_gemm_bf16
[ -x "$BIN" ] || { echo "gemm_bf16.sh: no $BIN (build first: cmake --build $BUILD)" >&2; exit 2; }
# shellcheck disable=SC2086 # THREADS is a list
if [ -n "${CORETYPE:-}" ]; then
    exec env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$CORETYPE" "$BIN" "$ROUNDS" $THREADS
fi
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$BIN" "$ROUNDS" $THREADS
