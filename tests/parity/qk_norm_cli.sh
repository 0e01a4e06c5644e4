#!/bin/sh
# tests/parity/qk_norm_cli.sh - --qk-layernorm (per-head norms of q and k,
# model/block.c) end to end on shm rank-threads: loss and grad norm within
# 2e-5 of the serial run under tp 2 (the norms' weights are replicated and
# their gradients summed over TP, without SP too), tp 2 + SP, tp 2 + SP x
# pp 2, cp 2 and dp 2 with the distributed optimizer, for LayerNorm and for
# RMSNorm with RoPE and grouped-query attention; full recomputation gives
# the same values; a checkpoint with the norms
# refuses to load without them; the Hugging Face and GGUF exports write Qwen3 (q_norm/k_norm:
# tests/ckpt/qwen3_export_cli.sh runs them in their clients)
# (no HF family here has them).
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"

run() { # NAME ARGS...
    name=$1
    shift
    "$MTC" train $TINY --qk-layernorm "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name exited $?"; tail -3 "$D/$name.log"; }
}
for fam in gpt llama; do
    extra=""
    [ $fam = llama ] && extra=$LLAMA
    run $fam.s $extra --save "$D/$fam.ck"
    run $fam.tp $extra --world-size 2 --tp 2
    same_losses "$fam qk-layernorm tp 2" "$D/$fam.s.jsonl" "$D/$fam.tp.jsonl"
    run $fam.sp $extra --world-size 4 --tp 2 --sequence-parallel --pp 2
    same_losses "$fam qk-layernorm tp 2 + SP x pp 2" "$D/$fam.s.jsonl" "$D/$fam.sp.jsonl"
    run $fam.cp $extra --world-size 2 --cp 2
    same_losses "$fam qk-layernorm cp 2" "$D/$fam.s.jsonl" "$D/$fam.cp.jsonl"
    run $fam.do $extra --world-size 4 --tp 2 --use-distributed-optimizer
    same_losses "$fam qk-layernorm tp 2 x dp 2 distopt" "$D/$fam.s.jsonl" "$D/$fam.do.jsonl"
done
# full recomputation rebuilds the norms' saved inputs bit for bit
run rec $LLAMA --recompute-granularity full --recompute-method block --recompute-num-layers 1
if [ -s "$D/rec.jsonl" ] && [ "$(cut -d, -f1-3 "$D/llama.s.jsonl")" = "$(cut -d, -f1-3 "$D/rec.jsonl")" ]; then
    ok "llama qk-layernorm with full recomputation: the same losses and norms"
else bad "recomputation changes the qk-layernorm run"; fi
# the norms change the model: without them the losses differ
"$MTC" train $TINY --metrics "$D/plain.jsonl" >/dev/null 2>&1
if [ "$(cut -d, -f2 "$D/plain.jsonl" | head -1)" != "$(cut -d, -f2 "$D/gpt.s.jsonl" | head -1)" ]; then
    ok "--qk-layernorm changes the loss"
else bad "--qk-layernorm has no effect"; fi
if grep -q 'attn.q_norm' "$D/gpt.ck"/*/* 2>/dev/null || grep -rqa 'attn.q_norm.weight' "$D/gpt.ck"; then
    ok "the checkpoint holds the q/k norms"
else bad "no q_norm in the checkpoint"; fi
"$MTC" train $TINY --load "$D/gpt.ck" --train-iters 6 >"$D/r.out" 2>"$D/r.err"; st=$?
if [ $st -eq 2 ] && grep -q "qk-layernorm" "$D/r.err"; then ok "load without --qk-layernorm refused: $(head -1 "$D/r.err")"
else bad "load without --qk-layernorm (exit $st)"; cat "$D/r.err"; fi
"$MTC" export --load "$D/llama.ck" --format safetensors --out "$D/hf" >"$D/e.out" 2>"$D/e.err"; st=$?
if [ $st -eq 0 ] && grep -q '"Qwen3ForCausalLM"' "$D/hf/config.json" && grep -q "self_attn.q_norm.weight" "$D/hf/model.safetensors" &&
    grep -q "self_attn.k_norm.weight" "$D/hf/model.safetensors"; then ok "HF export writes the q/k norms as Qwen3's q_norm/k_norm"
else bad "HF export of a qk-layernorm model (exit $st)"; cat "$D/e.err"; fi
"$MTC" export --load "$D/llama.ck" --format gguf --out "$D/m.gguf" >"$D/e.out" 2>"$D/e.err"; st=$?
if [ $st -eq 0 ] && grep -q "qwen3" "$D/m.gguf" && grep -q "attn_q_norm" "$D/m.gguf"; then ok "GGUF export writes llama.cpp's qwen3 with attn_q_norm"
else bad "GGUF export of a qk-layernorm model (exit $st)"; cat "$D/e.err"; fi
exit $fail
