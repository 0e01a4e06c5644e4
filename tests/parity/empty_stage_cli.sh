#!/bin/sh
# tests/parity/empty_stage_cli.sh - pipeline stages without a decoder layer
# (Megatron's layouts allow them: "E|tt|L", "Et||tL", a virtual stage with
# nothing) run as chunks without parameters that pass the activations and
# their gradients through: lm loss and grad norm within 2e-5 of the serial
# run, with plain DP, the distributed optimizer with overlapped reduction
# and parameter gather, tp 2 + SP, interleaved virtual stages, and MTP
# alone with the loss ("Ett|mmL"); a checkpoint of an empty-stage layout
# resumes under another.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/mtp_lib.sh"
run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $TINY "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name exited $?"; tail -3 "$D/$name.log"; }
}
run s
run a --world-size 3 --pp 3 --pipeline-model-parallel-layout 'E|tt|L' --save "$D/ck"
same_losses "E|tt|L (embedding and loss stages alone)" "$D/s.jsonl" "$D/a.jsonl"
run b --world-size 6 --pp 3 --pipeline-model-parallel-layout 'Et||tL' --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
same_losses "Et||tL x dp 2 distopt overlap" "$D/s.jsonl" "$D/b.jsonl"
run c --world-size 4 --pp 2 --tp 2 --sequence-parallel --pipeline-model-parallel-layout 'Ett|L'
same_losses "Ett|L x tp 2 + SP" "$D/s.jsonl" "$D/c.jsonl"
run d --world-size 2 --pp 2 --pipeline-model-parallel-layout 'E|t||tL'
same_losses "E|t||tL (pp 2 x vpp 2, an empty virtual stage)" "$D/s.jsonl" "$D/d.jsonl"
grep -q '(empty stage)' "$D/d.log" && ok "the banner's layout table shows the empty stage" || bad "no (empty stage) in the banner"
run m0 $MTP
run m1 $MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Ett|mmL'
same_mtp "Ett|mmL (MTP alone with the loss)" "$D/m0.jsonl" "$D/m1.jsonl"
"$MTC" train $TINY --load "$D/ck" --train-iters 6 --override-opt-param-scheduler --metrics "$D/r1.jsonl" >"$D/r1.log" 2>&1 || bad "serial resume"
"$MTC" train $TINY --load "$D/ck" --train-iters 6 --override-opt-param-scheduler --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Ett|L' --metrics "$D/r2.jsonl" >"$D/r2.log" 2>&1 || bad "Ett|L resume"
if paste -d' ' "$D/r1.jsonl" "$D/r2.jsonl" | awk '
    { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":") v[n++] = $(i + 1) + 0 }
    { for (k = 0; k < 2; k++) { d = v[k] - v[k + 2]; if (d < 0) d = -d; if (n != 4 || d > 2e-5 * v[k + 2]) bad = 1 }; lines++ }
    END { exit (bad || lines != 2) }'; then ok "an E|tt|L checkpoint resumes serially and as Ett|L"
else bad "empty-stage checkpoint resume"; paste -d'\n' "$D/r1.jsonl" "$D/r2.jsonl" | cut -c1-120; fi
exit $fail
