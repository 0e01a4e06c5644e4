#!/bin/sh
# tests/train/megatron_examples.sh - Megatron-LM's own example scripts
# (examples/gpt3/train_gpt3_175b_distributed.sh,
# examples/llama/train_llama3_8b_h100_fp8.sh with its default DTYPE=fp8,
# examples/mixtral/train_mixtral_8x7b_distributed.sh and Megatron-FSDP's
# examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh and
# sbatch_mfsdp_deepseek_v3.sh, core 0.18), shrunk to tiny
# sizes, run through `mtc train` with every flag the scripts pass and only
# the launcher line changed (`torchrun ... pretrain_gpt.py` -> `mtc train
# --world-size N`). The GPT-3 script reads a Megatron dataset made by `mtc
# preprocess` with a GPT-2-format vocabulary (tests/data/gpt2_tiny, offline);
# the Llama script uses its --mock-data / NullTokenizer branch, with the
# script's own --split "'99,1,0'" (bash hands the quotes to the program;
# Megatron's regex takes the numbers out). Mixtral runs its 4-node layout
# (32 ranks: pipeline 4 x expert 8, alltoall dispatcher, distributed
# optimizer) on a dataset preprocessed with its Llama2Tokenizer (the
# committed SentencePiece model tests/data/spm/fortunes_unigram400.model),
# once more with --moe-token-dispatcher-type flex (the same losses: flex is
# the alltoall dispatcher here), and --no-position-embedding is refused
# without rope, as Megatron does. The FSDP Llama-3 script runs its 8 ranks
# (Megatron-FSDP optim_grads_params, fp8); the DeepSeek-V3 one its
# pretrain_gpt.py arguments on 8 ranks (EP 8, MLA, Megatron-FSDP, flex) with a
# byte-level tokenizer.json in a folder standing for deepseek-ai/DeepSeek-V3,
# its --log-params-norm / --log-num-zeros-in-grad fields in the log line.
# Checked: each trains (loss falls, checkpoints written at --save-interval,
# a second run resumes from --load), and the flags mtc does not implement
# yet are refused in one line with exit 2 (not silently ignored); the list
# MISSING_* below is what remains, so implementing one of them makes this
# test say so and the list shrinks.
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
while [ $i -lt 300 ]; do
    echo "{\"text\": \"the quick brown fox jumps over the lazy dog $((i % 9)) times. a journey of a thousand miles begins with a single step.\"}"
    i=$((i + 1))
done >"$D/docs.jsonl"
"$MTC" preprocess --input "$D/docs.jsonl" --json-keys text --output-prefix "$D/my" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$V/vocab.json" --merge-file "$V/merges.txt" --append-eod --workers 1 >"$D/pre.log" 2>&1 ||
    { bad "preprocess"; cat "$D/pre.log"; }

# examples/gpt3/train_gpt3_175b_distributed.sh, sizes shrunk (96 layers -> 2, 12288 -> 64, ...)
GPT3="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --attention-backend auto
 --micro-batch-size 1 --global-batch-size 16 --step-batch-size-schedule 0:8,8K:16 --train-iters 30 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
 --init-method-std 0.006 --clip-grad 1.0 --fp16 --lr 6.0e-4 --lr-decay-style cosine --min-lr 6.0e-5 --lr-warmup-fraction .001 --lr-decay-iters 25
 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --data-path $D/my_text_document --vocab-file $V/vocab.json --merge-file $V/merges.txt --split 949,50,1
 --log-interval 5 --save-interval 10 --eval-interval 10 --save $D/g3 --load $D/g3 --eval-iters 2 --tensorboard-dir $D/tb"
MISSING_GPT3=""
# examples/llama/train_llama3_8b_h100_fp8.sh (mock-data branch, DTYPE=fp8: its DTYPE_ARGS), shrunk
LLAMA="--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4 --group-query-attention --num-query-groups 2
 --kv-channels 16 --seq-length 64 --max-position-embeddings 64 --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0
 --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused
 --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 --global-batch-size 8
 --train-samples 240 --lr-decay-samples 230 --lr-warmup-samples 16 --lr 0.0015 --min-lr 0.0001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5
 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16
 --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc --empty-unused-memory-level 1 --exit-duration-in-mins 235
 --tensor-model-parallel-size 2 --context-parallel-size 1 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
 --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --data-cache-path $D/cache --tiktoken-pattern v2 --split '99,1,0'
 --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 --log-interval 5 --eval-iters 4 --eval-interval 10
 --save-interval 10 --log-throughput --profile --profile-step-start 4 --profile-step-end 6 --ckpt-format torch_dist
 --distributed-timeout-minutes 60 --save $D/ll --load $D/ll --tensorboard-dir $D/tb
 --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather"
MISSING_LLAMA=""
# examples/mixtral/train_mixtral_8x7b_distributed.sh on its 4 nodes x 8 GPUs, shrunk (32 layers -> 4, 4096 -> 32,
# seq 4096 -> 32, global batch 256 -> 16, 500000 iterations -> 20); the W&B flags as with WANDB_API_KEY set
SPM=$SRC/tests/data/spm/fortunes_unigram400.model
"$MTC" preprocess --input "$D/docs.jsonl" --json-keys text --output-prefix "$D/mx" --tokenizer-type Llama2Tokenizer \
    --tokenizer-model "$SPM" --append-eod --workers 1 >"$D/pre.log" 2>&1 || { bad "preprocess (Llama2Tokenizer)"; cat "$D/pre.log"; }
MIXTRAL="--use-mcore-models --disable-bias-linear --seq-length 32 --max-position-embeddings 64 --num-layers 4 --hidden-size 32
 --ffn-hidden-size 64 --num-attention-heads 4 --init-method-std 0.01 --attention-dropout 0.0 --hidden-dropout 0.0 --normalization RMSNorm
 --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2
 --no-masked-softmax-fusion --no-position-embedding --rotary-base 1000000
 --num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2
 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce
 --tokenizer-type Llama2Tokenizer --tokenizer-model $SPM --data-path $D/mx_text_document --split 99990,8,2
 --micro-batch-size 1 --global-batch-size 16 --lr 1e-4 --train-iters 20 --lr-decay-iters 20 --lr-decay-style cosine --min-lr 1.0e-5
 --weight-decay 0.1 --lr-warmup-iters 2 --clip-grad 1.0 --bf16
 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --expert-model-parallel-size 8 --use-distributed-optimizer --sequence-parallel
 --log-interval 5 --save-interval 10 --eval-interval 10 --eval-iters 2 --save $D/mx --load $D/mx --tensorboard-dir $D/mx/tensorboard
 --no-load-optim --no-load-rng --wandb-project Mixtral --wandb-exp-name Mixtral_8x7B"
MISSING_MIXTRAL=""

# examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh (USE_MEGATRON_FSDP=1, DTYPE=fp8, the mock-data branch) on its
# 1 node x 8 GPUs, shrunk as the Llama script above (32 layers -> 2, seq 8192 -> 64, global batch 128 -> 16)
FSDPL="--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4 --group-query-attention
 --num-query-groups 2 --kv-channels 16 --seq-length 64 --max-position-embeddings 64 --position-embedding-type rope --rotary-base 1000000
 --rotary-percent 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134
 --attention-backend fused --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear
 --micro-batch-size 1 --global-batch-size 16 --train-samples 320 --lr-decay-samples 300 --lr-warmup-samples 32 --lr 0.0015 --min-lr 0.0001
 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9
 --adam-beta2 0.95 --bf16 --cross-entropy-loss-fusion --no-check-for-nan-in-loss-and-grad --manual-gc --empty-unused-memory-level 1
 --exit-duration-in-mins 235 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --no-gradient-accumulation-fusion
 --calculate-per-token-loss --init-model-with-meta-device --ckpt-format fsdp_dtensor --grad-reduce-in-bf16 --use-nccl-ub
 --fsdp-double-buffer --fsdp-manual-registration --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
 --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather
 --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
 --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --data-cache-path $D/cache --tiktoken-pattern v2 --split '99,1,0'
 --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1
 --log-interval 5 --eval-iters 4 --eval-interval 10 --save-interval 10 --log-throughput --distributed-timeout-minutes 60
 --save $D/fl --load $D/fl --tensorboard-dir $D/tb"
MISSING_FSDPL=""
# examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh, its pretrain_gpt.py arguments (USE_MEGATRON_FSDP=1, WANDB=1, TP=1,
# EP=8) on one node of 8, shrunk: 61 layers -> 3 with the first-k-dense pattern [0]*3+[1]*58 -> [0]*1+[1]*2, 256 experts
# -> 16 (top-8 of 4 groups out of 8 -> top-4 of 2 groups out of 4), MLA ranks 1536/512 -> 32/16, heads 128 -> 4,
# seq 4096 -> 32, MBS 4 -> 1, GBS 2048 -> 16; the tokenizer deepseek-ai/DeepSeek-V3 -> a local byte-level BPE
# tokenizer.json in a folder (the data path)
python3 "$SRC/tests/data/make_hf_tokenizer.py" --tiny "$D/hf.json" >"$D/hf.log" 2>&1 || { bad "tokenizer.json"; cat "$D/hf.log"; }
mkdir -p "$D/DeepSeek-V3" && mv "$D/hf.json" "$D/DeepSeek-V3/tokenizer.json"
"$MTC" preprocess --input "$D/docs.jsonl" --json-keys text --output-prefix "$D/ds" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$D/DeepSeek-V3" --append-eod --workers 1 >"$D/pre.log" 2>&1 || { bad "preprocess (HF)"; cat "$D/pre.log"; }
DSV3="--distributed-timeout-minutes 60 --tensor-model-parallel-size 1 --expert-model-parallel-size 8 --expert-tensor-parallel-size 1
 --context-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-mcore-models --sequence-parallel
 --use-flash-attn --disable-bias-linear --micro-batch-size 1 --global-batch-size 16 --train-samples 320 --exit-duration-in-mins 220
 --no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval 10 --recompute-granularity selective
 --recompute-modules mlp moe mla_up_proj layernorm --transformer-impl transformer_engine --seq-length 32
 --data-cache-path $D/cache --tokenizer-type HuggingFaceTokenizer --tokenizer-model $D/DeepSeek-V3 --data-path $D/ds_text_document
 --split 99,1,0 --no-mmap-bin-files --no-create-attention-mask-in-dataloader --num-workers 6
 --num-layers 3 --hidden-size 64 --ffn-hidden-size 160 --num-attention-heads 4 --kv-channels 16 --max-position-embeddings 32
 --position-embedding-type rope --rotary-base 10000 --make-vocab-size-divisible-by 3232 --normalization RMSNorm --norm-epsilon 1e-6
 --swiglu --untie-embeddings-and-output-weights --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 --clip-grad 1.0
 --weight-decay 0.1 --qk-layernorm --lr-decay-samples 300 --lr-warmup-samples 32 --lr-warmup-init 3.9e-7 --lr 3.9e-3 --min-lr 3.9e-4
 --lr-decay-style cosine --adam-beta1 0.9 --adam-beta2 0.95
 --num-experts 16 --moe-layer-freq [0]*1+[1]*2 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32
 --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 4 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep
 --moe-router-pre-softmax --moe-grouped-gemm --moe-aux-loss-coeff 1e-4 --moe-router-group-topk 2 --moe-router-num-groups 4
 --moe-router-topk-scaling-factor 2.5 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
 --moe-router-bias-update-rate 1e-3 --moe-router-dtype fp32 --moe-permute-fusion --moe-router-force-load-balancing
 --q-lora-rank 32 --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --rotary-scaling-factor 40 --mscale 1.0
 --mscale-all-dim 1.0 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --eval-iters 2 --eval-interval 10 --auto-detect-ckpt-format
 --load $D/dsck --save $D/dsck --save-interval 10 --dist-ckpt-strictness log_all --init-method-std 0.02
 --log-timers-to-tensorboard --log-memory-to-tensorboard --log-num-zeros-in-grad --log-params-norm --log-validation-ppl-to-tensorboard
 --log-throughput --log-interval 5 --logging-level 40 --tensorboard-dir $D/dstb --bf16 --enable-experimental
 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --no-gradient-accumulation-fusion --use-distributed-optimizer
 --calculate-per-token-loss --init-model-with-meta-device --ckpt-format fsdp_dtensor --grad-reduce-in-bf16 --fsdp-double-buffer
 --use-nccl-ub --wandb-project your_own_wandb_project --wandb-exp-name DeepSeek-V3-TP1EP8-MBS1GBS16-"
# (every flag of the script runs now: nothing is refused)
MISSING_DSV3=""

# without FLAG and its values (the words after it up to the next flag)
drop() { echo " $1 " | tr '\n' ' ' | sed -E "s/ $2( [^-][^ ]*)* / /"; }
# the words after FLAG up to the next flag
values() { echo " $1 " | tr '\n' ' ' | sed -E "s/.* $2(( [^-][^ ]*)*) .*/\1/"; }

run_example() { # NAME WORLD "ARGS" "MISSING"
    name=$1 world=$2 args=$3 missing=$4
    # the examples that --profile write their trace into the test's folder (--profile-dir
    # alone is refused)
    P=""
    case " $args " in *" --profile "*) P="--profile-dir $D/prof" ;; esac
    for f in $missing; do # each missing flag alone: refused in one line, exit 2
        rest=$args
        for g in $missing; do [ "$g" = "$f" ] || rest=$(drop "$rest" "$g"); done
        # shellcheck disable=SC2086
        "$MTC" train --world-size "$world" --threads 1 $P $rest >"$D/out" 2>"$D/err"
        rc=$?
        # the one error line names the flag or one of its values (notes may come before it)
        named=0
        for w in "${f#--}" $(values "$rest" "$f"); do grep -q -- "error: .*$w" "$D/err" && named=1; done
        if [ $rc -eq 2 ] && [ "$(grep -c "error:" "$D/err")" -eq 1 ] && [ $named -eq 1 ]; then
            ok "$name: $f refused: $(grep error: "$D/err")"
        else bad "$name: $f: exit $rc, expected a one-line refusal (implemented now? then take it off MISSING)"; cat "$D/err"; fi
    done
    for f in $missing; do args=$(drop "$args" "$f"); done
    # shellcheck disable=SC2086
    "$MTC" train --world-size "$world" --threads 1 $P $args >"$D/$name.log" 2>&1 ||
        { bad "$name: mtc train"; tail -n 5 "$D/$name.log"; return; }
    first=$(grep -m1 "lm loss:" "$D/$name.log" | sed 's/.*lm loss: \([0-9.E+-]*\).*/\1/')
    last=$(grep "lm loss:" "$D/$name.log" | tail -n 1 | sed 's/.*lm loss: \([0-9.E+-]*\).*/\1/')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' && ok "$name trains: lm loss $first -> $last" ||
        bad "$name: loss $first -> $last"
    grep -q "^note: .*do not apply here" "$D/$name.log" && ok "$name: one note names the flags without effect" ||
        bad "$name: no note for GPU-only flags"
    echo "$name: $(grep -c . "$D/$name.log") log lines; flags mtc refuses: $missing"
}
run_example gpt3 4 "$GPT3" "$MISSING_GPT3"
[ -d "$D/g3/iter_0000010" ] && [ -d "$D/g3/iter_0000030" ] && ok "gpt3: checkpoints at --save-interval 10 and the end" || bad "gpt3 checkpoints"
# the schedule (shrunk from "0:16 2.4B:320 ... 12B:1536"): 8 samples until 8K tokens = 125 samples, then 16
# (16 iterations of 8 reach 128; logged every 5 iterations)
grep -q "iteration       15/      30 | consumed samples:          120 .* global batch size:     8 |" "$D/gpt3.log" &&
    grep -q "iteration       20/      30 | consumed samples:          192 .* global batch size:    16 |" "$D/gpt3.log" &&
    [ -d "$D/g3/iter_0000016" ] &&
    ok "gpt3: --step-batch-size-schedule 0:8,8K:16 switches at iteration 17 (saved at 16, as Megatron)" ||
    { bad "gpt3 batch schedule"; grep "iteration  *[12][05]/" "$D/gpt3.log" | cut -c1-200; }
resume=$(drop "$GPT3" --train-iters)
for f in $MISSING_GPT3; do resume=$(drop "$resume" "$f"); done
# shellcheck disable=SC2086
"$MTC" train --world-size 4 --threads 1 $resume --train-iters 35 >"$D/resume.log" 2>&1 &&
    grep -q "iteration       35/      35" "$D/resume.log" && ! grep -q "iteration        5/" "$D/resume.log" &&
    ok "gpt3: the same command resumes from --load at iteration 30" || { bad "gpt3 resume"; tail -n 3 "$D/resume.log"; }
grep -q "GPT2BPETokenizer\|vocabulary 377" "$D/gpt3.log" && ok "gpt3: --vocab-file/--merge-file give the vocabulary (377)" ||
    { bad "gpt3: vocabulary"; grep "data:\|model:" "$D/gpt3.log"; }
run_example llama 2 "$LLAMA" "$MISSING_LLAMA"
grep -q "iteration       30/      30" "$D/llama.log" && ok "llama: --train-samples 240 / 8 = 30 iterations" || bad "llama: iterations"
grep -q "fp8 (emulated.*recipe delayed, format hybrid" "$D/llama.log" && grep -q "amax history 1024, max" "$D/llama.log" &&
    ok "llama: trained with the script's fp8 flags (delayed, hybrid, history 1024, max)" || bad "llama: fp8 banner"
[ -f "$D/prof/trace.json" ] && ok "llama: --profile wrote a trace" || bad "llama: trace"
run_example mixtral 32 "$MIXTRAL" "$MISSING_MIXTRAL"
[ -d "$D/mx/iter_0000010" ] && [ -d "$D/mx/iter_0000020" ] && ok "mixtral: checkpoints at --save-interval 10 and the end" ||
    bad "mixtral checkpoints"
grep -q "vocabulary 400" "$D/mixtral.log" && ok "mixtral: Llama2Tokenizer's 400 pieces are the vocabulary" ||
    { bad "mixtral: vocabulary"; grep "data:\|model:" "$D/mixtral.log"; }
run_example fsdp_llama 8 "$FSDPL" "$MISSING_FSDPL"
[ -d "$D/fl/iter_0000010" ] && [ -d "$D/fl/iter_0000020" ] && ok "fsdp_llama: checkpoints at --save-interval 10 and the end" ||
    bad "fsdp_llama checkpoints"
grep -q "iteration       20/      20" "$D/fsdp_llama.log" && grep -q "fp8 (emulated.*recipe delayed, format hybrid" "$D/fsdp_llama.log" &&
    ok "fsdp_llama: --train-samples 320 / 16 = 20 iterations with the script's fp8 flags" || bad "fsdp_llama: iterations / fp8"
run_example dsv3 8 "$DSV3" "$MISSING_DSV3"
[ -d "$D/dsck/iter_0000010" ] && [ -d "$D/dsck/iter_0000020" ] && ok "dsv3: checkpoints at --save-interval 10 and the end" ||
    bad "dsv3 checkpoints"
grep -q "mixture of experts: 2 of 3 layers, 16 experts" "$D/dsv3.log" && grep -q "seq_load_balancing_loss: " "$D/dsv3.log" &&
    grep -q "grad norm: [0-9.]* | num zeros: [0-9]*\.0 | params norm: [0-9.]* |" "$D/dsv3.log" &&
    ok "dsv3: [0]*1+[1]*2 gives 2 MoE layers of 3; seq_load_balancing_loss, num zeros and params norm logged" ||
    { bad "dsv3: MoE layers / log fields"; grep "mixture of experts\|iteration  *5/" "$D/dsv3.log"; }
mx=$MIXTRAL
for f in $MISSING_MIXTRAL; do mx=$(drop "$mx" "$f"); done
mx=$(drop "$(drop "$(drop "$(drop "$mx" --save)" --load)" --save-interval)" --moe-token-dispatcher-type)
# shellcheck disable=SC2086
"$MTC" train --world-size 32 --threads 1 $mx --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep \
    >"$D/flex.log" 2>&1 || { bad "mixtral flex"; tail -n 3 "$D/flex.log"; }
grep "lm loss:" "$D/mixtral.log" | sed 's/.*\(lm loss: [^|]*\).*/\1/' >"$D/a2a.loss"
grep "lm loss:" "$D/flex.log" | sed 's/.*\(lm loss: [^|]*\).*/\1/' >"$D/flex.loss"
[ -s "$D/a2a.loss" ] && cmp -s "$D/a2a.loss" "$D/flex.loss" &&
    grep -q "^note: --moe-token-dispatcher-type flex runs the alltoall dispatcher.*HybridEP" "$D/flex.log" &&
    ok "mixtral: flex gives alltoall's losses, with one note naming HybridEP" || { bad "mixtral flex losses / note"; cat "$D/flex.loss"; }
# shellcheck disable=SC2086
"$MTC" train --world-size 32 --threads 1 $(drop "$mx" --position-embedding-type) >"$D/nope.log" 2>"$D/nope.err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$D/nope.err")" -eq 1 ] && grep -q "no-position-embedding is deprecated" "$D/nope.err" &&
    ok "mixtral: --no-position-embedding without rope refused as Megatron does" || { bad "no-position-embedding: exit $rc"; cat "$D/nope.err"; }
exit $fail
