#!/bin/sh
# tests/parity/mtp_standalone_cli.sh - Megatron's standalone MTP stage
# (pipeline_parallel_layer_layout.py validate_layer_layout's mtp_standalone:
# the 'm's on a stage before the loss's) end to end on shm rank-threads
# against the serial run: lm loss, grad norm and both "mtp_k loss" values
# within 2e-5 (mtp_lib.sh) for pp 3 'Et|tmm|L', pp 4 'Et|t|mm|L' (a stage of
# MTP depths alone), pp 4 'Et|tmm||L' (an empty stage passing the 1 + D
# states on), pp 2 'Ettmm|L' (the depths with the embedding), pp 2 x vpp 2
# 'Et|t|mm|L' (the MTP stage is pp rank 0's second virtual stage: two wte
# copies on one rank), the untied head (EMBEDDING_GROUP = first + MTP rank),
# tp 2 + SP, dp 2 with the distributed optimizer and overlap (also with the
# two copies on one rank), Megatron-FSDP, cp 2, an MoE model,
# uniform full recomputation, --bf16 (against the serial bf16 run), and the
# DeepSeek-V3 shape under pp 2 x vpp 2 and tp 2 + SP x ep 2 x pp 2 x vpp 2. The messages after the MTP stage carry 3
# hidden states (the activation bytes). A checkpoint saved under
# 'Et|tmm|L' resumes at pp 1 (and under its own layout) with the losses of
# the serial run's checkpoint resumed serially. Megatron's refusal of an
# 'm' off its rank's last virtual stage.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
. "${MTC_SOURCE_DIR:-.}/tests/parity/mtp_lib.sh"
run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $TINY $MTP "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name exited $?"; tail -3 "$D/$name.log"; }
}
run s --save "$D/cks"
run p3 --world-size 3 --pp 3 --pipeline-model-parallel-layout 'Et|tmm|L' --save "$D/ckp"
same_mtp "standalone MTP pp 3 Et|tmm|L" "$D/s.jsonl" "$D/p3.jsonl"
grep -q "^> messages: virtual stage 1 (pp rank 1, Megatron's standalone MTP stage) on to the loss's stage 2 carry \[h_0 | h_1 .. h_2\], 3 hidden states" "$D/p3.log" &&
    ok "the banner names the MTP stage's messages" || { bad "banner messages line"; grep "^>" "$D/p3.log" | head; }
run p4 --world-size 4 --pp 4 --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "standalone MTP pp 4 Et|t|mm|L (the depths alone)" "$D/s.jsonl" "$D/p4.jsonl"
run p4e --world-size 4 --pp 4 --pipeline-model-parallel-layout 'Et|tmm||L'
same_mtp "standalone MTP pp 4 Et|tmm||L (an empty stage passes the states on)" "$D/s.jsonl" "$D/p4e.jsonl"
run p2e --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Ettmm|L'
same_mtp "standalone MTP pp 2 Ettmm|L (with the embedding)" "$D/s.jsonl" "$D/p2e.jsonl"
run v2 --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "standalone MTP pp 2 x vpp 2 Et|t|mm|L" "$D/s.jsonl" "$D/v2.jsonl"
run tpv --world-size 4 --pp 2 --tp 2 --sequence-parallel --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "standalone MTP tp 2 + SP x pp 2 x vpp 2 Et|t|mm|L" "$D/s.jsonl" "$D/tpv.jsonl"
run do --world-size 6 --pp 3 --use-distributed-optimizer --overlap-grad-reduce --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "standalone MTP dp 2 x pp 3 distopt overlap" "$D/s.jsonl" "$D/do.jsonl"
run dv --world-size 4 --pp 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "standalone MTP dp 2 x pp 2 x vpp 2 distopt overlap (two wte copies on pp rank 0)" "$D/s.jsonl" "$D/dv.jsonl"
run fs --world-size 6 --pp 3 --use-megatron-fsdp --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "standalone MTP dp 2 x pp 3 Megatron-FSDP" "$D/s.jsonl" "$D/fs.jsonl"
run cp --world-size 6 --pp 3 --cp 2 --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "standalone MTP cp 2 x pp 3 (the heads' shifted labels from the whole rows)" "$D/s.jsonl" "$D/cp.jsonl"
run u --untie-embeddings-and-output-weights
run u3 --untie-embeddings-and-output-weights --world-size 3 --pp 3 --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "standalone MTP pp 3, untied head" "$D/u.jsonl" "$D/u3.jsonl"
run uv --untie-embeddings-and-output-weights --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "standalone MTP pp 2 x vpp 2, untied head" "$D/u.jsonl" "$D/uv.jsonl"
MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-layer-freq [0,1]"
run ms $MOE
run mp $MOE --world-size 3 --pp 3 --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "standalone MTP pp 3, MoE" "$D/ms.jsonl" "$D/mp.jsonl"
# the DeepSeek-V3 shape (dsv3_lib.sh: MLA, first-k-dense sigmoid MoE, one depth)
. "${MTC_SOURCE_DIR:-.}/tests/parity/dsv3_lib.sh"
"$MTC" train $TINY $DSV3 $DSV3_MTP --metrics "$D/ds.jsonl" >"$D/ds.log" 2>&1 || { bad "dsv3 serial"; tail -3 "$D/ds.log"; }
"$MTC" train $TINY $DSV3 $DSV3_MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|tt|m|L' \
    --metrics "$D/dsa.jsonl" >"$D/dsa.log" 2>&1 || { bad "dsv3 Et|tt|m|L"; tail -3 "$D/dsa.log"; }
same_dsv3 "dsv3 standalone MTP pp 2 x vpp 2 Et|tt|m|L" "$D/ds.jsonl" "$D/dsa.jsonl"
"$MTC" train $TINY $DSV3 $DSV3_MTP --world-size 8 --pp 2 --tp 2 --sequence-parallel --ep 2 --etp 1 \
    --pipeline-model-parallel-layout 'Et|tt|m|L' --metrics "$D/dsb.jsonl" >"$D/dsb.log" 2>&1 ||
    { bad "dsv3 tp 2 ep 2 Et|tt|m|L"; tail -3 "$D/dsb.log"; }
same_dsv3 "dsv3 standalone MTP tp 2 + SP x ep 2 etp 1 x pp 2 x vpp 2 Et|tt|m|L" "$D/ds.jsonl" "$D/dsb.jsonl"
REC="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
run rs $REC
run rp $REC --world-size 4 --pp 4 --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "standalone MTP pp 4, uniform recomputation" "$D/rs.jsonl" "$D/rp.jsonl"
# --bf16: the states travel as bf16 (pp/executor.c) and match the serial bf16 run
run bs --bf16
run bp --bf16 --world-size 3 --pp 3 --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "standalone MTP pp 3 --bf16" "$D/bs.jsonl" "$D/bp.jsonl"
# evaluation (forward-only schedules) through the MTP stage
EV=$(echo "$TINY" | sed 's/--eval-iters 0/--eval-iters 2 --eval-interval 2/')
"$MTC" train $EV $MTP >"$D/es.log" 2>&1
"$MTC" train $EV $MTP --world-size 3 --pp 3 --pipeline-model-parallel-layout 'Et|tmm|L' >"$D/ep.log" 2>&1
grep -o 'validation loss at iteration [0-9]* | lm loss value: [0-9.E+-]*' "$D/es.log" >"$D/es.v"
grep -o 'validation loss at iteration [0-9]* | lm loss value: [0-9.E+-]*' "$D/ep.log" >"$D/ep.v"
[ "$(wc -l <"$D/es.v")" -eq 2 ] && paste -d' ' "$D/es.v" "$D/ep.v" | awk '{ a = $NF + 0; b = $(NF / 2) + 0; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * b) bad = 1 } END { exit bad }' && ok "validation losses under Et|tmm|L within 2e-5 of the serial run's: $(tr '\n' ' ' <"$D/ep.v")" ||
    { bad "validation under Et|tmm|L"; cat "$D/es.v" "$D/ep.v"; }
# the activations the loss's stage receives: [h_0 | h_1 | h_2] after a
# standalone MTP stage, 3 times those of MTP with the loss
run p4l --world-size 4 --pp 4 --pipeline-model-parallel-layout 'Et|t||mmL'
same_mtp "MTP with the loss, pp 4 Et|t||mmL" "$D/s.jsonl" "$D/p4l.jsonl"
bytes() { grep -o '"PIPELINE_ACTIVATIONS": {"bytes": [0-9]*' "$D/$1.jsonl" | head -1 | grep -o '[0-9]*$'; }
b1=$(bytes p4) b0=$(bytes p4l)
[ -n "$b1" ] && [ -n "$b0" ] && [ "$b1" -eq $((3 * b0)) ] && ok "the loss's stage receives 3 states: $b1 activation bytes per iteration against $b0" ||
    bad "activation bytes after the MTP stage: ${b1:-?} against ${b0:-?}"
# the standalone layout's checkpoint resumed at pp 1 and under its layout
# equals the serial run's checkpoint resumed serially
R="--train-iters 6 --override-opt-param-scheduler"
run rs1 --load "$D/cks" $R
run rp1 --load "$D/ckp" $R
same_mtp "an Et|tmm|L checkpoint resumed at pp 1" "$D/rs1.jsonl" "$D/rp1.jsonl" 2
run rp3 --load "$D/ckp" $R --world-size 3 --pp 3 --pipeline-model-parallel-layout 'Et|tmm|L'
same_mtp "an Et|tmm|L checkpoint resumed under Et|tmm|L" "$D/rs1.jsonl" "$D/rp3.jsonl" 2
run rsv --load "$D/cks" $R --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|t|mm|L'
same_mtp "a serial checkpoint resumed under Et|t|mm|L" "$D/rs1.jsonl" "$D/rsv.jsonl" 2
refuse "an m off its rank's last virtual stage" "MTP should be always in the last virtual pipeline stage" $MTP --world-size 2 --pp 2 --pipeline-model-parallel-layout 'Et|tmm||L'
exit $fail
