#!/bin/sh
# tests/ckpt/qwen3_export_cli.sh - models with --qk-layernorm (per-head RMSNorm
# of q and k, Hugging Face's q_norm / k_norm) exported to every format:
#   q3moe  Llama-style MoE, 4 experts top-2 in every layer, trained expert-
#          parallel (ep 2) -> Qwen3MoeForCausalLM (no shared expert,
#          norm_topk_prob true) and llama.cpp's qwen3moe
#   q3pre  the same with --moe-router-pre-softmax and a dense second layer
#          -> Qwen3MoeForCausalLM (norm_topk_prob false, mlp_only_layers);
#          refused by llama.cpp's qwen3moe, which renormalises
#   q3     dense, grouped-query -> Qwen3ForCausalLM and llama.cpp's qwen3
#   dsk    (GGUF only) Llama-style MoE with two shared experts' width (192 =
#          2 x 96), --moe-router-pre-softmax, a leading dense layer
#          (--moe-layer-freq [0,1]), ep 2 -> llama.cpp's deepseek (DeepSeekMoE:
#          ungated shared experts, top-k not renormalised)
# For each of the first three: config.json's class and fields; transformers.js' AutoConfig /
# AutoTokenizer read the safetensors folder without a warning and give mtc's
# ids; `mtc import` of the folder generates mtc's text and exports the same
# model.safetensors again; when PyTorch is installed, tests/reference/
# hf_reader.py (the classes' forward on Hugging Face's conventions) gives
# mtc's logits to 1e-4; the ONNX folder (fp32) in transformers.js' pipeline
# continues as mtc generate and onnxruntime-node's logits equal mtc's to
# 1e-4; the GGUF (fp32, fp16) in llama.cpp (npm node-llama-cpp) tokenizes as
# mtc and continues greedily as mtc generate. Settings the classes cannot
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
B="--data-path $D/text.txt --tokenizer-type char --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 60 --log-interval 30 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear --qk-layernorm"
MOE="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 --world-size 2 --expert-model-parallel-size 2"
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MOE --save "$D/q3moe" >"$D/t1.log" 2>&1 || { bad "q3moe train"; cat "$D/t1.log"; }
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MOE --moe-router-pre-softmax --moe-layer-freq [1,0] --save "$D/q3pre" >"$D/t2.log" 2>&1 ||
    { bad "q3pre train"; cat "$D/t2.log"; }
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA --ffn-hidden-size 128 --save "$D/q3" >"$D/t3.log" 2>&1 || { bad "q3 train"; cat "$D/t3.log"; }
# shellcheck disable=SC2086
"$MTC" train $B $(echo "$LLAMA" | sed 's/ --qk-layernorm//') $MOE --ffn-hidden-size 128 --moe-shared-expert-intermediate-size 192 \
    --moe-router-pre-softmax --moe-layer-freq [0,1] --save "$D/dsk" >"$D/t5.log" 2>&1 || { bad "dsk train"; cat "$D/t5.log"; }
PROMPTS="the qu|over the lazy|2 times, ca"
PYT=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import torch' 2>/dev/null && PYT=$p && break
done
for m in q3moe q3pre q3; do
    H=$D/$m.hf
    "$MTC" export --load "$D/$m" --format safetensors --out "$H" >"$D/e.log" 2>&1 || { bad "$m export"; cat "$D/e.log"; continue; }
    case $m in
    q3moe) want='Qwen3MoeForCausalLM qwen3_moe 4 2 96 True [] 2' ;;
    q3pre) want='Qwen3MoeForCausalLM qwen3_moe 4 2 96 False [1] 2' ;;
    *) want='Qwen3ForCausalLM qwen3 None None None None None 2' ;;
    esac
    got=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))
print(c["architectures"][0], c["model_type"], c.get("num_experts"), c.get("num_experts_per_tok"), c.get("moe_intermediate_size"), c.get("norm_topk_prob"), c.get("mlp_only_layers"), c["num_key_value_heads"])' "$H/config.json" | tr -d ' ,')
    [ "$got" = "$(echo "$want" | tr -d ' ')" ] && ok "$m: config.json says $want" || bad "$m: config.json says $got, expected $want"
    n=$(python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
print(sum(1 for k, v in h.items() if k.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")) and v["shape"] == [16]))' "$H/model.safetensors")
    [ "$n" = 4 ] && ok "$m: q_norm / k_norm of shape [16] in both layers" || bad "$m: $n q/k norms of shape [16], expected 4"
    check_config "$m safetensors" "$H" "$D/$m" null "$PROMPTS"
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
    O=$D/$m.onnx
    "$MTC" export --load "$D/$m" --format onnx --out "$O" >"$D/e.log" 2>&1 || { bad "$m onnx export"; cat "$D/e.log"; continue; }
    check_onnx "$m onnx" "$O" "$D/$m" 14 "$PROMPTS"
    check_logits "$m onnx" "$O" "$D/$m"
done
refuse() { # NAME EXPECTED ARGS...: exit 2 naming the setting, nothing written
    n=$1 e=$2; shift 2
    "$MTC" export "$@" --out "$D/no" 2>"$D/err"
    [ $? -eq 2 ] && grep -q -- "$e" "$D/err" && [ ! -e "$D/no" ] && ok "$n refused: $(cat "$D/err")" ||
        { bad "$n not refused naming $e"; cat "$D/err"; }
}
# GGUF: llama.cpp's qwen3moe, qwen3 and deepseek, fp32 and fp16
npm_need "$CACHE" llama node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 --omit=optional
GP="the qu|over the lazy|2 times, "
files=""
for m in q3moe q3 dsk; do
    for dt in fp32 fp16; do
        "$MTC" export --load "$D/$m" --format gguf --dtype $dt --out "$D/$m.$dt.gguf" >"$D/e.log" 2>&1 ||
            { bad "$m gguf $dt export"; cat "$D/e.log"; }
        files="$files${files:+,}$D/$m.$dt.gguf"
    done
done
(IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_greedy.mjs" "$CACHE/llama/node_modules" 14 "$files" $GP) >"$D/l.out" 2>"$D/l.err" ||
    { bad "llama.cpp failed on a Qwen3 GGUF"; cat "$D/l.err"; }
for m in q3moe q3 dsk; do
    for dt in fp32 fp16; do
        echo "$GP" | tr '|' '\n' | while IFS= read -r p; do
            line=$(awk -F '\t' -v m="$D/$m.$dt.gguf" -v p="$p" '$1 == m && $2 == p' "$D/l.out")
            ids=$(printf '%s' "$line" | cut -f3)
            got=$(printf '%s' "$line" | cut -f4)
            want_ids=$("$REF" "$D/$m" ids "$p")
            want=$("$MTC" generate --load "$D/$m" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1 | json_text)
            [ -n "$ids" ] && [ "$ids" = "$want_ids" ] && [ "$got" = "$want" ] &&
                echo "ok   $m gguf $dt '$p': llama.cpp's ids and greedy text = mtc's: $got" ||
                echo "FAIL $m gguf $dt '$p': llama.cpp '$ids' $got, mtc '$want_ids' $want"
        done
    done
done >"$D/res"
cat "$D/res"
grep -q FAIL "$D/res" && fail=1
[ "$(grep -c '^ok' "$D/res")" = 18 ] || bad "18 llama.cpp comparisons expected"
grep -q "general.architecture" "$D/q3moe.fp32.gguf" && grep -q "qwen3moe" "$D/q3moe.fp32.gguf" && grep -q "attn_q_norm" "$D/q3.fp32.gguf" &&
    ok "the GGUFs name qwen3moe / qwen3 and hold attn_q_norm" || bad "the GGUFs' architecture or q/k norms"
grep -q "deepseek.expert_shared_count" "$D/dsk.fp32.gguf" && grep -q "ffn_down_shexp" "$D/dsk.fp32.gguf" &&
    ok "the shared-expert GGUF is llama.cpp's deepseek with ffn_*_shexp" || bad "the shared-expert GGUF's architecture"

# refusals, before anything is written
refuse "a GGUF with --moe-router-pre-softmax" "moe-router-pre-softmax" --load "$D/q3pre" --format gguf
refuse "Mixtral for a model with q/k norms" "q_norm" --load "$D/q3moe" --format safetensors --hf-architecture MixtralForCausalLM
refuse "Qwen2-MoE for a model with q/k norms" "q_norm" --load "$D/q3moe" --format onnx --hf-architecture Qwen2MoeForCausalLM
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MOE --moe-shared-expert-intermediate-size 64 --train-iters 2 --save "$D/shx" >"$D/t4.log" 2>&1 || { bad "shared train"; cat "$D/t4.log"; }
refuse "Qwen3-MoE with a shared expert" "moe-shared-expert-intermediate-size=64" --load "$D/shx" --format safetensors
refuse "a GGUF with q/k norms and a shared expert" "no q/k norms" --load "$D/shx" --format gguf
# shellcheck disable=SC2086
"$MTC" train $B $(echo "$LLAMA" | sed 's/ --qk-layernorm//') $MOE --moe-shared-expert-intermediate-size 96 --train-iters 2 --save "$D/shr" >"$D/t6.log" 2>&1 || { bad "shr train"; cat "$D/t6.log"; }
refuse "a shared-expert GGUF with a renormalising router" "moe-router-pre-softmax" --load "$D/shr" --format gguf
[ $HAVE_ONNX = 1 ] || echo "note: python3-onnx is not installed (scripts/deps.sh), onnx.checker not run"
exit $fail
