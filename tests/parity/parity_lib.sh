# tests/parity/parity_lib.sh - shared by the parity script tests: the tiny
# model's flags and a comparison of two --metrics files' lm_loss and
# grad_norm per iteration (relative tolerance 2e-5, see test_parity.c).
TINY="--mock-data --vocab-size 60 --make-vocab-size-divisible-by 16 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 8 --train-iters 4 --lr 1e-2 --lr-decay-style constant --log-interval 1 --eval-iters 0 --threads 1 --hidden-dropout 0.1 --attention-dropout 0.1"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
# same_losses NAME SERIAL.jsonl LAYOUT.jsonl
same_losses() {
    if [ ! -s "$2" ] || [ ! -s "$3" ]; then bad "$1: missing metrics"; return; fi
    if paste -d' ' "$2" "$3" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":") { v[n++] = $(i + 1) + 0 } }
        { for (k = 0; k < 2; k++) { a = v[k]; b = v[k + 2]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } ; lines++ }
        END { exit (bad || lines != 4) }'; then ok "$1: 4 iterations, loss and grad norm within 2e-5"
    else bad "$1"; paste -d'\n' "$2" "$3"; fi
}

# ckpt_run NAME ITERS ARGS...: `mtc train $TINY --lr-decay-iters 8` for
# ITERS iterations with ARGS, its metrics in $D/NAME.jsonl, its log in
# $D/NAME.log (the checkpoint tests: saved at 4, resumed to 8);
# ckpt_reference: the uninterrupted 8 iterations' last 4 in $D/full4.jsonl
ckpt_run() {
    name=$1 iters=$2
    shift 2
    "$MTC" train $TINY --lr-decay-iters 8 --train-iters "$iters" --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1 || { bad "$name run"; cat "$D/$name.log"; }
}
ckpt_reference() {
    ckpt_run full 8
    tail -4 "$D/full.jsonl" >"$D/full4.jsonl"
}

# refuse NAME PATTERN ARGS...: `mtc train $TINY ARGS` must exit 2 with one
# line on stderr matching PATTERN, before writing its --metrics file.
refuse() {
    name=$1 pat=$2
    shift 2
    "$MTC" train $TINY --metrics "$D/never.jsonl" "$@" >"$D/r.out" 2>"$D/r.err"
    st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$D/r.err")" -eq 1 ] && grep -q -- "$pat" "$D/r.err" && [ ! -e "$D/never.jsonl" ]; then
        ok "$name refused: $(cat "$D/r.err")"
    else bad "$name (status $st)"; cat "$D/r.err"; fi
}
