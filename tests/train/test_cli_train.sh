#!/bin/sh
# tests/train/test_cli_train.sh - `mtc train` / `mtc generate` end to end:
# bad flags and impossible shapes exit 2 with one line and write nothing;
# the loss falls on the learnable mock task (16 random 32-token phrases in
# random order: far below ln(vocab) once learnt); save -> generate is
# deterministic per seed; mismatching or corrupted models are refused.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

# expect_usage NAME PATTERN ARGS... : exit 2, one stderr line matching PATTERN, no files
expect_usage() {
    name=$1 pat=$2; shift 2
    if [ "$1" = train ]; then set -- "$@" --save "$D/never.bin" --metrics "$D/never.jsonl"; fi
    env ${XENV:-} "$MTC" "$@" >"$D/out" 2>"$D/err"
    rc=$?
    if [ $rc -ne 2 ]; then bad "$name: exit $rc, expected 2"; cat "$D/err"; return; fi
    if [ "$(wc -l <"$D/err")" -ne 1 ] || ! grep -q -- "$pat" "$D/err"; then
        bad "$name: stderr not one line matching '$pat'"; cat "$D/err"; return; fi
    if [ -e "$D/never.bin" ] || [ -e "$D/never.jsonl" ]; then bad "$name: wrote a file"; return; fi
    ok "$name: $(cat "$D/err")"
}

TINY="--mock-data --vocab-size 64 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --threads 1"
expect_usage "unknown flag" "did you mean" train $TINY --hiden-size 32
expect_usage "heads" "not divisible by num-attention-heads=3" train --mock-data --vocab-size 64 --hidden-size 100 --num-attention-heads 3
expect_usage "positions" "longer than max-position-embeddings=32" train $TINY --seq-length 64 --max-position-embeddings 32
expect_usage "heads vs tp" "num-attention-heads=4 is not divisible by tensor-model-parallel-size=3" train $TINY --world-size 3 --tp 3
expect_usage "world vs tp" "world-size=3\|world size" train $TINY --world-size 3 --tp 2
expect_usage "sp seq" "not divisible" train $TINY --seq-length 30 --max-position-embeddings 32 --world-size 4 --tp 4 --sequence-parallel
expect_usage "timing level" "timing-log-level=3 must be 0, 1 or 2" train $TINY --timing-log-level 3
expect_usage "timing option" "timing-log-option=mean must be max, minmax or all" train $TINY --timing-log-option mean
expect_usage "lm head chunk" "lm-head-chunk=0 must be >= 1" train $TINY --lm-head-chunk 0
# nonsense values named, before any work (--lr nan was reported as lr-warmup-init's)
expect_usage "lr nan" "lr=nan must be a finite number" train $TINY --lr nan
expect_usage "negative seed" "seed=-5 must be in \[0, 4294967295\]" train $TINY --seed -5
expect_usage "threads 0" "threads 0 must be 1.." train $TINY --threads 0
expect_usage "vocab-size 0" "vocab-size=0 must be >= 1" train $TINY --vocab-size 0
expect_usage "profile dir alone" "profile-dir $D/p needs --profile" train $TINY --profile-dir "$D/p"
expect_usage "profile dir and trace" "both say where the trace goes" train $TINY --profile --profile-dir "$D/p" --trace "$D/t.json"
expect_usage "profile steps" "profile-step-start=4 and profile-step-end=2" train $TINY --profile --profile-step-start 4 --profile-step-end 2
# --profile writes DIR/trace.json (Chrome trace events); the timer block follows the log line
"$MTC" train $TINY --train-iters 2 --log-interval 2 --eval-iters 0 --world-size 2 --pp 2 --profile \
    --profile-step-start 0 --profile-step-end 1 --profile-dir "$D/prof" --timing-log-level 1 >"$D/out" 2>"$D/err"
if [ $? -eq 0 ] && grep -q '"traceEvents"' "$D/prof/trace.json" && grep -q '"ph": "X"' "$D/prof/trace.json" &&
    grep -q '^(min, max) time across ranks (ms):' "$D/out"; then ok "--profile: trace.json and the timer block"
else bad "--profile"; cat "$D/err"; fi
expect_usage "batch" "global-batch-size=6 is not divisible" train $TINY --global-batch-size 6
expect_usage "batch vs dp" "data-parallel size 2 (use a multiple of 8)" train $TINY --world-size 2 --global-batch-size 4
expect_usage "decay style" "lr-decay-style=exp" train $TINY --lr-decay-style exp
expect_usage "no data" "no data" train --num-layers 2
expect_usage "cp zero" "context-parallel-size=0 must be >= 1" train $TINY --world-size 2 --cp 0
expect_usage "ep without experts" "expert-model-parallel-size=2 needs --num-experts" train $TINY --world-size 2 --expert-model-parallel-size 2
expect_usage "etp not tp" "expert-tensor-parallel-size=2 must be 1 or the tensor-parallel size 1" train $TINY --etp 2
expect_usage "missing data" "nonexistent" train --data-path "$D/nonexistent" --num-layers 2
expect_usage "generate without model" "--load" generate --prompt hi

# the loss falls on the learnable mock task
"$MTC" train $TINY --global-batch-size 8 --train-iters 120 --lr 3e-3 --log-interval 20 --cp 1 --ep 1 --etp 1 \
    --eval-interval 120 --eval-iters 4 --hidden-dropout 0 --attention-dropout 0 \
    --metrics "$D/m.jsonl" --save "$D/model.bin" >"$D/log" 2>&1 || { bad "train failed"; cat "$D/log"; }
grep -q "iteration      120/     120 | consumed samples:          960 |" "$D/log" && ok "log line" || { bad "log line"; cat "$D/log"; }
grep -q "validation loss at iteration 120 | lm loss value: " "$D/log" && ok "validation line" || bad "validation line"
grep -q "^> BLAS: .*OpenBLAS .*; kernels for " "$D/log" && ok "banner names the BLAS" || bad "BLAS banner line"
[ "$(head -n 1 "$D/log")" = "building GPT model ..." ] && grep -q "^> model, optimizer state and data set up in [0-9.]* s$" "$D/log" \
    && ok "setup is announced before it starts and timed" || bad "setup lines"
OPENBLAS_CORETYPE=Haswell "$MTC" train $TINY --train-iters 1 >"$D/blas.log" 2>&1
grep -q "kernels for .* (OPENBLAS_CORETYPE=Haswell)" "$D/blas.log" && ok "banner names a forced OpenBLAS core type" || { bad "forced core type"; grep BLAS "$D/blas.log"; }
first=$(head -n1 "$D/m.jsonl" | sed 's/.*"lm_loss": \([0-9.e+-]*\).*/\1/')
last=$(tail -n1 "$D/m.jsonl" | sed 's/.*"lm_loss": \([0-9.e+-]*\).*/\1/')
val=$(tail -n1 "$D/m.jsonl" | sed 's/.*"val_loss": \([0-9.e+-]*\).*/\1/')
[ "$(wc -l <"$D/m.jsonl")" -eq 6 ] && ok "6 metrics lines" || bad "metrics lines"
# ln(64) = 4.16: a model that learnt nothing stays there
if awk -v f="$first" -v l="$last" -v v="$val" 'BEGIN { exit !(l < f - 0.5 && v < 3.5) }'; then
    ok "loss falls: first $first last $last val $val"
else bad "loss does not fall: first $first last $last val $val"; fi

# generate: deterministic per seed, refuses corrupted files
"$MTC" generate --load "$D/model.bin" --prompt-ids "1 2 3" --max-new-tokens 20 --seed 7 >"$D/g1" 2>&1 || bad "generate failed"
"$MTC" generate --load "$D/model.bin" --prompt-ids "1 2 3" --max-new-tokens 20 --seed 7 >"$D/g2" 2>&1
[ "$(wc -w <"$D/g1")" -eq 23 ] && cmp -s "$D/g1" "$D/g2" && ok "generate: $(cat "$D/g1")" || { bad "generate output"; cat "$D/g1"; }
expect_usage "text prompt on an id model" "has no tokenizer, so --prompt text cannot be encoded: give --prompt-ids" generate --load "$D/model.bin" --prompt "hello"
expect_usage "bad prompt id" "prompt-ids: \"99999\" is not a token id" generate --load "$D/model.bin" --prompt-ids "1 99999"
cp -r "$D/model.bin" "$D/trunc.bin"
head -c 2000 "$D/model.bin/iter_0000120/__0.distcp" >"$D/trunc.bin/iter_0000120/__0.distcp"
"$MTC" generate --load "$D/trunc.bin" --max-new-tokens 5 >/dev/null 2>"$D/err"
[ $? -eq 2 ] && grep -q "truncated" "$D/err" && ok "truncated model refused: $(cat "$D/err")" || { bad "truncated model"; cat "$D/err"; }
expect_usage "load mismatch" "was saved with hidden-size=32 but this run has 64" train $TINY --hidden-size 64 --load "$D/model.bin"
"$MTC" train $TINY --train-iters 2 --log-interval 1 --eval-iters 0 --load "$D/model.bin" --finetune >"$D/log2" 2>&1 \
    && ok "train --load --finetune" || { bad "train --load"; cat "$D/log2"; }
echo x >"$D/afile"
"$MTC" train $TINY --train-iters 1 --save "$D/afile" >"$D/out" 2>"$D/err"
[ $? -eq 2 ] && grep -q "afile exists and is not a directory" "$D/err" && [ ! -s "$D/out" ] &&
    ok "--save naming a file is refused before training: $(cat "$D/err")" || { bad "--save a file"; cat "$D/err"; }

# launchers: torchrun / srun variables saying several processes cannot form a
# world without MPI: rank 0 says so in one line, the others exit 2 silently
XENV="RANK=0 WORLD_SIZE=2" expect_usage "torchrun world 2" "started by torchrun as rank 0 of 2.*mpirun -np 2" train $TINY
RANK=1 WORLD_SIZE=2 "$MTC" train $TINY --train-iters 1 >"$D/out" 2>"$D/err"
[ $? -eq 2 ] && [ ! -s "$D/err" ] && [ ! -s "$D/out" ] && ok "torchrun rank 1: exit 2, silent" || { bad "torchrun rank 1"; cat "$D/err"; }
XENV="SLURM_PROCID=0 SLURM_NTASKS=3" expect_usage "srun world 3" "started by srun as rank 0 of 3" train $TINY
XENV="RANK=0 WORLD_SIZE=two" expect_usage "bad WORLD_SIZE" "WORLD_SIZE='two' is not an integer" train $TINY
XENV=
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "$MTC" train $TINY --train-iters 1 --log-interval 1 --eval-iters 0 >"$D/out" 2>&1 \
    && ok "torchrun world 1 trains" || { bad "torchrun world 1"; cat "$D/out"; }

# Megatron's defaults: global batch = micro batch x data-parallel size; flags
# that only concern GPUs are accepted with one note
"$MTC" train $TINY --world-size 2 --train-iters 1 --log-interval 1 --eval-iters 0 \
    --attention-backend flash --use-mcore-models --no-masked-softmax-fusion >"$D/out" 2>"$D/err" || { bad "no-op flags run"; cat "$D/err"; }
grep -q "micro batch 4 x 1 microbatches x data-parallel 2 = global batch 8" "$D/out" && ok "global batch defaults to micro batch x dp" || { bad "global batch default"; grep "global batch" "$D/out"; }
[ "$(grep -c '^note: --attention-backend, --use-mcore-models, --no-masked-softmax-fusion concern GPUs' "$D/err")" -eq 1 ] &&
    ok "GPU-only flags: one note" || { bad "GPU-only flags note"; cat "$D/err"; }

# checked numbers and output paths (one line, exit 2, nothing written)
expect_usage "huge hidden" "hidden-size=2147483647 is outside" train $TINY --hidden-size 2147483647
expect_usage "lr inf" "lr=inf must be a finite number" train $TINY --lr inf
expect_usage "clip nan" "clip-grad=nan must be a finite number" train $TINY --clip-grad nan
expect_usage "weight decay inf" "weight-decay=inf must be a finite number" train $TINY --weight-decay inf
expect_usage "bench-comm negative size" "'-8' is not a size" bench-comm --sizes -8
expect_usage "layout huge numel" "is not an integer in \[1, 2^40\]" layout --param-numels 9223372036854775807,10 --dp 2
expect_usage "layout huge dp" "data-parallel-size 2147483647 is outside" layout --param-numels 10,10 --dp 2147483647
expect_usage "schedule huge pp" "pp 100000 is outside" schedule --pp 100000 --microbatches 100000
expect_usage "generate huge count" "max-new-tokens=2147483647 is outside" generate --load "$D/none" --max-new-tokens 2147483647
mkfifo "$D/fifo"
"$MTC" train $TINY --metrics "$D/fifo" >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && grep -q "is a FIFO, not a file mtc may replace" "$D/err" && [ -p "$D/fifo" ] &&
    ok "--metrics onto a FIFO refused, FIFO kept" || { bad "metrics FIFO (status $st)"; cat "$D/err"; }
"$MTC" ranks --world-size 4 --svg "$D/fifo" >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && [ -p "$D/fifo" ] && ok "ranks --svg onto a FIFO refused" || { bad "svg FIFO (status $st)"; cat "$D/err"; }
for cmd in "train $TINY --trace" "plot $D/none.jsonl --svg" "export --load $D/none --format gguf --out"; do
    # shellcheck disable=SC2086
    "$MTC" $cmd "$D/fifo" >"$D/out" 2>"$D/err"; st=$?
    [ $st -eq 2 ] && grep -q "is a FIFO, not a file mtc may replace" "$D/err" && [ -p "$D/fifo" ] &&
        ok "${cmd%% *} output onto a FIFO refused" || { bad "${cmd%% *} FIFO (status $st)"; cat "$D/err"; }
done
"$MTC" ranks --world-size 4 --svg "$D/nodir/x.svg" >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && grep -q "does not exist" "$D/err" && ok "--svg into a missing folder refused" || { bad "svg missing folder"; cat "$D/err"; }
echo keep >"$D/target.svg"
ln -s "$D/target.svg" "$D/link.svg"
cp "$D/target.svg" "$D/target.before" 2>/dev/null || : >"$D/target.before"
"$MTC" ranks --world-size 4 --svg "$D/link.svg" >/dev/null 2>"$D/err" && [ ! -L "$D/link.svg" ] && grep -q "<svg" "$D/link.svg" &&
    cmp -s "$D/target.before" "$D/target.svg" &&
    ok "--svg at a symlink replaces the link, its target untouched" || { bad "svg symlink"; cat "$D/err"; }
[ -z "$(ls -A "$D" | grep '^\.mtc-')" ] && ok "no temporary files left" || bad "temporary files left"
"$MTC" train --mock-data --vocab-size 64 --threads 1 --lr 900 --train-iters 3 --log-interval 1 --eval-iters 0 --save "$D/nan.bin" >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 1 ] && grep -q "found NaN in the" "$D/err" && [ -z "$(ls "$D/nan.bin" 2>/dev/null | grep iter_)" ] &&
    ok "a NaN gradient stops the run, nothing saved" || { bad "NaN stop (status $st)"; tail -2 "$D/err"; }
exit $fail
