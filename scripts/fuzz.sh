#!/bin/sh
# scripts/fuzz.sh [SECONDS] - `make fuzz`: builds the libFuzzer targets of
# tests/fuzz with clang under ASan+UBSan into build-fuzz/ and runs each for
# SECONDS (default 60; FUZZ_SECONDS also sets it; FUZZ_TARGETS="ckpt hf"
# picks some; FUZZ_JOBS=2 runs two at a time). Each target starts from its committed corpus
# (tests/fuzz/corpus/<target>) and a working copy that grows between runs
# (build-fuzz/corpus/<target>). A crash, leak, sanitizer report, timeout
# (60 s per input: `mtc ranks` of a 2^20-rank world takes 30 s under ASan)
# or memory blow-up (2 GB) fails the run and leaves the input in
# build-fuzz/artifacts/; fix the reader, then commit the input as
# tests/fuzz/corpus/<target>/regress-<what> so the replay test keeps it.
# FUZZ_SEED (default 1) seeds libFuzzer's mutations, so a run is
# reproducible: the same seed from the same corpus tries the same inputs in
# the same order, and a longer run covers a shorter one's (CI runs seed 1
# for 60 s; engineers run it for longer, and other seeds, before they land).
# FUZZ_SEED=0 takes a random seed (libFuzzer prints it in the log).
set -e
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
SEED=${FUZZ_SEED:-1}
case $SEED in '' | *[!0-9]*) echo "mtc fuzz: FUZZ_SEED=$SEED must be a number (0: random)" >&2; exit 2 ;; esac
B=${FUZZ_BUILD:-build-fuzz}
case $B in /*) ;; *) B=$(pwd)/$B ;; esac # absolute: fuzz_args changes the working folder
TARGETS=${FUZZ_TARGETS:-$(sed -n 's/^set(MTC_FUZZ_TARGETS \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)}
if ! command -v clang >/dev/null 2>&1; then
    echo "mtc fuzz: clang is needed (Debian: apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi
# no -Werror: clang warns about GCC-only pragmas of the kernels
CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DMTC_SANITIZE=address -DMTC_FUZZ=ON \
    -DMTC_WITH_MPI=OFF -DMTC_WERROR=OFF >"$B.cmake.log" 2>&1 || { cat "$B.cmake.log"; exit 1; }
nice cmake --build "$B" -j "${JOBS:-2}" --target fuzz_targets
mkdir -p "$B/artifacts"
# one_target T: runs T, leaves its status in $B/fuzz-T.status
one_target() {
    t=$1
    mkdir -p "$B/corpus/$t"
    rm -f "$B/fuzz-$t.status" # no earlier run's status can stand for this one
    # UBSan reports abort (-fno-sanitize-recover), so libFuzzer sees them as crashes
    st=0
    UBSAN_OPTIONS=print_stacktrace=1 "$B/fuzz/fuzz_$t" -seed="$SEED" -max_total_time="$SECS" -timeout=60 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$B/artifacts/$t-" \
        "$B/corpus/$t" "$(pwd)/tests/fuzz/corpus/$t" >"$B/fuzz-$t.log" 2>&1 || st=$?
    echo $st >"$B/fuzz-$t.status"
}
# FUZZ_JOBS targets at a time (CI: one per core), each for SECS
JOBS_AT_ONCE=${FUZZ_JOBS:-1}
set -- $TARGETS
while [ $# -gt 0 ]; do
    batch=""
    k=0
    while [ $# -gt 0 ] && [ $k -lt "$JOBS_AT_ONCE" ]; do
        batch="$batch $1"
        one_target "$1" &
        shift
        k=$((k + 1))
    done
    echo "mtc fuzz:$batch for ${SECS}s, seed $SEED"
    wait
done
failed=""
for t in $TARGETS; do
    st=$(cat "$B/fuzz-$t.status" 2>/dev/null || echo 1)
    echo "mtc fuzz: $t: $(grep -E '^stat::number_of_executed_units' "$B/fuzz-$t.log" | tail -1 | tr -s ' ' | cut -d' ' -f2) inputs, status $st"
    if [ "$st" != 0 ]; then
        failed="$failed $t"
        grep -v '^INFO\|^#' "$B/fuzz-$t.log" | tail -40
    fi
done
if [ -n "$failed" ]; then
    echo "mtc fuzz: FAILED:$failed (inputs in $B/artifacts/, logs in $B/fuzz-<target>.log)" >&2
    exit 1
fi
echo "mtc fuzz: no crash, leak, hang or sanitizer report in $(echo $TARGETS | wc -w) targets x ${SECS}s"
