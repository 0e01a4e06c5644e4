#!/bin/sh
# tests/train/decoupled_lr_cli.sh - Megatron's --decoupled-lr / --decoupled-min-lr:
# the word embedding and output layer (is_embedding_or_output_parameter)
# follow the same schedule with their own max and min lr. Checked: the
# decoupled values equal to --lr/--min-lr give the run without them bit for
# bit; another value changes the run; tp2 with the distributed optimizer and
# pp2 (the tied embedding on two stages) give the serial decoupled run's
# losses; bad values exit 2 with one line. And --apply-layernorm-1p, which
# mtc accepts as the same training (norm weights have no weight decay and
# Adam is shift-invariant), gives the run without it bit for bit.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
T="$TINY --lr-decay-style cosine --min-lr 1e-3"
run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $T --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1 || { bad "$name run"; cat "$D/$name.log"; }
}
losses() { sed 's/.*"lm_loss": \([^,]*\),.*/\1/' "$1" | tr '\n' ' '; }
run base
run same --decoupled-lr 1e-2 --decoupled-min-lr 1e-3
[ "$(losses "$D/base.jsonl")" = "$(losses "$D/same.jsonl")" ] && ok "decoupled lr = lr: the same run bit for bit" ||
    { bad "decoupled lr = lr changed the run"; losses "$D/base.jsonl"; losses "$D/same.jsonl"; }
run dec --decoupled-lr 5e-2 --decoupled-min-lr 0
[ "$(losses "$D/base.jsonl")" != "$(losses "$D/dec.jsonl")" ] && ok "another decoupled lr changes the run" ||
    bad "--decoupled-lr had no effect"
run dectp --decoupled-lr 5e-2 --decoupled-min-lr 0 --world-size 4 --tp 2 --use-distributed-optimizer
same_losses "decoupled lr, tp=2 x dp=2 distributed optimizer" "$D/dec.jsonl" "$D/dectp.jsonl"
run decpp --decoupled-lr 5e-2 --decoupled-min-lr 0 --world-size 2 --pp 2
same_losses "decoupled lr, pp=2 (tied embedding on both stages)" "$D/dec.jsonl" "$D/decpp.jsonl"
run ln1p --apply-layernorm-1p
[ "$(losses "$D/base.jsonl")" = "$(losses "$D/ln1p.jsonl")" ] && ok "--apply-layernorm-1p: the same run" ||
    bad "--apply-layernorm-1p changed the run"
for bad_args in "--decoupled-lr -1" "--decoupled-min-lr 1e-4"; do
    # shellcheck disable=SC2086
    "$MTC" train $T $bad_args >"$D/r.out" 2>"$D/r.err"
    st=$?
    [ $st -eq 2 ] && [ "$(wc -l <"$D/r.err")" -eq 1 ] && ok "refused: $(cat "$D/r.err")" || { bad "'$bad_args' (status $st)"; cat "$D/r.err"; }
done
exit $fail
