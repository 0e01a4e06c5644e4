#!/bin/sh
# tests/train/batch_schedule_cli.sh - Megatron's --step-batch-size-schedule
# through `mtc train` (schedule "0:4 192:8" at seq-length 16: 4 samples per
# iteration until 12 samples are consumed, then 8; iterations consume
# 4 8 12 | 20 28):
#  - the serial schedule run equals, loss for loss, two chained constant-batch
#    runs (3 iterations of 4, saved; then 2 of 8 loaded from it): the same
#    samples in the same order, the LR unchanged (constant);
#  - every layout (dp 2, pp 2, pp 2 interleaved, tp 2, cp 2, the distributed
#    optimizer, dp 2 x pp 2, MoE with ep 2) equals the serial schedule run;
#  - the log's global batch size and learning rate in samples: with
#    --train-samples 28 and a linear decay over 28 samples the lr after
#    iteration k is lr * (1 - consumed_k / 28) (Megatron steps the scheduler
#    by each iteration's batch), and 28 samples take 5 iterations;
#  - a run stopped at iteration 2 and resumed from its checkpoint continues
#    with the same batches and losses, and saves before the batch changes;
#  - refusals in one line, exit 2: an entry the run reaches that micro batch
#    x dp does not divide, a --global-batch-size other than the last entry,
#    a malformed schedule; --rampup-batch-size is ignored with Megatron's
#    deprecation warning.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$SRC/tests/train/train_lib.sh"
COMMON="--mock-data --vocab-size 64 --make-vocab-size-divisible-by 32 --num-layers 4 --hidden-size 32
 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --log-interval 1 --eval-iters 0
 --threads 1 --hidden-dropout 0 --attention-dropout 0 --lr-decay-style constant"
SCHED="0:4 192:8"
losses() { grep -o "lm loss: [0-9.E+-]*" "$1" | cut -d' ' -f3; }
# run NAME ARGS...: mtc train into $D/NAME.log, losses into $D/NAME.txt
run() {
    name=$1
    shift
    # shellcheck disable=SC2086
    "$MTC" train $COMMON "$@" >"$D/$name.log" 2>&1 || { bad "$name: exit $?"; tail -n 3 "$D/$name.log"; }
    losses "$D/$name.log" >"$D/$name.txt"
}
run serial --train-iters 5 --step-batch-size-schedule "$SCHED"
[ "$(wc -l <"$D/serial.txt")" -eq 5 ] || bad "serial: expected 5 losses"
[ "$(grep -o 'global batch size: *[0-9]*' "$D/serial.log" | tr -s ' ' | cut -d' ' -f4 | tr '\n' ' ')" = "4 4 4 8 8 " ] &&
    ok "log: global batch size 4 4 4 8 8" || bad "log: global batch sizes"
[ "$(grep -o 'consumed samples: *[0-9]*' "$D/serial.log" | tr -s ' ' | cut -d' ' -f3 | tr '\n' ' ')" = "4 8 12 20 28 " ] &&
    ok "log: consumed samples 4 8 12 20 28" || bad "log: consumed samples"

run const4 --train-iters 3 --global-batch-size 4 --save "$D/c"
run const8 --train-iters 5 --global-batch-size 8 --load "$D/c" --override-opt-param-scheduler
cat "$D/const4.txt" "$D/const8.txt" >"$D/chained.txt"
cmp -s "$D/chained.txt" "$D/serial.txt" && ok "schedule = 3 iterations of batch 4 then 2 of batch 8: $(tr '\n' ' ' <"$D/serial.txt")" ||
    { bad "schedule vs chained constant runs"; paste "$D/chained.txt" "$D/serial.txt"; }

# each layout against the serial schedule run (relative 1e-5)
close() { # FILE [REFERENCE]: every loss within 1e-5 of the reference's (serial's)
    [ "$(wc -l <"$1")" -eq 5 ] && paste "$1" "${2:-$D/serial.txt}" |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1 } END { exit bad }'
}
for lay in "dp2:--world-size 2" "pp2:--world-size 2 --pp 2" "vpp2:--world-size 2 --pp 2 --vpp 2" \
    "tp2:--world-size 2 --tp 2 --sequence-parallel" "cp2:--world-size 2 --context-parallel-size 2" \
    "distopt:--world-size 2 --use-distributed-optimizer --overlap-grad-reduce" \
    "dp2pp2:--world-size 4 --pp 2"; do
    name=${lay%%:*}
    # shellcheck disable=SC2086
    run "$name" --train-iters 5 --step-batch-size-schedule "$SCHED" ${lay#*:}
    close "$D/$name.txt" && ok "$name = serial under the schedule" ||
        { bad "$name differs from serial"; paste "$D/$name.txt" "$D/serial.txt"; }
done

# MoE: expert parallelism against the serial MoE run
MOE="--num-experts 4 --moe-router-topk 2"
# shellcheck disable=SC2086
run moe_serial --train-iters 5 --step-batch-size-schedule "$SCHED" $MOE
# shellcheck disable=SC2086
run moe_ep2 --train-iters 5 --step-batch-size-schedule "$SCHED" $MOE --world-size 2 --expert-model-parallel-size 2
close "$D/moe_ep2.txt" "$D/moe_serial.txt" && ok "MoE ep2 = serial MoE under the schedule" ||
    { bad "MoE ep2 differs"; paste "$D/moe_ep2.txt" "$D/moe_serial.txt"; }

# the LR scheduler counts samples: linear decay over --train-samples 28
run lr --train-samples 28 --step-batch-size-schedule "$SCHED" --lr-decay-style linear --lr 1e-3 --min-lr 0
got=$(grep -o 'learning rate: [0-9.E+-]*' "$D/lr.log" | cut -d' ' -f3 | tr '\n' ' ')
want="8.571429E-04 7.142857E-04 5.714286E-04 2.857143E-04 0.000000E+00 "
[ "$got" = "$want" ] && ok "lr after each iteration = 1e-3 (1 - consumed/28): $got" || bad "lr: $got, expected $want"
grep -q "iteration        5/       5" "$D/lr.log" && ok "--train-samples 28: 5 iterations (4+4+4+8+8)" || bad "train-samples iterations"

# resume: stop after iteration 2, continue from the checkpoint
run part --train-iters 5 --step-batch-size-schedule "$SCHED" --save "$D/r" --exit-interval 2
run rest --train-iters 5 --step-batch-size-schedule "$SCHED" --save "$D/r" --load "$D/r"
cat "$D/part.txt" "$D/rest.txt" >"$D/resumed.txt"
cmp -s "$D/resumed.txt" "$D/serial.txt" && grep -q "iteration        3/       5 | consumed samples:           12" "$D/rest.log" &&
    ok "resumed at iteration 2 (8 samples): the same batches and losses" ||
    { bad "resume"; paste "$D/resumed.txt" "$D/serial.txt"; }
[ -d "$D/r/iter_0000003" ] && [ -d "$D/r/iter_0000005" ] && ok "a checkpoint before the batch changes (iteration 3), as Megatron" ||
    { bad "no checkpoint at iteration 3"; ls "$D/r"; }

refused "batch 6 with micro batch 2 x dp 2" "batch 6 .*divisible by micro-batch-size=2 x data-parallel size 2" \
    --train-iters 5 --world-size 2 --step-batch-size-schedule "0:4 192:6"
run unreached --train-iters 5 --world-size 2 --step-batch-size-schedule "0:4 192:8 1M:6"
close "$D/unreached.txt" && ok "an entry the run never reaches is not checked" || bad "unreached entry"
refused "--global-batch-size 4 with a schedule ending at 8" "global-batch-size=4 differs" \
    --train-iters 5 --global-batch-size 4 --step-batch-size-schedule "$SCHED"
refused "first threshold 16" "first threshold must be 0" --train-iters 5 --step-batch-size-schedule "16:4 192:8"
refused "threshold without a batch" "no ':'" --train-iters 5 --step-batch-size-schedule "0:4 192"
refused "batch 0" "batch size 0" --train-iters 5 --step-batch-size-schedule "0:0"
run gbs8 --train-iters 5 --global-batch-size 8 --step-batch-size-schedule "$SCHED"
cmp -s "$D/gbs8.txt" "$D/serial.txt" && grep -q "^note: --global-batch-size 8 is the step-batch-size-schedule's last batch" "$D/gbs8.log" &&
    ok "--global-batch-size equal to the last entry: accepted with a note (Megatron's GPT-3 example)" || bad "gbs = last entry"
run ramp --train-iters 3 --global-batch-size 4 --rampup-batch-size 2 2 8
head -n 3 "$D/serial.txt" | cmp -s - "$D/ramp.txt" && grep -q "rampup_batch_size is deprecated" "$D/ramp.log" &&
    ok "--rampup-batch-size ignored with Megatron's deprecation warning" || bad "rampup"
refused "--rampup-batch-size with one value" "rampup-batch-size takes 3 values" --train-iters 3 --rampup-batch-size 2
exit $fail
