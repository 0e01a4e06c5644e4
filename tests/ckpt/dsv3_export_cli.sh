#!/bin/sh
# tests/ckpt/dsv3_export_cli.sh - a tiny DeepSeek-V3-shaped model (multi-latent
# attention with q and kv latents and their norms, YaRN; a dense first layer
# then MoE: 4 experts top-2 in 2 groups of which 1 is kept, sigmoid scores
# with the expert bias, a shared expert, routed scaling 2.5; one MTP depth)
# trained at tp 2 x ep 2 with sequence parallelism, exported from that
# layout:
#   safetensors  DeepseekV3ForCausalLM: config.json's fields as the class
#                reads them, the MTP depth at model.layers.2 as DeepSeek stores
#                it; transformers.js' AutoConfig / AutoTokenizer read the folder
#                without a warning; tests/reference/hf_reader.py (the class's
#                forward on Hugging Face's conventions, PyTorch) gives the
#                serial model's logits (tests/ckpt/logits_ref.c) to 1e-4;
#                `mtc import` gives the same logits, generates the same text and
#                exports the same bytes; re-saved from a serial run the export
#                is byte for byte the same
#   gguf         llama.cpp's deepseek2 (fp32, fp16) in llama.cpp (npm
#                node-llama-cpp): its ids and greedy continuation = mtc
#                generate's, its logits after each prompt = mtc's (fp32 1e-3,
#                fp16 1e-2: greedy text alone does not see a softmax scale off
#                by 2%)
#   onnx         (fp32, fp16) the main model: multi-latent attention with
#                caches of heads padded to max(dqk + dpe, dv), the grouped
#                sigmoid router; onnx.checker; transformers.js' pipeline
#                continues as mtc generate, onnxruntime-node's logits = mtc's
# and a dense MLA model without q compression on plain RoPE (q_proj /
# attn_q; safetensors, GGUF, ONNX), a Llama model with MTP (ONNX and GGUF: the main model, noted; the
# safetensors folder refused naming --mtp-num-layers), a Qwen2-MoE-form
# model (shared expert, every layer MoE, q/k/v biases) as llama.cpp's
# qwen2moe with its shared-expert gate, and the settings the classes cannot
# express refused by name before anything is written.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$MTC_SOURCE_DIR/tests/ckpt/onnx_lib.sh"
npm_need "$CACHE" llama node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 --omit=optional
LMODS=$CACHE/llama/node_modules
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times"
    i=$((i + 1))
done >"$D/text.txt"
B="--data-path $D/text.txt --tokenizer-type char --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 80 --log-interval 40 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights --disable-bias-linear"
MLA="--multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --qk-layernorm --rope-type yarn --rotary-scaling-factor 4 --original-max-position-embeddings 16 --mscale 1 --mscale-all-dim 1"
MOE="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 48 --moe-layer-freq [0,1]"
PAR="--world-size 4 --tp 2 --sequence-parallel --expert-model-parallel-size 2"
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MLA $MOE --mtp-num-layers 1 $PAR --save "$D/ds" >"$D/t1.log" 2>&1 || { bad "dsv3 train"; cat "$D/t1.log"; }
grep -q "mtp_1 loss" "$D/t1.log" || bad "the training did not report the MTP loss"
PROMPTS="the qu|over the lazy|jumps ov"

# ---- safetensors ----
H=$D/ds.hf
"$MTC" export --load "$D/ds" --format safetensors --out "$H" >"$D/e.log" 2>&1 || { bad "dsv3 export"; cat "$D/e.log"; }
got=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))
r = c["rope_scaling"]
print(c["architectures"][0], c["model_type"], c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
      c["n_routed_experts"], c["num_experts_per_tok"], c["n_group"], c["topk_group"], c["n_shared_experts"], c["moe_intermediate_size"],
      c["first_k_dense_replace"], c["routed_scaling_factor"], c["norm_topk_prob"], c["scoring_func"], c["num_nextn_predict_layers"],
      r["type"], r["factor"], r["original_max_position_embeddings"], r["mscale"], r["mscale_all_dim"])' "$H/config.json")
want="DeepseekV3ForCausalLM deepseek_v3 24 16 16 8 16 4 2 2 1 1 48 1 2.5 True sigmoid 1 yarn 4 16 1 1"
[ "$got" = "$want" ] && ok "config.json: $want" || bad "config.json: '$got', expected '$want'"
names=$(python3 -c 'import json, struct, sys
d = open(sys.argv[1], "rb").read(); h = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])
need = ["model.layers.0.self_attn.q_a_proj.weight", "model.layers.0.self_attn.q_a_layernorm.weight", "model.layers.0.self_attn.q_b_proj.weight",
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "model.layers.0.self_attn.kv_a_layernorm.weight", "model.layers.0.self_attn.kv_b_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
        "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.1.mlp.shared_experts.up_proj.weight",
        "model.layers.2.enorm.weight", "model.layers.2.hnorm.weight", "model.layers.2.eh_proj.weight", "model.layers.2.shared_head.norm.weight",
        "model.layers.2.shared_head.head.weight", "model.layers.2.embed_tokens.weight", "model.layers.2.mlp.experts.0.gate_proj.weight"]
print(" ".join(n for n in need if n not in h) or "all", h["model.layers.2.eh_proj.weight"]["shape"], h["model.layers.0.self_attn.kv_b_proj.weight"]["shape"])' "$H/model.safetensors")
[ "$names" = "all [64, 128] [128, 16]" ] && ok "model.safetensors holds the MLA, MoE and MTP tensors by DeepSeek-V3's names" ||
    bad "model.safetensors: missing or misshapen: $names"
check_config "dsv3 safetensors" "$H" "$D/ds" null "$PROMPTS"
"$REF" "$D/ds" logits "$IDS" | tr ' ' '\n' >"$D/ref.flat"
PYT=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import torch' 2>/dev/null && PYT=$p && break
done
if [ -n "$PYT" ]; then
    "$PYT" "$MTC_SOURCE_DIR/tests/reference/hf_reader.py" "$H" ds $IDS | tail -n 1 | tr ' ' '\n' >"$D/py.flat"
    compare_rows "the PyTorch DeepseekV3ForCausalLM reader's logits of the folder" "$D/ref.flat" "$D/py.flat"
else
    echo "note: no PyTorch (python3-torch), tests/reference/hf_reader.py not run"
fi
"$MTC" import --load "$H" --save "$D/ds.imp" >"$D/i.log" 2>&1 || { bad "dsv3 import"; cat "$D/i.log"; }
"$REF" "$D/ds.imp" logits "$IDS" | tr ' ' '\n' >"$D/imp.flat"
cmp -s "$D/ref.flat" "$D/imp.flat" && ok "the imported model's logits = the trained model's, exactly" || bad "the imported model's logits differ"
"$MTC" export --load "$D/ds.imp" --format safetensors --out "$D/ds.hf2" >"$D/e.log" 2>&1 &&
    cmp -s "$H/model.safetensors" "$D/ds.hf2/model.safetensors" && ok "import then export gives the same model.safetensors (MTP depth included)" ||
    bad "the re-exported model.safetensors differs"
for p in "the qu" "over the lazy"; do
    a=$("$MTC" generate --load "$D/ds" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1)
    b=$("$MTC" generate --load "$D/ds.imp" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "the imported model generates as the trained one: $a" || bad "imported '$b' vs trained '$a'"
done
# a folder saved by transformers (which drops the MTP layers at load) keeps num_nextn_predict_layers
python3 - "$H" "$D/ds.nomtp" <<'EOF'
import json, os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
d = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n]); base = 8 + n
keep = {k: v for k, v in h.items() if k == "__metadata__" or not k.startswith("model.layers.2.")}
out, data, at = {}, b"", 0
for k, v in keep.items():
    if k == "__metadata__": out[k] = v; continue
    b0, b1 = v["data_offsets"]; blob = d[base + b0:base + b1]
    out[k] = dict(v, data_offsets=[at, at + len(blob)]); data += blob; at += len(blob)
hdr = json.dumps(out).encode(); hdr += b" " * (-len(hdr) % 8)
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
EOF
"$MTC" import --load "$D/ds.nomtp" --save "$D/ds.nomtp.imp" >"$D/i.log" 2>&1 &&
    "$REF" "$D/ds.nomtp.imp" logits "$IDS" | tr ' ' '\n' | cmp -s - "$D/ref.flat" &&
    "$MTC" export --load "$D/ds.nomtp.imp" --format safetensors --out "$D/ds.nomtp.hf" >"$D/e.log" 2>&1 &&
    [ "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_nextn_predict_layers"])' "$D/ds.nomtp.hf/config.json")" = 0 ] &&
    ok "a folder without the MTP tensors imports as the main model alone (same logits, re-exported without MTP)" ||
    { bad "the folder without MTP tensors"; cat "$D/i.log" "$D/e.log"; }

# the same weights re-saved (one step at lr 0) from a serial run and from tp 2 x ep 2
# (SP): the checkpoint reader gathers the TP shards and the experts, so the two
# exports are the same bytes (that step still moves the expert bias, in both alike)
ONE=$(echo "$B" | sed 's/--lr 3e-3 --train-iters 80/--lr 0 --min-lr 0 --override-opt-param-scheduler --train-iters 81/')
for l in serial par; do
    extra=""
    [ $l = par ] && extra=$PAR
    # shellcheck disable=SC2086
    "$MTC" train $ONE $LLAMA $MLA $MOE --mtp-num-layers 1 $extra --load "$D/ds" --save "$D/ds.$l" >"$D/t2.log" 2>&1 ||
        { bad "$l re-save"; cat "$D/t2.log"; }
    "$MTC" export --load "$D/ds.$l" --format safetensors --out "$D/ds.$l.hf" >"$D/e.log" 2>&1 || { bad "$l export"; cat "$D/e.log"; }
done
a=$D/ds.serial.hf/model.safetensors
[ -s "$a" ] && cmp -s "$a" "$D/ds.par.hf/model.safetensors" &&
    ok "exported from tp 2 x ep 2 (SP) = from the serial re-save, byte for byte ($(wc -c <"$a") bytes)" ||
    bad "the tp 2 x ep 2 export differs from the serial one"
python3 - "$H/model.safetensors" "$a" <<'EOF2' && ok "the re-save changed the expert bias only" || bad "the lr-0 step changed more than the expert bias"
import json, struct, sys
def rd(p):
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
    return {k: d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = rd(sys.argv[1]), rd(sys.argv[2])
diff = [k for k in a if a[k] != b[k]]
sys.exit(not (a.keys() == b.keys() and all(k.endswith("e_score_correction_bias") for k in diff)))
EOF2

# ---- GGUF: llama.cpp's deepseek2 ----
# logits_gate NAME GGUF CKPT TOL PROMPT: llama.cpp's logits after PROMPT = mtc's last row
logits_gate() {
    node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_logits.mjs" "$LMODS" "$2" "$5" >"$D/ll.out" 2>"$D/ll.err" ||
        { bad "$1: llama.cpp failed"; cat "$D/ll.err"; return; }
    cut -f3 "$D/ll.out" | tr ' ' '\n' >"$D/a.flat"
    "$REF" "$3" logits "$(cut -f2 "$D/ll.out")" | tr ' ' '\n' | tail -n "$(wc -l <"$D/a.flat")" >"$D/b.flat"
    r=$(paste "$D/a.flat" "$D/b.flat" | awk -v tol="$4" '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "%.2g over %d", m, NR; exit !(NR > 10 && m <= tol) }') &&
        ok "$1 '$5': llama.cpp's logits = mtc's (max |diff| $r)" || bad "$1 '$5': llama.cpp's logits differ from mtc's: $r"
}
# greedy_gate NAME CKPT GGUF...: llama.cpp's ids and greedy continuations = mtc's
greedy_gate() {
    n=$1 ck=$2; shift 2
    models=$(echo "$@" | tr ' ' ',')
    (IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/llama_cpp_greedy.mjs" "$LMODS" 14 "$models" $PROMPTS) >"$D/l.out" 2>"$D/l.err" ||
        { bad "$n: llama.cpp failed"; cat "$D/l.err"; return; }
    for g in "$@"; do
        echo "$PROMPTS" | tr '|' '\n' | while IFS= read -r p; do
            line=$(awk -F '\t' -v m="$g" -v p="$p" '$1 == m && $2 == p' "$D/l.out")
            ids=$(printf '%s' "$line" | cut -f3)
            got=$(printf '%s' "$line" | cut -f4)
            want_ids=$("$REF" "$ck" ids "$p")
            want=$("$MTC" generate --load "$ck" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1 | json_text)
            [ -n "$ids" ] && [ "$ids" = "$want_ids" ] && [ "$got" = "$want" ] &&
                echo "ok   $n $(basename "$g") '$p': llama.cpp's ids and greedy text = mtc's: $got" ||
                echo "FAIL $n $(basename "$g") '$p': llama.cpp '$ids' $got, mtc '$want_ids' $want"
        done
    done >"$D/res"
    cat "$D/res"
    grep -q FAIL "$D/res" && fail=1
    [ "$(grep -c '^ok' "$D/res")" = $(($# * 3)) ] || bad "$n: $(($# * 3)) llama.cpp comparisons expected"
}
for dt in fp32 fp16; do
    "$MTC" export --load "$D/ds" --format gguf --dtype $dt --out "$D/ds.$dt.gguf" >"$D/e.log" 2>&1 ||
        { bad "dsv3 gguf $dt export"; cat "$D/e.log"; }
    grep -q "MTP depth(s) are left out" "$D/e.log" || bad "the GGUF export does not say the MTP depth is left out"
done
greedy_gate "dsv3 gguf" "$D/ds" "$D/ds.fp32.gguf" "$D/ds.fp16.gguf"
for p in "over the lazy" "jumps ov"; do
    logits_gate "dsv3 gguf fp32" "$D/ds.fp32.gguf" "$D/ds" 1e-3 "$p"
    logits_gate "dsv3 gguf fp16" "$D/ds.fp16.gguf" "$D/ds" 1e-2 "$p"
done

refuse() { # NAME EXPECTED ARGS...: exit 2 naming the setting, nothing written
    n=$1 e=$2; shift 2
    "$MTC" export "$@" --out "$D/no" 2>"$D/err"
    [ $? -eq 2 ] && grep -q -- "$e" "$D/err" && [ ! -e "$D/no" ] && ok "$n refused: $(cat "$D/err")" ||
        { bad "$n not refused naming $e"; cat "$D/err"; }
}

# ---- ONNX: MLA in the graph, the main model ----
for dt in fp32 fp16; do
    O=$D/ds.onnx.$dt
    "$MTC" export --load "$D/ds" --format onnx --dtype $dt --out "$O" >"$D/e.log" 2>&1 || { bad "dsv3 onnx $dt export"; cat "$D/e.log"; continue; }
    check_onnx "dsv3 onnx $dt" "$O" "$D/ds" 14 "$PROMPTS"
done
check_logits "dsv3 onnx fp32" "$D/ds.onnx.fp32" "$D/ds"

# ---- a dense MLA model, no q compression, plain RoPE ----
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA --multi-latent-attention --q-lora-rank 0 --kv-lora-rank 16 --qk-head-dim 12 --qk-pos-emb-head-dim 8 \
    --v-head-dim 24 --qk-layernorm --rope-type rope --world-size 2 --tp 2 --save "$D/dm" >"$D/t8.log" 2>&1 || { bad "dense MLA train"; cat "$D/t8.log"; }
"$MTC" export --load "$D/dm" --format safetensors --out "$D/dm.hf" >"$D/e.log" 2>&1 || { bad "dense MLA export"; cat "$D/e.log"; }
got=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["q_lora_rank"], c["rope_scaling"], c["first_k_dense_replace"])' "$D/dm.hf/config.json")
[ "$got" = "None None 2" ] && ok "dense MLA config.json: q_lora_rank null, rope_scaling null, first_k_dense_replace 2" || bad "dense MLA config.json: $got"
if [ -n "$PYT" ]; then
    "$REF" "$D/dm" logits "$IDS" | tr ' ' '\n' >"$D/ref2.flat"
    "$PYT" "$MTC_SOURCE_DIR/tests/reference/hf_reader.py" "$D/dm.hf" dm $IDS | tail -n 1 | tr ' ' '\n' >"$D/py2.flat"
    compare_rows "dense MLA: the PyTorch reader's logits" "$D/ref2.flat" "$D/py2.flat"
fi
"$MTC" export --load "$D/dm" --format gguf --out "$D/dm.gguf" >"$D/e.log" 2>&1 || { bad "dense MLA gguf"; cat "$D/e.log"; }
greedy_gate "dense MLA gguf" "$D/dm" "$D/dm.gguf"
logits_gate "dense MLA gguf" "$D/dm.gguf" "$D/dm" 1e-3 "over the lazy"
"$MTC" export --load "$D/dm" --format onnx --out "$D/dm.onnx" >"$D/e.log" 2>&1 || { bad "dense MLA onnx"; cat "$D/e.log"; }
check_logits "dense MLA onnx" "$D/dm.onnx" "$D/dm"

# ---- a Llama model with MTP: ONNX and GGUF hold the main model ----
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA --group-query-attention --num-query-groups 2 --mtp-num-layers 1 --world-size 2 --tp 2 \
    --save "$D/lm" >"$D/t3.log" 2>&1 || { bad "llama mtp train"; cat "$D/t3.log"; }
"$MTC" export --load "$D/lm" --format onnx --out "$D/lm.onnx" >"$D/e.log" 2>&1 || { bad "llama mtp onnx export"; cat "$D/e.log"; }
grep -q "MTP depth(s) are left out of the onnx export" "$D/e.log" && ok "the ONNX export says the MTP depth is left out" || bad "no MTP note"
check_onnx "llama+mtp onnx" "$D/lm.onnx" "$D/lm" 14 "$PROMPTS"
check_logits "llama+mtp onnx" "$D/lm.onnx" "$D/lm"
"$MTC" export --load "$D/lm" --format gguf --out "$D/lm.gguf" >"$D/e.log" 2>&1 || { bad "llama mtp gguf export"; cat "$D/e.log"; }
greedy_gate "llama+mtp gguf" "$D/lm" "$D/lm.gguf"
refuse "a Llama model's MTP layers as safetensors" "mtp-num-layers" --load "$D/lm" --format safetensors

# ---- a Qwen2-MoE-form model as llama.cpp's qwen2moe ----
QWEN="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 --moe-shared-expert-intermediate-size 64 --moe-router-pre-softmax --add-qkv-bias --world-size 2 --expert-model-parallel-size 2"
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA --group-query-attention --num-query-groups 2 $QWEN --save "$D/q2" >"$D/t4.log" 2>&1 ||
    { bad "qwen2-moe train"; cat "$D/t4.log"; }
for dt in fp32 fp16; do
    "$MTC" export --load "$D/q2" --format gguf --dtype $dt --out "$D/q2.$dt.gguf" >"$D/e.log" 2>&1 ||
        { bad "qwen2-moe gguf $dt export"; cat "$D/e.log"; }
done
python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); sys.exit(not (b"qwen2moe" in d and b"ffn_gate_inp_shexp" in d and b"attn_q.bias" in d))' "$D/q2.fp32.gguf" &&
    ok "the Qwen2-MoE-form GGUF is llama.cpp's qwen2moe with the shared-expert gate and q/k/v biases" || bad "not a qwen2moe GGUF"
greedy_gate "qwen2moe gguf" "$D/q2" "$D/q2.fp32.gguf" "$D/q2.fp16.gguf"
logits_gate "qwen2moe gguf fp32" "$D/q2.fp32.gguf" "$D/q2" 1e-3 "over the lazy"
logits_gate "qwen2moe gguf fp16" "$D/q2.fp16.gguf" "$D/q2" 1e-2 "over the lazy"

# ---- what the classes cannot express, refused by name ----
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $(echo "$MLA" | sed 's/--mscale 1 /--mscale 0.5 /') --train-iters 2 --save "$D/ms" >"$D/t5.log" 2>&1 || { bad "mscale train"; cat "$D/t5.log"; }
refuse "a YaRN concentration factor in GGUF" "mscale=0.5" --load "$D/ms" --format gguf
"$MTC" export --load "$D/ms" --format safetensors --out "$D/ms.hf" >"$D/e.log" 2>&1 &&
    grep -q '"attention_factor"' "$D/ms.hf/config.json" && ok "the same model exports to safetensors with rope_scaling.attention_factor" ||
    { bad "mscale 0.5 safetensors"; cat "$D/e.log"; }
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $(echo "$MLA" | sed 's/--qk-layernorm //') --train-iters 2 --save "$D/nonorm" >"$D/t6.log" 2>&1 || { bad "no-norm train"; cat "$D/t6.log"; }
refuse "MLA without latent norms" "qk-layernorm" --load "$D/nonorm" --format safetensors
refuse "MLA without latent norms in GGUF" "qk-layernorm" --load "$D/nonorm" --format gguf
# shellcheck disable=SC2086
"$MTC" train $B $LLAMA $MLA --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --train-iters 2 --save "$D/soft" >"$D/t7.log" 2>&1 ||
    { bad "softmax MLA train"; cat "$D/t7.log"; }
refuse "an MLA model with a softmax router" "moe-router-score-function=softmax" --load "$D/soft" --format safetensors
exit $fail
