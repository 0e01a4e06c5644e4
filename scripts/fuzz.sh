#!/bin/sh
# scripts/fuzz.sh [SECONDS] - `make fuzz`: builds the libFuzzer targets of
# tests/fuzz with clang under ASan+UBSan into build-fuzz/ and runs each for
# SECONDS (default 60; FUZZ_SECONDS also sets it; FUZZ_TARGETS="ckpt hf"
# picks some). Each target starts from its committed corpus
# (tests/fuzz/corpus/<target>) and a working copy that grows between runs
# (build-fuzz/corpus/<target>). A crash, leak, sanitizer report, timeout
# (10 s per input) or memory blow-up (2 GB) fails the run and leaves the
# input in build-fuzz/artifacts/; fix the reader, then commit the input as
# tests/fuzz/corpus/<target>/regress-<what> so the replay test keeps it.
set -e
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
B=${FUZZ_BUILD:-build-fuzz}
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
failed=""
for t in $TARGETS; do
    mkdir -p "$B/corpus/$t"
    echo "mtc fuzz: $t for ${SECS}s"
    # UBSan reports abort (-fno-sanitize-recover), so libFuzzer sees them as crashes
    if ! UBSAN_OPTIONS=print_stacktrace=1 "$B/fuzz/fuzz_$t" -max_total_time="$SECS" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$B/artifacts/$t-" \
        "$B/corpus/$t" "tests/fuzz/corpus/$t" >"$B/fuzz-$t.log" 2>&1; then
        failed="$failed $t"
        tail -60 "$B/fuzz-$t.log"
    fi
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$B/fuzz-$t.log" | tr '\n' ' '
    echo
done
if [ -n "$failed" ]; then
    echo "mtc fuzz: FAILED:$failed (inputs in $B/artifacts/, logs in $B/fuzz-<target>.log)" >&2
    exit 1
fi
echo "mtc fuzz: no crash in$(echo " $TARGETS" | wc -w) targets x ${SECS}s"
