# tests/parity/moe_lib.sh - shared by the MoE parity scripts (after
# parity_lib.sh): a comparison of the MoE losses, one run and one pair of
# runs (a layout against its reference).
# same_moe NAME REF.jsonl LAYOUT.jsonl: lm_loss, grad_norm and the MoE losses
same_moe() {
    if [ ! -s "$2" ] || [ ! -s "$3" ]; then bad "$1: missing metrics"; return; fi
    if paste -d' ' "$2" "$3" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":" || $i == "\"load_balancing_loss\":" || $i == "\"z_loss\":") { v[n++] = $(i + 1) + 0 } }
        { h = n / 2; if (h < 2) bad = 1; for (k = 0; k < h; k++) { a = v[k]; b = v[k + h]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } ; lines++ }
        END { exit (bad || lines != 4) }'; then ok "$1: 4 iterations, loss, grad norm and MoE losses within 2e-5"
    else bad "$1"; paste -d'\n' "$2" "$3" | cut -c1-200; fi
}
run() { # NAME ARGS...
    rn=$1
    shift
    timeout -k 5 120 "$MTC" train $TINY --metrics "$D/$rn.jsonl" "$@" >"$D/$rn.log" 2>&1 || { bad "$rn run"; tail -5 "$D/$rn.log"; }
}
# pair NAME KEY MODEL LAYOUT ARGS...: the layout against the reference run
# of KEY (run once, with REF_<KEY> layout flags: serial unless set) of the
# same model flags (MODEL: words joined by ~)
pair() {
    pn=$1 key=$2 model=$(echo "$3" | tr '~' ' ')
    shift 3
    eval "ref=\${REF_$key:-}"
    [ -s "$D/s_$key.jsonl" ] || run "s_$key" $model $ref
    run "$pn" $model "$@"
    same_moe "$pn" "$D/s_$key.jsonl" "$D/$pn.jsonl"
}
