#!/bin/sh
# tests/ckpt/moe_export_cli.sh - MoE models trained expert-parallel (ep 2:
# each rank holds half the experts) exported from that layout:
#   mix   Llama-style, 4 experts top-2 in every layer -> MixtralForCausalLM
#   qwen  + q/k/v biases, a shared expert, top-k after the softmax, a dense
#         second layer (--moe-layer-freq [1,0]) -> Qwen2MoeForCausalLM
# and mix4, the Mixtral form trained at tp 2 x ep 2 with etp 2 and sequence
# parallelism. mix and qwen re-saved (a step at lr 0) from ep 1 and from
# ep 2 x pp 2 export the same bytes (safetensors, ONNX, GGUF). For each: config.json's class and MoE fields as the class reads them;
# transformers.js' AutoConfig / AutoTokenizer read the safetensors folder
# without a warning and give mtc's ids; `mtc import` of the folder generates
# mtc's text and exports the same model.safetensors again; when PyTorch is
# installed, tests/reference/hf_reader.py (the class's forward written on
# Hugging Face's conventions) gives mtc's logits to 1e-4; the ONNX export
# (fp32 and fp16) in transformers.js' pipeline continues as mtc generate and
# onnxruntime-node's logits equal mtc's to 1e-4; the Mixtral-form model's
# GGUF (fp32, fp16) in llama.cpp (npm node-llama-cpp, as gguf_cli.sh)
# tokenizes as mtc and continues greedily as mtc generate. Settings the classes cannot
# express are refused by name. npm as in onnx_cli.sh (77 only without a
# registry).
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$MTC_SOURCE_DIR/tests/ckpt/onnx_lib.sh"
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times, café über 日本"
    i=$((i + 1))
done >"$D/text.txt"
B="--data-path $D/text.txt --tokenizer-type char --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 80 --log-interval 40 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
MOE="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 --world-size 2 --expert-model-parallel-size 2"
QWEN="--moe-shared-expert-intermediate-size 64 --moe-router-pre-softmax --moe-layer-freq [1,0] --add-qkv-bias"
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MOE --save "$D/mix" >"$D/t1.log" 2>&1 || { bad "mix train"; cat "$D/t1.log"; }
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MOE $QWEN --save "$D/qwen" >"$D/t2.log" 2>&1 || { bad "qwen train"; cat "$D/t2.log"; }
# the Mixtral form again in tp 2 x ep 2 with the experts split over etp 2 and sequence parallelism
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $(echo "$MOE" | sed 's/--world-size 2/--world-size 4/') --tp 2 --expert-tensor-parallel-size 2 \
    --sequence-parallel --save "$D/mix4" >"$D/t5.log" 2>&1 || { bad "mix4 train"; cat "$D/t5.log"; }
PROMPTS="the qu|over the lazy|2 times, ca"
PYT=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import torch' 2>/dev/null && PYT=$p && break
done
for m in mix qwen mix4; do
    H=$D/$m.hf
    "$MTC" export --load "$D/$m" --format safetensors --out "$H" >"$D/e.log" 2>&1 || { bad "$m export"; cat "$D/e.log"; continue; }
    if [ $m != qwen ]; then
        want='MixtralForCausalLM mixtral 4 2 96 None None None'
    else
        want='Qwen2MoeForCausalLM qwen2_moe 4 2 96 64 False [1]'
    fi
    got=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))
e = c.get("num_local_experts", c.get("num_experts")); f = c.get("moe_intermediate_size", c["intermediate_size"])
print(c["architectures"][0], c["model_type"], e, c["num_experts_per_tok"], f, c.get("shared_expert_intermediate_size"), c.get("norm_topk_prob"), c.get("mlp_only_layers"))' "$H/config.json" | tr -d ' ,' )
    [ "$got" = "$(echo "$want" | tr -d ' ')" ] && ok "$m: config.json says $want" || bad "$m: config.json says $got, expected $want"
    check_config "$m safetensors" "$H" "$D/$m" null "$PROMPTS"
    # back into mtc
    "$MTC" import --load "$H" --save "$D/$m.imp" >"$D/i.log" 2>&1 || { bad "$m import"; cat "$D/i.log"; }
    "$MTC" export --load "$D/$m.imp" --format safetensors --out "$D/$m.hf2" >"$D/e.log" 2>&1 &&
        cmp -s "$H/model.safetensors" "$D/$m.hf2/model.safetensors" && ok "$m: import then export gives the same model.safetensors" ||
        bad "$m: the re-exported model.safetensors differs"
    for p in "the qu" "2 times, ca"; do
        a=$("$MTC" generate --load "$D/$m" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1)
        b=$("$MTC" generate --load "$D/$m.imp" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1)
        [ -n "$a" ] && [ "$a" = "$b" ] && ok "$m: the imported model generates as the trained one: $(echo "$a" | head -n 1)" ||
            bad "$m: imported '$b' vs trained '$a'"
    done
    if [ -n "$PYT" ]; then
        "$PYT" "$MTC_SOURCE_DIR/tests/reference/hf_reader.py" "$H" $m $IDS | tail -n 1 | tr ' ' '\n' >"$D/py.flat"
        "$REF" "$D/$m" logits "$IDS" | tr ' ' '\n' >"$D/ref.flat"
        compare_rows "$m: the PyTorch reader's logits of the folder" "$D/ref.flat" "$D/py.flat"
    else
        echo "note: no PyTorch (python3-torch), tests/reference/hf_reader.py not run"
    fi
    for dt in fp32 fp16; do
        O=$D/$m.onnx.$dt
        "$MTC" export --load "$D/$m" --format onnx --dtype $dt --out "$O" >"$D/e.log" 2>&1 ||
            { bad "$m $dt onnx export"; cat "$D/e.log"; continue; }
        check_onnx "$m onnx $dt" "$O" "$D/$m" 14 "$PROMPTS"
        [ $dt = fp32 ] && check_logits "$m onnx $dt" "$O" "$D/$m"
    done
done
refuse() { # NAME EXPECTED ARGS...: exit 2 naming the setting, nothing written
    n=$1 e=$2; shift 2
    "$MTC" export "$@" --out "$D/no" 2>"$D/err"
    [ $? -eq 2 ] && grep -q -- "$e" "$D/err" && [ ! -e "$D/no" ] && ok "$n refused: $(cat "$D/err")" ||
        { bad "$n not refused naming $e"; cat "$D/err"; }
}
# GGUF: llama.cpp's llama architecture with experts (Mixtral's form), fp32 and fp16
npm_need "$CACHE" llama node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 --omit=optional
GP="the qu|over the lazy|2 times, "
for dt in fp32 fp16; do
    "$MTC" export --load "$D/mix" --format gguf --dtype $dt --out "$D/mix.$dt.gguf" >"$D/e.log" 2>&1 ||
        { bad "mix gguf $dt export"; cat "$D/e.log"; }
done
(IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_greedy.mjs" "$CACHE/llama/node_modules" 14 "$D/mix.fp32.gguf,$D/mix.fp16.gguf" $GP) >"$D/l.out" 2>"$D/l.err" ||
    { bad "llama.cpp failed on the MoE GGUF"; cat "$D/l.err"; }
for dt in fp32 fp16; do
    echo "$GP" | tr '|' '\n' | while IFS= read -r p; do
        line=$(awk -F '\t' -v m="$D/mix.$dt.gguf" -v p="$p" '$1 == m && $2 == p' "$D/l.out")
        ids=$(printf '%s' "$line" | cut -f3)
        got=$(printf '%s' "$line" | cut -f4)
        want_ids=$("$REF" "$D/mix" ids "$p")
        want=$("$MTC" generate --load "$D/mix" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1 | json_text)
        [ -n "$ids" ] && [ "$ids" = "$want_ids" ] && [ "$got" = "$want" ] &&
            echo "ok   mix gguf $dt '$p': llama.cpp's ids and greedy text = mtc's: $got" ||
            echo "FAIL mix gguf $dt '$p': llama.cpp '$ids' $got, mtc '$want_ids' $want"
    done
done >"$D/res"
cat "$D/res"
grep -q FAIL "$D/res" && fail=1
[ "$(grep -c '^ok' "$D/res")" = 6 ] || bad "6 llama.cpp comparisons expected"
refuse "a GGUF of a shared expert smaller than the routed ones" "moe-shared-expert-intermediate-size=64" --load "$D/qwen" --format gguf

# the same weights saved from other layouts (one step at lr 0 re-saves them unchanged): ep 1
# serial, and ep 2 x pp 2 (world 4: each stage's ranks hold half its layers' experts); the
# checkpoint reader gathers the experts, so every export is byte for byte the ep 1 one
ONE=$(echo "$B" | sed 's/--lr 3e-3 --train-iters 80/--lr 0 --min-lr 0 --override-opt-param-scheduler --train-iters 81/')
for m in mix qwen; do
    extra=""
    [ $m = qwen ] && extra=$QWEN
    # shellcheck disable=SC2086
    "$MTC" train $ONE $LLAMA $(echo "$MOE" | sed 's/--world-size 2 --expert-model-parallel-size 2//') $extra \
        --load "$D/$m" --save "$D/$m.ep1" >"$D/t6.log" 2>&1 || { bad "$m ep 1 re-save"; cat "$D/t6.log"; }
    # shellcheck disable=SC2086
    "$MTC" train $ONE $LLAMA $(echo "$MOE" | sed 's/--world-size 2/--world-size 4/') --pipeline-model-parallel-size 2 $extra \
        --load "$D/$m" --save "$D/$m.ep2pp2" >"$D/t7.log" 2>&1 || { bad "$m ep 2 x pp 2 re-save"; cat "$D/t7.log"; }
    fmts="safetensors onnx"
    [ $m = mix ] && fmts="$fmts gguf"
    for f in $fmts; do
        for l in ep1 ep2pp2; do
            "$MTC" export --load "$D/$m.$l" --format $f --out "$D/$m.$l.$f" >"$D/e.log" 2>&1 || { bad "$m $l $f export"; cat "$D/e.log"; }
        done
        case $f in
        safetensors) a=$D/$m.ep1.$f/model.safetensors b=$D/$m.ep2pp2.$f/model.safetensors ;;
        onnx) a=$D/$m.ep1.$f/onnx/model.onnx b=$D/$m.ep2pp2.$f/onnx/model.onnx ;;
        *) a=$D/$m.ep1.$f b=$D/$m.ep2pp2.$f ;;
        esac
        [ -s "$a" ] && cmp -s "$a" "$b" && { [ $f != safetensors ] || cmp -s "$a" "$D/$m.hf/model.safetensors"; } &&
            ok "$m $f: exported from ep 2 x pp 2 = from ep 1, byte for byte ($(wc -c <"$a") bytes)" ||
            bad "$m $f: the ep 2 x pp 2 export differs from the ep 1 one"
    done
    grep -q "ep 2 x etp 1 x expert-DP 1 (x pp 2 = world 4)" "$D/t7.log" || { bad "$m: the re-save did not run ep 2 x pp 2"; grep "expert parallel" "$D/t7.log"; }
done

# refusals, before anything is written
refuse "Mixtral for a model with dense layers and a shared expert" "MixtralForCausalLM has" --load "$D/qwen" --format safetensors --hf-architecture MixtralForCausalLM
refuse "Qwen3-MoE without QK norm" "q_norm" --load "$D/mix" --format safetensors --hf-architecture Qwen3MoeForCausalLM
refuse "an ONNX folder as Qwen3-MoE" "q_norm" --load "$D/mix" --format onnx --hf-architecture Qwen3MoeForCausalLM
refuse "an unknown class" "not an MoE class" --load "$D/mix" --format safetensors --hf-architecture QwenMoe
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MOE --moe-router-score-function sigmoid --train-iters 2 --save "$D/sig" >"$D/t3.log" 2>&1 || { bad "sigmoid train"; cat "$D/t3.log"; }
refuse "a sigmoid router" "moe-router-score-function=sigmoid" --load "$D/sig" --format safetensors
# shellcheck disable=SC2086
"$MTC" train $B $MOE --train-iters 2 --save "$D/g2moe" >"$D/t4.log" 2>&1 || { bad "gpt2 moe train"; cat "$D/t4.log"; }
refuse "a GPT-2 MoE" "GPT-2-style" --load "$D/g2moe" --format safetensors
[ $HAVE_ONNX = 1 ] || echo "note: python3-onnx is not installed (scripts/deps.sh), onnx.checker not run"
exit $fail
