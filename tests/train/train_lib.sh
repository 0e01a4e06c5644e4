# tests/train/train_lib.sh - shared by the train script tests that source it
# (after setting MTC and D): ok/bad bookkeeping and the refusal check.
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
# refused NAME PATTERN ARGS...: `mtc train $COMMON ARGS` must exit 2 with one
# error line on stderr matching PATTERN.
refused() {
    name=$1 pat=$2
    shift 2
    # shellcheck disable=SC2086
    "$MTC" train $COMMON "$@" >"$D/out" 2>"$D/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(grep -c . "$D/err")" -eq 1 ] && grep -q "error: .*$pat" "$D/err"; then
        ok "$name refused: $(cat "$D/err")"
    else
        bad "$name: exit $rc"
        cat "$D/err"
    fi
}
