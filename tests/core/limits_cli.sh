#!/bin/sh
# tests/core/limits_cli.sh - user numbers that used to overflow or start
# absurd work, bad inputs and outputs found only after minutes of work, MTC_*
# variables with values mtc ignored: every one is refused before any work
# with one line and exit status 2, or (a huge or infinite collective
# timeout) works; a loss scale that trains nothing stops the run. Each case
# runs under `timeout`, so a hang fails the test.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
# refused NAME PATTERN CMD...: exit 2, one line on stderr matching PATTERN
refused() {
    name=$1 pat=$2; shift 2
    timeout 60 "$@" </dev/null >"$D/out" 2>"$D/err"; st=$?
    if [ $st -ne 2 ] || [ "$(wc -l <"$D/err")" -ne 1 ] || ! grep -q -- "$pat" "$D/err"; then
        bad "$name: status $st"; cat "$D/err"; return; fi
    ok "$name: $(cat "$D/err")"
}
TINY="--mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --vocab-size 64 --train-iters 2 --log-interval 1 --eval-iters 0 --threads 1"

# a timeout of 1e30 s, inf or 1e12 s: the deadline once overflowed into the
# past (a false "has not arrived" timeout at the first collective)
for t in 1e30 inf 1e12; do
    # shellcheck disable=SC2086
    MTC_COMM_TIMEOUT=$t timeout 120 "$MTC" train $TINY --world-size 2 --micro-batch-size 1 \
        --global-batch-size 2 >"$D/out" 2>"$D/err"; st=$?
    if [ $st -eq 0 ] && grep -q "iteration *2/" "$D/out"; then ok "MTC_COMM_TIMEOUT=$t trains"
    else bad "MTC_COMM_TIMEOUT=$t: status $st"; tail -3 "$D/err"; fi
    MTC_COMM_TIMEOUT=$t timeout 60 "$MTC" bench-comm --world-size 3 --sizes 8,64K --iters 2 --warmup 1 \
        >"$D/out" 2>"$D/err"; st=$?
    [ $st -eq 0 ] && ok "bench-comm MTC_COMM_TIMEOUT=$t" || { bad "bench-comm MTC_COMM_TIMEOUT=$t: $st"; tail -3 "$D/err"; }
    timeout 60 "$MTC" bench-comm --world-size 2 --timeout $t --sizes 8 --iters 1 >"$D/out" 2>"$D/err"; st=$?
    [ $st -eq 0 ] && ok "bench-comm --timeout $t" || { bad "bench-comm --timeout $t: $st"; tail -3 "$D/err"; }
done
for t in nan -1 0 abc; do
    MTC_COMM_TIMEOUT=$t refused "MTC_COMM_TIMEOUT=$t" "MTC_COMM_TIMEOUT" "$MTC" bench-comm --sizes 8 --iters 1
done
refused "bench-comm --timeout nan" "timeout nan" "$MTC" bench-comm --timeout nan --sizes 8 --iters 1
refused "bench-comm --timeout -1" "timeout -1" "$MTC" bench-comm --timeout -1 --sizes 8 --iters 1
refused "bench-comm --ranks-per-node 0" "ranks-per-node 0" "$MTC" bench-comm --ranks-per-node 0 --sizes 8 --iters 1
refused "bench-comm --ranks-per-node 5 of 2" "ranks-per-node 5" "$MTC" bench-comm --ranks-per-node 5 --sizes 8 --iters 1
refused "bench-comm --warmup huge" "warmup" "$MTC" bench-comm --warmup 2147483647 --sizes 8 --iters 1
refused "bench-comm --step-factor huge" "step-factor" "$MTC" bench-comm --step-factor 2147483647 --iters 1
refused "bench-comm --world-size 2147483647" "must be 1..4096 (thread-ranks)" "$MTC" bench-comm --world-size 2147483647 --sizes 8
env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK true &&
    refused "bench-comm --backend mpi outside mpirun" "needs mpirun" env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE \
        -u PMIX_RANK "$MTC" bench-comm --backend mpi --sizes 8 --iters 1

# shellcheck disable=SC2086
{
refused "train --micro-batch-size 2147483647" "micro-batch-size 2147483647" "$MTC" train $TINY --micro-batch-size 2147483647
refused "train --world-size 2147483647" "must be 1..4096 (thread-ranks)" "$MTC" train $TINY --world-size 2147483647
refused "train --threads 2147483647" "threads 2147483647" "$MTC" train $TINY --threads 2147483647
refused "train tokens per microbatch" "tokens per microbatch" "$MTC" train $TINY --micro-batch-size 1048576 --seq-length 1024 --max-position-embeddings 1024
refused "train --train-iters 2^63-1 (samples overflowed: 'decay ends at -4 samples')" "train-iters 9223372036854775807 x .* above 9007199254740992 samples" "$MTC" train $TINY --train-iters 9223372036854775807
refused "train --lr-warmup-samples 2^62" "lr-warmup-samples 4611686018427387904 x 1 samples each is above" "$MTC" train $TINY --train-samples 64 --lr-warmup-samples 4611686018427387904
refused "generate --threads 2147483647" "threads 2147483647" "$MTC" generate --threads 2147483647 --load "$D" --prompt-ids 1
}
refused "schedule huge virtual stages" "virtual pipeline size 2147483647" "$MTC" schedule --pp 4 \
    --num-virtual-stages-per-pipeline-rank 2147483647 --microbatches 8
refused "schedule microbatches x chunks" "forward steps per rank" "$MTC" schedule --pp 4 \
    --num-virtual-stages-per-pipeline-rank 1000 --microbatches 1048576
refused "plan --micro-batch-size 2147483647" "micro-batch-size 2147483647" "$MTC" plan --world-size 8 --micro-batch-size 2147483647
echo "65 300" >"$D/ids.txt"
refused "tokenize --decode of an id outside the vocabulary (once 'NullTokenizer: ... [0, 2147483647)')" "token ids of this tokenizer: \"300\" is not a token id in \[0, 256)" "$MTC" tokenize --tokenizer-type ByteLevelTokenizer --decode --input "$D/ids.txt"
refused "ranks --world-size 2147483647 (worded as plan's)" "world-size 2147483647 must be 1..1048576 (ranks of one job)" "$MTC" ranks --world-size 2147483647
refused "plan --world-size 2147483647" "ranks of one job" "$MTC" plan --world-size 2147483647
# exit 2 before any work for bad inputs and outputs
echo '{bad' >"$D/bad.json"
refused "plan --machine bad.json" "bad.json is not valid JSON" "$MTC" plan --world-size 8 --machine "$D/bad.json"
refused "plan --machine missing.json" "missing.json" "$MTC" plan --world-size 8 --machine "$D/missing.json"
mkdir "$D/outdir"
refused "bench-peak --output DIR (before its measurements)" "is a directory" "$MTC" bench-peak --output "$D/outdir"
refused "generate --prompt-ids ''" "holds no token id" "$MTC" generate --load "$D" --prompt-ids ""
refused "generate --prompt-ids ' , '" "holds no token id" "$MTC" generate --load "$D" --prompt-ids " , "
# MTC_* variables are checked like flags, on every command
for e in MTC_PROGRESS=alway MTC_SHM_SPIN=lots MTC_NN_SPIN_US=-5 MTC_LOG_LEVEL=loud MTC_GEMM=mkl \
    MTC_COMM_CHECK=yes MTC_CKPT_FAULT_AFTER=x MTC_CACHE_DIR=; do
    refused "$e" "${e%%=*}='" env "$e" "$MTC" ranks --world-size 2
done
MTC_PROGRESS=always MTC_LOG_LEVEL=warn MTC_GEMM=openblas "$MTC" ranks --world-size 2 >/dev/null 2>"$D/err" &&
    ok "known MTC_* values pass" || { bad "known MTC_* values"; cat "$D/err"; }
# loss-scale sanity: refused up front, or stopped after a bounded number of bad steps
# shellcheck disable=SC2086
refused "train --fp16 --loss-scale 1e-30" "below 2^-24" "$MTC" train $TINY --fp16 --loss-scale 1e-30
for c in "1e30:were all skipped for inf/NaN gradients" "1e-7:gradient norm of exactly 0"; do
    # shellcheck disable=SC2086
    timeout 120 "$MTC" train $TINY --train-iters 40 --fp16 --loss-scale "${c%%:*}" >"$D/out" 2>"$D/err"; st=$?
    if [ $st -ne 0 ] && grep -q "${c#*:}" "$D/err" && ! grep -q "iteration *40/" "$D/out"; then
        ok "--loss-scale ${c%%:*} stops the run: $(tail -1 "$D/err")"
    else bad "--loss-scale ${c%%:*}: status $st"; tail -2 "$D/err"; fi
done
exit $fail
