#!/bin/sh
# tests/train/log_norms_cli.sh - Megatron's --log-params-norm and
# --log-num-zeros-in-grad: " num zeros: N.0 | params norm: X.XXX |" after the
# grad norm in the iteration log line (training.py's training_log of core
# 0.18). The params norm is calc_params_l2_norm after the step (every
# parameter once, over all ranks), the count is count_zeros_fp32 of the
# reduced, clipped gradients (every element once): both must not depend on
# the layout. Checked:
#   - every parallel layout (TP x PP, TP + SP + distributed optimizer, PP x DP
#     with overlap, the tied embedding on two stages, experts over EP with
#     TP and the distributed optimizer, Megatron-FSDP) prints the serial
#     run's values, iteration by iteration;
#   - the count against a closed form: without dropout the only zero
#     gradients of the untied model are the embedding rows of the ids the
#     batch never holds, (padded vocabulary - distinct ids) x hidden, the
#     distinct ids counted from the dataset's .bin by od;
#   - a step the fp16 scaler skips prints no num zeros (Megatron's None),
#     still the params norm; without the flags neither field; --metrics
#     carries num_zeros and params_norm, TensorBoard num-zeros and params-norm.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
V=$SRC/tests/data/gpt2_tiny
i=0
while [ $i -lt 200 ]; do
    echo "{\"text\": \"the quick brown fox jumps over the lazy dog $((i % 9)) times. a journey of a thousand miles begins with a single step.\"}"
    i=$((i + 1))
done >"$D/docs.jsonl"
"$MTC" preprocess --input "$D/docs.jsonl" --json-keys text --output-prefix "$D/my" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$V/vocab.json" --merge-file "$V/merges.txt" --append-eod --workers 1 >"$D/pre.log" 2>&1 ||
    { bad "preprocess"; cat "$D/pre.log"; }
# vocabulary 377 padded to 512 for TP 1 and 2 alike (--make-vocab-size-divisible-by 256)
BASE="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
 --micro-batch-size 1 --global-batch-size 8 --train-iters 6 --lr 1e-3 --clip-grad 0.5 --log-interval 2
 --data-path $D/my_text_document --vocab-file $V/vocab.json --merge-file $V/merges.txt --make-vocab-size-divisible-by 256
 --log-params-norm --log-num-zeros-in-grad --threads 1"
fields() { grep "iteration  " "$1" | sed -n 's/.*\( num zeros: [^|]*|\)\( params norm: [^|]*|\).*/\1\2/p'; }
run() { # NAME ARGS...: the fields of the run's log lines in $D/NAME.f
    name=$1
    shift
    # shellcheck disable=SC2086
    "$MTC" train $BASE "$@" >"$D/$name.log" 2>&1 || { bad "$name: mtc train"; tail -n 3 "$D/$name.log"; }
    fields "$D/$name.log" >"$D/$name.f"
}
same() { # NAME REF
    if [ "$(wc -l <"$D/$1.f")" -eq 3 ] && cmp -s "$D/$1.f" "$D/$2.f"; then
        ok "$1: the serial run's num zeros and params norm ($(tail -n 1 "$D/$1.f"))"
    else
        bad "$1 differs from $2"
        paste "$D/$1.f" "$D/$2.f"
    fi
}
U=--untie-embeddings-and-output-weights
run serial $U
run tp2pp2 $U --world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
same tp2pp2 serial
run tp2sp_distopt $U --world-size 4 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
same tp2sp_distopt serial
run pp2dp2_overlap $U --world-size 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce \
    --overlap-param-gather
same pp2dp2_overlap serial
run fsdp $U --world-size 4 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params \
    --use-distributed-optimizer
same fsdp serial
run tied_serial
run tied_pp2 --world-size 2 --pipeline-model-parallel-size 2
same tied_pp2 tied_serial
MOE="$U --num-experts 4 --moe-router-topk 2"
# shellcheck disable=SC2086
run moe_serial $MOE
# shellcheck disable=SC2086
run moe_tp2ep2 $MOE --world-size 4 --tensor-model-parallel-size 2 --expert-model-parallel-size 2 \
    --expert-tensor-parallel-size 1 --sequence-parallel --use-distributed-optimizer
same moe_tp2ep2 moe_serial
grep -q "grad norm: [0-9.]* | num zeros: [1-9][0-9]*\.0 | params norm: [0-9]*\.[0-9][0-9][0-9] |" "$D/serial.log" &&
    ok "printed as Megatron: after the grad norm, \"num zeros: N.0 | params norm: X.XXX |\"" ||
    { bad "format"; grep "iteration  " "$D/serial.log" | head -n 1; }

# the closed form: (512 - distinct ids) x 64 zeros, every iteration, on documents all alike (each
# 33-token sample then holds every id of the 27-token document: the batch holds them all)
i=0
while [ $i -lt 200 ]; do
    echo '{"text": "the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins."}'
    i=$((i + 1))
done >"$D/same.jsonl"
"$MTC" preprocess --input "$D/same.jsonl" --json-keys text --output-prefix "$D/same" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$V/vocab.json" --merge-file "$V/merges.txt" --append-eod --workers 1 >"$D/pre.log" 2>&1 ||
    { bad "preprocess"; cat "$D/pre.log"; }
n=$(od -An -tu2 -v "$D/same_text_document.bin" | tr -s ' ' '\n' | grep . | sort -u | wc -l)
want=$(((512 - n) * 64))
run nodrop $U --hidden-dropout 0 --attention-dropout 0 --data-path "$D/same_text_document"
if [ "$(grep -c " num zeros: $want.0 |" "$D/nodrop.f")" -eq 3 ]; then
    ok "no dropout: num zeros = (512 - $n distinct ids) x 64 = $want"
else
    bad "no dropout: expected num zeros $want"
    cat "$D/nodrop.f"
fi

# fp16 at the initial scale 2^32: the first steps overflow and are skipped
run fp16 $U --fp16
line=$(grep "iteration        2/" "$D/fp16.log")
case $line in
*"number of skipped iterations:   2"*) ;;
*) bad "fp16: expected iterations 1-2 skipped: $line" ;;
esac
case $line in
*"num zeros"* | *"grad norm"*) bad "fp16 skipped step: no num zeros or grad norm expected: $line" ;;
*"params norm: "*) ok "a skipped fp16 step: params norm, no num zeros (Megatron's None)" ;;
*) bad "fp16: no params norm: $line" ;;
esac

# shellcheck disable=SC2086
"$MTC" train $(echo " $BASE " | sed 's/ --log-params-norm / /; s/ --log-num-zeros-in-grad / /') --train-iters 2 \
    --metrics "$D/none.jsonl" >"$D/none.log" 2>&1 || bad "run without the flags"
! grep -q "num zeros\|params norm" "$D/none.log" && ! grep -q "num_zeros\|params_norm" "$D/none.jsonl" &&
    ok "without the flags neither field" || bad "fields without the flags"
# shellcheck disable=SC2086
"$MTC" train $BASE --train-iters 2 --metrics "$D/m.jsonl" --tensorboard-dir "$D/tb" >"$D/m.log" 2>&1 ||
    bad "run with --metrics"
grep -q '"num_zeros": [0-9]*, "params_norm": [0-9.]*' "$D/m.jsonl" && ok "--metrics: num_zeros and params_norm" ||
    { bad "metrics"; cat "$D/m.jsonl"; }
grep -aq "num-zeros vs samples" "$D"/tb/events.out.tfevents.* && grep -aq "params-norm vs samples" "$D"/tb/events.out.tfevents.* &&
    ok "TensorBoard: num-zeros and params-norm (and vs samples)" || bad "TensorBoard tags"
exit $fail
