#!/bin/sh
# tests/fuzz/seeds_cli.sh - the fuzz corpus does what it is there for: every
# seed-* input is accepted by its reader (a stale seed, refused after a
# format change, would cover only the first check: ckpt_dist's seeds were
# refused for a missing qk_layernorm until regenerated with make_fuzz_seeds),
# and each regress-* input listed below is refused with its message (the
# replay test alone only proves they do not crash).
set -u
B=${MTC_BUILD_DIR:-build}/tests
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
verdict() { MTC_FUZZ_VERBOSE=1 "$B/test_fuzz_replay_$1" "$2" 2>&1 | head -1; }
for t in ckpt ckpt_dist hf indexed llmc; do
    for f in tests/fuzz/corpus/$t/seed-*; do
        v=$(verdict "$t" "$f")
        case $v in *"(no error)") ok "$t/${f##*/} accepted" ;; *) bad "$t/${f##*/}: $v" ;; esac
    done
done
# regress-* inputs of checkpoint metadata: refused, each with its message
while read -r t f pat; do
    v=$(verdict "$t" "tests/fuzz/corpus/$t/$f")
    case $v in *"$pat"*) ok "$t/$f refused: ${v#*metadata.json}" ;; *) bad "$t/$f: $v" ;; esac
done <<'LIST'
ckpt_dist regress-extra-tensor holds tensor transformer.h.4.ln_1.weight, which this model has no place for
ckpt_dist regress-iteration-fraction common.iteration (an integer equal to the folder's iteration) is missing or invalid
ckpt_dist regress-hidden-string the model configuration holds a non-number hidden_size
ckpt_dist regress-normalization-unknown holds normalization=GroupNorm
ckpt_dist regress-consumed-negative common.consumed_samples (an integer >= 0) is missing or invalid
LIST
exit $fail
