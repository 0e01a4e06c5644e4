#!/bin/sh
# tests/ckpt/resume_cli.sh - resume equals uninterrupted: 8 iterations in one
# run against 4 iterations, --save, then --load and 4 more, bit for bit
# (the printed loss and grad norm) in the same layout and within the parity
# tolerance (2e-5, tests/parity) after changing layout: tp2 x pp2 x dp2 with
# the distributed optimizer -> dp8, dp4 -> tp2 x pp2, vpp 2 -> vpp 1, an
# uneven pipeline split -> a layout string -> serial, two
# optimizer instances -> one, a GQA/SwiGLU Llama tp2 -> serial, and MPI
# ranks -> thread ranks. Also the flags: --finetune, --no-load-optim,
# --ckpt-step, --save-interval, a missing --load directory.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
run() { # NAME ITERS EXTRA...: metrics in $D/NAME.jsonl
    name=$1 iters=$2
    shift 2
    "$MTC" train $TINY --train-iters "$iters" --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1 ||
        { bad "$name exited $?"; cat "$D/$name.log"; }
}
# case NAME TOL "SAVE LAYOUT" "LOAD LAYOUT"
case_() {
    c=$1 tol=$2
    run "$c.full" 8 $3
    run "$c.a" 4 $3 --save "$D/$c.ck"
    run "$c.b" 8 $4 --load "$D/$c.ck"
    grep -q "successfully loaded checkpoint from .*iteration 4, consumed samples 64, optimizer state" "$D/$c.b.log" ||
        { bad "$c: no load line"; cat "$D/$c.b.log"; }
    same_metrics "$c" "$D/$c.full.jsonl" "$D/$c.b.jsonl" "$tol"
}
W8="--world-size 8 --tp 2 --pp 2 --use-distributed-optimizer"
case_ serial 0 "" ""
case_ tp2pp2dp2 0 "$W8 --overlap-param-gather" "$W8 --overlap-param-gather"
case_ tp2pp2dp2-dp8 2e-5 "$W8" "--world-size 8 --use-distributed-optimizer"
case_ dp4-tp2pp2 2e-5 "--world-size 4" "--world-size 4 --tp 2 --pp 2"
case_ vpp2-vpp1 2e-5 "--world-size 2 --pp 2 --vpp 2" "--world-size 2 --pp 2"
# pipeline layouts (pp/layout.c): an uneven split -> a layout string with an
# embedding-only stage over virtual stages -> the serial run
case_ uneven-layout 2e-5 "--world-size 2 --pp 2 --decoder-first-pipeline-num-layers 1" \
    "--world-size 2 --pp 2 --pipeline-model-parallel-layout E|tt|t|tL"
case_ layout-serial 2e-5 "--world-size 4 --pp 2 --use-distributed-optimizer --pipeline-model-parallel-layout Et|t|tt|L" ""
case_ inst2-inst1 2e-5 "--world-size 4 --use-distributed-optimizer --num-distributed-optimizer-instances 2" \
    "--world-size 4 --use-distributed-optimizer"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
case_ llama-tp2-serial 2e-5 "$LLAMA --world-size 2 --tp 2" "$LLAMA"
# context parallelism: weights replicated over CP, one replica of DP x CP writes each piece
case_ cp2-serial 2e-5 "--world-size 2 --cp 2" ""
case_ cp2dp2distopt-tp2 2e-5 "--world-size 4 --cp 2 --use-distributed-optimizer" "--world-size 2 --tp 2"
if [ "$MTC_HAVE_MPI" = ON ] && [ -n "$MPIEXEC" ]; then
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$MTC" train $TINY --train-iters 4 --tp 2 \
        --use-distributed-optimizer --save "$D/mpi.ck" >"$D/mpi.log" 2>&1 || { bad "mpirun save"; cat "$D/mpi.log"; }
    run mpi.full 8 --world-size 4 --tp 2 --use-distributed-optimizer
    run mpi.b 8 --world-size 2 --pp 2 --load "$D/mpi.ck"
    same_metrics "mpi tp2 dp2 -> shm pp2" "$D/mpi.full.jsonl" "$D/mpi.b.jsonl" 2e-5
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$MTC" train $TINY --train-iters 8 --tp 2 \
        --load "$D/serial.ck" --metrics "$D/mpi2.jsonl" >"$D/mpi2.log" 2>&1 || { bad "mpirun load"; cat "$D/mpi2.log"; }
    same_metrics "shm serial -> mpi tp2" "$D/serial.full.jsonl" "$D/mpi2.jsonl" 2e-5
else
    echo "skip MPI cases (no MPI in this build)"
fi

# --save-interval: iterations 2, 4 and 6 saved, the tracker names 6; --ckpt-step 4 resumes there
run every2 6 --save "$D/ev" --save-interval 2
[ -d "$D/ev/iter_0000002" ] && [ -d "$D/ev/iter_0000004" ] && [ -d "$D/ev/iter_0000006" ] &&
    [ "$(cat "$D/ev/latest_checkpointed_iteration.txt")" = 6 ] && ok "--save-interval 2: iter 2, 4, 6 and the tracker" ||
    { bad "--save-interval"; ls -R "$D/ev"; }
[ "$(grep -c "successfully saved" "$D/every2.log")" = 3 ] && ok "one save per interval (none repeated at the end)" || bad "save count"
run step4 8 --load "$D/ev" --ckpt-step 4
same_metrics "--ckpt-step 4" "$D/serial.full.jsonl" "$D/step4.jsonl" 0
# --finetune: the weights only, from iteration 1; --no-load-optim: iteration kept, fresh moments
run ft 2 --load "$D/serial.ck" --finetune
grep -q '"iteration": 1,' "$D/ft.jsonl" && grep -q "no optimizer state, finetune" "$D/ft.log" && ok "--finetune starts at iteration 1 without optimizer state" || { bad "--finetune"; cat "$D/ft.log"; }
run nlo 6 --load "$D/serial.ck" --no-load-optim
grep -q "no optimizer state" "$D/nlo.log" && grep -q '"iteration": 5,' "$D/nlo.jsonl" &&
    ! cmp -s "$D/nlo.jsonl" "$D/serial.b.jsonl" && ok "--no-load-optim resumes at 5 with fresh moments" || { bad "--no-load-optim"; cat "$D/nlo.log"; }
# a missing or empty --load directory warns and starts fresh, as Megatron
mkdir "$D/empty"
run fresh 2 --load "$D/empty"
grep -q "will not load any checkpoints" "$D/fresh.log" && grep -q '"iteration": 1,' "$D/fresh.jsonl" && ok "empty --load warns and starts fresh" || bad "empty --load"
# a checkpoint of another model is refused before training, naming the file and the value
"$MTC" train $TINY --train-iters 8 --hidden-size 64 --load "$D/serial.ck" >"$D/mis.log" 2>&1
st=$?
[ $st = 2 ] && grep -q "metadata.json was saved with hidden-size=32 but this run has 64" "$D/mis.log" &&
    ok "another model's checkpoint: exit 2 naming hidden-size" || { bad "mismatch (status $st)"; cat "$D/mis.log"; }
# another TP size pads the vocabulary differently (60 -> 128 at tp1, 256 at tp2): it loads
run pad.a 2 --make-vocab-size-divisible-by 128 --save "$D/pad.ck"
run pad.b 4 --make-vocab-size-divisible-by 128 --world-size 2 --tp 2 --load "$D/pad.ck"
grep -q "(padded 256)" "$D/pad.b.log" && grep -q "successfully loaded checkpoint .*iteration 2" "$D/pad.b.log" &&
    grep -q '"iteration": 3,' "$D/pad.b.jsonl" && ok "vocabulary padded 128 -> 256 (tp1 -> tp2) loads and trains" ||
    { bad "padded vocabulary change"; cat "$D/pad.b.log"; }
# the learning-rate schedule must match the checkpoint's unless overridden (Megatron's check)
"$MTC" train $TINY --train-iters 8 --lr-decay-iters 16 --load "$D/serial.ck" >"$D/sch.log" 2>&1
st=$?
[ $st = 2 ] && grep -q "lr-decay-iters=16 but .*metadata.json was saved with 8 (pass the saved value, or --override-opt-param-scheduler" "$D/sch.log" &&
    ok "a different --lr-decay-iters is refused" || { bad "schedule check (status $st)"; cat "$D/sch.log"; }
run sch2 6 --lr-decay-iters 16 --load "$D/serial.ck" --override-opt-param-scheduler
grep -q '"iteration": 5,' "$D/sch2.jsonl" && ok "--override-opt-param-scheduler takes the flags" || bad "override"
# generate reads the directory (its latest iteration)
"$MTC" generate --load "$D/serial.ck" --prompt-ids "1 2 3" --max-new-tokens 4 --temperature 0 >"$D/g.log" 2>&1 &&
    ok "generate loads a checkpoint directory" || { bad "generate"; cat "$D/g.log"; }
exit $fail
