# tests/parity/dsv3_lib.sh - shared by dsv3_cli.sh and mtp_mpi.sh: the
# DeepSeek-V3-shaped model's flags (test_dsv3_fixture's shape on $TINY's
# sizes: 3 layers, the first dense) and a comparison of two --metrics files'
# lm_loss, grad_norm and mtp_1_loss per iteration (relative 2e-5).
DSV3="--num-layers 3 --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights --multi-latent-attention --q-lora-rank 12 --kv-lora-rank 10 --qk-head-dim 6 --qk-pos-emb-head-dim 4 --v-head-dim 5 --qk-layernorm --rotary-scaling-factor 4 --mscale-all-dim 0.7 --original-max-position-embeddings 8 --num-experts 8 --moe-ffn-hidden-size 16 --moe-router-topk 2 --moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.01 --moe-shared-expert-intermediate-size 24 --moe-layer-freq [0]*1+[1]*2"
DSV3_MTP="--mtp-num-layers 1 --mtp-loss-scaling-factor 0.3"
# same_dsv3 NAME SERIAL.jsonl LAYOUT.jsonl
same_dsv3() {
    if [ ! -s "$2" ] || [ ! -s "$3" ]; then bad "$1: missing metrics"; return; fi
    if paste -d' ' "$2" "$3" | awk '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":" || $i == "\"mtp_1_loss\":") { v[n++] = $(i + 1) + 0 } }
        { if (n != 6) bad = 1; for (k = 0; k < 3; k++) { a = v[k]; b = v[k + 3]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } ; lines++ }
        END { exit (bad || lines != 4) }'; then ok "$1: 4 iterations, loss, grad norm and MTP loss within 2e-5"
    else bad "$1"; paste -d'\n' "$2" "$3" | cut -c1-240; fi
}
