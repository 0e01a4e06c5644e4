/* model/mla.h - multi-latent attention (Megatron core_v0.18's
 * MLASelfAttention, transformer/multi_latent_attention.py, with the TE layer
 * spec's linear types), composed from the TP linears (tp/layers.h), the
 * tiled attention (nn/, cp/) and the MLA rotation (nn/yarn.h):
 *
 *   q:  in ─q_down (dup)─> qc ─norm─> ─q_up (col)─> q_r     (or in ─q_proj (col)─> q_r)
 *   kv: in ─kv_down (dup)─> [kvc | k_pe] ; kvc ─norm─> ─kv_up (col)─> [k_nope_r | v_r]
 *   q_r = per head [q_nope (dqk) | q_pe (dpe)], q_pe rotated; k_pe rotated once and
 *   shared by every head: key head h = [k_nope_h | k_pe]
 *   attention with scale mscale^2 / sqrt(dqk + dpe) ─row(proj)─> out
 *
 * "dup" is TE's parallel_mode='duplicated': every TP rank holds the whole
 * weight and applies it to its own rows (its sequence shard under SP, the
 * whole replicated input otherwise); the latents are then gathered by the
 * column-parallel up projections' SP all-gather, and k_pe by its own
 * all-gather. Backward: the up projections' input gradients come back
 * complete (all-reduce, or reduce-scatter under SP); the shared k_pe's
 * gradient, a sum over the rank's heads only, is summed over TP here
 * (reduce-scatter under SP, all-reduce without: Megatron core_v0.18 misses
 * the latter, NVIDIA/Megatron-LM#1699 / #6839), so the duplicated weights'
 * gradients are complete without SP and partial sums of the rank's rows
 * under SP (the family table's sp_partial rule: summed over TP then).
 * The latent norms exist with --qk-layernorm only (Megatron fuses them
 * into the up projections' TELayerNormColumnParallelLinear; IdentityOp
 * otherwise), RMSNorm or LayerNorm after --normalization.
 *
 * The attention runs on heads padded with zeros to HSa = max(dqk + dpe,
 * dv) channels (the scores and outputs are unchanged), so the tiled and
 * context-parallel kernels serve it unchanged; proj reads the first dv
 * channels of each head. Relies on tp/, cp/, nn/; allocates nothing. */
#ifndef MTC_MODEL_MLA_H
#define MTC_MODEL_MLA_H

#include "model/block.h"
#include "nn/yarn.h"

/* The flags (Megatron's names; model/mla_cli.h reads them). */
typedef struct {
    int enabled;             /* --multi-latent-attention */
    int q_lora_rank;         /* --q-lora-rank; 0: no q compression (linear_q_proj) */
    int kv_lora_rank;        /* --kv-lora-rank (32) */
    int qk_head_dim;         /* --qk-head-dim (128) */
    int qk_pos_emb_head_dim; /* --qk-pos-emb-head-dim (64) */
    int v_head_dim;          /* --v-head-dim (128) */
    int latent_norm;         /* --qk-layernorm: RMSNorm / LayerNorm of both latents */
    int rope_yarn;           /* --rope-type yarn (MLA's default) or rope */
    float rotary_scaling_factor, mscale, mscale_all_dim, beta_fast, beta_slow;
    int original_max_position_embeddings;
} mtc_mla_config;

/* The ranges of c's fields (one line naming the flag and the fix). */
mtc_result_t model_mla_validate(const mtc_mla_config *c);
/* The rotary parameters of c (nn/yarn.h). */
nn_yarn_params model_mla_yarn_params(const mtc_mla_config *c, float rotary_base);
/* Megatron's softmax_scale: mscale(s, mscale_all_dim)^2 / sqrt(dqk + dpe). */
float model_mla_softmax_scale(const mtc_mla_config *c);

/* One layer's MLA parameters (this rank's shards; NULL where absent) or
 * their gradients (+=). Shapes, Dq = dqk + dpe, Dkv = dqk + dv:
 *   q (NH_tp*Dq, C)    qd (QL, C)   qn_w, qn_b (QL)   qu (NH_tp*Dq, QL)
 *   kvd (KL + dpe, C)  kvn_w, kvn_b (KL)   kvu (NH_tp*Dkv, KL)
 *   proj (C, NH_tp*dv)  proj_b (C) */
typedef struct {
    float *q, *qd, *qn_w, *qn_b, *qu, *kvd, *kvn_w, *kvn_b, *kvu, *proj, *proj_b;
} model_mla_params;

/* What forward keeps for backward (per layer). */
typedef struct {
    float *qc;     /* (B, T_loc, QL) q latent before its norm (q_lora only) */
    float *kvc;    /* (B, T_loc, KL) kv latent before its norm */
    float *kpe;    /* (B, T_loc, dpe) k_pe as kv_down made it (not rotated) */
    float *qstat;  /* (2, B*T_loc) the q norm's mean | rstd (latent_norm) */
    float *kvstat; /* (2, B*T_loc) the kv norm's */
    float *qkv;    /* (B, T, 3 NH_tp HSa) [q | k | v] heads padded to HSa, rotated;
                      --recompute-modules mla_up_proj: one buffer for all layers,
                      refilled in backward */
    float *lse;    /* (B, NH_tp, T) */
    float *atty;   /* (B, T, NH_tp HSa) attention output, padded heads */
} model_mla_acts;

typedef struct {
    const mtc_mla_config *cfg;
    int rms; /* the latent norms: RMSNorm, else LayerNorm */
    float eps;
    const nn_yarn_table *rope; /* the MLA rotation's table */
    int recompute_up;          /* qkv is shared: backward rebuilds it */
} model_mla_opts;

/* Floats of one layer's model_mla_acts (without qkv when recompute_up) and
 * their binding to base. T_loc = T/tp under SP. */
size_t model_mla_acts_floats(const model_mla_opts *o, int tp, int B, int T, int T_loc, int NH);
void model_mla_acts_bind(model_mla_acts *a, float *base, const model_mla_opts *o, int tp, int B,
                         int T, int T_loc, int NH);
/* Floats of the shared qkv buffer (recompute_up) and of scratch. */
size_t model_mla_qkv_floats(const model_mla_opts *o, int tp, int B, int T, int NH);
size_t model_mla_scratch_floats(const tp_ctx *tp, int B, int T, const model_block_dims *d,
                                const model_mla_opts *o);
/* The same without the linear layers' and CP's scratch (mtc plan adds its own). */
size_t model_mla_scratch_body(int tp, int sp, int B, int T, int C, int NH, const model_mla_opts *o);
/* Multiply-adds per token of one MLA block at sequence length T, Megatron's
 * training.py count: the projections (the +1s: the latent norms) and the
 * causal core attention (NH (Dq + dv) / 2 per key). */
double model_mla_token_macs(const mtc_mla_config *c, int C, int NH, int T);
/* The widest row any of the layer's GEMM operands has (bf16 scratch). */
size_t model_mla_widest(const model_mla_opts *o, int tp, int C, int NH);
/* --bf16: prepare the layer's GEMM shapes (tp_linear_bf16_prepare). */
mtc_result_t model_mla_bf16_prepare(const tp_ctx *tp, const model_mla_opts *o, int B, int T,
                                    int T_loc, int C, int NH, int proj_bias);

/* out (B, T_loc, C) = proj(attention(...)) with proj's bias; in (B,
 * T_loc, C) the first norm's output; d: C, NH, positions, CP; drop as
 * model_attention_forward's. comm: the column-parallel up projections'
 * (SP all-gather), k_pe's SP all-gather, CP's, the row-parallel proj's. */
mtc_result_t model_mla_forward(const tp_ctx *tp, float *out, model_mla_acts *a, const float *in,
                               const model_mla_params *w, const nn_dropout_spec *drop,
                               float *scratch, int B, int T, const model_block_dims *d,
                               const model_mla_opts *o);
/* din (B, T_loc, C) =; g += (the SP-partial ones as the header says).
 * With o->recompute_up the up projections and rotations run again first
 * (their forward collectives again). */
mtc_result_t model_mla_backward(const tp_ctx *tp, float *din, const model_mla_params *g,
                                const float *dout, model_mla_acts *a, const float *in,
                                const model_mla_params *w, const nn_dropout_spec *drop,
                                float *scratch, int B, int T, const model_block_dims *d,
                                const model_mla_opts *o);

#endif
