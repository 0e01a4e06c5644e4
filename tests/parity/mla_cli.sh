#!/bin/sh
# tests/parity/mla_cli.sh - --multi-latent-attention (model/mla.c) with
# YaRN and the latent norms end to end on shm rank-threads: loss and grad
# norm within 2e-5 of the serial run under tp 2 (the shared key position
# head's gradient summed over TP without SP), tp 2 + SP, pp 2, cp 2 with
# p2p, all_gather, a2a and cp 4 with a2a+p2p, dp 2 with the distributed optimizer and tp 2 + SP x pp 2
# x dp 2; without --q-lora-rank too; full and selective (mla_up_proj)
# recomputation give exactly the serial values; a checkpoint saved at tp 2
# continues at tp 1 as the uninterrupted run; Megatron's refusals.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
MLA="--multi-latent-attention --q-lora-rank 12 --kv-lora-rank 10 --qk-head-dim 6 --qk-pos-emb-head-dim 4 --v-head-dim 5 --qk-layernorm --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --untie-embeddings-and-output-weights --rotary-scaling-factor 4 --mscale 1 --mscale-all-dim 0.7 --original-max-position-embeddings 8"

run() { # NAME ARGS...
    rm -f "$D/$1.jsonl"
    name=$1
    shift
    "$MTC" train $TINY $MLA "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name exited $?"; tail -3 "$D/$name.log"; }
}
run s
run tp --world-size 2 --tp 2
same_losses "mla tp 2" "$D/s.jsonl" "$D/tp.jsonl"
run sp --world-size 2 --tp 2 --sequence-parallel
same_losses "mla tp 2 + SP" "$D/s.jsonl" "$D/sp.jsonl"
run pp --world-size 2 --pp 2
same_losses "mla pp 2" "$D/s.jsonl" "$D/pp.jsonl"
for t in p2p all_gather a2a; do
    run cp.$t --world-size 2 --cp 2 --cp-comm-type $t
    same_losses "mla cp 2 ($t)" "$D/s.jsonl" "$D/cp.$t.jsonl"
done
run cp.h --world-size 4 --cp 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2
same_losses "mla cp 4 (a2a+p2p 2x2)" "$D/s.jsonl" "$D/cp.h.jsonl"
run do --world-size 2 --use-distributed-optimizer
same_losses "mla dp 2 distributed optimizer" "$D/s.jsonl" "$D/do.jsonl"
run big --world-size 8 --tp 2 --sequence-parallel --pp 2 --use-distributed-optimizer
same_losses "mla tp 2 + SP x pp 2 x dp 2 distopt" "$D/s.jsonl" "$D/big.jsonl"
# bf16: the MLA layers' GEMMs in bf16 (oneDNN) under tp 2 + SP as serially
run bf --bf16
run bf.sp --bf16 --world-size 2 --tp 2 --sequence-parallel
# (bf16 roundings of differently split sums: the losses agree to bf16's precision, not 2e-5)
if [ -s "$D/bf.sp.jsonl" ] && paste -d' ' "$D/s.jsonl" "$D/bf.jsonl" "$D/bf.sp.jsonl" | awk '
    { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":") v[n++] = $(i + 1) + 0 }
    { for (k = 1; k < 3; k++) { d = v[k] - v[0]; if (d < 0) d = -d; if (d > 5e-3 * v[0]) bad = 1 }; lines++ }
    END { exit (bad || lines != 4) }'; then ok "mla --bf16 serial and tp 2 + SP: losses within 5e-3 of fp32"
else bad "mla --bf16"; cat "$D/bf.jsonl" "$D/bf.sp.jsonl"; fi
# the same model without query compression, plain RoPE frequencies, LayerNorm latents
NOQ="--rope-type rope"
MLA_SAVE=$MLA
MLA=$(echo "$MLA_SAVE" | sed 's/--q-lora-rank 12 //; s/RMSNorm/LayerNorm/')
run nq.s $NOQ
run nq.sp $NOQ --world-size 2 --tp 2 --sequence-parallel
same_losses "mla without q-lora-rank tp 2 + SP (LayerNorm latents, rope)" "$D/nq.s.jsonl" "$D/nq.sp.jsonl"
run nq.tp $NOQ --world-size 2 --tp 2
same_losses "mla without q-lora-rank tp 2" "$D/nq.s.jsonl" "$D/nq.tp.jsonl"
MLA=$MLA_SAVE
# recomputation: exactly the serial run
for rc in "--recompute-granularity full --recompute-method block --recompute-num-layers 2" \
    "--recompute-granularity selective --recompute-modules mla_up_proj"; do
    run rec $rc
    if [ -s "$D/rec.jsonl" ] && [ "$(cut -d, -f1-3 "$D/s.jsonl")" = "$(cut -d, -f1-3 "$D/rec.jsonl")" ]; then
        ok "mla $rc: bit-identical losses and norms"
    else bad "mla $rc changes the run"; fi
done
run sprec --world-size 2 --tp 2 --sequence-parallel --recompute-granularity selective --recompute-modules mla_up_proj
if [ "$(cut -d, -f1-3 "$D/sp.jsonl")" = "$(cut -d, -f1-3 "$D/sprec.jsonl")" ]; then ok "mla_up_proj under tp 2 + SP: bit-identical"
else bad "mla_up_proj under tp 2 + SP differs"; fi
# resharding: 2 iterations at tp 2, saved, then 2 more at tp 1 = the serial 4
run half --world-size 2 --tp 2 --sequence-parallel --train-iters 2 --lr-decay-iters 4 --save "$D/ck" --save-interval 2
"$MTC" train $TINY $MLA --load "$D/ck" --metrics "$D/rest.jsonl" >"$D/rest.log" 2>&1 || { bad "resume at tp 1 exited"; tail -3 "$D/rest.log"; }
tail -2 "$D/s.jsonl" >"$D/s34.jsonl"
if [ -s "$D/rest.jsonl" ] && paste -d' ' "$D/s34.jsonl" "$D/rest.jsonl" | awk '
    { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":") v[n++] = $(i + 1) + 0 }
    { d = v[0] - v[1]; if (d < 0) d = -d; if (d > 2e-5 * v[0]) bad = 1; lines++ }
    END { exit (bad || lines != 2) }'; then ok "mla checkpoint tp 2 + SP -> tp 1 continues as the serial run"
else bad "mla reshard tp 2 -> tp 1"; cat "$D/s34.jsonl" "$D/rest.jsonl"; fi
NOMLA=$(echo "$MLA" | sed 's/--multi-latent-attention //')
"$MTC" train $TINY $NOMLA --load "$D/ck" --train-iters 6 >"$D/r.out" 2>"$D/r.err"; st=$?
if [ $st -eq 2 ] && grep -q "multi-latent-attention" "$D/r.err"; then ok "load without --multi-latent-attention refused: $(head -1 "$D/r.err")"
else bad "load without --multi-latent-attention (exit $st)"; cat "$D/r.err"; fi
# Megatron's refusals
refuse "MLA with GQA" "Group query attention is mutually exclusive with multi latent attention" $MLA --group-query-attention --num-query-groups 2
refuse "MLA with interleaved rotary" "rotary_interleaved does not work with multi_latent_attention" $MLA --rotary-interleaved
refuse "yarn without MLA" 'Common attention only support rope_type="rope", but got yarn' --rope-type yarn
refuse "mla_up_proj without MLA" "mla_up_proj in recompute_modules is only supported with multi_latent_attention" --recompute-granularity selective --recompute-modules mla_up_proj
# export of MLA is tests/ckpt/dsv3_export_cli.sh's; here only that the
# checkpoint of this layout goes out as DeepSeek-V3's class
"$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" >"$D/e.out" 2>"$D/e.err"; st=$?
if [ $st -eq 0 ] && [ -s "$D/hf/model.safetensors" ] && grep -q DeepseekV3ForCausalLM "$D/hf/config.json"; then ok "HF export of the tp 2 + SP MLA checkpoint: DeepseekV3ForCausalLM"
else bad "HF export of an MLA model (exit $st)"; cat "$D/e.err"; fi
refuse "odd qk-pos-emb-head-dim" "qk-pos-emb-head-dim=5" $MLA --qk-pos-emb-head-dim 5
exit $fail
